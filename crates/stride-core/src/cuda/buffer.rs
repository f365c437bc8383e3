//! A device buffer: a block from the device's caching allocator, returned to the cache when
//! the last storage holding it is dropped.

use super::alloc;
use super::device::CudaDevice;
use crate::backend::View;
use crate::{Layout, Result, Storage};
use std::sync::Arc;

/// The memory of one CUDA storage.
pub struct CudaBuffer {
    pub(crate) dev: Arc<CudaDevice>,
    /// Device address of the first byte.
    pub(crate) ptr: u64,
    /// Bytes of the block (its allocator size class, at least what was asked for).
    pub(crate) size: usize,
}

impl CudaBuffer {
    /// A block of at least `bytes` bytes on `dev`, zero-filled when `zero` (queued on the
    /// device's stream, like everything else).
    pub(crate) fn new(dev: &Arc<CudaDevice>, bytes: usize, zero: bool) -> crate::Result<Self> {
        let (ptr, size) = alloc::allocate(dev, bytes)?;
        let buf = CudaBuffer {
            dev: dev.clone(),
            ptr,
            size,
        };
        if zero && bytes > 0 {
            dev.bind()?;
            unsafe {
                cudarc::driver::result::memset_d8_async(ptr, 0, bytes, dev.stream.cu_stream())
            }
            .map_err(|e| dev.err("zero-filling a new buffer", e))?;
        }
        Ok(buf)
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        alloc::release(&self.dev, self.ptr, self.size);
    }
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaBuffer(cuda:{}, {:#x}, {} bytes)",
            self.dev.ordinal, self.ptr, self.size
        )
    }
}

/// A fresh row-major storage of `v`'s shape and dtype on its device (zero-filled when `zero`),
/// and its layout: scratch a kernel writes densely, through the storage API.
pub(crate) fn alloc_dense(v: &View, zero: bool) -> Result<(Storage, Layout)> {
    let shape = v.layout.shape();
    let s = Storage::alloc(shape, v.dtype, &v.storage.device(), zero)?;
    Ok((s, Layout::contiguous(shape)))
}

/// A row-major copy of `v` (for kernels that read only dense operands).
pub(crate) fn dense_copy(v: &View) -> Result<(Storage, Layout)> {
    let (s, l) = alloc_dense(v, false)?;
    let dst = View {
        storage: &s,
        layout: &l,
        dtype: v.dtype,
    };
    crate::backend::copy_cast(*v, dst)?;
    Ok((s, l))
}
