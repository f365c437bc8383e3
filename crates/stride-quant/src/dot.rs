//! Dispatch of the row dot products, and what the SIMD kernels share.
//!
//! `dot(isa, ty, w, a)` is the product of one weight row (`w`: GGUF blocks of `ty`) and one
//! quantized activation row (`a`, in `ActFormat::for_weights(ty)`), computed as the crate
//! documentation defines it. The callers (`matmul.rs`) have checked every length.

use crate::accum::Acc8;
use crate::q8::Q8Row;
use crate::{dot_k, dot_q4, dot_q5, dot_q8, Isa};
use stride_gguf::GgmlType;

/// The weight types with kernels.
pub(crate) const SUPPORTED: &str = "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K";

pub(crate) fn is_supported(ty: GgmlType) -> bool {
    crate::ActFormat::for_weights(ty).is_some()
}

/// The dot product of a weight row and a quantized activation row. `isa` must be available
/// (checked by the callers: the SIMD kernels rely on it).
pub(crate) fn dot(isa: Isa, ty: GgmlType, w: &[u8], a: &Q8Row) -> f32 {
    debug_assert!(isa.is_available());
    use GgmlType::*;
    match isa {
        Isa::Scalar => match ty {
            Q8_0 => dot_q8::q8_0_scalar(w, a),
            Q4_0 => dot_q4::q4_0_scalar(w, a),
            Q4_1 => dot_q4::q4_1_scalar(w, a),
            Q5_0 => dot_q5::q5_0_scalar(w, a),
            Q5_1 => dot_q5::q5_1_scalar(w, a),
            Q4_K => dot_k::q4_k_scalar(w, a),
            Q5_K => dot_k::q5_k_scalar(w, a),
            Q6_K => dot_k::q6_k_scalar(w, a),
            _ => unreachable!("weight type checked by QMatrix"),
        },
        Isa::Avx2 => dot_avx2(ty, w, a),
    }
}

#[cfg(target_arch = "x86_64")]
fn dot_avx2(ty: GgmlType, w: &[u8], a: &Q8Row) -> f32 {
    use GgmlType::*;
    assert!(
        Isa::Avx2.is_available(),
        "AVX2 kernel called on a CPU without it"
    );
    // SAFETY: the CPU has AVX2, FMA and F16C (asserted above); the kernels check lengths.
    unsafe {
        match ty {
            Q8_0 => avx2::blocks32::<dot_q8::Q8_0>(w, a),
            Q4_0 => avx2::blocks32::<dot_q4::Q4_0>(w, a),
            Q4_1 => avx2::blocks32::<dot_q4::Q4_1>(w, a),
            Q5_0 => avx2::blocks32::<dot_q5::Q5_0>(w, a),
            Q5_1 => avx2::blocks32::<dot_q5::Q5_1>(w, a),
            Q4_K => dot_k::avx2::q4_k(w, a),
            Q5_K => dot_k::avx2::q5_k(w, a),
            Q6_K => dot_k::avx2::q6_k(w, a),
            _ => unreachable!("weight type checked by QMatrix"),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn dot_avx2(_: GgmlType, _: &[u8], _: &Q8Row) -> f32 {
    unreachable!("Isa::Avx2 is never available off x86-64")
}

/// The f16 at byte `i` of `b`, as `f32` (exact).
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// A weight type with 32-value blocks, consumed with Q8_0 or Q8_1 activations.
///
/// The block's contribution is `fma(d_w · d_x, Σ q_w·q_x, lane)` and, for types with a
/// minimum (`MIN`), then `fma(m_w, s_x, lane)`.
pub(crate) trait Block32 {
    /// Bytes per block.
    const TS: usize;
    /// Whether the block has an f16 minimum at byte 2 (Q4_1, Q5_1), paired with Q8_1's sum.
    const MIN: bool;
    /// `Σ q_w · q_x` of block `b`, exactly.
    fn isum(wb: &[u8], qx: &[i8]) -> i32;
    /// Eight `i32` partial sums whose total is `Σ q_w · q_x` of the block at `wb`.
    ///
    /// # Safety
    /// AVX2 present; `wb` points at a whole block, `qx` at 32 values.
    #[cfg(target_arch = "x86_64")]
    unsafe fn isum_avx2(wb: *const u8, qx: *const i8) -> std::arch::x86_64::__m256i;
}

/// Adds block `b`'s terms to `acc` (the definition both paths follow).
#[inline(always)]
pub(crate) fn block32_scalar<B: Block32>(w: &[u8], a: &Q8Row, b: usize, acc: &mut Acc8) {
    let wb = &w[b * B::TS..(b + 1) * B::TS];
    let sumi = B::isum(wb, &a.qs()[b * 32..b * 32 + 32]);
    acc.add(b, f16_at(wb, 0) * a.d()[b], sumi as f32);
    if B::MIN {
        acc.add(b, f16_at(wb, 2), a.s()[b]);
    }
}

/// The portable kernel of a 32-value block type.
pub(crate) fn blocks32_scalar<B: Block32>(w: &[u8], a: &Q8Row) -> f32 {
    let mut acc = Acc8::new();
    for b in 0..a.d().len() {
        block32_scalar::<B>(w, a, b, &mut acc);
    }
    acc.sum()
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::{block32_scalar, Block32};
    use crate::accum::Acc8;
    use crate::q8::Q8Row;
    use std::arch::x86_64::*;

    /// The sum of the eight `i32` lanes of `v`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn hsum_i32(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }

    /// Lane `k` of the result is the sum of the eight lanes of `v[k]`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn hsum_8x8(v: [__m256i; 8]) -> __m256i {
        let h01 = _mm256_hadd_epi32(v[0], v[1]);
        let h23 = _mm256_hadd_epi32(v[2], v[3]);
        let h45 = _mm256_hadd_epi32(v[4], v[5]);
        let h67 = _mm256_hadd_epi32(v[6], v[7]);
        let a = _mm256_hadd_epi32(h01, h23); // [v0..v3 low halves | v0..v3 high halves]
        let b = _mm256_hadd_epi32(h45, h67);
        let lo = _mm256_permute2x128_si256::<0x20>(a, b);
        let hi = _mm256_permute2x128_si256::<0x31>(a, b);
        _mm256_add_epi32(lo, hi)
    }

    /// `Σ x·y` of 32 signed bytes in eight `i32` lanes; needs `|x| ≤ 128`, `|y| ≤ 127`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn dot_i8(x: __m256i, y: __m256i) -> __m256i {
        let ax = _mm256_sign_epi8(x, x);
        let sy = _mm256_sign_epi8(y, x);
        _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
    }

    /// `Σ x·y` of 32 unsigned bytes `x ≤ 127` and signed bytes `y`, in eight `i32` lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn dot_u8_i8(x: __m256i, y: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
    }

    /// Eight f16 read from `p`, `p + stride`, … as `f32` lanes.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn f16x8(p: *const u8, stride: usize) -> __m256 {
        let mut h = [0u16; 8];
        for (k, hk) in h.iter_mut().enumerate() {
            // SAFETY: the caller guarantees 8 blocks of `stride` bytes from `p`
            *hk = unsafe { (p.add(k * stride) as *const u16).read_unaligned() };
        }
        // SAFETY: `h` is 16 bytes
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(h.as_ptr() as *const __m128i) })
    }

    /// The AVX2 kernel of a 32-value block type: eight blocks at a time, block `8g + k` in
    /// lane `k`, the remaining blocks by the scalar definition on the same lanes.
    ///
    /// # Safety
    /// AVX2, FMA and F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn blocks32<B: Block32>(w: &[u8], a: &Q8Row) -> f32 {
        let nb = a.d().len();
        assert!(w.len() == nb * B::TS && a.qs().len() == nb * 32);
        assert!(!B::MIN || a.s().len() == nb);
        let (wp, qp) = (w.as_ptr(), a.qs().as_ptr());
        let mut acc = _mm256_setzero_ps();
        let groups = nb / 8;
        for g in 0..groups {
            let b0 = g * 8;
            // SAFETY: blocks b0..b0+8 lie inside `w` and `a` (lengths asserted above)
            unsafe {
                let mut s = [_mm256_setzero_si256(); 8];
                for (k, sk) in s.iter_mut().enumerate() {
                    *sk = B::isum_avx2(wp.add((b0 + k) * B::TS), qp.add((b0 + k) * 32));
                }
                let sumi = _mm256_cvtepi32_ps(hsum_8x8(s));
                let dw = f16x8(wp.add(b0 * B::TS), B::TS);
                let dx = _mm256_loadu_ps(a.d().as_ptr().add(b0));
                acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), sumi, acc);
                if B::MIN {
                    let mw = f16x8(wp.add(b0 * B::TS + 2), B::TS);
                    let sx = _mm256_loadu_ps(a.s().as_ptr().add(b0));
                    acc = _mm256_fmadd_ps(mw, sx, acc);
                }
            }
        }
        let mut out = Acc8::new();
        // SAFETY: `lanes` is 8 f32
        unsafe { _mm256_storeu_ps(out.lanes.as_mut_ptr(), acc) };
        for b in groups * 8..nb {
            block32_scalar::<B>(w, a, b, &mut out);
        }
        out.sum()
    }
}
