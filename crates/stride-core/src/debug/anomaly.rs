//! Anomaly mode: every op's float outputs are checked for NaN (and infinities); the first op
//! that makes one from inputs that had none is an error naming it, its operands and where it
//! was called — for a backward op, where its forward ran.

use super::site::CallSite;
use super::state;
use super::{describe_operands, describe_site, tensor_of};
use crate::backend::View;
use crate::{Error, Result};
use std::marker::PhantomData;

/// What anomaly mode looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnomalyConfig {
    /// Also report infinities (off for models that mask with `-inf` on purpose).
    pub check_inf: bool,
}

/// While alive, ops on this thread are checked (see [`detect_anomaly`]). Not `Send`: the mode
/// belongs to the thread that turned it on, as in PyTorch.
#[must_use = "anomaly mode is on only while the guard lives: bind it with `let _g = …`"]
pub struct AnomalyGuard {
    id: u64,
    _thread: PhantomData<*const ()>,
}

/// Turns on anomaly mode for this thread until the guard is dropped: each op's float outputs
/// are checked, and the first op that produces a NaN or an infinity from inputs without one
/// returns [`Error::Anomaly`] naming the op, the shapes, dtypes, strides and device of its
/// operands, and the line of your code that called it. Ops of a backward pass name their
/// backward node and the line where its forward op was called (nodes made in anomaly mode
/// remember it). Slow: every op waits for its check.
///
/// ```
/// use stride_core::{debug, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 0.0, 4.0], [3])?;
/// let _g = debug::detect_anomaly();
/// let err = x.log().unwrap_err().to_string(); // log(0) = -inf
/// assert!(err.contains("log") && err.contains("infinit"), "{err}");
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn detect_anomaly() -> AnomalyGuard {
    enter(AnomalyConfig { check_inf: true })
}

/// [`detect_anomaly`] for NaN only: infinities pass (attention masks filled with `-inf`).
pub fn detect_anomaly_nan_only() -> AnomalyGuard {
    enter(AnomalyConfig { check_inf: false })
}

fn enter(cfg: AnomalyConfig) -> AnomalyGuard {
    let id = state::register();
    state::with(|s| s.anomaly.push((id, cfg)));
    AnomalyGuard {
        id,
        _thread: PhantomData,
    }
}

impl Drop for AnomalyGuard {
    fn drop(&mut self) {
        state::release(self.id);
    }
}

/// Whether any float operand holds a NaN / an infinity.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Flags {
    pub nan: bool,
    pub inf: bool,
}

fn flags_of(v: &View) -> Result<(Flags, usize, usize)> {
    if !v.dtype.is_float() || v.layout.numel() == 0 {
        return Ok((Flags::default(), 0, 0));
    }
    let _q = state::quiet();
    let t = tensor_of(v);
    let nans = t.isnan()?.count_nonzero(&[])?.item::<i64>()? as usize;
    let infs = t.isinf()?.count_nonzero(&[])?.item::<i64>()? as usize;
    Ok((
        Flags {
            nan: nans > 0,
            inf: infs > 0,
        },
        nans,
        infs,
    ))
}

pub(crate) fn input_flags(inputs: &[View]) -> Result<Flags> {
    let mut f = Flags::default();
    for v in inputs {
        let (g, _, _) = flags_of(v)?;
        f.nan |= g.nan;
        f.inf |= g.inf;
    }
    Ok(f)
}

pub(crate) fn check(
    cfg: &AnomalyConfig,
    name: &'static str,
    inputs: &[View],
    outputs: &[View],
    before: Flags,
    site: Option<&CallSite>,
) -> Result<()> {
    for (k, out) in outputs.iter().enumerate() {
        let (f, nans, infs) = flags_of(out)?;
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let what = if f.nan && !before.nan {
            plural(nans, "NaN", "NaNs")
        } else if cfg.check_inf && f.inf && !before.inf && !before.nan {
            plural(infs, "infinity", "infinities")
        } else {
            continue;
        };
        let which = if outputs.len() > 1 {
            format!("output {k}")
        } else {
            "its output".to_string()
        };
        return Err(Error::Anomaly {
            op: name.to_string(),
            report: format!(
                "produced {what} among the {} elements of {which}, from inputs without any; {}; {}",
                out.layout.numel(),
                describe_operands(inputs, outputs),
                describe_site(site)
            ),
        });
    }
    Ok(())
}
