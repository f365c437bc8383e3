//! [`Gpt`]: the decoder-only transformer that `stride train gpt` trains, as a [`Module`]
//! (named parameters, state dicts, train/eval) and a [`CausalLm`] (generation with a KV
//! cache).

use super::config::{GptConfig, Mlp, Norm, Positions};
use super::moe::{MoeLayer, RouterLosses};
use crate::invalid;
use crate::llama::LlamaCache;
use crate::lm::{CausalLm, KvCache};
use stride_core::{DType, Device, Error, Generator, Result, Tensor};
use stride_nn::functional::{linear, scaled_dot_product_attention, Rotary, RotaryStyle};
use stride_nn::loss::{cross_entropy, CrossEntropy};
use stride_nn::{
    init, Dropout, Embedding, Factory, LayerNorm, Linear, Mode, Module, RmsNorm, Visitor,
};

/// One normalisation layer of the kind the config names.
enum NormLayer {
    Rms(RmsNorm),
    Layer(LayerNorm),
}

impl NormLayer {
    fn new(c: &GptConfig, f: &Factory) -> Result<NormLayer> {
        Ok(match c.norm {
            Norm::Rms => NormLayer::Rms(RmsNorm::new_with(&[c.dim], Some(c.norm_eps), true, f)?),
            Norm::Layer => {
                NormLayer::Layer(LayerNorm::new_with(&[c.dim], c.norm_eps, true, true, f)?)
            }
        })
    }
    fn module(&self) -> &dyn Module {
        match self {
            NormLayer::Rms(n) => n,
            NormLayer::Layer(n) => n,
        }
    }
}

/// The feed-forward network of a block.
enum FeedForward {
    SwiGlu {
        gate: Linear,
        up: Linear,
        down: Linear,
    },
    Gelu {
        fc: Linear,
        proj: Linear,
    },
    Moe(MoeLayer),
}

struct Block {
    attn_norm: NormLayer,
    qkv: Linear,
    proj: Linear,
    mlp_norm: NormLayer,
    mlp: FeedForward,
    mode: Mode,
}

impl Module for Block {
    fn forward(&self, _: &Tensor) -> Result<Tensor> {
        Err(invalid(
            "Gpt block",
            "a block runs inside Gpt::forward (it needs the positions); call the model",
        ))
    }
    fn visit(&self, v: &mut dyn Visitor) {
        v.module("attn_norm", self.attn_norm.module());
        v.module("attn.qkv", &self.qkv);
        v.module("attn.proj", &self.proj);
        v.module("mlp_norm", self.mlp_norm.module());
        match &self.mlp {
            FeedForward::SwiGlu { gate, up, down } => {
                v.module("mlp.gate", gate);
                v.module("mlp.up", up);
                v.module("mlp.down", down);
            }
            FeedForward::Gelu { fc, proj } => {
                v.module("mlp.fc", fc);
                v.module("mlp.proj", proj);
            }
            FeedForward::Moe(m) => v.module("moe", m),
        }
    }
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

/// A GPT: token embeddings (plus learned positions in the GPT-2 style), `n_layers` pre-norm
/// blocks, a final norm and the output projection (the embedding table when tied).
///
/// ```text
/// x = tok_emb[tokens] (+ pos_emb[positions])
/// per block:  x = x + proj(attn(rope(q), rope(k), v)),   q, k, v = views of qkv(norm(x))
///             x = x + mlp(norm(x))          mlp = down(silu(gate·) ⊙ up·)  or  proj(gelu(fc·))
/// logits = norm(x) · tok_embᵀ (or lm_head)
/// ```
///
/// Parameter names (state dicts, checkpoints, the PyTorch peer script): `tok_emb.weight`,
/// `pos_emb.weight`, `blocks.{i}.attn_norm.weight`, `blocks.{i}.attn.qkv.weight` (rows: all
/// query heads, then keys, then values), `blocks.{i}.attn.proj.weight`,
/// `blocks.{i}.mlp_norm.weight`, `blocks.{i}.mlp.{gate,up,down}.weight` (or
/// `mlp.{fc,proj}`), `norm.weight`, `lm_head.weight`; biases beside their weights.
///
/// Initialised as GPT-2 and nanoGPT do: every weight matrix and embedding `N(0, 0.02)`, the
/// projections into the residual stream (`attn.proj`, `mlp.down`/`mlp.proj`) `N(0,
/// 0.02/√(2·n_layers))`, biases zero, norms one.
///
/// ```
/// use stride_core::{DType, Device, Generator, Tensor};
/// use stride_models::gpt::{Gpt, GptConfig};
/// use stride_nn::Module;
/// let model = Gpt::new(GptConfig::modern(259, 32, 2, 2, 16), DType::F32, &Device::Cpu,
///                      &Generator::new(0))?;
/// let tokens = Tensor::from_vec(vec![3i64, 75, 104, 3, 9, 12], [2, 3])?;   // (batch, time)
/// let logits = model.forward(&tokens)?;                                    // (2, 3, 259)
/// assert_eq!(logits.shape(), &[2, 3, 259]);
/// let loss = model.loss(&tokens.narrow(1, 0, 2)?, &tokens.narrow(1, 1, 2)?)?;
/// loss.backward()?;
/// assert!(model.named_parameters().iter().all(|(_, p)| p.grad().is_some()));
/// # Ok::<(), stride_core::Error>(())
/// ```
pub struct Gpt {
    config: GptConfig,
    tok_emb: Embedding,
    pos_emb: Option<Embedding>,
    blocks: Vec<Block>,
    norm: NormLayer,
    lm_head: Option<Linear>,
    rotary: Option<Rotary>,
    dropout: Dropout,
    mode: Mode,
}

impl Gpt {
    /// A freshly initialised model with `dtype` parameters on `device`, drawn from `gen`.
    pub fn new(config: GptConfig, dtype: DType, device: &Device, gen: &Generator) -> Result<Gpt> {
        config.validate()?;
        if !dtype.is_float() {
            return Err(invalid(
                "Gpt::new",
                format!("parameters must be floating point, got {dtype}"),
            ));
        }
        let f = Factory {
            dtype,
            device: *device,
            generator: Some(gen),
        };
        let c = &config;
        let std = 0.02;
        let resid_std = std / (2.0 * c.n_layers as f64).sqrt();
        let lin = |i: usize, o: usize, sd: f64| -> Result<Linear> {
            let l = Linear::new_with(i, o, c.bias, &f)?;
            init::normal_(&l.weight.tensor(), 0.0, sd, Some(gen))?;
            if let Some(b) = &l.bias {
                init::zeros_(&b.tensor())?;
            }
            Ok(l)
        };
        let emb = |n: usize| -> Result<Embedding> {
            let e = Embedding::new_with(n, c.dim, None, &f)?;
            init::normal_(&e.weight.tensor(), 0.0, std, Some(gen))?;
            Ok(e)
        };
        let tok_emb = emb(c.vocab_size)?;
        let pos_emb = match c.positions {
            Positions::Learned => Some(emb(c.context_len)?),
            Positions::Rotary { .. } => None,
        };
        let mut blocks = Vec::with_capacity(c.n_layers);
        for _ in 0..c.n_layers {
            let attn_norm = NormLayer::new(c, &f)?;
            let qkv = lin(c.dim, 3 * c.dim, std)?;
            let proj = lin(c.dim, c.dim, resid_std)?;
            let mlp_norm = NormLayer::new(c, &f)?;
            let mlp = match (&c.moe, c.mlp) {
                (Some(m), _) => FeedForward::Moe(MoeLayer::new(m, c.dim, std, resid_std, &f, gen)?),
                (None, Mlp::SwiGlu) => FeedForward::SwiGlu {
                    gate: lin(c.dim, c.ffn_dim, std)?,
                    up: lin(c.dim, c.ffn_dim, std)?,
                    down: lin(c.ffn_dim, c.dim, resid_std)?,
                },
                (None, Mlp::Gelu) => FeedForward::Gelu {
                    fc: lin(c.dim, c.ffn_dim, std)?,
                    proj: lin(c.ffn_dim, c.dim, resid_std)?,
                },
            };
            blocks.push(Block {
                attn_norm,
                qkv,
                proj,
                mlp_norm,
                mlp,
                mode: Mode::default(),
            });
        }
        let norm = NormLayer::new(c, &f)?;
        let lm_head = if c.tied_embeddings {
            None
        } else {
            Some(lin(c.dim, c.vocab_size, std)?)
        };
        let rotary = match c.positions {
            Positions::Rotary { base } => Some(Rotary::new(
                c.head_dim(),
                base,
                c.context_len,
                RotaryStyle::HalfSplit,
                device,
            )?),
            Positions::Learned => None,
        };
        Ok(Gpt {
            dropout: Dropout::new(c.dropout)?,
            config,
            tok_emb,
            pos_emb,
            blocks,
            norm,
            lm_head,
            rotary,
            mode: Mode::default(),
        })
    }

    /// The hyperparameters.
    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    /// The dtype of the parameters.
    pub fn dtype(&self) -> DType {
        self.tok_emb.weight.tensor().dtype()
    }

    /// Where the parameters are.
    pub fn device(&self) -> Device {
        self.tok_emb.weight.tensor().device()
    }

    /// The training objective on `tokens` `(B, T)` → `targets` `(B, T)`: the
    /// [`cross_entropy`](Gpt::cross_entropy), plus for a mixture of experts the router's
    /// losses (each averaged over the blocks, weighted by [`super::MoeConfig`]'s
    /// coefficients).
    pub fn loss(&self, tokens: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let (ce, router) = self.losses(tokens, targets)?;
        match (router, &self.config.moe) {
            (Some(r), Some(m)) => {
                let l = self.config.n_layers as f64;
                ce.add(&r.aux.mul(m.aux_loss_coef / l)?)?
                    .add(&r.z.mul(m.z_loss_coef / l)?)
            }
            _ => Ok(ce),
        }
    }

    /// The mean cross-entropy (nats per token) of predicting `targets` `(B, T)` from
    /// `tokens` `(B, T)`, both i64; the logits are computed in the model's dtype (or
    /// autocast's) and the loss in f32 or wider. (The validation loss.)
    pub fn cross_entropy(&self, tokens: &Tensor, targets: &Tensor) -> Result<Tensor> {
        Ok(self.losses(tokens, targets)?.0)
    }

    /// Tokens routed to each expert of each block (`[block][expert]`) by training-mode
    /// forwards since the last call, read from device-side counters (one host read), and
    /// the counts restarted; empty for a dense model.
    pub fn take_expert_load(&self) -> Result<Vec<Vec<i64>>> {
        self.blocks
            .iter()
            .filter_map(|b| match &b.mlp {
                FeedForward::Moe(m) => Some(m.take_load()),
                _ => None,
            })
            .collect()
    }

    /// Data-parallel training over `group` (`None`: back to this process alone): a mixture
    /// of experts then balances its experts over the ranks' whole batch — the routing counts
    /// are summed over the ranks (on the device) — so the balance loss, averaged over the
    /// ranks, is the one a single process computes on the whole batch. The load counts
    /// ([`Gpt::take_expert_load`]) are then every rank's. A dense model is unaffected.
    pub fn set_process_group(&self, group: Option<stride_core::distributed::ProcessGroup>) {
        for b in &self.blocks {
            if let FeedForward::Moe(m) = &b.mlp {
                m.set_group(group.clone());
            }
        }
    }

    /// The cross-entropy and the router losses summed over the blocks (a mixture of experts).
    fn losses(&self, tokens: &Tensor, targets: &Tensor) -> Result<(Tensor, Option<RouterLosses>)> {
        if targets.shape() != tokens.shape() {
            return Err(invalid(
                "Gpt::loss",
                format!(
                    "targets {:?} must have the tokens' shape {:?}",
                    targets.shape(),
                    tokens.shape()
                ),
            ));
        }
        let (logits, router) = self.run(tokens, None)?;
        let v = self.config.vocab_size as i64;
        let logits = logits.reshape(&[-1, v])?;
        let logits = if logits.dtype() == DType::F64 {
            logits
        } else {
            logits.to_dtype(DType::F32)?
        };
        let ce = cross_entropy(&logits, &targets.reshape(&[-1])?, &CrossEntropy::default())?;
        Ok((ce, router))
    }

    fn check_tokens(&self, op: &'static str, tokens: &Tensor) -> Result<(usize, usize)> {
        if tokens.dtype() != DType::I64 {
            return Err(Error::UnsupportedDType {
                op,
                dtype: tokens.dtype(),
                hint: "; token ids must be i64".into(),
            });
        }
        if tokens.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op,
                a: self.device(),
                b: tokens.device(),
            });
        }
        if tokens.dim() != 2 {
            return Err(invalid(
                op,
                format!(
                    "tokens must be (batch, time), got shape {:?}",
                    tokens.shape()
                ),
            ));
        }
        Ok((tokens.shape()[0], tokens.shape()[1]))
    }

    /// The logits `(B, T, vocab)` of `tokens` `(B, T)`: a whole sequence from position 0
    /// (`cache = None`, causal, dropout in training mode), or the next positions of a cache.
    /// With a mixture of experts, also the router losses summed over the blocks.
    fn run(
        &self,
        tokens: &Tensor,
        mut cache: Option<&mut LlamaCache>,
    ) -> Result<(Tensor, Option<RouterLosses>)> {
        let op = "Gpt::forward";
        let c = &self.config;
        let (b, t) = self.check_tokens(op, tokens)?;
        let start = cache.as_ref().map_or(0, |k| k.len());
        if start + t > c.context_len {
            return Err(invalid(
                op,
                format!(
                    "positions {start}..{} exceed the model's context length {}",
                    start + t,
                    c.context_len
                ),
            ));
        }
        let dev = self.device();
        if t == 0 {
            return Ok((
                Tensor::zeros([b, 0, c.vocab_size], self.dtype(), &dev)?,
                None,
            ));
        }
        let mut router: Option<RouterLosses> = None;
        let (nh, hd, d) = (c.n_heads as i64, c.head_dim() as i64, c.dim as i64);
        let (bi, ti) = (b as i64, t as i64);
        let training = self.is_training() && cache.is_none();
        let p_attn = if training { c.dropout } else { 0.0 };

        // which keys each query sees, and each row's first position
        let (mask, offsets) = match &cache {
            Some(k) => {
                let (m, o) = k.visibility(t)?;
                (Some(m), o)
            }
            None => (None, vec![0; b]),
        };
        let rope = match &self.rotary {
            Some(r) if cache.is_some() => Some(r.row_tables(4, t, self.dtype(), &offsets)?),
            _ => None,
        };

        let mut x = self.tok_emb.forward(tokens)?;
        if let Some(pe) = &self.pos_emb {
            let pos = match &cache {
                None => pe.weight.tensor().narrow(0, 0, t)?,
                Some(k) => pe.forward(&k.positions(t)?)?,
            };
            x = x.add(&pos)?;
        }
        if training {
            x = self.dropout.forward(&x)?;
        }
        for (l, blk) in self.blocks.iter().enumerate() {
            let h = blk.attn_norm.module().forward(&x)?;
            // (B, T, 3, H, hd) → three (B, H, T, hd) views of one projection
            let qkv = blk.qkv.forward(&h)?.view(&[bi, ti, 3, nh, hd])?;
            let part = |i: i64| qkv.select(2, i)?.permute(&[0, 2, 1, 3]);
            let (mut q, mut k, v) = (part(0)?, part(1)?, part(2)?);
            if let Some(r) = &self.rotary {
                match &rope {
                    Some(tables) => {
                        q = r.apply_row_tables(&q, tables)?;
                        k = r.apply_row_tables(&k, tables)?;
                    }
                    None => {
                        q = r.apply(&q, 0)?;
                        k = r.apply(&k, 0)?;
                    }
                }
            }
            let a = match cache.as_deref_mut() {
                None => scaled_dot_product_attention(&q, &k, &v, None, p_attn, true, None, false)?,
                Some(kc) => {
                    let (keys, values) = kc.append(l, &k, &v)?;
                    scaled_dot_product_attention(
                        &q,
                        &keys,
                        &values,
                        mask.as_ref(),
                        0.0,
                        false,
                        None,
                        false,
                    )?
                }
            };
            let a = a.permute(&[0, 2, 1, 3])?.reshape(&[bi, ti, d])?;
            let mut a = blk.proj.forward(&a)?;
            if training {
                a = self.dropout.forward(&a)?;
            }
            x = x.add(&a)?;
            let h = blk.mlp_norm.module().forward(&x)?;
            let mut m = match &blk.mlp {
                FeedForward::SwiGlu { gate, up, down } => {
                    down.forward(&gate.forward(&h)?.swiglu(&up.forward(&h)?)?)?
                }
                FeedForward::Gelu { fc, proj } => proj.forward(&fc.forward(&h)?.gelu_tanh()?)?,
                FeedForward::Moe(moe) => {
                    let (y, r) = moe.run(&h)?;
                    router = Some(match router {
                        None => r,
                        Some(s) => RouterLosses {
                            aux: s.aux.add(&r.aux)?,
                            z: s.z.add(&r.z)?,
                        },
                    });
                    y
                }
            };
            if training {
                m = self.dropout.forward(&m)?;
            }
            x = x.add(&m)?;
        }
        let x = self.norm.module().forward(&x)?;
        let logits = match &self.lm_head {
            Some(h) => h.forward(&x)?,
            None => linear(&x, &self.tok_emb.weight.tensor(), None)?,
        };
        if let Some(k) = cache {
            k.len += t;
        }
        Ok((logits, router))
    }
}

impl Module for Gpt {
    /// The logits `(B, T, vocab)` of whole sequences `(B, T)` of i64 token ids, causal, from
    /// position 0.
    fn forward(&self, tokens: &Tensor) -> Result<Tensor> {
        Ok(self.run(tokens, None)?.0)
    }
    fn visit(&self, v: &mut dyn Visitor) {
        v.module("tok_emb", &self.tok_emb);
        if let Some(p) = &self.pos_emb {
            v.module("pos_emb", p);
        }
        for (i, b) in self.blocks.iter().enumerate() {
            v.module(&format!("blocks.{i}"), b);
        }
        v.module("norm", self.norm.module());
        if let Some(h) = &self.lm_head {
            v.module("lm_head", h);
        }
    }
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

impl CausalLm for Gpt {
    type Cache = LlamaCache;
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }
    fn context_len(&self) -> usize {
        self.config.context_len
    }
    fn device(&self) -> Device {
        Gpt::device(self)
    }
    fn new_cache(&self, left_pad: &[usize], capacity: usize) -> Result<LlamaCache> {
        let c = &self.config;
        LlamaCache::new(
            c.n_layers,
            left_pad,
            c.n_heads,
            capacity,
            c.context_len,
            c.head_dim(),
            self.dtype(),
            &self.device(),
        )
    }
    /// The next positions' logits in f32, in eval semantics (no dropout) whatever the mode.
    fn forward(&self, tokens: &Tensor, cache: &mut LlamaCache) -> Result<Tensor> {
        let c = &self.config;
        let op = "Gpt::forward";
        let (b, _) = self.check_tokens(op, tokens)?;
        if b != cache.batch() {
            return Err(invalid(
                op,
                format!("tokens have {b} rows but the cache {}", cache.batch()),
            ));
        }
        cache.check_call(
            op,
            tokens.shape()[1],
            c.n_layers,
            c.n_heads,
            c.head_dim(),
            self.dtype(),
            &self.device(),
        )?;
        self.run(tokens, Some(cache))?.0.to_dtype(DType::F32)
    }
}
