//! Token ids of SmolLM2-135M-Instruct's GGUF tokenizer against llama.cpp's, for the strings in
//! `tests/fixtures/smollm2_llama_cpp.json` (written by `scripts/tokenizer_golden.py`).
//!
//! Needs the model file: runs when it is in `$STRIDE_MODELS` or `~/.cache/stride/models`,
//! else prints `SKIPPED: …` (and fails instead when `STRIDE_REQUIRE_MODELS=1`).

use std::path::PathBuf;
use stride_tokenizer::{ChatMessage, Tokenizer};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn model_path() -> Option<PathBuf> {
    let dir = match std::env::var_os("STRIDE_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/stride/models"),
    };
    let p = dir.join(MODEL);
    p.exists().then_some(p)
}

fn tokenizer_or_skip(test: &str) -> Option<Tokenizer> {
    match model_path() {
        Some(p) => Some(Tokenizer::from_gguf_file(&p).expect("the SmolLM2 tokenizer builds")),
        None => {
            if std::env::var("STRIDE_REQUIRE_MODELS").as_deref() == Ok("1") {
                panic!("{test}: {MODEL} not found in $STRIDE_MODELS or ~/.cache/stride/models, and STRIDE_REQUIRE_MODELS=1");
            }
            println!("SKIPPED: {test}: {MODEL} not found in $STRIDE_MODELS or ~/.cache/stride/models (see README, 'GGUF files')");
            None
        }
    }
}

#[test]
fn smollm2_matches_llama_cpp() {
    let Some(tok) = tokenizer_or_skip("smollm2_matches_llama_cpp") else {
        return;
    };
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/smollm2_llama_cpp.json"
    );
    let Ok(text) = std::fs::read_to_string(fixture) else {
        if std::env::var("STRIDE_REQUIRE_MODELS").as_deref() == Ok("1") {
            panic!("{fixture} missing: run scripts/tokenizer_golden.py");
        }
        println!("SKIPPED: smollm2_matches_llama_cpp: {fixture} missing (run scripts/tokenizer_golden.py)");
        return;
    };
    let doc: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 300, "{} cases", cases.len());
    let mut bad = Vec::new();
    for c in cases {
        let s = c["text"].as_str().unwrap();
        let want: Vec<u32> = c["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(s, false).unwrap();
        if got != want {
            bad.push(format!(
                "{s:?}\n   llama.cpp {want:?}\n   stride    {got:?}"
            ));
        }
        assert_eq!(tok.decode(&got).unwrap(), s, "round trip of {s:?}");
    }
    assert!(
        bad.is_empty(),
        "{} of {} strings differ from llama.cpp:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
    println!("{} strings match llama.cpp", cases.len());
}

#[test]
fn smollm2_metadata_and_chat() {
    let Some(tok) = tokenizer_or_skip("smollm2_metadata_and_chat") else {
        return;
    };
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos(), Some(1));
    assert_eq!(tok.eos(), Some(2));
    assert!(!tok.add_bos());
    assert_eq!(tok.token_text(2).unwrap(), "<|im_end|>");
    assert!(tok.is_control(2));
    let prompt = tok
        .apply_chat_template(&[ChatMessage::new("user", "What is 2+2?")], true)
        .unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = tok.encode(&prompt, false).unwrap();
    assert_eq!(ids[0], 1);
    assert_eq!(tok.token_text(*ids.last().unwrap()).unwrap(), "Ċ"); // "\n" after "assistant"
    assert_eq!(tok.decode(&ids).unwrap(), prompt);
}
