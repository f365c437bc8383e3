//! [`Llama`]: the forward pass.

use super::fused::FusedProjection;
use super::{LlamaCache, LlamaConfig, LlamaWeights};
use crate::invalid;
use crate::lm::{CausalLm, DecodeGraph, KvCache, WeightFormat};
use std::collections::BTreeMap;
use std::path::Path;
use stride_core::{DType, Device, Error, Generator, KvCacheStep, Result, Tensor};
use stride_gguf::Gguf;
use stride_nn::functional::{
    add_rms_norm, rms_norm, scaled_dot_product_attention, Rotary, RotaryStyle,
};

/// A Llama-family causal language model for inference:
///
/// ```text
/// x = embed(tokens)
/// per block:  h = x + Wo · attn(rope(Wq·n), rope(Wk·n), Wv·n),   n = rmsnorm(x)     (GQA)
///             x = h + Wdown · (silu(Wgate·m) ⊙ Wup·m),            m = rmsnorm(h)
/// logits = rmsnorm(x) · Woutᵀ                                      (Wout = embed if tied)
/// ```
///
/// Attention is causal in absolute positions (a query at position `p` sees keys `≤ p`) and
/// reads the [`LlamaCache`]; linear layers are [`LinearWeight::forward`]: matmuls with the
/// transposed weight view, or quantized products (see "Quantized weights" below). The
/// forward pass adds no host wait of its own: masks, positions and cache offsets come from
/// host-side counters, never from reading a tensor (the token ids' bounds are checked on the
/// device). On CUDA a decode step can be captured once as a CUDA graph and replayed per
/// token ([`CausalLm::capture_decode`], [`super::LlamaDecodeGraph`]).
///
/// ```
/// use stride_core::{DType, Device, Tensor};
/// use stride_models::{llama::{Llama, LlamaConfig}, CausalLm, KvCache};
/// let config = LlamaConfig {
///     n_layers: 2, dim: 32, ffn_dim: 64, n_heads: 4, n_kv_heads: 2, head_dim: 8, rope_dim: 8,
///     rope_base: 10000.0, rms_eps: 1e-5, context_len: 64, vocab_size: 50,
///     tied_embeddings: true,
/// };
/// let model = Llama::random(config, DType::F32, &Device::Cpu, None)?;
/// let mut cache = model.new_cache(&[0], 16)?;                    // one row, 16 positions
/// let prompt = Tensor::from_vec(vec![1i64, 7, 3], [1, 3])?;
/// let logits = model.forward(&prompt, &mut cache)?;              // [1, 3, 50], f32
/// let next = logits.select(1, 2)?.argmax(Some(-1), false)?;          // greedy next token
/// let _ = model.forward(&next.unsqueeze(1)?, &mut cache)?;       // decode one step
/// assert_eq!(cache.len(), 4);
/// # Ok::<(), stride_core::Error>(())
/// ```
///
/// A real model (`no_run`: needs the file):
///
/// ```no_run
/// use stride_core::{DType, Device};
/// use stride_models::{llama::{Llama, WeightFormat}, CausalLm};
/// let path = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// // every weight dequantized to f32 (any device)
/// let model = Llama::from_gguf_file(path, DType::F32, &Device::Cpu)?;
/// assert_eq!(model.config().n_layers, 30);
/// // the matrices kept as Q4_1/Q8_0 blocks, multiplied the llama.cpp way (CPU)
/// let q = Llama::from_gguf_file_with(path, WeightFormat::Quantized, &Device::Cpu)?;
/// assert_eq!(q.weight_format(), WeightFormat::Quantized);
/// # Ok::<(), stride_core::Error>(())
/// ```
///
/// # Quantized weights
///
/// With [`WeightFormat::Quantized`] ([`Llama::from_gguf_quantized`]) each matrix whose GGUF
/// type has a CPU kernel stays as GGUF blocks ([`LinearWeight::Quantized`]): about 4.5–8.5
/// bits a weight instead of 32, and each product reads that many bytes, which is what bounds
/// decoding speed on a CPU. A product quantizes each activation row to 8 bits and sums exact
/// integer block products, as llama.cpp does, so the logits are llama.cpp's arithmetic, not
/// the f32 product with the dequantized weights (they differ by the activations' 8-bit
/// rounding). Activations and the KV cache are f32. On CUDA
/// ([`Llama::from_gguf_with`] with a CUDA device) the Q4_0 … Q8_0 matrices stay blocks in GPU
/// memory and the kernels give the CPU product's bits; the K-quants load dense there.
pub struct Llama {
    config: LlamaConfig,
    weights: LlamaWeights,
    /// Per layer, the q/k/v and the gate/up projections as one product each.
    fused: Vec<[FusedProjection; 2]>,
    rotary: Rotary,
    dtype: DType,
    device: Device,
    format: WeightFormat,
}

impl Llama {
    /// A model from its config and weights. `style` must match where the Q/K weights came
    /// from: [`RotaryStyle::Interleaved`] for GGUF files, [`RotaryStyle::HalfSplit`] for
    /// Hugging Face checkpoints (see [`super::weights`]).
    ///
    /// The weights must agree: dense tensors of one dtype on one device, or (when any matrix
    /// is quantized) every tensor on the quantized matrices' device — the CPU, or a CUDA GPU
    /// ([`LlamaWeights::quantized_to_device`]) — with the dense ones in f32.
    pub fn new(
        config: LlamaConfig,
        mut weights: LlamaWeights,
        style: RotaryStyle,
    ) -> Result<Llama> {
        let op = "Llama::new";
        config.validate(op, "")?;
        let quantized = weights.is_quantized();
        let (device, dtype) = match weights.matrices().find(|w| w.is_quantized()) {
            Some(q) => (q.device(), DType::F32),
            None => (weights.embed.device(), weights.embed.dtype()),
        };
        if let Some(w) = weights
            .matrices()
            .find(|w| w.is_quantized() && w.device() != device)
        {
            return Err(invalid(
                op,
                format!(
                    "the quantized matrices are on {} and {device}; put every weight on one device (LlamaWeights::quantized_to_device)",
                    w.device()
                ),
            ));
        }
        let dense = weights
            .layers
            .iter()
            .flat_map(|l| [&l.attn_norm, &l.ffn_norm])
            .chain([&weights.output_norm])
            .map(|t| (t.dtype(), t.device()))
            .chain(
                weights
                    .matrices()
                    .filter(|w| !w.is_quantized())
                    .map(|w| (w.dtype(), w.device())),
            );
        for (dt, dev) in dense {
            if dt != dtype || dev != device {
                return Err(invalid(
                    op,
                    format!(
                        "the weights mix {dt} on {dev} with {dtype} on {device}{}; load every tensor in one dtype on one device",
                        if quantized {
                            " (quantized weights need their dense tensors in f32 on the quantized matrices' device)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        }
        let format = if quantized {
            WeightFormat::Quantized
        } else {
            WeightFormat::Dequantized(dtype)
        };
        let fused = weights
            .layers
            .iter_mut()
            .map(|l| {
                Ok([
                    FusedProjection::fuse(&mut [&mut l.wq, &mut l.wk, &mut l.wv])?,
                    FusedProjection::fuse(&mut [&mut l.w_gate, &mut l.w_up])?,
                ])
            })
            .collect::<Result<Vec<_>>>()?;
        let rotary = Rotary::new(
            config.rope_dim,
            config.rope_base,
            config.context_len,
            style,
            &device,
        )?;
        Ok(Llama {
            config,
            weights,
            fused,
            rotary,
            dtype,
            device,
            format,
        })
    }

    /// Loads a `llama` GGUF file (any quantization stride-gguf dequantizes) to `dtype` on
    /// `device`, with the interleaved rotary that llama.cpp's permuted Q/K weights need.
    /// The same as [`Llama::from_gguf_with`] with [`WeightFormat::Dequantized`]`(dtype)`.
    pub fn from_gguf(g: &Gguf, dtype: DType, device: &Device) -> Result<Llama> {
        Llama::from_gguf_with(g, WeightFormat::Dequantized(dtype), device)
    }

    /// Loads a `llama` GGUF file keeping its weight matrices quantized on the CPU
    /// ([`LlamaWeights::from_gguf_quantized`]; see "Quantized weights" above).
    pub fn from_gguf_quantized(g: &Gguf) -> Result<Llama> {
        Llama::from_gguf_with(g, WeightFormat::Quantized, &Device::Cpu)
    }

    /// Loads a `llama` GGUF file with its weights held as `format` says, on `device`.
    /// [`WeightFormat::Quantized`] on a CUDA device keeps the Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0
    /// matrices as blocks in its memory, multiplied by CUDA kernels that give the CPU
    /// product's bits; the embedding table, the norms and matrices of other types are dense
    /// f32 there ([`LlamaWeights::quantized_to_device`]).
    pub fn from_gguf_with(g: &Gguf, format: WeightFormat, device: &Device) -> Result<Llama> {
        let config = LlamaConfig::from_gguf(g)?;
        let weights = match format {
            WeightFormat::Dequantized(dtype) => LlamaWeights::from_gguf(g, &config, dtype, device)?,
            WeightFormat::Quantized if device.is_cpu() => {
                LlamaWeights::from_gguf_quantized(g, &config)?
            }
            WeightFormat::Quantized => {
                LlamaWeights::from_gguf_quantized(g, &config)?.quantized_to_device(device)?
            }
        };
        Llama::new(config, weights, RotaryStyle::Interleaved)
    }

    /// [`Llama::from_gguf`] of the file at `path` (memory-mapped).
    pub fn from_gguf_file(path: impl AsRef<Path>, dtype: DType, device: &Device) -> Result<Llama> {
        Llama::from_gguf_file_with(path, WeightFormat::Dequantized(dtype), device)
    }

    /// [`Llama::from_gguf_with`] of the file at `path` (memory-mapped: a quantized load
    /// copies each matrix's blocks once, and the mapping is dropped when this returns).
    pub fn from_gguf_file_with(
        path: impl AsRef<Path>,
        format: WeightFormat,
        device: &Device,
    ) -> Result<Llama> {
        let path = path.as_ref();
        let g = Gguf::open(path)
            .map_err(|e| invalid("Llama::from_gguf_file", format!("{}: {e}", path.display())))?;
        Llama::from_gguf_with(&g, format, device)
    }

    /// Whether a GGUF file's weight matrices can be kept quantized: true when at least one
    /// of the `llama` matrices (`token_embd`, `blk.N.attn_q` …, `output`) is of a type with
    /// a CPU kernel. A default for callers choosing a [`WeightFormat`] (the `stride` CLI
    /// does: quantized on the CPU when this holds).
    pub fn gguf_has_quantized_matrices(g: &Gguf) -> bool {
        g.tensors().iter().any(|t| {
            t.dims.len() == 2
                && stride_quant::ActFormat::for_weights(t.ggml_type).is_some()
                && (t.name.starts_with("blk.")
                    || t.name == "token_embd.weight"
                    || t.name == "output.weight")
        })
    }

    /// Loads a Hugging Face checkpoint: its `config.json` and its safetensors files (all
    /// shards), with the half-split rotary of HF's `rotate_half`.
    pub fn from_safetensors(
        config_json: impl AsRef<Path>,
        files: &[impl AsRef<Path>],
        dtype: DType,
        device: &Device,
    ) -> Result<Llama> {
        let op = "Llama::from_safetensors";
        let cj = config_json.as_ref();
        let text = std::fs::read_to_string(cj)
            .map_err(|e| invalid(op, format!("cannot read {}: {e}", cj.display())))?;
        let config = LlamaConfig::from_hf_json(&text)?;
        let mut tensors = BTreeMap::new();
        for f in files {
            tensors.extend(stride_nn::safetensors::load(f)?);
        }
        let mut config = config;
        // a checkpoint without lm_head.weight is tied whatever config.json says
        if !tensors.contains_key("lm_head.weight") {
            config.tied_embeddings = true;
        }
        let weights = LlamaWeights::from_hf_tensors(&tensors, &config, dtype, device)?;
        Llama::new(config, weights, RotaryStyle::HalfSplit)
    }

    /// A model with random weights ([`LlamaWeights::random`]) in the GGUF convention.
    pub fn random(
        config: LlamaConfig,
        dtype: DType,
        device: &Device,
        gen: Option<&Generator>,
    ) -> Result<Llama> {
        config.validate("Llama::random", "")?;
        let weights = LlamaWeights::random(&config, dtype, device, gen)?;
        Llama::new(config, weights, RotaryStyle::Interleaved)
    }

    /// The hyperparameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }
    /// The weights.
    pub fn weights(&self) -> &LlamaWeights {
        &self.weights
    }
    /// The dtype of the activations and the cache (and of the weights when dequantized;
    /// f32 with quantized weights).
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// How the weights are held: [`WeightFormat::Quantized`] when any matrix is quantized.
    pub fn weight_format(&self) -> WeightFormat {
        self.format
    }
    /// The rotary convention in use.
    pub fn rotary_style(&self) -> RotaryStyle {
        self.rotary.style()
    }
}

impl CausalLm for Llama {
    type Cache = LlamaCache;
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }
    fn context_len(&self) -> usize {
        self.config.context_len
    }
    fn device(&self) -> Device {
        self.device
    }
    fn weight_format(&self) -> Option<WeightFormat> {
        Some(self.format)
    }
    fn weight_bytes(&self) -> Option<usize> {
        Some(self.weights.nbytes())
    }
    /// A cache for `left_pad.len()` rows of up to `capacity` positions, at most the model's
    /// context length (the rotary tables' length).
    fn new_cache(&self, left_pad: &[usize], capacity: usize) -> Result<LlamaCache> {
        let c = &self.config;
        LlamaCache::new(
            c.n_layers,
            left_pad,
            c.n_kv_heads,
            capacity,
            c.context_len,
            c.head_dim,
            self.dtype,
            &self.device,
        )
    }

    /// Captures a decode step as a CUDA graph ([`super::LlamaDecodeGraph`]); `None` on the
    /// CPU.
    fn capture_decode<'m>(
        &'m self,
        cache: &mut LlamaCache,
    ) -> Result<Option<Box<dyn DecodeGraph<LlamaCache> + 'm>>> {
        if self.device.is_cpu() {
            return Ok(None);
        }
        Ok(Some(Box::new(super::LlamaDecodeGraph::capture(
            self, cache,
        )?)))
    }

    fn forward(&self, tokens: &Tensor, cache: &mut LlamaCache) -> Result<Tensor> {
        let op = "Llama::forward";
        let c = &self.config;
        if tokens.dtype() != DType::I64 {
            return Err(Error::UnsupportedDType {
                op,
                dtype: tokens.dtype(),
                hint: "; token ids must be i64".into(),
            });
        }
        if tokens.device() != self.device {
            return Err(Error::DeviceMismatch {
                op,
                a: self.device,
                b: tokens.device(),
            });
        }
        if tokens.dim() != 2 || tokens.shape()[0] != cache.batch() {
            return Err(invalid(
                op,
                format!(
                    "tokens must be [batch = {}, t] (the cache's rows), got shape {:?}",
                    cache.batch(),
                    tokens.shape()
                ),
            ));
        }
        let (b, t) = (tokens.shape()[0], tokens.shape()[1]);
        cache.check_call(
            op,
            t,
            c.n_layers,
            c.n_kv_heads,
            c.head_dim,
            self.dtype,
            &self.device,
        )?;
        let s = cache.len + t;
        if t == 0 {
            return Tensor::zeros([b, 0, c.vocab_size], DType::F32, &self.device);
        }
        let logits = self.step(tokens, cache, Positions::Host)?;
        cache.len = s;
        Ok(logits)
    }
}

/// Where a forward pass finds the positions of its tokens.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Positions {
    /// From the cache's host-side length: the keys read are exactly `0..len + t` (copied
    /// into `len_t` for the cached-attention op).
    Host,
    /// From the cache's device-side length (one token per row, `len_t` already set): the
    /// same kernels serve every position (a captured decode step).
    Device,
}

impl Llama {
    /// The forward pass of `tokens` `(B, T)` after what `cache` holds (checked by the
    /// caller), writing the cache's keys and values; the caller advances `cache.len`.
    pub(crate) fn step(
        &self,
        tokens: &Tensor,
        cache: &LlamaCache,
        at: Positions,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (b, t) = (tokens.shape()[0], tokens.shape()[1]);
        let (hq, hk, hd, d) = (c.n_heads, c.n_kv_heads, c.head_dim, c.dim);
        let (bi, ti) = (b as i64, t as i64);
        let eps = Some(c.rms_eps);

        // A GPU decode step (one token per row), and any step where the fused attention
        // kernel does not run (f32 on CUDA, where attention would be composed), uses one op
        // that rotates, writes the cache and attends, reading the cache length on the device
        // and splitting the keys over blocks. Elsewhere (a prompt on the GPU, every step on
        // the CPU) the cache is written by rotary + copy ops and read by the fused attention
        // kernel under a mask (the whole buffer for a captured step). Why: docs/PERFORMANCE.md.
        let cached = !stride_core::attention_supported(self.device, self.dtype, hd, hd)
            || (!self.device.is_cpu() && t == 1);
        let visible = match (cached, at) {
            (true, Positions::Host) => {
                cache.len_t.fill_(cache.len as i64)?;
                None
            }
            (true, Positions::Device) => None,
            (false, Positions::Host) => {
                let (mask, offsets) = cache.visibility(t)?;
                Some((mask, self.rotary.row_tables(4, t, self.dtype, &offsets)?))
            }
            (false, Positions::Device) => {
                let (mask, positions) = cache.step_on_device()?;
                Some((mask, self.rotary.row_tables_at(4, &positions, self.dtype)?))
            }
        };
        let (cos, sin) = self.rotary.angle_tables(self.dtype);
        let padded = cache.left_pad.iter().any(|&p| p > 0);

        let w = &self.weights;
        let mut x = w.embed.embedding(tokens)?; // (B, T, D)
                                                // each residual add is fused with the norm that follows it (the next layer's
                                                // attention norm, or the output norm)
        let first = w.layers.first().map_or(&w.output_norm, |l| &l.attn_norm);
        let mut n = rms_norm(&x, &[d], Some(first), eps)?;
        for (l, (layer, [qkv, gate_up])) in w.layers.iter().zip(&self.fused).enumerate() {
            let heads = |y: &Tensor, n: usize| -> Result<Tensor> {
                y.reshape(&[bi, ti, n as i64, hd as i64])?
                    .permute(&[0, 2, 1, 3]) // (B, n, T, hd)
            };
            let proj = qkv.forward(&[&layer.wq, &layer.wk, &layer.wv], &n)?;
            let (q, k, v) = (
                heads(&proj[0], hq)?,
                heads(&proj[1], hk)?,
                heads(&proj[2], hk)?,
            );
            let a = match &visible {
                None => q.attention_with_kv_cache(&KvCacheStep {
                    k_cache: &cache.k[l],
                    v_cache: &cache.v[l],
                    k: &k,
                    v: &v,
                    len: &cache.len_t,
                    start: padded.then_some(&cache.pad_t),
                    rotary: Some((cos, sin, self.rotary.style())),
                    scale: None,
                })?,
                Some((mask, rope)) => {
                    let q = self.rotary.apply_row_tables(&q, rope)?;
                    let k = self.rotary.apply_row_tables(&k, rope)?;
                    let (keys, values) = match at {
                        Positions::Host => cache.append(l, &k, &v)?,
                        Positions::Device => cache.append_on_device(l, &k, &v)?,
                    };
                    scaled_dot_product_attention(
                        &q,
                        &keys,
                        &values,
                        Some(mask),
                        0.0,
                        false,
                        None,
                        true,
                    )?
                }
            }
            .permute(&[0, 2, 1, 3])?
            .reshape(&[bi, ti, (hq * hd) as i64])?;
            let (h, m) =
                add_rms_norm(&x, &layer.wo.forward(&a)?, &[d], Some(&layer.ffn_norm), eps)?;
            let gu = gate_up.forward(&[&layer.w_gate, &layer.w_up], &m)?;
            let next = w.layers.get(l + 1).map_or(&w.output_norm, |n| &n.attn_norm);
            (x, n) = add_rms_norm(
                &h,
                &layer.w_down.forward_swiglu(&gu[0], &gu[1])?,
                &[d],
                Some(next),
                eps,
            )?;
        }
        let logits = w.lm_head.forward(&n)?.to_dtype(DType::F32)?;
        Ok(logits)
    }
}
