//! Reductions: `sum mean prod amax amin all any count_nonzero var std norm logsumexp` over
//! any set of dims (empty = every dim) with `keepdim`; their all-dims forms (`sum.all`, …);
//! `max_dim`/`min_dim` (values) and `.indices`, `argmax`/`argmin`, `median_dim`; `cumsum`,
//! `cumprod` (three forms each); `softmax`, `log_softmax` (large and `-inf` inputs).
//!
//! Every reference is a plain loop over the values of each output element's group
//! ([`reference::reduce`]); the tolerance grows with the group's length
//! ([`RefOut::tol_scaled`]). Ops with two results (values and indices) have one entry per
//! result; each `_out` entry passes the runner's output for its result and a fresh,
//! correctly typed tensor of the same shape for the other, so both outputs are run in every
//! layout.

use super::dtypes::{ALL, FLOATS};
use super::{ArgSpec, DTypeRule, Domain, Family, OpInfo, Params, Sample, SampleArg, SampleCtx};
use crate::host::{store, wrap_int};
use crate::reference::{self, numel, wrap_dim, RefArg, RefCtx, RefOut, RefTensor};
use crate::tol::Tol;
use std::cmp::Ordering;
use stride_core::{DType, Scalar, Tensor};

/// Which dim lists a sampler produces.
#[derive(Clone, Copy, PartialEq)]
pub enum Dims {
    /// Lists: all (`[]`), last, first, first+last, a middle dim, reversed order; refused:
    /// out of range, repeated.
    Many,
    /// One dim: last, first; refused: out of range.
    One,
    /// `[]` (= `None`: all dims, flat index) or one dim.
    OptionalOne,
    /// Always every dim, no keepdim (the `x.sum()` forms).
    All,
}

/// The reduction sampler with a choice of dim lists, keepdim on/off (`keepdim = false`
/// only), and extra scalar parameters (`var`'s correction, `norm`'s p: one sample each).
pub fn reduce_sampler(
    domain: Domain,
    dims: Dims,
    keepdim: bool,
    scalars: &'static [f64],
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let nd = ctx.shape.len() as i64;
        let values = domain.values(ctx.dtype, numel(&ctx.shape), &mut ctx.rng, ctx.tame);
        let input = SampleArg::Tensor {
            dtype: ctx.dtype,
            shape: ctx.shape.clone(),
            values,
        };
        let mut choices: Vec<Vec<i64>> = match dims {
            Dims::Many => vec![vec![], vec![-1]],
            Dims::One => vec![vec![-1]],
            Dims::OptionalOne => vec![vec![], vec![-1]],
            Dims::All => vec![vec![]],
        };
        if ctx.variants {
            match dims {
                Dims::Many => {
                    choices.extend([vec![0], vec![0, -1], vec![nd.max(1)]]);
                    if nd >= 3 {
                        choices.extend([vec![1], vec![-1, 0], vec![1, 1 - nd]]);
                    }
                }
                Dims::One | Dims::OptionalOne => {
                    choices.extend([vec![0], vec![nd.max(1)], vec![-nd.max(1) - 1]])
                }
                Dims::All => {}
            }
        }
        choices.dedup();
        let keeps: &[bool] = if keepdim && dims != Dims::All {
            &[false, true]
        } else {
            &[false]
        };
        let ps: Vec<Option<f64>> = if scalars.is_empty() {
            vec![None]
        } else if ctx.variants {
            scalars.iter().map(|&s| Some(s)).collect()
        } else {
            vec![Some(scalars[ctx.rng.below(scalars.len())])]
        };
        let mut out = vec![];
        for (ci, d) in choices.iter().enumerate() {
            for &keepdim in keeps {
                for (pi, p) in ps.iter().enumerate() {
                    // every scalar with the first dim list, the rest with one scalar each
                    if ci > 0 && pi > 0 && (ci + pi) % ps.len() != 0 {
                        continue;
                    }
                    let params = Params {
                        dims: d.clone(),
                        keepdim,
                        scalars: p.map(|v| vec![Scalar::Float(v)]).unwrap_or_default(),
                        ..Params::default()
                    };
                    out.push(Sample::new(vec![input.clone()], params));
                }
            }
        }
        out
    }
}

/// The operand's values cast to the compute dtype, as the frontend does.
fn cast(c: &RefCtx, t: &RefTensor) -> RefTensor {
    let d = c.arg_compute.first().copied().unwrap_or(c.compute);
    let mut t = t.clone();
    t.values = t.values.iter().map(|&v| store(v, d)).collect();
    t
}

/// How many input elements each result element combines (`None` for invalid dims).
fn group_len(t: &RefTensor, dims: &[i64]) -> Option<usize> {
    let nd = t.shape.len();
    if dims.is_empty() {
        return Some(numel(&t.shape));
    }
    let mut n = 1;
    for &d in dims {
        let w = wrap_dim(d, nd)?;
        if nd > 0 {
            n *= t.shape[w];
        }
    }
    Some(n)
}

/// A reduction reference over `params.dims`; `nonempty`: a group of zero elements must be
/// refused (the op has no identity).
fn red(
    c: &RefCtx,
    a: &[RefArg],
    nonempty: bool,
    f: impl Fn(&[f64]) -> f64,
) -> Result<RefOut, String> {
    let t = cast(c, a[0].t());
    let r = reference::reduce(&t, &c.params.dims, c.params.keepdim, &f)?;
    let n = group_len(&t, &c.params.dims).unwrap_or(0);
    if nonempty && n == 0 {
        return Err("reducing over zero elements (no identity) must be refused".into());
    }
    Ok(r.tol_scaled((n as f64).sqrt()))
}

fn scalar(c: &RefCtx) -> f64 {
    c.params.scalars[0].to_f64()
}

fn nan_extreme(v: &[f64], max: bool) -> f64 {
    let mut m = if max {
        f64::NEG_INFINITY
    } else {
        f64::INFINITY
    };
    for &x in v {
        if x.is_nan() {
            return f64::NAN;
        }
        if (max && x > m) || (!max && x < m) {
            m = x;
        }
    }
    m
}

/// Index of the first maximum (minimum); a NaN beats every number, the first NaN wins.
fn arg_extreme(v: &[f64], max: bool) -> f64 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        let b = v[best];
        if b.is_nan() {
            break;
        }
        if x.is_nan() || (max && x > b) || (!max && x < b) {
            best = i;
        }
    }
    best as f64
}

/// The lower median (PyTorch's): the element of rank `(n − 1) / 2`; NaN if any (NaN for
/// no elements: `median()` of an empty float tensor).
fn median_value(v: &[f64]) -> f64 {
    if v.is_empty() || v.iter().any(|x| x.is_nan()) {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
    s[(s.len() - 1) / 2]
}

/// The median's index: the first NaN of a line holding NaN, else the original position of
/// the element of rank `(n − 1) / 2` in a stable sort.
fn median_index(v: &[f64]) -> f64 {
    if let Some(i) = v.iter().position(|x| x.is_nan()) {
        return i as f64;
    }
    if v.is_empty() {
        return 0.0; // refused anyway (no elements)
    }
    let mut perm: Vec<usize> = (0..v.len()).collect();
    perm.sort_by(|&a, &b| v[a].partial_cmp(&v[b]).unwrap_or(Ordering::Equal));
    perm[(v.len() - 1) / 2] as f64
}

fn int_prod(v: &[f64]) -> f64 {
    let mut acc: i128 = 1;
    for &x in v {
        acc = wrap_int(acc * x as i128, DType::I64);
    }
    acc as f64
}

/// Two passes over the values shifted by the first one (as the frontend computes it): the
/// shift makes a constant slice's deviations exactly 0, so `correction ≥ n` gives 0/0 = NaN
/// whatever the summation order, never a rounding artefact's inf.
fn var(v: &[f64], correction: f64) -> f64 {
    let n = v.len() as f64;
    let x0 = v.first().copied().unwrap_or(0.0);
    let mean = v.iter().map(|x| x - x0).sum::<f64>() / n;
    let ss: f64 = v.iter().map(|x| (x - x0 - mean) * (x - x0 - mean)).sum();
    ss / (n - correction).max(0.0)
}

fn norm(v: &[f64], p: f64) -> f64 {
    if p == f64::INFINITY {
        nan_extreme(&v.iter().map(|x| x.abs()).collect::<Vec<_>>(), true)
    } else if p == f64::NEG_INFINITY {
        nan_extreme(&v.iter().map(|x| x.abs()).collect::<Vec<_>>(), false)
    } else if p == 0.0 {
        v.iter().filter(|&&x| x != 0.0).count() as f64
    } else {
        v.iter().map(|x| x.abs().powf(p)).sum::<f64>().powf(1.0 / p)
    }
}

fn logsumexp(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NEG_INFINITY;
    }
    if v.iter().any(|x| x.is_nan()) {
        return f64::NAN;
    }
    let m = nan_extreme(v, true);
    let m = if m.is_infinite() { 0.0 } else { m };
    v.iter().map(|x| (x - m).exp()).sum::<f64>().ln() + m
}

fn float_or_i64(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::I64
    }
}
fn float_or_f32(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::F32
    }
}
fn i64_result(_: &Sample) -> DType {
    DType::I64
}
fn dim0(p: &Params) -> i64 {
    p.dims.first().copied().unwrap_or(0)
}
fn opt_dim(p: &Params) -> Option<i64> {
    p.dims.first().copied()
}

/// A tensor of `like`'s shape and `dtype` for the result a `_out` entry does not check.
fn other_out(like: &Tensor, dtype: DType) -> stride_core::Result<Tensor> {
    Tensor::zeros(like.shape().to_vec(), dtype, &like.device())
}

/// A reduction over a dim list with keepdim, `x.name(dims, keepdim)` / `_out`.
#[allow(clippy::too_many_arguments)]
fn dims_op(
    name: &'static str,
    dtypes: &[DType],
    rule: DTypeRule,
    domain: Domain,
    nonempty: bool,
    f: fn(&[f64], &RefCtx) -> f64,
    call: fn(&Tensor, &[i64], bool) -> stride_core::Result<Tensor>,
    out: fn(&Tensor, &[i64], bool, &Tensor) -> stride_core::Result<Tensor>,
) -> OpInfo {
    OpInfo::new(name, Family::Reduction)
        .args(vec![ArgSpec::tensor("self", domain)])
        .dtypes(dtypes)
        .rule(rule)
        .tol(|d| Tol::default_for(d).scaled(4.0))
        .sampler(reduce_sampler(domain, Dims::Many, true, &[]))
        .reference(move |c, a| red(c, a, nonempty, |v| f(v, c)))
        .functional(move |a, p| call(a[0].t(), &p.dims, p.keepdim))
        .out(move |a, p, o| out(a[0].t(), &p.dims, p.keepdim, o))
}

/// The all-dims form `x.name()` of a reduction.
fn all_op(
    name: &'static str,
    dtypes: &[DType],
    rule: DTypeRule,
    domain: Domain,
    nonempty: bool,
    f: fn(&[f64], &RefCtx) -> f64,
    call: fn(&Tensor) -> stride_core::Result<Tensor>,
) -> OpInfo {
    OpInfo::new(name, Family::Reduction)
        .args(vec![ArgSpec::tensor("self", domain)])
        .dtypes(dtypes)
        .rule(rule)
        .tol(|d| Tol::default_for(d).scaled(4.0))
        .sampler(reduce_sampler(domain, Dims::All, false, &[]))
        .reference(move |c, a| red(c, a, nonempty, |v| f(v, c)))
        .functional(move |a, _| call(a[0].t()))
}

fn sum(v: &[f64], c: &RefCtx) -> f64 {
    if c.result.is_float() {
        v.iter().sum()
    } else {
        v.iter().map(|&x| x as i128).sum::<i128>() as f64
    }
}
fn mean(v: &[f64], _: &RefCtx) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}
fn prod(v: &[f64], c: &RefCtx) -> f64 {
    if c.result.is_float() {
        v.iter().product()
    } else {
        int_prod(v)
    }
}
fn amax(v: &[f64], _: &RefCtx) -> f64 {
    nan_extreme(v, true)
}
fn amin(v: &[f64], _: &RefCtx) -> f64 {
    nan_extreme(v, false)
}
fn all(v: &[f64], _: &RefCtx) -> f64 {
    v.iter().all(|&x| x != 0.0) as u8 as f64
}
fn any(v: &[f64], _: &RefCtx) -> f64 {
    v.iter().any(|&x| x != 0.0) as u8 as f64
}

/// Values within a range and, one in eight, `-inf` (softmax's masked entries).
fn masked_values(ctx: &mut SampleCtx, lo: f64, hi: f64) -> Vec<f64> {
    let d = ctx.dtype;
    (0..numel(&ctx.shape))
        .map(|_| {
            if d.is_float() && ctx.rng.below(8) == 0 {
                f64::NEG_INFINITY
            } else {
                store(ctx.rng.range_f64(lo, hi), d)
            }
        })
        .collect()
}

/// softmax / log_softmax samples: moderate values with `-inf` entries along the last dim;
/// with variants also the first dim, an out-of-range dim, values near 1e4 (overflow without
/// the max subtraction), and NaN/±inf specials.
fn softmax_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let nd = ctx.shape.len() as i64;
    let mk = |values: Vec<f64>, dim: i64, ctx: &SampleCtx| {
        Sample::new(
            vec![SampleArg::Tensor {
                dtype: ctx.dtype,
                shape: ctx.shape.clone(),
                values,
            }],
            Params {
                dims: vec![dim],
                ..Params::default()
            },
        )
    };
    let v = masked_values(ctx, -8.0, 8.0);
    let mut out = vec![mk(v.clone(), -1, ctx)];
    if ctx.variants {
        out.push(mk(v.clone(), 0, ctx));
        out.push(mk(v, nd.max(1), ctx));
        let large = masked_values(ctx, 9_900.0, 10_000.0);
        out.push(mk(large, -1, ctx));
        let sp = Domain::range(-8.0, 8.0).specials().values(
            ctx.dtype,
            numel(&ctx.shape),
            &mut ctx.rng,
            false,
        );
        out.push(mk(sp, -1, ctx));
    }
    out
}

/// The values of a line-wise op along `params.dims[0]`: `f` maps each line to a line.
fn along(c: &RefCtx, a: &[RefArg], f: impl Fn(&[f64]) -> Vec<f64>) -> Result<RefOut, String> {
    let t = cast(c, a[0].t());
    let nd = t.shape.len();
    let d = wrap_dim(dim0(c.params), nd)
        .ok_or_else(|| format!("dim {} out of range must be refused", dim0(c.params)))?;
    let shape = t.shape.clone();
    if nd == 0 {
        return Ok(RefOut::new(shape, f(&t.values)));
    }
    let n = shape[d];
    let inner: usize = shape[d + 1..].iter().product();
    let outer: usize = shape[..d].iter().product();
    let mut out = vec![0.0; t.values.len()];
    for o in 0..outer {
        for i in 0..inner {
            let line: Vec<f64> = (0..n).map(|k| t.values[(o * n + k) * inner + i]).collect();
            for (k, v) in f(&line).into_iter().enumerate() {
                out[(o * n + k) * inner + i] = v;
            }
        }
    }
    Ok(RefOut::new(shape, out).tol_scaled((n as f64).sqrt()))
}

fn softmax_line(v: &[f64], log: bool) -> Vec<f64> {
    let m = nan_extreme(v, true);
    if m.is_nan() || m == f64::INFINITY || m == f64::NEG_INFINITY {
        return vec![f64::NAN; v.len()];
    }
    let s: f64 = v.iter().map(|x| (x - m).exp()).sum();
    v.iter()
        .map(|x| {
            if log {
                x - m - s.ln()
            } else {
                (x - m).exp() / s
            }
        })
        .collect()
}

fn cumulative(v: &[f64], sum: bool, int: bool) -> Vec<f64> {
    let mut out = Vec::with_capacity(v.len());
    let (mut f, mut i): (f64, i128) = if sum { (0.0, 0) } else { (1.0, 1) };
    for &x in v {
        if int {
            i = wrap_int(if sum { i + x as i128 } else { i * x as i128 }, DType::I64);
            out.push(i as f64);
        } else {
            f = if sum { f + x } else { f * x };
            out.push(f);
        }
    }
    out
}

pub fn ops() -> Vec<OpInfo> {
    let any_d = Domain::any();
    let special = Domain::any().specials();
    // prod: |x| ≤ 1 for floats. With larger values a partial product of a long reduction
    // overflows the accumulator (f32 for f16/bf16) and `inf · 0` gives NaN where the exact
    // product is finite — order-dependent, and the same in PyTorch. Integers wrap exactly.
    let small = Domain::range(-1.0, 1.0).ints(super::IntDomain::Range(-3, 3));
    let unit = Domain::range(-1.0, 1.0);
    let lse = Domain::range(-80.0, 80.0)
        .specials()
        .ints(super::IntDomain::Range(-100, 100));
    let sparse = Domain::range(-1.0, 1.0).grid(1.0).specials();
    let mut v = vec![
        dims_op(
            "sum",
            ALL,
            DTypeRule::Map(float_or_i64),
            any_d,
            false,
            sum,
            |x, d, k| x.sum_dims(d, k),
            |x, d, k, o| x.sum_dims_out(d, k, o),
        ),
        dims_op(
            "mean",
            FLOATS,
            DTypeRule::Same,
            any_d,
            false,
            mean,
            |x, d, k| x.mean_dims(d, k),
            |x, d, k, o| x.mean_dims_out(d, k, o),
        ),
        dims_op(
            "prod",
            ALL,
            DTypeRule::Map(float_or_i64),
            small,
            false,
            prod,
            |x, d, k| x.prod_dims(d, k),
            |x, d, k, o| x.prod_dims_out(d, k, o),
        ),
        dims_op(
            "amax",
            ALL,
            DTypeRule::Same,
            special,
            true,
            amax,
            |x, d, k| x.amax(d, k),
            |x, d, k, o| x.amax_out(d, k, o),
        ),
        dims_op(
            "amin",
            ALL,
            DTypeRule::Same,
            special,
            true,
            amin,
            |x, d, k| x.amin(d, k),
            |x, d, k, o| x.amin_out(d, k, o),
        ),
        dims_op(
            "all",
            ALL,
            DTypeRule::ToBool,
            sparse,
            false,
            all,
            |x, d, k| x.all_dims(d, k),
            |x, d, k, o| x.all_dims_out(d, k, o),
        ),
        dims_op(
            "any",
            ALL,
            DTypeRule::ToBool,
            sparse,
            false,
            any,
            |x, d, k| x.any_dims(d, k),
            |x, d, k, o| x.any_dims_out(d, k, o),
        ),
        dims_op(
            "logsumexp",
            ALL,
            DTypeRule::Map(float_or_f32),
            lse,
            false,
            |v, _| logsumexp(v),
            |x, d, k| x.logsumexp(d, k),
            |x, d, k, o| x.logsumexp_out(d, k, o),
        ),
        all_op(
            "sum.all",
            ALL,
            DTypeRule::Map(float_or_i64),
            any_d,
            false,
            sum,
            |x| x.sum(),
        ),
        all_op(
            "mean.all",
            FLOATS,
            DTypeRule::Same,
            any_d,
            false,
            mean,
            |x| x.mean(),
        ),
        all_op(
            "prod.all",
            ALL,
            DTypeRule::Map(float_or_i64),
            small,
            false,
            prod,
            |x| x.prod(),
        ),
        all_op("max.all", ALL, DTypeRule::Same, special, true, amax, |x| {
            x.max()
        }),
        all_op("min.all", ALL, DTypeRule::Same, special, true, amin, |x| {
            x.min()
        }),
        all_op("all.all", ALL, DTypeRule::ToBool, sparse, false, all, |x| {
            x.all()
        }),
        all_op("any.all", ALL, DTypeRule::ToBool, sparse, false, any, |x| {
            x.any()
        }),
    ];
    // median(): NaN for an empty float tensor, refused for an empty integer one
    v.push(
        OpInfo::new("median", Family::Reduction)
            .args(vec![ArgSpec::tensor("self", special)])
            .dtypes(ALL)
            .sampler(reduce_sampler(special, Dims::All, false, &[]))
            .reference(|c, a| red(c, a, !c.result.is_float(), median_value))
            .functional(|a, _| a[0].t().median()),
    );
    v.push(
        OpInfo::new("count_nonzero", Family::Reduction)
            .args(vec![ArgSpec::tensor("self", sparse)])
            .dtypes(ALL)
            .rule(DTypeRule::Custom(i64_result))
            .sampler(reduce_sampler(sparse, Dims::Many, false, &[]))
            .reference(|c, a| {
                red(c, a, false, |v| {
                    v.iter().filter(|&&x| x != 0.0).count() as f64
                })
            })
            .functional(|a, p| a[0].t().count_nonzero(&p.dims))
            .out(|a, p, o| a[0].t().count_nonzero_out(&p.dims, o)),
    );
    // var / std with corrections 0, 1, 2.5 and one ≥ n (divisor max(n − c, 0): inf / NaN)
    const CORRECTIONS: &[f64] = &[1.0, 0.0, 2.5, 5000.0];
    for (name, sqrt) in [("var", false), ("std", true)] {
        v.push(
            OpInfo::new(name, Family::Reduction)
                .args(vec![ArgSpec::tensor("self", any_d)])
                .dtypes(FLOATS)
                .tol(|d| Tol::default_for(d).scaled(8.0))
                .sampler(reduce_sampler(any_d, Dims::Many, true, CORRECTIONS))
                .reference(move |c, a| {
                    let k = scalar(c);
                    red(c, a, false, |g| {
                        let x = var(g, k);
                        if sqrt {
                            x.sqrt()
                        } else {
                            x
                        }
                    })
                })
                .functional(move |a, p| {
                    let c = p.scalars[0].to_f64();
                    if sqrt {
                        a[0].t().std(&p.dims, c, p.keepdim)
                    } else {
                        a[0].t().var(&p.dims, c, p.keepdim)
                    }
                })
                .out(move |a, p, o| {
                    let c = p.scalars[0].to_f64();
                    if sqrt {
                        a[0].t().std_out(&p.dims, c, p.keepdim, o)
                    } else {
                        a[0].t().var_out(&p.dims, c, p.keepdim, o)
                    }
                }),
        );
    }
    const PS: &[f64] = &[2.0, 1.0, f64::INFINITY, f64::NEG_INFINITY, 0.0, 3.0, 0.5];
    v.push(
        OpInfo::new("norm", Family::Reduction)
            .args(vec![ArgSpec::tensor("self", any_d)])
            .dtypes(FLOATS)
            .tol(|d| Tol::default_for(d).scaled(8.0))
            .sampler(reduce_sampler(any_d, Dims::Many, true, PS))
            .reference(|c, a| {
                let p = scalar(c);
                red(c, a, p.is_infinite(), |g| norm(g, p))
            })
            .functional(|a, p| a[0].t().norm(p.scalars[0].to_f64(), &p.dims, p.keepdim))
            .out(|a, p, o| {
                a[0].t()
                    .norm_out(p.scalars[0].to_f64(), &p.dims, p.keepdim, o)
            }),
    );
    v.push(
        OpInfo::new("norm.all", Family::Reduction)
            .args(vec![ArgSpec::tensor("self", any_d)])
            .dtypes(FLOATS)
            .tol(|d| Tol::default_for(d).scaled(8.0))
            .sampler(reduce_sampler(any_d, Dims::All, false, PS))
            .reference(|c, a| {
                let p = scalar(c);
                red(c, a, p.is_infinite(), |g| norm(g, p))
            })
            .functional(|a, p| a[0].t().norm_all(p.scalars[0].to_f64())),
    );
    // values and indices of max_dim / min_dim / median_dim, argmax / argmin
    type Pair = fn(&Tensor, i64, bool) -> stride_core::Result<(Tensor, Tensor)>;
    type PairOut =
        fn(&Tensor, i64, bool, &Tensor, &Tensor) -> stride_core::Result<(Tensor, Tensor)>;
    let pairs: [(&str, &str, bool, Pair, Option<PairOut>); 3] = [
        (
            "max_dim",
            "max_dim.indices",
            true,
            |x, d, k| x.max_dim(d, k),
            Some(|x, d, k, v, i| x.max_dim_out(d, k, v, i)),
        ),
        (
            "min_dim",
            "min_dim.indices",
            false,
            |x, d, k| x.min_dim(d, k),
            Some(|x, d, k, v, i| x.min_dim_out(d, k, v, i)),
        ),
        (
            "median_dim",
            "median_dim.indices",
            false,
            |x, d, k| x.median_dim(d, k),
            None,
        ),
    ];
    for (vname, iname, max, call, out) in pairs {
        let median = vname == "median_dim";
        let values = move |g: &[f64]| {
            if median {
                median_value(g)
            } else {
                nan_extreme(g, max)
            }
        };
        let mut e = OpInfo::new(vname, Family::Reduction)
            .args(vec![ArgSpec::tensor("self", special)])
            .dtypes(ALL)
            .exact_dest_dtype()
            .sampler(reduce_sampler(special, Dims::One, true, &[]))
            .reference(move |c, a| red(c, a, true, values))
            .functional(move |a, p| Ok(call(a[0].t(), dim0(p), p.keepdim)?.0));
        if let Some(out) = out {
            e = e.out(move |a, p, o| {
                Ok(out(a[0].t(), dim0(p), p.keepdim, o, &other_out(o, DType::I64)?)?.0)
            });
        }
        v.push(e);
        // the indices: the first extremum (a NaN beats every number), the median's as above
        let index = move |g: &[f64]| {
            if median {
                median_index(g)
            } else {
                arg_extreme(g, max)
            }
        };
        let mut e = OpInfo::new(iname, Family::Reduction)
            .args(vec![ArgSpec::tensor("self", special)])
            .dtypes(ALL)
            .rule(DTypeRule::Custom(i64_result))
            .exact_dest_dtype()
            .sampler(reduce_sampler(special, Dims::One, true, &[]))
            .reference(move |c, a| red(c, a, true, index))
            .functional(move |a, p| Ok(call(a[0].t(), dim0(p), p.keepdim)?.1));
        if let Some(out) = out {
            e = e.out(move |a, p, o| {
                let vals = other_out(o, a[0].t().dtype())?;
                Ok(out(a[0].t(), dim0(p), p.keepdim, &vals, o)?.1)
            });
        }
        v.push(e);
    }
    for (name, max) in [("argmax", true), ("argmin", false)] {
        v.push(
            OpInfo::new(name, Family::Reduction)
                .args(vec![ArgSpec::tensor("self", special)])
                .dtypes(ALL)
                .rule(DTypeRule::Custom(i64_result))
                .exact_dest_dtype()
                .sampler(reduce_sampler(special, Dims::OptionalOne, true, &[]))
                .reference(move |c, a| red(c, a, true, |g| arg_extreme(g, max)))
                .functional(move |a, p| {
                    if max {
                        a[0].t().argmax(opt_dim(p), p.keepdim)
                    } else {
                        a[0].t().argmin(opt_dim(p), p.keepdim)
                    }
                })
                .out(move |a, p, o| {
                    if max {
                        a[0].t().argmax_out(opt_dim(p), p.keepdim, o)
                    } else {
                        a[0].t().argmin_out(opt_dim(p), p.keepdim, o)
                    }
                }),
        );
    }
    // cumulative: three forms; ints and bool accumulate in i64 (wrapping)
    for (name, is_sum) in [("cumsum", true), ("cumprod", false)] {
        let dom = if is_sum { any_d } else { small };
        let mut e = OpInfo::new(name, Family::Reduction)
            .args(vec![ArgSpec::tensor("self", dom)])
            .dtypes(ALL)
            .rule(DTypeRule::Map(float_or_i64))
            .tol(|d| Tol::default_for(d).scaled(4.0))
            .sampler(reduce_sampler(dom, Dims::One, false, &[]))
            .reference(move |c, a| {
                let int = !c.result.is_float();
                along(c, a, |l| cumulative(l, is_sum, int))
            });
        e = if is_sum {
            e.functional(|a, p| a[0].t().cumsum(dim0(p)))
                .inplace(|a, p| a[0].t().cumsum_(dim0(p)))
                .out(|a, p, o| a[0].t().cumsum_out(dim0(p), o))
        } else {
            e.functional(|a, p| a[0].t().cumprod(dim0(p)))
                .inplace(|a, p| a[0].t().cumprod_(dim0(p)))
                .out(|a, p, o| a[0].t().cumprod_out(dim0(p), o))
        };
        v.push(e);
    }
    for (name, log) in [("softmax", false), ("log_softmax", true)] {
        v.push(
            OpInfo::new(name, Family::Reduction)
                .args(vec![ArgSpec::tensor("self", unit)])
                .dtypes(FLOATS)
                .tol(|d| Tol::default_for(d).scaled(4.0))
                .sampler(softmax_sampler)
                .reference(move |c, a| along(c, a, |l| softmax_line(l, log)))
                .functional(move |a, p| {
                    if log {
                        a[0].t().log_softmax(dim0(p))
                    } else {
                        a[0].t().softmax(dim0(p))
                    }
                })
                .out(move |a, p, o| {
                    if log {
                        a[0].t().log_softmax_out(dim0(p), o)
                    } else {
                        a[0].t().softmax_out(dim0(p), o)
                    }
                }),
        );
    }
    v
}
