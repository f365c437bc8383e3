//! Index and sort timings next to their memory floor and next to NumPy, measured in one run.
//!
//! `cargo bench -p stride-core --bench index_sort [sections]` (release profile; sections, comma-separated:
//! `raw`, `gather`, `scatter`, `sort`; all by default). `STRIDE_BENCH_REPS` sets the timed runs
//! per figure (default 7; the best is printed), `STRIDE_BENCH_PYTHON` the Python (default
//! `python3`; `none` skips NumPy). NumPy (`pip install numpy`) runs as a child process,
//! `benches/index_sort_numpy.py --serve`, and each row is timed in alternating runs of stride
//! and NumPy after a warm-up of both, so that on a shared, noisy machine both sides meet the
//! same conditions. NumPy runs these ops on one thread; stride on every core.
//!
//! The floor of a memory-bound op is (bytes it must move) ÷ (copy bandwidth measured here, in
//! the same run): a parallel copy between two preallocated, touched buffers (the faster of
//! plain `Vec`s and buffers allocated as tensors are, with huge-page advice). Every index op
//! is timed twice: returning a fresh tensor, and in its `_out` form into a preallocated,
//! touched output (the same kernel without the allocation). A fresh result also pays the
//! OS's first touch of its new pages (zeroing, page faults; on a VM slower than the copy itself
//! and variable), so fresh figures are also shown next to "fresh-floor": a copy of the same
//! bytes into a fresh tensor, measured in the same run. NumPy's fresh results pay the same.
//!
//! The load average is printed at the start and the end so the conditions are on record.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;
use stride_core::storage::CpuBuffer;
use stride_core::{BufferElement, DType, Device, Tensor};

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

/// One timed run, after 20 ms idle: on a machine shared with other work, the runs of both
/// sides then start from the same state (a thread that slept is scheduled promptly).
fn once(f: &mut dyn FnMut()) -> f64 {
    std::thread::sleep(std::time::Duration::from_millis(20));
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

/// Best of `reps` runs (each after 20 ms idle), in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps.max(1))
        .map(|_| once(&mut f))
        .fold(f64::INFINITY, f64::min)
}

/// The NumPy peer: `index_sort_numpy.py --serve`, asked for timed runs of one row at a time.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    name: String,
}

impl Peer {
    /// The peer, or why there is none.
    fn start() -> Result<Peer, String> {
        let python = std::env::var("STRIDE_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
        if python == "none" {
            return Err("skipped (STRIDE_BENCH_PYTHON=none)".into());
        }
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/index_sort_numpy.py");
        let mut child = Command::new(&python)
            .arg(&script)
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("could not run `{python}` ({e})"))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut p = Peer {
            child,
            stdin,
            stdout,
            name: String::new(),
        };
        let v = p.read()?;
        if v["available"] != serde_json::Value::Bool(true) {
            return Err(format!(
                "{}; install it with: pip install numpy",
                v["why"].as_str().unwrap_or("numpy is not available")
            ));
        }
        p.name = format!("NumPy {}", v["numpy"].as_str().unwrap_or("?"));
        Ok(p)
    }

    fn read(&mut self) -> Result<serde_json::Value, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err("the NumPy peer exited".into()),
            Ok(_) => serde_json::from_str(&line).map_err(|e| format!("bad answer ({e})")),
            Err(e) => Err(e.to_string()),
        }
    }

    fn ask(&mut self, req: serde_json::Value) -> Result<serde_json::Value, String> {
        let w = self.stdin.as_mut().ok_or("closed")?;
        writeln!(w, "{req}")
            .and_then(|_| w.flush())
            .map_err(|e| e.to_string())?;
        let v = self.read()?;
        match v["error"].as_str() {
            Some(e) => Err(format!("NumPy failed: {e}")),
            None => Ok(v),
        }
    }

    /// Seconds of `reps` runs of row `id`, back to back.
    fn time(&mut self, id: &str, reps: usize) -> Result<Vec<f64>, String> {
        let v = self.ask(serde_json::json!({"row": id, "reps": reps}))?;
        Ok(v["times"]
            .as_array()
            .ok_or("no times")?
            .iter()
            .filter_map(|t| t.as_f64())
            .collect())
    }

    /// Frees the peer's arrays of row `id` (`all`: and its shared inputs).
    fn drop_row(&mut self, id: &str, all: bool) {
        let _ = self.ask(serde_json::json!({"row": id, "drop": true, "all": all}));
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The bench's timer: stride's op and the peer's rows `peers`, one warm-up run each, then
/// `reps` rounds of one run each, alternating which side goes first. Best times, in seconds
/// (a peer's `None`: no peer, or it failed — said once).
struct Bench {
    peer: Option<Peer>,
}

impl Bench {
    fn time(
        &mut self,
        reps: usize,
        mut ours: impl FnMut(),
        peers: &[&str],
    ) -> (f64, Vec<Option<f64>>) {
        let reps = reps.max(1);
        let mut mine = Vec::with_capacity(reps);
        let mut theirs: Vec<Vec<f64>> = vec![vec![]; peers.len()];
        once(&mut ours);
        let mut failed = false;
        let mut peer_round = |p: &mut Option<Peer>, keep: bool, theirs: &mut Vec<Vec<f64>>| {
            if let Some(pp) = p.as_mut() {
                for (k, id) in peers.iter().enumerate() {
                    match pp.time(id, 1) {
                        Ok(t) if keep => theirs[k].extend(t),
                        Ok(_) => {}
                        Err(e) => {
                            println!("  NumPy row {id}: {e}");
                            failed = true;
                        }
                    }
                }
            }
            if failed {
                *p = None;
            }
        };
        peer_round(&mut self.peer, false, &mut theirs);
        for r in 0..reps {
            if r % 2 == 1 {
                peer_round(&mut self.peer, true, &mut theirs);
            }
            mine.push(once(&mut ours));
            if r % 2 == 0 {
                peer_round(&mut self.peer, true, &mut theirs);
            }
        }
        let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let np = theirs
            .iter()
            .map(|v| (!v.is_empty()).then(|| min(v)))
            .collect();
        if let Some(p) = self.peer.as_mut() {
            for id in peers {
                p.drop_row(id, false);
            }
        }
        (min(&mine), np)
    }
}

/// The bandwidths a row is judged against, all measured in this run.
struct Floors {
    /// The machine's memory bandwidth: the faster of a parallel copy and an in-place update
    /// (`x += s·y`, no write-allocate traffic) between preallocated, touched buffers; what
    /// `stride bench cpu` uses too. `floor` = bytes ÷ this.
    machine: f64,
    /// The parallel copy alone (bytes read + written ÷ time).
    copy: f64,
    /// A copy into a fresh tensor (what a new result pays for its pages).
    fresh: f64,
}

/// Prints a row: stride's best time, its floors (and the fresh-result floor), NumPy's.
fn row(name: &str, secs: f64, bytes: f64, fl: &Floors, fresh: bool, np: &[(&str, Option<f64>)]) {
    let x = |bw: f64| format!("{:6.1} ms ({:.2}x)", bytes / bw * 1e3, secs / (bytes / bw));
    let mut o = format!(
        "{name:<54} {:8.1} ms  floor {}  copy-floor {}",
        secs * 1e3,
        x(fl.machine),
        x(fl.copy)
    );
    if fresh {
        o += &format!("  fresh-floor {}", x(fl.fresh));
    }
    for (what, t) in np {
        if let Some(t) = t {
            o += &format!(
                "  | {what} {:7.1} ms ({:.2}x stride's time)",
                t * 1e3,
                t / secs
            );
        }
    }
    println!("{o}");
}

/// A time beside NumPy's, for the sort rows (no floor: not memory-bound).
fn row_vs(name: &str, secs: f64, np: &[(&str, Option<f64>)]) {
    let mut o = format!("{name:<54} {:8.2} ms", secs * 1e3);
    for (what, t) in np {
        if let Some(t) = t {
            o += &format!(
                "  | {what} {:7.2} ms (stride/NumPy {:.2})",
                t * 1e3,
                secs / t
            );
        }
    }
    println!("{o}");
}

/// An f32 buffer allocated as a tensor's storage is (huge-page advice), every page touched.
fn tensor_like_buffer(n: usize, v: f32) -> CpuBuffer {
    let mut b = CpuBuffer::zeros(DType::F32, n);
    f32::slice_mut(&mut b).unwrap().fill(v);
    b
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

/// Plain-Rust random-row copies with the same index: what this machine allows for the access
/// pattern, with no tensor machinery (parallel over rows; `ahead` > 0 prefetches the source
/// row that many rows ahead, into L1, or into L2 with `l2`).
fn raw_rows(x: &[f32], idx: &[i64], d: usize, out: &mut [f32], ahead: usize, l2: bool) {
    use rayon::prelude::*;
    out.par_chunks_mut(d * 4096).enumerate().for_each(|(c, o)| {
        let base = c * 4096;
        for (r, row) in o.chunks_mut(d).enumerate() {
            let k = base + r;
            #[cfg(target_arch = "x86_64")]
            if ahead > 0 && k + ahead < idx.len() {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
                let p = x[idx[k + ahead] as usize * d..].as_ptr() as *const i8;
                for l in (0..d * 4).step_by(64) {
                    // SAFETY: a prefetch is a hint and never faults.
                    unsafe {
                        if l2 {
                            _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(l))
                        } else {
                            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(l))
                        }
                    };
                }
            }
            let s = idx[k] as usize * d;
            row.copy_from_slice(&x[s..s + d]);
        }
    });
}

/// [`raw_rows`] with `ahead = 16` into L2 and streaming (non-temporal) stores: the output's cache
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
            if k + 16 < idx.len() {
                let p = x[idx[k + 16] as usize * d..].as_ptr() as *const i8;
                for l in (0..d * 4).step_by(64) {
                    // SAFETY: a prefetch is a hint and never faults.
                    unsafe { _mm_prefetch::<{ _MM_HINT_T1 }>(p.wrapping_add(l)) };
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
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let on = |section: &str| filter.is_empty() || filter.split(',').any(|f| section.contains(f));
    let threads = rayon::current_num_threads();
    let reps = reps();
    let peer = Peer::start();
    println!(
        "stride index/sort bench: {threads} threads, best of {reps} runs per figure; peer: {}; load average at start: {}",
        match &peer {
            Ok(p) => format!("{} (1 thread), alternating runs with stride's", p.name),
            Err(e) => format!("none ({e})"),
        },
        loadavg()
    );
    let mut bench = Bench { peer: peer.ok() };
    let (n, d) = (1_000_000usize, 64usize);
    let mut rng = Rng(42);
    let x: Vec<f32> = (0..n * d).map(|i| (i % 1000) as f32).collect();
    let idx: Vec<i64> = (0..n).map(|_| (rng.next() % n as u64) as i64).collect();
    let bytes_rows = (n * d * 4) as f64;

    // ---- copy bandwidth: the floor ---------------------------------------------------------
    let par_copy = |dst: &mut [f32], src: &[f32]| {
        use rayon::prelude::*;
        dst.par_chunks_mut(1 << 16)
            .zip(src.par_chunks(1 << 16))
            .for_each(|(a, b)| a.copy_from_slice(b));
    };
    let mut dst = vec![0f32; n * d];
    dst.copy_from_slice(&x);
    let t_vec = best(reps.max(5), || par_copy(&mut dst, &x));
    let mut xb = tensor_like_buffer(n * d, 0.0);
    f32::slice_mut(&mut xb).unwrap().copy_from_slice(&x);
    let mut db = tensor_like_buffer(n * d, 1.0);
    drop(dst);
    let (xs, ds) = (f32::slice(&xb).unwrap(), f32::slice_mut(&mut db).unwrap());
    let t_thp = best(reps.max(5), || par_copy(ds, xs));
    let t_copy = t_vec.min(t_thp);
    let copy_bw = 2.0 * bytes_rows / t_copy;
    let t_update = best(reps.max(5), || {
        use rayon::prelude::*;
        ds.par_chunks_mut(1 << 16)
            .zip(xs.par_chunks(1 << 16))
            .for_each(|(a, b)| {
                for (p, q) in a.iter_mut().zip(b) {
                    *p += 1e-30 * q;
                }
            });
    });
    let update_bw = 3.0 * bytes_rows / t_update;
    // a fresh copy through stride's allocator (what an op returning a new tensor pays)
    let x_tensor = Tensor::from_vec(x.clone(), [n, d]).unwrap();
    let t_fresh = best(reps.max(5), || {
        std::hint::black_box(x_tensor.clone_tensor().unwrap());
    });
    drop(x_tensor);
    let fl = Floors {
        machine: copy_bw.max(update_bw),
        copy: copy_bw,
        fresh: 2.0 * bytes_rows / t_fresh,
    };
    println!(
        "memory bandwidth {:.1} GB/s = the faster of: a parallel copy of 256 MB between preallocated buffers {:.1} ms = {:.1} GB/s (read + write; Vec {:.1} ms, tensor-like buffers {:.1} ms), an in-place x += s*y {:.1} ms = {:.1} GB/s (read x, y, write x); a copy into a fresh tensor: {:.1} ms = {:.1} GB/s",
        fl.machine / 1e9,
        t_copy * 1e3,
        copy_bw / 1e9,
        t_vec * 1e3,
        t_thp * 1e3,
        t_update * 1e3,
        update_bw / 1e9,
        t_fresh * 1e3,
        fl.fresh / 1e9,
    );
    println!("floor = bytes / memory bandwidth; copy-floor = bytes / copy rate; fresh-floor = bytes / fresh-copy rate; (Nx) = time / floor");
    // a row gather moves every output byte twice (read the row, write it) plus the index
    let moved = 2.0 * bytes_rows + (n * 8) as f64;
    if on("raw") {
        for (ahead, l2) in [(0usize, false), (8, false), (16, true)] {
            let t = best(reps, || raw_rows(xs, &idx, d, ds, ahead, l2));
            let into = if l2 { "L2" } else { "L1" };
            let name = format!("raw random-row copy (plain Rust, ahead={ahead} into {into})");
            row(&name, t, moved, &fl, false, &[]);
        }
        let t = best(reps, || raw_rows_stream(xs, &idx, d, ds));
        row(
            "raw random-row copy (ahead=16 into L2, streaming)",
            t,
            moved,
            &fl,
            false,
            &[],
        );
        let t = best(reps, || {
            let mut out = CpuBuffer::zeros(DType::F32, n * d);
            raw_rows(xs, &idx, d, f32::slice_mut(&mut out).unwrap(), 16, true);
            std::hint::black_box(&out);
        });
        row(
            "raw random-row copy (ahead=16, L2) into a fresh buffer",
            t,
            moved,
            &fl,
            true,
            &[],
        );
        let t = best(reps, || raw_scatter_add(ds, xs, &idx, d));
        let moved_sc = 3.0 * bytes_rows + (n * 8) as f64;
        row(
            "raw scatter-add of random rows (plain Rust)",
            t,
            moved_sc,
            &fl,
            false,
            &[],
        );
    }
    drop((xb, db));

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
            bool,
        );
        let gathers: Vec<Gather> = vec![
            (
                "index_select [1M,64] f32 by 1M random i64",
                Box::new(|| xt.index_select(0, &it).unwrap()),
                Box::new(|o| {
                    xt.index_select_out(0, &it, o).unwrap();
                }),
                true,
            ),
            (
                "embedding (same sizes)",
                Box::new(|| xt.embedding(&it).unwrap()),
                Box::new(|o| {
                    xt.embedding_out(&it, o).unwrap();
                }),
                false,
            ),
            (
                "gather dim 0, expanded [1M,64] index",
                Box::new(|| xt.gather(0, &e).unwrap()),
                Box::new(|o| {
                    xt.gather_out(0, &e, o).unwrap();
                }),
                true,
            ),
        ];
        for (name, fresh, into, peer) in &gathers {
            let p: &[&str] = if *peer { &["take"] } else { &[] };
            let (t, np) = bench.time(
                reps,
                || {
                    std::hint::black_box(fresh());
                },
                p,
            );
            let np: Vec<_> = np.into_iter().map(|t| ("np.take", t)).collect();
            row(&format!("{name}, fresh"), t, moved, &fl, true, &np);
            let p: &[&str] = if *peer { &["take_out"] } else { &[] };
            let (t, np) = bench.time(reps, || into(&out), p);
            let np: Vec<_> = np.into_iter().map(|t| ("np.take(out=)", t)).collect();
            row(&format!("{name}, _out"), t, moved, &fl, false, &np);
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
            &fl,
            true,
            &[],
        );
        let t = best(reps.min(3), || {
            xt.gather_out(0, &full, &out).unwrap();
        });
        row(
            "gather dim 0, materialised [1M,64] i64 index, _out",
            t,
            moved_full,
            &fl,
            false,
            &[],
        );
    }

    // ---- scatters -------------------------------------------------------------------------------
    if on("scatter") {
        let acc = Tensor::zeros([n, d], DType::F32, &CPU).unwrap();
        acc.add_(1.0).unwrap(); // touch the pages
                                // in place: read the destination row, read the source row, write the destination row
        let moved_sc = 3.0 * bytes_rows + (n * 8) as f64;
        // np.add.at takes seconds: fewer rounds of it
        let (t, np) = bench.time(
            reps.min(3),
            || {
                acc.scatter_add_(0, &e, &xt).unwrap();
            },
            &["add_at"],
        );
        let np: Vec<_> = np.into_iter().map(|t| ("np.add.at", t)).collect();
        row(
            "scatter_add_ dim 0, expanded [1M,64] index",
            t,
            moved_sc,
            &fl,
            false,
            &np,
        );
        // the same index materialised (`idx[:, None].expand(..).contiguous()`): read once, in
        // the validation pass that also finds it constant along its rows
        let full = e.contiguous().unwrap();
        let t = best(reps, || {
            acc.scatter_add_(0, &full, &xt).unwrap();
        });
        row(
            "scatter_add_ dim 0, materialised [1M,64] i64 index",
            t,
            3.0 * bytes_rows + (n * d * 8) as f64,
            &fl,
            false,
            &[],
        );
        drop(full);
        let t = best(reps, || {
            acc.index_add_(0, &it, &xt, 1i64).unwrap();
        });
        row(
            "index_add_ [1M,64] f32, 1M random rows",
            t,
            moved_sc,
            &fl,
            false,
            &[],
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
            &fl,
            true,
            &[],
        );
        let t = best(reps.min(5), || {
            acc.scatter_add_out(0, &e, &xt, &out).unwrap();
        });
        row(
            "scatter_add (copy of self + scatter), _out",
            t,
            moved_oop,
            &fl,
            false,
            &[],
        );
        let t = best(reps.min(5), || {
            acc.index_add_out(0, &it, &xt, 1i64, &out).unwrap();
        });
        row(
            "index_add (copy of self + scatter), _out",
            t,
            moved_oop,
            &fl,
            false,
            &[],
        );
    }
    drop((xt, e));
    if let Some(p) = bench.peer.as_mut() {
        p.drop_row("take", true);
    }

    // ---- sort and selection -----------------------------------------------------------------------
    if on("sort") {
        let r = reps.max(10);
        let y: Vec<f32> = (0..32 * 50_000).map(|_| rng.normal()).collect();
        let yt = Tensor::from_vec(y, [32, 50_000]).unwrap();
        let (t, np) = bench.time(
            r,
            || {
                std::hint::black_box(yt.topk(50, 1, true, true).unwrap());
            },
            &["topk", "argpartition"],
        );
        row_vs(
            "topk k=50 over [32, 50000] f32 (values + indices)",
            t,
            &[
                ("argpartition + sort the 50", np[0]),
                ("argpartition alone", np[1]),
            ],
        );
        let s: Vec<f32> = (0..1_000_000).map(|_| rng.normal()).collect();
        let st = Tensor::from_vec(s, [1_000_000]).unwrap();
        let (t, np) = bench.time(
            r,
            || {
                std::hint::black_box(st.sort(0, false, false).unwrap());
            },
            &["argsort_take", "sort"],
        );
        row_vs(
            "sort 1M f32 (values + i64 indices)",
            t,
            &[
                ("np.argsort + take (values + indices)", np[0]),
                ("np.sort (values only)", np[1]),
            ],
        );
        let s2 = st.reshape(&[1000, 1000]).unwrap();
        let (t, np) = bench.time(
            r,
            || {
                std::hint::black_box(s2.sort(1, false, false).unwrap());
            },
            &["argsort_2d"],
        );
        row_vs(
            "sort [1000, 1000] f32 along dim 1",
            t,
            &[("np.argsort axis=1 (indices only)", np[0])],
        );
        let (t, np) = bench.time(
            r,
            || {
                std::hint::black_box(st.kthvalue(500_000, 0, false).unwrap());
            },
            &["partition"],
        );
        row_vs("kthvalue / median of 1M f32", t, &[("np.partition", np[0])]);
    }
    println!("load average at the end: {}", loadavg());
}
