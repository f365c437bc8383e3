//! Random fills in WGSL, bit-identical to the CPU backend (`cpu/random.rs`): the same
//! Philox4x32-10 stream and the same mapping from stream words to elements
//! ([`crate::random`]), so `manual_seed(s)` gives the same bits on the CPU and on wgpu.
//!
//! Element `i` (logical, row-major order) is computed from `(seed, offset, i)` only; the
//! output is written through its layout, walked together with a row-major "logical" operand
//! whose offset is the element's logical index (as on CUDA). Seed, offset and the parameters
//! travel in `geo` after the geometry, so one pipeline serves every draw of a (distribution,
//! dtype) and nothing waits for the host. 64-bit quantities (seed, word indices, i64 values,
//! f64 bit patterns) are pairs of u32 in the shader (`random.wgsl`); Philox's `mulhi` is the
//! prelude's `pl_mul32`.
//!
//! What runs here, per distribution:
//! - **uniform** (f32, f16, bf16): the CPU computes `T(low + (high − low)·u24)` in f64. WGSL
//!   has no f64, so the shader performs that f64 product and sum on the bits (a 53-bit by
//!   24-bit product rounded to 53 bits, a two-operand sum with guard and sticky bits, both
//!   round-to-nearest-even) and rounds the f64 once to `T`, as the CPU does (f16/bf16
//!   straight from the f64, not through f32). `high − low` is computed on the host. Bounds
//!   whose difference or low end is below 2⁻⁹⁰⁰ in magnitude (but not 0) — where an f64
//!   subnormal could appear — go to the CPU. The cap (a value that rounds up to `high` becomes
//!   the largest `T` below it) compares an order key of the bits with the key of the smallest
//!   `T` ≥ `high`, made on the host, and writes the host's `uniform_cap`.
//! - **bernoulli** (every dtype): `u24 < p` is `(w >> 8) < ⌈p·2²⁴⌉` (clamped to `[0, 2²⁴]`;
//!   `p·2²⁴` is exact), writing `T(value)` or `T(0)` made on the host.
//! - **randint** (every dtype): `low + ⌊x·range / 2⁶⁴⌋` with a 64×64 → 128-bit high product,
//!   converted as `T::from_i64`: integers wrap (i64 writes both little-endian words), bool is
//!   `≠ 0`. Float outputs run here when every value fits i32, where i64 → f64 is exact and the
//!   prelude's i32 → float conversions round once as the CPU does (the frontend only lets
//!   exactly representable ranges through, far inside that); others go to the CPU.
//! - **bits64** (integers, bool; randperm's keys): the 64 raw bits as `from_i64`.
//!
//! **Normal** stays a CPU round trip: Box–Muller runs the `libm` crate's f64 `log`, `sqrt`
//! and `sincos`, which would need a bit-exact software-f64 port of those routines. So do
//! float bits64 draws and randint to floats beyond i32 (i64 → f64 → f32 rounds twice; no
//! frontend asks for them).

use super::launch::{bindings, declare, gpu_of, groups_for, launch};
use super::wgsl;
use crate::backend::common::element_bits;
use crate::backend::common::random::uniform_cap;
use crate::backend::{RandomDist, View};
use crate::{with_dtype, DType, Element, Error, Layout, Result, Scalar};

/// The helpers every random shader uses (Philox, 64-bit integers, f64 on the bits).
const LIB: &str = include_str!("random.wgsl");

/// Deliberately wrong variants of the shaders (name, text, replacement), chosen by
/// `STRIDE_WGPU_MUTANT` as [`wgsl::mutant`] describes: the tests (`tests/wgpu_backend.rs`'s
/// random draws, and this file's probe of the f64 steps) are shown to fail on each.
const MUTANTS: [(&str, &str, &str); 13] = [
    // a Philox key-schedule constant and a round multiplier, one bit off
    ("rnd_key_schedule", "0x9E3779B9u", "0x9E3779B8u"),
    ("rnd_multiplier", "0xCD9E8D57u", "0xCD9E8D56u"),
    // the next word of the block instead of word w
    (
        "rnd_word_off_by_one",
        "key), w.x & 3u);",
        "key), (w.x + 1u) & 3u);",
    ),
    // block indices lose their high word (offsets past 2³² words)
    (
        "rnd_index_lo_only",
        "(w.x >> 2u) | (w.y << 30u), w.y >> 2u",
        "w.x >> 2u, 0u",
    ),
    // a pair of words that straddles two blocks is read from one
    ("rnd_pair_one_block", "if (j != 3u) {", "if (true) {"),
    // 64-bit sums drop their carry (offset + i past 2³², randint's low + x·range)
    (
        "rnd_add_no_carry",
        "a.y + b.y + select(0u, 1u, lo < a.x)",
        "a.y + b.y",
    ),
    // randint's high product drops the carries of its middle word
    (
        "rnd_mulhi_no_carry",
        "let carry = select(0u, 1u, t < p0.y) + select(0u, 1u, t2 < t);",
        "let carry = 0u;",
    ),
    // the f64 product truncates instead of rounding
    (
        "rnd_mul_truncates",
        "if (rb == 1u && (sticky || (q.x & 1u) == 1u)) {",
        "if (false) {",
    ),
    // the f64 sum forgets the bits shifted out of the smaller operand (no sticky bit)
    (
        "rnd_add_no_sticky",
        "rnd_shr_sticky(rnd_shl(y.m, 10u), u32(x.e - y.e))",
        "rnd_shr(rnd_shl(y.m, 10u), min(u32(x.e - y.e), 63u))",
    ),
    // a uniform that rounds up to `high` is kept (the cap compares > instead of >=)
    ("rnd_cap_strict", ">= geo[pb + 8u]", "> geo[pb + 8u]"),
    // f16 and bf16 rounded through f32 (twice), not straight from the f64
    (
        "rnd_halves_via_f32",
        "return rnd_round(s, ebits, mbits);",
        "let f = bitcast<f32>(rnd_round(s, 8u, 23u)); return select(select(rnd_round(s, ebits, mbits), f32_to_bf16(f), mbits == 7u), f32_to_f16(f), mbits == 10u);",
    ),
    // bernoulli compares u24 <= p
    ("rnd_bernoulli_le", "< geo[pb + 4u];", "<= geo[pb + 4u];"),
    // an i64 element gets its high word in both halves
    ("rnd_i64_high_twice", "= lo; b", "= hi; b"),
];

/// `src` with the mutant `STRIDE_WGPU_MUTANT` names, if it is one of [`MUTANTS`] (a
/// replacement whose text is not in `src` changes nothing).
fn mutate(mut src: String) -> String {
    for (name, from, to) in MUTANTS {
        if wgsl::mutant(name) {
            src = src.replace(from, to);
        }
    }
    src
}

/// Bounds closer to 0 than this (but not 0) go to the CPU: below it an f64 product or sum of
/// the uniform could be subnormal, which the shader's f64 arithmetic does not handle.
const TINY: f64 = f64::from_bits((1023 - 900) << 52); // 2⁻⁹⁰⁰

/// Whether `dist` into `dtype` runs in WGSL (else the CPU round trip does).
pub(crate) fn native(dist: RandomDist, dtype: DType) -> bool {
    let float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
    if dtype == DType::F64 {
        return false;
    }
    match dist {
        RandomDist::Uniform { low, high } => {
            let d = high - low;
            let ok = |x: f64| x == 0.0 || (x.is_finite() && x.abs() >= TINY);
            float && d >= 0.0 && ok(d) && ok(low)
        }
        RandomDist::Normal { .. } => false,
        RandomDist::RandInt { low, high } => {
            !float || (low >= i32::MIN as i64 && high as i128 - 1 <= i32::MAX as i128)
        }
        RandomDist::Bernoulli { .. } => true,
        RandomDist::Bits64 => !float,
    }
}

/// (exponent bits, mantissa bits) of a float dtype.
fn format(dtype: DType) -> (u32, u32) {
    match dtype {
        DType::F32 => (8, 23),
        DType::F16 => (5, 10),
        _ => (8, 7), // bf16
    }
}

/// `rnd_key` of random.wgsl: an order-preserving key of a float's bits, ±0 equal.
fn key(bits: u32, width: u32) -> u32 {
    let sb = 1u32 << (width - 1);
    let mag = bits & (sb - 1);
    if bits & sb != 0 {
        0x8000_0000 - mag
    } else {
        0x8000_0000 + mag
    }
}

fn words(x: u64) -> [u32; 2] {
    [x as u32, (x >> 32) as u32]
}

/// `geo` of the output and its logical (row-major) twin: `[n, rank, shape…, (offset,
/// strides…)×2]`, the layout `at` walks (`elementwise.rs`).
fn geo(op: &'static str, dst: &View) -> Result<Vec<u32>> {
    let logical = Layout::contiguous(dst.layout.shape());
    let twin = View {
        layout: &logical,
        ..*dst
    };
    super::elementwise::geo(op, [*dst, twin])
}

/// The WGSL that writes the i64 `v` (a vec2 of words) as `T::from_i64` would, for the
/// integer and bool dtypes and (values in i32) the floats.
fn from_i64(dtype: DType, v: &str) -> String {
    match dtype {
        DType::I64 => format!("put(e, {v}.x, {v}.y);"),
        DType::Bool => format!("put(e, select(0u, 1u, ({v}.x | {v}.y) != 0u), 0u);"),
        DType::F32 => format!("put(e, bitcast<u32>(i32_to_f32(bitcast<i32>({v}.x))), 0u);"),
        DType::F16 => format!("put(e, i32_to_f16(bitcast<i32>({v}.x)), 0u);"),
        DType::BF16 => format!("put(e, i32_to_bf16(bitcast<i32>({v}.x)), 0u);"),
        _ => format!("put(e, {v}.x, 0u);"), // i32, u32, i8, u8: the low bits (st0 masks)
    }
}

/// Fills `dst` (through its layout) with `dist` drawn from the stream `(seed, offset)`, for
/// the draws [`native`] accepts.
pub(crate) fn random(dist: RandomDist, seed: u64, offset: u64, dst: View) -> Result<()> {
    let op = "random";
    let t = dst.dtype;
    let gpu = gpu_of(op, &dst)?;
    let mut g = geo(op, &dst)?;
    let n = g[0] as usize;
    if n == 0 {
        return Ok(());
    }
    // after the geometry (4 + 3·rank words): seed, offset, then the distribution's words
    g.extend(words(seed));
    g.extend(words(offset));
    // each element: `li` its logical index, `e` its element offset in the output
    let body = match dist {
        RandomDist::Uniform { low, high } => {
            let (eb, mb) = format(t);
            let width = 1 + eb + mb;
            let (h, h_bits) = with_dtype!(t, T => {
                let h = T::from_f64(high);
                (h.to_f64(), element_bits(Scalar::Float(high), t) as u32)
            });
            let cap = with_dtype!(t, T => uniform_cap::<T>(low, high).to_f64());
            g.extend(words(low.to_bits()));
            g.extend(words((high - low).to_bits()));
            g.push(key(h_bits, width) + (h < high) as u32);
            g.push(element_bits(Scalar::Float(cap), t) as u32);
            format!(
                "        let k = rnd_word(rnd_add64(off, vec2<u32>(li, 0u)), key) >> 8u;
        let v = rnd_uniform(vec2<u32>(geo[pb + 4u], geo[pb + 5u]), vec2<u32>(geo[pb + 6u], geo[pb + 7u]), k, {eb}u, {mb}u);
        put(e, select(v, geo[pb + 9u], rnd_key(v, {width}u) >= geo[pb + 8u]), 0u);"
            )
        }
        RandomDist::Bernoulli { p, value } => {
            // u24 < p  ⟺  (w >> 8) < p·2²⁴ (exact)  ⟺  (w >> 8) < ⌈p·2²⁴⌉
            let q = p * 16_777_216.0;
            let threshold = if q.is_nan() || q <= 0.0 {
                0
            } else if q >= 16_777_216.0 {
                1 << 24
            } else {
                q.ceil() as u32
            };
            g.push(threshold);
            g.extend(words(element_bits(Scalar::Float(value), t)));
            "        let hit = (rnd_word(rnd_add64(off, vec2<u32>(li, 0u)), key) >> 8u) < geo[pb + 4u];
        put(e, select(0u, geo[pb + 5u], hit), select(0u, geo[pb + 6u], hit));"
                .to_string()
        }
        RandomDist::RandInt { low, high } => {
            g.extend(words(low as u64));
            g.extend(words((high as i128 - low as i128) as u64));
            // x = (a << 32) | b from words 2i, 2i + 1 (2i < 2³²: at most 2³¹ elements)
            format!(
                "        let ab = rnd_word2(rnd_add64(off, vec2<u32>(2u * li, 0u)), key);
        let hi = rnd_mulhi64(vec2<u32>(ab.y, ab.x), vec2<u32>(geo[pb + 6u], geo[pb + 7u]));
        let v = rnd_add64(vec2<u32>(geo[pb + 4u], geo[pb + 5u]), hi);
        {}",
                from_i64(t, "v")
            )
        }
        RandomDist::Bits64 => format!(
            "        let ab = rnd_word2(rnd_add64(off, vec2<u32>(2u * li, 0u)), key);
        let v = vec2<u32>(ab.y, ab.x);
        {}",
            from_i64(t, "v")
        ),
        RandomDist::Normal { .. } => {
            return Err(Error::invalid(
                op,
                "internal error: normal draws run on the CPU (please report)",
            ))
        }
    };
    let b = bindings(&[dst], 1);
    let slot = b.slot[0];
    let mut src = declare(&b.kinds);
    src += wgsl::AT_FN;
    if t == DType::I64 {
        // two little-endian words per element (buffer.rs)
        src += &format!(
            "fn put(e: u32, lo: u32, hi: u32) {{ b{slot}[2u * e] = lo; b{slot}[2u * e + 1u] = hi; }}\n"
        );
    } else {
        src += &wgsl::store_fn(0, slot, t);
        src += "fn put(e: u32, lo: u32, hi: u32) { st0(e, lo); }\n";
    }
    src += LIB;
    src += wgsl::LOOP_HEAD;
    src += "        let pb = 4u + 3u * geo[1];
        let key = vec2<u32>(geo[pb], geo[pb + 1u]);
        let off = vec2<u32>(geo[pb + 2u], geo[pb + 3u]);
        let li = at(1u, i);
        let e = at(0u, i);
";
    src += &body;
    src += "\n    }\n}\n";
    launch(&gpu, op, mutate(src), &b, &g, groups_for(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::half_round::{f64_to_bf16, f64_to_f16};
    use crate::{Device, Tensor};

    /// xorshift64: the probe's inputs, reproducible.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        /// A 52-bit fraction with long runs of zeros or ones (ties, sticky bits).
        fn fraction(&mut self) -> u64 {
            let m = match self.below(5) {
                0 => self.next(),
                1 => (self.next() & 0xff) << self.below(50),
                2 => !((self.next() & 0xff) << self.below(50)),
                3 => (1u64 << self.below(52)) | (self.next() & 1),
                _ => (1u64 << self.below(52)).wrapping_sub(1) ^ (self.next() & 3),
            };
            m & 0xf_ffff_ffff_ffff
        }
        /// An f64 with an unbiased exponent in `e0 .. e0 + span`, an awkward fraction, and
        /// a random sign if `signed` (else positive).
        fn f64_at(&mut self, e0: i64, span: u64, signed: bool) -> f64 {
            let e = e0 + self.below(span) as i64;
            let neg = signed && self.next() & 1 == 1;
            f64::from_bits(((neg as u64) << 63) | (((e + 1023) as u64) << 52) | self.fraction())
        }
        /// A tie of f32, f16 or bf16: the midpoint of two neighbours (exact in f64).
        fn tie(&mut self) -> f64 {
            let (v, next) = match self.below(3) {
                0 => {
                    let b = self.next() as u32 & 0x4fff_fffe;
                    (f32::from_bits(b) as f64, f32::from_bits(b + 1) as f64)
                }
                1 => {
                    let b = self.next() as u16 & 0x7bfe;
                    let h = half::f16::from_bits;
                    (h(b).to_f64(), h(b + 1).to_f64())
                }
                _ => {
                    let b = self.next() as u16 & 0x4ffe;
                    let h = half::bf16::from_bits;
                    (h(b).to_f64(), h(b + 1).to_f64())
                }
            };
            (v + next) / 2.0
        }
        fn k(&mut self) -> u32 {
            match self.below(4) {
                0 => [0, 1, 2, 3, 1 << 23, (1 << 24) - 1][self.below(6) as usize],
                1 => 1 << self.below(24),
                _ => (self.next() >> 40) as u32,
            }
        }
    }

    /// (low, d, k) triples where the f64 product and sum of a uniform round in every way:
    /// exponent gaps from 0 to far apart, cancellations, sums on or just off a tie of f32, f16
    /// and bf16 (some decided by the sum's sticky bit alone), subnormal and overflowing results.
    fn cases(n: usize) -> Vec<(f64, f64, u32)> {
        let mut r = Rng(0x5eed_1234_abcd_0001);
        let mut out = vec![];
        while out.len() < n {
            let mut k = r.k();
            let (low, d) = match r.below(7) {
                0 => {
                    let e = r.below(60) as i64 - 30;
                    let gap = [r.below(4), r.below(70), r.below(300)][r.below(3) as usize] as i64;
                    let (a, b) = (r.f64_at(e, 1, true), r.f64_at(e - gap, 1, false));
                    if r.next() & 1 == 1 {
                        (a, b)
                    } else {
                        (-b, a.abs())
                    }
                }
                1 => {
                    // low ≈ −d·u: the sum cancels to a few bits
                    let d = r.f64_at(-10, 20, false);
                    let m = d * (k.max(1) as f64 / 16_777_216.0);
                    let nudge = r.below(9) as i64 - 4;
                    (-f64::from_bits((m.to_bits() as i64 + nudge) as u64), d)
                }
                2 => {
                    // low a tie of f32, f16 or bf16, d tiny or 0: the sum lands on or
                    // just off the tie
                    let tie = r.tie();
                    let tie = if r.next() & 1 == 1 { -tie } else { tie };
                    let d = tie.abs() * (2f64).powi(-(r.below(60) as i32) - 1);
                    (tie, if r.below(8) == 0 { 0.0 } else { d })
                }
                3 => {
                    // results in the subnormals of f16 (below 2⁻¹⁴), bf16 and f32 (2⁻¹²⁶)
                    let e = [-16, -20, -24, -128, -135, -149][r.below(6) as usize];
                    let low = if r.next() & 1 == 1 {
                        0.0
                    } else {
                        -r.f64_at(e, 1, false)
                    };
                    (low, r.f64_at(e, 3, false))
                }
                4 => {
                    // near the top of f16 (65504, inf from 65520) and of f32
                    let top = [65504.0, 65520.0, f32::MAX as f64][r.below(3) as usize];
                    let low = top - r.f64_at(0, 8, false);
                    (low, r.f64_at(0, 8, false))
                }
                5 => {
                    // ±tie + m, m a hair above half an ulp of the tie (u = 1/2, d = 2m): only
                    // the sum's sticky bit tells the f64 sum to round away from the tie
                    let tie = r.tie();
                    let half_ulp = (f64::from_bits(tie.to_bits() + 1) - tie) / 2.0;
                    let m = f64::from_bits(half_ulp.to_bits() + 1 + r.below(3));
                    k = 1 << 23;
                    (if r.next() & 1 == 1 { -tie } else { tie }, 2.0 * m)
                }
                _ => (r.f64_at(-1000, 2000, true), r.f64_at(-1000, 2000, false)),
            };
            let fine = |x: f64| x == 0.0 || (x.is_finite() && x.abs() >= TINY);
            if fine(low) && fine(d) {
                out.push((low, d, k));
            }
        }
        out
    }

    /// The shader's f64 product, sum and rounding (`rnd_uniform`) give the CPU's bits for
    /// f32, f16 and bf16 on inputs that round in every way, not only on the draws of a test.
    #[test]
    fn f64_steps_of_uniform_are_the_cpus() {
        let Some(d) = crate::webgpu::require_or_skip("f64_steps_of_uniform_are_the_cpus") else {
            return;
        };
        let cases = cases(200_000);
        let input: Vec<u32> = cases
            .iter()
            .flat_map(|&(low, dd, k)| {
                let (l, m) = (words(low.to_bits()), words(dd.to_bits()));
                [l[0], l[1], m[0], m[1], k]
            })
            .collect();
        let inp = Tensor::from_vec(input, [cases.len() * 5])
            .unwrap()
            .to_device(&d)
            .unwrap();
        let out = Tensor::zeros([cases.len() * 3], DType::U32, &d).unwrap();
        let views = [out.view_ref(), inp.view_ref()];
        let b = bindings(&views, 1);
        let src = declare(&b.kinds)
            + LIB
            + "
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = gid.x; i < geo[0]; i = i + nwg.x * 256u) {
        let low = vec2<u32>(b1[5u * i], b1[5u * i + 1u]);
        let d = vec2<u32>(b1[5u * i + 2u], b1[5u * i + 3u]);
        let k = b1[5u * i + 4u];
        b0[3u * i] = rnd_uniform(low, d, k, 8u, 23u);
        b0[3u * i + 1u] = rnd_uniform(low, d, k, 5u, 10u);
        b0[3u * i + 2u] = rnd_uniform(low, d, k, 8u, 7u);
    }
}
";
        let gpu = gpu_of("probe", &views[0]).unwrap();
        let n = cases.len();
        launch(&gpu, "probe", mutate(src), &b, &[n as u32], groups_for(n)).unwrap();
        let got = out
            .to_device(&Device::Cpu)
            .unwrap()
            .to_vec::<u32>()
            .unwrap();
        let mut bad = vec![];
        for (i, &(low, dd, k)) in cases.iter().enumerate() {
            let v = low + dd * (k as f64 * (1.0 / 16_777_216.0));
            let want = [
                (v as f32).to_bits(),
                f64_to_f16(v).to_bits() as u32,
                f64_to_bf16(v).to_bits() as u32,
            ];
            for (j, name) in ["f32", "f16", "bf16"].iter().enumerate() {
                if got[3 * i + j] != want[j] {
                    bad.push(format!(
                        "{name}: {low:e} + {dd:e}·{k}·2⁻²⁴ = {v:e}: {:#x}, the CPU {:#x}",
                        got[3 * i + j],
                        want[j]
                    ));
                }
            }
        }
        assert!(
            bad.is_empty(),
            "{} of {} wrong, e.g.\n{}",
            bad.len(),
            3 * n,
            bad[..bad.len().min(10)].join("\n")
        );
    }
}
