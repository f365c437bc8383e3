//! The CPU backend: one folder, readable on its own.
//!
//! - [`strided`]: the iteration engine (plans, runs, parallel split);
//! - [`access`]: locking the storages of an op and handing kernels raw pointers;
//! - [`copy`]: strided copy with cast, fill (tiled for transposes);
//! - [`elementwise`]: unary/binary/ternary kernels;
//! - [`math`]: the scalar math the kernels share.
//! - [`reduce`]: reductions over dims (sum, max, argmax, …); [`cumulative`]: scans.

pub(crate) mod access;
pub(crate) mod copy;
pub(crate) mod cumulative;
pub(crate) mod elementwise;
pub(crate) mod math;
pub(crate) mod reduce;
pub(crate) mod strided;
