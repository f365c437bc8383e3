//! `flip` on CUDA: the copy kernel over a walk whose source strides are negative along the
//! flipped dims (the kernels take signed strides; layouts never do). Dims stay in logical
//! order; size-1 dims are dropped and neighbours merged where both operands are contiguous
//! across them (two flipped dims of a dense source merge into one reversed run).

use super::elementwise::copy_walk;
use super::launch::{dptr, Walk};
use crate::backend::View;
use crate::Result;

/// `dst[i] = cast(src[j])` where `j_d = n_d − 1 − i_d` for `d` in `dims`, else `j_d = i_d`.
pub(crate) fn flip(src: View, dims: &[usize], dst: View) -> Result<()> {
    let (dev, po) = dptr(&dst)?;
    let (_, pa) = dptr(&src)?;
    let shape = dst.layout.shape();
    let numel: usize = shape.iter().product();
    let mut soff = src.layout.offset() as isize;
    let (mut sizes, mut sst, mut dst_st) = (vec![], vec![], vec![]);
    for (k, &n) in shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let ss = src.layout.strides()[k] as isize;
        let s = if dims.contains(&k) {
            soff += (n as isize - 1) * ss;
            -ss
        } else {
            ss
        };
        let ds = dst.layout.strides()[k] as isize;
        // merge into the previous dim when both operands continue it
        if let (Some(&pn), Some(&ps), Some(&pd)) = (sizes.last(), sst.last(), dst_st.last()) {
            if ps == s * n as isize && pd == ds * n as isize {
                *sizes.last_mut().expect("nonempty") = pn * n;
                *sst.last_mut().expect("nonempty") = s;
                *dst_st.last_mut().expect("nonempty") = ds;
                continue;
            }
        }
        sizes.push(n);
        sst.push(s);
        dst_st.push(ds);
    }
    let w = Walk::from_parts(
        "flip",
        &sizes,
        [&dst_st, &sst],
        [dst.layout.offset() as isize, soff],
        numel,
    )?;
    copy_walk(&dev, "flip", (src.dtype, pa), (dst.dtype, po), &w)
}
