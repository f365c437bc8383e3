//! The first training step in a fresh process: what a cold kernel cache costs.
//!
//! Times, on one device, (1) one step of a small MLP (forward, MSE loss, backward, AdamW),
//! then (2) one step of the SAE trainer (at the d = 384 size of the benchmarks), each read
//! back, and prints how many kernel modules NVRTC compiled and how many came from the disk
//! cache meanwhile. Run it with an empty `STRIDE_KERNEL_CACHE` for the cold figures, and again
//! after `stride cuda warmup` for the warm ones.
//!
//! ```text
//! STRIDE_KERNEL_CACHE=$(mktemp -d) cargo run --release -p stride-models --example cold_start -- cuda
//! ```

use std::time::Instant;
use stride_core::{cuda, DType, Device, Result, Tensor};
use stride_models::sae::SaeConfig;
use stride_models::train::{SaeTrainer, TrainConfig};
use stride_nn::optim::{Adam, AdamConfig, Optimizer};
use stride_nn::{loss, mlp, Activation, Factory, Module};

fn wait(d: Device) -> Result<()> {
    match d {
        Device::Cuda(i) => cuda::synchronize(i),
        Device::Wgpu(i) => stride_core::webgpu::synchronize(i),
        Device::Cpu => Ok(()),
    }
}

/// Runs `f`, waits for the device, and prints its wall time and the kernel modules it needed.
fn timed(label: &str, device: Device, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let (c0, h0) = cuda::kernel_cache_stats();
    let t = Instant::now();
    f()?;
    wait(device)?;
    let (c1, h1) = cuda::kernel_cache_stats();
    println!(
        "{label}: {:.3} s (kernel modules compiled {}, loaded from the disk cache {})",
        t.elapsed().as_secs_f64(),
        c1 - c0,
        h1 - h0
    );
    Ok(())
}

fn main() -> Result<()> {
    let device = match std::env::args().nth(1).as_deref() {
        Some("cuda") => Device::cuda(0)?,
        _ => Device::Cpu,
    };
    println!(
        "first steps on {device}, kernel cache {:?}",
        cuda::kernel_cache_dir()
    );
    timed("device start", device, || {
        Tensor::zeros([1], DType::F32, &device).map(drop)
    })?;
    // each first step includes building the model (its initialisers run kernels too)
    let f = Factory {
        device,
        ..Factory::default()
    };
    let x = Tensor::randn([128, 64], DType::F32, &device, None)?;
    let y = Tensor::randn([128, 10], DType::F32, &device, None)?;
    let mut state = None;
    let mut mlp_step = || -> Result<()> {
        if state.is_none() {
            let model = mlp(&[64, 256, 256, 10], Activation::Gelu, &f)?;
            let opt = Adam::new(model.named_parameters(), AdamConfig::adamw())?;
            state = Some((model, opt));
        }
        let (model, opt) = state.as_mut().expect("built above");
        opt.zero_grad()?;
        let l = loss::mse_loss(&model.forward(&x)?, &y, loss::Reduction::Mean)?;
        l.backward()?;
        opt.step()
    };
    timed(
        "MLP [64, 256, 256, 10]: build + first step",
        device,
        &mut mlp_step,
    )?;
    timed("MLP second step", device, &mut mlp_step)?;
    let cfg = TrainConfig {
        sae: SaeConfig {
            dims: 384,
            latents: 1536,
            k: 32,
            device,
            ..SaeConfig::default()
        },
        features: 384 * 4,
        batch: 4096,
        health_every: 0,
        ..TrainConfig::default()
    };
    let mut trainer = None;
    timed("SAE d 384: build + first step", device, || {
        let mut t = SaeTrainer::new(cfg)?;
        t.step()?;
        trainer = Some(t);
        Ok(())
    })?;
    let mut t = trainer.expect("built above");
    timed("SAE second step", device, || t.step().map(drop))?;
    Ok(())
}
