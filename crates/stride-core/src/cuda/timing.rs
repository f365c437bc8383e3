//! Device-side time, measured with CUDA events on the device's stream: what benchmarks (and
//! the profiler) report for GPU work, free of host overhead and of the time the host spends
//! queueing. Each measurement waits for the device once (counted in [`super::sync_count`]).

use super::device;
use crate::Result;
use cudarc::driver::sys::CUevent_flags;

/// Runs `f` (which queues work on CUDA device `ordinal`) between two events and returns its
/// result with the device time between them, in seconds.
///
/// ```
/// use stride_core::{cuda, DType, Device, Tensor};
/// if cuda::is_available() {
///     let x = Tensor::ones([1 << 20], DType::F32, &Device::cuda(0)?)?;
///     let (y, seconds) = cuda::time_on_device(0, || x.add(&x))?;
///     assert!(seconds > 0.0 && y.shape() == x.shape());
/// }
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn time_on_device<T>(ordinal: usize, f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let dev = device::get(ordinal)?;
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = dev
        .stream
        .record_event(flags)
        .map_err(|e| dev.err("time_on_device: recording the start event", e))?;
    let out = f()?;
    let end = dev
        .stream
        .record_event(flags)
        .map_err(|e| dev.err("time_on_device: recording the end event", e))?;
    dev.synchronize("time_on_device")?;
    let ms = start
        .elapsed_ms(&end)
        .map_err(|e| dev.err("time_on_device: reading the events", e))?;
    Ok((out, ms as f64 * 1e-3))
}

/// The device's own copy bandwidth: `cuMemcpyDtoDAsync` of `bytes` between two buffers, best
/// of `reps` after a warm-up, in bytes per second counting the bytes read and written
/// (2 × `bytes` per copy). The floor elementwise benchmarks are compared with.
pub fn memcpy_bandwidth(ordinal: usize, bytes: usize, reps: usize) -> Result<f64> {
    let dev = device::get(ordinal)?;
    let a = super::CudaBuffer::new(&dev, bytes, true)?;
    let b = super::CudaBuffer::new(&dev, bytes, true)?;
    let copy = || -> Result<()> {
        dev.bind()?;
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(b.ptr, a.ptr, bytes, dev.stream.cu_stream())
        }
        .map_err(|e| dev.err("memcpy_bandwidth: cuMemcpyDtoDAsync", e))
    };
    copy()?;
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let ((), s) = time_on_device(ordinal, copy)?;
        best = best.min(s);
    }
    Ok(2.0 * bytes as f64 / best)
}

/// A CUDA event recorded on a device's stream, for the profiler (cheap to clone).
#[derive(Clone)]
pub(crate) struct DeviceEvent(std::sync::Arc<cudarc::driver::CudaEvent>);

impl DeviceEvent {
    /// An event recorded now on `device`'s stream; `None` on the CPU or if recording fails
    /// (the profiler then reports host time only).
    pub(crate) fn record(device: crate::Device) -> Option<DeviceEvent> {
        let crate::Device::Cuda(i) = device else {
            return None;
        };
        let dev = device::existing(i)?;
        let e = dev
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .ok()?;
        Some(DeviceEvent(std::sync::Arc::new(e)))
    }
    /// An event recorded now on another `stream` of a device (a communication stream).
    pub(crate) fn record_on(stream: &cudarc::driver::CudaStream) -> Option<DeviceEvent> {
        let e = stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .ok()?;
        Some(DeviceEvent(std::sync::Arc::new(e)))
    }
    /// Waits for the event (for events on streams that a device synchronisation does not
    /// cover).
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.0.synchronize().map_err(|e| crate::Error::Cuda {
            device: crate::Device::Cpu,
            msg: format!("profiler: waiting for an event: {e}"),
        })
    }
    /// Seconds from this event to `later` (both complete: the caller synchronised).
    pub(crate) fn elapsed_s(&self, later: &DeviceEvent) -> Result<f64> {
        let ms = self
            .0
            .elapsed_ms(&later.0)
            .map_err(|e| crate::Error::Cuda {
                device: crate::Device::Cpu,
                msg: format!("profiler: reading event times: {e}"),
            })?;
        Ok(ms as f64 * 1e-3)
    }
}
