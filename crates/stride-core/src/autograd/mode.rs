//! Grad modes: thread-local, nestable, restored on drop (RAII), as PyTorch's
//! `torch.no_grad()`, `torch.enable_grad()` and `torch.inference_mode()`.

use std::cell::Cell;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    static INFERENCE: Cell<bool> = const { Cell::new(false) };
}

/// Whether ops record the graph on this thread now.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}
/// Whether this thread is inside [`inference_mode`].
pub fn is_inference_mode() -> bool {
    INFERENCE.with(|g| g.get())
}

/// Restores the previous grad mode when dropped.
#[must_use = "the mode lasts as long as the guard lives: bind it with `let _g = ...`"]
pub struct GradModeGuard {
    prev_grad: bool,
    prev_inference: bool,
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.prev_grad));
        INFERENCE.with(|g| g.set(self.prev_inference));
    }
}

fn set(grad: bool, inference: Option<bool>) -> GradModeGuard {
    let guard = GradModeGuard {
        prev_grad: is_grad_enabled(),
        prev_inference: is_inference_mode(),
    };
    GRAD_ENABLED.with(|g| g.set(grad));
    if let Some(i) = inference {
        INFERENCE.with(|g| g.set(i));
    }
    guard
}

/// Ops run inside the guard's lifetime record no graph.
///
/// ```
/// use stride_core::{autograd, DType, Device, Tensor};
/// let w = Tensor::ones([2], DType::F32, &Device::Cpu)?.requires_grad_(true)?;
/// let y = {
///     let _g = autograd::no_grad();
///     w.mul(2.0)?
/// };
/// assert!(y.grad_fn().is_none() && !y.requires_grad());
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn no_grad() -> GradModeGuard {
    set(false, None)
}
/// Re-enables recording inside a `no_grad` (not inside `inference_mode`'s tensors).
pub fn enable_grad() -> GradModeGuard {
    set(true, Some(false))
}
/// Like `no_grad`, and tensors created inside are marked as inference tensors: they can never
/// be saved for a backward pass later (an error, as in PyTorch).
pub fn inference_mode() -> GradModeGuard {
    set(false, Some(true))
}
