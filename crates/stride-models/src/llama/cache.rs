//! [`LlamaCache`]: the preallocated key/value cache of a [`super::Llama`].

use crate::invalid;
use crate::lm::KvCache;
use stride_core::{DType, Device, Result, Tensor};

/// Keys and values of every layer, each `(batch, n_kv_heads, capacity, head_dim)` in the
/// model's dtype, allocated once and written **in place** through strided views (a `narrow`
/// of positions `len..len + t`, then `copy_`) — never a `cat` per token. Attention reads the
/// `narrow` of the first `len + t` positions.
///
/// Row `b` starts with `left_pad[b]` padding positions: they are masked as keys, and the
/// row's rotary positions start at 0 at its first real token.
pub struct LlamaCache {
    pub(crate) k: Vec<Tensor>,
    pub(crate) v: Vec<Tensor>,
    pub(crate) len: usize,
    capacity: usize,
    pub(crate) left_pad: Vec<usize>,
    /// `left_pad` as an i64 `(batch, 1, 1, 1)` tensor on the device (for the key mask).
    pub(crate) pad_t: Tensor,
    /// `len` as an i64 `[1]` tensor on the device, for steps that read the position on the
    /// device (`Tensor::attention_with_kv_cache`; a decode step captured as a CUDA graph
    /// replays at whatever it holds); set from `len` before each use.
    pub(crate) len_t: Tensor,
    /// Which cache this is (a captured decode step belongs to one cache).
    pub(crate) id: u64,
}

impl LlamaCache {
    /// A cache for a model of `n_layers` layers of `n_kv_heads` heads of `head_dim` features
    /// and context length `context_len` (the most positions `capacity` may ask for).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        n_layers: usize,
        left_pad: &[usize],
        n_kv_heads: usize,
        capacity: usize,
        context_len: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<LlamaCache> {
        if capacity > context_len {
            return Err(invalid(
                "new_cache",
                format!("capacity {capacity} exceeds the model's context length {context_len}"),
            ));
        }
        let b = left_pad.len();
        if b == 0 {
            return Err(invalid(
                "LlamaCache::new",
                "a cache needs at least one row (left_pad has one entry per row)",
            ));
        }
        if let Some(&p) = left_pad.iter().find(|&&p| p > capacity) {
            return Err(invalid(
                "LlamaCache::new",
                format!("left padding {p} exceeds the capacity {capacity}"),
            ));
        }
        let shape = [b, n_kv_heads, capacity, head_dim];
        let mut k = Vec::with_capacity(n_layers);
        let mut v = Vec::with_capacity(n_layers);
        for _ in 0..n_layers {
            k.push(Tensor::zeros(shape, dtype, device)?);
            v.push(Tensor::zeros(shape, dtype, device)?);
        }
        let pads: Vec<i64> = left_pad.iter().map(|&p| p as i64).collect();
        let pad_t = Tensor::from_vec(pads, [b, 1, 1, 1])?.to_device(device)?;
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(LlamaCache {
            k,
            v,
            len: 0,
            capacity,
            left_pad: left_pad.to_vec(),
            pad_t,
            len_t: Tensor::zeros([1], DType::I64, device)?,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// An error unless this cache was made for `n_layers` layers of `n_kv_heads` heads of
    /// `head_dim` features in `dtype` on `device` (by the model's `new_cache`) and has room
    /// for `t` more positions.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_call(
        &self,
        op: &'static str,
        t: usize,
        n_layers: usize,
        n_kv_heads: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<()> {
        let made_here = self.k.len() == n_layers
            && self.k.first().is_none_or(|k| {
                k.shape()[1] == n_kv_heads
                    && k.shape()[3] == head_dim
                    && k.dtype() == dtype
                    && k.device() == *device
            });
        if !made_here {
            return Err(invalid(
                op,
                "the cache was not made by this model (new_cache)",
            ));
        }
        if self.len + t > self.capacity {
            return Err(invalid(
                op,
                format!(
                    "{t} more positions after {} exceed the cache's capacity {}",
                    self.len, self.capacity
                ),
            ));
        }
        Ok(())
    }

    /// For the next `t` positions (`len..len + t`): which keys each query sees, a bool
    /// `(B or 1, 1, t, len + t)` mask (causal in absolute positions, padding never visible),
    /// and each row's rotary position offset (its first real token is position 0). No host
    /// wait: built from host-side counters.
    pub(crate) fn visibility(&self, t: usize) -> Result<(Tensor, Vec<i64>)> {
        let (len, s) = (self.len, self.len + t);
        let dev = self.pad_t.device();
        let j = Tensor::arange(0i64, s as i64, &dev)?.reshape(&[1, 1, 1, s as i64])?;
        let qpos = Tensor::arange(len as i64, s as i64, &dev)?.reshape(&[1, 1, t as i64, 1])?;
        let mut mask = j.le(&qpos)?;
        if self.left_pad.iter().any(|&p| p > 0) {
            mask = mask.logical_and(&j.ge(&self.pad_t)?)?;
        }
        let offsets = self
            .left_pad
            .iter()
            .map(|&p| len as i64 - p as i64)
            .collect();
        Ok((mask, offsets))
    }

    /// The absolute positions of the next `t` tokens of each row, `(B, t)` i64 on the
    /// cache's device: `len + i − left_pad[b]`, padding slots at 0 (for learned position
    /// tables). Made on the device: no upload, so no host wait in a decoding step.
    pub(crate) fn positions(&self, t: usize) -> Result<Tensor> {
        let dev = self.pad_t.device();
        let b = self.left_pad.len() as i64;
        Tensor::arange(self.len as i64, (self.len + t) as i64, &dev)?
            .unsqueeze(0)?
            .sub(&self.pad_t.reshape(&[b, 1])?)?
            .clamp_min(0i64)
    }

    /// Writes layer `l`'s keys and values `(B, n_kv_heads, t, head_dim)` at positions
    /// `len..len + t` in place and returns the views of positions `0..len + t` (the caller
    /// advances `len` once every layer is written).
    pub(crate) fn append(&self, l: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = k.shape()[2];
        let s = self.len + t;
        self.k[l].narrow(2, self.len as i64, t)?.copy_(k)?;
        self.v[l].narrow(2, self.len as i64, t)?.copy_(v)?;
        Ok((self.k[l].narrow(2, 0, s)?, self.v[l].narrow(2, 0, s)?))
    }

    /// [`LlamaCache::visibility`] and [`LlamaCache::positions`] for one new token per row
    /// at the position held in `len_t`: the mask `(B or 1, 1, 1, capacity)` over the whole
    /// buffer (positions past `len_t` masked) and the positions `(B, 1)`, both computed on
    /// the device from `len_t`, so the same kernels serve every step.
    pub(crate) fn step_on_device(&self) -> Result<(Tensor, Tensor)> {
        let dev = self.pad_t.device();
        let cap = self.capacity as i64;
        let b = self.left_pad.len() as i64;
        let j = Tensor::arange(0i64, cap, &dev)?.reshape(&[1, 1, 1, cap])?;
        let mut mask = j.le(&self.len_t.reshape(&[1, 1, 1, 1])?)?;
        if self.left_pad.iter().any(|&p| p > 0) {
            mask = mask.logical_and(&j.ge(&self.pad_t)?)?;
        }
        let positions = self
            .len_t
            .reshape(&[1, 1])?
            .sub(&self.pad_t.reshape(&[b, 1])?)?
            .clamp_min(0i64)?;
        Ok((mask, positions))
    }

    /// Writes layer `l`'s keys and values `(B, n_kv_heads, 1, head_dim)` at the position in
    /// `len_t` (an `index_copy_`, so the position is read on the device) and returns the
    /// whole buffers, to be read under [`LlamaCache::step_on_device`]'s mask.
    pub(crate) fn append_on_device(
        &self,
        l: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        self.k[l].index_copy_(2, &self.len_t, k)?;
        self.v[l].index_copy_(2, &self.len_t, v)?;
        Ok((self.k[l].clone(), self.v[l].clone()))
    }

    /// Row `b`'s padding positions.
    pub fn left_pad(&self) -> &[usize] {
        &self.left_pad
    }

    /// Layer `l`'s key buffer `(batch, n_kv_heads, capacity, head_dim)` (all of it,
    /// positions past [`KvCache::len`] included).
    pub fn keys(&self, l: usize) -> Option<&Tensor> {
        self.k.get(l)
    }

    /// Layer `l`'s value buffer, like [`LlamaCache::keys`].
    pub fn values(&self, l: usize) -> Option<&Tensor> {
        self.v.get(l)
    }
}

impl KvCache for LlamaCache {
    fn len(&self) -> usize {
        self.len
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn truncate(&mut self, len: usize) -> Result<()> {
        // positions after len are overwritten by the next forward; nothing to clear
        self.len = self.len.min(len);
        Ok(())
    }
    fn batch(&self) -> usize {
        self.left_pad.len()
    }
}
