//! One CUDA device's state — context, the one stream all of stride's work on it is queued on,
//! the caching allocator, loaded kernels and counters — and the process-wide registry that
//! creates it on first use.

use super::alloc::Allocator;
use crate::{Device, Error, Result};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The state of one GPU.
pub(crate) struct CudaDevice {
    pub ordinal: usize,
    pub ctx: Arc<CudaContext>,
    /// Every kernel, copy and memset of stride on this device goes to this stream, in order;
    /// so a block freed to the allocator's cache may be reused at once by later work.
    pub stream: Arc<CudaStream>,
    /// Compute capability (major, minor): kernels are compiled for exactly this.
    pub arch: (i32, i32),
    pub name: String,
    pub sm_count: u32,
    pub alloc: Mutex<Allocator>,
    /// Loaded modules by name (`unary_f32`, …) and their functions by (module, kernel).
    modules: Mutex<HashMap<String, Arc<CudaModule>>>,
    functions: Mutex<HashMap<(String, &'static str), CudaFunction>>,
    /// The cuBLAS handle, created on the first matrix product.
    pub blas: Mutex<Option<super::matmul::Blas>>,
    /// Host waits on this device (see [`crate::cuda::sync_count`]).
    pub syncs: AtomicU64,
    pub launches: AtomicU64,
    /// Device-side checks whose verdict the host has not seen (see `deferred.rs`).
    pub deferred: super::deferred::Deferred,
    /// [`TICKETS`] zeroed u32 counters for kernels whose last block to finish does the final
    /// step (the split reductions, kernels/reduce.cu); each launch leaves them at zero again.
    tickets: OnceLock<u64>,
}

/// How many ticket counters a device keeps (see [`CudaDevice::tickets`]).
pub(crate) const TICKETS: usize = 4096;

// SAFETY: the raw CUDA handles inside are used only through the driver API, which is thread
// safe; all mutable state is behind mutexes or atomics.
unsafe impl Send for CudaDevice {}
unsafe impl Sync for CudaDevice {}

const MAX_DEVICES: usize = 64;
static DEVICES: OnceLock<Vec<OnceLock<Arc<CudaDevice>>>> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());

fn unavailable(ordinal: usize, why: impl Into<String>) -> Error {
    Error::DeviceUnavailable {
        device: Device::Cuda(ordinal),
        why: why.into(),
    }
}

/// Whether the CUDA driver library can be loaded on this machine.
pub(crate) fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

/// How many CUDA devices this machine has (0 without a driver).
pub(crate) fn device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| CudaContext::device_count().map_or(0, |n| n.max(0) as usize))
}

/// The device `ordinal` if it has been created already (never creates one).
pub(crate) fn existing(ordinal: usize) -> Option<Arc<CudaDevice>> {
    DEVICES.get()?.get(ordinal)?.get().cloned()
}

/// The device `ordinal`, created (context, stream) on first use.
pub(crate) fn get(ordinal: usize) -> Result<Arc<CudaDevice>> {
    let slots = DEVICES.get_or_init(|| (0..MAX_DEVICES).map(|_| OnceLock::new()).collect());
    if let Some(d) = slots.get(ordinal).and_then(|s| s.get()) {
        return Ok(d.clone());
    }
    if !driver_present() {
        return Err(unavailable(
            ordinal,
            "no CUDA driver (libcuda.so) was found on this machine; use Device::Cpu",
        ));
    }
    let n = device_count();
    if ordinal >= n || ordinal >= MAX_DEVICES {
        return Err(unavailable(
            ordinal,
            format!("this machine has {n} CUDA device(s) (valid ordinals: 0..{n})"),
        ));
    }
    let _g = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = slots[ordinal].get() {
        return Ok(d.clone());
    }
    let d = Arc::new(create(ordinal)?);
    let _ = slots[ordinal].set(d.clone());
    Ok(d)
}

fn create(ordinal: usize) -> Result<CudaDevice> {
    let fail = |what: &str, e: cudarc::driver::DriverError| {
        unavailable(ordinal, format!("{what} failed: {e}"))
    };
    let ctx = CudaContext::new(ordinal).map_err(|e| fail("creating the CUDA context", e))?;
    // stride manages its own buffers with raw pointers on one stream: cudarc's per-slice
    // event tracking would only add work.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx
        .new_stream()
        .map_err(|e| fail("creating a CUDA stream", e))?;
    let arch = ctx
        .compute_capability()
        .map_err(|e| fail("reading the compute capability", e))?;
    ctx.bind_to_thread()
        .map_err(|e| fail("binding the CUDA context", e))?;
    let deferred = super::deferred::Deferred::new().map_err(|e| {
        fail(
            "allocating the device-side error record (pinned host memory)",
            e,
        )
    })?;
    let name = ctx.name().unwrap_or_else(|_| "unknown CUDA device".into());
    let sm_count = ctx
        .attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
        .map_err(|e| fail("reading the SM count", e))? as u32;
    Ok(CudaDevice {
        ordinal,
        ctx,
        stream,
        arch,
        name,
        sm_count,
        alloc: Mutex::new(Allocator::default()),
        modules: Mutex::new(HashMap::new()),
        functions: Mutex::new(HashMap::new()),
        blas: Mutex::new(None),
        syncs: AtomicU64::new(0),
        launches: AtomicU64::new(0),
        deferred,
        tickets: OnceLock::new(),
    })
}

impl CudaDevice {
    pub fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }
    /// Makes this device's context current on the calling thread (needed before raw driver
    /// calls; cheap when it already is).
    pub fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.err("binding the context", e))
    }
    /// An error from the driver, naming the device and what stride was doing.
    pub fn err(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Cuda {
            device: self.device(),
            msg: format!("{what}: {e}"),
        }
    }
    /// The device pointer of the [`TICKETS`] ticket counters, allocated and zeroed (on the
    /// stream, before any kernel that uses them) on first use; they live as long as the device.
    pub fn tickets(&self) -> Result<u64> {
        if let Some(&p) = self.tickets.get() {
            return Ok(p);
        }
        static INIT: Mutex<()> = Mutex::new(());
        let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&p) = self.tickets.get() {
            return Ok(p);
        }
        // stream-ordered and outside the caching allocator (never freed, never counted)
        let bytes = TICKETS * 4;
        self.bind()?;
        let s = self.stream.cu_stream();
        let p = unsafe { cudarc::driver::result::malloc_async(s, bytes) }
            .map_err(|e| self.err("allocating the ticket counters", e))?;
        unsafe { cudarc::driver::result::memset_d8_async(p, 0, bytes, s) }
            .map_err(|e| self.err("zeroing the ticket counters", e))?;
        let _ = self.tickets.set(p);
        Ok(p)
    }
    pub fn allocator(&self) -> MutexGuard<'_, Allocator> {
        self.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Waits for all queued work; counted as a host synchronisation. Returns the error of a
    /// failed device-side check (`deferred.rs`) if one is pending: what was read is not
    /// to be trusted.
    pub fn synchronize(&self, why: &'static str) -> Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        crate::cuda::note_sync(self.device(), why)?;
        // with NCCL communicators alive, the wait ends with the error of one the watchdog
        // aborted (its stuck collective would keep the stream from finishing); their
        // results, and everything after them, are not to be trusted
        crate::distributed::wait_for_stream(&self.stream)?
            .map_err(|e| self.err(&format!("{why}: waiting for the GPU"), e))?;
        self.deferred.after_wait(self)
    }
    /// The kernel `kernel` (symbol `k_<kernel>`) of module `module`, compiling (or loading from the disk cache) the
    /// module from `source()` on first use.
    pub fn function(
        &self,
        module: &str,
        kernel: &'static str,
        source: impl FnOnce() -> String,
    ) -> Result<CudaFunction> {
        let key = (module.to_string(), kernel);
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(f.clone());
        }
        let loaded = self
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(module)
            .cloned();
        let m = match loaded {
            Some(m) => m,
            None => {
                // compiled without the lock, so threads compile different modules at once (two
                // threads racing for one module both compile it; the first to finish is kept)
                let m = super::compile::load_module(self, module, &source())?;
                self.modules
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(module.to_string())
                    .or_insert(m)
                    .clone()
            }
        };
        // kernels are named k_<name> so that they never collide with a CUDA math function
        let f = m.load_function(&format!("k_{kernel}")).map_err(|e| {
            self.err(
                &format!("loading kernel {kernel} of module {module} (a stride bug)"),
                e,
            )
        })?;
        self.functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, f.clone());
        Ok(f)
    }
}
