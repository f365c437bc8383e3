//! How op frontends record themselves: `record(...)` after computing outputs, and
//! `in_place(...)` to make an in-place op differentiable.

use super::mode::is_grad_enabled;
use super::node::{BackwardFn, Edge, Node, SavedVersion, TensorMeta};
use crate::{Error, Result, Tensor};

/// Whether an op on these inputs records a node.
pub(crate) fn needs_grad(inputs: &[&Tensor]) -> bool {
    is_grad_enabled() && inputs.iter().any(|t| t.requires_grad())
}

/// The edge a gradient for `t` follows.
pub(crate) fn edge_of(t: &Tensor) -> Option<Edge> {
    if !t.requires_grad() {
        return None;
    }
    let m = t.meta();
    match &m.grad_fn {
        Some(n) => Some(Edge::Node(n.clone(), m.output_nr)),
        None => Some(Edge::Leaf(t.downgrade())),
    }
}

/// Records `name` with `inputs` → `outputs`. `saved` are the tensors the backward closure
/// captured (checked against later in-place modification). Outputs of non-float dtype never
/// require grad. A no-op when no input requires grad or grad mode is off.
pub(crate) fn record(
    name: &'static str,
    inputs: &[&Tensor],
    outputs: &[&Tensor],
    saved: &[(&Tensor, &'static str)],
    backward: impl FnMut(&[Tensor]) -> Result<Vec<Option<Tensor>>> + Send + 'static,
) -> Result<()> {
    if !needs_grad(inputs) || !outputs.iter().any(|o| o.dtype().is_float()) {
        return Ok(());
    }
    for (t, what) in saved {
        if t.meta().inference {
            return Err(Error::invalid(
                name,
                format!("{what} is an inference tensor (made in inference_mode) and cannot be saved for backward; make a clone() of it outside inference_mode"),
            ));
        }
    }
    let node = Node::new(
        name,
        inputs.iter().map(|t| edge_of(t)).collect(),
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
    );
    for (i, o) in outputs.iter().enumerate() {
        if o.dtype().is_float() {
            let mut m = o.meta();
            m.grad_fn = Some(node.clone());
            m.output_nr = i;
            m.requires_grad = true;
        }
    }
    Ok(())
}

/// Marks a fresh output of a view op as a view (see `AutogradMeta::is_view`).
pub(crate) fn mark_view(out: &Tensor) {
    out.meta().is_view = true;
}

/// Runs an in-place op so that autograd sees it. Without recording it just runs `kernel`.
/// With recording, the op is computed out of place by `functional` on a (recorded) clone of
/// `self`, so ordinary nodes are recorded, the result is written into `self` through its layout, and `self`'s
/// history is rebased onto the new node — PyTorch's semantics for in-place ops on non-leaf
/// tensors. In-place ops on leaves that require grad, and on views, are errors.
pub(crate) fn in_place(
    op: &'static str,
    this: &Tensor,
    others: &[&Tensor],
    kernel: impl FnOnce() -> Result<Tensor>,
    functional: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let mut all = vec![this];
    all.extend_from_slice(others);
    if !needs_grad(&all) {
        return kernel();
    }
    if this.requires_grad() && this.is_leaf() {
        return Err(Error::invalid(
            op,
            "a leaf tensor that requires grad is being used in an in-place operation; wrap the update in no_grad() (as optimizers do) or use the out-of-place op",
        ));
    }
    if this.meta().is_view {
        return Err(Error::invalid(
            op,
            "in-place operations on views are not differentiable in stride yet (PyTorch rebases the base tensor's history); use the out-of-place op, or clone() the view first",
        ));
    }
    // compute on a clone so the nodes that saved `this` keep the value they saw
    let original = this.clone_tensor()?;
    let result = functional(&original)?;
    {
        let _g = super::no_grad();
        crate::ops::output::copy_into(op, &result, this)?;
    }
    let (grad_fn, nr) = {
        let m = result.meta();
        (m.grad_fn.clone(), m.output_nr)
    };
    let mut m = this.meta();
    // a result with no history (fill_) makes `this` a constant: no gradient flows back
    m.requires_grad = grad_fn.is_some();
    m.grad_fn = grad_fn;
    m.output_nr = nr;
    drop(m);
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
