//! `einsum` over a table of equations: one-operand (`einsum.1`: trace, diagonal, transpose,
//! sums, implicit output) and two-operand (`einsum.2`: matmul, batch matmul, outer,
//! hadamard, ellipsis broadcast, contraction over two labels). Each operand gets every
//! layout. The reference is a brute-force sum over every assignment of the labels.

use super::dtypes::{ALL, FLOATS};
use super::{ArgSpec, DTypeRule, Domain, Family, OpInfo, Params, Sample, SampleArg, SampleCtx};
use crate::reference::{numel, ravel, unravel, RefArg, RefOut, RefTensor};
use crate::tol::{self, Tol};
use stride_core::{DType, Tensor};

/// (equation, operand shapes from sizes (m, n, k), result is a view of operand 0). One-operand
/// equations take every dtype (see [`unary_dtype`]); two-operand ones contract with a matrix
/// product and take floats.
type Eq = (
    &'static str,
    fn(usize, usize, usize) -> Vec<Vec<usize>>,
    bool,
);

const UNARY: &[Eq] = &[
    ("ii->", |m, _, _| vec![vec![m, m]], false),
    ("ii->i", |m, _, _| vec![vec![m, m]], true),
    ("ij->ji", |m, n, _| vec![vec![m, n]], true),
    ("ij->", |m, n, _| vec![vec![m, n]], false),
    ("ijk->ki", |m, n, k| vec![vec![m, k, n]], false),
    ("bii->b", |m, _, k| vec![vec![k, m, m]], false),
    ("ji", |m, n, _| vec![vec![m, n]], true), // implicit output: "ij" (a transpose)
    ("...ii->...i", |m, _, k| vec![vec![k, m, m]], true),
    ("ij->jk", |m, n, _| vec![vec![m, n]], false), // unknown output label: refused
];

const BINARY: &[Eq] = &[
    ("ij,jk->ik", |m, n, k| vec![vec![m, k], vec![k, n]], false),
    (
        "bij,bjk->bik",
        |m, n, k| vec![vec![2, m, k], vec![2, k, n]],
        false,
    ),
    ("i,j->ij", |m, n, _| vec![vec![m], vec![n]], false),
    ("ij,ij->ij", |m, n, _| vec![vec![m, n], vec![m, n]], false),
    (
        "...ij,...jk->...ik",
        |m, n, k| vec![vec![3, 1, m, k], vec![2, k, n]],
        false,
    ),
    (
        "ijk,jkl->il",
        |m, n, k| vec![vec![m, 2, k], vec![2, k, n]],
        false,
    ),
    ("ij,kj", |m, n, k| vec![vec![m, k], vec![n, k]], false), // implicit: "ik"
    ("ii,ij->j", |m, n, _| vec![vec![m, m], vec![m, n]], false),
    (
        "ij,jk->ik",
        |m, n, k| vec![vec![m, k], vec![k + 1, n]],
        false,
    ), // mismatch: refused
];

fn sampler(table: &'static [Eq]) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let s = &ctx.shape;
        let m = s.first().copied().unwrap_or(1).min(65);
        let n = s.last().copied().unwrap_or(2).min(65);
        let k = [1, 3, 7, 33][ctx.rng.below(4)];
        let which: Vec<usize> = if ctx.variants {
            (0..table.len()).collect()
        } else {
            vec![ctx.rng.below(table.len())]
        };
        let d = Domain::range(-1.0, 1.0);
        which
            .into_iter()
            .map(|i| {
                let shapes = (table[i].1)(m, n, k);
                let args = shapes
                    .into_iter()
                    .map(|sh| {
                        let v = d.values(ctx.dtype, numel(&sh), &mut ctx.rng, ctx.tame);
                        Sample::tensor(ctx.dtype, sh, v)
                    })
                    .collect();
                Sample::new(
                    args,
                    Params {
                        ints: vec![i as i64],
                        ..Params::default()
                    },
                )
            })
            .collect()
    }
}

/// Expands an equation for the operands' ranks: ellipsis dims become labels `0`, `1`, …
/// (right-aligned), the implicit output is filled in.
fn expand(eq: &str, ranks: &[usize]) -> Result<(Vec<Vec<u8>>, Vec<u8>), String> {
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq, None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return Err("operand count differs from the equation's".into());
    }
    let mut ell = 0;
    for (t, &r) in terms.iter().zip(ranks) {
        if t.contains("...") {
            ell = ell.max(r + 3 - t.len());
        }
    }
    let ell_labels = |n: usize| -> Vec<u8> { (0..n).map(|i| b'0' + (ell - n + i) as u8).collect() };
    let mut out_terms = vec![];
    for (t, &r) in terms.iter().zip(ranks) {
        let v: Vec<u8> = if let Some((a, b)) = t.split_once("...") {
            let n = r + 3 - t.len();
            let mut v = a.as_bytes().to_vec();
            v.extend(ell_labels(n));
            v.extend(b.as_bytes());
            v
        } else {
            t.as_bytes().to_vec()
        };
        if v.len() != r {
            return Err(format!("term {t} does not match rank {r}"));
        }
        out_terms.push(v);
    }
    let out: Vec<u8> = match rhs {
        Some(r) => {
            if let Some((a, b)) = r.split_once("...") {
                let mut v = a.as_bytes().to_vec();
                v.extend(ell_labels(ell));
                v.extend(b.as_bytes());
                v
            } else {
                r.as_bytes().to_vec()
            }
        }
        None => {
            let all: Vec<u8> = out_terms.concat();
            let mut once: Vec<u8> = all
                .iter()
                .copied()
                .filter(|c| c.is_ascii_alphabetic() && all.iter().filter(|&x| x == c).count() == 1)
                .collect();
            once.sort_by_key(|&c| (c.is_ascii_lowercase(), c));
            let mut v = ell_labels(ell);
            v.extend(once);
            v
        }
    };
    Ok((out_terms, out))
}

fn reference(eq: &str, a: &[RefArg], view: bool) -> Result<RefOut, String> {
    let ts: Vec<_> = a.iter().map(|x| x.t()).collect();
    let ranks: Vec<usize> = ts.iter().map(|t| t.shape.len()).collect();
    let (terms, out) = expand(eq, &ranks)?;
    // label sizes (1 broadcasts)
    let mut size = [0usize; 256];
    let mut set = [false; 256];
    for (t, term) in ts.iter().zip(&terms) {
        for (&l, &n) in term.iter().zip(&t.shape) {
            let s = &mut size[l as usize];
            if !set[l as usize] || *s == 1 {
                *s = n;
                set[l as usize] = true;
            } else if n != 1 && n != *s {
                return Err(format!("label {} has sizes {} and {n}", l as char, *s));
            }
        }
    }
    if out.iter().any(|&l| !set[l as usize]) {
        return Err("an output label appears in no operand".into());
    }
    let labels: Vec<u8> = (0..=255u8).filter(|&l| set[l as usize]).collect();
    let lsizes: Vec<usize> = labels.iter().map(|&l| size[l as usize]).collect();
    let os: Vec<usize> = out.iter().map(|&l| size[l as usize]).collect();
    let mut res = vec![0.0; numel(&os)];
    let mut idx = vec![0; labels.len()];
    let pos = |l: u8| labels.iter().position(|&x| x == l).unwrap();
    for lin in 0..numel(&lsizes) {
        unravel(lin, &lsizes, &mut idx);
        let mut p = 1.0;
        for (t, term) in ts.iter().zip(&terms) {
            let i: Vec<usize> = term
                .iter()
                .zip(&t.shape)
                .map(|(&l, &n)| if n == 1 { 0 } else { idx[pos(l)] })
                .collect();
            p *= t.values[ravel(&i, &t.shape)];
        }
        let o: Vec<usize> = out.iter().map(|&l| idx[pos(l)]).collect();
        res[ravel(&o, &os)] += p;
    }
    let k: usize = labels
        .iter()
        .zip(&lsizes)
        .filter(|(l, _)| !out.contains(l))
        .map(|(_, &n)| n)
        .product();
    Ok(RefOut::new(os, res)
        .view(view)
        .tol_scaled((k as f64).sqrt()))
}

/// One-operand equations on integer and bool tensors: a view or permutation keeps the dtype,
/// an equation that sums (a label not in the output) gives i64, as `sum` does.
fn unary_dtype(s: &Sample) -> DType {
    let d = match s.args.first() {
        Some(SampleArg::Tensor { dtype, .. }) => *dtype,
        _ => DType::F32,
    };
    let eq = UNARY[s.params.ints[0] as usize].0;
    let ranks: Vec<usize> = s
        .args
        .iter()
        .map(|a| match a {
            SampleArg::Tensor { shape, .. } => shape.len(),
            _ => 0,
        })
        .collect();
    let sums = expand(eq, &ranks)
        .is_ok_and(|(terms, out)| terms.concat().iter().any(|l| !out.contains(l)));
    if d.is_float() || !sums {
        d
    } else {
        DType::I64
    }
}

fn entry(name: &'static str, table: &'static [Eq], n: usize, dtypes: &[DType]) -> OpInfo {
    let names = ["a", "b"];
    let e = if n == 1 {
        OpInfo::new(name, Family::Einsum).rule(DTypeRule::Custom(unary_dtype))
    } else {
        OpInfo::new(name, Family::Einsum)
    };
    e.args(
        (0..n)
            .map(|i| ArgSpec::tensor(names[i], Domain::range(-1.0, 1.0)))
            .collect(),
    )
    .dtypes(dtypes)
    .tol(|d| Tol::default_for(d).scaled(4.0))
    .sampler(sampler(table))
    .reference(move |c, a| {
        let (eq, _, view) = table[c.params.ints[0] as usize];
        let r = reference(eq, a, view)?;
        if !c.result.is_float() {
            return Ok(r);
        }
        // The bound of a contraction (as matmul's): each output element sums k products of
        // f factors, each term rounded at most f − 1 times (the products) and k − 1 times
        // (the additions), in any order: `γ_{k+f−2} Σ|terms|`, `Σ|terms|` the same
        // contraction of the operands' absolute values; 0 when every partial sum is exact
        // in the accumulator (`tol::sum_error` on the operands' grids).
        let abs: Vec<RefTensor> = a
            .iter()
            .map(|x| RefTensor {
                values: x.t().values.iter().map(|v| v.abs()).collect(),
                ..x.t().clone()
            })
            .collect();
        let args: Vec<RefArg> = abs.iter().map(RefArg::Tensor).collect();
        let mag = reference(eq, &args, view)?;
        let grid = a.iter().try_fold(0, |g, x| {
            tol::lsb_exp(x.t().values.iter().copied()).map(|l| g + l)
        });
        let k = (r.tol_scale * r.tol_scale).round() as usize; // √k, see `reference`
        let n = k + a.len(); // n − 1 = k + f − 1 roundings: one spare
        let acc = mag
            .values
            .iter()
            .map(|&m| tol::sum_error(n, m, grid, c.result))
            .collect();
        Ok(r.with_acc_error(acc))
    })
    .functional(move |a, p| {
        let eq = table[p.ints[0] as usize].0;
        let ops: Vec<&Tensor> = a.iter().map(|x| x.t()).collect();
        Tensor::einsum(eq, &ops)
    })
}

pub fn ops() -> Vec<OpInfo> {
    vec![
        entry("einsum.1", UNARY, 1, ALL),
        entry("einsum.2", BINARY, 2, FLOATS),
    ]
}

/// The equation of a sample (for reports).
pub fn equation(p: &Params, binary: bool) -> &'static str {
    let t = if binary { BINARY } else { UNARY };
    t[p.ints[0] as usize].0
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Twice: `einsum.2`; Once: `einsum.1`.
pub fn grad(name: &str) -> super::Grad {
    match name {
        "einsum.2" => super::Grad::Twice,
        "einsum.1" => super::Grad::Once,
        _ => super::Grad::No,
    }
}
