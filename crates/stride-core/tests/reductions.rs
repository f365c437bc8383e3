//! Reductions, cumulative ops and softmax against an independent f64 reference written with
//! plain loops over logical indices — over layouts (contiguous, permuted, stepped, offset,
//! expanded, size-0 and size-1 dims), dtypes (with per-dtype tolerances) and dim lists;
//! `_out` forms through transposed/strided outputs guarded against stray writes; every
//! error path with the operands unchanged; and the semantic corner cases PyTorch defines
//! (NaN, ties, empty reductions, `correction ≥ n`, infinities in softmax).

// The reference is written as plain loops over logical indices, on purpose.
#![allow(clippy::needless_range_loop)]

use stride_core::{DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

// ---------------------------------------------------------------------------------------------
// index helpers (the reference's own, independent of the crate)

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}
fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}
fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1].max(1);
    }
    st
}

/// Deterministic pseudo-random numbers in [0, 1).
fn rng(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Values suited to `dt`: floats in [-2, 2) on a grid of 1/64 (so ties happen), signed
/// integers in [-4, 4], unsigned in [0, 6], bools.
fn gen(dt: DType, n: usize, seed: u64) -> Vec<f64> {
    let mut r = rng(seed);
    (0..n)
        .map(|_| {
            let u = r();
            match dt {
                DType::Bool => (u < 0.6) as u8 as f64,
                DType::U8 | DType::U32 => (u * 7.0).floor(),
                d if d.is_float() => (u * 256.0).floor() / 64.0 - 2.0,
                _ => (u * 9.0).floor() - 4.0,
            }
        })
        .collect()
}

/// The values `dt` actually holds for `v` (rounded by the crate's cast, on a contiguous
/// tensor).
fn stored(v: &[f64], dt: DType) -> Vec<f64> {
    Tensor::from_vec(v.to_vec(), [v.len()])
        .unwrap()
        .to_dtype(dt)
        .unwrap()
        .to_f64_vec()
        .unwrap()
}

/// A tensor holding `data` (row-major logical values) in a contiguous buffer of `dt`.
fn contiguous(data: &[f64], shape: &[usize], dt: DType) -> Tensor {
    Tensor::from_vec(data.to_vec(), shape.to_vec())
        .unwrap()
        .to_dtype(dt)
        .unwrap()
}

/// The same logical values (`data`, already representable in `dt`) in several layouts.
fn layouts(data: &[f64], shape: &[usize], dt: DType) -> Vec<(String, Tensor)> {
    let nd = shape.len();
    let n = numel(shape);
    let junk = if dt == DType::Bool { 1.0 } else { 3.0 };
    let mut out = vec![("contiguous".to_string(), contiguous(data, shape, dt))];
    // permuted: t = base.permute(p) with t's logical values = data
    let perms: Vec<Vec<usize>> = match nd {
        2 => vec![vec![1, 0]],
        3 => vec![vec![2, 0, 1], vec![1, 2, 0]],
        4 => vec![vec![3, 1, 0, 2]],
        _ => vec![],
    };
    for p in perms {
        let mut bshape = vec![0; nd];
        for k in 0..nd {
            bshape[p[k]] = shape[k];
        }
        let mut bdata = vec![0.0; n];
        for i in 0..n {
            let ii = unravel(i, shape);
            let mut j = vec![0; nd];
            for k in 0..nd {
                j[p[k]] = ii[k];
            }
            bdata[ravel(&j, &bshape)] = data[i];
        }
        let pi: Vec<i64> = p.iter().map(|&x| x as i64).collect();
        let t = contiguous(&bdata, &bshape, dt).permute(&pi).unwrap();
        assert_eq!(t.shape(), shape);
        out.push((format!("permuted{p:?}"), t));
    }
    if nd >= 1 {
        // stepped: x[..., ::2] of a buffer twice as wide in the last dim
        let d = nd - 1;
        let mut bshape = shape.to_vec();
        bshape[d] = 2 * shape[d];
        let mut bdata = vec![junk; numel(&bshape)];
        for i in 0..n {
            let mut j = unravel(i, shape);
            j[d] *= 2;
            bdata[ravel(&j, &bshape)] = data[i];
        }
        let t = contiguous(&bdata, &bshape, dt)
            .slice(d as i64, 0, i64::MAX, 2)
            .unwrap();
        assert_eq!(t.shape(), shape);
        out.push(("stepped[::2]".into(), t));
    }
    // offset view into a bigger buffer
    let mut bdata = vec![junk; n + 12];
    bdata[5..5 + n].copy_from_slice(data);
    let t = contiguous(&bdata, &[n + 12], dt)
        .as_strided(shape, &row_major(shape), 5)
        .unwrap();
    out.push(("offset 5".into(), t));
    out
}

/// A tensor expanded (stride 0) along `d`, and its logical values.
fn expanded(
    shape: &[usize],
    d: usize,
    dt: DType,
    seed: u64,
    map: &dyn Fn(f64) -> f64,
) -> (Vec<f64>, Tensor) {
    let mut small = shape.to_vec();
    small[d] = 1;
    let sdata = stored(
        &gen(dt, numel(&small), seed)
            .into_iter()
            .map(map)
            .collect::<Vec<_>>(),
        dt,
    );
    let sizes: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
    let t = contiguous(&sdata, &small, dt).expand(&sizes).unwrap();
    let data = (0..numel(shape))
        .map(|i| {
            let mut ii = unravel(i, shape);
            ii[d] = 0;
            sdata[ravel(&ii, &small)]
        })
        .collect();
    (data, t)
}

/// Every (name, logical values, tensor) input of `shape` in `dt` the matrix runs over.
fn inputs(
    shape: &[usize],
    dt: DType,
    seed: u64,
    map: &dyn Fn(f64) -> f64,
) -> Vec<(String, Vec<f64>, Tensor)> {
    let data = stored(
        &gen(dt, numel(shape), seed)
            .into_iter()
            .map(map)
            .collect::<Vec<_>>(),
        dt,
    );
    let mut v: Vec<(String, Vec<f64>, Tensor)> = layouts(&data, shape, dt)
        .into_iter()
        .map(|(name, t)| (name, data.clone(), t))
        .collect();
    if let Some(d) = (0..shape.len()).find(|&d| shape[d] > 1) {
        let (data, t) = expanded(shape, d, dt, seed + 1, map);
        v.push((format!("expanded dim {d}"), data, t));
    }
    v
}

// ---------------------------------------------------------------------------------------------
// the reference

/// `dims` as PyTorch resolves them: negative wrap, empty means all, sorted.
fn resolve(dims: &[i64], nd: usize) -> Vec<usize> {
    if nd == 0 {
        return vec![];
    }
    let mut r: Vec<usize> = if dims.is_empty() {
        (0..nd).collect()
    } else {
        dims.iter()
            .map(|&d| {
                if d < 0 {
                    (d + nd as i64) as usize
                } else {
                    d as usize
                }
            })
            .collect()
    };
    r.sort();
    r
}

fn out_shape(shape: &[usize], red: &[usize], keepdim: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|d| {
            if red.contains(&d) {
                keepdim.then_some(1)
            } else {
                Some(shape[d])
            }
        })
        .collect()
}

/// For each output element (row-major), its reduced values in row-major order over `red`.
fn groups(data: &[f64], shape: &[usize], red: &[usize]) -> Vec<Vec<f64>> {
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !red.contains(d)).collect();
    let kshape: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let rshape: Vec<usize> = red.iter().map(|&d| shape[d]).collect();
    (0..numel(&kshape))
        .map(|o| {
            let oi = unravel(o, &kshape);
            (0..numel(&rshape))
                .map(|r| {
                    let ri = unravel(r, &rshape);
                    let mut idx = vec![0; shape.len()];
                    for (k, &d) in kept.iter().enumerate() {
                        idx[d] = oi[k];
                    }
                    for (k, &d) in red.iter().enumerate() {
                        idx[d] = ri[k];
                    }
                    data[ravel(&idx, shape)]
                })
                .collect()
        })
        .collect()
}

/// The flat indices of each line along `dim` (0-d: one line of one element).
fn lines(shape: &[usize], dim: usize) -> Vec<Vec<usize>> {
    if shape.is_empty() {
        return vec![vec![0]];
    }
    let mut other = shape.to_vec();
    other[dim] = 1;
    (0..numel(&other))
        .map(|o| {
            let base = unravel(o, &other);
            (0..shape[dim])
                .map(|t| {
                    let mut i = base.clone();
                    i[dim] = t;
                    ravel(&i, shape)
                })
                .collect()
        })
        .collect()
}

fn r_max(g: &[f64]) -> f64 {
    g.iter().fold(f64::NEG_INFINITY, |a, &x| {
        if a.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            a.max(x)
        }
    })
}
fn r_min(g: &[f64]) -> f64 {
    g.iter().fold(f64::INFINITY, |a, &x| {
        if a.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            a.min(x)
        }
    })
}
/// Index of the first maximum (a NaN beats everything; the first NaN wins).
fn r_argmax(g: &[f64], max: bool) -> f64 {
    let mut best = 0;
    for (i, &x) in g.iter().enumerate() {
        let b = g[best];
        if b.is_nan() {
            break;
        }
        if x.is_nan() || (max && x > b) || (!max && x < b) {
            best = i;
        }
    }
    best as f64
}
fn r_var(g: &[f64], correction: f64) -> f64 {
    let n = g.len() as f64;
    let m = g.iter().sum::<f64>() / n;
    g.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - correction).max(0.0)
}
fn r_norm(g: &[f64], p: f64) -> f64 {
    if p == f64::INFINITY {
        r_max(&g.iter().map(|x| x.abs()).collect::<Vec<_>>())
    } else if p == f64::NEG_INFINITY {
        r_min(&g.iter().map(|x| x.abs()).collect::<Vec<_>>())
    } else if p == 0.0 {
        g.iter().filter(|&&x| x != 0.0).count() as f64
    } else {
        g.iter().map(|x| x.abs().powf(p)).sum::<f64>().powf(1.0 / p)
    }
}
fn r_logsumexp(g: &[f64]) -> f64 {
    let m = r_max(g);
    let m = if m.is_infinite() { 0.0 } else { m };
    g.iter().map(|x| (x - m).exp()).sum::<f64>().ln() + m
}

// ---------------------------------------------------------------------------------------------
// comparison

/// Relative tolerance of a result stored in `dt` (a few roundings of its precision).
fn tol(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

/// `got` matches `want` within `tol · max(|want|, scale)`; NaN must match NaN and infinities
/// must match exactly.
fn check(ctx: &str, got: &[f64], want: &[f64], scale: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{ctx}: length");
    for i in 0..want.len() {
        let (g, w) = (got[i], want[i]);
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() || tol == 0.0 {
            g == w
        } else {
            (g - w).abs() <= tol * w.abs().max(scale[i]).max(1e-300)
        };
        assert!(ok, "{ctx}: element {i}: got {g}, want {w} (scale {}, tol {tol})\n got {got:?}\nwant {want:?}", scale[i]);
    }
}

/// One reduction of the matrix: how to call it, its dtype rule, and its reference.
struct Op {
    name: &'static str,
    /// `None`: the op refuses this input dtype.
    dtype: fn(DType) -> Option<DType>,
    call: fn(&Tensor, &[i64], bool) -> Result<Tensor, Error>,
    reference: fn(&[f64]) -> f64,
    /// The magnitude errors are measured against (sums: Σ|x|).
    scale: fn(&[f64]) -> f64,
    /// Errors on an empty reduction.
    needs_nonempty: bool,
    /// Has a keepdim flag.
    keepdim: bool,
    /// Maps generated values (products want values near 1).
    map: fn(f64) -> f64,
}

fn sum_abs(g: &[f64]) -> f64 {
    g.iter().map(|x| x.abs()).sum()
}
fn mean_sq(g: &[f64]) -> f64 {
    g.iter().map(|x| x * x).sum::<f64>() / g.len().max(1) as f64
}
fn zero(_: &[f64]) -> f64 {
    0.0
}
fn float_keep(d: DType) -> Option<DType> {
    d.is_float().then_some(d)
}
fn int_to_i64(d: DType) -> Option<DType> {
    Some(if d.is_float() { d } else { DType::I64 })
}
fn ident(x: f64) -> f64 {
    x
}

fn ops() -> Vec<Op> {
    vec![
        Op {
            name: "sum_dims",
            dtype: int_to_i64,
            call: |t, d, k| t.sum_dims(d, k),
            reference: |g| g.iter().sum(),
            scale: sum_abs,
            needs_nonempty: false,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "mean_dims",
            dtype: float_keep,
            call: |t, d, k| t.mean_dims(d, k),
            reference: |g| g.iter().sum::<f64>() / g.len() as f64,
            scale: |g| sum_abs(g) / g.len() as f64,
            needs_nonempty: false,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "prod_dims",
            dtype: int_to_i64,
            call: |t, d, k| t.prod_dims(d, k),
            // all-integer groups (integer dtypes): exact wrapping i64 products
            reference: |g| {
                if g.iter().all(|x| x.fract() == 0.0) {
                    g.iter().fold(1i64, |a, &x| a.wrapping_mul(x as i64)) as f64
                } else {
                    g.iter().product()
                }
            },
            scale: |g| g.iter().map(|x| x.abs()).product(),
            needs_nonempty: false,
            keepdim: true,
            // floats near 1, so products of 60 stay in f16's range; integers unchanged
            map: |x| if x.fract() == 0.0 { x } else { 1.0 + x / 16.0 },
        },
        Op {
            name: "amax",
            dtype: |d| Some(d),
            call: |t, d, k| t.amax(d, k),
            reference: r_max,
            scale: zero,
            needs_nonempty: true,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "amin",
            dtype: |d| Some(d),
            call: |t, d, k| t.amin(d, k),
            reference: r_min,
            scale: zero,
            needs_nonempty: true,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "all_dims",
            dtype: |_| Some(DType::Bool),
            call: |t, d, k| t.all_dims(d, k),
            reference: |g| g.iter().all(|&x| x != 0.0) as u8 as f64,
            scale: zero,
            needs_nonempty: false,
            keepdim: true,
            map: |x| if x == 0.0 { 1.0 } else { x }, // mostly non-zero, so `all` is sometimes true
        },
        Op {
            name: "any_dims",
            dtype: |_| Some(DType::Bool),
            call: |t, d, k| t.any_dims(d, k),
            reference: |g| g.iter().any(|&x| x != 0.0) as u8 as f64,
            scale: zero,
            needs_nonempty: false,
            keepdim: true,
            map: |x| if x.abs() < 1.5 { 0.0 } else { x }, // mostly zero, so `any` is sometimes false
        },
        Op {
            name: "count_nonzero",
            dtype: |_| Some(DType::I64),
            call: |t, d, _| t.count_nonzero(d),
            reference: |g| g.iter().filter(|&&x| x != 0.0).count() as f64,
            scale: zero,
            needs_nonempty: false,
            keepdim: false,
            map: ident,
        },
        Op {
            name: "var(correction 1)",
            dtype: float_keep,
            call: |t, d, k| t.var(d, 1.0, k),
            reference: |g| r_var(g, 1.0),
            scale: mean_sq,
            needs_nonempty: false,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "std(correction 0)",
            dtype: float_keep,
            call: |t, d, k| t.std(d, 0.0, k),
            reference: |g| r_var(g, 0.0).sqrt(),
            scale: |g| mean_sq(g).sqrt(),
            needs_nonempty: false,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "norm(2)",
            dtype: float_keep,
            call: |t, d, k| t.norm(2.0, d, k),
            reference: |g| r_norm(g, 2.0),
            scale: zero,
            needs_nonempty: false,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "norm(1)",
            dtype: float_keep,
            call: |t, d, k| t.norm(1.0, d, k),
            reference: |g| r_norm(g, 1.0),
            scale: zero,
            needs_nonempty: false,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "norm(inf)",
            dtype: float_keep,
            call: |t, d, k| t.norm(f64::INFINITY, d, k),
            reference: |g| r_norm(g, f64::INFINITY),
            scale: zero,
            needs_nonempty: true,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "norm(-inf)",
            dtype: float_keep,
            call: |t, d, k| t.norm(f64::NEG_INFINITY, d, k),
            reference: |g| r_norm(g, f64::NEG_INFINITY),
            scale: zero,
            needs_nonempty: true,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "norm(0)",
            dtype: float_keep,
            call: |t, d, k| t.norm(0.0, d, k),
            reference: |g| r_norm(g, 0.0),
            scale: zero,
            needs_nonempty: false,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "norm(3)",
            dtype: float_keep,
            call: |t, d, k| t.norm(3.0, d, k),
            reference: |g| r_norm(g, 3.0),
            scale: zero,
            needs_nonempty: false,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "norm(0.5)",
            dtype: float_keep,
            call: |t, d, k| t.norm(0.5, d, k),
            reference: |g| r_norm(g, 0.5),
            scale: zero,
            needs_nonempty: false,
            keepdim: true,
            map: ident,
        },
        Op {
            name: "logsumexp",
            dtype: |d| Some(if d.is_float() { d } else { DType::F32 }),
            call: |t, d, k| t.logsumexp(d, k),
            reference: r_logsumexp,
            scale: |g| r_max(g).abs().max(1.0),
            needs_nonempty: false,
            keepdim: true,
            map: ident,
        },
    ]
}

/// Shapes and the dim lists each is reduced over.
fn shapes() -> Vec<(Vec<usize>, Vec<Vec<i64>>)> {
    vec![
        (
            vec![3, 4, 5],
            vec![
                vec![],
                vec![0],
                vec![1],
                vec![-1],
                vec![0, 2],
                vec![2, 0, 1],
            ],
        ),
        (vec![5, 7], vec![vec![], vec![0], vec![-1]]),
        (vec![7], vec![vec![], vec![0]]),
        (vec![], vec![vec![], vec![0], vec![-1]]),
        (vec![0, 3], vec![vec![], vec![0], vec![1]]),
        (vec![2, 0, 3], vec![vec![1], vec![0, 2], vec![-3]]),
        (vec![1, 5], vec![vec![0], vec![1], vec![]]),
        (vec![4, 1, 3], vec![vec![1], vec![0, 1], vec![-1], vec![]]),
        (vec![2, 3, 2, 3], vec![vec![1, 3], vec![0, 2], vec![3]]),
    ]
}

#[test]
fn reductions_match_the_reference_over_layouts_and_dtypes() {
    let mut checked = 0;
    for op in ops() {
        for dt in DType::ALL {
            let Some(want_dtype) = (op.dtype)(dt) else {
                // refused dtypes: an error naming the op and suggesting to_dtype
                let x = contiguous(&gen(dt, 6, 1), &[2, 3], dt);
                let err = (op.call)(&x, &[0], false).expect_err(op.name);
                assert!(err.to_string().contains("to_dtype"), "{}: {err}", op.name);
                continue;
            };
            for (si, (shape, dim_lists)) in shapes().into_iter().enumerate() {
                for (name, data, x) in inputs(&shape, dt, si as u64 * 31 + 7, &op.map) {
                    for (di, dims) in dim_lists.iter().enumerate() {
                        let keepdim = op.keepdim && (di + si) % 2 == 0;
                        let ctx = format!(
                            "{} {dt} {name} shape {shape:?} dims {dims:?} keepdim {keepdim}",
                            op.name
                        );
                        let red = resolve(dims, shape.len());
                        let count: usize = red.iter().map(|&d| shape[d]).product();
                        let result = (op.call)(&x, dims, keepdim);
                        if op.needs_nonempty && count == 0 {
                            let err = result.expect_err(&ctx);
                            assert!(err.to_string().contains("zero elements"), "{ctx}: {err}");
                            continue;
                        }
                        let got = result.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                        assert_eq!(
                            got.shape(),
                            out_shape(&shape, &red, keepdim).as_slice(),
                            "{ctx}: shape"
                        );
                        assert_eq!(got.dtype(), want_dtype, "{ctx}: dtype");
                        let gs = groups(&data, &shape, &red);
                        let want: Vec<f64> = gs.iter().map(|g| (op.reference)(g)).collect();
                        let scale: Vec<f64> = gs.iter().map(|g| (op.scale)(g)).collect();
                        check(
                            &ctx,
                            &got.to_f64_vec().unwrap(),
                            &stored(&want, want_dtype),
                            &scale,
                            tol(want_dtype),
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 3000, "{checked}");
}

/// Bigger inputs: several row blocks, lanes and column tiles, parallel schedules.
#[test]
fn large_reductions_cross_block_and_tile_boundaries() {
    for dt in [DType::F64, DType::F32, DType::BF16, DType::I32] {
        for shape in [
            vec![300usize, 530],
            vec![3, 9000],
            vec![30000, 3],
            vec![70, 3, 300],
        ] {
            let data = stored(&gen(dt, numel(&shape), 99), dt);
            for (name, x) in layouts(&data, &shape, dt).into_iter().take(3) {
                let nd = shape.len() as i64;
                for dims in [vec![0i64], vec![nd - 1], vec![]] {
                    let red = resolve(&dims, shape.len());
                    let ctx = format!("{dt} {name} shape {shape:?} dims {dims:?}");
                    let gs = groups(&data, &shape, &red);
                    let want: Vec<f64> = gs.iter().map(|g| g.iter().sum()).collect();
                    let scale: Vec<f64> = gs.iter().map(|g| sum_abs(g)).collect();
                    let sdt = if dt.is_float() { dt } else { DType::I64 };
                    let got = x.sum_dims(&dims, false).unwrap();
                    check(
                        &format!("sum {ctx}"),
                        &got.to_f64_vec().unwrap(),
                        &stored(&want, sdt),
                        &scale,
                        tol(sdt),
                    );
                    let want: Vec<f64> = gs.iter().map(|g| r_max(g)).collect();
                    check(
                        &format!("amax {ctx}"),
                        &x.amax(&dims, false).unwrap().to_f64_vec().unwrap(),
                        &want,
                        &want,
                        0.0,
                    );
                    let want: Vec<f64> = gs.iter().map(|g| r_argmax(g, true)).collect();
                    let d = if dims.is_empty() { None } else { Some(dims[0]) };
                    check(
                        &format!("argmax {ctx}"),
                        &x.argmax(d, false).unwrap().to_f64_vec().unwrap(),
                        &want,
                        &want,
                        0.0,
                    );
                    let want: Vec<f64> = gs.iter().map(|g| r_argmax(g, false)).collect();
                    check(
                        &format!("argmin {ctx}"),
                        &x.argmin(d, false).unwrap().to_f64_vec().unwrap(),
                        &want,
                        &want,
                        0.0,
                    );
                    if dt.is_float() {
                        let want: Vec<f64> = gs.iter().map(|g| r_var(g, 1.0)).collect();
                        let scale: Vec<f64> = gs.iter().map(|g| mean_sq(g)).collect();
                        let got = x.var(&dims, 1.0, false).unwrap().to_f64_vec().unwrap();
                        check(
                            &format!("var {ctx}"),
                            &got,
                            &stored(&want, dt),
                            &scale,
                            tol(dt),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn max_min_dim_and_arg_reductions_match_the_reference() {
    for dt in DType::ALL {
        for (si, (shape, _)) in shapes().into_iter().enumerate() {
            let nd = shape.len();
            for (name, data, x) in inputs(&shape, dt, si as u64 + 100, &ident) {
                let mut dims: Vec<Option<i64>> = vec![None];
                dims.extend((0..nd.max(1) as i64).map(Some));
                if nd > 0 {
                    dims.push(Some(-1));
                }
                for (di, dim) in dims.into_iter().enumerate() {
                    let keepdim = di % 2 == 1;
                    let ctx = format!("{dt} {name} shape {shape:?} dim {dim:?} keepdim {keepdim}");
                    let red = resolve(&dim.into_iter().collect::<Vec<_>>(), nd);
                    let count: usize = red.iter().map(|&d| shape[d]).product();
                    let gs = groups(&data, &shape, &red);
                    let oshape = out_shape(&shape, &red, keepdim);
                    for max in [true, false] {
                        let idx = if max {
                            x.argmax(dim, keepdim)
                        } else {
                            x.argmin(dim, keepdim)
                        };
                        if count == 0 {
                            assert!(
                                idx.unwrap_err().to_string().contains("zero elements"),
                                "{ctx}"
                            );
                            if let Some(d) = dim {
                                assert!(
                                    x.max_dim(d, keepdim).is_err()
                                        && x.min_dim(d, keepdim).is_err()
                                );
                            }
                            continue;
                        }
                        let idx = idx.unwrap();
                        assert_eq!(
                            (idx.shape(), idx.dtype()),
                            (oshape.as_slice(), DType::I64),
                            "{ctx}"
                        );
                        let want: Vec<f64> = gs.iter().map(|g| r_argmax(g, max)).collect();
                        check(
                            &format!("arg {max} {ctx}"),
                            &idx.to_f64_vec().unwrap(),
                            &want,
                            &want,
                            0.0,
                        );
                        if let Some(d) = dim {
                            let (v, i) = if max {
                                x.max_dim(d, keepdim)
                            } else {
                                x.min_dim(d, keepdim)
                            }
                            .unwrap();
                            assert_eq!((v.shape(), v.dtype()), (oshape.as_slice(), dt), "{ctx}");
                            check(
                                &format!("max_dim {max} {ctx}"),
                                &i.to_f64_vec().unwrap(),
                                &want,
                                &want,
                                0.0,
                            );
                            let wv: Vec<f64> = gs
                                .iter()
                                .map(|g| if max { r_max(g) } else { r_min(g) })
                                .collect();
                            check(
                                &format!("max_dim values {ctx}"),
                                &v.to_f64_vec().unwrap(),
                                &wv,
                                &wv,
                                0.0,
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn cumulative_ops_match_the_reference() {
    for dt in DType::ALL {
        for (si, (shape, _)) in shapes().into_iter().enumerate() {
            let nd = shape.len();
            let want_dtype = if dt.is_float() { dt } else { DType::I64 };
            for prod in [false, true] {
                let map: &dyn Fn(f64) -> f64 = if prod && dt.is_float() {
                    &|x| 1.0 + x / 8.0
                } else {
                    &ident
                };
                for (name, data, x) in inputs(&shape, dt, si as u64 + 200, map) {
                    for dim in 0..nd.max(1) {
                        let ctx = format!(
                            "cum{} {dt} {name} shape {shape:?} dim {dim}",
                            if prod { "prod" } else { "sum" }
                        );
                        let got = if prod {
                            x.cumprod(dim as i64)
                        } else {
                            x.cumsum(dim as i64 - nd as i64)
                        }
                        .unwrap();
                        assert_eq!(
                            (got.shape(), got.dtype()),
                            (shape.as_slice(), want_dtype),
                            "{ctx}"
                        );
                        let mut want = vec![0.0; data.len()];
                        let mut scale = vec![0.0; data.len()];
                        for line in lines(&shape, dim) {
                            let (mut a, mut s) =
                                (if prod { 1.0 } else { 0.0 }, if prod { 1.0 } else { 0.0 });
                            let mut ai = if prod { 1i64 } else { 0 };
                            for &i in &line {
                                if prod {
                                    a *= data[i];
                                    s *= data[i].abs();
                                    ai = ai.wrapping_mul(data[i] as i64);
                                } else {
                                    a += data[i];
                                    s += data[i].abs();
                                }
                                want[i] = if prod && !dt.is_float() { ai as f64 } else { a };
                                scale[i] = s;
                            }
                        }
                        check(
                            &ctx,
                            &got.to_f64_vec().unwrap(),
                            &stored(&want, want_dtype),
                            &scale,
                            tol(want_dtype),
                        );
                    }
                }
            }
        }
    }
}

fn ref_softmax(data: &[f64], shape: &[usize], dim: usize, log: bool) -> Vec<f64> {
    let mut out = vec![0.0; data.len()];
    for line in lines(shape, dim) {
        let m = r_max(&line.iter().map(|&i| data[i]).collect::<Vec<_>>());
        let s: f64 = line.iter().map(|&i| (data[i] - m).exp()).sum();
        for &i in &line {
            out[i] = if log {
                data[i] - m - s.ln()
            } else {
                (data[i] - m).exp() / s
            };
        }
    }
    out
}

#[test]
fn softmax_and_log_softmax_match_the_reference() {
    for dt in DType::FLOATS {
        for (si, (shape, _)) in shapes().into_iter().enumerate() {
            let nd = shape.len();
            for (name, data, x) in inputs(&shape, dt, si as u64 + 300, &|x| x * 3.0) {
                for dim in 0..nd.max(1) {
                    for log in [false, true] {
                        let ctx =
                            format!("softmax log={log} {dt} {name} shape {shape:?} dim {dim}");
                        let got = if log {
                            x.log_softmax(dim as i64)
                        } else {
                            x.softmax(dim as i64)
                        }
                        .unwrap();
                        assert_eq!((got.shape(), got.dtype()), (shape.as_slice(), dt), "{ctx}");
                        let want = ref_softmax(&data, &shape, dim, log);
                        // probabilities: absolute error; log-probabilities: relative to |value| + 1
                        let scale = vec![1.0; want.len()];
                        check(
                            &ctx,
                            &got.to_f64_vec().unwrap(),
                            &stored(&want, dt),
                            &scale,
                            tol(dt),
                        );
                    }
                }
            }
        }
    }
    let ints = Tensor::arange(0, 6, &CPU).unwrap();
    for e in [
        ints.softmax(0).unwrap_err(),
        ints.log_softmax(0).unwrap_err(),
    ] {
        assert!(e.to_string().contains("to_dtype"), "{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// semantics

#[test]
fn issue_fact_sum_over_dims_0_and_2() {
    // randn(2, 3, 4).sum over dims (0, 2) has shape (3,)
    let data = gen(DType::F32, 24, 5);
    let x = Tensor::from_vec(
        data.iter().map(|&v| v as f32).collect::<Vec<_>>(),
        [2, 3, 4],
    )
    .unwrap();
    let s = x.sum_dims(&[0, 2], false).unwrap();
    assert_eq!(s.shape(), &[3]);
    let want: Vec<f64> = groups(&data, &[2, 3, 4], &[0, 2])
        .iter()
        .map(|g| g.iter().sum())
        .collect();
    check("issue", &s.to_f64_vec().unwrap(), &want, &[10.0; 3], 1e-6);
    assert_eq!(x.sum_dims(&[0, 2], true).unwrap().shape(), &[1, 3, 1]);
    assert_eq!(x.sum_dims(&[-1, 0], false).unwrap().shape(), &[3]);
}

#[test]
fn nan_and_ties() -> Result<(), Error> {
    let nan = f32::NAN;
    let x = Tensor::from_vec(
        vec![1.0f32, nan, 3.0, 3.0, 0.0, 3.0, 5.0, 5.0, -1.0],
        [3, 3],
    )?;
    let f = |t: Tensor| t.to_f64_vec().unwrap();
    assert!(f(x.max()?)[0].is_nan() && f(x.min()?)[0].is_nan());
    assert_eq!(f(x.argmax(None, false)?), vec![1.0]); // the first NaN
    assert_eq!(f(x.argmin(None, false)?), vec![1.0]);
    let (v, i) = x.max_dim(1, false)?;
    assert!(v.to_vec::<f32>()?[0].is_nan());
    assert_eq!(&v.to_vec::<f32>()?[1..], &[3.0, 5.0]);
    assert_eq!(i.to_vec::<i64>()?, vec![1, 0, 0]); // the NaN; ties → the first occurrence
    let (_, i) = x.max_dim(0, false)?;
    assert_eq!(i.to_vec::<i64>()?, vec![2, 0, 0]);
    let a = x.amax(&[0], false)?.to_vec::<f32>()?;
    assert!(a[0] == 5.0 && a[1].is_nan() && a[2] == 3.0);
    // ties and NaN across lanes, blocks and threads (row and column traversals)
    let mut v = vec![0.0f64; 20000];
    v[5003] = 7.0;
    v[17001] = 7.0;
    let t = Tensor::from_vec(v.clone(), [20000])?;
    assert_eq!(t.argmax(Some(0), false)?.item::<i64>()?, 5003);
    assert_eq!(t.argmin(Some(0), false)?.item::<i64>()?, 0);
    let col = t.reshape(&[20000, 1])?.expand(&[20000, 3])?;
    assert_eq!(col.argmax(Some(0), false)?.to_vec::<i64>()?, vec![5003; 3]);
    v[12000] = f64::NAN;
    v[19000] = f64::NAN;
    let t = Tensor::from_vec(v, [20000])?;
    assert_eq!(t.argmax(None, false)?.item::<i64>()?, 12000);
    assert_eq!(t.argmin(None, false)?.item::<i64>()?, 12000);
    assert!(t.amax(&[0], false)?.item::<f64>()?.is_nan());
    assert!(t
        .reshape(&[100, 200])?
        .t()?
        .amin(&[], false)?
        .item::<f64>()?
        .is_nan());
    // bool max and argmax (false < true)
    let b = Tensor::from_vec(vec![false, true, true, false], [2, 2])?;
    assert_eq!(b.amax(&[1], false)?.to_vec::<bool>()?, vec![true, true]);
    assert_eq!(b.argmax(Some(1), false)?.to_vec::<i64>()?, vec![1, 0]);
    assert!(!b.min()?.item::<bool>()?);
    Ok(())
}

#[test]
fn empty_reductions() -> Result<(), Error> {
    let e = Tensor::zeros([0, 3], DType::F32, &CPU)?;
    assert_eq!(e.sum_dims(&[0], false)?.to_vec::<f32>()?, vec![0.0; 3]);
    assert_eq!(e.prod_dims(&[0], false)?.to_vec::<f32>()?, vec![1.0; 3]);
    assert!(e
        .mean_dims(&[0], false)?
        .to_vec::<f32>()?
        .iter()
        .all(|v| v.is_nan()));
    assert!(e.mean()?.item::<f32>()?.is_nan());
    assert_eq!(e.sum()?.item::<f32>()?, 0.0);
    assert_eq!(e.count_nonzero(&[])?.item::<i64>()?, 0);
    assert!(e.all()?.item::<bool>()?);
    assert!(!e.any()?.item::<bool>()?);
    assert!(e
        .var(&[0], 1.0, false)?
        .to_vec::<f32>()?
        .iter()
        .all(|v| v.is_nan()));
    assert_eq!(
        e.logsumexp(&[0], false)?.to_vec::<f32>()?,
        vec![f32::NEG_INFINITY; 3]
    );
    assert_eq!(e.norm(2.0, &[0], false)?.to_vec::<f32>()?, vec![0.0; 3]);
    // over the non-empty dim: an empty result, no error
    assert_eq!(e.amax(&[1], false)?.shape(), &[0]);
    assert_eq!(e.max_dim(1, true)?.1.shape(), &[0, 1]);
    assert_eq!(e.cumsum(0)?.shape(), &[0, 3]);
    assert_eq!(e.softmax(0)?.shape(), &[0, 3]);
    let i = Tensor::zeros([0], DType::I32, &CPU)?;
    assert_eq!((i.sum()?.item::<i64>()?, i.prod()?.item::<i64>()?), (0, 1));
    for err in [
        e.max().unwrap_err(),
        e.min().unwrap_err(),
        e.amax(&[0], false).unwrap_err(),
        e.argmax(None, false).unwrap_err(),
        e.argmin(Some(0), true).unwrap_err(),
        e.max_dim(0, false).unwrap_err(),
        e.norm(f64::INFINITY, &[0], false).unwrap_err(),
    ] {
        let msg = err.to_string();
        assert!(
            msg.contains("[0, 3]") && msg.contains("zero elements"),
            "{msg}"
        );
    }
    Ok(())
}

#[test]
fn var_correction_and_std() -> Result<(), Error> {
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 4.0], [3])?;
    assert!((x.var(&[], 1.0, false)?.item::<f64>()? - 7.0 / 3.0).abs() < 1e-15);
    assert!((x.var(&[0], 0.5, false)?.item::<f64>()? - (14.0 / 3.0) / 2.5).abs() < 1e-15);
    assert_eq!(x.var(&[0], 3.0, false)?.item::<f64>()?, f64::INFINITY); // divisor max(3-3, 0)
    assert_eq!(x.var(&[0], 5.0, false)?.item::<f64>()?, f64::INFINITY);
    let one = Tensor::from_vec(vec![3.0f32], [1])?;
    assert!(one.var(&[0], 1.0, false)?.item::<f32>()?.is_nan()); // 0 / 0
    assert!(one.std(&[], 1.0, true)?.to_vec::<f32>()?[0].is_nan());
    assert_eq!(one.var(&[0], 0.0, false)?.item::<f32>()?, 0.0);
    // a large offset does not destroy the variance (two passes)
    let big = Tensor::from_vec(vec![1e6f32 + 1.0, 1e6 + 3.0], [2])?;
    assert_eq!(big.var(&[0], 1.0, false)?.item::<f32>()?, 2.0);
    Ok(())
}

#[test]
fn softmax_is_stable_and_handles_infinities() -> Result<(), Error> {
    let inf = f32::INFINITY;
    let x = Tensor::from_vec(
        vec![
            1e4f32,
            1e4 - 1.0,
            -inf,
            0.0,
            -inf,
            -inf,
            -inf,
            -inf,
            2.0,
            2.0,
            2.0,
            2.0,
        ],
        [3, 4],
    )?;
    let s = x.softmax(1)?.to_vec::<f32>()?;
    let e = (-1.0f32).exp();
    assert!((s[0] - 1.0 / (1.0 + e)).abs() < 1e-6 && (s[1] - e / (1.0 + e)).abs() < 1e-6);
    assert_eq!((s[2], s[3]), (0.0, 0.0));
    assert!(s[4..8].iter().all(|v| v.is_nan())); // a row of only -inf: NaN, as PyTorch
    assert_eq!(&s[8..], &[0.25; 4]);
    let l = x.log_softmax(1)?.to_vec::<f32>()?;
    assert!((l[0] + (1.0 + e).ln()).abs() < 1e-6);
    assert_eq!(l[2], -inf);
    assert!(l[4..8].iter().all(|v| v.is_nan()));
    assert!(l[8..].iter().all(|&v| (v + 4f32.ln()).abs() < 1e-6));
    // f16: no overflow at 6e4 (computed in f32)
    let h = Tensor::from_vec(vec![6e4f32, 6e4], [2])?.to_dtype(DType::F16)?;
    assert_eq!(h.softmax(0)?.to_f64_vec()?, vec![0.5, 0.5]);
    // logsumexp: stable, and infinite rows
    let l = x.logsumexp(&[1], false)?.to_vec::<f32>()?;
    assert!((l[0] - (1e4 + (1.0 + e).ln())).abs() < 1e-2);
    assert_eq!(l[1], -inf);
    let p = Tensor::from_vec(vec![inf, 1.0], [2])?;
    assert_eq!(p.logsumexp(&[0], false)?.item::<f32>()?, inf);
    // a 0-d tensor
    let z = Tensor::scalar(3.0, DType::F64, &CPU)?;
    assert_eq!(z.softmax(0)?.item::<f64>()?, 1.0);
    assert_eq!(z.log_softmax(-1)?.item::<f64>()?, 0.0);
    Ok(())
}

#[test]
fn dtype_rules() -> Result<(), Error> {
    let i32s = Tensor::from_vec(vec![1i32, -2, 3], [3])?;
    let u8s = Tensor::from_vec(vec![200u8, 100, 50], [3])?;
    let bools = Tensor::from_vec(vec![true, false, true], [3])?;
    let h = Tensor::from_vec(vec![1.5f32, 2.0, 3.0], [3])?.to_dtype(DType::F16)?;
    assert_eq!(i32s.sum()?.dtype(), DType::I64);
    assert_eq!(u8s.sum()?.item::<i64>()?, 350); // no u8 overflow
    assert_eq!(bools.sum()?.item::<i64>()?, 2);
    assert_eq!(bools.prod()?.dtype(), DType::I64);
    assert_eq!(u8s.cumsum(0)?.to_vec::<i64>()?, vec![200, 300, 350]);
    assert_eq!(bools.cumsum(0)?.to_vec::<i64>()?, vec![1, 1, 2]);
    assert_eq!(i32s.cumprod(0)?.to_vec::<i64>()?, vec![1, -2, -6]);
    assert_eq!(h.sum()?.dtype(), DType::F16);
    assert_eq!(h.cumsum(0)?.dtype(), DType::F16);
    assert_eq!(i32s.logsumexp(&[0], false)?.dtype(), DType::F32);
    assert_eq!(bools.logsumexp(&[0], false)?.dtype(), DType::F32);
    assert_eq!(h.logsumexp(&[0], false)?.dtype(), DType::F16);
    assert_eq!(u8s.amax(&[0], false)?.dtype(), DType::U8);
    assert_eq!(bools.amax(&[0], false)?.dtype(), DType::Bool);
    assert_eq!(i32s.max()?.item::<i32>()?, 3);
    assert_eq!(i32s.argmax(None, false)?.dtype(), DType::I64);
    assert_eq!(i32s.all()?.dtype(), DType::Bool);
    assert_eq!(u8s.any()?.dtype(), DType::Bool);
    assert_eq!(h.count_nonzero(&[])?.dtype(), DType::I64);
    assert_eq!(h.var(&[], 1.0, false)?.dtype(), DType::F16);
    assert_eq!(h.norm_all(2.0)?.dtype(), DType::F16);
    for (name, r) in [
        ("mean", i32s.mean()),
        ("mean", bools.mean_dims(&[0], true)),
        ("var", i32s.var(&[], 1.0, false)),
        ("std", u8s.std(&[0], 0.0, false)),
        ("norm", i32s.norm(2.0, &[], false)),
        ("softmax", i32s.softmax(0)),
        ("log_softmax", bools.log_softmax(0)),
    ] {
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains(name) && msg.contains("to_dtype"), "{msg}");
    }
    // f16/bf16 accumulate in f32: a mean never overflows where its sum does
    let ones = Tensor::ones([100_000], DType::F16, &CPU)?;
    assert_eq!(ones.mean()?.to_f64_vec()?, vec![1.0]);
    assert_eq!(ones.sum()?.to_f64_vec()?, vec![f64::INFINITY]); // 1e5 > f16::MAX, as PyTorch
    let b = Tensor::ones([300], DType::BF16, &CPU)?;
    assert_eq!(b.sum()?.to_f64_vec()?, vec![300.0]); // bf16 steps of 1 stop at 256
                                                     // f32 accumulates in f64: 2^24 + 1 ones
    let f = Tensor::ones([(1 << 24) + 1], DType::F32, &CPU)?;
    assert_eq!(f.sum()?.item::<f32>()?, 16777216.0);
    assert_eq!(f.mean()?.item::<f32>()?, 1.0);
    Ok(())
}

#[test]
fn zero_dim_and_keepdim_shapes() -> Result<(), Error> {
    let z = Tensor::scalar(4i64, DType::I64, &CPU)?;
    assert_eq!(z.sum_dims(&[0], true)?.shape(), &[] as &[usize]);
    assert_eq!(z.sum_dims(&[-1], false)?.item::<i64>()?, 4);
    let (v, i) = z.max_dim(0, false)?;
    assert_eq!((v.item::<i64>()?, i.item::<i64>()?), (4, 0));
    assert_eq!(z.cumsum(0)?.item::<i64>()?, 4);
    assert!(z.sum_dims(&[1], false).is_err());
    let x = Tensor::arange(0, 24, &CPU)?.reshape(&[2, 3, 4])?;
    assert_eq!(x.argmax(None, true)?.shape(), &[1, 1, 1]);
    assert_eq!(x.argmax(None, true)?.item::<i64>()?, 23);
    assert_eq!(x.sum_dims(&[], true)?.shape(), &[1, 1, 1]);
    assert_eq!(x.sum_dims(&[], false)?.item::<i64>()?, 276); // empty dims: all, as PyTorch
    assert_eq!(x.count_nonzero(&[0, 2])?.to_vec::<i64>()?, vec![7, 8, 8]);
    assert_eq!(x.prod_dims(&[1], false)?.shape(), &[2, 4]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// `_out` forms through strided outputs, with guards

/// A buffer of guard values and a view into it of `shape`: "transposed" (column-major, with
/// a gap and an offset) or "stepped" (row-major strides doubled, offset 1).
fn guarded(shape: &[usize], dt: DType, guard: f64, kind: &str) -> (Tensor, Tensor) {
    let nd = shape.len();
    let mut strides = vec![0usize; nd];
    let offset;
    match kind {
        "transposed" => {
            let mut acc = 1;
            for d in 0..nd {
                strides[d] = acc;
                acc *= shape[d].max(1) + if d == 0 { 1 } else { 0 };
            }
            offset = 3;
        }
        _ => {
            strides = row_major(shape).iter().map(|s| 2 * s).collect();
            offset = 1;
        }
    }
    let extent: usize = offset
        + shape
            .iter()
            .zip(&strides)
            .map(|(&n, &s)| n.saturating_sub(1) * s)
            .sum::<usize>()
        + 4;
    let base = Tensor::full([extent], guard, dt, &CPU).unwrap();
    let view = base.as_strided(shape, &strides, offset).unwrap();
    (base, view)
}

/// The storage positions `view` covers.
fn covered(view: &Tensor) -> Vec<usize> {
    (0..view.numel())
        .map(|i| {
            let ii = unravel(i, view.shape());
            view.storage_offset()
                + ii.iter()
                    .zip(view.stride())
                    .map(|(a, b)| a * b)
                    .sum::<usize>()
        })
        .collect()
}

/// Runs `f(out)` for outputs in both layouts (and both guards for bool outputs), and checks
/// the view equals `want` (from the allocating form) and the guards are untouched.
fn check_out(ctx: &str, want: &Tensor, f: &dyn Fn(&Tensor) -> Result<Tensor, Error>) {
    let guards: &[f64] = if want.dtype() == DType::Bool {
        &[0.0, 1.0]
    } else {
        &[-1234.5]
    };
    for kind in ["transposed", "stepped"] {
        for &g in guards {
            let (base, out) = guarded(want.shape(), want.dtype(), g, kind);
            let v0 = out.version();
            let r = f(&out).unwrap_or_else(|e| panic!("{ctx} {kind}: {e}"));
            assert!(
                r.shares_storage_with(&base) && r.stride() == out.stride(),
                "{ctx}: returns out"
            );
            assert!(out.version() > v0, "{ctx}: version bump");
            let (got, w) = (out.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
            let same = got
                .iter()
                .zip(&w)
                .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
            assert!(same, "{ctx} {kind}: {got:?} vs {w:?}");
            let cov = covered(&out);
            for (p, v) in base.to_f64_vec().unwrap().into_iter().enumerate() {
                if !cov.contains(&p) {
                    assert_eq!(
                        v,
                        stored(&[g], want.dtype())[0],
                        "{ctx} {kind}: guard at {p} overwritten"
                    );
                }
            }
        }
    }
}

#[test]
fn out_forms_write_through_strided_outputs() -> Result<(), Error> {
    let data = gen(DType::F32, 60, 42);
    let x = contiguous(&data, &[3, 4, 5], DType::F32).permute(&[1, 0, 2])?; // (4, 3, 5), permuted
    let xi = contiguous(&gen(DType::I32, 60, 43), &[4, 3, 5], DType::I32);
    for keepdim in [false, true] {
        let d: &[i64] = &[0, 2];
        check_out("sum", &x.sum_dims(d, keepdim)?, &|o| {
            x.sum_dims_out(d, keepdim, o)
        });
        check_out("sum i32", &xi.sum_dims(d, keepdim)?, &|o| {
            xi.sum_dims_out(d, keepdim, o)
        });
        check_out("mean", &x.mean_dims(d, keepdim)?, &|o| {
            x.mean_dims_out(d, keepdim, o)
        });
        check_out("prod", &x.prod_dims(&[1], keepdim)?, &|o| {
            x.prod_dims_out(&[1], keepdim, o)
        });
        check_out("amax", &x.amax(d, keepdim)?, &|o| x.amax_out(d, keepdim, o));
        check_out("amin", &xi.amin(&[-1], keepdim)?, &|o| {
            xi.amin_out(&[-1], keepdim, o)
        });
        check_out("all", &xi.all_dims(&[1], keepdim)?, &|o| {
            xi.all_dims_out(&[1], keepdim, o)
        });
        check_out("any", &x.any_dims(d, keepdim)?, &|o| {
            x.any_dims_out(d, keepdim, o)
        });
        check_out("var", &x.var(d, 1.0, keepdim)?, &|o| {
            x.var_out(d, 1.0, keepdim, o)
        });
        check_out("std", &x.std(&[1], 0.0, keepdim)?, &|o| {
            x.std_out(&[1], 0.0, keepdim, o)
        });
        check_out("norm", &x.norm(3.0, d, keepdim)?, &|o| {
            x.norm_out(3.0, d, keepdim, o)
        });
        check_out("logsumexp", &x.logsumexp(d, keepdim)?, &|o| {
            x.logsumexp_out(d, keepdim, o)
        });
        check_out("argmax", &x.argmax(Some(1), keepdim)?, &|o| {
            x.argmax_out(Some(1), keepdim, o)
        });
        check_out("argmin", &xi.argmin(Some(0), keepdim)?, &|o| {
            xi.argmin_out(Some(0), keepdim, o)
        });
        let (v, i) = x.max_dim(2, keepdim)?;
        check_out("max_dim values", &v, &|o| {
            let (_, io) = guarded(i.shape(), DType::I64, -7.0, "transposed");
            let r = x.max_dim_out(2, keepdim, o, &io)?.0;
            assert_eq!(io.to_vec::<i64>()?, i.to_vec::<i64>()?);
            Ok(r)
        });
        let (v, i) = xi.min_dim(0, keepdim)?;
        check_out("min_dim indices", &i, &|o| {
            let (_, vo) = guarded(v.shape(), DType::I32, -7.0, "stepped");
            let r = xi.min_dim_out(0, keepdim, &vo, o)?.1;
            assert_eq!(vo.to_vec::<i32>()?, v.to_vec::<i32>()?);
            Ok(r)
        });
    }
    check_out("count_nonzero", &xi.count_nonzero(&[2])?, &|o| {
        xi.count_nonzero_out(&[2], o)
    });
    for dim in [0i64, 1, -1] {
        check_out("cumsum", &x.cumsum(dim)?, &|o| x.cumsum_out(dim, o));
        check_out("cumprod i32", &xi.cumprod(dim)?, &|o| {
            xi.cumprod_out(dim, o)
        });
        check_out("softmax", &x.softmax(dim)?, &|o| x.softmax_out(dim, o));
        check_out("log_softmax", &x.log_softmax(dim)?, &|o| {
            x.log_softmax_out(dim, o)
        });
    }
    // a wider output dtype: computed in the result dtype, then cast
    let want = x.sum_dims(&[1], false)?.to_dtype(DType::F64)?;
    check_out("sum into f64", &want, &|o| x.sum_dims_out(&[1], false, o));
    let want = xi.amax(&[1], false)?.to_dtype(DType::F32)?;
    check_out("amax i32 into f32", &want, &|o| xi.amax_out(&[1], false, o));
    // in-place scans through a transposed tensor
    let t = contiguous(&data, &[5, 12], DType::F32).t()?;
    let want = t.cumsum(0)?;
    let v0 = t.version();
    t.cumsum_(0)?;
    assert_eq!((t.to_f64_vec()?, t.version()), (want.to_f64_vec()?, v0 + 1));
    let ti = contiguous(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::I32).t()?;
    ti.cumprod_(1)?;
    assert_eq!(
        (ti.dtype(), ti.to_vec::<i32>()?),
        (DType::I32, vec![1, 3, 2, 8])
    );
    // an output that partially aliases the input: computed from the input as it was
    let buf = contiguous(&data[..12], &[3, 4], DType::F32);
    let want = buf.sum_dims(&[0], false)?;
    let row = buf.select(0, 1)?;
    buf.sum_dims_out(&[0], false, &row)?;
    assert_eq!(row.to_f64_vec()?, want.to_f64_vec()?);
    let sq = contiguous(&data[..16], &[4, 4], DType::F32);
    let wsq = sq.softmax(0)?;
    sq.softmax_out(0, &sq.t()?)?; // out is the input transposed: alias handled
    assert_eq!(sq.t()?.to_f64_vec()?, wsq.to_f64_vec()?);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// errors leave every operand unchanged

#[derive(Debug, PartialEq)]
struct Snap(Vec<f64>, Vec<usize>, Vec<usize>, usize, u64, DType);
fn snap(t: &Tensor) -> Snap {
    Snap(
        t.to_f64_vec().unwrap(),
        t.shape().to_vec(),
        t.stride().to_vec(),
        t.storage_offset(),
        t.version(),
        t.dtype(),
    )
}

fn expect_err<T: std::fmt::Debug>(
    tensors: &[&Tensor],
    needles: &[&str],
    f: impl FnOnce() -> Result<T, Error>,
) {
    let before: Vec<Snap> = tensors.iter().map(|t| snap(t)).collect();
    let msg = f().expect_err("expected an error").to_string();
    for n in needles {
        assert!(msg.contains(n), "error {msg:?} should mention {n:?}");
    }
    let after: Vec<Snap> = tensors.iter().map(|t| snap(t)).collect();
    assert_eq!(before, after, "a failed op changed an operand ({msg})");
}

#[test]
fn errors_name_the_problem_and_leave_operands_unchanged() -> Result<(), Error> {
    let x = contiguous(&gen(DType::F32, 12, 3), &[3, 4], DType::F32);
    let xi = contiguous(&gen(DType::I64, 12, 4), &[3, 4], DType::I64);
    // dims
    expect_err(&[&x], &["sum", "dim 2", "out of range"], || {
        x.sum_dims(&[2], false)
    });
    expect_err(&[&x], &["amax", "dim -3"], || x.amax(&[-3], true));
    expect_err(&[&x], &["var", "more than once"], || {
        x.var(&[1, -1], 1.0, false)
    });
    expect_err(&[&x], &["sum", "more than once"], || {
        x.sum_dims(&[0, 0], false)
    });
    expect_err(&[&x], &["max", "dim 5"], || x.max_dim(5, false));
    expect_err(&[&x], &["argmin", "dim -4"], || x.argmin(Some(-4), false));
    expect_err(&[&x], &["cumsum", "dim 2"], || x.cumsum(2));
    expect_err(&[&x], &["cumsum", "dim 2"], || x.cumsum_(2));
    expect_err(&[&x], &["softmax", "dim 2"], || x.softmax(2));
    expect_err(&[&x], &["norm", "NaN"], || x.norm(f64::NAN, &[], false));
    // empty extrema
    let e = Tensor::zeros([2, 0], DType::F32, &CPU)?;
    expect_err(&[&e], &["amin", "zero elements", "[2, 0]"], || {
        e.amin(&[1], false)
    });
    expect_err(&[&e], &["min", "zero elements"], || e.min_dim(-1, true));
    // dtypes
    expect_err(&[&xi], &["mean", "int64", "to_dtype"], || {
        xi.mean_dims(&[0], false)
    });
    expect_err(&[&xi], &["log_softmax", "to_dtype"], || xi.log_softmax(1));
    // outputs: shape, dtype, overlap, dtype of indices, shared values/indices
    let o = Tensor::full([4], 9.0, DType::F32, &CPU)?;
    expect_err(&[&x, &o], &["sum", "[4]", "[3]"], || {
        x.sum_dims_out(&[1], false, &o)
    });
    expect_err(&[&x, &o], &["softmax", "[4]", "[3, 4]"], || {
        x.softmax_out(1, &o)
    });
    expect_err(&[&x, &o], &["var", "[4]"], || {
        x.var_out(&[0], 1.0, true, &o)
    });
    expect_err(&[&x, &o], &["cumsum"], || x.cumsum_out(0, &o));
    let oi = Tensor::full([3], 9, DType::I64, &CPU)?;
    expect_err(&[&x, &oi], &["mean", "float32", "int64"], || {
        x.mean_dims_out(&[1], false, &oi)
    });
    expect_err(&[&x, &oi], &["logsumexp", "int64"], || {
        x.logsumexp_out(&[1], false, &oi)
    });
    expect_err(&[&x, &oi], &["norm", "int64"], || {
        x.norm_out(2.0, &[1], false, &oi)
    });
    let ob = Tensor::full([3], false, DType::Bool, &CPU)?;
    expect_err(&[&xi, &ob], &["sum", "bool"], || {
        xi.sum_dims_out(&[1], false, &ob)
    });
    expect_err(&[&xi, &ob], &["argmax", "bool", "int64"], || {
        xi.argmax_out(Some(1), false, &ob)
    });
    let expanded = Tensor::full([1], 9.0, DType::F32, &CPU)?.expand(&[3])?;
    expect_err(&[&x, &expanded], &["share memory"], || {
        x.amax_out(&[1], false, &expanded)
    });
    let expanded2 = Tensor::full([1, 4], 9.0, DType::F32, &CPU)?.expand(&[3, 4])?;
    expect_err(&[&x, &expanded2], &["share memory"], || {
        x.cumsum_out(0, &expanded2)
    });
    expect_err(&[&x, &expanded2], &["share memory"], || {
        x.log_softmax_out(0, &expanded2)
    });
    let vals = Tensor::full([3], 9.0, DType::F32, &CPU)?;
    let idx = Tensor::full([3], 9, DType::I64, &CPU)?;
    let bad_idx = Tensor::full([4], 9, DType::I64, &CPU)?;
    expect_err(&[&x, &vals, &bad_idx], &["max", "[4]"], || {
        x.max_dim_out(1, false, &vals, &bad_idx)
    });
    let bad_vals = Tensor::full([3], 9, DType::I32, &CPU)?;
    expect_err(&[&x, &bad_vals, &idx], &["max", "float32", "int32"], || {
        x.max_dim_out(1, false, &bad_vals, &idx)
    });
    let shared = Tensor::full([6], 9, DType::I64, &CPU)?;
    let (sv, si) = (shared.narrow(0, 0, 3)?, shared.narrow(0, 3, 3)?);
    expect_err(&[&xi, &shared], &["min", "share storage"], || {
        xi.min_dim_out(1, false, &sv, &si)
    });
    // in place: a bool tensor can't hold cumsum's i64
    let b = Tensor::full([3], true, DType::Bool, &CPU)?;
    expect_err(&[&b], &["cumsum", "int64", "bool"], || b.cumsum_(0));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// half precision: f32 accumulation, one rounding at the end (issue #22)

const U32: f64 = 1.0 / 16_777_216.0; // u = 2^-24, the unit roundoff of f32

/// The spacing of `dt`'s values at magnitude `x` (f16: 11 significant bits, normal from 2^-14;
/// bf16: 8 bits, normal from 2^-126).
fn half_ulp(dt: DType, x: f64) -> f64 {
    let (bits, emin) = if dt == DType::F16 {
        (11, -14)
    } else {
        (8, -126)
    };
    let e = if x == 0.0 {
        emin
    } else {
        (x.abs().log2().floor() as i32).max(emin)
    };
    2f64.powi(e - (bits - 1))
}

/// `want` (the exact value) rounded once to `dt`.
fn round_half(dt: DType, want: f64) -> f64 {
    Tensor::from_vec(vec![want], [1])
        .unwrap()
        .to_dtype(dt)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()[0]
}

/// Rows of `n` values `offset + j·ulp(offset)`, j in 0..4 (a large common offset against a
/// spread of a few half steps): every value is exact in the half type, and every sum, mean,
/// centred value and square below is exact in f32 — so an f32 computation rounded once gives
/// the exact answer rounded once, while an accumulator or intermediate in the half type loses
/// the spread.
fn offset_rows(dt: DType, offset: f64, rows: usize, n: usize) -> (Tensor, Vec<Vec<f64>>) {
    let step = half_ulp(dt, offset);
    let mut s = 0x2545_f491_4f6c_dd1du64 ^ (offset as u64);
    let v: Vec<Vec<f64>> = (0..rows)
        .map(|_| {
            (0..n)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    offset + (s % 4) as f64 * step
                })
                .collect()
        })
        .collect();
    let flat: Vec<f64> = v.iter().flatten().copied().collect();
    let t = Tensor::from_vec(flat, [rows, n])
        .unwrap()
        .to_dtype(dt)
        .unwrap();
    (t, v)
}

/// `got` is within `½ ulp_dt(|want| + δ) + δ` of the exact `want`, where δ bounds the f32
/// computation's error (so the f32 result is within δ of `want`, and rounding it once to `dt`
/// adds at most half an ulp at its magnitude). δ = 0 asks for the exact answer rounded once.
fn check_half(ctx: &str, dt: DType, got: &Tensor, want: &[f64], delta: impl Fn(f64) -> f64) {
    assert_eq!(got.dtype(), dt, "{ctx}: dtype");
    let g = got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(g.len(), want.len(), "{ctx}: length");
    let mut bad = vec![];
    for (i, (&g, &w)) in g.iter().zip(want).enumerate() {
        let d = delta(w);
        let bound = if d == 0.0 {
            0.0
        } else {
            0.5 * half_ulp(dt, w.abs() + d) + d
        };
        let ok = if d == 0.0 {
            g == round_half(dt, w)
        } else {
            (g - w).abs() <= bound
        };
        if !ok {
            bad.push(format!(
                "[{i}] got {g}, exact {w}, rounded once {}",
                round_half(dt, w)
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{ctx}: {} of {} elements out of bound, first: {}",
        bad.len(),
        g.len(),
        bad[0]
    );
}

fn row_mean(r: &[f64]) -> f64 {
    r.iter().sum::<f64>() / r.len() as f64
}
fn row_var(r: &[f64]) -> f64 {
    let m = row_mean(r);
    r.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / r.len() as f64
}

#[test]
fn half_reductions_with_a_large_offset_round_once() {
    let (rows, n) = (8, 64);
    for dt in [DType::F16, DType::BF16] {
        for offset in [100.0, 1000.0] {
            let (x, v) = offset_rows(dt, offset, rows, n);
            let ctx = |op: &str| format!("{op} {dt} offset {offset}");
            let per_row = |f: &dyn Fn(&[f64]) -> f64| v.iter().map(|r| f(r)).collect::<Vec<_>>();
            // exact in f32 (module comment of `offset_rows`): the answer rounded once
            let exact = |_: f64| 0.0;
            check_half(
                &ctx("sum"),
                dt,
                &x.sum_dims(&[1], false).unwrap(),
                &per_row(&|r| r.iter().sum()),
                exact,
            );
            check_half(
                &ctx("mean"),
                dt,
                &x.mean_dims(&[1], false).unwrap(),
                &per_row(&row_mean),
                exact,
            );
            check_half(
                &ctx("var"),
                dt,
                &x.var(&[1], 0.0, false).unwrap(),
                &per_row(&row_var),
                exact,
            );
            let cums: Vec<f64> = v
                .iter()
                .flat_map(|r| {
                    r.iter()
                        .scan(0.0, |s, x| {
                            *s += x;
                            Some(*s)
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            check_half(&ctx("cumsum"), dt, &x.cumsum(1).unwrap(), &cums, exact);
            // std: the exact variance, then one f32 sqrt (correctly rounded): δ = u·|y|
            check_half(
                &ctx("std"),
                dt,
                &x.std(&[1], 0.0, false).unwrap(),
                &per_row(&|r| row_var(r).sqrt()),
                |w| U32 * w.abs(),
            );
            // 2-norm: the squares are exact in f32; their sum's relative error is at most
            // γ_{n−1} ≤ n·u, halved by the sqrt, plus the sqrt's own rounding u: δ = (n/2 + 1)·u·|y|
            check_half(
                &ctx("norm"),
                dt,
                &x.norm(2.0, &[1], false).unwrap(),
                &per_row(&|r| r.iter().map(|x| x * x).sum::<f64>().sqrt()),
                |w| (n as f64 / 2.0 + 1.0) * U32 * w.abs(),
            );
            // softmax: x − max exact; each exp within 2 ulps (CUDA's expf; ≤ 4u relative); their
            // f32 sum adds γ_{n−1} ≤ n·u; the division u: δ = (n + 9)·u·|y|
            let sm: Vec<f64> = v
                .iter()
                .flat_map(|r| {
                    let m = r.iter().cloned().fold(f64::MIN, f64::max);
                    let s: f64 = r.iter().map(|x| (x - m).exp()).sum();
                    r.iter().map(move |x| (x - m).exp() / s).collect::<Vec<_>>()
                })
                .collect();
            let sm_delta = |w: f64| (n as f64 + 9.0) * U32 * w.abs();
            check_half(&ctx("softmax"), dt, &x.softmax(1).unwrap(), &sm, sm_delta);
            // log_softmax = (x − max) − log Σ: the log of a sum with relative error ≤ (n + 4)·u
            // is off by at most that much absolutely, plus the log's and the subtraction's own
            // roundings (≤ 2 ulps each at |y|, 4u relative): δ = (n + 4)·u + 8u·|y|
            let lsm: Vec<f64> = sm.iter().map(|p| p.ln()).collect();
            check_half(
                &ctx("log_softmax"),
                dt,
                &x.log_softmax(1).unwrap(),
                &lsm,
                |w| (n as f64 + 4.0) * U32 + 8.0 * U32 * w.abs(),
            );
            // logsumexp = max + log Σ exp(x − max): as log_softmax, with the result near max
            let lse = per_row(&|r| {
                let m = r.iter().cloned().fold(f64::MIN, f64::max);
                m + r.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
            });
            check_half(
                &ctx("logsumexp"),
                dt,
                &x.logsumexp(&[1], false).unwrap(),
                &lse,
                |w| (n as f64 + 4.0) * U32 + 8.0 * U32 * w.abs(),
            );
        }
        // prod of values near 1 (1 + j·ulp(1)): each f32 product of the exact partial product
        // rounds once, so the relative error is at most γ_{n−1} ≤ n·u: δ = n·u·|y|
        let (x, v) = offset_rows(dt, 1.0, rows, n);
        let p: Vec<f64> = v.iter().map(|r| r.iter().product()).collect();
        check_half(
            &format!("prod {dt}"),
            dt,
            &x.prod_dims(&[1], false).unwrap(),
            &p,
            |w| n as f64 * U32 * w.abs(),
        );
        let cp: Vec<f64> = v
            .iter()
            .flat_map(|r| {
                r.iter()
                    .scan(1.0, |s, x| {
                        *s *= x;
                        Some(*s)
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        check_half(
            &format!("cumprod {dt}"),
            dt,
            &x.cumprod(1).unwrap(),
            &cp,
            |w| n as f64 * U32 * w.abs(),
        );
    }
}
