//! The elementwise primitives of the backend contract on CUDA: copy/cast, fill, unary,
//! binary, ternary. Each plans its operands ([`walk`]), fetches the kernel of its
//! (family, dtype) module and launches it; the output is always addressed through its layout.

use super::device::CudaDevice;
use super::launch::{arg, dptr, launch, vectorised, walk, Walk};
use super::source;
use super::tile;
use crate::backend::{BinaryOp, TernaryOp, UnaryOp, View};
use crate::{with_dtype, DType, Error, Result, Scalar};
use std::sync::Arc;

fn no_kernel(op: &'static str, dtype: DType) -> Error {
    Error::UnsupportedDType {
        op,
        dtype,
        hint: " on CUDA".into(),
    }
}

/// `dst = cast(src)` (bit copy within one dtype).
pub(crate) fn copy_cast(src: View, dst: View) -> Result<()> {
    let (dev, po) = dptr(&dst)?;
    let (_, pa) = dptr(&src)?;
    let w = walk("copy", [&dst, &src])?;
    copy_walk(&dev, "copy", (src.dtype, pa), (dst.dtype, po), &w)
}

/// Launches the copy (same dtype) or cast kernel over an already planned pair
/// `[dst, src]`; `flip` plans its own (signed) walk and comes here too.
pub(crate) fn copy_walk(
    dev: &Arc<CudaDevice>,
    op: &'static str,
    (src_dtype, pa): (DType, u64),
    (dst_dtype, po): (DType, u64),
    w: &Walk<2>,
) -> Result<()> {
    let tiled = tile::tiled(w);
    let f = if src_dtype == dst_dtype {
        let b = dst_dtype.size_in_bytes();
        let (module, name, tiled_name) = match b {
            1 => ("copy_1", "copy_1", "tiled_1"),
            2 => ("copy_2", "copy_2", "tiled_2"),
            4 => ("copy_4", "copy_4", "tiled_4"),
            _ => ("copy_8", "copy_8", "tiled_8"),
        };
        let name = if tiled.is_some() { tiled_name } else { name };
        dev.function(module, name, || source::copy_module(b))?
    } else {
        let module = format!("cast_{}_{}", source::tag(src_dtype), source::tag(dst_dtype));
        let name = if tiled.is_some() {
            "tiled"
        } else {
            source::cast_name(dst_dtype)
        };
        dev.function(&module, name, || source::cast_module(src_dtype, dst_dtype))?
    };
    if let Some(t) = tiled {
        return tile::launch_tiled(dev, &f, op, &t, [po, pa]);
    }
    let [so, sa] = w.strs;
    let contig = vectorised(
        w.contig,
        &[
            (po, &so, dst_dtype.size_in_bytes()),
            (pa, &sa, src_dtype.size_in_bytes()),
        ],
    );
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&contig),
        arg(&po),
        arg(&so),
        arg(&pa),
        arg(&sa),
    ];
    unsafe { launch(dev, &f, op, w.n, &mut args) }
}

/// Writes `value` (cast to the output's dtype exactly as on the CPU) into every element.
pub(crate) fn fill(dst: View, value: Scalar) -> Result<()> {
    let (dev, po) = dptr(&dst)?;
    let w = walk("fill", [&dst])?;
    // the element's bits, made on the host by the CPU's own conversion
    let bits: u64 = with_dtype!(dst.dtype, T => {
        let v: T = value.to_elem();
        let mut b = [0u8; 8];
        let n = std::mem::size_of::<T>();
        // SAFETY: T is a plain element type of n ≤ 8 bytes
        unsafe { std::ptr::copy_nonoverlapping(&v as *const T as *const u8, b.as_mut_ptr(), n) };
        u64::from_le_bytes(b)
    });
    let b = dst.dtype.size_in_bytes();
    let (module, name) = match b {
        1 => ("copy_1", "fill_1"),
        2 => ("copy_2", "fill_2"),
        4 => ("copy_4", "fill_4"),
        _ => ("copy_8", "fill_8"),
    };
    let f = dev.function(module, name, || source::copy_module(b))?;
    let [so] = w.strs;
    let contig = vectorised(w.contig, &[(po, &so, b)]);
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&contig),
        arg(&po),
        arg(&so),
        arg(&bits),
    ];
    unsafe { launch(&dev, &f, "fill", w.n, &mut args) }
}

pub(crate) fn unary(op: UnaryOp, src: View, dst: View) -> Result<()> {
    if !source::has_unary(op, src.dtype) {
        return Err(no_kernel(op.name(), src.dtype));
    }
    let (dev, po) = dptr(&dst)?;
    let (_, pa) = dptr(&src)?;
    let w = walk(op.name(), [&dst, &src])?;
    let module = format!("unary_{}_{}", op.name(), source::tag(src.dtype));
    let tiled = tile::tiled(&w);
    let name = if tiled.is_some() { "tiled" } else { op.name() };
    let f = dev.function(&module, name, || {
        source::unary_module(op, src.dtype).unwrap_or_default()
    })?;
    if let Some(t) = tiled {
        return tile::launch_tiled(&dev, &f, op.name(), &t, [po, pa]);
    }
    let [so, sa] = w.strs;
    let contig = vectorised(
        w.contig,
        &[
            (po, &so, dst.dtype.size_in_bytes()),
            (pa, &sa, src.dtype.size_in_bytes()),
        ],
    );
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&contig),
        arg(&po),
        arg(&so),
        arg(&pa),
        arg(&sa),
    ];
    unsafe { launch(&dev, &f, op.name(), w.n, &mut args) }
}

pub(crate) fn binary(op: BinaryOp, a: View, b: View, dst: View) -> Result<()> {
    let t = a.dtype;
    if !source::has_binary(op, t) {
        return Err(no_kernel(op.name(), t));
    }
    let (dev, po) = dptr(&dst)?;
    let (_, pa) = dptr(&a)?;
    let (_, pb) = dptr(&b)?;
    let module = format!("binary_{}_{}", op.name(), source::tag(t));
    // integer division by zero and integer negative powers are errors, checked before
    // anything is written (as on the CPU); reading the verdict waits for the GPU.
    if t.is_int()
        && matches!(
            op,
            BinaryOp::FloorDivide | BinaryOp::Remainder | BinaryOp::Pow
        )
    {
        let mode: i32 = if op == BinaryOp::Pow { 1 } else { 0 };
        if any_bad(&dev, t, &b, mode)? {
            return Err(if mode == 0 {
                Error::ZeroDivision { op: op.name() }
            } else {
                Error::invalid("pow", "integers to negative integer powers are not allowed")
            });
        }
    }
    let w = walk(op.name(), [&dst, &a, &b])?;
    let tiled = tile::tiled(&w);
    let name = if tiled.is_some() { "tiled" } else { op.name() };
    let f = dev.function(&module, name, || {
        source::binary_module(op, t).unwrap_or_default()
    })?;
    if let Some(tl) = tiled {
        return tile::launch_tiled(&dev, &f, op.name(), &tl, [po, pa, pb]);
    }
    let [so, sa, sb] = w.strs;
    let contig = vectorised(
        w.contig,
        &[
            (po, &so, dst.dtype.size_in_bytes()),
            (pa, &sa, t.size_in_bytes()),
            (pb, &sb, t.size_in_bytes()),
        ],
    );
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&contig),
        arg(&po),
        arg(&so),
        arg(&pa),
        arg(&sa),
        arg(&pb),
        arg(&sb),
    ];
    unsafe { launch(&dev, &f, op.name(), w.n, &mut args) }
}

/// Whether any element of `b` is zero (mode 0) or negative (mode 1); synchronises.
fn any_bad(
    dev: &std::sync::Arc<super::device::CudaDevice>,
    t: DType,
    b: &View,
    mode: i32,
) -> Result<bool> {
    let (_, pb) = dptr(b)?;
    let w = walk("any_bad", [b])?;
    if w.n == 0 {
        return Ok(false);
    }
    let module = format!("check_{}", source::tag(t));
    let f = dev.function(&module, "any_bad", || source::any_bad_module(t))?;
    let flag = super::buffer::CudaBuffer::new(dev, 4, true)?;
    let [sb] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&pb),
        arg(&sb),
        arg(&mode),
        arg(&flag.ptr),
    ];
    unsafe { launch(dev, &f, "any_bad", w.n, &mut args)? };
    let mut host = [0i32; 1];
    super::transfer::download_raw(
        dev,
        flag.ptr,
        bytemuck_i32(&mut host),
        "integer division check",
    )?;
    Ok(host[0] != 0)
}

fn bytemuck_i32(v: &mut [i32]) -> &mut [u8] {
    // SAFETY: i32 has no padding and any byte pattern is valid
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}

pub(crate) fn ternary(op: TernaryOp, a: View, b: View, c: View, dst: View) -> Result<()> {
    let t = dst.dtype;
    if !source::has_ternary(op, t) {
        return Err(no_kernel(op.name(), t));
    }
    let (dev, po) = dptr(&dst)?;
    let (_, pa) = dptr(&a)?;
    let (_, pb) = dptr(&b)?;
    let (_, pc) = dptr(&c)?;
    let w = walk(op.name(), [&dst, &a, &b, &c])?;
    let module = format!("ternary_{}_{}", op.name(), source::tag(t));
    let f = dev.function(&module, source::ternary_name(op), || {
        source::ternary_module(op, t).unwrap_or_default()
    })?;
    let (vf, vi): (f64, i64) = match op {
        TernaryOp::Addcmul(v) | TernaryOp::Addcdiv(v) => (v.to_f64(), v.to_i64()),
        _ => (0.0, 0),
    };
    let [so, sa, sb, sc] = w.strs;
    let contig = vectorised(
        w.contig,
        &[
            (po, &so, t.size_in_bytes()),
            (pa, &sa, a.dtype.size_in_bytes()),
            (pb, &sb, t.size_in_bytes()),
            (pc, &sc, t.size_in_bytes()),
        ],
    );
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&contig),
        arg(&po),
        arg(&so),
        arg(&pa),
        arg(&sa),
        arg(&pb),
        arg(&sb),
        arg(&pc),
        arg(&sc),
        arg(&vf),
        arg(&vi),
    ];
    unsafe { launch(&dev, &f, op.name(), w.n, &mut args) }
}
