//! [`GptConfig`]: the hyperparameters of a [`super::Gpt`], and the choices that make it a
//! modern (Llama-style) or a GPT-2-style transformer.

use crate::invalid;
use std::collections::BTreeMap;
use stride_core::Result;

/// The normalisation of each block's two inputs and of the final hidden state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// RMSNorm with a weight (no bias): the modern default.
    Rms,
    /// LayerNorm with a weight and a bias: GPT-2's.
    Layer,
}

/// How the model knows where a token is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Positions {
    /// Rotary embeddings on the queries and keys (half-split pairs, Hugging Face's
    /// `rotate_half`), with this frequency base.
    Rotary { base: f64 },
    /// A learned table of `context_len` position vectors added to the token embeddings
    /// (GPT-2's).
    Learned,
}

/// The feed-forward network of each block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mlp {
    /// `down(silu(gate(x)) ⊙ up(x))`: the modern default.
    SwiGlu,
    /// `proj(gelu_tanh(fc(x)))`: GPT-2's.
    Gelu,
}

/// The mixture-of-experts feed-forward of every block ([`GptConfig::moe`]): a softmax
/// router over `experts` SwiGLU experts, each token sent to its `top_k` best (their weights
/// renormalised to sum to one).
///
/// ```
/// use stride_models::gpt::{GptConfig, MoeConfig};
/// let c = GptConfig::modern(259, 64, 2, 2, 32).with_moe(MoeConfig::new(8, 2, 64));
/// assert_eq!(c.moe.as_ref().unwrap().aux_loss_coef, 0.01);
/// c.validate()?;
/// # Ok::<(), stride_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// Experts per block.
    pub experts: usize,
    /// Experts each token is sent to.
    pub top_k: usize,
    /// Hidden width of each expert's SwiGLU.
    pub expert_ffn_dim: usize,
    /// Weight of the load-balancing loss `E·Σ_e f_e·P_e` (Switch Transformer's, with `f_e`
    /// the share of the (token, choice) pairs routed to expert `e` and `P_e` its mean router
    /// probability; 1 when the load is even), averaged over the blocks.
    pub aux_loss_coef: f64,
    /// Weight of the router z-loss `mean(logsumexp(logits)²)` (ST-MoE's), averaged over the
    /// blocks.
    pub z_loss_coef: f64,
    /// Dropless routing when `None`; else each expert takes at most
    /// `⌈capacity_factor·tokens·top_k / experts⌉` tokens a batch, in token order, and the
    /// choices past that are dropped (their weight is 0: the token keeps its residual).
    pub capacity_factor: Option<f64>,
}

impl MoeConfig {
    /// `experts` SwiGLU experts of hidden width `expert_ffn_dim`, top-`top_k` routing,
    /// dropless, with the usual loss weights (aux 0.01, z 0.001).
    pub fn new(experts: usize, top_k: usize, expert_ffn_dim: usize) -> MoeConfig {
        MoeConfig {
            experts,
            top_k,
            expert_ffn_dim,
            aux_loss_coef: 0.01,
            z_loss_coef: 0.001,
            capacity_factor: None,
        }
    }

    fn validate(&self) -> Result<()> {
        let op = "MoeConfig";
        if self.experts == 0 || self.experts > 65_535 {
            return Err(invalid(
                op,
                format!("experts must be in 1..=65535, got {}", self.experts),
            ));
        }
        if self.top_k == 0 || self.top_k > self.experts {
            return Err(invalid(
                op,
                format!(
                    "top_k must be in 1..={} (the expert count), got {}",
                    self.experts, self.top_k
                ),
            ));
        }
        if self.expert_ffn_dim == 0 {
            return Err(invalid(op, "expert_ffn_dim must be at least 1"));
        }
        for (name, v) in [
            ("aux_loss_coef", self.aux_loss_coef),
            ("z_loss_coef", self.z_loss_coef),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(invalid(
                    op,
                    format!("{name} must be finite and ≥ 0, got {v}"),
                ));
            }
        }
        if let Some(c) = self.capacity_factor {
            if !(c > 0.0 && c.is_finite()) {
                return Err(invalid(
                    op,
                    format!("the capacity factor must be finite and > 0, got {c}"),
                ));
            }
        }
        Ok(())
    }

    /// `E,K,F,aux,z,capacity` (capacity `none` when dropless): checkpoint metadata.
    fn to_meta(&self) -> String {
        let cap = self
            .capacity_factor
            .map_or("none".to_string(), |c| c.to_string());
        format!(
            "{},{},{},{},{},{cap}",
            self.experts, self.top_k, self.expert_ffn_dim, self.aux_loss_coef, self.z_loss_coef
        )
    }

    fn from_meta(s: &str) -> Result<MoeConfig> {
        let bad = || {
            invalid(
                "GptConfig::from_meta",
                format!("gpt.moe = {s:?} is malformed"),
            )
        };
        let f: Vec<&str> = s.split(',').collect();
        if f.len() != 6 {
            return Err(bad());
        }
        let u = |i: usize| f[i].parse::<usize>().map_err(|_| bad());
        let x = |i: usize| f[i].parse::<f64>().map_err(|_| bad());
        Ok(MoeConfig {
            experts: u(0)?,
            top_k: u(1)?,
            expert_ffn_dim: u(2)?,
            aux_loss_coef: x(3)?,
            z_loss_coef: x(4)?,
            capacity_factor: match f[5] {
                "none" => None,
                _ => Some(x(5)?),
            },
        })
    }
}

/// Hyperparameters of a [`super::Gpt`]: a decoder-only transformer with pre-norm blocks
/// (`x + attn(norm(x))`, then `x + mlp(norm(x))`), multi-head causal self-attention from one
/// fused QKV projection, and a final norm before the output projection.
///
/// ```
/// use stride_models::gpt::{GptConfig, Norm, Positions, Mlp};
/// let c = GptConfig::modern(259, 64, 4, 4, 128);    // bytes, 64 positions, 4 layers, 4 heads
/// assert_eq!((c.norm, c.mlp), (Norm::Rms, Mlp::SwiGlu));
/// assert_eq!(c.ffn_dim, 384);                        // ⅔·4·128 rounded up to 64
/// let g = GptConfig::gpt2(50257, 1024, 12, 12, 768);
/// assert_eq!((g.positions, g.ffn_dim, g.bias), (Positions::Learned, 3072, true));
/// c.validate()?;
/// # Ok::<(), stride_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct GptConfig {
    /// Token ids are `0..vocab_size`.
    pub vocab_size: usize,
    /// The longest sequence (rotary tables, learned positions, a cache's capacity).
    pub context_len: usize,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Attention heads (`dim / n_heads` features each).
    pub n_heads: usize,
    /// Model width.
    pub dim: usize,
    /// Hidden width of the feed-forward network.
    pub ffn_dim: usize,
    pub norm: Norm,
    pub positions: Positions,
    pub mlp: Mlp,
    /// The output projection is the token embedding table.
    pub tied_embeddings: bool,
    /// Linear layers have biases (GPT-2's do).
    pub bias: bool,
    /// Dropout probability on the embeddings, the attention weights and each residual branch
    /// (in training mode only).
    pub dropout: f64,
    /// The norms' epsilon.
    pub norm_eps: f64,
    /// A mixture of experts in place of every block's feed-forward network (modern style
    /// only: the experts are SwiGLU).
    pub moe: Option<MoeConfig>,
}

impl GptConfig {
    /// The modern style: RMSNorm, rotary (base 10,000), SwiGLU with a hidden width of ⅔·4·dim
    /// rounded up to a multiple of 64, tied embeddings, no biases, no dropout.
    pub fn modern(
        vocab_size: usize,
        context_len: usize,
        n_layers: usize,
        n_heads: usize,
        dim: usize,
    ) -> GptConfig {
        GptConfig {
            vocab_size,
            context_len,
            n_layers,
            n_heads,
            dim,
            ffn_dim: (8 * dim / 3).div_ceil(64) * 64,
            norm: Norm::Rms,
            positions: Positions::Rotary { base: 10_000.0 },
            mlp: Mlp::SwiGlu,
            tied_embeddings: true,
            bias: false,
            dropout: 0.0,
            norm_eps: 1e-5,
            moe: None,
        }
    }

    /// This configuration with a mixture of experts in every block.
    pub fn with_moe(self, moe: MoeConfig) -> GptConfig {
        GptConfig {
            moe: Some(moe),
            ..self
        }
    }

    /// GPT-2's choices: LayerNorm, learned positions, GELU (tanh) with a hidden width of
    /// 4·dim, biases, tied embeddings.
    pub fn gpt2(
        vocab_size: usize,
        context_len: usize,
        n_layers: usize,
        n_heads: usize,
        dim: usize,
    ) -> GptConfig {
        GptConfig {
            ffn_dim: 4 * dim,
            norm: Norm::Layer,
            positions: Positions::Learned,
            mlp: Mlp::Gelu,
            bias: true,
            ..GptConfig::modern(vocab_size, context_len, n_layers, n_heads, dim)
        }
    }

    /// Features per head.
    pub fn head_dim(&self) -> usize {
        self.dim.checked_div(self.n_heads).unwrap_or(0)
    }

    /// Checks every field; the error names the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        let op = "GptConfig";
        let positive = [
            ("vocab_size", self.vocab_size),
            ("context_len", self.context_len),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("dim", self.dim),
            ("ffn_dim", self.ffn_dim),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(invalid(op, format!("{name} must be at least 1")));
            }
        }
        if !self.dim.is_multiple_of(self.n_heads) {
            return Err(invalid(
                op,
                format!(
                    "dim {} is not a multiple of n_heads {}",
                    self.dim, self.n_heads
                ),
            ));
        }
        if let Positions::Rotary { base } = self.positions {
            if !self.head_dim().is_multiple_of(2) {
                return Err(invalid(
                    op,
                    format!(
                        "rotary positions need an even head dim, got {} (dim {} / n_heads {})",
                        self.head_dim(),
                        self.dim,
                        self.n_heads
                    ),
                ));
            }
            if !(base > 0.0 && base.is_finite()) {
                return Err(invalid(
                    op,
                    format!("the rotary base must be finite and > 0, got {base}"),
                ));
            }
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(invalid(
                op,
                format!("dropout must be in [0, 1), got {}", self.dropout),
            ));
        }
        if !(self.norm_eps > 0.0 && self.norm_eps.is_finite()) {
            return Err(invalid(
                op,
                format!("norm_eps must be finite and > 0, got {}", self.norm_eps),
            ));
        }
        if let Some(m) = &self.moe {
            m.validate()?;
            if self.mlp != Mlp::SwiGlu {
                return Err(invalid(
                    op,
                    "the experts of a mixture of experts are SwiGLU: use the modern style (mlp = SwiGlu)",
                ));
            }
        }
        let moe_table = self.moe.as_ref().map_or(Some(0), |m| {
            m.experts
                .checked_mul(m.expert_ffn_dim)
                .and_then(|n| n.checked_mul(3 * self.dim))
        });
        // the largest tables must have an element count that fits
        let sizes = [
            moe_table,
            self.vocab_size.checked_mul(self.dim),
            self.context_len.checked_mul(self.dim),
            self.ffn_dim.checked_mul(self.dim),
            self.dim.checked_mul(3 * self.dim),
        ];
        if sizes
            .iter()
            .any(|s| s.is_none_or(|n| n > isize::MAX as usize / 8))
        {
            return Err(invalid(
                op,
                format!(
                    "the weight tables of vocab {} × dim {} (ffn {}, context {}) are too large to allocate",
                    self.vocab_size, self.dim, self.ffn_dim, self.context_len
                ),
            ));
        }
        Ok(())
    }

    /// The configuration as `gpt.*` string pairs (checkpoint metadata).
    pub fn to_meta(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            m.insert(format!("gpt.{k}"), v);
        };
        put("vocab_size", self.vocab_size.to_string());
        put("context_len", self.context_len.to_string());
        put("n_layers", self.n_layers.to_string());
        put("n_heads", self.n_heads.to_string());
        put("dim", self.dim.to_string());
        put("ffn_dim", self.ffn_dim.to_string());
        put(
            "norm",
            match self.norm {
                Norm::Rms => "rms",
                Norm::Layer => "layer",
            }
            .into(),
        );
        put(
            "positions",
            match self.positions {
                Positions::Rotary { base } => format!("rotary:{base}"),
                Positions::Learned => "learned".into(),
            },
        );
        put(
            "mlp",
            match self.mlp {
                Mlp::SwiGlu => "swiglu",
                Mlp::Gelu => "gelu",
            }
            .into(),
        );
        put("tied_embeddings", self.tied_embeddings.to_string());
        put("bias", self.bias.to_string());
        put("dropout", self.dropout.to_string());
        put("norm_eps", self.norm_eps.to_string());
        if let Some(moe) = &self.moe {
            put("moe", moe.to_meta());
        }
        m
    }

    /// The configuration [`GptConfig::to_meta`] wrote; a missing or malformed key is an error
    /// naming it.
    pub fn from_meta(meta: &BTreeMap<String, String>) -> Result<GptConfig> {
        let op = "GptConfig::from_meta";
        let get = |k: &str| -> Result<&str> {
            meta.get(&format!("gpt.{k}"))
                .map(|s| s.as_str())
                .ok_or_else(|| invalid(op, format!("the metadata has no gpt.{k}")))
        };
        fn parse<T: std::str::FromStr>(k: &str, s: &str) -> Result<T> {
            s.parse().map_err(|_| {
                invalid(
                    "GptConfig::from_meta",
                    format!("gpt.{k} = {s:?} is malformed"),
                )
            })
        }
        let p = |k: &str| -> Result<usize> { parse(k, get(k)?) };
        let norm = match get("norm")? {
            "rms" => Norm::Rms,
            "layer" => Norm::Layer,
            s => {
                return Err(invalid(
                    op,
                    format!("gpt.norm = {s:?}: expected rms or layer"),
                ))
            }
        };
        let positions = match get("positions")? {
            "learned" => Positions::Learned,
            s => match s.strip_prefix("rotary:") {
                Some(b) => Positions::Rotary {
                    base: parse("positions", b)?,
                },
                None => {
                    return Err(invalid(
                        op,
                        format!("gpt.positions = {s:?}: expected learned or rotary:BASE"),
                    ))
                }
            },
        };
        let mlp = match get("mlp")? {
            "swiglu" => Mlp::SwiGlu,
            "gelu" => Mlp::Gelu,
            s => {
                return Err(invalid(
                    op,
                    format!("gpt.mlp = {s:?}: expected swiglu or gelu"),
                ))
            }
        };
        let c = GptConfig {
            vocab_size: p("vocab_size")?,
            context_len: p("context_len")?,
            n_layers: p("n_layers")?,
            n_heads: p("n_heads")?,
            dim: p("dim")?,
            ffn_dim: p("ffn_dim")?,
            norm,
            positions,
            mlp,
            tied_embeddings: parse("tied_embeddings", get("tied_embeddings")?)?,
            bias: parse("bias", get("bias")?)?,
            dropout: parse("dropout", get("dropout")?)?,
            norm_eps: parse("norm_eps", get("norm_eps")?)?,
            moe: meta
                .get("gpt.moe")
                .map(|s| MoeConfig::from_meta(s))
                .transpose()?,
        };
        c.validate()?;
        Ok(c)
    }
}
