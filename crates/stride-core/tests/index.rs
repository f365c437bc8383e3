//! Index ops against the stride-check registry's references (`registry_ref`, the one
//! reference of each op), over layouts of every operand (values, indices, in-place
//! destinations), index dtypes i64/i32/u32, value dtypes, size-0/size-1 dims and expanded
//! (stride-0) indices; error paths with operands unchanged; determinism of accumulating
//! scatters (against sequential f32 sums).

mod idx_common;

use idx_common::*;
use stride_check::reference::numel;
use stride_check::registry::Params;
use stride_core::{DType, Device, Error, Scalar, ScatterReduce, Tensor};

const CPU: Device = Device::Cpu;

/// Registry params: the dim argument.
fn pd(dim: i64) -> Params {
    Params {
        dims: vec![dim],
        ..Params::default()
    }
}
/// Registry params: the dim and a scalar (a fill value, index_add's alpha).
fn pds(dim: i64, s: impl Into<Scalar>) -> Params {
    Params {
        dims: vec![dim],
        scalars: vec![s.into()],
        ..Params::default()
    }
}
/// Registry params: a scalar alone (masked_fill's value).
fn ps(s: impl Into<Scalar>) -> Params {
    Params {
        scalars: vec![s.into()],
        ..Params::default()
    }
}
/// Registry params of scatter_reduce: the dim, `ints = [reduce, include_self]` (the reduce
/// as the entry numbers it: sum, prod, mean, amax, amin).
fn pred(dim: i64, red: ScatterReduce, include_self: bool) -> Params {
    let code = match red {
        ScatterReduce::Sum => 0,
        ScatterReduce::Prod => 1,
        ScatterReduce::Mean => 2,
        ScatterReduce::Amax => 3,
        ScatterReduce::Amin => 4,
    };
    Params {
        dims: vec![dim],
        ints: vec![code, include_self as i64],
        ..Params::default()
    }
}
/// Index values as a registry operand's values.
fn fl(idx: &[i64]) -> Vec<f64> {
    idx.iter().map(|&v| v as f64).collect()
}
const IDX: DType = DType::I64;
const MASK: DType = DType::Bool;

fn vals_for(dtype: DType, n: usize, rng: &mut Rng) -> Vec<f64> {
    match dtype {
        DType::Bool => rng.small(n, 0, 2),
        DType::U8 | DType::U32 => rng.small(n, 0, 10),
        _ => rng.small(n, -5, 10),
    }
}

/// Index tensors in every layout, plus an expanded one when the shape has a dim whose values
/// are equal (the caller passes `expand_from` = (values of shape with that dim 1, dim)).
fn index_layouts(vals: &[i64], shape: &[usize], dtype: DType) -> Vec<Laid> {
    let f: Vec<f64> = vals.iter().map(|&v| v as f64).collect();
    layouts(&f, shape, dtype)
}

// ---------------------------------------------------------------------------------------------
// gathers

#[test]
fn index_select_over_layouts_and_index_dtypes() {
    let mut rng = Rng(1);
    for (xs, d, n) in [
        (vec![5usize, 4], 0usize, 7usize),
        (vec![5, 4], 1, 3),
        (vec![3, 4, 2], 1, 5),
        (vec![3, 4, 2], 2, 2),
        (vec![4, 1], 1, 3),
        (vec![0, 3], 1, 2),
        (vec![3, 2], 0, 0),
    ] {
        let x = rng.small(numel(&xs), -9, 9);
        let idx: Vec<i64> = (0..n).map(|_| rng.below(xs[d].max(1)) as i64).collect();
        let want = registry_ref(
            "index_select",
            &[(&x, &xs, DType::F32), (&fl(&idx), &[n], IDX)],
            pd(d as i64),
        );
        let mut os = xs.clone();
        os[d] = n;
        for xl in layouts(&x, &xs, DType::F32) {
            for idt in INDEX_DTYPES {
                for il in index_layouts(&idx, &[n], idt) {
                    let out = xl.t.index_select(d as i64, &il.t).unwrap();
                    assert_eq!(out.shape(), os.as_slice());
                    assert_eq!(out.dtype(), DType::F32);
                    assert_eq!(il.t.dtype(), idt, "the index keeps its dtype");
                    assert_same!(
                        f64s(&out),
                        want,
                        "index_select {xs:?} d{d} x:{} idx:{} {idt}",
                        xl.name,
                        il.name
                    );
                }
            }
        }
    }
}

#[test]
fn index_select_every_value_dtype() {
    let mut rng = Rng(2);
    let xs = [4usize, 3];
    let idx = vec![3i64, 0, 0, 2];
    for dt in VALUE_DTYPES
        .iter()
        .copied()
        .chain([DType::Bool, DType::U32])
    {
        let x = vals_for(dt, 12, &mut rng);
        let want = registry_ref(
            "index_select",
            &[(&x, &xs, dt), (&fl(&idx), &[4], IDX)],
            pd(0),
        );
        let out = tensor(&x, &xs, dt)
            .index_select(0, &ints(&idx, &[4], DType::U32))
            .unwrap();
        assert_eq!(out.dtype(), dt);
        assert_same!(f64s(&out), want, "{dt}");
        // 0-d index: a dim of size 1
        let one = ints(&[2], &[], DType::I32);
        let o1 = tensor(&x, &xs, dt).index_select(1, &one).unwrap();
        assert_eq!(o1.shape(), &[4, 1]);
    }
}

#[test]
fn gather_over_layouts_including_expanded_index() {
    let mut rng = Rng(3);
    for (xs, d, is) in [
        (vec![4usize, 5], 0usize, vec![3usize, 5]),
        (vec![4, 5], 1, vec![4, 7]),
        (vec![4, 5], 1, vec![2, 3]),
        (vec![3, 4, 2], 2, vec![3, 2, 2]),
        (vec![3, 4, 2], 0, vec![1, 4, 1]),
        (vec![3, 4], 0, vec![0, 4]),
    ] {
        let x = rng.small(numel(&xs), -9, 9);
        let idx: Vec<i64> = (0..numel(&is)).map(|_| rng.below(xs[d]) as i64).collect();
        let want = registry_ref(
            "gather",
            &[(&x, &xs, DType::F64), (&fl(&idx), &is, IDX)],
            pd(d as i64),
        );
        for xl in layouts(&x, &xs, DType::F64) {
            for idt in INDEX_DTYPES {
                for il in index_layouts(&idx, &is, idt) {
                    let out = xl.t.gather(d as i64, &il.t).unwrap();
                    assert_eq!(out.shape(), is.as_slice());
                    assert_same!(
                        f64s(&out),
                        want,
                        "gather {xs:?} d{d} x:{} idx:{} {idt}",
                        xl.name,
                        il.name
                    );
                }
            }
        }
    }
    // an expanded index (stride 0): the embedding pattern idx[n,1] -> [n, m]
    let (xs, n, m) = ([6usize, 4], 5usize, 4usize);
    let x = rng.small(24, -9, 9);
    let rows: Vec<i64> = vec![5, 0, 2, 2, 1];
    for idt in INDEX_DTYPES {
        let e = ints(&rows, &[n, 1], idt)
            .expand(&[n as i64, m as i64])
            .unwrap();
        assert_eq!(e.stride(), &[1, 0]);
        let full: Vec<i64> = rows.iter().flat_map(|&v| vec![v; m]).collect();
        let want = registry_ref(
            "gather",
            &[(&x, &xs, DType::F32), (&fl(&full), &[n, m], IDX)],
            pd(0),
        );
        for xl in layouts(&x, &xs, DType::F32) {
            assert_same!(
                f64s(&xl.t.gather(0, &e).unwrap()),
                want,
                "expanded gather {idt} {}",
                xl.name
            );
        }
    }
}

#[test]
fn gather_every_value_dtype_and_0d() {
    let mut rng = Rng(4);
    for dt in VALUE_DTYPES.iter().copied().chain([DType::Bool]) {
        let x = vals_for(dt, 6, &mut rng);
        let idx = vec![2i64, 0, 1, 1, 0, 2];
        let want = registry_ref(
            "gather",
            &[(&x, &[2, 3], dt), (&fl(&idx), &[2, 3], IDX)],
            pd(-1),
        );
        let out = tensor(&x, &[2, 3], dt)
            .gather(-1, &ints(&idx, &[2, 3], DType::I32))
            .unwrap();
        assert_eq!(out.dtype(), dt);
        assert_same!(f64s(&out), want, "{dt}");
    }
    let s = tensor(&[7.0], &[], DType::F32);
    let g = s.gather(0, &ints(&[0], &[], DType::I64)).unwrap();
    assert_eq!(g.shape(), &[] as &[usize]);
    assert_eq!(f64s(&g), vec![7.0]);
}

#[test]
fn take_wraps_negative_indices() {
    let mut rng = Rng(5);
    let xs = [3usize, 4];
    let x = rng.small(12, -9, 9);
    let idx = vec![-1i64, 0, 11, -12, 5, 5];
    let want = registry_ref(
        "take",
        &[(&x, &xs, DType::I32), (&fl(&idx), &[2, 3], IDX)],
        Params::default(),
    );
    for xl in layouts(&x, &xs, DType::I32) {
        for idt in [DType::I64, DType::I32] {
            for il in index_layouts(&idx, &[2, 3], idt) {
                let out = xl.t.take(&il.t).unwrap();
                assert_eq!(out.shape(), &[2, 3]);
                assert_same!(f64s(&out), want, "take x:{} idx:{} {idt}", xl.name, il.name);
            }
        }
    }
}

#[test]
fn embedding_and_advanced_index() {
    let mut rng = Rng(6);
    let ws = [7usize, 3];
    let w = rng.small(21, -9, 9);
    let idx = vec![6i64, 0, 3, 3, 1, 2];
    let want = registry_ref(
        "embedding",
        &[(&w, &ws, DType::BF16), (&fl(&idx), &[2, 3], IDX)],
        Params::default(),
    );
    for wl in layouts(&w, &ws, DType::BF16) {
        for idt in INDEX_DTYPES {
            for il in index_layouts(&idx, &[2, 3], idt) {
                let out = wl.t.embedding(&il.t).unwrap();
                assert_eq!(out.shape(), &[2, 3, 3]);
                assert_eq!(out.dtype(), DType::BF16);
                assert_same!(
                    f64s(&out),
                    want,
                    "embedding w:{} idx:{} {idt}",
                    wl.name,
                    il.name
                );
            }
        }
    }
    // x[:, idx] with a 2-D idx and negative indices
    let xs = [2usize, 5, 3];
    let x = rng.small(30, -9, 9);
    let idx = vec![-1i64, 0, 4, -5];
    let want = registry_ref(
        "index",
        &[(&x, &xs, DType::F32), (&fl(&idx), &[2, 2], IDX)],
        pd(1),
    );
    for xl in layouts(&x, &xs, DType::F32) {
        for il in index_layouts(&idx, &[2, 2], DType::I64) {
            let out = xl.t.index(1, &il.t).unwrap();
            assert_eq!(out.shape(), &[2, 2, 2, 3]);
            assert_same!(f64s(&out), want, "index x:{} idx:{}", xl.name, il.name);
        }
    }
    // a 0-d index drops the dim; an empty index gives a size-0 dim
    let out = tensor(&x, &xs, DType::F32)
        .index(2, &ints(&[1], &[], DType::U32))
        .unwrap();
    assert_eq!(out.shape(), &[2, 5]);
    let out = tensor(&x, &xs, DType::F32)
        .index(0, &ints(&[], &[0], DType::I64))
        .unwrap();
    assert_eq!(out.shape(), &[0, 5, 3]);
}

#[test]
fn index_mask_selects_leading_dims() {
    let mut rng = Rng(7);
    let xs = [3usize, 4, 2];
    let x = rng.small(24, -9, 9);
    let m: Vec<f64> = rng.small(12, 0, 2);
    let want = registry_ref(
        "index_mask",
        &[(&x, &xs, DType::F32), (&m, &[3, 4], MASK)],
        Params::default(),
    );
    let rows = m.iter().filter(|&&v| v != 0.0).count();
    for xl in layouts(&x, &xs, DType::F32) {
        for ml in layouts(&m, &[3, 4], DType::Bool) {
            let out = xl.t.index_mask(&ml.t).unwrap();
            assert_eq!(out.shape(), &[rows, 2]);
            assert_same!(f64s(&out), want, "index_mask x:{} m:{}", xl.name, ml.name);
        }
    }
    // a mask over every dim is masked_select
    let full = rng.small(24, 0, 2);
    let mt = tensor(&full, &xs, DType::Bool);
    let xt = tensor(&x, &xs, DType::F32);
    assert_same!(
        f64s(&xt.index_mask(&mt).unwrap()),
        f64s(&xt.masked_select(&mt).unwrap()),
        "mask over all dims"
    );
}

// ---------------------------------------------------------------------------------------------
// scatters

/// The registry's reference of `scatter` (`red` None) or `scatter_reduce` for contiguous
/// operands of dtype `dt` (`self` of shape `xs`, index of shape `is`, src of shape `ss`).
#[allow(clippy::too_many_arguments)]
fn scatter_want(
    base: &[f64],
    xs: &[usize],
    d: i64,
    idx: &[i64],
    is: &[usize],
    src: &[f64],
    ss: &[usize],
    red: Option<ScatterReduce>,
    include_self: bool,
    dt: DType,
) -> Vec<f64> {
    let fi = fl(idx);
    let args = [(base, xs, dt), (&fi[..], is, IDX), (src, ss, dt)];
    match red {
        None => registry_ref("scatter", &args, pd(d)),
        Some(r) => registry_ref("scatter_reduce", &args, pred(d, r, include_self)),
    }
}

#[test]
fn scatter_family_in_place_through_every_layout() {
    let mut rng = Rng(8);
    for (xs, d, is, ss) in [
        (vec![4usize, 5], 0usize, vec![6usize, 5], vec![6usize, 5]),
        (vec![4, 5], 1, vec![3, 8], vec![4, 9]),
        (vec![3, 4, 2], 1, vec![2, 6, 2], vec![3, 6, 2]),
        (vec![4, 1], 0, vec![5, 1], vec![5, 1]),
        (vec![4, 3], 0, vec![0, 3], vec![1, 3]),
    ] {
        let base = rng.small(numel(&xs), -4, 5);
        let idx: Vec<i64> = (0..numel(&is)).map(|_| rng.below(xs[d]) as i64).collect();
        let src = rng.small(numel(&ss), -4, 5);
        let cases: Vec<(&str, Option<ScatterReduce>, bool)> = vec![
            ("scatter", None, true),
            ("scatter_add", None, true),
            ("sum", Some(ScatterReduce::Sum), false),
            ("prod", Some(ScatterReduce::Prod), true),
            ("prod", Some(ScatterReduce::Prod), false),
            ("mean", Some(ScatterReduce::Mean), true),
            ("mean", Some(ScatterReduce::Mean), false),
            ("amax", Some(ScatterReduce::Amax), true),
            ("amin", Some(ScatterReduce::Amin), false),
        ];
        for (name, red, incl) in cases {
            let want = if name == "scatter_add" {
                registry_ref(
                    "scatter_add",
                    &[
                        (&base, &xs, DType::F32),
                        (&fl(&idx), &is, IDX),
                        (&src, &ss, DType::F32),
                    ],
                    pd(d as i64),
                )
            } else {
                scatter_want(
                    &base,
                    &xs,
                    d as i64,
                    &idx,
                    &is,
                    &src,
                    &ss,
                    red,
                    incl,
                    DType::F32,
                )
            };
            let nl = layouts(&base, &xs, DType::F32).len();
            for li in 0..nl {
                for idt in INDEX_DTYPES {
                    for il in index_layouts(&idx, &is, idt).into_iter().take(3) {
                        for sl in layouts(&src, &ss, DType::F32).into_iter().step_by(2) {
                            let dl = layouts(&base, &xs, DType::F32).swap_remove(li);
                            let v0 = dl.t.version();
                            let (t, i, s) = (&dl.t, &il.t, &sl.t);
                            let res = match (name, red) {
                                ("scatter", _) => t.scatter_(d as i64, i, s),
                                ("scatter_add", _) => t.scatter_add_(d as i64, i, s),
                                (_, Some(rd)) => t.scatter_reduce_(d as i64, i, s, rd, incl),
                                (_, None) => unreachable!(),
                            }
                            .unwrap();
                            assert!(res.shares_storage_with(&dl.t));
                            let ctx = format!(
                                "{name} incl={incl} {xs:?} d{d} self:{} idx:{} {idt} src:{}",
                                dl.name, il.name, sl.name
                            );
                            assert_same!(f64s(&dl.t), want, "{ctx}");
                            assert!(
                                dl.t.version() > v0 || numel(&is) == 0,
                                "{ctx}: version bumped"
                            );
                            dl.guards_intact();
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn scatter_with_an_expanded_index_through_every_self_layout() {
    // idx [k, 1] expanded to [k, m] (stride 0) must act as its materialised copy
    let mut rng = Rng(17);
    let (xs, k, m) = ([5usize, 4], 7usize, 4usize);
    let base = rng.small(20, -4, 5);
    let rows: Vec<i64> = (0..k).map(|_| rng.below(5) as i64).collect();
    let full: Vec<i64> = rows.iter().flat_map(|&v| vec![v; m]).collect();
    let src = rng.small(k * m, -4, 5);
    let is = [k, m];
    for reduce in [
        None,
        Some(ScatterReduce::Sum),
        Some(ScatterReduce::Amax),
        Some(ScatterReduce::Mean),
    ] {
        let want = scatter_want(
            &base,
            &xs,
            0,
            &full,
            &is,
            &src,
            &is,
            reduce,
            true,
            DType::F32,
        );
        for idt in INDEX_DTYPES {
            let e = ints(&rows, &[k, 1], idt)
                .expand(&[k as i64, m as i64])
                .unwrap();
            assert_eq!(e.stride()[1], 0);
            for li in 0..layouts(&base, &xs, DType::F32).len() {
                let dl = layouts(&base, &xs, DType::F32).swap_remove(li);
                let srct = tensor(&src, &is, DType::F32);
                match reduce {
                    None => dl.t.scatter_(0, &e, &srct),
                    Some(rd) => dl.t.scatter_reduce_(0, &e, &srct, rd, true),
                }
                .unwrap();
                assert_same!(f64s(&dl.t), want, "{reduce:?} {idt} self:{}", dl.name);
                dl.guards_intact();
            }
        }
    }
}

#[test]
fn scatter_out_of_place_and_scalar_value() {
    let mut rng = Rng(9);
    let xs = [3usize, 4];
    let base = rng.small(12, -4, 5);
    let idx = vec![2i64, 0, 1, 2, 0, 0, 0, 1];
    let is = [2usize, 4];
    let src = rng.small(8, -4, 5);
    for dt in VALUE_DTYPES.iter().copied().chain([DType::Bool]) {
        let b: Vec<f64> = base
            .iter()
            .map(|v| {
                if dt == DType::Bool {
                    (*v > 0.0) as u8 as f64
                } else if dt == DType::U8 {
                    v.abs()
                } else {
                    *v
                }
            })
            .collect();
        let s: Vec<f64> = src
            .iter()
            .map(|v| {
                if dt == DType::Bool {
                    (*v > 0.0) as u8 as f64
                } else if dt == DType::U8 {
                    v.abs()
                } else {
                    *v
                }
            })
            .collect();
        let bt = tensor(&b, &xs, dt);
        let out = bt
            .scatter(0, &ints(&idx, &is, DType::U32), &tensor(&s, &is, dt))
            .unwrap();
        assert_eq!(out.dtype(), dt);
        assert_same!(f64s(&bt), b, "out-of-place leaves self");
        let want = scatter_want(&b, &xs, 0, &idx, &is, &s, &is, None, true, dt);
        assert_same!(f64s(&out), want, "scatter {dt}");
        let out = bt
            .scatter_value(0, &ints(&idx, &is, DType::I64), 1i64)
            .unwrap();
        let want = registry_ref(
            "scatter_value",
            &[(&b, &xs, dt), (&fl(&idx), &is, IDX)],
            pds(0, 1i64),
        );
        assert_same!(f64s(&out), want, "scatter value {dt}");
        if dt != DType::Bool {
            let out = bt
                .scatter_add(0, &ints(&idx, &is, DType::I32), &tensor(&s, &is, dt))
                .unwrap();
            let want = registry_ref(
                "scatter_add",
                &[(&b, &xs, dt), (&fl(&idx), &is, IDX), (&s, &is, dt)],
                pd(0),
            );
            assert_same!(f64s(&out), want, "scatter_add {dt}");
            let reds: &[ScatterReduce] = if matches!(dt, DType::U8 | DType::I8) {
                &[
                    ScatterReduce::Mean,
                    ScatterReduce::Amax,
                    ScatterReduce::Amin,
                ]
            } else {
                &[
                    ScatterReduce::Mean,
                    ScatterReduce::Amax,
                    ScatterReduce::Amin,
                    ScatterReduce::Prod,
                ]
            };
            for &red in reds {
                for incl in [true, false] {
                    let out = bt
                        .scatter_reduce(
                            1,
                            &ints(&idx, &is, DType::I64),
                            &tensor(&s, &is, dt),
                            red,
                            incl,
                        )
                        .unwrap();
                    let want2 = scatter_want(&b, &xs, 1, &idx, &is, &s, &is, Some(red), incl, dt);
                    assert_same!(f64s(&out), want2, "scatter_reduce {red:?} incl={incl} {dt}");
                }
            }
        }
    }
    // a 0-d tensor value, and scatter into a 0-d tensor
    let z = tensor(&[1.0], &[], DType::F32);
    let v = Tensor::scalar(9.5f64, DType::F64, &CPU).unwrap();
    let out = z
        .scatter_value(0, &ints(&[0], &[], DType::I64), &v)
        .unwrap();
    assert_eq!(f64s(&out), vec![9.5]);
    assert_eq!(out.shape(), &[] as &[usize]);
}

#[test]
fn scatter_reduce_nan_propagates_and_int_mean_floors() {
    let x = tensor(&[0.0, 0.0, 5.0], &[3], DType::F32);
    let idx = ints(&[0, 0, 1, 1], &[4], DType::I64);
    let src = tensor(&[1.0, f64::NAN, 3.0, 2.0], &[4], DType::F32);
    let out = x
        .scatter_reduce(0, &idx, &src, ScatterReduce::Amax, true)
        .unwrap();
    let o = f64s(&out);
    assert!(o[0].is_nan());
    assert_eq!(&o[1..], &[3.0, 5.0]);
    let out = x
        .scatter_reduce(0, &idx, &src, ScatterReduce::Amin, false)
        .unwrap();
    let o = f64s(&out);
    assert!(o[0].is_nan());
    assert_eq!(
        &o[1..],
        &[2.0, 5.0],
        "include_self=false ignores self, untouched keep it"
    );
    // integer mean: floor division, as PyTorch (-7 / 2 -> -4)
    let xi = ints(&[0, 3], &[2], DType::I64);
    let out = xi
        .scatter_reduce(
            0,
            &ints(&[0, 0], &[2], DType::I32),
            &ints(&[-3, -4], &[2], DType::I64),
            ScatterReduce::Mean,
            false,
        )
        .unwrap();
    assert_eq!(out.to_vec::<i64>().unwrap(), vec![-4, 3]);
}

#[test]
fn index_add_copy_fill_through_every_layout() {
    let mut rng = Rng(10);
    for (xs, d, idx) in [
        (vec![5usize, 4], 0usize, vec![4i64, 0, 4, 2, 4, 1]),
        (vec![5, 4], 1, vec![3, 3, 0]),
        (vec![2, 3, 4], 2, vec![1, 0, 3, 1]),
        (vec![2, 3, 4], 0, vec![]),
        (vec![1, 3], 0, vec![0, 0]),
    ] {
        let base = rng.small(numel(&xs), -4, 5);
        let mut ss = xs.clone();
        ss[d] = idx.len();
        let src = rng.small(numel(&ss), -4, 5);
        let n = idx.len();
        let (fi, is) = (fl(&idx), [n]);
        let args = [
            (&base[..], &xs[..], DType::F64),
            (&fi[..], &is[..], IDX),
            (&src[..], &ss[..], DType::F64),
        ];
        let add = registry_ref("index_add", &args, pds(d as i64, 2i64));
        let copy = registry_ref("index_copy", &args, pd(d as i64));
        let fill = registry_ref("index_fill", &args[..2], pds(d as i64, -7.5));
        for dl in layouts(&base, &xs, DType::F64) {
            for idt in INDEX_DTYPES {
                for il in index_layouts(&idx, &[idx.len()], idt) {
                    for sl in layouts(&src, &ss, DType::F64).into_iter().step_by(2) {
                        let t = lay(
                            dl.name,
                            &base,
                            &xs,
                            dl.t.stride(),
                            dl.t.storage_offset(),
                            DType::F64,
                        );
                        t.t.index_add_(d as i64, &il.t, &sl.t, 2i64).unwrap();
                        assert_same!(
                            f64s(&t.t),
                            add,
                            "index_add {xs:?} d{d} self:{} idx:{} {idt} src:{}",
                            dl.name,
                            il.name,
                            sl.name
                        );
                        t.guards_intact();
                    }
                    let t = lay(
                        dl.name,
                        &base,
                        &xs,
                        dl.t.stride(),
                        dl.t.storage_offset(),
                        DType::F64,
                    );
                    let srct = tensor(&src, &ss, DType::F64);
                    t.t.index_copy_(d as i64, &il.t, &srct).unwrap();
                    assert_same!(
                        f64s(&t.t),
                        copy,
                        "index_copy self:{} idx:{} {idt}",
                        dl.name,
                        il.name
                    );
                    t.guards_intact();
                    let t = lay(
                        dl.name,
                        &base,
                        &xs,
                        dl.t.stride(),
                        dl.t.storage_offset(),
                        DType::F64,
                    );
                    t.t.index_fill_(d as i64, &il.t, -7.5).unwrap();
                    assert_same!(
                        f64s(&t.t),
                        fill,
                        "index_fill self:{} idx:{}",
                        dl.name,
                        il.name
                    );
                    t.guards_intact();
                }
            }
        }
    }
}

#[test]
fn index_ops_dtypes_duplicates_and_negative_fill() {
    let mut rng = Rng(11);
    for dt in VALUE_DTYPES {
        let base = vals_for(dt, 12, &mut rng);
        let src = vals_for(dt, 9, &mut rng);
        let idx = vec![1i64, 3, 1];
        let out = tensor(&base, &[4, 3], dt)
            .index_add(
                0,
                &ints(&idx, &[3], DType::U32),
                &tensor(&src, &[3, 3], dt),
                1i64,
            )
            .unwrap();
        let fi = fl(&idx);
        let args = [
            (&base[..], &[4usize, 3][..], dt),
            (&fi[..], &[3usize][..], IDX),
            (&src[..], &[3usize, 3][..], dt),
        ];
        let want = registry_ref("index_add", &args, pds(0, 1i64));
        assert_same!(f64s(&out), want, "index_add {dt}");
        // duplicates in index_copy: the last wins
        let out = tensor(&base, &[4, 3], dt)
            .index_copy(0, &ints(&idx, &[3], DType::I32), &tensor(&src, &[3, 3], dt))
            .unwrap();
        assert_same!(
            f64s(&out),
            registry_ref("index_copy", &args, pd(0)),
            "index_copy {dt}"
        );
    }
    // index_fill wraps negatives (PyTorch), value may be a 0-d tensor
    let x = tensor(&[0.0; 6], &[2, 3], DType::I32);
    let v = Tensor::scalar(4i64, DType::I64, &CPU).unwrap();
    let out = x.index_fill(1, &ints(&[-1], &[1], DType::I64), &v).unwrap();
    assert_eq!(f64s(&out), vec![0., 0., 4., 0., 0., 4.]);
    // bool index_fill / index_copy
    let b = tensor(&[0.0; 4], &[4], DType::Bool);
    let out = b
        .index_fill(0, &ints(&[1, 3], &[2], DType::U32), true)
        .unwrap();
    assert_eq!(
        out.to_vec::<bool>().unwrap(),
        vec![false, true, false, true]
    );
}

#[test]
fn scatter_writes_through_a_transposed_self_not_a_temporary() {
    // the bug class from DESIGN.md: an in-place write into a non-contiguous view
    let w = tensor(
        &(0..12).map(|v| v as f64).collect::<Vec<_>>(),
        &[4, 3],
        DType::F32,
    );
    let wt = w.t().unwrap(); // [3, 4], strides [1, 3]
    let idx = ints(&[0, 2], &[2], DType::I64);
    let src = tensor(&[100.0; 8], &[2, 4], DType::F32);
    wt.index_add_(0, &idx, &src, 1i64).unwrap();
    let want = [
        100., 1., 102., 103., 4., 105., 106., 7., 108., 109., 10., 111.,
    ];
    assert_eq!(f64s(&w), want.to_vec(), "the base tensor sees the writes");
    let m = tensor(
        &[1., 0., 0., 1., 0., 0., 0., 0., 0., 0., 0., 1.],
        &[3, 4],
        DType::Bool,
    );
    wt.masked_fill_(&m, -1.0).unwrap();
    assert_eq!(f64s(&w)[0], -1.0);
    assert_eq!(f64s(&w)[9], -1.0);
    assert_eq!(f64s(&w)[11], -1.0);
}

// ---------------------------------------------------------------------------------------------
// masked ops

#[test]
fn masked_fill_select_scatter_over_layouts() {
    let mut rng = Rng(12);
    let xs = [3usize, 4];
    let x = rng.small(12, -9, 9);
    let m = rng.small(12, 0, 2);
    let n_true = m.iter().filter(|&&v| v != 0.0).count();
    let src = rng.small(n_true + 2, -9, 9);
    let (xa, ma) = ((&x[..], &xs[..], DType::F16), (&m[..], &xs[..], MASK));
    let src_shape = [src.len()];
    let sa = (&src[..], &src_shape[..], DType::F16);
    let fill = |v: f64| registry_ref("masked_fill", &[xa, ma], ps(v));
    let select = registry_ref("masked_select", &[xa, ma], Params::default());
    let scattered = registry_ref("masked_scatter", &[xa, ma, sa], Params::default());
    for xl in layouts(&x, &xs, DType::F16) {
        for ml in layouts(&m, &xs, DType::Bool) {
            let ctx = format!("x:{} m:{}", xl.name, ml.name);
            let out = xl.t.masked_fill(&ml.t, 2.5).unwrap();
            assert_same!(f64s(&out), fill(2.5), "masked_fill {ctx}");
            let out = xl.t.masked_select(&ml.t).unwrap();
            assert_same!(f64s(&out), select, "masked_select {ctx}");
            let out =
                xl.t.masked_scatter(&ml.t, &tensor(&src, &[src.len()], DType::F16))
                    .unwrap();
            assert_same!(f64s(&out), scattered, "masked_scatter {ctx}");
            // in place, through the layout
            let t = lay(
                xl.name,
                &x,
                &xs,
                xl.t.stride(),
                xl.t.storage_offset(),
                DType::F16,
            );
            t.t.masked_fill_(&ml.t, -3.0).unwrap();
            assert_same!(f64s(&t.t), fill(-3.0), "masked_fill_ {ctx}");
            t.guards_intact();
            let t = lay(
                xl.name,
                &x,
                &xs,
                xl.t.stride(),
                xl.t.storage_offset(),
                DType::F16,
            );
            // the source in a transposed layout: read in its logical order
            let sl = layouts(&src[..12.min(src.len())], &[12.min(src.len())], DType::F16);
            t.t.masked_scatter_(&ml.t, &sl[2].t).unwrap();
            assert_same!(f64s(&t.t), scattered, "masked_scatter_ {ctx}");
            t.guards_intact();
        }
    }
    // broadcast masks: a row mask and a column mask
    let row = tensor(&[1., 0., 0., 1.], &[4], DType::Bool);
    let xt = tensor(&x, &xs, DType::F32);
    let xa = (&x[..], &xs[..], DType::F32);
    let row_a = (&[1., 0., 0., 1.][..], &[4usize][..], MASK);
    assert_same!(
        f64s(&xt.masked_fill(&row, 0.0).unwrap()),
        registry_ref("masked_fill", &[xa, row_a], ps(0.0)),
        "row mask"
    );
    assert_same!(
        f64s(&xt.masked_select(&row).unwrap()),
        registry_ref("masked_select", &[xa, row_a], Params::default()),
        "row mask select"
    );
    let col = tensor(&[0., 1., 0.], &[3, 1], DType::Bool);
    let t = xt.clone_tensor().unwrap();
    t.masked_fill_(&col, &Tensor::scalar(5i64, DType::I64, &CPU).unwrap())
        .unwrap();
    let col_a = (&[0., 1., 0.][..], &[3usize, 1][..], MASK);
    assert_same!(
        f64s(&t),
        registry_ref("masked_fill", &[xa, col_a], ps(5i64)),
        "column mask, 0-d tensor value"
    );
    // out of place masked_fill broadcasts self against the mask
    let out = tensor(&[1., 2.], &[2], DType::I64)
        .masked_fill(&col, 9i64)
        .unwrap();
    assert_eq!(out.shape(), &[3, 2]);
    assert_eq!(out.dtype(), DType::I64);
    assert_eq!(f64s(&out), vec![1., 2., 9., 9., 1., 2.]);
}

#[test]
fn masked_ops_every_dtype() {
    let mut rng = Rng(13);
    for dt in VALUE_DTYPES
        .iter()
        .copied()
        .chain([DType::Bool, DType::U32])
    {
        let x = vals_for(dt, 10, &mut rng);
        let m = rng.small(10, 0, 2);
        let args = [
            (&x[..], &[2usize, 5][..], dt),
            (&m[..], &[2usize, 5][..], MASK),
        ];
        let xt = tensor(&x, &[2, 5], dt);
        let mt = tensor(&m, &[2, 5], DType::Bool);
        let out = xt.masked_select(&mt).unwrap();
        assert_eq!(out.dtype(), dt);
        assert_same!(
            f64s(&out),
            registry_ref("masked_select", &args, Params::default()),
            "{dt}"
        );
        let out = xt.masked_fill(&mt, 1i64).unwrap();
        assert_eq!(out.dtype(), dt, "masked_fill keeps self's dtype");
        assert_same!(
            f64s(&out),
            registry_ref("masked_fill", &args, ps(1i64)),
            "{dt}"
        );
    }
}

#[test]
fn nonzero_over_layouts_and_shapes() {
    let mut rng = Rng(14);
    for xs in [
        vec![3usize, 4],
        vec![2, 3, 2],
        vec![5],
        vec![0, 3],
        vec![4, 1],
    ] {
        let x = rng.small(numel(&xs), -1, 2);
        for dt in [DType::F32, DType::Bool, DType::I8] {
            let want = registry_ref_i64("nonzero", &[(&x, &xs, dt)], Params::default());
            for xl in layouts(&x, &xs, dt) {
                let out = xl.t.nonzero().unwrap();
                assert_eq!(out.shape(), &[want.len() / xs.len(), xs.len()]);
                assert_eq!(i64s(&out), want, "nonzero {xs:?} {dt} {}", xl.name);
            }
        }
    }
    let z = tensor(&[3.0], &[], DType::F32).nonzero().unwrap();
    assert_eq!(z.shape(), &[1, 0]);
    let z = tensor(&[0.0], &[], DType::F32).nonzero().unwrap();
    assert_eq!(z.shape(), &[0, 0]);
}

// ---------------------------------------------------------------------------------------------
// the candle sequence, determinism, large (parallel) sizes

#[test]
fn u32_index_keeps_its_dtype_through_unsqueeze_expand_contiguous() {
    // candle's Metal backend turned this index into f32 and scatter_add then failed
    let idx = Tensor::from_vec(vec![2u32, 0, 2, 1], [4]).unwrap();
    let e = idx.unsqueeze(1).unwrap().expand(&[4, 3]).unwrap();
    assert_eq!(e.dtype(), DType::U32);
    assert_eq!(e.stride(), &[1, 0]);
    let c = e.contiguous().unwrap();
    assert_eq!(c.dtype(), DType::U32);
    assert!(c.is_contiguous());
    assert_eq!(
        c.to_vec::<u32>().unwrap(),
        vec![2, 2, 2, 0, 0, 0, 2, 2, 2, 1, 1, 1]
    );
    let src = tensor(
        &(0..12).map(|v| v as f64).collect::<Vec<_>>(),
        &[4, 3],
        DType::F32,
    );
    for index in [&e, &c] {
        let out = Tensor::zeros([3, 3], DType::F32, &CPU)
            .unwrap()
            .scatter_add(0, index, &src)
            .unwrap();
        assert_eq!(f64s(&out), vec![3., 4., 5., 9., 10., 11., 6., 8., 10.]);
        assert_eq!(index.dtype(), DType::U32);
    }
    let g = Tensor::zeros([3, 3], DType::F32, &CPU)
        .unwrap()
        .gather(0, &c)
        .unwrap();
    assert_eq!(g.shape(), &[4, 3]);
}

/// Sums in logical order in f32: what a deterministic scatter_add must give bitwise.
fn scatter_add_f32_sequential(
    dst: &mut [f32],
    cols: usize,
    idx: &[i64],
    src: &[f32],
    row_index: bool,
) {
    for (p, &s) in src.iter().enumerate() {
        let (i, j) = (p / cols, p % cols);
        let k = if row_index { idx[i] } else { idx[p] } as usize;
        dst[k * cols + j] += s;
    }
}

#[test]
fn accumulating_scatters_are_deterministic_across_runs_and_threads() {
    let mut rng = Rng(15);
    let (rows, cols, dst_rows) = (600usize, 128usize, 37usize);
    let idx: Vec<i64> = (0..rows).map(|_| rng.below(dst_rows) as i64).collect();
    let full: Vec<i64> = (0..rows * cols)
        .map(|_| rng.below(dst_rows) as i64)
        .collect();
    let src: Vec<f32> = (0..rows * cols)
        .map(|_| (rng.uniform() * 2.0 - 1.0) as f32 * 1e3)
        .collect();
    let srct = Tensor::from_vec(src.clone(), [rows, cols]).unwrap();
    let mut want_rows = vec![0f32; dst_rows * cols];
    scatter_add_f32_sequential(&mut want_rows, cols, &idx, &src, true);
    let mut want_full = vec![0f32; dst_rows * cols];
    scatter_add_f32_sequential(&mut want_full, cols, &full, &src, false);
    let run = || -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let z = || Tensor::zeros([dst_rows, cols], DType::F32, &CPU).unwrap();
        let i1 = ints(&idx, &[rows], DType::I64);
        let a = z()
            .index_add(0, &i1, &srct, 1i64)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let e = ints(&idx, &[rows, 1], DType::U32)
            .expand(&[rows as i64, cols as i64])
            .unwrap();
        let b = z()
            .scatter_add(0, &e, &srct)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let f = ints(&full, &[rows, cols], DType::I32);
        let c = z()
            .scatter_add(0, &f, &srct)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        (a, b, c)
    };
    for threads in [1usize, 2, 3, 8] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        for _ in 0..5 {
            let (a, b, c) = pool.install(run);
            assert!(
                a.iter()
                    .zip(&want_rows)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "index_add, {threads} threads"
            );
            assert!(
                b.iter()
                    .zip(&want_rows)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "expanded scatter_add, {threads} threads"
            );
            assert!(
                c.iter()
                    .zip(&want_full)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "scatter_add, {threads} threads"
            );
        }
    }
    // scatter with duplicates: the last in logical order wins, on any thread count
    let vals: Vec<f32> = (0..rows * cols).map(|p| p as f32).collect();
    let vt = Tensor::from_vec(vals, [rows, cols]).unwrap();
    let mut want = vec![-1f32; dst_rows * cols];
    for p in 0..rows * cols {
        want[full[p] as usize * cols + p % cols] = p as f32;
    }
    for threads in [1usize, 4] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let got = pool.install(|| {
            Tensor::full([dst_rows, cols], -1.0, DType::F32, &CPU)
                .unwrap()
                .scatter(0, &ints(&full, &[rows, cols], DType::I64), &vt)
                .unwrap()
                .to_vec::<f32>()
                .unwrap()
        });
        assert_eq!(got, want, "scatter last wins, {threads} threads");
    }
}

#[test]
fn large_gathers_and_scatters_match_the_reference() {
    // big enough for the parallel paths (rows split by index value, outer positions split)
    let mut rng = Rng(16);
    let (n, m, k) = (3000usize, 40usize, 900usize);
    let x = rng.small(n * m, -50, 50);
    let idx: Vec<i64> = (0..k).map(|_| rng.below(n) as i64).collect();
    let xt = tensor(&x, &[n, m], DType::F32);
    let fi = fl(&idx);
    let want = registry_ref(
        "index_select",
        &[(&x, &[n, m], DType::F32), (&fi, &[k], IDX)],
        pd(0),
    );
    assert_same!(
        f64s(&xt.index_select(0, &ints(&idx, &[k], DType::U32)).unwrap()),
        want,
        "index_select"
    );
    let xtt = tensor(&x, &[m, n], DType::F32).t().unwrap(); // [n, m] transposed
    let xv: Vec<f64> = f64s(&xtt);
    let want = registry_ref(
        "index_select",
        &[(&xv, &[n, m], DType::F32), (&fi, &[k], IDX)],
        pd(0),
    );
    assert_same!(
        f64s(&xtt.index_select(0, &ints(&idx, &[k], DType::I64)).unwrap()),
        want,
        "index_select transposed"
    );
    // scatter_add along dim 1 (many outer rows, a short axis)
    let full: Vec<i64> = (0..n * m).map(|_| rng.below(7) as i64).collect();
    let src = rng.small(n * m, -5, 5);
    let base = rng.small(n * 7, -5, 5);
    let want = registry_ref(
        "scatter_add",
        &[
            (&base, &[n, 7], DType::F64),
            (&fl(&full), &[n, m], IDX),
            (&src, &[n, m], DType::F64),
        ],
        pd(1),
    );
    let out = tensor(&base, &[n, 7], DType::F64)
        .scatter_add(
            1,
            &ints(&full, &[n, m], DType::I32),
            &tensor(&src, &[n, m], DType::F64),
        )
        .unwrap();
    assert_same!(f64s(&out), want, "scatter_add dim 1");
    // amax with include_self=false along dim 0 (rows split)
    let full0: Vec<i64> = (0..n * m).map(|_| rng.below(50) as i64).collect();
    let base0 = rng.small(50 * m, -5, 5);
    let want = scatter_want(
        &base0,
        &[50, m],
        0,
        &full0,
        &[n, m],
        &src,
        &[n, m],
        Some(ScatterReduce::Amax),
        false,
        DType::F32,
    );
    let out = tensor(&base0, &[50, m], DType::F32)
        .scatter_reduce(
            0,
            &ints(&full0, &[n, m], DType::I64),
            &tensor(&src, &[n, m], DType::F32),
            ScatterReduce::Amax,
            false,
        )
        .unwrap();
    assert_same!(f64s(&out), want, "scatter_reduce amax");
    // masked_select / nonzero over many chunks
    let mask = rng.small(n * m, 0, 2);
    let mt = tensor(&mask, &[n, m], DType::Bool);
    let nm = [n, m];
    let (xa, ma) = ((&x[..], &nm[..], DType::F32), (&mask[..], &nm[..], MASK));
    assert_same!(
        f64s(&xt.masked_select(&mt).unwrap()),
        registry_ref("masked_select", &[xa, ma], Params::default()),
        "masked_select"
    );
    assert_eq!(
        i64s(&mt.nonzero().unwrap()),
        registry_ref_i64("nonzero", &[ma], Params::default()),
        "nonzero"
    );
    let srcs = rng.small(n * m, -5, 5);
    let out = xt
        .masked_scatter(&mt, &tensor(&srcs, &[n * m], DType::F32))
        .unwrap();
    assert_same!(
        f64s(&out),
        registry_ref(
            "masked_scatter",
            &[xa, ma, (&srcs, &[n * m], DType::F32)],
            Params::default()
        ),
        "masked_scatter"
    );
}

// ---------------------------------------------------------------------------------------------
// errors: the error names what is wrong, nothing is written

#[test]
fn out_of_range_indices_name_value_dim_size_and_write_nothing() {
    let x = tensor(
        &(0..12).map(|v| v as f64).collect::<Vec<_>>(),
        &[3, 4],
        DType::F32,
    );
    let xt = tensor(
        &(0..12).map(|v| v as f64).collect::<Vec<_>>(),
        &[4, 3],
        DType::F32,
    )
    .t()
    .unwrap();
    for idt in INDEX_DTYPES {
        let bad = ints(&[0, 1, 7, 2], &[4], idt);
        let e = expect_err(
            &[&x, &bad],
            &["index_select", "7", "dim 1", "size 4"],
            || x.index_select(1, &bad),
        );
        assert!(matches!(
            e,
            Error::IndexOutOfRange {
                index: 7,
                dim: 1,
                size: 4,
                ..
            }
        ));
        let bad_rows = ints(&[0, 3, 1, 1], &[4], idt);
        let src = tensor(&[1.0; 16], &[4, 4], DType::F32);
        for t in [&x, &xt] {
            expect_err(
                &[t, &bad_rows, &src],
                &["index_add_", "3", "dim 0", "size 3"],
                || t.index_add_(0, &bad_rows, &src, 1i64),
            );
            expect_err(&[t, &bad_rows, &src], &["index_copy_", "3"], || {
                t.index_copy_(0, &bad_rows, &src)
            });
            expect_err(&[t, &bad_rows], &["index_fill_", "3"], || {
                t.index_fill_(0, &bad_rows, 0.0)
            });
            let gi = ints(&[0, 1, 2, 3, 0, 1, 2, 1], &[2, 4], idt);
            expect_err(&[t, &gi], &["3", "size 3"], || {
                t.scatter_value_(0, &gi, 1.0)
            });
            let s2 = tensor(&[1.0; 8], &[2, 4], DType::F32);
            expect_err(&[t, &gi, &s2], &["scatter_add_", "3"], || {
                t.scatter_add_(0, &gi, &s2)
            });
            expect_err(&[t, &gi, &s2], &["3"], || {
                t.scatter_reduce_(0, &gi, &s2, ScatterReduce::Mean, false)
            });
            expect_err(&[t, &gi], &["gather", "3", "dim 0", "size 3"], || {
                t.gather(0, &gi)
            });
        }
        expect_err(&[&x], &["take", "12", "size 12"], || {
            x.take(&ints(&[12], &[1], idt))
        });
        expect_err(&[&x], &["embedding", "3"], || {
            x.embedding(&ints(&[3], &[1], idt))
        });
        expect_err(&[&x], &["index", "4"], || {
            x.index(1, &ints(&[4], &[1], idt))
        });
    }
    // negatives: rejected where PyTorch rejects them, wrapped where it wraps
    let neg = ints(&[-1], &[1], DType::I64);
    expect_err(&[&x], &["index_select", "-1"], || x.index_select(0, &neg));
    expect_err(&[&x], &["gather", "-1"], || {
        x.gather(0, &ints(&[-1], &[1, 1], DType::I32))
    });
    expect_err(&[&x], &["embedding", "-1"], || x.embedding(&neg));
    let src = tensor(&[1.0; 4], &[1, 4], DType::F32);
    expect_err(&[&x, &src], &["index_add_", "-1"], || {
        x.index_add_(0, &neg, &src, 1i64)
    });
    expect_err(&[&x], &["take", "-13"], || {
        x.take(&ints(&[-13], &[1], DType::I64))
    });
    assert_eq!(
        f64s(&x.take(&ints(&[-12], &[1], DType::I64)).unwrap()),
        vec![0.0]
    );
    // the first bad index in logical order is reported
    let two_bad = ints(&[0, 9, 5], &[3], DType::I64);
    let e = x.index_select(1, &two_bad).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { index: 9, .. }), "{e}");
    // an expanded bad index
    let eb = ints(&[5], &[1, 1], DType::U32).expand(&[2, 4]).unwrap();
    expect_err(&[&x, &eb], &["5"], || x.scatter_value_(0, &eb, 0.0));
}

#[test]
fn bad_arguments_are_errors_with_operands_unchanged() {
    let x = tensor(
        &(0..12).map(|v| v as f64).collect::<Vec<_>>(),
        &[3, 4],
        DType::F32,
    );
    let fi = tensor(&[0.0, 1.0], &[2], DType::F32);
    expect_err(&[&x, &fi], &["index_select", "float32", "index"], || {
        x.index_select(0, &fi)
    });
    let u8i = tensor(&[0.0, 1.0], &[2], DType::U8);
    expect_err(&[&x, &u8i], &["uint8", "int64", "int32", "uint32"], || {
        x.gather(0, &u8i)
    });
    let i2 = ints(&[0, 1, 0, 1], &[2, 2], DType::I64);
    expect_err(&[&x, &i2], &["index_select", "1-d"], || {
        x.index_select(0, &i2)
    });
    // scatter shapes: index larger than src / self
    let big = ints(&[0; 10], &[2, 5], DType::I64);
    let i24 = ints(&[0; 8], &[2, 4], DType::I64);
    let src = tensor(&[1.0; 6], &[2, 3], DType::F32);
    expect_err(&[&x, &i24, &src], &["[2, 4]", "[2, 3]", "src"], || {
        x.scatter_(0, &i24, &src)
    });
    expect_err(&[&x, &big], &["gather", "[2, 5]", "[3, 4]"], || {
        x.gather(0, &big)
    });
    let i1 = ints(&[0], &[1], DType::I64);
    expect_err(&[&x, &i1], &["dims"], || x.gather(0, &i1));
    // dtype of the source must match self's
    let src64 = tensor(&[1.0; 8], &[2, 4], DType::F64);
    let gi = ints(&[0; 8], &[2, 4], DType::I64);
    expect_err(
        &[&x, &gi, &src64],
        &["float64", "float32", "to_dtype"],
        || x.scatter_add_(0, &gi, &src64),
    );
    expect_err(&[&x, &src64], &["index_add_", "float64"], || {
        x.index_add_(0, &ints(&[0, 1], &[2], DType::I64), &src64, 1i64)
    });
    // index_add source shape
    let s34 = tensor(&[1.0; 12], &[3, 4], DType::F32);
    expect_err(&[&x, &s34], &["index_add_", "[3, 4]", "[2, 4]"], || {
        x.index_add_(0, &ints(&[0, 1], &[2], DType::I64), &s34, 1i64)
    });
    // float alpha for an integer tensor
    let xi = ints(&[0; 4], &[2, 2], DType::I64);
    let si = ints(&[1; 4], &[2, 2], DType::I64);
    expect_err(&[&xi, &si], &["alpha", "int64"], || {
        xi.index_add_(0, &ints(&[0, 1], &[2], DType::I64), &si, 0.5)
    });
    // bool tensors don't reduce
    let xb = tensor(&[0.0; 4], &[4], DType::Bool);
    let sb = tensor(&[1.0; 4], &[4], DType::Bool);
    expect_err(&[&xb, &sb], &["bool"], || {
        xb.scatter_add_(0, &ints(&[0, 1, 2, 3], &[4], DType::I64), &sb)
    });
    // writing into an expanded self is ambiguous
    let ex = tensor(&[1.0, 2.0, 3.0, 4.0], &[1, 4], DType::F32)
        .expand(&[3, 4])
        .unwrap();
    let s1 = tensor(&[1.0; 4], &[1, 4], DType::F32);
    expect_err(&[&ex, &s1], &["share memory"], || {
        ex.index_add_(0, &ints(&[0], &[1], DType::I64), &s1, 1i64)
    });
    let m = tensor(&[1.0; 12], &[3, 4], DType::Bool);
    expect_err(&[&ex, &m], &["share memory"], || ex.masked_fill_(&m, 0.0));
    expect_err(&[&ex, &m], &["share memory"], || {
        ex.masked_scatter_(&m, &s34)
    });
    // masks are bool, broadcastable, and masked_scatter needs enough source
    let mf = tensor(&[1.0; 12], &[3, 4], DType::F32);
    expect_err(&[&x, &mf], &["masked_fill", "float32", "bool"], || {
        x.masked_fill(&mf, 0.0)
    });
    let mu = tensor(&[1.0; 12], &[3, 4], DType::U8);
    expect_err(&[&x, &mu], &["masked_select", "uint8"], || {
        x.masked_select(&mu)
    });
    let m5 = tensor(&[1.0; 5], &[5], DType::Bool);
    expect_err(&[&x, &m5], &["[5]"], || x.masked_fill_(&m5, 0.0));
    let short = tensor(&[1.0; 11], &[11], DType::F32);
    let xc = x.clone_tensor().unwrap();
    expect_err(&[&xc, &m, &short], &["masked_scatter", "12", "11"], || {
        xc.masked_scatter_(&m, &short)
    });
    let v1 = tensor(&[1.0, 2.0], &[2], DType::F32);
    expect_err(&[&x, &m, &v1], &["0-d"], || x.masked_fill(&m, &v1));
    // index_mask shape must match the leading dims
    let m3 = tensor(&[1.0; 4], &[4], DType::Bool);
    expect_err(&[&x, &m3], &["index_mask", "[4]", "[3, 4]"], || {
        x.index_mask(&m3)
    });
    // embedding needs a 2-D weight; index on a 0-d tensor
    let w3 = tensor(&[1.0; 8], &[2, 2, 2], DType::F32);
    expect_err(&[&w3], &["embedding", "2-D"], || {
        w3.embedding(&ints(&[0], &[1], DType::I64))
    });
    let s = tensor(&[1.0], &[], DType::F32);
    expect_err(&[&s], &["0-d"], || {
        s.index(0, &ints(&[0], &[1], DType::I64))
    });
    // dims out of range
    expect_err(&[&x], &["dim 2"], || {
        x.index_select(2, &ints(&[0], &[1], DType::I64))
    });
}

#[test]
fn in_place_ops_read_aliased_operands_as_they_were() {
    // src and index sharing self's storage are read as they were before the op
    let x = ints(&[1, 0, 2, 1], &[4], DType::I64);
    let out = x.scatter_(0, &x, &x).unwrap();
    // positions: x[1]=1? index=[1,0,2,1], src=[1,0,2,1]: x[1]=1, x[0]=0, x[2]=2, x[1]=1
    assert_eq!(out.to_vec::<i64>().unwrap(), vec![0, 1, 2, 1]);
    let y = tensor(&[1.0, 2.0, 3.0, 4.0], &[4], DType::F32);
    y.index_add_(0, &ints(&[3, 2, 1, 0], &[4], DType::I64), &y, 1i64)
        .unwrap();
    assert_eq!(f64s(&y), vec![5.0, 5.0, 5.0, 5.0]);
}
