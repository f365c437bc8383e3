//! The sampler: exact facts only (greedy is the arg-max, excluded tokens are never drawn, a
//! one-token set is always drawn, the penalty's arithmetic), seeds, devices, and no host
//! wait in a sampling step.

use stride_core::{debug, DType, Device, Tensor};
use stride_models::sampling::{apply_repetition_penalty, Sampler, SamplingConfig};

fn cfg(temperature: f64, top_k: usize, top_p: f64, min_p: f64, seed: u64) -> SamplingConfig {
    SamplingConfig {
        temperature,
        top_k,
        top_p,
        min_p,
        repetition_penalty: 1.0,
        repeat_last_n: 64,
        seed: Some(seed),
    }
}

/// Logits `[rows, vocab]` with distinct values (no ties), seeded.
fn logits(rows: usize, vocab: usize, seed: u64) -> Tensor {
    let g = stride_core::Generator::new(seed);
    Tensor::randn([rows, vocab], DType::F32, &Device::Cpu, Some(&g))
        .unwrap()
        .mul(3.0)
        .unwrap()
}

fn draw(s: &mut Sampler, x: &Tensor) -> Vec<i64> {
    s.sample(x, None).unwrap().to_vec::<i64>().unwrap()
}

fn host_argmax(row: &[f32]) -> i64 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as i64
}

#[test]
fn greedy_is_argmax() {
    let x = logits(5, 300, 1);
    let host = x.to_vec::<f32>().unwrap();
    let mut s = Sampler::new(SamplingConfig::greedy(), Device::Cpu).unwrap();
    let want: Vec<i64> = host.chunks(300).map(host_argmax).collect();
    assert_eq!(draw(&mut s, &x), want);
    // greedy consumes no random numbers
    assert_eq!(s.generator().get_state().offset, 0);
    // ties: the lowest id
    let t = Tensor::from_vec(vec![1.0f32, 5.0, 5.0, 2.0], [1, 4]).unwrap();
    assert_eq!(draw(&mut s, &t), vec![1]);
}

#[test]
fn top_k_1_is_greedy_at_any_temperature() {
    let x = logits(4, 500, 2);
    let mut g = Sampler::new(SamplingConfig::greedy(), Device::Cpu).unwrap();
    let want = draw(&mut g, &x);
    for temp in [0.1, 1.0, 7.5, 100.0] {
        let mut s = Sampler::new(cfg(temp, 1, 1.0, 0.0, 9), Device::Cpu).unwrap();
        for _ in 0..5 {
            assert_eq!(draw(&mut s, &x), want, "temperature {temp}");
        }
    }
}

/// The probabilities of one row at temperature 1, sorted: (id, p) in decreasing p.
fn sorted_probs(row: &[f32]) -> Vec<(usize, f64)> {
    let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
    let z: f64 = e.iter().sum();
    let mut p: Vec<(usize, f64)> = e.iter().map(|&v| v / z).enumerate().collect();
    p.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
    p
}

#[test]
fn top_p_keeps_the_smallest_prefix_reaching_p() {
    // probabilities 0.4, 0.3, 0.2, 0.1 (logits = their logs), shuffled ids
    let probs = [0.2f64, 0.4, 0.1, 0.3];
    let x = Tensor::from_vec(probs.iter().map(|p| p.ln() as f32).collect(), [1, 4]).unwrap();
    // p = 0.65: 0.4 < 0.65, 0.4 + 0.3 = 0.7 reaches it -> ids {1, 3}
    // p = 0.75: {1, 3, 0}; p = 0.3: {1} only (a one-token set)
    for (p, allowed) in [(0.65, vec![1i64, 3]), (0.75, vec![1, 3, 0]), (0.3, vec![1])] {
        let mut s = Sampler::new(cfg(1.0, 0, p, 0.0, 3), Device::Cpu).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..400 {
            let t = draw(&mut s, &x)[0];
            assert!(
                allowed.contains(&t),
                "top_p {p}: drew {t}, allowed {allowed:?}"
            );
            seen.insert(t);
        }
        // every allowed token comes out in 400 draws (each has probability >= 0.2 / 0.9)
        assert_eq!(seen.len(), allowed.len(), "top_p {p}: {seen:?}");
    }
}

#[test]
fn top_p_and_min_p_sets_on_random_logits() {
    let (rows, vocab) = (3, 64);
    let x = logits(rows, vocab, 4);
    let host = x.to_vec::<f32>().unwrap();
    for (top_p, min_p) in [(0.5, 0.0), (0.9, 0.0), (1.0, 0.1), (0.8, 0.2)] {
        let mut s = Sampler::new(cfg(1.5, 0, top_p, min_p, 5), Device::Cpu).unwrap();
        let allowed: Vec<Vec<usize>> = host
            .chunks(vocab)
            .map(|row| {
                let p = sorted_probs(row);
                let pmax = p[0].1;
                let mut before = 0.0;
                let mut keep = Vec::new();
                for &(id, pi) in &p {
                    // stay away from the boundaries: the sets are exact, rounding aside
                    assert!((before - top_p).abs() > 1e-6 || top_p == 1.0);
                    if (top_p >= 1.0 || before < top_p) && pi >= min_p * pmax {
                        keep.push(id);
                    }
                    before += pi;
                }
                keep
            })
            .collect();
        for _ in 0..200 {
            for (r, t) in draw(&mut s, &x).into_iter().enumerate() {
                assert!(
                    allowed[r].contains(&(t as usize)),
                    "top_p {top_p} min_p {min_p}: row {r} drew {t}, allowed {:?}",
                    allowed[r]
                );
            }
        }
    }
}

#[test]
fn min_p_one_token_set_is_always_drawn() {
    // min_p 0.5 with the second most likely at 0.4 x the first: only the first stays
    let x = Tensor::from_vec(vec![0.0f32, 1.0, (0.4f64.ln() + 1.0) as f32, -3.0], [1, 4]).unwrap();
    let mut s = Sampler::new(cfg(2.0, 0, 1.0, 0.5, 11), Device::Cpu).unwrap();
    for _ in 0..100 {
        assert_eq!(draw(&mut s, &x), vec![1]);
    }
}

#[test]
fn top_k_never_draws_outside_the_k_largest() {
    let x = logits(2, 100, 6);
    let host = x.to_vec::<f32>().unwrap();
    let mut s = Sampler::new(cfg(3.0, 5, 1.0, 0.0, 12), Device::Cpu).unwrap();
    let top: Vec<Vec<usize>> = host
        .chunks(100)
        .map(|r| sorted_probs(r).iter().take(5).map(|p| p.0).collect())
        .collect();
    for _ in 0..300 {
        for (r, t) in draw(&mut s, &x).into_iter().enumerate() {
            assert!(top[r].contains(&(t as usize)));
        }
    }
}

#[test]
fn repetition_penalty_arithmetic_is_exact() {
    let vals = vec![2.5f32, -1.5, 0.0, 7.0, -0.3, 1.0e-3, 3.3];
    let x = Tensor::from_vec(vals.clone(), [1, 7]).unwrap();
    // seen: 0, 1, 2, 4, 5 (3 and 6 not; -1 is padding; duplicates count once)
    let h = Tensor::from_vec(vec![-1i64, 0, 1, 1, 2, 4, 5, 0], [1, 8]).unwrap();
    for pen in [1.3f64, 0.7, 2.0, 1.1] {
        let out = apply_repetition_penalty(&x, &h, pen, 64)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let r = pen as f32;
        let want: Vec<f32> = vals
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if [0, 1, 2, 4, 5].contains(&i) {
                    if v > 0.0 {
                        v / r
                    } else {
                        v * r
                    }
                } else {
                    v
                }
            })
            .collect();
        assert_eq!(
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "penalty {pen}"
        );
    }
    // only the last `last_n` columns count: with last_n = 2, only 5 and 0 are seen
    let out = apply_repetition_penalty(&x, &h, 2.0, 2)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(out, vec![1.25, -1.5, 0.0, 7.0, -0.3, 5.0e-4, 3.3]);
}

#[test]
fn penalty_steers_greedy_away_from_seen_tokens() {
    let x = Tensor::from_vec(vec![4.0f32, 3.0, -1.0], [1, 3]).unwrap();
    let h = Tensor::from_vec(vec![0i64], [1, 1]).unwrap();
    let c = SamplingConfig {
        repetition_penalty: 1.5,
        ..SamplingConfig::greedy()
    };
    let mut s = Sampler::new(c, Device::Cpu).unwrap();
    // 4 / 1.5 = 2.67 < 3: token 1 wins
    assert_eq!(
        s.sample(&x, Some(&h)).unwrap().to_vec::<i64>().unwrap(),
        vec![1]
    );
    assert_eq!(
        s.sample(&x, None).unwrap().to_vec::<i64>().unwrap(),
        vec![0]
    );
}

fn run(seed: u64, device: Device, steps: usize) -> Vec<i64> {
    let x = logits(4, 1000, 7)
        .mul(0.3)
        .unwrap()
        .to_device(&device)
        .unwrap();
    let mut out = Vec::new();
    for (i, c) in [
        cfg(1.0, 0, 1.0, 0.0, seed),
        cfg(0.8, 40, 0.95, 0.05, seed),
        cfg(1.3, 0, 0.9, 0.0, seed),
        cfg(0.7, 0, 1.0, 0.02, seed),
    ]
    .into_iter()
    .enumerate()
    {
        let mut s = Sampler::new(c, device).unwrap();
        for _ in 0..steps {
            let t = s.sample(&x, None).unwrap();
            assert_eq!(
                (t.shape(), t.dtype(), t.device()),
                (&[4usize][..], DType::I64, device),
                "config {i}"
            );
            out.extend(t.to_vec::<i64>().unwrap());
        }
    }
    out
}

#[test]
fn same_seed_same_tokens_other_seed_other_tokens() {
    let a = run(42, Device::Cpu, 25);
    assert_eq!(a, run(42, Device::Cpu, 25));
    let b = run(43, Device::Cpu, 25);
    assert_ne!(a, b);
    // not a constant: the draws vary
    assert!(a.iter().collect::<std::collections::BTreeSet<_>>().len() > 20);
}

#[test]
fn random_seed_is_reported_and_replays() {
    let x = logits(2, 200, 8);
    let mut s = Sampler::new(cfg(1.0, 0, 1.0, 0.0, 0), Device::Cpu).unwrap();
    let c = SamplingConfig {
        seed: None,
        ..s.config().clone()
    };
    s = Sampler::new(c.clone(), Device::Cpu).unwrap();
    let first: Vec<Vec<i64>> = (0..10).map(|_| draw(&mut s, &x)).collect();
    let mut again = Sampler::new(
        SamplingConfig {
            seed: Some(s.seed()),
            ..c
        },
        Device::Cpu,
    )
    .unwrap();
    let second: Vec<Vec<i64>> = (0..10).map(|_| draw(&mut again, &x)).collect();
    assert_eq!(first, second);
}

#[test]
fn bad_configs_and_inputs_are_errors() {
    for c in [
        SamplingConfig {
            temperature: -1.0,
            ..Default::default()
        },
        SamplingConfig {
            temperature: f64::NAN,
            ..Default::default()
        },
        SamplingConfig {
            top_p: 0.0,
            ..Default::default()
        },
        SamplingConfig {
            top_p: 1.5,
            ..Default::default()
        },
        SamplingConfig {
            min_p: -0.1,
            ..Default::default()
        },
        SamplingConfig {
            repetition_penalty: 0.0,
            ..Default::default()
        },
    ] {
        let e = Sampler::new(c.clone(), Device::Cpu)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sampling"), "{c:?}: {e}");
    }
    let mut s = Sampler::new(SamplingConfig::default(), Device::Cpu).unwrap();
    let e = s
        .sample(&Tensor::zeros([3], DType::F32, &Device::Cpu).unwrap(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[batch, vocab]"), "{e}");
}

/// A sampling step, penalty included, makes no host wait (reported alike on every device).
fn no_sync_on(device: Device) {
    let x = logits(2, 4000, 9).to_device(&device).unwrap();
    let h = Tensor::from_vec(vec![5i64, 17, -1, 3, 3, 99], [2, 3])
        .unwrap()
        .to_device(&device)
        .unwrap();
    for c in [
        SamplingConfig {
            repetition_penalty: 1.1,
            seed: Some(1),
            ..Default::default()
        },
        SamplingConfig {
            repetition_penalty: 1.1,
            ..SamplingConfig::greedy()
        },
        cfg(1.0, 0, 0.9, 0.0, 2),
        cfg(1.0, 0, 1.0, 0.1, 2),
        cfg(1.0, 0, 1.0, 0.0, 2),
    ] {
        let mut s = Sampler::new(c.clone(), device).unwrap();
        s.sample(&x, Some(&h)).unwrap(); // warm-up: constants made once
        let t = {
            let _g = debug::forbid_sync();
            s.sample(&x, Some(&h))
                .unwrap_or_else(|e| panic!("{c:?} on {device}: {e}"))
        };
        t.to_vec::<i64>().unwrap();
    }
}

#[test]
fn sampling_step_makes_no_host_wait_cpu() {
    no_sync_on(Device::Cpu);
}

#[test]
fn sampling_step_makes_no_host_wait_cuda() {
    let Some(gpu) = stride_core::cuda::require_or_skip("sampling_step_makes_no_host_wait_cuda")
    else {
        return;
    };
    let before = stride_core::cuda::sync_count(0);
    no_sync_on(gpu);
    // the reads of the results and the transfers are the only waits
    assert!(stride_core::cuda::sync_count(0) > before);
}

#[test]
fn cpu_and_cuda_give_the_same_tokens() {
    let Some(gpu) = stride_core::cuda::require_or_skip("cpu_and_cuda_give_the_same_tokens") else {
        return;
    };
    assert_eq!(run(42, Device::Cpu, 50), run(42, gpu, 50));
    assert_eq!(run(7, Device::Cpu, 50), run(7, gpu, 50));
}

/// Time per sampling step at SmolLM2's vocabulary (49,152) on the CPU: run by hand with
/// `--ignored --nocapture` (tests never assert on time).
#[test]
#[ignore = "a timing printout, not a check: cargo test --release --workspace --test sampling -- --ignored --nocapture sampling_step_cost"]
fn sampling_step_cost_at_smollm2_vocab() {
    let x = logits(1, 49152, 10);
    let h = Tensor::from_vec((0..64i64).map(|i| i * 700).collect(), [1, 64]).unwrap();
    for (name, c) in [
        ("greedy", SamplingConfig::greedy()),
        (
            "defaults (top-k 40)",
            SamplingConfig {
                seed: Some(1),
                ..Default::default()
            },
        ),
        (
            "defaults + penalty 1.1/64",
            SamplingConfig {
                seed: Some(1),
                repetition_penalty: 1.1,
                ..Default::default()
            },
        ),
        ("top-p 0.95 (full sort)", cfg(0.8, 0, 0.95, 0.05, 1)),
        ("pure sampling", cfg(1.0, 0, 1.0, 0.0, 1)),
    ] {
        let mut s = Sampler::new(c, Device::Cpu).unwrap();
        s.sample(&x, Some(&h)).unwrap().to_vec::<i64>().unwrap();
        let t = std::time::Instant::now();
        for _ in 0..50 {
            s.sample(&x, Some(&h)).unwrap().to_vec::<i64>().unwrap();
        }
        println!(
            "{name:28} {:.3} ms/step",
            t.elapsed().as_secs_f64() * 1e3 / 50.0
        );
    }
    // what the generation loop does: the window kept incrementally
    let c = SamplingConfig {
        seed: Some(1),
        repetition_penalty: 1.1,
        ..Default::default()
    };
    let mut s = Sampler::new(c, Device::Cpu).unwrap();
    let mut recent = stride_models::sampling::RecentTokens::new(
        &[(0..64i64).map(|i| i * 700).collect()],
        64,
        49152,
        Device::Cpu,
    )
    .unwrap();
    let t = std::time::Instant::now();
    for _ in 0..50 {
        let seen = recent.seen().unwrap();
        let next = s.sample_with_seen(&x, Some(&seen)).unwrap();
        recent.push(&next).unwrap();
        next.to_vec::<i64>().unwrap();
    }
    println!(
        "{:28} {:.3} ms/step",
        "defaults + penalty, RecentTokens",
        t.elapsed().as_secs_f64() * 1e3 / 50.0
    );
}

/// The incremental window agrees with the penalty computed from the explicit history, step
/// after step (wrapping the ring several times), and its updates make no host wait.
#[test]
fn recent_tokens_match_the_explicit_history() {
    use stride_models::sampling::RecentTokens;
    let (b, v, n) = (3usize, 50usize, 7usize);
    let hist: Vec<Vec<i64>> = vec![vec![1, 2, 3, 4, 5, 6, 7, 8, 9], vec![-1, -1, 49, 0], vec![]];
    let mut recent = RecentTokens::new(&hist, n, v, Device::Cpu).unwrap();
    // the explicit history, right-aligned with -1
    let width = 9;
    let mut rows: Vec<Vec<i64>> = hist
        .iter()
        .map(|h| {
            std::iter::repeat_n(-1, width - h.len())
                .chain(h.iter().copied())
                .collect()
        })
        .collect();
    let c = SamplingConfig {
        repetition_penalty: 1.7,
        repeat_last_n: n,
        ..SamplingConfig::greedy()
    };
    let mut a = Sampler::new(c.clone(), Device::Cpu).unwrap();
    let mut bs = Sampler::new(c, Device::Cpu).unwrap();
    let g = stride_core::Generator::new(5);
    for step in 0..40 {
        let x = Tensor::randn([b, v], DType::F32, &Device::Cpu, Some(&g)).unwrap();
        let h = Tensor::from_vec(rows.concat(), [b, rows[0].len()]).unwrap();
        let want = a.sample(&x, Some(&h)).unwrap().to_vec::<i64>().unwrap();
        let got = {
            let _g = debug::forbid_sync();
            let seen = recent.seen().unwrap();
            bs.sample_with_seen(&x, Some(&seen)).unwrap()
        };
        assert_eq!(got.to_vec::<i64>().unwrap(), want, "step {step}");
        // the window's content: exactly the last n of the explicit history
        let seen = recent.seen().unwrap().to_vec::<bool>().unwrap();
        for (r, row) in rows.iter().enumerate() {
            let last: Vec<i64> = row[row.len() - n..].to_vec();
            for id in 0..v {
                assert_eq!(
                    seen[r * v + id],
                    last.contains(&(id as i64)),
                    "step {step} row {r} id {id}"
                );
            }
        }
        // next tokens: random ids with repeats
        let next: Vec<i64> = (0..b).map(|r| ((step * 7 + r * 3) % 11) as i64).collect();
        {
            let _g = debug::forbid_sync();
            recent
                .push(&Tensor::from_vec(next.clone(), [b]).unwrap())
                .unwrap();
        }
        for (row, t) in rows.iter_mut().zip(next) {
            row.push(t);
        }
    }
}
