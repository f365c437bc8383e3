//! In-place ops through views, while recording: PyTorch's `CopySlices`.
//!
//! `v.f_(…)` with `v` a view of base `b` is computed as
//!
//! 1. `r = f(v)` out of place (recorded, on a clone of `v`, so nodes that saved `v` keep the
//!    value they saw);
//! 2. `r` written into `v` through its layout (not recorded) — which writes `b`'s storage;
//! 3. `b`'s history becomes `CopySlices(b's old history, r)`, whose backward maps the
//!    gradient `g` of `b` to
//!    - `g` with `v`'s region set to zero, for `b`'s old history (those elements were
//!      overwritten), and
//!    - `g` seen through `v`'s geometry, for `r`;
//! 4. `v`'s history becomes "its geometry read from the new `b`" (`AsStridedBackward`).
//!
//! Other views of `b` notice the version change and regenerate their histories the next time
//! they are used (`view_meta::refresh`).

use super::formulas::views::{positions, region_of_contiguous};
use super::record::make_node;
use super::view_meta::{regenerate, set_history, ViewCreation};
use crate::{Error, Layout, Result, Tensor};

/// The recording path of `record::in_place` for a view `this` of `base`.
pub(crate) fn in_place_on_view(
    op: &'static str,
    this: &Tensor,
    base: &Tensor,
    creation: ViewCreation,
    functional: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    match creation {
        ViewCreation::Default => {}
        ViewCreation::MultiOutput(made_by) => {
            return Err(Error::invalid(
                op,
                format!("this tensor is one of the views returned by {made_by}, and such views can't be modified in place while gradients are recorded (their shared history can't be rebased; PyTorch refuses this too). Modify a clone_tensor() of the view (PyTorch's clone(); Rust's .clone() shares its memory), or use the out-of-place op"),
            ))
        }
        ViewCreation::NoGrad => {
            return Err(Error::invalid(
                op,
                "this view was created under no_grad() (or inference_mode) from a tensor that requires grad, and is being modified in place while gradients are recorded; whether that write should be differentiable is ambiguous, so it is refused (as in PyTorch). Make the view and the in-place op both inside no_grad() (not recorded) or both outside it (recorded)",
            ))
        }
        ViewCreation::Detached => {
            return Err(Error::invalid(
                op,
                "this view was detached in place (detach_()) but still shares its base's memory, and is being modified in place while gradients are recorded; the base's history can't see the write. Use detach() (a new tensor) or clone_tensor() (PyTorch's clone()) instead of detach_() on a view",
            ))
        }
    }
    let own_leaf = {
        let m = this.meta();
        m.requires_grad && m.grad_fn.is_none()
    };
    if own_leaf {
        return Err(Error::invalid(
            op,
            "a leaf tensor that requires grad (a view made a leaf with requires_grad_) is being used in an in-place operation; wrap the update in no_grad(), or clone_tensor() it (PyTorch's clone(); Rust's .clone() shares its memory) and modify the copy",
        ));
    }
    if base.requires_grad() && base.is_leaf() {
        return Err(Error::invalid(
            op,
            "a view of a leaf tensor that requires grad is being used in an in-place operation; wrap the update in no_grad() (as optimizers do), or clone_tensor() the leaf (PyTorch's clone()) and modify the copy",
        ));
    }
    // compute on a clone so the nodes that saved `this` keep the value they saw
    let original = this.clone_tensor()?;
    let result = functional(&original)?;
    {
        let _g = super::no_grad();
        crate::ops::output::copy_into(op, &result, this)?;
    }
    let (bl, vl) = (base.layout().clone(), this.layout().clone());
    let node = make_node("CopySlices", &[base, &result], &[base], &[], move |g| {
        let (old, r) = split_grad(&g[0], &bl, &vl)?;
        Ok(vec![Some(old), Some(r)])
    })?;
    set_history(base, node.map(|n| (n, 0)));
    regenerate(base, this)?;
    Ok(this.clone())
}

/// `CopySlices`' backward: from the gradient `g` of the base (layout `base`), the gradient
/// of the base's old value (`g` with the view's elements zeroed) and of the value written
/// through the view (layout `view`; `g` read through it). Composed from differentiable ops.
fn split_grad(g: &Tensor, base: &Layout, view: &Layout) -> Result<(Tensor, Tensor)> {
    let (dtype, device) = (g.dtype(), g.device());
    if view.numel() == 0 {
        return Ok((
            g.clone(),
            Tensor::zeros(view.shape().to_vec(), dtype, &device)?,
        ));
    }
    if let Some(rel) = region_of_contiguous(base, view) {
        // the base's storage positions are its logical indices (plus an offset)
        let gc = g.contiguous()?;
        let written = gc.as_strided(view.shape(), view.strides(), gc.storage_offset() + rel)?;
        let keep = Tensor::ones(base.shape().to_vec(), dtype, &device)?;
        {
            let _g = super::no_grad();
            keep.as_strided(view.shape(), view.strides(), rel)?
                .fill_(0.0)?;
        }
        return Ok((g.mul(&keep)?, written));
    }
    // any base layout (permuted, stepped, expanded): through storage positions
    let (bp, vp) = (positions(base), positions(view));
    let lo = bp.iter().chain(&vp).copied().min().unwrap_or(0);
    let hi = bp.iter().chain(&vp).copied().max().map_or(0, |h| h + 1);
    let idx = |p: &[usize]| -> Result<Tensor> {
        let v: Vec<i64> = p.iter().map(|&q| (q - lo) as i64).collect();
        Tensor::from_vec(v, [p.len()])?.to_device(&device)
    };
    let (bi, vi) = (idx(&bp)?, idx(&vp)?);
    // every base element's gradient lands on its storage position (aliasing elements add up:
    // a write there changes all of them), and the view reads its positions back
    let flat =
        Tensor::zeros([hi - lo], dtype, &device)?.index_add(0, &bi, &g.reshape(&[-1])?, 1)?;
    let written = flat
        .index_select(0, &vi)?
        .reshape(&view.shape().iter().map(|&s| s as i64).collect::<Vec<_>>())?;
    let mut hit = vec![false; hi - lo];
    for &p in &vp {
        hit[p - lo] = true;
    }
    let keep: Vec<bool> = bp.iter().map(|&p| !hit[p - lo]).collect();
    let keep = Tensor::from_vec(keep, base.shape().to_vec())?
        .to_device(&device)?
        .to_dtype(dtype)?;
    Ok((g.mul(&keep)?, written))
}
