//! The CPU backend: one folder, readable on its own.
//!
//! - [`strided`]: the iteration engine (plans, runs, parallel split);
//! - [`parallel`]: the one door into rayon (tasks behind `dyn Fn`, compiled once);
//! - [`access`]: locking the storages of an op and handing kernels raw pointers;
//! - [`copy`]: strided copy with cast, fill (tiled for transposes);
//! - [`elementwise`]: unary/binary/ternary kernels;
//! - [`math`]: the scalar math the kernels share.
//! - [`flip`]: copy with reversed dims; [`random`]: Philox random fills.
//! - [`matmul`]: batched matrix products through `gemm`, any strides.
//! - [`reduce`]: reductions over dims (sum, max, argmax, …); [`cumulative`]: scans.
//! - [`pages`]: huge-page advice for large buffers; [`prefetch`]: software prefetch hints.
//! - [`transpose`]: 8×8 register transposes for tiles of 4-byte elements.
//! - [`primitives`]: the [`crate::backend::contract::Backend`] implementation over all of the above.

pub(crate) mod access;
pub(crate) mod attention;
pub(crate) mod cached_attention;
pub(crate) mod copy;
pub(crate) mod cross_entropy;
pub(crate) mod cumulative;
pub(crate) mod elementwise;
pub(crate) mod flip;
pub(crate) mod grouped_matmul;
pub(crate) mod index;
pub(crate) mod math;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod pages;
pub(crate) mod parallel;
pub(crate) mod pointwise;
pub(crate) mod prefetch;
pub(crate) mod primitives;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod rows;
pub(crate) mod sort;
pub(crate) mod strided;
pub(crate) mod transpose;
