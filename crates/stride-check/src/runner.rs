//! The runner: every registered op × form × dtype × layout × size, checked against its
//! registry entry. [`run_case`] is one call with every check; [`run_ops`] walks the matrix.
//!
//! One case, step by step:
//! 1. build each tensor operand in its layout (guards around it), and for `_out` forms an
//!    output in its layout with every viewed element **poisoned**;
//! 2. ask the reference (and the dtype rule) what must happen — a result, or an error
//!    (unclaimed dtype, invalid arguments, an in-place result that can't be cast into or
//!    doesn't have `self`'s shape, an overlapping output);
//! 3. call the op (panics are caught and reported);
//! 4. check: error vs success, dtype, shape, that in-place/`_out` return their destination,
//!    storage sharing (views share, copies don't), strides where the op defines them,
//!    values within the dtype's tolerance, every guard intact, every output element written,
//!    and every input storage unchanged (on failure: every operand unchanged).

use crate::host::{guard, poison, read_storage, same, short, store};
use crate::layouts::{build, plan, Built, LayoutKind, LayoutSpec};
use crate::promote::can_cast;
use crate::reference::{
    broadcast_shapes, contiguous_strides, numel, positions, unravel, RefArg, RefCtx, RefOut,
    RefTensor,
};
use crate::registry::{self, Arg, ArgDType, ArgKind, Form, OpInfo, Sample, SampleArg, SampleCtx};
use crate::report::{Failure, Key, OperandDesc, Reason, Recorder, Report};
use crate::rng::{hash_str, mix};
use crate::sizes::{sampled_shapes, sweep_shapes, CORE};
use crate::tol::Tol;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;
use stride_core::{DType, Device, Tensor};

/// Sweep shapes each (op, form, dtype, layout) combination gets in the default (sampled)
/// run, besides its core shape.
pub const SWEEP_SHAPES_PER_COMBINATION: usize = 4;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub device: Device,
    /// Every sweep shape for every combination (else a rotating sample of it).
    pub full: bool,
    /// Op names (`add`, or `add.scalar` for one variant); empty runs every op.
    pub ops: Vec<String>,
    pub seed: u64,
    /// Print one line per op to stderr as it finishes.
    pub progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            device: Device::Cpu,
            full: false,
            ops: vec![],
            seed: 0x5712_1DE5,
            progress: false,
        }
    }
}

/// Whether `device` can run ops in this build (else the error, in words).
pub fn device_available(device: &Device) -> Result<(), String> {
    Tensor::zeros([1], DType::F32, device)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Runs the registry (filtered by `config.ops`) on `config.device`.
pub fn run(config: &Config) -> Report {
    let ops: Vec<&OpInfo> = if config.ops.is_empty() {
        registry::all().iter().collect()
    } else {
        config
            .ops
            .iter()
            .flat_map(|n| registry::select(n))
            .collect()
    };
    run_ops(config, ops)
}

/// Runs the given entries (registry entries or test-only ones).
pub fn run_ops<'a>(config: &Config, ops: impl IntoIterator<Item = &'a OpInfo>) -> Report {
    let start = Instant::now();
    let ops: Vec<&OpInfo> = ops.into_iter().collect();
    let mut report = Report::new(config.device, config.full);
    if let Err(e) = device_available(&config.device) {
        report.device_error = Some(e);
        return report;
    }

    let recs: Vec<Recorder> = ops
        .par_iter()
        .map(|op| {
            let t = Instant::now();
            let r = run_op(op, config);
            if config.progress {
                let (p, f) = r.totals();
                eprintln!(
                    "  {:<28} {:>7} checks  {:>4} failed  {:>6.1}s",
                    op.name,
                    p + f,
                    f,
                    t.elapsed().as_secs_f64()
                );
            }
            r
        })
        .collect();
    for r in recs {
        report.merge(r);
    }
    // cases the device refused with `NotImplemented`, by op (counted in their rows too)
    report.not_implemented = BTreeMap::new();
    for (k, r) in &report.rows {
        if r.not_implemented > 0 {
            *report.not_implemented.entry(k.op.clone()).or_default() += r.not_implemented;
        }
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    report
}

/// Which layout each tensor slot of a case gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Per operand (`None` for scalars).
    pub args: Vec<Option<LayoutChoice>>,
    /// The `_out` output's layout.
    pub out: Option<LayoutChoice>,
    /// Operands that are the same tensor, or views of the same storage.
    pub alias: Alias,
}

/// Aliasing between operands and the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Alias {
    #[default]
    None,
    /// In place, operand `i` is `self` itself (`x.add_(&x)`).
    SelfAsArg(usize),
    /// `_out` into operand 0 itself (`x.neg_out(&x)`).
    OutIsArg0,
    /// `_out` into the transpose of (square) operand 0: the output partially aliases an
    /// input, so the op must read every input element before writing any.
    OutIsArg0Transposed,
}

/// A layout kind (planned for the operand's shape) or an explicit layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutChoice {
    Kind(LayoutKind),
    Explicit(LayoutSpec),
}

impl Assignment {
    /// Every tensor operand (and the output) contiguous.
    pub fn contiguous(sample: &Sample, form: Form) -> Assignment {
        Assignment {
            args: sample
                .args
                .iter()
                .map(|a| {
                    matches!(a, SampleArg::Tensor { .. })
                        .then_some(LayoutChoice::Kind(LayoutKind::Contiguous))
                })
                .collect(),
            out: (form == Form::Out).then_some(LayoutChoice::Kind(LayoutKind::Contiguous)),
            alias: Alias::None,
        }
    }
}

fn op_has_tensor_args(op: &OpInfo) -> bool {
    op.args.iter().any(|a| a.kind == ArgKind::Tensor)
}

fn shape_hash(s: &[usize]) -> u64 {
    mix(&s
        .iter()
        .map(|&n| n as u64 + 1)
        .chain([s.len() as u64])
        .collect::<Vec<_>>())
}

fn run_op(op: &OpInfo, config: &Config) -> Recorder {
    let mut rec = Recorder::default();
    let base = hash_str(op.name) ^ config.seed;
    let mut counter = hash_str(op.name) as usize % 1000;
    let kinds: Vec<LayoutKind> = if op_has_tensor_args(op) {
        LayoutKind::ALL.to_vec()
    } else {
        vec![LayoutKind::Contiguous]
    };
    for form in op.forms() {
        for &dtype in &op.dtypes {
            for &kind in &kinds {
                let shapes = if config.full {
                    let mut s: Vec<Vec<usize>> = CORE.iter().map(|c| c.to_vec()).collect();
                    s.extend(sweep_shapes());
                    s
                } else {
                    sampled_shapes(counter, SWEEP_SHAPES_PER_COMBINATION)
                };
                counter += 1;
                for (si, shape) in shapes.into_iter().enumerate() {
                    let detailed = si == 0 || (config.full && si < CORE.len());
                    let seed = mix(&[
                        base,
                        form as u64,
                        dtype as u64,
                        kind as u64,
                        shape_hash(&shape),
                    ]);
                    let mut ctx = SampleCtx::new(dtype, shape, seed);
                    ctx.variants = detailed;
                    for sample in (op.sampler)(&mut ctx) {
                        for (asg, label) in scenarios(op, form, &sample, kind, detailed) {
                            if let Some(o) =
                                run_case_outcome(op, form, &sample, &asg, &config.device)
                            {
                                rec.record_outcome(
                                    key(op, form, label, &sample, op.expected(&sample).key),
                                    o,
                                );
                            }
                        }
                    }
                }
            }
        }
        // every unclaimed dtype must be refused
        if op
            .args
            .iter()
            .any(|a| a.kind == ArgKind::Tensor && a.promotes)
        {
            for dtype in DType::ALL.into_iter().filter(|d| !op.dtypes.contains(d)) {
                let mut ctx = SampleCtx::new(dtype, vec![2, 3], mix(&[base, 1, dtype as u64]));
                ctx.variants = false;
                for sample in (op.sampler)(&mut ctx) {
                    let asg = Assignment::contiguous(&sample, form);
                    if let Some(o) = run_case_outcome(op, form, &sample, &asg, &config.device) {
                        rec.record_outcome(key(op, form, "rejects", &sample, dtype), o);
                    }
                }
            }
        }
        for sample in mixed_samples(op, form, base) {
            let asg = Assignment::contiguous(&sample, form);
            if let Some(o) = run_case_outcome(op, form, &sample, &asg, &config.device) {
                rec.record_outcome(key(op, form, "mixed", &sample, op.expected(&sample).key), o);
            }
        }
    }
    rec
}

fn key(op: &OpInfo, form: Form, layout: &str, sample: &Sample, dtype: DType) -> Key {
    Key {
        op: op.name.to_string(),
        form,
        layout: layout.to_string(),
        dtype: sample
            .label
            .clone()
            .unwrap_or_else(|| short(dtype).to_string()),
    }
}

/// Mixed-dtype cases (contiguous, a small shape): every dtype pair over the operands, a 0-d
/// second operand, each scalar kind, and `_out` outputs of another dtype than the result's.
pub fn mixed_samples(op: &OpInfo, form: Form, seed: u64) -> Vec<Sample> {
    let mut out = vec![];
    let tensors: Vec<usize> = (0..op.args.len())
        .filter(|&i| op.args[i].kind == ArgKind::Tensor && op.args[i].promotes)
        .collect();
    let scalars: Vec<usize> = (0..op.args.len())
        .filter(|&i| op.args[i].kind == ArgKind::Scalar)
        .collect();
    let fixed = |i: usize| match op.args[i].dtype {
        ArgDType::Fixed(d) => Some(d),
        ArgDType::Primary => None,
    };
    let shape = vec![4, 3];
    let mut gen = |dtypes: Vec<DType>,
                   shapes: Option<Vec<Vec<usize>>>,
                   primary: DType,
                   label: String,
                   out_dtype: Option<DType>| {
        let mut ctx = SampleCtx::new(primary, shape.clone(), mix(&[seed, hash_str(&label)]));
        ctx.variants = false;
        ctx.tame = true;
        ctx.arg_dtypes = Some(dtypes);
        ctx.arg_shapes = shapes;
        for mut s in (op.sampler)(&mut ctx) {
            s.label = Some(label.clone());
            s.out_dtype = out_dtype;
            out.push(s);
        }
    };
    if op.promotion && tensors.len() >= 2 {
        for d1 in DType::ALL {
            for d2 in DType::ALL.into_iter().filter(|&d| d != d1) {
                let dts: Vec<DType> = (0..op.args.len())
                    .map(|i| fixed(i).unwrap_or(if i == tensors[0] { d1 } else { d2 }))
                    .collect();
                gen(
                    dts.clone(),
                    None,
                    d1,
                    format!("{},{}", short(d1), short(d2)),
                    None,
                );
                let shapes: Vec<Vec<usize>> = (0..op.args.len())
                    .map(|i| {
                        if tensors.contains(&i) && i != tensors[0] {
                            vec![]
                        } else {
                            shape.clone()
                        }
                    })
                    .collect();
                gen(
                    dts,
                    Some(shapes),
                    d1,
                    format!("{},{}(0d)", short(d1), short(d2)),
                    None,
                );
            }
        }
    }
    if op.promotion && !scalars.is_empty() && !tensors.is_empty() {
        for d in DType::ALL {
            for (kind, name) in [
                (DType::Bool, "bool"),
                (DType::I64, "int"),
                (DType::F32, "float"),
            ] {
                let dts: Vec<DType> = (0..op.args.len())
                    .map(|i| fixed(i).unwrap_or(if scalars.contains(&i) { kind } else { d }))
                    .collect();
                gen(dts, None, d, format!("{},{}-scalar", short(d), name), None);
            }
        }
    }
    if form == Form::Out && !tensors.is_empty() {
        for &d in &op.dtypes {
            for od in [DType::F64, DType::F16, DType::I64, DType::U8, DType::Bool] {
                let dts: Vec<DType> = (0..op.args.len()).map(|i| fixed(i).unwrap_or(d)).collect();
                gen(
                    dts,
                    None,
                    d,
                    format!("{}->out:{}", short(d), short(od)),
                    Some(od),
                );
            }
        }
    }
    out
}

/// The layout assignments of one sample for one layout kind: all operands in that kind
/// (outputs never expanded), then — with `detailed` — each operand alone in it, which
/// includes the destination expanded (must be refused as overlapping).
pub fn scenarios(
    op: &OpInfo,
    form: Form,
    sample: &Sample,
    kind: LayoutKind,
    detailed: bool,
) -> Vec<(Assignment, &'static str)> {
    let shapes: Vec<Option<&[usize]>> = sample
        .args
        .iter()
        .map(|a| match a {
            SampleArg::Tensor { shape, .. } => Some(shape.as_slice()),
            SampleArg::Scalar(_) => None,
        })
        .collect();
    let present: Vec<&[usize]> = shapes.iter().flatten().copied().collect();
    // the `_out` output is planned for the shape it will have (a gather's or a reduction's
    // differs from its operands'), else a layout kind could be skipped for it
    let out_shape = match form {
        Form::Out => reference_shape(op, sample),
        _ => None,
    }
    .or_else(|| broadcast_shapes(&present))
    .unwrap_or_default();
    // slots: (index: Some(arg) / None = out, shape, is_dest)
    let mut slots: Vec<(Option<usize>, &[usize], bool)> = vec![];
    for (i, s) in shapes.iter().enumerate() {
        if let Some(s) = s {
            slots.push((Some(i), s, form == Form::InPlace && i == 0));
        }
    }
    if form == Form::Out {
        slots.push((None, &out_shape, true));
    }
    let c = LayoutChoice::Kind(LayoutKind::Contiguous);
    let pick = |slot: &(Option<usize>, &[usize], bool), k: LayoutKind, alone: bool| {
        let writable_ok = k != LayoutKind::Expanded || !slot.2 || alone;
        if k.applies(slot.1) && writable_ok {
            LayoutChoice::Kind(k)
        } else {
            c.clone()
        }
    };
    let make = |f: &dyn Fn(usize) -> LayoutChoice| {
        let mut a = Assignment {
            args: vec![None; sample.args.len()],
            out: None,
            alias: Alias::None,
        };
        for (j, s) in slots.iter().enumerate() {
            match s.0 {
                Some(i) => a.args[i] = Some(f(j)),
                None => a.out = Some(f(j)),
            }
        }
        a
    };
    let mut v: Vec<Assignment> = vec![];
    let all = make(&|j| pick(&slots[j], kind, false));
    let any_in_kind = all
        .args
        .iter()
        .flatten()
        .chain(all.out.iter())
        .any(|l| *l == LayoutChoice::Kind(kind));
    if kind == LayoutKind::Contiguous || any_in_kind || slots.is_empty() {
        v.push(all.clone());
    }
    if detailed && kind != LayoutKind::Contiguous {
        for s in 0..slots.len() {
            let alone_matters = slots.len() > 1 || (slots[s].2 && kind == LayoutKind::Expanded);
            if !alone_matters || !kind.applies(slots[s].1) {
                continue;
            }
            let one = make(&|j| {
                if j == s {
                    pick(&slots[j], kind, true)
                } else {
                    c.clone()
                }
            });
            if !v.contains(&one) {
                v.push(one);
            }
        }
    }
    let mut out: Vec<(Assignment, &'static str)> =
        v.into_iter().map(|a| (a, kind.name())).collect();
    // aliasing: operands that are the destination, in this kind's layout
    if detailed && kind != LayoutKind::Expanded && !slots.is_empty() && slots[0].0 == Some(0) {
        let mut aliases = vec![];
        match form {
            // self's values must be valid for the operand it stands in for (a divisor, an exponent, …)
            Form::InPlace => aliases.extend(
                slots
                    .iter()
                    .skip(1)
                    .filter_map(|s| s.0)
                    .filter(|&i| {
                        op.args.get(i).map(|a| a.domain) == op.args.first().map(|a| a.domain)
                    })
                    .map(Alias::SelfAsArg),
            ),
            Form::Out => aliases.extend([Alias::OutIsArg0, Alias::OutIsArg0Transposed]),
            Form::Functional => {}
        }
        for alias in aliases {
            out.push((
                Assignment {
                    alias,
                    ..all.clone()
                },
                "aliased",
            ));
        }
    }
    out
}

/// The result shape the reference gives for `sample` (operands contiguous), if it gives one.
pub(crate) fn reference_shape(op: &OpInfo, sample: &Sample) -> Option<Vec<usize>> {
    let exp = op.expected(sample);
    let tensors: Vec<Option<RefTensor>> = sample
        .args
        .iter()
        .map(|a| match a {
            SampleArg::Tensor {
                dtype,
                shape,
                values,
            } => Some(RefTensor {
                dtype: *dtype,
                shape: shape.clone(),
                values: values.clone(),
                strides: contiguous_strides(shape),
                offset: 0,
                storage: values.clone(),
            }),
            SampleArg::Scalar(_) => None,
        })
        .collect();
    let args: Vec<RefArg> = sample
        .args
        .iter()
        .zip(&tensors)
        .map(|(a, t)| match (a, t) {
            (_, Some(t)) => RefArg::Tensor(t),
            (SampleArg::Scalar(s), None) => RefArg::Scalar(*s),
            _ => unreachable!(),
        })
        .collect();
    let ctx = RefCtx {
        compute: exp.compute,
        result: exp.result,
        arg_compute: exp.arg_compute.clone(),
        params: &sample.params,
    };
    catch_unwind(AssertUnwindSafe(|| (op.reference)(&ctx, &args)))
        .ok()?
        .ok()
        .map(|r| r.shape)
}

fn spec_for(choice: &LayoutChoice, shape: &[usize]) -> LayoutSpec {
    match choice {
        LayoutChoice::Kind(k) => plan(*k, shape).unwrap_or_else(|| {
            plan(LayoutKind::Contiguous, shape).expect("contiguous always applies")
        }),
        LayoutChoice::Explicit(s) => s.clone(),
    }
}

fn describe(role: &str, b: &Built) -> OperandDesc {
    OperandDesc {
        role: role.to_string(),
        dtype: Some(b.tensor.dtype()),
        layout: b.spec.name().to_string(),
        shape: b.spec.shape.clone(),
        strides: b.spec.strides.clone(),
        offset: b.spec.offset,
        storage_len: b.spec.storage_len,
        scalar: None,
    }
}

fn panic_message(e: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = e.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = e.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".into()
    }
}

/// First storage position where `after` differs from `before` (restricted to `outside` when
/// given: positions not in the view).
fn first_change(
    before: &[f64],
    after: &[f64],
    skip: Option<&[bool]>,
) -> Option<(usize, f64, f64, usize)> {
    let mut first = None;
    let mut count = 0;
    for (p, (&b, &a)) in before.iter().zip(after).enumerate() {
        if skip.is_some_and(|s| s.get(p).copied().unwrap_or(false)) {
            continue;
        }
        if !same(b, a) {
            count += 1;
            if first.is_none() {
                first = Some((p, b, a));
            }
        }
    }
    if after.len() != before.len() {
        return Some((before.len().min(after.len()), f64::NAN, f64::NAN, 1));
    }
    first.map(|(p, b, a)| (p, b, a, count))
}

/// Runs one case with every check. `None` when the case does not apply (an in-place form
/// whose first operand is a scalar) or the device has no kernel for it (see
/// [`run_case_outcome`], which tells these apart). `Some(Ok(()))` is a pass.
pub fn run_case(
    op: &OpInfo,
    form: Form,
    sample: &Sample,
    asg: &Assignment,
    device: &Device,
) -> Option<Result<(), Failure>> {
    match run_case_outcome(op, form, sample, asg, device)? {
        Outcome::Failed(f) => Some(Err(f)),
        Outcome::NotImplemented | Outcome::DeviceLacksDType => None,
        Outcome::Checked | Outcome::Refused => Some(Ok(())),
    }
}

/// How one case ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The op ran and every check of its result passed.
    Checked,
    /// The op had to fail (unclaimed dtype, invalid arguments, overlapping output, …), did,
    /// and left every operand unchanged. A pass, but no value was checked.
    Refused,
    /// The device has no kernel for it (`Error::NotImplemented`): not run, never a pass.
    NotImplemented,
    /// The case needs a dtype the device cannot hold ([`Device::holds`]: f64 on wgpu): not
    /// run, never a pass, not a failure — a documented limit of the device.
    DeviceLacksDType,
    Failed(Failure),
}

/// [`run_case`], saying how the case ended. `None` when the case does not apply.
pub fn run_case_outcome(
    op: &OpInfo,
    form: Form,
    sample: &Sample,
    asg: &Assignment,
    device: &Device,
) -> Option<Outcome> {
    let mut how = CaseEnd::default();
    let r = case(op, form, sample, asg, device, &mut how);
    if how
        .device_lacks
        .is_some_and(|d| visibly_needs(op, sample, d))
    {
        return Some(Outcome::DeviceLacksDType);
    }
    if how.not_implemented {
        return Some(Outcome::NotImplemented);
    }
    r.map(|r| match r {
        Ok(()) if how.refused => Outcome::Refused,
        Ok(()) => Outcome::Checked,
        Err(f) => Outcome::Failed(f),
    })
}

/// What [`case`] tells [`run_case_outcome`] besides pass/fail.
#[derive(Default)]
struct CaseEnd {
    refused: bool,
    not_implemented: bool,
    /// The device refused to hold this dtype (`Error::DeviceLacksDType`).
    device_lacks: Option<DType>,
}

/// Whether the case itself asks for `dtype` (an operand, the output, the result or a
/// parameter): only then is the device's refusal of that dtype a limit rather than a bug
/// (an op must not make f64 temporaries of f32 inputs on a device without f64).
fn visibly_needs(op: &OpInfo, sample: &Sample, dtype: DType) -> bool {
    sample.args.iter().any(|a| match a {
        SampleArg::Tensor { dtype: d, .. } => *d == dtype,
        SampleArg::Scalar(_) => false,
    }) || sample.out_dtype == Some(dtype)
        || op.state_dtypes.contains(&dtype)
        || {
            let e = op.expected(sample);
            e.key == dtype || e.result == dtype || e.compute == dtype
        }
        || sample.params.to_string().contains(&dtype.to_string())
}

fn case(
    op: &OpInfo,
    form: Form,
    sample: &Sample,
    asg: &Assignment,
    device: &Device,
    how: &mut CaseEnd,
) -> Option<Result<(), Failure>> {
    let exp = op.expected(sample);
    let mut params = sample.params.clone();
    params.device = Some(*device);
    let role = |i: usize| {
        op.args
            .get(i)
            .map_or_else(|| format!("arg{i}"), |a| a.name.to_string())
    };
    let mut fail = Failure {
        op: op.name.to_string(),
        form,
        dtype: sample
            .label
            .clone()
            .unwrap_or_else(|| short(exp.key).to_string()),
        operands: vec![],
        params: params.to_string(),
        reason: Reason::Harness {
            message: String::new(),
        },
    };
    let harness = |mut f: Failure, m: String| {
        f.reason = Reason::Harness { message: m };
        Some(Err(f))
    };

    // 1. operands
    let mut built: Vec<Option<Built>> = vec![];
    let mut args: Vec<Arg> = vec![];
    for (i, a) in sample.args.iter().enumerate() {
        match a {
            SampleArg::Tensor {
                dtype,
                shape,
                values,
            } => {
                let choice = asg
                    .args
                    .get(i)
                    .cloned()
                    .flatten()
                    .unwrap_or(LayoutChoice::Kind(LayoutKind::Contiguous));
                let spec = spec_for(&choice, shape);
                let b = match build(&spec, values, *dtype, device) {
                    Ok(b) => b,
                    Err(e) => {
                        if let stride_core::Error::DeviceLacksDType { dtype, .. } = &e {
                            how.device_lacks = Some(*dtype);
                        }
                        return harness(fail, format!("could not build operand {i}: {e}"));
                    }
                };
                fail.operands.push(describe(&role(i), &b));
                args.push(Arg::Tensor(b.tensor.clone()));
                built.push(Some(b));
            }
            SampleArg::Scalar(s) => {
                fail.operands
                    .push(OperandDesc::scalar(&role(i), format!("{s:?}")));
                args.push(Arg::Scalar(*s));
                built.push(None);
            }
        }
    }
    if form == Form::InPlace && built.first().is_none_or(|b| b.is_none()) {
        return None;
    }
    if let Alias::SelfAsArg(i) = asg.alias {
        // operand i is `self` itself (it needs self's shape and dtype)
        let (b0, bi) = (built.first()?.as_ref()?, built.get(i)?.as_ref()?);
        if b0.spec.shape != bi.spec.shape || b0.tensor.dtype() != bi.tensor.dtype() {
            return None;
        }
        let b0 = b0.clone();
        fail.operands[i] = describe(&format!("{} (is self)", role(i)), &b0);
        args[i] = args[0].clone();
        built[i] = Some(b0);
    }
    let out_alias = matches!(asg.alias, Alias::OutIsArg0 | Alias::OutIsArg0Transposed);
    if out_alias && (form != Form::Out || built.first().is_none_or(|b| b.is_none())) {
        return None;
    }

    // 2. what must happen
    let refs: Vec<Option<RefTensor>> = built
        .iter()
        .map(|b| b.as_ref().map(|b| b.to_ref()))
        .collect();
    let ref_args: Vec<RefArg> = sample
        .args
        .iter()
        .zip(&refs)
        .map(|(a, r)| match (a, r) {
            (_, Some(t)) => RefArg::Tensor(t),
            (SampleArg::Scalar(s), None) => RefArg::Scalar(*s),
            _ => unreachable!(),
        })
        .collect();
    let ctx = RefCtx {
        compute: exp.compute,
        result: exp.result,
        arg_compute: exp.arg_compute.clone(),
        params: &params,
    };
    let reference: Result<RefOut, String> =
        match catch_unwind(AssertUnwindSafe(|| (op.reference)(&ctx, &ref_args))) {
            Ok(r) => r,
            Err(e) => {
                return harness(
                    fail,
                    format!("the reference panicked: {}", panic_message(e)),
                )
            }
        };
    let mut must_fail: Option<String> = None;
    if !exp.supported {
        must_fail = Some(format!("{} does not claim dtype {}", op.name, exp.key));
    }
    if let Err(m) = &reference {
        must_fail = must_fail.or(Some(m.clone()));
    }
    let present: Vec<&[usize]> = built
        .iter()
        .flatten()
        .map(|b| b.spec.shape.as_slice())
        .collect();
    let out_shape: Vec<usize> = match &reference {
        Ok(r) => r.shape.clone(),
        Err(_) => broadcast_shapes(&present)
            .unwrap_or_else(|| present.first().map(|s| s.to_vec()).unwrap_or_default()),
    };
    // the destination (in-place: operand 0; _out: a poisoned output)
    let mut out_built: Option<Built> = None;
    let dest_dtype = match form {
        Form::Functional => exp.result,
        Form::InPlace => {
            let d = built[0].as_ref().unwrap();
            if must_fail.is_none() && d.spec.shape != out_shape {
                must_fail = Some(format!(
                    "in place, self {:?} can't take the result's shape {:?}",
                    d.spec.shape, out_shape
                ));
            }
            d.tensor.dtype()
        }
        Form::Out if out_alias => built[0].as_ref().unwrap().tensor.dtype(),
        Form::Out => sample.out_dtype.unwrap_or(exp.result),
    };
    if form != Form::Functional
        && must_fail.is_none()
        && op.exact_dest_dtype
        && exp.result != dest_dtype
    {
        must_fail = Some(format!(
            "{} writes only into a {} destination, not {}",
            op.name, exp.result, dest_dtype
        ));
    }
    if form != Form::Functional && must_fail.is_none() && !can_cast(exp.result, dest_dtype) {
        must_fail = Some(format!(
            "a {} result can't be written into a {} tensor",
            exp.result, dest_dtype
        ));
    }
    let want: Option<Vec<f64>> = reference.as_ref().ok().map(|r| {
        r.values
            .iter()
            .map(|&v| store(store(v, exp.result), dest_dtype))
            .collect()
    });
    if form == Form::Out && out_alias {
        // the output is operand 0 itself, or its transpose (a partial alias)
        let b0 = built[0].as_ref().unwrap();
        let t = asg.alias == Alias::OutIsArg0Transposed;
        let sh = &b0.spec.shape;
        if *sh != out_shape || (t && !(sh.len() == 2 && sh[0] == sh[1] && sh[0] > 1)) {
            return None;
        }
        let mut b = b0.clone();
        if t {
            b.tensor = match b0.tensor.transpose(0, 1) {
                Ok(x) => x,
                Err(e) => return harness(fail, format!("could not transpose operand 0: {e}")),
            };
            b.spec.strides.swap(0, 1);
            let n = sh[0];
            b.values = (0..n * n).map(|k| b0.values[(k % n) * n + k / n]).collect();
        }
        fail.operands.push(describe(
            if t {
                "out (is self.t())"
            } else {
                "out (is self)"
            },
            &b,
        ));
        out_built = Some(b);
    } else if form == Form::Out {
        let choice = asg
            .out
            .clone()
            .unwrap_or(LayoutChoice::Kind(LayoutKind::Contiguous));
        let spec = spec_for(&choice, &out_shape);
        let n = numel(&out_shape);
        let values: Vec<f64> = (0..n)
            .map(|i| {
                poison(
                    dest_dtype,
                    want.as_ref().filter(|w| w.len() == n).map(|w| w[i]),
                )
            })
            .collect();
        let b = match build(&spec, &values, dest_dtype, device) {
            Ok(b) => b,
            Err(e) => {
                if let stride_core::Error::DeviceLacksDType { dtype, .. } = &e {
                    how.device_lacks = Some(*dtype);
                }
                return harness(fail, format!("could not build the output: {e}"));
            }
        };
        fail.operands.push(describe("out", &b));
        out_built = Some(b);
    }
    let dest: Option<&Built> = match form {
        Form::Functional => None,
        Form::InPlace => built[0].as_ref(),
        Form::Out => out_built.as_ref(),
    };
    if let Some(d) = dest {
        if must_fail.is_none() && d.spec.overlapping() {
            must_fail =
                Some("writing into an output whose elements share memory must be refused".into());
        }
    }

    // 3. the call. A case that must fail expects the error at the op: on a GPU a check that
    // needs the data would otherwise report at the next read of the device, from whichever
    // thread of this run reads first. Every other case runs its checks on the device.
    let _immediate = must_fail.is_some().then(stride_core::sync_checks_here);
    let call = || -> stride_core::Result<Tensor> {
        match form {
            Form::Functional => (op.functional.as_ref().expect("form exists"))(&args, &params),
            Form::InPlace => (op.inplace.as_ref().expect("form exists"))(&args, &params),
            Form::Out => (op.out.as_ref().expect("form exists"))(
                &args,
                &params,
                &out_built.as_ref().unwrap().tensor,
            ),
        }
    };
    let got = match catch_unwind(AssertUnwindSafe(call)) {
        Ok(r) => r,
        Err(e) => {
            fail.reason = Reason::Panicked {
                message: panic_message(e),
            };
            return Some(Err(fail));
        }
    };

    if let Err(stride_core::Error::DeviceLacksDType { dtype, .. }) = &got {
        how.device_lacks = Some(*dtype);
    }
    if let Err(stride_core::Error::NotImplemented { .. }) = &got {
        // no kernel on this device yet: counted apart, never a pass (see
        // `Report::not_implemented`)
        how.not_implemented = true;
        return None;
    }

    // 4. checks
    let all_operands: Vec<(&str, &Built)> = built
        .iter()
        .enumerate()
        .filter_map(|(i, b)| b.as_ref().map(|b| (i, b)))
        .map(|(i, b)| (op.args.get(i).map_or("arg", |a| a.name), b))
        .chain(out_built.as_ref().map(|b| ("out", b)))
        .collect();
    let unchanged = |list: &[(&str, &Built)], skip_dest: bool| -> Result<(), Reason> {
        for (name, b) in list {
            if skip_dest && dest.is_some_and(|d| d.tensor.shares_storage_with(&b.tensor)) {
                continue;
            }
            let after = read_storage(&b.tensor).map_err(|e| Reason::Harness {
                message: format!("reading {name}: {e}"),
            })?;
            if let Some((p, was, now, count)) = first_change(&b.storage, &after, None) {
                return Err(Reason::InputModified {
                    operand: name.to_string(),
                    storage_index: p,
                    was,
                    now,
                    count,
                });
            }
        }
        Ok(())
    };
    let result = match (got, &must_fail) {
        (Err(e), Some(_)) => {
            // refused as it must be: nothing may have been written
            how.refused = true;
            return Some(match unchanged(&all_operands, false) {
                Ok(()) => Ok(()),
                Err(mut r) => {
                    if let Reason::InputModified { operand, .. } = &mut r {
                        operand.push_str(&format!(" (after the op failed with: {e})"));
                    }
                    fail.reason = r;
                    Err(fail)
                }
            });
        }
        (Err(e), None) => {
            fail.reason = Reason::UnexpectedError {
                error: e.to_string(),
            };
            return Some(Err(fail));
        }
        (Ok(_), Some(why)) => {
            fail.reason = Reason::MissingError {
                expected: why.clone(),
            };
            return Some(Err(fail));
        }
        (Ok(t), None) => t,
    };
    let reference = reference.expect("checked above");
    let want = want.expect("checked above");
    fail.operands.push(OperandDesc {
        role: "result".into(),
        dtype: Some(result.dtype()),
        layout: "-".into(),
        shape: result.shape().to_vec(),
        strides: result.stride().to_vec(),
        offset: result.storage_offset(),
        storage_len: result.storage().len(),
        scalar: None,
    });
    let check = || -> Result<(), Reason> {
        if result.dtype() != dest_dtype {
            return Err(Reason::WrongDType {
                expected: dest_dtype,
                got: result.dtype(),
            });
        }
        if result.shape() != reference.shape.as_slice() {
            return Err(Reason::WrongShape {
                expected: reference.shape.clone(),
                got: result.shape().to_vec(),
            });
        }
        if let Some(d) = dest {
            if !result.shares_storage_with(&d.tensor) || result.layout() != d.tensor.layout() {
                return Err(Reason::NotDestination);
            }
        } else {
            let first = built.get(reference.shares_operand).and_then(|b| b.as_ref());
            if reference.shares_input {
                if !first.is_some_and(|b| result.shares_storage_with(&b.tensor)) {
                    return Err(Reason::Aliasing {
                        expected_shared: true,
                    });
                }
            } else if built
                .iter()
                .flatten()
                .any(|b| result.shares_storage_with(&b.tensor))
            {
                return Err(Reason::Aliasing {
                    expected_shared: false,
                });
            }
        }
        if dest.is_none() && !reference.shares_input {
            // a new tensor: its elements fill its storage, each once
            let (shape, strides) = (result.shape(), result.stride());
            let dense = crate::reference::is_non_overlapping_and_dense(shape, strides)
                && (numel(shape) == 0 || result.storage().len() == numel(shape));
            if !dense {
                return Err(Reason::NotDense {
                    shape: shape.to_vec(),
                    strides: strides.to_vec(),
                    storage_len: result.storage().len(),
                });
            }
        }
        if let Some(s) = &reference.strides {
            let shape = result.shape();
            let ok = numel(shape) == 0
                || (0..shape.len()).all(|d| shape[d] <= 1 || result.stride()[d] == s[d]);
            if !ok {
                return Err(Reason::WrongStrides {
                    expected: s.clone(),
                    got: result.stride().to_vec(),
                });
            }
        }
        // values, read straight from storage through the result's layout
        let storage = read_storage(&result).map_err(|e| Reason::Harness {
            message: format!("reading the result: {e}"),
        })?;
        let pos = positions(result.shape(), result.stride(), result.storage_offset());
        if pos.iter().any(|&p| p >= storage.len()) {
            return Err(Reason::Harness {
                message: "the result's layout reaches past its storage".into(),
            });
        }
        let got: Vec<f64> = pos.iter().map(|&p| storage[p]).collect();
        let tol = if dest_dtype.is_float() && exp.result.is_float() {
            (op.tol)(exp.result).max((op.tol)(dest_dtype))
        } else if dest_dtype.is_float() {
            (op.tol)(dest_dtype)
        } else {
            Tol::EXACT
        }
        .scaled(reference.tol_scale);
        let stale: Option<Vec<f64>> = match form {
            Form::Out => out_built.as_ref().map(|b| b.values.clone()),
            Form::InPlace => built[0].as_ref().map(|b| b.values.clone()),
            Form::Functional => None,
        };
        match &op.bound {
            // composed layers and losses: per-element bounds from the inputs
            Some(b) => {
                let bounds = b(&ctx, &ref_args).map_err(|m| Reason::Harness {
                    message: format!("the error bound failed: {m}"),
                })?;
                crate::bounds::within(&got, &want, &bounds, result.shape())?
            }
            None => {
                // a reference with an error bound per element (reductions, matrix products): the
                // bound replaces the entry's tolerance for float results (see `tol::bound`)
                let bounded: Option<(Vec<f64>, Vec<f64>)> = match &reference.acc_error {
                    Some(acc) if dest_dtype.is_float() && exp.result.is_float() => Some((
                        reference.values.clone(),
                        reference
                            .values
                            .iter()
                            .zip(acc)
                            .map(|(&v, &a)| crate::tol::bound(v, a, exp.result, dest_dtype))
                            .collect(),
                    )),
                    _ => None,
                };
                compare(
                    &got,
                    &want,
                    tol,
                    bounded.as_ref().map(|(e, b)| (e.as_slice(), b.as_slice())),
                    result.shape(),
                    stale.as_deref(),
                    form,
                )?;
            }
        }
        // guards around the destination, and every other operand untouched
        if let Some(d) = dest {
            let after = read_storage(&d.tensor).map_err(|e| Reason::Harness {
                message: e.to_string(),
            })?;
            let mut view = vec![false; d.storage.len()];
            for p in positions(&d.spec.shape, &d.spec.strides, d.spec.offset) {
                view[p] = true;
            }
            if let Some((p, was, now, count)) = first_change(&d.storage, &after, Some(&view)) {
                return Err(Reason::GuardClobbered {
                    operand: if form == Form::Out {
                        "out".into()
                    } else {
                        "self".into()
                    },
                    storage_index: p,
                    was,
                    now,
                    count,
                });
            }
        }
        unchanged(&all_operands, true)
    };
    Some(match check() {
        Ok(()) => Ok(()),
        Err(r) => {
            fail.reason = r;
            Err(fail)
        }
    })
}

/// Compares values; classifies mismatches that still hold the poison (`_out`) or the old
/// value (in place) as unwritten.
fn compare(
    got: &[f64],
    want: &[f64],
    tol: Tol,
    bounded: Option<(&[f64], &[f64])>,
    shape: &[usize],
    stale: Option<&[f64]>,
    form: Form,
) -> Result<(), Reason> {
    // per element: `|got − exact| ≤ bound` for finite values (the exact, unrounded
    // reference value), else what `Tol::close` says (NaN matches NaN, infinities exactly)
    let ok = |i: usize, g: f64, w: f64| match bounded {
        Some((exact, b)) if g.is_finite() && w.is_finite() => (g - exact[i]).abs() <= b[i],
        _ => tol.close(g, w),
    };
    let excess_of = |i: usize, g: f64, w: f64| match bounded {
        Some((exact, b)) => (g - exact[i]).abs() - b[i],
        None => (g - w).abs() - tol.atol - tol.rtol * w.abs(),
    };
    let (mut bad, mut unwritten, mut worst, mut worst_excess, mut first_unwritten) =
        (0usize, 0usize, 0usize, -1.0f64, None);
    let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g.is_finite() && w.is_finite() {
            let a = (g - w).abs();
            max_abs = max_abs.max(a);
            if w != 0.0 {
                max_rel = max_rel.max(a / w.abs());
            }
        }
        if ok(i, g, w) {
            continue;
        }
        bad += 1;
        let excess = if g.is_finite() && w.is_finite() {
            excess_of(i, g, w)
        } else {
            f64::INFINITY
        };
        if excess > worst_excess {
            worst_excess = excess;
            worst = i;
        }
        if stale.is_some_and(|s| same(s[i], g)) {
            unwritten += 1;
            first_unwritten.get_or_insert(i);
        }
    }
    let index = |i: usize| {
        let mut idx = vec![0; shape.len()];
        unravel(i, shape, &mut idx);
        idx
    };
    if unwritten > 0 {
        let i = first_unwritten.unwrap();
        return Err(Reason::Unwritten {
            index: index(i),
            value: got[i],
            want: want[i],
            count: unwritten,
            total: got.len(),
            poisoned: form == Form::Out,
        });
    }
    if bad > 0 {
        return Err(Reason::WrongValues {
            mismatches: bad,
            total: got.len(),
            index: index(worst),
            got: got[worst],
            // with a bound: the exact value and the bound at the worst element (as atol)
            want: bounded.map_or(want[worst], |(e, _)| e[worst]),
            max_abs_err: max_abs,
            max_rel_err: max_rel,
            atol: bounded.map_or(tol.atol, |(_, b)| b[worst]),
            rtol: bounded.map_or(tol.rtol, |_| 0.0),
        });
    }
    Ok(())
}

/// The guard value of `dtype` at a storage position (re-exported for tests that build
/// storages by hand).
pub fn guard_value(dtype: DType, storage_index: usize) -> f64 {
    guard(dtype, storage_index)
}
