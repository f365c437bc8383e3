//! `linear`, PyTorch's `torch.nn.functional.linear`.

use stride_core::autocast::autocast_inputs;
use stride_core::{Result, Tensor};

/// `x · weightᵀ + bias`: `x` is `(…, in)`, `weight` `(out, in)`, `bias` `(out,)`. The
/// [`crate::Linear`] module's forward. Under [`stride_core::autocast::autocast`] all three
/// run in the region's dtype (the bias too, as in PyTorch), so the result is bf16/f16.
///
/// ```
/// use stride_core::Tensor;
/// use stride_nn::functional::linear;
/// let x = Tensor::from_vec(vec![1.0f32, 2.0], [1, 2])?;
/// let w = Tensor::from_vec(vec![1.0f32, 1.0, 0.0, 1.0], [2, 2])?;
/// let b = Tensor::from_vec(vec![0.5f32, 0.0], [2])?;
/// assert_eq!(linear(&x, &w, Some(&b))?.to_vec::<f32>()?, vec![3.5, 2.0]);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let mut ins = vec![x, weight];
    ins.extend(bias);
    if let Some(c) = autocast_inputs("linear", &ins)? {
        let t = &c.tensors;
        return linear(&t[0], &t[1], bias.and(t.get(2)));
    }
    let y = x.matmul(&weight.t()?)?;
    match bias {
        Some(b) => y.add(b),
        None => Ok(y),
    }
}
