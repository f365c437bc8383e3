//! The text a [`super::Gpt`] trains on: the Shakespeare text split by work into training and
//! validation tokens, and seeded random windows of it drawn on the model's device.

use crate::hub::{SHAKESPEARE_BYTES, SHAKESPEARE_WORKS};
use crate::invalid;
use stride_core::{DType, Device, Generator, Result, Tensor};
use stride_tokenizer::Tokenizer;

/// The plays held out for validation: whole works, never trained on (7.8% of the bytes).
pub const VALIDATION_WORKS: [&str; 3] = ["hamlet", "macbeth", "twelfth_night"];

/// The tokenizer a model reads its text with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// One token per byte: ids `3 + byte` of [`crate::toy::byte_tokenizer`] (259 tokens;
    /// 0–2 are its special tokens, never in the training text). The loss is in nats per
    /// byte.
    Bytes,
    /// SmolLM2's BPE (49,152 tokens), read from the SmolLM2 GGUF file ([`crate::hub`]).
    SmolLm2,
}

impl TokenizerKind {
    /// `bytes` or `smollm2`.
    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::Bytes => "bytes",
            TokenizerKind::SmolLm2 => "smollm2",
        }
    }
    /// The kind [`TokenizerKind::name`] names.
    pub fn parse(s: &str) -> Option<TokenizerKind> {
        match s {
            "bytes" => Some(TokenizerKind::Bytes),
            "smollm2" => Some(TokenizerKind::SmolLm2),
            _ => None,
        }
    }
    /// The tokenizer (SmolLM2's is fetched into the cache on first use).
    pub fn load(self) -> Result<Tokenizer> {
        match self {
            TokenizerKind::Bytes => Ok(crate::toy::byte_tokenizer()),
            TokenizerKind::SmolLm2 => Tokenizer::from_gguf_file(crate::hub::default_model()?)
                .map_err(|e| invalid("TokenizerKind::load", e.to_string())),
        }
    }
}

/// Works of a text, each a slice of its bytes.
pub type Works<'a> = Vec<&'a [u8]>;

/// Splits the Shakespeare text (exactly [`crate::hub::shakespeare_text`]'s bytes) into the
/// training works and the [`VALIDATION_WORKS`], each side in file order.
pub fn split_by_work(text: &[u8]) -> Result<(Works<'_>, Works<'_>)> {
    if text.len() != SHAKESPEARE_BYTES as usize {
        return Err(invalid(
            "split_by_work",
            format!(
                "the text is {} bytes, not the {SHAKESPEARE_BYTES} of the Shakespeare text (hub::shakespeare_text)",
                text.len()
            ),
        ));
    }
    let (mut train, mut val) = (vec![], vec![]);
    let mut at = 0;
    for (name, len) in SHAKESPEARE_WORKS {
        let work = &text[at..at + len];
        at += len;
        if VALIDATION_WORKS.contains(&name) {
            val.push(work);
        } else {
            train.push(work);
        }
    }
    Ok((train, val))
}

/// Token ids of `works`, each encoded on its own and concatenated (no special tokens).
pub fn encode_works(tok: &Tokenizer, kind: TokenizerKind, works: &[&[u8]]) -> Result<Vec<i64>> {
    let mut ids = vec![];
    for w in works {
        match kind {
            TokenizerKind::Bytes => ids.extend(w.iter().map(|&b| 3 + b as i64)),
            TokenizerKind::SmolLm2 => {
                let text = std::str::from_utf8(w)
                    .map_err(|e| invalid("encode_works", format!("the text is not UTF-8: {e}")))?;
                ids.extend(
                    tok.encode_plain(text, false)
                        .map_err(|e| invalid("encode_works", e.to_string()))?
                        .into_iter()
                        .map(i64::from),
                );
            }
        }
    }
    Ok(ids)
}

/// A token stream on a device and the random windows drawn from it.
///
/// ```
/// use stride_core::{Device, Generator};
/// use stride_models::gpt::TokenStream;
/// let s = TokenStream::new((0..100).collect(), &Device::Cpu)?;
/// let (x, y) = s.batch(4, 8, &Generator::new(0))?;          // (4, 8) inputs and targets
/// let (x, y) = (x.to_vec::<i64>()?, y.to_vec::<i64>()?);
/// assert!(x.iter().zip(&y).all(|(a, b)| b - a == 1));       // targets: the next token
/// # Ok::<(), stride_core::Error>(())
/// ```
pub struct TokenStream {
    tokens: Tensor,
}

impl TokenStream {
    /// The ids as an i64 tensor on `device`.
    pub fn new(ids: Vec<i64>, device: &Device) -> Result<TokenStream> {
        let n = ids.len();
        Ok(TokenStream {
            tokens: Tensor::from_vec(ids, [n])?.to_device(device)?,
        })
    }
    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.numel()
    }
    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `b` windows of `t + 1` consecutive tokens starting at offsets uniform in `[0, len −
    /// t)`, drawn from `gen` on the stream's device (no host wait): inputs `(b, t)` and
    /// targets `(b, t)`, the inputs shifted by one.
    pub fn batch(&self, b: usize, t: usize, gen: &Generator) -> Result<(Tensor, Tensor)> {
        let n = self.len();
        if n < t + 1 || b == 0 || t == 0 {
            return Err(invalid(
                "TokenStream::batch",
                format!("can't draw {b} windows of {t} + 1 tokens from {n} tokens"),
            ));
        }
        let dev = self.tokens.device();
        let starts = Tensor::randint(0, (n - t) as i64, [b, 1], DType::I64, &dev, Some(gen))?;
        let idx = starts.add(&Tensor::arange(0i64, t as i64 + 1, &dev)?.unsqueeze(0)?)?;
        let w = self.tokens.take(&idx)?;
        Ok((w.narrow(1, 0, t)?, w.narrow(1, 1, t)?))
    }
}
