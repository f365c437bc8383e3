//! The index primitives on CUDA (kernels/index.cu, kernels/compact.cu): gather, scatter, the
//! masked scans and extrema, with the CPU backend's semantics bit for bit (`cpu/index.rs`).
//!
//! - **Validation on the device, before the first write.** A kernel walks the index in logical
//!   (row-major) order and keeps the smallest bad position (an integer atomic); the writing
//!   kernel takes that verdict (its gate) and writes nothing when it is bad. The host does not
//!   wait: the failure is reported at the next read of the device (`deferred.rs`) as the
//!   CPU's `IndexOutOfRange` for that index, with the operands and the call site.
//! - **Deterministic scatters.** Two positions can only reach one destination if they differ
//!   along the scatter axis only, so one thread per fiber (every other coordinate) walks the
//!   axis in order: destinations combine their sources in logical order, rounding as the CPU
//!   does (one rounding per step in the compute type), and the last assignment wins. When the
//!   index varies along the axis only (`index_add`, an embedding's backward, 1-D scatters),
//!   the axis is first sorted by destination (stably), and one thread per (destination row,
//!   fiber) applies that row's sources in the same order. No float atomics.
//! - **Masked scans** are stream compactions in logical order (count per chunk, scan, rank
//!   with warp ballots): `nonzero` and `masked_select` never wait for the GPU (their output
//!   was sized by `count_nonzero`, which reads its count), `masked_scatter` reads the count
//!   once to refuse a short source before writing.

use super::buffer::CudaBuffer;
use super::device::CudaDevice;
use super::launch::{
    arg, dptr, geo_from, launch, launch_cfg, str_from, too_many, walk, Geo, Str, BLOCK, MAXD,
};
use super::source::{self, tag, Compact};
use crate::backend::common::check::check_extent;
use crate::backend::common::float::Accum;
use crate::backend::common::plan::Plan;
use crate::backend::index::{
    check_gather_operands, check_masked_scatter_operands, check_masked_select_operands,
    check_nonzero_operands, check_scatter_operands, masked_scatter_short, IndexDim, ScatterOp,
};
use crate::backend::View;
use crate::{DType, Error, Result, Scalar};
use half::{bf16, f16};
use std::ffi::c_void;
use std::sync::Arc;

/// The CPU engine's merged geometry of `N` operands over `shape` (dims ordered by operand 0's
/// strides): for work whose order does not matter.
pub(super) fn plan_geo<const N: usize>(
    op: &'static str,
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
) -> Result<(Geo, [Str; N], i64)> {
    let plan = Plan::<N>::new(shape, strides, offsets);
    let (ps, pst, poff) = plan.parts();
    if ps.len() > MAXD {
        return Err(too_many(op, ps.len()));
    }
    Ok((
        geo_from(ps),
        std::array::from_fn(|k| str_from(poff[k], &pst[k])),
        plan.numel() as i64,
    ))
}

/// A geometry over `shape` whose linear index is the logical (row-major) position: size-1
/// dims dropped, neighbours merged only where every operand is contiguous across them, dims
/// kept in logical order.
pub(super) fn logical_geo<const N: usize>(
    op: &'static str,
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
) -> Result<(Geo, [Str; N], i64)> {
    let mut sizes: Vec<usize> = vec![];
    let mut st: [Vec<isize>; N] = std::array::from_fn(|_| vec![]);
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let merge = !sizes.is_empty()
            && (0..N).all(|k| *st[k].last().unwrap() == (strides[k][d] * shape[d]) as isize);
        if merge {
            *sizes.last_mut().unwrap() *= shape[d];
            for k in 0..N {
                *st[k].last_mut().unwrap() = strides[k][d] as isize;
            }
        } else {
            sizes.push(shape[d]);
            for k in 0..N {
                st[k].push(strides[k][d] as isize);
            }
        }
    }
    if sizes.len() > MAXD {
        return Err(too_many(op, sizes.len()));
    }
    if sizes.is_empty() {
        sizes.push(1);
        for s in st.iter_mut() {
            s.push(0);
        }
    }
    Ok((
        geo_from(&sizes),
        std::array::from_fn(|k| str_from(offsets[k] as isize, &st[k])),
        shape.iter().product::<usize>() as i64,
    ))
}

/// `n` words of device memory at `ptr`, read by the host (a counted synchronisation).
pub(super) fn read_words(
    dev: &Arc<CudaDevice>,
    ptr: u64,
    n: usize,
    why: &'static str,
) -> Result<Vec<u64>> {
    let mut host: Vec<u64> = crate::alloc::try_zeroed(n, why, &[n], None)?;
    // SAFETY: u64 has no padding and any byte pattern is valid
    let bytes = unsafe { std::slice::from_raw_parts_mut(host.as_mut_ptr() as *mut u8, n * 8) };
    super::transfer::download_raw(dev, ptr, bytes, why)?;
    Ok(host)
}

/// Blocks of [`BLOCK`] threads for `n` grid-stride items (at most 32 per SM).
pub(super) fn blocks_for(dev: &CudaDevice, n: i64) -> u32 {
    ((n.max(1) as u64)
        .div_ceil(BLOCK as u64)
        .min(dev.sm_count as u64 * 32)) as u32
}

// ---------------------------------------------------------------------------------------------
// validation

/// The verdict of a device-side check, for the writing kernel: the address of the check's
/// result (word 0 non-zero: bad), or 0 where nothing was checked. The buffer lives until the
/// writing kernel is queued (the stream orders its reuse after it).
pub(super) struct Gate(Option<CudaBuffer>);

impl Gate {
    pub(super) fn none() -> Gate {
        Gate(None)
    }
    pub(super) fn ptr(&self) -> u64 {
        self.0.as_ref().map_or(0, |b| b.ptr)
    }
}

pub(super) use crate::backend::common::deferred::describe;

/// Queues the check of every value of the integer operand `index` against `lo..hi` (values
/// repeat along stride-0 dims, so those are visited once) and returns its [`Gate`]. The
/// verdict is deferred (see `deferred.rs`): a bad value becomes `bad(value)` for the first in
/// logical order, reported at the next read with `operands`. With `wait` (or sync checks on)
/// the host reads the verdict now instead (a counted synchronisation) and returns the error.
pub(super) fn check_indices(
    dev: &Arc<CudaDevice>,
    op: &'static str,
    index: &View,
    (lo, hi): (i64, i64),
    bad: impl Fn(i64) -> Error + Send + 'static,
    operands: impl FnOnce() -> String,
    wait: bool,
) -> Result<Gate> {
    let l = index.layout;
    if l.numel() == 0 {
        return Ok(Gate::none());
    }
    let shape: Vec<usize> = l
        .shape()
        .iter()
        .zip(l.strides())
        .map(|(&n, &s)| if s == 0 { n.min(1) } else { n })
        .collect();
    let (g, [sx], n) = logical_geo(op, &shape, [l.strides()], [l.offset()])?;
    let (_, px) = dptr(index)?;
    let module = format!("index_check_{}", tag(index.dtype));
    let t = index.dtype;
    let f = dev.function(&module, "check_index", || source::check_index_module(t))?;
    let f2 = dev.function(&module, "bad_value", || source::check_index_module(t))?;
    let res = CudaBuffer::new(dev, 16, true)?;
    let mut args = [
        arg(&g),
        arg(&sx),
        arg(&n),
        arg(&px),
        arg(&lo),
        arg(&hi),
        arg(&res.ptr),
    ];
    unsafe { launch(dev, &f, op, n, &mut args)? };
    let mut args2 = [arg(&g), arg(&sx), arg(&px), arg(&res.ptr)];
    unsafe { launch_cfg(dev, &f2, op, (1, 1, 1), (1, 1, 1), 0, &mut args2)? };
    if wait || super::deferred::sync_checks() {
        let w = read_words(dev, res.ptr, 2, "index range check")?;
        if w[0] != 0 {
            return Err(bad(w[1] as i64));
        }
        return Ok(Gate::none());
    }
    let failure = super::deferred::Failure {
        cause: Box::new(bad),
        operands: operands(),
    };
    dev.deferred.register(dev, op, res.ptr, failure)?;
    Ok(Gate(Some(res)))
}

/// [`check_indices`] of a gather's or scatter's `index` against its indexed dim.
fn check_index_dim(
    dev: &Arc<CudaDevice>,
    at: IndexDim,
    index: &View,
    src: &View,
    dst: &View,
) -> Result<Gate> {
    check_indices(
        dev,
        at.op,
        index,
        at.bounds(),
        move |v| at.out_of_range(v),
        || describe(&[("index", index), ("source", src), ("destination", dst)]),
        false,
    )
}

// ---------------------------------------------------------------------------------------------
// gather

pub(crate) fn gather(src: View, index: View, at: IndexDim, dst: View) -> Result<()> {
    check_gather_operands(&src, &index, &at, &dst)?;
    let (dev, pd) = dptr(&dst)?;
    let (_, ps) = dptr(&src)?;
    let (_, px) = dptr(&index)?;
    let gate = check_index_dim(&dev, at, &index, &src, &dst)?;
    let w = walk(at.op, [&dst, &src, &index])?;
    if w.n == 0 {
        return Ok(());
    }
    let b = dst.dtype.size_in_bytes();
    let it = index.dtype;
    let module = format!("gather_{b}_{}", tag(it));
    let f = dev.function(&module, "gather", || source::gather_module(b, it))?;
    let [so, ss, sx] = w.strs;
    let (size, stride, wrap) = (at.size as i64, at.stride as i64, at.wrap as i32);
    let gp = gate.ptr();
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&so),
        arg(&ss),
        arg(&sx),
        arg(&pd),
        arg(&ps),
        arg(&px),
        arg(&size),
        arg(&stride),
        arg(&wrap),
        arg(&gp),
    ];
    unsafe { launch(&dev, &f, at.op, w.n, &mut args) }
}

/// `dst = src` (same shape and dtype) unless the check whose verdict is at `gate` failed.
pub(super) fn gated_copy(
    dev: &Arc<CudaDevice>,
    op: &'static str,
    src: View,
    dst: View,
    gate: u64,
) -> Result<()> {
    let w = walk(op, [&dst, &src])?;
    if w.n == 0 {
        return Ok(());
    }
    let b = dst.dtype.size_in_bytes();
    let f = dev.function(&format!("gated_copy_{b}"), "gated_copy", || {
        source::gated_copy_module(b)
    })?;
    let (_, pd) = dptr(&dst)?;
    let (_, ps) = dptr(&src)?;
    let [so, ss] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&so),
        arg(&ss),
        arg(&pd),
        arg(&ps),
        arg(&gate),
    ];
    unsafe { launch(dev, &f, op, w.n, &mut args) }
}

// ---------------------------------------------------------------------------------------------
// scatter

/// Axis lengths from which a scatter whose index varies along the axis only sorts the axis by
/// destination instead of walking it once per fiber.
const SORTED_SCATTER_MIN: i64 = 64;

/// An element's little-endian bits (the kernels rebuild it with `from_bits`).
fn bits<T: Copy>(v: T) -> u64 {
    let mut b = [0u8; 8];
    let n = std::mem::size_of::<T>();
    // SAFETY: T is a plain element type of n ≤ 8 bytes
    unsafe { std::ptr::copy_nonoverlapping(&v as *const T as *const u8, b.as_mut_ptr(), n) };
    u64::from_le_bytes(b)
}

/// (init, alpha) of a reducing scatter on `T`, as the CPU makes them: the identity when the
/// old values are excluded, and `alpha` cast to `T` when it is not 1.
fn consts<T: Accum>(op: ScatterOp, include_self: bool) -> (Option<u64>, Option<u64>) {
    let init = (!include_self).then(|| {
        bits(match op {
            ScatterOp::Add { .. } => T::from_i64(0),
            ScatterOp::Prod => T::from_i64(1),
            ScatterOp::Amax => T::lowest(),
            _ => T::highest(),
        })
    });
    let alpha = match op {
        ScatterOp::Add { alpha } if alpha.to_f64() != 1.0 => Some(bits(alpha.to_elem::<T>())),
        _ => None,
    };
    (init, alpha)
}

fn scatter_consts(op: ScatterOp, t: DType, include_self: bool) -> (Option<u64>, Option<u64>) {
    match t {
        DType::F64 => consts::<f64>(op, include_self),
        DType::F32 => consts::<f32>(op, include_self),
        DType::F16 => consts::<f16>(op, include_self),
        DType::BF16 => consts::<bf16>(op, include_self),
        DType::I64 => consts::<i64>(op, include_self),
        DType::I32 => consts::<i32>(op, include_self),
        DType::U32 => consts::<u32>(op, include_self),
        DType::U8 => consts::<u8>(op, include_self),
        DType::I8 => consts::<i8>(op, include_self),
        DType::Bool => (None, None), // refused before
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
    let shape = index.layout.shape();
    if op != ScatterOp::Assign && dst.dtype == DType::Bool {
        return Err(Error::UnsupportedDType {
            op: at.op,
            dtype: DType::Bool,
            hint: "; reducing scatters take numeric tensors (convert with to_dtype)".into(),
        });
    }
    let (dev, pd) = dptr(&dst)?;
    let (_, ps) = dptr(&src)?;
    let (_, px) = dptr(&index)?;
    let gate = check_index_dim(&dev, at, &index, &src, &dst)?;
    let gp = gate.ptr();
    let total: usize = shape.iter().product();
    if total == 0 {
        return Ok(());
    }
    // positions off the axis never collide: one thread each, walking the axis in order
    let ax = at.dim.min(shape.len().saturating_sub(1));
    let n: i64 = if shape.is_empty() {
        1
    } else {
        shape[ax] as i64
    };
    let mut outer = shape.to_vec();
    if !outer.is_empty() {
        outer[ax] = 1;
    }
    let axis_stride = |v: &View| v.layout.strides().get(ax).map_or(0, |&s| s as i64);
    let (xd, sa) = (axis_stride(&index), axis_stride(&src));
    let (g, [sd, sx, ss], m) = plan_geo(
        at.op,
        &outer,
        [
            dst.layout.strides(),
            index.layout.strides(),
            src.layout.strides(),
        ],
        [
            dst.layout.offset(),
            index.layout.offset(),
            src.layout.offset(),
        ],
    )?;
    let (t, it) = (dst.dtype, index.dtype);
    let (init, alpha) = if op == ScatterOp::Assign {
        (None, None)
    } else {
        scatter_consts(op, t, include_self)
    };
    let module = source::scatter_module_name(op, t, it);
    let f = dev.function(&module, "scatter", || {
        source::scatter_module(op, t, it).unwrap_or_default()
    })?;
    let (size, stride, wrap) = (at.size as i64, at.stride as i64, at.wrap as i32);
    let (has_init, init_bits) = (init.is_some() as i32, init.unwrap_or(0));
    let (use_alpha, alpha_bits) = (alpha.is_some() as i32, alpha.unwrap_or(0));
    // the index varies along the axis only: sort the axis by destination row, then one
    // thread per (row, fiber) (see k_scatter_sorted)
    let row_mode = shape
        .iter()
        .zip(index.layout.strides())
        .enumerate()
        .all(|(d, (&len, &st))| d == ax || len <= 1 || st == 0);
    if row_mode && n >= SORTED_SCATTER_MIN && n < u32::MAX as i64 {
        let fk = dev.function(&module, "scatter_keys", || {
            source::scatter_module(op, t, it).unwrap_or_default()
        })?;
        let fs = dev.function(&module, "scatter_sorted", || {
            source::scatter_module(op, t, it).unwrap_or_default()
        })?;
        let keys = CudaBuffer::new(&dev, n as usize * super::sort::SK_BYTES, false)?;
        let x0 = index.layout.offset() as i64;
        let mut args = [
            arg(&n),
            arg(&px),
            arg(&x0),
            arg(&xd),
            arg(&size),
            arg(&wrap),
            arg(&keys.ptr),
        ];
        unsafe { launch(&dev, &fk, at.op, n, &mut args)? };
        let sorted = super::sort::merge_sort(&dev, at.op, keys, 1, n)?;
        let work = n * m;
        let mut args = [
            arg(&g),
            arg(&m),
            arg(&sd),
            arg(&ss),
            arg(&n),
            arg(&sa),
            arg(&pd),
            arg(&ps),
            arg(&sorted.ptr),
            arg(&stride),
            arg(&has_init),
            arg(&init_bits),
            arg(&use_alpha),
            arg(&alpha_bits),
            arg(&gp),
        ];
        return unsafe { launch(&dev, &fs, at.op, work, &mut args) };
    }
    let mut args = [
        arg(&g),
        arg(&m),
        arg(&sd),
        arg(&sx),
        arg(&ss),
        arg(&n),
        arg(&xd),
        arg(&sa),
        arg(&pd),
        arg(&px),
        arg(&ps),
        arg(&size),
        arg(&stride),
        arg(&wrap),
        arg(&has_init),
        arg(&init_bits),
        arg(&use_alpha),
        arg(&alpha_bits),
        arg(&gp),
    ];
    unsafe { launch(&dev, &f, at.op, m, &mut args) }
}

// ---------------------------------------------------------------------------------------------
// masked scans

/// Positions per block of the compaction kernels (`CCHUNK` in kernels/compact.cu).
const CCHUNK: i64 = 4096;
const CBLOCK: u32 = 256;

/// A stream compaction of `n` positions: `params` are the kernel arguments of `PARAMS`.
/// Queues the chunk counts and their scan; returns the buffer of starts (its word `nc` is the
/// total) and the number of chunks.
pub(super) fn compact_scan(
    dev: &Arc<CudaDevice>,
    op: &'static str,
    c: Compact,
    params: &[*mut c_void],
    n: i64,
) -> Result<(CudaBuffer, i64)> {
    let nc = (n.max(0) as u64).div_ceil(CCHUNK as u64) as i64;
    if nc > i32::MAX as i64 {
        return Err(Error::invalid(
            op,
            "the operand is too large for the CUDA kernels",
        ));
    }
    let name = c.module_name();
    let fc = dev.function(&name, "chunk_count", || c.module())?;
    let fs = dev.function(&name, "scan_counts", || c.module())?;
    let counts = CudaBuffer::new(dev, (nc as usize + 1) * 8, true)?;
    if nc > 0 {
        let mut args: Vec<*mut c_void> = params.to_vec();
        args.push(arg(&n));
        args.push(arg(&counts.ptr));
        unsafe {
            launch_cfg(
                dev,
                &fc,
                op,
                (nc as u32, 1, 1),
                (CBLOCK, 1, 1),
                0,
                &mut args,
            )?
        };
        let mut a2 = [arg(&counts.ptr), arg(&nc)];
        unsafe { launch_cfg(dev, &fs, op, (1, 1, 1), (1024, 1, 1), 0, &mut a2)? };
    }
    Ok((counts, nc))
}

/// Queues the ranking kernel of a compaction whose starts [`compact_scan`] made.
pub(super) fn compact_emit(
    dev: &Arc<CudaDevice>,
    op: &'static str,
    c: Compact,
    params: &[*mut c_void],
    n: i64,
    starts: &CudaBuffer,
    nc: i64,
) -> Result<()> {
    if nc == 0 {
        return Ok(());
    }
    let f = dev.function(&c.module_name(), "emit", || c.module())?;
    let mut args: Vec<*mut c_void> = params.to_vec();
    args.push(arg(&n));
    args.push(arg(&starts.ptr));
    unsafe { launch_cfg(dev, &f, op, (nc as u32, 1, 1), (CBLOCK, 1, 1), 0, &mut args) }
}

/// The total of a compaction (a counted synchronisation).
pub(super) fn compact_total(
    dev: &Arc<CudaDevice>,
    counts: &CudaBuffer,
    nc: i64,
    why: &'static str,
) -> Result<usize> {
    if nc == 0 {
        return Ok(0);
    }
    Ok(read_words(dev, counts.ptr + nc as u64 * 8, 1, why)?[0] as usize)
}

pub(crate) fn count_nonzero(src: View) -> Result<usize> {
    let op = "count_nonzero";
    check_extent(op, &src, 0)?;
    let (dev, px) = dptr(&src)?;
    let w = walk(op, [&src])?;
    let [sx] = w.strs;
    let c = Compact::CountNonzero(src.dtype);
    let params = [arg(&w.geo), arg(&sx), arg(&px)];
    let (counts, nc) = compact_scan(&dev, op, c, &params, w.n)?;
    compact_total(&dev, &counts, nc, "count_nonzero")
}

pub(crate) fn nonzero(src: View, dst: View) -> Result<()> {
    let op = "nonzero";
    let shape = src.layout.shape();
    let nd = shape.len();
    check_nonzero_operands(&src, &dst)?;
    if nd > MAXD {
        return Err(Error::invalid(
            op,
            format!("CUDA kernels take at most {MAXD} dims; this tensor has {nd}"),
        ));
    }
    let (dev, po) = dptr(&dst)?;
    let (_, px) = dptr(&src)?;
    let (g, [sx], n) = logical_geo(op, shape, [src.layout.strides()], [src.layout.offset()])?;
    let mut shp = geo_from(shape);
    shp.ndim = nd as i32;
    let oo = dst.layout.offset() as i64;
    let (r0, c0) = (
        dst.layout.strides()[0] as i64,
        dst.layout.strides()[1] as i64,
    );
    let rows = dst.layout.shape()[0] as i64;
    if rows == 0 {
        return Ok(());
    }
    let c = Compact::Nonzero(src.dtype);
    let params = [
        arg(&g),
        arg(&sx),
        arg(&px),
        arg(&po),
        arg(&oo),
        arg(&r0),
        arg(&c0),
        arg(&shp),
        arg(&rows),
    ];
    let (starts, nc) = compact_scan(&dev, op, c, &params, n)?;
    compact_emit(&dev, op, c, &params, n, &starts, nc)
}

pub(crate) fn masked_select(src: View, mask: View, dst: View) -> Result<()> {
    let op = "masked_select";
    let shape = src.layout.shape();
    check_masked_select_operands(&src, &mask, &dst)?;
    let rows = dst.layout.shape()[0] as i64;
    if rows == 0 {
        return Ok(());
    }
    let (dev, po) = dptr(&dst)?;
    let (_, px) = dptr(&src)?;
    let (_, pm) = dptr(&mask)?;
    let (g, [sx, sm], n) = logical_geo(
        op,
        shape,
        [src.layout.strides(), mask.layout.strides()],
        [src.layout.offset(), mask.layout.offset()],
    )?;
    let (oo, os) = (dst.layout.offset() as i64, dst.layout.strides()[0] as i64);
    let c = Compact::MaskedSelect(src.dtype.size_in_bytes());
    let params = [
        arg(&g),
        arg(&sx),
        arg(&sm),
        arg(&px),
        arg(&pm),
        arg(&po),
        arg(&oo),
        arg(&os),
        arg(&rows),
    ];
    let (starts, nc) = compact_scan(&dev, op, c, &params, n)?;
    compact_emit(&dev, op, c, &params, n, &starts, nc)
}

pub(crate) fn masked_scatter(dst: View, mask: View, src: View) -> Result<()> {
    let op = "masked_scatter";
    let shape = dst.layout.shape();
    check_masked_scatter_operands(&dst, &mask, &src)?;
    let (dev, pd) = dptr(&dst)?;
    let (_, ps) = dptr(&src)?;
    let (_, pm) = dptr(&mask)?;
    let (g, [sd, sm], n) = logical_geo(
        op,
        shape,
        [dst.layout.strides(), mask.layout.strides()],
        [dst.layout.offset(), mask.layout.offset()],
    )?;
    let (so, ss) = (src.layout.offset() as i64, src.layout.strides()[0] as i64);
    let available = src.layout.shape()[0];
    let avail = available as i64;
    let c = Compact::MaskedScatter(dst.dtype.size_in_bytes());
    let params = [
        arg(&g),
        arg(&sd),
        arg(&sm),
        arg(&pd),
        arg(&pm),
        arg(&ps),
        arg(&so),
        arg(&ss),
        arg(&avail),
    ];
    let (starts, nc) = compact_scan(&dev, op, c, &params, n)?;
    let total = compact_total(&dev, &starts, nc, "masked_scatter count")?;
    if total > available {
        return Err(masked_scatter_short(total, available));
    }
    compact_emit(&dev, op, c, &params, n, &starts, nc)
}

// ---------------------------------------------------------------------------------------------
// extrema

pub(crate) fn extrema(src: View) -> Result<Option<(Scalar, Scalar)>> {
    let op = "extrema";
    check_extent(op, &src, 0)?;
    let (dev, px) = dptr(&src)?;
    // the CPU's visiting order (its plan over the input), so that ties resolve alike
    let w = walk(op, [&src])?;
    if w.n == 0 {
        return Ok(None);
    }
    let t = src.dtype;
    let module = format!("extrema_{}", tag(t));
    let f = dev.function(&module, "extrema_part", || source::extrema_module(t))?;
    let f2 = dev.function(&module, "extrema_final", || source::extrema_module(t))?;
    let nb = blocks_for(&dev, w.n).min(dev.sm_count * 4) as i64;
    let part = CudaBuffer::new(&dev, nb as usize * 32, false)?;
    let [sx] = w.strs;
    let mut args = [arg(&w.geo), arg(&w.n), arg(&sx), arg(&px), arg(&part.ptr)];
    unsafe { launch_cfg(&dev, &f, op, (nb as u32, 1, 1), (BLOCK, 1, 1), 0, &mut args)? };
    let mut a2 = [arg(&nb), arg(&part.ptr)];
    unsafe { launch_cfg(&dev, &f2, op, (1, 1, 1), (BLOCK, 1, 1), 0, &mut a2)? };
    let r = read_words(&dev, part.ptr, 4, "extrema")?;
    Ok(Some(if t.is_float() {
        let (lo, hi) = (f64::from_bits(r[0]), f64::from_bits(r[2]));
        let canon = |v: f64| if v.is_nan() { f64::NAN } else { v };
        (Scalar::Float(canon(lo)), Scalar::Float(canon(hi)))
    } else {
        (Scalar::Int(r[0] as i64), Scalar::Int(r[2] as i64))
    }))
}
