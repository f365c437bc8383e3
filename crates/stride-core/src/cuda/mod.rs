//! The CUDA backend: one folder, readable on its own.
//!
//! - [`device`]: a GPU's state (context, its one stream, allocator, kernels, counters) and the
//!   registry that creates it on first use; CUDA is loaded dynamically (`cudarc`), so one
//!   build runs with or without a GPU;
//! - [`alloc`]: the caching allocator and its statistics; [`buffer`]: a device buffer;
//! - [`compile`]: NVRTC compilation of kernel modules with a disk cache;
//!   [`source`]: the CUDA C of each module, generated from the op enums and `kernels/*.cu`;
//! - [`launch`]: operands → kernel arguments (the CPU engine's merged geometry) and launching;
//! - [`elementwise`]: copy/cast, fill, unary, binary, ternary; [`tile`]: the tiled walk for
//!   transposed operands; [`flip`]: reversed copies;
//! - [`reduce`]: reductions over dims, arg reductions, scans;
//! - [`matmul`]: batched matrix products through cuBLAS, any strides;
//! - [`random`]: Philox random fills, bit-identical to the CPU's;
//! - [`index`]: gather, scatter, the masked scans and extrema; [`sort`]: sort, topk, kth,
//!   unique, searchsorted, bincount, histc (bit for bit the CPU's results);
//! - [`transfer`]: `to_device` both ways; [`timing`]: device time with events;
//!   [`CudaGraph`]: work captured once and replayed with one launch.
//!
//! - [`deferred`](check_errors): device-side checks (index ranges, integer division by zero)
//!   whose failure is reported at the next read.
//!
//! Work is queued asynchronously on one stream per device; the host waits only where it must
//! read (`to_vec`, `item`, `Display`, transfers, counts that size an output such as `nonzero`'s)
//! and every wait is counted ([`sync_count`]). Checks that need the data run on the device
//! and never make the host wait: see [`check_errors`].
//!
//! ```
//! use stride_core::{cuda, DType, Device, Tensor};
//! if cuda::is_available() {
//!     let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?.to_device(&Device::cuda(0)?)?;
//!     let y = x.mul(2.0)?.exp()?;
//!     let before = cuda::sync_count(0);
//!     let host = y.to_vec::<f32>()?; // the one wait of this snippet
//!     assert_eq!(cuda::sync_count(0), before + 1);
//!     assert_eq!(host.len(), 3);
//! } else {
//!     assert!(Device::cuda(0).is_err()); // a clear error, never a crash
//! }
//! # Ok::<(), stride_core::Error>(())
//! ```

pub(crate) mod alloc;
pub(crate) mod attention;
pub(crate) mod buffer;
pub(crate) mod cached_attention;
pub(crate) mod compile;
pub(crate) mod cross_entropy;
pub(crate) mod deferred;
pub(crate) mod device;
pub(crate) mod elementwise;
pub(crate) mod flip;
pub(crate) mod graph;
pub(crate) mod grouped_matmul;
pub(crate) mod index;
pub(crate) mod launch;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod optim;
pub(crate) mod pointwise;
pub(crate) mod primitives;
pub mod quant;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod rows;
pub(crate) mod sort;
pub(crate) mod source;
pub(crate) mod tile;
pub(crate) mod timing;
pub(crate) mod transfer;

pub use buffer::CudaBuffer;
pub use compile::Warmup;
pub use graph::CudaGraph;
pub use matmul::{allow_tf32, set_allow_tf32};
pub use timing::{memcpy_bandwidth, time_on_device};

use crate::storage::Storage;
use crate::{DType, Device, MemoryStats, Result};
use std::sync::atomic::Ordering;

/// Whether at least one CUDA device can be used on this machine.
pub fn is_available() -> bool {
    device::device_count() > 0
}

/// Whether GPU tests must run: `STRIDE_REQUIRE_CUDA=1` (or `true`/`yes`) in the environment.
/// GPU runs of the test suite set it, so a test that would skip for want of a device fails
/// instead of showing as passed.
pub fn cuda_required() -> bool {
    std::env::var("STRIDE_REQUIRE_CUDA")
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
        .unwrap_or(false)
}

/// The GPU tests' one door to the device: `Some(cuda:0)` where a CUDA device is usable;
/// otherwise `None` after printing `{test}: skipped (no CUDA device on this machine)` — or,
/// under `STRIDE_REQUIRE_CUDA=1`, a panic naming the test, so nothing passes by not running.
///
/// ```
/// # fn main() {
/// let Some(gpu) = stride_core::cuda::require_or_skip("my_gpu_test") else { return };
/// # let _ = gpu;
/// # }
/// ```
pub fn require_or_skip(test: &str) -> Option<Device> {
    require_or_skip_with(test, cuda_required(), is_available())
}

/// [`require_or_skip`] with the switch and the device's presence given (testable anywhere).
#[doc(hidden)]
pub fn require_or_skip_with(test: &str, required: bool, available: bool) -> Option<Device> {
    if available {
        match Device::cuda(0) {
            Ok(d) => return Some(d),
            Err(e) if required => {
                panic!("{test}: STRIDE_REQUIRE_CUDA is set but cuda:0 can't be used: {e}")
            }
            Err(e) => {
                eprintln!("{test}: skipped (cuda:0 can't be used: {e})");
                return None;
            }
        }
    }
    if required {
        panic!(
            "{test}: STRIDE_REQUIRE_CUDA is set but there is no CUDA device on this machine \
             (this GPU test would otherwise have skipped)"
        );
    }
    eprintln!("{test}: skipped (no CUDA device on this machine; STRIDE_REQUIRE_CUDA=1 makes this a failure)");
    None
}

/// For tests that need `n` GPUs: `cuda:0..n`, or `None` after printing that the test is
/// skipped (with fewer) — a panic instead under `STRIDE_REQUIRE_MULTI_GPU=1`, so a run on a
/// multi-GPU machine can make them mandatory.
///
/// ```
/// # fn main() {
/// let Some(gpus) = stride_core::cuda::require_gpus_or_skip("my_two_gpu_test", 2) else { return };
/// assert_eq!(gpus.len(), 2);
/// # }
/// ```
pub fn require_gpus_or_skip(test: &str, n: usize) -> Option<Vec<Device>> {
    let have = device_count();
    if have >= n {
        return Some((0..n).map(Device::Cuda).collect());
    }
    if std::env::var("STRIDE_REQUIRE_MULTI_GPU").is_ok_and(|v| v == "1") {
        panic!("{test}: STRIDE_REQUIRE_MULTI_GPU=1 but this machine has {have} CUDA device(s) and the test needs {n}");
    }
    eprintln!("{test}: skipped (needs {n} CUDA devices, this machine has {have}; STRIDE_REQUIRE_MULTI_GPU=1 makes this a failure)");
    None
}

/// How many CUDA devices this machine has (0 without a driver or a GPU).
pub fn device_count() -> usize {
    device::device_count()
}

/// The name and compute capability of CUDA device `ordinal`, e.g. `("NVIDIA H100 80GB HBM3",
/// (9, 0))`.
pub fn device_info(ordinal: usize) -> Result<(String, (i32, i32))> {
    let d = device::get(ordinal)?;
    Ok((d.name.clone(), d.arch))
}

/// How many times the host has waited for CUDA device `ordinal` (reads such as `to_vec`,
/// `item` and `Display`, transfers, explicit [`synchronize`] calls). 0 for a device never used.
pub fn sync_count(ordinal: usize) -> u64 {
    used(ordinal).map_or(0, |d| d.syncs.load(Ordering::Relaxed))
}

/// Kernel launches on CUDA device `ordinal` so far.
pub fn launch_count(ordinal: usize) -> u64 {
    used(ordinal).map_or(0, |d| d.launches.load(Ordering::Relaxed))
}

/// Waits until all work queued on CUDA device `ordinal` is done (counted in [`sync_count`]).
pub fn synchronize(ordinal: usize) -> Result<()> {
    device::get(ordinal)?.synchronize("synchronize")
}

/// Waits for CUDA device `ordinal` and returns the error of a failed device-side check.
///
/// Checks that need the data — every index of a gather, scatter, `index_select`, embedding,
/// …, and integer divisors — run on the GPU without the host waiting for their verdict. An op
/// whose check fails writes nothing, and the *next read* of the device (`to_vec`, `item`,
/// `Display`, a transfer, [`synchronize`], this function) returns
/// [`Error::DeviceCheck`](crate::Error::DeviceCheck): the op's own error (the same the CPU
/// gives at once, e.g. `IndexOutOfRange`), its operands and the line that called it. Every
/// later read returns it too, so a wrong result is never consumed silently, until
/// [`take_error`] takes it; the device stays usable. For the error at the op itself, turn on
/// [`crate::set_sync_checks`] (it is on inside `debug::detect_anomaly`).
///
/// ```
/// use stride_core::{cuda, Device, Error, Tensor};
/// if let Some(gpu) = cuda::require_or_skip("doc: check_errors") {
///     let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?.to_device(&gpu)?;
///     let bad = Tensor::from_vec(vec![0i64, 7], [2])?.to_device(&gpu)?;
///     let y = x.index_select(0, &bad)?; // queued: no wait, no error yet
///     let err = y.to_vec::<f32>().unwrap_err(); // the next read reports it
///     assert!(matches!(err, Error::DeviceCheck { .. }), "{err}");
///     assert!(cuda::check_errors(0).is_err()); // and every read after it
///     assert!(cuda::take_error(0)?.is_some()); // until it is taken
///     assert_eq!(x.to_vec::<f32>()?, [1.0, 2.0, 3.0]);
/// }
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn check_errors(ordinal: usize) -> Result<()> {
    deferred::check_errors(&device::get(ordinal)?)
}

/// Waits for CUDA device `ordinal`, then takes the error of a failed device-side check
/// (`None` if no check failed): reads of the device return data again. See [`check_errors`].
pub fn take_error(ordinal: usize) -> Result<Option<crate::Error>> {
    deferred::take_error(&device::get(ordinal)?)
}

/// Device-side checks queued on device `ordinal` whose verdict the host has not seen yet
/// (they are forgotten as the device finishes them, without waiting).
#[doc(hidden)]
pub fn pending_checks(ordinal: usize) -> usize {
    used(ordinal).map_or(0, |d| d.deferred.pending())
}

/// Returns the allocator's cached blocks of device `ordinal` to the driver (live tensors are
/// untouched), as PyTorch's `torch.cuda.empty_cache()`.
pub fn empty_cache(ordinal: usize) -> Result<()> {
    let d = device::get(ordinal)?;
    let mut a = d.allocator();
    alloc::release_cache(&d, &mut a)
}

/// (kernel modules compiled by NVRTC, modules loaded from the disk cache) in this process: a
/// second run with a warm cache compiles nothing.
pub fn kernel_cache_stats() -> (u64, u64) {
    compile::counts()
}

/// Compiles every kernel module stride can generate for CUDA device `ordinal` that the disk
/// cache lacks, on every CPU core at once, so that no later op of any process waits for NVRTC
/// (a cold cache otherwise compiles each module on its first use, about 0.15 s each).
/// `stride cuda warmup` runs this.
///
/// ```no_run
/// let w = stride_core::cuda::warmup(0)?;
/// println!("{} modules, {} compiled now in {:.1} s", w.modules, w.compiled, w.seconds);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn warmup(ordinal: usize) -> Result<Warmup> {
    let dev = device::get(ordinal)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    compile::warmup(&dev, threads)
}

/// The disk cache directory of compiled kernels (see `STRIDE_KERNEL_CACHE`), if any.
pub fn kernel_cache_dir() -> Option<std::path::PathBuf> {
    compile::cache_dir()
}

/// The device if it has already been initialised (statistics never create a context).
fn used(ordinal: usize) -> Option<std::sync::Arc<device::CudaDevice>> {
    device::existing(ordinal)
}

pub(crate) fn memory_stats(ordinal: usize) -> MemoryStats {
    let Some(d) = used(ordinal) else {
        return MemoryStats::default();
    };
    let a = d.allocator();
    MemoryStats {
        allocated_bytes: a.allocated,
        peak_bytes: a.peak,
        allocation_count: a.count,
        reserved_bytes: a.reserved,
        largest_free_block: a.largest_free_block(),
    }
}

/// A storage of `numel` elements on CUDA device `ordinal` (zero-filled when `zero`).
pub(crate) fn alloc_storage(
    ordinal: usize,
    dtype: DType,
    numel: usize,
    zero: bool,
) -> Result<Storage> {
    let dev = device::get(ordinal)?;
    let bytes = numel.checked_mul(dtype.size_in_bytes()).ok_or_else(|| {
        crate::alloc::oom(
            "alloc",
            dev.device(),
            &[numel],
            Some(dtype),
            crate::alloc::bytes_of(numel, dtype.size_in_bytes()),
            "more than the address space can hold",
        )
    })?;
    let buf = CudaBuffer::new(&dev, bytes, zero)?;
    Ok(Storage::from_cuda(buf, dtype, numel))
}

/// Called before every host wait on `device`, with what causes it.
/// Reported to the debug tools (profiler, sync guard) unless the op that caused it announced
/// it already (`debug::host_sync`).
pub(crate) fn note_sync(device: Device, why: &'static str) -> Result<()> {
    crate::debug::backend_sync(device, why)
}
