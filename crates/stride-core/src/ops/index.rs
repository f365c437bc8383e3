//! Index frontends: gathers (`index_select`, `gather`, `take`, `embedding`, advanced indexing
//! with an index tensor or a bool mask), scatters (`scatter`, `scatter_add`, `scatter_reduce`,
//! `index_add`, `index_copy`, `index_fill`) and masked ops (`masked_fill`, `masked_select`,
//! `masked_scatter`, `nonzero`).
//!
//! Each is one backend primitive over views built here without copying: an `index_select`
//! index is a stride-0 broadcast of the 1-D index over the output, a scalar value a 0-d
//! tensor broadcast over the positions.
//!
//! Rules every op here keeps:
//! - **Index tensors** are i64, i32 or u32, in any layout (expanded ones included), and are
//!   read as they are: never cast, never copied (except when they share memory with the
//!   destination of an in-place op; then they are read as they were before the op).
//! - **Out-of-range indices** are an [`Error::IndexOutOfRange`] naming the first bad index (in
//!   logical order), the dim and its size, raised before anything is written.
//! - **Negative indices** follow PyTorch per op: `take`, `index_fill` and [`Tensor::index`]
//!   count them from the end; `gather`, `scatter*`, `index_select`, `index_add`, `index_copy`
//!   and `embedding` reject them (PyTorch's CPU kernels do the same).
//! - **Duplicate indices**: reducing scatters (`scatter_add`, `index_add`, `scatter_reduce`)
//!   combine the sources of one destination in logical order, so results are identical on
//!   every run and for any thread count; `scatter`/`index_copy` keep the **last** source in
//!   logical order (PyTorch leaves this undefined).
//! - **In-place forms** write through `self`'s layout, whatever its strides, and error on a
//!   `self` whose elements share memory (an expanded view).
//! - **Dtypes**: sources must have `self`'s dtype (as PyTorch requires); scalar values are
//!   cast to `self`'s dtype, as `fill` does.

use super::output::{check_out, check_out_exact, deliver, Policy};
use crate::autocast::autocast_inputs;
use crate::autograd::formulas::index::{self as grad, untracked, Scatter};
use crate::autograd::record::{in_place, unrecorded_out};
use crate::backend::common::check::bad_index_dtype;
use crate::backend::index::{self as prim, IndexDim, ScatterOp, INDEX_DTYPES};
use crate::backend::{TernaryOp, View};
use crate::ops::elementwise::ternary;
use crate::ops::output::Dest;
use crate::shape::{broadcast_shapes, wrap_dim};
use crate::{DType, Device, Error, Layout, Operand, Result, Scalar, Tensor};

/// The reduction of [`Tensor::scatter_reduce`] (PyTorch's `reduce=` strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScatterReduce {
    /// `"sum"`
    Sum,
    /// `"prod"`
    Prod,
    /// `"mean"`: the sum divided by the number of contributions (counting `self` with
    /// `include_self`); floor division for integer tensors, as PyTorch.
    Mean,
    /// `"amax"` (NaN propagates)
    Amax,
    /// `"amin"` (NaN propagates)
    Amin,
}

impl ScatterReduce {
    pub fn name(self) -> &'static str {
        match self {
            ScatterReduce::Sum => "sum",
            ScatterReduce::Prod => "prod",
            ScatterReduce::Mean => "mean",
            ScatterReduce::Amax => "amax",
            ScatterReduce::Amin => "amin",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// shared checks

pub(crate) fn check_index_dtype(op: &'static str, index: &Tensor) -> Result<()> {
    if INDEX_DTYPES.contains(&index.dtype()) {
        Ok(())
    } else {
        Err(bad_index_dtype(op, index.dtype()))
    }
}

pub(crate) fn check_devices(op: &'static str, first: &Tensor, others: &[&Tensor]) -> Result<()> {
    for t in others {
        if t.device() != first.device() {
            return Err(Error::DeviceMismatch {
                op,
                a: first.device(),
                b: t.device(),
            });
        }
    }
    Ok(())
}

fn check_same_dtype(op: &'static str, what: &str, t: &Tensor, want: DType) -> Result<()> {
    if t.dtype() != want {
        return Err(Error::invalid(
            op,
            format!(
                "{what} has dtype {} but self has dtype {want}; they must match (convert with to_dtype)",
                t.dtype()
            ),
        ));
    }
    Ok(())
}

fn check_mask(op: &'static str, mask: &Tensor) -> Result<()> {
    if mask.dtype() != DType::Bool {
        return Err(Error::UnsupportedDType {
            op,
            dtype: mask.dtype(),
            hint: " for the mask; it must be a bool tensor (compare with ne(0) first)".into(),
        });
    }
    Ok(())
}

/// A 0-d or 1-d index's length and stride.
fn vector_index(op: &'static str, index: &Tensor) -> Result<(usize, usize)> {
    match index.dim() {
        0 => Ok((1, 0)),
        1 => Ok((index.shape()[0], index.stride()[0])),
        n => Err(Error::invalid(
            op,
            format!(
                "the index must be 0-d or 1-d, got {n} dims (shape {:?})",
                index.shape()
            ),
        )),
    }
}

/// Shape and strides with a 0-d tensor seen as 1-d of size 1 (PyTorch's scatter/gather treat
/// 0-d and 1-d alike).
fn nonempty_dims(t: &Tensor) -> (Vec<usize>, Vec<usize>) {
    if t.dim() == 0 {
        (vec![1], vec![1])
    } else {
        (t.shape().to_vec(), t.stride().to_vec())
    }
}

/// Checks every value of `index` against `at`. The primitives validate an index through the
/// positions they visit; when another dim of the operand is empty they visit none, and an
/// out-of-range index would pass silently (`x[3, 0, 2].index_select(2, [5])`), so the
/// frontends call this when the positions are empty. PyTorch refuses these too.
fn check_index_values(index: &Tensor, at: &IndexDim) -> Result<()> {
    if index.numel() == 0 {
        return Ok(());
    }
    let Some((lo, hi)) = prim::extrema(index.view_ref())? else {
        return Ok(());
    };
    let size = at.size as i64;
    let min = if at.wrap { -size } else { 0 };
    if lo.to_i64() >= min && hi.to_i64() < size {
        return Ok(());
    }
    // an error path: read the index to name its first bad value in logical order
    let bad = index
        .to_dtype(DType::I64)?
        .to_vec::<i64>()?
        .into_iter()
        .find(|&i| i < min || i >= size)
        .unwrap_or(lo.to_i64());
    Err(at.out_of_range(bad))
}

/// A copy of `t` if it shares memory with `dst` (an in-place op then reads `t` as it was).
fn unalias(t: &Tensor, dst: &Tensor) -> Result<Tensor> {
    if t.shares_storage_with(dst) {
        t.clone_tensor()
    } else {
        Ok(t.clone())
    }
}

/// `value` as a 0-d tensor of `dtype` (a scalar, or a 0-d tensor cast as `fill` casts).
fn value_tensor(op: &'static str, value: Operand, dtype: DType, device: Device) -> Result<Tensor> {
    match value {
        Operand::Scalar(s) => Tensor::scalar(s, dtype, &device),
        Operand::Tensor(t) => {
            if t.dim() != 0 {
                return Err(Error::invalid(
                    op,
                    format!(
                        "the value must be a scalar or a 0-d tensor, got shape {:?}",
                        t.shape()
                    ),
                ));
            }
            if t.device() != device {
                return Err(Error::DeviceMismatch {
                    op,
                    a: device,
                    b: t.device(),
                });
            }
            t.to_dtype(dtype)
        }
    }
}

fn view<'a>(t: &'a Tensor, layout: &'a Layout) -> View<'a> {
    View {
        storage: t.storage(),
        layout,
        dtype: t.dtype(),
    }
}

// ---------------------------------------------------------------------------------------------
// gathers

/// The layout of `t` with a 0-d tensor seen as 1-d of size 1 (see [`nonempty_dims`]).
fn nonempty_layout(l: &Layout) -> Layout {
    if l.ndim() == 0 {
        Layout::new(vec![1], vec![1], l.offset())
    } else {
        l.clone()
    }
}

/// `out = x[(:,)*d, idx]`: the output's shape is `x.shape[..d] ++ idx.shape ++ x.shape[d+1..]`.
/// Records a backward node only for a fresh result (`_out` forms are not differentiable).
fn gather_along(
    op: &'static str,
    x: &Tensor,
    d: usize,
    idx: &Tensor,
    wrap: bool,
    dest: Dest,
) -> Result<Tensor> {
    check_index_dtype(op, idx)?;
    check_devices(op, x, &[idx])?;
    let (xs, xt) = (x.shape(), x.stride());
    let mut shape = xs[..d].to_vec();
    shape.extend_from_slice(idx.shape());
    shape.extend_from_slice(&xs[d + 1..]);
    let k = idx.dim();
    let zeros = |n: usize| std::iter::repeat_n(0usize, n);
    let src_strides: Vec<usize> = xt[..d]
        .iter()
        .copied()
        .chain(zeros(k))
        .chain(xt[d + 1..].iter().copied())
        .collect();
    let idx_strides: Vec<usize> = zeros(d)
        .chain(idx.stride().iter().copied())
        .chain(zeros(xs.len() - d - 1))
        .collect();
    let src_l = Layout::new(shape.clone(), src_strides, x.storage_offset());
    let idx_l = Layout::new(shape.clone(), idx_strides, idx.storage_offset());
    let at = IndexDim {
        op,
        dim: d,
        size: xs[d],
        stride: xt[d],
        wrap,
    };
    if let Dest::Into(out) = dest {
        // before the index check, so that a wrong output is named first
        check_out_exact(op, out, &shape, x.dtype(), x.device())?;
    }
    if shape.contains(&0) {
        check_index_values(idx, &at)?;
    }
    let inputs = [x.view_ref(), idx.view_ref()];
    let policy = Policy::exact(op, &inputs, &shape, x.device());
    let out = deliver(dest, &policy, x.dtype(), |o| {
        prim::gather(view(x, &src_l), view(idx, &idx_l), at, o)
    })?;
    if matches!(dest, Dest::New) {
        let name = match op {
            "index_select" => "IndexSelectBackward",
            "take" => "TakeBackward",
            "embedding" => "EmbeddingBackward",
            _ => "IndexBackward",
        };
        grad::record_gather_along(name, x, d, idx, wrap, &out)?;
    }
    Ok(out)
}

impl Tensor {
    /// The slices of `self` along `dim` at `index` (0-d or 1-d; i64, i32 or u32): the result
    /// has `self`'s shape with `dim` resized to `index.numel()`. Negative indices are out of
    /// range (as PyTorch's CPU kernel); any bad index is an [`Error::IndexOutOfRange`] naming
    /// the first one, the dim and its size.
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec((0..6).map(|v| v as f32).collect::<Vec<_>>(), [3, 2])?;
    /// let i = Tensor::from_vec(vec![2u32, 0, 2], [3])?;
    /// assert_eq!(x.index_select(0, &i)?.to_vec::<f32>()?, vec![4., 5., 0., 1., 4., 5.]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn index_select(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        self.index_select_impl(dim, index, Dest::New)
    }
    /// [`Tensor::index_select`] written into `out` (PyTorch's `index_select(..., out=)`):
    /// `out` must have the result's shape and exactly `self`'s dtype, in any layout whose
    /// elements don't share memory; it is written through that layout. Everything (indices
    /// included) is checked before anything is written, so an error leaves `out` unchanged.
    /// Like every `_out` form, refused while an input requires grad. Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::from_vec((0..6).map(|v| v as f32).collect::<Vec<_>>(), [3, 2])?;
    /// let i = Tensor::from_vec(vec![2i64, 0], [2])?;
    /// // a transposed output: written through its strides
    /// let out = Tensor::zeros([2, 2], DType::F32, &Device::Cpu)?.t()?;
    /// x.index_select_out(0, &i, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![4., 5., 0., 1.]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn index_select_out(&self, dim: i64, index: &Tensor, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("index_select", &[self, index], || {
            self.index_select_impl(dim, index, Dest::Into(out))
        })
    }

    fn index_select_impl(&self, dim: i64, index: &Tensor, dest: Dest) -> Result<Tensor> {
        let op = "index_select";
        let d = wrap_dim(op, dim, self.dim())?;
        check_index_dtype(op, index)?;
        let (n, st) = vector_index(op, index)?;
        let idx = index.with_layout(Layout::new(vec![n], vec![st], index.storage_offset()));
        if self.dim() == 0 {
            if n != 1 {
                return Err(Error::invalid(
                    op,
                    format!("a 0-d tensor can be indexed by exactly 1 index, got {n}"),
                ));
            }
            let x1 = self.reshape(&[1])?;
            return match dest {
                Dest::New => gather_along(op, &x1, 0, &idx, false, Dest::New)?.reshape(&[]),
                Dest::Into(out) => {
                    check_out_exact(op, out, &[], self.dtype(), self.device())?;
                    let o1 = out.with_layout(nonempty_layout(out.layout()));
                    gather_along(op, &x1, 0, &idx, false, Dest::Into(&o1))?;
                    Ok(out.clone())
                }
            };
        }
        gather_along(op, self, d, &idx, false, dest)
    }

    /// PyTorch's `gather`: `out[p] = self[p with p[dim] = index[p]]`. `index` has `self`'s
    /// number of dims and no dim larger than `self`'s (except `dim`); the result has
    /// `index`'s shape. Negative indices are out of range.
    ///
    /// Deviation from PyTorch: the index may also be i32 or u32 (PyTorch: int64 only), in any
    /// layout — an expanded index costs nothing (a run along which it is constant is one row
    /// copy).
    pub fn gather(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        self.gather_impl(dim, index, Dest::New)
    }
    /// [`Tensor::gather`] written into `out` (`index`'s shape, exactly `self`'s dtype, any
    /// non-overlapping layout), checked before anything is written (see
    /// [`Tensor::index_select_out`]). Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4], [2, 2])?;
    /// let i = Tensor::from_vec(vec![1i64, 0, 0, 0], [2, 2])?;
    /// let out = Tensor::zeros([2, 2], DType::I64, &Device::Cpu)?;
    /// x.gather_out(1, &i, &out)?;
    /// assert_eq!(out.to_vec::<i64>()?, vec![2, 1, 3, 3]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn gather_out(&self, dim: i64, index: &Tensor, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("gather", &[self, index], || {
            self.gather_impl(dim, index, Dest::Into(out))
        })
    }

    fn gather_impl(&self, dim: i64, index: &Tensor, dest: Dest) -> Result<Tensor> {
        let op = "gather";
        let d = wrap_dim(op, dim, self.dim())?;
        check_index_dtype(op, index)?;
        check_devices(op, self, &[index])?;
        let (xs, xt) = nonempty_dims(self);
        let (is, it) = nonempty_dims(index);
        check_positions(op, "index", &is, &xs, d, None)?;
        let mut src_strides = xt.clone();
        src_strides[d] = 0;
        let src_l = Layout::new(is.clone(), src_strides, self.storage_offset());
        let idx_l = Layout::new(is.clone(), it, index.storage_offset());
        let at = IndexDim {
            op,
            dim: d,
            size: xs[d],
            stride: xt[d],
            wrap: false,
        };
        let inputs = [self.view_ref(), index.view_ref()];
        let policy = Policy::exact(op, &inputs, index.shape(), self.device());
        let out = deliver(dest, &policy, self.dtype(), |o| {
            let out_l = nonempty_layout(o.layout);
            let o = View {
                layout: &out_l,
                ..o
            };
            prim::gather(view(self, &src_l), view(index, &idx_l), at, o)
        })?;
        if matches!(dest, Dest::New) {
            grad::record_gather(self, d, index, &out)?;
        }
        Ok(out)
    }

    /// The elements of `self` read as 1-D in logical order, at `index` (any shape; the result
    /// has `index`'s shape). Negative indices count from the end (PyTorch's `take`). A
    /// non-contiguous `self` is flattened by a copy first (as `reshape`).
    pub fn take(&self, index: &Tensor) -> Result<Tensor> {
        gather_along("take", &self.reshape(&[-1])?, 0, index, true, Dest::New)
    }
    /// [`Tensor::take`] written into `out` (`index`'s shape, exactly `self`'s dtype, any
    /// non-overlapping layout), checked before anything is written. Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::from_vec(vec![10i32, 20, 30, 40], [2, 2])?;
    /// let i = Tensor::from_vec(vec![-1i64, 0, 2], [3])?;
    /// let out = Tensor::zeros([3], DType::I32, &Device::Cpu)?;
    /// x.take_out(&i, &out)?;
    /// assert_eq!(out.to_vec::<i32>()?, vec![40, 10, 30]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn take_out(&self, index: &Tensor, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("take", &[self, index], || {
            gather_along(
                "take",
                &self.reshape(&[-1])?,
                0,
                index,
                true,
                Dest::Into(out),
            )
        })
    }

    /// Advanced indexing with an index tensor on one dim, PyTorch's `x[:, idx]` for `dim = 1`:
    /// the result's shape is `self.shape[..dim] ++ index.shape ++ self.shape[dim+1..]`.
    /// Negative indices count from the end (Python semantics).
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let x = Tensor::from_vec((0..6).map(|v| v as f32).collect::<Vec<_>>(), [2, 3])?;
    /// let i = Tensor::from_vec(vec![-1i64, 0, 1, 1], [2, 2])?;
    /// let y = x.index(1, &i)?;
    /// assert_eq!(y.shape(), &[2, 2, 2]);
    /// assert_eq!(y.to_vec::<f32>()?, vec![2., 0., 1., 1., 5., 3., 4., 4.]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn index(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        self.index_impl(dim, index, Dest::New)
    }
    /// [`Tensor::index`] written into `out` (PyTorch's `index.Tensor_out`): the result's
    /// shape, exactly `self`'s dtype, any non-overlapping layout; checked before anything is
    /// written. Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::from_vec(vec![1u8, 2, 3, 4, 5, 6], [2, 3])?;
    /// let i = Tensor::from_vec(vec![-1i64, 0], [2])?;
    /// let out = Tensor::zeros([2, 2], DType::U8, &Device::Cpu)?;
    /// x.index_out(1, &i, &out)?;
    /// assert_eq!(out.to_vec::<u8>()?, vec![3, 1, 6, 4]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn index_out(&self, dim: i64, index: &Tensor, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("index", &[self, index], || {
            self.index_impl(dim, index, Dest::Into(out))
        })
    }

    fn index_impl(&self, dim: i64, index: &Tensor, dest: Dest) -> Result<Tensor> {
        let op = "index";
        if self.dim() == 0 {
            return Err(Error::invalid(
                op,
                "a 0-d tensor has no dim to index; reshape it first",
            ));
        }
        let d = wrap_dim(op, dim, self.dim())?;
        gather_along(op, self, d, index, true, dest)
    }

    /// Embedding lookup with `self` as the `[num_embeddings, dim]` weight: the rows at
    /// `indices` (any shape), giving `indices.shape ++ [dim]` (PyTorch's
    /// `F.embedding(indices, weight)`). Negative indices are out of range.
    pub fn embedding(&self, indices: &Tensor) -> Result<Tensor> {
        self.embedding_impl(indices, Dest::New)
    }
    /// [`Tensor::embedding`] written into `out` (`indices.shape ++ [dim]`, exactly the
    /// weight's dtype, any non-overlapping layout), checked before anything is written — the
    /// lookup of a model's inference loop without an allocation per step. Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let w = Tensor::from_vec(vec![0.0f32, 0.5, 1.0, 1.5, 2.0, 2.5], [3, 2])?;
    /// let ids = Tensor::from_vec(vec![2u32, 2, 0], [3])?;
    /// let out = Tensor::zeros([3, 2], DType::F32, &Device::Cpu)?;
    /// w.embedding_out(&ids, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![2.0, 2.5, 2.0, 2.5, 0.0, 0.5]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn embedding_out(&self, indices: &Tensor, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("embedding", &[self, indices], || {
            self.embedding_impl(indices, Dest::Into(out))
        })
    }

    fn embedding_impl(&self, indices: &Tensor, dest: Dest) -> Result<Tensor> {
        let op = "embedding";
        if self.dim() != 2 {
            return Err(Error::invalid(
                op,
                format!(
                    "the weight must be 2-D [num_embeddings, embedding_dim], got shape {:?}",
                    self.shape()
                ),
            ));
        }
        gather_along(op, self, 0, indices, false, dest)
    }

    /// Boolean-mask indexing, PyTorch's `x[mask]`: `mask`'s shape must equal `self`'s leading
    /// dims; the result is `[count, self.shape[mask.dim()..]...]`, the selected slices in
    /// logical order.
    pub fn index_mask(&self, mask: &Tensor) -> Result<Tensor> {
        let op = "index_mask";
        check_mask(op, mask)?;
        check_devices(op, self, &[mask])?;
        let k = mask.dim();
        if k > self.dim() || mask.shape() != &self.shape()[..k] {
            return Err(Error::ShapeMismatch {
                op,
                lhs: mask.shape().to_vec(),
                rhs: self.shape().to_vec(),
                why: "differ: the mask's shape (first) must equal the leading dims of the indexed tensor (second)".into(),
            });
        }
        let rows: usize = mask.shape().iter().product();
        let positions = mask.reshape(&[-1])?.nonzero()?.reshape(&[-1])?;
        let mut shape = vec![rows as i64];
        shape.extend(self.shape()[k..].iter().map(|&s| s as i64));
        gather_along(op, &self.reshape(&shape)?, 0, &positions, false, Dest::New)
    }
}

/// PyTorch's scatter/gather shape rule: `pos` (the index's shape) has `x`'s number of dims and
/// is no larger than `x` off `d` (and no larger than `src`, if given, anywhere).
fn check_positions(
    op: &'static str,
    what: &str,
    pos: &[usize],
    x: &[usize],
    d: usize,
    src: Option<&[usize]>,
) -> Result<()> {
    let mismatch = |other: &[usize], why: String| Error::ShapeMismatch {
        op,
        lhs: pos.to_vec(),
        rhs: other.to_vec(),
        why,
    };
    if pos.len() != x.len() {
        return Err(mismatch(
            x,
            format!("differ in number of dims: the {what} (first) must have as many dims as self (second)"),
        ));
    }
    for k in 0..x.len() {
        if k != d && pos[k] > x[k] {
            return Err(mismatch(
                x,
                format!(
                    "differ: the {what} (first) may not be larger than self (second) in dim {k}"
                ),
            ));
        }
    }
    if let Some(s) = src {
        if s.len() != pos.len() {
            return Err(mismatch(
                s,
                format!("differ in number of dims: the {what} (first) must have as many dims as src (second)"),
            ));
        }
        for k in 0..s.len() {
            if pos[k] > s[k] {
                return Err(mismatch(
                    s,
                    format!(
                        "differ: the {what} (first) may not be larger than src (second) in dim {k}"
                    ),
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// scatters
//
// Every scatter has three forms. The in-place form (`scatter_`) writes through `self`; the
// functional form (`scatter`) runs the in-place kernel on a clone of `self`; the `_out` form
// runs it on `out` with `base = Some(self)`: after every check (indices included) `self` is
// copied into `out`, then the scatter writes through `out`'s layout — so an error leaves `out`
// unchanged, and the only extra pass is the copy PyTorch's `out=` overloads make too.

/// `base` copied into `dst` through `dst`'s layout (nothing to do when `base` is `dst`).
fn copy_base(op: &'static str, base: &Tensor, dst: &Tensor) -> Result<()> {
    if base.storage().same(dst.storage()) && base.layout() == dst.layout() {
        return Ok(());
    }
    super::output::copy_into(op, base, dst)
}

/// One scatter into `dst` (written through its layout): `index` and `src` laid out over the
/// positions' shape, axis `d`. With `base` (the `_out` forms), `base` is copied into `dst`
/// once everything has been checked, just before the scatter.
#[allow(clippy::too_many_arguments)]
fn scatter_into(
    op: &'static str,
    dst: &Tensor,
    d: usize,
    index: &Tensor,
    idx_l: &Layout,
    src: &Tensor,
    src_l: &Layout,
    sop: ScatterOp,
    include_self: bool,
    wrap: bool,
    base: Option<&Tensor>,
) -> Result<()> {
    check_out(op, dst, dst.shape(), dst.dtype(), dst.device())?;
    if sop != ScatterOp::Assign && dst.dtype() == DType::Bool {
        // the primitive refuses this too, but only after `base` would have been copied
        return Err(Error::UnsupportedDType {
            op,
            dtype: DType::Bool,
            hint: "; reducing scatters take numeric tensors (convert with to_dtype)".into(),
        });
    }
    let (xs, xt) = nonempty_dims(dst);
    let mut strides = xt.clone();
    strides[d] = 0;
    let dst_l = Layout::new(idx_l.shape().to_vec(), strides, dst.storage_offset());
    let at = IndexDim {
        op,
        dim: d,
        size: xs[d],
        stride: xt[d],
        wrap,
    };
    if let Some(b) = base {
        // the primitive checks the indices before its first write, but the copy of `base`
        // comes before the primitive: check them all here (one pass over the index)
        check_index_values(index, &at)?;
        copy_base(op, b, dst)?;
    } else if idx_l.shape().contains(&0) {
        check_index_values(index, &at)?;
    }
    prim::scatter(
        view(dst, &dst_l),
        view(index, idx_l),
        at,
        view(src, src_l),
        sop,
        include_self,
    )?;
    dst.storage().bump_version();
    Ok(())
}

/// Checks for `scatter(dim, index, src)`; returns (d, index, its layout).
fn scatter_index(
    op: &'static str,
    dst: &Tensor,
    dim: i64,
    index: &Tensor,
    src_shape: Option<&[usize]>,
) -> Result<(usize, Tensor, Layout)> {
    let d = wrap_dim(op, dim, dst.dim())?;
    check_index_dtype(op, index)?;
    check_devices(op, dst, &[index])?;
    let (is, _) = nonempty_dims(index);
    let (xs, _) = nonempty_dims(dst);
    check_positions(op, "index", &is, &xs, d, src_shape)?;
    let index = unalias(index, dst)?;
    let layout = Layout::new(is, nonempty_dims(&index).1, index.storage_offset());
    Ok((d, index, layout))
}

/// A 1-D (or 0-d) index broadcast over `positions` along axis `d`.
fn broadcast_vector_index(index: &Tensor, positions: &[usize], d: usize) -> Layout {
    let mut strides = vec![0; positions.len()];
    strides[d] = if index.dim() == 0 {
        0
    } else {
        index.stride()[0]
    };
    Layout::new(positions.to_vec(), strides, index.storage_offset())
}

/// `(d, index, positions)` for `index_add`/`index_copy`: `source` is `self` with `dim` resized
/// to `index.numel()`.
fn index_source_check(
    op: &'static str,
    dst: &Tensor,
    dim: i64,
    index: &Tensor,
    source: &Tensor,
) -> Result<(usize, Tensor, Vec<usize>)> {
    let d = wrap_dim(op, dim, dst.dim())?;
    check_index_dtype(op, index)?;
    check_devices(op, dst, &[index, source])?;
    check_same_dtype(op, "source", source, dst.dtype())?;
    let (n, _) = vector_index(op, index)?;
    let (xs, _) = nonempty_dims(dst);
    let (ss, _) = nonempty_dims(source);
    let mut want = xs.clone();
    want[d] = n;
    if ss != want {
        return Err(Error::ShapeMismatch {
            op,
            lhs: source.shape().to_vec(),
            rhs: want,
            why: format!(
                "differ: the source (first) must have self's shape with dim {d} resized to the index's length {n} (second)"
            ),
        });
    }
    Ok((d, unalias(index, dst)?, ss))
}

/// `index_add`'s alpha: a float alpha for an integer tensor is an error (as PyTorch).
fn check_alpha(op: &'static str, dtype: DType, alpha: Scalar) -> Result<()> {
    if !dtype.is_float() && matches!(alpha, Scalar::Float(_)) {
        return Err(Error::invalid(
            op,
            format!(
                "alpha must be an integer for a {dtype} tensor, got {}",
                alpha.to_f64()
            ),
        ));
    }
    Ok(())
}

/// The `ScatterOp` of a `scatter_reduce` reduction (`mean` sums, then divides).
fn reduce_op(reduce: ScatterReduce) -> ScatterOp {
    match reduce {
        ScatterReduce::Sum | ScatterReduce::Mean => ScatterOp::Add {
            alpha: Scalar::Int(1),
        },
        ScatterReduce::Prod => ScatterOp::Prod,
        ScatterReduce::Amax => ScatterOp::Amax,
        ScatterReduce::Amin => ScatterOp::Amin,
    }
}

impl Tensor {
    /// The shared frame of the scatter-family `_out` forms: refused under recording, `out`
    /// checked (`self`'s shape, exactly `self`'s dtype, device, no overlapping elements), then
    /// `run` (the in-place kernel on `out` with `base = self`). Returns `out`.
    fn scatter_family_out(
        &self,
        op: &'static str,
        out: &Tensor,
        others: &[&Tensor],
        run: impl FnOnce() -> Result<()>,
    ) -> Result<Tensor> {
        let mut inputs = vec![self];
        inputs.extend_from_slice(others);
        unrecorded_out(op, &inputs, || {
            check_devices(op, self, others)?;
            check_out_exact(op, out, self.shape(), self.dtype(), self.device())?;
            run()?;
            Ok(out.clone())
        })
    }

    /// PyTorch's `scatter_(dim, index, src)`: `self[p with p[dim] = index[p]] = src[p]` for
    /// every position `p` of `index`, written through `self`'s layout. `index` has `self`'s
    /// number of dims and is no larger than `src` (nor than `self` off `dim`). All indices
    /// are checked before anything is written; negatives are out of range. Returns `self`.
    ///
    /// Deviations from PyTorch: with duplicate indices the **last** source in logical order
    /// wins (PyTorch: undefined); `src` or `index` sharing memory with `self` are read as they
    /// were before the op (PyTorch: an error); indices may be i64, i32 or u32.
    pub fn scatter_(&self, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        in_place(
            "scatter_",
            self,
            &[src],
            || {
                self.scatter_op_("scatter_", dim, index, src, ScatterOp::Assign, true, None)?;
                Ok(self.clone())
            },
            |orig| orig.scatter(dim, index, src),
        )
    }
    /// Out-of-place [`Tensor::scatter_`].
    pub fn scatter(&self, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        let out = untracked(|| {
            let out = self.clone_tensor()?;
            out.scatter_op_("scatter", dim, index, src, ScatterOp::Assign, true, None)?;
            Ok(out)
        })?;
        let d = wrap_dim("scatter", dim, self.dim())?;
        grad::record_scatter(Scatter::Assign, self, d, index, src, &out)?;
        Ok(out)
    }
    /// [`Tensor::scatter`] written into `out` (PyTorch's `scatter(..., out=)`): `out` gets
    /// `self`'s values, then the scatter, through `out`'s layout. `out` must have `self`'s
    /// shape and exactly its dtype, in any layout whose elements don't share memory (it may
    /// be `self` itself, which makes this [`Tensor::scatter_`]). Everything, every index
    /// included, is checked before anything is written: an error leaves `out` unchanged.
    /// Refused while an input requires grad (as every `_out` form). Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::zeros([2, 3], DType::F32, &Device::Cpu)?;
    /// let i = Tensor::from_vec(vec![2i64, 0], [2, 1])?;
    /// let src = Tensor::from_vec(vec![1.0f32, 2.0], [2, 1])?;
    /// let out = Tensor::full([2, 3], 9.0, DType::F32, &Device::Cpu)?;
    /// x.scatter_out(1, &i, &src, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![0., 0., 1., 2., 0., 0.]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn scatter_out(
        &self,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
        out: &Tensor,
    ) -> Result<Tensor> {
        let op = "scatter";
        self.scatter_family_out(op, out, &[index, src], || {
            out.scatter_op_(op, dim, index, src, ScatterOp::Assign, true, Some(self))
        })
    }
    /// PyTorch's `scatter_(dim, index, value)`: writes a scalar (or 0-d tensor) value at the
    /// indexed positions.
    pub fn scatter_value_<'a>(
        &self,
        dim: i64,
        index: &Tensor,
        value: impl Into<Operand<'a>>,
    ) -> Result<Tensor> {
        let value = value.into();
        in_place(
            "scatter_",
            self,
            &operand_tensors(&value),
            || {
                self.scatter_value_op("scatter_", dim, index, value, ScatterOp::Assign, None)?;
                Ok(self.clone())
            },
            |orig| orig.scatter_value(dim, index, value),
        )
    }
    /// Out-of-place [`Tensor::scatter_value_`].
    pub fn scatter_value<'a>(
        &self,
        dim: i64,
        index: &Tensor,
        value: impl Into<Operand<'a>>,
    ) -> Result<Tensor> {
        let value = value.into();
        let out = untracked(|| {
            let out = self.clone_tensor()?;
            out.scatter_value_op("scatter", dim, index, value, ScatterOp::Assign, None)?;
            Ok(out)
        })?;
        let d = wrap_dim("scatter", dim, self.dim())? as i64;
        let idx = index.clone();
        grad::record_fill(
            "ScatterBackward",
            self,
            operand_tensors(&value).first().copied(),
            &out,
            move |g| g.scatter_value(d, &idx, 0.0),
        )?;
        Ok(out)
    }
    /// [`Tensor::scatter_value`] written into `out` (`self`'s shape, exactly its dtype, any
    /// non-overlapping layout; see [`Tensor::scatter_out`]). Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4], [4])?;
    /// let i = Tensor::from_vec(vec![3u32, 0], [2])?;
    /// let out = Tensor::zeros([4], DType::I64, &Device::Cpu)?;
    /// x.scatter_value_out(0, &i, 7i64, &out)?;
    /// assert_eq!(out.to_vec::<i64>()?, vec![7, 2, 3, 7]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn scatter_value_out<'a>(
        &self,
        dim: i64,
        index: &Tensor,
        value: impl Into<Operand<'a>>,
        out: &Tensor,
    ) -> Result<Tensor> {
        let op = "scatter";
        let value = value.into();
        let mut others = vec![index];
        others.extend(operand_tensors(&value));
        self.scatter_family_out(op, out, &others, || {
            out.scatter_value_op(op, dim, index, value, ScatterOp::Assign, Some(self))
        })
    }
    /// PyTorch's `scatter_add_`: `self[p with p[dim] = index[p]] += src[p]`. Duplicates
    /// accumulate in logical order, so the result is the same on every run and for any
    /// number of threads (PyTorch's CPU kernel is sequential; its CUDA kernel is not
    /// deterministic). Floats add in their compute type and round once per addition (f16 and
    /// bf16 round after every addition, as PyTorch); integers wrap.
    pub fn scatter_add_(&self, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        let add = ScatterOp::Add {
            alpha: Scalar::Int(1),
        };
        in_place(
            "scatter_add_",
            self,
            &[src],
            || {
                self.scatter_op_("scatter_add_", dim, index, src, add, true, None)?;
                Ok(self.clone())
            },
            |orig| orig.scatter_add(dim, index, src),
        )
    }
    /// Out-of-place [`Tensor::scatter_add_`].
    pub fn scatter_add(&self, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("scatter_add", &[self, src])? {
            return c.tensors[0].scatter_add(dim, index, &c.tensors[1]);
        }
        let out = untracked(|| {
            let out = self.clone_tensor()?;
            out.scatter_add_(dim, index, src)?;
            Ok(out)
        })?;
        let d = wrap_dim("scatter_add", dim, self.dim())?;
        grad::record_scatter(Scatter::Add, self, d, index, src, &out)?;
        Ok(out)
    }
    /// [`Tensor::scatter_add`] written into `out` (`self`'s shape, exactly its dtype, any
    /// non-overlapping layout; see [`Tensor::scatter_out`]): `out = self`, then the sources
    /// are added in logical order (deterministic, as [`Tensor::scatter_add_`]). Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::ones([3], DType::F32, &Device::Cpu)?;
    /// let i = Tensor::from_vec(vec![0i64, 2, 0], [3])?;
    /// let src = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?;
    /// let out = Tensor::zeros([3], DType::F32, &Device::Cpu)?;
    /// x.scatter_add_out(0, &i, &src, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![5., 1., 3.]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn scatter_add_out(
        &self,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
        out: &Tensor,
    ) -> Result<Tensor> {
        let op = "scatter_add";
        let add = ScatterOp::Add {
            alpha: Scalar::Int(1),
        };
        self.scatter_family_out(op, out, &[index, src], || {
            out.scatter_op_(op, dim, index, src, add, true, Some(self))
        })
    }
    /// PyTorch's `scatter_reduce_(dim, index, src, reduce, include_self)`. With
    /// `include_self == false` the old value of every destination that is hit is left out
    /// (destinations that are not hit keep it). `amax`/`amin` propagate NaN; `mean` floors for
    /// integer tensors. Deterministic, as [`Tensor::scatter_add_`].
    ///
    /// Deviation from PyTorch: bool tensors are not supported (convert with `to_dtype`).
    pub fn scatter_reduce_(
        &self,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
        reduce: ScatterReduce,
        include_self: bool,
    ) -> Result<Tensor> {
        let op = "scatter_reduce_";
        in_place(
            op,
            self,
            &[src],
            || self.scatter_reduce_raw(op, dim, index, src, reduce, include_self, None),
            |orig| orig.scatter_reduce(dim, index, src, reduce, include_self),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn scatter_reduce_raw(
        &self,
        op: &'static str,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
        reduce: ScatterReduce,
        include_self: bool,
        base: Option<&Tensor>,
    ) -> Result<Tensor> {
        let sop = reduce_op(reduce);
        // validates everything (a failure writes nothing)
        self.scatter_op_(op, dim, index, src, sop, include_self, base)?;
        if reduce == ScatterReduce::Mean {
            // divide by the number of contributions (PyTorch's composition), counted in i64:
            // a count in self's dtype wraps (i8, u8) or stops growing (f16 at 2048, bf16 at
            // 256) once enough sources hit one destination
            let count = Tensor::full(
                self.shape(),
                include_self as i64,
                DType::I64,
                &self.device(),
            )?;
            let one = Tensor::scalar(1i64, DType::I64, &self.device())?;
            count.scatter_value_op(op, dim, index, Operand::Tensor(&one), sop, None)?;
            count.clamp_min_(1i64)?;
            if self.dtype().is_float() {
                self.div_(&count)?;
            } else {
                self.floor_divide_(&count)?;
            }
        }
        Ok(self.clone())
    }
    /// Out-of-place [`Tensor::scatter_reduce_`].
    pub fn scatter_reduce(
        &self,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
        reduce: ScatterReduce,
        include_self: bool,
    ) -> Result<Tensor> {
        let out = untracked(|| {
            let out = self.clone_tensor()?;
            out.scatter_reduce_raw(
                "scatter_reduce_",
                dim,
                index,
                src,
                reduce,
                include_self,
                None,
            )?;
            Ok(out)
        })?;
        let d = wrap_dim("scatter_reduce", dim, self.dim())?;
        let kind = Scatter::Reduce(reduce, include_self);
        grad::record_scatter(kind, self, d, index, src, &out)?;
        Ok(out)
    }
    /// [`Tensor::scatter_reduce`] written into `out` (`self`'s shape, exactly its dtype, any
    /// non-overlapping layout; see [`Tensor::scatter_out`]). Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, ScatterReduce, Tensor};
    /// let x = Tensor::from_vec(vec![5.0f32, 5.0], [2])?;
    /// let i = Tensor::from_vec(vec![0i64, 0, 1], [3])?;
    /// let src = Tensor::from_vec(vec![1.0f32, 3.0, 8.0], [3])?;
    /// let out = Tensor::zeros([2], DType::F32, &Device::Cpu)?;
    /// x.scatter_reduce_out(0, &i, &src, ScatterReduce::Mean, false, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![2.0, 8.0]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn scatter_reduce_out(
        &self,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
        reduce: ScatterReduce,
        include_self: bool,
        out: &Tensor,
    ) -> Result<Tensor> {
        let op = "scatter_reduce";
        self.scatter_family_out(op, out, &[index, src], || {
            out.scatter_reduce_raw(op, dim, index, src, reduce, include_self, Some(self))?;
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn scatter_op_(
        &self,
        op: &'static str,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
        sop: ScatterOp,
        include_self: bool,
        base: Option<&Tensor>,
    ) -> Result<()> {
        check_devices(op, self, &[src])?;
        check_same_dtype(op, "src", src, self.dtype())?;
        let (ss, _) = nonempty_dims(src);
        let (d, index, idx_l) = scatter_index(op, self, dim, index, Some(&ss))?;
        let src = unalias(src, self)?;
        let src_l = Layout::new(
            idx_l.shape().to_vec(),
            nonempty_dims(&src).1,
            src.storage_offset(),
        );
        scatter_into(
            op,
            self,
            d,
            &index,
            &idx_l,
            &src,
            &src_l,
            sop,
            include_self,
            false,
            base,
        )
    }

    fn scatter_value_op(
        &self,
        op: &'static str,
        dim: i64,
        index: &Tensor,
        value: Operand,
        sop: ScatterOp,
        base: Option<&Tensor>,
    ) -> Result<()> {
        let v = unalias(&value_tensor(op, value, self.dtype(), self.device())?, self)?;
        let (d, index, idx_l) = scatter_index(op, self, dim, index, None)?;
        let src_l = Layout::new(
            idx_l.shape().to_vec(),
            vec![0; idx_l.ndim()],
            v.storage_offset(),
        );
        scatter_into(
            op, self, d, &index, &idx_l, &v, &src_l, sop, true, false, base,
        )
    }

    /// PyTorch's `index_add_(dim, index, source, alpha)`: `self[.., index[i], ..] +=
    /// alpha·source[.., i, ..]`. `alpha` is cast to `self`'s dtype first (as PyTorch); a
    /// float `alpha` for an integer tensor is an error. Duplicates accumulate in order
    /// (deterministic, as [`Tensor::scatter_add_`]); negative indices are out of range.
    ///
    /// Deviation from PyTorch: bool tensors are not supported.
    pub fn index_add_(
        &self,
        dim: i64,
        index: &Tensor,
        source: &Tensor,
        alpha: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let op = "index_add_";
        let alpha = alpha.into();
        check_alpha(op, self.dtype(), alpha)?;
        in_place(
            op,
            self,
            &[source],
            || {
                self.index_source_op(op, dim, index, source, ScatterOp::Add { alpha }, None)?;
                Ok(self.clone())
            },
            |orig| orig.index_add(dim, index, source, alpha),
        )
    }
    /// Out-of-place [`Tensor::index_add_`].
    pub fn index_add(
        &self,
        dim: i64,
        index: &Tensor,
        source: &Tensor,
        alpha: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let alpha = alpha.into();
        let out = untracked(|| {
            let out = self.clone_tensor()?;
            out.index_add_(dim, index, source, alpha)?;
            Ok(out)
        })?;
        let d = wrap_dim("index_add", dim, self.dim())?;
        grad::record_index_source(false, self, d, index, source, alpha.to_f64(), &out)?;
        Ok(out)
    }
    /// [`Tensor::index_add`] written into `out` (`self`'s shape, exactly its dtype, any
    /// non-overlapping layout; see [`Tensor::scatter_out`]). Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::zeros([3, 2], DType::F64, &Device::Cpu)?;
    /// let i = Tensor::from_vec(vec![2i32, 2], [2])?;
    /// let src = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2])?;
    /// let out = Tensor::zeros([3, 2], DType::F64, &Device::Cpu)?;
    /// x.index_add_out(0, &i, &src, 0.5, &out)?;
    /// assert_eq!(out.to_vec::<f64>()?, vec![0., 0., 0., 0., 2., 3.]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn index_add_out(
        &self,
        dim: i64,
        index: &Tensor,
        source: &Tensor,
        alpha: impl Into<Scalar>,
        out: &Tensor,
    ) -> Result<Tensor> {
        let op = "index_add";
        let alpha = alpha.into();
        self.scatter_family_out(op, out, &[index, source], || {
            check_alpha(op, self.dtype(), alpha)?;
            let sop = ScatterOp::Add { alpha };
            out.index_source_op(op, dim, index, source, sop, Some(self))
        })
    }
    /// PyTorch's `index_copy_(dim, index, source)`: `self[.., index[i], ..] =
    /// source[.., i, ..]`; with duplicate indices the last wins (PyTorch: undefined).
    pub fn index_copy_(&self, dim: i64, index: &Tensor, source: &Tensor) -> Result<Tensor> {
        let op = "index_copy_";
        in_place(
            op,
            self,
            &[source],
            || {
                self.index_source_op(op, dim, index, source, ScatterOp::Assign, None)?;
                Ok(self.clone())
            },
            |orig| orig.index_copy(dim, index, source),
        )
    }
    /// Out-of-place [`Tensor::index_copy_`].
    pub fn index_copy(&self, dim: i64, index: &Tensor, source: &Tensor) -> Result<Tensor> {
        let out = untracked(|| {
            let out = self.clone_tensor()?;
            out.index_copy_(dim, index, source)?;
            Ok(out)
        })?;
        let d = wrap_dim("index_copy", dim, self.dim())?;
        grad::record_index_source(true, self, d, index, source, 1.0, &out)?;
        Ok(out)
    }
    /// [`Tensor::index_copy`] written into `out` (`self`'s shape, exactly its dtype, any
    /// non-overlapping layout; see [`Tensor::scatter_out`]). Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::zeros([3], DType::I32, &Device::Cpu)?;
    /// let i = Tensor::from_vec(vec![1i64], [1])?;
    /// let src = Tensor::from_vec(vec![5i32], [1])?;
    /// let out = Tensor::zeros([3], DType::I32, &Device::Cpu)?;
    /// x.index_copy_out(0, &i, &src, &out)?;
    /// assert_eq!(out.to_vec::<i32>()?, vec![0, 5, 0]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn index_copy_out(
        &self,
        dim: i64,
        index: &Tensor,
        source: &Tensor,
        out: &Tensor,
    ) -> Result<Tensor> {
        let op = "index_copy";
        self.scatter_family_out(op, out, &[index, source], || {
            out.index_source_op(op, dim, index, source, ScatterOp::Assign, Some(self))
        })
    }

    fn index_source_op(
        &self,
        op: &'static str,
        dim: i64,
        index: &Tensor,
        source: &Tensor,
        sop: ScatterOp,
        base: Option<&Tensor>,
    ) -> Result<()> {
        let (d, index, positions) = index_source_check(op, self, dim, index, source)?;
        let source = unalias(source, self)?;
        let idx_l = broadcast_vector_index(&index, &positions, d);
        let src_l = Layout::new(positions, nonempty_dims(&source).1, source.storage_offset());
        scatter_into(
            op, self, d, &index, &idx_l, &source, &src_l, sop, true, false, base,
        )
    }

    /// PyTorch's `index_fill_(dim, index, value)`: the slices at `index` (0-d or 1-d) along
    /// `dim` are set to `value` (a scalar or a 0-d tensor). Negative indices count from the
    /// end (as PyTorch's `index_fill`).
    pub fn index_fill_<'a>(
        &self,
        dim: i64,
        index: &Tensor,
        value: impl Into<Operand<'a>>,
    ) -> Result<Tensor> {
        let value = value.into();
        in_place(
            "index_fill_",
            self,
            &operand_tensors(&value),
            || self.index_fill_raw("index_fill_", dim, index, value, None),
            |orig| orig.index_fill(dim, index, value),
        )
    }

    fn index_fill_raw(
        &self,
        op: &'static str,
        dim: i64,
        index: &Tensor,
        value: Operand,
        base: Option<&Tensor>,
    ) -> Result<Tensor> {
        let d = wrap_dim(op, dim, self.dim())?;
        check_index_dtype(op, index)?;
        check_devices(op, self, &[index])?;
        let (n, _) = vector_index(op, index)?;
        let v = unalias(&value_tensor(op, value, self.dtype(), self.device())?, self)?;
        let index = unalias(index, self)?;
        let mut positions = nonempty_dims(self).0;
        positions[d] = n;
        let idx_l = broadcast_vector_index(&index, &positions, d);
        let src_l = Layout::new(
            positions.clone(),
            vec![0; positions.len()],
            v.storage_offset(),
        );
        scatter_into(
            op,
            self,
            d,
            &index,
            &idx_l,
            &v,
            &src_l,
            ScatterOp::Assign,
            true,
            true,
            base,
        )?;
        Ok(self.clone())
    }
    /// Out-of-place [`Tensor::index_fill_`].
    pub fn index_fill<'a>(
        &self,
        dim: i64,
        index: &Tensor,
        value: impl Into<Operand<'a>>,
    ) -> Result<Tensor> {
        let value = value.into();
        let out = untracked(|| {
            let out = self.clone_tensor()?;
            out.index_fill_raw("index_fill_", dim, index, value, None)?;
            Ok(out)
        })?;
        let d = wrap_dim("index_fill", dim, self.dim())? as i64;
        let idx = index.clone();
        grad::record_fill(
            "IndexFillBackward",
            self,
            operand_tensors(&value).first().copied(),
            &out,
            move |g| g.index_fill(d, &idx, 0.0),
        )?;
        Ok(out)
    }
    /// [`Tensor::index_fill`] written into `out` (`self`'s shape, exactly its dtype, any
    /// non-overlapping layout; see [`Tensor::scatter_out`]). Negative indices count from the
    /// end. Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::ones([2, 3], DType::F32, &Device::Cpu)?;
    /// let i = Tensor::from_vec(vec![-1i64], [1])?;
    /// let out = Tensor::zeros([3, 2], DType::F32, &Device::Cpu)?.t()?; // any layout
    /// x.index_fill_out(1, &i, 0.0, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![1., 1., 0., 1., 1., 0.]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn index_fill_out<'a>(
        &self,
        dim: i64,
        index: &Tensor,
        value: impl Into<Operand<'a>>,
        out: &Tensor,
    ) -> Result<Tensor> {
        let op = "index_fill";
        let value = value.into();
        let mut others = vec![index];
        others.extend(operand_tensors(&value));
        self.scatter_family_out(op, out, &others, || {
            out.index_fill_raw(op, dim, index, value, Some(self))?;
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------------------------
// masked ops

impl Tensor {
    /// `self` where `mask` is false, `value` (a scalar or 0-d tensor, cast to `self`'s dtype)
    /// where it is true, written through `self`'s layout; `mask` (bool) broadcasts to
    /// `self`'s shape.
    pub fn masked_fill_<'a>(&self, mask: &Tensor, value: impl Into<Operand<'a>>) -> Result<Tensor> {
        let op = "masked_fill_";
        check_mask(op, mask)?;
        check_devices(op, self, &[mask])?;
        mask.layout().broadcast_to(op, self.shape())?;
        let value = value.into();
        in_place(
            op,
            self,
            &operand_tensors(&value),
            || self.masked_fill_raw(mask, value),
            |orig| orig.masked_fill(mask, value),
        )
    }

    fn masked_fill_raw(&self, mask: &Tensor, value: Operand) -> Result<Tensor> {
        let op = "masked_fill_";
        let v = value_tensor(op, value, self.dtype(), self.device())?;
        ternary(
            TernaryOp::Where,
            Operand::Tensor(mask),
            Operand::Tensor(&v),
            Operand::Tensor(self),
            Dest::Into(self),
            true,
        )
    }
    /// Out-of-place [`Tensor::masked_fill_`]: the result has the broadcast shape of `self` and
    /// `mask`, and `self`'s dtype.
    pub fn masked_fill<'a>(&self, mask: &Tensor, value: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.masked_fill_impl(mask, value.into(), Dest::New)
    }
    /// [`Tensor::masked_fill`] written into `out`: `out` must have the broadcast shape of
    /// `self` and `mask` and exactly `self`'s dtype, in any layout whose elements don't share
    /// memory; checked before anything is written. Refused while an input requires grad.
    /// Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?;
    /// let m = Tensor::from_vec(vec![false, true], [2, 1])?; // broadcasts: out is [2, 3]
    /// let out = Tensor::zeros([2, 3], DType::F32, &Device::Cpu)?;
    /// x.masked_fill_out(&m, -1.0, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![1., 2., 3., -1., -1., -1.]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn masked_fill_out<'a>(
        &self,
        mask: &Tensor,
        value: impl Into<Operand<'a>>,
        out: &Tensor,
    ) -> Result<Tensor> {
        let value = value.into();
        let mut inputs = vec![self, mask];
        inputs.extend(operand_tensors(&value));
        unrecorded_out("masked_fill", &inputs, || {
            self.masked_fill_impl(mask, value, Dest::Into(out))
        })
    }

    fn masked_fill_impl(&self, mask: &Tensor, value: Operand, dest: Dest) -> Result<Tensor> {
        let op = "masked_fill";
        check_mask(op, mask)?;
        check_devices(op, self, &[mask])?;
        let shape = broadcast_shapes(op, self.shape(), mask.shape())?;
        if let Dest::Into(out) = dest {
            check_out_exact(op, out, &shape, self.dtype(), self.device())?;
        }
        let v = value_tensor(op, value, self.dtype(), self.device())?;
        let out = ternary(
            TernaryOp::Where,
            Operand::Tensor(mask),
            Operand::Tensor(&v),
            Operand::Tensor(self),
            dest,
            false,
        )?;
        debug_assert_eq!(out.dtype(), self.dtype());
        Ok(out)
    }

    /// The elements of `self` where `mask` is true, as a 1-D tensor in logical order (`self`
    /// and `mask` broadcast together).
    pub fn masked_select(&self, mask: &Tensor) -> Result<Tensor> {
        self.masked_select_impl(mask, Dest::New)
    }
    /// [`Tensor::masked_select`] written into `out`, which must be 1-D with exactly as many
    /// elements as `mask` has true values (stride does not resize outputs; count them with
    /// `mask.count_nonzero(&[])` first) and exactly `self`'s dtype, in any non-overlapping
    /// layout. Checked before anything is written. Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4], [2, 2])?;
    /// let m = Tensor::from_vec(vec![true, false, false, true], [2, 2])?;
    /// let out = Tensor::zeros([2], DType::I64, &Device::Cpu)?;
    /// x.masked_select_out(&m, &out)?;
    /// assert_eq!(out.to_vec::<i64>()?, vec![1, 4]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn masked_select_out(&self, mask: &Tensor, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("masked_select", &[self, mask], || {
            self.masked_select_impl(mask, Dest::Into(out))
        })
    }

    fn masked_select_impl(&self, mask: &Tensor, dest: Dest) -> Result<Tensor> {
        let op = "masked_select";
        check_mask(op, mask)?;
        check_devices(op, self, &[mask])?;
        let shape = broadcast_shapes(op, self.shape(), mask.shape())?;
        let xl = self.layout().broadcast_to(op, &shape)?;
        let ml = mask.layout().broadcast_to(op, &shape)?;
        let n = prim::count_nonzero(view(mask, &ml))?;
        let inputs = [self.view_ref(), mask.view_ref()];
        let shape = [n];
        let policy = Policy::exact(op, &inputs, &shape, self.device());
        let out = deliver(dest, &policy, self.dtype(), |o| {
            prim::masked_select(view(self, &xl), view(mask, &ml), o)
        })?;
        if matches!(dest, Dest::New) {
            grad::record_masked_select(self, mask, &out)?;
        }
        Ok(out)
    }

    /// PyTorch's `masked_scatter_`: the positions where `mask` (broadcast to `self`'s shape)
    /// is true, in logical order, take `source`'s elements in logical order. `source` needs
    /// at least as many elements as `mask` has true values, and `self`'s dtype.
    pub fn masked_scatter_(&self, mask: &Tensor, source: &Tensor) -> Result<Tensor> {
        in_place(
            "masked_scatter_",
            self,
            &[source],
            || self.masked_scatter_raw("masked_scatter_", mask, source, None),
            |orig| orig.masked_scatter(mask, source),
        )
    }

    fn masked_scatter_raw(
        &self,
        op: &'static str,
        mask: &Tensor,
        source: &Tensor,
        base: Option<&Tensor>,
    ) -> Result<Tensor> {
        check_mask(op, mask)?;
        check_devices(op, self, &[mask, source])?;
        check_same_dtype(op, "source", source, self.dtype())?;
        mask.layout().broadcast_to(op, self.shape())?;
        check_out(op, self, self.shape(), self.dtype(), self.device())?;
        // a mask that shares memory with self (a bool self) is read as it was
        let mask = unalias(mask, self)?;
        let ml = mask.layout().broadcast_to(op, self.shape())?;
        let src = unalias(source, self)?.reshape(&[-1])?;
        if let Some(b) = base {
            // the primitive checks the source's length before its first write, but the copy
            // of `base` comes first: check it here
            let need = prim::count_nonzero(view(&mask, &ml))?;
            if need > src.numel() {
                return Err(crate::backend::index::masked_scatter_short(
                    need,
                    src.numel(),
                ));
            }
            copy_base(op, b, self)?;
        }
        prim::masked_scatter(self.view_ref(), view(&mask, &ml), src.view_ref())?;
        self.storage().bump_version();
        Ok(self.clone())
    }
    /// Out-of-place [`Tensor::masked_scatter_`]: the result has the broadcast shape of `self`
    /// and `mask`.
    pub fn masked_scatter(&self, mask: &Tensor, source: &Tensor) -> Result<Tensor> {
        let op = "masked_scatter";
        check_mask(op, mask)?;
        let shape = broadcast_shapes(op, self.shape(), mask.shape())?;
        let out = untracked(|| {
            let out = self
                .broadcast_to(shape.as_slice())?
                .clone_with(crate::MemoryFormat::Contiguous)?;
            out.masked_scatter_raw("masked_scatter_", mask, source, None)
        })?;
        grad::record_masked_scatter(self, mask, source, &out)?;
        Ok(out)
    }
    /// [`Tensor::masked_scatter`] written into `out`: `out` must have the broadcast shape of
    /// `self` and `mask` and exactly `self`'s dtype, in any non-overlapping layout; it gets
    /// `self` (broadcast), then `source`'s leading elements at the true positions. Everything
    /// (the source's length included) is checked before anything is written. Returns `out`.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let x = Tensor::zeros([2, 2], DType::F32, &Device::Cpu)?;
    /// let m = Tensor::from_vec(vec![false, true, true, false], [2, 2])?;
    /// let src = Tensor::from_vec(vec![7.0f32, 8.0, 9.0], [3])?;
    /// let out = Tensor::ones([2, 2], DType::F32, &Device::Cpu)?;
    /// x.masked_scatter_out(&m, &src, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![0., 7., 8., 0.]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn masked_scatter_out(
        &self,
        mask: &Tensor,
        source: &Tensor,
        out: &Tensor,
    ) -> Result<Tensor> {
        let op = "masked_scatter";
        unrecorded_out(op, &[self, mask, source], || {
            check_mask(op, mask)?;
            check_devices(op, self, &[mask, source])?;
            check_same_dtype(op, "source", source, self.dtype())?;
            let shape = broadcast_shapes(op, self.shape(), mask.shape())?;
            check_out_exact(op, out, &shape, self.dtype(), self.device())?;
            out.masked_scatter_raw(op, mask, source, Some(self))
        })
    }

    /// The coordinates of the non-zero (true) elements, in logical order: an i64 tensor of
    /// shape `[count, self.dim()]`.
    pub fn nonzero(&self) -> Result<Tensor> {
        let n = prim::count_nonzero(self.view_ref())?;
        let out = Tensor::alloc_contiguous(&[n, self.dim()], DType::I64, &self.device())?;
        prim::nonzero(self.view_ref(), out.view_ref())?;
        Ok(out)
    }
}

/// The tensor of an operand, if it is one (for `in_place`'s list of inputs).
fn operand_tensors<'a>(v: &Operand<'a>) -> Vec<&'a Tensor> {
    match v {
        Operand::Tensor(t) => vec![*t],
        Operand::Scalar(_) => vec![],
    }
}
