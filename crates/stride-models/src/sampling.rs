//! Choosing the next token from a model's logits, on the model's device.
//!
//! A [`Sampler`] takes the logits of the last position, `[batch, vocab]`, and returns the next
//! token of every row, `[batch]` i64, **on the same device**: every step below is a tensor op
//! there, so a decoding step never makes the host wait (the generation loop then reads the
//! tokens back: that read is the one host wait per generated token).
//!
//! # The filters, in order
//!
//! 1. **Repetition penalty** (`repetition_penalty`, over the last `repeat_last_n` tokens of
//!    the history): the logit `l` of every token that occurs in that window becomes `l / r`
//!    when `l > 0` and `l · r` otherwise (llama.cpp's `penalty_repeat`, Hugging Face's
//!    `repetition_penalty`), computed in f32 with `r` rounded to f32. A token counts once
//!    however often it occurs. History entries `< 0` are ignored (padding).
//!    The window is given as the history (`Sampler::sample`) or, in a decoding loop, as the
//!    mask kept up to date by [`RecentTokens`] (`Sampler::sample_with_seen`).
//! 2. **Greedy** when `temperature == 0`: the arg-max of the penalised logits (the lowest id
//!    among equal maxima). Nothing is drawn; the generator does not advance.
//! 3. **Top-k** (`top_k > 0`): the `k` largest logits (`Tensor::topk`; among equal values
//!    the lower id first).
//! 4. **Top-p** (`top_p < 1`): with the candidates sorted by decreasing logit and
//!    `p_i = softmax(candidates)_i` (temperature 1), keep the smallest prefix whose mass
//!    reaches `top_p`: candidate `i` stays iff `p_0 + … + p_{i-1} < top_p` (so the first
//!    always stays).
//! 5. **Min-p** (`min_p > 0`): keep candidate `i` iff `p_i ≥ min_p · p_max`, i.e.
//!    `exp(l_i − l_max) ≥ min_p` (independent of which candidates are left).
//! 6. **Temperature**: the kept candidates get weights `exp((l_i − l_max) / temperature)`.
//! 7. **Draw**: one uniform `u` per row from the sampler's Philox [`Generator`]
//!    (`Tensor::rand([batch, 1], f64)`: two stream words per row and step); with the kept
//!    weights in candidate order and `c_i` their running sum (f64), the token is the first
//!    candidate with `c_i > u · c_last` (inverse CDF).
//!
//! This is **llama.cpp's default chain** (`penalties → top_k → top_p → min_p → temperature →
//! dist`, leaving out its DRY, typical-p, XTC and top-nσ samplers, which are off by default):
//! top-p and min-p choose the candidates from the temperature-1 distribution, and the
//! temperature then only reshapes the distribution over them. Hugging Face's `generate`
//! applies the temperature *first* (`temperature → top_k → top_p → min_p`), so its top-p set
//! depends on the temperature; for the same settings the two can keep different sets.
//!
//! # Defaults
//!
//! [`SamplingConfig::default`] is llama.cpp's CLI default: temperature 0.8, top-k 40, top-p
//! 0.95, min-p 0.05, repetition penalty 1.0 (off) over the last 64 tokens, and a random seed
//! (reported by [`Sampler::seed`], so a run can be replayed). [`SamplingConfig::greedy`] is
//! temperature 0.
//!
//! # The same seed on every device
//!
//! The uniforms come from stride's counter-based Philox stream, which gives the same bits
//! on the CPU and on CUDA, and the filters are exact selections (sort/top-k break ties by
//! id on every device). The weights and their running sums are computed in f64 from f32
//! logits; a device's `exp` or summation order may differ from another's in the last bits,
//! which changes a token only when `u · c_last` falls within those bits of a boundary
//! between two candidates (a probability of order 1e-15 per token). So the same seed gives
//! the same tokens on the CPU and on CUDA, given the same logits.
//!
//! ```
//! use stride_core::{Device, Tensor};
//! use stride_models::sampling::{Sampler, SamplingConfig};
//! let logits = Tensor::from_vec(vec![0.0f32, 3.0, 1.0, 2.9], [1, 4])?;
//! let mut greedy = Sampler::new(SamplingConfig::greedy(), Device::Cpu)?;
//! assert_eq!(greedy.sample(&logits, None)?.to_vec::<i64>()?, vec![1]);
//! // top-k 2 at temperature 1: only ids 1 and 3 can come out
//! let cfg = SamplingConfig { temperature: 1.0, top_k: 2, top_p: 1.0, min_p: 0.0, seed: Some(7), ..Default::default() };
//! let mut s = Sampler::new(cfg, Device::Cpu)?;
//! for _ in 0..20 {
//!     let t = s.sample(&logits, None)?.to_vec::<i64>()?[0];
//!     assert!(t == 1 || t == 3);
//! }
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::invalid;
use stride_core::{DType, Device, Generator, Result, Tensor};

/// How the next token is chosen; see the [module docs](self) for the order of the filters.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingConfig {
    /// Divides the logits of the kept candidates; `0` is greedy (arg-max). Default 0.8.
    pub temperature: f64,
    /// Keep the `top_k` most likely tokens; `0` keeps all. Default 40.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`; `1`
    /// keeps all. Default 0.95.
    pub top_p: f64,
    /// Keep tokens at least `min_p` times as likely as the most likely one; `0` keeps all.
    /// Default 0.05.
    pub min_p: f64,
    /// Penalise tokens seen in the last `repeat_last_n` tokens (`> 1` discourages them); `1`
    /// is off. Default 1.0 (llama.cpp's current default).
    pub repetition_penalty: f64,
    /// How many of the last tokens the penalty looks at (`0`: none). Default 64.
    pub repeat_last_n: usize,
    /// The seed of the draws; `None` picks one at random (see [`Sampler::seed`]).
    pub seed: Option<u64>,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: None,
        }
    }
}

impl SamplingConfig {
    /// Temperature 0: always the most likely token (after the repetition penalty, if any).
    pub fn greedy() -> Self {
        SamplingConfig {
            temperature: 0.0,
            ..Default::default()
        }
    }

    /// Checks the values (finite, in range); the error names the field.
    pub fn validate(&self) -> Result<()> {
        let op = "sampling";
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(invalid(
                op,
                format!(
                    "temperature must be finite and >= 0 (0 is greedy), got {}",
                    self.temperature
                ),
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(invalid(
                op,
                format!("top_p must be in (0, 1] (1 is off), got {}", self.top_p),
            ));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(invalid(
                op,
                format!("min_p must be in [0, 1] (0 is off), got {}", self.min_p),
            ));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(invalid(
                op,
                format!(
                    "repetition_penalty must be finite and > 0 (1 is off), got {}",
                    self.repetition_penalty
                ),
            ));
        }
        Ok(())
    }

    fn penalty_on(&self) -> bool {
        self.repetition_penalty != 1.0 && self.repeat_last_n > 0
    }
}

/// Chooses next tokens on the model's device; see the [module docs](self).
///
/// Holds its own [`Generator`] (seeded from the configuration), so two samplers with the
/// same seed and the same logits give the same tokens, on any device.
#[derive(Debug)]
pub struct Sampler {
    config: SamplingConfig,
    device: Device,
    seed: u64,
    generator: Generator,
    /// `arange(n)` as i64 on the device, by `n` (the vocabulary for the penalty mask, the
    /// candidate count for picking the drawn candidate's id): made once, not per step.
    aranges: Vec<(usize, Tensor)>,
}

impl Sampler {
    /// A sampler for logits on `device`. An error for an invalid configuration.
    pub fn new(config: SamplingConfig, device: Device) -> Result<Sampler> {
        config.validate()?;
        let generator = Generator::new(0);
        let seed = match config.seed {
            Some(s) => s,
            None => generator.seed(),
        };
        generator.manual_seed(seed);
        Ok(Sampler {
            config,
            device,
            seed,
            generator,
            aranges: Vec::new(),
        })
    }

    /// The seed of the draws (the configured one, or the one picked at random).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The configuration.
    pub fn config(&self) -> &SamplingConfig {
        &self.config
    }

    /// The device the sampler works on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The generator of the draws (its state says how far the stream has been used).
    pub fn generator(&self) -> &Generator {
        &self.generator
    }

    fn arange(&mut self, n: usize) -> Result<Tensor> {
        if let Some((_, t)) = self.aranges.iter().find(|(m, _)| *m == n) {
            return Ok(t.clone());
        }
        let t = Tensor::arange(0i64, n as i64, &self.device)?;
        self.aranges.push((n, t.clone()));
        Ok(t)
    }

    /// The next token of every row: `logits` is `[batch, vocab]` (float, f32 from a
    /// [`crate::CausalLm`]) on the sampler's device; `history` (optional) is `[batch, n]` i64
    /// on the same device, the tokens the repetition penalty looks at (its last
    /// `repeat_last_n` columns; entries `< 0` are ignored, in any order). Returns `[batch]`
    /// i64 on the device, without any host wait.
    pub fn sample(&mut self, logits: &Tensor, history: Option<&Tensor>) -> Result<Tensor> {
        self.sample_impl(logits, history.map(Penalty::History))
    }

    /// [`Sampler::sample`] with the repetition penalty's window given as a `[batch, vocab]`
    /// bool mask of the tokens seen (e.g. [`RecentTokens::seen`], which a decoding loop keeps
    /// up to date in `O(batch · vocab)` per step instead of comparing the whole window).
    pub fn sample_with_seen(&mut self, logits: &Tensor, seen: Option<&Tensor>) -> Result<Tensor> {
        self.sample_impl(logits, seen.map(Penalty::Seen))
    }

    fn sample_impl(&mut self, logits: &Tensor, penalty: Option<Penalty>) -> Result<Tensor> {
        let op = "Sampler::sample";
        if logits.dim() != 2 || logits.shape()[1] == 0 {
            return Err(invalid(
                op,
                format!(
                    "expects logits of shape [batch, vocab], got {:?}",
                    logits.shape()
                ),
            ));
        }
        if !logits.dtype().is_float() {
            return Err(invalid(
                op,
                format!("expects float logits, got {}", logits.dtype()),
            ));
        }
        if logits.device() != self.device {
            return Err(invalid(
                op,
                format!(
                    "logits are on {} but the sampler was made for {}",
                    logits.device(),
                    self.device
                ),
            ));
        }
        let (batch, vocab) = (logits.shape()[0], logits.shape()[1]);
        let mut x = logits.to_dtype(DType::F32)?;
        match (self.config.penalty_on(), penalty) {
            (true, Some(Penalty::History(h))) => {
                if h.dim() != 2 || h.shape()[0] != batch || h.dtype() != DType::I64 {
                    return Err(invalid(
                        op,
                        format!(
                            "expects the history as [batch = {batch}, n] int64, got {:?} {}",
                            h.shape(),
                            h.dtype()
                        ),
                    ));
                }
                if h.shape()[1] > 0 {
                    let ids = self.arange(vocab)?;
                    let seen = seen_mask(h, self.config.repeat_last_n, &ids)?;
                    x = penalise(&x, &seen, self.config.repetition_penalty)?;
                }
            }
            (true, Some(Penalty::Seen(m))) => {
                if m.shape() != [batch, vocab] || m.dtype() != DType::Bool {
                    return Err(invalid(
                        op,
                        format!(
                            "expects the seen mask as [batch = {batch}, vocab = {vocab}] bool, got {:?} {}",
                            m.shape(),
                            m.dtype()
                        ),
                    ));
                }
                x = penalise(&x, m, self.config.repetition_penalty)?;
            }
            _ => {}
        }
        if self.config.temperature == 0.0 {
            return x.argmax(Some(1), false);
        }
        let c = &self.config;
        let k = if c.top_k > 0 && c.top_k < vocab {
            c.top_k
        } else {
            vocab
        };
        // candidates in decreasing order, with their ids, when a filter needs the order
        let (vals, ids) = if k < vocab {
            let (v, i) = x.topk(k, 1, true, true)?;
            (v, Some(i))
        } else if c.top_p < 1.0 {
            let (v, i) = x.sort(1, true, true)?;
            (v, Some(i))
        } else {
            (x, None)
        };
        let v = vals.to_dtype(DType::F64)?;
        let lmax = if ids.is_some() {
            v.slice(1, 0, 1, 1)?
        } else {
            v.amax(&[1], true)?
        };
        let centred = v.sub(&lmax)?; // ≤ 0, 0 at the maximum
        let mut keep: Option<Tensor> = None;
        if c.top_p < 1.0 {
            let e = centred.exp()?;
            let p = e.div(&e.sum_dims(&[1], true)?)?;
            let before = p.cumsum(1)?.sub(&p)?; // mass of the candidates ahead of each
            keep = Some(before.lt(c.top_p)?);
        }
        if c.min_p > 0.0 {
            let m = centred.exp()?.ge(c.min_p)?;
            keep = Some(match keep {
                Some(k) => k.logical_and(&m)?,
                None => m,
            });
        }
        let mut w = centred.div(c.temperature)?.exp()?;
        if let Some(m) = &keep {
            w = m.where_cond(&w, 0.0)?;
        }
        let cdf = w.cumsum(1)?;
        let n = w.shape()[1] as i64;
        let total = cdf.slice(1, n - 1, n, 1)?;
        let u = Tensor::rand([batch, 1], DType::F64, &self.device, Some(&self.generator))?;
        let target = u.mul(&total)?;
        // first candidate whose running sum exceeds the target; never past the last one with
        // weight (the first whose running sum reaches the total), should u·total round up
        let j = cdf
            .le(&target)?
            .sum_dims(&[1], false)?
            .minimum(&cdf.lt(&total)?.sum_dims(&[1], false)?)?
            .to_dtype(DType::I64)?;
        match ids {
            None => Ok(j),
            Some(ids) => {
                let pos = self.arange(n as usize)?.unsqueeze(0)?;
                let chosen = pos.eq(&j.unsqueeze(1)?)?;
                chosen.where_cond(&ids, 0i64)?.sum_dims(&[1], false)
            }
        }
    }
}

/// The repetition penalty alone (step 1 of the [module docs](self)): `logits` `[batch,
/// vocab]` float, `history` `[batch, n]` i64 on the same device (its last `last_n` columns
/// count; entries `< 0` are ignored). Returns new f32 logits; the arithmetic is
/// `l / penalty` for `l > 0`, `l · penalty` otherwise, in f32 with the penalty rounded to
/// f32.
///
/// The seen-token mask is built by comparing the history with the ids (`[batch, n, vocab]`
/// booleans) rather than by `gather`/`scatter`: stride checks index ranges of gathers and
/// scatters before writing, which on a GPU is a host wait, and a decoding step has none.
///
/// ```
/// use stride_core::Tensor;
/// let logits = Tensor::from_vec(vec![2.0f32, -2.0, 1.0], [1, 3])?;
/// let history = Tensor::from_vec(vec![0i64, 1, -1], [1, 3])?;
/// let out = stride_models::sampling::apply_repetition_penalty(&logits, &history, 2.0, 64)?;
/// assert_eq!(out.to_vec::<f32>()?, vec![1.0, -4.0, 1.0]);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn apply_repetition_penalty(
    logits: &Tensor,
    history: &Tensor,
    penalty: f64,
    last_n: usize,
) -> Result<Tensor> {
    if logits.dim() != 2 {
        return Err(invalid(
            "apply_repetition_penalty",
            format!("expects [batch, vocab] logits, got {:?}", logits.shape()),
        ));
    }
    let ids = Tensor::arange(0i64, logits.shape()[1] as i64, &logits.device())?;
    apply_repetition_penalty_with(
        &logits.to_dtype(DType::F32)?,
        history,
        penalty,
        last_n,
        &ids,
    )
}

enum Penalty<'a> {
    History(&'a Tensor),
    Seen(&'a Tensor),
}

fn apply_repetition_penalty_with(
    x: &Tensor,
    history: &Tensor,
    penalty: f64,
    last_n: usize,
    ids: &Tensor,
) -> Result<Tensor> {
    if history.shape()[1] == 0 || last_n == 0 || penalty == 1.0 {
        return Ok(x.clone());
    }
    penalise(x, &seen_mask(history, last_n, ids)?, penalty)
}

/// `[batch, vocab]` bool: which ids occur in the last `last_n` columns of `history`.
fn seen_mask(history: &Tensor, last_n: usize, ids: &Tensor) -> Result<Tensor> {
    let n = history.shape()[1];
    let take = n.min(last_n) as i64;
    let h = history.slice(1, n as i64 - take, n as i64, 1)?;
    h.unsqueeze(2)?
        .eq(&ids.view(&[1, 1, -1])?)?
        .any_dims(&[1], false)
}

/// Where `seen`: `l / r` for `l > 0`, `l · r` otherwise (f32, `r` rounded to f32).
fn penalise(x: &Tensor, seen: &Tensor, penalty: f64) -> Result<Tensor> {
    let r = penalty as f32;
    let penalised = x.gt(0.0)?.where_cond(&x.div(r)?, &x.mul(r)?)?;
    seen.where_cond(&penalised, x)
}

/// The repetition penalty's window kept on the device across decoding steps: the last `n`
/// tokens of each row in a ring buffer and, per row, how often each id occurs in it, so
/// that [`RecentTokens::seen`] costs `O(batch · vocab)` per step (two one-hot updates)
/// instead of comparing all `n` tokens with every id. No step waits for the host.
///
/// ```
/// use stride_core::{Device, Tensor};
/// use stride_models::sampling::RecentTokens;
/// let mut r = RecentTokens::new(&[vec![-1, 3], vec![1, 2]], 2, 5, Device::Cpu)?;
/// r.push(&Tensor::from_vec(vec![4i64, 2], [2])?)?; // windows: [3, 4] and [2, 2]
/// let seen = r.seen()?.to_vec::<bool>()?;
/// assert_eq!(seen, vec![false, false, false, true, true, false, false, true, false, false]);
/// # Ok::<(), stride_core::Error>(())
/// ```
#[derive(Debug)]
pub struct RecentTokens {
    n: usize,
    ring: Tensor,
    counts: Tensor,
    ids: Tensor,
    written: usize,
}

impl RecentTokens {
    /// A window of the last `n` (≥ 1) tokens of each row, starting with the end of
    /// `history[b]` (rows right-aligned to the longest; entries `< 0` or `≥ vocab` are
    /// ignored).
    pub fn new(history: &[Vec<i64>], n: usize, vocab: usize, device: Device) -> Result<Self> {
        if n == 0 || history.is_empty() {
            return Err(invalid(
                "RecentTokens::new",
                "needs a window of at least one token and at least one row",
            ));
        }
        let b = history.len();
        let written = history.iter().map(Vec::len).max().unwrap_or(0);
        let mut ring = vec![-1i64; b * n];
        let mut counts = vec![0i32; b * vocab];
        for (r, h) in history.iter().enumerate() {
            let off = written - h.len();
            for (i, &id) in h.iter().enumerate() {
                let q = off + i;
                if q + n >= written {
                    ring[r * n + q % n] = id;
                    if id >= 0 && (id as usize) < vocab {
                        counts[r * vocab + id as usize] += 1;
                    }
                }
            }
        }
        Ok(RecentTokens {
            n,
            ring: Tensor::from_vec(ring, [b, n])?.to_device(&device)?,
            counts: Tensor::from_vec(counts, [b, vocab])?.to_device(&device)?,
            ids: Tensor::arange(0i64, vocab as i64, &device)?.unsqueeze(0)?,
            written,
        })
    }

    /// Appends one token per row (`[batch]` i64 on the device), forgetting the oldest.
    pub fn push(&mut self, tokens: &Tensor) -> Result<()> {
        let b = self.ring.shape()[0];
        let slot = (self.written % self.n) as i64;
        let old = self.ring.slice(1, slot, slot + 1, 1)?;
        let new = tokens.view(&[b as i64, 1])?;
        self.counts
            .sub_(&old.eq(&self.ids)?.to_dtype(DType::I32)?)?;
        self.counts
            .add_(&new.eq(&self.ids)?.to_dtype(DType::I32)?)?;
        old.copy_(&new)?;
        self.written += 1;
        Ok(())
    }

    /// `[batch, vocab]` bool: the ids in each row's window.
    pub fn seen(&self) -> Result<Tensor> {
        self.counts.gt(0i32)
    }

    /// The window's tokens, `[batch, n]` i64 (in ring order; `-1` where empty).
    pub fn tokens(&self) -> &Tensor {
        &self.ring
    }
}
