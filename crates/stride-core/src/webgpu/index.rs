//! Gather and scatter in WGSL — `index_select`, `embedding`, `take`, advanced indexing,
//! `gather`, `scatter*`, `index_add`/`_copy`/`_fill` and their gradients — with the CPU
//! backend's semantics bit for bit (`cpu/index.rs`).
//!
//! - **Index checks on the device, before the first write.** A check shader walks the index
//!   (values repeat along stride-0 dims, so those are visited once) and keeps the smallest
//!   bad logical position (`atomicMin`); the writing shader reads that verdict (its gate) and
//!   writes nothing when it is set. The host does not wait: the failure becomes the CPU's
//!   `IndexOutOfRange` for that value at the next read of the device (`deferred.rs`). i64
//!   indices are read as word pairs, so every i64 value is checked, none narrowed first.
//! - **Deterministic scatters.** Two positions reach one destination only if they differ
//!   along the scatter axis, so one invocation per fiber (every other coordinate) walks the
//!   axis in order: destinations combine their sources in logical order, rounding as the CPU
//!   does (once per step in the compute type, the alpha product rounded to the dtype first),
//!   and the last assignment wins. No float atomics.
//! - A fiber longer than llvmpipe's loop budget allows ([`MAX_WALK`] steps, both passes of a
//!   scatter that starts from the identity) stays a CPU round trip.

use super::deferred::{NONE, RECORD_MAIN};
use super::device::Gpu;
use super::elementwise::geo_over;
use super::launch::{
    bindings, check_count, declare, declare_extra, gpu_of, groups_for, launch_with, word, Binding,
    Extra, WORKGROUP,
};
use super::wgsl::{self, ctype};
use crate::backend::common::deferred::{describe, Failure};
use crate::backend::common::element_bits;
use crate::backend::common::float::Accum;
use crate::backend::index::{check_gather_operands, check_scatter_operands, IndexDim, ScatterOp};
use crate::backend::View;
use crate::{DType, Error, Result, Scalar};
use std::sync::Arc;

/// The most steps one invocation walks along a scatter's axis (passes × axis length ×
/// fibers per invocation), under llvmpipe's 65,535-iteration budget with room for the
/// address arithmetic.
pub(crate) const MAX_WALK: usize = 60_000;

/// Index helpers: a value as a word pair (low, high; i32 sign-extended), its range check
/// and its position after wrapping (PyTorch's negative indices).
const IX_FNS: &str = "
fn ix_ok(v: vec2<u32>, size: u32, wrap: bool) -> bool {
    if (v.y == 0u) { return v.x < size; }
    return wrap && v.y == 0xffffffffu && size > 0u && v.x >= 0u - size;
}
fn ix_norm(v: vec2<u32>, size: u32) -> u32 {
    return select(v.x, v.x + size, v.y != 0u);
}
";

/// `fn ix(e: u32) -> vec2<u32>`: index element `e` of binding `b{slot}` as a word pair.
fn ix_fn(slot: usize, dtype: DType) -> String {
    let body = match dtype {
        // the mutant narrows to i32 first, as a backend without 64-bit loads might
        DType::I64 if wgsl::mutant("index_narrow") => format!(
            "vec2<u32>(b{slot}[2u * e], select(0u, 0xffffffffu, bitcast<i32>(b{slot}[2u * e]) < 0))"
        ),
        DType::I64 => format!("vec2<u32>(b{slot}[2u * e], b{slot}[2u * e + 1u])"),
        DType::I32 => {
            format!("vec2<u32>(b{slot}[e], select(0u, 0xffffffffu, bitcast<i32>(b{slot}[e]) < 0))")
        }
        // divisors and exponents of the byte-sized integer ops (read-only: plain words)
        DType::I8 => format!(
            "vec2<u32>(bitcast<u32>(bitcast<i32>(((b{slot}[e >> 2u] >> ((e & 3u) * 8u)) & 0xffu) << 24u) >> 24u), select(0u, 0xffffffffu, ((b{slot}[e >> 2u] >> ((e & 3u) * 8u)) & 0x80u) != 0u))"
        ),
        DType::U8 => format!("vec2<u32>((b{slot}[e >> 2u] >> ((e & 3u) * 8u)) & 0xffu, 0u)"),
        _ => format!("vec2<u32>(b{slot}[e], 0u)"),
    };
    format!("fn ix(e: u32) -> vec2<u32> {{ return {body}; }}\n")
}

/// `[n, rank, shape…, offset, strides…]` over `l`'s shape in logical (row-major) order, with
/// stride-0 dims visited once (size 1) and neighbours merged where contiguous: position `p`
/// of this walk is the `p`-th distinct value in logical order.
fn logical_geo(op: &'static str, l: &crate::Layout) -> Result<Vec<u32>> {
    let mut sizes: Vec<usize> = vec![];
    let mut st: Vec<usize> = vec![];
    for (&n, &s) in l.shape().iter().zip(l.strides()) {
        let n = if s == 0 { n.min(1) } else { n };
        if n == 1 {
            continue;
        }
        match (sizes.last_mut(), st.last_mut()) {
            (Some(ln), Some(ls)) if *ls == s * n => {
                *ln *= n;
                *ls = s;
            }
            _ => {
                sizes.push(n);
                st.push(s);
            }
        }
    }
    let n = check_count(op, sizes.iter().product())?;
    let mut g = vec![n, sizes.len() as u32];
    for &s in &sizes {
        g.push(word(op, s)?);
    }
    g.push(word(op, l.offset())?);
    for &s in &st {
        g.push(word(op, s)?);
    }
    Ok(g)
}

/// A check's verdict for the writing shader (word 0: the first bad position, or [`NONE`]).
pub(crate) struct Gate(pub(crate) wgpu::Buffer);

/// Queues the check of every value of `index` against `at` and returns its gate (see the
/// module docs and `deferred.rs`). With sync checks on, reads the verdict now (a counted wait)
/// and returns the error of the first bad value instead.
fn check_indices(gpu: &Arc<Gpu>, at: IndexDim, index: &View, operands: String) -> Result<Gate> {
    let extra = [word(at.op, at.size)?, at.wrap as u32];
    let bad = "!ix_ok(v, geo[tail], geo[tail + 1u] != 0u)";
    check_values(
        gpu,
        at.op,
        index,
        bad,
        &extra,
        move |v| at.out_of_range(v),
        operands,
    )
}

/// Queues a check of every value of the integer operand `values` (each seen as a word pair
/// `v`, i32 and i8 sign-extended) and returns its gate: `bad` is a WGSL condition on `v`,
/// which may read the words `extra` at `geo[tail]`, `geo[tail + 1u]`, …; `cause` makes the
/// error of the first bad value in logical order, reported at the next read (`deferred.rs`),
/// or at once with sync checks on (a counted wait).
pub(crate) fn check_values(
    gpu: &Arc<Gpu>,
    op: &'static str,
    values: &View,
    bad: &str,
    extra: &[u32],
    cause: impl Fn(i64) -> Error + Send + 'static,
    operands: String,
) -> Result<Gate> {
    let gate = wgpu::util::DeviceExt::create_buffer_init(
        &gpu.device,
        &wgpu::util::BufferInitDescriptor {
            label: Some("device-side check gate"),
            contents: &[NONE, 0, 0, 0].map(u32::to_le_bytes).concat(),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        },
    );
    let mut g = logical_geo(op, values.layout)?;
    let n = g[0] as usize;
    g.extend_from_slice(extra);
    let wait = crate::sync_checks();
    // with sync checks the host reads the verdict itself, and the record is not touched
    let mut now = None;
    let id = if wait {
        now = Some(cause);
        0
    } else {
        gpu.deferred.register(Failure {
            cause: Box::new(cause),
            operands,
        })
    };
    g.push(id);
    let b = bindings(&[*values], 0);
    let head = declare(&b.kinds) + wgsl::AT_FN + &ix_fn(b.slot[0], values.dtype) + IX_FNS;
    let check = format!(
        "{head}{}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let n = geo[0];
    let tail = 3u + 2u * geo[1];
    for (var i = gid.x; i < n; i = i + nwg.x * 256u) {{
        let v = ix(at(0u, i));
        if ({bad}) {{
            atomicMin(&gate[0], i);
        }}
    }}
}}
",
        declare_extra(&b.kinds, 0, "gate", true, "array<atomic<u32>>")
    );
    let extras = [Extra {
        buffer: &gate,
        written: true,
    }];
    launch_with(gpu, op, check, &b, &g, &extras, groups_for(n))?;
    let record = format!(
        "{head}{}{}fn ix_at(p: u32) -> u32 {{ return at(0u, p); }}\n{RECORD_MAIN}",
        declare_extra(&b.kinds, 0, "gate", true, "array<u32>"),
        declare_extra(&b.kinds, 1, "rec", true, "array<u32>"),
    );
    let extras = [
        Extra {
            buffer: &gate,
            written: true,
        },
        Extra {
            buffer: gpu.deferred.record(),
            written: true,
        },
    ];
    launch_with(gpu, op, record, &b, &g, &extras, (1, 1, 1))?;
    if let Some(cause) = now {
        let w = super::transfer::read_raw(gpu, Some((&gate, 0, 12)), "device-side check")?;
        let word =
            |k: usize| u32::from_le_bytes([w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]]);
        if word(0) != NONE {
            return Err(cause(((word(2) as u64) << 32 | word(1) as u64) as i64));
        }
    }
    Ok(Gate(gate))
}

/// A gated shader's first line: nothing to do when the check failed (the mutant
/// `gate_ignored` writes anyway).
pub(crate) fn gate_check() -> String {
    if wgsl::mutant("gate_ignored") {
        String::new()
    } else {
        format!("if (gate[0] != {NONE}u) {{ return; }}")
    }
}

/// The loads and stores of element type `dtype` for operand `k` in binding `slot`: raw bits
/// (`raw{k}`, or the word pair `ld{k}` for i64) and `st{k}` for the output.
fn raw_io(k: usize, slot: usize, kinds: &[Binding], dtype: DType, load: bool) -> String {
    let atomic = kinds[slot].atomic;
    match (dtype, load) {
        (DType::I64, true) => wgsl::load64_fn(k, slot, atomic),
        (DType::I64, false) => wgsl::store64_fn(k, slot),
        (_, true) => wgsl::raw_load_fn(k, slot, atomic, dtype),
        (_, false) => wgsl::store_fn(k, slot, dtype),
    }
}

pub(crate) fn gather(src: View, index: View, at: IndexDim, dst: View) -> Result<()> {
    check_gather_operands(&src, &index, &at, &dst)?;
    let op = at.op;
    let gpu = gpu_of(op, &dst)?;
    let mut g = super::elementwise::geo(op, [dst, src, index])?;
    let n = g[0] as usize;
    if n == 0 {
        return Ok(());
    }
    let operands = describe(&[("index", &index), ("source", &src), ("destination", &dst)]);
    let gate = check_indices(&gpu, at, &index, operands)?;
    let gate_check = gate_check();
    let scalars = g.len();
    g.push(word(op, at.size)?);
    g.push(word(op, at.stride)?);
    let views = [dst, src, index];
    let b = bindings(&views, 1);
    let copy = if dst.dtype == DType::I64 {
        "ld1"
    } else {
        "raw1"
    };
    let mut s = declare(&b.kinds);
    s += &declare_extra(&b.kinds, 0, "gate", false, "array<u32>");
    s += wgsl::AT_FN;
    s += &raw_io(0, b.slot[0], &b.kinds, dst.dtype, false);
    s += &raw_io(1, b.slot[1], &b.kinds, src.dtype, true);
    s += &ix_fn(b.slot[2], index.dtype);
    s += IX_FNS;
    s += &format!(
        "
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    {gate_check}
    let n = geo[0];
    let size = geo[{scalars}u];
    let stride = geo[{}u];
    for (var i = gid.x; i < n; i = i + nwg.x * 256u) {{
        let j = ix_norm(ix(at(2u, i)), size);
        st0(at(0u, i), {copy}(at(1u, i) + j * stride));
    }}
}}
",
        scalars + 1,
    );
    let extras = [Extra {
        buffer: &gate.0,
        written: false,
    }];
    launch_with(&gpu, op, s, &b, &g, &extras, groups_for(n))
}

/// The scatter's walk: fibers (every coordinate but the axis) and steps along the axis.
struct Walk {
    /// Fibers (invocations' work items) and the axis length.
    fibers: usize,
    len: usize,
    /// Which dim of the index's shape is the axis.
    axis: usize,
}

fn walk_of(index: &View, at: &IndexDim) -> Walk {
    let shape = index.layout.shape();
    let axis = at.dim.min(shape.len().saturating_sub(1));
    let len = if shape.is_empty() { 1 } else { shape[axis] };
    let total: usize = shape.iter().product();
    Walk {
        fibers: total.checked_div(len).unwrap_or(0),
        len,
        axis,
    }
}

/// Whether the shader takes this scatter: every invocation's walk fits the loop budget
/// (else the CPU round trip).
pub(crate) fn scatter_native(
    index: &View,
    at: &IndexDim,
    include_self: bool,
    op: ScatterOp,
) -> bool {
    if wgsl::mutant("scatter_long_walk") {
        return true;
    }
    let w = walk_of(index, at);
    let passes = if include_self || op == ScatterOp::Assign {
        1
    } else {
        2
    };
    let per_invocation = w
        .fibers
        .div_ceil(groups_for(w.fibers).0.max(1) as usize * WORKGROUP as usize);
    passes * w.len * per_invocation.max(1) <= MAX_WALK
}

/// The bits of the identity a reducing scatter starts from without `include_self`: the CPU's
/// (`Accum::lowest`/`highest`, 0, 1) as raw element bits (i64 as two words); 0 where unused.
fn identity_bits(op: ScatterOp, dtype: DType) -> u64 {
    fn of<T: Accum>(op: ScatterOp) -> u64 {
        let v = match op {
            ScatterOp::Prod => T::from_i64(1),
            ScatterOp::Amax => T::lowest(),
            ScatterOp::Amin => T::highest(),
            ScatterOp::Add { .. } | ScatterOp::Assign => T::from_i64(0),
        };
        let mut b = [0u8; 8];
        // SAFETY: T is a plain element type of at most 8 bytes
        unsafe {
            std::ptr::copy_nonoverlapping(
                &v as *const T as *const u8,
                b.as_mut_ptr(),
                std::mem::size_of::<T>(),
            )
        };
        u64::from_le_bytes(b)
    }
    match dtype {
        DType::F32 => of::<f32>(op),
        DType::F16 => of::<half::f16>(op),
        DType::BF16 => of::<half::bf16>(op),
        DType::I64 => of::<i64>(op),
        DType::I32 => of::<i32>(op),
        DType::U32 => of::<u32>(op),
        DType::I8 => of::<i8>(op),
        DType::U8 => of::<u8>(op),
        // bool scatters only assign; no f64 on wgpu
        DType::Bool | DType::F64 => 0,
    }
}

/// The alpha of `index_add` in the compute type's bits, as the CPU rounds it (to the dtype
/// first): f32 bits for floats, sign-extended words for integers.
fn alpha_bits(alpha: Scalar, dtype: DType) -> u64 {
    let b = element_bits(alpha, dtype);
    match dtype {
        DType::F16 => half::f16::from_bits(b as u16).to_f32().to_bits() as u64,
        DType::BF16 => half::bf16::from_bits(b as u16).to_f32().to_bits() as u64,
        DType::I8 => (b as u8 as i8 as i32) as u32 as u64,
        _ => b,
    }
}

/// The WGSL that combines `x` (the destination's value) with `y` (the source's) into what
/// `st0` stores, for `op` over `dtype` (`alpha`: whether `y` is scaled by `a` first).
fn combine(op: ScatterOp, dtype: DType, alpha: bool) -> String {
    if dtype == DType::I64 {
        let y = if alpha { "i64_mul(y, a)" } else { "y" };
        return match op {
            ScatterOp::Assign => "y".into(),
            ScatterOp::Add { .. } => format!("i64_add(x, {y})"),
            ScatterOp::Prod => "i64_mul(x, y)".into(),
            ScatterOp::Amax => "select(x, y, i64_lt(x, y))".into(),
            ScatterOp::Amin => "select(x, y, i64_lt(y, x))".into(),
        };
    }
    let float = ctype(dtype) == "f32";
    let value = match op {
        ScatterOp::Assign => unreachable!("assignments copy raw bits"),
        ScatterOp::Add { .. } if float => {
            // the CPU rounds alpha·src to the dtype before adding
            let y = match (alpha, dtype) {
                (false, _) => "y".to_string(),
                (true, DType::F32) => "pl_mul(y, a)".to_string(),
                (true, DType::F16) => "f16_to_f32(f32_to_f16(pl_mul(y, a)))".to_string(),
                (true, _) => "bf16_to_f32(f32_to_bf16(pl_mul(y, a)))".to_string(),
            };
            format!("(x + {y})")
        }
        ScatterOp::Add { .. } => (if alpha { "(x + y * a)" } else { "(x + y)" }).to_string(),
        ScatterOp::Prod if float => "pl_mul(x, y)".into(),
        ScatterOp::Prod => "(x * y)".into(),
        ScatterOp::Amax if float => "max_nan_f32(x, y)".into(),
        ScatterOp::Amin if float => "min_nan_f32(x, y)".into(),
        ScatterOp::Amax => "max(x, y)".into(),
        ScatterOp::Amin => "min(x, y)".into(),
    };
    wgsl::to_raw(dtype, &value)
}

pub(crate) fn scatter(
    dst: View,
    index: View,
    at: IndexDim,
    src: View,
    op: ScatterOp,
    include_self: bool,
) -> Result<()> {
    check_scatter_operands(&dst, &index, &at, &src)?;
    let t = dst.dtype;
    if t == DType::Bool && op != ScatterOp::Assign {
        return Err(Error::UnsupportedDType {
            op: at.op,
            dtype: DType::Bool,
            hint: "; reducing scatters take numeric tensors (convert with to_dtype)".into(),
        });
    }
    let name = at.op;
    let gpu = gpu_of(name, &dst)?;
    let w = walk_of(&index, &at);
    if w.fibers == 0 {
        return Ok(());
    }
    let shape = index.layout.shape();
    let mut outer = shape.to_vec();
    if !outer.is_empty() {
        outer[w.axis] = 1;
    }
    let (dl, il, sl) = (dst.layout, index.layout, src.layout);
    let mut g = geo_over(
        name,
        &outer,
        [dl.strides(), il.strides(), sl.strides()],
        [dl.offset(), il.offset(), sl.offset()],
    )?;
    let axis_stride = |l: &crate::Layout| l.strides().get(w.axis).copied().unwrap_or(0);
    let operands = describe(&[("index", &index), ("source", &src), ("destination", &dst)]);
    let gate = check_indices(&gpu, at, &index, operands)?;
    let gate_check = gate_check();
    let s0 = g.len();
    g.push(word(name, w.len)?);
    g.push(word(name, axis_stride(il))?);
    g.push(word(name, axis_stride(sl))?);
    g.push(word(name, at.stride)?);
    g.push(word(name, at.size)?);
    let alpha = match op {
        ScatterOp::Add { alpha } if alpha.to_f64() != 1.0 => Some(alpha_bits(alpha, t)),
        _ => None,
    };
    let a = alpha.unwrap_or(0);
    g.extend([a as u32, (a >> 32) as u32]);
    let id = identity_bits(op, t);
    g.extend([id as u32, (id >> 32) as u32]);
    let views = [dst, index, src];
    let b = bindings(&views, 1);
    let i64s = t == DType::I64;
    let (ds, ss) = (b.slot[0], b.slot[2]);
    let mut s = declare(&b.kinds);
    s += &declare_extra(&b.kinds, 0, "gate", false, "array<u32>");
    s += wgsl::AT_FN;
    s += &raw_io(0, ds, &b.kinds, t, false);
    s += &ix_fn(b.slot[1], index.dtype);
    s += IX_FNS;
    let (fill, step) = if op == ScatterOp::Assign {
        let copy = if i64s { "ld2" } else { "raw2" };
        s += &raw_io(2, ss, &b.kinds, t, true);
        (String::new(), format!("st0(d, {copy}(os + k * sd));"))
    } else {
        if i64s {
            s += &wgsl::load64_fn(0, ds, b.kinds[ds].atomic);
            s += &wgsl::load64_fn(2, ss, b.kinds[ss].atomic);
        } else {
            s += &wgsl::load_fn(0, ds, b.kinds[ds].atomic, t);
            s += &wgsl::load_fn(2, ss, b.kinds[ss].atomic, t);
        }
        let a = match (t, alpha.is_some()) {
            (_, false) => String::new(),
            (DType::I64, true) => format!("let a = vec2<u32>(geo[{}u], geo[{}u]);", s0 + 5, s0 + 6),
            (_, true) => {
                let conv = match ctype(t) {
                    "f32" => "bitcast<f32>",
                    "i32" => "bitcast<i32>",
                    _ => "",
                };
                format!("let a = {conv}(geo[{}u]);", s0 + 5)
            }
        };
        let init = if i64s {
            format!("vec2<u32>(geo[{}u], geo[{}u])", s0 + 7, s0 + 8)
        } else {
            format!("geo[{}u]", s0 + 7)
        };
        let fill = if include_self {
            String::new()
        } else {
            format!(
                "for (var k = 0u; k < n; k = k + 1u) {{
            st0(od + ix_norm(ix(ox + k * xd), size) * stride, {init});
        }}"
            )
        };
        let step = format!(
            "{a} let x = ld0(d); let y = ld2(os + k * sd); st0(d, {});",
            combine(op, t, alpha.is_some())
        );
        (fill, step)
    };
    // the mutant walks the axis backwards (the first assignment would win)
    let order = if wgsl::mutant("scatter_reverse") {
        "n - 1u - k0"
    } else {
        "k0"
    };
    s += &format!(
        "
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    {gate_check}
    let m = geo[0];
    let n = geo[{s0}u];
    let xd = geo[{}u];
    let sd = geo[{}u];
    let stride = geo[{}u];
    let size = geo[{}u];
    for (var i = gid.x; i < m; i = i + nwg.x * 256u) {{
        let od = at(0u, i);
        let ox = at(1u, i);
        let os = at(2u, i);
        {fill}
        for (var k0 = 0u; k0 < n; k0 = k0 + 1u) {{
            let k = {order};
            let d = od + ix_norm(ix(ox + k * xd), size) * stride;
            {step}
        }}
    }}
}}
",
        s0 + 1,
        s0 + 2,
        s0 + 3,
        s0 + 4
    );
    let extras = [Extra {
        buffer: &gate.0,
        written: false,
    }];
    launch_with(&gpu, name, s, &b, &g, &extras, groups_for(w.fibers))
}
