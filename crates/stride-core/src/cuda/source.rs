//! The CUDA C source of each kernel module: `kernels/common.cuh` + a family's macros
//! (`kernels/*.cu`) + one line per op, generated here from the same op enums the CPU backend
//! dispatches on — so the set of (op, dtype) pairs a device supports is written once.
//!
//! A module holds one kernel (an op on a dtype: `unary_exp_f32`, `binary_add_i64`,
//! `cast_f32_bf16`, `copy_4`) and is compiled on first use: NVRTC takes about 0.1–0.2 s per
//! kernel, so the first op of a fresh process with a cold cache waits for its own kernel only.

use crate::backend::{BinaryOp, TernaryOp, UnaryOp};
use crate::{Category, DType};

const COMMON: &str = include_str!("kernels/common.cuh");
const ELEMENTWISE: &str = include_str!("kernels/elementwise.cu");
const COPY: &str = include_str!("kernels/copy.cu");

/// The C type of a dtype's elements in kernels/common.cuh.
pub(crate) fn ctype(d: DType) -> &'static str {
    match d {
        DType::F64 => "double",
        DType::F32 => "float",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::U8 => "u8",
        DType::I8 => "i8",
        DType::Bool => "bool",
    }
}

/// Short dtype name used in module and kernel names.
pub(crate) fn tag(d: DType) -> &'static str {
    match d {
        DType::F64 => "f64",
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::U8 => "u8",
        DType::I8 => "i8",
        DType::Bool => "bool",
    }
}

fn module(t: DType, family: &str, lines: impl Iterator<Item = String>) -> String {
    let mut s = String::with_capacity(COMMON.len() + ELEMENTWISE.len() + 4096);
    s.push_str(COMMON);
    s.push_str(ELEMENTWISE);
    s.push_str(&format!("\n// ---- {family} kernels for {}\n", tag(t)));
    s.push_str(&format!("typedef {} T;\n", ctype(t)));
    if t.is_float() {
        s.push_str("typedef E<T>::C C;\n#define L(v) E<T>::ld(v)\n#define S(v) E<T>::st(v)\n");
    }
    for l in lines {
        s.push_str(&l);
        s.push('\n');
    }
    s
}

/// `(result C type, expression of x)` of a unary op on dtype `t`, or None if `t` has no such op.
fn unary_expr(op: UnaryOp, t: DType) -> Option<(&'static str, String)> {
    use UnaryOp::*;
    let f = |e: &str| Some(("T", format!("S({e})")));
    let b = |e: &str| Some(("bool", e.to_string()));
    match t.category() {
        Category::Float => match op {
            Neg => f("-L(x)"),
            Abs => f("m_fabs(L(x))"),
            Sign => f("sign_f(L(x))"),
            Exp => f("m_exp(L(x))"),
            Exp2 => f("m_exp2(L(x))"),
            Log => f("m_log(L(x))"),
            Log2 => f("m_log2(L(x))"),
            Log1p => f("m_log1p(L(x))"),
            Expm1 => f("m_expm1(L(x))"),
            Sqrt => f("m_sqrt(L(x))"),
            Rsqrt => f("(C)1 / m_sqrt(L(x))"),
            Reciprocal => f("(C)1 / L(x)"),
            Square => f("L(x) * L(x)"),
            Sin => f("m_sin(L(x))"),
            Cos => f("m_cos(L(x))"),
            Tan => f("m_tan(L(x))"),
            Tanh => f("m_tanh(L(x))"),
            Sigmoid => f("sigmoid(L(x))"),
            Relu => f("relu_f(L(x))"),
            GeluErf => f("gelu_erf(L(x))"),
            GeluTanh => f("gelu_tanh(L(x))"),
            Silu => f("L(x) * sigmoid(L(x))"),
            Softplus => f("softplus(L(x))"),
            Floor => f("m_floor(L(x))"),
            Ceil => f("m_ceil(L(x))"),
            Round => f("m_rint(L(x))"),
            Trunc => f("m_trunc(L(x))"),
            Erf => f("m_erf(L(x))"),
            IsNan => b("m_isnan(L(x))"),
            IsInf => b("m_isinf(L(x))"),
            IsFinite => b("!m_isnan(L(x)) && !m_isinf(L(x))"),
            LogicalNot => b("L(x) == (C)0"),
        },
        Category::Integer => match op {
            Neg => Some(("T", "w_neg(x)".into())),
            Abs => Some(("T", "w_abs(x)".into())),
            Sign => Some(("T", "sign_i(x)".into())),
            Square => Some(("T", "w_mul(x, x)".into())),
            Relu => Some(("T", "is_neg(x) ? (T)0 : x".into())),
            Floor | Ceil | Round | Trunc => Some(("T", "x".into())),
            IsNan | IsInf => b("false"),
            IsFinite => b("true"),
            LogicalNot => b("x == (T)0"),
            _ => None,
        },
        Category::Bool => match op {
            LogicalNot => b("!x"),
            IsNan | IsInf => b("false"),
            IsFinite => b("true"),
            Relu | Floor | Ceil | Round | Trunc => b("x"),
            _ => None,
        },
    }
}

/// Whether unary `op` has a kernel for input dtype `t`.
pub(crate) fn has_unary(op: UnaryOp, t: DType) -> bool {
    unary_expr(op, t).is_some()
}

/// The module of unary `op` on input dtype `t` (None: no such kernel).
pub(crate) fn unary_module(op: UnaryOp, t: DType) -> Option<String> {
    let (out, e) = unary_expr(op, t)?;
    let line = format!("UNARY({}, {out}, {e})", op.name());
    Some(module(t, "unary", std::iter::once(line)))
}

fn binary_expr(op: BinaryOp, t: DType) -> Option<(&'static str, String)> {
    use BinaryOp::*;
    let f = |e: &str| Some(("T", format!("S({e})")));
    let i = |e: &str| Some(("T", e.to_string()));
    let b = |e: &str| Some(("bool", e.to_string()));
    let cmp = |sym: &str| b(&format!("x {sym} y"));
    match t.category() {
        Category::Float => match op {
            Add => f("L(x) + L(y)"),
            Sub => f("L(x) - L(y)"),
            Mul => f("L(x) * L(y)"),
            Div => f("L(x) / L(y)"),
            FloorDivide => f("floor_div_real(L(x), L(y))"),
            Remainder => f("remainder_real(L(x), L(y))"),
            Pow => f("m_pow(L(x), L(y))"),
            Maximum | ClampMin => f("max_nan(L(x), L(y))"),
            Minimum | ClampMax => f("min_nan(L(x), L(y))"),
            Atan2 => f("m_atan2(L(x), L(y))"),
            Eq => b("L(x) == L(y)"),
            Ne => b("L(x) != L(y)"),
            Lt => b("L(x) < L(y)"),
            Le => b("L(x) <= L(y)"),
            Gt => b("L(x) > L(y)"),
            Ge => b("L(x) >= L(y)"),
            LogicalAnd => b("L(x) != (C)0 && L(y) != (C)0"),
            LogicalOr => b("L(x) != (C)0 || L(y) != (C)0"),
            LogicalXor => b("(L(x) != (C)0) != (L(y) != (C)0)"),
            BitwiseAnd | BitwiseOr | BitwiseXor | ShiftLeft | ShiftRight => None,
        },
        Category::Integer => match op {
            Add => i("w_add(x, y)"),
            Sub => i("w_sub(x, y)"),
            Mul => i("w_mul(x, y)"),
            FloorDivide => i("floor_div_i(x, y)"),
            Remainder => i("py_rem_i(x, y)"),
            Pow => i("w_pow(x, y)"),
            Maximum | ClampMin => i("x >= y ? x : y"),
            Minimum | ClampMax => i("x <= y ? x : y"),
            BitwiseAnd => i("x & y"),
            BitwiseOr => i("x | y"),
            BitwiseXor => i("x ^ y"),
            ShiftLeft => i("shl_i(x, y)"),
            ShiftRight => i("shr_i(x, y)"),
            Eq => cmp("=="),
            Ne => cmp("!="),
            Lt => cmp("<"),
            Le => cmp("<="),
            Gt => cmp(">"),
            Ge => cmp(">="),
            LogicalAnd => b("x != (T)0 && y != (T)0"),
            LogicalOr => b("x != (T)0 || y != (T)0"),
            LogicalXor => b("(x != (T)0) != (y != (T)0)"),
            Div | Atan2 => None,
        },
        Category::Bool => match op {
            Add | LogicalOr | BitwiseOr | Maximum | ClampMin => b("x | y"),
            Mul | LogicalAnd | BitwiseAnd | Minimum | ClampMax => b("x & y"),
            LogicalXor | BitwiseXor | Ne => b("x ^ y"),
            Eq => b("x == y"),
            Lt => b("!x & y"),
            Le => b("x <= y"),
            Gt => b("x & !y"),
            Ge => b("x >= y"),
            _ => None,
        },
    }
}

/// Whether binary `op` has a kernel for dtype `t`.
pub(crate) fn has_binary(op: BinaryOp, t: DType) -> bool {
    binary_expr(op, t).is_some()
}

/// The module of binary `op` on dtype `t` (None: no such kernel).
pub(crate) fn binary_module(op: BinaryOp, t: DType) -> Option<String> {
    let (out, e) = binary_expr(op, t)?;
    let line = format!("BINARY({}, {out}, {e})", op.name());
    Some(module(t, "binary", std::iter::once(line)))
}

/// The module of the integer zero/negative check (see `ANY_BAD` in kernels/elementwise.cu).
pub(crate) fn any_bad_module(t: DType) -> String {
    module(t, "check", std::iter::once("ANY_BAD(any_bad)".to_string()))
}

/// Kernel name of a ternary op (the scalar of addcmul/addcdiv travels as an argument).
pub(crate) fn ternary_name(op: TernaryOp) -> &'static str {
    op.name()
}

fn ternary_expr(op: TernaryOp, t: DType) -> Option<(&'static str, String)> {
    match (op, t.category()) {
        // the first member is the type of operand x: bool for `where`, else T
        (TernaryOp::Where, _) => Some(("bool", "x ? y : z".into())),
        (TernaryOp::Lerp, Category::Float) => Some(("T", "S(lerp_f(L(x), L(y), L(z)))".into())),
        (TernaryOp::Addcmul(_), Category::Float) => {
            Some(("T", "S(L(x) + (C)vf * L(y) * L(z))".into()))
        }
        (TernaryOp::Addcdiv(_), Category::Float) => {
            Some(("T", "S(L(x) + (C)vf * (L(y) / L(z)))".into()))
        }
        (TernaryOp::Clamp, Category::Float) => {
            Some(("T", "S(min_nan(max_nan(L(x), L(y)), L(z)))".into()))
        }
        (TernaryOp::Addcmul(_), Category::Integer) => Some((
            "T",
            "w_add(x, w_mul(E<T>::from_i64(vi), w_mul(y, z)))".into(),
        )),
        (TernaryOp::Clamp, Category::Integer) => {
            Some(("T", "(x >= y ? x : y) <= z ? (x >= y ? x : y) : z".into()))
        }
        _ => None,
    }
}

/// Whether ternary `op` has a kernel for output dtype `t`.
pub(crate) fn has_ternary(op: TernaryOp, t: DType) -> bool {
    ternary_expr(op, t).is_some()
}

/// The module of ternary `op` with output dtype `t` (None: no such kernel).
pub(crate) fn ternary_module(op: TernaryOp, t: DType) -> Option<String> {
    let (a, e) = ternary_expr(op, t)?;
    let line = format!("TERNARY({}, {a}, {e})", ternary_name(op));
    Some(module(t, "ternary", std::iter::once(line)))
}

/// Kernel name of a cast to `d` (in module `cast_<source>`).
pub(crate) fn cast_name(d: DType) -> &'static str {
    match d {
        DType::F64 => "to_f64",
        DType::F32 => "to_f32",
        DType::F16 => "to_f16",
        DType::BF16 => "to_bf16",
        DType::I64 => "to_i64",
        DType::I32 => "to_i32",
        DType::U32 => "to_u32",
        DType::U8 => "to_u8",
        DType::I8 => "to_i8",
        DType::Bool => "to_bool",
    }
}

/// The cast from `s` to `d`: by `s`'s category, as `Element::cast` on the CPU.
pub(crate) fn cast_module(s: DType, d: DType) -> String {
    let how = match s.category() {
        Category::Float => format!("E<{0}>::from_f64(E<T>::to_f64(x))", ctype(d)),
        Category::Integer => format!("E<{0}>::from_i64(E<T>::to_i64(x))", ctype(d)),
        Category::Bool => format!("E<{0}>::from_bool(x)", ctype(d)),
    };
    let line = format!("CAST({}, {}, {how})", cast_name(d), ctype(d));
    module(s, "cast", std::iter::once(line))
}

/// The bit copy and fill kernels of one element size (1, 2, 4 or 8 bytes).
pub(crate) fn copy_module(bytes: usize) -> String {
    let word = match bytes {
        1 => "u8",
        2 => "unsigned short",
        4 => "u32",
        _ => "u64",
    };
    format!("{COMMON}{ELEMENTWISE}{COPY}COPY_FILL({bytes}, {word})\n")
}

/// Every module's (name, source), for the compile test.
#[cfg(test)]
pub(crate) fn all_modules() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = [1, 2, 4, 8]
        .iter()
        .map(|&b| (format!("copy_{b}"), copy_module(b)))
        .collect();
    let all_ternary = [
        TernaryOp::Where,
        TernaryOp::Lerp,
        TernaryOp::Addcmul(crate::Scalar::Int(1)),
        TernaryOp::Addcdiv(crate::Scalar::Int(1)),
        TernaryOp::Clamp,
    ];
    for t in DType::ALL {
        let n = tag(t);
        for op in UnaryOp::ALL {
            v.extend(unary_module(op, t).map(|s| (format!("unary_{}_{n}", op.name()), s)));
        }
        for op in BinaryOp::ALL {
            v.extend(binary_module(op, t).map(|s| (format!("binary_{}_{n}", op.name()), s)));
        }
        for op in all_ternary {
            v.extend(ternary_module(op, t).map(|s| (format!("ternary_{}_{n}", op.name()), s)));
        }
        if t.is_int() {
            v.push((format!("check_{n}"), any_bad_module(t)));
        }
        for d in DType::ALL {
            v.push((format!("cast_{n}_{}", tag(d)), cast_module(t, d)));
        }
    }
    v
}
