//! Grouped matrix products on the CPU (the semantics: `backend/grouped_matmul.rs`): the
//! offsets are read, and each group is one call of the CPU matrix product on sub-views of the
//! operands — no copies, whatever the strides.

use super::access::Access;
use crate::backend::grouped_matmul::{check_offsets, group_ranges, GroupedMatmul};
use crate::backend::View;
use crate::{DType, Error, Layout, Result, Scalar};

/// The offsets of `offs` (1-D i32 or i64) as i64.
fn read_offsets(offs: &View) -> Result<Vec<i64>> {
    let l = offs.layout;
    let (n, st, off) = (l.shape()[0], l.strides()[0], l.offset());
    let acc = Access::views(None, &[offs]);
    let at = |i: usize| off + i * st;
    Ok(match offs.dtype {
        DType::I64 => {
            let p = acc.ptr::<i64>(offs.storage);
            (0..n).map(|i| unsafe { *p.add(at(i)) }).collect()
        }
        DType::I32 => {
            let p = acc.ptr::<i32>(offs.storage);
            (0..n).map(|i| unsafe { *p.add(at(i)) as i64 }).collect()
        }
        d => {
            return Err(Error::invalid(
                "grouped_matmul",
                format!("the offsets must be i32 or i64, got {d}"),
            ))
        }
    })
}

/// See [`crate::backend::grouped_matmul::grouped_matmul`].
pub(crate) fn grouped_matmul(
    g: GroupedMatmul,
    a: View,
    b: View,
    offs: View,
    dst: View,
) -> Result<()> {
    let offsets = read_offsets(&offs)?;
    match g {
        GroupedMatmul::Rows => {
            let rows = a.layout.shape()[0];
            check_offsets(g, &offsets, rows)?;
            let ranges = group_ranges(&offsets, rows);
            for (gi, &(s, e)) in ranges.iter().enumerate() {
                if e == s {
                    continue;
                }
                let la = a.layout.narrow(0, s as i64, e - s)?;
                let lb = b.layout.select(0, gi as i64)?;
                let ld = dst.layout.narrow(0, s as i64, e - s)?;
                super::matmul::matmul(view(&a, &la), view(&b, &lb), view(&dst, &ld))?;
            }
            // rows past the last group are zeros
            let covered = ranges.last().map_or(0, |r| r.1);
            if covered < rows {
                let ld = dst.layout.narrow(0, covered as i64, rows - covered)?;
                super::copy::fill(view(&dst, &ld), Scalar::Int(0))?;
            }
            Ok(())
        }
        GroupedMatmul::Contraction => {
            check_offsets(g, &offsets, a.layout.shape()[1])?;
            let ranges = group_ranges(&offsets, a.layout.shape()[1]);
            for (gi, &(s, e)) in ranges.iter().enumerate() {
                let la = a.layout.narrow(1, s as i64, e - s)?;
                let lb = b.layout.narrow(0, s as i64, e - s)?;
                let ld = dst.layout.select(0, gi as i64)?;
                // an empty contraction writes zeros
                super::matmul::matmul(view(&a, &la), view(&b, &lb), view(&dst, &ld))?;
            }
            Ok(())
        }
    }
}

fn view<'a>(v: &View<'a>, layout: &'a Layout) -> View<'a> {
    View {
        storage: v.storage,
        layout,
        dtype: v.dtype,
    }
}
