//! Gradient clipping, PyTorch's `clip_grad_norm_` and `clip_grad_value_`.

use crate::invalid;
use crate::module::Parameter;
use stride_core::autograd::no_grad;
use stride_core::{DType, Device, Result, Tensor};

/// Scales all gradients together so that their total `norm_type`-norm is at most `max_norm`
/// and returns the total norm before clipping as a 0-d tensor of the gradients' dtype on their
/// device, as PyTorch does: the norm of the per-gradient norms, then every gradient multiplied
/// by `min(max_norm / (total + 1e-6), 1)`. Nothing waits for the device: the norm stays there
/// until the caller reads it. `norm_type = f64::INFINITY` is the max-norm. With
/// `error_if_nonfinite`, a NaN/inf total is an error and no gradient is changed; that check
/// reads the norm (a host wait, as in PyTorch). Without gradients the result is a CPU f32 zero.
///
/// ```
/// use stride_nn::{optim::clip_grad_norm_, Parameter};
/// use stride_core::Tensor;
/// let p = Parameter::new(Tensor::from_vec(vec![0.0f64, 0.0], [2])?)?;
/// p.tensor().set_grad(Some(Tensor::from_vec(vec![3.0f64, 4.0], [2])?))?;
/// let total = clip_grad_norm_(&[p.clone()], 1.0, 2.0, false)?;
/// assert_eq!(total.item::<f64>()?, 5.0);
/// let g = p.grad().unwrap().to_vec::<f64>()?;
/// assert!((g[0] - 0.6).abs() < 1e-6 && (g[1] - 0.8).abs() < 1e-6);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn clip_grad_norm_(
    params: &[Parameter],
    max_norm: f64,
    norm_type: f64,
    error_if_nonfinite: bool,
) -> Result<Tensor> {
    let _ng = no_grad();
    let grads: Vec<Tensor> = params.iter().filter_map(|p| p.grad()).collect();
    if grads.is_empty() {
        return Tensor::scalar(0.0, DType::F32, &Device::Cpu);
    }
    let dtype = grads[0].dtype();
    let norms: Vec<Tensor> = grads
        .iter()
        .map(|g| g.norm_all(norm_type)?.to_dtype(dtype))
        .collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = norms.iter().collect();
    let total = Tensor::stack(&refs, 0)?.norm_all(norm_type)?;
    if error_if_nonfinite {
        let total_f = total.item_f64()?;
        if !total_f.is_finite() {
            return Err(invalid(
                "clip_grad_norm_",
                format!("the total norm of order {norm_type} for gradients from `parameters` is non-finite ({total_f}), so it cannot be clipped; set error_if_nonfinite = false to clip anyway"),
            ));
        }
    }
    let coef = total
        .add(1e-6)?
        .reciprocal()?
        .mul(max_norm)?
        .clamp_max(1.0)?;
    for g in &grads {
        g.mul_(&coef.to_dtype(g.dtype())?)?;
    }
    Ok(total)
}

/// Clamps every gradient element into `[−clip_value, clip_value]`.
pub fn clip_grad_value_(params: &[Parameter], clip_value: f64) -> Result<()> {
    if !(clip_value >= 0.0) {
        return Err(invalid(
            "clip_grad_value_",
            format!("clip_value must be non-negative, got {clip_value}"),
        ));
    }
    let _ng = no_grad();
    for g in params.iter().filter_map(|p| p.grad()) {
        g.clamp_(-clip_value, clip_value)?;
    }
    Ok(())
}
