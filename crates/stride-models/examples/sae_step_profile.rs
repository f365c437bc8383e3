//! Profiles one SAE training step (batch, forward, backward, Adam) at a chosen size: the
//! per-op table (calls, host and device time, launches), the host waits with their call
//! sites, and the wall time per step with and without reading the loss back.
//!
//! ```text
//! cargo run --release -p stride-models --example sae_step_profile -- cuda 1536 24576 64 4096
//! ```
//! Arguments: device (`cpu` or `cuda`), dims, latents, k, batch (defaults: cpu 64 512 16 256).

use std::time::Instant;
use stride_core::{cuda, debug, Device, Result};
use stride_models::sae::SaeConfig;
use stride_models::train::{SaeTrainer, TrainConfig};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let device = match args.first().map(String::as_str) {
        Some("cuda") => Device::cuda(0)?,
        _ => Device::Cpu,
    };
    let (dims, latents, k, batch) = (num(1, 64), num(2, 512), num(3, 16), num(4, 256));
    let cfg = TrainConfig {
        sae: SaeConfig {
            dims,
            latents,
            k,
            device,
            ..SaeConfig::default()
        },
        features: dims * 4,
        batch,
        health_every: 0,
        ..TrainConfig::default()
    };
    let mut t = SaeTrainer::new(cfg)?;
    t.set_loss_every(0);
    for _ in 0..3 {
        t.step()?;
    }
    let sync = |d: Device| match d {
        Device::Cuda(i) => (cuda::sync_count(i), cuda::launch_count(i)),
        Device::Wgpu(i) => (
            stride_core::webgpu::sync_count(i),
            stride_core::webgpu::launch_count(i),
        ),
        Device::Cpu => (0, 0),
    };
    let wait = |d: Device| match d {
        Device::Cuda(i) => cuda::synchronize(i),
        Device::Wgpu(i) => stride_core::webgpu::synchronize(i),
        Device::Cpu => Ok(()),
    };
    println!("SAE step on {device}: d {dims}, {latents} latents, k {k}, batch {batch}");
    let prof = debug::Profiler::start();
    let (s0, l0) = sync(device);
    t.step()?;
    let (s1, l1) = sync(device);
    let report = prof.stop()?;
    println!("{}", report.table());
    println!(
        "host waits in the step: {} (device count {}), kernel launches: {}",
        report.syncs.len(),
        s1 - s0,
        l1 - l0
    );
    for s in &report.syncs {
        println!("  wait: {} on {} at {}", s.why, s.device, s.site);
    }
    for (label, every) in [("loss not read", 0u64), ("loss read every step", 1)] {
        t.set_loss_every(every);
        wait(device)?;
        let n = 20;
        let start = Instant::now();
        for _ in 0..n {
            t.step()?;
        }
        wait(device)?;
        println!(
            "wall time per step ({label}): {:.3} ms",
            start.elapsed().as_secs_f64() * 1e3 / n as f64
        );
    }
    Ok(())
}
