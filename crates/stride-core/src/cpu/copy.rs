//! Strided copy (with dtype cast) and fill — through the output's layout, always.

use super::access::Access;
use super::strided::{Plan, SendPtr};
use crate::backend::View;
use crate::{with_dtype, Element, Result, Scalar};

/// `dst[i] = cast(src[i])` over `dst`'s shape (`src` already broadcast to it).
pub(crate) fn copy_cast(src: View, dst: View) -> Result<()> {
    let acc = Access::views(Some(&dst), &[&src]);
    with_dtype!(src.dtype, S => with_dtype!(dst.dtype, D => unsafe {
        copy_typed::<S, D>(&src, &dst, acc.ptr::<S>(src.storage), acc.ptr::<D>(dst.storage))
    }));
    Ok(())
}

/// Side of the square tiles a transposing copy moves through cache.
const TILE: usize = 32;

unsafe fn copy_typed<S: Element, D: Element>(src: &View, dst: &View, s: *mut S, d: *mut D) {
    let l = dst.layout;
    let plan = Plan::new(
        l.shape(),
        [l.strides(), src.layout.strides()],
        [l.offset(), src.layout.offset()],
    );
    if plan.numel() == 0 {
        return;
    }
    let [dso, sso] = plan.inner_strides();
    let (sp, dp) = (SendPtr(s), SendPtr(d));
    // A transposing copy: the output runs contiguously along a dim the input strides across.
    // Walk it in square tiles so both sides stay in cache (a plain loop misses on every read).
    if sso != 1 && dso == 1 && plan.inner_len() >= TILE {
        if let Some(t) = transpose_dims(l.shape(), l.strides(), src.layout.strides()) {
            return tiled_copy::<S, D>(&t, l.offset(), src.layout.offset(), sp, dp);
        }
    }
    plan.par_ranges(|start, end| {
        plan.for_each_run(start, end, |off, len| {
            let (dp, sp) = (dp.get().offset(off[0]), sp.get().offset(off[1]));
            if dso == 1 && sso == 1 {
                for i in 0..len {
                    *dp.add(i) = (*sp.add(i)).cast::<D>();
                }
            } else if dso == 1 && sso == 0 {
                let v = (*sp).cast::<D>();
                for i in 0..len {
                    *dp.add(i) = v;
                }
            } else {
                for i in 0..len as isize {
                    *dp.offset(i * dso) = (*sp.offset(i * sso)).cast::<D>();
                }
            }
        })
    });
}

/// A copy seen as `batch × rows × cols` where the destination is contiguous along cols and the
/// source along rows.
struct Transpose {
    batch: Vec<(usize, usize, usize)>, // (size, dst stride, src stride)
    rows: usize,
    cols: usize,
    d_row: usize,
    s_col: usize,
}

fn transpose_dims(shape: &[usize], ds: &[usize], ss: &[usize]) -> Option<Transpose> {
    let live: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] > 1).collect();
    let col = *live.iter().find(|&&i| ds[i] == 1)?;
    let row = *live.iter().find(|&&i| ss[i] == 1 && i != col)?;
    let batch = live
        .iter()
        .filter(|&&i| i != col && i != row)
        .map(|&i| (shape[i], ds[i], ss[i]))
        .collect();
    Some(Transpose {
        batch,
        rows: shape[row],
        cols: shape[col],
        d_row: ds[row],
        s_col: ss[col],
    })
}

unsafe fn tiled_copy<S: Element, D: Element>(
    t: &Transpose,
    doff: usize,
    soff: usize,
    s: SendPtr<S>,
    d: SendPtr<D>,
) {
    let nb: usize = t.batch.iter().map(|b| b.0).product();
    let (tr, tc) = (t.rows.div_ceil(TILE), t.cols.div_ceil(TILE));
    let tiles = nb * tr * tc;
    let work = |k: usize| {
        let (mut b, tile) = (k / (tr * tc), k % (tr * tc));
        let (mut bd, mut bs) = (doff, soff);
        for &(n, dst, sst) in t.batch.iter().rev() {
            bd += (b % n) * dst;
            bs += (b % n) * sst;
            b /= n;
        }
        let (r0, c0) = ((tile / tc) * TILE, (tile % tc) * TILE);
        let (r1, c1) = ((r0 + TILE).min(t.rows), (c0 + TILE).min(t.cols));
        for r in r0..r1 {
            let drow = d.get().add(bd + r * t.d_row);
            let srow = s.get().add(bs + r);
            for c in c0..c1 {
                *drow.add(c) = (*srow.add(c * t.s_col)).cast::<D>();
            }
        }
    };
    if tiles * TILE * TILE < super::strided::PAR_GRAIN * 2 {
        (0..tiles).for_each(work);
    } else {
        use rayon::prelude::*;
        (0..tiles).into_par_iter().for_each(work);
    }
}

/// Writes `value` (cast to the output dtype) into every element of `dst`.
pub(crate) fn fill(dst: View, value: Scalar) -> Result<()> {
    let acc = Access::views(Some(&dst), &[]);
    with_dtype!(dst.dtype, D => unsafe {
        let v: D = value.to_elem();
        let p = SendPtr(acc.ptr::<D>(dst.storage));
        let l = dst.layout;
        let plan = Plan::new(l.shape(), [l.strides()], [l.offset()]);
        let [st] = plan.inner_strides();
        plan.par_ranges(|s, e| plan.for_each_run(s, e, |off, len| {
            let dp = p.get().offset(off[0]);
            for i in 0..len as isize {
                *dp.offset(i * st) = v;
            }
        }));
    });
    Ok(())
}
