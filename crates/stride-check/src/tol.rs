//! Tolerances: per dtype, against the f64 reference. Integer and bool results are exact.
//!
//! The reference computes on the inputs *after* they were rounded to their dtype, and its
//! result is rounded to the op's result dtype before comparing, so the tolerance only has to
//! cover the kernel's arithmetic (f16/bf16 compute in f32 and round once on store).

use stride_core::DType;

/// `|got − want| ≤ atol + rtol·|want|`; NaN matches NaN, infinities match exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tol {
    pub atol: f64,
    pub rtol: f64,
}

impl Tol {
    pub const EXACT: Tol = Tol {
        atol: 0.0,
        rtol: 0.0,
    };

    /// The default tolerance for results of dtype `d`.
    pub fn default_for(d: DType) -> Tol {
        match d {
            DType::F64 => Tol {
                atol: 1e-12,
                rtol: 1e-12,
            },
            DType::F32 => Tol {
                atol: 1e-5,
                rtol: 1.3e-6,
            },
            DType::F16 => Tol {
                atol: 1e-3,
                rtol: 1e-3,
            },
            DType::BF16 => Tol {
                atol: 1e-2,
                rtol: 8e-3,
            },
            _ => Tol::EXACT,
        }
    }
    /// Scales a float tolerance (for ops whose kernels compound rounding, e.g. gelu).
    pub fn scaled(self, k: f64) -> Tol {
        Tol {
            atol: self.atol * k,
            rtol: self.rtol * k,
        }
    }
    /// The looser of two tolerances.
    pub fn max(self, o: Tol) -> Tol {
        Tol {
            atol: self.atol.max(o.atol),
            rtol: self.rtol.max(o.rtol),
        }
    }
    pub fn close(&self, got: f64, want: f64) -> bool {
        if want.is_nan() || got.is_nan() {
            return want.is_nan() && got.is_nan();
        }
        if want.is_infinite() || got.is_infinite() {
            return got == want;
        }
        (got - want).abs() <= self.atol + self.rtol * want.abs()
    }
}

/// The default tolerance function of registry entries.
pub fn default_tol(d: DType) -> Tol {
    Tol::default_for(d)
}

// ---------------------------------------------------------------------------------------
// Tolerances from error bounds (issue #22, item 3).
//
// A fixed per-dtype tolerance scaled by √n accepts gross errors (an f16 sum that drops its
// last element, a bf16 sum returning 0 at n ≈ 1000), so reductions, matrix products and
// their relatives instead get a per-element bound computed by their reference
// ([`crate::reference::RefOut::with_acc_error`]):
//
//     |got − exact| ≤ acc_i + ½ ulp_out(|exact| + acc_i)
//
// where `acc_i` bounds the error of the computation in the accumulation dtype (f32 for
// f32/f16/bf16 results, f64 for f64; see [`acc_unit`]) before the final rounding to the
// result dtype, and `½ ulp_out` is that final rounding. For a sum of n terms in any order
// (recursive, pairwise, blocked, SIMD lanes) every term passes through at most n − 1
// roundings, so `|ŝ − s| ≤ γ_{n−1} Σ|terms|` with `γ_k = k·u / (1 − k·u)` (Higham, Accuracy
// and Stability of Numerical Algorithms, §4.2 and Lemma 3.1): c = 1 with n − 1 roundings,
// the smallest constant that holds for every summation order; pairwise summation would give
// ⌈log₂ n⌉ instead of n − 1, but the kernels are free to choose their order.
// ---------------------------------------------------------------------------------------

/// The unit roundoff of the accumulator of results of dtype `d`: half types accumulate in
/// f32 (DESIGN.md: "Half precision stores in f16/bf16 and accumulates in f32"), f32 in f32
/// (2⁻²⁴), f64 in f64 (2⁻⁵³). 0 for integers (exact).
pub fn acc_unit(d: DType) -> f64 {
    match d {
        DType::F64 => 2f64.powi(-53),
        DType::F32 | DType::F16 | DType::BF16 => 2f64.powi(-24),
        _ => 0.0,
    }
}

/// `γ_k = k·u / (1 − k·u)`: the bound on the relative error of k roundings (Higham, Lemma
/// 3.1); infinite when `k·u ≥ 1` (no bound holds).
pub fn gamma(k: f64, u: f64) -> f64 {
    let ku = k * u;
    if ku >= 1.0 {
        f64::INFINITY
    } else {
        ku / (1.0 - ku)
    }
}

/// One unit in the last place of dtype `d` at magnitude `m` (the spacing of `d`'s values
/// in the binade of `m`; subnormal spacing below the smallest normal). 0 for non-floats.
pub fn ulp(m: f64, d: DType) -> f64 {
    let (mant, emin) = match d {
        DType::F64 => (52, -1022),
        DType::F32 => (23, -126),
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        _ => return 0.0,
    };
    let m = m.abs();
    let e = if m == 0.0 || !m.is_finite() {
        emin
    } else {
        (m.log2().floor() as i32).max(emin)
    };
    // log2 may be off by one at binade edges: take the larger candidate (never too small)
    let e = if m >= 2f64.powi(e + 1) { e + 1 } else { e };
    2f64.powi(e - mant)
}

/// The exponent of the least significant set bit over `values` (finite, non-zero ones):
/// every value is a multiple of `2^lsb`. `None` when there is no such value.
pub fn lsb_exp(values: impl IntoIterator<Item = f64>) -> Option<i32> {
    let mut best: Option<i32> = None;
    for v in values {
        if !v.is_finite() || v == 0.0 {
            continue;
        }
        let bits = v.abs().to_bits();
        let exp = ((bits >> 52) & 0x7ff) as i32;
        let frac = bits & ((1u64 << 52) - 1);
        let (mant, e) = if exp == 0 {
            (frac, -1074)
        } else {
            (frac | (1u64 << 52), exp - 1075)
        };
        let lsb = e + mant.trailing_zeros() as i32;
        best = Some(best.map_or(lsb, |b: i32| b.min(lsb)));
    }
    best
}

/// The accumulation error of a sum of `n` terms whose magnitudes add up to `abs_sum`, in
/// the accumulator of results of dtype `d`, in any summation order:
/// - 0 when every term is a multiple of `2^grid` and `abs_sum < 2^(grid + p)` (p = 24 for
///   f32, 53 for f64): every partial sum, in any order, is then a multiple of `2^grid`
///   below `2^(grid + p)` — representable — so no addition rounds (the "known exact answer"
///   sample sets rely on this: an f16 accumulator rounds them, an f32 one does not);
/// - else `γ_{n−1} · abs_sum` (see the module note).
pub fn sum_error(n: usize, abs_sum: f64, grid: Option<i32>, d: DType) -> f64 {
    let u = acc_unit(d);
    if u == 0.0 || n <= 1 || abs_sum == 0.0 {
        return 0.0;
    }
    let p = if d == DType::F64 { 53 } else { 24 };
    if let Some(g) = grid {
        if abs_sum < 2f64.powi(g + p) {
            return 0.0;
        }
    }
    gamma((n - 1) as f64, u) * abs_sum
}

/// The bound on `|got − exact|` for a result of dtype `result` written into a `dest`
/// tensor, given the accumulation error `acc` (see the module note): `acc` plus half an ulp
/// of `result` (the final rounding), plus half an ulp of `dest` when the destination is
/// another float dtype (a second rounding on store). When `acc` is 0 and `exact` is
/// representable in `result`, the result must be exactly `exact` (no rounding happens).
///
/// For f64 results the reference is itself computed in f64, by the same kind of loop the
/// bound analyses (at most as many roundings of the same terms), so the "exact" value is off
/// by up to `acc` too: the kernel and the reference may differ by `2·acc` (f32/f16/bf16
/// results: the reference's f64 error is 2⁻²⁹ of theirs, nothing).
pub fn bound(exact: f64, acc: f64, result: DType, dest: DType) -> f64 {
    let acc = if result == DType::F64 { 2.0 * acc } else { acc };
    let m = exact.abs() + acc;
    let exact_repr = acc == 0.0 && crate::host::store(exact, result) == exact;
    let mut b = acc;
    if acc > 0.0 {
        // gradual underflow: an intermediate in the subnormal range is rounded absolutely,
        // by up to half its spacing, per operation (Higham §2.1, the `η` term of the model);
        // two such roundings (softmax: the exp and the quotient) reach the result
        let acc_dtype = if result == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        b += ulp(0.0, acc_dtype);
    }
    if !exact_repr {
        b += 0.5 * ulp(m, result);
    }
    if dest != result && dest.is_float() && crate::host::store(exact, dest) != exact {
        b += 0.5 * ulp(m, dest);
    }
    b
}

#[cfg(test)]
mod bound_tests {
    use super::*;

    #[test]
    fn ulps_of_each_dtype() {
        assert_eq!(ulp(1.0, DType::F16), 2f64.powi(-10));
        assert_eq!(ulp(1.999, DType::F16), 2f64.powi(-10));
        assert_eq!(ulp(2.0, DType::F16), 2f64.powi(-9));
        assert_eq!(ulp(70.0, DType::F16), 2f64.powi(-4));
        assert_eq!(ulp(1.0, DType::BF16), 2f64.powi(-7));
        assert_eq!(ulp(1.0, DType::F32), 2f64.powi(-23));
        assert_eq!(ulp(0.0, DType::F16), 2f64.powi(-24));
        assert_eq!(ulp(1e-40, DType::F32), 2f64.powi(-149));
        assert_eq!(ulp(1e-30, DType::F32), 2f64.powi(-100 - 23));
    }

    #[test]
    fn lsb_and_exact_sums() {
        assert_eq!(lsb_exp([0.125, 3.0, 0.0]), Some(-3));
        assert_eq!(lsb_exp([1024.0]), Some(10));
        assert_eq!(lsb_exp([f64::NAN]), None);
        // 513 multiples of 1/8 adding up to < 2^21: exact in f32, whatever the order
        assert_eq!(sum_error(513, 1000.0, Some(-3), DType::F16), 0.0);
        // 1/3 is no multiple of a coarse grid: γ_{n−1} Σ|x|
        let e = sum_error(3, 1.0, lsb_exp([1.0 / 3.0]), DType::F32);
        assert!(e > 2.0 * 2f64.powi(-24) && e < 2.1 * 2f64.powi(-24), "{e}");
    }

    #[test]
    fn the_final_rounding_is_half_an_ulp_and_nothing_when_exact() {
        assert_eq!(bound(70.0625, 0.0, DType::F16, DType::F16), 0.0);
        // 70.0625 − 70 is a whole f16 step: refused
        assert!((70.0625f64 - 70.0).abs() > bound(70.0625, 0.0, DType::F16, DType::F16));
        assert_eq!(
            bound(1.0 / 3.0, 0.0, DType::F16, DType::F16),
            2f64.powi(-13)
        );
    }
}
