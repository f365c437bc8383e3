//! What the CPU's row kernels (`norm.rs`, `cross_entropy.rs`) share: operands addressed as
//! rows, and how many tasks a pass over rows is split into.

use super::access::Access;
use super::strided::{SendPtr, PAR_GRAIN};
use crate::backend::View;

/// A 2-d operand (rows, columns) or a 1-d one (one row: element `c` is `at(0, c)`): base
/// pointer, offset and strides in elements.
#[derive(Clone, Copy)]
pub(crate) struct RowOp<T> {
    p: SendPtr<T>,
    off: isize,
    rs: isize,
    cs: isize,
}

impl<T> RowOp<T> {
    /// `v` in the storages `acc` locked.
    pub(crate) fn of(acc: &Access, v: &View) -> RowOp<T> {
        let st = v.layout.strides();
        let (rs, cs) = match st.len() {
            2 => (st[0], st[1]),
            1 => (0, st[0]),
            _ => (0, 0),
        };
        RowOp {
            p: SendPtr(acc.ptr::<T>(v.storage)),
            off: v.layout.offset() as isize,
            rs: rs as isize,
            cs: cs as isize,
        }
    }
    /// Element `(r, c)`.
    ///
    /// # Safety
    /// `(r, c)` must be inside the view this was made from.
    #[inline(always)]
    pub(crate) unsafe fn at(self, r: usize, c: usize) -> *mut T {
        self.p
            .get()
            .offset(self.off + r as isize * self.rs + c as isize * self.cs)
    }
}

/// The tasks a pass over `rows` rows of `cols` elements is split into: one per
/// [`PAR_GRAIN`] elements, at most four per thread.
pub(crate) fn tasks(rows: usize, cols: usize) -> usize {
    (rows.saturating_mul(cols.max(1)) / PAR_GRAIN).clamp(1, rayon::current_num_threads() * 4)
}
