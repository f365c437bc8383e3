//! `Isa`: which implementation of the kernels runs, chosen once at run time.

use std::fmt;
use std::sync::OnceLock;

/// An implementation of the dot kernels.
///
/// Every implementation performs the same integer sums and the same `f32` operations in the
/// same order (see the crate documentation), so **all of them give the same bits**; the
/// choice only changes the speed. [`Isa::detect`] picks the fastest one this CPU has, unless
/// the environment variable `STRIDE_QUANT_SIMD=off` (read once per process) asks for the
/// portable one. Tests and benchmarks pass an `Isa` explicitly to
/// [`QMatrix::matmul_with`](crate::QMatrix::matmul_with).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Isa {
    /// Portable Rust, every platform.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C (Haswell and later).
    Avx2,
}

impl Isa {
    /// Every implementation this crate has, available here or not.
    pub const ALL: [Isa; 2] = [Isa::Scalar, Isa::Avx2];

    /// Whether this CPU can run `self`.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Avx2 => avx2_available(),
        }
    }

    /// The implementation [`QMatrix::matmul`](crate::QMatrix::matmul) uses: the fastest
    /// available one, or [`Isa::Scalar`] when `STRIDE_QUANT_SIMD` is `off` (or `0`,
    /// `false`, `scalar`). Decided once per process.
    pub fn detect() -> Isa {
        static CHOSEN: OnceLock<Isa> = OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let off = std::env::var("STRIDE_QUANT_SIMD")
                .map(|v| {
                    matches!(
                        v.trim().to_ascii_lowercase().as_str(),
                        "off" | "0" | "false" | "scalar"
                    )
                })
                .unwrap_or(false);
            if !off && Isa::Avx2.is_available() {
                Isa::Avx2
            } else {
                Isa::Scalar
            }
        })
    }

    /// Its name (`"scalar"`, `"avx2"`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_available() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_available() -> bool {
    false
}
