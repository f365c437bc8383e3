//! Derivatives of reductions, scans and softmax (PyTorch's formulas).

use super::sum_to_shape;
use crate::autograd::record::{needs_grad, record};
use crate::shape::wrap_dims;
use crate::{DType, Result, Tensor};

/// The reduced dims (wrapped, sorted), with PyTorch's "empty list means all".
fn reduced(x: &Tensor, dims: &[i64]) -> Result<Vec<usize>> {
    let mut d = if dims.is_empty() {
        (0..x.dim()).collect()
    } else {
        wrap_dims("backward", dims, x.dim())?
    };
    d.sort_unstable();
    Ok(d)
}

/// `g` (shaped like the reduction's output) reshaped to keepdim form and expanded to `x`.
pub(crate) fn expand_back(g: &Tensor, x_shape: &[usize], dims: &[usize]) -> Result<Tensor> {
    let kept: Vec<i64> = (0..x_shape.len())
        .map(|i| {
            if dims.contains(&i) {
                1
            } else {
                x_shape[i] as i64
            }
        })
        .collect();
    let full: Vec<i64> = x_shape.iter().map(|&s| s as i64).collect();
    g.reshape(&kept)?.expand(&full)
}

/// Which reduction a node is for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Red {
    Sum,
    Mean,
    Prod,
    /// amax/amin (ties share the gradient evenly)
    Extreme,
    Var(f64),
    Std(f64),
    Norm(f64),
    LogSumExp,
}

/// Records the reduction `out = red(x, dims)`.
pub(crate) fn record_reduction(red: Red, x: &Tensor, dims: &[i64], out: &Tensor) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let dims = reduced(x, dims)?;
    let n: usize = dims.iter().map(|&d| x.shape()[d]).product();
    let xs = x.clone();
    let outs = out.detach();
    let shape = x.shape().to_vec();
    let name = match red {
        Red::Sum => "SumBackward",
        Red::Mean => "MeanBackward",
        Red::Prod => "ProdBackward",
        Red::Extreme => "AmaxBackward",
        Red::Var(_) => "VarBackward",
        Red::Std(_) => "StdBackward",
        Red::Norm(_) => "NormBackward",
        Red::LogSumExp => "LogsumexpBackward",
    };
    let saved: Vec<(&Tensor, &'static str)> = match red {
        Red::Sum | Red::Mean => vec![],
        _ => vec![(x, "self")],
    };
    let dims_i: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    record(name, &[x], &[out], &saved, move |g| {
        let g = expand_back(&g[0], &shape, &dims)?;
        // the output, recomputed from the input when the backward is itself recorded
        // (create_graph), so that second derivatives flow through it too
        let y = || {
            let out = if crate::autograd::is_grad_enabled() && xs.requires_grad() {
                match red {
                    Red::Std(c) => xs.std(&dims_i, c, true)?,
                    Red::Norm(p) => xs.norm(p, &dims_i, true)?,
                    Red::LogSumExp => xs.logsumexp(&dims_i, true)?,
                    _ => outs.clone(),
                }
            } else {
                outs.clone()
            };
            expand_back(&out, &shape, &dims)
        };
        let r = match red {
            Red::Sum => g.contiguous()?,
            Red::Mean => g.div(n as f64)?,
            Red::Prod => {
                // exact with zeros: one zero → the product of the others at its place
                let zero = xs.eq(0.0)?;
                let safe = zero.where_cond(1.0, &xs)?;
                let prod_nz = expand_back(&safe.prod_dims(&dims_i, true)?, &shape, &dims)?;
                let nz = expand_back(
                    &zero.to_dtype(DType::I64)?.sum_dims(&dims_i, true)?,
                    &shape,
                    &dims,
                )?;
                let no_zero = prod_nz.div(&safe)?;
                let one_zero = zero.where_cond(&prod_nz, 0.0)?;
                let local = nz
                    .eq(0)?
                    .where_cond(&no_zero, &nz.eq(1)?.where_cond(&one_zero, 0.0)?)?;
                g.mul(&local)?
            }
            Red::Extreme => {
                let mask = xs.eq(&y()?)?.to_dtype(xs.dtype())?;
                let count = expand_back(&mask.sum_dims(&dims_i, true)?, &shape, &dims)?;
                g.mul(&mask)?.div(&count)?
            }
            Red::Var(c) => {
                let mean = expand_back(&xs.mean_dims(&dims_i, true)?, &shape, &dims)?;
                g.mul(&xs.sub(&mean)?)?.mul(2.0 / (n as f64 - c))?
            }
            Red::Std(c) => {
                let mean = expand_back(&xs.mean_dims(&dims_i, true)?, &shape, &dims)?;
                let sd = y()?;
                g.mul(&xs.sub(&mean)?)?
                    .div(&sd.mul(n as f64 - c)?)?
                    .mul(&sd.ne(0.0)?.where_cond(1.0, 0.0)?)?
            }
            Red::Norm(p) => norm_grad(&xs, &y()?, &g, p, &dims_i, &shape, &dims)?,
            Red::LogSumExp => g.mul(&xs.sub(&y()?)?.exp()?)?,
        };
        Ok(vec![Some(r)])
    })
}

fn norm_grad(
    x: &Tensor,
    norm: &Tensor,
    g: &Tensor,
    p: f64,
    dims_i: &[i64],
    shape: &[usize],
    dims: &[usize],
) -> Result<Tensor> {
    if p == 0.0 {
        return g.mul(0.0);
    }
    if p == 1.0 {
        return g.mul(&x.sign()?);
    }
    if p.is_infinite() {
        // the gradient goes (shared) to the elements whose |x| is the norm
        let ax = x.abs()?;
        let mask = ax.eq(norm)?.to_dtype(x.dtype())?;
        let count = expand_back(&mask.sum_dims(dims_i, true)?, shape, dims)?;
        return g.mul(&x.sign()?)?.mul(&mask)?.div(&count);
    }
    let safe = norm.eq(0.0)?;
    let scaled = if p == 2.0 {
        x.div(norm)?
    } else {
        x.mul(&x.abs()?.pow(p - 2.0)?)?.div(&norm.pow(p - 1.0)?)?
    };
    g.mul(&safe.where_cond(0.0, &scaled)?)
}

/// Records `(values, indices) = max_dim/min_dim(x, dim)`: the gradient goes to the selected
/// index (PyTorch's choice among ties).
pub(crate) fn record_index_reduction(
    name: &'static str,
    x: &Tensor,
    dim: i64,
    keepdim: bool,
    values: &Tensor,
    indices: &Tensor,
) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let d = crate::shape::wrap_dim(name, dim, x.dim())?;
    let shape = x.shape().to_vec();
    let idx = indices.detach();
    record(name, &[x], &[values, indices], &[], move |g| {
        let g = &g[0];
        if shape.is_empty() {
            return Ok(vec![Some(g.clone())]);
        }
        let (g, idx) = if keepdim {
            (g.clone(), idx.clone())
        } else {
            (g.unsqueeze(d as i64)?, idx.unsqueeze(d as i64)?)
        };
        let mut ar_shape = vec![1i64; shape.len()];
        ar_shape[d] = shape[d] as i64;
        let ar = Tensor::arange(0, shape[d] as i64, &g.device())?.reshape(&ar_shape)?;
        let hit = ar.eq(&idx)?;
        Ok(vec![Some(
            hit.where_cond(&g, 0.0)?
                .broadcast_to(shape.clone())?
                .contiguous()?,
        )])
    })
}

/// Records a softmax (`log = false`) or log_softmax along `dim`.
pub(crate) fn record_softmax(x: &Tensor, dim: i64, out: &Tensor, log: bool) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let xs = x.clone();
    let name = if log {
        "LogSoftmaxBackward"
    } else {
        "SoftmaxBackward"
    };
    record(name, &[x], &[out], &[(x, "self")], move |g| {
        let g = &g[0];
        // recomputed from the input, so the formula stays differentiable (create_graph)
        let r = if log {
            let p = xs.softmax(dim)?;
            g.sub(&p.mul(&g.sum_dims(&[dim], true)?)?)?
        } else {
            let y = xs.softmax(dim)?;
            y.mul(&g.sub(&g.mul(&y)?.sum_dims(&[dim], true)?)?)?
        };
        Ok(vec![Some(r)])
    })
}

/// Records `cumsum(x, dim)`: the gradient is the reversed cumulative sum of `g`.
pub(crate) fn record_cumsum(x: &Tensor, dim: i64, out: &Tensor) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    record("CumsumBackward", &[x], &[out], &[], move |g| {
        let g = &g[0];
        // Σ_{j ≥ i} g_j = total − cumsum(g)_i + g_i
        Ok(vec![Some(
            g.sum_dims(&[dim], true)?.sub(&g.cumsum(dim)?)?.add(g)?,
        )])
    })
}

/// Records `cumprod(x, dim)`. Exact where the prefix has no zero; at and after the first zero
/// of a row the products are recomputed explicitly (O(n²) along `dim` only for such rows'
/// elements — PyTorch does the same).
pub(crate) fn record_cumprod(x: &Tensor, dim: i64, out: &Tensor) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let xs = x.clone();
    record("CumprodBackward", &[x], &[out], &[(x, "self")], move |g| {
        let g = &g[0];
        let d = crate::shape::wrap_dim("cumprod", dim, xs.dim())?;
        if xs.dim() == 0 {
            return Ok(vec![Some(g.clone())]);
        }
        let n = xs.shape()[d];
        // grad_i = Σ_{j ≥ i} g_j · Π_{k ≤ j, k ≠ i} x_k, computed column by column with
        // products that skip x_i: exact with zeros, n cumprods of length n.
        let mut cols = Vec::with_capacity(n);
        for i in 0..n {
            let xi_one = xs.narrow(d as i64, i as i64, 1)?.mul(0.0)?.add(1.0)?;
            let mut parts = vec![];
            if i > 0 {
                parts.push(xs.narrow(d as i64, 0, i)?);
            }
            parts.push(xi_one);
            if i + 1 < n {
                parts.push(xs.narrow(d as i64, i as i64 + 1, n - i - 1)?);
            }
            let refs: Vec<&Tensor> = parts.iter().collect();
            let skip = Tensor::cat(&refs, d as i64)?.cumprod(d as i64)?;
            let tail = skip.narrow(d as i64, i as i64, n - i)?.mul(&g.narrow(
                d as i64,
                i as i64,
                n - i,
            )?)?;
            cols.push(tail.sum_dims(&[d as i64], true)?);
        }
        let refs: Vec<&Tensor> = cols.iter().collect();
        Ok(vec![Some(Tensor::cat(&refs, d as i64)?)])
    })
}

#[allow(dead_code)]
pub(crate) fn sum_back(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    sum_to_shape(g, shape)
}
