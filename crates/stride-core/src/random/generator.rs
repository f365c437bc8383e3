//! `Generator`: a seed and an offset into its Philox stream — the whole state. Drawing `k`
//! words returns the current `(seed, offset)` and advances the offset by `k`, atomically, so
//! concurrent draws from one generator get disjoint parts of the stream.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The complete, portable state of a [`Generator`]: restoring it replays the same numbers on
/// any device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GeneratorState {
    /// The Philox key.
    pub seed: u64,
    /// The next unused 32-bit word of the stream.
    pub offset: u64,
}

/// A seeded random number generator (Philox4x32-10, counter based).
///
/// Cloning shares the generator (like a Python reference): draws through either clone advance
/// the same offset. It is `Send + Sync`; draws are serialised by a lock held only while the
/// offset advances, so the numbers of each draw never depend on timing.
///
/// ```
/// use stride_core::{DType, Device, Generator, Tensor};
/// let g = Generator::new(42);
/// let a = Tensor::rand([3], DType::F32, &Device::Cpu, Some(&g))?;
/// g.manual_seed(42);
/// let b = Tensor::rand([3], DType::F32, &Device::Cpu, Some(&g))?;
/// assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
/// # Ok::<(), stride_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Generator(Arc<Mutex<GeneratorState>>);

/// The seed of the default generator at start-up (PyTorch's default CPU seed).
pub const DEFAULT_SEED: u64 = 67_280_421_310_721;

impl Generator {
    /// A generator at the start (offset 0) of the stream of `seed`.
    pub fn new(seed: u64) -> Generator {
        Generator(Arc::new(Mutex::new(GeneratorState { seed, offset: 0 })))
    }
    fn lock(&self) -> MutexGuard<'_, GeneratorState> {
        // the state is two integers, always consistent: a panic elsewhere can't corrupt it
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Restarts at the beginning of the stream of `seed`.
    pub fn manual_seed(&self, seed: u64) -> &Generator {
        *self.lock() = GeneratorState { seed, offset: 0 };
        self
    }
    /// Reseeds from a non-deterministic source and returns the new seed (PyTorch's
    /// `Generator.seed()`).
    pub fn seed(&self) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        let s = h.finish();
        self.manual_seed(s);
        s
    }
    /// The seed this generator was last seeded with.
    pub fn initial_seed(&self) -> u64 {
        self.lock().seed
    }
    /// The current `(seed, offset)`.
    pub fn get_state(&self) -> GeneratorState {
        *self.lock()
    }
    /// Restores a state from [`Generator::get_state`].
    pub fn set_state(&self, state: GeneratorState) {
        *self.lock() = state;
    }
    /// Takes `words` words of the stream: returns where they start and advances past them.
    pub(crate) fn reserve(&self, words: u64) -> GeneratorState {
        let mut s = self.lock();
        let at = *s;
        s.offset = s.offset.wrapping_add(words);
        at
    }
}

/// The process-wide default generator, used when an op is given no generator.
pub fn default_generator() -> &'static Generator {
    static DEFAULT: OnceLock<Generator> = OnceLock::new();
    DEFAULT.get_or_init(|| Generator::new(DEFAULT_SEED))
}

/// Seeds the default generator (PyTorch's `torch.manual_seed`): every later draw that is given
/// no generator replays the same numbers.
pub fn manual_seed(seed: u64) {
    default_generator().manual_seed(seed);
}

/// `gen`, or the default generator.
pub(crate) fn or_default(gen: Option<&Generator>) -> &Generator {
    gen.unwrap_or_else(|| default_generator())
}
