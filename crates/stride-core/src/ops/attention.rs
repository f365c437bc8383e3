//! Fused scaled-dot-product attention: [`Tensor::attention`] (the primitives:
//! `backend/attention.rs`), with a differentiable composed backward for double backward.

use crate::autograd::record::{needs_grad, record};
use crate::autograd::{is_grad_enabled, no_grad};
use crate::backend::attention::{self, Attention, AttnMask};
use crate::backend::View;
use crate::ops::output::alloc_result_for_overwrite;
use crate::{compute_dtype, DType, Device, Error, Result, Tensor};

const OP: &str = "attention";

/// Largest head dim of the CUDA kernels (`cuda/attention.rs`).
const CUDA_MAX_HEAD_DIM: usize = 128;

/// Whether [`Tensor::attention`] runs on `device` for `dtype` inputs of head dims `e`
/// (queries and keys) and `ev` (values). Every float dtype and head dim runs on the CPU; on
/// CUDA the fused kernels take f16 and bf16, `e == ev`, a multiple of 8 up to 128.
/// (stride-nn's `scaled_dot_product_attention` takes the composed path where this is false.)
pub fn attention_supported(device: Device, dtype: DType, e: usize, ev: usize) -> bool {
    match device {
        Device::Cpu => dtype.is_float(),
        Device::Cuda(_) => {
            matches!(dtype, DType::F16 | DType::BF16)
                && e == ev
                && e > 0
                && e.is_multiple_of(8)
                && e <= CUDA_MAX_HEAD_DIM
        }
        // the fused kernel runs as a CPU round trip there: the composed path is faster
        Device::Wgpu(_) => false,
    }
}

impl Tensor {
    /// Fused attention `softmax(q kᵀ·scale + mask) v` over `(B, H, L, E)` tensors, computed
    /// blockwise without ever holding the `L × S` scores (FlashAttention's algorithm): memory
    /// O(L + S) per head, forward and backward. `self` is the query `(B, Hq, L, E)`; `k` is
    /// `(B, Hk, S, E)` and `v` `(B, Hk, S, Ev)`, with `Hq` a multiple of `Hk` (query head `h`
    /// reads key/value head `h / (Hq/Hk)`: grouped- and multi-query attention). Any layouts:
    /// permuted views of one fused QKV projection are read in place.
    ///
    /// - `mask` broadcasts to `(B, Hq, L, S)`: bool is true where a query may attend; a float
    ///   mask is added to the scaled scores (in the compute dtype). It gets no gradient: a
    ///   mask that requires grad (while grad mode is on) is an error.
    /// - `causal = Some(offset)`: key `j` is visible to query `i` only if `j ≤ i + offset`
    ///   (0 is PyTorch's top-left `is_causal`; `S − L` is bottom-right, a KV-cache decode's).
    ///   It may be combined with `mask`.
    /// - A query row whose keys are all masked gives **zeros** and zero gradients, never NaN.
    /// - f16/bf16 compute in f32 (scores, softmax and the weighted sums; on CUDA the
    ///   probabilities are rounded to the input dtype before the product with `v`, as
    ///   FlashAttention does) and round once.
    /// - Backward: one pass for `dq`, one for `dk`/`dv`, every sum in a fixed order (the same
    ///   bits every run). Under `create_graph` a composed, differentiable formula runs instead.
    ///
    /// Runs where [`attention_supported`] says so; elsewhere it is an error (stride-nn's
    /// `scaled_dot_product_attention` is the entry point that picks this kernel or the
    /// composed ops). Dropout is not fused: use stride-nn's function for it.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// let q = Tensor::randn([1, 4, 3, 8], DType::F32, &Device::Cpu, None)?;  // 4 query heads
    /// let kv = Tensor::randn([1, 2, 5, 8], DType::F32, &Device::Cpu, None)?; // 2 kv heads
    /// let y = q.attention(&kv, &kv, None, Some(2), 8f64.powf(-0.5))?;       // bottom-right causal
    /// assert_eq!(y.shape(), &[1, 4, 3, 8]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        causal: Option<i64>,
        scale: f64,
    ) -> Result<Tensor> {
        let q = self;
        let (b, hq, l, e, hk, s, ev) = check(q, k, v, scale)?;
        let dtype = q.dtype();
        let cd = compute_dtype(dtype);
        let device = q.device();
        if !attention_supported(device, dtype, e, ev) {
            return Err(Error::invalid(
                OP,
                format!(
                    "no fused kernel for {dtype} with head dims {e} (q, k) and {ev} (v) on \
                     {device}: CUDA takes f16/bf16 with equal head dims, a multiple of 8 up to \
                     {CUDA_MAX_HEAD_DIM} (stride_nn's scaled_dot_product_attention composes \
                     the other cases)"
                ),
            ));
        }
        let full = [b as i64, hq as i64, l as i64, s as i64];
        let (mask, kind) = match mask {
            None => (None, AttnMask::None),
            Some(m) => {
                if m.device() != device {
                    return Err(Error::DeviceMismatch {
                        op: OP,
                        a: device,
                        b: m.device(),
                    });
                }
                if m.requires_grad() && is_grad_enabled() {
                    return Err(Error::invalid(
                        OP,
                        "the mask requires grad, and the fused kernel gives it none: detach it, \
                         or use stride_nn's scaled_dot_product_attention (which composes the \
                         ops for such a mask)",
                    ));
                }
                let (m, kind) = match m.dtype() {
                    DType::Bool => (m.detach(), AttnMask::Bool),
                    t if t.is_float() => (m.detach().to_dtype(cd)?, AttnMask::Additive),
                    t => {
                        return Err(Error::UnsupportedDType {
                            op: OP,
                            dtype: t,
                            hint: "; the mask must be bool (true = attend) or float (added to \
                                   the scores)"
                                .into(),
                        })
                    }
                };
                let m = m
                    .broadcast_to(full.iter().map(|&d| d as usize).collect::<Vec<_>>())
                    .map_err(|_| Error::ShapeMismatch {
                        op: OP,
                        lhs: m.shape().to_vec(),
                        rhs: full.iter().map(|&d| d as usize).collect(),
                        why: "don't fit: the mask (first) must broadcast to (B, Hq, L, S) (second)"
                            .into(),
                    })?;
                (Some(m), kind)
            }
        };
        let a = Attention {
            scale,
            causal,
            mask: kind,
            groups: hq.checked_div(hk).unwrap_or(1),
        };
        let (o, lse) = {
            let _g = no_grad();
            // no keys: every row is a sum over nothing, zeros the kernel has no key to write
            let o = output(&[b, hq, l, ev], dtype, &device, s == 0)?;
            let lse = output(&[b, hq, l], cd, &device, s == 0)?;
            if o.numel() > 0 || lse.numel() > 0 {
                let inputs: Vec<View> = [Some(q), Some(k), Some(v), mask.as_ref()]
                    .into_iter()
                    .flatten()
                    .map(Tensor::view_ref)
                    .collect();
                attention::attention(a, &inputs, &[o.view_ref(), lse.view_ref()])?;
            }
            (o, lse)
        };
        if needs_grad(&[q, k, v]) {
            let saved = Saved {
                a,
                // the inputs themselves, so that a double backward differentiates through
                // them; the output detached (it holds this node)
                q: q.clone(),
                k: k.clone(),
                v: v.clone(),
                o: o.detach(),
                lse,
                mask,
            };
            record(
                "AttentionBackward",
                &[q, k, v],
                &[&o],
                &[(q, "query"), (k, "key"), (v, "value")],
                move |g| saved.backward(&g[0]),
            )?;
        }
        Ok(o)
    }
}

/// Shapes, dtypes and devices of `q`, `k`, `v`: `(B, Hq, L, E, Hk, S, Ev)`.
#[allow(clippy::type_complexity)]
fn check(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
) -> Result<(usize, usize, usize, usize, usize, usize, usize)> {
    for (what, t) in [("query", q), ("key", k), ("value", v)] {
        if !t.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: t.dtype(),
                hint: format!("; the {what} must be a floating-point tensor"),
            });
        }
        if t.dtype() != q.dtype() {
            return Err(Error::invalid(
                OP,
                format!(
                    "query, key and value must have one dtype, got {}, {} and {}",
                    q.dtype(),
                    k.dtype(),
                    v.dtype()
                ),
            ));
        }
        if t.device() != q.device() {
            return Err(Error::DeviceMismatch {
                op: OP,
                a: q.device(),
                b: t.device(),
            });
        }
        if t.dim() != 4 {
            return Err(Error::invalid(
                OP,
                format!(
                    "the {what} must be 4-d (batch, heads, length, head dim), got shape {:?}",
                    t.shape()
                ),
            ));
        }
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let mismatch = |why: &str, a: &Tensor, b: &Tensor| Error::ShapeMismatch {
        op: OP,
        lhs: a.shape().to_vec(),
        rhs: b.shape().to_vec(),
        why: why.into(),
    };
    if ks[0] != qs[0] || ks[3] != qs[3] {
        return Err(mismatch(
            "differ: the key (second) must have the query's (first) batch and head dim",
            q,
            k,
        ));
    }
    if ks[..3] != vs[..3] {
        return Err(mismatch(
            "differ: key (first) and value (second) must agree in batch, heads and length",
            k,
            v,
        ));
    }
    if ks[1] == 0 && qs[1] != 0 || ks[1] != 0 && !qs[1].is_multiple_of(ks[1]) {
        return Err(mismatch(
            "don't fit: the query heads (first, dim 1) must be a multiple of the key/value heads (second)",
            q,
            k,
        ));
    }
    if !scale.is_finite() {
        return Err(Error::invalid(
            OP,
            format!("scale must be finite, got {scale}"),
        ));
    }
    Ok((qs[0], qs[1], qs[2], qs[3], ks[1], ks[2], vs[3]))
}

/// What the backward keeps.
/// A fresh output of an attention kernel: zeros where it is a sum over nothing (`zero`),
/// else left for the kernel to write in full.
fn output(shape: &[usize], dtype: DType, device: &Device, zero: bool) -> Result<Tensor> {
    match zero {
        true => Tensor::zeros(shape.to_vec(), dtype, device),
        false => alloc_result_for_overwrite(shape, dtype, device, None),
    }
}

struct Saved {
    a: Attention,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    mask: Option<Tensor>,
}

impl Saved {
    /// Gradients for `[q, k, v]` from `g`, the output's gradient.
    fn backward(&self, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        if is_grad_enabled() {
            return self.composed(g);
        }
        let dtype = self.q.dtype();
        let device = self.q.device();
        let g = g.to_dtype(dtype)?;
        // a gradient summed over nothing (no keys for dq, no queries for dk and dv) is zeros
        // that no kernel pass writes
        let (l, s) = (
            self.q.shape()[self.q.dim() - 2],
            self.k.shape()[self.k.dim() - 2],
        );
        let dq = output(self.q.shape(), dtype, &device, s == 0)?;
        let dk = output(self.k.shape(), dtype, &device, l == 0)?;
        let dv = output(self.v.shape(), dtype, &device, l == 0)?;
        if dq.numel() + dk.numel() + dv.numel() > 0 {
            let inputs: Vec<View> = [
                Some(&g),
                Some(&self.q),
                Some(&self.k),
                Some(&self.v),
                Some(&self.o),
                Some(&self.lse),
                self.mask.as_ref(),
            ]
            .into_iter()
            .flatten()
            .map(Tensor::view_ref)
            .collect();
            attention::attention_backward(
                self.a,
                &inputs,
                &[dq.view_ref(), dk.view_ref(), dv.view_ref()],
            )?;
        }
        Ok(vec![Some(dq), Some(dk), Some(dv)])
    }

    /// The backward from differentiable ops in the compute dtype (for `create_graph`): the
    /// probabilities recomputed from `q` and `k` so that their dependence is in the graph.
    fn composed(&self, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let dtype = self.q.dtype();
        let c = compute_dtype(dtype);
        let (q, k, v, g) = (
            self.q.to_dtype(c)?,
            self.k.to_dtype(c)?,
            self.v.to_dtype(c)?,
            g.to_dtype(c)?,
        );
        let (qs, ks, vs) = (q.shape().to_vec(), k.shape().to_vec(), v.shape().to_vec());
        let grp = self.a.groups;
        // key/value heads repeated for their query heads: (B, Hk, S, E) → (B, Hq, S, E)
        let repeat = |t: &Tensor, w: usize| -> Result<Tensor> {
            t.unsqueeze(2)?
                .expand(&[-1, -1, grp as i64, -1, -1])?
                .reshape(&[qs[0] as i64, qs[1] as i64, ks[2] as i64, w as i64])
        };
        let (kr, vr) = (repeat(&k, ks[3])?, repeat(&v, vs[3])?);
        let mut scores = q.matmul(&kr.transpose(-2, -1)?)?.mul(self.a.scale)?;
        let mut allowed: Option<Tensor> = None;
        match (&self.mask, self.a.mask) {
            (Some(m), AttnMask::Bool) => allowed = Some(m.clone()),
            (Some(m), AttnMask::Additive) => scores = scores.add(m)?,
            _ => {}
        }
        if let Some(off) = self.a.causal {
            let dev = q.device();
            let i = Tensor::arange(0i64, qs[2] as i64, &dev)?.unsqueeze(1)?;
            let j = Tensor::arange(0i64, ks[2] as i64, &dev)?.unsqueeze(0)?;
            let vis = j.le(&i.add(off)?)?;
            allowed = Some(match allowed {
                Some(a) => a.logical_and(&vis)?,
                None => vis,
            });
        }
        if let Some(a) = &allowed {
            scores = scores.masked_fill(&a.logical_not()?, f64::NEG_INFINITY)?;
        }
        let dead = scores.detach().amax(&[-1], true)?.eq(f64::NEG_INFINITY)?;
        let p = scores
            .masked_fill(&dead, 0.0)?
            .softmax(-1)?
            .masked_fill(&dead, 0.0)?;
        let dv = p.transpose(-2, -1)?.matmul(&g)?;
        let dp = g.matmul(&vr.transpose(-2, -1)?)?;
        let ds = p.mul(&dp.sub(&dp.mul(&p)?.sum_dims(&[-1], true)?)?)?;
        let dq = ds.matmul(&kr)?.mul(self.a.scale)?;
        let dk = ds.transpose(-2, -1)?.matmul(&q)?.mul(self.a.scale)?;
        // each key/value head's gradient is the sum over its query heads
        let fold = |t: Tensor, w: usize| -> Result<Tensor> {
            t.reshape(&[
                ks[0] as i64,
                ks[1] as i64,
                grp as i64,
                ks[2] as i64,
                w as i64,
            ])?
            .sum_dims(&[2], false)
        };
        Ok(vec![
            Some(dq.to_dtype(dtype)?),
            Some(fold(dk, ks[3])?.to_dtype(dtype)?),
            Some(fold(dv, vs[3])?.to_dtype(dtype)?),
        ])
    }
}
