//! Attention over a key/value cache on CUDA (kernels/cached_attention.cu; the math and the
//! operand order: `backend/cached_attention.rs`): two launches — the cache write (which
//! also writes the length check's verdict), then the attention, whose query rows are split
//! over several blocks each when there are few of them (a decode step) — and no check
//! launch: the attention kernel records the verdict for the deferred check itself.

use super::buffer::CudaBuffer;
use super::launch::{arg, dptr, element_ptr, launch_cfg};
use super::source::{float_preamble, tag};
use crate::backend::cached_attention::{bad_len, CachedAttention, CachedDims};
use crate::backend::View;
use crate::{DType, Error, Result, RotaryStyle};

const COMMON: &str = include_str!("kernels/common.cuh");
const SOURCE: &str = include_str!("kernels/cached_attention.cu");
/// Threads per block of both kernels (`THREADS` in the .cu).
const THREADS: u32 = 256;
/// The widest head the attention kernels take (32 lanes of the widest kernel's 16 features).
pub(crate) const MAX_HEAD_DIM: usize = 512;
/// Blocks the attention launch aims for when it splits query rows' keys (~8 per SM of an
/// H100; a constant rather than the device's SM count, so that every GPU gives the same bits).
const TARGET_BLOCKS: usize = 1024;
/// The fewest keys a split takes (the kernel rounds spans to whole warps' keys).
const MIN_SPAN: usize = 32;
/// The most splits per row: the combine gives each split a thread (`THREADS`) and a weight in
/// shared memory (`CHUNK` in the .cu).
const MAX_SPLITS: usize = 256;

/// The kernels' argument block (`CaArgs` in the .cu): element pointers (offsets applied)
/// and strides of every operand.
#[repr(C)]
#[derive(Default)]
struct Args {
    q: u64,
    k: u64,
    v: u64,
    o: u64,
    kc: u64,
    vc: u64,
    len: u64,
    start: u64,
    cs: u64,
    sn: u64,
    gate: u64,
    rec: u64,
    id: u64,
    ws: u64,
    cnt: u64,
    qs: [i64; 4],
    ks: [i64; 4],
    vs: [i64; 4],
    os: [i64; 4],
    kcs: [i64; 4],
    vcs: [i64; 4],
    lens: i64,
    starts: i64,
    ts: [i64; 2],
    scale: f64,
    b: i32,
    hq: i32,
    hk: i32,
    l: i32,
    e: i32,
    ev: i32,
    cap: i32,
    half: i32,
    groups: i32,
    has_start: i32,
    style: i32,
    splits: i32,
}

fn module(t: DType) -> String {
    format!("{COMMON}{}{}", float_preamble(t), source())
}

/// The kernels' source. `STRIDE_CACHED_ATTN_MUTANT` (read once; for testing the tests, never
/// set otherwise) swaps in a broken variant, so that `tests/cached_attention.rs` can be seen to
/// fail on the GPU: `own_key` (queries miss their own new key) or `drop_split` (the combine of
/// a split row leaves out its first split's values).
fn source() -> String {
    static MUTANT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let mutant =
        MUTANT.get_or_init(|| std::env::var("STRIDE_CACHED_ATTN_MUTANT").unwrap_or_default());
    match mutant.as_str() {
        "own_key" => SOURCE.replace("end = n + t + 1;", "end = n + t;"),
        "drop_split" => SOURCE.replace(
            "for (int j = 0; j < ns; ++j) s = s + ps[j]",
            "for (int j = 1; j < ns; ++j) s = s + ps[j]",
        ),
        _ => SOURCE.to_string(),
    }
}

/// How many blocks share each query row's keys: enough rows fill the GPU alone; a few rows
/// (a decode step) split their keys so that about [`TARGET_BLOCKS`] blocks run, no split
/// shorter than [`MIN_SPAN`] keys of a full cache. Shapes only, so a graph of the step serves
/// every length and every GPU gives the same bits.
fn split_count(rows: usize, cap: usize) -> usize {
    if rows >= TARGET_BLOCKS {
        return 1;
    }
    (TARGET_BLOCKS / rows.max(1))
        .min(cap.div_ceil(MIN_SPAN))
        .clamp(1, MAX_SPLITS)
}

/// Every module of the family (for warmup).
pub(crate) fn all_modules() -> Vec<(String, String)> {
    [DType::F64, DType::F32, DType::F16, DType::BF16]
        .iter()
        .map(|&t| (format!("cached_attention_{}", tag(t)), module(t)))
        .collect()
}

fn four(v: &View) -> Result<(u64, [i64; 4])> {
    let (p, st) = element_ptr(v)?;
    let mut s = [0i64; 4];
    s[..st.len()].copy_from_slice(&st);
    Ok((p, s))
}

fn too_large(what: &str) -> Error {
    Error::invalid(
        "attention_with_kv_cache",
        format!("{what} is too large for the CUDA kernels' 32-bit sizes; split the batch"),
    )
}

fn i32_of(n: usize, what: &str) -> Result<i32> {
    i32::try_from(n).map_err(|_| too_large(what))
}

/// See [`crate::backend::cached_attention::cached_attention`].
pub(crate) fn cached_attention(a: CachedAttention, i: &[View], o: &[View]) -> Result<()> {
    let ops = a.operands(i, o);
    let d: CachedDims = ops.dims();
    if d.e > MAX_HEAD_DIM || d.ev > MAX_HEAD_DIM {
        return Err(Error::invalid(
            "attention_with_kv_cache",
            format!(
                "head dims {} (keys) and {} (values): the CUDA kernel takes at most {MAX_HEAD_DIM}",
                d.e, d.ev
            ),
        ));
    }
    if d.b == 0 || d.l == 0 || d.hq == 0 || d.hk == 0 {
        return Ok(());
    }
    let t = ops.q.dtype;
    let (dev, _) = dptr(&ops.q)?;
    let mut args = Args {
        scale: a.scale,
        b: i32_of(d.b, "the batch")?,
        hq: i32_of(d.hq, "the query heads")?,
        hk: i32_of(d.hk, "the key/value heads")?,
        l: i32_of(d.l, "the new positions")?,
        e: d.e as i32,
        ev: d.ev as i32,
        cap: i32_of(d.cap, "the cache's capacity")?,
        half: d.half as i32,
        groups: i32_of(a.groups, "the head groups")?,
        has_start: a.start as i32,
        style: match a.rotary {
            None => -1,
            Some(RotaryStyle::HalfSplit) => 0,
            Some(RotaryStyle::Interleaved) => 1,
        },
        ..Args::default()
    };
    (args.q, args.qs) = four(&ops.q)?;
    (args.k, args.ks) = four(&ops.k)?;
    (args.v, args.vs) = four(&ops.v)?;
    (args.o, args.os) = four(&ops.o)?;
    (args.kc, args.kcs) = four(&ops.k_cache)?;
    (args.vc, args.vcs) = four(&ops.v_cache)?;
    let (len, ls) = element_ptr(&ops.len)?;
    (args.len, args.lens) = (len, ls[0]);
    if let Some(s) = &ops.start {
        let (p, ss) = element_ptr(s)?;
        (args.start, args.starts) = (p, ss[0]);
    }
    if let Some((c, s)) = &ops.tables {
        let (cp, cst) = element_ptr(c)?;
        let (sp, sst) = element_ptr(s)?;
        if cst != sst {
            return Err(Error::invalid(
                "attention_with_kv_cache",
                "internal error: the cos and sin tables have different strides (please report)",
            ));
        }
        (args.cs, args.sn, args.ts) = (cp, sp, [cst[0], cst[1]]);
    }
    let rows_w = d.b * d.hk * d.l;
    let rows_a = d.b * d.hq * d.l;
    let (rows_w, rows_a) = (
        u32::try_from(rows_w).map_err(|_| too_large("the batch"))?,
        u32::try_from(rows_a).map_err(|_| too_large("the batch"))?,
    );
    let gate = CudaBuffer::new(&dev, 16, false)?;
    args.gate = gate.ptr;
    let splits = split_count(rows_a as usize, d.cap);
    args.splits = splits as i32;
    // the split rows' arrival counters (zeroed by the write kernel), then their partials
    let _work = match splits {
        1 => None,
        _ => {
            let unit = if t == DType::F64 { 8 } else { 4 };
            let counters = (rows_a as usize * 4).next_multiple_of(8);
            let bytes = (rows_a as usize)
                .checked_mul(splits * (2 + d.ev) * unit)
                .and_then(|w| w.checked_add(counters))
                .ok_or_else(|| too_large("the batch"))?;
            let w = CudaBuffer::new(&dev, bytes, false)?;
            (args.cnt, args.ws) = (w.ptr, w.ptr + counters as u64);
            Some(w)
        }
    };
    let name = format!("cached_attention_{}", tag(t));
    let write = dev.function(&name, "cache_write", || module(t))?;
    // features a lane holds: the smallest kernel that takes the head (`PER` in the .cu)
    let kernel = match d.e.max(d.ev).div_ceil(32) {
        0 | 1 => "cached_attn_1",
        2 => "cached_attn_2",
        3 | 4 => "cached_attn_4",
        5..=8 => "cached_attn_8",
        _ => "cached_attn_16",
    };
    let attend = dev.function(&name, kernel, || module(t))?;
    let block = (THREADS, 1, 1);
    {
        let mut params = [arg(&args)];
        unsafe {
            launch_cfg(
                &dev,
                &write,
                "attention_with_kv_cache",
                (rows_w, 1, 1),
                block,
                0,
                &mut params,
            )?
        };
    }
    let (l, cap) = (d.l, d.cap);
    if super::deferred::sync_checks() {
        let w = super::index::read_words(&dev, gate.ptr, 2, "cache length check")?;
        if w[0] != 0 {
            return Err(bad_len(w[1] as i64, l, cap));
        }
    } else {
        let failure = super::deferred::Failure {
            cause: Box::new(move |n| bad_len(n, l, cap)),
            operands: super::index::describe(&[
                ("query", &ops.q),
                ("cache length", &ops.len),
                ("key cache", &ops.k_cache),
            ]),
        };
        (args.rec, args.id) = dev.deferred.register_inline(&dev, failure);
    }
    let mut params = [arg(&args)];
    unsafe {
        launch_cfg(
            &dev,
            &attend,
            "attention_with_kv_cache",
            (rows_a, splits as u32, 1),
            block,
            0,
            &mut params,
        )
    }
}
