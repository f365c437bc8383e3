//! Backward of view ops, reshapes, copies and casts.
//!
//! A view's gradient is either the inverse view (transpose, permute, reshape), a sum over the
//! broadcast dims (expand), or the gradient written into the same view of a zero tensor of the
//! input's shape (slice, narrow, select, diagonal) — itself a recorded op whose backward is the
//! view again, so double backward works.

use super::sum_to_shape;
use crate::autograd::record::{mark_view, needs_grad, record};
use crate::{Error, Result, Tensor};
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
    })?;
    mark_view(out);
    Ok(())
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

/// as_strided addresses the storage, not the input's logical elements; its backward needs a
/// scatter-add into storage positions that stride does not implement yet — refuse loudly.
pub(crate) fn forbid_as_strided(x: &Tensor) -> Result<()> {
    if needs_grad(&[x]) {
        return Err(Error::invalid(
            "as_strided",
            "as_strided is not differentiable in stride yet; use the specific view ops (slice, narrow, expand, …) or detach() the input",
        ));
    }
    Ok(())
}
