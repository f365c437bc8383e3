//! Per-element error bounds for entries whose tolerance depends on the inputs (the composed
//! layers and losses of [`crate::registry::nn`]): an entry with [`OpInfo::bound`] gives, for
//! each output element, the largest `|got − want|` its error analysis allows, and the runner
//! compares against that instead of the dtype's `Tol`.
//!
//! The bound of one output `y` whose exact value the reference computes is
//!
//! ```text
//! ulp_out(want) + k · u_out · M + c · n · u_acc · S
//! ```
//!
//! - `ulp_out(want)`: the kernel rounds its result to the output dtype once (≤ ½ ulp) and the
//!   runner rounds the reference to the same dtype (≤ ½ ulp);
//! - `k · u_out · M`: the composition stores `k` elementwise intermediates in the output
//!   dtype (stride composes layers and losses from ops; half precision *stores* in f16/bf16),
//!   each off by ≤ `u_out` relative to its own value; `M` is the magnitude those
//!   intermediates carry into `y` (stated per entry);
//! - `c · n · u_acc · S`: a reduction of `n` terms accumulated in `u_acc` — f32 for
//!   f16/bf16/f32 (DESIGN: "half precision accumulates in f32"), f64 for f64 — is off by at
//!   most `γ_n · Σ|terms| ≈ n · u_acc · Σ|terms|` (recursive summation; pairwise/blocked
//!   orders do better); `S` is `Σ|terms|` propagated to `y`, `c = 2` covers the two chained
//!   reductions of a statistic (a mean, then a variance or a normaliser).
//!
//! A reduction whose statistic is stored in the half dtype (LayerNorm's mean in f16) is not
//! covered: its error is `u_half · |μ|`, amplified by `1/σ`, which no term here allows.

use crate::reference::unravel;
use crate::report::Reason;
use stride_core::DType;

/// `c` of the reduction term.
pub const C_REDUCTION: f64 = 2.0;

/// Unit roundoff `2^-p` of a float dtype (`p` = significand bits incl. the implicit one).
pub fn unit_roundoff(d: DType) -> f64 {
    match d {
        DType::F64 => f64::EPSILON / 2.0,
        DType::F32 => f32::EPSILON as f64 / 2.0,
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 0.0,
    }
}

/// Unit roundoff of the accumulator a reduction over `d` must use (f32 for half types).
pub fn acc_roundoff(d: DType) -> f64 {
    match d {
        DType::F64 => f64::EPSILON / 2.0,
        _ => f32::EPSILON as f64 / 2.0,
    }
}

/// The spacing of dtype `d`'s floats at `v` (the subnormal spacing near zero); 0 at an
/// infinity or NaN, where no bound applies. [`crate::tol::ulp`] elsewhere.
pub fn ulp(v: f64, d: DType) -> f64 {
    if v.is_finite() {
        crate::tol::ulp(v, d)
    } else {
        0.0
    }
}

/// The magnitudes of one output element's error bound (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Terms {
    /// The exact value.
    pub value: f64,
    /// Magnitude carried by the elementwise intermediates.
    pub m: f64,
    /// Reduction length.
    pub n: f64,
    /// `Σ|terms|` of the reduction(s), propagated to this output.
    pub s: f64,
}

/// The absolute bound of one element whose result has dtype `d`, with `k` stores.
pub fn bound(t: &Terms, want: f64, d: DType, k: f64) -> f64 {
    ulp(want, d) + k * unit_roundoff(d) * t.m + C_REDUCTION * t.n * acc_roundoff(d) * t.s
}

/// Compares `got` with `want` element by element against `bound` (NaN matches NaN,
/// infinities match exactly).
pub fn within(got: &[f64], want: &[f64], bound: &[f64], shape: &[usize]) -> Result<(), Reason> {
    if bound.len() != want.len() {
        return Err(Reason::Harness {
            message: format!(
                "the entry gave {} bounds for {} elements",
                bound.len(),
                want.len()
            ),
        });
    }
    let (mut bad, mut worst, mut worst_excess) = (0usize, 0usize, -1.0f64);
    let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
    for (i, ((&g, &w), &b)) in got.iter().zip(want).zip(bound).enumerate() {
        let ok = if w.is_nan() || g.is_nan() {
            w.is_nan() && g.is_nan()
        } else if w.is_infinite() || g.is_infinite() {
            g == w
        } else {
            let a = (g - w).abs();
            max_abs = max_abs.max(a);
            if w != 0.0 {
                max_rel = max_rel.max(a / w.abs());
            }
            a <= b
        };
        if ok {
            continue;
        }
        bad += 1;
        let excess = if g.is_finite() && w.is_finite() {
            (g - w).abs() - b
        } else {
            f64::INFINITY
        };
        if excess > worst_excess {
            worst_excess = excess;
            worst = i;
        }
    }
    if bad == 0 {
        return Ok(());
    }
    let mut index = vec![0; shape.len()];
    unravel(worst, shape, &mut index);
    Err(Reason::WrongValues {
        mismatches: bad,
        total: got.len(),
        index,
        got: got[worst],
        want: want[worst],
        max_abs_err: max_abs,
        max_rel_err: max_rel,
        atol: bound[worst],
        rtol: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulps() {
        assert_eq!(ulp(1.0, DType::F16), 2f64.powi(-10));
        assert_eq!(ulp(100.0, DType::F16), 0.0625);
        assert_eq!(ulp(100.0, DType::BF16), 0.5);
        assert_eq!(ulp(1.5, DType::F32), f32::EPSILON as f64);
        assert_eq!(ulp(0.0, DType::F16), 2f64.powi(-24));
    }

    #[test]
    fn within_catches_one_ulp_too_many() {
        let want = [1.0, 2.0];
        let b = [ulp(1.0, DType::F16), ulp(2.0, DType::F16)];
        assert!(within(&[1.0 + b[0], 2.0], &want, &b, &[2]).is_ok());
        assert!(within(&[1.0 + 2.0 * b[0], 2.0], &want, &b, &[2]).is_err());
        assert!(within(&[f64::NAN, 2.0], &[f64::NAN, 2.0], &b, &[2]).is_ok());
        assert!(within(&[0.0, 2.0], &[f64::NAN, 2.0], &b, &[2]).is_err());
    }
}
