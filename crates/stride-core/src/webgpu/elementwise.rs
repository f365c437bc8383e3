//! Copy/cast, fill, unary, binary and ternary ops: one generated shader per (op, dtypes,
//! binding pattern), walking every operand through its layout.

use super::launch::{
    bindings, check_count, declare, declare_extra, gpu_of, groups_for, launch_with, Extra,
};
use super::wgsl::{self, ctype};
use crate::backend::common::deferred::describe;
use crate::backend::common::plan::Plan;
use crate::backend::op_table::Out;
use crate::backend::{BinaryOp, TernaryOp, UnaryOp, View};
use crate::{DType, Error, Result, Scalar};

/// `geo` for N operands over the output's shape: `[n, rank, shape…, (offset, strides…)×N]`.
pub(crate) fn geo<const N: usize>(op: &'static str, views: [View; N]) -> Result<Vec<u32>> {
    geo_over::<N>(
        op,
        views[0].layout.shape(),
        std::array::from_fn(|k| views[k].layout.strides()),
        std::array::from_fn(|k| views[k].layout.offset()),
    )
}

/// [`geo`] of N operands with these strides and offsets over `shape`.
pub(crate) fn geo_over<const N: usize>(
    op: &'static str,
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
) -> Result<Vec<u32>> {
    let plan = Plan::<N>::new(shape, strides, offsets);
    let n = check_count(op, plan.numel())?;
    let (shape, strides, offsets) = plan.parts();
    let word = |x: isize| -> Result<u32> {
        u32::try_from(x).map_err(|_| {
            Error::invalid(
                op,
                format!(
                    "an offset or stride of {x} elements is past the wgpu backend's 32-bit indices"
                ),
            )
        })
    };
    let mut g = vec![n, shape.len() as u32];
    for &s in shape {
        g.push(word(s as isize)?);
    }
    for k in 0..N {
        g.push(word(offsets[k])?);
        for &s in &strides[k] {
            g.push(word(s)?);
        }
    }
    Ok(g)
}

/// Runs the loop body `body` (which may use `ld{k}`, `raw{k}`, `st0` and `at`) over the
/// operands, operand 0 the output; `scalars` are appended to `geo` (read as
/// `geo[geo_len + j]` through `scalar_decl`).
fn run<const N: usize>(
    op: &'static str,
    views: [View; N],
    loads: &[bool],
    raws: &[bool],
    scalar_decl: impl Fn(usize) -> String,
    scalars: &[u32],
    body: &str,
) -> Result<()> {
    run_gated(op, views, loads, raws, scalar_decl, scalars, body, None)
}

/// [`run`], writing nothing when the device-side check whose verdict is `gate` failed.
#[allow(clippy::too_many_arguments)]
fn run_gated<const N: usize>(
    op: &'static str,
    views: [View; N],
    loads: &[bool],
    raws: &[bool],
    scalar_decl: impl Fn(usize) -> String,
    scalars: &[u32],
    body: &str,
    gate: Option<&wgpu::Buffer>,
) -> Result<()> {
    let gpu = gpu_of(op, &views[0])?;
    let mut g = geo(op, views)?;
    let n = g[0] as usize;
    if n == 0 {
        return Ok(());
    }
    let scalar_at = g.len();
    g.extend_from_slice(scalars);
    let b = bindings(&views, 1);
    let mut src = String::new();
    src += &declare(&b.kinds);
    src += wgsl::AT_FN;
    for k in 0..N {
        let slot = b.slot[k];
        let atomic = b.kinds[slot].atomic;
        let i64s = views[k].dtype == DType::I64;
        if k == 0 {
            src += &if i64s {
                wgsl::store64_fn(0, slot)
            } else {
                wgsl::store_fn(0, slot, views[0].dtype)
            };
        }
        if loads.get(k).copied().unwrap_or(false) {
            src += &wgsl::load_fn(k, slot, atomic, views[k].dtype);
        }
        if raws.get(k).copied().unwrap_or(false) {
            // an i64's raw bits are its word pair, `ld{k}`
            src += &if i64s {
                wgsl::load64_fn(k, slot, atomic)
            } else {
                wgsl::raw_load_fn(k, slot, atomic, views[k].dtype)
            };
        }
    }
    if gate.is_some() {
        src += &declare_extra(&b.kinds, 0, "gate", false, "array<u32>");
    }
    src += wgsl::LOOP_HEAD;
    if gate.is_some() {
        src += &format!("        {}\n", super::index::gate_check());
    }
    src += &scalar_decl(scalar_at);
    src += body;
    src += "\n    }\n}\n";
    let extras: Vec<Extra> = gate
        .map(|buffer| Extra {
            buffer,
            written: false,
        })
        .into_iter()
        .collect();
    launch_with(&gpu, op, src, &b, &g, &extras, groups_for(n))
}

fn no_i64(views: &[View]) -> bool {
    views
        .iter()
        .all(|v| !matches!(v.dtype, DType::I64 | DType::F64))
}

/// Whether the native kernels take these operands (else the CPU round trip does).
pub(crate) fn native(views: &[View]) -> bool {
    no_i64(views)
}

/// Whether the native copy takes these operands: same-dtype i64 copies move word pairs,
/// casts from or to i64 are round trips.
pub(crate) fn native_copy(src: View, dst: View) -> bool {
    native(&[src, dst]) || (src.dtype == DType::I64 && dst.dtype == DType::I64)
}

/// Whether the native fill takes this output (i64 included).
pub(crate) fn native_fill(dst: View) -> bool {
    dst.dtype != DType::F64
}

pub(crate) fn copy_cast(src: View, dst: View) -> Result<()> {
    let body = if src.dtype == DType::I64 {
        "        st0(at(0u, i), ld1(at(1u, i)));".to_string()
    } else if src.dtype == dst.dtype {
        "        st0(at(0u, i), raw1(at(1u, i)));".to_string()
    } else {
        format!(
            "        st0(at(0u, i), {});",
            wgsl::cast_raw(src.dtype, dst.dtype, "ld1(at(1u, i))")
        )
    };
    let same = src.dtype == dst.dtype;
    run(
        "copy",
        [dst, src],
        &[false, !same],
        &[false, same],
        |_| String::new(),
        &[],
        &body,
    )
}

pub(crate) fn fill(dst: View, value: Scalar) -> Result<()> {
    // the CPU's conversion, made on the host
    let bits = crate::backend::common::element_bits(value, dst.dtype);
    let i64s = dst.dtype == DType::I64;
    run(
        "fill",
        [dst],
        &[],
        &[],
        |at| {
            if i64s {
                format!(
                    "        let bits = vec2<u32>(geo[{at}u], geo[{}u]);\n",
                    at + 1
                )
            } else {
                format!("        let bits = geo[{at}u];\n")
            }
        },
        &[bits as u32, (bits >> 32) as u32],
        "        st0(at(0u, i), bits);",
    )
}

fn no_kernel(op: &'static str, d: DType) -> Error {
    Error::UnsupportedDType {
        op,
        dtype: d,
        hint: String::new(),
    }
}

pub(crate) fn unary(op: UnaryOp, src: View, dst: View) -> Result<()> {
    let k = op
        .kernel(src.dtype)
        .ok_or_else(|| no_kernel(op.name(), src.dtype))?;
    let e = wgsl::translate(k.c, ctype(src.dtype));
    let body = format!(
        "        let x = ld1(at(1u, i));\n        st0(at(0u, i), {});",
        wgsl::to_raw(dst.dtype, &e)
    );
    run(
        op.name(),
        [dst, src],
        &[false, true],
        &[],
        |_| String::new(),
        &[],
        &body,
    )
}

/// Whether a binary op must check its second operand first: integer division and
/// remainder by zero, integers to negative powers (errors that write nothing, as on the CPU).
pub(crate) fn checked(op: BinaryOp, t: DType) -> bool {
    t.is_int()
        && matches!(
            op,
            BinaryOp::FloorDivide | BinaryOp::Remainder | BinaryOp::Pow
        )
}

pub(crate) fn binary(op: BinaryOp, a: View, b: View, dst: View) -> Result<()> {
    let k = op
        .kernel(a.dtype)
        .ok_or_else(|| no_kernel(op.name(), a.dtype))?;
    // the divisor (exponent) is checked on the device and gates the op (`deferred.rs`)
    let gate = if checked(op, a.dtype) && b.layout.numel() > 0 && dst.layout.numel() > 0 {
        let name = op.name();
        let pow = op == BinaryOp::Pow;
        if pow && !a.dtype.is_signed() {
            None // no negative exponents
        } else {
            let bad = if pow {
                "v.y != 0u"
            } else {
                "v.x == 0u && v.y == 0u"
            };
            let gpu = gpu_of(name, &dst)?;
            let cause = move |_: i64| {
                if pow {
                    Error::invalid("pow", "integers to negative integer powers are not allowed")
                } else {
                    Error::ZeroDivision { op: name }
                }
            };
            let operands = describe(&[("input", &a), ("other", &b), ("output", &dst)]);
            Some(super::index::check_values(
                &gpu,
                name,
                &b,
                bad,
                &[],
                cause,
                operands,
            )?)
        }
    } else {
        None
    };
    let e = wgsl::translate(k.c, ctype(a.dtype));
    let body = format!(
        "        let x = ld1(at(1u, i));\n        let y = ld2(at(2u, i));\n        st0(at(0u, i), {});",
        wgsl::to_raw(dst.dtype, &e)
    );
    run_gated(
        op.name(),
        [dst, a, b],
        &[false, true, true],
        &[],
        |_| String::new(),
        &[],
        &body,
        gate.as_ref().map(|g| &g.0),
    )
}

/// Whether this is an i64 `where` (a bool condition choosing word pairs), which runs
/// natively though i64 arithmetic does not.
pub(crate) fn native_select(op: TernaryOp, cond: View, a: View, b: View, dst: View) -> bool {
    op == TernaryOp::Where
        && cond.dtype == DType::Bool
        && [a, b, dst].iter().all(|v| v.dtype == DType::I64)
}

/// `dst = cond ? a : b` over i64 word pairs.
pub(crate) fn select_i64(cond: View, a: View, b: View, dst: View) -> Result<()> {
    run(
        "where",
        [dst, cond, a, b],
        &[false, true, false, false],
        &[false, false, true, true],
        |_| String::new(),
        &[],
        "        st0(at(0u, i), select(ld3(at(3u, i)), ld2(at(2u, i)), ld1(at(1u, i))));",
    )
}

pub(crate) fn ternary(op: TernaryOp, a: View, b: View, c: View, dst: View) -> Result<()> {
    let t = dst.dtype;
    let k = op.kernel(t).ok_or_else(|| no_kernel(op.name(), t))?;
    let ty = ctype(t);
    let e = wgsl::translate(k.c, ty);
    // the op's scalar (addcmul's value) in the compute type, rounded on the host as the
    // CPU rounds it
    let (scalar, decl): (Vec<u32>, Box<dyn Fn(usize) -> String>) = match op {
        TernaryOp::Addcmul(v) | TernaryOp::Addcdiv(v) => {
            let bits = match ty {
                "f32" => (v.to_f64() as f32).to_bits(),
                _ => v.to_i64() as u32,
            };
            let conv = match ty {
                "f32" => "bitcast<f32>",
                "i32" => "bitcast<i32>",
                _ => "",
            };
            (
                vec![bits],
                Box::new(move |at| format!("        let v = {conv}(geo[{at}u]);\n")),
            )
        }
        _ => (vec![], Box::new(|_| String::new())),
    };
    debug_assert!(k.out != Out::Bool);
    let body = format!(
        "        let x = ld1(at(1u, i));\n        let y = ld2(at(2u, i));\n        let z = ld3(at(3u, i));\n        st0(at(0u, i), {});",
        wgsl::to_raw(t, &e)
    );
    run(
        op.name(),
        [dst, a, b, c],
        &[false, true, true, true],
        &[],
        decl,
        &scalar,
        &body,
    )
}
