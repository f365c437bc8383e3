//! View ops: new layouts over the same storage, never a copy (except `reshape`, `contiguous`
//! and `clone`, which say so). Each records its backward when autograd is on.

use crate::autograd::formulas::views::{
    record_as_strided, record_copy, record_view, ViewFn, ViewGrad,
};
use crate::autograd::view_meta::mark_view;
use crate::backend;
use crate::creation::MemoryFormat;
use crate::layout::infer_shape;
use crate::shape::wrap_dim;
use crate::{Error, Layout, Result, Shape, Tensor};
use std::sync::Arc;

impl Tensor {
    /// A view through `layout`, recorded with backward `how`.
    fn view_as_layout(
        &self,
        name: &'static str,
        layout: Layout,
        how: impl FnOnce() -> ViewGrad,
    ) -> Result<Tensor> {
        let out = self.with_layout(layout);
        if self.requires_grad() {
            record_view(name, self, &out, how())?;
        }
        mark_view(self, &out);
        Ok(out)
    }
    fn scatter_grad(f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static) -> ViewGrad {
        ViewGrad::Scatter(Arc::new(f) as ViewFn)
    }

    /// The same elements in a new shape, sharing storage. Errors if the layout can't express
    /// it (e.g. flattening a transpose); `-1` infers one size.
    pub fn view(&self, shape: &[i64]) -> Result<Tensor> {
        let new_shape = infer_shape("view", shape, self.numel())?;
        match self.layout().view_strides(&new_shape) {
            Some(strides) => {
                let l = self.layout().with_shape_strides(new_shape, strides);
                self.view_as_layout("ViewBackward", l, || ViewGrad::Reshape)
            }
            None => Err(Error::NotViewable {
                op: "view",
                why: format!(
                    "a tensor of shape {:?} and strides {:?} can't be viewed as {:?} without a copy; use reshape (which copies when needed) or call contiguous() first",
                    self.shape(),
                    self.stride(),
                    new_shape
                ),
            }),
        }
    }
    /// Like [`Tensor::view`], but copies (to a contiguous tensor) when a view is impossible.
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        let new_shape = infer_shape("reshape", shape, self.numel())?;
        match self.layout().view_strides(&new_shape) {
            Some(strides) => {
                let l = self.layout().with_shape_strides(new_shape, strides);
                self.view_as_layout("ViewBackward", l, || ViewGrad::Reshape)
            }
            None => self.contiguous()?.view(shape),
        }
    }
    pub fn transpose(&self, d0: i64, d1: i64) -> Result<Tensor> {
        let l = self.layout().transpose("transpose", d0, d1)?;
        self.view_as_layout("TransposeBackward", l, || {
            let n = self.dim().max(1) as i64;
            let (a, b) = (d0.rem_euclid(n), d1.rem_euclid(n));
            let mut inv: Vec<i64> = (0..self.dim() as i64).collect();
            if self.dim() > 0 {
                inv.swap(a as usize, b as usize);
            }
            ViewGrad::Permute(inv)
        })
    }
    /// Transpose of a tensor with at most 2 dims (PyTorch's `t()`).
    pub fn t(&self) -> Result<Tensor> {
        if self.dim() > 2 {
            return Err(Error::invalid(
                "t",
                format!(
                    "expects at most 2 dims, got shape {:?}; use transpose(d0, d1)",
                    self.shape()
                ),
            ));
        }
        if self.dim() < 2 {
            return Ok(self.clone());
        }
        self.transpose(0, 1)
    }
    pub fn permute(&self, dims: &[i64]) -> Result<Tensor> {
        let l = self.layout().permute(dims)?;
        self.view_as_layout("PermuteBackward", l, || {
            let n = self.dim() as i64;
            let mut inv = vec![0i64; self.dim()];
            for (i, &d) in dims.iter().enumerate() {
                inv[d.rem_euclid(n.max(1)) as usize] = i as i64;
            }
            ViewGrad::Permute(inv)
        })
    }
    /// `x[start:end:step]` along `dim` (Python slice bounds: negative counts from the end,
    /// out-of-range clamps). Use `i64::MAX` for an open end.
    pub fn slice(&self, dim: i64, start: i64, end: i64, step: usize) -> Result<Tensor> {
        let l = self.layout().slice(dim, start, end, step)?;
        self.view_as_layout("SliceBackward", l, || {
            Self::scatter_grad(move |z| z.slice(dim, start, end, step))
        })
    }
    pub fn narrow(&self, dim: i64, start: i64, length: usize) -> Result<Tensor> {
        let l = self.layout().narrow(dim, start, length)?;
        self.view_as_layout("NarrowBackward", l, || {
            Self::scatter_grad(move |z| z.narrow(dim, start, length))
        })
    }
    /// `x[..., index, ...]`: drops `dim`.
    pub fn select(&self, dim: i64, index: i64) -> Result<Tensor> {
        let l = self.layout().select(dim, index)?;
        self.view_as_layout("SelectBackward", l, || {
            Self::scatter_grad(move |z| z.select(dim, index))
        })
    }
    /// Broadcasts size-1 dims (stride 0, no copy). `-1` keeps a size.
    pub fn expand(&self, sizes: &[i64]) -> Result<Tensor> {
        let l = self.layout().expand(sizes)?;
        self.view_as_layout("ExpandBackward", l, || ViewGrad::Expand)
    }
    pub fn broadcast_to(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let l = self
            .layout()
            .broadcast_to("broadcast_to", shape.into().dims())?;
        self.view_as_layout("ExpandBackward", l, || ViewGrad::Expand)
    }
    /// Removes `dim` if its size is 1.
    pub fn squeeze(&self, dim: i64) -> Result<Tensor> {
        let l = self.layout().squeeze(Some(dim))?;
        self.view_as_layout("SqueezeBackward", l, || ViewGrad::Reshape)
    }
    /// Removes every size-1 dim.
    pub fn squeeze_all(&self) -> Result<Tensor> {
        let l = self.layout().squeeze(None)?;
        self.view_as_layout("SqueezeBackward", l, || ViewGrad::Reshape)
    }
    pub fn unsqueeze(&self, dim: i64) -> Result<Tensor> {
        let l = self.layout().unsqueeze(dim)?;
        self.view_as_layout("UnsqueezeBackward", l, || ViewGrad::Reshape)
    }
    /// Merges dims `start..=end` into one (a view when possible, as `reshape`).
    pub fn flatten(&self, start: i64, end: i64) -> Result<Tensor> {
        let (s, e) = (
            wrap_dim("flatten", start, self.dim())?,
            wrap_dim("flatten", end, self.dim())?,
        );
        if s > e {
            return Err(Error::invalid(
                "flatten",
                format!("start dim {start} comes after end dim {end}"),
            ));
        }
        if self.dim() == 0 {
            return self.reshape(&[1]);
        }
        let mut shape: Vec<i64> = self.shape()[..s].iter().map(|&x| x as i64).collect();
        shape.push(self.shape()[s..=e].iter().product::<usize>() as i64);
        shape.extend(self.shape()[e + 1..].iter().map(|&x| x as i64));
        self.reshape(&shape)
    }
    /// Splits `dim` into `sizes` (one may be -1).
    pub fn unflatten(&self, dim: i64, sizes: &[i64]) -> Result<Tensor> {
        let d = wrap_dim("unflatten", dim, self.dim())?;
        if self.dim() == 0 {
            return Err(Error::invalid("unflatten", "cannot unflatten a 0-d tensor"));
        }
        let inner = infer_shape("unflatten", sizes, self.shape()[d])?;
        let mut shape: Vec<i64> = self.shape()[..d].iter().map(|&x| x as i64).collect();
        shape.extend(inner.iter().map(|&x| x as i64));
        shape.extend(self.shape()[d + 1..].iter().map(|&x| x as i64));
        self.view(&shape)
    }
    pub fn diagonal(&self, offset: i64, d1: i64, d2: i64) -> Result<Tensor> {
        let l = self.layout().diagonal(offset, d1, d2)?;
        self.view_as_layout("DiagonalBackward", l, || {
            Self::scatter_grad(move |z| z.diagonal(offset, d1, d2))
        })
    }
    /// A view with explicit shape, strides and storage offset, checked against the storage.
    /// Differentiable as PyTorch's: the gradient is scatter-added into the storage positions
    /// the view reads (overlapping views accumulate), then read back through `self`'s layout.
    pub fn as_strided(&self, shape: &[usize], strides: &[usize], offset: usize) -> Result<Tensor> {
        let l = Layout::as_strided(shape, strides, offset, self.storage().len())?;
        let out = self.with_layout(l);
        record_as_strided(self, &out)?;
        mark_view(self, &out);
        Ok(out)
    }

    /// `self` if already contiguous, else a contiguous copy.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        self.clone_named("contiguous", MemoryFormat::Contiguous)
    }
    /// **PyTorch's `clone()`**: a copy with its own storage, keeping this tensor's strides when
    /// it is dense (`preserve_format`), differentiable (`CloneBackward`).
    ///
    /// Not to be confused with the Rust `Clone` impl: **`t.clone()` copies no data** — it is a
    /// second handle to the same storage, and writes through it change `t`. A transposed
    /// weight shows the difference:
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let w = Tensor::ones([2, 3], DType::F32, &Device::Cpu)?;
    /// let c = w.t()?.clone_tensor()?; // a copy that keeps the strides [1, 3]
    /// assert_eq!(c.shape(), &[3, 2]);
    /// assert_eq!(c.stride(), &[1, 3]);
    /// assert!(!c.shares_storage_with(&w));
    /// assert!(w.t()?.clone().shares_storage_with(&w)); // `.clone()`: shared, no copy
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn clone_tensor(&self) -> Result<Tensor> {
        self.clone_with(MemoryFormat::Preserve)
    }
    /// A copy with its own storage in the given memory format.
    pub fn clone_with(&self, format: MemoryFormat) -> Result<Tensor> {
        self.clone_named("clone", format)
    }
    fn clone_named(&self, op: &'static str, format: MemoryFormat) -> Result<Tensor> {
        let out = self.like_for_overwrite(format).map_err(|e| e.in_op(op))?;
        backend::copy_cast(self.view_ref(), out.view_ref())?;
        record_copy("CloneBackward", self, &out)?;
        Ok(out)
    }
    /// Copies `src` (broadcast to `self`'s shape, converted to `self`'s dtype like `to_dtype`)
    /// into `self` through its layout. Returns `self`.
    pub fn copy_(&self, src: &Tensor) -> Result<Tensor> {
        crate::autograd::record::in_place(
            "copy_",
            self,
            &[src],
            || {
                crate::ops::output::copy_into("copy_", src, self)?;
                Ok(self.clone())
            },
            |orig| {
                let s = src.to_dtype(orig.dtype())?;
                s.broadcast_to(orig.shape())?.clone_tensor()
            },
        )
    }
}
