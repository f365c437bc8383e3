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

use super::LlamaConfig;
use crate::invalid;
use std::collections::BTreeMap;
use stride_core::{DType, Device, Generator, Result, Tensor};
use stride_gguf::Gguf;

#[allow(unused_imports)]
use stride_nn::functional::RotaryStyle;

/// The weights of one transformer block (PyTorch's `(out_features, in_features)` layout).
#[derive(Clone)]
pub struct LlamaLayer {
    pub attn_norm: Tensor,
    pub wq: Tensor,
    pub wk: Tensor,
    pub wv: Tensor,
    pub wo: Tensor,
    pub ffn_norm: Tensor,
    pub w_gate: Tensor,
    pub w_up: Tensor,
    pub w_down: Tensor,
}

/// Every tensor of a Llama model, in one dtype on one device.
#[derive(Clone)]
pub struct LlamaWeights {
    /// `(vocab, dim)`.
    pub embed: Tensor,
    pub layers: Vec<LlamaLayer>,
    /// `(dim)`.
    pub output_norm: Tensor,
    /// `(vocab, dim)`: the same tensor as `embed` when tied.
    pub lm_head: Tensor,
}

fn gguf_err(op: &'static str) -> impl Fn(stride_gguf::GgufError) -> stride_core::Error {
    move |e| invalid(op, e.to_string())
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

impl LlamaWeights {
    fn assemble(
        c: &LlamaConfig,
        mut get: impl FnMut(&str, Vec<usize>) -> Result<Tensor>,
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
                attn_norm: n(),
                wq: n(),
                wk: n(),
                wv: n(),
                wo: n(),
                ffn_norm: n(),
                w_gate: n(),
                w_up: n(),
                w_down: n(),
            });
        }
        let output_norm = get(norm_name, vec![c.dim])?;
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
                let data = g.dequantize(name).map_err(gguf_err(op))?;
                Tensor::from_vec(data, want)?
                    .to_dtype(dtype)?
                    .to_device(device)
            },
            true,
        )
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
                t.to_dtype(dtype)?.to_device(device)
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
                t.to_dtype(dtype)?.to_device(device)
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
