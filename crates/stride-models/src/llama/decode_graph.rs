//! [`LlamaDecodeGraph`]: a [`Llama`] decode step captured as a CUDA graph.

use super::model::Positions;
use super::{Llama, LlamaCache};
use crate::invalid;
use crate::lm::{CausalLm, DecodeGraph, KvCache};
use stride_core::cuda::CudaGraph;
use stride_core::{DType, Error, Result, Tensor};

/// One decode step of a [`Llama`] on CUDA captured once and replayed with one launch per
/// token. Made by [`crate::CausalLm::capture_decode`].
///
/// The captured step reads everything that changes from device memory: the token ids from
/// its own input buffer (copied in before each replay), the position from the cache's
/// device-side length (set before each replay), which
/// [`Tensor::attention_with_kv_cache`](stride_core::Tensor::attention_with_kv_cache) reads
/// to rotate, write the new keys and values, and attend to the positions written so far
/// (f32; in f16/bf16 the rotary rows are gathered, the keys and values written with an
/// `index_copy_`, and the fused attention kernel reads the whole buffer under a mask). The graph holds the model's and the
/// cache's buffers by address: it borrows the model, and keeps the cache's buffers alive.
pub struct LlamaDecodeGraph<'m> {
    model: &'m Llama,
    graph: CudaGraph,
    /// The step's input ids `[batch, 1]`.
    tokens: Tensor,
    /// The step's output `[batch, 1, vocab]` f32, rewritten by each replay.
    logits: Tensor,
    cache_id: u64,
    /// The cache's buffers the graph writes (kept alive with it).
    _buffers: Vec<Tensor>,
}

impl<'m> LlamaDecodeGraph<'m> {
    /// Captures the step for `cache` (CUDA only; room for one more position needed). Runs
    /// the step once eagerly first — it compiles the kernels and writes only position
    /// `cache.len()`, which the next step overwrites — then captures it.
    pub(crate) fn capture(model: &'m Llama, cache: &mut LlamaCache) -> Result<Self> {
        let op = "Llama::capture_decode";
        let dev = model.device();
        if dev.is_cpu() {
            return Err(invalid(
                op,
                format!("CUDA graphs need a CUDA device, the model is on {dev}"),
            ));
        }
        let c = model.config();
        cache.check_call(
            op,
            1,
            c.n_layers,
            c.n_kv_heads,
            c.head_dim,
            model.dtype(),
            &dev,
        )?;
        let tokens = Tensor::zeros([cache.batch(), 1], DType::I64, &dev)?;
        cache.len_t.fill_(cache.len as i64)?;
        // eager warm-up: compiles every kernel and makes any lazily created state
        model.step(&tokens, cache, Positions::Device)?;
        let (graph, logits) =
            CudaGraph::capture(&dev, || model.step(&tokens, cache, Positions::Device))?;
        let mut buffers = cache.k.clone();
        buffers.extend(cache.v.iter().cloned());
        buffers.push(cache.len_t.clone());
        buffers.push(cache.pad_t.clone());
        Ok(LlamaDecodeGraph {
            model,
            graph,
            tokens,
            logits,
            cache_id: cache.id,
            _buffers: buffers,
        })
    }
}

impl DecodeGraph<LlamaCache> for LlamaDecodeGraph<'_> {
    fn forward(&self, tokens: &Tensor, cache: &mut LlamaCache) -> Result<Tensor> {
        let op = "LlamaDecodeGraph::forward";
        let m = self.model;
        if cache.id != self.cache_id {
            return Err(invalid(
                op,
                "this cache is not the one the step was captured with; capture a step for it (capture_decode)",
            ));
        }
        if tokens.dtype() != DType::I64 {
            return Err(Error::UnsupportedDType {
                op,
                dtype: tokens.dtype(),
                hint: "; token ids must be i64".into(),
            });
        }
        let dev = m.device();
        if tokens.shape() != self.tokens.shape() || tokens.device() != dev {
            return Err(invalid(
                op,
                format!(
                    "tokens must be [batch = {}, 1] on {}, got {:?} on {}",
                    cache.batch(),
                    dev,
                    tokens.shape(),
                    tokens.device()
                ),
            ));
        }
        let c = m.config();
        cache.check_call(op, 1, c.n_layers, c.n_kv_heads, c.head_dim, m.dtype(), &dev)?;
        self.tokens.copy_(tokens)?;
        cache.len_t.fill_(cache.len as i64)?;
        self.graph.replay()?;
        cache.len += 1;
        // a copy: the graph's own output is rewritten by the next replay
        self.logits.clone_tensor()
    }
}
