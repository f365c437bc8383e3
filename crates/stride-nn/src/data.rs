//! Data loading helpers for training: [`DistributedSampler`], PyTorch's
//! `torch.utils.data.DistributedSampler`.
//!
//! In data-parallel training (see [`crate::DistributedDataParallel`]) every rank must see a
//! different share of the dataset, and all ranks must agree on how the dataset was split. A
//! [`DistributedSampler`] gives rank `r` of `R` the dataset indices
//! `padded[r], padded[r + R], padded[r + 2R], …` of one epoch's order, where the order is
//! `0..len` (`shuffle == false`) or a permutation that depends only on `seed + epoch` — so
//! every rank computes the same permutation without communicating, and each takes its own
//! strided slice of it.
//!
//! Everything but the permutation follows PyTorch exactly (the per-rank count, the padding,
//! the trimming with `drop_last`, the strided split, `seed + epoch`); the permutation is
//! stride's own `randperm` (see [`DistributedSampler`]), not the one PyTorch's CPU generator
//! would give.
//!
//! ```
//! use stride_nn::DistributedSampler;
//! // 10 samples over 3 ranks, in order: rank 1's share, padded from the start to 4 each
//! let s = DistributedSampler::new(10, 3, 1)?.with_shuffle(false);
//! assert_eq!((s.len(), s.total_size()), (4, 12));
//! assert_eq!(s.indices()?, vec![1, 4, 7, 0]);
//! // dropping the tail instead: 3 each, the last sample unused
//! let s = s.with_drop_last(true);
//! assert_eq!(s.indices()?, vec![1, 4, 7]);
//!
//! // shuffled (the default): a new order every epoch, the same on every rank
//! let mut s = DistributedSampler::new(10, 3, 1)?.with_seed(42);
//! for epoch in 0..3 {
//!     s.set_epoch(epoch);
//!     for batch in s.indices()?.chunks(2) {
//!         // load the samples `batch` names and train on them
//!         assert!(batch.iter().all(|&i| i < 10));
//!     }
//! }
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::invalid;
use stride_core::distributed::ProcessGroup;
use stride_core::{DType, Device, Error, Generator, Result, Tensor};

/// The indices of one rank's share of a dataset, epoch by epoch (PyTorch's
/// `torch.utils.data.DistributedSampler`, over a dataset of `len` samples).
///
/// For `len` samples on `R = num_replicas` ranks:
///
/// - each rank gets [`len`](Self::len) `= ⌈len / R⌉` indices, or `⌊len / R⌋` with
///   `drop_last` (PyTorch writes it `ceil((len − R) / R)` when `len % R != 0`: the same
///   number, computed here exactly in integers where PyTorch goes through a float);
/// - one epoch's order is `0..len`, or with `shuffle` (the default) a permutation seeded by
///   `seed + epoch` (wrapping);
/// - without `drop_last` the order is padded to [`total_size`](Self::total_size) `= len() · R`
///   by repeating it from its start (several times over, where the padding is longer than the
///   dataset); with `drop_last` it is cut to `total_size` (at most `R − 1` samples unused);
/// - rank `r` gets the positions `r, r + R, r + 2R, … < total_size` of that list, in order.
///
/// So all ranks together hold every index (once each when `len % R == 0`; otherwise, without
/// `drop_last`, `total_size − len` of them twice), and they agree on the permutation because
/// it is a function of `seed + epoch` only: make the sampler with the same `len`, `seed`,
/// `shuffle` and `drop_last` on every rank, and call [`set_epoch`](Self::set_epoch) with the
/// same epoch on every rank before each epoch (as in PyTorch, forgetting it gives the same
/// order every epoch).
///
/// # The permutation (deviation from PyTorch)
///
/// PyTorch draws `torch.randperm(len, generator=g)` with `g.manual_seed(seed + epoch)` on its
/// CPU (Mersenne Twister) generator; that stream is not reproduced, so a shuffled epoch's order
/// differs from PyTorch's. Here it is stride's `randperm` on a fresh generator of seed
/// `seed.wrapping_add(epoch)`:
/// `Tensor::randperm(len, DType::I64, &Device::Cpu, Some(&Generator::new(seed.wrapping_add(epoch))))`.
/// It is the same on every machine,
/// device and thread count, and never touches the default generator. Without `shuffle` the
/// indices are PyTorch's exactly.
///
/// # Sizes
///
/// Counts are exact for every `usize` (no float rounding, no overflow); a `len` whose padded
/// size `⌈len / R⌉ · R` does not fit a `usize` is refused by [`new`](Self::new), whatever
/// `drop_last`. [`indices`](Self::indices) allocates the rank's share (and, when shuffling,
/// the permutation of the whole dataset); a size that can't be allocated is
/// an [`Error::OutOfMemory`], never a panic.
///
/// ```
/// use stride_core::distributed::run_threads;
/// use stride_core::Device;
/// use stride_nn::DistributedSampler;
/// // two ranks (threads here; processes in a real run): each takes its share of 6 samples
/// let shares = run_threads(&[Device::Cpu, Device::Cpu], |group| {
///     let mut s = DistributedSampler::for_group(6, &group)?.with_seed(7);
///     s.set_epoch(3);
///     s.indices()
/// });
/// let mut all: Vec<usize> = shares.into_iter().collect::<Result<Vec<_>, _>>()?.concat();
/// all.sort();
/// assert_eq!(all, vec![0, 1, 2, 3, 4, 5]); // disjoint, and together the whole dataset
/// # Ok::<(), stride_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DistributedSampler {
    dataset_len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    epoch: u64,
}

impl DistributedSampler {
    /// The sampler of rank `rank` of `num_replicas` over a dataset of `len` samples, with
    /// PyTorch's defaults: `shuffle = true`, `seed = 0`, `drop_last = false`, epoch 0.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] when `num_replicas` is 0, when `rank >= num_replicas` (PyTorch's
    /// `ValueError`), or when `⌈len / num_replicas⌉ · num_replicas` overflows `usize`.
    pub fn new(len: usize, num_replicas: usize, rank: usize) -> Result<DistributedSampler> {
        let op = "DistributedSampler::new";
        if num_replicas == 0 {
            return Err(invalid(op, "num_replicas must be at least 1, got 0"));
        }
        if rank >= num_replicas {
            return Err(invalid(
                op,
                format!(
                    "invalid rank {rank}, rank should be in the interval [0, {}]",
                    num_replicas - 1
                ),
            ));
        }
        if len
            .div_ceil(num_replicas)
            .checked_mul(num_replicas)
            .is_none()
        {
            return Err(invalid(
                op,
                format!(
                    "a dataset of {len} samples padded to a multiple of num_replicas = \
                     {num_replicas} has more than usize::MAX samples"
                ),
            ));
        }
        Ok(DistributedSampler {
            dataset_len: len,
            num_replicas,
            rank,
            shuffle: true,
            seed: 0,
            drop_last: false,
            epoch: 0,
        })
    }

    /// The sampler of this process's rank in `group` (its [`rank`](ProcessGroup::rank) of
    /// [`world_size`](ProcessGroup::world_size)), as PyTorch does when `num_replicas` and
    /// `rank` are not given. Errors as [`new`](Self::new).
    pub fn for_group(len: usize, group: &ProcessGroup) -> Result<DistributedSampler> {
        DistributedSampler::new(len, group.world_size(), group.rank())
    }

    /// Shuffle each epoch (`true`, the default) or keep the dataset's order.
    #[must_use]
    pub fn with_shuffle(mut self, shuffle: bool) -> DistributedSampler {
        self.shuffle = shuffle;
        self
    }

    /// The seed of the shuffle (default 0); it must be the same on every rank.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> DistributedSampler {
        self.seed = seed;
        self
    }

    /// Drop the tail of the dataset so that it splits evenly (`true`), or pad it by repeating
    /// samples (`false`, the default).
    #[must_use]
    pub fn with_drop_last(mut self, drop_last: bool) -> DistributedSampler {
        self.drop_last = drop_last;
        self
    }

    /// Sets the epoch, which with the seed picks the permutation (PyTorch's `set_epoch`):
    /// call it at the start of every epoch, with the same value on every rank.
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// The number of indices this rank gets per epoch (PyTorch's `num_samples`, and
    /// `len(sampler)`).
    pub fn len(&self) -> usize {
        let (n, r) = (self.dataset_len, self.num_replicas);
        if self.drop_last {
            // PyTorch's ceil((n - r) / r) when n % r != 0, ceil(n / r) otherwise: both ⌊n / r⌋
            n / r
        } else {
            n.div_ceil(r)
        }
    }

    /// Whether this rank gets no index at all (an empty dataset, or with `drop_last` fewer
    /// samples than ranks).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of indices over all ranks, [`len`](Self::len) `· num_replicas` (PyTorch's
    /// `total_size`).
    pub fn total_size(&self) -> usize {
        // fits: `new` checked ⌈n / r⌉ · r, and ⌊n / r⌋ · r ≤ n
        self.len() * self.num_replicas
    }

    /// The size of the dataset.
    pub fn dataset_len(&self) -> usize {
        self.dataset_len
    }

    /// The number of ranks.
    pub fn num_replicas(&self) -> usize {
        self.num_replicas
    }

    /// This sampler's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Whether each epoch is shuffled.
    pub fn shuffle(&self) -> bool {
        self.shuffle
    }

    /// The seed of the shuffle.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Whether the tail is dropped rather than padded.
    pub fn drop_last(&self) -> bool {
        self.drop_last
    }

    /// The epoch last set by [`set_epoch`](Self::set_epoch) (0 at first).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This rank's indices for the current epoch, in order: [`len`](Self::len) of them, each
    /// in `0..dataset_len` (PyTorch's `list(iter(sampler))`).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] when the indices (or, with `shuffle`, the permutation of the
    /// whole dataset) can't be allocated.
    pub fn indices(&self) -> Result<Vec<usize>> {
        let op = "DistributedSampler::indices";
        let (n, r) = (self.dataset_len, self.num_replicas);
        let count = self.len();
        // position j of this rank is rank + j·r < total_size of the padded (or cut) order, and
        // position p of that is order[p % n] (padding repeats the order from its start)
        let positions = (0..count).map(|j| (self.rank + j * r) % n);
        let mut out = try_vec::<usize>(count, op, n)?;
        if !self.shuffle {
            out.extend(positions);
            return Ok(out);
        }
        let perm = permutation(n, self.seed.wrapping_add(self.epoch))?;
        out.extend(positions.map(|p| perm[p] as usize));
        Ok(out)
    }
}

/// `0..n` in stride's `randperm` order for a fresh generator of `seed`.
fn permutation(n: usize, seed: u64) -> Result<Vec<i64>> {
    let g = Generator::new(seed);
    Tensor::randperm(n, DType::I64, &Device::Cpu, Some(&g))?.to_vec::<i64>()
}

/// An empty `Vec` with room for `len` elements, or `OutOfMemory` naming the dataset size.
fn try_vec<T>(len: usize, op: &'static str, dataset_len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    if v.try_reserve_exact(len).is_err() {
        let requested = len as u128 * std::mem::size_of::<T>() as u128;
        let detail = if requested > isize::MAX as u128 {
            "more than the address space can hold"
        } else {
            "the host allocator refused"
        };
        return Err(Error::OutOfMemory {
            op,
            device: Device::Cpu,
            shape: vec![len],
            dtype: None,
            requested,
            detail: format!("{detail}; the sampler's dataset has {dataset_len} samples"),
        });
    }
    Ok(v)
}
