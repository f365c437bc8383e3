//! `softmax` and `log_softmax`, composed from primitives (amax, sub, exp, sum, div/log) in
//! the frontend, as DESIGN.md asks: numerically stable (the max along the dim is subtracted
//! first, so inputs of 1e4 do not overflow), f16/bf16 computed in f32 and rounded once.
//! As PyTorch: `-inf` entries get probability 0; a line of only `-inf` gives NaN.

use super::output::{alloc_result, deliver_computed, Dest};
use super::reduce::{compute_dtype, float_only, precheck, reduce_into};
use crate::autocast::autocast_inputs;
use crate::backend::ReduceOp;
use crate::shape::wrap_dim;
use crate::{Result, Tensor};

fn softmax_impl(name: &'static str, x: &Tensor, dim: i64, log: bool, dest: Dest) -> Result<Tensor> {
    float_only(name, x)?;
    wrap_dim(name, dim, x.dim())?;
    precheck(name, dest, x.shape(), x.dtype(), x.device())?;
    if x.numel() == 0 {
        return deliver_computed(
            name,
            dest,
            alloc_result(x.shape(), x.dtype(), &x.device(), Some(x))?,
        );
    }
    let xc = x.to_dtype(compute_dtype(x.dtype()))?;
    let m = reduce_into(name, ReduceOp::Max, &xc, &[dim], true, Dest::New)?;
    let y = xc.sub(&m)?;
    if log {
        let e = y.exp()?;
        let s = reduce_into(name, ReduceOp::Sum, &e, &[dim], true, Dest::New)?;
        s.log_()?;
        y.sub_(&s)?;
    } else {
        y.exp_()?;
        let s = reduce_into(name, ReduceOp::Sum, &y, &[dim], true, Dest::New)?;
        y.div_(&s)?;
    }
    deliver_computed(name, dest, y.to_dtype(x.dtype())?)
}

impl Tensor {
    /// `exp(x) / Σ exp(x)` along `dim` (floats only; convert integers with `to_dtype`).
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec(vec![1e4f32, 1e4, f32::NEG_INFINITY], [3])?;
    /// assert_eq!(x.softmax(0)?.to_vec::<f32>()?, vec![0.5, 0.5, 0.0]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("softmax", &[self])? {
            return c.tensors[0].softmax(dim);
        }
        recorded(
            || softmax_impl("softmax", self, dim, false, Dest::New),
            |o| record_softmax(self, dim, o, false),
        )
    }
    /// [`Tensor::softmax`] into `out` (any non-overlapping layout of `self`'s shape).
    pub fn softmax_out(&self, dim: i64, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("softmax", &[self], || {
            softmax_impl("softmax", self, dim, false, Dest::Into(out))
        })
    }
    /// `x − log Σ exp(x)` along `dim`, computed as `(x − max) − log Σ exp(x − max)`.
    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("log_softmax", &[self])? {
            return c.tensors[0].log_softmax(dim);
        }
        recorded(
            || softmax_impl("log_softmax", self, dim, true, Dest::New),
            |o| record_softmax(self, dim, o, true),
        )
    }
    /// [`Tensor::log_softmax`] into `out`.
    pub fn log_softmax_out(&self, dim: i64, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("log_softmax", &[self], || {
            softmax_impl("log_softmax", self, dim, true, Dest::Into(out))
        })
    }
}

// ----- autograd: the kernels above run without recording; the functional forms record one
// node with the formula from `autograd::formulas`, `_out` forms refuse to record.
use crate::autograd::formulas::reduce::record_softmax;
use crate::autograd::record::{recorded, unrecorded_out};
