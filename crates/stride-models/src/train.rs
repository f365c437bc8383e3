//! Training the [`TopKSae`] on [synthetic](crate::synthetic) data with Adam: the loop behind
//! `stride train sae`, with evaluation, dead-latent counting, the update-health check and
//! checkpoints that resume on the same curve, bit for bit.
//!
//! ```
//! use stride_models::train::{SaeTrainer, TrainConfig};
//! use stride_models::sae::SaeConfig;
//! let cfg = TrainConfig {
//!     sae: SaeConfig { dims: 8, latents: 32, k: 4, ..SaeConfig::default() },
//!     features: 16, batch: 32, ..TrainConfig::default()
//! };
//! let mut t = SaeTrainer::new(cfg)?;
//! for _ in 0..20 {
//!     t.step()?;
//! }
//! assert_eq!(t.steps_done(), 20);
//! assert!(t.health().issues.is_empty());
//! let e = t.evaluate(256)?;
//! assert!(e.fve > 0.0 && e.fve <= 1.0);
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::loss_log::LossLog;
use crate::sae::{SaeConfig, TopKSae};
use crate::synthetic::{derive_seed, streams, SyntheticConfig, SyntheticData};
use crate::{checkpoint, invalid};
use std::collections::BTreeMap;
use std::path::Path;
use stride_core::autograd::no_grad;
use stride_core::{default_generator, DType, Device, Generator, Result, Tensor};
use stride_nn::optim::{Adam, AdamConfig, HealthIssue, HealthReport, Optimizer};
use stride_nn::Module;

/// Everything that defines a training run (and is saved in its checkpoints).
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    /// The autoencoder (its `dims` is the data's too).
    pub sae: SaeConfig,
    /// Ground-truth features of the synthetic data (more than `sae.dims`).
    pub features: usize,
    /// Probability that a feature is active in a sample.
    pub feature_prob: f64,
    /// Samples per step.
    pub batch: usize,
    /// Adam's learning rate (other hyperparameters: PyTorch's defaults).
    pub lr: f64,
    /// Seeds the initial weights, the dictionary, the training batches and the evaluation
    /// batch (independent streams).
    pub seed: u64,
    /// Run the update-health check every this many steps (0: never). Checked steps are
    /// `0, N, 2N, …` (the first step is always checked).
    pub health_every: u64,
}

impl Default for TrainConfig {
    /// The defaults of `stride train sae`.
    fn default() -> Self {
        TrainConfig {
            sae: SaeConfig::default(),
            features: 256,
            feature_prob: 0.02,
            batch: 256,
            lr: 1e-3,
            seed: 0,
            health_every: 100,
        }
    }
}

impl TrainConfig {
    pub fn data(&self) -> SyntheticConfig {
        SyntheticConfig {
            dims: self.sae.dims,
            features: self.features,
            p: self.feature_prob,
        }
    }
    /// Checks every field.
    pub fn validate(&self) -> Result<()> {
        self.sae.validate()?;
        self.data().validate()?;
        if self.batch == 0 {
            return Err(invalid("train sae", "the batch size must be at least 1"));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(invalid(
                "train sae",
                format!(
                    "the learning rate must be positive and finite, got {}",
                    self.lr
                ),
            ));
        }
        Ok(())
    }
    fn adam(&self) -> AdamConfig {
        AdamConfig {
            lr: self.lr,
            ..AdamConfig::default()
        }
    }
}

/// What one step did.
#[derive(Debug, Clone)]
pub struct StepResult {
    /// The step's index (0-based).
    pub step: u64,
    /// The training loss of the step's batch (before the update), on steps that read it back
    /// (see [`SaeTrainer::set_loss_every`]; every step by default). Unread losses stay on the
    /// device and join [`SaeTrainer::losses`] at the next read.
    pub loss: Option<f64>,
    /// The update-health report, on checked steps.
    pub health: Option<HealthReport>,
}

/// The update-health checks of a run so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HealthLog {
    /// Steps checked.
    pub checks: u64,
    /// Every finding, with the step it was found at.
    pub issues: Vec<(u64, HealthIssue)>,
}

impl HealthLog {
    pub fn is_healthy(&self) -> bool {
        self.issues.is_empty()
    }
    /// The names of the parameters with findings, each once, in order of first finding.
    pub fn culprits(&self) -> Vec<String> {
        let mut v: Vec<String> = vec![];
        for (_, i) in &self.issues {
            if !v.contains(&i.name) {
                v.push(i.name.clone());
            }
        }
        v
    }
}

/// Reconstruction quality on a held-out batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// Mean squared reconstruction error.
    pub mse: f64,
    /// The plateau: the mean squared error of the best constant predictor (the batch's mean
    /// sample), i.e. the data's variance per element.
    pub baseline: f64,
    /// Fraction of variance explained, `1 − mse / baseline`.
    pub fve: f64,
}

/// A training run: model, optimizer, data stream and history.
pub struct SaeTrainer {
    config: TrainConfig,
    model: TopKSae,
    opt: Adam,
    data: SyntheticData,
    step: u64,
    losses: LossLog,
    /// Per latent, the last step at which it was active (−1: never): i64 on the model's
    /// device, updated there without a host wait.
    last_active: Tensor,
    health: HealthLog,
}

fn scalar_f64(t: &Tensor) -> Result<f64> {
    t.to_f64_vec()?
        .first()
        .copied()
        .ok_or_else(|| invalid("train sae", "expected a scalar"))
}

impl SaeTrainer {
    /// A fresh run.
    pub fn new(config: TrainConfig) -> Result<SaeTrainer> {
        config.validate()?;
        let init = Generator::new(derive_seed(config.seed, streams::INIT));
        let model = TopKSae::new(&config.sae, &init)?;
        let opt = Adam::new(model.named_parameters(), config.adam())?;
        let data = SyntheticData::new(
            &config.data(),
            config.seed,
            config.sae.dtype,
            config.sae.device,
        )?;
        let last_active =
            Tensor::full([config.sae.latents], -1i64, DType::I64, &config.sae.device)?;
        Ok(SaeTrainer {
            config,
            model,
            opt,
            data,
            step: 0,
            losses: LossLog::new(vec![]),
            last_active,
            health: HealthLog::default(),
        })
    }

    pub fn config(&self) -> &TrainConfig {
        &self.config
    }
    pub fn model(&self) -> &TopKSae {
        &self.model
    }
    pub fn data(&self) -> &SyntheticData {
        &self.data
    }
    /// The optimizer (e.g. for tests that inject a fault).
    pub fn optimizer_mut(&mut self) -> &mut Adam {
        &mut self.opt
    }
    pub fn optimizer(&self) -> &Adam {
        &self.opt
    }
    pub fn steps_done(&self) -> u64 {
        self.step
    }
    /// Every step's training loss read back so far (from the start of the run, across
    /// resumes): all of them unless [`set_loss_every`](Self::set_loss_every) left some on
    /// the device; [`read_losses`](Self::read_losses) reads those.
    pub fn losses(&self) -> &[f64] {
        self.losses.read()
    }
    /// Reads the losses still on the device (one host wait for all of them) and returns every
    /// step's loss so far.
    pub fn read_losses(&mut self) -> Result<&[f64]> {
        self.losses.read_all()
    }
    /// Reads the loss back to the host on steps `0, N, 2N, …` only (`0`: never unless asked
    /// by [`read_losses`](Self::read_losses)). Each read makes the host wait for the device;
    /// with `N > 1` a GPU step queues its work and returns at once, and the unread losses are
    /// read together at the next read. Does not change the curve.
    pub fn set_loss_every(&mut self, n: u64) {
        self.losses.set_every(n);
    }
    pub fn health(&self) -> &HealthLog {
        &self.health
    }
    /// Changes how often the update-health check runs (it does not change the curve).
    pub fn set_health_every(&mut self, n: u64) {
        self.config.health_every = n;
    }

    /// One step: a batch, forward, backward, Adam (with the health check on due steps).
    pub fn step(&mut self) -> Result<StepResult> {
        let step = self.step;
        let x = self.data.batch(self.config.batch)?;
        self.opt.zero_grad()?;
        let (loss, acts) = self.model.loss(&x)?;
        loss.backward()?;
        let check = self.config.health_every > 0 && step.is_multiple_of(self.config.health_every);
        self.opt.set_health_check(check);
        self.opt.step()?;
        let health = if check {
            let r = self.opt.health().cloned().unwrap_or_default();
            self.health.checks += 1;
            self.health
                .issues
                .extend(r.issues.iter().map(|i| (step, i.clone())));
            Some(r)
        } else {
            None
        };
        {
            let _ng = no_grad();
            let active = acts.detach().gt(0.0)?.any_dims(&[0], false)?;
            self.last_active = active.where_cond(step as i64, &self.last_active)?;
        }
        let loss = self.losses.push(step, loss.detach())?;
        self.step += 1;
        Ok(StepResult { step, loss, health })
    }

    /// Latents not active on any sample of the last `window` steps (all steps so far when
    /// fewer were taken). Reads a count back from the device.
    pub fn dead_latents(&self, window: u64) -> Result<usize> {
        let since = self.step.saturating_sub(window) as i64;
        let _ng = no_grad();
        let n = self.last_active.lt(since)?.sum()?.item::<i64>()?;
        Ok(n as usize)
    }

    /// Reconstruction error and fraction of variance explained on a held-out batch of `n`
    /// samples (drawn from the seed's evaluation stream, so it is the same batch at every call
    /// and does not move the training stream).
    pub fn evaluate(&self, n: usize) -> Result<Evaluation> {
        if n < 2 {
            return Err(invalid(
                "train sae",
                format!("the evaluation batch needs at least 2 samples, got {n}"),
            ));
        }
        let _ng = no_grad();
        let g = Generator::new(derive_seed(self.config.seed, streams::EVAL));
        let batch = self.data.batch_from(n, &g)?;
        let x_hat = self
            .model
            .forward(&batch.to_dtype(self.config.sae.dtype)?)?;
        // the metric in f64: on the CPU where the device holds no f64 (wgpu)
        let at = if batch.device().holds(DType::F64) {
            batch.device()
        } else {
            Device::Cpu
        };
        let x = batch.to_device(&at)?.to_dtype(DType::F64)?;
        let x_hat = x_hat.to_device(&at)?.to_dtype(DType::F64)?;
        let mse = scalar_f64(&x_hat.sub(&x)?.square()?.mean()?)?;
        let mean = x.mean_dims(&[0], true)?;
        let baseline = scalar_f64(&x.sub(&mean)?.square()?.mean()?)?;
        let fve = if baseline > 0.0 {
            1.0 - mse / baseline
        } else {
            f64::NAN
        };
        Ok(Evaluation { mse, baseline, fve })
    }

    // ----- checkpoints --------------------------------------------------------------------

    /// Saves everything a resumed run needs to continue on the same curve — the model, Adam's
    /// moments and step counts, the step, the loss history, the data generator's and the
    /// default generator's states, and the run's configuration — in one safetensors file
    /// (tensors, plus string metadata for the scalars). The write is atomic.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let _ng = no_grad();
        let mut tensors: Vec<(String, Tensor)> = vec![];
        for (name, t) in self.model.state_dict().iter() {
            tensors.push((format!("model.{name}"), t.clone()));
        }
        let osd = self.opt.state_dict()?;
        let losses = self.losses.values()?;
        let n = losses.len();
        tensors.push(("train.losses".into(), Tensor::from_vec(losses, [n])?));
        tensors.push((
            "train.last_active".into(),
            self.last_active.to_device(&Device::Cpu)?,
        ));

        let mut meta = BTreeMap::new();
        let c = &self.config;
        let mut put = |k: &str, v: String| {
            meta.insert(k.to_string(), v);
        };
        put("stride.checkpoint", FORMAT.into());
        put("sae.dims", c.sae.dims.to_string());
        put("sae.latents", c.sae.latents.to_string());
        put("sae.k", c.sae.k.to_string());
        put(
            "sae.contiguous_encoder",
            c.sae.contiguous_encoder.to_string(),
        );
        put("sae.dtype", c.sae.dtype.name().into());
        put("data.features", c.features.to_string());
        put("data.feature_prob", c.feature_prob.to_string());
        put("train.batch", c.batch.to_string());
        put("train.lr", c.lr.to_string());
        put("train.seed", c.seed.to_string());
        put("train.health_every", c.health_every.to_string());
        put("train.step", self.step.to_string());
        put("rng.data", checkpoint::state_string(self.data.state()));
        put(
            "rng.default",
            checkpoint::state_string(default_generator().get_state()),
        );
        put("health.checks", self.health.checks.to_string());
        put(
            "health.issues",
            self.health
                .issues
                .iter()
                .map(|(s, i)| format!("{s}\t{}", issue_line(i)))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        checkpoint::put_optimizer(&osd, &mut tensors, &mut meta);
        stride_nn::safetensors::save(
            tensors.iter().map(|(k, t)| (k.as_str(), t)),
            Some(&meta),
            path,
        )
    }

    /// The configuration saved in a checkpoint (without loading its tensors' values into a
    /// model).
    pub fn checkpoint_config(path: impl AsRef<Path>, device: Device) -> Result<TrainConfig> {
        let f = stride_nn::safetensors::load_file(path)?;
        config_from_meta(&f.metadata, device)
    }

    /// Resumes the run saved by [`SaeTrainer::save`] on `device`: the next [`step`](Self::step)
    /// takes the same batch and gives the same loss, bit for bit, as the original run's would
    /// have. Also restores the default generator's state.
    pub fn resume(path: impl AsRef<Path>, device: Device) -> Result<SaeTrainer> {
        let path = path.as_ref();
        let f = stride_nn::safetensors::load_file(path)?;
        let meta = &f.metadata;
        let config = config_from_meta(meta, device)?;
        let mut t = SaeTrainer::new(config)?;
        let op = "SaeTrainer::resume";
        let ctx =
            |e: stride_core::Error| invalid(op, format!("checkpoint {}: {e}", path.display()));

        // everything is parsed and checked before anything is restored
        let sd = checkpoint::get_model(&f.tensors, &device)?;
        let osd = checkpoint::get_optimizer(op, &f.tensors, meta, &device)?;
        let losses = f
            .tensors
            .get("train.losses")
            .ok_or_else(|| invalid(op, "the checkpoint has no train.losses"))?
            .to_f64_vec()?;
        let last_active = f
            .tensors
            .get("train.last_active")
            .ok_or_else(|| invalid(op, "the checkpoint has no train.last_active"))?
            .to_dtype(DType::I64)?
            .to_vec::<i64>()?;
        let step: u64 = parse_meta(meta, "train.step")?;
        if losses.len() as u64 != step || last_active.len() != t.config.sae.latents {
            return Err(invalid(
                op,
                format!(
                    "checkpoint {}: inconsistent history ({} losses for step {step}, {} latents' activity for {} latents)",
                    path.display(),
                    losses.len(),
                    last_active.len(),
                    t.config.sae.latents
                ),
            ));
        }
        let data_state = checkpoint::parse_state(op, meta, "rng.data")?;
        let default_state = checkpoint::parse_state(op, meta, "rng.default")?;
        let health = HealthLog {
            checks: parse_meta(meta, "health.checks")?,
            issues: parse_issues(meta.get("health.issues").map_or("", |s| s))?,
        };

        t.model.load_state_dict(&sd, true).map_err(ctx)?;
        t.opt.load_state_dict(&osd).map_err(ctx)?;
        t.data.set_state(data_state);
        default_generator().set_state(default_state);
        t.step = step;
        t.losses = LossLog::new(losses);
        let n = last_active.len();
        t.last_active = Tensor::from_vec(last_active, [n])?.to_device(&device)?;
        t.health = health;
        Ok(t)
    }
}

/// The value of the `stride.checkpoint` metadata key of an SAE checkpoint.
pub const FORMAT: &str = "stride-sae/1";

fn parse_meta<T: std::str::FromStr>(meta: &BTreeMap<String, String>, key: &str) -> Result<T> {
    checkpoint::parse_meta(
        "SaeTrainer::resume",
        "an SAE checkpoint written by `stride train sae --save`",
        meta,
        key,
    )
}

fn config_from_meta(meta: &BTreeMap<String, String>, device: Device) -> Result<TrainConfig> {
    match meta.get("stride.checkpoint") {
        Some(f) if f == FORMAT => {}
        other => {
            return Err(invalid(
                "SaeTrainer::resume",
                format!(
                    "not an SAE checkpoint of this version: metadata stride.checkpoint is {other:?}, expected {FORMAT:?}"
                ),
            ))
        }
    }
    let dtype_name: String = parse_meta(meta, "sae.dtype")?;
    let dtype = DType::parse(&dtype_name).ok_or_else(|| {
        invalid(
            "SaeTrainer::resume",
            format!("unknown dtype {dtype_name:?} in the checkpoint"),
        )
    })?;
    Ok(TrainConfig {
        sae: SaeConfig {
            dims: parse_meta(meta, "sae.dims")?,
            latents: parse_meta(meta, "sae.latents")?,
            k: parse_meta(meta, "sae.k")?,
            contiguous_encoder: parse_meta(meta, "sae.contiguous_encoder")?,
            dtype,
            device,
        },
        features: parse_meta(meta, "data.features")?,
        feature_prob: parse_meta(meta, "data.feature_prob")?,
        batch: parse_meta(meta, "train.batch")?,
        lr: parse_meta(meta, "train.lr")?,
        seed: parse_meta(meta, "train.seed")?,
        health_every: parse_meta(meta, "train.health_every")?,
    })
}

fn issue_line(i: &HealthIssue) -> String {
    use stride_nn::optim::IssueKind::*;
    match &i.kind {
        Unchanged { grad_abs_max } => format!("{}\tunchanged\t{grad_abs_max}", i.name),
        NonFiniteMoment { moment } => format!("{}\tmoment\t{moment}", i.name),
        NonFiniteParameter => format!("{}\tparameter\t", i.name),
    }
}

fn parse_issues(s: &str) -> Result<Vec<(u64, HealthIssue)>> {
    use stride_nn::optim::IssueKind;
    let bad = |l: &str| {
        invalid(
            "SaeTrainer::resume",
            format!("malformed health issue in the checkpoint: {l:?}"),
        )
    };
    let mut v = vec![];
    for line in s.lines().filter(|l| !l.is_empty()) {
        let parts: Vec<&str> = line.split('\t').collect();
        let [step, name, kind, arg] = parts[..] else {
            return Err(bad(line));
        };
        let kind = match kind {
            "unchanged" => IssueKind::Unchanged {
                grad_abs_max: arg.parse().map_err(|_| bad(line))?,
            },
            "moment" => IssueKind::NonFiniteMoment {
                moment: match arg {
                    "exp_avg" => "exp_avg",
                    "exp_avg_sq" => "exp_avg_sq",
                    "max_exp_avg_sq" => "max_exp_avg_sq",
                    _ => "moment",
                },
            },
            "parameter" => IssueKind::NonFiniteParameter,
            _ => return Err(bad(line)),
        };
        v.push((
            step.parse().map_err(|_| bad(line))?,
            HealthIssue {
                name: name.to_string(),
                kind,
            },
        ));
    }
    Ok(v)
}
