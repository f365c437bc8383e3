//! How each dtype computes: the "op math" type of a float storage type (f64 in f64; f32, f16
//! and bf16 in f32, rounded once on store, as PyTorch's kernels do), NaN-propagating
//! extrema, and the element arithmetic of the reducing scatters. Every backend follows these
//! rules; the CPU computes with them directly and the CUDA backend takes constants from them.

use crate::Element;
use half::{bf16, f16};
use num_traits::Float;

/// A float type kernels compute in (f32 or f64).
pub(crate) trait Real: Float + Send + Sync + 'static + std::fmt::Debug {
    fn c(v: f64) -> Self;
    fn erf(self) -> Self;
    fn erfc(self) -> Self;
    fn round_even(self) -> Self;
}
impl Real for f64 {
    #[inline(always)]
    fn c(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn erf(self) -> Self {
        libm::erf(self)
    }
    #[inline(always)]
    fn erfc(self) -> Self {
        libm::erfc(self)
    }
    #[inline(always)]
    fn round_even(self) -> Self {
        self.round_ties_even()
    }
}
impl Real for f32 {
    #[inline(always)]
    fn c(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn erf(self) -> Self {
        libm::erff(self)
    }
    #[inline(always)]
    fn erfc(self) -> Self {
        libm::erfcf(self)
    }
    #[inline(always)]
    fn round_even(self) -> Self {
        self.round_ties_even()
    }
}

/// A float storage type and the type it computes in.
pub(crate) trait FloatElem: Element {
    type C: Real;
    fn load(self) -> Self::C;
    fn store(c: Self::C) -> Self;
}
impl FloatElem for f64 {
    type C = f64;
    #[inline(always)]
    fn load(self) -> f64 {
        self
    }
    #[inline(always)]
    fn store(c: f64) -> Self {
        c
    }
}
impl FloatElem for f32 {
    type C = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
    #[inline(always)]
    fn store(c: f32) -> Self {
        c
    }
}
impl FloatElem for f16 {
    type C = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(c: f32) -> Self {
        f16::from_f32(c)
    }
}
impl FloatElem for bf16 {
    type C = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(c: f32) -> Self {
        bf16::from_f32(c)
    }
}

/// NaN-propagating max/min (PyTorch's `maximum`/`minimum`).
#[inline(always)]
pub(crate) fn max_nan<F: Real>(a: F, b: F) -> F {
    if a.is_nan() || b.is_nan() {
        F::nan()
    } else if a > b {
        a
    } else {
        b
    }
}
#[inline(always)]
pub(crate) fn min_nan<F: Real>(a: F, b: F) -> F {
    if a.is_nan() || b.is_nan() {
        F::nan()
    } else if a < b {
        a
    } else {
        b
    }
}

/// Element arithmetic of the reducing scatters (PyTorch's: floats compute in their op-math
/// type and round once per step, integers wrap, max/min propagate NaN).
pub(crate) trait Accum: Element {
    fn acc_add(self, o: Self) -> Self;
    fn acc_mul(self, o: Self) -> Self;
    fn acc_max(self, o: Self) -> Self;
    fn acc_min(self, o: Self) -> Self;
    /// The identity of max (−∞ for floats).
    fn lowest() -> Self;
    /// The identity of min (+∞ for floats).
    fn highest() -> Self;
}
macro_rules! accum_float {
    ($($t:ty),*) => {$(
        impl Accum for $t {
            #[inline(always)]
            fn acc_add(self, o: Self) -> Self { Self::store(self.load() + o.load()) }
            #[inline(always)]
            fn acc_mul(self, o: Self) -> Self { Self::store(self.load() * o.load()) }
            #[inline(always)]
            fn acc_max(self, o: Self) -> Self { Self::store(max_nan(self.load(), o.load())) }
            #[inline(always)]
            fn acc_min(self, o: Self) -> Self { Self::store(min_nan(self.load(), o.load())) }
            fn lowest() -> Self { Self::from_f64(f64::NEG_INFINITY) }
            fn highest() -> Self { Self::from_f64(f64::INFINITY) }
        }
    )*};
}
accum_float!(f64, f32, f16, bf16);
macro_rules! accum_int {
    ($($t:ty),*) => {$(
        impl Accum for $t {
            #[inline(always)]
            fn acc_add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)]
            fn acc_mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)]
            fn acc_max(self, o: Self) -> Self { self.max(o) }
            #[inline(always)]
            fn acc_min(self, o: Self) -> Self { self.min(o) }
            fn lowest() -> Self { <$t>::MIN }
            fn highest() -> Self { <$t>::MAX }
        }
    )*};
}
accum_int!(i64, i32, u32, u8, i8);
