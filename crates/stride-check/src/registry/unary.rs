//! Unary elementwise ops: one entry per `UnaryOp`, each with its three forms.
//!
//! References are plain f64 math on the input value (already cast to the compute dtype:
//! integer and bool inputs of float functions are computed in f32, as the frontend does).

use super::dtypes::{ALL, FLOATS, NUMERIC};
use super::{
    elementwise_sampler, no_params, ArgSpec, DTypeRule, Domain, Family, IntDomain, OpInfo,
};
use crate::reference::erf;
use stride_core::DType;

/// An entry for a unary op: `self` drawn from `domain`, reference `f`.
pub fn unary(
    name: &'static str,
    dtypes: &[DType],
    rule: DTypeRule,
    domain: Domain,
    f: fn(f64) -> f64,
) -> OpInfo {
    let args = vec![ArgSpec::tensor("self", domain)];
    OpInfo::new(name, Family::Unary)
        .args(args.clone())
        .dtypes(dtypes)
        .rule(rule)
        .sampler(elementwise_sampler(args, no_params))
        .elementwise_bounded(
            move |x, _| f(x[0]),
            move |x, v, c| accuracy(name, x[0], v, c),
        )
}

/// The error bound of a unary kernel before the final rounding to the result dtype (the
/// runner adds ½ ulp of it), in ulps of its compute dtype (f32 for f32/f16/bf16 results,
/// f64 for f64) at the exact value, with an absolute floor only where the function has a
/// zero the relative bound cannot follow:
/// - **exact** (0): `neg abs sign relu floor ceil round trunc square` — the exact result
///   is representable (a square of an f16/bf16 value fits f32's 24 bits; in f32/f64 one
///   correctly rounded product, which the final ½ ulp covers);
/// - **correctly rounded** (1 ulp): `sqrt reciprocal` are IEEE-exact in the compute dtype
///   (½ ulp), then rounded again for f16/bf16 (double rounding: ½ ulp of f32 + ½ ulp out);
///   `rsqrt` (2 ulps): a square root and a reciprocal;
/// - **one libm function** (4 ulps): `exp exp2 log log2 log1p expm1 sin cos tan tanh erf` —
///   the largest maximum error the C libraries and CUDA document for these in f32 (CUDA:
///   `tanf` 4 ulps, the others 1–2; glibc's within 1–3); f64's libraries are as good.
///   Floors: `sin cos tan` (zeros at multiples of π/2) `4 ulp(1)`, `log log2` (zero at 1)
///   `4 ulp(1)`: a kernel whose argument reduction or `log(x)·c` is accurate to an ulp of
///   1, not of the result, is still one that PyTorch and CUDA ship;
/// - **compositions** (8 ulps): `sigmoid = 1/(1+e^{−x})` (exp 4, the sum and quotient 1
///   each, the quotient's condition w.r.t. e^{−x} ≤ 1), `silu = x·sigmoid(x)` (+1);
///   `gelu, gelu_tanh = x/2·(1 + erf|tanh(..))` — `1 + erf` cancels as x → −∞, so the
///   absolute floor is the error of the inner 1 + erf (4 ulps of 1) times `|x|/2`;
///   `softplus = ln(1 + e^x)`: `1 + e^x` rounds by an ulp of 1, which `ln` passes on
///   absolutely: floor `4 ulp(1)`.
fn accuracy(name: &str, x: f64, v: f64, c: &crate::reference::RefCtx) -> f64 {
    let d = if c.result == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    if !c.result.is_float() || !v.is_finite() {
        return 0.0;
    }
    let one = crate::tol::ulp(1.0, d);
    let (ulps, floor) = match name {
        "sqrt" | "reciprocal" => (1.0, 0.0),
        "rsqrt" => (2.0, 0.0),
        // the reference's erf (a series of up to ~60 positive terms, `reference::erf`) is
        // itself only good to ~60 f64 roundings: f64 results get that much room
        "erf" | "gelu" if d == DType::F64 => (64.0, 64.0 * one),
        "exp" | "exp2" | "log1p" | "expm1" | "tanh" | "erf" => (4.0, 0.0),
        "sin" | "cos" | "tan" | "log" | "log2" => (4.0, 4.0 * one),
        "sigmoid" | "silu" => (8.0, 0.0),
        "gelu" | "gelu_tanh" => (8.0, 4.0 * one * x.abs() / 2.0),
        "softplus" => (8.0, 4.0 * one),
        _ => (0.0, 0.0),
    };
    ulps * crate::tol::ulp(v, d) + floor
}

/// The functional, in-place and `_out` forms of a unary method triple.
macro_rules! forms1 {
    ($op:expr, $f:ident, $fi:ident, $fo:ident) => {
        $op.functional(|a, _| a[0].t().$f())
            .inplace(|a, _| a[0].t().$fi())
            .out(|a, _, o| a[0].t().$fo(o))
    };
}

fn sign(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}
fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
fn relu(x: f64) -> f64 {
    if x.is_nan() || x > 0.0 {
        x
    } else {
        0.0
    }
}
fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}
fn gelu_tanh(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}
fn softplus(x: f64) -> f64 {
    // PyTorch's defaults: beta = 1, threshold = 20 (linear above it)
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// Float values on a quarter grid (ties for round), integers in the wide range, specials.
const ROUNDING: Domain = Domain::range(-10.0, 10.0)
    .grid(0.25)
    .ints(IntDomain::Full)
    .specials();
const ANY_SPECIAL: Domain = Domain::any().specials();

pub fn ops() -> Vec<OpInfo> {
    use DTypeRule::*;
    vec![
        forms1!(
            unary("neg", NUMERIC, Same, ANY_SPECIAL, |x| -x),
            neg,
            neg_,
            neg_out
        ),
        forms1!(
            unary("abs", NUMERIC, Same, ANY_SPECIAL, f64::abs),
            abs,
            abs_,
            abs_out
        ),
        forms1!(
            unary("sign", NUMERIC, Same, ANY_SPECIAL, sign),
            sign,
            sign_,
            sign_out
        ),
        forms1!(
            unary("exp", ALL, IntToFloat, Domain::range(-5.0, 5.0), f64::exp),
            exp,
            exp_,
            exp_out
        ),
        forms1!(
            unary("exp2", ALL, IntToFloat, Domain::range(-5.0, 5.0), f64::exp2),
            exp2,
            exp2_,
            exp2_out
        ),
        forms1!(
            unary("log", ALL, IntToFloat, Domain::range(0.05, 10.0), f64::ln),
            log,
            log_,
            log_out
        ),
        forms1!(
            unary(
                "log2",
                ALL,
                IntToFloat,
                Domain::range(0.05, 10.0),
                f64::log2
            ),
            log2,
            log2_,
            log2_out
        ),
        forms1!(
            unary(
                "log1p",
                ALL,
                IntToFloat,
                Domain::range(-0.9, 10.0),
                f64::ln_1p
            ),
            log1p,
            log1p_,
            log1p_out
        ),
        forms1!(
            unary(
                "expm1",
                ALL,
                IntToFloat,
                Domain::range(-3.0, 3.0),
                f64::exp_m1
            ),
            expm1,
            expm1_,
            expm1_out
        ),
        forms1!(
            unary("sqrt", ALL, IntToFloat, Domain::range(0.0, 10.0), f64::sqrt),
            sqrt,
            sqrt_,
            sqrt_out
        ),
        forms1!(
            unary("rsqrt", ALL, IntToFloat, Domain::range(0.05, 10.0), |x| 1.0
                / x.sqrt()),
            rsqrt,
            rsqrt_,
            rsqrt_out
        ),
        forms1!(
            unary(
                "reciprocal",
                ALL,
                IntToFloat,
                Domain::range(-10.0, 10.0).nonzero(0.1),
                |x| 1.0 / x
            ),
            reciprocal,
            reciprocal_,
            reciprocal_out
        ),
        forms1!(
            unary(
                "square",
                NUMERIC,
                Same,
                Domain::range(-8.0, 8.0).ints(IntDomain::Full),
                |x| x * x
            ),
            square,
            square_,
            square_out
        ),
        forms1!(
            unary("sin", ALL, IntToFloat, Domain::range(-6.0, 6.0), f64::sin),
            sin,
            sin_,
            sin_out
        ),
        forms1!(
            unary("cos", ALL, IntToFloat, Domain::range(-6.0, 6.0), f64::cos),
            cos,
            cos_,
            cos_out
        ),
        forms1!(
            unary("tan", ALL, IntToFloat, Domain::range(-1.3, 1.3), f64::tan),
            tan,
            tan_,
            tan_out
        ),
        forms1!(
            unary("tanh", ALL, IntToFloat, Domain::range(-5.0, 5.0), f64::tanh),
            tanh,
            tanh_,
            tanh_out
        ),
        forms1!(
            unary(
                "sigmoid",
                ALL,
                IntToFloat,
                Domain::range(-8.0, 8.0),
                sigmoid
            ),
            sigmoid,
            sigmoid_,
            sigmoid_out
        ),
        forms1!(
            unary("relu", ALL, Same, ANY_SPECIAL, relu),
            relu,
            relu_,
            relu_out
        ),
        forms1!(
            unary("gelu", FLOATS, Same, Domain::range(-5.0, 5.0), gelu),
            gelu,
            gelu_,
            gelu_out
        ),
        forms1!(
            unary(
                "gelu_tanh",
                FLOATS,
                Same,
                Domain::range(-5.0, 5.0),
                gelu_tanh
            ),
            gelu_tanh,
            gelu_tanh_,
            gelu_tanh_out
        ),
        forms1!(
            unary("silu", FLOATS, Same, Domain::range(-5.0, 5.0), |x| x
                * sigmoid(x)),
            silu,
            silu_,
            silu_out
        ),
        forms1!(
            unary(
                "softplus",
                FLOATS,
                Same,
                Domain::range(-25.0, 25.0),
                softplus
            ),
            softplus,
            softplus_,
            softplus_out
        ),
        forms1!(
            unary("floor", ALL, Same, ROUNDING, f64::floor),
            floor,
            floor_,
            floor_out
        ),
        forms1!(
            unary("ceil", ALL, Same, ROUNDING, f64::ceil),
            ceil,
            ceil_,
            ceil_out
        ),
        forms1!(
            unary("round", ALL, Same, ROUNDING, f64::round_ties_even),
            round,
            round_,
            round_out
        ),
        forms1!(
            unary("trunc", ALL, Same, ROUNDING, f64::trunc),
            trunc,
            trunc_,
            trunc_out
        ),
        forms1!(
            unary("erf", ALL, IntToFloat, Domain::range(-3.0, 3.0), erf),
            erf,
            erf_,
            erf_out
        ),
        forms1!(
            unary("isnan", ALL, ToBool, ANY_SPECIAL, |x| x.is_nan() as u8
                as f64),
            isnan,
            isnan_,
            isnan_out
        ),
        forms1!(
            unary("isinf", ALL, ToBool, ANY_SPECIAL, |x| x.is_infinite() as u8
                as f64),
            isinf,
            isinf_,
            isinf_out
        ),
        forms1!(
            unary(
                "isfinite",
                ALL,
                ToBool,
                ANY_SPECIAL,
                |x| x.is_finite() as u8 as f64
            ),
            isfinite,
            isfinite_,
            isfinite_out
        ),
        forms1!(
            unary(
                "logical_not",
                ALL,
                ToBool,
                Domain::range(-2.0, 2.0)
                    .grid(1.0)
                    .ints(IntDomain::Range(-2, 2))
                    .specials(),
                |x| (x == 0.0) as u8 as f64
            ),
            logical_not,
            logical_not_,
            logical_not_out
        ),
    ]
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Twice: the smooth ops whose backward is built from differentiable ops; Once: the rest that record a backward (zero almost everywhere for `sign floor ceil round trunc`); No: the predicates and `logical_not`.
pub fn grad(name: &str) -> super::Grad {
    match name {
        "neg" | "abs" | "exp" | "log" | "sqrt" | "reciprocal" | "square" | "sin" | "tanh"
        | "sigmoid" | "gelu" | "silu" => super::Grad::Twice,
        "sign" | "exp2" | "log2" | "log1p" | "expm1" | "rsqrt" | "cos" | "tan" | "relu"
        | "gelu_tanh" | "softplus" | "floor" | "ceil" | "round" | "trunc" | "erf" => {
            super::Grad::Once
        }
        _ => super::Grad::No,
    }
}
