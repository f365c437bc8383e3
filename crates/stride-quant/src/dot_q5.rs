//! Q5_0 weights × Q8_0 activations, Q5_1 weights × Q8_1 activations.
//!
//! Q5_0 block (22 bytes): f16 `d`, u32 `qh` (little-endian), 16 bytes of nibbles (order as
//! Q4_0); bit `e` of `qh` is the fifth bit of value `e`; value `d · (q − 16)`. Block term:
//! `(d_w·d_x) · Σ (q − 16)·q_x`.
//!
//! Q5_1 block (24 bytes): f16 `d`, f16 `m`, u32 `qh`, 16 bytes of nibbles; value `d·q + m`.
//! Block terms: `(d_w·d_x) · Σ q·q_x`, then `m_w · s_x`.

use crate::dot::{blocks32_scalar, Block32};
use crate::q8::Q8Row;

#[inline(always)]
fn five_bit_dot(qh: &[u8], qs: &[u8], qx: &[i8], offset: i32) -> i32 {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut s = 0i32;
    for l in 0..16 {
        let lo = (qs[l] & 0xF) as i32 | (((h >> l) & 1) << 4) as i32;
        let hi = (qs[l] >> 4) as i32 | (((h >> (l + 16)) & 1) << 4) as i32;
        s += (lo - offset) * qx[l] as i32 + (hi - offset) * qx[l + 16] as i32;
    }
    s
}

/// The 32 five-bit values of the block whose `qh` is at `qh` and nibbles at `qs`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn five_bits_avx2(qh: *const u8, qs: *const u8) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees 4 bytes at `qh` and 16 at `qs`
    let (h, n) = unsafe {
        (
            (qh as *const u32).read_unaligned(),
            crate::dot_q4::nibbles_avx2(qs),
        )
    };
    // byte i of `bytes` is byte i / 8 of qh; keep its bit i % 8
    let idx = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(h as i32), idx);
    let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
    _mm256_or_si256(n, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
}

/// The 32 five-bit values of the block (`qh`: 4 bytes, `qs`: 16) in value order, minus
/// `offset`.
#[inline(always)]
fn five_bit_values(qh: &[u8], qs: &[u8], offset: i8) -> [i8; 32] {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut v = [0i8; 32];
    for l in 0..16 {
        v[l] = ((qs[l] & 0xF) | (((h >> l) & 1) << 4) as u8) as i8 - offset;
        v[l + 16] = ((qs[l] >> 4) | (((h >> (l + 16)) & 1) << 4) as u8) as i8 - offset;
    }
    v
}

pub(crate) struct Q5_0;

impl Block32 for Q5_0 {
    const TS: usize = 22;
    const MIN: bool = false;
    const SIGNED: bool = true;

    #[inline(always)]
    fn values(wb: &[u8]) -> [i8; 32] {
        five_bit_values(&wb[2..6], &wb[6..22], 16)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn values_avx2(wb: *const u8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees a whole block at `wb`
        let q = unsafe { five_bits_avx2(wb.add(2), wb.add(6)) };
        _mm256_sub_epi8(q, _mm256_set1_epi8(16))
    }

    #[inline(always)]
    fn isum(wb: &[u8], qx: &[i8]) -> i32 {
        five_bit_dot(&wb[2..6], &wb[6..22], qx, 16)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn isum_avx2(wb: *const u8, qx: *const i8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees a whole block at `wb` and 32 values at `qx`
        let (q, x) = unsafe {
            (
                five_bits_avx2(wb.add(2), wb.add(6)),
                _mm256_loadu_si256(qx as *const __m256i),
            )
        };
        crate::dot::avx2::dot_i8(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), x)
    }
}

pub(crate) struct Q5_1;

impl Block32 for Q5_1 {
    const TS: usize = 24;
    const MIN: bool = true;
    const SIGNED: bool = false;

    #[inline(always)]
    fn values(wb: &[u8]) -> [i8; 32] {
        five_bit_values(&wb[4..8], &wb[8..24], 0)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn values_avx2(wb: *const u8) -> std::arch::x86_64::__m256i {
        // SAFETY: the caller guarantees a whole block at `wb`
        unsafe { five_bits_avx2(wb.add(4), wb.add(8)) }
    }

    #[inline(always)]
    fn isum(wb: &[u8], qx: &[i8]) -> i32 {
        five_bit_dot(&wb[4..8], &wb[8..24], qx, 0)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn isum_avx2(wb: *const u8, qx: *const i8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees a whole block at `wb` and 32 values at `qx`
        let (q, x) = unsafe {
            (
                five_bits_avx2(wb.add(4), wb.add(8)),
                _mm256_loadu_si256(qx as *const __m256i),
            )
        };
        crate::dot::avx2::dot_u8_i8(q, x)
    }
}

pub(crate) fn q5_0_scalar(w: &[u8], a: &Q8Row) -> f32 {
    blocks32_scalar::<Q5_0>(w, a)
}

pub(crate) fn q5_1_scalar(w: &[u8], a: &Q8Row) -> f32 {
    blocks32_scalar::<Q5_1>(w, a)
}
