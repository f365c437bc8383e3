//! Fused optimizer updates on CUDA: one launch per parameter (kernels/adam.cu), bit-identical
//! to the composed update (`backend/optim.rs`).

use super::launch::{arg, dptr, launch, walk};
use super::source::{ctype, tag};
use crate::backend::optim::AdamStep;
use crate::backend::View;
use crate::DType;
use crate::Result;

const COMMON: &str = include_str!("kernels/common.cuh");
const ELEMENTWISE: &str = include_str!("kernels/elementwise.cu");
const ADAM: &str = include_str!("kernels/adam.cu");

/// The Adam module of float dtype `t` (`adam_<t>`).
pub(crate) fn adam_module(t: DType) -> String {
    format!(
        "{COMMON}{ELEMENTWISE}\ntypedef {} T;\ntypedef E<T>::C C;\n#define L(v) E<T>::ld(v)\n#define S(v) E<T>::st(v)\n{ADAM}",
        ctype(t)
    )
}

/// Every optimizer module (for warmup).
pub(crate) fn all_modules() -> Vec<(String, String)> {
    [DType::F64, DType::F32, DType::F16, DType::BF16]
        .iter()
        .map(|&t| (format!("adam_{}", tag(t)), adam_module(t)))
        .collect()
}

/// See [`crate::backend::optim::adam`].
pub(crate) fn adam(
    h: &AdamStep,
    param: View,
    grad: View,
    exp_avg: View,
    exp_avg_sq: View,
    max_exp_avg_sq: Option<View>,
) -> Result<()> {
    let t = param.dtype;
    let s = h.scalars(t);
    let (dev, pp) = dptr(&param)?;
    let (_, pg) = dptr(&grad)?;
    let (_, pm) = dptr(&exp_avg)?;
    let (_, pv) = dptr(&exp_avg_sq)?;
    // without amsgrad the fifth operand is exp_avg_sq again, never touched
    let vmax = max_exp_avg_sq.unwrap_or(exp_avg_sq);
    let (_, pvmax) = dptr(&vmax)?;
    let w = walk("adam_step", [&param, &grad, &exp_avg, &exp_avg_sq, &vmax])?;
    let f = dev.function(&format!("adam_{}", tag(t)), "adam", || adam_module(t))?;
    let flags: i32 = (h.maximize as i32)
        | (h.decoupled() as i32) << 1
        | (h.l2() as i32) << 2
        | ((h.weight_decay == 1.0) as i32) << 3
        | (max_exp_avg_sq.is_some() as i32) << 4;
    let [sp, sg, sm, sv, svmax] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&w.contig),
        arg(&pp),
        arg(&sp),
        arg(&pg),
        arg(&sg),
        arg(&pm),
        arg(&sm),
        arg(&pv),
        arg(&sv),
        arg(&pvmax),
        arg(&svmax),
        arg(&flags),
        arg(&s.decay),
        arg(&s.weight_decay),
        arg(&s.one_minus_beta1),
        arg(&s.beta2),
        arg(&s.one_minus_beta2),
        arg(&s.bias_correction2_sqrt),
        arg(&s.eps),
        arg(&s.neg_step_size),
    ];
    unsafe { launch(&dev, &f, "adam_step", w.n, &mut args) }
}
