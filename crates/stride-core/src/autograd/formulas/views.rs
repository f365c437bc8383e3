//! Backward of view ops, reshapes, copies and casts.
//!
//! A view's gradient is either the inverse view (transpose, permute, reshape), a sum over the
//! broadcast dims (expand), or the gradient written into the same view of a zero tensor of the
//! input's shape (slice, narrow, select, diagonal) — itself a recorded op whose backward is the
//! view again, so double backward works.

use super::sum_to_shape;
use crate::autograd::record::{needs_grad, record};
use crate::{Layout, Result, Tensor};
use std::sync::Arc;

/// A view op re-applied to another tensor of the input's shape.
pub(crate) type ViewFn = Arc<dyn Fn(&Tensor) -> Result<Tensor> + Send + Sync>;

/// How the gradient of a view maps back to its input.
pub(crate) enum ViewGrad {
    /// `g.reshape(input shape)`
    Reshape,
    /// `g.permute(inverse)`
    Permute(Vec<i64>),
    /// sum over broadcast dims
    Expand,
    /// write `g` into `view(zeros(input shape))`
    Scatter(ViewFn),
}

pub(crate) fn record_view(
    name: &'static str,
    x: &Tensor,
    out: &Tensor,
    how: ViewGrad,
) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let shape = x.shape().to_vec();
    record(name, &[x], &[out], &[], move |g| {
        let g = &g[0];
        let r = match &how {
            ViewGrad::Reshape => g.reshape(&shape.iter().map(|&s| s as i64).collect::<Vec<_>>())?,
            ViewGrad::Permute(inv) => g.permute(inv)?,
            ViewGrad::Expand => sum_to_shape(g, &shape)?,
            ViewGrad::Scatter(f) => view_scatter(g, &shape, f.clone())?,
        };
        Ok(vec![Some(r)])
    })
}

/// `z = zeros(shape); view(z) = g` — recorded so that its own gradient is `view(gg)`.
fn view_scatter(g: &Tensor, shape: &[usize], f: ViewFn) -> Result<Tensor> {
    let z = Tensor::zeros(shape.to_vec(), g.dtype(), &g.device())?;
    {
        let _ng = crate::autograd::no_grad();
        crate::ops::output::copy_into("backward", g, &f(&z)?)?;
    }
    record("ViewScatterBackward", &[g], &[&z], &[], move |gg| {
        Ok(vec![Some(f(&gg[0])?)])
    })?;
    Ok(z)
}

/// Records a copy whose gradient passes through unchanged (clone, contiguous, to_dtype).
pub(crate) fn record_copy(name: &'static str, x: &Tensor, out: &Tensor) -> Result<()> {
    if !out.dtype().is_float() {
        return Ok(());
    }
    record(name, &[x], &[out], &[], |g| Ok(vec![Some(g[0].clone())]))
}

/// Records a device transfer: the gradient goes back to `x`'s device.
pub(crate) fn record_to_device(x: &Tensor, out: &Tensor) -> Result<()> {
    if !out.dtype().is_float() {
        return Ok(());
    }
    let device = x.device();
    record("ToCopyBackward", &[x], &[out], &[], move |g| {
        Ok(vec![Some(g[0].to_device(&device)?)])
    })
}

/// Records `out = x.as_strided(shape, strides, offset)` — PyTorch's `as_strided_backward`
/// ([`as_strided_backward`]). Nothing is computed until backward runs.
pub(crate) fn record_as_strided(x: &Tensor, out: &Tensor) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let (xl, ol) = (x.layout().clone(), out.layout().clone());
    record("AsStridedBackward", &[x], &[out], &[], move |g| {
        Ok(vec![Some(as_strided_backward(&g[0], &xl, &ol)?)])
    })
}

/// The gradient of `x` (layout `x`) for `out` = the elements of `x`'s storage at layout `out`,
/// given `out`'s gradient `g`. `as_strided` addresses storage, so the gradient is
/// scatter-added into a zero buffer over the storage positions that `x` or `out` touch
/// (overlapping `out`s accumulate), then read back through `x`'s own layout. Where `x`'s
/// elements overlap (an expanded `x`), each storage position's gradient is shared evenly among
/// the elements that alias it, as PyTorch does. Positions `out` reads outside `x`'s elements
/// get no gradient. When `x` is contiguous and `out` a non-overlapping region of it, this is
/// simply `g` written into that region of zeros. Also the backward of a view whose history
/// was regenerated from its base (`autograd::view_meta`).
pub(crate) fn as_strided_backward(g: &Tensor, x: &Layout, out: &Layout) -> Result<Tensor> {
    if out.numel() == 0 {
        return Tensor::zeros(x.shape().to_vec(), g.dtype(), &g.device());
    }
    if let Some(rel) = region_of_contiguous(x, out) {
        if out.is_non_overlapping() {
            let (shape, strides) = (out.shape().to_vec(), out.strides().to_vec());
            let f: ViewFn = Arc::new(move |t: &Tensor| {
                let c = t.contiguous()?;
                c.as_strided(&shape, &strides, c.storage_offset() + rel)
            });
            return view_scatter(g, x.shape(), f);
        }
    }
    let in_pos = positions(x);
    let out_pos = positions(out);
    let lo = in_pos.iter().chain(&out_pos).copied().min().unwrap_or(0);
    let hi = in_pos
        .iter()
        .chain(&out_pos)
        .copied()
        .max()
        .map_or(0, |h| h + 1);
    let rel = |p: &[usize]| -> Vec<i64> { p.iter().map(|&q| (q - lo) as i64).collect() };
    let (in_rel, out_rel) = (rel(&in_pos), rel(&out_pos));
    let shape: Vec<i64> = x.shape().iter().map(|&s| s as i64).collect();
    let in_overlaps = !x.is_non_overlapping();
    let n = hi - lo;
    let device = g.device();
    let idx = |v: &[i64]| -> Result<Tensor> {
        Tensor::from_vec(v.to_vec(), [v.len()])?.to_device(&device)
    };
    let (ii, oi) = (idx(&in_rel)?, idx(&out_rel)?);
    let buf = Tensor::zeros([n], g.dtype(), &device)?.index_add(0, &oi, &g.reshape(&[-1])?, 1)?;
    let buf = if in_overlaps {
        let ones = Tensor::ones([in_rel.len()], g.dtype(), &device)?;
        let count = Tensor::zeros([n], g.dtype(), &device)?.index_add(0, &ii, &ones, 1)?;
        buf.div(&count.clamp_min(1.0)?)?
    } else {
        buf
    };
    buf.index_select(0, &ii)?.reshape(&shape)
}

/// When `base` is contiguous and every element of `view` lies among its elements: `view`'s
/// storage offset relative to `base`'s, so that `c.as_strided(view's shape and strides,
/// c.storage_offset() + rel)` reads `view`'s elements out of any contiguous `c` shaped like
/// `base`.
pub(crate) fn region_of_contiguous(base: &Layout, view: &Layout) -> Option<usize> {
    if !base.is_contiguous() || view.numel() == 0 || view.offset() < base.offset() {
        return None;
    }
    (view.storage_extent() <= base.offset() + base.numel()).then(|| view.offset() - base.offset())
}

/// The storage position of every element of `l`, in logical order.
pub(crate) fn positions(l: &Layout) -> Vec<usize> {
    let (shape, strides) = (l.shape(), l.strides());
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        out.push(l.offset() + idx.iter().zip(strides).map(|(i, s)| i * s).sum::<usize>());
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}
