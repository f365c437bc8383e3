//! `rms_norm` and `layer_norm` (PyTorch's `F.rms_norm`, `F.layer_norm`): the fused kernels of
//! [`Tensor::rms_norm`] and [`Tensor::layer_norm`] (one pass forward and backward; f16/bf16
//! compute in f32 and round once).

use stride_core::{Result, Tensor};

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
