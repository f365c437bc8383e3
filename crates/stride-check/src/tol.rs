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
