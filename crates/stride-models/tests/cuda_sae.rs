//! `stride train sae --device cuda` gives the CPU's loss curve: the same seed, f32, 300 steps
//! on both devices (the same random batches, since the Philox stream is shared; the
//! non-contiguous tied encoder weight on both). Skips, saying so, without a GPU.

use stride_core::{cuda, Device};
use stride_models::TrainConfig;

mod sae_curve;
use sae_curve::curve;

#[test]
fn cuda_training_follows_the_cpu_curve() {
    let Some(device) = cuda::require_or_skip("cuda_training_follows_the_cpu_curve") else {
        return;
    };
    let steps = 300;
    let cpu = curve(Device::Cpu, steps, TrainConfig::default().health_every);
    let gpu = curve(device, steps, TrainConfig::default().health_every);
    let mut worst = (0usize, 0.0f64);
    for (i, (a, b)) in cpu.iter().zip(&gpu).enumerate() {
        let rel = (a - b).abs() / a.abs().max(1e-12);
        if rel > worst.1 {
            worst = (i, rel);
        }
    }
    println!(
        "SAE loss curve, cpu vs cuda over {steps} steps: first {:.6} / {:.6}, last {:.6} / {:.6}, largest relative difference {:.2e} at step {}",
        cpu[0], gpu[0], cpu[steps - 1], gpu[steps - 1], worst.1, worst.0
    );
    // float sums group differently on the two devices (matmul, reductions), so the curves
    // agree to rounding at first and may drift apart slowly; they must stay close throughout
    assert!(worst.1 < 2e-2, "the curves diverge: {worst:?}");
    assert!(cpu[steps - 1] < cpu[0], "the CPU run did not learn");
    assert!(gpu[steps - 1] < gpu[0], "the CUDA run did not learn");
}
