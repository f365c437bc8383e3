//! stride-nn's composed layers and losses as registry entries: `layer_norm` and `rms_norm`
//! (the functional forms `LayerNorm` and `RmsNorm` call),
//! `Embedding` (the gather path, and the one-hot path taken while the weight requires grad),
//! every loss of `stride_nn::loss`, with weight and bias operands, every reduction,
//! `ignore_index`, `label_smoothing` and class-probability targets, and
//! `scaled_dot_product_attention` (causal, bool and float masks, GQA, explicit scales, lengths
//! and head dims across kernel tiles), and stride-core's fused pointwise ops: `rotary` (both
//! pairings, partial rotary) and the gated units `swiglu`, `geglu`, `geglu_tanh` — in every float dtype and over the registry's layouts
//! (each operand — weight, bias and mask too — transposed, stepped, offset, expanded, …).
//!
//! The references are written from the math in f64 (PyTorch's formulas, cited per entry);
//! none calls a stride op. Tolerances are per-element error bounds ([`crate::bounds`]):
//! `ulp_out + k·u_out·M + c·n·u_acc·S`, with `k` (the elementwise stores in the output
//! dtype), `M` and `S` stated for each entry below. Inputs include a large common offset for
//! the normalisation layers (values near 100), where a statistic kept in the half dtype
//! shows.
//!
//! The norms' weight and bias are operands of the functional forms, so the gradcheck sweep
//! covers their gradients; the embedding entries build the layer and replace its weight (no
//! gradient reaches operand 0: listed in `grad::EXPECTED_FAILURES`), so its parameter
//! gradient is gradchecked in stride-nn's tests (`tests/layers.rs`, `tests/losses.rs`).

use super::{
    dtypes, Arg, ArgSpec, DType, Domain, Family, OpInfo, Params, Sample, SampleArg, SampleCtx,
};
use crate::bounds::{bound, Terms};
use crate::reference::{numel, RefArg, RefCtx, RefOut};
use stride_core::{Scalar, Tensor};
use stride_nn::loss::{self, CrossEntropy, Reduction};
use stride_nn::{finfo_eps, Factory};
use stride_nn::{Embedding, Module, Parameter};

/// The output shape and each element's exact value and bound magnitudes.
type Computed = (Vec<usize>, Vec<Terms>);
type Compute = fn(&RefCtx, &[RefArg]) -> Result<Computed, String>;

/// An entry from its computation: the reference is the values, the bound uses `k` stores.
fn entry(name: &'static str, args: Vec<ArgSpec>, k: f64, compute: Compute) -> OpInfo {
    OpInfo::new(name, Family::Nn)
        .args(args)
        .dtypes(dtypes::FLOATS)
        .reference(move |c, a| {
            if !c.compute.is_float() {
                return Err(format!("{name} needs floating-point operands"));
            }
            let (shape, terms) = compute(c, a)?;
            Ok(RefOut::new(shape, terms.iter().map(|t| t.value).collect()))
        })
        .bound(move |c, a| {
            let (_, terms) = compute(c, a)?;
            let d = c.result;
            Ok(terms
                .iter()
                .map(|t| {
                    let want = crate::host::store(t.value, d);
                    bound(t, want, d, k)
                })
                .collect())
        })
}

fn tensor(dtype: DType, shape: Vec<usize>, values: Vec<f64>) -> SampleArg {
    SampleArg::Tensor {
        dtype,
        shape,
        values,
    }
}

fn ints(v: &[i64]) -> Params {
    Params {
        ints: v.to_vec(),
        ..Params::default()
    }
}

fn reduction(p: &Params) -> Reduction {
    match p.ints.first() {
        Some(0) => Reduction::None,
        Some(2) => Reduction::Sum,
        _ => Reduction::Mean,
    }
}

fn flag(p: &Params, i: usize) -> bool {
    p.ints.get(i).is_some_and(|&v| v != 0)
}

fn scalar(p: &Params, i: usize) -> f64 {
    match p.scalars.get(i) {
        Some(Scalar::Float(v)) => *v,
        Some(Scalar::Int(v)) => *v as f64,
        _ => 0.0,
    }
}

/// Reduces per-element terms as `reduction` says: `none` keeps them, `sum`/`mean` add values
/// and magnitudes (every element's stores and the sum's own rounding: `M = S = Σ|l|`).
fn reduce_terms(shape: Vec<usize>, per: Vec<Terms>, r: Reduction, denom: Option<f64>) -> Computed {
    match r {
        Reduction::None => (shape, per),
        Reduction::Sum | Reduction::Mean => {
            let n = per.len() as f64;
            let value: f64 = per.iter().map(|t| t.value).sum();
            let mag: f64 = per.iter().map(|t| t.m.max(t.value.abs())).sum();
            let inner = per.iter().map(|t| t.n * t.s).fold(0.0, f64::max);
            let mut t = Terms {
                value,
                m: mag,
                n: n + 1.0,
                s: mag,
            };
            // a reduction inside each element (a softmax over classes) adds its own term
            t.s += inner / (n + 1.0) * per.len() as f64;
            if r == Reduction::Mean {
                let d = denom.unwrap_or(n);
                t.value /= d;
                t.m /= d.abs();
                t.s /= d.abs();
            }
            (vec![], vec![t])
        }
    }
}

// ----- LayerNorm / RmsNorm ----------------------------------------------------------------

/// The shape of a normalisation input: the base shape (a 0-d base becomes `[4]`).
fn norm_input(shape: &[usize]) -> Vec<usize> {
    if shape.is_empty() {
        vec![4]
    } else {
        shape.to_vec()
    }
}

/// Row lengths on both sides of the fused CUDA kernels' limits: 16-byte vectors (8 halves),
/// the register cache (16 elements a thread forward, 8 backward, at most 1,024 threads: rows
/// past 8,192 / 16,384 are read twice), and the cross-entropy's pass of 2,048 (256 threads ×
/// 8); the long sweeps are `stride-core/tests/norm.rs` and `tests/cross_entropy.rs`.
const LONG_ROWS: [usize; 4] = [257, 1025, 8193, 16385];
const LONG_CLASSES: [usize; 2] = [2049, 8193];

/// The `(input shape, normalized dims)` cases of a norm's samples: the base shape over its
/// last dim and, with variants, its last two, and `(2, n)` rows for each `n` of `long`.
fn norm_cases(ctx: &SampleCtx, long: &[usize]) -> Vec<(Vec<usize>, usize)> {
    let base = norm_input(&ctx.shape);
    let mut cases = vec![(base.clone(), 1usize)];
    if ctx.variants && base.len() >= 2 {
        cases.push((base, 2));
    }
    if ctx.variants {
        cases.extend(long.iter().map(|&n| (vec![2, n], 1)));
    }
    cases
}

/// Samples of LayerNorm (`with_bias`) and RmsNorm: over the last dim and, with variants, the
/// last two, and rows of [`LONG_ROWS`]; values in [-4, 4] and — the large common offset —
/// 100 + [-1, 1].
fn norm_sampler(with_bias: bool) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync {
    move |ctx: &mut SampleCtx| {
        let d = ctx.dtype;
        let mut out = vec![];
        for (x_shape, nd) in norm_cases(ctx, &LONG_ROWS) {
            let w_shape = x_shape[x_shape.len() - nd..].to_vec();
            for offset in [0.0, 100.0] {
                let n = numel(&x_shape);
                let xs: Vec<f64> = if offset == 0.0 {
                    Domain::range(-4.0, 4.0).values(d, n, &mut ctx.rng, ctx.tame)
                } else {
                    Domain::range(offset - 1.0, offset + 1.0).values(d, n, &mut ctx.rng, ctx.tame)
                };
                let mut args = vec![tensor(d, x_shape.clone(), xs)];
                let wn = numel(&w_shape);
                args.push(tensor(
                    d,
                    w_shape.clone(),
                    Domain::range(-2.0, 2.0).values(d, wn, &mut ctx.rng, ctx.tame),
                ));
                if with_bias {
                    args.push(tensor(
                        d,
                        w_shape.clone(),
                        Domain::range(-1.0, 1.0).values(d, wn, &mut ctx.rng, ctx.tame),
                    ));
                }
                out.push(Sample::new(args, ints(&[nd as i64])));
                if !ctx.variants {
                    break;
                }
            }
        }
        out
    }
}

/// Splits `x` into rows over its last `nd` dims: (rows, row length).
fn rows(shape: &[usize], nd: usize) -> Result<(usize, usize), String> {
    if shape.len() < nd {
        return Err(format!("input {shape:?} has fewer than {nd} dims"));
    }
    let m = numel(&shape[shape.len() - nd..]);
    let r = numel(&shape[..shape.len() - nd]);
    Ok((r, m))
}

/// LayerNorm (PyTorch `F.layer_norm`, eps 1e-5, biased variance):
/// `y = (x − μ)/√(σ² + eps)·w + b`.
/// Bound: `k = 4` stores (x − μ, the normaliser, ·r, ·w; the final `+ b` is the result's
/// rounding), `M = |z| + |b|` with `z = (x − μ)·r·w`; the statistics over `n = m` elements
/// in f32: μ's error `γ_m·mean|x|` moves `y` by that times `r·|w|`, σ²'s relative error moves
/// it by `½γ_m·|z|`: `S = r·|w|·mean|x| + |z|`.
fn layer_norm_ref(c: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    let (x, w, b) = (a[0].t(), a[1].t(), a[2].t());
    let nd = c.params.ints.first().copied().unwrap_or(1) as usize;
    let (r, m) = rows(&x.shape, nd)?;
    if w.shape != x.shape[x.shape.len() - nd..] || b.shape != w.shape {
        return Err("weight and bias must have the normalized shape".into());
    }
    let eps = 1e-5;
    let mut out = Vec::with_capacity(r * m);
    for i in 0..r {
        let row = &x.values[i * m..(i + 1) * m];
        let mu = row.iter().sum::<f64>() / m as f64;
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / m as f64;
        let mean_abs = row.iter().map(|v| v.abs()).sum::<f64>() / m as f64;
        let rs = 1.0 / (var + eps).sqrt();
        for j in 0..m {
            let z = (row[j] - mu) * rs * w.values[j];
            out.push(Terms {
                value: z + b.values[j],
                m: z.abs() + b.values[j].abs(),
                n: m as f64,
                s: rs * w.values[j].abs() * mean_abs + z.abs(),
            });
        }
    }
    Ok((x.shape.clone(), out))
}

/// RmsNorm (PyTorch `F.rms_norm`, eps = the dtype's machine epsilon, stride's default):
/// `y = x/√(mean(x²) + eps)·w`. Bound: `k = 4` stores (x², the mean of squares, the
/// normaliser, x·r; ·w is the result's rounding), `M = |y|`; the mean of squares over `n = m`
/// elements in f32 has relative error `γ_m`, which moves `y` by `½γ_m·|y|`: `S = |y|`.
fn rms_norm_ref(c: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    let (x, w) = (a[0].t(), a[1].t());
    let nd = c.params.ints.first().copied().unwrap_or(1) as usize;
    let (r, m) = rows(&x.shape, nd)?;
    if w.shape != x.shape[x.shape.len() - nd..] {
        return Err("weight must have the normalized shape".into());
    }
    let eps = finfo_eps(c.result);
    let mut out = Vec::with_capacity(r * m);
    for i in 0..r {
        let row = &x.values[i * m..(i + 1) * m];
        let ms = row.iter().map(|v| v * v).sum::<f64>() / m as f64;
        let rs = 1.0 / (ms + eps).sqrt();
        for j in 0..m {
            let y = row[j] * rs * w.values[j];
            out.push(Terms {
                value: y,
                m: y.abs(),
                n: m as f64,
                s: y.abs(),
            });
        }
    }
    Ok((x.shape.clone(), out))
}

/// The factory of a module whose parameters are then replaced by the case's operands (f32
/// for integer operands, so that it is the layer's forward — not its construction — that
/// must refuse them).
fn factory(t: &Tensor) -> Factory<'static> {
    Factory {
        dtype: if t.dtype().is_float() {
            t.dtype()
        } else {
            DType::F32
        },
        device: t.device(),
        generator: None,
    }
}

fn normalized(x: &Tensor, p: &Params) -> stride_core::Result<Vec<usize>> {
    let nd = p.ints.first().copied().unwrap_or(1) as usize;
    if x.dim() < nd {
        return Err(stride_core::Error::Invalid {
            op: "registry",
            msg: format!("input of {} dims, {nd} normalized", x.dim()),
        });
    }
    Ok(x.shape()[x.dim() - nd..].to_vec())
}

fn layer_norm() -> OpInfo {
    let any = Domain::range(-4.0, 4.0);
    entry(
        "nn.layer_norm",
        vec![
            ArgSpec::tensor("input", any),
            ArgSpec::tensor("weight", any),
            ArgSpec::tensor("bias", any),
        ],
        4.0,
        layer_norm_ref,
    )
    .sampler(norm_sampler(true))
    // the functional form the module's forward calls, so gradients reach weight and bias
    .functional(|a, p| {
        let x = a[0].t();
        stride_nn::functional::layer_norm(
            x,
            &normalized(x, p)?,
            Some(a[1].t()),
            Some(a[2].t()),
            1e-5,
        )
    })
}

fn rms_norm() -> OpInfo {
    let any = Domain::range(-4.0, 4.0);
    entry(
        "nn.rms_norm",
        vec![
            ArgSpec::tensor("input", any),
            ArgSpec::tensor("weight", any),
        ],
        4.0,
        rms_norm_ref,
    )
    .sampler(norm_sampler(false))
    .functional(|a, p| {
        let x = a[0].t();
        stride_nn::functional::rms_norm(x, &normalized(x, p)?, Some(a[1].t()), None)
    })
}

/// Row lengths of `nn.add_rms_norm` across the fused CUDA forward's sizes: a lane's 16-byte
/// vector, a warp (32), the warp-per-row path's cap (1,024 f32), a block of 1,024 threads;
/// `stride-core/tests/add_rms_norm.rs` sweeps them (and the longer ones) bit for bit.
const ADD_NORM_ROWS: [usize; 9] = [1, 31, 32, 33, 576, 1023, 1024, 1025, 4097];

/// Samples of `nn.add_rms_norm`: `(input, residual, weight)` as [`norm_sampler`]'s (input and
/// residual in [-4, 4], or the input near 100 and the residual in [-1, 1]), with variants
/// also rows of [`ADD_NORM_ROWS`].
fn add_norm_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let d = ctx.dtype;
    let mut out = vec![];
    for (x_shape, nd) in norm_cases(ctx, &ADD_NORM_ROWS) {
        let w_shape = x_shape[x_shape.len() - nd..].to_vec();
        let n = numel(&x_shape);
        for offset in [0.0, 100.0] {
            let (x, r) = match offset == 0.0 {
                true => (Domain::range(-4.0, 4.0), Domain::range(-4.0, 4.0)),
                false => (
                    Domain::range(offset - 1.0, offset + 1.0),
                    Domain::range(-1.0, 1.0),
                ),
            };
            let args = vec![
                tensor(d, x_shape.clone(), x.values(d, n, &mut ctx.rng, ctx.tame)),
                tensor(d, x_shape.clone(), r.values(d, n, &mut ctx.rng, ctx.tame)),
                tensor(
                    d,
                    w_shape.clone(),
                    Domain::range(-2.0, 2.0).values(d, numel(&w_shape), &mut ctx.rng, ctx.tame),
                ),
            ];
            out.push(Sample::new(args, ints(&[nd as i64])));
            if !ctx.variants {
                break;
            }
        }
    }
    out
}

/// The fused residual add and RmsNorm (`stride_nn::functional::add_rms_norm`, eps = the
/// dtype's machine epsilon), both results stacked: `[h, y]` with `h = x + r` and `y =
/// rms_norm(h)·w` (the exact sum: the reference normalises `x + r` in f64). Bound: `h` is one
/// rounding (`M = 0`: the ulp term alone); `y` is [`rms_norm_ref`]'s with `k = 6` — its four
/// stores and the sum's rounding into the dtype (`u·|h|` per element, which moves `y` by
/// `u·|y|` directly and by at most `u·|y|` through `rstd`).
fn add_rms_norm_ref(c: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    let (x, r) = (a[0].t(), a[1].t());
    if r.shape != x.shape {
        return Err("the residual must have the input's shape".into());
    }
    // the exact sum as an operand of rms_norm's reference (its values are all it reads)
    let mut h = x.clone();
    h.values = x.values.iter().zip(&r.values).map(|(x, r)| x + r).collect();
    let (shape, normed) = rms_norm_ref(c, &[RefArg::Tensor(&h), a[2]])?;
    let sums = h.values.iter().map(|&value| Terms {
        value,
        m: 0.0,
        n: 0.0,
        s: 0.0,
    });
    let mut out_shape = vec![2];
    out_shape.extend(shape);
    Ok((out_shape, sums.chain(normed).collect()))
}

fn add_rms_norm() -> OpInfo {
    let any = Domain::range(-4.0, 4.0);
    entry(
        "nn.add_rms_norm",
        vec![
            ArgSpec::tensor("input", any),
            ArgSpec::tensor("residual", any),
            ArgSpec::tensor("weight", any),
        ],
        6.0,
        add_rms_norm_ref,
    )
    .sampler(add_norm_sampler)
    // both results, so that each is checked and gradients reach the operands through each
    .functional(|a, p| {
        let x = a[0].t();
        let (h, y) = stride_nn::functional::add_rms_norm(
            x,
            a[1].t(),
            &normalized(x, p)?,
            Some(a[2].t()),
            None,
        )?;
        Tensor::stack(&[&h, &y], 0)
    })
}

// ----- Embedding ----------------------------------------------------------------------------

/// A table `[num, dim]` from the base shape's last two sizes (at least one row) and indices
/// `[4]` (with variants also `[2, 3]`); `ints[0]` = padding_idx + 1 (0: none).
fn embedding_sampler(padding: bool) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync {
    move |ctx: &mut SampleCtx| {
        let d = ctx.dtype;
        let s = &ctx.shape;
        let (num, dim) = match s.len() {
            0 => (3, 2),
            1 => (s[0].max(1), 3),
            l => (s[l - 2].max(1), s[l - 1]),
        };
        let mut idx_shapes = vec![vec![4usize]];
        if ctx.variants {
            idx_shapes.push(vec![2, 3]);
        }
        let mut out = vec![];
        for ish in idx_shapes {
            let w = Domain::range(-4.0, 4.0).values(d, num * dim, &mut ctx.rng, ctx.tame);
            let idx: Vec<f64> = (0..numel(&ish))
                .map(|_| ctx.rng.below(num) as f64)
                .collect();
            let pad = if padding {
                ctx.rng.below(num) as i64 + 1
            } else {
                0
            };
            out.push(Sample::new(
                vec![tensor(d, vec![num, dim], w), tensor(DType::I64, ish, idx)],
                ints(&[pad]),
            ));
        }
        out
    }
}

/// `y[i…, :] = w[idx[i…], :]` — a copy: exact (`k = 0`, `M = S = 0`; the bound is one ulp of
/// the value only because the runner's bound always has it; the values are copies of
/// stored values, so any difference is a wrong row).
fn embedding_ref(_: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    let (w, idx) = (a[0].t(), a[1].t());
    let (num, dim) = (w.shape[0], w.shape[1]);
    let mut out = vec![];
    for &i in &idx.values {
        if i < 0.0 || i as usize >= num {
            return Err(format!("index {i} out of range for {num} rows"));
        }
        for j in 0..dim {
            out.push(Terms {
                value: w.values[i as usize * dim + j],
                ..Terms::default()
            });
        }
    }
    let mut shape = idx.shape.clone();
    shape.push(dim);
    Ok((shape, out))
}

fn embedding(name: &'static str, grad_path: bool) -> OpInfo {
    let op = entry(
        name,
        vec![
            ArgSpec::tensor("weight", Domain::range(-4.0, 4.0)),
            ArgSpec::fixed("indices", DType::I64, Domain::any()),
        ],
        0.0,
        embedding_ref,
    )
    .sampler(embedding_sampler(grad_path));
    // exact: no ulp either; the gather path copies any dtype (PyTorch's `F.embedding`
    // too), the one-hot path of a trainable weight is float only
    let op = op
        .bound(|c, a| {
            let (_, t) = embedding_ref(c, a)?;
            Ok(vec![0.0; t.len()])
        })
        .reference(|c, a| {
            let (shape, t) = embedding_ref(c, a)?;
            Ok(RefOut::new(shape, t.iter().map(|t| t.value).collect()))
        });
    let op = if grad_path {
        op
    } else {
        op.dtypes(dtypes::ALL)
    };
    op.functional(move |a, p| {
        let w = a[0].t();
        let pad = p.ints.first().copied().unwrap_or(0);
        let mut e = Embedding::new_with(
            w.shape().first().copied().unwrap_or(1).max(1),
            w.shape().get(1).copied().unwrap_or(1),
            (pad > 0).then(|| pad as usize - 1),
            &factory(w),
        )?;
        if grad_path {
            // a weight that requires grad takes the differentiable one-hot path
            e.weight = Parameter::new(w.clone())?;
            e.forward(a[1].t())
        } else {
            e.weight = Parameter::frozen(w.clone());
            let _ng = stride_core::autograd::no_grad();
            e.forward(a[1].t())
        }
    })
}

// ----- elementwise losses -------------------------------------------------------------------

/// Two (or more) same-shape operands in the base shape, each over its domain, for every
/// reduction (with variants; else `mean`); `extra` picks more parameters per sample.
fn pointwise_sampler(
    domains: Vec<Domain>,
    extra: fn(&mut SampleCtx) -> Vec<Params>,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync {
    move |ctx: &mut SampleCtx| {
        let d = ctx.dtype;
        let shape = ctx.shape.clone();
        let n = numel(&shape);
        let reds: Vec<i64> = if ctx.variants { vec![0, 1, 2] } else { vec![1] };
        let mut out = vec![];
        for p in extra(ctx) {
            for &r in &reds {
                let args = domains
                    .iter()
                    .map(|dom| tensor(d, shape.clone(), dom.values(d, n, &mut ctx.rng, ctx.tame)))
                    .collect();
                let mut p = p.clone();
                if p.ints.is_empty() {
                    p.ints.push(r);
                } else {
                    p.ints[0] = r;
                }
                out.push(Sample::new(args, p));
            }
        }
        out
    }
}

fn no_extra(_: &mut SampleCtx) -> Vec<Params> {
    vec![Params::default()]
}

/// Per-element losses `f(x, t)` with their magnitudes, then the reduction.
fn pointwise(
    c: &RefCtx,
    a: &[RefArg],
    mut f: impl FnMut(f64, f64) -> (f64, f64),
) -> Result<Computed, String> {
    let (x, t) = (a[0].t(), a[1].t());
    if x.shape != t.shape {
        return Err("input and target must have the same shape".into());
    }
    let per = x
        .values
        .iter()
        .zip(&t.values)
        .map(|(&x, &t)| {
            let (v, m) = f(x, t);
            Terms {
                value: v,
                m,
                n: 0.0,
                s: 0.0,
            }
        })
        .collect();
    Ok(reduce_terms(
        x.shape.clone(),
        per,
        reduction(c.params),
        None,
    ))
}

/// `(x − t)²`: `k = 3` (the difference's store doubles in the square, plus the square's own),
/// `M = |l|`; the sum/mean in f32 over `n` elements with `S = Σ|l|`.
fn mse() -> OpInfo {
    let any = Domain::range(-4.0, 4.0);
    entry(
        "nn.mse_loss",
        vec![
            ArgSpec::tensor("input", any),
            ArgSpec::tensor("target", any),
        ],
        3.0,
        |c, a| {
            pointwise(c, a, |x, t| {
                let l = (x - t) * (x - t);
                (l, l)
            })
        },
    )
    .sampler(pointwise_sampler(vec![any, any], no_extra))
    .functional(|a, p| loss::mse_loss(a[0].t(), a[1].t(), reduction(p)))
}

/// `|x − t|`: `k = 1` (the difference), `M = |l|`.
fn l1() -> OpInfo {
    let any = Domain::range(-4.0, 4.0);
    entry(
        "nn.l1_loss",
        vec![
            ArgSpec::tensor("input", any),
            ArgSpec::tensor("target", any),
        ],
        1.0,
        |c, a| {
            pointwise(c, a, |x, t| {
                let l = (x - t).abs();
                (l, l)
            })
        },
    )
    .sampler(pointwise_sampler(vec![any, any], no_extra))
    .functional(|a, p| loss::l1_loss(a[0].t(), a[1].t(), reduction(p)))
}

fn betas(_: &mut SampleCtx) -> Vec<Params> {
    [1.0, 0.5, 0.0]
        .iter()
        .map(|&b| Params {
            ints: vec![1],
            scalars: vec![Scalar::Float(b)],
            ..Params::default()
        })
        .collect()
}

/// PyTorch's `smooth_l1_loss`: `z = |x − t|`; `0.5·z²/β` where `z < β`, else `z − 0.5·β`
/// (β = 0: `z`). `k = 4` (z, z², ·0.5/β; on the linear side z − 0.5β is within 2× of z's
/// error since z ≥ β), `M = |l| + z`.
fn smooth_l1() -> OpInfo {
    let any = Domain::range(-4.0, 4.0);
    entry(
        "nn.smooth_l1_loss",
        vec![
            ArgSpec::tensor("input", any),
            ArgSpec::tensor("target", any),
        ],
        4.0,
        |c, a| {
            let beta = scalar(c.params, 0);
            if beta < 0.0 {
                return Err("beta must be non-negative".into());
            }
            pointwise(c, a, |x, t| {
                let z = (x - t).abs();
                let l = if beta == 0.0 {
                    z
                } else if z < beta {
                    0.5 * z * z / beta
                } else {
                    z - 0.5 * beta
                };
                (l, l + z)
            })
        },
    )
    .sampler(pointwise_sampler(vec![any, any], betas))
    .functional(|a, p| loss::smooth_l1_loss(a[0].t(), a[1].t(), reduction(p), scalar(p, 0)))
}

fn weighted(_: &mut SampleCtx) -> Vec<Params> {
    vec![ints(&[1, 0]), ints(&[1, 1])]
}

/// PyTorch's `binary_cross_entropy`: `−w·(y·max(ln x, −100) + (1 − y)·max(ln(1 − x), −100))`
/// (`ints[1]`: use the weight operand). `k = 6` (ln x, 1 − x, its ln, the two products and
/// their sum, ·w), `M = |w|·(|y ln x| + |1 − y|·(|ln(1 − x)| + 1))` — the `+ 1` for the
/// stored `1 − x`, whose relative error becomes an absolute one in its log.
fn bce() -> OpInfo {
    let x = Domain::range(0.02, 0.98);
    let y = Domain::range(0.0, 1.0);
    let w = Domain::range(0.0, 2.0);
    entry(
        "nn.binary_cross_entropy",
        vec![
            ArgSpec::tensor("input", x),
            ArgSpec::tensor("target", y),
            ArgSpec::tensor("weight", w),
        ],
        6.0,
        |c, a| {
            let use_w = flag(c.params, 1);
            let wv = a[2].t();
            if a[0].t().values.iter().any(|v| !(0.0..=1.0).contains(v)) {
                return Err("input outside [0, 1]".into());
            }
            let mut i = 0;
            pointwise(c, a, |x, y| {
                let w = if use_w { wv.values[i] } else { 1.0 };
                i += 1;
                let lx = x.ln().max(-100.0);
                let l1x = (1.0 - x).ln().max(-100.0);
                let l = -w * (y * lx + (1.0 - y) * l1x);
                (
                    l,
                    w.abs() * ((y * lx).abs() + (1.0 - y).abs() * (l1x.abs() + 1.0)),
                )
            })
        },
    )
    .sampler(pointwise_sampler(vec![x, y, w], weighted))
    .functional(|a, p| {
        let w = flag(p, 1).then(|| a[2].t());
        loss::binary_cross_entropy(a[0].t(), a[1].t(), w, reduction(p))
    })
}

fn weighted_pos(_: &mut SampleCtx) -> Vec<Params> {
    vec![
        ints(&[1, 0, 0]),
        ints(&[1, 1, 0]),
        ints(&[1, 0, 1]),
        ints(&[1, 1, 1]),
    ]
}

/// PyTorch's `binary_cross_entropy_with_logits`: `w·((1 − y)·x − lw·log σ(x))` with
/// `lw = 1 + (pw − 1)·y` and `log σ(x) = min(x, 0) − log1p(e^−|x|)` (`ints[1]`: weight,
/// `ints[2]`: pos_weight, both same-shape operands here). `k = 8` (e^−|x|, log1p, the
/// difference, lw's two steps, ·lw, (1 − y)·x, the difference, ·w), `M = |w|·(|(1 − y)·x| +
/// |lw|·(|min(x, 0)| + log1p(e^−|x|) + 1))`.
fn bce_logits() -> OpInfo {
    let x = Domain::range(-4.0, 4.0);
    let y = Domain::range(0.0, 1.0);
    let w = Domain::range(0.0, 2.0);
    let pw = Domain::range(0.5, 3.0);
    entry(
        "nn.binary_cross_entropy_with_logits",
        vec![
            ArgSpec::tensor("input", x),
            ArgSpec::tensor("target", y),
            ArgSpec::tensor("weight", w),
            ArgSpec::tensor("pos_weight", pw),
        ],
        8.0,
        |c, a| {
            let (use_w, use_pw) = (flag(c.params, 1), flag(c.params, 2));
            let (wv, pwv) = (a[2].t(), a[3].t());
            let mut i = 0;
            pointwise(c, a, |x, y| {
                let w = if use_w { wv.values[i] } else { 1.0 };
                let lw = if use_pw {
                    1.0 + (pwv.values[i] - 1.0) * y
                } else {
                    1.0
                };
                i += 1;
                let sp = (-x.abs()).exp().ln_1p();
                let log_sig = x.min(0.0) - sp;
                let l = w * ((1.0 - y) * x - lw * log_sig);
                let m =
                    w.abs() * (((1.0 - y) * x).abs() + lw.abs() * (x.min(0.0).abs() + sp + 1.0));
                (l, m)
            })
        },
    )
    .sampler(pointwise_sampler(vec![x, y, w, pw], weighted_pos))
    .functional(|a, p| {
        let w = flag(p, 1).then(|| a[2].t());
        let pw = flag(p, 2).then(|| a[3].t());
        loss::binary_cross_entropy_with_logits(a[0].t(), a[1].t(), w, pw, reduction(p))
    })
}

// ----- class losses -------------------------------------------------------------------------

/// The input shape of a class loss from the base shape: `(N, C, d…)`, `(C)`, or `[3, 4]` for
/// a 0-d base; at least one class.
fn class_input(shape: &[usize]) -> Vec<usize> {
    let mut s = match shape.len() {
        0 => vec![3, 4],
        _ => shape.to_vec(),
    };
    let cd = if s.len() == 1 { 0 } else { 1 };
    s[cd] = s[cd].max(1);
    s
}

/// The ignore_index of the samples (PyTorch's default).
const IGNORE: i64 = -100;

/// Class-loss samples: logits (or log-probabilities, `input`), integer targets (or, with
/// `probs`, class probabilities of the input's shape), a per-class weight; `ints` =
/// [reduction, use weight, some targets ignored], `scalars[0]` = label smoothing.
fn class_sampler(
    input: Domain,
    probs: bool,
    smoothing: bool,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync {
    move |ctx: &mut SampleCtx| {
        let d = ctx.dtype;
        let mut out = vec![];
        for (xs, long) in class_cases(ctx, probs) {
            let cd = if xs.len() == 1 { 0 } else { 1 };
            let c = xs[cd];
            let mut ts = xs.clone();
            ts.remove(cd);
            let mut combos: Vec<(i64, i64, i64, f64)> = vec![(1, 1, 1, 0.0)];
            if ctx.variants {
                combos = vec![];
                for r in [0, 1, 2] {
                    for w in [0, 1] {
                        combos.push((r, w, (!probs) as i64 * (r % 2), 0.0));
                        if smoothing {
                            combos.push((r, w, (!probs) as i64, 0.1));
                        }
                    }
                }
            }
            if long {
                // the fused kernel's path: class indices, no weight; mean, ignored rows, smoothing
                combos = vec![(1, 0, 1, 0.1)];
            }
            for (r, w, ig, ls) in combos {
                let x = input.values(d, numel(&xs), &mut ctx.rng, ctx.tame);
                let target = if probs {
                    // positive, normalised along the class dim, then stored in the dtype
                    let raw: Vec<f64> = (0..numel(&xs)).map(|_| 0.05 + ctx.rng.unit()).collect();
                    let inner: usize = xs[cd + 1..].iter().product();
                    let mut t = raw.clone();
                    for o in 0..numel(&xs[..cd]) {
                        for i in 0..inner {
                            let at = |k: usize| (o * c + k) * inner + i;
                            let s: f64 = (0..c).map(|k| raw[at(k)]).sum();
                            for k in 0..c {
                                t[at(k)] = crate::host::store(raw[at(k)] / s, d);
                            }
                        }
                    }
                    tensor(d, xs.clone(), t)
                } else {
                    let t: Vec<f64> = (0..numel(&ts))
                        .map(|_| {
                            if ig != 0 && ctx.rng.below(4) == 0 {
                                IGNORE as f64
                            } else {
                                ctx.rng.below(c) as f64
                            }
                        })
                        .collect();
                    tensor(DType::I64, ts.clone(), t)
                };
                let wv = Domain::range(0.25, 2.0).values(d, c, &mut ctx.rng, ctx.tame);
                out.push(Sample::new(
                    vec![tensor(d, xs.clone(), x), target, tensor(d, vec![c], wv)],
                    Params {
                        ints: vec![r, w],
                        scalars: vec![Scalar::Float(ls)],
                        ..Params::default()
                    },
                ));
            }
        }
        out
    }
}

/// The input shapes of a class loss's samples: the base shape, and with variants (index
/// targets only) rows of [`LONG_CLASSES`] classes (`true`: take the long cases' combination).
fn class_cases(ctx: &SampleCtx, probs: bool) -> Vec<(Vec<usize>, bool)> {
    let mut cases = vec![(class_input(&ctx.shape), false)];
    if ctx.variants && !probs {
        cases.extend(LONG_CLASSES.iter().map(|&c| (vec![2, c], true)));
    }
    cases
}

fn options(a: &[Arg], p: &Params) -> CrossEntropy {
    CrossEntropy {
        weight: flag(p, 1).then(|| a[2].t().clone()),
        ignore_index: IGNORE,
        reduction: reduction(p),
        label_smoothing: scalar(p, 0),
        z_loss: 0.0,
    }
}

/// Walks the positions of a class loss: for each (outer, inner) position, the class values
/// of `x` along the class dim.
fn class_positions(shape: &[usize]) -> (usize, usize, usize, usize) {
    let cd = if shape.len() == 1 { 0 } else { 1 };
    let c = shape[cd];
    let outer = numel(&shape[..cd]);
    let inner = numel(&shape[cd + 1..]);
    (cd, c, outer, inner)
}

/// log-softmax of one position: (logp per class, lse).
fn log_softmax(x: &[f64]) -> (Vec<f64>, f64) {
    let mx = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = mx + x.iter().map(|v| (v - mx).exp()).sum::<f64>().ln();
    (x.iter().map(|v| v - lse).collect(), lse)
}

/// Index-target class losses (PyTorch `cross_entropy` / `nll_loss` with `weight`,
/// `ignore_index`, `label_smoothing`): per position with target `t ≠ ignore`,
/// `nll = −w_t·logp_t`, `smooth = −Σ_c w_c·logp_c`, `loss = (1 − ε)·nll + ε/C·smooth`;
/// `mean` divides the nll part by `Σ w_t` and the smooth part by `Σ w_t` (with a weight) or
/// by the count of non-ignored targets (without). `logp = log_softmax(x)` for
/// cross_entropy, `x` itself for nll_loss.
/// Bound: `M = (1 − ε)·w_t·(|logp_t| + |lse|) + ε/C·Σ_c w_c·(|logp_c| + |lse|)` (the
/// subtraction `x − lse` carries both operands' errors), the log-softmax's reduction over
/// `C` classes inside each element (`n = C`, `S = M`), then the batch reduction.
fn class_ref(c: &RefCtx, a: &[RefArg], softmax: bool) -> Result<Computed, String> {
    let (x, t, wt) = (a[0].t(), a[1].t(), a[2].t());
    let (cd, nc, outer, inner) = class_positions(&x.shape);
    let mut ts = x.shape.clone();
    ts.remove(cd);
    if t.shape != ts {
        return Err(format!("target {:?} must be {:?}", t.shape, ts));
    }
    let use_w = flag(c.params, 1);
    let eps = if softmax { scalar(c.params, 0) } else { 0.0 };
    let w = |k: usize| if use_w { wt.values[k] } else { 1.0 };
    let mut per = vec![];
    let (mut wsum, mut count) = (0.0, 0.0);
    let (mut nll_sum, mut smooth_sum) = (0.0, 0.0);
    for o in 0..outer {
        for i in 0..inner {
            let col: Vec<f64> = (0..nc)
                .map(|k| x.values[(o * nc + k) * inner + i])
                .collect();
            let (logp, lse) = if softmax {
                log_softmax(&col)
            } else {
                (col.clone(), 0.0)
            };
            let tv = t.values[o * inner + i] as i64;
            if tv == IGNORE {
                per.push(Terms::default());
                continue;
            }
            if tv < 0 || tv as usize >= nc {
                return Err(format!("target {tv} out of range for {nc} classes"));
            }
            let tk = tv as usize;
            let nll = -w(tk) * logp[tk];
            let smooth: f64 = -(0..nc).map(|k| w(k) * logp[k]).sum::<f64>();
            let mag = (1.0 - eps) * w(tk) * (logp[tk].abs() + lse.abs())
                + eps / nc as f64
                    * (0..nc)
                        .map(|k| w(k) * (logp[k].abs() + lse.abs()))
                        .sum::<f64>();
            wsum += w(tk);
            count += 1.0;
            nll_sum += nll;
            smooth_sum += smooth;
            per.push(Terms {
                value: (1.0 - eps) * nll + eps / nc as f64 * smooth,
                m: mag,
                n: if softmax { nc as f64 } else { 0.0 },
                s: mag,
            });
        }
    }
    let r = reduction(c.params);
    let (shape, mut terms) = reduce_terms(ts, per, r, None);
    if r == Reduction::Mean {
        // the two parts have their own denominators; magnitudes over the weight sum
        let sd = if use_w { wsum } else { count };
        let t0 = &mut terms[0];
        t0.value = (1.0 - eps) * nll_sum / wsum + eps / nc as f64 * smooth_sum / sd;
        let n = (outer * inner) as f64;
        let scale = n / wsum.min(sd).abs();
        t0.m *= scale;
        t0.s *= scale;
    }
    Ok((shape, terms))
}

/// Probability-target cross entropy (PyTorch): `tgt = (1 − ε)·p + ε/C`, per position
/// `−Σ_c w_c·tgt_c·logp_c`; `mean` divides by the number of positions. `k = 6` (log-softmax,
/// the two smoothing steps, ·tgt, ·w, the class sum's store), `M = Σ_c |w_c·tgt_c|·(|logp_c|
/// + |lse|)`; the class sum and the log-softmax reduce over `C` (`n = 2C`), then the batch.
fn class_probs_ref(c: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    let (x, p, wt) = (a[0].t(), a[1].t(), a[2].t());
    if p.shape != x.shape {
        return Err("probability targets must have the input's shape".into());
    }
    let (cd, nc, outer, inner) = class_positions(&x.shape);
    let mut ts = x.shape.clone();
    ts.remove(cd);
    let use_w = flag(c.params, 1);
    let eps = scalar(c.params, 0);
    let mut per = vec![];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * nc + k) * inner + i;
            let col: Vec<f64> = (0..nc).map(|k| x.values[at(k)]).collect();
            let (logp, lse) = log_softmax(&col);
            let (mut v, mut m) = (0.0, 0.0);
            for k in 0..nc {
                let w = if use_w { wt.values[k] } else { 1.0 };
                let tg = (1.0 - eps) * p.values[at(k)] + eps / nc as f64;
                v -= w * tg * logp[k];
                m += (w * tg).abs() * (logp[k].abs() + lse.abs());
            }
            per.push(Terms {
                value: v,
                m,
                n: 2.0 * nc as f64,
                s: m,
            });
        }
    }
    let n = per.len() as f64;
    Ok(reduce_terms(ts, per, reduction(c.params), Some(n)))
}

fn cross_entropy() -> OpInfo {
    entry(
        "nn.cross_entropy",
        vec![
            ArgSpec::tensor("input", Domain::range(-4.0, 4.0)),
            ArgSpec::fixed("target", DType::I64, Domain::any()),
            ArgSpec::tensor("weight", Domain::range(0.25, 2.0)),
        ],
        4.0,
        |c, a| class_ref(c, a, true),
    )
    .sampler(class_sampler(Domain::range(-4.0, 4.0), false, true))
    .functional(|a, p| loss::cross_entropy(a[0].t(), a[1].t(), &options(a, p)))
}

fn cross_entropy_probs() -> OpInfo {
    entry(
        "nn.cross_entropy.probs",
        vec![
            ArgSpec::tensor("input", Domain::range(-4.0, 4.0)),
            ArgSpec::tensor("target", Domain::range(0.0, 1.0)),
            ArgSpec::tensor("weight", Domain::range(0.25, 2.0)),
        ],
        6.0,
        class_probs_ref,
    )
    .sampler(class_sampler(Domain::range(-4.0, 4.0), true, true))
    .functional(|a, p| loss::cross_entropy(a[0].t(), a[1].t(), &options(a, p)))
}

/// `nll_loss` of log-probabilities: `k = 3` (·w, the neg, the sum's element store), `M =
/// w_t·|x_t|`.
fn nll() -> OpInfo {
    entry(
        "nn.nll_loss",
        vec![
            ArgSpec::tensor("input", Domain::range(-6.0, 0.0)),
            ArgSpec::fixed("target", DType::I64, Domain::any()),
            ArgSpec::tensor("weight", Domain::range(0.25, 2.0)),
        ],
        3.0,
        |c, a| class_ref(c, a, false),
    )
    .sampler(class_sampler(Domain::range(-6.0, 0.0), false, false))
    .functional(|a, p| {
        let mut o = options(a, p);
        o.label_smoothing = 0.0;
        loss::nll_loss(a[0].t(), a[1].t(), &o)
    })
}

// ----- scaled dot-product attention ---------------------------------------------------------

/// Query and key lengths on both sides of an attention kernel's tiles (16, 64, 128 and 256
/// rows or keys); a variant case draws its `(L, S)` pair from here.
const TILE_LENGTHS: [usize; 12] = [1, 15, 16, 17, 63, 64, 65, 127, 129, 130, 255, 257];
/// Head dims: vector widths, the common 64 and 128, and 72 (not a power of two).
const HEAD_DIMS: [usize; 5] = [8, 16, 64, 72, 128];
/// The most multiply-adds `L·S·E` one tile-crossing case may cost (the reference runs twice
/// per call, in every layout the case is tried in): keeps the entry under a second on the CPU.
const MAX_TILE_WORK: usize = 1 << 19;
/// The largest `L` and `S` a base shape gives (the sweep's sizes reach 1025).
const MAX_BASE_LEN: usize = 33;

/// Value ranges of query and key (scores of a few units), value, and mask entries.
const QK: Domain = Domain::range(-2.0, 2.0);
const VALUES: Domain = Domain::range(-4.0, 4.0);
const MASK: Domain = Domain::range(-2.0, 2.0);

/// `ints[2]` of an attention sample: which mask operand (operand 3) it has.
const NO_MASK: i64 = 0;
const BOOL_MASK: i64 = 1;
const FLOAT_MASK: i64 = 2;
/// A mask of another dtype (i64): must be refused.
const OTHER_MASK: i64 = 3;

/// One attention case: q `(B, Hq, L, E)`, k `(B, Hk, S, E)`, v `(B, Hk, S, Ev)`.
#[derive(Debug, Clone, Copy)]
struct Attn {
    b: usize,
    hq: usize,
    hk: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
    causal: bool,
    gqa: bool,
    /// What operand 3 is: [`NO_MASK`], a bool `(B, 1, L, S)` mask ([`BOOL_MASK`]; one row
    /// fully masked), a float `(L, S)` mask ([`FLOAT_MASK`]; `inf`: −inf entries, one row all
    /// −inf, and large finite values ±[10³, 10⁴]) or an i64 one ([`OTHER_MASK`]).
    mask: i64,
    inf: bool,
    scale: Option<f64>,
    /// q's and k's ranges (the large-magnitude case widens them).
    q: Domain,
    k: Domain,
}

impl Attn {
    /// A single-head, single-batch case of these sizes.
    fn sized(l: usize, s: usize, e: usize) -> Attn {
        Attn {
            b: 1,
            hq: 1,
            hk: 1,
            l,
            s,
            e,
            ev: e,
            causal: false,
            gqa: false,
            mask: NO_MASK,
            inf: false,
            scale: None,
            q: QK,
            k: QK,
        }
    }
}

/// `(B, H, L, S)` from the base shape: `[n]` → `L = S = n`, `[L, S]`, `[B, L, S]`,
/// `[B, H, L, S]` (B ≤ 2, H ≤ 3, L and S ≤ [`MAX_BASE_LEN`]; sizes 0 stay 0).
fn attn_dims(shape: &[usize]) -> (usize, usize, usize, usize) {
    let cap = |n: usize| n.min(MAX_BASE_LEN);
    match *shape {
        [] => (1, 1, 1, 1),
        [n] => (1, 1, cap(n), cap(n)),
        [l, s] => (1, 1, cap(l), cap(s)),
        [b, l, s] => (b.min(2), 1, cap(l), cap(s)),
        [b, h, l, s, ..] => (b.min(2), h.min(3), cap(l), cap(s)),
    }
}

/// The operands and parameters of one case (values from the operands' domains, stored in
/// the case's dtype); `ints` = [causal, enable_gqa, mask kind], `scalars` = [scale] when
/// the case passes one.
fn attn_sample(ctx: &mut SampleCtx, c: Attn) -> Sample {
    let d = ctx.dtype;
    let draw = |dom: Domain, shape: Vec<usize>, ctx: &mut SampleCtx| {
        let values = dom.values(d, numel(&shape), &mut ctx.rng, ctx.tame);
        tensor(d, shape, values)
    };
    let mut args = vec![
        draw(c.q, vec![c.b, c.hq, c.l, c.e], ctx),
        draw(c.k, vec![c.b, c.hk, c.s, c.e], ctx),
        draw(VALUES, vec![c.b, c.hk, c.s, c.ev], ctx),
    ];
    match c.mask {
        BOOL_MASK => {
            // true = attend, 3 keys in 4; the last row of the last batch attends to nothing
            // (not row 0: an expanded layout repeats row 0 over every row)
            let shape = vec![c.b, 1, c.l, c.s];
            let mut m: Vec<f64> = (0..numel(&shape))
                .map(|_| (ctx.rng.below(4) != 0) as u8 as f64)
                .collect();
            if c.b * c.l >= 2 {
                let row = (c.b * c.l - 1) * c.s;
                m[row..row + c.s].fill(0.0);
            }
            args.push(tensor(DType::Bool, shape, m));
        }
        FLOAT_MASK => {
            let shape = vec![c.l, c.s];
            let mut m: Vec<f64> = (0..numel(&shape))
                .map(|_| match ctx.rng.below(8) {
                    0 if c.inf => f64::NEG_INFINITY,
                    1 if c.inf => {
                        let sign = if ctx.rng.coin() { 1.0 } else { -1.0 };
                        crate::host::store(sign * ctx.rng.range_f64(1e3, 1e4), d)
                    }
                    _ => MASK.values(d, 1, &mut ctx.rng, ctx.tame)[0],
                })
                .collect();
            if c.inf && c.l >= 2 {
                let row = (c.l - 1) * c.s;
                m[row..row + c.s].fill(f64::NEG_INFINITY);
            }
            args.push(tensor(d, shape, m));
        }
        OTHER_MASK => {
            let shape = vec![c.l, c.s];
            let m = (0..numel(&shape))
                .map(|_| ctx.rng.below(2) as f64)
                .collect();
            args.push(tensor(DType::I64, shape, m));
        }
        _ => {}
    }
    let mut p = ints(&[c.causal as i64, c.gqa as i64, c.mask]);
    if let Some(s) = c.scale {
        p.scalars.push(Scalar::Float(s));
    }
    Sample::new(args, p)
}

/// Samples of scaled dot-product attention. Each base shape gives one case of its sizes
/// ([`attn_dims`], `E = 4`; causal or not). With variants, in this order (the gradcheck
/// sweep takes the first few that fit its size limit, one per layout): plain; causal; a bool
/// mask with a fully masked row (zeros); a finite float mask with an explicit scale; GQA
/// (Hq = 4, Hk = 2); causal with `L < S` (top-left alignment); the large-magnitude case
/// (q in ±100, k in ±25, `E = 4`, scale 1: logits up to 10⁴); an explicit scale; causal GQA;
/// causal with `L > S` (rows past `S` see every key); `Ev ≠ E`; a float mask with −inf
/// entries, a −inf row and large finite values; then one case whose `(L, S)` crosses kernel
/// tiles ([`TILE_LENGTHS`], one head, `E` from [`HEAD_DIMS`] within [`MAX_TILE_WORK`];
/// plain, causal or bool-masked) and one of a wide head (`E` from [`HEAD_DIMS`], L, S ∈
/// 15..=17) — drawn per (dtype, layout), so the matrix's 28 variant calls spread over the
/// lists; and three that must be refused (is_causal with a mask, GQA heads without
/// enable_gqa, an i64 mask).
fn attention_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let (b, h, l, s) = attn_dims(&ctx.shape);
    let base = Attn {
        b,
        hq: h,
        hk: h,
        ..Attn::sized(l, s, 4)
    };
    if !ctx.variants {
        let causal = ctx.rng.coin();
        return vec![attn_sample(ctx, Attn { causal, ..base })];
    }
    // GQA small enough for the gradcheck sweep's 64 elements
    let gqa = Attn {
        b: b.min(1),
        hq: 4,
        hk: 2,
        gqa: true,
        ..Attn::sized(l.min(2), s.min(3), 2)
    };
    let causal_short = Attn {
        causal: true,
        ..Attn::sized(2, 5, 3)
    };
    let mut cases = vec![
        base,
        Attn {
            causal: true,
            ..base
        },
        Attn {
            mask: BOOL_MASK,
            ..base
        },
        Attn {
            mask: FLOAT_MASK,
            scale: Some(1.7),
            ..base
        },
        gqa,
        causal_short,
        Attn {
            scale: Some(1.0),
            q: Domain::range(-100.0, 100.0),
            k: Domain::range(-25.0, 25.0),
            ..Attn::sized(3, 5, 4)
        },
        Attn {
            scale: Some(0.3),
            ..base
        },
        Attn {
            causal: true,
            ..gqa
        },
        Attn {
            l: 5,
            s: 2,
            ..causal_short
        },
        Attn {
            e: 3,
            ev: 5,
            ..base
        },
        Attn {
            mask: FLOAT_MASK,
            inf: true,
            ..base
        },
    ];
    let rng = &mut ctx.rng;
    let (l, s) = (
        TILE_LENGTHS[rng.below(TILE_LENGTHS.len())],
        TILE_LENGTHS[rng.below(TILE_LENGTHS.len())],
    );
    let fits: Vec<usize> = HEAD_DIMS
        .into_iter()
        .filter(|&e| l * s * e <= MAX_TILE_WORK)
        .collect();
    let e = if fits.is_empty() {
        HEAD_DIMS[0]
    } else {
        fits[rng.below(fits.len())]
    };
    let mode = rng.below(3);
    cases.push(Attn {
        causal: mode == 1,
        mask: if mode == 2 { BOOL_MASK } else { NO_MASK },
        ..Attn::sized(l, s, e)
    });
    let e = HEAD_DIMS[rng.below(HEAD_DIMS.len())];
    let (l, s) = (15 + rng.below(3), 15 + rng.below(3));
    let causal = rng.coin();
    cases.push(Attn {
        causal,
        ..Attn::sized(l, s, e)
    });
    // refused
    cases.push(Attn {
        causal: true,
        mask: BOOL_MASK,
        ..base
    });
    cases.push(Attn { gqa: false, ..gqa });
    cases.push(Attn {
        mask: OTHER_MASK,
        ..base
    });
    cases.into_iter().map(|c| attn_sample(ctx, c)).collect()
}

/// Whether `from` broadcasts to exactly `to` (trailing dims aligned, each equal or 1).
fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == 1)
}

/// The smallest normal number of a float dtype (below it, rounding is absolute).
fn min_normal(d: DType) -> f64 {
    match d {
        DType::F16 => 2f64.powi(-14),
        DType::F64 => 2f64.powi(-1022),
        _ => 2f64.powi(-126),
    }
}

/// Scaled dot-product attention (PyTorch's `F.scaled_dot_product_attention`, dropout 0),
/// with stride's deviation: a query row with no key left gives zeros. Per query row `i`
/// (of batch-head `h`; with enable_gqa, key/value head `h / (Hq/Hk)`), over the keys `j`
/// it may attend (causal: `j ≤ i`, top-left aligned; bool mask: true; float mask: not −inf):
///
/// ```text
/// x_j = scale·(q·k_j) + mask_j,  m = max_j x_j,  p_j = e^(x_j − m),  l = Σ_j p_j,
/// P_j = p_j / l,  o = Σ_j P_j·v_j           (scale defaults to 1/√E)
/// ```
///
/// **Bound** (per output element `o`, `u` = the accumulator's unit roundoff — f32 for
/// f16/bf16/f32 — and `u_T` the output dtype's). Errors in the logits: if each computed
/// logit is `x_j + ε_j`, the softmax moves by `δP_j = P_j·(ε_j − Σ_k P_k ε_k)`, so
/// `δo = Σ_j P_j·ε_j·(v_j − o)` to first order: `|δo| ≤ Σ_j P_j·|v_j − o|·|ε_j|`. With
/// `A_j = Σ_e |q_e·k_je|`:
/// - the scores' dot product over `E` terms: `|ε_j| ≤ γ_E·scale·A_j ≈ E·u·scale·A_j`;
/// - elementwise f32 steps on the logit path, at most 6, each off by `u` of a magnitude at
///   most `scale·|q·k_j| + |x_j| + |m|` (the scale's own rounding, ·scale, +mask, −m, and a
///   kernel's exp2 folding: `x·log2e` and `m·log2e`);
/// - `exp` itself (≤ 2 ulp: `2u` relative on `p_j`, a logit error of `2u`), and a fused
///   kernel's online softmax: each of at most `S` rescales multiplies `p_j`'s share of the
///   numerator and of `l` by the same rounded `e^(m_old − m_new)` (≤ 2 ulp, a logit error
///   again): `2S·u`.
///   (Its exponent's subtraction error is the `|x_j| + |m|` term: the maxima only grow,
///   so the rescales' differences add up to at most `m − x_j`.)
///
/// Errors in the sums, relative to `Σ_j P_j·|v_j|` (≥ |o|): `l` and the numerator `Σ_j
/// p_j·v_j` each take at most `S` additions (`γ_S`; `l`'s terms are all positive, the
/// numerator's error is `γ_S·Σ_j p_j·|v_j|`) and at most `S` rescale products (one per tile of
/// an online softmax), and the final division one more rounding: `(4S + 2)·u·Σ_j P_j·|v_j|`.
///
/// The weights stored in the output dtype before `P·V` (the fused half kernel rounds each
/// `p_j ≤ 1` to f16/bf16; the composed path stores `P` in the compute dtype, no worse):
/// relative `u_T` per weight — absolute `u_T·min_normal` below the smallest normal, where
/// f16's subnormals are evenly spaced — while `l ≥ 1` sums the unrounded `p_j`: `|δo| ≤
/// u_T·Σ_j (P_j + min_normal)·|v_j|` (whether `p_j` or `P_j = p_j/l` is rounded).
///
/// In [`bounds::bound`]'s terms: `k = 1`, `M = Σ_j (P_j + min_normal_T)·|v_j|`; one
/// `(n, S)` pair carries the rest: `n = E + S` (the chain's two reduction lengths) and
/// `S = [Σ_j P_j·|v_j − o|·(E·scale·A_j + 6·(scale·|q·k_j| + |x_j| + |m|) + 2S + 2) +
/// (4S + 2)·Σ_j P_j·|v_j|] / (E + S)`, so `n·u·S` is the sum above; `c = 2` covers the f64
/// reference's own rounding (the same terms in f64) and the second-order terms. A row with
/// no key left is exactly 0 (`M = S = 0`).
///
/// Inputs are checked as stride checks them (the errors are the op's errors: shapes, GQA
/// heads, is_causal with a mask, the mask's dtype and broadcast).
///
/// [`bounds::bound`]: crate::bounds::bound
fn attention_ref(c: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    let (q, k, v) = (a[0].t(), a[1].t(), a[2].t());
    let p = c.params;
    let (causal, gqa) = (flag(p, 0), flag(p, 1));
    let mask = if flag(p, 2) {
        Some(a.get(3).ok_or("a mask kind without a mask operand")?.t())
    } else {
        None
    };
    if k.dtype != q.dtype || v.dtype != q.dtype {
        return Err("query, key and value must have one dtype".into());
    }
    let n = q.shape.len();
    if n < 2 || k.shape.len() != n || v.shape.len() != n {
        return Err("query, key and value need the same number of dims, at least 2".into());
    }
    let (l, e) = (q.shape[n - 2], q.shape[n - 1]);
    let (s, ev) = (k.shape[n - 2], v.shape[n - 1]);
    if k.shape[n - 1] != e {
        return Err("the key's last dim must equal the query's".into());
    }
    if k.shape[..n - 1] != v.shape[..n - 1] {
        return Err("key and value must agree in every dim but the last".into());
    }
    let (qb, kb) = (&q.shape[..n - 2], &k.shape[..n - 2]);
    let groups = if qb == kb {
        1
    } else if gqa && n >= 3 && qb[..n - 3] == kb[..n - 3] {
        let (hq, hk) = (qb[n - 3], kb[n - 3]);
        if hk == 0 || hq % hk != 0 {
            return Err(format!("Hq = {hq} is not a multiple of Hk = {hk}"));
        }
        hq / hk
    } else {
        return Err("query and key leading dims differ (GQA needs enable_gqa)".into());
    };
    let mut scores_shape = qb.to_vec();
    scores_shape.extend([l, s]);
    // the mask's element for each score, by broadcasting (0 stride on its size-1 dims)
    let mask_strides = match mask {
        None => None,
        Some(_) if causal => return Err("is_causal with an attn_mask".into()),
        Some(m) if m.dtype != DType::Bool && !m.dtype.is_float() => {
            return Err(format!("an attn_mask of dtype {}", m.dtype))
        }
        Some(m) if !broadcasts_to(&m.shape, &scores_shape) => {
            return Err("the attn_mask does not broadcast to the scores".into())
        }
        Some(m) => {
            let own = crate::reference::contiguous_strides(&m.shape);
            let lead = n - m.shape.len();
            Some(
                (0..n)
                    .map(|d| match d.checked_sub(lead) {
                        Some(md) if m.shape[md] != 1 => own[md],
                        _ => 0,
                    })
                    .collect::<Vec<usize>>(),
            )
        }
    };
    let scale = if p.scalars.is_empty() {
        1.0 / (e as f64).sqrt()
    } else {
        scalar(p, 0)
    };
    let tiny = min_normal(c.result);
    let hq = if n >= 3 { qb[n - 3] } else { 1 };
    let mut out_shape = qb.to_vec();
    out_shape.extend([l, ev]);
    let mut out = Vec::with_capacity(numel(&out_shape));
    let mut idx = vec![0; n];
    for bi in 0..numel(qb) {
        // key/value batch-head: query head h of its outer batch uses head h / groups
        let kvi = (bi / hq) * (hq / groups) + (bi % hq) / groups;
        let (kr, vr) = (&k.values[kvi * s * e..], &v.values[kvi * s * ev..]);
        for i in 0..l {
            let qr = &q.values[(bi * l + i) * e..(bi * l + i + 1) * e];
            // (x_j, scale·|q·k_j|, scale·A_j) of the keys row i attends
            let mut keys: Vec<(usize, f64, f64, f64)> = Vec::with_capacity(s);
            for j in 0..s {
                if causal && j > i {
                    continue;
                }
                let mut add = 0.0;
                if let (Some(m), Some(ms)) = (mask, &mask_strides) {
                    crate::reference::unravel((bi * l + i) * s + j, &scores_shape, &mut idx);
                    let mv = m.values[idx.iter().zip(ms).map(|(&x, &st)| x * st).sum::<usize>()];
                    if m.dtype == DType::Bool {
                        if mv == 0.0 {
                            continue;
                        }
                    } else {
                        add = mv;
                    }
                }
                let kj = &kr[j * e..(j + 1) * e];
                let dot: f64 = qr.iter().zip(kj).map(|(x, y)| x * y).sum();
                let abs: f64 = qr.iter().zip(kj).map(|(x, y)| (x * y).abs()).sum();
                let x = scale * dot + add;
                if x != f64::NEG_INFINITY {
                    keys.push((j, x, (scale * dot).abs(), scale.abs() * abs));
                }
            }
            if keys.is_empty() {
                out.extend((0..ev).map(|_| Terms::default()));
                continue;
            }
            let mx = keys.iter().map(|t| t.1).fold(f64::NEG_INFINITY, f64::max);
            let pj: Vec<f64> = keys.iter().map(|t| (t.1 - mx).exp()).collect();
            let lsum: f64 = pj.iter().sum();
            // per key: its weight and its logit error in units of u
            let w: Vec<(f64, f64)> = keys
                .iter()
                .zip(&pj)
                .map(|(&(_, x, sqk, sa), &pv)| {
                    let eps =
                        e as f64 * sa + 6.0 * (sqk + x.abs() + mx.abs()) + 2.0 * s as f64 + 2.0;
                    (pv / lsum, eps)
                })
                .collect();
            for t in 0..ev {
                let vj = |j: usize| vr[j * ev + t];
                let o: f64 = keys.iter().zip(&w).map(|(kj, wj)| wj.0 * vj(kj.0)).sum();
                let (mut store_m, mut pv_abs, mut logit) = (0.0, 0.0, 0.0);
                for (kj, &(pw, eps)) in keys.iter().zip(&w) {
                    let va = vj(kj.0).abs();
                    store_m += (pw + tiny) * va;
                    pv_abs += pw * va;
                    logit += pw * (vj(kj.0) - o).abs() * eps;
                }
                let n_red = (e + s) as f64;
                out.push(Terms {
                    value: o,
                    m: store_m,
                    n: n_red,
                    s: (logit + (4.0 * s as f64 + 2.0) * pv_abs) / n_red,
                });
            }
        }
    }
    Ok((out_shape, out))
}

fn attention() -> OpInfo {
    let mut mask = ArgSpec::tensor("attn_mask", MASK);
    // bool or float, never promoted with q/k/v: the result has the query's dtype
    mask.promotes = false;
    entry(
        "nn.scaled_dot_product_attention",
        vec![
            ArgSpec::tensor("query", QK),
            ArgSpec::tensor("key", QK),
            ArgSpec::tensor("value", VALUES),
            mask,
        ],
        1.0,
        attention_ref,
    )
    .sampler(attention_sampler)
    .functional(|a, p| {
        let mask = if flag(p, 2) {
            a.get(3).map(|m| m.t())
        } else {
            None
        };
        let scale = (!p.scalars.is_empty()).then(|| scalar(p, 0));
        stride_nn::functional::scaled_dot_product_attention(
            a[0].t(),
            a[1].t(),
            a[2].t(),
            mask,
            0.0,
            flag(p, 0),
            scale,
            flag(p, 1),
        )
    })
}

// ----- Fused pointwise: rotary embeddings and gated activations -----------------------------

/// Rotary samples: `x (B, H, T, D)` and tables `(T, R/2)` (angles drawn per position and
/// pair, stored in the dtype); `ints = [style]` (0 half-split, 1 interleaved). The base case
/// takes `T` from the base shape; variants: the other style, partial rotary (`R < D`, both
/// styles), a length crossing the kernel's blocks (1,024 pairs) and one crossing a thread's 4
/// positions in the middle of a head.
fn rotary_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let t = ctx.shape.first().copied().unwrap_or(3).clamp(1, 5);
    // (x shape, R/2, style)
    let mut cases: Vec<(Vec<usize>, usize, i64)> = vec![(vec![1, 2, t, 4], 2, 0)];
    if ctx.variants {
        cases.extend([
            (vec![1, 2, t, 4], 2, 1),
            (vec![2, 1, 3, 6], 2, 0),
            (vec![2, 1, 3, 6], 2, 1),
            (vec![1, 3, 257, 8], 4, 0),
            (vec![1, 2, 129, 10], 5, 1),
        ]);
    }
    let d = ctx.dtype;
    cases
        .into_iter()
        .map(|(shape, half, style)| {
            let x = Domain::range(-4.0, 4.0).values(d, numel(&shape), &mut ctx.rng, ctx.tame);
            let t = shape[2];
            let angles: Vec<f64> = (0..t * half)
                .map(|_| ctx.rng.range_f64(-4.0, 4.0))
                .collect();
            let table = |f: fn(f64) -> f64| -> Vec<f64> {
                angles
                    .iter()
                    .map(|&a| crate::host::store(f(a), d))
                    .collect()
            };
            let args = vec![
                tensor(d, shape, x),
                tensor(d, vec![t, half], table(f64::cos)),
                tensor(d, vec![t, half], table(f64::sin)),
            ];
            Sample::new(args, ints(&[style]))
        })
        .collect()
}

/// Rotary embedding (`Tensor::rotary`): pair `i` of position `p`, `(a, b)`, becomes
/// `(a·cos − b·sin, a·sin + b·cos)`; features past `R` pass through. Bound: one rounding of
/// the result (`k = 0`), and the two products and their sum in the compute dtype: `n = 2`,
/// `S = |a·cos| + |b·sin|`.
fn rotary_ref(c: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    let (x, cos, sin) = (a[0].t(), a[1].t(), a[2].t());
    let n = x.shape.len();
    if n < 2 || cos.shape.len() != 2 || cos.shape != sin.shape || cos.shape[0] != x.shape[n - 2] {
        return Err("rotary takes x (..., T, D) and tables (T, R/2)".into());
    }
    let (t, d, half) = (x.shape[n - 2], x.shape[n - 1], cos.shape[1]);
    if half == 0 || 2 * half > d {
        return Err("the tables must rotate 0 < R ≤ D features".into());
    }
    let interleaved = c.params.ints.first() == Some(&1);
    let mut out = Vec::with_capacity(x.values.len());
    for (r, row) in x.values.chunks(d).enumerate() {
        let pos = r % t;
        for j in 0..d {
            if j >= 2 * half {
                out.push(Terms {
                    value: row[j],
                    ..Terms::default()
                });
                continue;
            }
            let (i, first, pa, pb) = match interleaved {
                true => (j / 2, j % 2 == 0, j & !1, j | 1),
                false => (j % half, j < half, j % half, j % half + half),
            };
            let (xa, xb) = (row[pa], row[pb]);
            let (co, si) = (cos.values[pos * half + i], sin.values[pos * half + i]);
            let (value, s) = match first {
                true => (xa * co - xb * si, (xa * co).abs() + (xb * si).abs()),
                false => (xa * si + xb * co, (xa * si).abs() + (xb * co).abs()),
            };
            out.push(Terms {
                value,
                m: 0.0,
                n: 2.0,
                s,
            });
        }
    }
    Ok((x.shape.clone(), out))
}

fn rotary() -> OpInfo {
    let mut cos = ArgSpec::tensor("cos", Domain::range(-1.0, 1.0));
    let mut sin = ArgSpec::tensor("sin", Domain::range(-1.0, 1.0));
    // the tables compute in the input's compute dtype: the result has the input's dtype
    cos.promotes = false;
    sin.promotes = false;
    entry(
        "nn.rotary",
        vec![ArgSpec::tensor("input", Domain::range(-4.0, 4.0)), cos, sin],
        0.0,
        rotary_ref,
    )
    .sampler(rotary_sampler)
    .functional(|a, p| {
        let style = match p.ints.first() {
            Some(1) => stride_core::RotaryStyle::Interleaved,
            _ => stride_core::RotaryStyle::HalfSplit,
        };
        a[0].t().rotary(a[1].t(), a[2].t(), style)
    })
}

/// Gated-unit samples: `gate` and `up` of the base shape and, with variants, `up`
/// broadcasting over the gate's leading dim, long rows crossing the kernel's blocks, and
/// gates out to ±12 (sigmoid and erf saturate, `1 + erf` cancels).
fn gated_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let d = ctx.dtype;
    let base = norm_input(&ctx.shape);
    let mut cases = vec![(base.clone(), base.clone(), 4.0)];
    if ctx.variants {
        let mut up = base.clone();
        up[0] = 1;
        cases.push((base.clone(), up, 4.0));
        cases.push((vec![3, 1025], vec![3, 1025], 4.0));
        cases.push((base.clone(), base, 12.0));
    }
    cases
        .into_iter()
        .map(|(g, u, wide)| {
            let gv = Domain::range(-wide, wide).values(d, numel(&g), &mut ctx.rng, ctx.tame);
            let uv = Domain::range(-2.0, 2.0).values(d, numel(&u), &mut ctx.rng, ctx.tame);
            Sample::new(vec![tensor(d, g, gv), tensor(d, u, uv)], Params::default())
        })
        .collect()
}

/// `act(gate)·up` from the exact activations (f64; `gelu`'s erf from the reference's
/// series). Bound: one rounding of the result (`k = 0`), and the activation and product in
/// the compute dtype: `S = (|gate| + |act|)·|up|` — `|gate|` covers the cancellation of
/// `1 + erf`/`1 + tanh` for very negative gates — over `n = 8` roundings (64 for the exact
/// GELU, whose f64 reference erf is good to 64 ulps).
fn gated_terms(act: stride_core::GateActivation, a: &[RefArg]) -> Result<Computed, String> {
    use stride_core::GateActivation as A;
    let f = |x: f64| match act {
        A::Silu => x / (1.0 + (-x).exp()),
        A::Gelu => 0.5 * x * (1.0 + crate::reference::erf(x / std::f64::consts::SQRT_2)),
        A::GeluTanh => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
        }
    };
    let (g, u) = (a[0].t(), a[1].t());
    let shape = crate::reference::broadcast_shapes(&[&g.shape, &u.shape])
        .ok_or("gate and up must broadcast")?;
    let n = if act == A::Gelu { 64.0 } else { 8.0 };
    let mut idx = vec![0; shape.len()];
    let terms = (0..numel(&shape))
        .map(|i| {
            crate::reference::unravel(i, &shape, &mut idx);
            let (x, v) = (broadcast_at(g, &idx), broadcast_at(u, &idx));
            let y = f(x);
            Terms {
                value: y * v,
                m: 0.0,
                n,
                s: (x.abs() + y.abs()) * v.abs(),
            }
        })
        .collect();
    Ok((shape, terms))
}

/// The value of `t` at index `idx` of a shape it broadcasts to.
fn broadcast_at(t: &crate::reference::RefTensor, idx: &[usize]) -> f64 {
    let lead = idx.len() - t.shape.len();
    let mut lin = 0;
    for (d, &n) in t.shape.iter().enumerate() {
        lin = lin * n + if n == 1 { 0 } else { idx[lead + d] };
    }
    t.values[lin]
}

fn swiglu_ref(_: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    gated_terms(stride_core::GateActivation::Silu, a)
}
fn geglu_ref(_: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    gated_terms(stride_core::GateActivation::Gelu, a)
}
fn geglu_tanh_ref(_: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    gated_terms(stride_core::GateActivation::GeluTanh, a)
}

fn gated(name: &'static str, act: stride_core::GateActivation) -> OpInfo {
    let compute: Compute = match act {
        stride_core::GateActivation::Silu => swiglu_ref,
        stride_core::GateActivation::Gelu => geglu_ref,
        stride_core::GateActivation::GeluTanh => geglu_tanh_ref,
    };
    entry(
        name,
        vec![
            ArgSpec::tensor("gate", Domain::range(-4.0, 4.0)),
            ArgSpec::tensor("up", Domain::range(-2.0, 2.0)),
        ],
        0.0,
        compute,
    )
    .sampler(gated_sampler)
    .functional(move |a, _| a[0].t().gated(a[1].t(), act))
}

/// Every entry of this family.
pub fn ops() -> Vec<OpInfo> {
    vec![
        layer_norm(),
        rms_norm(),
        add_rms_norm(),
        embedding("nn.embedding", false),
        embedding("nn.embedding.grad", true),
        mse(),
        l1(),
        smooth_l1(),
        bce(),
        bce_logits(),
        cross_entropy(),
        cross_entropy_probs(),
        nll(),
        attention(),
        cached_attention(),
        rotary(),
        gated("nn.swiglu", stride_core::GateActivation::Silu),
        gated("nn.geglu", stride_core::GateActivation::Gelu),
        gated("nn.geglu_tanh", stride_core::GateActivation::GeluTanh),
    ]
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Twice: the fused normalisations and attention (their backward is a
/// kernel, and under `create_graph` a composed formula autograd differentiates again). Once:
/// every composed layer and loss (its gradient is that of the ops it composes).
pub fn grad(name: &str) -> super::Grad {
    match name {
        "nn.layer_norm"
        | "nn.rms_norm"
        | "nn.add_rms_norm"
        | "nn.scaled_dot_product_attention"
        | "nn.rotary"
        | "nn.swiglu"
        | "nn.geglu"
        | "nn.geglu_tanh" => super::Grad::Twice,
        "nn.embedding"
        | "nn.embedding.grad"
        | "nn.mse_loss"
        | "nn.l1_loss"
        | "nn.smooth_l1_loss"
        | "nn.cross_entropy"
        | "nn.cross_entropy.probs"
        | "nn.nll_loss"
        | "nn.binary_cross_entropy"
        | "nn.binary_cross_entropy_with_logits" => super::Grad::Once,
        _ => super::Grad::No,
    }
}

// ----- attention over a KV cache ---------------------------------------------------------------

/// One case of `attention_with_kv_cache`: `l` new tokens per row over caches of `cap`
/// positions holding `len[b]` each.
struct CachedCase {
    b: usize,
    hq: usize,
    hk: usize,
    l: usize,
    cap: usize,
    e: usize,
    ev: usize,
    len: Vec<usize>,
}

fn cached_sample(ctx: &mut SampleCtx, c: CachedCase) -> Sample {
    let d = ctx.dtype;
    let draw = |dom: Domain, shape: Vec<usize>, ctx: &mut SampleCtx| {
        let values = dom.values(d, numel(&shape), &mut ctx.rng, ctx.tame);
        tensor(d, shape, values)
    };
    let args = vec![
        draw(QK, vec![c.b, c.hq, c.l, c.e], ctx),
        draw(QK, vec![c.b, c.hk, c.l, c.e], ctx),
        draw(VALUES, vec![c.b, c.hk, c.l, c.ev], ctx),
        draw(QK, vec![c.b, c.hk, c.cap, c.e], ctx),
        draw(VALUES, vec![c.b, c.hk, c.cap, c.ev], ctx),
        tensor(
            DType::I64,
            vec![c.b],
            c.len.iter().map(|&n| n as f64).collect(),
        ),
    ];
    Sample::new(args, Params::default())
}

/// Samples of `attention_with_kv_cache`: from the base shape `(B, H, L, S)` ([`attn_dims`]),
/// `min(L, 4)` new tokens over a cache of `S + L` positions holding a random length per row
/// (`E = 4`). With variants: grouped-query heads (Hq = 4, Hk = 2); one new token after 255,
/// 256 and 257 cached positions (both sides of the CUDA kernel's key chunk of 256); rows
/// of different lengths, one of them empty; values wider than keys.
fn cached_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let (b, h, l, s) = attn_dims(&ctx.shape);
    let l = l.clamp(1, 4);
    let b = b.max(1);
    let h = h.max(1);
    let cap = s + l;
    let lens = |ctx: &mut SampleCtx, b: usize, cap: usize, l: usize| -> Vec<usize> {
        (0..b).map(|_| ctx.rng.below(cap - l + 1)).collect()
    };
    let len = lens(ctx, b, cap, l);
    let base = CachedCase {
        b,
        hq: h,
        hk: h,
        l,
        cap,
        e: 4,
        ev: 4,
        len,
    };
    if !ctx.variants {
        return vec![cached_sample(ctx, base)];
    }
    let mut cases = vec![base];
    let len = lens(ctx, 1, 7, 2);
    cases.push(CachedCase {
        b: 1,
        hq: 4,
        hk: 2,
        l: 2,
        cap: 7,
        e: 3,
        ev: 3,
        len,
    });
    let chunk = [255, 256, 257][ctx.rng.below(3)];
    cases.push(CachedCase {
        b: 1,
        hq: 1,
        hk: 1,
        l: 1,
        cap: chunk + 1,
        e: 8,
        ev: 8,
        len: vec![chunk],
    });
    cases.push(CachedCase {
        b: 2,
        hq: 2,
        hk: 1,
        l: 1,
        cap: 6,
        e: 4,
        ev: 6,
        len: vec![0, 5],
    });
    cases.into_iter().map(|c| cached_sample(ctx, c)).collect()
}

/// `attention_with_kv_cache` without rotary (the rotation's bits are checked against
/// `Tensor::rotary` in stride-core's `tests/cached_attention.rs`): the new keys and values
/// written at `len[b]..len[b] + L`, then attention of query `i` over the keys `0..=len[b] + i`
/// — [`attention_ref`] over the written caches with that mask, and its bound.
fn cached_attention_ref(c: &RefCtx, a: &[RefArg]) -> Result<Computed, String> {
    let (q, k, v, kc, vc, len) = (a[0].t(), a[1].t(), a[2].t(), a[3].t(), a[4].t(), a[5].t());
    if q.shape.len() != 4 || kc.shape.len() != 4 || vc.shape.len() != 4 {
        return Err("queries and caches must be 4-d".into());
    }
    let (b, l) = (q.shape[0], q.shape[2]);
    let (hk, cap, e, ev) = (kc.shape[1], kc.shape[2], kc.shape[3], vc.shape[3]);
    if k.shape != [b, hk, l, e] || v.shape != [b, hk, l, ev] || vc.shape[..3] != kc.shape[..3] {
        return Err("new keys/values must be (B, Hk, L, E/Ev) and the caches agree".into());
    }
    if len.values.len() != b {
        return Err("one length per row".into());
    }
    let mut keys = kc.values.clone();
    let mut vals = vc.values.clone();
    for (bi, &n) in len.values.iter().enumerate() {
        let n = n as usize;
        if n + l > cap {
            return Err(format!("length {n} leaves no room for {l} positions"));
        }
        for h in 0..hk {
            for t in 0..l {
                let (dst, src) = (((bi * hk + h) * cap + n + t), ((bi * hk + h) * l + t));
                keys[dst * e..(dst + 1) * e].copy_from_slice(&k.values[src * e..(src + 1) * e]);
                vals[dst * ev..(dst + 1) * ev].copy_from_slice(&v.values[src * ev..(src + 1) * ev]);
            }
        }
    }
    let mask: Vec<f64> = (0..b * l * cap)
        .map(|x| {
            let (bi, i, j) = (x / (l * cap), (x / cap) % l, x % cap);
            (j <= len.values[bi] as usize + i) as u8 as f64
        })
        .collect();
    let made = |dtype: DType, shape: Vec<usize>, values: Vec<f64>| crate::reference::RefTensor {
        dtype,
        strides: crate::reference::contiguous_strides(&shape),
        offset: 0,
        storage: values.clone(),
        shape,
        values,
    };
    let kt = made(kc.dtype, kc.shape.clone(), keys);
    let vt = made(vc.dtype, vc.shape.clone(), vals);
    let mt = made(DType::Bool, vec![b, 1, l, cap], mask);
    let params = ints(&[0, 1, BOOL_MASK]);
    let ctx = RefCtx {
        params: &params,
        ..c.clone()
    };
    attention_ref(
        &ctx,
        &[
            RefArg::Tensor(q),
            RefArg::Tensor(&kt),
            RefArg::Tensor(&vt),
            RefArg::Tensor(&mt),
        ],
    )
}

fn cached_attention() -> OpInfo {
    entry(
        "nn.attention_with_kv_cache",
        vec![
            ArgSpec::tensor("query", QK),
            ArgSpec::tensor("key", QK),
            ArgSpec::tensor("value", VALUES),
            ArgSpec::tensor("key_cache", QK),
            ArgSpec::tensor("value_cache", VALUES),
            ArgSpec::fixed("len", DType::I64, Domain::range(0.0, 1.0)),
        ],
        1.0,
        cached_attention_ref,
    )
    .sampler(cached_sampler)
    .functional(|a, _| cached_attention_call(a, a[5].t(), None))
}

/// `attention_with_kv_cache` of an `nn.attention_with_kv_cache` sample's operands with the
/// cache length `len` and `scale` (the entry passes the sample's length and `None`; tests pass
/// wrong ones). The caches are written in place, so the call writes into copies: the entry
/// checks the result, stride-core's `tests/cached_attention.rs` the writes, through strided
/// caches.
pub fn cached_attention_call(
    a: &[Arg],
    len: &Tensor,
    scale: Option<f64>,
) -> stride_core::Result<Tensor> {
    let _g = stride_core::autograd::no_grad();
    let (kc, vc) = (a[3].t().clone_tensor()?, a[4].t().clone_tensor()?);
    a[0].t().attention_with_kv_cache(&stride_core::KvCacheStep {
        k_cache: &kc,
        v_cache: &vc,
        k: a[1].t(),
        v: a[2].t(),
        len,
        start: None,
        rotary: None,
        scale,
    })
}
