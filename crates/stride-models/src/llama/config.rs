//! [`LlamaConfig`]: the hyperparameters of a Llama-family model, from GGUF metadata or a
//! Hugging Face `config.json`.

use crate::invalid;
use stride_core::Result;
use stride_gguf::Gguf;

/// Hyperparameters of a Llama model (the GGUF key each comes from in brackets).
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Transformer blocks (`llama.block_count`).
    pub n_layers: usize,
    /// Model width (`llama.embedding_length`).
    pub dim: usize,
    /// Hidden width of the SwiGLU feed-forward (`llama.feed_forward_length`).
    pub ffn_dim: usize,
    /// Query heads (`llama.attention.head_count`).
    pub n_heads: usize,
    /// Key/value heads (`llama.attention.head_count_kv`; = `n_heads` when absent).
    pub n_kv_heads: usize,
    /// Features per head (`dim / n_heads`).
    pub head_dim: usize,
    /// Rotated features per head (`llama.rope.dimension_count`; = `head_dim` when absent).
    pub rope_dim: usize,
    /// Rotary frequency base (`llama.rope.freq_base`; 10000 when absent).
    pub rope_base: f64,
    /// RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f64,
    /// Training context length (`llama.context_length`).
    pub context_len: usize,
    /// Vocabulary size (rows of `token_embd.weight`).
    pub vocab_size: usize,
    /// True when the output projection is the embedding table (no `output.weight`).
    pub tied_embeddings: bool,
}

fn gguf_err(e: stride_gguf::GgufError) -> stride_core::Error {
    invalid("LlamaConfig::from_gguf", e.to_string())
}

impl LlamaConfig {
    /// From a GGUF file's metadata (`general.architecture` must be `llama`) and its tensor
    /// infos (vocabulary and tied output). A missing or inconsistent key is an error naming it.
    pub fn from_gguf(g: &Gguf) -> Result<LlamaConfig> {
        let op = "LlamaConfig::from_gguf";
        let arch = g.get_str("general.architecture").map_err(gguf_err)?;
        if arch != "llama" {
            return Err(invalid(
                op,
                format!("general.architecture is {arch:?}; only \"llama\" models are supported"),
            ));
        }
        let uint = |k: &str| -> Result<usize> { Ok(g.get_uint(k).map_err(gguf_err)? as usize) };
        let n_heads = uint("llama.attention.head_count")?;
        let n_kv_heads = match g.get("llama.attention.head_count_kv") {
            Some(_) => uint("llama.attention.head_count_kv")?,
            None => n_heads,
        };
        let dim = uint("llama.embedding_length")?;
        let head_dim = dim.checked_div(n_heads).unwrap_or(0);
        let rope_dim = match g.get("llama.rope.dimension_count") {
            Some(_) => uint("llama.rope.dimension_count")?,
            None => head_dim,
        };
        let rope_base = match g.get("llama.rope.freq_base") {
            Some(_) => g.get_float("llama.rope.freq_base").map_err(gguf_err)?,
            None => 10000.0,
        };
        let emb = g.tensor("token_embd.weight").map_err(gguf_err)?.shape();
        if emb.len() != 2 || emb[1] != dim {
            return Err(invalid(
                op,
                format!("token_embd.weight has shape {emb:?}; expected [vocab, llama.embedding_length = {dim}]"),
            ));
        }
        let c = LlamaConfig {
            n_layers: uint("llama.block_count")?,
            dim,
            ffn_dim: uint("llama.feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dim,
            rope_base,
            rms_eps: g
                .get_float("llama.attention.layer_norm_rms_epsilon")
                .map_err(gguf_err)?,
            context_len: uint("llama.context_length")?,
            vocab_size: emb[0],
            tied_embeddings: g.tensor("output.weight").is_err(),
        };
        c.validate(op, "llama.")?;
        Ok(c)
    }

    /// From a Hugging Face `config.json` (`LlamaForCausalLM`): `num_hidden_layers`,
    /// `hidden_size`, `intermediate_size`, `num_attention_heads`, `num_key_value_heads`,
    /// `rope_theta`, `rms_norm_eps`, `max_position_embeddings`, `vocab_size`,
    /// `tie_word_embeddings`, `head_dim` (optional).
    pub fn from_hf_json(json: &str) -> Result<LlamaConfig> {
        let op = "LlamaConfig::from_hf_json";
        let v: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| invalid(op, format!("config.json is not valid JSON: {e}")))?;
        let uint = |k: &str| -> Result<usize> {
            v.get(k)
                .and_then(|x| x.as_u64())
                .map(|x| x as usize)
                .ok_or_else(|| {
                    invalid(
                        op,
                        format!("config.json: key {k:?} is missing or not a non-negative integer"),
                    )
                })
        };
        let opt_uint = |k: &str| -> Result<Option<usize>> {
            match v.get(k) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(_) => uint(k).map(Some),
            }
        };
        let float = |k: &str, default: Option<f64>| -> Result<f64> {
            match v.get(k) {
                Some(x) => x
                    .as_f64()
                    .ok_or_else(|| invalid(op, format!("config.json: key {k:?} is not a number"))),
                None => {
                    default.ok_or_else(|| invalid(op, format!("config.json: key {k:?} is missing")))
                }
            }
        };
        if let Some(m) = v.get("model_type").and_then(|m| m.as_str()) {
            if m != "llama" {
                return Err(invalid(
                    op,
                    format!("config.json: model_type is {m:?}; only \"llama\" is supported"),
                ));
            }
        }
        let dim = uint("hidden_size")?;
        let n_heads = uint("num_attention_heads")?;
        let head_dim = match opt_uint("head_dim")? {
            Some(h) => h,
            None if n_heads > 0 => dim / n_heads,
            None => 0,
        };
        let c = LlamaConfig {
            n_layers: uint("num_hidden_layers")?,
            dim,
            ffn_dim: uint("intermediate_size")?,
            n_heads,
            n_kv_heads: opt_uint("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim,
            rope_dim: head_dim,
            rope_base: float("rope_theta", Some(10000.0))?,
            rms_eps: float("rms_norm_eps", None)?,
            context_len: uint("max_position_embeddings")?,
            vocab_size: uint("vocab_size")?,
            tied_embeddings: v
                .get("tie_word_embeddings")
                .and_then(|x| x.as_bool())
                .unwrap_or(false),
        };
        c.validate(op, "")?;
        Ok(c)
    }

    /// Checks the numbers fit together (`prefix` is the key prefix for messages).
    pub(crate) fn validate(&self, op: &'static str, prefix: &str) -> Result<()> {
        let bad = |k: &str, why: String| Err(invalid(op, format!("{prefix}{k}: {why}")));
        let heads = if prefix.is_empty() {
            "num_attention_heads"
        } else {
            "attention.head_count"
        };
        let kv = if prefix.is_empty() {
            "num_key_value_heads"
        } else {
            "attention.head_count_kv"
        };
        if self.n_layers == 0 || self.dim == 0 || self.ffn_dim == 0 || self.vocab_size == 0 {
            return bad(
                "block_count/embedding_length/feed_forward_length/vocab",
                format!("must all be > 0, got {self:?}"),
            );
        }
        if self.n_heads == 0
            || self.head_dim == 0
            || self.head_dim * self.n_heads != self.dim && prefix == "llama."
        {
            return bad(
                heads,
                format!("{} heads don't divide the width {}", self.n_heads, self.dim),
            );
        }
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(
                kv,
                format!(
                    "{} key/value heads must divide the {} query heads",
                    self.n_kv_heads, self.n_heads
                ),
            );
        }
        if self.rope_dim == 0 || !self.rope_dim.is_multiple_of(2) || self.rope_dim > self.head_dim {
            return bad(
                if prefix.is_empty() {
                    "head_dim"
                } else {
                    "rope.dimension_count"
                },
                format!(
                    "the rotary dim {} must be even, > 0 and ≤ the head dim {}",
                    self.rope_dim, self.head_dim
                ),
            );
        }
        // written so that NaN is refused too
        if self.rms_eps.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
            || self.rope_base.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        {
            return bad(
                "rms_eps/rope base",
                format!("must be > 0, got {} and {}", self.rms_eps, self.rope_base),
            );
        }
        if self.context_len == 0 {
            return bad(
                if prefix.is_empty() {
                    "max_position_embeddings"
                } else {
                    "context_length"
                },
                "must be > 0".into(),
            );
        }
        Ok(())
    }
}
