//! Derivative of `matmul` in all its PyTorch forms (1-D, 2-D, batched with broadcast).

use super::sum_to_shape;
use crate::autograd::record::{needs_grad, record};
use crate::{Result, Tensor};

/// Records `out = a.matmul(b)` (`name` is the grad_fn name: MmBackward, BmmBackward, …).
pub(crate) fn record_matmul(
    name: &'static str,
    a: &Tensor,
    b: &Tensor,
    out: &Tensor,
) -> Result<()> {
    if !needs_grad(&[a, b]) {
        return Ok(());
    }
    let (a2, b2) = (a.clone(), b.clone());
    record(
        name,
        &[a, b],
        &[out],
        &[(a, "self"), (b, "mat2")],
        move |g| {
            let g = &g[0];
            // lift 1-D operands to matrices as matmul does, then ga = g·bᵀ, gb = aᵀ·g
            let am = if a2.dim() == 1 {
                a2.unsqueeze(0)?
            } else {
                a2.clone()
            };
            let bm = if b2.dim() == 1 {
                b2.unsqueeze(-1)?
            } else {
                b2.clone()
            };
            // (b's dim first: for dot the gradient is 0-d)
            let mut gm = g.clone();
            if b2.dim() == 1 {
                gm = gm.unsqueeze(-1)?;
            }
            if a2.dim() == 1 {
                gm = gm.unsqueeze(-2)?;
            }
            let ga = if a2.requires_grad() {
                let r = gm.matmul(&bm.transpose(-1, -2)?)?;
                let r = sum_to_shape(&r, am.shape())?;
                Some(r.reshape(&a2.shape().iter().map(|&s| s as i64).collect::<Vec<_>>())?)
            } else {
                None
            };
            let gb = if b2.requires_grad() {
                let r = if bm.dim() == 2 && am.dim() > 2 {
                    // a matrix applied to a batch (a linear layer): fold the batch into the
                    // contraction, one product summing over every row, as PyTorch does —
                    // not a product per batch element, each rounded, then a sum
                    // rows counted, not inferred: a reshape can't infer them when k or n is 0
                    let (k, n) = (am.shape()[am.dim() - 1], gm.shape()[gm.dim() - 1]);
                    let rows = am.shape()[..am.dim() - 1].iter().product::<usize>() as i64;
                    am.reshape(&[rows, k as i64])?
                        .transpose(0, 1)?
                        .matmul(&gm.reshape(&[rows, n as i64])?)?
                } else {
                    sum_to_shape(&am.transpose(-1, -2)?.matmul(&gm)?, bm.shape())?
                };
                Some(r.reshape(&b2.shape().iter().map(|&s| s as i64).collect::<Vec<_>>())?)
            } else {
                None
            };
            Ok(vec![ga, gb])
        },
    )
}
