//! `rms_norm` and `layer_norm` (PyTorch's `F.rms_norm`, `F.layer_norm`): the fused kernels of
//! [`Tensor::rms_norm`] and [`Tensor::layer_norm`] (one pass forward and backward; f16/bf16
//! compute in f32 and round once); and `add_rms_norm`, a residual add fused into the RMS
//! norm's kernel ([`Tensor::add_rms_norm`]).

use stride_core::{DType, Result, Tensor};

/// `x / √(mean(x²) + eps) · weight` over the trailing `normalized_shape` dims, as PyTorch's
/// `F.rms_norm`; `eps = None` is the input dtype's machine epsilon (PyTorch's default). The
/// weight, if any, has shape `normalized_shape` and `x`'s device; the result has the
/// promoted dtype of `x` and the weight.
///
/// ```
/// use stride_core::{DType, Device, Tensor};
/// use stride_nn::functional::rms_norm;
/// let x = Tensor::from_vec(vec![3.0f32, 4.0], [1, 2])?;
/// let y = rms_norm(&x, &[2], None, Some(0.0))?;     // rms = √12.5
/// let r = 12.5f32.sqrt();
/// assert_eq!(y.to_vec::<f32>()?, vec![3.0 / r, 4.0 / r]);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn rms_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<Tensor> {
    // eps defaults to the input dtype's epsilon (PyTorch), though the math runs in f32
    let eps = eps.unwrap_or_else(|| crate::finfo_eps(x.dtype()));
    x.rms_norm(normalized_shape, weight, eps)
}

/// `(h, rms_norm(h, normalized_shape, weight, eps))` with `h = x + residual`, in one kernel:
/// a transformer block's residual add and the next norm (vLLM's and llama.cpp's
/// `fused_add_rms_norm`). `eps = None` is the input dtype's machine epsilon, as for
/// [`rms_norm`]. Both results equal `x.add(residual)` and [`rms_norm`] of it bit for bit, on
/// every device and in every float dtype (f16/bf16: the norm reads `h` rounded to the dtype,
/// as the two ops would). `x` and `residual` must have the same shape (no broadcasting), a
/// float dtype and one device. Differentiable with respect to `x`, `residual` and `weight`.
///
/// ```
/// use stride_core::Tensor;
/// use stride_nn::functional::{add_rms_norm, rms_norm};
/// let x = Tensor::from_vec(vec![1.0f32, 3.0, -2.0, 0.5], [2, 2])?;
/// let attn_out = Tensor::from_vec(vec![2.0f32, 1.0, 0.5, 0.25], [2, 2])?;
/// let w = Tensor::from_vec(vec![1.0f32, 2.0], [2])?;
/// let (h, m) = add_rms_norm(&x, &attn_out, &[2], Some(&w), None)?;
/// assert_eq!(h.to_vec::<f32>()?, vec![3.0, 4.0, -1.5, 0.75]);
/// let composed = rms_norm(&x.add(&attn_out)?, &[2], Some(&w), None)?;
/// assert_eq!(m.to_vec::<f32>()?, composed.to_vec::<f32>()?);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn add_rms_norm(
    x: &Tensor,
    residual: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<(Tensor, Tensor)> {
    // the default eps of rms_norm of the sum, whose dtype is x's (equal dtypes) or promoted
    let eps = eps.unwrap_or_else(|| crate::finfo_eps(DType::promote(x.dtype(), residual.dtype())));
    x.add_rms_norm(residual, normalized_shape, weight, eps)
}

/// `(x − mean) / √(var + eps) · weight + bias` over the trailing `normalized_shape` dims
/// (biased variance), as PyTorch's `F.layer_norm`. Weight and bias, if any, have shape
/// `normalized_shape` and `x`'s device; the result has the promoted dtype of all three.
pub fn layer_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    x.layer_norm(normalized_shape, weight, bias, eps)
}
