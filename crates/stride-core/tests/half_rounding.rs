//! Casts to f16/bf16 are correctly rounded (IEEE round to nearest, ties to even, one rounding
//! from all the bits of the source). The reference below finds the two neighbouring half
//! values by binary search and compares the input with their midpoint, which is exact in f64
//! and in f32. Each check also runs on `half`'s own f64 conversions, and must fail there: they
//! drop the low 32 bits of the double (bf16, f16 fallback) or round twice through f32 (F16C).

use stride_core::half_round::{f32_to_bf16, f32_to_f16, f64_to_bf16, f64_to_f16};
use stride_core::{bf16, f16, DType, Element, Tensor};

/// One half format: its positive finite values in order, then a sentinel 2^(emax+1) for +inf.
struct Format {
    name: &'static str,
    values: Vec<f64>,
    inf_bits: u16,
    quiet: u16,
}

impl Format {
    fn new(name: &'static str, inf_bits: u16, quiet: u16, to_f64: fn(u16) -> f64) -> Format {
        let mut values: Vec<f64> = (0..inf_bits).map(to_f64).collect();
        let max = *values.last().unwrap();
        let ulp = max - values[values.len() - 2];
        values.push(max + ulp); // 2^(emax+1): where +inf sits for rounding purposes
        Format {
            name,
            values,
            inf_bits,
            quiet,
        }
    }
    fn f16() -> Format {
        Format::new("f16", 0x7c00, 0x200, |b| f16::from_bits(b).to_f64())
    }
    fn bf16() -> Format {
        Format::new("bf16", 0x7f80, 0x40, |b| bf16::from_bits(b).to_f64())
    }

    /// The correctly rounded bit pattern of `x` (NaN: any NaN with the quiet bit).
    fn reference(&self, x: f64) -> u16 {
        let sign = if x.is_sign_negative() { 0x8000u16 } else { 0 };
        let a = x.abs();
        if x.is_nan() {
            return sign | self.inf_bits | self.quiet;
        }
        let top = *self.values.last().unwrap();
        if a >= top {
            return sign | self.inf_bits;
        }
        let lo = self.values.partition_point(|&v| v <= a) - 1; // values[lo] <= a < values[lo+1]
        let (l, h) = (self.values[lo], self.values[lo + 1]);
        let mid = (l + h) / 2.0; // exact: at most 13 significant bits, well inside f64's range
        let bits = if a < mid {
            lo
        } else if a > mid {
            lo + 1
        } else if lo % 2 == 0 {
            lo
        } else {
            lo + 1
        };
        sign | bits as u16
    }

    fn agrees(&self, x: f64, got: u16) -> bool {
        let want = self.reference(x);
        if x.is_nan() {
            // NaN stays NaN and quiet; sign kept
            got & 0x8000 == want & 0x8000 && got & 0x7fff > self.inf_bits && got & self.quiet != 0
        } else {
            got == want
        }
    }

    /// Every tie between adjacent values (and the tie between max and inf), the tie ± one ulp
    /// of f64 and of f32, and the values themselves; both signs.
    fn hard_cases(&self) -> (Vec<f64>, Vec<f32>) {
        let (mut v64, mut v32) = (Vec::new(), Vec::new());
        for w in self.values.windows(2) {
            let mid = (w[0] + w[1]) / 2.0;
            let m32 = mid as f32;
            assert_eq!(m32 as f64, mid, "{}: the midpoint is an f32", self.name);
            for s in [1.0f64, -1.0] {
                v64.extend([w[0], mid, mid.next_up(), mid.next_down()].map(|x| s * x));
                v32.extend(
                    [w[0] as f32, m32, m32.next_up(), m32.next_down()].map(|x| s as f32 * x),
                );
            }
        }
        (v64, v32)
    }

    fn mismatches64(&self, xs: &[f64], conv: impl Fn(f64) -> u16) -> Vec<(f64, u16, u16)> {
        xs.iter()
            .filter(|&&x| !self.agrees(x, conv(x)))
            .map(|&x| (x, conv(x), self.reference(x)))
            .collect()
    }
    fn mismatches32(&self, xs: &[f32], conv: impl Fn(f32) -> u16) -> Vec<(f32, u16, u16)> {
        xs.iter()
            .filter(|&&x| !self.agrees(x as f64, conv(x)))
            .map(|&x| (x, conv(x), self.reference(x as f64)))
            .collect()
    }
}

fn assert_none<T: std::fmt::Debug>(what: &str, bad: Vec<T>) {
    assert!(
        bad.is_empty(),
        "{what}: {} wrong (input, got, want), first: {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
}

#[test]
fn every_tie_and_its_neighbours_round_correctly() {
    let (f, b) = (Format::f16(), Format::bf16());
    let (x64, x32) = f.hard_cases();
    assert_none(
        "f64 -> f16",
        f.mismatches64(&x64, |x| f64_to_f16(x).to_bits()),
    );
    assert_none(
        "f32 -> f16",
        f.mismatches32(&x32, |x| f32_to_f16(x).to_bits()),
    );
    assert_none(
        "Element f64 -> f16",
        f.mismatches64(&x64, |x| <f16 as Element>::from_f64(x).to_bits()),
    );
    let (x64, x32) = b.hard_cases();
    assert_none(
        "f64 -> bf16",
        b.mismatches64(&x64, |x| f64_to_bf16(x).to_bits()),
    );
    assert_none(
        "f32 -> bf16",
        b.mismatches32(&x32, |x| f32_to_bf16(x).to_bits()),
    );
    assert_none(
        "Element f64 -> bf16",
        b.mismatches64(&x64, |x| <bf16 as Element>::from_f64(x).to_bits()),
    );
    assert_none(
        "Element f32 -> bf16 (cast)",
        b.mismatches32(&x32, |x| x.cast::<bf16>().to_bits()),
    );
}

#[test]
fn half_crates_f64_conversions_fail_the_same_checks() {
    // The checks above have teeth: `half`'s f64 conversions (what stride used before) fail them.
    let (f, b) = (Format::f16(), Format::bf16());
    let (x64, _) = f.hard_cases();
    assert!(!f
        .mismatches64(&x64, |x| half::f16::from_f64(x).to_bits())
        .is_empty());
    let (x64, _) = b.hard_cases();
    assert!(!b
        .mismatches64(&x64, |x| half::bf16::from_f64(x).to_bits())
        .is_empty());
    let x = -12.406_253_8f32 as f64;
    assert_eq!(half::bf16::from_f64(x).to_f64(), -12.375); // the defect the matrix found
    assert_eq!(f64_to_bf16(x).to_f64(), -12.4375);
}

/// xorshift64*: reproducible, fast.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn random_bit_patterns_round_correctly() {
    let (f, b) = (Format::f16(), Format::bf16());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let n = 1 << 20;
    for (fmt, lo_exp, hi_exp) in [(&f, 1023 - 30, 1023 + 17), (&b, 1023 - 140, 1023 + 130)] {
        let mut x64 = Vec::with_capacity(3 * n);
        let mut x32 = Vec::with_capacity(2 * n);
        for _ in 0..n {
            let r = rng.next();
            x64.push(f64::from_bits(r)); // any pattern: NaNs, infinities, zeros, huge, tiny
                                         // exponents around the format's range, random fraction
            let e = lo_exp + (rng.next() % (hi_exp - lo_exp)) as u64;
            x64.push(f64::from_bits((r & 0x800f_ffff_ffff_ffff) | (e << 52)));
            // near a tie: a random half value, the round bit set, few random sticky bits
            let m = (r & 0x8000_0000_0000_0000) | (e << 52) | (rng.next() & 0x000f_ffff_ffff_ffff);
            let keep = 52 - if fmt.name == "f16" { 10 } else { 7 };
            let tie =
                (m >> keep << keep) | (1 << (keep - 1)) | (rng.next() & 0x3 << (rng.next() % 40));
            x64.push(f64::from_bits(tie));
            let r32 = rng.next() as u32;
            x32.push(f32::from_bits(r32));
            let e32 = ((e as i64 - 1023 + 127).clamp(0, 254)) as u32;
            x32.push(f32::from_bits((r32 & 0x807f_ffff) | (e32 << 23)));
        }
        let (c64, c32): (fn(f64) -> u16, fn(f32) -> u16) = if fmt.name == "f16" {
            (|x| f64_to_f16(x).to_bits(), |x| f32_to_f16(x).to_bits())
        } else {
            (|x| f64_to_bf16(x).to_bits(), |x| f32_to_bf16(x).to_bits())
        };
        assert_none(
            &format!("random f64 -> {}", fmt.name),
            fmt.mismatches64(&x64, c64),
        );
        assert_none(
            &format!("random f32 -> {}", fmt.name),
            fmt.mismatches32(&x32, c32),
        );
    }
}

#[test]
fn to_dtype_rounds_correctly_through_a_transposed_layout() -> stride_core::Result<()> {
    for (fmt, dtype) in [(Format::f16(), DType::F16), (Format::bf16(), DType::BF16)] {
        let (x64, x32) = fmt.hard_cases();
        let cols = 4;
        for (src, xs) in [
            (DType::F64, x64.clone()),
            (
                DType::F32,
                x32.iter().map(|&x| x as f64).collect::<Vec<_>>(),
            ),
        ] {
            let rows = xs.len() / cols;
            let xs = &xs[..rows * cols];
            // stored as [cols, rows] so that the [rows, cols] view is transposed
            let mut stored = vec![0.0f64; xs.len()];
            for r in 0..rows {
                for c in 0..cols {
                    stored[c * rows + r] = xs[r * cols + c];
                }
            }
            let t = Tensor::from_vec(stored, [cols, rows])?.to_dtype(src)?.t()?;
            assert!(!t.is_contiguous());
            let got = t.to_dtype(dtype)?.to_f64_vec()?;
            for (i, (&x, &g)) in xs.iter().zip(&got).enumerate() {
                let want = fmt.reference(x);
                let w = if dtype == DType::F16 {
                    f16::from_bits(want).to_f64()
                } else {
                    bf16::from_bits(want).to_f64()
                };
                assert!(
                    g == w || (g.is_nan() && w.is_nan()),
                    "{src:?} -> {dtype:?} at {i}: {x:e} gave {g:e}, want {w:e}"
                );
                assert_eq!(g.is_sign_negative(), w.is_sign_negative(), "sign of {x:e}");
            }
        }
    }
    Ok(())
}
