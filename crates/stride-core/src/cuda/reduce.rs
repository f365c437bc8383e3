//! Reductions, arg reductions and scans on CUDA (kernels/reduce.cu): the same folds, identities,
//! accumulation types and result dtypes as the CPU backend (`cpu/reduce.rs`,
//! `cpu/cumulative.rs`); only the grouping of float sums differs (within rounding).
//!
//! Schedules (kernels/reduce.cu): one thread per output for short or outer-dim reductions,
//! one block per output, or, for few outputs over long ranges (a full `sum`/`mean`), the
//! split schedule: many blocks per output write partial accumulators that the last of them
//! folds in a fixed order (deterministic; see [`SPLIT_MIN`]); and for reductions over outer
//! dims with few outputs (a bias gradient), the column split ([`COLS_MIN`]).

use super::buffer::CudaBuffer;
use super::device::{CudaDevice, TICKETS};
use super::launch::{arg, dptr, geo_from, launch_cfg, str_from, too_many, Geo, Str, BLOCK, MAXD};
use super::source::{ctype, tag};
use crate::backend::common::plan::Plan;
use crate::backend::{ArgReduceOp, CumulativeOp, ReduceOp, View};
use crate::{Category, DType, Error, Result};
use std::sync::Arc;

const COMMON: &str = include_str!("kernels/common.cuh");
const REDUCE: &str = include_str!("kernels/reduce.cu");

/// Threads per block of the block-per-output schedule (`RBLOCK` in reduce.cu).
const RBLOCK: u32 = 256;

/// The split schedule (kernels/reduce.cu, `k_reduce_split`) for few outputs
/// over long reduced ranges. A full reduction of 25 MB f32 under the block-per-output
/// schedule is ONE block: one SM's worth of loads in flight, ~13 GB/s. Reading 25 MB at an
/// H100's ~3 TB/s takes ~8.4 µs, and that needs every SM streaming: so each output's range
/// is cut into parts of at least [`SPLIT_MIN`] elements, enough parts that the grid has
/// [`SPLIT_BLOCKS_PER_SM`] blocks per SM (all resident at once with `__launch_bounds__(256,
/// 4)`: one wave). The block that finishes an output's parts last (a per-device ticket counter)
/// reads its n_out × parts accumulators (a few KB) and folds them in a fixed order:
/// deterministic, and one launch (see docs/PERFORMANCE.md for the measurements).
const SPLIT_BLOCKS_PER_SM: u64 = 4;
/// The fewest elements of one part (8 strided loads per thread of a 256-thread block, twice),
/// so that a part amortises its block's tree merge and write.
const SPLIT_MIN: u64 = 4096;
/// Bytes of one part's accumulator, the largest ACC (an arg reduction's `KeyIdx`: key + i64).
const PART_BYTES: usize = 16;
/// The column split (kernels/reduce.cu, `k_reduce_cols`) for reductions over outer dims whose
/// input's kept innermost dim is contiguous (a bias gradient, `[B, n] -> [n]`): the per-thread
/// schedule reads 32 neighbouring outputs per warp (coalesced), but with few outputs it has
/// few blocks, or a last partial wave; so the reduced range is cut into parts of at least
/// `COLS_MIN` elements (16 per thread of a 32 x 8 block: two rounds of 8 loads in flight), for
/// [`COLS_WAVES`] waves of [`SPLIT_BLOCKS_PER_SM`] blocks per SM.
const COLS_MIN: u64 = 128;
/// Waves of the column split's grid: a last partial wave idles less of the GPU among four.
const COLS_WAVES: u64 = 4;

/// Kept dims (merged, ordered by the input's strides) for the input and `N` outputs, and
/// reduced dims in logical order (adjacent ones merged where contiguous), so that `r` in a
/// kernel is the row-major index over the reduced dims that arg reductions report.
struct Split<const N: usize> {
    gk: Geo,
    ik: Str,
    ok: [Str; N],
    n_out: i64,
    gr: Geo,
    ir: Str,
    n_red: i64,
    /// The innermost kept dim has input stride 1 (a reduction over outer dims).
    kept_inner_unit: bool,
}

fn split<const N: usize>(
    op: &'static str,
    src: &View,
    dims: &[usize],
    outs: [&View; N],
) -> Result<Split<N>> {
    let (shape, st) = (src.layout.shape(), src.layout.strides());
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let ksizes: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let pick = |l: &crate::Layout| -> Vec<usize> { kept.iter().map(|&d| l.strides()[d]).collect() };
    let s_in = pick(src.layout);
    let s_out: Vec<Vec<usize>> = outs.iter().map(|v| pick(v.layout)).collect();
    // operand 0 is the input, so the plan orders kept dims by the input's strides; operands
    // 1 and 2 are the outputs (the last repeated when there is one)
    let plan = Plan::<3>::new(
        &ksizes,
        [&s_in, &s_out[0], &s_out[N - 1]],
        [
            src.layout.offset(),
            outs[0].layout.offset(),
            outs[N - 1].layout.offset(),
        ],
    );
    let (ps, pst, poff) = plan.parts();
    if ps.len() > MAXD {
        return Err(too_many(op, ps.len()));
    }
    let mut rs: Vec<(usize, isize)> = vec![];
    for &d in dims {
        if shape[d] == 1 {
            continue;
        }
        if let Some(last) = rs.last_mut() {
            if last.1 == st[d] as isize * shape[d] as isize {
                last.0 *= shape[d];
                last.1 = st[d] as isize;
                continue;
            }
        }
        rs.push((shape[d], st[d] as isize));
    }
    if rs.len() > MAXD {
        return Err(too_many(op, rs.len()));
    }
    let rsizes: Vec<usize> = rs.iter().map(|r| r.0).collect();
    let rstrides: Vec<isize> = rs.iter().map(|r| r.1).collect();
    Ok(Split {
        gk: geo_from(ps),
        ik: str_from(poff[0], &pst[0]),
        ok: std::array::from_fn(|k| str_from(poff[1 + k.min(1)], &pst[1 + k.min(1)])),
        n_out: plan.numel() as i64,
        gr: geo_from(&rsizes),
        ir: str_from(0, &rstrides),
        n_red: dims.iter().map(|&d| shape[d]).product::<usize>() as i64,
        kept_inner_unit: pst[0].last() == Some(&1) && ps.last().is_some_and(|&n| n > 1),
    })
}

impl<const N: usize> Split<N> {
    /// One thread per output (1) or one block per output (0); see reduce.cu.
    fn per_thread(&self) -> i32 {
        (self.n_red <= 32 || (self.kept_inner_unit && self.n_out >= 4096)) as i32
    }
    /// The split schedule's (parts per output, elements per part), when the block-per-output
    /// schedule would leave SMs idle (fewer than [`SPLIT_BLOCKS_PER_SM`] blocks per SM) and
    /// the reduced range is long enough for two parts.
    fn split_parts(&self, dev: &CudaDevice) -> Option<(i64, i64)> {
        if self.per_thread() == 1 {
            return None;
        }
        split_plan(self.n_out, self.n_red, dev.sm_count as u64)
    }
    /// The column split's (parts, elements per part), for a reduction over outer dims whose
    /// 32-output groups are fewer than [`COLS_WAVES`] full waves; see [`COLS_MIN`].
    fn cols_parts(&self, dev: &CudaDevice) -> Option<(i64, i64)> {
        if !self.kept_inner_unit || self.n_red <= 32 {
            return None;
        }
        cols_plan(self.n_out, self.n_red, dev.sm_count as u64)
    }
    /// The first `args` of a split kernel (geometry, chunk, parts, input), then a fresh
    /// buffer of `n_part` partial accumulators and the device's tickets (see reduce.cu), then
    /// `outs`: launched on `grid` x `block`.
    #[allow(clippy::too_many_arguments)]
    fn launch_split(
        &self,
        dev: &Arc<CudaDevice>,
        f: &cudarc::driver::CudaFunction,
        op: &'static str,
        mut args: Vec<*mut std::ffi::c_void>,
        n_part: i64,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        outs: &[*mut std::ffi::c_void],
    ) -> Result<()> {
        // one part per output (n_part 0): no partials, no tickets
        let part = match n_part {
            0 => None,
            _ => Some(CudaBuffer::new(dev, n_part as usize * PART_BYTES, false)?),
        };
        let (pp, tickets) = match &part {
            Some(b) => (b.ptr, dev.tickets()?),
            None => (0u64, 0u64),
        };
        args.push(arg(&pp));
        args.push(arg(&tickets));
        args.extend_from_slice(outs);
        unsafe { launch_cfg(dev, f, op, grid, block, 0, &mut args) }
    }
    fn grid(&self, dev: &CudaDevice) -> (u32, u32, u32) {
        let cap = dev.sm_count as u64 * 32;
        let n = if self.per_thread() == 1 {
            (self.n_out as u64).div_ceil(32)
        } else {
            self.n_out as u64
        };
        (n.clamp(1, cap) as u32, 1, 1)
    }
}

/// [`Split::split_parts`] for `n_out` outputs of `n_red` elements on `sms` SMs: parts of at
/// least [`SPLIT_MIN`] elements, multiples of `RBLOCK`, every part non-empty, enough of them
/// for [`SPLIT_BLOCKS_PER_SM`] blocks per SM; None when fewer than two parts.
fn split_plan(n_out: i64, n_red: i64, sms: u64) -> Option<(i64, i64)> {
    if n_out <= 0 || n_red <= 0 {
        return None;
    }
    let (n_out, n_red) = (n_out as u64, n_red as u64);
    let parts = (sms * SPLIT_BLOCKS_PER_SM)
        .div_ceil(n_out)
        .min(n_red / SPLIT_MIN);
    // one ticket per output
    if parts < 2 || n_out > TICKETS as u64 {
        return None;
    }
    // parts start on multiples of RBLOCK elements (a warp's loads stay aligned)
    let chunk = n_red.div_ceil(parts).next_multiple_of(RBLOCK as u64);
    Some((n_red.div_ceil(chunk) as i64, chunk as i64))
}

/// [`Split::cols_parts`] for `n_out` outputs of `n_red` elements on `sms` SMs: parts of at
/// least [`COLS_MIN`] elements, every part non-empty, enough of them for [`COLS_WAVES`] waves
/// of [`SPLIT_BLOCKS_PER_SM`] blocks per SM; None when fewer than two parts.
fn cols_plan(n_out: i64, n_red: i64, sms: u64) -> Option<(i64, i64)> {
    if n_out <= 0 || n_red <= 0 {
        return None;
    }
    let groups = (n_out as u64).div_ceil(32);
    let n_red = n_red as u64;
    let parts = (sms * SPLIT_BLOCKS_PER_SM * COLS_WAVES)
        .div_ceil(groups)
        .min(n_red / COLS_MIN)
        .min(65_535); // grid.y
                      // one ticket per group
    if parts < 2 || groups > TICKETS as u64 {
        return None;
    }
    let chunk = n_red.div_ceil(parts);
    Some((n_red.div_ceil(chunk) as i64, chunk as i64))
}

fn empty_error(op: &'static str, shape: &[usize], dims: &[usize]) -> Error {
    Error::invalid(
        op,
        format!(
            "cannot reduce over zero elements (input shape {shape:?}, reduced dims {dims:?}): the op has no identity; check numel() first"
        ),
    )
}

/// The type sums and products accumulate in: f64 for f64/f32, f32 for f16/bf16, i64 else.
fn acc_type(t: DType) -> &'static str {
    match t {
        DType::F64 | DType::F32 => "double",
        DType::F16 | DType::BF16 => "float",
        _ => "i64",
    }
}

/// The key max/min compare: the compute type for floats, the element for integers, int for
/// bool.
fn key_type(t: DType) -> &'static str {
    match t.category() {
        Category::Float => {
            if t == DType::F64 {
                "double"
            } else {
                "float"
            }
        }
        Category::Integer => ctype(t),
        Category::Bool => "int",
    }
}

fn key_of(t: DType, x: &str) -> String {
    match t.category() {
        Category::Float => format!("E<T>::ld({x})"),
        Category::Integer => x.to_string(),
        Category::Bool => format!("(int)({x})"),
    }
}

/// (lowest, highest) keys: the identities of max and min.
fn key_bounds(t: DType) -> (&'static str, &'static str) {
    match t {
        DType::F64 | DType::F32 | DType::F16 | DType::BF16 => ("-(1.0/0.0)", "(1.0/0.0)"),
        DType::I64 => ("(-9223372036854775807LL - 1)", "9223372036854775807LL"),
        DType::I32 => ("(-2147483647 - 1)", "2147483647"),
        DType::U32 => ("0u", "4294967295u"),
        DType::U8 => ("0", "255"),
        DType::I8 => ("-128", "127"),
        DType::Bool => ("0", "1"),
    }
}

/// `x != 0` as the CPU's `is_nonzero` (NaN counts as non-zero).
fn nonzero(t: DType) -> &'static str {
    match t.category() {
        Category::Float => "(E<T>::ld(x) != 0)",
        Category::Integer => "(x != 0)",
        Category::Bool => "x",
    }
}

fn source(t: DType, want: &str, defs: &[String]) -> String {
    let mut s = String::with_capacity(COMMON.len() + REDUCE.len() + 1024);
    s.push_str(COMMON);
    s.push_str(&format!("\ntypedef {} T;\n", ctype(t)));
    for d in defs {
        s.push_str(d);
        s.push('\n');
    }
    s.push_str(&format!("#define {want} 1\n"));
    s.push_str(REDUCE);
    s
}

/// The fold of `op` on input dtype `t`: ACC, OUT, INIT, STEP, MERGE, FIN; None when `t` has
/// no such reduction (the frontend rejects it first).
fn fold(op: ReduceOp, t: DType) -> Option<Vec<String>> {
    let float = t.is_float();
    let w = acc_type(t);
    let out = ctype(op.result_dtype(t).ok()?);
    let widen = if float {
        format!("({w})E<T>::ld(x)")
    } else if t == DType::Bool {
        "(i64)(x ? 1 : 0)".into()
    } else {
        "(i64)x".into()
    };
    let narrow = |e: &str| {
        if float {
            format!("E<T>::st((E<T>::C)({e}))")
        } else {
            e.to_string()
        }
    };
    let (lo, hi) = key_bounds(t);
    let kt = key_type(t);
    let extremum = |cmp: &str, init: &str| {
        let k = key_of(t, "x");
        let fin = match t.category() {
            Category::Float => "E<T>::st(a)".to_string(),
            Category::Integer => "a".to_string(),
            Category::Bool => "(a != 0)".to_string(),
        };
        vec![
            format!("typedef {kt} ACC;"),
            format!("typedef {out} OUT;"),
            format!("#define INIT (({kt})({init}))"),
            format!("__device__ __forceinline__ ACC pick(ACC a, ACC b) {{ return (a != a) ? a : ((b != b || b {cmp} a) ? b : a); }}"),
            format!("#define STEP(a, x, r) pick(a, {k})"),
            "#define MERGE(a, b) pick(a, b)".into(),
            format!("#define FIN(a) {fin}"),
        ]
    };
    let logical = |init: &str, step: &str, acc: &str, out: &str| {
        vec![
            format!("typedef {acc} ACC;"),
            format!("typedef {out} OUT;"),
            format!("#define INIT ({init})"),
            format!("#define STEP(a, x, r) ({step})"),
            if acc == "bool" {
                if init == "true" {
                    "#define MERGE(a, b) ((a) && (b))".into()
                } else {
                    "#define MERGE(a, b) ((a) || (b))".into()
                }
            } else {
                "#define MERGE(a, b) ((a) + (b))".into()
            },
            "#define FIN(a) (a)".into(),
        ]
    };
    let nz = nonzero(t);
    Some(match op {
        ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Prod => {
            if op == ReduceOp::Mean && !float {
                return None;
            }
            let (init, step, merge) = match (op, float) {
                (ReduceOp::Prod, true) => ("1", format!("a * {widen}"), "(a) * (b)".to_string()),
                (ReduceOp::Prod, false) => (
                    "1",
                    format!("w_mul<i64>(a, {widen})"),
                    "w_mul<i64>(a, b)".into(),
                ),
                (_, true) => ("0", format!("a + {widen}"), "(a) + (b)".into()),
                (_, false) => (
                    "0",
                    format!("w_add<i64>(a, {widen})"),
                    "w_add<i64>(a, b)".into(),
                ),
            };
            let fin = if op == ReduceOp::Mean {
                narrow(&format!("a / ({w})n_red"))
            } else {
                narrow("a")
            };
            vec![
                format!("typedef {w} ACC;"),
                format!("typedef {out} OUT;"),
                format!("#define INIT (({w}){init})"),
                format!("#define STEP(a, x, r) ({step})"),
                format!("#define MERGE(a, b) ({merge})"),
                format!("#define FIN(a) ({fin})"),
            ]
        }
        ReduceOp::Max => extremum(">", lo),
        ReduceOp::Min => extremum("<", hi),
        ReduceOp::All => logical("true", &format!("(a) && {nz}"), "bool", "bool"),
        ReduceOp::Any => logical("false", &format!("(a) || {nz}"), "bool", "bool"),
        ReduceOp::CountNonzero => logical("0", &format!("(a) + ({nz} ? 1 : 0)"), "i64", "i64"),
    })
}

fn device_of(v: &View) -> Result<(Arc<CudaDevice>, u64)> {
    dptr(v)
}

pub(crate) fn reduce(op: ReduceOp, src: View, dims: &[usize], dst: View) -> Result<()> {
    let (dev, pd) = device_of(&dst)?;
    let (_, ps) = device_of(&src)?;
    let sp = split(op.name(), &src, dims, [&dst])?;
    if sp.n_out == 0 {
        return Ok(());
    }
    if sp.n_red == 0 && op.needs_nonempty() {
        return Err(empty_error(op.name(), src.layout.shape(), dims));
    }
    let t = src.dtype;
    let Some(defs) = fold(op, t) else {
        return Err(Error::UnsupportedDType {
            op: op.name(),
            dtype: t,
            hint: " on CUDA".into(),
        });
    };
    let module = format!("reduce_{}_{}", op.name(), tag(t));
    let [ok] = sp.ok;
    // the per-thread schedule (one part), its column split (few outputs over outer dims), or
    // the split schedule; else one block per output
    let per_thread = (sp.per_thread() == 1).then_some((1, sp.n_red));
    let split = match sp.cols_parts(&dev).or(per_thread) {
        Some(p) => Some((true, p)),
        None => sp.split_parts(&dev).map(|p| (false, p)),
    };
    if let Some((cols, (parts, chunk))) = split {
        let kernel = if cols { "reduce_cols" } else { "reduce_split" };
        let f = dev.function(&module, kernel, || source(t, "WANT_REDUCE", &defs))?;
        let args = vec![
            arg(&sp.gk),
            arg(&sp.ik),
            arg(&ok),
            arg(&sp.n_out),
            arg(&sp.gr),
            arg(&sp.ir),
            arg(&sp.n_red),
            arg(&chunk),
            arg(&parts),
            arg(&ps),
        ];
        let n_part = if parts == 1 { 0 } else { sp.n_out * parts };
        let (grid, block) = if cols {
            // one part: a grid-stride loop over the groups, as many blocks as fill the GPU
            let groups = (sp.n_out as u64).div_ceil(32);
            let groups = if parts == 1 {
                groups.min(dev.sm_count as u64 * 32)
            } else {
                groups
            };
            ((groups as u32, parts as u32, 1), (32, 8, 1))
        } else {
            ((n_part.min(u32::MAX as i64) as u32, 1, 1), (RBLOCK, 1, 1))
        };
        let outs = [arg(&pd)];
        return sp.launch_split(&dev, &f, op.name(), args, n_part, grid, block, &outs);
    }
    let f = dev.function(&module, "reduce", || source(t, "WANT_REDUCE", &defs))?;
    let mut args = [
        arg(&sp.gk),
        arg(&sp.ik),
        arg(&ok),
        arg(&sp.n_out),
        arg(&sp.gr),
        arg(&sp.ir),
        arg(&sp.n_red),
        arg(&ps),
        arg(&pd),
    ];
    let block = (RBLOCK, 1, 1);
    unsafe { launch_cfg(&dev, &f, op.name(), sp.grid(&dev), block, 0, &mut args) }
}

/// The arg fold of `op` on `t` (K, KeyIdx, pick, INIT, STEP, MERGE).
fn arg_defs(op: ArgReduceOp, t: DType) -> Vec<String> {
    let kt = key_type(t);
    let (cmp, init) = match op {
        ArgReduceOp::Max => (">", key_bounds(t).0),
        ArgReduceOp::Min => ("<", key_bounds(t).1),
    };
    let k = key_of(t, "x");
    vec![
        format!("typedef {kt} K;"),
        "struct KeyIdx { K k; i64 i; };".into(),
        // i = -1: nothing folded yet. Ties and NaNs go to the smaller index, so the result
        // does not depend on the order of merges: the first occurrence, as on the CPU.
        format!(
            "__device__ __forceinline__ KeyIdx pick(KeyIdx a, KeyIdx b) {{
                if (a.i < 0) return b; if (b.i < 0) return a;
                bool an = a.k != a.k, bn = b.k != b.k;
                if (an || bn) {{ if (an && bn) return a.i < b.i ? a : b; return an ? a : b; }}
                if (a.k {cmp} b.k) return a; if (b.k {cmp} a.k) return b;
                return a.i < b.i ? a : b; }}"
        ),
        format!("#define INIT (KeyIdx{{ ({kt})({init}), -1 }})"),
        format!("#define STEP(a, x, r) pick(a, KeyIdx{{ {k}, r }})"),
        "#define MERGE(a, b) pick(a, b)".into(),
    ]
}

pub(crate) fn arg_reduce(
    op: ArgReduceOp,
    src: View,
    dims: &[usize],
    values: Option<View>,
    indices: View,
) -> Result<()> {
    let (dev, pi) = device_of(&indices)?;
    let (_, ps) = device_of(&src)?;
    let pv: u64 = match &values {
        Some(v) => device_of(v)?.1,
        None => 0,
    };
    let vview = values.unwrap_or(indices);
    let sp = split(op.name(), &src, dims, [&vview, &indices])?;
    if sp.n_out == 0 {
        return Ok(());
    }
    if sp.n_red == 0 {
        return Err(empty_error(op.name(), src.layout.shape(), dims));
    }
    let t = src.dtype;
    let defs = arg_defs(op, t);
    let module = format!("arg_{}_{}", op.name(), tag(t));
    let [ov, oi] = sp.ok;
    if let Some((parts, chunk)) = sp.split_parts(&dev) {
        let f = dev.function(&module, "arg_split", || source(t, "WANT_ARG", &defs))?;
        let args = vec![
            arg(&sp.gk),
            arg(&sp.ik),
            arg(&ov),
            arg(&oi),
            arg(&sp.n_out),
            arg(&sp.gr),
            arg(&sp.ir),
            arg(&sp.n_red),
            arg(&chunk),
            arg(&parts),
            arg(&ps),
        ];
        let n_part = sp.n_out * parts;
        let grid = (n_part.min(u32::MAX as i64) as u32, 1, 1);
        let outs = [arg(&pv), arg(&pi)];
        return sp.launch_split(
            &dev,
            &f,
            op.name(),
            args,
            n_part,
            grid,
            (RBLOCK, 1, 1),
            &outs,
        );
    }
    let f = dev.function(&module, "arg_reduce", || source(t, "WANT_ARG", &defs))?;
    let per_thread = sp.per_thread();
    let mut args = [
        arg(&sp.gk),
        arg(&sp.ik),
        arg(&ov),
        arg(&oi),
        arg(&sp.n_out),
        arg(&sp.gr),
        arg(&sp.ir),
        arg(&sp.n_red),
        arg(&ps),
        arg(&pv),
        arg(&pi),
        arg(&per_thread),
    ];
    let block = if per_thread == 1 {
        (32, 8, 1)
    } else {
        (RBLOCK, 1, 1)
    };
    unsafe { launch_cfg(&dev, &f, op.name(), sp.grid(&dev), block, 0, &mut args) }
}

pub(crate) fn cumulative(op: CumulativeOp, src: View, dim: usize, dst: View) -> Result<()> {
    let (dev, pd) = device_of(&dst)?;
    let (_, ps) = device_of(&src)?;
    let (sl, dl) = (src.layout, dst.layout);
    let nd = sl.ndim();
    if dl.shape() != sl.shape() || dst.dtype != op.result_dtype(src.dtype) {
        return Err(Error::invalid(
            op.name(),
            "internal error: scan output mismatch",
        ));
    }
    let lines: Vec<usize> = (0..nd).filter(|&d| d != dim).collect();
    let lsizes: Vec<usize> = lines.iter().map(|&d| sl.shape()[d]).collect();
    let li: Vec<usize> = lines.iter().map(|&d| sl.strides()[d]).collect();
    let lo: Vec<usize> = lines.iter().map(|&d| dl.strides()[d]).collect();
    let plan = Plan::<2>::new(&lsizes, [&li, &lo], [sl.offset(), dl.offset()]);
    let (ps_, pst, poff) = plan.parts();
    if ps_.len() > MAXD {
        return Err(too_many(op.name(), ps_.len()));
    }
    let (gl, il, ol) = (
        geo_from(ps_),
        str_from(poff[0], &pst[0]),
        str_from(poff[1], &pst[1]),
    );
    let n_lines = plan.numel() as i64;
    let (len, ist, ost): (i64, i64, i64) = if nd == 0 {
        (1, 0, 0)
    } else {
        (
            sl.shape()[dim] as i64,
            sl.strides()[dim] as i64,
            dl.strides()[dim] as i64,
        )
    };
    if n_lines == 0 || len == 0 {
        return Ok(());
    }
    let t = src.dtype;
    let rop = match op {
        CumulativeOp::Sum => ReduceOp::Sum,
        CumulativeOp::Prod => ReduceOp::Prod,
    };
    let defs = fold(rop, t).expect("sum and prod exist for every dtype");
    let module = format!("scan_{}_{}", op.name(), tag(t));
    let f = dev.function(&module, "scan", || source(t, "WANT_SCAN", &defs))?;
    let mut args = [
        arg(&gl),
        arg(&il),
        arg(&ol),
        arg(&n_lines),
        arg(&len),
        arg(&ist),
        arg(&ost),
        arg(&ps),
        arg(&pd),
    ];
    let blocks = (n_lines as u64)
        .div_ceil(BLOCK as u64)
        .min(dev.sm_count as u64 * 32) as u32;
    unsafe {
        launch_cfg(
            &dev,
            &f,
            op.name(),
            (blocks.max(1), 1, 1),
            (BLOCK, 1, 1),
            0,
            &mut args,
        )
    }
}

/// Every reduction module's (name, source): for warmup and the compile test.
pub(crate) fn all_modules() -> Vec<(String, String)> {
    let mut v = vec![];
    for t in DType::ALL {
        for op in ReduceOp::ALL {
            if let Some(defs) = fold(op, t) {
                v.push((
                    format!("reduce_{}_{}", op.name(), tag(t)),
                    source(t, "WANT_REDUCE", &defs),
                ));
            }
        }
        for op in [ArgReduceOp::Max, ArgReduceOp::Min] {
            v.push((
                format!("arg_{}_{}", op.name(), tag(t)),
                source(t, "WANT_ARG", &arg_defs(op, t)),
            ));
        }
        for op in [CumulativeOp::Sum, CumulativeOp::Prod] {
            let rop = if op == CumulativeOp::Sum {
                ReduceOp::Sum
            } else {
                ReduceOp::Prod
            };
            v.push((
                format!("scan_{}_{}", op.name(), tag(t)),
                source(t, "WANT_SCAN", &fold(rop, t).unwrap()),
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_plan_covers_the_range_with_nonempty_parts() {
        for sms in [1u64, 16, 132] {
            for n_out in [1i64, 2, 3, 7, 100, 527, 528, 529, 5000] {
                for n_red in [
                    0i64, 1, 4095, 8191, 8192, 8193, 40_961, 1_000_003, 6_553_600,
                ] {
                    let Some((parts, chunk)) = split_plan(n_out, n_red, sms) else {
                        // no split: short ranges, or enough outputs to fill the GPU
                        assert!(
                            n_red < 2 * SPLIT_MIN as i64
                                || n_out as u64 >= sms * SPLIT_BLOCKS_PER_SM,
                            "{n_out} {n_red} {sms}"
                        );
                        continue;
                    };
                    assert!(parts >= 2, "{n_out} {n_red} {sms}");
                    assert_eq!(chunk % RBLOCK as i64, 0);
                    assert!(chunk >= SPLIT_MIN as i64);
                    // every part non-empty, together exactly the range
                    assert!((parts - 1) * chunk < n_red && parts * chunk >= n_red);
                    // about SPLIT_BLOCKS_PER_SM blocks per SM, never far more
                    assert!((n_out * parts) as u64 <= 2 * sms * SPLIT_BLOCKS_PER_SM + n_out as u64);
                }
            }
        }
        // the bench's 25 MiB sum on an H100 (132 SMs): 523 parts of 12,544 elements
        assert_eq!(split_plan(1, 6_553_600, 132), Some((523, 12_544)));
        // one ticket per output
        assert_eq!(split_plan(TICKETS as i64 + 1, 1 << 30, 1 << 20), None);
    }

    #[test]
    fn cols_plan_covers_the_range_with_nonempty_parts() {
        for sms in [1u64, 16, 132] {
            for n_out in [1i64, 2, 31, 32, 33, 384, 1536, 8448, 100_000] {
                for n_red in [0i64, 1, 33, 255, 256, 257, 4096, 40_961, 1_000_003] {
                    let groups = (n_out as u64).div_ceil(32);
                    let Some((parts, chunk)) = cols_plan(n_out, n_red, sms) else {
                        // no split: short ranges, or enough groups to fill the GPU
                        assert!(
                            n_red < 2 * COLS_MIN as i64
                                || groups >= sms * SPLIT_BLOCKS_PER_SM * COLS_WAVES
                                || groups > TICKETS as u64,
                            "{n_out} {n_red} {sms}"
                        );
                        continue;
                    };
                    assert!((2..=65_535).contains(&parts), "{n_out} {n_red} {sms}");
                    assert!(chunk >= COLS_MIN as i64);
                    assert!((parts - 1) * chunk < n_red && parts * chunk >= n_red);
                    assert!(
                        groups * parts as u64 <= sms * SPLIT_BLOCKS_PER_SM * COLS_WAVES + groups
                    );
                }
            }
        }
        // the SAE's bias gradients on an H100: [4096, 1536] -> 1536 and [4096, 384] -> 384 in
        // 32 parts of 128 rows, [4096, 24576] -> 24576 in 3 parts of 1,366
        assert_eq!(cols_plan(1536, 4096, 132), Some((32, 128)));
        assert_eq!(cols_plan(384, 4096, 132), Some((32, 128)));
        assert_eq!(cols_plan(24576, 4096, 132), Some((3, 1366)));
    }
}
