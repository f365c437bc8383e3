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
//!   written against.

pub mod llama;
pub mod lm;
pub mod sae;
pub mod synthetic;
pub mod train; // TEMPORARY until stride_nn::safetensors lands

pub use lm::{CausalLm, KvCache};
pub use sae::{SaeConfig, TopKSae};
pub use synthetic::{SyntheticConfig, SyntheticData};
pub use train::{Evaluation, HealthLog, SaeTrainer, StepResult, TrainConfig};

/// An `Error::Invalid` for this crate.
pub(crate) fn invalid(op: &'static str, msg: impl Into<String>) -> stride_core::Error {
    stride_core::Error::Invalid {
        op,
        msg: msg.into(),
    }
}
