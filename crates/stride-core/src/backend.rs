//! The backend contract: the small set of primitives every backend implements, over views.
//!
//! Each primitive receives every operand — the output included — as a [`View`] (storage +
//! layout + dtype) and must address each through its layout. The frontend has already
//! validated shapes, broadcast the inputs to the output's shape (stride 0), cast inputs to the
//! op's compute dtype, and made sure the output does not partially alias an input (an output
//! may be *exactly* an input: same storage and layout, for in-place ops). Everything else —
//! softmax, losses, optimizers — is composed from these in the frontend, except the fused
//! primitives a few hot compositions have: the Adam update ([`optim`]), the normalisations
//! ([`norm`]), the cross-entropy over rows of logits ([`cross_entropy`]), attention
//! ([`attention`]) and the multi-operand pointwise ops: rotary embeddings and gated
//! activations ([`pointwise`]).

use crate::debug::{self, Replay};
use crate::{DType, Device, Error, Layout, Result, Scalar, Storage};

pub mod attention; // fused scaled-dot-product attention (backend/attention.rs)
pub mod cached_attention; // attention over a KV cache held on the device (backend/cached_attention.rs)
pub(crate) mod common; // code every backend shares (backend/common/)
pub(crate) mod contract; // the Backend trait and the device → backend map
pub mod cross_entropy; // cross-entropy over rows of logits (backend/cross_entropy.rs)
pub mod grouped_matmul; // grouped matrix products over device-side offsets (backend/grouped_matmul.rs)
pub mod index; // index primitives: gather, scatter, masked scans (backend/index.rs)
pub mod norm; // row normalisation: rms_norm, layer_norm (backend/norm.rs)
pub(crate) mod op_table; // every elementwise op and reduction, declared once
pub mod optim; // fused optimizer updates (backend/optim.rs)
pub mod pointwise; // fused pointwise ops: rotary, gated activations (backend/pointwise.rs)
pub mod sort; // sorting and selection primitives (backend/sort.rs)

/// One operand of a primitive: a storage seen through a layout.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub storage: &'a Storage,
    pub layout: &'a Layout,
    pub dtype: DType,
}

/// Elementwise unary ops. Input and output dtype are decided by the frontend
/// (see [`UnaryOp::dtypes`]). Each op's name, policy and kernels: `backend/op_table.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sign,
    Exp,
    Exp2,
    Log,
    Log2,
    Log1p,
    Expm1,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Square,
    Sin,
    Cos,
    Tan,
    Tanh,
    Sigmoid,
    Relu,
    GeluErf,
    GeluTanh,
    Silu,
    Softplus,
    Floor,
    Ceil,
    Round,
    Trunc,
    Erf,
    IsNan,
    IsInf,
    IsFinite,
    LogicalNot,
}

/// How an op treats integer and bool inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntPolicy {
    /// Computes in the input's dtype (neg, abs, floor, …).
    Keep,
    /// Integer inputs are computed in the default float dtype, f32 (exp, sqrt, …: PyTorch's
    /// "int to float" promotion).
    ToFloat,
    /// Only float inputs are accepted (activation functions, as in PyTorch).
    FloatOnly,
    /// Any input; the result is bool (isnan, logical_not, comparisons).
    ToBool,
}

/// Elementwise binary ops (both inputs in the compute dtype).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDivide,
    Remainder,
    Pow,
    Maximum,
    Minimum,
    Atan2,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    ShiftLeft,
    ShiftRight,
    ClampMin,
    ClampMax,
}

impl BinaryOp {
    /// Whether the result is bool (comparisons and logical ops).
    pub fn is_comparison(self) -> bool {
        self.int_policy() == IntPolicy::ToBool
    }
}

/// Elementwise ternary ops. Scalars that are part of the op (addcmul's `value`) travel in
/// the variant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TernaryOp {
    /// `cond ? a : b` — operand 0 is a bool tensor.
    Where,
    /// `start + weight·(end − start)`, PyTorch's numerically careful form.
    Lerp,
    /// `self + value·t1·t2`
    Addcmul(Scalar),
    /// `self + value·t1/t2`
    Addcdiv(Scalar),
    /// `min(max(x, lo), hi)` with NaN propagating from any operand.
    Clamp,
}

/// Dispatches a primitive to the backend of the output's device.
pub(crate) fn device_of(views: &[View]) -> Device {
    views[0].storage.device()
}

/// The one device of all `views` (the output first), or an error naming two that differ.
/// Frontends check this already; the backend checks again because a kernel handed a storage
/// of another device would read garbage.
pub(crate) fn same_device(op: &'static str, views: &[View]) -> Result<Device> {
    let d = views[0].storage.device();
    for v in &views[1..] {
        let e = v.storage.device();
        if e != d {
            return Err(Error::DeviceMismatch { op, a: d, b: e });
        }
    }
    Ok(d)
}

// Each primitive runs through `debug::primitive` (the debug tools' one hook; a relaxed atomic
// load when they are off) with a closure that dispatches on the views' device: the
// cross-check calls it again with the reference device's copies.

pub(crate) fn copy_cast(src: View, dst: View) -> Result<()> {
    debug::primitive("copy", Replay::Widen, &[src], &[dst], |i, o| {
        contract::backend_for(same_device("copy", &[o[0], i[0]])?).copy_cast(i[0], o[0])
    })
}
pub(crate) fn fill(dst: View, value: Scalar) -> Result<()> {
    debug::primitive("fill", Replay::Widen, &[], &[dst], |_, o| {
        contract::backend_for(same_device("fill", &[o[0]])?).fill(o[0], value)
    })
}
pub(crate) fn unary(op: UnaryOp, src: View, dst: View) -> Result<()> {
    debug::primitive(op.name(), Replay::Widen, &[src], &[dst], |i, o| {
        contract::backend_for(same_device(op.name(), &[o[0], i[0]])?).unary(op, i[0], o[0])
    })
}
pub(crate) fn binary(op: BinaryOp, a: View, b: View, dst: View) -> Result<()> {
    // integer division and powers check their divisors/exponents before writing: on a GPU
    // the check runs on the device without a wait, unless sync checks are on — then every
    // device reports the wait (`debug::host_sync`)
    let _sync = if a.dtype.is_int()
        && crate::sync_checks()
        && matches!(
            op,
            BinaryOp::FloorDivide | BinaryOp::Remainder | BinaryOp::Pow
        )
        && dst.layout.numel() > 0
    {
        Some(debug::host_sync(
            dst.storage.device(),
            "integer division check",
        )?)
    } else {
        None
    };
    debug::primitive(op.name(), Replay::Widen, &[a, b], &[dst], |i, o| {
        contract::backend_for(same_device(op.name(), &[o[0], i[0], i[1]])?)
            .binary(op, i[0], i[1], o[0])
    })
}
pub(crate) fn ternary(op: TernaryOp, a: View, b: View, c: View, dst: View) -> Result<()> {
    debug::primitive(op.name(), Replay::Widen, &[a, b, c], &[dst], |i, o| {
        contract::backend_for(same_device(op.name(), &[o[0], i[0], i[1], i[2]])?)
            .ternary(op, i[0], i[1], i[2], o[0])
    })
}

/// `dst = src` with the dims in `dims` reversed (`src` has `dst`'s shape). Its own primitive
/// because a reversed dim would need a negative stride, which layouts never have.
pub(crate) fn flip(src: View, dims: &[usize], dst: View) -> Result<()> {
    debug::primitive("flip", Replay::Widen, &[src], &[dst], |i, o| {
        contract::backend_for(same_device("flip", &[o[0], i[0]])?).flip(i[0], dims, o[0])
    })
}

/// What a random fill draws. Every variant is a pure function of (seed, offset, logical
/// index): see [`crate::random`] for the exact mapping from Philox words to elements, which
/// every backend implements bit for bit. The frontend checks the parameters and the dtype.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RandomDist {
    /// `low + (high − low)·u`, `u` uniform in [0, 1), kept below `high` (float outputs).
    Uniform { low: f64, high: f64 },
    /// `mean + std·z`, `z` standard normal by Box–Muller (float outputs).
    Normal { mean: f64, std: f64 },
    /// An integer uniform in `[low, high)` (any non-bool output that holds the range).
    RandInt { low: i64, high: i64 },
    /// `value` with probability `p`, else 0 (any output; bool gets `value != 0`).
    Bernoulli { p: f64, value: f64 },
    /// 64 raw random bits as an `i64` (I64 outputs; randperm's sort keys).
    Bits64,
}

/// Fills `dst` (through its layout) with `dist` drawn from the Philox stream `(seed, offset)`;
/// element values depend only on their logical (row-major) index, never on the layout or the
/// number of threads.
pub(crate) fn random(dist: RandomDist, seed: u64, offset: u64, dst: View) -> Result<()> {
    debug::primitive("random", Replay::SameDtype, &[], &[dst], |_, o| {
        contract::backend_for(device_of(&[o[0]])).random(dist, seed, offset, o[0])
    })
}

/// Batched matrix product `dst[i] = a[i] · b[i]`: `a` is `[*batch, M, K]`, `b` is
/// `[*batch, K, N]` and `dst` is `[*batch, M, N]`, any strides (the inputs already broadcast
/// to the common batch shape, stride 0 allowed; zero or more batch dims). All three share one
/// float dtype. `dst` is non-overlapping and shares no storage with an input (the frontend
/// routes aliasing through a temporary); its prior contents are never read. K = 0 writes
/// zeros.
pub(crate) fn matmul(a: View, b: View, dst: View) -> Result<()> {
    debug::primitive("matmul", Replay::Widen, &[a, b], &[dst], |i, o| {
        contract::backend_for(same_device("matmul", &[o[0], i[0], i[1]])?).matmul(i[0], i[1], o[0])
    })
}

// ---------------------------------------------------------------------------------------------
// reductions and cumulative ops

/// Reductions over a set of dims. The output has the input's rank with size 1 in every
/// reduced dim (the frontend passes a keepdim view of the caller's output).
///
/// Accumulation: f64 and f32 accumulate in f64, f16 and bf16 in f32, integers and bool in
/// i64 (wrapping). The order in which elements are combined depends only on the input's shape
/// and layout — never on the number of threads — so a result is reproducible bit for bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Σx; 0 for an empty reduction.
    Sum,
    /// Πx; 1 for an empty reduction.
    Prod,
    /// Σx / n in the accumulation type, rounded once; NaN for an empty reduction.
    Mean,
    /// The largest element; NaN propagates. An empty reduction is an error.
    Max,
    /// The smallest element; NaN propagates. An empty reduction is an error.
    Min,
    /// Whether every element is non-zero (NaN counts as non-zero); true when empty.
    All,
    /// Whether any element is non-zero; false when empty.
    Any,
    /// How many elements are non-zero.
    CountNonzero,
}

impl ReduceOp {
    /// Whether reducing over zero elements is an error (the op has no identity).
    pub fn needs_nonempty(self) -> bool {
        self.empty() == op_table::Empty::Error
    }
}

/// Reductions that also say *where* the extremum is: values (the input's dtype) and i64
/// indices. The index is the position in row-major order over the reduced dims (over one
/// dim: the index along it; over all dims: the flat index). Ties give the first occurrence;
/// a NaN beats every number, and the first NaN wins. Any input dtype; an empty reduction is
/// an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArgReduceOp {
    Max,
    Min,
}

impl ArgReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ArgReduceOp::Max => "argmax",
            ArgReduceOp::Min => "argmin",
        }
    }
}

/// Inclusive scans along one dim. The output has the input's shape.
///
/// Dtypes: floats keep their dtype (f32 accumulates in f64, f16/bf16 in f32, each output
/// rounded once); integers and bool give i64 (wrapping), as PyTorch. Each line is scanned in
/// order, so the result does not depend on the layout or the number of threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CumulativeOp {
    Sum,
    Prod,
}

impl CumulativeOp {
    pub fn name(self) -> &'static str {
        match self {
            CumulativeOp::Sum => "cumsum",
            CumulativeOp::Prod => "cumprod",
        }
    }
    /// The result dtype for an input dtype: floats keep it, integers and bool give i64.
    pub fn result_dtype(self, input: DType) -> DType {
        if input.is_float() {
            input
        } else {
            DType::I64
        }
    }
}

/// `dst = op(src)` over the sorted, distinct `dims`; `dst` has `src`'s rank with size 1 in
/// each reduced dim and the dtype [`ReduceOp::result_dtype`] gives.
pub(crate) fn reduce(op: ReduceOp, src: View, dims: &[usize], dst: View) -> Result<()> {
    debug::primitive(op.name(), Replay::Widen, &[src], &[dst], |i, o| {
        contract::backend_for(same_device(op.name(), &[o[0], i[0]])?).reduce(op, i[0], dims, o[0])
    })
}
/// Values (optional, `src`'s dtype) and i64 indices of the extremum over `dims`; both
/// outputs in keepdim form, as for [`reduce`].
pub(crate) fn arg_reduce(
    op: ArgReduceOp,
    src: View,
    dims: &[usize],
    values: Option<View>,
    indices: View,
) -> Result<()> {
    let outputs: Vec<View> = values.into_iter().chain([indices]).collect();
    debug::primitive(op.name(), Replay::Widen, &[src], &outputs, |i, o| {
        let (values, indices) = match o {
            [v, ix] => (Some(*v), *ix),
            _ => (None, o[0]),
        };
        contract::backend_for(same_device(op.name(), &[indices, i[0]])?)
            .arg_reduce(op, i[0], dims, values, indices)
    })
}
/// Inclusive scan of `src` along `dim` into `dst` (same shape).
pub(crate) fn cumulative(op: CumulativeOp, src: View, dim: usize, dst: View) -> Result<()> {
    debug::primitive(op.name(), Replay::Widen, &[src], &[dst], |i, o| {
        contract::backend_for(same_device(op.name(), &[o[0], i[0]])?)
            .cumulative(op, i[0], dim, o[0])
    })
}
