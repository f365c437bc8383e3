//! Strided copy (with dtype cast) and fill — through the output's layout, always.

use super::access::Access;
use super::strided::{stage_buf, Plan, SendPtr, TileOperand, PREFETCH_RUNS};
use super::transpose::transpose_block_4;
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

/// A copy within one dtype moves bits (NaN payloads included, as PyTorch's `copy_`); across
/// dtypes each element goes through [`Element::cast`].
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
    let same = S::DTYPE == D::DTYPE;
    let (sp, dp) = (SendPtr(s), SendPtr(d));
    let run = |dp: *mut D, sp: *mut S, [dso, sso]: [isize; 2], len: usize| {
        if same {
            let sp = sp as *mut D;
            if dso == 1 && sso == 1 {
                std::ptr::copy_nonoverlapping(sp, dp, len);
            } else {
                for i in 0..len as isize {
                    *dp.offset(i * dso) = *sp.offset(i * sso);
                }
            }
        } else if dso == 1 && sso == 1 {
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
    };
    // A transposing copy (the source strides across the output's contiguous dim) goes tile by
    // tile, the source read along its own contiguous dim (see `Tiling`); 4-byte elements of one
    // dtype move 8×8 through registers, straight into the output.
    if let Some(t) = plan.tiling() {
        let direct = same
            && std::mem::size_of::<S>() == 4
            && t.staged[1]
            && t.rows[1] == 1
            && t.cols[0] == 1;
        let buf = || stage_buf::<S>(!direct && t.staged[1]);
        plan.par_tiles(&t, buf, |buf, org, rows, cols| {
            if direct {
                let (s, d) = (
                    sp.get().offset(org[1]) as *const u32,
                    dp.get().offset(org[0]) as *mut u32,
                );
                return transpose_block_4(s, t.cols[1], d, t.rows[0], rows, cols, 0);
            }
            let o = TileOperand {
                base: dp.get().offset(org[0]),
                row: t.rows[0],
                col: t.cols[0],
                staged: false,
            };
            let i = TileOperand::new(&t, 1, sp.get(), org, rows, cols, buf);
            for r in 0..rows {
                o.prefetch(r + PREFETCH_RUNS, cols);
                run(o.run(r), i.run(r), [o.col, i.col], cols);
            }
        });
    } else {
        let st = plan.inner_strides();
        plan.par_runs(|off, len| run(dp.get().offset(off[0]), sp.get().offset(off[1]), st, len));
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
        plan.par_runs(|off, len| {
            let dp = p.get().offset(off[0]);
            for i in 0..len as isize {
                *dp.offset(i * st) = v;
            }
        });
    });
    Ok(())
}
