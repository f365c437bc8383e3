//! Creation: zeros/ones/full/empty, ranges, eye, and `*_like` with a memory format.

use crate::backend;
use crate::{DType, Device, Error, Result, Scalar, Shape, Tensor};

/// How a `*_like` or `clone` result lays out its elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryFormat {
    /// Keep the source's dim order (its exact strides when it is dense and non-overlapping),
    /// as PyTorch's `torch.preserve_format`.
    #[default]
    Preserve,
    /// Row-major.
    Contiguous,
}

impl Tensor {
    /// A tensor of `value` (cast to `dtype`).
    pub fn full(
        shape: impl Into<Shape>,
        value: impl Into<Scalar>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let dims = shape.into();
        let dims = dims.dims();
        let t = Tensor::alloc_for_overwrite(
            dims,
            crate::layout::contiguous_strides(dims),
            dtype,
            device,
        )
        .map_err(|e| e.in_op("full"))?;
        backend::fill(t.view_ref(), value.into())?;
        Ok(t)
    }
    /// A tensor of zeros. A shape too large to allocate is [`Error::OutOfMemory`] (naming the
    /// shape, dtype and bytes); one whose element count overflows `usize` is
    /// [`Error::Invalid`].
    pub fn zeros(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::alloc_contiguous(shape.into().dims(), dtype, device).map_err(|e| e.in_op("zeros"))
    }
    pub fn ones(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::full(shape, 1i64, dtype, device)
    }
    /// An "uninitialised" tensor. stride never exposes uninitialised memory: it is zeroed.
    pub fn empty(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::zeros(shape, dtype, device)
    }

    fn like(&self, format: MemoryFormat, dtype: DType) -> Result<Tensor> {
        Tensor::alloc(
            self.shape(),
            self.strides_for(format),
            dtype,
            &self.device(),
        )
    }
    fn strides_for(&self, format: MemoryFormat) -> Vec<usize> {
        match format {
            MemoryFormat::Preserve => self.layout().dense_strides_like(),
            MemoryFormat::Contiguous => crate::layout::contiguous_strides(self.shape()),
        }
    }
    /// [`Tensor::empty_like`] for a tensor that one backend primitive then writes in full
    /// (no zero-fill on CUDA; see [`Tensor::alloc_for_overwrite`]).
    pub(crate) fn like_for_overwrite(&self, format: MemoryFormat) -> Result<Tensor> {
        Tensor::alloc_for_overwrite(
            self.shape(),
            self.strides_for(format),
            self.dtype(),
            &self.device(),
        )
    }
    pub fn zeros_like(&self, format: MemoryFormat) -> Result<Tensor> {
        self.like(format, self.dtype())
    }
    pub fn ones_like(&self, format: MemoryFormat) -> Result<Tensor> {
        self.full_like(1i64, format)
    }
    pub fn empty_like(&self, format: MemoryFormat) -> Result<Tensor> {
        self.like(format, self.dtype())
    }
    pub fn full_like(&self, value: impl Into<Scalar>, format: MemoryFormat) -> Result<Tensor> {
        let t = self.like_for_overwrite(format)?;
        backend::fill(t.view_ref(), value.into())?;
        Ok(t)
    }
    /// Writes `value` (converted to this tensor's dtype) into every element, through this
    /// tensor's layout. Returns `self`.
    pub fn fill_(&self, value: impl Into<Scalar>) -> Result<Tensor> {
        let value = value.into();
        crate::autograd::record::in_place(
            "fill_",
            self,
            &[],
            || {
                if !self.layout().is_non_overlapping() {
                    return Err(crate::Error::OverlappingOutput {
                        op: "fill_",
                        shape: self.shape().to_vec(),
                        strides: self.stride().to_vec(),
                    });
                }
                if value.dtype().category() > self.dtype().category() {
                    return Err(crate::Error::UnsafeCast {
                        op: "fill_",
                        result: value.dtype(),
                        output: self.dtype(),
                    });
                }
                backend::fill(self.view_ref(), value)?;
                self.storage().bump_version();
                Ok(self.clone())
            },
            |orig| orig.full_like(value, MemoryFormat::Preserve),
        )
    }
    /// Like [`Tensor::zeros_like`] with another dtype.
    pub fn zeros_like_dtype(&self, dtype: DType, format: MemoryFormat) -> Result<Tensor> {
        self.like(format, dtype)
    }

    /// `[start, end)` in steps of 1: int64 when both ends are integers, else float32
    /// (PyTorch's defaults).
    pub fn arange(
        start: impl Into<Scalar>,
        end: impl Into<Scalar>,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::arange_step(start, end, 1i64, device)
    }
    /// `[start, end)` in steps of `step`.
    pub fn arange_step(
        start: impl Into<Scalar>,
        end: impl Into<Scalar>,
        step: impl Into<Scalar>,
        device: &Device,
    ) -> Result<Tensor> {
        let (s, e, st) = (start.into(), end.into(), step.into());
        let all_int = [s, e, st].iter().all(|x| !matches!(x, Scalar::Float(_)));
        let dtype = if all_int { DType::I64 } else { DType::F32 };
        let (sf, ef, stf) = (s.to_f64(), e.to_f64(), st.to_f64());
        if stf == 0.0 || !stf.is_finite() || !sf.is_finite() || !ef.is_finite() {
            return Err(Error::invalid(
                "arange",
                format!("needs finite bounds and a non-zero step, got {sf}, {ef}, {stf}"),
            ));
        }
        if (ef - sf) * stf < 0.0 {
            return Err(Error::invalid(
                "arange",
                format!("upper bound {ef} and step {stf} point in opposite directions from {sf}"),
            ));
        }
        let n = if all_int {
            // exact: i64 bounds are too wide for f64 (and their span for i64)
            let (si, ei, sti) = (s.to_i64() as i128, e.to_i64() as i128, st.to_i64() as i128);
            let span = ei - si;
            let n = if span == 0 {
                0
            } else {
                (span + sti - sti.signum()) / sti
            };
            usize::try_from(n.max(0)).ok()
        } else {
            let n = ((ef - sf) / stf).ceil().max(0.0);
            // 2^64 as f64 is the first value past usize::MAX
            (n < 18_446_744_073_709_551_616.0).then_some(n as usize)
        };
        let Some(n) = n else {
            return Err(Error::invalid(
                "arange",
                format!("[{sf}, {ef}) in steps of {stf} has more elements than usize can count; use a larger step or a smaller range"),
            ));
        };
        if builds_on_device(device) {
            return Tensor::arange_on_device(n, s, st, all_int, dtype, device)
                .map_err(|e| e.in_op("arange"));
        }
        // the values are built on the host (fallibly: an impossible length is OutOfMemory)
        if all_int {
            let (si, sti) = (s.to_i64(), st.to_i64());
            let mut v: Vec<i64> =
                crate::alloc::try_with_capacity(n, "arange", &[n], Some(DType::I64))?;
            // every value lies in [start, end), so the wrapping arithmetic is exact
            v.extend((0..n as i64).map(|i| si.wrapping_add(i.wrapping_mul(sti))));
            Tensor::from_vec(v, [n])?.to_device(device)
        } else {
            let mut v: Vec<f64> =
                crate::alloc::try_with_capacity(n, "arange", &[n], Some(DType::F64))?;
            v.extend((0..n).map(|i| sf + i as f64 * stf));
            Tensor::from_vec(v, [n])?
                .to_dtype(dtype)
                .map_err(|e| e.in_op("arange"))?
                .to_device(device)
        }
    }

    /// `0..n` as i64 on `device`, made there (a running sum of ones, exact in i64): what the
    /// creation ops that would otherwise build values on the host and upload them (an
    /// upload waits for the device) start from.
    fn index_on_device(n: usize, device: &Device) -> Result<Tensor> {
        let _ng = crate::autograd::no_grad();
        Tensor::ones([n], DType::I64, device)?.cumsum(0)?.sub(1i64)
    }

    /// [`Tensor::arange_step`] computed on a GPU from an index `0..n` (a running sum of ones,
    /// exact in i64) instead of uploaded from the host: an upload waits for the device. The
    /// same values as the host's formula, bit for bit: integers by wrapping i64 arithmetic,
    /// floats as `start + i·step` in f64 (each op rounded once, no contraction), then
    /// rounded to `dtype`.
    fn arange_on_device(
        n: usize,
        start: Scalar,
        step: Scalar,
        all_int: bool,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let _ng = crate::autograd::no_grad();
        let i = Tensor::index_on_device(n, device)?;
        if all_int {
            let (si, sti) = (start.to_i64(), step.to_i64());
            let v = if sti == 1 { i } else { i.mul(sti)? };
            if si == 0 {
                Ok(v)
            } else {
                v.add(si)
            }
        } else {
            i.to_dtype(DType::F64)?
                .mul(step.to_f64())?
                .add(start.to_f64())?
                .to_dtype(dtype)
        }
    }

    /// `steps` evenly spaced values from `start` to `end` inclusive (PyTorch's symmetric
    /// formula, so the last value is exactly `end`).
    pub fn linspace(
        start: f64,
        end: f64,
        steps: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let step = if steps > 1 {
            (end - start) / (steps - 1) as f64
        } else {
            0.0
        };
        let half = steps / 2;
        if builds_on_device(device) {
            // on the GPU from an index (no upload): the host formula below, op by op in f64
            let _ng = crate::autograd::no_grad();
            let i = Tensor::index_on_device(steps, device)?.to_dtype(DType::F64)?;
            let lo = i.mul(step)?.add(start)?;
            let v = if steps <= 1 {
                lo
            } else {
                // end − step·(steps − 1 − i), the subtraction as the sum of the negation
                let hi = i
                    .neg()?
                    .add((steps - 1) as f64)?
                    .mul(step)?
                    .neg()?
                    .add(end)?;
                i.lt(half as f64)?.where_cond(&lo, &hi)?
            };
            return v.to_dtype(dtype).map_err(|e| e.in_op("linspace"));
        }
        if steps == 1 {
            return Tensor::from_vec(vec![start], [1])?.to_dtype(dtype);
        }
        // built on the host, fallibly: an impossible `steps` is OutOfMemory, not an abort
        let mut v: Vec<f64> =
            crate::alloc::try_with_capacity(steps, "linspace", &[steps], Some(DType::F64))?;
        v.extend((0..steps).map(|i| {
            if i < half {
                start + step * i as f64
            } else {
                end - step * (steps - 1 - i) as f64
            }
        }));
        Tensor::from_vec(v, [steps])?
            .to_dtype(dtype)
            .map_err(|e| e.in_op("linspace"))?
            .to_device(device)
    }

    /// An `n × m` matrix with ones on the diagonal.
    pub fn eye(n: usize, m: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        let t = Tensor::alloc_contiguous(&[n, m], dtype, device).map_err(|e| match e {
            Error::Invalid { msg, .. } => Error::invalid("eye", msg),
            e => e.in_op("eye"),
        })?;
        let d = t.diagonal(0, 0, 1)?;
        backend::fill(d.view_ref(), Scalar::Int(1))?;
        Ok(t)
    }
}

/// Whether creation ops build their values on `device` from an index instead of on the host:
/// on CUDA, where an upload from pageable memory waits for the device. wgpu's queue writes
/// do not wait (and wgpu holds no f64 to compute them in), so there the host builds them.
fn builds_on_device(device: &Device) -> bool {
    matches!(device, Device::Cuda(_))
}
