//! `Tensor::cross_entropy_rows` (the fused kernels) against the same math in f64 from the
//! rounded logits, within error bounds: per-row losses and the logits' gradient, with
//! `ignore_index`, label smoothing and z-loss; vocabulary sizes on both sides of the CUDA
//! kernels' vectors and block (256 threads × 8-element vectors = 2,048 per pass), including a
//! GPT's 50,257 and SmolLM2's 49,152; row counts past a full grid; transposed and unaligned
//! logits (the scalar path); every float dtype; large logits (±1e4, the log-sum-exp's
//! shift). On the CPU and on CUDA (skipped, saying so, without a GPU — mandatory under
//! STRIDE_REQUIRE_CUDA=1). Then the errors, and on CUDA the deferred target check.
//!
//! Bounds (`u·|v|` rounding into the result dtype plus half its subnormal spacing, `uc` the
//! compute dtype's unit roundoff, `V` the classes): the log-sum-exp is a sum of `V` terms
//! `exp(z − m)` ≤ 1, each with relative error ≤ 4·uc, so `lse` has absolute error ≤
//! `(V + 8)·uc·(1 + |m|)` (`m` the row max: `m + log s` adds `|m|·uc`); then
//! - loss: `(V + 8)·uc·(1 + |m| + |z_t| + ε·mean|z| + λ·lse²·2)` (λ-term: `2|lse|·δlse`
//!   rounded, bounded by the same scale);
//! - gradient: `u·|d| + |g|·(p·(1 + 2λ|lse|)·(V + 8)·uc·(1 + |m|) + 8·uc)`: `exp(z − lse)`
//!   inherits `lse`'s absolute error as a relative one.

mod rounding;

use rounding::{compute_unit, host, tiny, unit, within};
use stride_core::{cuda, CrossEntropyRows, DType, Device, Generator, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    Dense,
    Transposed,
    /// columns `1..=V` of a `[R, V + 1]` buffer: rows not 16-byte aligned
    Sliced,
}

#[allow(clippy::too_many_arguments)]
fn case(
    dev: &Device,
    dtype: DType,
    rows: usize,
    classes: usize,
    layout: Layout,
    o: CrossEntropyRows,
    scale: f64,
) {
    let what = format!("{dtype} [{rows}, {classes}] {layout:?} {o:?} scale {scale} on {dev}");
    let gen = Generator::new((rows * 131 + classes) as u64);
    let shape = match layout {
        Layout::Dense => vec![rows, classes],
        Layout::Transposed => vec![classes, rows],
        Layout::Sliced => vec![rows, classes + 1],
    };
    let base = Tensor::randn(shape, DType::F64, &Device::Cpu, Some(&gen))
        .unwrap()
        .mul(scale)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let z = match layout {
        Layout::Dense => base,
        Layout::Transposed => base.t().unwrap(),
        Layout::Sliced => base.narrow(1, 1, classes).unwrap(),
    }
    .detach()
    .requires_grad_(true)
    .unwrap();
    // targets: every class somewhere, every 5th row ignored
    let targets: Vec<i64> = (0..rows)
        .map(|r| match r % 5 {
            4 => o.ignore_index,
            _ => ((r * 7919) % classes) as i64,
        })
        .collect();
    let t = Tensor::from_vec(targets.clone(), [rows])
        .unwrap()
        .to_device(dev)
        .unwrap();
    let loss = z.cross_entropy_rows(&t, &o).unwrap();
    let gvals: Vec<f64> = (0..rows).map(|r| 0.5 + (r % 3) as f64 * 0.25).collect();
    let g = Tensor::from_vec(gvals.clone(), [rows])
        .unwrap()
        .to_dtype(loss.dtype())
        .unwrap()
        .to_device(dev)
        .unwrap();
    loss.mul(&g).unwrap().sum().unwrap().backward().unwrap();
    let zv = host(&z);
    let (u, uc, v) = (unit(dtype), compute_unit(dtype), classes as f64);
    let (eps, lam) = (o.label_smoothing, o.z_loss);
    let (mut lw, mut lb, mut dw, mut db) = (vec![], vec![], vec![], vec![]);
    for r in 0..rows {
        let row = &zv[r * classes..(r + 1) * classes];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|x| (x - m).exp()).sum();
        let lse = m + s.ln();
        let dl = (v + 8.0) * uc * (1.0 + m.abs());
        let skip = targets[r] == o.ignore_index;
        let tr = targets[r] as usize;
        let mean_z = row.iter().sum::<f64>() / v;
        if skip {
            lw.push(0.0);
            lb.push(0.0);
        } else {
            lw.push((1.0 - eps) * (lse - row[tr]) + eps * (lse - mean_z) + lam * lse * lse);
            let mean_abs = row.iter().map(|x| x.abs()).sum::<f64>() / v;
            lb.push(
                (v + 8.0)
                    * uc
                    * (1.0 + m.abs() + row[tr].abs() + eps * mean_abs + 2.0 * lam * lse * lse)
                    + 2.0 * lam * lse.abs() * dl,
            );
        }
        for (c, &x) in row.iter().enumerate() {
            let p = (x - lse).exp();
            let d = if skip {
                0.0
            } else {
                let hit = if c == tr { 1.0 - eps } else { 0.0 };
                gvals[r] * (p * (1.0 + 2.0 * lam * lse) - eps / v - hit)
            };
            dw.push(d);
            db.push(
                u * d.abs()
                    + tiny(dtype)
                    + gvals[r] * (p * (1.0 + 2.0 * lam * lse.abs()) * (dl + 8.0 * uc) + 8.0 * uc),
            );
        }
    }
    within(&format!("{what}: loss"), &host(&loss), &lw, &lb);
    within(
        &format!("{what}: gradient"),
        &host(&z.grad().expect("the logits have a gradient")),
        &dw,
        &db,
    );
}

fn sweep(dev: &Device, big: bool) {
    let plain = CrossEntropyRows::default();
    let smooth = CrossEntropyRows {
        label_smoothing: 0.1,
        z_loss: 1e-4,
        ..plain
    };
    let mut classes = vec![1usize, 2, 7, 8, 9, 255, 256, 257, 2047, 2048, 2049, 5000];
    if big {
        classes.extend([49152, 50257]);
    }
    for &v in &classes {
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::F64] {
            if v > 2049 && matches!(dtype, DType::F16 | DType::F64) {
                continue;
            }
            let rows = if v > 5000 { 40 } else { 30 };
            case(dev, dtype, rows, v, Layout::Dense, plain, 2.0);
            case(dev, dtype, 7, v, Layout::Sliced, smooth, 2.0);
            if v <= 2049 {
                case(dev, dtype, 9, v, Layout::Transposed, smooth, 2.0);
            }
        }
    }
    // large logits: the log-sum-exp's shift by the row max
    case(dev, DType::F32, 10, 300, Layout::Dense, smooth, 1e4);
    if big {
        // more rows than a full grid (132 SMs · 8 blocks)
        case(
            dev,
            DType::BF16,
            132 * 8 + 37,
            264,
            Layout::Dense,
            smooth,
            2.0,
        );
    }
}

#[test]
fn fused_cross_entropy_matches_the_f64_math_on_the_cpu() {
    sweep(&Device::Cpu, false);
}

/// One test for everything on CUDA: a deferred device error belongs to the device, so a test
/// that provokes one must not run beside another using the same device.
#[test]
fn fused_cross_entropy_on_cuda() {
    let Some(dev) = cuda::require_or_skip("fused_cross_entropy_on_cuda") else {
        return;
    };
    sweep(&dev, true);
    a_bad_target_is_reported_at_the_next_read(&dev);
}

#[test]
fn cross_entropy_refuses_bad_targets_and_options() {
    let z = Tensor::zeros([2, 3], DType::F32, &Device::Cpu).unwrap();
    let o = CrossEntropyRows::default();
    let t = |v: Vec<i64>| Tensor::from_vec(v, [2]).unwrap();
    let e = z
        .cross_entropy_rows(&t(vec![0, 3]), &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains('3') && e.contains("cross_entropy"), "{e}");
    let e = z
        .cross_entropy_rows(&t(vec![-1, 0]), &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("-1"), "{e}");
    let e = z
        .cross_entropy_rows(&Tensor::zeros([2], DType::I32, &Device::Cpu).unwrap(), &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("i64"), "{e}");
    let e = z.cross_entropy_rows(&t(vec![0, 1]).narrow(0, 0, 1).unwrap(), &o);
    assert!(e.is_err());
    for bad in [
        CrossEntropyRows {
            label_smoothing: 1.5,
            ..o
        },
        CrossEntropyRows { z_loss: -1.0, ..o },
        CrossEntropyRows {
            z_loss: f64::NAN,
            ..o
        },
    ] {
        assert!(
            z.cross_entropy_rows(&t(vec![0, 1]), &bad).is_err(),
            "{bad:?}"
        );
    }
}

/// On CUDA a bad target is checked on the device: no host wait at the call (under
/// `forbid_sync` a wait would be an error), the error at the next read, then taken.
fn a_bad_target_is_reported_at_the_next_read(dev: &Device) {
    let z = Tensor::zeros([2, 3], DType::F32, dev).unwrap();
    let t = Tensor::from_vec(vec![0i64, 7], [2])
        .unwrap()
        .to_device(dev)
        .unwrap();
    let loss = {
        let _no_waits = stride_core::debug::forbid_sync();
        z.cross_entropy_rows(&t, &CrossEntropyRows::default())
            .unwrap()
    };
    let e = loss.to_vec::<f32>().unwrap_err().to_string();
    assert!(e.contains('7') && e.contains("cross_entropy"), "{e}");
    assert!(cuda::take_error(0).unwrap().is_some());
}
