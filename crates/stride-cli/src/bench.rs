//! `stride bench cpu`: each figure beside its floor (bytes ÷ measured memory bandwidth, flops ÷
//! measured peak f32 FMA rate, whichever is larger) and beside NumPy measured in the same run.
//! Times are medians after a warm-up; nothing here asserts on time.
//!
//! - [`measure`]: the timer, the bandwidth and peak-rate measurements;
//! - [`rows`]: the benchmarks, their bytes/flops and targets;
//! - [`peer`]: running `scripts/bench_numpy.py`;
//! - [`cuda`]: `stride bench cuda`, beside PyTorch (`scripts/bench_torch.py`).

mod cuda;
mod measure;
mod peer;
mod rows;

use rows::{Row, Sizes, Target};
use serde_json::json;
use std::collections::BTreeMap;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// CPU benchmarks: matmul, elementwise, copies over contiguous and strided layouts.
    Cpu(CpuArgs),
    /// CUDA benchmarks beside the device's copy bandwidth and PyTorch on the same GPU.
    Cuda(cuda::CudaArgs),
}

#[derive(clap::Args)]
struct CpuArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Small sizes and few repetitions: a smoke run (seconds), not a measurement.
    #[arg(long)]
    quick: bool,
    /// Don't run the NumPy peer.
    #[arg(long)]
    no_peer: bool,
    /// The Python interpreter that runs the NumPy peer.
    #[arg(long, default_value = "python3")]
    python: String,
    /// The peer script (default: scripts/bench_numpy.py of this source tree).
    #[arg(long)]
    peer_script: Option<std::path::PathBuf>,
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    match a.what {
        What::Cpu(c) => cpu(c),
        What::Cuda(c) => cuda::run(c),
    }
}

/// The machine's ceilings.
struct Machine {
    threads: usize,
    bandwidth: f64,
    bandwidth_method: String,
    peak: f64,
    peak_method: String,
}

fn cpu(args: CpuArgs) -> Result<(), String> {
    let sizes = Sizes::new(args.quick);
    let say = |s: &str| {
        if !args.json {
            eprintln!("{s}");
        }
    };
    say("measuring memory bandwidth and peak FMA rate ...");
    let bw_bytes = if args.quick { 16 << 20 } else { 256 << 20 };
    let bw_reps = if args.quick { 2 } else { 5 };
    let (bandwidth, bw_kernel) = measure::bandwidth(bw_bytes, bw_reps);
    let (peak, peak_method) = measure::peak_flops(
        if args.quick { 0.01 } else { 0.2 },
        if args.quick { 2 } else { 5 },
    );
    let m = Machine {
        threads: rayon::current_num_threads(),
        bandwidth,
        bandwidth_method: format!(
            "best of memcpy and in-place x += s*y over {} MiB on all threads, logical bytes / time, best of {bw_reps}: {bw_kernel}",
            bw_bytes >> 20
        ),
        peak,
        peak_method,
    };
    let rows = rows::run_all(&sizes, |name| say(&format!("  {name}")))?;
    let peer = if args.no_peer {
        Err("skipped (--no-peer)".to_string())
    } else {
        say("running the NumPy peer ...");
        match &args.peer_script {
            Some(p) => peer::run_script(&args.python, p, args.quick),
            None => peer::numpy(&args.python, args.quick),
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&m, &rows, &peer, args.quick))
                .map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", table(&m, &rows, &peer, args.quick));
    }
    Ok(())
}

fn floor(m: &Machine, r: &Row) -> f64 {
    (r.bytes / m.bandwidth).max(r.flops / m.peak)
}

/// Whether a target is met: `None` when it can't be judged (no peer, no baseline).
fn met(t: &Target, r: &Row, rows: &[Row], peer: Option<&BTreeMap<String, f64>>) -> Option<bool> {
    let np = || peer.and_then(|p| p.get(&r.id)).copied();
    match t {
        Target::WithinOfNumpy(f) => np().map(|n| r.seconds <= f * n),
        Target::BandwidthOfNumpy(f) => np().map(|n| r.bytes / r.seconds >= f * r.bytes / n),
        Target::FasterThanNumpy(f) => np().map(|n| n / r.seconds >= *f),
        Target::WithinOfRow(id, f) => rows
            .iter()
            .find(|b| &b.id == id)
            .map(|b| r.seconds <= f * b.seconds),
    }
}

fn to_json(
    m: &Machine,
    rows: &[Row],
    peer: &Result<peer::Peer, String>,
    quick: bool,
) -> serde_json::Value {
    let ps = peer.as_ref().ok().map(|p| &p.seconds);
    json!({
        "quick": quick,
        "machine": {
            "threads": m.threads,
            "bandwidth_bytes_per_s": m.bandwidth,
            "bandwidth_method": m.bandwidth_method,
            "peak_flops_per_s": m.peak,
            "peak_method": m.peak_method,
        },
        "peer": match peer {
            Ok(p) => json!({"available": true, "name": p.name}),
            Err(why) => json!({"available": false, "why": why}),
        },
        "rows": rows.iter().map(|r| {
            let np = ps.and_then(|p| p.get(&r.id)).copied();
            json!({
                "id": r.id,
                "name": r.name,
                "seconds": r.seconds,
                "bytes": r.bytes,
                "flops": r.flops,
                "floor_seconds": floor(m, r),
                "numpy_seconds": np,
                "targets": r.targets.iter().map(|t| json!({
                    "target": t.describe(),
                    "met": met(t, r, rows, ps),
                })).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
    })
}

fn fmt_time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

/// The rate a row is best read in: GFLOP/s for products, GB/s for memory-bound ops.
fn fmt_rate(r: &Row, s: f64) -> String {
    if r.flops > 0.0 {
        format!("{:.0} GF/s", r.flops / s / 1e9)
    } else {
        format!("{:.1} GB/s", r.bytes / s / 1e9)
    }
}

fn table(m: &Machine, rows: &[Row], peer: &Result<peer::Peer, String>, quick: bool) -> String {
    let mut o = String::new();
    let ps = peer.as_ref().ok().map(|p| &p.seconds);
    o += &format!(
        "stride bench cpu{}  ({} threads)\n",
        if quick {
            " --quick (smoke run, not a measurement)"
        } else {
            ""
        },
        m.threads
    );
    o += &format!(
        "  memory bandwidth {:.1} GB/s  [{}]\n",
        m.bandwidth / 1e9,
        m.bandwidth_method
    );
    o += &format!(
        "  peak f32 rate    {:.0} GFLOP/s  [{}]\n",
        m.peak / 1e9,
        m.peak_method
    );
    match peer {
        Ok(p) => o += &format!("  peer             {} (measured in this run)\n", p.name),
        Err(why) => o += &format!("  peer             NumPy unavailable: {why}\n"),
    }
    o += "  floor = max(bytes / bandwidth, flops / peak); x floor = time / floor; vs NumPy = NumPy time / stride time (> 1: stride faster)\n\n";
    let head = [
        "benchmark",
        "stride",
        "rate",
        "floor",
        "x floor",
        "NumPy",
        "NumPy rate",
        "vs NumPy",
        "target",
        "met",
    ];
    let mut cells: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        let f = floor(m, r);
        let np = ps.and_then(|p| p.get(&r.id)).copied();
        let targets: Vec<String> = r.targets.iter().map(|t| t.describe()).collect();
        let mets: Vec<&str> = r
            .targets
            .iter()
            .map(|t| match met(t, r, rows, ps) {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            })
            .collect();
        cells.push(vec![
            r.name.clone(),
            fmt_time(r.seconds),
            fmt_rate(r, r.seconds),
            fmt_time(f),
            format!("{:.2}", r.seconds / f),
            np.map_or("-".into(), fmt_time),
            np.map_or("-".into(), |n| fmt_rate(r, n)),
            np.map_or("-".into(), |n| format!("{:.2}x", n / r.seconds)),
            targets.join("; "),
            mets.join("/"),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| {
            cells
                .iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (i, row) in cells.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, s)| {
                if c == 0 || c >= 8 {
                    format!("{s:<w$}", w = widths[c])
                } else {
                    format!("{s:>w$}", w = widths[c])
                }
            })
            .collect();
        o += line.join("  ").trim_end();
        o += "\n";
        if i == 0 {
            o += &"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1));
            o += "\n";
        }
    }
    o
}
