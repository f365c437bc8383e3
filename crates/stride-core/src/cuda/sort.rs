//! Sorting and selection on CUDA (kernels/sort.cu), with the CPU backend's results bit for
//! bit, values and indices alike (`cpu/sort.rs`).
//!
//! Every element maps to the CPU's unsigned sort key (NaN above +∞ and all NaNs one key,
//! `-0.0 == 0.0`, `false < true`); a key with the element's position in its row is unique, so
//! any correct sort of the pairs is the stable sort, and selections break ties by position.
//! Rows of up to [`TILE`] elements sort in shared memory, several rows per block; longer rows
//! sort their tiles, then merge runs pairwise within the row (by rank, in global memory).
//! `topk` of long rows, and of rows of 1024+ with a small k, is a selection (a radix select
//! of the k-th key, then the k pairs sorted); `kth` and other topks are sorts that write the
//! selected elements only.
//!
//! `unique`'s run detection is a stream compaction (kernels/compact.cu); `searchsorted` a
//! binary search per value; `bincount` checks its values first (a counted synchronisation)
//! and counts with integer atomics, or, with float weights, sorts (value, position) pairs so
//! that one thread per bin adds its weights in input order, as the CPU; `histc` counts with
//! integer atomics and casts once.

use super::buffer::CudaBuffer;
use super::device::CudaDevice;
use super::index::{check_indices, compact_emit, compact_scan, compact_total, plan_geo};
use super::launch::{arg, dptr, launch, launch_cfg, walk};
use super::source::{self, tag, Compact};
use crate::backend::common::float::FloatElem;
use crate::backend::sort::{
    check_1d, check_bincount_operands, check_histc_operands, check_searchsorted_operands,
    check_unique_operands, dim_len, SortedRows,
};
use crate::backend::View;
use crate::{DType, Element, Error, Layout, Result};
use half::{bf16, f16};
use std::sync::Arc;

/// Rows up to this length sort in shared memory (`TILE` in kernels/sort.cu); longer ones
/// sort tiles of this length, then merge.
const TILE: usize = 2048;
/// Threads per block of the shared-memory sorts.
const SORT_THREADS: u32 = 512;
/// The longest rows `k_topk_select` takes with blocks of `SORT_THREADS / 2` threads.
const SELECT_HALF_BLOCK_MAX: usize = 8192;
/// The largest `k` of a topk by selection (`KSEL` in kernels/sort.cu).
const KSEL: usize = 1024;
/// Shared-memory-sized rows (n ≤ [`TILE`]) take the topk selection from this length on, when
/// k ≤ n / [`SELECT_RATIO`].
const SELECT_MIN: usize = 1024;
const SELECT_RATIO: usize = 16;
/// Bytes of one (key, position) pair (`SK`).
pub(super) const SK_BYTES: usize = 16;

fn dim_stride(l: &Layout, dim: usize) -> i64 {
    l.strides().get(dim).map_or(0, |&s| s as i64)
}

/// What a row op writes: `Sorted(k)` the first k sorted elements (sort, topk), `Kth` element
/// k of the ascending order (or the first NaN with `nanprop`).
#[derive(Clone, Copy)]
enum Pick {
    Sorted(usize),
    Kth { k: usize, nanprop: bool },
}

/// Sorts the rows of `src` along `dim` and writes what `pick` asks for.
fn sort_rows(
    op: &'static str,
    src: View,
    dim: usize,
    descending: bool,
    pick: Pick,
    values: View,
    indices: View,
) -> Result<()> {
    let n = dim_len(src.layout, dim);
    if values.layout.numel() == 0 || n == 0 {
        return Ok(());
    }
    let (dev, pv) = dptr(&values)?;
    let (_, pi) = dptr(&indices)?;
    let (_, ps) = dptr(&src)?;
    let mut outer = src.layout.shape().to_vec();
    if !outer.is_empty() {
        outer[dim] = 1;
    }
    let (go, [si, sv, sx], n_rows) = plan_geo(
        op,
        &outer,
        [
            src.layout.strides(),
            values.layout.strides(),
            indices.layout.strides(),
        ],
        [
            src.layout.offset(),
            values.layout.offset(),
            indices.layout.offset(),
        ],
    )?;
    let (ss, vs, xs) = (
        dim_stride(src.layout, dim),
        dim_stride(values.layout, dim),
        dim_stride(indices.layout, dim),
    );
    let t = src.dtype;
    let module = format!("sort_{}", tag(t));
    let desc = descending as i32;
    let (mode, k, nanprop): (i32, i64, i32) = match pick {
        Pick::Sorted(k) => (0, k as i64, 0),
        Pick::Kth { k, nanprop } => (1, k as i64, (nanprop && t.is_float()) as i32),
    };
    let n64 = n as i64;
    // topk by selection (kernels/sort.cu, k_topk_select: one block per row, the row read
    // twice when the k-th key's top-byte bucket is small) instead of a sort: for long rows
    // where one block per row has enough rows to fill the GPU or short enough rows, and for
    // rows of a shared-memory sort whose k is small (the SAE's k 32 of 1,536: a 2048-wide
    // bitonic sort per row costs 66 synchronised stages)
    let select = match pick {
        Pick::Sorted(k) if k < n && k <= KSEL => {
            if n > TILE {
                n <= 1 << 16 || n_rows >= dev.sm_count as i64
            } else {
                n >= SELECT_MIN && k * SELECT_RATIO <= n
            }
        }
        _ => false,
    };
    if n <= TILE && !select {
        let f = dev.function(&module, "sort_rows", || source::sort_module(t))?;
        let p = n.next_power_of_two() as u32;
        let rows_per_block = (p.max(1024) / p) as u64;
        let blocks = (n_rows as u64)
            .div_ceil(rows_per_block)
            .clamp(1, dev.sm_count as u64 * 16) as u32;
        let mut args = [
            arg(&go),
            arg(&si),
            arg(&sv),
            arg(&sx),
            arg(&n_rows),
            arg(&n64),
            arg(&ss),
            arg(&vs),
            arg(&xs),
            arg(&p),
            arg(&desc),
            arg(&mode),
            arg(&k),
            arg(&nanprop),
            arg(&ps),
            arg(&pv),
            arg(&pi),
        ];
        return unsafe {
            launch_cfg(
                &dev,
                &f,
                op,
                (blocks, 1, 1),
                (SORT_THREADS, 1, 1),
                0,
                &mut args,
            )
        };
    }
    if let Pick::Sorted(k) = pick {
        if select {
            let f = dev.function(&module, "topk_select", || source::sort_module(t))?;
            // short rows: half-size blocks, so four rows instead of two are in flight per SM
            // (the kernel's per-row barriers and scans, not its reads, bound short rows)
            let threads = if n <= SELECT_HALF_BLOCK_MAX {
                SORT_THREADS / 2
            } else {
                SORT_THREADS
            };
            let p = (k as u32).next_power_of_two();
            let k64 = k as i64;
            let blocks = (n_rows as u64).clamp(1, dev.sm_count as u64 * 16) as u32;
            let mut args = [
                arg(&go),
                arg(&si),
                arg(&sv),
                arg(&sx),
                arg(&n_rows),
                arg(&n64),
                arg(&ss),
                arg(&vs),
                arg(&xs),
                arg(&p),
                arg(&desc),
                arg(&k64),
                arg(&ps),
                arg(&pv),
                arg(&pi),
            ];
            return unsafe {
                launch_cfg(&dev, &f, op, (blocks, 1, 1), (threads, 1, 1), 0, &mut args)
            };
        }
    }
    // long rows: (key, position) pairs of every row, sorted tile by tile, then merged
    let total = n_rows * n64;
    let fi = dev.function(&module, "sort_init", || source::sort_module(t))?;
    let fw = dev.function(&module, "sort_write", || source::sort_module(t))?;
    let a = CudaBuffer::new(&dev, total as usize * SK_BYTES, false)?;
    let mut args = [
        arg(&go),
        arg(&si),
        arg(&n_rows),
        arg(&n64),
        arg(&ss),
        arg(&desc),
        arg(&ps),
        arg(&a.ptr),
    ];
    unsafe { launch(&dev, &fi, op, total, &mut args)? };
    let sorted = merge_sort(&dev, op, a, n_rows, n64)?;
    let mut args = [
        arg(&go),
        arg(&si),
        arg(&sv),
        arg(&sx),
        arg(&n_rows),
        arg(&n64),
        arg(&ss),
        arg(&vs),
        arg(&xs),
        arg(&mode),
        arg(&k),
        arg(&nanprop),
        arg(&ps),
        arg(&pv),
        arg(&pi),
        arg(&sorted.ptr),
    ];
    let work = if mode == 0 { n_rows * k } else { n_rows };
    unsafe { launch(&dev, &fw, op, work, &mut args) }
}

/// Sorts each of the `n_rows` rows of `n` (key, position) pairs in `a` (row after row);
/// returns the buffer holding the result (`a` or a scratch buffer of its size).
pub(super) fn merge_sort(
    dev: &Arc<CudaDevice>,
    op: &'static str,
    a: CudaBuffer,
    n_rows: i64,
    n: i64,
) -> Result<CudaBuffer> {
    let ft = dev.function("sort_merge", "sort_tiles", source::merge_module)?;
    let fm = dev.function("sort_merge", "merge", source::merge_module)?;
    let tpr = (n as u64).div_ceil(TILE as u64) as i64;
    let blocks = ((n_rows * tpr) as u64).clamp(1, dev.sm_count as u64 * 16) as u32;
    let mut args = [arg(&a.ptr), arg(&n_rows), arg(&n), arg(&tpr)];
    unsafe {
        launch_cfg(
            dev,
            &ft,
            op,
            (blocks, 1, 1),
            (SORT_THREADS, 1, 1),
            0,
            &mut args,
        )?
    };
    if tpr == 1 {
        return Ok(a);
    }
    let total = n_rows * n;
    let mut from = a;
    let mut to = CudaBuffer::new(dev, total as usize * SK_BYTES, false)?;
    let mut l = TILE as i64;
    while l < n {
        let mut args = [arg(&from.ptr), arg(&to.ptr), arg(&n_rows), arg(&n), arg(&l)];
        unsafe { launch(dev, &fm, op, total, &mut args)? };
        std::mem::swap(&mut from, &mut to);
        l *= 2;
    }
    Ok(from)
}

pub(crate) fn sort(
    src: View,
    dim: usize,
    descending: bool,
    values: View,
    indices: View,
) -> Result<()> {
    let n = dim_len(src.layout, dim);
    sort_rows(
        "sort",
        src,
        dim,
        descending,
        Pick::Sorted(n),
        values,
        indices,
    )
}

pub(crate) fn topk(
    src: View,
    dim: usize,
    k: usize,
    largest: bool,
    values: View,
    indices: View,
) -> Result<()> {
    sort_rows("topk", src, dim, largest, Pick::Sorted(k), values, indices)
}

pub(crate) fn kth(
    src: View,
    dim: usize,
    k: usize,
    nan_propagates: bool,
    values: View,
    indices: View,
) -> Result<()> {
    sort_rows(
        "kthvalue",
        src,
        dim,
        false,
        Pick::Kth {
            k,
            nanprop: nan_propagates,
        },
        values,
        indices,
    )
}

// ---------------------------------------------------------------------------------------------
// unique

fn at1(v: &View) -> (i64, i64) {
    (v.layout.offset() as i64, v.layout.strides()[0] as i64)
}

pub(crate) fn count_unique_consecutive(sorted: View) -> Result<usize> {
    let op = "unique";
    check_1d(op, &sorted)?;
    let n = sorted.layout.shape()[0] as i64;
    if n == 0 {
        return Ok(0);
    }
    let (dev, px) = dptr(&sorted)?;
    let (xo, xs) = at1(&sorted);
    let (zero_p, zero_i) = (0u64, 0i64);
    let c = Compact::Unique(sorted.dtype);
    let params = [
        arg(&px),
        arg(&xo),
        arg(&xs),
        arg(&zero_p),
        arg(&zero_i),
        arg(&zero_i),
        arg(&zero_p),
        arg(&zero_i),
        arg(&zero_i),
        arg(&zero_p),
        arg(&zero_i),
    ];
    let (counts, nc) = compact_scan(&dev, op, c, &params, n)?;
    compact_total(&dev, &counts, nc, "unique count")
}

pub(crate) fn unique_consecutive(
    sorted: View,
    values: View,
    group: View,
    counts: View,
) -> Result<()> {
    let op = "unique";
    check_unique_operands(&sorted, &values, &group, &counts)?;
    let (n, g) = (sorted.layout.shape()[0], values.layout.shape()[0]);
    if n == 0 {
        return Ok(());
    }
    let (dev, px) = dptr(&sorted)?;
    let (_, pv) = dptr(&values)?;
    let (_, pg) = dptr(&group)?;
    let (_, pc) = dptr(&counts)?;
    let ((xo, xs), (vo, vs), (go, gs), (co, cs)) =
        (at1(&sorted), at1(&values), at1(&group), at1(&counts));
    let starts = CudaBuffer::new(&dev, g.max(1) * 8, false)?;
    let g64 = g as i64;
    let n64 = n as i64;
    let c = Compact::Unique(sorted.dtype);
    let params = [
        arg(&px),
        arg(&xo),
        arg(&xs),
        arg(&pv),
        arg(&vo),
        arg(&vs),
        arg(&pg),
        arg(&go),
        arg(&gs),
        arg(&starts.ptr),
        arg(&g64),
    ];
    let (scan, nc) = compact_scan(&dev, op, c, &params, n64)?;
    compact_emit(&dev, op, c, &params, n64, &scan, nc)?;
    let f = dev.function(&c.module_name(), "unique_counts", || c.module())?;
    let mut args = [
        arg(&starts.ptr),
        arg(&g64),
        arg(&n64),
        arg(&pc),
        arg(&co),
        arg(&cs),
    ];
    unsafe { launch(&dev, &f, op, g64, &mut args) }
}

// ---------------------------------------------------------------------------------------------
// searchsorted, bincount, histc

pub(crate) fn searchsorted(
    seq: View,
    rows: SortedRows,
    values: View,
    right: bool,
    out: View,
) -> Result<()> {
    let op = "searchsorted";
    let shape = values.layout.shape();
    check_searchsorted_operands(&seq, rows, &values, &out)?;
    let (dev, po) = dptr(&out)?;
    let (_, pv) = dptr(&values)?;
    let (_, pq) = dptr(&seq)?;
    let (g, [so, sv, sq], total) = plan_geo(
        op,
        shape,
        [
            out.layout.strides(),
            values.layout.strides(),
            seq.layout.strides(),
        ],
        [
            out.layout.offset(),
            values.layout.offset(),
            seq.layout.offset(),
        ],
    )?;
    if total == 0 {
        return Ok(());
    }
    let t = values.dtype;
    let module = format!("searchsorted_{}", tag(t));
    let f = dev.function(&module, "searchsorted", || source::search_module(t))?;
    let (m, rs, r) = (rows.len as i64, rows.stride as i64, right as i32);
    let mut args = [
        arg(&g),
        arg(&total),
        arg(&so),
        arg(&sv),
        arg(&sq),
        arg(&m),
        arg(&rs),
        arg(&r),
        arg(&po),
        arg(&pv),
        arg(&pq),
    ];
    unsafe { launch(&dev, &f, op, total, &mut args) }
}

pub(crate) fn bincount(input: View, weights: Option<View>, out: View) -> Result<()> {
    let op = "bincount";
    check_bincount_operands(&input, weights.as_ref(), &out)?;
    let n = input.layout.shape()[0];
    let bins = out.layout.shape()[0];
    if n == 0 {
        return Ok(());
    }
    let (dev, po) = dptr(&out)?;
    let (_, px) = dptr(&input)?;
    // every value is checked before the first write
    // bincount's size came from the data (a wait already): check at once
    check_indices(
        &dev,
        op,
        &input,
        (0, bins as i64),
        move |v| Error::IndexOutOfRange {
            op,
            index: v,
            dim: 0,
            size: bins,
        },
        String::new,
        true,
    )?;
    let it = input.dtype;
    let module = format!("bincount_{}", tag(it));
    let ((xo, xs), (oo, os)) = (at1(&input), at1(&out));
    let n64 = n as i64;
    let Some(w) = weights else {
        let f = dev.function(&module, "bincount_count", || source::bincount_module(it))?;
        let mut args = [
            arg(&n64),
            arg(&px),
            arg(&xo),
            arg(&xs),
            arg(&po),
            arg(&oo),
            arg(&os),
        ];
        return unsafe { launch(&dev, &f, op, n64, &mut args) };
    };
    if n >= u32::MAX as usize {
        return Err(Error::invalid(
            op,
            format!("{n} weighted elements; CUDA's bincount takes fewer than 2^32"),
        ));
    }
    let (_, pw) = dptr(&w)?;
    let (wo, ws) = at1(&w);
    let fk = dev.function(&module, "bincount_keys", || source::bincount_module(it))?;
    let a = CudaBuffer::new(&dev, n * SK_BYTES, false)?;
    let mut args = [arg(&n64), arg(&px), arg(&xo), arg(&xs), arg(&a.ptr)];
    unsafe { launch(&dev, &fk, op, n64, &mut args)? };
    let sorted = merge_sort(&dev, op, a, 1, n64)?;
    let kernel = if w.dtype == DType::F32 {
        "bincount_sum_f32"
    } else {
        "bincount_sum_f64"
    };
    let fs = dev.function(&module, kernel, || source::bincount_module(it))?;
    let b64 = bins as i64;
    let mut args = [
        arg(&n64),
        arg(&b64),
        arg(&sorted.ptr),
        arg(&pw),
        arg(&wo),
        arg(&ws),
        arg(&po),
        arg(&oo),
        arg(&os),
    ];
    unsafe { launch(&dev, &fs, op, b64, &mut args) }
}

pub(crate) fn histc(input: View, lo: f64, hi: f64, out: View) -> Result<()> {
    let op = "histc";
    check_histc_operands(&input, &out)?;
    let bins = out.layout.shape()[0];
    let (dev, po) = dptr(&out)?;
    let (_, px) = dptr(&input)?;
    let w = walk(op, [&input])?;
    let t = input.dtype;
    // the CPU's edges: lo and hi rounded to the dtype, in its compute type (exact in f64)
    let (l, h): (f64, f64) = match t {
        DType::F64 => (<f64>::from_f64(lo).load(), <f64>::from_f64(hi).load()),
        DType::F32 => (
            <f32>::from_f64(lo).load() as f64,
            <f32>::from_f64(hi).load() as f64,
        ),
        DType::F16 => (
            <f16>::from_f64(lo).load() as f64,
            <f16>::from_f64(hi).load() as f64,
        ),
        _ => (
            <bf16>::from_f64(lo).load() as f64,
            <bf16>::from_f64(hi).load() as f64,
        ),
    };
    let nb = bins as f64;
    let b64 = bins as i64;
    let module = format!("histc_{}", tag(t));
    let fc = dev.function(&module, "histc_count", || source::histc_module(t))?;
    let fw = dev.function(&module, "histc_write", || source::histc_module(t))?;
    let cnt = CudaBuffer::new(&dev, bins * 8, true)?;
    let [sx] = w.strs;
    if w.n > 0 {
        let mut args = [
            arg(&w.geo),
            arg(&w.n),
            arg(&sx),
            arg(&px),
            arg(&l),
            arg(&h),
            arg(&nb),
            arg(&b64),
            arg(&cnt.ptr),
        ];
        unsafe { launch(&dev, &fc, op, w.n, &mut args)? };
    }
    let (oo, os) = at1(&out);
    let mut args = [arg(&b64), arg(&cnt.ptr), arg(&po), arg(&oo), arg(&os)];
    unsafe { launch(&dev, &fw, op, b64, &mut args) }
}
