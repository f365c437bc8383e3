//! The CPU backend: one folder, readable on its own.
//!
//! - [`strided`]: the iteration engine (plans, runs, parallel split);
//! - [`access`]: locking the storages of an op and handing kernels raw pointers;
//! - [`copy`]: strided copy with cast, fill (tiled for transposes);
//! - [`elementwise`]: unary/binary/ternary kernels;
//! - [`math`]: the scalar math the kernels share.
//! - [`matmul`]: batched matrix products through `gemm`, any strides.
//! - [`pages`]: huge-page advice for large buffers.

pub(crate) mod access;
pub(crate) mod copy;
pub(crate) mod elementwise;
pub(crate) mod math;
pub(crate) mod matmul;
pub(crate) mod pages;
pub(crate) mod strided;
