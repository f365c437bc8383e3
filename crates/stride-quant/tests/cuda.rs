//! The CUDA products ([`DeviceQMatrix::matmul`]) against the CPU's ([`QMatrix::matmul`]):
//! **the same bits**, for every 32-value block type, every `m` of `MS` (both sides of the
//! kernels' 1/2/4/8-row tiles and of the grid's row groups), block counts on both sides of
//! the 8 accumulation lanes and of a warp's 32 blocks, `n` not a multiple of the 4 rows a
//! thread block covers, contiguous and transposed (non-contiguous) activations; and against
//! the exact (f64) product of the dequantized weights with the unquantized activations,
//! within the crate's stated bound `γ_n·Σ|t| + Σ_e |w_e|·|x_e − deq(a)_e|`.
//!
//! Skipped, saying so, without a CUDA device (`STRIDE_REQUIRE_CUDA=1` makes that a failure).

mod common;

use common::*;
use stride_core::{cuda, DType, Device, Tensor};
use stride_gguf::GgmlType;
use stride_quant::{ActFormat, Q8Row, QMatrix};

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
