//! The error type of this crate: every refused call says what was wrong and what to do.

use stride_gguf::{GgmlType, GgufError};

/// Result alias of this crate.
pub type Result<T, E = QuantError> = std::result::Result<T, E>;

/// Why a quantized-matrix call was refused. A refused call leaves its operands unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// The weight type has no kernel in this crate.
    #[error("{op}: {ggml_type} weights have no quantized kernel (supported: {supported}); dequantize them with stride_gguf::dequantize and use an f32 product instead")]
    Unsupported {
        op: &'static str,
        ggml_type: GgmlType,
        supported: &'static str,
    },
    /// A size, a length or a stride does not fit the matrix or the buffers given.
    #[error("{op}: {detail}")]
    BadSize { op: &'static str, detail: String },
    /// An instruction set was asked for that this CPU does not have.
    #[error("{op}: the {isa} kernels need CPU features this machine lacks; use Isa::detect() (or Isa::Scalar)")]
    IsaUnavailable { op: &'static str, isa: &'static str },
    /// The memory for a result could not be allocated.
    #[error("{op}: cannot allocate {bytes} bytes for the result")]
    OutOfMemory { op: &'static str, bytes: u128 },
    /// An error of the GGUF layer (quantization of the weights).
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// An error of stride-core (a tensor or a device: the CUDA products).
    #[error(transparent)]
    Core(#[from] stride_core::Error),
}

pub(crate) fn bad_size(op: &'static str, detail: String) -> QuantError {
    QuantError::BadSize { op, detail }
}
