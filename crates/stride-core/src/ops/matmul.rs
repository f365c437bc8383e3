//! Matrix products: `matmul` with PyTorch's full semantics, `mm`, `bmm`, `dot`, `outer`, and
//! the `_out` forms writing through any non-overlapping output layout.
//!
//! Every form is one call of the backend's batched `matmul` primitive over views: a 1-D
//! operand gains a size-1 dim (and the result loses it), batch dims broadcast with stride 0,
//! transposed or stepped operands are passed with their strides (never copied first).
//!
//! Dtypes follow PyTorch: both operands must have the same float dtype (no promotion; an
//! error names both), and an `_out` tensor must have that dtype too. Integer and bool tensors
//! are refused (convert with `to_dtype`).

use super::output::{deliver, Alias, Dest, Policy};
use crate::autocast::autocast_inputs;
use crate::backend::{self, View};
use crate::shape::broadcast_shapes;
use crate::{DType, Device, Error, Layout, Result, Tensor};

/// Which frontend is asking: each accepts different ranks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Matmul,
    Mm,
    Bmm,
    Dot,
}

impl Form {
    fn name(self) -> &'static str {
        match self {
            Form::Matmul => "matmul",
            Form::Mm => "mm",
            Form::Bmm => "bmm",
            Form::Dot => "dot",
        }
    }
}

/// The product as the backend sees it: both inputs as `[*batch, M, K]` / `[*batch, K, N]`
/// layouts, and how the user's output shape maps to `[*batch, M, N]`.
struct Geometry {
    a: Layout,
    b: Layout,
    out_shape: Vec<usize>,
    batch_nd: usize,
    /// `a` was 1-D: the result has no M dim.
    drop_m: bool,
    /// `b` was 1-D: the result has no N dim.
    drop_n: bool,
}

impl Geometry {
    /// `[*batch, M, N]` seen through the output's layout (size-1 dims put back where a 1-D
    /// operand removed them).
    fn dst_layout(&self, out: &Layout) -> Result<Layout> {
        let mut l = out.clone();
        if self.drop_m {
            l = l.unsqueeze(self.batch_nd as i64)?;
        }
        if self.drop_n {
            l = l.unsqueeze(self.batch_nd as i64 + 1)?;
        }
        Ok(l)
    }
}

fn mismatch(op: &'static str, a: &Tensor, b: &Tensor, why: String) -> Error {
    Error::ShapeMismatch {
        op,
        lhs: a.shape().to_vec(),
        rhs: b.shape().to_vec(),
        why,
    }
}

/// Validates the ranks and sizes for `form` and computes the geometry (no data touched).
fn geometry(form: Form, a: &Tensor, b: &Tensor) -> Result<Geometry> {
    let op = form.name();
    let (da, db) = (a.dim(), b.dim());
    let ranks_ok = match form {
        Form::Matmul => da >= 1 && db >= 1,
        Form::Mm => da == 2 && db == 2,
        Form::Bmm => da == 3 && db == 3,
        Form::Dot => da == 1 && db == 1,
    };
    if !ranks_ok {
        let want = match form {
            Form::Matmul => "must both have at least 1 dim (matmul of a 0-d tensor: use mul)",
            Form::Mm => {
                "must both be 2-D (mm multiplies matrices; use matmul for vectors and batches)"
            }
            Form::Bmm => {
                "must both be 3-D [batch, rows, cols] (use matmul for other ranks and broadcasting)"
            }
            Form::Dot => "must both be 1-D (dot multiplies vectors; use matmul for matrices)",
        };
        return Err(mismatch(
            op,
            a,
            b,
            format!("have {da} and {db} dims but {want}"),
        ));
    }
    // a 1-D operand is a row (lhs) or column (rhs) vector
    let la = if da == 1 {
        a.layout().unsqueeze(0)?
    } else {
        a.layout().clone()
    };
    let lb = if db == 1 {
        b.layout().unsqueeze(1)?
    } else {
        b.layout().clone()
    };
    let (sa, sb) = (la.shape(), lb.shape());
    let (m, ka) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (kb, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    if ka != kb {
        return Err(mismatch(
            op,
            a,
            b,
            format!("cannot be multiplied ({ka} != {kb})"),
        ));
    }
    let (ba, bb) = (&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
    if form == Form::Bmm && ba != bb {
        return Err(mismatch(
            op,
            a,
            b,
            format!(
                "have different batch sizes ({} != {}); bmm does not broadcast, use matmul",
                ba[0], bb[0]
            ),
        ));
    }
    let batch = broadcast_shapes(op, ba, bb).map_err(|_| {
        mismatch(
            op,
            a,
            b,
            format!("cannot be multiplied: batch dims {ba:?} and {bb:?} do not broadcast"),
        )
    })?;
    let expand = |l: &Layout, r: usize, c: usize| {
        let sizes: Vec<i64> = batch
            .iter()
            .chain([r, c].iter())
            .map(|&s| s as i64)
            .collect();
        l.expand(&sizes)
    };
    let (a3, b3) = (expand(&la, m, ka)?, expand(&lb, kb, n)?);
    let mut out_shape = batch.clone();
    if da > 1 {
        out_shape.push(m);
    }
    if db > 1 {
        out_shape.push(n);
    }
    crate::shape::checked_numel(op, &out_shape)?;
    Ok(Geometry {
        a: a3,
        b: b3,
        out_shape,
        batch_nd: batch.len(),
        drop_m: da == 1,
        drop_n: db == 1,
    })
}

/// The dtype and device of a product of `a` and `b` into `dest`, or the error PyTorch gives.
fn dtype_device(op: &'static str, a: &Tensor, b: &Tensor, dest: Dest) -> Result<(DType, Device)> {
    if a.device() != b.device() {
        return Err(Error::DeviceMismatch {
            op,
            a: a.device(),
            b: b.device(),
        });
    }
    if a.dtype() != b.dtype() {
        return Err(Error::invalid(
            op,
            format!(
                "expected both operands to have the same dtype, got {} and {}; convert one with to_dtype (matrix products do not promote, as in PyTorch)",
                a.dtype(),
                b.dtype()
            ),
        ));
    }
    let dtype = a.dtype();
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype,
            hint: "; matrix products take float tensors (f64, f32, f16, bf16): convert with to_dtype(DType::F32)".into(),
        });
    }
    if let Dest::Into(out) = dest {
        if out.device() == a.device() && out.dtype() != dtype {
            return Err(Error::invalid(
                op,
                format!(
                    "expected the output to have dtype {dtype} (the operands' dtype), got {}; matrix products do not cast their result, as in PyTorch",
                    out.dtype()
                ),
            ));
        }
    }
    Ok((dtype, a.device()))
}

fn product(form: Form, a: &Tensor, b: &Tensor, dest: Dest) -> Result<Tensor> {
    let op = form.name();
    let g = geometry(form, a, b)?;
    let (dtype, device) = dtype_device(op, a, b, dest)?;
    let va = View {
        storage: a.storage(),
        layout: &g.a,
        dtype,
    };
    let vb = View {
        storage: b.storage(),
        layout: &g.b,
        dtype,
    };
    let inputs = [va, vb];
    let policy = Policy {
        // an output sharing memory with an operand may overlap what the product reads
        alias: Alias::None,
        ..Policy::new(op, &inputs, &g.out_shape, device, None)
    };
    deliver(dest, &policy, dtype, |dst| {
        let l = g.dst_layout(dst.layout)?;
        backend::matmul(
            va,
            vb,
            View {
                storage: dst.storage,
                layout: &l,
                dtype: dst.dtype,
            },
        )
    })
}

impl Tensor {
    /// Matrix product with PyTorch's `torch.matmul` semantics:
    ///
    /// - 1-D · 1-D: the dot product, a 0-d tensor;
    /// - 2-D · 2-D: the matrix product;
    /// - 1-D · n-D: the vector is a row `[1, K]` whose dim is removed from the result;
    ///   n-D · 1-D: the vector is a column `[K, 1]`, likewise removed;
    /// - otherwise a batched product over the leading dims, which broadcast.
    ///
    /// Both operands must have the same float dtype. Transposed and strided operands are
    /// multiplied in place, without a copy.
    ///
    /// ```
    /// use stride_core::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
    /// let b = Tensor::from_vec(vec![1.0f32, 0.0, 1.0], [3])?;
    /// assert_eq!(a.matmul(&b)?.to_vec::<f32>()?, vec![4.0, 10.0]);
    /// assert_eq!(a.matmul(&a.t()?)?.to_vec::<f32>()?, vec![14.0, 32.0, 32.0, 77.0]);
    /// let err = a.matmul(&a).unwrap_err();
    /// assert_eq!(err.to_string(), "matmul: shapes [2, 3] and [2, 3] cannot be multiplied (3 != 2)");
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("matmul", &[self, other])? {
            return c.tensors[0].matmul(&c.tensors[1]);
        }
        recorded(
            || product(Form::Matmul, self, other, Dest::New),
            |o| record_matmul("MatmulBackward", self, other, o),
        )
    }
    /// [`Tensor::matmul`] written into `out` (the result's shape and dtype, any
    /// non-overlapping layout). Nothing is written unless every check passes.
    pub fn matmul_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("matmul_out", &[self, other], || {
            product(Form::Matmul, self, other, Dest::Into(out))
        })
    }
    /// Product of two matrices (`[M, K] · [K, N]`); no broadcasting.
    pub fn mm(&self, other: &Tensor) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("mm", &[self, other])? {
            return c.tensors[0].mm(&c.tensors[1]);
        }
        recorded(
            || product(Form::Mm, self, other, Dest::New),
            |o| record_matmul("MmBackward", self, other, o),
        )
    }
    /// [`Tensor::mm`] written into `out` (`[M, N]`, any non-overlapping layout).
    pub fn mm_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("mm_out", &[self, other], || {
            product(Form::Mm, self, other, Dest::Into(out))
        })
    }
    /// Batched product `[B, M, K] · [B, K, N]`; the batch sizes must be equal (use
    /// [`Tensor::matmul`] to broadcast).
    pub fn bmm(&self, other: &Tensor) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("bmm", &[self, other])? {
            return c.tensors[0].bmm(&c.tensors[1]);
        }
        recorded(
            || product(Form::Bmm, self, other, Dest::New),
            |o| record_matmul("BmmBackward", self, other, o),
        )
    }
    /// [`Tensor::bmm`] written into `out` (`[B, M, N]`, any non-overlapping layout).
    pub fn bmm_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        unrecorded_out("bmm_out", &[self, other], || {
            product(Form::Bmm, self, other, Dest::Into(out))
        })
    }
    /// Dot product of two 1-D tensors of equal length: a 0-d tensor.
    pub fn dot(&self, other: &Tensor) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("dot", &[self, other])? {
            return c.tensors[0].dot(&c.tensors[1]);
        }
        recorded(
            || product(Form::Dot, self, other, Dest::New),
            |o| record_matmul("DotBackward", self, other, o),
        )
    }
    /// Outer product of two 1-D tensors: `[N] ⊗ [M] → [N, M]`, `out[i, j] = self[i]·other[j]`.
    /// As in PyTorch this is an elementwise product, so dtypes promote and integers work.
    pub fn outer(&self, other: &Tensor) -> Result<Tensor> {
        if self.dim() != 1 || other.dim() != 1 {
            return Err(mismatch(
                "outer",
                self,
                other,
                "must both be 1-D (outer takes two vectors)".into(),
            ));
        }
        self.unsqueeze(1)?.mul(&other.unsqueeze(0)?)
    }
}

// ----- autograd: the kernels above run without recording; the functional forms record one
// node with the formula from `autograd::formulas`, `_out` forms refuse to record.
use crate::autograd::formulas::matmul::record_matmul;
use crate::autograd::record::{recorded, unrecorded_out};
