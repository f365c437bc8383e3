//! Memory reports: the allocator statistics of every device in use, and a leak check for
//! tests. Per-op allocation and peaks are in the profiler ([`super::OpEvent`]).

use crate::{memory_stats, Device, Error, Result};

/// The allocation statistics of every device in use, one line each.
///
/// ```
/// let report = stride_core::debug::memory_report();
/// assert!(report.starts_with("cpu:"));
/// ```
pub fn memory_report() -> String {
    let mut s = String::new();
    let mut devices = vec![Device::Cpu];
    for i in 0..crate::cuda::device_count() {
        if crate::cuda::device::existing(i).is_some() {
            devices.push(Device::Cuda(i));
        }
    }
    for d in devices {
        s += &format!("{d}: {}\n", memory_stats(d));
    }
    s
}

/// Runs `f` `warmup` times, then `iters` times more, and fails with [`Error::Leak`] unless the
/// bytes allocated on `device` after the last iteration are at most those after the warm-up
/// (caches and optimizer state filled during warm-up are fine; growth afterwards is a leak).
/// What `f` returns is dropped after each call. The counts are process-wide: run it where
/// no other thread allocates on `device` meanwhile.
///
/// ```
/// use stride_core::{debug, DType, Device, Tensor};
/// let x = Tensor::ones([1024], DType::F32, &Device::Cpu)?;
/// debug::check_leaks(Device::Cpu, 2, 5, || x.mul(2.0)?.exp())?; // flat: fine
/// let mut kept = vec![];
/// let err = debug::check_leaks(Device::Cpu, 2, 5, || {
///     kept.push(x.mul(2.0)?); // keeps every result alive: a leak
///     Ok(())
/// });
/// assert!(err.is_err());
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn check_leaks<T>(
    device: Device,
    warmup: usize,
    iters: usize,
    mut f: impl FnMut() -> Result<T>,
) -> Result<()> {
    for _ in 0..warmup {
        drop(f()?);
    }
    let base = memory_stats(device).allocated_bytes;
    let mut after = Vec::with_capacity(iters);
    for _ in 0..iters {
        drop(f()?);
        after.push(memory_stats(device).allocated_bytes);
    }
    let last = after.last().copied().unwrap_or(base);
    if last > base {
        let per = (last - base) as f64 / iters.max(1) as f64;
        return Err(Error::Leak {
            device,
            report: format!(
                "allocated bytes on {device} grew from {base} after {warmup} warm-up iteration(s) to {last} after {iters} more (+{per:.0} bytes per iteration; after each: {after:?}). Something keeps tensors alive across iterations: a list that grows, a graph kept by a tensor that requires grad (use detach() or no_grad), a cache"
            ),
        });
    }
    Ok(())
}
