//! What a GPU backend's deferred device-side checks (index ranges, integer divisors) share:
//! the description of a check that may fail later, and the error it becomes. Each backend
//! keeps its own record of the verdicts (`cuda/deferred.rs`, `webgpu/deferred.rs`).

use crate::backend::View;
use crate::debug::CallSite;
use crate::{Device, Error};

/// What turns a failed check into its error: the op's own error for the bad value, plus the
/// operands and the call site.
pub(crate) struct Failure {
    /// The error the CPU backend gives for this bad value.
    /// (`Fn`: a check inside a CUDA graph can fail at any replay.)
    pub cause: Box<dyn Fn(i64) -> Error + Send>,
    /// The op's operands (shapes, dtypes, strides).
    pub operands: String,
}

/// The error of a failed deferred check: the op's own error, its operands and call site.
pub(crate) fn device_check(device: Device, cause: Error, operands: &str, site: &CallSite) -> Error {
    Error::DeviceCheck {
        device,
        cause: Box::new(cause),
        report: format!("operands: {operands}; called at {}", site.describe()),
    }
}

/// `name shape dtype strides offset` of each operand, for a deferred error's report.
pub(crate) fn describe(views: &[(&str, &View)]) -> String {
    views
        .iter()
        .map(|(name, v)| {
            format!(
                "{name} {:?} {} (strides {:?}, offset {})",
                v.layout.shape(),
                v.dtype,
                v.layout.strides(),
                v.layout.offset()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}
