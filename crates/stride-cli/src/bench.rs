//! `stride bench cpu`: each figure beside its floor (bytes ÷ measured memory bandwidth, flops ÷
//! measured peak f32 FMA rate, whichever is larger) and beside NumPy measured in the same run.
//!
//! Each row is timed in alternating blocks of stride and NumPy repetitions of the same
//! operation, after a warm-up of both, and reported as the best and the median of many runs
//! (targets are judged on both). On a machine shared with other work the best is what the code
//! does when left alone, and the median what a typical run got; both sides of a row met the
//! same conditions. Nothing here asserts on time.
//!
//! - [`measure`]: the timers (interleaved sampling), the bandwidth and peak-rate measurements;
//! - [`rows`]: the benchmarks, their bytes/flops and targets;
//! - [`peer`]: the `scripts/bench_numpy.py --serve` child process;
//! - [`cuda`]: `stride bench cuda`, beside PyTorch (`scripts/bench_torch.py`);
//! - [`gpt`]: `stride bench gpt`, a GPT's training steps beside PyTorch (`scripts/gpt_torch.py`);
//! - [`decode`]: `stride bench decode`, a Llama's prefill and decode rates, eager and CUDA
//!   graph, beside PyTorch (`scripts/llama_torch_decode.py`);
//! - [`quant_cuda`]: `stride bench quant-cuda`, the quantized-weight products on SmolLM2's
//!   shapes beside the copy bandwidth and cuBLAS bf16.

mod cuda;
mod ddp;
mod decode;
mod gpt;
mod measure;
mod peer;
mod quant_cuda;
mod rows;

use measure::Stats;
use rows::{Row, Sizes, Target};
use serde_json::json;

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
    /// GPT training steps (GPT-2-small sized by default): tokens/s, MFU and peak memory
    /// beside PyTorch eager and torch.compile.
    Gpt(gpt::GptArgs),
    /// Data-parallel training over the GPUs of this machine: all-reduce bandwidth and a GPT's
    /// scaling from one GPU to `--gpus`, beside PyTorch DDP under torchrun.
    Ddp(ddp::DdpArgs),
    /// A Llama decoder (SmolLM2-135M's shape): prefill and per-token decode rates, eager and
    /// with the step captured as a CUDA graph, beside the weight-bandwidth floor and PyTorch
    /// (eager, CUDA graph, torch.compile).
    Decode(decode::DecodeArgs),
    /// CUDA products with GGUF block-quantized weights (Q4_1, Q8_0) on SmolLM2's weight
    /// shapes: time, weight bandwidth beside the copy bandwidth, cuBLAS bf16 beside.
    QuantCuda(quant_cuda::QuantCudaArgs),
}

#[derive(clap::Args)]
struct CpuArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Small sizes and few repetitions: a smoke run (seconds), not a measurement.
    #[arg(long)]
    quick: bool,
    /// Only the rows whose id contains one of these (comma-separated), e.g. `matmul,mul_`.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Seconds of timed runs per row and side (stride, NumPy); more gives steadier figures.
    #[arg(long)]
    budget: Option<f64>,
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
        What::Gpt(g) => gpt::run(g),
        What::Ddp(d) => ddp::run(d),
        What::Decode(d) => decode::run(d),
        What::QuantCuda(q) => quant_cuda::run(q),
    }
}

/// A peer script of `scripts/`: in the source tree this binary was built from, else under
/// the current directory (the GPU machine runs a carried binary from the repository root).
fn peer_script(name: &str) -> Result<std::path::PathBuf, String> {
    let built = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name);
    let here = std::path::PathBuf::from("scripts").join(name);
    [built, here]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| format!("scripts/{name} not found (run from the repository root)"))
}

/// Runs a peer script's command and returns its stdout; an error (the script's last line on
/// stderr) when it can't run or fails.
fn run_peer(cmd: &mut std::process::Command, script: &std::path::Path) -> Result<Vec<u8>, String> {
    let o = cmd.output().map_err(|e| {
        format!(
            "could not run `{}` ({e}); install Python 3 and PyTorch",
            cmd.get_program().to_string_lossy()
        )
    })?;
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        return Err(format!(
            "{} failed: {}",
            script.display(),
            err.lines().last().unwrap_or("")
        ));
    }
    Ok(o.stdout)
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
    let sizes = Sizes::new(args.quick, args.budget);
    let say = |s: &str| {
        if !args.json {
            eprintln!("{s}");
        }
    };
    say("measuring memory bandwidth and peak FMA rate ...");
    // many short runs rather than a few long ones: on a shared machine the best of them is
    // more likely to have had the cores to itself (64 MiB per buffer: twice the L3)
    let bw_bytes = if args.quick { 16 << 20 } else { 64 << 20 };
    let bw_reps = if args.quick { 2 } else { 300 };
    let gap = sizes.sampling.gap.min(std::time::Duration::from_millis(20));
    let (bandwidth, bw_kernel) = measure::bandwidth(bw_bytes, bw_reps, gap);
    let (peak, peak_method) = measure::peak_flops(
        if args.quick { 0.01 } else { 0.02 },
        if args.quick { 2 } else { 40 },
        gap,
    );
    let m = Machine {
        threads: rayon::current_num_threads(),
        bandwidth,
        bandwidth_method: format!(
            "best of memcpy and in-place x += s*y over {} MiB on all threads, logical bytes / time, best of {bw_reps} runs each after {} ms idle: {bw_kernel}",
            bw_bytes >> 20,
            gap.as_millis()
        ),
        peak,
        peak_method,
    };
    let mut peer = if args.no_peer {
        Err("skipped (--no-peer)".to_string())
    } else {
        say("starting the NumPy peer ...");
        peer::Peer::start(&args.python, args.peer_script.as_deref(), args.quick)
    };
    let peer_name = peer.as_ref().map(|p| p.name.clone()).map_err(Clone::clone);
    say("timing (stride and NumPy in alternating blocks) ...");
    let rows = rows::run_all(&sizes, peer.as_mut().ok(), &args.only, &mut |name| {
        say(&format!("  {name}"))
    })?;
    drop(peer);
    let how = sampling_text(&sizes.sampling);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&m, &rows, &peer_name, &how, args.quick))
                .map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", table(&m, &rows, &peer_name, &how, args.quick));
    }
    Ok(())
}

fn sampling_text(s: &measure::Sampling) -> String {
    format!(
        "each row: {} warm-up runs per side, then {}..{} timed runs per side (about {} s each) in >= {} alternating blocks of stride and NumPy, {} ms idle before each block; best and median reported",
        s.warmup,
        s.min_samples,
        s.max_samples,
        s.budget,
        s.min_rounds,
        s.gap.as_millis()
    )
}

fn floor(m: &Machine, r: &Row) -> f64 {
    (r.bytes / m.bandwidth).max(r.flops / m.peak)
}

/// Which statistic a target is judged on.
#[derive(Clone, Copy)]
enum Pick {
    Best,
    Median,
}

fn pick(s: &Stats, p: Pick) -> f64 {
    match p {
        Pick::Best => s.best,
        Pick::Median => s.median,
    }
}

fn numpy_of(r: &Row) -> Option<&Stats> {
    r.numpy.as_ref().and_then(|n| n.as_ref().ok())
}

/// Whether a target is met on the best (or median) times: `None` when it can't be judged (no
/// peer, no baseline).
fn met(t: &Target, r: &Row, rows: &[Row], p: Pick) -> Option<bool> {
    let ours = pick(&r.stride, p);
    let np = || numpy_of(r).map(|n| pick(n, p));
    match t {
        Target::WithinOfNumpy(f) => np().map(|n| ours <= f * n),
        Target::BandwidthOfNumpy(f) => np().map(|n| r.bytes / ours >= f * r.bytes / n),
        Target::FasterThanNumpy(f) => np().map(|n| n / ours >= *f),
        Target::WithinOfRow(id, f) => rows
            .iter()
            .find(|b| &b.id == id)
            .map(|b| ours <= f * pick(&b.stride, p)),
    }
}

fn stats_json(s: &Stats) -> serde_json::Value {
    json!({"best_seconds": s.best, "median_seconds": s.median, "samples": s.samples})
}

fn to_json(
    m: &Machine,
    rows: &[Row],
    peer: &Result<String, String>,
    how: &str,
    quick: bool,
) -> serde_json::Value {
    json!({
        "quick": quick,
        "sampling": how,
        "machine": {
            "threads": m.threads,
            "bandwidth_bytes_per_s": m.bandwidth,
            "bandwidth_method": m.bandwidth_method,
            "peak_flops_per_s": m.peak,
            "peak_method": m.peak_method,
        },
        "peer": match peer {
            Ok(name) => json!({"available": true, "name": name}),
            Err(why) => json!({"available": false, "why": why}),
        },
        "rows": rows.iter().map(|r| {
            json!({
                "id": r.id,
                "name": r.name,
                // the best of the timed runs; "stride" has the median and the count too
                "seconds": r.stride.best,
                "stride": stats_json(&r.stride),
                "bytes": r.bytes,
                "flops": r.flops,
                "floor_seconds": floor(m, r),
                "numpy_seconds": numpy_of(r).map(|n| n.best),
                "numpy": match &r.numpy {
                    None => serde_json::Value::Null,
                    Some(Ok(n)) => stats_json(n),
                    Some(Err(e)) => json!({"error": e}),
                },
                "targets": r.targets.iter().map(|t| json!({
                    "target": t.describe(),
                    "met_best": met(t, r, rows, Pick::Best),
                    "met_median": met(t, r, rows, Pick::Median),
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

fn table(
    m: &Machine,
    rows: &[Row],
    peer: &Result<String, String>,
    how: &str,
    quick: bool,
) -> String {
    let mut o = String::new();
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
        Ok(name) => o += &format!("  peer             {name} (measured in this run)\n"),
        Err(why) => o += &format!("  peer             NumPy unavailable: {why}\n"),
    }
    o += &format!("  sampling         {how}\n");
    o += "  floor = max(bytes / bandwidth, flops / peak); x floor = best / floor; vs NumPy = NumPy time / stride time (> 1: stride faster), best (median); met: on best / on median\n\n";
    let head = [
        "benchmark",
        "stride best",
        "median",
        "rate",
        "floor",
        "x floor",
        "NumPy best",
        "median",
        "NumPy rate",
        "vs NumPy",
        "target",
        "met",
    ];
    let text_cols = 10; // from here on, left-aligned
    let mut cells: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        let f = floor(m, r);
        let np = numpy_of(r);
        let targets: Vec<String> = r.targets.iter().map(|t| t.describe()).collect();
        let mets: Vec<String> = r
            .targets
            .iter()
            .map(|t| {
                let one = |p| match met(t, r, rows, p) {
                    Some(true) => "yes",
                    Some(false) => "NO",
                    None => "-",
                };
                format!("{}/{}", one(Pick::Best), one(Pick::Median))
            })
            .collect();
        let s = &r.stride;
        cells.push(vec![
            r.name.clone(),
            fmt_time(s.best),
            fmt_time(s.median),
            fmt_rate(r, s.best),
            fmt_time(f),
            format!("{:.2}", s.best / f),
            match &r.numpy {
                Some(Err(_)) => "failed".into(),
                _ => np.map_or("-".into(), |n| fmt_time(n.best)),
            },
            np.map_or("-".into(), |n| fmt_time(n.median)),
            np.map_or("-".into(), |n| fmt_rate(r, n.best)),
            np.map_or("-".into(), |n| {
                format!("{:.2}x ({:.2}x)", n.best / s.best, n.median / s.median)
            }),
            targets.join("; "),
            mets.join("; "),
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
                if c == 0 || c >= text_cols {
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
    for r in rows {
        if let Some(Err(e)) = &r.numpy {
            o += &format!("  NumPy failed on {}: {e}\n", r.id);
        }
    }
    o
}
