//! The op registry: one declaration per op, organised by family.
//!
//! | file | ops |
//! | --- | --- |
//! | [`unary`] | `neg` … `logical_not` (every `UnaryOp`) |
//! | [`binary`] | `add` … `clamp_max`, each with a tensor rhs (`add`) and a scalar rhs (`add.scalar`) |
//! | [`ternary`] | `where`, `lerp`, `addcmul`, `addcdiv`, `clamp` (+ `.scalar` variants) |
//! | [`copy`] | `to_dtype` (every pair), `contiguous`, `clone`, `clone.contiguous` |
//! | [`creation`] | `zeros` … `eye`, `*_like` in both memory formats |
//! | [`views`] | `transpose` … `reshape` |
//! | [`index`] | `index_select gather take index embedding index_mask masked_select nonzero masked_fill masked_scatter scatter scatter_value scatter_add scatter_reduce index_add index_copy index_fill` (`_out` forms for all but `index_mask nonzero`) |
//! | [`join`] | `cat stack` (+`_out`), `split/chunk/unbind/split_with_sizes` (`.first`, `.last`), `repeat tile repeat_interleave(.tensor) flip roll tril triu pad`, `meshgrid.0/1/2` |
//! | [`matmul`] | `matmul mm bmm dot outer` |
//! | [`sort`] | `sort argsort topk kthvalue` (values, `.indices`; `sort topk` +`_out`), `unique` (`.inverse`, `.counts`), `searchsorted bincount histc` |
//! | [`random`] | `rand randn randint randperm bernoulli_scalar dropout_mask(_bool) rand_like randn_like bernoulli multinomial uniform_ normal_ bernoulli_` (determinism, layout independence, properties) |
//! | [`einsum`] | `einsum.1`, `einsum.2` over a table of equations |
//! | [`reduce`] | `sum` … `logsumexp` over dim lists, `max_dim`/`argmax`/`median_dim` (values, `.indices`), `cumsum`/`cumprod`, `softmax`/`log_softmax` |
//! | [`nn`] | stride-nn's composed layers and losses: `nn.layer_norm nn.rms_norm nn.embedding(.grad) nn.mse_loss nn.l1_loss nn.smooth_l1_loss nn.cross_entropy(.probs) nn.nll_loss nn.binary_cross_entropy(_with_logits) nn.scaled_dot_product_attention nn.rotary nn.swiglu nn.geglu nn.geglu_tanh` (per-element error bounds, [`crate::bounds`]) |
//! | [`optim`] | `adam_step_`, `fused_adam_`, `fused_adam_skippable_` (each with `.exp_avg`, `.exp_avg_sq`, `.max_exp_avg_sq`): the fused Adam update, one parameter or several in one call, against its composed ops, exactly |
//!
//! Find an op's entry with [`find`] (or grep for `"name"` in this folder). An entry
//! ([`OpInfo`]) says: the operands ([`ArgSpec`]: tensor or scalar, dtype, value domain), the
//! dtypes it claims, the result-dtype rule ([`DTypeRule`]), a sampler, an f64 reference, the
//! tolerance per dtype, how to call each form it has, and whether it is differentiable
//! ([`Grad`], set from each family's `grad` table; [`crate::grad`] gradchecks it). See the
//! crate README for how to add an op (reductions and matmul included).

pub mod binary;
pub mod copy;
pub mod creation;
pub mod einsum;
pub mod index;
pub mod join;
pub mod matmul;
pub mod nn;
pub mod optim;
pub mod random;
pub mod reduce;
pub mod sort;
pub mod ternary;
pub mod unary;
pub mod views;

use crate::host::{bits, int_range, store};
use crate::promote::{self, ArgInfo};
use crate::reference::{self, numel, RefArg, RefCtx, RefOut};
use crate::rng::Rng;
use crate::tol::{default_tol, Tol};
use std::fmt;
use std::sync::{Arc, OnceLock};
use stride_core::{DType, Device, MemoryFormat, Operand, Scalar, Tensor};

/// Op families (how the runner and the report group ops).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Unary,
    Binary,
    Ternary,
    Copy,
    Creation,
    View,
    Reduction,
    Matmul,
    Index,
    Sort,
    Join,
    Random,
    Einsum,
    /// stride-nn's composed layers and losses.
    Nn,
}

/// The ways an op can be called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Form {
    /// `x.op(..)`: a new tensor (or a view).
    Functional,
    /// `x.op_(..)`: written through `x`'s layout.
    InPlace,
    /// `x.op_out(.., &out)`: written through `out`'s layout.
    Out,
}

impl Form {
    pub const ALL: [Form; 3] = [Form::Functional, Form::InPlace, Form::Out];
    pub fn name(self) -> &'static str {
        match self {
            Form::Functional => "fn",
            Form::InPlace => "inplace",
            Form::Out => "out",
        }
    }
}

impl fmt::Display for Form {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An operand handed to an op call.
#[derive(Debug, Clone)]
pub enum Arg {
    Tensor(Tensor),
    Scalar(Scalar),
}

impl Arg {
    /// The tensor (entries know which operands are tensors).
    pub fn t(&self) -> &Tensor {
        match self {
            Arg::Tensor(t) => t,
            Arg::Scalar(s) => panic!("expected a tensor operand, got scalar {s:?}"),
        }
    }
    /// As an elementwise operand (tensor or scalar).
    pub fn o(&self) -> Operand<'_> {
        match self {
            Arg::Tensor(t) => Operand::Tensor(t),
            Arg::Scalar(s) => Operand::Scalar(*s),
        }
    }
}

/// Non-tensor arguments of a call. Each entry documents which fields it reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    /// Dim arguments (transpose's two dims, permute's order, squeeze's dim; a reduction's dims).
    pub dims: Vec<i64>,
    /// Other integer arguments (slice start/end/step, narrow start/length, select index,
    /// diagonal offset, eye's m).
    pub ints: Vec<i64>,
    /// A shape argument (view/reshape/expand/unflatten target, a creation shape).
    pub sizes: Vec<i64>,
    /// `as_strided` strides and offset.
    pub strides: Vec<usize>,
    pub offset: usize,
    /// Scalar arguments (addcmul's value, full's fill value, arange's bounds).
    pub scalars: Vec<Scalar>,
    /// A target dtype (to_dtype, creation).
    pub dtype: Option<DType>,
    pub format: Option<MemoryFormat>,
    /// Reductions: keep reduced dims as size 1.
    pub keepdim: bool,
    /// The device of the run (set by the runner; creation ops allocate there).
    pub device: Option<Device>,
}

impl Params {
    pub fn usizes(&self) -> Vec<usize> {
        self.sizes.iter().map(|&s| s.max(0) as usize).collect()
    }
    /// The run's device.
    pub fn dev(&self) -> Device {
        self.device.unwrap_or(Device::Cpu)
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = vec![];
        if !self.dims.is_empty() {
            parts.push(format!("dims={:?}", self.dims));
        }
        if !self.ints.is_empty() {
            parts.push(format!("ints={:?}", self.ints));
        }
        if !self.sizes.is_empty() {
            parts.push(format!("sizes={:?}", self.sizes));
        }
        if !self.strides.is_empty() {
            parts.push(format!("strides={:?} offset={}", self.strides, self.offset));
        }
        if !self.scalars.is_empty() {
            parts.push(format!("scalars={:?}", self.scalars));
        }
        if let Some(d) = self.dtype {
            parts.push(format!("dtype={d}"));
        }
        if let Some(m) = self.format {
            parts.push(format!("format={m:?}"));
        }
        if self.keepdim {
            parts.push("keepdim".into());
        }
        f.write_str(&parts.join(" "))
    }
}

/// Whether an operand is a tensor or a host scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    Tensor,
    Scalar,
}

/// Which dtype an operand has in a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgDType {
    /// The case's dtype (a scalar operand takes that dtype's kind: float, int or bool).
    Primary,
    /// Always this dtype (`where`'s condition is bool).
    Fixed(DType),
}

/// How integer values of a [`Domain`] are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IntDomain {
    /// A wide range: all of u8/i8, ±10⁵ for i32, 0..2·10⁵ for u32, ±2²⁰ for i64 (so results
    /// overflow narrow types and wrap, but stay exact in f64).
    Full,
    /// The integers inside the float range.
    FromFloat,
    /// This range (clipped to the dtype).
    Range(i64, i64),
    /// Valid shift amounts: `0..bits`.
    Shift,
}

/// The values an operand takes: an op's domain (positive for log, non-zero divisors, …).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Domain {
    pub lo: f64,
    pub hi: f64,
    pub ints: IntDomain,
    /// Values closer to zero than this are pushed away from it (divisors); for integers and
    /// bools, zero is excluded when this is positive.
    pub min_abs: f64,
    /// Float values are rounded to a multiple of this (ties for `round`, exact quotients).
    pub grid: Option<f64>,
    /// Sprinkle NaN, ±inf and ±0 among float values.
    pub specials: bool,
}

impl Domain {
    /// Floats in `[-4, 4]`, integers in the wide range.
    pub const fn any() -> Domain {
        Domain {
            lo: -4.0,
            hi: 4.0,
            ints: IntDomain::Full,
            min_abs: 0.0,
            grid: None,
            specials: false,
        }
    }
    /// Floats in `[lo, hi]`, the integers in it.
    pub const fn range(lo: f64, hi: f64) -> Domain {
        Domain {
            lo,
            hi,
            ints: IntDomain::FromFloat,
            min_abs: 0.0,
            grid: None,
            specials: false,
        }
    }
    pub const fn ints(mut self, ints: IntDomain) -> Domain {
        self.ints = ints;
        self
    }
    pub const fn nonzero(mut self, min_abs: f64) -> Domain {
        self.min_abs = min_abs;
        self
    }
    pub const fn grid(mut self, step: f64) -> Domain {
        self.grid = Some(step);
        self
    }
    pub const fn specials(mut self) -> Domain {
        self.specials = true;
        self
    }

    /// Integer bounds for dtype `d` (`tame`: within ±100, for mixed-dtype cases where the
    /// values are cast to narrower or float types).
    pub fn int_bounds(&self, d: DType, tame: bool) -> (i64, i64) {
        let (dlo, dhi) = int_range(d);
        let (dlo, dhi) = (
            dlo.max(i64::MIN as i128) as i64,
            dhi.min(i64::MAX as i128) as i64,
        );
        let (lo, hi) = match self.ints {
            IntDomain::Full => match d {
                DType::I32 => (-100_000, 100_000),
                DType::U32 => (0, 200_000),
                DType::I64 => (-(1 << 20), 1 << 20),
                _ => (dlo, dhi),
            },
            IntDomain::FromFloat => (self.lo.ceil() as i64, self.hi.floor() as i64),
            IntDomain::Range(a, b) => (a, b),
            IntDomain::Shift => (0, bits(d) as i64 - 1),
        };
        let (mut lo, mut hi) = (lo.max(dlo), hi.min(dhi));
        if tame && self.ints != IntDomain::Shift {
            lo = lo.max(-100);
            hi = hi.min(100);
        }
        if lo > hi {
            (dlo.max(0).min(dhi), dlo.max(0).min(dhi))
        } else {
            (lo, hi)
        }
    }

    fn float(&self, rng: &mut Rng) -> f64 {
        if self.specials && rng.below(8) == 0 {
            return [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0][rng.below(5)];
        }
        let mut v = rng.range_f64(self.lo, self.hi);
        if let Some(g) = self.grid {
            v = (v / g).round() * g;
        }
        if v.abs() < self.min_abs {
            let s = if v < 0.0 { -1.0 } else { 1.0 };
            v = s * (self.min_abs + rng.range_f64(0.0, self.min_abs));
            if let Some(g) = self.grid {
                v = (v / g).round() * g;
            }
        }
        v
    }

    /// `n` values of dtype `d`, stored in `d`.
    pub fn values(&self, d: DType, n: usize, rng: &mut Rng, tame: bool) -> Vec<f64> {
        match d {
            DType::Bool => (0..n)
                .map(|_| {
                    if self.min_abs > 0.0 || rng.coin() {
                        1.0
                    } else {
                        0.0
                    }
                })
                .collect(),
            d if d.is_float() => (0..n).map(|_| store(self.float(rng), d)).collect(),
            d => {
                let (lo, hi) = self.int_bounds(d, tame);
                (0..n)
                    .map(|_| {
                        let mut v = rng.range_i64(lo, hi);
                        if v == 0 && self.min_abs > 0.0 {
                            v = if hi >= 1 { 1 } else { -1 };
                        }
                        v as f64
                    })
                    .collect()
            }
        }
    }

    /// A host scalar of the kind of `kind` (bool, integer or float dtype); integer values
    /// stay in the range of `tensor_dtype` when that is an integer dtype.
    pub fn scalar(&self, kind: DType, tensor_dtype: DType, rng: &mut Rng, tame: bool) -> Scalar {
        match kind {
            DType::Bool => Scalar::Bool(self.min_abs > 0.0 || rng.coin()),
            k if k.is_float() => {
                let mut v = self.float(rng);
                if !v.is_finite() {
                    v = 1.5;
                }
                Scalar::Float(v)
            }
            _ => {
                let d = if tensor_dtype.is_int() {
                    tensor_dtype
                } else {
                    DType::I64
                };
                let (lo, hi) = self.int_bounds(d, tame || !tensor_dtype.is_int());
                let mut v = rng.range_i64(lo, hi);
                if v == 0 && self.min_abs > 0.0 {
                    v = if hi >= 1 { 1 } else { -1 };
                }
                Scalar::Int(v)
            }
        }
    }
}

/// One operand of an op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArgSpec {
    pub name: &'static str,
    pub kind: ArgKind,
    pub dtype: ArgDType,
    /// Whether the operand takes part in type promotion (a `where` condition does not).
    pub promotes: bool,
    pub domain: Domain,
}

impl ArgSpec {
    pub const fn tensor(name: &'static str, domain: Domain) -> ArgSpec {
        ArgSpec {
            name,
            kind: ArgKind::Tensor,
            dtype: ArgDType::Primary,
            promotes: true,
            domain,
        }
    }
    pub const fn scalar(name: &'static str, domain: Domain) -> ArgSpec {
        ArgSpec {
            name,
            kind: ArgKind::Scalar,
            dtype: ArgDType::Primary,
            promotes: true,
            domain,
        }
    }
    /// A tensor of a fixed dtype that does not take part in promotion.
    pub const fn fixed(name: &'static str, dtype: DType, domain: Domain) -> ArgSpec {
        ArgSpec {
            name,
            kind: ArgKind::Tensor,
            dtype: ArgDType::Fixed(dtype),
            promotes: false,
            domain,
        }
    }
}

/// How an op's result dtype follows from its operands. The "key" dtype is the promoted dtype
/// of the promoting operands (PyTorch's `result_type`, see [`crate::promote`]), or the
/// `dtype` parameter for ops without tensor operands; the op claims a set of key dtypes.
#[derive(Clone, Copy)]
pub enum DTypeRule {
    /// Computes in and returns the key dtype.
    Same,
    /// Integer and bool keys compute in and return f32 (exp, sqrt, div, …).
    IntToFloat,
    /// Computes in the key dtype, returns bool (comparisons, isnan, logical ops).
    ToBool,
    /// Computes in and returns `f(key)` (a sum of integers or bools: i64).
    Map(fn(DType) -> DType),
    /// Returns `params.dtype` (to_dtype, creation); operands are not cast.
    Param,
    /// Returns what the function says (arange: i64 for integer bounds, else f32).
    Custom(fn(&Sample) -> DType),
}

impl fmt::Debug for DTypeRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DTypeRule::Same => "Same",
            DTypeRule::IntToFloat => "IntToFloat",
            DTypeRule::ToBool => "ToBool",
            DTypeRule::Map(_) => "Map",
            DTypeRule::Param => "Param",
            DTypeRule::Custom(_) => "Custom",
        })
    }
}

/// One operand of a sample.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleArg {
    /// Logical values in row-major order, representable in `dtype`.
    Tensor {
        dtype: DType,
        shape: Vec<usize>,
        values: Vec<f64>,
    },
    Scalar(Scalar),
}

/// One call's inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub args: Vec<SampleArg>,
    pub params: Params,
    /// The dtype column of the report (default: the key dtype's short name).
    pub label: Option<String>,
    /// `_out` form: the output's dtype, when it differs from the result's.
    pub out_dtype: Option<DType>,
}

impl Sample {
    pub fn new(args: Vec<SampleArg>, params: Params) -> Sample {
        Sample {
            args,
            params,
            label: None,
            out_dtype: None,
        }
    }
    pub fn tensor(dtype: DType, shape: Vec<usize>, values: Vec<f64>) -> SampleArg {
        SampleArg::Tensor {
            dtype,
            shape,
            values,
        }
    }
    pub fn label(mut self, l: impl Into<String>) -> Sample {
        self.label = Some(l.into());
        self
    }
}

/// What a sampler gets.
#[derive(Debug, Clone)]
pub struct SampleCtx {
    /// The case's dtype.
    pub dtype: DType,
    /// The base shape (operand shapes, or the creation shape, derive from it).
    pub shape: Vec<usize>,
    pub rng: Rng,
    /// Also produce the variants (broadcast operand shapes, more parameter choices).
    pub variants: bool,
    /// Mixed-dtype cases: the dtype of each operand (for a scalar, its kind).
    pub arg_dtypes: Option<Vec<DType>>,
    /// Mixed-dtype cases: the shape of each tensor operand.
    pub arg_shapes: Option<Vec<Vec<usize>>>,
    /// Keep integers within ±100 (mixed-dtype cases).
    pub tame: bool,
}

impl SampleCtx {
    pub fn new(dtype: DType, shape: Vec<usize>, seed: u64) -> SampleCtx {
        SampleCtx {
            dtype,
            shape,
            rng: Rng::new(seed),
            variants: true,
            arg_dtypes: None,
            arg_shapes: None,
            tame: false,
        }
    }
}

pub type CallFn = Arc<dyn Fn(&[Arg], &Params) -> stride_core::Result<Tensor> + Send + Sync>;
pub type OutFn = Arc<dyn Fn(&[Arg], &Params, &Tensor) -> stride_core::Result<Tensor> + Send + Sync>;
pub type RefFn = Arc<dyn Fn(&RefCtx, &[RefArg]) -> Result<RefOut, String> + Send + Sync>;
pub type SampleFn = Arc<dyn Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync>;
/// Per-element absolute error bounds of a case (see [`crate::bounds`]).
pub type BoundFn = Arc<dyn Fn(&RefCtx, &[RefArg]) -> Result<Vec<f64>, String> + Send + Sync>;

/// Whether an op is differentiable, and how far ([`OpInfo::grad`]).
///
/// PyTorch's OpInfo says the same with `supports_autograd` and `supports_gradgrad`. The
/// gradcheck sweep ([`crate::grad`]) holds every entry to its value: `Once` and `Twice`
/// entries are gradchecked (first derivatives; `Twice` also second derivatives) in f64 over
/// the entry's own samples and the registry's layouts, and a `No` entry whose functional
/// result requires grad when its float operands do is a failure — so an op that gains or
/// loses autograd without its entry saying so is caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Grad {
    /// Not differentiable: its result never requires grad (integer, bool or index results,
    /// random sampling, creation from sizes), or it has no f64 functional form to check.
    #[default]
    No,
    /// First derivatives are recorded (`supports_autograd`), and gradcheck holds them to
    /// finite differences.
    Once,
    /// Second derivatives too (`supports_gradgrad`): the backward is itself differentiable,
    /// and gradgradcheck holds it to finite differences.
    Twice,
}

/// A registry entry: everything the generic tests need to run one op.
#[derive(Clone)]
pub struct OpInfo {
    /// The name in reports and `--op` (`add`, `add.scalar`, `to_dtype`, …).
    pub name: &'static str,
    pub family: Family,
    pub args: Vec<ArgSpec>,
    /// The key dtypes the op claims (see [`DTypeRule`]); every other dtype must be refused.
    pub dtypes: Vec<DType>,
    pub rule: DTypeRule,
    /// Produces samples for a case ([`elementwise_sampler`] for elementwise ops).
    pub sampler: SampleFn,
    /// The f64 reference; `Err` means the op must fail for these inputs.
    pub reference: RefFn,
    /// Tolerance for a result dtype.
    pub tol: fn(DType) -> Tol,
    pub functional: Option<CallFn>,
    pub inplace: Option<CallFn>,
    pub out: Option<OutFn>,
    /// Run the mixed-dtype cases (every dtype pair, 0-d operands, scalar kinds, out dtypes).
    pub promotion: bool,
    /// In-place and `_out` destinations must have exactly the result dtype (the values and
    /// indices of `max_dim_out`, PyTorch's rule); any other destination dtype must be refused.
    pub exact_dest_dtype: bool,
    /// Per-element error bounds from the inputs (composed layers and losses, see
    /// [`crate::bounds`]); when set, the runner uses them instead of `tol`.
    pub bound: Option<BoundFn>,
    /// Whether the functional form is differentiable, once or twice ([`Grad`]; default
    /// [`Grad::No`]). The gradcheck sweep ([`crate::grad`]) checks it both ways.
    pub grad: Grad,
    /// Dtypes the op keeps state in on the device besides its operands (the skippable Adam's
    /// f64 step counters): a device that cannot hold one refuses the op, as documented.
    pub state_dtypes: Vec<DType>,
}

impl fmt::Debug for OpInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpInfo")
            .field("name", &self.name)
            .field("family", &self.family)
            .field("args", &self.args)
            .field("dtypes", &self.dtypes)
            .field("rule", &self.rule)
            .field("forms", &self.forms())
            .field("grad", &self.grad)
            .finish()
    }
}

/// What the registry expects of a sample's dtypes.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// The key dtype (promoted operands, or the dtype parameter).
    pub key: DType,
    /// Whether the op claims the key dtype (if not, it must fail).
    pub supported: bool,
    pub compute: DType,
    pub result: DType,
    /// The dtype each operand is cast to before computing.
    pub arg_compute: Vec<DType>,
}

impl OpInfo {
    /// A bare entry; fill it with the builder methods.
    pub fn new(name: &'static str, family: Family) -> OpInfo {
        OpInfo {
            name,
            family,
            args: vec![],
            dtypes: DType::ALL.to_vec(),
            rule: DTypeRule::Same,
            sampler: Arc::new(|_| vec![]),
            reference: Arc::new(|_, _| Err("no reference".into())),
            tol: default_tol,
            functional: None,
            inplace: None,
            out: None,
            promotion: false,
            exact_dest_dtype: false,
            bound: None,
            grad: Grad::No,
            state_dtypes: vec![],
        }
    }
    /// Dtypes of the op's device-side state (see [`OpInfo::state_dtypes`]).
    pub fn state_dtypes(mut self, d: &[DType]) -> Self {
        self.state_dtypes = d.to_vec();
        self
    }
    /// How far the functional form is differentiable (see [`Grad`]).
    pub fn grad(mut self, g: Grad) -> Self {
        self.grad = g;
        self
    }
    /// Per-element error bounds (see [`OpInfo::bound`]).
    pub fn bound(
        mut self,
        f: impl Fn(&RefCtx, &[RefArg]) -> Result<Vec<f64>, String> + Send + Sync + 'static,
    ) -> Self {
        self.bound = Some(Arc::new(f));
        self
    }
    pub fn args(mut self, args: Vec<ArgSpec>) -> Self {
        self.args = args;
        self
    }
    pub fn dtypes(mut self, d: &[DType]) -> Self {
        self.dtypes = d.to_vec();
        self
    }
    pub fn rule(mut self, r: DTypeRule) -> Self {
        self.rule = r;
        self
    }
    pub fn tol(mut self, t: fn(DType) -> Tol) -> Self {
        self.tol = t;
        self
    }
    pub fn promotion(mut self, p: bool) -> Self {
        self.promotion = p;
        self
    }
    /// Destinations must have exactly the result dtype (see [`OpInfo::exact_dest_dtype`]).
    pub fn exact_dest_dtype(mut self) -> Self {
        self.exact_dest_dtype = true;
        self
    }
    pub fn sampler(
        mut self,
        f: impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static,
    ) -> Self {
        self.sampler = Arc::new(f);
        self
    }
    pub fn reference(
        mut self,
        f: impl Fn(&RefCtx, &[RefArg]) -> Result<RefOut, String> + Send + Sync + 'static,
    ) -> Self {
        self.reference = Arc::new(f);
        self
    }
    /// An elementwise reference from a per-element function of the (cast) operand values.
    pub fn elementwise(self, f: impl Fn(&[f64], &RefCtx) -> f64 + Send + Sync + 'static) -> Self {
        self.reference(move |ctx, args| reference::elementwise(ctx, args, |xs| f(xs, ctx)))
    }
    /// An elementwise reference with an error bound per element: `err(inputs, value, ctx)`
    /// bounds the kernel's error in its compute dtype before the final rounding to the
    /// result dtype (see [`RefOut::with_acc_error`]; the runner adds ½ ulp of the result).
    pub fn elementwise_bounded(
        self,
        f: impl Fn(&[f64], &RefCtx) -> f64 + Send + Sync + 'static,
        err: impl Fn(&[f64], f64, &RefCtx) -> f64 + Send + Sync + 'static,
    ) -> Self {
        self.reference(move |ctx, args| {
            let r = reference::elementwise(ctx, args, |xs| f(xs, ctx))?;
            let e = reference::elementwise(ctx, args, |xs| err(xs, f(xs, ctx), ctx))?;
            Ok(r.with_acc_error(e.values))
        })
    }
    pub fn functional(
        mut self,
        f: impl Fn(&[Arg], &Params) -> stride_core::Result<Tensor> + Send + Sync + 'static,
    ) -> Self {
        self.functional = Some(Arc::new(f));
        self
    }
    pub fn inplace(
        mut self,
        f: impl Fn(&[Arg], &Params) -> stride_core::Result<Tensor> + Send + Sync + 'static,
    ) -> Self {
        self.inplace = Some(Arc::new(f));
        self
    }
    pub fn out(
        mut self,
        f: impl Fn(&[Arg], &Params, &Tensor) -> stride_core::Result<Tensor> + Send + Sync + 'static,
    ) -> Self {
        self.out = Some(Arc::new(f));
        self
    }

    /// The forms this op has.
    pub fn forms(&self) -> Vec<Form> {
        let mut f = vec![];
        if self.functional.is_some() {
            f.push(Form::Functional);
        }
        if self.inplace.is_some() {
            f.push(Form::InPlace);
        }
        if self.out.is_some() {
            f.push(Form::Out);
        }
        f
    }

    /// The base name (`add` for `add.scalar`).
    pub fn base_name(&self) -> &'static str {
        self.name.split('.').next().unwrap_or(self.name)
    }

    /// The registry's dtype expectations for a sample.
    pub fn expected(&self, s: &Sample) -> Expected {
        let infos: Vec<ArgInfo> = s
            .args
            .iter()
            .zip(self.args.iter().map(Some).chain(std::iter::repeat(None)))
            .filter(|(_, spec)| spec.is_none_or(|sp| sp.promotes))
            .map(|(a, _)| match a {
                SampleArg::Tensor { dtype, shape, .. } => ArgInfo::Tensor {
                    dtype: *dtype,
                    ndim: shape.len(),
                },
                SampleArg::Scalar(sc) => ArgInfo::Scalar(sc.dtype()),
            })
            .collect();
        let param = s.params.dtype;
        let key = if let DTypeRule::Custom(f) = self.rule {
            if infos.is_empty() {
                f(s)
            } else {
                promote::result_type(&infos)
            }
        } else if infos.is_empty() {
            param.unwrap_or(DType::F32)
        } else {
            promote::result_type(&infos)
        };
        let (compute, result, casts) = match self.rule {
            DTypeRule::Same => (key, key, true),
            DTypeRule::IntToFloat if key.is_float() => (key, key, true),
            DTypeRule::IntToFloat => (DType::F32, DType::F32, true),
            DTypeRule::ToBool => (key, DType::Bool, true),
            DTypeRule::Map(f) => (f(key), f(key), true),
            DTypeRule::Param => {
                let d = param.unwrap_or(key);
                (d, d, false)
            }
            DTypeRule::Custom(f) => {
                let d = f(s);
                (d, d, false)
            }
        };
        let arg_compute = s
            .args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let own = match a {
                    SampleArg::Tensor { dtype, .. } => *dtype,
                    SampleArg::Scalar(sc) => sc.dtype(),
                };
                match self.args.get(i) {
                    Some(ArgSpec {
                        dtype: ArgDType::Fixed(d),
                        ..
                    }) => *d,
                    Some(sp) if sp.promotes && casts => compute,
                    _ if casts && self.args.is_empty() => compute,
                    _ => own,
                }
            })
            .collect();
        Expected {
            key,
            supported: self.dtypes.contains(&key),
            compute,
            result,
            arg_compute,
        }
    }
}

/// The standard sampler of elementwise ops: every tensor operand gets the base shape (and,
/// with `variants`, broadcast variants: the other operands with a size-1 first dim, or
/// without it, and operand 0 with a size-1 first dim — which in-place forms must refuse),
/// values from each operand's domain; `params` picks the non-tensor arguments.
pub fn elementwise_sampler(
    specs: Vec<ArgSpec>,
    params: fn(DType, &mut Rng) -> Params,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let n = specs.len();
        let tensors = specs.iter().filter(|s| s.kind == ArgKind::Tensor).count();
        let base = ctx.shape.clone();
        let sets: Vec<Vec<Vec<usize>>> = match &ctx.arg_shapes {
            Some(s) => vec![s.clone()],
            None => {
                let mut sets = vec![vec![base.clone(); n]];
                if ctx.variants && tensors >= 2 && !base.is_empty() {
                    if base[0] != 1 {
                        let mut b1 = base.clone();
                        b1[0] = 1;
                        let mut rhs = vec![b1.clone(); n];
                        rhs[0] = base.clone();
                        sets.push(rhs);
                        let mut lhs = vec![base.clone(); n];
                        lhs[0] = b1;
                        sets.push(lhs);
                    }
                    if base.len() >= 2 {
                        let mut tr = vec![base[1..].to_vec(); n];
                        tr[0] = base.clone();
                        sets.push(tr);
                    }
                }
                sets
            }
        };
        let mut out = vec![];
        for set in sets {
            let mut args = Vec::with_capacity(n);
            for (i, spec) in specs.iter().enumerate() {
                let dtype = match (&ctx.arg_dtypes, spec.dtype) {
                    (Some(v), _) => v[i],
                    (None, ArgDType::Primary) => ctx.dtype,
                    (None, ArgDType::Fixed(d)) => d,
                };
                args.push(match spec.kind {
                    ArgKind::Tensor => {
                        let shape = set[i].clone();
                        let values =
                            spec.domain
                                .values(dtype, numel(&shape), &mut ctx.rng, ctx.tame);
                        SampleArg::Tensor {
                            dtype,
                            shape,
                            values,
                        }
                    }
                    ArgKind::Scalar => SampleArg::Scalar(spec.domain.scalar(
                        dtype,
                        ctx.dtype,
                        &mut ctx.rng,
                        ctx.tame,
                    )),
                });
            }
            let p = params(ctx.dtype, &mut ctx.rng);
            out.push(Sample::new(args, p));
        }
        out
    }
}

/// The standard sampler of reductions (`dims` + `keepdim` in [`Params`]): the input in the
/// base shape, reduced over every dim (`dims` empty), the first, the last, the first and last
/// together, and — must be refused — an out-of-range dim; each with and without `keepdim`.
pub fn reduction_sampler(
    domain: Domain,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let nd = ctx.shape.len() as i64;
        let values = domain.values(ctx.dtype, numel(&ctx.shape), &mut ctx.rng, ctx.tame);
        let input = SampleArg::Tensor {
            dtype: ctx.dtype,
            shape: ctx.shape.clone(),
            values,
        };
        let mut choices: Vec<Vec<i64>> = vec![vec![], vec![-1]];
        if ctx.variants {
            choices.extend([vec![0], vec![0, -1], vec![nd.max(1)]]);
        }
        choices.dedup();
        let mut out = vec![];
        for dims in choices {
            for keepdim in [false, true] {
                let params = Params {
                    dims: dims.clone(),
                    keepdim,
                    ..Params::default()
                };
                out.push(Sample::new(vec![input.clone()], params));
            }
        }
        out
    }
}

/// The standard sampler of matrix products: operands `[.., m, k]` and `[k, n]` where `m, n`
/// are the base shape's last two sizes and `k` crosses the tile sizes (1, 7, 33, and the
/// base shape's first size); with variants also a batched operand, 1-D operands, a
/// broadcast batch and mismatched inner sizes (must be refused).
pub fn matmul_sampler(
    domain: Domain,
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let s = &ctx.shape;
        let (m, n) = match s.len() {
            0 => (1, 1),
            1 => (s[0], 1),
            l => (s[l - 2], s[l - 1]),
        };
        let k = [1, 7, 33, s.first().copied().unwrap_or(1)][ctx.rng.below(4)];
        let mut pairs: Vec<(Vec<usize>, Vec<usize>)> = vec![(vec![m, k], vec![k, n])];
        if ctx.variants {
            pairs.push((vec![2, m, k], vec![k, n]));
            pairs.push((vec![3, 1, m, k], vec![2, k, n]));
            pairs.push((vec![k], vec![k, n]));
            pairs.push((vec![m, k], vec![k]));
            pairs.push((vec![k], vec![k]));
            pairs.push((vec![m, k], vec![k + 1, n]));
        }
        tensor_pairs(pairs, &domain, ctx)
    }
}

/// One sample per pair of operand shapes: two tensors of the case's dtype with values from
/// `domain` (the operands of the matrix-product samplers).
pub fn tensor_pairs(
    pairs: Vec<(Vec<usize>, Vec<usize>)>,
    domain: &Domain,
    ctx: &mut SampleCtx,
) -> Vec<Sample> {
    let d = ctx.dtype;
    pairs
        .into_iter()
        .map(|(a, b)| {
            let va = domain.values(d, numel(&a), &mut ctx.rng, ctx.tame);
            let vb = domain.values(d, numel(&b), &mut ctx.rng, ctx.tame);
            let arg = |shape, values| SampleArg::Tensor {
                dtype: d,
                shape,
                values,
            };
            Sample::new(vec![arg(a, va), arg(b, vb)], Params::default())
        })
        .collect()
}

/// No parameters.
pub fn no_params(_: DType, _: &mut Rng) -> Params {
    Params::default()
}

/// Dtype lists entries claim.
pub mod dtypes {
    use stride_core::DType::{self, *};
    pub const ALL: &[DType] = &DType::ALL;
    pub const FLOATS: &[DType] = &[F64, F32, F16, BF16];
    pub const INTS: &[DType] = &[I64, I32, U32, U8, I8];
    pub const NUMERIC: &[DType] = &[F64, F32, F16, BF16, I64, I32, U32, U8, I8];
    pub const INTS_AND_BOOL: &[DType] = &[I64, I32, U32, U8, I8, Bool];
}

/// Each entry with the [`Grad`] its family's `grad` table gives it.
fn with_grad(ops: Vec<OpInfo>, grad: fn(&str) -> Grad) -> Vec<OpInfo> {
    ops.into_iter()
        .map(|o| {
            let g = grad(o.name);
            o.grad(g)
        })
        .collect()
}

/// Every registered op, in family order. Built once.
pub fn all() -> &'static [OpInfo] {
    static ALL: OnceLock<Vec<OpInfo>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut v = vec![];
        v.extend(with_grad(unary::ops(), unary::grad));
        v.extend(with_grad(binary::ops(), binary::grad));
        v.extend(with_grad(ternary::ops(), ternary::grad));
        v.extend(with_grad(copy::ops(), copy::grad));
        v.extend(with_grad(creation::ops(), creation::grad));
        v.extend(with_grad(views::ops(), views::grad));
        v.extend(with_grad(reduce::ops(), reduce::grad));
        v.extend(with_grad(matmul::ops(), matmul::grad));
        v.extend(with_grad(index::ops(), index::grad));
        v.extend(with_grad(sort::ops(), sort::grad));
        v.extend(with_grad(join::ops(), join::grad));
        v.extend(with_grad(random::ops(), random::grad));
        v.extend(with_grad(einsum::ops(), einsum::grad));
        v.extend(with_grad(nn::ops(), nn::grad));
        v.extend(with_grad(optim::ops(), optim::grad));
        v
    })
}

/// The entry named `name` (`add`, `add.scalar`, …).
pub fn find(name: &str) -> Option<&'static OpInfo> {
    all().iter().find(|o| o.name == name)
}

/// The entries selected by `name`: an exact name, or a base name with all its variants
/// (`add` selects `add` and `add.scalar`).
pub fn select(name: &str) -> Vec<&'static OpInfo> {
    all()
        .iter()
        .filter(|o| o.name == name || o.base_name() == name)
        .collect()
}
