//! Kernel modules: CUDA C source (generated from `kernels/*.cu` by [`super::source`]) compiled
//! by NVRTC to a CUBIN for the device's exact architecture, and cached on disk so that a
//! second process compiles nothing.
//!
//! The cache lives in `$STRIDE_KERNEL_CACHE`, else `$XDG_CACHE_HOME/stride/kernels`, else
//! `~/.cache/stride/kernels` (no disk cache when none can be made). A file's name carries the
//! module name, the architecture and a hash of everything that determines the binary (source,
//! options, NVRTC version), so a stale entry is never loaded; entries are written atomically
//! (temporary file, then rename).

use super::device::CudaDevice;
use crate::Result;
use cudarc::driver::CudaModule;
use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys, Ptx};
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Options every module is compiled with: no FMA contraction, so `a*b + c` rounds twice as on
/// the CPU (see kernels/common.cuh); IEEE division and square root (NVRTC's defaults).
const OPTIONS: [&str; 3] = ["--fmad=false", "--std=c++17", "-default-device"];

static COMPILED: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);

/// (modules compiled by NVRTC, modules loaded from the disk cache) in this process.
pub(crate) fn counts() -> (u64, u64) {
    (
        COMPILED.load(Ordering::Relaxed),
        DISK_HITS.load(Ordering::Relaxed),
    )
}

/// The disk cache directory, if one can be used.
pub(crate) fn cache_dir() -> Option<PathBuf> {
    let dir = if let Some(d) = std::env::var_os("STRIDE_KERNEL_CACHE") {
        PathBuf::from(d)
    } else if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        PathBuf::from(d).join("stride").join("kernels")
    } else {
        PathBuf::from(std::env::var_os("HOME")?)
            .join(".cache")
            .join("stride")
            .join("kernels")
    };
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// FNV-1a, 64 bits: stable across builds (unlike std's hasher), enough to name cache files.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn nvrtc_version() -> (i32, i32) {
    let (mut a, mut b) = (0, 0);
    unsafe { nvrtc_sys::nvrtcVersion(&mut a, &mut b) };
    (a, b)
}

/// The cache file of module `name` built from `source` for `arch` (`sm_90`), if a disk cache
/// can be used: its name carries a hash of everything that determines the binary.
fn cache_file(name: &str, source: &str, arch: &str) -> Option<PathBuf> {
    let (vmaj, vmin) = nvrtc_version();
    let version = format!("nvrtc {vmaj}.{vmin}");
    let hash = fnv1a(&[
        source.as_bytes(),
        arch.as_bytes(),
        version.as_bytes(),
        OPTIONS.join(" ").as_bytes(),
    ]);
    cache_dir().map(|d| d.join(format!("{name}-{arch}-{hash:016x}.cubin")))
}

/// The CUBIN of module `name` for `arch`: from the disk cache, else compiled by NVRTC (and
/// written to the cache, atomically: a temporary file, then a rename).
fn cubin(name: &str, source: &str, arch: &str) -> std::result::Result<Vec<u8>, String> {
    let file = cache_file(name, source, arch);
    if let Some(bytes) = file.as_ref().and_then(|f| std::fs::read(f).ok()) {
        DISK_HITS.fetch_add(1, Ordering::Relaxed);
        return Ok(bytes);
    }
    let bytes = compile_source(name, source, arch)?;
    COMPILED.fetch_add(1, Ordering::Relaxed);
    if let Some(f) = &file {
        // best effort: a read-only cache only costs a recompile next time
        let tmp = f.with_extension(format!(
            "tmp{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, f);
        }
    }
    Ok(bytes)
}

fn arch_of(dev: &CudaDevice) -> String {
    let (maj, min) = dev.arch;
    format!("sm_{maj}{min}")
}

/// Loads module `name` built from `source` into `dev`, from the disk cache when it is there.
pub(crate) fn load_module(dev: &CudaDevice, name: &str, source: &str) -> Result<Arc<CudaModule>> {
    let arch = arch_of(dev);
    let bytes = cubin(name, source, &arch).map_err(|e| {
        dev.err(
            &format!("compiling kernel module {name} for {arch} with NVRTC (a stride bug)"),
            e,
        )
    })?;
    dev.ctx
        .load_module(Ptx::from_binary(bytes))
        .map_err(|e| dev.err(&format!("loading kernel module {name} ({arch})"), e))
}

/// Every kernel module stride can generate: (name, CUDA C source).
pub(crate) fn every_module() -> Vec<(String, String)> {
    let mut all = super::source::all_modules();
    all.extend(super::reduce::all_modules());
    all.extend(super::random::all_modules());
    all.extend(super::optim::all_modules());
    all.extend(super::norm::all_modules());
    all.extend(super::pointwise::all_modules());
    all.extend(super::attention::all_modules());
    all.extend(super::cached_attention::all_modules());
    all.extend(super::grouped_matmul::all_modules());
    all.extend(super::cross_entropy::all_modules());
    all.extend(super::quant::all_modules());
    all.extend(super::source::index_sort_modules());
    all.push((
        "deferred_record".to_string(),
        super::deferred::RECORD_SRC.to_string(),
    ));
    all
}

/// What [`crate::cuda::warmup`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Warmup {
    /// Modules stride can generate for the device.
    pub modules: usize,
    /// Of those, compiled now by NVRTC (the others were in the disk cache already).
    pub compiled: usize,
    /// Wall time, in seconds.
    pub seconds: f64,
}

/// Compiles every module missing from the disk cache for `dev`'s architecture, on `threads`
/// threads at once (NVRTC compiles independent programs concurrently).
pub(crate) fn warmup(dev: &CudaDevice, threads: usize) -> Result<Warmup> {
    let t0 = std::time::Instant::now();
    if cache_dir().is_none() {
        return Err(crate::Error::invalid(
            "cuda warmup",
            "no kernel cache directory can be made; set STRIDE_KERNEL_CACHE to a writable folder",
        ));
    }
    let arch = arch_of(dev);
    let all = every_module();
    let missing: Vec<&(String, String)> = all
        .iter()
        .filter(|(n, s)| cache_file(n, s, &arch).is_some_and(|f| !f.exists()))
        .collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
        .map_err(|e| crate::Error::invalid("cuda warmup", e.to_string()))?;
    let failed: Vec<String> = pool.install(|| {
        use rayon::prelude::*;
        missing
            .par_iter()
            .filter_map(|(n, s)| cubin(n, s, &arch).err().map(|e| format!("{n}: {e}")))
            .collect()
    });
    if let Some(e) = failed.first() {
        return Err(dev.err(
            &format!("compiling kernel modules for {arch} with NVRTC (a stride bug)"),
            e.clone(),
        ));
    }
    Ok(Warmup {
        modules: all.len(),
        compiled: missing.len(),
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// NVRTC: source → CUBIN for `arch` (`sm_90`); the error carries NVRTC's log. Needs no GPU.
pub(crate) fn compile_source(
    name: &str,
    source: &str,
    arch: &str,
) -> std::result::Result<Vec<u8>, String> {
    let src = CString::new(source).map_err(|e| e.to_string())?;
    let cname = CString::new(format!("{name}.cu")).map_err(|e| e.to_string())?;
    let prog = nvrtc::create_program(&src, Some(&cname)).map_err(|e| e.to_string())?;
    let mut opts: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    opts.push(format!("--gpu-architecture={arch}"));
    let out = (|| {
        if let Err(e) = unsafe { nvrtc::compile_program(prog, &opts) } {
            let log = unsafe { nvrtc::get_program_log(prog) }
                .map(|l| {
                    let bytes: Vec<u8> =
                        l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                })
                .unwrap_or_default();
            return Err(format!("{e}; log:\n{log}"));
        }
        let mut size = 0usize;
        unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) }
            .result()
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; size];
        unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut _) }
            .result()
            .map_err(|e| e.to_string())?;
        Ok(buf)
    })();
    let _ = unsafe { nvrtc::destroy_program(prog) };
    out
}

#[cfg(test)]
mod tests {
    /// Every module stride can generate compiles with NVRTC (no GPU needed; skipped, saying
    /// so, where libnvrtc is absent — point `LD_LIBRARY_PATH` at one to run it).
    #[test]
    fn every_module_compiles() {
        if !unsafe { super::nvrtc_sys::is_culib_present() } {
            eprintln!("skipped: libnvrtc not found");
            return;
        }
        let mut all = super::every_module();
        // STRIDE_COMPILE_ONLY=a,b compiles only the modules whose names contain a or b
        if let Ok(only) = std::env::var("STRIDE_COMPILE_ONLY") {
            all.retain(|(name, _)| only.split(',').any(|p| name.contains(p)));
        }
        use rayon::prelude::*;
        all.par_iter().for_each(|(name, src)| {
            if let Err(e) = super::compile_source(name, src, "sm_90") {
                panic!("module {name} does not compile: {e}");
            }
        });
    }

    #[test]
    fn fnv_is_stable_and_separates_parts() {
        assert_eq!(super::fnv1a(&[b"a"]), super::fnv1a(&[b"a"]));
        assert_ne!(super::fnv1a(&[b"ab", b"c"]), super::fnv1a(&[b"a", b"bc"]));
    }
}
