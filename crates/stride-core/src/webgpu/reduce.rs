//! Reductions (sum, mean, prod, amax, amin, all, any, count_nonzero) and arg reductions
//! (argmax, argmin, with or without values) in WGSL: the CPU's folds, identities and result
//! dtypes (`cpu/reduce.rs`), every operand addressed through its layout.
//!
//! Accumulators, where WGSL has no 64-bit types:
//! - f32, f16 and bf16 sums, means and products accumulate in double-f32 (`df_*` in
//!   `prelude.wgsl`: an f32 pair carrying ~48 bits), standing in for the CPU's f64 (f32
//!   inputs; the result rounds to the same f32 but within 2^-48 of a rounding boundary) and
//!   bettering its f32 (halves). An intermediate past f32's range overflows to inf here where
//!   the CPU's f64 would hold it (documented in DESIGN.md);
//! - integer and bool sums and products accumulate in i64 as word pairs (wrapping, exact, so
//!   their grouping cannot matter); i64 inputs are read as word pairs too;
//! - extrema compare keys in f32 (exact for every float dtype here), i32, u32 or word pairs.
//!   Ties and NaNs pick the smallest index, so an arg reduction's merge is independent of order.
//!
//! Schedules, chosen from the shapes alone (so a result is the same bits every run), each
//! keeping its longest invocation under llvmpipe's loop budget ([`TRIP_LIMIT`]):
//! - one invocation per output, folding its range in order: short reductions, and
//!   reductions over outer dims whose outputs are neighbours in memory (a bias gradient);
//! - one workgroup per output: invocation `t` folds `r = t, t + 256, …`, then a fixed tree;
//! - few outputs over long ranges: the range is cut into parts (one workgroup each) whose
//!   accumulators land in a scratch buffer, then one invocation per output folds its parts
//!   in order — two passes, no atomics.

use super::buffer::alloc_storage;
use super::launch::{bindings, check_count, declare, gpu_of, groups_for, launch, word, WORKGROUP};
use super::wgsl::{self, ctype};
use crate::backend::common::plan::Plan;
use crate::backend::{ArgReduceOp, ReduceOp, View};
use crate::{Category, DType, Error, Layout, Result};

/// The fewest elements of one part of the split schedule.
const PART_MIN: usize = 8192;
/// Workgroups the split schedule aims for (enough to keep a GPU's cores busy).
const SPLIT_GROUPS: usize = 256;
/// Reductions this short run one invocation per output.
const SHORT: usize = 64;
/// The most loop iterations one invocation may run: llvmpipe (lavapipe) silently stops an
/// invocation's loops after 65,535 iterations *in all* (a loop of 49,152 iterations and a
/// second of 20,848 nested in the same outer loop stopped at 65,533), so every schedule
/// bounds its longest invocation's trip count below this.
const TRIP_LIMIT: usize = 60_000;
/// Reductions over outer dims run one invocation per output up to this length.
const PER_INVOCATION_MAX: usize = 32_768;

/// The kept dims (merged, ordered by the input's strides) of the input and up to two outputs,
/// and the reduced dims in logical order (adjacent ones merged where contiguous), so that `r`
/// is the row-major index over the reduced dims that arg reductions report.
struct Geometry {
    n_out: usize,
    n_red: usize,
    kshape: Vec<usize>,
    /// Offset and strides over the kept dims: input, first output, last output.
    kept: [(usize, Vec<usize>); 3],
    rshape: Vec<usize>,
    rstrides: Vec<usize>,
    /// The input's innermost kept dim is contiguous (a reduction over outer dims).
    kept_inner_unit: bool,
}

fn geometry(op: &'static str, src: &View, dims: &[usize], outs: &[View]) -> Result<Geometry> {
    let (shape, st) = (src.layout.shape(), src.layout.strides());
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let ksizes: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let pick = |l: &Layout| -> Vec<usize> { kept.iter().map(|&d| l.strides()[d]).collect() };
    let (first, last) = (outs[0], outs[outs.len() - 1]);
    let (s_in, s_first, s_last) = (pick(src.layout), pick(first.layout), pick(last.layout));
    let plan = Plan::<3>::new(
        &ksizes,
        [&s_in, &s_first, &s_last],
        [
            src.layout.offset(),
            first.layout.offset(),
            last.layout.offset(),
        ],
    );
    let (ps, pst, poff) = plan.parts();
    let unsigned = |v: &[isize]| -> Result<Vec<usize>> {
        v.iter()
            .map(|&x| usize::try_from(x).map_err(|_| Error::invalid(op, "a negative stride")))
            .collect()
    };
    let kept_ops = [
        (poff[0] as usize, unsigned(&pst[0])?),
        (poff[1] as usize, unsigned(&pst[1])?),
        (poff[2] as usize, unsigned(&pst[2])?),
    ];
    let mut rs: Vec<(usize, usize)> = vec![];
    for &d in dims {
        if shape[d] == 1 {
            continue;
        }
        if let Some(last) = rs.last_mut() {
            if last.1 == st[d] * shape[d] {
                last.0 *= shape[d];
                last.1 = st[d];
                continue;
            }
        }
        rs.push((shape[d], st[d]));
    }
    let n_out = check_count(op, plan.numel())? as usize;
    let n_red = check_count(op, dims.iter().map(|&d| shape[d]).product::<usize>())? as usize;
    Ok(Geometry {
        n_out,
        n_red,
        kshape: ps.to_vec(),
        kept_inner_unit: pst[0].last() == Some(&1) && ps.last().is_some_and(|&n| n > 1),
        kept: kept_ops,
        rshape: rs.iter().map(|r| r.0).collect(),
        rstrides: rs.iter().map(|r| r.1).collect(),
    })
}

/// How the work is laid out (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Schedule {
    PerInvocation,
    /// One workgroup per (output, part); `parts` > 1 is the split schedule.
    Rows {
        parts: usize,
        chunk: usize,
    },
}

impl Geometry {
    fn schedule(&self) -> Schedule {
        let outer = self.kept_inner_unit && self.n_out >= 1024;
        let longest = if wgsl::mutant("reduce_long_loops") {
            usize::MAX
        } else {
            PER_INVOCATION_MAX
        };
        if self.n_red <= SHORT || (outer && self.n_red <= longest) {
            return Schedule::PerInvocation;
        }
        let parts = if self.n_out < SPLIT_GROUPS && self.n_red >= 2 * PART_MIN {
            SPLIT_GROUPS.div_ceil(self.n_out).min(self.n_red / PART_MIN)
        } else {
            1
        };
        // each invocation folds chunk / 256 elements: keep that under the trip limit
        let parts = parts.max(self.n_red.div_ceil(WORKGROUP as usize * TRIP_LIMIT));
        let chunk = self
            .n_red
            .div_ceil(parts)
            .next_multiple_of(WORKGROUP as usize);
        Schedule::Rows {
            parts: self.n_red.div_ceil(chunk).max(1),
            chunk,
        }
    }

    /// `geo`: `[n_out, n_red, parts, chunk, kept shape…, (offset, kept strides…) × 3,
    /// reduced shape…, reduced strides…, extra…]`.
    fn words(
        &self,
        op: &'static str,
        parts: usize,
        chunk: usize,
        extra: &[u32],
    ) -> Result<Vec<u32>> {
        let mut g = vec![
            word(op, self.n_out)?,
            word(op, self.n_red)?,
            word(op, parts)?,
            word(op, chunk)?,
        ];
        for &s in &self.kshape {
            g.push(word(op, s)?);
        }
        for (off, st) in &self.kept {
            g.push(word(op, *off)?);
            for &s in st {
                g.push(word(op, s)?);
            }
        }
        for &s in self.rshape.iter().chain(&self.rstrides) {
            g.push(word(op, s)?);
        }
        g.extend_from_slice(extra);
        Ok(g)
    }

    /// The WGSL constants and the `kept`/`red` offset functions for this geometry's ranks.
    fn wgsl(&self) -> String {
        let (kr, rr) = (self.kshape.len(), self.rshape.len());
        let red = match rr {
            0 => "    return 0u;".to_string(),
            1 => "    return r * geo[RT];".to_string(),
            _ => "    var o = 0u;
    var rem = r;
    for (var d = RR; d > 0u; d = d - 1u) {
        let n = geo[RS + d - 1u];
        let q = rem / n;
        o = o + (rem - q * n) * geo[RT + d - 1u];
        rem = q;
    }
    return o;"
                .to_string(),
        };
        format!(
            "
const KR: u32 = {kr}u;
const RR: u32 = {rr}u;
const KO: u32 = 4u + KR;
const RS: u32 = KO + 3u * (1u + KR);
const RT: u32 = RS + RR;
const EX: u32 = RT + RR;
// operand k's (0 input, 1 first output, 2 last output) offset of kept position i
fn kept(k: u32, i: u32) -> u32 {{
    let base = KO + k * (1u + KR);
    var o = geo[base];
    var rem = i;
    for (var d = KR; d > 0u; d = d - 1u) {{
        let n = geo[3u + d];
        let q = rem / n;
        o = o + (rem - q * n) * geo[base + d];
        rem = q;
    }}
    return o;
}}
// the input's offset (from its kept position's) of reduced index r
fn red(r: u32) -> u32 {{
{red}
}}
"
        )
    }
}

/// A fold in WGSL: `Acc`, `init`, `step(a, e, r)` (element at input offset `e`, reduced
/// index `r`), `merge`, `fin(o, a)` (writes output position `o`), and `pack`/`unpack` (an
/// accumulator as four words, for the split schedule's scratch).
struct Fold {
    wgsl: String,
}

/// The key extrema compare, and its WGSL type.
fn key_type(t: DType) -> &'static str {
    match t {
        DType::I64 => "vec2<u32>",
        DType::Bool => "u32",
        _ => ctype(t),
    }
}

/// `(lowest, highest)` keys: the identities of max and min.
fn key_bounds(t: DType) -> (&'static str, &'static str) {
    match t {
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 => ("-pl_inf()", "pl_inf()"),
        DType::I32 | DType::I8 => ("(-2147483647 - 1)", "2147483647"),
        DType::U32 | DType::U8 | DType::Bool => ("0u", "0xffffffffu"),
        DType::I64 => (
            "vec2<u32>(0u, 0x80000000u)",
            "vec2<u32>(0xffffffffu, 0x7fffffffu)",
        ),
    }
}

/// WGSL of the key of loaded value `x`.
fn key_of(t: DType) -> &'static str {
    match t {
        DType::Bool => "select(0u, 1u, x)",
        _ => "x",
    }
}

/// The raw output bits of key `k` (a max/min value, in the input dtype).
fn key_raw(t: DType, k: &str) -> String {
    match t {
        DType::Bool => k.to_string(),
        DType::I64 => k.to_string(),
        _ => wgsl::to_raw(t, k),
    }
}

/// `(k0, k1)` words of key `k`, and the key from words `w.x, w.y`.
fn key_words(t: DType) -> (&'static str, &'static str, &'static str) {
    match t {
        DType::I64 => ("a.k.x", "a.k.y", "vec2<u32>(w.x, w.y)"),
        DType::F32 | DType::F16 | DType::BF16 => ("bitcast<u32>(a.k)", "0u", "bitcast<f32>(w.x)"),
        DType::I32 | DType::I8 => ("bitcast<u32>(a.k)", "0u", "bitcast<i32>(w.x)"),
        _ => ("a.k", "0u", "w.x"),
    }
}

/// The shared extremum functions: `isnan_k`, `better(b, a)` (b strictly beyond a), `eq_k`.
fn extremum_fns(t: DType, max: bool) -> String {
    let kt = key_type(t);
    let (isnan, beyond, eq) = match t {
        DType::F32 | DType::F16 | DType::BF16 => (
            "m_isnan_f32(k)",
            if max { "b > a" } else { "b < a" },
            "a == b",
        ),
        DType::I64 => (
            "false",
            if max { "i64_lt(a, b)" } else { "i64_lt(b, a)" },
            "all(a == b)",
        ),
        _ => ("false", if max { "b > a" } else { "b < a" }, "a == b"),
    };
    format!(
        "fn isnan_k(k: {kt}) -> bool {{ return {isnan}; }}
fn better(b: {kt}, a: {kt}) -> bool {{ return {beyond}; }}
fn eq_k(a: {kt}, b: {kt}) -> bool {{ return {eq}; }}
"
    )
}

/// `x` non-zero (NaN counts as non-zero, as the CPU's `is_nonzero`).
fn nonzero(t: DType) -> &'static str {
    match t.category() {
        Category::Float => "((bitcast<u32>(x) & 0x7fffffffu) != 0u)",
        Category::Bool => "x",
        Category::Integer if t == DType::I64 => "((x.x | x.y) != 0u)",
        Category::Integer => "(x != 0)",
    }
}

/// `x` widened to the i64 accumulator.
fn widen_i64(t: DType) -> &'static str {
    match t {
        DType::I64 => "x",
        DType::Bool => "vec2<u32>(select(0u, 1u, x), 0u)",
        DType::I32 | DType::I8 => "i64_from_i32(x)",
        _ => "i64_from_u32(x)",
    }
}

/// The fold of `op` over input dtype `t` (output dtype `out`).
fn reduce_fold(op: ReduceOp, t: DType, out: DType) -> Fold {
    let off = "kept(1u, o)";
    let store = |v: &str| format!("fn fin(o: u32, a: Acc) {{ st0({off}, {v}); }}\n");
    let ld = "let x = ldx(e);";
    let wgsl = match op {
        ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Prod if t.is_float() => {
            let (init, step, merge) = if op == ReduceOp::Prod {
                ("vec2<f32>(1.0, 0.0)", "df_mul_f(a, x)", "df_mul(a, b)")
            } else if wgsl::mutant("reduce_f32_acc") {
                (
                    "vec2<f32>(0.0, 0.0)",
                    "vec2<f32>(a.x + x, 0.0)",
                    "vec2<f32>(a.x + b.x, 0.0)",
                )
            } else {
                ("vec2<f32>(0.0, 0.0)", "df_add_f(a, x)", "df_add(a, b)")
            };
            let result = if op == ReduceOp::Mean {
                // n as a double-f32 pair (exact) in the extra words; NaN for an empty mean
                "select(df_div_f32(a, vec2<f32>(bitcast<f32>(geo[EX]), bitcast<f32>(geo[EX + 1u]))), m_nan_f32(), geo[1] == 0u)"
            } else {
                "a.x"
            };
            format!(
                "alias Acc = vec2<f32>;
fn init() -> Acc {{ return {init}; }}
fn step(a: Acc, e: u32, r: u32) -> Acc {{ {ld} return {step}; }}
fn merge(a: Acc, b: Acc) -> Acc {{ return {merge}; }}
fn pack(a: Acc) -> vec4<u32> {{ return vec4<u32>(bitcast<u32>(a.x), bitcast<u32>(a.y), 0u, 0u); }}
fn unpack(w: vec4<u32>) -> Acc {{ return vec2<f32>(bitcast<f32>(w.x), bitcast<f32>(w.y)); }}
{}",
                store(&wgsl::to_raw(out, result))
            )
        }
        ReduceOp::Sum | ReduceOp::Prod => {
            let (init, f) = if op == ReduceOp::Prod {
                ("vec2<u32>(1u, 0u)", "i64_mul")
            } else {
                ("vec2<u32>(0u, 0u)", "i64_add")
            };
            format!(
                "alias Acc = vec2<u32>;
fn init() -> Acc {{ return {init}; }}
fn step(a: Acc, e: u32, r: u32) -> Acc {{ {ld} return {f}(a, {}); }}
fn merge(a: Acc, b: Acc) -> Acc {{ return {f}(a, b); }}
fn pack(a: Acc) -> vec4<u32> {{ return vec4<u32>(a.x, a.y, 0u, 0u); }}
fn unpack(w: vec4<u32>) -> Acc {{ return w.xy; }}
{}",
                widen_i64(t),
                store("a")
            )
        }
        ReduceOp::Mean => unreachable!("the frontend refuses mean of non-floats"),
        ReduceOp::CountNonzero | ReduceOp::All | ReduceOp::Any => {
            let (init, stepf, merge, fin) = match op {
                ReduceOp::CountNonzero => ("0u", "a + v", "a + b", "vec2<u32>(a, 0u)"),
                ReduceOp::All => ("1u", "a & v", "a & b", "a"),
                _ => ("0u", "a | v", "a | b", "a"),
            };
            format!(
                "alias Acc = u32;
fn init() -> Acc {{ return {init}; }}
fn step(a: Acc, e: u32, r: u32) -> Acc {{ {ld} let v = select(0u, 1u, {}); return {stepf}; }}
fn merge(a: Acc, b: Acc) -> Acc {{ return {merge}; }}
fn pack(a: Acc) -> vec4<u32> {{ return vec4<u32>(a, 0u, 0u, 0u); }}
fn unpack(w: vec4<u32>) -> Acc {{ return w.x; }}
{}",
                nonzero(t),
                store(fin)
            )
        }
        ReduceOp::Max | ReduceOp::Min => {
            let max = op == ReduceOp::Max;
            let (lo, hi) = key_bounds(t);
            let kt = key_type(t);
            let init = if max { lo } else { hi };
            let (w0, w1, from) = key_words(t);
            format!(
                "alias Acc = {kt};
{}fn pick(a: Acc, b: Acc) -> Acc {{
    if (isnan_k(a)) {{ return a; }}
    if (isnan_k(b) || better(b, a)) {{ return b; }}
    return a;
}}
fn init() -> Acc {{ return {init}; }}
fn step(a: Acc, e: u32, r: u32) -> Acc {{ {ld} return pick(a, {}); }}
fn merge(a: Acc, b: Acc) -> Acc {{ return pick(a, b); }}
fn pack(a0: Acc) -> vec4<u32> {{ let a = Wrap(a0); return vec4<u32>({w0}, {w1}, 0u, 0u); }}
fn unpack(w: vec4<u32>) -> Acc {{ return {from}; }}
struct Wrap {{ k: {kt} }}
{}",
                extremum_fns(t, max),
                key_of(t),
                store(&key_raw(t, "a"))
            )
        }
    };
    Fold { wgsl }
}

/// The fold of an arg reduction; `values`: whether a values output comes first.
fn arg_fold(op: ArgReduceOp, t: DType, values: bool) -> Fold {
    let max = op == ArgReduceOp::Max;
    let (lo, hi) = key_bounds(t);
    let kt = key_type(t);
    let init = if max { lo } else { hi };
    let (w0, w1, from) = key_words(t);
    let fin = if values {
        format!(
            "st0(kept(1u, o), {}); st1(kept(2u, o), vec2<u32>(a.i, 0u));",
            key_raw(t, "a.k")
        )
    } else {
        "st0(kept(2u, o), vec2<u32>(a.i, 0u));".to_string()
    };
    let wgsl = format!(
        "struct Acc {{ k: {kt}, i: u32 }}
{}// ties and NaNs go to the smaller index: the same result whatever the merge order
fn pick(a: Acc, b: Acc) -> Acc {{
    let an = isnan_k(a.k);
    let bn = isnan_k(b.k);
    if ((an && bn) || (!an && !bn && eq_k(a.k, b.k))) {{
        if ({tie}) {{ return b; }}
        return a;
    }}
    if (an) {{ return a; }}
    if (bn || better(b.k, a.k)) {{ return b; }}
    return a;
}}
fn init() -> Acc {{ return Acc({init}, 0xffffffffu); }}
fn step(a: Acc, e: u32, r: u32) -> Acc {{ let x = ldx(e); return pick(a, Acc({}, r)); }}
fn merge(a: Acc, b: Acc) -> Acc {{ return pick(a, b); }}
fn pack(a: Acc) -> vec4<u32> {{ return vec4<u32>({w0}, {w1}, a.i, 0u); }}
fn unpack(w: vec4<u32>) -> Acc {{ return Acc({from}, w.z); }}
fn fin(o: u32, a: Acc) {{ {fin} }}
",
        extremum_fns(t, max),
        key_of(t),
        tie = if wgsl::mutant("arg_any_tie") {
            "true"
        } else {
            "b.i < a.i"
        },
    );
    Fold { wgsl }
}

/// The per-invocation schedule's entry point (`parts`: fold the scratch's parts instead of
/// the input).
fn per_invocation_main(from_parts: bool) -> String {
    let body = if from_parts {
        "        let parts = geo[2];
        var a = unpack(part(o * parts));
        for (var c = 1u; c < parts; c = c + 1u) {
            a = merge(a, unpack(part(o * parts + c)));
        }"
    } else {
        "        let base = kept(0u, o);
        var a = init();
        for (var r = 0u; r < n_red; r = r + 1u) {
            a = step(a, base + red(r), r);
        }"
    };
    format!(
        "
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let n_out = geo[0];
    let n_red = geo[1];
    let stride = nwg.x * 256u;
    for (var o = gid.x; o < n_out; o = o + stride) {{
{body}
        fin(o, a);
    }}
}}
"
    )
}

/// The workgroup-per-(output, part) entry point; `to_parts`: write each part's accumulator to
/// the scratch instead of finishing.
fn rows_main(to_parts: bool) -> String {
    let finish = if to_parts {
        "put(u, pack(sh[0]));"
    } else {
        "fin(o, sh[0]);"
    };
    format!(
        "
var<workgroup> sh: array<Acc, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let n_out = geo[0];
    let n_red = geo[1];
    let parts = geo[2];
    let chunk = geo[3];
    let units = n_out * parts;
    let t = lid.x;
    for (var u = wg.x; u < units; u = u + nwg.x) {{
        let o = u / parts;
        let c = u - o * parts;
        let base = kept(0u, o);
        let lo = c * chunk;
        let hi = min(n_red, lo + chunk);
        var a = init();
        for (var r = lo + t; r < hi; r = r + 256u) {{
            a = step(a, base + red(r), r);
        }}
        sh[t] = a;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s = s >> 1u) {{
            if (t < s) {{
                sh[t] = merge(sh[t], sh[t + s]);
            }}
            workgroupBarrier();
        }}
        if (t == 0u) {{
            {finish}
        }}
        workgroupBarrier();
    }}
}}
"
    )
}

/// Runs `fold` over `src` into `outs` (values and/or indices, keepdim views).
fn run(
    op: &'static str,
    fold: &Fold,
    src: View,
    dims: &[usize],
    outs: &[View],
    extra: &[u32],
) -> Result<()> {
    let gpu = gpu_of(op, &src)?;
    let g = geometry(op, &src, dims, outs)?;
    if g.n_out == 0 {
        return Ok(());
    }
    let load = |k: usize, slot: usize, atomic: bool| {
        let f = if src.dtype == DType::I64 {
            wgsl::load64_fn(k, slot, atomic)
        } else {
            wgsl::load_fn(k, slot, atomic, src.dtype)
        };
        let t = if src.dtype == DType::I64 {
            "vec2<u32>"
        } else {
            ctype(src.dtype)
        };
        format!("{f}fn ldx(e: u32) -> {t} {{ return ld{k}(e); }}\n")
    };
    let stores = |b: &super::launch::Bindings, n: usize| {
        (0..n)
            .map(|k| {
                let slot = b.slot[k];
                if outs[k].dtype == DType::I64 {
                    wgsl::store64_fn(k, slot)
                } else {
                    wgsl::store_fn(k, slot, outs[k].dtype)
                }
            })
            .collect::<String>()
    };
    // one pass: the outputs, then the input, folded by `main`
    let single = |main: String, words: &[u32], groups: (u32, u32, u32)| -> Result<()> {
        let mut views: Vec<View> = outs.to_vec();
        views.push(src);
        let b = bindings(&views, outs.len());
        let slot = b.slot[outs.len()];
        let mut s = declare(&b.kinds);
        s += &g.wgsl();
        s += &stores(&b, outs.len());
        s += &load(outs.len(), slot, b.kinds[slot].atomic);
        s += &fold.wgsl;
        s += &main;
        launch(&gpu, op, s, &b, words, groups)
    };
    match g.schedule() {
        Schedule::PerInvocation => {
            let words = g.words(op, 1, g.n_red.max(1), extra)?;
            single(per_invocation_main(false), &words, groups_for(g.n_out))
        }
        Schedule::Rows { parts, chunk } => {
            let words = g.words(op, parts, chunk, extra)?;
            let units = g.n_out * parts;
            let groups = (units.min(65_535) as u32, 1, 1);
            if parts == 1 {
                return single(rows_main(false), &words, groups);
            }
            // pass 1: each (output, part) into four scratch words
            let scratch = alloc_storage(&gpu, DType::U32, 4 * units, false)?;
            let layout = Layout::contiguous(&[4 * units]);
            let sv = View {
                storage: &scratch,
                layout: &layout,
                dtype: DType::U32,
            };
            let views = [sv, src];
            let b = bindings(&views, 1);
            let (ps, is) = (b.slot[0], b.slot[1]);
            let mut s = declare(&b.kinds);
            s += &g.wgsl();
            s += &format!(
                "fn put(u: u32, w: vec4<u32>) {{ b{ps}[4u * u] = w.x; b{ps}[4u * u + 1u] = w.y; \
                 b{ps}[4u * u + 2u] = w.z; b{ps}[4u * u + 3u] = w.w; }}\n"
            );
            s += &load(1, is, b.kinds[is].atomic);
            // the fold's `fin` names the output stores, never called in this pass
            for (k, o) in outs.iter().enumerate() {
                let r = if o.dtype == DType::I64 {
                    "vec2<u32>"
                } else {
                    "u32"
                };
                s += &format!("fn st{k}(e: u32, r: {r}) {{}}\n");
            }
            s += &fold.wgsl;
            s += &rows_main(true);
            launch(&gpu, op, s, &b, &words, groups)?;
            // pass 2: each output folds its parts in order
            let mut views: Vec<View> = outs.to_vec();
            views.push(sv);
            let b = bindings(&views, outs.len());
            let slot = b.slot[outs.len()];
            let mut s = declare(&b.kinds);
            s += &g.wgsl();
            s += &stores(&b, outs.len());
            s += &format!(
                "fn part(u: u32) -> vec4<u32> {{ return vec4<u32>(b{slot}[4u * u], \
                 b{slot}[4u * u + 1u], b{slot}[4u * u + 2u], b{slot}[4u * u + 3u]); }}\n"
            );
            // the fold's step is never called here, but its text names ldx
            s += &load(outs.len(), slot, false);
            s += &fold.wgsl;
            s += &per_invocation_main(true);
            launch(&gpu, op, s, &b, &words, groups_for(g.n_out))
        }
    }
}

fn empty_error(op: &'static str, shape: &[usize], dims: &[usize]) -> Error {
    Error::invalid(
        op,
        format!(
            "cannot reduce over zero elements (input shape {shape:?}, reduced dims {dims:?}): the op has no identity; check numel() first"
        ),
    )
}

/// Whether the WGSL reductions take this input (every dtype a wgpu device holds).
pub(crate) fn native(src: View) -> bool {
    src.dtype != DType::F64
}

pub(crate) fn reduce(op: ReduceOp, src: View, dims: &[usize], dst: View) -> Result<()> {
    if dst.layout.numel() == 0 {
        return Ok(()); // nothing to write, however long the reduced dims
    }
    let n_red: usize = dims.iter().map(|&d| src.layout.shape()[d]).product();
    if n_red == 0 && op.needs_nonempty() {
        return Err(empty_error(op.name(), src.layout.shape(), dims));
    }
    let out = op.result_dtype(src.dtype)?;
    let fold = reduce_fold(op, src.dtype, out);
    // a mean's count as a double-f32 pair: hi = n rounded, lo = the exact rest
    let hi = n_red as f32;
    let lo = (n_red as f64 - hi as f64) as f32;
    run(
        op.name(),
        &fold,
        src,
        dims,
        &[dst],
        &[hi.to_bits(), lo.to_bits()],
    )
}

pub(crate) fn arg_reduce(
    op: ArgReduceOp,
    src: View,
    dims: &[usize],
    values: Option<View>,
    indices: View,
) -> Result<()> {
    if indices.layout.numel() == 0 {
        return Ok(());
    }
    let n_red: usize = dims.iter().map(|&d| src.layout.shape()[d]).product();
    if n_red == 0 {
        return Err(empty_error(op.name(), src.layout.shape(), dims));
    }
    let fold = arg_fold(op, src.dtype, values.is_some());
    let outs: Vec<View> = values.into_iter().chain([indices]).collect();
    run(op.name(), &fold, src, dims, &outs, &[])
}
