//! The fused pointwise kernels — `Tensor::rotary` and `Tensor::gated` (SwiGLU, GeGLU) — against
//! the composed ops they replace. The rotation is two products and a sum in the compute dtype
//! (f32 for f16/bf16) rounded once, exactly as the composed f32 ops compute it, so the fused
//! result must have the composed one's bits, forward and backward, on the CPU and on CUDA. The
//! gated unit rounds once where the composed ops round twice, and CUDA's libm may differ from
//! the CPU's by an ulp: those compare within `ulp(out) + 16·u_c·(|gate| + |act|)·|up|`.
//!
//! Shapes: a view of one fused QKV projection `(B, T, 3, H, D)` permuted to `(B, H, T, D)`
//! (the layout a model rotates), both pairings, partial rotary, per-row tables broadcasting over
//! heads, and lengths crossing the CUDA kernel's 4 positions a thread and 1,024 a block. CUDA
//! cases skip, saying so, without a GPU (mandatory under STRIDE_REQUIRE_CUDA=1).

use stride_core::{cuda, DType, Device, GateActivation, RotaryStyle, Tensor};

const FLOATS: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];

fn randn(shape: &[usize], seed: u64, dev: &Device) -> Tensor {
    let g = stride_core::Generator::new(seed);
    Tensor::randn(shape.to_vec(), DType::F64, dev, Some(&g)).unwrap()
}

/// `q` of a fused QKV projection `(B, T, 3, H, D)`: a permuted, non-contiguous view.
fn q_view(b: usize, t: usize, h: usize, d: usize, dtype: DType, dev: &Device) -> Tensor {
    let qkv = randn(&[b, t, 3, h, d], 1, dev).to_dtype(dtype).unwrap();
    qkv.select(2, 0).unwrap().permute(&[0, 2, 1, 3]).unwrap()
}

/// Angle tables `(T, half)` in the compute dtype of `dtype`.
fn tables(t: usize, half: usize, dtype: DType, dev: &Device) -> (Tensor, Tensor) {
    let angles = randn(&[t, half], 2, dev).mul(3.0).unwrap();
    let cd = stride_core::compute_dtype(dtype);
    (
        angles.cos().unwrap().to_dtype(cd).unwrap(),
        angles.sin().unwrap().to_dtype(cd).unwrap(),
    )
}

/// The composed rotation (what stride-nn's `Rotary` ran before the fused kernel).
fn composed_rotary(x: &Tensor, c: &Tensor, s: &Tensor, style: RotaryStyle) -> Tensor {
    let d = *x.shape().last().unwrap();
    let half = *c.shape().last().unwrap();
    let xc = x.to_dtype(c.dtype()).unwrap();
    let xr = xc.narrow(-1, 0, 2 * half).unwrap();
    let rotated = match style {
        RotaryStyle::HalfSplit => {
            let a = xr.narrow(-1, 0, half).unwrap();
            let b = xr.narrow(-1, half as i64, half).unwrap();
            let ra = a.mul(c).unwrap().sub(&b.mul(s).unwrap()).unwrap();
            let rb = a.mul(s).unwrap().add(&b.mul(c).unwrap()).unwrap();
            Tensor::cat(&[&ra, &rb], -1).unwrap()
        }
        RotaryStyle::Interleaved => {
            let p = xr.unflatten(-1, &[half as i64, 2]).unwrap();
            let (a, b) = (p.select(-1, 0).unwrap(), p.select(-1, 1).unwrap());
            let ra = a.mul(c).unwrap().sub(&b.mul(s).unwrap()).unwrap();
            let rb = a.mul(s).unwrap().add(&b.mul(c).unwrap()).unwrap();
            Tensor::stack(&[&ra, &rb], -1)
                .unwrap()
                .flatten(-2, -1)
                .unwrap()
        }
    };
    let full = if 2 * half < d {
        let rest = xc.narrow(-1, 2 * half as i64, d - 2 * half).unwrap();
        Tensor::cat(&[&rotated, &rest], -1).unwrap()
    } else {
        rotated
    };
    full.to_dtype(x.dtype()).unwrap()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// (B, T, H, D, half) of the rotary cases.
const ROTARY_CASES: [(usize, usize, usize, usize, usize); 4] = [
    (1, 3, 2, 8, 4),
    (2, 5, 3, 10, 3),
    (2, 257, 3, 10, 4),
    (1, 129, 2, 128, 64),
];

fn rotary_case(
    dev: &Device,
    dtype: DType,
    c: (usize, usize, usize, usize, usize),
    style: RotaryStyle,
) {
    let (b, t, h, d, half) = c;
    let x = q_view(b, t, h, d, dtype, dev).requires_grad_(true).unwrap();
    let (cos, sin) = tables(t, half, dtype, dev);
    let what = format!("{dtype} {style:?} x{:?} half {half} on {dev}", x.shape());
    let y = x.rotary(&cos, &sin, style).unwrap();
    assert_eq!(
        bits(&y),
        bits(&composed_rotary(&x.detach(), &cos, &sin, style)),
        "forward, {what}"
    );
    // backward: the composed ops' gradient (the inverse rotation) has the same bits
    let gy = randn(y.shape(), 3, dev).to_dtype(dtype).unwrap();
    let dx = stride_core::autograd::grad(&[&y], &[&x], Some(&[&gy]), Default::default()).unwrap();
    let xc = x.detach().requires_grad_(true).unwrap();
    let yc = composed_rotary(&xc, &cos, &sin, style);
    let dxc =
        stride_core::autograd::grad(&[&yc], &[&xc], Some(&[&gy]), Default::default()).unwrap();
    assert_eq!(
        bits(dx[0].as_ref().unwrap()),
        bits(dxc[0].as_ref().unwrap()),
        "backward, {what}"
    );
}

#[test]
fn rotary_matches_the_composed_ops_bit_for_bit_on_the_cpu() {
    for dtype in FLOATS {
        for style in [RotaryStyle::HalfSplit, RotaryStyle::Interleaved] {
            for c in ROTARY_CASES {
                rotary_case(&Device::Cpu, dtype, c, style);
            }
        }
    }
}

#[test]
fn rotary_matches_the_composed_ops_bit_for_bit_on_cuda() {
    let Some(dev) = cuda::require_or_skip("rotary_matches_the_composed_ops_bit_for_bit_on_cuda")
    else {
        return;
    };
    for dtype in FLOATS {
        for style in [RotaryStyle::HalfSplit, RotaryStyle::Interleaved] {
            for c in ROTARY_CASES {
                rotary_case(&dev, dtype, c, style);
            }
        }
    }
    // per-row tables (B, 1, T, half) broadcasting over heads, as a left-padded batch uses,
    // forward and backward without a host wait
    let x = q_view(2, 7, 4, 16, DType::BF16, &dev)
        .requires_grad_(true)
        .unwrap();
    let (cos, sin) = tables(14, 8, DType::BF16, &dev);
    let (cos, sin) = (
        cos.reshape(&[2, 1, 7, 8]).unwrap(),
        sin.reshape(&[2, 1, 7, 8]).unwrap(),
    );
    {
        let _no_waits = stride_core::debug::forbid_sync();
        let y = x.rotary(&cos, &sin, RotaryStyle::HalfSplit).unwrap();
        y.square().unwrap().sum().unwrap().backward().unwrap();
    }
    let cpu = |t: &Tensor| t.to_device(&Device::Cpu).unwrap();
    let xh = cpu(&x.detach()).requires_grad_(true).unwrap();
    let yh = xh
        .rotary(&cpu(&cos), &cpu(&sin), RotaryStyle::HalfSplit)
        .unwrap();
    yh.square().unwrap().sum().unwrap().backward().unwrap();
    assert_eq!(bits(&x.grad().unwrap()), bits(&xh.grad().unwrap()));
}

/// `act(x)` in f64.
fn act64(act: GateActivation, x: f64) -> f64 {
    // 1 + erf(z): the Taylor series for |z| < 2, erfc's continued fraction beyond (no
    // cancellation as z → −∞)
    let one_plus_erf = |z: f64| -> f64 {
        let erfc_cf = |a: f64| -> f64 {
            // erfc(a) = e^{-a²}/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + …)))), a ≥ 2
            let mut f = a;
            for k in (1..200).rev() {
                f = a + (k as f64 / 2.0) / f;
            }
            (-a * a).exp() / std::f64::consts::PI.sqrt() / f
        };
        if z <= -2.0 {
            return erfc_cf(-z);
        }
        if z >= 2.0 {
            return 2.0 - erfc_cf(z);
        }
        let (mut term, mut sum) = (z, z);
        for n in 1..60 {
            term *= -z * z / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        1.0 + sum * 2.0 / std::f64::consts::PI.sqrt()
    };
    match act {
        GateActivation::Silu => x / (1.0 + (-x).exp()),
        GateActivation::Gelu => 0.5 * x * one_plus_erf(x / std::f64::consts::SQRT_2),
        GateActivation::GeluTanh => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
        }
    }
}

fn ulp(v: f64, dtype: DType) -> f64 {
    // (stored mantissa bits, the least normal exponent): below it the spacing is subnormal
    let (mant, emin) = match dtype {
        DType::F64 => (52, -1022),
        DType::F32 => (23, -126),
        DType::F16 => (10, -14),
        _ => (7, -126),
    };
    let e = if v == 0.0 {
        emin
    } else {
        v.abs().log2().floor() as i32
    };
    2f64.powi(e.max(emin) - mant)
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
}

/// `gate.gated(up)` on `dev` against the f64 math, and its gradients against the CPU's.
fn gated_case(dev: &Device, dtype: DType, act: GateActivation, rows: usize, cols: usize) {
    let uc = if dtype == DType::F64 {
        f64::EPSILON / 2.0
    } else {
        f32::EPSILON as f64 / 2.0
    };
    // wide enough to saturate sigmoid and erf; transposed (a strided walk) unless the rows
    // are a whole number of CUDA's 4-element vectors (the vector path)
    let gate = match cols % 4 {
        0 => randn(&[rows, cols], 4, dev),
        _ => randn(&[cols, rows], 4, dev).t().unwrap(),
    };
    let gate = gate.mul(4.0).unwrap().to_dtype(dtype).unwrap();
    let up = randn(&[rows, cols], 5, dev).to_dtype(dtype).unwrap();
    let y = gate.gated(&up, act).unwrap();
    let (g, u, got) = (values(&gate), values(&up), values(&y));
    for i in 0..got.len() {
        let a = act64(act, g[i]);
        let want = a * u[i];
        let bound = ulp(want, dtype) + 16.0 * uc * (g[i].abs() + a.abs()) * u[i].abs() + 1e-300;
        assert!(
            (got[i] - want).abs() <= bound,
            "{act:?} {dtype} on {dev} [{i}]: got {}, want {want} (gate {}, up {}), bound {bound}",
            got[i],
            g[i],
            u[i]
        );
    }
}

#[test]
fn gated_units_match_the_f64_math() {
    let devices: Vec<Device> = std::iter::once(Device::Cpu)
        .chain(cuda::require_or_skip(
            "gated_units_match_the_f64_math (its CUDA half)",
        ))
        .collect();
    for dev in &devices {
        for dtype in FLOATS {
            for act in [
                GateActivation::Silu,
                GateActivation::Gelu,
                GateActivation::GeluTanh,
            ] {
                for (rows, cols) in [(1, 1), (3, 5), (7, 1031), (3, 1028)] {
                    gated_case(dev, dtype, act, rows, cols);
                }
            }
        }
    }
}

#[test]
fn gated_gradients_on_cuda_match_the_cpu_without_host_waits() {
    let Some(dev) =
        cuda::require_or_skip("gated_gradients_on_cuda_match_the_cpu_without_host_waits")
    else {
        return;
    };
    // 1,031 columns: the scalar path; 1,032: the vector path (a row of the broadcast `up`
    // is still a unit-stride run)
    for (dtype, cols) in [(DType::F32, 1031), (DType::BF16, 1031), (DType::BF16, 1032)] {
        for act in [
            GateActivation::Silu,
            GateActivation::Gelu,
            GateActivation::GeluTanh,
        ] {
            let gate = randn(&[5, cols], 6, &dev)
                .mul(3.0)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let up = randn(&[1, cols], 7, &dev).to_dtype(dtype).unwrap(); // broadcast
            let run = |gate: &Tensor, up: &Tensor| -> (Vec<f64>, Vec<f64>) {
                let (g, u) = (
                    gate.requires_grad_(true).unwrap(),
                    up.requires_grad_(true).unwrap(),
                );
                g.gated(&u, act).unwrap().sum().unwrap().backward().unwrap();
                (values(&g.grad().unwrap()), values(&u.grad().unwrap()))
            };
            let on_gpu = {
                let _no_waits = stride_core::debug::forbid_sync();
                let (g, u) = (gate.detach(), up.detach());
                let g = g.requires_grad_(true).unwrap();
                let u = u.requires_grad_(true).unwrap();
                g.gated(&u, act).unwrap().sum().unwrap().backward().unwrap();
                (g.grad().unwrap(), u.grad().unwrap())
            };
            let (dg, du) = (values(&on_gpu.0), values(&on_gpu.1));
            let cpu = |t: &Tensor| t.to_device(&Device::Cpu).unwrap();
            let (dg_cpu, du_cpu) = run(&cpu(&gate), &cpu(&up));
            let uc = f32::EPSILON as f64 / 2.0;
            let (gv, uv) = (values(&gate), values(&up));
            // dgate = up·act′(gate), whose terms are at most |up|·(1 + |gate|) for the three
            // activations (it cancels to near zero where act′ crosses zero): two ulps of the
            // result and a few roundings of those terms; dup sums 5 rows
            for (i, (a, b)) in dg.iter().zip(&dg_cpu).enumerate() {
                let terms = uv[i % cols].abs() * (1.0 + gv[i].abs());
                let tol = 2.0 * ulp(*b, dtype) + 64.0 * uc * terms;
                assert!(
                    (a - b).abs() <= tol,
                    "{act:?} {dtype} dgate[{i}]: {a} vs {b}"
                );
            }
            for (i, (a, b)) in du.iter().zip(&du_cpu).enumerate() {
                // Σ over 5 rows of act(gate), |act(x)| ≤ |x|, summed in different orders
                let terms: f64 = (0..5).map(|r| gv[r * cols + i].abs() + 1.0).sum();
                let tol = 2.0 * ulp(*b, dtype) + 16.0 * uc * terms;
                assert!((a - b).abs() <= tol, "{act:?} {dtype} dup[{i}]: {a} vs {b}");
            }
        }
    }
}

#[test]
fn bad_operands_are_refused_with_errors() {
    let dev = Device::Cpu;
    let x = randn(&[2, 3, 4], 1, &dev).to_dtype(DType::F32).unwrap();
    let (c, s) = tables(3, 2, DType::F32, &dev);
    let style = RotaryStyle::HalfSplit;
    let err = |r: stride_core::Result<Tensor>| r.unwrap_err().to_string();
    assert!(err(x.to_dtype(DType::I64).unwrap().rotary(&c, &s, style)).contains("floating-point"));
    assert!(err(x.rotary(&c, &s.narrow(1, 0, 1).unwrap(), style)).contains("one shape"));
    let (c3, s3) = tables(3, 3, DType::F32, &dev);
    assert!(err(x.rotary(&c3, &s3, style)).contains("R ≤ D"));
    let (c5, s5) = tables(5, 2, DType::F32, &dev);
    assert!(err(x.rotary(&c5, &s5, style)).contains("broadcast"));
    let i = x.to_dtype(DType::I32).unwrap();
    assert!(err(i.swiglu(&x)).contains("floating-point"));
    assert!(err(x.swiglu(&randn(&[5], 1, &dev))).contains("broadcast"));
}
