//! The TopK sparse autoencoder trains the same whatever its encoder's layout, learns well
//! below its plateau, resumes from a checkpoint on the same curve bit for bit, and the
//! update-health check names a frozen encoder.

use stride_core::{DType, Device, Tensor};
use stride_models::sae::SaeConfig;
use stride_models::train::{SaeTrainer, TrainConfig};
use stride_nn::optim::IssueKind;
use stride_nn::Module;

/// Small enough for CI: a few hundred steps in well under a second each.
fn tiny(seed: u64) -> TrainConfig {
    TrainConfig {
        sae: SaeConfig {
            dims: 16,
            latents: 64,
            k: 4,
            ..SaeConfig::default()
        },
        features: 32,
        feature_prob: 0.05,
        batch: 64,
        lr: 1e-2,
        seed,
        health_every: 10,
    }
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

#[test]
fn transposed_encoder_trains_like_a_contiguous_one() {
    let steps = 150;
    let mut strided = SaeTrainer::new(tiny(3)).unwrap();
    let mut contiguous = SaeTrainer::new(TrainConfig {
        sae: SaeConfig {
            contiguous_encoder: true,
            ..tiny(3).sae
        },
        ..tiny(3)
    })
    .unwrap();
    let enc = |t: &SaeTrainer| t.model().encoder.weight.tensor();
    assert!(!enc(&strided).is_contiguous());
    assert_eq!(enc(&strided).stride(), &[1, 64]);
    assert!(enc(&contiguous).is_contiguous());
    assert_eq!(
        values(&enc(&strided)),
        values(&enc(&contiguous)),
        "same initial values"
    );

    for step in 0..steps {
        let before = values(&enc(&strided));
        let a = strided.step().unwrap().loss.unwrap();
        let b = contiguous.step().unwrap().loss.unwrap();
        let after = values(&enc(&strided));
        // the MPS bug's symptom: a transposed weight that Adam never moves
        assert!(
            before.iter().zip(&after).any(|(x, y)| x != y),
            "step {step}: the non-contiguous encoder weight did not change"
        );
        // equal to f32 rounding (matmul may round the two layouts an ulp apart)
        let rel = (a - b).abs() / a.abs().max(b.abs());
        assert!(
            rel <= 1e-5,
            "step {step}: loss {a} (strided) vs {b} (contiguous)"
        );
    }
    // the weight kept its strides through every in-place update
    assert_eq!(enc(&strided).stride(), &[1, 64]);
    assert!(strided.health().is_healthy() && contiguous.health().is_healthy());
}

#[test]
fn loss_falls_well_below_the_plateau() {
    let mut t = SaeTrainer::new(tiny(0)).unwrap();
    for _ in 0..400 {
        t.step().unwrap();
    }
    let e = t.evaluate(1024).unwrap();
    let l = t.losses();
    let final_loss = l[l.len() - 20..].iter().sum::<f64>() / 20.0;
    // the plateau: the loss of the best constant predictor (the mean sample)
    assert!(
        final_loss < 0.3 * e.baseline,
        "final training loss {final_loss} vs plateau {}",
        e.baseline
    );
    assert!(
        final_loss < 0.3 * l[0],
        "initial {} final {final_loss}",
        l[0]
    );
    assert!(e.mse < 0.3 * e.baseline && e.fve > 0.7, "{e:?}");
    assert!(t.health().is_healthy() && t.health().checks == 40);
}

#[test]
fn a_resumed_run_continues_the_same_curve_bit_for_bit() {
    let n = 40;
    let dir = std::env::temp_dir().join(format!("stride-sae-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");

    let mut straight = SaeTrainer::new(tiny(5)).unwrap();
    for _ in 0..2 * n {
        straight.step().unwrap();
    }

    let mut first = SaeTrainer::new(tiny(5)).unwrap();
    for _ in 0..n {
        first.step().unwrap();
    }
    first.save(&path).unwrap();
    drop(first);
    let mut resumed = SaeTrainer::resume(&path, Device::Cpu).unwrap();
    assert_eq!(resumed.steps_done(), n);
    assert_eq!(resumed.config(), straight.config());
    // the encoder comes back with its transposed strides (loaded into the model's own layout)
    assert!(!resumed.model().encoder.weight.tensor().is_contiguous());
    for _ in 0..n {
        resumed.step().unwrap();
    }
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(resumed.losses()), bits(straight.losses()));
    for ((name, a), (_, b)) in straight
        .model()
        .named_parameters()
        .into_iter()
        .zip(resumed.model().named_parameters())
    {
        let (a, b) = (values(&a.tensor()), values(&b.tensor()));
        assert_eq!(bits(&a), bits(&b), "{name}");
    }
    assert_eq!(resumed.health(), straight.health());
    assert_eq!(
        resumed.dead_latents(20).unwrap(),
        straight.dead_latents(20).unwrap()
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn update_health_names_a_frozen_encoder() {
    let cfg = TrainConfig {
        health_every: 1,
        ..tiny(1)
    };
    let mut healthy = SaeTrainer::new(cfg.clone()).unwrap();
    for _ in 0..10 {
        let r = healthy.step().unwrap();
        let h = r.health.expect("checked every step");
        assert!(h.is_healthy(), "{h}");
        assert_eq!(h.checked, 4);
    }
    assert_eq!(healthy.health().checks, 10);

    let mut frozen = SaeTrainer::new(cfg).unwrap();
    frozen
        .optimizer_mut()
        .inject_dropped_update("encoder.weight");
    let before = values(&frozen.model().encoder.weight.tensor());
    for _ in 0..5 {
        frozen.step().unwrap();
    }
    assert_eq!(values(&frozen.model().encoder.weight.tensor()), before);
    assert_eq!(frozen.health().culprits(), ["encoder.weight"]);
    assert_eq!(frozen.health().issues.len(), 5);
    let (step, issue) = &frozen.health().issues[0];
    assert_eq!(*step, 0);
    assert!(matches!(issue.kind, IssueKind::Unchanged { grad_abs_max } if grad_abs_max > 0.0));
    assert!(issue.to_string().starts_with("encoder.weight: |grad| max"));
}

#[test]
fn other_dtypes_train() {
    for dtype in [DType::F64, DType::BF16] {
        let mut t = SaeTrainer::new(TrainConfig {
            sae: SaeConfig {
                dtype,
                ..tiny(2).sae
            },
            ..tiny(2)
        })
        .unwrap();
        for _ in 0..100 {
            t.step().unwrap();
        }
        assert_eq!(t.model().encoder.weight.tensor().dtype(), dtype);
        let l = t.losses();
        assert!(l[99] < 0.6 * l[0], "{dtype}: {} -> {}", l[0], l[99]);
        assert!(t.health().is_healthy(), "{dtype}: {:?}", t.health());
    }
}

#[test]
fn bad_configurations_and_files_are_errors() {
    let bad = |f: fn(&mut TrainConfig)| {
        let mut c = tiny(0);
        f(&mut c);
        SaeTrainer::new(c).err().expect("an error").to_string()
    };
    assert!(bad(|c| c.sae.k = 65).contains("k must be between 1"));
    assert!(bad(|c| c.sae.k = 0).contains("k must be between 1"));
    assert!(bad(|c| c.batch = 0).contains("batch"));
    assert!(bad(|c| c.lr = -1.0).contains("learning rate"));
    assert!(bad(|c| c.feature_prob = 1.5).contains("probability"));
    assert!(bad(|c| c.sae.dtype = DType::I64).contains("floating-point"));
    assert!(bad(|c| c.sae.device = Device::Cuda(999)).contains("cuda:999"));

    let dir = std::env::temp_dir().join(format!("stride-sae-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.safetensors");
    std::fs::write(&junk, b"not a safetensors file").unwrap();
    assert!(SaeTrainer::resume(&junk, Device::Cpu).is_err());
    assert!(SaeTrainer::resume(dir.join("missing.safetensors"), Device::Cpu).is_err());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn forward_rejects_a_wrong_width() {
    let t = SaeTrainer::new(tiny(0)).unwrap();
    let x = Tensor::zeros([3, 5], DType::F32, &Device::Cpu).unwrap();
    let e = t.model().forward(&x).unwrap_err().to_string();
    assert!(e.contains("(batch, 16)"), "{e}");
}

/// A training step (batch, forward with TopK and its scatter, backward, Adam) makes no host
/// wait when the trainer does not read the loss back: proved under `forbid_sync` on the CPU
/// (which reports the waits a GPU would make) and, where there is one, on the GPU with the
/// device's own count of waits.
#[test]
fn a_training_step_makes_no_host_wait_unless_the_loss_is_read() {
    let mut devices = vec![Device::Cpu];
    if let Some(g) = stride_core::cuda::require_or_skip(
        "a_training_step_makes_no_host_wait_unless_the_loss_is_read (cuda half)",
    ) {
        devices.push(g);
    }
    for device in devices {
        let mut cfg = tiny(3);
        cfg.sae.device = device;
        cfg.health_every = 0;
        let mut t = SaeTrainer::new(cfg.clone()).unwrap();
        t.set_loss_every(0);
        t.step().unwrap();
        let waits = stride_core::cuda::sync_count(0);
        {
            let _g = stride_core::debug::forbid_sync();
            for _ in 0..3 {
                let r = t.step().unwrap_or_else(|e| panic!("{device}: {e}"));
                assert!(r.loss.is_none());
            }
        }
        if !device.is_cpu() {
            assert_eq!(
                stride_core::cuda::sync_count(0),
                waits,
                "{device}: waits in a step"
            );
        }
        // the unread losses are read together, and the curve is the one that reads each step
        let unread = t.read_losses().unwrap().to_vec();
        let mut each = SaeTrainer::new(cfg).unwrap();
        for _ in 0..4 {
            assert!(each.step().unwrap().loss.is_some());
        }
        assert_eq!(unread, each.losses(), "{device}");
        // reading every 2nd step
        let mut t = SaeTrainer::new(tiny(3)).unwrap();
        t.set_loss_every(2);
        let read: Vec<bool> = (0..4).map(|_| t.step().unwrap().loss.is_some()).collect();
        assert_eq!(read, [true, false, true, false]);
        assert_eq!(t.losses().len(), 3);
    }
}
