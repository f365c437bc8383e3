//! Fused cross-entropy over rows of logits: [`Tensor::cross_entropy_rows`], one pass forward and
//! one backward (`backend/cross_entropy.rs`), with a differentiable composed backward for
//! double backward.

use crate::autograd::record::{needs_grad, record};
use crate::autograd::{is_grad_enabled, no_grad};
use crate::backend::cross_entropy::{self, CrossEntropyRows};
use crate::ops::output::alloc_result_for_overwrite;
use crate::{compute_dtype, DType, Error, Result, Tensor};

impl Tensor {
    /// The cross-entropy of each row of the logits `self` (`[R, V]`, float) against class
    /// indices `target` (`[R]`, i64): `[R]` losses in the logits' compute dtype (f32 for
    /// f32/f16/bf16, f64 for f64), `(1 − ε)(lse − z_t) + ε(lse − mean z) + λ·lse²` with
    /// `lse = log Σ exp(z)` — 0 where the target is `ignore_index`. The softmax is never
    /// stored: forward reads the logits once (an online log-sum-exp) and keeps `lse`; backward
    /// reads them once and writes their gradient. Any layouts. A target outside `[0, V)` (and
    /// not `ignore_index`) is an error — on CUDA reported at the next read of the device,
    /// without a host wait here. `stride_nn::loss::cross_entropy` reduces these for you.
    ///
    /// ```
    /// use stride_core::{CrossEntropyRows, Tensor};
    /// let z = Tensor::from_vec(vec![0.0f32, 0.0, 1.0, 1.0], [2, 2])?;
    /// let t = Tensor::from_vec(vec![1i64, -100], [2])?;
    /// let loss = z.cross_entropy_rows(&t, &CrossEntropyRows::default())?;
    /// let l = loss.to_vec::<f32>()?;
    /// assert!((l[0] - 2f32.ln()).abs() < 1e-6 && l[1] == 0.0);    // row 1 is ignored
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn cross_entropy_rows(&self, target: &Tensor, o: &CrossEntropyRows) -> Result<Tensor> {
        let op = "cross_entropy";
        check(op, self, target, o)?;
        let (rows, classes) = (self.shape()[0], self.shape()[1]);
        let c = compute_dtype(self.dtype());
        let device = self.device();
        let (loss, lse) = {
            let _g = no_grad();
            let loss = alloc_result_for_overwrite(&[rows], c, &device, None)?;
            let lse = alloc_result_for_overwrite(&[rows], c, &device, None)?;
            cross_entropy::cross_entropy(
                *o,
                &[self.view_ref(), target.view_ref()],
                &[loss.view_ref(), lse.view_ref()],
            )?;
            (loss, lse)
        };
        if needs_grad(&[self]) {
            let saved = Saved {
                o: *o,
                logits: self.clone(),
                target: target.clone(),
                lse,
                classes,
            };
            record(
                "CrossEntropyBackward",
                &[self],
                &[&loss],
                &[(self, "input"), (target, "target")],
                move |g| Ok(vec![Some(saved.backward(&g[0])?)]),
            )?;
        }
        Ok(loss)
    }
}

fn check(op: &'static str, z: &Tensor, target: &Tensor, o: &CrossEntropyRows) -> Result<()> {
    if !z.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: z.dtype(),
            hint: "; the logits must be floating-point (convert with to_dtype)".into(),
        });
    }
    if target.dtype() != DType::I64 {
        return Err(Error::UnsupportedDType {
            op,
            dtype: target.dtype(),
            hint: " for the targets; they must be i64 class indices (convert with to_dtype)".into(),
        });
    }
    if z.dim() != 2 || target.dim() != 1 || target.shape()[0] != z.shape()[0] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: z.shape().to_vec(),
            rhs: target.shape().to_vec(),
            why: "don't fit: the logits must be [R, V] and the targets [R]".into(),
        });
    }
    if target.device() != z.device() {
        return Err(Error::DeviceMismatch {
            op,
            a: z.device(),
            b: target.device(),
        });
    }
    if !(0.0..=1.0).contains(&o.label_smoothing) {
        return Err(Error::invalid(
            op,
            format!(
                "label_smoothing must be in [0, 1], got {}",
                o.label_smoothing
            ),
        ));
    }
    if !(o.z_loss >= 0.0 && o.z_loss.is_finite()) {
        return Err(Error::invalid(
            op,
            format!("z_loss must be a finite weight ≥ 0, got {}", o.z_loss),
        ));
    }
    Ok(())
}

/// What the backward keeps.
struct Saved {
    o: CrossEntropyRows,
    logits: Tensor,
    target: Tensor,
    lse: Tensor,
    classes: usize,
}

impl Saved {
    /// The logits' gradient from `g` (`[R]`, the losses' gradient).
    fn backward(&self, g: &Tensor) -> Result<Tensor> {
        let c = self.lse.dtype();
        let g = g.to_dtype(c)?;
        if is_grad_enabled() {
            return self.composed(&g);
        }
        let z = &self.logits;
        let dz = alloc_result_for_overwrite(z.shape(), z.dtype(), &z.device(), None)?;
        cross_entropy::cross_entropy_backward(
            self.o,
            &[
                z.view_ref(),
                self.target.view_ref(),
                g.view_ref(),
                self.lse.view_ref(),
            ],
            &[dz.view_ref()],
        )?;
        Ok(dz)
    }

    /// The same gradient from differentiable ops (the log-sum-exp recomputed from the logits,
    /// so that its dependence on them is in the graph), in the compute dtype.
    fn composed(&self, g: &Tensor) -> Result<Tensor> {
        let c = self.lse.dtype();
        let z = self.logits.to_dtype(c)?;
        let lse = z.logsumexp(&[-1], true)?;
        let p = z.sub(&lse)?.exp()?;
        let eps = self.o.label_smoothing;
        let classes = Tensor::arange(0i64, self.classes as i64, &z.device())?.unsqueeze(0)?;
        let hit = self
            .target
            .unsqueeze(1)?
            .eq(&classes)?
            .to_dtype(c)?
            .mul(1.0 - eps)?;
        let scale = lse.mul(2.0 * self.o.z_loss)?.add(1.0)?;
        let d = p.mul(&scale)?.sub(eps / self.classes as f64)?.sub(&hit)?;
        let keep = self.target.ne(self.o.ignore_index)?.to_dtype(c)?.mul(g)?;
        d.mul(&keep.unsqueeze(1)?)?.to_dtype(self.logits.dtype())
    }
}
