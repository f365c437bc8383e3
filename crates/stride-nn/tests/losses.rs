//! Losses against hand-computed values (PyTorch's formulas), gradients by gradcheck, errors.

use stride_core::autograd::{gradcheck, GradcheckOptions};
use stride_core::{DType, Tensor};
use stride_nn::loss::{
    binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss,
    nll_loss, smooth_l1_loss, CrossEntropy, Reduction,
};

fn t64(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape.to_vec()).unwrap()
}
fn i64t(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape.to_vec()).unwrap()
}
fn val(t: Tensor) -> f64 {
    t.item::<f64>().unwrap()
}
fn close(a: f64, b: f64) {
    assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{a} vs {b}");
}
fn gc(f: impl Fn(&[Tensor]) -> stride_core::Result<Tensor>, xs: &[Tensor]) {
    gradcheck(f, xs, GradcheckOptions::default()).unwrap();
}

const X: [f64; 6] = [0.5, -1.0, 2.0, 0.25, 3.0, -0.5];
const Y: [f64; 6] = [1.0, -1.0, 0.0, 0.5, 1.0, 0.0];

#[test]
fn regression_losses_by_hand() {
    let (x, y) = (t64(&X, &[2, 3]), t64(&Y, &[2, 3]));
    let d: Vec<f64> = X.iter().zip(&Y).map(|(a, b)| a - b).collect();
    let sq: f64 = d.iter().map(|v| v * v).sum();
    close(val(mse_loss(&x, &y, Reduction::Mean).unwrap()), sq / 6.0);
    close(val(mse_loss(&x, &y, Reduction::Sum).unwrap()), sq);
    assert_eq!(mse_loss(&x, &y, Reduction::None).unwrap().shape(), &[2, 3]);
    let ab: f64 = d.iter().map(|v| v.abs()).sum();
    close(val(l1_loss(&x, &y, Reduction::Mean).unwrap()), ab / 6.0);
    let beta = 1.0;
    let sl: Vec<f64> = d
        .iter()
        .map(|v| {
            if v.abs() < beta {
                0.5 * v * v / beta
            } else {
                v.abs() - 0.5 * beta
            }
        })
        .collect();
    let got = smooth_l1_loss(&x, &y, Reduction::None, beta)
        .unwrap()
        .to_f64_vec()
        .unwrap();
    for (g, e) in got.iter().zip(&sl) {
        close(*g, *e);
    }
    close(
        val(smooth_l1_loss(&x, &y, Reduction::Sum, 0.0).unwrap()),
        ab,
    );
    assert!(smooth_l1_loss(&x, &y, Reduction::Sum, -1.0).is_err());
    // shape mismatch is an error
    assert!(mse_loss(&x, &t64(&Y[..3], &[3]), Reduction::Mean).is_err());
    let xg = t64(&[0.3, -1.7, 2.2, 0.1, 0.6, -0.4], &[2, 3])
        .requires_grad_(true)
        .unwrap();
    gc(|xs| mse_loss(&xs[0], &y, Reduction::Mean), &[xg.clone()]);
    gc(|xs| l1_loss(&xs[0], &y, Reduction::Sum), &[xg.clone()]);
    gc(|xs| smooth_l1_loss(&xs[0], &y, Reduction::Mean, 0.5), &[xg]);
}

/// log_softmax of a row, by hand.
fn log_softmax(row: &[f64]) -> Vec<f64> {
    let m = row.iter().cloned().fold(f64::MIN, f64::max);
    let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
    row.iter().map(|v| v - lse).collect()
}

const LOGITS: [f64; 12] = [1.0, 2.0, 0.5, -1.0, 0.1, 0.2, 3.0, 1.0, -2.0, 0.0, 0.5, 0.3];

#[test]
fn cross_entropy_with_indices_weights_ignore_and_smoothing() {
    let x = t64(&LOGITS, &[4, 3]);
    let tgt = i64t(&[1, 2, 0, 1], &[4]);
    let lp: Vec<Vec<f64>> = LOGITS.chunks(3).map(log_softmax).collect();
    let picked: Vec<f64> = (0..4).map(|n| -lp[n][[1, 2, 0, 1][n]]).collect();
    close(
        val(cross_entropy(&x, &tgt, &CrossEntropy::default()).unwrap()),
        picked.iter().sum::<f64>() / 4.0,
    );
    let none = cross_entropy(
        &x,
        &tgt,
        &CrossEntropy {
            reduction: Reduction::None,
            ..Default::default()
        },
    )
    .unwrap();
    for (g, e) in none.to_f64_vec().unwrap().iter().zip(&picked) {
        close(*g, *e);
    }
    // nll on log-probabilities gives the same
    close(
        val(nll_loss(
            &x.log_softmax(1).unwrap(),
            &tgt,
            &CrossEntropy {
                reduction: Reduction::Sum,
                ..Default::default()
            },
        )
        .unwrap()),
        picked.iter().sum(),
    );
    // weights: the mean divides by the summed weights of the targets
    let w = [0.2, 1.0, 3.0];
    let o = CrossEntropy {
        weight: Some(t64(&w, &[3])),
        ..Default::default()
    };
    let tg = [1usize, 2, 0, 1];
    let num: f64 = (0..4).map(|n| w[tg[n]] * picked[n]).sum();
    let den: f64 = tg.iter().map(|&c| w[c]).sum();
    close(val(cross_entropy(&x, &tgt, &o).unwrap()), num / den);
    // ignore_index: that target contributes nothing and doesn't count
    let tgt_ig = i64t(&[1, -100, 0, 1], &[4]);
    close(
        val(cross_entropy(&x, &tgt_ig, &CrossEntropy::default()).unwrap()),
        (picked[0] + picked[2] + picked[3]) / 3.0,
    );
    let o = CrossEntropy {
        ignore_index: 0,
        ..Default::default()
    };
    close(
        val(cross_entropy(&x, &tgt, &o).unwrap()),
        (picked[0] + picked[1] + picked[3]) / 3.0,
    );
    // label smoothing: (1-ε)·nll + ε/C · Σ_c −log p_c
    let eps = 0.1;
    let o = CrossEntropy {
        label_smoothing: eps,
        ..Default::default()
    };
    let smooth: Vec<f64> = (0..4).map(|n| -lp[n].iter().sum::<f64>()).collect();
    let expected = (1.0 - eps) * picked.iter().sum::<f64>() / 4.0
        + eps / 3.0 * smooth.iter().sum::<f64>() / 4.0;
    close(val(cross_entropy(&x, &tgt, &o).unwrap()), expected);
    // smoothing + weights + ignore (PyTorch's normalisation by the target weights)
    let o = CrossEntropy {
        label_smoothing: eps,
        weight: Some(t64(&w, &[3])),
        ..Default::default()
    };
    let valid = [0usize, 2, 3];
    let nll_w: f64 = valid.iter().map(|&n| w[tg[n]] * picked[n]).sum::<f64>()
        / valid.iter().map(|&n| w[tg[n]]).sum::<f64>();
    let sm_w: f64 = valid
        .iter()
        .map(|&n| -(0..3).map(|c| lp[n][c] * w[c]).sum::<f64>())
        .sum::<f64>()
        / valid.iter().map(|&n| w[tg[n]]).sum::<f64>();
    close(
        val(cross_entropy(&x, &tgt_ig, &o).unwrap()),
        (1.0 - eps) * nll_w + eps / 3.0 * sm_w,
    );
    // gradients
    let xg = t64(&LOGITS, &[4, 3]).requires_grad_(true).unwrap();
    gc(|xs| cross_entropy(&xs[0], &tgt_ig, &o), &[xg.clone()]);
    gc(
        |xs| cross_entropy(&xs[0], &tgt, &CrossEntropy::default()),
        &[xg],
    );
}

#[test]
fn cross_entropy_with_probabilities_and_extra_dims() {
    let x = t64(&LOGITS, &[4, 3]);
    let p = [0.2, 0.3, 0.5, 1.0, 0.0, 0.0, 0.1, 0.1, 0.8, 0.3, 0.3, 0.4];
    let pt = t64(&p, &[4, 3]);
    let lp: Vec<Vec<f64>> = LOGITS.chunks(3).map(log_softmax).collect();
    let per: Vec<f64> = (0..4)
        .map(|n| -(0..3).map(|c| p[n * 3 + c] * lp[n][c]).sum::<f64>())
        .collect();
    close(
        val(cross_entropy(&x, &pt, &CrossEntropy::default()).unwrap()),
        per.iter().sum::<f64>() / 4.0,
    );
    let eps = 0.2;
    let o = CrossEntropy {
        label_smoothing: eps,
        reduction: Reduction::Sum,
        ..Default::default()
    };
    let per_s: f64 = (0..4)
        .map(|n| {
            -(0..3)
                .map(|c| (p[n * 3 + c] * (1.0 - eps) + eps / 3.0) * lp[n][c])
                .sum::<f64>()
        })
        .sum();
    close(val(cross_entropy(&x, &pt, &o).unwrap()), per_s);
    assert!(cross_entropy(
        &x,
        &pt,
        &CrossEntropy {
            ignore_index: 1,
            ..Default::default()
        }
    )
    .is_err());
    let xg = t64(&LOGITS, &[4, 3]).requires_grad_(true).unwrap();
    gc(|xs| cross_entropy(&xs[0], &pt, &o), &[xg]);

    // (N, C, d): the class dim is 1
    let x3 = t64(&LOGITS, &[2, 3, 2]);
    let t3 = i64t(&[0, 2, 1, 1], &[2, 2]);
    let rows: Vec<f64> = (0..2)
        .flat_map(|n| (0..2).map(move |d| (n, d)))
        .map(|(n, d)| {
            let row: Vec<f64> = (0..3).map(|c| LOGITS[n * 6 + c * 2 + d]).collect();
            -log_softmax(&row)[[0usize, 2, 1, 1][n * 2 + d]]
        })
        .collect();
    let got = cross_entropy(
        &x3,
        &t3,
        &CrossEntropy {
            reduction: Reduction::None,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(got.shape(), &[2, 2]);
    for (g, e) in got.to_f64_vec().unwrap().iter().zip(&rows) {
        close(*g, *e);
    }
    // (C) input with a 0-d target
    let x1 = t64(&LOGITS[..3], &[3]);
    close(
        val(cross_entropy(&x1, &i64t(&[2], &[]), &CrossEntropy::default()).unwrap()),
        -log_softmax(&LOGITS[..3])[2],
    );
}

#[test]
fn cross_entropy_errors() {
    let x = t64(&LOGITS, &[4, 3]);
    let e = cross_entropy(&x, &i64t(&[1, 3, 0, 1], &[4]), &CrossEntropy::default()).unwrap_err();
    assert!(e.to_string().contains("index 3 is out of range"), "{e}");
    assert!(cross_entropy(&x, &i64t(&[1, 2, 0], &[3]), &CrossEntropy::default()).is_err());
    assert!(cross_entropy(
        &x,
        &i64t(&[1, 2, 0, 1], &[4]),
        &CrossEntropy {
            weight: Some(t64(&[1.0, 2.0], &[2])),
            ..Default::default()
        }
    )
    .is_err());
    assert!(cross_entropy(
        &x,
        &i64t(&[1, 2, 0, 1], &[4]),
        &CrossEntropy {
            label_smoothing: 1.5,
            ..Default::default()
        }
    )
    .is_err());
    assert!(cross_entropy(
        &i64t(&[1, 2, 3], &[3]),
        &i64t(&[1], &[]),
        &CrossEntropy::default()
    )
    .is_err());
    assert!(cross_entropy(&x, &t64(&[0.0; 4], &[4]), &CrossEntropy::default()).is_err());
}

#[test]
fn binary_cross_entropies_by_hand() {
    let p = [0.9, 0.2, 0.5, 0.999];
    let y = [1.0, 0.0, 1.0, 0.0];
    let (pt, yt) = (t64(&p, &[4]), t64(&y, &[4]));
    let per: Vec<f64> = p
        .iter()
        .zip(&y)
        .map(|(p, y)| -(y * p.ln() + (1.0 - y) * (1.0 - p).ln()))
        .collect();
    close(
        val(binary_cross_entropy(&pt, &yt, None, Reduction::Mean).unwrap()),
        per.iter().sum::<f64>() / 4.0,
    );
    let w = t64(&[1.0, 2.0, 0.5, 1.0], &[4]);
    close(
        val(binary_cross_entropy(&pt, &yt, Some(&w), Reduction::Sum).unwrap()),
        per[0] + 2.0 * per[1] + 0.5 * per[2] + per[3],
    );
    // log clamped at -100
    let z =
        binary_cross_entropy(&t64(&[0.0], &[1]), &t64(&[1.0], &[1]), None, Reduction::Sum).unwrap();
    assert_eq!(val(z), 100.0);
    assert!(
        binary_cross_entropy(&t64(&[1.5], &[1]), &t64(&[1.0], &[1]), None, Reduction::Sum).is_err()
    );
    let pg = t64(&[0.7, 0.2, 0.5, 0.4], &[4])
        .requires_grad_(true)
        .unwrap();
    gc(
        |xs| binary_cross_entropy(&xs[0], &yt, Some(&w), Reduction::Mean),
        &[pg],
    );

    // with logits, pos_weight
    let x = [2.0, -1.0, 0.0, 30.0];
    let xt = t64(&x, &[4]);
    let pw = t64(&[3.0, 1.0, 2.0, 0.5], &[4]);
    let logsig = |v: f64| v.min(0.0) - (-v.abs()).exp().ln_1p();
    let per: Vec<f64> = (0..4)
        .map(|i| {
            let lw = 1.0 + ([3.0, 1.0, 2.0, 0.5][i] - 1.0) * y[i];
            (1.0 - y[i]) * x[i] - lw * logsig(x[i])
        })
        .collect();
    let got = binary_cross_entropy_with_logits(&xt, &yt, None, Some(&pw), Reduction::None).unwrap();
    for (g, e) in got.to_f64_vec().unwrap().iter().zip(&per) {
        close(*g, *e);
    }
    // equals BCE(sigmoid(x)) without pos_weight
    let a = val(binary_cross_entropy_with_logits(
        &xt.slice(0, 0, 3, 1).unwrap(),
        &yt.slice(0, 0, 3, 1).unwrap(),
        None,
        None,
        Reduction::Mean,
    )
    .unwrap());
    let b = val(binary_cross_entropy(
        &xt.slice(0, 0, 3, 1).unwrap().sigmoid().unwrap(),
        &yt.slice(0, 0, 3, 1).unwrap(),
        None,
        Reduction::Mean,
    )
    .unwrap());
    close(a, b);
    let xg = t64(&[1.3, -0.7, 0.2, 2.5], &[4])
        .requires_grad_(true)
        .unwrap();
    gc(
        |xs| binary_cross_entropy_with_logits(&xs[0], &yt, Some(&w), Some(&pw), Reduction::Mean),
        &[xg],
    );
}

// ----- half precision: losses compute in f32 and round once (issue #22) ----------------------

const U32: f64 = 1.0 / 16_777_216.0; // u = 2^-24, the unit roundoff of f32

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

fn round_once(dt: DType, x: f64) -> f64 {
    val(t64(&[x], &[1])
        .to_dtype(dt)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .reshape(&[])
        .unwrap())
}

#[test]
fn half_mse_loss_rounds_once() {
    // d = input − target = [1, 1, 1, 1 + s] with s one half step at 1: the squares, their sum
    // and the mean are exact in f32, and the exact mean 1 + s/2 + s²/4 lies just above the
    // midpoint between 1 and 1 + s, so it rounds once to 1 + s. Rounding each square to the
    // half type first (the old code) lands the mean exactly on the midpoint, which ties to 1.
    for dt in [DType::F16, DType::BF16] {
        let s = half_ulp(dt, 1.0);
        let input = t64(&[1.25, 1.25, 1.25, 1.25 + s], &[4])
            .to_dtype(dt)
            .unwrap();
        let target = t64(&[0.25; 4], &[4]).to_dtype(dt).unwrap();
        let exact = 1.0 + s / 2.0 + s * s / 4.0;
        let l = mse_loss(&input, &target, Reduction::Mean).unwrap();
        assert_eq!(l.dtype(), dt);
        let got = val(l.to_dtype(DType::F64).unwrap());
        assert_eq!(got, round_once(dt, exact), "{dt} mse_loss: exact {exact}");
        assert_eq!(got, 1.0 + s, "{dt} mse_loss");
    }
}

#[test]
fn half_cross_entropy_rounds_once() {
    // rows [0, z] with class 0 the target: the loss of a row is log(1 + e^z); the mean of the
    // four is 0.249486719855…, whose correctly rounded f16 is 0.24951171875. Rounding each
    // log-probability, the sum and the quotient to f16 (the old code) gave 0.2496337890625,
    // 0.7 ulp beyond the half-ulp bound. Bound of the f32 computation, per row: x − max exact,
    // e^x within 2 ulps (4u), the sum of two terms u, so log Σ is off by ≤ 5u absolutely, plus
    // the log's own 2 ulps (4u·|l|) and the subtraction's rounding (u·|l|): δ_row = 5u + 5u·|l|;
    // the mean of four adds γ_3 ≤ 3u relative and divides by 4 exactly: δ = 5u + 8u·Σ|l|/4.
    let zs = [-22.0 / 8.0, -20.0 / 8.0, -9.0 / 8.0, -2.0 / 8.0];
    let logits: Vec<f64> = zs.iter().flat_map(|&z| [0.0, z]).collect();
    let ls: Vec<f64> = zs.iter().map(|z: &f64| z.exp().ln_1p()).collect();
    let exact = ls.iter().sum::<f64>() / 4.0;
    let delta = 5.0 * U32 + 8.0 * U32 * ls.iter().sum::<f64>() / 4.0;
    for dt in [DType::F16, DType::BF16] {
        let x = t64(&logits, &[4, 2])
            .to_dtype(dt)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let target = i64t(&[0, 0, 0, 0], &[4]);
        let l = cross_entropy(&x, &target, &CrossEntropy::default()).unwrap();
        assert_eq!(l.dtype(), dt);
        let got = val(l.to_dtype(DType::F64).unwrap());
        let bound = 0.5 * half_ulp(dt, exact + delta) + delta;
        assert!(
            (got - exact).abs() <= bound,
            "{dt} cross_entropy: got {got}, exact {exact}, rounded once {}, bound {bound}",
            round_once(dt, exact)
        );
        // backward through the casts reaches the half input
        l.backward().unwrap();
        let g = x.grad().unwrap();
        assert_eq!(g.dtype(), dt);
        // d mean / d z_r = σ(z_r)/4 for the second logit of row r: ½ ulp of the half type plus
        // the f32 backward chain (log_softmax's exp(out)·Σg and the forward's p: under a
        // dozen f32 operations of ≤ 2 ulps = 4u each, so ≤ 32u·|want| with room to spare)
        let gv = g.to_f64_vec().unwrap();
        for (r, &z) in zs.iter().enumerate() {
            let want = 1.0 / (1.0 + (-z).exp()) / 4.0;
            let b = 0.5 * half_ulp(dt, want * (1.0 + 1e-6)) + 32.0 * U32 * want;
            assert!(
                (gv[2 * r + 1] - want).abs() <= b,
                "{dt} grad row {r}: {} vs {want}",
                gv[2 * r + 1]
            );
        }
    }
}
