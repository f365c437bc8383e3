//! What is switched on, per thread. Every tool is a guard that registers itself here on
//! creation and removes itself on drop; ops consult this state only when [`any_active`] says
//! some guard exists somewhere in the process, so the cost when everything is off is one
//! relaxed atomic load per primitive.

use super::anomaly::AnomalyConfig;
use super::cross_check::CrossState;
use super::fault::Fault;
use super::profiler::Recorder;
use super::site::CallSite;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Live debug guards in the process, on any thread.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Whether any debug guard exists anywhere (the fast path's only check).
#[inline]
pub(crate) fn any_active() -> bool {
    ACTIVE.load(Ordering::Relaxed) != 0
}

/// The backward node being run on this thread, for reports from inside a backward pass.
#[derive(Clone)]
pub(crate) struct BackwardCtx {
    pub node: &'static str,
    pub forward_site: Option<CallSite>,
}

#[derive(Default)]
pub(crate) struct ThreadState {
    pub anomaly: Vec<(u64, AnomalyConfig)>,
    pub sync_guards: Vec<u64>,
    pub profilers: Vec<(u64, Rc<RefCell<Recorder>>)>,
    pub cross: Vec<(u64, Rc<RefCell<CrossState>>)>,
    pub faults: Vec<(u64, Fault)>,
    /// > 0 while the debug tools run ops of their own (checks, copies, replays): those are
    /// invisible to every tool, and faults never apply to them.
    pub quiet: usize,
    /// > 0 inside an op that has already reported its host synchronisation.
    pub announced: usize,
    pub backward: Vec<BackwardCtx>,
}

impl ThreadState {
    /// No guard of this thread applies to its ops.
    fn nothing_on(&self) -> bool {
        self.anomaly.is_empty()
            && self.sync_guards.is_empty()
            && self.profilers.is_empty()
            && self.cross.is_empty()
            && self.faults.is_empty()
    }
}

thread_local! {
    static STATE: RefCell<ThreadState> = RefCell::default();
}

/// Runs `f` on this thread's state.
pub(crate) fn with<R>(f: impl FnOnce(&mut ThreadState) -> R) -> R {
    STATE.with(|s| f(&mut s.borrow_mut()))
}

/// A fresh id for a guard, counted as active until [`release`].
pub(crate) fn register() -> u64 {
    ACTIVE.fetch_add(1, Ordering::Relaxed);
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Removes the guard `id` from whichever list holds it.
pub(crate) fn release(id: u64) {
    with(|s| {
        s.anomaly.retain(|(i, _)| *i != id);
        s.sync_guards.retain(|i| *i != id);
        s.profilers.retain(|(i, _)| *i != id);
        s.cross.retain(|(i, _)| *i != id);
        s.faults.retain(|(i, _)| *i != id);
    });
    ACTIVE.fetch_sub(1, Ordering::Relaxed);
}

/// What applies to an op called now on this thread (nothing while quiet).
#[derive(Default)]
pub(crate) struct Active {
    pub anomaly: Option<AnomalyConfig>,
    pub sync_guard: bool,
    pub profilers: Vec<Rc<RefCell<Recorder>>>,
    pub cross: Option<Rc<RefCell<CrossState>>>,
    pub faults: Vec<Fault>,
}

impl Active {
    pub fn is_empty(&self) -> bool {
        self.anomaly.is_none()
            && !self.sync_guard
            && self.profilers.is_empty()
            && self.cross.is_none()
            && self.faults.is_empty()
    }
}

pub(crate) fn active_here() -> Active {
    with(|s| {
        // a guard alive on another thread sends every op here: look before cloning anything
        if s.quiet > 0 || s.nothing_on() {
            return Active::default();
        }
        Active {
            anomaly: s.anomaly.last().map(|(_, c)| *c),
            sync_guard: !s.sync_guards.is_empty(),
            profilers: s.profilers.iter().map(|(_, r)| r.clone()).collect(),
            cross: s.cross.last().map(|(_, c)| c.clone()),
            faults: s.faults.iter().map(|(_, f)| f.clone()).collect(),
        }
    })
}

/// While alive, the debug tools ignore ops on this thread (they are the tools' own).
pub(crate) struct Quiet(());

pub(crate) fn quiet() -> Quiet {
    with(|s| s.quiet += 1);
    Quiet(())
}

impl Drop for Quiet {
    fn drop(&mut self) {
        with(|s| s.quiet -= 1);
    }
}

/// The backward node running on this thread, if any.
pub(crate) fn current_backward() -> Option<BackwardCtx> {
    with(|s| s.backward.last().cloned())
}
