//! Index primitives of the backend contract: gather, scatter (assign / add / prod / amax /
//! amin), the masked scans (count, nonzero, masked_select, masked_scatter) and extrema.
//!
//! Every index op of the frontend is one of these over views that the frontend builds without
//! copying: `index_select`, `embedding`, `take` and advanced indexing are a [`gather`] whose
//! index operand is broadcast (stride 0) over the output; `index_add`, `index_copy` and
//! `index_fill` are a [`scatter`] with such an index; a scalar source is a 0-d tensor broadcast
//! to the index's shape.
//!
//! Index operands are i64, i32 or u32 (any layout, stride 0 included) and are never cast.
//! Every primitive that writes validates all of its indices **before its first write**, while
//! holding the storage locks, and reports the first bad index in logical order: at once on the
//! CPU, at the next read of the device on a GPU (`cuda/deferred.rs`), where the failing op
//! writes nothing either.

use super::common::check::{bad_index_dtype, check_extent, internal};
use super::View;
use crate::debug::{self, Replay};
use crate::{DType, Error, Layout, Result, Scalar};

/// The indexed dim of an index operand: how its values address the indexed tensor.
#[derive(Debug, Clone, Copy)]
pub struct IndexDim {
    /// The op, for error messages.
    pub op: &'static str,
    /// The dim of the indexed tensor (for error messages; for [`scatter`], also the axis of
    /// the index's shape along which several positions may hit one destination).
    pub dim: usize,
    /// The size of that dim: valid indices are `0..size` (and `-size..0` with `wrap`).
    pub size: usize,
    /// Its stride (in elements) in the indexed tensor's storage.
    pub stride: usize,
    /// Negative indices count from the end (PyTorch's `take`, `index_fill`, advanced
    /// indexing); otherwise they are out of range (PyTorch's `gather`, `scatter*`,
    /// `index_select`, `index_add`, `index_copy`, `embedding`).
    pub wrap: bool,
}

impl IndexDim {
    /// The valid index range `lo..hi`.
    pub fn bounds(&self) -> (i64, i64) {
        let size = self.size as i64;
        (if self.wrap { -size } else { 0 }, size)
    }
    /// The error for an index value outside the valid range.
    pub fn out_of_range(&self, index: i64) -> Error {
        Error::IndexOutOfRange {
            op: self.op,
            index,
            dim: self.dim,
            size: self.size,
        }
    }
}

/// The dtypes an index operand may have.
pub const INDEX_DTYPES: [DType; 3] = [DType::I64, DType::I32, DType::U32];

/// How [`scatter`] combines a source element with its destination.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScatterOp {
    /// `dst = src`; with duplicate indices the last in logical order wins. Any dtype.
    Assign,
    /// `dst += alpha·src` (`alpha` cast to the dtype first, as PyTorch's `index_add`).
    /// Floats add in their compute type and round once per step, integers wrap. Not bool.
    Add { alpha: Scalar },
    /// `dst *= src`. Not bool.
    Prod,
    /// `dst = max(dst, src)`, NaN propagating. Not bool.
    Amax,
    /// `dst = min(dst, src)`, NaN propagating. Not bool.
    Amin,
}

impl ScatterOp {
    pub fn name(self) -> &'static str {
        match self {
            ScatterOp::Assign => "scatter",
            ScatterOp::Add { .. } => "scatter_add",
            ScatterOp::Prod => "scatter_reduce(prod)",
            ScatterOp::Amax => "scatter_reduce(amax)",
            ScatterOp::Amin => "scatter_reduce(amin)",
        }
    }
}

/// `dst[p] = src_storage[src.offset(p) + index[p]·at.stride]` for every position `p` of
/// `dst`'s shape. `src` and `index` are laid out over `dst`'s shape: `src`'s layout holds the
/// strides of the indexed tensor for the dims that are not indexed and 0 for the indexed ones.
/// `src` and `dst` have one dtype. Errors (writing nothing) on an out-of-range index.
pub(crate) fn gather(src: View, index: View, at: IndexDim, dst: View) -> Result<()> {
    // the range check reads the indices before anything is written: a wait on a GPU
    let _sync = range_check(dst, dst)?;
    // the debug tools see the whole region `src` can address (see `region`)
    let src_region = region(src.layout, &at);
    let srcr = View {
        layout: &src_region,
        ..src
    };
    debug::primitive("gather", Replay::Widen, &[srcr, index], &[dst], |i, o| {
        let (l, at) = from_region(src.layout, i[0].layout, at);
        let src = View { layout: &l, ..i[0] };
        super::contract::backend_for(super::device_of(&[o[0]])).gather(src, i[1], at, o[0])
    })
}

/// The storage an indexed operand (gather's `src`, scatter's `dst`) can address, as an
/// ordinary layout: the indexed axis (`at.size` positions `at.stride` apart) first, then the
/// operand's dims of non-zero stride. What the debug tools copy, replay and compare.
fn region(l: &Layout, at: &IndexDim) -> Layout {
    let mut shape = vec![at.size];
    let mut strides = vec![at.stride];
    for (&n, &st) in l.shape().iter().zip(l.strides()) {
        if st != 0 {
            shape.push(n);
            strides.push(st);
        }
    }
    Layout::new(shape, strides, l.offset())
}

/// The operand's own layout (shape and zero strides of `original`) over `region` — the
/// inverse of [`region`], also over a copy of the region with other strides — and `at` with
/// the region's stride for the indexed axis.
fn from_region(original: &Layout, region: &Layout, at: IndexDim) -> (Layout, IndexDim) {
    let rs = region.strides();
    let mut k = 1;
    let strides = original
        .strides()
        .iter()
        .map(|&st| {
            if st == 0 {
                0
            } else {
                k += 1;
                rs[k - 1]
            }
        })
        .collect();
    (
        Layout::new(original.shape().to_vec(), strides, region.offset()),
        IndexDim {
            stride: rs[0],
            ..at
        },
    )
}

/// Gathers and scatters validate every index before writing. On a GPU the check runs on the
/// device and the host does not wait for it (a failure is reported at the next read), unless
/// sync checks are on (`crate::set_sync_checks`): then the host waits for the verdict, and every
/// device reports that wait to the debug tools.
fn range_check(index: View, dst: View) -> Result<Option<debug::Announced>> {
    Ok(if index.layout.numel() > 0 && crate::sync_checks() {
        Some(debug::host_sync(dst.storage.device(), "index range check")?)
    } else {
        None
    })
}

/// `dst_storage[dst.offset(p) + index[p]·at.stride] op= src[p]` for every position `p` of
/// `index`'s shape. `dst`'s layout is over that shape with stride 0 on axis `at.dim`, and must
/// be part of a non-overlapping tensor; neither `index` nor `src` may share `dst`'s storage.
/// Destinations hit by several positions combine them in logical order (so `Assign` keeps
/// the last), the same on every run and for any thread count. With `include_self == false`
/// every destination that is hit starts from the op's identity instead of its old value.
/// Errors (writing nothing) on an out-of-range index.
pub(crate) fn scatter(
    dst: View,
    index: View,
    at: IndexDim,
    src: View,
    op: ScatterOp,
    include_self: bool,
) -> Result<()> {
    let _sync = range_check(index, dst)?;
    let dst_region = region(dst.layout, &at);
    let dstr = View {
        layout: &dst_region,
        ..dst
    };
    debug::primitive(op.name(), Replay::Widen, &[index, src], &[dstr], |i, o| {
        let (l, at) = from_region(dst.layout, o[0].layout, at);
        let dst = View { layout: &l, ..o[0] };
        super::contract::backend_for(super::device_of(&[dst])).scatter(
            dst,
            i[0],
            at,
            i[1],
            op,
            include_self,
        )
    })
}

/// The number of non-zero (true) elements.
pub(crate) fn count_nonzero(src: View) -> Result<usize> {
    // the count sizes an output: the host reads it
    let _sync = debug::host_sync(src.storage.device(), "count_nonzero")?;
    debug::primitive_value("count_nonzero", &[src], || {
        super::contract::backend_for(super::device_of(&[src])).count_nonzero(src)
    })
}

/// Writes the coordinates of the non-zero elements of `src`, in logical order, into `dst`
/// (i64, shape `[count, src.ndim]`).
pub(crate) fn nonzero(src: View, dst: View) -> Result<()> {
    debug::primitive("nonzero", Replay::Widen, &[src], &[dst], |i, o| {
        super::contract::backend_for(super::device_of(&[o[0]])).nonzero(i[0], o[0])
    })
}

/// `dst` (1-D, `count(mask)` elements) = the elements of `src` where the bool `mask` is true,
/// in logical order; `src` and `mask` have one shape (broadcast by the frontend).
pub(crate) fn masked_select(src: View, mask: View, dst: View) -> Result<()> {
    debug::primitive(
        "masked_select",
        Replay::Widen,
        &[src, mask],
        &[dst],
        |i, o| {
            super::contract::backend_for(super::device_of(&[o[0]])).masked_select(i[0], i[1], o[0])
        },
    )
}

/// The k-th true element of the bool `mask` (broadcast to `dst`'s shape, logical order) gets
/// element k of the 1-D `src`. Errors (writing nothing) if `src` has fewer elements than
/// `mask` has true ones. `src` may not share `dst`'s storage.
pub(crate) fn masked_scatter(dst: View, mask: View, src: View) -> Result<()> {
    let _sync = debug::host_sync(dst.storage.device(), "masked_scatter count")?;
    debug::primitive(
        "masked_scatter",
        Replay::Widen,
        &[mask, src],
        &[dst],
        |i, o| {
            super::contract::backend_for(super::device_of(&[o[0]])).masked_scatter(o[0], i[0], i[1])
        },
    )
}

/// The smallest and largest element (`None` for an empty tensor): `Scalar::Int` for integer
/// and bool tensors (exact), `Scalar::Float` for floats (NaN if any element is NaN).
pub(crate) fn extrema(src: View) -> Result<Option<(Scalar, Scalar)>> {
    let _sync = debug::host_sync(src.storage.device(), "extrema")?;
    debug::primitive_value("extrema", &[src], || {
        super::contract::backend_for(super::device_of(&[src])).extrema(src)
    })
}

// ---------------------------------------------------------------------------------------------
// operand checks every backend's kernels run (the backends call them: the CPU's and CUDA's
// index kernels validate the same things the same way)

/// An index operand: an index dtype, the positions' shape, inside its storage.
pub(crate) fn check_index_operand(at: &IndexDim, index: &View, shape: &[usize]) -> Result<()> {
    if !INDEX_DTYPES.contains(&index.dtype) {
        return Err(bad_index_dtype(at.op, index.dtype));
    }
    if index.layout.shape() != shape {
        return Err(internal(
            at.op,
            format!(
                "index shape {:?} differs from {shape:?}",
                index.layout.shape()
            ),
        ));
    }
    check_extent(at.op, index, 0)
}

/// A gather's operands as a backend receives them: the output's shape for all three, one
/// dtype for `src` and `dst`, `dst` in a storage of its own, every position inside its
/// storage.
pub(crate) fn check_gather_operands(
    src: &View,
    index: &View,
    at: &IndexDim,
    dst: &View,
) -> Result<()> {
    let shape = dst.layout.shape();
    check_index_operand(at, index, shape)?;
    if src.dtype != dst.dtype || src.layout.shape() != shape {
        return Err(internal(at.op, "gather operands disagree"));
    }
    if index.storage.same(dst.storage) || src.storage.same(dst.storage) {
        return Err(internal(at.op, "gather into one of its inputs"));
    }
    check_extent(at.op, src, at.size.saturating_sub(1) * at.stride)?;
    check_extent(at.op, dst, 0)
}

/// A scatter's operands as a backend receives them: the index's shape for all three, `dst`
/// seen with stride 0 along the scattered dim (its region), no operand inside `dst`, every
/// position inside its storage.
pub(crate) fn check_scatter_operands(
    dst: &View,
    index: &View,
    at: &IndexDim,
    src: &View,
) -> Result<()> {
    let shape = index.layout.shape();
    check_index_operand(at, index, shape)?;
    if src.dtype != dst.dtype
        || src.layout.shape() != shape
        || dst.layout.shape() != shape
        || (!shape.is_empty() && at.dim >= shape.len())
        || (shape.get(at.dim).is_some_and(|&n| n > 1) && dst.layout.strides()[at.dim] != 0)
    {
        return Err(internal(at.op, "scatter operands disagree"));
    }
    if index.storage.same(dst.storage) || src.storage.same(dst.storage) {
        return Err(internal(at.op, "scatter from its own destination"));
    }
    check_extent(at.op, dst, at.size.saturating_sub(1) * at.stride)?;
    check_extent(at.op, src, 0)
}

/// `nonzero`'s output as a backend receives it: i64 `[count, src.ndim]`; both operands inside
/// their storage.
pub(crate) fn check_nonzero_operands(src: &View, dst: &View) -> Result<()> {
    let op = "nonzero";
    let nd = src.layout.ndim();
    if dst.dtype != DType::I64 || dst.layout.ndim() != 2 || dst.layout.shape()[1] != nd {
        return Err(internal(op, "bad output"));
    }
    check_extent(op, src, 0)?;
    check_extent(op, dst, 0)
}

/// The operands of a masked op: a bool `mask` of `full`'s shape, a 1-D `flat` of its dtype
/// (`masked_select`: full is the input, flat the output; `masked_scatter`: full is the
/// destination, flat the source, which must then be in another storage: `distinct`), all
/// inside their storage.
fn check_masked_operands(
    op: &'static str,
    full: &View,
    mask: &View,
    flat: &View,
    distinct: bool,
) -> Result<()> {
    if mask.dtype != DType::Bool
        || mask.layout.shape() != full.layout.shape()
        || flat.dtype != full.dtype
        || flat.layout.ndim() != 1
    {
        return Err(internal(op, "operands disagree"));
    }
    if distinct && flat.storage.same(full.storage) {
        return Err(internal(op, "source shares the destination"));
    }
    for v in [flat, mask, full] {
        check_extent(op, v, 0)?;
    }
    Ok(())
}

/// `masked_select`'s operands: see [`check_masked_operands`].
pub(crate) fn check_masked_select_operands(src: &View, mask: &View, dst: &View) -> Result<()> {
    check_masked_operands("masked_select", src, mask, dst, false)
}

/// `masked_scatter`'s operands: see [`check_masked_operands`].
pub(crate) fn check_masked_scatter_operands(dst: &View, mask: &View, src: &View) -> Result<()> {
    check_masked_operands("masked_scatter", dst, mask, src, true)
}

/// The error of a `masked_scatter` whose mask selects more elements (`need`) than its source
/// has (`available`).
pub(crate) fn masked_scatter_short(need: usize, available: usize) -> Error {
    Error::invalid(
        "masked_scatter",
        format!(
            "the mask selects {need} elements but the source has only {available}; the source needs at least as many elements as the mask has true values"
        ),
    )
}
