//! Derivatives of the elementwise ops (PyTorch's `derivatives.yaml`, transcribed), and the
//! recording calls the elementwise frontends make.

use super::sum_to_shape;
use crate::autograd::record::record;
use crate::backend::{BinaryOp, TernaryOp, UnaryOp};
use crate::promote::Operand;
use crate::{Error, Result, Scalar, Tensor};
use std::f64::consts::{FRAC_2_SQRT_PI, LN_2, PI};

/// A captured operand: a tensor (kept alive for backward) or a host scalar.
#[derive(Clone)]
pub(crate) enum Arg {
    T(Tensor),
    S(Scalar),
}
impl Arg {
    pub fn from(o: &Operand) -> Arg {
        match o {
            Operand::Tensor(t) => Arg::T((*t).clone()),
            Operand::Scalar(s) => Arg::S(*s),
        }
    }
    pub fn op(&self) -> Operand<'_> {
        match self {
            Arg::T(t) => Operand::Tensor(t),
            Arg::S(s) => Operand::Scalar(*s),
        }
    }
    fn tensor(&self) -> Option<&Tensor> {
        match self {
            Arg::T(t) => Some(t),
            Arg::S(_) => None,
        }
    }
    /// The operand as a tensor: a host scalar becomes a 0-d tensor of `like`'s dtype and
    /// device — the compute dtype the forward converted it to (`like` is the gradient, whose
    /// dtype is the result's).
    fn as_tensor_like(&self, like: &Tensor) -> Result<Tensor> {
        match self {
            Arg::T(t) => Ok(t.clone()),
            Arg::S(s) => Tensor::scalar(*s, like.dtype(), &like.device()),
        }
    }
}

/// `a < b` for two captured operands (at least one a tensor).
/// `a < b` for two clamp bounds (tensors or scalars); two scalars give a 0-d bool on `device`.
fn y_lt_z(a: &Arg, b: &Arg, device: crate::Device) -> Result<Tensor> {
    match (a, b) {
        (Arg::T(t), o) => t.lt(o.op()),
        (Arg::S(_), Arg::T(t)) => t.gt(a.op()),
        (Arg::S(x), Arg::S(y)) => {
            Tensor::scalar(x.to_f64() < y.to_f64(), crate::DType::Bool, &device)
        }
    }
}

fn zeros(g: &Tensor) -> Result<Tensor> {
    g.zeros_like(crate::MemoryFormat::Contiguous)
}

/// d op(x) / dx · g
pub(crate) fn unary_grad(op: UnaryOp, x: &Tensor, g: &Tensor) -> Result<Tensor> {
    use UnaryOp::*;
    match op {
        Neg => g.neg(),
        Abs => g.mul(&x.sign()?),
        Sign | Floor | Ceil | Round | Trunc => zeros(g),
        Exp | Expm1 => g.mul(&x.exp()?),
        Exp2 => g.mul(&x.exp2()?)?.mul(LN_2),
        Log => g.div(x),
        Log2 => g.div(&x.mul(LN_2)?),
        Log1p => g.div(&x.add(1.0)?),
        Sqrt => g.div(&x.sqrt()?.mul(2.0)?),
        Rsqrt => g.mul(&x.rsqrt()?.pow(3.0)?)?.mul(-0.5),
        Reciprocal => g.neg()?.div(&x.square()?),
        Square => g.mul(x)?.mul(2.0),
        Sin => g.mul(&x.cos()?),
        Cos => g.mul(&x.sin()?)?.neg(),
        Tan => g.mul(&x.tan()?.square()?.add(1.0)?),
        Tanh => g.mul(&x.tanh()?.square()?.neg()?.add(1.0)?),
        Sigmoid => {
            let s = x.sigmoid()?;
            g.mul(&s.mul(&s.neg()?.add(1.0)?)?)
        }
        Relu => x.gt(0.0)?.where_cond(g, 0.0),
        GeluErf => {
            let cdf = x
                .mul(std::f64::consts::FRAC_1_SQRT_2)?
                .erf()?
                .add(1.0)?
                .mul(0.5)?;
            let pdf = x.square()?.mul(-0.5)?.exp()?.mul(1.0 / (2.0 * PI).sqrt())?;
            g.mul(&cdf.add(&x.mul(&pdf)?)?)
        }
        GeluTanh => {
            let (beta, kappa) = ((2.0 / PI).sqrt(), 0.044715);
            let x2 = x.square()?;
            let inner = x.add(&x2.mul(x)?.mul(kappa)?)?.mul(beta)?;
            let t = inner.tanh()?;
            let left = t.add(1.0)?.mul(0.5)?;
            let right = x
                .mul(0.5)?
                .mul(&t.square()?.neg()?.add(1.0)?)?
                .mul(&x2.mul(3.0 * kappa)?.add(1.0)?)?
                .mul(beta)?;
            g.mul(&left.add(&right)?)
        }
        Silu => {
            let s = x.sigmoid()?;
            g.mul(&s.mul(&x.mul(&s.neg()?.add(1.0)?)?.add(1.0)?)?)
        }
        Softplus => x.gt(20.0)?.where_cond(g, &g.mul(&x.sigmoid()?)?),
        Erf => g.mul(&x.square()?.neg()?.exp()?.mul(FRAC_2_SQRT_PI)?),
        IsNan | IsInf | IsFinite | LogicalNot => Err(Error::invalid(
            op.name(),
            "is not differentiable (bool output)",
        )),
    }
}

pub(crate) fn record_unary(op: UnaryOp, x: &Tensor, out: &Tensor) -> Result<()> {
    let xs = x.clone();
    record(unary_name(op), &[x], &[out], &[(x, "self")], move |g| {
        Ok(vec![Some(unary_grad(op, &xs, &g[0])?)])
    })
}

/// (d/da, d/db) · g for a binary op, before undoing broadcasting.
fn binary_grads(
    op: BinaryOp,
    a: &Tensor,
    b: &Arg,
    g: &Tensor,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    use BinaryOp::*;
    let bo = b.op();
    let need_b = b.tensor().is_some_and(|t| t.requires_grad());
    Ok(match op {
        Add => (Some(g.clone()), need_b.then(|| g.clone())),
        Sub => (Some(g.clone()), if need_b { Some(g.neg()?) } else { None }),
        Mul => (
            Some(g.mul(bo)?),
            if need_b { Some(g.mul(a)?) } else { None },
        ),
        Div => {
            let ga = g.div(bo)?;
            let gb = if need_b {
                Some(
                    g.mul(a)?
                        .div(b.tensor().unwrap().square()?.as_op())?
                        .neg()?,
                )
            } else {
                None
            };
            (Some(ga), gb)
        }
        Pow => {
            // d/da = b·a^(b−1) (0 where b == 0); d/db = a^b·ln a (0 where a == 0 and b ≥ 0)
            let bm1 = match b {
                Arg::T(t) => a.pow(&t.sub(1.0)?)?,
                Arg::S(s) => a.pow(Scalar::Float(s.to_f64() - 1.0))?,
            };
            let ga_raw = g.mul(bo)?.mul(&bm1)?;
            let b_zero = match b {
                Arg::T(t) => t.eq(0.0)?,
                Arg::S(s) => g
                    .full_like(s.to_f64() == 0.0, crate::MemoryFormat::Contiguous)?
                    .ne(0.0)?,
            };
            let ga = b_zero.where_cond(0.0, &ga_raw)?;
            let gb = if need_b {
                let t = b.tensor().unwrap();
                let raw = g.mul(&a.pow(t)?)?.mul(&a.log()?)?;
                Some(a.eq(0.0)?.logical_and(&t.ge(0.0)?)?.where_cond(0.0, &raw)?)
            } else {
                None
            };
            (Some(ga), gb)
        }
        Maximum | Minimum => {
            let held = b.as_tensor_like(g)?;
            let t = &held;
            let (wins_a, wins_b) = if op == Maximum {
                (a.gt(t)?, t.gt(a)?)
            } else {
                (a.lt(t)?, t.lt(a)?)
            };
            let half = g.mul(0.5)?;
            let tie = a.eq(t)?;
            let ga = tie.where_cond(&half, &wins_a.where_cond(g, 0.0)?)?;
            let gb = if need_b {
                Some(tie.where_cond(&half, &wins_b.where_cond(g, 0.0)?)?)
            } else {
                None
            };
            (Some(ga), gb)
        }
        Atan2 => {
            let held = b.as_tensor_like(g)?;
            let bt = &held;
            let denom = a.square()?.add(&bt.square()?)?;
            let ga = g.mul(bt)?.div(&denom)?;
            let gb = if need_b {
                Some(g.mul(a)?.div(&denom)?.neg()?)
            } else {
                None
            };
            (Some(ga), gb)
        }
        Remainder => (
            Some(g.clone()),
            if need_b {
                Some(g.mul(&a.floor_divide(bo)?)?.neg()?)
            } else {
                None
            },
        ),
        FloorDivide => (Some(zeros(g)?), if need_b { Some(zeros(g)?) } else { None }),
        ClampMin => (
            Some(a.ge(bo)?.where_cond(g, 0.0)?),
            if need_b {
                Some(a.lt(bo)?.where_cond(g, 0.0)?)
            } else {
                None
            },
        ),
        ClampMax => (
            Some(a.le(bo)?.where_cond(g, 0.0)?),
            if need_b {
                Some(a.gt(bo)?.where_cond(g, 0.0)?)
            } else {
                None
            },
        ),
        _ => {
            return Err(Error::invalid(
                op.name(),
                "is not differentiable (bool or integer output)",
            ))
        }
    })
}

trait AsOp {
    fn as_op(&self) -> Operand<'_>;
}
impl AsOp for Tensor {
    fn as_op(&self) -> Operand<'_> {
        Operand::Tensor(self)
    }
}

pub(crate) fn record_binary(op: BinaryOp, a: &Tensor, b: &Operand, out: &Tensor) -> Result<()> {
    let mut inputs = vec![a];
    if let Operand::Tensor(t) = b {
        inputs.push(t);
    }
    let (sa, sb) = (
        a.shape().to_vec(),
        match b {
            Operand::Tensor(t) => Some(t.shape().to_vec()),
            _ => None,
        },
    );
    if matches!(op, BinaryOp::Add | BinaryOp::Sub) {
        // nothing saved: the gradient is ±g, summed back to each shape
        let b_needs = matches!(b, Operand::Tensor(t) if t.requires_grad());
        return record(binary_name(op), &inputs, &[out], &[], move |g| {
            let ga = Some(sum_to_shape(&g[0], &sa)?);
            let mut v = vec![ga];
            if let Some(sb) = &sb {
                v.push(if b_needs {
                    let gb = sum_to_shape(&g[0], sb)?;
                    Some(if op == BinaryOp::Sub { gb.neg()? } else { gb })
                } else {
                    None
                });
            }
            Ok(v)
        });
    }
    let saved: Vec<(&Tensor, &'static str)> = inputs
        .iter()
        .zip(["self", "other"])
        .map(|(t, w)| (*t, w))
        .collect();
    let (a2, b2) = (a.clone(), Arg::from(b));
    record(binary_name(op), &inputs, &[out], &saved, move |g| {
        let (ga, gb) = binary_grads(op, &a2, &b2, &g[0])?;
        let ga = ga.map(|t| sum_to_shape(&t, &sa)).transpose()?;
        let mut v = vec![ga];
        if let Some(sb) = &sb {
            v.push(gb.map(|t| sum_to_shape(&t, sb)).transpose()?);
        }
        Ok(v)
    })
}

pub(crate) fn record_ternary(op: TernaryOp, args: [&Operand; 3], out: &Tensor) -> Result<()> {
    let owned: Vec<Arg> = args.iter().map(|o| Arg::from(o)).collect();
    let tensors: Vec<&Tensor> = args
        .iter()
        .filter_map(|o| match o {
            Operand::Tensor(t) => Some(*t),
            _ => None,
        })
        .collect();
    let saved: Vec<(&Tensor, &'static str)> = tensors.iter().map(|t| (*t, "input")).collect();
    let name = match op {
        TernaryOp::Where => "WhereBackward",
        TernaryOp::Lerp => "LerpBackward",
        TernaryOp::Addcmul(_) => "AddcmulBackward",
        TernaryOp::Addcdiv(_) => "AddcdivBackward",
        TernaryOp::Clamp => "ClampBackward",
    };
    record(name, &tensors, &[out], &saved, move |g| {
        let g = &g[0];
        let [x, y, z] = [&owned[0], &owned[1], &owned[2]];
        let grads: [Option<Tensor>; 3] = match op {
            TernaryOp::Where => {
                let c = x.tensor().expect("where's condition is a tensor");
                [
                    None,
                    Some(c.where_cond(g, 0.0)?),
                    Some(c.where_cond(0.0, g)?),
                ]
            }
            TernaryOp::Lerp => {
                let (s, e, w) = (x.op(), y.op(), z.op());
                let one_minus_w = match z {
                    Arg::T(t) => t.neg()?.add(1.0)?,
                    Arg::S(v) => g.full_like(1.0 - v.to_f64(), crate::MemoryFormat::Contiguous)?,
                };
                let diff = match (y, x) {
                    (Arg::T(e), _) => e.sub(s)?,
                    (Arg::S(_), Arg::T(st)) => st.neg()?.add(e)?,
                    _ => zeros(g)?,
                };
                [
                    Some(g.mul(&one_minus_w)?),
                    Some(g.mul(w)?),
                    Some(g.mul(&diff)?),
                ]
            }
            TernaryOp::Addcmul(v) => [
                Some(g.clone()),
                Some(g.mul(z.op())?.mul(v)?),
                Some(g.mul(y.op())?.mul(v)?),
            ],
            TernaryOp::Addcdiv(v) => {
                let gt1 = g.mul(v)?.div(z.op())?;
                let gt2 = match z {
                    Arg::T(t2) => Some(g.mul(v)?.mul(y.op())?.div(&t2.square()?)?.neg()?),
                    Arg::S(_) => None,
                };
                [Some(g.clone()), Some(gt1), gt2]
            }
            TernaryOp::Clamp => {
                let (xv, lo, hi) = (x.tensor().expect("clamp input is a tensor"), y.op(), z.op());
                let inside = xv.ge(lo)?.logical_and(&xv.le(hi)?)?;
                // PyTorch's clamp_backward_min_max: when min > max the result is max
                let lo_wins = xv.lt(lo)?.logical_and(&y_lt_z(y, z, xv.device())?)?;
                let hi_wins = xv.gt(hi)?.logical_or(&y_lt_z(z, y, xv.device())?)?;
                [
                    Some(inside.where_cond(g, 0.0)?),
                    Some(lo_wins.where_cond(g, 0.0)?),
                    Some(hi_wins.where_cond(g, 0.0)?),
                ]
            }
        };
        let mut out = vec![];
        for (arg, gr) in owned.iter().zip(grads) {
            if let Arg::T(t) = arg {
                out.push(match gr {
                    Some(gr) if t.requires_grad() => Some(sum_to_shape(&gr, t.shape())?),
                    _ => None,
                });
            }
        }
        Ok(out)
    })
}

/// The `grad_fn` name of a unary op (PyTorch's names).
fn unary_name(op: UnaryOp) -> &'static str {
    use UnaryOp::*;
    match op {
        Neg => "NegBackward",
        Abs => "AbsBackward",
        Sign => "SignBackward",
        Exp => "ExpBackward",
        Exp2 => "Exp2Backward",
        Log => "LogBackward",
        Log2 => "Log2Backward",
        Log1p => "Log1pBackward",
        Expm1 => "Expm1Backward",
        Sqrt => "SqrtBackward",
        Rsqrt => "RsqrtBackward",
        Reciprocal => "ReciprocalBackward",
        Square => "PowBackward",
        Sin => "SinBackward",
        Cos => "CosBackward",
        Tan => "TanBackward",
        Tanh => "TanhBackward",
        Sigmoid => "SigmoidBackward",
        Relu => "ReluBackward",
        GeluErf | GeluTanh => "GeluBackward",
        Silu => "SiluBackward",
        Softplus => "SoftplusBackward",
        Floor => "FloorBackward",
        Ceil => "CeilBackward",
        Round => "RoundBackward",
        Trunc => "TruncBackward",
        Erf => "ErfBackward",
        IsNan | IsInf | IsFinite | LogicalNot => "NotDifferentiable",
    }
}

/// The `grad_fn` name of a binary op.
fn binary_name(op: BinaryOp) -> &'static str {
    use BinaryOp::*;
    match op {
        Add => "AddBackward",
        Sub => "SubBackward",
        Mul => "MulBackward",
        Div => "DivBackward",
        FloorDivide => "FloorDivideBackward",
        Remainder => "RemainderBackward",
        Pow => "PowBackward",
        Maximum => "MaximumBackward",
        Minimum => "MinimumBackward",
        Atan2 => "Atan2Backward",
        ClampMin => "ClampMinBackward",
        ClampMax => "ClampMaxBackward",
        _ => "NotDifferentiable",
    }
}
