//! Quantization from `f32`, byte-exact with the reference encoder (`gguf.quants.quantize`
//! of the `gguf` Python package, which matches ggml's `quantize_row_*_ref`).

use crate::error::{GgufError, Result};
use crate::GgmlType;
use half::{bf16, f16};

/// Whether [`quantize`] supports `t`.
pub fn can_quantize(t: GgmlType) -> bool {
    use GgmlType::*;
    matches!(t, F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1)
}

/// Quantizes `x` (a whole number of blocks) to type `t`: F32, F16, BF16 (round to nearest
/// even), Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1, byte for byte as the reference encoder.
///
/// A NaN or infinite input to a block type is an error naming its index (the reference
/// would write a meaningless block); F32/F16/BF16 keep them, as a cast does.
///
/// ```
/// use stride_gguf::{dequantize_to_vec, quantize, GgmlType};
/// let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
/// let q = quantize(GgmlType::Q8_0, &x)?;
/// assert_eq!(q.len(), 34);
/// let y = dequantize_to_vec(GgmlType::Q8_0, &q)?;
/// assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() < 0.07));
/// # Ok::<(), stride_gguf::GgufError>(())
/// ```
pub fn quantize(t: GgmlType, x: &[f32]) -> Result<Vec<u8>> {
    if !can_quantize(t) {
        return Err(GgufError::Unsupported {
            op: "quantization",
            ggml_type: t,
        });
    }
    let bs = t.block_size();
    if !x.len().is_multiple_of(bs) {
        return Err(GgufError::BadLength {
            op: "quantize",
            detail: format!(
                "{} values are not a whole number of {bs}-element {t} blocks",
                x.len()
            ),
        });
    }
    if t.is_quantized() {
        if let Some(i) = x.iter().position(|v| !v.is_finite()) {
            return Err(GgufError::NonFinite {
                ggml_type: t,
                index: i,
                block: i / bs,
                value: x[i],
            });
        }
    }
    let mut out = Vec::with_capacity(x.len() / bs * t.type_size());
    use GgmlType::*;
    match t {
        F32 => x.iter().for_each(|v| out.extend(v.to_le_bytes())),
        F16 => x
            .iter()
            .for_each(|&v| out.extend(f16::from_f32(v).to_bits().to_le_bytes())),
        BF16 => x
            .iter()
            .for_each(|&v| out.extend(bf16::from_f32(v).to_bits().to_le_bytes())),
        Q8_0 => x.chunks_exact(32).for_each(|b| q8_0(b, &mut out)),
        Q4_0 => x.chunks_exact(32).for_each(|b| q4_0(b, &mut out)),
        Q4_1 => x.chunks_exact(32).for_each(|b| q4_1(b, &mut out)),
        Q5_0 => x.chunks_exact(32).for_each(|b| q5_0(b, &mut out)),
        Q5_1 => x.chunks_exact(32).for_each(|b| q5_1(b, &mut out)),
        _ => unreachable!("checked by can_quantize"),
    }
    Ok(out)
}

fn inv(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

fn push_f16(out: &mut Vec<u8>, v: f32) {
    out.extend(f16::from_f32(v).to_bits().to_le_bytes());
}

// d = max|x| / 127; q = round-half-away(x / d)
fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = inv(d);
    push_f16(out, d);
    out.extend(x.iter().map(|&v| (v * id).round() as i8 as u8));
}

/// The value of largest magnitude (the first one on ties), as numpy's `argmax` of `abs`.
fn signed_absmax(x: &[f32]) -> f32 {
    let mut max = 0f32;
    let mut amax = -1f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    max
}

// d = signed_absmax / -8; q = trunc(x / d + 8.5) ≤ 15
fn q4_0(x: &[f32], out: &mut Vec<u8>) {
    let d = signed_absmax(x) / -8.0;
    let id = inv(d);
    push_f16(out, d);
    let q = |v: f32| ((v * id + 8.5).trunc() as u8).min(15);
    for l in 0..16 {
        out.push(q(x[l]) | q(x[l + 16]) << 4);
    }
}

// d = (max - min) / 15, m = min; q = trunc((x - min) / d + 0.5) ≤ 15
fn q4_1(x: &[f32], out: &mut Vec<u8>) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let d = (max - min) / 15.0;
    let id = inv(d);
    push_f16(out, d);
    push_f16(out, min);
    let q = |v: f32| (((v - min) * id + 0.5).trunc() as u8).min(15);
    for l in 0..16 {
        out.push(q(x[l]) | q(x[l + 16]) << 4);
    }
}

/// The fifth bits of 32 five-bit values, bit e of a little-endian u32.
fn push_high_bits(out: &mut Vec<u8>, q: &[u8; 32]) {
    let qh = q
        .iter()
        .enumerate()
        .fold(0u32, |h, (e, &v)| h | (((v >> 4) & 1) as u32) << e);
    out.extend(qh.to_le_bytes());
}

fn push_low_nibbles(out: &mut Vec<u8>, q: &[u8; 32]) {
    for l in 0..16 {
        out.push((q[l] & 0xF) | q[l + 16] << 4);
    }
}

// d = signed_absmax / -16; q = trunc(x / d + 16.5) ≤ 31
fn q5_0(x: &[f32], out: &mut Vec<u8>) {
    let d = signed_absmax(x) / -16.0;
    let id = inv(d);
    let mut q = [0u8; 32];
    for (qi, &v) in q.iter_mut().zip(x) {
        *qi = ((v * id + 16.5).trunc() as u8).min(31);
    }
    push_f16(out, d);
    push_high_bits(out, &q);
    push_low_nibbles(out, &q);
}

// d = (max - min) / 31, m = min; q = trunc((x - min) / d + 0.5) ≤ 31
fn q5_1(x: &[f32], out: &mut Vec<u8>) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let d = (max - min) / 31.0;
    let id = inv(d);
    let mut q = [0u8; 32];
    for (qi, &v) in q.iter_mut().zip(x) {
        *qi = (((v - min) * id + 0.5).trunc() as u8).min(31);
    }
    push_f16(out, d);
    push_f16(out, min);
    push_high_bits(out, &q);
    push_low_nibbles(out, &q);
}
