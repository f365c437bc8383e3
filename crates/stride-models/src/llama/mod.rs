//! Llama-family causal language models (Llama 2/3, SmolLM2, …) from GGUF or Hugging Face
//! safetensors files: [`LlamaConfig`], [`LlamaWeights`], the preallocated [`LlamaCache`] and
//! the model [`Llama`], which implements [`crate::CausalLm`].

mod cache;
mod config;
mod model;
mod weights;

pub use cache::LlamaCache;
pub use config::LlamaConfig;
pub use model::Llama;
pub use weights::{LlamaLayer, LlamaWeights};
