//! Reverse-mode automatic differentiation with PyTorch's semantics.
//!
//! Ops on tensors that require grad record a [`node::Node`] (visible as `y.grad_fn()`, e.g.
//! `MulBackward`); `loss.backward()` walks the graph in reverse topological order, sums
//! gradients at branch points and accumulates them into leaves' `.grad()`. The graph and its
//! saved tensors are freed after backward unless `retain_graph` is set.
//!
//! - modes: [`no_grad`], [`enable_grad`], [`inference_mode`] (RAII guards);
//! - functional API: [`grad`], [`value_and_grad`] (with `create_graph` for higher order);
//! - hooks: [`Tensor::register_hook`] (on the gradient flowing into a tensor),
//!   [`Tensor::register_post_accumulate_grad_hook`] (on a leaf once its `.grad` is final for a
//!   backward) and [`queue_callback`] (code run when the backward in progress has finished),
//!   the pieces a DistributedDataParallel overlaps its gradient all-reduces with;
//! - safety: a tensor saved for backward and then modified in place makes backward fail with
//!   the op's name and both versions, as PyTorch does;
//! - in-place ops on non-leaf tensors are differentiable (`record::in_place`), and so are
//!   in-place ops through views: the view's base gets the history `CopySlices` and every view
//!   of that base regenerates its own history from the base when next used (`view_meta`,
//!   `copy_slices`). In-place ops on a leaf that requires grad or on a view of one, on a view
//!   returned by `split`/`chunk`/`unbind`, or on a view made under `no_grad` from a tensor that
//!   requires grad are errors that say what to do, as in PyTorch.
//!
//! ```
//! use stride_core::{DType, Device, Tensor};
//! let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [4])?.requires_grad_(true)?;
//! let y = x.clone_tensor()?.mul(1.0)?;
//! y.select(0, 1)?.mul_(3.0)?; // y[1] *= 3, through a view
//! assert_eq!(y.grad_fn().unwrap().name(), "CopySlices");
//! y.sum()?.backward()?;
//! assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![1.0, 3.0, 1.0, 1.0]);
//! assert!(x.select(0, 0)?.mul_(2.0).is_err()); // a view of a leaf that requires grad
//! # Ok::<(), stride_core::Error>(())
//! ```
//!
//! ```
//! use stride_core::{DType, Device, Tensor};
//! let a = Tensor::scalar(2.0, DType::F64, &Device::Cpu)?.requires_grad_(true)?;
//! let b = Tensor::scalar(3.0, DType::F64, &Device::Cpu)?.requires_grad_(true)?;
//! let c = a.mul(&b)?;
//! let d = a.add(&b)?;
//! let e = c.mul(&d)?;
//! let l = e.mul(&e)?;
//! l.backward()?;
//! assert_eq!(a.grad().unwrap().item::<f64>()?, 1260.0);
//! assert_eq!(b.grad().unwrap().item::<f64>()?, 960.0);
//! # Ok::<(), stride_core::Error>(())
//! ```

mod callbacks;
mod copy_slices;
mod engine;
pub(crate) mod formulas;
mod functional;
mod gradcheck;
mod mode;
pub(crate) mod node;
pub(crate) mod record;
mod tensor_api;
pub(crate) mod view_meta;

pub use callbacks::queue_callback;
pub use engine::BackwardOptions;
pub use functional::{grad, value_and_grad, GradOptions};
pub use gradcheck::{gradcheck, gradgradcheck, GradcheckOptions};
pub use mode::{
    enable_grad, inference_mode, is_grad_enabled, is_inference_mode, no_grad, GradModeGuard,
};
pub use node::{GradFn, NextFn};
pub use tensor_api::HookHandle;

use crate::{Result, Tensor};
use node::Node;
use std::sync::Arc;

/// A gradient hook: sees the gradient flowing into a tensor and may replace it (return
/// `Some(new)`) or keep it (`None`).
pub type GradHook = Arc<dyn Fn(&Tensor) -> Result<Option<Tensor>> + Send + Sync>;

/// A post-accumulate-grad hook: sees the leaf tensor itself once its `.grad` holds every
/// contribution of the backward pass (see [`Tensor::register_post_accumulate_grad_hook`]).
pub type PostAccumulateGradHook = Arc<dyn Fn(&Tensor) -> Result<()> + Send + Sync>;

/// Autograd state of one tensor.
#[derive(Default)]
pub(crate) struct AutogradMeta {
    pub requires_grad: bool,
    pub grad: Option<Tensor>,
    pub grad_fn: Option<Arc<Node>>,
    pub output_nr: usize,
    pub retains_grad: bool,
    pub hooks: Vec<(u64, GradHook)>,
    /// Leaves only: run once per backward after the last gradient was accumulated into `grad`.
    /// Ids come from the same counter as `hooks`, so `remove_hook` removes either kind.
    pub post_accumulate_hooks: Vec<(u64, PostAccumulateGradHook)>,
    /// Created inside `inference_mode`: may never be saved for backward.
    pub inference: bool,
    /// Set on float tensors made by a view op: the base they share storage with, and whether
    /// their `grad_fn` is current (see [`view_meta`]). `None` for every other tensor.
    pub view: Option<view_meta::ViewInfo>,
}
