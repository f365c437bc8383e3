//! PyTorch's `result_type`: the dtype an op computes in, decided once, in the frontend.
//!
//! Operands fall into three priority groups: tensors with at least one dim, 0-d tensors, and
//! host scalars ("wrapped numbers"). A lower-priority group can only raise the result's
//! *category* (bool < integer < float), never its width within a category:
//! `f16 tensor + f64 0-d tensor → f16`, `i32 tensor + 2.5 → f32`, `u8 tensor + 1000 → u8`.

use crate::{Category, DType, Scalar, Tensor};

/// One operand as promotion sees it.
#[derive(Clone, Copy)]
pub enum Operand<'a> {
    Tensor(&'a Tensor),
    Scalar(Scalar),
}

impl<'a> From<&'a Tensor> for Operand<'a> {
    fn from(t: &'a Tensor) -> Self {
        Operand::Tensor(t)
    }
}
macro_rules! operand_from {
    ($($t:ty),*) => { $(impl From<$t> for Operand<'_> { fn from(x: $t) -> Self { Operand::Scalar(x.into()) } })* };
}
operand_from!(
    f64,
    f32,
    i64,
    i32,
    u32,
    u8,
    i8,
    bool,
    Scalar,
    half::f16,
    half::bf16
);

fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) => {
            if h.is_float() {
                Some(h)
            } else if h == DType::Bool || l.is_float() {
                Some(DType::promote(h, l))
            } else {
                Some(h)
            }
        }
    }
}

/// The promoted dtype of a set of operands (PyTorch's `torch.result_type`).
///
/// ```
/// use stride_core::{result_type, DType, Device, Operand, Tensor};
/// let h = Tensor::zeros([2], DType::F16, &Device::Cpu).unwrap();
/// assert_eq!(result_type(&[(&h).into(), 2.0.into()]), DType::F16);
/// let i = Tensor::zeros([2], DType::I32, &Device::Cpu).unwrap();
/// assert_eq!(result_type(&[(&i).into(), 2.5.into()]), DType::F32);
/// ```
pub fn result_type(ops: &[Operand]) -> DType {
    let (mut dim, mut zero, mut wrapped) = (None::<DType>, None::<DType>, None::<DType>);
    let up =
        |slot: &mut Option<DType>, d: DType| *slot = Some(slot.map_or(d, |s| DType::promote(s, d)));
    for op in ops {
        match op {
            Operand::Tensor(t) if t.dim() > 0 => up(&mut dim, t.dtype()),
            Operand::Tensor(t) => up(&mut zero, t.dtype()),
            Operand::Scalar(s) => up(&mut wrapped, s.dtype()),
        }
    }
    combine(dim, combine(zero, wrapped)).unwrap_or(DType::F32)
}

/// The category of a dtype (re-exported for the registry).
pub fn category(d: DType) -> Category {
    d.category()
}
