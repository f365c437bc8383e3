//! Sorting along one dim in WGSL (`sort`, `argsort`, `msort`, and `topk`, which the contract
//! builds from a sort): the CPU's order exactly (`cpu/sort.rs`).
//!
//! Each element becomes the CPU's unsigned key (stride's total order: NaN above +∞ and all
//! NaNs equal, `-0.0 == 0.0`; inverted for a descending sort) packed with its position in
//! the row, so every (key, position) pair is distinct and any correct sort of them is the
//! stable order. One workgroup sorts one row with a bitonic network over the row padded to a
//! power of two, in a scratch buffer (keys, positions); then the values are copied from the
//! source at the sorted positions, and the positions written as i64 indices.
//!
//! llvmpipe's loop budget (65,535 iterations an invocation) bounds the row: a network over
//! 2^17 elements is 153 stages of 256 compare-exchanges per invocation; longer rows, and
//! sorts whose scratch would pass the storage binding limit, are CPU round trips.

use super::buffer::alloc_storage;
use super::launch::{bindings, declare, gpu_of, launch, lines, word};
use super::wgsl;
use crate::backend::View;
use crate::{DType, Layout, Result};

/// Invocations of the workgroup that sorts one row.
const GROUP: usize = 256;

/// The longest row sorted in a shader (a power of two).
pub(crate) const MAX_ROW: usize = 1 << 17;

/// Words of one key.
fn key_words(t: DType) -> usize {
    if t == DType::I64 {
        2
    } else {
        1
    }
}

/// The scratch words per row (keys and positions over the padded row).
fn scratch_per_row(t: DType, n: usize) -> usize {
    n.next_power_of_two() * (key_words(t) + 1)
}

/// Whether the shader takes this sort (else the CPU round trip).
pub(crate) fn native(src: View, dim: usize, values: View, indices: View, max_binding: u64) -> bool {
    let shape = src.layout.shape();
    let n = shape.get(dim).copied().unwrap_or(1);
    let rows: usize = shape
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != dim)
        .map(|(_, &s)| s)
        .product();
    let scratch_bytes = (rows as u128) * scratch_per_row(src.dtype, n) as u128 * 4;
    src.dtype != DType::F64
        && n <= MAX_ROW
        && rows < (1 << 31)
        && scratch_bytes <= max_binding as u128
        && !values.storage.same(src.storage)
        && !indices.storage.same(src.storage)
}

/// The WGSL of `fn key(x: u32) -> u32` (or `vec2<u32>` for i64) for raw element bits: the
/// CPU's `SortKey`, inverted when `descending` (within the key's width).
fn key_fn(t: DType, descending: bool) -> String {
    let (body, mask) = match t {
        DType::F32 => (float_key(32), "0xffffffffu"),
        DType::F16 | DType::BF16 => (
            float_key(16).replace(
                "NAN_TEST",
                if t == DType::F16 {
                    "(x & 0x7fffu) > 0x7c00u"
                } else {
                    "(x & 0x7fffu) > 0x7f80u"
                },
            ),
            "0xffffu",
        ),
        DType::I32 => ("return x ^ 0x80000000u;".to_string(), "0xffffffffu"),
        DType::U32 => ("return x;".to_string(), "0xffffffffu"),
        DType::I8 => ("return x ^ 0x80u;".to_string(), "0xffu"),
        DType::U8 | DType::Bool => ("return x;".to_string(), "0xffu"),
        DType::I64 => {
            let inv = if descending { " ^ 0xffffffffu" } else { "" };
            return format!(
                "fn key(x: vec2<u32>) -> vec2<u32> {{ return vec2<u32>(x.x{inv}, (x.y ^ 0x80000000u){inv}); }}\n"
            );
        }
        DType::F64 => unreachable!("no f64 on wgpu"),
    };
    let body = body.replace("NAN_TEST", "(x & 0x7fffffffu) > 0x7f800000u");
    let inv = if descending {
        format!(" ^ {mask}")
    } else {
        String::new()
    };
    format!(
        "fn key0(x: u32) -> u32 {{ {body} }}\nfn key(x: u32) -> u32 {{ return key0(x){inv}; }}\n"
    )
}

/// The body of a float key of `bits` bits (`NAN_TEST` stands for the dtype's NaN test).
fn float_key(bits: u32) -> String {
    let (max, sign) = if bits == 32 {
        ("0xffffffffu", "0x80000000u")
    } else {
        ("0xffffu", "0x8000u")
    };
    format!(
        "if (NAN_TEST) {{ return {max}; }}
    var b = x;
    if (b == {sign}) {{ b = 0u; }}
    if ((b & {sign}) != 0u) {{ return (~b) & {max}; }}
    return b | {sign};"
    )
}

pub(crate) fn sort(
    src: View,
    dim: usize,
    descending: bool,
    values: View,
    indices: View,
) -> Result<()> {
    let name = "sort";
    let gpu = gpu_of(name, &values)?;
    let l = lines(name, [src.layout, values.layout, indices.layout], dim)?;
    let (rows, n) = (l.count, l.len);
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let t = src.dtype;
    let p = n.next_power_of_two();
    let kw = key_words(t);
    let words = rows * scratch_per_row(t, n);
    let scratch = alloc_storage(&gpu, DType::U32, words, false)?;
    let scratch_layout = Layout::contiguous(&[words]);
    let scratch_view = View {
        storage: &scratch,
        layout: &scratch_layout,
        dtype: DType::U32,
    };
    // geo: [rows, n, p, step_src, step_values, step_indices, kept rank, kept shape…,
    // (offset, strides…) × 3]
    let mut g = vec![
        word(name, rows)?,
        word(name, n)?,
        word(name, p)?,
        word(name, l.steps[0])?,
        word(name, l.steps[1])?,
        word(name, l.steps[2])?,
    ];
    g.extend(l.words);
    let views = [values, indices, scratch_view, src];
    let b = bindings(&views, 3);
    let (sv, si, ss, sx) = (b.slot[0], b.slot[1], b.slot[2], b.slot[3]);
    let i64s = t == DType::I64;
    let mut s = declare(&b.kinds);
    s += &wgsl::line_fn(6);
    s += &if i64s {
        wgsl::load64_fn(3, sx, b.kinds[sx].atomic) + &wgsl::store64_fn(0, sv)
    } else {
        wgsl::raw_load_fn(3, sx, b.kinds[sx].atomic, t) + &wgsl::store_fn(0, sv, t)
    };
    let load = if i64s { "ld3" } else { "raw3" };
    s += &wgsl::store64_fn(1, si);
    s += &key_fn(t, descending);
    // keys: `kw` words each, at the row's scratch base; positions after them
    let (kty, kmax, kload, kstore, less, eq) = if kw == 2 {
        (
            "vec2<u32>",
            "vec2<u32>(0xffffffffu, 0xffffffffu)",
            format!("vec2<u32>(b{ss}[kb + 2u * j], b{ss}[kb + 2u * j + 1u])"),
            format!("b{ss}[kb + 2u * j] = v.x; b{ss}[kb + 2u * j + 1u] = v.y;"),
            "a.y < c.y || (a.y == c.y && a.x < c.x)",
            "all(a == c)",
        )
    } else {
        (
            "u32",
            "0xffffffffu",
            format!("b{ss}[kb + j]"),
            format!("b{ss}[kb + j] = v;"),
            "a < c",
            "a == c",
        )
    };
    s += &format!(
        "
fn kget(kb: u32, j: u32) -> {kty} {{ return {kload}; }}
fn kset(kb: u32, j: u32, v: {kty}) {{ {kstore} }}
fn kless(a: {kty}, c: {kty}) -> bool {{ return {less}; }}
fn keq(a: {kty}, c: {kty}) -> bool {{ return {eq}; }}

var<workgroup> shared_p: u32;

@compute @workgroup_size({GROUP})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
    if (lid == 0u) {{ shared_p = geo[2]; }}
    // a uniform row length, so that every invocation meets every barrier
    let p = workgroupUniformLoad(&shared_p);
    let row = wid.x + wid.y * nwg.x;
    let live = row < geo[0];
    let r = min(row, geo[0] - 1u);
    let n = geo[1];
    let kb = r * p * {words}u;
    let pb = kb + p * {kw}u;
    let xs = line(0u, r);
    for (var j = lid; j < p; j = j + {GROUP}u) {{
        if (live) {{
            if (j < n) {{
                kset(kb, j, key({load}(xs + j * geo[3])));
                b{ss}[pb + j] = j;
            }} else {{
                kset(kb, j, {kmax});
                b{ss}[pb + j] = 0xffffffffu;
            }}
        }}
    }}
    storageBarrier();
    for (var k = 2u; k <= p; k = k << 1u) {{
        for (var h = k >> 1u; h > 0u; h = h >> 1u) {{
            for (var t = lid; t < (p >> 1u); t = t + {GROUP}u) {{
                let i = ((t / h) * 2u * h) + (t % h);
                let l = i + h;
                if (live) {{
                    let ki = kget(kb, i);
                    let kl = kget(kb, l);
                    let pi = b{ss}[pb + i];
                    let pl = b{ss}[pb + l];
                    let l_first = kless(kl, ki){tie};
                    let up = (i & k) == 0u;
                    if (l_first == up) {{
                        kset(kb, i, kl);
                        kset(kb, l, ki);
                        b{ss}[pb + i] = pl;
                        b{ss}[pb + l] = pi;
                    }}
                }}
            }}
            storageBarrier();
        }}
    }}
    if (!live) {{ return; }}
    let vs = line(1u, r);
    let is = line(2u, r);
    for (var j = lid; j < n; j = j + {GROUP}u) {{
        let q = b{ss}[pb + j];
        st0(vs + j * geo[4], {load}(xs + q * geo[3]));
        st1(is + j * geo[5], vec2<u32>(q, 0u));
    }}
}}
",
        words = kw + 1,
        // the mutant drops the positions from the comparison (ties in any order)
        tie = if wgsl::mutant("sort_ties_unstable") {
            ""
        } else {
            " || (keq(kl, ki) && pl < pi)"
        },
    );
    // one workgroup per row, in a grid of at most 65,535 × 65,535
    let gx = rows.min(65_535);
    let gy = rows.div_ceil(gx);
    launch(&gpu, name, s, &b, &g, (gx as u32, gy as u32, 1))
}
