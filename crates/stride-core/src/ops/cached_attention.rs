//! Attention of new tokens over a key/value cache whose length lives on the device:
//! [`Tensor::attention_with_kv_cache`] (FlashAttention's `flash_attn_with_kvcache`; the
//! primitive: `backend/cached_attention.rs`).

use crate::autograd::{is_grad_enabled, record::needs_grad};
use crate::backend::cached_attention::{self, CachedAttention};
use crate::backend::View;
use crate::ops::output::alloc_result_for_overwrite;
use crate::{compute_dtype, DType, Error, Result, RotaryStyle, Tensor};

const OP: &str = "attention_with_kv_cache";

/// The cache side of [`Tensor::attention_with_kv_cache`]: the caches written in place, the
/// new keys and values, where each row's new tokens go, and the optional rotary.
#[derive(Clone, Copy)]
pub struct KvCacheStep<'a> {
    /// Keys `(B, Hk, Cap, E)`, written at each row's positions `len[b]..len[b] + L`.
    pub k_cache: &'a Tensor,
    /// Values `(B, Hk, Cap, Ev)`, written like `k_cache`.
    pub v_cache: &'a Tensor,
    /// The new keys `(B, Hk, L, E)` (rotated before they are stored, with `rotary`).
    pub k: &'a Tensor,
    /// The new values `(B, Hk, L, Ev)`.
    pub v: &'a Tensor,
    /// Positions already in each row of the cache: i64 with 1 or `B` elements, read on the
    /// device (a captured decode step replays with the length it holds then).
    pub len: &'a Tensor,
    /// Each row's first visible key (its left padding): i64 with 1 or `B` elements; `None`
    /// is 0. Values below 0 count as 0.
    pub start: Option<&'a Tensor>,
    /// `(cos, sin, style)`: angle tables `(P, R/2)` (`P ≥ Cap`, `R ≤ E`) to rotate the new
    /// queries and keys with, as [`Tensor::rotary`] does, at position `len[b] + i − start[b]`.
    pub rotary: Option<(&'a Tensor, &'a Tensor, RotaryStyle)>,
    /// The factor on `q·k`; `None` is `1/√E`.
    pub scale: Option<f64>,
}

impl Tensor {
    /// Attention of the `L` new tokens in `self` — queries `(B, Hq, L, E)` — over a key/value
    /// cache, writing their keys and values into it first: FlashAttention's
    /// `flash_attn_with_kvcache`, and the whole attention of a decode step in two launches on
    /// CUDA. The new token `i` of row `b` is stored at position `len[b] + i` and sees the keys
    /// `start[b] ..= len[b] + i` (causal, left padding hidden); query head `h` reads
    /// key/value head `h / (Hq/Hk)` (grouped-query attention). With `rotary`, the queries and
    /// the new keys are first rotated exactly as [`Tensor::rotary`] would (the same bits).
    /// Scores, softmax and the weighted sum are computed in f32 (f64 for f64) and rounded
    /// once; a row that sees no key gives zeros. Returns `(B, Hq, L, Ev)` — a permuted view of
    /// a `(B, L, Hq, Ev)` buffer, so `.permute(&[0, 2, 1, 3])?.reshape(..)` to `(B, L, Hq·Ev)`
    /// is free.
    ///
    /// `len` is read on the device: no host wait, so a CUDA graph of the step replays at
    /// whatever length the tensor holds. A `len[b]` outside `0..=Cap − L` is an error — at
    /// the call on the CPU, at the next read of the device on CUDA (the step writes nothing
    /// for that row). Inference only: inputs that require grad, with grad mode on, are
    /// refused.
    ///
    /// ```
    /// use stride_core::{DType, Device, KvCacheStep, Tensor};
    /// let dev = Device::Cpu;
    /// let k_cache = Tensor::zeros([1, 2, 8, 4], DType::F32, &dev)?; // 2 kv heads, 8 slots
    /// let v_cache = Tensor::zeros([1, 2, 8, 4], DType::F32, &dev)?;
    /// let len = Tensor::from_vec(vec![0i64], [1])?;
    /// let (q, k, v) = (
    ///     Tensor::randn([1, 4, 3, 4], DType::F32, &dev, None)?,       // 4 query heads, 3 tokens
    ///     Tensor::randn([1, 2, 3, 4], DType::F32, &dev, None)?,
    ///     Tensor::randn([1, 2, 3, 4], DType::F32, &dev, None)?,
    /// );
    /// let step = KvCacheStep {
    ///     k_cache: &k_cache, v_cache: &v_cache, k: &k, v: &v, len: &len,
    ///     start: None, rotary: None, scale: None,
    /// };
    /// let o = q.attention_with_kv_cache(&step)?;
    /// assert_eq!(o.shape(), &[1, 4, 3, 4]);
    /// // the cache now holds the three new keys at positions 0..3
    /// assert_eq!(k_cache.narrow(2, 0, 3)?.to_vec::<f32>()?, k.to_vec::<f32>()?);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn attention_with_kv_cache(&self, step: &KvCacheStep) -> Result<Tensor> {
        let q = self;
        let c = step;
        let device = q.device();
        let dtype = q.dtype();
        if !matches!(dtype, DType::F64 | DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype,
                hint: "; the queries must be a floating-point tensor".into(),
            });
        }
        let named = [
            ("key", c.k),
            ("value", c.v),
            ("key cache", c.k_cache),
            ("value cache", c.v_cache),
        ];
        for (what, t) in named {
            if t.dtype() != dtype {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the {what} is {} but the queries are {dtype}: queries, keys, values and both caches need one dtype",
                        t.dtype()
                    ),
                ));
            }
        }
        let mut all: Vec<(&str, &Tensor)> = vec![("query", q)];
        all.extend(named);
        all.push(("cache length", c.len));
        all.extend(c.start.map(|s| ("cache start", s)));
        if let Some((cs, sn, _)) = c.rotary {
            all.extend([("cos table", cs), ("sin table", sn)]);
        }
        for (_, t) in &all {
            if t.device() != device {
                return Err(Error::DeviceMismatch {
                    op: OP,
                    a: device,
                    b: t.device(),
                });
            }
        }
        if is_grad_enabled() && needs_grad(&all.iter().map(|(_, t)| *t).collect::<Vec<_>>()) {
            return Err(Error::invalid(
                OP,
                "an input requires grad: this op is for inference and has no backward; run it under no_grad(), or use scaled_dot_product_attention",
            ));
        }
        for (what, t) in [("queries", q), ("new keys", c.k), ("new values", c.v)]
            .into_iter()
            .chain([("key cache", c.k_cache), ("value cache", c.v_cache)])
        {
            if t.dim() != 4 {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the {what} must be 4-d (B, heads, positions, features), got shape {:?}",
                        t.shape()
                    ),
                ));
            }
        }
        let [b, hq, l, e] = dims4(q);
        let [_, hk, cap, _] = dims4(c.k_cache);
        let ev = c.v.shape()[3];
        let want = [
            ("new keys", c.k, [b, hk, l, e]),
            ("new values", c.v, [b, hk, l, ev]),
            ("key cache", c.k_cache, [b, hk, cap, e]),
            ("value cache", c.v_cache, [b, hk, cap, ev]),
        ];
        for (what, t, shape) in want {
            if t.shape() != shape {
                return Err(Error::ShapeMismatch {
                    op: OP,
                    lhs: t.shape().to_vec(),
                    rhs: shape.to_vec(),
                    why: format!(
                        "differ: the {what} (first) must be (B, Hk, {}, {}) for queries {:?} and a key cache {:?} (second)",
                        if what.contains("cache") { "Cap" } else { "L" },
                        if what.contains("value") { "Ev" } else { "E" },
                        q.shape(),
                        c.k_cache.shape()
                    ),
                });
            }
        }
        if hk == 0 || hq % hk != 0 {
            return Err(Error::invalid(
                OP,
                format!("the query heads ({hq}) must be a multiple of the key/value heads ({hk})"),
            ));
        }
        if e == 0 || ev == 0 {
            return Err(Error::invalid(
                OP,
                format!("head dims of 0 features (E = {e}, Ev = {ev}): nothing to attend with"),
            ));
        }
        if l > cap {
            return Err(Error::invalid(
                OP,
                format!("{l} new positions do not fit a cache of capacity {cap}"),
            ));
        }
        for (what, t) in [("key cache", c.k_cache), ("value cache", c.v_cache)] {
            if !t.layout().is_non_overlapping() {
                return Err(Error::invalid(
                    OP,
                    format!("the {what} has overlapping elements (an expanded view): it is written in place, so give it its own memory"),
                ));
            }
            for (other, u) in [("queries", q), ("new keys", c.k), ("new values", c.v)] {
                if t.storage().same(u.storage()) {
                    return Err(Error::invalid(
                        OP,
                        format!("the {other} share memory with the {what}, which this op overwrites: pass a copy"),
                    ));
                }
            }
        }
        if c.k_cache.storage().same(c.v_cache.storage()) {
            return Err(Error::invalid(
                OP,
                "the key and value caches share memory: give each its own buffer",
            ));
        }
        let rows = |what: &str, t: &Tensor| -> Result<Tensor> {
            if t.dtype() != DType::I64 || !(t.numel() == 1 || t.numel() == b) {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the {what} must be i64 with 1 or B = {b} elements, got {} of shape {:?}",
                        t.dtype(),
                        t.shape()
                    ),
                ));
            }
            t.reshape(&[-1])?.expand(&[b as i64])
        };
        let len = rows("cache length", c.len)?;
        let start = c.start.map(|s| rows("cache start", s)).transpose()?;
        let cd = compute_dtype(dtype);
        let tables = match c.rotary {
            None => None,
            Some((cs, sn, style)) => {
                let ok = cs.dim() == 2
                    && cs.shape() == sn.shape()
                    && cs.dtype().is_float()
                    && sn.dtype().is_float()
                    && cs.shape()[1] > 0
                    && 2 * cs.shape()[1] <= e
                    && cs.shape()[0] >= cap;
                if !ok {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "the rotary tables must be float (P, R/2) with P ≥ the capacity {cap} and 0 < R ≤ E = {e}, got {:?} {} and {:?} {}",
                            cs.shape(),
                            cs.dtype(),
                            sn.shape(),
                            sn.dtype()
                        ),
                    ));
                }
                Some((cs.to_dtype(cd)?, sn.to_dtype(cd)?, style))
            }
        };
        let scale = c.scale.unwrap_or(1.0 / (e as f64).sqrt());
        if !scale.is_finite() {
            return Err(Error::invalid(
                OP,
                format!("the scale {scale} is not finite"),
            ));
        }
        let a = CachedAttention {
            scale,
            groups: hq / hk,
            start: start.is_some(),
            rotary: tables.as_ref().map(|t| t.2),
        };
        // (B, L, Hq, Ev) storage, seen as (B, Hq, L, Ev): the heads of a token side by side
        let o = alloc_result_for_overwrite(&[b, l, hq, ev], dtype, &device, None)?
            .permute(&[0, 2, 1, 3])?;
        if b * l == 0 {
            return Ok(o);
        }
        let mut inputs: Vec<View> =
            vec![q.view_ref(), c.k.view_ref(), c.v.view_ref(), len.view_ref()];
        inputs.extend(start.as_ref().map(Tensor::view_ref));
        if let Some((cs, sn, _)) = &tables {
            inputs.extend([cs.view_ref(), sn.view_ref()]);
        }
        let outputs = [o.view_ref(), c.k_cache.view_ref(), c.v_cache.view_ref()];
        cached_attention::cached_attention(a, &inputs, &outputs)?;
        c.k_cache.storage().bump_version();
        c.v_cache.storage().bump_version();
        Ok(o)
    }
}

fn dims4(t: &Tensor) -> [usize; 4] {
    let s = t.shape();
    [s[0], s[1], s[2], s[3]]
}
