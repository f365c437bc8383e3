//! Sorting and selection primitives of the backend contract.
//!
//! One total order serves every op: numbers by value, NaN above +∞ (all NaNs equal),
//! `-0.0 == 0.0`, `false < true`; ties are broken by the position along the dim, so every
//! sort is stable and every selection deterministic. Indices are i64. A "row" is the 1-D
//! slice of an operand along the op's dim; all operands are addressed through their layouts.

use super::common::check::{check_extent, internal};
use super::View;
use crate::debug::{self, Replay};
use crate::{DType, Error, Layout, Result};

/// Checks a row op's operands once, for every backend: `src` and `values` of one dtype,
/// `indices` i64, one shape off `dim` (where `values` has `out_len` elements), rows shorter
/// than 2^32, and every operand inside its storage.
fn check_rows(
    op: &'static str,
    src: &View,
    dim: usize,
    out_len: usize,
    values: &View,
    indices: &View,
) -> Result<()> {
    let (s, v, i) = (
        src.layout.shape(),
        values.layout.shape(),
        indices.layout.shape(),
    );
    let ok = values.dtype == src.dtype
        && indices.dtype == DType::I64
        && v == i
        && v.len() == s.len()
        && (s.is_empty() || dim < s.len())
        && (0..s.len()).all(|d| {
            if d == dim {
                v[d] == out_len
            } else {
                v[d] == s[d]
            }
        });
    if !ok {
        return Err(internal(op, "operands disagree"));
    }
    let n = dim_len(src.layout, dim);
    if n >= u32::MAX as usize {
        return Err(Error::invalid(
            op,
            format!("dim {dim} has {n} elements; rows of 2^32 or more elements are not supported"),
        ));
    }
    for x in [src, values, indices] {
        check_extent(op, x, 0)?;
    }
    Ok(())
}

/// The length of a row along `dim` (1 for a 0-d layout); shared by every device's kernels.
pub(crate) fn dim_len(l: &Layout, dim: usize) -> usize {
    l.shape().get(dim).copied().unwrap_or(1)
}

/// Sorts each row of `src` along `dim` into `values` (src's dtype) and `indices` (i64, the
/// position of each value in its row); all three have `src`'s shape. Stable; `descending`
/// reverses the order of values, equal values keep their order.
pub(crate) fn sort(
    src: View,
    dim: usize,
    descending: bool,
    values: View,
    indices: View,
) -> Result<()> {
    check_rows(
        "sort",
        &src,
        dim,
        dim_len(src.layout, dim),
        &values,
        &indices,
    )?;
    debug::primitive("sort", Replay::Widen, &[src], &[values, indices], |i, o| {
        super::contract::backend_for(super::device_of(&[o[0]]))
            .sort(i[0], dim, descending, o[0], o[1])
    })
}

/// The first `k` elements of each row in the order of [`sort`] (`largest`: descending), into
/// `values` and `indices`, whose `dim` has size `k`.
pub(crate) fn topk(
    src: View,
    dim: usize,
    k: usize,
    largest: bool,
    values: View,
    indices: View,
) -> Result<()> {
    check_rows("topk", &src, dim, k, &values, &indices)?;
    if k > dim_len(src.layout, dim) {
        return Err(internal("topk", "k exceeds the row"));
    }
    debug::primitive("topk", Replay::Widen, &[src], &[values, indices], |i, o| {
        super::contract::backend_for(super::device_of(&[o[0]]))
            .topk(i[0], dim, k, largest, o[0], o[1])
    })
}

/// Element `k` (0-based) of each row in ascending [`sort`] order, into `values` and `indices`
/// whose `dim` has size 1. With `nan_propagates`, a row holding a NaN gives its first NaN
/// (PyTorch's `median`).
pub(crate) fn kth(
    src: View,
    dim: usize,
    k: usize,
    nan_propagates: bool,
    values: View,
    indices: View,
) -> Result<()> {
    check_rows("kthvalue", &src, dim, 1, &values, &indices)?;
    if k >= dim_len(src.layout, dim) {
        return Err(internal("kthvalue", "k exceeds the row"));
    }
    debug::primitive(
        "kthvalue",
        Replay::Widen,
        &[src],
        &[values, indices],
        |i, o| {
            super::contract::backend_for(super::device_of(&[o[0]])).kth(
                i[0],
                dim,
                k,
                nan_propagates,
                o[0],
                o[1],
            )
        },
    )
}

/// The number of runs of equal (`==`) consecutive elements of the 1-D `sorted` (NaNs are
/// never equal, so each is its own run, as in PyTorch's `unique`).
pub(crate) fn count_unique_consecutive(sorted: View) -> Result<usize> {
    let _sync = debug::host_sync(sorted.storage.device(), "unique count")?;
    debug::primitive_value("unique_count", &[sorted], || {
        super::contract::backend_for(super::device_of(&[sorted])).count_unique_consecutive(sorted)
    })
}

/// For the 1-D `sorted`: `values[g]` = the first element of run `g`, `group[i]` (i64) = the
/// run of element `i`, `counts[g]` (i64) = the length of run `g`.
pub(crate) fn unique_consecutive(
    sorted: View,
    values: View,
    group: View,
    counts: View,
) -> Result<()> {
    debug::primitive(
        "unique",
        Replay::Widen,
        &[sorted],
        &[values, group, counts],
        |i, o| {
            super::contract::backend_for(super::device_of(&[o[0]]))
                .unique_consecutive(i[0], o[0], o[1], o[2])
        },
    )
}

/// One sorted row per position of `values`: `seq`'s layout is over `values`' shape, with
/// stride 0 on the last dim; the row has `len` elements `stride` apart.
#[derive(Debug, Clone, Copy)]
pub struct SortedRows {
    pub len: usize,
    pub stride: usize,
}

/// `out[p]` (i64) = the number of elements of `p`'s sorted row that are `<` `values[p]`
/// (`<=` with `right`), in the order of [`sort`].
pub(crate) fn searchsorted(
    seq: View,
    rows: SortedRows,
    values: View,
    right: bool,
    out: View,
) -> Result<()> {
    debug::primitive(
        "searchsorted",
        Replay::Widen,
        &[seq, values],
        &[out],
        |i, o| {
            super::contract::backend_for(super::device_of(&[o[0]]))
                .searchsorted(i[0], rows, i[1], right, o[0])
        },
    )
}

/// `out[v] += weight` (or `+= 1` without weights, then `out` is i64) for each value `v` of
/// the 1-D integer `input`, in order. `weights` has `out`'s dtype. Errors (writing nothing)
/// if a value is outside `0..out.len()`.
pub(crate) fn bincount(input: View, weights: Option<View>, out: View) -> Result<()> {
    let inputs: Vec<View> = [input].into_iter().chain(weights).collect();
    debug::primitive("bincount", Replay::Widen, &inputs, &[out], |i, o| {
        super::contract::backend_for(super::device_of(&[o[0]])).bincount(
            i[0],
            i.get(1).copied(),
            o[0],
        )
    })
}

/// Counts the float `input`'s elements into `out.len()` equal bins over `[lo, hi]`; elements
/// outside (and NaN) are ignored, `hi` falls into the last bin. `out` has `input`'s dtype.
pub(crate) fn histc(input: View, lo: f64, hi: f64, out: View) -> Result<()> {
    debug::primitive("histc", Replay::Widen, &[input], &[out], |i, o| {
        super::contract::backend_for(super::device_of(&[o[0]])).histc(i[0], lo, hi, o[0])
    })
}

/// A 1-D operand inside its storage (the unique/searchsorted/bincount/histc kernels of every
/// backend take 1-D views).
pub(crate) fn check_1d(op: &'static str, v: &View) -> Result<()> {
    if v.layout.ndim() != 1 {
        return Err(internal(op, "expected a 1-D operand"));
    }
    check_extent(op, v, 0)
}

/// `searchsorted`'s operands as every backend receives them: `seq` (rows of `rows.len`
/// elements `rows.stride` apart) and `values` of one dtype and shape, i64 `out` of that shape,
/// all inside their storage.
pub(crate) fn check_searchsorted_operands(
    seq: &View,
    rows: SortedRows,
    values: &View,
    out: &View,
) -> Result<()> {
    let op = "searchsorted";
    let shape = values.layout.shape();
    if seq.dtype != values.dtype
        || out.dtype != DType::I64
        || seq.layout.shape() != shape
        || out.layout.shape() != shape
    {
        return Err(internal(op, "operands disagree"));
    }
    check_extent(op, seq, rows.len.saturating_sub(1) * rows.stride)?;
    check_extent(op, values, 0)?;
    check_extent(op, out, 0)
}

/// `bincount`'s operands: a 1-D integer `input`, 1-D f32/f64 `weights` of its length and of
/// `out`'s dtype (or none, and then i64 counts), a 1-D `out`.
pub(crate) fn check_bincount_operands(
    input: &View,
    weights: Option<&View>,
    out: &View,
) -> Result<()> {
    let op = "bincount";
    check_1d(op, input)?;
    check_1d(op, out)?;
    if let Some(w) = weights {
        check_1d(op, w)?;
        if w.layout.shape()[0] != input.layout.shape()[0] || w.dtype != out.dtype {
            return Err(internal(op, "weights disagree"));
        }
        if !matches!(w.dtype, DType::F32 | DType::F64) {
            return Err(internal(op, "weights are f32 or f64"));
        }
    } else if out.dtype != DType::I64 {
        return Err(internal(op, "counts are i64"));
    }
    if !input.dtype.is_int() {
        return Err(internal(op, "the input is an integer tensor"));
    }
    Ok(())
}

/// `histc`'s operands: a float `input` inside its storage and a non-empty 1-D `out` of its
/// dtype.
pub(crate) fn check_histc_operands(input: &View, out: &View) -> Result<()> {
    let op = "histc";
    check_1d(op, out)?;
    check_extent(op, input, 0)?;
    if out.dtype != input.dtype || !input.dtype.is_float() || out.layout.shape()[0] == 0 {
        return Err(internal(op, "operands disagree"));
    }
    Ok(())
}

/// `unique_consecutive`'s operands as every backend receives them: four 1-D views, values of
/// the input's dtype, i64 group ids (one per input element) and counts (one per value).
pub(crate) fn check_unique_operands(
    sorted: &View,
    values: &View,
    group: &View,
    counts: &View,
) -> Result<()> {
    let op = "unique";
    for v in [sorted, values, group, counts] {
        check_1d(op, v)?;
    }
    let n = sorted.layout.shape()[0];
    let g = values.layout.shape()[0];
    if values.dtype != sorted.dtype
        || group.dtype != DType::I64
        || counts.dtype != DType::I64
        || group.layout.shape()[0] != n
        || counts.layout.shape()[0] != g
    {
        return Err(internal(op, "operands disagree"));
    }
    Ok(())
}
