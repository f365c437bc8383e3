//! Loss functions with PyTorch's semantics and reductions (`torch.nn.functional`), composed
//! from stride-core's differentiable ops so every one has gradients. f16/bf16 inputs compute
//! in f32 and the loss is rounded once to the input dtype (`in_compute_dtype`), as PyTorch.
//!
//! ```
//! use stride_nn::loss::{cross_entropy, CrossEntropy, Reduction};
//! use stride_core::Tensor;
//! let logits = Tensor::from_vec(vec![2.0f64, 0.0, 0.0, 0.0, 2.0, 0.0], [2, 3])?;
//! let target = Tensor::from_vec(vec![0i64, 1], [2])?;
//! let l = cross_entropy(&logits, &target, &CrossEntropy::default())?;
//! let expected = -(2f64.exp() / (2f64.exp() + 2.0)).ln();
//! assert!((l.item::<f64>()? - expected).abs() < 1e-12);
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::invalid;
use stride_core::autocast::autocast_inputs;
use stride_core::{in_compute_dtype, DType, Error, Result, Tensor};

/// How per-element losses are combined (PyTorch's `reduction=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reduction {
    /// Per-element losses.
    None,
    /// Their mean (the default).
    #[default]
    Mean,
    /// Their sum.
    Sum,
}

fn reduce(loss: Tensor, r: Reduction) -> Result<Tensor> {
    match r {
        Reduction::None => Ok(loss),
        Reduction::Mean => loss.mean(),
        Reduction::Sum => loss.sum(),
    }
}

fn same_shape(op: &'static str, input: &Tensor, target: &Tensor) -> Result<()> {
    if input.shape() != target.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: input.shape().to_vec(),
            rhs: target.shape().to_vec(),
            why: "differ: input (first) and target (second) must have the same shape (PyTorch broadcasts them with a warning; stride refuses — broadcast the target explicitly if you mean it)".into(),
        });
    }
    Ok(())
}

fn float_input(op: &'static str, t: &Tensor, what: &str) -> Result<()> {
    if !t.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: t.dtype(),
            hint: format!(" for the {what}; it must be a floating-point tensor"),
        });
    }
    Ok(())
}

/// Mean squared error `(input − target)²`.
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    if let Some(c) = autocast_inputs("mse_loss", &[input, target])? {
        return mse_loss(&c.tensors[0], &c.tensors[1], reduction);
    }
    same_shape("mse_loss", input, target)?;
    in_compute_dtype(&[input, target], |t| {
        reduce(t[0].sub(&t[1])?.square()?, reduction)
    })
}

/// Mean absolute error `|input − target|`.
pub fn l1_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    if let Some(c) = autocast_inputs("l1_loss", &[input, target])? {
        return l1_loss(&c.tensors[0], &c.tensors[1], reduction);
    }
    same_shape("l1_loss", input, target)?;
    in_compute_dtype(&[input, target], |t| {
        reduce(t[0].sub(&t[1])?.abs()?, reduction)
    })
}

/// Huber-like loss: `0.5·d²/beta` where `|d| < beta`, else `|d| − 0.5·beta` (`beta = 0` is
/// the L1 loss), as PyTorch's `smooth_l1_loss`.
pub fn smooth_l1_loss(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    beta: f64,
) -> Result<Tensor> {
    if let Some(c) = autocast_inputs("smooth_l1_loss", &[input, target])? {
        return smooth_l1_loss(&c.tensors[0], &c.tensors[1], reduction, beta);
    }
    same_shape("smooth_l1_loss", input, target)?;
    // as PyTorch ("not implemented for 'Long'"): with beta > 0 the integer difference would
    // silently promote to float through the scalar arithmetic
    float_input("smooth_l1_loss", input, "input")?;
    if !(beta >= 0.0) {
        return Err(invalid(
            "smooth_l1_loss",
            format!("beta must be non-negative, got {beta}"),
        ));
    }
    in_compute_dtype(&[input, target], |t| {
        let z = t[0].sub(&t[1])?.abs()?;
        if beta == 0.0 {
            return reduce(z, reduction);
        }
        let quad = z.square()?.mul(0.5 / beta)?;
        let lin = z.sub(0.5 * beta)?;
        reduce(z.lt(beta)?.where_cond(&quad, &lin)?, reduction)
    })
}

/// Options of [`cross_entropy`] and [`nll_loss`] (PyTorch's keyword arguments and defaults).
#[derive(Debug, Clone)]
pub struct CrossEntropy {
    /// A manual rescaling weight per class, shape `(C,)`.
    pub weight: Option<Tensor>,
    /// Targets equal to this class index contribute nothing (and don't count in the mean).
    pub ignore_index: i64,
    pub reduction: Reduction,
    /// ε in `[0, 1]`: the target becomes `(1 − ε)·one_hot + ε/C`.
    pub label_smoothing: f64,
    /// λ ≥ 0 (not in PyTorch; PaLM's z-loss): `λ·logsumexp(input)²` is added to each
    /// non-ignored position's loss, which keeps the logits from drifting. Class-index targets
    /// without `weight` only.
    pub z_loss: f64,
}
impl Default for CrossEntropy {
    fn default() -> Self {
        CrossEntropy {
            weight: None,
            ignore_index: -100,
            reduction: Reduction::Mean,
            label_smoothing: 0.0,
            z_loss: 0.0,
        }
    }
}

/// The class dim of an input of shape `(C)`, `(N, C)` or `(N, C, d1, …)`.
fn class_dim(op: &'static str, input: &Tensor) -> Result<usize> {
    match input.dim() {
        0 => Err(invalid(
            op,
            "the input must have shape (C), (N, C) or (N, C, d1, ...), got a 0-d tensor",
        )),
        1 => Ok(0),
        _ => Ok(1),
    }
}

/// The per-class weight viewed to broadcast along the class dim.
fn weight_view(op: &'static str, w: &Tensor, input: &Tensor, cd: usize) -> Result<Tensor> {
    let c = input.shape()[cd];
    if w.shape() != [c] {
        return Err(invalid(
            op,
            format!(
                "weight must have shape [{c}] (one entry per class), got {:?}",
                w.shape()
            ),
        ));
    }
    let mut shape = vec![1i64; input.dim()];
    shape[cd] = c as i64;
    w.to_dtype(input.dtype())?.reshape(&shape)
}

/// The pieces of an index-target loss: a one-hot mask (class dim kept), the valid mask and
/// the per-element weights `w[target]` (0 where ignored).
struct Picked {
    onehot: Tensor,
    valid: Tensor,
    w_n: Tensor,
}

/// The shape class-index targets must have (the input's without the class dim `cd`), checked
/// against `target`'s.
fn target_shape(
    op: &'static str,
    input: &Tensor,
    target: &Tensor,
    cd: usize,
) -> Result<Vec<usize>> {
    let mut expected = input.shape().to_vec();
    expected.remove(cd);
    if target.shape() != expected.as_slice() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: input.shape().to_vec(),
            rhs: target.shape().to_vec(),
            why: format!("don't fit: for class-index targets the target must have the input's shape without the class dim, {expected:?}"),
        });
    }
    Ok(expected)
}

fn pick(op: &'static str, input: &Tensor, target: &Tensor, o: &CrossEntropy) -> Result<Picked> {
    let cd = class_dim(op, input)?;
    if !matches!(
        target.dtype(),
        DType::I64 | DType::I32 | DType::U8 | DType::I8 | DType::U32
    ) {
        return Err(Error::UnsupportedDType {
            op,
            dtype: target.dtype(),
            hint: " for class-index targets; they must be an integer tensor (use i64), or have the input's shape for class probabilities".into(),
        });
    }
    target_shape(op, input, target, cd)?;
    let c = input.shape()[cd];
    let t = target.to_dtype(DType::I64)?;
    let valid = t.ne(o.ignore_index)?;
    // every non-ignored target must be a class
    let bad = valid.logical_and(&t.lt(0)?.logical_or(&t.ge(c as i64)?)?)?;
    if bad.any()?.item::<bool>()? {
        let first = t.index_mask(&bad)?.to_vec::<i64>()?[0];
        return Err(Error::IndexOutOfRange {
            op,
            index: first,
            dim: cd,
            size: c,
        });
    }
    let mut cshape = vec![1i64; input.dim()];
    cshape[cd] = c as i64;
    let classes = Tensor::arange(0, c as i64, &input.device())?.reshape(&cshape)?;
    let onehot = t
        .unsqueeze(cd as i64)?
        .eq(&classes)?
        .logical_and(&valid.unsqueeze(cd as i64)?)?;
    let validf = valid.to_dtype(input.dtype())?;
    let w_n = match &o.weight {
        Some(w) => {
            let wv = weight_view(op, w, input, cd)?;
            onehot.where_cond(&wv, 0.0)?.sum_dims(&[cd as i64], false)?
        }
        None => validf,
    };
    Ok(Picked { onehot, valid, w_n })
}

/// Negative log-likelihood of log-probabilities `input` (`(C)`, `(N, C)` or `(N, C, d…)`) at
/// integer class `target`s, with PyTorch's `weight`, `ignore_index` and reductions (the mean
/// divides by the summed weights of the non-ignored targets). `label_smoothing` is not used.
pub fn nll_loss(input: &Tensor, target: &Tensor, o: &CrossEntropy) -> Result<Tensor> {
    if let Some(c) = autocast_inputs("nll_loss", &[input, target])? {
        return nll_loss(&c.tensors[0], &c.tensors[1], o);
    }
    float_input("nll_loss", input, "input")?;
    in_compute_dtype(&[input, target], |t| nll_loss_impl(&t[0], &t[1], o))
}

fn nll_loss_impl(input: &Tensor, target: &Tensor, o: &CrossEntropy) -> Result<Tensor> {
    let op = "nll_loss";
    let p = pick(op, input, target, o)?;
    let cd = class_dim(op, input)? as i64;
    let picked = p.onehot.where_cond(input, 0.0)?.sum_dims(&[cd], false)?;
    let loss = picked.mul(&p.w_n)?.neg()?;
    match o.reduction {
        Reduction::None => Ok(loss),
        Reduction::Sum => loss.sum(),
        Reduction::Mean => loss.sum()?.div(&p.w_n.sum()?),
    }
}

/// Cross entropy of unnormalised `input` logits (`(C)`, `(N, C)` or `(N, C, d…)`) against
/// either integer class indices (the input's shape without the class dim) or class
/// probabilities (the input's shape, float), with PyTorch's `weight`, `ignore_index`,
/// `label_smoothing` and reductions, and a z-loss option.
///
/// Class-index targets without `weight` take the fused kernel
/// ([`Tensor::cross_entropy_rows`]): the logits are read once forward and once backward and
/// the softmax is never stored — what a large vocabulary needs — and a bad target is checked
/// on the device (no host wait; on CUDA the error comes at the next read). The other forms are
/// composed from `log_softmax`.
///
/// ```
/// use stride_core::Tensor;
/// use stride_nn::loss::{cross_entropy, CrossEntropy};
/// let logits = Tensor::from_vec(vec![2.0f32, 0.0, 0.0, 0.0, 2.0, 0.0], [2, 3])?;
/// let target = Tensor::from_vec(vec![0i64, 1], [2])?;
/// let loss = cross_entropy(&logits, &target, &CrossEntropy::default())?;   // mean of 2 rows
/// let want = (1.0f32 + 2.0 * (-2.0f32).exp()).ln();
/// assert!((loss.item::<f32>()? - want).abs() < 1e-6);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn cross_entropy(input: &Tensor, target: &Tensor, o: &CrossEntropy) -> Result<Tensor> {
    if let Some(c) = autocast_inputs("cross_entropy", &[input, target])? {
        return cross_entropy(&c.tensors[0], &c.tensors[1], o);
    }
    float_input("cross_entropy", input, "input")?;
    if o.weight.is_none() && !target.dtype().is_float() && target.dtype() != DType::Bool {
        return fused_cross_entropy(input, target, o);
    }
    if o.z_loss != 0.0 {
        return Err(invalid(
            "cross_entropy",
            "z_loss is supported for class-index targets without a class weight",
        ));
    }
    in_compute_dtype(&[input, target], |t| cross_entropy_impl(&t[0], &t[1], o))
}

/// [`cross_entropy`] through the fused kernel: the class dim moved last, the positions as
/// rows, then the reduction (the mean over the non-ignored positions, counted on the device).
fn fused_cross_entropy(input: &Tensor, target: &Tensor, o: &CrossEntropy) -> Result<Tensor> {
    let op = "cross_entropy";
    let cd = class_dim(op, input)?;
    let c = input.shape()[cd];
    let expected = target_shape(op, input, target, cd)?;
    let mut last: Vec<i64> = (0..input.dim() as i64)
        .filter(|&d| d != cd as i64)
        .collect();
    last.push(cd as i64);
    let rows = input.permute(&last)?.reshape(&[-1, c as i64])?;
    let t = target.to_dtype(DType::I64)?.reshape(&[-1])?;
    let h = stride_core::CrossEntropyRows {
        ignore_index: o.ignore_index,
        label_smoothing: o.label_smoothing,
        z_loss: o.z_loss,
    };
    let per = rows.cross_entropy_rows(&t, &h)?;
    let out = match o.reduction {
        Reduction::None => per.reshape(&expected.iter().map(|&d| d as i64).collect::<Vec<_>>())?,
        Reduction::Sum => per.sum()?,
        Reduction::Mean => per
            .sum()?
            .div(&t.ne(o.ignore_index)?.to_dtype(per.dtype())?.sum()?)?,
    };
    out.to_dtype(input.dtype())
}

fn cross_entropy_impl(input: &Tensor, target: &Tensor, o: &CrossEntropy) -> Result<Tensor> {
    let op = "cross_entropy";
    if !(0.0..=1.0).contains(&o.label_smoothing) {
        return Err(invalid(
            op,
            format!(
                "label_smoothing must be in [0, 1], got {}",
                o.label_smoothing
            ),
        ));
    }
    let cd = class_dim(op, input)?;
    let c = input.shape()[cd];
    let logp = input.log_softmax(cd as i64)?;
    if target.dtype().is_float() {
        // class probabilities
        same_shape(op, input, target)?;
        if o.ignore_index >= 0 {
            return Err(invalid(
                op,
                "ignore_index is not supported for class-probability targets",
            ));
        }
        let tgt = if o.label_smoothing > 0.0 {
            target
                .mul(1.0 - o.label_smoothing)?
                .add(o.label_smoothing / c as f64)?
        } else {
            target.clone()
        };
        let mut prod = logp.mul(&tgt)?;
        if let Some(w) = &o.weight {
            prod = prod.mul(&weight_view(op, w, input, cd)?)?;
        }
        return match o.reduction {
            Reduction::None => prod.sum_dims(&[cd as i64], false)?.neg(),
            Reduction::Sum => prod.sum()?.neg(),
            Reduction::Mean => prod.sum()?.neg()?.div((input.numel() / c.max(1)) as f64),
        };
    }
    let nll = nll_loss_impl(&logp, target, o)?;
    if o.label_smoothing == 0.0 {
        return Ok(nll);
    }
    let p = pick(op, input, target, o)?;
    let weighted = match &o.weight {
        Some(w) => logp.mul(&weight_view(op, w, input, cd)?)?,
        None => logp.clone(),
    };
    let smooth = weighted
        .sum_dims(&[cd as i64], false)?
        .neg()?
        .mul(&p.valid.to_dtype(input.dtype())?)?;
    let ret = match o.reduction {
        Reduction::None => smooth,
        Reduction::Sum => smooth.sum()?,
        Reduction::Mean => match &o.weight {
            Some(_) => smooth.sum()?.div(&p.w_n.sum()?)?,
            None => smooth
                .sum()?
                .div(&p.valid.to_dtype(input.dtype())?.sum()?)?,
        },
    };
    nll.mul(1.0 - o.label_smoothing)?
        .add(&ret.mul(o.label_smoothing / c as f64)?)
}

/// Binary cross entropy of probabilities `input` in `[0, 1]`:
/// `−w·(y·log x + (1 − y)·log(1 − x))`, each log clamped at −100 as PyTorch does.
pub fn binary_cross_entropy(
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    reduction: Reduction,
) -> Result<Tensor> {
    let op = "binary_cross_entropy";
    if let Some(c) = autocast_inputs(op, &[input, target])? {
        return binary_cross_entropy(&c.tensors[0], &c.tensors[1], weight, reduction);
    }
    float_input(op, input, "input")?;
    same_shape(op, input, target)?;
    {
        let _ng = stride_core::autograd::no_grad();
        let outside = input.lt(0.0)?.logical_or(&input.gt(1.0)?)?;
        if outside.any()?.item::<bool>()? {
            return Err(invalid(
                op,
                "all elements of input should be between 0 and 1 (apply sigmoid first, or use binary_cross_entropy_with_logits)",
            ));
        }
    }
    let mut inputs = vec![input, target];
    inputs.extend(weight);
    in_compute_dtype(&inputs, |t| {
        let (input, target) = (&t[0], &t[1]);
        let log_x = input.log()?.clamp_min(-100.0)?;
        let log_1mx = input.neg()?.add(1.0)?.log()?.clamp_min(-100.0)?;
        let one_m_y = target.neg()?.add(1.0)?;
        let mut loss = target.mul(&log_x)?.add(&one_m_y.mul(&log_1mx)?)?.neg()?;
        if let Some(w) = t.get(2) {
            loss = loss.mul(w)?;
        }
        reduce(loss, reduction)
    })
}

/// Binary cross entropy of logits, computed stably as PyTorch does:
/// `(1 − y)·x − log_weight·log σ(x)` with `log_weight = 1 + (pos_weight − 1)·y`, then
/// `· weight`.
pub fn binary_cross_entropy_with_logits(
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    pos_weight: Option<&Tensor>,
    reduction: Reduction,
) -> Result<Tensor> {
    let op = "binary_cross_entropy_with_logits";
    let mut all = vec![input, target];
    all.extend(weight);
    all.extend(pos_weight);
    if let Some(c) = autocast_inputs(op, &all)? {
        let mut t = c.tensors.iter();
        let (x, y) = (t.next().expect("input"), t.next().expect("target"));
        let (w, pw) = (weight.and(t.next()), pos_weight.and(t.next()));
        return binary_cross_entropy_with_logits(x, y, w, pw, reduction);
    }
    float_input(op, input, "input")?;
    same_shape(op, input, target)?;
    let mut inputs = vec![input, target];
    inputs.extend(weight);
    inputs.extend(pos_weight);
    in_compute_dtype(&inputs, |t| {
        let (input, target) = (&t[0], &t[1]);
        let mut rest = t[2..].iter();
        let weight = weight.and_then(|_| rest.next());
        let pos_weight = pos_weight.and_then(|_| rest.next());
        // log σ(x) = min(x, 0) − log1p(e^(−|x|))
        let mut log_sig = input
            .clamp_max(0.0)?
            .sub(&input.abs()?.neg()?.exp()?.log1p()?)?;
        if let Some(pw) = pos_weight {
            let log_weight = pw.sub(1.0)?.mul(target)?.add(1.0)?;
            log_sig = log_sig.mul(&log_weight)?;
        }
        let mut loss = target.neg()?.add(1.0)?.mul(input)?.sub(&log_sig)?;
        if let Some(w) = weight {
            loss = loss.mul(w)?;
        }
        reduce(loss, reduction)
    })
}
