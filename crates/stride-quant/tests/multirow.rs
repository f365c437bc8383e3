//! The multi-row tile kernel (`matmul` with `m > 1` and a 32-value block type) against the
//! per-pair kernels (`matmul_per_pair`) and the portable kernels: the same bits for every
//! `m` (tile remainders included), every available `Isa`, strided, broadcast and guarded
//! layouts, and any number of threads.

mod common;

use common::*;
use stride_gguf::GgmlType;
use stride_quant::{Isa, QMatrix};

const MS: [usize; 12] = [1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 130, 512];

/// The types with a tile kernel.
const TILED: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

fn isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
}

fn assert_same_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{what}: output {k}: {a} != {b} (per-pair)"
        );
    }
}

/// Every m of `MS` for one type: 11 blocks (a group of 8 and a tail of 3) and 24 blocks
/// (three whole groups), 7 and 3 weight rows.
fn check_type(ty: GgmlType, seed: u64) {
    let mut rng = Rng::new(seed);
    for (cols, rows) in [(352, 7), (768, 3)] {
        let w =
            QMatrix::from_vec(ty, rows, cols, random_weights(ty, rows, cols, &mut rng)).unwrap();
        for &m in &MS {
            let x = random_x(m, cols, cols, 32, &mut rng);
            // the reference: the portable kernel, one call per output
            let mut want = vec![f32::NAN; m * rows];
            w.matmul_per_pair(Isa::Scalar, &x, m, cols, &mut want, rows)
                .unwrap();
            for isa in isas() {
                let mut pair = vec![f32::NAN; m * rows];
                w.matmul_per_pair(isa, &x, m, cols, &mut pair, rows)
                    .unwrap();
                assert_same_bits(
                    &pair,
                    &want,
                    &format!("{ty} {isa} per-pair cols {cols} m {m}"),
                );
                let mut tiled = vec![f32::NAN; m * rows];
                w.matmul_with(isa, &x, m, cols, &mut tiled, rows).unwrap();
                assert_same_bits(
                    &tiled,
                    &want,
                    &format!("{ty} {isa} tiled cols {cols} m {m}"),
                );
            }
            let mut y = vec![f32::NAN; m * rows];
            w.matmul(&x, m, &mut y).unwrap();
            assert_same_bits(&y, &want, &format!("{ty} matmul cols {cols} m {m}"));
        }
    }
}

#[test]
fn q4_0_tiles_match_per_pair_bits() {
    check_type(GgmlType::Q4_0, 101);
}

#[test]
fn q4_1_tiles_match_per_pair_bits() {
    check_type(GgmlType::Q4_1, 102);
}

#[test]
fn q5_0_tiles_match_per_pair_bits() {
    check_type(GgmlType::Q5_0, 103);
}

#[test]
fn q5_1_tiles_match_per_pair_bits() {
    check_type(GgmlType::Q5_1, 104);
}

#[test]
fn q8_0_tiles_match_per_pair_bits() {
    check_type(GgmlType::Q8_0, 105);
}

/// Strided rows (NaN between them: never read), guarded output rows (never written), a
/// broadcast row (stride 0) and overlapping rows, through the tile kernel: the bits of the
/// per-pair product of the same layout.
#[test]
fn tiles_with_strides_broadcast_and_guards() {
    let mut rng = Rng::new(106);
    for ty in TILED {
        let (rows, cols) = (23, 320);
        let w =
            QMatrix::from_vec(ty, rows, cols, random_weights(ty, rows, cols, &mut rng)).unwrap();
        for m in [2, 5, 9, 37] {
            let guard = -1234.5f32;
            // (x stride, y stride): padded rows, a broadcast row, overlapping rows
            for (xs, ys) in [(cols + 13, rows + 4), (0, rows), (cols / 2, rows + 1)] {
                let x = random_x(m, xs.max(1), cols, 32, &mut rng);
                let x = if xs == 0 { x[..cols].to_vec() } else { x };
                let mut want = vec![guard; (m - 1) * ys + rows + 3];
                w.matmul_per_pair(Isa::Scalar, &x, m, xs, &mut want, ys)
                    .unwrap();
                for isa in isas() {
                    let mut got = vec![guard; want.len()];
                    w.matmul_with(isa, &x, m, xs, &mut got, ys).unwrap();
                    assert_same_bits(&got, &want, &format!("{ty} {isa} m {m} strides {xs}/{ys}"));
                }
                // the guards are intact and a broadcast gives equal rows
                for i in 0..m {
                    assert!(want[i * ys + rows..(i * ys + ys).min(want.len())]
                        .iter()
                        .all(|&v| v == guard));
                    if xs == 0 {
                        assert_eq!(
                            &want[i * ys..i * ys + rows],
                            &want[..rows],
                            "{ty} broadcast"
                        );
                    }
                }
                assert!(want[(m - 1) * ys + rows..].iter().all(|&v| v == guard));
                // and the plain matmul of the rows gathered contiguously agrees
                let xc: Vec<f32> = (0..m)
                    .flat_map(|i| x[i * xs..i * xs + cols].iter().copied())
                    .collect();
                let mut yc = vec![0f32; m * rows];
                w.matmul(&xc, m, &mut yc).unwrap();
                for i in 0..m {
                    assert_same_bits(
                        &yc[i * rows..(i + 1) * rows],
                        &want[i * ys..i * ys + rows],
                        &format!("{ty} gathered m {m}"),
                    );
                }
            }
        }
    }
}

/// Many weight rows (several chunks per thread) and few (more activation blocks than
/// weight chunks), on 1, 2, 3 and 7 threads: the bits of the per-pair product.
#[test]
fn tiles_do_not_depend_on_threads_or_split() {
    let mut rng = Rng::new(107);
    for (ty, rows, cols, m) in [
        (GgmlType::Q4_1, 150, 320, 45),
        (GgmlType::Q8_0, 2, 96, 70),
        (GgmlType::Q4_0, 1, 32, 13),
    ] {
        let w =
            QMatrix::from_vec(ty, rows, cols, random_weights(ty, rows, cols, &mut rng)).unwrap();
        let x = random_x(m, cols, cols, 32, &mut rng);
        let mut want = vec![0f32; m * rows];
        w.matmul_per_pair(Isa::Scalar, &x, m, cols, &mut want, rows)
            .unwrap();
        for threads in [1, 2, 3, 7] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut y = vec![0f32; m * rows];
            pool.install(|| w.matmul(&x, m, &mut y)).unwrap();
            assert_same_bits(
                &y,
                &want,
                &format!("{ty} {rows}×{cols} m {m} {threads} threads"),
            );
        }
    }
}
