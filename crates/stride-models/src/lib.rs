//! # stride-models
//!
//! Complete models built on stride-core and stride-nn — the layer between the framework and
//! the `stride` command line:
//!
//! - [`sae`]: the **TopK sparse autoencoder** with a tied initialisation (the encoder weight
//!   is `decoder.weight.t().clone()`, a non-contiguous tensor);
//! - [`synthetic`]: seeded synthetic data of sparse features in superposition;
//! - [`train`]: the training loop behind `stride train sae` — Adam, evaluation (fraction of
//!   variance explained), dead latents, the update-health check, and checkpoints (one
//!   safetensors file) that resume on the same loss curve, bit for bit;
//! - [`llama`]: Llama-family language models (SmolLM2, Llama 2/3) from GGUF or safetensors;
//! - [`lm`]: the [`CausalLm`]/[`KvCache`] contract that generation, chat and perplexity are
//!   written against;
//! - [`sampling`]: choosing the next token on the model's device (repetition penalty,
//!   top-k, top-p, min-p, temperature, a seeded draw that gives the same tokens on every
//!   device);
//! - [`generate`]: batched generation with left padding, streaming text, stop strings and
//!   timings, and [`Chat`], multi-turn conversations that keep their KV cache;
//! - [`perplexity`]: sliding-window perplexity with per-position data;
//! - [`hub`]: the cache directory and the files fetched into it (the SmolLM2 GGUF, the
//!   Shakespeare text);
//! - [`toy`]: a small n-gram [`CausalLm`] and a byte tokenizer with known answers, for tests
//!   and examples.

mod checkpoint;
pub mod generate;
pub mod gpt;
pub mod hub;
pub mod llama;
pub mod lm;
mod loss_log;
pub mod perplexity;
pub mod sae;
pub mod sampling;
pub mod synthetic;
pub mod toy;
pub mod train; // TEMPORARY until stride_nn::safetensors lands

pub use generate::{
    generate, generate_text, Chat, Completion, FinishReason, GenerateConfig, Generation,
    GenerationStats,
};
pub use lm::{CausalLm, DecodeGraph, KvCache, WeightFormat};
pub use perplexity::{perplexity, PerplexityConfig, PerplexityResult};
pub use sae::{SaeConfig, TopKSae};
pub use sampling::{Sampler, SamplingConfig};
pub use synthetic::{SyntheticConfig, SyntheticData};
pub use train::{Evaluation, HealthLog, SaeTrainer, StepResult, TrainConfig};

/// An `Error::Invalid` for this crate.
pub(crate) fn invalid(op: &'static str, msg: impl Into<String>) -> stride_core::Error {
    stride_core::Error::Invalid {
        op,
        msg: msg.into(),
    }
}
