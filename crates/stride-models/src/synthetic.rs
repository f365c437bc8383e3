//! Seeded synthetic data of sparse features in superposition — the toy setting sparse
//! autoencoders are built for.
//!
//! A fixed random dictionary of `features` unit vectors in `dims` dimensions (`features >
//! dims`: more features than dimensions, so they cannot be orthogonal — superposition). Each
//! sample switches every feature on independently with probability `p`, gives each active
//! feature a magnitude uniform in `[0, 1)`, and sums the active features' directions:
//! `x = (active ⊙ magnitude) @ dictionary`. A sparse autoencoder with enough latents can learn
//! the dictionary back and reconstruct `x` from a few active latents.
//!
//! Everything is drawn from stride's counter-based [`Generator`], so a batch is a pure
//! function of the generator's `(seed, offset)`: saving that state in a checkpoint and
//! restoring it replays the same batches.
//!
//! ```
//! use stride_models::synthetic::{SyntheticConfig, SyntheticData};
//! use stride_core::{DType, Device};
//! let cfg = SyntheticConfig { dims: 8, features: 32, p: 0.1 };
//! let a = SyntheticData::new(&cfg, 7, DType::F32, Device::Cpu)?;
//! let b = SyntheticData::new(&cfg, 7, DType::F32, Device::Cpu)?;
//! let (xa, xb) = (a.batch(16)?, b.batch(16)?);
//! assert_eq!(xa.shape(), &[16, 8]);
//! assert_eq!(xa.to_vec::<f32>()?, xb.to_vec::<f32>()?); // same seed, same batches
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::invalid;
use stride_core::{DType, Device, Generator, GeneratorState, Result, Tensor};

/// The shape of the synthetic data.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticConfig {
    /// Dimension of each sample (`d`).
    pub dims: usize,
    /// Number of ground-truth features (directions in the dictionary); more than `dims`.
    pub features: usize,
    /// Probability that a feature is active in a sample.
    pub p: f64,
}

impl SyntheticConfig {
    /// Checks the sizes and the probability.
    pub fn validate(&self) -> Result<()> {
        let op = "synthetic data";
        if self.dims == 0 || self.features == 0 {
            return Err(invalid(
                op,
                format!(
                    "dims ({}) and features ({}) must be at least 1",
                    self.dims, self.features
                ),
            ));
        }
        if !(self.p > 0.0 && self.p <= 1.0) {
            return Err(invalid(
                op,
                format!("the feature probability must be in (0, 1], got {}", self.p),
            ));
        }
        Ok(())
    }
}

/// Mixes a seed with a stream number, so that the model's initialisation, the dictionary, the
/// training batches and the evaluation batch come from independent Philox streams of one seed.
pub fn derive_seed(seed: u64, stream: u64) -> u64 {
    // splitmix64 of seed + stream·golden ratio
    let mut z = seed.wrapping_add(stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The stream numbers of [`derive_seed`] used by this crate.
pub mod streams {
    /// The model's initial weights.
    pub const INIT: u64 = 1;
    /// The synthetic data's dictionary.
    pub const DICTIONARY: u64 = 2;
    /// Training batches.
    pub const TRAIN: u64 = 3;
    /// The held-out evaluation batch.
    pub const EVAL: u64 = 4;
    /// Dropout masks (the default generator is seeded from it).
    pub const DROPOUT: u64 = 5;
}

/// A generator of batches: the fixed dictionary and the batch generator.
pub struct SyntheticData {
    config: SyntheticConfig,
    /// `(features, dims)`, rows of unit norm.
    dictionary: Tensor,
    generator: Generator,
    dtype: DType,
}

impl SyntheticData {
    /// The dictionary drawn from `seed`'s dictionary stream and batches from its training
    /// stream, in `dtype` on `device`.
    pub fn new(
        config: &SyntheticConfig,
        seed: u64,
        dtype: DType,
        device: Device,
    ) -> Result<SyntheticData> {
        config.validate()?;
        if !dtype.is_float() {
            return Err(invalid(
                "synthetic data",
                format!("the data must have a floating-point dtype, got {dtype}"),
            ));
        }
        let g = Generator::new(derive_seed(seed, streams::DICTIONARY));
        // drawn in f32 whatever the dtype, so every dtype sees the same features
        let raw = Tensor::randn(
            [config.features, config.dims],
            DType::F32,
            &device,
            Some(&g),
        )?;
        let dictionary = raw.div(&raw.norm(2.0, &[1], true)?)?;
        Ok(SyntheticData {
            config: config.clone(),
            dictionary,
            generator: Generator::new(derive_seed(seed, streams::TRAIN)),
            dtype,
        })
    }

    pub fn config(&self) -> &SyntheticConfig {
        &self.config
    }
    /// The ground-truth feature directions, `(features, dims)`, f32.
    pub fn dictionary(&self) -> &Tensor {
        &self.dictionary
    }
    /// The batch generator (its state is what a checkpoint saves).
    pub fn generator(&self) -> &Generator {
        &self.generator
    }
    pub fn state(&self) -> GeneratorState {
        self.generator.get_state()
    }
    pub fn set_state(&self, s: GeneratorState) {
        self.generator.set_state(s)
    }

    /// The next training batch, `(batch, dims)`.
    pub fn batch(&self, batch: usize) -> Result<Tensor> {
        self.batch_from(batch, &self.generator)
    }

    /// A batch drawn from `g` (for held-out data that must not move the training stream).
    pub fn batch_from(&self, batch: usize, g: &Generator) -> Result<Tensor> {
        let (f, dev) = (self.config.features, self.dictionary.device());
        let active =
            Tensor::bernoulli_scalar([batch, f], self.config.p, DType::F32, &dev, Some(g))?;
        let magnitude = Tensor::rand([batch, f], DType::F32, &dev, Some(g))?;
        let x = active.mul(&magnitude)?.matmul(&self.dictionary)?;
        if self.dtype == DType::F32 {
            Ok(x)
        } else {
            x.to_dtype(self.dtype)
        }
    }
}
