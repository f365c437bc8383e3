//! Every elementwise op and every reduction, declared once: one table per op enum.
//!
//! An elementwise entry gives the variant (with its scalar, `Addcmul(v)`), the name, the
//! dtype policy ([`IntPolicy`]), optionally a `hint` for the dtypes it refuses, and one
//! section per input dtype category that has a kernel:
//! `float: |x| cpu_fn, "c_expr";` (also `int:` and `bool:`; `float -> bool:` when the result
//! is bool; `select:` for `where`: any dtype, operand 0 bool).
//! - `cpu_fn` is a closure over the compute type (floats: f64, or f32 for f32/f16/bf16;
//!   integers: their type; bool), without parameter types: `cpu/elementwise.rs` types and
//!   calls it, and its paths (`math::…`, the `IntElem`/`Real` methods) resolve there.
//! - `c_expr` is the same function for C-like kernel languages (CUDA's `cuda/source.rs`
//!   today): inputs `x`, `y`, `z` and the op's scalar `v`, all in the compute type.
//!
//! No section for a category means no kernel for it on any backend, and the frontend's
//! `dtypes` refuses it with the entry's hint. A table is an x-macro: `unary_table!(m)`
//! expands to `m! { entries }`; [`pick!`] picks a category's section of an entry. This
//! file generates the enums' `ALL`, `name` and policies and the lookup `kernel(op, dtype)`;
//! `cpu/elementwise.rs` generates its match arms from the same tables.
//!
//! Adding an op: a variant in `backend.rs`, a line here; the compiler then asks for nothing
//! else (every match is generated), and `tests` below checks the backends agree.

use super::{BinaryOp, IntPolicy, ReduceOp, TernaryOp, UnaryOp};
use crate::{Category, DType, Error, Result, Scalar};

/// `unary_table!(m args)` expands to `m! { [args] entries }`; an entry is
/// `Variant "name" Policy [hint CONST] { sections }`.
macro_rules! unary_table { ($m:ident $($a:tt)*) => { $m! { [$($a)*]
    Neg "neg" Keep hint NOT_BOOL { float: |x| -x, "-x"; int: |x| x.w_neg(), "w_neg(x)"; }
    Abs "abs" Keep hint NOT_BOOL { float: |x| x.abs(), "m_fabs(x)"; int: |x| x.w_abs(), "w_abs(x)"; }
    Sign "sign" Keep hint NOT_BOOL {
        float: |x| math::sign(x), "sign_f(x)";
        int: |x| x.signum_(), "sign_i(x)";
    }
    Exp "exp" ToFloat { float: |x| x.exp(), "m_exp(x)"; }
    Exp2 "exp2" ToFloat { float: |x| x.exp2(), "m_exp2(x)"; }
    Log "log" ToFloat { float: |x| x.ln(), "m_log(x)"; }
    Log2 "log2" ToFloat { float: |x| x.log2(), "m_log2(x)"; }
    Log1p "log1p" ToFloat { float: |x| x.ln_1p(), "m_log1p(x)"; }
    Expm1 "expm1" ToFloat { float: |x| x.exp_m1(), "m_expm1(x)"; }
    Sqrt "sqrt" ToFloat { float: |x| x.sqrt(), "m_sqrt(x)"; }
    Rsqrt "rsqrt" ToFloat { float: |x| x.sqrt().recip(), "(C)1 / m_sqrt(x)"; }
    Reciprocal "reciprocal" ToFloat { float: |x| x.recip(), "(C)1 / x"; }
    Square "square" Keep hint NOT_BOOL { float: |x| x * x, "x * x"; int: |x| x.w_mul(x), "w_mul(x, x)"; }
    Sin "sin" ToFloat { float: |x| x.sin(), "m_sin(x)"; }
    Cos "cos" ToFloat { float: |x| x.cos(), "m_cos(x)"; }
    Tan "tan" ToFloat { float: |x| x.tan(), "m_tan(x)"; }
    Tanh "tanh" ToFloat { float: |x| x.tanh(), "m_tanh(x)"; }
    Sigmoid "sigmoid" ToFloat { float: |x| math::sigmoid(x), "sigmoid(x)"; }
    Relu "relu" Keep {
        float: |x| math::relu(x), "relu_f(x)";
        int: |x| if x.is_negative() { Element::from_i64(0) } else { x }, "is_neg(x) ? (T)0 : x";
        bool: |x| x, "x";
    }
    GeluErf "gelu" FloatOnly { float: |x| math::gelu_erf(x), "gelu_erf(x)"; }
    GeluTanh "gelu_tanh" FloatOnly { float: |x| math::gelu_tanh(x), "gelu_tanh(x)"; }
    Silu "silu" FloatOnly { float: |x| x * math::sigmoid(x), "x * sigmoid(x)"; }
    Softplus "softplus" FloatOnly { float: |x| math::softplus(x), "softplus(x)"; }
    Floor "floor" Keep { float: |x| x.floor(), "m_floor(x)"; int: |x| x, "x"; bool: |x| x, "x"; }
    Ceil "ceil" Keep { float: |x| x.ceil(), "m_ceil(x)"; int: |x| x, "x"; bool: |x| x, "x"; }
    Round "round" Keep { float: |x| x.round_even(), "m_rint(x)"; int: |x| x, "x"; bool: |x| x, "x"; }
    Trunc "trunc" Keep { float: |x| x.trunc(), "m_trunc(x)"; int: |x| x, "x"; bool: |x| x, "x"; }
    Erf "erf" ToFloat { float: |x| x.erf(), "m_erf(x)"; }
    IsNan "isnan" ToBool {
        float -> bool: |x| x.is_nan(), "m_isnan(x)";
        int -> bool: |_x| false, "false";
        bool: |_x| false, "false";
    }
    IsInf "isinf" ToBool {
        float -> bool: |x| x.is_infinite(), "m_isinf(x)";
        int -> bool: |_x| false, "false";
        bool: |_x| false, "false";
    }
    IsFinite "isfinite" ToBool {
        float -> bool: |x| x.is_finite(), "!m_isnan(x) && !m_isinf(x)";
        int -> bool: |_x| true, "true";
        bool: |_x| true, "true";
    }
    LogicalNot "logical_not" ToBool {
        float -> bool: |x| x.is_zero(), "x == (C)0";
        int -> bool: |x| x.is_zero(), "x == (T)0";
        bool: |x| !x, "!x";
    }
} } }
pub(crate) use unary_table;

/// As [`unary_table!`]; `ToBool` ops are the comparisons and logical ops.
macro_rules! binary_table { ($m:ident $($a:tt)*) => { $m! { [$($a)*]
    Add "add" Keep {
        float: |x, y| x + y, "x + y";
        int: |x, y| x.w_add(y), "w_add(x, y)";
        bool: |x, y| x | y, "x | y";
    }
    Sub "sub" Keep hint SUB_BOOL { float: |x, y| x - y, "x - y"; int: |x, y| x.w_sub(y), "w_sub(x, y)"; }
    Mul "mul" Keep {
        float: |x, y| x * y, "x * y";
        int: |x, y| x.w_mul(y), "w_mul(x, y)";
        bool: |x, y| x & y, "x & y";
    }
    Div "div" ToFloat { float: |x, y| x / y, "x / y"; }
    FloorDivide "floor_divide" Keep hint CONVERT_BOOL {
        float: |x, y| math::floor_div_real(x, y), "floor_div_real(x, y)";
        int: |x, y| x.floor_div(y), "floor_div_i(x, y)";
    }
    Remainder "remainder" Keep hint CONVERT_BOOL {
        float: |x, y| math::remainder_real(x, y), "remainder_real(x, y)";
        int: |x, y| x.py_rem(y), "py_rem_i(x, y)";
    }
    Pow "pow" Keep hint CONVERT_BOOL { float: |x, y| x.powf(y), "m_pow(x, y)"; int: |x, y| x.w_pow(y), "w_pow(x, y)"; }
    Maximum "maximum" Keep {
        float: |x, y| math::max_nan(x, y), "max_nan(x, y)";
        int: |x, y| if x >= y { x } else { y }, "x >= y ? x : y";
        bool: |x, y| x | y, "x | y";
    }
    Minimum "minimum" Keep {
        float: |x, y| math::min_nan(x, y), "min_nan(x, y)";
        int: |x, y| if x <= y { x } else { y }, "x <= y ? x : y";
        bool: |x, y| x & y, "x & y";
    }
    Atan2 "atan2" ToFloat { float: |x, y| x.atan2(y), "m_atan2(x, y)"; }
    Eq "eq" ToBool { float -> bool: |x, y| x == y, "x == y"; int -> bool: |x, y| x == y, "x == y"; bool: |x, y| x == y, "x == y"; }
    Ne "ne" ToBool { float -> bool: |x, y| x != y, "x != y"; int -> bool: |x, y| x != y, "x != y"; bool: |x, y| x ^ y, "x ^ y"; }
    Lt "lt" ToBool { float -> bool: |x, y| x < y, "x < y"; int -> bool: |x, y| x < y, "x < y"; bool: |x, y| !x & y, "!x & y"; }
    Le "le" ToBool { float -> bool: |x, y| x <= y, "x <= y"; int -> bool: |x, y| x <= y, "x <= y"; bool: |x, y| x <= y, "x <= y"; }
    Gt "gt" ToBool { float -> bool: |x, y| x > y, "x > y"; int -> bool: |x, y| x > y, "x > y"; bool: |x, y| x & !y, "x & !y"; }
    Ge "ge" ToBool { float -> bool: |x, y| x >= y, "x >= y"; int -> bool: |x, y| x >= y, "x >= y"; bool: |x, y| x >= y, "x >= y"; }
    LogicalAnd "logical_and" ToBool {
        float -> bool: |x, y| !x.is_zero() && !y.is_zero(), "x != (C)0 && y != (C)0";
        int -> bool: |x, y| !x.is_zero() && !y.is_zero(), "x != (T)0 && y != (T)0";
        bool: |x, y| x & y, "x & y";
    }
    LogicalOr "logical_or" ToBool {
        float -> bool: |x, y| !x.is_zero() || !y.is_zero(), "x != (C)0 || y != (C)0";
        int -> bool: |x, y| !x.is_zero() || !y.is_zero(), "x != (T)0 || y != (T)0";
        bool: |x, y| x | y, "x | y";
    }
    LogicalXor "logical_xor" ToBool {
        float -> bool: |x, y| x.is_zero() != y.is_zero(), "(x != (C)0) != (y != (C)0)";
        int -> bool: |x, y| x.is_zero() != y.is_zero(), "(x != (T)0) != (y != (T)0)";
        bool: |x, y| x ^ y, "x ^ y";
    }
    BitwiseAnd "bitwise_and" Keep hint BITWISE { int: |x, y| x.and(y), "x & y"; bool: |x, y| x & y, "x & y"; }
    BitwiseOr "bitwise_or" Keep hint BITWISE { int: |x, y| x.or(y), "x | y"; bool: |x, y| x | y, "x | y"; }
    BitwiseXor "bitwise_xor" Keep hint BITWISE { int: |x, y| x.xor(y), "x ^ y"; bool: |x, y| x ^ y, "x ^ y"; }
    ShiftLeft "bitwise_left_shift" Keep hint SHIFT { int: |x, y| x.shl_(y), "shl_i(x, y)"; }
    ShiftRight "bitwise_right_shift" Keep hint SHIFT { int: |x, y| x.shr_(y), "shr_i(x, y)"; }
    ClampMin "clamp_min" Keep {
        float: |x, y| math::max_nan(x, y), "max_nan(x, y)";
        int: |x, y| if x >= y { x } else { y }, "x >= y ? x : y";
        bool: |x, y| x | y, "x | y";
    }
    ClampMax "clamp_max" Keep {
        float: |x, y| math::min_nan(x, y), "min_nan(x, y)";
        int: |x, y| if x <= y { x } else { y }, "x <= y ? x : y";
        bool: |x, y| x & y, "x & y";
    }
} } }
pub(crate) use binary_table;

/// As [`unary_table!`], without a policy: a ternary op computes in its output's dtype.
/// `Variant(v)`: the op's scalar, `v` in the sections.
macro_rules! ternary_table { ($m:ident $($a:tt)*) => { $m! { [$($a)*]
    Where "where" { select: |c, x, y| if c { x } else { y }, "x ? y : z"; }
    Lerp "lerp" { float: |x, y, z| math::lerp(x, y, z), "lerp_f(x, y, z)"; }
    Addcmul(v) "addcmul" {
        float: |x, y, z| x + v * y * z, "x + v * y * z";
        int: |x, y, z| x.w_add(v.w_mul(y.w_mul(z))), "w_add(x, w_mul(v, w_mul(y, z)))";
    }
    Addcdiv(v) "addcdiv" { float: |x, y, z| x + v * (y / z), "x + v * (y / z)"; }
    Clamp "clamp" {
        float: |x, y, z| math::min_nan(math::max_nan(x, y), z), "min_nan(max_nan(x, y), z)";
        int: |x, y, z| {
            let m = if x >= y { x } else { y };
            if m <= z { m } else { z }
        }, "(x >= y ? x : y) <= z ? (x >= y ? x : y) : z";
    }
} } }
pub(crate) use ternary_table;

/// `pick!(cat cb; sections)`: the section of category `cat` (`float`, `int`, `bool`; a
/// `select` section serves every category) as `cb!(kind [params] cpu_fn, "c_expr")`, kind
/// `keep` (result in the input's dtype), `to_bool` or `select`; `cb!(none)` when there is none.
macro_rules! pick {
    (float $cb:ident; float: |$($p:ident),*| $f:expr, $c:literal; $($r:tt)*) => { $cb!(keep [$($p),*] $f, $c) };
    (float $cb:ident; float -> bool: |$($p:ident),*| $f:expr, $c:literal; $($r:tt)*) => { $cb!(to_bool [$($p),*] $f, $c) };
    (int $cb:ident; int: |$($p:ident),*| $f:expr, $c:literal; $($r:tt)*) => { $cb!(keep [$($p),*] $f, $c) };
    (int $cb:ident; int -> bool: |$($p:ident),*| $f:expr, $c:literal; $($r:tt)*) => { $cb!(to_bool [$($p),*] $f, $c) };
    (bool $cb:ident; bool: |$($p:ident),*| $f:expr, $c:literal; $($r:tt)*) => { $cb!(keep [$($p),*] $f, $c) };
    ($w:ident $cb:ident; select: |$($p:ident),*| $f:expr, $c:literal; $($r:tt)*) => { $cb!(select [$($p),*] $f, $c) };
    ($w:ident $cb:ident; $o:ident $(-> $t:ident)?: |$($p:ident),*| $f:expr, $c:literal; $($r:tt)*) => {
        $crate::backend::op_table::pick!($w $cb; $($r)*)
    };
    ($w:ident $cb:ident;) => { $cb!(none) };
}
pub(crate) use pick;

/// `table!(match_arms cat cb op Op)`: `match op { Op::V => cb's expansion of V's section of
/// category `cat`, … }`, every entry an arm; an op's scalar `v` is bound to `cb!(scalar v)`.
macro_rules! match_arms {
    ([$cat:ident $cb:ident $op:ident $Op:ident]
     $($V:ident $(($v:ident))? $name:literal $($pol:ident)? $(hint $h:ident)? { $($s:tt)* })*) => {
        match $op {
            $($Op::$V $(($v))? => {
                $(#[allow(unused_variables)] let $v = $cb!(scalar $v);)?
                $crate::backend::op_table::pick!($cat $cb; $($s)*)
            })*
        }
    };
}
pub(crate) use match_arms;

// hints of the dtypes an op refuses (`dtypes`)
const NOT_BOOL: &str = "; use logical_not for bool tensors, or to_dtype first";
const FLOAT_ONLY: &str = "; it takes float tensors (convert with to_dtype)";
const SUB_BOOL: &str = "; subtracting bool tensors is not supported, use logical_xor";
const CONVERT_BOOL: &str = "; convert bool tensors with to_dtype first";
const BITWISE: &str = "; bitwise ops take integer or bool tensors";
const SHIFT: &str = "; shifts take integer tensors";

/// What an op's kernel for one dtype category returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Out {
    /// The input's dtype (the output's, for a ternary op).
    Same,
    /// Bool.
    Bool,
    /// `where`: the dtype of operands 1 and 2; operand 0 is bool.
    Select,
}

/// A kernel of the table: its C expression and what it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kernel {
    pub(crate) c: &'static str,
    pub(crate) out: Out,
}

macro_rules! kernel_of {
    (none) => {
        None
    };
    (keep $p:tt $f:expr, $c:literal) => {
        Some(Kernel {
            c: $c,
            out: Out::Same,
        })
    };
    (to_bool $p:tt $f:expr, $c:literal) => {
        Some(Kernel {
            c: $c,
            out: Out::Bool,
        })
    };
    (select $p:tt $f:expr, $c:literal) => {
        Some(Kernel {
            c: $c,
            out: Out::Select,
        })
    };
}

/// The kernel of `$Op::$V` per category: a match on (op, category), every pair listed.
macro_rules! kernel_match {
    ($op:expr, $t:expr, $Op:ident; $($V:ident { $($s:tt)* })*) => {
        match ($op, $t.category()) {
            $(
                ($Op::$V { .. }, Category::Float) => pick!(float kernel_of; $($s)*),
                ($Op::$V { .. }, Category::Integer) => pick!(int kernel_of; $($s)*),
                ($Op::$V { .. }, Category::Bool) => pick!(bool kernel_of; $($s)*),
            )*
        }
    };
}

macro_rules! hint_or_none {
    () => {
        ""
    };
    ($h:ident) => {
        $h
    };
}

macro_rules! unary_impl {
    ([] $($V:ident $name:literal $pol:ident $(hint $h:ident)? { $($s:tt)* })*) => {
        impl UnaryOp {
            pub const ALL: [UnaryOp; [$(stringify!($V)),*].len()] = [$(UnaryOp::$V),*];
            pub fn name(self) -> &'static str {
                match self { $(UnaryOp::$V => $name,)* }
            }
            pub fn int_policy(self) -> IntPolicy {
                match self { $(UnaryOp::$V => IntPolicy::$pol,)* }
            }
            /// Why `dtypes` refuses an input dtype the kernels lack ("" if not said).
            fn hint(self) -> &'static str {
                match self { $(UnaryOp::$V => hint_or_none!($($h)?),)* }
            }
            /// The kernel for input dtype `t`: the same on every backend.
            pub(crate) fn kernel(self, t: DType) -> Option<Kernel> {
                kernel_match!(self, t, UnaryOp; $($V { $($s)* })*)
            }
        }
    };
}
unary_table!(unary_impl);

macro_rules! binary_impl {
    ([] $($V:ident $name:literal $pol:ident $(hint $h:ident)? { $($s:tt)* })*) => {
        impl BinaryOp {
            pub const ALL: [BinaryOp; [$(stringify!($V)),*].len()] = [$(BinaryOp::$V),*];
            pub fn name(self) -> &'static str {
                match self { $(BinaryOp::$V => $name,)* }
            }
            /// `Keep`, `ToFloat` (int and bool operands compute in f32) or `ToBool`.
            pub(crate) fn int_policy(self) -> IntPolicy {
                match self { $(BinaryOp::$V => IntPolicy::$pol,)* }
            }
            fn hint(self) -> &'static str {
                match self { $(BinaryOp::$V => hint_or_none!($($h)?),)* }
            }
            /// The kernel for dtype `t` (both inputs): the same on every backend.
            pub(crate) fn kernel(self, t: DType) -> Option<Kernel> {
                kernel_match!(self, t, BinaryOp; $($V { $($s)* })*)
            }
        }
    };
}
binary_table!(binary_impl);

macro_rules! ternary_impl {
    ([] $($V:ident $(($v:ident))? $name:literal { $($s:tt)* })*) => {
        impl TernaryOp {
            /// Every op once (scalars 1).
            pub(crate) const ALL: [TernaryOp; [$(stringify!($V)),*].len()] =
                [$(TernaryOp::$V $((ternary_impl!(@one $v)))?),*];
            pub fn name(self) -> &'static str {
                match self { $(TernaryOp::$V { .. } => $name,)* }
            }
            /// The kernel for output dtype `t`: the same on every backend.
            pub(crate) fn kernel(self, t: DType) -> Option<Kernel> {
                kernel_match!(self, t, TernaryOp; $($V { $($s)* })*)
            }
        }
    };
    (@one $v:ident) => { Scalar::Int(1) };
}
ternary_table!(ternary_impl);

impl UnaryOp {
    /// (compute dtype, result dtype) for an input dtype, or an error naming the op.
    pub fn dtypes(self, input: DType) -> Result<(DType, DType)> {
        let refuse = |hint: &str| Error::UnsupportedDType {
            op: self.name(),
            dtype: input,
            hint: hint.into(),
        };
        let r = match self.int_policy() {
            IntPolicy::Keep => (input, input),
            IntPolicy::ToBool => (input, DType::Bool),
            IntPolicy::ToFloat | IntPolicy::FloatOnly if input.is_float() => (input, input),
            IntPolicy::ToFloat => (DType::F32, DType::F32),
            IntPolicy::FloatOnly => return Err(refuse(FLOAT_ONLY)),
        };
        match self.kernel(r.0) {
            Some(_) => Ok(r),
            None => Err(refuse(self.hint())),
        }
    }
}

impl BinaryOp {
    /// (compute dtype, result dtype) for the promoted dtype of the operands.
    pub fn dtypes(self, common: DType) -> Result<(DType, DType)> {
        let r = match self.int_policy() {
            IntPolicy::ToBool => (common, DType::Bool),
            IntPolicy::ToFloat if !common.is_float() => (DType::F32, DType::F32),
            _ => (common, common),
        };
        match self.kernel(r.0) {
            Some(_) => Ok(r),
            None => Err(Error::UnsupportedDType {
                op: self.name(),
                dtype: common,
                hint: self.hint().into(),
            }),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// reductions

/// The reductions: `Variant "name" result empty;`. `result`: the result dtype for an input
/// dtype; `empty`: the result over zero elements (`Error`: none, the op refuses). How each
/// backend folds stays with it: the CPU accumulates in Rust types with a NaN flag for the
/// extrema, CUDA in ACC/INIT/STEP/MERGE macros over sortable keys (`cuda/reduce.rs`); the two
/// share no expression text, so there is nothing to generate from here.
macro_rules! reduce_table { ($m:ident $($a:tt)*) => { $m! { [$($a)*]
    Sum "sum" FloatKeepIntI64 Zero;
    Prod "prod" FloatKeepIntI64 One;
    Mean "mean" FloatOnly NaN;
    Max "amax" Keep Error;
    Min "amin" Keep Error;
    All "all" Bool True;
    Any "any" Bool False;
    CountNonzero "count_nonzero" I64 Zero;
} } }

/// What a reduction over zero elements gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Empty {
    Zero,
    One,
    NaN,
    True,
    False,
    /// An error: the op has no identity.
    Error,
}

macro_rules! reduce_impl {
    ([] $($V:ident $name:literal $res:ident $empty:ident;)*) => {
        impl ReduceOp {
            pub const ALL: [ReduceOp; [$(stringify!($V)),*].len()] = [$(ReduceOp::$V),*];
            pub fn name(self) -> &'static str {
                match self { $(ReduceOp::$V => $name,)* }
            }
            /// The result of an empty reduction.
            pub(crate) fn empty(self) -> Empty {
                match self { $(ReduceOp::$V => Empty::$empty,)* }
            }
            /// The result dtype for an input dtype (PyTorch's rules), or an error naming the op:
            /// - `Sum`, `Prod`: floats keep their dtype; integers and bool give i64;
            /// - `Mean`: floats only, dtype kept;
            /// - `Max`, `Min`: any dtype, kept (bool too);
            /// - `All`, `Any`: any dtype, result bool (PyTorch returns uint8 for uint8 inputs;
            ///   stride always returns bool);
            /// - `CountNonzero`: any dtype, result i64.
            pub fn result_dtype(self, input: DType) -> Result<DType> {
                match self { $(ReduceOp::$V => reduce_result!($res, self, input),)* }
            }
        }
    };
}
macro_rules! reduce_result {
    (FloatKeepIntI64, $op:expr, $t:expr) => {
        Ok(if $t.is_float() { $t } else { DType::I64 })
    };
    (Keep, $op:expr, $t:expr) => {
        Ok($t)
    };
    (Bool, $op:expr, $t:expr) => {
        Ok(DType::Bool)
    };
    (I64, $op:expr, $t:expr) => {
        Ok(DType::I64)
    };
    (FloatOnly, $op:expr, $t:expr) => {
        if $t.is_float() {
            Ok($t)
        } else {
            Err(Error::UnsupportedDType {
                op: $op.name(),
                dtype: $t,
                hint: "; it takes float tensors (convert with to_dtype(DType::F32) first)".into(),
            })
        }
    };
}
reduce_table!(reduce_impl);

#[cfg(test)]
mod tests;
