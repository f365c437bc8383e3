//! Derivatives of the join family (`ops/join.rs`): cat/stack hand each input its slice of the
//! gradient; repeat/tile/repeat_interleave sum the copies; flip/roll apply the inverse
//! permutation; pads crop (constant) or scatter-add the border back into the source
//! (reflect/replicate/circular); meshgrid's outputs are expanded views.
//! `split`/`chunk`/`unbind` are views (narrow/select) and `tril`/`triu` a `where`, so they
//! need nothing here.

use crate::autograd::record::{needs_grad, record};
use crate::{Device, PadMode, Result, Tensor};

fn as_i64(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&s| s as i64).collect()
}

/// Records `out = cat(inputs, dim)`; `parts` are (input position, start along `dim`) of the
/// inputs that were not skipped (legacy empty 1-D tensors get a zero gradient).
pub(crate) fn record_cat(
    name: &'static str,
    inputs: &[&Tensor],
    dim: usize,
    parts: &[(usize, usize)],
    out: &Tensor,
) -> Result<()> {
    if !needs_grad(inputs) {
        return Ok(());
    }
    let metas: Vec<(Vec<usize>, bool)> = inputs
        .iter()
        .map(|t| (t.shape().to_vec(), t.requires_grad()))
        .collect();
    let mut start_of = vec![None; inputs.len()];
    for &(i, s) in parts {
        start_of[i] = Some(s);
    }
    record(name, inputs, &[out], &[], move |g| {
        let g = &g[0];
        metas
            .iter()
            .zip(&start_of)
            .map(|((shape, rg), start)| {
                if !rg {
                    return Ok(None);
                }
                Ok(Some(match start {
                    Some(s) => g.narrow(dim as i64, *s as i64, shape[dim])?,
                    None => Tensor::zeros(shape.clone(), g.dtype(), &g.device())?,
                }))
            })
            .collect()
    })
}

/// Records `out = x.repeat(repeats)`: `g` seen as `[r0, n0, r1, n1, …]` summed over the `r`s.
pub(crate) fn record_repeat(x: &Tensor, repeats: &[usize], out: &Tensor) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let shape = x.shape().to_vec();
    let lead = repeats.len() - shape.len();
    let mut split = vec![];
    for (k, &r) in repeats.iter().enumerate() {
        split.extend([r as i64, if k < lead { 1 } else { shape[k - lead] as i64 }]);
    }
    let rdims: Vec<i64> = (0..repeats.len() as i64).map(|k| 2 * k).collect();
    record("RepeatBackward", &[x], &[out], &[], move |g| {
        let g = &g[0];
        if rdims.is_empty() {
            return Ok(vec![Some(g.clone())]);
        }
        let s = g.reshape(&split)?.sum_dims(&rdims, false)?;
        Ok(vec![Some(s.reshape(&as_i64(&shape))?)])
    })
}

/// Records `out = x.repeat_interleave(repeats, d)` (the same count for every slice).
pub(crate) fn record_repeat_interleave(
    x: &Tensor,
    d: usize,
    repeats: usize,
    out: &Tensor,
) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let shape = x.shape().to_vec();
    let mut split = as_i64(&shape);
    split.insert(d + 1, repeats as i64);
    record("RepeatInterleaveBackward", &[x], &[out], &[], move |g| {
        Ok(vec![Some(
            g[0].reshape(&split)?.sum_dims(&[d as i64 + 1], false)?,
        )])
    })
}

/// Records an op whose every output position along `d` reads input position `map[j]`
/// (repeat_interleave with per-slice counts, reflect/replicate/circular pads): the gradient
/// is `zeros.index_add(d, map, g)`.
pub(crate) fn record_index_map(
    name: &'static str,
    x: &Tensor,
    steps: Vec<(usize, Vec<i64>)>,
    out: &Tensor,
) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    // the shape before each step (steps run in order in the forward pass)
    let mut shapes = vec![];
    let mut cur = x.shape().to_vec();
    for (d, map) in &steps {
        shapes.push(cur.clone());
        cur[*d] = map.len();
    }
    let device = x.device();
    record(name, &[x], &[out], &[], move |g| {
        let mut g = g[0].clone();
        for ((d, map), shape) in steps.iter().zip(&shapes).rev() {
            let idx = index_tensor(map, &device)?;
            g = Tensor::zeros(shape.clone(), g.dtype(), &g.device())?
                .index_add(*d as i64, &idx, &g, 1)?;
        }
        Ok(vec![Some(g)])
    })
}

fn index_tensor(map: &[i64], device: &Device) -> Result<Tensor> {
    Tensor::from_vec(map.to_vec(), [map.len()])?.to_device(device)
}

/// The source position of every output position of a one-dim reflect/replicate/circular pad.
pub(crate) fn pad_map(mode: PadMode, n: usize, l: usize, r: usize) -> Vec<i64> {
    let (n, l) = (n as i64, l as i64);
    (0..n + l + r as i64)
        .map(|j| {
            if j < l {
                match mode {
                    PadMode::Reflect => l - j,
                    PadMode::Replicate => 0,
                    _ => n - l + j,
                }
            } else if j < l + n {
                j - l
            } else {
                let k = j - l - n;
                match mode {
                    PadMode::Reflect => n - 2 - k,
                    PadMode::Replicate => n - 1,
                    _ => k,
                }
            }
        })
        .collect()
}

/// Records `out = x.flip(dims)`.
pub(crate) fn record_flip(x: &Tensor, dims: Vec<i64>, out: &Tensor) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    record("FlipBackward", &[x], &[out], &[], move |g| {
        Ok(vec![Some(g[0].flip(&dims)?)])
    })
}

/// Records `out = x.roll(shifts, dims)`: the gradient rolls back.
pub(crate) fn record_roll(x: &Tensor, shifts: &[i64], dims: &[i64], out: &Tensor) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let back: Vec<i64> = shifts.iter().map(|&s| s.wrapping_neg()).collect();
    let dims = dims.to_vec();
    record("RollBackward", &[x], &[out], &[], move |g| {
        Ok(vec![Some(g[0].roll(&back, &dims)?)])
    })
}

/// Records a constant pad: the gradient is `g` padded by the negated pads (crops what was
/// added, zero-fills what was cropped).
pub(crate) fn record_constant_pad(x: &Tensor, pad: &[i64], out: &Tensor) -> Result<()> {
    if !needs_grad(&[x]) {
        return Ok(());
    }
    let back: Vec<i64> = pad.iter().map(|&p| -p).collect();
    record("ConstantPadNdBackward", &[x], &[out], &[], move |g| {
        Ok(vec![Some(g[0].pad(&back, PadMode::constant(0.0))?)])
    })
}

/// Records output `pos` of a meshgrid made from the 0-d/1-d `t` (an expanded view): the
/// gradient sums over every other dim.
pub(crate) fn record_meshgrid(t: &Tensor, pos: usize, out: &Tensor) -> Result<()> {
    if !needs_grad(&[t]) {
        return Ok(());
    }
    let shape = as_i64(t.shape());
    let others: Vec<i64> = (0..out.dim() as i64).filter(|&k| k != pos as i64).collect();
    record("MeshgridBackward", &[t], &[out], &[], move |g| {
        let g = &g[0];
        let s = if others.is_empty() {
            g.clone()
        } else {
            g.sum_dims(&others, false)?
        };
        Ok(vec![Some(s.reshape(&shape)?)])
    })
}
