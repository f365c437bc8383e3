//! Inclusive scans (cumsum, cumprod) along one dim in WGSL: one invocation per line, each
//! line folded in order as on the CPU (`cpu/cumulative.rs`), so f16/bf16 (accumulated in f32,
//! each output rounded once) are the CPU's bits; f32 accumulates in double-f32 for the CPU's
//! f64 (`prelude.wgsl`), and integers and bool give i64 as word pairs (wrapping).
//!
//! A line longer than [`MAX_LINE`] would pass llvmpipe's loop budget (an invocation's loops
//! stop after 65,535 iterations in all): [`native`] sends it to the CPU round trip instead.

use super::launch::{bindings, check_count, declare, gpu_of, groups_for, launch, lines, word};
use super::wgsl;
use crate::backend::{CumulativeOp, View};
use crate::{DType, Result};

/// The longest line one invocation scans.
pub(crate) const MAX_LINE: usize = 60_000;

/// Whether the shader takes this scan (else the CPU round trip).
pub(crate) fn native(src: View, dim: usize) -> bool {
    let shape = src.layout.shape();
    let len = shape.get(dim).copied().unwrap_or(1);
    src.dtype != DType::F64 && len <= MAX_LINE
}

pub(crate) fn cumulative(op: CumulativeOp, src: View, dim: usize, dst: View) -> Result<()> {
    let name = op.name();
    let gpu = gpu_of(name, &dst)?;
    let l = lines(name, [src.layout, dst.layout], dim)?;
    let n_lines = check_count(name, l.count)?;
    let len = l.len;
    check_count(name, len)?;
    if n_lines == 0 || len == 0 {
        return Ok(());
    }
    // geo: [n_lines, len, step_in, step_out, kept rank, kept shape…, (offset, strides…) × 2]
    let mut g = vec![
        n_lines,
        len as u32,
        word(name, l.steps[0])?,
        word(name, l.steps[1])?,
    ];
    g.extend(l.words);
    let t = src.dtype;
    let (acc, init, stepf, out) = match (t, op) {
        (DType::F32, CumulativeOp::Sum) => (
            "vec2<f32>",
            "vec2<f32>(0.0, 0.0)",
            "df_add_f(a, x)",
            "bitcast<u32>(a.x)".to_string(),
        ),
        (DType::F32, CumulativeOp::Prod) => (
            "vec2<f32>",
            "vec2<f32>(1.0, 0.0)",
            "df_mul_f(a, x)",
            "bitcast<u32>(a.x)".to_string(),
        ),
        (DType::F16 | DType::BF16, CumulativeOp::Sum) => {
            ("f32", "0.0", "pl_opaque(a + x)", wgsl::to_raw(t, "a"))
        }
        (DType::F16 | DType::BF16, CumulativeOp::Prod) => {
            ("f32", "1.0", "pl_mul(a, x)", wgsl::to_raw(t, "a"))
        }
        (_, op) => {
            let widen = match t {
                DType::I64 => "x",
                DType::Bool => "vec2<u32>(select(0u, 1u, x), 0u)",
                DType::I32 | DType::I8 => "i64_from_i32(x)",
                _ => "i64_from_u32(x)",
            };
            let (init, f) = match op {
                CumulativeOp::Sum => ("vec2<u32>(0u, 0u)", "i64_add"),
                CumulativeOp::Prod => ("vec2<u32>(1u, 0u)", "i64_mul"),
            };
            return run(
                &gpu,
                name,
                src,
                dst,
                &g,
                "vec2<u32>",
                init,
                &format!("{f}(a, {widen})"),
                "a",
            );
        }
    };
    run(&gpu, name, src, dst, &g, acc, init, stepf, &out)
}

/// Launches the scan: `acc` the accumulator's WGSL type, `step` its update from `a` and the
/// loaded `x`, `out` the stored value (raw bits, or a word pair for i64 outputs).
#[allow(clippy::too_many_arguments)]
fn run(
    gpu: &super::device::Gpu,
    name: &'static str,
    src: View,
    dst: View,
    g: &[u32],
    acc: &str,
    init: &str,
    step: &str,
    out: &str,
) -> Result<()> {
    // the mutant stores through the input's step (wrong wherever the two layouts differ)
    let out_step = if wgsl::mutant("scan_out_step") { 2 } else { 3 };
    let views = [dst, src];
    let b = bindings(&views, 1);
    let (so, si) = (b.slot[0], b.slot[1]);
    let mut s = declare(&b.kinds);
    s += &if dst.dtype == DType::I64 {
        wgsl::store64_fn(0, so)
    } else {
        wgsl::store_fn(0, so, dst.dtype)
    };
    s += &if src.dtype == DType::I64 {
        wgsl::load64_fn(1, si, b.kinds[si].atomic)
    } else {
        wgsl::load_fn(1, si, b.kinds[si].atomic, src.dtype)
    };
    // operand 0 is the input, 1 the output
    s += &wgsl::line_fn(4);
    s += &format!(
        "
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let n_lines = geo[0];
    let len = geo[1];
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < n_lines; i = i + stride) {{
        let si = line(0u, i);
        let so = line(1u, i);
        var a: {acc} = {init};
        for (var t = 0u; t < len; t = t + 1u) {{
            let x = ld1(si + t * geo[2]);
            a = {step};
            st0(so + t * geo[{out_step}u], {out});
        }}
    }}
}}
"
    );
    launch(gpu, name, s, &b, g, groups_for(g[0] as usize))
}
