//! The NumPy peer: `python3 scripts/bench_numpy.py --serve`, a child process kept alive for
//! the whole run and asked for blocks of timed repetitions of one row at a time, so that its
//! blocks alternate with stride's (see [`super::measure::interleaved`]). One JSON object per
//! line each way; the protocol is described in the script.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

pub struct Peer {
    /// e.g. "NumPy 2.4.6 (scipy-openblas 0.3.31)"
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Drains the peer's stderr (so the pipe never fills) and returns it when the peer exits.
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// The script: next to the sources this binary was built from, else under the current dir.
pub fn script_path() -> Option<PathBuf> {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench_numpy.py");
    let here = PathBuf::from("scripts/bench_numpy.py");
    [built, here].into_iter().find(|p| p.is_file())
}

impl Peer {
    /// Starts the peer, or says why there is none (with what to do).
    pub fn start(python: &str, script: Option<&Path>, quick: bool) -> Result<Peer, String> {
        let script = match script {
            Some(p) => p.to_path_buf(),
            None => script_path().ok_or_else(|| {
                "scripts/bench_numpy.py not found (run from the repository root, or pass --peer-script)"
                    .to_string()
            })?,
        };
        let mut cmd = Command::new(python);
        cmd.arg(&script).arg("--serve");
        if quick {
            cmd.arg("--quick");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "could not run `{python}` ({e}); install Python 3 and NumPy (pip install numpy)"
                )
            })?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout of the peer")?);
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                use std::io::Read;
                let mut buf = String::new();
                let _ = e.read_to_string(&mut buf);
                buf
            })
        });
        let mut peer = Peer {
            name: String::new(),
            child,
            stdin,
            stdout,
            stderr,
        };
        let v = peer
            .read()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        if v["available"] != Value::Bool(true) {
            let why = v["why"].as_str().unwrap_or("numpy is not available");
            return Err(format!("{why}; install it with: pip install numpy"));
        }
        peer.name = format!("NumPy {}", v["numpy"].as_str().unwrap_or("?"));
        if let Some(b) = v["blas"].as_str().filter(|b| !b.is_empty()) {
            peer.name.push_str(&format!(" ({b})"));
        }
        Ok(peer)
    }

    fn read(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .map_err(|e| format!("reading the peer's answer: {e}"))?;
        if n == 0 {
            let _ = self.child.wait();
            let err = self
                .stderr
                .take()
                .and_then(|h| h.join().ok())
                .unwrap_or_default();
            return Err(format!(
                "the peer exited: {}",
                err.lines().last().unwrap_or("no message")
            ));
        }
        serde_json::from_str(&line).map_err(|e| format!("the peer printed invalid JSON ({e})"))
    }

    fn ask(&mut self, req: Value) -> Result<Value, String> {
        let stdin = self.stdin.as_mut().ok_or("the peer's input is closed")?;
        writeln!(stdin, "{req}")
            .and_then(|_| stdin.flush())
            .map_err(|e| format!("writing to the peer: {e}"))?;
        let v = self.read()?;
        match v["error"].as_str() {
            Some(e) => Err(format!("the peer failed: {e}")),
            None => Ok(v),
        }
    }

    /// `reps` wall times (seconds) of the peer's row `row`, run back to back.
    pub fn time(&mut self, row: &str, reps: usize) -> Result<Vec<f64>, String> {
        let v = self.ask(json!({"row": row, "reps": reps}))?;
        v["times"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .ok_or_else(|| "the peer's answer has no times".to_string())
    }

    /// Frees the peer's arrays for `row`.
    pub fn drop_row(&mut self, row: &str) {
        let _ = self.ask(json!({"row": row, "drop": true}));
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.take()); // end of input: the script exits
        let _ = self.child.wait();
    }
}
