//! CUDA reductions against the CPU where the schedule splits a reduced range across blocks
//! (few outputs, long ranges: cuda/reduce.rs `split_plan`): selections and integer folds bit
//! for bit, float sums within rounding and reproducible run to run. Skips without a GPU
//! (fails instead under STRIDE_REQUIRE_CUDA=1); the conformance registry (`stride check
//! --device cuda`) covers every op, dtype and layout.

use stride_core::{cuda, DType, Device, Tensor};

const CPU: Device = Device::Cpu;

fn gpu(test: &str) -> Option<Device> {
    cuda::require_or_skip(test)
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_device(&CPU)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
}

/// Values with ties and, for floats, NaNs placed late (the split's later parts).
fn values(n: usize, nan_at: Option<usize>) -> Vec<f32> {
    let mut v: Vec<f32> = (0..n)
        .map(|j| ((j * 7919) % 1000) as f32 * 0.25 - 100.0)
        .collect();
    if let Some(p) = nan_at {
        v[p] = f32::NAN;
        v[n - 1] = f32::NAN;
    }
    v
}

#[test]
fn split_reductions_match_the_cpu() {
    let Some(g) = gpu("split_reductions_match_the_cpu") else {
        return;
    };
    for n in [8191usize, 8193, 40_961, 1_000_003] {
        for dt in [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::I64,
            DType::I32,
            DType::U8,
        ] {
            let x = Tensor::from_vec(values(n, None), [n])
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let xg = x.to_device(&g).unwrap();
            let ctx = format!("{dt} n={n}");
            // selections and integer sums: exact
            for (name, c, gg) in [
                ("max", x.max().unwrap(), xg.max().unwrap()),
                ("min", x.min().unwrap(), xg.min().unwrap()),
                (
                    "argmax",
                    x.argmax(None, false).unwrap(),
                    xg.argmax(None, false).unwrap(),
                ),
                (
                    "argmin",
                    x.argmin(None, false).unwrap(),
                    xg.argmin(None, false).unwrap(),
                ),
                ("any", x.any().unwrap(), xg.any().unwrap()),
                ("all", x.all().unwrap(), xg.all().unwrap()),
            ] {
                assert_eq!(f64s(&c), f64s(&gg), "{name} {ctx}");
            }
            let (s, sg) = (x.sum().unwrap(), xg.sum().unwrap());
            let (a, b) = (f64s(&s)[0], f64s(&sg)[0]);
            if dt.is_float() {
                let tol = 1e-3 * (n as f64) * 100.0 * if dt == DType::F16 { 16.0 } else { 1.0 };
                assert!(
                    a == b || (a - b).abs() <= tol,
                    "sum {ctx}: cpu {a} cuda {b}"
                );
                // deterministic: the same bits every run
                let again = f64s(&xg.sum().unwrap())[0];
                assert_eq!(b.to_bits(), again.to_bits(), "sum {ctx} twice");
            } else {
                assert_eq!(a, b, "sum {ctx}");
            }
        }
        // NaN in a late part: max/argmax report it (the first NaN), as the CPU
        let x = Tensor::from_vec(values(n, Some(n / 2 + 1)), [n]).unwrap();
        let xg = x.to_device(&g).unwrap();
        assert!(f64s(&xg.max().unwrap())[0].is_nan(), "max NaN n={n}");
        assert_eq!(
            f64s(&x.argmax(None, false).unwrap()),
            f64s(&xg.argmax(None, false).unwrap()),
            "argmax NaN n={n}"
        );
        // three outputs over a strided reduced dim (a transposed [n, 3])
        let x = Tensor::from_vec(values(3 * n, None), [n, 3]).unwrap();
        let xt = x.t().unwrap();
        let xg = x.to_device(&g).unwrap();
        let xgt = xg.t().unwrap();
        assert_eq!(
            f64s(&xt.argmin(Some(-1), false).unwrap()),
            f64s(&xgt.argmin(Some(-1), false).unwrap()),
            "argmin strided n={n}"
        );
        let (m, mg) = (
            f64s(&xt.mean_dims(&[-1], false).unwrap()),
            f64s(&xgt.mean_dims(&[-1], false).unwrap()),
        );
        for (a, b) in m.iter().zip(&mg) {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs().max(1.0),
                "mean strided n={n}: {a} {b}"
            );
        }
    }
}
