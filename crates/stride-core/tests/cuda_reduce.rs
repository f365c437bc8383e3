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

/// Reductions over outer dims with few outputs take the column split (cuda/reduce.rs
/// `cols_plan`: 32 neighbouring outputs per block, the reduced range cut into parts, the last
/// block of a group folding its parts): integer sums and selections bit for bit, float sums to
/// within the final rounding to f32 (both devices accumulate f32 in f64), reproducible run to
/// run; also a 3-D input reduced over two outer dims, and a transposed input (not split).
#[test]
fn column_split_reductions_match_the_cpu() {
    let Some(g) = gpu("column_split_reductions_match_the_cpu") else {
        return;
    };
    for (shape, dims) in [
        (vec![4096usize, 1536usize], vec![0i64]),
        (vec![4096, 384], vec![0]),
        (vec![300, 70], vec![0]),
        (vec![1000, 33], vec![0]),
        (vec![257, 4, 40], vec![0, 1]),
    ] {
        let n: usize = shape.iter().product();
        let cols = *shape.last().unwrap();
        let rows = n / cols;
        for dt in [DType::I64, DType::I32, DType::F32] {
            let x = Tensor::from_vec(values(n, None), shape.clone())
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let xg = x.to_device(&g).unwrap();
            let ctx = format!("{dt} {shape:?} over {dims:?}");
            let (s, sg) = (
                f64s(&x.sum_dims(&dims, false).unwrap()),
                f64s(&xg.sum_dims(&dims, false).unwrap()),
            );
            assert_eq!(s.len(), cols, "{ctx}");
            if dt.is_float() {
                // |sum| of up to `rows` terms of |x| <= 100: the f64 sums differ by far less
                // than an f32 ulp of the result, so the results differ by at most one ulp
                for (j, (a, b)) in s.iter().zip(&sg).enumerate() {
                    let ulp = (a.abs() as f32).max(f32::MIN_POSITIVE);
                    let ulp = (f32::from_bits(ulp.to_bits() + 1) - ulp) as f64;
                    let bound = ulp + rows as f64 * 100.0 * 1e-15;
                    assert!(
                        (a - b).abs() <= bound,
                        "sum {ctx} column {j}: cpu {a} cuda {b}"
                    );
                }
                let again = f64s(&xg.sum_dims(&dims, false).unwrap());
                assert!(
                    sg.iter()
                        .zip(&again)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "sum {ctx} twice"
                );
            } else {
                assert_eq!(s, sg, "sum {ctx}");
            }
            for (name, c, gg) in [
                (
                    "amax",
                    x.amax(&dims, false).unwrap(),
                    xg.amax(&dims, false).unwrap(),
                ),
                (
                    "amin",
                    x.amin(&dims, false).unwrap(),
                    xg.amin(&dims, false).unwrap(),
                ),
            ] {
                assert_eq!(f64s(&c), f64s(&gg), "{name} {ctx}");
            }
        }
        // the same values seen transposed: the reduced dim is the fast one, no column split
        if shape.len() == 2 {
            let x = Tensor::from_vec(values(n, None), [cols, rows]).unwrap();
            let xt = x.t().unwrap();
            let xgt = x.to_device(&g).unwrap().t().unwrap();
            assert_eq!(
                f64s(&xt.amax(&[0], false).unwrap()),
                f64s(&xgt.amax(&[0], false).unwrap()),
                "amax of a transposed {shape:?}"
            );
        }
    }
}
