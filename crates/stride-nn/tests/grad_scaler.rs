//! `GradScaler`: the scale schedule and the skipped steps of PyTorch's, without the host
//! waiting — on the CPU, and on CUDA where there is one (skipping, saying so, without a GPU;
//! mandatory under STRIDE_REQUIRE_CUDA=1).

use stride_core::{debug, DType, Device, Generator, Tensor};
use stride_nn::optim::name_params;
use stride_nn::optim::{Adam, AdamConfig, GradScaler, GradScalerConfig, Optimizer, Sgd, SgdConfig};
use stride_nn::Parameter;

/// Per attempt: is a gradient non-finite (the step must be skipped)?
const OVERFLOW: [bool; 7] = [false, true, false, false, true, false, false];

/// Weights: a dense matrix, a transposed one (its own CUDA kernel), a vector.
fn params(dev: &Device) -> Vec<Parameter> {
    let g = Generator::new(3);
    let w = Tensor::randn([5, 7], DType::F32, dev, Some(&g)).unwrap();
    let wt = Tensor::randn([6, 4], DType::F32, dev, Some(&g))
        .unwrap()
        .t()
        .unwrap()
        .contiguous()
        .unwrap()
        .t()
        .unwrap();
    let b = Tensor::randn([9], DType::F32, dev, Some(&g)).unwrap();
    [w, wt, b]
        .into_iter()
        .map(|t| Parameter::new(t).unwrap())
        .collect()
}

/// The loss of attempt `a`: `Σ p·x` over the parameters, `x` drawn per attempt (so the
/// gradient is `x`), with an inf in one element on overflow attempts.
fn loss(ps: &[Parameter], a: usize, dev: &Device) -> Tensor {
    let g = Generator::new(100 + a as u64);
    let mut total: Option<Tensor> = None;
    for (k, p) in ps.iter().enumerate() {
        let t = p.tensor();
        let x = Tensor::randn(t.shape().to_vec(), DType::F32, dev, Some(&g)).unwrap();
        if OVERFLOW[a] && k == 1 {
            x.view(&[-1])
                .unwrap()
                .select(0, 3)
                .unwrap()
                .fill_(f64::INFINITY)
                .unwrap();
        }
        let term = t.mul(&x).unwrap().sum().unwrap();
        total = Some(match total {
            None => term,
            Some(s) => s.add(&term).unwrap(),
        });
    }
    total.unwrap()
}

fn values(ps: &[Parameter]) -> Vec<Vec<u32>> {
    ps.iter()
        .map(|p| {
            let t = p.tensor().to_device(&Device::Cpu).unwrap();
            t.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        })
        .collect()
}

fn config() -> GradScalerConfig {
    GradScalerConfig {
        init_scale: 1024.0,
        growth_interval: 2,
        ..GradScalerConfig::default()
    }
}

/// The scaler's run: attempts under `forbid_sync`, the scale read after each.
fn scaled_run(dev: &Device) -> (Vec<Vec<u32>>, Vec<f64>, f64) {
    let ps = params(dev);
    let mut opt = Adam::new(name_params(ps.clone()), AdamConfig::adamw()).unwrap();
    let mut scaler = GradScaler::new(config()).unwrap();
    let mut scales = vec![];
    for a in 0..OVERFLOW.len() {
        {
            let _no_waits = debug::forbid_sync();
            opt.zero_grad().unwrap();
            scaler
                .scale(&loss(&ps, a, dev))
                .unwrap()
                .backward()
                .unwrap();
            scaler.step(&mut opt).unwrap();
            scaler.update(None).unwrap();
        }
        scales.push(scaler.get_scale().unwrap());
    }
    let sd = opt.state_dict().unwrap();
    let step = sd.state[&0]["step"]
        .to_dtype(DType::F64)
        .unwrap()
        .item::<f64>()
        .unwrap();
    (values(&ps), scales, step)
}

/// What PyTorch's GradScaler does, written out: the overflowing attempts are not stepped at
/// all (unscaled gradients are the `x` exactly: the scale is a power of two), the scale halves
/// after each and doubles after two clean steps in a row.
fn reference_run(dev: &Device) -> (Vec<Vec<u32>>, Vec<f64>, f64) {
    let ps = params(dev);
    let mut opt = Adam::new(name_params(ps.clone()), AdamConfig::adamw()).unwrap();
    let (mut scale, mut clean) = (1024.0, 0);
    let mut scales = vec![];
    for (a, &overflow) in OVERFLOW.iter().enumerate() {
        opt.zero_grad().unwrap();
        loss(&ps, a, dev).backward().unwrap();
        if overflow {
            scale /= 2.0;
            clean = 0;
        } else {
            opt.step().unwrap();
            clean += 1;
            if clean == 2 {
                scale *= 2.0;
                clean = 0;
            }
        }
        scales.push(scale);
    }
    let taken = OVERFLOW.iter().filter(|o| !**o).count() as f64;
    (values(&ps), scales, taken)
}

fn check_against_reference(dev: &Device) {
    let (got, got_scales, got_steps) = scaled_run(dev);
    let (want, want_scales, want_steps) = reference_run(&Device::Cpu);
    assert_eq!(got_scales, want_scales, "scales on {dev}");
    assert_eq!(got_steps, want_steps, "Adam's steps taken on {dev}");
    // the bias corrections of the scaler's steps come from powers by squaring, the reference's
    // from powf: equal for these few steps, checked bit for bit
    assert_eq!(got, want, "parameters on {dev}");
}

#[test]
fn scaled_adam_skips_overflowing_steps_on_the_device_as_pytorch_does() {
    check_against_reference(&Device::Cpu);
}

#[test]
fn scaled_adam_skips_overflowing_steps_on_cuda() {
    let Some(gpu) =
        stride_core::cuda::require_or_skip("scaled_adam_skips_overflowing_steps_on_cuda")
    else {
        return;
    };
    check_against_reference(&gpu);
}

/// SGD has no device-side skip: it reads the flag (a host wait, as PyTorch's non-fused
/// optimizers do) — refused under forbid_sync, right without it.
#[test]
fn scaled_sgd_reads_the_flag_and_skips() {
    let dev = Device::Cpu;
    let ps = params(&dev);
    let cfg = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        ..SgdConfig::default()
    };
    let mut opt = Sgd::new(name_params(ps.clone()), cfg).unwrap();
    let mut scaler = GradScaler::new(config()).unwrap();
    let before = values(&ps);
    opt.zero_grad().unwrap();
    scaler
        .scale(&loss(&ps, 1, &dev))
        .unwrap()
        .backward()
        .unwrap();
    {
        let _no_waits = debug::forbid_sync();
        let e = scaler.step(&mut opt).unwrap_err();
        assert!(e.to_string().contains("to_vec"), "{e}");
    }
    // the refused step unscaled the gradients already; stepping again is refused as PyTorch's
    scaler.update(Some(1024.0)).unwrap();
    opt.zero_grad().unwrap();
    scaler
        .scale(&loss(&ps, 1, &dev))
        .unwrap()
        .backward()
        .unwrap();
    scaler.step(&mut opt).unwrap();
    assert_eq!(
        values(&ps),
        before,
        "an overflowing SGD step changed the parameters"
    );
    scaler.update(None).unwrap();
    assert_eq!(scaler.get_scale().unwrap(), 512.0);
}

#[test]
fn misuse_is_refused_with_what_to_do() {
    let dev = Device::Cpu;
    let ps = params(&dev);
    let mut opt = Adam::new(name_params(ps.clone()), AdamConfig::default()).unwrap();
    let mut scaler = GradScaler::new(config()).unwrap();
    let e = scaler.unscale_(&opt).unwrap_err().to_string();
    assert!(e.contains("scale(loss)"), "{e}");
    assert!(scaler.update(None).is_err());
    scaler
        .scale(&loss(&ps, 0, &dev))
        .unwrap()
        .backward()
        .unwrap();
    scaler.unscale_(&opt).unwrap();
    let e = scaler.unscale_(&opt).unwrap_err().to_string();
    assert!(e.contains("already been called"), "{e}");
    scaler.step(&mut opt).unwrap();
    let e = scaler.step(&mut opt).unwrap_err().to_string();
    assert!(e.contains("already been called"), "{e}");
    scaler.update(None).unwrap();
    // f16 gradients, as PyTorch
    let h = Parameter::new(Tensor::ones([3], DType::F16, &dev).unwrap()).unwrap();
    let mut opt16 = Adam::new(name_params(vec![h.clone()]), AdamConfig::default()).unwrap();
    scaler
        .scale(&h.tensor().sum().unwrap())
        .unwrap()
        .backward()
        .unwrap();
    let e = scaler.step(&mut opt16).unwrap_err().to_string();
    assert!(e.contains("f16 gradients"), "{e}");
    for bad in [
        GradScalerConfig {
            init_scale: 0.0,
            ..config()
        },
        GradScalerConfig {
            growth_factor: 1.0,
            ..config()
        },
        GradScalerConfig {
            backoff_factor: 1.0,
            ..config()
        },
        GradScalerConfig {
            growth_interval: 0,
            ..config()
        },
    ] {
        assert!(GradScaler::new(bad).is_err());
    }
}

#[test]
fn state_dict_round_trips_and_disabled_is_a_pass_through() {
    let dev = Device::Cpu;
    let ps = params(&dev);
    let mut opt = Adam::new(name_params(ps.clone()), AdamConfig::default()).unwrap();
    let mut scaler = GradScaler::new(config()).unwrap();
    scaler
        .scale(&loss(&ps, 1, &dev))
        .unwrap()
        .backward()
        .unwrap();
    scaler.step(&mut opt).unwrap();
    scaler.update(None).unwrap();
    let sd = scaler.state_dict().unwrap();
    assert_eq!(sd["scale"], 512.0);
    assert_eq!(sd["_growth_tracker"], 0.0);
    let mut fresh = GradScaler::new(GradScalerConfig::default()).unwrap();
    fresh.load_state_dict(&sd).unwrap();
    assert_eq!(fresh.state_dict().unwrap(), sd);
    let mut off = GradScaler::new(GradScalerConfig {
        enabled: false,
        ..config()
    })
    .unwrap();
    let l = loss(&ps, 0, &dev);
    assert_eq!(
        off.scale(&l).unwrap().item::<f32>().unwrap(),
        l.item::<f32>().unwrap()
    );
    assert_eq!(off.get_scale().unwrap(), 1.0);
}
