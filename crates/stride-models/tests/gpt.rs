//! The GPT of `stride train gpt`: configuration checks, parameter names, causality, the KV
//! cache against the whole-sequence forward, gradients against finite differences (f64),
//! the data split and windows, the schedule, and checkpoints that resume on the same curve.

use stride_core::{autograd::no_grad, DType, Device, Generator, Tensor};
use stride_models::gpt::{
    split_by_work, Corpus, Gpt, GptConfig, GptTrainConfig, GptTrainer, Mlp, MoeConfig, Norm,
    Positions, TokenStream, VALIDATION_WORKS,
};
use stride_models::hub::{SHAKESPEARE_BYTES, SHAKESPEARE_WORKS};
use stride_models::{CausalLm, KvCache};
use stride_nn::Module;

fn tiny(style: &str) -> GptConfig {
    match style {
        "modern" => GptConfig::modern(40, 12, 2, 2, 8),
        "moe" => GptConfig::modern(40, 12, 2, 2, 8).with_moe(MoeConfig::new(4, 2, 16)),
        _ => GptConfig::gpt2(40, 12, 2, 2, 8),
    }
}

fn model(c: GptConfig, dtype: DType) -> Gpt {
    Gpt::new(c, dtype, &Device::Cpu, &Generator::new(7)).unwrap()
}

fn ids(v: &[i64], b: usize) -> Tensor {
    Tensor::from_vec(v.to_vec(), [b, v.len() / b]).unwrap()
}

#[test]
fn config_errors_name_the_field() {
    let ok = tiny("modern");
    ok.validate().unwrap();
    let cases: Vec<(GptConfig, &str)> = vec![
        (
            GptConfig {
                n_layers: 0,
                ..ok.clone()
            },
            "n_layers",
        ),
        (
            GptConfig {
                dim: 9,
                ..ok.clone()
            },
            "multiple of n_heads",
        ),
        (
            GptConfig {
                dim: 6,
                n_heads: 2,
                ..ok.clone()
            },
            "even head dim",
        ),
        (
            GptConfig {
                dropout: 1.0,
                ..ok.clone()
            },
            "dropout",
        ),
        (
            GptConfig {
                norm_eps: 0.0,
                ..ok.clone()
            },
            "norm_eps",
        ),
        (
            GptConfig {
                vocab_size: usize::MAX / 2,
                ..ok.clone()
            },
            "too large",
        ),
        (
            GptConfig {
                positions: Positions::Rotary { base: f64::NAN },
                ..ok.clone()
            },
            "rotary base",
        ),
        (
            ok.clone().with_moe(MoeConfig::new(4, 5, 8)),
            "top_k must be in 1..=4",
        ),
        (
            ok.clone().with_moe(MoeConfig::new(0, 1, 8)),
            "experts must be",
        ),
        (tiny("gpt2").with_moe(MoeConfig::new(4, 2, 8)), "SwiGLU"),
        (
            ok.clone().with_moe(MoeConfig {
                capacity_factor: Some(0.0),
                ..MoeConfig::new(4, 2, 8)
            }),
            "capacity factor",
        ),
        (
            ok.clone()
                .with_moe(MoeConfig::new(65_535, 2, usize::MAX / 4)),
            "too large",
        ),
    ];
    for (c, want) in cases {
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains(want), "{want}: {e}");
        assert!(Gpt::new(c, DType::F32, &Device::Cpu, &Generator::new(0)).is_err());
    }
    // the metadata round trip keeps every field
    for c in [
        tiny("modern"),
        tiny("gpt2"),
        tiny("moe"),
        tiny("moe").with_moe(MoeConfig {
            capacity_factor: Some(1.25),
            ..MoeConfig::new(8, 1, 24)
        }),
        GptConfig {
            dropout: 0.25,
            ..tiny("gpt2")
        },
    ] {
        assert_eq!(GptConfig::from_meta(&c.to_meta()).unwrap(), c);
    }
}

#[test]
fn parameter_names_and_counts() {
    let m = model(tiny("modern"), DType::F32);
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names[..7],
        [
            "tok_emb.weight",
            "blocks.0.attn_norm.weight",
            "blocks.0.attn.qkv.weight",
            "blocks.0.attn.proj.weight",
            "blocks.0.mlp_norm.weight",
            "blocks.0.mlp.gate.weight",
            "blocks.0.mlp.up.weight",
        ]
    );
    assert_eq!(names.last().unwrap(), "norm.weight");
    let (v, d, f, l) = (40, 8, 64, 2); // ffn: ⅔·4·8 rounded up to 64
    assert_eq!(m.config().ffn_dim, f);
    assert_eq!(
        m.num_parameters(),
        v * d + l * (2 * d + 4 * d * d + 3 * d * f) + d
    );

    let g = model(tiny("gpt2"), DType::F32);
    let names: Vec<String> = g.named_parameters().into_iter().map(|(n, _)| n).collect();
    for n in [
        "pos_emb.weight",
        "blocks.1.mlp.fc.bias",
        "blocks.1.attn_norm.bias",
        "norm.bias",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
    let (c, f) = (12, 32);
    let per_block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d);
    assert_eq!(g.num_parameters(), v * d + c * d + l * per_block + 2 * d);
    let untied = model(
        GptConfig {
            tied_embeddings: false,
            ..tiny("gpt2")
        },
        DType::F32,
    );
    assert_eq!(untied.num_parameters(), g.num_parameters() + v * d + v);
}

#[test]
fn a_position_never_sees_later_tokens() {
    for style in ["modern", "gpt2"] {
        let m = model(tiny(style), DType::F64);
        let a = ids(&[1, 5, 9, 2, 7, 3, 3, 8], 1);
        let b = ids(&[1, 5, 9, 2, 30, 31, 32, 33], 1);
        let la = Module::forward(&m, &a)
            .unwrap()
            .narrow(1, 0, 4)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        let lb = Module::forward(&m, &b)
            .unwrap()
            .narrow(1, 0, 4)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert_eq!(la, lb, "{style}");
        let full_a = Module::forward(&m, &a).unwrap().to_vec::<f64>().unwrap();
        let full_b = Module::forward(&m, &b).unwrap().to_vec::<f64>().unwrap();
        assert_ne!(
            full_a, full_b,
            "{style}: later positions must see their tokens"
        );
    }
}

#[test]
fn cached_decoding_equals_the_whole_sequence() {
    for style in ["modern", "gpt2", "moe"] {
        let m = model(tiny(style), DType::F64);
        let seq = [4i64, 8, 15, 16, 23, 42 % 40, 1, 2, 3, 5];
        let whole = Module::forward(&m, &ids(&seq, 1)).unwrap();
        let mut cache = m.new_cache(&[0], 12).unwrap();
        let mut parts = vec![];
        for (a, b) in [(0, 4), (4, 5), (5, 10)] {
            parts.push(CausalLm::forward(&m, &ids(&seq[a..b], 1), &mut cache).unwrap());
        }
        assert_eq!(cache.len(), 10);
        let refs: Vec<&Tensor> = parts.iter().collect();
        let got = Tensor::cat(&refs, 1).unwrap().to_vec::<f32>().unwrap();
        let want = whole.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        // f64 throughout, rounded once to f32 at the end: the paths differ by f64 rounding
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{style}: {g} vs {w}"
            );
        }
        // a left-padded row gives its real tokens' logits
        let mut cache = m.new_cache(&[3, 0], 12).unwrap();
        let batch =
            Tensor::from_vec(vec![0i64, 0, 0, 4, 8, 15, 4, 8, 15, 16, 23, 2], [2, 6]).unwrap();
        let out = CausalLm::forward(&m, &batch, &mut cache).unwrap();
        let row0 = out
            .select(0, 0)
            .unwrap()
            .narrow(0, 3, 3)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let alone = Module::forward(&m, &ids(&[4, 8, 15], 1)).unwrap();
        let alone = alone.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        for (g, w) in row0.iter().zip(&alone) {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{style} padded: {g} vs {w}"
            );
        }
        // beyond the context: an error, not a panic
        let mut cache = m.new_cache(&[0], 12).unwrap();
        assert!(m.new_cache(&[0], 13).is_err());
        CausalLm::forward(&m, &ids(&[1; 10], 1), &mut cache).unwrap();
        assert!(CausalLm::forward(&m, &ids(&[1; 3], 1), &mut cache).is_err());
        assert!(Module::forward(&m, &ids(&[1; 13], 1)).is_err());
    }
}

/// Every parameter's gradient against central differences of the f64 loss. The loss is a
/// smooth function of the parameters; with step h the difference quotient's error is
/// O(h²·f''') ≈ 1e-9 here, far below the 1e-6 relative tolerance, while a gradient that
/// misses a path (a tied table's output use, a residual branch) is off by O(1).
#[test]
fn gradients_match_finite_differences() {
    // the mixture of experts' loss has its router losses too
    for style in ["modern", "gpt2", "moe"] {
        let m = model(tiny(style), DType::F64);
        let x = ids(&[1, 5, 9, 2, 7, 3, 11, 4], 2);
        let y = ids(&[5, 9, 2, 7, 3, 11, 4, 0], 2);
        let loss = m.loss(&x, &y).unwrap();
        loss.backward().unwrap();
        let h = 1e-5;
        for (name, p) in m.named_parameters() {
            let t = p.tensor();
            let g = p.grad().unwrap().to_vec::<f64>().unwrap();
            let n = t.numel();
            // three entries per parameter, spread over it
            for i in [0, n / 2, n - 1] {
                let flat = t.reshape(&[-1]).unwrap();
                let _ng = no_grad();
                let orig = flat.select(0, i as i64).unwrap().item::<f64>().unwrap();
                let at = |v: f64| {
                    flat.narrow(0, i as i64, 1).unwrap().fill_(v).unwrap();
                    m.loss(&x, &y).unwrap().item::<f64>().unwrap()
                };
                let fd = (at(orig + h) - at(orig - h)) / (2.0 * h);
                at(orig);
                let tol = 1e-6 * fd.abs().max(g[i].abs()).max(1e-3);
                assert!(
                    (fd - g[i]).abs() <= tol,
                    "{style} {name}[{i}]: autograd {} vs finite differences {fd}",
                    g[i]
                );
            }
        }
    }
}

#[test]
fn the_text_splits_by_whole_works() {
    let total: usize = SHAKESPEARE_WORKS.iter().map(|w| w.1).sum();
    assert_eq!(total as u64, SHAKESPEARE_BYTES);
    let text: Vec<u8> = SHAKESPEARE_WORKS
        .iter()
        .enumerate()
        .flat_map(|(i, &(_, n))| std::iter::repeat_n(b'a' + (i % 26) as u8, n))
        .collect();
    let (train, val) = split_by_work(&text).unwrap();
    assert_eq!(train.len() + val.len(), 42);
    assert_eq!(val.len(), VALIDATION_WORKS.len());
    let val_bytes: usize = val.iter().map(|w| w.len()).sum();
    let want: usize = SHAKESPEARE_WORKS
        .iter()
        .filter(|w| VALIDATION_WORKS.contains(&w.0))
        .map(|w| w.1)
        .sum();
    assert_eq!(val_bytes, want);
    assert_eq!(val_bytes, 392_245);
    // each held-out work is one run of a single letter: whole works, nothing else
    for w in &val {
        assert!(w.iter().all(|&b| b == w[0]));
    }
    let e = split_by_work(&text[1..]).unwrap_err().to_string();
    assert!(e.contains("5057198"), "{e}");
}

#[test]
fn windows_are_seeded_and_shifted() {
    let s = TokenStream::new((100..1100).collect(), &Device::Cpu).unwrap();
    let (x, y) = s.batch(16, 32, &Generator::new(3)).unwrap();
    let (x2, _) = s.batch(16, 32, &Generator::new(3)).unwrap();
    assert_eq!(x.shape(), &[16, 32]);
    let (xv, yv) = (x.to_vec::<i64>().unwrap(), y.to_vec::<i64>().unwrap());
    assert_eq!(xv, x2.to_vec::<i64>().unwrap());
    assert!(xv.iter().zip(&yv).all(|(a, b)| b - a == 1));
    assert!(xv.iter().all(|&v| (100..1099).contains(&v)));
    for row in xv.chunks(32) {
        assert!(row.windows(2).all(|w| w[1] - w[0] == 1));
    }
    assert!(s.batch(1, 1000, &Generator::new(0)).is_err());
}

fn small_run() -> (GptTrainConfig, Corpus) {
    let c = GptTrainConfig {
        model: GptConfig {
            dropout: 0.1,
            ..GptConfig::modern(259, 16, 1, 2, 16)
        },
        batch: 4,
        accum: 2,
        steps: 12,
        warmup: 3,
        lr: 1e-2,
        min_lr: 1e-3,
        eval_batches: 2,
        ..GptTrainConfig::default()
    };
    let text: Vec<i64> = b"Enter HAMLET. To be, or not to be, that is the question. "
        .repeat(8)
        .iter()
        .map(|&b| 3 + b as i64)
        .collect();
    (
        c,
        Corpus {
            train: text.clone(),
            val: text,
        },
    )
}

#[test]
fn a_resumed_run_continues_the_same_curve() {
    let (c, corpus) = small_run();
    let mut a = GptTrainer::new(
        c.clone(),
        Corpus {
            train: corpus.train.clone(),
            val: corpus.val.clone(),
        },
    )
    .unwrap();
    for _ in 0..5 {
        a.step().unwrap();
    }
    a.evaluate().unwrap();
    let path = std::env::temp_dir().join(format!(
        "stride-gpt-resume-{}.safetensors",
        std::process::id()
    ));
    a.save(&path).unwrap();
    for _ in 5..12 {
        a.step().unwrap();
    }
    let want = a.read_losses().unwrap().to_vec();
    let mut b = GptTrainer::resume(&path, Device::Cpu, corpus).unwrap();
    assert_eq!(b.steps_done(), 5);
    assert_eq!(b.evals(), &a.evals()[..1]);
    for _ in 5..12 {
        b.step().unwrap();
    }
    assert_eq!(
        b.read_losses().unwrap(),
        &want[..],
        "bit for bit, dropout included"
    );
    let pa: Vec<Vec<f32>> = a
        .model()
        .parameters()
        .iter()
        .map(|p| p.tensor().to_vec().unwrap())
        .collect();
    let pb: Vec<Vec<f32>> = b
        .model()
        .parameters()
        .iter()
        .map(|p| p.tensor().to_vec().unwrap())
        .collect();
    assert_eq!(pa, pb);
    // the model alone loads for sampling
    let (m, cfg) = GptTrainer::load_model(&path, Device::Cpu).unwrap();
    assert_eq!(cfg, c);
    assert!(!m.is_training());
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn training_lowers_the_loss_and_decays_only_matrices() {
    let (c, corpus) = small_run();
    let mut t = GptTrainer::new(GptTrainConfig { steps: 40, ..c }, corpus).unwrap();
    let before = t.evaluate().unwrap();
    for _ in 0..40 {
        t.step().unwrap();
    }
    let after = t.evaluate().unwrap();
    assert!(after < 0.5 * before, "{before} → {after}");
    // the decayed group holds the matrices and embeddings, the other the norms
    let sd = t.optimizer().state_dict().unwrap();
    let wd: Vec<f64> = sd
        .param_groups
        .iter()
        .map(|(hp, _)| hp["weight_decay"])
        .collect();
    assert_eq!(wd, [0.1, 0.0]);
    // state-dict positions count the optimizer's parameters in group order
    let names: Vec<String> = t
        .optimizer()
        .named_params()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let no_decay: Vec<&String> = sd.param_groups[1].1.iter().map(|&i| &names[i]).collect();
    assert!(
        no_decay.iter().all(|n| n.ends_with("norm.weight")),
        "{no_decay:?}"
    );
}

#[test]
fn the_schedule_warms_up_then_follows_a_cosine() {
    let c = GptTrainConfig {
        lr: 1e-3,
        min_lr: 1e-4,
        warmup: 100,
        steps: 2000,
        ..Default::default()
    };
    assert_eq!(c.lr_at(0), 1e-3 / 101.0);
    assert_eq!(c.lr_at(99), 1e-3 * 100.0 / 101.0);
    assert_eq!(c.lr_at(100), 1e-3);
    assert!((c.lr_at(1050) - 5.5e-4).abs() < 1e-12);
    assert_eq!(c.lr_at(2000), 1e-4);
    assert_eq!(c.lr_at(5000), 1e-4);
}

#[test]
fn bad_runs_are_errors() {
    let (c, corpus) = small_run();
    let bad_ids = Corpus {
        train: vec![300; 100],
        val: corpus.val.clone(),
    };
    let e = GptTrainer::new(c.clone(), bad_ids)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("token id 300"), "{e}");
    let short = Corpus {
        train: vec![5; 10],
        val: corpus.val.clone(),
    };
    assert!(GptTrainer::new(c.clone(), short).is_err());
    let e = GptTrainer::new(
        GptTrainConfig {
            autocast: Some(DType::F32),
            ..c.clone()
        },
        corpus,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("autocast"), "{e}");
    let _ = (Norm::Rms, Mlp::SwiGlu);
}
