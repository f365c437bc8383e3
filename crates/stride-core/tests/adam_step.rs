//! `Tensor::adam_step_` (the fused Adam update) against the composed ops it replaces, bit for
//! bit: every float dtype, every Adam variant (L2 weight decay, AdamW, amsgrad, maximize),
//! parameters and moments transposed, stepped and offset, gradients broadcast, and lengths on
//! both sides of the CUDA kernel's block and of its 4-element vectors. On the CPU (the
//! backend's composed default body) and on CUDA (the fused kernel; skipped, saying so, without
//! a GPU — mandatory under STRIDE_REQUIRE_CUDA=1). Then the operand checks.

use stride_core::{cuda, AdamStep, DType, Device, Generator, MemoryFormat, Tensor};

/// The update as stride-nn's `Adam` composed it before the fused primitive existed (PyTorch's
/// `_single_tensor_adam`), from public tensor ops.
fn composed(
    h: &AdamStep,
    p: &Tensor,
    grad: &Tensor,
    m: &Tensor,
    v: &Tensor,
    vmax: Option<&Tensor>,
) -> stride_core::Result<()> {
    composed_with(h, p, grad, m, v, vmax, |b, n| b.powf(n as f64))
}

/// `b^n` by squaring: the powers of a step counted on the device.
fn pow_by_squaring(mut b: f64, mut n: u64) -> f64 {
    let mut r = 1.0;
    while n > 0 {
        if n & 1 == 1 {
            r *= b;
        }
        b *= b;
        n >>= 1;
    }
    r
}

/// [`composed`] with the powers of the bias corrections taken by `pow`.
fn composed_with(
    h: &AdamStep,
    p: &Tensor,
    grad: &Tensor,
    m: &Tensor,
    v: &Tensor,
    vmax: Option<&Tensor>,
    pow: fn(f64, u64) -> f64,
) -> stride_core::Result<()> {
    let mut g = if h.maximize {
        grad.neg()?
    } else {
        grad.clone()
    };
    if h.weight_decay != 0.0 {
        if h.decoupled_weight_decay {
            p.mul_(1.0 - h.lr * h.weight_decay)?;
        } else if h.weight_decay == 1.0 {
            g = g.add(p)?;
        } else {
            g = g.add(&p.mul(h.weight_decay)?)?;
        }
    }
    m.lerp_(&g, 1.0 - h.beta1)?;
    v.mul_(h.beta2)?;
    v.addcmul_(&g, &g, 1.0 - h.beta2)?;
    let step_size = h.lr / (1.0 - pow(h.beta1, h.step));
    let bc2_sqrt = (1.0 - pow(h.beta2, h.step)).sqrt();
    let denom = match vmax {
        Some(x) => {
            x.maximum_(v)?;
            x.sqrt()?.div(bc2_sqrt)?
        }
        None => v.sqrt()?.div(bc2_sqrt)?,
    };
    denom.add_(h.eps)?;
    p.addcdiv_(m, &denom, -step_size)?;
    Ok(())
}

fn bits(t: &Tensor) -> Vec<u64> {
    let t = t.to_device(&Device::Cpu).unwrap();
    let v = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

fn same(what: &str, want: &Tensor, got: &Tensor) {
    let (a, b) = (bits(want), bits(got));
    if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
        panic!(
            "{what}: element {i} of {} differs: composed {} ({:x}), fused {} ({:x})",
            a.len(),
            f64::from_bits(a[i]),
            a[i],
            f64::from_bits(b[i]),
            b[i]
        );
    }
}

/// How a test tensor of shape `[r, c]` is laid out.
#[derive(Debug, Clone, Copy)]
enum Lay {
    Dense,
    /// `[c, r]` transposed.
    Transposed,
    /// Every other column of a wider buffer, from column 1 (an offset).
    Stepped,
    /// One row broadcast to all (read-only operands only: the gradient).
    Broadcast,
}

/// A `[r, c]` tensor of `dtype` on `dev` holding `values` (row-major) in layout `lay`.
fn laid(values: &Tensor, lay: Lay, dev: &Device) -> Tensor {
    let (r, c) = (values.shape()[0], values.shape()[1]);
    let v = values.to_device(dev).unwrap();
    match lay {
        Lay::Dense => v.contiguous().unwrap(),
        Lay::Transposed => v.t().unwrap().contiguous().unwrap().t().unwrap(),
        Lay::Stepped => {
            let wide = Tensor::zeros([r, 2 * c + 1], v.dtype(), dev).unwrap();
            let s = wide.slice(1, 1, 2 * c as i64 + 1, 2).unwrap();
            s.copy_(&v).unwrap();
            s
        }
        Lay::Broadcast => v
            .narrow(0, 0, 1)
            .unwrap()
            .contiguous()
            .unwrap()
            .expand(&[r as i64, c as i64])
            .unwrap(),
    }
}

/// `torch.optim.Adam`'s defaults, first step.
const BASE: AdamStep = AdamStep {
    lr: 1e-3,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weight_decay: 0.0,
    decoupled_weight_decay: false,
    maximize: false,
    step: 1,
};

fn variants() -> Vec<(&'static str, AdamStep, bool)> {
    let base = BASE;
    vec![
        ("adam", base, false),
        (
            "adam+l2",
            AdamStep {
                weight_decay: 0.1,
                ..base
            },
            false,
        ),
        (
            "adam+l2=1",
            AdamStep {
                weight_decay: 1.0,
                ..base
            },
            false,
        ),
        (
            "adamw",
            AdamStep {
                lr: 3e-2,
                weight_decay: 0.01,
                decoupled_weight_decay: true,
                ..base
            },
            false,
        ),
        ("amsgrad", base, true),
        (
            "everything",
            AdamStep {
                lr: 0.5,
                beta1: 0.5,
                beta2: 0.75,
                eps: 1e-3,
                weight_decay: 0.2,
                maximize: true,
                ..base
            },
            true,
        ),
    ]
}

/// Three steps of every variant in `dtype` over `[r, c]`, with the written tensors in `lay`
/// and the gradient in `glay`: fused and composed must agree bit for bit after every step.
fn check(dev: &Device, dtype: DType, (r, c): (usize, usize), lay: Lay, glay: Lay) {
    let gen = Generator::new(7 + r as u64 * 31 + c as u64);
    let cpu = Device::Cpu;
    let draw = |scale: f64| {
        Tensor::randn([r, c], DType::F64, &cpu, Some(&gen))
            .unwrap()
            .mul(scale)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    for (name, h, amsgrad) in variants() {
        let p0 = draw(1.0);
        let (fused, reference): (Vec<Tensor>, Vec<Tensor>) = (0..4)
            .map(|k| {
                let init = if k == 0 {
                    p0.clone()
                } else {
                    Tensor::zeros([r, c], dtype, &cpu).unwrap()
                };
                (laid(&init, lay, dev), laid(&init, Lay::Dense, dev))
            })
            .unzip();
        for step in 1..=3 {
            // gradients with exact zeros and a wide range of magnitudes
            let g = draw(10f64.powi(step as i32 - 2))
                .mul(&draw(1.0).gt(-0.5).unwrap().to_dtype(dtype).unwrap())
                .unwrap();
            let gf = laid(&g, glay, dev);
            let gr = laid(&g, glay, dev);
            let h = AdamStep { step, ..h };
            let vm = |t: &[Tensor]| if amsgrad { Some(t[3].clone()) } else { None };
            let what = format!("{name} {dtype} [{r}, {c}] {lay:?}, grad {glay:?}, step {step}");
            fused[0]
                .adam_step_(&gf, &fused[1], &fused[2], vm(&fused).as_ref(), &h)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            composed(
                &h,
                &reference[0],
                &gr,
                &reference[1],
                &reference[2],
                vm(&reference).as_ref(),
            )
            .unwrap();
            for (k, part) in ["param", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
                .iter()
                .enumerate()
                .take(if amsgrad { 4 } else { 3 })
            {
                same(&format!("{what}: {part}"), &reference[k], &fused[k]);
            }
        }
    }
}

/// Shapes on both sides of the kernels' widths: 1 element, a 4-element vector ± 1, a block of
/// 256 threads ± 1, and a few blocks.
const SHAPES: [(usize, usize); 7] = [
    (1, 1),
    (1, 3),
    (1, 5),
    (4, 64),
    (257, 1),
    (3, 85),
    (33, 127),
];

fn sweep(dev: &Device) {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for &shape in &SHAPES {
            check(dev, dtype, shape, Lay::Dense, Lay::Dense);
        }
        for (lay, glay) in [
            (Lay::Transposed, Lay::Dense),
            (Lay::Stepped, Lay::Transposed),
            (Lay::Dense, Lay::Broadcast),
            (Lay::Stepped, Lay::Stepped),
        ] {
            check(dev, dtype, (33, 127), lay, glay);
        }
    }
}

#[test]
fn fused_adam_is_the_composed_update_on_the_cpu() {
    sweep(&Device::Cpu);
}

#[test]
fn fused_adam_is_the_composed_update_on_cuda() {
    let Some(dev) = cuda::require_or_skip("fused_adam_is_the_composed_update_on_cuda") else {
        return;
    };
    sweep(&dev);
}

#[test]
fn fused_adam_refuses_what_it_cannot_update() {
    let dev = Device::Cpu;
    let z = |shape: &[usize], dtype| Tensor::zeros(shape, dtype, &dev).unwrap();
    let h = BASE;
    let p = z(&[2, 3], DType::F32);
    let like = || p.zeros_like(MemoryFormat::Preserve).unwrap();
    let err = |r: stride_core::Result<()>| r.unwrap_err().to_string();
    // shape
    let e = err(p.adam_step_(&z(&[3, 2], DType::F32), &like(), &like(), None, &h));
    assert!(e.contains("grad") && e.contains("shape"), "{e}");
    // dtype
    let e = err(p.adam_step_(&z(&[2, 3], DType::F16), &like(), &like(), None, &h));
    assert!(e.contains("grad is float16 but param is float32"), "{e}");
    // integer parameters
    let pi = z(&[2], DType::I64);
    let e = err(pi.adam_step_(&pi.clone(), &pi.clone(), &pi.clone(), None, &h));
    assert!(e.contains("float parameters"), "{e}");
    // an expanded moment would be written twice per element
    let row = z(&[1, 3], DType::F32).expand(&[2, 3]).unwrap();
    let e = err(p.adam_step_(&like(), &row, &like(), None, &h));
    assert!(e.contains("exp_avg") && e.contains("share memory"), "{e}");
    // two written tensors in one place
    let m = like();
    let e = err(p.adam_step_(&like(), &m, &m, None, &h));
    assert!(e.contains("exp_avg and exp_avg_sq share memory"), "{e}");
    // the gradient inside the parameter
    let e = err(p.adam_step_(&p, &like(), &like(), None, &h));
    assert!(e.contains("param and grad share memory"), "{e}");
    // recording autograd on a parameter that requires grad
    let q = like().requires_grad_(true).unwrap();
    let e = err(q.adam_step_(&like(), &like(), &like(), None, &h));
    assert!(e.contains("no_grad"), "{e}");
    // nothing was written by any refused call
    assert!(p.to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
}

/// `fused_adam_` over many parameters at once — more than one CUDA launch takes (36), sizes
/// on both sides of a block's 65,536 elements, f32 and bf16 mixed, dense parameters beside a
/// transposed one (still one run each) and one whose gradient is transposed (its own kernel)
/// — against the composed update of each, bit for bit, for Adam, AdamW and amsgrad.
fn many(dev: &Device) {
    let cpu = Device::Cpu;
    let gen = Generator::new(11);
    let sizes: Vec<(usize, usize)> = (0..40)
        .map(|k| match k % 8 {
            0 => (1, 65537),
            1 => (2, 65536),
            2 => (1, 1),
            3 => (3, 5),
            4 => (257, 3),
            5 => (16, 16),
            6 => (1, 131075),
            _ => (7, 33),
        })
        .collect();
    let dtype_of = |k: usize| {
        if k.is_multiple_of(3) {
            DType::BF16
        } else {
            DType::F32
        }
    };
    // (param/moment layout, gradient layout) of parameter k
    let lay_of = |k: usize| match k {
        5 => (Lay::Transposed, Lay::Transposed),
        13 => (Lay::Dense, Lay::Transposed),
        _ => (Lay::Dense, Lay::Dense),
    };
    for (name, h, amsgrad) in variants()
        .into_iter()
        .filter(|(n, _, _)| ["adam", "adamw", "amsgrad"].contains(n))
    {
        let mut fused = vec![];
        let mut reference = vec![];
        for (k, &(r, c)) in sizes.iter().enumerate() {
            let p0 = Tensor::randn([r, c], DType::F64, &cpu, Some(&gen))
                .unwrap()
                .to_dtype(dtype_of(k))
                .unwrap();
            let z = Tensor::zeros([r, c], dtype_of(k), &cpu).unwrap();
            let lay = lay_of(k).0;
            // fresh storage for every operand (a dense CPU `laid` is a view of its input)
            let make = |lay| -> Vec<Tensor> {
                [&p0, &z, &z, &z]
                    .iter()
                    .map(|t| laid(&t.clone_tensor().unwrap(), lay, dev))
                    .collect()
            };
            fused.push(make(lay));
            reference.push(make(Lay::Dense));
        }
        for step in 1..=2 {
            let h = AdamStep { step, ..h };
            let grads: Vec<Tensor> = sizes
                .iter()
                .enumerate()
                .map(|(k, &(r, c))| {
                    let g = Tensor::randn([r, c], DType::F64, &cpu, Some(&gen))
                        .unwrap()
                        .to_dtype(dtype_of(k))
                        .unwrap();
                    laid(&g, lay_of(k).1, dev)
                })
                .collect();
            let col = |i: usize| fused.iter().map(|t| &t[i]).collect::<Vec<&Tensor>>();
            let vmax = col(3);
            stride_core::fused_adam_(
                &col(0),
                &grads.iter().collect::<Vec<_>>(),
                &col(1),
                &col(2),
                amsgrad.then_some(vmax.as_slice()),
                &h,
            )
            .unwrap_or_else(|e| panic!("{name} step {step}: {e}"));
            for (k, r) in reference.iter().enumerate() {
                let vm = amsgrad.then(|| r[3].clone());
                composed(&h, &r[0], &grads[k], &r[1], &r[2], vm.as_ref()).unwrap();
                for (i, part) in ["param", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
                    .iter()
                    .enumerate()
                    .take(3 + amsgrad as usize)
                {
                    let what = format!("{name} step {step}, parameter {k} {:?}: {part}", sizes[k]);
                    same(&what, &r[i], &fused[k][i]);
                }
            }
        }
    }
}

#[test]
fn many_parameters_in_one_call_are_each_the_composed_update() {
    many(&Device::Cpu);
    let name = "many_parameters_in_one_call_are_each_the_composed_update on cuda";
    if let Some(dev) = cuda::require_or_skip(name) {
        many(&dev);
        // the whole step without a host wait
        let p = Tensor::zeros([3, 4], DType::F32, &dev).unwrap();
        let like = || p.zeros_like(MemoryFormat::Preserve).unwrap();
        let (g, m, v) = (like(), like(), like());
        let _no_waits = stride_core::debug::forbid_sync();
        stride_core::fused_adam_(&[&p], &[&g], &[&m], &[&v], None, &BASE).unwrap();
    }
}

#[test]
fn fused_adam_over_lists_refuses_mismatched_lists() {
    let dev = Device::Cpu;
    let p = Tensor::zeros([2], DType::F32, &dev).unwrap();
    let like = || p.zeros_like(MemoryFormat::Preserve).unwrap();
    let (g, m, v) = (like(), like(), like());
    let e = stride_core::fused_adam_(&[&p], &[&g, &g], &[&m], &[&v], None, &BASE)
        .unwrap_err()
        .to_string();
    assert!(e.contains("1 parameters but 2 grads"), "{e}");
    // one bad parameter refuses the whole call before anything is written
    let q = Tensor::zeros([3], DType::F32, &dev).unwrap();
    let ones = Tensor::ones([2], DType::F32, &dev).unwrap();
    let e = stride_core::fused_adam_(&[&p, &q], &[&ones, &g], &[&m, &m], &[&v, &v], None, &BASE)
        .unwrap_err()
        .to_string();
    assert!(e.contains("shape"), "{e}");
    // one launch steps every parameter at once: no two may share memory
    let (m2, v2) = (like(), like());
    let e = stride_core::fused_adam_(&[&p, &p], &[&g, &g], &[&m, &m2], &[&v, &v2], None, &BASE)
        .unwrap_err()
        .to_string();
    assert!(e.contains("parameters 0 and 1 share memory"), "{e}");
    // parameter 1's gradient is parameter 0's exp_avg, which the same launch writes
    let (p2, m3) = (like(), like());
    let e = stride_core::fused_adam_(&[&p, &p2], &[&g, &m], &[&m, &m3], &[&v, &v2], None, &BASE)
        .unwrap_err()
        .to_string();
    assert!(e.contains("parameters 0 and 1 share memory"), "{e}");
    assert!(p.to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
}

/// `fused_adam_skippable_` over many parameters (more than one CUDA launch takes, sizes on
/// both sides of a block, a transposed parameter and a transposed gradient taking their own
/// kernel, an empty parameter) through attempts of which some are flagged: each flagged
/// attempt changes nothing but the counters' other slot (the same count), and each other is
/// the composed update at the count of steps taken, bit for bit, with the powers by squaring.
fn skippable(dev: &Device) {
    let cpu = Device::Cpu;
    let gen = Generator::new(12);
    let sizes: Vec<(usize, usize)> = (0..38)
        .map(|k| match k % 6 {
            0 => (1, 65537),
            1 => (3, 5),
            2 => (1, 1),
            3 => (0, 4),
            4 => (16, 16),
            _ => (7, 33),
        })
        .collect();
    let dtype_of = |k: usize| if k % 4 == 1 { DType::BF16 } else { DType::F32 };
    let lay_of = |k: usize| match k {
        4 => (Lay::Transposed, Lay::Transposed),
        10 => (Lay::Dense, Lay::Transposed),
        _ => (Lay::Dense, Lay::Dense),
    };
    let flags = [0.0f32, 1.0, 0.0, 1.0, 1.0, 0.0, f32::NAN, 0.0];
    for (name, h, amsgrad) in variants()
        .into_iter()
        .filter(|(n, _, _)| ["adamw", "amsgrad"].contains(n))
    {
        let mut fused = vec![];
        let mut reference = vec![];
        let mut counters = vec![];
        for (k, &(r, c)) in sizes.iter().enumerate() {
            let p0 = Tensor::randn([r, c], DType::F64, &cpu, Some(&gen))
                .unwrap()
                .to_dtype(dtype_of(k))
                .unwrap();
            let z = Tensor::zeros([r, c], dtype_of(k), &cpu).unwrap();
            let make = |lay| -> Vec<Tensor> {
                [&p0, &z, &z, &z]
                    .iter()
                    .map(|t| laid(&t.clone_tensor().unwrap(), lay, dev))
                    .collect()
            };
            fused.push(make(lay_of(k).0));
            reference.push(make(Lay::Dense));
            counters.push(Tensor::zeros([2], DType::F64, dev).unwrap());
        }
        let mut taken = 0u64;
        for (attempt, &flag) in flags.iter().enumerate() {
            let attempt = attempt as u64 + 1;
            let grads: Vec<Tensor> = sizes
                .iter()
                .enumerate()
                .map(|(k, &(r, c))| {
                    let g = Tensor::randn([r, c], DType::F64, &cpu, Some(&gen))
                        .unwrap()
                        .to_dtype(dtype_of(k))
                        .unwrap();
                    laid(&g, lay_of(k).1, dev)
                })
                .collect();
            let found = Tensor::scalar(flag as f64, DType::F32, dev).unwrap();
            let col = |i: usize| fused.iter().map(|t| &t[i]).collect::<Vec<&Tensor>>();
            let vmax = col(3);
            let cs: Vec<&Tensor> = counters.iter().collect();
            {
                // the step never waits for the host
                let _no_waits = stride_core::debug::forbid_sync();
                stride_core::fused_adam_skippable_(
                    &col(0),
                    &grads.iter().collect::<Vec<_>>(),
                    &col(1),
                    &col(2),
                    amsgrad.then_some(vmax.as_slice()),
                    &AdamStep { step: attempt, ..h },
                    stride_core::SkippableStep {
                        found_inf: &found,
                        counters: &cs,
                    },
                )
                .unwrap_or_else(|e| panic!("{name} attempt {attempt}: {e}"));
            }
            if flag == 0.0 {
                taken += 1;
                let h = AdamStep { step: taken, ..h };
                for (k, r) in reference.iter().enumerate() {
                    let vm = amsgrad.then(|| r[3].clone());
                    composed_with(
                        &h,
                        &r[0],
                        &grads[k],
                        &r[1],
                        &r[2],
                        vm.as_ref(),
                        pow_by_squaring,
                    )
                    .unwrap();
                }
            }
            for (k, r) in reference.iter().enumerate() {
                for (i, part) in ["param", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
                    .iter()
                    .enumerate()
                    .take(3 + amsgrad as usize)
                {
                    let what = format!(
                        "{name} attempt {attempt} (flag {flag}), parameter {k} {:?}: {part}",
                        sizes[k]
                    );
                    same(&what, &r[i], &fused[k][i]);
                }
                let count = counters[k]
                    .to_device(&cpu)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap();
                assert_eq!(
                    count[(attempt % 2) as usize],
                    taken as f64,
                    "{name} attempt {attempt}: parameter {k}'s count"
                );
            }
        }
    }
}

#[test]
fn a_skippable_step_skips_on_the_device_and_counts_the_steps_taken() {
    skippable(&Device::Cpu);
    let name = "a_skippable_step_skips_on_the_device_and_counts_the_steps_taken on cuda";
    if let Some(dev) = cuda::require_or_skip(name) {
        skippable(&dev);
    }
}

#[test]
fn a_skippable_step_refuses_bad_flags_and_counters() {
    let dev = Device::Cpu;
    let p = Tensor::zeros([2], DType::F32, &dev).unwrap();
    let like = || p.zeros_like(MemoryFormat::Preserve).unwrap();
    let (g, m, v) = (like(), like(), like());
    let c = Tensor::zeros([2], DType::F64, &dev).unwrap();
    let f = Tensor::scalar(0.0, DType::F32, &dev).unwrap();
    let run = |f: &Tensor, c: &Tensor, step: u64| {
        stride_core::fused_adam_skippable_(
            &[&p],
            &[&g],
            &[&m],
            &[&v],
            None,
            &AdamStep { step, ..BASE },
            stride_core::SkippableStep {
                found_inf: f,
                counters: &[c],
            },
        )
        .unwrap_err()
        .to_string()
    };
    assert!(run(&f, &c, 0).contains("from 1"));
    let e = run(&Tensor::zeros([1], DType::F32, &dev).unwrap(), &c, 1);
    assert!(e.contains("0-d f32"), "{e}");
    let e = run(&f, &Tensor::zeros([2], DType::F32, &dev).unwrap(), 1);
    assert!(e.contains("[2] f64"), "{e}");
    let e = run(
        &f,
        &Tensor::zeros([4], DType::F64, &dev)
            .unwrap()
            .slice(0, 0, 4, 2)
            .unwrap(),
        1,
    );
    assert!(e.contains("contiguous"), "{e}");
    // the flag inside a tensor the step writes
    let e = run(&m.select(0, 0).unwrap(), &c, 1);
    assert!(e.contains("0-d f32") || e.contains("shares memory"), "{e}");
    // nothing was written by the refused calls
    assert_eq!(c.to_vec::<f64>().unwrap(), vec![0.0, 0.0]);
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
}
