//! Fused optimizer updates: [`Tensor::adam_step_`] and, for many parameters at once,
//! [`fused_adam_`] (and [`fused_adam_skippable_`], a gradient scaler's step).

use crate::autograd::record::needs_grad;
use crate::backend::optim::{self, check_adam_operands, AdamStep, AdamViews, DeviceStep};
use crate::backend::View;
use crate::{Error, Result, Tensor};

fn view(t: &Tensor) -> View<'_> {
    View {
        storage: t.storage(),
        layout: t.layout(),
        dtype: t.dtype(),
    }
}

impl Tensor {
    /// One Adam (or AdamW) step of the parameter `self`, in place: `exp_avg`, `exp_avg_sq`
    /// (and `max_exp_avg_sq`, for amsgrad) are updated from `grad`, then `self`. PyTorch's
    /// `_single_tensor_adam` update, one pass over memory (on CUDA one kernel; elsewhere the
    /// backend's composed ops):
    ///
    /// ```text
    /// g ← maximize ? −grad : grad
    /// AdamW: p ← p·(1 − lr·wd)            Adam (wd ≠ 0): g ← g + wd·p
    /// m ← lerp(m, g, 1 − β1);  v ← v·β2 + (1 − β2)·g·g
    /// amsgrad: vmax ← max(vmax, v), v̂ = vmax   else v̂ = v
    /// p ← p − lr/(1 − β1^step) · m / (√v̂ / √(1 − β2^step) + eps)
    /// ```
    ///
    /// The result is bit for bit the composed ops' (`lerp_`, `mul_`, `addcmul_`, `sqrt`,
    /// `div`, `add_`, `addcdiv_` in the parameter's dtype) on every device and in every
    /// layout. Every operand has `self`'s shape, dtype (a float) and device; the four updated
    /// tensors must not overlap themselves or share memory with each other or with `grad`.
    /// Not recorded by autograd (run it under `no_grad`, as optimizers do).
    ///
    /// ```
    /// use stride_core::{AdamStep, MemoryFormat, Tensor};
    /// let p = Tensor::from_vec(vec![1.0f32, -2.0], [2])?;
    /// let g = Tensor::from_vec(vec![0.5f32, 0.25], [2])?;
    /// let (m, v) = (p.zeros_like(MemoryFormat::Preserve)?, p.zeros_like(MemoryFormat::Preserve)?);
    /// let h = AdamStep { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0,
    ///                    decoupled_weight_decay: false, maximize: false, step: 1 };
    /// p.adam_step_(&g, &m, &v, None, &h)?;
    /// // the first step moves each weight by about lr against its gradient's sign
    /// let w = p.to_vec::<f32>()?;
    /// assert!((w[0] - 0.9).abs() < 1e-5 && (w[1] + 2.1).abs() < 1e-5);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn adam_step_(
        &self,
        grad: &Tensor,
        exp_avg: &Tensor,
        exp_avg_sq: &Tensor,
        max_exp_avg_sq: Option<&Tensor>,
        h: &AdamStep,
    ) -> Result<()> {
        let op = "adam_step_";
        let written = check_step(op, self, grad, exp_avg, exp_avg_sq, max_exp_avg_sq)?;
        if self.numel() == 0 {
            return Ok(());
        }
        optim::adam(
            h,
            view(self),
            view(grad),
            view(exp_avg),
            view(exp_avg_sq),
            max_exp_avg_sq.map(view),
        )?;
        for (_, t) in &written {
            t.storage().bump_version();
        }
        Ok(())
    }
}

/// Refuses what one parameter's step cannot take (operands requiring grad under grad mode,
/// and [`check_adam_operands`]); the tensors the step writes, named.
fn check_step<'a>(
    op: &'static str,
    param: &'a Tensor,
    grad: &'a Tensor,
    exp_avg: &'a Tensor,
    exp_avg_sq: &'a Tensor,
    max_exp_avg_sq: Option<&'a Tensor>,
) -> Result<Vec<(&'static str, &'a Tensor)>> {
    let mut written = vec![
        ("param", param),
        ("exp_avg", exp_avg),
        ("exp_avg_sq", exp_avg_sq),
    ];
    written.extend(max_exp_avg_sq.map(|t| ("max_exp_avg_sq", t)));
    let all: Vec<&Tensor> = written.iter().map(|w| w.1).chain([grad]).collect();
    if needs_grad(&all) {
        return Err(Error::invalid(
            op,
            "an operand requires grad and grad mode is on; run optimizer updates under no_grad()",
        ));
    }
    check_adam_operands(op, &written, grad)?;
    Ok(written)
}

/// One Adam (or AdamW) step of many parameters at once, PyTorch's `torch._fused_adam_` (what
/// `Adam(..., fused=True)` runs): parameter `k` is updated from `grads[k]` with the moments
/// `exp_avgs[k]`, `exp_avg_sqs[k]` (and `max_exp_avg_sqs[k]`: amsgrad) exactly as
/// [`Tensor::adam_step_`] would update it — the same bits — but on CUDA the parameters whose
/// operands are dense (every one with the parameter's strides, no gaps) go up to 36 to one
/// launch, so a model's hundreds of small tensors do not cost a launch each; any other layout
/// takes its own kernel. Every list has one entry per parameter; all parameters are on one
/// device; each parameter's operands follow [`Tensor::adam_step_`]'s rules, and no tensor a
/// parameter's step writes may share memory (by element range) with another parameter's
/// operands — they are updated at once. `stride_nn`'s
/// `Adam` steps every parameter of a group through this.
///
/// ```
/// use stride_core::{fused_adam_, AdamStep, MemoryFormat, Tensor};
/// let a = Tensor::from_vec(vec![1.0f32, -2.0], [2])?;
/// let b = Tensor::from_vec(vec![3.0f32], [1])?;
/// let zeros = |t: &Tensor| t.zeros_like(MemoryFormat::Preserve);
/// let (ga, gb) = (Tensor::from_vec(vec![0.5f32, 0.25], [2])?, Tensor::from_vec(vec![-1.0f32], [1])?);
/// let (ma, va, mb, vb) = (zeros(&a)?, zeros(&a)?, zeros(&b)?, zeros(&b)?);
/// let h = AdamStep { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0,
///                    decoupled_weight_decay: false, maximize: false, step: 1 };
/// fused_adam_(&[&a, &b], &[&ga, &gb], &[&ma, &mb], &[&va, &vb], None, &h)?;
/// // the first step moves each weight by about lr against its gradient's sign
/// assert!((a.to_vec::<f32>()?[0] - 0.9).abs() < 1e-5 && (b.to_vec::<f32>()?[0] - 3.1).abs() < 1e-5);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn fused_adam_(
    params: &[&Tensor],
    grads: &[&Tensor],
    exp_avgs: &[&Tensor],
    exp_avg_sqs: &[&Tensor],
    max_exp_avg_sqs: Option<&[&Tensor]>,
    h: &AdamStep,
) -> Result<()> {
    let lists = [params, grads, exp_avgs, exp_avg_sqs];
    fused("fused_adam_", lists, max_exp_avg_sqs, h, None)
}

/// The device side of a step that may be skipped: see [`fused_adam_skippable_`].
#[derive(Clone, Copy)]
pub struct SkippableStep<'a> {
    /// A 0-d f32 tensor on the parameters' device: nonzero skips the whole step (a gradient
    /// scaler's `found_inf`).
    pub found_inf: &'a Tensor,
    /// One step counter per parameter: a contiguous `[2]` f64 tensor on the device, zeros
    /// before the first step (see [`fused_adam_skippable_`] for the slots).
    pub counters: &'a [&'a Tensor],
}

/// [`fused_adam_`] for a step that is skipped, on the device, when `skip.found_inf` is
/// nonzero — a gradient scaler's step, which must not wait for the host to learn whether the
/// gradients overflowed. The step counts live on the device too: parameter `k`'s count is read
/// from `counters[k]` at slot `(h.step − 1) % 2` and the count after this step (one more, or
/// the same when skipped) is written to the other slot, so `h.step` counts the steps
/// *attempted* and the count the steps *taken*; the bias corrections use the count taken, as
/// PyTorch's fused Adam with a `GradScaler` does. Skipped, nothing else is written.
///
/// The powers `β^n` of the bias corrections are taken by repeated squaring on every device
/// (the CPU and CUDA give the same bits); [`fused_adam_`] uses the host's `powf`, like
/// PyTorch's single-tensor Adam, so the two can differ in the last bit of an f64 scalar.
///
/// ```
/// use stride_core::{fused_adam_skippable_, AdamStep, DType, Device, MemoryFormat, SkippableStep, Tensor};
/// let p = Tensor::from_vec(vec![1.0f32, -2.0], [2])?;
/// let g = Tensor::from_vec(vec![0.5f32, 0.25], [2])?;
/// let (m, v) = (p.zeros_like(MemoryFormat::Preserve)?, p.zeros_like(MemoryFormat::Preserve)?);
/// let counter = Tensor::zeros([2], DType::F64, &Device::Cpu)?;
/// let mut h = AdamStep { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0,
///                        decoupled_weight_decay: false, maximize: false, step: 1 };
/// let found = Tensor::scalar(1.0, DType::F32, &Device::Cpu)?;  // overflow: skipped
/// fused_adam_skippable_(&[&p], &[&g], &[&m], &[&v], None, &h,
///                       SkippableStep { found_inf: &found, counters: &[&counter] })?;
/// assert_eq!(p.to_vec::<f32>()?, vec![1.0, -2.0]);
/// assert_eq!(counter.to_vec::<f64>()?, vec![0.0, 0.0]);   // no step taken
/// h.step = 2;
/// found.fill_(0.0)?;
/// fused_adam_skippable_(&[&p], &[&g], &[&m], &[&v], None, &h,
///                       SkippableStep { found_inf: &found, counters: &[&counter] })?;
/// assert_eq!(counter.to_vec::<f64>()?, vec![1.0, 0.0]);   // the first step taken
/// assert!((p.to_vec::<f32>()?[0] - 0.9).abs() < 1e-5);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn fused_adam_skippable_(
    params: &[&Tensor],
    grads: &[&Tensor],
    exp_avgs: &[&Tensor],
    exp_avg_sqs: &[&Tensor],
    max_exp_avg_sqs: Option<&[&Tensor]>,
    h: &AdamStep,
    skip: SkippableStep,
) -> Result<()> {
    let lists = [params, grads, exp_avgs, exp_avg_sqs];
    fused(
        "fused_adam_skippable_",
        lists,
        max_exp_avg_sqs,
        h,
        Some(skip),
    )
}

fn fused(
    op: &'static str,
    [params, grads, exp_avgs, exp_avg_sqs]: [&[&Tensor]; 4],
    max_exp_avg_sqs: Option<&[&Tensor]>,
    h: &AdamStep,
    skip: Option<SkippableStep>,
) -> Result<()> {
    let n = params.len();
    let lens = [
        ("grads", grads.len()),
        ("exp_avgs", exp_avgs.len()),
        ("exp_avg_sqs", exp_avg_sqs.len()),
        ("max_exp_avg_sqs", max_exp_avg_sqs.map_or(n, |m| m.len())),
        ("counters", skip.map_or(n, |s| s.counters.len())),
    ];
    for (what, len) in lens {
        if len != n {
            return Err(Error::invalid(
                op,
                format!(
                    "{n} parameters but {len} {what}: every list needs one entry per parameter"
                ),
            ));
        }
    }
    if skip.is_some() && h.step == 0 {
        return Err(Error::invalid(
            op,
            "step counts the steps attempted, from 1 for the first; got 0",
        ));
    }
    let mut items = Vec::with_capacity(n);
    let mut empties = vec![];
    let mut written = vec![];
    // (storage, first element, one past the last) of every written tensor and every gradient,
    // with its parameter: one launch updates them all at once, so no parameter's written
    // tensors may share memory with another's operands (within one, check_step checks)
    let mut writes: Vec<(u64, usize, usize, usize)> = vec![];
    let mut reads: Vec<(u64, usize, usize, usize)> = vec![];
    let range = |t: &Tensor, k: usize| {
        let l = t.layout();
        (t.storage().id(), l.offset(), l.storage_extent(), k)
    };
    for k in 0..n {
        let vmax = max_exp_avg_sqs.map(|m| m[k]);
        let w = check_step(op, params[k], grads[k], exp_avgs[k], exp_avg_sqs[k], vmax)?;
        if params[k].device() != params[0].device() {
            return Err(Error::DeviceMismatch {
                op,
                a: params[0].device(),
                b: params[k].device(),
            });
        }
        if let Some(s) = &skip {
            check_skippable(op, s, k, params[k])?;
            writes.push(range(s.counters[k], k));
            written.push(("counter", s.counters[k]));
        }
        if params[k].numel() == 0 {
            empties.push(k);
            continue;
        }
        writes.extend(w.iter().map(|(_, t)| range(t, k)));
        reads.push(range(grads[k], k));
        items.push(AdamViews {
            param: view(params[k]),
            grad: view(grads[k]),
            exp_avg: view(exp_avgs[k]),
            exp_avg_sq: view(exp_avg_sqs[k]),
            max_exp_avg_sq: vmax.map(view),
            device_step: skip.map(|s| DeviceStep {
                found_inf: view(s.found_inf),
                counter: view(s.counters[k]),
            }),
        });
        written.extend(w);
    }
    if let Some(s) = &skip {
        // the flag is read by every parameter's step: none may write it
        let (fs, fb, fe, _) = range(s.found_inf, 0);
        if let Some(w) = writes.iter().find(|w| w.0 == fs && w.1 < fe && fb < w.2) {
            return Err(Error::invalid(
                op,
                format!(
                    "found_inf shares memory with a tensor parameter {}'s step writes",
                    w.3
                ),
            ));
        }
    }
    check_disjoint(op, writes, &reads)?;
    if let Some(s) = &skip {
        // an empty parameter has nothing to update, but its count moves as any other's
        for &k in &empties {
            advance_counter(s, k, h)?;
        }
    }
    optim::adam_multi(h, &items)?;
    for (_, t) in &written {
        t.storage().bump_version();
    }
    Ok(())
}

/// Parameter `k`'s count after this step, with tensor ops (an empty parameter's step).
fn advance_counter(s: &SkippableStep, k: usize, h: &AdamStep) -> Result<()> {
    let slot = DeviceStep::read_slot(h) as i64;
    let c = s.counters[k];
    let taken = s.found_inf.eq(0.0)?.to_dtype(crate::DType::F64)?;
    c.select(0, 1 - slot)?
        .copy_(&c.select(0, slot)?.add(&taken)?)?;
    Ok(())
}

/// The flag and parameter `k`'s counter are what [`SkippableStep`] says.
fn check_skippable(op: &'static str, s: &SkippableStep, k: usize, param: &Tensor) -> Result<()> {
    let (f, c) = (s.found_inf, s.counters[k]);
    if f.dtype() != crate::DType::F32 || f.dim() != 0 {
        return Err(Error::invalid(
            op,
            format!(
                "found_inf must be a 0-d f32 tensor, got {} of shape {:?}",
                f.dtype(),
                f.shape()
            ),
        ));
    }
    if c.dtype() != crate::DType::F64 || c.shape() != [2] || !c.is_contiguous() {
        return Err(Error::invalid(
            op,
            format!(
                "counter {k} must be a contiguous [2] f64 tensor, got {} of shape {:?}",
                c.dtype(),
                c.shape()
            ),
        ));
    }
    for t in [f, c] {
        if t.device() != param.device() {
            return Err(Error::DeviceMismatch {
                op,
                a: param.device(),
                b: t.device(),
            });
        }
    }
    if needs_grad(&[f, c]) {
        return Err(Error::invalid(
            op,
            "found_inf or a counter requires grad and grad mode is on; run optimizer updates under no_grad()",
        ));
    }
    Ok(())
}

/// Refuses a multi-parameter step where a tensor one parameter's step writes shares memory
/// with another parameter's written tensor or gradient. `writes`/`reads` are (storage, start,
/// end, parameter); O(n log n): the written ranges sorted, then each gradient looked up.
fn check_disjoint(
    op: &'static str,
    mut writes: Vec<(u64, usize, usize, usize)>,
    reads: &[(u64, usize, usize, usize)],
) -> Result<()> {
    let clash = |a: usize, b: usize| {
        Error::invalid(
            op,
            format!(
                "parameters {} and {} share memory (a parameter, moment or gradient of one is written by the other's step); each parameter needs its own tensors",
                a.min(b),
                a.max(b)
            ),
        )
    };
    writes.sort_unstable();
    // written ranges of one parameter never overlap (check_step), so any overlap between
    // neighbours in (storage, start) order is between two parameters
    for pair in writes.windows(2) {
        let ((s0, _, e0, k0), (s1, b1, _, k1)) = (pair[0], pair[1]);
        if s0 == s1 && b1 < e0 && k0 != k1 {
            return Err(clash(k0, k1));
        }
    }
    for &(s, b, e, k) in reads {
        // the last written range of storage `s` starting before `e`
        let i = writes.partition_point(|w| (w.0, w.1) < (s, e));
        if let Some(&(ws, _, we, wk)) = i.checked_sub(1).map(|i| &writes[i]) {
            if ws == s && we > b && wk != k {
                return Err(clash(k, wk));
            }
        }
    }
    Ok(())
}
