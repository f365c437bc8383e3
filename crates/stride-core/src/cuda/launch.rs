//! From views to kernel arguments, and launching.
//!
//! The operands of an elementwise kernel are described by the CPU engine's own [`Plan`]
//! (size-1 dims dropped, dims ordered by the output's strides, dims merged where every operand
//! is contiguous across them), so both backends see the same merged geometry. A kernel gets
//! the merged shape ([`Geo`]) and each operand's offset and strides ([`Str`]), in elements.

use super::device::CudaDevice;
use crate::backend::common::plan::Plan;
use crate::backend::View;
use crate::storage::StorageData;
use crate::{Error, Result};
use cudarc::driver::CudaFunction;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Most merged dims a kernel takes (`MAXD` in kernels/common.cuh).
pub(crate) const MAXD: usize = 12;

/// The merged common shape of an op's operands, outermost dim first.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geo {
    pub ndim: i32,
    pub size: [i64; MAXD],
}

/// One operand over a [`Geo`]: element offset and element strides.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Str {
    pub off: i64,
    pub st: [i64; MAXD],
}

/// The arguments every elementwise kernel starts with, for N operands (operand 0 is the
/// output).
pub(crate) struct Walk<const N: usize> {
    pub geo: Geo,
    pub strs: [Str; N],
    pub n: i64,
    /// 1 when every operand is one dense run (the kernels' fast path).
    pub contig: i32,
}

/// Plans `views` (all of `views[0]`'s shape; broadcast inputs have stride 0).
pub(crate) fn walk<const N: usize>(op: &'static str, views: [&View; N]) -> Result<Walk<N>> {
    let l0 = views[0].layout;
    walk_layouts(
        op,
        l0.shape(),
        std::array::from_fn(|k| views[k].layout.strides()),
        std::array::from_fn(|k| views[k].layout.offset()),
    )
}

/// Plans N operands given as raw layouts over one `shape` (e.g. an output paired with a
/// row-major "logical" layout whose offsets are logical indices).
pub(crate) fn walk_layouts<const N: usize>(
    op: &'static str,
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
) -> Result<Walk<N>> {
    let plan = Plan::<N>::new(shape, strides, offsets);
    let (shape, strides, offsets) = plan.parts();
    Walk::from_parts(
        op,
        shape,
        std::array::from_fn(|k| strides[k].as_slice()),
        offsets,
        plan.numel(),
    )
}

impl<const N: usize> Walk<N> {
    /// Kernel arguments from an already merged geometry: `shape` (outermost first) and each
    /// operand's signed strides and offset, in elements.
    pub(crate) fn from_parts(
        op: &'static str,
        shape: &[usize],
        strides: [&[isize]; N],
        offsets: [isize; N],
        numel: usize,
    ) -> Result<Walk<N>> {
        if shape.len() > MAXD {
            return Err(Error::invalid(
                op,
                format!(
                    "these operand layouts need {} dims after merging; CUDA kernels take at most {MAXD}. Make an operand .contiguous() first",
                    shape.len()
                ),
            ));
        }
        let mut geo = Geo {
            ndim: shape.len() as i32,
            size: [1; MAXD],
        };
        for (d, &s) in shape.iter().enumerate() {
            geo.size[d] = s as i64;
        }
        let strs = std::array::from_fn(|k| {
            let mut s = Str {
                off: offsets[k] as i64,
                st: [0; MAXD],
            };
            for (d, &v) in strides[k].iter().enumerate() {
                s.st[d] = v as i64;
            }
            s
        });
        let contig = (shape.len() == 1 && strides.iter().all(|s| s[0] == 1)) as i32;
        Ok(Walk {
            geo,
            strs,
            n: numel as i64,
            contig,
        })
    }
}

/// The error of a layout that needs more than [`MAXD`] dims after merging.
pub(crate) fn too_many(op: &'static str, n: usize) -> Error {
    Error::invalid(
        op,
        format!("these operand layouts need {n} dims after merging; CUDA kernels take at most {MAXD}. Make an operand .contiguous() first"),
    )
}

/// A [`Geo`] of `sizes` (outermost first; a 0-d shape is one element).
pub(crate) fn geo_from(sizes: &[usize]) -> Geo {
    let mut g = Geo {
        ndim: sizes.len().max(1) as i32,
        size: [1; MAXD],
    };
    for (d, &s) in sizes.iter().enumerate() {
        g.size[d] = s as i64;
    }
    g
}

/// A [`Str`] of `strides` with offset `off`.
pub(crate) fn str_from(off: isize, strides: &[isize]) -> Str {
    let mut s = Str {
        off: off as i64,
        st: [0; MAXD],
    };
    for (d, &v) in strides.iter().enumerate() {
        s.st[d] = v as i64;
    }
    s
}

/// The device and base address of a CUDA view.
pub(crate) fn dptr(v: &View) -> Result<(Arc<CudaDevice>, u64)> {
    match &*v.storage.read() {
        StorageData::Cuda(b) => Ok((b.dev.clone(), b.ptr)),
        _ => Err(Error::invalid(
            "cuda",
            "a CPU storage reached the CUDA backend (a stride bug: dispatch checks devices)",
        )),
    }
}

/// A view's element pointer (its offset applied) and strides, for kernels that address an
/// operand by its strides.
pub(crate) fn element_ptr(v: &View) -> Result<(u64, Vec<i64>)> {
    let (_, p) = dptr(v)?;
    let size = v.dtype.size_in_bytes() as u64;
    Ok((
        p + v.layout.offset() as u64 * size,
        v.layout.strides().iter().map(|&s| s as i64).collect(),
    ))
}

/// Threads per block of the elementwise kernels.
pub(crate) const BLOCK: u32 = 256;

/// Launches `f` over `n` elements: blocks of 256 threads in grid-stride loops, at most 32
/// blocks per SM (enough to saturate memory). Errors name the op; with `STRIDE_CUDA_SYNC=1`
/// every launch is followed by a synchronisation so that an asynchronous fault (an illegal
/// address) is reported by the op that caused it.
///
/// # Safety
/// `args` must match the kernel's parameters in number, order and types.
pub(crate) unsafe fn launch(
    dev: &CudaDevice,
    f: &CudaFunction,
    op: &'static str,
    n: i64,
    args: &mut [*mut c_void],
) -> Result<()> {
    if n <= 0 {
        return Ok(());
    }
    let blocks = (n as u64)
        .div_ceil(BLOCK as u64)
        .min(dev.sm_count as u64 * 32) as u32;
    launch_cfg(dev, f, op, (blocks.max(1), 1, 1), (BLOCK, 1, 1), 0, args)
}

/// [`launch`] with an explicit grid, block and dynamic shared memory.
///
/// # Safety
/// As [`launch`].
pub(crate) unsafe fn launch_cfg(
    dev: &CudaDevice,
    f: &CudaFunction,
    op: &'static str,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared: u32,
    args: &mut [*mut c_void],
) -> Result<()> {
    dev.bind()?;
    cudarc::driver::result::launch_kernel(
        f.cu_function(),
        grid,
        block,
        shared,
        dev.stream.cu_stream(),
        args,
    )
    .map_err(|e| dev.err(&format!("{op}: kernel launch"), e))?;
    dev.launches.fetch_add(1, Ordering::Relaxed);
    if sync_each_launch() {
        dev.stream
            .synchronize()
            .map_err(|e| dev.err(&format!("{op}: kernel failed"), e))?;
    }
    Ok(())
}

/// Counts a driver operation queued on the stream (a memcpy or memset standing in for a
/// kernel) as a launch, with [`launch_cfg`]'s error handling and `STRIDE_CUDA_SYNC=1` check.
pub(crate) fn queued(
    dev: &CudaDevice,
    op: &'static str,
    what: &str,
    r: std::result::Result<(), cudarc::driver::DriverError>,
) -> Result<()> {
    r.map_err(|e| dev.err(&format!("{op}: {what}"), e))?;
    dev.launches.fetch_add(1, Ordering::Relaxed);
    if sync_each_launch() {
        dev.stream
            .synchronize()
            .map_err(|e| dev.err(&format!("{op}: {what} failed"), e))?;
    }
    Ok(())
}

fn sync_each_launch() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STRIDE_CUDA_SYNC").is_ok_and(|v| v == "1"))
}

/// A kernel argument's address, as `cuLaunchKernel` takes it.
pub(crate) fn arg<T>(v: &T) -> *mut c_void {
    v as *const T as *mut c_void
}

/// Blocks per SM of the `k_*_dense` kernels (their `__launch_bounds__(256, 4)`): all resident
/// at once, so the grid-stride loop has no second wave.
pub(crate) const DENSE_BLOCKS_PER_SM: u64 = 4;

/// Rows of a dense walk (`Rows` in kernels/elementwise.cu): how many, and each operand's
/// row stride in elements (operand 0 is the output; unused slots 0).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rows {
    pub rows: i64,
    pub st: [i64; 4],
}

/// The dense form of a planned walk: `rows` rows of `n` elements, every operand's first element
/// (address), each operand's row stride, and the broadcast bits (bit k - 1 for input k: one
/// element per row read for the whole row). Dense when the walk is one dim, the output and the
/// other inputs dense (stride 1) and each of those aligned to 4 of its elements, as the dense
/// kernels' 4-element vector accesses need; or two dims whose inner one is dense in that sense
/// (a broadcast along the rows, as a bias add), with rows of a multiple of 4 elements starting
/// aligned.
pub(crate) struct Dense<const N: usize> {
    pub ptrs: [u64; N],
    pub bc: i32,
    pub n: i64,
    pub rows: Rows,
}

/// [`Dense`] of `w`, whose operand k has base address `ops[k].0` and element size `ops[k].1`.
pub(crate) fn dense<const N: usize>(w: &Walk<N>, ops: [(u64, usize); N]) -> Option<Dense<N>> {
    if w.n <= 0 || N > 4 {
        return None;
    }
    let nd = w.geo.ndim as usize;
    let (rows, n) = match nd {
        1 => (1, w.geo.size[0]),
        // rows of whole vectors, and the vector index in 32 bits (dense_at in the kernels)
        2 if w.geo.size[1] % 4 == 0 && w.n / 4 < i32::MAX as i64 => (w.geo.size[0], w.geo.size[1]),
        _ => return None,
    };
    let mut bc = 0;
    let mut ptrs = [0u64; N];
    let mut st = [0i64; 4];
    for k in 0..N {
        let (p, size) = ops[k];
        let s = &w.strs[k];
        let addr = p.wrapping_add((s.off as u64).wrapping_mul(size as u64));
        let row = if nd == 2 { s.st[0] } else { 0 };
        match s.st[nd - 1] {
            0 if k > 0 => bc |= 1 << (k - 1),
            1 if addr % (4 * size as u64) == 0 && row % 4 == 0 => {}
            _ => return None,
        }
        ptrs[k] = addr;
        st[k] = row;
    }
    Some(Dense {
        ptrs,
        bc,
        n,
        rows: Rows { rows, st },
    })
}

/// Launches a `k_*_dense` kernel over `n` elements (see kernels/elementwise.cu).
///
/// # Safety
/// As [`launch`].
pub(crate) unsafe fn launch_dense(
    dev: &CudaDevice,
    f: &CudaFunction,
    op: &'static str,
    n: i64,
    args: &mut [*mut c_void],
) -> Result<()> {
    // a block moves 256 threads x 4 vectors x 4 elements per step
    let blocks = (n as u64)
        .div_ceil(BLOCK as u64 * 16)
        .clamp(1, dev.sm_count as u64 * DENSE_BLOCKS_PER_SM) as u32;
    launch_cfg(dev, f, op, (blocks, 1, 1), (BLOCK, 1, 1), 0, args)
}
