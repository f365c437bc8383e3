//! What the CUDA row kernels (`norm.rs`, `cross_entropy.rs`; their shared device code is
//! kernels/rows.cuh) share on the host: operands as (pointer, offset, row stride, column
//! stride), the vector-path check, and the grid.

use super::launch::dptr;
use crate::backend::View;
use crate::{DType, Result};

/// Threads one SM runs at once (the grids are sized to be resident together).
const THREADS_PER_SM: usize = 2048;

/// A row kernel's operand: base pointer, offset, row stride and column stride, in elements.
/// A 1-d operand is one row (row stride 0); an absent one is [`NONE`].
pub(crate) type RowArg = (u64, i64, i64, i64);

/// An absent operand: null pointer, zero offset and strides.
pub(crate) const NONE: RowArg = (0, 0, 0, 0);

/// `v` as a row kernel's operand.
pub(crate) fn operand(v: &View) -> Result<RowArg> {
    let (_, p) = dptr(v)?;
    let st = v.layout.strides();
    let (rs, cs) = match st.len() {
        2 => (st[0] as i64, st[1] as i64),
        1 => (0, st[0] as i64),
        _ => (0, 0),
    };
    Ok((p, v.layout.offset() as i64, rs, cs))
}

/// Whether the kernels' vector path (one 16-byte load per chunk) applies: every operand
/// present dense along the row (column stride 1), each row starting on a 16-byte boundary,
/// the row length a whole number of vectors.
pub(crate) fn vectorised(cols: usize, operands: &[RowArg], dtype: DType) -> bool {
    let size = dtype.size_in_bytes() as u64;
    cols.is_multiple_of(16 / dtype.size_in_bytes())
        && operands.iter().all(|&(p, off, rs, cs)| {
            p == 0
                || (cs == 1
                    && (p + off as u64 * size).is_multiple_of(16)
                    && (rs as u64 * size).is_multiple_of(16))
        })
}

/// Blocks of `block` threads for `rows` rows: all resident at once (grid-stride over the
/// rest), at most one per row.
pub(crate) fn grid_for(sm_count: u32, rows: usize, block: usize) -> u32 {
    (sm_count as usize * (THREADS_PER_SM / block))
        .min(rows)
        .max(1) as u32
}
