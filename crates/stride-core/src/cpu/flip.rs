//! Copy with some dims reversed (`flip`): the one copy whose source strides would have to be
//! negative, which no [`crate::Layout`] expresses. It walks the output in logical order, one
//! innermost run at a time, with signed source strides; both sides are addressed through
//! their layouts.

use super::access::Access;
use super::strided::{SendPtr, PAR_GRAIN};
use crate::backend::View;
use crate::{with_dtype, Element, Result};

/// `dst[i] = cast(src[j])` where `j_d = n_d − 1 − i_d` for `d` in `dims`, else `j_d = i_d`.
/// `src` has `dst`'s shape.
pub(crate) fn flip(src: View, dims: &[usize], dst: View) -> Result<()> {
    let acc = Access::views(Some(&dst), &[&src]);
    with_dtype!(src.dtype, S => with_dtype!(dst.dtype, D => unsafe {
        flip_typed::<S, D>(&src, dims, &dst, acc.ptr::<S>(src.storage), acc.ptr::<D>(dst.storage))
    }));
    Ok(())
}

unsafe fn flip_typed<S: Element, D: Element>(
    src: &View,
    dims: &[usize],
    dst: &View,
    s: *mut S,
    d: *mut D,
) {
    let shape = dst.layout.shape();
    let numel: usize = shape.iter().product();
    if numel == 0 {
        return;
    }
    // signed strides; size-1 dims dropped (they contribute nothing)
    let mut soff = src.layout.offset() as isize;
    let mut sizes = vec![];
    let mut sst: Vec<isize> = vec![];
    let mut dst_st: Vec<isize> = vec![];
    for (k, &n) in shape.iter().enumerate() {
        let ss = src.layout.strides()[k] as isize;
        let st = if dims.contains(&k) {
            soff += (n as isize - 1) * ss;
            -ss
        } else {
            ss
        };
        if n != 1 {
            sizes.push(n);
            sst.push(st);
            dst_st.push(dst.layout.strides()[k] as isize);
        }
    }
    if sizes.is_empty() {
        sizes.push(1);
        sst.push(0);
        dst_st.push(0);
    }
    let nd = sizes.len();
    let inner = sizes[nd - 1];
    let (is, id) = (sst[nd - 1], dst_st[nd - 1]);
    let rows = numel / inner;
    let doff = dst.layout.offset() as isize;
    let (sp, dp) = (SendPtr(s), SendPtr(d));
    let run_rows = |r0: usize, r1: usize| {
        for r in r0..r1 {
            // decompose the row index over the outer dims
            let (mut rem, mut so, mut dof) = (r, soff, doff);
            for k in (0..nd - 1).rev() {
                let i = rem % sizes[k];
                rem /= sizes[k];
                so += i as isize * sst[k];
                dof += i as isize * dst_st[k];
            }
            let (sr, dr) = (sp.get().offset(so), dp.get().offset(dof));
            for i in 0..inner as isize {
                *dr.offset(i * id) = (*sr.offset(i * is)).cast::<D>();
            }
        }
    };
    let tasks = numel / PAR_GRAIN;
    if tasks < 2 || rows < 2 || rayon::current_num_threads() < 2 {
        run_rows(0, rows);
    } else {
        let tasks = tasks.min(rayon::current_num_threads() * 4);
        super::parallel::run_chunks(rows, tasks, &run_rows);
    }
}
