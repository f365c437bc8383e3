//! Random ops: `rand randn randint randperm bernoulli_scalar dropout_mask dropout_mask_bool`
//! (creation), `rand_like randn_like bernoulli multinomial` (an input in every layout), `uniform_
//! normal_ bernoulli_` (written through `self` in every layout).
//!
//! No exact reference exists for random values, so these entries check what is promised
//! instead (DESIGN.md invariant 6):
//! - **determinism and layout independence**: the reference is the *same op* with a fresh
//!   generator of the same seed, writing into a fresh contiguous tensor. Every call in the
//!   matrix seeds its own generator, so the value at each logical index must be identical
//!   whatever the destination's layout (in-place forms), the input's layout (`*_like`,
//!   `bernoulli`) or the shape's sweep size;
//! - **properties**: `rand`/`uniform_` in `[low, high)`, `randn`/`normal_` finite,
//!   `randint` in `[low, high)`, `randperm` a permutation, `bernoulli*`/dropout masks 0/1
//!   (dropout: 0 or `1/(1−p)`). A violated property makes the reference panic, which the
//!   runner reports as a failure with the property in the message.
//!
//! (This is the one place a reference calls a stride op: what is checked is that stride
//! agrees with itself across layouts, and the properties above.)

use super::dtypes::{ALL, FLOATS, INTS};
use super::{ArgSpec, DTypeRule, Domain, Family, OpInfo, Params, Sample, SampleCtx};
use crate::host::tensor_from_f64;
use crate::reference::{numel, RefArg, RefOut, RefTensor};
use stride_core::{DType, Device, Generator, Tensor};

fn gen(p: &Params) -> Generator {
    Generator::new(p.ints.first().copied().unwrap_or(0) as u64)
}

fn shape_of(p: &Params) -> Vec<usize> {
    p.usizes()
}

/// Reads a stride result back, or says the op must fail (with its error).
fn read(r: stride_core::Result<Tensor>) -> Result<RefOut, String> {
    let t = r.map_err(|e| format!("the op refuses these arguments: {e}"))?;
    let v = t.to_f64_vec().map_err(|e| e.to_string())?;
    Ok(RefOut::new(t.shape().to_vec(), v))
}

/// A fresh contiguous host tensor holding a reference operand's logical values.
fn fresh(t: &RefTensor) -> Result<Tensor, String> {
    let shape: Vec<i64> = t.shape.iter().map(|&n| n as i64).collect();
    tensor_from_f64(&t.values, t.dtype, &Device::Cpu)
        .and_then(|x| x.reshape(&shape))
        .map_err(|e| e.to_string())
}

/// Panics (a reported failure) when a value breaks the op's promise.
fn assert_all(name: &str, r: &RefOut, ok: impl Fn(f64) -> bool, what: &str) {
    if let Some(v) = r.values.iter().find(|&&v| !ok(v)) {
        panic!("{name}: value {v} is not {what}");
    }
}

/// Creation samples: the base shape, a seed, and per-op scalars.
fn creation_sampler(
    dtypes: &'static [DType],
    scalars: &'static [f64],
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    let _ = dtypes;
    move |ctx: &mut SampleCtx| {
        let seed = ctx.rng.below(1 << 20) as i64;
        vec![Sample::new(
            vec![],
            Params {
                sizes: ctx.shape.iter().map(|&n| n as i64).collect(),
                ints: vec![seed],
                scalars: scalars
                    .iter()
                    .map(|&s| stride_core::Scalar::Float(s))
                    .collect(),
                dtype: Some(ctx.dtype),
                ..Params::default()
            },
        )]
    }
}

/// One tensor operand (values from `domain`) plus a seed and scalars.
fn input_sampler(
    domain: Domain,
    scalars: &'static [&'static [f64]],
) -> impl Fn(&mut SampleCtx) -> Vec<Sample> + Send + Sync + 'static {
    move |ctx: &mut SampleCtx| {
        let seed = ctx.rng.below(1 << 20) as i64;
        let v = domain.values(ctx.dtype, numel(&ctx.shape), &mut ctx.rng, ctx.tame);
        let x = Sample::tensor(ctx.dtype, ctx.shape.clone(), v);
        let sets: &[&[f64]] = if scalars.is_empty() { &[&[]] } else { scalars };
        sets.iter()
            .take(if ctx.variants { sets.len() } else { 1 })
            .map(|s| {
                Sample::new(
                    vec![x.clone()],
                    Params {
                        ints: vec![seed],
                        scalars: s.iter().map(|&v| stride_core::Scalar::Float(v)).collect(),
                        ..Params::default()
                    },
                )
            })
            .collect()
    }
}

fn dev(p: &Params) -> Device {
    p.dev()
}
fn dt(p: &Params) -> DType {
    p.dtype.unwrap_or(DType::F32)
}

fn multinomial_sampler(ctx: &mut SampleCtx) -> Vec<Sample> {
    let seed = ctx.rng.below(1 << 20) as i64;
    let s = &ctx.shape;
    let k = s.last().copied().unwrap_or(3).clamp(1, 64);
    let rows = if s.len() >= 2 {
        s[s.len() - 2].min(16)
    } else {
        2
    };
    let mut shapes = vec![vec![rows, k]];
    if ctx.variants {
        shapes.extend([vec![k], vec![2, 2, k], vec![rows, 0]]);
    }
    let mut out = vec![];
    for sh in shapes {
        // every row keeps at least half of its categories non-zero
        let w: Vec<f64> = (0..numel(&sh))
            .map(|i| {
                if i % 2 == 1 && ctx.rng.coin() {
                    0.0
                } else {
                    crate::host::store(ctx.rng.range_f64(0.1, 2.0), ctx.dtype)
                }
            })
            .collect();
        let kk = sh.last().copied().unwrap_or(0) as i64;
        let mut ns = vec![(kk.clamp(1, 3), 1), ((kk / 2).max(1), 0)];
        if ctx.variants {
            ns.push((kk + 1, 0)); // more than the non-zero categories: refused
        }
        for (n, repl) in ns {
            out.push(Sample::new(
                vec![Sample::tensor(ctx.dtype, sh.clone(), w.clone())],
                Params {
                    ints: vec![seed, n, repl],
                    ..Params::default()
                },
            ));
        }
    }
    out
}

fn sc(p: &Params, i: usize) -> f64 {
    p.scalars[i].to_f64()
}

fn in_unit(v: f64) -> bool {
    (0.0..1.0).contains(&v)
}
fn zero_one(v: f64) -> bool {
    v == 0.0 || v == 1.0
}

fn creation(name: &'static str, dtypes: &'static [DType], scalars: &'static [f64]) -> OpInfo {
    OpInfo::new(name, Family::Random)
        .dtypes(dtypes)
        .rule(DTypeRule::Param)
        .sampler(creation_sampler(dtypes, scalars))
}

pub fn ops() -> Vec<OpInfo> {
    const P: &[f64] = &[0.3];
    const RANGE: &[&[f64]] = &[&[-2.0, 3.0], &[0.0, 0.0], &[3.0, -2.0]];
    const NORMAL: &[&[f64]] = &[&[1.0, 2.0], &[0.0, 0.0], &[0.0, -1.0]];
    const PROB: &[&[f64]] = &[&[0.3], &[0.0], &[1.0], &[1.5]];
    let probs = Domain::range(0.0, 1.0);
    vec![
        creation("rand", FLOATS, &[])
            .reference(|c, _| {
                let p = c.params;
                let r = read(Tensor::rand(
                    shape_of(p),
                    dt(p),
                    &Device::Cpu,
                    Some(&gen(p)),
                ))?;
                assert_all("rand", &r, in_unit, "in [0, 1)");
                Ok(r)
            })
            .functional(move |_, p| Tensor::rand(shape_of(p), dt(p), &dev(p), Some(&gen(p)))),
        creation("randn", FLOATS, &[])
            .reference(|c, _| {
                let p = c.params;
                let r = read(Tensor::randn(
                    shape_of(p),
                    dt(p),
                    &Device::Cpu,
                    Some(&gen(p)),
                ))?;
                assert_all("randn", &r, f64::is_finite, "finite");
                Ok(r)
            })
            .functional(move |_, p| Tensor::randn(shape_of(p), dt(p), &dev(p), Some(&gen(p)))),
        creation("randint", INTS, &[])
            .reference(|c, _| {
                let p = c.params;
                let (lo, hi) = if dt(p) == DType::U8 {
                    (3, 200)
                } else {
                    (-5, 17)
                };
                let lo = if dt(p).is_signed() { lo } else { lo.max(0) };
                let r = read(Tensor::randint(
                    lo,
                    hi,
                    shape_of(p),
                    dt(p),
                    &Device::Cpu,
                    Some(&gen(p)),
                ))?;
                assert_all(
                    "randint",
                    &r,
                    |v| v >= lo as f64 && v < hi as f64,
                    "in [low, high)",
                );
                Ok(r)
            })
            .functional(move |_, p| {
                let (lo, hi) = if dt(p) == DType::U8 {
                    (3, 200)
                } else {
                    (-5, 17)
                };
                let lo = if dt(p).is_signed() { lo } else { lo.max(0) };
                Tensor::randint(lo, hi, shape_of(p), dt(p), &dev(p), Some(&gen(p)))
            }),
        creation(
            "randperm",
            &[DType::I64, DType::I32, DType::U32, DType::F32, DType::F64],
            &[],
        )
        .reference(|c, _| {
            let p = c.params;
            let n = numel(&shape_of(p));
            let r = read(Tensor::randperm(n, dt(p), &Device::Cpu, Some(&gen(p))))?;
            let mut seen = vec![false; n];
            for &v in &r.values {
                let i = v as usize;
                if v < 0.0 || i >= n || seen[i] {
                    panic!("randperm({n}): {v} repeats or is out of range: not a permutation");
                }
                seen[i] = true;
            }
            Ok(r)
        })
        .functional(move |_, p| {
            Tensor::randperm(numel(&shape_of(p)), dt(p), &dev(p), Some(&gen(p)))
        }),
        creation("bernoulli_scalar", FLOATS, P)
            .reference(|c, _| {
                let p = c.params;
                let r = read(Tensor::bernoulli_scalar(
                    shape_of(p),
                    sc(p, 0),
                    dt(p),
                    &Device::Cpu,
                    Some(&gen(p)),
                ))?;
                assert_all("bernoulli_scalar", &r, zero_one, "0 or 1");
                Ok(r)
            })
            .functional(move |_, p| {
                Tensor::bernoulli_scalar(shape_of(p), sc(p, 0), dt(p), &dev(p), Some(&gen(p)))
            }),
        creation("dropout_mask", FLOATS, P)
            .reference(|c, _| {
                let p = c.params;
                let r = read(Tensor::dropout_mask(
                    shape_of(p),
                    sc(p, 0),
                    dt(p),
                    &Device::Cpu,
                    Some(&gen(p)),
                ))?;
                let keep = crate::host::store(1.0 / (1.0 - sc(p, 0)), dt(p));
                assert_all(
                    "dropout_mask",
                    &r,
                    |v| v == 0.0 || v == keep,
                    "0 or 1/(1-p)",
                );
                Ok(r)
            })
            .functional(move |_, p| {
                Tensor::dropout_mask(shape_of(p), sc(p, 0), dt(p), &dev(p), Some(&gen(p)))
            }),
        creation("dropout_mask_bool", &[DType::Bool], P)
            .reference(|c, _| {
                let p = c.params;
                read(Tensor::dropout_mask_bool(
                    shape_of(p),
                    sc(p, 0),
                    &Device::Cpu,
                    Some(&gen(p)),
                ))
            })
            .functional(move |_, p| {
                Tensor::dropout_mask_bool(shape_of(p), sc(p, 0), &dev(p), Some(&gen(p)))
            }),
        OpInfo::new("rand_like", Family::Random)
            .args(vec![ArgSpec::tensor("self", Domain::any())])
            .dtypes(FLOATS)
            .sampler(input_sampler(Domain::any(), &[]))
            .reference(|c, a: &[RefArg]| {
                let t = a[0].t();
                let r = read(Tensor::rand(
                    t.shape.clone(),
                    t.dtype,
                    &Device::Cpu,
                    Some(&gen(c.params)),
                ))?;
                assert_all("rand_like", &r, in_unit, "in [0, 1)");
                Ok(r)
            })
            .functional(|a, p| a[0].t().rand_like(Some(&gen(p)))),
        OpInfo::new("randn_like", Family::Random)
            .args(vec![ArgSpec::tensor("self", Domain::any())])
            .dtypes(FLOATS)
            .sampler(input_sampler(Domain::any(), &[]))
            .reference(|c, a: &[RefArg]| {
                let t = a[0].t();
                read(Tensor::randn(
                    t.shape.clone(),
                    t.dtype,
                    &Device::Cpu,
                    Some(&gen(c.params)),
                ))
            })
            .functional(|a, p| a[0].t().randn_like(Some(&gen(p)))),
        OpInfo::new("bernoulli", Family::Random)
            .args(vec![ArgSpec::tensor("self", probs)])
            .dtypes(FLOATS)
            .sampler(input_sampler(probs, &[]))
            .reference(|c, a: &[RefArg]| {
                let r = read(fresh(a[0].t())?.bernoulli(Some(&gen(c.params))))?;
                assert_all("bernoulli", &r, zero_one, "0 or 1");
                Ok(r)
            })
            .functional(|a, p| a[0].t().bernoulli(Some(&gen(p)))),
        // multinomial: the base shape's last two sizes as [rows, k] (1-D with variants);
        // some zero weights; n samples with and without replacement (ints = [seed, n, repl])
        OpInfo::new("multinomial", Family::Random)
            .args(vec![ArgSpec::tensor("self", probs)])
            .dtypes(FLOATS)
            .rule(DTypeRule::Custom(|_| DType::I64))
            .sampler(multinomial_sampler)
            .reference(|c, a: &[RefArg]| {
                let p = c.params;
                let (n, repl) = (p.ints[1] as usize, p.ints[2] != 0);
                let t = a[0].t();
                let r = read(fresh(t)?.multinomial(n, repl, Some(&gen(p))))?;
                let k = t.shape.last().copied().unwrap_or(0);
                for (row, s) in r.values.chunks(n.max(1)).enumerate() {
                    let w = &t.values[row * k..(row + 1) * k];
                    for (j, &i) in s.iter().enumerate() {
                        let i = i as usize;
                        if i >= k || w[i] == 0.0 {
                            panic!(
                                "multinomial: row {row} drew category {i} of weight {:?}",
                                w.get(i)
                            );
                        }
                        if !repl && s[..j].contains(&(i as f64)) {
                            panic!("multinomial: row {row} drew {i} twice without replacement");
                        }
                    }
                }
                Ok(r)
            })
            .functional(|a, p| {
                a[0].t()
                    .multinomial(p.ints[1] as usize, p.ints[2] != 0, Some(&gen(p)))
            }),
        OpInfo::new("uniform_", Family::Random)
            .args(vec![ArgSpec::tensor("self", Domain::any())])
            .dtypes(FLOATS)
            .sampler(input_sampler(Domain::any(), RANGE))
            .reference(|c, a: &[RefArg]| {
                let p = c.params;
                let (lo, hi) = (sc(p, 0), sc(p, 1));
                let r = read(fresh(a[0].t())?.uniform_(lo, hi, Some(&gen(p))))?;
                let d = a[0].t().dtype;
                let (l, h) = (crate::host::store(lo, d), crate::host::store(hi, d));
                assert_all(
                    "uniform_",
                    &r,
                    |v| v >= l && (v < h || (l == h && v == l)),
                    "in [low, high)",
                );
                Ok(r)
            })
            .inplace(|a, p| a[0].t().uniform_(sc(p, 0), sc(p, 1), Some(&gen(p)))),
        OpInfo::new("normal_", Family::Random)
            .args(vec![ArgSpec::tensor("self", Domain::any())])
            .dtypes(FLOATS)
            .sampler(input_sampler(Domain::any(), NORMAL))
            .reference(|c, a: &[RefArg]| {
                let p = c.params;
                let r = read(fresh(a[0].t())?.normal_(sc(p, 0), sc(p, 1), Some(&gen(p))))?;
                assert_all("normal_", &r, f64::is_finite, "finite");
                Ok(r)
            })
            .inplace(|a, p| a[0].t().normal_(sc(p, 0), sc(p, 1), Some(&gen(p)))),
        OpInfo::new("bernoulli_", Family::Random)
            .args(vec![ArgSpec::tensor("self", Domain::any())])
            .dtypes(ALL)
            .sampler(input_sampler(Domain::any(), PROB))
            .reference(|c, a: &[RefArg]| {
                let p = c.params;
                let r = read(fresh(a[0].t())?.bernoulli_(sc(p, 0), Some(&gen(p))))?;
                assert_all("bernoulli_", &r, zero_one, "0 or 1");
                Ok(r)
            })
            .inplace(|a, p| a[0].t().bernoulli_(sc(p, 0), Some(&gen(p)))),
    ]
}

/// How far each entry of this family is differentiable ([`Grad`], checked by
/// [`crate::grad`]). No: sampling is not differentiable.
pub fn grad(name: &str) -> super::Grad {
    let _ = name;
    super::Grad::No
}
