//! The GPT on the wgpu backend (lavapipe in CI): the transformer's building blocks —
//! embeddings, norms, rotary or learned positions, causal attention, the mixture of
//! experts' routing — train to the CPU's curve in f32 and decode the CPU's tokens through
//! the KV cache. What is not yet WGSL runs as counted CPU round trips, so these check
//! answers, not waits (`stride check --device wgpu` and `webgpu/primitives.rs` say which).
//! Skips, saying so, without an adapter (`STRIDE_REQUIRE_WGPU=1` makes it mandatory).

use stride_core::{webgpu, DType, Device, Generator, Tensor};
use stride_models::gpt::{Corpus, Gpt, GptConfig, GptTrainConfig, GptTrainer, MoeConfig};
use stride_models::CausalLm;

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

/// f32 on both devices from the same seed: the same initialisation, windows and dropout
/// masks (Philox on both, the CPU's bits). The products and reductions sum in different
/// orders, so the curves agree to rounding amplified over the steps: 1e-4 relative, the
/// bound the CUDA test and the golden test against PyTorch use.
#[test]
fn wgpu_training_follows_the_cpu_curve() {
    let Some(dev) = webgpu::require_or_skip("wgpu_training_follows_the_cpu_curve") else {
        return;
    };
    for moe in [false, true] {
        let curve = |device: Device| {
            let mut model = GptConfig {
                dropout: 0.1,
                ..GptConfig::modern(259, 32, 2, 4, 64)
            };
            if moe {
                model = model.with_moe(MoeConfig::new(4, 2, 64));
            }
            let c = GptTrainConfig {
                model,
                batch: 4,
                accum: 1,
                steps: 8,
                warmup: 2,
                lr: 3e-3,
                min_lr: 3e-4,
                eval_batches: 1,
                device,
                ..GptTrainConfig::default()
            };
            let mut t = GptTrainer::new(c, corpus()).unwrap();
            for _ in 0..8 {
                t.step().unwrap();
            }
            let v = t.evaluate().unwrap();
            (t.read_losses().unwrap().to_vec(), v)
        };
        let (cpu, vc) = curve(Device::Cpu);
        let (gpu, vg) = curve(dev);
        assert_eq!(cpu.len(), gpu.len());
        for (i, (a, b)) in cpu.iter().zip(&gpu).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs(),
                "moe {moe}, step {i}: cpu {a} vs {dev} {b}"
            );
        }
        assert!(
            (vc - vg).abs() <= 1e-4 * vc.abs(),
            "moe {moe}, validation: cpu {vc} vs {dev} {vg}"
        );
    }
}

/// Greedy decoding through the KV cache, with a left-padded row in the batch: the CPU's
/// tokens, and logits within the curve test's 1e-4 of the largest.
#[test]
fn wgpu_decoding_gives_the_cpus_tokens() {
    let Some(dev) = webgpu::require_or_skip("wgpu_decoding_gives_the_cpus_tokens") else {
        return;
    };
    for c in [
        GptConfig::modern(259, 32, 2, 4, 64),
        GptConfig::gpt2(259, 32, 2, 4, 64),
        GptConfig::modern(259, 32, 2, 4, 64).with_moe(MoeConfig::new(8, 2, 64)),
    ] {
        let decode = |device: Device| {
            let m = Gpt::new(c.clone(), DType::F32, &device, &Generator::new(0)).unwrap();
            let mut cache = m.new_cache(&[2, 0], 16).unwrap();
            let prompt = Tensor::from_vec(vec![0i64, 0, 40, 41, 42, 43, 44, 45], [2, 4])
                .unwrap()
                .to_device(&device)
                .unwrap();
            let mut logits = vec![];
            let mut tokens = vec![];
            let l = CausalLm::forward(&m, &prompt, &mut cache).unwrap();
            let mut last = l.select(1, 3).unwrap();
            for _ in 0..4 {
                let next = last.argmax(Some(-1), true).unwrap();
                logits.extend(last.to_vec::<f32>().unwrap());
                tokens.extend(next.to_vec::<i64>().unwrap());
                let l = CausalLm::forward(&m, &next, &mut cache).unwrap();
                last = l.select(1, 0).unwrap();
            }
            (tokens, logits)
        };
        let (tc, lc) = decode(Device::Cpu);
        let (tg, lg) = decode(dev);
        let scale = lc.iter().fold(0f32, |m, x| m.max(x.abs()));
        let worst = lc
            .iter()
            .zip(&lg)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= 1e-4 * scale,
            "{c:?}: logits differ by {worst} (largest {scale})"
        );
        assert_eq!(tc, tg, "{c:?}: greedy tokens");
    }
}
