//! Reference implementations of the index, sort and selection ops on plain row-major `Vec`s:
//! values as f64, indices as i64, shapes as `&[usize]`. No stride types here, so each
//! function can move into the stride-check registry as it is. Written for clarity: plain
//! loops over logical indices, no cleverness.
#![allow(dead_code, clippy::needless_range_loop)]

use std::cmp::Ordering;

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major coordinates of flat position `i`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = i % shape[d];
        i /= shape[d];
    }
    c
}

/// Flat row-major position of coordinates.
pub fn ravel(c: &[usize], shape: &[usize]) -> usize {
    c.iter().zip(shape).fold(0, |acc, (&x, &n)| acc * n + x)
}

fn wrap(i: i64, n: usize) -> usize {
    if i < 0 {
        (i + n as i64) as usize
    } else {
        i as usize
    }
}

/// stride's total order: NaN largest, -0 == 0.
pub fn total_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap(),
    }
}

/// Broadcast `x` of shape `xs` to `to` (row-major result).
pub fn broadcast(x: &[f64], xs: &[usize], to: &[usize]) -> Vec<f64> {
    let lead = to.len() - xs.len();
    (0..numel(to))
        .map(|i| {
            let c = unravel(i, to);
            let cx: Vec<usize> = (0..xs.len())
                .map(|d| if xs[d] == 1 { 0 } else { c[lead + d] })
                .collect();
            x[ravel(&cx, xs)]
        })
        .collect()
}

// ----- gathers ---------------------------------------------------------------------------------

/// `x[(:,)*d, idx]` (idx of any shape; negatives wrap).
pub fn index(
    x: &[f64],
    xs: &[usize],
    d: usize,
    idx: &[i64],
    is: &[usize],
) -> (Vec<f64>, Vec<usize>) {
    let mut os = xs[..d].to_vec();
    os.extend_from_slice(is);
    os.extend_from_slice(&xs[d + 1..]);
    let k = is.len();
    let out = (0..numel(&os))
        .map(|i| {
            let c = unravel(i, &os);
            let j = idx[ravel(&c[d..d + k], is)];
            let mut cx = c[..d].to_vec();
            cx.push(wrap(j, xs[d]));
            cx.extend_from_slice(&c[d + k..]);
            x[ravel(&cx, xs)]
        })
        .collect();
    (out, os)
}

pub fn index_select(x: &[f64], xs: &[usize], d: usize, idx: &[i64]) -> (Vec<f64>, Vec<usize>) {
    index(x, xs, d, idx, &[idx.len()])
}

/// `out[p] = x[p with p[d] = idx[p]]`, out has idx's shape.
pub fn gather(x: &[f64], xs: &[usize], d: usize, idx: &[i64], is: &[usize]) -> Vec<f64> {
    (0..numel(is))
        .map(|i| {
            let mut c = unravel(i, is);
            c[d] = idx[i] as usize;
            x[ravel(&c, xs)]
        })
        .collect()
}

pub fn take(x: &[f64], idx: &[i64]) -> Vec<f64> {
    idx.iter().map(|&i| x[wrap(i, x.len())]).collect()
}

pub fn embedding(w: &[f64], ws: &[usize], idx: &[i64]) -> Vec<f64> {
    let dim = ws[1];
    idx.iter()
        .flat_map(|&i| w[i as usize * dim..(i as usize + 1) * dim].to_vec())
        .collect()
}

// ----- scatters --------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Red {
    Assign,
    Sum,
    Prod,
    Mean,
    Amax,
    Amin,
}

fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}
fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// PyTorch's scatter / scatter_reduce over index positions `is` (src has shape `ss`).
/// `int_dtype`: mean divides with floor.
#[allow(clippy::too_many_arguments)]
pub fn scatter(
    base: &[f64],
    xs: &[usize],
    d: usize,
    idx: &[i64],
    is: &[usize],
    src: &[f64],
    ss: &[usize],
    red: Red,
    include_self: bool,
    int_dtype: bool,
) -> Vec<f64> {
    let mut out = base.to_vec();
    let mut count: Vec<f64> = vec![if include_self { 1.0 } else { 0.0 }; out.len()];
    let mut hit = vec![false; out.len()];
    for i in 0..numel(is) {
        let c = unravel(i, is);
        let s = src[ravel(&c, ss)];
        let mut t = c.clone();
        t[d] = idx[i] as usize;
        let j = ravel(&t, xs);
        if !include_self && !hit[j] {
            out[j] = match red {
                Red::Sum | Red::Mean => 0.0,
                Red::Prod => 1.0,
                Red::Amax => f64::NEG_INFINITY,
                Red::Amin => f64::INFINITY,
                Red::Assign => out[j],
            };
        }
        hit[j] = true;
        count[j] += 1.0;
        out[j] = match red {
            Red::Assign => s,
            Red::Sum | Red::Mean => out[j] + s,
            Red::Prod => out[j] * s,
            Red::Amax => nan_max(out[j], s),
            Red::Amin => nan_min(out[j], s),
        };
    }
    if red == Red::Mean {
        for j in 0..out.len() {
            let n = count[j].max(1.0);
            out[j] = if int_dtype {
                (out[j] / n).floor()
            } else {
                out[j] / n
            };
        }
    }
    out
}

/// index_add / index_copy (`alpha = None`: copy).
pub fn index_add(
    base: &[f64],
    xs: &[usize],
    d: usize,
    idx: &[i64],
    src: &[f64],
    alpha: Option<f64>,
) -> Vec<f64> {
    let mut ss = xs.to_vec();
    ss[d] = idx.len();
    let mut out = base.to_vec();
    for i in 0..numel(&ss) {
        let mut c = unravel(i, &ss);
        c[d] = idx[c[d]] as usize;
        let j = ravel(&c, xs);
        out[j] = match alpha {
            Some(a) => out[j] + a * src[i],
            None => src[i],
        };
    }
    out
}

pub fn index_fill(base: &[f64], xs: &[usize], d: usize, idx: &[i64], v: f64) -> Vec<f64> {
    let mut out = base.to_vec();
    for i in 0..out.len() {
        let c = unravel(i, xs);
        if idx.iter().any(|&k| wrap(k, xs[d]) == c[d]) {
            out[i] = v;
        }
    }
    out
}

// ----- masked ----------------------------------------------------------------------------------

pub fn masked_fill(x: &[f64], mask: &[bool], v: f64) -> Vec<f64> {
    x.iter()
        .zip(mask)
        .map(|(&a, &m)| if m { v } else { a })
        .collect()
}
pub fn masked_select(x: &[f64], mask: &[bool]) -> Vec<f64> {
    x.iter()
        .zip(mask)
        .filter(|(_, &m)| m)
        .map(|(&a, _)| a)
        .collect()
}
pub fn masked_scatter(x: &[f64], mask: &[bool], src: &[f64]) -> Vec<f64> {
    let mut k = 0;
    x.iter()
        .zip(mask)
        .map(|(&a, &m)| {
            if m {
                k += 1;
                src[k - 1]
            } else {
                a
            }
        })
        .collect()
}
pub fn nonzero(x: &[f64], xs: &[usize]) -> Vec<i64> {
    (0..x.len())
        .filter(|&i| x[i] != 0.0)
        .flat_map(|i| unravel(i, xs).into_iter().map(|c| c as i64))
        .collect()
}

// ----- sorting ---------------------------------------------------------------------------------

/// Rows of `x` along `d`: (row values, flat positions).
pub fn rows(xs: &[usize], d: usize) -> Vec<Vec<usize>> {
    let mut outer = xs.to_vec();
    outer[d] = 1;
    (0..numel(&outer))
        .map(|o| {
            let c = unravel(o, &outer);
            (0..xs[d])
                .map(|j| {
                    let mut t = c.clone();
                    t[d] = j;
                    ravel(&t, xs)
                })
                .collect()
        })
        .collect()
}

/// Stable sort along `d`: (values, indices), row-major in `xs`.
pub fn sort(x: &[f64], xs: &[usize], d: usize, descending: bool) -> (Vec<f64>, Vec<i64>) {
    let mut v = vec![0.0; x.len()];
    let mut ix = vec![0; x.len()];
    for r in rows(xs, d) {
        let mut order: Vec<usize> = (0..r.len()).collect();
        order.sort_by(|&a, &b| {
            let o = total_cmp(x[r[a]], x[r[b]]);
            if descending {
                o.reverse()
            } else {
                o
            }
        });
        for (j, &p) in order.iter().enumerate() {
            v[r[j]] = x[r[p]];
            ix[r[j]] = p as i64;
        }
    }
    (v, ix)
}

/// topk = the first k of the stable sort (shape `xs` with `d` resized to k).
pub fn topk(x: &[f64], xs: &[usize], d: usize, k: usize, largest: bool) -> (Vec<f64>, Vec<i64>) {
    let (v, ix) = sort(x, xs, d, largest);
    let mut os = xs.to_vec();
    os[d] = k;
    let mut ov = vec![0.0; numel(&os)];
    let mut oi = vec![0; numel(&os)];
    for i in 0..ov.len() {
        let c = unravel(i, &os);
        let j = ravel(&c, xs);
        ov[i] = v[j];
        oi[i] = ix[j];
    }
    (ov, oi)
}

/// kthvalue (k from 1), keepdim=false.
pub fn kthvalue(x: &[f64], xs: &[usize], d: usize, k: usize) -> (Vec<f64>, Vec<i64>) {
    let (v, ix) = topk(x, xs, d, k, false);
    let mut os = xs.to_vec();
    os[d] = k;
    let mut outer = xs.to_vec();
    outer[d] = 1;
    (0..numel(&outer))
        .map(|o| {
            let mut c = unravel(o, &outer);
            c[d] = k - 1;
            let j = ravel(&c, &os);
            (v[j], ix[j])
        })
        .unzip()
}

/// Lower median along `d` (NaN propagating: first NaN of the row).
pub fn median_dim(x: &[f64], xs: &[usize], d: usize) -> (Vec<f64>, Vec<i64>) {
    let (kv, ki) = kthvalue(x, xs, d, (xs[d] - 1) / 2 + 1);
    let rs = rows(xs, d);
    rs.iter()
        .enumerate()
        .map(|(o, r)| match r.iter().position(|&p| x[p].is_nan()) {
            Some(j) => (f64::NAN, j as i64),
            None => (kv[o], ki[o]),
        })
        .unzip()
}

/// (values, inverse, counts) of torch.unique (sorted; NaNs distinct).
pub fn unique(x: &[f64]) -> (Vec<f64>, Vec<i64>, Vec<i64>) {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| total_cmp(x[a], x[b]));
    let (mut vals, mut counts, mut inv) = (vec![], vec![], vec![0i64; x.len()]);
    for (j, &p) in order.iter().enumerate() {
        // a new value unless equal (==) to the previous one; NaN != NaN
        if j == 0 || x[order[j - 1]] != x[p] {
            vals.push(x[p]);
            counts.push(0i64);
        }
        *counts.last_mut().unwrap() += 1;
        inv[p] = vals.len() as i64 - 1;
    }
    (vals, inv, counts)
}

/// searchsorted of each value of a row against its sorted row.
pub fn searchsorted_row(seq: &[f64], v: f64, right: bool) -> i64 {
    seq.iter()
        .filter(|&&s| {
            let o = total_cmp(s, v);
            if right {
                o != Ordering::Greater
            } else {
                o == Ordering::Less
            }
        })
        .count() as i64
}

pub fn bincount(x: &[i64], w: Option<&[f64]>, minlength: usize) -> Vec<f64> {
    let len = x
        .iter()
        .map(|&v| v as usize + 1)
        .max()
        .unwrap_or(0)
        .max(minlength);
    let mut out = vec![0.0; len];
    for (i, &v) in x.iter().enumerate() {
        out[v as usize] += w.map_or(1.0, |w| w[i]);
    }
    out
}

/// histc with the edges already resolved; arithmetic in f64.
pub fn histc(x: &[f64], bins: usize, lo: f64, hi: f64) -> Vec<f64> {
    let mut out = vec![0.0; bins];
    for &v in x {
        if !(v >= lo && v <= hi) {
            continue;
        }
        let b = (((v - lo) * bins as f64) / (hi - lo)) as usize;
        out[b.min(bins - 1)] += 1.0;
    }
    out
}
