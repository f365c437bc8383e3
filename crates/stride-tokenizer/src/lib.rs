//! Tokenizers for stride: byte-level BPE (GPT-2 style, as used by SmolLM2, Llama 3, Qwen, …)
//! built from a GGUF file's `tokenizer.ggml.*` metadata or from a Hugging Face
//! `tokenizer.json`, giving the same token ids as llama.cpp.
//!
//! * Special (control and user-defined) tokens are matched in the input text before BPE, as
//!   llama.cpp does with `parse_special = true`: `"<|im_start|>user"` starts with the id of `<|im_start|>`.
//! * The pre-tokenizer follows the model (`tokenizer.ggml.pre`); an unknown one is an error,
//!   never a guess.
//! * [`Tokenizer::decode`] is exact: `decode(encode(s)) == s` for every string; a sequence
//!   that is not valid UTF-8 is an error, and [`StreamDecoder`] yields text only at character
//!   boundaries for token-by-token output.
//! * [`Tokenizer::apply_chat_template`] renders ChatML-style chat templates (and refuses,
//!   naming what it does not understand, any other template: it is not a Jinja engine).
//!
//! ```no_run
//! use stride_tokenizer::{ChatMessage, Tokenizer};
//! # fn main() -> stride_tokenizer::Result<()> {
//! let tok = Tokenizer::from_gguf_file("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let ids = tok.encode("Hello world", false)?;
//! assert_eq!(tok.decode(&ids)?, "Hello world");
//! let prompt = tok.apply_chat_template(&[ChatMessage::new("user", "Hi!")], true)?;
//! let prompt_ids = tok.encode(&prompt, false)?;
//! # Ok(()) }
//! ```

mod bytelevel;
mod chat;
mod error;
mod stream;

pub use chat::{ChatMessage, ChatTemplate};
pub use error::{Result, TokenizerError};
pub use stream::StreamDecoder;

use std::collections::HashMap;
use std::path::Path;
use stride_gguf::Gguf;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

/// The kind of a vocabulary entry (GGUF's `tokenizer.ggml.token_type`, llama.cpp's values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// An ordinary BPE token (1).
    Normal,
    /// The unknown token (2).
    Unknown,
    /// A control token such as `<|im_start|>` (3): matched in text, skipped by
    /// [`Tokenizer::decode_skip_special`].
    Control,
    /// A token added by the user (4): matched in text, decoded as its text.
    UserDefined,
    /// An unused slot (5).
    Unused,
    /// A byte token `<0x41>` (6; sentencepiece vocabularies).
    Byte,
}

impl TokenType {
    /// From GGUF's integer; `None` for a value outside 1..=6 (0 is "undefined" and read as
    /// normal).
    pub fn from_gguf(v: i32) -> Option<TokenType> {
        Some(match v {
            0 | 1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }

    /// Whether text matching this token's string is turned into the token before BPE.
    fn is_matched_in_text(self) -> bool {
        matches!(
            self,
            TokenType::Control | TokenType::UserDefined | TokenType::Unknown
        )
    }
}

/// The pre-tokenizers (text splitting before BPE) this crate implements, by
/// `tokenizer.ggml.pre` name.
const SUPPORTED_PRE: &str = "smollm, starcoder, refact, command-r, codeshell, exaone, minerva (digits split one by one, then GPT-2's regex); gpt-2, mpt, olmo, jais (GPT-2's regex)";

/// A byte-level BPE tokenizer. Cheap to share between threads (`Send + Sync`).
pub struct Tokenizer {
    /// Pre-tokenizer + BPE of ordinary text (no special tokens registered: those are matched
    /// by [`Tokenizer::partition`] first, llama.cpp's way).
    hf: tokenizers::Tokenizer,
    /// The vocabulary strings (byte-level alphabet for ordinary tokens).
    texts: Vec<String>,
    types: Vec<TokenType>,
    /// The bytes each token decodes to, or the character that is outside the byte alphabet.
    pieces: Vec<std::result::Result<Vec<u8>, char>>,
    /// Tokens matched in text, longest text first.
    specials: Vec<(String, u32)>,
    ids: HashMap<String, u32>,
    bos: Option<u32>,
    eos: Option<u32>,
    pad: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.texts.len())
            .field("specials", &self.specials.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .finish()
    }
}

/// What the builder needs: a byte-level BPE vocabulary and its splitting rules.
#[derive(Clone, Debug)]
pub struct BpeSpec {
    /// Token strings in the byte-level alphabet (`"Ġthe"`), index = id.
    pub tokens: Vec<String>,
    /// The kind of each token (same length as `tokens`).
    pub token_types: Vec<TokenType>,
    /// Merges in priority order, each `"left right"`.
    pub merges: Vec<String>,
    /// The pre-tokenizer name, as in `tokenizer.ggml.pre` (`"smollm"`, `"gpt-2"`).
    pub pre: String,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    /// Whether `encode(_, add_special = true)` prepends BOS.
    pub add_bos: bool,
    /// Whether `encode(_, add_special = true)` appends EOS.
    pub add_eos: bool,
    /// The Jinja chat template, if any.
    pub chat_template: Option<String>,
}

fn pre_tokenizer(name: &str) -> Result<PreTokenizerWrapper> {
    let byte_level = || -> PreTokenizerWrapper { ByteLevel::new(false, false, true).into() };
    match name {
        // llama.cpp: regex_exprs = { "\p{N}", <GPT-2's regex> }
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" => {
            let digits = Split::new(
                SplitPattern::Regex(r"\p{N}".to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| TokenizerError::Hf(e.to_string()))?;
            Ok(Sequence::new(vec![digits.into(), byte_level()]).into())
        }
        "gpt-2" | "gpt2" | "mpt" | "olmo" | "jais" => Ok(byte_level()),
        other => Err(TokenizerError::UnsupportedPreTokenizer {
            name: other.to_string(),
            supported: SUPPORTED_PRE,
        }),
    }
}

fn opt<T>(r: stride_gguf::Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(stride_gguf::GgufError::KeyNotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl Tokenizer {
    /// Builds the tokenizer of a GGUF file (`tokenizer.ggml.model = "gpt2"`).
    pub fn from_gguf(g: &Gguf) -> Result<Tokenizer> {
        let model = g.get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(TokenizerError::Unsupported(format!(
                "tokenizer.ggml.model = {model:?}; only \"gpt2\" (byte-level BPE) is implemented"
            )));
        }
        let tokens = g.get_str_array("tokenizer.ggml.tokens")?.to_vec();
        let merges = g.get_str_array("tokenizer.ggml.merges")?.to_vec();
        let token_types = match opt(g.get_i32_array("tokenizer.ggml.token_type"))? {
            None => vec![TokenType::Normal; tokens.len()],
            Some(t) => {
                if t.len() != tokens.len() {
                    return Err(TokenizerError::Invalid(format!(
                        "tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}",
                        t.len(),
                        tokens.len()
                    )));
                }
                t.iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        TokenType::from_gguf(v).ok_or_else(|| {
                            TokenizerError::Invalid(format!(
                                "token {i} has unknown token_type {v} (expected 0..=6)"
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?
            }
        };
        let pre = match opt(g.get_str("tokenizer.ggml.pre"))? {
            Some(p) => p.to_string(),
            None => {
                return Err(TokenizerError::UnsupportedPreTokenizer {
                    name: "(missing tokenizer.ggml.pre)".into(),
                    supported: SUPPORTED_PRE,
                })
            }
        };
        let id = |key: &str| -> Result<Option<u32>> {
            match opt(g.get_uint(key))? {
                None => Ok(None),
                Some(v) => u32::try_from(v).map(Some).map_err(|_| {
                    TokenizerError::Invalid(format!("{key} = {v} does not fit a token id"))
                }),
            }
        };
        let spec = BpeSpec {
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            pad: id("tokenizer.ggml.padding_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            add_bos: opt(g.get_bool("tokenizer.ggml.add_bos_token"))?.unwrap_or(false),
            add_eos: opt(g.get_bool("tokenizer.ggml.add_eos_token"))?.unwrap_or(false),
            chat_template: opt(g.get_str("tokenizer.chat_template"))?.map(str::to_string),
            tokens,
            token_types,
            merges,
            pre,
        };
        Tokenizer::from_spec(spec)
    }

    /// Opens a GGUF file and builds its tokenizer.
    pub fn from_gguf_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        Tokenizer::from_gguf(&Gguf::open(path)?)
    }

    /// Builds a tokenizer from a vocabulary, merges and a pre-tokenizer name (what a GGUF file
    /// holds). Checks that the ids are in range and that every merge names known tokens.
    pub fn from_spec(spec: BpeSpec) -> Result<Tokenizer> {
        let n = spec.tokens.len();
        if spec.token_types.len() != n {
            return Err(TokenizerError::Invalid(format!(
                "{} token types for {n} tokens",
                spec.token_types.len()
            )));
        }
        if n == 0 || n > u32::MAX as usize {
            return Err(TokenizerError::Invalid(format!(
                "a vocabulary of {n} tokens"
            )));
        }
        for (name, v) in [
            ("bos", spec.bos),
            ("eos", spec.eos),
            ("padding", spec.pad),
            ("unknown", spec.unk),
        ] {
            if let Some(v) = v {
                if v as usize >= n {
                    return Err(TokenizerError::Invalid(format!(
                        "{name} token id {v} is past the vocabulary of {n} tokens"
                    )));
                }
            }
        }
        let pre = pre_tokenizer(&spec.pre)?;
        let mut ids: HashMap<String, u32> = HashMap::with_capacity(n);
        for (i, t) in spec.tokens.iter().enumerate() {
            // as llama.cpp: a duplicated string maps to its last id
            ids.insert(t.clone(), i as u32);
        }
        let mut merges = Vec::with_capacity(spec.merges.len());
        for (i, m) in spec.merges.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte
            let pos = m
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(p, _)| p)
                .ok_or_else(|| {
                    TokenizerError::Invalid(format!("merge {i} ({m:?}) has no space"))
                })?;
            let (a, b) = (&m[..pos], &m[pos + 1..]);
            for part in [a, b] {
                if !ids.contains_key(part) {
                    return Err(TokenizerError::Invalid(format!(
                        "merge {i} ({m:?}) names {part:?}, which is not in the vocabulary"
                    )));
                }
            }
            let joined = format!("{a}{b}");
            if !ids.contains_key(&joined) {
                return Err(TokenizerError::Invalid(format!(
                    "merge {i} ({m:?}) makes {joined:?}, which is not in the vocabulary"
                )));
            }
            merges.push((a.to_string(), b.to_string()));
        }
        let vocab: tokenizers::models::bpe::Vocab =
            ids.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| TokenizerError::Hf(e.to_string()))?;
        let mut hf = tokenizers::Tokenizer::new(bpe);
        hf.with_pre_tokenizer(Some(pre));
        Tokenizer::assemble(
            hf,
            spec.tokens,
            spec.token_types,
            ids,
            spec.bos,
            spec.eos,
            spec.pad,
            spec.unk,
            spec.add_bos,
            spec.add_eos,
            spec.chat_template,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        hf: tokenizers::Tokenizer,
        texts: Vec<String>,
        types: Vec<TokenType>,
        ids: HashMap<String, u32>,
        bos: Option<u32>,
        eos: Option<u32>,
        pad: Option<u32>,
        unk: Option<u32>,
        add_bos: bool,
        add_eos: bool,
        chat_template: Option<String>,
    ) -> Result<Tokenizer> {
        if add_bos && bos.is_none() {
            return Err(TokenizerError::Invalid(
                "add_bos_token is set but there is no BOS token id".into(),
            ));
        }
        if add_eos && eos.is_none() {
            return Err(TokenizerError::Invalid(
                "add_eos_token is set but there is no EOS token id".into(),
            ));
        }
        let pieces = texts
            .iter()
            .zip(&types)
            .map(|(t, ty)| match ty {
                TokenType::Normal => bytelevel::decode_token(t),
                _ => Ok(t.as_bytes().to_vec()),
            })
            .collect();
        let mut specials: Vec<(String, u32)> = texts
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (t, ty))| ty.is_matched_in_text() && !t.is_empty())
            .map(|(i, (t, _))| (t.clone(), i as u32))
            .collect();
        // longest first (llama.cpp's order), then by id for a deterministic order
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        Ok(Tokenizer {
            hf,
            texts,
            types,
            pieces,
            specials,
            ids,
            bos,
            eos,
            pad,
            unk,
            add_bos,
            add_eos,
            chat_template,
        })
    }

    /// Builds the tokenizer of a Hugging Face `tokenizer.json` (byte-level BPE only), with
    /// the BOS/EOS/chat-template settings of its `tokenizer_config.json` when given.
    /// Added tokens marked `special` become control tokens, the others user-defined.
    pub fn from_tokenizer_json(json: &[u8], config_json: Option<&[u8]>) -> Result<Tokenizer> {
        let hf = tokenizers::Tokenizer::from_bytes(json)
            .map_err(|e| TokenizerError::Hf(format!("tokenizer.json: {e}")))?;
        if !matches!(hf.get_model(), tokenizers::ModelWrapper::BPE(_)) {
            return Err(TokenizerError::Unsupported(
                "the tokenizer.json model is not BPE; only byte-level BPE is implemented".into(),
            ));
        }
        if !matches!(
            hf.get_decoder(),
            Some(tokenizers::DecoderWrapper::ByteLevel(_))
        ) {
            return Err(TokenizerError::Unsupported(
                "the tokenizer.json decoder is not ByteLevel; only byte-level BPE is implemented"
                    .into(),
            ));
        }
        let vocab = hf.get_vocab(true);
        let n = vocab.values().map(|&i| i as usize + 1).max().unwrap_or(0);
        if n == 0 {
            return Err(TokenizerError::Invalid("empty vocabulary".into()));
        }
        let mut texts = vec![None; n];
        for (t, &i) in &vocab {
            texts[i as usize] = Some(t.clone());
        }
        let texts: Vec<String> = texts
            .into_iter()
            .enumerate()
            .map(|(i, t)| t.ok_or_else(|| TokenizerError::Invalid(format!("no token has id {i}"))))
            .collect::<Result<_>>()?;
        let mut types = vec![TokenType::Normal; n];
        for (id, tok) in hf.get_added_tokens_decoder() {
            types[id as usize] = if tok.special {
                TokenType::Control
            } else {
                TokenType::UserDefined
            };
        }
        let ids: HashMap<String, u32> = vocab.into_iter().collect();
        let (mut bos, mut eos, mut pad, mut unk) = (None, None, None, None);
        let (mut add_bos, mut add_eos, mut chat_template) = (false, false, None);
        if let Some(cfg) = config_json {
            let v: serde_json::Value = serde_json::from_slice(cfg)
                .map_err(|e| TokenizerError::Invalid(format!("tokenizer_config.json: {e}")))?;
            let token_id = |key: &str| -> Result<Option<u32>> {
                let s = match v.get(key) {
                    None | Some(serde_json::Value::Null) => return Ok(None),
                    Some(serde_json::Value::String(s)) => s.as_str(),
                    Some(o) => match o.get("content").and_then(|c| c.as_str()) {
                        Some(s) => s,
                        None => {
                            return Err(TokenizerError::Invalid(format!(
                            "tokenizer_config.json: {key} is neither a string nor an added token"
                        )))
                        }
                    },
                };
                ids.get(s).copied().map(Some).ok_or_else(|| {
                    TokenizerError::Invalid(format!(
                        "tokenizer_config.json: {key} = {s:?} is not in the vocabulary"
                    ))
                })
            };
            bos = token_id("bos_token")?;
            eos = token_id("eos_token")?;
            pad = token_id("pad_token")?;
            unk = token_id("unk_token")?;
            add_bos = v
                .get("add_bos_token")
                .and_then(|b| b.as_bool())
                .unwrap_or(false);
            add_eos = v
                .get("add_eos_token")
                .and_then(|b| b.as_bool())
                .unwrap_or(false);
            chat_template = v
                .get("chat_template")
                .and_then(|t| t.as_str())
                .map(str::to_string);
        }
        Tokenizer::assemble(
            hf,
            texts,
            types,
            ids,
            bos,
            eos,
            pad,
            unk,
            add_bos,
            add_eos,
            chat_template,
        )
    }

    /// Reads `tokenizer.json` (and `tokenizer_config.json` beside it, when present).
    pub fn from_tokenizer_json_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| TokenizerError::Io {
                path: p.to_path_buf(),
                source,
            })
        };
        let json = read(path)?;
        let cfg_path = path.with_file_name("tokenizer_config.json");
        let cfg = if cfg_path.exists() {
            Some(read(&cfg_path)?)
        } else {
            None
        };
        Tokenizer::from_tokenizer_json(&json, cfg.as_deref())
    }

    /// Splits `text` into runs of ordinary text and special tokens, llama.cpp's way: each
    /// special token, longest first, is cut out of every remaining text run, left to right.
    fn partition<'t>(&self, text: &'t str) -> Vec<Fragment<'t>> {
        let mut frags = vec![Fragment::Text(text)];
        for (special, id) in &self.specials {
            if !text.contains(special.as_str()) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(mut s) => {
                        while let Some(p) = s.find(special.as_str()) {
                            if p > 0 {
                                next.push(Fragment::Text(&s[..p]));
                            }
                            next.push(Fragment::Token(*id));
                            s = &s[p + special.len()..];
                        }
                        if !s.is_empty() {
                            next.push(Fragment::Text(s));
                        }
                    }
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }

    fn encode_ordinary_into(&self, text: &str, ids: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let enc = self
            .hf
            .encode(text, false)
            .map_err(|e| TokenizerError::Hf(e.to_string()))?;
        ids.extend_from_slice(enc.get_ids());
        Ok(())
    }

    fn encode_impl(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            ids.extend(self.bos);
        }
        if parse_special {
            for f in self.partition(text) {
                match f {
                    Fragment::Text(s) => self.encode_ordinary_into(s, &mut ids)?,
                    Fragment::Token(id) => ids.push(id),
                }
            }
        } else {
            self.encode_ordinary_into(text, &mut ids)?;
        }
        if add_special && self.add_eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }

    /// Token ids of `text`. Special tokens written in the text (`<|im_start|>`) become their
    /// ids, as llama.cpp's `parse_special = true`; `add_special` adds BOS/EOS as the model
    /// asks (`add_bos_token`, `add_eos_token`).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        self.encode_impl(text, add_special, true)
    }

    /// Token ids of `text` with special-token strings treated as ordinary text (for
    /// untrusted input: `"<|im_end|>"` is spelled out, not the control token).
    pub fn encode_plain(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        self.encode_impl(text, add_special, false)
    }

    fn check(&self, id: u32) -> Result<usize> {
        let i = id as usize;
        if i < self.texts.len() {
            Ok(i)
        } else {
            Err(TokenizerError::IdOutOfRange {
                id,
                vocab_size: self.texts.len(),
            })
        }
    }

    /// The bytes token `id` stands for (possibly part of a UTF-8 character). Control and
    /// user-defined tokens give their text.
    pub fn token_to_piece(&self, id: u32) -> Result<&[u8]> {
        let i = self.check(id)?;
        match &self.pieces[i] {
            Ok(b) => Ok(b),
            Err(ch) => Err(TokenizerError::NotByteLevel {
                id,
                text: self.texts[i].clone(),
                ch: *ch,
            }),
        }
    }

    /// The vocabulary string of token `id` (byte-level alphabet: `"Ġthe"`).
    pub fn token_text(&self, id: u32) -> Result<&str> {
        Ok(&self.texts[self.check(id)?])
    }

    /// The kind of token `id`.
    pub fn token_type(&self, id: u32) -> Result<TokenType> {
        Ok(self.types[self.check(id)?])
    }

    /// The id of a vocabulary string (`"<|im_end|>"`, `"Ġthe"`).
    pub fn token_to_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// Whether `id` is a control token (not text: EOS, `<|im_start|>`, …).
    pub fn is_control(&self, id: u32) -> bool {
        self.types
            .get(id as usize)
            .is_some_and(|t| *t == TokenType::Control)
    }

    fn decode_impl(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            if skip_special && self.is_control(id) {
                self.check(id)?;
                continue;
            }
            bytes.extend_from_slice(self.token_to_piece(id)?);
        }
        String::from_utf8(bytes).map_err(|e| TokenizerError::InvalidUtf8 {
            detail: e.utf8_error().to_string(),
        })
    }

    /// The text of `ids`, control tokens included as their text, so that
    /// `decode(encode(s)) == s`. An error when the bytes are not valid UTF-8 (use
    /// [`StreamDecoder`] for token-by-token output).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.decode_impl(ids, false)
    }

    /// The text of `ids` without control tokens (what a chat shows).
    pub fn decode_skip_special(&self, ids: &[u32]) -> Result<String> {
        self.decode_impl(ids, true)
    }

    /// The text of `ids`, with each invalid UTF-8 sequence replaced by U+FFFD.
    pub fn decode_lossy(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut bytes = Vec::new();
        for &id in ids {
            if skip_special && self.is_control(id) {
                continue;
            }
            bytes.extend_from_slice(self.token_to_piece(id)?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// A decoder for token-by-token output; see [`StreamDecoder`].
    pub fn stream_decoder(&self, skip_special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, skip_special)
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }

    /// The beginning-of-sequence token, if the model has one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token, if the model has one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The padding token, if the model has one.
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }

    /// The unknown token, if the model has one.
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }

    /// Whether `encode(_, true)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(_, true)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// The model's Jinja chat template text, if any.
    pub fn chat_template_source(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The model's chat template, recognised (an error naming the problem for a template
    /// this crate cannot render, or when there is none).
    pub fn chat_template(&self) -> Result<ChatTemplate> {
        ChatTemplate::parse(
            self.chat_template
                .as_deref()
                .ok_or(TokenizerError::NoChatTemplate)?,
        )
    }

    /// Renders `messages` with the model's chat template, ending with the assistant's
    /// header when `add_generation_prompt`. Encode the result with [`Tokenizer::encode`]
    /// (special tokens parsed) and `add_special = false` (the template writes them).
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        Ok(self
            .chat_template()?
            .render(messages, add_generation_prompt))
    }
}

#[derive(Debug)]
enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}
