//! NCCL, loaded at run time like the rest of CUDA.
//!
//! stride loads NCCL itself (with `libloading`, as cudarc does) rather than through cudarc's
//! `nccl` feature: cudarc 0.19's loader looks for `libnccl.so` and `libnccl.so.{13,12,11,10,9,1}`
//! but never `libnccl.so.2`, the one name NCCL's packages install without the development
//! link, and it panics on a missing library or symbol. Here a missing NCCL is an error that
//! says where stride looked, and `STRIDE_NCCL_LIB` names a library anywhere.

use super::dist_err;
use crate::{DType, Result};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

pub(crate) type Comm = *mut c_void;
pub(crate) type Stream = *mut c_void;

/// `ncclUniqueId`: 128 opaque bytes rank 0 makes and every rank passes to `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct UniqueId {
    pub internal: [c_char; 128],
}

type Res = c_int;

/// The functions stride uses, resolved once.
pub(crate) struct Nccl {
    _lib: libloading::Library,
    get_version: unsafe extern "C" fn(*mut c_int) -> Res,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> Res,
    comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> Res,
    comm_destroy: unsafe extern "C" fn(Comm) -> Res,
    comm_abort: unsafe extern "C" fn(Comm) -> Res,
    comm_get_async_error: unsafe extern "C" fn(Comm, *mut Res) -> Res,
    get_error_string: unsafe extern "C" fn(Res) -> *const c_char,
    get_last_error: Option<unsafe extern "C" fn(Comm) -> *const c_char>,
    all_reduce:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res,
    broadcast:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res,
    reduce_scatter:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res,
    all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> Res,
}

// SAFETY: function pointers into a library that stays loaded for the life of the process.
unsafe impl Send for Nccl {}
unsafe impl Sync for Nccl {}

/// Where stride looks for NCCL, in order.
fn candidates() -> Vec<String> {
    let mut c = vec![];
    if let Ok(p) = std::env::var("STRIDE_NCCL_LIB") {
        c.push(p);
    }
    c.extend(["libnccl.so.2".to_string(), "libnccl.so".to_string()]);
    // NVIDIA's wheel (nvidia-nccl-cu12/13, which PyTorch installs) outside the loader's path
    let mut roots: Vec<String> = vec![];
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Ok(v) = std::env::var(var) {
            roots.push(format!("{v}/lib"));
        }
    }
    if let Ok(h) = std::env::var("HOME") {
        roots.push(format!("{h}/.local/lib"));
    }
    roots.extend(["/usr/local/lib".into(), "/usr/lib".into()]);
    for root in roots {
        let Ok(rd) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("python3") {
                for pkgs in ["site-packages", "dist-packages"] {
                    let p = format!("{root}/{name}/{pkgs}/nvidia/nccl/lib/libnccl.so.2");
                    if std::path::Path::new(&p).exists() {
                        c.push(p);
                    }
                }
            }
        }
    }
    c
}

fn load() -> std::result::Result<Nccl, String> {
    let tried = candidates();
    let mut errors = vec![];
    for name in &tried {
        // SAFETY: loading NCCL runs its initialisers, which have no preconditions.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => return resolve(lib, name),
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    Err(format!(
        "NCCL was not found (tried {}); install NCCL (e.g. `pip install nvidia-nccl-cu13`) or set STRIDE_NCCL_LIB to the path of libnccl.so.2",
        tried.join(", ")
    ))
}

fn resolve(lib: libloading::Library, path: &str) -> std::result::Result<Nccl, String> {
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the signature is NCCL's (nccl.h, stable since 2.0 for these functions)
            *unsafe { lib.get($name) }.map_err(|e| {
                format!(
                    "{path} lacks {}: {e} (NCCL 2.10 or newer is needed)",
                    String::from_utf8_lossy(&$name[..$name.len() - 1])
                )
            })?
        };
    }
    let get_last_error = unsafe { lib.get(b"ncclGetLastError\0") }.ok().map(|s| *s);
    Ok(Nccl {
        get_version: sym!(b"ncclGetVersion\0"),
        get_unique_id: sym!(b"ncclGetUniqueId\0"),
        comm_init_rank: sym!(b"ncclCommInitRank\0"),
        comm_destroy: sym!(b"ncclCommDestroy\0"),
        comm_abort: sym!(b"ncclCommAbort\0"),
        comm_get_async_error: sym!(b"ncclCommGetAsyncError\0"),
        get_error_string: sym!(b"ncclGetErrorString\0"),
        get_last_error,
        all_reduce: sym!(b"ncclAllReduce\0"),
        broadcast: sym!(b"ncclBroadcast\0"),
        reduce_scatter: sym!(b"ncclReduceScatter\0"),
        all_gather: sym!(b"ncclAllGather\0"),
        _lib: lib,
    })
}

/// NCCL, loaded on first use.
pub(crate) fn nccl() -> Result<&'static Nccl> {
    static LIB: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();
    LIB.get_or_init(load)
        .as_ref()
        .map_err(|e| dist_err("nccl", None, e.clone()))
}

/// The loaded NCCL's version as (major, minor, patch), or the error saying why none loads.
///
/// ```
/// match stride_core::distributed::nccl_version() {
///     Ok((major, minor, _)) => assert!(major >= 2, "NCCL {major}.{minor}"),
///     Err(e) => assert!(e.to_string().contains("NCCL")),
/// }
/// ```
pub fn nccl_version() -> Result<(u32, u32, u32)> {
    let n = nccl()?;
    let mut v: c_int = 0;
    n.call("ncclGetVersion", None, unsafe { (n.get_version)(&mut v) })?;
    let v = v as u32;
    // NCCL_VERSION(X,Y,Z): X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before)
    Ok(if v >= 20900 {
        (v / 10000, (v % 10000) / 100, v % 100)
    } else {
        (v / 1000, (v % 1000) / 100, v % 100)
    })
}

/// NCCL 2.22 and later connect to the peers lazily, at the first collective that needs them,
/// and the calling thread blocks inside that call until the peer takes part: a rank that
/// never comes (dead, or in another branch) would hang its caller where no watchdog can see a
/// queued collective. With `NCCL_RUNTIME_CONNECT=0` the connections are made in
/// `ncclCommInitRank`, where every rank is present.
pub(crate) const RUNTIME_CONNECT: &str = "NCCL_RUNTIME_CONNECT";

/// Sets `NCCL_RUNTIME_CONNECT=0` for this process unless the user chose a value. Called before
/// the first communicator (and before `run_threads` starts its threads): the environment is
/// process-wide, so it is set once.
pub(crate) fn connect_eagerly() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os(RUNTIME_CONNECT).is_none() {
            std::env::set_var(RUNTIME_CONNECT, "0");
        }
    });
}

/// `ncclRedOp_t`.
pub(crate) const SUM: c_int = 0;
pub(crate) const PROD: c_int = 1;
pub(crate) const MAX: c_int = 2;
pub(crate) const MIN: c_int = 3;
pub(crate) const AVG: c_int = 4;

/// `ncclDataType_t` of a stride dtype (bool travels as u8: only data movement may use it).
pub(crate) fn data_type(d: DType) -> c_int {
    match d {
        DType::I8 => 0,
        DType::U8 | DType::Bool => 1,
        DType::I32 => 2,
        DType::U32 => 3,
        DType::I64 => 4,
        DType::F16 => 6,
        DType::F32 => 7,
        DType::F64 => 8,
        DType::BF16 => 9,
    }
}

impl Nccl {
    /// `Ok` for `ncclSuccess`; otherwise an error naming the call and NCCL's own words.
    pub fn call(&self, what: &str, comm: Option<Comm>, r: Res) -> Result<()> {
        if r == 0 {
            return Ok(());
        }
        Err(dist_err("nccl", None, self.describe(what, comm, r)))
    }
    pub fn describe(&self, what: &str, comm: Option<Comm>, r: Res) -> String {
        let text = |p: *const c_char| {
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: NCCL returns NUL-terminated static or per-comm strings
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        let mut s = format!(
            "{what} failed: {}",
            text(unsafe { (self.get_error_string)(r) })
        );
        if let (Some(f), Some(c)) = (self.get_last_error, comm) {
            let last = text(unsafe { f(c) });
            if !last.is_empty() {
                s.push_str(&format!(" ({last})"));
            }
        }
        s
    }
    pub fn unique_id(&self) -> Result<UniqueId> {
        let mut id = UniqueId { internal: [0; 128] };
        self.call("ncclGetUniqueId", None, unsafe {
            (self.get_unique_id)(&mut id)
        })?;
        Ok(id)
    }
    /// # Safety
    /// The calling thread's current CUDA context must be the rank's device.
    pub unsafe fn init_rank(&self, world: usize, id: UniqueId, rank: usize) -> Result<Comm> {
        let mut comm: Comm = std::ptr::null_mut();
        self.call("ncclCommInitRank", None, unsafe {
            (self.comm_init_rank)(&mut comm, world as c_int, id, rank as c_int)
        })?;
        Ok(comm)
    }
    pub unsafe fn destroy(&self, comm: Comm) {
        unsafe { (self.comm_destroy)(comm) };
    }
    pub unsafe fn abort(&self, comm: Comm) {
        unsafe { (self.comm_abort)(comm) };
    }
    /// The communicator's asynchronous error (a failed peer, a network error), if any.
    pub unsafe fn async_error(&self, comm: Comm) -> Option<String> {
        let mut r: Res = 0;
        let q = unsafe { (self.comm_get_async_error)(comm, &mut r) };
        if q != 0 {
            return Some(self.describe("ncclCommGetAsyncError", Some(comm), q));
        }
        // 7 is ncclInProgress: not an error
        (r != 0 && r != 7).then(|| self.describe("a collective", Some(comm), r))
    }
    /// # Safety
    /// Pointers must hold `count` elements of `dt` on the communicator's device, and stay
    /// valid until the stream's work is done.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dt: c_int,
        op: c_int,
        comm: Comm,
        stream: Stream,
    ) -> Result<()> {
        let r = unsafe { (self.all_reduce)(send as _, recv as _, count, dt, op, comm, stream) };
        self.call("ncclAllReduce", Some(comm), r)
    }
    /// # Safety
    /// As [`Nccl::all_reduce`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn broadcast(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dt: c_int,
        root: usize,
        comm: Comm,
        stream: Stream,
    ) -> Result<()> {
        let r = unsafe {
            (self.broadcast)(send as _, recv as _, count, dt, root as c_int, comm, stream)
        };
        self.call("ncclBroadcast", Some(comm), r)
    }
    /// # Safety
    /// `send` holds `world × recv_count` elements, `recv` `recv_count`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce_scatter(
        &self,
        send: u64,
        recv: u64,
        recv_count: usize,
        dt: c_int,
        op: c_int,
        comm: Comm,
        stream: Stream,
    ) -> Result<()> {
        let r = unsafe {
            (self.reduce_scatter)(send as _, recv as _, recv_count, dt, op, comm, stream)
        };
        self.call("ncclReduceScatter", Some(comm), r)
    }
    /// # Safety
    /// `send` holds `send_count` elements, `recv` `world × send_count`.
    pub unsafe fn all_gather(
        &self,
        send: u64,
        recv: u64,
        send_count: usize,
        dt: c_int,
        comm: Comm,
        stream: Stream,
    ) -> Result<()> {
        let r = unsafe { (self.all_gather)(send as _, recv as _, send_count, dt, comm, stream) };
        self.call("ncclAllGather", Some(comm), r)
    }
}
