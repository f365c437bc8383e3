//! `gradcheck` and `gradgradcheck`: analytic gradients against central finite differences,
//! in f64, perturbing each input element *in place through its layout* — so a gradient that
//! is only right for contiguous inputs fails here.

use super::functional::{grad, GradOptions};
use crate::{DType, Error, MemoryFormat, Result, Tensor};

/// Tolerances and step of [`gradcheck`].
///
/// An analytic entry `a = ∂y_j/∂x_i` passes when the central difference
/// `n = (f(x+ε) − f(x−ε)) / 2ε` satisfies
///
/// ```text
/// |n − a| ≤ atol + rtol·|n| + rounding · u · (|f(x+ε)_j| + |f(x−ε)_j|) / 2ε,   u = 2⁻⁵³
/// ```
///
/// which is the error bound of the central difference in f64, term by term:
/// - **truncation**: `n − f′(x) = ε²/6 · f‴(ξ)`. With `ε = 10⁻⁶` that is `1.7·10⁻¹³ ·
///   |f‴|`, a relative error `ε²/6 · |f‴/f′|`; `rtol = 10⁻⁷` leaves room for `|f‴/f′|` up
///   to `6·10⁵` (`log` at 0.3: 22; `1/x` at 0.1: 600);
/// - **rounding**: each evaluation of `f` is off by at most `k·u·|f|` for a composition of
///   `k` well-conditioned roundings, and the difference divides that by `2ε`: with `k =
///   rounding = 64` and `|f| ≈ 1` this is `64 · 1.1·10⁻¹⁶ / 10⁻⁶ ≈ 7·10⁻⁹` absolute — the
///   `10⁻⁸`–`10⁻⁹` central differences achieve on smooth functions;
/// - `atol = 10⁻¹⁰` covers entries whose value and function are both near zero.
///
/// The analytic side's own rounding (`k·u·|a|` ≈ 10⁻¹⁴ relative) is negligible beside these.
/// The old defaults (PyTorch's `atol 10⁻⁵, rtol 10⁻³`) passed a gradient off by 0.1 %.
#[derive(Debug, Clone, Copy)]
pub struct GradcheckOptions {
    pub eps: f64,
    pub atol: f64,
    pub rtol: f64,
    /// `k` of the rounding term above (roundings per evaluation of `f`, relative to `|f|`).
    pub rounding: f64,
}
impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions {
            eps: 1e-6,
            atol: 1e-10,
            rtol: 1e-7,
            rounding: 64.0,
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
                let rounding = opts.rounding * f64::EPSILON / 2.0
                    * (plus[j].abs() + minus[j].abs())
                    / (2.0 * opts.eps);
                let tol = opts.atol + opts.rtol * num.abs() + rounding;
                if !((num - ana).abs() <= tol) && !(num.is_nan() && ana.is_nan()) {
                    return Err(Error::invalid(
                        "gradcheck",
                        format!(
                            "Jacobian mismatch for input {k} (shape {:?}, strides {:?}) element {i}, output element {j}: numerical {num:.12e}, analytical {ana:.12e} (difference {:.3e}, tolerance {tol:.3e})",
                            x.shape(),
                            x.stride(),
                            (num - ana).abs()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// How many random projections [`gradgradcheck`] checks.
pub const GRADGRAD_PROJECTIONS: usize = 3;

/// `n` values in `[-1, -0.25] ∪ [0.25, 1]` from a fixed seed (xorshift; away from 0 so no
/// direction is ignored).
fn projection(n: usize, seed: u64) -> Vec<f64> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ seed.wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
            let m = 0.25 + 0.75 * (2.0 * u - 1.0).abs();
            if u < 0.5 {
                -m
            } else {
                m
            }
        })
        .collect()
}

/// Checks second derivatives: for each of [`GRADGRAD_PROJECTIONS`] random projections `v` of
/// the output (fixed seeds, so failures reproduce), [`gradcheck`] of the *whole* vector
/// `(inputs, v) ↦ ∂⟨f(inputs), v⟩/∂inputs` (every input's gradient, flattened and
/// concatenated) against finite differences in the inputs and in `v`. So every entry of the
/// Hessian-vector product `H·v`, and the vector-Jacobian product's dependence on `v`, is
/// compared — not one scalar summary of them.
pub fn gradgradcheck(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    opts: GradcheckOptions,
) -> Result<()> {
    let y = {
        let _g = super::enable_grad();
        f(inputs)?
    };
    for p in 0..GRADGRAD_PROJECTIONS {
        let v = Tensor::from_vec(projection(y.numel(), p as u64), y.shape().to_vec())?
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
            let flat: Vec<Tensor> = gs
                .into_iter()
                .flatten()
                .map(|g| g.reshape(&[-1]))
                .collect::<Result<_>>()?;
            if flat.is_empty() {
                return Err(Error::invalid("gradgradcheck", "no input requires grad"));
            }
            let refs: Vec<&Tensor> = flat.iter().collect();
            Tensor::cat(&refs, 0)
        };
        gradcheck(g, &all, opts).map_err(|e| {
            Error::invalid(
                "gradgradcheck",
                format!("projection {p} of {GRADGRAD_PROJECTIONS}: {e}"),
            )
        })?;
    }
    Ok(())
}
