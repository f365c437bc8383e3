//! Index kernels: gather, scatter (assign / add / prod / amax / amin), and the masked scans
//! (count, nonzero, masked_select, masked_scatter), all through the operands' layouts.
//!
//! - Indices are validated before the first write, under the storage locks, in one pass over
//!   the index's *stored* elements (stride-0 dims are visited once), in logical order so the
//!   error names the first bad index.
//!   A large materialised index that is constant along its last dim (`idx[:, None]
//!   .expand(..).contiguous()`) is noticed by that pass, which keeps one value per row: the
//!   kernel reads those instead of the whole index a second time, as if it had been expanded.
//! - Gather is parallel over output positions. A run along which the index is constant
//!   (an `index_select`/`embedding` row, an expanded index) is one row copy.
//! - Scatter is parallel and deterministic: two index positions can only hit one destination
//!   if they differ only along the scatter axis, so the positions off the axis are split
//!   between tasks and each task walks the axis in order. When the index varies along the
//!   axis only (`index_add`, expanded indices), the destination rows are split between tasks
//!   by index value instead: each task scans the index and applies only its own rows. Either
//!   way every destination combines its sources in logical order, on any thread count.
//! - Masked scans count per chunk, prefix-sum the counts, then write per chunk in parallel.
//!
//! Moves (gather, assign, masked_select/scatter) run on the element's bit width, so a kernel
//! exists per width, not per dtype.

use super::access::Access;
use super::parallel::{par_map, split_ranges};
use super::strided::{Plan, SendPtr, PAR_GRAIN};
use crate::backend::common::check::{bad_index_dtype, check_extent, internal};
use crate::backend::common::float::{max_nan, min_nan, Accum};
use crate::backend::index::{
    check_gather_operands, check_masked_scatter_operands, check_masked_select_operands,
    check_nonzero_operands, check_scatter_operands, masked_scatter_short, IndexDim, ScatterOp,
};
use crate::backend::View;
use crate::layout::contiguous_strides;
use crate::{with_dtype, DType, Element, Error, Layout, Result, Scalar};
use half::{bf16, f16};

/// Runs `$body` with `$I` bound to the Rust type of an index dtype (i64, i32, u32).
macro_rules! with_index_type {
    ($dtype:expr, $I:ident => $body:expr) => {
        match $dtype {
            DType::I64 => {
                type $I = i64;
                $body
            }
            DType::I32 => {
                type $I = i32;
                $body
            }
            DType::U32 => {
                type $I = u32;
                $body
            }
            d => return Err(bad_index_dtype("index", d)),
        }
    };
}

/// Runs `$body` with `$T` bound to an unsigned integer of the dtype's width: kernels that only
/// move elements need one instance per width.
macro_rules! with_width {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype.size_in_bytes() {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            _ => {
                type $T = u64;
                $body
            }
        }
    };
}

#[inline(always)]
fn wrap_idx(v: i64, size: i64, wrap: bool) -> i64 {
    if wrap && v < 0 {
        v + size
    } else {
        v
    }
}

/// The first index (in logical order) outside `lo..hi`, if any. Values repeat along stride-0
/// dims, so those are visited once.
unsafe fn first_bad<I: Element>(p: SendPtr<I>, l: &Layout, lo: i64, hi: i64) -> Option<i64> {
    let shape: Vec<usize> = l
        .shape()
        .iter()
        .zip(l.strides())
        .map(|(&n, &s)| if s == 0 { n.min(1) } else { n })
        .collect();
    let contig = contiguous_strides(&shape);
    let plan = Plan::new(&shape, [&contig, l.strides()], [0, l.offset()]);
    let [_, st] = plan.inner_strides();
    let scan = |s: usize, e: usize| -> Option<i64> {
        let mut bad = None;
        plan.for_each_run(s, e, |off, len| {
            if bad.is_some() {
                return;
            }
            // per chunk, its least and greatest values (an index is almost always valid);
            // only in a chunk that has a bad value, find the first one
            for c in (0..len).step_by(256) {
                let (x, n) = (p.get().offset(off[1] + c as isize * st), 256.min(len - c));
                let (mn, mx) = index_extrema(x, st, n);
                if mn < lo || mx >= hi {
                    bad = first_outside(x, st, n, lo, hi);
                    return;
                }
            }
        });
        bad
    };
    // every range is scanned (an index is almost always valid); the first range's error wins
    par_map(&split_ranges(plan.numel(), PAR_GRAIN), scan)
        .into_iter()
        .flatten()
        .next()
}

/// The least and greatest of the `n` index values at `x`, `st` apart, branch-free (over a
/// slice when contiguous). Range checks use these rather than comparing every value with the
/// bounds: on the x86-64 baseline (SSE2) an i64 compare is scalar, and measured on the 2-core
/// VM over 512 MB of i64 rows, min/max ran as fast as a plain sum while a compare per value
/// ran 1.2-1.9x slower.
///
/// # Safety
/// The `n` positions are valid reads.
#[inline(always)]
unsafe fn index_extrema<I: Element>(x: *const I, st: isize, n: usize) -> (i64, i64) {
    let step = |(mn, mx): (i64, i64), v: I| {
        let v = v.to_i64();
        (mn.min(v), mx.max(v))
    };
    let start = (i64::MAX, i64::MIN);
    if st == 1 {
        std::slice::from_raw_parts(x, n)
            .iter()
            .fold(start, |a, &v| step(a, v))
    } else {
        (0..n as isize).fold(start, |a, i| step(a, *x.offset(i * st)))
    }
}

/// The first of the `n` index values at `x`, `st` apart, outside `lo..hi`.
///
/// # Safety
/// As [`index_extrema`].
unsafe fn first_outside<I: Element>(
    x: *const I,
    st: isize,
    n: usize,
    lo: i64,
    hi: i64,
) -> Option<i64> {
    (0..n as isize)
        .map(|i| (*x.offset(i * st)).to_i64())
        .find(|&v| v < lo || v >= hi)
}

// ---------------------------------------------------------------------------------------------
// gather

pub(crate) fn gather(src: View, index: View, at: IndexDim, dst: View) -> Result<()> {
    check_gather_operands(&src, &index, &at, &dst)?;
    let acc = Access::views(Some(&dst), &[&src, &index]);
    with_index_type!(index.dtype, I => unsafe {
        let pi = SendPtr(acc.ptr::<I>(index.storage));
        let compact = validate_index(pi, index.layout, &at)?;
        let (pi, il) = match &compact {
            Some((values, layout)) => (SendPtr(values.as_ptr() as *mut I), layout),
            None => (pi, index.layout),
        };
        with_width!(dst.dtype, T => gather_typed::<T, I>(
            &dst, &src, il, &at,
            SendPtr(acc.ptr::<T>(dst.storage)), SendPtr(acc.ptr::<T>(src.storage)), pi,
        ))
    });
    Ok(())
}

/// Validates an index operand before anything is written: the error names the first value
/// (in logical order) out of range. A large materialised index that is constant along its
/// last dim comes back as one value per row with the layout that reads them as the whole
/// index ([`scan_rows`]); the kernel then reads that instead of the index a second time.
unsafe fn validate_index<I: Element>(
    p: SendPtr<I>,
    l: &Layout,
    at: &IndexDim,
) -> Result<Option<(Vec<I>, Layout)>> {
    let (lo, hi) = at.bounds();
    match scan_rows(p, l, lo, hi) {
        RowScan::Bad(v) => Err(at.out_of_range(v)),
        RowScan::Rows(values, layout) => Ok(Some((values, layout))),
        RowScan::Varies => Ok(None),
        RowScan::Skipped => match first_bad(p, l, lo, hi) {
            Some(v) => Err(at.out_of_range(v)),
            None => Ok(None),
        },
    }
}

/// What [`scan_rows`] found in an index.
enum RowScan<I> {
    /// The first index (in logical order) out of range.
    Bad(i64),
    /// All valid and constant along the last dim: one value per row (row-major over the other
    /// dims) and the layout that reads them as the whole index (stride 0 along the last dim).
    Rows(Vec<I>, Layout),
    /// All valid, but some row varies.
    Varies,
    /// Not scanned (small, or not a materialised last dim): validate with [`first_bad`].
    Skipped,
}

/// Indices below this many elements are validated by [`first_bad`] alone.
const ROW_SCAN_MIN: usize = 1 << 16;

/// Validates an index and, when it is constant along its last dim (the
/// `idx[:, None].expand(-1, d).contiguous()` a user passes to `gather` or `scatter_add_`),
/// collects one value per row in the same pass. The kernel then reads the rows' values instead
/// of the whole index again (for a [1M, 64] i64 index, 8 MB instead of 512 MB), and a scatter
/// sees an index that varies along its axis only (its row mode).
unsafe fn scan_rows<I: Element>(p: SendPtr<I>, l: &Layout, lo: i64, hi: i64) -> RowScan<I> {
    let (shape, strides) = (l.shape(), l.strides());
    let Some(last) = shape.len().checked_sub(1) else {
        return RowScan::Skipped;
    };
    let (len, st) = (shape[last], strides[last] as isize);
    if st == 0 || len < 8 || l.numel() < ROW_SCAN_MIN {
        return RowScan::Skipped;
    }
    let outer = &shape[..last];
    let contig = contiguous_strides(outer);
    // operand 0 numbers the rows in logical order; operand 1 finds each row's first index
    let plan = Plan::new(outer, [&contig, &strides[..last]], [0, l.offset()]);
    let mut values = vec![I::default(); plan.numel()];
    let pv = SendPtr(values.as_mut_ptr());
    let [sv, sr] = plan.inner_strides();
    let grain = (PAR_GRAIN / len).max(1);
    // per task: the first bad index, and whether every row it scanned was constant
    let found = par_map(&split_ranges(plan.numel(), grain), |s, e| {
        let mut constant = true;
        let mut bad = None;
        plan.for_each_run(s, e, |off, n| {
            if bad.is_some() {
                return;
            }
            for k in 0..n as isize {
                let x = p.get().offset(off[1] + k * sr);
                // the row's least and greatest values say both whether it is in range and
                // whether it is constant
                let (mn, mx) = index_extrema(x, st, len);
                if mn < lo || mx >= hi {
                    bad = first_outside(x, st, len, lo, hi);
                    return;
                }
                constant &= mn == mx;
                // once a row varies the values are not used: stop writing them (their pages,
                // zeroed on first touch, are then never touched)
                if constant {
                    *pv.get().offset(off[0] + k * sv) = *x;
                }
            }
        });
        (bad, constant)
    });
    if let Some(v) = found.iter().find_map(|&(bad, _)| bad) {
        return RowScan::Bad(v);
    }
    if !found.iter().all(|&(_, constant)| constant) {
        return RowScan::Varies;
    }
    let mut row_strides = contig;
    row_strides.push(0);
    RowScan::Rows(values, Layout::new(shape.to_vec(), row_strides, 0))
}

#[allow(clippy::too_many_arguments)]
unsafe fn gather_typed<T: Copy, I: Element>(
    dst: &View,
    src: &View,
    index: &Layout,
    at: &IndexDim,
    pd: SendPtr<T>,
    ps: SendPtr<T>,
    pi: SendPtr<I>,
) {
    let l = dst.layout;
    let plan = Plan::new(
        l.shape(),
        [l.strides(), src.layout.strides(), index.strides()],
        [l.offset(), src.layout.offset(), index.offset()],
    );
    if plan.numel() == 0 {
        return;
    }
    let [so, ss, sx] = plan.inner_strides();
    let (size, wrap, stride) = (at.size as i64, at.wrap, at.stride as isize);
    // whole contiguous rows: each run is one row copy from the row the index picks
    let rows = sx == 0 && so == 1 && ss == 1;
    // (a few very long rows go through the general walk below, which splits inside rows)
    let many = |&(nrows, _, _): &(usize, usize, [isize; 3])| {
        nrows >= 4 * rayon::current_num_threads() || plan.numel() < 2 * PAR_GRAIN
    };
    if let Some((nrows, len, [dr, sr, xr])) = plan.as_rows().filter(|r| rows && many(r)) {
        // every run a whole row (index_select, embedding, an expanded gather index): split the
        // rows between tasks; each copies its rows in order, prefetching the source row
        // `ROW_AHEAD` rows on (the index says which), like a hand-written loop
        let [d0, s0, x0] = plan.offsets();
        let row_src = |r: usize| {
            let v = wrap_idx(
                (*pi.get().offset(x0 + r as isize * xr)).to_i64(),
                size,
                wrap,
            );
            ps.get().offset(s0 + r as isize * sr + v as isize * stride)
        };
        // tasks of about 256 Ki elements, many more than threads: on a shared machine a
        // thread that loses its core for a while leaves its share to the others
        let per = ((1usize << 18) / len.max(1)).max(1);
        let ranges: Vec<(usize, usize)> =
            if plan.numel() < 2 * PAR_GRAIN || rayon::current_num_threads() < 2 {
                vec![(0, nrows)]
            } else {
                (0..nrows.div_ceil(per))
                    .map(|t| (t * per, ((t + 1) * per).min(nrows)))
                    .collect()
            };
        let stream = streams(nrows * len * std::mem::size_of::<T>());
        par_map(&ranges, |a, b| {
            for r in a..(a + ROW_AHEAD).min(b) {
                prefetch(row_src(r), len);
            }
            for r in a..b {
                if r + ROW_AHEAD < b {
                    prefetch(row_src(r + ROW_AHEAD), len);
                }
                copy_row(
                    row_src(r),
                    pd.get().offset(d0 + r as isize * dr),
                    len,
                    stream,
                );
            }
            if stream {
                store_fence();
            }
        });
        return;
    }
    // a contiguous run whose index varies along it (a materialised gather index): usually the
    // index is constant along the run (`idx[:, None].expand(..).contiguous()`), and then the
    // run is one row copy; otherwise element by element
    let stream = streams(plan.numel() * std::mem::size_of::<T>());
    let run_by_elements = |d: *mut T, sb: *const T, x: *const I, len: usize| {
        let v0 = (*x).to_i64();
        // branch-free, so that it vectorises: almost always the whole run agrees
        if (1..len as isize).fold(true, |same, i| same & ((*x.offset(i * sx)).to_i64() == v0)) {
            let sp = sb.offset(wrap_idx(v0, size, wrap) as isize * stride);
            return copy_row(sp, d, len, stream);
        }
        for i in 0..len as isize {
            let v = wrap_idx((*x.offset(i * sx)).to_i64(), size, wrap) as isize;
            *d.add(i as usize) = *sb.offset(i + v * stride);
        }
    };
    let contiguous_runs = so == 1 && ss == 1;
    plan.par_ranges(|s, e| {
        // contiguous runs go through a prefetch ring: the source row the run's first index
        // picks is requested `RING` runs before the run is moved, so random rows overlap
        // their latency
        let mut ring = Ring::<(*mut T, *const T, *const I, usize)>::new();
        let flush = |(d, sb, x, len): (*mut T, *const T, *const I, usize)| {
            if rows {
                let sp = sb.offset(wrap_idx((*x).to_i64(), size, wrap) as isize * stride);
                copy_row(sp, d, len, stream);
            } else {
                run_by_elements(d, sb, x, len)
            }
        };
        plan.for_each_run(s, e, |off, len| {
            let d = pd.get().offset(off[0]);
            let sb = ps.get().offset(off[1]);
            let x = pi.get().offset(off[2]);
            if contiguous_runs {
                prefetch(
                    sb.offset(wrap_idx((*x).to_i64(), size, wrap) as isize * stride),
                    len,
                );
                if let Some(run) = ring.push((d, sb, x as *const I, len)) {
                    flush(run);
                }
            } else if sx == 0 {
                // the index is constant along the run: one strided row copy
                let sp = sb.offset(wrap_idx((*x).to_i64(), size, wrap) as isize * stride);
                for i in 0..len as isize {
                    *d.offset(i * so) = *sp.offset(i * ss);
                }
            } else {
                for i in 0..len as isize {
                    let v = wrap_idx((*x.offset(i * sx)).to_i64(), size, wrap) as isize;
                    *d.offset(i * so) = *sb.offset(i * ss + v * stride);
                }
            }
        });
        while let Some(run) = ring.pop() {
            flush(run);
        }
        if stream {
            store_fence();
        }
    });
}

/// Outputs of at least this many bytes are written with streaming stores by the row gather:
/// such an output doesn't stay in cache anyway (the reference VM's L3 is 32 MiB), and a
/// streaming store skips reading each output line before overwriting it.
const STREAM_MIN_BYTES: usize = 64 << 20;

/// Whether an output of `bytes` is written with streaming stores (x86-64 only).
fn streams(bytes: usize) -> bool {
    cfg!(target_arch = "x86_64") && bytes >= STREAM_MIN_BYTES
}

/// Copies `len` elements from `src` to `dst` — with streaming (non-temporal) stores when
/// `stream` and both the row's start and its length are whole 16-byte units, otherwise as an
/// ordinary copy. Streaming stores must be fenced ([`store_fence`]) before the task ends.
///
/// Measured on the 2-core reference VM (1M random rows of 64 f32 into a 256 MiB output, the
/// raw loops of `benches/index_sort.rs` in the same run): 29.5 ms with ordinary stores, 23.6
/// ms streaming — a random row copy is write-bound, and without the extra read of each output
/// line it runs within 1.25x of a large `memcpy`.
///
/// # Safety
/// Both ranges are valid for `len` elements and don't overlap.
#[inline(always)]
unsafe fn copy_row<T>(src: *const T, dst: *mut T, len: usize, stream: bool) {
    let bytes = len * std::mem::size_of::<T>();
    #[cfg(target_arch = "x86_64")]
    if stream && bytes.is_multiple_of(16) && (dst as usize).is_multiple_of(16) {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let (s, d) = (src as *const __m128i, dst as *mut __m128i);
        for i in 0..bytes / 16 {
            // SAFETY: i < bytes / 16 stays inside both ranges; `d` is 16-byte aligned
            _mm_stream_si128(d.add(i), _mm_loadu_si128(s.add(i)));
        }
        return;
    }
    let _ = stream;
    std::ptr::copy_nonoverlapping(src, dst, len)
}

/// Orders this thread's streaming stores before whatever it does next (the end of a parallel
/// task, after which another thread may read the output).
#[inline(always)]
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// How many row moves a prefetch ring keeps in flight.
const RING: usize = 16;
/// How many rows ahead the row gather prefetches its source rows.
const ROW_AHEAD: usize = 16;

/// A FIFO of pending row moves whose memory has been prefetched.
struct Ring<E: Copy> {
    items: [Option<E>; RING],
    head: usize,
    len: usize,
}
impl<E: Copy> Ring<E> {
    fn new() -> Self {
        Ring {
            items: [None; RING],
            head: 0,
            len: 0,
        }
    }
    /// Queues `e`; returns the oldest entry once the ring is full.
    #[inline(always)]
    fn push(&mut self, e: E) -> Option<E> {
        let out = if self.len == RING { self.pop() } else { None };
        self.items[(self.head + self.len) % RING] = Some(e);
        self.len += 1;
        out
    }
    #[inline(always)]
    fn pop(&mut self) -> Option<E> {
        if self.len == 0 {
            return None;
        }
        let e = self.items[self.head].take();
        self.head = (self.head + 1) % RING;
        self.len -= 1;
        e
    }
}

/// Asks for the first KiB of `len` elements at `p` to be brought into the L2 cache (a hint;
/// never faults). Random rows are requested into L2 rather than L1: a core keeps more L2 misses
/// in flight than L1 misses, and with rows 16 moves ahead that is what hides the latency
/// (measured on the 2-core reference VM, 1M random 256-byte rows: a plain-Rust copy took 1.9x
/// the memory floor prefetching into L1 8 rows ahead, 1.3-1.6x into L2 16 rows ahead). The
/// row is read into L1 when it is used, a few rows later.
#[inline(always)]
fn prefetch<T>(p: *const T, len: usize) {
    let bytes = (len * std::mem::size_of::<T>()).min(1024);
    super::prefetch::stretch(p, bytes, super::prefetch::Level::L2);
}

// ---------------------------------------------------------------------------------------------
// scatter

/// Runs `$body` with `$T` bound to a numeric (non-bool) dtype's type.
macro_rules! with_accum {
    ($dtype:expr, $op:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F16 => {
                type $T = f16;
                $body
            }
            DType::BF16 => {
                type $T = bf16;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::U32 => {
                type $T = u32;
                $body
            }
            DType::U8 => {
                type $T = u8;
                $body
            }
            DType::I8 => {
                type $T = i8;
                $body
            }
            DType::Bool => {
                return Err(Error::UnsupportedDType {
                    op: $op,
                    dtype: DType::Bool,
                    hint: "; reducing scatters take numeric tensors (convert with to_dtype)".into(),
                })
            }
        }
    };
}

#[inline(always)]
fn combine<T: Accum>(op: ScatterOp, alpha: Option<T>, d: T, s: T) -> T {
    match op {
        ScatterOp::Assign => s,
        ScatterOp::Add { .. } => d.acc_add(match alpha {
            Some(a) => s.acc_mul(a),
            None => s,
        }),
        ScatterOp::Prod => d.acc_mul(s),
        ScatterOp::Amax => d.acc_max(s),
        ScatterOp::Amin => d.acc_min(s),
    }
}

pub(crate) fn scatter(
    dst: View,
    index: View,
    at: IndexDim,
    src: View,
    op: ScatterOp,
    include_self: bool,
) -> Result<()> {
    check_scatter_operands(&dst, &index, &at, &src)?;
    let acc = Access::views(Some(&dst), &[&index, &src]);
    with_index_type!(index.dtype, I => unsafe {
        let pi = SendPtr(acc.ptr::<I>(index.storage));
        let compact = validate_index(pi, index.layout, &at)?;
        let (pi, index) = match &compact {
            Some((values, layout)) => (SendPtr(values.as_ptr() as *mut I), layout),
            None => (pi, index.layout),
        };
        if op == ScatterOp::Assign {
            with_width!(dst.dtype, T => scatter_typed::<T, I>(
                &dst, index, &src, &at,
                SendPtr(acc.ptr::<T>(dst.storage)), pi, SendPtr(acc.ptr::<T>(src.storage)),
                None, |_d: T, s: T| s,
            ))
        } else {
            with_accum!(dst.dtype, at.op, T => {
                let init: Option<T> = (!include_self).then(|| match op {
                    ScatterOp::Add { .. } => T::from_i64(0),
                    ScatterOp::Prod => T::from_i64(1),
                    ScatterOp::Amax => T::lowest(),
                    _ => T::highest(),
                });
                let alpha: Option<T> = match op {
                    ScatterOp::Add { alpha } if alpha.to_f64() != 1.0 => Some(alpha.to_elem()),
                    _ => None,
                };
                let (pd, ps) = (SendPtr(acc.ptr::<T>(dst.storage)), SendPtr(acc.ptr::<T>(src.storage)));
                if matches!(op, ScatterOp::Add { .. }) && alpha.is_none() {
                    // the common scatter_add/index_add: its own instance, so the row loop
                    // vectorises instead of matching the op per element
                    scatter_typed::<T, I>(&dst, index, &src, &at, pd, pi, ps, init,
                        |d: T, s: T| d.acc_add(s))
                } else {
                    scatter_typed::<T, I>(&dst, index, &src, &at, pd, pi, ps, init,
                        move |d: T, s: T| combine(op, alpha, d, s))
                }
            })
        }
    });
    Ok(())
}

/// A run of positions off the scatter axis: operand offsets and length.
type Run = ([isize; 3], usize);

/// The passes of a scatter: a fill with the reduction's identity first when the old values
/// are excluded (`include_self == false`), then the combining pass (`None`).
fn passes<T: Copy>(init: Option<T>) -> Vec<Option<T>> {
    match init {
        Some(c) => vec![Some(c), None],
        None => vec![None],
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn scatter_typed<T: Copy + Send + Sync, I: Element>(
    dst: &View,
    index: &Layout,
    src: &View,
    at: &IndexDim,
    pd: SendPtr<T>,
    pi: SendPtr<I>,
    ps: SendPtr<T>,
    init: Option<T>,
    f: impl Fn(T, T) -> T + Sync,
) {
    let shape = index.shape();
    let total: usize = shape.iter().product();
    if total == 0 {
        return;
    }
    let (size, wrap, stride) = (at.size as i64, at.wrap, at.stride as isize);
    // positions off the axis ("outer") never collide with one another
    let ax = at.dim.min(shape.len().saturating_sub(1));
    let n = if shape.is_empty() { 1 } else { shape[ax] };
    let mut outer = shape.to_vec();
    if !outer.is_empty() {
        outer[ax] = 1;
    }
    let axis_stride = |l: &Layout| l.strides().get(ax).map_or(0, |&s| s as isize);
    let (xd, sd) = (axis_stride(index), axis_stride(src.layout));
    let plan = Plan::new(
        &outer,
        [dst.layout.strides(), index.strides(), src.layout.strides()],
        [dst.layout.offset(), index.offset(), src.layout.offset()],
    );
    let m = plan.numel();
    let [do_, xo, so] = plan.inner_strides();
    let runs = |s: usize, e: usize| -> Vec<Run> {
        let mut v = Vec::new();
        plan.for_each_run(s, e, |off, len| v.push((off, len)));
        v
    };
    let threads = rayon::current_num_threads();
    let parallel = total >= 2 * PAR_GRAIN && threads > 1;
    let row_mode = shape
        .iter()
        .zip(index.strides())
        .enumerate()
        .all(|(d, (&len, &st))| d == ax || len <= 1 || st == 0);

    if row_mode {
        // The index varies along the axis only: position k of the axis moves a whole row
        // (all outer positions) to destination row index[k].
        let x0 = index.offset() as isize;
        let idx_at = |k: usize| {
            wrap_idx(
                (*pi.get().offset(x0 + k as isize * xd)).to_i64(),
                size,
                wrap,
            )
        };
        let apply_row = |runs: &[Run], k: usize, v: i64, fill: Option<T>| {
            let (db, sb) = (v as isize * stride, k as isize * sd);
            for &(off, len) in runs {
                let d = pd.get().offset(off[0] + db);
                match fill {
                    Some(c) => {
                        for i in 0..len as isize {
                            *d.offset(i * do_) = c;
                        }
                    }
                    None => {
                        let s = ps.get().offset(off[2] + sb);
                        if do_ == 1 && so == 1 {
                            for i in 0..len {
                                *d.add(i) = f(*d.add(i), *s.add(i));
                            }
                        } else {
                            for i in 0..len as isize {
                                *d.offset(i * do_) = f(*d.offset(i * do_), *s.offset(i * so));
                            }
                        }
                    }
                }
            }
        };
        // rows whose destination lies in lo..hi, for outer positions s..e
        let task = |rs: &[Run], lo: i64, hi: i64| {
            // with an init value, a first pass fills every destination row that is hit
            for fill in passes(init) {
                if fill.is_none() && rs.len() == 1 && do_ == 1 && so == 1 {
                    // one contiguous run per row: prefetch the rows a few steps ahead, the
                    // source row too: a task applies only the rows whose destination is its
                    // own, so its source rows are a sparse, irregular subset that the hardware
                    // prefetcher does not follow (measured with a plain-Rust scatter-add of 1M
                    // random 256-byte rows on the 2-core VM: 109 ms -> 65 ms)
                    let (off, len) = rs[0];
                    let mut ring = Ring::<(*mut T, *const T)>::new();
                    let apply = |(d, s): (*mut T, *const T)| {
                        // SAFETY: a destination row and a source row never overlap (they are
                        // in different storages) and lie inside them (checked extents).
                        let (d, s) = (
                            std::slice::from_raw_parts_mut(d, len),
                            std::slice::from_raw_parts(s, len),
                        );
                        for (a, &b) in d.iter_mut().zip(s) {
                            *a = f(*a, b);
                        }
                    };
                    for k in 0..n {
                        let v = idx_at(k);
                        if v >= lo && v < hi {
                            let d = pd.get().offset(off[0] + v as isize * stride);
                            let s = ps.get().offset(off[2] + k as isize * sd);
                            prefetch(d, len);
                            prefetch(s, len);
                            if let Some(e) = ring.push((d, s)) {
                                apply(e);
                            }
                        }
                    }
                    while let Some(e) = ring.pop() {
                        apply(e);
                    }
                    continue;
                }
                for k in 0..n {
                    let v = idx_at(k);
                    if v >= lo && v < hi {
                        apply_row(rs, k, v, fill);
                    }
                }
            }
        };
        if !parallel {
            task(&runs(0, m), 0, size);
        } else if m >= 4096 {
            // long rows: split the outer positions
            let ranges = split_ranges(m, (PAR_GRAIN / n).max(1024));
            par_map(&ranges, |s, e| task(&runs(s, e), 0, size));
        } else {
            // short rows: split the destination rows by index value
            let all = runs(0, m);
            let tasks = (threads as i64).min(size).max(1);
            let cuts: Vec<(usize, usize)> = (0..tasks)
                .map(|t| {
                    (
                        (t * size / tasks) as usize,
                        ((t + 1) * size / tasks) as usize,
                    )
                })
                .collect();
            par_map(&cuts, |lo, hi| task(&all, lo as i64, hi as i64));
        }
        return;
    }

    // General: split the outer positions; each task walks the axis in order, in blocks of
    // outer positions so that every step touches nearby memory.
    let block = if xo.abs() == 1 || so.abs() == 1 {
        256
    } else {
        32
    };
    let task = |s: usize, e: usize| {
        for (off, len) in runs(s, e) {
            let mut b0 = 0usize;
            while b0 < len {
                let bl = (len - b0).min(block) as isize;
                let b = b0 as isize;
                let (d0, x0, s0) = (off[0] + b * do_, off[1] + b * xo, off[2] + b * so);
                for fill in passes(init) {
                    for k in 0..n as isize {
                        let (xk, sk) = (x0 + k * xd, s0 + k * sd);
                        for i in 0..bl {
                            let v = wrap_idx((*pi.get().offset(xk + i * xo)).to_i64(), size, wrap);
                            let d = pd.get().offset(d0 + i * do_ + v as isize * stride);
                            *d = match fill {
                                Some(c) => c,
                                None => f(*d, *ps.get().offset(sk + i * so)),
                            };
                        }
                    }
                }
                b0 += bl as usize;
            }
        }
    };
    if !parallel {
        task(0, m);
    } else {
        let min_positions = (64 / std::mem::size_of::<T>()).max(PAR_GRAIN / n);
        par_map(&split_ranges(m, min_positions), task);
    }
}

// ---------------------------------------------------------------------------------------------
// masked scans

/// A plan over `shape` that visits positions in logical (row-major) order: operand 0 is a
/// contiguous placeholder, operand 1 the given layout.
fn logical_plan2(l: &Layout) -> Plan<2> {
    let contig = contiguous_strides(l.shape());
    Plan::new(l.shape(), [&contig, l.strides()], [0, l.offset()])
}
fn logical_plan3(shape: &[usize], a: &Layout, b: &Layout) -> Plan<3> {
    let contig = contiguous_strides(shape);
    Plan::new(
        shape,
        [&contig, a.strides(), b.strides()],
        [0, a.offset(), b.offset()],
    )
}

/// Non-zero elements of operand `k` of `plan` per range.
unsafe fn count_per_range<const N: usize, T: Element>(
    plan: &Plan<N>,
    k: usize,
    p: SendPtr<T>,
    ranges: &[(usize, usize)],
) -> Vec<usize> {
    let st = plan.inner_strides()[k];
    par_map(ranges, |s, e| {
        let mut c = 0usize;
        plan.for_each_run(s, e, |off, len| {
            let x = p.get().offset(off[k]);
            for i in 0..len as isize {
                c += (*x.offset(i * st)).is_nonzero() as usize;
            }
        });
        c
    })
}

/// Exclusive prefix sums, and the total.
fn prefix(counts: &[usize]) -> (Vec<usize>, usize) {
    let mut acc = 0;
    let starts = counts
        .iter()
        .map(|&c| {
            let s = acc;
            acc += c;
            s
        })
        .collect();
    (starts, acc)
}

pub(crate) fn count_nonzero(src: View) -> Result<usize> {
    check_extent("count_nonzero", &src, 0)?;
    let acc = Access::views(None, &[&src]);
    let plan = logical_plan2(src.layout);
    let ranges = split_ranges(plan.numel(), PAR_GRAIN);
    Ok(with_dtype!(src.dtype, T => unsafe {
        count_per_range(&plan, 1, SendPtr(acc.ptr::<T>(src.storage)), &ranges).iter().sum()
    }))
}

pub(crate) fn nonzero(src: View, dst: View) -> Result<()> {
    let op = "nonzero";
    let shape = src.layout.shape();
    let nd = shape.len();
    check_nonzero_operands(&src, &dst)?;
    let acc = Access::views(Some(&dst), &[&src]);
    let plan = logical_plan2(src.layout);
    let ranges = split_ranges(plan.numel(), PAR_GRAIN);
    let [_, st] = plan.inner_strides();
    let (o0, r0, c0) = (
        dst.layout.offset() as isize,
        dst.layout.strides()[0] as isize,
        dst.layout.strides()[1] as isize,
    );
    let pd = SendPtr(acc.ptr::<i64>(dst.storage));
    with_dtype!(src.dtype, T => unsafe {
        let ps = SendPtr(acc.ptr::<T>(src.storage));
        let counts = count_per_range(&plan, 1, ps, &ranges);
        let (starts, total) = prefix(&counts);
        if total != dst.layout.shape()[0] {
            return Err(internal(op, format!("{total} non-zeros for {} rows", dst.layout.shape()[0])));
        }
        let jobs: Vec<(usize, usize)> = (0..ranges.len()).map(|t| (t, t + 1)).collect();
        par_map(&jobs, |t, _| {
            let (s, e) = ranges[t];
            let mut row = starts[t] as isize;
            let mut pos = s;
            plan.for_each_run(s, e, |off, len| {
                let x = ps.get().offset(off[1]);
                for i in 0..len {
                    if (*x.offset(i as isize * st)).is_nonzero() {
                        let mut p = pos + i;
                        for d in (0..nd).rev() {
                            *pd.get().offset(o0 + row * r0 + d as isize * c0) = (p % shape[d]) as i64;
                            p /= shape[d];
                        }
                        row += 1;
                    }
                }
                pos += len;
            });
        });
    });
    Ok(())
}

pub(crate) fn masked_select(src: View, mask: View, dst: View) -> Result<()> {
    let op = "masked_select";
    let shape = src.layout.shape();
    check_masked_select_operands(&src, &mask, &dst)?;
    let acc = Access::views(Some(&dst), &[&src, &mask]);
    let plan = logical_plan3(shape, src.layout, mask.layout);
    let ranges = split_ranges(plan.numel(), PAR_GRAIN);
    let [_, ss, sm] = plan.inner_strides();
    let pm = SendPtr(acc.ptr::<bool>(mask.storage));
    let counts = unsafe { count_per_range(&plan, 2, pm, &ranges) };
    let (starts, total) = prefix(&counts);
    if total != dst.layout.shape()[0] {
        return Err(internal(op, "count changed"));
    }
    let (o0, r0) = (
        dst.layout.offset() as isize,
        dst.layout.strides()[0] as isize,
    );
    with_width!(src.dtype, T => unsafe {
        let (ps, pd) = (SendPtr(acc.ptr::<T>(src.storage)), SendPtr(acc.ptr::<T>(dst.storage)));
        let jobs: Vec<(usize, usize)> = (0..ranges.len()).map(|t| (t, t + 1)).collect();
        par_map(&jobs, |t, _| {
            let (s, e) = ranges[t];
            let mut k = starts[t] as isize;
            plan.for_each_run(s, e, |off, len| {
                let (x, m) = (ps.get().offset(off[1]), pm.get().offset(off[2]));
                for i in 0..len as isize {
                    if *m.offset(i * sm) {
                        *pd.get().offset(o0 + k * r0) = *x.offset(i * ss);
                        k += 1;
                    }
                }
            });
        });
    });
    Ok(())
}

pub(crate) fn masked_scatter(dst: View, mask: View, src: View) -> Result<()> {
    let shape = dst.layout.shape();
    check_masked_scatter_operands(&dst, &mask, &src)?;
    let acc = Access::views(Some(&dst), &[&src, &mask]);
    let plan = logical_plan3(shape, dst.layout, mask.layout);
    let ranges = split_ranges(plan.numel(), PAR_GRAIN);
    let [_, sd, sm] = plan.inner_strides();
    let pm = SendPtr(acc.ptr::<bool>(mask.storage));
    let counts = unsafe { count_per_range(&plan, 2, pm, &ranges) };
    let (starts, total) = prefix(&counts);
    let available = src.layout.shape()[0];
    if total > available {
        return Err(masked_scatter_short(total, available));
    }
    let (o0, r0) = (
        src.layout.offset() as isize,
        src.layout.strides()[0] as isize,
    );
    with_width!(dst.dtype, T => unsafe {
        let (ps, pd) = (SendPtr(acc.ptr::<T>(src.storage)), SendPtr(acc.ptr::<T>(dst.storage)));
        let jobs: Vec<(usize, usize)> = (0..ranges.len()).map(|t| (t, t + 1)).collect();
        par_map(&jobs, |t, _| {
            let (s, e) = ranges[t];
            let mut k = starts[t] as isize;
            plan.for_each_run(s, e, |off, len| {
                let (d, m) = (pd.get().offset(off[1]), pm.get().offset(off[2]));
                for i in 0..len as isize {
                    if *m.offset(i * sm) {
                        *d.offset(i * sd) = *ps.get().offset(o0 + k * r0);
                        k += 1;
                    }
                }
            });
        });
    });
    Ok(())
}

pub(crate) fn extrema(src: View) -> Result<Option<(Scalar, Scalar)>> {
    check_extent("extrema", &src, 0)?;
    let acc = Access::views(None, &[&src]);
    let plan = Plan::new(
        src.layout.shape(),
        [src.layout.strides()],
        [src.layout.offset()],
    );
    if plan.numel() == 0 {
        return Ok(None);
    }
    let ranges = split_ranges(plan.numel(), PAR_GRAIN);
    let [st] = plan.inner_strides();
    with_dtype!(src.dtype, T => unsafe {
        let p = SendPtr(acc.ptr::<T>(src.storage));
        if T::DTYPE.is_float() {
            let parts = par_map(&ranges, |s, e| {
                let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
                plan.for_each_run(s, e, |off, len| {
                    let x = p.get().offset(off[0]);
                    for i in 0..len as isize {
                        let v = (*x.offset(i * st)).to_f64();
                        lo = min_nan(lo, v);
                        hi = max_nan(hi, v);
                    }
                });
                (lo, hi)
            });
            let (lo, hi) = parts.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |a, b| {
                (min_nan(a.0, b.0), max_nan(a.1, b.1))
            });
            Ok(Some((Scalar::Float(lo), Scalar::Float(hi))))
        } else {
            let parts = par_map(&ranges, |s, e| {
                let (mut lo, mut hi) = (i64::MAX, i64::MIN);
                plan.for_each_run(s, e, |off, len| {
                    let x = p.get().offset(off[0]);
                    for i in 0..len as isize {
                        let v = (*x.offset(i * st)).to_i64();
                        lo = lo.min(v);
                        hi = hi.max(v);
                    }
                });
                (lo, hi)
            });
            let (lo, hi) = parts
                .iter()
                .fold((i64::MAX, i64::MIN), |a, b| (a.0.min(b.0), a.1.max(b.1)));
            Ok(Some((Scalar::Int(lo), Scalar::Int(hi))))
        }
    })
}
