//! `stride train sae --device wgpu` gives the CPU's loss curve: the same seed, f32, on both
//! devices (the same random batches: the Philox stream is shared; the non-contiguous tied
//! encoder weight on both). Skips, saying so, without a wgpu adapter (CI runs it on Mesa's
//! lavapipe; `STRIDE_REQUIRE_WGPU=1` makes it mandatory).

use stride_core::{webgpu, Device};

mod sae_curve;
use sae_curve::curve;

#[test]
fn wgpu_training_follows_the_cpu_curve() {
    let Some(device) = webgpu::require_or_skip("wgpu_training_follows_the_cpu_curve") else {
        return;
    };
    let steps = 60;
    let cpu = curve(Device::Cpu, steps, 20);
    let gpu = curve(device, steps, 20);
    let same = cpu
        .iter()
        .zip(&gpu)
        .filter(|(a, b)| a.to_bits() == b.to_bits())
        .count();
    let worst = cpu
        .iter()
        .zip(&gpu)
        .map(|(a, b)| (a - b).abs() / a.abs().max(1e-12))
        .fold(0.0f64, f64::max);
    println!(
        "SAE loss curve, cpu vs {device} over {steps} steps: {same} of {steps} losses bit for \
         bit, largest relative difference {worst:.2e}"
    );
    // the products sum in k order, not as the CPU's gemm groups them (the reductions still
    // run on the CPU), so the curves agree to rounding: 59 of 60 losses bit for bit on
    // lavapipe when this was written; they may drift by rounding, never apart
    assert!(worst < 2e-2, "the curves diverge: {worst:.2e}");
    assert!(gpu[steps - 1] < gpu[0], "the wgpu run did not learn");
}
