//! Creation: `zeros`, `ones`, `full`, `empty`, `arange`, `linspace`, `eye`, and the `*_like`
//! ops in both memory formats (`name` = preserve, `name.contiguous`).

use super::dtypes::ALL;
use super::{ArgSpec, DTypeRule, Domain, Family, OpInfo, Params, Sample, SampleArg, SampleCtx};
use crate::host::store;
use crate::reference::{contiguous_strides, numel, preserve_strides, RefOut};
use stride_core::{DType, MemoryFormat, Scalar, Tensor};

fn shape_params(ctx: &SampleCtx) -> Params {
    Params {
        sizes: ctx.shape.iter().map(|&n| n as i64).collect(),
        dtype: Some(ctx.dtype),
        ..Params::default()
    }
}

/// The fill values tried for a dtype: one of its own kind, and a float truncated into an
/// integer dtype.
fn fill_values(d: DType) -> Vec<Scalar> {
    match d {
        DType::Bool => vec![Scalar::Bool(true), Scalar::Int(0)],
        d if d.is_float() => vec![Scalar::Float(2.5), Scalar::Int(-3)],
        DType::U8 | DType::U32 => vec![Scalar::Int(7), Scalar::Float(2.7)],
        _ => vec![Scalar::Int(-7), Scalar::Float(-2.7)],
    }
}

fn constant(shape: Vec<usize>, v: f64) -> RefOut {
    let n = numel(&shape);
    RefOut::new(shape.clone(), vec![v; n]).with_strides(contiguous_strides(&shape))
}

fn fill_op(name: &'static str, value: fn(&Params) -> f64) -> OpInfo {
    OpInfo::new(name, Family::Creation)
        .dtypes(ALL)
        .rule(DTypeRule::Param)
        .sampler(|ctx| {
            let mut out = vec![];
            for v in fill_values(ctx.dtype) {
                let mut p = shape_params(ctx);
                p.scalars = vec![v];
                out.push(Sample::new(vec![], p));
            }
            out
        })
        .reference(move |c, _| {
            Ok(constant(
                c.params.usizes(),
                store(value(c.params), c.result),
            ))
        })
}

/// `*_like` entries: the input in every layout; the result has its shape and dtype, fresh
/// storage, and strides per the memory format.
fn like_op(name: &'static str, format: MemoryFormat, value: fn(&Params) -> f64) -> OpInfo {
    OpInfo::new(name, Family::Creation)
        .args(vec![ArgSpec::tensor("self", Domain::any())])
        .dtypes(ALL)
        .rule(DTypeRule::Same)
        .sampler(move |ctx| {
            let n = numel(&ctx.shape);
            fill_values(ctx.dtype)
                .into_iter()
                .take(1)
                .map(|v| {
                    let values = Domain::any().values(ctx.dtype, n, &mut ctx.rng, false);
                    Sample::new(
                        vec![SampleArg::Tensor {
                            dtype: ctx.dtype,
                            shape: ctx.shape.clone(),
                            values,
                        }],
                        Params {
                            scalars: vec![v],
                            format: Some(format),
                            ..Params::default()
                        },
                    )
                })
                .collect()
        })
        .reference(move |c, a| {
            let t = a[0].t();
            let strides = match c.params.format {
                Some(MemoryFormat::Contiguous) => contiguous_strides(&t.shape),
                _ => preserve_strides(&t.shape, &t.strides),
            };
            let v = store(value(c.params), c.result);
            Ok(RefOut::new(t.shape.clone(), vec![v; t.values.len()]).with_strides(strides))
        })
}

fn fill_scalar(p: &Params) -> f64 {
    p.scalars[0].to_f64()
}

fn arange_dtype(s: &Sample) -> DType {
    if s.params
        .scalars
        .iter()
        .all(|x| !matches!(x, Scalar::Float(_)))
    {
        DType::I64
    } else {
        DType::F32
    }
}

fn arange_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let n = numel(&ctx.shape) as i64;
    let bounds: Vec<[Scalar; 3]> = match ctx.dtype {
        DType::I64 => vec![
            [Scalar::Int(-3), Scalar::Int(-3 + n), Scalar::Int(1)],
            [Scalar::Int(5), Scalar::Int(5 + 3 * n - 1), Scalar::Int(3)],
            [Scalar::Int(7), Scalar::Int(7 - 2 * n), Scalar::Int(-2)],
            [Scalar::Int(0), Scalar::Int(5), Scalar::Int(0)], // step 0: refused
            [Scalar::Int(5), Scalar::Int(0), Scalar::Int(1)], // wrong direction: refused
        ],
        _ => vec![
            [
                Scalar::Float(0.5),
                Scalar::Float(0.5 + 0.25 * n as f64 - 0.125),
                Scalar::Float(0.25),
            ],
            [
                Scalar::Float(10.0),
                Scalar::Float(10.0 - 1.5 * n as f64 + 0.75),
                Scalar::Float(-1.5),
            ],
            [
                Scalar::Int(2),
                Scalar::Float(2.0 + 0.75 * n as f64 - 0.5),
                Scalar::Float(0.75),
            ],
        ],
    };
    let take = if ctx.variants { bounds.len() } else { 1 };
    bounds
        .into_iter()
        .take(take)
        .map(|b| {
            Sample::new(
                vec![],
                Params {
                    scalars: b.to_vec(),
                    ..Params::default()
                },
            )
        })
        .collect()
}

fn arange_ref(p: &Params) -> Result<RefOut, String> {
    let [s, e, st] = [
        p.scalars[0].to_f64(),
        p.scalars[1].to_f64(),
        p.scalars[2].to_f64(),
    ];
    if st == 0.0 || (e - s) * st < 0.0 {
        return Err(format!("arange({s}, {e}, {st}) must be refused"));
    }
    let n = ((e - s) / st).ceil().max(0.0) as usize;
    Ok(RefOut::new(vec![n], (0..n).map(|i| s + i as f64 * st).collect()).with_strides(vec![1]))
}

fn linspace_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let steps = numel(&ctx.shape) as i64;
    let (s, e) = match ctx.dtype {
        d if d.is_float() => (-2.5, 7.25),
        DType::Bool => (0.0, 1.0),
        // integer dtypes: an integral step (2, 1 or 0) that keeps every value exact and in range
        d => {
            let start = if d.is_signed() { -3.0 } else { 1.0 };
            let hi = crate::host::int_range(d).1.min(1 << 40) as f64;
            let gaps = (steps - 1).max(0) as f64;
            let k = [2.0, 1.0, 0.0]
                .into_iter()
                .find(|k| start + k * gaps <= hi)
                .unwrap_or(0.0);
            (start, start + k * gaps)
        }
    };
    vec![Sample::new(
        vec![],
        Params {
            ints: vec![steps],
            scalars: vec![Scalar::Float(s), Scalar::Float(e)],
            dtype: Some(ctx.dtype),
            ..Params::default()
        },
    )]
}

fn eye_dims(p: &Params) -> (usize, usize) {
    let s = p.usizes();
    let n = s.first().copied().unwrap_or(1);
    (n, s.get(1).copied().unwrap_or(n))
}

pub fn ops() -> Vec<OpInfo> {
    use MemoryFormat::*;
    vec![
        fill_op("zeros", |_| 0.0)
            .functional(|_, p| Tensor::zeros(p.usizes(), p.dtype.unwrap(), &p.dev())),
        fill_op("ones", |_| 1.0)
            .functional(|_, p| Tensor::ones(p.usizes(), p.dtype.unwrap(), &p.dev())),
        fill_op("empty", |_| 0.0)
            .functional(|_, p| Tensor::empty(p.usizes(), p.dtype.unwrap(), &p.dev())),
        fill_op("full", fill_scalar)
            .functional(|_, p| Tensor::full(p.usizes(), p.scalars[0], p.dtype.unwrap(), &p.dev())),
        OpInfo::new("arange", Family::Creation)
            .dtypes(&[DType::I64, DType::F32])
            .rule(DTypeRule::Custom(arange_dtype))
            .sampler(arange_sampler)
            .reference(|c, _| arange_ref(c.params))
            .functional(|_, p| {
                Tensor::arange_step(p.scalars[0], p.scalars[1], p.scalars[2], &p.dev())
            }),
        OpInfo::new("linspace", Family::Creation)
            .dtypes(ALL)
            .rule(DTypeRule::Param)
            .sampler(linspace_sampler)
            .reference(|c, _| {
                let steps = c.params.ints[0] as usize;
                let (s, e) = (c.params.scalars[0].to_f64(), c.params.scalars[1].to_f64());
                let v = (0..steps)
                    .map(|i| {
                        if steps == 1 {
                            s
                        } else {
                            s + (e - s) * i as f64 / (steps - 1) as f64
                        }
                    })
                    .collect();
                Ok(RefOut::new(vec![steps], v).with_strides(vec![1]))
            })
            .functional(|_, p| {
                Tensor::linspace(
                    p.scalars[0].to_f64(),
                    p.scalars[1].to_f64(),
                    p.ints[0] as usize,
                    p.dtype.unwrap(),
                    &p.dev(),
                )
            }),
        OpInfo::new("eye", Family::Creation)
            .dtypes(ALL)
            .rule(DTypeRule::Param)
            .sampler(|ctx| vec![Sample::new(vec![], shape_params(ctx))])
            .reference(|c, _| {
                let (n, m) = eye_dims(c.params);
                let v = (0..n * m)
                    .map(|k| ((k / m.max(1)) == (k % m.max(1))) as u8 as f64)
                    .collect();
                Ok(RefOut::new(vec![n, m], v).with_strides(contiguous_strides(&[n, m])))
            })
            .functional(|_, p| {
                let (n, m) = eye_dims(p);
                Tensor::eye(n, m, p.dtype.unwrap(), &p.dev())
            }),
        like_op("zeros_like", Preserve, |_| 0.0)
            .functional(|a, p| a[0].t().zeros_like(p.format.unwrap())),
        like_op("zeros_like.contiguous", Contiguous, |_| 0.0)
            .functional(|a, p| a[0].t().zeros_like(p.format.unwrap())),
        like_op("ones_like", Preserve, |_| 1.0)
            .functional(|a, p| a[0].t().ones_like(p.format.unwrap())),
        like_op("ones_like.contiguous", Contiguous, |_| 1.0)
            .functional(|a, p| a[0].t().ones_like(p.format.unwrap())),
        like_op("empty_like", Preserve, |_| 0.0)
            .functional(|a, p| a[0].t().empty_like(p.format.unwrap())),
        like_op("empty_like.contiguous", Contiguous, |_| 0.0)
            .functional(|a, p| a[0].t().empty_like(p.format.unwrap())),
        like_op("full_like", Preserve, fill_scalar)
            .functional(|a, p| a[0].t().full_like(p.scalars[0], p.format.unwrap())),
        like_op("full_like.contiguous", Contiguous, fill_scalar)
            .functional(|a, p| a[0].t().full_like(p.scalars[0], p.format.unwrap())),
        OpInfo::new("zeros_like_dtype", Family::Creation)
            .args(vec![ArgSpec::tensor("self", Domain::any())])
            .dtypes(ALL)
            .rule(DTypeRule::Param)
            .sampler(|ctx| {
                let values =
                    Domain::any().values(ctx.dtype, numel(&ctx.shape), &mut ctx.rng, false);
                ALL.iter()
                    .map(|&d| {
                        Sample::new(
                            vec![SampleArg::Tensor {
                                dtype: ctx.dtype,
                                shape: ctx.shape.clone(),
                                values: values.clone(),
                            }],
                            Params {
                                dtype: Some(d),
                                format: Some(Preserve),
                                ..Params::default()
                            },
                        )
                        .label(format!(
                            "{}->{}",
                            crate::host::short(ctx.dtype),
                            crate::host::short(d)
                        ))
                    })
                    .collect()
            })
            .reference(|_, a| {
                let t = a[0].t();
                Ok(RefOut::new(t.shape.clone(), vec![0.0; t.values.len()])
                    .with_strides(preserve_strides(&t.shape, &t.strides)))
            })
            .functional(|a, p| {
                a[0].t()
                    .zeros_like_dtype(p.dtype.unwrap(), p.format.unwrap())
            }),
    ]
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). No: creation ops have no tensor operand to differentiate.
pub fn grad(name: &str) -> super::Grad {
    let _ = name;
    super::Grad::No
}
