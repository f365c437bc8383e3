//! Software prefetch: asking for a stretch of memory a little before a kernel reads it, where
//! the hardware prefetcher doesn't guess the pattern (short pieces of rows far apart, random
//! rows). A hint only: it never faults, whatever the address, and changes no data; on other
//! architectures it does nothing.

/// The cache level a prefetch fills.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// The core's L1 data cache (`_MM_HINT_T0`).
    L1,
    /// L2 (`_MM_HINT_T1`): a core keeps more L2 misses in flight than L1 misses.
    L2,
}

/// Asks for the `bytes` bytes from `p` to be brought into `into`, one request per 64-byte line.
#[inline(always)]
pub(crate) fn stretch<T>(p: *const T, bytes: usize, into: Level) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        let p = p as *const i8;
        for off in (0..bytes).step_by(64) {
            // SAFETY: prefetching is a hint and never dereferences; wrapping_add keeps the
            // address computation defined for any address.
            unsafe {
                match into {
                    Level::L1 => _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off)),
                    Level::L2 => _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(off)),
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes, into);
}
