//! Copies: `to_dtype` between every pair of dtypes, `contiguous`, `clone` (keeps the layout
//! like PyTorch's `preserve_format`) and `clone.contiguous`.

use super::dtypes::ALL;
use super::{
    ArgSpec, DTypeRule, Domain, Family, IntDomain, OpInfo, Params, Sample, SampleArg, SampleCtx,
};
use crate::host::{short, store};
use crate::reference::{contiguous_strides, is_contiguous, numel, preserve_strides, RefOut};
use stride_core::{DType, MemoryFormat};

/// Values of `src` that convert to `dst` without undefined behaviour: floats going to an
/// integer dtype stay inside its range (and non-negative for unsigned ones).
fn cast_domain(src: DType, dst: DType) -> Domain {
    if src.is_float() && (dst.is_int()) {
        match dst {
            DType::U8 => Domain::range(0.0, 250.0),
            DType::I8 => Domain::range(-120.0, 120.0),
            DType::U32 => Domain::range(0.0, 1000.0),
            _ => Domain::range(-1000.0, 1000.0),
        }
    } else if src.is_float() && dst.is_float() {
        Domain::range(-70000.0, 70000.0).specials()
    } else if src.is_float() {
        Domain::any().specials()
    } else {
        Domain::any().ints(IntDomain::Full)
    }
}

fn to_dtype_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let n = numel(&ctx.shape);
    ALL.iter()
        .map(|&dst| {
            let values = cast_domain(ctx.dtype, dst).values(ctx.dtype, n, &mut ctx.rng, false);
            Sample::new(
                vec![SampleArg::Tensor {
                    dtype: ctx.dtype,
                    shape: ctx.shape.clone(),
                    values,
                }],
                Params {
                    dtype: Some(dst),
                    ..Params::default()
                },
            )
            .label(format!("{}->{}", short(ctx.dtype), short(dst)))
        })
        .collect()
}

fn one_input(ctx: &mut SampleCtx, domain: Domain) -> Vec<Sample> {
    let values = domain.values(ctx.dtype, numel(&ctx.shape), &mut ctx.rng, false);
    vec![Sample::new(
        vec![SampleArg::Tensor {
            dtype: ctx.dtype,
            shape: ctx.shape.clone(),
            values,
        }],
        Params::default(),
    )]
}

fn copy_op(name: &'static str) -> OpInfo {
    OpInfo::new(name, Family::Copy)
        .args(vec![ArgSpec::tensor("self", Domain::any().specials())])
        .dtypes(ALL)
        .rule(DTypeRule::Same)
        .sampler(|ctx| one_input(ctx, Domain::any().specials()))
}

pub fn ops() -> Vec<OpInfo> {
    vec![
        OpInfo::new("to_dtype", Family::Copy)
            .args(vec![ArgSpec::tensor("self", Domain::any())])
            .dtypes(ALL)
            .rule(DTypeRule::Param)
            .sampler(to_dtype_sampler)
            .reference(|c, a| {
                let t = a[0].t();
                let dst = c.params.dtype.expect("to_dtype sample has a target dtype");
                let values = t.values.iter().map(|&v| store(v, dst)).collect();
                // a different dtype is a copy in the source's dim order (preserve_format);
                // the same dtype returns the tensor itself
                let out = RefOut::new(t.shape.clone(), values).view(dst == t.dtype);
                Ok(if dst == t.dtype {
                    out
                } else {
                    out.with_strides(preserve_strides(&t.shape, &t.strides))
                })
            })
            .functional(|a, p| a[0].t().to_dtype(p.dtype.expect("target dtype"))),
        copy_op("contiguous")
            .reference(|_, a| {
                let t = a[0].t();
                Ok(RefOut::new(t.shape.clone(), t.values.clone())
                    .view(is_contiguous(&t.shape, &t.strides))
                    .with_strides(contiguous_strides(&t.shape)))
            })
            .functional(|a, _| a[0].t().contiguous()),
        copy_op("clone")
            .reference(|_, a| {
                let t = a[0].t();
                Ok(RefOut::new(t.shape.clone(), t.values.clone())
                    .with_strides(preserve_strides(&t.shape, &t.strides)))
            })
            .functional(|a, _| a[0].t().clone_tensor()),
        copy_op("clone.contiguous")
            .reference(|_, a| {
                let t = a[0].t();
                Ok(RefOut::new(t.shape.clone(), t.values.clone())
                    .with_strides(contiguous_strides(&t.shape)))
            })
            .functional(|a, _| a[0].t().clone_with(MemoryFormat::Contiguous)),
    ]
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). Once: every copy (a cast to another dtype gives no f64 result, so only `to_dtype` to f64 is gradchecked; the real casts are in stride-core's `tests/gradcheck_tolerances.rs`).
pub fn grad(name: &str) -> super::Grad {
    match name {
        "to_dtype" | "contiguous" | "clone" | "clone.contiguous" => super::Grad::Once,
        _ => super::Grad::No,
    }
}
