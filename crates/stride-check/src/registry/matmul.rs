//! Matrix products: `matmul` (1-D, 2-D, batched with broadcast batch dims), `mm`, `bmm`,
//! `dot`, `outer`. Operands of one float dtype (no promotion; `_out` outputs of exactly that
//! dtype), any strides; the tolerance grows with the inner size `k` (√k).

use super::dtypes::{ALL, FLOATS};
use super::{matmul_sampler, tensor_pairs, ArgSpec, Domain, Family, OpInfo, Sample, SampleCtx};
use crate::reference::{self, RefArg, RefOut};
use crate::tol::Tol;

/// `reference::matmul`, its tolerance scaled by √k.
fn product(a: &[RefArg]) -> Result<RefOut, String> {
    let (x, y) = (a[0].t(), a[1].t());
    let k = x.shape.last().copied().unwrap_or(1);
    Ok(reference::matmul(x, y)?.tol_scaled((k as f64).sqrt()))
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
            .sampler(matmul_sampler(d))
            .reference(|_, a| product(a))
            .functional(|a, _| a[0].t().matmul(a[1].t()))
            .out(|a, _, o| a[0].t().matmul_out(a[1].t(), o)),
        OpInfo::new("mm", Family::Matmul)
            .args(args(d))
            .dtypes(FLOATS)
            .exact_dest_dtype()
            .tol(tol)
            .sampler(pairs_sampler(d, mm_pairs))
            .reference(|_, a| {
                ranks(a, 2, 2, "mm")?;
                product(a)
            })
            .functional(|a, _| a[0].t().mm(a[1].t()))
            .out(|a, _, o| a[0].t().mm_out(a[1].t(), o)),
        OpInfo::new("bmm", Family::Matmul)
            .args(args(d))
            .dtypes(FLOATS)
            .exact_dest_dtype()
            .tol(tol)
            .sampler(pairs_sampler(d, bmm_pairs))
            .reference(|_, a| {
                ranks(a, 3, 3, "bmm")?;
                if a[0].t().shape[0] != a[1].t().shape[0] {
                    return Err("bmm of different batch sizes must be refused".into());
                }
                product(a)
            })
            .functional(|a, _| a[0].t().bmm(a[1].t()))
            .out(|a, _, o| a[0].t().bmm_out(a[1].t(), o)),
        OpInfo::new("dot", Family::Matmul)
            .args(args(d))
            .dtypes(FLOATS)
            .tol(tol)
            .sampler(pairs_sampler(d, dot_pairs))
            .reference(|_, a| {
                ranks(a, 1, 1, "dot")?;
                product(a)
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
    ]
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
