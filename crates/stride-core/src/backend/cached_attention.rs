//! Attention of a few new tokens over a key/value cache whose length is held on the device
//! (the frontend: `ops/cached_attention.rs`): the new keys and values are written into the
//! cache (keys and queries rotated first, when the call has rotary tables), then each query
//! attends to the cache's keys up to its own position. Inference only: no backward.
//!
//! Operands (`T` one float dtype; `C` its compute dtype: f32 for f32/f16/bf16, f64 for f64):
//! - inputs `[q (B, Hq, L, E), k (B, Hk, L, E), v (B, Hk, L, Ev), len (B) i64,
//!   start (B) i64 (if [`CachedAttention::start`]), cos (P, R/2), sin (P, R/2) (if
//!   [`CachedAttention::rotary`]; any float dtype, read as `C`)]`;
//! - outputs `[o (B, Hq, L, Ev), k_cache (B, Hk, Cap, E), v_cache (B, Hk, Cap, Ev)]` — the
//!   caches are read as well as written.
//!
//! Row `b` holds `len[b]` positions; its new tokens go to positions `len[b] + i`, `i < L`.
//! Query `i` of row `b` sees the keys `j` with `start[b] ≤ j ≤ len[b] + i` (`start` 0 when
//! absent, and at least 0). Rotary position of new token `i`: `max(len[b] + i − start[b], 0)`
//! (a left-padded row's first real token is position 0; below `Cap ≤ P` for a valid length,
//! so inside the tables), pairs as [`RotaryStyle`] says over the first `R`
//! features, the rotation of `Tensor::rotary` (`a·cos − b·sin`, `a·sin + b·cos` in `C`,
//! rounded to `T`); the rotated query is rounded to `T` too, as the composed ops store it.
//!
//! Per query row, in `C`: `s_j = scale·q·k_j`, `o = Σ_j softmax(s)_j·v_j`; a row with no
//! visible key gives zeros. The sums' order is fixed (no atomics): the same bits every run.
//!
//! A `len[b]` outside `0..=Cap − L` is an error: on the CPU at the call, before anything is
//! written; on CUDA at the next read of the device (a deferred check), the row left
//! unwritten.

use super::contract::backend_for;
use super::{same_device, View};
use crate::debug::{self, Replay};
use crate::{Error, Result, RotaryStyle};

/// One call's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CachedAttention {
    /// The factor on `q·k`.
    pub scale: f64,
    /// Query heads per key/value head.
    pub groups: usize,
    /// Whether the inputs carry a `start` operand (first visible key of each row).
    pub start: bool,
    /// The pairing of rotated features, when the inputs carry rotary tables.
    pub rotary: Option<RotaryStyle>,
}

/// The operands by name.
pub(crate) struct CachedOperands<'a> {
    pub q: View<'a>,
    pub k: View<'a>,
    pub v: View<'a>,
    pub len: View<'a>,
    pub start: Option<View<'a>>,
    pub tables: Option<(View<'a>, View<'a>)>,
    pub o: View<'a>,
    pub k_cache: View<'a>,
    pub v_cache: View<'a>,
}

/// The sizes of one call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CachedDims {
    pub b: usize,
    pub hq: usize,
    pub hk: usize,
    pub l: usize,
    pub e: usize,
    pub ev: usize,
    /// The cache's capacity.
    pub cap: usize,
    /// Rotated pairs (`R/2`); 0 without rotary.
    pub half: usize,
}

impl CachedAttention {
    /// Names the operands (the module docs' order).
    pub(crate) fn operands<'a>(&self, i: &[View<'a>], o: &[View<'a>]) -> CachedOperands<'a> {
        let mut next = 4;
        let start = self.start.then(|| {
            next += 1;
            i[next - 1]
        });
        let tables = self.rotary.map(|_| (i[next], i[next + 1]));
        CachedOperands {
            q: i[0],
            k: i[1],
            v: i[2],
            len: i[3],
            start,
            tables,
            o: o[0],
            k_cache: o[1],
            v_cache: o[2],
        }
    }
}

impl CachedOperands<'_> {
    pub(crate) fn dims(&self) -> CachedDims {
        let (qs, vs, cs) = (
            self.q.layout.shape(),
            self.v.layout.shape(),
            self.k_cache.layout.shape(),
        );
        let half = self.tables.as_ref().map_or(0, |(c, _)| c.layout.shape()[1]);
        CachedDims {
            b: qs[0],
            hq: qs[1],
            hk: cs[1],
            l: qs[2],
            e: qs[3],
            ev: vs[3],
            cap: cs[2],
            half,
        }
    }
}

/// The error of a cache length out of range (`len` the bad value).
pub(crate) fn bad_len(len: i64, l: usize, cap: usize) -> Error {
    Error::invalid(
        "attention_with_kv_cache",
        format!(
            "the cache length {len} leaves no room for {l} new positions in a cache of capacity {cap} (it must be in 0..={}); truncate the cache or allocate a larger one",
            cap as i64 - l as i64
        ),
    )
}

/// Writes the new keys/values into the caches and attends (the module docs' operand order;
/// the frontend checked shapes, dtypes and devices and allocated the output).
pub(crate) fn cached_attention(a: CachedAttention, i: &[View], o: &[View]) -> Result<()> {
    debug::primitive("attention_with_kv_cache", Replay::Widen, i, o, |i, o| {
        let all: Vec<View> = o.iter().chain(i).copied().collect();
        backend_for(same_device("attention_with_kv_cache", &all)?).cached_attention(a, i, o)
    })
}
