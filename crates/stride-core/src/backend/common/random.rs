//! The parts of random fills every backend computes the same way on the host.

use crate::{DType, Element};
use half::{bf16, f16};

/// The next value below `bits` of an IEEE float with sign bit `sign` (finite, not NaN).
fn next_down_bits(bits: u64, sign: u64) -> u64 {
    if bits & sign != 0 {
        bits + 1
    } else if bits == 0 {
        sign | 1
    } else {
        bits - 1
    }
}

/// The largest value of `T` strictly below `x` (float dtypes; others return `x`).
pub(crate) fn next_down<T: Element>(x: T) -> T {
    let v = x.to_f64();
    let r = match T::DTYPE {
        DType::F64 => f64::from_bits(next_down_bits(v.to_bits(), 1 << 63)),
        DType::F32 => {
            f32::from_bits(next_down_bits((v as f32).to_bits() as u64, 1 << 31) as u32) as f64
        }
        DType::F16 => f16::from_bits(next_down_bits(
            crate::half_round::f64_to_f16(v).to_bits() as u64,
            1 << 15,
        ) as u16)
        .to_f64(),
        DType::BF16 => bf16::from_bits(next_down_bits(
            crate::half_round::f64_to_bf16(v).to_bits() as u64,
            1 << 15,
        ) as u16)
        .to_f64(),
        _ => v,
    };
    T::from_f64(r)
}

/// What replaces a uniform draw that rounded up to `high` in `T`: the largest `T` below
/// `high` (or `low` if there is none above it).
pub(crate) fn uniform_cap<T: Element>(low: f64, high: f64) -> T {
    let h = T::from_f64(high);
    let below = if h.to_f64() < high { h } else { next_down(h) };
    if below.to_f64() < low {
        T::from_f64(low)
    } else {
        below
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn next_down_per_dtype() {
        assert_eq!(next_down(1.0f32), 1.0 - f32::EPSILON / 2.0);
        assert_eq!(next_down(1.0f64), 1.0 - f64::EPSILON / 2.0);
        assert_eq!(next_down(bf16::ONE).to_f64(), 1.0 - 2f64.powi(-8));
        assert_eq!(next_down(f16::ONE).to_f64(), 1.0 - 2f64.powi(-11));
        assert!(next_down(0.0f32) < 0.0);
        assert_eq!(next_down(-1.0f32), -1.0 - f32::EPSILON);
    }
}
