//! Fused pointwise ops on the CPU (`backend/pointwise.rs` has the math and the operand
//! order): one walk of the strided engine's [`Plan`] over every operand at once.

use super::access::Access;
use super::math;
use super::strided::{Plan, SendPtr};
use crate::backend::common::check::internal;
use crate::backend::common::float::{FloatElem, Real};
use crate::backend::pointwise::{GateActivation, Pointwise};
use crate::backend::View;
use crate::{DType, Element, Result};
use half::{bf16, f16};

/// See [`crate::backend::pointwise::pointwise`].
pub(crate) fn pointwise(p: Pointwise, i: &[View], o: &[View]) -> Result<()> {
    match o[0].dtype {
        DType::F64 => run::<f64>(p, i, o),
        DType::F32 => run::<f32>(p, i, o),
        DType::F16 => run::<f16>(p, i, o),
        DType::BF16 => run::<bf16>(p, i, o),
        _ => Err(internal(p.name(), "a non-float operand")),
    }
}

fn run<T: FloatElem>(p: Pointwise, i: &[View], o: &[View]) -> Result<()>
where
    T::C: Element,
{
    let outs: Vec<_> = o.iter().map(|v| v.storage).collect();
    let ins: Vec<_> = i.iter().map(|v| v.storage).collect();
    let acc = Access::outputs(&outs, &ins);
    let ptr = |v: &View| SendPtr(acc.ptr::<T>(v.storage));
    // SAFETY (every closure below): the frontend checked that every operand has output 0's
    // shape and lies inside its storage (`check_extent`), so each offset `each` hands out
    // addresses an element of that operand; outputs do not overlap inputs.
    match p {
        Pointwise::Rotary { inverse } => {
            let (ya, yb, a, b) = (ptr(&o[0]), ptr(&o[1]), ptr(&i[0]), ptr(&i[1]));
            let cos = SendPtr(acc.ptr::<T::C>(i[2].storage));
            let sin = SendPtr(acc.ptr::<T::C>(i[3].storage));
            each([&o[0], &o[1], &i[0], &i[1], &i[2], &i[3]], |at| unsafe {
                let (x, y) = (
                    a.get().offset(at[2]).read().load(),
                    b.get().offset(at[3]).read().load(),
                );
                let c = cos.get().offset(at[4]).read();
                let s = sin.get().offset(at[5]).read();
                let s = if inverse { -s } else { s };
                ya.get().offset(at[0]).write(T::store(x * c - y * s));
                yb.get().offset(at[1]).write(T::store(x * s + y * c));
            });
        }
        Pointwise::Gated(act) => {
            let (y, g, u) = (ptr(&o[0]), ptr(&i[0]), ptr(&i[1]));
            each([&o[0], &i[0], &i[1]], |at| unsafe {
                let x = g.get().offset(at[1]).read().load();
                let up = u.get().offset(at[2]).read().load();
                y.get().offset(at[0]).write(T::store(gate(act, x) * up));
            });
        }
        Pointwise::GatedBackward(act) => {
            let (dg, du) = (ptr(&o[0]), ptr(&o[1]));
            let (dy, g, u) = (ptr(&i[0]), ptr(&i[1]), ptr(&i[2]));
            each([&o[0], &o[1], &i[0], &i[1], &i[2]], |at| unsafe {
                let d = dy.get().offset(at[2]).read().load();
                let x = g.get().offset(at[3]).read().load();
                let up = u.get().offset(at[4]).read().load();
                let (value, slope) = gate_grad(act, x);
                dg.get().offset(at[0]).write(T::store(d * up * slope));
                du.get().offset(at[1]).write(T::store(d * value));
            });
        }
    }
    Ok(())
}

/// Calls `f` with every element's offset in each of `views` (all of `views[0]`'s shape), in
/// parallel when the walk is large.
fn each<const N: usize>(views: [&View; N], f: impl Fn([isize; N]) + Sync) {
    let plan = Plan::new(
        views[0].layout.shape(),
        views.map(|v| v.layout.strides()),
        views.map(|v| v.layout.offset()),
    );
    let st = plan.inner_strides();
    plan.par_runs(|off, len| {
        for e in 0..len as isize {
            f(std::array::from_fn(|k| off[k] + e * st[k]));
        }
    });
}

/// The argument `2y` of `sigmoid(2y) = (1 + tanh y)/2`, `y` the tanh GELU's inner value.
#[inline(always)]
fn tanh_arg<F: Real>(x: F) -> F {
    let (beta, kappa) = (F::c((2.0 / std::f64::consts::PI).sqrt()), F::c(0.044715));
    F::c(2.0) * (beta * (x + kappa * x * x * x))
}

/// `act(x)`. The GELUs use forms without cancellation for negative `x` (the unary ops'
/// `1 + erf`, `1 + tanh` lose every digit there): `1 + erf(z) = erfc(−z)`, and with
/// `s = sigmoid(2y)`, `1 + tanh(y) = 2s` and `1 − tanh²(y) = 4s(1 − s)`.
#[inline(always)]
pub(crate) fn gate<F: Real>(act: GateActivation, x: F) -> F {
    match act {
        GateActivation::Silu => x * math::sigmoid(x),
        GateActivation::Gelu => F::c(0.5) * x * (-x * F::c(std::f64::consts::FRAC_1_SQRT_2)).erfc(),
        GateActivation::GeluTanh => x * math::sigmoid(tanh_arg(x)),
    }
}

/// `(act(x), act′(x))` in the compute type, in the order CUDA's `gate_slope` computes them.
#[inline(always)]
pub(crate) fn gate_grad<F: Real>(act: GateActivation, x: F) -> (F, F) {
    let (one, half) = (F::one(), F::c(0.5));
    let slope = match act {
        GateActivation::Silu => {
            let s = math::sigmoid(x);
            s * (x * (one - s) + one)
        }
        GateActivation::Gelu => {
            let cdf = half * (-x * F::c(std::f64::consts::FRAC_1_SQRT_2)).erfc();
            let pdf = (-half * x * x).exp() * F::c(1.0 / (2.0 * std::f64::consts::PI).sqrt());
            cdf + x * pdf
        }
        GateActivation::GeluTanh => {
            let (beta, kappa) = (F::c((2.0 / std::f64::consts::PI).sqrt()), F::c(0.044715));
            let s = math::sigmoid(tanh_arg(x));
            s + F::c(2.0) * x * (s * (one - s)) * (one + F::c(3.0) * kappa * x * x) * beta
        }
    };
    (gate(act, x), slope)
}
