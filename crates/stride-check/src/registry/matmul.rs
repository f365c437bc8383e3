//! Matrix products: `matmul` (1-D, 2-D, batched with broadcast batch dims), `mm`, `bmm`,
//! `dot`, `outer`, and the grouped product `grouped_matmul` (both of its forms). Operands of one float dtype (no promotion; `_out` outputs of exactly that
//! dtype), any strides; the tolerance grows with the inner size `k` (√k).

use super::dtypes::{ALL, FLOATS};
use super::{
    matmul_sampler, tensor_pairs, ArgSpec, Domain, Family, OpInfo, Params, Sample, SampleArg,
    SampleCtx,
};
use crate::reference::numel;
use crate::reference::{self, RefArg, RefCtx, RefOut, RefTensor};
use crate::tol::{self, Tol};
use stride_core::DType;

/// `reference::matmul` with an error bound per element. Each output element is a sum of k
/// products: at most one rounding of the product (none for f16/bf16 operands: 11 × 11 or
/// 8 × 8 significant bits fit f32's 24) and k − 1 additions in any order, so
/// `|ĉ_ij − c_ij| ≤ γ_k Σ_p |a_ip b_pj|` (Higham §3.5), `Σ|terms|` being the same product
/// of `|A|` and `|B|`; 0 when every term is a multiple of `2^(lsb A + lsb B)` and
/// `Σ|terms|` stays below `2^(that + 24)` ([`tol::sum_error`]: every partial sum exact in
/// f32). The runner adds ½ ulp of the result dtype. (The old √k-scaled tolerance accepted
/// an f16 accumulator.)
fn product(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let (x, y) = (a[0].t(), a[1].t());
    let k = x.shape.last().copied().unwrap_or(1);
    let r = reference::matmul(x, y)?;
    let abs = |t: &RefTensor| RefTensor {
        values: t.values.iter().map(|v| v.abs()).collect(),
        ..t.clone()
    };
    let mag = reference::matmul(&abs(x), &abs(y))?;
    let grid = match (
        tol::lsb_exp(x.values.iter().copied()),
        tol::lsb_exp(y.values.iter().copied()),
    ) {
        (Some(gx), Some(gy)) => Some(gx + gy),
        _ => None,
    };
    let acc = mag
        .values
        .iter()
        .map(|&s| tol::sum_error(k + 1, s, grid, c.result))
        .collect();
    Ok(r.with_acc_error(acc))
}

/// Inner sizes on both sides of 512, 1024 and 4096 (the CPU's f16 path blocks k by 512),
/// with `[2, k] × [k, 3]` operands (few, small other dims: CI stays cheap), on the core
/// shape of each float case: values on a 1/8 grid (partial sums exact in f32: any extra
/// rounding shows) and values in [0.5, 1.5] (a non-zero mean: the running sum grows with k,
/// so a half-precision partial sum loses its low bits).
fn with_long_k(
    base: impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static,
    vector: bool,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let mut out = base(ctx);
        if !ctx.variants || ctx.arg_dtypes.is_some() || !ctx.dtype.is_float() {
            return out;
        }
        for k in super::reduce::LONG {
            for dom in [
                Domain::range(-2.0, 2.0).grid(0.125),
                Domain::range(0.5, 1.5),
            ] {
                let pair = if vector {
                    (vec![k], vec![k])
                } else {
                    (vec![2, k], vec![k, 3])
                };
                out.extend(tensor_pairs(vec![pair], &dom, ctx));
            }
        }
        out
    }
}

/// Operand shape pairs from `(m, n, k, variants)`.
type PairsFn = fn(usize, usize, usize, bool) -> Vec<(Vec<usize>, Vec<usize>)>;

/// Operand shape pairs built from the base shape's last two sizes `m, n` and an inner size
/// `k` that crosses the tile sizes; `extra` lists variants (most of them refused).
fn pairs_sampler(
    domain: Domain,
    make: PairsFn,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let s = &ctx.shape;
        let (m, n) = match s.len() {
            0 => (1, 1),
            1 => (s[0], 1),
            l => (s[l - 2], s[l - 1]),
        };
        let k = [1, 7, 33, s.first().copied().unwrap_or(1)][ctx.rng.below(4)];
        tensor_pairs(make(m, n, k, ctx.variants), &domain, ctx)
    }
}

fn mm_pairs(m: usize, n: usize, k: usize, v: bool) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut p = vec![(vec![m, k], vec![k, n])];
    if v {
        p.extend([
            (vec![m, k], vec![k + 1, n]),
            (vec![2, m, k], vec![2, k, n]),
            (vec![k], vec![k, n]),
        ]);
    }
    p
}
fn bmm_pairs(m: usize, n: usize, k: usize, v: bool) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut p = vec![(vec![3, m, k], vec![3, k, n])];
    if v {
        p.extend([
            (vec![1, m, k], vec![1, k, n]),
            (vec![0, m, k], vec![0, k, n]),
            (vec![1, m, k], vec![3, k, n]), // no broadcasting in bmm
            (vec![3, m, k], vec![3, k + 1, n]),
            (vec![m, k], vec![k, n]),
        ]);
    }
    p
}
fn dot_pairs(m: usize, _: usize, k: usize, v: bool) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut p = vec![(vec![k * m.max(1)], vec![k * m.max(1)])];
    if v {
        p.extend([
            (vec![0], vec![0]),
            (vec![k], vec![k + 1]),
            (vec![1, k], vec![k]),
        ]);
    }
    p
}
fn outer_pairs(m: usize, n: usize, _: usize, v: bool) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut p = vec![(vec![m], vec![n])];
    if v {
        p.extend([(vec![0], vec![n]), (vec![m, 1], vec![n]), (vec![], vec![n])]);
    }
    p
}

fn args(d: Domain) -> Vec<ArgSpec> {
    vec![ArgSpec::tensor("self", d), ArgSpec::tensor("other", d)]
}

fn ranks(a: &[RefArg], ra: usize, rb: usize, op: &str) -> Result<(), String> {
    let (x, y) = (a[0].t(), a[1].t());
    if x.shape.len() != ra || y.shape.len() != rb {
        return Err(format!(
            "{op} of {}-D and {}-D operands must be refused",
            x.shape.len(),
            y.shape.len()
        ));
    }
    Ok(())
}

pub fn ops() -> Vec<OpInfo> {
    let d = Domain::range(-1.0, 1.0);
    let tol = |t| Tol::default_for(t).scaled(4.0);
    vec![
        OpInfo::new("matmul", Family::Matmul)
            .args(args(d))
            .dtypes(FLOATS)
            .exact_dest_dtype()
            .tol(tol)
            .sampler(with_long_k(matmul_sampler(d), false))
            .reference(|c, a| product(c, a))
            .functional(|a, _| a[0].t().matmul(a[1].t()))
            .out(|a, _, o| a[0].t().matmul_out(a[1].t(), o)),
        OpInfo::new("mm", Family::Matmul)
            .args(args(d))
            .dtypes(FLOATS)
            .exact_dest_dtype()
            .tol(tol)
            .sampler(with_long_k(pairs_sampler(d, mm_pairs), false))
            .reference(|c, a| {
                ranks(a, 2, 2, "mm")?;
                product(c, a)
            })
            .functional(|a, _| a[0].t().mm(a[1].t()))
            .out(|a, _, o| a[0].t().mm_out(a[1].t(), o)),
        OpInfo::new("bmm", Family::Matmul)
            .args(args(d))
            .dtypes(FLOATS)
            .exact_dest_dtype()
            .tol(tol)
            .sampler(pairs_sampler(d, bmm_pairs))
            .reference(|c, a| {
                ranks(a, 3, 3, "bmm")?;
                if a[0].t().shape[0] != a[1].t().shape[0] {
                    return Err("bmm of different batch sizes must be refused".into());
                }
                product(c, a)
            })
            .functional(|a, _| a[0].t().bmm(a[1].t()))
            .out(|a, _, o| a[0].t().bmm_out(a[1].t(), o)),
        OpInfo::new("dot", Family::Matmul)
            .args(args(d))
            .dtypes(FLOATS)
            .tol(tol)
            .sampler(with_long_k(pairs_sampler(d, dot_pairs), true))
            .reference(|c, a| {
                ranks(a, 1, 1, "dot")?;
                product(c, a)
            })
            .functional(|a, _| a[0].t().dot(a[1].t())),
        // outer is a broadcast multiply: every dtype, exact up to the product's rounding
        OpInfo::new("outer", Family::Matmul)
            .args(args(Domain::any()))
            .dtypes(ALL)
            .sampler(pairs_sampler(Domain::any(), outer_pairs))
            .reference(|c, a| {
                ranks(a, 1, 1, "outer")?;
                let (x, y) = (a[0].t(), a[1].t());
                let xc = reference::RefTensor {
                    shape: vec![x.shape[0], 1],
                    ..x.clone()
                };
                let args = [RefArg::Tensor(&xc), RefArg::Tensor(y)];
                reference::elementwise(c, &args, |v| mul(v[0], v[1], c.compute))
            })
            .functional(|a, _| a[0].t().outer(a[1].t())),
        OpInfo::new("grouped_matmul", Family::Matmul)
            .args(vec![
                ArgSpec::tensor("self", d),
                ArgSpec::tensor("other", d),
                ArgSpec::fixed("offs", DType::I64, Domain::any()),
            ])
            .dtypes(FLOATS)
            .tol(tol)
            .sampler(grouped_sampler)
            .reference(grouped_product)
            .functional(|a, _| a[0].t().grouped_matmul(a[1].t(), a[2].t())),
    ]
}

// ----- grouped products ---------------------------------------------------------------------

/// Grouped-product samples `[a, b, offs]`: `(rows form, group sizes, rows past the last
/// group, k, n)` — groups crossing the CUDA kernels' 64- and 128-row tiles, empty groups, a
/// tail past the last offset, contraction lengths that are not multiples of the 32-long k
/// tile, no groups at all; with variants, offsets out of order (must be refused).
fn grouped_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let d = ctx.dtype;
    let dom = Domain::range(-1.0, 1.0);
    type Case = (bool, Vec<i64>, usize, usize, usize);
    let mut cases: Vec<Case> = vec![
        (true, vec![3, 0, 5], 2, 7, 9),
        (false, vec![3, 0, 5], 2, 7, 9),
    ];
    if ctx.variants {
        cases.extend([
            (true, vec![65, 0, 130, 1], 0, 40, 130),
            (true, vec![129], 3, 33, 17),
            (true, vec![], 4, 5, 3),
            (false, vec![70, 0, 35], 1, 9, 130),
            (false, vec![0, 33], 0, 129, 8),
            (true, vec![4, -2], 0, 3, 3),
        ]);
    }
    cases
        .into_iter()
        .map(|(rows, sizes, tail, k, n)| {
            let r = sizes.iter().map(|&s| s.max(0) as usize).sum::<usize>() + tail;
            let mut end = 0i64;
            let offs: Vec<f64> = sizes
                .iter()
                .map(|&s| {
                    end += s;
                    end as f64
                })
                .collect();
            let g = offs.len();
            let (sa, sb) = if rows {
                (vec![r, k], vec![g, k, n])
            } else {
                (vec![k, r], vec![r, n])
            };
            let va = dom.values(d, numel(&sa), &mut ctx.rng, ctx.tame);
            let vb = dom.values(d, numel(&sb), &mut ctx.rng, ctx.tame);
            let t = |dtype, shape, values| SampleArg::Tensor {
                dtype,
                shape,
                values,
            };
            Sample::new(
                vec![t(d, sa, va), t(d, sb, vb), t(DType::I64, vec![g], offs)],
                Params::default(),
            )
        })
        .collect()
}

/// The grouped product in f64 from the module docs' definition, with [`product`]'s error
/// bound per element (a sum of the group's products in any order; 0 for rows past the last
/// group and empty groups).
fn grouped_product(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let (x, w, o) = (a[0].t(), a[1].t(), a[2].t());
    if x.shape.len() != 2 || !(w.shape.len() == 2 || w.shape.len() == 3) || o.shape.len() != 1 {
        return Err("grouped_matmul of these ranks must be refused".into());
    }
    let rows = w.shape.len() == 3;
    let g = o.shape[0];
    let ragged = if rows { x.shape[0] } else { x.shape[1] };
    let mut prev = 0.0;
    for (i, &v) in o.values.iter().enumerate() {
        if v < prev || v > ragged as f64 {
            return Err(format!("offset {i} ({v}) out of order must be refused"));
        }
        prev = v;
    }
    let bounds: Vec<(usize, usize)> = (0..g)
        .map(|i| {
            let s = if i == 0 { 0.0 } else { o.values[i - 1] };
            (s as usize, o.values[i] as usize)
        })
        .collect();
    let grid = match (
        tol::lsb_exp(x.values.iter().copied()),
        tol::lsb_exp(w.values.iter().copied()),
    ) {
        (Some(gx), Some(gw)) => Some(gx + gw),
        _ => None,
    };
    let (mut values, mut acc) = (vec![], vec![]);
    let mut push = |terms: &mut dyn Iterator<Item = f64>, k: usize| {
        let (mut sum, mut mag) = (0.0, 0.0);
        for t in terms {
            sum += t;
            mag += t.abs();
        }
        values.push(sum);
        acc.push(tol::sum_error(k + 1, mag, grid, c.result));
    };
    let shape = if rows {
        let (r, k, n) = (x.shape[0], x.shape[1], w.shape[2]);
        if w.shape[0] != g || w.shape[1] != k {
            return Err(format!(
                "shapes {:?}·{:?} with {g} offsets must be refused",
                x.shape, w.shape
            ));
        }
        for i in 0..r {
            let grp = bounds.iter().position(|&(s, e)| i >= s && i < e);
            for j in 0..n {
                match grp {
                    Some(gi) => push(
                        &mut (0..k).map(|p| x.values[i * k + p] * w.values[(gi * k + p) * n + j]),
                        k,
                    ),
                    None => push(&mut std::iter::empty(), 0),
                }
            }
        }
        vec![r, n]
    } else {
        let (m, r, n) = (x.shape[0], x.shape[1], w.shape[1]);
        if w.shape[0] != r {
            return Err(format!(
                "shapes {:?}·{:?} must be refused",
                x.shape, w.shape
            ));
        }
        for &(s, e) in &bounds {
            for i in 0..m {
                for j in 0..n {
                    push(
                        &mut (s..e).map(|p| x.values[i * r + p] * w.values[p * n + j]),
                        e - s,
                    );
                }
            }
        }
        vec![g, m, n]
    };
    Ok(RefOut::new(shape, values).with_acc_error(acc))
}

/// A product in the compute dtype (integers wrap, bool is `and`).
fn mul(a: f64, b: f64, d: stride_core::DType) -> f64 {
    if d.is_float() {
        a * b
    } else if d == stride_core::DType::Bool {
        ((a != 0.0) && (b != 0.0)) as u8 as f64
    } else {
        crate::host::wrap_int(a as i128 * b as i128, d) as f64
    }
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Twice: every matrix product.
pub fn grad(name: &str) -> super::Grad {
    match name {
        "matmul" | "mm" | "bmm" | "dot" | "outer" | "grouped_matmul" => super::Grad::Twice,
        _ => super::Grad::No,
    }
}
