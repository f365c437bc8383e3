//! `stride bench gpt`: training steps per second of a GPT, stride beside PyTorch eager and
//! `torch.compile` (`scripts/gpt_torch.py bench`, the same model, sizes and bf16 autocast)
//! measured in the same invocation, with the model FLOPs utilisation and peak memory.
//!
//! With `--moe-experts E` the model is the mixture of experts (top-`--moe-top-k`), the peers
//! are PyTorch eager with `torch._grouped_mm` and with the usual per-expert loop, and the
//! grouped product is timed alone at the layer's shapes beside `torch._grouped_mm`.
//!
//! Model FLOPs per token are PaLM's count, `6·N + 12·L·T·D` (N parameters without the
//! embedding table's input use, L layers, T the sequence, D the width), the figure nanoGPT and
//! llm.c report; the floor is those FLOPs at the H100 SXM's dense bf16 peak (989 TFLOP/s).

use serde_json::{json, Value};
use std::process::Command;
use std::time::Instant;
use stride::models::gpt::{Corpus, GptConfig, GptTrainConfig, GptTrainer};
use stride::{DType, Device, Generator, Tensor};

/// The benchmarked GPT's size (GPT-2-small by default, SmolLM2's vocabulary), shared by
/// `bench gpt` and `bench ddp` and passed on to their PyTorch peers.
#[derive(clap::Args, Clone)]
pub struct GptShape {
    #[arg(long, default_value_t = 12)]
    pub layers: usize,
    #[arg(long, default_value_t = 768)]
    pub dim: usize,
    #[arg(long, default_value_t = 12)]
    pub heads: usize,
    #[arg(long, default_value_t = 1024)]
    pub context: usize,
    /// Sequences per step (per GPU in `bench ddp`).
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    #[arg(long, default_value_t = 49152)]
    pub vocab: usize,
}

impl GptShape {
    /// The flags that give the same size to a peer script.
    pub fn peer_args(&self) -> Vec<String> {
        [
            ("--layers", self.layers),
            ("--dim", self.dim),
            ("--heads", self.heads),
            ("--context", self.context),
            ("--batch", self.batch),
            ("--vocab", self.vocab),
        ]
        .iter()
        .flat_map(|(k, v)| [k.to_string(), v.to_string()])
        .collect()
    }
}

/// The H100 SXM's dense bf16 tensor-core peak, FLOP/s.
const H100_BF16_PEAK: f64 = 989e12;

#[derive(clap::Args)]
pub struct GptArgs {
    /// `cuda`, `cuda:N` or `cpu`.
    #[arg(long, default_value = "cuda")]
    device: String,
    #[command(flatten)]
    shape: GptShape,
    /// `modern` or `gpt2`.
    #[arg(long, default_value = "modern")]
    style: String,
    /// Timed steps (after 5 untimed ones).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// A mixture of experts with this many experts per block.
    #[arg(long, value_name = "E")]
    moe_experts: Option<usize>,
    /// Experts per token.
    #[arg(long, default_value_t = 2)]
    moe_top_k: usize,
    /// Each expert's hidden width [default: the dense feed-forward's].
    #[arg(long)]
    moe_ffn: Option<usize>,
    /// Don't run the PyTorch peer.
    #[arg(long)]
    no_peer: bool,
    /// The Python interpreter that runs the peer.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also profile two more steps and print where their time went, op by op.
    #[arg(long)]
    profile: bool,
}

pub fn run(a: GptArgs) -> Result<(), String> {
    let device = crate::train::parse_device(&a.device)?;
    let model = match a.style.as_str() {
        "modern" => GptConfig::modern(
            a.shape.vocab,
            a.shape.context,
            a.shape.layers,
            a.shape.heads,
            a.shape.dim,
        ),
        "gpt2" => GptConfig::gpt2(
            a.shape.vocab,
            a.shape.context,
            a.shape.layers,
            a.shape.heads,
            a.shape.dim,
        ),
        s => return Err(format!("unknown --style {s:?}; use modern or gpt2")),
    };
    let model = match a.moe_experts {
        Some(e) => {
            let f = a.moe_ffn.unwrap_or(model.ffn_dim);
            model.with_moe(stride::models::gpt::MoeConfig::new(e, a.moe_top_k, f))
        }
        None => model,
    };
    let mut t = bench_trainer(model.clone(), a.shape.batch, a.shape.vocab, device)?;
    t.set_loss_every(0);
    let say = |s: &str| {
        if !a.json {
            eprintln!("{s}")
        }
    };
    say("stride: 5 untimed steps ...");
    for _ in 0..5 {
        t.step().map_err(|e| e.to_string())?;
    }
    t.read_losses().map_err(|e| e.to_string())?;
    let mem0 = stride::memory_stats(device);
    say(&format!("stride: {} timed steps ...", a.steps));
    let start = Instant::now();
    for _ in 0..a.steps {
        t.step().map_err(|e| e.to_string())?;
    }
    let losses = t.read_losses().map_err(|e| e.to_string())?.to_vec();
    let secs = start.elapsed().as_secs_f64();
    let mem1 = stride::memory_stats(device);
    let profile = if a.profile {
        let p = stride::debug::Profiler::start();
        for _ in 0..2 {
            t.step().map_err(|e| e.to_string())?;
        }
        t.read_losses().map_err(|e| e.to_string())?;
        let r = p.stop().map_err(|e| e.to_string())?;
        // the costliest (op, operands) pairs: which copies and sums, of what
        let mut by: std::collections::BTreeMap<(String, String), (usize, f64)> = Default::default();
        for e in r.events.iter().filter(|e| e.kind == "op") {
            let v = by.entry((e.name.clone(), e.operands.clone())).or_default();
            v.0 += 1;
            v.1 += e.device_s.unwrap_or(e.host_s);
        }
        let mut top: Vec<_> = by.into_iter().collect();
        top.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let lines: Vec<String> = top
            .iter()
            .take(25)
            .map(|((n, o), (c, s))| format!("{:>9.3} ms {c:>5}× {n} {o}", s * 1e3))
            .collect();
        Some(format!(
            "{}\ncostliest (op, operands), two steps:\n{}",
            r.table(),
            lines.join("\n")
        ))
    } else {
        None
    };
    let params = stride::nn::Module::num_parameters(t.model());
    // a token meets top_k of the experts: the others' parameters do no work for it
    let idle = model.moe.as_ref().map_or(0, |m| {
        a.shape.layers * (m.experts - m.top_k) * 3 * a.shape.dim * m.expert_ffn_dim
    });
    let active = params - idle;
    let tokens = a.steps as f64 * a.shape.batch as f64 * a.shape.context as f64;
    let flops_per_token = 6.0 * active as f64
        + 12.0 * a.shape.layers as f64 * a.shape.context as f64 * a.shape.dim as f64;
    let tps = tokens / secs;
    let mfu = |tps: f64| tps * flops_per_token / H100_BF16_PEAK;
    let mut peers = vec![];
    let peer_runs: &[(bool, &str)] = match a.moe_experts {
        None => &[(false, ""), (true, "")],
        Some(_) => &[(false, "grouped"), (false, "loop"), (true, "grouped")],
    };
    if !a.no_peer && matches!(device, Device::Cuda(_)) {
        for &(compile, experts) in peer_runs {
            say(&format!(
                "PyTorch {} {experts} ...",
                if compile { "torch.compile" } else { "eager" }
            ));
            peers.push(torch(&a, compile, experts).unwrap_or_else(|e| json!({"error": e})));
        }
    }
    let grouped = match (&model.moe, device) {
        (Some(m), Device::Cuda(_)) => {
            say("grouped products alone ...");
            let tokens = a.shape.batch * a.shape.context * m.top_k;
            Some(grouped_products(
                &a,
                tokens,
                m.experts,
                a.shape.dim,
                m.expert_ffn_dim,
                device,
            )?)
        }
        _ => None,
    };
    let doc = json!({
        "model": {"style": a.style, "layers": a.shape.layers, "dim": a.shape.dim, "heads": a.shape.heads,
                  "context": a.shape.context, "batch": a.shape.batch, "vocab": a.shape.vocab, "params": params,
                  "active_params": active,
                  "moe": model.moe.as_ref().map(|m| json!({"experts": m.experts, "top_k": m.top_k, "expert_ffn_dim": m.expert_ffn_dim}))},
        "grouped_products": grouped,
        "device": device.to_string(),
        "flops_per_token": flops_per_token,
        "stride": {"tokens_per_s": tps, "ms_per_step": secs * 1e3 / a.steps as f64,
                   "mfu": mfu(tps), "peak_bytes": mem1.peak_bytes,
                   "allocated_bytes_before": mem0.allocated_bytes,
                   "allocated_bytes_after": mem1.allocated_bytes,
                   "last_loss": losses.last()},
        "peers": peers,
    });
    if a.json {
        println!("{doc}");
        return Ok(());
    }
    if let Some(table) = &profile {
        println!("two steps of stride, op by op:\n{table}");
    }
    println!(
        "GPT {} style{}, {} layers × {} wide × {} heads, sequence {}, batch {}, vocabulary {} ({} parameters, {} active per token), {} on {}",
        a.style,
        model.moe.as_ref().map_or(String::new(), |m| format!(
            ", mixture of {} experts (width {}, top-{})",
            m.experts, m.expert_ffn_dim, m.top_k
        )),
        a.shape.layers, a.shape.dim, a.shape.heads, a.shape.context, a.shape.batch, a.shape.vocab, params, active,
        if matches!(device, Device::Cuda(_)) { "bf16 autocast" } else { "f32" },
        device
    );
    println!("model FLOPs per token {:.3e} (6N + 12·L·T·D, N the parameters a token meets); MFU against 989 TFLOP/s (H100 SXM dense bf16)", flops_per_token);
    println!(
        "{:<22} {:>12} {:>10} {:>7} {:>12}",
        "", "tokens/s", "ms/step", "MFU", "peak MiB"
    );
    let row = |name: &str, tps: f64, ms: f64, peak: f64| {
        println!(
            "{name:<22} {tps:>12.0} {ms:>10.1} {:>6.1}% {:>12.0}",
            100.0 * mfu(tps),
            peak / 1048576.0
        )
    };
    row(
        "stride",
        tps,
        secs * 1e3 / a.steps as f64,
        mem1.peak_bytes as f64,
    );
    for p in &peers {
        match p["tokens_per_s"].as_f64() {
            Some(v) => row(
                &format!(
                    "{}{}",
                    p["peer"].as_str().unwrap_or("pytorch"),
                    p["experts"]
                        .as_str()
                        .map_or(String::new(), |e| format!(" ({e})"))
                ),
                v,
                p["ms_per_step"].as_f64().unwrap_or(f64::NAN),
                p["peak_bytes"].as_f64().unwrap_or(f64::NAN),
            ),
            None => println!("pytorch: {}", p["error"]),
        }
    }
    println!(
        "allocated bytes after 5 steps {} and after {} more {} (flat: no growth per step)",
        mem0.allocated_bytes, a.steps, mem1.allocated_bytes
    );
    if let Some(g) = &grouped {
        println!("grouped products alone (bf16, tokens balanced over the experts), TFLOP/s (floor: 989):");
        for r in g.as_array().into_iter().flatten() {
            println!(
                "  {:<34} stride {:>6.1}   torch._grouped_mm {:>6.1}",
                r["shape"].as_str().unwrap_or(""),
                r["stride_tflops"].as_f64().unwrap_or(f64::NAN),
                r["torch_tflops"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    Ok(())
}

/// A trainer of `model` for timing: `batch` sequences a step of random tokens (the speed does
/// not depend on the text), AdamW, bf16 autocast on CUDA.
pub(super) fn bench_trainer(
    model: GptConfig,
    batch: usize,
    vocab: usize,
    device: Device,
) -> Result<GptTrainer, String> {
    let context = model.context_len;
    let c = GptTrainConfig {
        model,
        batch,
        steps: 1_000_000_000,
        warmup: 0,
        lr: 1e-4,
        min_lr: 1e-5,
        betas: (0.9, 0.95),
        autocast: matches!(device, Device::Cuda(_)).then_some(DType::BF16),
        device,
        ..GptTrainConfig::default()
    };
    let n = batch
        .checked_mul(context.saturating_add(1))
        .and_then(|n| n.checked_mul(4))
        .ok_or_else(|| format!("--batch {batch} × --context {context} is too large"))?;
    let ids = Tensor::randint(
        0,
        vocab as i64,
        [n],
        DType::I64,
        &Device::Cpu,
        Some(&Generator::new(0)),
    )
    .and_then(|t| t.to_vec::<i64>())
    .map_err(|e| e.to_string())?;
    GptTrainer::new(
        c,
        Corpus {
            train: ids.clone(),
            val: ids,
        },
    )
    .map_err(|e| e.to_string())
}

/// The MoE layer's grouped products timed alone — `(rows, dim)·(E, dim, 2F)`, `(rows, F)·(E,
/// F, dim)` forward and the weight gradient `(dim, rows)·(rows, 2F)` — with the rows split
/// evenly over the experts, in bf16; beside `torch._grouped_mm` on the same shapes.
fn grouped_products(
    a: &GptArgs,
    rows: usize,
    experts: usize,
    dim: usize,
    ffn: usize,
    device: Device,
) -> Result<Value, String> {
    let e = |x: stride::Error| x.to_string();
    let g = Generator::new(1);
    let randn = |s: &[usize]| Tensor::randn(s.to_vec(), DType::BF16, &device, Some(&g));
    let per = rows / experts;
    let offs: Vec<i32> = (1..=experts).map(|i| (i * per) as i32).collect();
    let rows = per * experts;
    let offs = Tensor::from_vec(offs, [experts])
        .and_then(|t| t.to_device(&device))
        .map_err(e)?;
    let cases: Vec<(String, Tensor, Tensor, f64)> = vec![
        (
            format!("({rows}, {dim})·({experts}, {dim}, {})", 2 * ffn),
            randn(&[rows, dim]).map_err(e)?,
            randn(&[experts, dim, 2 * ffn]).map_err(e)?,
            2.0 * (rows * dim * 2 * ffn) as f64,
        ),
        (
            format!("({rows}, {ffn})·({experts}, {ffn}, {dim})"),
            randn(&[rows, ffn]).map_err(e)?,
            randn(&[experts, ffn, dim]).map_err(e)?,
            2.0 * (rows * ffn * dim) as f64,
        ),
        (
            format!("({dim}, {rows})·({rows}, {}) wgrad", 2 * ffn),
            randn(&[rows, dim]).map_err(e)?.t().map_err(e)?,
            randn(&[rows, 2 * ffn]).map_err(e)?,
            2.0 * (rows * dim * 2 * ffn) as f64,
        ),
    ];
    let peer = if a.no_peer {
        None
    } else {
        let script = super::peer_script("gpt_torch.py")?;
        let mut cmd = Command::new(&a.python);
        cmd.arg(&script).arg("grouped");
        for (k, v) in [
            ("--rows", rows),
            ("--experts", experts),
            ("--dim", dim),
            ("--ffn", ffn),
        ] {
            cmd.args([k, &v.to_string()]);
        }
        super::run_peer(&mut cmd, &script).ok().and_then(|o| {
            serde_json::from_slice::<Value>(
                String::from_utf8_lossy(&o)
                    .lines()
                    .last()
                    .unwrap_or("")
                    .as_bytes(),
            )
            .ok()
        })
    };
    let ordinal = match device {
        Device::Cuda(i) => i,
        Device::Cpu | Device::Wgpu(_) => {
            return Err("the grouped products are timed on a CUDA GPU".into())
        }
    };
    let mut out = vec![];
    for (i, (shape, x, w, flops)) in cases.iter().enumerate() {
        let run = || x.grouped_matmul(w, &offs);
        for _ in 0..3 {
            run().map_err(e)?;
        }
        stride::cuda::synchronize(ordinal).map_err(e)?;
        let reps = 20;
        let t0 = Instant::now();
        for _ in 0..reps {
            run().map_err(e)?;
        }
        stride::cuda::synchronize(ordinal).map_err(e)?;
        let secs = t0.elapsed().as_secs_f64() / reps as f64;
        let torch = peer.as_ref().and_then(|p| p["tflops"][i].as_f64());
        out.push(
            json!({"shape": shape, "stride_tflops": flops / secs / 1e12, "torch_tflops": torch}),
        );
    }
    Ok(Value::Array(out))
}

fn torch(a: &GptArgs, compile: bool, experts: &str) -> Result<Value, String> {
    let script = super::peer_script("gpt_torch.py")?;
    let mut cmd = Command::new(&a.python);
    cmd.arg(&script).arg("bench");
    cmd.args(a.shape.peer_args());
    cmd.args(["--steps", &a.steps.to_string()]);
    cmd.args(["--style", &a.style]);
    if compile {
        cmd.arg("--compile");
    }
    if let Some(e) = a.moe_experts {
        cmd.args([
            "--experts",
            &e.to_string(),
            "--top-k",
            &a.moe_top_k.to_string(),
        ]);
        if let Some(f) = a.moe_ffn {
            cmd.args(["--expert-ffn", &f.to_string()]);
        }
        cmd.args(["--impl", experts]);
    }
    let stdout = super::run_peer(&mut cmd, &script)?;
    let out = String::from_utf8_lossy(&stdout);
    let line = out.lines().last().unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("bad JSON from the peer ({e}): {line}"))
}
