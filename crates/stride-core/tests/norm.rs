//! `Tensor::rms_norm` and `Tensor::layer_norm` (the fused row kernels) against the same math
//! in f64 from the rounded inputs, within error bounds: the output, and the gradients of the
//! input, weight and bias. Row lengths on both sides of the CUDA kernels' warp, block, vector
//! and register-cache sizes (the forward's warp per row, from 4 rows a SM on, up to 256 vectors: 2,048 bf16/f16,
//! 1,024 f32, 512 f64 elements; 16 elements a thread forward, 8 backward, 1,024 threads: rows
//! longer than 16,384 / 8,192 take the uncached paths; 16-byte vectors where rows are dense and
//! aligned), row counts on both sides of their grids (grid-stride rows, several rows per
//! block's partial gradient) and of the CPU's gradient blocks (16 rows); transposed inputs and
//! unaligned column slices (the scalar path); every float dtype. On the CPU and on CUDA (skipped, saying so, without a GPU — mandatory
//! under STRIDE_REQUIRE_CUDA=1).
//!
//! Bounds, per element (`u·|v|` stands for rounding `v` into the result dtype, plus half its
//! subnormal spacing; `uc` the compute dtype's, `n`
//! the row length, `x̂` and `g = dy·w` the exact values): the statistics are sums of `n` terms
//! (relative error ≤ `n·uc` each), the rest a handful of roundings (8 covers them), then one
//! rounding to the result dtype:
//! - `y`: `u·|y| + (n + 8)·uc·(rstd·|w|·mean|x| + |x̂·w| + |b|)`;
//! - `dx`: `u·|dx| + (n + 8)·uc·rstd·A·(|g| + mean|g| + (1 + |x̂|)·mean(|g|·(1 + |x̂|)))`,
//!   where `A = 1 + rstd·mean|x|`: the statistics' errors are relative to `mean|x|`, so `x̂`'s
//!   error is `A` times its own rounding (large when a row's spread is small beside its mean);
//! - `dweight`, `dbias`: `u·|d| + (R + n + 8)·uc·Σ_rows |dy|·(A + |x̂|)`.
//!
//! Dropping any term of the kernels' formulas (the mean of `g`, a block's partial gradient)
//! moves a result by far more than these bounds (checked by mutating the kernels).

mod rounding;

use rounding::{compute_unit, host, tiny, unit, within};
use stride_core::{cuda, DType, Device, Generator, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Rms,
    Layer,
}

/// A `[rows, cols]` tensor of `dtype` on `dev` from normal values `·scale + shift`, stored
/// transposed (a `[cols, rows]` buffer seen through `.t()`) when `transposed`.
fn input(
    dev: &Device,
    dtype: DType,
    shape: &[usize],
    seed: u64,
    scale: f64,
    shift: f64,
    transposed: bool,
) -> Tensor {
    let gen = Generator::new(seed);
    let mut s = shape.to_vec();
    if transposed {
        s.reverse();
    }
    let t = Tensor::randn(s, DType::F64, &Device::Cpu, Some(&gen))
        .unwrap()
        .mul(scale)
        .unwrap()
        .add(shift)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .to_device(dev)
        .unwrap();
    if transposed {
        t.t().unwrap()
    } else {
        t
    }
}

/// How the input is laid out.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    Dense,
    /// a `[cols, rows]` buffer seen through `.t()`
    Transposed,
    /// columns `1..=cols` of a `[rows, cols + 1]` buffer: rows not 16-byte aligned
    Sliced,
}

fn case(dev: &Device, kind: Kind, dtype: DType, rows: usize, cols: usize, layout: Layout) {
    let what = format!("{kind:?} {dtype} [{rows}, {cols}] {layout:?} on {dev}");
    let seed = (rows * 7919 + cols) as u64;
    let shift = if kind == Kind::Layer { 3.0 } else { 0.0 };
    let x = match layout {
        Layout::Sliced => input(dev, dtype, &[rows, cols + 1], seed, 2.0, shift, false)
            .narrow(1, 1, cols)
            .unwrap()
            .detach(),
        _ => input(
            dev,
            dtype,
            &[rows, cols],
            seed,
            2.0,
            shift,
            layout == Layout::Transposed,
        ),
    }
    .requires_grad_(true)
    .unwrap();
    let w = input(dev, dtype, &[cols], seed + 1, 1.0, 0.5, false)
        .requires_grad_(true)
        .unwrap();
    let b = input(dev, dtype, &[cols], seed + 2, 1.0, 0.0, false)
        .requires_grad_(true)
        .unwrap();
    let dy = input(dev, dtype, &[rows, cols], seed + 3, 1.0, 0.0, false);
    let eps = 1e-5;
    let y = match kind {
        Kind::Rms => x.rms_norm(&[cols], Some(&w), eps),
        Kind::Layer => x.layer_norm(&[cols], Some(&w), Some(&b), eps),
    }
    .unwrap();
    assert_eq!(y.dtype(), dtype, "{what}");
    // sum(y·dy): the gradient reaching the normalisation is dy exactly
    y.mul(&dy).unwrap().sum().unwrap().backward().unwrap();
    let (xv, wv, bv, gv) = (host(&x), host(&w), host(&b), host(&dy));
    let (u, uc, n) = (unit(dtype), compute_unit(dtype), cols as f64);
    // rounding into the result dtype: relative, or absolute among its subnormals
    let round = |v: f64| u * v.abs() + tiny(dtype);
    let bias = |c: usize| if kind == Kind::Layer { bv[c] } else { 0.0 };
    let (mut y_want, mut y_bound) = (vec![], vec![]);
    let (mut dx_want, mut dx_bound) = (vec![], vec![]);
    let (mut dw_want, mut db_want) = (vec![0.0; cols], vec![0.0; cols]);
    let mut dwb_scale = vec![0.0; cols];
    for r in 0..rows {
        let row = &xv[r * cols..(r + 1) * cols];
        let dyr = &gv[r * cols..(r + 1) * cols];
        let mu = match kind {
            Kind::Layer => row.iter().sum::<f64>() / n,
            Kind::Rms => 0.0,
        };
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n;
        let rs = 1.0 / (var + eps).sqrt();
        let mean_abs = row.iter().map(|v| v.abs()).sum::<f64>() / n;
        let xh: Vec<f64> = row.iter().map(|v| (v - mu) * rs).collect();
        // the statistics' errors are relative to mean|x|, so x̂'s carries rstd·mean|x|
        let amp = 1.0 + rs * mean_abs;
        let g: Vec<f64> = (0..cols).map(|c| dyr[c] * wv[c]).collect();
        let mg = g.iter().sum::<f64>() / n;
        let mgx = (0..cols).map(|c| g[c] * xh[c]).sum::<f64>() / n;
        let mg_abs = g.iter().map(|v| v.abs()).sum::<f64>() / n;
        let mgx_abs = (0..cols)
            .map(|c| g[c].abs() * (1.0 + xh[c].abs()))
            .sum::<f64>()
            / n;
        for c in 0..cols {
            let z = xh[c] * wv[c];
            let yv = z + bias(c);
            y_want.push(yv);
            y_bound.push(
                round(yv)
                    + (n + 8.0) * uc * (rs * wv[c].abs() * mean_abs + z.abs() + bias(c).abs()),
            );
            let centred = if kind == Kind::Layer { mg } else { 0.0 };
            let dx = rs * (g[c] - centred - xh[c] * mgx);
            dx_want.push(dx);
            dx_bound.push(
                round(dx)
                    + (n + 8.0)
                        * uc
                        * rs
                        * amp
                        * (g[c].abs() + mg_abs + (1.0 + xh[c].abs()) * mgx_abs),
            );
            dw_want[c] += dyr[c] * xh[c];
            db_want[c] += dyr[c];
            dwb_scale[c] += dyr[c].abs() * (amp + xh[c].abs());
        }
    }
    within(&format!("{what}: y"), &host(&y), &y_want, &y_bound);
    within(
        &format!("{what}: dx"),
        &host(&x.grad().expect("x has a gradient")),
        &dx_want,
        &dx_bound,
    );
    let sum_bound = |want: &[f64]| -> Vec<f64> {
        (0..cols)
            .map(|c| round(want[c]) + (rows as f64 + n + 8.0) * uc * dwb_scale[c])
            .collect()
    };
    within(
        &format!("{what}: dweight"),
        &host(&w.grad().expect("w has a gradient")),
        &dw_want,
        &sum_bound(&dw_want),
    );
    if kind == Kind::Layer {
        within(
            &format!("{what}: dbias"),
            &host(&b.grad().expect("b has a gradient")),
            &db_want,
            &sum_bound(&db_want),
        );
    }
}

/// Every case on `dev`; `big` adds the row counts that cross the CUDA grid.
fn sweep(dev: &Device, big: bool) {
    let lengths = [
        1usize, 2, 8, 31, 32, 33, 127, 128, 129, 255, 256, 257, 512, 520, 1020, 1023, 1024, 1025,
        1028, 2040, 2048, 2056, 8191, 8192, 8193, 9000, 16383, 16384, 16385,
    ];
    for kind in [Kind::Rms, Kind::Layer] {
        for &cols in &lengths {
            for (rows, layout) in [
                (1usize, Layout::Dense),
                (3, Layout::Sliced),
                (17, Layout::Transposed),
                (130, Layout::Dense),
            ] {
                for dtype in [DType::F32, DType::BF16, DType::F16, DType::F64] {
                    // f64 and f16 on the short rows only (up to f64's warp-per-row cap of
                    // 512): the schedule does not depend on them otherwise
                    if cols > 520 && matches!(dtype, DType::F64 | DType::F16) {
                        continue;
                    }
                    if cols > 9000 && rows > 17 {
                        continue;
                    }
                    case(dev, kind, dtype, rows, cols, layout);
                }
            }
            if big && cols <= 2048 {
                // more rows than the few-row threshold (4 a SM of a 132-SM GPU), where the
                // forward gives each row a warp instead of a block
                for dtype in [DType::F32, DType::BF16, DType::F16, DType::F64] {
                    if cols <= 520 || !matches!(dtype, DType::F64 | DType::F16) {
                        case(dev, kind, dtype, 600, cols, Layout::Dense);
                    }
                }
            }
            if big {
                // more rows than a full grid of the forward's blocks (132 SMs · 2,048 threads /
                // block of cols/16 threads; the backward's blocks are larger, its grid smaller)
                let block = cols.div_ceil(16).next_multiple_of(32).clamp(32, 1024);
                let rows = 132 * (2048 / block) + 37;
                if rows * cols <= 1 << 22 {
                    case(dev, kind, DType::F32, rows, cols, Layout::Dense);
                }
                // more rows than the warp-per-row forward's grid (132 SMs · 64 blocks of 8
                // rows): its warps stride over the rest
                if cols == 8 {
                    case(
                        dev,
                        kind,
                        DType::F32,
                        132 * 64 * 8 + 37,
                        cols,
                        Layout::Dense,
                    );
                }
            }
        }
    }
}

#[test]
fn fused_norms_match_the_f64_math_on_the_cpu() {
    sweep(&Device::Cpu, false);
}

#[test]
fn fused_norms_match_the_f64_math_on_cuda() {
    let Some(dev) = cuda::require_or_skip("fused_norms_match_the_f64_math_on_cuda") else {
        return;
    };
    sweep(&dev, true);
}

#[test]
fn the_composed_backward_is_the_fused_one() {
    // under create_graph the backward is a composed formula: same first derivatives. Both are
    // f64 computations of fewer than 20 roundings each over values below ~50 (rstd·(1 +
    // rstd·mean|x|) for these rows), so they differ by less than 20·50·2⁻⁵³ ≈ 1.1e-13 times
    // (1 + |v|): bound 1e-12 (dropping half of one term of the formula moves a value by 3e-2)
    use stride_core::autograd::{grad, GradOptions};
    let dev = Device::Cpu;
    for layer in [false, true] {
        let x = input(&dev, DType::F64, &[5, 7], 11, 2.0, 1.0, true)
            .requires_grad_(true)
            .unwrap();
        let w = input(&dev, DType::F64, &[7], 12, 1.0, 0.5, false)
            .requires_grad_(true)
            .unwrap();
        let b = input(&dev, DType::F64, &[7], 13, 1.0, 0.0, false)
            .requires_grad_(true)
            .unwrap();
        let dy = input(&dev, DType::F64, &[5, 7], 14, 1.0, 0.0, false);
        let y = match layer {
            true => x.layer_norm(&[7], Some(&w), Some(&b), 1e-5),
            false => x.rms_norm(&[7], Some(&w), 1e-5),
        }
        .unwrap();
        let wrt: Vec<&Tensor> = if layer {
            vec![&x, &w, &b]
        } else {
            vec![&x, &w]
        };
        let run = |create_graph| {
            let opts = GradOptions {
                retain_graph: true,
                create_graph,
                ..Default::default()
            };
            grad(&[&y], &wrt, Some(&[&dy]), opts).unwrap()
        };
        let (fused, composed) = (run(false), run(true));
        for (k, (f, c)) in fused.iter().zip(&composed).enumerate() {
            let (f, c) = (host(f.as_ref().unwrap()), host(c.as_ref().unwrap()));
            let bound: Vec<f64> = f.iter().map(|v| 1e-12 * (1.0 + v.abs())).collect();
            within(&format!("layer={layer} gradient {k}"), &c, &f, &bound);
        }
    }
}

#[test]
fn double_backward_goes_through_the_composed_formula() {
    // a gradient penalty: d/dx of |∂y/∂x·v|² needs the backward to be differentiable
    let x = Tensor::from_vec(vec![0.3f64, -1.2, 2.0, 0.7, 0.1, -0.4], [2, 3])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let w = Tensor::from_vec(vec![1.5f64, -0.5, 2.0], [3])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let f = |xs: &[Tensor]| xs[0].layer_norm(&[3], Some(&xs[1]), None, 1e-5);
    stride_core::autograd::gradgradcheck(f, &[x.clone(), w.clone()], Default::default()).unwrap();
    let f = |xs: &[Tensor]| xs[0].rms_norm(&[3], Some(&xs[1]), 1e-5);
    stride_core::autograd::gradgradcheck(f, &[x, w], Default::default()).unwrap();
}

#[test]
fn norms_refuse_what_they_cannot_normalise() {
    let dev = Device::Cpu;
    let x = Tensor::zeros([2, 3], DType::F32, &dev).unwrap();
    let e = x.rms_norm(&[2], None, 1e-5).unwrap_err().to_string();
    assert!(e.contains("normalized_shape"), "{e}");
    let w = Tensor::zeros([2], DType::F32, &dev).unwrap();
    let e = x
        .layer_norm(&[3], Some(&w), None, 1e-5)
        .unwrap_err()
        .to_string();
    assert!(e.contains("weight"), "{e}");
    let i = Tensor::zeros([2, 3], DType::I32, &dev).unwrap();
    let e = i.rms_norm(&[3], None, 1e-5).unwrap_err().to_string();
    assert!(e.contains("floating-point"), "{e}");
    let e = x.rms_norm(&[3], None, -1.0).unwrap_err().to_string();
    assert!(e.contains("eps"), "{e}");
    let e = x.rms_norm(&[3], None, f64::NAN).unwrap_err().to_string();
    assert!(e.contains("eps"), "{e}");
    // empty inputs: an empty result, and gradients of zeros for the affine operands
    let x0 = Tensor::zeros([0, 3], DType::F32, &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let w0 = Tensor::ones([3], DType::F32, &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = x0.layer_norm(&[3], Some(&w0), None, 1e-5).unwrap();
    assert_eq!(y.shape(), &[0, 3]);
    y.sum().unwrap().backward().unwrap();
    assert_eq!(w0.grad().unwrap().to_vec::<f32>().unwrap(), vec![0.0; 3]);
}
