//! Cumulative frontends: `cumsum` and `cumprod` along one dim, in three forms — new tensor,
//! in place (`_`) and `_out` (into any non-overlapping layout). Integer and bool inputs give
//! i64, as PyTorch; floats keep their dtype (f32 accumulates in f64, f16/bf16 in f32).

use super::output::{deliver, Dest, Policy};
use crate::autocast::autocast_inputs;
use crate::backend::{self, CumulativeOp};
use crate::shape::wrap_dim;
use crate::{Result, Tensor};

fn cumulative(op: CumulativeOp, x: &Tensor, dim: i64, dest: Dest) -> Result<Tensor> {
    let d = wrap_dim(op.name(), dim, x.dim())?;
    let dtype = op.result_dtype(x.dtype());
    let src = x.view_ref();
    let inputs = [src];
    let policy = Policy::new(op.name(), &inputs, x.shape(), x.device(), Some(x));
    deliver(dest, &policy, dtype, |dst| {
        backend::cumulative(op, src, d, dst)
    })
}

impl Tensor {
    /// Running sums along `dim`: `out[.., i, ..] = Σ_{j ≤ i} x[.., j, ..]`.
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], [2, 3])?;
    /// assert_eq!(x.cumsum(1)?.to_vec::<i64>()?, vec![1, 3, 6, 4, 9, 15]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn cumsum(&self, dim: i64) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("cumsum", &[self])? {
            return c.tensors[0].cumsum(dim);
        }
        recorded(
            || cumulative(CumulativeOp::Sum, self, dim, Dest::New),
            |o| record_cumsum(self, dim, o),
        )
    }
    /// In-place [`Tensor::cumsum`], written through `self`'s layout (an integer `self` keeps
    /// its dtype; the i64 sums are cast back, wrapping).
    pub fn cumsum_(&self, dim: i64) -> Result<Tensor> {
        crate::autograd::record::in_place(
            "cumsum_",
            self,
            &[],
            || cumulative(CumulativeOp::Sum, self, dim, Dest::Into(self)),
            |o| o.cumsum(dim),
        )
    }
    /// [`Tensor::cumsum`] into `out`.
    pub fn cumsum_out(&self, dim: i64, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("cumsum", &[self], || {
            cumulative(CumulativeOp::Sum, self, dim, Dest::Into(out))
        })
    }
    /// Running products along `dim`.
    pub fn cumprod(&self, dim: i64) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("cumprod", &[self])? {
            return c.tensors[0].cumprod(dim);
        }
        recorded(
            || cumulative(CumulativeOp::Prod, self, dim, Dest::New),
            |o| record_cumprod(self, dim, o),
        )
    }
    /// In-place [`Tensor::cumprod`].
    pub fn cumprod_(&self, dim: i64) -> Result<Tensor> {
        crate::autograd::record::in_place(
            "cumprod_",
            self,
            &[],
            || cumulative(CumulativeOp::Prod, self, dim, Dest::Into(self)),
            |o| o.cumprod(dim),
        )
    }
    /// [`Tensor::cumprod`] into `out`.
    pub fn cumprod_out(&self, dim: i64, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("cumprod", &[self], || {
            cumulative(CumulativeOp::Prod, self, dim, Dest::Into(out))
        })
    }
}

// ----- autograd: the kernels above run without recording; the functional forms record one
// node with the formula from `autograd::formulas`, `_out` forms refuse to record.
use crate::autograd::formulas::reduce::{record_cumprod, record_cumsum};
use crate::autograd::record::{recorded, unrecorded_out};
