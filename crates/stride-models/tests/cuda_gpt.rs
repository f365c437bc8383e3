//! The GPT on CUDA: a training step (forward, backward, clipping, AdamW) under bf16 autocast
//! queues its work without one host wait — the mixture of experts too, its routing, sort
//! and grouped products on the device; an f32 run follows the CPU's curve. Skips, saying
//! so, without a GPU.

use stride_core::{cuda, debug::forbid_sync, DType, Device};
use stride_models::gpt::{Corpus, GptConfig, GptTrainConfig, GptTrainer, MoeConfig};

fn corpus() -> Corpus {
    let text: Vec<i64> = b"KING. What say you, my lord? LORD. Nothing, my liege. "
        .repeat(40)
        .iter()
        .map(|&b| 3 + b as i64)
        .collect();
    Corpus {
        train: text.clone(),
        val: text,
    }
}

fn config(device: Device) -> GptTrainConfig {
    GptTrainConfig {
        model: GptConfig {
            dropout: 0.1,
            ..GptConfig::modern(259, 32, 2, 4, 64)
        },
        batch: 8,
        accum: 2,
        steps: 30,
        warmup: 5,
        lr: 3e-3,
        min_lr: 3e-4,
        eval_batches: 2,
        device,
        ..GptTrainConfig::default()
    }
}

#[test]
fn a_training_step_waits_for_nothing() {
    let Some(dev) = cuda::require_or_skip("a_training_step_waits_for_nothing") else {
        return;
    };
    for style in ["modern", "gpt2", "moe", "moe_capacity"] {
        let mut c = config(dev);
        if style == "gpt2" {
            c.model = GptConfig {
                dropout: 0.1,
                ..GptConfig::gpt2(259, 32, 2, 4, 64)
            };
        }
        if style.starts_with("moe") {
            let mut m = MoeConfig::new(8, 2, 64);
            m.capacity_factor = (style == "moe_capacity").then_some(1.0);
            c.model = c.model.clone().with_moe(m);
        }
        c.autocast = Some(DType::BF16);
        let mut t = GptTrainer::new(c, corpus()).unwrap();
        t.set_loss_every(0);
        t.step().unwrap(); // first step: kernels compiled, optimizer state allocated
        {
            let _guard = forbid_sync();
            for _ in 0..5 {
                t.step().unwrap();
            }
        }
        let losses = t.read_losses().unwrap().to_vec();
        assert_eq!(losses.len(), 6);
        assert!(losses.iter().all(|l| l.is_finite()), "{style}: {losses:?}");
        assert!(losses[5] < losses[0], "{style}: {losses:?}");
        // the expert-load counters, read where the loss is read: every (token, choice) pair
        // of the six steps (two micro-batches of 8 × 32 tokens, top-2) in each block
        let load = t.model().take_expert_load().unwrap();
        if style.starts_with("moe") {
            assert_eq!(load.len(), 2);
            for block in &load {
                let total: i64 = block.iter().sum();
                match style {
                    "moe" => assert_eq!(total, 6 * 2 * 8 * 32 * 2, "{block:?}"),
                    _ => assert!(total > 0 && total <= 6 * 2 * 8 * 32 * 2, "{block:?}"),
                }
            }
        } else {
            assert!(load.is_empty());
        }
    }
}

/// f32 on both devices from the same seed: the same initialisation, windows and dropout
/// masks (counter-based Philox on both). The matrix products sum in different orders, so
/// the curves agree to rounding amplified over 30 steps: 1e-4 relative, the golden test's
/// bound against PyTorch.
#[test]
fn cuda_training_follows_the_cpu_curve() {
    let Some(dev) = cuda::require_or_skip("cuda_training_follows_the_cpu_curve") else {
        return;
    };
    let curve = |d: Device| {
        let mut t = GptTrainer::new(config(d), corpus()).unwrap();
        for _ in 0..30 {
            t.step().unwrap();
        }
        let v = t.evaluate().unwrap();
        (t.read_losses().unwrap().to_vec(), v)
    };
    let (cpu, vc) = curve(Device::Cpu);
    let (gpu, vg) = curve(dev);
    for (i, (a, b)) in cpu.iter().zip(&gpu).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * a.abs(),
            "step {i}: cpu {a} vs cuda {b}"
        );
    }
    assert!(
        (vc - vg).abs() <= 1e-4 * vc.abs(),
        "validation: cpu {vc} vs cuda {vg}"
    );
}

/// Decoding through the KV cache queues its work without a host wait too: the mask, the
/// rotary rows and (GPT-2 style) the learned positions of each row are made on the device,
/// with a left-padded row in the batch.
#[test]
fn a_decoding_step_waits_for_nothing() {
    let Some(dev) = cuda::require_or_skip("a_decoding_step_waits_for_nothing") else {
        return;
    };
    use stride_core::{Generator, Tensor};
    use stride_models::gpt::Gpt;
    use stride_models::CausalLm;
    for c in [
        GptConfig::modern(259, 32, 2, 4, 64),
        GptConfig::gpt2(259, 32, 2, 4, 64),
        GptConfig::modern(259, 32, 2, 4, 64).with_moe(MoeConfig::new(8, 2, 64)),
    ] {
        let m = Gpt::new(c, DType::F32, &dev, &Generator::new(0)).unwrap();
        let mut cache = m.new_cache(&[2, 0], 16).unwrap();
        let prompt = Tensor::from_vec(vec![0i64, 0, 40, 41, 42, 43, 44, 45], [2, 4])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let logits = CausalLm::forward(&m, &prompt, &mut cache).unwrap();
        let mut next = logits.select(1, 3).unwrap().argmax(Some(-1), true).unwrap();
        {
            let _guard = forbid_sync();
            for _ in 0..3 {
                let l = CausalLm::forward(&m, &next, &mut cache).unwrap();
                next = l.select(1, 0).unwrap().argmax(Some(-1), true).unwrap();
            }
        }
        assert_eq!(next.shape(), &[2, 1]);
        assert!(next
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .all(|&t| (0..259).contains(&t)));
    }
}
