//! Host scalars: the `2.0` in `x * 2.0`. They take part in type promotion as PyTorch's
//! "wrapped numbers": a scalar never widens a tensor of its own category
//! (`f16_tensor * 2.0` stays f16, `i32_tensor + 1` stays i32), but a float scalar makes an
//! integer tensor's result float (the default float dtype, f32).

use crate::{DType, Element};

/// A host number that can be an operand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Scalar {
    /// The dtype a scalar of this kind counts as in promotion.
    pub fn dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::I64,
            Scalar::Float(_) => DType::F32,
        }
    }
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }
    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            Scalar::Float(f) => f as i64,
        }
    }
    /// This value as an element of type `T` (with the cast rules of `to_dtype`).
    pub fn to_elem<T: Element>(self) -> T {
        match self {
            Scalar::Bool(b) => T::from_bool(b),
            Scalar::Int(i) => T::from_i64(i),
            Scalar::Float(f) => T::from_f64(f),
        }
    }
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident as $c:ty),*) => { $(impl From<$t> for Scalar { fn from(x: $t) -> Self { Scalar::$v(x as $c) } })* };
}
from_scalar!(f64 => Float as f64, f32 => Float as f64, i64 => Int as i64, i32 => Int as i64, u32 => Int as i64,
    u8 => Int as i64, i8 => Int as i64, usize => Int as i64);
impl From<bool> for Scalar {
    fn from(b: bool) -> Self {
        Scalar::Bool(b)
    }
}
impl From<half::f16> for Scalar {
    fn from(x: half::f16) -> Self {
        Scalar::Float(x.to_f64())
    }
}
impl From<half::bf16> for Scalar {
    fn from(x: half::bf16) -> Self {
        Scalar::Float(x.to_f64())
    }
}
