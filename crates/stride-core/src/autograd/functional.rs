//! The functional API of MLX/JAX style: gradients returned, `.grad()` untouched.

use super::engine::{run_backward, BackwardOptions};
use crate::{Error, Result, Tensor};

/// Options of [`grad`].
#[derive(Debug, Clone, Copy, Default)]
pub struct GradOptions {
    pub retain_graph: bool,
    /// Record the backward pass so the returned gradients are differentiable (second
    /// derivatives, Hessian-vector products, gradient penalties).
    pub create_graph: bool,
    /// Return `None` for inputs the outputs don't depend on (else that is an error).
    pub allow_unused: bool,
}

/// d(sum of `outputs` · `grad_outputs`) / d(`inputs`) without touching any `.grad()`.
/// `grad_outputs` may be omitted for one-element outputs (ones).
///
/// ```
/// use stride_core::{autograd, DType, Device, Tensor};
/// let x = Tensor::scalar(2.0, DType::F64, &Device::Cpu)?.requires_grad_(true)?;
/// let y = x.mul(&x)?.mul(&x)?;                          // x³
/// let opts = autograd::GradOptions { create_graph: true, ..Default::default() };
/// let dy = autograd::grad(&[&y], &[&x], None, opts)?[0].clone().unwrap();
/// assert_eq!(dy.item::<f64>()?, 12.0);                 // 3x²
/// let d2y = autograd::grad(&[&dy], &[&x], None, Default::default())?[0].clone().unwrap();
/// assert_eq!(d2y.item::<f64>()?, 12.0);                // 6x
/// assert!(x.grad().is_none());
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn grad(
    outputs: &[&Tensor],
    inputs: &[&Tensor],
    grad_outputs: Option<&[&Tensor]>,
    opts: GradOptions,
) -> Result<Vec<Option<Tensor>>> {
    let mut roots = Vec::with_capacity(outputs.len());
    for (i, o) in outputs.iter().enumerate() {
        let g = match grad_outputs {
            Some(gs) => gs
                .get(i)
                .ok_or_else(|| Error::invalid("grad", format!("{} outputs but {} grad_outputs", outputs.len(), gs.len())))?
                .to_owned()
                .clone(),
            None if o.numel() == 1 => o.ones_like(crate::MemoryFormat::Contiguous)?,
            None => {
                return Err(Error::invalid(
                    "grad",
                    format!("grad_outputs must be given for output {i} of shape {:?} (only one-element outputs get ones implicitly)", o.shape()),
                ))
            }
        };
        roots.push(((*o).clone(), g));
    }
    for (i, x) in inputs.iter().enumerate() {
        if !x.requires_grad() {
            return Err(Error::invalid(
                "grad",
                format!("input {i} does not require grad"),
            ));
        }
    }
    let caps: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    let bopts = BackwardOptions {
        retain_graph: opts.retain_graph,
        create_graph: opts.create_graph,
    };
    let out = run_backward(&roots, bopts, Some(&caps))?;
    if !opts.allow_unused {
        if let Some(i) = out.iter().position(|g| g.is_none()) {
            return Err(Error::invalid(
                "grad",
                format!("input {i} was not used to compute the outputs; pass allow_unused = true to get None for it"),
            ));
        }
    }
    Ok(out)
}

/// Calls `f` on fresh leaves sharing `inputs`' data and returns its (one-element) value and
/// the gradients of that value with respect to each input.
///
/// ```
/// use stride_core::{autograd, DType, Device, Tensor};
/// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3])?;
/// let (v, g) = autograd::value_and_grad(|xs| xs[0].mul(&xs[0])?.sum(), &[x])?;
/// assert_eq!(v.item::<f64>()?, 14.0);
/// assert_eq!(g[0].to_vec::<f64>()?, vec![2.0, 4.0, 6.0]);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn value_and_grad(
    f: impl FnOnce(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
) -> Result<(Tensor, Vec<Tensor>)> {
    let leaves: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.detach().requires_grad_(true))
        .collect::<Result<_>>()?;
    let value = {
        let _g = super::enable_grad();
        f(&leaves)?
    };
    let refs: Vec<&Tensor> = leaves.iter().collect();
    let grads = grad(
        &[&value],
        &refs,
        None,
        GradOptions {
            allow_unused: true,
            ..Default::default()
        },
    )?;
    let grads = grads
        .into_iter()
        .zip(&leaves)
        .map(|(g, l)| match g {
            Some(g) => Ok(g),
            None => l.zeros_like(crate::MemoryFormat::Preserve),
        })
        .collect::<Result<_>>()?;
    Ok((value.detach(), grads))
}
