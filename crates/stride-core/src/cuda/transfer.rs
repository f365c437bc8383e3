//! Host ↔ device copies of raw bytes: what `to_device` (`crate::transfer`) and the CPU round
//! trip of the backend contract move data with. Reading back waits for the GPU and counts as a
//! host synchronisation.

use super::device::CudaDevice;
use crate::storage::{Storage, StorageData};
use crate::{Error, Result};
use std::sync::Arc;

/// Host bytes → device address (queued on the stream; pageable memory is staged by the driver
/// before this returns, so `bytes` may be dropped at once). Counted as a synchronisation:
/// the driver waits for the stream before copying from pageable memory.
pub(crate) fn upload_raw(dev: &CudaDevice, dst: u64, bytes: &[u8]) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    dev.bind()?;
    dev.syncs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    crate::cuda::note_sync(dev.device(), "to_device (host to GPU)")?;
    // a transfer reports a failed device-side check like a read does
    dev.deferred.after_wait(dev)?;
    unsafe { cudarc::driver::result::memcpy_htod_async(dst, bytes, dev.stream.cu_stream()) }
        .map_err(|e| dev.err("copying to the GPU", e))
}

/// Device address → host bytes; waits for the GPU (a counted host synchronisation).
pub(crate) fn download_raw(
    dev: &Arc<CudaDevice>,
    src: u64,
    bytes: &mut [u8],
    why: &'static str,
) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    dev.bind()?;
    unsafe { cudarc::driver::result::memcpy_dtoh_async(bytes, src, dev.stream.cu_stream()) }
        .map_err(|e| dev.err(&format!("{why}: copying from the GPU"), e))?;
    dev.synchronize(why)
}

/// The device address of element `start` of a CUDA storage, after checking that `bytes` bytes
/// from there lie inside it.
fn address(storage: &Storage, start: usize, bytes: usize) -> Result<(Arc<CudaDevice>, u64)> {
    let esize = storage.dtype().size_in_bytes();
    if start.saturating_add(bytes / esize) > storage.len() || bytes % esize != 0 {
        return Err(Error::invalid(
            "copy",
            "internal error: a transfer past the end of a storage (please report)",
        ));
    }
    match &*storage.read() {
        StorageData::Cuda(b) => Ok((b.dev.clone(), b.ptr + (start * esize) as u64)),
        _ => Err(Error::invalid("copy", "storage is not on a CUDA device")),
    }
}

/// `into.len()` bytes of a CUDA storage from element `start`, copied to the host (a counted
/// wait).
pub(crate) fn read_bytes(src: &Storage, start: usize, into: &mut [u8]) -> Result<()> {
    let (dev, ptr) = address(src, start, into.len())?;
    download_raw(&dev, ptr, into, "copy to the CPU")
}

/// Writes host bytes into a CUDA storage from element `start`.
pub(crate) fn write_bytes(from: &[u8], dst: &Storage, start: usize) -> Result<()> {
    let (dev, ptr) = address(dst, start, from.len())?;
    upload_raw(&dev, ptr, from)
}
