//! Sorting and selection frontends: `sort`, `argsort`, `topk`, `kthvalue`, `median`,
//! `unique`, `searchsorted`, `bincount`, `histc`.
//!
//! One order for all of them (see [`crate::backend::sort`]): numbers by value, **NaN above
//! +∞** (as PyTorch's sort), `-0.0 == 0.0`, `false < true`. Indices are i64.
//!
//! Deviations from PyTorch, all towards determinism:
//! - every sort is stable (`stable = false` is accepted and gives the stable order, which
//!   is one of the orders PyTorch allows);
//! - `topk` with `sorted = false` still returns its values sorted, and ties keep the lower
//!   index first (PyTorch leaves both unspecified);
//! - `kthvalue`/`median` report, among equal values, the one that the stable sort puts at
//!   that rank (PyTorch: any of them);
//! - `unique` always sorts (`sorted = false` is accepted; PyTorch's CPU kernel then returns
//!   an unspecified order);
//! - `searchsorted` compares with the same order, so NaNs in the sequence act as the largest
//!   values (PyTorch's binary search misorders them).

use crate::autograd::formulas::index::{record_value_selection, untracked};
use crate::autograd::record::unrecorded_out;
use crate::backend::sort::{self as prim, SortedRows};
use crate::backend::View;
use crate::ops::index::check_devices;
use crate::ops::output::{deliver_all, Dest, Out, Policy};
use crate::promote::result_type;
use crate::shape::wrap_dim;
use crate::{DType, Error, Layout, Operand, Result, Tensor};

fn with_dim(shape: &[usize], d: usize, n: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    if !s.is_empty() {
        s[d] = n;
    }
    s
}

fn dim_size(t: &Tensor, d: usize) -> usize {
    t.shape().get(d).copied().unwrap_or(1)
}

/// Runs a (values, indices) primitive into the caller's outputs (see [`deliver_all`]): both
/// checked first (the shape, exactly `x`'s dtype and i64, no overlapping elements, not
/// sharing memory with each other), written through their layouts — through temporaries
/// copied back when one shares memory with `x`. Bumps both versions.
fn deliver_pair(
    op: &'static str,
    x: &Tensor,
    shape: &[usize],
    values: &Tensor,
    indices: &Tensor,
    run: impl FnOnce(View, View) -> Result<()>,
) -> Result<(Tensor, Tensor)> {
    let inputs = [x.view_ref()];
    let policy = Policy::exact(op, &inputs, shape, x.device());
    let out = |t, dtype, what| Out {
        dest: Dest::Into(t),
        dtype,
        what,
    };
    let outs = [
        out(values, x.dtype(), "values"),
        out(indices, DType::I64, "indices"),
    ];
    let [v, i] = deliver_all(&policy, outs, |[v, i]| run(v, i))?;
    Ok((v, i))
}

impl Tensor {
    /// Sorts along `dim` (PyTorch's `torch.sort`): `(values, indices)` where `indices` (i64)
    /// are the positions along `dim`. Always stable; NaN sorts as the largest value (first
    /// when `descending`).
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec(vec![3.0f32, f32::NAN, -1.0, 3.0], [4])?;
    /// let (v, i) = x.sort(0, true, false)?;
    /// assert!(v.to_vec::<f32>()?[0].is_nan());
    /// assert_eq!(i.to_vec::<i64>()?, vec![1, 0, 3, 2]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn sort(&self, dim: i64, descending: bool, stable: bool) -> Result<(Tensor, Tensor)> {
        let _ = stable; // every sort is stable
        let d = wrap_dim("sort", dim, self.dim())?;
        let values = Tensor::alloc_contiguous(self.shape(), self.dtype(), &self.device())?;
        let indices = Tensor::alloc_contiguous(self.shape(), DType::I64, &self.device())?;
        prim::sort(
            self.view_ref(),
            d,
            descending,
            values.view_ref(),
            indices.view_ref(),
        )?;
        record_value_selection("SortBackward", self, d, &values, &indices)?;
        Ok((values, indices))
    }
    /// [`Tensor::sort`] written into `values` (exactly `self`'s dtype) and `indices` (i64),
    /// both of `self`'s shape, in any layouts whose elements don't share memory (PyTorch's
    /// `sort(..., out=(values, indices))`). Checked before anything is written; refused while
    /// `self` requires grad. Returns the two outputs.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::from_vec(vec![3i32, 1, 2], [3])?;
    /// let v = Tensor::zeros([3], DType::I32, &Device::Cpu)?;
    /// let i = Tensor::zeros([3], DType::I64, &Device::Cpu)?;
    /// x.sort_out(0, false, true, &v, &i)?;
    /// assert_eq!((v.to_vec::<i32>()?, i.to_vec::<i64>()?), (vec![1, 2, 3], vec![1, 2, 0]));
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn sort_out(
        &self,
        dim: i64,
        descending: bool,
        stable: bool,
        values: &Tensor,
        indices: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let _ = stable;
        let op = "sort";
        unrecorded_out(op, &[self], || {
            let d = wrap_dim(op, dim, self.dim())?;
            deliver_pair(op, self, self.shape(), values, indices, |v, i| {
                prim::sort(self.view_ref(), d, descending, v, i)
            })
        })
    }

    /// The indices that sort `self` along `dim` (the second result of [`Tensor::sort`]).
    pub fn argsort(&self, dim: i64, descending: bool, stable: bool) -> Result<Tensor> {
        untracked(|| Ok(self.sort(dim, descending, stable)?.1))
    }

    /// The `k` largest (or smallest) elements along `dim` and their indices, in sorted order;
    /// among equal values the lower index comes first. `sorted = false` is accepted and also
    /// gives sorted results.
    pub fn topk(
        &self,
        k: usize,
        dim: i64,
        largest: bool,
        sorted: bool,
    ) -> Result<(Tensor, Tensor)> {
        let _ = sorted;
        let op = "topk";
        let d = wrap_dim(op, dim, self.dim())?;
        let n = dim_size(self, d);
        if k > n {
            return Err(Error::invalid(
                op,
                format!(
                    "k ({k}) is larger than dim {d} of size {n} (shape {:?})",
                    self.shape()
                ),
            ));
        }
        let shape = with_dim(self.shape(), d, k);
        let values = Tensor::alloc_contiguous(&shape, self.dtype(), &self.device())?;
        let indices = Tensor::alloc_contiguous(&shape, DType::I64, &self.device())?;
        prim::topk(
            self.view_ref(),
            d,
            k,
            largest,
            values.view_ref(),
            indices.view_ref(),
        )?;
        record_value_selection("TopkBackward", self, d, &values, &indices)?;
        Ok((values, indices))
    }
    /// [`Tensor::topk`] written into `values` (exactly `self`'s dtype) and `indices` (i64),
    /// both of `self`'s shape with `dim` resized to `k`, in any layouts whose elements don't
    /// share memory. Checked before anything is written; refused while `self` requires grad.
    /// Returns the two outputs.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::from_vec(vec![0.5f32, 4.0, -1.0, 2.0], [4])?;
    /// let v = Tensor::zeros([2], DType::F32, &Device::Cpu)?;
    /// let i = Tensor::zeros([2], DType::I64, &Device::Cpu)?;
    /// x.topk_out(2, 0, true, true, &v, &i)?;
    /// assert_eq!((v.to_vec::<f32>()?, i.to_vec::<i64>()?), (vec![4.0, 2.0], vec![1, 3]));
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn topk_out(
        &self,
        k: usize,
        dim: i64,
        largest: bool,
        sorted: bool,
        values: &Tensor,
        indices: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let _ = sorted;
        let op = "topk";
        unrecorded_out(op, &[self], || {
            let d = wrap_dim(op, dim, self.dim())?;
            let n = dim_size(self, d);
            if k > n {
                return Err(Error::invalid(
                    op,
                    format!(
                        "k ({k}) is larger than dim {d} of size {n} (shape {:?})",
                        self.shape()
                    ),
                ));
            }
            let shape = with_dim(self.shape(), d, k);
            deliver_pair(op, self, &shape, values, indices, |v, i| {
                prim::topk(self.view_ref(), d, k, largest, v, i)
            })
        })
    }

    fn kth_impl(
        &self,
        name: &'static str,
        k0: usize,
        d: usize,
        keepdim: bool,
        nan_propagates: bool,
    ) -> Result<(Tensor, Tensor)> {
        let shape = with_dim(self.shape(), d, 1);
        let values = Tensor::alloc_contiguous(&shape, self.dtype(), &self.device())?;
        let indices = Tensor::alloc_contiguous(&shape, DType::I64, &self.device())?;
        prim::kth(
            self.view_ref(),
            d,
            k0,
            nan_propagates,
            values.view_ref(),
            indices.view_ref(),
        )?;
        record_value_selection(name, self, d, &values, &indices)?;
        if keepdim || self.dim() == 0 {
            Ok((values, indices))
        } else {
            Ok((values.squeeze(d as i64)?, indices.squeeze(d as i64)?))
        }
    }

    /// The `k`-th smallest element (1-based) along `dim` and its index (PyTorch's
    /// `kthvalue`; NaN counts as the largest value).
    pub fn kthvalue(&self, k: usize, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let op = "kthvalue";
        let d = wrap_dim(op, dim, self.dim())?;
        let n = dim_size(self, d);
        if k == 0 || k > n {
            return Err(Error::invalid(
                op,
                format!("k ({k}) is out of range for dim {d} of size {n}; k counts from 1"),
            ));
        }
        self.kth_impl("KthvalueBackward", k - 1, d, keepdim, false)
    }

    /// The lower median of all elements as a 0-d tensor (PyTorch's `median()`): element
    /// `(n − 1) / 2` of the sorted values; NaN if any element is NaN, and for an empty float
    /// tensor.
    pub fn median(&self) -> Result<Tensor> {
        let op = "median";
        let n = self.numel();
        if n == 0 {
            if self.dtype().is_float() {
                return Tensor::scalar(f64::NAN, self.dtype(), &self.device());
            }
            return Err(Error::invalid(
                op,
                format!(
                    "the median of an empty {} tensor is undefined",
                    self.dtype()
                ),
            ));
        }
        let flat = self.reshape(&[-1])?;
        let (v, _) = flat.kth_impl("MedianBackward", (n - 1) / 2, 0, false, true)?;
        v.reshape(&[])
    }

    /// The lower median along `dim` and its index (PyTorch's `median(dim, keepdim)`); a row
    /// holding NaN gives NaN and the index of its first NaN.
    pub fn median_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let op = "median";
        let d = wrap_dim(op, dim, self.dim())?;
        let n = dim_size(self, d);
        if n == 0 {
            return Err(Error::invalid(
                op,
                format!(
                    "dim {d} has size 0 (shape {:?}); a median needs at least one element",
                    self.shape()
                ),
            ));
        }
        self.kth_impl("MedianBackward", (n - 1) / 2, d, keepdim, true)
    }

    /// The distinct elements of `self` (flattened), sorted, as `torch.unique(x, sorted,
    /// return_inverse, return_counts)`: `(values, inverse, counts)`, where `inverse` (i64,
    /// `self`'s shape) maps each element to its value's position and `counts` (i64) counts
    /// each value. NaNs are all distinct (as PyTorch). Always sorted.
    pub fn unique(
        &self,
        sorted: bool,
        return_inverse: bool,
        return_counts: bool,
    ) -> Result<(Tensor, Option<Tensor>, Option<Tensor>)> {
        let _not_differentiable = crate::autograd::no_grad();
        let _ = sorted;
        let flat = self.reshape(&[-1])?;
        let (sv, perm) = flat.sort(0, false, true)?;
        let g = prim::count_unique_consecutive(sv.view_ref())?;
        let dev = self.device();
        let values = Tensor::alloc_contiguous(&[g], self.dtype(), &dev)?;
        let group = Tensor::alloc_contiguous(&[self.numel()], DType::I64, &dev)?;
        let counts = Tensor::alloc_contiguous(&[g], DType::I64, &dev)?;
        prim::unique_consecutive(
            sv.view_ref(),
            values.view_ref(),
            group.view_ref(),
            counts.view_ref(),
        )?;
        let inverse = if return_inverse {
            let inv = Tensor::alloc_contiguous(&[self.numel()], DType::I64, &dev)?;
            inv.scatter_(0, &perm, &group)?;
            Some(inv.reshape(&self.shape().iter().map(|&s| s as i64).collect::<Vec<_>>())?)
        } else {
            None
        };
        Ok((values, inverse, return_counts.then_some(counts)))
    }

    /// `torch.searchsorted(self, values, right=right)` with `self` the sorted sequence: for
    /// each value, the number of sequence elements `<` it (`<=` with `right`), as i64.
    /// `self` is 1-D (searched for every value) or has `values`' leading dims (one sequence
    /// per row). The two are compared in their promoted dtype.
    pub fn searchsorted(&self, values: &Tensor, right: bool) -> Result<Tensor> {
        let _not_differentiable = crate::autograd::no_grad();
        let op = "searchsorted";
        check_devices(op, self, &[values])?;
        if self.dim() == 0 {
            return Err(Error::invalid(
                op,
                "the sorted sequence must have at least 1 dim",
            ));
        }
        let leading_ok = self.dim() == 1
            || (values.dim() == self.dim()
                && self.shape()[..self.dim() - 1] == values.shape()[..values.dim() - 1]);
        if !leading_ok {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().to_vec(),
                rhs: values.shape().to_vec(),
                why: "differ: the sorted sequence (first) must be 1-D or share all but its last dim with the values (second)".into(),
            });
        }
        let common = result_type(&[Operand::Tensor(self), Operand::Tensor(values)]);
        if self.numel() == 0 {
            // empty sequences: no element is below any value (and the sequence's strides
            // address nothing, so no view over the values' shape may be built from them)
            return Tensor::zeros(values.shape(), DType::I64, &values.device());
        }
        let (seq, vals) = (self.to_dtype(common)?, values.to_dtype(common)?);
        let nd = vals.dim();
        let seq_strides: Vec<usize> = if seq.dim() == 1 {
            vec![0; nd]
        } else {
            let mut s = seq.stride()[..nd - 1].to_vec();
            s.push(0);
            s
        };
        let seq_l = Layout::new(vals.shape().to_vec(), seq_strides, seq.storage_offset());
        let rows = SortedRows {
            len: seq.shape()[seq.dim() - 1],
            stride: seq.stride()[seq.dim() - 1],
        };
        let out = Tensor::alloc_contiguous(vals.shape(), DType::I64, &vals.device())?;
        let seq_v = crate::backend::View {
            storage: seq.storage(),
            layout: &seq_l,
            dtype: seq.dtype(),
        };
        prim::searchsorted(seq_v, rows, vals.view_ref(), right, out.view_ref())?;
        Ok(out)
    }

    /// Counts of each non-negative integer of the 1-D `self` (PyTorch's `bincount`): length
    /// `max(max(self) + 1, minlength)`. Without weights the counts are i64; with weights
    /// (1-D, `self`'s length) their sums are f32 for f32 weights and f64 otherwise (as
    /// PyTorch). Sums accumulate in input order.
    pub fn bincount(&self, weights: Option<&Tensor>, minlength: usize) -> Result<Tensor> {
        let _not_differentiable = crate::autograd::no_grad();
        let op = "bincount";
        if self.dim() != 1 || !self.dtype().is_int() {
            return Err(Error::invalid(
                op,
                format!(
                    "takes a 1-D integer tensor of non-negative values, got a {} tensor of shape {:?}",
                    self.dtype(),
                    self.shape()
                ),
            ));
        }
        let weights = match weights {
            None => None,
            Some(w) => {
                check_devices(op, self, &[w])?;
                if w.dim() != 1 || w.shape() != self.shape() {
                    return Err(Error::ShapeMismatch {
                        op,
                        lhs: w.shape().to_vec(),
                        rhs: self.shape().to_vec(),
                        why: "differ: the weights (first) must be 1-D with the input's length (second)".into(),
                    });
                }
                Some(w.to_dtype(if w.dtype() == DType::F32 {
                    DType::F32
                } else {
                    DType::F64
                })?)
            }
        };
        let len = match crate::backend::index::extrema(self.view_ref())? {
            None => minlength,
            Some((lo, hi)) => {
                if lo.to_i64() < 0 {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "the input holds the negative value {}; bincount counts non-negative integers",
                            lo.to_i64()
                        ),
                    ));
                }
                (hi.to_i64() as usize + 1).max(minlength)
            }
        };
        let dtype = weights.as_ref().map_or(DType::I64, |w| w.dtype());
        let out = Tensor::zeros([len], dtype, &self.device())?;
        prim::bincount(
            self.view_ref(),
            weights.as_ref().map(|w| w.view_ref()),
            out.view_ref(),
        )?;
        Ok(out)
    }

    /// A histogram of `bins` equal bins over `[min, max]` (PyTorch's `histc`), in `self`'s
    /// (float) dtype. `min == max` uses the data's extrema (widened by 1 each way if they are
    /// equal too); elements outside the range and NaNs are ignored; `max` falls into the last
    /// bin. Counts are exact (accumulated as integers, then cast).
    pub fn histc(&self, bins: usize, min: f64, max: f64) -> Result<Tensor> {
        let _not_differentiable = crate::autograd::no_grad();
        let op = "histc";
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype(),
                hint: "; histc takes float tensors (convert with to_dtype)".into(),
            });
        }
        if bins == 0 {
            return Err(Error::invalid(op, "bins must be at least 1"));
        }
        let (mut lo, mut hi) = (min, max);
        if lo == hi && self.numel() > 0 {
            if let Some((a, b)) = crate::backend::index::extrema(self.view_ref())? {
                (lo, hi) = (a.to_f64(), b.to_f64());
            }
        }
        if lo == hi {
            lo -= 1.0;
            hi += 1.0;
        }
        if !lo.is_finite() || !hi.is_finite() {
            return Err(Error::invalid(
                op,
                format!("the range [{lo}, {hi}] is not finite"),
            ));
        }
        if lo > hi {
            return Err(Error::invalid(
                op,
                format!("max ({hi}) must be larger than min ({lo})"),
            ));
        }
        let out = Tensor::zeros([bins], self.dtype(), &self.device())?;
        prim::histc(self.view_ref(), lo, hi, out.view_ref())?;
        Ok(out)
    }
}
