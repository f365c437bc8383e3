//! stride_nn::functional: attention, rotary embeddings and norms against straightforward
//! host references, gradchecks, and the half-precision bound.

use stride_core::autograd::{gradcheck, GradcheckOptions};
use stride_core::{DType, Device, Generator, Tensor};
use stride_nn::functional::{
    causal_mask, layer_norm, rms_norm, scaled_dot_product_attention as sdpa, Rotary, RotaryStyle,
};

const CPU: Device = Device::Cpu;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(
        shape.to_vec(),
        DType::F64,
        &CPU,
        Some(&Generator::new(seed)),
    )
    .unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

fn assert_close(got: &Tensor, want: &[f64], tol: f64, what: &str) {
    let g = vals(got);
    assert_eq!(g.len(), want.len(), "{what}: lengths");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol,
            "{what}: element {i}: got {a}, want {b} (|diff| {} > {tol})",
            (a - b).abs()
        );
    }
}

/// Attention on the host, one (batch·head) slice at a time: q `[n, hq, l, e]`, k/v
/// `[n, hk, s, *]`, `allowed[n][hq][l][s]` (None = all), query head h uses kv head
/// `h / (hq/hk)`. Fully masked rows give zeros.
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    (n, hq, hk, l, s, e, ev): (usize, usize, usize, usize, usize, usize, usize),
    allowed: &dyn Fn(usize, usize, usize, usize) -> bool,
    add: &dyn Fn(usize, usize, usize, usize) -> f64,
    scale: f64,
) -> Vec<f64> {
    let g = hq / hk;
    let mut out = vec![0.0; n * hq * l * ev];
    for b in 0..n {
        for h in 0..hq {
            let kh = h / g;
            for i in 0..l {
                let mut sc = vec![f64::NEG_INFINITY; s];
                for j in 0..s {
                    if !allowed(b, h, i, j) {
                        continue;
                    }
                    let mut dot = 0.0;
                    for x in 0..e {
                        dot +=
                            q[((b * hq + h) * l + i) * e + x] * k[((b * hk + kh) * s + j) * e + x];
                    }
                    sc[j] = dot * scale + add(b, h, i, j);
                }
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let w: Vec<f64> = sc.iter().map(|&x| (x - m).exp()).collect();
                let z: f64 = w.iter().sum();
                for y in 0..ev {
                    let mut acc = 0.0;
                    for j in 0..s {
                        acc += w[j] / z * v[((b * hk + kh) * s + j) * ev + y];
                    }
                    out[((b * hq + h) * l + i) * ev + y] = acc;
                }
            }
        }
    }
    out
}

#[test]
fn attention_matches_the_host_reference() {
    let (n, h, l, s, e, ev) = (2, 3, 5, 7, 8, 6);
    let (q, k, v) = (
        randn(&[n, h, l, e], 1),
        randn(&[n, h, s, e], 2),
        randn(&[n, h, s, ev], 3),
    );
    let got = sdpa(&q, &k, &v, None, 0.0, false, None, false).unwrap();
    let want = reference(
        &vals(&q),
        &vals(&k),
        &vals(&v),
        (n, h, h, l, s, e, ev),
        &|_, _, _, _| true,
        &|_, _, _, _| 0.0,
        1.0 / (e as f64).sqrt(),
    );
    assert_close(&got, &want, 1e-12, "plain");
    // explicit scale
    let got = sdpa(&q, &k, &v, None, 0.0, false, Some(0.3), false).unwrap();
    let want = reference(
        &vals(&q),
        &vals(&k),
        &vals(&v),
        (n, h, h, l, s, e, ev),
        &|_, _, _, _| true,
        &|_, _, _, _| 0.0,
        0.3,
    );
    assert_close(&got, &want, 1e-12, "scale 0.3");
}

#[test]
fn gqa_equals_an_explicit_repeat_of_k_and_v_and_the_host_reference() {
    let (n, hq, hk, l, s, e) = (2, 6, 2, 4, 5, 8);
    let (q, k, v) = (
        randn(&[n, hq, l, e], 4),
        randn(&[n, hk, s, e], 5),
        randn(&[n, hk, s, e], 6),
    );
    let got = sdpa(&q, &k, &v, None, 0.0, true, None, true).unwrap();
    let kr = k.repeat_interleave(hq / hk, Some(1)).unwrap();
    let vr = v.repeat_interleave(hq / hk, Some(1)).unwrap();
    let want = sdpa(&q, &kr, &vr, None, 0.0, true, None, false).unwrap();
    assert_close(&got, &vals(&want), 1e-12, "gqa vs repeat");
    let r = reference(
        &vals(&q),
        &vals(&k),
        &vals(&v),
        (n, hq, hk, l, s, e, e),
        &|_, _, i, j| j <= i,
        &|_, _, _, _| 0.0,
        1.0 / (e as f64).sqrt(),
    );
    assert_close(&got, &r, 1e-12, "gqa vs host");
    // without enable_gqa different head counts are an error naming the fix
    let err = sdpa(&q, &k, &v, None, 0.0, false, None, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("enable_gqa"), "{err}");
    let err = sdpa(
        &q,
        &randn(&[n, 4, s, e], 1),
        &randn(&[n, 4, s, e], 1),
        None,
        0.0,
        false,
        None,
        true,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("multiple"), "{err}");
}

/// A bool mask with some rows fully masked: row i of head h allowed where (i + 2j + h) % 3 != 0,
/// and row 1 fully masked.
type Allowed = Box<dyn Fn(usize, usize, usize, usize) -> bool>;

fn test_mask(h: usize, l: usize, s: usize) -> (Tensor, Allowed) {
    let f = move |_b: usize, hh: usize, i: usize, j: usize| {
        i != 1 && !(i + 2 * j + hh).is_multiple_of(3)
    };
    let mut m = vec![];
    for hh in 0..h {
        for i in 0..l {
            for j in 0..s {
                m.push(f(0, hh, i, j));
            }
        }
    }
    (Tensor::from_vec(m, [h, l, s]).unwrap(), Box::new(f))
}

#[test]
fn bool_and_additive_masks_agree_and_fully_masked_rows_are_zero() {
    let (n, h, l, s, e) = (2, 3, 4, 6, 8);
    let (q, k, v) = (
        randn(&[n, h, l, e], 7),
        randn(&[n, h, s, e], 8),
        randn(&[n, h, s, e], 9),
    );
    let (mask, f) = test_mask(h, l, s);
    let got = sdpa(&q, &k, &v, Some(&mask), 0.0, false, None, false).unwrap();
    let want = reference(
        &vals(&q),
        &vals(&k),
        &vals(&v),
        (n, h, h, l, s, e, e),
        &*f,
        &|_, _, _, _| 0.0,
        1.0 / (e as f64).sqrt(),
    );
    assert_close(&got, &want, 1e-12, "bool mask");
    // the same mask as 0 / −inf added to the scores
    let zero = Tensor::zeros([h, l, s], DType::F64, &CPU).unwrap();
    let additive = zero
        .masked_fill(&mask.logical_not().unwrap(), f64::NEG_INFINITY)
        .unwrap();
    let got2 = sdpa(&q, &k, &v, Some(&additive), 0.0, false, None, false).unwrap();
    assert_close(&got2, &vals(&got), 0.0, "additive == bool");
    // row 1 of every head is fully masked: zeros, not NaN
    let row1 = got.select(2, 1).unwrap();
    assert!(
        vals(&row1).iter().all(|&x| x == 0.0),
        "fully masked rows: {:?}",
        vals(&row1)
    );
    // a finite additive mask is added
    let bias = randn(&[l, s], 10);
    let got = sdpa(&q, &k, &v, Some(&bias), 0.0, false, None, false).unwrap();
    let bv = vals(&bias);
    let want = reference(
        &vals(&q),
        &vals(&k),
        &vals(&v),
        (n, h, h, l, s, e, e),
        &|_, _, _, _| true,
        &|_, _, i, j| bv[i * s + j],
        1.0 / (e as f64).sqrt(),
    );
    assert_close(&got, &want, 1e-12, "float mask");
}

#[test]
fn fully_masked_rows_have_zero_finite_gradients() {
    let (h, l, s, e) = (2, 3, 4, 4);
    let q = randn(&[1, h, l, e], 11).requires_grad_(true).unwrap();
    let k = randn(&[1, h, s, e], 12).requires_grad_(true).unwrap();
    let v = randn(&[1, h, s, e], 13).requires_grad_(true).unwrap();
    let (mask, _) = test_mask(h, l, s);
    let y = sdpa(&q, &k, &v, Some(&mask), 0.0, false, None, false).unwrap();
    y.sum().unwrap().backward().unwrap();
    for (name, t) in [("q", &q), ("k", &k), ("v", &v)] {
        let g = vals(&t.grad().unwrap());
        assert!(
            g.iter().all(|x| x.is_finite()),
            "{name} grad has NaN/inf: {g:?}"
        );
    }
    // the fully masked query row gets no gradient
    let gq = q.grad().unwrap().select(2, 1).unwrap();
    assert!(vals(&gq).iter().all(|&x| x == 0.0));
}

#[test]
fn causal_is_top_left_and_causal_mask_gives_bottom_right() {
    let (h, l, s, e) = (2, 3, 5, 8);
    let (q, k, v) = (
        randn(&[1, h, l, e], 14),
        randn(&[1, h, s, e], 15),
        randn(&[1, h, s, e], 16),
    );
    let got = sdpa(&q, &k, &v, None, 0.0, true, None, false).unwrap();
    let want = reference(
        &vals(&q),
        &vals(&k),
        &vals(&v),
        (1, h, h, l, s, e, e),
        &|_, _, i, j| j <= i,
        &|_, _, _, _| 0.0,
        1.0 / (e as f64).sqrt(),
    );
    assert_close(&got, &want, 1e-12, "is_causal (top-left)");
    let br = causal_mask(l, s, (s - l) as i64, &CPU).unwrap();
    let got = sdpa(&q, &k, &v, Some(&br), 0.0, false, None, false).unwrap();
    let want = reference(
        &vals(&q),
        &vals(&k),
        &vals(&v),
        (1, h, h, l, s, e, e),
        &|_, _, i, j| j <= i + s - l,
        &|_, _, _, _| 0.0,
        1.0 / (e as f64).sqrt(),
    );
    assert_close(&got, &want, 1e-12, "bottom-right");
    // the last L queries of a causal S×S attention == bottom-right L×S
    let qs = randn(&[1, h, s, e], 17);
    let full = sdpa(&qs, &k, &v, None, 0.0, true, None, false).unwrap();
    let tail = sdpa(
        &qs.narrow(2, (s - l) as i64, l).unwrap(),
        &k,
        &v,
        Some(&br),
        0.0,
        false,
        None,
        false,
    )
    .unwrap();
    assert_close(
        &tail,
        &vals(&full.narrow(2, (s - l) as i64, l).unwrap()),
        1e-12,
        "decode tail",
    );
    assert!(
        sdpa(&q, &k, &v, Some(&br), 0.0, true, None, false).is_err(),
        "mask with is_causal"
    );
}

#[test]
fn permuted_views_of_one_fused_projection() {
    let (b, s, h, d) = (2, 5, 3, 4);
    let fused = randn(&[b, s, 3, h, d], 18); // (B, S, 3, H, D)
    let part = |i: i64| fused.select(2, i).unwrap().permute(&[0, 2, 1, 3]).unwrap();
    let (q, k, v) = (part(0), part(1), part(2));
    assert!(!q.is_contiguous());
    let got = sdpa(&q, &k, &v, None, 0.0, true, None, false).unwrap();
    let c = |t: &Tensor| t.contiguous().unwrap();
    let want = sdpa(&c(&q), &c(&k), &c(&v), None, 0.0, true, None, false).unwrap();
    assert_close(&got, &vals(&want), 1e-13, "views vs contiguous");
}

#[test]
fn attention_errors_name_the_problem() {
    let q = randn(&[1, 2, 3, 4], 1);
    let bad_e = randn(&[1, 2, 3, 5], 1);
    let e = sdpa(&q, &bad_e, &bad_e, None, 0.0, false, None, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("last dim"), "{e}");
    let e = sdpa(
        &q,
        &q.to_dtype(DType::F32).unwrap(),
        &q,
        None,
        0.0,
        false,
        None,
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("dtype"), "{e}");
    let m = Tensor::ones([3, 3], DType::Bool, &CPU).unwrap();
    let e = sdpa(
        &q,
        &q,
        &q,
        Some(&m.narrow(0, 0, 2).unwrap()),
        0.0,
        false,
        None,
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("attn_mask"), "{e}");
    let i = Tensor::zeros([1, 2, 3, 4], DType::I64, &CPU).unwrap();
    assert!(sdpa(&i, &i, &i, None, 0.0, false, None, false).is_err());
}

#[test]
fn dropout_keeps_or_drops_whole_weights() {
    let (q, k, v) = (
        randn(&[1, 1, 3, 4], 19),
        randn(&[1, 1, 5, 4], 20),
        Tensor::ones([1, 1, 5, 1], DType::F64, &CPU).unwrap(),
    );
    // v = 1: each output is (sum of kept weights) / (1 − p); p = 1 drops everything
    let y = sdpa(&q, &k, &v, None, 1.0, false, None, false).unwrap();
    assert!(vals(&y).iter().all(|&x| x == 0.0));
    let y = sdpa(&q, &k, &v, None, 0.0, false, None, false).unwrap();
    assert_close(&y, &[1.0, 1.0, 1.0], 1e-15, "weights sum to 1");
}

#[test]
fn gradchecks() {
    let opts = GradcheckOptions::default();
    let rg = |t: Tensor| t.requires_grad_(true).unwrap();
    let (mask, _) = test_mask(4, 3, 5);
    let q = rg(randn(&[1, 4, 3, 4], 21));
    let k = rg(randn(&[1, 2, 5, 4], 22));
    let v = rg(randn(&[1, 2, 5, 3], 23));
    gradcheck(
        |x| sdpa(&x[0], &x[1], &x[2], Some(&mask), 0.0, false, None, true),
        &[q.clone(), k.clone(), v.clone()],
        opts,
    )
    .unwrap();
    gradcheck(
        |x| sdpa(&x[0], &x[1], &x[2], None, 0.0, true, Some(0.7), true),
        &[q, k, v],
        opts,
    )
    .unwrap();
    for style in [RotaryStyle::HalfSplit, RotaryStyle::Interleaved] {
        let rope = Rotary::new(6, 100.0, 16, style, &CPU).unwrap();
        let x = rg(randn(&[2, 2, 3, 8], 24));
        gradcheck(|x| rope.apply(&x[0], 5), std::slice::from_ref(&x), opts).unwrap();
        gradcheck(|x| rope.apply_rows(&x[0], &[-1, 4]), &[x], opts).unwrap();
    }
    let x = rg(randn(&[3, 5], 25));
    let w = rg(randn(&[5], 26));
    let b = rg(randn(&[5], 27));
    gradcheck(
        |t| rms_norm(&t[0], &[5], Some(&t[1]), Some(1e-6)),
        &[x.clone(), w.clone()],
        opts,
    )
    .unwrap();
    gradcheck(
        |t| layer_norm(&t[0], &[5], Some(&t[1]), Some(&t[2]), 1e-5),
        &[x, w, b],
        opts,
    )
    .unwrap();
}

/// Rotary on the host: x `[rows, t, d]`, row r at positions `off[r] + i` (negative → 0).
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn rotary_reference(
    x: &[f64],
    rows: usize,
    t: usize,
    d: usize,
    dim: usize,
    base: f64,
    off: &[i64],
    style: RotaryStyle,
) -> Vec<f64> {
    let mut out = x.to_vec();
    for r in 0..rows {
        for i in 0..t {
            let p = (off[r] + i as i64).max(0) as f64;
            let at = (r * t + i) * d;
            for f in 0..dim / 2 {
                let th = p * base.powf(-2.0 * f as f64 / dim as f64);
                let (ia, ib) = match style {
                    RotaryStyle::HalfSplit => (f, f + dim / 2),
                    RotaryStyle::Interleaved => (2 * f, 2 * f + 1),
                };
                let (a, b) = (x[at + ia], x[at + ib]);
                out[at + ia] = a * th.cos() - b * th.sin();
                out[at + ib] = a * th.sin() + b * th.cos();
            }
        }
    }
    out
}

#[test]
fn rotary_both_conventions_match_the_formula() {
    let (b, h, t, d) = (2, 3, 5, 8);
    for style in [RotaryStyle::HalfSplit, RotaryStyle::Interleaved] {
        for dim in [8, 6] {
            let rope = Rotary::new(dim, 500.0, 32, style, &CPU).unwrap();
            let x = randn(&[b, h, t, d], 28);
            let got = rope.apply(&x, 3).unwrap();
            let want = rotary_reference(&vals(&x), b * h, t, d, dim, 500.0, &vec![3; b * h], style);
            assert_close(&got, &want, 1e-14, &format!("{style:?} dim {dim}"));
            // per-row offsets, a negative one (left padding) included
            let got = rope.apply_rows(&x, &[-2, 7]).unwrap();
            let offs: Vec<i64> = (0..b * h)
                .map(|r| if r / h == 0 { -2 } else { 7 })
                .collect();
            let want = rotary_reference(&vals(&x), b * h, t, d, dim, 500.0, &offs, style);
            assert_close(&got, &want, 1e-14, &format!("{style:?} dim {dim} rows"));
            // a permuted view (B, T, H, D) → (B, H, T, D)
            let xt = randn(&[b, t, h, d], 29);
            let view = xt.permute(&[0, 2, 1, 3]).unwrap();
            let got = rope.apply(&view, 0).unwrap();
            assert_close(
                &got,
                &vals(&rope.apply(&view.contiguous().unwrap(), 0).unwrap()),
                0.0,
                "view",
            );
        }
    }
    // the two conventions really differ
    let x = randn(&[1, 1, 2, 8], 30);
    let a = Rotary::new(8, 10.0, 4, RotaryStyle::HalfSplit, &CPU)
        .unwrap()
        .apply(&x, 1)
        .unwrap();
    let b2 = Rotary::new(8, 10.0, 4, RotaryStyle::Interleaved, &CPU)
        .unwrap()
        .apply(&x, 1)
        .unwrap();
    assert!(vals(&a)
        .iter()
        .zip(vals(&b2))
        .any(|(p, q)| (p - q).abs() > 1e-3));
}

#[test]
fn rotary_offset_equals_slicing_a_longer_table() {
    for style in [RotaryStyle::HalfSplit, RotaryStyle::Interleaved] {
        let rope = Rotary::new(8, 10000.0, 40, style, &CPU).unwrap();
        let x = randn(&[1, 2, 30, 8], 31);
        let all = rope.apply(&x, 0).unwrap();
        for (off, len) in [(0, 1), (7, 5), (29, 1)] {
            let part = rope
                .apply(&x.narrow(2, off, len).unwrap(), off as usize)
                .unwrap();
            assert_close(
                &part,
                &vals(&all.narrow(2, off, len).unwrap()),
                0.0,
                "offset",
            );
        }
        assert!(rope.apply(&x, 11).is_err(), "beyond max_len");
    }
}

#[test]
fn norms_match_the_formula_and_the_modules() {
    let x = randn(&[4, 6], 32);
    let w = randn(&[6], 33);
    let b = randn(&[6], 34);
    let xv = vals(&x);
    let (wv, bv) = (vals(&w), vals(&b));
    let mut rms = vec![];
    let mut ln = vec![];
    for r in 0..4 {
        let row = &xv[r * 6..r * 6 + 6];
        let ms = row.iter().map(|a| a * a).sum::<f64>() / 6.0;
        let mean = row.iter().sum::<f64>() / 6.0;
        let var = row.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / 6.0;
        for c in 0..6 {
            rms.push(row[c] / (ms + 1e-6).sqrt() * wv[c]);
            ln.push((row[c] - mean) / (var + 1e-5).sqrt() * wv[c] + bv[c]);
        }
    }
    assert_close(
        &rms_norm(&x, &[6], Some(&w), Some(1e-6)).unwrap(),
        &rms,
        1e-14,
        "rms_norm",
    );
    assert_close(
        &layer_norm(&x, &[6], Some(&w), Some(&b), 1e-5).unwrap(),
        &ln,
        1e-14,
        "layer_norm",
    );
    assert!(rms_norm(&x, &[5], None, None).is_err());
    assert!(layer_norm(&x, &[6], Some(&randn(&[5], 1)), None, 1e-5).is_err());
}

/// ½ ulp of `d` at `m` (the final rounding) — as stride-check's `bounds::ulp`.
fn half_ulp(m: f64, d: DType) -> f64 {
    let (p, emin) = match d {
        DType::F16 => (11, -14),
        DType::BF16 => (8, -126),
        _ => (24, -126),
    };
    let e = if m == 0.0 {
        emin
    } else {
        (m.abs().log2().floor() as i32).max(emin)
    };
    0.5 * 2f64.powi(e - (p - 1))
}

/// f16/bf16 against f32 on the same (rounded) inputs: the half version computes in f32 and
/// rounds once, so it may differ from the f32 result only by the final rounding (½ ulp of the
/// half dtype at the value) plus the f32 computation's own error on both sides — bounded by
/// `2 · c · n · u₃₂ · S` for a reduction of `n` terms of magnitude sum `S` (bounds.rs).
#[test]
fn half_precision_rounds_once() {
    let u32_ = 2f64.powi(-24);
    for dt in [DType::F16, DType::BF16] {
        let r = |t: &Tensor| t.to_dtype(dt).unwrap();
        let f = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
        // attention: scores (E terms) then weights·v (S terms) of magnitude ≤ max|v|
        let (e, s) = (16, 9);
        let q = r(&randn(&[2, 4, 5, e], 35));
        let k = r(&randn(&[2, 2, s, e], 36));
        let v = r(&randn(&[2, 2, s, e], 37));
        let got = sdpa(&q, &k, &v, None, 0.0, true, None, true).unwrap();
        assert_eq!(got.dtype(), dt);
        let want = vals(&sdpa(&f(&q), &f(&k), &f(&v), None, 0.0, true, None, true).unwrap());
        let vmax = vals(&v).iter().fold(0f64, |a, &b| a.max(b.abs()));
        let qk: f64 = vals(&q).iter().fold(0f64, |a, &b| a.max(b.abs()))
            * vals(&k).iter().fold(0f64, |a, &b| a.max(b.abs()))
            * e as f64;
        // the score error (≤ 2·E·u·|q||k|, scaled by 1/√E) moves each weight by ≤ that times
        // 2 (softmax's Lipschitz bound in ∞-norm) and the output by ≤ it times S·max|v|
        let acc = 2.0
            * 2.0
            * (e as f64 * qk / (e as f64).sqrt() * 2.0 * s as f64 + s as f64)
            * u32_
            * vmax;
        for (i, (g, w)) in vals(&got).iter().zip(&want).enumerate() {
            let tol = half_ulp(*w, dt) + acc;
            assert!(
                (g - w).abs() <= tol,
                "{dt} attention element {i}: {g} vs {w} (tol {tol})"
            );
        }
        // rotary: two products and a sum per element
        let rope = Rotary::new(16, 10000.0, 64, RotaryStyle::Interleaved, &CPU).unwrap();
        let x = r(&randn(&[2, 3, 7, 16], 38));
        let got = rope.apply(&x, 40).unwrap();
        assert_eq!(got.dtype(), dt);
        let want = vals(&rope.apply(&f(&x), 40).unwrap());
        let xm = vals(&x).iter().fold(0f64, |a, &b| a.max(b.abs()));
        for (i, (g, w)) in vals(&got).iter().zip(&want).enumerate() {
            let tol = half_ulp(*w, dt) + 2.0 * 3.0 * u32_ * 2.0 * xm;
            assert!(
                (g - w).abs() <= tol,
                "{dt} rotary element {i}: {g} vs {w} (tol {tol})"
            );
        }
        // rms_norm over 32 features
        let x = r(&randn(&[4, 32], 39));
        let w = r(&randn(&[32], 40));
        let got = rms_norm(&x, &[32], Some(&w), Some(1e-5)).unwrap();
        assert_eq!(got.dtype(), dt);
        let want = vals(&rms_norm(&f(&x), &[32], Some(&f(&w)), Some(1e-5)).unwrap());
        for (i, (g, wv)) in vals(&got).iter().zip(&want).enumerate() {
            let tol = half_ulp(*wv, dt) + 2.0 * 2.0 * (32.0 + 4.0) * u32_ * wv.abs();
            assert!(
                (g - wv).abs() <= tol,
                "{dt} rms_norm element {i}: {g} vs {wv} (tol {tol})"
            );
        }
    }
}

/// The fused norms and the fused cross-entropy, forward and backward, as a training step
/// uses them, make no host wait: under `forbid_sync` a wait is an error. On the CPU (which
/// announces the waits a GPU run would make) and on CUDA where there is one.
#[test]
fn fused_norms_and_loss_make_no_host_wait() {
    use stride_nn::loss::{cross_entropy, CrossEntropy};
    let mut devices = vec![Device::Cpu];
    devices.extend(stride_core::cuda::require_or_skip(
        "fused_norms_and_loss_make_no_host_wait",
    ));
    for dev in devices {
        let x = Tensor::randn([4, 6, 32], DType::BF16, &dev, None)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let w = Tensor::ones([32], DType::BF16, &dev)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let t = Tensor::from_vec((0..24).map(|i| (i * 5) % 32).collect::<Vec<i64>>(), [4, 6])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let o = CrossEntropy {
            ignore_index: 3,
            label_smoothing: 0.1,
            z_loss: 1e-4,
            ..CrossEntropy::default()
        };
        let _no_waits = stride_core::debug::forbid_sync();
        let h = rms_norm(&x, &[32], Some(&w), Some(1e-6)).unwrap();
        let h = layer_norm(&h, &[32], Some(&w), None, 1e-5).unwrap();
        let loss = cross_entropy(
            &h.reshape(&[24, 32]).unwrap(),
            &t.reshape(&[24]).unwrap(),
            &o,
        )
        .unwrap();
        loss.backward().unwrap();
        assert!(x.grad().is_some() && w.grad().is_some(), "on {dev}");
    }
}
