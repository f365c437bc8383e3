//! # stride-nn
//!
//! Neural-network modules, losses, initialisers, optimizers and learning-rate schedulers for
//! stride, with PyTorch's names and semantics:
//!
//! - [`Module`] (PyTorch's `nn.Module`): dotted parameter names, buffers, train/eval, dtype
//!   moves, parameter counts, [`StateDict`]s with strict and non-strict loading;
//! - layers: [`Linear`], [`Embedding`], [`LayerNorm`], [`RmsNorm`], [`Dropout`],
//!   [`Sequential`], activations, [`mlp`];
//! - [`functional`]: scaled dot-product attention, rotary embeddings, rms_norm/layer_norm;
//! - [`loss`]: mse, l1, smooth_l1, cross_entropy, nll, binary_cross_entropy(_with_logits);
//! - [`init`]: uniform/normal/constant, kaiming and xavier, trunc_normal, orthogonal;
//! - [`safetensors`]: reading and writing the safetensors format (state dicts, checkpoints);
//! - [`optim`]: SGD, Adam, AdamW with PyTorch's exact update order, parameter groups, state
//!   dicts, LR schedulers, gradient clipping, and the **update-health check** that reports a
//!   parameter with a gradient that did not move.
//!
//! ```
//! use stride_nn::{mlp, Activation, Factory, Module, loss, optim::{Optimizer, Sgd, SgdConfig}};
//! use stride_core::{manual_seed, DType, Device, Tensor};
//! manual_seed(0);
//! let net = mlp(&[2, 8, 1], Activation::Tanh, &Factory::default())?;
//! let mut opt = Sgd::new(net.named_parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() })?;
//! let x = Tensor::randn([16, 2], DType::F32, &Device::Cpu, None)?;
//! let y = x.sum_dims(&[1], true)?;
//! let mut losses = vec![];
//! for _ in 0..20 {
//!     opt.zero_grad()?;
//!     let l = loss::mse_loss(&net.forward(&x)?, &y, loss::Reduction::Mean)?;
//!     l.backward()?;
//!     opt.step()?;
//!     losses.push(l.item::<f32>()?);
//! }
//! assert!(losses[19] < losses[0]);
//! # Ok::<(), stride_core::Error>(())
//! ```

// `!(x >= 0.0)` is deliberate throughout: it also refuses NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod data;
mod ddp;
pub mod functional;
pub mod init;
mod layers;
pub mod loss;
mod module;
pub mod optim;
pub mod safetensors;

pub use data::DistributedSampler;
pub use ddp::{DdpConfig, DistributedDataParallel, NoSync};
pub use layers::{
    finfo_eps, mlp, Activation, Dropout, Embedding, Factory, Gelu, GeluTanh, Identity, LayerNorm,
    LeakyRelu, Linear, Relu, RmsNorm, Sequential, Sigmoid, Silu, Softplus, Tanh,
};
pub use module::{Buffer, LoadReport, Mode, Module, Parameter, ShapeMismatch, StateDict, Visitor};

/// An `Error::Invalid` for this crate's ops.
pub(crate) fn invalid(op: &'static str, msg: impl Into<String>) -> stride_core::Error {
    stride_core::Error::Invalid {
        op,
        msg: msg.into(),
    }
}
