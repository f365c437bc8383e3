//! Debugging tools: find the op that went wrong instead of bisecting a training run by hand.
//!
//! - [`detect_anomaly`]: the first op that makes a NaN or an infinity is an error naming the
//!   op, its operands' shapes, dtypes, strides and device, and the line that called it
//!   (backward ops: the line of their forward op);
//! - [`Profiler`]: per-op counts and times (device time through CUDA events), kernel
//!   launches, bytes allocated and peak memory per op, every host synchronisation with its
//!   call site; a summary table and a Chrome-trace JSON file (open it in Perfetto);
//! - [`forbid_sync`]: a scope in which any host synchronisation is an error naming its cause;
//! - [`cross_check`]: every op is replayed on a reference device (the CPU, in f64 by default)
//!   from copies of its inputs and the results compared; the first disagreement is reported
//!   with the op's name, its operand layouts and dtypes and the size of the disagreement;
//! - [`inject_fault`]: a deliberately broken backend (an op that drops its writes into
//!   non-contiguous outputs, as PyTorch's Apple-GPU `addcmul_` did) for testing the above;
//! - memory: [`crate::memory_stats`] per device, per-op peaks in the profiler, and
//!   [`check_leaks`] for tests.
//!
//! Every tool is a guard that applies to the thread that created it until it is dropped.
//! When no guard exists, each op pays one relaxed atomic load.
//!
//! ```
//! use stride_core::{debug, DType, Device, Tensor};
//! let w = Tensor::ones([4, 3], DType::F32, &Device::Cpu)?.t()?; // strides [1, 3]
//! let g = Tensor::ones([3, 4], DType::F32, &Device::Cpu)?;
//! let _fault = debug::inject_fault("addcmul"); // drops its writes into strided outputs
//! let check = debug::cross_check();
//! w.addcmul_(&g, &g, 0.5)?; // silently does nothing…
//! let d = check.first().expect("…but the replay on the CPU in f64 disagrees");
//! assert_eq!(d.op, "addcmul");
//! assert!(d.operands.contains("strides [1, 3]"), "{d}");
//! # Ok::<(), stride_core::Error>(())
//! ```

mod anomaly;
mod cross_check;
mod fault;
mod hook;
mod memory;
pub(crate) mod profiler;
mod site;
mod state;
mod sync_guard;

pub use anomaly::{detect_anomaly, detect_anomaly_nan_only, AnomalyConfig, AnomalyGuard};
pub use cross_check::{
    cross_check, cross_check_with, CrossCheckConfig, CrossCheckGuard, Disagreement,
};
pub use fault::{inject_fault, FaultGuard};
pub use memory::{check_leaks, memory_report};
pub use profiler::{
    range, CommOverlap, OpEvent, OpSummary, ProfileReport, Profiler, RangeGuard, SyncEvent,
};
pub use site::{CallSite, Frame};
pub use sync_guard::{forbid_sync, SyncGuard};

pub(crate) use hook::{
    backend_sync, forward_site, host_sync, in_backward, primitive, primitive_value, Announced,
    Replay,
};

use crate::backend::View;
use crate::Tensor;

/// A tensor over a primitive's view (shares its storage; records nothing).
pub(crate) fn tensor_of(v: &View) -> Tensor {
    Tensor::from_parts(v.storage.clone(), v.layout.clone(), v.dtype)
}

/// `f32 [64, 32] strides [1, 64] offset 0 (non-contiguous) on cpu`.
pub(crate) fn describe_view(v: &View) -> String {
    let l = v.layout;
    let form = if l.is_contiguous() {
        "contiguous"
    } else {
        "non-contiguous"
    };
    format!(
        "{} {:?} strides {:?} offset {} ({form}) on {}",
        v.dtype,
        l.shape(),
        l.strides(),
        l.offset(),
        v.storage.device()
    )
}

/// Every operand of a primitive, inputs then outputs.
pub(crate) fn describe_operands(inputs: &[View], outputs: &[View]) -> String {
    let list = |vs: &[View]| vs.iter().map(describe_view).collect::<Vec<_>>().join(", ");
    format!("inputs: [{}]; outputs: [{}]", list(inputs), list(outputs))
}

/// Where the op ran: the caller's line, or inside which backward node (and where its forward
/// op was called).
/// Whether anomaly mode is on for this thread.
pub(crate) fn anomaly_active() -> bool {
    state::any_active() && state::with(|s| !s.anomaly.is_empty())
}

pub(crate) fn describe_site(site: Option<&CallSite>) -> String {
    if let Some(b) = state::current_backward() {
        let fwd = match &b.forward_site {
            Some(s) => format!("its forward op: {}", s.describe()),
            None => "its forward ran before anomaly mode was turned on, so its call site was not recorded".to_string(),
        };
        return format!("in the backward pass, in {} ({fwd})", b.node);
    }
    match site {
        Some(s) => s.describe(),
        None => "call site not recorded".to_string(),
    }
}
