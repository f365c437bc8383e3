//! Cross-device checking: every op is replayed on a reference device from copies of its
//! inputs, and its outputs compared with per-dtype tolerances.

use super::hook::Replay;
use super::site::CallSite;
use super::{describe_operands, describe_site, state, tensor_of};
use crate::backend::View;
use crate::{DType, Device, Error, MemoryFormat, Result, Tensor};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;

/// What [`cross_check_with`] compares against.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossCheckConfig {
    /// Where ops are replayed (default: the CPU).
    pub reference: Device,
    /// The dtype float operands are replayed in (default: f64); `None` replays every operand
    /// in its own dtype.
    pub dtype: Option<DType>,
    /// Return [`Error::CrossCheck`] from the first op that disagrees (default: false: keep
    /// going and collect every disagreement in the guard).
    pub stop_on_first: bool,
}

impl Default for CrossCheckConfig {
    fn default() -> Self {
        CrossCheckConfig {
            reference: Device::Cpu,
            dtype: Some(DType::F64),
            stop_on_first: false,
        }
    }
}

/// One op whose result differs from the reference's by more than its dtype's tolerance.
#[derive(Clone, Debug, PartialEq)]
pub struct Disagreement {
    /// The backend primitive (`addcmul`, `sum`, `matmul`, …).
    pub op: String,
    /// The stride function the caller called, where the stack shows it (`Tensor::addcmul_`).
    pub api: Option<String>,
    /// Every operand: dtype, shape, strides, offset, contiguity and device.
    pub operands: String,
    /// Where the op was called (or the backward node it ran in).
    pub site: String,
    /// Which output (0 for single-output ops).
    pub output: usize,
    /// Elements beyond tolerance, of `numel`.
    pub mismatched: usize,
    pub numel: usize,
    /// The largest difference, where it is (logical index), and the two values there.
    pub max_abs_diff: f64,
    pub at: Vec<usize>,
    pub device_value: f64,
    pub reference_value: f64,
    /// The tolerance at that element.
    pub tolerance: f64,
    /// `cpu f64`, `cpu (same dtype)`, …
    pub reference: String,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let api = self
            .api
            .as_deref()
            .map_or(String::new(), |a| format!(" (in {a})"));
        write!(
            f,
            "{}{api} disagrees with the reference ({}) at {} of {} elements of output {}; the largest difference is {:.6e} at {:?} (this device {}, reference {}, tolerance {:.3e}); {}; {}",
            self.op,
            self.reference,
            self.mismatched,
            self.numel,
            self.output,
            self.max_abs_diff,
            self.at,
            self.device_value,
            self.reference_value,
            self.tolerance,
            self.operands,
            self.site
        )
    }
}

pub(crate) struct CrossState {
    config: CrossCheckConfig,
    checked: usize,
    disagreements: Vec<Disagreement>,
    skipped: Vec<String>,
}

/// While alive, every op on this thread is replayed and compared (see [`cross_check`]).
#[must_use = "the check is on only while the guard lives: bind it with `let g = …`"]
pub struct CrossCheckGuard {
    id: u64,
    state: Rc<RefCell<CrossState>>,
    _thread: PhantomData<*const ()>,
}

/// Replays every op run on this thread on the CPU in f64, from copies of its inputs, and
/// compares the results with per-dtype tolerances; disagreements are collected in the guard.
/// Slow (every op copies its operands to the host): for hunting a wrong kernel, not for
/// training. See [`cross_check_with`] for another reference or to stop at the first
/// disagreement.
///
/// ```
/// use stride_core::{debug, Device, Tensor};
/// let g = debug::cross_check();
/// let x = Tensor::arange(0.0, 12.0, &Device::Cpu)?.reshape(&[3, 4])?;
/// let y = x.t()?.exp()?.sum_dims(&[0], false)?;
/// assert_eq!(y.shape(), &[3]);
/// assert!(g.disagreements().is_empty() && g.checked() >= 3);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn cross_check() -> CrossCheckGuard {
    cross_check_with(CrossCheckConfig::default())
}

/// [`cross_check`] with a chosen reference device and dtype, optionally stopping (with
/// [`Error::CrossCheck`]) at the first disagreement.
pub fn cross_check_with(config: CrossCheckConfig) -> CrossCheckGuard {
    let id = state::register();
    let st = Rc::new(RefCell::new(CrossState {
        config,
        checked: 0,
        disagreements: vec![],
        skipped: vec![],
    }));
    state::with(|s| s.cross.push((id, st.clone())));
    CrossCheckGuard {
        id,
        state: st,
        _thread: PhantomData,
    }
}

impl CrossCheckGuard {
    /// Every disagreement so far, in the order the ops ran.
    pub fn disagreements(&self) -> Vec<Disagreement> {
        self.state.borrow().disagreements.clone()
    }
    /// The first op that disagreed.
    pub fn first(&self) -> Option<Disagreement> {
        self.state.borrow().disagreements.first().cloned()
    }
    /// How many op calls were replayed and compared.
    pub fn checked(&self) -> usize {
        self.state.borrow().checked
    }
    /// Op calls that could not be replayed on the reference, with why.
    pub fn skipped(&self) -> Vec<String> {
        self.state.borrow().skipped.clone()
    }
}

impl Drop for CrossCheckGuard {
    fn drop(&mut self) {
        state::release(self.id);
    }
}

/// Copies of an op's operands on the reference device, taken before it runs.
pub(crate) struct Snapshot {
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
}

fn reference_copy(v: &View, config: &CrossCheckConfig, replay: Replay) -> Result<Tensor> {
    let t = tensor_of(v);
    let dtype = match (replay, config.dtype) {
        (Replay::Widen, Some(d)) if v.dtype.is_float() => d,
        _ => v.dtype,
    };
    // One copy where one will do: a transfer and a cast each make a fresh tensor, but on the
    // same device and in the same dtype `to_device`/`to_dtype` would share the storage.
    if t.device() != config.reference {
        t.to_device(&config.reference)?.to_dtype(dtype)
    } else if dtype != v.dtype {
        t.to_dtype(dtype)
    } else {
        t.clone_with(MemoryFormat::Contiguous)
    }
}

impl Snapshot {
    pub(crate) fn take(
        st: &CrossState,
        inputs: &[View],
        outputs: &[View],
        replay: Replay,
    ) -> Result<Snapshot> {
        let _q = state::quiet();
        let copy = |vs: &[View]| -> Result<Vec<Tensor>> {
            vs.iter()
                .map(|v| reference_copy(v, &st.config, replay))
                .collect()
        };
        Ok(Snapshot {
            inputs: copy(inputs)?,
            outputs: copy(outputs)?,
        })
    }
}

/// (relative, absolute as a fraction of the output's largest magnitude) for a dtype.
fn tolerance(dtype: DType) -> Option<(f64, f64)> {
    match dtype {
        DType::F64 => Some((1e-9, 1e-12)),
        DType::F32 => Some((1e-4, 1e-5)),
        DType::F16 => Some((1e-2, 1e-3)),
        DType::BF16 => Some((2e-2, 4e-3)),
        _ => None, // integers and bool: exact
    }
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut at = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            at[d] = i % shape[d];
            i /= shape[d];
        }
    }
    at
}

pub(crate) fn compare(
    cell: &Rc<RefCell<CrossState>>,
    name: &'static str,
    snap: Snapshot,
    inputs: &[View],
    outputs: &[View],
    run: &dyn Fn(&[View], &[View]) -> Result<()>,
    site: Option<&CallSite>,
) -> Result<()> {
    let _q = state::quiet();
    let config = cell.borrow().config.clone();
    let rin: Vec<View> = snap.inputs.iter().map(|t| t.view_ref()).collect();
    let rout: Vec<View> = snap.outputs.iter().map(|t| t.view_ref()).collect();
    if let Err(e) = run(&rin, &rout) {
        cell.borrow_mut()
            .skipped
            .push(format!("{name}: not replayable on the reference ({e})"));
        return Ok(());
    }
    let mut found = None;
    for (k, (out, reference)) in outputs.iter().zip(&snap.outputs).enumerate() {
        // the reference rounded to the output's dtype: overflow and rounding agree
        let got = tensor_of(out).to_f64_vec()?;
        let want = reference.to_dtype(out.dtype)?.to_f64_vec()?;
        let scale = want
            .iter()
            .filter(|x| x.is_finite())
            .fold(0.0f64, |m, x| m.max(x.abs()));
        let (rtol, atol) = tolerance(out.dtype).unwrap_or((0.0, 0.0));
        let mut bad = 0usize;
        let mut worst: Option<(usize, f64, f64)> = None;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let same = (g.is_nan() && w.is_nan()) || g == w;
            if same {
                continue;
            }
            let tol = rtol * w.abs() + atol * scale;
            let diff = (g - w).abs();
            if diff.is_finite() && diff <= tol {
                continue;
            }
            bad += 1;
            let d = if diff.is_nan() { f64::INFINITY } else { diff };
            if worst.is_none_or(|(_, wd, _)| d > wd) {
                worst = Some((i, d, tol));
            }
        }
        if let Some((i, d, tol)) = worst {
            found = Some(Disagreement {
                op: name.to_string(),
                api: site.and_then(|s| s.api()),
                operands: describe_operands(inputs, outputs),
                site: describe_site(site),
                output: k,
                mismatched: bad,
                numel: got.len(),
                max_abs_diff: d,
                at: unravel(i, out.layout.shape()),
                device_value: got[i],
                reference_value: want[i],
                tolerance: tol,
                reference: match (config.dtype, out.dtype.is_float()) {
                    (Some(dt), true) => format!("{} {dt}", config.reference),
                    _ => format!("{} (same dtype)", config.reference),
                },
            });
            break;
        }
    }
    let mut st = cell.borrow_mut();
    st.checked += 1;
    if let Some(d) = found {
        st.disagreements.push(d.clone());
        if st.config.stop_on_first {
            return Err(Error::CrossCheck {
                op: d.op.clone(),
                report: d.to_string(),
            });
        }
    }
    Ok(())
}
