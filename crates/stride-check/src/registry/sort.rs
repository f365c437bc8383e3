//! Sorting and selection: `sort` (values, `.indices`), `argsort`, `topk` (values,
//! `.indices`), `kthvalue` (values, `.indices`), `unique` (values, `.inverse`, `.counts`),
//! `searchsorted`, `bincount` (`.weights`), `histc`.
//!
//! One order everywhere (stride's documented one): numbers by value, NaN above +∞, `-0 ==
//! 0`, and every sort stable (ties keep their index order, also when descending). The
//! references sort each line with that order; `unique` and `bincount` produce their
//! data-dependent shapes.

use super::dtypes::{ALL, FLOATS, INTS};
use super::{ArgSpec, DTypeRule, Domain, Family, OpInfo, Params, Sample, SampleArg, SampleCtx};
use crate::host::store;
use crate::reference::{
    numel, stable_order, total_cmp, wrap_dim, RefArg, RefCtx, RefOut, RefTensor,
};
use crate::tol::Tol;
use std::cmp::Ordering;
use stride_core::{DType, Scalar, Tensor};

/// Applies `f` to every line along `d` of `t` (0-d: one line of one element); `f` returns
/// `len` values per line; the result has `t`'s shape with dim `d` of size `len`.
fn lines(
    t: &RefTensor,
    d: usize,
    len: usize,
    f: impl Fn(&[f64]) -> Vec<f64>,
) -> (Vec<usize>, Vec<f64>) {
    let shape = if t.shape.is_empty() {
        vec![1]
    } else {
        t.shape.clone()
    };
    let n = shape[d];
    let inner: usize = shape[d + 1..].iter().product();
    let outer: usize = shape[..d].iter().product();
    let mut out = vec![0.0; outer * len * inner];
    for o in 0..outer {
        for i in 0..inner {
            let line: Vec<f64> = (0..n).map(|k| t.values[(o * n + k) * inner + i]).collect();
            for (k, v) in f(&line).into_iter().enumerate().take(len) {
                out[(o * len + k) * inner + i] = v;
            }
        }
    }
    let mut os = t.shape.clone();
    if !os.is_empty() {
        os[d] = len;
    }
    (os, out)
}

fn dim_of(c: &RefCtx, t: &RefTensor) -> Result<(usize, usize), String> {
    let dim = c.params.dims[0];
    let d = wrap_dim(dim, t.shape.len())
        .ok_or_else(|| format!("dim {dim} out of range must be refused"))?;
    let n = t.shape.get(d).copied().unwrap_or(1);
    Ok((d.min(t.shape.len().saturating_sub(1)), n))
}

fn flag(p: &Params, i: usize) -> bool {
    p.ints.get(i).copied().unwrap_or(0) != 0
}

fn i64_result(_: &Sample) -> DType {
    DType::I64
}

/// One input in the base shape; dims last/first/out of range; `ints` choices per sample
/// (the first with every dim, the others with the last dim).
fn line_sampler(
    domain: Domain,
    ints: fn(usize) -> Vec<Vec<i64>>,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let nd = ctx.shape.len() as i64;
        let values = domain.values(ctx.dtype, numel(&ctx.shape), &mut ctx.rng, ctx.tame);
        let x = Sample::tensor(ctx.dtype, ctx.shape.clone(), values);
        let n_last = ctx.shape.last().copied().unwrap_or(1);
        let mut out = vec![];
        let choices = ints(n_last);
        let dims: Vec<i64> = if ctx.variants {
            vec![-1, 0, nd.max(1)]
        } else {
            vec![-1]
        };
        for (di, &dim) in dims.iter().enumerate() {
            let n = if dim == 0 {
                ctx.shape.first().copied().unwrap_or(1)
            } else {
                n_last
            };
            let cs = if di == 0 {
                if ctx.variants {
                    choices.clone()
                } else {
                    vec![choices[ctx.rng.below(choices.len())].clone()]
                }
            } else {
                vec![ints(n)[0].clone()]
            };
            for c in cs {
                out.push(Sample::new(
                    vec![x.clone()],
                    Params {
                        dims: vec![dim],
                        ints: c,
                        ..Params::default()
                    },
                ));
            }
        }
        out
    }
}

fn sort_ints(_: usize) -> Vec<Vec<i64>> {
    vec![vec![0, 1], vec![1, 1], vec![0, 0], vec![1, 0]] // [descending, stable]
}
fn topk_ints(n: usize) -> Vec<Vec<i64>> {
    // [k, largest, sorted]
    let n = n as i64;
    vec![
        vec![n.min(3), 1, 1],
        vec![n.min(3), 0, 1],
        vec![n, 1, 0],
        vec![0, 0, 1],
        vec![1.min(n), 1, 1],
        vec![n + 1, 1, 1],
    ]
}
/// Rows that CUDA's topk selects in (radix select; kernels/sort.cu `k_topk_select`): the
/// SAE's 1536 (a shared-memory row, selected when k ≤ n / 16), and rows longer than the
/// shared-memory sort's tile (2048), for both branches of the selection: 3001
/// (small-range integers and floats on a coarse grid put at most 2048 keys in the k-th key's
/// top-byte bucket: the candidates-in-shared-memory branch) and 6007 (a bucket over 2048:
/// the from-global branch), and the SAE's 24,576 latents (+1).
pub const LONG_ROWS: [usize; 4] = [1536, 3001, 6007, 24_577];

/// Adds, to the core shape's samples (`ctx.variants`) of every dtype, two rows of each of
/// [`LONG_ROWS`] (`[2, n]`, along the last dim), with k = 1, 64, 1024 (the selection's
/// largest k), 1025 and n − 1 (full sorts) (1536: 1, 32, 96, 97, n − 1; 24,577: 64),
/// largest and smallest, each with the op's
/// `domain` (NaN, ±inf; heavy ties for small-range integers) and, for floats, integers in
/// ±1000 (ties at the k-th key, few keys per bucket).
fn with_long_rows(
    base: impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static,
    domain: Domain,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let mut out = base(ctx);
        if !ctx.variants || ctx.arg_dtypes.is_some() {
            return out;
        }
        let mut sets = vec![domain];
        if ctx.dtype.is_float() {
            sets.push(Domain::range(-1000.0, 1000.0).grid(1.0));
        }
        for (ri, &n) in LONG_ROWS.iter().enumerate() {
            for (si, d) in sets.iter().enumerate() {
                let values = d.values(ctx.dtype, 2 * n, &mut ctx.rng, false);
                let x = Sample::tensor(ctx.dtype, vec![2, n], values);
                let n = n as i64;
                let ks: Vec<i64> = match ri {
                    // a shared-memory row: selection up to k = n / 16 (96), a sort above
                    0 => vec![1, 32, 96, 97, n - 1],
                    // the SAE's row: its own k only
                    3 => vec![64],
                    _ => vec![1, 64, 1024, 1025, n - 1],
                };
                for (ki, &k) in ks.iter().enumerate() {
                    let largest = ((ki + si) % 2 == 0) as i64;
                    out.push(Sample::new(
                        vec![x.clone()],
                        Params {
                            dims: vec![-1],
                            ints: vec![k, largest, 1],
                            ..Params::default()
                        },
                    ));
                }
            }
        }
        out
    }
}

fn kth_ints(n: usize) -> Vec<Vec<i64>> {
    // [k, keepdim]
    let n = n as i64;
    vec![
        vec![(n + 1) / 2, 0],
        vec![n.max(1), 1],
        vec![1, 0],
        vec![0, 0],
        vec![n + 1, 1],
    ]
}

fn sort_line(v: &[f64], desc: bool, idx: bool) -> Vec<f64> {
    stable_order(v, desc)
        .into_iter()
        .map(|i| if idx { i as f64 } else { v[i] })
        .collect()
}

fn ref_sort(c: &RefCtx, a: &[RefArg], idx: bool) -> Result<RefOut, String> {
    let t = a[0].t();
    let (d, n) = dim_of(c, t)?;
    let desc = flag(c.params, 0);
    let (s, v) = lines(t, d, n, |l| sort_line(l, desc, idx));
    Ok(RefOut::new(s, v))
}

fn ref_topk(c: &RefCtx, a: &[RefArg], idx: bool) -> Result<RefOut, String> {
    let t = a[0].t();
    let (d, n) = dim_of(c, t)?;
    let k = c.params.ints[0];
    if k < 0 || k as usize > n {
        return Err(format!("k = {k} > dim size {n} must be refused"));
    }
    let largest = flag(c.params, 1);
    let (s, v) = lines(t, d, k as usize, |l| sort_line(l, largest, idx));
    Ok(RefOut::new(s, v))
}

fn ref_kth(c: &RefCtx, a: &[RefArg], idx: bool) -> Result<RefOut, String> {
    let t = a[0].t();
    let (d, n) = dim_of(c, t)?;
    let k = c.params.ints[0];
    if k < 1 || k as usize > n {
        return Err(format!("k = {k} out of 1..={n} must be refused"));
    }
    let keep = flag(c.params, 1);
    let (mut s, v) = lines(t, d, 1, |l| {
        let o = stable_order(l, false);
        let i = o[k as usize - 1];
        vec![if idx { i as f64 } else { l[i] }]
    });
    if !keep && !s.is_empty() {
        s.remove(d);
    }
    Ok(RefOut::new(s, v))
}

/// `unique`: sorted distinct values (NaNs all distinct), each element's position among them,
/// and the counts. `which`: 0 values, 1 inverse, 2 counts.
fn ref_unique(a: &[RefArg], which: u8) -> Result<RefOut, String> {
    let t = a[0].t();
    let v = &t.values;
    let order = stable_order(v, false);
    let mut uniq: Vec<f64> = vec![];
    let mut counts: Vec<f64> = vec![];
    let mut inverse = vec![0.0; v.len()];
    for &i in &order {
        let x = v[i];
        let same = uniq
            .last()
            .is_some_and(|&u: &f64| !u.is_nan() && !x.is_nan() && u == x);
        if !same {
            uniq.push(x);
            counts.push(0.0);
        }
        *counts.last_mut().unwrap() += 1.0;
        inverse[i] = (uniq.len() - 1) as f64;
    }
    Ok(match which {
        0 => RefOut::new(vec![uniq.len()], uniq),
        1 => RefOut::new(t.shape.clone(), inverse),
        _ => RefOut::new(vec![counts.len()], counts),
    })
}

fn unique_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    // few distinct values (duplicates), NaN/±inf/±0 among floats
    let dom = Domain::range(-3.0, 3.0).grid(1.0).specials();
    let vals = dom.values(ctx.dtype, numel(&ctx.shape), &mut ctx.rng, false);
    let mut out = vec![];
    let flags: Vec<Vec<i64>> = if ctx.variants {
        vec![vec![1, 1, 1], vec![0, 0, 0], vec![1, 0, 1]]
    } else {
        vec![vec![1, 1, 1]]
    };
    for f in flags {
        out.push(Sample::new(
            vec![Sample::tensor(ctx.dtype, ctx.shape.clone(), vals.clone())],
            Params {
                ints: f,
                ..Params::default()
            },
        ));
    }
    out
}

type UniqueOut = (Tensor, Option<Tensor>, Option<Tensor>);

fn unique_call(x: &Tensor, p: &Params) -> stride_core::Result<UniqueOut> {
    x.unique(flag(p, 0), flag(p, 1), flag(p, 2))
}

/// searchsorted: a sequence sorted along its last dim (the base shape, or 1-D), values of
/// the same dtype (1-D sequence: any shape; N-D: the same leading dims).
fn searchsorted_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let dom = Domain::range(-4.0, 4.0).grid(0.5).specials();
    let mut seq_shapes = vec![ctx.shape.clone()];
    if ctx.variants {
        seq_shapes.push(vec![ctx.shape.last().copied().unwrap_or(4)]);
    }
    let mut out = vec![];
    for (si, ss) in seq_shapes.into_iter().enumerate() {
        let mut vals = dom.values(ctx.dtype, numel(&ss), &mut ctx.rng, false);
        if let Some(&n) = ss.last() {
            for row in vals.chunks_mut(n.max(1)) {
                row.sort_by(|a, b| total_cmp(*a, *b));
            }
        }
        let seq = Sample::tensor(ctx.dtype, ss.clone(), vals);
        let mut vshapes = vec![];
        if ss.len() <= 1 {
            vshapes.push(vec![2, 3]);
            if ctx.variants {
                vshapes.push(vec![]);
            }
        } else {
            let mut v = ss.clone();
            *v.last_mut().unwrap() = 3;
            vshapes.push(v);
            if ctx.variants && si == 0 {
                vshapes.push(vec![ss[0] + 1, 3]); // leading dims differ: refused
            }
        }
        for vs in vshapes {
            let v = dom.values(ctx.dtype, numel(&vs), &mut ctx.rng, false);
            for right in [0, 1] {
                if !ctx.variants && right == 1 {
                    continue;
                }
                out.push(Sample::new(
                    vec![
                        seq.clone(),
                        Sample::tensor(ctx.dtype, vs.clone(), v.clone()),
                    ],
                    Params {
                        ints: vec![right],
                        ..Params::default()
                    },
                ));
            }
        }
    }
    out
}

fn ref_searchsorted(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let (s, v) = (a[0].t(), a[1].t());
    if s.shape.is_empty() {
        return Err("a 0-d sorted sequence must be refused".into());
    }
    let n = *s.shape.last().unwrap();
    let nd = s.shape.len();
    if nd > 1 && (v.shape.len() != nd || v.shape[..nd - 1] != s.shape[..nd - 1]) {
        return Err("the sequence's leading dims must match the values'".into());
    }
    let right = flag(c.params, 0);
    let m = v.shape.last().copied().unwrap_or(1).max(1);
    let vals = v
        .values
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let row = if nd == 1 { 0 } else { i / m };
            let seq = &s.values[row * n..(row + 1) * n];
            seq.iter()
                .filter(|&&e| {
                    let o = total_cmp(e, x);
                    o == Ordering::Less || (right && o == Ordering::Equal)
                })
                .count() as f64
        })
        .collect();
    Ok(RefOut::new(v.shape.clone(), vals))
}

fn bincount_sampler(
    weights: bool,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let n = numel(&ctx.shape);
        let mut shapes = vec![vec![n]];
        if ctx.variants {
            shapes.push(ctx.shape.clone()); // not 1-D (unless it is): refused
            shapes.push(vec![0]);
        }
        let mut out = vec![];
        for (k, sh) in shapes.into_iter().enumerate() {
            let m = numel(&sh);
            let mut vals: Vec<f64> = (0..m).map(|_| ctx.rng.below(9) as f64).collect();
            if ctx.variants && k == 0 && ctx.dtype.is_signed() && m > 0 && ctx.dtype.is_int() {
                let mut neg = vals.clone();
                neg[m / 2] = -1.0;
                out.push(bin_sample(ctx, sh.clone(), neg, weights, 0));
            }
            if !ctx.dtype.is_int() {
                vals = vals.iter().map(|&v| store(v, ctx.dtype)).collect();
            }
            for minlength in [0usize, 12] {
                if !ctx.variants && minlength > 0 {
                    continue;
                }
                out.push(bin_sample(
                    ctx,
                    sh.clone(),
                    vals.clone(),
                    weights,
                    minlength,
                ));
            }
        }
        out
    }
}

fn bin_sample(
    ctx: &mut SampleCtx,
    sh: Vec<usize>,
    vals: Vec<f64>,
    weights: bool,
    minlength: usize,
) -> Sample {
    let mut args = vec![Sample::tensor(ctx.dtype, sh.clone(), vals)];
    if weights {
        let wd = [DType::F32, DType::F64, DType::F16][ctx.rng.below(3)];
        let w = Domain::range(-2.0, 2.0).values(wd, numel(&sh), &mut ctx.rng, false);
        args.push(Sample::tensor(wd, sh, w));
    }
    Sample::new(
        args,
        Params {
            ints: vec![minlength as i64],
            ..Params::default()
        },
    )
}

fn bincount_dtype(s: &Sample) -> DType {
    match s.args.get(1) {
        Some(SampleArg::Tensor {
            dtype: DType::F32, ..
        }) => DType::F32,
        Some(_) => DType::F64,
        None => DType::I64,
    }
}

fn ref_bincount(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let x = a[0].t();
    if x.shape.len() != 1 {
        return Err("bincount takes a 1-D tensor".into());
    }
    if x.values.iter().any(|&v| v < 0.0) {
        return Err("negative values must be refused".into());
    }
    let w = a.get(1).map(|w| w.t());
    let minlength = c.params.ints[0] as usize;
    let len = x
        .values
        .iter()
        .map(|&v| v as usize + 1)
        .max()
        .unwrap_or(0)
        .max(minlength);
    let mut out = vec![0.0; len];
    for (i, &v) in x.values.iter().enumerate() {
        let add = w.map_or(1.0, |w| w.values[i]);
        out[v as usize] = store(out[v as usize] + add, c.result);
    }
    Ok(RefOut::new(vec![len], out))
}

fn histc_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    // values on a 0.25 grid in [-5, 5] (some outside [-4, 4]), NaN/±inf; bins over a range of
    // width 8, so every bin position is exact
    let dom = Domain::range(-5.0, 5.0).grid(0.25).specials();
    let vals = dom.values(ctx.dtype, numel(&ctx.shape), &mut ctx.rng, false);
    let x = Sample::tensor(ctx.dtype, ctx.shape.clone(), vals);
    let mut ps: Vec<(i64, f64, f64)> = vec![(8, -4.0, 4.0)];
    if ctx.variants {
        ps.extend([
            (5, -4.0, 4.0),
            (1, -4.0, 4.0),
            (3, 0.0, 8.0),
            (0, -4.0, 4.0),
            (4, 4.0, -4.0),
            (4, 0.0, f64::INFINITY),
        ]);
    }
    ps.into_iter()
        .map(|(b, lo, hi)| {
            Sample::new(
                vec![x.clone()],
                Params {
                    ints: vec![b],
                    scalars: vec![Scalar::Float(lo), Scalar::Float(hi)],
                    ..Params::default()
                },
            )
        })
        .collect()
}

fn ref_histc(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let x = a[0].t();
    let bins = c.params.ints[0];
    let (lo, hi) = (c.params.scalars[0].to_f64(), c.params.scalars[1].to_f64());
    if bins < 1 {
        return Err("bins must be at least 1".into());
    }
    if !lo.is_finite() || !hi.is_finite() || lo > hi {
        return Err(format!("the range [{lo}, {hi}] must be refused"));
    }
    let bins = bins as usize;
    let mut out = vec![0.0; bins];
    for &v in &x.values {
        if v.is_nan() || v < lo || v > hi {
            continue;
        }
        let b = (((v - lo) * bins as f64) / (hi - lo)).floor() as usize;
        out[b.min(bins - 1)] += 1.0;
    }
    Ok(RefOut::new(vec![bins], out))
}

/// The other output of a two-output `_out` call (a fresh tensor of the right dtype; the
/// runner's output is the one under test).
fn other_out(like: &Tensor, dtype: DType) -> stride_core::Result<Tensor> {
    Tensor::zeros(like.shape().to_vec(), dtype, &like.device())
}

fn op(name: &'static str, d: Domain) -> OpInfo {
    OpInfo::new(name, Family::Sort).args(vec![ArgSpec::tensor("self", d)])
}

pub fn ops() -> Vec<OpInfo> {
    let special = Domain::range(-3.0, 3.0).grid(0.5).specials();
    let dim = |p: &Params| p.dims[0];
    let mut v = vec![
        op("sort", special)
            .dtypes(ALL)
            .tol(|_| Tol::EXACT) // selections: inputs, moved, never rounded
            .sampler(line_sampler(special, sort_ints))
            .reference(|c, a| ref_sort(c, a, false))
            .functional(move |a, p| Ok(a[0].t().sort(dim(p), flag(p, 0), flag(p, 1))?.0))
            .exact_dest_dtype()
            .out(move |a, p, o| {
                let i = other_out(o, DType::I64)?;
                Ok(a[0].t().sort_out(dim(p), flag(p, 0), flag(p, 1), o, &i)?.0)
            }),
        op("sort.indices", special)
            .dtypes(ALL)
            .rule(DTypeRule::Custom(i64_result))
            .sampler(line_sampler(special, sort_ints))
            .reference(|c, a| ref_sort(c, a, true))
            .functional(move |a, p| Ok(a[0].t().sort(dim(p), flag(p, 0), flag(p, 1))?.1))
            .exact_dest_dtype()
            .out(move |a, p, o| {
                let v = other_out(o, a[0].t().dtype())?;
                Ok(a[0].t().sort_out(dim(p), flag(p, 0), flag(p, 1), &v, o)?.1)
            }),
        op("argsort", special)
            .dtypes(ALL)
            .rule(DTypeRule::Custom(i64_result))
            .sampler(line_sampler(special, sort_ints))
            .reference(|c, a| ref_sort(c, a, true))
            .functional(move |a, p| a[0].t().argsort(dim(p), flag(p, 0), flag(p, 1))),
        op("topk", special)
            .dtypes(ALL)
            .tol(|_| Tol::EXACT) // selections: inputs, moved, never rounded
            .sampler(with_long_rows(line_sampler(special, topk_ints), special))
            .reference(|c, a| ref_topk(c, a, false))
            .functional(move |a, p| {
                Ok(a[0]
                    .t()
                    .topk(p.ints[0].max(0) as usize, dim(p), flag(p, 1), flag(p, 2))?
                    .0)
            })
            .exact_dest_dtype()
            .out(move |a, p, o| {
                let i = other_out(o, DType::I64)?;
                let k = p.ints[0].max(0) as usize;
                Ok(a[0]
                    .t()
                    .topk_out(k, dim(p), flag(p, 1), flag(p, 2), o, &i)?
                    .0)
            }),
        op("topk.indices", special)
            .dtypes(ALL)
            .rule(DTypeRule::Custom(i64_result))
            .sampler(with_long_rows(line_sampler(special, topk_ints), special))
            .reference(|c, a| ref_topk(c, a, true))
            .functional(move |a, p| {
                Ok(a[0]
                    .t()
                    .topk(p.ints[0].max(0) as usize, dim(p), flag(p, 1), flag(p, 2))?
                    .1)
            })
            .exact_dest_dtype()
            .out(move |a, p, o| {
                let v = other_out(o, a[0].t().dtype())?;
                let k = p.ints[0].max(0) as usize;
                Ok(a[0]
                    .t()
                    .topk_out(k, dim(p), flag(p, 1), flag(p, 2), &v, o)?
                    .1)
            }),
        op("kthvalue", special)
            .dtypes(ALL)
            .tol(|_| Tol::EXACT) // selections: inputs, moved, never rounded
            .sampler(line_sampler(special, kth_ints))
            .reference(|c, a| ref_kth(c, a, false))
            .functional(move |a, p| {
                Ok(a[0]
                    .t()
                    .kthvalue(p.ints[0].max(0) as usize, dim(p), flag(p, 1))?
                    .0)
            }),
        op("kthvalue.indices", special)
            .dtypes(ALL)
            .rule(DTypeRule::Custom(i64_result))
            .sampler(line_sampler(special, kth_ints))
            .reference(|c, a| ref_kth(c, a, true))
            .functional(move |a, p| {
                Ok(a[0]
                    .t()
                    .kthvalue(p.ints[0].max(0) as usize, dim(p), flag(p, 1))?
                    .1)
            }),
        op("unique", special)
            .dtypes(ALL)
            .sampler(unique_sampler)
            .reference(|_, a| ref_unique(a, 0))
            .functional(|a, p| Ok(unique_call(a[0].t(), p)?.0)),
    ];
    // the optional results: present exactly when asked for
    for (name, which) in [("unique.inverse", 1u8), ("unique.counts", 2u8)] {
        v.push(
            op(name, special)
                .dtypes(ALL)
                .rule(DTypeRule::Custom(i64_result))
                .sampler(move |ctx: &mut SampleCtx| {
                    let mut s = unique_sampler(ctx);
                    for x in &mut s {
                        x.params.ints[which as usize] = 1;
                    }
                    s
                })
                .reference(move |_, a| ref_unique(a, which))
                .functional(move |a, p| {
                    let (_, inv, cnt) = unique_call(a[0].t(), p)?;
                    let r = if which == 1 { inv } else { cnt };
                    r.ok_or_else(|| stride_core::Error::Invalid {
                        op: "unique",
                        msg: "the requested result is missing".into(),
                    })
                }),
        );
    }
    let seq = Domain::range(-4.0, 4.0);
    v.extend([
        OpInfo::new("searchsorted", Family::Sort)
            .args(vec![
                ArgSpec::tensor("sorted_sequence", seq),
                ArgSpec::tensor("values", seq),
            ])
            .dtypes(ALL)
            .rule(DTypeRule::Custom(i64_result))
            .sampler(searchsorted_sampler)
            .reference(ref_searchsorted)
            .functional(|a, p| a[0].t().searchsorted(a[1].t(), flag(p, 0))),
        OpInfo::new("bincount", Family::Sort)
            .args(vec![ArgSpec::tensor("self", seq)])
            .dtypes(INTS)
            .rule(DTypeRule::Custom(bincount_dtype))
            .sampler(bincount_sampler(false))
            .reference(ref_bincount)
            .functional(|a, p| a[0].t().bincount(None, p.ints[0] as usize)),
        OpInfo::new("bincount.weights", Family::Sort)
            .args(vec![
                ArgSpec::tensor("self", seq),
                ArgSpec::fixed("weights", DType::F64, seq),
            ])
            .dtypes(INTS)
            .rule(DTypeRule::Custom(bincount_dtype))
            .sampler(bincount_sampler(true))
            .reference(ref_bincount)
            .functional(|a, p| a[0].t().bincount(Some(a[1].t()), p.ints[0] as usize)),
        OpInfo::new("histc", Family::Sort)
            .args(vec![ArgSpec::tensor("self", seq)])
            .dtypes(FLOATS)
            .sampler(histc_sampler)
            .reference(ref_histc)
            .functional(|a, p| {
                a[0].t().histc(
                    p.ints[0].max(0) as usize,
                    p.scalars[0].to_f64(),
                    p.scalars[1].to_f64(),
                )
            }),
    ]);
    v
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Once: the values of `sort topk kthvalue`; No: indices, `argsort unique searchsorted bincount histc`.
pub fn grad(name: &str) -> super::Grad {
    match name {
        "sort" | "topk" | "kthvalue" => super::Grad::Once,
        _ => super::Grad::No,
    }
}
