//! Small language models with known answers, for tests, examples and benchmarks of the
//! generation machinery: an n-gram table model that implements [`CausalLm`] honestly (its
//! logits depend on the previous token through its [`KvCache`], left padding is never
//! attended to, and a forward never waits for the host), and a byte-level tokenizer to go
//! with it.
//!
//! ```
//! use stride_core::{Device, Tensor};
//! use stride_models::{toy::NgramLm, CausalLm};
//! let m = NgramLm::random(16, 64, 0, Device::Cpu)?;
//! let mut cache = m.new_cache(&[0], 8)?;
//! let x = Tensor::from_vec(vec![3i64, 5, 7], [1, 3])?;
//! let logits = m.forward(&x, &mut cache)?;
//! assert_eq!(logits.shape(), &[1, 3, 16]);
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::invalid;
use crate::lm::{CausalLm, KvCache};
use stride_core::{DType, Device, Generator, Result, Tensor};
use stride_tokenizer::{BpeSpec, TokenType, Tokenizer};

/// A second-order table model: the logits at position `t` are
/// `current[x_t] + previous[x_{t-1}]` (rows of two `[vocab, vocab]` tables), where
/// `x_{t-1}` comes from the cache across calls and counts as absent (a zero row) before the
/// first real token of a row (left padding, or the start). With `previous = 0` it is a
/// bigram model whose logits are `current[x_t]`.
///
/// Rows are picked by one-hot products (`eq` against the ids, then `matmul`), not by
/// `index_select`, so a forward makes no index range check and never waits for the host.
#[derive(Debug, Clone)]
pub struct NgramLm {
    vocab: usize,
    context_len: usize,
    device: Device,
    current: Tensor,
    previous: Tensor,
    ids: Tensor,
}

/// The cache of [`NgramLm`]: the tokens written so far (`-1` at padding and unwritten
/// positions), one leading column of `-1` so that position `p`'s predecessor is column `p`.
#[derive(Debug)]
pub struct NgramCache {
    tokens: Tensor,
    left_pad: Tensor,
    len: usize,
    capacity: usize,
    batch: usize,
}

impl KvCache for NgramCache {
    fn len(&self) -> usize {
        self.len
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn truncate(&mut self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(invalid(
                "NgramCache::truncate",
                format!("can't truncate to {len}: the cache holds {}", self.len),
            ));
        }
        self.tokens
            .slice(1, len as i64 + 1, self.capacity as i64 + 1, 1)?
            .fill_(-1i64)?;
        self.len = len;
        Ok(())
    }
    fn batch(&self) -> usize {
        self.batch
    }
}

impl NgramCache {
    /// The tokens the cache holds, `[batch, len]` i64 (`-1` at padding positions).
    pub fn tokens(&self) -> Result<Tensor> {
        self.tokens.slice(1, 1, self.len as i64 + 1, 1)
    }
}

impl NgramLm {
    /// A model from its two tables, each `vocab · vocab` values in row-major order (row =
    /// the conditioning token).
    pub fn new(
        current: Vec<f32>,
        previous: Vec<f32>,
        vocab: usize,
        context_len: usize,
        device: Device,
    ) -> Result<NgramLm> {
        if vocab == 0 || current.len() != vocab * vocab || previous.len() != vocab * vocab {
            return Err(invalid(
                "NgramLm::new",
                format!(
                    "tables of {} and {} values for a vocabulary of {vocab} (need {} each)",
                    current.len(),
                    previous.len(),
                    vocab * vocab
                ),
            ));
        }
        Ok(NgramLm {
            vocab,
            context_len,
            device,
            current: Tensor::from_vec(current, [vocab, vocab])?.to_device(&device)?,
            previous: Tensor::from_vec(previous, [vocab, vocab])?.to_device(&device)?,
            ids: Tensor::arange(0i64, vocab as i64, &device)?.view(&[1, 1, -1])?,
        })
    }

    /// Both tables standard normal times 2, from `seed` (peaked enough that greedy and
    /// sampled continuations differ, flat enough that sampling varies).
    pub fn random(vocab: usize, context_len: usize, seed: u64, device: Device) -> Result<NgramLm> {
        let g = Generator::new(seed);
        let cur = Tensor::randn([vocab, vocab], DType::F32, &Device::Cpu, Some(&g))?.mul(2.0)?;
        let prev = Tensor::randn([vocab, vocab], DType::F32, &Device::Cpu, Some(&g))?.mul(2.0)?;
        NgramLm::new(cur.to_vec()?, prev.to_vec()?, vocab, context_len, device)
    }

    /// Logits all zero: every token equally likely (perplexity = vocabulary size).
    pub fn uniform(vocab: usize, context_len: usize, device: Device) -> Result<NgramLm> {
        NgramLm::new(
            vec![0.0; vocab * vocab],
            vec![0.0; vocab * vocab],
            vocab,
            context_len,
            device,
        )
    }

    /// A bigram model: the logits after token `a` are `table[a]` (row-major `vocab · vocab`).
    pub fn bigram(
        table: Vec<f32>,
        vocab: usize,
        context_len: usize,
        device: Device,
    ) -> Result<NgramLm> {
        NgramLm::new(table, vec![0.0; vocab * vocab], vocab, context_len, device)
    }

    fn one_hot(&self, t: &Tensor) -> Result<Tensor> {
        t.unsqueeze(2)?.eq(&self.ids)?.to_dtype(DType::F32)
    }
}

impl CausalLm for NgramLm {
    type Cache = NgramCache;
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn context_len(&self) -> usize {
        self.context_len
    }
    fn device(&self) -> Device {
        self.device
    }
    fn new_cache(&self, left_pad: &[usize], capacity: usize) -> Result<NgramCache> {
        if left_pad.is_empty() {
            return Err(invalid(
                "NgramLm::new_cache",
                "a cache needs at least one row",
            ));
        }
        let b = left_pad.len();
        let pads: Vec<i64> = left_pad.iter().map(|&p| p as i64).collect();
        Ok(NgramCache {
            tokens: Tensor::full([b, capacity + 1], -1i64, DType::I64, &self.device)?,
            left_pad: Tensor::from_vec(pads, [b, 1])?.to_device(&self.device)?,
            len: 0,
            capacity,
            batch: b,
        })
    }
    fn forward(&self, tokens: &Tensor, cache: &mut NgramCache) -> Result<Tensor> {
        let op = "NgramLm::forward";
        if tokens.dim() != 2 || tokens.shape()[0] != cache.batch || tokens.dtype() != DType::I64 {
            return Err(invalid(
                op,
                format!(
                    "expects [batch = {}, t] int64 tokens, got {:?} {}",
                    cache.batch,
                    tokens.shape(),
                    tokens.dtype()
                ),
            ));
        }
        if tokens.device() != self.device {
            return Err(invalid(
                op,
                format!("tokens on {}, model on {}", tokens.device(), self.device),
            ));
        }
        let t = tokens.shape()[1];
        let (start, end) = (cache.len, cache.len + t);
        if end > cache.capacity {
            return Err(invalid(
                op,
                format!(
                    "{t} more positions after {start} exceed the cache's capacity {}",
                    cache.capacity
                ),
            ));
        }
        let pos = Tensor::arange(start as i64, end as i64, &self.device)?.unsqueeze(0)?;
        let real = pos.ge(&cache.left_pad)?.where_cond(tokens, -1i64)?;
        cache
            .tokens
            .slice(1, start as i64 + 1, end as i64 + 1, 1)?
            .copy_(&real)?;
        let prev = cache.tokens.slice(1, start as i64, end as i64, 1)?;
        cache.len = end;
        self.one_hot(&real)?
            .matmul(&self.current)?
            .add(&self.one_hot(&prev)?.matmul(&self.previous)?)
    }
}

/// GPT-2's byte alphabet (the byte-level BPE vocabulary strings of the 256 bytes).
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| {
        (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    let mut n = 0;
    (0..256u32)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap()
            } else {
                n += 1;
                char::from_u32(0x100 + n - 1).unwrap()
            }
        })
        .collect()
}

/// A byte-level tokenizer of 259 tokens for the toy models: `<|endoftext|>` (0),
/// `<|im_start|>` (1, BOS), `<|im_end|>` (2, EOS), then the 256 bytes (id `3 + byte`), no
/// merges, GPT-2 pre-tokenizer, ChatML chat template.
pub fn byte_tokenizer() -> Tokenizer {
    let mut tokens = vec![
        "<|endoftext|>".to_string(),
        "<|im_start|>".to_string(),
        "<|im_end|>".to_string(),
    ];
    let mut token_types = vec![TokenType::Control; 3];
    for c in byte_chars() {
        tokens.push(c.to_string());
        token_types.push(TokenType::Normal);
    }
    Tokenizer::from_spec(BpeSpec {
        tokens,
        token_types,
        merges: Vec::new(),
        pre: "gpt-2".into(),
        bos: Some(1),
        eos: Some(2),
        pad: None,
        unk: None,
        add_bos: false,
        add_eos: false,
        chat_template: Some(
            "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}".into(),
        ),
    })
    .expect("the byte tokenizer builds")
}
