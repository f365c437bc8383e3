//! The NumPy peer: `python3 scripts/bench_numpy.py`, run in the same invocation, parsed from
//! the one JSON object it prints.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

pub struct Peer {
    /// e.g. "NumPy 2.4.6 (scipy-openblas 0.3.31)"
    pub name: String,
    pub seconds: BTreeMap<String, f64>,
}

/// The peer's times, or why there are none (with what to do).
pub fn numpy(python: &str, quick: bool) -> Result<Peer, String> {
    let script = script_path().ok_or_else(|| {
        "scripts/bench_numpy.py not found (run from the repository root, or pass --peer-script)"
            .to_string()
    })?;
    run_script(python, &script, quick)
}

/// The script: next to the sources this binary was built from, else under the current dir.
fn script_path() -> Option<PathBuf> {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench_numpy.py");
    let here = PathBuf::from("scripts/bench_numpy.py");
    [built, here].into_iter().find(|p| p.is_file())
}

pub fn run_script(python: &str, script: &std::path::Path, quick: bool) -> Result<Peer, String> {
    let mut cmd = Command::new(python);
    cmd.arg(script);
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd.output().map_err(|e| {
        format!("could not run `{python}` ({e}); install Python 3 and NumPy (pip install numpy)")
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} exited with {}: {}",
            script.display(),
            out.status,
            err.lines().last().unwrap_or("")
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{} printed invalid JSON ({e})", script.display()))?;
    if v["available"] != serde_json::Value::Bool(true) {
        let why = v["why"].as_str().unwrap_or("numpy is not available");
        return Err(format!("{why}; install it with: pip install numpy"));
    }
    let seconds = v["seconds"]
        .as_object()
        .ok_or("the peer's JSON has no \"seconds\" object")?
        .iter()
        .filter_map(|(k, t)| t.as_f64().map(|t| (k.clone(), t)))
        .collect();
    let mut name = format!("NumPy {}", v["numpy"].as_str().unwrap_or("?"));
    if let Some(b) = v["blas"].as_str().filter(|b| !b.is_empty()) {
        name.push_str(&format!(" ({b})"));
    }
    Ok(Peer { name, seconds })
}
