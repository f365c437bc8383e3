//! Host ↔ device transfers (`to_device`): the only way data crosses devices.
//!
//! A tensor whose layout is dense and non-overlapping moves as one block and keeps its strides
//! (PyTorch's `.to()` keeps them too); any other layout is first compacted on its own device in
//! its memory order ([`crate::Layout::dense_strides_like`]). Reading back waits for the GPU and
//! counts as a host synchronisation.

use super::buffer::CudaBuffer;
use super::device::{self, CudaDevice};
use crate::storage::{Storage, StorageData};
use crate::{backend, with_dtype, BufferElement, Device, Error, Layout, Result, Tensor};
use std::sync::Arc;

/// `t` on `to`: a dense copy keeping `t`'s dim order.
pub(crate) fn to_device(t: &Tensor, to: Device) -> Result<Tensor> {
    let dense = if t.layout().is_non_overlapping_and_dense() {
        t.clone()
    } else {
        let d = Tensor::alloc(
            t.shape(),
            t.layout().dense_strides_like(),
            t.dtype(),
            &t.device(),
        )
        .map_err(|e| e.in_op("to_device"))?;
        backend::copy_cast(t.view_ref(), d.view_ref())?;
        d
    };
    let n = dense.numel();
    let esize = dense.dtype().size_in_bytes();
    let layout = Layout::new(t.shape().to_vec(), dense.stride().to_vec(), 0);
    let first = dense.storage_offset();
    let storage = match (t.device(), to) {
        (Device::Cpu, Device::Cuda(i)) => {
            let dev = device::get(i)?;
            let buf = CudaBuffer::new(&dev, n * esize, false).map_err(|e| match e {
                Error::OutOfMemory {
                    device,
                    requested,
                    detail,
                    ..
                } => Error::OutOfMemory {
                    op: "to_device",
                    device,
                    shape: t.shape().to_vec(),
                    dtype: Some(t.dtype()),
                    requested,
                    detail,
                },
                e => e,
            })?;
            let guard = dense.storage().read();
            let StorageData::Cpu(host) = &*guard else {
                return Err(Error::invalid("to_device", "storage is not on the CPU"));
            };
            // SAFETY: [first, first + n) lies inside the host buffer (dense layout)
            let bytes =
                unsafe { std::slice::from_raw_parts(host.as_ptr().add(first * esize), n * esize) };
            upload_raw(&dev, buf.ptr, bytes)?;
            drop(guard);
            Storage::from_cuda(buf, t.dtype(), n)
        }
        (Device::Cuda(i), Device::Cpu) => {
            let dev = device::get(i)?;
            let ptr = cuda_ptr(&dense)?;
            let host = with_dtype!(t.dtype(), T => {
                // host-side staging is fallible: a GPU tensor larger than the host's memory
                // is an OutOfMemory error naming the transfer
                let mut v: Vec<T> = crate::alloc::try_with_capacity(
                    n,
                    "to_device",
                    t.shape(),
                    Some(t.dtype()),
                )?;
                // SAFETY: filled completely by the download before use
                let bytes = unsafe {
                    std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, n * esize)
                };
                download_raw(&dev, ptr + (first * esize) as u64, bytes, "to_device(cpu)")?;
                unsafe { v.set_len(n) };
                T::wrap(v)
            });
            Storage::from_cpu(host)
        }
        (Device::Cuda(_), Device::Cuda(_)) => {
            // through the host: simple and rare (peer copies can come later)
            let h = to_device(&dense, Device::Cpu)?;
            return to_device(&h, to)
                .map(|x| Tensor::from_parts(x.storage().clone(), layout, t.dtype()));
        }
        (Device::Cpu, Device::Cpu) => return Ok(t.clone()),
    };
    Ok(Tensor::from_parts(storage, layout, t.dtype()))
}

fn cuda_ptr(t: &Tensor) -> Result<u64> {
    match &*t.storage().read() {
        StorageData::Cuda(b) => Ok(b.ptr),
        _ => Err(Error::invalid(
            "to_device",
            "storage is not on a CUDA device",
        )),
    }
}

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
