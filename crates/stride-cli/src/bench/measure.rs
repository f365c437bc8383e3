//! The machine's ceilings, measured in-process, and the timer every row uses.

use std::time::Instant;

/// Wall times of one side of a row: the best (the least disturbed run, what the code can do
/// on this machine) and the median (what a run typically got while the machine was shared).
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub best: f64,
    pub median: f64,
    pub samples: usize,
}

impl Stats {
    pub fn of(mut ts: Vec<f64>) -> Option<Stats> {
        ts.retain(|t| t.is_finite());
        if ts.is_empty() {
            return None;
        }
        ts.sort_by(|a, b| a.total_cmp(b));
        let n = ts.len();
        let median = if n % 2 == 1 {
            ts[n / 2]
        } else {
            0.5 * (ts[n / 2 - 1] + ts[n / 2])
        };
        Some(Stats {
            best: ts[0],
            median,
            samples: n,
        })
    }
}

/// How many repetitions a row gets.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    /// Seconds of timed runs per side (stride, peer) per row, about.
    pub budget: f64,
    /// At least this many timed runs per side.
    pub min_samples: usize,
    /// At most this many.
    pub max_samples: usize,
    /// At least this many alternations between stride's block and the peer's.
    pub min_rounds: usize,
    /// Untimed runs per side before timing (also sizes the blocks).
    pub warmup: usize,
    /// Idle time before each block, so the other side's worker threads (OpenBLAS spins for a
    /// while after each call) have gone to sleep when the block starts.
    pub gap: std::time::Duration,
}

/// Times `ours` and, if given, `peer(reps) -> reps wall times` in alternating blocks of
/// repetitions of the same row: warm-up of both, then rounds of [ours × r, peer × r], the order
/// flipping every round, with `gap` idle before each block. On a machine shared with other
/// work both sides then meet the same conditions, and the best of many runs is the figure
/// least disturbed by it. Returns stride's stats and the peer's (or the peer's error).
pub fn interleaved(
    s: &Sampling,
    mut ours: impl FnMut(),
    mut peer: Option<&mut dyn FnMut(usize) -> Result<Vec<f64>, String>>,
) -> (Stats, Option<Result<Stats, String>>) {
    let once = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64()
    };
    // warm-up (and an estimate of one run, to size the blocks)
    let mut est = f64::INFINITY;
    for _ in 0..s.warmup.max(1) {
        est = est.min(once(&mut ours));
    }
    let mut peer_err = None;
    if let Some(p) = peer.as_mut() {
        if let Err(e) = p(s.warmup.max(1)) {
            peer_err = Some(e);
        }
    }
    let total = ((s.budget / est.max(1e-9)) as usize).clamp(s.min_samples.max(1), s.max_samples);
    let rounds = s.min_rounds.max(1).min(total);
    let per = total.div_ceil(rounds);
    let (mut mine, mut theirs) = (Vec::with_capacity(total), Vec::with_capacity(total));
    for round in 0..rounds {
        for side in 0..2 {
            let peer_turn = (side == 1) == (round % 2 == 0);
            std::thread::sleep(s.gap);
            if !peer_turn {
                for _ in 0..per {
                    mine.push(once(&mut ours));
                }
            } else if let (Some(p), None) = (peer.as_mut(), &peer_err) {
                match p(per) {
                    Ok(ts) => theirs.extend(ts),
                    Err(e) => peer_err = Some(e),
                }
            }
        }
    }
    let ours = Stats::of(mine).expect("at least one timed run");
    let theirs = peer.map(|_| match peer_err {
        Some(e) => Err(e),
        None => Stats::of(theirs).ok_or_else(|| "the peer returned no times".to_string()),
    });
    (ours, theirs)
}

/// Memory bandwidth in bytes/s, the best of two stream kernels on every rayon thread over
/// buffers far larger than the caches: a copy (`copy_from_slice`, i.e. memcpy: read + write
/// bytes) and an in-place update `x = x + s·y` (read x, read y, write x); best of `reps` each,
/// every run after `gap` idle (as the rows' blocks are: on a shared machine a thread that
/// slept is scheduled promptly, so a floor measured without the gap would be slower than the
/// rows it bounds). Returns (bytes/s, which kernel won).
pub fn bandwidth(bytes: usize, reps: usize, gap: std::time::Duration) -> (f64, &'static str) {
    use rayon::prelude::*;
    use stride::storage::{BufferElement, CpuBuffer};
    let n = bytes / 4;
    // allocated as a tensor's storage is (with its huge-page advice: with 4 KiB pages the
    // TLB misses of a stream over this much memory, expensive in a VM, halved the figure),
    // and touched, so no page faults are timed
    let (mut sb, mut db) = (
        CpuBuffer::zeros(stride::DType::F32, n),
        CpuBuffer::zeros(stride::DType::F32, n),
    );
    let src = f32::slice_mut(&mut sb).expect("an f32 buffer");
    for (i, x) in src.iter_mut().enumerate() {
        *x = i as f32;
    }
    let src = &*src;
    let dst = f32::slice_mut(&mut db).expect("an f32 buffer");
    dst.fill(1.0);
    let chunk = n.div_ceil(rayon::current_num_threads() * 4).max(1 << 14);
    let best_of = |f: &mut dyn FnMut()| {
        (0..reps.max(1) + 1)
            .map(|_| {
                std::thread::sleep(gap);
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let copy = best_of(&mut || {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s))
    });
    let update = best_of(&mut || {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| {
                for (x, y) in d.iter_mut().zip(s) {
                    *x += 1e-30 * y;
                }
            })
    });
    std::hint::black_box(&*dst);
    let (copy, update) = ((2 * n * 4) as f64 / copy, (3 * n * 4) as f64 / update);
    if copy >= update {
        (copy, "memcpy")
    } else {
        (update, "in-place x += s*y")
    }
}

/// Peak f32 multiply-add rate in flop/s: an FMA microbenchmark (12 independent chains of
/// vector fused multiply-adds per thread, the widest the CPU has: AVX-512, AVX2+FMA, else
/// scalar mul+add) on every rayon thread at once; best of `reps`, each after `gap` idle.
/// Returns (flop/s, method).
pub fn peak_flops(seconds: f64, reps: usize, gap: std::time::Duration) -> (f64, String) {
    use rayon::prelude::*;
    let threads = rayon::current_num_threads();
    let (lanes, isa) = fma::width();
    // calibrate the iteration count to about `seconds` per run on one thread
    let mut iters = 1 << 12;
    loop {
        let t = Instant::now();
        std::hint::black_box(fma::run(iters));
        let dt = t.elapsed().as_secs_f64();
        if dt > seconds / 4.0 || iters > 1 << 30 {
            iters = ((iters as f64) * seconds / dt.max(1e-9)) as usize;
            break;
        }
        iters *= 4;
    }
    let iters = iters.max(1 << 10);
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        std::thread::sleep(gap);
        let t = Instant::now();
        let s: f32 = (0..threads).into_par_iter().map(|_| fma::run(iters)).sum();
        std::hint::black_box(s);
        best = best.min(t.elapsed().as_secs_f64());
    }
    let flops = (threads * iters * fma::CHAINS * lanes * 2) as f64;
    (
        flops / best,
        format!(
            "FMA microbenchmark: {} chains of {isa} f32 FMA x {threads} threads",
            fma::CHAINS
        ),
    )
}

mod fma {
    pub const CHAINS: usize = 12;

    /// (f32 lanes per FMA, instruction set) of the widest FMA this CPU runs.
    pub fn width() -> (usize, &'static str) {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                return (16, "AVX-512");
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return (8, "AVX2");
            }
        }
        (1, "scalar")
    }

    /// `iters` rounds of CHAINS independent FMAs of `width()` lanes.
    pub fn run(iters: usize) -> f32 {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                return unsafe { avx512(iters) };
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return unsafe { avx2(iters) };
            }
        }
        scalar(iters)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn avx512(iters: usize) -> f32 {
        use std::arch::x86_64::*;
        let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for r in acc.iter_mut() {
                *r = _mm512_fmadd_ps(*r, a, b);
            }
        }
        let mut s = _mm512_setzero_ps();
        for r in acc {
            s = _mm512_add_ps(s, r);
        }
        _mm512_reduce_add_ps(s)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2(iters: usize) -> f32 {
        use std::arch::x86_64::*;
        let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
        let mut acc = [_mm256_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for r in acc.iter_mut() {
                *r = _mm256_fmadd_ps(*r, a, b);
            }
        }
        let mut out = [0.0f32; 8];
        let mut s = _mm256_setzero_ps();
        for r in acc {
            s = _mm256_add_ps(s, r);
        }
        _mm256_storeu_ps(out.as_mut_ptr(), s);
        out.iter().sum()
    }

    fn scalar(iters: usize) -> f32 {
        let mut acc = [1.0f32; CHAINS];
        for _ in 0..iters {
            for r in acc.iter_mut() {
                *r = std::hint::black_box(*r * 0.999_999 + 1e-7);
            }
        }
        acc.iter().sum()
    }
}
