//! Storage: a reference-counted buffer shared by all views of it, with a version counter that
//! every in-place write bumps (autograd uses it to detect stale saved tensors).

use crate::{DType, Device, Element};
use half::{bf16, f16};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A host buffer of one dtype.
#[derive(Debug, Clone)]
pub enum CpuBuffer {
    F64(Vec<f64>),
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    Bool(Vec<bool>),
}

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype`.
#[macro_export]
#[doc(hidden)]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}

/// Conversions between Rust element vectors and [`CpuBuffer`].
pub trait BufferElement: Element {
    fn wrap(v: Vec<Self>) -> CpuBuffer;
    fn slice(b: &CpuBuffer) -> Option<&[Self]>;
    fn slice_mut(b: &mut CpuBuffer) -> Option<&mut [Self]>;
}

macro_rules! buffer_element {
    ($t:ty, $v:ident) => {
        impl BufferElement for $t {
            fn wrap(v: Vec<Self>) -> CpuBuffer {
                CpuBuffer::$v(v)
            }
            fn slice(b: &CpuBuffer) -> Option<&[Self]> {
                match b {
                    CpuBuffer::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(b: &mut CpuBuffer) -> Option<&mut [Self]> {
                match b {
                    CpuBuffer::$v(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
buffer_element!(f64, F64);
buffer_element!(f32, F32);
buffer_element!(f16, F16);
buffer_element!(bf16, BF16);
buffer_element!(i64, I64);
buffer_element!(i32, I32);
buffer_element!(u32, U32);
buffer_element!(u8, U8);
buffer_element!(i8, I8);
buffer_element!(bool, Bool);

impl CpuBuffer {
    /// A buffer of `len` zero (false) elements.
    ///
    /// # Panics
    /// When the allocation fails; stride itself uses [`CpuBuffer::try_zeros`].
    pub fn zeros(dtype: DType, len: usize) -> CpuBuffer {
        CpuBuffer::try_zeros(dtype, len, "CpuBuffer::zeros", &[len])
            .unwrap_or_else(|e| panic!("{e}"))
    }
    /// A buffer of `len` zero (false) elements, or `Error::OutOfMemory` naming `op` and the
    /// tensor `shape` it is for. As cheap as `vec![0; len]` (fresh zeroed pages).
    pub fn try_zeros(
        dtype: DType,
        len: usize,
        op: &'static str,
        shape: &[usize],
    ) -> crate::Result<CpuBuffer> {
        let b = with_dtype!(dtype, T => T::wrap(crate::alloc::try_zeroed::<T>(len, op, shape, Some(dtype))?));
        crate::cpu::pages::advise_huge_pages(b.as_ptr(), len * dtype.size_in_bytes());
        Ok(b)
    }
    pub fn dtype(&self) -> DType {
        match self {
            CpuBuffer::F64(_) => DType::F64,
            CpuBuffer::F32(_) => DType::F32,
            CpuBuffer::F16(_) => DType::F16,
            CpuBuffer::BF16(_) => DType::BF16,
            CpuBuffer::I64(_) => DType::I64,
            CpuBuffer::I32(_) => DType::I32,
            CpuBuffer::U32(_) => DType::U32,
            CpuBuffer::U8(_) => DType::U8,
            CpuBuffer::I8(_) => DType::I8,
            CpuBuffer::Bool(_) => DType::Bool,
        }
    }
    pub fn len(&self) -> usize {
        with_dtype!(self.dtype(), T => T::slice(self).map_or(0, |s| s.len()))
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Raw base pointer, for kernels that address elements through a layout.
    /// The elements as bytes (native endianness).
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the buffer holds `len` initialised elements without padding
        unsafe {
            std::slice::from_raw_parts(self.as_ptr(), self.len() * self.dtype().size_in_bytes())
        }
    }
    /// The elements as writable bytes; every byte pattern is a valid element except for bool,
    /// whose writers only copy bytes of bool elements.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.len() * self.dtype().size_in_bytes();
        // SAFETY: as above
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), n) }
    }
    pub(crate) fn as_ptr(&self) -> *const u8 {
        with_dtype!(self.dtype(), T => T::slice(self).map_or(std::ptr::null(), |s| s.as_ptr() as *const u8))
    }
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        with_dtype!(self.dtype(), T => T::slice_mut(self).map_or(std::ptr::null_mut(), |s| s.as_mut_ptr() as *mut u8))
    }
}

/// The data of a storage, by device.
#[derive(Debug)]
pub enum StorageData {
    Cpu(CpuBuffer),
    Cuda(crate::cuda::CudaBuffer),
    Wgpu(crate::webgpu::WgpuBuffer),
}

#[derive(Debug)]
pub(crate) struct StorageInner {
    id: u64,
    device: Device,
    dtype: DType,
    len: usize,
    data: RwLock<StorageData>,
    version: AtomicU64,
}

/// A shared, device-resident buffer. Cloning shares it (cheap).
#[derive(Debug, Clone)]
pub struct Storage(Arc<StorageInner>);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

// Host allocation statistics (bytes of live storages, their peak, and how many were made).
static CPU_ALLOCATED: AtomicU64 = AtomicU64::new(0);
static CPU_PEAK: AtomicU64 = AtomicU64::new(0);
static CPU_ALLOCS: AtomicU64 = AtomicU64::new(0);
// For the profiler: bytes ever allocated, and the peak since the profiler last looked.
static CPU_TOTAL: AtomicU64 = AtomicU64::new(0);
static CPU_WINDOW_PEAK: AtomicU64 = AtomicU64::new(0);

/// Bytes ever allocated on `device` (never decreases; the profiler's per-op allocation).
pub(crate) fn allocated_total(device: Device) -> u64 {
    match device {
        Device::Cpu => CPU_TOTAL.load(Ordering::Relaxed),
        Device::Cuda(i) => crate::cuda::device::existing(i).map_or(0, |d| d.allocator().total),
        Device::Wgpu(i) => crate::webgpu::device::existing(i).map_or(0, |g| {
            g.allocator.lock().unwrap_or_else(|e| e.into_inner()).total
        }),
    }
}

/// The most bytes allocated on `device` since the previous call (the profiler's per-op
/// peak); starts the next window at the current allocation.
pub(crate) fn take_window_peak(device: Device) -> u64 {
    match device {
        Device::Cpu => {
            let now = CPU_ALLOCATED.load(Ordering::Relaxed);
            CPU_WINDOW_PEAK.swap(now, Ordering::Relaxed).max(now)
        }
        Device::Cuda(i) => crate::cuda::device::existing(i).map_or(0, |d| {
            let mut a = d.allocator();
            let p = a.window_peak.max(a.allocated);
            a.window_peak = a.allocated;
            p
        }),
        Device::Wgpu(i) => crate::webgpu::device::existing(i).map_or(0, |g| {
            let mut a = g.allocator.lock().unwrap_or_else(|e| e.into_inner());
            let p = a.window_peak.max(a.allocated);
            a.window_peak = a.allocated;
            p
        }),
    }
}

/// Allocation statistics of one device's storages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStats {
    /// Bytes held by live storages now (on CUDA: the allocator's size classes they hold).
    pub allocated_bytes: u64,
    /// The most `allocated_bytes` has been since the process started.
    pub peak_bytes: u64,
    /// Storages allocated since the process started.
    pub allocation_count: u64,
    /// Bytes obtained from the device (CUDA: live blocks plus the allocator's cache; CPU:
    /// equal to `allocated_bytes`).
    pub reserved_bytes: u64,
    /// The largest block in the allocator's cache (0 on the CPU, which has no cache).
    pub largest_free_block: u64,
}

impl std::fmt::Display for MemoryStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(
            f,
            "{:.2} MiB allocated, {:.2} MiB reserved, peak {:.2} MiB, {} allocations, largest free block {:.2} MiB",
            mib(self.allocated_bytes),
            mib(self.reserved_bytes),
            mib(self.peak_bytes),
            self.allocation_count,
            mib(self.largest_free_block)
        )
    }
}

/// Current allocation statistics of `device` (the CPU's are counted by stride's storages,
/// not by the process's allocator). A CUDA device that was never used, or is not present,
/// reports zeros.
///
/// ```
/// use stride_core::{memory_stats, Device, DType, Tensor};
/// let before = memory_stats(Device::Cpu).allocated_bytes;
/// let t = Tensor::zeros([1024], DType::F32, &Device::Cpu)?;
/// assert_eq!(memory_stats(Device::Cpu).allocated_bytes, before + 4096);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn memory_stats(device: Device) -> MemoryStats {
    match device {
        Device::Cpu => {
            let allocated = CPU_ALLOCATED.load(Ordering::Relaxed);
            MemoryStats {
                allocated_bytes: allocated,
                peak_bytes: CPU_PEAK.load(Ordering::Relaxed),
                allocation_count: CPU_ALLOCS.load(Ordering::Relaxed),
                reserved_bytes: allocated,
                largest_free_block: 0,
            }
        }
        Device::Cuda(i) => crate::cuda::memory_stats(i),
        Device::Wgpu(i) => crate::webgpu::memory_stats(i),
    }
}

impl Drop for StorageInner {
    fn drop(&mut self) {
        if self.device == Device::Cpu {
            CPU_ALLOCATED.fetch_sub(
                (self.len * self.dtype.size_in_bytes()) as u64,
                Ordering::Relaxed,
            );
        }
    }
}

impl Storage {
    pub fn from_cpu(buf: CpuBuffer) -> Storage {
        let bytes = (buf.len() * buf.dtype().size_in_bytes()) as u64;
        let now = CPU_ALLOCATED.fetch_add(bytes, Ordering::Relaxed) + bytes;
        CPU_PEAK.fetch_max(now, Ordering::Relaxed);
        CPU_WINDOW_PEAK.fetch_max(now, Ordering::Relaxed);
        CPU_TOTAL.fetch_add(bytes, Ordering::Relaxed);
        CPU_ALLOCS.fetch_add(1, Ordering::Relaxed);
        Storage(Arc::new(StorageInner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            device: Device::Cpu,
            dtype: buf.dtype(),
            len: buf.len(),
            data: RwLock::new(StorageData::Cpu(buf)),
            version: AtomicU64::new(0),
        }))
    }
    /// A storage for a tensor of `shape` on `device`: zero-filled on the CPU, and on CUDA when
    /// `zero` (see [`Tensor::alloc_for_overwrite`](crate::Tensor)). Errors name the op
    /// `alloc` ([`Error::in_op`](crate::Error) renames it): an element count that overflows
    /// is [`Error::Invalid`](crate::Error), a failed allocation [`Error::OutOfMemory`]
    /// naming the shape and dtype.
    pub(crate) fn alloc(
        shape: &[usize],
        dtype: DType,
        device: &Device,
        zero: bool,
    ) -> crate::Result<Storage> {
        let numel = crate::shape::checked_numel("alloc", shape)?;
        crate::backend::contract::backend_for(*device)
            .alloc(*device, dtype, numel, zero)
            .map_err(|e| match e {
                // the allocator knows the elements, not the tensor
                crate::Error::OutOfMemory {
                    op,
                    device,
                    requested,
                    detail,
                    ..
                } => crate::Error::OutOfMemory {
                    op,
                    device,
                    shape: shape.to_vec(),
                    dtype: Some(dtype),
                    requested,
                    detail,
                },
                e => e,
            })
    }
    /// A storage of `len` elements of `dtype` in a CUDA buffer.
    pub(crate) fn from_cuda(buf: crate::cuda::CudaBuffer, dtype: DType, len: usize) -> Storage {
        let device = Device::Cuda(buf.dev.ordinal);
        Storage(Arc::new(StorageInner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            device,
            dtype,
            len,
            data: RwLock::new(StorageData::Cuda(buf)),
            version: AtomicU64::new(0),
        }))
    }
    /// A storage of `len` elements of `dtype` in a wgpu buffer.
    pub(crate) fn from_wgpu(buf: crate::webgpu::WgpuBuffer, dtype: DType, len: usize) -> Storage {
        let device = buf.gpu.device();
        Storage(Arc::new(StorageInner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            device,
            dtype,
            len,
            data: RwLock::new(StorageData::Wgpu(buf)),
            version: AtomicU64::new(0),
        }))
    }
    /// A unique id, used to order locks and to detect aliasing.
    pub fn id(&self) -> u64 {
        self.0.id
    }
    pub fn device(&self) -> Device {
        self.0.device
    }
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.len
    }
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
    pub fn same(&self, other: &Storage) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
    /// The number of in-place writes so far.
    pub fn version(&self) -> u64 {
        self.0.version.load(Ordering::Relaxed)
    }
    pub(crate) fn bump_version(&self) {
        self.0.version.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, StorageData> {
        // A poisoned lock means a panic mid-write elsewhere; the data is still memory-safe.
        self.0.data.read().unwrap_or_else(|e| e.into_inner())
    }
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, StorageData> {
        self.0.data.write().unwrap_or_else(|e| e.into_inner())
    }
}
