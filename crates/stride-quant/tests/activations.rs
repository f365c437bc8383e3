//! Activation quantization: Q8_0 byte for byte `stride_gguf::quantize`, Q8_1's exact sums,
//! Q8_K's definition (ggml's `quantize_row_q8_K`) and sums of 16.

mod common;

use common::*;
use stride_gguf::{quantize, GgmlType};
use stride_quant::{ActFormat, Q8Row};

/// Rows that stress the rounding: random values at several scales, exact half steps,
/// zeros, a single non-zero, negative maxima, tiny (f16-subnormal scale) values.
fn rows(bs: usize) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(21);
    let mut out = Vec::new();
    for s in [1e-3f32, 0.1, 1.0, 37.0, 1e4] {
        out.push((0..4 * bs).map(|_| rng.sym() * s).collect());
    }
    // half steps: max 127 so d = 1 and x·(1/d) = k + 0.5 exactly
    out.push(
        (0..bs)
            .map(|i| {
                if i == 0 {
                    127.0
                } else {
                    (i as f32 - 16.0) + 0.5
                }
            })
            .collect(),
    );
    out.push(vec![0.0; bs]);
    let mut one = vec![0.0; bs];
    one[bs / 3] = -2.5;
    out.push(one);
    out.push((0..bs).map(|_| rng.sym() * 1e-7).collect());
    out.push((0..bs).map(|i| -(i as f32) / 7.0).collect());
    out
}

#[test]
fn q8_0_is_byte_exact_with_stride_gguf() {
    for x in rows(32) {
        let a = Q8Row::quantize(ActFormat::Q8_0, &x).unwrap();
        assert_eq!(
            a.to_block_bytes(),
            quantize(GgmlType::Q8_0, &x).unwrap(),
            "{x:?}"
        );
        assert!(a.s().is_empty() && a.bsums().is_empty());
    }
}

#[test]
fn q8_1_has_q8_0_values_and_exact_sums() {
    for x in rows(32) {
        let a0 = Q8Row::quantize(ActFormat::Q8_0, &x).unwrap();
        let a1 = Q8Row::quantize(ActFormat::Q8_1, &x).unwrap();
        assert_eq!((a0.d(), a0.qs()), (a1.d(), a1.qs()));
        for (b, qb) in a1.qs().chunks_exact(32).enumerate() {
            let sum: i64 = qb.iter().map(|&q| q as i64).sum();
            // exact: the f32 sum equals the f64 product
            assert_eq!(a1.s()[b] as f64, a1.d()[b] as f64 * sum as f64);
        }
        let bytes = a1.to_block_bytes();
        assert_eq!(bytes.len(), x.len() / 32 * GgmlType::Q8_1.type_size());
    }
}

#[test]
fn q8_k_follows_its_definition() {
    for x in rows(256) {
        let a = Q8Row::quantize(ActFormat::Q8_K, &x).unwrap();
        assert_eq!(
            a.to_block_bytes().len(),
            GgmlType::Q8_K.type_size() * x.len() / 256
        );
        for (b, (xb, qb)) in x
            .chunks_exact(256)
            .zip(a.qs().chunks_exact(256))
            .enumerate()
        {
            let d = a.d()[b];
            // the first value of largest magnitude maps to -127
            let (mut max, mut amax) = (0f32, 0f32);
            for &v in xb {
                if v.abs() > amax {
                    (amax, max) = (v.abs(), v);
                }
            }
            if amax == 0.0 {
                assert_eq!(d, 0.0);
                assert!(qb.iter().all(|&q| q == 0));
            } else {
                let iscale = -127.0 / max;
                assert_eq!(d, 1.0 / iscale);
                for (&v, &q) in xb.iter().zip(qb) {
                    assert_eq!(
                        q as f32,
                        (iscale * v).round_ties_even().clamp(-127.0, 127.0)
                    );
                    assert!(
                        (v as f64 - d as f64 * q as f64).abs() <= 0.51 * (d as f64).abs(),
                        "{v} vs {d} * {q}"
                    );
                }
            }
            for g in 0..16 {
                let s: i32 = qb[16 * g..16 * g + 16].iter().map(|&q| q as i32).sum();
                assert_eq!(a.bsums()[16 * b + g] as i32, s);
            }
        }
    }
}

#[test]
fn quantized_activations_are_within_the_stated_error() {
    // the bound the product tests use (0.6·d for Q8_0/Q8_1, 0.51·|d| for Q8_K), on rows
    // whose scales are f16-normal (max|x| ≥ 127·2⁻¹⁴)
    let mut rng = Rng::new(22);
    for format in [ActFormat::Q8_0, ActFormat::Q8_1, ActFormat::Q8_K] {
        for s in [0.01f32, 1.0, 300.0] {
            let x: Vec<f32> = (0..1024).map(|_| rng.sym() * s).collect();
            let a = Q8Row::quantize(format, &x).unwrap();
            let back = a.dequantize();
            for ((v, b), e) in x.iter().zip(&back).zip(act_error(&a)) {
                assert!(
                    ((v - b).abs() as f64) <= e,
                    "{format:?}: {v} -> {b}, bound {e}"
                );
            }
        }
    }
}

#[test]
fn non_finite_blocks_get_a_nan_scale() {
    for format in [ActFormat::Q8_0, ActFormat::Q8_1, ActFormat::Q8_K] {
        let bs = format.block_size();
        let mut x = vec![0.5f32; 2 * bs];
        x[bs + 3] = f32::INFINITY;
        let a = Q8Row::quantize(format, &x).unwrap();
        assert!(a.d()[0].is_finite() && a.d()[0] != 0.0, "{format:?}");
        assert!(a.d()[1].is_nan(), "{format:?}");
        assert!(a.qs()[bs..].iter().all(|&q| q == 0), "{format:?}");
        if format == ActFormat::Q8_1 {
            assert!(a.s()[1].is_nan());
        }
    }
}
