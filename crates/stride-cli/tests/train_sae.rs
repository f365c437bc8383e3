//! `stride train sae` end to end at tiny sizes: JSON metrics, a valid PNG, checkpoints that
//! resume on the same curve, and clear errors for bad flags.

mod common;
use common::{stride, text};
use std::process::Command;

use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stride-cli-sae-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

const TINY: &[&str] = &[
    "train",
    "sae",
    "--dims",
    "8",
    "--latents",
    "32",
    "--k",
    "4",
    "--features",
    "16",
    "--feature-prob",
    "0.1",
    "--batch",
    "32",
    "--lr",
    "0.01",
    "--eval-batch",
    "256",
    "--health-every",
    "5",
];

fn run_json(extra: &[&str]) -> serde_json::Value {
    let args: Vec<&str> = TINY.iter().chain(extra).copied().collect();
    let o = stride(&args);
    assert!(
        o.status.success(),
        "{}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    serde_json::from_str(text(&o.stdout).trim()).expect("one JSON document")
}

#[test]
fn json_metrics_and_a_png_loss_curve() {
    let dir = scratch("json");
    let png = dir.join("loss.png");
    let j = run_json(&["--steps", "60", "--json", "--plot", png.to_str().unwrap()]);
    assert_eq!(j["model"], "topk-sae");
    assert_eq!(j["steps"], 60);
    assert_eq!(j["config"]["dims"], 8);
    assert_eq!(j["config"]["encoder_strides"], serde_json::json!([1, 32]));
    assert_eq!(j["losses"].as_array().unwrap().len(), 60);
    let (initial, fin) = (
        j["initial_loss"].as_f64().unwrap(),
        j["final_loss"].as_f64().unwrap(),
    );
    assert!(fin < initial, "{initial} -> {fin}");
    let fve = j["fve"].as_f64().unwrap();
    assert!(fve > 0.0 && fve <= 1.0, "{fve}");
    assert!(j["dead_latents"].as_u64().unwrap() <= 32);
    assert_eq!(j["health"]["healthy"], true);
    assert_eq!(j["health"]["checks"], 12);
    assert!(j["ms_per_step"].as_f64().unwrap() > 0.0);
    let bytes = std::fs::read(&png).expect("the plot was written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG signature");
    assert!(bytes.len() > 1000);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_png_without_any_font() {
    let dir = scratch("nofont");
    let png = dir.join("loss.png");
    let args: Vec<&str> = TINY
        .iter()
        .chain(&["--steps", "5", "--json", "--plot", png.to_str().unwrap()])
        .copied()
        .collect();
    let o = Command::new(common::stride_bin())
        .args(&args)
        .env("STRIDE_PLOT_FONT", "")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let bytes = std::fs::read(&png).expect("the plot was written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn human_summary() {
    let o = stride(&[TINY, &["--steps", "20", "--no-plot"]].concat());
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    for needle in [
        "non-contiguous, strides [1, 32]",
        "plateau",
        "fraction of variance explained",
        "dead latents",
        "update health    4 checks",
        "ms/step",
    ] {
        assert!(out.contains(needle), "no {needle:?} in\n{out}");
    }
}

#[test]
fn save_and_resume_continue_the_same_curve() {
    let dir = scratch("resume");
    let ckpt = dir.join("sae.safetensors");
    let ckpt = ckpt.to_str().unwrap();
    let straight = run_json(&["--steps", "30", "--json", "--no-plot"]);
    let first = run_json(&["--steps", "15", "--json", "--no-plot", "--save", ckpt]);
    assert_eq!(first["checkpoint"], ckpt);
    // the checkpoint's configuration is used: no size flags needed
    let o = stride(&[
        "train",
        "sae",
        "--resume",
        ckpt,
        "--steps",
        "30",
        "--json",
        "--no-plot",
        "--eval-batch",
        "256",
        "--health-every",
        "5",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let resumed: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(resumed["resumed_from_step"], 15);
    // JSON prints f64 exactly (shortest round-trip), so equal text is equal bits
    assert_eq!(resumed["losses"], straight["losses"]);
    assert_eq!(resumed["fve"], straight["fve"]);

    // flags that contradict the checkpoint are refused
    let o = stride(&[
        "train", "sae", "--resume", ckpt, "--steps", "40", "--dims", "9",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("--dims 9 (the checkpoint has 8)"),
        "{}",
        text(&o.stderr)
    );
    // a finished run asks for more steps
    let o = stride(&["train", "sae", "--resume", ckpt, "--steps", "10"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("already at step 15"),
        "{}",
        text(&o.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_flags_are_clear_errors() {
    let err = |args: &[&str]| {
        let o = stride(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        text(&o.stderr)
    };
    let e = err(&["train", "sae", "--device", "cuda:999", "--steps", "1"]);
    assert!(e.contains("cuda:999 is not available"), "{e}");
    let e = err(&["train", "sae", "--device", "tpu"]);
    assert!(e.contains("unknown device"), "{e}");
    let e = err(&["train", "sae", "--dtype", "i32"]);
    assert!(e.contains("unsupported --dtype"), "{e}");
    let e = err(&["train", "sae", "--dtype", "f16"]);
    assert!(e.contains("underflow"), "{e}");
    let e = err(&["train", "sae", "--k", "600"]);
    assert!(e.contains("k must be between 1"), "{e}");
    let e = err(&["train", "sae", "--lr", "0"]);
    assert!(e.contains("learning rate"), "{e}");
    let e = err(&["train", "sae", "--resume", "/nonexistent/ckpt.safetensors"]);
    assert!(e.contains("can't resume"), "{e}");
    let e = err(&[TINY, &["--steps", "2", "--plot", "curve.jpg"]].concat());
    assert!(e.contains(".png"), "{e}");
}
