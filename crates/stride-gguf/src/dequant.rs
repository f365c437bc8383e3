//! Dequantization to `f32`, bit-exact with the reference (the `gguf` Python package's numpy
//! dequantizer, itself a port of ggml's `dequantize_row_*`).
//!
//! Every formula below does the reference's f32 operations in the reference's order (for
//! example Q4_1 is `d * q + m`, Q4_K is `(d * sc) * q - dmin * m`), so results match bit for
//! bit; `tests/golden.rs` checks that against fixtures written by `scripts/gguf_golden.py`.

use crate::error::{GgufError, Result};
use crate::types::QK_K;
use crate::GgmlType;

/// An f16 bit pattern as f32, exactly, NaN payloads included (a signalling NaN stays
/// signalling, as in numpy's `astype(np.float32)`; hardware conversions quiet it).
#[inline]
pub(crate) fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    match exp {
        0x1f => f32::from_bits(sign | 0x7f80_0000 | mant << 13),
        0 => {
            // zero or subnormal: mant * 2^-24, exact in f32
            let v = mant as f32 * f32::from_bits(0x3380_0000);
            f32::from_bits(sign | v.to_bits())
        }
        _ => f32::from_bits(sign | (exp + 112) << 23 | mant << 13),
    }
}

#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// Whether [`dequantize`] supports `t`.
pub fn can_dequantize(t: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        t,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | TQ2_0
            | MXFP4
            | IQ4_NL
            | IQ4_XS
    )
}

/// Dequantizes `bytes` (whole blocks of type `t`) into `out`, whose length must be the
/// element count (`bytes.len() / type_size * block_size`).
///
/// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
/// TQ2_0, MXFP4, IQ4_NL and IQ4_XS; other types are an [`GgufError::Unsupported`] error.
///
/// ```
/// use stride_gguf::{dequantize, GgmlType};
/// // one Q8_0 block: scale 0.5 (f16 0x3800), then 32 int8 values
/// let mut block = vec![0x00, 0x38];
/// block.extend((0..32).map(|i| (i as i8 - 16) as u8));
/// let mut out = [0f32; 32];
/// dequantize(GgmlType::Q8_0, &block, &mut out)?;
/// assert_eq!((out[0], out[31]), (-8.0, 7.5));
/// # Ok::<(), stride_gguf::GgufError>(())
/// ```
pub fn dequantize(t: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    if !can_dequantize(t) {
        return Err(GgufError::Unsupported {
            op: "dequantization",
            ggml_type: t,
        });
    }
    let (bs, ts) = (t.block_size(), t.type_size());
    if !bytes.len().is_multiple_of(ts) || bytes.len() / ts * bs != out.len() {
        return Err(GgufError::BadLength {
            op: "dequantize",
            detail: format!(
                "{} bytes of {t} ({bs} elements per {ts}-byte block) do not hold the {} elements asked for",
                bytes.len(),
                out.len()
            ),
        });
    }
    let blocks = bytes.chunks_exact(ts).zip(out.chunks_exact_mut(bs));
    use GgmlType::*;
    match t {
        F32 => blocks.for_each(|(b, y)| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        F16 => blocks.for_each(|(b, y)| y[0] = f16_at(b, 0)),
        // the bits shifted up, NaN payloads kept (as the reference; half's conversion quiets them)
        BF16 => blocks.for_each(|(b, y)| {
            y[0] = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)
        }),
        Q4_0 => blocks.for_each(|(b, y)| q4_0(b, y)),
        Q4_1 => blocks.for_each(|(b, y)| q4_1(b, y)),
        Q5_0 => blocks.for_each(|(b, y)| q5_0(b, y)),
        Q5_1 => blocks.for_each(|(b, y)| q5_1(b, y)),
        Q8_0 => blocks.for_each(|(b, y)| q8_0(b, y)),
        Q2_K => blocks.for_each(|(b, y)| q2_k(b, y)),
        Q3_K => blocks.for_each(|(b, y)| q3_k(b, y)),
        Q4_K => blocks.for_each(|(b, y)| q4_k(b, y)),
        Q5_K => blocks.for_each(|(b, y)| q5_k(b, y)),
        Q6_K => blocks.for_each(|(b, y)| q6_k(b, y)),
        TQ2_0 => blocks.for_each(|(b, y)| tq2_0(b, y)),
        MXFP4 => blocks.for_each(|(b, y)| mxfp4(b, y)),
        IQ4_NL => blocks.for_each(|(b, y)| iq4_nl(b, y)),
        IQ4_XS => blocks.for_each(|(b, y)| iq4_xs(b, y)),
        _ => unreachable!("checked by can_dequantize"),
    }
    Ok(())
}

/// Dequantizes whole blocks of type `t` into a new vector.
pub fn dequantize_to_vec(t: GgmlType, bytes: &[u8]) -> Result<Vec<f32>> {
    let ts = t.type_size();
    if !bytes.len().is_multiple_of(ts) {
        return Err(GgufError::BadLength {
            op: "dequantize",
            detail: format!(
                "{} bytes is not a whole number of {ts}-byte {t} blocks",
                bytes.len()
            ),
        });
    }
    if !can_dequantize(t) {
        return Err(GgufError::Unsupported {
            op: "dequantization",
            ggml_type: t,
        });
    }
    let mut out = vec![0f32; bytes.len() / ts * t.block_size()];
    dequantize(t, bytes, &mut out)?;
    Ok(out)
}

// Q4_0 / Q4_1: element l (< 16) is the low nibble of qs[l], element 16 + l the high nibble.
fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for l in 0..16 {
        y[l] = d * ((qs[l] & 0xF) as i32 - 8) as f32;
        y[l + 16] = d * ((qs[l] >> 4) as i32 - 8) as f32;
    }
}

fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qs = &b[4..20];
    for l in 0..16 {
        y[l] = d * (qs[l] & 0xF) as f32 + m;
        y[l + 16] = d * (qs[l] >> 4) as f32 + m;
    }
}

// Q5_0 / Q5_1: bit e of the little-endian u32 qh is the fifth bit of element e.
fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for l in 0..16 {
        let lo = (qs[l] & 0xF) as u32 | ((qh >> l) & 1) << 4;
        let hi = (qs[l] >> 4) as u32 | ((qh >> (l + 16)) & 1) << 4;
        y[l] = d * (lo as i32 - 16) as f32;
        y[l + 16] = d * (hi as i32 - 16) as f32;
    }
}

fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for l in 0..16 {
        let lo = (qs[l] & 0xF) as u32 | ((qh >> l) & 1) << 4;
        let hi = (qs[l] >> 4) as u32 | ((qh >> (l + 16)) & 1) << 4;
        y[l] = d * lo as f32 + m;
        y[l + 16] = d * hi as f32 + m;
    }
}

fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (l, yl) in y.iter_mut().enumerate() {
        *yl = (b[2 + l] as i8) as f32 * d;
    }
}

// Q2_K: scales[16] | qs[64] | d | dmin. Element e = h*128 + s*32 + l has the 2 bits
// (qs[h*32 + l] >> 2s) & 3 and the scale byte scales[e / 16] (low nibble: scale, high: min).
fn q2_k(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    for (e, ye) in y.iter_mut().enumerate().take(QK_K) {
        let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let q = (qs[h * 32 + l] >> (2 * s)) & 3;
        let sc = scales[e / 16];
        let dl = d * (sc & 0xF) as f32;
        let ml = dmin * (sc >> 4) as f32;
        *ye = dl * q as f32 - ml;
    }
}

// Q3_K: hmask[32] | qs[64] | scales[12] | d. 16 six-bit scales (minus 32): the low four bits
// of scale i are nibble (i / 8) of scales[i % 8], the high two bits are bits 2*(i / 4) of
// scales[8 + i % 4]. Element e = h*128 + s*32 + l: low bits (qs[h*32 + l] >> 2s) & 3, minus 4
// when bit (e / 32) of hmask[l] is clear.
fn q3_k(b: &[u8], y: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let sc = &b[96..108];
    let d = f16_at(b, 108);
    let mut dl = [0f32; 16];
    for (i, dli) in dl.iter_mut().enumerate() {
        let lo = (sc[i % 8] >> (4 * (i / 8))) & 0xF;
        let hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
        let s = ((lo | hi << 4) as i8).wrapping_sub(32);
        *dli = d * s as f32;
    }
    for (e, ye) in y.iter_mut().enumerate().take(QK_K) {
        let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let ql = ((qs[h * 32 + l] >> (2 * s)) & 3) as i8;
        let qh = ((hmask[l] >> (e / 32)) & 1) ^ 1;
        let q = ql - (qh << 2) as i8;
        *ye = dl[e / 16] * q as f32;
    }
}

/// The eight 6-bit (scale, min) pairs of a Q4_K/Q5_K block's 12 packed scale bytes (ggml's
/// `get_scale_min_k4`).
#[inline]
pub fn scale_min_k4(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0xF) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    (sc, mn)
}

// Q4_K: d | dmin | scales[12] | qs[128]. Element e = c*64 + s*32 + l is nibble s of
// qs[c*32 + l], in sub-block e / 32.
fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, mn) = scale_min_k4(&b[4..16]);
    let qs = &b[16..144];
    for (e, ye) in y.iter_mut().enumerate().take(QK_K) {
        let (c, s, l, j) = (e / 64, (e / 32) % 2, e % 32, e / 32);
        let q = (qs[c * 32 + l] >> (4 * s)) & 0xF;
        let ds = d * sc[j] as f32;
        let dm = dmin * mn[j] as f32;
        *ye = ds * q as f32 - dm;
    }
}

// Q5_K: d | dmin | scales[12] | qh[32] | qs[128]; as Q4_K plus bit (e / 32) of qh[l].
fn q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, mn) = scale_min_k4(&b[4..16]);
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (e, ye) in y.iter_mut().enumerate().take(QK_K) {
        let (c, s, l, j) = (e / 64, (e / 32) % 2, e % 32, e / 32);
        let q = ((qs[c * 32 + l] >> (4 * s)) & 0xF) | (((qh[l] >> j) & 1) << 4);
        let ds = d * sc[j] as f32;
        let dm = dmin * mn[j] as f32;
        *ye = ds * q as f32 - dm;
    }
}

// Q6_K: ql[128] | qh[64] | scales[16] (int8) | d. Element e = h*128 + r (r < 128): low
// nibble (r / 64) of ql[h*64 + r % 64], high 2 bits (qh[h*32 + r % 32] >> 2*(r / 32)) & 3;
// minus 32; scale scales[e / 16].
fn q6_k(b: &[u8], y: &mut [f32]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let sc = &b[192..208];
    let d = f16_at(b, 208);
    for (e, ye) in y.iter_mut().enumerate().take(QK_K) {
        let (h, r) = (e / 128, e % 128);
        let lo = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
        let hi = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
        let q = ((lo | hi << 4) as i8).wrapping_sub(32);
        let ds = d * (sc[e / 16] as i8) as f32;
        *ye = ds * q as f32;
    }
}

// TQ2_0: qs[64] | d. Element e = h*128 + s*32 + l: ((qs[h*32 + l] >> 2s) & 3) - 1.
fn tq2_0(b: &[u8], y: &mut [f32]) {
    let qs = &b[0..64];
    let d = f16_at(b, 64);
    for (e, ye) in y.iter_mut().enumerate().take(QK_K) {
        let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let q = ((qs[h * 32 + l] >> (2 * s)) & 3) as i8 - 1;
        *ye = d * q as f32;
    }
}

/// MXFP4's e2m1 values, doubled (the scale below is halved to match).
const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// An e8m0 exponent as f32, halved (ggml's `ggml_e8m0_to_fp32_half`).
fn e8m0_half(x: u8) -> f32 {
    let bits = if x < 2 {
        0x0020_0000u32 << x
    } else {
        (x as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

// MXFP4: e (e8m0) | qs[16]; element l is the low nibble of qs[l], 16 + l the high one.
fn mxfp4(b: &[u8], y: &mut [f32]) {
    let d = e8m0_half(b[0]);
    for l in 0..16 {
        y[l] = d * MXFP4_VALUES[(b[1 + l] & 0xF) as usize] as f32;
        y[l + 16] = d * MXFP4_VALUES[(b[1 + l] >> 4) as usize] as f32;
    }
}

/// The non-linear 4-bit grid of IQ4_NL and IQ4_XS.
const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

// IQ4_NL: d | qs[16]; element l is the low nibble of qs[l], 16 + l the high one.
fn iq4_nl(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for l in 0..16 {
        y[l] = d * IQ4_VALUES[(b[2 + l] & 0xF) as usize] as f32;
        y[l + 16] = d * IQ4_VALUES[(b[2 + l] >> 4) as usize] as f32;
    }
}

// IQ4_XS: d | scales_h (u16) | scales_l[4] | qs[128]; eight sub-blocks of 32 with 6-bit
// scales (minus 32): low nibble (j % 2) of scales_l[j / 2], high bits (scales_h >> 2j) & 3.
// Within sub-block j, element s*16 + l is nibble s of qs[j*16 + l].
fn iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let sh = u16::from_le_bytes([b[2], b[3]]);
    let sl = &b[4..8];
    let qs = &b[8..136];
    for (j, yj) in y.chunks_exact_mut(32).enumerate() {
        let lo = (sl[j / 2] >> (4 * (j % 2))) & 0xF;
        let hi = ((sh >> (2 * j)) & 3) as u8;
        let dl = d * ((lo | hi << 4) as i8).wrapping_sub(32) as f32;
        for (e, ye) in yj.iter_mut().enumerate() {
            let q = (qs[j * 16 + e % 16] >> (4 * (e / 16))) & 0xF;
            *ye = dl * IQ4_VALUES[q as usize] as f32;
        }
    }
}
