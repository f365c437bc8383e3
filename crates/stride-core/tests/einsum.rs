//! einsum against a brute-force reference (loop over every assignment of every label, on
//! plain `Vec`s), over operand layouts; plus the identities users rely on (attention scores
//! are `Q·Kᵀ`, trace, diagonal, outer) and errors that are errors, not panics.

use stride_core::{DType, Error, Tensor};

/// Deterministic values in [-2, 2) with few bits, so sums are nearly exact.
fn vals(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 32) as f64 / 8.0 - 2.0
        })
        .collect()
}

fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1].max(1);
    }
    st
}

/// `shape` as a tensor of `dtype` in layout `kind`: 0 contiguous, 1 column-major
/// (transposed), 2 stepped with an offset.
fn make(shape: &[usize], dtype: DType, kind: usize, seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let (strides, offset) = match kind {
        1 => {
            let mut cm = vec![1; shape.len()];
            for d in 1..shape.len() {
                cm[d] = cm[d - 1] * shape[d - 1].max(1);
            }
            (cm, 0)
        }
        2 => {
            let doubled: Vec<usize> = shape.iter().map(|&x| 2 * x).collect();
            (row_major(&doubled).iter().map(|s| 2 * s).collect(), 3)
        }
        _ => (row_major(shape), 0),
    };
    let extent = offset
        + shape
            .iter()
            .zip(&strides)
            .map(|(&k, &s)| k.saturating_sub(1) * s)
            .sum::<usize>()
        + 1;
    let len = extent.max(n);
    Tensor::from_vec(vals(len, seed), [len])
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .as_strided(shape, &strides, offset)
        .unwrap()
}

/// Brute-force einsum over letters-only terms (repeated letters allowed) with an explicit
/// output; size-1 dims broadcast.
fn reference(eq: &str, ops: &[&Tensor]) -> (Vec<usize>, Vec<f64>) {
    let (lhs, out) = eq.split_once("->").unwrap();
    let terms: Vec<Vec<u8>> = lhs.split(',').map(|t| t.trim().bytes().collect()).collect();
    let out: Vec<u8> = out.trim().bytes().collect();
    let data: Vec<Vec<f64>> = ops.iter().map(|t| t.to_f64_vec().unwrap()).collect();
    let mut size = std::collections::BTreeMap::<u8, usize>::new();
    for (t, term) in ops.iter().zip(&terms) {
        for (d, &c) in term.iter().enumerate() {
            let n = t.shape()[d];
            let e = size.entry(c).or_insert(n);
            if *e == 1 {
                *e = n; // size 1 broadcasts (to 0 too)
            }
        }
    }
    let labels: Vec<u8> = size.keys().copied().collect();
    let out_shape: Vec<usize> = out.iter().map(|c| size[c]).collect();
    let mut res = vec![0.0; out_shape.iter().product()];
    let total: usize = labels.iter().map(|c| size[c]).product();
    let mut val = std::collections::BTreeMap::<u8, usize>::new();
    for mut k in 0..total {
        for &c in labels.iter().rev() {
            val.insert(c, k % size[&c]);
            k /= size[&c];
        }
        let mut p = 1.0;
        for ((t, term), d) in ops.iter().zip(&terms).zip(&data) {
            let mut off = 0;
            for (j, &c) in term.iter().enumerate() {
                let n = t.shape()[j];
                off = off * n + if n == 1 { 0 } else { val[&c] };
            }
            p *= d[off];
        }
        let mut o = 0;
        for (j, c) in out.iter().enumerate() {
            o = o * out_shape[j] + val[c];
        }
        res[o] += p;
    }
    (out_shape, res)
}

fn close(got: &Tensor, want: &(Vec<usize>, Vec<f64>), tol: f64, what: &str) {
    assert_eq!(got.shape(), want.0.as_slice(), "{what}: shape");
    let g = got.to_f64_vec().unwrap();
    for (i, (a, b)) in g.iter().zip(&want.1).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "{what}: element {i}: {a} vs {b}"
        );
    }
}

fn tol(dtype: DType) -> f64 {
    if dtype == DType::F64 {
        1e-12
    } else {
        1e-5
    }
}

/// (equation, reference equation with explicit letters, operand shapes)
type Case = (&'static str, &'static str, Vec<Vec<usize>>);

fn cases() -> Vec<Case> {
    vec![
        (
            "btd,bsd->bts",
            "btd,bsd->bts",
            vec![vec![2, 3, 4], vec![2, 5, 4]],
        ),
        ("ij,jk->ik", "ij,jk->ik", vec![vec![3, 4], vec![4, 5]]),
        ("ij,jk", "ij,jk->ik", vec![vec![3, 4], vec![4, 5]]),
        ("ii->", "ii->", vec![vec![4, 4]]),
        ("ii", "ii->", vec![vec![4, 4]]),
        ("ii->i", "ii->i", vec![vec![4, 4]]),
        ("bii->bi", "bii->bi", vec![vec![2, 3, 3]]),
        ("i,j->ij", "i,j->ij", vec![vec![3], vec![4]]),
        ("i,j", "i,j->ij", vec![vec![3], vec![4]]),
        ("ba", "ba->ab", vec![vec![3, 4]]),
        ("ijk->kij", "ijk->kij", vec![vec![2, 3, 4]]),
        ("ij->", "ij->", vec![vec![3, 5]]),
        ("ij,ij->ij", "ij,ij->ij", vec![vec![3, 4], vec![3, 4]]),
        ("ij,ij", "ij,ij->", vec![vec![3, 4], vec![3, 4]]),
        ("ijk,jl->il", "ijk,jl->il", vec![vec![2, 3, 4], vec![3, 5]]),
        (
            "ij,jk,kl->il",
            "ij,jk,kl->il",
            vec![vec![2, 3], vec![3, 4], vec![4, 5]],
        ),
        (
            "ab,bc,ca->",
            "ab,bc,ca->",
            vec![vec![2, 3], vec![3, 4], vec![4, 2]],
        ),
        ("i,i,i->", "i,i,i->", vec![vec![5], vec![5], vec![5]]),
        ("i,i,i->i", "i,i,i->i", vec![vec![5], vec![5], vec![5]]),
        (
            "bij,bjk->bik",
            "bij,bjk->bik",
            vec![vec![1, 2, 3], vec![4, 3, 2]],
        ),
        ("ij,j->i", "ij,j->i", vec![vec![3, 4], vec![1]]),
        ("ij,kj->ikj", "ij,kj->ikj", vec![vec![3, 1], vec![2, 4]]),
        ("Ab,bA->A", "Ab,bA->A", vec![vec![3, 4], vec![4, 3]]),
        ("zA,Az", "zA,Az->", vec![vec![2, 3], vec![3, 2]]),
        ("ij,jk->ik", "ij,jk->ik", vec![vec![3, 0], vec![0, 2]]),
        ("ij,jk->ik", "ij,jk->ik", vec![vec![0, 2], vec![2, 3]]),
        ("ijij->ij", "ijij->ij", vec![vec![2, 3, 2, 3]]),
        ("iji->j", "iji->j", vec![vec![3, 2, 3]]),
        // ellipsis: reference letters Y, Z stand for the (right-aligned) ellipsis dims
        (
            "...ij,...jk->...ik",
            "YZij,Zjk->YZik",
            vec![vec![2, 1, 3, 4], vec![5, 4, 6]],
        ),
        (
            "...ij,...jk",
            "YZij,Zjk->YZik",
            vec![vec![2, 1, 3, 4], vec![5, 4, 6]],
        ),
        (
            "b...d,b...d->b...",
            "bZd,bZd->bZ",
            vec![vec![2, 3, 4], vec![2, 3, 4]],
        ),
        ("...ii->...i", "Zii->Zi", vec![vec![3, 4, 4]]),
        ("i...->...", "iZ->Z", vec![vec![3, 4]]),
        ("i...->i", "iYZ->i", vec![vec![3, 2, 4]]),
        ("...,...->...", "YZ,Z->YZ", vec![vec![2, 3], vec![3]]),
        ("i...,i->...", "i,i->", vec![vec![3], vec![3]]),
    ]
}

#[test]
fn einsum_matches_brute_force_over_layouts() {
    for dtype in [DType::F64, DType::F32] {
        for (eq, ref_eq, shapes) in cases() {
            for kind in 0..3 {
                let ops: Vec<Tensor> = shapes
                    .iter()
                    .enumerate()
                    .map(|(i, s)| make(s, dtype, (kind + i) % 3, 10 * i as u64 + kind as u64))
                    .collect();
                let refs: Vec<&Tensor> = ops.iter().collect();
                let before: Vec<Vec<f64>> = ops.iter().map(|t| t.to_f64_vec().unwrap()).collect();
                let what = format!("{eq} {dtype} layout {kind}");
                let got = Tensor::einsum(eq, &refs).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(got.dtype(), dtype, "{what}");
                close(&got, &reference(ref_eq, &refs), tol(dtype), &what);
                let after: Vec<Vec<f64>> = ops.iter().map(|t| t.to_f64_vec().unwrap()).collect();
                assert_eq!(before, after, "{what}: an operand changed");
            }
        }
    }
}

#[test]
fn attention_scores_trace_diagonal_outer() {
    for dtype in [DType::F32, DType::F64] {
        let q = make(&[2, 5, 8], dtype, 0, 1);
        let k = make(&[2, 7, 8], dtype, 1, 2);
        let s = Tensor::einsum("btd,bsd->bts", &[&q, &k]).unwrap();
        let m = q.matmul(&k.transpose(-1, -2).unwrap()).unwrap();
        assert_eq!(s.shape(), &[2, 5, 7]);
        let (a, b) = (s.to_f64_vec().unwrap(), m.to_f64_vec().unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= tol(dtype) * (1.0 + y.abs()), "{x} vs {y}");
        }
    }
    let x = Tensor::from_vec((0..9).map(|i| i as f64).collect::<Vec<_>>(), [3, 3]).unwrap();
    assert_eq!(
        Tensor::einsum("ii->", &[&x])
            .unwrap()
            .item::<f64>()
            .unwrap(),
        12.0
    );
    let d = Tensor::einsum("ii->i", &[&x]).unwrap();
    assert_eq!(d.to_vec::<f64>().unwrap(), vec![0.0, 4.0, 8.0]);
    let u = Tensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
    let v = Tensor::from_vec(vec![3.0f32, 4.0, 5.0], [3]).unwrap();
    let o = Tensor::einsum("i,j->ij", &[&u, &v]).unwrap();
    assert_eq!(
        o.to_vec::<f32>().unwrap(),
        vec![3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
    );
    // whitespace is ignored
    let o2 = Tensor::einsum(" i , j -> i j ", &[&u, &v]).unwrap();
    assert_eq!(o2.to_vec::<f32>().unwrap(), o.to_vec::<f32>().unwrap());
}

/// Expects an error mentioning the needles, with the operands unchanged.
fn expect_err(tensors: &[&Tensor], needles: &[&str], f: impl FnOnce() -> Result<Tensor, Error>) {
    let before: Vec<_> = tensors
        .iter()
        .map(|t| (t.to_f64_vec().unwrap(), t.version()))
        .collect();
    let msg = f().expect_err("expected an error").to_string();
    for n in needles {
        assert!(msg.contains(n), "error {msg:?} should mention {n:?}");
    }
    let after: Vec<_> = tensors
        .iter()
        .map(|t| (t.to_f64_vec().unwrap(), t.version()))
        .collect();
    assert_eq!(before, after);
}

#[test]
fn bad_equations_are_errors() {
    let a = make(&[2, 3], DType::F32, 0, 1);
    let b = make(&[4, 5], DType::F32, 0, 2);
    let sq = make(&[2, 3], DType::F32, 1, 3);
    let c = make(&[3], DType::F64, 0, 4);
    let e = |eq: &'static str, ops: &[&Tensor], needles: &[&str]| {
        expect_err(ops, needles, || Tensor::einsum(eq, ops));
    };
    e("i1,jk", &[&a, &b], &["einsum", "'1'"]);
    e("ij,jk", &[&a], &["2 operands", "1 tensors"]);
    e("ij", &[&a, &b], &["1 operands", "2 tensors"]);
    e(
        "ij,jk->ik",
        &[&a, &b],
        &["\"j\"", "size 3", "4", "[2, 3]", "[4, 5]"],
    );
    e("ij->ik", &[&a], &["\"k\"", "does not appear"]);
    e("ij->ii", &[&a], &["\"i\"", "more than once"]);
    e("ijk->i", &[&a], &["[2, 3]", "2 dims"]);
    e("i->i", &[&a], &["[2, 3]"]);
    e("ii->i", &[&sq], &["repeats", "\"i\"", "2 and 3"]);
    e("ij,j->i", &[&a, &c], &["float32", "float64"]);
    e("i..j", &[&a], &["ellipsis"]);
    e("...i...", &[&a], &["more than one ellipsis"]);
    e("ij->i->j", &[&a], &["more than one '->'"]);
    e("", &[], &["at least one"]);
}
