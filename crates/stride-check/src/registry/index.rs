//! Index ops: gathers (`index_select gather take index embedding masked_select`, each
//! functional and `_out`; `index_mask nonzero`, functional), scatters (`scatter scatter_value
//! scatter_add scatter_reduce index_add index_copy index_fill`, each functional, in place and
//! `_out`) and masked writes (`masked_fill masked_scatter`, all three forms). `_out`
//! destinations get every layout kind like any operand (poisoned, guarded), must have exactly
//! the result's dtype, and on every error — out-of-range indices included — stay unchanged.
//!
//! Index operands come from [`index_arg`]: values drawn within the size of the dim they
//! index (so they depend on another operand's shape), in **every** index dtype (i64, i32,
//! u32: all three with the core shape, one per sweep shape), and — like every operand — in
//! every layout, expanded (stride 0, so duplicates) included. Variants add out-of-range
//! indices (one past the end; negative where the op does not wrap): the reference says
//! `Err`, so the op must fail and leave every operand unchanged. The references are plain
//! loops in logical order (duplicates: the last write wins, accumulations run in order).

use super::dtypes::ALL;
use super::{
    ArgSpec, DTypeRule, Domain, Family, IntDomain, OpInfo, Params, Sample, SampleArg, SampleCtx,
};
use crate::host::{short, store, wrap_int};
use crate::reference::{
    check_index, gather_along, idx_values, numel, nz, ravel, scatter_ref, unravel, wrap_dim, Comb,
    RefArg, RefCtx, RefOut, RefTensor,
};
use crate::tol::Tol;
use stride_core::{DType, Operand, Scalar, ScatterReduce};

/// The index dtypes every index operand is run with.
pub const INDEX_DTYPES: [DType; 3] = [DType::I64, DType::I32, DType::U32];

/// Index values of `shape` in `lo..hi` (`lo` negative: wrapping ops; u32 stays ≥ 0); an
/// empty range gives zeros (then any element is out of range and the op must fail).
pub fn index_arg(
    ctx: &mut SampleCtx,
    dtype: DType,
    shape: Vec<usize>,
    lo: i64,
    hi: i64,
) -> SampleArg {
    let lo = if dtype == DType::U32 { lo.max(0) } else { lo };
    let values = (0..numel(&shape))
        .map(|_| {
            if hi <= lo {
                0.0
            } else {
                ctx.rng.range_i64(lo, hi - 1) as f64
            }
        })
        .collect();
    SampleArg::Tensor {
        dtype,
        shape,
        values,
    }
}

/// An operand of the case's dtype with values from `domain`.
fn data(ctx: &mut SampleCtx, domain: Domain, shape: Vec<usize>) -> SampleArg {
    let values = domain.values(ctx.dtype, numel(&shape), &mut ctx.rng, ctx.tame);
    SampleArg::Tensor {
        dtype: ctx.dtype,
        shape,
        values,
    }
}

/// A bool mask of `shape`.
fn mask(ctx: &mut SampleCtx, shape: Vec<usize>) -> SampleArg {
    let values = (0..numel(&shape))
        .map(|_| ctx.rng.coin() as u8 as f64)
        .collect();
    SampleArg::Tensor {
        dtype: DType::Bool,
        shape,
        values,
    }
}

/// Replaces the first element of an index operand (out of range: `v`).
fn poison_index(a: &mut SampleArg, v: i64) -> bool {
    if let SampleArg::Tensor { values, .. } = a {
        if let Some(x) = values.first_mut() {
            *x = v as f64;
            return true;
        }
    }
    false
}

/// The index dtypes of a case: all three with variants, else one (rotating).
fn idx_dtypes(ctx: &mut SampleCtx) -> Vec<DType> {
    if ctx.variants {
        INDEX_DTYPES.to_vec()
    } else {
        vec![INDEX_DTYPES[ctx.rng.below(3)]]
    }
}

fn labeled(s: Sample, ctx: &SampleCtx, idx: DType) -> Sample {
    s.label(format!("{}/{}", short(ctx.dtype), short(idx)))
}

fn p_dim(dim: i64) -> Params {
    Params {
        dims: vec![dim],
        ..Params::default()
    }
}

/// The size of dim `d` (a 0-d tensor counts as `[1]`).
fn size_of(shape: &[usize], d: i64) -> Option<usize> {
    if shape.is_empty() {
        return wrap_dim(d, 0).map(|_| 1);
    }
    wrap_dim(d, shape.len()).map(|w| shape[w])
}

fn dim_param(c: &RefCtx, nd: usize) -> Result<usize, String> {
    let d = c.params.dims[0];
    wrap_dim(d, nd).ok_or_else(|| format!("dim {d} out of range must be refused"))
}

/// Shapes for gather/scatter: `pos` must have `x`'s rank and be no larger off `d` (and no
/// larger than `src` anywhere).
fn check_positions(
    pos: &[usize],
    x: &[usize],
    d: usize,
    src: Option<&[usize]>,
) -> Result<(), String> {
    if pos.len() != x.len() {
        return Err("index rank differs from self's and must be refused".into());
    }
    for k in 0..x.len() {
        if k != d && pos[k] > x[k] {
            return Err(format!("index larger than self in dim {k} must be refused"));
        }
    }
    if let Some(s) = src {
        if s.len() != pos.len() || (0..s.len()).any(|k| pos[k] > s[k]) {
            return Err("index larger than src must be refused".into());
        }
    }
    Ok(())
}

fn scalar_in(c: &RefCtx, d: DType) -> f64 {
    crate::reference::scalar_value(c.params.scalars[0], d)
}

fn int_param(p: &Params, i: usize) -> i64 {
    p.ints.get(i).copied().unwrap_or(0)
}

const REDUCES: [ScatterReduce; 5] = [
    ScatterReduce::Sum,
    ScatterReduce::Prod,
    ScatterReduce::Mean,
    ScatterReduce::Amax,
    ScatterReduce::Amin,
];

// ----- samplers ------------------------------------------------------------------------------

/// `index_select` / `index_fill`: a 1-D index (or 0-d) along a dim; `wrap`: negative indices
/// count from the end.
fn vector_index_sampler(
    domain: Domain,
    wrap: bool,
    scalar: bool,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let shape = ctx.shape.clone();
        let nd = shape.len() as i64;
        let mut out = vec![];
        for idt in idx_dtypes(ctx) {
            let mut dims = vec![-1];
            if ctx.variants {
                dims.extend([0, nd.max(1)]);
            }
            for (di, &dim) in dims.iter().enumerate() {
                let n = size_of(&shape, dim).unwrap_or(1) as i64;
                let lo = if wrap { -n } else { 0 };
                let x = data(ctx, domain, shape.clone());
                let mut ishapes = vec![vec![4]];
                if ctx.variants && di == 0 {
                    ishapes.extend([vec![], vec![0], vec![2, 2]]);
                }
                for (k, ish) in ishapes.into_iter().enumerate() {
                    let idx = index_arg(ctx, idt, ish, lo, n);
                    let mut params = p_dim(dim);
                    if scalar {
                        params.scalars =
                            vec![domain.scalar(ctx.dtype, ctx.dtype, &mut ctx.rng, ctx.tame)];
                    }
                    out.push(labeled(
                        Sample::new(vec![x.clone(), idx.clone()], params.clone()),
                        ctx,
                        idt,
                    ));
                    if ctx.variants && di == 0 && k == 0 {
                        let mut bad = idx.clone();
                        if poison_index(&mut bad, n) {
                            out.push(labeled(
                                Sample::new(vec![x.clone(), bad], params.clone()),
                                ctx,
                                idt,
                            ));
                        }
                        let mut neg = idx;
                        if idt != DType::U32 && poison_index(&mut neg, -n - 1) {
                            out.push(labeled(Sample::new(vec![x.clone(), neg], params), ctx, idt));
                        }
                    }
                }
            }
        }
        out
    }
}

/// `gather` / `scatter*`: an index of `self`'s rank (smaller in a dim with variants), `src`
/// (when `with_src`) of the index's shape or larger.
fn positional_sampler(
    domain: Domain,
    with_src: bool,
    scalar: bool,
    reduce_params: bool,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let shape = ctx.shape.clone();
        let nd = shape.len() as i64;
        let mut out = vec![];
        for idt in idx_dtypes(ctx) {
            let mut dims = vec![-1];
            if ctx.variants {
                dims.extend([0, nd.max(1)]);
            }
            for (di, &dim) in dims.iter().enumerate() {
                let n = size_of(&shape, dim).unwrap_or(1) as i64;
                let x = data(ctx, domain, shape.clone());
                let mut pshapes = vec![shape.clone()];
                if ctx.variants && di == 0 && !shape.is_empty() {
                    let mut smaller = shape.clone();
                    smaller[0] = smaller[0].saturating_sub(1);
                    let mut larger = shape.clone();
                    larger[0] += 1;
                    pshapes.extend([smaller, larger, vec![1; shape.len() + 1]]);
                }
                for (k, ps) in pshapes.into_iter().enumerate() {
                    let idx = index_arg(ctx, idt, ps.clone(), 0, n);
                    let mut args = vec![x.clone(), idx.clone()];
                    if with_src {
                        args.push(data(ctx, domain, ps.clone()));
                    }
                    let mut params = p_dim(dim);
                    if scalar {
                        params.scalars =
                            vec![domain.scalar(ctx.dtype, ctx.dtype, &mut ctx.rng, ctx.tame)];
                    }
                    let reduces: Vec<(i64, i64)> = if !reduce_params {
                        vec![(0, 0)]
                    } else if ctx.variants && di == 0 && k == 0 {
                        (0..5).flat_map(|r| [(r, 1), (r, 0)]).collect()
                    } else {
                        vec![(ctx.rng.below(5) as i64, ctx.rng.below(2) as i64)]
                    };
                    for (r, inc) in reduces {
                        let mut p = params.clone();
                        if reduce_params {
                            p.ints = vec![r, inc];
                        }
                        out.push(labeled(Sample::new(args.clone(), p), ctx, idt));
                    }
                    if ctx.variants && di == 0 && k == 0 {
                        let mut bad = args.clone();
                        if poison_index(&mut bad[1], n) {
                            out.push(labeled(Sample::new(bad, params.clone()), ctx, idt));
                        }
                        let mut neg = args.clone();
                        if idt != DType::U32 && poison_index(&mut neg[1], -1) {
                            out.push(labeled(Sample::new(neg, params.clone()), ctx, idt));
                        }
                    }
                }
            }
        }
        out
    }
}

/// `index_add` / `index_copy`: a 1-D index along a dim and a source of `self`'s shape with
/// that dim resized to the index's length.
fn source_sampler(
    domain: Domain,
    alpha: bool,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let shape = ctx.shape.clone();
        let nd = shape.len() as i64;
        let mut out = vec![];
        for idt in idx_dtypes(ctx) {
            let mut dims = vec![-1];
            if ctx.variants {
                dims.extend([0, nd.max(1)]);
            }
            for (di, &dim) in dims.iter().enumerate() {
                let n = size_of(&shape, dim).unwrap_or(1) as i64;
                let x = data(ctx, domain, shape.clone());
                let mut lens = vec![5usize];
                if ctx.variants && di == 0 {
                    lens.push(0);
                }
                for (k, len) in lens.into_iter().enumerate() {
                    let idx = index_arg(ctx, idt, vec![len], 0, n);
                    let mut ss = nz(&shape);
                    if let Some(w) = wrap_dim(dim, shape.len()) {
                        let last = ss.len() - 1;
                        ss[w.min(last)] = len;
                    }
                    if shape.is_empty() {
                        ss = vec![len];
                    }
                    let src = data(ctx, domain, ss);
                    let mut params = p_dim(dim);
                    if alpha {
                        let a = if ctx.dtype.is_float() {
                            Scalar::Float([1.0, -0.5, 2.0][ctx.rng.below(3)])
                        } else if ctx.variants && k == 0 && di == 0 && ctx.rng.below(3) == 0 {
                            Scalar::Float(0.5) // must be refused
                        } else {
                            Scalar::Int([1, -2, 3][ctx.rng.below(3)])
                        };
                        params.scalars = vec![a];
                    }
                    let args = vec![x.clone(), idx, src];
                    out.push(labeled(Sample::new(args.clone(), params.clone()), ctx, idt));
                    if ctx.variants && di == 0 && k == 0 {
                        let mut bad = args;
                        if poison_index(&mut bad[1], n) {
                            out.push(labeled(Sample::new(bad, params), ctx, idt));
                        }
                    }
                }
            }
        }
        out
    }
}

/// `take` / `index(dim, idx)` / `embedding`: an index of any shape (2-D, with variants 0-d
/// and empty), wrapping where the op wraps.
fn any_index_sampler(
    domain: Domain,
    kind: u8, // 0 take, 1 index(dim), 2 embedding
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let mut shape = ctx.shape.clone();
        if kind == 2 && shape.len() != 2 {
            // a weight [num, dim] from the base shape (other ranks: refused, with variants)
            let first = shape.first().copied().unwrap_or(3);
            let last = shape.last().copied().unwrap_or(2);
            if !ctx.variants || shape.len() < 2 {
                shape = vec![first, last];
            }
        }
        let nd = shape.len() as i64;
        let mut out = vec![];
        for idt in idx_dtypes(ctx) {
            let mut dims = vec![-1];
            if kind == 1 && ctx.variants {
                dims.extend([0, nd.max(1)]);
            }
            for (di, &dim) in dims.iter().enumerate() {
                let n = match kind {
                    0 => numel(&shape) as i64,
                    1 => size_of(&shape, dim).unwrap_or(1) as i64,
                    _ => shape.first().copied().unwrap_or(1) as i64,
                };
                let lo = if kind == 2 { 0 } else { -n };
                let x = data(ctx, domain, shape.clone());
                let mut ishapes = vec![vec![2, 3]];
                if ctx.variants && di == 0 {
                    ishapes.extend([vec![], vec![0], vec![5]]);
                }
                for (k, ish) in ishapes.into_iter().enumerate() {
                    let idx = index_arg(ctx, idt, ish, lo, n);
                    let params = p_dim(dim);
                    out.push(labeled(
                        Sample::new(vec![x.clone(), idx.clone()], params.clone()),
                        ctx,
                        idt,
                    ));
                    if ctx.variants && di == 0 && k == 0 {
                        let mut bad = idx.clone();
                        if poison_index(&mut bad, n) {
                            out.push(labeled(
                                Sample::new(vec![x.clone(), bad], params.clone()),
                                ctx,
                                idt,
                            ));
                        }
                        let mut neg = idx;
                        if idt != DType::U32
                            && poison_index(&mut neg, if kind == 2 { -1 } else { -n - 1 })
                        {
                            out.push(labeled(Sample::new(vec![x.clone(), neg], params), ctx, idt));
                        }
                    }
                }
            }
        }
        out
    }
}

/// Masked ops: `self`, a bool mask (self's shape; with variants a broadcast one and a
/// mismatched one) and, for `masked_scatter`, a source; for `index_mask` the mask covers
/// self's leading dims.
fn mask_sampler(
    domain: Domain,
    kind: u8, // 0 masked_fill (scalar), 1 masked_select, 2 masked_scatter, 3 index_mask, 4 nonzero
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let shape = ctx.shape.clone();
        let x = data(ctx, domain, shape.clone());
        if kind == 4 {
            let sparse = Domain::range(-1.0, 1.0).grid(1.0);
            let vals = sparse.values(ctx.dtype, numel(&shape), &mut ctx.rng, false);
            return vec![Sample::new(
                vec![Sample::tensor(ctx.dtype, shape, vals)],
                Params::default(),
            )];
        }
        let mut mshapes = vec![if kind == 3 {
            shape[..shape.len().min(1)].to_vec()
        } else {
            shape.clone()
        }];
        if ctx.variants {
            if kind == 3 {
                mshapes.push(shape.clone());
                mshapes.push(vec![shape.first().copied().unwrap_or(0) + 1]);
            } else if !shape.is_empty() {
                mshapes.push(shape[1..].to_vec()); // broadcasts
                let mut m = shape.clone();
                m[0] += 1;
                mshapes.push(m); // does not
            }
        }
        let mut out = vec![];
        for (k, ms) in mshapes.into_iter().enumerate() {
            let m = mask(ctx, ms);
            let mut args = vec![x.clone(), m];
            let mut params = Params::default();
            match kind {
                0 => {
                    params.scalars =
                        vec![domain.scalar(ctx.dtype, ctx.dtype, &mut ctx.rng, ctx.tame)]
                }
                2 => {
                    let n = numel(&shape).max(1);
                    let len = if ctx.variants && k == 0 {
                        [n, n + 3, n / 2]
                    } else {
                        [n, n, n]
                    };
                    for (j, l) in len.into_iter().enumerate() {
                        if j > 0 {
                            let mut a2 = args.clone();
                            a2.push(data(ctx, domain, vec![l]));
                            out.push(Sample::new(a2, params.clone()));
                        }
                    }
                    args.push(data(ctx, domain, shape.clone()));
                }
                _ => {}
            }
            out.push(Sample::new(args, params));
        }
        out
    }
}

// ----- references ----------------------------------------------------------------------------

fn ref_index_select(c: &RefCtx, a: &[RefArg], wrap: bool) -> Result<RefOut, String> {
    let (x, idx) = (a[0].t(), a[1].t());
    let d = dim_param(c, x.shape.len())?;
    if idx.shape.len() > 1 {
        return Err("a vector index must be 0-d or 1-d".into());
    }
    let flat = RefTensor {
        shape: vec![numel(&idx.shape)],
        ..idx.clone()
    };
    if x.shape.is_empty() {
        if flat.shape[0] != 1 {
            return Err("a 0-d tensor takes exactly one index".into());
        }
        let r = gather_along(x, 0, &flat, wrap)?;
        return Ok(RefOut::new(vec![], r.values));
    }
    gather_along(x, d, &flat, wrap)
}

fn ref_gather(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let (x, idx) = (a[0].t(), a[1].t());
    let d = dim_param(c, x.shape.len())?;
    let (xs, is) = (nz(&x.shape), nz(&idx.shape));
    check_positions(&is, &xs, d, None)?;
    let iv = idx_values(idx);
    let mut cc = vec![0; is.len()];
    let vals = (0..numel(&is))
        .map(|lin| {
            unravel(lin, &is, &mut cc);
            let j = check_index(iv[lin], xs[d], false, "gather")?;
            let mut q = cc.clone();
            q[d] = j;
            Ok(x.values[ravel(&q, &xs)])
        })
        .collect::<Result<Vec<f64>, String>>()?;
    Ok(RefOut::new(idx.shape.clone(), vals))
}

/// `scatter` (src tensor or scalar value), `scatter_add`, `scatter_reduce`.
fn ref_scatter(
    c: &RefCtx,
    a: &[RefArg],
    comb: Option<Comb>,
    src_scalar: bool,
) -> Result<RefOut, String> {
    let (x, idx) = (a[0].t(), a[1].t());
    let d = dim_param(c, x.shape.len())?;
    let (xs, is) = (nz(&x.shape), nz(&idx.shape));
    let src = (!src_scalar).then(|| a[2].t());
    let ss = src.map(|s| nz(&s.shape));
    check_positions(&is, &xs, d, ss.as_deref())?;
    let iv = idx_values(idx);
    let dt = x.dtype;
    let (comb, include_self, reduce) = match comb {
        Some(cb) => (cb, true, None),
        None => {
            let r = REDUCES[int_param(c.params, 0) as usize];
            let cb = match r {
                ScatterReduce::Sum | ScatterReduce::Mean => Comb::Add,
                ScatterReduce::Prod => Comb::Prod,
                ScatterReduce::Amax => Comb::Amax,
                ScatterReduce::Amin => Comb::Amin,
            };
            (cb, int_param(c.params, 1) != 0, Some(r))
        }
    };
    if dt == DType::Bool && comb != Comb::Assign {
        return Err("accumulating scatters refuse bool tensors".into());
    }
    let value = |p: &[usize]| -> f64 {
        match src {
            Some(s) => s.values[ravel(p, ss.as_ref().unwrap())],
            None => scalar_in(c, dt),
        }
    };
    let mut base = x.clone();
    base.shape = xs.clone();
    let (mut out, hits) = scatter_ref(
        &base,
        d,
        &is,
        |p| iv[ravel(p, &is)],
        value,
        comb,
        include_self,
        false,
    )?;
    if reduce == Some(ScatterReduce::Mean) {
        for (i, v) in out.iter_mut().enumerate() {
            let n = (hits[i] + include_self as usize).max(1) as f64;
            *v = if dt.is_float() {
                store(*v / n, dt)
            } else {
                (*v / n).floor()
            };
        }
    }
    Ok(RefOut::new(x.shape.clone(), out).tol_scaled(2.0))
}

/// The source value at a position.
type ValueFn<'a> = Box<dyn Fn(&[usize]) -> f64 + 'a>;

/// `index_add` (alpha), `index_copy`, `index_fill` (scalar value, wrapping).
fn ref_index_source(c: &RefCtx, a: &[RefArg], kind: u8) -> Result<RefOut, String> {
    let (x, idx) = (a[0].t(), a[1].t());
    let d = dim_param(c, x.shape.len())?;
    let dt = x.dtype;
    if idx.shape.len() > 1 {
        return Err("a vector index must be 0-d or 1-d".into());
    }
    let iv = idx_values(idx);
    let xs = nz(&x.shape);
    let mut positions = xs.clone();
    positions[d] = iv.len();
    let (comb, wrap) = match kind {
        0 => (Comb::Add, false),
        1 => (Comb::Assign, false),
        _ => (Comb::Assign, true),
    };
    // every index value is checked, also when the slices it selects are empty
    for &i in &iv {
        check_index(i, xs[d], wrap, "the")?;
    }
    let value: ValueFn = match kind {
        2 => {
            let v = scalar_in(c, dt);
            Box::new(move |_| v)
        }
        _ => {
            let s = a[2].t();
            let ss = nz(&s.shape);
            if ss != positions {
                return Err(format!("source shape {:?} must be {positions:?}", s.shape));
            }
            if kind == 0 {
                if dt == DType::Bool {
                    return Err("index_add refuses bool tensors".into());
                }
                let alpha = c.params.scalars[0];
                if !dt.is_float() && matches!(alpha, Scalar::Float(_)) {
                    return Err("a float alpha for an integer tensor must be refused".into());
                }
                let al = crate::reference::scalar_value(alpha, dt);
                let int = !dt.is_float();
                Box::new(move |p: &[usize]| {
                    let v = s.values[ravel(p, &ss)];
                    if int {
                        wrap_int(al as i128 * v as i128, dt) as f64
                    } else {
                        al * v
                    }
                })
            } else {
                Box::new(move |p: &[usize]| s.values[ravel(p, &ss)])
            }
        }
    };
    let mut base = x.clone();
    base.shape = xs;
    let (out, _) = scatter_ref(&base, d, &positions, |p| iv[p[d]], value, comb, true, wrap)?;
    Ok(RefOut::new(x.shape.clone(), out).tol_scaled(2.0))
}

fn broadcast_to(t: &RefTensor, to: &[usize]) -> Vec<f64> {
    let lead = to.len() - t.shape.len();
    let mut c = vec![0; to.len()];
    (0..numel(to))
        .map(|i| {
            unravel(i, to, &mut c);
            let cx: Vec<usize> = (0..t.shape.len())
                .map(|k| if t.shape[k] == 1 { 0 } else { c[lead + k] })
                .collect();
            t.values[ravel(&cx, &t.shape)]
        })
        .collect()
}

fn bshape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    crate::reference::broadcast_shapes(&[a, b])
        .ok_or_else(|| format!("shapes {a:?} and {b:?} do not broadcast"))
}

fn ref_masked(c: &RefCtx, a: &[RefArg], kind: u8) -> Result<RefOut, String> {
    let (x, m) = (a[0].t(), a[1].t());
    match kind {
        0 => {
            let s = bshape(&x.shape, &m.shape)?;
            let (xv, mv) = (broadcast_to(x, &s), broadcast_to(m, &s));
            let v = scalar_in(c, x.dtype);
            let vals = xv
                .iter()
                .zip(&mv)
                .map(|(&xi, &mi)| if mi != 0.0 { v } else { xi })
                .collect();
            Ok(RefOut::new(s, vals))
        }
        1 => {
            let s = bshape(&x.shape, &m.shape)?;
            let (xv, mv) = (broadcast_to(x, &s), broadcast_to(m, &s));
            let vals: Vec<f64> = xv
                .iter()
                .zip(&mv)
                .filter(|(_, &mi)| mi != 0.0)
                .map(|(&xi, _)| xi)
                .collect();
            Ok(RefOut::new(vec![vals.len()], vals))
        }
        2 => {
            let src = a[2].t();
            // self and mask broadcast together (in place, the runner requires self's shape)
            let s = bshape(&x.shape, &m.shape)?;
            let (xv, mv) = (broadcast_to(x, &s), broadcast_to(m, &s));
            let need = mv.iter().filter(|&&v| v != 0.0).count();
            if src.values.len() < need {
                return Err(format!(
                    "source has {} elements, the mask needs {need}",
                    src.values.len()
                ));
            }
            let mut k = 0;
            let vals = xv
                .iter()
                .zip(&mv)
                .map(|(&xi, &mi)| {
                    if mi != 0.0 {
                        k += 1;
                        src.values[k - 1]
                    } else {
                        xi
                    }
                })
                .collect();
            Ok(RefOut::new(s, vals))
        }
        _ => {
            // index_mask: mask covers the leading dims
            let k = m.shape.len();
            if k > x.shape.len() || m.shape[..] != x.shape[..k] {
                return Err("the mask must equal self's leading dims".into());
            }
            let inner: usize = numel(&x.shape[k..]);
            let mut vals = vec![];
            let mut rows = 0;
            for (r, &mi) in m.values.iter().enumerate() {
                if mi != 0.0 {
                    rows += 1;
                    vals.extend_from_slice(&x.values[r * inner..(r + 1) * inner]);
                }
            }
            let mut shape = vec![rows];
            shape.extend_from_slice(&x.shape[k..]);
            Ok(RefOut::new(shape, vals))
        }
    }
}

fn ref_nonzero(a: &[RefArg]) -> Result<RefOut, String> {
    let x = a[0].t();
    let nd = x.shape.len();
    let mut c = vec![0; nd];
    let mut vals = vec![];
    let mut rows = 0;
    for (i, &v) in x.values.iter().enumerate() {
        if v != 0.0 {
            rows += 1;
            unravel(i, &x.shape, &mut c);
            vals.extend(c.iter().map(|&k| k as f64));
        }
    }
    Ok(RefOut::new(vec![rows, nd], vals))
}

fn i64_result(_: &Sample) -> DType {
    DType::I64
}

/// An index-family entry. Destinations (in place and `_out`) must have exactly the result's
/// dtype, PyTorch's rule for these ops (`index_select(..., out=)` of another dtype is an
/// error, not a cast).
fn op(name: &'static str, args: Vec<ArgSpec>, dtypes: &[DType]) -> OpInfo {
    OpInfo::new(name, Family::Index)
        .args(args)
        .dtypes(dtypes)
        .exact_dest_dtype()
}

fn reduce_of(p: &Params) -> ScatterReduce {
    REDUCES[int_param(p, 0) as usize]
}

pub fn ops() -> Vec<OpInfo> {
    let any = Domain::any();
    let special = Domain::any().specials();
    let small = Domain::range(-2.0, 2.0).ints(IntDomain::Range(-3, 3));
    let idx = |n| ArgSpec::fixed(n, DType::I64, Domain::any());
    let mask_arg = ArgSpec::fixed("mask", DType::Bool, any);
    let no_bool: Vec<DType> = ALL.iter().copied().filter(|&d| d != DType::Bool).collect();
    let dim = |p: &Params| p.dims[0];
    let sc = |p: &Params| Operand::Scalar(p.scalars[0]);
    vec![
        op(
            "index_select",
            vec![ArgSpec::tensor("self", any), idx("index")],
            ALL,
        )
        .sampler(vector_index_sampler(any, false, false))
        .reference(|c, a| ref_index_select(c, a, false))
        .functional(move |a, p| a[0].t().index_select(dim(p), a[1].t()))
        .out(move |a, p, o| a[0].t().index_select_out(dim(p), a[1].t(), o)),
        op(
            "gather",
            vec![ArgSpec::tensor("self", any), idx("index")],
            ALL,
        )
        .sampler(positional_sampler(any, false, false, false))
        .reference(ref_gather)
        .functional(move |a, p| a[0].t().gather(dim(p), a[1].t()))
        .out(move |a, p, o| a[0].t().gather_out(dim(p), a[1].t(), o)),
        op(
            "take",
            vec![ArgSpec::tensor("self", any), idx("index")],
            ALL,
        )
        .sampler(any_index_sampler(any, 0))
        .reference(|_, a| {
            let x = a[0].t();
            let flat = RefTensor {
                shape: vec![x.values.len()],
                ..x.clone()
            };
            gather_along(&flat, 0, a[1].t(), true)
        })
        .functional(|a, _| a[0].t().take(a[1].t()))
        .out(|a, _, o| a[0].t().take_out(a[1].t(), o)),
        op(
            "index",
            vec![ArgSpec::tensor("self", any), idx("index")],
            ALL,
        )
        .sampler(any_index_sampler(any, 1))
        .reference(|c, a| {
            let x = a[0].t();
            if x.shape.is_empty() {
                return Err("a 0-d tensor has no dim to index".into());
            }
            let d = dim_param(c, x.shape.len())?;
            gather_along(x, d, a[1].t(), true)
        })
        .functional(move |a, p| a[0].t().index(dim(p), a[1].t()))
        .out(move |a, p, o| a[0].t().index_out(dim(p), a[1].t(), o)),
        op(
            "embedding",
            vec![ArgSpec::tensor("weight", any), idx("indices")],
            ALL,
        )
        .sampler(any_index_sampler(any, 2))
        .reference(|_, a| {
            let w = a[0].t();
            if w.shape.len() != 2 {
                return Err("the weight must be 2-D".into());
            }
            gather_along(w, 0, a[1].t(), false)
        })
        .functional(|a, _| a[0].t().embedding(a[1].t()))
        .out(|a, _, o| a[0].t().embedding_out(a[1].t(), o)),
        op(
            "index_mask",
            vec![ArgSpec::tensor("self", any), mask_arg],
            ALL,
        )
        .sampler(mask_sampler(any, 3))
        .reference(|c, a| ref_masked(c, a, 3))
        .functional(|a, _| a[0].t().index_mask(a[1].t())),
        op(
            "masked_select",
            vec![ArgSpec::tensor("self", any), mask_arg],
            ALL,
        )
        .sampler(mask_sampler(any, 1))
        .reference(|c, a| ref_masked(c, a, 1))
        .functional(|a, _| a[0].t().masked_select(a[1].t()))
        .out(|a, _, o| a[0].t().masked_select_out(a[1].t(), o)),
        op("nonzero", vec![ArgSpec::tensor("self", any)], ALL)
            .rule(DTypeRule::Custom(i64_result))
            .sampler(mask_sampler(any, 4))
            .reference(|_, a| ref_nonzero(a))
            .functional(|a, _| a[0].t().nonzero()),
        op(
            "masked_fill",
            vec![ArgSpec::tensor("self", special), mask_arg],
            ALL,
        )
        .sampler(mask_sampler(special, 0))
        .reference(|c, a| ref_masked(c, a, 0))
        .functional(move |a, p| a[0].t().masked_fill(a[1].t(), sc(p)))
        .inplace(move |a, p| a[0].t().masked_fill_(a[1].t(), sc(p)))
        .out(move |a, p, o| a[0].t().masked_fill_out(a[1].t(), sc(p), o)),
        op(
            "masked_scatter",
            vec![
                ArgSpec::tensor("self", any),
                mask_arg,
                ArgSpec::tensor("source", any),
            ],
            ALL,
        )
        .sampler(mask_sampler(any, 2))
        .reference(|c, a| ref_masked(c, a, 2))
        .functional(|a, _| a[0].t().masked_scatter(a[1].t(), a[2].t()))
        .inplace(|a, _| a[0].t().masked_scatter_(a[1].t(), a[2].t()))
        .out(|a, _, o| a[0].t().masked_scatter_out(a[1].t(), a[2].t(), o)),
        op(
            "scatter",
            vec![
                ArgSpec::tensor("self", any),
                idx("index"),
                ArgSpec::tensor("src", any),
            ],
            ALL,
        )
        .sampler(positional_sampler(any, true, false, false))
        .reference(|c, a| ref_scatter(c, a, Some(Comb::Assign), false))
        .functional(move |a, p| a[0].t().scatter(dim(p), a[1].t(), a[2].t()))
        .inplace(move |a, p| a[0].t().scatter_(dim(p), a[1].t(), a[2].t()))
        .out(move |a, p, o| a[0].t().scatter_out(dim(p), a[1].t(), a[2].t(), o)),
        op(
            "scatter_value",
            vec![ArgSpec::tensor("self", any), idx("index")],
            ALL,
        )
        .sampler(positional_sampler(any, false, true, false))
        .reference(|c, a| ref_scatter(c, a, Some(Comb::Assign), true))
        .functional(move |a, p| a[0].t().scatter_value(dim(p), a[1].t(), sc(p)))
        .inplace(move |a, p| a[0].t().scatter_value_(dim(p), a[1].t(), sc(p)))
        .out(move |a, p, o| a[0].t().scatter_value_out(dim(p), a[1].t(), sc(p), o)),
        op(
            "scatter_add",
            vec![
                ArgSpec::tensor("self", any),
                idx("index"),
                ArgSpec::tensor("src", any),
            ],
            &no_bool,
        )
        .tol(|d| Tol::default_for(d).scaled(2.0))
        .sampler(positional_sampler(any, true, false, false))
        .reference(|c, a| ref_scatter(c, a, Some(Comb::Add), false))
        .functional(move |a, p| a[0].t().scatter_add(dim(p), a[1].t(), a[2].t()))
        .inplace(move |a, p| a[0].t().scatter_add_(dim(p), a[1].t(), a[2].t()))
        .out(move |a, p, o| a[0].t().scatter_add_out(dim(p), a[1].t(), a[2].t(), o)),
        op(
            "scatter_reduce",
            vec![
                ArgSpec::tensor("self", small),
                idx("index"),
                ArgSpec::tensor("src", small),
            ],
            &no_bool,
        )
        .tol(|d| Tol::default_for(d).scaled(2.0))
        .sampler(positional_sampler(small, true, false, true))
        .reference(|c, a| ref_scatter(c, a, None, false))
        .functional(move |a, p| {
            a[0].t().scatter_reduce(
                dim(p),
                a[1].t(),
                a[2].t(),
                reduce_of(p),
                int_param(p, 1) != 0,
            )
        })
        .inplace(move |a, p| {
            a[0].t().scatter_reduce_(
                dim(p),
                a[1].t(),
                a[2].t(),
                reduce_of(p),
                int_param(p, 1) != 0,
            )
        })
        .out(move |a, p, o| {
            a[0].t().scatter_reduce_out(
                dim(p),
                a[1].t(),
                a[2].t(),
                reduce_of(p),
                int_param(p, 1) != 0,
                o,
            )
        }),
        op(
            "index_add",
            vec![
                ArgSpec::tensor("self", any),
                idx("index"),
                ArgSpec::tensor("source", any),
            ],
            &no_bool,
        )
        .tol(|d| Tol::default_for(d).scaled(2.0))
        .sampler(source_sampler(any, true))
        .reference(|c, a| ref_index_source(c, a, 0))
        .functional(move |a, p| a[0].t().index_add(dim(p), a[1].t(), a[2].t(), p.scalars[0]))
        .inplace(move |a, p| {
            a[0].t()
                .index_add_(dim(p), a[1].t(), a[2].t(), p.scalars[0])
        })
        .out(move |a, p, o| {
            a[0].t()
                .index_add_out(dim(p), a[1].t(), a[2].t(), p.scalars[0], o)
        }),
        op(
            "index_copy",
            vec![
                ArgSpec::tensor("self", any),
                idx("index"),
                ArgSpec::tensor("source", any),
            ],
            ALL,
        )
        .sampler(source_sampler(any, false))
        .reference(|c, a| ref_index_source(c, a, 1))
        .functional(move |a, p| a[0].t().index_copy(dim(p), a[1].t(), a[2].t()))
        .inplace(move |a, p| a[0].t().index_copy_(dim(p), a[1].t(), a[2].t()))
        .out(move |a, p, o| a[0].t().index_copy_out(dim(p), a[1].t(), a[2].t(), o)),
        op(
            "index_fill",
            vec![ArgSpec::tensor("self", any), idx("index")],
            ALL,
        )
        .sampler(vector_index_sampler(any, true, true))
        .reference(|c, a| ref_index_source(c, a, 2))
        .functional(move |a, p| a[0].t().index_fill(dim(p), a[1].t(), sc(p)))
        .inplace(move |a, p| a[0].t().index_fill_(dim(p), a[1].t(), sc(p)))
        .out(move |a, p, o| a[0].t().index_fill_out(dim(p), a[1].t(), sc(p), o)),
    ]
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Twice: the gathers and accumulating scatters whose backward is again a gather or a scatter-add; Once: the other value-moving ops; No: `nonzero`.
pub fn grad(name: &str) -> super::Grad {
    match name {
        "index_select" | "gather" | "scatter_add" | "index_add" | "masked_select" => {
            super::Grad::Twice
        }
        "take" | "index" | "embedding" | "index_mask" | "masked_fill" | "masked_scatter"
        | "scatter" | "scatter_value" | "scatter_reduce" | "index_copy" | "index_fill" => {
            super::Grad::Once
        }
        _ => super::Grad::No,
    }
}
