//! `stride train gpt`: train a GPT on the Shakespeare text (fetched on first use), with a
//! progress bar (loss, tokens/s, ETA), validation on held-out plays, checkpoints, a sample,
//! a PNG of the curves and `--json`; and `stride sample`, which continues a prompt from a
//! checkpoint.
//!
//! ```text
//! stride train gpt [--moe-experts 8 --moe-top-k 2] [--style modern|gpt2] [--layers 4] [--heads 4] [--dim 128] [--context 64]
//!                  [--tokenizer bytes|smollm2] [--batch 12] [--accum 1] [--steps 1500] [--stop-at N]
//!                  [--lr 1e-3] [--min-lr 1e-4] [--warmup 100] [--weight-decay 0.1]
//!                  [--beta2 0.99] [--grad-clip 1] [--dropout 0] [--eval-every 250]
//!                  [--eval-batches 20] [--seed 0] [--device cpu | --devices cuda:0,cuda:1 | --gpus N] [--zero] [--dtype f32]
//!                  [--autocast bf16|f16|none] [--save PATH] [--save-every N] [--resume PATH]
//!                  [--sample-tokens 500] [--prompt TEXT] [--json] [--plot gpt_loss.png | --no-plot]
//! stride sample --checkpoint PATH [--prompt TEXT] [--tokens 500] [--temperature 0.8] [--seed 0]
//! ```

use crate::plot::{self, Line, Scale};
use crate::train::parse_device;
use indicatif::{ProgressBar, ProgressStyle};
use plotters::style::{BLUE, RED};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;
use stride::distributed::Launched;
use stride::models::gpt::{
    sample_window, Corpus, GptConfig, GptTrainConfig, GptTrainer, MoeConfig, TokenizerKind,
};
use stride::models::SamplingConfig;
use stride::{DType, Device};

#[derive(clap::Args)]
pub struct GptArgs {
    /// `modern` (RMSNorm, rotary, SwiGLU) or `gpt2` (LayerNorm, learned positions, GELU,
    /// biases); both tie the embeddings.
    #[arg(long, default_value = "modern")]
    style: String,
    /// Transformer blocks [default: 4].
    #[arg(long)]
    layers: Option<usize>,
    /// Attention heads [default: 4].
    #[arg(long)]
    heads: Option<usize>,
    /// Model width [default: 128].
    #[arg(long)]
    dim: Option<usize>,
    /// Tokens per training sequence, the model's context length [default: 64].
    #[arg(long)]
    context: Option<usize>,
    /// A mixture of experts in every block with this many SwiGLU experts (the modern style);
    /// a dense feed-forward without it.
    #[arg(long, value_name = "E")]
    moe_experts: Option<usize>,
    /// Experts each token is sent to [default: 2].
    #[arg(long, value_name = "K")]
    moe_top_k: Option<usize>,
    /// Hidden width of each expert [default: the dense feed-forward's].
    #[arg(long, value_name = "F")]
    moe_ffn: Option<usize>,
    /// Capacity factor: each expert takes at most ⌈factor·tokens·K/E⌉ tokens a batch and the
    /// rest of its choices are dropped [default: dropless].
    #[arg(long, value_name = "FACTOR")]
    moe_capacity: Option<f64>,
    /// `bytes` (259 tokens, loss in nats per byte) or `smollm2` (SmolLM2's 49,152-token BPE,
    /// read from its GGUF file, fetched on first use).
    #[arg(long, default_value = "bytes")]
    tokenizer: String,
    /// Sequences per micro-batch [default: 12].
    #[arg(long)]
    batch: Option<usize>,
    /// Micro-batches per step (gradient accumulation) [default: 1].
    #[arg(long)]
    accum: Option<usize>,
    /// Steps of the schedule; the run stops there [default: 1500].
    #[arg(long)]
    steps: Option<u64>,
    /// Stop after this many steps (of the --steps schedule), e.g. to checkpoint part of a run
    /// and resume it later [default: --steps].
    #[arg(long, value_name = "N")]
    stop_at: Option<u64>,
    /// Peak learning rate [default: 1e-3].
    #[arg(long)]
    lr: Option<f64>,
    /// Final learning rate of the cosine decay [default: 1e-4].
    #[arg(long)]
    min_lr: Option<f64>,
    /// Warmup steps [default: 100].
    #[arg(long)]
    warmup: Option<u64>,
    /// AdamW weight decay on matrices and embeddings [default: 0.1].
    #[arg(long)]
    weight_decay: Option<f64>,
    /// AdamW's β₂ [default: 0.99].
    #[arg(long)]
    beta2: Option<f64>,
    /// Clip the gradient norm to this; 0 turns clipping off [default: 1].
    #[arg(long)]
    grad_clip: Option<f64>,
    /// Dropout on embeddings, attention and residual branches [default: 0].
    #[arg(long)]
    dropout: Option<f64>,
    /// Evaluate the validation loss every N steps (and at the end).
    #[arg(long, default_value_t = 250, value_name = "N")]
    eval_every: u64,
    /// Validation batches per evaluation [default: 20].
    #[arg(long)]
    eval_batches: Option<usize>,
    /// Seeds the weights, the batches and dropout [default: 0].
    #[arg(long)]
    seed: Option<u64>,
    /// `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Train data-parallel on these devices, one process each, as torchrun would start them
    /// (`cuda:0,cuda:1`; `cpu,cpu` runs CPU processes over TCP): every rank takes its share
    /// of the --batch sequences and the gradients are averaged over NCCL (or TCP).
    #[arg(long, value_name = "LIST", conflicts_with_all = ["device", "gpus"])]
    devices: Option<String>,
    /// Data-parallel on the first N GPUs: `--devices cuda:0,…,cuda:N-1`.
    #[arg(long, value_name = "N", conflicts_with = "device")]
    gpus: Option<usize>,
    /// With --devices or --gpus: shard AdamW's state over the ranks (ZeRO stage 1). Each
    /// rank keeps the moments of about 1/N of the parameters, updates those and broadcasts
    /// them; the curve is the same. Checkpoints hold the whole state (every rank gathers it,
    /// rank 0 writes) and resume with or without --zero, on any number of ranks.
    #[arg(long)]
    zero: bool,
    /// The parameters' dtype [default: f32].
    #[arg(long)]
    dtype: Option<String>,
    /// Run the forward pass under autocast: `bf16`, `f16` or `none` [default: bf16 on CUDA,
    /// none on the CPU].
    #[arg(long)]
    autocast: Option<String>,
    /// Write a checkpoint here at the end (and every --save-every steps).
    #[arg(long, value_name = "PATH")]
    save: Option<PathBuf>,
    /// Also checkpoint every N steps (needs --save).
    #[arg(long, value_name = "N", requires = "save")]
    save_every: Option<u64>,
    /// Continue the run saved in this checkpoint (its configuration is used; flags that
    /// would change it are errors).
    #[arg(long, value_name = "PATH")]
    resume: Option<PathBuf>,
    /// Tokens of the sample printed at the end (0: none).
    #[arg(long, default_value_t = 500, value_name = "N")]
    sample_tokens: usize,
    /// The sample's prompt.
    #[arg(long, default_value = "")]
    prompt: String,
    /// Print the metrics as one JSON document (and no progress bar).
    #[arg(long)]
    json: bool,
    /// Where to write the train/validation curves (PNG).
    #[arg(long, default_value = "gpt_loss.png", value_name = "PATH")]
    plot: PathBuf,
    /// Don't write the curves.
    #[arg(long, conflicts_with = "plot")]
    no_plot: bool,
}

fn parse_float_dtype(flag: &str, s: &str) -> Result<DType, String> {
    match DType::parse(s) {
        Some(d) if d.is_float() => Ok(d),
        _ => Err(format!(
            "unsupported --{flag} {s:?}; use f32, f64, bf16 or f16"
        )),
    }
}

/// The configuration from the flags over the defaults.
fn config_from_flags(
    a: &GptArgs,
    device: Device,
    kind: TokenizerKind,
    vocab: usize,
) -> Result<GptTrainConfig, String> {
    let d = GptTrainConfig::default();
    let (layers, heads, dim, context) = (
        a.layers.unwrap_or(d.model.n_layers),
        a.heads.unwrap_or(d.model.n_heads),
        a.dim.unwrap_or(d.model.dim),
        a.context.unwrap_or(d.model.context_len),
    );
    let mut model = match a.style.as_str() {
        "modern" => GptConfig::modern(vocab, context, layers, heads, dim),
        "gpt2" => GptConfig::gpt2(vocab, context, layers, heads, dim),
        s => return Err(format!("unknown --style {s:?}; use modern or gpt2")),
    };
    model.dropout = a.dropout.unwrap_or(d.model.dropout);
    match a.moe_experts {
        Some(e) => {
            let mut m = MoeConfig::new(e, a.moe_top_k.unwrap_or(2), a.moe_ffn.unwrap_or(model.ffn_dim));
            m.capacity_factor = a.moe_capacity;
            model = model.with_moe(m);
        }
        None if a.moe_top_k.is_some() || a.moe_ffn.is_some() || a.moe_capacity.is_some() => {
            return Err("--moe-top-k, --moe-ffn and --moe-capacity shape a mixture of experts: give --moe-experts too".into())
        }
        None => {}
    }
    let autocast = match a.autocast.as_deref() {
        None if matches!(device, Device::Cuda(_)) => Some(DType::BF16),
        None | Some("none") => None,
        Some(s) => Some(parse_float_dtype("autocast", s)?),
    };
    let c = GptTrainConfig {
        model,
        tokenizer: kind,
        batch: a.batch.unwrap_or(d.batch),
        accum: a.accum.unwrap_or(d.accum),
        steps: a.steps.unwrap_or(d.steps),
        lr: a.lr.unwrap_or(d.lr),
        min_lr: a.min_lr.unwrap_or(d.min_lr),
        warmup: a.warmup.unwrap_or(d.warmup),
        weight_decay: a.weight_decay.unwrap_or(d.weight_decay),
        betas: (d.betas.0, a.beta2.unwrap_or(d.betas.1)),
        grad_clip: a.grad_clip.unwrap_or(d.grad_clip),
        eval_batches: a.eval_batches.unwrap_or(d.eval_batches),
        seed: a.seed.unwrap_or(d.seed),
        dtype: a
            .dtype
            .as_deref()
            .map(|s| parse_float_dtype("dtype", s))
            .transpose()?
            .unwrap_or(d.dtype),
        autocast,
        device,
    };
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

/// With `--resume`, flags that shape the run must be absent: the checkpoint's are used.
fn check_resume_flags(a: &GptArgs) -> Result<(), String> {
    let given: Vec<&str> = [
        ("--layers", a.layers.is_some()),
        ("--heads", a.heads.is_some()),
        ("--dim", a.dim.is_some()),
        ("--context", a.context.is_some()),
        ("--batch", a.batch.is_some()),
        ("--accum", a.accum.is_some()),
        ("--steps", a.steps.is_some()),
        ("--lr", a.lr.is_some()),
        ("--min-lr", a.min_lr.is_some()),
        ("--warmup", a.warmup.is_some()),
        ("--weight-decay", a.weight_decay.is_some()),
        ("--beta2", a.beta2.is_some()),
        ("--grad-clip", a.grad_clip.is_some()),
        ("--dropout", a.dropout.is_some()),
        ("--moe-experts", a.moe_experts.is_some()),
        ("--moe-top-k", a.moe_top_k.is_some()),
        ("--moe-ffn", a.moe_ffn.is_some()),
        ("--moe-capacity", a.moe_capacity.is_some()),
        ("--eval-batches", a.eval_batches.is_some()),
        ("--seed", a.seed.is_some()),
        ("--dtype", a.dtype.is_some()),
        ("--autocast", a.autocast.is_some()),
    ]
    .into_iter()
    .filter_map(|(f, g)| g.then_some(f))
    .collect();
    if given.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} would change the run being resumed; leave them out to continue it with the checkpoint's configuration",
            given.join(", ")
        ))
    }
}

/// The devices of a data-parallel run (`--devices`, `--gpus`), if one is asked for.
fn parallel_devices(a: &GptArgs) -> Result<Option<Vec<Device>>, String> {
    if let Some(n) = a.gpus {
        if n == 0 {
            return Err("--gpus needs at least 1".into());
        }
        return Ok(Some((0..n).map(Device::Cuda).collect()));
    }
    let Some(list) = &a.devices else {
        return Ok(None);
    };
    let devices = list
        .split(',')
        .map(|d| parse_device(d.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    if devices.is_empty() {
        return Err("--devices is empty; give e.g. cuda:0,cuda:1".into());
    }
    Ok(Some(devices))
}

/// The tokenizer and the text, fetched into the cache (once, by the launcher, rather than by
/// every rank at the same time).
fn fetch_data(a: &GptArgs) -> Result<(), String> {
    let kind = match &a.resume {
        Some(p) => {
            GptTrainer::checkpoint_config(p, Device::Cpu)
                .map_err(|e| format!("can't resume from {}: {e}", p.display()))?
                .tokenizer
        }
        None => TokenizerKind::parse(&a.tokenizer).ok_or_else(|| {
            format!(
                "unknown --tokenizer {:?}; use bytes or smollm2",
                a.tokenizer
            )
        })?,
    };
    let tok = kind.load().map_err(|e| e.to_string())?;
    Corpus::shakespeare(kind, &tok).map_err(|e| e.to_string())?;
    Ok(())
}

pub fn gpt(a: GptArgs) -> Result<(), String> {
    if !a.no_plot {
        plot::check_path(&a.plot)?;
    }
    if a.zero && a.devices.is_none() && a.gpus.is_none() {
        return Err("--zero shards the optimizer state over the ranks of a data-parallel run: give --devices (e.g. cuda:0,cuda:1 or cpu,cpu) or --gpus N too".into());
    }
    // data-parallel: this process starts one process per device (which come back here as
    // ranks) and waits for them
    let group = match parallel_devices(&a)? {
        None => None,
        Some(devices) => {
            let is_rank = stride::distributed::RankEnv::from_env()
                .map_err(|e| e.to_string())?
                .is_some();
            if !is_rank {
                fetch_data(&a)?;
            }
            match stride::distributed::launch(&devices).map_err(|e| e.to_string())? {
                Launched::Parent => return Ok(()),
                Launched::Rank(g) => Some(g),
            }
        }
    };
    let device = match &group {
        Some(g) => g.device(),
        None => parse_device(&a.device)?,
    };
    // rank 0 reports, saves and samples; the other ranks train in silence — except that with
    // --zero saving is a collective (every rank gathers the optimizer state, rank 0 writes)
    let lead = group.as_ref().is_none_or(|g| g.rank() == 0);
    let ranks = group.as_ref().map_or(1, |g| g.world_size());
    // the tokenizer is loaded once: the corpus, the vocabulary and the sample use it
    let (mut t, tok) = match &a.resume {
        Some(path) => {
            check_resume_flags(&a)?;
            let c = GptTrainer::checkpoint_config(path, device)
                .map_err(|e| format!("can't resume from {}: {e}", path.display()))?;
            let tok = c.tokenizer.load().map_err(|e| e.to_string())?;
            let corpus = Corpus::shakespeare(c.tokenizer, &tok).map_err(|e| e.to_string())?;
            let t = GptTrainer::resume(path, device, corpus)
                .map_err(|e| format!("can't resume from {}: {e}", path.display()))?;
            (t, tok)
        }
        None => {
            let kind = TokenizerKind::parse(&a.tokenizer).ok_or_else(|| {
                format!(
                    "unknown --tokenizer {:?}; use bytes or smollm2",
                    a.tokenizer
                )
            })?;
            let tok = kind.load().map_err(|e| e.to_string())?;
            let c = config_from_flags(&a, device, kind, tok.vocab_size())?;
            let corpus = Corpus::shakespeare(kind, &tok).map_err(|e| e.to_string())?;
            (GptTrainer::new(c, corpus).map_err(|e| e.to_string())?, tok)
        }
    };
    if let Some(g) = group {
        t.distribute_with(g, a.zero).map_err(|e| e.to_string())?;
    }
    let c = t.config().clone();
    let start = t.steps_done();
    let end = a.stop_at.unwrap_or(c.steps).min(c.steps);
    if start >= end {
        return Err(format!(
            "the run is already at step {start} (its schedule has {} steps, --stop-at {end}); nothing to do",
            c.steps
        ));
    }
    // read the loss every 10 steps for the bar: each read waits for the device
    t.set_loss_every(10);
    let tokens_per_step = (c.batch * c.accum * c.model.context_len) as u64;
    let (ntrain, nval) = t.corpus_sizes();
    let params = stride::nn::Module::num_parameters(t.model());
    if !a.json && lead {
        println!(
            "stride train gpt: {} style, {} layers × {} heads × width {}, context {}, {} parameters | {} tokenizer ({} training, {} validation tokens: {})",
            a.style, c.model.n_layers, c.model.n_heads, c.model.dim, c.model.context_len, params,
            c.tokenizer.name(), ntrain, nval, stride::models::gpt::VALIDATION_WORKS.join(", ")
        );
        println!(
            "AdamW lr {} → {} (warmup {}), wd {}, β₂ {}, clip {} | batch {} × accum {} ({} tokens/step) | {} on {}{} | seed {}",
            c.lr, c.min_lr, c.warmup, c.weight_decay, c.betas.1, c.grad_clip, c.batch, c.accum,
            tokens_per_step, c.dtype.name(), c.device,
            c.autocast.map_or(String::new(), |d| format!(" (autocast {})", d.name())), c.seed
        );
        if let Some(m) = &c.model.moe {
            println!(
                "mixture of experts: {} SwiGLU experts of width {} per block, top-{} routing, {} | aux loss {} · z-loss {}",
                m.experts, m.expert_ffn_dim, m.top_k,
                m.capacity_factor.map_or("dropless".to_string(), |f| format!("capacity factor {f}")),
                m.aux_loss_coef, m.z_loss_coef
            );
        }
        if ranks > 1 {
            println!(
                "data-parallel over {ranks} ranks ({}): {} sequences per rank per micro-batch{}",
                parallel_devices(&a)?
                    .unwrap_or_default()
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                c.batch / ranks,
                if a.zero {
                    "; AdamW's state sharded over the ranks (ZeRO)"
                } else {
                    ""
                }
            );
        }
        if start > 0 {
            println!("resumed at step {start}");
        }
    }
    let bar = if a.json || !lead || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(c.steps);
        b.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  eta {eta}")
                .map_err(|e| e.to_string())?,
        );
        b.set_position(start);
        b.reset_eta();
        b
    };
    // a hidden bar (no terminal) drops what it is asked to print
    let say = |s: String| {
        if !lead {
            // the other ranks train in silence
        } else if a.json {
            eprintln!("{s}")
        } else if bar.is_hidden() {
            println!("{s}")
        } else {
            bar.println(s)
        }
    };
    let saves = lead || t.shards_optimizer_state();
    let started = Instant::now();
    let mut last_val = None;
    // a mixture of experts' load since the last report: tokens per expert, over all blocks
    let mut load: Vec<i64> = vec![];
    let mut loads: Vec<serde_json::Value> = vec![];
    if start == 0 {
        let v = t
            .evaluate()
            .map_err(|e| format!("evaluation at step 0: {e}"))?;
        say(format!("step 0: validation loss {v:.4}"));
    }
    for s in start..end {
        let r = t.step().map_err(|e| format!("step {s}: {e}"))?;
        let done = s + 1;
        if let Some(loss) = r.loss {
            let tps =
                (done - start) as f64 * tokens_per_step as f64 / started.elapsed().as_secs_f64();
            bar.set_message(format!("loss {loss:.4}  {tps:.0} tokens/s"));
        }
        if let Some(per_block) = &r.expert_load {
            for b in per_block {
                load.resize(b.len(), 0);
                load.iter_mut().zip(b).for_each(|(t, &n)| *t += n);
            }
        }
        bar.inc(1);
        if done % a.eval_every.max(1) == 0 || done == end {
            let v = t
                .evaluate()
                .map_err(|e| format!("evaluation at step {done}: {e}"))?;
            last_val = Some(v);
            say(format!("step {done}: validation loss {v:.4}"));
            if !load.is_empty() {
                let total: i64 = load.iter().sum();
                let shares: Vec<String> = load
                    .iter()
                    .map(|&n| format!("{:.1}%", 100.0 * n as f64 / total.max(1) as f64))
                    .collect();
                say(format!(
                    "  expert load since the last report (all blocks): {}",
                    shares.join(" ")
                ));
                loads.push(serde_json::json!({"step": done, "tokens_per_expert": load}));
                load = vec![];
            }
        }
        if let (Some(p), Some(n), true) = (&a.save, a.save_every, saves) {
            if n > 0 && done % n == 0 && done < end {
                t.save(p)
                    .map_err(|e| format!("can't save to {}: {e}", p.display()))?;
            }
        }
    }
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    if let (Some(p), true) = (&a.save, saves) {
        t.save(p)
            .map_err(|e| format!("can't save to {}: {e}", p.display()))?;
    }
    if !lead {
        return Ok(());
    }
    let ran = end - start;
    let losses = t.read_losses().map_err(|e| e.to_string())?.to_vec();
    let evals = t.evals().to_vec();
    let sample = if a.sample_tokens > 0 {
        let sampling = SamplingConfig {
            seed: Some(c.seed),
            ..SamplingConfig::default()
        };
        Some(
            t.sample(&tok, &a.prompt, a.sample_tokens, sampling)
                .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };
    let plot_path = if a.no_plot {
        None
    } else {
        let lines = [
            Line {
                label: "training loss",
                points: losses
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (i as f64 + 1.0, v))
                    .collect(),
                color: BLUE,
                width: 1,
            },
            Line {
                label: "validation loss (held-out plays)",
                points: evals.iter().map(|&(s, v)| (s as f64, v)).collect(),
                color: RED,
                width: 2,
            },
        ];
        let unit = match c.tokenizer {
            TokenizerKind::Bytes => "nats per byte",
            TokenizerKind::SmolLm2 => "nats per token",
        };
        plot::chart(
            &a.plot,
            "stride train gpt: cross-entropy",
            unit,
            &lines,
            Scale::Linear,
        )
        .map_err(|e| format!("can't write the curves to {}: {e}", a.plot.display()))?;
        Some(a.plot.clone())
    };
    let tail = losses.len().min(50);
    let final_train = losses[losses.len() - tail..].iter().sum::<f64>() / tail as f64;
    let tokens_per_s = ran as f64 * tokens_per_step as f64 / elapsed;
    if a.json {
        let doc = serde_json::json!({
            "model": "gpt",
            "config": {
                "style": a.style, "layers": c.model.n_layers, "heads": c.model.n_heads,
                "dim": c.model.dim, "ffn_dim": c.model.ffn_dim, "context": c.model.context_len,
                "vocab": c.model.vocab_size, "tokenizer": c.tokenizer.name(),
                "batch": c.batch, "accum": c.accum, "steps": c.steps, "lr": c.lr,
                "min_lr": c.min_lr, "warmup": c.warmup, "weight_decay": c.weight_decay,
                "betas": [c.betas.0, c.betas.1], "grad_clip": c.grad_clip,
                "dropout": c.model.dropout, "seed": c.seed, "dtype": c.dtype.name(),
                "autocast": c.autocast.map(|d| d.name()), "device": c.device.to_string(), "ranks": ranks,
                "zero": a.zero,
                "moe": c.model.moe.as_ref().map(|m| serde_json::json!({
                    "experts": m.experts, "top_k": m.top_k, "expert_ffn_dim": m.expert_ffn_dim,
                    "aux_loss_coef": m.aux_loss_coef, "z_loss_coef": m.z_loss_coef,
                    "capacity_factor": m.capacity_factor,
                })),
            },
            "expert_load": loads,
            "parameters": params,
            "optimizer_state_bytes": t.optimizer_state_bytes(),
            "train_tokens": ntrain, "val_tokens": nval,
            "steps": t.steps_done(), "resumed_from_step": start,
            "final_train_loss": final_train, "final_train_loss_steps": tail,
            "val_loss": last_val,
            "evals": evals.iter().map(|&(s, v)| serde_json::json!({"step": s, "val_loss": v})).collect::<Vec<_>>(),
            "seconds": elapsed, "tokens_per_s": tokens_per_s,
            "sample": sample,
            "plot": plot_path.as_ref().map(|p| p.display().to_string()),
            "checkpoint": a.save.as_ref().map(|p| p.display().to_string()),
            "losses": losses,
        });
        println!("{doc}");
    } else {
        println!("steps            {} ({ran} in this run)", t.steps_done());
        println!(
            "training loss    {:.4} at step 0 -> {final_train:.4} (mean of the last {tail} steps)",
            losses[0]
        );
        if let Some(v) = last_val {
            println!(
                "validation loss  {v:.4} on {} held-out windows of {}",
                c.eval_batches * c.batch,
                c.model.context_len
            );
        }
        println!(
            "time             {elapsed:.1} s, {:.1} ms/step, {tokens_per_s:.0} tokens/s",
            elapsed * 1e3 / ran as f64
        );
        if let Some(p) = &plot_path {
            println!("curves           {}", p.display());
        }
        if let Some(p) = &a.save {
            println!("checkpoint       {}", p.display());
        }
        if let Some(s) = &sample {
            println!("sample ({} tokens):\n{}{s}", a.sample_tokens, a.prompt);
        }
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct SampleArgs {
    /// A checkpoint written by `stride train gpt --save`.
    #[arg(long, value_name = "PATH")]
    checkpoint: PathBuf,
    /// The text to continue.
    #[arg(long, default_value = "")]
    prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 500)]
    tokens: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Seed of the draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    device: String,
}

pub fn sample(a: SampleArgs) -> Result<(), String> {
    let device = parse_device(&a.device)?;
    let (model, c) = GptTrainer::load_model(&a.checkpoint, device)
        .map_err(|e| format!("can't load {}: {e}", a.checkpoint.display()))?;
    let tok = c.tokenizer.load().map_err(|e| e.to_string())?;
    let sampling = SamplingConfig {
        temperature: a.temperature,
        seed: Some(a.seed),
        ..SamplingConfig::default()
    };
    let text = sample_window(&model, c.tokenizer, &tok, &a.prompt, a.tokens, sampling)
        .map_err(|e| e.to_string())?;
    println!("{}{text}", a.prompt);
    Ok(())
}

/// `stride generate --model CHECKPOINT.safetensors`: a GPT checkpoint through the same
/// generation loop as a GGUF model (its KV cache; the tokenizer it was trained with). Its
/// dtype is the checkpoint's.
pub fn generate(a: crate::generate::GenerateArgs) -> Result<(), String> {
    let path = a.model.path()?;
    let device = a.model.device()?;
    let t0 = Instant::now();
    let (model, c) = GptTrainer::load_model(&path, device)
        .map_err(|e| format!("can't load {}: {e}", path.display()))?;
    let tok = c.tokenizer.load().map_err(|e| e.to_string())?;
    crate::generate::run_generate(
        &model,
        &tok,
        &a,
        t0.elapsed(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
    .map(|_| ())
}
