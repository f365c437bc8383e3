//! How op frontends record themselves: `record(...)` after computing outputs, and
//! `in_place(...)` to make an in-place op differentiable (through views too: `CopySlices`).

use super::copy_slices::in_place_on_view;
use super::mode::is_grad_enabled;
use super::node::{BackwardFn, Edge, Node, SavedVersion, TensorMeta};
use super::view_meta::{refresh, set_history};
use crate::{Error, Result, Tensor};
use std::sync::Arc;

/// Whether an op on these inputs records a node.
pub(crate) fn needs_grad(inputs: &[&Tensor]) -> bool {
    is_grad_enabled() && inputs.iter().any(|t| t.requires_grad())
}

/// The edge a gradient for `t` follows. A view whose base was modified in place since its
/// `grad_fn` was set gets its history regenerated first (`view_meta::refresh`).
pub(crate) fn edge_of(t: &Tensor) -> Result<Option<Edge>> {
    if !t.requires_grad() {
        return Ok(None);
    }
    refresh(t)?;
    let m = t.meta();
    Ok(Some(match &m.grad_fn {
        Some(n) => Edge::Node(n.clone(), m.output_nr),
        None => Edge::Leaf(t.downgrade()),
    }))
}

/// Builds the node `name` for `inputs` → `outputs` without attaching it to the outputs
/// (see [`record`]); `None` when nothing needs a gradient.
pub(crate) fn make_node(
    name: &'static str,
    inputs: &[&Tensor],
    outputs: &[&Tensor],
    saved: &[(&Tensor, &'static str)],
    backward: impl FnMut(&[Tensor]) -> Result<Vec<Option<Tensor>>> + Send + 'static,
) -> Result<Option<Arc<Node>>> {
    if !needs_grad(inputs) || !outputs.iter().any(|o| o.dtype().is_float()) {
        return Ok(None);
    }
    for (t, what) in saved {
        if t.meta().inference {
            return Err(Error::invalid(
                name,
                format!("{what} is an inference tensor (made in inference_mode) and cannot be saved for backward; make a clone_tensor() of it (PyTorch's clone()) outside inference_mode"),
            ));
        }
    }
    let edges = inputs
        .iter()
        .map(|t| edge_of(t))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Node::new(
        name,
        edges,
        inputs.iter().map(|t| TensorMeta::of(t)).collect(),
        outputs.iter().map(|t| TensorMeta::of(t)).collect(),
        saved
            .iter()
            .map(|(t, what)| SavedVersion {
                storage: t.storage().clone(),
                version: t.version(),
                what,
            })
            .collect(),
        Box::new(backward) as BackwardFn,
    )))
}

/// Records `name` with `inputs` → `outputs`. `saved` are the tensors the backward closure
/// captured (checked against later in-place modification). Outputs of non-float dtype never
/// require grad. A no-op when no input requires grad or grad mode is off.
///
/// The outputs are results of this op, not views: one that aliases an internal temporary
/// (a reshape of a fresh buffer) forgets that base, and view ops mark their outputs
/// afterwards (`view_meta::mark_view`).
pub(crate) fn record(
    name: &'static str,
    inputs: &[&Tensor],
    outputs: &[&Tensor],
    saved: &[(&Tensor, &'static str)],
    backward: impl FnMut(&[Tensor]) -> Result<Vec<Option<Tensor>>> + Send + 'static,
) -> Result<()> {
    let Some(node) = make_node(name, inputs, outputs, saved, backward)? else {
        return Ok(());
    };
    for (i, o) in outputs.iter().enumerate() {
        if o.dtype().is_float() {
            let mut m = o.meta();
            m.grad_fn = Some(node.clone());
            m.output_nr = i;
            m.requires_grad = true;
            let stale_base = m.view.take();
            drop(m);
            drop(stale_base);
        }
    }
    Ok(())
}

/// Runs an in-place op so that autograd sees it, as PyTorch does.
///
/// - Not recording (grad mode off, or no operand requires grad): just runs `kernel`.
/// - `self` is not a view: the op is computed out of place by `functional` on a (recorded)
///   clone of `self`, so ordinary nodes are recorded and the nodes that saved `self` keep the
///   value they saw; the result is written into `self` through its layout, and `self`'s
///   history is rebased onto the result's node.
/// - `self` is a view of a base `b`: the same out-of-place computation `r = f(self)`, the
///   write through `self`'s layout, then `b` gets the history `CopySlices` (gradient for
///   `b`'s old history: the incoming gradient with `self`'s region zeroed; for `r`: the
///   incoming gradient seen through `self`'s geometry) and `self` the history "its geometry,
///   read from the new `b`". Other views of `b` regenerate their histories when next used.
///
/// Errors, before anything is written (as in PyTorch): `self` a leaf that requires grad, or
/// a view of one; `self` one of the views returned by `split`/`chunk`/`unbind`; `self` a view
/// made under `no_grad` from a tensor that requires grad (or `detach_()`ed).
pub(crate) fn in_place(
    op: &'static str,
    this: &Tensor,
    others: &[&Tensor],
    kernel: impl FnOnce() -> Result<Tensor>,
    functional: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let recording =
        is_grad_enabled() && (this.requires_grad() || others.iter().any(|t| t.requires_grad()));
    if !recording {
        return kernel();
    }
    let view = this
        .meta()
        .view
        .as_ref()
        .map(|v| (v.base.clone(), v.creation));
    if let Some((base, creation)) = view {
        return in_place_on_view(op, this, &base, creation, functional);
    }
    if this.requires_grad() && this.is_leaf() {
        return Err(Error::invalid(
            op,
            "a leaf tensor that requires grad is being used in an in-place operation; wrap the update in no_grad() (as optimizers do) or use the out-of-place op",
        ));
    }
    // compute on a clone so the nodes that saved `this` keep the value they saw
    let original = this.clone_tensor()?;
    let result = functional(&original)?;
    {
        let _g = super::no_grad();
        crate::ops::output::copy_into(op, &result, this)?;
    }
    // a result with no history (fill_) makes `this` a constant: no gradient flows back
    let history = {
        let m = result.meta();
        m.grad_fn.clone().map(|n| (n, m.output_nr))
    };
    set_history(this, history);
    Ok(this.clone())
}

/// `_out` forms are not differentiable (as in PyTorch): refuse them when recording is on.
pub(crate) fn forbid_out(op: &'static str, inputs: &[&Tensor]) -> Result<()> {
    if needs_grad(inputs) {
        return Err(Error::invalid(
            op,
            "the _out form doesn't support automatic differentiation but an input requires grad; use the functional form, or run it under no_grad()",
        ));
    }
    Ok(())
}

/// Runs a frontend's kernel `f` without recording, then records the result with `rec` (one
/// node, formula from `autograd::formulas`): the shape of every recorded functional op.
pub(crate) fn recorded(
    f: impl FnOnce() -> Result<Tensor>,
    rec: impl FnOnce(&Tensor) -> Result<()>,
) -> Result<Tensor> {
    let out = {
        let _g = super::mode::no_grad();
        f()?
    };
    rec(&out)?;
    Ok(out)
}

/// An `_out` form: refused when an input needs a gradient ([`forbid_out`]), else run without
/// recording.
pub(crate) fn unrecorded_out<T>(
    op: &'static str,
    inputs: &[&Tensor],
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    forbid_out(op, inputs)?;
    let _g = super::mode::no_grad();
    f()
}
