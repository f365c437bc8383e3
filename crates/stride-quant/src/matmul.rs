//! The products `y = x · Wᵀ` with a [`QMatrix`] `W`.
//!
//! Each row of `x` is quantized once (to the weight type's [`ActFormat`]), then every
//! output `y[i, j]` is the dot kernel of weight row `j` and activation row `i`. Work is
//! split over the weight rows with rayon, in chunks small enough that a single activation
//! row (a decode step) still uses every thread. Each output is computed by one kernel call
//! whatever the split, so the result does not depend on the number of threads.

use crate::dot::dot;
use crate::error::{bad_size, QuantError, Result};
use crate::q8::{ActFormat, Q8Row};
use crate::{Isa, QMatrix};
use rayon::prelude::*;

impl QMatrix {
    /// `y = W · x` for one activation vector: `x` has `cols` values, `y` gets `rows`.
    ///
    /// ```
    /// use stride_gguf::GgmlType;
    /// use stride_quant::QMatrix;
    /// let w: Vec<f32> = (0..4 * 32).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    /// let q = QMatrix::quantize(GgmlType::Q8_0, 4, 32, &w)?;
    /// let x = vec![0.5f32; 32];
    /// let mut y = vec![0f32; 4];
    /// q.matvec(&x, &mut y)?;
    /// // the product with the dequantized weights, up to the activations' 8-bit rounding
    /// let w0 = q.row(0)?;
    /// let (exact, mag) = w0.iter().fold((0.0, 0.0), |(s, m), v| (s + v * 0.5, m + (v * 0.5).abs()));
    /// assert!((y[0] - exact).abs() <= 1e-3 * mag);
    /// # Ok::<(), stride_quant::QuantError>(())
    /// ```
    pub fn matvec(&self, x: &[f32], y: &mut [f32]) -> Result<()> {
        const OP: &str = "QMatrix::matvec";
        if x.len() != self.cols() || y.len() != self.rows() {
            return Err(bad_size(
                OP,
                format!(
                    "x has {} values and y {}; a {} × {} matrix needs x of {} and y of {}",
                    x.len(),
                    y.len(),
                    self.rows(),
                    self.cols(),
                    self.cols(),
                    self.rows()
                ),
            ));
        }
        self.run(OP, Isa::detect(), x, 1, self.cols(), y, self.rows())
    }

    /// `y = x · Wᵀ` for `m` contiguous activation rows: `x` is `m × cols` and `y` is
    /// `m × rows`, both row-major.
    pub fn matmul(&self, x: &[f32], m: usize, y: &mut [f32]) -> Result<()> {
        const OP: &str = "QMatrix::matmul";
        let (nx, ny) = (m.checked_mul(self.cols()), m.checked_mul(self.rows()));
        if nx != Some(x.len()) || ny != Some(y.len()) {
            return Err(bad_size(
                OP,
                format!(
                    "x has {} values and y {}; m = {m} rows through a {} × {} matrix need x of m × {} and y of m × {}",
                    x.len(),
                    y.len(),
                    self.rows(),
                    self.cols(),
                    self.cols(),
                    self.rows()
                ),
            ));
        }
        self.run(OP, Isa::detect(), x, m, self.cols(), y, self.rows())
    }

    /// `y = x · Wᵀ` over strided rows: activation row `i` is
    /// `x[i·x_stride .. i·x_stride + cols]`, output row `i` is
    /// `y[i·y_stride .. i·y_stride + rows]`. Values between the rows are neither read nor
    /// written. Rows of `x` may overlap (`x_stride = 0` repeats one row); rows of `y` may
    /// not (`y_stride ≥ rows` when `m > 1`).
    pub fn matmul_strided(
        &self,
        x: &[f32],
        m: usize,
        x_stride: usize,
        y: &mut [f32],
        y_stride: usize,
    ) -> Result<()> {
        self.matmul_with(Isa::detect(), x, m, x_stride, y, y_stride)
    }

    /// [`QMatrix::matmul_strided`] with the kernels of `isa` (an error if this CPU lacks
    /// it). Every [`Isa`] gives the same bits; this exists for tests and benchmarks.
    pub fn matmul_with(
        &self,
        isa: Isa,
        x: &[f32],
        m: usize,
        x_stride: usize,
        y: &mut [f32],
        y_stride: usize,
    ) -> Result<()> {
        const OP: &str = "QMatrix::matmul_strided";
        if !isa.is_available() {
            return Err(QuantError::IsaUnavailable {
                op: OP,
                isa: isa.name(),
            });
        }
        if m == 0 {
            return Ok(());
        }
        let (rows, cols) = self.shape();
        if m > 1 && y_stride < rows {
            return Err(bad_size(
                OP,
                format!(
                    "y_stride = {y_stride} is less than rows = {rows}: output rows would overlap; use a stride of at least {rows}"
                ),
            ));
        }
        let need = |stride: usize, len: usize| {
            (m - 1).checked_mul(stride).and_then(|v| v.checked_add(len))
        };
        match need(x_stride, cols) {
            Some(n) if n <= x.len() => {}
            n => {
                return Err(bad_size(
                    OP,
                    format!(
                        "x has {} values; {m} rows of {cols} at stride {x_stride} need {}",
                        x.len(),
                        n.map_or("more than usize::MAX".to_string(), |n| n.to_string())
                    ),
                ))
            }
        }
        match need(y_stride, rows) {
            Some(n) if n <= y.len() => {}
            n => {
                return Err(bad_size(
                    OP,
                    format!(
                        "y has {} values; {m} rows of {rows} at stride {y_stride} need {}",
                        y.len(),
                        n.map_or("more than usize::MAX".to_string(), |n| n.to_string())
                    ),
                ))
            }
        }
        self.run(OP, isa, x, m, x_stride, y, y_stride)
    }

    /// The product, sizes checked.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        op: &'static str,
        isa: Isa,
        x: &[f32],
        m: usize,
        x_stride: usize,
        y: &mut [f32],
        y_stride: usize,
    ) -> Result<()> {
        let (rows, cols) = self.shape();
        let ty = self.ggml_type();
        let format = ActFormat::for_weights(ty).expect("QMatrix holds supported types only");
        if m == 0 || rows == 0 {
            return Ok(());
        }
        // each activation row once, in parallel
        let acts: Vec<Q8Row> = (0..m)
            .into_par_iter()
            .map(|i| {
                let mut r = Q8Row::empty(format);
                r.fill(&x[i * x_stride..i * x_stride + cols]);
                r
            })
            .collect();
        let threads = rayon::current_num_threads().max(1);
        let chunk = rows.div_ceil(threads * 8).max(1);
        if m == 1 {
            y[..rows]
                .par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(c, yc)| {
                    for (jj, yj) in yc.iter_mut().enumerate() {
                        *yj = dot(isa, ty, self.row_data(c * chunk + jj), &acts[0]);
                    }
                });
            return Ok(());
        }
        // weight-row-major results (t[j·m + i] = y[i, j]), then written through y's stride
        let mut t = Vec::new();
        t.try_reserve_exact(rows * m)
            .map_err(|_| QuantError::OutOfMemory {
                op,
                bytes: (rows * m) as u128 * 4,
            })?;
        t.resize(rows * m, 0f32);
        t.par_chunks_mut(chunk * m).enumerate().for_each(|(c, tc)| {
            for (jj, tj) in tc.chunks_exact_mut(m).enumerate() {
                let w = self.row_data(c * chunk + jj);
                for (v, a) in tj.iter_mut().zip(&acts) {
                    *v = dot(isa, ty, w, a);
                }
            }
        });
        for i in 0..m {
            let yi = &mut y[i * y_stride..i * y_stride + rows];
            for (j, v) in yi.iter_mut().enumerate() {
                *v = t[j * m + i];
            }
        }
        Ok(())
    }
}
