//! `stride train gpt --devices cpu,cpu`: data-parallel training in two processes (the CPU
//! backend over TCP; the same launcher and DDP as `--gpus N` on CUDA). Its curve is the
//! one-process curve, a checkpoint it writes resumes in one process, and a rank killed
//! mid-run stops the run within seconds with the rank named.

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
    let rest = json(
        &command(
            &d,
            &[
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
            ],
        )
        .output()
        .unwrap(),
    );
    assert_eq!(rest["resumed_from_step"], 8);
    same_curve(&losses(&rest), &losses(&one), "resumed in one process");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_killed_rank_stops_the_run_naming_it() {
    let d = cache("kill");
    // TINY with a schedule long enough to be killed in the middle of
    let mut args: Vec<&str> = TINY.to_vec();
    for (flag, value) in [("--steps", "100000"), ("--eval-every", "100000")] {
        let i = args.iter().position(|a| *a == flag).unwrap();
        args[i + 1] = value;
    }
    args.extend(["--devices", "cpu,cpu"]);
    let mut child = command(&d, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    // the launcher names each rank's pid
    let pid = loop {
        let l = lines.next().expect("the launcher ended early").unwrap();
        if let Some(rest) = l.strip_prefix("stride launch: rank 1 on cpu: pid ") {
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
