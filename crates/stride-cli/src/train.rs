//! `stride train sae`: train the TopK sparse autoencoder on seeded synthetic data, with a
//! progress bar, the update-health check, a summary (or `--json`), a loss-curve PNG and
//! checkpoints.
//!
//! ```text
//! stride train sae [--dims 64] [--latents 512] [--k 16] [--features 256] [--feature-prob 0.02]
//!                  [--steps 3000] [--lr 1e-3] [--batch 256] [--seed 0] [--device cpu]
//!                  [--dtype f32|f64|bf16] [--contiguous-encoder] [--health-every 100]
//!                  [--json] [--plot sae_loss.png | --no-plot] [--save PATH] [--resume PATH]
//! ```
//!
//! Exits non-zero on bad flags, and when the update-health check found a parameter that did
//! not move (after printing the summary).

use crate::plot;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;
use stride::models::{SaeConfig, SaeTrainer, TrainConfig};
use stride::{DType, Device};

#[derive(clap::Args)]
pub struct TrainArgs {
    #[command(subcommand)]
    model: Model,
}

#[derive(clap::Subcommand)]
enum Model {
    /// The TopK sparse autoencoder with a tied (transposed, non-contiguous) encoder, trained
    /// with Adam on synthetic sparse features in superposition.
    Sae(Box<SaeArgs>),
    /// A GPT on the Shakespeare text (byte-level by default), validated on held-out plays.
    Gpt(Box<crate::train_gpt::GptArgs>),
}

pub fn run(a: TrainArgs) -> Result<(), String> {
    match a.model {
        Model::Sae(a) => sae(*a),
        Model::Gpt(a) => crate::train_gpt::gpt(*a),
    }
}

#[derive(clap::Args)]
pub struct SaeArgs {
    /// Input dimension d [default: 64].
    #[arg(long)]
    dims: Option<usize>,
    /// Number of latents [default: 512].
    #[arg(long)]
    latents: Option<usize>,
    /// Latents kept per sample (TopK) [default: 16].
    #[arg(long)]
    k: Option<usize>,
    /// Ground-truth features of the synthetic data (more than --dims: superposition)
    /// [default: 256].
    #[arg(long)]
    features: Option<usize>,
    /// Probability that a feature is active in a sample [default: 0.02].
    #[arg(long)]
    feature_prob: Option<f64>,
    /// Train until this many steps in total (a resumed run counts the checkpoint's steps).
    #[arg(long, default_value_t = 3000)]
    steps: u64,
    /// Adam's learning rate [default: 1e-3].
    #[arg(long)]
    lr: Option<f64>,
    /// Samples per step [default: 256].
    #[arg(long)]
    batch: Option<usize>,
    /// Seeds the weights, the synthetic features and the batches [default: 0].
    #[arg(long)]
    seed: Option<u64>,
    /// `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// f32, f64 or bf16 [default: f32] (f16 underflows in Adam: refused).
    #[arg(long)]
    dtype: Option<String>,
    /// Initialise the encoder weight as a contiguous copy of the decoder's transpose (instead
    /// of `clone()`, which keeps the transposed strides), to compare.
    #[arg(long)]
    contiguous_encoder: bool,
    /// Run the update-health check every N steps (0: off).
    #[arg(long, default_value_t = 100, value_name = "N")]
    health_every: u64,
    /// A latent is dead when it was active on no sample of the last N steps.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    dead_window: u64,
    /// Samples of the held-out batch the final reconstruction is measured on.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    eval_batch: usize,
    /// Print the metrics as one JSON document (and no progress bar).
    #[arg(long)]
    json: bool,
    /// Where to write the loss curve (PNG).
    #[arg(long, default_value = "sae_loss.png", value_name = "PATH")]
    plot: PathBuf,
    /// Don't write the loss curve.
    #[arg(long, conflicts_with = "plot")]
    no_plot: bool,
    /// Save a checkpoint (one safetensors file) at the end.
    #[arg(long, value_name = "PATH")]
    save: Option<PathBuf>,
    /// Continue the run saved in this checkpoint (its configuration is used; flags that
    /// contradict it are errors).
    #[arg(long, value_name = "PATH")]
    resume: Option<PathBuf>,
}

fn parse_dtype(s: &str) -> Result<DType, String> {
    match DType::parse(s) {
        // measured: at step 0 the squared gradients and Adam's eps (1e-8) underflow to 0 in
        // float16, the update divides by zero and the health check reports every parameter
        // non-finite (PyTorch's pure-f16 Adam does the same)
        Some(DType::F16) => Err(
            "--dtype f16 can't train this model: Adam's eps (1e-8) and the squared gradients underflow to 0 in float16, so the first update divides by zero; use bf16 (same width, f32's range), f32 or f64".into(),
        ),
        Some(d) if d.is_float() => Ok(d),
        _ => Err(format!("unsupported --dtype {s:?}; use f32, f64 or bf16")),
    }
}

/// `cpu`, `cuda`, `cuda:N`, `wgpu` or `wgpu:N`, the GPU opened (an error naming what is
/// missing).
pub(crate) fn parse_device(s: &str) -> Result<Device, String> {
    let d = Device::parse(s)
        .ok_or_else(|| format!("unknown device {s:?}; use cpu, cuda, cuda:N, wgpu or wgpu:N"))?;
    open_device(d)
}

/// Opens a parsed device (an error naming what is missing).
pub(crate) fn open_device(d: Device) -> Result<Device, String> {
    match d {
        Device::Cpu => Ok(d),
        Device::Cuda(n) => Device::cuda(n).map_err(|e| e.to_string()),
        Device::Wgpu(n) => Device::wgpu(n).map_err(|e| e.to_string()),
    }
}

/// The configuration from the flags over the defaults.
fn config_from_flags(a: &SaeArgs, device: Device) -> Result<TrainConfig, String> {
    let d = TrainConfig::default();
    Ok(TrainConfig {
        sae: SaeConfig {
            dims: a.dims.unwrap_or(d.sae.dims),
            latents: a.latents.unwrap_or(d.sae.latents),
            k: a.k.unwrap_or(d.sae.k),
            contiguous_encoder: a.contiguous_encoder,
            dtype: a
                .dtype
                .as_deref()
                .map(parse_dtype)
                .transpose()?
                .unwrap_or(d.sae.dtype),
            device,
        },
        features: a.features.unwrap_or(d.features),
        feature_prob: a.feature_prob.unwrap_or(d.feature_prob),
        batch: a.batch.unwrap_or(d.batch),
        lr: a.lr.unwrap_or(d.lr),
        seed: a.seed.unwrap_or(d.seed),
        health_every: a.health_every,
    })
}

/// Flags given together with `--resume` must agree with the checkpoint.
fn check_resume_flags(a: &SaeArgs, c: &TrainConfig) -> Result<(), String> {
    let mut clashes = vec![];
    let mut cmp = |flag: &str, given: Option<String>, saved: String| {
        if let Some(g) = given {
            if g != saved {
                clashes.push(format!("--{flag} {g} (the checkpoint has {saved})"));
            }
        }
    };
    cmp(
        "dims",
        a.dims.map(|v| v.to_string()),
        c.sae.dims.to_string(),
    );
    cmp(
        "latents",
        a.latents.map(|v| v.to_string()),
        c.sae.latents.to_string(),
    );
    cmp("k", a.k.map(|v| v.to_string()), c.sae.k.to_string());
    cmp(
        "features",
        a.features.map(|v| v.to_string()),
        c.features.to_string(),
    );
    cmp(
        "feature-prob",
        a.feature_prob.map(|v| v.to_string()),
        c.feature_prob.to_string(),
    );
    cmp("batch", a.batch.map(|v| v.to_string()), c.batch.to_string());
    cmp("lr", a.lr.map(|v| v.to_string()), c.lr.to_string());
    cmp("seed", a.seed.map(|v| v.to_string()), c.seed.to_string());
    cmp(
        "dtype",
        a.dtype
            .as_deref()
            .map(|s| parse_dtype(s).map(|d| d.name().to_string()))
            .transpose()?,
        c.sae.dtype.name().to_string(),
    );
    if a.contiguous_encoder && !c.sae.contiguous_encoder {
        clashes.push("--contiguous-encoder (the checkpoint's encoder is not)".into());
    }
    if clashes.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "flags contradict the checkpoint being resumed: {}; leave them out to use the checkpoint's",
            clashes.join(", ")
        ))
    }
}

fn sae(a: SaeArgs) -> Result<(), String> {
    let device = parse_device(&a.device)?;
    if !a.no_plot {
        plot::check_path(&a.plot)?;
    }
    let mut trainer = match &a.resume {
        Some(path) => {
            let saved = SaeTrainer::checkpoint_config(path, device)
                .map_err(|e| format!("can't resume from {}: {e}", path.display()))?;
            check_resume_flags(&a, &saved)?;
            let mut t = SaeTrainer::resume(path, device)
                .map_err(|e| format!("can't resume from {}: {e}", path.display()))?;
            t.set_health_every(a.health_every);
            t
        }
        None => SaeTrainer::new(config_from_flags(&a, device)?).map_err(|e| e.to_string())?,
    };
    let start_step = trainer.steps_done();
    // the progress bar shows the loss every 10 steps: read it only then (each read waits for
    // the device); the others are read together at the end
    trainer.set_loss_every(10);
    if start_step >= a.steps {
        return Err(format!(
            "the run is already at step {start_step}; pass --steps larger than that to continue it"
        ));
    }
    if a.eval_batch < 2 {
        return Err(format!(
            "--eval-batch must be at least 2, got {}",
            a.eval_batch
        ));
    }
    let c = trainer.config().clone();
    let enc = trainer.model().encoder.weight.tensor();
    let layout = if enc.is_contiguous() {
        format!("contiguous, strides {:?}", enc.stride())
    } else {
        format!("non-contiguous, strides {:?}", enc.stride())
    };
    if !a.json {
        println!(
            "stride train sae: d={} latents={} k={} | {} features active w.p. {} | batch {} | Adam lr {} | {} on {} | seed {}",
            c.sae.dims, c.sae.latents, c.sae.k, c.features, c.feature_prob, c.batch, c.lr,
            c.sae.dtype.name(), c.sae.device, c.seed
        );
        println!("encoder.weight {:?}: {layout}", enc.shape());
        if start_step > 0 {
            println!(
                "resumed from {} at step {start_step}",
                a.resume
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string())
            );
        }
    }

    let bar = if a.json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(a.steps);
        b.set_style(
            ProgressStyle::with_template(
                "{bar:30} {pos}/{len} steps  loss {msg}  {per_sec}  eta {eta}",
            )
            .map_err(|e| e.to_string())?,
        );
        b.set_position(start_step);
        b.reset_eta();
        b
    };
    let started = Instant::now();
    for _ in start_step..a.steps {
        let r = trainer
            .step()
            .map_err(|e| format!("step {}: {e}", trainer.steps_done()))?;
        if let Some(h) = &r.health {
            for issue in &h.issues {
                let line = format!("step {}: update-health check: {issue}", r.step);
                // a hidden bar (no terminal) drops what it is asked to print
                if a.json {
                    eprintln!("{line}");
                } else if bar.is_hidden() {
                    println!("{line}");
                } else {
                    bar.println(line);
                }
            }
        }
        if let Some(loss) = r.loss {
            bar.set_message(format!("{loss:.3e}"));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    let ran = a.steps - start_step;

    let eval = trainer.evaluate(a.eval_batch).map_err(|e| e.to_string())?;
    let dead = trainer
        .dead_latents(a.dead_window)
        .map_err(|e| e.to_string())?;
    if let Some(path) = &a.save {
        trainer
            .save(path)
            .map_err(|e| format!("can't save the checkpoint to {}: {e}", path.display()))?;
    }
    let losses = trainer.read_losses().map_err(|e| e.to_string())?.to_vec();
    let tail = losses.len().min(50);
    let initial = losses[0];
    let last = losses[losses.len() - 1];
    let final_mean = losses[losses.len() - tail..].iter().sum::<f64>() / tail as f64;
    let plot_path = if a.no_plot {
        None
    } else {
        plot::loss_curve(&a.plot, &losses, eval.baseline)
            .map_err(|e| format!("can't write the loss curve to {}: {e}", a.plot.display()))?;
        Some(a.plot.clone())
    };
    let health = trainer.health();
    let ms_per_step = elapsed * 1e3 / ran as f64;

    if a.json {
        let issues: Vec<serde_json::Value> = health
            .issues
            .iter()
            .map(|(s, i)| serde_json::json!({"step": s, "parameter": i.name, "message": i.to_string()}))
            .collect();
        let doc = serde_json::json!({
            "model": "topk-sae",
            "config": {
                "dims": c.sae.dims, "latents": c.sae.latents, "k": c.sae.k,
                "features": c.features, "feature_prob": c.feature_prob, "batch": c.batch,
                "lr": c.lr, "seed": c.seed, "dtype": c.sae.dtype.name(),
                "device": c.sae.device.to_string(),
                "contiguous_encoder": c.sae.contiguous_encoder,
                "encoder_strides": enc.stride(), "health_every": c.health_every,
            },
            "steps": trainer.steps_done(),
            "resumed_from_step": start_step,
            "initial_loss": initial,
            "final_loss": final_mean,
            "final_loss_steps": tail,
            "last_loss": last,
            "plateau_loss": eval.baseline,
            "eval_mse": eval.mse,
            "fve": eval.fve,
            "eval_batch": a.eval_batch,
            "dead_latents": dead,
            "dead_window": a.dead_window,
            "health": {"checks": health.checks, "healthy": health.is_healthy(),
                       "culprits": health.culprits(), "issues": issues},
            "seconds": elapsed,
            "ms_per_step": ms_per_step,
            "plot": plot_path.as_ref().map(|p| p.display().to_string()),
            "checkpoint": a.save.as_ref().map(|p| p.display().to_string()),
            "losses": losses,
        });
        println!("{doc}");
    } else {
        println!(
            "steps            {} ({ran} in this run)",
            trainer.steps_done()
        );
        println!(
            "loss             {initial:.4e} at step 0 -> {final_mean:.4e} (mean of the last {tail} steps)"
        );
        println!(
            "plateau          {:.4e} (predicting the mean sample: the data's variance); final/plateau = {:.3}",
            eval.baseline,
            final_mean / eval.baseline
        );
        println!(
            "held-out         mse {:.4e} on {} samples, fraction of variance explained {:.4}",
            eval.mse, a.eval_batch, eval.fve
        );
        println!(
            "dead latents     {dead} of {} (active on no sample of the last {} steps)",
            c.sae.latents,
            a.dead_window.min(trainer.steps_done())
        );
        if c.health_every == 0 {
            println!("update health    not checked (--health-every 0)");
        } else if health.is_healthy() {
            println!(
                "update health    {} checks (every {} steps): every parameter with a gradient moved, moments finite",
                health.checks, c.health_every
            );
        } else {
            println!(
                "update health    {} checks, {} findings: {}",
                health.checks,
                health.issues.len(),
                health.culprits().join(", ")
            );
        }
        println!(
            "time             {elapsed:.2} s, {ms_per_step:.2} ms/step ({:.0} steps/s)",
            ran as f64 / elapsed
        );
        if let Some(p) = &plot_path {
            println!("loss curve       {}", p.display());
        }
        if let Some(p) = &a.save {
            println!("checkpoint       {}", p.display());
        }
    }
    if !health.is_healthy() {
        let (s, i) = &health.issues[0];
        return Err(format!(
            "the update-health check found {} problem(s), first at step {s}: {i}",
            health.issues.len()
        ));
    }
    Ok(())
}
