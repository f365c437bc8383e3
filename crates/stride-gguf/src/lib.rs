//! GGUF files for stride: the file format of llama.cpp models.
//!
//! - [`Gguf`] reads GGUF v2 and v3 files, memory-mapped ([`Gguf::open`]) or from bytes
//!   ([`Gguf::from_bytes`]): every metadata value type, typed getters whose errors name the
//!   key and the type found, tensor infos, and each tensor's bytes as a slice of the map.
//!   A truncated, malformed or lying file is an [`GgufError`] naming the problem; the parser
//!   never panics, never reads out of bounds and bounds every allocation by the bytes left.
//! - [`GgmlType`]: every ggml storage type with its block geometry.
//! - [`dequantize`]: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K … Q6_K, TQ2_0,
//!   MXFP4, IQ4_NL and IQ4_XS to `f32`, bit-exact with the reference (`gguf` Python package), tested against
//!   golden fixtures.
//! - [`quantize`]: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (and F32/F16/BF16), byte-exact with the reference encoder.
//! - [`GgufWriter`]: writes GGUF files, in memory or streamed tensor by tensor
//!   ([`GgufWriter::add_tensor_info`], [`TensorDataWriter`]).
//!
//! ```no_run
//! use stride_gguf::Gguf;
//! let g = Gguf::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let n_layers = g.get_u32("llama.block_count")?;
//! let emb = g.tensor("token_embd.weight")?;           // Q8_0, dims [576, 49152]
//! let weights: Vec<f32> = g.dequantize("token_embd.weight")?;
//! # Ok::<(), stride_gguf::GgufError>(())
//! ```
//!
//! This crate does not depend on `stride-core`: it is the file-format layer that the model
//! loaders build tensors from.

#![forbid(unsafe_op_in_unsafe_fn)]

mod dequant;
mod error;
mod quant;
mod reader;
mod types;
mod value;
mod writer;

pub use dequant::{can_dequantize, dequantize, dequantize_to_vec, scale_min_k4};
pub use error::{GgufError, Result};
pub use quant::{can_quantize, quantize};
pub use reader::{Gguf, TensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ARRAY_NESTING, MAX_DIMS};
pub use types::{GgmlType, QK_K};
pub use value::{Array, Value, ValueType};
pub use writer::{GgufWriter, TensorDataWriter};
