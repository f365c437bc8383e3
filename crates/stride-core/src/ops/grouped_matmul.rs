//! Grouped matrix products: [`Tensor::grouped_matmul`] (PyTorch's `torch._grouped_mm`), the
//! expert layers of a mixture of experts in one call with the group sizes left on the device.
//! The primitive and its semantics: `backend/grouped_matmul.rs`.

use crate::autocast::autocast_inputs;
use crate::autograd::no_grad;
use crate::autograd::record::{needs_grad, record};
use crate::backend::grouped_matmul::{self as prim, GroupedMatmul};
use crate::ops::output::alloc_result_for_overwrite;
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// A grouped matrix product over groups given by cumulative offsets `offs` (1-D, i32 or
    /// i64, on the operands' device), PyTorch's `torch._grouped_mm(self, other, offs=offs)`:
    ///
    /// - `self (R, K)`, `other (G, K, N)` → `(R, N)`: the rows `offs[g−1]..offs[g]` of `self`
    ///   are multiplied by `other[g]` (`offs[−1] = 0`). This is a mixture-of-experts layer:
    ///   tokens sorted by expert, one weight matrix per expert. Rows past `offs[G−1]` are 0.
    /// - `self (M, R)`, `other (R, N)` → `(G, M, N)`: the contraction is split,
    ///   `out[g] = self[:, offs[g−1]..offs[g]] · other[offs[g−1]..offs[g], :]` (the weight
    ///   gradient of the first form). An empty group gives a zero matrix.
    ///
    /// The offsets are never read by the host: a GPU runs every group in one launch, and
    /// nothing waits. They must be non-decreasing and at most the grouped dim's length; a bad
    /// one is an error (deferred on a GPU to the next read, as an index out of bounds).
    /// Operands may have any strides (transposed views are read in place) and one float
    /// dtype; f16 and bf16 accumulate in f32. Differentiable in both matrices (the
    /// gradients are grouped products again, so twice too).
    ///
    /// **Deviation from PyTorch:** `_grouped_mm` has no autocast rule (pytorch/pytorch#174763);
    /// here it is a matrix product like `mm`, cast to the autocast dtype in a region. PyTorch
    /// leaves rows past the last offset unwritten; here they are 0.
    ///
    /// ```
    /// use stride_core::Tensor;
    /// // three rows: the first two in group 0, the last in group 1
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3, 1])?;
    /// let w = Tensor::from_vec(vec![10.0f32, 100.0], [2, 1, 1])?;
    /// let offs = Tensor::from_vec(vec![2i32, 3], [2])?;
    /// assert_eq!(x.grouped_matmul(&w, &offs)?.to_vec::<f32>()?, vec![10.0, 20.0, 300.0]);
    /// // the contraction form: per-group sums of x·x over the same rows
    /// let g = x.t()?.grouped_matmul(&x, &offs)?;
    /// assert_eq!(g.to_vec::<f32>()?, vec![5.0, 9.0]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn grouped_matmul(&self, other: &Tensor, offs: &Tensor) -> Result<Tensor> {
        if let Some(c) = autocast_inputs("grouped_mm", &[self, other])? {
            return c.tensors[0].grouped_matmul(&c.tensors[1], offs);
        }
        let (mode, shape) = check(self, other, offs)?;
        let y = {
            let _g = no_grad();
            let y = alloc_result_for_overwrite(&shape, self.dtype(), &self.device(), None)?;
            prim::grouped_matmul(
                mode,
                self.view_ref(),
                other.view_ref(),
                offs.view_ref(),
                y.view_ref(),
            )?;
            y
        };
        if needs_grad(&[self, other]) {
            let (a, b, o) = (self.clone(), other.clone(), offs.clone());
            record(
                "GroupedMatmulBackward",
                &[self, other],
                &[&y],
                &[(self, "self"), (other, "other"), (offs, "offs")],
                move |dy| backward(mode, &a, &b, &o, &dy[0]),
            )?;
        }
        Ok(y)
    }
}

/// The product's form and result shape, after checking every operand.
fn check(a: &Tensor, b: &Tensor, offs: &Tensor) -> Result<(GroupedMatmul, Vec<usize>)> {
    let op = "grouped_matmul";
    for t in [b, offs] {
        if t.device() != a.device() {
            return Err(Error::DeviceMismatch {
                op,
                a: a.device(),
                b: t.device(),
            });
        }
    }
    if !a.dtype().is_float() || a.dtype() != b.dtype() {
        return Err(Error::invalid(
            op,
            format!(
                "the matrices must share one float dtype, got {} and {}; convert one with \
                 to_dtype (or run under autocast)",
                a.dtype(),
                b.dtype()
            ),
        ));
    }
    if offs.dim() != 1 || !matches!(offs.dtype(), DType::I32 | DType::I64) {
        return Err(Error::invalid(
            op,
            format!(
                "the offsets must be a 1-D i32 or i64 tensor of cumulative group ends, got a \
                 {} tensor of shape {:?}",
                offs.dtype(),
                offs.shape()
            ),
        ));
    }
    let groups = offs.shape()[0];
    let (sa, sb) = (a.shape(), b.shape());
    let mismatch = |why: String| Error::ShapeMismatch {
        op,
        lhs: sa.to_vec(),
        rhs: sb.to_vec(),
        why,
    };
    match (sa.len(), sb.len()) {
        (2, 3) => {
            if sb[0] != groups {
                return Err(mismatch(format!(
                    "hold {} matrices for {groups} offsets: one per group",
                    sb[0]
                )));
            }
            if sa[1] != sb[1] {
                return Err(mismatch(format!(
                    "cannot be multiplied ({} != {})",
                    sa[1], sb[1]
                )));
            }
            Ok((GroupedMatmul::Rows, vec![sa[0], sb[2]]))
        }
        (2, 2) => {
            if sa[1] != sb[0] {
                return Err(mismatch(format!(
                    "cannot be multiplied ({} != {})",
                    sa[1], sb[0]
                )));
            }
            Ok((GroupedMatmul::Contraction, vec![groups, sa[0], sb[1]]))
        }
        _ => Err(mismatch(
            "are not a grouped product's: (rows, k)·(groups, k, n) or (m, rows)·(rows, n)".into(),
        )),
    }
}

/// Gradients of `[self, other]`: grouped products again (differentiable, for double
/// backward).
fn backward(
    mode: GroupedMatmul,
    a: &Tensor,
    b: &Tensor,
    offs: &Tensor,
    dy: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    let dy = dy.to_dtype(a.dtype())?;
    let (da, db) = match mode {
        // y[rows_g] = a[rows_g]·b[g]
        GroupedMatmul::Rows => (
            a.requires_grad()
                .then(|| dy.grouped_matmul(&b.transpose(1, 2)?, offs))
                .transpose()?,
            b.requires_grad()
                .then(|| a.t()?.grouped_matmul(&dy, offs))
                .transpose()?,
        ),
        // y[g] = a[:, rows_g]·b[rows_g]
        GroupedMatmul::Contraction => (
            a.requires_grad()
                .then(|| b.grouped_matmul(&dy.transpose(1, 2)?, offs)?.t())
                .transpose()?,
            b.requires_grad()
                .then(|| a.t()?.grouped_matmul(&dy, offs))
                .transpose()?,
        ),
    };
    Ok(vec![da, db])
}
