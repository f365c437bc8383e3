//! Cross-entropy over rows on the CPU (`backend/cross_entropy.rs` has the math and the operand
//! order): each row one task's, read once forward (an online log-sum-exp) and once backward.

use super::access::Access;
use super::math::{FloatElem, Real};
use super::parallel::run_chunks;
use super::rows::{tasks, RowOp as Op};
use crate::backend::cross_entropy::{rows, CrossEntropyRows};
use crate::backend::View;
use crate::{DType, Error, Result};
use half::{bf16, f16};
use num_traits::{Float, One, Zero};

fn internal(what: &str) -> Error {
    Error::invalid(
        "cross_entropy",
        format!("internal error in the CPU cross-entropy kernel: {what} (please report)"),
    )
}

/// The first target outside `[0, classes)` that is not `ignore`, in row order.
fn bad_target(
    h: &CrossEntropyRows,
    target: &View,
    acc: &Access,
    n: usize,
    classes: usize,
) -> Option<i64> {
    let t = Op::<i64>::of(acc, target);
    // SAFETY: element r of the [n] target view
    (0..n)
        .map(|r| unsafe { *t.at(0, r) })
        .find(|&v| v != h.ignore_index && (v < 0 || v >= classes as i64))
}

/// Forward: see `backend/cross_entropy.rs`.
pub(crate) fn cross_entropy(h: CrossEntropyRows, i: &[View], o: &[View]) -> Result<()> {
    match i[0].dtype {
        DType::F64 => forward::<f64>(h, i, o),
        DType::F32 => forward::<f32>(h, i, o),
        DType::F16 => forward::<f16>(h, i, o),
        DType::BF16 => forward::<bf16>(h, i, o),
        _ => Err(internal("non-float logits")),
    }
}

/// Backward: see `backend/cross_entropy.rs`.
pub(crate) fn cross_entropy_backward(h: CrossEntropyRows, i: &[View], o: &[View]) -> Result<()> {
    match i[0].dtype {
        DType::F64 => backward::<f64>(h, i, o),
        DType::F32 => backward::<f32>(h, i, o),
        DType::F16 => backward::<f16>(h, i, o),
        DType::BF16 => backward::<bf16>(h, i, o),
        _ => Err(internal("non-float logits")),
    }
}

fn forward<T: FloatElem>(h: CrossEntropyRows, i: &[View], o: &[View]) -> Result<()> {
    let (logits, target, loss, lse) = (i[0], i[1], o[0], o[1]);
    let (n, classes) = rows(&logits);
    let acc = Access::outputs(
        &[loss.storage, lse.storage],
        &[logits.storage, target.storage],
    );
    if let Some(v) = bad_target(&h, &target, &acc, n, classes) {
        return Err(Error::IndexOutOfRange {
            op: "cross_entropy",
            index: v,
            dim: 1,
            size: classes,
        });
    }
    let x = Op::<T>::of(&acc, &logits);
    let t = Op::<i64>::of(&acc, &target);
    let out = Op::<T::C>::of(&acc, &loss);
    let lse_out = Op::<T::C>::of(&acc, &lse);
    let (eps, zl) = (T::C::c(h.label_smoothing), T::C::c(h.z_loss));
    let (zero, one, count) = (T::C::zero(), T::C::one(), T::C::c(classes as f64));
    run_chunks(n, tasks(n, classes), &|r0, r1| {
        for r in r0..r1 {
            // SAFETY: every pointer addresses an element of its view (the frontend checked
            // the extents); each row's outputs are written by this task alone.
            unsafe {
                let (mut m, mut s, mut sz) = (T::C::neg_infinity(), zero, zero);
                for c in 0..classes {
                    let z = (*x.at(r, c)).load();
                    sz = sz + z;
                    if z == T::C::neg_infinity() {
                        continue;
                    }
                    if z > m {
                        s = s * (m - z).exp() + one;
                        m = z;
                    } else {
                        s = s + (z - m).exp();
                    }
                }
                let l = m + s.ln();
                let target = *t.at(0, r);
                let mut v = zero;
                if target != h.ignore_index {
                    let zt = (*x.at(r, target as usize)).load();
                    v = (one - eps) * (l - zt);
                    if h.label_smoothing != 0.0 {
                        v = v + eps * (l - sz / count);
                    }
                    if h.z_loss != 0.0 {
                        v = v + zl * l * l;
                    }
                }
                *out.at(0, r) = v;
                *lse_out.at(0, r) = l;
            }
        }
    });
    Ok(())
}

fn backward<T: FloatElem>(h: CrossEntropyRows, i: &[View], o: &[View]) -> Result<()> {
    let (logits, target, grad, lse, dlogits) = (i[0], i[1], i[2], i[3], o[0]);
    let (n, classes) = rows(&logits);
    let acc = Access::outputs(
        &[dlogits.storage],
        &[logits.storage, target.storage, grad.storage, lse.storage],
    );
    let x = Op::<T>::of(&acc, &logits);
    let t = Op::<i64>::of(&acc, &target);
    let g = Op::<T::C>::of(&acc, &grad);
    let l = Op::<T::C>::of(&acc, &lse);
    let dx = Op::<T>::of(&acc, &dlogits);
    let (zero, one, two) = (T::C::zero(), T::C::one(), T::C::c(2.0));
    let smooth = T::C::c(h.label_smoothing) / T::C::c(classes as f64);
    let hit = one - T::C::c(h.label_smoothing);
    let zl = T::C::c(h.z_loss);
    run_chunks(n, tasks(n, classes), &|r0, r1| {
        for r in r0..r1 {
            // SAFETY: as in the forward; each dlogits row is written by this task alone
            unsafe {
                let target = *t.at(0, r);
                let skip = target == h.ignore_index;
                let (gr, lr) = (*g.at(0, r), *l.at(0, r));
                let scale = one + two * zl * lr;
                for c in 0..classes {
                    let mut d = ((*x.at(r, c)).load() - lr).exp() * scale - smooth;
                    if c as i64 == target {
                        d = d - hit;
                    }
                    *dx.at(r, c) = T::store(if skip { zero } else { gr * d });
                }
            }
        }
    });
    Ok(())
}
