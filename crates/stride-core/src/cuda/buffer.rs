//! A device buffer: a block from the device's caching allocator, returned to the cache when
//! the last storage holding it is dropped.

use super::alloc;
use super::device::CudaDevice;
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
