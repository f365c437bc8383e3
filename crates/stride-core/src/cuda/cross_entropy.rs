//! Cross-entropy over rows on CUDA (kernels/cross_entropy.cu; the math and operand order:
//! `backend/cross_entropy.rs`): one launch forward, one backward. The forward checks the
//! targets on the device: a bad one is reported at the next read of the device (a deferred
//! check, `deferred.rs`), or at the call with sync checks on.

use super::buffer::CudaBuffer;
use super::index::{describe, read_words};
use super::launch::{arg, dptr, launch_cfg};
use super::rows::{grid_for, operand, vectorised};
use super::source::{float_modules, float_preamble, tag};
use crate::backend::cross_entropy::{rows, CrossEntropyRows};
use crate::backend::View;
use crate::{DType, Error, Result};

const COMMON: &str = include_str!("kernels/common.cuh");
const ROWS: &str = include_str!("kernels/rows.cuh");
const CROSS_ENTROPY: &str = include_str!("kernels/cross_entropy.cu");

/// Threads per block (a block per row).
const BLOCK: usize = 256;

/// The cross-entropy module of float dtype `t` (`cross_entropy_<t>`).
pub(crate) fn module(t: DType) -> String {
    format!("{COMMON}{}{ROWS}{CROSS_ENTROPY}", float_preamble(t))
}

/// Every cross-entropy module (for warmup).
pub(crate) fn all_modules() -> Vec<(String, String)> {
    float_modules("cross_entropy", module)
}

/// See [`crate::backend::cross_entropy::cross_entropy`].
pub(crate) fn cross_entropy(h: CrossEntropyRows, i: &[View], o: &[View]) -> Result<()> {
    let (logits, target, loss, lse) = (i[0], i[1], o[0], o[1]);
    let (n, classes) = rows(&logits);
    if n == 0 {
        return Ok(());
    }
    let t = logits.dtype;
    let (dev, _) = dptr(&logits)?;
    let x = operand(&logits)?;
    let tg = operand(&target)?;
    let lo = operand(&loss)?;
    let le = operand(&lse)?;
    let kernel = if vectorised(classes, &[x], t) {
        "ce_vec"
    } else {
        "ce"
    };
    let f = dev.function(&format!("cross_entropy_{}", tag(t)), kernel, || module(t))?;
    let gate = CudaBuffer::new(&dev, 16, true)?;
    let (r, v) = (n as i64, classes as i64);
    let mut args = [
        arg(&r),
        arg(&v),
        arg(&x.0),
        arg(&x.1),
        arg(&x.2),
        arg(&x.3),
        arg(&tg.0),
        arg(&tg.1),
        arg(&tg.3),
        arg(&h.ignore_index),
        arg(&h.label_smoothing),
        arg(&h.z_loss),
        arg(&lo.0),
        arg(&lo.1),
        arg(&lo.3),
        arg(&le.0),
        arg(&le.1),
        arg(&le.3),
        arg(&gate.ptr),
    ];
    unsafe {
        launch_cfg(
            &dev,
            &f,
            "cross_entropy",
            (grid_for(dev.sm_count, n, BLOCK), 1, 1),
            (BLOCK as u32, 1, 1),
            0,
            &mut args,
        )?;
    }
    let bad = move |value: i64| Error::IndexOutOfRange {
        op: "cross_entropy",
        index: value,
        dim: 1,
        size: classes,
    };
    if super::deferred::sync_checks() {
        let w = read_words(&dev, gate.ptr, 2, "cross_entropy target check")?;
        return match w[0] {
            0 => Ok(()),
            _ => Err(bad(w[1] as i64)),
        };
    }
    let failure = super::deferred::Failure {
        cause: Box::new(bad),
        operands: describe(&[("input", &logits), ("target", &target)]),
    };
    dev.deferred
        .register(&dev, "cross_entropy", gate.ptr, failure)?;
    // the gate lives until the device has run the check (stream-ordered free)
    drop(gate);
    Ok(())
}

/// See [`crate::backend::cross_entropy::cross_entropy_backward`].
pub(crate) fn cross_entropy_backward(h: CrossEntropyRows, i: &[View], o: &[View]) -> Result<()> {
    let (logits, target, grad, lse, dlogits) = (i[0], i[1], i[2], i[3], o[0]);
    let (n, classes) = rows(&logits);
    if n == 0 || classes == 0 {
        return Ok(());
    }
    let t = logits.dtype;
    let (dev, _) = dptr(&logits)?;
    let x = operand(&logits)?;
    let tg = operand(&target)?;
    let g = operand(&grad)?;
    let le = operand(&lse)?;
    let dx = operand(&dlogits)?;
    let kernel = if vectorised(classes, &[x, dx], t) {
        "ce_bwd_vec"
    } else {
        "ce_bwd"
    };
    let f = dev.function(&format!("cross_entropy_{}", tag(t)), kernel, || module(t))?;
    let (r, v) = (n as i64, classes as i64);
    let mut args = [
        arg(&r),
        arg(&v),
        arg(&x.0),
        arg(&x.1),
        arg(&x.2),
        arg(&x.3),
        arg(&tg.0),
        arg(&tg.1),
        arg(&tg.3),
        arg(&h.ignore_index),
        arg(&h.label_smoothing),
        arg(&h.z_loss),
        arg(&g.0),
        arg(&g.1),
        arg(&g.3),
        arg(&le.0),
        arg(&le.1),
        arg(&le.3),
        arg(&dx.0),
        arg(&dx.1),
        arg(&dx.2),
        arg(&dx.3),
    ];
    unsafe {
        launch_cfg(
            &dev,
            &f,
            "cross_entropy_backward",
            (grid_for(dev.sm_count, n, BLOCK), 1, 1),
            (BLOCK as u32, 1, 1),
            0,
            &mut args,
        )
    }
}
