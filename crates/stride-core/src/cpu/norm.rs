//! Row normalisation on the CPU (`backend/norm.rs` has the math and the operand order): each
//! row is one task's, its sums taken in order; the weight and bias gradients are summed per
//! block of rows (blocks fixed by the row count alone), then the blocks in order — the same
//! bits whatever the number of threads.

use super::access::Access;
use super::math::{FloatElem, Real};
use super::parallel::{run_chunks, run_tasks};
use super::rows::{tasks, RowOp as Op};
use super::strided::SendPtr;
use crate::backend::norm::{Norm, NormKind};
use crate::backend::View;
use crate::{DType, Error, Result};
use half::{bf16, f16};
use num_traits::{Float, One, Zero};

/// Most row blocks of the affine gradients' first stage (memory: `2·BLOCKS·N` values).
const BLOCKS: usize = 64;
/// Fewest rows per block of that stage.
const BLOCK_ROWS: usize = 16;

fn internal(op: &'static str, what: &str) -> Error {
    Error::invalid(
        op,
        format!("internal error in the CPU normalisation kernel: {what} (please report)"),
    )
}

/// Forward: see `backend/norm.rs`.
pub(crate) fn norm(n: Norm, i: &[View], o: &[View]) -> Result<()> {
    match i[0].dtype {
        DType::F64 => forward::<f64>(n, i, o),
        DType::F32 => forward::<f32>(n, i, o),
        DType::F16 => forward::<f16>(n, i, o),
        DType::BF16 => forward::<bf16>(n, i, o),
        _ => Err(internal("norm", "a non-float operand")),
    }
}

/// Backward: see `backend/norm.rs`.
pub(crate) fn norm_backward(n: Norm, i: &[View], o: &[View]) -> Result<()> {
    match i[0].dtype {
        DType::F64 => backward::<f64>(n, i, o),
        DType::F32 => backward::<f32>(n, i, o),
        DType::F16 => backward::<f16>(n, i, o),
        DType::BF16 => backward::<bf16>(n, i, o),
        _ => Err(internal("norm_backward", "a non-float operand")),
    }
}

fn forward<T: FloatElem>(n: Norm, i: &[View], o: &[View]) -> Result<()> {
    let v = n.fwd(i, o);
    let (rows, cols) = Norm::rows(&v.x);
    let outs: Vec<_> = [Some(&v.y), Some(&v.rstd), v.mean.as_ref(), v.sum.as_ref()]
        .into_iter()
        .flatten()
        .map(|v| v.storage)
        .collect();
    let ins: Vec<_> = [
        Some(&v.x),
        v.residual.as_ref(),
        v.weight.as_ref(),
        v.bias.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|v| v.storage)
    .collect();
    let acc = Access::outputs(&outs, &ins);
    let x = Op::<T>::of(&acc, &v.x);
    let y = Op::<T>::of(&acc, &v.y);
    let w = v.weight.map(|w| Op::<T>::of(&acc, &w));
    let b = v.bias.map(|b| Op::<T>::of(&acc, &b));
    let rstd = Op::<T::C>::of(&acc, &v.rstd);
    let mean = v.mean.map(|m| Op::<T::C>::of(&acc, &m));
    // with a residual: the sum, normalised as read back from its storage (see below)
    let fused = v
        .residual
        .zip(v.sum)
        .map(|(res, sum)| (Op::<T>::of(&acc, &res), Op::<T>::of(&acc, &sum)));
    let src = fused.map_or(x, |(_, sum)| sum);
    let layer = n.kind == NormKind::Layer;
    let eps = T::C::c(n.eps);
    let count = T::C::c(cols as f64);
    run_chunks(rows, tasks(rows, cols), &|r0, r1| {
        for r in r0..r1 {
            // SAFETY: every pointer addresses an element of its view (the frontend checked
            // the extents); each row's outputs are written by this task alone.
            unsafe {
                if let Some((res, sum)) = fused {
                    // the add kernel's arithmetic (in C, one rounding to T), stored first so
                    // that the statistics read the rounded sum, as rms_norm of the sum would
                    for c in 0..cols {
                        *sum.at(r, c) = T::store((*x.at(r, c)).load() + (*res.at(r, c)).load());
                    }
                }
                let xr = |c: usize| (*src.at(r, c)).load();
                let mu = if layer {
                    (0..cols).fold(T::C::zero(), |s, c| s + xr(c)) / count
                } else {
                    T::C::zero()
                };
                let var = (0..cols).fold(T::C::zero(), |s, c| {
                    let d = xr(c) - mu;
                    s + d * d
                }) / count;
                let rs = T::C::one() / (var + eps).sqrt();
                for c in 0..cols {
                    let mut yc = (xr(c) - mu) * rs;
                    if let Some(w) = w {
                        yc = yc * (*w.at(0, c)).load();
                    }
                    if let Some(b) = b {
                        yc = yc + (*b.at(0, c)).load();
                    }
                    *y.at(r, c) = T::store(yc);
                }
                *rstd.at(0, r) = rs;
                if let Some(m) = mean {
                    *m.at(0, r) = mu;
                }
            }
        }
    });
    Ok(())
}

fn backward<T: FloatElem>(n: Norm, i: &[View], o: &[View]) -> Result<()> {
    let v = n.bwd(i, o);
    let (rows, cols) = Norm::rows(&v.x);
    let outs: Vec<_> = [Some(&v.dx), v.dweight.as_ref(), v.dbias.as_ref()]
        .into_iter()
        .flatten()
        .map(|v| v.storage)
        .collect();
    let ins: Vec<_> = [
        Some(&v.dy),
        Some(&v.x),
        Some(&v.rstd),
        v.mean.as_ref(),
        v.weight.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|v| v.storage)
    .collect();
    let acc = Access::outputs(&outs, &ins);
    let dy = Op::<T>::of(&acc, &v.dy);
    let x = Op::<T>::of(&acc, &v.x);
    let dx = Op::<T>::of(&acc, &v.dx);
    let rstd = Op::<T::C>::of(&acc, &v.rstd);
    let mean = v.mean.map(|m| Op::<T::C>::of(&acc, &m));
    let w = v.weight.map(|w| Op::<T>::of(&acc, &w));
    let dw = v.dweight.map(|d| Op::<T>::of(&acc, &d));
    let db = v.dbias.map(|d| Op::<T>::of(&acc, &d));
    let layer = n.kind == NormKind::Layer;
    let count = T::C::c(cols as f64);
    let zero = T::C::zero();
    // SAFETY (every unsafe block below): the pointers address elements of their views (the
    // frontend checked the extents); dx rows are written by one task each.
    let stats = |r: usize| unsafe { (mean.map_or(zero, |m| *m.at(0, r)), *rstd.at(0, r)) };
    run_chunks(rows, tasks(rows, cols), &|r0, r1| {
        for r in r0..r1 {
            unsafe {
                let (mu, rs) = stats(r);
                let xhat = |c: usize| ((*x.at(r, c)).load() - mu) * rs;
                let g = |c: usize| {
                    let d = (*dy.at(r, c)).load();
                    w.map_or(d, |w| d * (*w.at(0, c)).load())
                };
                let (mut sg, mut sgx) = (zero, zero);
                for c in 0..cols {
                    let gc = g(c);
                    sg = sg + gc;
                    sgx = sgx + gc * xhat(c);
                }
                let mg = if layer { sg / count } else { zero };
                let mgx = sgx / count;
                for c in 0..cols {
                    *dx.at(r, c) = T::store(rs * (g(c) - mg - xhat(c) * mgx));
                }
            }
        }
    });
    if dw.is_none() && db.is_none() {
        return Ok(());
    }
    // the affine gradients: per block of rows, then the blocks in order
    let blocks = rows.div_ceil(BLOCK_ROWS).clamp(1, BLOCKS);
    let per = rows.div_ceil(blocks).max(1);
    let mut part = vec![zero; 2 * blocks * cols];
    let parts = SendPtr(part.as_mut_ptr());
    run_tasks(blocks, &|k| unsafe {
        // SAFETY: block k writes its own 2·cols values of `part`
        let (pw, pb) = (
            parts.get().add(2 * k * cols),
            parts.get().add((2 * k + 1) * cols),
        );
        for r in k * per..((k + 1) * per).min(rows) {
            let (mu, rs) = stats(r);
            for c in 0..cols {
                let d = (*dy.at(r, c)).load();
                *pw.add(c) = *pw.add(c) + d * (((*x.at(r, c)).load() - mu) * rs);
                *pb.add(c) = *pb.add(c) + d;
            }
        }
    });
    for c in 0..cols {
        let (mut sw, mut sb) = (zero, zero);
        for k in 0..blocks {
            sw = sw + part[2 * k * cols + c];
            sb = sb + part[(2 * k + 1) * cols + c];
        }
        // SAFETY: element c of the [cols] gradients
        unsafe {
            if let Some(dw) = dw {
                *dw.at(0, c) = T::store(sw);
            }
            if let Some(db) = db {
                *db.at(0, c) = T::store(sb);
            }
        }
    }
    Ok(())
}
