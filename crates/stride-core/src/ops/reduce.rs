//! Reduction frontends.
//!
//! One backend primitive each: `sum`, `mean`, `prod`, `amax`/`amin` (and `max()`/`min()`),
//! `all`/`any`, `count_nonzero` ([`backend::reduce`]); `max_dim`/`min_dim`,
//! `argmax`/`argmin` ([`backend::arg_reduce`]). Composed from primitives in the frontend, in
//! f32 for f16/bf16 inputs and rounded once at the end: `var`, `std`, `norm`, `logsumexp`.
//!
//! Conventions, as PyTorch: dims may be negative; `keepdim` keeps reduced dims as size 1; a
//! 0-d tensor accepts dim `0`/`-1` (and reduces nothing); **an empty dims list means every
//! dim** (`x.sum_dims(&[], false)` is `x.sum()`, as `torch.sum(x, dim=[])`); naming a dim twice
//! is an error. Every `_out` form validates `out` (shape, dtype category, overlap, device)
//! before anything is written and writes through `out`'s layout, whatever its strides.
//!
//! Accuracy: f32 sums, means and products accumulate in f64 (PyTorch's CPU kernels use f32
//! cascades, so the last bit can differ from PyTorch's), f16/bf16 in f32. The grouping of a
//! float sum depends on the input's layout and never on the thread count.
//!
//! Deliberate deviations from PyTorch:
//! - `prod_dims` takes a list of dims (PyTorch's `prod` takes one);
//! - `argmax`/`argmin` accept bool tensors (`false < true`), as `max_dim` does in both;
//! - `all`/`any` always return bool (PyTorch returns uint8 for uint8 inputs);
//! - `_out` forms accept any output dtype the result casts to safely (the rule of every
//!   stride `_out` op; PyTorch's `amax(out=)` insists on the input's dtype), except the
//!   values and indices of `max_dim_out`/`argmax_out`, which must be exactly the input's
//!   dtype and i64, as in PyTorch;
//! - an `out` sharing memory with the input is fine (the result is computed as if into a
//!   fresh tensor, then copied); PyTorch refuses partial overlap.

use super::output::{
    check_out, deliver, deliver_all, deliver_computed, Alias, Cast, Dest, Out, Policy,
};
use crate::autocast::autocast_inputs;
use crate::backend::{self, ArgReduceOp, ReduceOp, View};
use crate::shape::wrap_dims;
use crate::{DType, Device, Error, Layout, Result, Tensor};

/// A reduction's dims resolved against its input.
pub(crate) struct Reduction {
    /// The reduced dims: wrapped, sorted, distinct.
    pub dims: Vec<usize>,
    /// The result's shape (reduced dims dropped, or kept as size 1 with `keepdim`).
    pub shape: Vec<usize>,
    /// How many input elements each result element combines.
    pub count: usize,
    keepdim: bool,
    ndim: usize,
}

impl Reduction {
    /// Resolves `dims` (empty: every dim) against `x`.
    pub fn new(op: &'static str, x: &Tensor, dims: &[i64], keepdim: bool) -> Result<Reduction> {
        let nd = x.dim();
        let wrapped = wrap_dims(op, dims, nd)?;
        let mut red: Vec<usize> = if dims.is_empty() {
            (0..nd).collect()
        } else if nd == 0 {
            vec![] // dim 0 / -1 of a 0-d tensor: nothing to reduce
        } else {
            wrapped
        };
        red.sort_unstable();
        let shape = (0..nd)
            .filter_map(|d| {
                if red.contains(&d) {
                    keepdim.then_some(1)
                } else {
                    Some(x.shape()[d])
                }
            })
            .collect();
        let count = red.iter().map(|&d| x.shape()[d]).product();
        Ok(Reduction {
            dims: red,
            shape,
            count,
            keepdim,
            ndim: nd,
        })
    }

    /// The dims as the public API takes them (for composing reductions).
    fn dims_i64(&self) -> Vec<i64> {
        self.dims.iter().map(|&d| d as i64).collect()
    }

    /// The keepdim form of a layout of the result's shape: size-1 dims where the reduced
    /// dims were (what the backend primitives take).
    pub fn keepdim_layout(&self, out: &Layout) -> Layout {
        if self.keepdim {
            return out.clone();
        }
        let (mut shape, mut strides) =
            (Vec::with_capacity(self.ndim), Vec::with_capacity(self.ndim));
        let mut k = 0;
        for d in 0..self.ndim {
            if self.dims.contains(&d) {
                shape.push(1);
                strides.push(0);
            } else {
                shape.push(out.shape()[k]);
                strides.push(out.strides()[k]);
                k += 1;
            }
        }
        Layout::new(shape, strides, out.offset())
    }

    /// Errors when the reduction covers zero elements and the op has no identity.
    fn check_nonempty(&self, op: &'static str, x: &Tensor) -> Result<()> {
        if self.count == 0 {
            return Err(Error::invalid(
                op,
                format!(
                    "cannot reduce over zero elements: input shape {:?}, reduced dims {:?} include a dim of size 0, and {op} has no identity (check numel() or the dim sizes first)",
                    x.shape(),
                    self.dims
                ),
            ));
        }
        Ok(())
    }
}

/// Runs one reduce primitive from `x` into `dest`.
pub(crate) fn reduce_into(
    name: &'static str,
    op: ReduceOp,
    x: &Tensor,
    dims: &[i64],
    keepdim: bool,
    dest: Dest,
) -> Result<Tensor> {
    let r = Reduction::new(name, x, dims, keepdim)?;
    let dtype = op.result_dtype(x.dtype()).map_err(|e| rename(e, name))?;
    if op.needs_nonempty() {
        r.check_nonempty(name, x)?;
    }
    let src = x.view_ref();
    let inputs = [src];
    let policy = Policy::new(name, &inputs, &r.shape, x.device(), None);
    deliver(dest, &policy, dtype, |dst| {
        let kl = r.keepdim_layout(dst.layout);
        backend::reduce(
            op,
            src,
            &r.dims,
            View {
                storage: dst.storage,
                layout: &kl,
                dtype: dst.dtype,
            },
        )
    })
}

/// Reports a dtype error under the name the user called.
fn rename(e: Error, name: &'static str) -> Error {
    match e {
        Error::UnsupportedDType { dtype, hint, .. } => Error::UnsupportedDType {
            op: name,
            dtype,
            hint,
        },
        e => e,
    }
}

/// Checks `dest` before a composed op computes anything.
pub(crate) fn precheck(
    op: &'static str,
    dest: Dest,
    shape: &[usize],
    dtype: DType,
    device: Device,
) -> Result<()> {
    match dest {
        Dest::New => Ok(()),
        Dest::Into(out) => check_out(op, out, shape, dtype, device),
    }
}

/// Errors unless `x` is a float tensor.
pub(crate) fn float_only(op: &'static str, x: &Tensor) -> Result<()> {
    if x.dtype().is_float() {
        return Ok(());
    }
    Err(Error::UnsupportedDType {
        op,
        dtype: x.dtype(),
        hint: "; it takes float tensors (convert with to_dtype(DType::F32) first)".into(),
    })
}

/// The dtype composed float ops compute in: f32 for f16/bf16 (rounded once at the end), the
/// dtype itself otherwise. See [`in_compute_dtype`](crate::in_compute_dtype).
pub fn compute_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// Values and/or indices of the extremum over `dims`, into fresh tensors or the caller's.
fn arg_extremum(
    name: &'static str,
    op: ArgReduceOp,
    x: &Tensor,
    dims: &[i64],
    keepdim: bool,
    values: Option<Dest>,
    indices: Dest,
) -> Result<(Option<Tensor>, Tensor)> {
    let r = Reduction::new(name, x, dims, keepdim)?;
    r.check_nonempty(name, x)?;
    let device = x.device();
    // as PyTorch, the values output must have exactly the input's dtype and the indices
    // output i64; an output sharing the input's storage is written through a temporary
    let inputs = [x.view_ref()];
    let policy = Policy {
        cast: Cast::Exact,
        alias: Alias::None,
        ..Policy::new(name, &inputs, &r.shape, device, None)
    };
    let run = |v: Option<View>, i: View| {
        let vl = v.map(|v| r.keepdim_layout(v.layout));
        let il = r.keepdim_layout(i.layout);
        let vv = v.zip(vl.as_ref()).map(|(v, l)| View { layout: l, ..v });
        backend::arg_reduce(op, x.view_ref(), &r.dims, vv, View { layout: &il, ..i })
    };
    let indices = Out {
        dest: indices,
        dtype: DType::I64,
        what: "indices",
    };
    match values {
        Some(values) => {
            let values = Out {
                dest: values,
                dtype: x.dtype(),
                what: "values",
            };
            let [v, i] = deliver_all(&policy, [values, indices], |[v, i]| run(Some(v), i))?;
            Ok((Some(v), i))
        }
        None => {
            let [i] = deliver_all(&policy, [indices], |[i]| run(None, i))?;
            Ok((None, i))
        }
    }
}

fn var_impl(
    name: &'static str,
    x: &Tensor,
    dims: &[i64],
    correction: f64,
    keepdim: bool,
    sqrt: bool,
    dest: Dest,
) -> Result<Tensor> {
    float_only(name, x)?;
    let r = Reduction::new(name, x, dims, keepdim)?;
    precheck(name, dest, &r.shape, x.dtype(), x.device())?;
    let xc = x.to_dtype(compute_dtype(x.dtype()))?;
    let d = r.dims_i64();
    // Two passes over the values shifted by each slice's first element: the mean, then the
    // sum of squared deviations from it. The shift leaves the variance unchanged and makes a
    // constant slice's deviations exactly 0 on every device, whatever order a backend sums
    // in (without it, `correction ≥ n` on constant data gave inf or NaN by rounding luck);
    // it also conditions data whose mean is large against its spread.
    let xs = if r.count > 0 {
        let mut first = xc.clone();
        for &k in &d {
            first = first.narrow(k, 0, 1)?;
        }
        xc.sub(&first)?
    } else {
        xc
    };
    let mean = reduce_into(name, ReduceOp::Mean, &xs, &d, true, Dest::New)?;
    let dev = xs.sub(&mean)?;
    dev.square_()?;
    let v = reduce_into(name, ReduceOp::Sum, &dev, &d, keepdim, Dest::New)?;
    // PyTorch's divisor: max(n - correction, 0), so correction >= n gives inf (or NaN for 0/0)
    v.div_((r.count as f64 - correction).max(0.0))?;
    if sqrt {
        v.sqrt_()?;
    }
    deliver_computed(name, dest, v.to_dtype(x.dtype())?)
}

fn norm_impl(x: &Tensor, p: f64, dims: &[i64], keepdim: bool, dest: Dest) -> Result<Tensor> {
    let name = "norm";
    float_only(name, x)?;
    if p.is_nan() {
        return Err(Error::invalid(
            name,
            "p is NaN; pass a number, f64::INFINITY or f64::NEG_INFINITY",
        ));
    }
    let r = Reduction::new(name, x, dims, keepdim)?;
    precheck(name, dest, &r.shape, x.dtype(), x.device())?;
    let c = compute_dtype(x.dtype());
    let xc = x.to_dtype(c)?;
    let d = r.dims_i64();
    let sum = |t: &Tensor| reduce_into(name, ReduceOp::Sum, t, &d, keepdim, Dest::New);
    let res = if p == 2.0 {
        sum(&xc.square()?)?.sqrt_()?
    } else if p == 1.0 {
        sum(&xc.abs()?)?
    } else if p.is_infinite() {
        if r.count == 0 {
            return Err(Error::invalid(
                name,
                format!(
                    "the {p}-norm of zero elements is undefined (input shape {:?}, reduced dims {:?}); check the dim sizes first",
                    x.shape(),
                    r.dims
                ),
            ));
        }
        let op = if p > 0.0 {
            ReduceOp::Max
        } else {
            ReduceOp::Min
        };
        reduce_into(name, op, &xc.abs()?, &d, keepdim, Dest::New)?
    } else if p == 0.0 {
        reduce_into(name, ReduceOp::CountNonzero, &xc, &d, keepdim, Dest::New)?.to_dtype(c)?
    } else {
        let a = xc.abs()?;
        a.pow_(p)?;
        sum(&a)?.pow_(1.0 / p)?
    };
    deliver_computed(name, dest, res.to_dtype(x.dtype())?)
}

fn logsumexp_impl(x: &Tensor, dims: &[i64], keepdim: bool, dest: Dest) -> Result<Tensor> {
    let name = "logsumexp";
    let r = Reduction::new(name, x, dims, keepdim)?;
    // integer and bool inputs give the default float dtype, as PyTorch
    let dtype = if x.dtype().is_float() {
        x.dtype()
    } else {
        DType::F32
    };
    precheck(name, dest, &r.shape, dtype, x.device())?;
    if r.count == 0 {
        return deliver_computed(
            name,
            dest,
            Tensor::full(r.shape.clone(), f64::NEG_INFINITY, dtype, &x.device())?,
        );
    }
    let xc = x.to_dtype(compute_dtype(dtype))?;
    let d = r.dims_i64();
    // subtract the max for stability; an infinite max is replaced by 0 (PyTorch), so rows of
    // -inf give -inf and rows holding +inf give +inf instead of NaN
    let m = reduce_into(name, ReduceOp::Max, &xc, &d, true, Dest::New)?;
    let m = m.isinf()?.where_cond(0.0, &m)?;
    let e = xc.sub(&m)?;
    e.exp_()?;
    let s = reduce_into(name, ReduceOp::Sum, &e, &d, keepdim, Dest::New)?;
    s.log_()?;
    let shape: Vec<i64> = r.shape.iter().map(|&n| n as i64).collect();
    s.add_(&m.reshape(&shape)?)?;
    deliver_computed(name, dest, s.to_dtype(dtype)?)
}

/// `dim` as a dims list for arg reductions (`None`: every dim, the flat index).
fn one_dim(dim: Option<i64>) -> Vec<i64> {
    dim.into_iter().collect()
}

/// Reductions: sums and products, means, extrema, logical reductions, statistics, norms.
impl Tensor {
    /// The sum of all elements, as a 0-d tensor. Integer and bool inputs give i64; f16/bf16
    /// accumulate in f32, f32 in f64.
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 2, 3, 4], [2, 2])?;
    /// assert_eq!(x.sum()?.item::<i64>()?, 10);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn sum(&self) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("sum", &[self])? {
            return c.tensors[0].sum();
        }
        recorded(
            || reduce_into("sum", ReduceOp::Sum, self, &[], false, Dest::New),
            |o| record_reduction(Red::Sum, self, &[], o),
        )
    }
    /// The sum over `dims` (negative dims count from the end; an empty list means every dim,
    /// as `torch.sum(x, dim=[])`).
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::arange(0, 24, &stride_core::Device::Cpu)?.reshape(&[2, 3, 4])?;
    /// let s = x.sum_dims(&[0, -1], false)?;
    /// assert_eq!(s.shape(), &[3]);
    /// assert_eq!(s.to_vec::<i64>()?, vec![60, 92, 124]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn sum_dims(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("sum", &[self])? {
            return c.tensors[0].sum_dims(dims, keepdim);
        }
        recorded(
            || reduce_into("sum", ReduceOp::Sum, self, dims, keepdim, Dest::New),
            |o| record_reduction(Red::Sum, self, dims, o),
        )
    }
    /// [`Tensor::sum_dims`] into `out` (any non-overlapping layout of the result's shape).
    pub fn sum_dims_out(&self, dims: &[i64], keepdim: bool, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("sum", &[self], || {
            reduce_into("sum", ReduceOp::Sum, self, dims, keepdim, Dest::Into(out))
        })
    }
    /// The mean of all elements (floats only; NaN for an empty tensor). f16/bf16 accumulate in
    /// f32 and round once, so a mean never overflows where its sum would.
    pub fn mean(&self) -> Result<Tensor> {
        recorded(
            || reduce_into("mean", ReduceOp::Mean, self, &[], false, Dest::New),
            |o| record_reduction(Red::Mean, self, &[], o),
        )
    }
    /// The mean over `dims` (empty: every dim).
    pub fn mean_dims(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        recorded(
            || reduce_into("mean", ReduceOp::Mean, self, dims, keepdim, Dest::New),
            |o| record_reduction(Red::Mean, self, dims, o),
        )
    }
    /// [`Tensor::mean_dims`] into `out`.
    pub fn mean_dims_out(&self, dims: &[i64], keepdim: bool, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("mean", &[self], || {
            reduce_into("mean", ReduceOp::Mean, self, dims, keepdim, Dest::Into(out))
        })
    }
    /// The product of all elements (1 for an empty tensor); integers and bool give i64.
    pub fn prod(&self) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("prod", &[self])? {
            return c.tensors[0].prod();
        }
        recorded(
            || reduce_into("prod", ReduceOp::Prod, self, &[], false, Dest::New),
            |o| record_reduction(Red::Prod, self, &[], o),
        )
    }
    /// The product over `dims` (empty: every dim). PyTorch's `prod` takes one dim; stride
    /// takes a list, of which one dim is the PyTorch case.
    pub fn prod_dims(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("prod", &[self])? {
            return c.tensors[0].prod_dims(dims, keepdim);
        }
        recorded(
            || reduce_into("prod", ReduceOp::Prod, self, dims, keepdim, Dest::New),
            |o| record_reduction(Red::Prod, self, dims, o),
        )
    }
    /// [`Tensor::prod_dims`] into `out`.
    pub fn prod_dims_out(&self, dims: &[i64], keepdim: bool, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("prod", &[self], || {
            reduce_into("prod", ReduceOp::Prod, self, dims, keepdim, Dest::Into(out))
        })
    }

    /// The largest element, as a 0-d tensor of `self`'s dtype; NaN if any element is NaN. An
    /// empty tensor is an error.
    pub fn max(&self) -> Result<Tensor> {
        recorded(
            || reduce_into("max", ReduceOp::Max, self, &[], false, Dest::New),
            |o| record_reduction(Red::Extreme, self, &[], o),
        )
    }
    /// The smallest element (see [`Tensor::max`]).
    pub fn min(&self) -> Result<Tensor> {
        recorded(
            || reduce_into("min", ReduceOp::Min, self, &[], false, Dest::New),
            |o| record_reduction(Red::Extreme, self, &[], o),
        )
    }
    /// The largest elements over `dims` (empty: every dim), keeping the dtype; NaN
    /// propagates. Reducing over a dim of size 0 is an error.
    pub fn amax(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        recorded(
            || reduce_into("amax", ReduceOp::Max, self, dims, keepdim, Dest::New),
            |o| record_reduction(Red::Extreme, self, dims, o),
        )
    }
    /// [`Tensor::amax`] into `out`.
    pub fn amax_out(&self, dims: &[i64], keepdim: bool, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("amax", &[self], || {
            reduce_into("amax", ReduceOp::Max, self, dims, keepdim, Dest::Into(out))
        })
    }
    /// The smallest elements over `dims` (see [`Tensor::amax`]).
    pub fn amin(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        recorded(
            || reduce_into("amin", ReduceOp::Min, self, dims, keepdim, Dest::New),
            |o| record_reduction(Red::Extreme, self, dims, o),
        )
    }
    /// [`Tensor::amin`] into `out`.
    pub fn amin_out(&self, dims: &[i64], keepdim: bool, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("amin", &[self], || {
            reduce_into("amin", ReduceOp::Min, self, dims, keepdim, Dest::Into(out))
        })
    }

    /// `(values, indices)` of the maxima along `dim` (PyTorch's `max(dim)`): values keep the
    /// dtype, indices are i64. Ties give the first occurrence; a NaN wins (the first one).
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 5.0, 2.0, f32::NAN, 0.0], [2, 3])?;
    /// let (v, i) = x.max_dim(1, false)?;
    /// assert_eq!(i.to_vec::<i64>()?, vec![1, 1]);
    /// assert!(v.to_vec::<f32>()?[1].is_nan());
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn max_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let _g = crate::autograd::no_grad();
        let (v, i) = arg_extremum(
            "max",
            ArgReduceOp::Max,
            self,
            &[dim],
            keepdim,
            Some(Dest::New),
            Dest::New,
        )?;
        let v = v.expect("values requested");
        drop(_g);
        record_index_reduction("MaxBackward", self, dim, keepdim, &v, &i)?;
        Ok((v, i))
    }
    /// [`Tensor::max_dim`] into `values` and `indices` (both validated before anything is
    /// written; they must not share storage).
    pub fn max_dim_out(
        &self,
        dim: i64,
        keepdim: bool,
        values: &Tensor,
        indices: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let (v, i) = arg_extremum(
            "max",
            ArgReduceOp::Max,
            self,
            &[dim],
            keepdim,
            Some(Dest::Into(values)),
            Dest::Into(indices),
        )?;
        Ok((v.expect("values requested"), i))
    }
    /// `(values, indices)` of the minima along `dim` (see [`Tensor::max_dim`]).
    pub fn min_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let _g = crate::autograd::no_grad();
        let (v, i) = arg_extremum(
            "min",
            ArgReduceOp::Min,
            self,
            &[dim],
            keepdim,
            Some(Dest::New),
            Dest::New,
        )?;
        let v = v.expect("values requested");
        drop(_g);
        record_index_reduction("MinBackward", self, dim, keepdim, &v, &i)?;
        Ok((v, i))
    }
    /// [`Tensor::min_dim`] into `values` and `indices`.
    pub fn min_dim_out(
        &self,
        dim: i64,
        keepdim: bool,
        values: &Tensor,
        indices: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let (v, i) = arg_extremum(
            "min",
            ArgReduceOp::Min,
            self,
            &[dim],
            keepdim,
            Some(Dest::Into(values)),
            Dest::Into(indices),
        )?;
        Ok((v.expect("values requested"), i))
    }
    /// The i64 index of the maximum along `dim`, or (`None`) the flat row-major index over
    /// all elements. Ties give the first occurrence; a NaN wins. Deviation: PyTorch refuses
    /// bool inputs; stride accepts them (`false < true`), as its `max_dim` does.
    pub fn argmax(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        Ok(arg_extremum(
            "argmax",
            ArgReduceOp::Max,
            self,
            &one_dim(dim),
            keepdim,
            None,
            Dest::New,
        )?
        .1)
    }
    /// [`Tensor::argmax`] into `out` (an integer tensor).
    pub fn argmax_out(&self, dim: Option<i64>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        Ok(arg_extremum(
            "argmax",
            ArgReduceOp::Max,
            self,
            &one_dim(dim),
            keepdim,
            None,
            Dest::Into(out),
        )?
        .1)
    }
    /// The i64 index of the minimum (see [`Tensor::argmax`]).
    pub fn argmin(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        Ok(arg_extremum(
            "argmin",
            ArgReduceOp::Min,
            self,
            &one_dim(dim),
            keepdim,
            None,
            Dest::New,
        )?
        .1)
    }
    /// [`Tensor::argmin`] into `out`.
    pub fn argmin_out(&self, dim: Option<i64>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        Ok(arg_extremum(
            "argmin",
            ArgReduceOp::Min,
            self,
            &one_dim(dim),
            keepdim,
            None,
            Dest::Into(out),
        )?
        .1)
    }

    /// Whether every element is non-zero, as a 0-d bool tensor (NaN counts as non-zero).
    /// Deviation: PyTorch returns uint8 for uint8 inputs; stride always returns bool.
    pub fn all(&self) -> Result<Tensor> {
        reduce_into("all", ReduceOp::All, self, &[], false, Dest::New)
    }
    /// Whether any element is non-zero, as a 0-d bool tensor.
    pub fn any(&self) -> Result<Tensor> {
        reduce_into("any", ReduceOp::Any, self, &[], false, Dest::New)
    }
    /// [`Tensor::all`] over `dims` (empty: every dim).
    pub fn all_dims(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        reduce_into("all", ReduceOp::All, self, dims, keepdim, Dest::New)
    }
    /// [`Tensor::all_dims`] into `out`.
    pub fn all_dims_out(&self, dims: &[i64], keepdim: bool, out: &Tensor) -> Result<Tensor> {
        reduce_into("all", ReduceOp::All, self, dims, keepdim, Dest::Into(out))
    }
    /// [`Tensor::any`] over `dims` (empty: every dim).
    pub fn any_dims(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        reduce_into("any", ReduceOp::Any, self, dims, keepdim, Dest::New)
    }
    /// [`Tensor::any_dims`] into `out`.
    pub fn any_dims_out(&self, dims: &[i64], keepdim: bool, out: &Tensor) -> Result<Tensor> {
        reduce_into("any", ReduceOp::Any, self, dims, keepdim, Dest::Into(out))
    }
    /// How many elements are non-zero over `dims` (empty: every dim, PyTorch's `dim=None`),
    /// as i64.
    pub fn count_nonzero(&self, dims: &[i64]) -> Result<Tensor> {
        reduce_into(
            "count_nonzero",
            ReduceOp::CountNonzero,
            self,
            dims,
            false,
            Dest::New,
        )
    }
    /// [`Tensor::count_nonzero`] into `out`.
    pub fn count_nonzero_out(&self, dims: &[i64], out: &Tensor) -> Result<Tensor> {
        reduce_into(
            "count_nonzero",
            ReduceOp::CountNonzero,
            self,
            dims,
            false,
            Dest::Into(out),
        )
    }

    /// The variance over `dims` (empty: every dim) with divisor `max(n − correction, 0)`:
    /// `correction = 1.0` is the unbiased estimate (PyTorch's default), `0.0` the population
    /// variance; `correction ≥ n` gives inf (NaN where the sum of squares is 0). Floats only;
    /// two passes (mean, then squared deviations), f16/bf16 computed in f32.
    pub fn var(&self, dims: &[i64], correction: f64, keepdim: bool) -> Result<Tensor> {
        recorded(
            || var_impl("var", self, dims, correction, keepdim, false, Dest::New),
            |o| record_reduction(Red::Var(correction), self, dims, o),
        )
    }
    /// [`Tensor::var`] into `out`.
    pub fn var_out(
        &self,
        dims: &[i64],
        correction: f64,
        keepdim: bool,
        out: &Tensor,
    ) -> Result<Tensor> {
        var_impl(
            "var",
            self,
            dims,
            correction,
            keepdim,
            false,
            Dest::Into(out),
        )
    }
    /// The standard deviation: the square root of [`Tensor::var`].
    pub fn std(&self, dims: &[i64], correction: f64, keepdim: bool) -> Result<Tensor> {
        recorded(
            || var_impl("std", self, dims, correction, keepdim, true, Dest::New),
            |o| record_reduction(Red::Std(correction), self, dims, o),
        )
    }
    /// [`Tensor::std`] into `out`.
    pub fn std_out(
        &self,
        dims: &[i64],
        correction: f64,
        keepdim: bool,
        out: &Tensor,
    ) -> Result<Tensor> {
        var_impl(
            "std",
            self,
            dims,
            correction,
            keepdim,
            true,
            Dest::Into(out),
        )
    }

    /// The vector `p`-norm over `dims` (empty: every dim), PyTorch's
    /// `torch.linalg.vector_norm`: `p = 2` Euclidean, `1` sum of magnitudes, `f64::INFINITY`
    /// / `f64::NEG_INFINITY` the largest / smallest magnitude (an error over zero elements),
    /// `0` the number of non-zeros, any other `p` gives `(Σ|x|^p)^(1/p)`. Floats only;
    /// f16/bf16 computed in f32.
    pub fn norm(&self, p: f64, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("norm", &[self])? {
            return c.tensors[0].norm(p, dims, keepdim);
        }
        recorded(
            || norm_impl(self, p, dims, keepdim, Dest::New),
            |o| record_reduction(Red::Norm(p), self, dims, o),
        )
    }
    /// The `p`-norm of all elements, as a 0-d tensor (`x.norm()` in PyTorch is `p = 2`).
    pub fn norm_all(&self, p: f64) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("norm", &[self])? {
            return c.tensors[0].norm_all(p);
        }
        recorded(
            || norm_impl(self, p, &[], false, Dest::New),
            |o| record_reduction(Red::Norm(p), self, &[], o),
        )
    }
    /// [`Tensor::norm`] into `out`.
    pub fn norm_out(&self, p: f64, dims: &[i64], keepdim: bool, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("norm", &[self], || {
            norm_impl(self, p, dims, keepdim, Dest::Into(out))
        })
    }

    /// `log(Σ exp(x))` over `dims` (empty: every dim), computed stably (the max is
    /// subtracted first). Integer and bool inputs give f32; f16/bf16 compute in f32. Zero
    /// elements give -inf.
    pub fn logsumexp(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("logsumexp", &[self])? {
            return c.tensors[0].logsumexp(dims, keepdim);
        }
        recorded(
            || logsumexp_impl(self, dims, keepdim, Dest::New),
            |o| record_reduction(Red::LogSumExp, self, dims, o),
        )
    }
    /// [`Tensor::logsumexp`] into `out`.
    pub fn logsumexp_out(&self, dims: &[i64], keepdim: bool, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("logsumexp", &[self], || {
            logsumexp_impl(self, dims, keepdim, Dest::Into(out))
        })
    }
}

// ----- autograd: the kernels above run without recording; the functional forms record one
// node with the formula from `autograd::formulas`, `_out` forms refuse to record.
use crate::autograd::formulas::reduce::{record_index_reduction, record_reduction, Red};
use crate::autograd::record::{recorded, unrecorded_out};
