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
        // a block that will be overwritten is filled with 0xFF bytes (NaN in every float
        // dtype, -1 in the integers) under STRIDE_POISON_UNINIT=1: a kernel that leaves part
        // of its output unwritten then shows in every comparison instead of reading back
        // zeros or a freed tensor's values
        let fill = match (zero, poison_uninit()) {
            (true, _) => Some(0u8),
            (false, true) => Some(0xFF),
            (false, false) => None,
        };
        if let (Some(byte), true) = (fill, bytes > 0) {
            dev.bind()?;
            unsafe {
                cudarc::driver::result::memset_d8_async(ptr, byte, bytes, dev.stream.cu_stream())
            }
            .map_err(|e| dev.err("filling a new buffer", e))?;
        }
        Ok(buf)
    }
}

/// Whether `STRIDE_POISON_UNINIT` (`1`, `true`, `yes`) asks for poisoned uninitialised
/// blocks (read once per process).
fn poison_uninit() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("STRIDE_POISON_UNINIT")
            .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
            .unwrap_or(false)
    })
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

#[cfg(test)]
mod tests {
    use crate::ops::output::alloc_result_for_overwrite;
    use crate::{DType, Tensor};

    /// Under STRIDE_POISON_UNINIT=1 a block allocated for overwriting reads back as 0xFF
    /// bytes (NaN), so an output a kernel leaves partly unwritten fails every comparison.
    #[test]
    fn uninitialised_blocks_are_poisoned_when_asked() {
        if !super::poison_uninit() {
            eprintln!("uninitialised_blocks_are_poisoned_when_asked: skipped (STRIDE_POISON_UNINIT is not set)");
            return;
        }
        let Some(dev) =
            crate::cuda::require_or_skip("uninitialised_blocks_are_poisoned_when_asked")
        else {
            return;
        };
        let t = alloc_result_for_overwrite(&[1000], DType::F32, &dev, None).unwrap();
        let v = t.to_vec::<f32>().unwrap();
        assert!(v.iter().all(|x| x.to_bits() == u32::MAX), "{:?}", &v[..4]);
        let z = Tensor::zeros([1000], DType::F32, &dev).unwrap();
        assert!(z.to_vec::<f32>().unwrap().iter().all(|x| *x == 0.0));
    }
}
