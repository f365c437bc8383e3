//! What generation, chat and perplexity need from a language model: a causal model that
//! appends to a key/value cache and returns logits. [`crate::llama::Llama`] implements it; the
//! sampling loop, the perplexity sweep and the CLI are written against this trait only.

use stride_core::{DType, Device, Result, Tensor};

/// A key/value cache for one batch of sequences, preallocated for `capacity()` positions.
pub trait KvCache {
    /// Positions written so far (the same for every row of the batch; left padding counts).
    fn len(&self) -> usize;
    /// True before the first forward call.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The most positions the cache holds.
    fn capacity(&self) -> usize;
    /// Forgets every position after the first `len` (e.g. to re-prefill after a rollback).
    fn truncate(&mut self, len: usize) -> Result<()>;
    /// The number of rows (sequences) in the batch.
    fn batch(&self) -> usize;
}

/// A causal language model that appends to a [`KvCache`].
pub trait CausalLm {
    /// The cache type this model writes.
    type Cache: KvCache;
    /// Number of logits per position.
    fn vocab_size(&self) -> usize;
    /// The longest sequence the model was trained for (its `context_length`).
    fn context_len(&self) -> usize;
    /// Where the weights live; token tensors must be there too.
    fn device(&self) -> Device;
    /// A cache for `left_pad.len()` rows holding up to `capacity` positions. Row `b` starts
    /// with `left_pad[b]` padding positions: they are never attended to, and the row's first
    /// real token gets rotary position 0 (batch generation of prompts of different lengths).
    fn new_cache(&self, left_pad: &[usize], capacity: usize) -> Result<Self::Cache>;
    /// `tokens`: `[batch, t]` i64 token ids on [`CausalLm::device`]. Writes the keys and values
    /// of positions `cache.len()..cache.len() + t` in place and returns the logits of those
    /// positions, `[batch, t, vocab]` in f32 (whatever the weights' dtype). The logits at a
    /// position do not depend on how the sequence was split into calls.
    fn forward(&self, tokens: &Tensor, cache: &mut Self::Cache) -> Result<Tensor>;
    /// How the model holds its weights, for reports (`None`: the model doesn't say).
    fn weight_format(&self) -> Option<WeightFormat> {
        None
    }
    /// The bytes of the model's weights (quantized blocks counted as stored), for reports.
    /// `memory_stats` counts tensors only, so this is where quantized weights show.
    fn weight_bytes(&self) -> Option<usize> {
        None
    }
    /// One decode step — one new token per row of `cache` — captured as a CUDA graph and
    /// replayed per token ([`DecodeGraph`]), or `None` where the model or its device has
    /// no captured path (the CPU; the default). Needs room for one more position in
    /// `cache`; the capture writes nothing the next step does not overwrite.
    fn capture_decode<'m>(
        &'m self,
        cache: &mut Self::Cache,
    ) -> Result<Option<Box<dyn DecodeGraph<Self::Cache> + 'm>>> {
        let _ = cache;
        Ok(None)
    }
}

/// A decode step captured once and replayed per token (see [`CausalLm::capture_decode`]):
/// the same logits as [`CausalLm::forward`] of one token per row (the same kernels, but
/// attention runs over the whole cache buffer under a mask, so sums may round
/// differently), in one launch instead of hundreds.
pub trait DecodeGraph<C: KvCache> {
    /// [`CausalLm::forward`] of `tokens` `[batch, 1]`: appends to `cache` (the one captured
    /// with) and returns the logits `[batch, 1, vocab]` (f32, a fresh tensor).
    fn forward(&self, tokens: &Tensor, cache: &mut C) -> Result<Tensor>;
}

/// How a model's weight matrices are held in memory (a load option, e.g. of
/// [`crate::llama::Llama::from_gguf_with`]).
///
/// - `Dequantized(dtype)`: every tensor is dequantized at load to `dtype` (f32, f16, bf16 or
///   f64) on the chosen device, and the products are stride-core matmuls in that dtype. Any
///   GGUF type stride-gguf reads works, on every device.
/// - `Quantized`: the weight matrices whose GGUF type has a CPU kernel in `stride_quant`
///   (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) stay as GGUF blocks in host memory
///   and are multiplied the way llama.cpp does (activations quantized to 8 bits per row,
///   exact integer block products); everything else (norms, F16/F32 matrices, types
///   without a kernel) is dequantized to f32. Activations and the KV cache are f32. On a
///   CUDA device the Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 matrices stay blocks in GPU memory
///   (the CUDA kernels give the CPU's bits); the K-quants are dequantized there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightFormat {
    /// Dequantized at load to this dtype.
    Dequantized(DType),
    /// Kept as GGUF blocks.
    Quantized,
}

impl std::fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WeightFormat::Dequantized(d) => write!(f, "dequantized ({d})"),
            WeightFormat::Quantized => f.write_str("quantized"),
        }
    }
}
