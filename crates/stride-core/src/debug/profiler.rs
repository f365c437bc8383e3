//! The profiler: what each op cost, on the host and on the device, what it launched and
//! allocated, and every time the host waited for a device.

use super::site::CallSite;
use super::state;
use crate::backend::View;
use crate::cuda::timing::DeviceEvent;
use crate::{Device, Result};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::{Duration, Instant};

struct RawEvent {
    name: String,
    kind: &'static str,
    device: Device,
    start: Duration,
    host: Duration,
    events: Option<(DeviceEvent, DeviceEvent)>,
    launches: u64,
    bytes_allocated: u64,
    peak_bytes: u64,
    operands: String,
}

struct RawSync {
    device: Device,
    why: &'static str,
    site: CallSite,
    at: Duration,
}

pub(crate) struct Recorder {
    t0: Instant,
    events: Vec<RawEvent>,
    syncs: Vec<RawSync>,
    /// Bytes allocated so far on each device when the previous op finished.
    allocated_total: HashMap<Device, u64>,
}

impl Recorder {
    pub(crate) fn note_sync(&mut self, device: Device, why: &'static str, site: CallSite) {
        let at = self.t0.elapsed();
        self.syncs.push(RawSync {
            device,
            why,
            site,
            at,
        });
    }
}

/// Records ops on this thread until [`Profiler::stop`] (see the module docs of
/// [`crate::debug`]). Nested profilers each see everything.
///
/// ```
/// use stride_core::{debug, DType, Device, Tensor};
/// let x = Tensor::ones([256, 256], DType::F32, &Device::Cpu)?;
/// let prof = debug::Profiler::start();
/// let y = x.matmul(&x)?.relu()?;
/// let s = y.sum()?.item::<f32>()?;
/// let report = prof.stop()?;
/// assert_eq!(report.op("matmul").unwrap().calls, 1);
/// assert_eq!(report.syncs.len(), 1); // item
/// println!("{report}"); // the table, slowest first
/// let json = report.chrome_trace(); // open in https://ui.perfetto.dev
/// assert!(json.contains("\"traceEvents\""));
/// # Ok::<(), stride_core::Error>(())
/// ```
#[must_use = "the profiler records only while it lives: bind it and call stop()"]
pub struct Profiler {
    id: u64,
    rec: Rc<RefCell<Recorder>>,
    _thread: PhantomData<*const ()>,
}

fn devices_in_use() -> Vec<Device> {
    let mut v = vec![Device::Cpu];
    for i in 0..crate::cuda::device_count() {
        if crate::cuda::device::existing(i).is_some() {
            v.push(Device::Cuda(i));
        }
    }
    v
}

impl Profiler {
    /// Starts recording ops, ranges and host synchronisations on this thread.
    pub fn start() -> Profiler {
        let id = state::register();
        let allocated_total = devices_in_use()
            .into_iter()
            .map(|d| (d, crate::storage::allocated_total(d)))
            .collect();
        let rec = Rc::new(RefCell::new(Recorder {
            t0: Instant::now(),
            events: vec![],
            syncs: vec![],
            allocated_total,
        }));
        state::with(|s| s.profilers.push((id, rec.clone())));
        Profiler {
            id,
            rec,
            _thread: PhantomData,
        }
    }

    /// Stops recording and builds the report. Waits once for each GPU that ran profiled work
    /// (to read its event times); that wait is not part of the report.
    pub fn stop(self) -> Result<ProfileReport> {
        state::release(self.id);
        let _q = state::quiet();
        let rec = self.rec.borrow();
        let mut waited = vec![];
        let mut base: HashMap<Device, (usize, f64)> = HashMap::new();
        let mut events = Vec::with_capacity(rec.events.len());
        for (k, e) in rec.events.iter().enumerate() {
            let (device_s, device_start_s) = match &e.events {
                Some((a, b)) => {
                    if e.kind == "comm" {
                        // a communication stream: a device synchronisation need not cover it
                        b.synchronize()?;
                    }
                    if !waited.contains(&e.device) {
                        if let Device::Cuda(i) = e.device {
                            crate::cuda::synchronize(i)?;
                        }
                        waited.push(e.device);
                    }
                    let (bk, bt) = *base.entry(e.device).or_insert((k, e.start.as_secs_f64()));
                    let since = match &rec.events[bk].events {
                        Some((b0, _)) => b0.elapsed_s(a)?,
                        None => 0.0,
                    };
                    (Some(a.elapsed_s(b)?), Some(bt + since))
                }
                None => (None, None),
            };
            events.push(OpEvent {
                name: e.name.clone(),
                kind: e.kind,
                device: e.device,
                start_s: e.start.as_secs_f64(),
                host_s: e.host.as_secs_f64(),
                device_s,
                device_start_s,
                launches: e.launches,
                bytes_allocated: e.bytes_allocated,
                peak_bytes: e.peak_bytes,
                operands: e.operands.clone(),
            });
        }
        let syncs = rec
            .syncs
            .iter()
            .map(|s| SyncEvent {
                device: s.device,
                why: s.why.to_string(),
                site: s.site.describe(),
                at_s: s.at.as_secs_f64(),
            })
            .collect();
        Ok(ProfileReport {
            ops: summarize(&events),
            events,
            syncs,
            wall_s: rec.t0.elapsed().as_secs_f64(),
        })
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        // stop() released it already; a dropped profiler releases here
        if state::with(|s| s.profilers.iter().any(|(i, _)| *i == self.id)) {
            state::release(self.id);
        }
    }
}

/// One profiled op call or range.
#[derive(Clone, Debug, PartialEq)]
pub struct OpEvent {
    /// The backend primitive (`matmul`, `add`, `sum`, `copy`, …) or the range's name
    /// (backward nodes appear as ranges named after them, e.g. `MulBackward`).
    pub name: String,
    /// `"op"`, `"range"`, or `"comm"` (a collective, timed on its communication stream:
    /// its device times show when it ran beside the compute stream's ops).
    pub kind: &'static str,
    pub device: Device,
    /// Host time from the profiler's start to the call, and the call's host time (on a GPU:
    /// the time to queue the work).
    pub start_s: f64,
    pub host_s: f64,
    /// Time on the GPU between events around the call, and when it began there (on the
    /// host clock of the profiler, aligned at the device's first event); `None` on the CPU.
    pub device_s: Option<f64>,
    pub device_start_s: Option<f64>,
    /// Kernel launches during the call (CUDA; 0 on the CPU).
    pub launches: u64,
    /// Bytes allocated on the op's device since the previous op finished: its outputs (the
    /// frontend allocates them just before) and its temporaries.
    pub bytes_allocated: u64,
    /// The most bytes allocated on the device at any moment in that span.
    pub peak_bytes: u64,
    /// Operand dtypes and shapes, inputs then `->` outputs.
    pub operands: String,
}

/// Totals of one op name.
#[derive(Clone, Debug, PartialEq)]
pub struct OpSummary {
    pub name: String,
    pub calls: usize,
    pub host_s: f64,
    /// Total device time (0 when the op ran only on the CPU).
    pub device_s: f64,
    pub launches: u64,
    pub bytes_allocated: u64,
    /// The largest `peak_bytes` of its calls.
    pub peak_bytes: u64,
}

impl OpSummary {
    /// What the table sorts by: device time where the op ran on a GPU, host time otherwise.
    pub fn time_s(&self) -> f64 {
        if self.device_s > 0.0 {
            self.device_s
        } else {
            self.host_s
        }
    }
}

/// A host synchronisation: what caused it and where.
#[derive(Clone, Debug, PartialEq)]
pub struct SyncEvent {
    pub device: Device,
    pub why: String,
    pub site: String,
    pub at_s: f64,
}

/// What a [`Profiler`] recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileReport {
    /// Every op call and range in the order they started.
    pub events: Vec<OpEvent>,
    /// Per op name (ranges excluded; collectives included, named `nccl:…`), slowest first.
    pub ops: Vec<OpSummary>,
    pub syncs: Vec<SyncEvent>,
    /// Host time from start to stop.
    pub wall_s: f64,
}

fn summarize(events: &[OpEvent]) -> Vec<OpSummary> {
    let mut by: BTreeMap<&str, OpSummary> = BTreeMap::new();
    for e in events.iter().filter(|e| e.kind != "range") {
        let s = by.entry(&e.name).or_insert_with(|| OpSummary {
            name: e.name.clone(),
            calls: 0,
            host_s: 0.0,
            device_s: 0.0,
            launches: 0,
            bytes_allocated: 0,
            peak_bytes: 0,
        });
        s.calls += 1;
        s.host_s += e.host_s;
        s.device_s += e.device_s.unwrap_or(0.0);
        s.launches += e.launches;
        s.bytes_allocated += e.bytes_allocated;
        s.peak_bytes = s.peak_bytes.max(e.peak_bytes);
    }
    let mut v: Vec<_> = by.into_values().collect();
    v.sort_by(|a, b| b.time_s().total_cmp(&a.time_s()));
    v
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

impl ProfileReport {
    /// The summary of op `name`, if it ran.
    pub fn op(&self, name: &str) -> Option<&OpSummary> {
        self.ops.iter().find(|o| o.name == name)
    }

    /// The summary table (also what `Display` prints): one row per op, slowest first, then
    /// every host synchronisation with its call site.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<24} {:>7} {:>11} {:>11} {:>9} {:>12} {:>10}\n",
            "op", "calls", "host ms", "device ms", "launches", "alloc MiB", "peak MiB"
        );
        for o in &self.ops {
            let dev = if o.device_s > 0.0 {
                format!("{:.3}", o.device_s * 1e3)
            } else {
                "-".into()
            };
            s += &format!(
                "{:<24} {:>7} {:>11.3} {:>11} {:>9} {:>12.2} {:>10.2}\n",
                o.name,
                o.calls,
                o.host_s * 1e3,
                dev,
                o.launches,
                mib(o.bytes_allocated),
                mib(o.peak_bytes)
            );
        }
        s += &format!(
            "{} op calls in {:.3} ms; {} host synchronisation(s)\n",
            self.events.iter().filter(|e| e.kind == "op").count(),
            self.wall_s * 1e3,
            self.syncs.len()
        );
        for y in &self.syncs {
            s += &format!(
                "  sync at {:.3} ms on {}: {} — {}\n",
                y.at_s * 1e3,
                y.device,
                y.why,
                y.site
            );
        }
        s
    }

    /// The report as Chrome-trace JSON (open it at <https://ui.perfetto.dev> or
    /// `chrome://tracing`): a host track with ops and ranges, a track per GPU with device
    /// times, host synchronisations as instant events, and allocated bytes as a counter.
    pub fn chrome_trace(&self) -> String {
        use serde_json::json;
        let us = |s: f64| s * 1e6;
        let mut ev = vec![
            json!({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "stride"}}),
            json!({"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "host"}}),
        ];
        // one track per (GPU, compute or communication stream)
        let mut gpu_tracks: Vec<(Device, bool)> = vec![];
        for e in &self.events {
            ev.push(json!({
                "name": e.name, "cat": e.kind, "ph": "X", "pid": 0, "tid": 0,
                "ts": us(e.start_s), "dur": us(e.host_s),
                "args": {"device": e.device.to_string(), "operands": e.operands,
                         "launches": e.launches, "bytes_allocated": e.bytes_allocated,
                         "peak_bytes": e.peak_bytes}
            }));
            if let (Some(ds), Some(d0)) = (e.device_s, e.device_start_s) {
                let key = (e.device, e.kind == "comm");
                let tid = match gpu_tracks.iter().position(|k| *k == key) {
                    Some(i) => i + 1,
                    None => {
                        gpu_tracks.push(key);
                        let stream = if key.1 { "communication" } else { "stream" };
                        ev.push(json!({"name": "thread_name", "ph": "M", "pid": 0, "tid": gpu_tracks.len(),
                                       "args": {"name": format!("{} {stream}", e.device)}}));
                        gpu_tracks.len()
                    }
                };
                ev.push(
                    json!({"name": e.name, "cat": "device", "ph": "X", "pid": 0, "tid": tid,
                               "ts": us(d0), "dur": us(ds), "args": {"operands": e.operands}}),
                );
            }
            if e.kind == "op" {
                ev.push(
                    json!({"name": format!("allocated bytes ({})", e.device), "ph": "C", "pid": 0,
                               "ts": us(e.start_s + e.host_s), "args": {"peak": e.peak_bytes}}),
                );
            }
        }
        for y in &self.syncs {
            ev.push(
                json!({"name": format!("host sync: {}", y.why), "cat": "sync", "ph": "i", "s": "t",
                           "pid": 0, "tid": 0, "ts": us(y.at_s),
                           "args": {"device": y.device.to_string(), "site": y.site}}),
            );
        }
        json!({"traceEvents": ev, "displayTimeUnit": "ms"}).to_string()
    }

    /// How much of each GPU's collective time ran beside its compute stream's ops: for every
    /// device with timed collectives (`kind == "comm"`), the time the communication stream
    /// was busy, the time the compute stream was busy, and the time both were. DDP overlaps
    /// well when `overlapped_s` is most of `comm_s`.
    pub fn comm_overlap(&self) -> Vec<CommOverlap> {
        let mut out: Vec<CommOverlap> = vec![];
        let spans = |d: Device, comm: bool| {
            let v: Vec<(f64, f64)> = self
                .events
                .iter()
                .filter(|e| e.device == d && (e.kind == "comm") == comm && e.kind != "range")
                .filter_map(|e| Some((e.device_start_s?, e.device_start_s? + e.device_s?)))
                .collect();
            union(v)
        };
        for e in &self.events {
            if e.kind != "comm" || e.device_s.is_none() || out.iter().any(|o| o.device == e.device)
            {
                continue;
            }
            let comm = spans(e.device, true);
            let compute = spans(e.device, false);
            out.push(CommOverlap {
                device: e.device,
                comm_s: total(&comm),
                compute_s: total(&compute),
                overlapped_s: intersection(&comm, &compute),
            });
        }
        out
    }

    /// Writes [`chrome_trace`](Self::chrome_trace) to `path`.
    pub fn write_chrome_trace(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.chrome_trace()).map_err(|e| {
            crate::Error::invalid(
                "write_chrome_trace",
                format!("cannot write {}: {e}", path.display()),
            )
        })
    }
}

/// One GPU's collectives against its compute, from [`ProfileReport::comm_overlap`].
#[derive(Clone, Debug, PartialEq)]
pub struct CommOverlap {
    pub device: Device,
    /// Time the communication stream was busy (the union of its collectives' spans).
    pub comm_s: f64,
    /// Time the compute stream was busy with profiled ops.
    pub compute_s: f64,
    /// Time both were busy at once.
    pub overlapped_s: f64,
}

impl CommOverlap {
    /// The share of the collectives' time hidden behind compute (1 when there was none).
    pub fn fraction(&self) -> f64 {
        if self.comm_s > 0.0 {
            self.overlapped_s / self.comm_s
        } else {
            1.0
        }
    }
}

/// Sorted, disjoint intervals covering the same time as `v`.
fn union(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = vec![];
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn total(v: &[(f64, f64)]) -> f64 {
    v.iter().map(|(a, b)| b - a).sum()
}

/// The time two sorted, disjoint interval lists have in common.
fn intersection(x: &[(f64, f64)], y: &[(f64, f64)]) -> f64 {
    let (mut i, mut j, mut sum) = (0, 0, 0.0);
    while i < x.len() && j < y.len() {
        let lo = x[i].0.max(y[j].0);
        let hi = x[i].1.min(y[j].1);
        if hi > lo {
            sum += hi - lo;
        }
        if x[i].1 < y[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    sum
}

impl std::fmt::Display for ProfileReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.table())
    }
}

/// An op being timed, for every profiler alive on this thread.
pub(crate) struct Timer {
    recs: Vec<Rc<RefCell<Recorder>>>,
    device: Device,
    start: Instant,
    launches: u64,
    event: Option<DeviceEvent>,
}

fn launches(device: Device) -> u64 {
    match device {
        Device::Cpu => 0,
        Device::Cuda(i) => crate::cuda::launch_count(i),
        Device::Wgpu(i) => crate::webgpu::launch_count(i),
    }
}

pub(crate) fn start_all(recs: &[Rc<RefCell<Recorder>>], device: Device) -> Option<Timer> {
    if recs.is_empty() {
        return None;
    }
    Some(Timer {
        recs: recs.to_vec(),
        device,
        event: DeviceEvent::record(device),
        launches: launches(device),
        start: Instant::now(),
    })
}

fn operands(inputs: &[View], outputs: &[View]) -> String {
    let one = |v: &View| format!("{}{:?}", v.dtype, v.layout.shape());
    let ins: Vec<_> = inputs.iter().map(one).collect();
    let outs: Vec<_> = outputs.iter().map(one).collect();
    format!("{} -> {}", ins.join(", "), outs.join(", "))
}

pub(crate) fn finish_all(
    timer: Option<Timer>,
    name: &'static str,
    inputs: &[View],
    outputs: &[View],
) {
    let Some(t) = timer else { return };
    let host = t.start.elapsed();
    let end = t.event.as_ref().and_then(|_| DeviceEvent::record(t.device));
    let launched = launches(t.device).saturating_sub(t.launches);
    let total = crate::storage::allocated_total(t.device);
    let peak = crate::storage::take_window_peak(t.device);
    let desc = operands(inputs, outputs);
    let events = t.event.zip(end);
    for rec in &t.recs {
        let mut r = rec.borrow_mut();
        let before = r.allocated_total.insert(t.device, total).unwrap_or(total);
        let start = t.start.duration_since(r.t0);
        r.events.push(RawEvent {
            name: name.to_string(),
            kind: "op",
            device: t.device,
            start,
            host,
            events: events.clone(),
            launches: launched,
            bytes_allocated: total.saturating_sub(before),
            peak_bytes: peak,
            operands: desc.clone(),
        });
    }
}

/// A named span in the profile, open until dropped (see [`range`]).
#[must_use = "the range ends when the guard drops: bind it with `let _r = …`"]
pub struct RangeGuard {
    open: Option<Vec<(Rc<RefCell<Recorder>>, usize)>>,
}

/// Marks a span of your program (`"forward"`, `"encoder"`, `"optimizer step"`) in every
/// profiler alive on this thread: a range in the Chrome trace, containing the ops it ran.
/// Free when no profiler is recording.
pub fn range(name: &str) -> RangeGuard {
    RangeGuard {
        open: open_range(name),
    }
}

pub(crate) fn open_range(name: &str) -> Option<Vec<(Rc<RefCell<Recorder>>, usize)>> {
    if !state::any_active() {
        return None;
    }
    let recs = state::active_here().profilers;
    if recs.is_empty() {
        return None;
    }
    Some(
        recs.into_iter()
            .map(|rec| {
                let idx = {
                    let mut r = rec.borrow_mut();
                    let start = r.t0.elapsed();
                    r.events.push(RawEvent {
                        name: name.to_string(),
                        kind: "range",
                        device: Device::Cpu,
                        start,
                        host: Duration::ZERO,
                        events: None,
                        launches: 0,
                        bytes_allocated: 0,
                        peak_bytes: 0,
                        operands: String::new(),
                    });
                    r.events.len() - 1
                };
                (rec, idx)
            })
            .collect(),
    )
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        range_end(self.open.take());
    }
}

pub(crate) fn range_end(open: Option<Vec<(Rc<RefCell<Recorder>>, usize)>>) {
    for (rec, idx) in open.into_iter().flatten() {
        let mut r = rec.borrow_mut();
        let now = r.t0.elapsed();
        let e = &mut r.events[idx];
        e.host = now.saturating_sub(e.start);
    }
}

/// A collective being timed on a communication stream, for every profiler alive on this
/// thread (see [`comm_start`]).
pub(crate) struct CommTimer {
    recs: Vec<Rc<RefCell<Recorder>>>,
    device: Device,
    start: Instant,
    event: Option<DeviceEvent>,
}

/// Starts timing a collective about to be queued on the communication `stream` of `device`;
/// `None` when no profiler records on this thread.
pub(crate) fn comm_start(device: Device, stream: &cudarc::driver::CudaStream) -> Option<CommTimer> {
    if !state::any_active() {
        return None;
    }
    let recs = state::active_here().profilers;
    if recs.is_empty() {
        return None;
    }
    Some(CommTimer {
        recs,
        device,
        event: DeviceEvent::record_on(stream),
        start: Instant::now(),
    })
}

/// Ends a collective's span: an event of kind `"comm"` named `name`, with the device time
/// between events on the communication stream around it.
pub(crate) fn comm_finish(
    timer: Option<CommTimer>,
    name: String,
    operands: String,
    stream: &cudarc::driver::CudaStream,
) {
    let Some(t) = timer else { return };
    let host = t.start.elapsed();
    let end = t
        .event
        .as_ref()
        .and_then(|_| DeviceEvent::record_on(stream));
    let events = t.event.zip(end);
    for rec in &t.recs {
        let mut r = rec.borrow_mut();
        let start = t.start.duration_since(r.t0);
        r.events.push(RawEvent {
            name: name.clone(),
            kind: "comm",
            device: t.device,
            start,
            host,
            events: events.clone(),
            launches: 0,
            bytes_allocated: 0,
            peak_bytes: 0,
            operands: operands.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &'static str, start: f64, len: f64) -> OpEvent {
        OpEvent {
            name: kind.into(),
            kind,
            device: Device::Cuda(0),
            start_s: 0.0,
            host_s: 0.0,
            device_s: Some(len),
            device_start_s: Some(start),
            launches: 0,
            bytes_allocated: 0,
            peak_bytes: 0,
            operands: String::new(),
        }
    }

    #[test]
    fn comm_overlap_counts_only_time_both_streams_were_busy() {
        // compute busy [0,4) and [6,10) (two ops touching at 2); comm busy [3,7) and [9,12)
        let events = vec![
            ev("op", 0.0, 2.0),
            ev("op", 2.0, 2.0),
            ev("comm", 3.0, 4.0),
            ev("op", 6.0, 4.0),
            ev("comm", 9.0, 3.0),
            ev("range", 0.0, 100.0),
        ];
        let r = ProfileReport {
            ops: summarize(&events),
            events,
            syncs: vec![],
            wall_s: 12.0,
        };
        let o = r.comm_overlap();
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].comm_s, 7.0);
        assert_eq!(o[0].compute_s, 8.0);
        // [3,4) + [6,7) + [9,10)
        assert_eq!(o[0].overlapped_s, 3.0);
        assert!((o[0].fraction() - 3.0 / 7.0).abs() < 1e-12);
        // the collective appears in the summary under its name
        assert_eq!(r.op("comm").unwrap().calls, 2);
    }
}
