//! Reference implementations of the index ops on plain row-major `Vec`s (values as f64,
//! indices as i64), still used by `tests/index.rs`. The sort family's moved to the stride-check
//! registry's references (`registry_ref`); these are to follow (issue #23, item 6).
#![allow(dead_code, clippy::needless_range_loop)]

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
