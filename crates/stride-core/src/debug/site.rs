//! Call sites: the stack captured when an op runs (cheap, unresolved) and turned into
//! "which stride function, called from which line of whose code" only when reported.

use std::sync::{Arc, Mutex};

/// One frame of the caller's code: function, file and line (file and line need line tables:
/// stride's `test` and `release` profiles keep them; see the README's troubleshooting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

impl std::fmt::Display for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{}:{line} ({})", relative(file), self.function),
            _ => write!(f, "{}", self.function),
        }
    }
}

/// Where an op was called. Captured without symbol lookup; resolved when described.
#[derive(Clone)]
pub struct CallSite(Arc<Mutex<backtrace::Backtrace>>);

impl std::fmt::Debug for CallSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CallSite({})", self.describe())
    }
}

/// stride-core's own sources (a frame there is never "the caller's code").
const OWN_SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");

/// Frames of the runtime, the standard library, third-party crates and stride-core itself:
/// never "the caller's code". Other stride crates (`stride-nn`, `stride-models`) are
/// reported: an optimizer's line is where its op ran, and the next frame is the caller's
/// call of it. Decided by file where the binary has line tables (stride's `test` and
/// `release` profiles), else by the symbol's path.
fn internal(f: &Frame) -> bool {
    let name = f.function.trim_start_matches('<');
    if name.is_empty() || name == "start_thread" || name == "clone3" {
        return true;
    }
    if let Some(file) = &f.file {
        if !file.starts_with('/') || file.contains("/nptl/") || file.contains("/sysdeps/") {
            return true; // the C runtime (relative paths of glibc's sources)
        }
        let registry = file.contains("/.cargo/registry/") || file.contains("/.cargo/git/");
        return file.starts_with(OWN_SOURCES)
            || file.starts_with("/rustc/")
            || file.contains("/library/std/")
            || file.contains("/library/core/")
            || file.contains("/library/alloc/")
            || (registry && !file.contains("/stride-") && !file.contains("/stride/"))
            || (registry && file.contains("/stride-core-"));
    }
    const PREFIXES: [&str; 11] = [
        "stride_core::",
        "backtrace::",
        "std::",
        "core::",
        "alloc::",
        "rayon",
        "test::",
        "{closure",
        "__",
        "_start",
        "start_thread",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || name == "main"
}

/// Whether a frame is stride-core's own (a candidate for "the function the caller called").
fn own(f: &Frame) -> bool {
    match &f.file {
        Some(file) => file.starts_with(OWN_SOURCES) || file.contains("/stride-core-"),
        None => f
            .function
            .trim_start_matches('<')
            .starts_with("stride_core::"),
    }
}

/// The public name of a stride-core function: `Tensor::addcmul_` from a full symbol path
/// (`stride_core::ops::elementwise::<impl stride_core::tensor::Tensor>::addcmul_`) or from
/// line tables (`addcmul_` in a file of Tensor methods).
fn short_api(f: &Frame) -> Option<String> {
    let full = f.function.as_str();
    if let Some(i) = full.find("<impl stride_core::tensor::Tensor>::") {
        let rest = &full[i + "<impl stride_core::tensor::Tensor>::".len()..];
        return Some(format!("Tensor::{rest}"));
    }
    if let Some(rest) = full.strip_prefix("stride_core::tensor::Tensor::") {
        return Some(format!("Tensor::{rest}"));
    }
    if full.starts_with("<stride_core::tensor::Tensor as ") {
        if let Some(i) = full.rfind(">::") {
            return Some(format!("Tensor::{}", &full[i + 3..]));
        }
    }
    // a short name from line tables (`addcmul_<&Tensor, &Tensor, f64>`): drop the generics;
    // files of Tensor methods say whose it is
    let name = full.split('<').next().unwrap_or(full);
    // a free function of an op frontend is public at the crate root (`stride_core::fused_adam_`)
    if let Some(rest) = name.strip_prefix("stride_core::ops::") {
        if let Some((_, f)) = rest.rsplit_once("::") {
            return Some(format!("stride_core::{f}"));
        }
    }
    if name.contains("::") {
        return Some(name.trim_start_matches("stride_core::").to_string());
    }
    // shared helpers that a frontend reached by a tail call: they would name the wrong op
    const HELPERS: [&str; 6] = [
        "unary",
        "binary",
        "ternary",
        "unary_raw",
        "binary_raw",
        "ternary_raw",
    ];
    if HELPERS.contains(&name) {
        return None;
    }
    let tensor_files = [
        "/ops/",
        "/tensor.rs",
        "/view.rs",
        "/creation.rs",
        "/display.rs",
        "/autograd/tensor_api.rs",
    ];
    Some(match &f.file {
        Some(file) if tensor_files.iter().any(|t| file.contains(t)) => format!("Tensor::{name}"),
        _ => name.to_string(),
    })
}

/// A path relative to the working directory when it lies below it.
fn relative(file: &str) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|d| {
            std::path::Path::new(file)
                .strip_prefix(&d)
                .ok()
                .map(|p| p.display().to_string())
        })
        .unwrap_or_else(|| file.to_string())
}

impl CallSite {
    /// The current stack, unresolved (a few microseconds).
    pub(crate) fn capture() -> CallSite {
        CallSite(Arc::new(Mutex::new(backtrace::Backtrace::new_unresolved())))
    }

    /// (functions of the stack from the innermost outwards, with file and line).
    fn frames_all(&self) -> Vec<Frame> {
        let mut bt = self.0.lock().unwrap_or_else(|e| e.into_inner());
        bt.resolve();
        let mut out = vec![];
        for f in bt.frames() {
            for s in f.symbols() {
                let Some(name) = s.name() else { continue };
                out.push(Frame {
                    function: format!("{name:#}"),
                    file: s.filename().map(|p| p.display().to_string()),
                    line: s.lineno(),
                });
            }
        }
        out
    }

    /// The stride function the caller's code called (e.g. `Tensor::addcmul_`), if the stack
    /// shows one.
    pub fn api(&self) -> Option<String> {
        let frames = self.frames_all();
        let first_user = frames.iter().position(|f| !internal(f))?;
        frames[..first_user]
            .iter()
            .rev()
            .find(|f| {
                own(f)
                    && !f.function.contains("{{closure}}")
                    && !f.function.starts_with("{closure")
                    && !f.function.starts_with("stride_core::debug::")
                    && !f.file.as_deref().is_some_and(|p| p.contains("/debug/"))
            })
            .and_then(short_api)
    }

    /// Up to `n` frames of the caller's code, innermost first (frames of the standard library
    /// and of stride-core skipped).
    pub fn user_frames(&self, n: usize) -> Vec<Frame> {
        self.frames_all()
            .into_iter()
            .filter(|f| !internal(f))
            .take(n)
            .collect()
    }

    /// `Tensor::addcmul_, called at src/optim/adam.rs:154 (stride_nn::optim::adam::Adam::step)
    /// ← examples/frozen.rs:60 (frozen::main)`.
    pub fn describe(&self) -> String {
        // enough to get through a library's layers (an optimizer step is 5 deep) to the caller
        let frames = self.user_frames(8);
        let chain = if frames.is_empty() {
            "an unknown place (no symbols in this binary)".to_string()
        } else {
            frames
                .iter()
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
                .join(" ← ")
        };
        match self.api() {
            Some(api) => format!("{api}, called at {chain}"),
            None => format!("called at {chain}"),
        }
    }
}
