//! The Llama model: a tiny random model written as GGUF (F32, Q8_0 and Q4_1 tensors) and as
//! Hugging Face safetensors, checked for prefill/decode consistency, the rotary convention of
//! each file format, left-padded batches and a flat memory footprint over 10,000 decode
//! steps; and the real SmolLM2-135M-Instruct when its GGUF file is on the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use stride_core::{DType, Device, Generator, Tensor};
use stride_gguf::{GgmlType, GgufWriter};
use stride_models::llama::{Llama, LlamaConfig};
use stride_models::{CausalLm, KvCache};
use stride_nn::functional::RotaryStyle;

/// The memory check counts process-wide allocations: the tests of this file run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn tiny_config() -> LlamaConfig {
    LlamaConfig {
        n_layers: 2,
        dim: 64,
        ffn_dim: 128,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        rope_dim: 16,
        rope_base: 10000.0,
        rms_eps: 1e-5f32 as f64, // GGUF stores it as f32
        context_len: 256,
        vocab_size: 97,
        tied_embeddings: false,
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stride_llama_test_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// HF row order → llama.cpp's GGUF row order for Q/K of `heads` heads (convert_hf_to_gguf's
/// `permute`): GGUF row `h·hd + 2i + j` is HF row `h·hd + j·hd/2 + i`.
fn hf_to_gguf_rows(w: &[f32], heads: usize, hd: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; w.len()];
    for h in 0..heads {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let g = h * hd + 2 * i + j;
                let f = h * hd + j * hd / 2 + i;
                out[g * cols..(g + 1) * cols].copy_from_slice(&w[f * cols..(f + 1) * cols]);
            }
        }
    }
    out
}
fn gguf_to_hf_rows(w: &[f32], heads: usize, hd: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; w.len()];
    for h in 0..heads {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let g = h * hd + 2 * i + j;
                let f = h * hd + j * hd / 2 + i;
                out[f * cols..(f + 1) * cols].copy_from_slice(&w[g * cols..(g + 1) * cols]);
            }
        }
    }
    out
}

/// Writes the tiny model as GGUF (Q/K rows permuted as llama.cpp's converter does; some
/// tensors quantized) and as HF safetensors holding exactly the dequantized values in HF row
/// order. Returns (gguf path, config.json path, safetensors path).
fn write_tiny(c: &LlamaConfig, seed: u64, tag: &str) -> (PathBuf, PathBuf, PathBuf) {
    let gen = Generator::new(seed);
    let rnd = |n: usize, std: f64, mean: f64| -> Vec<f32> {
        Tensor::randn([n], DType::F32, &Device::Cpu, Some(&gen))
            .unwrap()
            .mul(std)
            .unwrap()
            .add(mean)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    let (d, f, v, hd) = (c.dim, c.ffn_dim, c.vocab_size, c.head_dim);
    let (q, kv) = (c.n_heads * hd, c.n_kv_heads * hd);
    let mut w = GgufWriter::new();
    w.add_string("general.architecture", "llama")
        .add_u32("llama.block_count", c.n_layers as u32)
        .add_u32("llama.embedding_length", d as u32)
        .add_u32("llama.feed_forward_length", f as u32)
        .add_u32("llama.attention.head_count", c.n_heads as u32)
        .add_u32("llama.attention.head_count_kv", c.n_kv_heads as u32)
        .add_f32("llama.rope.freq_base", c.rope_base as f32)
        .add_f32("llama.attention.layer_norm_rms_epsilon", c.rms_eps as f32)
        .add_u32("llama.context_length", c.context_len as u32)
        .add_u32("llama.rope.dimension_count", c.rope_dim as u32);
    let mut hf: BTreeMap<String, Tensor> = BTreeMap::new();
    // adds a GGUF tensor of `rows × cols` stored as `ty`, and the HF tensor of its exact
    // (dequantized) values, rows mapped back by `unperm`
    let mut add = |gname: &str,
                   hname: &str,
                   data: Vec<f32>,
                   rows: usize,
                   cols: usize,
                   ty: GgmlType,
                   unperm: Option<usize>| {
        let bytes = stride_gguf::quantize(ty, &data).unwrap();
        let dims: Vec<u64> = if rows == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        };
        w.add_tensor(gname, &dims, ty, &bytes).unwrap();
        let exact = stride_gguf::dequantize_to_vec(ty, &bytes).unwrap();
        let exact = match unperm {
            Some(heads) => gguf_to_hf_rows(&exact, heads, hd, cols),
            None => exact,
        };
        let shape = if rows == 1 {
            vec![cols]
        } else {
            vec![rows, cols]
        };
        hf.insert(hname.to_string(), Tensor::from_vec(exact, shape).unwrap());
    };
    let s_in = 1.0 / (d as f64).sqrt();
    add(
        "token_embd.weight",
        "model.embed_tokens.weight",
        rnd(v * d, 1.0, 0.0),
        v,
        d,
        GgmlType::F32,
        None,
    );
    for l in 0..c.n_layers {
        let b = |s: &str| format!("blk.{l}.{s}.weight");
        let h = |s: &str| format!("model.layers.{l}.{s}.weight");
        add(
            &b("attn_norm"),
            &h("input_layernorm"),
            rnd(d, 0.1, 1.0),
            1,
            d,
            GgmlType::F32,
            None,
        );
        let wq = rnd(q * d, s_in, 0.0);
        add(
            &b("attn_q"),
            &h("self_attn.q_proj"),
            hf_to_gguf_rows(&wq, c.n_heads, hd, d),
            q,
            d,
            GgmlType::Q8_0,
            Some(c.n_heads),
        );
        let wk = rnd(kv * d, s_in, 0.0);
        add(
            &b("attn_k"),
            &h("self_attn.k_proj"),
            hf_to_gguf_rows(&wk, c.n_kv_heads, hd, d),
            kv,
            d,
            GgmlType::Q4_1,
            Some(c.n_kv_heads),
        );
        add(
            &b("attn_v"),
            &h("self_attn.v_proj"),
            rnd(kv * d, s_in, 0.0),
            kv,
            d,
            GgmlType::F32,
            None,
        );
        add(
            &b("attn_output"),
            &h("self_attn.o_proj"),
            rnd(d * q, 1.0 / (q as f64).sqrt(), 0.0),
            d,
            q,
            GgmlType::Q8_0,
            None,
        );
        add(
            &b("ffn_norm"),
            &h("post_attention_layernorm"),
            rnd(d, 0.1, 1.0),
            1,
            d,
            GgmlType::F32,
            None,
        );
        add(
            &b("ffn_gate"),
            &h("mlp.gate_proj"),
            rnd(f * d, s_in, 0.0),
            f,
            d,
            GgmlType::Q4_1,
            None,
        );
        add(
            &b("ffn_up"),
            &h("mlp.up_proj"),
            rnd(f * d, s_in, 0.0),
            f,
            d,
            GgmlType::F32,
            None,
        );
        add(
            &b("ffn_down"),
            &h("mlp.down_proj"),
            rnd(d * f, 1.0 / (f as f64).sqrt(), 0.0),
            d,
            f,
            GgmlType::Q8_0,
            None,
        );
    }
    add(
        "output_norm.weight",
        "model.norm.weight",
        rnd(d, 0.1, 1.0),
        1,
        d,
        GgmlType::F32,
        None,
    );
    if !c.tied_embeddings {
        add(
            "output.weight",
            "lm_head.weight",
            rnd(v * d, s_in, 0.0),
            v,
            d,
            GgmlType::Q8_0,
            None,
        );
    }
    let gguf = tmp(&format!("{tag}.gguf"));
    w.write(&gguf).unwrap();
    let cfg = tmp(&format!("{tag}_config.json"));
    std::fs::write(
        &cfg,
        format!(
            r#"{{"model_type": "llama", "num_hidden_layers": {}, "hidden_size": {d}, "intermediate_size": {f},
                "num_attention_heads": {}, "num_key_value_heads": {}, "rope_theta": {}, "rms_norm_eps": {},
                "max_position_embeddings": {}, "vocab_size": {v}, "tie_word_embeddings": {}}}"#,
            c.n_layers, c.n_heads, c.n_kv_heads, c.rope_base, c.rms_eps, c.context_len, c.tied_embeddings
        ),
    )
    .unwrap();
    let st = tmp(&format!("{tag}.safetensors"));
    stride_nn::safetensors::save(hf.iter().map(|(k, t)| (k.as_str(), t)), None, &st).unwrap();
    (gguf, cfg, st)
}

/// Per-vocabulary-entry bound on `|logit_a − logit_b|` for two computations of one model that
/// differ only in how the work is split (prefill vs decode, batch vs single, two rotary
/// conventions of the same weights). First-order error analysis (bounds.rs's model): each
/// computation stores `k` intermediates per path in the model dtype (relative error ≤ u each)
/// and chains reductions of `n` terms in total accumulated in f32 (≤ n·u₃₂ each, relative to
/// the magnitudes summed); rmsnorm is scale-invariant, so these relative errors reach the
/// final hidden state `h`, and the logit `h·W_v` is off by at most
/// `(k·u + n·u₃₂) · Σ|h_k W_vk| ≤ (k·u + n·u₃₂) · ‖h‖₂ ‖W_v‖₂` with
/// `‖h‖₂ ≤ √D · max|output_norm|` (rmsnorm output has rms 1). Two computations: twice that.
///
/// `k = 16` per block (norm, q, k, v, rotated q and k, attention, o-proj, residual, norm,
/// gate, silu, up, product, down, residual) `+ 2` (final norm, logits);
/// `n = L·(D + S + hd + Hq·hd + F) + D` (the reductions along one path).
fn logit_bounds(m: &Llama, max_s: usize) -> Vec<f64> {
    let c = m.config();
    let w = m.weights();
    let u = match m.dtype() {
        DType::BF16 => 2f64.powi(-8),
        DType::F16 => 2f64.powi(-11),
        DType::F64 => 2f64.powi(-53),
        _ => 2f64.powi(-24),
    };
    let u32_ = if m.dtype() == DType::F64 {
        u
    } else {
        2f64.powi(-24)
    };
    let k = (16 * c.n_layers + 2) as f64;
    let n = (c.n_layers * (c.dim + max_s + c.head_dim + c.n_heads * c.head_dim + c.ffn_dim) + c.dim)
        as f64;
    let norm_max = w
        .output_norm
        .to_f64_vec()
        .unwrap()
        .iter()
        .fold(0f64, |a, &b| a.max(b.abs()));
    let h = (c.dim as f64).sqrt() * norm_max;
    let head = w
        .lm_head
        .dequantized(DType::F64)
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap();
    let row_norms = head
        .square()
        .unwrap()
        .sum_dims(&[1], false)
        .unwrap()
        .sqrt()
        .unwrap()
        .to_f64_vec()
        .unwrap();
    row_norms
        .iter()
        .map(|r| 2.0 * (k * u + n * u32_) * h * r)
        .collect()
}

/// Checks `got` `[t, vocab]` against `want` `[t, vocab]` within `bound` per vocab entry.
fn check_logits(got: &Tensor, want: &Tensor, bound: &[f64], what: &str) -> f64 {
    let g = got.to_f64_vec().unwrap();
    let w = want.to_f64_vec().unwrap();
    assert_eq!(
        g.len(),
        w.len(),
        "{what}: shapes {:?} {:?}",
        got.shape(),
        want.shape()
    );
    let v = bound.len();
    let mut worst = 0f64;
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(a.is_finite(), "{what}: logit {i} is {a}");
        let tol = bound[i % v];
        worst = worst.max((a - b).abs() / tol);
        assert!(
            (a - b).abs() <= tol,
            "{what}: position {} token {}: {a} vs {b} (|diff| {} > bound {tol})",
            i / v,
            i % v,
            (a - b).abs()
        );
    }
    worst
}

fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<i64> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % vocab as u64) as i64
        })
        .collect()
}

fn row(ids: &[i64], dev: &Device) -> Tensor {
    Tensor::from_vec(ids.to_vec(), [1, ids.len()])
        .unwrap()
        .to_device(dev)
        .unwrap()
}

/// Prefill of n tokens, then 16 single-token decode steps, against one forward of the whole
/// sequence, at every position.
fn prefill_decode_consistency(m: &Llama, what: &str) {
    let dev = m.device();
    let total = 130 + 16;
    let ids = tokens(total, m.vocab_size(), 7);
    let mut full_cache = m.new_cache(&[0], total).unwrap();
    let full = m
        .forward(&row(&ids, &dev), &mut full_cache)
        .unwrap()
        .select(0, 0)
        .unwrap();
    let bound = logit_bounds(m, total);
    let mut worst = 0f64;
    for n in [1usize, 2, 3, 4, 7, 64, 130] {
        let mut cache = m.new_cache(&[0], n + 16).unwrap();
        let pre = m.forward(&row(&ids[..n], &dev), &mut cache).unwrap();
        assert_eq!(pre.shape(), &[1, n, m.vocab_size()]);
        assert_eq!(pre.dtype(), DType::F32);
        worst = worst.max(check_logits(
            &pre.select(0, 0).unwrap(),
            &full.narrow(0, 0, n).unwrap(),
            &bound,
            &format!("{what} prefill {n}"),
        ));
        for step in 0..16 {
            let p = n + step;
            let y = m.forward(&row(&ids[p..p + 1], &dev), &mut cache).unwrap();
            worst = worst.max(check_logits(
                &y.select(0, 0).unwrap(),
                &full.narrow(0, p as i64, 1).unwrap(),
                &bound,
                &format!("{what} prefill {n} decode step {step}"),
            ));
        }
        assert_eq!(cache.len(), n + 16);
    }
    println!("{what}: worst |decode − full| / bound = {worst:.3e}");
}

#[test]
fn prefill_then_decode_matches_full_recompute() {
    let _serial = serial();
    let c = tiny_config();
    let (gguf, _, _) = write_tiny(&c, 1, "consistency");
    let mut devices = vec![Device::Cpu];
    if let Some(gpu) =
        stride_core::cuda::require_or_skip("prefill_then_decode_matches_full_recompute")
    {
        devices.push(gpu);
    }
    for dev in devices {
        for dt in [DType::F32, DType::BF16] {
            let m = Llama::from_gguf_file(&gguf, dt, &dev).unwrap();
            assert_eq!(m.config(), &c);
            assert_eq!(m.rotary_style(), RotaryStyle::Interleaved);
            prefill_decode_consistency(&m, &format!("{dev} {dt}"));
        }
    }
}

#[test]
fn gguf_and_safetensors_of_one_model_agree() {
    let _serial = serial();
    for tied in [false, true] {
        let c = LlamaConfig {
            tied_embeddings: tied,
            ..tiny_config()
        };
        let (gguf, cfg, st) = write_tiny(&c, 2, &format!("formats_{tied}"));
        let g = Llama::from_gguf_file(&gguf, DType::F32, &Device::Cpu).unwrap();
        let h = Llama::from_safetensors(&cfg, &[&st], DType::F32, &Device::Cpu).unwrap();
        assert_eq!(g.config(), h.config());
        assert_eq!(h.rotary_style(), RotaryStyle::HalfSplit);
        let ids = tokens(40, c.vocab_size, 3);
        let lg = g
            .forward(
                &row(&ids, &Device::Cpu),
                &mut g.new_cache(&[0], 40).unwrap(),
            )
            .unwrap();
        let lh = h
            .forward(
                &row(&ids, &Device::Cpu),
                &mut h.new_cache(&[0], 40).unwrap(),
            )
            .unwrap();
        let worst = check_logits(
            &lh.select(0, 0).unwrap(),
            &lg.select(0, 0).unwrap(),
            &logit_bounds(&g, 40),
            "hf vs gguf",
        );
        println!("tied {tied}: worst |hf − gguf| / bound = {worst:.3e}");
        // the wrong convention is not close: the check can fail
        let wrong = Llama::new(
            h.config().clone(),
            h.weights().clone(),
            RotaryStyle::Interleaved,
        )
        .unwrap();
        let lw = wrong
            .forward(
                &row(&ids, &Device::Cpu),
                &mut wrong.new_cache(&[0], 40).unwrap(),
            )
            .unwrap();
        let d = lw
            .sub(&lg)
            .unwrap()
            .abs()
            .unwrap()
            .amax(&[0, 1, 2], false)
            .unwrap()
            .item::<f32>()
            .unwrap();
        assert!(
            d > 1e-2,
            "the wrong rotary convention should change the logits (max diff {d})"
        );
    }
}

#[test]
fn left_padded_batch_gives_each_rows_logits() {
    let _serial = serial();
    let c = tiny_config();
    let (gguf, _, _) = write_tiny(&c, 3, "padded");
    let m = Llama::from_gguf_file(&gguf, DType::F32, &Device::Cpu).unwrap();
    let prompts: Vec<Vec<i64>> = [5usize, 9, 2, 9]
        .iter()
        .enumerate()
        .map(|(i, &n)| tokens(n, c.vocab_size, 10 + i as u64))
        .collect();
    let width = 9;
    let steps = 4;
    let pads: Vec<usize> = prompts.iter().map(|p| width - p.len()).collect();
    let mut batch_ids = vec![];
    for p in &prompts {
        batch_ids.extend(std::iter::repeat_n(0i64, width - p.len()));
        batch_ids.extend(p);
    }
    let b = prompts.len();
    let mut cache = m.new_cache(&pads, width + steps).unwrap();
    let pre = m
        .forward(
            &Tensor::from_vec(batch_ids, [b, width]).unwrap(),
            &mut cache,
        )
        .unwrap();
    let next: Vec<Vec<i64>> = (0..b)
        .map(|i| tokens(steps, c.vocab_size, 20 + i as u64))
        .collect();
    let mut dec = vec![];
    for s in 0..steps {
        let col: Vec<i64> = next.iter().map(|n| n[s]).collect();
        dec.push(
            m.forward(&Tensor::from_vec(col, [b, 1]).unwrap(), &mut cache)
                .unwrap(),
        );
    }
    let bound = logit_bounds(&m, width + steps);
    for (i, p) in prompts.iter().enumerate() {
        let mut ids = p.clone();
        ids.extend(&next[i]);
        let single = m
            .forward(
                &row(&ids, &Device::Cpu),
                &mut m.new_cache(&[0], ids.len()).unwrap(),
            )
            .unwrap()
            .select(0, 0)
            .unwrap();
        let got = pre
            .select(0, i as i64)
            .unwrap()
            .narrow(0, pads[i] as i64, p.len())
            .unwrap();
        check_logits(
            &got,
            &single.narrow(0, 0, p.len()).unwrap(),
            &bound,
            &format!("row {i} prompt"),
        );
        for (s, d) in dec.iter().enumerate() {
            check_logits(
                &d.select(0, i as i64).unwrap(),
                &single.narrow(0, (p.len() + s) as i64, 1).unwrap(),
                &bound,
                &format!("row {i} decode {s}"),
            );
        }
    }
}

#[test]
fn ten_thousand_decode_steps_keep_memory_flat() {
    let _serial = serial();
    let c = LlamaConfig {
        n_layers: 1,
        dim: 32,
        ffn_dim: 64,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 16,
        rope_dim: 16,
        vocab_size: 17,
        context_len: 64,
        ..tiny_config()
    };
    let m = Llama::random(c, DType::F32, &Device::Cpu, Some(&Generator::new(5))).unwrap();
    let mut cache = m.new_cache(&[0, 2], 64).unwrap();
    let tok = Tensor::from_vec(vec![3i64, 4], [2, 1]).unwrap();
    let mut steps = 0usize;
    stride_core::debug::check_leaks(Device::Cpu, 100, 10_000, || {
        if cache.len() == cache.capacity() {
            cache.truncate(8)?; // roll back and keep decoding over the same buffers
        }
        steps += 1;
        m.forward(&tok, &mut cache)
    })
    .unwrap();
    assert_eq!(steps, 10_100);
}

#[test]
fn bad_inputs_are_errors() {
    let _serial = serial();
    let c = tiny_config();
    let m = Llama::random(c.clone(), DType::F32, &Device::Cpu, None).unwrap();
    let mut cache = m.new_cache(&[0], 4).unwrap();
    let mut forward_error = |shape: [usize; 2], dtype: DType| {
        let tokens = Tensor::zeros(shape, dtype, &Device::Cpu).unwrap();
        m.forward(&tokens, &mut cache).unwrap_err().to_string()
    };
    for (shape, dtype, says) in [
        ([1, 2], DType::I32, "i64"),
        ([2, 2], DType::I64, "batch"),
        ([1, 5], DType::I64, "capacity"),
    ] {
        let e = forward_error(shape, dtype);
        assert!(e.contains(says), "{e}");
    }
    assert!(m.new_cache(&[0], 10_000).is_err());
    let e = LlamaConfig::from_hf_json(r#"{"hidden_size": 8}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("num_attention_heads"), "{e}");
    // a GGUF without a required key names it
    let mut w = GgufWriter::new();
    w.add_string("general.architecture", "llama");
    let p = tmp("missing.gguf");
    w.write(&p).unwrap();
    let e = Llama::from_gguf_file(&p, DType::F32, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("llama."), "{e}");
}

// ----- the real model -------------------------------------------------------------------

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn model_path(test: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("STRIDE_MODELS") {
        Some(d) => Some(PathBuf::from(d)),
        None => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/stride/models")),
    };
    if let Some(p) = dir.map(|d| d.join(MODEL)).filter(|p| p.exists()) {
        return Some(p);
    }
    if std::env::var("STRIDE_REQUIRE_MODELS").as_deref() == Ok("1") {
        panic!("{test}: {MODEL} not found in $STRIDE_MODELS or ~/.cache/stride/models, and STRIDE_REQUIRE_MODELS=1");
    }
    println!("SKIPPED: {test}: {MODEL} not found in $STRIDE_MODELS or ~/.cache/stride/models (see README, 'GGUF files')");
    None
}

fn real_model(path: &Path) {
    let t0 = std::time::Instant::now();
    let m = Llama::from_gguf_file(path, DType::F32, &Device::Cpu).unwrap();
    println!("loaded {MODEL} (f32) in {:.1?}", t0.elapsed());
    let c = m.config();
    assert_eq!(
        (c.n_layers, c.dim, c.ffn_dim, c.n_heads, c.n_kv_heads),
        (30, 576, 1536, 9, 3)
    );
    assert_eq!(
        (c.rope_base, c.context_len, c.vocab_size, c.head_dim),
        (100000.0, 8192, 49152, 64)
    );
    assert!((c.rms_eps - 1e-5).abs() < 1e-12, "{}", c.rms_eps);
    assert!(c.tied_embeddings);
    let tok = stride_tokenizer::Tokenizer::from_gguf_file(path).unwrap();
    let text = tok
        .apply_chat_template(
            &[stride_tokenizer::ChatMessage::new(
                "user",
                "What is the capital of France?",
            )],
            true,
        )
        .unwrap();
    let ids: Vec<i64> = tok
        .encode(&text, false)
        .unwrap()
        .into_iter()
        .map(|i| i as i64)
        .collect();
    let n = ids.len();
    let t0 = std::time::Instant::now();
    let full = m
        .forward(&row(&ids, &Device::Cpu), &mut m.new_cache(&[0], n).unwrap())
        .unwrap()
        .select(0, 0)
        .unwrap();
    println!("prefill of {n} tokens: {:.1?}", t0.elapsed());
    // prefill all but 3, then decode 3
    let mut cache = m.new_cache(&[0], n).unwrap();
    let bound = logit_bounds(&m, n);
    let pre = m
        .forward(&row(&ids[..n - 3], &Device::Cpu), &mut cache)
        .unwrap()
        .select(0, 0)
        .unwrap();
    let mut worst = check_logits(
        &pre,
        &full.narrow(0, 0, n - 3).unwrap(),
        &bound,
        "real prefill",
    );
    for p in n - 3..n {
        let t0 = std::time::Instant::now();
        let y = m
            .forward(&row(&ids[p..p + 1], &Device::Cpu), &mut cache)
            .unwrap()
            .select(0, 0)
            .unwrap();
        println!("decode step at position {p}: {:.1?}", t0.elapsed());
        worst = worst.max(check_logits(
            &y,
            &full.narrow(0, p as i64, 1).unwrap(),
            &bound,
            &format!("real decode {p}"),
        ));
    }
    println!("real model: worst |decode − full| / bound = {worst:.3e}");
    let last = full.select(0, (n - 1) as i64).unwrap();
    let (vals, idx) = last.topk(5, -1, true, true).unwrap();
    let vals = vals.to_vec::<f32>().unwrap();
    let idx = idx.to_vec::<i64>().unwrap();
    println!("prompt {text:?} ({n} tokens); top next tokens:");
    for (v, i) in vals.iter().zip(&idx) {
        println!("  {:>8.3}  {:?}", v, tok.decode(&[*i as u32]).unwrap());
    }
}

#[test]
fn smollm2_real_model() {
    let _serial = serial();
    let Some(p) = model_path("smollm2_real_model") else {
        return;
    };
    real_model(&p);
}

/// A decode step captured as a CUDA graph gives the eager decode's logits (within the same
/// rounding bound: attention reads the whole cache buffer under a mask, so its sums may
/// round differently) and the same greedy tokens, on a left-padded batch, after a rollback
/// of the cache too, and makes no host wait. On the CPU there is no graph.
#[test]
fn captured_decode_step_matches_eager_decoding() {
    let _serial = serial();
    let c = tiny_config();
    let (gguf, _, _) = write_tiny(&c, 4, "graph");
    let cpu = Llama::from_gguf_file(&gguf, DType::F32, &Device::Cpu).unwrap();
    let mut cache = cpu.new_cache(&[0], 8).unwrap();
    assert!(cpu.capture_decode(&mut cache).unwrap().is_none());
    let Some(gpu) =
        stride_core::cuda::require_or_skip("captured_decode_step_matches_eager_decoding")
    else {
        return;
    };
    for dt in [DType::F32, DType::BF16] {
        let m = Llama::from_gguf_file(&gguf, dt, &gpu).unwrap();
        let pads = [0usize, 3];
        let width = 7;
        let steps = 24;
        let mut ids = vec![];
        for (r, &p) in pads.iter().enumerate() {
            ids.extend(std::iter::repeat_n(0i64, p));
            ids.extend(tokens(width - p, c.vocab_size, 30 + r as u64));
        }
        let prompt = Tensor::from_vec(ids, [2, width])
            .unwrap()
            .to_device(&gpu)
            .unwrap();
        let mut eager_cache = m.new_cache(&pads, width + steps).unwrap();
        let mut graph_cache = m.new_cache(&pads, width + steps).unwrap();
        let pre = m.forward(&prompt, &mut eager_cache).unwrap();
        m.forward(&prompt, &mut graph_cache).unwrap();
        let graph = m
            .capture_decode(&mut graph_cache)
            .unwrap()
            .expect("a graph on CUDA");
        assert_eq!(
            graph_cache.len(),
            width,
            "capturing must not advance the cache"
        );
        let bound = logit_bounds(&m, width + steps);
        let mut next = pre
            .narrow(1, width as i64 - 1, 1)
            .unwrap()
            .argmax(Some(-1), false)
            .unwrap();
        let mut worst = 0f64;
        for step in 0..steps {
            if step == 16 {
                // roll both caches back four positions and decode on from there
                eager_cache.truncate(width + 12).unwrap();
                graph_cache.truncate(width + 12).unwrap();
            }
            let want = m.forward(&next, &mut eager_cache).unwrap();
            let got = {
                let _no_waits = stride_core::debug::forbid_sync();
                graph.forward(&next, &mut graph_cache).unwrap()
            };
            assert_eq!(graph_cache.len(), eager_cache.len());
            for r in 0..2 {
                worst = worst.max(check_logits(
                    &got.select(0, r).unwrap(),
                    &want.select(0, r).unwrap(),
                    &bound,
                    &format!("{dt} row {r} step {step}"),
                ));
            }
            let a = want.argmax(Some(-1), false).unwrap();
            let b = got.argmax(Some(-1), false).unwrap();
            assert_eq!(
                a.to_vec::<i64>().unwrap(),
                b.to_vec::<i64>().unwrap(),
                "{dt} step {step}: greedy tokens differ"
            );
            next = a;
        }
        println!("{dt}: worst |graph − eager| / bound = {worst:.3e}");
        // a cache the graph was not captured with is refused
        let mut other = m.new_cache(&pads, width + steps).unwrap();
        m.forward(&prompt, &mut other).unwrap();
        let err = graph.forward(&next, &mut other).unwrap_err();
        assert!(err.to_string().contains("not the one"), "{err}");
    }
}

/// `generate` on CUDA decodes through the captured graph by default and gives the tokens of
/// the eager loop (`cuda_graph: false`), for a batch of prompts of different lengths.
#[test]
fn generate_with_the_cuda_graph_gives_the_eager_tokens() {
    let _serial = serial();
    let Some(gpu) =
        stride_core::cuda::require_or_skip("generate_with_the_cuda_graph_gives_the_eager_tokens")
    else {
        return;
    };
    use stride_models::generate::{generate, GenerateConfig};
    use stride_models::sampling::SamplingConfig;
    let c = tiny_config();
    let (gguf, _, _) = write_tiny(&c, 5, "generate_graph");
    let m = Llama::from_gguf_file(&gguf, DType::F32, &gpu).unwrap();
    let tok = stride_models::toy::byte_tokenizer();
    let prompts: Vec<Vec<u32>> = [3usize, 8]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            tokens(n, c.vocab_size, 40 + i as u64)
                .iter()
                .map(|&t| t as u32)
                .collect()
        })
        .collect();
    let run = |cuda_graph| {
        let cfg = GenerateConfig {
            max_tokens: 40,
            sampling: SamplingConfig::greedy(),
            eos_tokens: Some(vec![]),
            cuda_graph,
            ..Default::default()
        };
        generate(&m, &tok, &prompts, &cfg, |_, _| {}).unwrap()
    };
    let graphed = run(true);
    let eager = run(false);
    assert!(graphed.stats.cuda_graph && !eager.stats.cuda_graph);
    for (g, e) in graphed.completions.iter().zip(&eager.completions) {
        assert_eq!(g.tokens, e.tokens);
        assert_eq!(g.tokens.len(), 40);
    }
}
