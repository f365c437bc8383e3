//! `stride train gpt --devices cpu,cpu`: data-parallel training in two processes (the CPU
//! backend over TCP; the same launcher and DDP as `--gpus N` on CUDA). Its curve is the
//! one-process curve, a checkpoint it writes resumes in one process — with the optimizer
//! state sharded over the ranks (`--zero`) too — and a rank killed mid-run stops the run
//! within seconds with the rank named.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A scratch cache with the stand-in text (see `common::shakespeare_cache`).
fn cache(name: &str) -> PathBuf {
    common::shakespeare_cache(&format!("ddp-{name}"))
}

fn command(models: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(common::stride_bin());
    c.args(args)
        .env("STRIDE_MODELS", models)
        .env("STRIDE_PYTHON", "/nonexistent/python3") // never fetch
        .env_remove("STRIDE_RANK")
        .env_remove("RANK");
    c
}

fn json(o: &Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stride failed: {err}");
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

const TINY: &[&str] = &[
    "train",
    "gpt",
    "--layers",
    "1",
    "--heads",
    "2",
    "--dim",
    "16",
    "--context",
    "16",
    "--batch",
    "4",
    "--steps",
    "16",
    "--warmup",
    "4",
    "--lr",
    "1e-2",
    "--min-lr",
    "1e-3",
    "--eval-every",
    "8",
    "--eval-batches",
    "2",
    "--sample-tokens",
    "0",
    "--no-plot",
    "--json",
];

/// Continues the run saved in `ck` (with `extra` flags, e.g. the devices) to its end.
fn resume(models: &Path, ck: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "train",
        "gpt",
        "--resume",
        ck,
        "--eval-every",
        "8",
        "--sample-tokens",
        "0",
        "--no-plot",
        "--json",
    ];
    args.extend(extra);
    json(&command(models, &args).output().unwrap())
}

fn losses(doc: &serde_json::Value) -> Vec<f64> {
    serde_json::from_value(doc["losses"].clone()).unwrap()
}

/// Within the golden test's 1e-4 relative (stride-models/tests/gpt_golden.rs says why).
fn same_curve(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (s, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-4 * y.abs(),
            "{what}: step {s}: {x} vs {y}"
        );
    }
}

#[test]
fn two_ranks_train_the_one_process_curve_and_resume_in_one() {
    let d = cache("curve");
    let one = json(&command(&d, TINY).output().unwrap());
    let ckpt = d.join("half.safetensors");
    let ck = ckpt.to_str().unwrap();
    let two = json(
        &command(
            &d,
            &[
                TINY,
                &["--devices", "cpu,cpu", "--stop-at", "8", "--save", ck],
            ]
            .concat(),
        )
        .output()
        .unwrap(),
    );
    assert_eq!(two["config"]["ranks"], 2);
    same_curve(
        &losses(&two),
        &losses(&one)[..8],
        "two ranks against one process",
    );
    // the checkpoint (written once, by rank 0) resumes in one process on the same curve
    let rest = resume(&d, ck, &[]);
    assert_eq!(rest["resumed_from_step"], 8);
    same_curve(&losses(&rest), &losses(&one), "resumed in one process");
    std::fs::remove_dir_all(&d).unwrap();
}

/// `--zero`: the same curve (ZeRO's steps are the plain optimizer's, bit for bit, so the
/// tolerance is the data-parallel one above); its checkpoint — the state gathered from both
/// ranks, written by rank 0 at `--save-every` and at the end — resumes in one process.
#[test]
fn two_ranks_with_zero_train_the_one_process_curve_and_resume_in_one() {
    let d = cache("zero");
    let one = json(&command(&d, TINY).output().unwrap());
    let ckpt = d.join("zero.safetensors");
    let ck = ckpt.to_str().unwrap();
    let two = json(
        &command(
            &d,
            &[
                TINY,
                &[
                    "--devices",
                    "cpu,cpu",
                    "--zero",
                    "--stop-at",
                    "8",
                    "--save",
                    ck,
                    "--save-every",
                    "4",
                ],
            ]
            .concat(),
        )
        .output()
        .unwrap(),
    );
    assert_eq!(two["config"]["ranks"], 2);
    assert_eq!(two["config"]["zero"], true);
    same_curve(
        &losses(&two),
        &losses(&one)[..8],
        "two ranks with ZeRO against one process",
    );
    // rank 0 holds part of the state only
    let sharded = two["optimizer_state_bytes"].as_u64().unwrap();
    let whole = one["optimizer_state_bytes"].as_u64().unwrap();
    assert!(
        sharded > 0 && sharded < whole,
        "rank 0 holds {sharded} of {whole} bytes"
    );
    let rest = resume(&d, ck, &[]);
    assert_eq!(rest["resumed_from_step"], 8);
    assert_eq!(rest["config"]["zero"], false);
    same_curve(&losses(&rest), &losses(&one), "resumed in one process");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn zero_without_several_ranks_is_an_error() {
    let d = cache("zero-alone");
    let o = command(&d, &[TINY, &["--zero"]].concat()).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--zero") && err.contains("--devices"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// Rank 1 (on `rank1_device`) of a run on `devices` is killed mid-run: the run stops
/// within seconds, naming it.
fn killed_rank_case(name: &str, devices: &[&str], rank1_device: &str) {
    let d = cache(name);
    // TINY with a schedule long enough to be killed in the middle of
    let mut args: Vec<&str> = TINY.to_vec();
    for (flag, value) in [("--steps", "100000"), ("--eval-every", "100000")] {
        let i = args.iter().position(|a| *a == flag).unwrap();
        args[i + 1] = value;
    }
    args.extend(devices);
    let mut child = command(&d, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    // the launcher names each rank's pid
    let prefix = format!("stride launch: rank 1 on {rank1_device}: pid ");
    let pid = loop {
        let l = lines.next().expect("the launcher ended early").unwrap();
        if let Some(rest) = l.strip_prefix(&prefix) {
            break rest.trim().to_string();
        }
    };
    // let it train a moment, then kill rank 1 as an out-of-memory killer would
    std::thread::sleep(Duration::from_secs(3));
    let t0 = Instant::now();
    assert!(Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap()
        .success());
    let rest: Vec<String> = lines.map_while(|l| l.ok()).collect();
    let status = child.wait().unwrap();
    let took = t0.elapsed();
    assert!(!status.success());
    assert!(
        took < Duration::from_secs(20),
        "the run took {took:?} to stop"
    );
    let all = rest.join("\n");
    assert!(all.contains("rank 1") && all.contains("signal 9"), "{all}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_killed_rank_stops_the_run_naming_it() {
    killed_rank_case("kill", &["--devices", "cpu,cpu"], "cpu");
}

#[test]
fn a_killed_rank_on_a_gpu_stops_the_run_naming_it() {
    if stride::cuda::require_gpus_or_skip("a_killed_rank_on_a_gpu_stops_the_run_naming_it", 2)
        .is_none()
    {
        return;
    }
    killed_rank_case("kill-gpu", &["--gpus", "2"], "cuda:1");
}

/// On two GPUs over NCCL: the one-GPU curve (f32, no autocast, so the tolerance is the
/// CPU's), and checkpoints — plain and ZeRO — that resume on one GPU and on two.
#[test]
fn two_gpus_train_the_one_gpu_curve_and_resume_on_one_or_two() {
    if stride::cuda::require_gpus_or_skip(
        "two_gpus_train_the_one_gpu_curve_and_resume_on_one_or_two",
        2,
    )
    .is_none()
    {
        return;
    }
    let d = cache("gpus");
    let base = [TINY, &["--autocast", "none"]].concat();
    let run = |extra: &[&str]| json(&command(&d, &[&base[..], extra].concat()).output().unwrap());
    let one = run(&["--device", "cuda"]);
    for zero in [false, true] {
        let ckpt = d.join(format!("half-{zero}.safetensors"));
        let ck = ckpt.to_str().unwrap();
        let mut extra = vec!["--gpus", "2", "--stop-at", "8", "--save", ck];
        if zero {
            extra.push("--zero");
        }
        let two = run(&extra);
        assert_eq!(two["config"]["ranks"], 2);
        let what = format!("two GPUs (zero: {zero}) against one");
        same_curve(&losses(&two), &losses(&one)[..8], &what);
        for on in [&["--device", "cuda"][..], &["--gpus", "2"][..]] {
            let rest = resume(&d, ck, on);
            assert_eq!(rest["resumed_from_step"], 8);
            let what = format!("a two-GPU checkpoint (zero: {zero}) resumed with {on:?}");
            same_curve(&losses(&rest), &losses(&one), &what);
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}
