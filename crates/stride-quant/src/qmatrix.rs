//! `QMatrix`: a weight matrix stored as GGUF blocks, row-major (llama.cpp's layout).

use crate::dot::{is_supported, SUPPORTED};
use crate::error::{bad_size, QuantError, Result};
use std::fmt;
use stride_gguf::GgmlType;

/// A `rows × cols` weight matrix of block-quantized values, `W` of `y = x · Wᵀ`: `rows` is
/// the number of output features, `cols` the number of input features, and each row is
/// `cols / block_size` consecutive GGUF blocks of one [`GgmlType`] — exactly the bytes of a
/// GGUF tensor of dims `[cols, rows]` (ggml lists the fastest dimension first).
///
/// Supported types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32 values per block) and Q4_K, Q5_K, Q6_K
/// (256). The products are in `matmul.rs` ([`QMatrix::matvec`], [`QMatrix::matmul`]).
#[derive(Clone, PartialEq, Eq)]
pub struct QMatrix {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: Vec<u8>,
}

impl fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QMatrix")
            .field("ty", &self.ty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("bytes", &self.data.len())
            .finish()
    }
}

/// The byte size of a `rows × cols` matrix of `ty`, every size and product checked.
fn geometry(op: &'static str, ty: GgmlType, rows: usize, cols: usize) -> Result<(usize, usize)> {
    if !is_supported(ty) {
        return Err(QuantError::Unsupported {
            op,
            ggml_type: ty,
            supported: SUPPORTED,
        });
    }
    let (bs, ts) = (ty.block_size(), ty.type_size());
    if !cols.is_multiple_of(bs) {
        return Err(bad_size(
            op,
            format!(
                "cols = {cols} is not a whole number of {ty} blocks ({bs} values each); a {ty} row must have a multiple of {bs} columns"
            ),
        ));
    }
    let elements = rows.checked_mul(cols).filter(|&n| n <= isize::MAX as usize);
    let row_bytes = (cols / bs).checked_mul(ts);
    let total = row_bytes.and_then(|r| r.checked_mul(rows));
    match (elements, row_bytes, total) {
        (Some(_), Some(row_bytes), Some(total)) if total <= isize::MAX as usize => {
            Ok((row_bytes, total))
        }
        _ => Err(bad_size(
            op,
            format!(
                "a {rows} × {cols} {ty} matrix is too large: its element count or byte size exceeds isize::MAX"
            ),
        )),
    }
}

impl QMatrix {
    /// A matrix over `bytes`, `rows × cols / block_size` blocks of `ty` (for example a GGUF
    /// tensor's data, `Gguf::tensor_data`), copied.
    ///
    /// Errors: an unsupported type, `cols` not a multiple of the block size, a size that
    /// overflows, or `bytes` not exactly the size these imply. Block contents are not
    /// inspected: a non-finite scale in a block gives non-finite outputs, as it would
    /// dequantized.
    ///
    /// ```
    /// use stride_gguf::GgmlType;
    /// use stride_quant::QMatrix;
    /// // 2 × 32 Q8_0: two blocks, scale 1.0 (f16 0x3c00), values 0..32 and their negation
    /// let mut bytes = vec![0x00, 0x3c];
    /// bytes.extend((0..32).map(|i| i as u8));
    /// bytes.extend([0x00, 0x3c]);
    /// bytes.extend((0..32).map(|i| (-(i as i8)) as u8));
    /// let w = QMatrix::from_bytes(GgmlType::Q8_0, 2, 32, &bytes)?;
    /// assert_eq!(w.row(1)?[3], -3.0);
    /// assert!(QMatrix::from_bytes(GgmlType::Q8_0, 3, 32, &bytes).is_err());
    /// # Ok::<(), stride_quant::QuantError>(())
    /// ```
    pub fn from_bytes(ty: GgmlType, rows: usize, cols: usize, bytes: &[u8]) -> Result<QMatrix> {
        Self::check_len("QMatrix::from_bytes", ty, rows, cols, bytes.len())?;
        QMatrix::from_vec(ty, rows, cols, bytes.to_vec())
    }

    /// The 2-D tensor `name` of a GGUF file (ggml dims `[cols, rows]`), its bytes copied.
    ///
    /// ```
    /// use stride_gguf::{quantize, Gguf, GgmlType, GgufWriter};
    /// use stride_quant::QMatrix;
    /// let w: Vec<f32> = (0..3 * 64).map(|i| (i % 9) as f32 - 4.0).collect();
    /// let mut file = GgufWriter::new();
    /// file.add_tensor("blk.0.ffn_up.weight", &[64, 3], GgmlType::Q4_0, &quantize(GgmlType::Q4_0, &w)?)?;
    /// let g = Gguf::from_bytes(file.to_bytes()?)?;
    /// let q = QMatrix::from_gguf(&g, "blk.0.ffn_up.weight")?;
    /// assert_eq!((q.rows(), q.cols(), q.ggml_type()), (3, 64, GgmlType::Q4_0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_gguf(g: &stride_gguf::Gguf, name: &str) -> Result<QMatrix> {
        const OP: &str = "QMatrix::from_gguf";
        let info = g.tensor(name)?;
        if info.dims.is_empty() || info.dims.len() > 2 {
            return Err(bad_size(
                OP,
                format!(
                    "tensor {name:?} has dims {:?}; a QMatrix is 2-D (ggml dims [cols, rows]): slice higher-dimensional tensors with QMatrix::from_bytes",
                    info.dims
                ),
            ));
        }
        let size = |v: u64| usize::try_from(v).ok();
        let (Some(cols), Some(rows)) = (size(info.row_len()), size(info.n_rows())) else {
            return Err(bad_size(
                OP,
                format!("tensor {name:?} dims {:?} do not fit in usize", info.dims),
            ));
        };
        QMatrix::from_bytes(info.ggml_type, rows, cols, g.tensor_data(name)?)
    }

    /// As [`QMatrix::from_bytes`], taking ownership of the bytes (no copy).
    pub fn from_vec(ty: GgmlType, rows: usize, cols: usize, bytes: Vec<u8>) -> Result<QMatrix> {
        let row_bytes = Self::check_len("QMatrix::from_vec", ty, rows, cols, bytes.len())?;
        Ok(QMatrix {
            ty,
            rows,
            cols,
            row_bytes,
            data: bytes,
        })
    }

    fn check_len(
        op: &'static str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        len: usize,
    ) -> Result<usize> {
        let (row_bytes, total) = geometry(op, ty, rows, cols)?;
        if len != total {
            return Err(bad_size(
                op,
                format!(
                    "a {rows} × {cols} {ty} matrix takes {total} bytes ({row_bytes} per row), but {len} bytes were given"
                ),
            ));
        }
        Ok(row_bytes)
    }

    /// Quantizes the row-major `rows × cols` matrix `w` to `ty` with
    /// [`stride_gguf::quantize`] (byte for byte ggml's reference encoder). Q4_0, Q4_1, Q5_0,
    /// Q5_1 and Q8_0 can be produced this way; K-quant weights come from GGUF files
    /// ([`QMatrix::from_bytes`]). A NaN or infinite weight is an error naming its index.
    ///
    /// ```
    /// use stride_gguf::GgmlType;
    /// use stride_quant::QMatrix;
    /// let w: Vec<f32> = (0..3 * 64).map(|i| (i % 7) as f32 - 3.0).collect();
    /// let q = QMatrix::quantize(GgmlType::Q8_0, 3, 64, &w)?;
    /// assert_eq!((q.rows(), q.cols(), q.as_bytes().len()), (3, 64, 3 * 2 * 34));
    /// # Ok::<(), stride_quant::QuantError>(())
    /// ```
    pub fn quantize(ty: GgmlType, rows: usize, cols: usize, w: &[f32]) -> Result<QMatrix> {
        const OP: &str = "QMatrix::quantize";
        geometry(OP, ty, rows, cols)?;
        if rows * cols != w.len() {
            return Err(bad_size(
                OP,
                format!(
                    "a {rows} × {cols} matrix has {} values, but {} were given",
                    rows * cols,
                    w.len()
                ),
            ));
        }
        if !stride_gguf::can_quantize(ty) {
            return Err(QuantError::Unsupported {
                op: OP,
                ggml_type: ty,
                supported: "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (K-quant weights are read from GGUF files with QMatrix::from_bytes)",
            });
        }
        let bytes = stride_gguf::quantize(ty, w)?;
        QMatrix::from_vec(ty, rows, cols, bytes)
    }

    /// The block type.
    pub fn ggml_type(&self) -> GgmlType {
        self.ty
    }

    /// The format activations are quantized to for products with this matrix.
    pub fn act_format(&self) -> crate::ActFormat {
        crate::ActFormat::for_weights(self.ty).expect("QMatrix holds supported types only")
    }

    /// Output features (rows of `W`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (columns of `W`).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The block bytes, row after row.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// The blocks of row `i` (`i < rows`, checked by the callers).
    pub(crate) fn row_data(&self, i: usize) -> &[u8] {
        &self.data[i * self.row_bytes..(i + 1) * self.row_bytes]
    }

    /// The whole matrix as `f32`, row-major (`stride_gguf::dequantize`, bit-exact with
    /// ggml). An allocation failure is an error.
    pub fn dequantize(&self) -> Result<Vec<f32>> {
        let n = self.rows * self.cols;
        let mut out = Vec::new();
        out.try_reserve_exact(n)
            .map_err(|_| QuantError::OutOfMemory {
                op: "QMatrix::dequantize",
                bytes: n as u128 * 4,
            })?;
        out.resize(n, 0.0);
        stride_gguf::dequantize(self.ty, &self.data, &mut out)?;
        Ok(out)
    }

    /// Row `i` as `f32` (an embedding lookup).
    pub fn row(&self, i: usize) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.cols];
        self.row_into(i, &mut out)?;
        Ok(out)
    }

    /// Writes row `i` as `f32` into `out` (`cols` values): an embedding gather without
    /// allocation. `out` is unchanged on error.
    pub fn row_into(&self, i: usize, out: &mut [f32]) -> Result<()> {
        const OP: &str = "QMatrix::row_into";
        if i >= self.rows {
            return Err(bad_size(
                OP,
                format!("row {i} is out of range for a matrix of {} rows", self.rows),
            ));
        }
        if out.len() != self.cols {
            return Err(bad_size(
                OP,
                format!(
                    "the output has {} values, a row has {}",
                    out.len(),
                    self.cols
                ),
            ));
        }
        stride_gguf::dequantize(self.ty, self.row_data(i), out)?;
        Ok(())
    }
}
