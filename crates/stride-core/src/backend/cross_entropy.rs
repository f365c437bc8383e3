//! Cross-entropy primitives over the rows of 2-d logits: forward and backward, each reading
//! the logits once, never materialising the softmax (the frontend: `ops/cross_entropy.rs`).
//!
//! Operands (logits and their gradient of one float dtype `T`; per-row values in `T`'s
//! compute dtype `C`: f32 for f32/f16/bf16, f64 for f64; targets i64):
//! - forward: inputs `[logits (R, V), target (R)]`, outputs `[loss (R), lse (R)]`;
//! - backward: inputs `[logits (R, V), target (R), grad (R), lse (R)]`, outputs
//!   `[dlogits (R, V)]`.
//!
//! Per row, in `C`, with `lse = log Σ_j exp(z_j)`, `ε` the label smoothing and `λ` the z-loss
//! weight, a row whose target is `ignore_index` giving loss 0 and gradient 0:
//! - `loss = (1 − ε)(lse − z_t) + ε(lse − mean_j z_j) + λ·lse²`;
//! - `dz_j = grad·((1 + 2λ·lse)·exp(z_j − lse) − ε/V − (1 − ε)[j = t])`.
//!
//! A target outside `[0, V)` (and not `ignore_index`) is an error: at the call on the CPU, at
//! the next read of the device on CUDA (a deferred device check, no host wait).

use super::contract::backend_for;
use super::{same_device, View};
use crate::debug::{self, Replay};
use crate::Result;

/// The options of a fused cross-entropy (PyTorch's `ignore_index` and `label_smoothing`, and
/// the z-loss of PaLM: `λ·lse²` added per row, keeping the logits' scale in check).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropyRows {
    /// Rows whose target is this index contribute nothing (loss and gradient 0).
    pub ignore_index: i64,
    /// ε in `[0, 1]`: the target distribution is `(1 − ε)·one_hot + ε/V`.
    pub label_smoothing: f64,
    /// λ ≥ 0: `λ·lse²` is added to each row's loss.
    pub z_loss: f64,
}

impl Default for CrossEntropyRows {
    fn default() -> Self {
        CrossEntropyRows {
            ignore_index: -100,
            label_smoothing: 0.0,
            z_loss: 0.0,
        }
    }
}

/// Rows and classes of a forward or backward call (from the logits).
pub(crate) fn rows(logits: &View) -> (usize, usize) {
    let s = logits.layout.shape();
    (s[0], s[1])
}

/// The per-row losses and log-sum-exps of `i = [logits, target]` into `o = [loss, lse]`.
pub(crate) fn cross_entropy(h: CrossEntropyRows, i: &[View], o: &[View]) -> Result<()> {
    let op = "cross_entropy";
    debug::primitive(op, Replay::Widen, i, o, |i, o| {
        let all: Vec<View> = o.iter().chain(i).copied().collect();
        backend_for(same_device(op, &all)?).cross_entropy(h, i, o)
    })
}

/// The logits' gradient from `i = [logits, target, grad, lse]` into `o = [dlogits]`.
pub(crate) fn cross_entropy_backward(h: CrossEntropyRows, i: &[View], o: &[View]) -> Result<()> {
    let op = "cross_entropy_backward";
    debug::primitive(op, Replay::Widen, i, o, |i, o| {
        let all: Vec<View> = o.iter().chain(i).copied().collect();
        backend_for(same_device(op, &all)?).cross_entropy_backward(h, i, o)
    })
}
