//! Fused rotary position embeddings: [`Tensor::rotary`], one pass over the rotated features
//! forward and one backward (the backward is the inverse rotation, the same kernel), through
//! any layout of the input (`backend/pointwise.rs`).

use crate::autograd::formulas::sum_to_shape;
use crate::autograd::no_grad;
use crate::autograd::record::{needs_grad, record};
use crate::backend::pointwise::{self, Pointwise};
use crate::backend::View;
use crate::ops::output::alloc_result_for_overwrite;
use crate::{compute_dtype, Error, Result, Tensor};

const OP: &str = "rotary";

/// Which features of a head are rotated together.
///
/// **The trap:** the same Llama weights need different styles depending on the file. Hugging
/// Face checkpoints (safetensors) use [`RotaryStyle::HalfSplit`]; llama.cpp's converter
/// permutes the rows of the Q and K projections of `llama` GGUF files so that llama.cpp's
/// adjacent-pair rotation ([`RotaryStyle::Interleaved`], `LLAMA_ROPE_TYPE_NORM`) computes the
/// same attention. A GGUF `llama` model must use `Interleaved`, an HF model `HalfSplit`; the
/// wrong one runs without error and produces nonsense.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RotaryStyle {
    /// Pairs `(i, i + R/2)`: Hugging Face / GPT-NeoX `rotate_half`.
    HalfSplit,
    /// Pairs `(2i, 2i + 1)`: llama.cpp's `LLAMA_ROPE_TYPE_NORM`, the original RoPE / GPT-J.
    Interleaved,
}

impl Tensor {
    /// Rotary position embedding of `self: (..., D)` with angle tables `cos`, `sin` of shape
    /// broadcasting to `(..., R/2)` (`self`'s leading dims; `R = 2·cos.shape[-1] ≤ D`): pair
    /// `i` of the first `R` features, `(a, b)` as `style` pairs them, becomes
    /// `(a·cos_i − b·sin_i, a·sin_i + b·cos_i)`; features `R..D` pass through (partial
    /// rotary). The tables hold the angles of each position — a KV-cache decode passes the
    /// rows of its positions — and compute in `self`'s compute dtype (f32 for f16/bf16): the
    /// result has `self`'s dtype, rounded once, the same bits as the composed f32 ops.
    ///
    /// One kernel forward and one backward (the inverse rotation) on every device, reading
    /// `self` through its layout (a view of a fused QKV projection is not copied). Gradients
    /// reach `self` and, composed, the tables if they require grad.
    ///
    /// ```
    /// use stride_core::{RotaryStyle, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0], [1, 4])?;   // pairs (1, 0), (0, 1)
    /// let (c, s) = (0.5f32, 0.75f32.sqrt());                              // 60°
    /// let cos = Tensor::from_vec(vec![c, c], [1, 2])?;
    /// let sin = Tensor::from_vec(vec![s, s], [1, 2])?;
    /// let y = x.rotary(&cos, &sin, RotaryStyle::Interleaved)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![c, s, -s, c]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn rotary(&self, cos: &Tensor, sin: &Tensor, style: RotaryStyle) -> Result<Tensor> {
        rotate(self, cos, sin, style, false)
    }
}

/// The pair views `(a, b)` of the first `2·half` features of `t`'s last dim.
fn pairs(t: &Tensor, half: usize, style: RotaryStyle) -> Result<(Tensor, Tensor)> {
    match style {
        RotaryStyle::HalfSplit => Ok((t.narrow(-1, 0, half)?, t.narrow(-1, half as i64, half)?)),
        RotaryStyle::Interleaved => {
            let p = t
                .narrow(-1, 0, 2 * half)?
                .unflatten(-1, &[half as i64, 2])?;
            Ok((p.select(-1, 0)?, p.select(-1, 1)?))
        }
    }
}

fn check(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<usize> {
    for (what, t) in [("input", x), ("cos table", cos), ("sin table", sin)] {
        if !t.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: t.dtype(),
                hint: format!("; the {what} must be a floating-point tensor"),
            });
        }
        if t.device() != x.device() {
            return Err(Error::DeviceMismatch {
                op: OP,
                a: x.device(),
                b: t.device(),
            });
        }
    }
    if cos.shape() != sin.shape() {
        return Err(Error::ShapeMismatch {
            op: OP,
            lhs: cos.shape().to_vec(),
            rhs: sin.shape().to_vec(),
            why: "don't match: the cos (first) and sin (second) tables must have one shape".into(),
        });
    }
    let d = x.shape().last().copied().unwrap_or(0);
    let half = cos.shape().last().copied().unwrap_or(0);
    if x.dim() == 0 || cos.dim() == 0 || half == 0 || 2 * half > d {
        return Err(Error::invalid(
            OP,
            format!(
                "the input must be (..., D) and the tables (..., R/2) with 0 < R ≤ D, got input {:?} and tables {:?}",
                x.shape(),
                cos.shape()
            ),
        ));
    }
    Ok(half)
}

/// `x` rotated (`inverse`: by the negated angles), recorded for autograd.
fn rotate(
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    style: RotaryStyle,
    inverse: bool,
) -> Result<Tensor> {
    let half = check(x, cos, sin)?;
    let mut pair_shape = x.shape().to_vec();
    *pair_shape.last_mut().expect("checked: ≥ 1 dim") = half;
    let tables = |t: &Tensor| -> Result<Tensor> {
        t.detach()
            .to_dtype(compute_dtype(x.dtype()))?
            .broadcast_to(pair_shape.clone())
            .map_err(|_| Error::ShapeMismatch {
                op: OP,
                lhs: t.shape().to_vec(),
                rhs: pair_shape.clone(),
                why: "don't fit: the tables (first) must broadcast to the input's pairs (second)"
                    .into(),
            })
    };
    let (c, s) = (tables(cos)?, tables(sin)?);
    let y = {
        let _g = no_grad();
        let x = x.detach();
        let y = alloc_result_for_overwrite(x.shape(), x.dtype(), &x.device(), None)?;
        if y.numel() > 0 {
            let (a, b) = pairs(&x, half, style)?;
            let (ya, yb) = pairs(&y, half, style)?;
            let inputs: Vec<View> = [&a, &b, &c, &s].map(Tensor::view_ref).to_vec();
            pointwise::pointwise(
                Pointwise::Rotary { inverse },
                &inputs,
                &[ya.view_ref(), yb.view_ref()],
            )?;
            let d = *x.shape().last().expect("checked: ≥ 1 dim");
            if 2 * half < d {
                let rest = (2 * half) as i64;
                y.narrow(-1, rest, d - 2 * half)?
                    .copy_(&x.narrow(-1, rest, d - 2 * half)?)?;
            }
        }
        y
    };
    if needs_grad(&[x, cos, sin]) {
        // the input only for the tables' gradients: a rotary over q/k need not keep them
        let tables = cos.requires_grad() || sin.requires_grad();
        let input = tables.then(|| x.clone());
        let wants_dx = x.requires_grad();
        let (c, s) = (cos.clone(), sin.clone());
        let mut keep = vec![(cos, "cos"), (sin, "sin")];
        if tables {
            keep.push((x, "input"));
        }
        record(
            if inverse {
                "RotaryInverseBackward"
            } else {
                "RotaryBackward"
            },
            &[x, cos, sin],
            &[&y],
            &keep,
            move |g| {
                let g = &g[0];
                let dx = match wants_dx {
                    // the transpose of a rotation is the rotation back: the same kernel,
                    // itself recorded (double backward rotates forward again)
                    true => Some(rotate(g, &c, &s, style, !inverse)?),
                    false => None,
                };
                let (dc, ds) = match &input {
                    Some(x) => table_grads(x, g, &c, &s, half, style, inverse)?,
                    None => (None, None),
                };
                Ok(vec![dx, dc, ds])
            },
        )?;
    }
    Ok(y)
}

/// The tables' gradients, composed (differentiable): with `(a, b)` the input's pairs and
/// `(ga, gb)` the gradient's, `dcos = Σ ga·a + gb·b` and `dsin = Σ gb·a − ga·b` over the
/// broadcast dims (negated for the inverse rotation), in the compute dtype.
fn table_grads(
    x: &Tensor,
    g: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    half: usize,
    style: RotaryStyle,
    inverse: bool,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    let cd = compute_dtype(x.dtype());
    let (a, b) = pairs(&x.to_dtype(cd)?, half, style)?;
    let (ga, gb) = pairs(&g.to_dtype(cd)?, half, style)?;
    let dc = match cos.requires_grad() {
        true => Some(
            sum_to_shape(&ga.mul(&a)?.add(&gb.mul(&b)?)?, cos.shape())?.to_dtype(cos.dtype())?,
        ),
        false => None,
    };
    let ds = match sin.requires_grad() {
        true => {
            let d = gb.mul(&a)?.sub(&ga.mul(&b)?)?;
            let d = if inverse { d.neg()? } else { d };
            Some(sum_to_shape(&d, sin.shape())?.to_dtype(sin.dtype())?)
        }
        false => None,
    };
    Ok((dc, ds))
}
