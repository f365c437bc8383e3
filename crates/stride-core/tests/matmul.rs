//! Matrix products (`matmul`, `mm`, `bmm`, `dot`, `outer` and the `_out` forms) against an
//! f64 reference written as a plain triple loop over logical indices, over layouts
//! (contiguous, transposed, permuted, stepped, offset, broadcast batch dims), sizes crossing
//! tile boundaries, and every float dtype. Outputs are poisoned (NaN) and surrounded by guard
//! values; every error leaves its operands unchanged.

use stride_core::{layout::contiguous_strides, DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;
/// Written around every output view; must survive every op.
const GUARD: f64 = 3072.0;
const SIZES: [usize; 11] = [1, 2, 3, 7, 8, 9, 16, 17, 33, 64, 65];

// ----- data and layouts -----------------------------------------------------------------------

/// Deterministic values k/8, k in -16..=16: exact in every float dtype, so every dtype sees the
/// same inputs and the f64 reference is exact.
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 33) as f64 / 8.0 - 2.0
        })
        .collect()
}

/// A memory layout for a logical shape: dims stored in `order` (outermost first), every dim
/// taking every `step`-th element of a larger buffer, starting at `offset`.
#[derive(Clone, Copy, Debug)]
struct Kind {
    name: &'static str,
    order: Order,
    step: usize,
    offset: usize,
}
#[derive(Clone, Copy, Debug)]
enum Order {
    RowMajor,
    /// the last two dims swapped (a transposed matrix / batch of matrices)
    SwapLast2,
    /// every dim reversed (a fully permuted tensor)
    Reversed,
}
const CONTIG: Kind = Kind {
    name: "contiguous",
    order: Order::RowMajor,
    step: 1,
    offset: 0,
};
const TRANS: Kind = Kind {
    name: "transposed",
    order: Order::SwapLast2,
    step: 1,
    offset: 0,
};
const REV: Kind = Kind {
    name: "permuted",
    order: Order::Reversed,
    step: 1,
    offset: 0,
};
const STEP: Kind = Kind {
    name: "stepped",
    order: Order::RowMajor,
    step: 2,
    offset: 0,
};
const STEP_T: Kind = Kind {
    name: "stepped+transposed+offset",
    order: Order::SwapLast2,
    step: 2,
    offset: 3,
};
const OFFSET: Kind = Kind {
    name: "offset",
    order: Order::RowMajor,
    step: 1,
    offset: 7,
};
const KINDS: [Kind; 6] = [CONTIG, TRANS, REV, STEP, STEP_T, OFFSET];

/// (strides, offset, buffer length) of `kind` for `shape`.
fn layout(shape: &[usize], kind: Kind) -> (Vec<usize>, usize, usize) {
    let r = shape.len();
    let mut order: Vec<usize> = (0..r).collect();
    match kind.order {
        Order::RowMajor => {}
        Order::SwapLast2 if r >= 2 => order.swap(r - 2, r - 1),
        Order::SwapLast2 => {}
        Order::Reversed => order.reverse(),
    }
    let mem: Vec<usize> = order.iter().map(|&d| shape[d] * kind.step).collect();
    let ms = contiguous_strides(&mem);
    let mut strides = vec![0; r];
    for (i, &d) in order.iter().enumerate() {
        strides[d] = ms[i] * kind.step;
    }
    let len = kind.offset + mem.iter().product::<usize>() + 3;
    (strides, kind.offset, len)
}

/// Storage positions of a layout's elements, in logical (row-major) order.
fn positions(shape: &[usize], strides: &[usize], offset: usize) -> Vec<usize> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        out.push(offset + idx.iter().zip(strides).map(|(i, s)| i * s).sum::<usize>());
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// A tensor of `shape` in `kind`'s layout holding `vals` (logical order); the rest of its
/// buffer is `fill`. Returns (the view, the whole buffer).
fn place(vals: &[f64], shape: &[usize], kind: Kind, dtype: DType, fill: f64) -> (Tensor, Tensor) {
    let (strides, offset, len) = layout(shape, kind);
    let mut buf = vec![fill; len];
    for (p, v) in positions(shape, &strides, offset).into_iter().zip(vals) {
        buf[p] = *v;
    }
    let base = Tensor::from_vec(buf, [len])
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    let view = base.as_strided(shape, &strides, offset).unwrap();
    assert_eq!(view.to_f64_vec().unwrap().len(), vals.len());
    (view, base)
}

/// An input: NaN around it, so a read outside the view poisons the result.
fn input(shape: &[usize], kind: Kind, dtype: DType, seed: u64) -> Tensor {
    let n = shape.iter().product();
    place(&values(n, seed), shape, kind, dtype, f64::NAN).0
}

/// An output: NaN (poison) in the view, `GUARD` around it.
fn output(shape: &[usize], kind: Kind, dtype: DType) -> (Tensor, Tensor) {
    let n = shape.iter().product();
    place(&vec![f64::NAN; n], shape, kind, dtype, GUARD)
}

// ----- the reference ----------------------------------------------------------------------------

/// PyTorch's matmul written plainly: (shape, values, Σ|a||b| per element for the tolerance).
fn reference(a: &Tensor, b: &Tensor) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let (av, bv) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    let (mut sa, mut sb) = (a.shape().to_vec(), b.shape().to_vec());
    let (vec_a, vec_b) = (sa.len() == 1, sb.len() == 1);
    if vec_a {
        sa.insert(0, 1);
    }
    if vec_b {
        sb.push(1);
    }
    let (m, k, n) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 1]);
    assert_eq!(k, sb[sb.len() - 2]);
    let (ba, bb) = (&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
    let nd = ba.len().max(bb.len());
    let pad = |s: &[usize]| -> Vec<usize> {
        std::iter::repeat(1)
            .take(nd - s.len())
            .chain(s.iter().copied())
            .collect()
    };
    let (pa, pb) = (pad(ba), pad(bb));
    let batch: Vec<usize> = (0..nd)
        .map(|i| if pa[i] == 1 { pb[i] } else { pa[i] })
        .collect();
    let nb: usize = batch.iter().product();
    let (mut out, mut mag) = (vec![0.0; nb * m * n], vec![0.0; nb * m * n]);
    for bi in 0..nb {
        // batch multi-index -> flat batch index of a and b (size-1 dims broadcast)
        let (mut rem, mut ia, mut ib, mut sta, mut stb) = (bi, 0, 0, 1, 1);
        for d in (0..nd).rev() {
            let i = rem % batch[d];
            rem /= batch[d];
            ia += if pa[d] == 1 { 0 } else { i * sta };
            ib += if pb[d] == 1 { 0 } else { i * stb };
            sta *= pa[d];
            stb *= pb[d];
        }
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut g) = (0.0, 0.0);
                for p in 0..k {
                    let x = av[ia * m * k + i * k + p];
                    let y = bv[ib * k * n + p * n + j];
                    s += x * y;
                    g += (x * y).abs();
                }
                out[bi * m * n + i * n + j] = s;
                mag[bi * m * n + i * n + j] = g;
            }
        }
    }
    let mut shape = batch;
    if !vec_a {
        shape.push(m);
    }
    if !vec_b {
        shape.push(n);
    }
    (shape, out, mag)
}

fn eps(d: DType) -> f64 {
    match d {
        DType::F64 => f64::EPSILON,
        DType::F32 => f32::EPSILON as f64,
        DType::F16 => 9.765625e-4,
        DType::BF16 => 7.8125e-3,
        _ => unreachable!(),
    }
}

/// Tolerance of one element: output rounding plus K accumulation steps (f16/bf16 accumulate in
/// f32), relative to Σ|a·b|.
fn tol(d: DType, k: usize, mag: f64) -> f64 {
    let acc = if d == DType::F64 {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    };
    (eps(d) * (2.0 + k as f64 / 128.0) + acc * k as f64) * mag
}

fn assert_close(what: &str, got: &[f64], want: &[f64], mag: &[f64], dtype: DType, k: usize) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for i in 0..got.len() {
        let t = tol(dtype, k, mag[i]);
        assert!(
            (got[i] - want[i]).abs() <= t,
            "{what}: element {i}: got {}, want {} (tol {t})",
            got[i],
            want[i]
        );
    }
}

fn k_of(a: &Tensor) -> usize {
    *a.shape().last().unwrap()
}

/// Checks a fresh result against the reference.
fn check_new(what: &str, a: &Tensor, b: &Tensor, got: &Tensor) {
    let (shape, want, mag) = reference(a, b);
    assert_eq!(got.shape(), shape.as_slice(), "{what}: shape");
    assert_eq!(got.dtype(), a.dtype(), "{what}: dtype");
    assert_close(
        what,
        &got.to_f64_vec().unwrap(),
        &want,
        &mag,
        a.dtype(),
        k_of(a),
    );
}

/// Runs an `_out` form into `kind`'s layout and checks the view, the poison and the guards.
fn check_out(
    what: &str,
    a: &Tensor,
    b: &Tensor,
    kind: Kind,
    f: impl Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor, Error>,
) {
    let (shape, want, mag) = reference(a, b);
    let (out, base) = output(&shape, kind, a.dtype());
    let v0 = out.version();
    let r = f(a, b, &out).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        r.shares_storage_with(&out) && r.layout() == out.layout(),
        "{what}: returns out"
    );
    assert_eq!(out.version(), v0 + 1, "{what}: version bump");
    let (strides, offset, _) = layout(&shape, kind);
    let buf = base.to_f64_vec().unwrap();
    let pos = positions(&shape, &strides, offset);
    let got: Vec<f64> = pos.iter().map(|&p| buf[p]).collect();
    assert_close(what, &got, &want, &mag, a.dtype(), k_of(a));
    let mut inside = vec![false; buf.len()];
    pos.iter().for_each(|&p| inside[p] = true);
    for (i, &x) in buf.iter().enumerate() {
        assert!(
            inside[i] || x == GUARD,
            "{what}: guard at {i} overwritten with {x}"
        );
    }
}

// ----- 2-D products over sizes and layouts --------------------------------------------------------

fn triples() -> Vec<(usize, usize, usize)> {
    let mut t = vec![];
    for &s in &SIZES {
        t.extend([(s, s, s), (s, 9, 17), (17, s, 3), (3, 16, s)]);
    }
    t
}

#[test]
fn mm_f32_every_layout_pair_and_size() {
    for (m, k, n) in triples() {
        for ka in KINDS {
            for kb in KINDS {
                let a = input(&[m, k], ka, DType::F32, (m * 1000 + k) as u64);
                let b = input(&[k, n], kb, DType::F32, (k * 1000 + n) as u64 + 7);
                let what = format!("mm {m}x{k}x{n} a {} b {}", ka.name, kb.name);
                check_new(&what, &a, &b, &a.mm(&b).unwrap());
            }
        }
    }
}

#[test]
fn matmul_2d_every_dtype() {
    let pairs = [
        (CONTIG, CONTIG),
        (TRANS, STEP),
        (STEP_T, OFFSET),
        (REV, TRANS),
        (TRANS, TRANS),
    ];
    for dtype in [DType::F64, DType::F16, DType::BF16] {
        for (m, k, n) in triples() {
            for (ka, kb) in pairs {
                let a = input(&[m, k], ka, dtype, (m + 31 * k) as u64);
                let b = input(&[k, n], kb, dtype, (k + 17 * n) as u64);
                let what = format!("matmul {dtype} {m}x{k}x{n} a {} b {}", ka.name, kb.name);
                check_new(&what, &a, &b, &a.matmul(&b).unwrap());
            }
        }
    }
}

#[test]
fn large_products_use_the_threaded_paths() {
    // one product above gemm's threading threshold, transposed operands
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let a = input(&[130, 300], TRANS, dtype, 1);
        let b = input(&[300, 97], STEP, dtype, 2);
        check_new(&format!("large {dtype}"), &a, &b, &a.matmul(&b).unwrap());
    }
    // a batch of small products, run in parallel over the batch
    let a = input(&[300, 20, 24], REV, DType::F32, 3);
    let b = input(&[300, 24, 19], TRANS, DType::F32, 4);
    check_new("batch of small", &a, &b, &a.bmm(&b).unwrap());
    // [B, M, K] · [K, N]: folded into one product
    let a = input(&[40, 33, 64], CONTIG, DType::F32, 5);
    let b = input(&[64, 65], TRANS, DType::F32, 6);
    check_new("folded batch", &a, &b, &a.matmul(&b).unwrap());
    // [K] · [B, K, N] folded into columns when b's batch continues its columns
    let a = input(&[17], STEP, DType::F64, 7);
    let b = input(&[5, 17, 9], REV, DType::F64, 8);
    check_new("vector · batch", &a, &b, &a.matmul(&b).unwrap());
}

// ----- matmul's rank rules and batch broadcasting -------------------------------------------------

#[test]
fn matmul_every_rank_combination() {
    let cases: [(&[usize], &[usize]); 12] = [
        (&[7], &[7]),
        (&[3, 7], &[7]),
        (&[7], &[7, 5]),
        (&[4, 3, 7], &[7]),
        (&[7], &[4, 7, 5]),
        (&[4, 3, 7], &[7, 5]),
        (&[3, 7], &[4, 7, 5]),
        (&[2, 1, 3, 7], &[5, 7, 2]),
        (&[1, 3, 7], &[4, 7, 5]),
        (&[2, 3, 1, 4, 9], &[3, 1, 9, 2]),
        (&[0, 3, 7], &[7, 5]),
        (&[9], &[2, 2, 9, 1]),
    ];
    for dtype in [DType::F32, DType::F64, DType::BF16, DType::F16] {
        for (i, (sa, sb)) in cases.iter().enumerate() {
            for (ka, kb) in [
                (CONTIG, CONTIG),
                (TRANS, REV),
                (STEP_T, STEP),
                (REV, OFFSET),
            ] {
                let a = input(sa, ka, dtype, i as u64);
                let b = input(sb, kb, dtype, 100 + i as u64);
                let what = format!("matmul {dtype} {sa:?}·{sb:?} a {} b {}", ka.name, kb.name);
                check_new(&what, &a, &b, &a.matmul(&b).unwrap());
            }
        }
    }
}

#[test]
fn dot_is_0d() {
    for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
        for n in [1, 2, 7, 8, 9, 33, 65] {
            let a = input(&[n], STEP, dtype, n as u64);
            let b = input(&[n], OFFSET, dtype, 1 + n as u64);
            let d = a.dot(&b).unwrap();
            assert_eq!(d.shape(), &[] as &[usize]);
            check_new(&format!("dot {dtype} {n}"), &a, &b, &d);
            check_new(
                &format!("matmul 1-D {dtype} {n}"),
                &a,
                &b,
                &a.matmul(&b).unwrap(),
            );
        }
    }
    let e = Tensor::zeros([0], DType::F32, &CPU).unwrap();
    assert_eq!(e.dot(&e).unwrap().item::<f32>().unwrap(), 0.0);
}

#[test]
fn broadcast_batch_dims_have_stride_0() {
    for dtype in [DType::F32, DType::BF16] {
        // expanded operands: stride-0 batch dims, read without materialising
        let a = input(&[1, 6, 5], TRANS, dtype, 1)
            .expand(&[4, 6, 5])
            .unwrap();
        let b = input(&[4, 5, 3], STEP, dtype, 2);
        assert_eq!(a.stride()[0], 0);
        check_new("a expanded", &a, &b, &a.bmm(&b).unwrap());
        let b2 = input(&[5, 3], CONTIG, dtype, 3).expand(&[4, 5, 3]).unwrap();
        let a2 = input(&[4, 6, 5], STEP, dtype, 7);
        assert_eq!(b2.stride()[0], 0);
        check_new("b expanded", &a2, &b2, &a2.bmm(&b2).unwrap());
        check_new("both expanded", &a, &b2, &a.matmul(&b2).unwrap());
        // a stride-0 dim inside a matrix (every row the same) and a batch broadcast from [3,1]/[1,4]
        let rows = input(&[1, 5], OFFSET, dtype, 4).expand(&[6, 5]).unwrap();
        check_new(
            "rows broadcast",
            &rows,
            &b2.select(0, 0).unwrap(),
            &rows.mm(&b2.select(0, 0).unwrap()).unwrap(),
        );
        let x = input(&[3, 1, 2, 5], REV, dtype, 5);
        let y = input(&[1, 4, 5, 2], TRANS, dtype, 6);
        check_new("batch [3,1]·[1,4]", &x, &y, &x.matmul(&y).unwrap());
    }
}

#[test]
fn empty_and_unit_sizes() {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (m, k, n) in [
            (0, 3, 4),
            (3, 0, 4),
            (3, 4, 0),
            (0, 0, 0),
            (1, 1, 1),
            (1, 0, 1),
            (5, 1, 1),
            (1, 1, 5),
        ] {
            for kind in [CONTIG, TRANS, STEP_T] {
                let a = input(&[m, k], kind, dtype, 1);
                let b = input(&[k, n], kind, dtype, 2);
                let what = format!("{dtype} {m}x{k}x{n} {}", kind.name);
                check_new(&what, &a, &b, &a.mm(&b).unwrap());
                // K = 0 writes zeros over the poison; M or N = 0 writes nothing
                check_out(&what, &a, &b, kind, |a, b, o| a.mm_out(b, o));
            }
        }
        // empty batch
        let a = input(&[0, 3, 4], CONTIG, dtype, 1);
        let b = input(&[0, 4, 2], TRANS, dtype, 2);
        check_new("empty batch", &a, &b, &a.bmm(&b).unwrap());
        let a = input(&[2, 3, 0], TRANS, dtype, 1);
        let b = input(&[2, 0, 2], STEP, dtype, 2);
        check_out("bmm K=0", &a, &b, STEP_T, |a, b, o| a.bmm_out(b, o));
    }
}

// ----- _out forms ---------------------------------------------------------------------------------

#[test]
fn out_forms_write_through_any_layout() {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for &s in &[1usize, 3, 8, 17, 33, 65] {
            for ko in KINDS {
                let a = input(&[s, 9], TRANS, dtype, s as u64);
                let b = input(&[9, 7], STEP, dtype, 1 + s as u64);
                let what = format!("mm_out {dtype} {s} into {}", ko.name);
                check_out(&what, &a, &b, ko, |a, b, o| a.mm_out(b, o));
                let a3 = input(&[3, s, 5], REV, dtype, 2);
                let b3 = input(&[3, 5, 4], CONTIG, dtype, 3);
                check_out(
                    &format!("bmm_out {dtype} {s} into {}", ko.name),
                    &a3,
                    &b3,
                    ko,
                    |a, b, o| a.bmm_out(b, o),
                );
                let v = input(&[5], OFFSET, dtype, 4);
                check_out(
                    &format!("matmul_out batch·vec {dtype} {s} into {}", ko.name),
                    &a3,
                    &v,
                    ko,
                    |a, b, o| a.matmul_out(b, o),
                );
                let b4 = input(&[2, 1, 5, 6], TRANS, dtype, 5);
                check_out(
                    &format!("matmul_out broadcast {dtype} {s} into {}", ko.name),
                    &a3,
                    &b4,
                    ko,
                    |a, b, o| a.matmul_out(b, o),
                );
            }
        }
    }
    // a 0-d output for a dot product
    let a = input(&[9], STEP, DType::F32, 1);
    let b = input(&[9], CONTIG, DType::F32, 2);
    check_out("matmul_out 0-d", &a, &b, OFFSET, |a, b, o| {
        a.matmul_out(b, o)
    });
}

#[test]
fn out_sharing_storage_with_an_input() {
    // out is a itself: the product must be computed before anything is written
    let a = input(&[8, 8], TRANS, DType::F32, 1);
    let b = input(&[8, 8], CONTIG, DType::F32, 2);
    let (shape, want, mag) = reference(&a, &b);
    a.matmul_out(&b, &a).unwrap();
    assert_eq!(a.shape(), shape.as_slice());
    assert_close(
        "out = a",
        &a.to_f64_vec().unwrap(),
        &want,
        &mag,
        DType::F32,
        8,
    );
    // out is a transposed view of b's storage
    let a = input(&[8, 8], CONTIG, DType::F64, 3);
    let b = input(&[8, 8], STEP, DType::F64, 4);
    let (_, want, mag) = reference(&a, &b);
    let bt = b.t().unwrap();
    a.mm_out(&b, &bt).unwrap();
    assert_close(
        "out = b.t()",
        &bt.to_f64_vec().unwrap(),
        &want,
        &mag,
        DType::F64,
        8,
    );
}

// ----- outer ---------------------------------------------------------------------------------------

#[test]
fn outer_products() {
    let a = input(&[5], STEP, DType::F32, 1);
    let b = input(&[3], OFFSET, DType::F32, 2);
    let o = a.outer(&b).unwrap();
    assert_eq!(o.shape(), &[5, 3]);
    let (av, bv) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    let want: Vec<f64> = av
        .iter()
        .flat_map(|x| bv.iter().map(move |y| x * y))
        .collect();
    assert_eq!(o.to_f64_vec().unwrap(), want);
    // as in PyTorch, outer is elementwise: integers work and dtypes promote
    let i = Tensor::from_vec(vec![1i64, 2, 3], [3]).unwrap();
    let f = Tensor::from_vec(vec![0.5f64, 2.0], [2]).unwrap();
    assert_eq!(
        i.outer(&i).unwrap().to_vec::<i64>().unwrap(),
        vec![1, 2, 3, 2, 4, 6, 3, 6, 9]
    );
    assert_eq!(i.outer(&f).unwrap().dtype(), DType::F64);
    let e = i
        .outer(&Tensor::zeros([2, 2], DType::I64, &CPU).unwrap())
        .unwrap_err();
    assert!(
        e.to_string().starts_with("outer: shapes [3] and [2, 2]"),
        "{e}"
    );
}

// ----- errors ----------------------------------------------------------------------------------------

/// Runs a failing op; checks its message and that neither input nor the output changed.
fn expect_err(
    what: &str,
    a: &Tensor,
    b: &Tensor,
    out: Option<&Tensor>,
    f: impl Fn() -> Result<Tensor, Error>,
    needles: &[&str],
) {
    let snap = |t: &Tensor| (t.to_f64_vec().unwrap(), t.version());
    let before: Vec<_> = [Some(a), Some(b), out]
        .iter()
        .flatten()
        .map(|t| snap(t))
        .collect();
    let e = match f() {
        Ok(_) => panic!("{what}: expected an error"),
        Err(e) => e,
    };
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "{what}: {msg:?} lacks {n:?}");
    }
    let after: Vec<_> = [Some(a), Some(b), out]
        .iter()
        .flatten()
        .map(|t| snap(t))
        .collect();
    for ((v0, n0), (v1, n1)) in before.iter().zip(&after) {
        assert_eq!(n0, n1, "{what}: version changed");
        assert!(
            v0.iter()
                .zip(v1)
                .all(|(x, y)| x == y || (x.is_nan() && y.is_nan())),
            "{what}: operand changed"
        );
    }
}

#[test]
fn errors_name_shapes_and_dtypes_and_leave_operands_unchanged() {
    let f = |s: &[usize]| input(s, CONTIG, DType::F32, 1);
    let (a23, b45) = (f(&[2, 3]), f(&[4, 5]));
    expect_err(
        "mm sizes",
        &a23,
        &b45,
        None,
        || a23.mm(&b45),
        &["mm: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)"],
    );
    expect_err(
        "matmul sizes",
        &a23,
        &b45,
        None,
        || a23.matmul(&b45),
        &["matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)"],
    );
    let v3 = f(&[3]);
    expect_err(
        "mm rank",
        &a23,
        &v3,
        None,
        || a23.mm(&v3),
        &["mm: shapes [2, 3] and [3]", "2-D"],
    );
    let (x, y) = (f(&[2, 3, 4]), f(&[3, 4, 5]));
    expect_err(
        "bmm batch",
        &x,
        &y,
        None,
        || x.bmm(&y),
        &["bmm: shapes [2, 3, 4] and [3, 4, 5]", "(2 != 3)", "matmul"],
    );
    expect_err(
        "bmm rank",
        &a23,
        &y,
        None,
        || a23.bmm(&y),
        &["bmm: shapes [2, 3] and [3, 4, 5]", "3-D"],
    );
    expect_err(
        "matmul batch",
        &x,
        &y,
        None,
        || x.matmul(&y),
        &[
            "matmul: shapes [2, 3, 4] and [3, 4, 5]",
            "[2]",
            "[3]",
            "broadcast",
        ],
    );
    let (v4, s) = (f(&[4]), Tensor::scalar(1.0, DType::F32, &CPU).unwrap());
    expect_err(
        "dot sizes",
        &v3,
        &v4,
        None,
        || v3.dot(&v4),
        &["dot: shapes [3] and [4] cannot be multiplied (3 != 4)"],
    );
    expect_err(
        "dot rank",
        &a23,
        &v3,
        None,
        || a23.dot(&v3),
        &["dot: shapes [2, 3] and [3]", "1-D"],
    );
    expect_err(
        "matmul 0-d",
        &s,
        &a23,
        None,
        || s.matmul(&a23),
        &["matmul: shapes [] and [2, 3]", "at least 1 dim"],
    );
    // dtypes: no promotion (as in PyTorch), integers refused
    let d = input(&[3, 2], CONTIG, DType::F64, 2);
    expect_err(
        "mixed dtypes",
        &a23,
        &d,
        None,
        || a23.matmul(&d),
        &["matmul", "float32", "float64", "to_dtype"],
    );
    let i = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], [3, 2]).unwrap();
    let i2 = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], [2, 3]).unwrap();
    expect_err(
        "int",
        &i2,
        &i,
        None,
        || i2.mm(&i),
        &["mm: dtype int64 is not supported", "float", "to_dtype"],
    );
    // outputs: wrong shape, wrong dtype, overlapping — all refused before any write
    let b32 = f(&[3, 2]);
    let (o_shape, _) = output(&[3, 3], TRANS, DType::F32);
    expect_err(
        "out shape",
        &a23,
        &b32,
        Some(&o_shape),
        || a23.mm_out(&b32, &o_shape),
        &["mm: shapes [3, 3] and [2, 2]"],
    );
    let (o_dtype, _) = output(&[2, 2], CONTIG, DType::F64);
    expect_err(
        "out dtype",
        &a23,
        &b32,
        Some(&o_dtype),
        || a23.mm_out(&b32, &o_dtype),
        &["mm", "float32", "float64"],
    );
    let o_over = Tensor::full([1, 2], f64::NAN, DType::F32, &CPU)
        .unwrap()
        .expand(&[2, 2])
        .unwrap();
    expect_err(
        "out overlap",
        &a23,
        &b32,
        Some(&o_over),
        || a23.mm_out(&b32, &o_over),
        &["mm", "share memory"],
    );
    let (o_int, _) = output(&[2, 2], CONTIG, DType::F32);
    expect_err(
        "out int",
        &i2,
        &i,
        Some(&o_int),
        || i2.matmul_out(&i, &o_int),
        &["int64"],
    );
    let (o_b, _) = output(&[2, 3, 5], CONTIG, DType::F32);
    expect_err(
        "bmm_out batch",
        &x,
        &y,
        Some(&o_b),
        || x.bmm_out(&y, &o_b),
        &["bmm"],
    );
}

// ----- half precision accumulates in f32 over the whole of k (issue #22) ----------------------

/// The spacing of `dtype`'s values at magnitude `x` (f16: 11 significant bits, normal from
/// 2^-14; bf16: 8 bits, normal from 2^-126).
fn half_ulp(dtype: DType, x: f64) -> f64 {
    let (bits, emin) = match dtype {
        DType::F16 => (11, -14),
        DType::BF16 => (8, -126),
        _ => unreachable!(),
    };
    let e = if x == 0.0 {
        emin
    } else {
        (x.abs().log2().floor() as i32).max(emin)
    };
    2f64.powi(e - (bits - 1))
}

/// The error bound of one element of an f16/bf16 product that accumulates in f32 and rounds
/// once, derived rather than tuned: the inputs are exact in f32 and so are their products (11 +
/// 11 or 8 + 8 significant bits ≤ 24), so only the k − 1 additions round, and any summation
/// order gives |s' − s| ≤ δ = γ_{k−1}·Σ|a·b| with γ_n = n·u/(1 − n·u), u = 2^-24. Rounding s' to
/// the half type adds at most ½ ulp(|s'|) ≤ ½ ulp(|s| + δ). The f64 reference is exact (the
/// inputs are multiples of 2^-10 below 1 in magnitude, so every partial sum fits in 53 bits).
fn half_matmul_bound(dtype: DType, k: usize, want: f64, sum_abs: f64) -> f64 {
    let nu = (k.saturating_sub(1)) as f64 * 2f64.powi(-24);
    let delta = nu / (1.0 - nu) * sum_abs;
    0.5 * half_ulp(dtype, want.abs() + delta) + delta
}

/// Values in [0.5, 1) on a grid of 2^-10, rounded to `dtype`: all positive, so partial sums
/// grow with k and a half-precision accumulator loses bits that an f32 one keeps.
fn positive_half(n: usize, seed: u64, dtype: DType) -> Tensor {
    let v: Vec<f64> = values(n, seed)
        .iter()
        .zip(values(n, seed ^ 0x9e37))
        .map(|(a, b)| 0.5 + ((a + 2.0) * 8.0 * 15.0 + (b + 2.0) * 8.0) / 1024.0 * 0.95)
        .map(|x| (x * 1024.0).floor() / 1024.0)
        .collect();
    Tensor::from_vec(v, [n]).unwrap().to_dtype(dtype).unwrap()
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

#[test]
fn f16_matmul_64x513x64_rounds_once() {
    // a = 1/8 everywhere; b's column: 1.125 for p < 386, 1 for 386 ≤ p < 512, 1/4 at p = 512.
    // The first 512 products sum to 70.03125 (no f16: one f16 step is 1/16 at 64..128), the
    // last adds 1/32, and the exact 70.0625 is an f16. Every product and every f32 partial sum
    // is exact, so an f32 accumulator returns exactly 70.0625 in every element. (An exact-answer
    // check, not a regression detector: gemm 0.19's f16 kernel, called as the old code did,
    // happens to get this arrangement right — its k blocks don't split at 512 here. The sweep
    // below is what the old f16 path fails: 86 of 960 elements out of bound at k = 513.)
    let (m, k, n) = (64, 513, 64);
    for dtype in [DType::F16, DType::BF16] {
        let a = Tensor::full([m, k], 0.125, dtype, &CPU).unwrap();
        let col: Vec<f64> = (0..k)
            .map(|p| match p {
                p if p < 386 => 1.125,
                p if p < 512 => 1.0,
                _ => 0.25,
            })
            .collect();
        let b = Tensor::from_vec(col, [k, 1])
            .unwrap()
            .expand(&[k as i64, n as i64])
            .unwrap()
            .contiguous()
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        // bf16 has 8 significant bits: 70.0625 rounds to 70 there (the exact answer rounded once)
        let want = if dtype == DType::F16 { 70.0625 } else { 70.0 };
        for (name, got) in [
            ("matmul", a.matmul(&b).unwrap()),
            (
                "bmm",
                a.unsqueeze(0)
                    .unwrap()
                    .bmm(&b.unsqueeze(0).unwrap())
                    .unwrap(),
            ),
            (
                "a·bᵀᵀ",
                a.matmul(&b.t().unwrap().contiguous().unwrap().t().unwrap())
                    .unwrap(),
            ),
        ] {
            let g = f64s(&got);
            let bad = g.iter().filter(|&&x| x != want).count();
            assert_eq!(
                bad,
                0,
                "{dtype} {name}: {bad} of {} elements differ from {want}, e.g. {}",
                g.len(),
                g[0]
            );
        }
    }
}

#[test]
fn half_matmul_accumulates_in_f32_on_both_sides_of_512_1024_4096() {
    // f16 and bf16 matmul (and bmm, mv, dot) at k on both sides of gemm's blocks, against the
    // exact f64 result with the derived bound of `half_matmul_bound` (no tuned constant).
    let (m, n) = (24, 40);
    for dtype in [DType::F16, DType::BF16] {
        for k in [511, 513, 1025, 4097] {
            let a = positive_half(m * k, k as u64, dtype)
                .reshape(&[m as i64, k as i64])
                .unwrap();
            let b = positive_half(k * n, 7 * k as u64, dtype)
                .reshape(&[k as i64, n as i64])
                .unwrap();
            let (av, bv) = (f64s(&a), f64s(&b));
            let check = |name: &str, got: &Tensor, rows: usize, cols: usize, bcol: usize| {
                let g = f64s(got);
                assert_eq!(g.len(), rows * cols, "{dtype} {name} k={k}: size");
                for i in 0..rows {
                    for j in 0..cols {
                        let (mut s, mut sa) = (0.0, 0.0);
                        for p in 0..k {
                            let t = av[i * k + p] * bv[p * n + j + bcol];
                            s += t;
                            sa += t.abs();
                        }
                        let got = g[i * cols + j];
                        let bound = half_matmul_bound(dtype, k, s, sa);
                        assert!(
                            (got - s).abs() <= bound,
                            "{dtype} {name} k={k} [{i},{j}]: got {got}, exact {s}, error {} > bound {bound}",
                            (got - s).abs()
                        );
                    }
                }
            };
            check("matmul", &a.matmul(&b).unwrap(), m, n, 0);
            let (a3, b3) = (a.unsqueeze(0).unwrap(), b.unsqueeze(0).unwrap());
            check("bmm", &a3.bmm(&b3).unwrap(), m, n, 0);
            let bt = b.t().unwrap().contiguous().unwrap().t().unwrap();
            check(
                "matmul(a, column-major b)",
                &a.matmul(&bt).unwrap(),
                m,
                n,
                0,
            );
            let v = b.select(1, 3).unwrap();
            check("mv", &a.matmul(&v).unwrap(), m, 1, 3);
            let a0 = a.select(0, 0).unwrap();
            check("dot", &a0.dot(&v).unwrap().reshape(&[1]).unwrap(), 1, 1, 3);
        }
    }
}
