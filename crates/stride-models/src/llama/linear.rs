//! [`LinearWeight`]: the weight of one of the Llama's linear layers (and of its embedding
//! table), held either as a dense [`Tensor`] or as GGUF blocks in a [`QMatrix`].
//!
//! **Why a separate type and not a quantized dtype.** A Q4_1 block is not an element type:
//! it packs 32 values with shared scales, so no view, stride or element-wise op of
//! stride-core means anything on it. The only things a model does with such a weight are
//! a matrix product with activations (`y = x·Wᵀ`) and an embedding gather (rows of `W`),
//! so the weight is an enum with those two operations, and the rest of the model (norms,
//! rotary, attention, KV cache) sees ordinary `f32` tensors. The quantized products are
//! `stride_quant`'s, which compute exactly what llama.cpp's CPU kernels compute: each
//! activation row quantized once to 8 bits, exact integer dot products per block.
//!
//! **Where they run.** [`LinearWeight::Quantized`] lives in host memory and multiplies on the
//! CPU; [`LinearWeight::QuantizedCuda`] holds the same blocks in a GPU's memory
//! ([`DeviceQMatrix`], Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and multiplies there with CUDA kernels
//! that give the CPU product's bits. A product with an input on the other device is an error
//! saying so.

use crate::invalid;
use std::fmt;
use std::sync::Arc;
use stride_core::{DType, Device, Error, Result, Tensor};
use stride_gguf::GgmlType;
use stride_quant::{DeviceQMatrix, QMatrix};

/// The weight `W` of a linear layer `y = x · Wᵀ` (PyTorch's `(out_features, in_features)`
/// layout), or an embedding table (`(vocab, dim)`, rows gathered by token id).
///
/// - [`LinearWeight::Dense`]: a tensor of any float dtype on any device; the product is
///   `x.matmul(&w.t())` in that dtype.
/// - [`LinearWeight::Quantized`]: GGUF blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
///   Q6_K) in host memory, shared (`Arc`) so that a tied output head is the embedding
///   table itself. Inputs must be `f32` on the CPU; outputs are `f32`. The product quantizes
///   each input row to 8 bits (Q8_0, Q8_1 or Q8_K, as the weight type requires) and sums
///   exact integer block products (see the `stride_quant` crate for what that computes and
///   its error bound).
///
/// ```
/// use std::sync::Arc;
/// use stride_core::Tensor;
/// use stride_gguf::GgmlType;
/// use stride_models::llama::LinearWeight;
/// use stride_quant::QMatrix;
/// let w: Vec<f32> = (0..4 * 32).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
/// let q = LinearWeight::Quantized(Arc::new(QMatrix::quantize(GgmlType::Q8_0, 4, 32, &w)?));
/// let x = Tensor::ones([2, 3, 32], stride_core::DType::F32, &stride_core::Device::Cpu)?;
/// let y = q.forward(&x)?;                      // [2, 3, 4], f32
/// assert_eq!(y.shape(), &[2, 3, 4]);
/// let dense = LinearWeight::Dense(q.dequantized(stride_core::DType::F32)?);
/// let yd = dense.forward(&x)?;                 // the f32 product with the dequantized weight
/// let diff = y.sub(&yd)?.to_vec::<f32>()?;
/// assert!(diff.iter().all(|d| d.abs() < 1e-2)); // the activations' 8-bit rounding
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub enum LinearWeight {
    /// A dense `(out_features, in_features)` tensor.
    Dense(Tensor),
    /// A `out_features × in_features` matrix of GGUF blocks, on the CPU.
    Quantized(Arc<QMatrix>),
    /// The same blocks in a CUDA device's memory ([`QMatrix::to_device`]): inputs f32 (or
    /// f16/bf16) on that device, outputs in the input's dtype, the bits of the CPU product.
    QuantizedCuda(Arc<DeviceQMatrix>),
}

impl fmt::Debug for LinearWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinearWeight::Dense(t) => f
                .debug_struct("Dense")
                .field("shape", &t.shape())
                .field("dtype", &t.dtype())
                .field("device", &t.device())
                .finish(),
            LinearWeight::Quantized(q) => f.debug_tuple("Quantized").field(q).finish(),
            LinearWeight::QuantizedCuda(q) => f.debug_tuple("QuantizedCuda").field(q).finish(),
        }
    }
}

fn quant_err(op: &'static str) -> impl Fn(stride_quant::QuantError) -> Error {
    move |e| invalid(op, e.to_string())
}

impl From<Tensor> for LinearWeight {
    fn from(t: Tensor) -> LinearWeight {
        LinearWeight::Dense(t)
    }
}

impl From<QMatrix> for LinearWeight {
    fn from(q: QMatrix) -> LinearWeight {
        LinearWeight::Quantized(Arc::new(q))
    }
}

impl LinearWeight {
    /// `[out_features, in_features]` (`[vocab, dim]` for an embedding table).
    pub fn shape(&self) -> Vec<usize> {
        match self {
            LinearWeight::Dense(t) => t.shape().to_vec(),
            LinearWeight::Quantized(q) => vec![q.rows(), q.cols()],
            LinearWeight::QuantizedCuda(q) => vec![q.rows(), q.cols()],
        }
    }

    /// Where the weight lives (the CPU for [`LinearWeight::Quantized`]).
    pub fn device(&self) -> Device {
        match self {
            LinearWeight::Dense(t) => t.device(),
            LinearWeight::Quantized(_) => Device::Cpu,
            LinearWeight::QuantizedCuda(q) => q.device(),
        }
    }

    /// The dtype of the products' inputs and outputs: the tensor's for a dense weight, `f32`
    /// for a quantized one.
    pub fn dtype(&self) -> DType {
        match self {
            LinearWeight::Dense(t) => t.dtype(),
            LinearWeight::Quantized(_) | LinearWeight::QuantizedCuda(_) => DType::F32,
        }
    }

    /// Whether the weight is held as GGUF blocks.
    pub fn is_quantized(&self) -> bool {
        matches!(
            self,
            LinearWeight::Quantized(_) | LinearWeight::QuantizedCuda(_)
        )
    }

    /// The block type of a quantized weight (`None` for a dense one).
    pub fn ggml_type(&self) -> Option<GgmlType> {
        match self {
            LinearWeight::Dense(_) => None,
            LinearWeight::Quantized(q) => Some(q.ggml_type()),
            LinearWeight::QuantizedCuda(q) => Some(q.ggml_type()),
        }
    }

    /// The dense tensor, if the weight is dense.
    pub fn as_dense(&self) -> Option<&Tensor> {
        match self {
            LinearWeight::Dense(t) => Some(t),
            LinearWeight::Quantized(_) | LinearWeight::QuantizedCuda(_) => None,
        }
    }

    /// The block matrix, if the weight is quantized in host memory.
    pub fn as_quantized(&self) -> Option<&Arc<QMatrix>> {
        match self {
            LinearWeight::Quantized(q) => Some(q),
            _ => None,
        }
    }

    /// The block matrix, if the weight is quantized in a CUDA device's memory.
    pub fn as_quantized_cuda(&self) -> Option<&Arc<DeviceQMatrix>> {
        match self {
            LinearWeight::QuantizedCuda(q) => Some(q),
            _ => None,
        }
    }

    /// The bytes the weight holds (the blocks of a quantized weight, `numel × element size`
    /// of a dense one).
    pub fn nbytes(&self) -> usize {
        match self {
            LinearWeight::Dense(t) => t.nbytes(),
            LinearWeight::Quantized(q) => q.as_bytes().len(),
            LinearWeight::QuantizedCuda(q) => q.nbytes(),
        }
    }

    /// The weight as a dense tensor of `dtype` on the weight's device (a quantized weight is
    /// dequantized on the CPU, bit-exact with ggml, then cast): for references and tests.
    pub fn dequantized(&self, dtype: DType) -> Result<Tensor> {
        match self {
            LinearWeight::Dense(t) => t.to_dtype(dtype),
            LinearWeight::Quantized(q) => {
                let w = q
                    .dequantize()
                    .map_err(quant_err("LinearWeight::dequantized"))?;
                Tensor::from_vec(w, [q.rows(), q.cols()])?.to_dtype(dtype)
            }
            LinearWeight::QuantizedCuda(q) => q
                .dequantized(dtype)
                .map_err(quant_err("LinearWeight::dequantized")),
        }
    }

    /// `y = x · Wᵀ`: `x` is `[..., in_features]`, `y` is `[..., out_features]`.
    ///
    /// Dense: `x.matmul(&w.t())` (any layout, the weight's dtype and device). Quantized: `x`
    /// must be `f32` on the CPU (any layout: it is read in logical order); the product runs
    /// over all `numel / in_features` rows at once with [`QMatrix::matmul`], so each row is
    /// quantized once and the result does not depend on how many rows there are.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        const OP: &str = "LinearWeight::forward";
        let q = match self {
            LinearWeight::Dense(w) => return x.matmul(&w.t()?),
            LinearWeight::Quantized(q) => q,
            LinearWeight::QuantizedCuda(q) => {
                if x.device() != q.device() {
                    return Err(invalid(
                        OP,
                        format!(
                            "the weight is quantized ({} blocks, {} × {}) on {}, but the input is on {}; move the input to the weight's device",
                            q.ggml_type(),
                            q.rows(),
                            q.cols(),
                            q.device(),
                            x.device()
                        ),
                    ));
                }
                return q.matmul(x).map_err(quant_err(OP));
            }
        };
        if !x.device().is_cpu() {
            return Err(invalid(
                OP,
                format!(
                    "the weight is quantized ({} blocks, {} × {}) in host memory, but the input is on {}; move the weight to the input's device (QMatrix::to_device, LlamaWeights::quantized_to_device) or the input to the CPU",
                    q.ggml_type(),
                    q.rows(),
                    q.cols(),
                    x.device()
                ),
            ));
        }
        if x.dtype() != DType::F32 {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: x.dtype(),
                hint: "; products with quantized weights take f32 activations (convert with to_dtype(DType::F32))".into(),
            });
        }
        let (rows, cols) = q.shape();
        if x.dim() == 0 || x.shape()[x.dim() - 1] != cols {
            return Err(invalid(
                OP,
                format!(
                    "the input has shape {:?}; a {rows} × {cols} weight needs [..., {cols}]",
                    x.shape()
                ),
            ));
        }
        let m = x.numel() / cols;
        let xs = x.to_vec::<f32>()?; // logical (row-major) order, whatever x's strides
        let n = m
            .checked_mul(rows)
            .ok_or_else(|| invalid(OP, format!("{m} rows × {rows} outputs overflow usize")))?;
        let mut y = Vec::new();
        y.try_reserve_exact(n).map_err(|_| {
            invalid(
                OP,
                format!("cannot allocate {} bytes for the output", n as u128 * 4),
            )
        })?;
        y.resize(n, 0f32);
        #[cfg(test)]
        if let Some(yr) = test_hook::emulate(q, &xs, m) {
            y = yr;
        } else {
            q.matmul(&xs, m, &mut y).map_err(quant_err(OP))?;
        }
        #[cfg(not(test))]
        q.matmul(&xs, m, &mut y).map_err(quant_err(OP))?;
        #[cfg(test)]
        test_hook::record(q, &xs, m, &y);
        let mut shape = x.shape().to_vec();
        *shape.last_mut().expect("dim ≥ 1") = rows;
        Tensor::from_vec(y, shape)
    }

    /// Several products with one input: `ys[i] = weights[i].forward(x)` — a layer's q/k/v
    /// projections, or its gate/up pair.
    ///
    /// When every weight is [`LinearWeight::QuantizedCuda`] on `x`'s device with the same
    /// `in_features`, the products share one kernel launch per block type
    /// ([`DeviceQMatrix::matmul_many`]: for a decode step's few rows the activations are
    /// rounded once inside it), with the bits of separate [`LinearWeight::forward`] calls.
    /// Otherwise each weight's `forward` runs in turn, so the result is always theirs (and so
    /// are the errors).
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// use stride_gguf::GgmlType;
    /// use stride_models::llama::LinearWeight;
    /// use stride_quant::QMatrix;
    /// let w = |rows: usize| -> Vec<f32> { (0..rows * 64).map(|i| ((i * 7) % 11) as f32 - 5.0).collect() };
    /// let q = LinearWeight::from(QMatrix::quantize(GgmlType::Q4_1, 6, 64, &w(6))?);
    /// let k = LinearWeight::from(QMatrix::quantize(GgmlType::Q4_1, 2, 64, &w(2))?);
    /// let x = Tensor::ones([3, 64], DType::F32, &Device::Cpu)?;
    /// let ys = LinearWeight::forward_many(&[&q, &k], &x)?;
    /// assert_eq!((ys[0].shape(), ys[1].shape()), (&[3, 6][..], &[3, 2][..]));
    /// assert_eq!(ys[1].to_vec::<f32>()?, k.forward(&x)?.to_vec::<f32>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forward_many(weights: &[&LinearWeight], x: &Tensor) -> Result<Vec<Tensor>> {
        const OP: &str = "LinearWeight::forward_many";
        let mats: Option<Vec<&DeviceQMatrix>> = weights
            .iter()
            .map(|w| w.as_quantized_cuda().map(|q| &**q))
            .collect();
        if let Some(mats) = mats {
            let shared = mats.len() > 1
                && mats
                    .iter()
                    .all(|q| q.device() == x.device() && q.cols() == mats[0].cols());
            if shared {
                return DeviceQMatrix::matmul_many(&mats, x).map_err(quant_err(OP));
            }
        }
        weights.iter().map(|w| w.forward(x)).collect()
    }

    /// `y = swiglu(gate, up) · Wᵀ`, the SwiGLU MLP's down projection: `gate` and `up` are
    /// `[..., in_features]`. A quantized weight on CUDA computes `silu(gate) · up` in the
    /// kernel that rounds the activations ([`DeviceQMatrix::matmul_swiglu`]: one launch
    /// fewer); elsewhere `self.forward(&gate.swiglu(up)?)`. The same bits either way.
    ///
    /// ```
    /// use stride_core::{DType, Device, Tensor};
    /// use stride_gguf::GgmlType;
    /// use stride_models::llama::LinearWeight;
    /// use stride_quant::QMatrix;
    /// let w: Vec<f32> = (0..6 * 64).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    /// let q = LinearWeight::from(QMatrix::quantize(GgmlType::Q4_1, 6, 64, &w)?);
    /// let g = Tensor::ones([2, 64], DType::F32, &Device::Cpu)?;
    /// let u = Tensor::full([2, 64], 0.5, DType::F32, &Device::Cpu)?;
    /// let y = q.forward_swiglu(&g, &u)?;
    /// assert_eq!(y.to_vec::<f32>()?, q.forward(&g.swiglu(&u)?)?.to_vec::<f32>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forward_swiglu(&self, gate: &Tensor, up: &Tensor) -> Result<Tensor> {
        const OP: &str = "LinearWeight::forward_swiglu";
        match self.as_quantized_cuda() {
            Some(q) if gate.device() == q.device() && up.device() == q.device() => {
                q.matmul_swiglu(gate, up).map_err(quant_err(OP))
            }
            _ => self.forward(&gate.swiglu(up)?),
        }
    }

    /// The embedding lookup: the rows at `tokens` (i64, any shape), giving
    /// `tokens.shape ++ [dim]`. Dense: [`Tensor::embedding`]. Quantized: each row is
    /// dequantized straight into the output ([`QMatrix::row_into`]; the table is never
    /// expanded to `f32`), on the CPU. An id outside `0..vocab` is an error naming it.
    pub fn embedding(&self, tokens: &Tensor) -> Result<Tensor> {
        const OP: &str = "LinearWeight::embedding";
        let q = match self {
            LinearWeight::Dense(w) => return w.embedding(tokens),
            LinearWeight::Quantized(q) => q,
            LinearWeight::QuantizedCuda(q) => {
                return Err(invalid(
                    OP,
                    format!(
                        "the embedding table is a quantized {} matrix on {}, which has no gather kernel; keep embedding tables dense on CUDA (LlamaWeights::quantized_to_device does)",
                        q.ggml_type(),
                        q.device()
                    ),
                ))
            }
        };
        if !tokens.device().is_cpu() {
            return Err(invalid(
                OP,
                format!(
                    "the embedding table is quantized ({}) and lives on the CPU, but the token ids are on {}; load the model with dequantized weights (WeightFormat::Dequantized, `--weights dequantized`) to run it on CUDA",
                    q.ggml_type(),
                    tokens.device()
                ),
            ));
        }
        if tokens.dtype() != DType::I64 {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: tokens.dtype(),
                hint: "; token ids must be i64".into(),
            });
        }
        let ids = tokens.to_vec::<i64>()?;
        let (rows, cols) = q.shape();
        if let Some(bad) = ids.iter().find(|&&i| i < 0 || i as u64 >= rows as u64) {
            return Err(invalid(
                OP,
                format!("token id {bad} is out of range for a vocabulary of {rows} entries (ids are 0..{rows})"),
            ));
        }
        let n = ids.len().checked_mul(cols).ok_or_else(|| {
            invalid(
                OP,
                format!("{} ids × {cols} values overflow usize", ids.len()),
            )
        })?;
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|_| {
            invalid(
                OP,
                format!("cannot allocate {} bytes for the output", n as u128 * 4),
            )
        })?;
        out.resize(n, 0f32);
        for (&id, row) in ids.iter().zip(out.chunks_exact_mut(cols.max(1))) {
            q.row_into(id as usize, row).map_err(quant_err(OP))?;
        }
        let mut shape = tokens.shape().to_vec();
        shape.push(cols);
        Tensor::from_vec(out, shape)
    }
}

/// Test-only instrumentation of the quantized product (compiled in unit tests only): every
/// call can be recorded (the weight, the exact `f32` input rows and the output) so that a
/// test checks each product the model makes against an exact reference on *the same*
/// inputs; and the product can be replaced by that reference (dequantized weights,
/// Q8-rounded activations, `f64` sums) to run the whole model as its reference.
#[cfg(test)]
pub(crate) mod test_hook {
    use std::cell::RefCell;
    use std::sync::Arc;
    use stride_quant::QMatrix;

    /// One recorded product: weight, `m` input rows (row-major), output rows.
    pub(crate) struct Call {
        pub w: QMatrix,
        pub x: Vec<f32>,
        pub m: usize,
        pub y: Vec<f32>,
    }

    type Emulator = Arc<dyn Fn(&QMatrix, &[f32], usize) -> Vec<f32>>;

    thread_local! {
        static CALLS: RefCell<Option<Vec<Call>>> = const { RefCell::new(None) };
        static EMULATE: RefCell<Option<Emulator>> = const { RefCell::new(None) };
    }

    /// Starts recording this thread's quantized products.
    pub(crate) fn start_recording() {
        CALLS.with(|c| *c.borrow_mut() = Some(Vec::new()));
    }

    /// Stops recording and returns the calls.
    pub(crate) fn take_calls() -> Vec<Call> {
        CALLS.with(|c| c.borrow_mut().take().unwrap_or_default())
    }

    /// Replaces this thread's quantized products by `f` (`None`: the kernels again).
    pub(crate) fn set_emulator(f: Option<Emulator>) {
        EMULATE.with(|e| *e.borrow_mut() = f);
    }

    pub(super) fn emulate(w: &QMatrix, x: &[f32], m: usize) -> Option<Vec<f32>> {
        let f = EMULATE.with(|e| e.borrow().clone())?;
        Some(f(w, x, m))
    }

    pub(super) fn record(w: &QMatrix, x: &[f32], m: usize, y: &[f32]) {
        CALLS.with(|c| {
            if let Some(calls) = c.borrow_mut().as_mut() {
                calls.push(Call {
                    w: w.clone(),
                    x: x.to_vec(),
                    m,
                    y: y.to_vec(),
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weight(ty: GgmlType, rows: usize, cols: usize, seed: usize) -> QMatrix {
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 + seed * 11) % 101) as f32 / 50.0 - 1.0)
            .collect();
        QMatrix::quantize(ty, rows, cols, &w).unwrap()
    }

    /// Off CUDA, `forward_many` is `forward` on each weight: quantized (of different block
    /// types) and dense weights alike, the same bits, and the errors of `forward`.
    #[test]
    fn forward_many_falls_back_to_forward_on_each() {
        let q = LinearWeight::from(weight(GgmlType::Q4_1, 6, 64, 1));
        let k = LinearWeight::from(weight(GgmlType::Q8_0, 2, 64, 2));
        let d = LinearWeight::Dense(
            Tensor::from_vec(
                (0..3 * 64)
                    .map(|i| (i % 7) as f32 - 3.0)
                    .collect::<Vec<_>>(),
                [3, 64],
            )
            .unwrap(),
        );
        let x = Tensor::from_vec(
            (0..2 * 5 * 64)
                .map(|i| ((i * 13) % 17) as f32 / 8.0 - 1.0)
                .collect::<Vec<_>>(),
            [2, 5, 64],
        )
        .unwrap();
        let ws = [&q, &k, &d];
        let ys = LinearWeight::forward_many(&ws, &x).unwrap();
        assert_eq!(ys.len(), 3);
        for (w, y) in ws.iter().zip(&ys) {
            let want = w.forward(&x).unwrap();
            assert_eq!(y.shape(), want.shape());
            let (a, b) = (y.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
            assert!(a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        assert!(LinearWeight::forward_many(&[], &x).unwrap().is_empty());
        // a transposed (non-contiguous) input: forward reads it in logical order
        let xt = x
            .reshape(&[10, 64])
            .unwrap()
            .t()
            .unwrap()
            .contiguous()
            .unwrap();
        let xt = xt.t().unwrap();
        let ys = LinearWeight::forward_many(&[&q, &k], &xt).unwrap();
        assert_eq!(
            ys[0].to_vec::<f32>().unwrap(),
            q.forward(&xt).unwrap().to_vec::<f32>().unwrap()
        );
        // the first failing weight's error, as forward gives it
        let wide = LinearWeight::from(weight(GgmlType::Q4_0, 2, 96, 3));
        let e = LinearWeight::forward_many(&[&q, &wide], &x)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[..., 96]"), "{e}");
    }
}
