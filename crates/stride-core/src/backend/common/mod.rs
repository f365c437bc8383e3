//! Backend-neutral code: what every backend computes the same way, so that no backend imports
//! another. `cpu/` keeps what is specific to running on host threads (rayon, tiling,
//! prefetching); `cuda/` keeps its kernels and launches; both build on this module.

pub(crate) mod check; // extent and dtype checks before touching memory
pub(crate) mod float; // the compute type of each dtype, NaN-aware extrema, scatter accumulation
pub(crate) mod plan; // the merged strided geometry of N operands
pub(crate) mod random; // host-side parts of random fills (the uniform cap)
