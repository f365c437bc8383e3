//! Backward formulas, composed from differentiable tensor ops so that gradients are
//! themselves differentiable (`create_graph`). One file per op family, mirroring `ops/`.

pub(crate) mod elementwise;
pub(crate) mod index;
pub(crate) mod join;
pub(crate) mod matmul;
pub(crate) mod reduce;
pub(crate) mod views;

use crate::{Result, Tensor};

/// Sums `g` down to `shape` (undoing broadcasting): leading dims are summed away, dims that
/// were 1 are summed with keepdim.
pub(crate) fn sum_to_shape(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let lead = g.dim() - shape.len();
    let mut dims: Vec<i64> = (0..lead as i64).collect();
    for (i, &s) in shape.iter().enumerate() {
        if s == 1 && g.shape()[lead + i] != 1 {
            dims.push((lead + i) as i64);
        }
    }
    let mut r = if dims.is_empty() {
        g.clone()
    } else {
        g.sum_dims(&dims, true)?
    };
    if lead > 0 {
        r = r.reshape(&shape.iter().map(|&s| s as i64).collect::<Vec<_>>())?;
    }
    Ok(r)
}
