//! The CUDA products ([`DeviceQMatrix::matmul`]) against the CPU's ([`QMatrix::matmul`]):
//! **the same bits**, for every 32-value block type, every `m` of `MS` (both sides of the
//! kernels' 1/2/4/8-row tiles and of the grid's row groups), block counts on both sides of
//! the 8 accumulation lanes and of a warp's 32 blocks, `n` not a multiple of the 4 rows a
//! thread block covers, contiguous and transposed (non-contiguous) activations; and against
//! the exact (f64) product of the dequantized weights with the unquantized activations,
//! within the crate's stated bound `γ_n·Σ|t| + Σ_e |w_e|·|x_e − deq(a)_e|`.
//!
//! The one-launch decode kernel (`m ≤ 8`) against the CPU and against the two-launch path, in
//! every input layout it reads in place (transposed, narrowed with a row stride ≠ k, f16 and
//! bf16), at `k` on both sides of a warp's 32-block chunk, and `matmul_many` against separate
//! products, bit for bit, with its launch count. `STRIDE_QUANT_MUTANT=fused_block` (a broken
//! kernel) must make these fail. `matmul_swiglu` against `matmul` of the composed SwiGLU, bit
//! for bit (`swiglu_plain` must fail it; its messages name the composed result "CPU").
//!
//! Skipped, saying so, without a CUDA device (`STRIDE_REQUIRE_CUDA=1` makes that a failure).

mod common;

use common::*;
use stride_core::cuda::quant::{quantized_matmul_many_with, BlockFormat, QuantPath};
use stride_core::{cuda, DType, Device, Tensor};
use stride_gguf::GgmlType;
use stride_quant::{ActFormat, DeviceQMatrix, Q8Row, QMatrix};

const MS: [usize; 22] = [
    1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 130, 257,
];

/// Block counts: 1, 11 (a lane group and a tail), 35 (past one warp's 32 blocks), 65 (three
/// chunks, the last of one block).
const KS: [usize; 4] = [32, 352, 1120, 2080];

const N: usize = 67;

const TYPES: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

fn assert_same_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        // NaN payloads are not part of the contract (a NaN is a NaN on both devices)
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{what}: output {i} (row {}, col {}): CUDA {a:e} != CPU {b:e}",
            i / N,
            i % N
        );
    }
}

/// `|y − Σ w·x| ≤ γ_n·Σ|t| + Σ|w|·|x − deq(a)|` for every output (exact references in f64).
fn assert_within_bound(ty: GgmlType, w: &QMatrix, x: &[f32], m: usize, y: &[f32], what: &str) {
    let k = w.cols();
    let dec = decode_f64(ty, w.as_bytes());
    let g = gamma(bound_n(ty, k));
    let fmt = ActFormat::for_weights(ty).unwrap();
    for i in 0..m {
        let xr = &x[i * k..(i + 1) * k];
        let a = Q8Row::quantize(fmt, xr).unwrap();
        let da = act_f64(&a);
        for j in 0..w.rows() {
            let wr = &dec[j * k..(j + 1) * k];
            let (_, mag) = exact_dot(wr, &da);
            let mut exact = 0f64;
            let mut act = 0f64;
            for e in 0..k {
                let we = wr[e].0 + wr[e].1;
                exact += we * xr[e] as f64;
                act += we.abs() * (xr[e] as f64 - da[e]).abs();
            }
            // the f64 sums' own rounding is below 1e-12 of these magnitudes
            let bound = g * mag + act + 1e-12 * (mag + act);
            let got = y[i * w.rows() + j] as f64;
            assert!(
                (got - exact).abs() <= bound,
                "{what}: output ({i}, {j}) = {got:e}, exact {exact:e}: error {:e} > bound {bound:e}",
                (got - exact).abs()
            );
        }
    }
}

fn check_type(gpu: &Device, ty: GgmlType, seed: u64) {
    let mut rng = Rng::new(seed);
    for &k in &KS {
        let w = QMatrix::from_vec(ty, N, k, random_weights(ty, N, k, &mut rng)).unwrap();
        let dw = w.to_device(gpu).unwrap();
        assert_eq!(
            (dw.rows(), dw.cols(), dw.nbytes()),
            (N, k, w.as_bytes().len())
        );
        for &m in &MS {
            let x = random_x(m, k, k, 32, &mut rng);
            let mut want = vec![f32::NAN; m * N];
            w.matmul(&x, m, &mut want).unwrap();
            let what = format!("{ty} k {k} m {m}");
            // contiguous [m, k]
            let xt = Tensor::from_vec(x.clone(), [m, k])
                .unwrap()
                .to_device(gpu)
                .unwrap();
            let y = dw.matmul(&xt).unwrap();
            assert_eq!(y.shape(), &[m, N]);
            let got = y.to_vec::<f32>().unwrap();
            if matches!(m, 1 | 5 | 33 | 257) {
                assert_within_bound(ty, &w, &x, m, &got, &what);
            }
            assert_same_bits(&got, &want, &format!("{what} contiguous"));
            // transposed: a [k, m] tensor viewed as [m, k] (strides [1, m])
            let mut xtr = vec![0f32; m * k];
            for i in 0..m {
                for e in 0..k {
                    xtr[e * m + i] = x[i * k + e];
                }
            }
            let xnc = Tensor::from_vec(xtr, [k, m])
                .unwrap()
                .to_device(gpu)
                .unwrap()
                .t()
                .unwrap();
            assert!(!xnc.is_contiguous() || m == 1);
            let got = dw.matmul(&xnc).unwrap().to_vec::<f32>().unwrap();
            assert_same_bits(&got, &want, &format!("{what} transposed"));
        }
    }
}

#[test]
fn cuda_q4_0_matches_cpu_bits_and_bound() {
    let Some(gpu) = cuda::require_or_skip("cuda_q4_0_matches_cpu_bits_and_bound") else {
        return;
    };
    check_type(&gpu, TYPES[0], 101);
}

#[test]
fn cuda_q4_1_matches_cpu_bits_and_bound() {
    let Some(gpu) = cuda::require_or_skip("cuda_q4_1_matches_cpu_bits_and_bound") else {
        return;
    };
    check_type(&gpu, TYPES[1], 102);
}

#[test]
fn cuda_q5_0_matches_cpu_bits_and_bound() {
    let Some(gpu) = cuda::require_or_skip("cuda_q5_0_matches_cpu_bits_and_bound") else {
        return;
    };
    check_type(&gpu, TYPES[2], 103);
}

#[test]
fn cuda_q5_1_matches_cpu_bits_and_bound() {
    let Some(gpu) = cuda::require_or_skip("cuda_q5_1_matches_cpu_bits_and_bound") else {
        return;
    };
    check_type(&gpu, TYPES[3], 104);
}

#[test]
fn cuda_q8_0_matches_cpu_bits_and_bound() {
    let Some(gpu) = cuda::require_or_skip("cuda_q8_0_matches_cpu_bits_and_bound") else {
        return;
    };
    check_type(&gpu, TYPES[4], 105);
}

/// Half-precision activations: widened exactly, so the result is the f32 product rounded
/// once; a leading batch shape and a non-finite activation (its row all NaN, as on the CPU).
#[test]
fn cuda_half_inputs_batches_and_nan() {
    let Some(gpu) = cuda::require_or_skip("cuda_half_inputs_batches_and_nan") else {
        return;
    };
    let mut rng = Rng::new(7);
    let (k, m) = (352, 6);
    let w = QMatrix::from_vec(
        GgmlType::Q4_1,
        N,
        k,
        random_weights(GgmlType::Q4_1, N, k, &mut rng),
    )
    .unwrap();
    let dw = w.to_device(&gpu).unwrap();
    let mut x = random_x(m, k, k, 32, &mut rng);
    for dt in [DType::F16, DType::BF16] {
        let xh = Tensor::from_vec(x.clone(), [2, 3, k])
            .unwrap()
            .to_dtype(dt)
            .unwrap();
        let xw = xh.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        let mut want = vec![0f32; m * N];
        w.matmul(&xw, m, &mut want).unwrap();
        let want = Tensor::from_vec(want, [2, 3, N])
            .unwrap()
            .to_dtype(dt)
            .unwrap();
        let y = dw.matmul(&xh.to_device(&gpu).unwrap()).unwrap();
        assert_eq!((y.shape(), y.dtype()), (&[2, 3, N][..], dt));
        let (a, b) = (
            y.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            want.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
        );
        assert_same_bits(&a, &b, &format!("{dt} input"));
    }
    x[2 * k + 40] = f32::INFINITY;
    let mut want = vec![0f32; m * N];
    w.matmul(&x, m, &mut want).unwrap();
    let y = dw
        .matmul(
            &Tensor::from_vec(x, [m, k])
                .unwrap()
                .to_device(&gpu)
                .unwrap(),
        )
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(y[2 * N..3 * N].iter().all(|v| v.is_nan()));
    assert_same_bits(&y, &want, "a non-finite activation");
}

/// The blocks survive the round trip; m = 0 gives an empty result; mismatched inputs are
/// errors saying what was wrong.
#[test]
fn cuda_round_trip_and_errors() {
    let Some(gpu) = cuda::require_or_skip("cuda_round_trip_and_errors") else {
        return;
    };
    let mut rng = Rng::new(8);
    let w = QMatrix::from_vec(
        GgmlType::Q8_0,
        5,
        64,
        random_weights(GgmlType::Q8_0, 5, 64, &mut rng),
    )
    .unwrap();
    let dw = w.to_device(&gpu).unwrap();
    assert_eq!(dw.to_host().unwrap(), w);
    let empty = Tensor::zeros([0, 64], DType::F32, &gpu).unwrap();
    assert_eq!(dw.matmul(&empty).unwrap().shape(), &[0, 5]);
    let bad = Tensor::zeros([2, 32], DType::F32, &gpu).unwrap();
    let e = dw.matmul(&bad).unwrap_err().to_string();
    assert!(e.contains("[..., 64]"), "{e}");
    let cpu = Tensor::zeros([2, 64], DType::F32, &Device::Cpu).unwrap();
    assert!(dw.matmul(&cpu).is_err());
    let f64x = Tensor::zeros([2, 64], DType::F64, &gpu).unwrap();
    let e = dw.matmul(&f64x).unwrap_err().to_string();
    assert!(e.contains("f32, f16 or bf16"), "{e}");
}

/// Types without a CUDA kernel are refused by name (no device needed: refused first).
#[test]
fn k_quants_are_refused_on_cuda_by_name() {
    let mut rng = Rng::new(9);
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        let w = QMatrix::from_vec(ty, 2, 256, random_weights(ty, 2, 256, &mut rng)).unwrap();
        let e = w.to_device(&Device::Cuda(0)).unwrap_err().to_string();
        assert!(
            e.contains(&ty.to_string()) && e.contains("Q4_0, Q4_1"),
            "{e}"
        );
    }
    let w = QMatrix::from_vec(GgmlType::Q8_0, 1, 32, vec![0; 34]).unwrap();
    let e = w.to_device(&Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("CPU"), "{e}");
}

/// Both sides of the one-launch switch (m ≤ 8) and of the R = 1/2/4/8 row tiles.
const FUSED_MS: [usize; 7] = [1, 2, 3, 5, 8, 9, 17];

/// 1, 2, 17, 18 and 48 blocks (SmolLM2's 576 and 1536), and 33 (a chunk of 32 and one more).
const FUSED_KS: [usize; 6] = [32, 64, 544, 576, 1536, 1056];

fn to_gpu(x: Vec<f32>, shape: &[usize], gpu: &Device) -> Tensor {
    Tensor::from_vec(x, shape).unwrap().to_device(gpu).unwrap()
}

fn cpu_product(w: &QMatrix, x: &[f32], m: usize) -> Vec<f32> {
    let mut y = vec![f32::NAN; m * w.rows()];
    w.matmul(x, m, &mut y).unwrap();
    y
}

fn bits_of(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

/// The decode kernel against the CPU, in every layout it reads in place, and against the
/// two-launch path.
fn check_fused(gpu: &Device, ty: GgmlType, seed: u64) {
    let mut rng = Rng::new(seed);
    for &k in &FUSED_KS {
        let w = QMatrix::from_vec(ty, N, k, random_weights(ty, N, k, &mut rng)).unwrap();
        let dw = w.to_device(gpu).unwrap();
        for &m in &FUSED_MS {
            let x = random_x(m, k, k, 32, &mut rng);
            let want = cpu_product(&w, &x, m);
            let what = format!("{ty} k {k} m {m}");
            let xt = to_gpu(x.clone(), &[m, k], gpu);
            let y = dw.matmul(&xt).unwrap();
            assert_eq!(y.shape(), &[m, N]);
            assert_same_bits(&bits_of(&y), &want, &format!("{what} contiguous"));
            // the same product by the other path
            let fmt = BlockFormat::from_name(ty.name()).unwrap();
            for path in [QuantPath::TwoLaunch, QuantPath::Fused] {
                if path == QuantPath::Fused && m > 8 {
                    continue;
                }
                let y = quantized_matmul_many_with(&xt, &[(dw.blocks(), fmt, N)], k, path).unwrap();
                assert_same_bits(&bits_of(&y[0]), &want, &format!("{what} {path:?}"));
            }
            // transposed: a [k, m] tensor viewed as [m, k] (strides [1, m])
            let mut xtr = vec![0f32; m * k];
            for i in 0..m {
                for e in 0..k {
                    xtr[e * m + i] = x[i * k + e];
                }
            }
            let xnc = to_gpu(xtr, &[k, m], gpu).t().unwrap();
            assert_same_bits(
                &bits_of(&dw.matmul(&xnc).unwrap()),
                &want,
                &format!("{what} transposed"),
            );
            // narrowed: rows of k + 96 values, the product over values 64..64 + k (row stride
            // ≠ k, an offset), under a leading batch dim of 1
            let wide = k + 96;
            let mut xw = vec![f32::NAN; m * wide];
            for i in 0..m {
                xw[i * wide + 64..i * wide + 64 + k].copy_from_slice(&x[i * k..(i + 1) * k]);
            }
            let xn = to_gpu(xw, &[1, m, wide], gpu).narrow(2, 64, k).unwrap();
            assert!(!xn.is_contiguous() || m == 1);
            let y = dw.matmul(&xn).unwrap();
            assert_eq!(y.shape(), &[1, m, N]);
            assert_same_bits(&bits_of(&y), &want, &format!("{what} narrowed"));
        }
    }
}

/// f16 and bf16 inputs to the decode kernel (contiguous and transposed): the f32 product of
/// the widened input, rounded once to the input's dtype.
fn check_fused_half(gpu: &Device, ty: GgmlType, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(k, m) in &[(576usize, 1usize), (1536, 3), (1056, 8), (544, 9)] {
        let w = QMatrix::from_vec(ty, N, k, random_weights(ty, N, k, &mut rng)).unwrap();
        let dw = w.to_device(gpu).unwrap();
        let x = random_x(m, k, k, 32, &mut rng);
        for dt in [DType::F16, DType::BF16] {
            let xh = Tensor::from_vec(x.clone(), [m, k])
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let xw = xh.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
            let want = Tensor::from_vec(cpu_product(&w, &xw, m), [m, N])
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let want = bits_of(&want);
            let what = format!("{ty} k {k} m {m} {dt}");
            let xg = xh.to_device(gpu).unwrap();
            let y = dw.matmul(&xg).unwrap();
            assert_eq!(y.dtype(), dt);
            assert_same_bits(&bits_of(&y), &want, &what);
            let xtg = xg.t().unwrap().contiguous().unwrap().t().unwrap();
            assert_same_bits(
                &bits_of(&dw.matmul(&xtg).unwrap()),
                &want,
                &format!("{what} transposed"),
            );
        }
    }
}

#[test]
fn cuda_fused_matches_cpu_bits_every_format_layout_and_k() {
    let Some(gpu) = cuda::require_or_skip("cuda_fused_matches_cpu_bits_every_format_layout_and_k")
    else {
        return;
    };
    for (i, &ty) in TYPES.iter().enumerate() {
        check_fused(&gpu, ty, 201 + i as u64);
        check_fused_half(&gpu, ty, 301 + i as u64);
    }
}

/// `matmul_many` gives each matrix's `matmul` bits: SmolLM2's q/k/v (one format, then mixed
/// formats) and gate/up, more matrices than one launch takes, every row count of FUSED_MS,
/// f16 input; and a decode-sized call is one launch whatever the input's layout.
#[test]
fn cuda_matmul_many_matches_separate_products() {
    let Some(gpu) = cuda::require_or_skip("cuda_matmul_many_matches_separate_products") else {
        return;
    };
    let Device::Cuda(ordinal) = gpu else {
        unreachable!("require_or_skip gives a CUDA device")
    };
    let mut rng = Rng::new(11);
    let mut mk = |ty: GgmlType, n: usize, k: usize| -> (QMatrix, DeviceQMatrix) {
        let w = QMatrix::from_vec(ty, n, k, random_weights(ty, n, k, &mut rng)).unwrap();
        let d = w.to_device(&gpu).unwrap();
        (w, d)
    };
    type Group = (&'static str, Vec<(GgmlType, usize)>, usize);
    let groups: Vec<Group> = vec![
        (
            "qkv",
            vec![
                (GgmlType::Q4_1, 576),
                (GgmlType::Q4_1, 192),
                (GgmlType::Q4_1, 192),
            ],
            576,
        ),
        (
            "qkv mixed",
            vec![
                (GgmlType::Q4_1, 576),
                (GgmlType::Q8_0, 192),
                (GgmlType::Q5_0, 192),
            ],
            576,
        ),
        (
            "gate/up",
            vec![(GgmlType::Q4_1, 1536), (GgmlType::Q4_1, 1536)],
            576,
        ),
        (
            "ten",
            (0..10)
                .map(|i| (TYPES[i % 2 * 4], 5 + 13 * i))
                .collect::<Vec<_>>(),
            1056,
        ),
    ];
    for (name, specs, k) in groups {
        let mats: Vec<(QMatrix, DeviceQMatrix)> =
            specs.iter().map(|&(ty, n)| mk(ty, n, k)).collect();
        let dmats: Vec<&DeviceQMatrix> = mats.iter().map(|m| &m.1).collect();
        for &m in &FUSED_MS {
            let x = random_x(m, k, k, 32, &mut Rng::new(m as u64));
            let xt = to_gpu(x.clone(), &[m, k], &gpu);
            let ys = DeviceQMatrix::matmul_many(&dmats, &xt).unwrap();
            assert_eq!(ys.len(), mats.len());
            for (j, ((w, dw), y)) in mats.iter().zip(&ys).enumerate() {
                let what = format!("{name} m {m} matrix {j} ({})", w.ggml_type());
                assert_eq!(y.shape(), &[m, w.rows()], "{what}");
                let sep = bits_of(&dw.matmul(&xt).unwrap());
                assert_same_bits(&bits_of(y), &sep, &format!("{what} vs matmul"));
                assert_same_bits(&sep, &cpu_product(w, &x, m), &format!("{what} vs CPU"));
            }
            // f16 input: each output the f16 rounding of the same product
            let xh = xt.to_dtype(DType::F16).unwrap();
            let ys = DeviceQMatrix::matmul_many(&dmats, &xh).unwrap();
            for (j, (dw, y)) in dmats.iter().zip(&ys).enumerate() {
                assert_eq!(y.dtype(), DType::F16);
                assert_same_bits(
                    &bits_of(y),
                    &bits_of(&dw.matmul(&xh).unwrap()),
                    &format!("{name} m {m} matrix {j} f16"),
                );
            }
        }
    }
    // one launch for a layer's q/k/v at decode, contiguous or transposed, f32 or bf16
    let qkv: Vec<(QMatrix, DeviceQMatrix)> = [576, 192, 192]
        .iter()
        .map(|&n| mk(GgmlType::Q4_1, n, 576))
        .collect();
    let dq: Vec<&DeviceQMatrix> = qkv.iter().map(|m| &m.1).collect();
    let x1 = to_gpu(
        random_x(1, 576, 576, 32, &mut Rng::new(5)),
        &[1, 1, 576],
        &gpu,
    );
    let x2 = to_gpu(random_x(2, 576, 576, 32, &mut Rng::new(6)), &[576, 2], &gpu)
        .t()
        .unwrap();
    let x3 = x1.to_dtype(DType::BF16).unwrap();
    for x in [&x1, &x2, &x3] {
        DeviceQMatrix::matmul_many(&dq, x).unwrap(); // compiled, outside the count
        cuda::synchronize(ordinal).unwrap();
        let before = cuda::launch_count(ordinal);
        let ys = DeviceQMatrix::matmul_many(&dq, x).unwrap();
        let launches = cuda::launch_count(ordinal) - before;
        assert_eq!(
            launches,
            1,
            "q/k/v of a {:?} input: {launches} launches",
            x.shape()
        );
        assert_eq!(ys[2].shape()[ys[2].dim() - 1], 192);
    }
}

/// Mismatched matrices and impossible paths are errors saying what was wrong.
#[test]
fn cuda_matmul_many_errors() {
    let Some(gpu) = cuda::require_or_skip("cuda_matmul_many_errors") else {
        return;
    };
    let mut rng = Rng::new(12);
    let a = QMatrix::from_vec(
        GgmlType::Q4_1,
        4,
        64,
        random_weights(GgmlType::Q4_1, 4, 64, &mut rng),
    )
    .unwrap()
    .to_device(&gpu)
    .unwrap();
    let b = QMatrix::from_vec(
        GgmlType::Q4_1,
        4,
        96,
        random_weights(GgmlType::Q4_1, 4, 96, &mut rng),
    )
    .unwrap()
    .to_device(&gpu)
    .unwrap();
    let x = Tensor::zeros([1, 64], DType::F32, &gpu).unwrap();
    let e = DeviceQMatrix::matmul_many(&[&a, &b], &x)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("same number of columns") && e.contains("4 × 96"),
        "{e}"
    );
    assert!(DeviceQMatrix::matmul_many(&[], &x).unwrap().is_empty());
    let cpu = Tensor::zeros([1, 64], DType::F32, &Device::Cpu).unwrap();
    let e = DeviceQMatrix::matmul_many(&[&a, &a], &cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("weight's device"), "{e}");
    let e = DeviceQMatrix::matmul_many(
        &[&a, &a],
        &Tensor::zeros([1, 32], DType::F32, &gpu).unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("[..., 64]"), "{e}");
    // the fused path takes at most 8 rows
    let x9 = Tensor::zeros([9, 64], DType::F32, &gpu).unwrap();
    let e = quantized_matmul_many_with(
        &x9,
        &[(a.blocks(), BlockFormat::Q4_1, 4)],
        64,
        QuantPath::Fused,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("at most 8 rows"), "{e}");
    // a weight whose blocks don't match its declared size, named by its index
    let e = quantized_matmul_many_with(
        &x,
        &[
            (a.blocks(), BlockFormat::Q4_1, 4),
            (a.blocks(), BlockFormat::Q4_1, 5),
        ],
        64,
        QuantPath::Auto,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("weight 1") && e.contains("5 × 2"), "{e}");
    // a weight with no rows gives an empty output beside the others
    let ys = quantized_matmul_many_with(
        &x,
        &[
            (a.blocks(), BlockFormat::Q4_1, 4),
            (
                &Tensor::zeros([0], DType::U8, &gpu).unwrap(),
                BlockFormat::Q8_0,
                0,
            ),
        ],
        64,
        QuantPath::Auto,
    )
    .unwrap();
    assert_eq!((ys[0].shape(), ys[1].shape()), (&[1, 4][..], &[1, 0][..]));
}

/// `matmul_swiglu` (the SwiGLU computed by the kernel that rounds the activations) against
/// the composed `matmul(&gate.swiglu(up))`, bit for bit: every block type, `m` across the row
/// tiles and row groups, `k` across the lane groups and chunks, gates whose silu saturates or
/// whose `exp` overflows (±100, ±1e30) and non-finite values; two launches where the composed
/// ops take three; half inputs take the composed ops; mismatched halves are an error.
/// `STRIDE_QUANT_MUTANT=swiglu_plain` (a kernel that drops the silu) must make it fail.
#[test]
fn cuda_matmul_swiglu_is_the_composed_ops_bit_for_bit() {
    let Some(gpu) = cuda::require_or_skip("cuda_matmul_swiglu_is_the_composed_ops_bit_for_bit")
    else {
        return;
    };
    let Device::Cuda(ordinal) = gpu else {
        unreachable!()
    };
    let mut rng = Rng::new(31);
    for ty in TYPES {
        for &k in &KS {
            let w = QMatrix::from_vec(ty, N, k, random_weights(ty, N, k, &mut rng))
                .unwrap()
                .to_device(&gpu)
                .unwrap();
            for m in [1usize, 3, 8, 9, 33, 130] {
                let mut g: Vec<f32> = (0..m * k).map(|_| rng.sym() * 6.0).collect();
                let u: Vec<f32> = (0..m * k).map(|_| rng.sym() * 3.0).collect();
                // the last row: silu saturated and exp overflowing; the first (m > 1):
                // an infinity and a NaN (that row's products are NaN on both sides)
                let last = (m - 1) * k;
                for (i, v) in [100.0f32, -100.0, 1e30, -1e30].into_iter().enumerate() {
                    g[last + (i * 7) % k] = v;
                }
                if m > 1 {
                    g[3 % k] = f32::INFINITY;
                    g[5 % k] = f32::NAN;
                }
                let (gt, ut) = (to_gpu(g, &[m, k], &gpu), to_gpu(u, &[m, k], &gpu));
                let got = bits_of(&w.matmul_swiglu(&gt, &ut).unwrap());
                let want = bits_of(&w.matmul(&gt.swiglu(&ut).unwrap()).unwrap());
                assert_same_bits(&got, &want, &format!("{ty:?} swiglu, m {m}, k {k}"));
            }
        }
    }
    // two launches (rounding with the SwiGLU, product), not three
    let w = QMatrix::from_vec(
        GgmlType::Q4_1,
        N,
        64,
        random_weights(GgmlType::Q4_1, N, 64, &mut rng),
    )
    .unwrap()
    .to_device(&gpu)
    .unwrap();
    let g = to_gpu(
        (0..64).map(|i| i as f32 / 8.0 - 4.0).collect(),
        &[1, 64],
        &gpu,
    );
    let u = to_gpu((0..64).map(|i| (i % 5) as f32).collect(), &[1, 64], &gpu);
    w.matmul_swiglu(&g, &u).unwrap(); // compiled, outside the count
    cuda::synchronize(ordinal).unwrap();
    let before = cuda::launch_count(ordinal);
    w.matmul_swiglu(&g, &u).unwrap();
    assert_eq!(cuda::launch_count(ordinal) - before, 2);
    // half inputs: the composed ops' bits
    let (gh, uh) = (
        g.to_dtype(DType::BF16).unwrap(),
        u.to_dtype(DType::BF16).unwrap(),
    );
    assert_same_bits(
        &bits_of(&w.matmul_swiglu(&gh, &uh).unwrap()),
        &bits_of(&w.matmul(&gh.swiglu(&uh).unwrap()).unwrap()),
        "bf16 swiglu",
    );
    // mismatched halves
    let e = w
        .matmul_swiglu(&g, &to_gpu(vec![0.0; 32], &[1, 32], &gpu))
        .unwrap_err()
        .to_string();
    assert!(e.contains("must match"), "{e}");
}
