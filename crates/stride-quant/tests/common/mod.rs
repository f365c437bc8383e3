//! Shared test helpers: a seeded generator, random weight blocks, an independent f64
//! decoder of the block formats, and the reference dot product with its error bound.
#![allow(dead_code)]

use half::f16;
use stride_gguf::GgmlType;
use stride_quant::{ActFormat, Q8Row};

/// The types with kernels.
pub const TYPES: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Unit roundoff of f32.
pub const U: f64 = 1.0 / (1u64 << 24) as f64;

/// SplitMix64.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [-1, 1).
    pub fn sym(&mut self) -> f32 {
        (2.0 * self.unit() - 1.0) as f32
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

fn put_f16(b: &mut [u8], i: usize, v: f32) {
    b[i..i + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// A random scale: sign random when `signed`, magnitude 2^[-9, -3).
fn scale(rng: &mut Rng, signed: bool) -> f32 {
    let mag = (2f64).powf(-9.0 + 6.0 * rng.unit()) as f32;
    if signed && rng.next_u64() & 1 == 1 {
        -mag
    } else {
        mag
    }
}

/// `rows × cols` of `ty` as random blocks: every quant bit random (so every nibble, high
/// bit and scale pattern occurs, -128 in Q8_0 included), the f16 scales finite and moderate.
pub fn random_weights(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let (bs, ts) = (ty.block_size(), ty.type_size());
    let mut out: Vec<u8> = (0..rows * cols / bs * ts)
        .map(|_| rng.next_u64() as u8)
        .collect();
    for b in out.chunks_exact_mut(ts) {
        use GgmlType::*;
        match ty {
            Q4_0 | Q5_0 | Q8_0 => put_f16(b, 0, scale(rng, true)),
            Q4_1 | Q5_1 => {
                put_f16(b, 0, scale(rng, false));
                put_f16(b, 2, scale(rng, true) * 8.0);
            }
            Q4_K | Q5_K => {
                put_f16(b, 0, scale(rng, false) / 16.0);
                put_f16(b, 2, scale(rng, false) / 16.0);
            }
            Q6_K => put_f16(b, 208, scale(rng, true) / 16.0),
            _ => unreachable!(),
        }
    }
    out
}

/// Activations: uniform in [-1, 1) scaled per row by 10^(i % 3 - 1), one all-zero block in
/// the row (when there are several), occasional exact ties.
pub fn random_x(m: usize, stride: usize, cols: usize, bs: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = vec![f32::NAN; if m == 0 { 0 } else { (m - 1) * stride + cols }];
    for i in 0..m {
        let s = 10f32.powi(i as i32 % 3 - 1);
        let row = &mut x[i * stride..i * stride + cols];
        for v in row.iter_mut() {
            *v = rng.sym() * s;
        }
        if cols / bs > 1 {
            let b = rng.below(cols / bs);
            row[b * bs..(b + 1) * bs].fill(0.0);
        }
    }
    x
}

fn f16v(b: &[u8], i: usize) -> f64 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f64()
}

/// The 6-bit (scale, min) pair `j` of Q4_K/Q5_K from their 12 scale bytes.
fn k4_scale_min(s: &[u8], j: usize) -> (f64, f64) {
    if j < 4 {
        ((s[j] & 63) as f64, (s[j + 4] & 63) as f64)
    } else {
        (
            ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4)) as f64,
            ((s[j + 4] >> 4) | ((s[j] >> 6) << 4)) as f64,
        )
    }
}

/// Each value of the blocks as (scale part, minimum part), exactly, in f64: the value is
/// their sum. Written from the format descriptions, independently of the crate's kernels.
pub fn decode_f64(ty: GgmlType, bytes: &[u8]) -> Vec<(f64, f64)> {
    use GgmlType::*;
    let mut out = Vec::new();
    for b in bytes.chunks_exact(ty.type_size()) {
        match ty {
            Q4_0 | Q4_1 | Q5_0 | Q5_1 => {
                let d = f16v(b, 0);
                let min = matches!(ty, Q4_1 | Q5_1);
                let m = if min { f16v(b, 2) } else { 0.0 };
                let five = matches!(ty, Q5_0 | Q5_1);
                let qs_at = 2 + 2 * min as usize + 4 * five as usize;
                let qh = if five {
                    let o = qs_at - 4;
                    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
                } else {
                    0
                };
                let offset = match ty {
                    Q4_0 => 8.0,
                    Q5_0 => 16.0,
                    _ => 0.0,
                };
                for e in 0..32 {
                    let byte = b[qs_at + e % 16];
                    let nib = if e < 16 { byte & 0xF } else { byte >> 4 } as u32;
                    let q = nib | ((qh >> e) & 1) << 4;
                    out.push((d * (q as f64 - offset), m));
                }
            }
            Q8_0 => {
                let d = f16v(b, 0);
                for e in 0..32 {
                    out.push((d * (b[2 + e] as i8) as f64, 0.0));
                }
            }
            Q4_K | Q5_K => {
                let (d, dmin) = (f16v(b, 0), f16v(b, 2));
                let five = ty == Q5_K;
                let qs_at = if five { 48 } else { 16 };
                for e in 0..256 {
                    let j = e / 32;
                    let (sc, mn) = k4_scale_min(&b[4..16], j);
                    let byte = b[qs_at + (e / 64) * 32 + e % 32];
                    let mut q = if j % 2 == 0 { byte & 0xF } else { byte >> 4 };
                    if five {
                        q |= ((b[16 + e % 32] >> j) & 1) << 4;
                    }
                    out.push((d * sc * q as f64, -dmin * mn));
                }
            }
            Q6_K => {
                let d = f16v(b, 208);
                for e in 0..256 {
                    let (h, r) = (e / 128, e % 128);
                    let lo = (b[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
                    let hi = (b[128 + h * 32 + r % 32] >> (2 * (r / 32))) & 3;
                    let q = (lo | hi << 4) as f64 - 32.0;
                    let sc = b[192 + e / 16] as i8 as f64;
                    out.push((d * sc * q, 0.0));
                }
            }
            _ => unreachable!(),
        }
    }
    out
}

/// The activation row's values `d · q` in f64 (exact).
pub fn act_f64(a: &Q8Row) -> Vec<f64> {
    let bs = a.format().block_size();
    a.qs()
        .iter()
        .enumerate()
        .map(|(e, &q)| a.d()[e / bs] as f64 * q as f64)
        .collect()
}

/// A bound on `|x_e − deq(a)_e|` per value: half a quantization step plus the f16
/// rounding of `d` (Q8_0/Q8_1: `d` is `max|x|/127` rounded to f16, relative error ≤ 2⁻¹¹,
/// times |q| ≤ 127 gives 0.062·d; with the f32 roundings of `1/d` and `x/d` the total is
/// below 0.57·d ≤ 0.6·d); Q8_K: half a step plus f32 roundings, below 0.51·|d|.
pub fn act_error(a: &Q8Row) -> Vec<f64> {
    let bs = a.format().block_size();
    let f = match a.format() {
        ActFormat::Q8_0 | ActFormat::Q8_1 => 0.6,
        ActFormat::Q8_K => 0.51,
    };
    (0..a.len())
        .map(|e| f * (a.d()[e / bs] as f64).abs())
        .collect()
}

/// `n` of the kernel's error bound `γ_n · Σ|t|` (see the crate documentation): the terms
/// per accumulation lane plus the three tree additions, plus two roundings per term for the
/// K-quants.
pub fn bound_n(ty: GgmlType, cols: usize) -> usize {
    use GgmlType::*;
    let nb = cols / ty.block_size();
    let per_block = match ty {
        Q4_1 | Q5_1 | Q4_K | Q5_K => 2,
        _ => 1,
    };
    let extra = if matches!(ty, Q4_K | Q5_K | Q6_K) {
        5
    } else {
        3
    };
    nb.div_ceil(8) * per_block + extra
}

pub fn gamma(n: usize) -> f64 {
    let nu = n as f64 * U;
    nu / (1.0 - nu)
}

/// The exact dot of a decoded weight row and decoded activations, and `Σ (|s|+|m|)·|x|`,
/// which bounds the sum of the kernel's term magnitudes.
pub fn exact_dot(w: &[(f64, f64)], x: &[f64]) -> (f64, f64) {
    let mut dot = 0.0;
    let mut mag = 0.0;
    for (&(s, m), &xe) in w.iter().zip(x) {
        dot += (s + m) * xe;
        mag += (s.abs() + m.abs()) * xe.abs();
    }
    (dot, mag)
}
