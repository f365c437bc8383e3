//! Fused scaled-dot-product attention primitives, forward and backward, over `(B, H, L, E)`
//! views (the frontend: `ops/attention.rs`). Memory is O(L + S) per query head, never
//! O(L·S): the probabilities are recomputed in the backward from the saved log-sum-exp.
//!
//! Operands (`q`, `k`, `v`, `o` and their gradients of one float dtype `T`; the log-sum-exp
//! and an additive mask in `T`'s compute dtype `C`: f32 for f32/f16/bf16, f64 for f64):
//! - forward: inputs `[q (B, Hq, L, E), k (B, Hk, S, E), v (B, Hk, S, Ev), mask?
//!   (B, Hq, L, S)]`, outputs `[o (B, Hq, L, Ev), lse (B, Hq, L)]`;
//! - backward: inputs `[do (B, Hq, L, Ev), q, k, v, o, lse, mask?]`, outputs
//!   `[dq, dk, dv]` (the shapes of `q`, `k`, `v`).
//!
//! Query head `h` reads key/value head `h / (Hq/Hk)` (grouped-query attention; `Hq/Hk` is
//! [`Attention::groups`]). The mask is any view (a broadcast one has stride 0): bool (true =
//! attend) or `C` (added to the scores).
//!
//! Per query row `i`, in `C`: `s_j = scale·q_i·k_j (+ mask_ij)`, `−∞` where the key is masked
//! (bool false, or `j > i + offset` when causal); `lse_i = log Σ_j exp(s_j)`,
//! `p_j = exp(s_j − lse_i)`, `o_i = Σ_j p_j v_j`. A row whose keys are all masked has
//! `lse = −∞` and `o = 0` (never NaN), and contributes no gradient. Backward:
//! `D_i = do_i·o_i`, `ds_j = p_j (do_i·v_j − D_i)`, `dq_i = scale Σ_j ds_j k_j`,
//! `dk_j = scale Σ_i ds_j q_i`, `dv_j = Σ_i p_j do_i` — each sum taken in a fixed order (the
//! same bits every run; no atomics).

use super::contract::backend_for;
use super::{same_device, View};
use crate::debug::{self, Replay};
use crate::Result;

/// The kind of the mask operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttnMask {
    /// No mask operand.
    None,
    /// A bool mask: true where a query may attend.
    Bool,
    /// A mask in the compute dtype, added to the scaled scores.
    Additive,
}

/// One attention call's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attention {
    /// The factor on `q·k`.
    pub scale: f64,
    /// Causal: key `j` is visible to query `i` only if `j ≤ i + offset` (0 is PyTorch's
    /// top-left `is_causal`; `S − L` is the bottom-right mask of a KV-cache decode).
    pub causal: Option<i64>,
    pub mask: AttnMask,
    /// Query heads per key/value head.
    pub groups: usize,
}

/// The forward operands by name.
pub(crate) struct AttnFwd<'a> {
    pub q: View<'a>,
    pub k: View<'a>,
    pub v: View<'a>,
    pub mask: Option<View<'a>>,
    pub o: View<'a>,
    pub lse: View<'a>,
}

/// The backward operands by name.
pub(crate) struct AttnBwd<'a> {
    pub d_o: View<'a>,
    pub q: View<'a>,
    pub k: View<'a>,
    pub v: View<'a>,
    pub o: View<'a>,
    pub lse: View<'a>,
    pub mask: Option<View<'a>>,
    pub dq: View<'a>,
    pub dk: View<'a>,
    pub dv: View<'a>,
}

/// The sizes of one call: batch, query heads, key/value heads, query length, key length,
/// head dim of q/k and of v.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dims {
    pub b: usize,
    pub hq: usize,
    pub hk: usize,
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
}

impl Dims {
    pub(crate) fn of(q: &View, k: &View, v: &View) -> Dims {
        let (qs, ks, vs) = (q.layout.shape(), k.layout.shape(), v.layout.shape());
        Dims {
            b: qs[0],
            hq: qs[1],
            hk: ks[1],
            l: qs[2],
            s: ks[2],
            e: qs[3],
            ev: vs[3],
        }
    }
}

impl Attention {
    /// Names the forward operands (the module docs' order).
    pub(crate) fn fwd<'a>(&self, i: &[View<'a>], o: &[View<'a>]) -> AttnFwd<'a> {
        AttnFwd {
            q: i[0],
            k: i[1],
            v: i[2],
            mask: i.get(3).copied(),
            o: o[0],
            lse: o[1],
        }
    }
    /// Names the backward operands.
    pub(crate) fn bwd<'a>(&self, i: &[View<'a>], o: &[View<'a>]) -> AttnBwd<'a> {
        AttnBwd {
            d_o: i[0],
            q: i[1],
            k: i[2],
            v: i[3],
            o: i[4],
            lse: i[5],
            mask: i.get(6).copied(),
            dq: o[0],
            dk: o[1],
            dv: o[2],
        }
    }
    /// Whether key `j` is visible to query `i` by the causal rule (true when not causal).
    #[inline(always)]
    pub(crate) fn visible(&self, i: usize, j: usize) -> bool {
        match self.causal {
            Some(off) => (j as i64) <= i as i64 + off,
            None => true,
        }
    }
}

/// Attention forward into `o` (the module docs' operand order; the frontend checked shapes,
/// dtypes and devices and allocated the outputs).
pub(crate) fn attention(a: Attention, i: &[View], o: &[View]) -> Result<()> {
    debug::primitive("attention", Replay::Widen, i, o, |i, o| {
        let all: Vec<View> = o.iter().chain(i).copied().collect();
        backend_for(same_device("attention", &all)?).attention(a, i, o)
    })
}

/// The backward of [`attention`] (the module docs' operand order).
pub(crate) fn attention_backward(a: Attention, i: &[View], o: &[View]) -> Result<()> {
    debug::primitive("attention_backward", Replay::Widen, i, o, |i, o| {
        let all: Vec<View> = o.iter().chain(i).copied().collect();
        backend_for(same_device("attention_backward", &all)?).attention_backward(a, i, o)
    })
}
