//! The wgpu backend: Apple GPUs (Metal), Vulkan and DirectX 12 from one implementation of
//! the backend contract, with compute shaders in WGSL.
//!
//! - [`device`]: the adapters and one device per adapter (`Device::Wgpu(i)`), made on first
//!   use; `STRIDE_WGPU_ADAPTER` picks adapters by name;
//! - `alloc` / `buffer`: the caching allocator (the CUDA allocator's statistics) and a
//!   storage's buffer of packed 32-bit words;
//! - `transfer`: host ↔ device bytes (reads are the counted host waits);
//! - `wgsl`: the op tables' expressions translated to WGSL, and each dtype's packed loads,
//!   stores and casts; `prelude.wgsl`: conversions bit-exact with the CPU's and the tables'
//!   math functions;
//! - `launch`: bindings and one compute pass per op; `elementwise`: copy/cast, fill, unary,
//!   binary, ternary; `matmul`: batched float products, 16 × 16 tiles;
//! - `index`: gathers and scatters, with index checks in shaders whose failures `deferred`
//!   reports at the next read ([`check_errors`]);
//! - `random`: random fills in WGSL, the CPU's bits (normal draws still a round trip);
//! - `reduce`: reductions and arg reductions (double-f32 and word-pair i64 accumulators);
//!   `scan`: cumsum and cumprod, one invocation per line; `sort`: sorts (and so `topk`), a
//!   bitonic network per row;
//! - `primitives`: the contract, and what still runs as a counted CPU round trip.
//!
//! Dtypes: f32, f16, bf16, i32, u32, i8, u8 and bool run in the shaders on every adapter
//! (halves and bytes are packed in words and converted with integer arithmetic, so no
//! adapter feature is needed and the bits are the CPU's); i64 tensors live on the device
//! and their elementwise ops run as CPU round trips (reductions read them natively); f64 is refused with an error (WGSL has no portable
//! 64-bit float).
//!
//! ```
//! use stride_core::{webgpu, DType, Device, Tensor};
//! if webgpu::is_available() {
//!     let d = Device::Wgpu(0);
//!     let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?.to_device(&d)?;
//!     let y = x.mul(2.0)?.add(0.5)?.sqrt()?; // +, ×, √: the CPU's bits exactly
//!     let want: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|v| (v * 2.0 + 0.5).sqrt()).collect();
//!     assert_eq!(y.to_vec::<f32>()?, want);
//! } else {
//!     assert!(Device::wgpu(0).is_err()); // a clear error, never a crash
//! }
//! # Ok::<(), stride_core::Error>(())
//! ```

pub(crate) mod alloc;
pub(crate) mod buffer;
pub(crate) mod deferred;
pub(crate) mod device;
pub(crate) mod elementwise;
pub(crate) mod index;
pub(crate) mod launch;
pub(crate) mod matmul;
pub(crate) mod primitives;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod scan;
pub(crate) mod sort;
pub(crate) mod transfer;
pub(crate) mod wgsl;

pub use buffer::WgpuBuffer;
pub use device::{adapters, is_available, AdapterSummary};

use crate::MemoryStats;
use std::sync::atomic::Ordering;

/// Allocation statistics of `Device::Wgpu(ordinal)` (zeros for a device never used).
pub(crate) fn memory_stats(ordinal: usize) -> MemoryStats {
    match device::existing(ordinal) {
        None => MemoryStats::default(),
        Some(g) => {
            let a = g.allocator.lock().unwrap_or_else(|e| e.into_inner());
            MemoryStats {
                allocated_bytes: a.allocated,
                peak_bytes: a.peak,
                allocation_count: a.count,
                reserved_bytes: a.allocated + a.cached,
                largest_free_block: a.largest_free(),
            }
        }
    }
}

/// Host waits on `Device::Wgpu(ordinal)` so far (each read back is one).
pub fn sync_count(ordinal: usize) -> u64 {
    device::existing(ordinal).map_or(0, |g| g.syncs.load(Ordering::Relaxed))
}

/// Compute passes submitted to `Device::Wgpu(ordinal)` so far.
pub fn launch_count(ordinal: usize) -> u64 {
    device::existing(ordinal).map_or(0, |g| g.launches.load(Ordering::Relaxed))
}

/// Whether `STRIDE_REQUIRE_WGPU` (`1`, `true`, `yes`) makes wgpu tests mandatory.
fn wgpu_required() -> bool {
    std::env::var("STRIDE_REQUIRE_WGPU")
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
        .unwrap_or(false)
}

/// For tests that need a wgpu adapter: `wgpu:0`, or `None` after printing that the test is
/// skipped (no adapter here) — a panic instead under `STRIDE_REQUIRE_WGPU=1`, so a machine
/// with an adapter (CI installs Mesa's lavapipe) can make them mandatory.
///
/// ```
/// # fn main() {
/// let Some(gpu) = stride_core::webgpu::require_or_skip("my_wgpu_test") else { return };
/// # let _ = gpu;
/// # }
/// ```
pub fn require_or_skip(test: &str) -> Option<crate::Device> {
    let required = wgpu_required();
    match crate::Device::wgpu(0) {
        Ok(d) => Some(d),
        Err(e) if required => {
            panic!("{test}: STRIDE_REQUIRE_WGPU is set but wgpu:0 can't be used: {e}")
        }
        Err(e) => {
            eprintln!("{test}: skipped ({e}; STRIDE_REQUIRE_WGPU=1 makes this a failure)");
            None
        }
    }
}

/// Waits until `Device::Wgpu(ordinal)` has run everything submitted to it (a counted host
/// wait; for timing), and returns the error of a failed device-side check if one has failed
/// (see [`check_errors`]). Nothing to wait for on a device never used.
pub fn synchronize(ordinal: usize) -> crate::Result<()> {
    match device::existing(ordinal) {
        Some(g) => transfer::read_raw(&g, None, "synchronize").map(drop),
        None => Ok(()),
    }
}

/// Waits for wgpu device `ordinal` and returns the error of a failed device-side check.
///
/// The index of every gather, scatter, `index_select`, embedding, … and the divisor of every
/// integer division and remainder (the exponent of an integer power) is checked in a shader,
/// without the host waiting for the verdict. An op whose check fails writes nothing, and the
/// *next read* of the device (`to_vec`, `item`, `Display`, a transfer, [`synchronize`], this
/// function) returns [`Error::DeviceCheck`](crate::Error::DeviceCheck): the op's own error
/// (the one the CPU gives at once, e.g. `IndexOutOfRange`), its operands and the line that
/// called it. Every later read returns it too, so a wrong result is never consumed silently,
/// until [`take_error`] takes it; the device stays usable. For the error at the op itself,
/// turn on [`crate::set_sync_checks`] (it is on inside `debug::detect_anomaly`). The CUDA
/// backend does the same (`stride_core::cuda::check_errors`).
///
/// ```
/// use stride_core::{webgpu, Error, Tensor};
/// if let Some(gpu) = webgpu::require_or_skip("doc: check_errors") {
///     let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?.to_device(&gpu)?;
///     let bad = Tensor::from_vec(vec![0i64, 7], [2])?.to_device(&gpu)?;
///     let y = x.index_select(0, &bad)?; // queued: no wait, no error yet
///     let err = y.to_vec::<f32>().unwrap_err(); // the next read reports it
///     assert!(matches!(err, Error::DeviceCheck { .. }), "{err}");
///     assert!(webgpu::check_errors(0).is_err()); // and every read after it
///     assert!(webgpu::take_error(0)?.is_some()); // until it is taken
///     assert_eq!(x.to_vec::<f32>()?, [1.0, 2.0, 3.0]);
/// }
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn check_errors(ordinal: usize) -> crate::Result<()> {
    synchronize(ordinal)
}

/// Waits for wgpu device `ordinal`, then takes the error of a failed device-side check
/// (`None` if no check failed): reads of the device return data again. See [`check_errors`].
pub fn take_error(ordinal: usize) -> crate::Result<Option<crate::Error>> {
    let Some(g) = device::existing(ordinal) else {
        return Ok(None);
    };
    match transfer::read_raw(&g, None, "take_error") {
        Ok(_) | Err(crate::Error::DeviceCheck { .. }) => Ok(g.deferred.take(&g)),
        Err(e) => Err(e),
    }
}

/// Device-side checks queued on wgpu device `ordinal` whose verdict the host has not read
/// yet (read, and forgotten, at the next wait).
pub fn pending_checks(ordinal: usize) -> usize {
    device::existing(ordinal).map_or(0, |g| g.deferred.pending())
}
