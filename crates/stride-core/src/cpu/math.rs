//! Scalar math shared by the CPU kernels: how each dtype computes.
//!
//! Floats compute in their "op math" type: f64 in f64, f32/f16/bf16 in f32 (rounded once, on
//! store), as PyTorch's CPU kernels do. Integers compute in their own type with wrapping
//! arithmetic (PyTorch's behaviour on overflow).

pub(crate) use crate::backend::common::float::{max_nan, min_nan, FloatElem, Real};
use crate::Element;

/// Integer arithmetic with PyTorch's semantics (wrapping; Python-style floor division and
/// remainder; shifts past the width give 0, or −1 for a negative value shifted right).
pub(crate) trait IntElem: Element + Ord {
    fn w_add(self, o: Self) -> Self;
    fn w_sub(self, o: Self) -> Self;
    fn w_mul(self, o: Self) -> Self;
    fn w_neg(self) -> Self;
    fn w_abs(self) -> Self;
    fn signum_(self) -> Self;
    fn is_zero(self) -> bool;
    fn is_negative(self) -> bool;
    /// floor(a / b); b ≠ 0 (checked by the caller).
    fn floor_div(self, b: Self) -> Self;
    /// a − b·floor(a / b); b ≠ 0.
    fn py_rem(self, b: Self) -> Self;
    /// a^b for b ≥ 0, wrapping.
    fn w_pow(self, b: Self) -> Self;
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn shl_(self, o: Self) -> Self;
    fn shr_(self, o: Self) -> Self;
}

macro_rules! int_elem {
    ($t:ty, signed: $signed:expr) => {
        impl IntElem for $t {
            #[inline(always)]
            fn w_add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn w_sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn w_mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn w_neg(self) -> Self {
                self.wrapping_neg()
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn w_abs(self) -> Self {
                if self < 0 as $t {
                    self.wrapping_neg()
                } else {
                    self
                }
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn signum_(self) -> Self {
                if self > 0 as $t {
                    1
                } else if self < 0 as $t {
                    (0 as $t).wrapping_sub(1)
                } else {
                    0
                }
            }
            #[inline(always)]
            fn is_zero(self) -> bool {
                self == 0
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn is_negative(self) -> bool {
                self < 0 as $t
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn floor_div(self, b: Self) -> Self {
                let q = self.wrapping_div(b);
                if $signed && (self.wrapping_rem(b) != 0) && ((self < 0 as $t) != (b < 0 as $t)) {
                    q.wrapping_sub(1)
                } else {
                    q
                }
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn py_rem(self, b: Self) -> Self {
                let r = self.wrapping_rem(b);
                if $signed && r != 0 && ((r < 0 as $t) != (b < 0 as $t)) {
                    r.wrapping_add(b)
                } else {
                    r
                }
            }
            #[inline(always)]
            fn w_pow(self, b: Self) -> Self {
                let mut e = b as u64;
                let mut base = self;
                let mut acc: $t = 1;
                while e > 0 {
                    if e & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            #[inline(always)]
            fn and(self, o: Self) -> Self {
                self & o
            }
            #[inline(always)]
            fn or(self, o: Self) -> Self {
                self | o
            }
            #[inline(always)]
            fn xor(self, o: Self) -> Self {
                self ^ o
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn shl_(self, o: Self) -> Self {
                if o < 0 as $t || (o as u64) >= Self::BITS as u64 {
                    0
                } else {
                    self << (o as u32)
                }
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn shr_(self, o: Self) -> Self {
                if o < 0 as $t || (o as u64) >= Self::BITS as u64 {
                    if self < 0 as $t {
                        (0 as $t).wrapping_sub(1)
                    } else {
                        0
                    }
                } else {
                    self >> (o as u32)
                }
            }
        }
    };
}
int_elem!(i8, signed: true);
int_elem!(u8, signed: false);
int_elem!(i32, signed: true);
int_elem!(u32, signed: false);
int_elem!(i64, signed: true);

/// PyTorch's float floor division (`div_floor_floating`): exact for representable quotients.
#[inline(always)]
pub(crate) fn floor_div_real<F: Real>(a: F, b: F) -> F {
    if b == F::zero() {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != F::zero() && ((b < F::zero()) != (m < F::zero())) {
        div = div - F::one();
    }
    if div == F::zero() {
        return F::zero().copysign(a / b);
    }
    let mut fd = div.floor();
    if div - fd > F::c(0.5) {
        fd = fd + F::one();
    }
    fd
}

/// Python-style float remainder: the result has the sign of the divisor.
#[inline(always)]
pub(crate) fn remainder_real<F: Real>(a: F, b: F) -> F {
    let m = a % b;
    if m != F::zero() && ((b < F::zero()) != (m < F::zero())) {
        m + b
    } else {
        m
    }
}

/// `s + w·(e − s)`, PyTorch's form: from the nearer end, exact at both.
#[inline(always)]
pub(crate) fn lerp<F: Real>(s: F, e: F, w: F) -> F {
    let d = e - s;
    if w.abs() < F::c(0.5) {
        s + w * d
    } else {
        e - d * (F::one() - w)
    }
}

/// The unary float functions, in the compute type.
#[inline(always)]
pub(crate) fn sigmoid<F: Real>(x: F) -> F {
    F::one() / (F::one() + (-x).exp())
}
#[inline(always)]
pub(crate) fn gelu_erf<F: Real>(x: F) -> F {
    F::c(0.5) * x * (F::one() + (x * F::c(std::f64::consts::FRAC_1_SQRT_2)).erf())
}
#[inline(always)]
pub(crate) fn gelu_tanh<F: Real>(x: F) -> F {
    let k = F::c((2.0 / std::f64::consts::PI).sqrt());
    F::c(0.5) * x * (F::one() + (k * (x + F::c(0.044715) * x * x * x)).tanh())
}
#[inline(always)]
pub(crate) fn softplus<F: Real>(x: F) -> F {
    // PyTorch's defaults: beta = 1, threshold = 20
    if x > F::c(20.0) {
        x
    } else {
        x.exp().ln_1p()
    }
}
#[inline(always)]
pub(crate) fn relu<F: Real>(x: F) -> F {
    if x.is_nan() || x > F::zero() {
        x
    } else {
        F::zero()
    }
}
#[inline(always)]
pub(crate) fn sign<F: Real>(x: F) -> F {
    if x.is_nan() {
        x
    } else if x > F::zero() {
        F::one()
    } else if x < F::zero() {
        -F::one()
    } else {
        F::zero()
    }
}
