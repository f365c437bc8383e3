//! Fused attention on CUDA (kernels/attention.cu; the math and operand order:
//! `backend/attention.rs`): one launch forward; backward one launch for `D = rowsum(do∘o)`,
//! one for `dq`, one for `dk`/`dv` — no atomics, so a run gives the same bits every time.
//! The kernels read `q`, `k`, `v` and `do` with 16-byte copies: an operand whose rows are not
//! dense and 16-byte aligned is copied into a contiguous buffer first.

use super::buffer::{alloc_dense, dense_copy, CudaBuffer};
use super::launch::{arg, dptr, element_ptr as plain, launch_cfg};
use super::source::{float_preamble, tag};
use crate::backend::attention::{Attention, AttnMask, Dims};
use crate::backend::copy_cast;
use crate::backend::View;
use crate::{DType, Error, Layout, Result, Storage};

const COMMON: &str = include_str!("kernels/common.cuh");
const TENSOR_CORE: &str = include_str!("kernels/tensor_core.cuh");
const ATTENTION: &str = include_str!("kernels/attention.cu");

/// Rows (queries or keys) per block of the backward kernels, and threads per block (`BM`,
/// `NW` in attention.cu).
const ROWS: usize = 64;

/// Query rows per block of the forward kernel (`BMF` in attention.cu: two 16-row tiles a warp
/// up to head dim 64).
fn forward_rows(hd: usize) -> usize {
    if hd <= 64 {
        128
    } else {
        64
    }
}
const THREADS: u32 = 128;
/// Head dims the kernels are compiled for (the head dim rounded up to 16).
const HEAD_DIMS: [usize; 8] = [16, 32, 48, 64, 80, 96, 112, 128];

/// The kernels' argument block (`AttnArgs` in attention.cu): element pointers (offsets
/// applied), the (batch, head, row) strides of each operand, the mask's four strides.
#[repr(C)]
#[derive(Default)]
struct Args {
    q: u64,
    k: u64,
    v: u64,
    o: u64,
    lse: u64,
    mask: u64,
    d_o: u64,
    dq: u64,
    dk: u64,
    dv: u64,
    delta: u64,
    qs: [i64; 3],
    ks: [i64; 3],
    vs: [i64; 3],
    os: [i64; 3],
    ls: [i64; 3],
    gs: [i64; 3],
    dqs: [i64; 3],
    dks: [i64; 3],
    dvs: [i64; 3],
    ms: [i64; 4],
    causal_off: i64,
    part_o: u64,
    part_lse: u64,
    b: i32,
    hq: i32,
    hk: i32,
    l: i32,
    s: i32,
    e: i32,
    groups: i32,
    causal: i32,
    mask_kind: i32,
    splits: i32,
    chunk: i32,
    scale_log2: f32,
    scale: f32,
}

/// The attention module of `t` (f16 or bf16) for head dims up to `hd` (`attention_<t>_d<hd>`).
pub(crate) fn module(t: DType, hd: usize) -> String {
    format!(
        "{COMMON}{}#define MT \"{}\"\n#define HD {hd}\n{TENSOR_CORE}{ATTENTION}",
        float_preamble(t),
        tag(t)
    )
}

/// Every attention module (for warmup).
pub(crate) fn all_modules() -> Vec<(String, String)> {
    let mut all = vec![];
    for t in [DType::F16, DType::BF16] {
        for hd in HEAD_DIMS {
            all.push((format!("attention_{}_d{hd}", tag(t)), module(t, hd)));
        }
    }
    all
}

fn unsupported(what: String) -> Error {
    Error::invalid("attention", what)
}

/// A 4-d operand's element pointer and (batch, head, row) strides, and the buffer it was
/// copied into when the kernels cannot read it in place (kept alive for the launch).
struct Staged {
    ptr: u64,
    st: [i64; 3],
    _copy: Option<Storage>,
}

/// `v` as the kernels read it: in place if its rows are dense and each starts on a 16-byte
/// boundary, else a contiguous copy.
fn stage(v: &View) -> Result<Staged> {
    let (ptr, st) = plain(v)?;
    let size = v.dtype.size_in_bytes() as i64;
    let dense = st[3] == 1 || v.layout.shape()[3] <= 1;
    if dense && ptr.is_multiple_of(16) && st[..3].iter().all(|&s| (s * size).rem_euclid(16) == 0) {
        return Ok(Staged {
            ptr,
            st: three(&st),
            _copy: None,
        });
    }
    let (copy, layout) = dense_copy(v)?;
    let (ptr, st) = plain(&View {
        storage: &copy,
        layout: &layout,
        dtype: v.dtype,
    })?;
    Ok(Staged {
        ptr,
        st: three(&st),
        _copy: Some(copy),
    })
}

/// An output the kernels write two halves at a time: itself if its rows are dense and
/// 4-byte aligned, else a contiguous scratch buffer copied into it afterwards ([`finish`]).
struct Out<'a> {
    view: View<'a>,
    ptr: u64,
    st: [i64; 3],
    scratch: Option<(Storage, Layout)>,
}

fn output<'a>(v: View<'a>) -> Result<Out<'a>> {
    let (ptr, st) = plain(&v)?;
    if st[3] == 1 && ptr.is_multiple_of(4) && st[..3].iter().all(|&s| s % 2 == 0) {
        return Ok(Out {
            view: v,
            ptr,
            st: three(&st),
            scratch: None,
        });
    }
    let (s, layout) = alloc_dense(&v, false)?;
    let (ptr, st) = plain(&View {
        storage: &s,
        layout: &layout,
        dtype: v.dtype,
    })?;
    Ok(Out {
        view: v,
        ptr,
        st: three(&st),
        scratch: Some((s, layout)),
    })
}

impl Out<'_> {
    /// Copies a scratch buffer into the output view.
    fn finish(self) -> Result<()> {
        match &self.scratch {
            None => Ok(()),
            Some((s, layout)) => copy_cast(
                View {
                    storage: s,
                    layout,
                    dtype: self.view.dtype,
                },
                self.view,
            ),
        }
    }
}

/// The argument block's sizes, flags and head-dim module; errors for what the kernels do
/// not run (the frontend checks [`crate::attention_supported`] first).
fn common(a: &Attention, d: &Dims, t: DType, mask: Option<&View>) -> Result<(Args, usize)> {
    if !matches!(t, DType::F16 | DType::BF16) || d.e != d.ev || !d.e.is_multiple_of(8) {
        return Err(unsupported(format!(
            "no CUDA kernel for {t} with head dims {} and {} (f16/bf16, equal, a multiple of 8)",
            d.e, d.ev
        )));
    }
    let hd = d.e.next_multiple_of(16);
    if !HEAD_DIMS.contains(&hd) {
        return Err(unsupported(format!(
            "head dim {} is past the CUDA kernels' largest, {}",
            d.e,
            HEAD_DIMS[HEAD_DIMS.len() - 1]
        )));
    }
    let blocks = d.l.max(d.s).div_ceil(ROWS);
    let fits = |n: usize| i32::try_from(n).is_ok();
    if blocks > 65_535 || !fits(d.b * d.hq) || !fits(d.l) || !fits(d.s) {
        return Err(unsupported(format!(
            "sizes past the CUDA kernels' grid: batch·heads {} (at most 2³¹ − 1) and lengths \
             {} and {} (at most {})",
            d.b * d.hq,
            d.l,
            d.s,
            65_535 * ROWS
        )));
    }
    let mut args = Args {
        b: d.b as i32,
        hq: d.hq as i32,
        hk: d.hk as i32,
        l: d.l as i32,
        s: d.s as i32,
        e: d.e as i32,
        groups: a.groups as i32,
        causal: a.causal.is_some() as i32,
        causal_off: a.causal.unwrap_or(0),
        scale: a.scale as f32,
        scale_log2: (a.scale * std::f64::consts::LOG2_E) as f32,
        mask_kind: match a.mask {
            AttnMask::None => 0,
            AttnMask::Bool => 1,
            AttnMask::Additive => 2,
        },
        ..Args::default()
    };
    if let Some(m) = mask {
        let (p, st) = plain(m)?;
        args.mask = p;
        args.ms.copy_from_slice(&st);
    }
    Ok((args, hd))
}

fn three(st: &[i64]) -> [i64; 3] {
    [st[0], st[1], st[2]]
}

/// See [`crate::backend::attention::attention`].
pub(crate) fn attention(a: Attention, i: &[View], o: &[View]) -> Result<()> {
    let f = a.fwd(i, o);
    let d = Dims::of(&f.q, &f.k, &f.v);
    let t = f.q.dtype;
    let (mut args, hd) = common(&a, &d, t, f.mask.as_ref())?;
    if d.b * d.hq * d.l == 0 {
        return Ok(());
    }
    let (dev, _) = dptr(&f.q)?;
    let (q, k, v) = (stage(&f.q)?, stage(&f.k)?, stage(&f.v)?);
    let out = output(f.o)?;
    let (lse, ls) = plain(&f.lse)?;
    (args.q, args.qs) = (q.ptr, q.st);
    (args.k, args.ks) = (k.ptr, k.st);
    (args.v, args.vs) = (v.ptr, v.st);
    (args.o, args.os) = (out.ptr, out.st);
    (args.lse, args.ls) = (lse, three(&ls));
    let name = format!("attention_{}_d{hd}", tag(t));
    let func = dev.function(&name, "attn_fwd", || module(t, hd))?;
    let blocks = d.b * d.hq * d.l.div_ceil(forward_rows(hd));
    let (splits, chunk) = split_keys(blocks, d.s, dev.sm_count as usize);
    (args.splits, args.chunk) = (splits as i32, chunk as i32);
    // a split forward's partials: f32 outputs and log-sum-exps per split and query row
    let rows = d.b * d.hq * d.l;
    let parts = if splits > 1 {
        let po = CudaBuffer::new(&dev, splits * rows * d.e * 4, false)?;
        let pl = CudaBuffer::new(&dev, splits * rows * 4, false)?;
        (args.part_o, args.part_lse) = (po.ptr, pl.ptr);
        Some((po, pl))
    } else {
        None
    };
    let grid = (
        (d.b * d.hq) as u32,
        d.l.div_ceil(forward_rows(hd)) as u32,
        splits as u32,
    );
    let mut params = [arg(&args)];
    let block = (THREADS, 1, 1);
    unsafe { launch_cfg(&dev, &func, "attention", grid, block, 0, &mut params)? };
    if parts.is_some() {
        let f = dev.function(&name, "attn_combine", || module(t, hd))?;
        let grid = rows
            .div_ceil(THREADS as usize / 32)
            .min(dev.sm_count as usize * 16) as u32;
        unsafe { launch_cfg(&dev, &f, "attention", (grid, 1, 1), block, 0, &mut params)? };
    }
    drop(parts);
    out.finish()
}

/// Key splits of the forward (FlashDecoding): when the blocks over query rows leave SMs
/// idle — a decode step's few queries over a long cache — the keys are split into ranges of
/// whole 64-key tiles (at least two each), each block of a range writes a partial result, and
/// `k_attn_combine` merges them. `(splits, keys per split)`; one split covers every key.
fn split_keys(blocks: usize, s: usize, sm_count: usize) -> (usize, usize) {
    let tiles = s.div_ceil(64);
    let want = (2 * sm_count).div_ceil(blocks.max(1));
    let splits = want.min(tiles / 2).clamp(1, 64);
    let per = tiles.div_ceil(splits);
    (tiles.div_ceil(per.max(1)).max(1), per.max(1) * 64)
}

/// See [`crate::backend::attention::attention_backward`].
pub(crate) fn attention_backward(a: Attention, i: &[View], o: &[View]) -> Result<()> {
    let g = a.bwd(i, o);
    let d = Dims::of(&g.q, &g.k, &g.v);
    let t = g.q.dtype;
    let (mut args, hd) = common(&a, &d, t, g.mask.as_ref())?;
    if d.b * d.hk * d.s == 0 && d.b * d.hq * d.l == 0 {
        return Ok(());
    }
    let (dev, _) = dptr(&g.q)?;
    let (q, k, v, gr) = (stage(&g.q)?, stage(&g.k)?, stage(&g.v)?, stage(&g.d_o)?);
    let (dq, dk, dv) = (output(g.dq)?, output(g.dk)?, output(g.dv)?);
    let (o, os) = plain(&g.o)?;
    let (lse, ls) = plain(&g.lse)?;
    let rows = d.b * d.hq * d.l;
    let delta = CudaBuffer::new(&dev, rows.max(1) * 4, false)?;
    (args.q, args.qs) = (q.ptr, q.st);
    (args.k, args.ks) = (k.ptr, k.st);
    (args.v, args.vs) = (v.ptr, v.st);
    (args.d_o, args.gs) = (gr.ptr, gr.st);
    (args.o, args.os) = (o, three(&os));
    (args.lse, args.ls) = (lse, three(&ls));
    (args.dq, args.dqs) = (dq.ptr, dq.st);
    (args.dk, args.dks) = (dk.ptr, dk.st);
    (args.dv, args.dvs) = (dv.ptr, dv.st);
    args.delta = delta.ptr;
    let name = format!("attention_{}_d{hd}", tag(t));
    let mut params = [arg(&args)];
    let block = (THREADS, 1, 1);
    if rows > 0 {
        let f = dev.function(&name, "attn_bwd_delta", || module(t, hd))?;
        let warps = THREADS as usize / 32;
        let grid = rows.div_ceil(warps).min(dev.sm_count as usize * 16) as u32;
        unsafe {
            launch_cfg(
                &dev,
                &f,
                "attention_backward",
                (grid, 1, 1),
                block,
                0,
                &mut params,
            )?
        };
        let f = dev.function(&name, "attn_bwd_dq", || module(t, hd))?;
        let grid = ((d.b * d.hq) as u32, d.l.div_ceil(ROWS) as u32, 1);
        unsafe { launch_cfg(&dev, &f, "attention_backward", grid, block, 0, &mut params)? };
    }
    if d.b * d.hk * d.s > 0 {
        let f = dev.function(&name, "attn_bwd_dkdv", || module(t, hd))?;
        let grid = ((d.b * d.hk) as u32, d.s.div_ceil(ROWS) as u32, 1);
        unsafe { launch_cfg(&dev, &f, "attention_backward", grid, block, 0, &mut params)? };
    }
    drop(delta);
    dq.finish()?;
    dk.finish()?;
    dv.finish()
}
