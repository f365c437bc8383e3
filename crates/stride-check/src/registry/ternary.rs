//! Ternary elementwise ops: `where`, `lerp`, `addcmul`, `addcdiv`, `clamp` (tensor operands;
//! `.scalar` variants take host scalars where the op allows them).

use super::dtypes::{ALL, FLOATS, NUMERIC};
use super::{elementwise_sampler, no_params, ArgSpec, DTypeRule, Domain, Family, OpInfo, Params};
use crate::host::wrap_int;
use crate::reference::RefCtx;
use crate::rng::Rng;
use stride_core::{DType, Scalar};

fn ternary(
    name: &'static str,
    args: Vec<ArgSpec>,
    dtypes: &[DType],
    params: fn(DType, &mut Rng) -> Params,
    f: fn(&[f64], &RefCtx) -> f64,
) -> OpInfo {
    OpInfo::new(name, Family::Ternary)
        .args(args.clone())
        .dtypes(dtypes)
        .rule(DTypeRule::Same)
        .promotion(true)
        .sampler(elementwise_sampler(args, params))
        .elementwise(f)
}

/// addcmul's `value`: a float for float tensors; for integer tensors an integer — or, one
/// time in four, a float, which must be refused.
fn addcmul_value(d: DType, rng: &mut Rng) -> Params {
    let v = if d.is_float() {
        Scalar::Float([0.5, -1.5, 2.0][rng.below(3)])
    } else if rng.below(4) == 0 {
        Scalar::Float(0.5)
    } else {
        Scalar::Int([2, -3, 1][rng.below(3)])
    };
    Params {
        scalars: vec![v],
        ..Params::default()
    }
}
fn addcdiv_value(_: DType, rng: &mut Rng) -> Params {
    Params {
        scalars: vec![Scalar::Float([0.5, -1.5, 2.0][rng.below(3)])],
        ..Params::default()
    }
}
fn value(c: &RefCtx) -> f64 {
    c.params.scalars[0].to_f64()
}
fn clamp(x: &[f64], _: &RefCtx) -> f64 {
    if x.iter().any(|v| v.is_nan()) {
        f64::NAN
    } else {
        x[0].max(x[1]).min(x[2])
    }
}

pub fn ops() -> Vec<OpInfo> {
    let any = Domain::any();
    let special = Domain::any().specials();
    let cond = Domain::any();
    let weight = Domain::range(-0.5, 1.5);
    let divisor = Domain::any().nonzero(0.25);
    let where_args = |b: ArgSpec| {
        vec![
            ArgSpec::fixed("condition", DType::Bool, cond),
            ArgSpec::tensor("input", special),
            b,
        ]
    };
    // integers: exact in i128, wrapped to the compute dtype (wrapped u32 products reach 2^64)
    let addcmul_ref = |x: &[f64], c: &RefCtx| {
        if c.compute.is_float() {
            x[0] + value(c) * x[1] * x[2]
        } else {
            let v = c.params.scalars[0].to_i64() as i128;
            wrap_int(x[0] as i128 + v * (x[1] as i128 * x[2] as i128), c.compute) as f64
        }
    };
    let addcmul_check = move |c: &RefCtx, args: &[crate::reference::RefArg]| {
        if !c.compute.is_float() && matches!(c.params.scalars[0], Scalar::Float(_)) {
            return Err("a float value with integer tensors must be refused".to_string());
        }
        crate::reference::elementwise(c, args, |x| addcmul_ref(x, c))
    };
    vec![
        ternary(
            "where",
            where_args(ArgSpec::tensor("other", special)),
            ALL,
            no_params,
            |x, _| {
                if x[0] != 0.0 {
                    x[1]
                } else {
                    x[2]
                }
            },
        )
        .functional(|a, _| a[0].t().where_cond(a[1].o(), a[2].o()))
        .out(|a, _, o| a[0].t().where_cond_out(a[1].o(), a[2].o(), o)),
        ternary(
            "where.scalar",
            where_args(ArgSpec::scalar("other", any)),
            ALL,
            no_params,
            |x, _| {
                if x[0] != 0.0 {
                    x[1]
                } else {
                    x[2]
                }
            },
        )
        .functional(|a, _| a[0].t().where_cond(a[1].o(), a[2].o()))
        .out(|a, _, o| a[0].t().where_cond_out(a[1].o(), a[2].o(), o)),
        ternary(
            "lerp",
            vec![
                ArgSpec::tensor("self", any),
                ArgSpec::tensor("end", any),
                ArgSpec::tensor("weight", weight),
            ],
            FLOATS,
            no_params,
            |x, _| x[0] + x[2] * (x[1] - x[0]),
        )
        .functional(|a, _| a[0].t().lerp(a[1].o(), a[2].o()))
        .inplace(|a, _| a[0].t().lerp_(a[1].o(), a[2].o()))
        .out(|a, _, o| a[0].t().lerp_out(a[1].o(), a[2].o(), o)),
        ternary(
            "lerp.scalar",
            vec![
                ArgSpec::tensor("self", any),
                ArgSpec::tensor("end", any),
                ArgSpec::scalar("weight", weight),
            ],
            FLOATS,
            no_params,
            |x, _| x[0] + x[2] * (x[1] - x[0]),
        )
        .functional(|a, _| a[0].t().lerp(a[1].o(), a[2].o()))
        .inplace(|a, _| a[0].t().lerp_(a[1].o(), a[2].o()))
        .out(|a, _, o| a[0].t().lerp_out(a[1].o(), a[2].o(), o)),
        ternary(
            "addcmul",
            vec![
                ArgSpec::tensor("self", any),
                ArgSpec::tensor("tensor1", any),
                ArgSpec::tensor("tensor2", any),
            ],
            NUMERIC,
            addcmul_value,
            |_, _| 0.0,
        )
        .reference(addcmul_check)
        .functional(|a, p| a[0].t().addcmul(a[1].o(), a[2].o(), p.scalars[0]))
        .inplace(|a, p| a[0].t().addcmul_(a[1].o(), a[2].o(), p.scalars[0]))
        .out(|a, p, o| a[0].t().addcmul_out(a[1].o(), a[2].o(), p.scalars[0], o)),
        ternary(
            "addcdiv",
            vec![
                ArgSpec::tensor("self", any),
                ArgSpec::tensor("tensor1", any),
                ArgSpec::tensor("tensor2", divisor),
            ],
            FLOATS,
            addcdiv_value,
            |x, c| x[0] + value(c) * x[1] / x[2],
        )
        .functional(|a, p| a[0].t().addcdiv(a[1].o(), a[2].o(), p.scalars[0]))
        .inplace(|a, p| a[0].t().addcdiv_(a[1].o(), a[2].o(), p.scalars[0]))
        .out(|a, p, o| a[0].t().addcdiv_out(a[1].o(), a[2].o(), p.scalars[0], o)),
        ternary(
            "clamp",
            vec![
                ArgSpec::tensor("self", special),
                ArgSpec::tensor("min", special),
                ArgSpec::tensor("max", special),
            ],
            NUMERIC,
            no_params,
            clamp,
        )
        .functional(|a, _| a[0].t().clamp(a[1].o(), a[2].o()))
        .inplace(|a, _| a[0].t().clamp_(a[1].o(), a[2].o()))
        .out(|a, _, o| a[0].t().clamp_out(a[1].o(), a[2].o(), o)),
        ternary(
            "clamp.scalar",
            vec![
                ArgSpec::tensor("self", special),
                ArgSpec::scalar("min", any),
                ArgSpec::scalar("max", any),
            ],
            NUMERIC,
            no_params,
            clamp,
        )
        .functional(|a, _| a[0].t().clamp(a[1].o(), a[2].o()))
        .inplace(|a, _| a[0].t().clamp_(a[1].o(), a[2].o()))
        .out(|a, _, o| a[0].t().clamp_out(a[1].o(), a[2].o(), o)),
    ]
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Twice: `where`; Once: the others.
pub fn grad(name: &str) -> super::Grad {
    match name {
        "where" => super::Grad::Twice,
        "where.scalar" | "lerp" | "lerp.scalar" | "addcmul" | "addcdiv" | "clamp"
        | "clamp.scalar" => super::Grad::Once,
        _ => super::Grad::No,
    }
}
