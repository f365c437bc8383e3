//! Fused pointwise primitives: a few operands of one shape, one pass over memory, one or two
//! outputs — rotary embeddings and gated activations (the frontends: `ops/rotary.rs`,
//! `ops/gated.rs`). Each replaces a chain of elementwise ops that would store every
//! intermediate; the math is that chain's, computed in the compute dtype `C` of the float
//! dtype `T` (f32 for f32/f16/bf16, f64 for f64) and rounded to `T` once.
//!
//! Every operand has the shape of output 0; inputs may broadcast (stride 0). Operands:
//! - [`Pointwise::Rotary`]: inputs `[a (T), b (T), cos (C), sin (C)]`, outputs `[ya, yb]`:
//!   `ya = a·cos − b·sin`, `yb = a·sin + b·cos`; `inverse` negates `sin` (the rotation's
//!   transpose: its backward). `a`/`b` are the pair views of a head's features (halves, or
//!   even/odd: the caller's views choose the convention).
//! - [`Pointwise::Gated`]: inputs `[gate, up]`, outputs `[y]`: `y = act(gate)·up`.
//! - [`Pointwise::GatedBackward`]: inputs `[dy, gate, up]`, outputs `[dgate, dup]`:
//!   `dup = dy·act(gate)`, `dgate = dy·up·act′(gate)`.
//!
//! Products are not fused into multiply-adds (CUDA compiles with `--fmad=false`), so the
//! rotation gives the same bits as the composed f32 ops it replaces, on every backend.

use super::common::check::{check_extent, internal};
use super::contract::backend_for;
use super::{same_device, View};
use crate::debug::{self, Replay};
use crate::Result;

/// The activation of a gated unit `act(gate)·up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GateActivation {
    /// `x·sigmoid(x)`: SwiGLU (Llama, Mistral, Qwen).
    Silu,
    /// `x·Φ(x)`, the exact GELU: GeGLU.
    Gelu,
    /// GELU's tanh approximation (PyTorch's `approximate='tanh'`): GeGLU as Gemma uses it.
    GeluTanh,
}

impl GateActivation {
    /// The name of the fused unit (`swiglu`, `geglu`, `geglu_tanh`).
    pub fn name(self) -> &'static str {
        match self {
            GateActivation::Silu => "swiglu",
            GateActivation::Gelu => "geglu",
            GateActivation::GeluTanh => "geglu_tanh",
        }
    }
}

/// Which fused pointwise op (see the module docs for each one's operands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pointwise {
    Rotary { inverse: bool },
    Gated(GateActivation),
    GatedBackward(GateActivation),
}

impl Pointwise {
    /// The primitive's name (for errors and the debug tools).
    pub fn name(self) -> &'static str {
        match self {
            Pointwise::Rotary { inverse: false } => "rotary",
            Pointwise::Rotary { inverse: true } => "rotary_backward",
            Pointwise::Gated(a) => a.name(),
            Pointwise::GatedBackward(GateActivation::Silu) => "swiglu_backward",
            Pointwise::GatedBackward(GateActivation::Gelu) => "geglu_backward",
            Pointwise::GatedBackward(GateActivation::GeluTanh) => "geglu_tanh_backward",
        }
    }
    /// How many inputs and outputs it takes.
    pub fn arity(self) -> (usize, usize) {
        match self {
            Pointwise::Rotary { .. } => (4, 2),
            Pointwise::Gated(_) => (2, 1),
            Pointwise::GatedBackward(_) => (3, 2),
        }
    }
}

/// Runs `p` (the module docs' operand order; the frontend checked shapes and dtypes,
/// broadcast the inputs and allocated the outputs).
pub(crate) fn pointwise(p: Pointwise, i: &[View], o: &[View]) -> Result<()> {
    let (ni, no) = p.arity();
    if i.len() != ni || o.len() != no {
        return Err(internal(p.name(), "wrong operand count"));
    }
    for v in i.iter().chain(o) {
        check_extent(p.name(), v, 0)?;
    }
    debug::primitive(p.name(), Replay::Widen, i, o, |i, o| {
        let all: Vec<View> = o.iter().chain(i).copied().collect();
        backend_for(same_device(p.name(), &all)?).pointwise(p, i, o)
    })
}
