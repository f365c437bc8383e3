//! Element types and PyTorch's type-promotion lattice.

use half::{bf16, f16};
use std::fmt;

/// The element type of a tensor.
///
/// ```
/// use stride_core::DType;
/// assert_eq!(DType::BF16.size_in_bytes(), 2);
/// assert_eq!(DType::promote(DType::I32, DType::F16), DType::F16);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    U8,
    I8,
    I32,
    U32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

/// The three promotion categories, in increasing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    Bool,
    Integer,
    Float,
}

impl DType {
    /// Every dtype, in a fixed order (used by the registry and the CLI).
    pub const ALL: [DType; 10] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::U32,
        DType::U8,
        DType::I8,
        DType::Bool,
    ];
    /// The floating dtypes.
    pub const FLOATS: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];
    /// The integer dtypes (bool excluded).
    pub const INTS: [DType; 5] = [DType::I64, DType::I32, DType::U32, DType::U8, DType::I8];

    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }
    pub fn is_float(self) -> bool {
        self.category() == Category::Float
    }
    /// Integer dtypes, bool excluded (as PyTorch's `is_integral(include_bool=False)`).
    pub fn is_int(self) -> bool {
        self.category() == Category::Integer
    }
    pub fn is_signed(self) -> bool {
        !matches!(self, DType::Bool | DType::U8 | DType::U32)
    }
    pub fn category(self) -> Category {
        match self {
            DType::Bool => Category::Bool,
            DType::U8 | DType::I8 | DType::I32 | DType::U32 | DType::I64 => Category::Integer,
            _ => Category::Float,
        }
    }
    /// Short lower-case name, as PyTorch prints it (`float32`, `int64`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I32 => "int32",
            DType::U32 => "uint32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }
    /// Parses `f32`, `float32`, `bf16`, `i64`, `bool`, …
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "bool" => DType::Bool,
            "u8" | "uint8" => DType::U8,
            "i8" | "int8" => DType::I8,
            "i32" | "int32" | "int" => DType::I32,
            "u32" | "uint32" => DType::U32,
            "i64" | "int64" | "long" => DType::I64,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            _ => return None,
        })
    }

    /// PyTorch's `promote_types`: the smallest dtype both can be represented in.
    ///
    /// Deviation: stride has no int16, so `u8 ⊔ i8` is `i32` (PyTorch: int16).
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a.category(), b.category()) {
            (Category::Bool, _) => return b,
            (_, Category::Bool) => return a,
            (Category::Float, Category::Integer) => return a,
            (Category::Integer, Category::Float) => return b,
            _ => {}
        }
        if a.is_float() {
            // both float, different
            return match (a, b) {
                (F64, _) | (_, F64) => F64,
                (F32, _) | (_, F32) => F32,
                _ => F32, // f16 ⊔ bf16
            };
        }
        // both integers, different
        let (sa, sb) = (a.is_signed(), b.is_signed());
        let (wa, wb) = (a.size_in_bytes(), b.size_in_bytes());
        if sa == sb {
            return if wa >= wb { a } else { b };
        }
        let (signed, unsigned) = if sa { (a, b) } else { (b, a) };
        if signed.size_in_bytes() > unsigned.size_in_bytes() {
            signed
        } else {
            // need a signed type wider than the unsigned one
            match unsigned {
                U8 => I32, // PyTorch: int16, which stride lacks
                _ => I64,
            }
        }
    }

    /// Whether a result of dtype `from` may be written into an output of dtype `to` by an
    /// in-place or `_out` op (PyTorch's `can_cast`): never float → integer/bool, never
    /// integer → bool.
    pub fn can_cast(from: DType, to: DType) -> bool {
        from.category() <= to.category()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that is the element of a stride dtype.
///
/// Conversions go through `i64` for integers and `f64` for floats, so no integer loses bits
/// (`i64 → f64` rounds as PyTorch's cast does).
pub trait Element:
    Copy + Send + Sync + PartialEq + PartialOrd + fmt::Debug + Default + 'static
{
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn to_i64(self) -> i64;
    fn from_f64(v: f64) -> Self;
    fn from_i64(v: i64) -> Self;
    fn from_bool(v: bool) -> Self;
    /// `self != 0`, the truth value used by logical ops and `to_dtype(Bool)`.
    fn is_nonzero(self) -> bool;

    /// The cast every copy between dtypes uses.
    #[inline(always)]
    fn cast<D: Element>(self) -> D {
        match Self::DTYPE.category() {
            Category::Float => D::from_f64(self.to_f64()),
            Category::Integer => D::from_i64(self.to_i64()),
            Category::Bool => D::from_bool(self.is_nonzero()),
        }
    }
}

macro_rules! int_element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                // Truncates toward zero; saturates out of range, NaN → 0 (PyTorch: undefined).
                v as $t
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t // wraps, as PyTorch's integer casts do
            }
            #[inline(always)]
            fn from_bool(v: bool) -> Self {
                v as $t
            }
            #[inline(always)]
            fn is_nonzero(self) -> bool {
                self != 0
            }
        }
    };
}
int_element!(u8, U8);
int_element!(i8, I8);
int_element!(i32, I32);
int_element!(u32, U32);
int_element!(i64, I64);

macro_rules! float_element {
    ($t:ty, $d:ident, $from64:expr, $to64:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                $to64(self)
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                $to64(self) as i64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                $from64(v)
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                $from64(v as f64)
            }
            #[inline(always)]
            fn from_bool(v: bool) -> Self {
                $from64(v as u8 as f64)
            }
            #[inline(always)]
            fn is_nonzero(self) -> bool {
                $to64(self) != 0.0
            }
        }
    };
}
float_element!(f64, F64, |v: f64| v, |v: f64| v);
float_element!(f32, F32, |v: f64| v as f32, |v: f32| v as f64);
// Correctly rounded from all 64 bits (`half`'s own f64 conversions are not: see half_round).
float_element!(f16, F16, crate::half_round::f64_to_f16, |v: f16| v.to_f64());
float_element!(bf16, BF16, crate::half_round::f64_to_bf16, |v: bf16| v
    .to_f64());

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    #[inline(always)]
    fn from_bool(v: bool) -> Self {
        v
    }
    #[inline(always)]
    fn is_nonzero(self) -> bool {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn promotion_table_matches_pytorch() {
        let cases = [
            (Bool, I64, I64),
            (U8, I8, I32), // PyTorch: int16 (stride has none)
            (U8, I32, I32),
            (U32, I32, I64),
            (U32, I64, I64),
            (I8, I64, I64),
            (I64, F16, F16),
            (F16, BF16, F32),
            (F16, F32, F32),
            (BF16, F64, F64),
            (Bool, F16, F16),
            (U32, U8, U32),
        ];
        for (a, b, r) in cases {
            assert_eq!(DType::promote(a, b), r, "{a} ⊔ {b}");
            assert_eq!(DType::promote(b, a), r, "{b} ⊔ {a}");
        }
    }

    #[test]
    fn f16_bf16_round_to_nearest_even() {
        // 1 + 2^-11 is exactly halfway between 1 and the next f16; ties to even → 1.
        assert_eq!(
            crate::half_round::f64_to_f16(1.0 + 2f64.powi(-11)).to_f64(),
            1.0
        );
        // 1 + 3·2^-11 is halfway between 1+2^-10 and 1+2^-9; ties to even → 1+2^-9.
        assert_eq!(
            crate::half_round::f64_to_f16(1.0 + 3.0 * 2f64.powi(-11)).to_f64(),
            1.0 + 2f64.powi(-9)
        );
        assert_eq!(
            crate::half_round::f64_to_bf16(1.0 + 2f64.powi(-8)).to_f64(),
            1.0
        );
        assert_eq!(
            crate::half_round::f64_to_bf16(1.0 + 3.0 * 2f64.powi(-8)).to_f64(),
            1.0 + 2f64.powi(-6)
        );
    }

    #[test]
    fn casts_keep_integer_bits() {
        let big: i64 = (1 << 60) + 1;
        assert_eq!(big.cast::<i64>(), big);
        assert_eq!((-1i64).cast::<u8>(), 255u8);
        assert_eq!(2.7f32.cast::<i32>(), 2);
        assert_eq!((-2.7f64).cast::<i64>(), -2);
        assert!(0.5f32.cast::<bool>());
        assert_eq!(true.cast::<f32>(), 1.0);
    }
}
