//! The autograd methods of `Tensor`: `requires_grad_`, `backward`, `grad`, hooks, `detach`.

use super::engine::{run_backward, BackwardOptions};
use super::node::GradFn;
use super::{GradHook, PostAccumulateGradHook};
use crate::{Error, Result, Tensor};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static HOOK_ID: AtomicU64 = AtomicU64::new(1);

/// Returned by [`Tensor::register_hook`] and [`Tensor::register_post_accumulate_grad_hook`];
/// pass it to [`Tensor::remove_hook`] to remove the hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookHandle(u64);

impl Tensor {
    /// Whether gradients flow to this tensor.
    pub fn requires_grad(&self) -> bool {
        let m = self.meta();
        m.requires_grad || super::view_meta::base_requires_grad(&m)
    }
    /// Sets whether this leaf requires grad (only float tensors can). Returns `self`.
    pub fn requires_grad_(&self, on: bool) -> Result<Tensor> {
        if on && !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: "requires_grad_",
                dtype: self.dtype(),
                hint: "; only floating-point tensors can require gradients".into(),
            });
        }
        super::view_meta::refresh(self)?;
        let mut m = self.meta();
        if m.grad_fn.is_some() {
            if !on {
                return Err(Error::invalid(
                    "requires_grad_",
                    "you can only change requires_grad of leaf tensors; use detach() to get a tensor out of the graph",
                ));
            }
            return Ok(self.clone());
        }
        m.requires_grad = on;
        drop(m);
        Ok(self.clone())
    }
    /// A leaf is a tensor with no `grad_fn` (made by the user, or not requiring grad).
    pub fn is_leaf(&self) -> bool {
        // a stale view (see `grad_fn`) is judged by the history it is about to get
        let _ = super::view_meta::refresh(self);
        self.meta().grad_fn.is_none()
    }
    /// The accumulated gradient, if any.
    pub fn grad(&self) -> Option<Tensor> {
        self.meta().grad.clone()
    }
    /// Replaces the gradient (`None` frees it, as `zero_grad(set_to_none=True)`).
    pub fn set_grad(&self, grad: Option<Tensor>) -> Result<()> {
        if let Some(g) = &grad {
            if g.shape() != self.shape() || g.dtype() != self.dtype() || g.device() != self.device()
            {
                return Err(Error::invalid(
                    "set_grad",
                    format!(
                        "the gradient ({:?}, {}, {}) must match the tensor ({:?}, {}, {})",
                        g.shape(),
                        g.dtype(),
                        g.device(),
                        self.shape(),
                        self.dtype(),
                        self.device()
                    ),
                ));
            }
        }
        self.meta().grad = grad;
        Ok(())
    }
    /// Fills the gradient with zeros in place (keeps its storage), or does nothing without one.
    pub fn zero_grad(&self) -> Result<()> {
        if let Some(g) = self.grad() {
            let _ng = super::no_grad();
            g.mul_(0)?;
        }
        Ok(())
    }
    /// The node that produced this tensor (`None` for leaves). For a view whose base was
    /// modified in place since, the history is regenerated from the base first (as PyTorch
    /// does), so this shows `AsStridedBackward`; a base written through a view shows
    /// `CopySlices`.
    pub fn grad_fn(&self) -> Option<GradFn> {
        // a stale view returned by split/chunk/unbind keeps its old node here; using it in an
        // op or in backward is the error
        let _ = super::view_meta::refresh(self);
        self.meta().grad_fn.clone().map(GradFn)
    }
    /// Backward from a scalar (one-element) tensor: d(self)/d(leaf) accumulates into every
    /// leaf's `.grad()`. The graph is freed afterwards.
    pub fn backward(&self) -> Result<()> {
        if self.numel() != 1 {
            return Err(Error::invalid(
                "backward",
                format!("grad can be implicitly created only for scalar outputs, got shape {:?}; use backward_with(grad, ...)", self.shape()),
            ));
        }
        let one = self.ones_like(crate::MemoryFormat::Contiguous)?;
        self.backward_with(&one, BackwardOptions::default())
    }
    /// Backward with an explicit output gradient and options.
    pub fn backward_with(&self, grad: &Tensor, opts: BackwardOptions) -> Result<()> {
        run_backward(&[(self.clone(), grad.clone())], opts, None).map(|_| ())
    }
    /// Keep `.grad()` for this non-leaf tensor too during backward.
    pub fn retain_grad(&self) -> Result<()> {
        if self.requires_grad() {
            super::view_meta::refresh(self)?;
        }
        let m = self.meta();
        if !m.requires_grad {
            return Err(Error::invalid(
                "retain_grad",
                "can't retain_grad on a tensor that doesn't require grad",
            ));
        }
        let Some(node) = m.grad_fn.clone() else {
            return Ok(());
        }; // leaves keep grads anyway
        let nr = m.output_nr;
        drop(m);
        self.meta().retains_grad = true;
        node.retained
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((nr, self.downgrade()));
        Ok(())
    }
    /// Registers a hook run on the gradient flowing into this tensor during backward; it may
    /// return a replacement gradient.
    pub fn register_hook(
        &self,
        hook: impl Fn(&Tensor) -> Result<Option<Tensor>> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        if self.requires_grad() {
            super::view_meta::refresh(self)?;
        }
        let m = self.meta();
        if !m.requires_grad {
            return Err(Error::invalid(
                "register_hook",
                "cannot register a hook on a tensor that doesn't require gradient",
            ));
        }
        let id = HOOK_ID.fetch_add(1, Ordering::Relaxed);
        let hook: GradHook = Arc::new(hook);
        match m.grad_fn.clone() {
            Some(node) => {
                let nr = m.output_nr;
                drop(m);
                node.hooks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((nr, hook));
                // remember the id on the tensor so remove_hook can find it
                self.meta()
                    .hooks
                    .push((id, Arc::new(|_: &Tensor| Ok(None))));
            }
            None => {
                drop(m);
                self.meta().hooks.push((id, hook));
            }
        }
        Ok(HookHandle(id))
    }
    /// Registers a hook run on this leaf once per backward pass, after every gradient
    /// contribution of that pass has been accumulated into its `.grad()` (PyTorch's
    /// `register_post_accumulate_grad_hook`). The hook gets the leaf itself, so
    /// `p.grad()` is final for this backward: a parameter used twice (tied weights) fires once,
    /// with the sum, and a `.grad()` left from an earlier backward is included, as
    /// accumulation does. It runs in the backward's grad mode (no grad unless `create_graph`).
    ///
    /// Not run by [`autograd::grad`](super::grad), which accumulates nothing, nor for a
    /// leaf that got no gradient in this backward. An error from the hook is what `backward()`
    /// returns. The hook may call [`autograd::queue_callback`](super::queue_callback) to run
    /// code once the whole backward has finished. Remove it with [`Tensor::remove_hook`].
    ///
    /// Only leaves that require grad can have one (an error otherwise): a non-leaf's gradient
    /// is never accumulated; use [`Tensor::register_hook`] for the gradient flowing into it.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use stride_core::Tensor;
    /// let w = Tensor::from_vec(vec![1.0f64, 2.0], [2])?.requires_grad_(true)?;
    /// let seen = Arc::new(Mutex::new(vec![]));
    /// let s = seen.clone();
    /// let h = w.register_post_accumulate_grad_hook(move |p| {
    ///     s.lock().unwrap().push(p.grad().unwrap().to_vec::<f64>()?);
    ///     Ok(())
    /// })?;
    /// // w is used twice: one call, with the summed gradient 2·w + 1
    /// w.mul(&w)?.add(&w)?.sum()?.backward()?;
    /// assert_eq!(*seen.lock().unwrap(), vec![vec![3.0, 5.0]]);
    /// w.remove_hook(h);
    /// w.sum()?.backward()?;
    /// assert_eq!(seen.lock().unwrap().len(), 1);
    /// assert!(w.mul(2.0)?.register_post_accumulate_grad_hook(|_| Ok(())).is_err()); // not a leaf
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn register_post_accumulate_grad_hook(
        &self,
        hook: impl Fn(&Tensor) -> Result<()> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        if !self.requires_grad() {
            return Err(Error::invalid(
                "register_post_accumulate_grad_hook",
                "cannot register a hook on a tensor that doesn't require gradient; call requires_grad_(true) on the leaf first",
            ));
        }
        super::view_meta::refresh(self)?;
        let mut m = self.meta();
        if m.grad_fn.is_some() || !m.requires_grad {
            let what = match &m.grad_fn {
                Some(node) => format!("this one was computed by {}", node.name),
                None => "this one is a view of one".into(),
            };
            return Err(Error::invalid(
                "register_post_accumulate_grad_hook",
                format!(
                    "post accumulate grad hooks cannot be registered on non-leaf tensors ({what}); register it on the leaf tensors it was computed from, or use register_hook for the gradient flowing into this tensor"
                ),
            ));
        }
        let id = HOOK_ID.fetch_add(1, Ordering::Relaxed);
        let hook: PostAccumulateGradHook = Arc::new(hook);
        m.post_accumulate_hooks.push((id, hook));
        Ok(HookHandle(id))
    }
    /// Removes a hook registered on a leaf with [`Tensor::register_hook`] or
    /// [`Tensor::register_post_accumulate_grad_hook`]. (Hooks of non-leaf tensors live until
    /// their graph is freed.)
    pub fn remove_hook(&self, handle: HookHandle) {
        let mut m = self.meta();
        m.hooks.retain(|(id, _)| *id != handle.0);
        m.post_accumulate_hooks.retain(|(id, _)| *id != handle.0);
    }
    /// A tensor sharing storage with this one, outside the graph (no grad_fn, no grad).
    pub fn detach(&self) -> Tensor {
        self.with_layout(self.layout().clone())
    }
    /// Detaches this tensor in place: it becomes a leaf that doesn't require grad. A view
    /// detached this way still shares its base's memory, so an in-place op on it while
    /// recording is an error (PyTorch refuses `detach_()` on views outright); prefer
    /// [`Tensor::detach`].
    pub fn detach_(&self) -> Tensor {
        let mut m = self.meta();
        m.grad_fn = None;
        m.requires_grad = false;
        super::view_meta::mark_detached(&mut m);
        drop(m);
        self.clone()
    }
}
