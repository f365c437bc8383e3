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
    /// Whether the weight values of [`Block32::values`] can be negative (Q4_0, Q5_0, Q8_0);
    /// the AVX2 tile kernel then multiplies `|q_w|` by `q_x` with `q_w`'s sign, as
    /// `dot_i8` does.
    const SIGNED: bool;
    /// The block's 32 integer weight values in value order, so that
    /// `Σ values[e] · q_x[e] == isum(wb, q_x)`.
    fn values(wb: &[u8]) -> [i8; 32];
    /// The 32 values of [`Block32::values`] in one register.
    ///
    /// # Safety
    /// AVX2 present; `wb` points at a whole block.
    #[cfg(target_arch = "x86_64")]
    unsafe fn values_avx2(wb: *const u8) -> std::arch::x86_64::__m256i;
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

/// Whether [`dot_rows`] has a tile kernel for `ty` (the 32-value block types); the others
/// take the per-pair path.
pub(crate) fn has_rows(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0)
}

/// The dot products of one weight row with `R` activation rows, each output the same bits
/// as `dot(isa, ty, w, a[r])`: the weight blocks are unpacked once for the tile, and each
/// row keeps its own eight lanes, filled by the same operations in the same order.
/// `ty` must satisfy [`has_rows`] and `isa` be available.
pub(crate) fn dot_rows<const R: usize>(
    isa: Isa,
    ty: GgmlType,
    w: &[u8],
    a: [&Q8Row; R],
) -> [f32; R] {
    debug_assert!(isa.is_available());
    use GgmlType::*;
    match isa {
        Isa::Scalar => match ty {
            Q8_0 => blocks32_rows_scalar::<dot_q8::Q8_0, R>(w, a),
            Q4_0 => blocks32_rows_scalar::<dot_q4::Q4_0, R>(w, a),
            Q4_1 => blocks32_rows_scalar::<dot_q4::Q4_1, R>(w, a),
            Q5_0 => blocks32_rows_scalar::<dot_q5::Q5_0, R>(w, a),
            Q5_1 => blocks32_rows_scalar::<dot_q5::Q5_1, R>(w, a),
            _ => unreachable!("dot_rows called for a type without a tile kernel"),
        },
        Isa::Avx2 => dot_rows_avx2::<R>(ty, w, a),
    }
}

#[cfg(target_arch = "x86_64")]
fn dot_rows_avx2<const R: usize>(ty: GgmlType, w: &[u8], a: [&Q8Row; R]) -> [f32; R] {
    use GgmlType::*;
    assert!(
        Isa::Avx2.is_available(),
        "AVX2 kernel called on a CPU without it"
    );
    // SAFETY: the CPU has AVX2, FMA and F16C (asserted above); the kernels check lengths.
    unsafe {
        match ty {
            Q8_0 => avx2::blocks32_rows::<dot_q8::Q8_0, R>(w, a),
            Q4_0 => avx2::blocks32_rows::<dot_q4::Q4_0, R>(w, a),
            Q4_1 => avx2::blocks32_rows::<dot_q4::Q4_1, R>(w, a),
            Q5_0 => avx2::blocks32_rows::<dot_q5::Q5_0, R>(w, a),
            Q5_1 => avx2::blocks32_rows::<dot_q5::Q5_1, R>(w, a),
            _ => unreachable!("dot_rows called for a type without a tile kernel"),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn dot_rows_avx2<const R: usize>(_: GgmlType, _: &[u8], _: [&Q8Row; R]) -> [f32; R] {
    unreachable!("Isa::Avx2 is never available off x86-64")
}

/// The portable tile kernel: [`blocks32_scalar`] for each of the `R` rows, each weight block
/// decoded once. Per row, block `b` adds exactly the terms `block32_scalar` adds (the
/// integer sum is the same integer, summed in another order).
pub(crate) fn blocks32_rows_scalar<B: Block32, const R: usize>(
    w: &[u8],
    a: [&Q8Row; R],
) -> [f32; R] {
    let nb = w.len() / B::TS;
    for ar in &a {
        assert!(ar.d().len() == nb && ar.qs().len() == nb * 32);
        assert!(!B::MIN || ar.s().len() == nb);
    }
    let mut acc = [Acc8::new(); R];
    for b in 0..nb {
        let wb = &w[b * B::TS..(b + 1) * B::TS];
        let q = B::values(wb);
        let dw = f16_at(wb, 0);
        for (ar, acc) in a.iter().zip(acc.iter_mut()) {
            let qx = &ar.qs()[b * 32..b * 32 + 32];
            let sumi: i32 = q.iter().zip(qx).map(|(&w, &x)| w as i32 * x as i32).sum();
            acc.add(b, dw * ar.d()[b], sumi as f32);
            if B::MIN {
                acc.add(b, f16_at(wb, 2), ar.s()[b]);
            }
        }
    }
    acc.map(|acc| acc.sum())
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::{block32_scalar, f16_at, Block32};
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

    /// The integer block sums of blocks `b0..b0 + count` (`count ≤ 8`) for `R` activation
    /// rows: lane `k` of result `r` is `Σ q_w·q_x` of block `b0 + k` and row `r` (0 for
    /// `k ≥ count`). Each weight block is unpacked once (`B::values_avx2`, and its
    /// magnitudes for a signed type) and multiplied into every row by the `maddubs`/`madd`
    /// of `dot_i8`/`dot_u8_i8`; the eight vectors of a row are then reduced to one (as
    /// [`hsum_8x8`] does, with blends doing half of its shuffles' work: [`combine2`],
    /// [`combine4`]).
    /// Integer sums are exact, so these are the integers `blocks32` gets.
    ///
    /// # Safety
    /// AVX2 present; blocks `b0..b0 + count` lie inside the weight row at `wp` and inside
    /// every activation row at `qp`.
    #[inline(always)]
    unsafe fn group_sums<B: Block32, const R: usize>(
        wp: *const u8,
        qp: &[*const i8; R],
        b0: usize,
        count: usize,
    ) -> [__m256i; R] {
        // SAFETY: AVX2 present and the blocks in bounds (the caller's guarantee); always
        // inlined into an AVX2 kernel, so the intrinsics inline too
        unsafe {
            // a transposing reduction with one shuffle per combining step (blends do the
            // rest), interleaved with the products to keep few registers live
            let mut half = [[_mm256_setzero_si256(); 2]; R];
            for (hf, k0) in [0usize, 4].into_iter().enumerate() {
                // the caller's guarantee, for the blocks b0 + k0 … b0 + k0 + 3 below count
                let v0 = block_sums::<B, R>(wp, qp, b0 + k0, k0 < count);
                let v1 = block_sums::<B, R>(wp, qp, b0 + k0 + 1, k0 + 1 < count);
                let v2 = block_sums::<B, R>(wp, qp, b0 + k0 + 2, k0 + 2 < count);
                let v3 = block_sums::<B, R>(wp, qp, b0 + k0 + 3, k0 + 3 < count);
                for r in 0..R {
                    // even lanes: v0 (v2), odd lanes: v1 (v3)
                    let p01 = combine2(v0[r], v1[r]);
                    let p23 = combine2(v2[r], v3[r]);
                    // lanes 4h + k: part h of block k0 + k
                    half[r][hf] = combine4(p01, p23);
                }
            }
            let mut out = [_mm256_setzero_si256(); R];
            for r in 0..R {
                // lane k: block k, both parts
                let x = _mm256_blend_epi32::<0xF0>(half[r][0], half[r][1]);
                let y = _mm256_permute2x128_si256::<0x21>(half[r][0], half[r][1]);
                out[r] = _mm256_add_epi32(x, y);
            }
            out
        }
    }

    /// `[a0+a1, b0+b1, a2+a3, b2+b3, …]`: even lanes hold sums of `a`, odd ones of `b`.
    #[inline(always)]
    unsafe fn combine2(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: AVX2 present (the caller's guarantee)
        unsafe {
            let x = _mm256_blend_epi32::<0b1010_1010>(a, b);
            let y = _mm256_blend_epi32::<0b1010_1010>(b, a);
            _mm256_add_epi32(x, _mm256_shuffle_epi32::<0b10_11_00_01>(y))
        }
    }

    /// Of two [`combine2`] results `p` (blocks 0, 1) and `q` (blocks 2, 3): lane `4h + k`
    /// is the sum of block `k`'s lanes in 128-bit half `h`.
    #[inline(always)]
    unsafe fn combine4(p: __m256i, q: __m256i) -> __m256i {
        // SAFETY: AVX2 present (the caller's guarantee)
        unsafe {
            let x = _mm256_blend_epi32::<0b1100_1100>(p, q);
            let y = _mm256_blend_epi32::<0b1100_1100>(q, p);
            _mm256_add_epi32(x, _mm256_shuffle_epi32::<0b01_00_11_10>(y))
        }
    }

    /// The eight `i32` partial sums of block `b` with each of the `R` rows (as
    /// `B::isum_avx2`), or zeros when `!present`.
    ///
    /// # Safety
    /// AVX2 present; when `present`, block `b` lies inside the weight row at `wp` and every
    /// activation row at `qp`.
    #[inline(always)]
    unsafe fn block_sums<B: Block32, const R: usize>(
        wp: *const u8,
        qp: &[*const i8; R],
        b: usize,
        present: bool,
    ) -> [__m256i; R] {
        // SAFETY: AVX2 present, block b inside `w` and every row when `present` (the
        // caller's guarantee); always inlined into an AVX2 kernel
        unsafe {
            let mut out = [_mm256_setzero_si256(); R];
            if !present {
                return out;
            }
            let ones = _mm256_set1_epi16(1);
            let q = B::values_avx2(wp.add(b * B::TS));
            let u = if B::SIGNED { _mm256_sign_epi8(q, q) } else { q };
            for r in 0..R {
                let x = _mm256_loadu_si256(qp[r].add(b * 32) as *const __m256i);
                let x = if B::SIGNED { _mm256_sign_epi8(x, q) } else { x };
                out[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones);
            }
            out
        }
    }

    /// [`blocks32`] for `R` activation rows at once, each weight block unpacked once
    /// ([`group_sums`]). Row `r` gets the integer block sums of `blocks32(w, a[r])`, and its
    /// lanes the same fused multiply-adds in the same order: the groups of eight blocks in
    /// one register, the remaining blocks (their integer sums also from `group_sums`) by the
    /// scalar operations of `block32_scalar`, then the same tree. So every output has the
    /// bits of `blocks32(w, a[r])`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn blocks32_rows<B: Block32, const R: usize>(
        w: &[u8],
        a: [&Q8Row; R],
    ) -> [f32; R] {
        let nb = w.len() / B::TS;
        assert!(w.len() == nb * B::TS);
        for ar in &a {
            assert!(ar.d().len() == nb && ar.qs().len() == nb * 32);
            assert!(!B::MIN || ar.s().len() == nb);
        }
        let wp = w.as_ptr();
        let qp = a.map(|ar| ar.qs().as_ptr());
        let mut acc = [_mm256_setzero_ps(); R];
        let groups = nb / 8;
        for g in 0..groups {
            let b0 = g * 8;
            // SAFETY: blocks b0..b0+8 lie inside `w` and every row (lengths asserted above)
            unsafe {
                let sums = group_sums::<B, R>(wp, &qp, b0, 8);
                let dw = f16x8(wp.add(b0 * B::TS), B::TS);
                let mw = if B::MIN {
                    f16x8(wp.add(b0 * B::TS + 2), B::TS)
                } else {
                    _mm256_setzero_ps()
                };
                for r in 0..R {
                    let sumi = _mm256_cvtepi32_ps(sums[r]);
                    let dx = _mm256_loadu_ps(a[r].d().as_ptr().add(b0));
                    acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), sumi, acc[r]);
                    if B::MIN {
                        let sx = _mm256_loadu_ps(a[r].s().as_ptr().add(b0));
                        acc[r] = _mm256_fmadd_ps(mw, sx, acc[r]);
                    }
                }
            }
        }
        let b0 = groups * 8;
        let tail = [0i32; 8];
        let mut tails = [tail; R];
        if b0 < nb {
            // SAFETY: blocks b0..nb lie inside `w` and every row; `tails[r]` is 8 i32
            unsafe {
                let sums = group_sums::<B, R>(wp, &qp, b0, nb - b0);
                for r in 0..R {
                    _mm256_storeu_si256(tails[r].as_mut_ptr() as *mut __m256i, sums[r]);
                }
            }
        }
        let mut res = [0f32; R];
        for r in 0..R {
            let mut out = Acc8::new();
            // SAFETY: `lanes` is 8 f32
            unsafe { _mm256_storeu_ps(out.lanes.as_mut_ptr(), acc[r]) };
            // block32_scalar's operations, with the integer sum computed above
            for b in b0..nb {
                let wb = &w[b * B::TS..(b + 1) * B::TS];
                out.add(b, f16_at(wb, 0) * a[r].d()[b], tails[r][b - b0] as f32);
                if B::MIN {
                    out.add(b, f16_at(wb, 2), a[r].s()[b]);
                }
            }
            res[r] = out.sum();
        }
        res
    }
}
