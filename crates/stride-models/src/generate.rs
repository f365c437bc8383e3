//! Text generation over any [`CausalLm`]: a batch of prompts of different lengths, left
//! padded, prefilled in one forward, then decoded one token per step, with streaming text,
//! end-of-generation tokens, stop strings, and the figures that say how fast it went; and
//! [`Chat`], a multi-turn conversation that keeps its KV cache between turns.
//!
//! # One decoding step
//!
//! The [`Sampler`] chooses the next token of every row on the model's device; the tokens are
//! read back (the **one host wait per step**: they are needed to decode text and to stop),
//! and the same device tensor is the next forward's input. The repetition penalty's window
//! of recent tokens stays on the device ([`RecentTokens`]: a ring buffer and per-id counts,
//! updated in place).
//!
//! # Stopping
//!
//! A row stops at the first of: an end-of-generation token (by default
//! [`end_of_generation_tokens`]: the tokenizer's EOS and the usual end markers it has, such as
//! `<|im_end|>`; the token is not part of the output), a stop string in the decoded text (the
//! text ends before it; see [`StopStrings`]), `max_tokens` tokens, or a full cache
//! (`context_len`). The batch runs until every row has stopped.
//!
//! ```
//! use stride_core::Device;
//! use stride_models::generate::{generate_text, GenerateConfig};
//! use stride_models::sampling::SamplingConfig;
//! use stride_models::toy::{byte_tokenizer, NgramLm};
//! let tok = byte_tokenizer();
//! let model = NgramLm::random(tok.vocab_size(), 256, 0, Device::Cpu)?;
//! let cfg = GenerateConfig { max_tokens: 8, sampling: SamplingConfig::greedy(), ..Default::default() };
//! let mut streamed = String::new();
//! let out = generate_text(&model, &tok, &["Hello", "Hi"], &cfg, |row, text| {
//!     if row == 0 { streamed.push_str(text) }
//! })?;
//! assert_eq!(out.completions[0].text, streamed);
//! println!("{:.1} tokens/s", out.stats.decode_tokens_per_s());
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::invalid;
use crate::lm::{CausalLm, KvCache};
use crate::sampling::{RecentTokens, Sampler, SamplingConfig};
use std::time::{Duration, Instant};
use stride_core::{memory_stats, DType, Result, Tensor};
use stride_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

/// What to generate and when to stop.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateConfig {
    /// The most tokens to generate per row (an end-of-generation token is not counted).
    /// Default 256.
    pub max_tokens: usize,
    /// How tokens are chosen (see [`crate::sampling`]).
    pub sampling: SamplingConfig,
    /// Stop when the generated text contains one of these; the text ends before it.
    pub stop: Vec<String>,
    /// Tokens that end a row; `None`: [`end_of_generation_tokens`] of the tokenizer.
    pub eos_tokens: Option<Vec<u32>>,
    /// Decode through a captured CUDA graph where the model has one
    /// ([`CausalLm::capture_decode`]: one launch per token instead of hundreds). Default
    /// true; it changes nothing on the CPU.
    pub cuda_graph: bool,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            max_tokens: 256,
            sampling: SamplingConfig::default(),
            stop: Vec::new(),
            eos_tokens: None,
            cuda_graph: true,
        }
    }
}

/// Why a row stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_tokens` were generated.
    Length,
    /// The model produced this end-of-generation token.
    Eos(u32),
    /// The text reached this stop string.
    Stop(String),
    /// The cache (the model's context) is full.
    ContextFull,
}

impl std::fmt::Display for FinishReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FinishReason::Length => write!(f, "length"),
            FinishReason::Eos(id) => write!(f, "eos ({id})"),
            FinishReason::Stop(s) => write!(f, "stop ({s:?})"),
            FinishReason::ContextFull => write!(f, "context full"),
        }
    }
}

/// The output of one row.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The generated tokens (the end-of-generation token excluded; the tokens of a stop
    /// string included).
    pub tokens: Vec<u32>,
    /// Their text, control tokens left out, ending before the stop string if one was hit.
    /// Exactly the concatenation of what was streamed for this row.
    pub text: String,
    /// Why the row stopped.
    pub finish: FinishReason,
    /// Tokens of this row's prompt.
    pub prompt_tokens: usize,
}

/// How long generation took and what it used.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationStats {
    /// Rows in the batch.
    pub batch: usize,
    /// Prompt tokens of all rows (padding not counted).
    pub prompt_tokens: usize,
    /// Prompt tokens found in the cache and not recomputed ([`Chat`]; 0 otherwise).
    pub reused_tokens: usize,
    /// Positions the prefill forwarded (`batch ·` the longest new prompt, padding included).
    pub prefill_positions: usize,
    /// Tokens generated over all rows (the first included; end-of-generation tokens not).
    pub generated_tokens: usize,
    /// From the call to the first token of every row on the host (tokenization, prefill
    /// and the first sampling step).
    pub time_to_first_token: Duration,
    /// The prefill forward and the first sampling step.
    pub prefill_time: Duration,
    /// From the first token to the end.
    pub decode_time: Duration,
    /// Tokens sampled after the first step, over all rows still running.
    pub decode_tokens: usize,
    /// `memory_stats(device).peak_bytes` at the end (the process's peak on that device).
    pub peak_memory_bytes: u64,
    /// The seed of the sampler (replays the run with `SamplingConfig::seed`).
    pub seed: u64,
    /// Whether the decode steps replayed a captured CUDA graph.
    pub cuda_graph: bool,
    /// Capturing that graph (after the first token; in neither the prefill nor the decode
    /// time).
    pub capture_time: Duration,
}

impl GenerationStats {
    /// Prompt tokens (padding not counted) per second of prefill.
    pub fn prefill_tokens_per_s(&self) -> f64 {
        rate(
            self.prompt_tokens - self.reused_tokens.min(self.prompt_tokens),
            self.prefill_time,
        )
    }
    /// Tokens per second after the first.
    pub fn decode_tokens_per_s(&self) -> f64 {
        rate(self.decode_tokens, self.decode_time)
    }
}

fn rate(n: usize, t: Duration) -> f64 {
    if t.is_zero() {
        0.0
    } else {
        n as f64 / t.as_secs_f64()
    }
}

/// Everything [`generate`] returns.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// One per prompt, in order.
    pub completions: Vec<Completion>,
    pub stats: GenerationStats,
}

/// The tokens that end generation by default: the tokenizer's EOS and, when the vocabulary
/// has them as control tokens, `<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`,
/// `<|end_of_text|>`, `<|end|>` and `</s>` (llama.cpp's end-of-generation set is found the
/// same way).
pub fn end_of_generation_tokens(tok: &Tokenizer) -> Vec<u32> {
    let mut ids: Vec<u32> = tok.eos().into_iter().collect();
    for s in [
        "<|im_end|>",
        "<|endoftext|>",
        "<|eot_id|>",
        "<|end_of_text|>",
        "<|end|>",
        "</s>",
    ] {
        if let Some(id) = tok.token_to_id(s) {
            if tok.is_control(id) && !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// The prompt's token ids as a completion prompt: `tok.encode(text, true)` (BOS when the
/// model asks for it; special tokens written in the text are parsed).
pub fn encode_prompt(tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    tok.encode(text, true).map_err(tok_err)
}

pub(crate) fn tok_err(e: stride_tokenizer::TokenizerError) -> stride_core::Error {
    invalid("tokenizer", e.to_string())
}

/// Holds back text that may be the start of a stop string, and cuts the text at the first
/// stop string, across token boundaries.
///
/// ```
/// use stride_models::generate::StopStrings;
/// let mut s = StopStrings::new(vec!["\nUser:".into()]);
/// assert_eq!(s.push("Hi there\n"), "Hi there");   // "\n" might start the stop string
/// assert_eq!(s.push("Us"), "");
/// assert_eq!(s.push("er: what"), "");              // found: nothing of it is shown
/// assert_eq!(s.stopped(), Some("\nUser:"));
/// assert_eq!(s.text(), "Hi there");
/// ```
#[derive(Clone, Debug)]
pub struct StopStrings {
    stops: Vec<String>,
    text: String,
    emitted: usize,
    stopped: Option<usize>,
}

impl StopStrings {
    /// Empty stop strings are ignored.
    pub fn new(stops: Vec<String>) -> StopStrings {
        StopStrings {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            text: String::new(),
            emitted: 0,
            stopped: None,
        }
    }

    /// Adds decoded text; returns the part that can be shown now: everything except a suffix
    /// that could be the start of a stop string, and nothing from a stop string on. After a
    /// stop string has appeared, returns nothing.
    pub fn push(&mut self, piece: &str) -> String {
        if self.stopped.is_some() {
            return String::new();
        }
        self.text.push_str(piece);
        let hay = &self.text[self.emitted..];
        let found = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| hay.find(s.as_str()).map(|at| (at, i)))
            .min();
        if let Some((at, i)) = found {
            let end = self.emitted + at;
            let out = self.text[self.emitted..end].to_string();
            self.text.truncate(end);
            self.emitted = end;
            self.stopped = Some(i);
            return out;
        }
        let mut hold = 0;
        for s in &self.stops {
            for l in (1..s.len()).rev() {
                if l <= hay.len() && s.is_char_boundary(l) && hay.ends_with(&s[..l]) {
                    hold = hold.max(l);
                    break;
                }
            }
        }
        let end = self.text.len() - hold;
        let out = self.text[self.emitted..end].to_string();
        self.emitted = end;
        out
    }

    /// The text held back (when generation ends without a stop string, it is shown).
    pub fn flush(&mut self) -> String {
        let out = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        out
    }

    /// The stop string that was found, if any.
    pub fn stopped(&self) -> Option<&str> {
        self.stopped.map(|i| self.stops[i].as_str())
    }

    /// All the text so far, ending before the stop string if one was found.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Generates from token-id prompts (one row each, any lengths: shorter ones are left padded).
/// `on_text(row, text)` receives each row's text as it is produced (whole characters,
/// nothing of a stop string); the concatenation for a row is its [`Completion::text`].
pub fn generate<M: CausalLm>(
    model: &M,
    tok: &Tokenizer,
    prompts: &[Vec<u32>],
    cfg: &GenerateConfig,
    mut on_text: impl FnMut(usize, &str),
) -> Result<Generation> {
    let start = Instant::now();
    let op = "generate";
    if prompts.is_empty() {
        return Err(invalid(op, "no prompts"));
    }
    if let Some(i) = prompts.iter().position(|p| p.is_empty()) {
        return Err(invalid(
            op,
            format!("prompt {i} has no tokens (a prompt needs at least one, e.g. BOS)"),
        ));
    }
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let ctx = model.context_len();
    if longest >= ctx {
        return Err(invalid(
            op,
            format!("a prompt of {longest} tokens leaves no room in the model's context of {ctx}"),
        ));
    }
    let capacity = (longest + cfg.max_tokens).min(ctx);
    let left_pad: Vec<usize> = prompts.iter().map(|p| longest - p.len()).collect();
    let mut cache = model.new_cache(&left_pad, capacity)?;
    let pad = tok.pad().or(tok.eos()).unwrap_or(0);
    let rows: Vec<Vec<u32>> = prompts
        .iter()
        .zip(&left_pad)
        .map(|(p, &n)| {
            std::iter::repeat_n(pad, n)
                .chain(p.iter().copied())
                .collect()
        })
        .collect();
    let history: Vec<Vec<i64>> = prompts
        .iter()
        .zip(&left_pad)
        .map(|(p, &n)| {
            std::iter::repeat_n(-1, n)
                .chain(p.iter().map(|&t| t as i64))
                .collect()
        })
        .collect();
    let mut run = decode(
        model,
        tok,
        &mut cache,
        &rows,
        &history,
        cfg,
        &mut on_text,
        start,
    )?;
    for (c, p) in run.completions.iter_mut().zip(prompts) {
        c.prompt_tokens = p.len();
    }
    run.stats.prompt_tokens = prompts.iter().map(Vec::len).sum();
    Ok(Generation {
        completions: run.completions,
        stats: run.stats,
    })
}

/// [`generate`] from text prompts, each encoded with [`encode_prompt`].
pub fn generate_text<M: CausalLm>(
    model: &M,
    tok: &Tokenizer,
    prompts: &[&str],
    cfg: &GenerateConfig,
    on_text: impl FnMut(usize, &str),
) -> Result<Generation> {
    let ids = prompts
        .iter()
        .map(|p| encode_prompt(tok, p))
        .collect::<Result<Vec<_>>>()?;
    generate(model, tok, &ids, cfg, on_text)
}

struct Run {
    completions: Vec<Completion>,
    stats: GenerationStats,
    /// Per row, the sampled tokens that were forwarded (written to the cache) after `rows`.
    fed: Vec<Vec<u32>>,
}

/// Token-by-token text, whole characters only (as [`stride_tokenizer::StreamDecoder`]), but
/// lossy: bytes that can't form a character become U+FFFD exactly as
/// [`Tokenizer::decode_lossy`] (`String::from_utf8_lossy`) replaces them, so a model's
/// invalid byte sequences neither stop generation nor lose the valid bytes after them.
/// Control tokens give no text.
struct LossyStream<'t> {
    tok: &'t Tokenizer,
    pending: Vec<u8>,
}

impl LossyStream<'_> {
    fn push(&mut self, id: u32) -> String {
        if self.tok.is_control(id) {
            return String::new();
        }
        match self.tok.token_to_piece(id) {
            Ok(p) => self.pending.extend_from_slice(p),
            Err(_) => return "\u{FFFD}".to_string(),
        }
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let v = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..v]).expect("valid prefix"));
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..v + n);
                        }
                        None => {
                            self.pending.drain(..v);
                            return out;
                        }
                    }
                }
            }
        }
    }
    /// An incomplete character left at the end is one U+FFFD.
    fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            "\u{FFFD}".to_string()
        }
    }
}

struct Row<'t> {
    dec: LossyStream<'t>,
    stops: StopStrings,
    tokens: Vec<u32>,
    finish: Option<FinishReason>,
}

/// The loop: forwards `rows` (`[batch, t]`, already padded) after what `cache` holds, then
/// samples and forwards one token per step. `history[b]`: the tokens before the first
/// generated one that the repetition penalty sees (right-aligned, `-1` for none).
#[allow(clippy::too_many_arguments)]
fn decode<M: CausalLm>(
    model: &M,
    tok: &Tokenizer,
    cache: &mut M::Cache,
    rows: &[Vec<u32>],
    history: &[Vec<i64>],
    cfg: &GenerateConfig,
    on_text: &mut dyn FnMut(usize, &str),
    start: Instant,
) -> Result<Run> {
    let op = "generate";
    let dev = model.device();
    let b = rows.len();
    let t = rows[0].len();
    if rows.iter().any(|r| r.len() != t) || t == 0 || cache.batch() != b {
        return Err(invalid(op, "internal: rows of different lengths"));
    }
    let vocab = model.vocab_size();
    if let Some(&bad) = rows.iter().flatten().find(|&&id| id as usize >= vocab) {
        return Err(invalid(
            op,
            format!("token id {bad} is outside the model's vocabulary of {vocab}"),
        ));
    }
    let mut sampler = Sampler::new(cfg.sampling.clone(), dev)?;
    let eos = cfg
        .eos_tokens
        .clone()
        .unwrap_or_else(|| end_of_generation_tokens(tok));
    let mut state: Vec<Row> = (0..b)
        .map(|_| Row {
            dec: LossyStream {
                tok,
                pending: Vec::new(),
            },
            stops: StopStrings::new(cfg.stop.clone()),
            tokens: Vec::new(),
            finish: None,
        })
        .collect();
    let mut fed = vec![Vec::new(); b];
    let mut stats = GenerationStats {
        batch: b,
        prefill_positions: b * t,
        seed: sampler.seed(),
        ..Default::default()
    };
    if cfg.max_tokens == 0 {
        return Ok(Run {
            completions: finish_rows(state, FinishReason::Length, on_text),
            stats,
            fed,
        });
    }
    // the repetition penalty's window: a ring of the last n tokens, slot = position % n
    let sc = &cfg.sampling;
    let n = if sc.repetition_penalty != 1.0 {
        sc.repeat_last_n
    } else {
        0
    };
    let mut recent = if n > 0 {
        Some(RecentTokens::new(history, n, vocab, dev)?)
    } else {
        None
    };

    let flat: Vec<i64> = rows.iter().flatten().map(|&x| x as i64).collect();
    let input = Tensor::from_vec(flat, [b, t])?.to_device(&dev)?;
    let prefill_start = Instant::now();
    let logits = model.forward(&input, cache)?;
    check_logits(&logits, b, t, vocab)?;
    let mut last = logits.select(1, t as i64 - 1)?;
    let mut decode_start = None;
    let mut step = 0usize;
    let mut graph = None;
    loop {
        let seen = recent.as_ref().map(RecentTokens::seen).transpose()?;
        let next = sampler.sample_with_seen(&last, seen.as_ref())?;
        let ids = next.to_vec::<i64>()?; // the one host wait of the step
        if step == 0 {
            stats.time_to_first_token = start.elapsed();
            stats.prefill_time = prefill_start.elapsed();
            if cfg.cuda_graph && cache.len() < cache.capacity() {
                let t = Instant::now();
                graph = model.capture_decode(cache)?;
                stats.cuda_graph = graph.is_some();
                stats.capture_time = t.elapsed();
            }
            decode_start = Some(Instant::now());
        }
        for (r, row) in state.iter_mut().enumerate() {
            if row.finish.is_some() {
                continue;
            }
            let id = ids[r] as u32;
            if step > 0 {
                stats.decode_tokens += 1;
            }
            if eos.contains(&id) {
                row.finish = Some(FinishReason::Eos(id));
                let rest = end_text(row);
                if !rest.is_empty() {
                    on_text(r, &rest);
                }
                continue;
            }
            row.tokens.push(id);
            stats.generated_tokens += 1;
            let piece = row.dec.push(id);
            let out = row.stops.push(&piece);
            if !out.is_empty() {
                on_text(r, &out);
            }
            if let Some(s) = row.stops.stopped() {
                row.finish = Some(FinishReason::Stop(s.to_string()));
            } else if row.tokens.len() >= cfg.max_tokens {
                row.finish = Some(FinishReason::Length);
                let rest = end_text(row);
                if !rest.is_empty() {
                    on_text(r, &rest);
                }
            }
        }
        if state.iter().all(|r| r.finish.is_some()) {
            break;
        }
        if cache.len() + 1 > cache.capacity() {
            for (r, row) in state.iter_mut().enumerate() {
                if row.finish.is_none() {
                    row.finish = Some(FinishReason::ContextFull);
                    let rest = end_text(row);
                    if !rest.is_empty() {
                        on_text(r, &rest);
                    }
                }
            }
            break;
        }
        if let Some(r) = recent.as_mut() {
            r.push(&next)?;
        }
        for (f, &id) in fed.iter_mut().zip(&ids) {
            f.push(id as u32);
        }
        let input = next.view(&[b as i64, 1])?;
        let logits = match &graph {
            Some(g) => g.forward(&input, cache)?,
            None => model.forward(&input, cache)?,
        };
        check_logits(&logits, b, 1, vocab)?;
        last = logits.select(1, 0)?;
        step += 1;
    }
    stats.decode_time = decode_start.map(|d| d.elapsed()).unwrap_or_default();
    stats.peak_memory_bytes = memory_stats(dev).peak_bytes;
    let completions = state
        .into_iter()
        .map(|row| Completion {
            text: row.stops.text().to_string(),
            tokens: row.tokens,
            finish: row.finish.unwrap_or(FinishReason::Length),
            prompt_tokens: 0,
        })
        .collect();
    Ok(Run {
        completions,
        stats,
        fed,
    })
}

/// The text still to show when a row ends without a stop string: what the decoder holds
/// back (through the stop strings, which may still match), then what they hold back.
fn end_text(row: &mut Row) -> String {
    let tail = row.dec.finish();
    let mut out = row.stops.push(&tail);
    if row.stops.stopped().is_none() {
        out += &row.stops.flush();
    }
    out
}

fn finish_rows(
    state: Vec<Row>,
    why: FinishReason,
    _on_text: &mut dyn FnMut(usize, &str),
) -> Vec<Completion> {
    state
        .into_iter()
        .map(|r| Completion {
            tokens: r.tokens,
            text: r.stops.text().to_string(),
            finish: why.clone(),
            prompt_tokens: 0,
        })
        .collect()
}

fn check_logits(logits: &Tensor, b: usize, t: usize, v: usize) -> Result<()> {
    if logits.shape() != [b, t, v] || logits.dtype() != DType::F32 {
        return Err(invalid(
            "generate",
            format!(
                "the model returned logits {:?} {}; the CausalLm contract is [{b}, {t}, {v}] float32",
                logits.shape(),
                logits.dtype()
            ),
        ));
    }
    Ok(())
}

/// The reply of one [`Chat`] turn.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatReply {
    pub completion: Completion,
    pub stats: GenerationStats,
}

/// A multi-turn conversation rendered with the model's chat template (ChatML for SmolLM2),
/// keeping one KV cache across turns: each turn renders the whole history, and when the new
/// rendering's tokens extend those in the cache only the new tokens are forwarded; otherwise
/// the cache is truncated to the longest common prefix and the rest is recomputed.
///
/// ```
/// use stride_core::Device;
/// use stride_models::generate::{Chat, GenerateConfig};
/// use stride_models::sampling::SamplingConfig;
/// use stride_models::toy::{byte_tokenizer, NgramLm};
/// let tok = byte_tokenizer();
/// let model = NgramLm::random(tok.vocab_size(), 512, 0, Device::Cpu)?;
/// let cfg = GenerateConfig { max_tokens: 6, sampling: SamplingConfig::greedy(), ..Default::default() };
/// let mut chat = Chat::new(&model, &tok, Some("Be brief."))?;
/// let first = chat.send("Hello!", &cfg, |t| print!("{t}"))?;
/// let second = chat.send("And then?", &cfg, |t| print!("{t}"))?;
/// assert!(second.stats.reused_tokens > 0); // the first turn was not recomputed
/// assert_eq!(chat.messages().len(), 5);    // system, user, assistant, user, assistant
/// # Ok::<(), stride_core::Error>(())
/// ```
pub struct Chat<'m, M: CausalLm> {
    model: &'m M,
    tok: &'m Tokenizer,
    template: ChatTemplate,
    messages: Vec<ChatMessage>,
    cache: Option<M::Cache>,
    cached: Vec<u32>,
    capacity: usize,
}

impl<'m, M: CausalLm> Chat<'m, M> {
    /// A conversation with the model's chat template (an error when the tokenizer has none
    /// that can be rendered), optionally starting with a system message. The cache holds the
    /// model's whole context.
    pub fn new(model: &'m M, tok: &'m Tokenizer, system: Option<&str>) -> Result<Self> {
        Chat::with_capacity(model, tok, system, model.context_len())
    }

    /// [`Chat::new`] with a cache of `capacity` positions (at most the model's context).
    pub fn with_capacity(
        model: &'m M,
        tok: &'m Tokenizer,
        system: Option<&str>,
        capacity: usize,
    ) -> Result<Self> {
        let template = tok.chat_template().map_err(tok_err)?;
        let messages = system
            .map(|s| vec![ChatMessage::new("system", s)])
            .unwrap_or_default();
        Ok(Chat {
            model,
            tok,
            template,
            messages,
            cache: None,
            cached: Vec::new(),
            capacity: capacity.min(model.context_len()),
        })
    }

    /// The conversation so far.
    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    /// The tokens the cache holds (the rendered conversation as the model saw it).
    pub fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }

    /// Adds the user's message, generates the assistant's reply (streamed through
    /// `on_text`) and adds it to the conversation. On error the conversation is as before.
    pub fn send(
        &mut self,
        user: &str,
        cfg: &GenerateConfig,
        mut on_text: impl FnMut(&str),
    ) -> Result<ChatReply> {
        let start = Instant::now();
        self.messages.push(ChatMessage::new("user", user));
        let r = self.turn(cfg, &mut on_text, start);
        match r {
            Ok(reply) => {
                self.messages
                    .push(ChatMessage::new("assistant", reply.completion.text.clone()));
                Ok(reply)
            }
            Err(e) => {
                self.messages.pop();
                self.cache = None;
                self.cached.clear();
                Err(e)
            }
        }
    }

    fn turn(
        &mut self,
        cfg: &GenerateConfig,
        on_text: &mut dyn FnMut(&str),
        start: Instant,
    ) -> Result<ChatReply> {
        let prompt = self.template.render(&self.messages, true);
        let ids = self.tok.encode(&prompt, false).map_err(tok_err)?;
        if ids.len() >= self.capacity {
            return Err(invalid(
                "chat",
                format!(
                    "the conversation is {} tokens long; the cache holds {}",
                    ids.len(),
                    self.capacity
                ),
            ));
        }
        let common = self
            .cached
            .iter()
            .zip(&ids)
            .take_while(|(a, b)| a == b)
            .count();
        // at least one token is forwarded, for the logits of the next one
        let mut reuse = common.min(ids.len() - 1);
        if self.cache.is_none() {
            self.cache = Some(self.model.new_cache(&[0], self.capacity)?);
            reuse = 0;
        }
        let cache = self.cache.as_mut().expect("made above");
        cache.truncate(reuse)?;
        self.cached.truncate(reuse);
        let new = ids[reuse..].to_vec();
        let history = vec![ids.iter().map(|&t| t as i64).collect::<Vec<_>>()];
        let mut emit = |_: usize, s: &str| on_text(s);
        let run = decode(
            self.model,
            self.tok,
            cache,
            std::slice::from_ref(&new),
            &history,
            cfg,
            &mut emit,
            start,
        )?;
        self.cached = ids.clone();
        self.cached.extend(&run.fed[0]);
        let mut stats = run.stats;
        stats.prompt_tokens = ids.len();
        stats.reused_tokens = reuse;
        let mut completion = run.completions.into_iter().next().expect("one row");
        completion.prompt_tokens = ids.len();
        Ok(ChatReply { completion, stats })
    }
}
