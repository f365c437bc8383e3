//! Views remember their base, so that in-place ops through them stay differentiable
//! (PyTorch's `DifferentiableViewMeta`).
//!
//! Every float tensor made by a view op (`select`, `narrow`, `slice`, `transpose`, `diagonal`,
//! `expand`, `as_strided`, …) records its **base**: the root tensor, itself not a view, whose
//! storage it shares (a view of a view points at the root). Its **geometry** relative to the
//! base is simply its own layout — shape, strides and storage offset address the same
//! storage as the base's layout, and layouts never change in stride, so nothing else is kept.
//! The cost is one reference count and the storage version: no allocation.
//!
//! Two things use it:
//!
//! - an in-place op through a view, while recording, gives the *base* a new history
//!   (`CopySlices`, see `copy_slices.rs`) and then regenerates the view's;
//! - every other view of that base may now hold a stale `grad_fn` (it describes the base as it
//!   was). A view remembers the storage version at which its `grad_fn` was set; when the
//!   version has moved (the base or any view of it was written in place) the view's history is
//!   regenerated from the base's current one — an `AsStridedBackward` of the base, with the
//!   view's geometry — the next time the view is used by an op or by backward ([`refresh`]).
//!   PyTorch does exactly this.
//!
//! How the view was made decides what is allowed ([`ViewCreation`]): views returned by ops that
//! return several views (`split`, `chunk`, `unbind`) and views made under `no_grad` from a
//! tensor that requires grad may not be modified in place while recording, and a stale view
//! returned by `split`/`chunk`/`unbind` is an error when used, as in PyTorch.

use super::mode::is_grad_enabled;
use super::node::Node;
use super::record::make_node;
use super::AutogradMeta;
use crate::autograd::formulas::views::as_strided_backward;
use crate::{Error, Result, Tensor};
use std::sync::{Arc, Weak};

/// How a view was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ViewCreation {
    /// By a view op while recording, or from a base that did not require grad.
    Default,
    /// One of the views returned together by `split`/`chunk`/`unbind` (the op's name).
    MultiOutput(&'static str),
    /// Under `no_grad` or `inference_mode`, from a base that required grad: a constant.
    NoGrad,
    /// Detached in place with `detach_()`: a constant that still aliases its base.
    Detached,
}

impl ViewCreation {
    /// Whether the view's history follows its base's (regenerated when stale).
    fn follows_base(self) -> bool {
        matches!(self, ViewCreation::Default | ViewCreation::MultiOutput(_))
    }
}

/// What a view knows about its base.
pub(crate) struct ViewInfo {
    /// The root (non-view) tensor whose storage this view shares.
    pub base: Tensor,
    /// The storage version when this view's `grad_fn` was set: if the storage has been
    /// written since, the `grad_fn` may be stale.
    pub version: u64,
    pub creation: ViewCreation,
}

/// Marks `out`, just made by a view op from `x`, as a view of `x`'s base. Non-float views are
/// not tracked (they never take part in autograd).
pub(crate) fn mark_view(x: &Tensor, out: &Tensor) {
    if !out.dtype().is_float() {
        return;
    }
    let (base, inherited) = {
        let m = x.meta();
        match &m.view {
            Some(v) => (v.base.clone(), v.creation),
            None => (x.clone(), ViewCreation::Default),
        }
    };
    // a view of a view made under no_grad / by split is still one
    let creation = if !is_grad_enabled() && base.meta().requires_grad {
        ViewCreation::NoGrad
    } else {
        inherited
    };
    let version = out.version();
    out.meta().view = Some(ViewInfo {
        base,
        version,
        creation,
    });
}

/// Marks the views returned together by `op` (split, chunk, unbind).
pub(crate) fn mark_multi_output(op: &'static str, outs: &[Tensor]) {
    for o in outs {
        if let Some(v) = o.meta().view.as_mut() {
            if matches!(
                v.creation,
                ViewCreation::Default | ViewCreation::MultiOutput(_)
            ) {
                v.creation = ViewCreation::MultiOutput(op);
            }
        }
    }
}

/// `detach_()` on a view: it keeps aliasing its base but no longer follows its history.
pub(crate) fn mark_detached(m: &mut AutogradMeta) {
    if let Some(v) = m.view.as_mut() {
        v.creation = ViewCreation::Detached;
    }
}

/// Whether a tensor with this meta requires grad because it is a view of a base that does
/// (its own flag aside): a view made while recording follows its base.
pub(crate) fn base_requires_grad(m: &AutogradMeta) -> bool {
    match &m.view {
        Some(v) if v.creation.follows_base() => v.base.meta().requires_grad,
        _ => false,
    }
}

/// Brings a view's `grad_fn` up to date: if its base (or another view of it) was written in
/// place since the view's `grad_fn` was set, the history is regenerated from the base's
/// current one (`AsStridedBackward` of the base). A no-op for tensors that are not views (one
/// lock, no allocation). Errors for a stale view returned by `split`/`chunk`/`unbind`.
pub(crate) fn refresh(t: &Tensor) -> Result<()> {
    let (base, creation) = {
        let m = t.meta();
        let Some(v) = &m.view else { return Ok(()) };
        if !v.creation.follows_base() {
            return Ok(());
        }
        let base_rg = v.base.meta().requires_grad;
        let moved = t.version() != v.version;
        let stale = if base_rg {
            // written since, or made before its base started requiring grad
            moved || (m.grad_fn.is_none() && !m.requires_grad)
        } else {
            moved && m.grad_fn.is_some()
        };
        if !stale {
            return Ok(());
        }
        (v.base.clone(), v.creation)
    };
    if let ViewCreation::MultiOutput(op) = creation {
        return Err(Error::invalid(
            "autograd",
            format!(
                "a view returned by {op} is used after its base (or another view of that base) was modified in place; {op} returns several views and their histories can't be regenerated (PyTorch refuses this too). Call {op} after the in-place op, or clone_tensor() the views (PyTorch's clone()) before it"
            ),
        ));
    }
    regenerate(&base, t)
}

/// Gives `view` the history "the view's geometry, read from `base` as it is now". The
/// history belongs to the tensor, not to an op being recorded, so grad mode doesn't matter:
/// backward seeds its roots, and `grad_fn()` may be asked, under `no_grad`.
pub(crate) fn regenerate(base: &Tensor, view: &Tensor) -> Result<()> {
    let _recording = super::mode::enable_grad();
    let (bl, vl) = (base.layout().clone(), view.layout().clone());
    let node = make_node("AsStridedBackward", &[base], &[view], &[], move |g| {
        Ok(vec![Some(as_strided_backward(&g[0], &bl, &vl)?)])
    })?;
    set_history(view, node.map(|n| (n, 0)));
    Ok(())
}

/// Replaces `t`'s history by output `nr` of `node` (or by none: `t` becomes a constant).
/// A view's version is brought up to date; a retained `.grad` follows the new history, as in
/// PyTorch (hooks stay where they are: they see the gradient of the value they were
/// registered on).
pub(crate) fn set_history(t: &Tensor, history: Option<(Arc<Node>, usize)>) {
    let version = t.version();
    let mut m = t.meta();
    let old = m.grad_fn.take().map(|n| (n, m.output_nr));
    match &history {
        Some((n, nr)) => {
            m.grad_fn = Some(n.clone());
            m.output_nr = *nr;
            m.requires_grad = true;
        }
        None => {
            m.output_nr = 0;
            m.requires_grad = false;
        }
    }
    if let Some(v) = m.view.as_mut() {
        v.version = version;
    }
    let retains = m.retains_grad;
    drop(m);
    if !retains {
        return;
    }
    let me = t.downgrade();
    if let Some((n, nr)) = old {
        n.retained
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(o, w)| !(*o == nr && Weak::ptr_eq(w, &me)));
    }
    match history {
        Some((n, nr)) => n
            .retained
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((nr, me)),
        None => t.meta().retains_grad = false,
    }
}
