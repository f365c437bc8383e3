//! Sorting and selection against the stride-check registry's references (`registry_ref`):
//! layouts of every operand, dtypes, NaN/±0/ties, rows on both sides of the radix and heap
//! thresholds (longer than the conformance matrix's sizes), rows sorted by several threads,
//! size-0/size-1 dims, and error paths with operands unchanged.

mod idx_common;

use idx_common::*;
use stride_check::registry::Params;
use stride_core::{DType, Device, Error, Scalar, Tensor};

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

fn p(dims: &[usize], ints: &[i64]) -> Params {
    Params {
        dims: dims.iter().map(|&d| d as i64).collect(),
        ints: ints.to_vec(),
        ..Params::default()
    }
}

/// Stable sort along `d`: (values, indices).
fn sort_ref(x: &[f64], xs: &[usize], dt: DType, d: usize, desc: bool) -> (Vec<f64>, Vec<i64>) {
    let a = [(x, xs, dt)];
    let ps = p(&[d], &[desc as i64, 1]);
    (
        registry_ref("sort", &a, ps.clone()),
        registry_ref_i64("sort.indices", &a, ps),
    )
}

/// The first `k` of the stable sort along `d`.
fn topk_ref(
    x: &[f64],
    xs: &[usize],
    dt: DType,
    d: usize,
    k: usize,
    largest: bool,
) -> (Vec<f64>, Vec<i64>) {
    let a = [(x, xs, dt)];
    let ps = p(&[d], &[k as i64, largest as i64, 1]);
    (
        registry_ref("topk", &a, ps.clone()),
        registry_ref_i64("topk.indices", &a, ps),
    )
}

/// The `k`-th smallest (from 1) along `d`, without keepdim.
fn kthvalue_ref(x: &[f64], xs: &[usize], dt: DType, d: usize, k: usize) -> (Vec<f64>, Vec<i64>) {
    let a = [(x, xs, dt)];
    let ps = p(&[d], &[k as i64, 0]);
    (
        registry_ref("kthvalue", &a, ps.clone()),
        registry_ref_i64("kthvalue.indices", &a, ps),
    )
}

/// The lower median along `d`, without keepdim.
fn median_dim_ref(x: &[f64], xs: &[usize], dt: DType, d: usize) -> (Vec<f64>, Vec<i64>) {
    let a = [(x, xs, dt)];
    let ps = p(&[d], &[]);
    (
        registry_ref("median_dim", &a, ps.clone()),
        registry_ref_i64("median_dim.indices", &a, ps),
    )
}

const CPU: Device = Device::Cpu;

const SORT_DTYPES: [DType; 10] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U32,
    DType::U8,
    DType::I8,
    DType::Bool,
];

/// Values with ties, both zeros, and (for floats) NaN and infinities.
fn tricky(dtype: DType, n: usize, rng: &mut Rng) -> Vec<f64> {
    (0..n)
        .map(|_| match dtype {
            DType::Bool => rng.below(2) as f64,
            DType::U8 | DType::U32 => rng.below(20) as f64,
            d if d.is_int() => rng.below(40) as f64 - 20.0,
            _ => match rng.below(16) {
                0 => f64::NAN,
                1 => -0.0,
                2 => f64::INFINITY,
                3 => f64::NEG_INFINITY,
                _ => (rng.below(60) as f64 - 30.0) / 4.0,
            },
        })
        .collect()
}

#[test]
fn sort_matches_the_stable_reference_over_layouts_dtypes_and_dims() {
    let mut rng = Rng(1);
    for xs in [
        vec![4usize, 7],
        vec![3, 5, 2],
        vec![9],
        vec![1, 4],
        vec![0, 3],
        vec![3, 1],
    ] {
        for dt in SORT_DTYPES {
            let x = tricky(dt, numel(&xs), &mut rng);
            for d in 0..xs.len() {
                for desc in [false, true] {
                    let (wv, wi) = sort_ref(&x, &xs, dt, d, desc);
                    for xl in layouts(&x, &xs, dt) {
                        let (v, i) = xl.t.sort(d as i64, desc, false).unwrap();
                        assert_eq!(v.dtype(), dt);
                        assert_eq!(v.shape(), xs.as_slice());
                        let ctx = format!("sort {xs:?} d{d} desc={desc} {dt} {}", xl.name);
                        assert_eq!(i64s(&i), wi, "{ctx}");
                        assert_same!(f64s(&v), wv, "{ctx}");
                        assert_eq!(
                            i64s(&xl.t.argsort(d as i64, desc, true).unwrap()),
                            wi,
                            "{ctx}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn long_rows_take_the_radix_path_and_stay_stable() {
    let mut rng = Rng(2);
    for dt in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::Bool,
    ] {
        for n in [1023usize, 1025, 5000] {
            let x = tricky(dt, n, &mut rng);
            for desc in [false, true] {
                let (wv, wi) = sort_ref(&x, &[n], dt, 0, desc);
                let (v, i) = tensor(&x, &[n], dt).sort(0, desc, true).unwrap();
                assert_eq!(i64s(&i), wi, "{dt} n={n} desc={desc}");
                assert_same!(f64s(&v), wv, "{dt} n={n}");
            }
        }
    }
    // rows of 2^16 or more are sorted by all threads together (chunked, still stable)
    for dt in [DType::F32, DType::I64, DType::BF16] {
        let n = 70_000;
        let x = tricky(dt, n, &mut rng);
        for desc in [false, true] {
            let (wv, wi) = sort_ref(&x, &[n], dt, 0, desc);
            for threads in [1usize, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let (v, i) = pool
                    .install(|| tensor(&x, &[n], dt).sort(0, desc, false))
                    .unwrap();
                assert_eq!(i64s(&i), wi, "{dt} n={n} desc={desc} threads={threads}");
                assert_same!(f64s(&v), wv, "{dt} n={n}");
            }
        }
    }
    // a long row along a strided dim of a 2-D tensor
    let x = tricky(DType::F32, 2 * 3000, &mut rng);
    let t = tensor(&x, &[3000, 2], DType::F32);
    let (wv, wi) = sort_ref(&x, &[3000, 2], DType::F32, 0, false);
    let (v, i) = t.sort(0, false, false).unwrap();
    assert_eq!(i64s(&i), wi);
    assert_same!(f64s(&v), wv, "strided long rows");
}

#[test]
fn signed_zeros_and_nans_keep_their_bits_and_order() {
    let x = Tensor::from_vec(vec![0.0f32, -0.0, f32::NAN, 0.0, -1.0, -f32::NAN], [6]).unwrap();
    let (v, i) = x.sort(0, false, false).unwrap();
    assert_eq!(
        i.to_vec::<i64>().unwrap(),
        vec![4, 0, 1, 3, 2, 5],
        "-0 == 0, stable; NaNs last"
    );
    let bits: Vec<u32> = v
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|f| f.to_bits())
        .collect();
    assert_eq!(bits[1], 0.0f32.to_bits());
    assert_eq!(
        bits[2],
        (-0.0f32).to_bits(),
        "the -0.0 element itself is returned"
    );
    let (_, i) = x.sort(0, true, false).unwrap();
    assert_eq!(
        i.to_vec::<i64>().unwrap(),
        vec![2, 5, 0, 1, 3, 4],
        "descending: NaNs first, ties stable"
    );
}

#[test]
fn topk_over_layouts_thresholds_and_ties() {
    let mut rng = Rng(3);
    for (xs, d) in [
        (vec![5usize, 40], 1usize),
        (vec![40, 3], 0),
        (vec![2, 3, 300], 2),
        (vec![7], 0),
    ] {
        let n = xs[d];
        for dt in [DType::F32, DType::BF16, DType::I32, DType::U8] {
            let x = tricky(dt, numel(&xs), &mut rng);
            for k in [0usize, 1, 2, n / 2, n] {
                for largest in [true, false] {
                    let (wv, wi) = topk_ref(&x, &xs, dt, d, k, largest);
                    for xl in layouts(&x, &xs, dt) {
                        let (v, i) = xl.t.topk(k, d as i64, largest, true).unwrap();
                        let mut os = xs.clone();
                        os[d] = k;
                        assert_eq!(v.shape(), os.as_slice());
                        let ctx =
                            format!("topk {xs:?} d{d} k={k} largest={largest} {dt} {}", xl.name);
                        assert_eq!(i64s(&i), wi, "{ctx}");
                        assert_same!(f64s(&v), wv, "{ctx}");
                    }
                }
            }
        }
    }
    // ties: the lower index first, for both the heap (k·16 < n) and the selection path
    let x = tensor(&[1.0; 100], &[100], DType::F32);
    let (_, i) = x.topk(3, 0, true, false).unwrap();
    assert_eq!(i64s(&i), vec![0, 1, 2]);
    let (_, i) = x.topk(60, 0, false, false).unwrap();
    assert_eq!(i64s(&i), (0..60).collect::<Vec<_>>());
    // and for the selection of more than 1024 keys (sorted after select_nth_unstable, which
    // leaves them out of position order): a radix sort on the key bytes alone kept that
    // order for ties
    let v: Vec<f64> = (0..3000).map(|j| (j % 3) as f64).collect();
    let x = tensor(&v, &[3000], DType::F32);
    let (_, i) = x.topk(2000, 0, true, true).unwrap();
    let want: Vec<i64> = (0..3000)
        .filter(|j| j % 3 == 2)
        .chain((0..3000).filter(|j| j % 3 == 1))
        .take(2000)
        .collect();
    assert_eq!(i64s(&i), want);
}

#[test]
fn kthvalue_and_median() {
    let mut rng = Rng(4);
    for xs in [vec![4usize, 7], vec![3, 5, 2], vec![11]] {
        for dt in [DType::F32, DType::F16, DType::I64, DType::I8] {
            let x = tricky(dt, numel(&xs), &mut rng);
            for d in 0..xs.len() {
                for k in [1, xs[d] / 2 + 1, xs[d]] {
                    let (wv, wi) = kthvalue_ref(&x, &xs, dt, d, k);
                    for xl in layouts(&x, &xs, dt) {
                        let (v, i) = xl.t.kthvalue(k, d as i64, false).unwrap();
                        let ctx = format!("kthvalue {xs:?} d{d} k={k} {dt} {}", xl.name);
                        assert_eq!(i64s(&i), wi, "{ctx}");
                        assert_same!(f64s(&v), wv, "{ctx}");
                        let (vk, _) = xl.t.kthvalue(k, d as i64, true).unwrap();
                        assert_eq!(vk.shape()[d], 1);
                    }
                }
                let (wv, wi) = median_dim_ref(&x, &xs, dt, d);
                for xl in layouts(&x, &xs, dt) {
                    let (v, i) = xl.t.median_dim(d as i64, false).unwrap();
                    let ctx = format!("median_dim {xs:?} d{d} {dt} {}", xl.name);
                    assert_eq!(i64s(&i), wi, "{ctx}");
                    assert_same!(f64s(&v), wv, "{ctx}");
                }
            }
        }
    }
    // global lower median; NaN propagates; empty float tensor -> NaN
    let x = tensor(&[5.0, 1.0, 4.0, 2.0], &[2, 2], DType::F32);
    assert_eq!(f64s(&x.median().unwrap()), vec![2.0]);
    assert_eq!(x.median().unwrap().shape(), &[] as &[usize]);
    let x = tensor(&[5.0, f64::NAN, 4.0], &[3], DType::F64);
    assert!(f64s(&x.median().unwrap())[0].is_nan());
    let (v, i) = x.median_dim(0, true).unwrap();
    assert!(f64s(&v)[0].is_nan());
    assert_eq!(i64s(&i), vec![1]);
    assert!(f64s(
        &Tensor::zeros([0], DType::F32, &CPU)
            .unwrap()
            .median()
            .unwrap()
    )[0]
    .is_nan());
    let t = ints(&[3, 1, 2], &[3], DType::U32).t().unwrap();
    assert_eq!(f64s(&t.median().unwrap()), vec![2.0]);
    // a 0-d tensor
    let s = tensor(&[3.0], &[], DType::F32);
    let (v, i) = s.kthvalue(1, 0, false).unwrap();
    assert_eq!((f64s(&v), i64s(&i)), (vec![3.0], vec![0]));
    let (v, i) = s.sort(0, false, false).unwrap();
    assert_eq!((f64s(&v), i64s(&i)), (vec![3.0], vec![0]));
}

#[test]
fn unique_values_inverse_counts() {
    let mut rng = Rng(5);
    for xs in [vec![4usize, 6], vec![17], vec![0], vec![2, 3, 2]] {
        for dt in SORT_DTYPES {
            let x = tricky(dt, numel(&xs), &mut rng);
            let a = [(x.as_slice(), xs.as_slice(), dt)];
            let wv = registry_ref("unique", &a, Params::default());
            let wi = registry_ref_i64("unique.inverse", &a, Params::default());
            let wc = registry_ref_i64("unique.counts", &a, Params::default());
            for xl in layouts(&x, &xs, dt) {
                let (v, inv, c) = xl.t.unique(true, true, true).unwrap();
                let ctx = format!("unique {xs:?} {dt} {}", xl.name);
                assert_eq!(v.dtype(), dt);
                assert_same!(f64s(&v), wv, "{ctx}");
                let inv = inv.unwrap();
                assert_eq!(inv.shape(), xs.as_slice(), "{ctx}");
                assert_eq!(i64s(&inv), wi, "{ctx}");
                assert_eq!(i64s(&c.unwrap()), wc, "{ctx}");
            }
        }
    }
    let (v, inv, c) = tensor(&[2.0, 1.0, 2.0], &[3], DType::F32)
        .unique(false, false, false)
        .unwrap();
    assert_eq!(f64s(&v), vec![1.0, 2.0]);
    assert!(inv.is_none() && c.is_none());
    // NaNs are distinct (as PyTorch)
    let (v, _, c) = tensor(&[f64::NAN, 1.0, f64::NAN], &[3], DType::F32)
        .unique(true, false, true)
        .unwrap();
    assert_eq!(v.numel(), 3);
    assert_eq!(i64s(&c.unwrap()), vec![1, 1, 1]);
}

#[test]
fn searchsorted_1d_and_batched() {
    let mut rng = Rng(6);
    // 1-D sequence with duplicates, values of any shape
    let seq = vec![-3.0, -1.0, -1.0, 0.0, 2.0, 2.0, 2.0, 5.0, 8.0];
    let vals = vec![
        -4.0,
        -1.0,
        0.0,
        1.5,
        2.0,
        8.0,
        9.0,
        -0.0,
        f64::NAN,
        5.0,
        3.0,
        -3.0,
    ];
    for dt in [DType::F32, DType::F64, DType::BF16] {
        for sl in layouts(&seq, &[9], dt) {
            for vl in layouts(&vals, &[3, 4], dt) {
                for right in [false, true] {
                    let out = sl.t.searchsorted(&vl.t, right).unwrap();
                    assert_eq!(out.dtype(), DType::I64);
                    assert_eq!(out.shape(), &[3, 4]);
                    let want = registry_ref_i64(
                        "searchsorted",
                        &[(&seq, &[9], dt), (&vals, &[3, 4], dt)],
                        p(&[], &[right as i64]),
                    );
                    assert_eq!(
                        i64s(&out),
                        want,
                        "{dt} seq:{} vals:{} right={right}",
                        sl.name,
                        vl.name
                    );
                }
            }
        }
    }
    // batched: one sorted row per leading index
    let (b, m, k) = (3usize, 6usize, 4usize);
    let mut seqs = vec![];
    for _ in 0..b {
        let mut row = rng.small(m, -10, 10);
        row.sort_by(|a, b| a.partial_cmp(b).unwrap());
        seqs.extend(row);
    }
    let vals = rng.small(b * k, -12, 12);
    for sl in layouts(&seqs, &[b, m], DType::I64) {
        for vl in layouts(&vals, &[b, k], DType::I32) {
            for right in [false, true] {
                let out = sl.t.searchsorted(&vl.t, right).unwrap();
                let want = registry_ref_i64(
                    "searchsorted",
                    &[(&seqs, &[b, m], DType::I64), (&vals, &[b, k], DType::I32)],
                    p(&[], &[right as i64]),
                );
                assert_eq!(
                    i64s(&out),
                    want,
                    "batched seq:{} vals:{} right={right}",
                    sl.name,
                    vl.name
                );
            }
        }
    }
    // int sequence, float values: compared in the promoted dtype
    let s = ints(&[0, 2, 4], &[3], DType::I64);
    let v = tensor(&[1.5, 2.0, 4.5], &[3], DType::F32);
    assert_eq!(i64s(&s.searchsorted(&v, false).unwrap()), vec![1, 1, 3]);
}

#[test]
fn bincount_counts_and_weights() {
    let mut rng = Rng(7);
    let x: Vec<i64> = (0..50).map(|_| rng.below(9) as i64).collect();
    let w = rng.small(50, -4, 5);
    for idt in [DType::I64, DType::I32, DType::U8, DType::U32] {
        let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for xl in layouts(&xf, &[50], idt) {
            let out = xl.t.bincount(None, 0).unwrap();
            assert_eq!(out.dtype(), DType::I64);
            let bc = |minlength: i64| {
                registry_ref("bincount", &[(&xf, &[50], idt)], p(&[], &[minlength]))
            };
            assert_same!(f64s(&out), bc(0), "{idt} {}", xl.name);
            let out = xl.t.bincount(None, 20).unwrap();
            assert_same!(f64s(&out), bc(20), "minlength");
            for (wdt, rdt) in [
                (DType::F32, DType::F32),
                (DType::F64, DType::F64),
                (DType::I64, DType::F64),
                (DType::F16, DType::F64),
            ] {
                for wl in layouts(&w, &[50], wdt) {
                    let out = xl.t.bincount(Some(&wl.t), 3).unwrap();
                    assert_eq!(out.dtype(), rdt, "weights {wdt}");
                    assert_same!(
                        f64s(&out),
                        registry_ref(
                            "bincount.weights",
                            &[(&xf, &[50], idt), (&w, &[50], wdt)],
                            p(&[], &[3])
                        ),
                        "weights {wdt} {}",
                        wl.name
                    );
                }
            }
        }
    }
    let e = ints(&[], &[0], DType::I64).bincount(None, 4).unwrap();
    assert_eq!(i64s(&e), vec![0; 4]);
}

#[test]
fn histc_bins_edges_and_nan() {
    let mut rng = Rng(8);
    let x: Vec<f64> = (0..200).map(|_| rng.uniform() * 12.0 - 3.0).collect();
    for dt in [DType::F32, DType::F64] {
        for xl in layouts(&x, &[20, 10], dt) {
            let xv = f64s(&xl.t);
            let out = xl.t.histc(7, -1.0, 8.0).unwrap();
            assert_eq!(out.dtype(), dt);
            let want = registry_ref(
                "histc",
                &[(&xv, &[20, 10], dt)],
                Params {
                    ints: vec![7],
                    scalars: vec![Scalar::Float(-1.0), Scalar::Float(8.0)],
                    ..Params::default()
                },
            );
            assert_same!(f64s(&out), want, "{dt} {}", xl.name);
        }
    }
    // the right edge falls into the last bin; NaN and out-of-range are ignored
    let t = tensor(&[0.0, 1.0, 2.0, 2.0, f64::NAN, -1.0, 3.0], &[7], DType::F16);
    assert_eq!(
        f64s(&t.histc(4, 0.0, 2.0).unwrap()),
        vec![1.0, 0.0, 1.0, 2.0]
    );
    // min == max: the data's range
    assert_eq!(
        f64s(
            &tensor(&[1.0, 2.0, 1.0, 3.0], &[4], DType::BF16)
                .histc(2, 0.0, 0.0)
                .unwrap()
        ),
        vec![2.0, 2.0]
    );
    // ... widened by one when the data is constant
    assert_eq!(
        f64s(
            &tensor(&[1.0, 1.0], &[2], DType::F32)
                .histc(4, 5.0, 5.0)
                .unwrap()
        ),
        vec![0.0, 0.0, 2.0, 0.0]
    );
}

#[test]
fn sort_family_errors_leave_operands_unchanged() {
    let x = tensor(&[3.0, 1.0, 2.0, 0.0, 5.0, 4.0], &[2, 3], DType::F32);
    let e = expect_err(&[&x], &["topk", "k (4)", "size 3"], || {
        x.topk(4, 1, true, true)
    });
    assert!(matches!(e, Error::Invalid { .. }));
    expect_err(&[&x], &["kthvalue", "k (0)"], || x.kthvalue(0, 1, false));
    expect_err(&[&x], &["kthvalue", "k (4)", "size 3"], || {
        x.kthvalue(4, 1, false)
    });
    expect_err(&[&x], &["dim 2"], || x.sort(2, false, false));
    expect_err(&[&x], &["median", "size 0"], || {
        Tensor::zeros([2, 0], DType::F32, &CPU)?.median_dim(1, false)
    });
    let seq2 = tensor(&[0.0; 6], &[3, 2], DType::F32);
    expect_err(&[&seq2, &x], &["searchsorted", "[3, 2]", "[2, 3]"], || {
        seq2.searchsorted(&x, false)
    });
    let neg = ints(&[1, -2, 3], &[3], DType::I64);
    expect_err(&[&neg], &["bincount", "-2"], || neg.bincount(None, 0));
    expect_err(&[&x], &["bincount", "1-D integer"], || x.bincount(None, 0));
    let xi = ints(&[1, 2], &[2], DType::I64);
    let w3 = tensor(&[1.0; 3], &[3], DType::F32);
    expect_err(&[&xi, &w3], &["bincount", "[3]", "[2]"], || {
        xi.bincount(Some(&w3), 0)
    });
    expect_err(&[&xi], &["histc", "int64"], || xi.histc(4, 0.0, 1.0));
    expect_err(&[&x], &["histc", "not finite"], || {
        x.histc(4, f64::NEG_INFINITY, 1.0)
    });
    expect_err(&[&x], &["histc", "larger than min"], || {
        x.histc(4, 2.0, 1.0)
    });
    expect_err(&[&x], &["histc", "bins"], || x.histc(0, 0.0, 1.0));
    let withnan = tensor(&[1.0, f64::NAN], &[2], DType::F32);
    expect_err(&[&withnan], &["histc", "not finite"], || {
        withnan.histc(4, 0.0, 0.0)
    });
}
