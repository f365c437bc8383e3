//! Elementwise frontends: unary, binary and ternary ops with broadcasting and PyTorch's type
//! promotion, each in three forms — `op` (new tensor), `op_` (in place) and `op_out` (into a
//! given tensor of any non-overlapping layout).

use super::output::{deliver, Dest, Policy};
use crate::autocast::autocast_inputs;
use crate::autograd::formulas::elementwise as formulas;
use crate::autograd::record;
use crate::backend::{self, BinaryOp, TernaryOp, UnaryOp, View};
use crate::promote::{result_type, Operand};
use crate::shape::broadcast_shapes;
use crate::{DType, Device, Error, Layout, Result, Scalar, Tensor};

/// An input made ready for a kernel: in its compute dtype, broadcast to the result's shape.
struct Prepared {
    tensor: Tensor,
    layout: Layout,
}
impl Prepared {
    fn view(&self) -> View<'_> {
        View {
            storage: self.tensor.storage(),
            layout: &self.layout,
            dtype: self.tensor.dtype(),
        }
    }
}

fn operand_shape<'a>(o: &'a Operand) -> &'a [usize] {
    match o {
        Operand::Tensor(t) => t.shape(),
        Operand::Scalar(_) => &[],
    }
}

/// The device of the op: the first tensor operand's; all others (and the output) must match.
fn op_device(op: &'static str, ops: &[Operand], dest: Dest) -> Result<Device> {
    let mut dev = None;
    let tensors = ops.iter().filter_map(|o| match o {
        Operand::Tensor(t) => Some(*t),
        _ => None,
    });
    for t in tensors.chain(match dest {
        Dest::Into(t) => Some(t),
        Dest::New => None,
    }) {
        match dev {
            None => dev = Some(t.device()),
            Some(d) if d != t.device() => {
                return Err(Error::DeviceMismatch {
                    op,
                    a: d,
                    b: t.device(),
                })
            }
            _ => {}
        }
    }
    Ok(dev.unwrap_or(Device::Cpu))
}

fn prepare(
    o: &Operand,
    dtype: DType,
    shape: &[usize],
    device: &Device,
    op: &'static str,
) -> Result<Prepared> {
    let tensor = match o {
        Operand::Tensor(t) => t.to_dtype(dtype)?,
        Operand::Scalar(s) => Tensor::scalar(*s, dtype, device)?,
    };
    let layout = tensor.layout().broadcast_to(op, shape)?;
    Ok(Prepared { tensor, layout })
}

fn result_shape(
    op: &'static str,
    ops: &[Operand],
    dest: Dest,
    in_place: bool,
) -> Result<Vec<usize>> {
    let mut shape: Vec<usize> = vec![];
    for o in ops {
        shape = broadcast_shapes(op, &shape, operand_shape(o))?;
    }
    if let (true, Dest::Into(t)) = (in_place, dest) {
        // in place, `self` is not broadcast: the others must broadcast to its shape
        if t.shape() != shape.as_slice() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: t.shape().to_vec(),
                rhs: shape,
                why: "differ: an in-place op can't change self's shape (first) to the broadcast shape (second)".into(),
            });
        }
    }
    Ok(shape)
}

fn first_tensor<'a>(ops: &[Operand<'a>]) -> Option<&'a Tensor> {
    ops.iter().find_map(|o| match o {
        Operand::Tensor(t) => Some(*t),
        _ => None,
    })
}

fn unary_raw(op: UnaryOp, x: &Tensor, dest: Dest, in_place: bool) -> Result<Tensor> {
    let (compute, result) = op.dtypes(x.dtype())?;
    let ops = [Operand::Tensor(x)];
    let device = op_device(op.name(), &ops, dest)?;
    let shape = result_shape(op.name(), &ops, dest, in_place)?;
    let a = prepare(&ops[0], compute, &shape, &device, op.name())?;
    let av = a.view();
    let inputs = [av];
    let policy = Policy::new(op.name(), &inputs, &shape, device, Some(x));
    deliver(dest, &policy, result, |dst| backend::unary(op, av, dst))
}

fn binary_raw(op: BinaryOp, a: Operand, b: Operand, dest: Dest, in_place: bool) -> Result<Tensor> {
    let name = op.name();
    let ops = [a, b];
    let (compute, result) = op.dtypes(result_type(&ops))?;
    let device = op_device(name, &ops, dest)?;
    let shape = result_shape(name, &ops, dest, in_place)?;
    let pa = prepare(&ops[0], compute, &shape, &device, name)?;
    let pb = prepare(&ops[1], compute, &shape, &device, name)?;
    let (va, vb) = (pa.view(), pb.view());
    let inputs = [va, vb];
    let policy = Policy::new(name, &inputs, &shape, device, first_tensor(&ops));
    deliver(dest, &policy, result, |dst| {
        backend::binary(op, va, vb, dst)
    })
}

fn ternary_raw(
    op: TernaryOp,
    a: Operand,
    b: Operand,
    c: Operand,
    dest: Dest,
    in_place: bool,
) -> Result<Tensor> {
    let name = op.name();
    let ops = [a, b, c];
    let (dtypes, result) = match op {
        TernaryOp::Where => {
            if let Operand::Tensor(cond) = a {
                if cond.dtype() != DType::Bool {
                    return Err(Error::UnsupportedDType {
                        op: name,
                        dtype: cond.dtype(),
                        hint: " for the condition; it must be a bool tensor (compare with ne(0) first)".into(),
                    });
                }
            }
            let r = result_type(&ops[1..]);
            ([DType::Bool, r, r], r)
        }
        _ => {
            let r = result_type(&ops);
            let float_only = matches!(op, TernaryOp::Lerp | TernaryOp::Addcdiv(_));
            if float_only && !r.is_float() {
                return Err(Error::UnsupportedDType {
                    op: name,
                    dtype: r,
                    hint: "; it takes float tensors".into(),
                });
            }
            if r == DType::Bool && !matches!(op, TernaryOp::Where) {
                return Err(Error::UnsupportedDType {
                    op: name,
                    dtype: r,
                    hint: "; convert with to_dtype first".into(),
                });
            }
            if let TernaryOp::Addcmul(Scalar::Float(_)) = op {
                if !r.is_float() {
                    return Err(Error::invalid(
                        name,
                        "for integer tensors the value must be an integer, not a float",
                    ));
                }
            }
            ([r, r, r], r)
        }
    };
    let device = op_device(name, &ops, dest)?;
    let shape = result_shape(name, &ops, dest, in_place)?;
    let p: Vec<Prepared> = (0..3)
        .map(|i| prepare(&ops[i], dtypes[i], &shape, &device, name))
        .collect::<Result<_>>()?;
    let (va, vb, vc) = (p[0].view(), p[1].view(), p[2].view());
    let like = first_tensor(&ops[if matches!(op, TernaryOp::Where) { 1 } else { 0 }..]);
    let inputs = [va, vb, vc];
    let policy = Policy::new(name, &inputs, &shape, device, like);
    deliver(dest, &policy, result, |dst| {
        backend::ternary(op, va, vb, vc, dst)
    })
}

// ----- autograd-aware entry points: functional forms record a node; in-place forms rebase
// the history of `self`; `_out` forms refuse to run while recording (as PyTorch's do).

fn tensors_of<'a>(ops: &[&Operand<'a>]) -> Vec<&'a Tensor> {
    ops.iter()
        .filter_map(|o| match o {
            Operand::Tensor(t) => Some(*t),
            _ => None,
        })
        .collect()
}

pub(crate) fn unary(op: UnaryOp, x: &Tensor, dest: Dest, in_place: bool) -> Result<Tensor> {
    match dest {
        Dest::New => {
            let out = unary_raw(op, x, dest, false)?;
            formulas::record_unary(op, x, &out)?;
            Ok(out)
        }
        Dest::Into(_) if in_place => record::in_place(
            op.name(),
            x,
            &[],
            || unary_raw(op, x, dest, true),
            |orig| unary(op, orig, Dest::New, false),
        ),
        Dest::Into(_) => {
            record::forbid_out(op.name(), &[x])?;
            unary_raw(op, x, dest, false)
        }
    }
}

pub(crate) fn binary(
    op: BinaryOp,
    a: Operand,
    b: Operand,
    dest: Dest,
    in_place: bool,
) -> Result<Tensor> {
    let Operand::Tensor(at) = a else {
        return binary_raw(op, a, b, dest, in_place);
    };
    match dest {
        Dest::New => {
            let out = binary_raw(op, a, b, dest, false)?;
            formulas::record_binary(op, at, &b, &out)?;
            Ok(out)
        }
        Dest::Into(_) if in_place => record::in_place(
            op.name(),
            at,
            &tensors_of(&[&b]),
            || binary_raw(op, a, b, dest, true),
            |orig| binary(op, Operand::Tensor(orig), b, Dest::New, false),
        ),
        Dest::Into(_) => {
            let mut ins = vec![at];
            ins.extend(tensors_of(&[&b]));
            record::forbid_out(op.name(), &ins)?;
            binary_raw(op, a, b, dest, false)
        }
    }
}

pub(crate) fn ternary(
    op: TernaryOp,
    a: Operand,
    b: Operand,
    c: Operand,
    dest: Dest,
    in_place: bool,
) -> Result<Tensor> {
    match dest {
        Dest::New => {
            let out = ternary_raw(op, a, b, c, dest, false)?;
            formulas::record_ternary(op, [&a, &b, &c], &out)?;
            Ok(out)
        }
        Dest::Into(_) if in_place => {
            let Operand::Tensor(at) = a else {
                return ternary_raw(op, a, b, c, dest, true);
            };
            record::in_place(
                op.name(),
                at,
                &tensors_of(&[&b, &c]),
                || ternary_raw(op, a, b, c, dest, true),
                |orig| ternary(op, Operand::Tensor(orig), b, c, Dest::New, false),
            )
        }
        Dest::Into(_) => {
            record::forbid_out(op.name(), &tensors_of(&[&a, &b, &c]))?;
            ternary_raw(op, a, b, c, dest, false)
        }
    }
}

macro_rules! unary_methods {
    ($($op:ident: $name:ident, $name_:ident, $name_out:ident;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "`; see [`UnaryOp::", stringify!($op), "`] for dtype rules.")]
                pub fn $name(&self) -> Result<Tensor> {
                    if let Some(c) = autocast_inputs(UnaryOp::$op.name(), &[self])? {
                        return c.tensors[0].$name();
                    }
                    unary(UnaryOp::$op, self, Dest::New, false)
                }
                #[doc = concat!("In-place `", stringify!($name), "`, written through `self`'s layout.")]
                pub fn $name_(&self) -> Result<Tensor> {
                    unary(UnaryOp::$op, self, Dest::Into(self), true)
                }
                #[doc = concat!("`", stringify!($name), "` written into `out` (any non-overlapping layout).")]
                pub fn $name_out(&self, out: &Tensor) -> Result<Tensor> {
                    unary(UnaryOp::$op, self, Dest::Into(out), false)
                }
            )*
        }
    };
}
unary_methods! {
    Neg: neg, neg_, neg_out;
    Abs: abs, abs_, abs_out;
    Sign: sign, sign_, sign_out;
    Exp: exp, exp_, exp_out;
    Exp2: exp2, exp2_, exp2_out;
    Log: log, log_, log_out;
    Log2: log2, log2_, log2_out;
    Log1p: log1p, log1p_, log1p_out;
    Expm1: expm1, expm1_, expm1_out;
    Sqrt: sqrt, sqrt_, sqrt_out;
    Rsqrt: rsqrt, rsqrt_, rsqrt_out;
    Reciprocal: reciprocal, reciprocal_, reciprocal_out;
    Square: square, square_, square_out;
    Sin: sin, sin_, sin_out;
    Cos: cos, cos_, cos_out;
    Tan: tan, tan_, tan_out;
    Tanh: tanh, tanh_, tanh_out;
    Sigmoid: sigmoid, sigmoid_, sigmoid_out;
    Relu: relu, relu_, relu_out;
    GeluErf: gelu, gelu_, gelu_out;
    GeluTanh: gelu_tanh, gelu_tanh_, gelu_tanh_out;
    Silu: silu, silu_, silu_out;
    Softplus: softplus, softplus_, softplus_out;
    Floor: floor, floor_, floor_out;
    Ceil: ceil, ceil_, ceil_out;
    Round: round, round_, round_out;
    Trunc: trunc, trunc_, trunc_out;
    Erf: erf, erf_, erf_out;
    IsNan: isnan, isnan_, isnan_out;
    IsInf: isinf, isinf_, isinf_out;
    IsFinite: isfinite, isfinite_, isfinite_out;
    LogicalNot: logical_not, logical_not_, logical_not_out;
}

/// The functional form of a binary op: autocast (`pow` and `pow_scalar` are in the policy
/// table), then the op.
fn binary_autocast(op: BinaryOp, a: &Tensor, b: Operand) -> Result<Tensor> {
    let cast = match (&b, op) {
        (Operand::Scalar(_), BinaryOp::Pow) => autocast_inputs("pow_scalar", &[a])?,
        (Operand::Tensor(t), _) => autocast_inputs(op.name(), &[a, t])?,
        (Operand::Scalar(_), _) => autocast_inputs(op.name(), &[a])?,
    };
    match cast {
        Some(c) => {
            let b = match (&b, c.tensors.get(1)) {
                (Operand::Tensor(_), Some(t)) => Operand::Tensor(t),
                _ => b,
            };
            binary(op, Operand::Tensor(&c.tensors[0]), b, Dest::New, false)
        }
        None => binary(op, Operand::Tensor(a), b, Dest::New, false),
    }
}

macro_rules! binary_methods {
    ($($op:ident: $name:ident, $name_:ident, $name_out:ident;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "` with broadcasting; `rhs` is a tensor or a scalar.")]
                pub fn $name<'a>(&self, rhs: impl Into<Operand<'a>>) -> Result<Tensor> {
                    binary_autocast(BinaryOp::$op, self, rhs.into())
                }
                #[doc = concat!("In-place `", stringify!($name), "`: `rhs` broadcasts to `self`'s shape; the result must be castable to `self`'s dtype.")]
                pub fn $name_<'a>(&self, rhs: impl Into<Operand<'a>>) -> Result<Tensor> {
                    binary(BinaryOp::$op, Operand::Tensor(self), rhs.into(), Dest::Into(self), true)
                }
                #[doc = concat!("`", stringify!($name), "` written into `out` (any non-overlapping layout of the broadcast shape).")]
                pub fn $name_out<'a>(&self, rhs: impl Into<Operand<'a>>, out: &Tensor) -> Result<Tensor> {
                    binary(BinaryOp::$op, Operand::Tensor(self), rhs.into(), Dest::Into(out), false)
                }
            )*
        }
    };
}
binary_methods! {
    Add: add, add_, add_out;
    Sub: sub, sub_, sub_out;
    Mul: mul, mul_, mul_out;
    Div: div, div_, div_out;
    FloorDivide: floor_divide, floor_divide_, floor_divide_out;
    Remainder: remainder, remainder_, remainder_out;
    Pow: pow, pow_, pow_out;
    Maximum: maximum, maximum_, maximum_out;
    Minimum: minimum, minimum_, minimum_out;
    Atan2: atan2, atan2_, atan2_out;
    Eq: eq, eq_, eq_out;
    Ne: ne, ne_, ne_out;
    Lt: lt, lt_, lt_out;
    Le: le, le_, le_out;
    Gt: gt, gt_, gt_out;
    Ge: ge, ge_, ge_out;
    LogicalAnd: logical_and, logical_and_, logical_and_out;
    LogicalOr: logical_or, logical_or_, logical_or_out;
    LogicalXor: logical_xor, logical_xor_, logical_xor_out;
    BitwiseAnd: bitwise_and, bitwise_and_, bitwise_and_out;
    BitwiseOr: bitwise_or, bitwise_or_, bitwise_or_out;
    BitwiseXor: bitwise_xor, bitwise_xor_, bitwise_xor_out;
    ShiftLeft: bitwise_left_shift, bitwise_left_shift_, bitwise_left_shift_out;
    ShiftRight: bitwise_right_shift, bitwise_right_shift_, bitwise_right_shift_out;
    ClampMin: clamp_min, clamp_min_, clamp_min_out;
    ClampMax: clamp_max, clamp_max_, clamp_max_out;
}

impl Tensor {
    /// `self ? on_true : on_false` elementwise; `self` must be a bool tensor. (PyTorch's
    /// `torch.where(cond, x, y)`.)
    pub fn where_cond<'a, 'b>(
        &self,
        on_true: impl Into<Operand<'a>>,
        on_false: impl Into<Operand<'b>>,
    ) -> Result<Tensor> {
        ternary(
            TernaryOp::Where,
            Operand::Tensor(self),
            on_true.into(),
            on_false.into(),
            Dest::New,
            false,
        )
    }
    /// [`Tensor::where_cond`] into `out`.
    pub fn where_cond_out<'a, 'b>(
        &self,
        on_true: impl Into<Operand<'a>>,
        on_false: impl Into<Operand<'b>>,
        out: &Tensor,
    ) -> Result<Tensor> {
        ternary(
            TernaryOp::Where,
            Operand::Tensor(self),
            on_true.into(),
            on_false.into(),
            Dest::Into(out),
            false,
        )
    }
}

macro_rules! ternary_methods {
    ($($(#[$doc:meta])* $name:ident, $name_:ident, $name_out:ident ($b:ident, $c:ident $(, $v:ident)?) => $op:expr;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name<'a, 'b>(&self, $b: impl Into<Operand<'a>>, $c: impl Into<Operand<'b>> $(, $v: impl Into<Scalar>)?) -> Result<Tensor> {
                    ternary($op, Operand::Tensor(self), $b.into(), $c.into(), Dest::New, false)
                }
                /// In place, written through `self`'s layout.
                pub fn $name_<'a, 'b>(&self, $b: impl Into<Operand<'a>>, $c: impl Into<Operand<'b>> $(, $v: impl Into<Scalar>)?) -> Result<Tensor> {
                    ternary($op, Operand::Tensor(self), $b.into(), $c.into(), Dest::Into(self), true)
                }
                /// Into `out` (any non-overlapping layout of the broadcast shape).
                pub fn $name_out<'a, 'b>(&self, $b: impl Into<Operand<'a>>, $c: impl Into<Operand<'b>> $(, $v: impl Into<Scalar>)?, out: &Tensor) -> Result<Tensor> {
                    ternary($op, Operand::Tensor(self), $b.into(), $c.into(), Dest::Into(out), false)
                }
            )*
        }
    };
}
ternary_methods! {
    /// `self + weight·(end − self)` (floats).
    lerp, lerp_, lerp_out (end, weight) => TernaryOp::Lerp;
    /// `self + value·t1·t2`.
    addcmul, addcmul_, addcmul_out (t1, t2, value) => TernaryOp::Addcmul(value.into());
    /// `self + value·t1/t2` (floats).
    addcdiv, addcdiv_, addcdiv_out (t1, t2, value) => TernaryOp::Addcdiv(value.into());
    /// `min(max(self, min), max)`; NaN propagates. Bounds are tensors or scalars; see
    /// [`Tensor::clamp_min`]/[`Tensor::clamp_max`] for one-sided clamps.
    clamp, clamp_, clamp_out (min, max) => TernaryOp::Clamp;
}
