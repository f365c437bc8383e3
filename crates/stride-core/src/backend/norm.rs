//! Row normalisation primitives: `rms_norm` and `layer_norm` over the rows of a 2-d view,
//! forward and backward, each one pass over memory (the frontend: `ops/norm.rs`).
//!
//! Operands (every float one of one dtype `T`; the statistics in `T`'s compute dtype `C`:
//! f32 for f32/f16/bf16, f64 for f64):
//! - forward: inputs `[x (R, N), residual (R, N)?, weight (N)?, bias (N)?]`, outputs
//!   `[y (R, N), rstd (R), mean (R) (layer norm only), sum (R, N)?]`. With a residual (the
//!   fused `h = x + residual; y = norm(h)` of a transformer block, [`Norm::residual`]) the
//!   row normalised is `sum = x + residual` as the `add` kernel computes it (in `C`, rounded
//!   to `T` and written to `sum`), read back from `T` exactly as a norm of the stored sum
//!   would read it: a backend sums it in the order of its plain forward on a `sum` laid as
//!   the one passed, so the result is the composed ops' bit for bit;
//! - backward: inputs `[dy (R, N), x (R, N), rstd (R), mean (R)?, weight (N)?]`, outputs
//!   `[dx (R, N), dweight (N)?, dbias (N)?]` — a gradient for every affine operand present.
//!
//! Per row, in `C` (`x̂ = (x − mean)·rstd`, mean 0 for RMS):
//! - `rstd = 1/√(var + eps)` (layer norm: the biased variance about the mean, computed
//!   about the mean; RMS: `var` is `mean(x²)`), `y = x̂·w + b`;
//! - `g = dy·w`, `dx = rstd·(g − mean(g) − x̂·mean(g·x̂))` (RMS: no `mean(g)` term),
//!   `dweight = Σ_rows dy·x̂`, `dbias = Σ_rows dy`, each summed in a fixed order (row blocks,
//!   then the blocks in order): the same bits every run.

use super::contract::backend_for;
use super::{same_device, View};
use crate::debug::{self, Replay};
use crate::{DType, Result};

/// Which normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NormKind {
    /// `x / √(mean(x²) + eps)` (`F.rms_norm`).
    Rms,
    /// `(x − mean) / √(var + eps)` (`F.layer_norm`).
    Layer,
}

/// One normalisation: its kind, `eps`, and which optional operands are present.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Norm {
    pub kind: NormKind,
    pub eps: f64,
    pub weight: bool,
    pub bias: bool,
    /// Forward only: normalise `x + residual` and write that sum too (the module docs).
    pub residual: bool,
}

/// The forward operands by name.
pub(crate) struct NormFwd<'a> {
    pub x: View<'a>,
    pub residual: Option<View<'a>>,
    pub weight: Option<View<'a>>,
    pub bias: Option<View<'a>>,
    pub y: View<'a>,
    pub rstd: View<'a>,
    pub mean: Option<View<'a>>,
    pub sum: Option<View<'a>>,
}

/// The backward operands by name.
pub(crate) struct NormBwd<'a> {
    pub dy: View<'a>,
    pub x: View<'a>,
    pub rstd: View<'a>,
    pub mean: Option<View<'a>>,
    pub weight: Option<View<'a>>,
    pub dx: View<'a>,
    pub dweight: Option<View<'a>>,
    pub dbias: Option<View<'a>>,
}

impl Norm {
    /// Rows and row length of a forward or backward call (from `x`).
    pub(crate) fn rows(x: &View) -> (usize, usize) {
        let s = x.layout.shape();
        (s[0], s[1])
    }
    /// Names the forward operands of `inputs`/`outputs` (the module docs' order).
    pub(crate) fn fwd<'a>(&self, i: &[View<'a>], o: &[View<'a>]) -> NormFwd<'a> {
        let mut rest = i[1..].iter().copied();
        let mut stats = o[2..].iter().copied();
        NormFwd {
            x: i[0],
            residual: if self.residual { rest.next() } else { None },
            weight: if self.weight { rest.next() } else { None },
            bias: if self.bias { rest.next() } else { None },
            y: o[0],
            rstd: o[1],
            mean: match self.kind {
                NormKind::Layer => stats.next(),
                NormKind::Rms => None,
            },
            sum: if self.residual { stats.next() } else { None },
        }
    }
    /// Names the backward operands of `inputs`/`outputs`.
    pub(crate) fn bwd<'a>(&self, i: &[View<'a>], o: &[View<'a>]) -> NormBwd<'a> {
        let layer = self.kind == NormKind::Layer;
        let mut rest = i[3..].iter().copied();
        let mean = if layer { rest.next() } else { None };
        let mut grads = o[1..].iter().copied();
        NormBwd {
            dy: i[0],
            x: i[1],
            rstd: i[2],
            mean,
            weight: if self.weight { rest.next() } else { None },
            dx: o[0],
            dweight: if self.weight { grads.next() } else { None },
            dbias: if self.bias { grads.next() } else { None },
        }
    }
}

/// The dtype of the saved statistics of a `dtype` normalisation.
pub(crate) fn stat_dtype(dtype: DType) -> DType {
    crate::compute_dtype(dtype)
}

/// Normalises the rows of `i[0]` into `o` (the module docs' operand order; the frontend
/// checked shapes and dtypes and allocated the outputs).
pub(crate) fn norm(n: Norm, i: &[View], o: &[View]) -> Result<()> {
    let op = n.name();
    debug::primitive(op, Replay::Widen, i, o, |i, o| {
        let all: Vec<View> = o.iter().chain(i).copied().collect();
        backend_for(same_device(op, &all)?).norm(n, i, o)
    })
}

/// The backward of [`norm`] (the module docs' operand order).
pub(crate) fn norm_backward(n: Norm, i: &[View], o: &[View]) -> Result<()> {
    let op = match n.kind {
        NormKind::Rms => "rms_norm_backward",
        NormKind::Layer => "layer_norm_backward",
    };
    debug::primitive(op, Replay::Widen, i, o, |i, o| {
        let all: Vec<View> = o.iter().chain(i).copied().collect();
        backend_for(same_device(op, &all)?).norm_backward(n, i, o)
    })
}

impl Norm {
    /// The forward's op name (in errors, profiles and the debug tools).
    pub(crate) fn name(&self) -> &'static str {
        match (self.residual, self.kind) {
            (true, NormKind::Rms) => "add_rms_norm",
            (true, NormKind::Layer) => "add_layer_norm",
            (false, kind) => name(kind),
        }
    }
}

pub(crate) fn name(kind: NormKind) -> &'static str {
    match kind {
        NormKind::Rms => "rms_norm",
        NormKind::Layer => "layer_norm",
    }
}
