//! Scaled dot-product attention (PyTorch's `F.scaled_dot_product_attention`): the fused
//! kernel of [`Tensor::attention`] where it runs, else composed from matmul, masked_fill and
//! softmax; and the causal masks of both alignments.

use stride_core::autocast::autocast_inputs;
use stride_core::{attention_supported, compute_dtype, DType, Device, Error, Result, Tensor};

const OP: &str = "scaled_dot_product_attention";

/// A bool `(L, S)` causal mask, true where query `i` may attend to key `j`: `j ≤ i + offset`.
///
/// - `offset = 0` is PyTorch's `is_causal=True` (**top-left** aligned, `tril(ones(L, S))`):
///   query 0 sees key 0 only, whatever `S` is.
/// - `offset = S − L` is **bottom-right** aligned: the last query sees every key. This is
///   the mask of a KV-cache decode, where the `L` new queries are the last `L` of the `S`
///   positions (query `i` sits at absolute position `S − L + i`).
///
/// ```
/// use stride_core::Device;
/// use stride_nn::functional::causal_mask;
/// let m = causal_mask(2, 3, 1, &Device::Cpu)?;          // bottom-right: offset S − L = 1
/// assert_eq!(m.to_vec::<bool>()?, vec![true, true, false, true, true, true]);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn causal_mask(l: usize, s: usize, offset: i64, device: &Device) -> Result<Tensor> {
    let i = Tensor::arange(0i64, l as i64, device)?.unsqueeze(1)?;
    let j = Tensor::arange(0i64, s as i64, device)?.unsqueeze(0)?;
    j.le(&i.add(offset)?)
}

fn shape_error(why: String, lhs: &Tensor, rhs: &Tensor) -> Error {
    Error::ShapeMismatch {
        op: OP,
        lhs: lhs.shape().to_vec(),
        rhs: rhs.shape().to_vec(),
        why,
    }
}

/// Whether `from` broadcasts to exactly `to` (PyTorch's rules: align trailing dims; each
/// size equal or 1; `from` may have fewer dims).
fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == 1)
}

/// Attention with PyTorch's `F.scaled_dot_product_attention` semantics:
/// `softmax(q kᵀ · scale + mask) v`.
///
/// - `q`: `(..., Hq, L, E)`, `k`: `(..., Hk, S, E)`, `v`: `(..., Hk, S, Ev)`; the result is
///   `(..., Hq, L, Ev)` in `q`'s dtype. Without `enable_gqa` the leading dims of all three
///   must be equal (`Hq == Hk`; `(L, E)` 2-d inputs are fine). Any layouts: permuted views
///   of one fused projection work as they are.
/// - `attn_mask` broadcasts to `(..., Hq, L, S)`: a **bool** mask is true where a query may
///   attend (PyTorch's convention); a **float** mask (any float dtype) is added to the scores.
/// - `is_causal`: PyTorch's **top-left** aligned mask `tril(ones(L, S))` — query `i` sees
///   keys `0..=i`. That is right for a full sequence (`L == S`) but not for a KV-cache decode,
///   whose queries are the *last* `L` positions: pass [`causal_mask`] with `offset = S − L`
///   (bottom-right) or your own mask there. As PyTorch, `is_causal` with an `attn_mask` is an
///   error.
/// - `dropout_p`: dropout on the attention weights (always applied when `> 0`, as PyTorch;
///   pass 0 in eval), drawn from the default generator's Philox stream
///   ([`Tensor::dropout_mask`]), so a seed reproduces it on every device.
/// - `scale`: defaults to `1/√E`.
/// - `enable_gqa`: grouped-query attention, `Hq` a multiple of `Hk`: query head `h` uses
///   key/value head `h / (Hq/Hk)` (PyTorch's `repeat_interleave`). K and V are not
///   repeated: the queries are viewed as `(..., Hk, (Hq/Hk)·L, E)`.
/// - f16/bf16 inputs compute scores, softmax and the weighted sum in f32 and round once.
/// - Without dropout (and without a float mask that requires grad) it runs the fused kernel
///   of [`Tensor::attention`] where [`stride_core::attention_supported`] says so — every
///   float dtype on the CPU; f16/bf16 with equal head dims (a multiple of 8, at most 128) on
///   CUDA — in O(L + S) memory, forward and backward; otherwise the composed ops, which hold
///   the `(..., L, S)` scores.
///
/// **Deviation from PyTorch:** a query row whose keys are all masked gives **zeros** (and
/// zero gradients), never NaN (PyTorch's math backend gives NaN). A left-padded batch's
/// padding queries hit exactly this case.
///
/// Bad shapes, dtypes or devices are errors naming the operand.
///
/// ```
/// use stride_core::{DType, Device, Tensor};
/// use stride_nn::functional::scaled_dot_product_attention;
/// let dev = Device::Cpu;
/// let q = Tensor::randn([1, 4, 3, 8], DType::F32, &dev, None)?;    // 4 query heads
/// let kv = Tensor::randn([1, 2, 5, 8], DType::F32, &dev, None)?;   // 2 key/value heads
/// let y = scaled_dot_product_attention(&q, &kv, &kv, None, 0.0, false, None, true)?;
/// assert_eq!(y.shape(), &[1, 4, 3, 8]);
/// # Ok::<(), stride_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    attn_mask: Option<&Tensor>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
    enable_gqa: bool,
) -> Result<Tensor> {
    let mut ins = vec![q, k, v];
    ins.extend(attn_mask.filter(|m| m.dtype().is_float()));
    if let Some(c) = autocast_inputs("scaled_dot_product_attention", &ins)? {
        let t = &c.tensors;
        let mask = match attn_mask {
            Some(m) if m.dtype().is_float() => Some(&t[3]),
            other => other,
        };
        return scaled_dot_product_attention(
            &t[0], &t[1], &t[2], mask, dropout_p, is_causal, scale, enable_gqa,
        );
    }
    for (name, t) in [("query", q), ("key", k), ("value", v)] {
        if !t.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: t.dtype(),
                hint: format!("; the {name} must be a floating-point tensor"),
            });
        }
        if t.device() != q.device() {
            return Err(Error::DeviceMismatch {
                op: OP,
                a: q.device(),
                b: t.device(),
            });
        }
    }
    if k.dtype() != q.dtype() || v.dtype() != q.dtype() {
        return Err(crate::invalid(
            OP,
            format!(
                "query, key and value must have one dtype, got {}, {} and {}",
                q.dtype(),
                k.dtype(),
                v.dtype()
            ),
        ));
    }
    let n = q.dim();
    if n < 2 || k.dim() != n || v.dim() != n {
        return Err(crate::invalid(
            OP,
            format!(
                "query, key and value must have the same number of dims, at least 2 \
                 ((..., L, E), (..., S, E), (..., S, Ev)); got shapes {:?}, {:?} and {:?}",
                q.shape(),
                k.shape(),
                v.shape()
            ),
        ));
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (l, e) = (qs[n - 2], qs[n - 1]);
    let s = ks[n - 2];
    let ev = vs[n - 1];
    if ks[n - 1] != e {
        return Err(shape_error(
            format!(
                "the query's last dim (E = {e}) must equal the key's ({})",
                ks[n - 1]
            ),
            q,
            k,
        ));
    }
    if ks[..n - 1] != vs[..n - 1] {
        return Err(shape_error(
            "key and value must agree in every dim but the last ((..., Hk, S, E) and (..., Hk, S, Ev))"
                .into(),
            k,
            v,
        ));
    }
    let (qb, kb) = (&qs[..n - 2], &ks[..n - 2]);
    let groups = if qb == kb {
        1
    } else if enable_gqa && n >= 3 && qb[..n - 3] == kb[..n - 3] {
        let (hq, hk) = (qb[n - 3], kb[n - 3]);
        if hk == 0 || hq % hk != 0 {
            return Err(shape_error(
                format!(
                    "with enable_gqa the query heads (Hq = {hq}, dim -3) must be a multiple of the key/value heads (Hk = {hk})"
                ),
                q,
                k,
            ));
        }
        hq / hk
    } else {
        return Err(shape_error(
            if n >= 3 && qb[..n - 3] == kb[..n - 3] && !enable_gqa {
                "the query and key have different head counts (dim -3): pass enable_gqa = true for grouped-query attention".into()
            } else {
                "the leading dims (batch, heads) of query and key must be equal".into()
            },
            q,
            k,
        ));
    };
    if !(0.0..=1.0).contains(&dropout_p) {
        return Err(crate::invalid(
            OP,
            format!("dropout_p must be in [0, 1], got {dropout_p}"),
        ));
    }
    let mut scores_shape = qb.to_vec();
    scores_shape.extend([l, s]);
    if let Some(m) = attn_mask {
        if is_causal {
            return Err(crate::invalid(
                OP,
                "an explicit attn_mask should not be set when is_causal = true (as PyTorch): \
                 build the causal mask into attn_mask (see causal_mask)",
            ));
        }
        if m.device() != q.device() {
            return Err(Error::DeviceMismatch {
                op: OP,
                a: q.device(),
                b: m.device(),
            });
        }
        if m.dtype() != DType::Bool && !m.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: m.dtype(),
                hint: "; attn_mask must be bool (true = attend) or float (added to the scores)"
                    .into(),
            });
        }
        if !broadcasts_to(m.shape(), &scores_shape) {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: m.shape().to_vec(),
                rhs: scores_shape,
                why: "don't fit: attn_mask (first) must broadcast to the scores' shape (..., Hq, L, S) (second)".into(),
            });
        }
    }
    let mut out_shape: Vec<i64> = qb.iter().map(|&d| d as i64).collect();
    out_shape.extend([l as i64, ev as i64]);
    if s == 0 {
        // no key at all: every row is fully masked
        return Tensor::zeros(
            out_shape.iter().map(|&d| d as usize).collect::<Vec<_>>(),
            q.dtype(),
            &q.device(),
        );
    }
    let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
    let mask_grad = attn_mask.is_some_and(|m| m.requires_grad());
    if dropout_p == 0.0 && !mask_grad && attention_supported(q.device(), q.dtype(), e, ev) {
        // the fused kernel, over (batch, heads, length, head dim) views of the operands
        let as4 = |t: &Tensor, rows: usize, w: usize| -> Result<Tensor> {
            let lead = &t.shape()[..t.dim() - 2];
            let heads = if lead.is_empty() {
                1
            } else {
                lead[lead.len() - 1]
            };
            let batch: usize = lead.iter().product::<usize>() / heads.max(1);
            t.reshape(&[batch as i64, heads as i64, rows as i64, w as i64])
        };
        let (q4, k4, v4) = (as4(q, l, e)?, as4(k, s, e)?, as4(v, s, ev)?);
        let m4 = match attn_mask {
            Some(m) => {
                let full = m.broadcast_to(scores_shape.clone())?;
                Some(as4(&full, l, s)?)
            }
            None => None,
        };
        let out = q4.attention(&k4, &v4, m4.as_ref(), is_causal.then_some(0), scale)?;
        return out.reshape(&out_shape);
    }
    let cd = compute_dtype(q.dtype());
    let (qf, kf, vf) = (q.to_dtype(cd)?, k.to_dtype(cd)?, v.to_dtype(cd)?);
    // (..., Hk, G·L, E): query head hk·G + g is row block g of key/value head hk
    let mut grouped: Vec<i64> = kb.iter().map(|&d| d as i64).collect();
    grouped.extend([(groups * l) as i64, e as i64]);
    let qg = if groups > 1 {
        qf.reshape(&grouped)?
    } else {
        qf
    };
    let scores_i64: Vec<i64> = scores_shape.iter().map(|&d| d as i64).collect();
    let mut scores = qg
        .matmul(&kf.transpose(-2, -1)?)?
        .mul(scale)?
        .reshape(&scores_i64)?;
    let mut allowed = None;
    let mut masked = false;
    if let Some(m) = attn_mask {
        masked = true;
        if m.dtype() == DType::Bool {
            allowed = Some(m.clone());
        } else {
            scores = scores.add(&m.to_dtype(cd)?)?;
        }
    }
    if is_causal {
        masked = true;
        allowed = Some(causal_mask(l, s, 0, &q.device())?);
    }
    if let Some(a) = &allowed {
        scores = scores.masked_fill(&a.logical_not()?, f64::NEG_INFINITY)?;
    }
    let weights = if masked {
        // rows with no key left (max = −inf): softmax would give NaN; give 0 instead, and
        // keep NaN out of the backward too (the row's scores are replaced before softmax)
        let dead = scores.detach().amax(&[-1], true)?.eq(f64::NEG_INFINITY)?;
        scores
            .masked_fill(&dead, 0.0)?
            .softmax(-1)?
            .masked_fill(&dead, 0.0)?
    } else {
        scores.softmax(-1)?
    };
    let weights = if dropout_p > 0.0 {
        let keep = Tensor::dropout_mask(weights.shape(), dropout_p, cd, &q.device(), None)?;
        weights.mul(&keep)?
    } else {
        weights
    };
    let mut wg: Vec<i64> = kb.iter().map(|&d| d as i64).collect();
    wg.extend([(groups * l) as i64, s as i64]);
    let out = weights.reshape(&wg)?.matmul(&vf)?.reshape(&out_shape)?;
    out.to_dtype(q.dtype())
}
