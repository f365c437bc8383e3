//! Q8_0 weights × Q8_0 activations.
//!
//! Block (34 bytes): f16 `d`, 32 int8 `q`; value `d · q`. Block term: `(d_w·d_x) · Σ q_w·q_x`.

use crate::dot::{blocks32_scalar, Block32};
use crate::q8::Q8Row;

pub(crate) struct Q8_0;

impl Block32 for Q8_0 {
    const TS: usize = 34;
    const MIN: bool = false;
    const SIGNED: bool = true;

    #[inline(always)]
    fn values(wb: &[u8]) -> [i8; 32] {
        let mut v = [0i8; 32];
        for (v, &q) in v.iter_mut().zip(&wb[2..34]) {
            *v = q as i8;
        }
        v
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn values_avx2(wb: *const u8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees a whole block at `wb`
        unsafe { _mm256_loadu_si256(wb.add(2) as *const __m256i) }
    }

    #[inline(always)]
    fn isum(wb: &[u8], qx: &[i8]) -> i32 {
        wb[2..34]
            .iter()
            .zip(qx)
            .map(|(&q, &x)| q as i8 as i32 * x as i32)
            .sum()
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn isum_avx2(wb: *const u8, qx: *const i8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees a whole block at `wb` and 32 values at `qx`
        let (q, x) = unsafe {
            (
                _mm256_loadu_si256(wb.add(2) as *const __m256i),
                _mm256_loadu_si256(qx as *const __m256i),
            )
        };
        // |q| ≤ 128 and |x| ≤ 127 (Q8_0 activations are in −127…127)
        crate::dot::avx2::dot_i8(q, x)
    }
}

pub(crate) fn q8_0_scalar(w: &[u8], a: &Q8Row) -> f32 {
    blocks32_scalar::<Q8_0>(w, a)
}
