//! The error type: every way a GGUF file can be refused, each naming the problem.

use crate::{GgmlType, ValueType};
use std::path::PathBuf;

/// Result alias of this crate.
pub type Result<T, E = GgufError> = std::result::Result<T, E>;

/// Why a GGUF file, a lookup or a (de)quantization was refused.
///
/// Parse errors say what was being read (`while reading tensor info 3 of 272
/// ("blk.0.attn_q.weight")`) and, for truncation, at which byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("cannot read GGUF file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic is {found:?} (bytes {bytes:02x?}), expected \"GGUF\"")]
    BadMagic { found: String, bytes: [u8; 4] },
    /// A GGUF version this reader does not read (v1, a future version, big-endian files).
    #[error("unsupported GGUF version {version}: {why}")]
    UnsupportedVersion { version: u32, why: &'static str },
    /// The file ends before a field that it announces.
    #[error("file truncated: {what} needs {needed} bytes at offset {offset}, but the file has {file_len} bytes")]
    Truncated {
        what: &'static str,
        offset: u64,
        needed: u64,
        file_len: u64,
    },
    /// A count or length that cannot fit in what is left of the file (a lying header).
    #[error("{what} = {count} cannot be right: that many need at least {min_bytes} bytes but only {remaining} bytes remain after offset {offset}")]
    CountTooLarge {
        what: &'static str,
        count: u64,
        min_bytes: u128,
        remaining: u64,
        offset: u64,
    },
    /// Some other structural problem, described in words.
    #[error("malformed GGUF file: {0}")]
    Malformed(String),
    /// Context for an error raised while reading one part of the file.
    #[error("while reading {context}: {source}")]
    Context {
        context: String,
        #[source]
        source: Box<GgufError>,
    },
    /// A metadata value type id outside 0..=12.
    #[error("unknown metadata value type id {id} at offset {offset}")]
    UnknownValueType { id: u32, offset: u64 },
    /// A tensor names a ggml type id that this reader does not know.
    #[error("tensor {tensor:?} has unknown ggml type id {id}")]
    UnknownGgmlType { tensor: String, id: u32 },
    /// A metadata key is missing.
    #[error("metadata key {key:?} not found")]
    KeyNotFound { key: String },
    /// A metadata key holds another type than the getter asked for.
    #[error("metadata key {key:?} holds {found}, not {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    /// A tensor name is not in the file.
    #[error("tensor {name:?} not found")]
    TensorNotFound { name: String },
    /// A tensor's data lies (partly) outside the file's data section.
    #[error("tensor {tensor:?}: data [{start}, {end}) relative to the data section lies past its end ({data_len} bytes)")]
    TensorOutOfBounds {
        tensor: String,
        start: u64,
        end: u128,
        data_len: u64,
    },
    /// Two tensors' data overlap.
    #[error("tensors {first:?} [{first_start}, {first_end}) and {second:?} [{second_start}, {second_end}) overlap")]
    TensorOverlap {
        first: String,
        first_start: u64,
        first_end: u64,
        second: String,
        second_start: u64,
        second_end: u64,
    },
    /// Dequantization or quantization does not support this type.
    #[error("{op} of {ggml_type} is not supported")]
    Unsupported {
        op: &'static str,
        ggml_type: GgmlType,
    },
    /// A buffer's length does not match the element count and type.
    #[error("{op}: {detail}")]
    BadLength { op: &'static str, detail: String },
    /// Quantization of a NaN or infinite value into a block type.
    #[error("quantize to {ggml_type}: value {index} (in block {block}) is {value}; {ggml_type} blocks hold finite values only")]
    NonFinite {
        ggml_type: GgmlType,
        index: usize,
        block: usize,
        value: f32,
    },
}

impl GgufError {
    pub(crate) fn context(self, context: impl Into<String>) -> GgufError {
        GgufError::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }

    /// The innermost error, below every [`GgufError::Context`] layer.
    pub fn root(&self) -> &GgufError {
        match self {
            GgufError::Context { source, .. } => source.root(),
            e => e,
        }
    }
}

/// Names for `WrongType::expected`.
pub(crate) fn type_name(t: ValueType) -> &'static str {
    t.name()
}
