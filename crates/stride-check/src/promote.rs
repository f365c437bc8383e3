//! The registry's own statement of PyTorch's `result_type`, written independently of
//! `stride_core::result_type` so the two check each other. Only the pairwise lattice
//! (`DType::promote`, itself tested against PyTorch's table) is shared.
//!
//! Operands form three priority groups — tensors with dims, 0-d tensors, host scalars (a
//! float scalar counts as the default dtype f32, an int scalar as i64). A lower group only
//! matters when its *category* (bool < integer < float) is higher than the groups above it.

use stride_core::{Category, DType};

/// What promotion sees of one operand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgInfo {
    /// A tensor of this dtype and number of dims.
    Tensor { dtype: DType, ndim: usize },
    /// A host scalar, by kind: `Bool`, `I64` (integer) or `F32` (float).
    Scalar(DType),
}

fn cat(d: DType) -> Category {
    match d {
        DType::Bool => Category::Bool,
        d if d.is_float() => Category::Float,
        _ => Category::Integer,
    }
}

fn fold(ds: impl Iterator<Item = DType>) -> Option<DType> {
    ds.fold(None, |acc, d| Some(acc.map_or(d, |a| DType::promote(a, d))))
}

fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) if cat(l) > cat(h) => Some(DType::promote(h, l)),
        (h, _) => h,
    }
}

/// The dtype an op over these operands computes in (f32 when there are none).
pub fn result_type(args: &[ArgInfo]) -> DType {
    let dim = fold(args.iter().filter_map(|a| match a {
        ArgInfo::Tensor { dtype, ndim } if *ndim > 0 => Some(*dtype),
        _ => None,
    }));
    let zero = fold(args.iter().filter_map(|a| match a {
        ArgInfo::Tensor { dtype, ndim: 0 } => Some(*dtype),
        _ => None,
    }));
    let wrapped = fold(args.iter().filter_map(|a| match a {
        ArgInfo::Scalar(d) => Some(*d),
        _ => None,
    }));
    combine(dim, combine(zero, wrapped)).unwrap_or(DType::F32)
}

/// Whether a result of dtype `from` may be written into a tensor of dtype `to` (never to a
/// lower category).
pub fn can_cast(from: DType, to: DType) -> bool {
    cat(from) <= cat(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;
    fn t(d: DType) -> ArgInfo {
        ArgInfo::Tensor { dtype: d, ndim: 1 }
    }
    fn z(d: DType) -> ArgInfo {
        ArgInfo::Tensor { dtype: d, ndim: 0 }
    }
    #[test]
    fn pytorch_facts() {
        assert_eq!(result_type(&[t(F16), ArgInfo::Scalar(F32)]), F16);
        assert_eq!(result_type(&[t(I32), ArgInfo::Scalar(F32)]), F32);
        assert_eq!(result_type(&[t(U8), ArgInfo::Scalar(I64)]), U8);
        assert_eq!(result_type(&[t(Bool), ArgInfo::Scalar(I64)]), I64);
        assert_eq!(result_type(&[t(F16), z(F64)]), F16);
        assert_eq!(result_type(&[t(I32), z(F64)]), F64);
        assert_eq!(result_type(&[t(I8), z(I64)]), I8);
        assert_eq!(result_type(&[z(I8), z(I64)]), I64);
        assert_eq!(result_type(&[t(U8), t(I8)]), I32);
    }
}
