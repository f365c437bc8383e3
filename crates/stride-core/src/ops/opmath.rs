//! Half-precision inputs of composed ops compute in f32 and round once (PyTorch's "opmath").
//!
//! The primitives already accumulate f16/bf16 in f32 (`cpu/reduce.rs`, `cpu/cumulative.rs`,
//! the CPU matmul, the CUDA folds and cuBLAS with `CUBLAS_COMPUTE_32F`). A *composed* op —
//! one written as several primitives, such as LayerNorm's `(x − mean) / √(var + eps)` or a
//! loss — would still round every intermediate result to the half type: LayerNorm's mean of
//! inputs near 100 rounded to f16 returned -1.99 where the answer is -0.995. PyTorch computes
//! such ops in f32 and rounds the result once; [`in_compute_dtype`] is the one place stride
//! does the same. f32 and f64 inputs pass through untouched (the same tensors, not copies),
//! so their results are unchanged; the casts are `to_dtype`, which records its backward, so
//! gradients flow through them to the half inputs.

use super::reduce::compute_dtype;
use crate::{DType, Result, Tensor};

/// Runs the composed op `f` on `inputs` with every f16/bf16 input converted to f32, and
/// converts its result back once to the dtype the op gives on the original inputs (the
/// promotion of the float inputs' dtypes: f16 for f16 inputs, f32 for f16 with f32, …).
/// Non-float inputs (class indices, masks) are passed unchanged, and a result whose dtype is
/// not the f32 of an upcast (an index, a bool) is returned as it is.
///
/// ```
/// use stride_core::{in_compute_dtype, DType, Tensor};
/// // one f16 step is 1/16 near 100: the mean 100.03125 is no f16 (it rounds to 100, which
/// // would centre x[0] at 0); in f32 it is exact and x[0] − mean = -1/32 rounds once.
/// let x = Tensor::from_vec(vec![100.0f32, 100.0625], [2])?.to_dtype(DType::F16)?;
/// let y = in_compute_dtype(&[&x], |t| t[0].sub(&t[0].mean()?))?;
/// assert_eq!(y.dtype(), DType::F16);
/// assert_eq!(y.to_dtype(DType::F64)?.to_vec::<f64>()?, vec![-0.03125, 0.03125]);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn in_compute_dtype(
    inputs: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Result<Tensor> {
    let want = inputs
        .iter()
        .map(|t| t.dtype())
        .filter(|d| d.is_float())
        .reduce(DType::promote);
    let upcast: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.to_dtype(compute_dtype(t.dtype())))
        .collect::<Result<_>>()?;
    let out = f(&upcast)?;
    match want {
        Some(w) if w != out.dtype() && out.dtype() == compute_dtype(w) => out.to_dtype(w),
        _ => Ok(out),
    }
}
