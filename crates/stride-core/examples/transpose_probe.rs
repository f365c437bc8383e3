//! Probe: where the time of an in-place op into a transposed output goes.
//!
//! `cargo run --release -p stride-core --example transpose_probe -- [ROUNDS] [RUNS] [TR TC]`
//!
//! `w.t().mul_(&x)` on 4096² f32 walks the output in its own memory order, tile by tile, and
//! copies the matching block of `x` — read along `x`'s rows, i.e. across the output's — into
//! a small staging buffer first (`cpu::strided::Tiling`). This probe redoes that walk in plain
//! Rust with the same tile shape (`TR` runs of `TC` elements; stride's is 64 × 256) and times
//! its two halves on their own, beside the whole walk, the contiguous op and stride's own ops,
//! interleaved round by round (each figure: best of `RUNS` runs in a round; min and median
//! over `ROUNDS` rounds):
//!
//! - `stride mul_` / `stride .t() mul_`: `w.mul_(&x)` and `w.t().mul_(&x)` through the API;
//! - `contig`: the same in-place multiply over contiguous buffers, plain Rust;
//! - `tiled`: the staged tile walk (stage a tile of `x`, then update the output's runs);
//! - `stage`: only the staging (reads `x` in `x`-row stretches of `TR` elements, transposes);
//! - `read`: only the reads of the staging, no transposition (the access pattern's own cost);
//! - `update`: only the output update, from a staging buffer already in cache.
//!
//! If `tiled` ≈ `stage` + `update`, the two halves don't overlap; `stage` − `read` is what
//! the transposition itself adds to the staging's memory traffic.
//!
//! Measured on the 2-core EPYC reference VM (AVX2), 2026-11-25, tiles of 64 × 256, min–median
//! of 8 rounds, before stride's staging prefetched its rows (this probe's staging doesn't): stride `mul_` 4.2–4.5 ms, stride `.t()` `mul_` 8.4–9.3 (2.07× on medians),
//! contig 4.5–4.8, tiled 8.7–9.5, stage 4.8–5.4, read 3.0–3.3, update 3.6–4.1. So the walk
//! costs stage + update, and each alone costs about as much as the whole contiguous op: the
//! staged operand is read 256 bytes from each of 256 rows per tile, which this VM's memory
//! serves at about half its streaming rate. Tiles of 512 × 64 (longer stretches of `x`,
//! shorter ones of the output): stage 3.6–4.4, update 3.7–4.3, tiled 8.0–9.0. Also tried, in
//! a scratch copy of this probe: 12 other tile shapes (32–1024 runs × 32–512 elements), the
//! other tile order, prefetching the staged rows (8–64 rows ahead, or the next tile's during
//! the update), reading a 4 MiB block of `x` along its rows into cache before staging from
//! it, padding the staging rows, and 16 × 16 staging blocks: all 7.2–9.5 ms.

#[cfg(target_arch = "x86_64")]
mod probe {
    use rayon::prelude::*;
    use std::arch::x86_64::*;
    use std::time::Instant;
    use stride_core::{DType, Device, Tensor};

    const N: usize = 4096;

    /// A zeroed-then-filled `n`-float buffer with huge pages advised (as stride's storage is).
    fn buffer(n: usize, v: f32) -> Vec<f32> {
        let mut b: Vec<f32> = Vec::with_capacity(n);
        let (p, huge) = (b.as_ptr() as usize, 2usize << 20);
        let (start, end) = (p.next_multiple_of(huge), (p + n * 4) / huge * huge);
        if end > start {
            // SAFETY: advice on a range inside our own allocation; it never changes contents
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
        b.resize(n, v);
        b
    }

    #[derive(Clone, Copy)]
    struct Ptr(*mut f32);
    unsafe impl Send for Ptr {}
    unsafe impl Sync for Ptr {}

    #[derive(Clone, Copy, PartialEq)]
    enum Part {
        Whole,
        Stage,
        Read,
        Update,
    }

    /// `dst[i·ds + j] = src[i + j·ss]` for an 8×8 block (the same shuffle sequence as
    /// `cpu::transpose`).
    #[inline(always)]
    unsafe fn t8x8(src: *const f32, ss: usize, dst: *mut f32, ds: usize) {
        // written out: a closure would not inherit the caller's AVX2 and would not inline
        let r = [
            _mm256_loadu_ps(src),
            _mm256_loadu_ps(src.add(ss)),
            _mm256_loadu_ps(src.add(2 * ss)),
            _mm256_loadu_ps(src.add(3 * ss)),
            _mm256_loadu_ps(src.add(4 * ss)),
            _mm256_loadu_ps(src.add(5 * ss)),
            _mm256_loadu_ps(src.add(6 * ss)),
            _mm256_loadu_ps(src.add(7 * ss)),
        ];
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u = [
            _mm256_shuffle_ps::<0x44>(t0, t2),
            _mm256_shuffle_ps::<0xEE>(t0, t2),
            _mm256_shuffle_ps::<0x44>(t1, t3),
            _mm256_shuffle_ps::<0xEE>(t1, t3),
            _mm256_shuffle_ps::<0x44>(t4, t6),
            _mm256_shuffle_ps::<0xEE>(t4, t6),
            _mm256_shuffle_ps::<0x44>(t5, t7),
            _mm256_shuffle_ps::<0xEE>(t5, t7),
        ];
        for k in 0..4 {
            _mm256_storeu_ps(
                dst.add(k * ds),
                _mm256_permute2f128_ps::<0x20>(u[k], u[k + 4]),
            );
            _mm256_storeu_ps(
                dst.add((k + 4) * ds),
                _mm256_permute2f128_ps::<0x31>(u[k], u[k + 4]),
            );
        }
    }

    /// One tile at output run `t0`, element `i0`: `w[(t0+r)·N + i0 + c] *= x[(i0+c)·N + t0 + r]`
    /// (or only the part asked for).
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    unsafe fn tile(
        w: *mut f32,
        x: *const f32,
        buf: &mut [f32],
        t0: usize,
        i0: usize,
        tr: usize,
        tc: usize,
        part: Part,
    ) {
        let b = buf.as_mut_ptr();
        if matches!(part, Part::Whole | Part::Stage) {
            for c in (0..tc).step_by(8) {
                for r in (0..tr).step_by(8) {
                    t8x8(x.add((i0 + c) * N + t0 + r), N, b.add(r * tc + c), tc);
                }
            }
        }
        if part == Part::Read {
            for c in (0..tc).step_by(8) {
                for r in (0..tr).step_by(8) {
                    let s = x.add((i0 + c) * N + t0 + r);
                    let mut acc = _mm256_loadu_ps(s);
                    for j in 1..8 {
                        acc = _mm256_add_ps(acc, _mm256_loadu_ps(s.add(j * N)));
                    }
                    _mm256_storeu_ps(b.add(r * tc + c), acc);
                }
            }
        }
        if matches!(part, Part::Whole | Part::Update) {
            for r in 0..tr {
                let ahead = w.add((t0 + (r + 4).min(tr - 1)) * N + i0) as *const i8;
                for l in (0..tc * 4).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.add(l));
                }
                let (o, s) = (w.add((t0 + r) * N + i0), b.add(r * tc));
                for c in (0..tc).step_by(8) {
                    _mm256_storeu_ps(
                        o.add(c),
                        _mm256_mul_ps(_mm256_loadu_ps(o.add(c)), _mm256_loadu_ps(s.add(c))),
                    );
                }
            }
        }
    }

    /// The tile walk over the whole matrix: tiles along the output's rows are neighbours in the
    /// task order, consecutive tasks go to one thread in groups (as `Plan::par_tiles`).
    fn tiled(w: &mut [f32], x: &[f32], tr: usize, tc: usize, part: Part) {
        let (bt, bi) = (N / tr, N / tc);
        let tasks = bt * bi;
        let groups = (rayon::current_num_threads() * 8).min(tasks);
        let per = tasks.div_ceil(groups);
        let (wp, xp) = (Ptr(w.as_mut_ptr()), Ptr(x.as_ptr() as *mut f32));
        (0..groups).into_par_iter().for_each(|g| {
            let (wp, xp) = (wp, xp);
            let mut buf = vec![1f32; tr * tc];
            for t in g * per..((g + 1) * per).min(tasks) {
                // SAFETY: every tile lies inside both N×N buffers; tiles are disjoint; AVX2
                // was checked at start
                unsafe {
                    tile(
                        wp.0,
                        xp.0,
                        &mut buf,
                        (t / bi) * tr,
                        (t % bi) * tc,
                        tr,
                        tc,
                        part,
                    )
                };
            }
        });
    }

    fn contiguous(w: &mut [f32], x: &[f32]) {
        w.par_chunks_mut(1 << 18)
            .zip(x.par_chunks(1 << 18))
            .for_each(|(a, b)| {
                for (p, q) in a.iter_mut().zip(b) {
                    *p *= *q;
                }
            });
    }

    pub fn main() -> stride_core::Result<()> {
        if !std::arch::is_x86_feature_detected!("avx2") {
            println!("transpose_probe: needs AVX2; skipped");
            return Ok(());
        }
        let args: Vec<usize> = std::env::args()
            .skip(1)
            .filter_map(|a| a.parse().ok())
            .collect();
        let rounds = args.first().copied().unwrap_or(6);
        let runs = args.get(1).copied().unwrap_or(15);
        let (tr, tc) = (
            args.get(2).copied().unwrap_or(64),
            args.get(3).copied().unwrap_or(256),
        );
        let fits = |t: usize| t > 0 && t.is_multiple_of(8) && N.is_multiple_of(t);
        if !fits(tr) || !fits(tc) {
            println!("TR and TC must be multiples of 8 that divide {N}");
            return Ok(());
        }
        // ones, so that the values stay put run after run
        let (mut w, x) = (buffer(N * N, 1.0), buffer(N * N, 1.0));
        let (sw, sx) = (
            Tensor::full([N, N], 1.0, DType::F32, &Device::Cpu)?,
            Tensor::full([N, N], 1.0, DType::F32, &Device::Cpu)?,
        );
        let swt = sw.t()?;
        type Run<'a> = Box<dyn FnMut(&mut [f32], &[f32]) + 'a>;
        let mut variants: Vec<(&str, Run)> = vec![
            ("stride mul_", Box::new(|_, _| drop(sw.mul_(&sx)))),
            ("stride .t() mul_", Box::new(|_, _| drop(swt.mul_(&sx)))),
            ("contig", Box::new(contiguous)),
            (
                "tiled",
                Box::new(move |w, x| tiled(w, x, tr, tc, Part::Whole)),
            ),
            (
                "stage",
                Box::new(move |w, x| tiled(w, x, tr, tc, Part::Stage)),
            ),
            (
                "read",
                Box::new(move |w, x| tiled(w, x, tr, tc, Part::Read)),
            ),
            (
                "update",
                Box::new(move |w, x| tiled(w, x, tr, tc, Part::Update)),
            ),
        ];
        let mut times = vec![vec![]; variants.len()];
        for _ in 0..rounds {
            for (k, (_, f)) in variants.iter_mut().enumerate() {
                let mut best = f64::INFINITY;
                for _ in 0..runs {
                    let t = Instant::now();
                    f(&mut w, &x);
                    best = best.min(t.elapsed().as_secs_f64());
                }
                times[k].push(best * 1e3);
            }
        }
        let med = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            (v[0], v[v.len() / 2])
        };
        let contig = med(&times[2]).1;
        println!("{N}x{N} f32, tiles of {tr} runs x {tc} elements, {} threads; best of {runs} runs per round, {rounds} rounds", rayon::current_num_threads());
        println!(
            "{:<18} {:>9} {:>9} {:>16}",
            "variant", "min ms", "median", "median / contig"
        );
        for ((name, _), t) in variants.iter().zip(&times) {
            let (lo, m) = med(t);
            println!("{name:<18} {lo:>9.2} {m:>9.2} {:>16.2}", m / contig);
        }
        Ok(())
    }
}

fn main() -> stride_core::Result<()> {
    #[cfg(target_arch = "x86_64")]
    return probe::main();
    #[cfg(not(target_arch = "x86_64"))]
    {
        println!("transpose_probe: x86-64 only; skipped");
        Ok(())
    }
}
