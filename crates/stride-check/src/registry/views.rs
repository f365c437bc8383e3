//! View ops: `transpose`, `t`, `permute`, `slice` (with step), `narrow`, `select`, `expand`,
//! `broadcast_to`, `squeeze`, `squeeze_all`, `unsqueeze`, `flatten`, `unflatten`,
//! `diagonal`, `as_strided`, `view`, `reshape`.
//!
//! Each reference computes the output shape and, by index mapping, its values; it also says
//! whether the result must share the input's storage (a view) — `reshape`/`flatten` share
//! exactly when a view is possible, decided by [`crate::reference::view_strides`], a brute-force
//! oracle independent of stride's `Layout::view_strides`. Invalid arguments must be refused.

use super::dtypes::ALL;
use super::{ArgSpec, DTypeRule, Domain, Family, OpInfo, Params, Sample, SampleArg};
use crate::reference::{
    contiguous_strides, gather, numel, view_strides, wrap_dim, RefOut, RefTensor,
};

type Res = Result<RefOut, String>;

fn p_dims(dims: &[i64]) -> Params {
    Params {
        dims: dims.to_vec(),
        ..Params::default()
    }
}
fn p_di(dims: &[i64], ints: &[i64]) -> Params {
    Params {
        dims: dims.to_vec(),
        ints: ints.to_vec(),
        ..Params::default()
    }
}
fn p_sizes(sizes: &[i64]) -> Params {
    Params {
        sizes: sizes.to_vec(),
        ..Params::default()
    }
}

/// A view-op entry: the input drawn from the whole float range (with specials) in every
/// dtype; `params` lists the argument choices for a shape (the first is used when the runner
/// asks for no variants).
fn view_op(
    name: &'static str,
    params: fn(&[usize]) -> Vec<Params>,
    reference: fn(&RefTensor, &Params) -> Res,
) -> OpInfo {
    let domain = Domain::any().specials();
    OpInfo::new(name, Family::View)
        .args(vec![ArgSpec::tensor("self", domain)])
        .dtypes(ALL)
        .rule(DTypeRule::Same)
        .sampler(move |ctx| {
            let values = domain.values(ctx.dtype, numel(&ctx.shape), &mut ctx.rng, false);
            let mut ps = params(&ctx.shape);
            if !ctx.variants {
                ps.truncate(1);
            }
            ps.into_iter()
                .map(|p| {
                    Sample::new(
                        vec![SampleArg::Tensor {
                            dtype: ctx.dtype,
                            shape: ctx.shape.clone(),
                            values: values.clone(),
                        }],
                        p,
                    )
                })
                .collect()
        })
        .reference(move |c, a| reference(a[0].t(), c.params))
}

fn dim(d: i64, nd: usize) -> Result<usize, String> {
    wrap_dim(d, nd)
        .ok_or_else(|| format!("dim {d} is out of range for {nd} dims and must be refused"))
}

fn same(t: &RefTensor) -> RefOut {
    RefOut::new(t.shape.clone(), t.values.clone()).view(true)
}

fn transpose(t: &RefTensor, p: &Params) -> Res {
    let nd = t.shape.len();
    let (a, b) = (dim(p.dims[0], nd)?, dim(p.dims[1], nd)?);
    if nd == 0 {
        return Ok(same(t));
    }
    let mut shape = t.shape.clone();
    shape.swap(a, b);
    let v = gather(t, &shape, |i| {
        let mut j = i.to_vec();
        j.swap(a, b);
        j
    });
    Ok(RefOut::new(shape, v).view(true))
}

fn t_op(t: &RefTensor, _: &Params) -> Res {
    match t.shape.len() {
        0 | 1 => Ok(same(t)),
        2 => transpose(t, &p_dims(&[0, 1])),
        n => Err(format!("t() of a {n}-d tensor must be refused")),
    }
}

fn permute(t: &RefTensor, p: &Params) -> Res {
    let nd = t.shape.len();
    if p.dims.len() != nd {
        return Err("permute needs every dim once".into());
    }
    let dims: Vec<usize> = p
        .dims
        .iter()
        .map(|&d| dim(d, nd))
        .collect::<Result<_, _>>()?;
    for (i, d) in dims.iter().enumerate() {
        if dims[..i].contains(d) {
            return Err(format!("repeated dim {d} must be refused"));
        }
    }
    let shape: Vec<usize> = dims.iter().map(|&d| t.shape[d]).collect();
    let v = gather(t, &shape, |i| {
        let mut j = vec![0; nd];
        for (k, &d) in dims.iter().enumerate() {
            j[d] = i[k];
        }
        j
    });
    Ok(RefOut::new(shape, v).view(true))
}

/// Python slice semantics: bounds clamp, negative counts from the end.
fn slice(t: &RefTensor, p: &Params) -> Res {
    let nd = t.shape.len();
    if nd == 0 {
        return Err("slicing a 0-d tensor must be refused".into());
    }
    let d = dim(p.dims[0], nd)?;
    let (start, end, step) = (p.ints[0], p.ints[1], p.ints[2]);
    if step <= 0 {
        return Err("a non-positive step must be refused".into());
    }
    let n = t.shape[d] as i64;
    let clamp = |i: i64| if i < 0 { (i + n).max(0) } else { i.min(n) };
    let (s, e) = (clamp(start), clamp(end));
    let len = if e > s { (e - s + step - 1) / step } else { 0 };
    let mut shape = t.shape.clone();
    shape[d] = len as usize;
    let v = gather(t, &shape, |i| {
        let mut j = i.to_vec();
        j[d] = (s + i[d] as i64 * step) as usize;
        j
    });
    Ok(RefOut::new(shape, v).view(true))
}

fn narrow(t: &RefTensor, p: &Params) -> Res {
    let nd = t.shape.len();
    if nd == 0 {
        return Err("narrowing a 0-d tensor must be refused".into());
    }
    let d = dim(p.dims[0], nd)?;
    let (start, len) = (p.ints[0], p.ints[1]);
    let n = t.shape[d] as i64;
    let s = if start < 0 { start + n } else { start };
    if s < 0 || s > n || len < 0 || s + len > n {
        return Err(format!(
            "narrow({d}, {start}, {len}) of size {n} must be refused"
        ));
    }
    let mut shape = t.shape.clone();
    shape[d] = len as usize;
    let v = gather(t, &shape, |i| {
        let mut j = i.to_vec();
        j[d] += s as usize;
        j
    });
    Ok(RefOut::new(shape, v).view(true))
}

fn select(t: &RefTensor, p: &Params) -> Res {
    let nd = t.shape.len();
    if nd == 0 {
        return Err("select on a 0-d tensor must be refused".into());
    }
    let d = dim(p.dims[0], nd)?;
    let n = t.shape[d] as i64;
    let i0 = if p.ints[0] < 0 {
        p.ints[0] + n
    } else {
        p.ints[0]
    };
    if i0 < 0 || i0 >= n {
        return Err(format!(
            "index {} out of range for size {n} must be refused",
            p.ints[0]
        ));
    }
    let mut shape = t.shape.clone();
    shape.remove(d);
    let v = gather(t, &shape, |i| {
        let mut j = i.to_vec();
        j.insert(d, i0 as usize);
        j
    });
    Ok(RefOut::new(shape, v).view(true))
}

/// PyTorch's expand: new leading dims (sizes ≥ 0), `-1` keeps a size, size-1 dims broadcast.
fn expand_to(t: &RefTensor, sizes: &[i64], allow_keep: bool) -> Res {
    let nd = t.shape.len();
    if sizes.len() < nd {
        return Err("expanding to fewer dims must be refused".into());
    }
    let lead = sizes.len() - nd;
    let mut shape = vec![0usize; sizes.len()];
    for (i, &want) in sizes.iter().enumerate() {
        if i < lead {
            if want < 0 {
                return Err("a new leading dim needs a size".into());
            }
            shape[i] = want as usize;
            continue;
        }
        let have = t.shape[i - lead];
        shape[i] = if (allow_keep && want == -1) || want == have as i64 {
            have
        } else if have == 1 && want >= 0 {
            want as usize
        } else {
            return Err(format!("dim {i} of size {have} can't expand to {want}"));
        };
    }
    let v = gather(t, &shape, |i| {
        (0..nd)
            .map(|k| if t.shape[k] == 1 { 0 } else { i[k + lead] })
            .collect()
    });
    Ok(RefOut::new(shape, v).view(true))
}

fn squeeze(t: &RefTensor, p: &Params) -> Res {
    let nd = t.shape.len();
    let d = dim(p.dims[0], nd)?;
    if nd == 0 || t.shape[d] != 1 {
        return Ok(same(t));
    }
    let mut shape = t.shape.clone();
    shape.remove(d);
    Ok(RefOut::new(shape, t.values.clone()).view(true))
}

fn squeeze_all(t: &RefTensor, _: &Params) -> Res {
    let shape: Vec<usize> = t.shape.iter().copied().filter(|&n| n != 1).collect();
    Ok(RefOut::new(shape, t.values.clone()).view(true))
}

fn unsqueeze(t: &RefTensor, p: &Params) -> Res {
    let nd = t.shape.len();
    let d = dim(p.dims[0], nd + 1)?;
    let mut shape = t.shape.clone();
    shape.insert(d, 1);
    Ok(RefOut::new(shape, t.values.clone()).view(true))
}

/// The result of reshaping `t` to `shape`: a view when the oracle finds strides, else a
/// contiguous copy.
fn reshaped(t: &RefTensor, shape: Vec<usize>) -> RefOut {
    match view_strides(t, &shape) {
        Some(_) => RefOut::new(shape, t.values.clone()).view(true),
        None => {
            let s = contiguous_strides(&shape);
            RefOut::new(shape, t.values.clone()).with_strides(s)
        }
    }
}

fn flatten(t: &RefTensor, p: &Params) -> Res {
    let nd = t.shape.len();
    let (s, e) = (dim(p.dims[0], nd)?, dim(p.dims[1], nd)?);
    if s > e {
        return Err("flatten with start > end must be refused".into());
    }
    if nd == 0 {
        return Ok(reshaped(t, vec![1]));
    }
    let mut shape = t.shape[..s].to_vec();
    shape.push(t.shape[s..=e].iter().product());
    shape.extend_from_slice(&t.shape[e + 1..]);
    Ok(reshaped(t, shape))
}

/// Resolves one `-1` in `sizes` against `n` elements.
fn infer(sizes: &[i64], n: usize) -> Result<Vec<usize>, String> {
    let holes: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] == -1).collect();
    if holes.len() > 1 || sizes.iter().any(|&s| s < -1) {
        return Err(format!("sizes {sizes:?} must be refused"));
    }
    let mut known: usize = 1;
    for &s in sizes.iter().filter(|&&s| s >= 0) {
        known = known
            .checked_mul(s as usize)
            .ok_or("overflowing sizes must be refused")?;
    }
    let mut out: Vec<usize> = sizes.iter().map(|&s| s.max(0) as usize).collect();
    match holes.first() {
        Some(&i) => {
            if known == 0 || !n.is_multiple_of(known) {
                return Err(format!("sizes {sizes:?} don't fit {n} elements"));
            }
            out[i] = n / known;
        }
        None if known != n => return Err(format!("sizes {sizes:?} don't fit {n} elements")),
        None => {}
    }
    Ok(out)
}

fn unflatten(t: &RefTensor, p: &Params) -> Res {
    let nd = t.shape.len();
    let d = dim(p.dims[0], nd)?;
    if nd == 0 {
        return Err("unflatten of a 0-d tensor must be refused".into());
    }
    let inner = infer(&p.sizes, t.shape[d])?;
    let mut shape = t.shape[..d].to_vec();
    shape.extend(inner);
    shape.extend_from_slice(&t.shape[d + 1..]);
    Ok(RefOut::new(shape, t.values.clone()).view(true))
}

fn diagonal(t: &RefTensor, p: &Params) -> Res {
    let nd = t.shape.len();
    if nd < 2 {
        return Err("diagonal needs 2 dims".into());
    }
    let (off, a, b) = (p.ints[0], dim(p.dims[0], nd)?, dim(p.dims[1], nd)?);
    if a == b {
        return Err("diagonal of a dim with itself must be refused".into());
    }
    let (na, nb) = (t.shape[a] as i64, t.shape[b] as i64);
    let len = if off >= 0 {
        na.min(nb - off)
    } else {
        (na + off).min(nb)
    }
    .max(0) as usize;
    let rest: Vec<usize> = (0..nd).filter(|&k| k != a && k != b).collect();
    let mut shape: Vec<usize> = rest.iter().map(|&k| t.shape[k]).collect();
    shape.push(len);
    let v = gather(t, &shape, |i| {
        let mut j = vec![0; nd];
        for (x, &k) in rest.iter().enumerate() {
            j[k] = i[x];
        }
        let k = i[nd - 2];
        j[a] = k + (-off).max(0) as usize;
        j[b] = k + off.max(0) as usize;
        j
    });
    Ok(RefOut::new(shape, v).view(true))
}

/// `as_strided` addresses the storage directly (not the input's view).
fn as_strided(t: &RefTensor, p: &Params) -> Res {
    let shape = p.usizes();
    if shape.len() != p.strides.len() {
        return Err("sizes and strides of different lengths must be refused".into());
    }
    let n = numel(&shape);
    if n > 0 {
        let extent = p.offset
            + shape
                .iter()
                .zip(&p.strides)
                .map(|(&k, &s)| (k - 1) * s)
                .sum::<usize>()
            + 1;
        if extent > t.storage.len() {
            return Err(format!(
                "a view reaching storage index {} of {} must be refused",
                extent - 1,
                t.storage.len()
            ));
        }
    }
    let pos = crate::reference::positions(&shape, &p.strides, p.offset);
    Ok(RefOut::new(shape, pos.iter().map(|&q| t.storage[q]).collect()).view(true))
}

fn view(t: &RefTensor, p: &Params) -> Res {
    let shape = infer(&p.sizes, t.values.len())?;
    match view_strides(t, &shape) {
        Some(_) => Ok(RefOut::new(shape, t.values.clone()).view(true)),
        None => Err(format!(
            "viewing shape {:?} strides {:?} as {shape:?} needs a copy and must be refused",
            t.shape, t.strides
        )),
    }
}

fn reshape(t: &RefTensor, p: &Params) -> Res {
    let shape = infer(&p.sizes, t.values.len())?;
    Ok(reshaped(t, shape))
}

// ----- argument choices per shape (first = the default) ----------------------------------------

fn i(n: usize) -> i64 {
    n as i64
}

fn transpose_params(s: &[usize]) -> Vec<Params> {
    let nd = i(s.len());
    let mut v = vec![p_dims(&[0, -1])];
    if nd >= 2 {
        v.push(p_dims(&[-2, -1]));
    }
    v.push(p_dims(&[0, 0]));
    v.push(p_dims(&[nd.max(1), 0]));
    v
}
fn permute_params(s: &[usize]) -> Vec<Params> {
    let nd = s.len() as i64;
    let mut v = vec![p_dims(&(0..nd).rev().collect::<Vec<_>>())];
    if nd >= 2 {
        v.push(p_dims(&(1..nd).chain([0]).collect::<Vec<_>>()));
        v.push(p_dims(&vec![0; nd as usize]));
    }
    v.push(p_dims(&(0..=nd).collect::<Vec<_>>()));
    v
}
fn slice_params(s: &[usize]) -> Vec<Params> {
    if s.is_empty() {
        return vec![p_di(&[0], &[0, 1, 1])];
    }
    vec![
        p_di(&[0], &[1, i64::MAX, 2]),
        p_di(&[-1], &[-3, i64::MAX, 3]),
        p_di(&[-1], &[1, -1, 1]),
        p_di(&[0], &[2, 1, 1]),
        p_di(&[-1], &[0, 4, 0]),
    ]
}
fn narrow_params(s: &[usize]) -> Vec<Params> {
    let Some(&n) = s.last() else {
        return vec![p_di(&[0], &[0, 1])];
    };
    let n = i(n);
    let mut v = vec![p_di(&[-1], &[0, n])];
    if n >= 1 {
        v.push(p_di(&[-1], &[1, n - 1]));
        v.push(p_di(&[-1], &[-1, 1]));
    }
    v.push(p_di(&[-1], &[0, n + 1]));
    v
}
fn select_params(s: &[usize]) -> Vec<Params> {
    let Some(&n0) = s.first() else {
        return vec![p_di(&[0], &[0])];
    };
    vec![p_di(&[0], &[0]), p_di(&[-1], &[-1]), p_di(&[0], &[i(n0)])]
}
fn expand_params(s: &[usize]) -> Vec<Params> {
    let mut t = vec![2];
    t.extend(s.iter().map(|&n| if n == 1 { 3 } else { -1 }));
    let mut v = vec![
        p_sizes(&t),
        p_sizes(&s.iter().map(|&n| i(n)).collect::<Vec<_>>()),
    ];
    if let Some(k) = s.iter().position(|&n| n > 1) {
        let mut bad: Vec<i64> = s.iter().map(|&n| i(n)).collect();
        bad[k] += 1;
        v.push(p_sizes(&bad));
    }
    if !s.is_empty() {
        v.push(p_sizes(&s[1..].iter().map(|&n| i(n)).collect::<Vec<_>>()));
    }
    v
}
fn broadcast_params(s: &[usize]) -> Vec<Params> {
    let mut t = vec![2];
    t.extend(s.iter().map(|&n| if n == 1 { 4 } else { i(n) }));
    let mut v = vec![p_sizes(&t)];
    if let Some(k) = s.iter().position(|&n| n > 1) {
        let mut bad: Vec<i64> = s.iter().map(|&n| i(n)).collect();
        bad[k] += 1;
        v.push(p_sizes(&bad));
    }
    v
}
fn squeeze_params(s: &[usize]) -> Vec<Params> {
    let nd = i(s.len());
    let mut v: Vec<Params> = (0..nd.max(1)).map(|d| p_dims(&[d])).collect();
    v.push(p_dims(&[-1]));
    v.push(p_dims(&[nd.max(1) + 1]));
    v
}
fn unsqueeze_params(s: &[usize]) -> Vec<Params> {
    let nd = i(s.len());
    vec![
        p_dims(&[0]),
        p_dims(&[nd]),
        p_dims(&[-1]),
        p_dims(&[nd + 2]),
    ]
}
fn flatten_params(s: &[usize]) -> Vec<Params> {
    let nd = i(s.len());
    let mut v = vec![p_dims(&[0, -1])];
    if nd >= 2 {
        v.push(p_dims(&[1, -1]));
        v.push(p_dims(&[0, nd - 2]));
        v.push(p_dims(&[nd - 1, 0]));
    }
    v.push(p_dims(&[nd + 3, nd + 3]));
    v
}
fn unflatten_params(s: &[usize]) -> Vec<Params> {
    let Some(&n) = s.last() else {
        return vec![Params {
            dims: vec![0],
            sizes: vec![1],
            ..Params::default()
        }];
    };
    let p = |sizes: &[i64]| Params {
        dims: vec![-1],
        sizes: sizes.to_vec(),
        ..Params::default()
    };
    let mut v = vec![p(&[i(n), 1]), p(&[-1, 1])];
    if n % 2 == 0 && n > 0 {
        v.push(p(&[2, -1]));
    }
    v.push(p(&[i(n) + 1]));
    v.push(p(&[-1, -1]));
    v
}
fn diagonal_params(s: &[usize]) -> Vec<Params> {
    let big = s.iter().copied().max().unwrap_or(0) as i64 + 5;
    vec![
        p_di(&[0, 1], &[0]),
        p_di(&[0, 1], &[1]),
        p_di(&[-2, -1], &[-1]),
        p_di(&[-1, 0], &[2]),
        p_di(&[0, 1], &[big]),
        p_di(&[1, 1], &[0]),
    ]
}
fn as_strided_params(s: &[usize]) -> Vec<Params> {
    let n = numel(s);
    let p = |sizes: &[i64], strides: &[usize], offset: usize| Params {
        sizes: sizes.to_vec(),
        strides: strides.to_vec(),
        offset,
        ..Params::default()
    };
    vec![
        p(&[2, 2], &[1, 2], 1),
        p(&[i(n)], &[1], 0),
        p(&[3, 2], &[0, 1], 2),
        p(&[2, 3], &[3, 1], n + 1000),
        p(&[0, 4], &[1000, 1], 3),
        p(&[2], &[1, 1], 0),
    ]
}
fn view_params(s: &[usize]) -> Vec<Params> {
    let n = numel(s) as i64;
    let mut v = vec![p_sizes(&[-1])];
    v.push(p_sizes(&s.iter().rev().map(|&k| i(k)).collect::<Vec<_>>()));
    if let Some(&last) = s.last() {
        if last % 2 == 0 && last > 0 {
            let mut t: Vec<i64> = s.iter().map(|&k| i(k)).collect();
            let l = t.pop().unwrap();
            t.extend([2, l / 2]);
            v.push(p_sizes(&t));
        }
    }
    if s.len() >= 2 {
        let mut t: Vec<i64> = vec![i(s[0] * s[1])];
        t.extend(s[2..].iter().map(|&k| i(k)));
        v.push(p_sizes(&t));
    }
    v.push(p_sizes(&[n + 1]));
    v
}

pub fn ops() -> Vec<OpInfo> {
    vec![
        view_op("transpose", transpose_params, transpose)
            .functional(|a, p| a[0].t().transpose(p.dims[0], p.dims[1])),
        view_op("t", |_| vec![Params::default()], t_op).functional(|a, _| a[0].t().t()),
        view_op("permute", permute_params, permute).functional(|a, p| a[0].t().permute(&p.dims)),
        view_op("slice", slice_params, slice).functional(|a, p| {
            a[0].t()
                .slice(p.dims[0], p.ints[0], p.ints[1], p.ints[2].max(0) as usize)
        }),
        view_op("narrow", narrow_params, narrow).functional(|a, p| {
            a[0].t()
                .narrow(p.dims[0], p.ints[0], p.ints[1].max(0) as usize)
        }),
        view_op("select", select_params, select)
            .functional(|a, p| a[0].t().select(p.dims[0], p.ints[0])),
        view_op("expand", expand_params, |t, p| expand_to(t, &p.sizes, true))
            .functional(|a, p| a[0].t().expand(&p.sizes)),
        view_op("broadcast_to", broadcast_params, |t, p| {
            expand_to(t, &p.sizes, false)
        })
        .functional(|a, p| a[0].t().broadcast_to(p.usizes())),
        view_op("squeeze", squeeze_params, squeeze).functional(|a, p| a[0].t().squeeze(p.dims[0])),
        view_op("squeeze_all", |_| vec![Params::default()], squeeze_all)
            .functional(|a, _| a[0].t().squeeze_all()),
        view_op("unsqueeze", unsqueeze_params, unsqueeze)
            .functional(|a, p| a[0].t().unsqueeze(p.dims[0])),
        view_op("flatten", flatten_params, flatten)
            .functional(|a, p| a[0].t().flatten(p.dims[0], p.dims[1])),
        view_op("unflatten", unflatten_params, unflatten)
            .functional(|a, p| a[0].t().unflatten(p.dims[0], &p.sizes)),
        view_op("diagonal", diagonal_params, diagonal)
            .functional(|a, p| a[0].t().diagonal(p.ints[0], p.dims[0], p.dims[1])),
        view_op("as_strided", as_strided_params, as_strided)
            .functional(|a, p| a[0].t().as_strided(&p.usizes(), &p.strides, p.offset)),
        view_op("view", view_params, view).functional(|a, p| a[0].t().view(&p.sizes)),
        view_op("reshape", reshape_params, reshape).functional(|a, p| a[0].t().reshape(&p.sizes)),
    ]
}

fn reshape_params(s: &[usize]) -> Vec<Params> {
    view_params(s)
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Once: every view.
pub fn grad(name: &str) -> super::Grad {
    match name {
        "transpose" | "t" | "permute" | "slice" | "narrow" | "select" | "expand"
        | "broadcast_to" | "squeeze" | "squeeze_all" | "unsqueeze" | "flatten" | "unflatten"
        | "diagonal" | "as_strided" | "view" | "reshape" => super::Grad::Once,
        _ => super::Grad::No,
    }
}
