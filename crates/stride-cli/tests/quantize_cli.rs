//! `stride quantize` end to end on a tiny random Llama (no network): a Hugging Face
//! checkpoint directory and a small GGUF file in, GGUF out, the JSON summary, the error
//! messages, and the `--quantize` load option of `generate` and `perplexity` on the result.

mod common;
use common::{stride, text};
#[path = "support/tiny_llama.rs"]
mod tiny;

use std::path::Path;
use stride_gguf::{GgmlType, Gguf, GgufWriter};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_checkpoint_to_q8_0_then_q4_0_with_a_json_summary() {
    let dir = tiny::scratch("cli");
    let m = tiny::write_tiny_llama(&dir.join("ckpt"), tiny::TinyOpts::default());
    let q8 = dir.join("tiny.q8_0.gguf");
    let o = stride(&["quantize", p(&m.dir), p(&q8), "--type", "q8_0", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(j["type"], "Q8_0");
    assert_eq!(j["tensors"], m.tensors.len());
    assert_eq!(j["output_bytes"], std::fs::metadata(&q8).unwrap().len());
    let bpw = j["bits_per_weight"].as_f64().unwrap();
    assert!(bpw > 8.0 && bpw < 9.0, "{bpw}"); // 8.5 for the matrices, 32 for the norms
    assert_eq!(j["tensor_types"]["Q8_0"], 2 + 7 * tiny::LAYERS);
    assert_eq!(j["tensor_types"]["F32"], 1 + 2 * tiny::LAYERS);

    // GGUF in: the text summary, a warning for requantizing
    let q4 = dir.join("tiny.q4_0.gguf");
    let o = stride(&["quantize", p(&q8), p(&q4), "--type", "Q4_0"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for needle in ["stride quantize", "bits/weight", "MB ->", "requantized"] {
        assert!(out.contains(needle), "no {needle:?} in\n{out}");
    }
    assert!(
        text(&o.stderr).contains("second rounding"),
        "{}",
        text(&o.stderr)
    );
    let g = Gguf::open(&q4).unwrap();
    assert_eq!(
        g.tensor("blk.1.ffn_up.weight").unwrap().ggml_type,
        GgmlType::Q4_0
    );
    assert_eq!(g.tensor("output.weight").unwrap().ggml_type, GgmlType::Q8_0);

    // the result runs, with --quantize converting it once more at load
    let o = stride(&[
        "generate",
        "the the",
        "--model",
        p(&q8),
        "--quantize",
        "q4_1",
        "--max-tokens",
        "4",
        "--temperature",
        "0",
        "--ignore-eos",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(j["weights"]["format"], "quantized", "{j}");
    assert!(text(&o.stderr).contains("quantized the weights to Q4_1 in memory"));

    let txt = dir.join("text.txt");
    std::fs::write(&txt, "the theatre the he the t ".repeat(20)).unwrap();
    let o = stride(&[
        "perplexity",
        "--model",
        p(&q8),
        "--file",
        p(&txt),
        "--ctx",
        "32",
        "--stride",
        "16",
        "--quantize",
        "q8_0",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(j["weights"]["format"], "quantized", "{j}");

    let o = stride(&["generate", "x", "--model", p(&q8), "--quantize", "q4_k"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("unknown --quantize \"q4_k\""),
        "{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_small_gguf_file_and_the_error_messages() {
    let dir = tiny::scratch("cli-errors");
    // a GGUF file that is not a model: two f32 matrices and a norm
    let x: Vec<f32> = (0..64 * 8)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect();
    let f32b = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let mut w = GgufWriter::new();
    w.add_string("general.architecture", "llama");
    w.add_string("general.name", "not a model");
    w.add_tensor("a.weight", &[64, 8], GgmlType::F32, &f32b(&x))
        .unwrap();
    w.add_tensor("output.weight", &[64, 8], GgmlType::F32, &f32b(&x))
        .unwrap();
    w.add_tensor("n.weight", &[64], GgmlType::F32, &f32b(&x[..64]))
        .unwrap();
    let input = dir.join("in.gguf");
    w.write(&input).unwrap();
    let out = dir.join("out.gguf");
    let o = stride(&["quantize", p(&input), p(&out), "--type", "q4_1"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let g = Gguf::open(&out).unwrap();
    assert_eq!(g.get_str("general.name").unwrap(), "not a model");
    assert_eq!(g.get_u32("general.file_type").unwrap(), 3);
    assert_eq!(g.tensor("a.weight").unwrap().ggml_type, GgmlType::Q4_1);
    assert_eq!(g.tensor("output.weight").unwrap().ggml_type, GgmlType::Q8_0);
    assert_eq!(g.tensor("n.weight").unwrap().ggml_type, GgmlType::F32);
    assert_eq!(
        g.tensor_data("a.weight").unwrap(),
        stride_gguf::quantize(GgmlType::Q4_1, &x).unwrap()
    );

    let err = |args: &[&str]| {
        let o = stride(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        text(&o.stderr)
    };
    let e = err(&["quantize", p(&input), p(&out), "--type", "q8_0"]);
    assert!(e.contains("exists") && e.contains("--force"), "{e}");
    let o = stride(&["quantize", p(&input), p(&out), "--type", "q8_0", "--force"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        Gguf::open(&out)
            .unwrap()
            .tensor("a.weight")
            .unwrap()
            .ggml_type,
        GgmlType::Q8_0
    );
    let e = err(&[
        "quantize",
        p(&input),
        p(&dir.join("x.gguf")),
        "--type",
        "q3_k",
    ]);
    assert!(
        e.contains("unknown --type \"q3_k\"") && e.contains("q8_0, q4_0"),
        "{e}"
    );
    std::fs::write(dir.join("junk.bin"), b"not a model").unwrap();
    let e = err(&[
        "quantize",
        p(&dir.join("junk.bin")),
        p(&dir.join("x.gguf")),
        "--type",
        "q8_0",
    ]);
    assert!(e.contains("is not a GGUF file"), "{e}");
    let e = err(&[
        "quantize",
        p(&dir),
        p(&dir.join("x.gguf")),
        "--type",
        "q8_0",
    ]);
    assert!(e.contains("without config.json"), "{e}");
    assert!(!dir.join("x.gguf").exists());

    let o = stride(&["quantize", "--help"]);
    let help = text(&o.stdout);
    assert!(
        help.contains("Examples:") && help.contains("--type"),
        "{help}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
