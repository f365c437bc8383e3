//! [`GptTrainer`]: the loop behind `stride train gpt` — AdamW, warmup and cosine decay,
//! gradient clipping and accumulation, optional autocast, validation on held-out plays,
//! samples, and checkpoints that resume on the same curve, bit for bit.

use super::data::{encode_works, split_by_work, TokenStream, TokenizerKind};
use super::{Gpt, GptConfig};
use crate::checkpoint::{self, Meta};
use crate::invalid;
use crate::loss_log::LossLog;
use crate::sampling::{Sampler, SamplingConfig};
use crate::synthetic::{derive_seed, streams};
use std::path::Path;
use stride_core::autograd::no_grad;
use stride_core::distributed::{ProcessGroup, ReduceOp};
use stride_core::{default_generator, DType, Device, Generator, Result, Tensor};
use stride_nn::optim::{
    clip_grad_norm_, Adam, AdamAlgorithm, AdamConfig, Optimizer, ParamGroup,
    ZeroRedundancyOptimizer,
};
use stride_nn::{DdpConfig, DistributedDataParallel, Module};
use stride_tokenizer::Tokenizer;

/// Everything that defines a training run (and is saved in its checkpoints). The default is
/// `stride train gpt` with no flags: a 0.9M-parameter byte-level model on the CPU, nanoGPT's
/// "baby GPT" recipe (4 layers, 4 heads, width 128, 64 positions, batch 12, learning rate
/// 1e-3 decaying to 1e-4 after 100 warmup steps, β₂ = 0.99) on a 1,500-step schedule
/// (nanoGPT's is 2,000: a 2-core machine needs 3 minutes for those).
#[derive(Debug, Clone, PartialEq)]
pub struct GptTrainConfig {
    /// The model (its `vocab_size` must be the tokenizer's).
    pub model: GptConfig,
    pub tokenizer: TokenizerKind,
    /// Sequences per micro-batch, each `model.context_len` tokens.
    pub batch: usize,
    /// Micro-batches per step (gradient accumulation): a step sees `batch · accum` sequences.
    pub accum: usize,
    /// The schedule's length: the learning rate reaches `min_lr` at this step.
    pub steps: u64,
    /// Peak learning rate.
    pub lr: f64,
    /// The learning rate at the end of the cosine decay.
    pub min_lr: f64,
    /// Steps of linear warmup.
    pub warmup: u64,
    /// AdamW's decoupled weight decay, on matrices and embeddings only (not on norms and
    /// biases).
    pub weight_decay: f64,
    /// AdamW's `(β₁, β₂)`.
    pub betas: (f64, f64),
    /// Clip the gradients' total 2-norm to this (`0`: no clipping).
    pub grad_clip: f64,
    /// Validation batches per evaluation (the same windows every time).
    pub eval_batches: usize,
    /// Seeds the initial weights, the training windows, the validation windows and dropout.
    pub seed: u64,
    /// The parameters' dtype.
    pub dtype: DType,
    /// Compute the forward pass under `autocast(dtype)` (bf16 or f16); parameters stay
    /// `dtype`.
    pub autocast: Option<DType>,
    pub device: Device,
}

impl Default for GptTrainConfig {
    fn default() -> Self {
        GptTrainConfig {
            model: GptConfig::modern(259, 64, 4, 4, 128),
            tokenizer: TokenizerKind::Bytes,
            batch: 12,
            accum: 1,
            steps: 1500,
            lr: 1e-3,
            min_lr: 1e-4,
            warmup: 100,
            weight_decay: 0.1,
            betas: (0.9, 0.99),
            grad_clip: 1.0,
            eval_batches: 20,
            seed: 0,
            dtype: DType::F32,
            autocast: None,
            device: Device::Cpu,
        }
    }
}

impl GptTrainConfig {
    /// Checks every field; the error names the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        let op = "train gpt";
        self.model.validate()?;
        if self.batch == 0 || self.accum == 0 || self.eval_batches == 0 {
            return Err(invalid(
                op,
                "batch, accum and eval_batches must be at least 1",
            ));
        }
        let tokens = self
            .batch
            .checked_mul(self.accum)
            .and_then(|n| n.checked_mul(self.model.context_len + 1));
        if tokens.is_none_or(|n| n > isize::MAX as usize / 8) {
            return Err(invalid(
                op,
                format!(
                    "batch {} × accum {} × context {} tokens per step is too many to hold",
                    self.batch, self.accum, self.model.context_len
                ),
            ));
        }
        let finite = |x: f64| x.is_finite() && x >= 0.0;
        if !(finite(self.lr) && self.lr > 0.0 && finite(self.min_lr) && self.min_lr <= self.lr) {
            return Err(invalid(
                op,
                format!(
                    "need 0 ≤ min_lr ≤ lr, lr > 0, both finite; got lr {} and min_lr {}",
                    self.lr, self.min_lr
                ),
            ));
        }
        if !finite(self.weight_decay) || !finite(self.grad_clip) {
            return Err(invalid(
                op,
                format!(
                    "weight_decay ({}) and grad_clip ({}) must be finite and ≥ 0",
                    self.weight_decay, self.grad_clip
                ),
            ));
        }
        if let Some(d) = self.autocast {
            if !matches!(d, DType::BF16 | DType::F16) {
                return Err(invalid(
                    op,
                    format!("autocast computes in bf16 or f16, not {d}"),
                ));
            }
        }
        if !self.dtype.is_float() {
            return Err(invalid(
                op,
                format!("parameters must be floating point, not {}", self.dtype),
            ));
        }
        Ok(())
    }

    /// The learning rate of step `step`: nanoGPT's schedule — linear warmup to `lr` over
    /// `warmup` steps (`lr·(step + 1)/(warmup + 1)`), then a cosine from `lr` down to `min_lr`
    /// at step `steps`, then `min_lr`.
    pub fn lr_at(&self, step: u64) -> f64 {
        if step < self.warmup {
            return self.lr * (step + 1) as f64 / (self.warmup + 1) as f64;
        }
        if step >= self.steps {
            return self.min_lr;
        }
        let progress = (step - self.warmup) as f64 / (self.steps - self.warmup).max(1) as f64;
        let c = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.min_lr + c * (self.lr - self.min_lr)
    }

    fn to_meta(&self) -> Meta {
        let mut m = self.model.to_meta();
        let mut put = |k: &str, v: String| {
            m.insert(format!("train.{k}"), v);
        };
        put("tokenizer", self.tokenizer.name().into());
        put("batch", self.batch.to_string());
        put("accum", self.accum.to_string());
        put("steps", self.steps.to_string());
        put("lr", self.lr.to_string());
        put("min_lr", self.min_lr.to_string());
        put("warmup", self.warmup.to_string());
        put("weight_decay", self.weight_decay.to_string());
        put("beta1", self.betas.0.to_string());
        put("beta2", self.betas.1.to_string());
        put("grad_clip", self.grad_clip.to_string());
        put("eval_batches", self.eval_batches.to_string());
        put("seed", self.seed.to_string());
        put("dtype", self.dtype.name().into());
        put(
            "autocast",
            self.autocast.map_or("none".into(), |d| d.name().into()),
        );
        m
    }

    fn from_meta(meta: &Meta, device: Device) -> Result<GptTrainConfig> {
        let op = "GptTrainer::resume";
        let what = "a GPT checkpoint written by `stride train gpt`";
        let get = |k: &str| -> Result<String> {
            checkpoint::parse_meta(op, what, meta, &format!("train.{k}"))
        };
        fn num<T: std::str::FromStr>(k: &str, v: String) -> Result<T> {
            v.parse()
                .map_err(|_| invalid("GptTrainer::resume", format!("malformed train.{k} = {v:?}")))
        }
        let dtype_of = |k: &str, s: &str| {
            DType::parse(s).ok_or_else(|| invalid(op, format!("unknown dtype train.{k} = {s:?}")))
        };
        let tok = get("tokenizer")?;
        let autocast = match get("autocast")?.as_str() {
            "none" => None,
            s => Some(dtype_of("autocast", s)?),
        };
        Ok(GptTrainConfig {
            model: GptConfig::from_meta(meta)?,
            tokenizer: TokenizerKind::parse(&tok)
                .ok_or_else(|| invalid(op, format!("unknown tokenizer {tok:?}")))?,
            batch: num("batch", get("batch")?)?,
            accum: num("accum", get("accum")?)?,
            steps: num("steps", get("steps")?)?,
            lr: num("lr", get("lr")?)?,
            min_lr: num("min_lr", get("min_lr")?)?,
            warmup: num("warmup", get("warmup")?)?,
            weight_decay: num("weight_decay", get("weight_decay")?)?,
            betas: (num("beta1", get("beta1")?)?, num("beta2", get("beta2")?)?),
            grad_clip: num("grad_clip", get("grad_clip")?)?,
            eval_batches: num("eval_batches", get("eval_batches")?)?,
            seed: num("seed", get("seed")?)?,
            dtype: dtype_of("dtype", &get("dtype")?)?,
            autocast,
            device,
        })
    }
}

/// The training and validation token ids of a run.
pub struct Corpus {
    pub train: Vec<i64>,
    pub val: Vec<i64>,
}

impl Corpus {
    /// The Shakespeare text ([`crate::hub::shakespeare_text`], fetched on first use) split by
    /// work and encoded with `tok`, a tokenizer of `kind` ([`TokenizerKind::load`]).
    pub fn shakespeare(kind: TokenizerKind, tok: &Tokenizer) -> Result<Corpus> {
        let path = crate::hub::shakespeare_text()?;
        let text = std::fs::read(&path)
            .map_err(|e| invalid("Corpus::shakespeare", format!("{}: {e}", path.display())))?;
        let (train, val) = split_by_work(&text)?;
        Ok(Corpus {
            train: encode_works(tok, kind, &train)?,
            val: encode_works(tok, kind, &val)?,
        })
    }
}

/// What one step did.
#[derive(Debug, Clone)]
pub struct GptStep {
    /// The step's index (0-based).
    pub step: u64,
    /// Its learning rate.
    pub lr: f64,
    /// The mean training loss over the step's micro-batches (the objective: with a mixture
    /// of experts it includes the router's losses), on steps that read it back
    /// ([`GptTrainer::set_loss_every`]).
    pub loss: Option<f64>,
    /// A mixture of experts' load on those same steps: tokens routed to each expert of each
    /// block (`[block][expert]`) since the last read, from device-side counters.
    pub expert_load: Option<Vec<Vec<i64>>>,
}

/// A training run: model, AdamW (plain, or sharded over the ranks with ZeRO: see
/// [`GptTrainer::distribute_with`]), data streams and history.
///
/// ```
/// use stride_models::gpt::{Corpus, GptConfig, GptTrainConfig, GptTrainer};
/// let config = GptTrainConfig {
///     model: GptConfig::modern(259, 16, 1, 2, 16), batch: 4, steps: 30, warmup: 5,
///     eval_batches: 2, ..GptTrainConfig::default()
/// };
/// // a tiny corpus: the training text is one phrase repeated
/// let text: Vec<i64> = b"to be or not to be, ".repeat(20).iter().map(|&b| 3 + b as i64).collect();
/// let mut t = GptTrainer::new(config, Corpus { train: text.clone(), val: text })?;
/// let before = t.evaluate()?;
/// for _ in 0..30 { t.step()?; }
/// assert!(t.evaluate()? < before);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub struct GptTrainer {
    config: GptTrainConfig,
    model: Gpt,
    opt: TrainerOpt,
    train: TokenStream,
    val: TokenStream,
    data_gen: Generator,
    step: u64,
    losses: LossLog,
    evals: Vec<(u64, f64)>,
    /// Data-parallel training ([`GptTrainer::distribute`]).
    ddp: Option<DistributedDataParallel>,
}

impl GptTrainer {
    /// A fresh run on `corpus` (its ids must be below the model's vocabulary size). Seeds
    /// the default generator, which dropout draws from, from the run's seed (as the SAE
    /// trainer does), so a run is the same every time.
    pub fn new(config: GptTrainConfig, corpus: Corpus) -> Result<GptTrainer> {
        config.validate()?;
        let op = "GptTrainer::new";
        let v = config.model.vocab_size as i64;
        for (name, ids) in [("training", &corpus.train), ("validation", &corpus.val)] {
            if let Some(&bad) = ids.iter().find(|&&i| i < 0 || i >= v) {
                return Err(invalid(
                    op,
                    format!(
                        "the {name} text has token id {bad}, outside the model's vocabulary 0..{v}"
                    ),
                ));
            }
            if ids.len() <= config.model.context_len {
                return Err(invalid(
                    op,
                    format!(
                        "the {name} text has {} tokens; it needs more than the context length {}",
                        ids.len(),
                        config.model.context_len
                    ),
                ));
            }
        }
        let dev = config.device;
        let init = Generator::new(derive_seed(config.seed, streams::INIT));
        let model = Gpt::new(config.model.clone(), config.dtype, &dev, &init)?;
        model.train(true);
        let (decay, no_decay): (Vec<_>, Vec<_>) = model
            .named_parameters()
            .into_iter()
            .partition(|(_, p)| p.shape().len() >= 2);
        let adamw = |wd: f64| AdamConfig {
            lr: config.lr_at(0),
            betas: config.betas,
            weight_decay: wd,
            ..AdamConfig::adamw()
        };
        let opt = Adam::with_groups(vec![
            ParamGroup::new(decay, adamw(config.weight_decay)),
            ParamGroup::new(no_decay, adamw(0.0)),
        ])?;
        default_generator().manual_seed(derive_seed(config.seed, streams::DROPOUT));
        Ok(GptTrainer {
            train: TokenStream::new(corpus.train, &dev)?,
            val: TokenStream::new(corpus.val, &dev)?,
            data_gen: Generator::new(derive_seed(config.seed, streams::TRAIN)),
            config,
            model,
            opt: TrainerOpt::Plain(opt),
            step: 0,
            losses: LossLog::new(vec![]),
            evals: vec![],
            ddp: None,
        })
    }

    /// Trains data-parallel over `group` from now on: every rank draws the same global batch
    /// (the configured `batch`, which the world size must divide) and computes on its share
    /// of the rows; [`DistributedDataParallel`] averages the gradients during backward, so
    /// each step is the step one process takes on the whole batch — the curve does not
    /// depend on the number of ranks, and a checkpoint resumes on any number. Each rank's
    /// dropout draws from its own stream. Rank 0's parameters are broadcast to all.
    pub fn distribute(&mut self, group: ProcessGroup) -> Result<()> {
        self.distribute_with(group, false)
    }

    /// [`GptTrainer::distribute`], and with `zero` AdamW's state sharded over the ranks
    /// (ZeRO stage 1, [`ZeroRedundancyOptimizer`]): each rank keeps the moments of about
    /// `1/world` of the parameters, updates those and broadcasts them after each step. The
    /// steps are the plain optimizer's, bit for bit. The state the trainer has (a resumed
    /// run's) is sharded from the full one. Saving is then a collective: see
    /// [`GptTrainer::save`].
    pub fn distribute_with(&mut self, group: ProcessGroup, zero: bool) -> Result<()> {
        let op = "GptTrainer::distribute";
        let w = group.world_size();
        if !self.config.batch.is_multiple_of(w) {
            return Err(invalid(
                op,
                format!(
                    "the batch of {} sequences does not split evenly over {w} ranks: make it a multiple of {w}",
                    self.config.batch
                ),
            ));
        }
        if group.device() != self.config.device {
            return Err(invalid(
                op,
                format!(
                    "the group is on {} but the model on {}",
                    group.device(),
                    self.config.device
                ),
            ));
        }
        if zero && !matches!(self.opt, TrainerOpt::Plain(_)) {
            return Err(invalid(
                op,
                "the optimizer state is already sharded: distribute once",
            ));
        }
        let ddp = DistributedDataParallel::for_module(&self.model, &group, DdpConfig::default())?;
        if let (true, TrainerOpt::Plain(plain)) = (zero, &self.opt) {
            let mut z =
                ZeroRedundancyOptimizer::with_groups(plain.param_groups().to_vec(), &group)?;
            z.load_state_dict(&plain.state_dict()?)?;
            self.opt = TrainerOpt::Zero(z);
        }
        self.model.set_process_group(Some(group.clone()));
        // rank 0 keeps the single-process stream; the others get streams of their own
        let dropout = derive_seed(self.config.seed, streams::DROPOUT);
        default_generator().manual_seed(match group.rank() {
            0 => dropout,
            r => derive_seed(dropout, r as u64),
        });
        self.ddp = Some(ddp);
        Ok(())
    }

    pub fn config(&self) -> &GptTrainConfig {
        &self.config
    }
    pub fn model(&self) -> &Gpt {
        &self.model
    }
    /// AdamW: the plain optimizer, or ZeRO's after [`GptTrainer::distribute_with`] (whose
    /// `state_dict` is a collective).
    pub fn optimizer(&self) -> &dyn Optimizer {
        self.opt.get()
    }
    /// Whether AdamW's state is sharded over the ranks (ZeRO): saving is then a collective.
    pub fn shards_optimizer_state(&self) -> bool {
        matches!(self.opt, TrainerOpt::Zero(_))
    }
    /// Bytes of AdamW state this rank holds (with ZeRO its share; 0 before the first step).
    pub fn optimizer_state_bytes(&self) -> usize {
        match &self.opt {
            TrainerOpt::Plain(o) => o.state_bytes(),
            TrainerOpt::Zero(o) => o.state_bytes(),
        }
    }
    pub fn steps_done(&self) -> u64 {
        self.step
    }
    /// Training tokens and validation tokens.
    pub fn corpus_sizes(&self) -> (usize, usize) {
        (self.train.len(), self.val.len())
    }
    /// Every step's training loss read back so far (see [`GptTrainer::read_losses`]).
    pub fn losses(&self) -> &[f64] {
        self.losses.read()
    }
    /// Every evaluation so far: (steps done, validation loss).
    pub fn evals(&self) -> &[(u64, f64)] {
        &self.evals
    }
    /// Reads the losses still on the device (one host wait for all of them).
    pub fn read_losses(&mut self) -> Result<&[f64]> {
        self.losses.read_all()
    }
    /// Reads the loss back on steps `0, N, 2N, …` only (`0`: only when asked): between reads
    /// a GPU step queues its work and returns at once. Does not change the curve.
    pub fn set_loss_every(&mut self, n: u64) {
        self.losses.set_every(n);
    }

    /// One optimizer step: `accum` micro-batches forward and backward, clipping, AdamW at
    /// this step's learning rate. Nothing in it waits for the device except the loss read on
    /// the steps [`GptTrainer::set_loss_every`] names.
    pub fn step(&mut self) -> Result<GptStep> {
        let (b, t) = (self.config.batch, self.config.model.context_len);
        let batches = (0..self.config.accum)
            .map(|_| self.train.batch(b, t, &self.data_gen))
            .collect::<Result<Vec<_>>>()?;
        self.step_on(&batches)
    }

    /// [`GptTrainer::step`] on given micro-batches `(inputs, targets)`, each `(b, t)` i64 on
    /// the model's device (any number of them; the loss is their mean), instead of windows
    /// drawn from the training text: what a comparison against another framework feeds.
    pub fn step_on(&mut self, batches: &[(Tensor, Tensor)]) -> Result<GptStep> {
        if batches.is_empty() {
            return Err(invalid("GptTrainer::step_on", "no micro-batches"));
        }
        let c = &self.config;
        let step = self.step;
        let lr = c.lr_at(step);
        let opt = self.opt.get_mut();
        for g in 0..opt.num_groups() {
            opt.set_lr(g, lr)?;
        }
        let n = batches.len();
        let mut total: Option<Tensor> = None;
        for (i, (x, y)) in batches.iter().enumerate() {
            // data-parallel: this rank's rows of the global batch; the gradients are
            // averaged over the ranks on the last micro-batch only
            let (x, y) = match &self.ddp {
                Some(d) => {
                    let (w, r) = (d.group().world_size(), d.group().rank());
                    let rows = x.shape().first().copied().unwrap_or(0);
                    if rows % w != 0 {
                        return Err(invalid(
                            "GptTrainer::step_on",
                            format!("a micro-batch of {rows} rows does not split over {w} ranks"),
                        ));
                    }
                    let per = rows / w;
                    (
                        x.narrow(0, (r * per) as i64, per)?,
                        y.narrow(0, (r * per) as i64, per)?,
                    )
                }
                None => (x.clone(), y.clone()),
            };
            let _no_sync = match &self.ddp {
                Some(d) if i + 1 < n => Some(d.no_sync()),
                _ => None,
            };
            let loss = {
                let _ac = c
                    .autocast
                    .map(stride_core::autocast::autocast)
                    .transpose()?;
                self.model.loss(&x, &y)?
            };
            let loss = if n > 1 { loss.div(n as f64)? } else { loss };
            loss.backward()?;
            let l = loss.detach();
            total = Some(match total {
                None => l,
                Some(s) => s.add(&l)?,
            });
        }
        let total = total.expect("at least one micro-batch");
        if let Some(d) = &self.ddp {
            // the logged loss is the global batch's: the mean of the ranks' (equal shares)
            d.group().all_reduce_(&total, ReduceOp::Avg)?.wait()?;
        }
        if c.grad_clip > 0.0 {
            clip_grad_norm_(&self.model.parameters(), c.grad_clip, 2.0, false)?;
        }
        let opt = self.opt.get_mut();
        opt.step()?;
        opt.zero_grad()?;
        let loss = self.losses.push(step, total)?;
        self.step += 1;
        let expert_load = match (loss, &c.model.moe) {
            (Some(_), Some(_)) => Some(self.model.take_expert_load()?),
            _ => None,
        };
        Ok(GptStep {
            step,
            lr,
            loss,
            expert_load,
        })
    }

    /// The model's parameters and buffers replaced by `sd` (strict: every name, every
    /// shape), e.g. to start from another framework's initialisation.
    pub fn load_model_state(&mut self, sd: &stride_nn::StateDict) -> Result<()> {
        self.model.load_state_dict(sd, true).map(|_| ())
    }

    /// The mean loss on `eval_batches` validation batches — the same windows at every call
    /// (drawn from the seed's evaluation stream) — in eval mode, without gradients. Recorded
    /// in [`GptTrainer::evals`]. One host wait.
    pub fn evaluate(&mut self) -> Result<f64> {
        let v = self.loss_on(&self.val, self.config.eval_batches)?;
        self.evals.push((self.step, v));
        Ok(v)
    }

    fn loss_on(&self, s: &TokenStream, batches: usize) -> Result<f64> {
        let c = &self.config;
        let _ng = no_grad();
        self.model.eval();
        let g = Generator::new(derive_seed(c.seed, streams::EVAL));
        let r = (|| {
            let mut losses: Vec<Tensor> = vec![];
            for _ in 0..batches {
                let (x, y) = s.batch(c.batch, c.model.context_len, &g)?;
                let _ac = c
                    .autocast
                    .map(stride_core::autocast::autocast)
                    .transpose()?;
                losses.push(self.model.cross_entropy(&x, &y)?);
            }
            // one read, summed in f64 on the host in batch order (devices without f64 too)
            let refs: Vec<&Tensor> = losses.iter().collect();
            let sum: f64 = Tensor::stack(&refs, 0)?.to_f64_vec()?.iter().sum();
            Ok(sum / batches as f64)
        })();
        self.model.train(true);
        r
    }

    /// Continues `prompt` by `max_tokens` tokens drawn with `sampling`, the model seeing the
    /// last `context_len` tokens at each step (a sliding window: every token re-reads its
    /// window, no cache). The tokens stay on the device until the end.
    pub fn sample(
        &self,
        tok: &Tokenizer,
        prompt: &str,
        max_tokens: usize,
        sampling: SamplingConfig,
    ) -> Result<String> {
        sample_window(
            &self.model,
            self.config.tokenizer,
            tok,
            prompt,
            max_tokens,
            sampling,
        )
    }

    // ----- checkpoints --------------------------------------------------------------------

    /// Saves the model, AdamW's state, the step, the loss and validation history, the
    /// generators' states and the configuration in one safetensors file.
    ///
    /// With the optimizer state sharded ([`GptTrainer::distribute_with`]) this is a
    /// collective: **every rank must call it at the same step** — the ranks consolidate the
    /// whole state (the plain optimizer's, so the checkpoint resumes on any number of
    /// ranks, sharded or not) — and only rank 0 writes `path`; the others return once the
    /// state has been gathered.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let _ng = no_grad();
        let osd = self.opt.get().state_dict()?;
        if let TrainerOpt::Zero(z) = &self.opt {
            if z.group().rank() != 0 {
                return Ok(());
            }
        }
        let mut tensors: Vec<(String, Tensor)> = vec![];
        for (name, t) in self.model.state_dict().iter() {
            tensors.push((format!("model.{name}"), t.clone()));
        }
        let mut meta = self.config.to_meta();
        checkpoint::put_optimizer(&osd, &mut tensors, &mut meta);
        let losses = self.losses.values()?;
        let n = losses.len();
        tensors.push(("train.losses".into(), Tensor::from_vec(losses, [n])?));
        let (es, ev): (Vec<f64>, Vec<f64>) = self.evals.iter().map(|&(s, v)| (s as f64, v)).unzip();
        let ne = es.len();
        tensors.push(("train.eval_steps".into(), Tensor::from_vec(es, [ne])?));
        tensors.push(("train.eval_losses".into(), Tensor::from_vec(ev, [ne])?));
        meta.insert("stride.checkpoint".into(), FORMAT.into());
        meta.insert("train.step".into(), self.step.to_string());
        meta.insert(
            "rng.data".into(),
            checkpoint::state_string(self.data_gen.get_state()),
        );
        meta.insert(
            "rng.default".into(),
            checkpoint::state_string(default_generator().get_state()),
        );
        stride_nn::safetensors::save(
            tensors.iter().map(|(k, t)| (k.as_str(), t)),
            Some(&meta),
            path,
        )
    }

    /// The configuration saved in a checkpoint, for `device`.
    pub fn checkpoint_config(path: impl AsRef<Path>, device: Device) -> Result<GptTrainConfig> {
        let f = stride_nn::safetensors::load_file(path)?;
        check_format(&f.metadata)?;
        GptTrainConfig::from_meta(&f.metadata, device)
    }

    /// The model of a checkpoint alone (for sampling and generation), in eval mode.
    pub fn load_model(path: impl AsRef<Path>, device: Device) -> Result<(Gpt, GptTrainConfig)> {
        let path = path.as_ref();
        let f = stride_nn::safetensors::load_file(path)?;
        check_format(&f.metadata)?;
        let config = GptTrainConfig::from_meta(&f.metadata, device)?;
        let model = Gpt::new(
            config.model.clone(),
            config.dtype,
            &device,
            &Generator::new(0),
        )?;
        model
            .load_state_dict(&checkpoint::get_model(&f.tensors, &device)?, true)
            .map_err(|e| invalid("GptTrainer::load_model", format!("{}: {e}", path.display())))?;
        model.eval();
        Ok((model, config))
    }

    /// Resumes the run saved by [`GptTrainer::save`] on `device` with the same corpus: the
    /// next [`step`](Self::step) takes the same batch and gives the same loss, bit for bit,
    /// as the original run's would have. Also restores the default generator's state.
    pub fn resume(path: impl AsRef<Path>, device: Device, corpus: Corpus) -> Result<GptTrainer> {
        let path = path.as_ref();
        let op = "GptTrainer::resume";
        let ctx =
            |e: stride_core::Error| invalid(op, format!("checkpoint {}: {e}", path.display()));
        let f = stride_nn::safetensors::load_file(path)?;
        let meta = &f.metadata;
        check_format(meta)?;
        let config = GptTrainConfig::from_meta(meta, device)?;
        let mut t = GptTrainer::new(config, corpus)?;
        // everything is parsed and checked before anything is restored
        let sd = checkpoint::get_model(&f.tensors, &device)?;
        let osd = checkpoint::get_optimizer(op, &f.tensors, meta, &device)?;
        let vec_of = |k: &str| -> Result<Vec<f64>> {
            f.tensors
                .get(k)
                .ok_or_else(|| invalid(op, format!("the checkpoint has no {k}")))?
                .to_f64_vec()
        };
        let losses = vec_of("train.losses")?;
        let es = vec_of("train.eval_steps")?;
        let ev = vec_of("train.eval_losses")?;
        let step: u64 = checkpoint::parse_meta(op, "a GPT checkpoint", meta, "train.step")?;
        if losses.len() as u64 != step || es.len() != ev.len() {
            return Err(invalid(
                op,
                format!(
                    "checkpoint {}: inconsistent history ({} losses for step {step})",
                    path.display(),
                    losses.len()
                ),
            ));
        }
        let data_state = checkpoint::parse_state(op, meta, "rng.data")?;
        let default_state = checkpoint::parse_state(op, meta, "rng.default")?;
        t.model.load_state_dict(&sd, true).map_err(ctx)?;
        t.opt.get_mut().load_state_dict(&osd).map_err(ctx)?;
        t.data_gen.set_state(data_state);
        default_generator().set_state(default_state);
        t.step = step;
        t.losses = LossLog::new(losses);
        t.evals = es.into_iter().map(|s| s as u64).zip(ev).collect();
        Ok(t)
    }
}

/// The trainer's AdamW: one optimizer on every rank, or its state sharded over the ranks.
enum TrainerOpt {
    Plain(Adam),
    Zero(ZeroRedundancyOptimizer<AdamAlgorithm>),
}

impl TrainerOpt {
    fn get(&self) -> &dyn Optimizer {
        match self {
            TrainerOpt::Plain(o) => o,
            TrainerOpt::Zero(o) => o,
        }
    }
    fn get_mut(&mut self) -> &mut dyn Optimizer {
        match self {
            TrainerOpt::Plain(o) => o,
            TrainerOpt::Zero(o) => o,
        }
    }
}

/// The value of the `stride.checkpoint` metadata key of a GPT checkpoint.
pub const FORMAT: &str = "stride-gpt/1";

fn check_format(meta: &Meta) -> Result<()> {
    match meta.get("stride.checkpoint") {
        Some(f) if f == FORMAT => Ok(()),
        other => Err(invalid(
            "GptTrainer",
            format!(
                "not a GPT checkpoint of this version: metadata stride.checkpoint is {other:?}, expected {FORMAT:?}"
            ),
        )),
    }
}

/// [`GptTrainer::sample`] for any model: sliding-window sampling on the model's device.
pub fn sample_window(
    model: &Gpt,
    kind: TokenizerKind,
    tok: &Tokenizer,
    prompt: &str,
    max_tokens: usize,
    sampling: SamplingConfig,
) -> Result<String> {
    let op = "sample";
    let _ng = no_grad();
    let dev = model.device();
    let ctx = model.config().context_len;
    let mut ids = encode_works(tok, kind, &[prompt.as_bytes()])?;
    if ids.is_empty() {
        // an empty prompt starts at a line break
        ids = encode_works(tok, kind, &[b"\n"])?;
    }
    let n0 = ids.len();
    let was_training = model.is_training();
    model.eval();
    let r = (|| {
        let mut sampler = Sampler::new(sampling, dev)?;
        let mut all = Tensor::from_vec(ids, [1, n0])?.to_device(&dev)?;
        for _ in 0..max_tokens {
            let n = all.shape()[1];
            let window = all.narrow(1, n.saturating_sub(ctx) as i64, n.min(ctx))?;
            let logits = model.forward(&window)?;
            let last = logits
                .select(1, window.shape()[1] as i64 - 1)?
                .to_dtype(DType::F32)?;
            let next = sampler.sample(&last, None)?;
            all = Tensor::cat(&[&all, &next.unsqueeze(1)?], 1)?;
        }
        let out: Vec<u32> = all
            .to_vec::<i64>()?
            .into_iter()
            .skip(n0)
            .map(|i| i as u32)
            .collect();
        tok.decode_lossy(&out, true)
            .map_err(|e| invalid(op, e.to_string()))
    })();
    model.train(was_training);
    r
}
