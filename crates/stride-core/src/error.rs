//! Errors are values: every fallible call returns [`Result`], and every message names the op,
//! the shapes/dtypes/devices involved and, where there is one, what to do instead.

use crate::{DType, Device};

/// The error type of every fallible stride call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Two shapes that had to match (or broadcast) do not.
    #[error("{op}: shapes {lhs:?} and {rhs:?} {why}")]
    ShapeMismatch {
        op: &'static str,
        lhs: Vec<usize>,
        rhs: Vec<usize>,
        why: String,
    },

    /// A dim index outside `-ndim..ndim`.
    #[error("{op}: dim {dim} is out of range for a tensor of {ndim} dims (valid: {lo}..={hi})", lo = -(*ndim as i64).max(1), hi = (*ndim as i64).max(1) - 1)]
    DimOutOfRange {
        op: &'static str,
        dim: i64,
        ndim: usize,
    },

    /// An index or range outside a dim's size.
    #[error("{op}: index {index} is out of range for dim {dim} of size {size}")]
    IndexOutOfRange {
        op: &'static str,
        index: i64,
        dim: usize,
        size: usize,
    },

    /// The op does not support this dtype.
    #[error("{op}: dtype {dtype} is not supported{hint}")]
    UnsupportedDType {
        op: &'static str,
        dtype: DType,
        hint: String,
    },

    /// The device cannot hold tensors of this dtype at all (f64 on wgpu: see
    /// [`Device::holds`]); `why` names the missing capability and what to do instead.
    #[error("{device} cannot hold {dtype} tensors: {why}")]
    DeviceLacksDType {
        device: Device,
        dtype: DType,
        why: String,
    },

    /// The op's result dtype cannot be stored in the given output without a lossy cast.
    #[error("{op}: result dtype {result} can't be cast to the output dtype {output} (an in-place or _out op never changes a category: float -> int or int -> bool); cast explicitly with to_dtype")]
    UnsafeCast {
        op: &'static str,
        result: DType,
        output: DType,
    },

    /// Operands live on different devices.
    #[error(
        "{op}: expected all tensors on one device, found {a} and {b}; move one with to_device"
    )]
    DeviceMismatch {
        op: &'static str,
        a: Device,
        b: Device,
    },

    /// The device is not available in this build or on this machine.
    #[error("device {device} is not available: {why}")]
    DeviceUnavailable { device: Device, why: String },

    /// A view was requested that the tensor's layout cannot express.
    #[error("{op}: {why}")]
    NotViewable { op: &'static str, why: String },

    /// A write into a view in which several elements share one memory location.
    #[error("{op}: the output (shape {shape:?}, strides {strides:?}) has elements that share memory (e.g. an expanded view); writing into it is ambiguous. Write into a .contiguous() or .clone_tensor() of it instead (PyTorch's clone(); Rust's .clone() is the same view)")]
    OverlappingOutput {
        op: &'static str,
        shape: Vec<usize>,
        strides: Vec<usize>,
    },

    /// Data does not fit the shape it was given.
    #[error("{op}: {len} elements do not fill shape {shape:?} ({numel} elements)")]
    DataLength {
        op: &'static str,
        len: usize,
        shape: Vec<usize>,
        numel: usize,
    },

    /// Integer division or remainder by zero.
    #[error("{op}: integer division by zero")]
    ZeroDivision { op: &'static str },

    /// A CUDA driver, NVRTC or kernel failure, naming the device and what stride was doing.
    #[error("{device}: {msg}")]
    Cuda { device: Device, msg: String },

    /// An allocation that can't be made: a tensor, a host-side staging buffer or a kernel's
    /// scratch, on any device. Absurd sizes (`zeros([1 << 62])`, `repeat` or `pad` by
    /// billions, `linspace` with 2^40 steps, a `contiguous()` of a huge expanded view) are
    /// this error, never a panic or an abort: it names the op, the shape and dtype asked for
    /// and the bytes (computed without overflow, so a request beyond the address space is
    /// named exactly). Nothing was changed, and the program stays usable: free tensors (or use
    /// smaller sizes) and try again. On CUDA the allocator releases its cache and retries
    /// before it gives this error. A shape whose *element count* overflows `usize` is an
    /// argument error ([`Error::Invalid`]) instead: no tensor, not even a view, can have it.
    #[error("{device}: {op}: out of memory allocating {} for shape {shape:?}{} ({detail}). {}", fmt_bytes(*requested), dtype.map(|d| format!(" of {d}")).unwrap_or_default(), oom_advice(*device))]
    OutOfMemory {
        /// The op that asked (`"alloc"` where the allocation was not attributed to one).
        op: &'static str,
        device: Device,
        /// The shape of the buffer asked for (the result's, or the scratch's).
        shape: Vec<usize>,
        /// Its element dtype (`None` for scratch of no tensor dtype, e.g. the views of `chunk`).
        dtype: Option<DType>,
        /// Bytes requested (`u128`: the exact count even past the address space).
        requested: u128,
        detail: String,
    },
    /// The op has no kernel on this device yet.
    #[error("{op}: no kernel for {device} yet; run it on the CPU (to_device(&Device::Cpu)) and move the result back")]
    NotImplemented { op: &'static str, device: Device },

    /// Anomaly mode ([`crate::debug::detect_anomaly`]) found a NaN or an infinity that an op
    /// produced from finite inputs; `report` names the op, its operands (shapes, dtypes,
    /// strides, device) and where it was called (for a backward op: where its forward ran).
    #[error("anomaly: {op} {report}")]
    Anomaly { op: String, report: String },

    /// A host synchronisation inside a [`crate::debug::forbid_sync`] scope; `report` says
    /// what caused it and where it was called.
    #[error("host synchronisation in a sync guard: {report}")]
    HostSync { device: Device, report: String },

    /// [`crate::debug::cross_check`] found an op whose result disagrees with the reference
    /// device's; `report` names the op, its operand layouts and dtypes and the disagreement.
    #[error("cross-check: {op} {report}")]
    CrossCheck { op: String, report: String },

    /// [`crate::debug::check_leaks`] saw allocated bytes grow across iterations.
    #[error("memory leak check: {report}")]
    Leak { device: Device, report: String },

    /// A check that needs the data (an index out of range, an integer division by zero) failed
    /// on a GPU, where it ran without the host waiting for it: reported at the first read of
    /// the device after the op. `cause` is the error the op gives on the CPU; `report` names
    /// the operands and where the op was called. The op wrote nothing. Every read of the
    /// device returns this error until the backend's `take_error` takes it
    /// (`stride::cuda::take_error`, `stride::webgpu::take_error`; see their `check_errors`).
    #[error("{device}: {cause} (found by a device-side check of an earlier op; {report}). That op wrote nothing; every read of {device} returns this error until {} takes it. For the error at the op itself, call stride::set_sync_checks(true)", take_error_fn(device))]
    DeviceCheck {
        device: Device,
        cause: Box<Error>,
        report: String,
    },

    /// Any other invalid argument; the message says what and what to do.
    #[error("{op}: {msg}")]
    Invalid { op: &'static str, msg: String },

    /// A distributed run failed: a collective, the rendezvous, NCCL, or another rank (named
    /// where known). `op` says what this process was doing.
    #[error("{op}{}: {msg}", match rank { Some(r) => format!(" (rank {r})"), None => String::new() })]
    Distributed {
        op: &'static str,
        rank: Option<usize>,
        msg: String,
    },
}

/// `Result` with stride's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// `1234 bytes (1.21 KiB)`.
fn fmt_bytes(b: u128) -> String {
    const UNITS: [&str; 7] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB"];
    if b < 1024 {
        return format!("{b} bytes");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{b} bytes ({v:.2} {})", UNITS[u])
}

fn oom_advice(device: Device) -> &'static str {
    match device {
        Device::Cpu => "Check the sizes, free tensors you no longer need, or use smaller batches",
        Device::Cuda(_) => "Free tensors you no longer need, call stride::cuda::empty_cache, or use smaller batches",
        Device::Wgpu(_) => "Free tensors you no longer need, or use smaller batches",
    }
}

impl Error {
    /// Names `op` in an out-of-memory or size error that an allocation helper could not
    /// attribute (`op == "alloc"`); any other error is returned as it is.
    pub(crate) fn in_op(self, op: &'static str) -> Error {
        match self {
            Error::Invalid { op: "alloc", msg } => Error::Invalid { op, msg },
            Error::OutOfMemory {
                op: "alloc",
                device,
                shape,
                dtype,
                requested,
                detail,
            } => Error::OutOfMemory {
                op,
                device,
                shape,
                dtype,
                requested,
                detail,
            },
            e => e,
        }
    }
    pub(crate) fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Invalid {
            op,
            msg: msg.into(),
        }
    }
}

/// The function that takes a device's deferred error, for [`Error::DeviceCheck`]'s message.
fn take_error_fn(device: &Device) -> &'static str {
    match device {
        Device::Wgpu(_) => "stride::webgpu::take_error",
        _ => "stride::cuda::take_error",
    }
}
