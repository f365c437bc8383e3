//! A storage's memory on a wgpu device: a buffer from the device's caching allocator,
//! returned to the cache when the last storage holding it is dropped.

use super::alloc::size_class;
use super::device::Gpu;
use crate::{DType, Error, Result, Storage};
use std::sync::Arc;

/// The memory of one wgpu storage. Elements are packed in little-endian order in 32-bit
/// words (so bool, u8, i8, f16 and bf16 share words); the buffer is a whole number of words.
pub struct WgpuBuffer {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) buffer: Option<wgpu::Buffer>,
    /// Bytes of the buffer (its size class).
    pub(crate) class: u64,
}

impl std::fmt::Debug for WgpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WgpuBuffer({}, {} bytes)", self.gpu.device(), self.class)
    }
}

impl WgpuBuffer {
    pub(crate) fn raw(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("a live buffer")
    }
}

impl Drop for WgpuBuffer {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.gpu
                .allocator
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .give_back(self.class, b);
        }
    }
}

/// A storage of `len` elements of `dtype` on `gpu`, zero-filled when `zero`.
pub(crate) fn alloc_storage(
    gpu: &Arc<Gpu>,
    dtype: DType,
    len: usize,
    zero: bool,
) -> Result<Storage> {
    let device = gpu.device();
    if dtype == DType::F64 {
        return Err(Error::DeviceLacksDType {
            device,
            dtype,
            why: format!(
                "its shaders are WGSL, which has no portable 64-bit float (Metal has none) on \
                 any adapter ({}); use f32, or keep f64 tensors on the CPU",
                gpu.name
            ),
        });
    }
    let oom = |detail: String| {
        crate::alloc::oom(
            "alloc",
            device,
            &[len],
            Some(dtype),
            crate::alloc::bytes_of(len, dtype.size_in_bytes()),
            detail,
        )
    };
    let bytes = (len as u128) * dtype.size_in_bytes() as u128;
    if bytes > gpu.limits.max_buffer_size as u128 {
        return Err(oom(format!(
            "more than the adapter's largest buffer, {} bytes",
            gpu.limits.max_buffer_size
        )));
    }
    let class = size_class(bytes as u64);
    let cached = gpu
        .allocator
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take(class);
    let buffer = match cached {
        Some(b) => {
            if zero {
                let mut enc = gpu.device.create_command_encoder(&Default::default());
                enc.clear_buffer(&b, 0, None);
                gpu.queue.submit([enc.finish()]);
            }
            b
        }
        None => {
            let make = || {
                let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
                let b = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: class,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    // new buffers are zeroed by wgpu
                    mapped_at_creation: false,
                });
                match pollster::block_on(scope.pop()) {
                    None => Some(b),
                    Some(_) => None,
                }
            };
            let b = match make() {
                Some(b) => b,
                None => {
                    gpu.allocator
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .release_cache();
                    make().ok_or_else(|| oom(format!("the driver refused {class} bytes")))?
                }
            };
            gpu.allocator
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .note_alloc(class);
            b
        }
    };
    Ok(Storage::from_wgpu(
        WgpuBuffer {
            gpu: gpu.clone(),
            buffer: Some(buffer),
            class,
        },
        dtype,
        len,
    ))
}
