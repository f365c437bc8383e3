//! Fused optimizer updates: `Tensor::adam_step_` (one Adam/AdamW step of a parameter and its
//! moments), an entry per written tensor: `adam_step_` (the parameter), `.exp_avg`,
//! `.exp_avg_sq`, `.max_exp_avg_sq` (amsgrad); and `fused_adam_` (the same four) stepping two
//! parameters in one call — a dense copy of the case first, then the case in its own layout,
//! whose tensors are returned — so a dense case takes CUDA's multi-tensor kernel as its second
//! parameter and any other layout the single-tensor kernel beside it; and
//! `fused_adam_skippable_` (the same four) stepping the same pair with the step count and its
//! bias corrections on the device (the powers by squaring, in the reference too).
//!
//! The reference is the composed update the fused kernel replaces (PyTorch's
//! `_single_tensor_adam`: `lerp_`, `mul_`, `addcmul_`, `sqrt`, `div`, `add_`, `addcdiv_`),
//! written in f64 with every rounding of the composed ops made explicit: each op computes in
//! the compute type (f32 for f32/f16/bf16, f64 for f64) and stores its result in the
//! parameter's dtype, and each scalar operand is rounded as the op that takes it rounds it.
//! One IEEE operation done in f64 and rounded to f32 is the correctly rounded f32 result
//! (53 ≥ 2·24 + 2), so the reference is exact and the tolerance is zero: any difference is a
//! wrong kernel.
//!
//! Operands are the parameter, the gradient, `exp_avg`, `exp_avg_sq` and `max_exp_avg_sq`,
//! all of one shape (the registry's broadcast variants must be refused). The written ones are
//! copied into tensors with the case's layout where it can be written (an overlapping layout —
//! an expanded one — becomes dense; the op refuses those, tested in stride-core), so the
//! kernel writes through transposed, stepped and offset layouts. `params.scalars` are
//! `[lr, β1, β2, eps, weight_decay]`, `params.ints` are `[step, decoupled, maximize, amsgrad]`.

use super::{dtypes, elementwise_sampler, Arg, ArgSpec, DType, Domain, Family, OpInfo, Params};
use crate::host::store;
use crate::reference::{self, RefArg, RefCtx, RefOut};
use crate::rng::Rng;
use crate::tol::Tol;
use stride_core::{AdamStep, Scalar, Tensor};

/// How an entry steps the case: `adam_step_` alone, `fused_adam_` beside a dense copy, or
/// `fused_adam_skippable_` beside a dense copy with the step counted on the device (a flag
/// that skips nothing, counters holding `step − 1` steps taken).
#[derive(Clone, Copy, PartialEq)]
enum Call {
    One,
    Many,
    Skippable,
}

/// Which tensor an entry returns.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Param,
    ExpAvg,
    ExpAvgSq,
    MaxExpAvgSq,
}

/// A hyperparameter set: Adam, Adam with L2 decay (also the `g + p` case of decay 1), AdamW,
/// and one with every flag and coarse constants.
fn adam_params(_: DType, rng: &mut Rng) -> Params {
    let (sc, ints): ([f64; 5], [i64; 4]) = match rng.below(5) {
        0 => ([1e-3, 0.9, 0.999, 1e-8, 0.0], [1, 0, 0, 0]),
        1 => ([1e-2, 0.9, 0.999, 1e-8, 0.1], [3, 0, 0, 1]),
        2 => ([1e-2, 0.8, 0.99, 1e-6, 1.0], [2, 0, 1, 0]),
        3 => ([3e-2, 0.9, 0.999, 1e-8, 0.01], [7, 1, 0, 1]),
        _ => ([0.5, 0.5, 0.75, 1e-3, 0.2], [2, 1, 1, 1]),
    };
    Params {
        scalars: sc.iter().map(|&x| Scalar::Float(x)).collect(),
        ints: ints.to_vec(),
        ..Params::default()
    }
}

fn step_of(p: &Params, force_amsgrad: bool) -> (AdamStep, bool) {
    let f = |i: usize| match p.scalars.get(i) {
        Some(Scalar::Float(x)) => *x,
        _ => 0.0,
    };
    let i = |k: usize| p.ints.get(k).copied().unwrap_or(0);
    (
        AdamStep {
            lr: f(0),
            beta1: f(1),
            beta2: f(2),
            eps: f(3),
            weight_decay: f(4),
            decoupled_weight_decay: i(1) != 0,
            maximize: i(2) != 0,
            step: i(0).max(1) as u64,
        },
        force_amsgrad || i(3) != 0,
    )
}

/// One element of the composed update in `dtype`: (param, exp_avg, exp_avg_sq, max_exp_avg_sq)
/// from (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq).
fn update(h: &AdamStep, amsgrad: bool, on_device: bool, dtype: DType, x: &[f64]) -> [f64; 4] {
    // rc: the compute type's rounding; st: a store in the parameter's dtype
    let rc = |v: f64| {
        if dtype == DType::F64 {
            v
        } else {
            store(v, DType::F32)
        }
    };
    let st = |v: f64| store(rc(v), dtype);
    let t = |v: f64| store(v, dtype); // a scalar operand made a tensor of the dtype
    let (mut p, mut g, m, v, vmax) = (x[0], x[1], x[2], x[3], x[4]);
    let step = h.step as f64;
    if h.maximize {
        g = st(-g);
    }
    if h.weight_decay != 0.0 {
        if h.decoupled_weight_decay {
            p = st(p * t(1.0 - h.lr * h.weight_decay));
        } else if h.weight_decay == 1.0 {
            g = st(g + p);
        } else {
            g = st(g + st(p * t(h.weight_decay)));
        }
    }
    // lerp(s, e, w), PyTorch's form, in the compute type
    let w = t(1.0 - h.beta1);
    let d = rc(g - m);
    let m = st(if w.abs() < 0.5 {
        rc(m + rc(w * d))
    } else {
        rc(g - rc(d * rc(1.0 - w)))
    });
    let v = st(v * t(h.beta2));
    let v = st(v + rc(rc(rc(1.0 - h.beta2) * g) * g));
    let (vmax, root) = if amsgrad {
        let mx = if vmax.is_nan() || v.is_nan() {
            f64::NAN
        } else {
            vmax.max(v)
        };
        let mx = t(mx);
        (mx, st(mx.sqrt()))
    } else {
        (vmax, st(v.sqrt()))
    };
    // a step counted on the device takes β^n by squaring (the same order on every device)
    let pow = |mut b: f64| match on_device {
        true => {
            let (mut r, mut n) = (1.0, h.step);
            while n > 0 {
                if n & 1 == 1 {
                    r *= b;
                }
                b *= b;
                n >>= 1;
            }
            r
        }
        false => b.powf(step),
    };
    let bc2_sqrt = t((1.0 - pow(h.beta2)).sqrt());
    let denom = st(root / bc2_sqrt);
    let denom = st(denom + t(h.eps));
    let neg_step = rc(-(h.lr / (1.0 - pow(h.beta1))));
    let p = st(p + rc(neg_step * rc(m / denom)));
    [p, m, v, vmax]
}

fn adam_ref(c: &RefCtx, a: &[RefArg], part: Part, how: Call) -> Result<RefOut, String> {
    if !c.compute.is_float() {
        return Err("adam_step_ updates float parameters".into());
    }
    let shape = &a[0].t().shape;
    if a.iter().any(|x| &x.t().shape != shape) {
        return Err("every operand must have the parameter's shape".into());
    }
    let (h, amsgrad) = step_of(c.params, part == Part::MaxExpAvgSq);
    let k = part as usize;
    let on_device = how == Call::Skippable;
    reference::elementwise(c, a, |x| update(&h, amsgrad, on_device, c.compute, x)[k])
}

/// A tensor with `t`'s values and layout but its own memory (dense where `t`'s layout
/// overlaps itself).
fn writable(t: &Tensor) -> stride_core::Result<Tensor> {
    if !t.layout().is_non_overlapping() {
        return t.contiguous()?.clone_tensor();
    }
    let len = t.layout().storage_extent().max(1);
    let own = Tensor::zeros([len], t.dtype(), &t.device())?.as_strided(
        t.shape(),
        t.stride(),
        t.storage_offset(),
    )?;
    own.copy_(t)?;
    Ok(own)
}

fn call(a: &[Arg], p: &Params, part: Part, how: Call) -> stride_core::Result<Tensor> {
    let (h, amsgrad) = step_of(p, part == Part::MaxExpAvgSq);
    let param = writable(a[0].t())?;
    let (m, v, vmax) = (
        writable(a[2].t())?,
        writable(a[3].t())?,
        writable(a[4].t())?,
    );
    if how == Call::One {
        param.adam_step_(a[1].t(), &m, &v, amsgrad.then_some(&vmax), &h)?;
    } else {
        // a dense first parameter with the case's values, then the case
        let dense = |t: &Tensor| t.contiguous()?.clone_tensor();
        let first = [&param, a[1].t(), &m, &v, &vmax]
            .iter()
            .map(|t| dense(t))
            .collect::<stride_core::Result<Vec<Tensor>>>()?;
        let vmaxes = [&first[4], &vmax];
        let (ps, gs) = ([&first[0], &param], [&first[1], a[1].t()]);
        let (ms, vs) = ([&first[2], &m], [&first[3], &v]);
        let vmaxes = amsgrad.then_some(&vmaxes[..]);
        if how == Call::Many {
            stride_core::fused_adam_(&ps, &gs, &ms, &vs, vmaxes, &h)?;
        } else {
            // step − 1 steps taken so far, in the slot this step reads; a flag of 0
            let dev = param.device();
            let counter = || -> stride_core::Result<Tensor> {
                let c = Tensor::zeros([2], DType::F64, &dev)?;
                c.select(0, ((h.step - 1) % 2) as i64)?
                    .fill_((h.step - 1) as f64)?;
                Ok(c)
            };
            let (c0, c1) = (counter()?, counter()?);
            let found = Tensor::scalar(0.0, DType::F32, &dev)?;
            let skip = stride_core::SkippableStep {
                found_inf: &found,
                counters: &[&c0, &c1],
            };
            stride_core::fused_adam_skippable_(&ps, &gs, &ms, &vs, vmaxes, &h, skip)?;
        }
    }
    let written = match part {
        Part::Param => param,
        Part::ExpAvg => m,
        Part::ExpAvgSq => v,
        Part::MaxExpAvgSq => vmax,
    };
    // written through the case's layout; returned in a fresh dense tensor, as a functional
    // form's result must be
    let out = Tensor::zeros(written.shape(), written.dtype(), &written.device())?;
    out.copy_(&written)?;
    Ok(out)
}

fn entry(name: &'static str, part: Part, how: Call) -> OpInfo {
    let specs = vec![
        ArgSpec::tensor("param", Domain::range(-4.0, 4.0)),
        ArgSpec::tensor("grad", Domain::range(-4.0, 4.0)),
        ArgSpec::tensor("exp_avg", Domain::range(-1.0, 1.0)),
        ArgSpec::tensor("exp_avg_sq", Domain::range(0.0, 2.0)),
        ArgSpec::tensor("max_exp_avg_sq", Domain::range(0.0, 3.0)),
    ];
    let state: &[DType] = match how {
        Call::Skippable => &[DType::F64],
        _ => &[],
    };
    OpInfo::new(name, Family::Nn)
        .args(specs.clone())
        .dtypes(dtypes::FLOATS)
        .state_dtypes(state)
        .sampler(elementwise_sampler(specs, adam_params))
        .reference(move |c, a| adam_ref(c, a, part, how))
        .tol(|_| Tol::EXACT)
        .functional(move |a, p| call(a, p, part, how))
}

pub fn ops() -> Vec<OpInfo> {
    vec![
        entry("adam_step_", Part::Param, Call::One),
        entry("adam_step_.exp_avg", Part::ExpAvg, Call::One),
        entry("adam_step_.exp_avg_sq", Part::ExpAvgSq, Call::One),
        entry("adam_step_.max_exp_avg_sq", Part::MaxExpAvgSq, Call::One),
        entry("fused_adam_", Part::Param, Call::Many),
        entry("fused_adam_.exp_avg", Part::ExpAvg, Call::Many),
        entry("fused_adam_.exp_avg_sq", Part::ExpAvgSq, Call::Many),
        entry("fused_adam_.max_exp_avg_sq", Part::MaxExpAvgSq, Call::Many),
        entry("fused_adam_skippable_", Part::Param, Call::Skippable),
        entry(
            "fused_adam_skippable_.exp_avg",
            Part::ExpAvg,
            Call::Skippable,
        ),
        entry(
            "fused_adam_skippable_.exp_avg_sq",
            Part::ExpAvgSq,
            Call::Skippable,
        ),
        entry(
            "fused_adam_skippable_.max_exp_avg_sq",
            Part::MaxExpAvgSq,
            Call::Skippable,
        ),
    ]
}

/// Not differentiable (an optimizer update).
pub fn grad(_: &str) -> super::Grad {
    super::Grad::No
}
