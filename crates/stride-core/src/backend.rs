//! The backend contract: the small set of primitives every backend implements, over views.
//!
//! Each primitive receives every operand — the output included — as a [`View`] (storage +
//! layout + dtype) and must address each through its layout. The frontend has already
//! validated shapes, broadcast the inputs to the output's shape (stride 0), cast inputs to the
//! op's compute dtype, and made sure the output does not partially alias an input (an output
//! may be *exactly* an input: same storage and layout, for in-place ops). Everything else —
//! softmax, norms, losses, optimizers — is composed from these in the frontend.

use crate::{DType, Device, Error, Layout, Result, Scalar, Storage};

/// One operand of a primitive: a storage seen through a layout.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub storage: &'a Storage,
    pub layout: &'a Layout,
    pub dtype: DType,
}

/// Elementwise unary ops. Input and output dtype are decided by the frontend
/// (see [`UnaryOp::result_dtype`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sign,
    Exp,
    Exp2,
    Log,
    Log2,
    Log1p,
    Expm1,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Square,
    Sin,
    Cos,
    Tan,
    Tanh,
    Sigmoid,
    Relu,
    GeluErf,
    GeluTanh,
    Silu,
    Softplus,
    Floor,
    Ceil,
    Round,
    Trunc,
    Erf,
    IsNan,
    IsInf,
    IsFinite,
    LogicalNot,
}

/// How an op treats integer and bool inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntPolicy {
    /// Computes in the input's dtype (neg, abs, floor, …).
    Keep,
    /// Integer inputs are computed in the default float dtype, f32 (exp, sqrt, …: PyTorch's
    /// "int to float" promotion).
    ToFloat,
    /// Only float inputs are accepted (activation functions, as in PyTorch).
    FloatOnly,
    /// Any input; the result is bool (isnan, logical_not, comparisons).
    ToBool,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 32] = {
        use UnaryOp::*;
        [
            Neg, Abs, Sign, Exp, Exp2, Log, Log2, Log1p, Expm1, Sqrt, Rsqrt, Reciprocal, Square,
            Sin, Cos, Tan, Tanh, Sigmoid, Relu, GeluErf, GeluTanh, Silu, Softplus, Floor, Ceil,
            Round, Trunc, Erf, IsNan, IsInf, IsFinite, LogicalNot,
        ]
    };
    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "neg",
            Abs => "abs",
            Sign => "sign",
            Exp => "exp",
            Exp2 => "exp2",
            Log => "log",
            Log2 => "log2",
            Log1p => "log1p",
            Expm1 => "expm1",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Reciprocal => "reciprocal",
            Square => "square",
            Sin => "sin",
            Cos => "cos",
            Tan => "tan",
            Tanh => "tanh",
            Sigmoid => "sigmoid",
            Relu => "relu",
            GeluErf => "gelu",
            GeluTanh => "gelu_tanh",
            Silu => "silu",
            Softplus => "softplus",
            Floor => "floor",
            Ceil => "ceil",
            Round => "round",
            Trunc => "trunc",
            Erf => "erf",
            IsNan => "isnan",
            IsInf => "isinf",
            IsFinite => "isfinite",
            LogicalNot => "logical_not",
        }
    }
    pub fn int_policy(self) -> IntPolicy {
        use UnaryOp::*;
        match self {
            Neg | Abs | Sign | Square | Relu | Floor | Ceil | Round | Trunc => IntPolicy::Keep,
            GeluErf | GeluTanh | Silu | Softplus => IntPolicy::FloatOnly,
            IsNan | IsInf | IsFinite | LogicalNot => IntPolicy::ToBool,
            _ => IntPolicy::ToFloat,
        }
    }
    /// (compute dtype, result dtype) for an input dtype, or an error naming the op.
    pub fn dtypes(self, input: DType) -> Result<(DType, DType)> {
        if input == DType::Bool
            && matches!(
                self,
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Square
            )
        {
            return Err(Error::UnsupportedDType {
                op: self.name(),
                dtype: input,
                hint: "; use logical_not for bool tensors, or to_dtype first".into(),
            });
        }
        Ok(match self.int_policy() {
            IntPolicy::Keep => (input, input),
            IntPolicy::ToBool => (input, DType::Bool),
            IntPolicy::ToFloat if input.is_float() => (input, input),
            IntPolicy::ToFloat => (DType::F32, DType::F32),
            IntPolicy::FloatOnly if input.is_float() => (input, input),
            IntPolicy::FloatOnly => {
                return Err(Error::UnsupportedDType {
                    op: self.name(),
                    dtype: input,
                    hint: "; it takes float tensors (convert with to_dtype)".into(),
                })
            }
        })
    }
}

/// Elementwise binary ops (both inputs in the compute dtype).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDivide,
    Remainder,
    Pow,
    Maximum,
    Minimum,
    Atan2,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    ShiftLeft,
    ShiftRight,
    ClampMin,
    ClampMax,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 26] = {
        use BinaryOp::*;
        [
            Add,
            Sub,
            Mul,
            Div,
            FloorDivide,
            Remainder,
            Pow,
            Maximum,
            Minimum,
            Atan2,
            Eq,
            Ne,
            Lt,
            Le,
            Gt,
            Ge,
            LogicalAnd,
            LogicalOr,
            LogicalXor,
            BitwiseAnd,
            BitwiseOr,
            BitwiseXor,
            ShiftLeft,
            ShiftRight,
            ClampMin,
            ClampMax,
        ]
    };
    pub fn name(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "add",
            Sub => "sub",
            Mul => "mul",
            Div => "div",
            FloorDivide => "floor_divide",
            Remainder => "remainder",
            Pow => "pow",
            Maximum => "maximum",
            Minimum => "minimum",
            Atan2 => "atan2",
            Eq => "eq",
            Ne => "ne",
            Lt => "lt",
            Le => "le",
            Gt => "gt",
            Ge => "ge",
            LogicalAnd => "logical_and",
            LogicalOr => "logical_or",
            LogicalXor => "logical_xor",
            BitwiseAnd => "bitwise_and",
            BitwiseOr => "bitwise_or",
            BitwiseXor => "bitwise_xor",
            ShiftLeft => "bitwise_left_shift",
            ShiftRight => "bitwise_right_shift",
            ClampMin => "clamp_min",
            ClampMax => "clamp_max",
        }
    }
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(
            self,
            Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr | LogicalXor
        )
    }
    /// (compute dtype, result dtype) for the promoted dtype of the operands.
    pub fn dtypes(self, common: DType) -> Result<(DType, DType)> {
        use BinaryOp::*;
        let unsupported = |hint: &str| Error::UnsupportedDType {
            op: self.name(),
            dtype: common,
            hint: hint.into(),
        };
        Ok(match self {
            _ if self.is_comparison() => (common, DType::Bool),
            Div | Atan2 if !common.is_float() => (DType::F32, DType::F32),
            BitwiseAnd | BitwiseOr | BitwiseXor if common.is_float() => {
                return Err(unsupported("; bitwise ops take integer or bool tensors"))
            }
            ShiftLeft | ShiftRight if !common.is_int() => {
                return Err(unsupported("; shifts take integer tensors"))
            }
            Sub if common == DType::Bool => {
                return Err(unsupported(
                    "; subtracting bool tensors is not supported, use logical_xor",
                ))
            }
            FloorDivide | Remainder | Pow if common == DType::Bool => {
                return Err(unsupported("; convert bool tensors with to_dtype first"))
            }
            _ => (common, common),
        })
    }
}

/// Elementwise ternary ops. Scalars that are part of the op (addcmul's `value`) travel in
/// the variant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TernaryOp {
    /// `cond ? a : b` — operand 0 is a bool tensor.
    Where,
    /// `start + weight·(end − start)`, PyTorch's numerically careful form.
    Lerp,
    /// `self + value·t1·t2`
    Addcmul(Scalar),
    /// `self + value·t1/t2`
    Addcdiv(Scalar),
    /// `min(max(x, lo), hi)` with NaN propagating from any operand.
    Clamp,
}

impl TernaryOp {
    pub fn name(self) -> &'static str {
        match self {
            TernaryOp::Where => "where",
            TernaryOp::Lerp => "lerp",
            TernaryOp::Addcmul(_) => "addcmul",
            TernaryOp::Addcdiv(_) => "addcdiv",
            TernaryOp::Clamp => "clamp",
        }
    }
}

/// Dispatches a primitive to the backend of the output's device.
pub(crate) fn device_of(views: &[View]) -> Device {
    views[0].storage.device()
}

pub(crate) fn copy_cast(src: View, dst: View) -> Result<()> {
    match device_of(&[dst]) {
        Device::Cpu => crate::cpu::copy::copy_cast(src, dst),
        d => Err(no_backend(d)),
    }
}
pub(crate) fn fill(dst: View, value: Scalar) -> Result<()> {
    match device_of(&[dst]) {
        Device::Cpu => crate::cpu::copy::fill(dst, value),
        d => Err(no_backend(d)),
    }
}
pub(crate) fn unary(op: UnaryOp, src: View, dst: View) -> Result<()> {
    match device_of(&[dst]) {
        Device::Cpu => crate::cpu::elementwise::unary(op, src, dst),
        d => Err(no_backend(d)),
    }
}
pub(crate) fn binary(op: BinaryOp, a: View, b: View, dst: View) -> Result<()> {
    match device_of(&[dst]) {
        Device::Cpu => crate::cpu::elementwise::binary(op, a, b, dst),
        d => Err(no_backend(d)),
    }
}
pub(crate) fn ternary(op: TernaryOp, a: View, b: View, c: View, dst: View) -> Result<()> {
    match device_of(&[dst]) {
        Device::Cpu => crate::cpu::elementwise::ternary(op, a, b, c, dst),
        d => Err(no_backend(d)),
    }
}

pub(crate) fn no_backend(d: Device) -> Error {
    Error::DeviceUnavailable {
        device: d,
        why: "no backend for this device in this build".into(),
    }
}
