//! `DistributedSampler` against PyTorch's `torch.utils.data.DistributedSampler`.
//!
//! The expected indices come from two places: literal vectors worked out by hand from
//! PyTorch's `__init__`/`__iter__` (torch/utils/data/distributed.py), and `pytorch_iter`
//! below, a line-by-line transliteration of that code (floats and list slicing included) fed
//! with the same epoch order the sampler uses — `0..len`, or stride's `randperm` seeded by
//! `seed + epoch`. The permutation is the one documented deviation, so with it fixed every
//! index must agree exactly.

use proptest::prelude::*;
use std::collections::HashMap;
use stride_core::distributed::run_threads;
use stride_core::{DType, Device, Error, Generator, Tensor};
use stride_nn::DistributedSampler;

/// PyTorch's `__init__` + `__iter__`, transliterated: `order` is the epoch's order
/// (`randperm(...).tolist()` or `list(range(len))`).
fn pytorch_iter(order: &[usize], num_replicas: usize, rank: usize, drop_last: bool) -> Vec<usize> {
    let len = order.len();
    let num_samples = if drop_last && !len.is_multiple_of(num_replicas) {
        // math.ceil((len(self.dataset) - self.num_replicas) / self.num_replicas)
        ((len as f64 - num_replicas as f64) / num_replicas as f64).ceil() as usize
    } else {
        // math.ceil(len(self.dataset) / self.num_replicas)
        (len as f64 / num_replicas as f64).ceil() as usize
    };
    let total_size = num_samples * num_replicas;
    let mut indices = order.to_vec();
    if !drop_last {
        let padding_size = total_size - indices.len();
        if padding_size <= indices.len() {
            let head = indices[..padding_size].to_vec();
            indices.extend(head);
        } else {
            // (indices * math.ceil(padding_size / len(indices)))[:padding_size]
            let times = (padding_size as f64 / indices.len() as f64).ceil() as usize;
            let rep: Vec<usize> = indices.repeat(times);
            indices.extend_from_slice(&rep[..padding_size]);
        }
    } else {
        indices.truncate(total_size);
    }
    assert_eq!(indices.len(), total_size);
    // indices[self.rank:self.total_size:self.num_replicas]
    let out: Vec<usize> = indices[rank.min(total_size)..total_size]
        .iter()
        .step_by(num_replicas)
        .copied()
        .collect();
    assert_eq!(out.len(), num_samples);
    out
}

/// stride's `randperm(len)` on a fresh generator of `seed`: the documented shuffle.
fn randperm(len: usize, seed: u64) -> Vec<usize> {
    let g = Generator::new(seed);
    Tensor::randperm(len, DType::I64, &Device::Cpu, Some(&g))
        .unwrap()
        .to_vec::<i64>()
        .unwrap()
        .into_iter()
        .map(|i| i as usize)
        .collect()
}

fn sampler(
    len: usize,
    r: usize,
    rank: usize,
    shuffle: bool,
    drop_last: bool,
) -> DistributedSampler {
    DistributedSampler::new(len, r, rank)
        .unwrap()
        .with_shuffle(shuffle)
        .with_drop_last(drop_last)
}

/// Every rank's indices, in rank order.
fn all_ranks(
    len: usize,
    r: usize,
    shuffle: bool,
    drop_last: bool,
    seed: u64,
    epoch: u64,
) -> Vec<Vec<usize>> {
    (0..r)
        .map(|rank| {
            let mut s = sampler(len, r, rank, shuffle, drop_last).with_seed(seed);
            s.set_epoch(epoch);
            s.indices().unwrap()
        })
        .collect()
}

/// The global list the ranks' shares interleave back into (`padded[rank + j·R]`).
fn interleave(shares: &[Vec<usize>]) -> Vec<usize> {
    let r = shares.len();
    let n = shares[0].len();
    let mut out = vec![usize::MAX; n * r];
    for (rank, share) in shares.iter().enumerate() {
        assert_eq!(share.len(), n, "rank {rank} has a different count");
        for (j, &i) in share.iter().enumerate() {
            out[rank + j * r] = i;
        }
    }
    out
}

fn counts(xs: impl IntoIterator<Item = usize>) -> HashMap<usize, usize> {
    let mut m = HashMap::new();
    for x in xs {
        *m.entry(x).or_insert(0) += 1;
    }
    m
}

#[test]
fn defaults_are_pytorchs() {
    let s = DistributedSampler::new(10, 3, 2).unwrap();
    assert!(s.shuffle());
    assert_eq!(s.seed(), 0);
    assert!(!s.drop_last());
    assert_eq!(s.epoch(), 0);
    assert_eq!((s.dataset_len(), s.num_replicas(), s.rank()), (10, 3, 2));
}

#[test]
fn no_shuffle_len10_replicas3_is_pytorchs() {
    let want = [vec![0, 3, 6, 9], vec![1, 4, 7, 0], vec![2, 5, 8, 1]];
    for (rank, w) in want.iter().enumerate() {
        let s = sampler(10, 3, rank, false, false);
        assert_eq!((s.len(), s.total_size()), (4, 12));
        assert_eq!(&s.indices().unwrap(), w, "rank {rank}");
    }
}

#[test]
fn drop_last_len10_replicas3_is_pytorchs() {
    let want = [vec![0, 3, 6], vec![1, 4, 7], vec![2, 5, 8]];
    for (rank, w) in want.iter().enumerate() {
        let s = sampler(10, 3, rank, false, true);
        assert_eq!((s.len(), s.total_size()), (3, 9));
        assert_eq!(&s.indices().unwrap(), w, "rank {rank}");
    }
}

#[test]
fn known_pytorch_answers_without_shuffle() {
    // (len, replicas, drop_last, every rank's indices) — by hand from PyTorch's code
    #[allow(clippy::type_complexity)]
    let cases: &[(usize, usize, bool, &[&[usize]])] = &[
        // divisible: drop_last changes nothing
        (6, 3, false, &[&[0, 3], &[1, 4], &[2, 5]]),
        (6, 3, true, &[&[0, 3], &[1, 4], &[2, 5]]),
        // ceil((7 - 3) / 3) = 2 with drop_last; 3 with padding [0, 1]
        (7, 3, true, &[&[0, 3], &[1, 4], &[2, 5]]),
        (7, 3, false, &[&[0, 3, 6], &[1, 4, 0], &[2, 5, 1]]),
        // padding (3) longer than the dataset (2): (indices * 2)[:3] = [0, 1, 0]
        (2, 5, false, &[&[0], &[1], &[0], &[1], &[0]]),
        // ceil((2 - 5) / 5) = ceil(-0.6) = 0: nobody gets anything
        (2, 5, true, &[&[], &[], &[], &[], &[]]),
        (1, 4, false, &[&[0], &[0], &[0], &[0]]),
        (1, 4, true, &[&[], &[], &[], &[]]),
        // an empty dataset: ceil(0 / 3) = 0
        (0, 3, false, &[&[], &[], &[]]),
        (0, 3, true, &[&[], &[], &[]]),
        // one replica: everything, in order
        (5, 1, false, &[&[0, 1, 2, 3, 4]]),
        (5, 1, true, &[&[0, 1, 2, 3, 4]]),
        // 5 samples on 4 ranks: pad 3 -> [0..5, 0, 1, 2]
        (5, 4, false, &[&[0, 4], &[1, 0], &[2, 1], &[3, 2]]),
        (5, 4, true, &[&[0], &[1], &[2], &[3]]),
    ];
    for &(len, r, drop_last, want) in cases {
        for (rank, w) in want.iter().enumerate() {
            let s = sampler(len, r, rank, false, drop_last);
            let got = s.indices().unwrap();
            assert_eq!(
                &got, w,
                "len {len} replicas {r} drop_last {drop_last} rank {rank}"
            );
            assert_eq!(s.len(), w.len());
            assert_eq!(s.is_empty(), w.is_empty());
            assert_eq!(
                got,
                pytorch_iter(&(0..len).collect::<Vec<_>>(), r, rank, drop_last)
            );
        }
    }
}

#[test]
fn shuffle_is_strides_randperm_of_seed_plus_epoch() {
    for (len, seed, epoch) in [(1, 0, 0), (17, 0, 0), (100, 5, 3), (1000, 123, 7)] {
        let mut s = DistributedSampler::new(len, 1, 0).unwrap().with_seed(seed);
        s.set_epoch(epoch);
        assert_eq!(
            s.indices().unwrap(),
            randperm(len, seed + epoch),
            "len {len}"
        );
    }
    // as in PyTorch, only the sum matters
    let mut a = DistributedSampler::new(50, 2, 1).unwrap().with_seed(3);
    a.set_epoch(4);
    let mut b = DistributedSampler::new(50, 2, 1).unwrap().with_seed(7);
    b.set_epoch(0);
    assert_eq!(a.indices().unwrap(), b.indices().unwrap());
    // the sum wraps instead of overflowing
    let mut w = DistributedSampler::new(20, 1, 0)
        .unwrap()
        .with_seed(u64::MAX);
    w.set_epoch(2);
    assert_eq!(w.indices().unwrap(), randperm(20, 1));
}

#[test]
fn shuffle_leaves_the_default_generator_alone() {
    stride_core::manual_seed(11);
    let before = stride_core::default_generator().get_state();
    DistributedSampler::new(100, 4, 2)
        .unwrap()
        .indices()
        .unwrap();
    assert_eq!(stride_core::default_generator().get_state(), before);
}

#[test]
fn ranks_agree_on_the_permutation() {
    for (len, r) in [(10, 3), (64, 8), (7, 4), (3, 5), (101, 7)] {
        for drop_last in [false, true] {
            let shares = all_ranks(len, r, true, drop_last, 42, 5);
            let global = interleave(&shares);
            // the interleaved shares are one permutation, padded from its start or cut
            let perm = randperm(len, 47);
            let want: Vec<usize> = (0..global.len()).map(|p| perm[p % len]).collect();
            assert_eq!(global, want, "len {len} replicas {r} drop_last {drop_last}");
            // and recomputing a rank gives the same share
            assert_eq!(shares, all_ranks(len, r, true, drop_last, 42, 5));
        }
    }
}

#[test]
fn ranks_of_a_process_group_agree() {
    let shares = run_threads(&[Device::Cpu, Device::Cpu, Device::Cpu], |g| {
        let mut s = DistributedSampler::for_group(10, &g)?.with_seed(9);
        assert_eq!((s.rank(), s.num_replicas()), (g.rank(), 3));
        s.set_epoch(2);
        s.indices()
    });
    let shares: Vec<Vec<usize>> = shares.into_iter().map(|s| s.unwrap()).collect();
    assert_eq!(shares, all_ranks(10, 3, true, false, 9, 2));
    let perm = randperm(10, 11);
    let want: Vec<usize> = (0..12).map(|p| perm[p % 10]).collect();
    assert_eq!(interleave(&shares), want);
}

#[test]
fn a_new_epoch_gives_a_new_order() {
    let mut s = DistributedSampler::new(100, 4, 1).unwrap().with_seed(1);
    let orders: Vec<Vec<usize>> = (0..6)
        .map(|e| {
            s.set_epoch(e);
            s.indices().unwrap()
        })
        .collect();
    for a in 0..orders.len() {
        for b in a + 1..orders.len() {
            assert_ne!(orders[a], orders[b], "epochs {a} and {b}");
        }
    }
    // and going back to an epoch replays it
    s.set_epoch(2);
    assert_eq!(s.indices().unwrap(), orders[2]);
    // a different seed is a different order too
    let mut t = s.clone().with_seed(2);
    t.set_epoch(0);
    assert_ne!(t.indices().unwrap(), orders[0]);
    // without shuffle the epoch changes nothing
    let mut u = s.clone().with_shuffle(false);
    let first = u.indices().unwrap();
    u.set_epoch(9);
    assert_eq!(u.indices().unwrap(), first);
}

#[test]
fn errors_are_values() {
    let invalid = |e: Error| matches!(e, Error::Invalid { .. });
    assert!(invalid(DistributedSampler::new(10, 0, 0).unwrap_err()));
    assert!(invalid(DistributedSampler::new(10, 3, 3).unwrap_err()));
    assert!(invalid(DistributedSampler::new(10, 3, 100).unwrap_err()));
    assert!(invalid(DistributedSampler::new(0, 1, 1).unwrap_err()));
    let msg = DistributedSampler::new(10, 3, 3).unwrap_err().to_string();
    assert!(msg.contains("rank 3") && msg.contains("[0, 2]"), "{msg}");
    // ⌈len / R⌉ · R past usize::MAX (2^64 - 2 = 4q + 2 would pad to 2^64)
    assert!(invalid(
        DistributedSampler::new(usize::MAX, 2, 0).unwrap_err()
    ));
    assert!(invalid(
        DistributedSampler::new(usize::MAX - 1, 4, 3).unwrap_err()
    ));
}

#[test]
fn absurd_sizes_do_not_panic() {
    // counts are exact at the edges of usize
    let s = DistributedSampler::new(usize::MAX, 1, 0).unwrap();
    assert_eq!((s.len(), s.total_size()), (usize::MAX, usize::MAX));
    let s = DistributedSampler::new(usize::MAX, 3, 2).unwrap(); // 2^64 - 1 = 3 · 6148914691236517205
    assert_eq!((s.len(), s.total_size()), (usize::MAX / 3, usize::MAX));
    let s = DistributedSampler::new(usize::MAX - 1, 2, 1).unwrap();
    assert_eq!((s.len(), s.total_size()), (usize::MAX / 2, usize::MAX - 1));
    // 2^64 - 2 = 3q + 2: padded to 2^64 - 1, cut to 2^64 - 4
    let s = DistributedSampler::new(usize::MAX - 1, 3, 2).unwrap();
    assert_eq!((s.len(), s.total_size()), (usize::MAX / 3, usize::MAX));
    let s = s.with_drop_last(true);
    assert_eq!(
        (s.len(), s.total_size()),
        (usize::MAX / 3 - 1, usize::MAX - 3)
    );
    // more ranks than samples, up to usize::MAX of them
    let s = sampler(1, usize::MAX, usize::MAX - 1, false, false);
    assert_eq!((s.len(), s.total_size()), (1, usize::MAX));
    assert_eq!(s.indices().unwrap(), vec![0]);
    let s = sampler(1, usize::MAX, usize::MAX - 1, true, false);
    assert_eq!(s.indices().unwrap(), vec![0]);
    assert!(sampler(1, usize::MAX, 3, true, true)
        .indices()
        .unwrap()
        .is_empty());
    // shares that can't be allocated are errors, with or without shuffle
    for shuffle in [false, true] {
        for (len, r) in [(usize::MAX, 1), (usize::MAX / 2, 3), (1 << 62, 1)] {
            let e = sampler(len, r, 0, shuffle, false).indices().unwrap_err();
            assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        }
    }
}

#[test]
fn many_sizes_against_pytorchs_algorithm() {
    for len in 0..40 {
        for r in 1..10 {
            for drop_last in [false, true] {
                let perm = randperm(len, 3);
                let order: Vec<usize> = (0..len).collect();
                for rank in 0..r {
                    let mut s = sampler(len, r, rank, false, drop_last).with_seed(1);
                    assert_eq!(
                        s.indices().unwrap(),
                        pytorch_iter(&order, r, rank, drop_last)
                    );
                    s = s.with_shuffle(true);
                    s.set_epoch(2);
                    assert_eq!(
                        s.indices().unwrap(),
                        pytorch_iter(&perm, r, rank, drop_last)
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Everything but the permutation is PyTorch's, for both orders.
    #[test]
    fn matches_pytorchs_algorithm(len in 0usize..300, r in 1usize..20, drop_last: bool,
                                  shuffle: bool, seed in 0u64..1000, epoch in 0u64..100) {
        let order: Vec<usize> = if shuffle { randperm(len, seed + epoch) } else { (0..len).collect() };
        for rank in 0..r {
            let mut s = sampler(len, r, rank, shuffle, drop_last).with_seed(seed);
            s.set_epoch(epoch);
            prop_assert_eq!(s.indices().unwrap(), pytorch_iter(&order, r, rank, drop_last));
        }
    }

    /// Each rank gets exactly `len()` indices, all in range, and the counts are PyTorch's.
    #[test]
    fn each_rank_gets_num_samples(len in 0usize..500, r in 1usize..33, drop_last: bool, shuffle: bool) {
        let want = if drop_last { len / r } else { len.div_ceil(r) };
        for rank in 0..r {
            let s = sampler(len, r, rank, shuffle, drop_last);
            prop_assert_eq!(s.len(), want);
            prop_assert_eq!(s.total_size(), want * r);
            let idx = s.indices().unwrap();
            prop_assert_eq!(idx.len(), want);
            prop_assert!(idx.iter().all(|&i| i < len));
        }
    }

    /// Without drop_last the ranks cover every index, and only the padding is repeated:
    /// each index appears ⌊total/len⌋ or ⌈total/len⌉ times, total_size in all.
    #[test]
    fn union_covers_every_index(len in 1usize..300, r in 1usize..20, shuffle: bool, seed in 0u64..1000) {
        let shares = all_ranks(len, r, shuffle, false, seed, 0);
        let total = len.div_ceil(r) * r;
        let c = counts(shares.concat());
        prop_assert_eq!(c.len(), len);
        prop_assert_eq!(c.values().sum::<usize>(), total);
        let (lo, hi) = (total / len, total.div_ceil(len));
        prop_assert!(c.values().all(|&k| k == lo || k == hi), "{:?}", c);
    }

    /// With drop_last nothing is repeated and fewer than R samples are left out.
    #[test]
    fn drop_last_never_repeats(len in 0usize..300, r in 1usize..20, shuffle: bool, seed in 0u64..1000) {
        let all = all_ranks(len, r, shuffle, true, seed, 1).concat();
        let c = counts(all.iter().copied());
        prop_assert_eq!(c.len(), all.len());
        prop_assert_eq!(all.len(), len / r * r);
        prop_assert!(len - all.len() < r);
    }

    /// When R divides len the ranks are disjoint and together the whole dataset, with or
    /// without drop_last.
    #[test]
    fn ranks_are_disjoint_when_divisible(per in 0usize..40, r in 1usize..20, shuffle: bool,
                                        drop_last: bool, seed in 0u64..1000, epoch in 0u64..10) {
        let len = per * r;
        let mut all = all_ranks(len, r, shuffle, drop_last, seed, epoch).concat();
        all.sort_unstable();
        prop_assert_eq!(all, (0..len).collect::<Vec<_>>());
    }
}
