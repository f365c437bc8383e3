//! Functional forms of attention, rotary embeddings and normalisation (PyTorch's
//! `torch.nn.functional`), composed from stride-core ops so that autograd flows through them
//! and every backend runs them:
//!
//! - [`scaled_dot_product_attention`] (PyTorch's semantics, with grouped-query attention
//!   without repeating K/V, and fully masked rows giving zeros instead of NaN), plus
//!   [`causal_mask`] for the bottom-right (KV-cache) alignment;
//! - [`Rotary`]: rotary position embeddings in both conventions ([`RotaryStyle::HalfSplit`]
//!   for Hugging Face checkpoints, [`RotaryStyle::Interleaved`] for llama.cpp's GGUF files),
//!   with per-row position offsets, rotated by stride-core's fused [`stride_core::Tensor::rotary`]
//!   (gated MLPs: [`stride_core::Tensor::swiglu`], [`stride_core::Tensor::geglu`], [`stride_core::Tensor::gated`]);
//! - [`linear`] (the [`crate::Linear`] module's forward);
//! - [`rms_norm`] and [`layer_norm`] (the [`crate::RmsNorm`] and [`crate::LayerNorm`]
//!   modules call them): stride-core's fused kernels, one pass forward and backward;
//!   [`add_rms_norm`]: a residual add fused into the RMS norm's kernel.
//!
//! Half-precision inputs compute in f32 and round once to their dtype.

mod attention;
mod linear;
mod norm;
mod rotary;

pub use attention::{causal_mask, scaled_dot_product_attention};
pub use linear::linear;
pub use norm::{add_rms_norm, layer_norm, rms_norm};
pub use rotary::{Rotary, RotaryStyle, RowTables};
