//! `rms_norm` and `layer_norm` (PyTorch's `F.rms_norm`, `F.layer_norm`): f16/bf16 inputs
//! compute in f32 (statistics, centring and scaling) and round once.

use stride_core::{in_compute_dtype, Error, Result, Tensor};

/// The dims `-k..-1` normalised over, after checking that `x` is float and ends with
/// `normalized`.
pub(crate) fn norm_dims(op: &'static str, x: &Tensor, normalized: &[usize]) -> Result<Vec<i64>> {
    // as PyTorch: normalisation takes float inputs (computing in f32 must not turn an integer
    // or bool input into a float result)
    if !x.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: x.dtype(),
            hint: "; normalisation layers take floating-point inputs (convert with to_dtype)"
                .into(),
        });
    }
    let k = normalized.len();
    if x.dim() < k || x.shape()[x.dim() - k..] != *normalized {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: normalized.to_vec(),
            why:
                "don't fit: the input's trailing dims (first) must equal normalized_shape (second)"
                    .into(),
        });
    }
    Ok((0..k as i64).map(|i| -(i + 1)).collect())
}

fn check_affine(
    op: &'static str,
    what: &str,
    x: &Tensor,
    t: Option<&Tensor>,
    normalized: &[usize],
) -> Result<()> {
    if let Some(t) = t {
        if t.shape() != normalized {
            return Err(Error::ShapeMismatch {
                op,
                lhs: t.shape().to_vec(),
                rhs: normalized.to_vec(),
                why: format!("don't fit: the {what} (first) must have normalized_shape (second)"),
            });
        }
        if t.device() != x.device() {
            return Err(Error::DeviceMismatch {
                op,
                a: x.device(),
                b: t.device(),
            });
        }
    }
    Ok(())
}

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
    rms_norm_as("rms_norm", x, normalized_shape, weight, eps)
}

/// [`rms_norm`] with errors naming `op` (the module's name when a module calls it).
pub(crate) fn rms_norm_as(
    op: &'static str,
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<Tensor> {
    let dims = norm_dims(op, x, normalized_shape)?;
    check_affine(op, "weight", x, weight, normalized_shape)?;
    // eps defaults to the input dtype's epsilon (PyTorch), though the math runs in f32
    let eps = eps.unwrap_or_else(|| crate::finfo_eps(x.dtype()));
    let mut inputs = vec![x];
    inputs.extend(weight);
    // f16/bf16 compute in f32 and round once: x² of an f16 above 256 overflows f16
    in_compute_dtype(&inputs, |t| {
        let x = &t[0];
        let ms = x.square()?.mean_dims(&dims, true)?;
        let y = x.mul(&ms.add(eps)?.rsqrt()?)?;
        match t.get(1) {
            Some(w) => y.mul(w),
            None => Ok(y),
        }
    })
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
    layer_norm_as("layer_norm", x, normalized_shape, weight, bias, eps)
}

/// [`layer_norm`] with errors naming `op`.
pub(crate) fn layer_norm_as(
    op: &'static str,
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let dims = norm_dims(op, x, normalized_shape)?;
    check_affine(op, "weight", x, weight, normalized_shape)?;
    check_affine(op, "bias", x, bias, normalized_shape)?;
    let mut inputs = vec![x];
    inputs.extend(weight.iter().chain(bias.iter()));
    // f16/bf16 compute in f32 and round once (mean, centring and scaling included)
    in_compute_dtype(&inputs, |t| {
        let x = &t[0];
        let mean = x.mean_dims(&dims, true)?;
        let var = x.var(&dims, 0.0, true)?;
        let mut y = x.sub(&mean)?.mul(&var.add(eps)?.rsqrt()?)?;
        let mut rest = t[1..].iter();
        if weight.is_some() {
            y = y.mul(rest.next().expect("weight passed"))?;
        }
        if bias.is_some() {
            y = y.add(rest.next().expect("bias passed"))?;
        }
        Ok(y)
    })
}
