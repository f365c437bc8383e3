//! Joining and splitting: `cat`, `stack` (three operands, each in every layout, mixed dtypes
//! promoting; `_out` into every output layout), `split`/`chunk`/`unbind`/`split_with_sizes`
//! (views: `.first` and `.last` piece),
//! `repeat`, `tile`, `repeat_interleave` (`.tensor`: repeats as an index-dtype tensor),
//! `flip`, `roll`, `tril`/`triu` (diagonal offsets, in place too), `pad` (constant, reflect,
//! replicate, circular), `meshgrid` (one entry per output, views of their input).
//!
//! Ops returning a list have one entry per piece they are checked through (`split.first`,
//! `split.last`, …): the reference gives that piece (a view of the input), and the call
//! errs when the list is shorter than the reference says.

use super::dtypes::ALL;
use super::index::INDEX_DTYPES;
use super::{ArgSpec, DTypeRule, Domain, Family, OpInfo, Params, Sample, SampleArg, SampleCtx};
use crate::host::short;
use crate::reference::{gather, numel, wrap_dim, RefArg, RefCtx, RefOut, RefTensor};
use stride_core::{DType, Error, Indexing, PadMode, Scalar, Tensor};

fn input(ctx: &mut SampleCtx, shape: Vec<usize>) -> SampleArg {
    let v = Domain::any().values(ctx.dtype, numel(&shape), &mut ctx.rng, ctx.tame);
    Sample::tensor(ctx.dtype, shape, v)
}

fn params(dims: Vec<i64>, ints: Vec<i64>, sizes: Vec<i64>) -> Params {
    Params {
        dims,
        ints,
        sizes,
        ..Params::default()
    }
}

fn with(shape: &[usize], d: usize, n: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[d] = n;
    s
}

fn wrap(d: i64, nd: usize) -> Result<usize, String> {
    if nd == 0 {
        return Err(format!("dim {d} of a 0-d tensor must be refused here"));
    }
    wrap_dim(d, nd).ok_or_else(|| format!("dim {d} out of range must be refused"))
}

// ----- cat / stack ----------------------------------------------------------------------------

/// Mixed-dtype cases (`promotion`): operand `i` in its own dtype and, when given, shape.
fn mixed(ctx: &mut SampleCtx) -> Option<Vec<Sample>> {
    let dts = ctx.arg_dtypes.clone()?;
    let shapes = ctx
        .arg_shapes
        .clone()
        .unwrap_or_else(|| vec![ctx.shape.clone(); dts.len()]);
    let args = dts
        .iter()
        .zip(shapes)
        .map(|(&d, sh)| {
            let v = Domain::any().values(d, numel(&sh), &mut ctx.rng, true);
            Sample::tensor(d, sh, v)
        })
        .collect();
    Some(vec![Sample::new(args, params(vec![-1], vec![], vec![]))])
}

fn cat_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    if let Some(m) = mixed(ctx) {
        return m;
    }
    let s = ctx.shape.clone();
    let nd = s.len() as i64;
    let mut out = vec![];
    let mut cases: Vec<(i64, Vec<Vec<usize>>)> = vec![];
    if s.is_empty() {
        cases.push((0, vec![vec![], vec![], vec![]])); // 0-d: refused
    } else {
        let l = s.len() - 1;
        cases.push((-1, vec![s.clone(), with(&s, l, 2), with(&s, l, 0)]));
        if ctx.variants {
            cases.push((0, vec![s.clone(), with(&s, 0, 1), with(&s, 0, 3)]));
            cases.push((0, vec![s.clone(), vec![0], with(&s, 0, 2)])); // legacy empty: skipped
            cases.push((nd, vec![s.clone(), s.clone(), s.clone()]));
            if s.len() >= 2 {
                cases.push((0, vec![s.clone(), with(&s, l, s[l] + 1), s.clone()]));
                // mismatch
            }
        }
    }
    for (d, shapes) in cases {
        let args = shapes.into_iter().map(|sh| input(ctx, sh)).collect();
        out.push(Sample::new(args, params(vec![d], vec![], vec![])));
    }
    out
}

fn ref_cat(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let ts: Vec<&RefTensor> = a.iter().map(|x| x.t()).collect();
    let kept: Vec<&RefTensor> = ts.iter().copied().filter(|t| t.shape != [0]).collect();
    let Some(first) = kept.first() else {
        // only legacy empty tensors: the dim must still be valid for them (1-D)
        wrap(c.params.dims[0], 1)?;
        return Ok(RefOut::new(vec![0], vec![]));
    };
    let nd = first.shape.len();
    let d = wrap(c.params.dims[0], nd)?;
    for t in &kept {
        if t.shape.len() != nd || (0..nd).any(|k| k != d && t.shape[k] != first.shape[k]) {
            return Err("cat of mismatched shapes must be refused".into());
        }
    }
    let total: usize = kept.iter().map(|t| t.shape[d]).sum();
    let os = with(&first.shape, d, total);
    let inner: usize = os[d + 1..].iter().product();
    let outer: usize = os[..d].iter().product();
    let mut v = Vec::with_capacity(numel(&os));
    for o in 0..outer {
        for t in &kept {
            let n = t.shape[d] * inner;
            v.extend_from_slice(&t.values[o * n..(o + 1) * n]);
        }
    }
    let comp = c.compute;
    Ok(RefOut::new(
        os,
        v.into_iter().map(|x| crate::host::store(x, comp)).collect(),
    ))
}

fn stack_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    if let Some(m) = mixed(ctx) {
        return m;
    }
    let s = ctx.shape.clone();
    let nd = s.len() as i64;
    let mut dims = vec![-1];
    if ctx.variants {
        dims.extend([0, nd, nd + 1, -nd - 2]);
    }
    let mut out = vec![];
    for d in dims {
        let args = (0..3).map(|_| input(ctx, s.clone())).collect();
        out.push(Sample::new(args, params(vec![d], vec![], vec![])));
    }
    if ctx.variants && !s.is_empty() {
        let args = vec![
            input(ctx, s.clone()),
            input(ctx, with(&s, 0, s[0] + 1)),
            input(ctx, s.clone()),
        ];
        out.push(Sample::new(args, params(vec![0], vec![], vec![])));
    }
    out
}

fn ref_stack(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let ts: Vec<&RefTensor> = a.iter().map(|x| x.t()).collect();
    let s = &ts[0].shape;
    if ts.iter().any(|t| &t.shape != s) {
        return Err("stack of different shapes must be refused".into());
    }
    let d = wrap_dim(c.params.dims[0], s.len() + 1).ok_or("dim out of range must be refused")?;
    let mut os = s.clone();
    os.insert(d, ts.len());
    let inner: usize = s[d..].iter().product();
    let outer: usize = s[..d].iter().product();
    let mut v = vec![];
    for o in 0..outer {
        for t in &ts {
            v.extend(
                t.values[o * inner..(o + 1) * inner]
                    .iter()
                    .map(|&x| crate::host::store(x, c.compute)),
            );
        }
    }
    Ok(RefOut::new(os, v))
}

// ----- split / chunk / unbind ----------------------------------------------------------------

/// The pieces' (start, len) along `d` of size `n`.
fn pieces(kind: u8, n: usize, arg: usize) -> Result<Vec<(usize, usize)>, String> {
    match kind {
        0 => {
            // split(split_size)
            if arg == 0 {
                return if n == 0 {
                    Ok(vec![(0, 0)])
                } else {
                    Err("split_size 0 must be refused".into())
                };
            }
            if n == 0 {
                return Ok(vec![(0, 0)]);
            }
            Ok((0..n).step_by(arg).map(|s| (s, arg.min(n - s))).collect())
        }
        1 => {
            // chunk(chunks)
            if arg == 0 {
                return Err("chunks 0 must be refused".into());
            }
            let each = n.div_ceil(arg).max(1);
            if n == 0 {
                return Ok(vec![(0, 0)]);
            }
            Ok((0..n).step_by(each).map(|s| (s, each.min(n - s))).collect())
        }
        2 => Ok((0..n).map(|i| (i, 1)).collect()), // unbind
        _ => unreachable!("split_with_sizes pieces come from its sizes"),
    }
}

/// `split_with_sizes`: the pieces of the given sizes, which must sum to `n`.
fn sized_pieces(n: usize, sizes: &[i64]) -> Result<Vec<(usize, usize)>, String> {
    if sizes.iter().any(|&s| s < 0) || sizes.iter().sum::<i64>() != n as i64 {
        return Err(format!("sizes {sizes:?} must sum to {n}"));
    }
    let mut start = 0;
    Ok(sizes
        .iter()
        .map(|&s| {
            let p = (start, s as usize);
            start += s as usize;
            p
        })
        .collect())
}

fn split_sampler(kind: u8) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let s = ctx.shape.clone();
        let nd = s.len() as i64;
        let x = input(ctx, s.clone());
        let mut dims = vec![-1];
        if ctx.variants {
            dims.extend([0, nd.max(1)]);
        }
        if kind == 3 {
            // sizes from the dim's size: two pieces, one piece, with an empty piece; refused:
            // a sum off by one
            let mut out = vec![];
            for d in dims {
                let n = wrap_dim(d, s.len()).map_or(0, |w| s.get(w).copied().unwrap_or(0)) as i64;
                let mut lists = vec![vec![n / 2, n - n / 2]];
                if ctx.variants {
                    lists.extend([vec![n], vec![0, n, 0], vec![n + 1]]);
                }
                for l in lists {
                    out.push(Sample::new(vec![x.clone()], params(vec![d], vec![], l)));
                }
            }
            return out;
        }
        let args: Vec<i64> = match kind {
            2 => vec![0],
            _ if ctx.variants => vec![2, 1, 3, 0],
            _ => vec![2],
        };
        let mut out = vec![];
        for d in dims {
            for &arg in &args {
                out.push(Sample::new(
                    vec![x.clone()],
                    params(vec![d], vec![arg], vec![]),
                ));
            }
        }
        out
    }
}

fn ref_piece(c: &RefCtx, a: &[RefArg], kind: u8, last: bool) -> Result<RefOut, String> {
    let t = a[0].t();
    let d = wrap(c.params.dims[0], t.shape.len())?;
    let n = t.shape[d];
    let ps = if kind == 3 {
        sized_pieces(n, &c.params.sizes)?
    } else {
        pieces(kind, n, c.params.ints[0].max(0) as usize)?
    };
    let Some(&(start, len)) = (if last { ps.last() } else { ps.first() }) else {
        return Err("no pieces: the piece asked for does not exist".into());
    };
    let mut os = with(&t.shape, d, len);
    if kind == 2 {
        os.remove(d);
    }
    let vals = gather(t, &os, |idx| {
        let mut i = idx.to_vec();
        if kind == 2 {
            i.insert(d, start);
        } else {
            i[d] += start;
        }
        i
    });
    Ok(RefOut::new(os, vals).view(true))
}

fn piece(v: stride_core::Result<Vec<Tensor>>, last: bool) -> stride_core::Result<Tensor> {
    let v = v?;
    let p = if last { v.last() } else { v.first() };
    p.cloned().ok_or_else(|| Error::Invalid {
        op: "split",
        msg: "returned no pieces".into(),
    })
}

// ----- repeat / tile / repeat_interleave ---------------------------------------------------------

fn sizes_sampler(_kind: u8) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let s = ctx.shape.clone();
        let x = input(ctx, s.clone());
        let nd = s.len();
        let mut reps: Vec<Vec<i64>> = vec![(0..nd).map(|i| [2, 1, 3][i % 3]).collect()];
        if ctx.variants {
            reps.push(vec![2; nd + 1]);
            reps.push(vec![0; nd]);
            reps.push(vec![3]);
            reps.push(vec![]);
        }
        reps.dedup();
        reps.into_iter()
            .map(|r| Sample::new(vec![x.clone()], params(vec![], vec![], r)))
            .collect()
    }
}

fn ref_repeat(c: &RefCtx, a: &[RefArg], tile: bool) -> Result<RefOut, String> {
    let t = a[0].t();
    let mut reps: Vec<usize> = c.params.sizes.iter().map(|&r| r as usize).collect();
    if reps.len() < t.shape.len() {
        if !tile {
            return Err("repeat needs at least as many repeats as dims".into());
        }
        let mut r = vec![1; t.shape.len() - reps.len()];
        r.extend(reps);
        reps = r;
    }
    let lead = reps.len() - t.shape.len();
    let src: Vec<usize> = std::iter::repeat_n(1, lead)
        .chain(t.shape.iter().copied())
        .collect();
    let os: Vec<usize> = src.iter().zip(&reps).map(|(a, b)| a * b).collect();
    let vals = gather(t, &os, |idx| {
        idx[lead..]
            .iter()
            .zip(&src[lead..])
            .map(|(&i, &n)| i % n)
            .collect()
    });
    Ok(RefOut::new(os, vals))
}

fn interleave_sampler(
    tensor: bool,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let s = ctx.shape.clone();
        let nd = s.len() as i64;
        let x = input(ctx, s.clone());
        let mut dims: Vec<Option<i64>> = vec![Some(-1)];
        if ctx.variants {
            dims.extend([None, Some(0), Some(nd.max(1))]);
        }
        let mut out = vec![];
        for d in dims {
            let pd = d.map(|v| vec![v]).unwrap_or_default();
            if !tensor {
                out.push(Sample::new(vec![x.clone()], params(pd, vec![2], vec![])));
                continue;
            }
            let n = match d {
                None => numel(&s),
                Some(v) => wrap_dim(v, s.len()).map_or(1, |w| s.get(w).copied().unwrap_or(1)),
            };
            let idts = if ctx.variants {
                INDEX_DTYPES.to_vec()
            } else {
                vec![INDEX_DTYPES[ctx.rng.below(3)]]
            };
            for idt in idts {
                let mut rshapes = vec![vec![n]];
                if ctx.variants && d == Some(-1) {
                    rshapes.extend([vec![1], vec![n + 1]]);
                }
                for rs in rshapes {
                    let r: Vec<f64> = (0..numel(&rs)).map(|_| ctx.rng.below(4) as f64).collect();
                    let s2 = Sample::new(
                        vec![x.clone(), Sample::tensor(idt, rs, r)],
                        params(pd.clone(), vec![], vec![]),
                    );
                    out.push(s2.label(format!("{}/{}", short(ctx.dtype), short(idt))));
                }
                if ctx.variants && d == Some(-1) && idt != DType::U32 && n > 0 {
                    let mut r: Vec<f64> = vec![1.0; n];
                    r[0] = -1.0;
                    let s2 = Sample::new(
                        vec![x.clone(), Sample::tensor(idt, vec![n], r)],
                        params(pd.clone(), vec![], vec![]),
                    );
                    out.push(s2.label(format!("{}/{}", short(ctx.dtype), short(idt))));
                }
            }
        }
        out
    }
}

fn ref_interleave(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let t0 = a[0].t();
    let flat;
    let (t, d) = match c.params.dims.first() {
        None => {
            flat = RefTensor {
                shape: vec![t0.values.len()],
                ..t0.clone()
            };
            (&flat, 0)
        }
        Some(&dim) => {
            if t0.shape.is_empty() {
                wrap_dim(dim, 0).ok_or("dim out of range must be refused")?;
                flat = RefTensor {
                    shape: vec![1],
                    ..t0.clone()
                };
                (&flat, 0)
            } else {
                (t0, wrap(dim, t0.shape.len())?)
            }
        }
    };
    let n = t.shape[d];
    let reps: Vec<usize> = match a.get(1) {
        None => vec![c.params.ints[0] as usize; n],
        Some(r) => {
            let r = r.t();
            if r.shape.len() > 1 {
                return Err("repeats must be 0-d or 1-d".into());
            }
            if r.values.iter().any(|&v| v < 0.0) {
                return Err("negative repeats must be refused".into());
            }
            match r.values.len() {
                1 => vec![r.values[0] as usize; n],
                m if m == n => r.values.iter().map(|&v| v as usize).collect(),
                _ => return Err("repeats must have one element per slice".into()),
            }
        }
    };
    let src: Vec<usize> = reps
        .iter()
        .enumerate()
        .flat_map(|(j, &k)| std::iter::repeat_n(j, k))
        .collect();
    let mut os = t.shape.clone();
    os[d] = src.len();
    let vals = gather(t, &os, |idx| {
        let mut i = idx.to_vec();
        i[d] = src[i[d]];
        i
    });
    let os = if c.params.dims.is_empty() || !t0.shape.is_empty() {
        os
    } else {
        os.clone()
    };
    Ok(RefOut::new(os, vals))
}

// ----- flip / roll / tril / triu / pad -------------------------------------------------------------

fn dims_sampler(kind: u8) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let s = ctx.shape.clone();
        let nd = s.len() as i64;
        let x = input(ctx, s.clone());
        let mut ps: Vec<Params> = match kind {
            0 => vec![params(vec![-1], vec![], vec![])],  // flip
            1 => vec![params(vec![-1], vec![2], vec![])], // roll
            _ => vec![params(vec![], vec![0], vec![])],   // tril/triu diagonal
        };
        if ctx.variants {
            match kind {
                0 => ps.extend([
                    params(vec![0, -1], vec![], vec![]),
                    params(vec![], vec![], vec![]),
                    params(vec![0, 0], vec![], vec![]),
                    params(vec![nd.max(1)], vec![], vec![]),
                ]),
                1 => ps.extend([
                    params(vec![0, -1], vec![-1, 5], vec![]),
                    params(vec![], vec![3], vec![]),
                    params(vec![0, 0], vec![1, 1], vec![]),
                    params(vec![0], vec![1, 2], vec![]),
                    params(vec![nd.max(1)], vec![1], vec![]),
                ]),
                _ => ps.extend([1, -1, 2, -3, 100].map(|k| params(vec![], vec![k], vec![]))),
            }
        }
        ps.into_iter()
            .map(|p| Sample::new(vec![x.clone()], p))
            .collect()
    }
}

fn wrap_all(dims: &[i64], nd: usize) -> Result<Vec<usize>, String> {
    dims.iter()
        .map(|&d| wrap_dim(d, nd).ok_or_else(|| format!("dim {d} out of range must be refused")))
        .collect()
}

fn ref_flip(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let t = a[0].t();
    let ds = wrap_all(&c.params.dims, t.shape.len())?;
    let mut seen = vec![false; t.shape.len().max(1)];
    for &d in &ds {
        if seen[d] {
            return Err("repeated dims must be refused".into());
        }
        seen[d] = true;
    }
    let vals = gather(t, &t.shape, |idx| {
        let mut i = idx.to_vec();
        for &d in &ds {
            if d < i.len() {
                i[d] = t.shape[d] - 1 - i[d];
            }
        }
        i
    });
    Ok(RefOut::new(t.shape.clone(), vals))
}

fn ref_roll(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let t = a[0].t();
    let (shifts, dims) = (&c.params.ints, &c.params.dims);
    if dims.is_empty() {
        if shifts.len() != 1 {
            return Err("roll without dims takes one shift".into());
        }
        let n = t.values.len() as i64;
        let vals = (0..n)
            .map(|i| {
                if n == 0 {
                    0.0
                } else {
                    t.values[(i - shifts[0]).rem_euclid(n) as usize]
                }
            })
            .collect();
        return Ok(RefOut::new(t.shape.clone(), vals));
    }
    if shifts.len() != dims.len() {
        return Err("shifts and dims must have the same length".into());
    }
    let ds = wrap_all(dims, t.shape.len())?;
    let sh = if t.shape.is_empty() {
        vec![1]
    } else {
        t.shape.clone()
    };
    let vals = gather(t, &t.shape, |idx| {
        let mut i = idx.to_vec();
        for (&d, &s) in ds.iter().zip(shifts) {
            if d < i.len() {
                i[d] = (i[d] as i64 - s).rem_euclid(sh[d] as i64) as usize;
            }
        }
        i
    });
    Ok(RefOut::new(t.shape.clone(), vals))
}

fn ref_tri(c: &RefCtx, a: &[RefArg], lower: bool) -> Result<RefOut, String> {
    let t = a[0].t();
    let nd = t.shape.len();
    if nd < 2 {
        return Err("tril/triu need at least 2 dims".into());
    }
    let k = c.params.ints[0];
    let mut idx = vec![0; nd];
    let vals = t
        .values
        .iter()
        .enumerate()
        .map(|(lin, &v)| {
            crate::reference::unravel(lin, &t.shape, &mut idx);
            let jmi = idx[nd - 1] as i64 - idx[nd - 2] as i64;
            let keep = if lower { jmi <= k } else { jmi >= k };
            if keep {
                v
            } else {
                0.0
            }
        })
        .collect();
    Ok(RefOut::new(t.shape.clone(), vals))
}

const PAD_MODES: [&str; 4] = ["constant", "reflect", "replicate", "circular"];

fn pad_mode(p: &Params) -> PadMode {
    match p.ints[0] {
        0 => PadMode::Constant(p.scalars[0]),
        1 => PadMode::Reflect,
        2 => PadMode::Replicate,
        _ => PadMode::Circular,
    }
}

fn pad_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let s = ctx.shape.clone();
    let x = input(ctx, s.clone());
    let last = s.last().copied().unwrap_or(0) as i64;
    let mut pads: Vec<Vec<i64>> = vec![vec![1, 2]];
    if ctx.variants {
        pads.extend([
            vec![0, 0],
            vec![2, 1, 1, 0],
            vec![last, 0],
            vec![-1, 1],
            vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        ]);
    }
    let modes: Vec<i64> = if ctx.variants {
        vec![0, 1, 2, 3]
    } else {
        vec![ctx.rng.below(4) as i64]
    };
    let fill = if ctx.dtype.is_float() {
        Scalar::Float(1.5)
    } else if ctx.dtype == DType::Bool {
        Scalar::Bool(true)
    } else {
        Scalar::Int(7)
    };
    let mut out = vec![];
    for p in &pads {
        for &m in &modes {
            let mut pr = params(vec![], vec![m], p.clone());
            pr.scalars = vec![fill];
            out.push(Sample::new(vec![x.clone()], pr).label(format!(
                "{}/{}",
                short(ctx.dtype),
                PAD_MODES[m as usize]
            )));
        }
    }
    out
}

fn ref_pad(c: &RefCtx, a: &[RefArg]) -> Result<RefOut, String> {
    let t = a[0].t();
    let pad = &c.params.sizes;
    let mode = c.params.ints[0];
    let nd = t.shape.len();
    if !pad.len().is_multiple_of(2) || pad.len() / 2 > nd {
        return Err("pad must hold (left, right) pairs for at most every dim".into());
    }
    let mut lo = vec![0i64; nd];
    let mut hi = vec![0i64; nd];
    for k in 0..pad.len() / 2 {
        lo[nd - 1 - k] = pad[2 * k];
        hi[nd - 1 - k] = pad[2 * k + 1];
    }
    let mut os = vec![0usize; nd];
    for d in 0..nd {
        let n = t.shape[d] as i64;
        let (l, h) = (lo[d], hi[d]);
        if mode != 0 {
            if l < 0 || h < 0 {
                return Err("negative pads only in constant mode".into());
            }
            let bad = match mode {
                1 => (l > 0 || h > 0) && (l >= n || h >= n),
                2 => (l > 0 || h > 0) && n == 0,
                _ => l > n || h > n,
            };
            if bad {
                return Err(format!(
                    "pad ({l}, {h}) too large for dim of size {n} in mode {}",
                    PAD_MODES[mode as usize]
                ));
            }
        }
        let m = n + l + h;
        if m < 0 {
            return Err("pads crop below zero".into());
        }
        os[d] = m as usize;
    }
    let fill = crate::reference::scalar_value(c.params.scalars[0], t.dtype);
    let mut idx = vec![0; nd];
    let vals = (0..numel(&os))
        .map(|lin| {
            crate::reference::unravel(lin, &os, &mut idx);
            let mut src = vec![0usize; nd];
            for d in 0..nd {
                let n = t.shape[d] as i64;
                let mut i = idx[d] as i64 - lo[d];
                if i < 0 || i >= n {
                    match mode {
                        0 => return fill,
                        1 => {
                            // reflect without repeating the edge
                            let p = 2 * (n - 1).max(1);
                            i = i.rem_euclid(p);
                            if i >= n {
                                i = p - i;
                            }
                        }
                        2 => i = i.clamp(0, n - 1),
                        _ => i = i.rem_euclid(n),
                    }
                }
                src[d] = i as usize;
            }
            t.values[crate::reference::ravel(&src, &t.shape)]
        })
        .collect();
    Ok(RefOut::new(os, vals))
}

// ----- meshgrid ----------------------------------------------------------------------------------

fn meshgrid_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let s = &ctx.shape;
    let a = s.first().copied().unwrap_or(1);
    let b = s.last().copied().unwrap_or(3);
    let mut sets = vec![(vec![vec![a], vec![b], vec![2]], 0)];
    if ctx.variants {
        sets.extend([
            (vec![vec![a], vec![b], vec![2]], 1),
            (vec![vec![], vec![b], vec![a]], 0),
            (vec![vec![a, 2], vec![b], vec![2]], 0),
        ]);
    }
    sets.into_iter()
        .map(|(shapes, xy)| {
            let args = shapes.into_iter().map(|sh| input(ctx, sh)).collect();
            Sample::new(args, params(vec![], vec![xy], vec![]))
        })
        .collect()
}

fn ref_meshgrid(c: &RefCtx, a: &[RefArg], k: usize) -> Result<RefOut, String> {
    let ts: Vec<&RefTensor> = a.iter().map(|x| x.t()).collect();
    if ts.iter().any(|t| t.shape.len() > 1) {
        return Err("meshgrid takes 0-d or 1-d tensors".into());
    }
    let mut os: Vec<usize> = ts.iter().map(|t| t.values.len()).collect();
    let xy = c.params.ints[0] != 0;
    let mut axis: Vec<usize> = (0..ts.len()).collect();
    if xy {
        os.swap(0, 1);
        axis.swap(0, 1);
    }
    // output k varies along the output dim that holds input k
    let dim = axis.iter().position(|&i| i == k).unwrap();
    let t = ts[k];
    let mut idx = vec![0; os.len()];
    let vals = (0..numel(&os))
        .map(|lin| {
            crate::reference::unravel(lin, &os, &mut idx);
            t.values[idx[dim]]
        })
        .collect();
    Ok(RefOut::new(os, vals).view_of(k))
}

fn indexing(p: &Params) -> Indexing {
    if p.ints[0] != 0 {
        Indexing::Xy
    } else {
        Indexing::Ij
    }
}

fn three(a: &[super::Arg]) -> [&Tensor; 3] {
    [a[0].t(), a[1].t(), a[2].t()]
}

fn op(name: &'static str, n: usize) -> OpInfo {
    let names = ["self", "other", "third"];
    OpInfo::new(name, Family::Join)
        .args(
            (0..n)
                .map(|i| ArgSpec::tensor(names[i], Domain::any()))
                .collect(),
        )
        .dtypes(ALL)
}

fn usz(p: &Params) -> Vec<usize> {
    p.sizes.iter().map(|&s| s.max(0) as usize).collect()
}

pub fn ops() -> Vec<OpInfo> {
    let dim = |p: &Params| p.dims[0];
    let mut v = vec![
        op("cat", 3)
            .promotion(true)
            .sampler(cat_sampler)
            .reference(ref_cat)
            .functional(move |a, p| Tensor::cat(&three(a), dim(p)))
            .out(move |a, p, o| Tensor::cat_out(&three(a), dim(p), o)),
        op("stack", 3)
            .promotion(true)
            .sampler(stack_sampler)
            .reference(ref_stack)
            .functional(move |a, p| Tensor::stack(&three(a), dim(p)))
            .out(move |a, p, o| Tensor::stack_out(&three(a), dim(p), o)),
    ];
    for kind in [0u8, 1, 2, 3] {
        for last in [false, true] {
            let name: &'static str = match (kind, last) {
                (0, false) => "split.first",
                (0, true) => "split.last",
                (1, false) => "chunk.first",
                (1, true) => "chunk.last",
                (2, false) => "unbind.first",
                (2, true) => "unbind.last",
                (_, false) => "split_with_sizes.first",
                (_, true) => "split_with_sizes.last",
            };
            v.push(
                op(name, 1)
                    .sampler(split_sampler(kind))
                    .reference(move |c, a| ref_piece(c, a, kind, last))
                    .functional(move |a, p| {
                        let x = a[0].t();
                        let n = p.ints.first().copied().unwrap_or(0).max(0) as usize;
                        piece(
                            match kind {
                                0 => x.split(n, dim(p)),
                                1 => x.chunk(n, dim(p)),
                                2 => x.unbind(dim(p)),
                                _ => x.split_with_sizes(&usz(p), dim(p)),
                            },
                            last,
                        )
                    }),
            );
        }
    }
    v.extend([
        op("repeat", 1)
            .sampler(sizes_sampler(0))
            .reference(|c, a| ref_repeat(c, a, false))
            .functional(move |a, p| a[0].t().repeat(&usz(p))),
        op("tile", 1)
            .sampler(sizes_sampler(1))
            .reference(|c, a| ref_repeat(c, a, true))
            .functional(move |a, p| a[0].t().tile(&usz(p))),
        op("repeat_interleave", 1)
            .sampler(interleave_sampler(false))
            .reference(ref_interleave)
            .functional(|a, p| {
                a[0].t()
                    .repeat_interleave(p.ints[0] as usize, p.dims.first().copied())
            }),
        OpInfo::new("repeat_interleave.tensor", Family::Join)
            .args(vec![
                ArgSpec::tensor("self", Domain::any()),
                ArgSpec::fixed("repeats", DType::I64, Domain::any()),
            ])
            .dtypes(ALL)
            .sampler(interleave_sampler(true))
            .reference(ref_interleave)
            .functional(|a, p| {
                a[0].t()
                    .repeat_interleave_tensor(a[1].t(), p.dims.first().copied())
            }),
        op("flip", 1)
            .sampler(dims_sampler(0))
            .reference(ref_flip)
            .functional(|a, p| a[0].t().flip(&p.dims)),
        op("roll", 1)
            .sampler(dims_sampler(1))
            .reference(ref_roll)
            .functional(|a, p| a[0].t().roll(&p.ints, &p.dims)),
        op("tril", 1)
            .sampler(dims_sampler(2))
            .reference(|c, a| ref_tri(c, a, true))
            .functional(|a, p| a[0].t().tril(p.ints[0]))
            .inplace(|a, p| a[0].t().tril_(p.ints[0])),
        op("triu", 1)
            .sampler(dims_sampler(2))
            .reference(|c, a| ref_tri(c, a, false))
            .functional(|a, p| a[0].t().triu(p.ints[0]))
            .inplace(|a, p| a[0].t().triu_(p.ints[0])),
        op("pad", 1)
            .sampler(pad_sampler)
            .reference(ref_pad)
            .functional(|a, p| a[0].t().pad(&p.sizes, pad_mode(p))),
    ]);
    for (name, k) in [("meshgrid.0", 0usize), ("meshgrid.1", 1), ("meshgrid.2", 2)] {
        v.push(
            op(name, 3)
                .sampler(meshgrid_sampler)
                .reference(move |c, a| ref_meshgrid(c, a, k))
                .functional(move |a, p| {
                    let outs = Tensor::meshgrid(&three(a), indexing(p))?;
                    outs.get(k).cloned().ok_or_else(|| Error::Invalid {
                        op: "meshgrid",
                        msg: "too few outputs".into(),
                    })
                }),
        );
    }
    let _ = DTypeRule::Same;
    v
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Twice: `cat`; Once: the other joins, splits and rearrangements.
pub fn grad(name: &str) -> super::Grad {
    match name {
        "cat" => super::Grad::Twice,
        "stack"
        | "split.first"
        | "split.last"
        | "chunk.first"
        | "chunk.last"
        | "unbind.first"
        | "unbind.last"
        | "split_with_sizes.first"
        | "split_with_sizes.last"
        | "repeat"
        | "tile"
        | "repeat_interleave"
        | "repeat_interleave.tensor"
        | "flip"
        | "roll"
        | "tril"
        | "triu"
        | "pad"
        | "meshgrid.0"
        | "meshgrid.1"
        | "meshgrid.2" => super::Grad::Once,
        _ => super::Grad::No,
    }
}
