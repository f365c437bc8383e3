//! Llama-family causal language models (Llama 2/3, SmolLM2, …) from GGUF or Hugging Face
//! safetensors files: [`LlamaConfig`], [`LlamaWeights`] (each matrix a [`LinearWeight`]:
//! dense, or GGUF blocks kept quantized — see [`WeightFormat`]), the preallocated
//! [`LlamaCache`] and the model [`Llama`], which implements [`crate::CausalLm`].

mod cache;
mod config;
mod decode_graph;
mod fused;
mod linear;
mod model;
#[cfg(test)]
mod quant_tests;
mod weights;

pub use crate::lm::WeightFormat;
pub use cache::LlamaCache;
pub use config::LlamaConfig;
pub use decode_graph::LlamaDecodeGraph;
pub use linear::LinearWeight;
pub use model::Llama;
pub use weights::{LlamaLayer, LlamaWeights};
