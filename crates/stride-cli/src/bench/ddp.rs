//! `stride bench ddp`: data-parallel training across the GPUs of this machine, beside
//! PyTorch (`scripts/ddp_torch.py` under torchrun) in the same invocation:
//!
//! - all-reduce bus bandwidth at each size (nccl-tests' definition, `2·(n−1)/n · bytes /
//!   time`), stride's collective beside `torch.distributed.all_reduce`, with the floor at
//!   NVLink 4's 450 GB/s per direction;
//! - a GPT (GPT-2-small sized by default) trained with `--batch` sequences per GPU on one GPU
//!   and on `--gpus`: tokens/s and the scaling efficiency (tokens/s on N ÷ N × one GPU's),
//!   stride with DistributedDataParallel beside PyTorch DDP, and with AdamW's state sharded
//!   over the GPUs (ZeRO-1): its memory saving;
//! - one profiled step on the GPUs: how much of the all-reduce ran beside backward.
//!
//! Each stride measurement is its own launch: this process starts the ranks (`--phase`, a
//! hidden flag, tells them what to measure) and reads rank 0's result from a file.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;
use stride::distributed::{launch_with, LaunchOptions, Launched, ProcessGroup, ReduceOp};
use stride::models::gpt::GptConfig;
use stride::{DType, Device, Tensor};

/// NVLink 4 (H100 SXM): 900 GB/s both directions together, 450 per direction.
const NVLINK_GB_S: f64 = 450.0;

#[derive(clap::Args, Clone)]
pub struct DdpArgs {
    /// GPUs to spread over (cuda:0 … cuda:N-1).
    #[arg(long, default_value_t = 2)]
    gpus: usize,
    /// All-reduce sizes in MiB (f32).
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256,1024")]
    sizes_mib: Vec<usize>,
    /// Timed all-reduces per size (after 5 untimed).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    #[command(flatten)]
    shape: super::gpt::GptShape,
    /// Timed GPT steps (after 5 untimed).
    #[arg(long, default_value_t = 20)]
    steps: u64,
    /// Don't run the PyTorch peer.
    #[arg(long)]
    no_peer: bool,
    /// The Python interpreter that runs the peer.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Write the Chrome trace of one profiled step on the GPUs (rank 0's: its compute and
    /// communication streams) here; open it at ui.perfetto.dev.
    #[arg(long, value_name = "PATH")]
    trace: Option<PathBuf>,
    /// (For the ranks) what to measure: `allreduce` or `gpt`.
    #[arg(long, hide = true)]
    phase: Option<String>,
    /// (For the ranks) where rank 0 writes its result.
    #[arg(long, hide = true)]
    result_file: Option<PathBuf>,
}

pub fn run(a: DdpArgs) -> Result<(), String> {
    if let Some(phase) = a.phase.clone() {
        return rank(a, &phase);
    }
    if a.gpus < 2 {
        return Err("--gpus must be at least 2 (the scaling is against one GPU)".into());
    }
    let say = |s: &str| {
        if !a.json {
            eprintln!("{s}")
        }
    };
    say(&format!("stride: all-reduce over {} GPUs ...", a.gpus));
    let allreduce = stride_phase("allreduce", a.gpus)?;
    say("stride: GPT on 1 GPU ...");
    let one = stride_phase("gpt", 1)?;
    say(&format!("stride: GPT on {} GPUs ...", a.gpus));
    let many = stride_phase("gpt", a.gpus)?;
    say(&format!(
        "stride: GPT on {} GPUs, optimizer state sharded (ZeRO-1) ...",
        a.gpus
    ));
    let zero = stride_phase("gpt-zero", a.gpus)?;
    let mut peer = json!(null);
    if !a.no_peer {
        say("PyTorch: all-reduce, GPT on 1 GPU and DDP ...");
        let sizes: Vec<String> = a.sizes_mib.iter().map(|s| s.to_string()).collect();
        let mut args: Vec<String> = vec![
            "allreduce".into(),
            "--iters".into(),
            a.iters.to_string(),
            "--sizes".into(),
        ];
        args.extend(sizes);
        peer = json!({
            "allreduce": torchrun(&a, a.gpus, &args).unwrap_or_else(|e| json!({"error": e})),
            "gpt_one": torchrun(&a, 1, &gpt_args(&a)).unwrap_or_else(|e| json!({"error": e})),
            "gpt_many": torchrun(&a, a.gpus, &gpt_args(&a)).unwrap_or_else(|e| json!({"error": e})),
        });
    }
    let eff = |one: &Value, many: &Value| -> Option<f64> {
        Some(many["tokens_per_s"].as_f64()? / (a.gpus as f64 * one["tokens_per_s"].as_f64()?))
    };
    let doc = json!({
        "gpus": a.gpus,
        "model": {"layers": a.shape.layers, "dim": a.shape.dim, "heads": a.shape.heads, "context": a.shape.context,
                  "batch_per_gpu": a.shape.batch, "vocab": a.shape.vocab},
        "stride": {"allreduce": allreduce, "gpt_one": one, "gpt_many": many, "gpt_zero": zero,
                   "scaling_efficiency": eff(&one, &many)},
        "peer": peer,
    });
    if a.json {
        println!("{doc}");
        return Ok(());
    }
    println!("all-reduce (f32, in place) over {} GPUs: bus bandwidth, GB/s (floor: NVLink 4, {NVLINK_GB_S} per direction)", a.gpus);
    println!(
        "{:>10} {:>12} {:>12} {:>10}",
        "MiB", "stride", "pytorch", "stride/pt"
    );
    let prow = |i: usize| doc["peer"]["allreduce"]["rows"][i]["bus_gb_s"].as_f64();
    for (i, r) in allreduce["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let s = r["bus_gb_s"].as_f64().unwrap_or(f64::NAN);
        let p = prow(i).unwrap_or(f64::NAN);
        println!(
            "{:>10} {:>12.1} {:>12.1} {:>10.2}",
            r["bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
            s,
            p,
            s / p
        );
    }
    println!(
        "GPT {} layers × {} wide, sequence {}, {} sequences per GPU, bf16 autocast: tokens/s",
        a.shape.layers, a.shape.dim, a.shape.context, a.shape.batch
    );
    println!(
        "{:<14} {:>12} {:>12} {:>12}",
        "",
        "1 GPU",
        format!("{} GPUs", a.gpus),
        "efficiency"
    );
    let grow = |name: &str, one: &Value, many: &Value| {
        println!(
            "{name:<14} {:>12.0} {:>12.0} {:>11.1}%",
            one["tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            many["tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            100.0 * eff(one, many).unwrap_or(f64::NAN)
        )
    };
    grow("stride", &one, &many);
    grow("stride ZeRO-1", &one, &zero);
    let mib = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN) / 1048576.0;
    println!(
        "ZeRO-1 on cuda:0: AdamW state {:.1} → {:.1} MiB, peak memory {:.1} → {:.1} MiB",
        mib(&many, "optimizer_state_bytes"),
        mib(&zero, "optimizer_state_bytes"),
        mib(&many, "peak_bytes"),
        mib(&zero, "peak_bytes"),
    );
    let o = &many["overlap"];
    if let Some(f) = o["fraction"].as_f64() {
        println!(
            "stride, one profiled step on cuda:0: {} all-reduces busy {:.2} ms on the communication stream, {:.1}% of it beside compute ({:.2} ms busy){}",
            o["collectives"],
            o["comm_ms"].as_f64().unwrap_or(f64::NAN),
            100.0 * f,
            o["compute_ms"].as_f64().unwrap_or(f64::NAN),
            match &a.trace {
                Some(p) => format!("; trace in {}", p.display()),
                None => String::new(),
            }
        );
    }
    if !a.no_peer {
        grow(
            "pytorch DDP",
            &doc["peer"]["gpt_one"],
            &doc["peer"]["gpt_many"],
        );
        for k in ["allreduce", "gpt_one", "gpt_many"] {
            if let Some(e) = doc["peer"][k]["error"].as_str() {
                println!("pytorch {k}: {e}");
            }
        }
    }
    Ok(())
}

fn gpt_args(a: &DdpArgs) -> Vec<String> {
    let mut v = vec!["gpt".to_string()];
    v.extend(a.shape.peer_args());
    v.push("--steps".into());
    v.push(a.steps.to_string());
    v
}

/// One stride measurement over `n` GPUs: launches the ranks and reads rank 0's result.
fn stride_phase(phase: &str, n: usize) -> Result<Value, String> {
    let file = std::env::temp_dir().join(format!(
        "stride-bench-ddp-{}-{phase}-{n}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&file);
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    args.extend([
        "--phase".into(),
        phase.into(),
        "--result-file".into(),
        file.clone().into_os_string(),
    ]);
    let mut o = LaunchOptions::new(&(0..n).map(Device::Cuda).collect::<Vec<_>>());
    o.args = Some(args);
    match launch_with(o).map_err(|e| e.to_string())? {
        Launched::Parent => {}
        Launched::Rank(_) => return Err("internal: the launcher became a rank".into()),
    }
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("rank 0 left no result in {}: {e}", file.display()))?;
    let _ = std::fs::remove_file(&file);
    serde_json::from_str(&text).map_err(|e| format!("bad result from rank 0 ({e})"))
}

/// A rank's side of a measurement.
fn rank(a: DdpArgs, phase: &str) -> Result<(), String> {
    let devices: Vec<Device> = (0..a.gpus).map(Device::Cuda).collect();
    let g = match stride::distributed::launch(&devices).map_err(|e| e.to_string())? {
        Launched::Rank(g) => g,
        Launched::Parent => return Err("--phase is for the ranks `stride bench ddp` starts".into()),
    };
    let out = match phase {
        "allreduce" => allreduce(&a, &g),
        "gpt" => gpt(&a, g.clone(), false),
        "gpt-zero" => gpt(&a, g.clone(), true),
        p => Err(format!("unknown --phase {p:?}")),
    }?;
    if g.rank() == 0 {
        if let Some(f) = &a.result_file {
            std::fs::write(f, out.to_string())
                .map_err(|e| format!("writing {}: {e}", f.display()))?;
        }
    }
    Ok(())
}

fn allreduce(a: &DdpArgs, g: &ProcessGroup) -> Result<Value, String> {
    let e = |e: stride::Error| e.to_string();
    let dev = g.device();
    let Device::Cuda(ordinal) = dev else {
        return Err("the all-reduce benchmark runs on CUDA".into());
    };
    let w = g.world_size() as f64;
    let mut rows = vec![];
    for &mib in &a.sizes_mib {
        let n = mib * (1 << 20) / 4;
        let t = Tensor::full([n], 1.0, DType::F32, &dev).map_err(e)?;
        for _ in 0..5 {
            g.all_reduce_(&t, ReduceOp::Sum)
                .map_err(e)?
                .wait()
                .map_err(e)?;
        }
        stride::cuda::synchronize(ordinal).map_err(e)?;
        g.barrier().map_err(e)?;
        let t0 = Instant::now();
        for _ in 0..a.iters {
            g.all_reduce_(&t, ReduceOp::Sum)
                .map_err(e)?
                .wait()
                .map_err(e)?;
        }
        stride::cuda::synchronize(ordinal).map_err(e)?;
        let dt = t0.elapsed().as_secs_f64() / a.iters as f64;
        let bytes = (n * 4) as f64;
        rows.push(json!({"bytes": bytes, "seconds": dt, "bus_gb_s": 2.0 * (w - 1.0) / w * bytes / dt / 1e9}));
    }
    Ok(
        json!({"world": g.world_size(), "nccl": stride::distributed::nccl_version().ok().map(|v| format!("{}.{}.{}", v.0, v.1, v.2)), "rows": rows}),
    )
}

fn gpt(a: &DdpArgs, g: ProcessGroup, zero: bool) -> Result<Value, String> {
    let e = |e: stride::Error| e.to_string();
    let world = g.world_size();
    let model = GptConfig::modern(
        a.shape.vocab,
        a.shape.context,
        a.shape.layers,
        a.shape.heads,
        a.shape.dim,
    );
    // the global batch: --batch per GPU
    let mut t = super::gpt::bench_trainer(model, a.shape.batch * world, a.shape.vocab, g.device())?;
    t.set_loss_every(0);
    if world > 1 {
        t.distribute_with(g.clone(), zero).map_err(e)?;
    }
    for _ in 0..5 {
        t.step().map_err(e)?;
    }
    t.read_losses().map_err(e)?;
    g.barrier().map_err(e)?;
    let t0 = Instant::now();
    for _ in 0..a.steps {
        t.step().map_err(e)?;
    }
    t.read_losses().map_err(e)?;
    let secs = t0.elapsed().as_secs_f64();
    let tokens = a.steps as f64 * (a.shape.batch * world * a.shape.context) as f64;
    let peak_bytes = stride::memory_stats(g.device()).peak_bytes;
    // one more step, profiled (untimed): how much of the gradients' all-reduce ran beside
    // backward's kernels
    let mut overlap = json!(null);
    if world > 1 && !zero {
        let prof = stride::debug::Profiler::start();
        t.step().map_err(e)?;
        t.read_losses().map_err(e)?;
        let report = prof.stop().map_err(e)?;
        if let Some(o) = report
            .comm_overlap()
            .into_iter()
            .find(|o| o.device == g.device())
        {
            overlap = json!({"comm_ms": o.comm_s * 1e3, "compute_ms": o.compute_s * 1e3,
                             "overlapped_ms": o.overlapped_s * 1e3, "fraction": o.fraction(),
                             "collectives": report.events.iter().filter(|e| e.kind == "comm").count()});
        }
        if let (Some(path), 0) = (&a.trace, g.rank()) {
            report.write_chrome_trace(path).map_err(e)?;
        }
    }
    Ok(
        json!({"world": world, "tokens_per_s": tokens / secs, "ms_per_step": secs * 1e3 / a.steps as f64,
              "peak_bytes": peak_bytes, "overlap": overlap,
              "optimizer_state_bytes": t.optimizer_state_bytes()}),
    )
}

/// The peer under torchrun on `n` GPUs; rank 0's JSON line.
fn torchrun(a: &DdpArgs, n: usize, args: &[String]) -> Result<Value, String> {
    let script = super::peer_script("ddp_torch.py")?;
    let mut cmd = Command::new(&a.python);
    cmd.args([
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        &n.to_string(),
    ])
    .arg(&script)
    .args(args);
    if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
        cmd.env("NCCL_NVLS_ENABLE", "0");
    }
    let stdout = super::run_peer(&mut cmd, &script)?;
    let out = String::from_utf8_lossy(&stdout);
    let line = out.lines().rev().find(|l| l.starts_with('{')).unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("bad JSON from the peer ({e}): {line}"))
}
