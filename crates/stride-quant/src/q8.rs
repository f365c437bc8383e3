//! Activation quantization: rows of `f32` activations to 8-bit blocks, on the fly.
//!
//! The weight type decides the activation format (as in llama.cpp's `vec_dot_type`):
//!
//! | weights                 | activations | block                                   |
//! |-------------------------|-------------|-----------------------------------------|
//! | Q4_0, Q5_0, Q8_0        | [`ActFormat::Q8_0`] | 32 values: scale `d`, `q` in −127…127 |
//! | Q4_1, Q5_1              | [`ActFormat::Q8_1`] | as Q8_0, plus the block sum `s = d·Σq` |
//! | Q4_K, Q5_K, Q6_K        | [`ActFormat::Q8_K`] | 256 values: `f32` scale, sums of each 16 |
//!
//! **Q8_0** is ggml's reference `quantize_row_q8_0`, byte for byte the same as
//! `stride_gguf::quantize(Q8_0, …)`: `d = max|x| / 127`, `q = round_half_away(x · (1/d))`,
//! `d` stored as f16. Here `d` is kept as the `f32` value of that f16, so a block is
//! `x ≈ d · q` exactly as the GGUF block dequantizes.
//!
//! **Q8_1** has the same `d` and `q`; its sum is `s = d · Σq` computed in `f32` from the
//! f16-rounded `d`, which is exact (`|Σq| ≤ 4064` has 12 bits, `d` 11). ggml stores
//! `f16(d_unrounded · Σq)` instead; the exact form keeps the kernels' only rounding in
//! their accumulation (see the crate documentation).
//!
//! **Q8_K** is ggml's: the value of largest magnitude `max` (the first on ties) maps to
//! −127, `q = clamp(round_half_even(x · (−127 / max)), −127, 127)`, `d = 1 / (−127 / max)`
//! in `f32`, and `bsums[k]` is the sum of the 16 `q` of group `k`.
//!
//! A block holding a NaN or an infinity gets `d = NaN` (and `q = 0`), so every output that
//! reads it is NaN: a non-finite activation is never silently dropped.

use crate::error::{bad_size, Result};
use half::f16;
use stride_gguf::{GgmlType, QK_K};

/// The 8-bit block format activations are quantized to; see the module documentation.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActFormat {
    /// 32 values per block, an f16 scale (kept as its `f32` value).
    Q8_0,
    /// As Q8_0, plus the block sum `s = d · Σq` (for weights with a minimum: Q4_1, Q5_1).
    Q8_1,
    /// 256 values per block, an `f32` scale and the sums of each 16 values (the K-quants).
    Q8_K,
}

impl ActFormat {
    /// Values per block: 32, or 256 for Q8_K.
    pub fn block_size(self) -> usize {
        match self {
            ActFormat::Q8_0 | ActFormat::Q8_1 => 32,
            ActFormat::Q8_K => QK_K,
        }
    }

    /// The activation format the kernels for weights of type `ty` consume, or `None` when
    /// this crate has no kernel for `ty`.
    ///
    /// ```
    /// use stride_quant::ActFormat;
    /// use stride_gguf::GgmlType;
    /// assert_eq!(ActFormat::for_weights(GgmlType::Q4_1), Some(ActFormat::Q8_1));
    /// assert_eq!(ActFormat::for_weights(GgmlType::Q6_K), Some(ActFormat::Q8_K));
    /// assert_eq!(ActFormat::for_weights(GgmlType::IQ4_XS), None);
    /// ```
    pub fn for_weights(ty: GgmlType) -> Option<ActFormat> {
        use GgmlType::*;
        match ty {
            Q4_0 | Q5_0 | Q8_0 => Some(ActFormat::Q8_0),
            Q4_1 | Q5_1 => Some(ActFormat::Q8_1),
            Q4_K | Q5_K | Q6_K => Some(ActFormat::Q8_K),
            _ => None,
        }
    }
}

/// One row of activations quantized to an [`ActFormat`], stored as separate arrays (scales,
/// sums, values) rather than interleaved blocks, which is what the kernels read.
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Row {
    format: ActFormat,
    d: Vec<f32>,
    s: Vec<f32>,
    bsums: Vec<i16>,
    qs: Vec<i8>,
}

impl Q8Row {
    /// Quantizes `x` (a whole number of blocks of `format`).
    ///
    /// ```
    /// use stride_quant::{ActFormat, Q8Row};
    /// let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) / 8.0).collect();
    /// let q = Q8Row::quantize(ActFormat::Q8_0, &x)?;
    /// assert_eq!((q.d().len(), q.qs().len()), (2, 64));
    /// let back = q.dequantize();
    /// assert!(x.iter().zip(&back).all(|(a, b)| (a - b).abs() <= 0.6 * q.d()[0].max(q.d()[1])));
    /// # Ok::<(), stride_quant::QuantError>(())
    /// ```
    pub fn quantize(format: ActFormat, x: &[f32]) -> Result<Q8Row> {
        let bs = format.block_size();
        if !x.len().is_multiple_of(bs) {
            return Err(bad_size(
                "Q8Row::quantize",
                format!(
                    "{} values are not a whole number of {bs}-value {format:?} blocks; pad the row to a multiple of {bs}",
                    x.len()
                ),
            ));
        }
        let mut row = Q8Row::empty(format);
        row.fill(x);
        Ok(row)
    }

    pub(crate) fn empty(format: ActFormat) -> Q8Row {
        Q8Row {
            format,
            d: Vec::new(),
            s: Vec::new(),
            bsums: Vec::new(),
            qs: Vec::new(),
        }
    }

    /// Requantizes `self` from `x` (whose length is a whole number of blocks; checked by
    /// the callers), reusing its buffers.
    pub(crate) fn fill(&mut self, x: &[f32]) {
        let bs = self.format.block_size();
        debug_assert!(x.len().is_multiple_of(bs));
        let nb = x.len() / bs;
        self.qs.clear();
        self.qs.resize(x.len(), 0);
        self.d.clear();
        self.s.clear();
        self.bsums.clear();
        match self.format {
            ActFormat::Q8_0 | ActFormat::Q8_1 => {
                let with_sum = self.format == ActFormat::Q8_1;
                for (xb, qb) in x.chunks_exact(32).zip(self.qs.chunks_exact_mut(32)) {
                    let (d, sum) = q8_0_block(xb, qb);
                    self.d.push(d);
                    if with_sum {
                        // exact: 11-bit d times a 12-bit sum
                        self.s.push(d * sum as f32);
                    }
                }
            }
            ActFormat::Q8_K => {
                self.bsums.reserve(nb * 16);
                for (xb, qb) in x.chunks_exact(QK_K).zip(self.qs.chunks_exact_mut(QK_K)) {
                    let d = q8_k_block(xb, qb);
                    self.d.push(d);
                    for g in qb.chunks_exact(16) {
                        self.bsums.push(g.iter().map(|&q| q as i16).sum());
                    }
                }
            }
        }
    }

    /// The format.
    pub fn format(&self) -> ActFormat {
        self.format
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.qs.len()
    }

    /// Whether the row holds no values.
    pub fn is_empty(&self) -> bool {
        self.qs.is_empty()
    }

    /// The scale of each block (`f32`; for Q8_0/Q8_1 the exact value of the stored f16).
    pub fn d(&self) -> &[f32] {
        &self.d
    }

    /// The sum `d · Σq` of each block (Q8_1 only; empty otherwise).
    pub fn s(&self) -> &[f32] {
        &self.s
    }

    /// The sum of each group of 16 values (Q8_K only; empty otherwise).
    pub fn bsums(&self) -> &[i16] {
        &self.bsums
    }

    /// The quantized values.
    pub fn qs(&self) -> &[i8] {
        &self.qs
    }

    /// The values the row stands for, `d · q`, in `f32`.
    pub fn dequantize(&self) -> Vec<f32> {
        let bs = self.format.block_size();
        self.qs
            .chunks_exact(bs)
            .zip(&self.d)
            .flat_map(|(qb, &d)| qb.iter().map(move |&q| d * q as f32))
            .collect()
    }

    /// The row as ggml blocks: Q8_0 as GGUF Q8_0 blocks (f16 `d`, 32 `q`; byte for byte
    /// `stride_gguf::quantize(Q8_0, x)`), Q8_1 as 40-byte blocks (`f32 d`, `f32 s`, 32 `q`:
    /// the geometry `stride_gguf` gives Q8_1), Q8_K as ggml's `block_q8_K` (`f32 d`, 256
    /// `q`, 16 `i16` sums).
    pub fn to_block_bytes(&self) -> Vec<u8> {
        let bs = self.format.block_size();
        let mut out = Vec::new();
        for (b, qb) in self.qs.chunks_exact(bs).enumerate() {
            match self.format {
                ActFormat::Q8_0 => out.extend(f16::from_f32(self.d[b]).to_bits().to_le_bytes()),
                ActFormat::Q8_1 => {
                    out.extend(self.d[b].to_le_bytes());
                    out.extend(self.s[b].to_le_bytes());
                }
                ActFormat::Q8_K => out.extend(self.d[b].to_le_bytes()),
            }
            out.extend(qb.iter().map(|&q| q as u8));
            if self.format == ActFormat::Q8_K {
                for s in &self.bsums[b * 16..b * 16 + 16] {
                    out.extend(s.to_le_bytes());
                }
            }
        }
        out
    }
}

/// One Q8_0 block: returns the scale (the `f32` value of the stored f16) and `Σq`.
fn q8_0_block(x: &[f32], qs: &mut [i8]) -> (f32, i32) {
    if x.iter().any(|v| !v.is_finite()) {
        qs.fill(0);
        return (f32::NAN, 0);
    }
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        // round half away from zero, saturating, as the reference (`as` saturates)
        let r = (v * id).round() as i8;
        *q = r;
        sum += r as i32;
    }
    (f16::from_f32(d).to_f32(), sum)
}

/// One Q8_K block: returns the `f32` scale.
fn q8_k_block(x: &[f32], qs: &mut [i8]) -> f32 {
    if x.iter().any(|v| !v.is_finite()) {
        qs.fill(0);
        return f32::NAN;
    }
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        qs.fill(0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (iscale * v).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    1.0 / iscale
}
