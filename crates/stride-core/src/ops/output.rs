//! Where an op's result goes: a fresh tensor, or a caller's tensor (in-place and `_out`
//! forms), written through its layout whatever its strides.

use crate::backend::{self, View};
use crate::layout::contiguous_strides;
use crate::{DType, Device, Error, Result, Tensor};

/// The destination of an op.
#[derive(Clone, Copy)]
pub(crate) enum Dest<'a> {
    /// Allocate the result.
    New,
    /// Write into this tensor (`self` for in-place ops, `out` for `_out` ops).
    Into(&'a Tensor),
}

/// Checks that `out` can receive a result of `shape` and `dtype` on `device` — before
/// anything is written, so a failed op leaves every operand unchanged.
pub(crate) fn check_out(
    op: &'static str,
    out: &Tensor,
    shape: &[usize],
    dtype: DType,
    device: Device,
) -> Result<()> {
    if out.device() != device {
        return Err(Error::DeviceMismatch {
            op,
            a: device,
            b: out.device(),
        });
    }
    if out.shape() != shape {
        return Err(Error::ShapeMismatch {
            op,
            lhs: out.shape().to_vec(),
            rhs: shape.to_vec(),
            why: "differ: the output (first) must have the result's broadcast shape (second); stride does not resize outputs".into(),
        });
    }
    if !DType::can_cast(dtype, out.dtype()) {
        return Err(Error::UnsafeCast {
            op,
            result: dtype,
            output: out.dtype(),
        });
    }
    if !out.layout().is_non_overlapping() {
        return Err(Error::OverlappingOutput {
            op,
            shape: out.shape().to_vec(),
            strides: out.stride().to_vec(),
        });
    }
    Ok(())
}

/// [`check_out`] for ops whose output must have exactly the result's dtype (PyTorch's rule
/// for index, sort and arg-reduction outputs: `index_select(..., out=)` with another dtype
/// is an error there, not a cast).
pub(crate) fn check_out_exact(
    op: &'static str,
    out: &Tensor,
    shape: &[usize],
    dtype: DType,
    device: Device,
) -> Result<()> {
    check_out(op, out, shape, dtype, device)?;
    if out.dtype() != dtype {
        return Err(Error::invalid(
            op,
            format!(
                "the output has dtype {}, expected {dtype} (the result's dtype); pass a {dtype} tensor, or convert the result with to_dtype",
                out.dtype()
            ),
        ));
    }
    Ok(())
}

/// Allocates a result of `shape`: with the dim order of `like` when it has that shape and is
/// dense (PyTorch's TensorIterator does the same), else row-major.
pub(crate) fn alloc_result(
    shape: &[usize],
    dtype: DType,
    device: &Device,
    like: Option<&Tensor>,
) -> Result<Tensor> {
    let strides = match like {
        Some(t) if t.shape() == shape && t.layout().is_non_overlapping_and_dense() => {
            t.layout().dense_strides_like()
        }
        _ => contiguous_strides(shape),
    };
    Tensor::alloc(shape, strides, dtype, device)
}

/// [`alloc_result`] for a result that one backend primitive then writes in full (see
/// [`Tensor::alloc_for_overwrite`]: no zero-fill on CUDA).
pub(crate) fn alloc_result_for_overwrite(
    shape: &[usize],
    dtype: DType,
    device: &Device,
    like: Option<&Tensor>,
) -> Result<Tensor> {
    let strides = match like {
        Some(t) if t.shape() == shape && t.layout().is_non_overlapping_and_dense() => {
            t.layout().dense_strides_like()
        }
        _ => contiguous_strides(shape),
    };
    Tensor::alloc_for_overwrite(shape, strides, dtype, device)
}

/// Runs `launch` (one backend primitive writing its `dst`) so that the result lands in
/// `dest`. Writes directly when `dest` has the result dtype and no input partially aliases
/// it; otherwise computes into a temporary and copies it back through `dest`'s layout (never
/// dropped). Bumps the destination's version counter.
pub(crate) fn write_result(
    op: &'static str,
    dest: Dest,
    inputs: &[View],
    shape: &[usize],
    dtype: DType,
    device: Device,
    like: Option<&Tensor>,
    launch: impl FnOnce(View) -> Result<()>,
) -> Result<Tensor> {
    match dest {
        Dest::New => {
            let out =
                alloc_result_for_overwrite(shape, dtype, &device, like).map_err(|e| e.in_op(op))?;
            launch(out.view_ref())?;
            Ok(out)
        }
        Dest::Into(out) => {
            check_out(op, out, shape, dtype, device)?;
            let o = out.view_ref();
            let partial_alias = inputs
                .iter()
                .any(|v| v.storage.same(o.storage) && v.layout != o.layout);
            if out.dtype() == dtype && !partial_alias {
                launch(o)?;
            } else {
                let tmp = alloc_result_for_overwrite(shape, dtype, &device, Some(out))
                    .map_err(|e| e.in_op(op))?;
                launch(tmp.view_ref())?;
                backend::copy_cast(tmp.view_ref(), o)?;
            }
            out.storage().bump_version();
            Ok(out.clone())
        }
    }
}

/// Copies `src` (broadcast to `dst`'s shape, converted to `dst`'s dtype) into `dst` through
/// its layout. Validates everything first; computes through a temporary when `src` partially
/// aliases `dst`.
pub(crate) fn copy_into(op: &'static str, src: &Tensor, dst: &Tensor) -> Result<()> {
    if src.device() != dst.device() {
        return Err(Error::DeviceMismatch {
            op,
            a: dst.device(),
            b: src.device(),
        });
    }
    let layout = src.layout().broadcast_to(op, dst.shape())?;
    if !dst.layout().is_non_overlapping() {
        return Err(Error::OverlappingOutput {
            op,
            shape: dst.shape().to_vec(),
            strides: dst.stride().to_vec(),
        });
    }
    let s = View {
        storage: src.storage(),
        layout: &layout,
        dtype: src.dtype(),
    };
    if src.storage().same(dst.storage()) && &layout != dst.layout() {
        let tmp = alloc_result_for_overwrite(dst.shape(), src.dtype(), &dst.device(), None)?;
        backend::copy_cast(s, tmp.view_ref())?;
        backend::copy_cast(tmp.view_ref(), dst.view_ref())?;
    } else {
        backend::copy_cast(s, dst.view_ref())?;
    }
    dst.storage().bump_version();
    Ok(())
}
