//! Joining and splitting: `cat`, `stack`, `split`, `chunk`, `unbind`, `repeat`,
//! `repeat_interleave`, `tile`, `flip`, `roll`, `tril`/`triu`, `pad`, `meshgrid`.
//!
//! Everything here is composed from views and the strided `copy_cast` primitive writing into
//! views (regions) of the result — so every input layout works and the result is written
//! through its layout — except `flip`, which has its own primitive because a reversed dim
//! would need a negative stride. `tril`/`triu` are a `where` with a triangular mask. No op
//! here changes a dtype, except `cat`/`stack`, which promote as PyTorch's `cat` does.

use super::elementwise::ternary;
use super::output::{alloc_result, check_out, deliver, Dest, Policy};
use crate::autograd::formulas::index::untracked;
use crate::autograd::formulas::join as grad;
use crate::autograd::record::{forbid_out, in_place, needs_grad};
use crate::autograd::view_meta::{mark_multi_output, mark_view};
use crate::backend::{self, TernaryOp, View};
use crate::promote::{result_type, Operand};
use crate::shape::{checked_numel, wrap_dim, wrap_dims, wrap_new_dim};
use crate::{Category, DType, Device, Element, Error, Layout, Result, Scalar, Tensor};

/// Checks that `pieces` views of `t` (from `split`, `chunk`, `unbind`) can be made: each is a
/// small heap object made infallibly, so their total is asked of the allocator up front.
fn check_pieces(op: &'static str, t: &Tensor, pieces: usize) -> Result<()> {
    let each = std::mem::size_of::<Tensor>() + 256 + 16 * t.dim();
    crate::alloc::check_host_room(pieces, each, op, t.shape(), "views")
}

/// How [`Tensor::pad`] fills the new border.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PadMode {
    /// A constant (cast to the tensor's dtype; it must be representable in it exactly).
    /// Negative pads crop in this mode.
    Constant(Scalar),
    /// Mirror without repeating the edge: `[a b c d]` padded by 2 on the left is `[c b a b c d]`.
    /// Each pad must be smaller than its dim.
    Reflect,
    /// Repeat the edge element: `[a b c]` → `[a a a b c]`.
    Replicate,
    /// Wrap around: `[a b c]` padded by 1 on both sides is `[c a b c a]`. Each pad must be at
    /// most its dim.
    Circular,
}

impl PadMode {
    /// `PadMode::Constant(value.into())`.
    pub fn constant(value: impl Into<Scalar>) -> PadMode {
        PadMode::Constant(value.into())
    }
    fn name(self) -> &'static str {
        match self {
            PadMode::Constant(_) => "constant",
            PadMode::Reflect => "reflect",
            PadMode::Replicate => "replicate",
            PadMode::Circular => "circular",
        }
    }
}

/// The `indexing` of [`Tensor::meshgrid`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Indexing {
    /// Matrix indexing: output dim `i` follows input `i`.
    #[default]
    Ij,
    /// Cartesian indexing: the first two output dims are swapped (NumPy's default).
    Xy,
}

/// All tensors on one device (the first's), or an error naming both devices.
fn common_device(op: &'static str, tensors: &[&Tensor]) -> Result<Device> {
    let d = tensors[0].device();
    for t in &tensors[1..] {
        if t.device() != d {
            return Err(Error::DeviceMismatch {
                op,
                a: d,
                b: t.device(),
            });
        }
    }
    Ok(d)
}

/// `dst`'s storage seen through `region` (a view of `dst`'s layout).
fn region<'a>(dst: View<'a>, region: &'a Layout) -> View<'a> {
    View {
        storage: dst.storage,
        layout: region,
        dtype: dst.dtype,
    }
}

/// `src` seen through another layout of its own storage.
fn src_view<'a>(src: &'a Tensor, layout: &'a Layout) -> View<'a> {
    View {
        storage: src.storage(),
        layout,
        dtype: src.dtype(),
    }
}

/// `l` with dim `d` set to `size` and `stride` (to broadcast a size-1 slice along `d`).
fn with_dim(l: &Layout, d: usize, size: usize, stride: usize) -> Layout {
    let (mut shape, mut strides) = (l.shape().to_vec(), l.strides().to_vec());
    shape[d] = size;
    strides[d] = stride;
    Layout::new(shape, strides, l.offset())
}

fn narrow(l: &Layout, d: usize, start: usize, len: usize) -> Result<Layout> {
    l.narrow(d as i64, start as i64, len)
}

/// Wraps `dim` for an op that needs at least one dim.
fn dim_of(op: &'static str, t: &Tensor, dim: i64) -> Result<usize> {
    if t.dim() == 0 {
        return Err(Error::invalid(
            op,
            "expects a tensor with at least 1 dim, got a 0-d tensor; unsqueeze(0) it first",
        ));
    }
    wrap_dim(op, dim, t.dim())
}

/// The result of `cat`: shape, cat dim, dtype, device and where each input goes.
struct CatPlan {
    shape: Vec<usize>,
    dim: usize,
    dtype: DType,
    device: Device,
    /// (index into the inputs, start along `dim`) of every input that is not skipped.
    parts: Vec<(usize, usize)>,
}

fn cat_plan(op: &'static str, tensors: &[&Tensor], dim: i64) -> Result<CatPlan> {
    if tensors.is_empty() {
        return Err(Error::invalid(op, "expects a non-empty list of tensors"));
    }
    let device = common_device(op, tensors)?;
    if let Some(i) = tensors.iter().position(|t| t.dim() == 0) {
        return Err(Error::invalid(
            op,
            format!("a zero-dimensional tensor (at position {i}) cannot be concatenated; unsqueeze it, or use stack"),
        ));
    }
    let ops: Vec<Operand> = tensors.iter().map(|t| Operand::Tensor(t)).collect();
    let dtype = result_type(&ops);
    // PyTorch skips legacy empty 1-D tensors (shape [0]) whatever the other shapes are; they
    // still take part in type promotion.
    let skipped = |t: &Tensor| t.shape() == [0];
    let Some(first) = tensors.iter().position(|t| !skipped(t)) else {
        wrap_dim(op, dim, 1)?;
        return Ok(CatPlan {
            shape: vec![0],
            dim: 0,
            dtype,
            device,
            parts: vec![],
        });
    };
    let r = tensors[first];
    let d = wrap_dim(op, dim, r.dim())?;
    let mut shape = r.shape().to_vec();
    shape[d] = 0;
    let mut parts = Vec::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        if skipped(t) {
            continue;
        }
        if t.dim() != r.dim() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: r.shape().to_vec(),
                rhs: t.shape().to_vec(),
                why: format!(
                    "(tensors {first} and {i}) have different numbers of dims ({} and {}); all must have the same (only 1-D empty tensors are skipped)",
                    r.dim(),
                    t.dim()
                ),
            });
        }
        if let Some(k) = (0..r.dim()).find(|&k| k != d && t.shape()[k] != r.shape()[k]) {
            return Err(Error::ShapeMismatch {
                op,
                lhs: r.shape().to_vec(),
                rhs: t.shape().to_vec(),
                why: format!(
                    "(tensors {first} and {i}) differ in dim {k}; all must have the same size in every dim except the {op} dim {d}"
                ),
            });
        }
        parts.push((i, shape[d]));
        shape[d] = shape[d]
            .checked_add(t.shape()[d])
            .ok_or_else(|| Error::invalid(op, format!("the size of dim {d} overflows")))?;
    }
    checked_numel(op, &shape)?;
    Ok(CatPlan {
        shape,
        dim: d,
        dtype,
        device,
        parts,
    })
}

fn cat_impl(op: &'static str, tensors: &[&Tensor], dim: i64, dest: Dest) -> Result<Tensor> {
    let new = matches!(dest, Dest::New);
    if !new {
        forbid_out(op, tensors)?;
    }
    let p = cat_plan(op, tensors, dim)?;
    let views: Vec<View> = tensors.iter().map(|t| t.view_ref()).collect();
    let policy = Policy::new(op, &views, &p.shape, p.device, None);
    let out = deliver(dest, &policy, p.dtype, |dst| {
        for &(i, start) in &p.parts {
            let t = tensors[i];
            let l = narrow(dst.layout, p.dim, start, t.shape()[p.dim])?;
            backend::copy_cast(t.view_ref(), region(dst, &l))?;
        }
        Ok(())
    })?;
    if new {
        let name = if op == "stack" {
            "StackBackward"
        } else {
            "CatBackward"
        };
        grad::record_cat(name, tensors, p.dim, &p.parts, &out)?;
    }
    Ok(out)
}

fn stack_impl(tensors: &[&Tensor], dim: i64, dest: Dest) -> Result<Tensor> {
    let op = "stack";
    if matches!(dest, Dest::Into(_)) {
        forbid_out(op, tensors)?;
    }
    if tensors.is_empty() {
        return Err(Error::invalid(op, "expects a non-empty list of tensors"));
    }
    let s0 = tensors[0].shape();
    if let Some(i) = tensors.iter().position(|t| t.shape() != s0) {
        return Err(Error::ShapeMismatch {
            op,
            lhs: s0.to_vec(),
            rhs: tensors[i].shape().to_vec(),
            why: format!("(tensors 0 and {i}) differ; stack needs tensors of one shape"),
        });
    }
    let d = wrap_new_dim(op, dim, s0.len())?;
    let unsqueezed: Vec<Tensor> = tensors
        .iter()
        .map(|t| t.unsqueeze(d as i64))
        .collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = unsqueezed.iter().collect();
    cat_impl(op, &refs, d as i64, dest)
}

/// The mask of `tril` (`lower`) or `triu` over the last two dims of `x`.
fn tri_mask(op: &'static str, x: &Tensor, diagonal: i64, lower: bool) -> Result<Tensor> {
    if x.dim() < 2 {
        return Err(Error::invalid(
            op,
            format!(
                "expects a tensor with at least 2 dims, got shape {:?}",
                x.shape()
            ),
        ));
    }
    let (r, c) = (x.shape()[x.dim() - 2], x.shape()[x.dim() - 1]);
    // built on x's device from two aranges: no host buffer to upload (an upload waits)
    let _ng = crate::autograd::no_grad();
    let dev = x.device();
    // beyond these every element is on the same side: clamping keeps i + diagonal in range
    let diagonal = diagonal.clamp(-(r as i64) - 1, c as i64 + 1);
    let i = Tensor::arange(0i64, r as i64, &dev)?
        .unsqueeze(1)?
        .add(diagonal)?;
    let j = Tensor::arange(0i64, c as i64, &dev)?.unsqueeze(0)?;
    // lower: j − i ≤ diagonal; upper: j − i ≥ diagonal
    if lower {
        j.le(&i)
    } else {
        j.ge(&i)
    }
}

/// A zero of `dtype`'s category, so `where(mask, x, zero)` keeps `x`'s dtype.
fn zero_of(dtype: DType) -> Scalar {
    match dtype.category() {
        Category::Bool => Scalar::Bool(false),
        Category::Integer => Scalar::Int(0),
        Category::Float => Scalar::Float(0.0),
    }
}

fn tri(op: &'static str, x: &Tensor, diagonal: i64, lower: bool, inplace: bool) -> Result<Tensor> {
    if inplace {
        // the mask is `where`'s first operand: rebase `x`'s history explicitly
        return in_place(
            op,
            x,
            &[],
            || tri_raw(op, x, diagonal, lower, true),
            |orig| tri_raw(op, orig, diagonal, lower, false),
        );
    }
    tri_raw(op, x, diagonal, lower, false)
}

fn tri_raw(
    op: &'static str,
    x: &Tensor,
    diagonal: i64,
    lower: bool,
    in_place: bool,
) -> Result<Tensor> {
    if in_place {
        // checked here so the error names this op, before anything is written
        check_out(op, x, x.shape(), x.dtype(), x.device())?;
    }
    let mask = tri_mask(op, x, diagonal, lower)?;
    let dest = if in_place { Dest::Into(x) } else { Dest::New };
    ternary(
        TernaryOp::Where,
        Operand::Tensor(&mask),
        Operand::Tensor(x),
        Operand::Scalar(zero_of(x.dtype())),
        dest,
        in_place,
    )
}

/// Checks that a constant pad value is exactly representable in `dtype`.
fn check_pad_value(dtype: DType, v: Scalar) -> Result<()> {
    let bad = match (dtype.category(), v) {
        (Category::Float, _) => false,
        (_, Scalar::Float(f)) if !(f.is_finite() && f.fract() == 0.0) => true,
        (Category::Bool, v) => !matches!(v.to_f64(), x if x == 0.0 || x == 1.0),
        (Category::Integer, v) => {
            let x = v.to_f64();
            let back = crate::with_dtype!(dtype, T => T::from_f64(x).to_f64());
            back != x
        }
    };
    if bad {
        return Err(Error::invalid(
            "pad",
            format!(
                "the value {v:?} is not exactly representable in the tensor's dtype {dtype}; pad a converted tensor (to_dtype) or pick a representable value"
            ),
        ));
    }
    Ok(())
}

impl Tensor {
    /// Concatenates `tensors` along `dim` (PyTorch's `torch.cat`).
    ///
    /// All tensors must have the same shape except in `dim`; the result dtype is their
    /// promoted dtype. As in PyTorch, legacy empty 1-D tensors (shape `[0]`) are skipped
    /// whatever the other shapes are (they still take part in promotion).
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let a = Tensor::from_vec(vec![1i64, 2, 3, 4], [2, 2])?;
    /// let b = Tensor::from_vec(vec![5i64, 6], [2, 1])?;
    /// let c = Tensor::cat(&[&a, &b], 1)?;
    /// assert_eq!(c.to_vec::<i64>()?, vec![1, 2, 5, 3, 4, 6]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn cat(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        cat_impl("cat", tensors, dim, Dest::New)
    }
    /// [`Tensor::cat`] written into `out` (any non-overlapping layout of the result's shape,
    /// a dtype the result can be cast to). Checked before anything is written.
    pub fn cat_out(tensors: &[&Tensor], dim: i64, out: &Tensor) -> Result<Tensor> {
        cat_impl("cat", tensors, dim, Dest::Into(out))
    }
    /// Stacks tensors of one shape along a new dim `dim` (`-1` appends a last dim).
    pub fn stack(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        stack_impl(tensors, dim, Dest::New)
    }
    /// [`Tensor::stack`] written into `out`.
    pub fn stack_out(tensors: &[&Tensor], dim: i64, out: &Tensor) -> Result<Tensor> {
        stack_impl(tensors, dim, Dest::Into(out))
    }

    /// Views of consecutive pieces of `split_size` along `dim` (the last may be smaller).
    /// `split_size` may be 0 only when the dim is empty.
    ///
    /// As in PyTorch, the pieces (of `split`, `split_with_sizes`, `chunk` and `unbind`) may
    /// not be modified in place while gradients are recorded, nor used after their base was
    /// modified in place: `clone()` a piece to modify it.
    pub fn split(&self, split_size: usize, dim: i64) -> Result<Vec<Tensor>> {
        let op = "split";
        let d = dim_of(op, self, dim)?;
        let n = self.shape()[d];
        if split_size == 0 && n != 0 {
            return Err(Error::invalid(
                op,
                format!("split_size can be 0 only if the dim is empty, but dim {d} of shape {:?} has size {n}", self.shape()),
            ));
        }
        let pieces = if split_size == 0 {
            1
        } else {
            n.div_ceil(split_size).max(1)
        };
        check_pieces(op, self, pieces)?;
        let parts = (0..pieces)
            .map(|i| {
                let start = i * split_size;
                self.narrow(d as i64, start as i64, split_size.min(n - start))
            })
            .collect::<Result<Vec<_>>>()?;
        mark_multi_output(op, &parts);
        Ok(parts)
    }
    /// Views of pieces of the given sizes along `dim`; the sizes must sum to the dim's size.
    pub fn split_with_sizes(&self, sizes: &[usize], dim: i64) -> Result<Vec<Tensor>> {
        let op = "split_with_sizes";
        let d = dim_of(op, self, dim)?;
        let n = self.shape()[d];
        let total = sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s));
        if total != Some(n) {
            return Err(Error::invalid(
                op,
                format!(
                    "sizes {sizes:?} must sum to the size {n} of dim {d} of shape {:?}",
                    self.shape()
                ),
            ));
        }
        let mut start = 0;
        let parts = sizes
            .iter()
            .map(|&s| {
                let v = self.narrow(d as i64, start as i64, s);
                start += s;
                v
            })
            .collect::<Result<Vec<_>>>()?;
        mark_multi_output(op, &parts);
        Ok(parts)
    }
    /// Splits into `chunks` views along `dim` of `ceil(size / chunks)` each (fewer when the
    /// dim is too small, as in PyTorch).
    pub fn chunk(&self, chunks: usize, dim: i64) -> Result<Vec<Tensor>> {
        let op = "chunk";
        let d = dim_of(op, self, dim)?;
        if chunks == 0 {
            return Err(Error::invalid(op, "the number of chunks must be positive"));
        }
        let n = self.shape()[d];
        let split_size = n.div_ceil(chunks);
        let parts = if split_size == 0 {
            // an empty dim gives `chunks` empty views, as in PyTorch: an impossible count is
            // OutOfMemory (checked before the sizes list is made)
            check_pieces(op, self, chunks)?;
            let sizes = crate::alloc::try_vec(chunks, 0, op, &[chunks], None)?;
            self.split_with_sizes(&sizes, dim)?
        } else {
            self.split(split_size, dim)?
        };
        mark_multi_output(op, &parts);
        Ok(parts)
    }
    /// Views of every slice along `dim`, with `dim` removed (a huge expanded dim is an
    /// `OutOfMemory` error: one view per slice).
    pub fn unbind(&self, dim: i64) -> Result<Vec<Tensor>> {
        let d = dim_of("unbind", self, dim)?;
        check_pieces("unbind", self, self.shape()[d])?;
        let parts = (0..self.shape()[d])
            .map(|i| self.select(d as i64, i as i64))
            .collect::<Result<Vec<_>>>()?;
        mark_multi_output("unbind", &parts);
        Ok(parts)
    }

    /// Repeats the tensor `repeats[k]` times along dim `k` (PyTorch's `repeat`); `repeats` may
    /// be longer than the shape, adding leading dims. The result is a new contiguous tensor.
    pub fn repeat(&self, repeats: &[usize]) -> Result<Tensor> {
        let op = "repeat";
        if repeats.len() < self.dim() {
            return Err(Error::invalid(
                op,
                format!(
                    "the number of repeats {repeats:?} can't be smaller than the number of dims of shape {:?}",
                    self.shape()
                ),
            ));
        }
        let lead = repeats.len() - self.dim();
        let (mut src_shape, mut src_strides, mut out_shape) = (vec![], vec![], vec![]);
        for (k, &r) in repeats.iter().enumerate() {
            let (n, st) = if k < lead {
                (1, 0)
            } else {
                (self.shape()[k - lead], self.stride()[k - lead])
            };
            src_shape.extend([r, n]);
            src_strides.extend([0, st]);
            out_shape.push(r.checked_mul(n).ok_or_else(|| {
                Error::invalid(
                    op,
                    format!("repeats {repeats:?} overflow the size of dim {k}"),
                )
            })?);
        }
        checked_numel(op, &out_shape)?;
        let out = Tensor::alloc_contiguous(&out_shape, self.dtype(), &self.device())
            .map_err(|e| e.in_op(op))?;
        // the result seen as [r0, n0, r1, n1, ...] is the input broadcast along every r
        let src = Layout::new(src_shape.clone(), src_strides, self.storage_offset());
        let dst = Layout::contiguous(&src_shape);
        backend::copy_cast(src_view(self, &src), region(out.view_ref(), &dst))?;
        grad::record_repeat(self, repeats, &out)?;
        Ok(out)
    }
    /// NumPy's `tile`: like [`Tensor::repeat`], but a shorter `reps` is padded with leading 1s.
    pub fn tile(&self, reps: &[usize]) -> Result<Tensor> {
        let mut r = vec![1; self.dim().saturating_sub(reps.len())];
        r.extend_from_slice(reps);
        self.repeat(&r)
    }

    /// Each element repeated `repeats` times along `dim` (`None`: over the flattened tensor,
    /// giving a 1-D result).
    pub fn repeat_interleave(&self, repeats: usize, dim: Option<i64>) -> Result<Tensor> {
        let op = "repeat_interleave";
        let (x, d) = self.interleave_input(op, dim)?;
        let n = x.shape()[d];
        let mut out_shape = x.shape().to_vec();
        out_shape[d] = n
            .checked_mul(repeats)
            .ok_or_else(|| Error::invalid(op, "the result's size overflows"))?;
        checked_numel(op, &out_shape)?;
        let out = Tensor::alloc_contiguous(&out_shape, x.dtype(), &x.device())
            .map_err(|e| e.in_op(op))?;
        // the result seen as [..., n, repeats, ...] is the input broadcast along `repeats`
        let (mut shape, mut strides) = (x.shape().to_vec(), x.stride().to_vec());
        shape.insert(d + 1, repeats);
        strides.insert(d + 1, 0);
        let src = Layout::new(shape.clone(), strides, x.storage_offset());
        let dst = Layout::contiguous(&shape);
        backend::copy_cast(src_view(&x, &src), region(out.view_ref(), &dst))?;
        grad::record_repeat_interleave(&x, d, repeats, &out)?;
        Ok(out)
    }
    /// Element `j` along `dim` repeated `repeats[j]` times; `repeats` is an integer tensor with
    /// one element per slice (or a single element for all). `dim: None` flattens first.
    pub fn repeat_interleave_tensor(&self, repeats: &Tensor, dim: Option<i64>) -> Result<Tensor> {
        let op = "repeat_interleave";
        common_device(op, &[self, repeats])?;
        if !repeats.dtype().is_int() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: repeats.dtype(),
                hint: " for repeats; it must be an integer tensor".into(),
            });
        }
        if repeats.dim() > 1 {
            return Err(Error::invalid(
                op,
                format!(
                    "repeats must be 0-d or 1-d, got shape {:?}",
                    repeats.shape()
                ),
            ));
        }
        let (x, d) = self.interleave_input(op, dim)?;
        let n = x.shape()[d];
        let mut reps = repeats.to_dtype(DType::I64)?.to_vec::<i64>()?;
        if reps.len() == 1 {
            reps = crate::alloc::try_vec(n, reps[0], op, &[n], Some(DType::I64))?;
        }
        if reps.len() != n {
            return Err(Error::ShapeMismatch {
                op,
                lhs: repeats.shape().to_vec(),
                rhs: x.shape().to_vec(),
                why: format!("don't match: repeats (first) needs one element per slice of dim {d} (size {n}) of the input (second)"),
            });
        }
        if let Some(r) = reps.iter().find(|&&r| r < 0) {
            return Err(Error::invalid(
                op,
                format!("repeats must be non-negative, got {r}"),
            ));
        }
        let total = reps
            .iter()
            .try_fold(0usize, |a, &r| a.checked_add(r as usize))
            .ok_or_else(|| Error::invalid(op, "the result's size overflows"))?;
        let mut out_shape = x.shape().to_vec();
        out_shape[d] = total;
        checked_numel(op, &out_shape)?;
        let out = Tensor::alloc_contiguous(&out_shape, x.dtype(), &x.device())
            .map_err(|e| e.in_op(op))?;
        let (xl, ol) = (x.layout(), out.layout());
        let mut pos = 0;
        for (j, &r) in reps.iter().enumerate() {
            let r = r as usize;
            if r > 0 {
                let src = with_dim(&narrow(xl, d, j, 1)?, d, r, 0);
                let dst = narrow(ol, d, pos, r)?;
                backend::copy_cast(src_view(&x, &src), region(out.view_ref(), &dst))?;
            }
            pos += r;
        }
        if needs_grad(&[&x]) {
            let map: Vec<i64> = reps
                .iter()
                .enumerate()
                .flat_map(|(j, &r)| std::iter::repeat_n(j as i64, r as usize))
                .collect();
            grad::record_index_map("RepeatInterleaveBackward", &x, vec![(d, map)], &out)?;
        }
        Ok(out)
    }
    /// The tensor and dim `repeat_interleave` works on (flattened when `dim` is `None`).
    fn interleave_input(&self, op: &'static str, dim: Option<i64>) -> Result<(Tensor, usize)> {
        match dim {
            None => Ok((self.reshape(&[-1])?, 0)),
            Some(dim) if self.dim() == 0 => {
                wrap_dim(op, dim, 0)?;
                Ok((self.reshape(&[1])?, 0))
            }
            Some(dim) => Ok((self.clone(), wrap_dim(op, dim, self.dim())?)),
        }
    }

    /// A copy with the order of elements reversed along each of `dims` (distinct).
    pub fn flip(&self, dims: &[i64]) -> Result<Tensor> {
        let ds = wrap_dims("flip", dims, self.dim())?;
        let out = alloc_result(self.shape(), self.dtype(), &self.device(), Some(self))?;
        backend::flip(self.view_ref(), &ds, out.view_ref())?;
        grad::record_flip(self, ds.iter().map(|&d| d as i64).collect(), &out)?;
        Ok(out)
    }
    /// Rolls elements by `shifts[k]` along `dims[k]` (element `i` moves to `i + shift`,
    /// wrapping around). With empty `dims`, rolls the flattened tensor by the single shift
    /// and restores the shape. Repeated dims add their shifts.
    pub fn roll(&self, shifts: &[i64], dims: &[i64]) -> Result<Tensor> {
        let op = "roll";
        if dims.is_empty() {
            if shifts.len() != 1 {
                return Err(Error::invalid(
                    op,
                    format!("without dims (a flattened roll) it takes exactly one shift, got {shifts:?}"),
                ));
            }
            let shape: Vec<i64> = self.shape().iter().map(|&n| n as i64).collect();
            return self.reshape(&[-1])?.roll(shifts, &[0])?.view(&shape);
        }
        if shifts.len() != dims.len() {
            return Err(Error::invalid(
                op,
                format!("shifts {shifts:?} and dims {dims:?} must have the same length"),
            ));
        }
        let nd = self.dim();
        let mut shift = vec![0usize; nd.max(1)];
        for (&s, &d) in shifts.iter().zip(dims) {
            let d = wrap_dim(op, d, nd)?;
            let n = if nd == 0 { 1 } else { self.shape()[d] } as i64;
            if n > 0 {
                shift[d] = ((shift[d] as i64 + s.rem_euclid(n)) % n) as usize;
            }
        }
        let out = alloc_result(self.shape(), self.dtype(), &self.device(), Some(self))?;
        // every combination of (source start, destination start, length) per dim is a block
        let pieces: Vec<Vec<(usize, usize, usize)>> = (0..nd)
            .map(|d| {
                let (n, s) = (self.shape()[d], shift[d]);
                if s == 0 {
                    vec![(0, 0, n)]
                } else {
                    vec![(0, s, n - s), (n - s, 0, s)]
                }
            })
            .collect();
        let blocks: usize = pieces.iter().map(|p| p.len()).product();
        for b in 0..blocks {
            let (mut src, mut dst, mut rem) = (self.layout().clone(), out.layout().clone(), b);
            for (d, p) in pieces.iter().enumerate() {
                let (s0, d0, len) = p[rem % p.len()];
                rem /= p.len();
                src = narrow(&src, d, s0, len)?;
                dst = narrow(&dst, d, d0, len)?;
            }
            backend::copy_cast(src_view(self, &src), region(out.view_ref(), &dst))?;
        }
        grad::record_roll(self, shifts, dims, &out)?;
        Ok(out)
    }

    /// The lower triangle of the last two dims (batched): elements with `j − i ≤ diagonal`,
    /// zero elsewhere.
    pub fn tril(&self, diagonal: i64) -> Result<Tensor> {
        tri("tril", self, diagonal, true, false)
    }
    /// The upper triangle of the last two dims (batched): elements with `j − i ≥ diagonal`.
    pub fn triu(&self, diagonal: i64) -> Result<Tensor> {
        tri("triu", self, diagonal, false, false)
    }
    /// In-place [`Tensor::tril`], written through `self`'s layout.
    pub fn tril_(&self, diagonal: i64) -> Result<Tensor> {
        tri("tril_", self, diagonal, true, true)
    }
    /// In-place [`Tensor::triu`], written through `self`'s layout.
    pub fn triu_(&self, diagonal: i64) -> Result<Tensor> {
        tri("triu_", self, diagonal, false, true)
    }

    /// Pads (PyTorch's `F.pad`): `pad` holds (left, right) pairs starting from the **last**
    /// dim: `[l_last, r_last, l_prev, r_prev, …]`. Always returns a new contiguous tensor of
    /// the same dtype. Constant mode may crop (negative pads); the other modes need pads
    /// `≥ 0`, reflect needs each pad `<` its dim, circular `≤` its dim, replicate a non-empty
    /// dim. Unlike PyTorch, reflect/replicate/circular work on any number of dims.
    ///
    /// ```
    /// use stride_core::{PadMode, Tensor};
    /// let x = Tensor::from_vec(vec![1i32, 2, 3, 4], [4])?;
    /// assert_eq!(x.pad(&[2, 1], PadMode::Reflect)?.to_vec::<i32>()?, vec![3, 2, 1, 2, 3, 4, 3]);
    /// assert_eq!(x.pad(&[1, -2], PadMode::constant(9))?.to_vec::<i32>()?, vec![9, 1, 2]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn pad(&self, pad: &[i64], mode: PadMode) -> Result<Tensor> {
        let out = untracked(|| self.pad_impl(pad, mode))?;
        if needs_grad(&[self]) {
            if let PadMode::Constant(_) = mode {
                grad::record_constant_pad(self, pad, &out)?;
            } else {
                let nd = self.dim();
                let mut steps = vec![];
                for k in 0..pad.len() / 2 {
                    let d = nd - 1 - k;
                    let (l, r) = (pad[2 * k] as usize, pad[2 * k + 1] as usize);
                    if l > 0 || r > 0 {
                        steps.push((d, grad::pad_map(mode, self.shape()[d], l, r)));
                    }
                }
                let name = match mode {
                    PadMode::Reflect => "ReflectionPadBackward",
                    PadMode::Replicate => "ReplicationPadBackward",
                    _ => "CircularPadBackward",
                };
                grad::record_index_map(name, self, steps, &out)?;
            }
        }
        Ok(out)
    }

    fn pad_impl(&self, pad: &[i64], mode: PadMode) -> Result<Tensor> {
        let op = "pad";
        let nd = self.dim();
        if !pad.len().is_multiple_of(2) {
            return Err(Error::invalid(
                op,
                format!("the padding {pad:?} must have an even length: (left, right) pairs, last dim first"),
            ));
        }
        if pad.len() / 2 > nd {
            return Err(Error::invalid(
                op,
                format!(
                    "the padding {pad:?} pads {} dims but the input shape {:?} has {nd}",
                    pad.len() / 2,
                    self.shape()
                ),
            ));
        }
        if pad.contains(&i64::MIN) {
            return Err(Error::invalid(
                op,
                format!("the padding {pad:?} holds i64::MIN, which can't be negated; a crop is at most i64::MAX"),
            ));
        }
        let mut lr = vec![(0i64, 0i64); nd];
        for k in 0..pad.len() / 2 {
            lr[nd - 1 - k] = (pad[2 * k], pad[2 * k + 1]);
        }
        let mut new_shape = Vec::with_capacity(nd);
        for (d, &(l, r)) in lr.iter().enumerate() {
            let n = self.shape()[d] as i128;
            let m = n + l as i128 + r as i128;
            if m < 0 {
                return Err(Error::invalid(
                    op,
                    format!(
                        "padding ({l}, {r}) of dim {d} of shape {:?} gives a negative size {m}",
                        self.shape()
                    ),
                ));
            }
            new_shape.push(
                usize::try_from(m).map_err(|_| Error::invalid(op, "the padded size overflows"))?,
            );
        }
        checked_numel(op, &new_shape)?;
        if !matches!(mode, PadMode::Constant(_)) {
            for (d, &(l, r)) in lr.iter().enumerate() {
                let n = self.shape()[d] as i64;
                let why = if l < 0 || r < 0 {
                    Some("negative padding (cropping) is only supported in constant mode")
                } else {
                    match mode {
                        PadMode::Reflect if (l > 0 || r > 0) && (l >= n || r >= n) => {
                            Some("each pad must be smaller than the size of its dim")
                        }
                        PadMode::Circular if l > n || r > n => {
                            Some("each pad must be at most the size of its dim (it would wrap around more than once)")
                        }
                        PadMode::Replicate if n == 0 && (l > 0 || r > 0) => {
                            Some("an empty dim has no edge to replicate")
                        }
                        _ => None,
                    }
                };
                if let Some(why) = why {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "{} mode: padding ({l}, {r}) of dim {d} of shape {:?}: {why}",
                            mode.name(),
                            self.shape()
                        ),
                    ));
                }
            }
        }
        let (dtype, device) = (self.dtype(), self.device());
        if let PadMode::Constant(v) = mode {
            check_pad_value(dtype, v)?;
            let out =
                Tensor::alloc_contiguous(&new_shape, dtype, &device).map_err(|e| e.in_op(op))?;
            backend::fill(out.view_ref(), v)?;
            let (mut src, mut dst) = (self.layout().clone(), out.layout().clone());
            for (d, &(l, r)) in lr.iter().enumerate() {
                let len = self.shape()[d] as i64 - (-l).max(0) - (-r).max(0);
                if len <= 0 {
                    return Ok(out); // everything cropped: only the constant remains
                }
                src = narrow(&src, d, (-l).max(0) as usize, len as usize)?;
                dst = narrow(&dst, d, l.max(0) as usize, len as usize)?;
            }
            backend::copy_cast(src_view(self, &src), region(out.view_ref(), &dst))?;
            return Ok(out);
        }
        // the other modes: one dim at a time, last first (corners pad the padded result,
        // which is what PyTorch's 2-D/3-D pads give)
        if lr.iter().all(|&p| p == (0, 0)) {
            return self.clone_with(crate::MemoryFormat::Contiguous);
        }
        let mut cur = self.clone();
        for d in (0..nd).rev() {
            let (l, r) = (lr[d].0 as usize, lr[d].1 as usize);
            if l == 0 && r == 0 {
                continue;
            }
            let n = cur.shape()[d];
            let mut shape = cur.shape().to_vec();
            shape[d] = n + l + r;
            let out = Tensor::alloc_contiguous(&shape, dtype, &device).map_err(|e| e.in_op(op))?;
            let (cl, ol, ov) = (cur.layout(), out.layout(), out.view_ref());
            let mid = narrow(ol, d, l, n)?;
            backend::copy_cast(cur.view_ref(), region(ov, &mid))?;
            let (left, right) = (narrow(ol, d, 0, l)?, narrow(ol, d, l + n, r)?);
            match mode {
                PadMode::Reflect => {
                    let (sl, sr) = (narrow(cl, d, 1, l)?, narrow(cl, d, n - 1 - r, r)?);
                    backend::flip(src_view(&cur, &sl), &[d], region(ov, &left))?;
                    backend::flip(src_view(&cur, &sr), &[d], region(ov, &right))?;
                }
                PadMode::Replicate => {
                    let sl = with_dim(&narrow(cl, d, 0, 1)?, d, l, 0);
                    let sr = with_dim(&narrow(cl, d, n - 1, 1)?, d, r, 0);
                    backend::copy_cast(src_view(&cur, &sl), region(ov, &left))?;
                    backend::copy_cast(src_view(&cur, &sr), region(ov, &right))?;
                }
                PadMode::Circular => {
                    let (sl, sr) = (narrow(cl, d, n - l, l)?, narrow(cl, d, 0, r)?);
                    backend::copy_cast(src_view(&cur, &sl), region(ov, &left))?;
                    backend::copy_cast(src_view(&cur, &sr), region(ov, &right))?;
                }
                PadMode::Constant(_) => unreachable!("handled above"),
            }
            cur = out;
        }
        Ok(cur)
    }

    /// Coordinate grids from 0-d/1-d tensors of one dtype (PyTorch's `torch.meshgrid`): output
    /// `k` has shape `[len_0, len_1, …]` (first two swapped for [`Indexing::Xy`]) and varies
    /// along the dim of input `k`. As in PyTorch the outputs are expanded views (stride 0)
    /// sharing the inputs' storage; writing into them is an error, `contiguous()` them first.
    pub fn meshgrid(tensors: &[&Tensor], indexing: Indexing) -> Result<Vec<Tensor>> {
        let op = "meshgrid";
        if tensors.is_empty() {
            return Err(Error::invalid(op, "expects a non-empty list of tensors"));
        }
        common_device(op, tensors)?;
        for (i, t) in tensors.iter().enumerate() {
            if t.dim() > 1 {
                return Err(Error::invalid(
                    op,
                    format!(
                        "expects 0-d or 1-d tensors, got shape {:?} at position {i}",
                        t.shape()
                    ),
                ));
            }
            if t.dtype() != tensors[0].dtype() {
                return Err(Error::invalid(
                    op,
                    format!(
                        "expects tensors of one dtype, got {} (position 0) and {} (position {i}); convert with to_dtype",
                        tensors[0].dtype(),
                        t.dtype()
                    ),
                ));
            }
        }
        let mut shape: Vec<usize> = tensors.iter().map(|t| t.numel()).collect();
        let mut pos: Vec<usize> = (0..tensors.len()).collect();
        if indexing == Indexing::Xy && tensors.len() >= 2 {
            shape.swap(0, 1);
            pos.swap(0, 1);
        }
        checked_numel(op, &shape)?;
        tensors
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut strides = vec![0; shape.len()];
                strides[pos[i]] = if t.dim() == 1 { t.stride()[0] } else { 0 };
                let out = t.with_layout(Layout::new(shape.clone(), strides, t.storage_offset()));
                grad::record_meshgrid(t, pos[i], &out)?;
                mark_view(t, &out);
                Ok(out)
            })
            .collect()
    }
}
