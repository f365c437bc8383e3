//! stride-nn's composed layers and losses as registry entries: `layer_norm` and `rms_norm`
//! (the functional forms `LayerNorm` and `RmsNorm` call),
//! `Embedding` (the gather path, and the one-hot path taken while the weight requires grad)
//! and every loss of `stride_nn::loss`, with weight and bias operands, every reduction,
//! `ignore_index`, `label_smoothing` and class-probability targets — in every float dtype
//! and over the registry's layouts (each operand — weight and bias too — transposed,
//! stepped, offset, expanded, …).
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

/// Samples of LayerNorm (`with_bias`) and RmsNorm: over the last dim and, with variants, the
/// last two, and rows of [`LONG_ROWS`]; values in [-4, 4] and — the large common offset —
/// 100 + [-1, 1].
fn norm_sampler(with_bias: bool) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync {
    move |ctx: &mut SampleCtx| {
        let d = ctx.dtype;
        let base = norm_input(&ctx.shape);
        let mut cases = vec![(base.clone(), 1usize)];
        if ctx.variants && base.len() >= 2 {
            cases.push((base, 2));
        }
        if ctx.variants {
            cases.extend(LONG_ROWS.iter().map(|&n| (vec![2, n], 1)));
        }
        let mut out = vec![];
        for (x_shape, nd) in cases {
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

/// Every entry of this family.
pub fn ops() -> Vec<OpInfo> {
    vec![
        layer_norm(),
        rms_norm(),
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
    ]
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Twice: the fused normalisations (their backward is a kernel, and under
/// `create_graph` a composed formula autograd differentiates again). Once: every composed layer
/// and loss (its gradient is that of the ops it composes).
pub fn grad(name: &str) -> super::Grad {
    match name {
        "nn.layer_norm" | "nn.rms_norm" => super::Grad::Twice,
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
