//! `stride bench decode`: a Llama decoder's prefill and per-token decode rate — eager, and
//! (on CUDA) with the decode step captured as a CUDA graph — beside the floor (the weight
//! bytes a token reads ÷ the device's copy bandwidth) and PyTorch in the same run
//! (`scripts/llama_torch_decode.py`: eager, CUDA graph, torch.compile).
//!
//! The model is SmolLM2-135M's shape with random weights (decode speed does not depend on the
//! values), or a GGUF file with `--model`. Greedy decoding, batch rows of random prompts; the
//! host reads every token back, as a generation loop does, on both sides.

use serde_json::{json, Value};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
use stride::models::llama::{
    LinearWeight, Llama, LlamaConfig, LlamaLayer, LlamaWeights, WeightFormat,
};
use stride::models::{CausalLm, KvCache};
use stride::nn::functional::RotaryStyle;
use stride::{DType, Device, Generator, Tensor};
use stride_gguf::GgmlType;
use stride_quant::QMatrix;

#[derive(clap::Args)]
pub struct DecodeArgs {
    /// `cuda`, `cuda:N` or `cpu`.
    #[arg(long, default_value = "cuda")]
    device: String,
    /// Weights and activations: bf16, f16 or f32 (f32 activations with --weights quantized).
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// `quantized`: the matrices as GGUF blocks like SmolLM2-135M-Instruct.Q4_1.gguf's
    /// (Q4_1, the embedding table Q8_0), multiplied by stride-quant's kernels on the device;
    /// `dense` [default]: --dtype tensors.
    #[arg(long, default_value = "dense", value_name = "dense|quantized")]
    weights: String,
    /// A GGUF file to load (dequantized to --dtype) instead of SmolLM2-135M's shape with
    /// random weights.
    #[arg(long, value_name = "FILE")]
    model: Option<std::path::PathBuf>,
    /// Prompt tokens per row.
    #[arg(long, default_value_t = 128)]
    prompt: usize,
    /// Tokens decoded per row.
    #[arg(long, default_value_t = 256)]
    tokens: usize,
    /// Rows decoded together.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Don't run the PyTorch peer.
    #[arg(long)]
    no_peer: bool,
    /// The peer's modes.
    #[arg(long, default_value = "eager,graph,compile")]
    peer_modes: String,
    /// The Python interpreter that runs the peer.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also profile eager decode steps and print where their device time went, op by op.
    #[arg(long)]
    profile: bool,
}

/// SmolLM2-135M's shape with random weights quantized as its Q4_1 GGUF file is: Q4_1
/// matrices, the (tied) embedding table Q8_0, f32 norms; on `device`.
fn random_quantized(device: &Device) -> Result<Llama, String> {
    let e = |e: stride::Error| e.to_string();
    let c = smollm2();
    let dense =
        LlamaWeights::random(&c, DType::F32, &Device::Cpu, Some(&Generator::new(0))).map_err(e)?;
    let quantize = |w: &LinearWeight, ty: GgmlType| -> Result<LinearWeight, String> {
        let t = w.as_dense().ok_or("random weights are dense")?;
        let (rows, cols) = (t.shape()[0], t.shape()[1]);
        let q = QMatrix::quantize(ty, rows, cols, &t.to_vec::<f32>().map_err(e)?)
            .map_err(|e| e.to_string())?;
        Ok(LinearWeight::Quantized(Arc::new(q)))
    };
    let embed = quantize(&dense.embed, GgmlType::Q8_0)?;
    let layers = dense
        .layers
        .iter()
        .map(|l| {
            Ok(LlamaLayer {
                attn_norm: l.attn_norm.clone(),
                wq: quantize(&l.wq, GgmlType::Q4_1)?,
                wk: quantize(&l.wk, GgmlType::Q4_1)?,
                wv: quantize(&l.wv, GgmlType::Q4_1)?,
                wo: quantize(&l.wo, GgmlType::Q4_1)?,
                ffn_norm: l.ffn_norm.clone(),
                w_gate: quantize(&l.w_gate, GgmlType::Q4_1)?,
                w_up: quantize(&l.w_up, GgmlType::Q4_1)?,
                w_down: quantize(&l.w_down, GgmlType::Q4_1)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let w = LlamaWeights {
        lm_head: embed.clone(),
        embed,
        layers,
        output_norm: dense.output_norm.clone(),
    };
    let w = if device.is_cpu() {
        w
    } else {
        w.quantized_to_device(device).map_err(e)?
    };
    Llama::new(c, w, RotaryStyle::Interleaved).map_err(e)
}

/// SmolLM2-135M's hyperparameters.
fn smollm2() -> LlamaConfig {
    LlamaConfig {
        n_layers: 30,
        dim: 576,
        ffn_dim: 1536,
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        rope_dim: 64,
        rope_base: 100000.0,
        rms_eps: 1e-5,
        context_len: 8192,
        vocab_size: 49152,
        tied_embeddings: true,
    }
}

pub fn run(a: DecodeArgs) -> Result<(), String> {
    let device = crate::train::parse_device(&a.device)?;
    let dtype = DType::parse(&a.dtype)
        .filter(|d| d.is_float())
        .ok_or_else(|| format!("unsupported --dtype {:?}; use bf16, f16 or f32", a.dtype))?;
    if a.prompt == 0 || a.tokens == 0 || a.batch == 0 || a.reps == 0 {
        return Err("--prompt, --tokens, --batch and --reps must be at least 1".into());
    }
    let e = |e: stride::Error| e.to_string();
    let quantized = match a.weights.as_str() {
        "dense" => false,
        "quantized" => true,
        w => return Err(format!("unknown --weights {w:?}; use dense or quantized")),
    };
    let model = match (&a.model, quantized) {
        (Some(p), false) => Llama::from_gguf_file(p, dtype, &device).map_err(e)?,
        (Some(p), true) => {
            Llama::from_gguf_file_with(p, WeightFormat::Quantized, &device).map_err(e)?
        }
        (None, false) => {
            Llama::random(smollm2(), dtype, &device, Some(&Generator::new(0))).map_err(e)?
        }
        (None, true) => random_quantized(&device)?,
    };
    let dtype = model.dtype();
    let c = model.config().clone();
    if a.prompt + a.tokens > c.context_len {
        return Err(format!(
            "--prompt + --tokens ({}) exceed the model's context length {}",
            a.prompt + a.tokens,
            c.context_len
        ));
    }
    // the bytes one decode token reads: every matrix once (the embedding table once, as the
    // output head when tied; its row lookup is negligible), the norms
    let w = model.weights();
    let weight_bytes: usize = w.nbytes()
        - if c.tied_embeddings {
            0
        } else {
            w.embed.nbytes()
        };
    let bandwidth = match device {
        Device::Cuda(i) => Some(stride::cuda::memcpy_bandwidth(i, 256 << 20, 20).map_err(e)?),
        _ => None,
    };
    let floor = bandwidth.map(|bw| bw / weight_bytes as f64);

    let mut modes = vec![("eager", false)];
    if !device.is_cpu() {
        modes.push(("graph", true));
    }
    let mut rows = Vec::new();
    for (name, graph) in modes {
        let r = measure(&model, &a, graph).map_err(e)?;
        rows.push((name, r));
    }
    let profile = if a.profile {
        Some(profile_steps(&model, &a).map_err(e)?)
    } else {
        None
    };
    let peer = if a.no_peer || device.is_cpu() {
        None
    } else {
        Some(torch(&a, &c).unwrap_or_else(|e| json!({ "error": e })))
    };
    let doc = json!({
        "model": {"layers": c.n_layers, "dim": c.dim, "vocab": c.vocab_size, "dtype": dtype.to_string(),
                  "weights": model.weight_format().to_string(),
                  "file": a.model.as_ref().map(|p| p.display().to_string())},
        "device": device.to_string(),
        "batch": a.batch, "prompt": a.prompt, "tokens": a.tokens,
        "weight_bytes_per_token": weight_bytes,
        "copy_bandwidth_gb_s": bandwidth.map(|b| b / 1e9),
        "floor_tok_s": floor,
        "stride": rows.iter().map(|(n, r)| (n.to_string(), r.clone())).collect::<serde_json::Map<_, _>>(),
        "pytorch": peer,
    });
    if a.json {
        println!("{doc}");
        return Ok(());
    }
    println!(
        "{} layers × {} wide, {} vocabulary, weights {}, {dtype} activations on {device}; batch {}, prompt {}, {} new tokens",
        c.n_layers,
        c.dim,
        c.vocab_size,
        model.weight_format(),
        a.batch,
        a.prompt,
        a.tokens
    );
    if let (Some(bw), Some(f)) = (bandwidth, floor) {
        println!(
            "floor: {:.1} MB of weights a token ÷ {:.0} GB/s copy bandwidth = {:.0} tokens/s per row",
            weight_bytes as f64 / 1e6,
            bw / 1e9,
            f
        );
    }
    println!(
        "{:<24} {:>14} {:>14} {:>12} {:>14}",
        "", "prefill tok/s", "decode tok/s", "vs floor", "launches/token"
    );
    let line = |name: &str, r: &Value| {
        let dec = r["decode_tok_s"].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:<24} {:>14.0} {:>14.1} {:>12} {:>14}",
            name,
            r["prefill_tok_s"].as_f64().unwrap_or(f64::NAN),
            dec,
            floor.map_or("-".into(), |f| format!(
                "{:.1}%",
                100.0 * dec / a.batch as f64 / f
            )),
            r["launches_per_token"]
                .as_f64()
                .map_or("-".into(), |l| format!("{l:.0}"))
        );
    };
    for (n, r) in &rows {
        line(&format!("stride {n}"), r);
    }
    if let Some(p) = &peer {
        match p.get("error") {
            Some(err) => println!("pytorch: {err}"),
            None => {
                for m in a.peer_modes.split(',') {
                    if let Some(r) = p.get(m) {
                        match r.get("error") {
                            Some(err) => println!("pytorch {m}: {err}"),
                            None => line(&format!("pytorch {m}"), r),
                        }
                    }
                }
            }
        }
    }
    if let Some(p) = &profile {
        println!("{p}");
    }
    Ok(())
}

/// Where the device time of eager decode steps goes: the costliest (op, operands) pairs over
/// `STEPS` steps, per step.
fn profile_steps(model: &Llama, a: &DecodeArgs) -> stride::Result<String> {
    const STEPS: usize = 4;
    let dev = model.device();
    let prompt = Tensor::zeros([a.batch, a.prompt], DType::I64, &dev)?;
    let mut cache = model.new_cache(&vec![0; a.batch], a.prompt + STEPS + 1)?;
    let logits = model.forward(&prompt, &mut cache)?;
    let mut next = logits
        .narrow(1, a.prompt as i64 - 1, 1)?
        .argmax(Some(-1), false)?;
    next.to_vec::<i64>()?;
    let p = stride::debug::Profiler::start();
    for _ in 0..STEPS {
        next = model.forward(&next, &mut cache)?.argmax(Some(-1), false)?;
    }
    next.to_vec::<i64>()?;
    let r = p.stop()?;
    let mut by: std::collections::BTreeMap<(String, String), (usize, f64)> = Default::default();
    let mut total = 0.0;
    for e in r.events.iter().filter(|e| e.kind == "op") {
        let v = by.entry((e.name.clone(), e.operands.clone())).or_default();
        let t = e.device_s.unwrap_or(e.host_s);
        v.0 += 1;
        v.1 += t;
        total += t;
    }
    let mut top: Vec<_> = by.into_iter().collect();
    top.sort_by(|x, y| y.1 .1.total_cmp(&x.1 .1));
    let mut out = format!(
        "one eager decode step, op by op ({} ops, {:.3} ms of device time a step):\n",
        r.events.iter().filter(|e| e.kind == "op").count() / STEPS,
        total * 1e3 / STEPS as f64
    );
    for ((n, o), (c, s)) in top.iter().take(30) {
        out += &format!(
            "{:>9.1} µs {:>5}× {n} {o}\n",
            s * 1e6 / STEPS as f64,
            c / STEPS
        );
    }
    Ok(out)
}

fn launch_count(dev: Device) -> u64 {
    match dev {
        Device::Cuda(i) => stride::cuda::launch_count(i),
        _ => 0,
    }
}

/// Prefill and greedy decode rates (medians over `reps`), the host reading every token.
fn measure(model: &Llama, a: &DecodeArgs, graph: bool) -> stride::Result<Value> {
    let dev = model.device();
    let v = model.config().vocab_size as u64;
    let ids: Vec<i64> = (0..a.batch * a.prompt)
        .map(|i| ((i as u64).wrapping_mul(2654435761) % v) as i64)
        .collect();
    let prompt = Tensor::from_vec(ids, [a.batch, a.prompt])?.to_device(&dev)?;
    let pads = vec![0usize; a.batch];
    let mut prefill = Vec::new();
    let mut decode = Vec::new();
    let mut capture = Vec::new();
    let mut per_token = Vec::new();
    for rep in 0..a.reps + 1 {
        let mut cache = model.new_cache(&pads, a.prompt + a.tokens + 1)?;
        let t0 = Instant::now();
        let logits = model.forward(&prompt, &mut cache)?;
        let mut next = logits
            .narrow(1, a.prompt as i64 - 1, 1)?
            .argmax(Some(-1), false)?;
        next.to_vec::<i64>()?;
        let t1 = Instant::now();
        let step = if graph {
            model.capture_decode(&mut cache)?
        } else {
            None
        };
        let t2 = Instant::now();
        let launches = launch_count(dev);
        for _ in 0..a.tokens {
            let logits = match &step {
                Some(g) => g.forward(&next, &mut cache)?,
                None => model.forward(&next, &mut cache)?,
            };
            next = logits.argmax(Some(-1), false)?;
            next.to_vec::<i64>()?; // the host reads each token
        }
        let t3 = Instant::now();
        per_token.push((launch_count(dev) - launches) as f64 / a.tokens as f64);
        debug_assert_eq!(cache.len(), a.prompt + a.tokens);
        if rep > 0 {
            // the first repetition warms up (kernel compilation, allocator)
            prefill.push((a.batch * a.prompt) as f64 / (t1 - t0).as_secs_f64());
            decode.push((a.batch * a.tokens) as f64 / (t3 - t2).as_secs_f64());
            capture.push((t2 - t1).as_secs_f64());
        }
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let best = decode.iter().cloned().fold(0f64, f64::max);
    Ok(json!({
        "prefill_tok_s": med(prefill),
        "decode_tok_s": med(decode),
        "decode_best_tok_s": best,
        "capture_s": med(capture),
        // kernel launches (copies and memsets included) a decode token takes on the host's
        // side: one graph launch plus the few around it when captured
        "launches_per_token": med(per_token),
    }))
}

fn torch(a: &DecodeArgs, c: &LlamaConfig) -> Result<Value, String> {
    let script = super::peer_script("llama_torch_decode.py")?;
    let mut cmd = Command::new(&a.python);
    cmd.arg(&script);
    for (k, v) in [
        ("--layers", c.n_layers.to_string()),
        ("--dim", c.dim.to_string()),
        ("--ffn", c.ffn_dim.to_string()),
        ("--heads", c.n_heads.to_string()),
        ("--kv-heads", c.n_kv_heads.to_string()),
        ("--vocab", c.vocab_size.to_string()),
        ("--rope-base", c.rope_base.to_string()),
        ("--batch", a.batch.to_string()),
        ("--prompt", a.prompt.to_string()),
        ("--tokens", a.tokens.to_string()),
        ("--dtype", a.dtype.clone()),
        ("--modes", a.peer_modes.clone()),
        ("--reps", a.reps.to_string()),
    ] {
        cmd.args([k, &v]);
    }
    let stdout = super::run_peer(&mut cmd, &script)?;
    let out = String::from_utf8_lossy(&stdout);
    let line = out.lines().last().unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("bad JSON from the peer ({e}): {line}"))
}
