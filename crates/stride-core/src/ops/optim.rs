//! Fused optimizer updates: [`Tensor::adam_step_`].

use crate::autograd::record::needs_grad;
use crate::backend::optim::{self, check_adam_operands, AdamStep};
use crate::backend::View;
use crate::{Error, Result, Tensor};

fn view(t: &Tensor) -> View<'_> {
    View {
        storage: t.storage(),
        layout: t.layout(),
        dtype: t.dtype(),
    }
}

impl Tensor {
    /// One Adam (or AdamW) step of the parameter `self`, in place: `exp_avg`, `exp_avg_sq`
    /// (and `max_exp_avg_sq`, for amsgrad) are updated from `grad`, then `self`. PyTorch's
    /// `_single_tensor_adam` update, one pass over memory (on CUDA one kernel; elsewhere the
    /// backend's composed ops):
    ///
    /// ```text
    /// g ← maximize ? −grad : grad
    /// AdamW: p ← p·(1 − lr·wd)            Adam (wd ≠ 0): g ← g + wd·p
    /// m ← lerp(m, g, 1 − β1);  v ← v·β2 + (1 − β2)·g·g
    /// amsgrad: vmax ← max(vmax, v), v̂ = vmax   else v̂ = v
    /// p ← p − lr/(1 − β1^step) · m / (√v̂ / √(1 − β2^step) + eps)
    /// ```
    ///
    /// The result is bit for bit the composed ops' (`lerp_`, `mul_`, `addcmul_`, `sqrt`,
    /// `div`, `add_`, `addcdiv_` in the parameter's dtype) on every device and in every
    /// layout. Every operand has `self`'s shape, dtype (a float) and device; the four updated
    /// tensors must not overlap themselves or share memory with each other or with `grad`.
    /// Not recorded by autograd (run it under `no_grad`, as optimizers do).
    ///
    /// ```
    /// use stride_core::{AdamStep, MemoryFormat, Tensor};
    /// let p = Tensor::from_vec(vec![1.0f32, -2.0], [2])?;
    /// let g = Tensor::from_vec(vec![0.5f32, 0.25], [2])?;
    /// let (m, v) = (p.zeros_like(MemoryFormat::Preserve)?, p.zeros_like(MemoryFormat::Preserve)?);
    /// let h = AdamStep { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0,
    ///                    decoupled_weight_decay: false, maximize: false, step: 1 };
    /// p.adam_step_(&g, &m, &v, None, &h)?;
    /// // the first step moves each weight by about lr against its gradient's sign
    /// let w = p.to_vec::<f32>()?;
    /// assert!((w[0] - 0.9).abs() < 1e-5 && (w[1] + 2.1).abs() < 1e-5);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn adam_step_(
        &self,
        grad: &Tensor,
        exp_avg: &Tensor,
        exp_avg_sq: &Tensor,
        max_exp_avg_sq: Option<&Tensor>,
        h: &AdamStep,
    ) -> Result<()> {
        let op = "adam_step_";
        let mut written = vec![
            ("param", self),
            ("exp_avg", exp_avg),
            ("exp_avg_sq", exp_avg_sq),
        ];
        written.extend(max_exp_avg_sq.map(|t| ("max_exp_avg_sq", t)));
        let all: Vec<&Tensor> = written.iter().map(|w| w.1).chain([grad]).collect();
        if needs_grad(&all) {
            return Err(Error::invalid(
                op,
                "an operand requires grad and grad mode is on; run optimizer updates under no_grad()",
            ));
        }
        check_adam_operands(op, &written, grad)?;
        if self.numel() == 0 {
            return Ok(());
        }
        optim::adam(
            h,
            view(self),
            view(grad),
            view(exp_avg),
            view(exp_avg_sq),
            max_exp_avg_sq.map(view),
        )?;
        for (_, t) in &written {
            t.storage().bump_version();
        }
        Ok(())
    }
}
