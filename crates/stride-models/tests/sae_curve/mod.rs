//! The SAE's loss curve on one device: what the GPU backends' tests compare with the CPU's.

use stride_core::Device;
use stride_models::{SaeConfig, SaeTrainer, TrainConfig};

/// The default SAE trained `steps` steps on `device` (f32, seed 0), the update-health check
/// every `health_every` steps; panics unless every check was healthy.
pub fn curve(device: Device, steps: usize, health_every: u64) -> Vec<f64> {
    let config = TrainConfig {
        sae: SaeConfig {
            device,
            ..SaeConfig::default()
        },
        health_every,
        ..TrainConfig::default()
    };
    let mut t = SaeTrainer::new(config).expect("trainer");
    for _ in 0..steps {
        t.step().expect("step");
    }
    assert!(
        t.health().is_healthy(),
        "{device}: {:?}",
        t.health().culprits()
    );
    t.losses().to_vec()
}
