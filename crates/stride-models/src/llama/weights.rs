//! [`LlamaWeights`]: the tensors of a Llama model, loaded from GGUF (llama.cpp's names) or
//! from Hugging Face safetensors (`model.layers.N.…` names).
//!
//! **Rotary convention.** llama.cpp's converter (`convert_hf_to_gguf.py`, `LlamaModel.permute`)
//! reorders the rows of every head of `attn_q` and `attn_k` from Hugging Face's half-split
//! layout `(2, head_dim/2)` to adjacent pairs `(head_dim/2, 2)`, so that llama.cpp's
//! `LLAMA_ROPE_TYPE_NORM` rotation of pairs `(2i, 2i+1)` computes what HF's `rotate_half`
//! computes on the original rows. The weights are therefore loaded as they are stored, and
//! the model built from a GGUF file uses [`RotaryStyle::Interleaved`], the one built from
//! safetensors [`RotaryStyle::HalfSplit`] (see [`super::Llama`]). Mixing them up gives no
//! error, just nonsense — the tests check that both files of one model give one output.

use super::{LinearWeight, LlamaConfig};
use crate::invalid;
use std::collections::BTreeMap;
use std::sync::Arc;
use stride_core::{DType, Device, Generator, Result, Tensor};
use stride_gguf::Gguf;
use stride_quant::{ActFormat, DeviceQMatrix, QMatrix};

#[allow(unused_imports)]
use stride_nn::functional::RotaryStyle;

/// The weights of one transformer block (PyTorch's `(out_features, in_features)` layout).
/// The norms are dense tensors; each matrix is a [`LinearWeight`], dense or quantized.
#[derive(Clone)]
pub struct LlamaLayer {
    /// `(dim)`.
    pub attn_norm: Tensor,
    /// `(n_heads·head_dim, dim)`, rows in the file's order (see the module docs).
    pub wq: LinearWeight,
    /// `(n_kv_heads·head_dim, dim)`.
    pub wk: LinearWeight,
    /// `(n_kv_heads·head_dim, dim)`.
    pub wv: LinearWeight,
    /// `(dim, n_heads·head_dim)`.
    pub wo: LinearWeight,
    /// `(dim)`.
    pub ffn_norm: Tensor,
    /// `(ffn_dim, dim)`.
    pub w_gate: LinearWeight,
    /// `(ffn_dim, dim)`.
    pub w_up: LinearWeight,
    /// `(dim, ffn_dim)`.
    pub w_down: LinearWeight,
}

/// Every tensor of a Llama model: dense tensors in one dtype on one device
/// ([`LlamaWeights::from_gguf`], [`LlamaWeights::from_hf_tensors`],
/// [`LlamaWeights::random`]), or the matrices kept as GGUF blocks on the CPU with `f32`
/// norms ([`LlamaWeights::from_gguf_quantized`]).
#[derive(Clone)]
pub struct LlamaWeights {
    /// `(vocab, dim)`: gathered by token id.
    pub embed: LinearWeight,
    pub layers: Vec<LlamaLayer>,
    /// `(dim)`.
    pub output_norm: Tensor,
    /// `(vocab, dim)`: the same weight as `embed` when tied (for a quantized table, the same
    /// `Arc<QMatrix>`: one copy in memory).
    pub lm_head: LinearWeight,
}

fn gguf_err(op: &'static str) -> impl Fn(stride_gguf::GgufError) -> stride_core::Error {
    move |e| invalid(op, e.to_string())
}

/// The info of GGUF tensor `name`, checked to have the shape the config needs.
fn gguf_tensor<'a>(
    g: &'a Gguf,
    name: &str,
    want: &[usize],
    op: &'static str,
) -> Result<&'a stride_gguf::TensorInfo> {
    let info = g.tensor(name).map_err(gguf_err(op))?;
    if info.shape() != want {
        return Err(invalid(
            op,
            format!(
                "tensor {name} has shape {:?} (ggml dims {:?}); the config needs {want:?}",
                info.shape(),
                info.dims
            ),
        ));
    }
    Ok(info)
}

/// The names of block `i`'s tensors, GGUF first, Hugging Face second.
const BLOCK_NAMES: [(&str, &str); 9] = [
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// The expected shape of block tensor `k` (index into [`BLOCK_NAMES`]).
fn block_shape(c: &LlamaConfig, k: usize) -> Vec<usize> {
    let (d, q, kv, f) = (
        c.dim,
        c.n_heads * c.head_dim,
        c.n_kv_heads * c.head_dim,
        c.ffn_dim,
    );
    match k {
        0 | 5 => vec![d],
        1 => vec![q, d],
        2 | 3 => vec![kv, d],
        4 => vec![d, q],
        6 | 7 => vec![f, d],
        _ => vec![d, f],
    }
}

/// A norm vector: always loaded dense (the loaders never quantize 1-D tensors).
fn dense(w: LinearWeight) -> Result<Tensor> {
    match w {
        LinearWeight::Dense(t) => Ok(t),
        q => Err(invalid(
            "LlamaWeights",
            format!("a norm vector was loaded as a quantized {q:?}; norms must be dense"),
        )),
    }
}

impl LlamaWeights {
    fn assemble(
        c: &LlamaConfig,
        mut get: impl FnMut(&str, Vec<usize>) -> Result<LinearWeight>,
        gguf_names: bool,
    ) -> Result<LlamaWeights> {
        let (embed_name, norm_name, head_name) = if gguf_names {
            ("token_embd.weight", "output_norm.weight", "output.weight")
        } else {
            (
                "model.embed_tokens.weight",
                "model.norm.weight",
                "lm_head.weight",
            )
        };
        let embed = get(embed_name, vec![c.vocab_size, c.dim])?;
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let mut t = Vec::with_capacity(9);
            for (k, (g, h)) in BLOCK_NAMES.iter().enumerate() {
                let name = if gguf_names {
                    format!("blk.{i}.{g}.weight")
                } else {
                    format!("model.layers.{i}.{h}.weight")
                };
                t.push(get(&name, block_shape(c, k))?);
            }
            let mut t = t.into_iter();
            let mut n = || t.next().expect("nine tensors");
            layers.push(LlamaLayer {
                attn_norm: dense(n())?,
                wq: n(),
                wk: n(),
                wv: n(),
                wo: n(),
                ffn_norm: dense(n())?,
                w_gate: n(),
                w_up: n(),
                w_down: n(),
            });
        }
        let output_norm = dense(get(norm_name, vec![c.dim])?)?;
        let lm_head = if c.tied_embeddings {
            embed.clone()
        } else {
            get(head_name, vec![c.vocab_size, c.dim])?
        };
        Ok(LlamaWeights {
            embed,
            layers,
            output_norm,
            lm_head,
        })
    }

    /// Dequantizes every tensor of a `llama` GGUF file to `dtype` (f32, f16, bf16 or f64)
    /// on `device`. The Q/K rows are kept in llama.cpp's permuted order: use them with
    /// [`RotaryStyle::Interleaved`].
    pub fn from_gguf(
        g: &Gguf,
        c: &LlamaConfig,
        dtype: DType,
        device: &Device,
    ) -> Result<LlamaWeights> {
        let op = "LlamaWeights::from_gguf";
        check_dtype(op, dtype)?;
        LlamaWeights::assemble(
            c,
            |name, want| {
                gguf_tensor(g, name, &want, op)?;
                let data = g.dequantize(name).map_err(gguf_err(op))?;
                Ok(Tensor::from_vec(data, want)?
                    .to_dtype(dtype)?
                    .to_device(device)?
                    .into())
            },
            true,
        )
    }

    /// Loads a `llama` GGUF file keeping its weight matrices quantized, on the CPU: every
    /// 2-D tensor whose GGUF type has a `stride_quant` kernel (Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q8_0, Q4_K, Q5_K, Q6_K) becomes a [`LinearWeight::Quantized`] (its blocks copied
    /// once, never expanded to `f32`); the other tensors (norms, F32/F16/BF16 matrices,
    /// quantized types without a kernel such as Q2_K) are dequantized to `f32` as
    /// [`LlamaWeights::from_gguf`] does. A tied output head shares the embedding's blocks.
    /// Q/K rows in llama.cpp's permuted order: use them with [`RotaryStyle::Interleaved`].
    pub fn from_gguf_quantized(g: &Gguf, c: &LlamaConfig) -> Result<LlamaWeights> {
        let op = "LlamaWeights::from_gguf_quantized";
        LlamaWeights::assemble(
            c,
            |name, want| {
                let info = gguf_tensor(g, name, &want, op)?;
                if want.len() == 2 && ActFormat::for_weights(info.ggml_type).is_some() {
                    let q = QMatrix::from_gguf(g, name)
                        .map_err(|e| invalid(op, format!("tensor {name}: {e}")))?;
                    return Ok(LinearWeight::Quantized(Arc::new(q)));
                }
                let data = g.dequantize(name).map_err(gguf_err(op))?;
                Ok(Tensor::from_vec(data, want)?.into())
            },
            true,
        )
    }

    /// These weights with their quantized matrices on `device` (a CUDA GPU), for
    /// [`Llama::new`](super::Llama::new): each [`LinearWeight::Quantized`] of a type with a
    /// CUDA kernel (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) becomes a [`LinearWeight::QuantizedCuda`]
    /// (its blocks copied once; a tied head shares them); the embedding table, quantized
    /// matrices of other types (the K-quants) and every dense tensor become dense `f32`
    /// tensors on `device` (the embedding is a gather, which has no quantized kernel there).
    /// On the CPU this is a copy of `self`.
    ///
    /// ```no_run
    /// use stride_core::Device;
    /// use stride_gguf::Gguf;
    /// use stride_models::llama::{LlamaConfig, LlamaWeights};
    /// let g = Gguf::open("model.gguf")?;
    /// let c = LlamaConfig::from_gguf(&g)?;
    /// let w = LlamaWeights::from_gguf_quantized(&g, &c)?.quantized_to_device(&Device::Cuda(0))?;
    /// assert!(w.is_quantized());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn quantized_to_device(&self, device: &Device) -> Result<LlamaWeights> {
        const OP: &str = "LlamaWeights::quantized_to_device";
        if device.is_cpu() {
            return Ok(self.clone());
        }
        // uploaded blocks by host matrix, so that a tied head is uploaded once and shared
        let mut uploaded: Vec<(*const QMatrix, Arc<DeviceQMatrix>)> = Vec::new();
        let mut mv = |w: &LinearWeight, dense_only: bool| -> Result<LinearWeight> {
            match w {
                LinearWeight::Dense(t) => Ok(t.to_dtype(DType::F32)?.to_device(device)?.into()),
                LinearWeight::Quantized(q) if !dense_only && q.has_cuda_kernel() => {
                    let key = Arc::as_ptr(q);
                    if let Some((_, d)) = uploaded.iter().find(|(k, _)| *k == key) {
                        return Ok(LinearWeight::QuantizedCuda(d.clone()));
                    }
                    let d = Arc::new(
                        q.to_device(device)
                            .map_err(|e| invalid(OP, e.to_string()))?,
                    );
                    uploaded.push((key, d.clone()));
                    Ok(LinearWeight::QuantizedCuda(d))
                }
                LinearWeight::Quantized(_) => {
                    Ok(w.dequantized(DType::F32)?.to_device(device)?.into())
                }
                LinearWeight::QuantizedCuda(q) if q.device() == *device && !dense_only => {
                    Ok(w.clone())
                }
                LinearWeight::QuantizedCuda(_) => {
                    Ok(w.dequantized(DType::F32)?.to_device(device)?.into())
                }
            }
        };
        let embed = mv(&self.embed, true)?;
        let mut layers = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            layers.push(LlamaLayer {
                attn_norm: l.attn_norm.to_dtype(DType::F32)?.to_device(device)?,
                wq: mv(&l.wq, false)?,
                wk: mv(&l.wk, false)?,
                wv: mv(&l.wv, false)?,
                wo: mv(&l.wo, false)?,
                ffn_norm: l.ffn_norm.to_dtype(DType::F32)?.to_device(device)?,
                w_gate: mv(&l.w_gate, false)?,
                w_up: mv(&l.w_up, false)?,
                w_down: mv(&l.w_down, false)?,
            });
        }
        let output_norm = self.output_norm.to_dtype(DType::F32)?.to_device(device)?;
        let lm_head = mv(&self.lm_head, false)?;
        Ok(LlamaWeights {
            embed,
            layers,
            output_norm,
            lm_head,
        })
    }

    /// Whether any matrix is held quantized.
    pub fn is_quantized(&self) -> bool {
        self.matrices().any(|w| w.is_quantized())
    }

    /// Every weight matrix: the embedding, each block's seven, and the output head (the
    /// embedding again when tied).
    pub fn matrices(&self) -> impl Iterator<Item = &LinearWeight> {
        std::iter::once(&self.embed)
            .chain(
                self.layers
                    .iter()
                    .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]),
            )
            .chain(std::iter::once(&self.lm_head))
    }

    /// The bytes held by the weights (quantized blocks as stored; a tied head counted once).
    pub fn nbytes(&self) -> usize {
        let tied = match (&self.embed, &self.lm_head) {
            (LinearWeight::Quantized(a), LinearWeight::Quantized(b)) => Arc::ptr_eq(a, b),
            (LinearWeight::QuantizedCuda(a), LinearWeight::QuantizedCuda(b)) => Arc::ptr_eq(a, b),
            (LinearWeight::Dense(a), LinearWeight::Dense(b)) => a.shares_storage_with(b),
            _ => false,
        };
        let norms: usize = self
            .layers
            .iter()
            .map(|l| l.attn_norm.nbytes() + l.ffn_norm.nbytes())
            .sum::<usize>()
            + self.output_norm.nbytes();
        let m: usize = self.matrices().map(|w| w.nbytes()).sum();
        norms + m - if tied { self.lm_head.nbytes() } else { 0 }
    }

    /// Reads Hugging Face names (`model.embed_tokens.weight`, `model.layers.N.self_attn.
    /// q_proj.weight`, …, `lm_head.weight` unless tied) from `tensors`, cast to `dtype` and
    /// moved to `device`. Q/K rows in HF's order: use them with [`RotaryStyle::HalfSplit`].
    pub fn from_hf_tensors(
        tensors: &BTreeMap<String, Tensor>,
        c: &LlamaConfig,
        dtype: DType,
        device: &Device,
    ) -> Result<LlamaWeights> {
        let op = "LlamaWeights::from_hf_tensors";
        check_dtype(op, dtype)?;
        LlamaWeights::assemble(
            c,
            |name, want| {
                let t = tensors.get(name).ok_or_else(|| {
                    invalid(
                        op,
                        format!("tensor {name} is missing from the safetensors files"),
                    )
                })?;
                if t.shape() != want {
                    return Err(invalid(
                        op,
                        format!(
                            "tensor {name} has shape {:?}; the config needs {want:?}",
                            t.shape()
                        ),
                    ));
                }
                Ok(t.to_dtype(dtype)?.to_device(device)?.into())
            },
            false,
        )
    }

    /// Random weights for `c` (normal, std 0.02 for matrices; norms `1 + N(0, 0.1)`), for
    /// examples and tests.
    pub fn random(
        c: &LlamaConfig,
        dtype: DType,
        device: &Device,
        gen: Option<&Generator>,
    ) -> Result<LlamaWeights> {
        check_dtype("LlamaWeights::random", dtype)?;
        LlamaWeights::assemble(
            c,
            |_, want| {
                let r = Tensor::randn(want.clone(), DType::F32, &Device::Cpu, gen)?;
                let t = if want.len() == 1 {
                    r.mul(0.1)?.add(1.0)?
                } else {
                    r.mul(0.02)?
                };
                Ok(t.to_dtype(dtype)?.to_device(device)?.into())
            },
            true,
        )
    }
}

fn check_dtype(op: &'static str, dtype: DType) -> Result<()> {
    if !dtype.is_float() {
        return Err(stride_core::Error::UnsupportedDType {
            op,
            dtype,
            hint: "; Llama weights load as f32, f16, bf16 or f64".into(),
        });
    }
    Ok(())
}
