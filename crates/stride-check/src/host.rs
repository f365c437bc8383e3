//! Host-side dtype arithmetic for the harness, written without calling any stride op:
//! how a value is stored in a dtype (rounding, truncation, wrapping), the guard and poison
//! values, and moving raw storages between the host and a device.
//!
//! All harness values are `f64`. That is exact for every float dtype and for integers up to
//! 2^53, which the samplers stay within (integer results that wrap are computed in `i128`).

use stride_core::{with_dtype, DType, Device, Element, Result, Tensor};

/// Short dtype names for tables (`f32`, `bf16`, `i64`, `bool`, …).
pub fn short(d: DType) -> &'static str {
    match d {
        DType::F64 => "f64",
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::U8 => "u8",
        DType::I8 => "i8",
        DType::Bool => "bool",
    }
}

/// Bits of an integer dtype.
pub fn bits(d: DType) -> u32 {
    (d.size_in_bytes() * 8) as u32
}

/// The range of an integer dtype (bool: 0..=1).
pub fn int_range(d: DType) -> (i128, i128) {
    match d {
        DType::Bool => (0, 1),
        DType::U8 => (0, u8::MAX as i128),
        DType::I8 => (i8::MIN as i128, i8::MAX as i128),
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        DType::U32 => (0, u32::MAX as i128),
        DType::I64 => (i64::MIN as i128, i64::MAX as i128),
        _ => (i128::MIN, i128::MAX),
    }
}

/// Two's-complement wrap of an integer into an integer dtype (what integer arithmetic and
/// integer → integer casts do).
pub fn wrap_int(v: i128, d: DType) -> i128 {
    let m = 1i128 << bits(d);
    let r = v.rem_euclid(m);
    if d.is_signed() && r >= m / 2 {
        r - m
    } else {
        r
    }
}

/// Rounds a real number to a float dtype (round to nearest even, once, from all 64 bits:
/// `stride_core::half_round`, not `half`'s f64 conversions, which drop sticky bits).
pub fn round_float(v: f64, d: DType) -> f64 {
    match d {
        DType::F64 => v,
        DType::F32 => v as f32 as f64,
        DType::F16 => stride_core::half_round::f64_to_f16(v).to_f64(),
        DType::BF16 => stride_core::half_round::f64_to_bf16(v).to_f64(),
        _ => v,
    }
}

/// Stores a value in dtype `d`: floats round, integers truncate toward zero and wrap, bool is
/// `v != 0` (NaN is true). This is the harness's own statement of stride's cast rules.
pub fn store(v: f64, d: DType) -> f64 {
    match d {
        DType::Bool => (v != 0.0) as u8 as f64,
        d if d.is_float() => round_float(v, d),
        d => {
            if !v.is_finite() {
                return 0.0; // undefined in PyTorch; samplers never produce it
            }
            let t = v.trunc();
            if t.abs() < 1.7e38 {
                wrap_int(t as i128, d) as f64
            } else {
                0.0
            }
        }
    }
}

/// Two stored values are the same (NaN equals NaN; the sign of zero is ignored).
pub fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// The guard value written around every view: any change to it is a stray write.
pub fn guard(d: DType, storage_index: usize) -> f64 {
    match d {
        DType::Bool => storage_index.is_multiple_of(2) as u8 as f64,
        DType::U8 | DType::I8 => 0x6A as f64,
        DType::I32 | DType::U32 => 0x6A6A_6A6A_i64 as f64,
        DType::I64 => 0x6A6A_6A6A_6A6A_i64 as f64,
        d => round_float(-4242.5, d),
    }
}

/// The poison written into every element of an output view before the op runs, so an
/// element the op forgets to write shows. `expected` is the value the element should get:
/// the poison is chosen to differ from it (bool outputs are poisoned with the negation).
pub fn poison(d: DType, expected: Option<f64>) -> f64 {
    let p = match d {
        DType::Bool => return expected.map_or(1.0, |e| if e != 0.0 { 0.0 } else { 1.0 }),
        DType::U8 => 0xA5 as f64,
        DType::I8 => -0x5B as f64,
        DType::I32 => -0x5EED_5EED_i64 as f64,
        DType::U32 => 0xDEAD_BEEF_u32 as f64,
        DType::I64 => -0x5EED_5EED_5EED_i64 as f64,
        _ => f64::NAN,
    };
    match expected {
        Some(e) if same(e, p) => {
            if d.is_float() {
                round_float(31337.0, d)
            } else {
                store(p + 1.0, d)
            }
        }
        _ => p,
    }
}

/// A 1-D tensor on `device` holding `values` (already representable in `dtype`).
pub fn tensor_from_f64(values: &[f64], dtype: DType, device: &Device) -> Result<Tensor> {
    with_dtype!(dtype, T => {
        let v: Vec<T> = values.iter().map(|&x| <T as Element>::from_f64(x)).collect();
        Tensor::from_vec(v, [values.len()])?.to_device(device)
    })
}

/// Every element of the tensor's storage (not just its view), in storage order, as f64.
/// Reads through a plain 1-D contiguous view so no strided code path is trusted.
pub fn read_storage(t: &Tensor) -> Result<Vec<f64>> {
    let n = t.storage().len();
    let flat = t.as_strided(&[n], &[1], 0)?.to_device(&Device::Cpu)?;
    with_dtype!(flat.dtype(), T => Ok(flat.to_vec::<T>()?.into_iter().map(|x| x.to_f64()).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn store_rules() {
        assert_eq!(store(300.0, DType::U8), 44.0);
        assert_eq!(store(-1.0, DType::U8), 255.0);
        assert_eq!(store(128.0, DType::I8), -128.0);
        assert_eq!(store(-2.7, DType::I32), -2.0);
        assert_eq!(store(f64::NAN, DType::Bool), 1.0);
        assert_eq!(store(1.0 + 2f64.powi(-11), DType::F16), 1.0);
        assert_eq!(wrap_int(1 << 40, DType::I32), 0);
        assert!(poison(DType::F32, None).is_nan());
        assert!(!poison(DType::F32, Some(f64::NAN)).is_nan());
    }
}
