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
use crate::tol::{self, Tol};
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

/// A reduction reference with an error bound per output element: `err(group, value, ctx)`
/// bounds the error of the kernel's computation in the accumulation dtype before the final
/// rounding ([`RefOut::with_acc_error`]; the runner adds ½ ulp of the result dtype).
fn red_bounded(
    c: &RefCtx,
    a: &[RefArg],
    nonempty: bool,
    f: impl Fn(&[f64]) -> f64,
    err: impl Fn(&[f64], f64, &RefCtx) -> f64,
) -> Result<RefOut, String> {
    let r = red(c, a, nonempty, &f)?;
    let t = cast(c, a[0].t());
    let e = reference::reduce(&t, &c.params.dims, c.params.keepdim, |g| err(g, f(g), c))?;
    Ok(r.with_acc_error(e.values))
}

/// Sum of n terms (any order): `γ_{n−1} Σ|x|`, or 0 when the terms sit on a grid coarse
/// enough for every partial sum to be exact ([`tol::sum_error`]).
fn sum_err(g: &[f64], _: f64, c: &RefCtx) -> f64 {
    let abs: f64 = g.iter().map(|x| x.abs()).sum();
    tol::sum_error(g.len(), abs, tol::lsb_exp(g.iter().copied()), c.result)
}

/// Mean = sum / n: the sum's error / n, plus two roundings of the quotient (the division,
/// or a multiplication by a rounded 1/n).
fn mean_err(g: &[f64], v: f64, c: &RefCtx) -> f64 {
    sum_err(g, v, c) / g.len().max(1) as f64 + 2.0 * tol::acc_unit(c.result) * v.abs()
}

/// Product of n factors (any order): n − 1 roundings, each relative: `γ_{n−1} |p|`.
fn prod_err(g: &[f64], v: f64, c: &RefCtx) -> f64 {
    tol::gamma(g.len().saturating_sub(1) as f64, tol::acc_unit(c.result)) * v.abs()
}

/// Selections and counts are exact: no accumulation error (the value is an input element,
/// or an integer count far below 2^24).
fn exact_err(_: &[f64], _: f64, _: &RefCtx) -> f64 {
    0.0
}

/// Variance by two passes (mean, then squared deviations), with or without a shift by the
/// first element. With `d_i = x_i − m` (exact mean, so `Σ d_i = 0`), a computed mean
/// `m̂ = m + δ` (`|δ| ≤` [`mean_err`]) and each computed deviation, its square and the sum
/// contributing `1 + θ_i`, `|θ_i| ≤ γ_{n+2}` (two factors of the subtraction's rounding, one
/// of the square's, n − 1 additions):
///
/// ```text
/// Ŝ = Σ (d_i − δ)² (1 + θ_i),  Σ (d_i − δ)² = S + n δ²  (the cross term is −2δ Σ d_i = 0)
/// |Ŝ − S| ≤ n δ² + γ_{n+2} (S + n δ²)
/// ```
///
/// A shift `y_i = x_i − x0` rounds each `y_i` by `u |x_i − x0|`, which changes S by at most
/// `2u Σ |d_i| |x_i − x0|` (first order). Divided by `n − correction`, plus the quotient's
/// rounding `u |v|`. No term grows with the data's offset except through δ² (second order):
/// a one-pass `Σx² − (Σx)²/n` loses everything at offset 100 and fails.
fn var_err(g: &[f64], v: f64, c: &RefCtx, correction: f64) -> f64 {
    let n = g.len() as f64;
    let u = tol::acc_unit(c.result);
    if g.is_empty() || !v.is_finite() || u == 0.0 {
        return 0.0;
    }
    let m = g.iter().sum::<f64>() / n;
    let dm = mean_err(g, m, c);
    let x0 = g[0];
    let s: f64 = g.iter().map(|x| (x - m) * (x - m)).sum();
    let shift: f64 = g.iter().map(|x| (x - m).abs() * (x - x0).abs()).sum();
    let es = n * dm * dm + tol::gamma(n + 2.0, u) * (s + n * dm * dm) + 2.0 * u * shift;
    es / (n - correction).max(0.0) + u * v.abs()
}

/// std = √var: `|√(V + e) − √V| = |e| / (√(V + e) + √V) ≤ E / (√V + √max(V − E, 0))` for
/// `|e| ≤ E` ([`var_err`]), plus the square root's rounding `u |v|`.
fn std_err(g: &[f64], v: f64, c: &RefCtx, correction: f64) -> f64 {
    let var = v * v;
    let e = var_err(g, var, c, correction);
    let u = tol::acc_unit(c.result);
    if e == 0.0 {
        return u * v.abs();
    }
    e / (var.sqrt() + (var - e).max(0.0).sqrt()) + u * v.abs()
}

/// p-norm, p finite and non-zero: `S = Σ |x|^p` with each power rounded at most twice
/// (powf within an ulp, counted as two roundings; p = 1 and 2 round less) and n − 1
/// additions: `Ŝ = S (1 + θ)`, `|θ| ≤ γ_{n+1}`; then `Ŝ^{1/p} = v (1 + θ)^{1/p}` and the
/// root's own error (two roundings): `(( 1 + γ_{n+1})^{1/p} − 1 + 2u) |v|`. `p = ±∞` are
/// selections (exact) and `p = 0` a count (exact).
fn norm_err(g: &[f64], v: f64, c: &RefCtx, p: f64) -> f64 {
    let u = tol::acc_unit(c.result);
    if p.is_infinite() || p == 0.0 || !v.is_finite() {
        return 0.0;
    }
    let gam = tol::gamma(g.len() as f64 + 1.0, u);
    ((1.0 + gam).powf(1.0 / p) - 1.0 + 2.0 * u) * v.abs()
}

/// The relative error of the computed `S = Σ exp(x_j − m)` (m the line's max), shared by
/// logsumexp, softmax and log_softmax: each `x_j − m` rounds by `u |x_j − m|`, which
/// `exp` turns into a relative error of that size; each exp rounds (within an ulp, counted
/// as two roundings) and the sum adds n − 1 more: with `w_j = exp(x_j − m) / S`,
///
/// ```text
/// |Ŝ − S| / S ≤ γ_{n+1} + u Σ_j w_j |x_j − m|   (first order; ×1.01 for the rest)
/// ```
///
/// Returns `(m, S, that bound)`; `None` when the line has no finite maximum.
fn lse_parts(g: &[f64], u: f64) -> Option<(f64, f64, f64)> {
    let m = nan_extreme(g, true);
    if !m.is_finite() {
        return None;
    }
    let fin = || g.iter().filter(|x| x.is_finite());
    let s: f64 = fin().map(|x| (x - m).exp()).sum();
    let spread: f64 = fin().map(|x| (x - m).exp() / s * (x - m).abs()).sum();
    let rel = 1.01 * (tol::gamma(g.len() as f64 + 1.0, u) + u * spread);
    Some((m, s, rel))
}

/// logsumexp = m + ln S: `ln(S (1 + ρ)) = ln S + ρ'` with `|ρ'| ≤ 1.01 ρ`, the log's own
/// error (two roundings of `|ln S|`) and the final addition's rounding `u |v|`.
fn lse_err(g: &[f64], v: f64, c: &RefCtx) -> f64 {
    let u = tol::acc_unit(c.result);
    match lse_parts(g, u) {
        Some((_, s, rel)) if v.is_finite() => 1.01 * rel + 2.0 * u * s.ln().abs() + u * v.abs(),
        _ => 0.0,
    }
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

/// The accumulation-error bound of a reduction's group: `(group, exact value, ctx)`.
type ErrFn = fn(&[f64], f64, &RefCtx) -> f64;

/// Line lengths on both sides of 512, 1024 and 4096 (block and tile sizes of the kernels:
/// the CPU matmul's f16 path blocks k by 512).
pub const LONG: [usize; 6] = [511, 513, 1023, 1025, 4095, 4097];

/// Adds, to the core shape's samples (`ctx.variants`) of float dtypes, two lines of each
/// length in [`LONG`] (shape `[2, L]`, reduced over `dims`) for each value set in `sets`.
/// Few cases with small other dims, so CI stays cheap: 6 lengths × the sets per (form,
/// dtype, layout).
pub fn with_long(
    base: impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static,
    sets: Vec<Domain>,
    dims: Vec<i64>,
    scalar: Option<f64>,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let mut out = base(ctx);
        if !ctx.variants || ctx.arg_dtypes.is_some() || !ctx.dtype.is_float() {
            return out;
        }
        for &l in &LONG {
            for dom in &sets {
                let values = dom.values(ctx.dtype, 2 * l, &mut ctx.rng, false);
                let params = Params {
                    dims: dims.clone(),
                    scalars: scalar.map(|v| vec![Scalar::Float(v)]).unwrap_or_default(),
                    ..Params::default()
                };
                out.push(Sample::new(
                    vec![SampleArg::Tensor {
                        dtype: ctx.dtype,
                        shape: vec![2, l],
                        values,
                    }],
                    params,
                ));
            }
        }
        out
    }
}

/// Reduced extents around the CUDA split schedule's thresholds (cuda/reduce.rs: a range of
/// at least 2 × 4096 elements with few outputs is cut into parts of ≥ 4096 elements, starting
/// on multiples of 256): one short of two parts, two parts, ten parts (a part boundary off a
/// multiple of 4096); with every dtype and layout.
pub const SPLIT: [usize; 3] = [8191, 8193, 40_961];
/// A `[33, 300]` line for the CUDA column split (cuda/reduce.rs `cols_plan`): seen transposed,
/// 33 outputs with a contiguous kept dim over a strided reduced range of 300 — two groups of
/// 32 outputs (the second partial), two parts of 150.
pub const COLS: [usize; 2] = [33, 300];
/// A full reduction of ~1e6 elements (hundreds of parts), for the all-dims forms.
pub const SPLIT_BIG: usize = 1_000_003;

/// Adds, to the core shape's samples (`ctx.variants`) of every dtype, lines long enough to
/// take the CUDA split schedule (few outputs, long reduced ranges): `[3, L]` for L in
/// [`SPLIT`] reduced over `dims` (three outputs; transposed layouts make the reduced dim
/// strided, the column split's case), a [`COLS`] line, and, when `big`, one `[SPLIT_BIG]`
/// line (a full reduction). Values: the accumulating ops' first long set for floats (a sum of
/// 1e6 `any` values can sit at f16's overflow edge), else `domain` (NaN and ±inf for the
/// extrema).
pub fn with_split(
    base: impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static,
    name: &'static str,
    domain: Domain,
    dims: Vec<i64>,
    big: bool,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    let root = name.split('.').next().unwrap_or(name);
    let accumulates = matches!(root, "sum" | "mean" | "prod" | "norm");
    let dom = match long_sets(name).first() {
        Some(&d) if accumulates => d,
        _ => domain,
    };
    move |ctx: &mut SampleCtx| {
        let mut out = base(ctx);
        if !ctx.variants || ctx.arg_dtypes.is_some() {
            return out;
        }
        let d = if ctx.dtype.is_float() { dom } else { domain };
        let mut shapes: Vec<Vec<usize>> = SPLIT.iter().map(|&l| vec![3, l]).collect();
        shapes.push(COLS.to_vec());
        if big {
            shapes.push(vec![SPLIT_BIG]);
        }
        for shape in shapes {
            let values = d.values(ctx.dtype, numel(&shape), &mut ctx.rng, false);
            let params = Params {
                dims: if shape.len() == 1 {
                    vec![]
                } else {
                    dims.clone()
                },
                ..Params::default()
            };
            out.push(Sample::new(
                vec![SampleArg::Tensor {
                    dtype: ctx.dtype,
                    shape,
                    values,
                }],
                params,
            ));
        }
        out
    }
}

/// The value sets of an op's long lines ([`with_long`]): a non-zero mean (an f16
/// accumulator loses the low bits of a running sum near 10⁴), values on a 1/8 grid whose
/// partial sums are exact in f32 in any order (so the reference's answer is exactly what an
/// f32 accumulator gives: any extra rounding shows), products near 1 (they neither vanish
/// nor overflow), and a large common offset for variance- and normalisation-like ops.
fn long_sets(name: &str) -> Vec<Domain> {
    let exact = Domain::range(0.0, 4.0).grid(0.125);
    match name.split('.').next().unwrap_or(name) {
        "sum" | "cumsum" => vec![Domain::range(9.0, 11.0), exact],
        "mean" => vec![Domain::range(90.0, 110.0), exact],
        "prod" | "cumprod" => vec![Domain::range(0.9, 1.1)],
        "var" | "std" => vec![Domain::range(90.0, 110.0), Domain::range(992.0, 1008.0)],
        "norm" => vec![Domain::range(90.0, 110.0)],
        "logsumexp" | "softmax" | "log_softmax" => {
            vec![Domain::range(-8.0, 8.0), Domain::range(9_900.0, 10_000.0)]
        }
        "amax" | "amin" | "max" | "min" | "median" => vec![Domain::range(90.0, 110.0)],
        _ => vec![],
    }
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
    err: ErrFn,
    call: fn(&Tensor, &[i64], bool) -> stride_core::Result<Tensor>,
    out: fn(&Tensor, &[i64], bool, &Tensor) -> stride_core::Result<Tensor>,
) -> OpInfo {
    OpInfo::new(name, Family::Reduction)
        .args(vec![ArgSpec::tensor("self", domain)])
        .dtypes(dtypes)
        .rule(rule)
        .tol(|d| Tol::default_for(d).scaled(4.0))
        .sampler(with_split(
            with_long(
                reduce_sampler(domain, Dims::Many, true, &[]),
                long_sets(name),
                vec![-1],
                None,
            ),
            name,
            domain,
            vec![-1],
            false,
        ))
        .reference(move |c, a| red_bounded(c, a, nonempty, |v| f(v, c), err))
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
    err: ErrFn,
    call: fn(&Tensor) -> stride_core::Result<Tensor>,
) -> OpInfo {
    OpInfo::new(name, Family::Reduction)
        .args(vec![ArgSpec::tensor("self", domain)])
        .dtypes(dtypes)
        .rule(rule)
        .tol(|d| Tol::default_for(d).scaled(4.0))
        .sampler(with_split(
            with_long(
                reduce_sampler(domain, Dims::All, false, &[]),
                long_sets(name),
                vec![],
                None,
            ),
            name,
            domain,
            vec![],
            // a product of 1e6 factors near 1 underflows (order-dependent in f16's f32 acc)
            !name.starts_with("prod"),
        ))
        .reference(move |c, a| red_bounded(c, a, nonempty, |v| f(v, c), err))
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

/// [`along`] with an error bound per element: `f` maps each line to its values and their
/// accumulation-error bounds ([`RefOut::with_acc_error`]).
fn along_bounded(
    c: &RefCtx,
    a: &[RefArg],
    f: impl Fn(&[f64]) -> (Vec<f64>, Vec<f64>),
) -> Result<RefOut, String> {
    let vals = along(c, a, |l| f(l).0)?;
    let errs = along(c, a, |l| f(l).1)?;
    Ok(vals.with_acc_error(errs.values))
}

/// softmax / log_softmax of a line with the bound of each element (see [`lse_parts`]):
/// - softmax `y_i = exp(x_i − m) / S`: the numerator's relative error `u |x_i − m|` (the
///   subtraction) + 2u (exp), S's `ρ`, and two roundings of the quotient (a division, or a
///   reciprocal and a product): `1.01 y_i (ρ + u |x_i − m| + 4u)`;
/// - log_softmax `(x_i − m) − ln S`: `u |x_i − m| + 1.01 ρ + 2u |ln S| + u |v_i|` (the
///   subtraction, ln Ŝ, ln's own error, the final subtraction). An implementation that
///   forms `x_i − (m + ln S)` instead rounds `m + ln S` by `u |m|`, which the large-offset
///   samples (logits near 10⁴) show.
fn softmax_line_bounded(v: &[f64], log: bool, u: f64) -> (Vec<f64>, Vec<f64>) {
    let vals = softmax_line(v, log);
    let errs = match lse_parts(v, u) {
        None => vec![0.0; v.len()],
        Some((m, s, rel)) => v
            .iter()
            .zip(&vals)
            .map(|(&x, &y)| {
                if !x.is_finite() || !y.is_finite() {
                    return 0.0;
                }
                let dx = (x - m).abs();
                if log {
                    u * dx + 1.01 * rel + 2.0 * u * s.ln().abs() + u * y.abs()
                } else {
                    1.01 * y * (rel + u * dx + 4.0 * u)
                }
            })
            .collect(),
    };
    (vals, errs)
}

/// cumsum / cumprod with the bound of each prefix: element i is a sum of i + 1 terms
/// ([`tol::sum_error`] over the prefix, on the line's grid) or a product of i + 1 factors
/// (`γ_i |p_i|`).
fn cumulative_bounded(v: &[f64], sum: bool, int: bool, d: DType) -> (Vec<f64>, Vec<f64>) {
    let vals = cumulative(v, sum, int);
    if int {
        return (vals, vec![0.0; v.len()]);
    }
    let grid = tol::lsb_exp(v.iter().copied());
    let mut abs = 0.0;
    let errs = vals
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            abs += v[i].abs();
            if sum {
                tol::sum_error(i + 1, abs, grid, d)
            } else {
                tol::gamma(i as f64, tol::acc_unit(d)) * p.abs()
            }
        })
        .collect();
    (vals, errs)
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
    // prod: |x| ≤ 1.1 for floats. With larger values a partial product of a long reduction
    // overflows the accumulator (f32 for f16/bf16) and `inf · 0` gives NaN where the exact
    // product is finite — order-dependent, and the same in PyTorch. Integers wrap exactly.
    // Floats near 1 (issue #22): from (−1, 1) a long product vanishes, and a kernel that
    // returns 0 matched it.
    let small = Domain::range(0.9, 1.1).ints(super::IntDomain::Range(-3, 3));
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
            sum_err,
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
            mean_err,
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
            prod_err,
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
            exact_err,
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
            exact_err,
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
            exact_err,
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
            exact_err,
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
            lse_err,
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
            sum_err,
            |x| x.sum(),
        ),
        all_op(
            "mean.all",
            FLOATS,
            DTypeRule::Same,
            any_d,
            false,
            mean,
            mean_err,
            |x| x.mean(),
        ),
        all_op(
            "prod.all",
            ALL,
            DTypeRule::Map(float_or_i64),
            small,
            false,
            prod,
            prod_err,
            |x| x.prod(),
        ),
        all_op(
            "max.all",
            ALL,
            DTypeRule::Same,
            special,
            true,
            amax,
            exact_err,
            |x| x.max(),
        ),
        all_op(
            "min.all",
            ALL,
            DTypeRule::Same,
            special,
            true,
            amin,
            exact_err,
            |x| x.min(),
        ),
        all_op(
            "all.all",
            ALL,
            DTypeRule::ToBool,
            sparse,
            false,
            all,
            exact_err,
            |x| x.all(),
        ),
        all_op(
            "any.all",
            ALL,
            DTypeRule::ToBool,
            sparse,
            false,
            any,
            exact_err,
            |x| x.any(),
        ),
    ];
    // median(): NaN for an empty float tensor, refused for an empty integer one
    v.push(
        OpInfo::new("median", Family::Reduction)
            .args(vec![ArgSpec::tensor("self", special)])
            .dtypes(ALL)
            .tol(|_| Tol::EXACT) // a selection: one of the inputs, exactly
            .sampler(with_long(
                reduce_sampler(special, Dims::All, false, &[]),
                long_sets("median"),
                vec![],
                None,
            ))
            .reference(|c, a| red(c, a, !c.result.is_float(), median_value))
            .functional(|a, _| a[0].t().median()),
    );
    v.push(
        OpInfo::new("count_nonzero", Family::Reduction)
            .args(vec![ArgSpec::tensor("self", sparse)])
            .dtypes(ALL)
            .rule(DTypeRule::Custom(i64_result))
            .sampler(with_split(
                reduce_sampler(sparse, Dims::Many, false, &[]),
                "count_nonzero",
                sparse,
                vec![-1],
                false,
            ))
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
                .sampler(with_long(
                    reduce_sampler(any_d, Dims::Many, true, CORRECTIONS),
                    long_sets(name),
                    vec![-1],
                    Some(1.0),
                ))
                .reference(move |c, a| {
                    let k = scalar(c);
                    let f = |g: &[f64]| {
                        let x = var(g, k);
                        if sqrt {
                            x.sqrt()
                        } else {
                            x
                        }
                    };
                    let r = red(c, a, false, f)?;
                    let t = cast(c, a[0].t());
                    let e = reference::reduce(&t, &c.params.dims, c.params.keepdim, |g| {
                        if sqrt {
                            std_err(g, f(g), c, k)
                        } else {
                            var_err(g, f(g), c, k)
                        }
                    })?;
                    Ok(r.with_acc_error(e.values))
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
            .sampler(with_long(
                reduce_sampler(any_d, Dims::Many, true, PS),
                long_sets("norm"),
                vec![-1],
                Some(2.0),
            ))
            .reference(|c, a| {
                let p = scalar(c);
                let r = red(c, a, p.is_infinite(), |g| norm(g, p))?;
                let t = cast(c, a[0].t());
                let e = reference::reduce(&t, &c.params.dims, c.params.keepdim, |g| {
                    norm_err(g, norm(g, p), c, p)
                })?;
                Ok(r.with_acc_error(e.values))
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
            .sampler(with_long(
                reduce_sampler(any_d, Dims::All, false, PS),
                long_sets("norm"),
                vec![],
                Some(2.0),
            ))
            .reference(|c, a| {
                let p = scalar(c);
                let r = red(c, a, p.is_infinite(), |g| norm(g, p))?;
                let t = cast(c, a[0].t());
                let e = reference::reduce(&t, &c.params.dims, c.params.keepdim, |g| {
                    norm_err(g, norm(g, p), c, p)
                })?;
                Ok(r.with_acc_error(e.values))
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
            .tol(|_| Tol::EXACT) // a selection: one of the inputs, exactly
            .sampler(with_split(
                with_long(
                    reduce_sampler(special, Dims::One, true, &[]),
                    long_sets("max"),
                    vec![-1],
                    None,
                ),
                "max",
                special,
                vec![-1],
                false,
            ))
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
            .sampler(with_split(
                reduce_sampler(special, Dims::One, true, &[]),
                "max",
                special,
                vec![-1],
                false,
            ))
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
                .sampler(with_split(
                    reduce_sampler(special, Dims::OptionalOne, true, &[]),
                    "max",
                    special,
                    vec![-1],
                    true,
                ))
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
            .sampler(with_long(
                reduce_sampler(dom, Dims::One, false, &[]),
                long_sets(name),
                vec![-1],
                None,
            ))
            .reference(move |c, a| {
                let int = !c.result.is_float();
                along_bounded(c, a, |l| cumulative_bounded(l, is_sum, int, c.result))
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
                .sampler(with_long(softmax_sampler, long_sets(name), vec![-1], None))
                .reference(move |c, a| {
                    let u = tol::acc_unit(c.result);
                    along_bounded(c, a, |l| softmax_line_bounded(l, log, u))
                })
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

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Twice: the smooth reductions, scans and softmaxes; Once: max/min and median values; No: index results and boolean/count reductions.
pub fn grad(name: &str) -> super::Grad {
    match name {
        "sum" | "sum.all" | "mean" | "mean.all" | "prod" | "prod.all" | "amax" | "var" | "std"
        | "norm" | "logsumexp" | "cumsum" | "cumprod" | "softmax" | "log_softmax" => {
            super::Grad::Twice
        }
        "amin" | "max" | "min" | "max.all" | "min.all" | "max_dim" | "min_dim" | "median"
        | "median_dim" | "norm.all" => super::Grad::Once,
        _ => super::Grad::No,
    }
}
