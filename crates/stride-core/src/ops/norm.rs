//! Fused row normalisation: [`Tensor::rms_norm`] and [`Tensor::layer_norm`] (PyTorch's
//! `torch.rms_norm`, `torch.layer_norm`), one pass forward and one backward
//! (`backend/norm.rs`), with a differentiable composed backward for double backward; and
//! [`Tensor::add_rms_norm`], a transformer block's residual add fused into the norm's kernel
//! (vLLM's and llama.cpp's `fused_add_rms_norm`).

use crate::autocast::autocast_inputs;
use crate::autograd::formulas::elementwise::record_binary;
use crate::autograd::record::{needs_grad, record};
use crate::autograd::{is_grad_enabled, no_grad};
use crate::backend::norm::{self, stat_dtype, Norm, NormKind};
use crate::backend::{BinaryOp, View};
use crate::ops::output::alloc_result_for_overwrite;
use crate::promote::Operand;
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// `x / √(mean(x²) + eps) · weight` over the trailing `normalized_shape` dims, as
    /// PyTorch's `torch.rms_norm` (with an explicit `eps`). The weight, if any, has shape
    /// `normalized_shape` and `self`'s device; the result has the promoted dtype of `self` and
    /// the weight. f16/bf16 compute in f32 (the statistics, the scaling and the affine step)
    /// and round once. One kernel forward, one (plus a column sum for the weight's gradient)
    /// backward, on every device; any layout (a view that cannot be seen as rows is copied
    /// first, as PyTorch does).
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec(vec![3.0f32, 4.0], [1, 2])?;
    /// let y = x.rms_norm(&[2], None, 0.0)?;     // rms = √12.5
    /// let r = 12.5f32.sqrt();
    /// assert_eq!(y.to_vec::<f32>()?, vec![3.0 / r, 4.0 / r]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn rms_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        normalize(
            NormKind::Rms,
            self,
            None,
            normalized_shape,
            weight,
            None,
            eps,
        )
        .map(|(y, _)| y)
    }

    /// `(sum, normed)` with `sum = self + residual` and `normed = sum.rms_norm(normalized_shape,
    /// weight, eps)` in one kernel: a transformer block's `h = x + attn_out; m = rms_norm(h)`
    /// (vLLM's and llama.cpp's `fused_add_rms_norm`), half the launches of the two ops.
    ///
    /// The result is the composed ops' bit for bit, on every device and in every float
    /// dtype: the sum is rounded to the storage dtype as `add` rounds it, and the norm reads
    /// that rounded sum, summing in the order [`Tensor::rms_norm`]'s kernel would. `self` and
    /// `residual` must have the same shape (no broadcasting: `expand` the residual first),
    /// a float dtype and one device; a weight as for [`Tensor::rms_norm`]. Operands of
    /// different dtypes (a residual or weight in another float dtype) are promoted as `add`
    /// and `rms_norm` promote them and computed by those two ops. Differentiable with respect
    /// to `self`, `residual` and `weight`, through either result.
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 3.0], [1, 2])?;
    /// let r = Tensor::from_vec(vec![2.0f32, 1.0], [1, 2])?;
    /// let (h, y) = x.add_rms_norm(&r, &[2], None, 1e-6)?;
    /// assert_eq!(h.to_vec::<f32>()?, vec![3.0, 4.0]);
    /// let composed = x.add(&r)?.rms_norm(&[2], None, 1e-6)?;
    /// assert_eq!(y.to_vec::<f32>()?, composed.to_vec::<f32>()?);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn add_rms_norm(
        &self,
        residual: &Tensor,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        eps: f64,
    ) -> Result<(Tensor, Tensor)> {
        const OP: &str = "add_rms_norm";
        check(OP, self, normalized_shape, &[("weight", weight)])?;
        check_eps(OP, eps)?;
        if !residual.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: residual.dtype(),
                hint: "; normalisation takes a floating-point residual (convert with to_dtype)"
                    .into(),
            });
        }
        if residual.shape() != self.shape() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: residual.shape().to_vec(),
                why: "differ: the input (first) and the residual (second) must have the same \
                      shape (no broadcasting; expand the residual first, or use add then \
                      rms_norm)"
                    .into(),
            });
        }
        if residual.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op: OP,
                a: self.device(),
                b: residual.device(),
            });
        }
        let dtype = self.dtype();
        if residual.dtype() != dtype || weight.is_some_and(|w| w.dtype() != dtype) {
            // the kernel reads and writes one dtype; promotion is the two ops' to decide
            let sum = self.add(residual)?;
            let normed = sum.rms_norm(normalized_shape, weight, eps)?;
            return Ok((sum, normed));
        }
        let (y, sum) = normalize(
            NormKind::Rms,
            self,
            Some(residual),
            normalized_shape,
            weight,
            None,
            eps,
        )?;
        let sum =
            sum.ok_or_else(|| Error::invalid(OP, "internal error: no sum (please report)"))?;
        Ok((sum, y))
    }

    /// `(x − mean) / √(var + eps) · weight + bias` over the trailing `normalized_shape` dims
    /// (biased variance), as PyTorch's `torch.layer_norm`. Weight and bias, if any, have
    /// shape `normalized_shape` and `self`'s device; the result has the promoted dtype of all
    /// three. Computed as [`Tensor::rms_norm`] is (one pass, f32 for f16/bf16).
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 3.0], [1, 2])?;
    /// let y = x.layer_norm(&[2], None, None, 0.0)?;   // mean 2, variance 1
    /// assert_eq!(y.to_vec::<f32>()?, vec![-1.0, 1.0]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn layer_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        let mut ins = vec![self];
        ins.extend(weight);
        ins.extend(bias);
        if let Some(c) = autocast_inputs("layer_norm", &ins)? {
            let mut t = c.tensors.iter();
            let x = t.next().expect("the input comes first");
            let (w, b) = (weight.and(t.next()), bias.and(t.next()));
            return x.layer_norm(normalized_shape, w, b, eps);
        }
        normalize(
            NormKind::Layer,
            self,
            None,
            normalized_shape,
            weight,
            bias,
            eps,
        )
        .map(|(y, _)| y)
    }
}

fn check(
    op: &'static str,
    x: &Tensor,
    normalized: &[usize],
    affine: &[(&str, Option<&Tensor>)],
) -> Result<()> {
    // as PyTorch: normalisation takes float inputs (computing in f32 must not turn an integer
    // or bool input into a float result)
    for (what, t) in [("input", Some(x))].iter().chain(affine) {
        if let Some(t) = t {
            if !t.dtype().is_float() {
                return Err(Error::UnsupportedDType {
                    op,
                    dtype: t.dtype(),
                    hint: format!(
                        "; normalisation takes a floating-point {what} (convert with to_dtype)"
                    ),
                });
            }
        }
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
    for (what, t) in affine {
        let Some(t) = t else { continue };
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

fn check_eps(op: &'static str, eps: f64) -> Result<()> {
    if !eps.is_finite() || eps < 0.0 {
        return Err(Error::invalid(
            op,
            format!("eps must be a finite number ≥ 0, got {eps}"),
        ));
    }
    Ok(())
}

/// The normalisation of `x`, or with `residual` (checked by the caller: `x`'s shape, dtype
/// and device) of `x + residual`: `(y, the sum)`.
fn normalize(
    kind: NormKind,
    x: &Tensor,
    residual: Option<&Tensor>,
    normalized: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<(Tensor, Option<Tensor>)> {
    let op = norm::name(kind);
    check(op, x, normalized, &[("weight", weight), ("bias", bias)])?;
    check_eps(op, eps)?;
    let dtype = [Some(x), weight, bias]
        .into_iter()
        .flatten()
        .map(|t| t.dtype())
        .reduce(DType::promote)
        .expect("x is present");
    let cols: usize = normalized.iter().product();
    let rows = x.numel().checked_div(cols).unwrap_or(0);
    let rows_cols = [rows as i64, cols as i64];
    // with a residual: the addends as rows, and the sum laid as `add` lays it (like x), seen
    // as rows the way rms_norm of that sum would see it — a view, or (when its layout has no
    // rows view) row-major, the layout of the copy rms_norm would make — so the kernel takes
    // the path, and sums in the order, of the composed ops
    // every operand in the result dtype, x2 (x, or the sum) as rows and the affine operands
    // as one row (views where the layouts allow; exact widenings)
    let (x2, fused) = match residual {
        None => (x.to_dtype(dtype)?.reshape(&rows_cols)?, None),
        Some(r) => {
            let _g = no_grad();
            let device = x.device();
            let mut sum = alloc_result_for_overwrite(x.shape(), dtype, &device, Some(x))?;
            if sum.layout().view_strides(&[rows, cols]).is_none() {
                sum = alloc_result_for_overwrite(x.shape(), dtype, &device, None)?;
            }
            let addends = (x.reshape(&rows_cols)?, r.reshape(&rows_cols)?);
            (sum.view(&rows_cols)?, Some((addends, r, sum)))
        }
    };
    let line = |t: Option<&Tensor>| -> Result<Option<Tensor>> {
        t.map(|t| t.to_dtype(dtype)?.reshape(&[cols as i64]))
            .transpose()
    };
    let (w, b) = (line(weight)?, line(bias)?);
    let n = Norm {
        kind,
        eps,
        weight: w.is_some(),
        bias: b.is_some(),
        residual: fused.is_some(),
    };
    let (y, rstd, mean) = {
        let _g = no_grad();
        let device = x.device();
        let y = alloc_result_for_overwrite(&[rows, cols], dtype, &device, None)?;
        let rstd = alloc_result_for_overwrite(&[rows], stat_dtype(dtype), &device, None)?;
        let mean = match kind {
            NormKind::Layer => Some(alloc_result_for_overwrite(
                &[rows],
                stat_dtype(dtype),
                &device,
                None,
            )?),
            NormKind::Rms => None,
        };
        // with a residual the kernel reads the addends and writes the sum through x2
        let (first, res, sum) = match &fused {
            Some(((xa, ra), ..)) => (xa, Some(ra), Some(&x2)),
            None => (&x2, None, None),
        };
        let inputs: Vec<View> = [Some(first), res, w.as_ref(), b.as_ref()]
            .into_iter()
            .flatten()
            .map(Tensor::view_ref)
            .collect();
        let outputs: Vec<View> = [Some(&y), Some(&rstd), mean.as_ref(), sum]
            .into_iter()
            .flatten()
            .map(Tensor::view_ref)
            .collect();
        norm::norm(n, &inputs, &outputs)?;
        (y, rstd, mean)
    };
    // what was normalised, as rows: x, or the sum — recorded as `add`'s result first, so that
    // gradients reaching it (through the norm or directly) flow on to x and the residual
    let (x2, sum) = match fused {
        None => (x2, None),
        Some((_, r, sum)) => {
            record_binary(BinaryOp::Add, x, &Operand::Tensor(r), &sum)?;
            (sum.reshape(&rows_cols)?, Some(sum))
        }
    };
    let n = Norm {
        residual: false,
        ..n
    };
    let recorded: Vec<&Tensor> = [Some(&x2), w.as_ref(), b.as_ref()]
        .into_iter()
        .flatten()
        .collect();
    if needs_grad(&recorded) {
        let saved = Saved {
            n,
            x: x2.clone(),
            weight: w.clone(),
            rstd,
            mean,
        };
        let mut keep: Vec<(&Tensor, &'static str)> = vec![(&x2, "input")];
        keep.extend(w.as_ref().map(|w| (w, "weight")));
        let name = match kind {
            NormKind::Rms => "RmsNormBackward",
            NormKind::Layer => "LayerNormBackward",
        };
        record(name, &recorded, &[&y], &keep, move |g| {
            saved.backward(&g[0])
        })?;
    }
    let shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
    Ok((y.reshape(&shape)?, sum))
}

/// What the backward of one normalisation keeps.
struct Saved {
    n: Norm,
    x: Tensor,
    weight: Option<Tensor>,
    rstd: Tensor,
    mean: Option<Tensor>,
}

impl Saved {
    /// Gradients for `[x, weight?, bias?]` from `g` (the output's gradient, rows × cols).
    fn backward(&self, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        if is_grad_enabled() {
            // create_graph: a formula autograd can differentiate again
            return self.composed(g);
        }
        let (x, dtype, device) = (&self.x, self.x.dtype(), self.x.device());
        let cols = x.shape()[1];
        let dx = alloc_result_for_overwrite(x.shape(), dtype, &device, None)?;
        let dw = match self.n.weight {
            true => Some(alloc_result_for_overwrite(&[cols], dtype, &device, None)?),
            false => None,
        };
        let db = match self.n.bias {
            true => Some(alloc_result_for_overwrite(&[cols], dtype, &device, None)?),
            false => None,
        };
        let g = g.to_dtype(dtype)?;
        let inputs: Vec<View> = [
            Some(&g),
            Some(x),
            Some(&self.rstd),
            self.mean.as_ref(),
            self.weight.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(Tensor::view_ref)
        .collect();
        let outputs: Vec<View> = [Some(&dx), dw.as_ref(), db.as_ref()]
            .into_iter()
            .flatten()
            .map(Tensor::view_ref)
            .collect();
        norm::norm_backward(self.n, &inputs, &outputs)?;
        let mut grads = vec![Some(dx)];
        if self.n.weight {
            grads.push(dw);
        }
        if self.n.bias {
            grads.push(db);
        }
        Ok(grads)
    }

    /// The backward from differentiable ops, the statistics recomputed from `x` (so that
    /// their dependence on `x` is part of the graph), in the compute dtype.
    fn composed(&self, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let dtype = self.x.dtype();
        let c = stat_dtype(dtype);
        let x = self.x.to_dtype(c)?;
        let g = g.to_dtype(c)?;
        let layer = self.n.kind == NormKind::Layer;
        let centred = if layer {
            x.sub(&x.mean_dims(&[-1], true)?)?
        } else {
            x.clone()
        };
        let rstd = centred
            .square()?
            .mean_dims(&[-1], true)?
            .add(self.n.eps)?
            .rsqrt()?;
        let xhat = centred.mul(&rstd)?;
        let gw = match &self.weight {
            Some(w) => g.mul(&w.to_dtype(c)?)?,
            None => g.clone(),
        };
        let mut inner = gw.sub(&xhat.mul(&gw.mul(&xhat)?.mean_dims(&[-1], true)?)?)?;
        if layer {
            inner = inner.sub(&gw.mean_dims(&[-1], true)?)?;
        }
        let mut grads = vec![Some(rstd.mul(&inner)?.to_dtype(dtype)?)];
        if self.n.weight {
            grads.push(Some(g.mul(&xhat)?.sum_dims(&[0], false)?.to_dtype(dtype)?));
        }
        if self.n.bias {
            grads.push(Some(g.sum_dims(&[0], false)?.to_dtype(dtype)?));
        }
        Ok(grads)
    }
}
