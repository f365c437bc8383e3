//! Grouped matrix products on CUDA (kernels/grouped_matmul.cu; the semantics:
//! `backend/grouped_matmul.rs`): one launch over every group, the groups found by each block
//! from the offsets on the device, so the host never waits for them.
//!
//! f16 and bf16 run on tensor cores when each operand has a unit stride (any of the four
//! orientations, read in place by `ldmatrix`, transposed or not); every other case — f32,
//! f64, operands with no unit stride — runs the SIMT kernel, which reads any strides. The
//! offsets are checked on the device first (a deferred error, as an index out of bounds),
//! and a failed check leaves the output unwritten.

use super::buffer::CudaBuffer;
use super::deferred::Failure;
use super::device::CudaDevice;
use super::index::{describe, read_words};
use super::launch::{arg, dptr, element_ptr as plain, launch_cfg};
use super::source::{float_modules, float_preamble, tag};
use crate::backend::grouped_matmul::{bad_offset, GroupedMatmul};
use crate::backend::View;
use crate::{DType, Error, Result};
use std::sync::Arc;

const COMMON: &str = include_str!("kernels/common.cuh");
const TENSOR_CORE: &str = include_str!("kernels/tensor_core.cuh");
const SOURCE: &str = include_str!("kernels/grouped_matmul.cu");

/// Tile rows of the tensor-core kernel and of the SIMT kernel (`BM`, `SBM` in the source),
/// and their columns (`BN`, `SBN`).
const MMA_TILE: usize = 128;
const SIMT_TILE: usize = 64;

/// The kernels' argument block (`GArgs` in the source).
#[repr(C)]
#[derive(Default)]
struct Args {
    a: u64,
    b: u64,
    d: u64,
    offs: u64,
    gate: u64,
    sa0: i64,
    sa1: i64,
    sbg: i64,
    sb0: i64,
    sb1: i64,
    sdg: i64,
    sd0: i64,
    sd1: i64,
    os: i64,
    g: i32,
    m: i32,
    n: i32,
    k: i32,
    r: i32,
    rows_mode: i32,
    off64: i32,
}

/// The module of `t` (`grouped_matmul_<t>`): the tensor-core kernels too for f16/bf16.
pub(crate) fn module(t: DType) -> String {
    let mt = match t {
        DType::F16 | DType::BF16 => format!("#define MT \"{}\"\n{TENSOR_CORE}", tag(t)),
        _ => String::new(),
    };
    format!("{COMMON}{}{mt}{SOURCE}", float_preamble(t))
}

/// Every grouped-matmul module (for warmup).
pub(crate) fn all_modules() -> Vec<(String, String)> {
    float_modules("grouped_matmul", module)
}

fn to_i32(g: GroupedMatmul, what: &str, n: usize) -> Result<i32> {
    // tiles add up to 256 past a length: keep that within i32 too
    match i32::try_from(n) {
        Ok(v) if v < i32::MAX - 256 => Ok(v),
        _ => Err(Error::invalid(
            g.name(),
            format!("{what} {n} is past the CUDA kernels' limit of 2³¹ − 258"),
        )),
    }
}

/// See [`crate::backend::grouped_matmul::grouped_matmul`].
pub(crate) fn grouped_matmul(
    g: GroupedMatmul,
    a: View,
    b: View,
    offs: View,
    dst: View,
) -> Result<()> {
    let t = dst.dtype;
    let (sa, sb, sd) = (a.layout.shape(), b.layout.shape(), dst.layout.shape());
    let rows_mode = g == GroupedMatmul::Rows;
    // (G, M, N, K, R)
    let (groups, m, n, k, r) = if rows_mode {
        (sb[0], sa[0], sb[2], sa[1], sa[0])
    } else {
        (sd[0], sa[0], sb[1], sa[1], sa[1])
    };
    let (dev, _) = dptr(&dst)?;
    let (pa, st_a) = plain(&a)?;
    let (pb, st_b) = plain(&b)?;
    let (pd, st_d) = plain(&dst)?;
    let (po, st_o) = plain(&offs)?;
    let mut args = Args {
        a: pa,
        b: pb,
        d: pd,
        offs: po,
        sa0: st_a[0],
        sa1: st_a[1],
        os: st_o[0],
        g: to_i32(g, "the group count", groups)?,
        m: to_i32(g, "the row count", m)?,
        n: to_i32(g, "the column count", n)?,
        k: to_i32(g, "the contraction length", k)?,
        r: to_i32(g, "the grouped dim's length", r)?,
        rows_mode: rows_mode as i32,
        off64: (offs.dtype == DType::I64) as i32,
        ..Args::default()
    };
    if rows_mode {
        (args.sbg, args.sb0, args.sb1) = (st_b[0], st_b[1], st_b[2]);
        (args.sd0, args.sd1) = (st_d[0], st_d[1]);
    } else {
        (args.sb0, args.sb1) = (st_b[0], st_b[1]);
        (args.sdg, args.sd0, args.sd1) = (st_d[0], st_d[1], st_d[2]);
    }
    if dst.layout.numel() == 0 && groups == 0 {
        return Ok(());
    }
    // the tensor-core kernel wants a unit stride in each operand (size-1 dims count as one)
    let unit = |s: i64, len: usize| s == 1 || len <= 1;
    let a_k = unit(args.sa1, k);
    let a_m = unit(args.sa0, m);
    let b_k = unit(args.sb0, k);
    let b_n = unit(args.sb1, n);
    let half = matches!(t, DType::F16 | DType::BF16);
    let (kernel, tile) = match (half, a_k || a_m, b_k || b_n) {
        (true, true, true) => {
            let name = match (a_k, b_k) {
                (true, true) => "gmm_mma_kk",
                (true, false) => "gmm_mma_kn",
                (false, true) => "gmm_mma_mk",
                (false, false) => "gmm_mma_mn",
            };
            (name, MMA_TILE)
        }
        _ => ("gmm_simt", SIMT_TILE),
    };
    let n_tiles = n.div_ceil(tile);
    let grid = if rows_mode {
        (r.div_ceil(tile) + groups + 1, n_tiles, 1)
    } else {
        (m.div_ceil(tile), n_tiles, groups)
    };
    if grid.0 > i32::MAX as usize || grid.1 > 65_535 || grid.2 > 65_535 {
        return Err(Error::invalid(
            g.name(),
            format!(
                "the product's tiles ({} × {} × {}) are past the CUDA grid's limits (2³¹ − 1, \
                 65,535, 65,535): split the product",
                grid.0, grid.1, grid.2
            ),
        ));
    }
    let name = format!("grouped_matmul_{}", tag(t));
    let gate = check(
        &dev,
        g,
        &name,
        t,
        &args,
        r,
        &[("a", &a), ("b", &b), ("offsets", &offs)],
    )?;
    args.gate = gate.as_ref().map_or(0, |b| b.ptr);
    if dst.layout.numel() == 0 {
        return Ok(());
    }
    let f = dev.function(&name, kernel, || module(t))?;
    let grid = (grid.0 as u32, grid.1 as u32, grid.2 as u32);
    let mut params = [arg(&args)];
    unsafe { launch_cfg(&dev, &f, g.name(), grid, (256, 1, 1), 0, &mut params)? };
    drop(gate);
    Ok(())
}

/// Queues the offsets' check (one block) and registers its verdict as a deferred error;
/// returns the verdict's buffer (the gate of the product's kernel), none for no groups.
fn check(
    dev: &Arc<CudaDevice>,
    g: GroupedMatmul,
    module_name: &str,
    t: DType,
    args: &Args,
    ragged: usize,
    operands: &[(&str, &View)],
) -> Result<Option<CudaBuffer>> {
    if args.g == 0 {
        return Ok(None);
    }
    let f = dev.function(module_name, "gmm_check", || module(t))?;
    let res = CudaBuffer::new(dev, 16, true)?;
    let mut params = [arg(args), arg(&res.ptr)];
    unsafe { launch_cfg(dev, &f, g.name(), (1, 1, 1), (256, 1, 1), 0, &mut params)? };
    if super::deferred::sync_checks() {
        let w = read_words(dev, res.ptr, 2, "the grouped matmul's offsets check")?;
        return match w[0] {
            0 => Ok(None),
            _ => Err(bad_offset(g, w[1] as i64, ragged)),
        };
    }
    let failure = Failure {
        cause: Box::new(move |i| bad_offset(g, i, ragged)),
        operands: describe(operands),
    };
    dev.deferred.register(dev, g.name(), res.ptr, failure)?;
    Ok(Some(res))
}
