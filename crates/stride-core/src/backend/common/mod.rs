//! Backend-neutral code: what every backend computes the same way, so that no backend imports
//! another. `cpu/` keeps what is specific to running on host threads (rayon, tiling,
//! prefetching); `cuda/` keeps its kernels and launches; both build on this module.

pub(crate) mod check; // extent and dtype checks before touching memory
pub(crate) mod deferred; // device-side checks whose verdict the host reads later
pub(crate) mod float; // the compute type of each dtype, NaN-aware extrema, scatter accumulation
pub(crate) mod plan; // the merged strided geometry of N operands
pub(crate) mod random; // host-side parts of random fills (the uniform cap)

use crate::{with_dtype, DType, Scalar};

/// The bits of `value` as one element of `dtype` (little-endian in the low bytes), made by
/// the CPU's own conversion: what a device's fill writes.
pub(crate) fn element_bits(value: Scalar, dtype: DType) -> u64 {
    with_dtype!(dtype, T => {
        let v: T = value.to_elem();
        let mut b = [0u8; 8];
        let n = std::mem::size_of::<T>();
        // SAFETY: T is a plain element type of n ≤ 8 bytes
        unsafe { std::ptr::copy_nonoverlapping(&v as *const T as *const u8, b.as_mut_ptr(), n) };
        u64::from_le_bytes(b)
    })
}
