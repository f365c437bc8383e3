//! The error type: every way building, encoding or decoding can be refused, each naming the
//! problem.

/// Result alias of this crate.
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;

/// Why a tokenizer could not be built, or a text or token sequence was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// Reading the GGUF metadata failed (missing key, wrong type, unreadable file).
    #[error("GGUF tokenizer metadata: {0}")]
    Gguf(#[from] stride_gguf::GgufError),
    /// A tokenizer model this crate does not implement (`tokenizer.ggml.model` other than
    /// `gpt2`, a `tokenizer.json` whose model is not byte-level BPE).
    #[error("unsupported tokenizer: {0}")]
    Unsupported(String),
    /// A pre-tokenizer name (`tokenizer.ggml.pre`) whose splitting rules are not implemented;
    /// guessing would give token ids that silently differ from the model's.
    #[error("unsupported pre-tokenizer {name:?} (tokenizer.ggml.pre): supported are {supported}; a guessed pre-tokenizer would silently give different token ids")]
    UnsupportedPreTokenizer {
        name: String,
        supported: &'static str,
    },
    /// The vocabulary or merges are inconsistent (a merge naming an unknown token, a special
    /// token id past the vocabulary, array lengths that differ).
    #[error("invalid tokenizer data: {0}")]
    Invalid(String),
    /// A token id outside the vocabulary.
    #[error("token id {id} is out of range: the vocabulary has {vocab_size} tokens (ids 0..{vocab_size})")]
    IdOutOfRange { id: u32, vocab_size: usize },
    /// Decoded bytes are not valid UTF-8 (a sequence of byte tokens that splits a character,
    /// or bytes that never form one).
    #[error("decoded bytes are not valid UTF-8: {detail}")]
    InvalidUtf8 { detail: String },
    /// A vocabulary entry whose characters are not in the byte-level alphabet, so its bytes
    /// are unknown.
    #[error("token {id} ({text:?}) is not a byte-level BPE token: character {ch:?} is outside the byte alphabet")]
    NotByteLevel { id: u32, text: String, ch: char },
    /// An error inside the `tokenizers` crate.
    #[error("tokenizers: {0}")]
    Hf(String),
    /// A chat template this crate cannot render (it renders ChatML-style templates only; it
    /// is not a Jinja engine).
    #[error("unsupported chat template: {0}")]
    UnsupportedChatTemplate(String),
    /// The model carries no chat template.
    #[error("the model has no chat template (tokenizer.chat_template)")]
    NoChatTemplate,
    /// Reading a file (tokenizer.json) failed.
    #[error("cannot read {path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}
