//! Deferred device errors on wgpu: checks that need the data (index ranges, integer divisors)
//! run in shaders, in queue order, without the host waiting for their verdict — the CUDA
//! backend's scheme (`cuda/deferred.rs`) with what WGSL has.
//!
//! A checked op queues, before its writing shader:
//! 1. a check shader that writes the smallest bad position into a small per-op buffer (the
//!    *gate*: word 0, [`NONE`] when every value is good);
//! 2. a record shader (one invocation) that copies a bad verdict — the op's check id and the
//!    bad value — into the device's *record* (first failure wins) and marks the id done.
//!
//! The writing shader reads the gate and writes nothing when it is set, so a failing op
//! leaves its destination as it was. wgpu has no host-mapped device memory, so the host
//! learns the verdicts at its next wait: a read back appends the record to the words it
//! copies (no extra wait), [`crate::webgpu::synchronize`] reads it. A failure becomes
//! [`Error::DeviceCheck`], returned by that read and by every later one until
//! [`crate::webgpu::take_error`] takes it. The device stays usable.
//!
//! With [`crate::set_sync_checks`] (or inside anomaly mode) a check reads its gate at once
//! and the op returns its error itself, as on the CPU.

use super::device::Gpu;
use crate::backend::common::deferred::{device_check, Failure};
use crate::debug::CallSite;
use crate::{Error, Result};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Gate word 0 when no value failed.
pub(crate) const NONE: u32 = u32::MAX;

/// Words of the record: the check id of the first failure (0: none), its bad value (low and
/// high word), and the id of the last check the device has run.
pub(crate) const RECORD_WORDS: usize = 4;

/// The record shader's body (after its bindings: `gate`, `rec`, and the op's `ix` load of
/// the checked value at a logical position, `ix_at`): one invocation, in queue order after the check.
/// It also leaves the bad value in the gate (words 1 and 2) for a check the host waits for,
/// which has id 0 and does not touch the record.
pub(crate) const RECORD_MAIN: &str = "
@compute @workgroup_size(1)
fn main() {
    let p = gate[0];
    let id = geo[arrayLength(&geo) - 1u];
    if (p != 0xffffffffu) {
        let v = ix(ix_at(p));
        gate[1] = v.x;
        gate[2] = v.y;
        if (id != 0u && rec[0] == 0u) {
            rec[1] = v.x;
            rec[2] = v.y;
            rec[0] = id;
        }
    }
    if (id != 0u) {
        rec[3] = id;
    }
}
";

struct Pending {
    id: u32,
    failure: Failure,
    site: CallSite,
}

#[derive(Default)]
struct State {
    next_id: u32,
    pending: VecDeque<Pending>,
    sticky: Option<Error>,
}

/// One device's record of deferred verdicts and the checks queued on it.
pub(crate) struct Deferred {
    record: wgpu::Buffer,
    state: Mutex<State>,
}

impl Deferred {
    pub(crate) fn new(device: &wgpu::Device) -> Deferred {
        let record = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("device-side check record"),
            size: (RECORD_WORDS * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            // wgpu zeroes new buffers: no failure recorded
            mapped_at_creation: false,
        });
        Deferred {
            record,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The record buffer (bound by record shaders, copied by reads).
    pub(crate) fn record(&self) -> &wgpu::Buffer {
        &self.record
    }

    /// A new check's id; its failure becomes `failure`'s error at the next read. Ids start
    /// at 1 (0 means "no failure") and wrap after 2^32 - 1 checks.
    pub(crate) fn register(&self, failure: Failure) -> u32 {
        let site = CallSite::capture();
        let mut s = self.lock();
        s.next_id = s.next_id.checked_add(1).unwrap_or(1);
        let id = s.next_id;
        s.pending.push_back(Pending { id, failure, site });
        id
    }

    /// Whether a read should bring the record back: checks are queued and unread.
    pub(crate) fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// The record's words as a finished wait read them: a failure becomes the sticky error,
    /// finished checks are forgotten.
    pub(crate) fn settle(&self, gpu: &Gpu, words: [u32; RECORD_WORDS]) {
        let mut s = self.lock();
        let (failed, done) = (words[0], words[3]);
        if failed != 0 && s.sticky.is_none() {
            let value = ((words[2] as u64) << 32 | words[1] as u64) as i64;
            let err = match s.pending.iter().find(|p| p.id == failed) {
                Some(p) => device_check(
                    gpu.device(),
                    (p.failure.cause)(value),
                    &p.failure.operands,
                    &p.site,
                ),
                None => Error::invalid(
                    "device-side check",
                    format!(
                        "{}: a device-side check (id {failed}) failed, but its description is \
                         gone (a stride bug; please report)",
                        gpu.device()
                    ),
                ),
            };
            s.sticky = Some(err);
        }
        // the device runs checks in id order: everything up to `done` is finished
        if let Some(k) = s.pending.iter().position(|p| p.id == done) {
            s.pending.drain(..=k);
        }
    }

    /// The sticky error, if a check has failed.
    pub(crate) fn sticky(&self) -> Result<()> {
        match &self.lock().sticky {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Takes the sticky error (the caller waited for the device and settled the record)
    /// and clears the record so that later checks report again.
    pub(crate) fn take(&self, gpu: &Gpu) -> Option<Error> {
        let mut s = self.lock();
        let e = s.sticky.take();
        gpu.queue
            .write_buffer(&self.record, 0, &[0u8; RECORD_WORDS * 4]);
        e
    }
}
