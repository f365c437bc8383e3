//! Deferred device errors: checks that need the data (index bounds, integer division by zero)
//! run on the GPU, in stream order, without the host waiting for their verdict.
//!
//! A checked op queues, before its writing kernel:
//! 1. a check kernel that writes its verdict into a small per-op buffer (the *gate*: word 0 is
//!    non-zero when a value is bad, word 1 the first bad value);
//! 2. the record kernel of this module: one thread that copies a bad verdict into the
//!    device's *record* (first error wins) under the op's check id, and marks the id done.
//!
//! The writing kernel takes the gate and writes nothing when it is set, so a failing op
//! leaves its destination as it was. The record lives in pinned host memory mapped into the
//! device's address space: the host reads it without a CUDA call, so finished checks are
//! pruned as work completes and a failure is noticed at the next host read of the device
//! ([`CudaDevice::synchronize`], transfers), which returns [`Error::DeviceCheck`] — and so
//! does every later read until [`take_error`] takes it. The device stays usable: nothing
//! traps, nothing poisons the context.
//!
//! With [`crate::set_sync_checks`] (or inside [`crate::debug::detect_anomaly`]) checks wait
//! for their verdict and return the error at the op itself, as the CPU does.

use super::device::CudaDevice;
use super::launch::{arg, launch_cfg};
use crate::debug::CallSite;
use crate::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Words of the record: the check id of the first failure (0: none), its bad value, the
/// gate's word 0, and the id of the last check the device has run.
const RECORD_WORDS: usize = 4;

pub(crate) const RECORD_SRC: &str = r#"
typedef unsigned long long u64;
// One thread, in stream order after the op's check: no two record kernels of a device ever
// run at once, so plain stores suffice; the fences order them for the host's reads.
extern "C" __global__ void k_record(const u64* gate, volatile u64* rec, const u64 id) {
    if (gate[0] != 0 && rec[0] == 0) {
        rec[1] = gate[1];
        rec[2] = gate[0];
        __threadfence_system();
        rec[0] = id;
    }
    __threadfence_system();
    rec[3] = id;
}
"#;

pub(crate) use crate::backend::common::deferred::{device_check, Failure};

struct Pending {
    id: u64,
    failure: Failure,
    site: CallSite,
}

#[derive(Default)]
struct State {
    next_id: u64,
    pending: VecDeque<Pending>,
    sticky: Option<Error>,
    /// The checks captured into live CUDA graphs, by graph: every replay runs them again
    /// under the ids they were captured with.
    graphs: HashMap<u64, Vec<Pending>>,
}

/// One device's deferred-error record and the checks queued on it.
pub(crate) struct Deferred {
    /// The record: host address (pinned, mapped) and its device address.
    host: *mut u64,
    dptr: u64,
    state: Mutex<State>,
}

// SAFETY: `host` is pinned memory owned by this struct for the process's life; the host only
// reads and writes it through volatile accesses under `state`'s lock.
unsafe impl Send for Deferred {}
unsafe impl Sync for Deferred {}

impl Deferred {
    /// The record of a device whose context is current on this thread.
    pub(crate) fn new() -> std::result::Result<Deferred, cudarc::driver::DriverError> {
        use cudarc::driver::sys;
        let bytes = RECORD_WORDS * 8;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        let host = unsafe { cudarc::driver::result::malloc_host(bytes, flags)? } as *mut u64;
        for k in 0..RECORD_WORDS {
            unsafe { host.add(k).write_volatile(0) };
        }
        let mut dptr: sys::CUdeviceptr = 0;
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dptr, host as *mut _, 0) }.result()?;
        Ok(Deferred {
            host,
            dptr,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn word(&self, k: usize) -> u64 {
        unsafe { self.host.add(k).read_volatile() }
    }

    /// Queues the record kernel for the verdict in `gate` (see the module docs): a failure
    /// becomes `failure`'s error at the next read of the device.
    pub(crate) fn register(
        &self,
        dev: &CudaDevice,
        op: &'static str,
        gate: u64,
        failure: Failure,
    ) -> Result<()> {
        let site = CallSite::capture();
        let id = {
            let mut s = self.lock();
            self.poll(dev, &mut s);
            s.next_id += 1;
            let id = s.next_id;
            s.pending.push_back(Pending { id, failure, site });
            id
        };
        let f = dev.function("deferred_record", "record", || RECORD_SRC.to_string())?;
        let mut args = [arg(&gate), arg(&self.dptr), arg(&id)];
        unsafe { launch_cfg(dev, &f, op, (1, 1, 1), (1, 1, 1), 0, &mut args) }
    }

    /// Registers a check whose op records its own verdict: one of the op's kernels, queued
    /// after the verdict is written, does the record kernel's work (`RECORD_SRC`'s body, one
    /// thread) with the returned record address and check id — one launch fewer.
    pub(crate) fn register_inline(&self, dev: &CudaDevice, failure: Failure) -> (u64, u64) {
        let site = CallSite::capture();
        let mut s = self.lock();
        self.poll(dev, &mut s);
        s.next_id += 1;
        let id = s.next_id;
        s.pending.push_back(Pending { id, failure, site });
        (self.dptr, id)
    }

    /// Reads the record: a failure becomes the sticky error; checks the device has finished
    /// without failing are forgotten. Never waits.
    fn poll(&self, dev: &CudaDevice, s: &mut State) {
        let done = self.word(3);
        fence(Ordering::Acquire);
        let failed = self.word(0);
        if failed != 0 && s.sticky.is_none() {
            fence(Ordering::Acquire);
            let value = self.word(1) as i64;
            let found = s
                .pending
                .iter()
                .find(|p| p.id == failed)
                .or_else(|| s.graphs.values().flatten().find(|p| p.id == failed));
            let err = match found {
                Some(p) => {
                    device_check(dev.device(), (p.failure.cause)(value), &p.failure.operands, &p.site)
                }
                None => Error::Cuda {
                    device: dev.device(),
                    msg: format!("a device-side check (id {failed}) failed, but its description is gone (a stride bug; please report)"),
                },
            };
            s.sticky = Some(err);
        }
        while s.pending.front().is_some_and(|p| p.id <= done) {
            s.pending.pop_front();
        }
    }

    /// After a host wait: the sticky error, if a check has failed.
    pub(crate) fn after_wait(&self, dev: &CudaDevice) -> Result<()> {
        let mut s = self.lock();
        self.poll(dev, &mut s);
        match &s.sticky {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Takes the sticky error (the device must be idle: the caller synchronised), and clears
    /// the record so that later checks report again.
    fn take(&self, dev: &CudaDevice) -> Option<Error> {
        let mut s = self.lock();
        self.poll(dev, &mut s);
        let e = s.sticky.take();
        for k in 0..3 {
            unsafe { self.host.add(k).write_volatile(0) };
        }
        fence(Ordering::Release);
        e
    }

    /// The id of the last check registered so far (a capture's checks come after it).
    pub(crate) fn last_id(&self) -> u64 {
        self.lock().next_id
    }

    /// Keeps the descriptions of the checks registered after `since` (those a graph
    /// captured) for as long as graph `graph` lives: its replays run them again. The device
    /// has not run them yet (a capture executes nothing), so they are all still pending.
    pub(crate) fn keep_for_graph(&self, since: u64, graph: u64) {
        let mut s = self.lock();
        let (kept, rest): (VecDeque<Pending>, VecDeque<Pending>) = std::mem::take(&mut s.pending)
            .into_iter()
            .partition(|p| p.id > since);
        s.pending = rest;
        s.graphs.insert(graph, kept.into());
    }

    /// Graph `graph` is gone: its checks will not run again.
    pub(crate) fn forget_graph(&self, graph: u64) {
        self.lock().graphs.remove(&graph);
    }

    /// Checks queued and not yet known to be finished (for tests and diagnostics).
    pub(crate) fn pending(&self) -> usize {
        self.lock().pending.len()
    }
}

static SYNC_CHECKS: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Live [`crate::SyncChecksHere`] guards of this thread.
    static HERE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether data-dependent checks wait for their verdict and fail at the op itself (see
/// [`crate::set_sync_checks`]): on while the switch is, on this thread while a
/// [`crate::sync_checks_here`] guard lives, and inside anomaly mode.
pub(crate) fn sync_checks() -> bool {
    SYNC_CHECKS.load(Ordering::Relaxed)
        || HERE.with(|c| c.get() > 0)
        || crate::debug::anomaly_active()
}

pub(crate) fn hold_here(on: bool) {
    HERE.with(|c| {
        c.set(if on {
            c.get() + 1
        } else {
            c.get().saturating_sub(1)
        })
    });
}

pub(crate) fn set_sync_checks(on: bool) {
    SYNC_CHECKS.store(on, Ordering::Relaxed);
}

/// Waits for CUDA device `ordinal` and returns the error of a failed device-side check, if
/// any (and keeps it: every later read fails the same way until [`take_error`]).
pub(crate) fn check_errors(dev: &Arc<CudaDevice>) -> Result<()> {
    dev.synchronize("check_errors")
}

/// Waits for the device, then takes (returns and clears) the error of a failed device-side
/// check: after this the device's reads return data again.
pub(crate) fn take_error(dev: &Arc<CudaDevice>) -> Result<Option<Error>> {
    match dev.synchronize("take_error") {
        Ok(()) | Err(Error::DeviceCheck { .. }) => Ok(dev.deferred.take(dev)),
        Err(e) => Err(e),
    }
}
