//! The CUDA C source of each kernel module: `kernels/common.cuh` + a family's macros
//! (`kernels/*.cu`) + one line per op. An elementwise op's line comes from its entry in
//! `backend/op_table.rs`, the table the CPU kernels come from too: the C expression, with the
//! loads, stores and scalars of CUDA filled in (`cuda_expr`).
//!
//! A module holds one kernel (an op on a dtype: `unary_exp_f32`, `binary_add_i64`,
//! `cast_f32_bf16`, `copy_4`) and is compiled on first use: NVRTC takes about 0.1–0.2 s per
//! kernel, so the first op of a fresh process with a cold cache waits for its own kernel only.

use crate::backend::index::ScatterOp;
use crate::backend::op_table::{Kernel, Out};
use crate::backend::{BinaryOp, TernaryOp, UnaryOp};
use crate::{Category, DType};

const COMMON: &str = include_str!("kernels/common.cuh");
const ELEMENTWISE: &str = include_str!("kernels/elementwise.cu");
const COPY: &str = include_str!("kernels/copy.cu");

/// The C type of a dtype's elements in kernels/common.cuh.
pub(crate) fn ctype(d: DType) -> &'static str {
    match d {
        DType::F64 => "double",
        DType::F32 => "float",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::U8 => "u8",
        DType::I8 => "i8",
        DType::Bool => "bool",
    }
}

/// The preamble of a module computing in float dtype `t` (after common.cuh, before its
/// kernels): the storage type `T`, the compute type `C` and the load/store macros `L`/`S`.
pub(crate) fn float_preamble(t: DType) -> String {
    format!(
        "\ntypedef {} T;\ntypedef E<T>::C C;\n#define L(v) E<T>::ld(v)\n#define S(v) E<T>::st(v)\n",
        ctype(t)
    )
}

/// `(<name>_<t>, source(t))` for every float dtype: a module family's warmup list.
pub(crate) fn float_modules(name: &str, source: fn(DType) -> String) -> Vec<(String, String)> {
    [DType::F64, DType::F32, DType::F16, DType::BF16]
        .iter()
        .map(|&t| (format!("{name}_{}", tag(t)), source(t)))
        .collect()
}

/// Short dtype name used in module and kernel names.
pub(crate) fn tag(d: DType) -> &'static str {
    match d {
        DType::F64 => "f64",
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::U8 => "u8",
        DType::I8 => "i8",
        DType::Bool => "bool",
    }
}

fn module(t: DType, family: &str, lines: impl Iterator<Item = String>) -> String {
    let mut s = String::with_capacity(COMMON.len() + ELEMENTWISE.len() + 4096);
    s.push_str(COMMON);
    s.push_str(ELEMENTWISE);
    s.push_str(&format!("\n// ---- {family} kernels for {}\n", tag(t)));
    s.push_str(&format!("typedef {} T;\n", ctype(t)));
    if t.is_float() {
        s.push_str("typedef E<T>::C C;\n#define L(v) E<T>::ld(v)\n#define S(v) E<T>::st(v)\n");
    }
    for l in lines {
        s.push_str(&l);
        s.push('\n');
    }
    s
}

/// `e` with each identifier that `var` names replaced (numbers and other names kept).
fn substitute(e: &str, var: impl Fn(&str) -> Option<&'static str>) -> String {
    let mut out = String::with_capacity(e.len() + 16);
    let mut rest = e;
    while let Some(c) = rest.chars().next() {
        let is_name = c.is_ascii_alphabetic() || c == '_';
        let n = if is_name || c.is_ascii_digit() {
            // a name, or a number (`1.5f`, `0x7f`: digits first)
            let dot = !is_name;
            rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || (dot && c == '.')))
                .unwrap_or(rest.len())
        } else {
            c.len_utf8()
        };
        let word = &rest[..n];
        out.push_str(if is_name {
            var(word).unwrap_or(word)
        } else {
            word
        });
        rest = &rest[n..];
    }
    out
}

/// A table expression (backend/op_table.rs) in CUDA C: a float kernel loads each input to
/// the compute type (`L`) and stores a non-bool result (`S`); the op's scalar `v` arrives as
/// `vf` (floats) or `vi` (integers).
fn cuda_expr(k: Kernel, t: DType) -> String {
    match t.category() {
        _ if k.out == Out::Select => k.c.to_string(),
        Category::Float => {
            let e = substitute(k.c, |w| match w {
                "x" => Some("L(x)"),
                "y" => Some("L(y)"),
                "z" => Some("L(z)"),
                "v" => Some("(C)vf"),
                _ => None,
            });
            match k.out {
                Out::Bool => e,
                _ => format!("S({e})"),
            }
        }
        _ => substitute(k.c, |w| (w == "v").then_some("E<T>::from_i64(vi)")),
    }
}

/// The C type of what a unary or binary kernel on dtype `t` returns.
fn out_type(k: Kernel, t: DType) -> &'static str {
    if k.out == Out::Bool || t == DType::Bool {
        "bool"
    } else {
        "T"
    }
}

/// The module of unary `op` on input dtype `t` (None: no such kernel).
pub(crate) fn unary_module(op: UnaryOp, t: DType) -> Option<String> {
    let k = op.kernel(t)?;
    let line = format!(
        "UNARY({}, {}, {})",
        op.name(),
        out_type(k, t),
        cuda_expr(k, t)
    );
    Some(module(t, "unary", std::iter::once(line)))
}

/// The module of binary `op` on dtype `t` (None: no such kernel).
pub(crate) fn binary_module(op: BinaryOp, t: DType) -> Option<String> {
    let k = op.kernel(t)?;
    let line = format!(
        "BINARY({}, {}, {})",
        op.name(),
        out_type(k, t),
        cuda_expr(k, t)
    );
    Some(module(t, "binary", std::iter::once(line)))
}

/// The module of the integer zero/negative check (see `ANY_BAD` in kernels/elementwise.cu).
pub(crate) fn any_bad_module(t: DType) -> String {
    module(t, "check", std::iter::once("ANY_BAD(any_bad)".to_string()))
}

/// Kernel name of a ternary op (the scalar of addcmul/addcdiv travels as an argument).
pub(crate) fn ternary_name(op: TernaryOp) -> &'static str {
    op.name()
}

/// The module of ternary `op` with output dtype `t` (None: no such kernel). Operand x has
/// C type A: bool for `where`, else T.
pub(crate) fn ternary_module(op: TernaryOp, t: DType) -> Option<String> {
    let k = op.kernel(t)?;
    let a = if k.out == Out::Select { "bool" } else { "T" };
    let line = format!("TERNARY({}, {a}, {})", ternary_name(op), cuda_expr(k, t));
    Some(module(t, "ternary", std::iter::once(line)))
}

/// Kernel name of a cast to `d` (in module `cast_<source>`).
pub(crate) fn cast_name(d: DType) -> &'static str {
    match d {
        DType::F64 => "to_f64",
        DType::F32 => "to_f32",
        DType::F16 => "to_f16",
        DType::BF16 => "to_bf16",
        DType::I64 => "to_i64",
        DType::I32 => "to_i32",
        DType::U32 => "to_u32",
        DType::U8 => "to_u8",
        DType::I8 => "to_i8",
        DType::Bool => "to_bool",
    }
}

/// The cast from `s` to `d`: by `s`'s category, as `Element::cast` on the CPU.
pub(crate) fn cast_module(s: DType, d: DType) -> String {
    let how = match s.category() {
        Category::Float => format!("E<{0}>::from_f64(E<T>::to_f64(x))", ctype(d)),
        Category::Integer => format!("E<{0}>::from_i64(E<T>::to_i64(x))", ctype(d)),
        Category::Bool => format!("E<{0}>::from_bool(x)", ctype(d)),
    };
    let line = format!("CAST({}, {}, {how})", cast_name(d), ctype(d));
    module(s, "cast", std::iter::once(line))
}

/// The bit copy and fill kernels of one element size (1, 2, 4 or 8 bytes).
pub(crate) fn copy_module(bytes: usize) -> String {
    let word = match bytes {
        1 => "u8",
        2 => "unsigned short",
        4 => "u32",
        _ => "u64",
    };
    format!("{COMMON}{ELEMENTWISE}{COPY}COPY_FILL({bytes}, {word})\n")
}

// ---- index and sort kernels (cuda/index.rs, cuda/sort.rs) ----------------------------------
// One module per (op, dtype[, index dtype]); ops that only move elements (gather, assigning
// scatter, masked_select/scatter) have one per element width, as copies do.

const INDEX_COMMON: &str = include_str!("kernels/index_common.cuh");
const INDEX: &str = include_str!("kernels/index.cu");
const COMPACT: &str = include_str!("kernels/compact.cu");
const SORT: &str = include_str!("kernels/sort.cu");

/// The unsigned word of an element width: kernels that only move elements use it.
pub(crate) fn word(bytes: usize) -> &'static str {
    match bytes {
        1 => "u8",
        2 => "unsigned short",
        4 => "u32",
        _ => "u64",
    }
}

fn index_source(defs: &[String], body: &str) -> String {
    let mut s = String::with_capacity(COMMON.len() + INDEX_COMMON.len() + body.len() + 2048);
    s.push_str(COMMON);
    s.push_str(INDEX_COMMON);
    s.push('\n');
    for d in defs {
        s.push_str(d);
        s.push('\n');
    }
    s.push_str(body);
    s
}

/// `#define L/S` (load to / store from the compute type) for a float `T`.
fn float_io(t: DType) -> Vec<String> {
    if t.is_float() {
        vec![
            "typedef E<T>::C C;".into(),
            "#define L(v) E<T>::ld(v)".into(),
            "#define S(v) E<T>::st(v)".into(),
        ]
    } else {
        vec![]
    }
}

/// Index validation for index dtype `i` (module `index_check_<i>`; any integer dtype, so
/// that bincount's input is checked by it too).
pub(crate) fn check_index_module(i: DType) -> String {
    let defs = [
        format!("typedef {} I;", ctype(i)),
        "#define WANT_CHECK 1".into(),
    ];
    index_source(&defs, INDEX)
}

/// Gather of `bytes`-wide elements with index dtype `i` (module `gather_<bytes>_<i>`).
pub(crate) fn gather_module(bytes: usize, i: DType) -> String {
    let defs = [
        format!("typedef {} T;", word(bytes)),
        format!("typedef {} I;", ctype(i)),
        "#define WANT_GATHER 1".into(),
    ];
    index_source(&defs, INDEX)
}

/// A gated copy of `bytes`-wide elements (module `gated_copy_<bytes>`).
pub(crate) fn gated_copy_module(bytes: usize) -> String {
    let defs = [
        format!("typedef {} T;", word(bytes)),
        "#define WANT_GATED_COPY 1".into(),
    ];
    index_source(&defs, INDEX)
}

/// The module name of a scatter: `scatter_assign_<bytes>_<i>` (a move) or
/// `scatter_<add|prod|amax|amin>_<dtype>_<i>`.
pub(crate) fn scatter_module_name(op: ScatterOp, t: DType, i: DType) -> String {
    match op {
        ScatterOp::Assign => format!("scatter_assign_{}_{}", t.size_in_bytes(), tag(i)),
        _ => format!("scatter_{}_{}_{}", scatter_tag(op), tag(t), tag(i)),
    }
}

fn scatter_tag(op: ScatterOp) -> &'static str {
    match op {
        ScatterOp::Assign => "assign",
        ScatterOp::Add { .. } => "add",
        ScatterOp::Prod => "prod",
        ScatterOp::Amax => "amax",
        ScatterOp::Amin => "amin",
    }
}

/// The bits of the NaN the CPU's max/min produce in a float dtype (`F::nan()` in the compute
/// type, stored).
fn canonical_nan(t: DType) -> &'static str {
    match t {
        DType::F64 => "0x7ff8000000000000ull",
        DType::F32 => "0x7fc00000ull",
        DType::F16 => "0x7e00ull",
        _ => "0x7fc0ull",
    }
}

/// The scatter module of `op` on dtype `t` with index dtype `i`: None for a reducing scatter
/// on bool (no such op).
pub(crate) fn scatter_module(op: ScatterOp, t: DType, i: DType) -> Option<String> {
    let mut defs = vec![];
    if op == ScatterOp::Assign {
        defs.push(format!("typedef {} T;", word(t.size_in_bytes())));
        defs.push("#define COMBINE(d, s) (s)".into());
    } else {
        if t == DType::Bool {
            return None;
        }
        defs.push(format!("typedef {} T;", ctype(t)));
        defs.extend(float_io(t));
        let combine = if t.is_float() {
            defs.push(format!(
                "__device__ __forceinline__ T nan_t() {{ return from_bits<T>({}); }}",
                canonical_nan(t)
            ));
            defs.push("__device__ __forceinline__ T c_max(T d, T s) { C a = L(d), b = L(s); if (a != a || b != b) return nan_t(); return S(a > b ? a : b); }".into());
            defs.push("__device__ __forceinline__ T c_min(T d, T s) { C a = L(d), b = L(s); if (a != a || b != b) return nan_t(); return S(a < b ? a : b); }".into());
            match op {
                ScatterOp::Add { .. } => {
                    "(use_alpha ? S(L(d) + L(S(L(s) * L(alpha)))) : S(L(d) + L(s)))"
                }
                ScatterOp::Prod => "S(L(d) * L(s))",
                ScatterOp::Amax => "c_max(d, s)",
                _ => "c_min(d, s)",
            }
        } else {
            match op {
                ScatterOp::Add { .. } => "w_add(d, use_alpha ? w_mul(s, alpha) : s)",
                ScatterOp::Prod => "w_mul(d, s)",
                ScatterOp::Amax => "(d > s ? d : s)",
                _ => "(d < s ? d : s)",
            }
        };
        defs.push(format!("#define COMBINE(d, s) ({combine})"));
    }
    defs.push(format!("typedef {} I;", ctype(i)));
    defs.push("#define WANT_SCATTER 1".into());
    Some(index_source(&defs, INDEX))
}

/// Extrema of dtype `t` (module `extrema_<t>`).
pub(crate) fn extrema_module(t: DType) -> String {
    let (acc, to) = match t.category() {
        Category::Float => ("double", "E<T>::to_f64(x)"),
        Category::Integer => ("i64", "((i64)(x))"),
        Category::Bool => ("i64", "((i64)((x) ? 1 : 0))"),
    };
    let defs = [
        format!("typedef {} T;", ctype(t)),
        format!("typedef {acc} ACC;"),
        format!("#define TOACC(x) {to}"),
        "#define WANT_EXTREMA 1".into(),
    ];
    index_source(&defs, INDEX)
}

/// A stream compaction (kernels/compact.cu) and what it selects and writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Compact {
    /// Non-zero elements of a dtype (counted only).
    CountNonzero(DType),
    /// Coordinates of the non-zero elements of a dtype.
    Nonzero(DType),
    /// Elements of a width where a bool mask is true, into a 1-D output.
    MaskedSelect(usize),
    /// Elements of a 1-D source of a width into the positions where a mask is true.
    MaskedScatter(usize),
    /// Runs of equal consecutive elements of a 1-D dtype.
    Unique(DType),
}

impl Compact {
    pub(crate) fn module_name(self) -> String {
        match self {
            Compact::CountNonzero(t) => format!("count_nonzero_{}", tag(t)),
            Compact::Nonzero(t) => format!("nonzero_{}", tag(t)),
            Compact::MaskedSelect(b) => format!("masked_select_{b}"),
            Compact::MaskedScatter(b) => format!("masked_scatter_{b}"),
            Compact::Unique(t) => format!("unique_{}", tag(t)),
        }
    }

    pub(crate) fn module(self) -> String {
        let mut defs: Vec<String> = vec![];
        let mut extra = String::new();
        match self {
            Compact::CountNonzero(t) => {
                defs.push(format!("typedef {} T;", ctype(t)));
                defs.push("#define PARAMS const __grid_constant__ Geo g, const __grid_constant__ Str sx, const T* x".into());
                defs.push("#define FLAG(i) E<T>::nonzero(x[at(g, sx, i)])".into());
                defs.push("#define EACH(i, r, f)".into());
            }
            Compact::Nonzero(t) => {
                defs.push(format!("typedef {} T;", ctype(t)));
                defs.push("#define PARAMS const __grid_constant__ Geo g, const __grid_constant__ Str sx, const T* x, i64* out, const i64 oo, const i64 r0, const i64 c0, const __grid_constant__ Geo shp, const i64 rows".into());
                defs.push("#define FLAG(i) E<T>::nonzero(x[at(g, sx, i)])".into());
                defs.push("#define EACH(i, r, f) if ((f) && (i64)(r) < rows) { i64 p = (i); for (int d = shp.ndim - 1; d >= 0; --d) { const i64 q = p / shp.size[d]; out[oo + (i64)(r) * r0 + d * c0] = p - q * shp.size[d]; p = q; } }".into());
            }
            Compact::MaskedSelect(b) => {
                defs.push(format!("typedef {} T;", word(b)));
                defs.push("#define PARAMS const __grid_constant__ Geo g, const __grid_constant__ Str sx, const __grid_constant__ Str sm, const T* x, const bool* mask, T* out, const i64 oo, const i64 os, const i64 rows".into());
                defs.push("#define FLAG(i) mask[at(g, sm, i)]".into());
                defs.push("#define EACH(i, r, f) if ((f) && (i64)(r) < rows) out[oo + (i64)(r) * os] = x[at(g, sx, i)];".into());
            }
            Compact::MaskedScatter(b) => {
                defs.push(format!("typedef {} T;", word(b)));
                defs.push("#define PARAMS const __grid_constant__ Geo g, const __grid_constant__ Str sd, const __grid_constant__ Str sm, T* dst, const bool* mask, const T* src, const i64 so, const i64 ss, const i64 avail".into());
                defs.push("#define FLAG(i) mask[at(g, sm, i)]".into());
                defs.push("#define EACH(i, r, f) if ((f) && (i64)(r) < avail) dst[at(g, sd, i)] = src[so + (i64)(r) * ss];".into());
            }
            Compact::Unique(t) => {
                defs.push(format!("typedef {} T;", ctype(t)));
                let neq = if t.is_float() {
                    "(E<T>::ld(a) != E<T>::ld(b))"
                } else {
                    "((a) != (b))"
                };
                defs.push(format!("#define NEQ(a, b) {neq}"));
                defs.push("#define PARAMS const T* x, const i64 xo, const i64 xs, T* vals, const i64 vo, const i64 vs, i64* grp, const i64 go, const i64 gs, i64* rstart, const i64 G".into());
                defs.push(
                    "#define FLAG(i) ((i) == 0 || NEQ(x[xo + (i) * xs], x[xo + ((i) - 1) * xs]))"
                        .into(),
                );
                defs.push("#define EACH(i, r, f) { if ((f) && (i64)(r) < G) { vals[vo + (i64)(r) * vs] = x[xo + (i) * xs]; rstart[r] = (i); } grp[go + (i) * gs] = (i64)(r) - ((f) ? 0 : 1); }".into());
                extra.push_str(
                    "\n// counts[g] = the length of run g, from the runs' starts.\n\
                     extern \"C\" __global__ void k_unique_counts(const i64* starts, const i64 G, const i64 n,\n\
                     \x20                                          i64* counts, const i64 co, const i64 cs) {\n\
                     \x20   GRID_LOOP(g, G) counts[co + g * cs] = (g + 1 < G ? starts[g + 1] : n) - starts[g];\n\
                     }\n",
                );
            }
        }
        let mut s = index_source(&defs, COMPACT);
        s.push_str(&extra);
        s
    }
}

/// `KEY(x)` and `KMASK` of dtype `t` (see kernels/sort.cu): the CPU's `SortKey`.
fn sort_key(t: DType) -> [String; 2] {
    let (key, mask) = match t {
        DType::F64 => (
            "fkey((u64)__double_as_longlong(x), 0x8000000000000000ull, 0x7ff0000000000000ull)",
            "0xffffffffffffffffull",
        ),
        DType::F32 => (
            "fkey((u64)__float_as_uint(x), 0x80000000ull, 0x7f800000ull)",
            "0xffffffffull",
        ),
        DType::F16 => ("fkey((u64)(x).b, 0x8000ull, 0x7c00ull)", "0xffffull"),
        DType::BF16 => ("fkey((u64)(x).b, 0x8000ull, 0x7f80ull)", "0xffffull"),
        DType::I64 => (
            "((u64)(x) ^ 0x8000000000000000ull)",
            "0xffffffffffffffffull",
        ),
        DType::I32 => ("((u64)(u32)(x) ^ 0x80000000ull)", "0xffffffffull"),
        DType::U32 => ("((u64)(x))", "0xffffffffull"),
        DType::U8 => ("((u64)(x))", "0xffull"),
        DType::I8 => ("((u64)(u8)(x) ^ 0x80ull)", "0xffull"),
        DType::Bool => ("((u64)((x) ? 1 : 0))", "0xffull"),
    };
    [
        format!("#define KEY(x) {key}"),
        format!("#define KMASK {mask}"),
    ]
}

fn sort_source(t: Option<DType>, want: &str, more: &[String]) -> String {
    let mut defs = vec![];
    if let Some(t) = t {
        defs.push(format!("typedef {} T;", ctype(t)));
        defs.extend(sort_key(t));
    }
    defs.extend(more.iter().cloned());
    defs.push(format!("#define {want} 1"));
    index_source(&defs, SORT)
}

/// Row sorts of dtype `t` (module `sort_<t>`): sort, topk and kth.
pub(crate) fn sort_module(t: DType) -> String {
    sort_source(Some(t), "WANT_SORT", &[])
}

/// The dtype-independent tile sort and merge passes of long rows (module `sort_merge`).
pub(crate) fn merge_module() -> String {
    sort_source(None, "WANT_MERGE", &[])
}

/// searchsorted on dtype `t` (module `searchsorted_<t>`).
pub(crate) fn search_module(t: DType) -> String {
    sort_source(Some(t), "WANT_SEARCH", &[])
}

/// bincount of an integer input dtype `i` (module `bincount_<i>`).
pub(crate) fn bincount_module(i: DType) -> String {
    sort_source(None, "WANT_BINCOUNT", &[format!("typedef {} I;", ctype(i))])
}

/// histc of a float dtype `t` (module `histc_<t>`).
pub(crate) fn histc_module(t: DType) -> String {
    sort_source(None, "WANT_HISTC", &[format!("typedef {} T;", ctype(t))])
}

/// Every index and sort module's (name, source): for warmup and the compile test.
pub(crate) fn index_sort_modules() -> Vec<(String, String)> {
    use crate::backend::index::INDEX_DTYPES;
    let mut v = vec![("sort_merge".to_string(), merge_module())];
    let widths = [1usize, 2, 4, 8];
    for i in DType::ALL.into_iter().filter(|d| d.is_int()) {
        v.push((format!("index_check_{}", tag(i)), check_index_module(i)));
        v.push((format!("bincount_{}", tag(i)), bincount_module(i)));
    }
    for i in INDEX_DTYPES {
        for b in widths {
            v.push((format!("gather_{b}_{}", tag(i)), gather_module(b, i)));
        }
        // one assigning scatter per width
        for t in [DType::U8, DType::F16, DType::F32, DType::F64] {
            let op = ScatterOp::Assign;
            v.extend(scatter_module(op, t, i).map(|s| (scatter_module_name(op, t, i), s)));
        }
        for t in DType::ALL {
            for op in [
                ScatterOp::Add {
                    alpha: crate::Scalar::Int(1),
                },
                ScatterOp::Prod,
                ScatterOp::Amax,
                ScatterOp::Amin,
            ] {
                v.extend(scatter_module(op, t, i).map(|s| (scatter_module_name(op, t, i), s)));
            }
        }
    }
    for b in widths {
        v.push((format!("gated_copy_{b}"), gated_copy_module(b)));
        for c in [Compact::MaskedSelect(b), Compact::MaskedScatter(b)] {
            v.push((c.module_name(), c.module()));
        }
    }
    for t in DType::ALL {
        v.push((format!("extrema_{}", tag(t)), extrema_module(t)));
        for c in [
            Compact::CountNonzero(t),
            Compact::Nonzero(t),
            Compact::Unique(t),
        ] {
            v.push((c.module_name(), c.module()));
        }
        v.push((format!("sort_{}", tag(t)), sort_module(t)));
        v.push((format!("searchsorted_{}", tag(t)), search_module(t)));
        if t.is_float() {
            v.push((format!("histc_{}", tag(t)), histc_module(t)));
        }
    }
    v
}

/// Every elementwise, copy and cast module's (name, source): for warmup and the compile test.
pub(crate) fn all_modules() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = [1, 2, 4, 8]
        .iter()
        .map(|&b| (format!("copy_{b}"), copy_module(b)))
        .collect();
    for t in DType::ALL {
        let n = tag(t);
        for op in UnaryOp::ALL {
            v.extend(unary_module(op, t).map(|s| (format!("unary_{}_{n}", op.name()), s)));
        }
        for op in BinaryOp::ALL {
            v.extend(binary_module(op, t).map(|s| (format!("binary_{}_{n}", op.name()), s)));
        }
        for op in TernaryOp::ALL {
            v.extend(ternary_module(op, t).map(|s| (format!("ternary_{}_{n}", op.name()), s)));
        }
        if t.is_int() {
            v.push((format!("check_{n}"), any_bad_module(t)));
        }
        for d in DType::ALL {
            v.push((format!("cast_{n}_{}", tag(d)), cast_module(t, d)));
        }
    }
    v
}
