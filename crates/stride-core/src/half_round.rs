//! Correctly rounded conversions to the half types (IEEE round to nearest, ties to even).
//!
//! `half`'s `f64 -> bf16` drops the low 32 bits of the double before rounding, and its
//! `f64 -> f16` either does the same (software fallback) or rounds twice through f32 (x86
//! F16C), so a value just above a tie could round down, and the result could depend on the
//! machine. These functions round once, from all 64 bits. `f32 -> bf16/f16` use `half`'s own
//! f32 conversions, which do round correctly from all 32 bits (checked by the tests below and
//! in `tests/half_rounding.rs`) and stay fast/vectorisable.
//!
//! The CUDA kernels (`cuda/kernels/common.cuh`, `f64_to_half_bits`) mirror [`f64_to_half_bits`]
//! line by line, so CPU and GPU agree bit for bit.
//!
//! This is a deliberate deviation from PyTorch, which converts f64 to f16/bf16 through f32.

use half::{bf16, f16};

/// Rounds an f64 to a binary format with `EBITS` exponent bits and `MBITS` stored mantissa
/// bits (f16: 5/10, bf16: 8/7), returning its 16-bit pattern. NaN stays NaN (quiet bit set,
/// top payload bits kept), ±inf and ±0 keep their sign, overflow goes to ±inf, subnormals are
/// rounded like everything else.
#[inline]
pub const fn f64_to_half_bits<const EBITS: u32, const MBITS: u32>(v: f64) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 48) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff_ffff_ffff;
    let inf: u16 = (((1u32 << EBITS) - 1) << MBITS) as u16;
    if abs >= 0x7ff0_0000_0000_0000 {
        if abs == 0x7ff0_0000_0000_0000 {
            return sign | inf;
        }
        let quiet: u16 = 1 << (MBITS - 1);
        let payload = ((abs & 0x000f_ffff_ffff_ffff) >> (52 - MBITS)) as u16;
        return sign | inf | quiet | payload;
    }
    let bias: i64 = (1i64 << (EBITS - 1)) - 1;
    let e = (abs >> 52) as i64; // biased f64 exponent
    let he = e - 1023 + bias; // biased half exponent, if normal
    if he >= (1i64 << EBITS) - 1 {
        return sign | inf;
    }
    let (head, sig, shift) = if he >= 1 {
        // normal: keep the exponent, round the 52-bit fraction to MBITS bits
        (
            (he as u64) << MBITS,
            abs & 0x000f_ffff_ffff_ffff,
            52 - MBITS as i64,
        )
    } else {
        // subnormal (or zero): the full significand in units of the smallest subnormal
        let shift = 53 - MBITS as i64 - he;
        if shift >= 54 {
            // below half the smallest subnormal (f64 subnormals and zeros land here)
            return sign;
        }
        (0, (abs & 0x000f_ffff_ffff_ffff) | (1u64 << 52), shift)
    };
    let q = sig >> shift;
    let rem = sig & ((1u64 << shift) - 1);
    let halfway = 1u64 << (shift - 1);
    let mut out = head | q; // a carry out of the fraction bumps the exponent (up to inf)
    if rem > halfway || (rem == halfway && (q & 1) == 1) {
        out += 1;
    }
    sign | out as u16
}

/// f64 → bf16, correctly rounded (one rounding from all 64 bits).
#[inline]
pub const fn f64_to_bf16(v: f64) -> bf16 {
    bf16::from_bits(f64_to_half_bits::<8, 7>(v))
}

/// f64 → f16, correctly rounded (one rounding from all 64 bits, not through f32).
#[inline]
pub const fn f64_to_f16(v: f64) -> f16 {
    f16::from_bits(f64_to_half_bits::<5, 10>(v))
}

/// f32 → bf16, correctly rounded: `half`'s conversion rounds from all 32 bits.
#[inline(always)]
pub fn f32_to_bf16(v: f32) -> bf16 {
    bf16::from_f32(v)
}

/// f32 → f16, correctly rounded: `half`'s conversion (F16C or its software path) rounds from
/// all 32 bits.
#[inline(always)]
pub fn f32_to_f16(v: f32) -> f16 {
    f16::from_f32(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sticky_bits_above_a_tie() {
        // f32 −12.4062538 is just above the tie between bf16 −12.375 and −12.4375.
        let x = -12.406_253_8f32;
        assert_eq!(f64_to_bf16(x as f64).to_f64(), -12.4375);
        assert_eq!(f32_to_bf16(x).to_f64(), -12.4375);
        let tie_up = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(f64_to_bf16(tie_up).to_f64(), 1.0 + 2f64.powi(-7));
        let tie_up = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f64_to_f16(tie_up).to_f64(), 1.0 + 2f64.powi(-10));
        // and f64 -> f16 is not double-rounded through f32
        let x = 1.0 + 2f64.powi(-11) - 2f64.powi(-40);
        assert_eq!(f64_to_f16(x).to_f64(), 1.0);
    }

    #[test]
    fn specials() {
        assert_eq!(f64_to_f16(f64::INFINITY), f16::INFINITY);
        assert_eq!(f64_to_bf16(f64::NEG_INFINITY), bf16::NEG_INFINITY);
        assert_eq!(f64_to_f16(1e10), f16::INFINITY);
        assert_eq!(f64_to_f16(65520.0), f16::INFINITY); // max + half ulp: tie to even → inf
        assert_eq!(f64_to_f16(65519.99), f16::MAX);
        assert_eq!(f64_to_bf16(-1e300), bf16::NEG_INFINITY);
        assert_eq!(f64_to_f16(-0.0).to_bits(), 0x8000);
        assert_eq!(f64_to_bf16(-1e-300).to_bits(), 0x8000);
        assert!(f64_to_f16(f64::NAN).is_nan());
        assert!(f64_to_bf16(-f64::NAN).is_nan());
        // a signalling NaN with only low payload bits stays NaN
        assert!(f64_to_bf16(f64::from_bits(0x7ff0_0000_0000_0001)).is_nan());
        assert!(f64_to_f16(f64::from_bits(0xfff0_0000_0000_0001)).is_nan());
        // subnormals: smallest f16 subnormal 2^-24; half of it ties to 0, above goes up
        assert_eq!(f64_to_f16(2f64.powi(-25)).to_bits(), 0);
        assert_eq!(f64_to_f16(2f64.powi(-25) * (1.0 + 1e-15)).to_bits(), 1);
        assert_eq!(f64_to_f16(3.0 * 2f64.powi(-25)).to_bits(), 2);
        assert_eq!(f64_to_bf16(2f64.powi(-134)).to_bits(), 0);
        assert_eq!(f64_to_bf16(2f64.powi(-134) * 1.5).to_bits(), 1);
    }
}
