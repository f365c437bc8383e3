//! The TopK sparse autoencoder with a tied initialisation.
//!
//! ```text
//! pre  = (x − b_dec) @ W_enc.T + b_enc            encoder: Linear(dims → latents)
//! acts = ReLU(pre) on the k largest entries of each row of `pre`, 0 elsewhere
//! x̂    = acts @ W_dec.T + b_dec                   decoder: Linear(latents → dims)
//! loss = mean((x̂ − x)²)
//! ```
//!
//! The gradient flows through the kept pre-activations only (the TopK mask is a constant of
//! the forward pass, like PyTorch's `topk` + `scatter`).
//!
//! **Tied initialisation.** The decoder's weight `(dims, latents)` is drawn with PyTorch's
//! `nn.Linear` initialisation and its columns (one direction per latent) scaled to unit norm;
//! the encoder's weight is `decoder.weight.t()?.clone_tensor()?` (PyTorch's `.t().clone()`; the
//! Rust `.clone()` would share storage) — and `clone_tensor` keeps the transposed strides, so
//! the encoder weight is **not contiguous** (strides `(1, latents)`). That is the weight
//! PyTorch's Apple-GPU backend silently froze under Adam before 2.4; stride trains it
//! exactly as the contiguous copy that [`SaeConfig::contiguous_encoder`] asks for.
//!
//! ```
//! use stride_models::sae::{SaeConfig, TopKSae};
//! use stride_nn::Module;
//! use stride_core::{DType, Device, Generator, Tensor};
//! let cfg = SaeConfig { dims: 8, latents: 32, k: 4, ..SaeConfig::default() };
//! let sae = TopKSae::new(&cfg, &Generator::new(0))?;
//! let names: Vec<String> = sae.named_parameters().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias"]);
//! assert!(!sae.encoder.weight.tensor().is_contiguous());          // the tied, transposed clone
//! let x = Tensor::randn([5, 8], DType::F32, &Device::Cpu, Some(&Generator::new(1)))?;
//! let (x_hat, acts) = sae.forward_with_acts(&x)?;
//! assert_eq!(x_hat.shape(), &[5, 8]);
//! let active = acts.gt(0.0)?.sum_dims(&[1], false)?.to_vec::<i64>()?;
//! assert!(active.iter().all(|&n| n <= 4));                         // at most k per row
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::invalid;
use stride_core::autograd::no_grad;
use stride_core::{DType, Device, Generator, MemoryFormat, Result, Tensor};
use stride_nn::init::{self, FanMode, Nonlinearity};
use stride_nn::{loss, Linear, Mode, Module, Visitor};

/// The architecture of a [`TopKSae`].
#[derive(Debug, Clone, PartialEq)]
pub struct SaeConfig {
    /// Input dimension `d`.
    pub dims: usize,
    /// Number of latents (dictionary size of the autoencoder).
    pub latents: usize,
    /// Latents kept per sample.
    pub k: usize,
    /// Initialise the encoder weight as a contiguous copy of the decoder's transpose instead
    /// of `clone_tensor()` (which keeps the transposed strides).
    pub contiguous_encoder: bool,
    pub dtype: DType,
    pub device: Device,
}

impl Default for SaeConfig {
    fn default() -> Self {
        SaeConfig {
            dims: 64,
            latents: 512,
            k: 16,
            contiguous_encoder: false,
            dtype: DType::F32,
            device: Device::Cpu,
        }
    }
}

impl SaeConfig {
    /// Checks the sizes (`0 < k ≤ latents`, `dims ≥ 1`) and the dtype.
    pub fn validate(&self) -> Result<()> {
        let op = "TopKSae";
        if self.dims == 0 || self.latents == 0 {
            return Err(invalid(
                op,
                format!(
                    "dims ({}) and latents ({}) must be at least 1",
                    self.dims, self.latents
                ),
            ));
        }
        if self.k == 0 || self.k > self.latents {
            return Err(invalid(
                op,
                format!(
                    "k must be between 1 and the number of latents ({}), got {}",
                    self.latents, self.k
                ),
            ));
        }
        if !self.dtype.is_float() {
            return Err(invalid(
                op,
                format!(
                    "the model must have a floating-point dtype, got {}",
                    self.dtype
                ),
            ));
        }
        Ok(())
    }
}

/// A TopK sparse autoencoder (see the [module docs](self)).
pub struct TopKSae {
    /// `Linear(dims → latents)`: `encoder.weight` `(latents, dims)`, `encoder.bias` = `b_enc`.
    pub encoder: Linear,
    /// `Linear(latents → dims)`: `decoder.weight` `(dims, latents)`, `decoder.bias` = `b_dec`.
    pub decoder: Linear,
    pub k: usize,
    mode: Mode,
}

impl TopKSae {
    /// A new autoencoder with the tied initialisation, drawing from `gen`.
    pub fn new(cfg: &SaeConfig, gen: &Generator) -> Result<TopKSae> {
        cfg.validate()?;
        let _ng = no_grad();
        let (d, n, dev) = (cfg.dims, cfg.latents, cfg.device);
        // nn.Linear(latents, dims)'s weight init, drawn in f32 so that every dtype starts from
        // the same numbers (rounded)
        let w = Tensor::zeros([d, n], DType::F32, &dev)?;
        init::kaiming_uniform_(
            &w,
            5f64.sqrt(),
            FanMode::FanIn,
            Nonlinearity::LeakyRelu,
            Some(gen),
        )?;
        let w_dec = w.div(&w.norm(2.0, &[0], true)?)?.to_dtype(cfg.dtype)?;
        let w_enc = if cfg.contiguous_encoder {
            w_dec.t()?.contiguous()?
        } else {
            w_dec.t()?.clone_tensor()? // keeps strides (1, latents): non-contiguous
        };
        let b_enc = Tensor::zeros([n], cfg.dtype, &dev)?;
        let b_dec = Tensor::zeros([d], cfg.dtype, &dev)?;
        Ok(TopKSae {
            encoder: Linear::from_tensors(w_enc, Some(b_enc))?,
            decoder: Linear::from_tensors(w_dec, Some(b_dec))?,
            k: cfg.k,
            mode: Mode::default(),
        })
    }

    /// `b_dec`, the decoder's bias (subtracted before encoding, added back after decoding).
    pub fn b_dec(&self) -> Result<Tensor> {
        self.decoder
            .bias
            .as_ref()
            .map(|b| b.tensor())
            .ok_or_else(|| invalid("TopKSae", "the decoder has no bias (b_dec)"))
    }

    /// The encoder's pre-activations `(x − b_dec) @ W_enc.T + b_enc`, `(batch, latents)`.
    pub fn pre_activations(&self, x: &Tensor) -> Result<Tensor> {
        self.encoder.forward(&x.sub(&self.b_dec()?)?)
    }

    /// TopK: the `k` largest entries of each row of `pre`, ReLU'd, zeros elsewhere. The
    /// gradient flows through the kept entries.
    pub fn topk(&self, pre: &Tensor) -> Result<Tensor> {
        let mask = {
            let _ng = no_grad();
            let (_, idx) = pre.topk(self.k, -1, true, false)?;
            pre.zeros_like(MemoryFormat::Contiguous)?
                .scatter_value_(-1, &idx, 1.0)?
        };
        pre.relu()?.mul(&mask)
    }

    /// The latent activations `(batch, latents)`: at most `k` non-zero per row.
    pub fn encode(&self, x: &Tensor) -> Result<Tensor> {
        self.topk(&self.pre_activations(x)?)
    }

    /// The reconstruction from latent activations.
    pub fn decode(&self, acts: &Tensor) -> Result<Tensor> {
        self.decoder.forward(acts)
    }

    /// The reconstruction and the latent activations.
    pub fn forward_with_acts(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        if x.dim() != 2 || x.shape()[1] != self.dims() {
            return Err(invalid(
                "TopKSae::forward",
                format!(
                    "expects a (batch, {}) input, got shape {:?}",
                    self.dims(),
                    x.shape()
                ),
            ));
        }
        let acts = self.encode(x)?;
        Ok((self.decode(&acts)?, acts))
    }

    /// The mean squared reconstruction error and the latent activations.
    pub fn loss(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let (x_hat, acts) = self.forward_with_acts(x)?;
        Ok((loss::mse_loss(&x_hat, x, loss::Reduction::Mean)?, acts))
    }

    pub fn dims(&self) -> usize {
        self.decoder.weight.shape()[0]
    }
    pub fn latents(&self) -> usize {
        self.decoder.weight.shape()[1]
    }
}

impl Module for TopKSae {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward_with_acts(x)?.0)
    }
    fn visit(&self, v: &mut dyn Visitor) {
        v.module("encoder", &self.encoder);
        v.module("decoder", &self.decoder);
    }
    fn mode(&self) -> &Mode {
        &self.mode
    }
}
