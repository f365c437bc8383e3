//! Q4_0 weights × Q8_0 activations, Q4_1 weights × Q8_1 activations.
//!
//! Q4_0 block (18 bytes): f16 `d`, 16 bytes of nibbles; value `l < 16` is the low nibble
//! of byte `l`, value `16 + l` its high nibble; value `d · (nibble − 8)`. Block term:
//! `(d_w·d_x) · Σ (n − 8)·q_x`.
//!
//! Q4_1 block (20 bytes): f16 `d`, f16 `m`, 16 bytes of nibbles (same order); value
//! `d · n + m`. Block terms: `(d_w·d_x) · Σ n·q_x`, then `m_w · s_x` (`s_x = d_x · Σ q_x`).

use crate::dot::{blocks32_scalar, Block32};
use crate::q8::Q8Row;

#[inline(always)]
fn nibble_dot(qs: &[u8], qx: &[i8], offset: i32) -> i32 {
    let mut s = 0i32;
    for l in 0..16 {
        s += ((qs[l] & 0xF) as i32 - offset) * qx[l] as i32;
        s += ((qs[l] >> 4) as i32 - offset) * qx[l + 16] as i32;
    }
    s
}

/// The 32 nibbles of the 16 bytes at `p`, in value order (low nibbles, then high ones).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn nibbles_avx2(p: *const u8) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees 16 bytes at `p`
    let v = unsafe { _mm_loadu_si128(p as *const __m128i) };
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(v), v);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// The 32 nibbles of `qs` (16 bytes) in value order, minus `offset`.
#[inline(always)]
fn nibble_values(qs: &[u8], offset: i8) -> [i8; 32] {
    let mut v = [0i8; 32];
    for l in 0..16 {
        v[l] = (qs[l] & 0xF) as i8 - offset;
        v[l + 16] = (qs[l] >> 4) as i8 - offset;
    }
    v
}

pub(crate) struct Q4_0;

impl Block32 for Q4_0 {
    const TS: usize = 18;
    const MIN: bool = false;
    const SIGNED: bool = true;

    #[inline(always)]
    fn values(wb: &[u8]) -> [i8; 32] {
        nibble_values(&wb[2..18], 8)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn values_avx2(wb: *const u8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees a whole block at `wb`
        let n = unsafe { nibbles_avx2(wb.add(2)) };
        _mm256_sub_epi8(n, _mm256_set1_epi8(8))
    }

    #[inline(always)]
    fn isum(wb: &[u8], qx: &[i8]) -> i32 {
        nibble_dot(&wb[2..18], qx, 8)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn isum_avx2(wb: *const u8, qx: *const i8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees a whole block at `wb` and 32 values at `qx`
        let (n, x) = unsafe {
            (
                nibbles_avx2(wb.add(2)),
                _mm256_loadu_si256(qx as *const __m256i),
            )
        };
        let q = _mm256_sub_epi8(n, _mm256_set1_epi8(8));
        crate::dot::avx2::dot_i8(q, x)
    }
}

pub(crate) struct Q4_1;

impl Block32 for Q4_1 {
    const TS: usize = 20;
    const MIN: bool = true;
    const SIGNED: bool = false;

    #[inline(always)]
    fn values(wb: &[u8]) -> [i8; 32] {
        nibble_values(&wb[4..20], 0)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn values_avx2(wb: *const u8) -> std::arch::x86_64::__m256i {
        // SAFETY: the caller guarantees a whole block at `wb`
        unsafe { nibbles_avx2(wb.add(4)) }
    }

    #[inline(always)]
    fn isum(wb: &[u8], qx: &[i8]) -> i32 {
        nibble_dot(&wb[4..20], qx, 0)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn isum_avx2(wb: *const u8, qx: *const i8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees a whole block at `wb` and 32 values at `qx`
        let (n, x) = unsafe {
            (
                nibbles_avx2(wb.add(4)),
                _mm256_loadu_si256(qx as *const __m256i),
            )
        };
        crate::dot::avx2::dot_u8_i8(n, x)
    }
}

pub(crate) fn q4_0_scalar(w: &[u8], a: &Q8Row) -> f32 {
    blocks32_scalar::<Q4_0>(w, a)
}

pub(crate) fn q4_1_scalar(w: &[u8], a: &Q8Row) -> f32 {
    blocks32_scalar::<Q4_1>(w, a)
}
