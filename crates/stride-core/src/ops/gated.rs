//! Fused gated activations: [`Tensor::gated`] (`act(gate)·up`: SwiGLU, GeGLU), one pass
//! forward and one backward (`backend/pointwise.rs`), with a differentiable composed backward
//! for double backward.

use crate::autograd::formulas::elementwise::unary_grad;
use crate::autograd::formulas::sum_to_shape;
use crate::autograd::record::{needs_grad, record};
use crate::autograd::{is_grad_enabled, no_grad};
use crate::backend::pointwise::{self, GateActivation, Pointwise};
use crate::backend::{UnaryOp, View};
use crate::ops::output::alloc_result_for_overwrite;
use crate::shape::broadcast_shapes;
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// The gated unit `act(self)·up` of a gated MLP (`self` is the gate projection): the
    /// composed `self.silu()?.mul(up)` (or `gelu`, `gelu_tanh`) in one pass, `act` and the
    /// product in the compute dtype (f32 for f16/bf16), rounded once. The GELUs take forms
    /// that keep their digits for negative gates (`1 + erf(z)` as `erfc(−z)`, `1 + tanh(y)` as
    /// `2·sigmoid(2y)`), where the unary ops' formulas cancel. The operands broadcast; the
    /// result has their promoted (float) dtype. The backward is one pass too, giving both
    /// gradients.
    ///
    /// ```
    /// use stride_core::{GateActivation, Tensor};
    /// let gate = Tensor::from_vec(vec![0.0f32, 2.0], [2])?;
    /// let up = Tensor::from_vec(vec![5.0f32, 3.0], [2])?;
    /// let y = gate.gated(&up, GateActivation::Silu)?;        // silu(0) = 0
    /// let silu2 = 2.0f32 / (1.0 + (-2.0f32).exp());
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, silu2 * 3.0]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn gated(&self, up: &Tensor, act: GateActivation) -> Result<Tensor> {
        let op = act.name();
        for (what, t) in [("gate", self), ("up projection", up)] {
            if !t.dtype().is_float() {
                return Err(Error::UnsupportedDType {
                    op,
                    dtype: t.dtype(),
                    hint: format!("; the {what} must be a floating-point tensor"),
                });
            }
        }
        if up.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op,
                a: self.device(),
                b: up.device(),
            });
        }
        let shape = broadcast_shapes(op, self.shape(), up.shape())?;
        let dtype = DType::promote(self.dtype(), up.dtype());
        let operand = |t: &Tensor| -> Result<Tensor> {
            t.detach().to_dtype(dtype)?.broadcast_to(shape.clone())
        };
        let y = {
            let _g = no_grad();
            let (g, u) = (operand(self)?, operand(up)?);
            let y = alloc_result_for_overwrite(&shape, dtype, &self.device(), None)?;
            if y.numel() > 0 {
                pointwise::pointwise(
                    Pointwise::Gated(act),
                    &[g.view_ref(), u.view_ref()],
                    &[y.view_ref()],
                )?;
            }
            y
        };
        if needs_grad(&[self, up]) {
            let name = match act {
                GateActivation::Silu => "SwigluBackward",
                GateActivation::Gelu | GateActivation::GeluTanh => "GegluBackward",
            };
            let saved = (self.clone(), up.clone());
            record(
                name,
                &[self, up],
                &[&y],
                &[(self, "gate"), (up, "up")],
                move |dy| gated_backward(act, &saved.0, &saved.1, &dy[0]),
            )?;
        }
        Ok(y)
    }

    /// SwiGLU: `silu(self)·up` ([`Tensor::gated`] with [`GateActivation::Silu`]).
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let gate = Tensor::from_vec(vec![0.0f32], [1])?;
    /// assert_eq!(gate.swiglu(&gate)?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn swiglu(&self, up: &Tensor) -> Result<Tensor> {
        self.gated(up, GateActivation::Silu)
    }

    /// GeGLU: `gelu(self)·up`, the exact GELU ([`Tensor::gated`] with
    /// [`GateActivation::Gelu`]; [`GateActivation::GeluTanh`] for the tanh approximation).
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let gate = Tensor::from_vec(vec![0.0f32], [1])?;
    /// assert_eq!(gate.geglu(&gate)?.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn geglu(&self, up: &Tensor) -> Result<Tensor> {
        self.gated(up, GateActivation::Gelu)
    }
}

/// The unary op `act` is.
fn unary(act: GateActivation) -> UnaryOp {
    match act {
        GateActivation::Silu => UnaryOp::Silu,
        GateActivation::Gelu => UnaryOp::GeluErf,
        GateActivation::GeluTanh => UnaryOp::GeluTanh,
    }
}

/// Gradients for `[gate, up]` from `dy` (the output's gradient, the broadcast shape).
fn gated_backward(
    act: GateActivation,
    gate: &Tensor,
    up: &Tensor,
    dy: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    let shape = dy.shape().to_vec();
    let dtype = dy.dtype();
    let (dg, du) = if is_grad_enabled() {
        // create_graph: a formula autograd can differentiate again
        let (g, u) = (gate.to_dtype(dtype)?, up.to_dtype(dtype)?);
        let value = match act {
            GateActivation::Silu => g.silu()?,
            GateActivation::Gelu => g.gelu()?,
            GateActivation::GeluTanh => g.gelu_tanh()?,
        };
        (unary_grad(unary(act), &g, &dy.mul(&u)?)?, dy.mul(&value)?)
    } else {
        let operand = |t: &Tensor| t.to_dtype(dtype)?.broadcast_to(shape.clone());
        let (g, u) = (operand(gate)?, operand(up)?);
        let dg = alloc_result_for_overwrite(&shape, dtype, &dy.device(), None)?;
        let du = alloc_result_for_overwrite(&shape, dtype, &dy.device(), None)?;
        if dy.numel() > 0 {
            let inputs: Vec<View> = [dy, &g, &u].map(Tensor::view_ref).to_vec();
            pointwise::pointwise(
                Pointwise::GatedBackward(act),
                &inputs,
                &[dg.view_ref(), du.view_ref()],
            )?;
        }
        (dg, du)
    };
    let back = |d: Tensor, t: &Tensor| -> Result<Option<Tensor>> {
        match t.requires_grad() {
            true => Ok(Some(sum_to_shape(&d, t.shape())?.to_dtype(t.dtype())?)),
            false => Ok(None),
        }
    };
    Ok(vec![back(dg, gate)?, back(du, up)?])
}
