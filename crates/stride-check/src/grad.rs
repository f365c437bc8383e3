//! The gradcheck sweep: every registry entry is held to its [`Grad`].
//!
//! - A [`Grad::Once`] or [`Grad::Twice`] entry is gradchecked
//!   ([`stride_core::autograd::gradcheck`]: analytic gradients against central differences,
//!   perturbing each input element in place through its layout) in f64, on the entry's own
//!   samples, with every tensor operand it differentiates laid out in each registry layout
//!   ([`LayoutKind::ALL`]; an expanded operand is a smaller leaf broadcast inside the call)
//!   and, outside the contiguous layout, a non-contiguous incoming gradient. A `Twice` entry
//!   is also gradgradchecked ([`stride_core::autograd::gradgradcheck`]). An entry marked
//!   differentiable that claims no f64, has no functional form, or whose samples give no case
//!   to check fails.
//! - A [`Grad::No`] entry fails if its functional result requires grad when its float
//!   operands do (it records a backward the registry does not know about, so nothing checks
//!   it).
//!
//! Samples the reference refuses (invalid arguments), and samples whose result is not f64
//! (`to_dtype` to another dtype), are skipped. Values are the sampler's, except that operands
//! whose domain sprinkles NaN/±inf or snaps to a grid (ties for `round`, exact quotients for
//! `floor_divide`) are redrawn from the same domain without them: a central difference
//! across a jump or at infinity says nothing about the derivative.
//!
//! The default run takes [`SAMPLES_PER_LAYOUT`] samples per layout (rotating through the
//! sampler's list, so different layouts see different samples) and gradgradchecks in two
//! layouts; [`GradConfig::exhaustive`] takes every sample in every layout, both base shapes,
//! and gradgradchecks everywhere.

use crate::layouts::{build, plan, project, LayoutKind};
use crate::reference::numel;
use crate::registry::{self, Arg, ArgKind, Grad, OpInfo, Sample, SampleArg, SampleCtx};
use crate::rng::{hash_str, mix, Rng};
use crate::runner::reference_shape;
use rayon::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use stride_core::autograd::{self, gradcheck, gradgradcheck, GradcheckOptions};
use stride_core::{DType, Device, MemoryFormat, Result, Tensor};

/// Samples gradchecked per (entry, layout) in the default run.
pub const SAMPLES_PER_LAYOUT: usize = 1;

/// The largest case gradchecked: elements of the differentiated operands, and of the result.
/// A gradcheck perturbs every input element (two calls each) and runs one backward per
/// output element, so a sampler's long rows (thousands of elements, for the kernels' size
/// thresholds) are the conformance matrix's business, not the gradcheck's.
pub const MAX_CASE_NUMEL: usize = 64;

/// Entries whose gradcheck fails today, each with why (PyTorch's OpInfo keeps the same list
/// as `DecorateInfo(expectedFailure)`). The sweep reports them apart, and an entry listed here
/// that passes is a failure too — so the list shrinks as they are fixed and never hides a
/// new failure of another entry.
pub const EXPECTED_FAILURES: &[(&str, &str)] = &[
    (
        "scatter",
        "duplicate indices: the forward keeps one write, the backward gives every duplicate the gradient (as PyTorch's; its gradcheck samples unique indices)",
    ),
    (
        "index_copy",
        "duplicate indices: the forward keeps one write, the backward gives every duplicate the gradient (as PyTorch's)",
    ),
    (
        "nn.embedding",
        "the entry copies the weight (operand 0) into the layer's parameter: no gradient reaches it",
    ),
    (
        "nn.embedding.grad",
        "the entry copies the weight (operand 0) into the layer's parameter: no gradient reaches it",
    ),
];

/// Why `name` is in [`EXPECTED_FAILURES`], if it is.
pub fn expected_failure(name: &str) -> Option<&'static str> {
    EXPECTED_FAILURES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why)
}

/// What to run.
#[derive(Debug, Clone)]
pub struct GradConfig {
    /// Every sample of every layout and base shape, gradgradcheck in every layout.
    pub exhaustive: bool,
    pub seed: u64,
    /// Where the ops run (the gradcheck itself reads values back to the host).
    pub device: Device,
}

impl Default for GradConfig {
    fn default() -> Self {
        GradConfig {
            exhaustive: false,
            seed: 0x6AD_C4EC,
            device: Device::Cpu,
        }
    }
}

/// What one entry's sweep found.
#[derive(Debug, Clone, Default)]
pub struct OpGradReport {
    pub op: &'static str,
    pub grad: Grad,
    /// gradcheck runs (one per checked sample and layout).
    pub gradchecks: usize,
    /// gradgradcheck runs.
    pub gradgradchecks: usize,
    /// Cases the device has no kernel for (`Error::NotImplemented`), never counted as passes.
    pub not_implemented: usize,
    /// Cases skipped: the op refuses the layout (`NotViewable`), or the function or an
    /// input is not finite there (a central difference says nothing about it).
    pub skipped: usize,
    /// One line per failed case: the layout, the sample, and the error.
    pub failures: Vec<String>,
    /// The failures of an entry in [`EXPECTED_FAILURES`] (not counted in `failures`).
    pub expected_failures: Vec<String>,
}

/// What the whole sweep found.
#[derive(Debug, Clone, Default)]
pub struct GradReport {
    pub ops: Vec<OpGradReport>,
}

impl GradReport {
    /// No failures.
    pub fn ok(&self) -> bool {
        self.ops.iter().all(|o| o.failures.is_empty())
    }
    /// Every failure, prefixed by its entry's name.
    pub fn failures(&self) -> Vec<String> {
        self.ops
            .iter()
            .flat_map(|o| o.failures.iter().map(move |f| format!("{}: {f}", o.op)))
            .collect()
    }
    /// `(gradcheck runs, gradgradcheck runs)` over all entries.
    pub fn totals(&self) -> (usize, usize) {
        self.ops
            .iter()
            .fold((0, 0), |(a, b), o| (a + o.gradchecks, b + o.gradgradchecks))
    }
    /// Entries with each [`Grad`] value: `(no, once, twice)`.
    pub fn counts(&self) -> (usize, usize, usize) {
        let n = |g| self.ops.iter().filter(|o| o.grad == g).count();
        (n(Grad::No), n(Grad::Once), n(Grad::Twice))
    }
}

/// Runs the sweep over `ops` (in parallel, one entry per task).
pub fn run<'a>(config: &GradConfig, ops: impl IntoIterator<Item = &'a OpInfo>) -> GradReport {
    let ops: Vec<&OpInfo> = ops.into_iter().collect();
    GradReport {
        ops: ops.par_iter().map(|op| check_op(op, config)).collect(),
    }
}

/// Runs the sweep over the whole registry.
pub fn run_all(config: &GradConfig) -> GradReport {
    run(config, registry::all())
}

/// Holds one entry to its [`Grad`].
pub fn check_op(op: &OpInfo, config: &GradConfig) -> OpGradReport {
    let mut rep = OpGradReport {
        op: op.name,
        grad: op.grad,
        ..Default::default()
    };
    match op.grad {
        Grad::No => {
            if let Err(e) = probe_no_grad(op, config) {
                rep.failures.push(e);
            }
        }
        Grad::Once | Grad::Twice => sweep_op(op, config, &mut rep),
    }
    if let Some(why) = expected_failure(op.name) {
        if rep.failures.is_empty() {
            rep.failures.push(format!(
                "listed in EXPECTED_FAILURES ({why}) but passes: remove it from the list"
            ));
        } else {
            rep.expected_failures = std::mem::take(&mut rep.failures);
        }
    }
    rep
}

fn catch<T>(what: &str, f: impl FnOnce() -> Result<T>) -> std::result::Result<Result<T>, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|e| {
        let msg = e
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| e.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".into());
        format!("{what} panicked: {msg}")
    })
}

/// The samples of `op` for `dtype` and `shape` that the reference accepts and where some
/// tensor operand has `dtype`; with `same_result`, only those whose result is `dtype` too.
fn samples(
    op: &OpInfo,
    dtype: DType,
    shape: &[usize],
    seed: u64,
    same_result: bool,
) -> Vec<Sample> {
    let mut ctx = SampleCtx::new(dtype, shape.to_vec(), seed);
    let mut rng = Rng::new(mix(&[seed, 0x5300_7711]));
    (op.sampler)(&mut ctx)
        .into_iter()
        .filter(|s| {
            let e = op.expected(s);
            e.supported
                && (e.result == dtype || !same_result)
                && s.args
                    .iter()
                    .any(|a| matches!(a, SampleArg::Tensor { dtype: d, .. } if *d == dtype))
                && s.args
                    .iter()
                    .map(|a| match a {
                        SampleArg::Tensor {
                            dtype: d, shape, ..
                        } if *d == dtype => numel(shape),
                        _ => 0,
                    })
                    .sum::<usize>()
                    <= MAX_CASE_NUMEL
                && reference_shape(op, s).is_some_and(|o| numel(&o) <= MAX_CASE_NUMEL)
        })
        .map(|s| smooth(op, s, &mut rng))
        .collect()
}

/// Redraws, without specials and grid, the values of operands whose domain has them.
fn smooth(op: &OpInfo, mut s: Sample, rng: &mut Rng) -> Sample {
    for (i, a) in s.args.iter_mut().enumerate() {
        let (Some(spec), SampleArg::Tensor { dtype, values, .. }) = (op.args.get(i), a) else {
            continue;
        };
        if spec.kind != ArgKind::Tensor || !dtype.is_float() {
            continue;
        }
        if spec.domain.specials || spec.domain.grid.is_some() {
            let mut d = spec.domain;
            d.specials = false;
            d.grid = None;
            *values = d.values(*dtype, values.len(), rng, false);
        }
    }
    s
}

/// The base shapes: a matrix, and a 3-D one for the permuted layout (which needs 3 dims).
fn shapes(kind: LayoutKind, exhaustive: bool) -> Vec<Vec<usize>> {
    if exhaustive {
        vec![vec![3, 4], vec![2, 3, 2]]
    } else if kind == LayoutKind::Permuted {
        vec![vec![2, 3, 2]]
    } else {
        vec![vec![3, 4]]
    }
}

/// One gradcheck case: the leaves handed to gradcheck (every tensor operand; those of the
/// checked dtype require grad) and how to turn them back into the op's operands.
struct Case {
    leaves: Vec<Tensor>,
    /// Per sample operand: `Some(k)` → leaf `k` (expanded to the shape when given).
    slots: Vec<(Option<usize>, Option<Vec<i64>>)>,
    sample: Sample,
}

impl Case {
    fn new(sample: &Sample, kind: LayoutKind, dtype: DType, device: &Device) -> Result<Case> {
        let mut leaves = vec![];
        let mut slots = vec![];
        for a in &sample.args {
            match a {
                SampleArg::Scalar(_) => slots.push((None, None)),
                SampleArg::Tensor {
                    dtype: d,
                    shape,
                    values,
                } => {
                    let diff = *d == dtype;
                    // operands that are not differentiated (indices, masks) stay contiguous:
                    // their layouts are the conformance runner's business
                    let k = if diff { kind } else { LayoutKind::Contiguous };
                    let spec = plan(k, shape)
                        .or_else(|| plan(LayoutKind::Contiguous, shape))
                        .expect("contiguous always applies");
                    let expanded: Vec<usize> = (0..shape.len())
                        .filter(|&i| shape[i] > 1 && spec.strides[i] == 0)
                        .collect();
                    let (leaf, expand) = if expanded.is_empty() {
                        (build(&spec, values, *d, device)?.tensor, None)
                    } else {
                        // a leaf of size 1 along the broadcast dims, expanded inside the call
                        let full = project(&spec, values);
                        let c = plan(LayoutKind::Contiguous, shape).expect("contiguous");
                        let mut t = build(&c, &full, *d, device)?.tensor;
                        for &i in &expanded {
                            t = t.narrow(i as i64, 0, 1)?;
                        }
                        let sizes = shape.iter().map(|&n| n as i64).collect();
                        (t.contiguous()?, Some(sizes))
                    };
                    let leaf = if diff {
                        leaf.requires_grad_(true)?
                    } else {
                        leaf
                    };
                    slots.push((Some(leaves.len()), expand));
                    leaves.push(leaf);
                }
            }
        }
        Ok(Case {
            leaves,
            slots,
            sample: sample.clone(),
        })
    }

    /// The op's operands from (perturbed) leaves.
    fn args(&self, xs: &[Tensor]) -> Result<Vec<Arg>> {
        self.slots
            .iter()
            .zip(&self.sample.args)
            .map(|(slot, a)| match (slot, a) {
                ((Some(k), None), _) => Ok(Arg::Tensor(xs[*k].clone())),
                ((Some(k), Some(s)), _) => Ok(Arg::Tensor(xs[*k].expand(s)?)),
                (_, SampleArg::Scalar(s)) => Ok(Arg::Scalar(*s)),
                _ => unreachable!("tensor operands have a leaf"),
            })
            .collect()
    }
}

/// The output re-viewed so that the gradient flowing into the op is non-contiguous: a
/// transpose for 2+ dims, one half of a stack (a stride-2 gradient) for 1 dim.
fn noncontiguous_grad(y: Tensor) -> Result<Tensor> {
    match y.dim() {
        0 => Ok(y),
        1 => Tensor::stack(&[&y, &y.zeros_like(MemoryFormat::Contiguous)?], 1),
        n => y.transpose(0, n as i64 - 1),
    }
}

fn describe(sample: &Sample) -> String {
    let args: Vec<String> = sample
        .args
        .iter()
        .map(|a| match a {
            SampleArg::Tensor { dtype, shape, .. } => format!("{dtype}{shape:?}"),
            SampleArg::Scalar(s) => format!("{s:?}"),
        })
        .collect();
    format!("({}) {}", args.join(", "), sample.params)
}

fn sweep_op(op: &OpInfo, config: &GradConfig, rep: &mut OpGradReport) {
    let dtype = DType::F64;
    let Some(functional) = op.functional.clone() else {
        rep.failures
            .push(format!("marked {:?} but has no functional form", op.grad));
        return;
    };
    if !op.dtypes.contains(&dtype) {
        rep.failures
            .push(format!("marked {:?} but does not claim f64", op.grad));
        return;
    }
    let base = hash_str(op.name) ^ config.seed;
    let opts = GradcheckOptions::default();
    // gradgradcheck: contiguous and transposed (exhaustive: every layout)
    let gg_kinds = [LayoutKind::Contiguous, LayoutKind::Transposed];
    for (li, kind) in LayoutKind::ALL.into_iter().enumerate() {
        for shape in shapes(kind, config.exhaustive) {
            let seed = mix(&[base, kind as u64, numel(&shape) as u64]);
            let all = samples(op, dtype, &shape, seed, true);
            if all.is_empty() {
                continue;
            }
            let picked: Vec<&Sample> = if config.exhaustive {
                all.iter().collect()
            } else {
                (0..SAMPLES_PER_LAYOUT.min(all.len()))
                    .map(|j| &all[(li * SAMPLES_PER_LAYOUT + j) % all.len()])
                    .collect()
            };
            for sample in picked {
                let case = match Case::new(sample, kind, dtype, &config.device) {
                    Ok(c) => c,
                    Err(e) => {
                        rep.failures.push(format!(
                            "[{}] {}: building the operands: {e}",
                            kind.name(),
                            describe(sample)
                        ));
                        continue;
                    }
                };
                let nc = kind != LayoutKind::Contiguous;
                // the rounding term of the error bound: each evaluation of f is off by
                // k·u·(|f| + |x|·|∂f/∂x|) — the second part is the inputs' own rounding
                // (u·|x|) carried through f — and for the registry's ops |∂f/∂x| ≤ max(1, |f|)
                // elementwise, so k·u·|f|·(1 + max|x|) bounds it (softmax of values near 10⁴)
                let max_abs = case
                    .sample
                    .args
                    .iter()
                    .filter_map(|a| match a {
                        SampleArg::Tensor {
                            dtype: d, values, ..
                        } if *d == dtype => Some(values.iter().fold(0.0f64, |m, v| m.max(v.abs()))),
                        _ => None,
                    })
                    .fold(0.0f64, f64::max);
                let opts = GradcheckOptions {
                    rounding: opts.rounding * (1.0 + max_abs),
                    ..opts
                };
                let finite_inputs = case.sample.args.iter().all(|a| match a {
                    SampleArg::Tensor {
                        dtype: d, values, ..
                    } if *d == dtype => values.iter().all(|v| v.is_finite()),
                    _ => true,
                });
                let y0 = catch("the op", || {
                    let _g = autograd::enable_grad();
                    functional(&case.args(&case.leaves)?, &case.sample.params)
                });
                match &y0 {
                    Ok(Err(stride_core::Error::NotViewable { .. })) => {
                        rep.skipped += 1;
                        continue;
                    }
                    Ok(Ok(y))
                        if !finite_inputs
                            || y.dtype() == dtype
                                && !y
                                    .to_f64_vec()
                                    .map(|v| v.iter().all(|x| x.is_finite()))
                                    .unwrap_or(true) =>
                    {
                        rep.skipped += 1;
                        continue;
                    }
                    _ => {}
                }
                let f = |xs: &[Tensor]| -> Result<Tensor> {
                    let y = functional(&case.args(xs)?, &case.sample.params)?;
                    if y.dtype() != dtype {
                        return Err(stride_core::Error::Invalid {
                            op: "gradcheck sweep",
                            msg: format!("the op returned {}, the registry expects f64", y.dtype()),
                        });
                    }
                    if nc {
                        noncontiguous_grad(y)
                    } else {
                        Ok(y)
                    }
                };
                let mut record = |what: &str, r: std::result::Result<Result<()>, String>| match r {
                    Ok(Ok(())) => {}
                    Ok(Err(stride_core::Error::NotImplemented { .. })) => rep.not_implemented += 1,
                    Ok(Err(e)) => rep.failures.push(format!(
                        "{what} [{}] {}: {e}",
                        kind.name(),
                        describe(sample)
                    )),
                    Err(p) => rep.failures.push(format!(
                        "{what} [{}] {}: {p}",
                        kind.name(),
                        describe(sample)
                    )),
                };
                rep.gradchecks += 1;
                record(
                    "gradcheck",
                    catch("gradcheck", || {
                        let _g = autograd::enable_grad();
                        gradcheck(f, &case.leaves, opts)
                    }),
                );
                if op.grad == Grad::Twice && (config.exhaustive || gg_kinds.contains(&kind)) {
                    rep.gradgradchecks += 1;
                    record(
                        "gradgradcheck",
                        catch("gradgradcheck", || {
                            let _g = autograd::enable_grad();
                            gradgradcheck(f, &case.leaves, opts)
                        }),
                    );
                }
            }
        }
    }
    if rep.gradchecks == 0 {
        rep.failures.push(format!(
            "marked {:?} but its sampler gives no f64 case to gradcheck",
            op.grad
        ));
    }
}

/// A `No` entry: its functional result must not require grad when its float operands do.
fn probe_no_grad(op: &OpInfo, config: &GradConfig) -> std::result::Result<(), String> {
    let Some(functional) = op.functional.clone() else {
        return Ok(());
    };
    let Some(&dtype) = [DType::F64, DType::F32, DType::F16, DType::BF16]
        .iter()
        .find(|d| op.dtypes.contains(d))
    else {
        return Ok(());
    };
    let seed = hash_str(op.name) ^ config.seed;
    for sample in samples(op, dtype, &[3, 4], seed, false).iter().take(2) {
        let case = Case::new(sample, LayoutKind::Contiguous, dtype, &config.device)
            .map_err(|e| format!("building the operands of {}: {e}", describe(sample)))?;
        let y = match catch("the op", || {
            let _g = autograd::enable_grad();
            functional(&case.args(&case.leaves)?, &sample.params)
        })? {
            Ok(y) => y,
            Err(_) => continue,
        };
        if y.requires_grad() {
            return Err(format!(
                "marked No, but its result requires grad for {} (it records a backward: mark the entry Once or Twice so it is gradchecked)",
                describe(sample)
            ));
        }
    }
    Ok(())
}
