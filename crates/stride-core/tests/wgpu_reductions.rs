//! Reductions on the wgpu backend, beyond what the registry checks (`stride check --device
//! wgpu`, stride-check's `tests/wgpu.rs`): the accumulators that stand in for f64 and i64
//! (WGSL has neither), every schedule with lengths past its blocks (and past llvmpipe's
//! silent 65,535-iteration loop limit), ties and NaNs in long arg reductions, and no host
//! wait. Each test skips, saying so, without an adapter (`STRIDE_REQUIRE_WGPU=1` makes them
//! mandatory; CI installs Mesa's lavapipe).

mod wgpu_common;
use stride_core::{debug, webgpu, DType, Device, Tensor};
use wgpu_common::gpu;

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_device(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
}

fn i64s(t: &Tensor) -> Vec<i64> {
    t.to_device(&Device::Cpu).unwrap().to_vec::<i64>().unwrap()
}

#[test]
fn f32_sums_and_means_do_not_stall_at_two_to_the_24() {
    let Some((d, _turn)) = gpu("f32_sums_and_means_do_not_stall_at_two_to_the_24") else {
        return;
    };
    // 2^24 + 5 ones: an f32 accumulator stops at 2^24 (x + 1 rounds back to x); the CPU's f64
    // accumulator, and the double-f32 that stands in for it here, count every one. The mean's
    // divisor is not an f32 either.
    let n = (1usize << 24) + 5;
    let ones = Tensor::ones([n], DType::F32, &d).unwrap();
    let s = ones.sum().unwrap().item_f64().unwrap();
    assert_eq!(s, n as f32 as f64, "sum of {n} ones");
    let m = ones.mean().unwrap().item_f64().unwrap();
    assert_eq!(m, 1.0, "mean of {n} ones");
}

/// `|got − cpu|` allowed for an f32 sum of `n` terms of absolute sum `abs`: each side's final
/// rounding (½ ulp) plus the double-f32 accumulator's error (≤ n·2⁻⁴⁶·Σ|x|, generously) and
/// the CPU's f64 one.
fn sum_bound(cpu: f64, n: usize, abs: f64) -> f64 {
    let ulp = (cpu.abs().max(f32::MIN_POSITIVE as f64) * f32::EPSILON as f64).max(1e-45);
    ulp + n as f64 * 2f64.powi(-46) * abs
}

#[test]
fn float_reductions_match_the_cpu_over_every_schedule() {
    let Some((d, _turn)) = gpu("float_reductions_match_the_cpu_over_every_schedule") else {
        return;
    };
    // shapes × dims chosen for each schedule: per-invocation (short rows; outer dims with
    // neighbouring outputs), one workgroup per output, and the split (few long rows)
    let cases: [(&[usize], &[i64]); 7] = [
        (&[300, 50], &[1]),       // short rows: one invocation each
        (&[3000, 1100], &[0]),    // outer dim, neighbouring outputs: one invocation each
        (&[40, 5000], &[1]),      // rows of 5000: one workgroup each
        (&[3, 400_001], &[1]),    // few long rows: the split schedule
        (&[700_003], &[0]),       // one long row: split
        (&[6, 7, 8, 9], &[0, 2]), // two reduced dims apart
        (&[5, 0, 3], &[1]),       // empty reductions
    ];
    for (shape, dims) in cases {
        let n: usize = shape.iter().product();
        let x = Tensor::randn(shape, DType::F32, &Device::Cpu, None)
            .unwrap()
            .add(0.25)
            .unwrap();
        let xg = x.to_device(&d).unwrap();
        let red: usize = dims.iter().map(|&k| shape[k as usize]).product();
        let abs = f64s(&x.abs().unwrap().sum_dims(dims, true).unwrap());
        for op in ["sum", "mean", "amax", "amin"] {
            let f = |t: &Tensor| match op {
                "sum" => t.sum_dims(dims, true),
                "mean" => t.mean_dims(dims, true),
                "amax" => t.amax(dims, true),
                _ => t.amin(dims, true),
            };
            if red == 0 && (op == "amax" || op == "amin") {
                assert!(f(&xg).is_err(), "{op} over zero elements must be an error");
                continue;
            }
            let (want, got) = (f64s(&f(&x).unwrap()), f64s(&f(&xg).unwrap()));
            assert_eq!(want.len(), got.len());
            for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                let ok = if op == "amax" || op == "amin" {
                    w == g // extrema are exact
                } else if w.is_nan() {
                    g.is_nan()
                } else {
                    let scale = if op == "mean" { red.max(1) as f64 } else { 1.0 };
                    (w - g).abs() <= sum_bound(*w, red, abs[i] / scale)
                };
                assert!(
                    ok,
                    "{op} {shape:?} over {dims:?} [{i}]: {g} on {d}, {w} on the CPU"
                );
            }
        }
        // products of values near 1 (so that they stay finite), in f32 and f16
        if n > 0 && red <= 5000 {
            let y = x.mul(0.001).unwrap().add(1.0).unwrap();
            let yg = y.to_device(&d).unwrap();
            let (want, got) = (
                f64s(&y.prod_dims(dims, true).unwrap()),
                f64s(&yg.prod_dims(dims, true).unwrap()),
            );
            for (w, g) in want.iter().zip(&got) {
                let bound = w.abs() * (f32::EPSILON as f64 + red as f64 * 2f64.powi(-44));
                assert!((w - g).abs() <= bound, "prod {shape:?}: {g} vs {w}");
            }
        }
    }
}

#[test]
fn empty_outputs_need_no_indices() {
    let Some((d, _turn)) = gpu("empty_outputs_need_no_indices") else {
        return;
    };
    // nothing to write, however long the reduced dim (past the shaders' 32-bit indices)
    let e = Tensor::zeros([0, 3_000_000_000], DType::F32, &d).unwrap();
    assert_eq!(e.sum_dims(&[1], false).unwrap().shape(), &[0]);
    assert_eq!(e.argmax(Some(1), false).unwrap().shape(), &[0]);
}

#[test]
fn integer_reductions_are_exact_and_wrap_as_i64() {
    let Some((d, _turn)) = gpu("integer_reductions_are_exact_and_wrap_as_i64") else {
        return;
    };
    // i32 sums past 2^32 (carried into the high word), i64 inputs (read as word pairs), u8
    // and bool widened, products that wrap i64
    let big: Vec<i32> = (0..100_000).map(|i| i32::MAX - i).collect();
    let t = Tensor::from_vec(big, [100_000]).unwrap();
    let tg = t.to_device(&d).unwrap();
    assert_eq!(
        i64s(&tg.sum().unwrap()),
        i64s(&t.sum().unwrap()),
        "i32 sum past 2^32"
    );
    let w: Vec<i64> = (0..5000)
        .map(|i: i64| (i - 2500).wrapping_mul(0x0123_4567_89ab_cdef))
        .collect();
    let t = Tensor::from_vec(w, [50, 100]).unwrap();
    let tg = t.to_device(&d).unwrap();
    for dims in [&[0i64][..], &[1], &[0, 1]] {
        for (name, want, got) in [
            ("sum", t.sum_dims(dims, false), tg.sum_dims(dims, false)),
            ("prod", t.prod_dims(dims, false), tg.prod_dims(dims, false)),
            ("amax", t.amax(dims, false), tg.amax(dims, false)),
            ("amin", t.amin(dims, false), tg.amin(dims, false)),
            (
                "count_nonzero",
                t.count_nonzero(dims),
                tg.count_nonzero(dims),
            ),
        ] {
            assert_eq!(
                i64s(&got.unwrap()),
                i64s(&want.unwrap()),
                "i64 {name} over {dims:?}"
            );
        }
    }
    let u: Vec<u8> = (0..70_000u32).map(|i| (i * 37 % 256) as u8).collect();
    let t = Tensor::from_vec(u, [70_000]).unwrap();
    let tg = t.to_device(&d).unwrap();
    assert_eq!(i64s(&tg.sum().unwrap()), i64s(&t.sum().unwrap()));
    let b = t.gt(200i64).unwrap();
    let bg = tg.gt(200i64).unwrap();
    assert_eq!(i64s(&bg.sum().unwrap()), i64s(&b.sum().unwrap()));
    assert_eq!(bg.any().unwrap().to_vec::<bool>().unwrap(), vec![true]);
    assert_eq!(bg.all().unwrap().to_vec::<bool>().unwrap(), vec![false]);
}

#[test]
fn long_loops_fold_every_element() {
    let Some((d, _turn)) = gpu("long_loops_fold_every_element") else {
        return;
    };
    // one invocation per output over 70,000 reduced elements: longer than llvmpipe's silent
    // 65,535-iteration loop limit, so the loop must be cut into blocks
    let (rows, cols) = (70_000usize, 1024usize);
    let x = Tensor::ones([rows, cols], DType::U8, &Device::Cpu).unwrap();
    let xg = x.to_device(&d).unwrap();
    let got = i64s(&xg.sum_dims(&[0], false).unwrap());
    assert!(
        got.iter().all(|&s| s == rows as i64),
        "column sums {:?}…, want {rows}",
        &got[..4]
    );
}

#[test]
fn long_arg_reductions_pick_the_first_tie_and_the_first_nan() {
    let Some((d, _turn)) = gpu("long_arg_reductions_pick_the_first_tie_and_the_first_nan") else {
        return;
    };
    // 300,001 elements (the split schedule): ties in different parts, then NaNs
    let n = 300_001usize;
    let mut v: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32).collect();
    for &i in &[250_000usize, 17, 123_456] {
        v[i] = 5000.0;
        v[n - 1 - i] = -5000.0;
    }
    let x = Tensor::from_vec(v.clone(), [n]).unwrap();
    let xg = x.to_device(&d).unwrap();
    assert_eq!(i64s(&xg.argmax(None, false).unwrap()), vec![17]);
    assert_eq!(
        i64s(&xg.argmin(None, false).unwrap()),
        vec![n as i64 - 1 - 250_000]
    );
    v[200_000] = f32::NAN;
    v[100_000] = f32::NAN;
    let xg = Tensor::from_vec(v, [n]).unwrap().to_device(&d).unwrap();
    assert_eq!(i64s(&xg.argmax(None, false).unwrap()), vec![100_000]);
    assert_eq!(i64s(&xg.argmin(None, false).unwrap()), vec![100_000]);
    assert!(f64s(&xg.max().unwrap())[0].is_nan());
    // along a dim, with values, against the CPU
    let x = Tensor::randint(0, 7, [37, 2000], DType::I32, &Device::Cpu, None).unwrap();
    let xg = x.to_device(&d).unwrap();
    for dim in [0i64, 1] {
        let (wv, wi) = x.max_dim(dim, false).unwrap();
        let (gv, gi) = xg.max_dim(dim, false).unwrap();
        assert_eq!(i64s(&gi), i64s(&wi), "argmax along {dim}");
        assert_eq!(f64s(&gv), f64s(&wv), "max along {dim}");
    }
}

#[test]
fn reductions_never_wait_for_the_host() {
    let Some((d, _turn)) = gpu("reductions_never_wait_for_the_host") else {
        return;
    };
    let x = Tensor::randn([64, 3000], DType::F32, &d, None).unwrap();
    let before = webgpu::sync_count(0);
    {
        let _no_waits = debug::forbid_sync();
        let s = x.sum_dims(&[1], true).unwrap();
        let m = x.mean().unwrap();
        let a = x.argmax(Some(0), false).unwrap();
        let c = x.gt(0.0).unwrap().count_nonzero(&[0, 1]).unwrap();
        let h = x.to_dtype(DType::F16).unwrap().amax(&[0], false).unwrap();
        drop((s, m, a, c, h));
    }
    assert_eq!(
        webgpu::sync_count(0),
        before,
        "a host wait inside the reductions"
    );
}

#[test]
fn scans_are_the_cpus_along_any_dim_and_layout() {
    let Some((d, _turn)) = gpu("scans_are_the_cpus_along_any_dim_and_layout") else {
        return;
    };
    let base = Tensor::randn([37, 300], DType::F32, &Device::Cpu, None)
        .unwrap()
        .mul(0.1)
        .unwrap()
        .add(1.0)
        .unwrap();
    for dt in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U8,
        DType::Bool,
        DType::I64,
    ] {
        let x = if dt.is_float() {
            base.to_dtype(dt).unwrap()
        } else {
            base.mul(40.0).unwrap().to_dtype(dt).unwrap()
        };
        let xg = x.to_device(&d).unwrap();
        // contiguous, transposed, and stepped (every other column: the input's step along
        // dim 1 is 2 where the fresh output's is 1)
        for (dim, layout) in [
            (0i64, "contiguous"),
            (1, "contiguous"),
            (0, "transposed"),
            (1, "transposed"),
            (0, "stepped"),
            (1, "stepped"),
        ] {
            let view = |t: &Tensor| match layout {
                "transposed" => t.t().unwrap(),
                "stepped" => t.slice(1, 0, 300, 2).unwrap(),
                _ => t.clone(),
            };
            let (a, ag) = (view(&x), view(&xg));
            for prod in [false, true] {
                let f = |t: &Tensor| {
                    if prod {
                        t.cumprod(dim)
                    } else {
                        t.cumsum(dim)
                    }
                };
                let (want, got) = (f(&a).unwrap(), f(&ag).unwrap());
                assert_eq!(want.dtype(), got.dtype());
                let (w, g) = (f64s(&want), f64s(&got));
                let what = format!(
                    "{dt} {} dim {dim} {layout}",
                    if prod { "cumprod" } else { "cumsum" }
                );
                if dt == DType::F32 {
                    // f64 on the CPU, double-f32 here: the same f32 but next to a rounding tie
                    for (i, (w, g)) in w.iter().zip(&g).enumerate() {
                        let ulp = w.abs() * f32::EPSILON as f64;
                        assert!((w - g).abs() <= ulp, "{what} [{i}]: {g} vs {w}");
                    }
                } else {
                    // halves accumulate in f32 in the CPU's order, integers exactly: the bits
                    let same = w
                        .iter()
                        .zip(&g)
                        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                    assert!(same, "{what}: not the CPU's values");
                }
            }
        }
    }
    // a line longer than one invocation may loop runs as a round trip, with the same result
    let long = Tensor::ones([60_001], DType::F16, &Device::Cpu).unwrap();
    let got = f64s(&long.to_device(&d).unwrap().cumsum(0).unwrap());
    assert_eq!(got, f64s(&long.cumsum(0).unwrap()));
    // the shader scan never waits for the host
    let before = webgpu::sync_count(0);
    {
        let _no_waits = debug::forbid_sync();
        let s = Tensor::ones([8, 60_000], DType::F32, &d).unwrap();
        drop(s.cumsum(1).unwrap());
    }
    assert_eq!(webgpu::sync_count(0), before);
}
