//! Rotary position embeddings (RoPE, Su et al. 2021) in the two conventions checkpoints use.

use stride_core::{DType, Device, Error, Result, Tensor};

const OP: &str = "Rotary";

/// Which features of a head are rotated together: stride-core's [`RotaryStyle`] (its docs
/// name the trap: GGUF `llama` files want `Interleaved`, Hugging Face ones `HalfSplit`).
pub use stride_core::RotaryStyle;

/// Per-row cos/sin tables for one input geometry ([`Rotary::row_tables`]).
#[derive(Clone, Debug)]
pub struct RowTables {
    rows: usize,
    t: usize,
    cos: Tensor,
    sin: Tensor,
}

/// Rotary embeddings for heads of `dim` rotated features: cos/sin tables precomputed (in
/// f64, stored in f32 and f64) for positions `0..max_len` on one device.
///
/// [`Rotary::apply`] takes `x: (..., T, D)` — typically `(B, H, T, D)`, any layout — with
/// `D ≥ dim`: the first `dim` features of each head are rotated, the rest pass unchanged
/// (partial rotary). Each pair `(a, b)` at position `p` becomes
/// `(a·cos θ − b·sin θ, a·sin θ + b·cos θ)`, `θ = p · base^(−2i/dim)`. f16/bf16 inputs
/// compute in f32 and round once.
///
/// ```
/// use stride_core::{DType, Device, Tensor};
/// use stride_nn::functional::{Rotary, RotaryStyle};
/// let rope = Rotary::new(8, 10000.0, 64, RotaryStyle::HalfSplit, &Device::Cpu)?;
/// let q = Tensor::randn([1, 2, 5, 8], DType::F32, &Device::Cpu, None)?;   // (B, H, T, D)
/// let prefill = rope.apply(&q, 0)?;                   // positions 0..5
/// let next = rope.apply(&q.narrow(2, 4, 1)?, 4)?;     // position 4 alone (a decode step)
/// assert_eq!(next.to_vec::<f32>()?, prefill.narrow(2, 4, 1)?.to_vec::<f32>()?);
/// # Ok::<(), stride_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Rotary {
    dim: usize,
    base: f64,
    max_len: usize,
    style: RotaryStyle,
    device: Device,
    cos32: Tensor,
    sin32: Tensor,
    cos64: Tensor,
    sin64: Tensor,
}

impl Rotary {
    /// Tables for `dim` rotated features (even, > 0), frequency base `base` (Llama: 10000;
    /// SmolLM2: 100000) and positions `0..max_len`, on `device`.
    pub fn new(
        dim: usize,
        base: f64,
        max_len: usize,
        style: RotaryStyle,
        device: &Device,
    ) -> Result<Rotary> {
        if dim == 0 || !dim.is_multiple_of(2) {
            return Err(crate::invalid(
                OP,
                format!("the rotary dim must be even and > 0, got {dim}"),
            ));
        }
        if !(base > 0.0) || !base.is_finite() {
            return Err(crate::invalid(
                OP,
                format!("the rotary base must be finite and > 0, got {base}"),
            ));
        }
        let half = dim / 2;
        let n = max_len.checked_mul(half).ok_or_else(|| {
            crate::invalid(OP, format!("max_len {max_len} × dim {dim} overflows"))
        })?;
        let mut cos = Vec::with_capacity(n);
        let mut sin = Vec::with_capacity(n);
        for p in 0..max_len {
            for i in 0..half {
                let theta = p as f64 * base.powf(-2.0 * i as f64 / dim as f64);
                cos.push(theta.cos());
                sin.push(theta.sin());
            }
        }
        let (cos, sin) = (
            Tensor::from_vec(cos, [max_len, half])?,
            Tensor::from_vec(sin, [max_len, half])?,
        );
        // the f64 tables stay on the host where the device holds no f64 (wgpu): no f64
        // input can be there to rotate
        let at64 = if device.holds(DType::F64) {
            *device
        } else {
            Device::Cpu
        };
        Ok(Rotary {
            dim,
            base,
            max_len,
            style,
            device: *device,
            cos32: cos.to_dtype(DType::F32)?.to_device(device)?,
            sin32: sin.to_dtype(DType::F32)?.to_device(device)?,
            cos64: cos.to_device(&at64)?,
            sin64: sin.to_device(&at64)?,
        })
    }
    /// Rotated features per head.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// The frequency base.
    pub fn base(&self) -> f64 {
        self.base
    }
    /// Positions the tables cover (`0..max_len`).
    pub fn max_len(&self) -> usize {
        self.max_len
    }
    /// The pairing convention.
    pub fn style(&self) -> RotaryStyle {
        self.style
    }

    /// The `(cos, sin)` angle tables `(max_len, dim/2)` in the compute dtype of `dtype` (f64
    /// for f64, else f32), row `p` the angles of position `p` — what
    /// [`Tensor::attention_with_kv_cache`](stride_core::Tensor::attention_with_kv_cache)
    /// takes to rotate inside its kernels.
    ///
    /// ```
    /// use stride_core::{DType, Device, RotaryStyle};
    /// use stride_nn::functional::Rotary;
    /// let r = Rotary::new(8, 10000.0, 16, RotaryStyle::HalfSplit, &Device::Cpu)?;
    /// let (cos, sin) = r.angle_tables(DType::BF16);
    /// assert_eq!((cos.shape(), cos.dtype()), (&[16, 4][..], DType::F32));
    /// assert_eq!(sin.shape(), &[16, 4]);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn angle_tables(&self, dtype: DType) -> (&Tensor, &Tensor) {
        self.tables(dtype)
    }

    fn tables(&self, dtype: DType) -> (&Tensor, &Tensor) {
        if dtype == DType::F64 {
            (&self.cos64, &self.sin64)
        } else {
            (&self.cos32, &self.sin32)
        }
    }

    fn check(&self, x: &Tensor) -> Result<(usize, usize)> {
        if !x.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: x.dtype(),
                hint: "; rotary embeddings take floating-point inputs".into(),
            });
        }
        if x.device() != self.device {
            return Err(Error::DeviceMismatch {
                op: OP,
                a: self.device,
                b: x.device(),
            });
        }
        let n = x.dim();
        if n < 2 || x.shape()[n - 1] < self.dim {
            return Err(crate::invalid(
                OP,
                format!(
                    "the input must be (..., T, D) with D ≥ the rotary dim {}, got shape {:?}",
                    self.dim,
                    x.shape()
                ),
            ));
        }
        Ok((x.shape()[n - 2], x.shape()[n - 1]))
    }

    /// Rotates `x: (..., T, D)` for positions `offset..offset + T` (the same for every row).
    /// An error when `offset + T > max_len`. No host wait: a view of the tables.
    pub fn apply(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        let (t, _) = self.check(x)?;
        if offset + t > self.max_len {
            return Err(crate::invalid(
                OP,
                format!(
                    "positions {offset}..{} are beyond the tables' max_len {}",
                    offset + t,
                    self.max_len
                ),
            ));
        }
        let (c, s) = self.tables(x.dtype());
        let c = c.narrow(0, offset as i64, t)?;
        let s = s.narrow(0, offset as i64, t)?;
        self.rotate(x, &c, &s)
    }

    /// Rotates `x: (B, ..., T, D)` with row `b` at positions `offsets[b]..offsets[b] + T`
    /// (per-row offsets, for left-padded batches: row `b`'s first real token is at position
    /// 0, so its offset is `start − left_pad[b]`). A negative position is a padding slot:
    /// it gets position 0 (its values are meant to be masked). `offsets.len()` must be `B`.
    pub fn apply_rows(&self, x: &Tensor, offsets: &[i64]) -> Result<Tensor> {
        let (t, _) = self.check(x)?;
        let tables = self.row_tables(x.dim(), t, x.dtype(), offsets)?;
        self.apply_row_tables(x, &tables)
    }

    /// The cos/sin rows [`Rotary::apply_rows`] uses for inputs of `ndim` dims, `t` positions
    /// and `dtype`: build them once and rotate many tensors of that geometry with
    /// [`Rotary::apply_row_tables`] (a model's queries and keys in every layer).
    pub fn row_tables(
        &self,
        ndim: usize,
        t: usize,
        dtype: DType,
        offsets: &[i64],
    ) -> Result<RowTables> {
        let b = offsets.len();
        if ndim < 3 || b == 0 {
            return Err(crate::invalid(
                OP,
                format!(
                    "per-row tables need inputs (B, ..., T, D) of at least 3 dims and one offset per row, got {ndim} dims and {b} offsets"
                ),
            ));
        }
        let (c, s) = self.tables(dtype);
        if offsets.iter().all(|&o| o == offsets[0]) && offsets[0] >= 0 {
            let o = offsets[0] as usize;
            if o + t > self.max_len {
                return Err(crate::invalid(
                    OP,
                    format!(
                        "positions {o}..{} are beyond the tables' max_len {}",
                        o + t,
                        self.max_len
                    ),
                ));
            }
            return Ok(RowTables {
                rows: b,
                t,
                cos: c.narrow(0, o as i64, t)?,
                sin: s.narrow(0, o as i64, t)?,
            });
        }
        let mut cs = Vec::with_capacity(b);
        let mut ss = Vec::with_capacity(b);
        for &o in offsets {
            let end = o + t as i64;
            if end > self.max_len as i64 {
                return Err(crate::invalid(
                    OP,
                    format!(
                        "positions {o}..{end} are beyond the tables' max_len {}",
                        self.max_len
                    ),
                ));
            }
            let pad = (-o).clamp(0, t as i64) as usize;
            let real = t - pad;
            let start = o.max(0);
            let rows = |tab: &Tensor| -> Result<Tensor> {
                let tail = tab.narrow(0, start, real)?;
                if pad == 0 {
                    return Ok(tail);
                }
                let first = tab.narrow(0, 0, 1)?.expand(&[pad as i64, -1])?;
                Tensor::cat(&[&first, &tail], 0)
            };
            cs.push(rows(c)?);
            ss.push(rows(s)?);
        }
        // (B, T, dim/2) → (B, 1, …, 1, T, dim/2) to broadcast over the dims between
        let mut shape = vec![b as i64];
        shape.extend(std::iter::repeat_n(1, ndim - 3));
        shape.extend([t as i64, (self.dim / 2) as i64]);
        Ok(RowTables {
            rows: b,
            t,
            cos: Tensor::stack(&cs.iter().collect::<Vec<_>>(), 0)?.reshape(&shape)?,
            sin: Tensor::stack(&ss.iter().collect::<Vec<_>>(), 0)?.reshape(&shape)?,
        })
    }

    /// [`Rotary::row_tables`] for positions held in a device tensor: `positions` is `(B, T)`
    /// integer (row `b`'s token `i` at position `positions[b, i]`), gathered from the tables
    /// on the device — no host wait and no host value, so a step built this way can be
    /// captured once as a CUDA graph and replayed at every position. A position outside
    /// `0..max_len` fails like an out-of-range `index_select` (on CUDA at the next read).
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// use stride_nn::functional::{Rotary, RotaryStyle};
    /// let rope = Rotary::new(8, 10000.0, 64, RotaryStyle::HalfSplit, &Device::Cpu)?;
    /// let q = Tensor::randn([2, 3, 1, 8], DType::F32, &Device::Cpu, None)?; // (B, H, 1, D)
    /// let at = Tensor::from_vec(vec![5i64, 9], [2, 1])?;                     // per-row positions
    /// let tables = rope.row_tables_at(4, &at, DType::F32)?;
    /// let y = rope.apply_row_tables(&q, &tables)?;
    /// assert_eq!(y.to_vec::<f32>()?, rope.apply_rows(&q, &[5, 9])?.to_vec::<f32>()?);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn row_tables_at(
        &self,
        ndim: usize,
        positions: &Tensor,
        dtype: DType,
    ) -> Result<RowTables> {
        if ndim < 3 || positions.dim() != 2 || positions.dtype().is_float() {
            return Err(crate::invalid(
                OP,
                format!(
                    "device-side tables need inputs (B, ..., T, D) of at least 3 dims and integer positions (B, T), got {ndim} dims and positions {:?} {}",
                    positions.shape(),
                    positions.dtype()
                ),
            ));
        }
        let (b, t) = (positions.shape()[0], positions.shape()[1]);
        let (c, s) = self.tables(dtype);
        let flat = positions.reshape(&[-1])?;
        let mut shape = vec![b as i64];
        shape.extend(std::iter::repeat_n(1, ndim - 3));
        shape.extend([t as i64, (self.dim / 2) as i64]);
        Ok(RowTables {
            rows: b,
            t,
            cos: c.index_select(0, &flat)?.reshape(&shape)?,
            sin: s.index_select(0, &flat)?.reshape(&shape)?,
        })
    }

    /// Rotates `x: (B, ..., T, D)` with tables from [`Rotary::row_tables`] (made for the same
    /// number of dims, rows, positions and dtype family).
    pub fn apply_row_tables(&self, x: &Tensor, tables: &RowTables) -> Result<Tensor> {
        let (t, _) = self.check(x)?;
        if x.dim() < 3 || x.shape()[0] != tables.rows || t != tables.t {
            return Err(crate::invalid(
                OP,
                format!(
                    "apply_rows needs an input (B, ..., T, D) with B = {} rows (one offset each) and T = {}, got shape {:?}",
                    tables.rows,
                    tables.t,
                    x.shape()
                ),
            ));
        }
        self.rotate(x, &tables.cos, &tables.sin)
    }

    /// `x` rotated with tables `c`, `s` broadcasting to `(..., T, dim/2)`: stride-core's fused
    /// [`Tensor::rotary`] (one pass, any layout; the features past `dim` pass through).
    fn rotate(&self, x: &Tensor, c: &Tensor, s: &Tensor) -> Result<Tensor> {
        x.rotary(c, s, self.style)
    }
}
