//! Products of every supported weight type against three references:
//!
//! 1. the exact (f64) dot product of the dequantized weights and the dequantized quantized
//!    activations — what the kernels are defined to compute — within the rounding bound
//!    `γ_n · Σ|t|` of their f32 accumulation (derived in the crate documentation: `n` is the
//!    number of terms per accumulation lane plus the three additions of the final tree, plus
//!    two roundings per term for the K-quants; `u = 2⁻²⁴`);
//! 2. the portable kernel against the AVX2 one: the same bits (they perform the same
//!    operations in the same order);
//! 3. the f64 product of `stride_gguf::dequantize(W)` and the *unquantized* activations,
//!    within the activation quantization error `Σ_e |w_e|·|x_e − q8(x)_e|` plus the bounds
//!    above and the f32 rounding of the dequantized weights.

mod common;

use common::*;
use stride_gguf::GgmlType;
use stride_quant::{ActFormat, Isa, Q8Row, QMatrix};

const MS: [usize; 7] = [1, 2, 3, 7, 16, 33, 130];

fn cols_for(ty: GgmlType) -> &'static [usize] {
    if ty.block_size() == 256 {
        // 1, 3 and 9 super-blocks (9: lane 0 gets two)
        &[256, 768, 2304]
    } else {
        // 1, 10 (a group of 8 and 2 more), 17 and 32 blocks
        &[32, 320, 544, 1024]
    }
}

fn isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
}

/// Runs every check for one weight type.
fn check_type(ty: GgmlType, seed: u64) {
    let mut rng = Rng::new(seed);
    let format = ActFormat::for_weights(ty).unwrap();
    let bs = ty.block_size();
    for (ci, &cols) in cols_for(ty).iter().enumerate() {
        // rows not a multiple of anything
        let rows = [37, 5, 29, 11][ci % 4];
        let w =
            QMatrix::from_vec(ty, rows, cols, random_weights(ty, rows, cols, &mut rng)).unwrap();
        let wdec: Vec<Vec<(f64, f64)>> = (0..rows)
            .map(|j| {
                decode_f64(
                    ty,
                    &w.as_bytes()[j * w.row_bytes()..(j + 1) * w.row_bytes()],
                )
            })
            .collect();
        let w32 = w.dequantize().unwrap();
        // the test's decoder reads the layout as stride_gguf does (f32 rounding apart)
        for (j, row) in wdec.iter().enumerate() {
            for (e, &(s, m)) in row.iter().enumerate() {
                let got = w32[j * cols + e] as f64;
                assert!(
                    (got - (s + m)).abs() <= 2.0 * U * (s.abs() + m.abs()),
                    "{ty} decoder disagrees with stride_gguf at ({j}, {e}): {got} vs {}",
                    s + m
                );
            }
        }
        let n = bound_n(ty, cols);
        for &m in &MS {
            let x = random_x(m, cols, cols, bs, &mut rng);
            let mut results = Vec::new();
            for isa in isas() {
                let mut y = vec![f32::NAN; m * rows];
                w.matmul_with(isa, &x, m, cols, &mut y, rows).unwrap();
                results.push((isa, y));
            }
            // 2: every implementation gives the same bits
            let (_, y) = &results[0];
            for (isa, other) in &results[1..] {
                for (k, (a, b)) in y.iter().zip(other).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{ty} cols {cols} m {m}: scalar {a} != {isa} {b} at output {k}"
                    );
                }
            }
            for i in 0..m {
                let xi = &x[i * cols..(i + 1) * cols];
                let a = Q8Row::quantize(format, xi).unwrap();
                let xa = act_f64(&a);
                let xerr = act_error(&a);
                for j in 0..rows {
                    for (isa, yv) in &results {
                        let got = yv[i * rows + j] as f64;
                        // 1: the exact value of what the kernel computes
                        let (exact, mag) = exact_dot(&wdec[j], &xa);
                        let tol1 = gamma(n) * mag + 1e-12 * mag;
                        assert!(
                            (got - exact).abs() <= tol1,
                            "{ty} ({isa}) cols {cols} m {m} y[{i}, {j}] = {got}, exact {exact}, |diff| {} > bound {tol1}",
                            (got - exact).abs()
                        );
                        // 3: the f32 product with dequantized weights and unquantized x
                        let wj = &w32[j * cols..(j + 1) * cols];
                        let mut plain = 0.0;
                        let mut qerr = 0.0;
                        let mut werr = 0.0;
                        for e in 0..cols {
                            plain += wj[e] as f64 * xi[e] as f64;
                            qerr += (wj[e] as f64).abs() * xerr[e];
                            let (s, mm) = wdec[j][e];
                            werr += 2.0 * U * (s.abs() + mm.abs()) * (xa[e].abs() + xerr[e]);
                        }
                        let tol3 = qerr + werr + 2.0 * tol1 + 1e-12 * mag;
                        assert!(
                            (got - plain).abs() <= tol3,
                            "{ty} ({isa}) cols {cols} m {m} y[{i}, {j}] = {got}, dequantized f32 product {plain}, |diff| {} > bound {tol3}",
                            (got - plain).abs()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn q4_0_products() {
    check_type(GgmlType::Q4_0, 1);
}

#[test]
fn q4_1_products() {
    check_type(GgmlType::Q4_1, 2);
}

#[test]
fn q5_0_products() {
    check_type(GgmlType::Q5_0, 3);
}

#[test]
fn q5_1_products() {
    check_type(GgmlType::Q5_1, 4);
}

#[test]
fn q8_0_products() {
    check_type(GgmlType::Q8_0, 5);
}

#[test]
fn q4_k_products() {
    check_type(GgmlType::Q4_K, 6);
}

#[test]
fn q5_k_products() {
    check_type(GgmlType::Q5_K, 7);
}

#[test]
fn q6_k_products() {
    check_type(GgmlType::Q6_K, 8);
}

/// Weights quantized from f32 by `QMatrix::quantize`: the product is close to the f32
/// product with the *original* weights (the weights' own quantization error: half a step
/// for Q*_0's symmetric grid and Q*_1's affine grid, `|w − deq(w)| ≤ 0.5·|d|·(1 + 2⁻¹⁰)`
/// with the f16 scale's rounding and the clamped top value folded in as a further step).
#[test]
fn quantized_f32_weights_approximate_the_f32_product() {
    let mut rng = Rng::new(9);
    let (rows, cols, m) = (13, 320, 3);
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.sym()).collect();
    let x = random_x(m, cols, cols, 32, &mut rng);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
    ] {
        let q = QMatrix::quantize(ty, rows, cols, &w).unwrap();
        assert_eq!(
            q.as_bytes(),
            &stride_gguf::quantize(ty, &w).unwrap()[..],
            "{ty} bytes"
        );
        let wd = q.dequantize().unwrap();
        let mut y = vec![0f32; m * rows];
        q.matmul(&x, m, &mut y).unwrap();
        for i in 0..m {
            let xi = &x[i * cols..(i + 1) * cols];
            let a = Q8Row::quantize(ActFormat::for_weights(ty).unwrap(), xi).unwrap();
            let xerr = act_error(&a);
            for j in 0..rows {
                let mut plain = 0.0;
                let mut bound = 0.0;
                for e in 0..cols {
                    let (wo, wq) = (w[j * cols + e] as f64, wd[j * cols + e] as f64);
                    plain += wo * xi[e] as f64;
                    // |w − deq(w)| measured, activation error bounded, plus 1e-5 relative
                    bound += (wo - wq).abs() * (xi[e] as f64).abs()
                        + wq.abs() * xerr[e]
                        + 1e-5 * (wo.abs() * (xi[e] as f64).abs());
                }
                let got = y[i * rows + j] as f64;
                assert!(
                    (got - plain).abs() <= bound,
                    "{ty} y[{i}, {j}] = {got}, f32 product {plain}, bound {bound}"
                );
            }
        }
    }
}

/// Strided activations (NaN between rows: never read), strided outputs with guards between
/// rows (never written), a broadcast row (stride 0), matvec == one row of matmul.
#[test]
fn strides_guards_and_matvec() {
    let mut rng = Rng::new(10);
    for ty in TYPES {
        let (rows, cols, m) = (19, if ty.block_size() == 256 { 512 } else { 96 }, 5);
        let w =
            QMatrix::from_vec(ty, rows, cols, random_weights(ty, rows, cols, &mut rng)).unwrap();
        let x = random_x(m, cols, cols, ty.block_size(), &mut rng);
        let mut y = vec![0f32; m * rows];
        w.matmul(&x, m, &mut y).unwrap();

        let (xs, ys) = (cols + 13, rows + 4);
        let mut xp = vec![f32::NAN; (m - 1) * xs + cols + 7];
        for i in 0..m {
            xp[i * xs..i * xs + cols].copy_from_slice(&x[i * cols..(i + 1) * cols]);
        }
        let guard = -1234.5f32;
        for isa in isas() {
            let mut yp = vec![guard; (m - 1) * ys + rows + 3];
            w.matmul_with(isa, &xp, m, xs, &mut yp, ys).unwrap();
            for i in 0..m {
                for j in 0..ys {
                    let v = yp.get(i * ys + j).copied();
                    if j < rows {
                        assert_eq!(
                            v.unwrap().to_bits(),
                            y[i * rows + j].to_bits(),
                            "{ty} {isa}"
                        );
                    } else if let Some(v) = v {
                        assert_eq!(v, guard, "{ty} {isa}: guard at ({i}, {j}) overwritten");
                    }
                }
            }
            assert!(yp[(m - 1) * ys + rows..].iter().all(|&v| v == guard));
        }
        // broadcast: every output row is the first one
        let mut yb = vec![0f32; m * rows];
        w.matmul_strided(&x, m, 0, &mut yb, rows).unwrap();
        for i in 0..m {
            assert_eq!(&yb[i * rows..(i + 1) * rows], &y[..rows], "{ty} broadcast");
        }
        // matvec is one row of matmul, bit for bit
        for i in 0..m {
            let mut yv = vec![0f32; rows];
            w.matvec(&x[i * cols..(i + 1) * cols], &mut yv).unwrap();
            assert_eq!(&yv[..], &y[i * rows..(i + 1) * rows], "{ty} matvec");
        }
    }
}

/// The result does not depend on the number of threads.
#[test]
fn thread_count_does_not_change_bits() {
    let mut rng = Rng::new(11);
    let ty = GgmlType::Q4_K;
    let (rows, cols, m) = (67, 768, 9);
    let w = QMatrix::from_vec(ty, rows, cols, random_weights(ty, rows, cols, &mut rng)).unwrap();
    let x = random_x(m, cols, cols, 256, &mut rng);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut y = vec![0f32; m * rows];
        pool.install(|| w.matmul(&x, m, &mut y)).unwrap();
        y
    };
    let one = run(1);
    for t in [2, 3, 7] {
        assert_eq!(run(t), one, "{t} threads");
    }
}

/// A NaN or infinite activation makes its output row NaN and leaves the others alone.
#[test]
fn non_finite_activation_poisons_its_row_only() {
    let mut rng = Rng::new(12);
    for ty in TYPES {
        let (rows, cols, m) = (7, ty.block_size() * 2, 3);
        let w =
            QMatrix::from_vec(ty, rows, cols, random_weights(ty, rows, cols, &mut rng)).unwrap();
        let x = random_x(m, cols, cols, ty.block_size(), &mut rng);
        let mut y = vec![0f32; m * rows];
        w.matmul(&x, m, &mut y).unwrap();
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut xb = x.clone();
            xb[cols + cols - 1] = bad; // row 1, last value
            for isa in isas() {
                let mut yb = vec![0f32; m * rows];
                w.matmul_with(isa, &xb, m, cols, &mut yb, rows).unwrap();
                assert!(
                    yb[rows..2 * rows].iter().all(|v| v.is_nan()),
                    "{ty} {isa} {bad}"
                );
                assert_eq!(&yb[..rows], &y[..rows]);
                assert_eq!(&yb[2 * rows..], &y[2 * rows..]);
            }
        }
    }
}

/// Zero activations give exact zeros; zero columns and zero rows are empty products.
#[test]
fn zeros_and_empty_shapes() {
    let mut rng = Rng::new(13);
    for ty in TYPES {
        let (rows, cols) = (3, ty.block_size());
        let w =
            QMatrix::from_vec(ty, rows, cols, random_weights(ty, rows, cols, &mut rng)).unwrap();
        let mut y = vec![f32::NAN; rows];
        w.matvec(&vec![0.0; cols], &mut y).unwrap();
        assert!(y.iter().all(|&v| v == 0.0), "{ty}: {y:?}");
        let empty = QMatrix::from_vec(ty, 4, 0, Vec::new()).unwrap();
        let mut y = vec![f32::NAN; 2 * 4];
        empty.matmul(&[], 2, &mut y).unwrap();
        assert!(y.iter().all(|&v| v == 0.0));
        let none = QMatrix::from_vec(ty, 0, cols, Vec::new()).unwrap();
        none.matmul(&vec![1.0; 2 * cols], 2, &mut []).unwrap();
        w.matmul(&[], 0, &mut []).unwrap();
    }
}

/// `row` and `row_into` are rows of `dequantize`.
#[test]
fn rows_gather_dequantized_values() {
    let mut rng = Rng::new(14);
    for ty in TYPES {
        let (rows, cols) = (5, ty.block_size() * 3);
        let w =
            QMatrix::from_vec(ty, rows, cols, random_weights(ty, rows, cols, &mut rng)).unwrap();
        let all = w.dequantize().unwrap();
        for i in 0..rows {
            assert_eq!(
                w.row(i).unwrap(),
                &all[i * cols..(i + 1) * cols],
                "{ty} row {i}"
            );
        }
    }
}

/// Activations so small that their scale rounds to zero (Q8_0/Q8_1: the f16 scale
/// underflows; for the tiniest, and for Q8_K, `1/d` or `−127/max` overflows and the
/// quantized values are meaningless): those rows are exactly zero,
/// the same bits on every path, and Q8_0 still matches `stride_gguf::quantize`.
#[test]
fn vanishing_activations_give_zero() {
    let mut rng = Rng::new(15);
    for ty in TYPES {
        let (rows, cols) = (6, ty.block_size() * 9);
        let w =
            QMatrix::from_vec(ty, rows, cols, random_weights(ty, rows, cols, &mut rng)).unwrap();
        for s in [1e-30f32, 1e-40, 1e-44] {
            if s == 1e-30 && ty.block_size() == 256 {
                continue; // Q8_K's f32 scale still represents these
            }
            let x: Vec<f32> = (0..cols).map(|_| rng.sym() * s).collect();
            if ty.block_size() == 32 {
                let a = Q8Row::quantize(ActFormat::Q8_0, &x).unwrap();
                assert_eq!(
                    a.to_block_bytes(),
                    stride_gguf::quantize(GgmlType::Q8_0, &x).unwrap()
                );
            }
            for isa in isas() {
                let mut y = vec![f32::NAN; rows];
                w.matmul_with(isa, &x, 1, cols, &mut y, rows).unwrap();
                assert!(
                    y.iter().all(|v| v.to_bits() == 0),
                    "{ty} {isa} scale {s}: {y:?}"
                );
            }
        }
    }
}
