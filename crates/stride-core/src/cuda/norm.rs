//! Row normalisation on CUDA (kernels/norm.cu; the math and operand order: `backend/norm.rs`):
//! one launch forward (with a residual, the `_res` kernels: the sum too, in the same launch);
//! backward one launch for `dx` (and each block's partial affine
//! gradients), then a column sum of the partials and its cast into the gradients' dtype.

use super::launch::{arg, dptr, launch_cfg};
use super::rows::{grid_for, operand, vectorised, NONE};
use super::source::{float_modules, float_preamble, tag};
use crate::backend::norm::{stat_dtype, Norm, NormKind};
use crate::backend::{ReduceOp, View};
use crate::{DType, Layout, Result, Storage};

const COMMON: &str = include_str!("kernels/common.cuh");
const ROWS: &str = include_str!("kernels/rows.cuh");
const NORM: &str = include_str!("kernels/norm.cu");

/// Elements of a row each thread holds in registers (`CK_FWD`, `CK_BWD` in norm.cu).
const CK_FWD: usize = 16;
const CK_BWD: usize = 8;
/// Threads a block may have (`__launch_bounds__` in norm.cu).
const MAX_BLOCK: usize = 1024;
/// The warp-per-row forward (`k_norm_warp`): 16-byte vectors a lane holds (`WARP_VECS`), and
/// threads a block (its `__launch_bounds__`).
const WARP_VECS: usize = 8;
const WARP_BLOCK: usize = 256;
/// Below this many rows per SM the forward gives each row a block instead of a warp.
const FEW_ROWS_PER_SM: usize = 4;
/// Threads one SM runs at once.
const THREADS_PER_SM: usize = 2048;

/// The normalisation module of float dtype `t` (`norm_<t>`).
pub(crate) fn norm_module(t: DType) -> String {
    format!("{COMMON}{}{ROWS}{NORM}", float_preamble(t))
}

/// Every normalisation module (for warmup).
pub(crate) fn all_modules() -> Vec<(String, String)> {
    float_modules("norm", norm_module)
}

/// Threads per block for rows of `n`: enough for `held` elements each, a whole number of
/// warps, at most [`MAX_BLOCK`].
fn block_for(n: usize, held: usize) -> usize {
    n.div_ceil(held).next_multiple_of(32).clamp(32, MAX_BLOCK)
}

/// See [`crate::backend::norm::norm`].
pub(crate) fn norm(n: Norm, i: &[View], o: &[View]) -> Result<()> {
    let v = n.fwd(i, o);
    let (rows, cols) = Norm::rows(&v.x);
    if rows == 0 {
        return Ok(());
    }
    let t = v.x.dtype;
    let (dev, _) = dptr(&v.x)?;
    let (r, c) = (rows as i64, cols as i64);
    let layer = (n.kind == NormKind::Layer) as i32;
    let x = operand(&v.x)?;
    let w = v.weight.as_ref().map_or(Ok(NONE), operand)?;
    let b = v.bias.as_ref().map_or(Ok(NONE), operand)?;
    let y = operand(&v.y)?;
    let s = operand(&v.rstd)?;
    let m = v.mean.as_ref().map_or(Ok(NONE), operand)?;
    let res = v.residual.as_ref().map_or(Ok(NONE), operand)?;
    let h = v.sum.as_ref().map_or(Ok(NONE), operand)?;
    let fused = n.residual;
    // the row normalised is h with a residual: the path (and so the order of the sums) is
    // the one a plain norm of h would take; the addends are read by vectors where they can be
    let (normed, iv) = match fused {
        true => {
            let iv = vectorised(cols, &[x], t) as i32 | (vectorised(cols, &[res], t) as i32) << 1;
            (h, iv)
        }
        false => (x, 0),
    };
    let mut args = [
        arg(&r),
        arg(&c),
        arg(&layer),
        arg(&n.eps),
        arg(&x.0),
        arg(&x.1),
        arg(&x.2),
        arg(&x.3),
        arg(&w.0),
        arg(&w.1),
        arg(&w.3),
        arg(&b.0),
        arg(&b.1),
        arg(&b.3),
        arg(&y.0),
        arg(&y.1),
        arg(&y.2),
        arg(&y.3),
        arg(&s.0),
        arg(&s.1),
        arg(&s.3),
        arg(&m.0),
        arg(&m.1),
        arg(&m.3),
        arg(&res.0),
        arg(&res.1),
        arg(&res.2),
        arg(&res.3),
        arg(&h.0),
        arg(&h.1),
        arg(&h.2),
        arg(&h.3),
        arg(&iv),
    ];
    let vector = vectorised(cols, &[normed, y, w, b], t);
    let per_warp = WARP_VECS * 32 * (16 / t.size_in_bytes());
    // a lone warp per row issues its row's instructions one after another (~17 µs for a bf16
    // row of 576 on an H100): with too few rows to give each SM several warps, a block per
    // row, a vector per thread
    let few = rows < FEW_ROWS_PER_SM * dev.sm_count as usize;
    let (kernel, block, grid) = match vector {
        true if few => {
            let block = block_for(cols, 16 / t.size_in_bytes());
            ("norm_vec", block, grid_for(dev.sm_count, rows, block))
        }
        // a warp per row: blocks of WARP_BLOCK / 32 rows, one row per warp up to a cap
        true if cols <= per_warp => {
            let rows_per_block = WARP_BLOCK / 32;
            let most = dev.sm_count as usize * (THREADS_PER_SM / WARP_BLOCK) * 8;
            let grid = rows.div_ceil(rows_per_block).min(most) as u32;
            ("norm_warp", WARP_BLOCK, grid)
        }
        _ => {
            let block = block_for(cols, CK_FWD);
            let grid = grid_for(dev.sm_count, rows, block);
            (if vector { "norm_vec" } else { "norm" }, block, grid)
        }
    };
    let kernel = match (fused, kernel) {
        (false, k) => k,
        (true, "norm_warp") => "norm_warp_res",
        (true, "norm_vec") => "norm_vec_res",
        (true, _) => "norm_res",
    };
    let f = dev.function(&format!("norm_{}", tag(t)), kernel, || norm_module(t))?;
    let op = n.name();
    unsafe {
        launch_cfg(
            &dev,
            &f,
            op,
            (grid, 1, 1),
            (block as u32, 1, 1),
            0,
            &mut args,
        )
    }
}

/// See [`crate::backend::norm::norm_backward`].
pub(crate) fn norm_backward(n: Norm, i: &[View], o: &[View]) -> Result<()> {
    let v = n.bwd(i, o);
    let (rows, cols) = Norm::rows(&v.x);
    let t = v.x.dtype;
    let ct = stat_dtype(t);
    let (dev, _) = dptr(&v.x)?;
    let affine = v.dweight.is_some() || v.dbias.is_some();
    if rows == 0 {
        // no rows: the affine gradients are sums of nothing
        for g in [v.dweight, v.dbias].into_iter().flatten() {
            super::elementwise::fill(g, crate::Scalar::Float(0.0))?;
        }
        return Ok(());
    }
    let block = block_for(cols, CK_BWD);
    let grid = grid_for(dev.sm_count, rows, block);
    let parts = grid as usize;
    let part_layout = Layout::contiguous(&[parts, 2, cols]);
    let part = if affine {
        Some(Storage::alloc(
            &[parts, 2, cols],
            ct,
            &v.x.storage.device(),
            false,
        )?)
    } else {
        None
    };
    let part_ptr = match &part {
        Some(p) => {
            let pv = View {
                storage: p,
                layout: &part_layout,
                dtype: ct,
            };
            dptr(&pv)?.1
        }
        None => 0,
    };
    let (r, c) = (rows as i64, cols as i64);
    let layer = (n.kind == NormKind::Layer) as i32;
    let g = operand(&v.dy)?;
    let x = operand(&v.x)?;
    let s = operand(&v.rstd)?;
    let m = v.mean.as_ref().map_or(Ok(NONE), operand)?;
    let w = v.weight.as_ref().map_or(Ok(NONE), operand)?;
    let dx = operand(&v.dx)?;
    let kernel = match vectorised(cols, &[g, x, dx, w], t) {
        true => "norm_bwd_vec",
        false => "norm_bwd",
    };
    let f = dev.function(&format!("norm_{}", tag(t)), kernel, || norm_module(t))?;
    let mut args = [
        arg(&r),
        arg(&c),
        arg(&layer),
        arg(&g.0),
        arg(&g.1),
        arg(&g.2),
        arg(&g.3),
        arg(&x.0),
        arg(&x.1),
        arg(&x.2),
        arg(&x.3),
        arg(&s.0),
        arg(&s.1),
        arg(&s.3),
        arg(&m.0),
        arg(&m.1),
        arg(&m.3),
        arg(&w.0),
        arg(&w.1),
        arg(&w.3),
        arg(&dx.0),
        arg(&dx.1),
        arg(&dx.2),
        arg(&dx.3),
        arg(&part_ptr),
    ];
    let op = match n.kind {
        NormKind::Rms => "rms_norm_backward",
        NormKind::Layer => "layer_norm_backward",
    };
    unsafe {
        launch_cfg(
            &dev,
            &f,
            op,
            (grid, 1, 1),
            (block as u32, 1, 1),
            0,
            &mut args,
        )?;
    }
    let Some(part) = part else {
        return Ok(());
    };
    // the blocks' partials folded in order (a column sum), then cast into the gradients
    // a reduction's output keeps the reduced dim (size 1)
    let sums = Storage::alloc(&[1, 2, cols], ct, &v.x.storage.device(), false)?;
    let sums_layout = Layout::contiguous(&[1, 2, cols]);
    super::reduce::reduce(
        ReduceOp::Sum,
        View {
            storage: &part,
            layout: &part_layout,
            dtype: ct,
        },
        &[0],
        View {
            storage: &sums,
            layout: &sums_layout,
            dtype: ct,
        },
    )?;
    for (k, grad) in [v.dweight, v.dbias].into_iter().enumerate() {
        if let Some(grad) = grad {
            let row = Layout::new(vec![cols], vec![1], k * cols);
            super::elementwise::copy_cast(
                View {
                    storage: &sums,
                    layout: &row,
                    dtype: ct,
                },
                grad,
            )?;
        }
    }
    Ok(())
}
