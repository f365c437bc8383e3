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

/// [`check_out`] for ops whose output must have exactly the result's dtype ([`Cast::Exact`]).
pub(crate) fn check_out_exact(
    op: &'static str,
    out: &Tensor,
    shape: &[usize],
    dtype: DType,
    device: Device,
) -> Result<()> {
    check_out(op, out, shape, dtype, device)?;
    exact_dtype(op, out, dtype, "")
}

/// Errors unless `out` (named `what` in the message when an op has several outputs) has
/// exactly `dtype`.
fn exact_dtype(op: &'static str, out: &Tensor, dtype: DType, what: &str) -> Result<()> {
    if out.dtype() == dtype {
        return Ok(());
    }
    let what = if what.is_empty() {
        String::new()
    } else {
        format!("{what} ")
    };
    Err(Error::invalid(
        op,
        format!(
            "the {what}output has dtype {}, expected {dtype} (the result's dtype); pass a {dtype} tensor, or convert the result with to_dtype",
            out.dtype()
        ),
    ))
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

/// Which dtypes a caller's destination may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cast {
    /// Any dtype the result casts to safely (PyTorch's rule for most `_out` forms); another
    /// dtype than the result's receives it through a temporary.
    Safe,
    /// Exactly the result's dtype (PyTorch's rule for index, sort and arg-reduction outputs:
    /// `index_select(..., out=)` with another dtype is an error there, not a cast).
    Exact,
}

/// Which memory a destination may share with the op's inputs and still be written directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alias {
    /// An input laid exactly over the destination (same storage and layout) is fine: each
    /// output position reads only its own position of such an input (elementwise ops, and
    /// reductions whose output can only equal an input where nothing is reduced). An input
    /// overlapping it otherwise goes through a temporary.
    Exact,
    /// None: an input that shares the destination's storage at all goes through a temporary
    /// (gathers and sorts read other positions than the one they write).
    None,
}

/// How [`deliver`] places an op's results.
#[derive(Clone, Copy)]
pub(crate) struct Policy<'a> {
    pub op: &'static str,
    pub cast: Cast,
    pub alias: Alias,
    /// The op's inputs, for [`Policy::alias`].
    pub inputs: &'a [View<'a>],
    /// Every result's shape.
    pub shape: &'a [usize],
    pub device: Device,
    /// A fresh result takes this tensor's dim order when it has the result's shape and is
    /// dense (PyTorch's TensorIterator does the same), else it is row-major.
    pub like: Option<&'a Tensor>,
    /// Whether `launch` writes every element of the tensors it is given, so that fresh ones
    /// need no zero-fill (see [`Tensor::alloc_for_overwrite`]).
    pub overwrites: bool,
}

impl<'a> Policy<'a> {
    /// An elementwise-like op's policy: castable destinations, exact aliasing allowed, fresh
    /// results laid like `like`, written in full.
    pub(crate) fn new(
        op: &'static str,
        inputs: &'a [View<'a>],
        shape: &'a [usize],
        device: Device,
        like: Option<&'a Tensor>,
    ) -> Policy<'a> {
        Policy {
            op,
            cast: Cast::Safe,
            alias: Alias::Exact,
            inputs,
            shape,
            device,
            like,
            overwrites: true,
        }
    }

    /// The policy of gathers, sorts and the like: destinations of exactly the result's dtype,
    /// sharing no memory with an input, fresh results row-major and zero-filled.
    pub(crate) fn exact(
        op: &'static str,
        inputs: &'a [View<'a>],
        shape: &'a [usize],
        device: Device,
    ) -> Policy<'a> {
        Policy {
            cast: Cast::Exact,
            alias: Alias::None,
            overwrites: false,
            ..Policy::new(op, inputs, shape, device, None)
        }
    }

    /// Checks `out` as a destination of a `dtype` result (named `what` in errors when the op
    /// has several) — before anything is written, so a failed op leaves every operand
    /// unchanged.
    pub(crate) fn check(&self, out: &Tensor, dtype: DType, what: &str) -> Result<()> {
        let op = self.op;
        check_out(op, out, self.shape, dtype, self.device)?;
        if self.cast == Cast::Exact {
            exact_dtype(op, out, dtype, what)?;
        }
        Ok(())
    }

    /// Whether `out` must receive a `dtype` result through a temporary.
    fn needs_temporary(&self, out: &View, dtype: DType) -> bool {
        out.dtype != dtype
            || self.inputs.iter().any(|v| {
                v.storage.same(out.storage) && (self.alias == Alias::None || v.layout != out.layout)
            })
    }

    fn alloc(&self, dtype: DType, like: Option<&Tensor>) -> Result<Tensor> {
        let t = if self.overwrites {
            alloc_result_for_overwrite(self.shape, dtype, &self.device, like)
        } else {
            alloc_result(self.shape, dtype, &self.device, like)
        };
        t.map_err(|e| e.in_op(self.op))
    }
}

/// One result of an op for [`deliver`]: where it goes, its dtype, and its name in errors when
/// the op has several (`"values"`, `"indices"`; empty for one).
#[derive(Clone, Copy)]
pub(crate) struct Out<'a> {
    pub dest: Dest<'a>,
    pub dtype: DType,
    pub what: &'static str,
}

/// Runs `launch` (one backend primitive writing the views it is given) so that the op's
/// results land in their destinations: fresh tensors, or the caller's (in-place and `_out`
/// forms) written through their layouts whatever their strides. Every destination is checked
/// first ([`Policy::check`]; several must not share storage). A destination of another dtype
/// than the result's, or sharing memory with an input as `policy.alias` forbids, receives the
/// result through a temporary copied back. Bumps each caller's tensor's version counter.
pub(crate) fn deliver_all<const N: usize>(
    policy: &Policy,
    outs: [Out; N],
    launch: impl FnOnce([View; N]) -> Result<()>,
) -> Result<[Tensor; N]> {
    let op = policy.op;
    for o in &outs {
        if let Dest::Into(t) = o.dest {
            policy.check(t, o.dtype, o.what)?;
        }
    }
    for (k, a) in outs.iter().enumerate() {
        for b in &outs[k + 1..] {
            if let (Dest::Into(x), Dest::Into(y)) = (a.dest, b.dest) {
                if x.shares_storage_with(y) {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "the {} and {} outputs share storage; pass two separate tensors",
                            a.what, b.what
                        ),
                    ));
                }
            }
        }
    }
    // what `launch` writes: a fresh tensor, the caller's, or a temporary copied to the caller's
    let mut targets: Vec<(Tensor, Option<&Tensor>)> = Vec::with_capacity(N);
    for o in &outs {
        targets.push(match o.dest {
            Dest::New => (policy.alloc(o.dtype, policy.like)?, None),
            Dest::Into(t) if policy.needs_temporary(&t.view_ref(), o.dtype) => {
                (policy.alloc(o.dtype, Some(t))?, Some(t))
            }
            Dest::Into(t) => (t.clone(), None),
        });
    }
    launch(std::array::from_fn(|k| targets[k].0.view_ref()))?;
    for (t, dest) in &targets {
        if let Some(d) = dest {
            backend::copy_cast(t.view_ref(), d.view_ref())?;
        }
    }
    for o in &outs {
        if let Dest::Into(t) = o.dest {
            t.storage().bump_version();
        }
    }
    Ok(std::array::from_fn(|k| match outs[k].dest {
        Dest::New => targets[k].0.clone(),
        Dest::Into(t) => t.clone(),
    }))
}

/// [`deliver_all`] for an op with one result, of `dtype`.
pub(crate) fn deliver(
    dest: Dest,
    policy: &Policy,
    dtype: DType,
    launch: impl FnOnce(View) -> Result<()>,
) -> Result<Tensor> {
    let out = Out {
        dest,
        dtype,
        what: "",
    };
    let [t] = deliver_all(policy, [out], |[v]| launch(v))?;
    Ok(t)
}

/// Delivers an already computed `result` (composed ops): itself, or copied through the
/// caller's layout (cast to its dtype).
pub(crate) fn deliver_computed(op: &'static str, dest: Dest, result: Tensor) -> Result<Tensor> {
    if let Dest::New = dest {
        return Ok(result);
    }
    let v = result.view_ref();
    let policy = Policy::new(op, &[], result.shape(), result.device(), None);
    deliver(dest, &policy, result.dtype(), |dst| {
        backend::copy_cast(v, dst)
    })
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
