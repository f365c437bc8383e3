//! `gradcheck` and `gradgradcheck`: analytic gradients against central finite differences,
//! in f64, perturbing each input element *in place through its layout* — so a gradient that
//! is only right for contiguous inputs fails here.

use super::functional::{grad, GradOptions};
use crate::{DType, Error, MemoryFormat, Result, Tensor};

/// Tolerances and step of [`gradcheck`] (PyTorch's defaults).
#[derive(Debug, Clone, Copy)]
pub struct GradcheckOptions {
    pub eps: f64,
    pub atol: f64,
    pub rtol: f64,
}
impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-3,
        }
    }
}

/// The 0-d view of logical element `i` of `t`.
fn element(t: &Tensor, mut i: usize) -> Result<Tensor> {
    let mut idx = vec![0; t.dim()];
    for d in (0..t.dim()).rev() {
        idx[d] = i % t.shape()[d];
        i /= t.shape()[d];
    }
    let mut v = t.clone();
    for &k in &idx {
        v = v.select(0, k as i64)?;
    }
    Ok(v)
}

fn one_hot(like: &Tensor, i: usize) -> Result<Tensor> {
    let z = like.zeros_like(MemoryFormat::Contiguous)?;
    element(&z, i)?.fill_(1.0)?;
    Ok(z)
}

/// Checks d`f`/d`inputs` (every input that requires grad; they must be f64) against finite
/// differences. `Ok(())` or an error naming the input, the output element, and both values.
///
/// ```
/// use stride_core::{autograd::{gradcheck, GradcheckOptions}, Tensor};
/// let x = Tensor::from_vec(vec![0.3f64, -1.2, 2.0, 0.7], [2, 2])?.t()?.requires_grad_(true)?;
/// gradcheck(|xs| xs[0].tanh()?.mul(&xs[0]), &[x], GradcheckOptions::default())?;
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn gradcheck(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    opts: GradcheckOptions,
) -> Result<()> {
    for (k, x) in inputs.iter().enumerate() {
        if x.requires_grad() && x.dtype() != DType::F64 {
            return Err(Error::invalid(
                "gradcheck",
                format!("input {k} is {}; gradcheck needs f64 inputs", x.dtype()),
            ));
        }
    }
    let diff: Vec<usize> = (0..inputs.len())
        .filter(|&k| inputs[k].requires_grad())
        .collect();
    let y = {
        let _g = super::enable_grad();
        f(inputs)?
    };
    if y.dtype() != DType::F64 {
        return Err(Error::invalid(
            "gradcheck",
            format!("the function returned {}; it must return f64", y.dtype()),
        ));
    }
    let n_out = y.numel();
    // analytic Jacobian, one output element at a time
    let mut analytic: Vec<Vec<Vec<f64>>> = vec![vec![]; inputs.len()]; // [input][out j] -> d y_j / d x
    for j in 0..n_out {
        let v = one_hot(&y, j)?;
        let refs: Vec<&Tensor> = diff.iter().map(|&k| &inputs[k]).collect();
        let opts = GradOptions {
            retain_graph: true,
            allow_unused: true,
            ..Default::default()
        };
        let gs = grad(&[&y], &refs, Some(&[&v]), opts)?;
        for (g, &k) in gs.into_iter().zip(&diff) {
            let row = match g {
                Some(g) => g.to_f64_vec()?,
                None => vec![0.0; inputs[k].numel()],
            };
            analytic[k].push(row);
        }
    }
    // numerical Jacobian: perturb each element in place, through the input's own layout (the
    // writes bypass autograd; f itself runs with grad enabled, as gradgradcheck's f needs it)
    let write = |t: &Tensor, v: f64| -> Result<()> {
        let _ng = super::no_grad();
        t.fill_(v).map(|_| ())
    };
    for &k in &diff {
        let x = &inputs[k];
        let original = {
            let _ng = super::no_grad();
            x.clone_tensor()?
        };
        for i in 0..x.numel() {
            let e = element(&x.detach(), i)?;
            let x0 = e.item::<f64>()?;
            write(&e, x0 + opts.eps)?;
            let plus = f(inputs)?.to_f64_vec()?;
            write(&e, x0 - opts.eps)?;
            let minus = f(inputs)?.to_f64_vec()?;
            {
                let _ng = super::no_grad();
                x.detach().copy_(&original)?;
            }
            for j in 0..n_out {
                let num = (plus[j] - minus[j]) / (2.0 * opts.eps);
                let ana = analytic[k][j][i];
                if !((num - ana).abs() <= opts.atol + opts.rtol * num.abs())
                    && !(num.is_nan() && ana.is_nan())
                {
                    return Err(Error::invalid(
                        "gradcheck",
                        format!(
                            "Jacobian mismatch for input {k} (shape {:?}, strides {:?}) element {i}, output element {j}: numerical {num:.6e}, analytical {ana:.6e}",
                            x.shape(),
                            x.stride()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Checks second derivatives: gradcheck of `(inputs, v) ↦ ⟨∂f/∂inputs, v⟩`'s gradient, with a
/// fixed random-ish `v` (the values 0.5, −0.25, … cycled).
pub fn gradgradcheck(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    opts: GradcheckOptions,
) -> Result<()> {
    let y = {
        let _g = super::enable_grad();
        f(inputs)?
    };
    let vals: Vec<f64> = (0..y.numel())
        .map(|i| [0.5, -0.25, 1.5, -1.0, 0.75][i % 5])
        .collect();
    let v = Tensor::from_vec(vals, y.shape().to_vec())?
        .to_device(&y.device())?
        .requires_grad_(true)?;
    let n = inputs.len();
    let mut all: Vec<Tensor> = inputs.to_vec();
    all.push(v);
    let g = |xs: &[Tensor]| -> Result<Tensor> {
        let y = f(&xs[..n])?;
        let refs: Vec<&Tensor> = xs[..n].iter().filter(|t| t.requires_grad()).collect();
        let gopts = GradOptions {
            create_graph: true,
            allow_unused: true,
            ..Default::default()
        };
        let gs = grad(&[&y], &refs, Some(&[&xs[n]]), gopts)?;
        // concatenate the flattened gradients into one output (sum of squares keeps it cheap)
        let mut acc: Option<Tensor> = None;
        for g in gs.into_iter().flatten() {
            let s = g.mul(&g)?.sum()?;
            acc = Some(match acc {
                None => s,
                Some(a) => a.add(&s)?,
            });
        }
        acc.ok_or_else(|| Error::invalid("gradgradcheck", "no input requires grad"))
    };
    gradcheck(g, &all, opts)
}
