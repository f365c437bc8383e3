//! Grouped matrix products over groups of rows given by device-side offsets (the frontend:
//! `ops/grouped_matmul.rs`): one launch for every expert of a mixture-of-experts layer, with
//! the group sizes never read by the host.
//!
//! `offs` is a 1-D i32 or i64 tensor of `G` cumulative group ends (PyTorch's
//! `torch._grouped_mm` convention): group `g` covers `[offs[g−1], offs[g])` of the ragged
//! dim (`offs[−1] = 0`). The offsets must be non-decreasing and within `[0, R]` (`R` the
//! ragged dim's length): a bad one is an error, at once on the CPU and deferred to the next
//! read on CUDA (as an index out of bounds; the product then writes nothing). The kernels
//! never trust values the host has not seen: they read the groups as `[m_{g−1}, m_g)` with
//! `m_g = max(clamp(offs[0], 0, R), …, clamp(offs[g], 0, R))`, which is the same for good
//! offsets and never out of bounds for bad ones.
//!
//! - [`GroupedMatmul::Rows`]: `a (R, K)`, `b (G, K, N)`, `dst (R, N)`; rows of group `g` are
//!   `a[rows] · b[g]`. Rows past the last group end are written as zeros.
//! - [`GroupedMatmul::Contraction`]: `a (M, R)`, `b (R, N)`, `dst (G, M, N)`;
//!   `dst[g] = a[:, rows_g] · b[rows_g, :]` (the weight gradient of `Rows`). An empty group
//!   gives zeros.
//!
//! Every operand may have any strides; all three share one float dtype; f16 and bf16
//! accumulate in f32. `dst` shares no storage with an input and its prior contents are never
//! read. Each output element is one sum over its group in a fixed order: the same bits every
//! run.

use super::contract::backend_for;
use super::{same_device, View};
use crate::debug::{self, Replay};
use crate::{Error, Result};

/// Which dim of the product is ragged (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupedMatmul {
    /// The rows of `a` and `dst` are split into groups; `b` holds one matrix per group.
    Rows,
    /// The contraction dim is split; `dst` holds one matrix per group.
    Contraction,
}

impl GroupedMatmul {
    /// The name the debug tools and errors use.
    pub fn name(self) -> &'static str {
        match self {
            GroupedMatmul::Rows => "grouped_matmul",
            GroupedMatmul::Contraction => "grouped_matmul_contraction",
        }
    }
}

/// The clamped `[start, end)` of every group from the offsets read as i64 (the host-side
/// reading of the module docs' rule; the CUDA kernels apply the same rule on the device).
pub(crate) fn group_ranges(offs: &[i64], ragged: usize) -> Vec<(usize, usize)> {
    let mut prev = 0usize;
    offs.iter()
        .map(|&o| {
            let start = prev;
            prev = prev.max(o.clamp(0, ragged as i64) as usize);
            (start, prev)
        })
        .collect()
}

/// The error for the bad offset at `index` (see the module docs), the same on every device.
pub(crate) fn bad_offset(g: GroupedMatmul, index: i64, ragged: usize) -> Error {
    Error::invalid(
        g.name(),
        format!(
            "offset {index} is out of order: the offsets are cumulative group ends, so they must \
             be non-decreasing and within [0, {ragged}] (the length of the grouped dim); build \
             them as a cumsum of the group sizes"
        ),
    )
}

/// Checks offsets the host has read (the CPU's form of the CUDA check kernel).
pub(crate) fn check_offsets(g: GroupedMatmul, offs: &[i64], ragged: usize) -> Result<()> {
    let mut prev = 0;
    for (i, &o) in offs.iter().enumerate() {
        if o < prev || o > ragged as i64 {
            return Err(bad_offset(g, i as i64, ragged));
        }
        prev = o;
    }
    Ok(())
}

/// The grouped product into `dst` (the frontend checked shapes, dtypes and devices).
pub(crate) fn grouped_matmul(
    g: GroupedMatmul,
    a: View,
    b: View,
    offs: View,
    dst: View,
) -> Result<()> {
    debug::primitive(g.name(), Replay::Widen, &[a, b, offs], &[dst], |i, o| {
        backend_for(same_device(g.name(), &[o[0], i[0], i[1], i[2]])?)
            .grouped_matmul(g, i[0], i[1], i[2], o[0])
    })
}

#[cfg(test)]
mod tests {
    use super::group_ranges;

    #[test]
    fn ranges_clamp_and_never_run_backwards() {
        assert_eq!(
            group_ranges(&[2, 5, 5, 9], 9),
            vec![(0, 2), (2, 5), (5, 5), (5, 9)]
        );
        // past the end, negative, decreasing: clamped, empty, never out of bounds
        assert_eq!(
            group_ranges(&[-3, 4, 2, 99], 6),
            vec![(0, 0), (0, 4), (4, 4), (4, 6)]
        );
        assert_eq!(group_ranges(&[], 6), vec![]);
    }

    #[test]
    fn offsets_out_of_order_are_errors() {
        use super::{check_offsets, GroupedMatmul::Rows};
        assert!(check_offsets(Rows, &[0, 2, 2, 6], 6).is_ok());
        for (bad, at) in [(vec![-1, 2], 0), (vec![3, 2], 1), (vec![2, 7], 1)] {
            let e = check_offsets(Rows, &bad, 6).unwrap_err().to_string();
            assert!(e.contains(&format!("offset {at} is out of order")), "{e}");
        }
    }
}
