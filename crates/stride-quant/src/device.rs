//! `DeviceQMatrix`: a [`QMatrix`]'s blocks in a GPU's memory, multiplied there.
//!
//! The blocks are copied once, byte for byte, into a `u8` tensor on the device; products run
//! stride-core's CUDA kernels (`stride_core::cuda::quant`), which perform this crate's CPU
//! operations in the same order — the same activation rounding, exact integer block sums,
//! the same eight-lane fused multiply-add accumulation and reduction tree — so
//! [`DeviceQMatrix::matmul`] gives **the bits of [`QMatrix::matmul`]** for the same
//! activations, and the crate's error bound holds unchanged.
//!
//! CUDA kernels exist for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0; [`QMatrix::to_device`] refuses the
//! K-quants with an error naming the type (never a silently different product).

use crate::error::{bad_size, QuantError, Result};
use crate::QMatrix;
use std::fmt;
use stride_core::cuda::quant::{
    quantized_matmul, quantized_matmul_many, quantized_matmul_swiglu, BlockFormat,
};
use stride_core::{DType, Device, Tensor};
use stride_gguf::GgmlType;

/// The weight types with CUDA kernels.
pub(crate) const CUDA_SUPPORTED: &str = "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0";

/// A `rows × cols` matrix of GGUF blocks held in a CUDA device's memory: `W` of
/// `y = x · Wᵀ`, as [`QMatrix`] on the CPU. Made by [`QMatrix::to_device`]; cheap to clone
/// (the blocks are shared).
#[derive(Clone)]
pub struct DeviceQMatrix {
    ty: GgmlType,
    format: BlockFormat,
    rows: usize,
    cols: usize,
    blocks: Tensor,
}

impl fmt::Debug for DeviceQMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceQMatrix")
            .field("ty", &self.ty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("device", &self.blocks.device())
            .finish()
    }
}

/// The CUDA block format of `ty`, or an error naming `ty`.
fn cuda_format(op: &'static str, ty: GgmlType) -> Result<BlockFormat> {
    BlockFormat::from_name(ty.name()).ok_or(QuantError::Unsupported {
        op,
        ggml_type: ty,
        supported: CUDA_SUPPORTED,
    })
}

impl QMatrix {
    /// Whether [`QMatrix::to_device`] has CUDA kernels for this matrix's type (Q4_0, Q4_1,
    /// Q5_0, Q5_1, Q8_0).
    pub fn has_cuda_kernel(&self) -> bool {
        BlockFormat::from_name(self.ggml_type().name()).is_some()
    }

    /// Copies the blocks to `device` (a CUDA GPU), for products there.
    ///
    /// Errors: `device` is the CPU (use the `QMatrix` itself), the type has no CUDA kernel
    /// (the K-quants: dequantize those instead), or the device can't be used.
    ///
    /// ```
    /// use stride_core::{cuda, DType, Tensor};
    /// use stride_gguf::GgmlType;
    /// use stride_quant::QMatrix;
    /// let w: Vec<f32> = (0..4 * 64).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    /// let q = QMatrix::quantize(GgmlType::Q4_1, 4, 64, &w)?;
    /// if let Some(gpu) = cuda::require_or_skip("doc: QMatrix::to_device") {
    ///     let dq = q.to_device(&gpu)?;
    ///     let x: Vec<f32> = (0..3 * 64).map(|i| (i % 5) as f32 - 2.0).collect();
    ///     let y = dq.matmul(&Tensor::from_vec(x.clone(), [3, 64])?.to_device(&gpu)?)?;
    ///     let mut y_cpu = vec![0f32; 3 * 4];
    ///     q.matmul(&x, 3, &mut y_cpu)?;
    ///     assert_eq!(y.to_vec::<f32>()?, y_cpu); // the same bits
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_device(&self, device: &Device) -> Result<DeviceQMatrix> {
        const OP: &str = "QMatrix::to_device";
        if device.is_cpu() {
            return Err(bad_size(
                OP,
                "the device is the CPU; a QMatrix already multiplies there (QMatrix::matmul)"
                    .into(),
            ));
        }
        let format = cuda_format(OP, self.ggml_type())?;
        let blocks = Tensor::from_vec(self.as_bytes().to_vec(), [self.as_bytes().len()])?
            .to_device(device)?;
        Ok(DeviceQMatrix {
            ty: self.ggml_type(),
            format,
            rows: self.rows(),
            cols: self.cols(),
            blocks,
        })
    }
}

impl DeviceQMatrix {
    /// `y = x · Wᵀ`: `x` is `[..., cols]` (f32, f16 or bf16, any layout) on the matrix's
    /// device, `y` is `[..., rows]` in `x`'s dtype. Each row of `x` (widened to f32) is
    /// rounded to 8-bit blocks once, as [`QMatrix::matmul`] does, and the f32 results are
    /// its bits; half-precision outputs are then rounded once. Up to 8 rows of a strided or
    /// half-precision `x` this is one kernel launch that reads `x` in place (no copy, no
    /// cast); [`DeviceQMatrix::matmul_many`] shares one launch among several matrices.
    pub fn matmul(&self, x: &Tensor) -> Result<Tensor> {
        Ok(quantized_matmul(
            x,
            &self.blocks,
            self.format,
            self.rows,
            self.cols,
        )?)
    }

    /// `y = swiglu(gate, up) · Wᵀ` — a SwiGLU MLP's down projection — with `silu(gate) · up`
    /// computed by the kernel that rounds the activations (no launch of its own): the bits of
    /// `self.matmul(&gate.swiglu(up)?)`. `gate` and `up` share a shape, dtype and device; f32
    /// inputs take the fused kernel, others the composed ops.
    ///
    /// ```
    /// use stride_core::{cuda, Tensor};
    /// use stride_gguf::GgmlType;
    /// use stride_quant::QMatrix;
    /// let w: Vec<f32> = (0..4 * 64).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    /// let q = QMatrix::quantize(GgmlType::Q4_1, 4, 64, &w)?;
    /// if let Some(gpu) = cuda::require_or_skip("doc: DeviceQMatrix::matmul_swiglu") {
    ///     let dq = q.to_device(&gpu)?;
    ///     let v = |s: f32| (0..64).map(|i| (i % 9) as f32 * s - 1.0).collect::<Vec<_>>();
    ///     let g = Tensor::from_vec(v(0.5), [1, 64])?.to_device(&gpu)?;
    ///     let u = Tensor::from_vec(v(0.25), [1, 64])?.to_device(&gpu)?;
    ///     let y = dq.matmul_swiglu(&g, &u)?;
    ///     assert_eq!(y.to_vec::<f32>()?, dq.matmul(&g.swiglu(&u)?)?.to_vec::<f32>()?);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn matmul_swiglu(&self, gate: &Tensor, up: &Tensor) -> Result<Tensor> {
        Ok(quantized_matmul_swiglu(
            gate,
            up,
            &self.blocks,
            self.format,
            self.rows,
            self.cols,
        )?)
    }

    /// Several products with one input: `ys[i] = x · mats[i]ᵀ`, each `[..., mats[i].rows()]`
    /// in `x`'s dtype — the bits of `mats[i].matmul(x)` each (and so of [`QMatrix::matmul`]).
    ///
    /// For up to 8 rows of `x` (decode) the activations are rounded inside the product kernel
    /// and the matrices of one block type share a single launch (up to 8 a launch): a
    /// layer's q/k/v projections, or its gate/up pair, cost one launch instead of two per
    /// matrix. The block types may differ (one launch per type).
    ///
    /// Errors: the matrices on different devices or of different `cols` (they can't share an
    /// input), and anything [`DeviceQMatrix::matmul`] refuses. No matrices give no outputs.
    ///
    /// ```
    /// use stride_core::{cuda, Tensor};
    /// use stride_gguf::GgmlType;
    /// use stride_quant::{DeviceQMatrix, QMatrix};
    /// let w = |rows: usize| -> Vec<f32> { (0..rows * 64).map(|i| ((i * 7) % 11) as f32 - 5.0).collect() };
    /// let q = QMatrix::quantize(GgmlType::Q4_1, 6, 64, &w(6))?;
    /// let k = QMatrix::quantize(GgmlType::Q4_1, 2, 64, &w(2))?;
    /// if let Some(gpu) = cuda::require_or_skip("doc: DeviceQMatrix::matmul_many") {
    ///     let (dq, dk) = (q.to_device(&gpu)?, k.to_device(&gpu)?);
    ///     let x = Tensor::from_vec((0..64).map(|i| (i % 5) as f32 - 2.0).collect::<Vec<_>>(), [1, 64])?
    ///         .to_device(&gpu)?;
    ///     let ys = DeviceQMatrix::matmul_many(&[&dq, &dk], &x)?;
    ///     assert_eq!(ys[0].shape(), &[1, 6]);
    ///     assert_eq!(ys[1].to_vec::<f32>()?, dk.matmul(&x)?.to_vec::<f32>()?); // the same bits
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn matmul_many(mats: &[&DeviceQMatrix], x: &Tensor) -> Result<Vec<Tensor>> {
        const OP: &str = "DeviceQMatrix::matmul_many";
        let Some(first) = mats.first() else {
            return Ok(Vec::new());
        };
        for (i, m) in mats.iter().enumerate().skip(1) {
            if m.device() != first.device() {
                return Err(bad_size(
                    OP,
                    format!(
                        "matrix {i} is on {} but matrix 0 is on {}; the matrices of one call must share a device (move them with QMatrix::to_device)",
                        m.device(),
                        first.device()
                    ),
                ));
            }
            if m.cols != first.cols {
                return Err(bad_size(
                    OP,
                    format!(
                        "matrix {i} is {} × {} but matrix 0 is {} × {}; matrices sharing one input must have the same number of columns (call matmul on each instead)",
                        m.rows, m.cols, first.rows, first.cols
                    ),
                ));
            }
        }
        let ws: Vec<(&Tensor, BlockFormat, usize)> =
            mats.iter().map(|m| (&m.blocks, m.format, m.rows)).collect();
        Ok(quantized_matmul_many(x, &ws, first.cols)?)
    }

    /// The block type.
    pub fn ggml_type(&self) -> GgmlType {
        self.ty
    }

    /// Output features (rows of `W`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (columns of `W`).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The device holding the blocks.
    pub fn device(&self) -> Device {
        self.blocks.device()
    }

    /// Bytes of the blocks.
    pub fn nbytes(&self) -> usize {
        self.blocks.numel()
    }

    /// The blocks as a `u8` tensor on the device.
    pub fn blocks(&self) -> &Tensor {
        &self.blocks
    }

    /// The matrix back in host memory (waits for the device).
    pub fn to_host(&self) -> Result<QMatrix> {
        let bytes = self.blocks.to_vec::<u8>()?;
        QMatrix::from_vec(self.ty, self.rows, self.cols, bytes)
    }

    /// The whole matrix as a dense `rows × cols` tensor of `dtype` on the device (dequantized
    /// on the CPU, bit-exact with ggml, then copied): for references and embedding tables.
    pub fn dequantized(&self, dtype: DType) -> Result<Tensor> {
        let w = self.to_host()?.dequantize()?;
        Ok(Tensor::from_vec(w, [self.rows, self.cols])?
            .to_dtype(dtype)?
            .to_device(&self.device())?)
    }
}
