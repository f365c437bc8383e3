//! Derivatives of the index family (gathers, scatters, masked ops) and of the value outputs of
//! sort/topk/kthvalue/median — PyTorch's formulas (`FunctionsManual.cpp`), composed from
//! differentiable ops so that double backward works: a gather's gradient is a scatter-add
//! whose own gradient (w.r.t. its source) is the gather again.
//!
//! Index tensors are saved with their version: modifying one in place before backward is the
//! usual loud error. Integer outputs (indices) never get a `grad_fn`.

use super::sum_to_shape;
use crate::autograd::record::{needs_grad, record};
use crate::ops::index::ScatterReduce;
use crate::{DType, MemoryFormat, PadMode, Result, Tensor};

/// Runs `f` with recording off: the frontends compute their result this way and then record
/// one node for the whole op.
pub(crate) fn untracked<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let _g = crate::autograd::no_grad();
    f()
}

fn zeros(shape: &[usize], like: &Tensor) -> Result<Tensor> {
    Tensor::zeros(shape.to_vec(), like.dtype(), &like.device())
}

/// `idx` with negative entries counted from the end of a dim of `size` (for the ops that wrap).
fn wrap_index(idx: &Tensor, size: usize) -> Result<Tensor> {
    if idx.dtype() == DType::U32 {
        return Ok(idx.clone());
    }
    idx.lt(0)?.where_cond(&idx.add(size as i64)?, idx)
}

/// `t` zero-padded at the end of every dim up to `shape` (a scatter's `src` may be larger than
/// its index; the positions that the index does not reach get no gradient).
fn pad_to(t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if t.shape() == shape {
        return Ok(t.clone());
    }
    if t.dim() != shape.len() {
        return t.reshape(&shape.iter().map(|&s| s as i64).collect::<Vec<_>>());
    }
    let mut pad = vec![];
    for k in (0..shape.len()).rev() {
        pad.extend([0, shape[k] as i64 - t.shape()[k] as i64]);
    }
    t.pad(&pad, PadMode::constant(0.0))
}

fn as_i64(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&s| s as i64).collect()
}

/// Records `out = x[(:,)*d, idx]` (index_select, take, index, embedding, boolean-mask
/// indexing): the gradient is an `index_add` of `g` into zeros at the (flattened) indices.
pub(crate) fn record_gather_along(
    name: &'static str,
    x: &Tensor,
    d: usize,
    idx: &Tensor,
    wrap: bool,
    out: &Tensor,
) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let shape = x.shape().to_vec();
    let index = idx.clone();
    record(name, &[x], &[out], &[(idx, "index")], move |g| {
        let g = &g[0];
        let mut gs = as_i64(&shape[..d]);
        gs.push(index.numel() as i64);
        gs.extend(as_i64(&shape[d + 1..]));
        let g2 = g.reshape(&gs)?;
        let mut i = index.reshape(&[-1])?;
        if wrap {
            i = wrap_index(&i, shape[d])?;
        }
        Ok(vec![Some(
            zeros(&shape, g)?.index_add(d as i64, &i, &g2, 1)?,
        )])
    })
}

/// Records `out = x.gather(d, idx)`: the gradient is `zeros.scatter_add(d, idx, g)`.
pub(crate) fn record_gather(x: &Tensor, d: usize, idx: &Tensor, out: &Tensor) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let shape = x.shape().to_vec();
    let index = idx.clone();
    record(
        "GatherBackward",
        &[x],
        &[out],
        &[(idx, "index")],
        move |g| {
            Ok(vec![Some(
                zeros(&shape, &g[0])?.scatter_add(d as i64, &index, &g[0])?,
            )])
        },
    )
}

/// Which scatter a node is for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scatter {
    /// `scatter(dim, index, src)`
    Assign,
    /// `scatter_add`
    Add,
    /// `scatter_reduce(.., reduce, include_self)`
    Reduce(ScatterReduce, bool),
}

/// Records `out = x.scatter*(d, idx, src)`.
pub(crate) fn record_scatter(
    kind: Scatter,
    x: &Tensor,
    d: usize,
    idx: &Tensor,
    src: &Tensor,
    out: &Tensor,
) -> Result<()> {
    if !needs_grad(&[x, src]) {
        return Ok(());
    }
    let name = match kind {
        Scatter::Assign => "ScatterBackward",
        Scatter::Add => "ScatterAddBackward",
        Scatter::Reduce(..) => "ScatterReduceBackward",
    };
    let (need_x, need_src) = (x.requires_grad(), src.requires_grad());
    let (xs, ss, index, res) = (x.clone(), src.clone(), idx.clone(), out.detach());
    let mut saved = vec![(idx, "index")];
    if let Scatter::Reduce(r, _) = kind {
        if matches!(
            r,
            ScatterReduce::Prod | ScatterReduce::Amax | ScatterReduce::Amin
        ) {
            saved.extend([(x, "self"), (src, "src"), (out, "result")]);
        }
    }
    let di = d as i64;
    record(name, &[x, src], &[out], &saved, move |g| {
        let g = &g[0];
        let (gx, gs) = match kind {
            Scatter::Assign => (g.scatter_value(di, &index, 0.0)?, g.gather(di, &index)?),
            Scatter::Add => (g.clone(), g.gather(di, &index)?),
            Scatter::Reduce(r, include_self) => {
                let (gx, gs) =
                    scatter_reduce_grads(r, include_self, g, &xs, di, &index, &ss, &res)?;
                let gx = if include_self {
                    gx
                } else {
                    gx.scatter_value(di, &index, 0.0)?
                };
                (gx, gs)
            }
        };
        Ok(vec![
            need_x.then_some(gx),
            if need_src {
                Some(pad_to(&gs, ss.shape())?)
            } else {
                None
            },
        ])
    })
}

/// PyTorch's `scatter_reduce_backward` (before the `include_self = false` masking of self's
/// gradient): sum, mean, prod (exact with zeros), amax/amin (the gradient split evenly among
/// the values equal to the result, self included).
#[allow(clippy::too_many_arguments)]
fn scatter_reduce_grads(
    r: ScatterReduce,
    include_self: bool,
    g: &Tensor,
    x: &Tensor,
    d: i64,
    index: &Tensor,
    src: &Tensor,
    result: &Tensor,
) -> Result<(Tensor, Tensor)> {
    Ok(match r {
        ScatterReduce::Sum => (g.clone(), g.gather(d, index)?),
        ScatterReduce::Mean => {
            let n = if include_self {
                g.ones_like(MemoryFormat::Contiguous)?
            } else {
                g.zeros_like(MemoryFormat::Contiguous)?
            };
            let ones = Tensor::ones(index.shape(), g.dtype(), &g.device())?;
            let n = n.scatter_add(d, index, &ones)?;
            let n = n.eq(0.0)?.where_cond(1.0, &n)?;
            let gx = g.div(&n)?;
            let gs = gx.gather(d, index)?;
            (gx, gs)
        }
        ScatterReduce::Prod => {
            let masked_self = x.eq(0.0)?.where_cond(1.0, x)?;
            let masked_self_result = masked_self.scatter_reduce(d, index, src, r, include_self)?;
            let gx = g.mul(&masked_self_result)?.div(&masked_self)?;
            let src_zero = src.eq(0.0)?;
            let src_num_zeros = x
                .zeros_like(MemoryFormat::Contiguous)?
                .scatter_add(d, index, &src_zero.to_dtype(x.dtype())?)?
                .gather(d, index)?;
            let src_idx = pad_src(src, index)?;
            let src_zero_i = src_idx.eq(0.0)?;
            let single = src_zero_i.logical_and(&src_num_zeros.eq(1.0)?)?;
            // one zero among the sources of a destination: the product of the others,
            // computed with that zero replaced by one
            let masked_src = pad_to(&single.where_cond(1.0, &src_idx)?, src.shape())?;
            let masked_src = src_full_merge(src, &masked_src, index)?;
            let masked_src_result = x.scatter_reduce(d, index, &masked_src, r, include_self)?;
            let by_single = g.mul(&masked_src_result)?.gather(d, index)?;
            let by_div = g
                .mul(result)?
                .gather(d, index)?
                .div(&src_zero_i.where_cond(1.0, &src_idx)?)?;
            (gx, single.where_cond(&by_single, &by_div)?)
        }
        ScatterReduce::Amax | ScatterReduce::Amin => {
            let value = result.gather(d, index)?;
            let src_idx = pad_src(src, index)?;
            let self_is = x.eq(result)?.to_dtype(x.dtype())?;
            let src_is = src_idx.eq(&value)?.to_dtype(x.dtype())?;
            let n = self_is.scatter_add(d, index, &src_is)?;
            let gd = g.div(&n)?;
            (gd.mul(&self_is)?, gd.gather(d, index)?.mul(&src_is)?)
        }
    })
}

/// The part of `src` a scatter reads: its leading block of the index's shape.
fn pad_src(src: &Tensor, index: &Tensor) -> Result<Tensor> {
    if src.shape() == index.shape() || src.dim() != index.dim() {
        return Ok(src.clone());
    }
    let mut v = src.clone();
    for (k, &n) in index.shape().iter().enumerate() {
        v = v.narrow(k as i64, 0, n)?;
    }
    Ok(v)
}

/// `src` with its leading index-shaped block replaced by `block` (padded to `src`'s shape).
fn src_full_merge(src: &Tensor, block: &Tensor, index: &Tensor) -> Result<Tensor> {
    if src.shape() == index.shape() || src.dim() != index.dim() {
        return Ok(block.clone());
    }
    let inside = pad_to(
        &Tensor::ones(index.shape(), DType::Bool, &src.device())?,
        src.shape(),
    )?;
    inside.where_cond(block, src)
}

/// Records `out = x.scatter_value(d, idx, value)` / `index_fill` (`fill_index`): self's
/// gradient is `g` with the written positions zeroed; a tensor `value` gets the sum of `g`
/// over the written positions (each once, as PyTorch's `index_fill` with `unique`).
pub(crate) fn record_fill(
    name: &'static str,
    x: &Tensor,
    value: Option<&Tensor>,
    out: &Tensor,
    zero_written: impl Fn(&Tensor) -> Result<Tensor> + Send + 'static,
) -> Result<()> {
    let mut inputs = vec![x];
    if let Some(v) = value {
        inputs.push(v);
    }
    if !needs_grad(&inputs) {
        return Ok(());
    }
    let need_x = x.requires_grad();
    let need_v = value.is_some_and(|v| v.requires_grad());
    let has_v = value.is_some();
    record(name, &inputs, &[out], &[], move |g| {
        let g = &g[0];
        let gx = zero_written(g)?;
        let mut r = vec![need_x.then(|| gx.clone())];
        if has_v {
            r.push(if need_v {
                Some(g.sum()?.sub(&gx.sum()?)?)
            } else {
                None
            });
        }
        Ok(r)
    })
}

/// Records `out = x.index_add(d, idx, source, alpha)` (`copy = false`) or
/// `x.index_copy(d, idx, source)` (`copy = true`).
pub(crate) fn record_index_source(
    copy: bool,
    x: &Tensor,
    d: usize,
    idx: &Tensor,
    source: &Tensor,
    alpha: f64,
    out: &Tensor,
) -> Result<()> {
    if !needs_grad(&[x, source]) {
        return Ok(());
    }
    let (need_x, need_s) = (x.requires_grad(), source.requires_grad());
    let index = idx.clone();
    let s_shape = as_i64(source.shape());
    let name = if copy {
        "IndexCopyBackward"
    } else {
        "IndexAddBackward"
    };
    let di = d as i64;
    record(name, &[x, source], &[out], &[(idx, "index")], move |g| {
        let g = &g[0];
        let gx = if !need_x {
            None
        } else if copy {
            Some(g.index_fill(di, &index, 0.0)?)
        } else {
            Some(g.clone())
        };
        let gs = if need_s {
            let s = g.index_select(di, &index)?.reshape(&s_shape)?;
            Some(if alpha == 1.0 { s } else { s.mul(alpha)? })
        } else {
            None
        };
        Ok(vec![gx, gs])
    })
}

/// Records `out = x.masked_select(mask)` (broadcast together): the gradient scatters `g` back
/// to the true positions of the broadcast shape, then sums down to `x`'s shape.
pub(crate) fn record_masked_select(x: &Tensor, mask: &Tensor, out: &Tensor) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let shape = x.shape().to_vec();
    let full = crate::shape::broadcast_shapes("masked_select", x.shape(), mask.shape())?;
    let m = mask.clone();
    record(
        "MaskedSelectBackward",
        &[x],
        &[out],
        &[(mask, "mask")],
        move |g| {
            let z = zeros(&full, &g[0])?.masked_scatter(&m, &g[0])?;
            Ok(vec![Some(sum_to_shape(&z, &shape)?)])
        },
    )
}

/// Records `out = x.masked_scatter(mask, source)`.
pub(crate) fn record_masked_scatter(
    x: &Tensor,
    mask: &Tensor,
    source: &Tensor,
    out: &Tensor,
) -> Result<()> {
    if !needs_grad(&[x, source]) {
        return Ok(());
    }
    let (need_x, need_s) = (x.requires_grad(), source.requires_grad());
    let (shape, s_shape, numel) = (x.shape().to_vec(), as_i64(source.shape()), source.numel());
    let m = mask.clone();
    record(
        "MaskedScatterBackward",
        &[x, source],
        &[out],
        &[(mask, "mask")],
        move |g| {
            let g = &g[0];
            let gx = if need_x {
                Some(sum_to_shape(&g.masked_fill(&m, 0.0)?, &shape)?)
            } else {
                None
            };
            let gs = if need_s {
                let sel = g.masked_select(&m)?;
                let k = sel.numel();
                let sel = if k < numel {
                    sel.pad(&[0, (numel - k) as i64], PadMode::constant(0.0))?
                } else {
                    sel
                };
                Some(sel.reshape(&s_shape)?)
            } else {
                None
            };
            Ok(vec![gx, gs])
        },
    )
}

/// Records the value output of sort/topk/kthvalue/median (kept-dim form): the gradient goes
/// to the input positions named by `indices` (`zeros.scatter_add(d, indices, g)`).
pub(crate) fn record_value_selection(
    name: &'static str,
    x: &Tensor,
    d: usize,
    values: &Tensor,
    indices: &Tensor,
) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let shape = x.shape().to_vec();
    let idx = indices.detach();
    record(name, &[x], &[values, indices], &[], move |g| {
        let g = &g[0];
        if shape.is_empty() {
            return Ok(vec![Some(g.reshape(&[])?)]);
        }
        Ok(vec![Some(
            zeros(&shape, g)?.scatter_add(d as i64, &idx, g)?,
        )])
    })
}
