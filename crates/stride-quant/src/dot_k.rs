//! K-quant weights (Q4_K, Q5_K, Q6_K) × Q8_K activations.
//!
//! A super-block holds 256 values. With `d8` the activation block's `f32` scale:
//!
//! - **Q4_K** (144 bytes): f16 `d`, f16 `dmin`, 12 bytes of eight 6-bit (scale, min) pairs
//!   (ggml's `get_scale_min_k4` packing), 128 bytes of nibbles: value `e = 64c + 32s + l` is
//!   nibble `s` of byte `32c + l`, in sub-block `j = e / 32`; value `d·sc_j·q − dmin·m_j`.
//!   Terms: `(d·d8) · Σ_j sc_j Σ q·q8`, then `−(dmin·d8) · Σ_j m_j Σ q8` (the latter from the
//!   activation's sums of 16).
//! - **Q5_K** (176 bytes): as Q4_K with 32 bytes `qh` before the nibbles; bit `j` of `qh[l]`
//!   is the fifth bit of value `32j + l`.
//! - **Q6_K** (210 bytes): 128 bytes `ql`, 64 bytes `qh`, 16 int8 scales, f16 `d`. Value
//!   `e = 128h + r`: low nibble `r / 64` of `ql[64h + r % 64]`, high two bits
//!   `(qh[32h + r % 32] >> 2(r / 32)) & 3`, minus 32; value `d · sc[e / 16] · q`. Term:
//!   `(d·d8) · Σ_g sc_g Σ q·q8`.
//!
//! The integer sums are exact in `i32` (at most 2.7·10⁸ in magnitude); their conversion
//! to `f32` and the scale products `d·d8` round, the same in both paths.

use crate::accum::Acc8;
use crate::dot::f16_at;
use crate::q8::Q8Row;
use stride_gguf::{scale_min_k4, QK_K};

/// `Σ_j m_j · (bsums[2j] + bsums[2j+1])`.
#[inline(always)]
fn mins_sum(mn: &[u8; 8], bsums: &[i16]) -> i32 {
    (0..8)
        .map(|j| mn[j] as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32))
        .sum()
}

/// The terms of a Q4_K/Q5_K block (the definition both paths follow).
#[inline(always)]
fn finish_k_min(acc: &mut Acc8, b: usize, wb: &[u8], d8: f32, sumi: i32, summ: i32) {
    let (d, dmin) = (f16_at(wb, 0), f16_at(wb, 2));
    acc.add(b, d * d8, sumi as f32);
    acc.add(b, -(dmin * d8), summ as f32);
}

fn check(w: &[u8], a: &Q8Row, ts: usize) -> usize {
    let nb = a.d().len();
    assert!(w.len() == nb * ts && a.qs().len() == nb * QK_K && a.bsums().len() == nb * 16);
    nb
}

pub(crate) fn q4_k_scalar(w: &[u8], a: &Q8Row) -> f32 {
    let nb = check(w, a, 144);
    let mut acc = Acc8::new();
    for b in 0..nb {
        let wb = &w[b * 144..(b + 1) * 144];
        let qx = &a.qs()[b * QK_K..(b + 1) * QK_K];
        let (sc, mn) = scale_min_k4(&wb[4..16]);
        let qs = &wb[16..144];
        let mut sumi = 0i32;
        for j in 0..8 {
            let (c, s) = (j / 2, 4 * (j % 2));
            let mut sj = 0i32;
            for l in 0..32 {
                sj += ((qs[32 * c + l] >> s) & 0xF) as i32 * qx[32 * j + l] as i32;
            }
            sumi += sc[j] as i32 * sj;
        }
        let summ = mins_sum(&mn, &a.bsums()[b * 16..b * 16 + 16]);
        finish_k_min(&mut acc, b, wb, a.d()[b], sumi, summ);
    }
    acc.sum()
}

pub(crate) fn q5_k_scalar(w: &[u8], a: &Q8Row) -> f32 {
    let nb = check(w, a, 176);
    let mut acc = Acc8::new();
    for b in 0..nb {
        let wb = &w[b * 176..(b + 1) * 176];
        let qx = &a.qs()[b * QK_K..(b + 1) * QK_K];
        let (sc, mn) = scale_min_k4(&wb[4..16]);
        let (qh, qs) = (&wb[16..48], &wb[48..176]);
        let mut sumi = 0i32;
        for j in 0..8 {
            let (c, s) = (j / 2, 4 * (j % 2));
            let mut sj = 0i32;
            for l in 0..32 {
                let q = ((qs[32 * c + l] >> s) & 0xF) | (((qh[l] >> j) & 1) << 4);
                sj += q as i32 * qx[32 * j + l] as i32;
            }
            sumi += sc[j] as i32 * sj;
        }
        let summ = mins_sum(&mn, &a.bsums()[b * 16..b * 16 + 16]);
        finish_k_min(&mut acc, b, wb, a.d()[b], sumi, summ);
    }
    acc.sum()
}

pub(crate) fn q6_k_scalar(w: &[u8], a: &Q8Row) -> f32 {
    let nb = check(w, a, 210);
    let mut acc = Acc8::new();
    for b in 0..nb {
        let wb = &w[b * 210..(b + 1) * 210];
        let qx = &a.qs()[b * QK_K..(b + 1) * QK_K];
        let (ql, qh, sc) = (&wb[0..128], &wb[128..192], &wb[192..208]);
        let mut sumi = 0i32;
        for h in 0..2 {
            for k in 0..4 {
                // values 128h + 32k + l, l < 32: groups of 16 (8h + 2k) and (8h + 2k + 1)
                let mut sg = [0i32; 2];
                for l in 0..32 {
                    let lo = (ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xF;
                    let hi = (qh[32 * h + l] >> (2 * k)) & 3;
                    let q = (lo | hi << 4) as i32 - 32;
                    sg[l / 16] += q * qx[128 * h + 32 * k + l] as i32;
                }
                let g = 8 * h + 2 * k;
                sumi += sc[g] as i8 as i32 * sg[0] + sc[g + 1] as i8 as i32 * sg[1];
            }
        }
        acc.add(b, f16_at(wb, 208) * a.d()[b], sumi as f32);
    }
    acc.sum()
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::{check, finish_k_min, mins_sum, scale_min_k4};
    use crate::accum::Acc8;
    use crate::dot::avx2::hsum_i32;
    use crate::dot::f16_at;
    use crate::q8::Q8Row;
    use std::arch::x86_64::*;
    use stride_gguf::QK_K;

    /// # Safety
    /// AVX2, FMA and F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn q4_k(w: &[u8], a: &Q8Row) -> f32 {
        let nb = check(w, a, 144);
        let m4 = _mm256_set1_epi8(0x0F);
        let mut acc = Acc8::new();
        for b in 0..nb {
            let wb = &w[b * 144..(b + 1) * 144];
            let qx = a.qs()[b * QK_K..].as_ptr();
            let (sc, mn) = scale_min_k4(&wb[4..16]);
            let qs = wb[16..].as_ptr();
            let mut s = _mm256_setzero_si256();
            for c in 0..4 {
                // SAFETY: 128 nibble bytes and 256 values lie behind qs and qx
                let (v, x0, x1) = unsafe {
                    (
                        _mm256_loadu_si256(qs.add(32 * c) as *const __m256i),
                        _mm256_loadu_si256(qx.add(64 * c) as *const __m256i),
                        _mm256_loadu_si256(qx.add(64 * c + 32) as *const __m256i),
                    )
                };
                let lo = _mm256_and_si256(v, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                let p0 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(lo, x0),
                    _mm256_set1_epi16(sc[2 * c] as i16),
                );
                let p1 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(hi, x1),
                    _mm256_set1_epi16(sc[2 * c + 1] as i16),
                );
                s = _mm256_add_epi32(s, _mm256_add_epi32(p0, p1));
            }
            let summ = mins_sum(&mn, &a.bsums()[b * 16..b * 16 + 16]);
            finish_k_min(&mut acc, b, wb, a.d()[b], hsum_i32(s), summ);
        }
        acc.sum()
    }

    /// # Safety
    /// AVX2, FMA and F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn q5_k(w: &[u8], a: &Q8Row) -> f32 {
        let nb = check(w, a, 176);
        let m4 = _mm256_set1_epi8(0x0F);
        let one = _mm256_set1_epi8(1);
        let mut acc = Acc8::new();
        for b in 0..nb {
            let wb = &w[b * 176..(b + 1) * 176];
            let qx = a.qs()[b * QK_K..].as_ptr();
            let (sc, mn) = scale_min_k4(&wb[4..16]);
            // SAFETY: 32 qh bytes at 16
            let qh = unsafe { _mm256_loadu_si256(wb[16..].as_ptr() as *const __m256i) };
            let qs = wb[48..].as_ptr();
            let mut s = _mm256_setzero_si256();
            for c in 0..4 {
                // SAFETY: 128 nibble bytes and 256 values lie behind qs and qx
                let (v, x0, x1) = unsafe {
                    (
                        _mm256_loadu_si256(qs.add(32 * c) as *const __m256i),
                        _mm256_loadu_si256(qx.add(64 * c) as *const __m256i),
                        _mm256_loadu_si256(qx.add(64 * c + 32) as *const __m256i),
                    )
                };
                let (j0, j1) = (2 * c as i32, 2 * c as i32 + 1);
                // bit j of each qh byte, moved to bit 4
                let h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j0)), one);
                let h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j1)), one);
                let lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16::<4>(h0));
                let hi = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4),
                    _mm256_slli_epi16::<4>(h1),
                );
                let p0 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(lo, x0),
                    _mm256_set1_epi16(sc[2 * c] as i16),
                );
                let p1 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(hi, x1),
                    _mm256_set1_epi16(sc[2 * c + 1] as i16),
                );
                s = _mm256_add_epi32(s, _mm256_add_epi32(p0, p1));
            }
            let summ = mins_sum(&mn, &a.bsums()[b * 16..b * 16 + 16]);
            finish_k_min(&mut acc, b, wb, a.d()[b], hsum_i32(s), summ);
        }
        acc.sum()
    }

    /// # Safety
    /// AVX2, FMA and F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn q6_k(w: &[u8], a: &Q8Row) -> f32 {
        let nb = check(w, a, 210);
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(3);
        let mut acc = Acc8::new();
        for b in 0..nb {
            let wb = &w[b * 210..(b + 1) * 210];
            let qx = a.qs()[b * QK_K..].as_ptr();
            let sc = &wb[192..208];
            let bsums = &a.bsums()[b * 16..b * 16 + 16];
            let mut s = _mm256_setzero_si256();
            for h in 0..2 {
                // SAFETY: ql (128 bytes) at 0, qh (64 bytes) at 128
                let (ql0, ql1, qh) = unsafe {
                    (
                        _mm256_loadu_si256(wb[64 * h..].as_ptr() as *const __m256i),
                        _mm256_loadu_si256(wb[64 * h + 32..].as_ptr() as *const __m256i),
                        _mm256_loadu_si256(wb[128 + 32 * h..].as_ptr() as *const __m256i),
                    )
                };
                for k in 0..4 {
                    let ql = if k % 2 == 0 { ql0 } else { ql1 };
                    let nib = if k < 2 {
                        _mm256_and_si256(ql, m4)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql), m4)
                    };
                    let hb =
                        _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k as i32)), m2);
                    // q + 32, in 0…63
                    let q = _mm256_or_si256(nib, _mm256_slli_epi16::<4>(hb));
                    // SAFETY: 256 values behind qx
                    let x =
                        unsafe { _mm256_loadu_si256(qx.add(128 * h + 32 * k) as *const __m256i) };
                    let g = 8 * h + 2 * k;
                    let scv = _mm256_set_m128i(
                        _mm_set1_epi16(sc[g + 1] as i8 as i16),
                        _mm_set1_epi16(sc[g] as i8 as i16),
                    );
                    s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scv));
                }
            }
            // Σ sc_g Σ (q + 32)·q8 − 32 Σ sc_g Σ q8
            let offset: i32 = (0..16).map(|g| sc[g] as i8 as i32 * bsums[g] as i32).sum();
            let sumi = hsum_i32(s) - 32 * offset;
            acc.add(b, f16_at(wb, 208) * a.d()[b], sumi as f32);
        }
        acc.sum()
    }
}
