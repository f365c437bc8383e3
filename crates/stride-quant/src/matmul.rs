//! The products `y = x · Wᵀ` with a [`QMatrix`] `W`.
//!
//! Each row of `x` is quantized once (to the weight type's [`ActFormat`]), then every
//! output `y[i, j]` is the dot kernel of weight row `j` and activation row `i`. Work is
//! split over the weight rows with rayon, in chunks small enough that a single activation
//! row (a decode step) still uses every thread. Each output is computed by one kernel call
//! whatever the split, so the result does not depend on the number of threads.
//!
//! With several activation rows (prefill) and a 32-value block type, the tile kernel
//! (`dot::dot_rows`) runs each weight row against up to [`TILE`] activation rows at once,
//! unpacking each weight block once for the tile; each output still gets exactly the
//! operations of the per-pair kernel, so the same bits. Work is then split over blocks of
//! activation rows as well as over chunks of weight rows. The K-quants keep the per-pair
//! path.

use crate::dot::{dot, dot_rows, has_rows};
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
        self.run(OP, Isa::detect(), x, 1, self.cols(), y, self.rows(), true)
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
        self.run(OP, Isa::detect(), x, m, self.cols(), y, self.rows(), true)
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
        self.strided(isa, x, m, x_stride, y, y_stride, true)
    }

    /// [`QMatrix::matmul_with`] without the multi-row tile kernel: every output by its own
    /// per-pair kernel call. The same bits; for tests and benchmarks only.
    #[doc(hidden)]
    pub fn matmul_per_pair(
        &self,
        isa: Isa,
        x: &[f32],
        m: usize,
        x_stride: usize,
        y: &mut [f32],
        y_stride: usize,
    ) -> Result<()> {
        self.strided(isa, x, m, x_stride, y, y_stride, false)
    }

    /// The strided product, sizes checked here; `tiles` allows the multi-row kernel.
    #[allow(clippy::too_many_arguments)]
    fn strided(
        &self,
        isa: Isa,
        x: &[f32],
        m: usize,
        x_stride: usize,
        y: &mut [f32],
        y_stride: usize,
        tiles: bool,
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
        self.run(OP, isa, x, m, x_stride, y, y_stride, tiles)
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
        tiles: bool,
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
        if tiles && has_rows(ty) {
            return self.run_tiles(op, isa, &acts, y, y_stride);
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

    /// The product of `m = acts.len() > 1` quantized rows by the tile kernel (`has_rows`
    /// holds for the type; `y_stride ≥ rows`).
    ///
    /// The activation rows are cut into blocks (at most ~256 KiB of quantized rows, so that
    /// a block stays in L2 while weight rows stream past) and the weight rows into chunks
    /// (as for one row); each (block, chunk) pair is one rayon task, which runs every weight
    /// row of its chunk against its block, [`TILE`] rows at a time (the remainder by a
    /// smaller tile; weight rows in passes of ~128 KiB, each pass run by every tile in
    /// turn). Results go to a buffer, one region per task (activation-row-major
    /// inside), then are copied to `y` row by row.
    fn run_tiles(
        &self,
        op: &'static str,
        isa: Isa,
        acts: &[Q8Row],
        y: &mut [f32],
        y_stride: usize,
    ) -> Result<()> {
        let (rows, cols) = self.shape();
        let ty = self.ggml_type();
        let m = acts.len();
        let threads = rayon::current_num_threads().max(1);
        let chunk = rows.div_ceil(threads * 8).max(1);
        let n_chunks = rows.div_ceil(chunk);
        // a quantized row: cols bytes of values, an f32 scale (and an f32 sum) per 32
        let act_bytes = (cols + cols / 4).max(1);
        let by_cache = m.div_ceil((256 * 1024 / act_bytes).max(TILE));
        // enough tasks for every thread when there are few weight rows
        let by_threads = (threads * 4).div_ceil(n_chunks).min(m.div_ceil(TILE));
        let block = m.div_ceil(by_cache.max(by_threads)).next_multiple_of(TILE);
        let n_blocks = m.div_ceil(block);

        let mut t = Vec::new();
        t.try_reserve_exact(rows * m)
            .map_err(|_| QuantError::OutOfMemory {
                op,
                bytes: (rows * m) as u128 * 4,
            })?;
        t.resize(rows * m, 0f32);
        // task regions, in order: block-major, then chunk; t[il·n + jj] inside
        let mut tasks = Vec::with_capacity(n_blocks * n_chunks);
        let mut rest: &mut [f32] = &mut t;
        for ab in 0..n_blocks {
            let (i0, l) = (ab * block, block.min(m - ab * block));
            for c in 0..n_chunks {
                let (j0, n) = (c * chunk, chunk.min(rows - c * chunk));
                let (region, tail) = rest.split_at_mut(n * l);
                rest = tail;
                tasks.push((i0, l, j0, n, region));
            }
        }
        // weight rows per pass over the block's tiles: ~128 KiB, re-read from L2 by each
        // tile while the tile's activation rows stay in L1
        let pass = (128 * 1024 / self.row_bytes().max(1)).max(1);
        tasks.into_par_iter().for_each(|(i0, l, j0, n, region)| {
            let a = &acts[i0..i0 + l];
            for p0 in (0..n).step_by(pass) {
                let mut il = 0;
                while il < l {
                    let r = (l - il).min(TILE);
                    for jj in p0..n.min(p0 + pass) {
                        let w = self.row_data(j0 + jj);
                        match r {
                            1 => tile::<1>(isa, ty, w, a, il, region, n, jj),
                            2 => tile::<2>(isa, ty, w, a, il, region, n, jj),
                            3 => tile::<3>(isa, ty, w, a, il, region, n, jj),
                            _ => tile::<TILE>(isa, ty, w, a, il, region, n, jj),
                        }
                    }
                    il += r;
                }
            }
        });
        let t = &t;
        y[..(m - 1) * y_stride + rows]
            .par_chunks_mut(y_stride)
            .enumerate()
            .for_each(|(i, yi)| {
                let i0 = i / block * block;
                let l = block.min(m - i0);
                let il = i - i0;
                for c in 0..n_chunks {
                    let (j0, n) = (c * chunk, chunk.min(rows - c * chunk));
                    let at = i0 * rows + j0 * l + il * n;
                    yi[j0..j0 + n].copy_from_slice(&t[at..at + n]);
                }
            });
        Ok(())
    }
}

/// Activation rows per tile of the multi-row kernel.
const TILE: usize = 4;

/// Weight row `w` against activation rows `a[il..il + R]`: output `(il + r, jj)` to
/// `out[(il + r)·n + jj]`.
#[allow(clippy::too_many_arguments)]
#[inline]
fn tile<const R: usize>(
    isa: Isa,
    ty: stride_gguf::GgmlType,
    w: &[u8],
    a: &[Q8Row],
    il: usize,
    out: &mut [f32],
    n: usize,
    jj: usize,
) {
    let v = dot_rows::<R>(isa, ty, w, std::array::from_fn(|r| &a[il + r]));
    for (r, v) in v.into_iter().enumerate() {
        out[(il + r) * n + jj] = v;
    }
}
