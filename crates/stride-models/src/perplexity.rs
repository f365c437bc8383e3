//! Sliding-window perplexity of a [`CausalLm`] over a token sequence.
//!
//! # The windows (the exact definition)
//!
//! For `N` tokens `x_0 … x_{N−1}`, a context of `ctx` tokens and a step of `stride` tokens
//! (`1 ≤ stride ≤ ctx`), window `k` starts at `s_k = k · stride` and covers
//! `x_{s_k} … x_{e_k − 1}` with `e_k = min(s_k + ctx, N)`; the windows stop at the first one
//! that reaches the end (`e_k = N`). Each window is forwarded on its own, from an empty cache,
//! and **scores only the positions no earlier window scored**: window `k` scores positions
//! `max(e_{k−1}, s_k + 1) … e_k − 1` (with `e_{−1} = 1`: window 0 scores `1 … e_0 − 1`,
//! position 0 having nothing before it). Position `j` is scored with the logits of position
//! `j − 1` of its window, i.e. `−ln softmax(logits)[x_j]` given `x_{s_k} … x_{j−1}`.
//!
//! With `stride < ctx` every position `1 … N−1` is scored exactly once, each with at least
//! `ctx − stride` tokens of context (except in the first window). With `stride = ctx`
//! (disjoint windows) the first token of each window after the first has no context in its
//! window and is not scored: `count = N − 1 − (windows − 1)`. This is Hugging Face's
//! "perplexity of fixed-length models" recipe, which loses the same tokens. (llama.cpp's
//! `llama-perplexity` tool scores only the second half of disjoint chunks: a different
//! number.)
//!
//! `perplexity = exp(total NLL / count)`, with the per-position negative log-likelihoods
//! computed in f64 from the model's f32 logits (`logsumexp(logits) − logits[x_j]`) and
//! summed in f64 in position order.
//!
//! ```
//! use stride_core::Device;
//! use stride_models::perplexity::{perplexity, PerplexityConfig};
//! use stride_models::toy::NgramLm;
//! let model = NgramLm::uniform(10, 64, Device::Cpu)?;
//! let tokens: Vec<u32> = (0..100).map(|i| i % 10).collect();
//! let r = perplexity(&model, &tokens, &PerplexityConfig { ctx: 32, stride: 16, max_tokens: None }, |_, _| {})?;
//! assert_eq!(r.count, 99);
//! assert!((r.perplexity - 10.0).abs() < 1e-11);
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::invalid;
use crate::lm::CausalLm;
use std::time::{Duration, Instant};
use stride_core::{DType, Result, Tensor};

/// Window length and step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerplexityConfig {
    /// Tokens per window (at most the model's context). Default 512.
    pub ctx: usize,
    /// Tokens between window starts (`1 ≤ stride ≤ ctx`). Default 256.
    pub stride: usize,
    /// Use only the first this many tokens.
    pub max_tokens: Option<usize>,
}

impl Default for PerplexityConfig {
    fn default() -> Self {
        PerplexityConfig {
            ctx: 512,
            stride: 256,
            max_tokens: None,
        }
    }
}

/// One window: tokens `start..end` are forwarded; positions `score_from..end` are scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: usize,
    pub end: usize,
    pub score_from: usize,
}

/// The windows of the [module docs](self) for `n` tokens. An error when `stride` is 0 or
/// larger than `ctx` (positions would be skipped) or `ctx < 2`.
pub fn windows(n: usize, ctx: usize, stride: usize) -> Result<Vec<Window>> {
    if ctx < 2 || stride == 0 || stride > ctx {
        return Err(invalid(
            "perplexity",
            format!("needs ctx >= 2 and 1 <= stride <= ctx, got ctx {ctx}, stride {stride}"),
        ));
    }
    let mut out = Vec::new();
    if n < 2 {
        return Ok(out);
    }
    let mut prev_end = 1; // position 0 is never scored
    let mut start = 0;
    loop {
        let end = (start + ctx).min(n);
        out.push(Window {
            start,
            end,
            score_from: prev_end.max(start + 1),
        });
        if end == n {
            break;
        }
        prev_end = end;
        start += stride;
    }
    Ok(out)
}

/// The result, with per-position data for comparing with another implementation.
#[derive(Clone, Debug, PartialEq)]
pub struct PerplexityResult {
    /// Sum of the negative log-likelihoods (nats).
    pub nll: f64,
    /// Scored positions.
    pub count: usize,
    /// `exp(nll / count)`.
    pub perplexity: f64,
    /// The windows, in order.
    pub windows: Vec<Window>,
    /// The scored positions `j` (ascending: `1 … N−1`).
    pub positions: Vec<usize>,
    /// The NLL of each scored position.
    pub token_nll: Vec<f64>,
    /// The model's most likely token at each scored position (the arg-max of the logits
    /// that score it; the lowest id among equal maxima): top-1 agreement with another
    /// implementation is the fraction of equal entries.
    pub argmax: Vec<u32>,
    /// How often the arg-max is the actual token.
    pub top1_hits: usize,
    /// Tokens used (after `max_tokens`).
    pub tokens: usize,
    /// Time spent in the sweep.
    pub time: Duration,
}

/// Perplexity of `model` on `tokens` with the windows of the [module docs](self).
/// `progress(done, total)` is called after each window.
pub fn perplexity<M: CausalLm>(
    model: &M,
    tokens: &[u32],
    cfg: &PerplexityConfig,
    mut progress: impl FnMut(usize, usize),
) -> Result<PerplexityResult> {
    let op = "perplexity";
    let start_time = Instant::now();
    let tokens = &tokens[..cfg.max_tokens.unwrap_or(usize::MAX).min(tokens.len())];
    if cfg.ctx > model.context_len() {
        return Err(invalid(
            op,
            format!(
                "ctx {} is longer than the model's context of {}",
                cfg.ctx,
                model.context_len()
            ),
        ));
    }
    let vocab = model.vocab_size();
    if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(invalid(
            op,
            format!("token id {bad} is outside the model's vocabulary of {vocab}"),
        ));
    }
    let wins = windows(tokens.len(), cfg.ctx, cfg.stride)?;
    let dev = model.device();
    let mut res = PerplexityResult {
        nll: 0.0,
        count: 0,
        perplexity: f64::NAN,
        windows: wins.clone(),
        positions: Vec::new(),
        token_nll: Vec::new(),
        argmax: Vec::new(),
        top1_hits: 0,
        tokens: tokens.len(),
        time: Duration::ZERO,
    };
    for (k, w) in wins.iter().enumerate() {
        let len = w.end - w.start;
        let ids: Vec<i64> = tokens[w.start..w.end].iter().map(|&t| t as i64).collect();
        let input = Tensor::from_vec(ids, [1, len])?.to_device(&dev)?;
        let mut cache = model.new_cache(&[0], len)?;
        let logits = model.forward(&input, &mut cache)?;
        if logits.shape() != [1, len, vocab] {
            return Err(invalid(
                op,
                format!(
                    "the model returned logits {:?}, expected [1, {len}, {vocab}]",
                    logits.shape()
                ),
            ));
        }
        // rows predicting positions score_from..end
        let (r0, r1) = (w.score_from - 1 - w.start, w.end - 1 - w.start);
        let targets: Vec<i64> = tokens[w.score_from..w.end]
            .iter()
            .map(|&t| t as i64)
            .collect();
        let rows = logits.select(0, 0)?.slice(0, r0 as i64, r1 as i64, 1)?;
        // in chunks, so the f64 copy of the logits stays small
        const CHUNK: usize = 64;
        let n = r1 - r0;
        let mut c0 = 0;
        while c0 < n {
            let c1 = (c0 + CHUNK).min(n);
            let x = rows.slice(0, c0 as i64, c1 as i64, 1)?;
            let tgt = Tensor::from_vec(targets[c0..c1].to_vec(), [c1 - c0, 1])?.to_device(&dev)?;
            let x64 = x.to_dtype(DType::F64)?;
            let nll = x64
                .logsumexp(&[1], true)?
                .sub(&x64.gather(1, &tgt)?)?
                .to_vec::<f64>()?;
            let am = x.argmax(Some(1), false)?.to_vec::<i64>()?;
            for (i, (&l, &a)) in nll.iter().zip(&am).enumerate() {
                let j = w.score_from + c0 + i;
                res.nll += l;
                res.count += 1;
                res.positions.push(j);
                res.token_nll.push(l);
                res.argmax.push(a as u32);
                if a as u32 == tokens[j] {
                    res.top1_hits += 1;
                }
            }
            c0 = c1;
        }
        progress(k + 1, wins.len());
    }
    res.perplexity = (res.nll / res.count as f64).exp();
    res.time = start_time.elapsed();
    Ok(res)
}
