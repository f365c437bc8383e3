//! Where the debug tools meet the ops: every backend primitive runs through [`primitive`],
//! every host synchronisation is announced through [`host_sync`], and every backward node
//! runs inside [`in_backward`]. With no debug guard alive anywhere each is one relaxed atomic
//! load and a branch.

use super::site::CallSite;
use super::state::{self, BackwardCtx};
use super::{anomaly, cross_check, fault, profiler};
use crate::backend::View;
use crate::{Device, Result};

/// How the cross-check replays an op on the reference device.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Replay {
    /// Float operands in the reference dtype (f64 by default).
    Widen,
    /// Every operand in its own dtype (random fills: a dtype picks its own mapping of the
    /// random stream to values).
    SameDtype,
}

/// Runs the primitive `name` on `inputs` → `outputs` through `run`, which dispatches on the
/// views' device (the cross-check calls it again with the reference device's views). Outputs
/// may be read too (in-place forms, scatters), so their prior contents are part of a replay.
#[inline]
pub(crate) fn primitive(
    name: &'static str,
    replay: Replay,
    inputs: &[View],
    outputs: &[View],
    run: impl Fn(&[View], &[View]) -> Result<()>,
) -> Result<()> {
    if !state::any_active() {
        return run(inputs, outputs);
    }
    hooked(name, replay, inputs, outputs, &run)
}

#[inline(never)]
fn hooked(
    name: &'static str,
    replay: Replay,
    inputs: &[View],
    outputs: &[View],
    run: &dyn Fn(&[View], &[View]) -> Result<()>,
) -> Result<()> {
    let on = state::active_here();
    if on.is_empty() {
        return run(inputs, outputs);
    }
    let site = (on.anomaly.is_some() || on.cross.is_some()).then(CallSite::capture);
    let before_flags = match on.anomaly {
        Some(_) => Some(anomaly::input_flags(inputs)?),
        None => None,
    };
    let snapshot = match &on.cross {
        Some(c) => Some(cross_check::Snapshot::take(
            &c.borrow(),
            inputs,
            outputs,
            replay,
        )?),
        None => None,
    };
    let device = outputs
        .first()
        .or(inputs.first())
        .map_or(Device::Cpu, |v| v.storage.device());
    let timers = profiler::start_all(&on.profilers, device);
    let result = match on.faults.iter().find(|f| f.applies(name, outputs)) {
        Some(f) => fault::run_faulty(f, inputs, outputs, run),
        None => run(inputs, outputs),
    };
    profiler::finish_all(timers, name, inputs, outputs);
    result?;
    if let (Some(snap), Some(c)) = (snapshot, &on.cross) {
        cross_check::compare(c, name, snap, inputs, outputs, run, site.as_ref())?;
    }
    if let (Some(cfg), Some(flags)) = (on.anomaly, before_flags) {
        anomaly::check(&cfg, name, inputs, outputs, flags, site.as_ref())?;
    }
    Ok(())
}

/// A primitive that returns a value to the host instead of writing an output (counts,
/// extrema): profiled, nothing else.
#[inline]
pub(crate) fn primitive_value<T>(
    name: &'static str,
    inputs: &[View],
    run: impl FnOnce() -> Result<T>,
) -> Result<T> {
    if !state::any_active() {
        return run();
    }
    let on = state::active_here();
    let device = inputs.first().map_or(Device::Cpu, |v| v.storage.device());
    let timers = profiler::start_all(&on.profilers, device);
    let r = run();
    profiler::finish_all(timers, name, inputs, &[]);
    r
}

/// Marks the op running now as one that makes the host wait for `device`'s data (`why`:
/// what it reads). Announced on every device alike — a CPU run reports exactly the waits a
/// GPU run of the same program would have — and an error inside a sync guard. Holds the
/// announcement until dropped, so the backend's own wait inside it is not reported twice.
#[inline]
pub(crate) fn host_sync(device: Device, why: &'static str) -> Result<Announced> {
    if !state::any_active() {
        return Ok(Announced(false));
    }
    announce(device, why)
}

#[inline(never)]
fn announce(device: Device, why: &'static str) -> Result<Announced> {
    let nested = state::with(|s| s.announced > 0 || s.quiet > 0);
    if nested {
        return Ok(Announced(false));
    }
    report_sync(device, why)?;
    state::with(|s| s.announced += 1);
    Ok(Announced(true))
}

/// Called by the CUDA backend at each real wait: reported unless the op announced it.
pub(crate) fn backend_sync(device: Device, why: &'static str) -> Result<()> {
    if !state::any_active() {
        return Ok(());
    }
    let silent = state::with(|s| s.announced > 0 || s.quiet > 0);
    if silent {
        return Ok(());
    }
    report_sync(device, why)
}

fn report_sync(device: Device, why: &'static str) -> Result<()> {
    let on = state::active_here();
    if on.profilers.is_empty() && !on.sync_guard {
        return Ok(());
    }
    let site = CallSite::capture();
    for p in &on.profilers {
        p.borrow_mut().note_sync(device, why, site.clone());
    }
    if on.sync_guard {
        return Err(crate::Error::HostSync {
            device,
            report: format!(
                "{why} makes the host wait for {device}; {}",
                super::describe_site(Some(&site))
            ),
        });
    }
    Ok(())
}

/// The announcement of a host synchronisation, held for the op's duration.
pub(crate) struct Announced(bool);

impl Drop for Announced {
    fn drop(&mut self) {
        if self.0 {
            state::with(|s| s.announced -= 1);
        }
    }
}

/// Runs backward node `node` (whose forward ran at `forward_site`) with reports from its ops
/// naming it, and a profiler range around it.
pub(crate) fn in_backward<R>(
    node: &'static str,
    forward_site: Option<&CallSite>,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
    if !state::any_active() {
        return f();
    }
    state::with(|s| {
        s.backward.push(BackwardCtx {
            node,
            forward_site: forward_site.cloned(),
        })
    });
    let range = profiler::open_range(node);
    let r = f();
    profiler::range_end(range);
    state::with(|s| s.backward.pop());
    r
}

/// A call site for a new autograd node, captured only in anomaly mode.
pub(crate) fn forward_site() -> Option<CallSite> {
    if !state::any_active() {
        return None;
    }
    let on = state::with(|s| !s.anomaly.is_empty() && s.quiet == 0);
    on.then(CallSite::capture)
}
