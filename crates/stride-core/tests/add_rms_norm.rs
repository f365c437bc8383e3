//! `Tensor::add_rms_norm` (the residual add fused into the RMS norm's kernel) against the two
//! ops it fuses, `a.add(b)?.rms_norm(..)`: both results equal theirs BIT FOR BIT, on the CPU
//! and on CUDA (skipped, saying so, without a GPU — mandatory under STRIDE_REQUIRE_CUDA=1),
//! in every float dtype, for addends laid densely, transposed, narrowed (rows not 16-byte
//! aligned) and permuted (a sum with no rows view), with and without a weight, at row lengths
//! on both sides of the CUDA kernels' sizes (16-byte vectors, the warp-per-row forward — taken
//! from 4 rows a SM on — up to 256 vectors: 2,048 halves, 1,024 f32, 512 f64; a block per
//! row below that; 16 elements a thread in registers, at most
//! 1,024 threads: rows past 16,384 are read twice). Bit equality is the contract, not a
//! tolerance: the kernels sum in the plain forward's order over the rounded sum, and a kernel
//! that differs in one rounding (eps added twice, checked by mutating both backends) fails
//! here. Also: gradients equal the composed ops' (to self, residual and weight, through
//! either result), and bad input is an error naming what was wrong.

use stride_core::{cuda, DType, Device, Error, Generator, Tensor};

/// How an operand of logical shape `shape` is laid out.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lay {
    Dense,
    /// a buffer with the last two dims swapped, seen through a transpose
    Transposed,
    /// elements `1..=n` of the last dim of a buffer one longer: rows not 16-byte aligned
    Narrowed,
    /// a buffer with the first two dims swapped (3-d: no rows view of a tensor laid like it)
    Permuted,
}

fn make(dev: &Device, dtype: DType, shape: &[usize], lay: Lay, seed: u64, shift: f64) -> Tensor {
    let d = shape.len();
    let mut s = shape.to_vec();
    match lay {
        Lay::Dense => {}
        Lay::Transposed => s.swap(d - 2, d - 1),
        Lay::Narrowed => s[d - 1] += 1,
        Lay::Permuted => s.swap(0, 1),
    }
    let gen = Generator::new(seed);
    let t = Tensor::randn(s, DType::F64, &Device::Cpu, Some(&gen))
        .unwrap()
        .mul(1.5)
        .unwrap()
        .add(shift)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let last = (d - 1) as i64;
    match lay {
        Lay::Dense => t,
        Lay::Transposed => t.transpose(last - 1, last).unwrap(),
        Lay::Narrowed => t.narrow(last, 1, shape[d - 1]).unwrap(),
        Lay::Permuted => t.transpose(0, 1).unwrap(),
    }
}

/// The values' bits, in row-major order (f16/bf16 widen exactly to f64).
fn bits(t: &Tensor) -> Vec<u64> {
    t.to_device(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Asserts `got` and `want` have the same shape and the same bits; names the first difference.
fn same_bits(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtypes");
    let (g, w) = (bits(got), bits(want));
    if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
        let bad = (0..g.len()).filter(|&i| g[i] != w[i]).count();
        panic!(
            "{what}: {bad} of {} elements differ from the composed ops; first at {i}: {} vs {}",
            g.len(),
            f64::from_bits(g[i]),
            f64::from_bits(w[i])
        );
    }
}

/// The (shape, x layout, residual layout) cases for rows of `cols`.
fn layouts(cols: usize) -> Vec<(Vec<usize>, Lay, Lay)> {
    use Lay::*;
    let two = vec![3, cols];
    let three = vec![2, 2, cols];
    vec![
        (two.clone(), Dense, Dense),
        (two.clone(), Transposed, Transposed),
        (two.clone(), Transposed, Dense),
        (two.clone(), Dense, Narrowed),
        (two, Narrowed, Transposed),
        (three.clone(), Permuted, Dense),
        (three.clone(), Dense, Permuted),
        (three, Transposed, Narrowed),
    ]
}

const EPS: f64 = 1e-5;

/// One forward case: both results against the composed ops', bit for bit.
fn forward_case(dev: &Device, dtype: DType, shape: &[usize], lx: Lay, lr: Lay, weight: bool) {
    let cols = *shape.last().unwrap();
    let what = format!("{dtype} {shape:?} x {lx:?} residual {lr:?} weight {weight} on {dev}");
    let seed = (cols * 7919 + shape.len()) as u64;
    let x = make(dev, dtype, shape, lx, seed, 0.5);
    let r = make(dev, dtype, shape, lr, seed + 1, -0.25);
    let w = weight.then(|| make(dev, dtype, &[cols], Lay::Dense, seed + 2, 1.0));
    let (h, y) = x.add_rms_norm(&r, &[cols], w.as_ref(), EPS).unwrap();
    let h_want = x.add(&r).unwrap();
    let y_want = h_want.rms_norm(&[cols], w.as_ref(), EPS).unwrap();
    same_bits(&format!("{what}: sum"), &h, &h_want);
    same_bits(&format!("{what}: normed"), &y, &y_want);
}

/// Every forward case on `dev` for these row lengths.
fn forward_sweep(dev: &Device, lengths: &[usize]) {
    for &cols in lengths {
        for (shape, lx, lr) in layouts(cols) {
            for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
                for weight in [true, false] {
                    forward_case(dev, dtype, &shape, lx, lr, weight);
                }
            }
        }
    }
}

/// Row lengths across the kernels' vector (2, 4, 8 elements), warp (32) and block sizes.
const LENGTHS: [usize; 10] = [1, 8, 31, 32, 33, 576, 1023, 1024, 1025, 4097];

#[test]
fn add_rms_norm_is_the_composed_ops_bit_for_bit_on_the_cpu() {
    forward_sweep(&Device::Cpu, &LENGTHS);
}

#[test]
fn add_rms_norm_is_the_composed_ops_bit_for_bit_on_cuda() {
    let Some(dev) = cuda::require_or_skip("add_rms_norm_is_the_composed_ops_bit_for_bit_on_cuda")
    else {
        return;
    };
    forward_sweep(&dev, &LENGTHS);
    // past the warp-per-row forward's caps (2,048 halves), and past the register cache
    // (16,384 elements: the rows are read again, from the stored sum)
    forward_sweep(&dev, &[2048, 2056, 16384, 16385, 16392]);
    // more rows than the few-row threshold (4 a SM of a 132-SM GPU), where the forward gives
    // each row a warp instead of a block
    for cols in [8, 576, 1024, 2048] {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            for weight in [true, false] {
                forward_case(&dev, dtype, &[600, cols], Lay::Dense, Lay::Dense, weight);
            }
        }
    }
}

/// Gradients of `Σ y·gy + Σ h·gh` (`gh`: `None`, only `y` is used) to x, residual and weight:
/// the fused op's against the composed ops', bit for bit (the same kernels and nodes).
fn gradient_case(dev: &Device, dtype: DType, lx: Lay, lr: Lay, use_sum: bool) {
    let (shape, cols) = ([2usize, 3, 40], 40);
    let what = format!("{dtype} x {lx:?} residual {lr:?} use_sum {use_sum} on {dev}");
    let leaf = |t: Tensor| t.detach().requires_grad_(true).unwrap();
    let x = leaf(make(dev, dtype, &shape, lx, 1, 0.5));
    let r = leaf(make(dev, dtype, &shape, lr, 2, 0.0));
    let w = leaf(make(dev, dtype, &[cols], Lay::Dense, 3, 1.0));
    let gy = make(dev, dtype, &shape, Lay::Dense, 4, 0.0);
    let gh = make(dev, dtype, &shape, Lay::Dense, 5, 0.0);
    let loss = |h: &Tensor, y: &Tensor| {
        let l = y.mul(&gy).unwrap().sum().unwrap();
        match use_sum {
            true => l.add(&h.mul(&gh).unwrap().sum().unwrap()).unwrap(),
            false => l,
        }
    };
    let (h, y) = x.add_rms_norm(&r, &[cols], Some(&w), EPS).unwrap();
    loss(&h, &y).backward().unwrap();
    let fused: Vec<Tensor> = [&x, &r, &w].iter().map(|t| t.grad().unwrap()).collect();
    for t in [&x, &r, &w] {
        t.set_grad(None).unwrap();
    }
    let h = x.add(&r).unwrap();
    let y = h.rms_norm(&[cols], Some(&w), EPS).unwrap();
    loss(&h, &y).backward().unwrap();
    for (k, (f, t)) in fused.iter().zip([&x, &r, &w]).enumerate() {
        let name = ["x", "residual", "weight"][k];
        same_bits(&format!("{what}: d{name}"), f, &t.grad().unwrap());
    }
}

fn gradient_sweep(dev: &Device) {
    for dtype in [DType::F64, DType::F32, DType::BF16] {
        for (lx, lr) in [
            (Lay::Dense, Lay::Dense),
            (Lay::Transposed, Lay::Narrowed),
            (Lay::Permuted, Lay::Dense),
        ] {
            for use_sum in [true, false] {
                gradient_case(dev, dtype, lx, lr, use_sum);
            }
        }
    }
}

#[test]
fn gradients_are_the_composed_ops_on_the_cpu() {
    gradient_sweep(&Device::Cpu);
}

#[test]
fn gradients_are_the_composed_ops_on_cuda() {
    let Some(dev) = cuda::require_or_skip("gradients_are_the_composed_ops_on_cuda") else {
        return;
    };
    gradient_sweep(&dev);
}

#[test]
fn double_backward_reaches_every_operand() {
    // the norm's backward under create_graph is its composed formula: the fused op's second
    // derivatives are those of the composed ops
    use stride_core::autograd::{grad, GradOptions};
    let dev = Device::Cpu;
    let leaf = |t: Tensor| t.detach().requires_grad_(true).unwrap();
    let x = leaf(make(&dev, DType::F64, &[3, 5], Lay::Dense, 7, 0.5));
    let r = leaf(make(&dev, DType::F64, &[3, 5], Lay::Transposed, 8, 0.0));
    let w = leaf(make(&dev, DType::F64, &[5], Lay::Dense, 9, 1.0));
    let opts = || GradOptions {
        retain_graph: true,
        create_graph: true,
        ..Default::default()
    };
    let penalty = |h: &Tensor, y: &Tensor| -> Vec<f64> {
        let l = y
            .mul(y)
            .unwrap()
            .sum()
            .unwrap()
            .add(&h.sum().unwrap())
            .unwrap();
        let g = grad(&[&l], &[&x], None, opts()).unwrap();
        let p = g[0].as_ref().unwrap().square().unwrap().sum().unwrap();
        grad(&[&p], &[&x, &r, &w], None, opts())
            .unwrap()
            .iter()
            .flat_map(|g| g.as_ref().unwrap().to_vec::<f64>().unwrap())
            .collect()
    };
    let (h, y) = x.add_rms_norm(&r, &[5], Some(&w), EPS).unwrap();
    let fused = penalty(&h, &y);
    let h = x.add(&r).unwrap();
    let composed = penalty(&h, &h.rms_norm(&[5], Some(&w), EPS).unwrap());
    assert_eq!(fused, composed);
    assert!(fused.iter().any(|v| *v != 0.0));
}

#[test]
fn without_grad_mode_nothing_is_recorded() {
    let x = Tensor::ones([2, 4], DType::F32, &Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let r = Tensor::ones([2, 4], DType::F32, &Device::Cpu).unwrap();
    let _g = stride_core::autograd::no_grad();
    let (h, y) = x.add_rms_norm(&r, &[4], None, EPS).unwrap();
    assert!(!h.requires_grad() && !y.requires_grad());
}

#[test]
fn mixed_float_dtypes_are_the_composed_ops() {
    // promotion is add's and rms_norm's: an f16 residual or a bf16 weight beside f32
    let dev = Device::Cpu;
    let x = make(&dev, DType::F32, &[3, 16], Lay::Dense, 1, 0.0);
    let r = make(&dev, DType::F16, &[3, 16], Lay::Dense, 2, 0.0);
    let w = make(&dev, DType::BF16, &[16], Lay::Dense, 3, 1.0);
    for (res, wt) in [(&r, None), (&x, Some(&w)), (&r, Some(&w))] {
        let (h, y) = x.add_rms_norm(res, &[16], wt, EPS).unwrap();
        let hw = x.add(res).unwrap();
        same_bits("mixed: sum", &h, &hw);
        same_bits("mixed: normed", &y, &hw.rms_norm(&[16], wt, EPS).unwrap());
    }
}

#[test]
fn empty_rows_give_empty_results() {
    let x = Tensor::zeros([0, 8], DType::F32, &Device::Cpu).unwrap();
    let (h, y) = x.add_rms_norm(&x, &[8], None, EPS).unwrap();
    assert_eq!((h.shape(), y.shape()), (&[0, 8][..], &[0, 8][..]));
}

#[test]
fn bad_input_is_an_error_naming_it() {
    let dev = Device::Cpu;
    let x = Tensor::ones([2, 4], DType::F32, &dev).unwrap();
    let msg = |e: Error| e.to_string();
    // shapes must be equal: no broadcasting (even where add would broadcast)
    let row = Tensor::ones([1, 4], DType::F32, &dev).unwrap();
    let e = msg(x.add_rms_norm(&row, &[4], None, EPS).unwrap_err());
    assert!(
        e.contains("add_rms_norm") && e.contains("[2, 4]") && e.contains("[1, 4]"),
        "{e}"
    );
    assert!(e.contains("broadcasting"), "{e}");
    // integer input or residual
    let xi = Tensor::ones([2, 4], DType::I64, &dev).unwrap();
    let e = xi.add_rms_norm(&xi, &[4], None, EPS).unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnsupportedDType {
                op: "add_rms_norm",
                dtype: DType::I64,
                ..
            }
        ),
        "{e}"
    );
    let ri = Tensor::ones([2, 4], DType::I32, &dev).unwrap();
    let e = x.add_rms_norm(&ri, &[4], None, EPS).unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnsupportedDType {
                op: "add_rms_norm",
                dtype: DType::I32,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("residual"), "{e}");
    // normalized_shape that is not the trailing dims, a weight of another shape, bad eps
    let e = msg(x.add_rms_norm(&x, &[3], None, EPS).unwrap_err());
    assert!(e.contains("normalized_shape"), "{e}");
    let w = Tensor::ones([3], DType::F32, &dev).unwrap();
    let e = msg(x.add_rms_norm(&x, &[4], Some(&w), EPS).unwrap_err());
    assert!(e.contains("weight"), "{e}");
    for eps in [-1.0, f64::NAN, f64::INFINITY] {
        let e = msg(x.add_rms_norm(&x, &[4], None, eps).unwrap_err());
        assert!(e.contains("eps"), "{e}");
    }
}

#[test]
fn operands_on_two_devices_are_an_error() {
    let Some(dev) = cuda::require_or_skip("operands_on_two_devices_are_an_error") else {
        return;
    };
    let x = Tensor::ones([2, 4], DType::F32, &Device::Cpu).unwrap();
    let g = x.to_device(&dev).unwrap();
    let w = Tensor::ones([4], DType::F32, &dev).unwrap();
    for (a, b, wt) in [(&x, &g, None), (&g, &x, None), (&x, &x, Some(&w))] {
        let e = a.add_rms_norm(b, &[4], wt, EPS).unwrap_err();
        assert!(
            matches!(
                e,
                Error::DeviceMismatch {
                    op: "add_rms_norm",
                    ..
                }
            ),
            "{e}"
        );
    }
}
