//! Joining and splitting ops against independent references on plain `Vec`s, over input
//! layouts (contiguous, transposed, stepped, offset, expanded, size-0/1 dims), every dtype
//! (the dtype never changes, except cat/stack's promotion), outputs written through any
//! layout with the memory around them untouched, and every error leaving operands unchanged.

use stride_core::{DType, Device, Error, Indexing, PadMode, Tensor};

const CPU: Device = Device::Cpu;

// ----- reference arrays ---------------------------------------------------------------------

/// A row-major n-d array of f64 (every test value is exact in every dtype).
#[derive(Debug, Clone, PartialEq)]
struct A {
    shape: Vec<usize>,
    v: Vec<f64>,
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

impl A {
    fn of(t: &Tensor) -> A {
        A {
            shape: t.shape().to_vec(),
            v: t.to_f64_vec().unwrap(),
        }
    }
    fn from_fn(shape: &[usize], f: impl Fn(&[usize]) -> f64) -> A {
        let n = shape.iter().product();
        A {
            shape: shape.to_vec(),
            v: (0..n).map(|i| f(&unravel(i, shape))).collect(),
        }
    }
    fn at(&self, idx: &[usize]) -> f64 {
        let mut k = 0;
        for d in 0..self.shape.len() {
            assert!(idx[d] < self.shape[d], "{idx:?} outside {:?}", self.shape);
            k = k * self.shape[d] + idx[d];
        }
        self.v[k]
    }
}

// ----- inputs in many layouts -----------------------------------------------------------------

/// Deterministic test values, exact in every dtype (bool: 0/1, unsigned: >= 0).
fn values(n: usize, dtype: DType, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (s >> 33) as i64;
            match dtype {
                DType::Bool => (r % 2) as f64,
                DType::U8 | DType::U32 => (r % 100) as f64,
                d if d.is_float() => ((r % 64) - 32) as f64 / 4.0,
                _ => ((r % 100) - 50) as f64,
            }
        })
        .collect()
}

/// A tensor of `dtype` over a storage of `len` values, seen through (shape, strides, offset).
fn strided(shape: &[usize], strides: &[usize], offset: usize, dtype: DType, seed: u64) -> Tensor {
    let numel: usize = shape.iter().product();
    let extent = if numel == 0 {
        offset
    } else {
        offset
            + shape
                .iter()
                .zip(strides)
                .map(|(&n, &s)| (n - 1) * s)
                .sum::<usize>()
            + 1
    };
    let len = extent + 3;
    let buf = Tensor::from_vec(values(len, dtype, seed), [len])
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    buf.as_strided(shape, strides, offset).unwrap()
}

fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1].max(1);
    }
    st
}

/// `shape` in several layouts: contiguous, transposed (column-major), stepped (every dim
/// strided by 2) with an offset, plain offset, and expanded along dim 0 (stride 0).
fn layouts(shape: &[usize], dtype: DType, seed: u64) -> Vec<(&'static str, Tensor)> {
    let rm = row_major(shape);
    let mut v = vec![("contiguous", strided(shape, &rm, 0, dtype, seed))];
    if shape.len() >= 2 {
        let mut cm = vec![1; shape.len()];
        for d in 1..shape.len() {
            cm[d] = cm[d - 1] * shape[d - 1].max(1);
        }
        v.push(("transposed", strided(shape, &cm, 0, dtype, seed)));
    }
    let doubled: Vec<usize> = shape.iter().map(|&n| 2 * n).collect();
    let st: Vec<usize> = row_major(&doubled).iter().map(|s| s * 2).collect();
    v.push(("stepped", strided(shape, &st, 1, dtype, seed)));
    v.push(("offset", strided(shape, &rm, 7, dtype, seed)));
    if !shape.is_empty() {
        let mut ex = rm.clone();
        ex[0] = 0;
        v.push(("expanded", strided(shape, &ex, 2, dtype, seed)));
    }
    v
}

fn check(t: &Tensor, want: &A, dtype: DType, what: &str) {
    assert_eq!(t.dtype(), dtype, "{what}: dtype changed");
    assert_eq!(A::of(t), *want, "{what}");
}

// ----- error checking ------------------------------------------------------------------------

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
/// Expects an error mentioning every needle, with every tensor unchanged.
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
    assert_eq!(before, after, "a failed op changed an operand");
}

/// An output view in a bigger buffer: the guards around it must survive a write.
struct Out {
    buf: Tensor,
    view: Tensor,
}
fn out_layouts(shape: &[usize], dtype: DType) -> Vec<(&'static str, Out)> {
    let numel: usize = shape.iter().product();
    let make = |strides: Vec<usize>, offset: usize| {
        let extent = offset
            + shape
                .iter()
                .zip(&strides)
                .map(|(&n, &s)| n.saturating_sub(1) * s)
                .sum::<usize>()
            + 1;
        let buf = Tensor::full([extent + 4], 77, dtype, &CPU).unwrap();
        let view = buf.as_strided(shape, &strides, offset).unwrap();
        Out { buf, view }
    };
    let rm = row_major(shape);
    let mut v = vec![("contiguous", make(rm.clone(), 0))];
    if shape.len() >= 2 && numel > 0 {
        let mut cm = vec![1; shape.len()];
        for d in 1..shape.len() {
            cm[d] = cm[d - 1] * shape[d - 1].max(1);
        }
        v.push(("transposed", make(cm, 0)));
    }
    let doubled: Vec<usize> = shape.iter().map(|&n| 2 * n).collect();
    v.push((
        "stepped",
        make(row_major(&doubled).iter().map(|s| s * 2).collect(), 3),
    ));
    v.push(("offset", make(rm, 5)));
    v
}
/// Checks that every element of `o.buf` outside `o.view` still holds the guard value 77
/// (`true` for bool).
fn guards_intact(o: &Out, what: &str) {
    let all = o.buf.to_f64_vec().unwrap();
    let l = o.view.layout();
    let mut inside = vec![false; all.len()];
    for i in 0..o.view.numel() {
        let idx = unravel(i, l.shape());
        let k = l.offset()
            + idx
                .iter()
                .zip(l.strides())
                .map(|(a, b)| a * b)
                .sum::<usize>();
        inside[k] = true;
    }
    let guard = if o.buf.dtype() == DType::Bool {
        1.0
    } else {
        77.0
    };
    for (k, &x) in all.iter().enumerate() {
        if !inside[k] {
            assert_eq!(x, guard, "{what}: stray write at storage index {k}");
        }
    }
}

// ----- cat / stack ---------------------------------------------------------------------------

fn cat_ref(parts: &[A], d: usize) -> A {
    let mut shape = parts[0].shape.clone();
    shape[d] = parts.iter().map(|p| p.shape[d]).sum();
    A::from_fn(&shape, |idx| {
        let mut i = idx[d];
        for p in parts {
            if i < p.shape[d] {
                let mut j = idx.to_vec();
                j[d] = i;
                return p.at(&j);
            }
            i -= p.shape[d];
        }
        unreachable!()
    })
}

#[test]
fn cat_over_layouts_and_dtypes() {
    for dtype in DType::ALL {
        for (na, a) in layouts(&[2, 3, 4], dtype, 1) {
            for (nb, b) in layouts(&[2, 5, 4], dtype, 2) {
                let want = cat_ref(&[A::of(&a), A::of(&b)], 1);
                let what = format!("cat {dtype} {na}+{nb}");
                check(&Tensor::cat(&[&a, &b], 1).unwrap(), &want, dtype, &what);
                check(&Tensor::cat(&[&a, &b], -2).unwrap(), &want, dtype, &what);
            }
        }
        // three inputs along every dim, with size-0 and size-1 pieces
        for d in 0..3 {
            let shapes = |k: usize| {
                let mut s = vec![2, 3, 4];
                s[d] = k;
                s
            };
            let ins: Vec<Tensor> = [1, 0, 3]
                .iter()
                .enumerate()
                .map(|(i, &k)| layouts(&shapes(k), dtype, i as u64).remove(i % 3).1)
                .collect();
            let want = cat_ref(&ins.iter().map(A::of).collect::<Vec<_>>(), d);
            let refs: Vec<&Tensor> = ins.iter().collect();
            check(
                &Tensor::cat(&refs, d as i64).unwrap(),
                &want,
                dtype,
                &format!("cat3 {dtype} dim {d}"),
            );
        }
    }
}

#[test]
fn cat_promotes_like_pytorch() {
    let cases = [
        (DType::I32, DType::F16, DType::F16),
        (DType::Bool, DType::U8, DType::U8),
        (DType::I64, DType::F64, DType::F64),
        (DType::U8, DType::I8, DType::I32), // PyTorch: int16 (stride has none)
        (DType::BF16, DType::F16, DType::F32),
        (DType::U32, DType::I32, DType::I64),
    ];
    for (da, db, want) in cases {
        let a = layouts(&[2, 3], da, 3).remove(1).1;
        let b = layouts(&[1, 3], db, 4).remove(0).1;
        let c = Tensor::cat(&[&a, &b], 0).unwrap();
        check(&c, &cat_ref(&[A::of(&a), A::of(&b)], 0), want, "promote");
    }
}

#[test]
fn cat_skips_legacy_empty_tensors() {
    let a = layouts(&[2, 3], DType::F32, 1).remove(1).1;
    let e = Tensor::zeros([0], DType::F64, &CPU).unwrap();
    let b = layouts(&[2, 3], DType::F32, 2).remove(0).1;
    // [0] tensors are skipped whatever the others' shapes, but still promote (as PyTorch)
    let c = Tensor::cat(&[&e, &a, &e, &b], 0).unwrap();
    check(&c, &cat_ref(&[A::of(&a), A::of(&b)], 0), DType::F64, "skip");
    let c = Tensor::cat(&[&a, &e], 1).unwrap();
    check(&c, &A::of(&a), DType::F64, "skip dim 1");
    let only = Tensor::cat(&[&e, &e], 0).unwrap();
    assert_eq!(only.shape(), &[0]);
    // a [2, 0] tensor is not legacy: it must match
    let z = Tensor::zeros([2, 0], DType::F32, &CPU).unwrap();
    let c = Tensor::cat(&[&a, &z], 1).unwrap();
    check(&c, &A::of(&a), DType::F32, "size-0 piece");
    let z = Tensor::zeros([3, 0], DType::F32, &CPU).unwrap();
    expect_err(&[&a, &z], &["[2, 3]", "[3, 0]", "dim 0"], || {
        Tensor::cat(&[&a, &z], 1)
    });
}

#[test]
fn cat_out_writes_through_any_layout() {
    for dtype in [DType::F32, DType::I64, DType::Bool, DType::U32] {
        let a = layouts(&[3, 2], dtype, 5).remove(1).1;
        let b = layouts(&[3, 3], dtype, 6).remove(2).1;
        let want = cat_ref(&[A::of(&a), A::of(&b)], 1);
        for (name, o) in out_layouts(&[3, 5], dtype) {
            let v0 = o.view.version();
            let r = Tensor::cat_out(&[&a, &b], 1, &o.view).unwrap();
            assert!(r.shares_storage_with(&o.view));
            check(&o.view, &want, dtype, &format!("cat_out {dtype} {name}"));
            assert!(o.view.version() > v0);
            guards_intact(&o, name);
        }
    }
    // a wider out dtype is fine (cast on write), as is an int result into a float out
    let a = layouts(&[2, 2], DType::I32, 1).remove(0).1;
    for (_, o) in out_layouts(&[4, 2], DType::F64) {
        Tensor::cat_out(&[&a, &a], 0, &o.view).unwrap();
        check(
            &o.view,
            &cat_ref(&[A::of(&a), A::of(&a)], 0),
            DType::F64,
            "cast",
        );
        guards_intact(&o, "cast");
    }
    // inputs that alias the output are read before it is written
    let x = Tensor::arange(0, 6, &CPU).unwrap();
    let (lo, hi) = (x.narrow(0, 0, 3).unwrap(), x.narrow(0, 3, 3).unwrap());
    Tensor::cat_out(&[&hi, &lo], 0, &x).unwrap();
    assert_eq!(x.to_vec::<i64>().unwrap(), vec![3, 4, 5, 0, 1, 2]);
}

#[test]
fn cat_errors_leave_operands_unchanged() {
    let a = layouts(&[2, 3], DType::F32, 1).remove(0).1;
    let b = layouts(&[2, 4], DType::F32, 2).remove(0).1;
    expect_err(
        &[&a, &b],
        &["cat", "[2, 3]", "[2, 4]", "dim 1", "dim 0"],
        || Tensor::cat(&[&a, &b], 0),
    );
    let c = layouts(&[2, 3, 1], DType::F32, 3).remove(0).1;
    expect_err(
        &[&a, &c],
        &["[2, 3]", "[2, 3, 1]", "numbers of dims"],
        || Tensor::cat(&[&a, &c], 0),
    );
    expect_err(&[&a], &["dim 2"], || Tensor::cat(&[&a, &a], 2));
    let s = Tensor::scalar(1.0, DType::F32, &CPU).unwrap();
    expect_err(&[&s], &["zero-dimensional", "position 0"], || {
        Tensor::cat(&[&s], 0)
    });
    expect_err(&[], &["non-empty"], || Tensor::cat(&[], 0));
    // _out: wrong shape, unsafe cast, overlapping
    let good = Tensor::cat(&[&a, &a], 0).unwrap();
    let wrong = Tensor::zeros([4, 4], DType::F32, &CPU).unwrap();
    expect_err(&[&a, &wrong], &["[4, 4]", "[4, 3]"], || {
        Tensor::cat_out(&[&a, &a], 0, &wrong)
    });
    let int_out = Tensor::zeros([4, 3], DType::I64, &CPU).unwrap();
    expect_err(&[&a, &int_out], &["float32", "int64"], || {
        Tensor::cat_out(&[&a, &a], 0, &int_out)
    });
    let expanded = Tensor::zeros([1, 3], DType::F32, &CPU)
        .unwrap()
        .expand(&[4, 3])
        .unwrap();
    expect_err(&[&a, &expanded], &["share memory"], || {
        Tensor::cat_out(&[&a, &a], 0, &expanded)
    });
    assert_eq!(good.shape(), &[4, 3]);
}

#[test]
fn stack_over_layouts_and_dtypes() {
    for dtype in DType::ALL {
        let ins: Vec<Tensor> = layouts(&[3, 4], dtype, 9)
            .into_iter()
            .map(|x| x.1)
            .collect();
        let refs: Vec<&Tensor> = ins.iter().collect();
        let parts: Vec<A> = ins.iter().map(A::of).collect();
        for dim in [0i64, 1, 2, -1, -3] {
            let d = dim.rem_euclid(3) as usize;
            let mut shape = vec![3, 4];
            shape.insert(d, ins.len());
            let want = A::from_fn(&shape, |idx| {
                let mut j = idx.to_vec();
                let k = j.remove(d);
                parts[k].at(&j)
            });
            let what = format!("stack {dtype} dim {dim}");
            check(&Tensor::stack(&refs, dim).unwrap(), &want, dtype, &what);
            for (name, o) in out_layouts(&shape, dtype) {
                Tensor::stack_out(&refs, dim, &o.view).unwrap();
                check(&o.view, &want, dtype, &format!("{what} out {name}"));
                guards_intact(&o, name);
            }
        }
    }
    // 0-d tensors stack into a 1-d tensor; [0] tensors are not skipped
    let s = Tensor::scalar(2, DType::I32, &CPU).unwrap();
    check(
        &Tensor::stack(&[&s, &s], 0).unwrap(),
        &A::from_fn(&[2], |_| 2.0),
        DType::I32,
        "0-d",
    );
    let e = Tensor::zeros([0], DType::U8, &CPU).unwrap();
    assert_eq!(Tensor::stack(&[&e, &e, &e], 1).unwrap().shape(), &[0, 3]);
    let a = Tensor::zeros([2, 3], DType::F32, &CPU).unwrap();
    let b = Tensor::zeros([3, 2], DType::F32, &CPU).unwrap();
    expect_err(&[&a, &b], &["stack", "[2, 3]", "[3, 2]"], || {
        Tensor::stack(&[&a, &b], 0)
    });
    expect_err(&[&a], &["dim 3"], || Tensor::stack(&[&a], 3));
    expect_err(&[], &["non-empty"], || Tensor::stack(&[], 0));
}

// ----- split / chunk / unbind ---------------------------------------------------------------

fn narrow_ref(x: &A, d: usize, start: usize, len: usize) -> A {
    let mut shape = x.shape.clone();
    shape[d] = len;
    A::from_fn(&shape, |idx| {
        let mut j = idx.to_vec();
        j[d] += start;
        x.at(&j)
    })
}

#[test]
fn split_chunk_unbind_are_views() {
    for dtype in [DType::F16, DType::I64, DType::Bool, DType::U32] {
        for (name, x) in layouts(&[5, 7], dtype, 4) {
            let r = A::of(&x);
            for (dim, d) in [(0i64, 0usize), (-1, 1)] {
                let n = x.shape()[d];
                for size in [1, 2, 3, n, n + 4] {
                    let parts = x.split(size, dim).unwrap();
                    assert_eq!(parts.len(), n.div_ceil(size));
                    for (i, p) in parts.iter().enumerate() {
                        let len = size.min(n - i * size);
                        assert!(p.shares_storage_with(&x));
                        check(p, &narrow_ref(&r, d, i * size, len), dtype, name);
                    }
                }
                let sizes = [1, 0, n - 1];
                let parts = x.split_with_sizes(&sizes, dim).unwrap();
                check(&parts[2], &narrow_ref(&r, d, 1, n - 1), dtype, name);
                assert_eq!(parts[1].shape()[d], 0);
                // chunk: ceil(n / chunks) each, so possibly fewer chunks (PyTorch)
                for chunks in [1, 2, 3, 4, 6, 9] {
                    let parts = x.chunk(chunks, dim).unwrap();
                    let cs = n.div_ceil(chunks);
                    assert_eq!(parts.len(), n.div_ceil(cs), "chunk {chunks} of {n}");
                    let total: usize = parts.iter().map(|p| p.shape()[d]).sum();
                    assert_eq!(total, n);
                    check(&parts[0], &narrow_ref(&r, d, 0, cs), dtype, name);
                }
                let rows = x.unbind(dim).unwrap();
                assert_eq!(rows.len(), n);
                for (i, row) in rows.iter().enumerate() {
                    let nr = narrow_ref(&r, d, i, 1);
                    let mut shape = nr.shape.clone();
                    shape.remove(d);
                    check(row, &A { shape, v: nr.v }, dtype, name);
                }
            }
        }
    }
    // empty dims: split(0) is allowed on them, chunk gives `chunks` empty pieces
    let e = Tensor::zeros([0, 3], DType::F32, &CPU).unwrap();
    assert_eq!(e.split(0, 0).unwrap().len(), 1);
    assert_eq!(e.split(2, 0).unwrap().len(), 1);
    assert_eq!(e.chunk(3, 0).unwrap().len(), 3);
    assert!(e.unbind(0).unwrap().is_empty());
    let x = Tensor::zeros([4, 3], DType::F32, &CPU).unwrap();
    expect_err(&[&x], &["split_size", "size 4"], || x.split(0, 0));
    expect_err(&[&x], &["sum", "[1, 2]", "4"], || {
        x.split_with_sizes(&[1, 2], 0)
    });
    expect_err(&[&x], &["chunks"], || x.chunk(0, 0));
    expect_err(&[&x], &["dim 2"], || x.unbind(2));
    let s = Tensor::scalar(1.0, DType::F32, &CPU).unwrap();
    expect_err(&[&s], &["0-d"], || s.split(1, 0));
}

// ----- repeat / tile / repeat_interleave ----------------------------------------------------

fn repeat_ref(x: &A, reps: &[usize]) -> A {
    let lead = reps.len() - x.shape.len();
    let mut xs = vec![1; lead];
    xs.extend(&x.shape);
    let shape: Vec<usize> = xs.iter().zip(reps).map(|(a, b)| a * b).collect();
    A::from_fn(&shape, |idx| {
        let j: Vec<usize> = (lead..reps.len()).map(|k| idx[k] % xs[k]).collect();
        x.at(&j)
    })
}

#[test]
fn repeat_and_tile() {
    for dtype in DType::ALL {
        for (name, x) in layouts(&[2, 3], dtype, 8) {
            let r = A::of(&x);
            for reps in [
                vec![1, 1],
                vec![2, 1],
                vec![3, 2],
                vec![2, 1, 3],
                vec![0, 2],
                vec![2, 2, 1, 1],
            ] {
                let what = format!("repeat {dtype} {name} {reps:?}");
                let y = x.repeat(&reps).unwrap();
                assert!(y.is_contiguous());
                check(&y, &repeat_ref(&r, &reps), dtype, &what);
            }
            check(
                &x.tile(&[2]).unwrap(),
                &repeat_ref(&r, &[1, 2]),
                dtype,
                "tile",
            );
            check(
                &x.tile(&[2, 1, 2]).unwrap(),
                &repeat_ref(&r, &[2, 1, 2]),
                dtype,
                "tile",
            );
        }
    }
    let s = Tensor::scalar(5, DType::I32, &CPU).unwrap();
    check(
        &s.repeat(&[3]).unwrap(),
        &A::from_fn(&[3], |_| 5.0),
        DType::I32,
        "0-d",
    );
    check(
        &s.repeat(&[]).unwrap(),
        &A::from_fn(&[], |_| 5.0),
        DType::I32,
        "0-d",
    );
    let x = Tensor::zeros([2, 3], DType::F32, &CPU).unwrap();
    expect_err(&[&x], &["repeat", "[2]", "[2, 3]"], || x.repeat(&[2]));
}

#[test]
fn repeat_interleave_scalar_and_tensor() {
    for dtype in [
        DType::F32,
        DType::BF16,
        DType::I32,
        DType::U32,
        DType::Bool,
        DType::I64,
    ] {
        for (name, x) in layouts(&[3, 4], dtype, 11) {
            let r = A::of(&x);
            for (dim, d) in [(Some(0i64), 0usize), (Some(1), 1), (Some(-1), 1)] {
                for k in [0usize, 1, 3] {
                    let mut shape = r.shape.clone();
                    shape[d] *= k;
                    let want = A::from_fn(&shape, |idx| {
                        let mut j = idx.to_vec();
                        j[d] /= k;
                        r.at(&j)
                    });
                    let y = x.repeat_interleave(k, dim).unwrap();
                    check(&y, &want, dtype, &format!("ri {name} {dim:?} {k}"));
                }
            }
            // flattened
            let flat = A {
                shape: vec![12],
                v: r.v.clone(),
            };
            let want = A::from_fn(&[24], |i| flat.v[i[0] / 2]);
            check(
                &x.repeat_interleave(2, None).unwrap(),
                &want,
                dtype,
                "ri flat",
            );
            // a repeats tensor, one per slice
            for rdt in [DType::I64, DType::I32, DType::U8] {
                let reps = Tensor::from_vec(vec![2i64, 0, 1], [3])
                    .unwrap()
                    .to_dtype(rdt)
                    .unwrap();
                let order = [0usize, 0, 2];
                let want = A::from_fn(&[3, 4], |idx| r.at(&[order[idx[0]], idx[1]]));
                let y = x.repeat_interleave_tensor(&reps, Some(0)).unwrap();
                check(&y, &want, dtype, &format!("ri tensor {name}"));
            }
            let one = Tensor::from_vec(vec![2i64], [1]).unwrap();
            let y = x.repeat_interleave_tensor(&one, Some(1)).unwrap();
            check(
                &y,
                &A::from_fn(&[3, 8], |i| r.at(&[i[0], i[1] / 2])),
                dtype,
                "ri bcast",
            );
        }
    }
    let x = Tensor::zeros([3, 4], DType::F32, &CPU).unwrap();
    let neg = Tensor::from_vec(vec![1i64, -1, 1], [3]).unwrap();
    expect_err(&[&x, &neg], &["non-negative", "-1"], || {
        x.repeat_interleave_tensor(&neg, Some(0))
    });
    let wrong = Tensor::from_vec(vec![1i64, 1], [2]).unwrap();
    expect_err(&[&x, &wrong], &["[2]", "[3, 4]", "dim 0"], || {
        x.repeat_interleave_tensor(&wrong, Some(0))
    });
    let fl = Tensor::from_vec(vec![1.0f32, 1.0, 1.0], [3]).unwrap();
    expect_err(&[&x, &fl], &["float32", "integer"], || {
        x.repeat_interleave_tensor(&fl, Some(0))
    });
    expect_err(&[&x], &["dim 2"], || x.repeat_interleave(2, Some(2)));
}

// ----- flip / roll ---------------------------------------------------------------------------

#[test]
fn flip_over_layouts_and_dtypes() {
    for dtype in DType::ALL {
        for shape in [vec![3, 4, 5], vec![1, 6, 0], vec![7]] {
            for (name, x) in layouts(&shape, dtype, 12) {
                let r = A::of(&x);
                let nd = shape.len() as i64;
                let mut dimsets: Vec<Vec<i64>> = vec![vec![], vec![0], vec![-1]];
                if nd == 3 {
                    dimsets.extend([vec![0, 2], vec![1], vec![2, 0, 1]]);
                }
                for dims in dimsets {
                    let ds: Vec<usize> = dims.iter().map(|&d| d.rem_euclid(nd) as usize).collect();
                    let want = A::from_fn(&shape, |idx| {
                        let j: Vec<usize> = (0..idx.len())
                            .map(|k| {
                                if ds.contains(&k) {
                                    shape[k] - 1 - idx[k]
                                } else {
                                    idx[k]
                                }
                            })
                            .collect();
                        r.at(&j)
                    });
                    let y = x.flip(&dims).unwrap();
                    assert!(!y.shares_storage_with(&x));
                    check(&y, &want, dtype, &format!("flip {name} {shape:?} {dims:?}"));
                }
            }
        }
    }
    // big enough to run in parallel
    let x = Tensor::arange(0, 300_000, &CPU)
        .unwrap()
        .reshape(&[300, 1000])
        .unwrap();
    let y = x
        .t()
        .unwrap()
        .flip(&[0, 1])
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    for (k, &v) in y.iter().enumerate().step_by(997) {
        let (i, j) = (999 - k / 300, 299 - k % 300);
        assert_eq!(v, (j * 1000 + i) as i64);
    }
    let x = Tensor::zeros([2, 3], DType::F32, &CPU).unwrap();
    expect_err(&[&x], &["more than once"], || x.flip(&[0, -2]));
    expect_err(&[&x], &["dim 2"], || x.flip(&[2]));
}

#[test]
fn roll_over_layouts_and_dtypes() {
    for dtype in [
        DType::F64,
        DType::F16,
        DType::I64,
        DType::I32,
        DType::U32,
        DType::Bool,
        DType::I8,
    ] {
        for (name, x) in layouts(&[3, 5], dtype, 13) {
            let r = A::of(&x);
            let shape = [3usize, 5];
            let cases: Vec<(Vec<i64>, Vec<i64>)> = vec![
                (vec![1], vec![0]),
                (vec![-2], vec![1]),
                (vec![7], vec![-1]),
                (vec![1, 2], vec![0, 1]),
                (vec![2, 2], vec![1, 1]), // repeated dims add up
                (vec![0, -14], vec![0, 1]),
            ];
            for (shifts, dims) in cases {
                let mut sh = [0i64; 2];
                for (s, d) in shifts.iter().zip(&dims) {
                    sh[d.rem_euclid(2) as usize] += s;
                }
                let want = A::from_fn(&shape, |idx| {
                    let j: Vec<usize> = (0..2)
                        .map(|k| (idx[k] as i64 - sh[k]).rem_euclid(shape[k] as i64) as usize)
                        .collect();
                    r.at(&j)
                });
                let what = format!("roll {dtype} {name} {shifts:?} {dims:?}");
                check(&x.roll(&shifts, &dims).unwrap(), &want, dtype, &what);
            }
            // flattened
            for s in [4i64, -1, 15, 0] {
                let want = A {
                    shape: shape.to_vec(),
                    v: (0..15)
                        .map(|i| r.v[(i - s).rem_euclid(15) as usize])
                        .collect(),
                };
                check(
                    &x.roll(&[s], &[]).unwrap(),
                    &want,
                    dtype,
                    &format!("flat roll {s}"),
                );
            }
        }
    }
    let e = Tensor::zeros([0, 2], DType::F32, &CPU).unwrap();
    assert_eq!(e.roll(&[3], &[0]).unwrap().shape(), &[0, 2]);
    let s = Tensor::scalar(3, DType::I64, &CPU).unwrap();
    assert_eq!(s.roll(&[2], &[0]).unwrap().item::<i64>().unwrap(), 3);
    let x = Tensor::zeros([2, 3], DType::F32, &CPU).unwrap();
    expect_err(&[&x], &["shifts", "dims", "same length"], || {
        x.roll(&[1, 2], &[0])
    });
    expect_err(&[&x], &["one shift"], || x.roll(&[1, 2], &[]));
    expect_err(&[&x], &["dim 5"], || x.roll(&[1], &[5]));
}

// ----- tril / triu ---------------------------------------------------------------------------

fn tri_ref(x: &A, k: i64, lower: bool) -> A {
    let nd = x.shape.len();
    A::from_fn(&x.shape, |idx| {
        let diff = idx[nd - 1] as i64 - idx[nd - 2] as i64;
        let keep = if lower { diff <= k } else { diff >= k };
        if keep {
            x.at(idx)
        } else {
            0.0
        }
    })
}

#[test]
fn tril_triu_batched_over_layouts_and_dtypes() {
    for dtype in DType::ALL {
        for shape in [
            vec![4, 4],
            vec![3, 5],
            vec![2, 5, 3],
            vec![0, 3],
            vec![1, 1],
        ] {
            for (name, x) in layouts(&shape, dtype, 14) {
                let r = A::of(&x);
                for k in [i64::MIN, -5, -1, 0, 1, 2, 6, i64::MAX] {
                    let what = format!("{dtype} {name} {shape:?} k={k}");
                    check(&x.tril(k).unwrap(), &tri_ref(&r, k, true), dtype, &what);
                    check(&x.triu(k).unwrap(), &tri_ref(&r, k, false), dtype, &what);
                }
            }
        }
    }
}

#[test]
fn tril_triu_in_place_write_through_views() {
    for dtype in [DType::F32, DType::I64, DType::U8, DType::BF16] {
        for (name, o) in out_layouts(&[2, 4, 3], dtype) {
            let src = layouts(&[2, 4, 3], dtype, 15).remove(1).1;
            Tensor::cat_out(&[&src], 0, &o.view).unwrap();
            let before = A::of(&o.view);
            let v0 = o.view.version();
            let r = o.view.tril_(-1).unwrap();
            assert!(r.shares_storage_with(&o.view));
            check(&o.view, &tri_ref(&before, -1, true), dtype, name);
            assert!(o.view.version() > v0);
            guards_intact(&o, name);
            let before = A::of(&o.view);
            o.view.triu_(0).unwrap();
            check(&o.view, &tri_ref(&before, 0, false), dtype, name);
            guards_intact(&o, name);
        }
    }
    let v = Tensor::zeros([3], DType::F32, &CPU).unwrap();
    expect_err(&[&v], &["tril", "at least 2 dims", "[3]"], || v.tril(0));
    expect_err(&[&v], &["triu_", "[3]"], || v.triu_(0));
    let ex = Tensor::ones([1, 3], DType::F32, &CPU)
        .unwrap()
        .expand(&[3, 3])
        .unwrap();
    expect_err(&[&ex], &["tril_", "share memory"], || ex.tril_(0));
}

// ----- pad -----------------------------------------------------------------------------------

fn pad_ref(x: &A, pad: &[i64], mode: &str, value: f64) -> A {
    let nd = x.shape.len();
    let mut lr = vec![(0i64, 0i64); nd];
    for k in 0..pad.len() / 2 {
        lr[nd - 1 - k] = (pad[2 * k], pad[2 * k + 1]);
    }
    let shape: Vec<usize> = (0..nd)
        .map(|d| (x.shape[d] as i64 + lr[d].0 + lr[d].1) as usize)
        .collect();
    A::from_fn(&shape, |idx| {
        let mut j = vec![0; nd];
        for d in 0..nd {
            let n = x.shape[d] as i64;
            let s = idx[d] as i64 - lr[d].0;
            let t = match mode {
                "constant" => {
                    if s < 0 || s >= n {
                        return value;
                    }
                    s
                }
                "reflect" => {
                    if s < 0 {
                        -s
                    } else if s >= n {
                        2 * (n - 1) - s
                    } else {
                        s
                    }
                }
                "replicate" => s.clamp(0, n - 1),
                _ => s.rem_euclid(n),
            };
            j[d] = t as usize;
        }
        x.at(&j)
    })
}

#[test]
fn pad_modes_over_layouts_and_dtypes() {
    let pads: [&[i64]; 6] = [
        &[1, 2],
        &[2, 0, 1, 1],
        &[0, 0, 2, 1],
        &[1, 1, 1, 1, 1, 1],
        &[0, 3],
        &[],
    ];
    for dtype in DType::ALL {
        for (name, x) in layouts(&[3, 4, 5], dtype, 16) {
            let r = A::of(&x);
            for pad in pads {
                for (mode, m) in [
                    (PadMode::constant(1), "constant"),
                    (PadMode::Reflect, "reflect"),
                    (PadMode::Replicate, "replicate"),
                    (PadMode::Circular, "circular"),
                ] {
                    let what = format!("pad {dtype} {name} {pad:?} {m}");
                    let y = x.pad(pad, mode).unwrap();
                    assert!(!y.shares_storage_with(&x), "{what}");
                    check(&y, &pad_ref(&r, pad, m, 1.0), dtype, &what);
                }
            }
            // constant mode crops with negative pads
            for pad in [&[-1i64, 2][..], &[-2, -2, 1, -1], &[0, -5]] {
                let y = x.pad(pad, PadMode::constant(0)).unwrap();
                check(&y, &pad_ref(&r, pad, "constant", 0.0), dtype, "crop");
            }
        }
    }
    let x = Tensor::from_vec(vec![1.5f32, 2.5], [2]).unwrap();
    let y = x.pad(&[1, 1], PadMode::constant(-0.25)).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![-0.25, 1.5, 2.5, -0.25]);
}

#[test]
fn pad_errors_leave_operands_unchanged() {
    let x = Tensor::from_vec((0..12).collect::<Vec<i64>>(), [3, 4]).unwrap();
    expect_err(
        &[&x],
        &["reflect", "(4, 0)", "dim 1", "[3, 4]", "smaller"],
        || x.pad(&[4, 0], PadMode::Reflect),
    );
    expect_err(&[&x], &["reflect", "(0, 3)", "dim 0"], || {
        x.pad(&[0, 0, 0, 3], PadMode::Reflect)
    });
    expect_err(&[&x], &["circular", "(5, 0)"], || {
        x.pad(&[5, 0], PadMode::Circular)
    });
    expect_err(&[&x], &["even"], || x.pad(&[1], PadMode::Reflect));
    expect_err(&[&x], &["pads 3 dims", "[3, 4]"], || {
        x.pad(&[1, 1, 1, 1, 1, 1], PadMode::constant(0))
    });
    expect_err(&[&x], &["negative", "constant mode"], || {
        x.pad(&[-1, 0], PadMode::Replicate)
    });
    expect_err(&[&x], &["negative size"], || {
        x.pad(&[-3, -2], PadMode::constant(0))
    });
    expect_err(&[&x], &["0.5", "int64"], || {
        x.pad(&[1, 1], PadMode::constant(0.5))
    });
    let b = Tensor::zeros([2], DType::Bool, &CPU).unwrap();
    expect_err(&[&b], &["bool"], || b.pad(&[1, 1], PadMode::constant(2)));
    let u = Tensor::zeros([2], DType::U8, &CPU).unwrap();
    expect_err(&[&u], &["uint8"], || u.pad(&[1, 1], PadMode::constant(-1)));
    let e = Tensor::zeros([2, 0], DType::F32, &CPU).unwrap();
    expect_err(&[&e], &["replicate", "empty"], || {
        e.pad(&[1, 0], PadMode::Replicate)
    });
    // reflect of an empty dim by 0 is fine; constant padding of an empty dim too
    assert_eq!(
        e.pad(&[0, 0, 1, 0], PadMode::Reflect).unwrap().shape(),
        &[3, 0]
    );
    assert_eq!(
        e.pad(&[2, 1], PadMode::constant(3.0)).unwrap().shape(),
        &[2, 3]
    );
}

// ----- meshgrid ------------------------------------------------------------------------------

#[test]
fn meshgrid_ij_and_xy() {
    for dtype in [DType::F32, DType::I64, DType::U32, DType::Bool] {
        let a = layouts(&[3], dtype, 17).remove(1).1; // stepped
        let b = layouts(&[2], dtype, 18).remove(0).1;
        let c = Tensor::scalar(1, dtype, &CPU).unwrap();
        let d = layouts(&[4], dtype, 19).remove(2).1; // offset
        let ins = [&a, &b, &c, &d];
        let rs: Vec<A> = ins.iter().map(|t| A::of(t)).collect();
        let g = Tensor::meshgrid(&ins, Indexing::Ij).unwrap();
        for (k, t) in g.iter().enumerate() {
            assert!(t.shares_storage_with(ins[k]));
            let want = A::from_fn(&[3, 2, 1, 4], |idx| {
                rs[k].v[if k == 2 { 0 } else { idx[k] }]
            });
            check(t, &want, dtype, "ij");
        }
        let g = Tensor::meshgrid(&ins, Indexing::Xy).unwrap();
        let pos = [1, 0, 2, 3];
        for (k, t) in g.iter().enumerate() {
            let want = A::from_fn(&[2, 3, 1, 4], |idx| {
                rs[k].v[if k == 2 { 0 } else { idx[pos[k]] }]
            });
            check(t, &want, dtype, "xy");
        }
        // the grids are expanded views: writing into one is an error, not a silent race
        expect_err(&[&g[0]], &["share memory"], || g[0].tril_(0));
    }
    let a = Tensor::zeros([2], DType::F32, &CPU).unwrap();
    let b = Tensor::zeros([2], DType::F64, &CPU).unwrap();
    let m = Tensor::zeros([2, 2], DType::F32, &CPU).unwrap();
    expect_err(&[&a, &b], &["float32", "float64", "position 1"], || {
        Tensor::meshgrid(&[&a, &b], Indexing::Ij)
    });
    expect_err(&[&a, &m], &["[2, 2]", "position 1"], || {
        Tensor::meshgrid(&[&a, &m], Indexing::Xy)
    });
    expect_err(&[], &["non-empty"], || Tensor::meshgrid(&[], Indexing::Ij));
}
