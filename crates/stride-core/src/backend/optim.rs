//! Optimizer-update primitives: one Adam/AdamW step of one parameter, in one pass.
//!
//! The composed update (PyTorch's `_single_tensor_adam`: a `lerp_`, a `mul_`, an `addcmul_`,
//! a `sqrt`, a `div`, an `add_` and an `addcdiv_`) reads and writes the parameter's size
//! 18 times over seven launches; the fused one reads the four tensors once and writes three.
//! Its meaning is the composed one *bit for bit* in every float dtype: every intermediate the
//! composed path stores in a tensor is rounded to the parameter's dtype here too, each
//! scalar operand is rounded as the composed op rounds it, and everything else is computed
//! in the dtype's compute type (f32 for f32/f16/bf16, f64 for f64) without fused
//! multiply-adds. The [`Backend::adam`] default body *is* the composed path, run from the
//! backend's own elementwise primitives, so a backend without a fused kernel (the CPU) gives
//! the same bits.

use super::common::check::{check_extent, internal};
use super::contract::{backend_for, Backend};
use super::{BinaryOp, TernaryOp, UnaryOp, View};
use crate::debug::{self, Replay};
use crate::{with_dtype, DType, Element, Error, Layout, Result, Scalar, Storage};

/// The hyperparameters of one Adam (or AdamW) step, PyTorch's names; `step` counts this
/// step (1 for the first).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// AdamW: `p ← p·(1 − lr·weight_decay)` instead of adding `weight_decay·p` to the
    /// gradient.
    pub decoupled_weight_decay: bool,
    /// Ascend the gradient instead of descending it.
    pub maximize: bool,
    pub step: u64,
}

impl AdamStep {
    /// The scalars of the update, each as the composed op it stands for receives it: `T`
    /// means rounded to the parameter's dtype (a scalar operand of a binary op or `lerp`),
    /// `C` means kept as f64 and converted to the compute type by the kernel (the `value` of
    /// `addcmul`/`addcdiv`).
    pub(crate) fn scalars(&self, dtype: DType) -> AdamScalars {
        let step = self.step as f64;
        self.scalars_from(dtype, self.beta1.powf(step), self.beta2.powf(step))
    }
    /// [`AdamStep::scalars`] for a step counted on the device (a [`DeviceStep`] update): the
    /// powers `β^n` by squaring, the order the CUDA kernel multiplies in, so every device
    /// gets the same bits.
    pub(crate) fn device_step_scalars(&self, dtype: DType, n: u64) -> AdamScalars {
        self.scalars_from(
            dtype,
            pow_by_squaring(self.beta1, n),
            pow_by_squaring(self.beta2, n),
        )
    }
    fn scalars_from(&self, dtype: DType, beta1_pow: f64, beta2_pow: f64) -> AdamScalars {
        let t = |x: f64| with_dtype!(dtype, E => Scalar::Float(x).to_elem::<E>().to_f64());
        let bias_correction1 = 1.0 - beta1_pow;
        let bias_correction2 = 1.0 - beta2_pow;
        AdamScalars {
            decay: t(1.0 - self.lr * self.weight_decay),
            weight_decay: t(self.weight_decay),
            one_minus_beta1: t(1.0 - self.beta1),
            beta2: t(self.beta2),
            one_minus_beta2: 1.0 - self.beta2,
            bias_correction2_sqrt: t(bias_correction2.sqrt()),
            eps: t(self.eps),
            neg_step_size: -(self.lr / bias_correction1),
        }
    }
    /// Whether the gradient gets `weight_decay·p` added (Adam's L2 penalty).
    pub(crate) fn l2(&self) -> bool {
        self.weight_decay != 0.0 && !self.decoupled_weight_decay
    }
    /// Whether the parameter is first scaled by `1 − lr·weight_decay` (AdamW).
    pub(crate) fn decoupled(&self) -> bool {
        self.weight_decay != 0.0 && self.decoupled_weight_decay
    }
}

/// `b^n` by squaring (`pow_sq` in adam.cu multiplies in the same order).
pub(crate) fn pow_by_squaring(mut b: f64, mut n: u64) -> f64 {
    let mut r = 1.0;
    while n > 0 {
        if n & 1 == 1 {
            r *= b;
        }
        b *= b;
        n >>= 1;
    }
    r
}

/// [`AdamStep::scalars`]: every value is exactly representable in the compute type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AdamScalars {
    /// T(1 − lr·wd): AdamW's `p.mul_`.
    pub decay: f64,
    /// T(wd): Adam's `g + p·wd` (unused when wd is 1: that is `g + p`).
    pub weight_decay: f64,
    /// T(1 − β1): the weight of `m.lerp_(g, ·)`.
    pub one_minus_beta1: f64,
    /// T(β2): `v.mul_(·)`.
    pub beta2: f64,
    /// C(1 − β2): the value of `v.addcmul_(g, g, ·)`.
    pub one_minus_beta2: f64,
    /// T(√(1 − β2^step)): `sqrt(v).div(·)`.
    pub bias_correction2_sqrt: f64,
    /// T(eps): `denom.add_(·)`.
    pub eps: f64,
    /// C(−lr / (1 − β1^step)): the value of `p.addcdiv_(m, denom, ·)`.
    pub neg_step_size: f64,
}

/// One Adam step: `param`, `exp_avg`, `exp_avg_sq` (and `max_exp_avg_sq`: amsgrad) updated in
/// place through their layouts from `grad`. All five have one shape and one float dtype; the
/// written ones are non-overlapping and share no memory with each other or with `grad` (the
/// frontend checked).
pub(crate) fn adam(
    h: &AdamStep,
    param: View,
    grad: View,
    exp_avg: View,
    exp_avg_sq: View,
    max_exp_avg_sq: Option<View>,
) -> Result<()> {
    let op = "adam_step";
    check_views(
        op,
        &AdamViews {
            param,
            grad,
            exp_avg,
            exp_avg_sq,
            max_exp_avg_sq,
            device_step: None,
        },
    )?;
    let mut outputs = vec![param, exp_avg, exp_avg_sq];
    outputs.extend(max_exp_avg_sq);
    debug::primitive(op, Replay::SameDtype, &[grad], &outputs, |i, o| {
        let views: Vec<View> = o.iter().chain(i).copied().collect();
        let device = super::same_device(op, &views)?;
        backend_for(device).adam(h, o[0], i[0], o[1], o[2], o.get(3).copied())
    })
}

/// One parameter's operands of [`adam_multi`].
#[derive(Clone, Copy)]
pub(crate) struct AdamViews<'a> {
    pub param: View<'a>,
    pub grad: View<'a>,
    pub exp_avg: View<'a>,
    pub exp_avg_sq: View<'a>,
    pub max_exp_avg_sq: Option<View<'a>>,
    /// A step that may be skipped on the device (a gradient scaler's): see [`DeviceStep`].
    pub device_step: Option<DeviceStep<'a>>,
}

/// The device side of a step a gradient scaler may skip: `found_inf` (0-d f32, shared by the
/// step's parameters) nonzero skips the update, and `counter` (`[2]` f64, this parameter's
/// own) counts the steps taken. The step reads the count from slot `(h.step − 1) % 2` and
/// writes count + 1 (count + 0 when skipped) to the other slot: readers of one slot never
/// race the writer of the other within a launch. The bias corrections come from the count.
#[derive(Clone, Copy)]
pub(crate) struct DeviceStep<'a> {
    pub found_inf: View<'a>,
    pub counter: View<'a>,
}

impl DeviceStep<'_> {
    /// The slot step `h` reads its count from (it writes the other).
    pub(crate) fn read_slot(h: &AdamStep) -> usize {
        (h.step.saturating_sub(1) % 2) as usize
    }
}

/// One Adam step of many parameters on one device, each as [`adam`] steps it (every one with
/// `max_exp_avg_sq`, or none): a backend may take them in a few launches
/// ([`Backend::adam_multi`]).
pub(crate) fn adam_multi(h: &AdamStep, items: &[AdamViews]) -> Result<()> {
    let op = "adam_step";
    let Some(first) = items.first() else {
        return Ok(());
    };
    let amsgrad = first.max_exp_avg_sq.is_some();
    let on_device = first.device_step.is_some();
    let (mut inputs, mut outputs) = (vec![], vec![]);
    for it in items {
        if it.max_exp_avg_sq.is_some() != amsgrad || it.device_step.is_some() != on_device {
            return Err(internal(
                op,
                "amsgrad or the device step differs between the parameters of one step",
            ));
        }
        check_views(op, it)?;
        inputs.push(it.grad);
        outputs.extend([it.param, it.exp_avg, it.exp_avg_sq]);
        outputs.extend(it.max_exp_avg_sq);
        if let Some(d) = it.device_step {
            check_device_step(op, &d)?;
            inputs.push(d.found_inf);
            outputs.push(d.counter);
        }
    }
    let (per_in, per_out) = (
        1 + on_device as usize,
        3 + amsgrad as usize + on_device as usize,
    );
    debug::primitive(op, Replay::SameDtype, &inputs, &outputs, |i, o| {
        let views: Vec<View> = o.iter().chain(i).copied().collect();
        let device = super::same_device(op, &views)?;
        let items: Vec<AdamViews> = i
            .chunks(per_in)
            .zip(o.chunks(per_out))
            .map(|(i, o)| AdamViews {
                param: o[0],
                grad: i[0],
                exp_avg: o[1],
                exp_avg_sq: o[2],
                max_exp_avg_sq: if amsgrad { Some(o[3]) } else { None },
                device_step: on_device.then(|| DeviceStep {
                    found_inf: i[1],
                    counter: o[per_out - 1],
                }),
            })
            .collect();
        backend_for(device).adam_multi(h, &items)
    })
}

/// The flag is one f32 and the counter two f64, inside their storages.
fn check_device_step(op: &'static str, d: &DeviceStep) -> Result<()> {
    if d.found_inf.dtype != DType::F32
        || d.found_inf.layout.numel() != 1
        || d.counter.dtype != DType::F64
        || d.counter.layout.shape() != [2]
    {
        return Err(internal(op, "device step operands disagree"));
    }
    check_extent(op, &d.found_inf, 0)?;
    check_extent(op, &d.counter, 0)
}

/// One parameter's step counted on the device, from `b`'s primitives (the default body of
/// [`Backend::adam_multi`] for such a step): the flag and the count read back (no wait on the
/// CPU; a device backend runs its own kernel instead), the new count written, then the
/// composed update with the count's scalars unless the step is skipped.
pub(crate) fn composed_adam_device_step<B: Backend + ?Sized>(
    b: &B,
    h: &AdamStep,
    it: &AdamViews,
    d: &DeviceStep,
) -> Result<()> {
    let read_f64 = |v: &View, k: usize| -> Result<f64> {
        let mut buf = [0u8; 8];
        let at = v.layout.offset() + k * v.layout.strides()[0];
        b.read_bytes(v.storage, at, &mut buf)?;
        Ok(f64::from_ne_bytes(buf))
    };
    let mut flag = [0u8; 4];
    b.read_bytes(d.found_inf.storage, d.found_inf.layout.offset(), &mut flag)?;
    let skip = f32::from_ne_bytes(flag) != 0.0;
    let slot = DeviceStep::read_slot(h);
    let n = read_f64(&d.counter, slot)? + if skip { 0.0 } else { 1.0 };
    let other = Layout::new(
        vec![],
        vec![],
        d.counter.layout.offset() + (1 - slot) * d.counter.layout.strides()[0],
    );
    b.fill(
        View {
            storage: d.counter.storage,
            layout: &other,
            dtype: DType::F64,
        },
        Scalar::Float(n),
    )?;
    if skip {
        return Ok(());
    }
    let s = h.device_step_scalars(it.param.dtype, n as u64);
    composed_adam_with(
        b,
        h,
        &s,
        it.param,
        it.grad,
        it.exp_avg,
        it.exp_avg_sq,
        it.max_exp_avg_sq,
    )
}

/// Every operand of one parameter has its shape and float dtype and lies inside its storage.
fn check_views(op: &'static str, it: &AdamViews) -> Result<()> {
    let (param, shape) = (it.param, it.param.layout.shape());
    let all = [
        Some(it.param),
        Some(it.grad),
        Some(it.exp_avg),
        Some(it.exp_avg_sq),
        it.max_exp_avg_sq,
    ];
    for v in all.iter().flatten() {
        if v.layout.shape() != shape || v.dtype != param.dtype || !v.dtype.is_float() {
            return Err(internal(op, "operands disagree"));
        }
        check_extent(op, v, 0)?;
    }
    Ok(())
}

/// The composed update, from `b`'s elementwise primitives: the [`Backend::adam`] default body,
/// and the reference the fused kernels are checked against. The order and the dtypes of the
/// steps are stride-nn's `Adam` before the fused primitive existed (PyTorch's
/// `_single_tensor_adam`).
pub(crate) fn composed_adam<B: Backend + ?Sized>(
    b: &B,
    h: &AdamStep,
    param: View,
    grad: View,
    exp_avg: View,
    exp_avg_sq: View,
    max_exp_avg_sq: Option<View>,
) -> Result<()> {
    let s = h.scalars(param.dtype);
    composed_adam_with(b, h, &s, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq)
}

/// [`composed_adam`] with the step's scalars given.
#[allow(clippy::too_many_arguments)]
fn composed_adam_with<B: Backend + ?Sized>(
    b: &B,
    h: &AdamStep,
    s: &AdamScalars,
    param: View,
    grad: View,
    exp_avg: View,
    exp_avg_sq: View,
    max_exp_avg_sq: Option<View>,
) -> Result<()> {
    let (dtype, device) = (param.dtype, param.storage.device());
    let shape = param.layout.shape().to_vec();
    let dense = Layout::contiguous(&shape);
    let n = dense.numel();
    // scratch tensors of the composed path, dense
    let scratch = || b.alloc(device, dtype, n, false);
    fn on<'a>(storage: &'a Storage, layout: &'a Layout, dtype: DType) -> View<'a> {
        View {
            storage,
            layout,
            dtype,
        }
    }
    // a scalar operand: one element of `dtype`, broadcast to the shape (as `prepare` makes
    // it). The scalars take turns in one storage: each is consumed by the launch that follows
    // its fill, and a device runs its launches in order.
    let one = b.alloc(device, dtype, 1, false)?;
    let bcast = Layout::new(shape.clone(), vec![0; shape.len()], 0);
    let scalar = |x: f64| -> Result<View> {
        let v = View {
            storage: &one,
            layout: &bcast,
            dtype,
        };
        b.fill(v, Scalar::Float(x))?;
        Ok(v)
    };
    // the gradient the moments see: `grad`, or −grad (`neg`) and/or grad + wd·p (`sum`)
    let neg = if h.maximize { Some(scratch()?) } else { None };
    let sum = if h.l2() { Some(scratch()?) } else { None };
    let mut g = grad;
    if let Some(ns) = &neg {
        b.unary(UnaryOp::Neg, grad, on(ns, &dense, dtype))?;
        g = on(ns, &dense, dtype);
    }
    if h.decoupled() {
        b.binary(BinaryOp::Mul, param, scalar(s.decay)?, param)?;
    } else if let Some(ss) = &sum {
        if h.weight_decay == 1.0 {
            b.binary(BinaryOp::Add, g, param, on(ss, &dense, dtype))?;
        } else {
            let pw = scratch()?;
            let pwv = on(&pw, &dense, dtype);
            b.binary(BinaryOp::Mul, param, scalar(s.weight_decay)?, pwv)?;
            b.binary(BinaryOp::Add, g, pwv, on(ss, &dense, dtype))?;
        }
        g = on(ss, &dense, dtype);
    }
    b.ternary(
        TernaryOp::Lerp,
        exp_avg,
        g,
        scalar(s.one_minus_beta1)?,
        exp_avg,
    )?;
    b.binary(BinaryOp::Mul, exp_avg_sq, scalar(s.beta2)?, exp_avg_sq)?;
    let value = Scalar::Float(s.one_minus_beta2);
    b.ternary(TernaryOp::Addcmul(value), exp_avg_sq, g, g, exp_avg_sq)?;
    let root = scratch()?;
    match max_exp_avg_sq {
        Some(vmax) => {
            b.binary(BinaryOp::Maximum, vmax, exp_avg_sq, vmax)?;
            b.unary(UnaryOp::Sqrt, vmax, on(&root, &dense, dtype))?;
        }
        None => b.unary(UnaryOp::Sqrt, exp_avg_sq, on(&root, &dense, dtype))?,
    }
    let denom = scratch()?;
    b.binary(
        BinaryOp::Div,
        on(&root, &dense, dtype),
        scalar(s.bias_correction2_sqrt)?,
        on(&denom, &dense, dtype),
    )?;
    b.binary(
        BinaryOp::Add,
        on(&denom, &dense, dtype),
        scalar(s.eps)?,
        on(&denom, &dense, dtype),
    )?;
    let value = Scalar::Float(s.neg_step_size);
    b.ternary(
        TernaryOp::Addcdiv(value),
        param,
        exp_avg,
        on(&denom, &dense, dtype),
        param,
    )
}

/// Refuses operands the update cannot take: different devices, shapes or dtypes, a non-float
/// dtype, a written tensor with an overlapping layout, or two tensors sharing memory.
pub(crate) fn check_adam_operands(
    op: &'static str,
    written: &[(&str, &crate::Tensor)],
    grad: &crate::Tensor,
) -> Result<()> {
    let (pname, p) = written[0];
    if !p.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: p.dtype(),
            hint: "; optimizers update float parameters".into(),
        });
    }
    let all = written.iter().copied().chain([("grad", grad)]);
    for (name, t) in all.clone() {
        if t.device() != p.device() {
            return Err(Error::DeviceMismatch {
                op,
                a: p.device(),
                b: t.device(),
            });
        }
        if t.shape() != p.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: p.shape().to_vec(),
                rhs: t.shape().to_vec(),
                why: format!("differ: {name} (second) must have the shape of {pname} (first)"),
            });
        }
        if t.dtype() != p.dtype() {
            return Err(Error::invalid(
                op,
                format!(
                    "{name} is {} but {pname} is {}; every operand must have the parameter's dtype",
                    t.dtype(),
                    p.dtype()
                ),
            ));
        }
    }
    for (name, t) in written {
        if !t.layout().is_non_overlapping() {
            return Err(Error::invalid(
                op,
                format!(
                    "{name} (shape {:?}, strides {:?}) has elements that share memory and cannot be updated in place",
                    t.shape(),
                    t.stride()
                ),
            ));
        }
    }
    let all: Vec<(&str, &crate::Tensor)> = all.collect();
    for (i, (a, ta)) in all.iter().enumerate() {
        for (b, tb) in &all[i + 1..] {
            if ta.numel() > 0 && tb.numel() > 0 && overlap(ta, tb) {
                return Err(Error::invalid(
                    op,
                    format!("{a} and {b} share memory; each must have its own"),
                ));
            }
        }
    }
    Ok(())
}

/// Whether two tensors' element ranges in one storage intersect.
fn overlap(a: &crate::Tensor, b: &crate::Tensor) -> bool {
    let range = |t: &crate::Tensor| (t.layout().offset(), t.layout().storage_extent());
    let ((a0, a1), (b0, b1)) = (range(a), range(b));
    a.storage().same(b.storage()) && a0 < b1 && b0 < a1
}
