//! Index and sort timings next to their memory floor.
//!
//! `cargo bench -p stride-core --bench index_sort [section]` (release profile; sections:
//! `raw`, `gather`, `scatter`, `sort`), then `python3 crates/stride-core/benches/index_sort_numpy.py`
//! for NumPy on the same sizes. `STRIDE_BENCH_REPS` sets the runs per figure (best of them is
//! printed; default 7).
//!
//! The floor of a memory-bound op is (bytes it must move) ÷ (copy bandwidth measured here, in
//! the same run): a parallel copy into a preallocated buffer. Every index op is timed twice:
//! returning a fresh tensor, and in its `_out` form into a preallocated output (the same
//! kernel without the allocation). A fresh result also pays the OS's first touch of its new
//! pages (zeroing, page faults; on a VM far slower than the copy itself and very variable),
//! so fresh figures are also shown next to "fresh-floor": a copy of the same bytes into a
//! fresh tensor, measured in the same run.
//!
//! Timings on a shared machine vary run to run; the load average is printed at the start and
//! the end so the conditions are on record.

use std::time::Instant;
use stride_core::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;

/// The load average (1, 5, 15 minutes), as the kernel reports it.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Runs per figure (best of them).
fn reps() -> usize {
    std::env::var("STRIDE_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7)
}

/// Best of `reps` runs, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn normal(&mut self) -> f32 {
        // Box-Muller
        let u1 = ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let u2 = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
}

fn row(name: &str, secs: f64, bytes: f64, floor_bw: f64, fresh_bw: Option<f64>) {
    let floor = bytes / floor_bw;
    let fresh = fresh_bw.map_or(String::new(), |b| {
        format!(
            "  fresh-floor {:7.1} ms ({:.2}x)",
            bytes / b * 1e3,
            secs / (bytes / b)
        )
    });
    println!(
        "{name:<58} {:8.1} ms   floor {:7.1} ms ({:.2}x){fresh}",
        secs * 1e3,
        floor * 1e3,
        secs / floor
    );
}

/// Plain-Rust random-row copies with the same index: what this machine allows for the access
/// pattern, with no tensor machinery (parallel over rows; `ahead` > 0 prefetches that many rows
/// ahead).
fn raw_rows(x: &[f32], idx: &[i64], d: usize, out: &mut [f32], ahead: usize) {
    use rayon::prelude::*;
    out.par_chunks_mut(d * 4096).enumerate().for_each(|(c, o)| {
        let base = c * 4096;
        for (r, row) in o.chunks_mut(d).enumerate() {
            let k = base + r;
            #[cfg(target_arch = "x86_64")]
            if ahead > 0 && k + ahead < idx.len() {
                let p = x[idx[k + ahead] as usize * d..].as_ptr() as *const i8;
                for l in (0..d * 4).step_by(64) {
                    // SAFETY: a prefetch is a hint and never faults.
                    unsafe {
                        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                            p.wrapping_add(l),
                        )
                    };
                }
            }
            let s = idx[k] as usize * d;
            row.copy_from_slice(&x[s..s + d]);
        }
    });
}

/// [`raw_rows`] with `ahead = 8` and streaming (non-temporal) stores: the output's cache
/// lines are written without being read first, so the copy moves 2 bytes per byte instead of 3
/// (what `memcpy` does for large copies, hence what the floor measures).
fn raw_rows_stream(x: &[f32], idx: &[i64], d: usize, out: &mut [f32]) {
    use rayon::prelude::*;
    assert_eq!(d % 4, 0);
    out.par_chunks_mut(d * 4096).enumerate().for_each(|(c, o)| {
        let base = c * 4096;
        #[cfg(target_arch = "x86_64")]
        for (r, row) in o.chunks_mut(d).enumerate() {
            use std::arch::x86_64::*;
            let k = base + r;
            if k + 8 < idx.len() {
                let p = x[idx[k + 8] as usize * d..].as_ptr() as *const i8;
                for l in (0..d * 4).step_by(64) {
                    // SAFETY: a prefetch is a hint and never faults.
                    unsafe { _mm_prefetch::<{ _MM_HINT_T0 }>(p.wrapping_add(l)) };
                }
            }
            let s = &x[idx[k] as usize * d..][..d];
            if !(row.as_ptr() as usize).is_multiple_of(16) {
                row.copy_from_slice(s);
                continue;
            }
            for (a, b) in row.chunks_exact_mut(4).zip(s.chunks_exact(4)) {
                // SAFETY: `a` is 16-byte aligned (checked above, rows are multiples of 16
                // bytes) and both chunks hold 4 floats.
                unsafe {
                    let v = _mm_loadu_ps(b.as_ptr());
                    _mm_stream_ps(a.as_mut_ptr(), v);
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: orders the streaming stores before the task ends.
        unsafe {
            std::arch::x86_64::_mm_sfence()
        };
        #[cfg(not(target_arch = "x86_64"))]
        for (r, row) in o.chunks_mut(d).enumerate() {
            let s = idx[base + r] as usize * d;
            row.copy_from_slice(&x[s..s + d]);
        }
    });
}

/// Plain-Rust scatter-add of rows with the deterministic scheme (destination rows split by
/// index value between threads, each scanning the whole index).
fn raw_scatter_add(acc: &mut [f32], x: &[f32], idx: &[i64], d: usize) {
    use rayon::prelude::*;
    let rows = acc.len() / d;
    let cut = rows.div_ceil(rayon::current_num_threads());
    acc.par_chunks_mut(cut * d)
        .enumerate()
        .for_each(|(t, part)| {
            let (lo, hi) = (t * cut, t * cut + part.len() / d);
            for (k, &v) in idx.iter().enumerate() {
                let v = v as usize;
                if v >= lo && v < hi {
                    let dst = &mut part[(v - lo) * d..(v - lo + 1) * d];
                    for (a, b) in dst.iter_mut().zip(&x[k * d..(k + 1) * d]) {
                        *a += *b;
                    }
                }
            }
        });
}

fn main() {
    // an optional argument runs only the sections whose name contains it
    let filter = std::env::args().nth(1).unwrap_or_default();
    let on = |section: &str| filter.is_empty() || section.contains(filter.as_str());
    let threads = rayon::current_num_threads();
    let reps = reps();
    println!(
        "stride index/sort bench: {threads} threads, best of {reps} runs per figure; load average at start: {}",
        loadavg()
    );
    let (n, d) = (1_000_000usize, 64usize);
    let mut rng = Rng(42);
    let x: Vec<f32> = (0..n * d).map(|i| (i % 1000) as f32).collect();
    let idx: Vec<i64> = (0..n).map(|_| (rng.next() % n as u64) as i64).collect();
    let bytes_rows = (n * d * 4) as f64;

    // ---- copy bandwidth: the floor ---------------------------------------------------------
    let mut dst = vec![0f32; n * d];
    dst.copy_from_slice(&x);
    let t_copy = best(reps.max(5), || {
        use rayon::prelude::*;
        dst.par_chunks_mut(1 << 16)
            .zip(x.par_chunks(1 << 16))
            .for_each(|(a, b)| a.copy_from_slice(b));
    });
    let bw = 2.0 * bytes_rows / t_copy;
    // a fresh copy through stride's allocator (what an op returning a new tensor pays)
    let x_tensor = Tensor::from_vec(x.clone(), [n, d]).unwrap();
    let t_fresh = best(reps.max(5), || {
        std::hint::black_box(x_tensor.clone_tensor().unwrap());
    });
    drop(x_tensor);
    let fresh_bw = 2.0 * bytes_rows / t_fresh;
    println!(
        "floor: copy 256 MB into a preallocated buffer: {:.1} ms = {:.1} GB/s (read + write); into a fresh tensor: {:.1} ms = {:.1} GB/s",
        t_copy * 1e3,
        bw / 1e9,
        t_fresh * 1e3,
        fresh_bw / 1e9,
    );
    // a row gather moves every output byte twice (read the row, write it) plus the index
    let moved = 2.0 * bytes_rows + (n * 8) as f64;
    if on("raw") {
        for ahead in [0usize, 8] {
            let t = best(reps, || raw_rows(&x, &idx, d, &mut dst, ahead));
            let name = format!("raw random-row copy (plain Rust, ahead={ahead})");
            row(&name, t, moved, bw, None);
        }
        let t = best(reps, || raw_rows_stream(&x, &idx, d, &mut dst));
        row(
            "raw random-row copy (ahead=8, streaming)",
            t,
            moved,
            bw,
            None,
        );
        let t = best(reps, || {
            let mut out = vec![0f32; n * d];
            raw_rows(&x, &idx, d, &mut out, 0);
            std::hint::black_box(&out);
        });
        row(
            "raw random-row copy into a fresh Vec",
            t,
            moved,
            bw,
            Some(fresh_bw),
        );
        let mut acc = vec![1f32; n * d];
        let t = best(reps, || raw_scatter_add(&mut acc, &x, &idx, d));
        let moved_sc = 3.0 * bytes_rows + (n * 8) as f64;
        row(
            "raw scatter-add of random rows (plain Rust)",
            t,
            moved_sc,
            bw,
            None,
        );
    }
    drop(dst);

    // a tensor allocated by stride, as an op's result would be (huge pages where available)
    let xt = Tensor::from_vec(x.clone(), [n, d])
        .unwrap()
        .clone_tensor()
        .unwrap();
    drop(x);
    let it = Tensor::from_vec(idx.clone(), [n]).unwrap();
    let e = it
        .unsqueeze(1)
        .unwrap()
        .expand(&[n as i64, d as i64])
        .unwrap();

    // ---- gathers: fresh result, then `_out` into a preallocated output ----------------------
    if on("gather") {
        let out = Tensor::zeros([n, d], DType::F32, &CPU).unwrap();
        out.add_(1.0).unwrap(); // touch the pages
        type Gather<'a> = (
            &'a str,
            Box<dyn Fn() -> Tensor + 'a>,
            Box<dyn Fn(&Tensor) + 'a>,
        );
        let gathers: Vec<Gather> = vec![
            (
                "index_select [1M,64] f32 by 1M random i64",
                Box::new(|| xt.index_select(0, &it).unwrap()),
                Box::new(|o| {
                    xt.index_select_out(0, &it, o).unwrap();
                }),
            ),
            (
                "embedding (same sizes)",
                Box::new(|| xt.embedding(&it).unwrap()),
                Box::new(|o| {
                    xt.embedding_out(&it, o).unwrap();
                }),
            ),
            (
                "gather dim 0, expanded [1M,64] index",
                Box::new(|| xt.gather(0, &e).unwrap()),
                Box::new(|o| {
                    xt.gather_out(0, &e, o).unwrap();
                }),
            ),
        ];
        for (name, fresh, into) in &gathers {
            let t = best(reps, || {
                std::hint::black_box(fresh());
            });
            row(&format!("{name}, fresh"), t, moved, bw, Some(fresh_bw));
            let t = best(reps, || into(&out));
            row(&format!("{name}, _out"), t, moved, bw, None);
        }
        let full = e.contiguous().unwrap();
        let moved_full = 2.0 * bytes_rows + (n * d * 8) as f64;
        let t = best(reps.min(3), || {
            std::hint::black_box(xt.gather(0, &full).unwrap());
        });
        row(
            "gather dim 0, materialised [1M,64] i64 index, fresh",
            t,
            moved_full,
            bw,
            Some(fresh_bw),
        );
        let t = best(reps.min(3), || {
            xt.gather_out(0, &full, &out).unwrap();
        });
        row(
            "gather dim 0, materialised [1M,64] i64 index, _out",
            t,
            moved_full,
            bw,
            None,
        );
    }

    // ---- scatters -------------------------------------------------------------------------------
    if on("scatter") {
        let acc = Tensor::zeros([n, d], DType::F32, &CPU).unwrap();
        acc.add_(1.0).unwrap(); // touch the pages
                                // in place: read the destination row, read the source row, write the destination row
        let moved_sc = 3.0 * bytes_rows + (n * 8) as f64;
        let t = best(reps, || {
            acc.scatter_add_(0, &e, &xt).unwrap();
        });
        row(
            "scatter_add_ dim 0, expanded [1M,64] index",
            t,
            moved_sc,
            bw,
            None,
        );
        let t = best(reps, || {
            acc.index_add_(0, &it, &xt, 1i64).unwrap();
        });
        row(
            "index_add_ [1M,64] f32, 1M random rows",
            t,
            moved_sc,
            bw,
            None,
        );
        // out of place: self copied into the result (read + write), then the scatter
        let moved_oop = moved_sc + 2.0 * bytes_rows;
        let out = Tensor::zeros([n, d], DType::F32, &CPU).unwrap();
        out.add_(1.0).unwrap();
        let t = best(reps.min(5), || {
            std::hint::black_box(acc.scatter_add(0, &e, &xt).unwrap());
        });
        row(
            "scatter_add (copy of self + scatter), fresh",
            t,
            moved_oop,
            bw,
            Some(fresh_bw),
        );
        let t = best(reps.min(5), || {
            acc.scatter_add_out(0, &e, &xt, &out).unwrap();
        });
        row(
            "scatter_add (copy of self + scatter), _out",
            t,
            moved_oop,
            bw,
            None,
        );
        let t = best(reps.min(5), || {
            acc.index_add_out(0, &it, &xt, 1i64, &out).unwrap();
        });
        row(
            "index_add (copy of self + scatter), _out",
            t,
            moved_oop,
            bw,
            None,
        );
    }
    drop((xt, e));
    println!("load average at the end: {}", loadavg());

    // ---- sort and selection -----------------------------------------------------------------------
    if !on("sort") {
        return;
    }
    let y: Vec<f32> = (0..32 * 50_000).map(|_| rng.normal()).collect();
    let yt = Tensor::from_vec(y, [32, 50_000]).unwrap();
    let t = best(10, || {
        std::hint::black_box(yt.topk(50, 1, true, true).unwrap());
    });
    println!(
        "{:<44} {:8.2} ms",
        "topk k=50 over [32, 50000] f32",
        t * 1e3
    );
    let s: Vec<f32> = (0..1_000_000).map(|_| rng.normal()).collect();
    let st = Tensor::from_vec(s, [1_000_000]).unwrap();
    let t = best(10, || {
        std::hint::black_box(st.sort(0, false, false).unwrap());
    });
    println!(
        "{:<44} {:8.2} ms",
        "sort 1M f32 (values + i64 indices)",
        t * 1e3
    );
    let s2 = st.reshape(&[1000, 1000]).unwrap();
    let t = best(10, || {
        std::hint::black_box(s2.sort(1, false, false).unwrap());
    });
    println!(
        "{:<44} {:8.2} ms",
        "sort [1000, 1000] f32 along dim 1",
        t * 1e3
    );
    let t = best(10, || {
        std::hint::black_box(st.kthvalue(500_000, 0, false).unwrap());
    });
    println!("{:<44} {:8.2} ms", "kthvalue / median of 1M f32", t * 1e3);
}
