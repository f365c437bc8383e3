//! Binary elementwise ops: each `BinaryOp` twice — `name` with a tensor rhs and
//! `name.scalar` with a host-scalar rhs — each in its three forms.
//!
//! References get both operands already cast to the compute dtype; integer results are
//! exact here and wrapped to the result dtype by the runner, so u8/i8/i32 overflow is
//! checked too.

use super::dtypes::{ALL, INTS, INTS_AND_BOOL, NUMERIC};
use super::{
    elementwise_sampler, no_params, ArgSpec, DTypeRule, Domain, Family, IntDomain, OpInfo,
};
use crate::host::wrap_int;
use crate::reference::RefCtx;
use stride_core::DType;

/// The two entries (tensor rhs, scalar rhs) of a binary op.
pub fn binary(
    name: &'static str,
    scalar_name: &'static str,
    dtypes: &[DType],
    rule: DTypeRule,
    lhs: Domain,
    rhs: Domain,
    f: fn(f64, f64, &RefCtx) -> f64,
) -> [OpInfo; 2] {
    let mk = |name: &'static str, rhs_spec: ArgSpec| {
        let args = vec![ArgSpec::tensor("self", lhs), rhs_spec];
        OpInfo::new(name, Family::Binary)
            .args(args.clone())
            .dtypes(dtypes)
            .rule(rule)
            .promotion(true)
            .sampler(elementwise_sampler(args, no_params))
            .elementwise(move |x, c| f(x[0], x[1], c))
    };
    [
        mk(name, ArgSpec::tensor("other", rhs)),
        mk(scalar_name, ArgSpec::scalar("other", rhs)),
    ]
}

/// The three forms of both entries of a binary method triple.
macro_rules! forms2 {
    ($ops:expr, $f:ident, $fi:ident, $fo:ident) => {
        $ops.map(|op| {
            op.functional(|a, _| a[0].t().$f(a[1].o()))
                .inplace(|a, _| a[0].t().$fi(a[1].o()))
                .out(|a, _, o| a[0].t().$fo(a[1].o(), o))
        })
    };
}

fn b(v: bool) -> f64 {
    v as u8 as f64
}
fn nz(x: f64) -> bool {
    x != 0.0
}
fn max_nan(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.max(y)
    }
}
fn min_nan(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.min(y)
    }
}
/// Python's `%`: the remainder takes the divisor's sign. (`%` on f64 is fmod, exact.)
fn remainder(x: f64, y: f64, c: &RefCtx) -> f64 {
    if c.compute.is_float() {
        let r = x % y;
        if r != 0.0 && ((r < 0.0) != (y < 0.0)) {
            r + y
        } else {
            r
        }
    } else {
        x - y * (x / y).floor()
    }
}
/// Integer power with wrap-around at the compute width, by repeated multiplication.
fn ipow(x: f64, y: f64, d: DType) -> f64 {
    let (x, mut acc) = (x as i128, 1i128);
    for _ in 0..(y as u32) {
        acc = wrap_int(acc * x, d);
    }
    acc as f64
}
fn bitwise(x: f64, y: f64, op: fn(i128, i128) -> i128) -> f64 {
    op(x as i128, y as i128) as f64
}
/// `f` on floats; on integers, exact in i128 and wrapped to the compute dtype (products of
/// wrapped u32 values exceed f64's 53 bits).
fn arith(x: f64, y: f64, c: &RefCtx, f: fn(f64, f64) -> f64, i: fn(i128, i128) -> i128) -> f64 {
    if c.compute.is_float() || c.compute == DType::Bool {
        f(x, y)
    } else {
        wrap_int(i(x as i128, y as i128), c.compute) as f64
    }
}

pub fn ops() -> Vec<OpInfo> {
    use DTypeRule::*;
    let any = Domain::any();
    let special = Domain::any().specials();
    let divisor = Domain::any().nonzero(0.25);
    let quarter = Domain::any().grid(0.25);
    let cmp = Domain::range(-3.0, 3.0)
        .grid(0.5)
        .ints(IntDomain::Range(-3, 3))
        .specials();
    let logical = Domain::range(-2.0, 2.0)
        .grid(1.0)
        .ints(IntDomain::Range(-2, 2))
        .specials();
    let base = Domain::range(0.1, 4.0).ints(IntDomain::Range(-5, 5));
    let exponent = Domain::range(-3.0, 3.0).ints(IntDomain::Range(0, 20));
    let shifted = Domain::any().ints(IntDomain::Range(-1000, 1000));
    let amount = Domain::any().ints(IntDomain::Shift);
    let no_bool: Vec<DType> = NUMERIC.to_vec();
    let mut v = vec![];
    v.extend(forms2!(
        binary("add", "add.scalar", ALL, Same, any, any, |x, y, c| arith(
            x,
            y,
            c,
            |a, b| a + b,
            |a, b| a + b
        )),
        add,
        add_,
        add_out
    ));
    v.extend(forms2!(
        binary("sub", "sub.scalar", &no_bool, Same, any, any, |x, y, c| {
            arith(x, y, c, |a, b| a - b, |a, b| a - b)
        }),
        sub,
        sub_,
        sub_out
    ));
    v.extend(forms2!(
        binary("mul", "mul.scalar", ALL, Same, any, any, |x, y, c| arith(
            x,
            y,
            c,
            |a, b| a * b,
            |a, b| a * b
        )),
        mul,
        mul_,
        mul_out
    ));
    v.extend(forms2!(
        binary(
            "div",
            "div.scalar",
            ALL,
            IntToFloat,
            any,
            divisor,
            |x, y, _| x / y
        ),
        div,
        div_,
        div_out
    ));
    v.extend(forms2!(
        binary(
            "floor_divide",
            "floor_divide.scalar",
            &no_bool,
            Same,
            quarter,
            quarter.nonzero(0.25),
            |x, y, _| (x / y).floor()
        ),
        floor_divide,
        floor_divide_,
        floor_divide_out
    ));
    v.extend(forms2!(
        binary(
            "remainder",
            "remainder.scalar",
            &no_bool,
            Same,
            quarter,
            quarter.nonzero(0.25),
            remainder
        ),
        remainder,
        remainder_,
        remainder_out
    ));
    v.extend(forms2!(
        binary(
            "pow",
            "pow.scalar",
            &no_bool,
            Same,
            base,
            exponent,
            |x, y, c| if c.compute.is_float() {
                x.powf(y)
            } else {
                ipow(x, y, c.compute)
            }
        ),
        pow,
        pow_,
        pow_out
    ));
    v.extend(forms2!(
        binary(
            "maximum",
            "maximum.scalar",
            ALL,
            Same,
            special,
            special,
            |x, y, _| max_nan(x, y)
        ),
        maximum,
        maximum_,
        maximum_out
    ));
    v.extend(forms2!(
        binary(
            "minimum",
            "minimum.scalar",
            ALL,
            Same,
            special,
            special,
            |x, y, _| min_nan(x, y)
        ),
        minimum,
        minimum_,
        minimum_out
    ));
    v.extend(forms2!(
        binary(
            "atan2",
            "atan2.scalar",
            ALL,
            IntToFloat,
            any,
            any,
            |x, y, _| x.atan2(y)
        ),
        atan2,
        atan2_,
        atan2_out
    ));
    v.extend(forms2!(
        binary(
            "eq",
            "eq.scalar",
            ALL,
            ToBool,
            cmp,
            cmp,
            |x, y, _| b(x == y)
        ),
        eq,
        eq_,
        eq_out
    ));
    v.extend(forms2!(
        binary(
            "ne",
            "ne.scalar",
            ALL,
            ToBool,
            cmp,
            cmp,
            |x, y, _| b(x != y)
        ),
        ne,
        ne_,
        ne_out
    ));
    v.extend(forms2!(
        binary("lt", "lt.scalar", ALL, ToBool, cmp, cmp, |x, y, _| b(x < y)),
        lt,
        lt_,
        lt_out
    ));
    v.extend(forms2!(
        binary(
            "le",
            "le.scalar",
            ALL,
            ToBool,
            cmp,
            cmp,
            |x, y, _| b(x <= y)
        ),
        le,
        le_,
        le_out
    ));
    v.extend(forms2!(
        binary("gt", "gt.scalar", ALL, ToBool, cmp, cmp, |x, y, _| b(x > y)),
        gt,
        gt_,
        gt_out
    ));
    v.extend(forms2!(
        binary(
            "ge",
            "ge.scalar",
            ALL,
            ToBool,
            cmp,
            cmp,
            |x, y, _| b(x >= y)
        ),
        ge,
        ge_,
        ge_out
    ));
    v.extend(forms2!(
        binary(
            "logical_and",
            "logical_and.scalar",
            ALL,
            ToBool,
            logical,
            logical,
            |x, y, _| b(nz(x) && nz(y))
        ),
        logical_and,
        logical_and_,
        logical_and_out
    ));
    v.extend(forms2!(
        binary(
            "logical_or",
            "logical_or.scalar",
            ALL,
            ToBool,
            logical,
            logical,
            |x, y, _| b(nz(x) || nz(y))
        ),
        logical_or,
        logical_or_,
        logical_or_out
    ));
    v.extend(forms2!(
        binary(
            "logical_xor",
            "logical_xor.scalar",
            ALL,
            ToBool,
            logical,
            logical,
            |x, y, _| b(nz(x) != nz(y))
        ),
        logical_xor,
        logical_xor_,
        logical_xor_out
    ));
    v.extend(forms2!(
        binary(
            "bitwise_and",
            "bitwise_and.scalar",
            INTS_AND_BOOL,
            Same,
            any,
            any,
            |x, y, _| bitwise(x, y, |a, b| a & b)
        ),
        bitwise_and,
        bitwise_and_,
        bitwise_and_out
    ));
    v.extend(forms2!(
        binary(
            "bitwise_or",
            "bitwise_or.scalar",
            INTS_AND_BOOL,
            Same,
            any,
            any,
            |x, y, _| bitwise(x, y, |a, b| a | b)
        ),
        bitwise_or,
        bitwise_or_,
        bitwise_or_out
    ));
    v.extend(forms2!(
        binary(
            "bitwise_xor",
            "bitwise_xor.scalar",
            INTS_AND_BOOL,
            Same,
            any,
            any,
            |x, y, _| bitwise(x, y, |a, b| a ^ b)
        ),
        bitwise_xor,
        bitwise_xor_,
        bitwise_xor_out
    ));
    v.extend(forms2!(
        binary(
            "bitwise_left_shift",
            "bitwise_left_shift.scalar",
            INTS,
            Same,
            shifted,
            amount,
            |x, y, _| x * 2f64.powi(y as i32)
        ),
        bitwise_left_shift,
        bitwise_left_shift_,
        bitwise_left_shift_out
    ));
    v.extend(forms2!(
        binary(
            "bitwise_right_shift",
            "bitwise_right_shift.scalar",
            INTS,
            Same,
            shifted,
            amount,
            |x, y, _| (x / 2f64.powi(y as i32)).floor()
        ),
        bitwise_right_shift,
        bitwise_right_shift_,
        bitwise_right_shift_out
    ));
    v.extend(forms2!(
        binary(
            "clamp_min",
            "clamp_min.scalar",
            ALL,
            Same,
            special,
            special,
            |x, y, _| max_nan(x, y)
        ),
        clamp_min,
        clamp_min_,
        clamp_min_out
    ));
    v.extend(forms2!(
        binary(
            "clamp_max",
            "clamp_max.scalar",
            ALL,
            Same,
            special,
            special,
            |x, y, _| min_nan(x, y)
        ),
        clamp_max,
        clamp_max_,
        clamp_max_out
    ));
    v
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Twice: `add sub mul div pow` with a tensor rhs; Once: the other float ops and the scalar-rhs forms; No: comparisons, logical and bitwise ops.
pub fn grad(name: &str) -> super::Grad {
    match name {
        "add" | "sub" | "mul" | "div" | "pow" => super::Grad::Twice,
        "add.scalar"
        | "sub.scalar"
        | "mul.scalar"
        | "div.scalar"
        | "pow.scalar"
        | "floor_divide"
        | "floor_divide.scalar"
        | "remainder"
        | "remainder.scalar"
        | "maximum"
        | "maximum.scalar"
        | "minimum"
        | "minimum.scalar"
        | "atan2"
        | "atan2.scalar"
        | "clamp_min"
        | "clamp_min.scalar"
        | "clamp_max"
        | "clamp_max.scalar" => super::Grad::Once,
        _ => super::Grad::No,
    }
}
