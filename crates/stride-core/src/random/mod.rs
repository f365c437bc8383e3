//! Reproducible random numbers: the same `(seed, offset)` gives the same values on every
//! device, for every layout of the output and every number of threads.
//!
//! # The stream
//!
//! A [`Generator`] is a seed and an offset. The seed's stream is a sequence of 32-bit words:
//!
//! ```text
//! word(seed, w) = philox4x32_10(counter = (lo32(w/4), hi32(w/4), 0, 0),
//!                               key     = (lo32(seed), hi32(seed)))[w % 4]
//! ```
//!
//! ([`philox::word`]). A draw of `n` elements starts at the generator's offset `o`, reads the
//! words below, and advances the offset by exactly the number of words it consumed — so
//! drawing 10 and then 10 values gives the same values as drawing 20 (for normals: when the
//! first count is even, since normals come in pairs).
//!
//! # Which words make element `i`
//!
//! Elements are numbered in **logical (row-major) order** of the output's shape, whatever the
//! output's strides: element `i` is always the same value. With `u24(w) = (w >> 8)·2⁻²⁴` and
//! `u53(a, b) = (((a << 32) | b) >> 11)·2⁻⁵³` (both exact in f64, in `[0, 1)`):
//!
//! | draw | output dtype | words of element `i` | value | words consumed |
//! |---|---|---|---|---|
//! | uniform `[lo, hi)` | f32, f16, bf16 | `o+i` | `lo + (hi−lo)·u24` | `n` |
//! | uniform `[lo, hi)` | f64 | `o+2i, o+2i+1` | `lo + (hi−lo)·u53` | `2n` |
//! | normal | f32, f16, bf16 | pair `p = i/2`: `o+2p, o+2p+1` → `u1, u2` (u24) | see below | `2·⌈n/2⌉` |
//! | normal | f64 | pair `p`: `o+4p … o+4p+3` → `u1 = u53(w0,w1)`, `u2 = u53(w2,w3)` | see below | `4·⌈n/2⌉` |
//! | randint `[lo, hi)` | any | `a = o+2i, b = o+2i+1`, `x = (a << 32) \| b` | `lo + ⌊x·(hi−lo) / 2⁶⁴⌋` | `2n` |
//! | bernoulli(p) | any | `o+i` | `1` if `u24 < p` else `0` | `n` |
//!
//! Uniform and normal values are computed in f64 and rounded once to the output dtype (so
//! f16/bf16 get the f32 draw, rounded). A uniform that rounds up to `hi` is replaced by the
//! largest value of the dtype below `hi` (never by `lo`, which would bias it), so results
//! stay in `[lo, hi)`.
//!
//! **Normals** use Box–Muller on the pair `(u1, u2)`: `r = √(−2·ln(1 − u1))`, `θ = 2π·u2`;
//! element `2p` is `mean + std·r·cos θ` and element `2p+1` is `mean + std·r·sin θ` (the sine of
//! a last, unpaired element is dropped). `ln`, `sin`, `cos` are the `libm` crate's, a
//! bit-reproducible port of musl, computed in f64. (`1 − u1` is in `(0, 1]`, so `r` is finite:
//! at most 5.77 for 24-bit uniforms, 8.57 for 53-bit ones.)
//!
//! # Ops built on these draws
//!
//! - `rand`/`rand_like`/`uniform_` draw uniforms; `randn`/`randn_like`/`normal_` normals;
//!   `randint` randint.
//! - `bernoulli(probs)` is `rand(probs.shape, f32) < probs` (one word per element, compared
//!   exactly), in the probabilities' dtype; `bernoulli_(p)` and `bernoulli_scalar` are the
//!   bernoulli row of the table. Probabilities are therefore resolved to 2⁻²⁴.
//! - `dropout_mask(p)` is bernoulli with keep probability `1 − p`: element `i` is kept iff
//!   `u24(word(o+i)) < 1 − p`; the scaled mask holds `1/(1 − p)` where kept, `0` elsewhere; the
//!   bool mask holds `true` where kept. Both masks of one `(seed, offset)` agree.
//! - `multinomial` draws `u = rand([rows, m], f64)` (`m` = samples with replacement, categories
//!   without). With replacement, sample `j` of a row is the first category whose running sum
//!   (in f64, left to right) exceeds `u·total`. Without replacement, category `c` gets the key
//!   `−ln(1 − u_c) / p_c` (exponential races) and the samples are the categories of the `n`
//!   smallest keys, in increasing order (ties by index).
//! - `randperm(n)` draws `n` 64-bit keys (two words each, as randint's `x`) and returns the
//!   indices sorted by (key, index).

pub mod generator;
pub mod philox;

pub use generator::{default_generator, manual_seed, Generator, GeneratorState, DEFAULT_SEED};

use crate::backend::RandomDist;
use crate::DType;

/// `(w >> 8)·2⁻²⁴`: a uniform in `[0, 1)` from one word, exact in f32 and f64.
#[inline(always)]
pub fn u24(w: u32) -> f64 {
    (w >> 8) as f64 * (1.0 / 16_777_216.0)
}

/// `(((a << 32) | b) >> 11)·2⁻⁵³`: a uniform in `[0, 1)` from two words, exact in f64.
#[inline(always)]
pub fn u53(a: u32, b: u32) -> f64 {
    ((((a as u64) << 32) | b as u64) >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// Box–Muller: two standard normals from two uniforms in `[0, 1)`.
#[inline(always)]
pub fn box_muller(u1: f64, u2: f64) -> (f64, f64) {
    let r = libm::sqrt(-2.0 * libm::log(1.0 - u1));
    let (s, c) = libm::sincos(2.0 * std::f64::consts::PI * u2);
    (r * c, r * s)
}

/// The number of stream words a draw of `numel` elements of `dtype` consumes (what the
/// generator's offset advances by).
pub(crate) fn words_consumed(dist: RandomDist, dtype: DType, numel: usize) -> u64 {
    let n = numel as u64;
    let wide = dtype == DType::F64;
    match dist {
        RandomDist::Uniform { .. } => n.saturating_mul(if wide { 2 } else { 1 }),
        RandomDist::Normal { .. } => n.div_ceil(2).saturating_mul(if wide { 4 } else { 2 }),
        RandomDist::RandInt { .. } | RandomDist::Bits64 => n.saturating_mul(2),
        RandomDist::Bernoulli { .. } => n,
    }
}
