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
use stride_core::cuda::quant::{quantized_matmul, BlockFormat};
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
    /// its bits; half-precision outputs are then rounded once.
    pub fn matmul(&self, x: &Tensor) -> Result<Tensor> {
        Ok(quantized_matmul(
            x,
            &self.blocks,
            self.format,
            self.rows,
            self.cols,
        )?)
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
