//! The elementwise primitives of the backend contract on CUDA: copy/cast, fill, unary,
//! binary, ternary. Each plans its operands ([`walk`]), fetches the kernel of its
//! (family, dtype) module and launches it; the output is always addressed through its layout.

use super::device::CudaDevice;
use super::launch::{arg, dense, dptr, launch, launch_dense, queued, walk, Walk};
use super::source;
use super::tile;
use crate::backend::{BinaryOp, TernaryOp, UnaryOp, View};
use crate::{DType, Error, Result, Scalar};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

/// `<name>_dense`: the dense kernel of kernel `name` (kernels/elementwise.cu), as the
/// `&'static str` kernel names are (one small leak per distinct name, cached).
fn dense_name(name: &'static str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashMap<&'static str, &'static str>>> = OnceLock::new();
    let mut m = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    m.entry(name)
        .or_insert_with(|| Box::leak(format!("{name}_dense").into_boxed_str()))
}

/// Launches dense kernel `f` with `(row length, bc, rows, ptrs..., extra...)` over `n`
/// elements in all.
fn run_dense<const N: usize>(
    dev: &CudaDevice,
    f: &cudarc::driver::CudaFunction,
    op: &'static str,
    n: i64,
    d: &super::launch::Dense<N>,
    extra: &[*mut c_void],
) -> Result<()> {
    let mut args: Vec<*mut c_void> = vec![arg(&d.n), arg(&d.bc), arg(&d.rows)];
    args.extend(d.ptrs.iter().map(arg));
    args.extend_from_slice(extra);
    unsafe { launch_dense(dev, f, op, n, &mut args) }
}

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
    let (sb, db) = (src_dtype.size_in_bytes(), dst_dtype.size_in_bytes());
    let dn = dense(w, [(po, db), (pa, sb)]);
    if src_dtype == dst_dtype {
        // a dense copy that does not overlap itself moves bytes: cuMemcpyDtoDAsync, which
        // is the measured copy bandwidth
        if let Some(d) = &dn {
            let [o, a] = d.ptrs;
            let bytes = w.n as u64 * db as u64;
            if d.bc == 0 && d.rows.rows == 1 && (o + bytes <= a || a + bytes <= o) {
                dev.bind()?;
                let r = unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        o,
                        a,
                        bytes as usize,
                        dev.stream.cu_stream(),
                    )
                };
                return queued(dev, op, "cuMemcpyDtoDAsync", r);
            }
        }
    }
    let tiled = tile::tiled(w);
    if src_dtype == dst_dtype && tiled.is_none() && dn.is_none() {
        if let Some(v) = in_words(w, db, [po, pa]) {
            let module = format!("copy_{db}");
            let f = dev.function(&module, "copy_vec16", || source::copy_module(db))?;
            let [so, sa] = v.strs;
            let mut args = [
                arg(&v.geo),
                arg(&v.n),
                arg(&po),
                arg(&so),
                arg(&pa),
                arg(&sa),
            ];
            return unsafe { launch(dev, &f, op, v.n, &mut args) };
        }
    }
    let f = if src_dtype == dst_dtype {
        let (module, name, dense_k, tiled_name) = match db {
            1 => ("copy_1", "copy_1", "copy_dense_1", "tiled_1"),
            2 => ("copy_2", "copy_2", "copy_dense_2", "tiled_2"),
            4 => ("copy_4", "copy_4", "copy_dense_4", "tiled_4"),
            _ => ("copy_8", "copy_8", "copy_dense_8", "tiled_8"),
        };
        let name = if tiled.is_some() {
            tiled_name
        } else if dn.is_some() {
            dense_k
        } else {
            name
        };
        dev.function(module, name, || source::copy_module(db))?
    } else {
        let module = format!("cast_{}_{}", source::tag(src_dtype), source::tag(dst_dtype));
        let name = if tiled.is_some() {
            "tiled"
        } else if dn.is_some() {
            dense_name(source::cast_name(dst_dtype))
        } else {
            source::cast_name(dst_dtype)
        };
        dev.function(&module, name, || source::cast_module(src_dtype, dst_dtype))?
    };
    if let Some(t) = tiled {
        return tile::launch_tiled(dev, &f, op, &t, [po, pa]);
    }
    if let Some(d) = dn {
        return run_dense(dev, &f, op, w.n, &d, &[]);
    }
    let [so, sa] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&w.contig),
        arg(&po),
        arg(&so),
        arg(&pa),
        arg(&sa),
    ];
    unsafe { launch(dev, &f, op, w.n, &mut args) }
}

/// A copy's walk in 16-byte words (`k_copy_vec16`), when both operands' innermost dim is
/// contiguous and a whole number of words long, and every row of both starts on a word:
/// sizes, strides and offsets divided by the elements per word.
fn in_words(w: &Walk<2>, elem: usize, ptrs: [u64; 2]) -> Option<Walk<2>> {
    let per = (16 / elem) as i64;
    let nd = w.geo.ndim as usize;
    if elem > 16 || nd < 2 || ptrs.iter().any(|p| p % 16 != 0) {
        return None;
    }
    let last = nd - 1;
    let inner = w.geo.size[last];
    // rows of at least 4 words: shorter ones gain less than the check costs
    if inner % per != 0 || inner < 4 * per {
        return None;
    }
    let mut v = Walk {
        geo: w.geo,
        strs: w.strs,
        n: w.n / per,
        contig: 0,
    };
    v.geo.size[last] = inner / per;
    for s in v.strs.iter_mut() {
        if s.st[last] != 1 || s.off % per != 0 {
            return None;
        }
        s.off /= per;
        for d in 0..last {
            if w.geo.size[d] > 1 && s.st[d] % per != 0 {
                return None;
            }
            s.st[d] /= per;
        }
    }
    Some(v)
}

/// Writes `value` (cast to the output's dtype exactly as on the CPU) into every element.
pub(crate) fn fill(dst: View, value: Scalar) -> Result<()> {
    let (dev, po) = dptr(&dst)?;
    let w = walk("fill", [&dst])?;
    // the element's bits, made on the host by the CPU's own conversion
    let bits = crate::backend::common::element_bits(value, dst.dtype);
    let b = dst.dtype.size_in_bytes();
    let dn = dense(&w, [(po, b)]);
    if let Some(d) = dn.as_ref().filter(|d| d.rows.rows == 1) {
        // dense fills of 1, 2 and 4 bytes are driver memsets (full write bandwidth)
        let (o, n) = (d.ptrs[0], w.n as usize);
        let s = dev.stream.cu_stream();
        dev.bind()?;
        use cudarc::driver::sys;
        let r = match b {
            1 => Some(unsafe { sys::cuMemsetD8Async(o, bits as u8, n, s) }),
            2 => Some(unsafe { sys::cuMemsetD16Async(o, bits as u16, n, s) }),
            4 => Some(unsafe { sys::cuMemsetD32Async(o, bits as u32, n, s) }),
            _ => None,
        };
        if let Some(r) = r {
            return queued(&dev, "fill", "cuMemsetAsync", r.result());
        }
    }
    let (module, name, dense_k) = match b {
        1 => ("copy_1", "fill_1", "fill_dense_1"),
        2 => ("copy_2", "fill_2", "fill_dense_2"),
        4 => ("copy_4", "fill_4", "fill_dense_4"),
        _ => ("copy_8", "fill_8", "fill_dense_8"),
    };
    let name = if dn.is_some() { dense_k } else { name };
    let f = dev.function(module, name, || source::copy_module(b))?;
    if let Some(d) = dn {
        return run_dense(&dev, &f, "fill", w.n, &d, &[arg(&bits)]);
    }
    let [so] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&w.contig),
        arg(&po),
        arg(&so),
        arg(&bits),
    ];
    unsafe { launch(&dev, &f, "fill", w.n, &mut args) }
}

pub(crate) fn unary(op: UnaryOp, src: View, dst: View) -> Result<()> {
    if op.kernel(src.dtype).is_none() {
        return Err(no_kernel(op.name(), src.dtype));
    }
    let (dev, po) = dptr(&dst)?;
    let (_, pa) = dptr(&src)?;
    let w = walk(op.name(), [&dst, &src])?;
    let module = format!("unary_{}_{}", op.name(), source::tag(src.dtype));
    let tiled = tile::tiled(&w);
    let dn = dense(
        &w,
        [
            (po, dst.dtype.size_in_bytes()),
            (pa, src.dtype.size_in_bytes()),
        ],
    );
    let name = if tiled.is_some() {
        "tiled"
    } else if dn.is_some() {
        dense_name(op.name())
    } else {
        op.name()
    };
    let f = dev.function(&module, name, || {
        source::unary_module(op, src.dtype).unwrap_or_default()
    })?;
    if let Some(t) = tiled {
        return tile::launch_tiled(&dev, &f, op.name(), &t, [po, pa]);
    }
    if let Some(d) = dn {
        return run_dense(&dev, &f, op.name(), w.n, &d, &[]);
    }
    let [so, sa] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&w.contig),
        arg(&po),
        arg(&so),
        arg(&pa),
        arg(&sa),
    ];
    unsafe { launch(&dev, &f, op.name(), w.n, &mut args) }
}

pub(crate) fn binary(op: BinaryOp, a: View, b: View, dst: View) -> Result<()> {
    let t = a.dtype;
    if op.kernel(t).is_none() {
        return Err(no_kernel(op.name(), t));
    }
    // integer division by zero and integer negative powers are errors that write nothing (as
    // on the CPU), checked on the device: the op computes into scratch, copied to `dst` only
    // if the check passed, and a failure is reported at the next read (deferred.rs)
    if t.is_int()
        && matches!(
            op,
            BinaryOp::FloorDivide | BinaryOp::Remainder | BinaryOp::Pow
        )
    {
        let (dev, _) = dptr(&dst)?;
        let mode: i32 = if op == BinaryOp::Pow { 1 } else { 0 };
        let name = op.name();
        let error = move |_: i64| {
            if mode == 0 {
                Error::ZeroDivision { op: name }
            } else {
                Error::invalid("pow", "integers to negative integer powers are not allowed")
            }
        };
        let Some(verdict) = any_bad(&dev, t, &b, mode)? else {
            return binary_unchecked(op, a, b, dst);
        };
        if super::deferred::sync_checks() {
            if super::index::read_words(&dev, verdict.ptr, 1, "integer division check")?[0] != 0 {
                return Err(error(0));
            }
            return binary_unchecked(op, a, b, dst);
        }
        let failure = super::deferred::Failure {
            cause: Box::new(error),
            operands: super::index::describe(&[("input", &a), ("other", &b), ("output", &dst)]),
        };
        dev.deferred.register(&dev, name, verdict.ptr, failure)?;
        let n = dst.layout.numel();
        let bytes = n
            .checked_mul(dst.dtype.size_in_bytes())
            .ok_or_else(|| Error::invalid(name, "output too large"))?;
        let scratch = crate::Storage::from_cuda(
            super::buffer::CudaBuffer::new(&dev, bytes, false)?,
            dst.dtype,
            n,
        );
        let layout = crate::Layout::contiguous(dst.layout.shape());
        let sv = View {
            storage: &scratch,
            layout: &layout,
            dtype: dst.dtype,
        };
        binary_unchecked(op, a, b, sv)?;
        return super::index::gated_copy(&dev, name, sv, dst, verdict.ptr);
    }
    binary_unchecked(op, a, b, dst)
}

/// [`binary`] without the integer division check.
fn binary_unchecked(op: BinaryOp, a: View, b: View, dst: View) -> Result<()> {
    let t = a.dtype;
    let (dev, po) = dptr(&dst)?;
    let (_, pa) = dptr(&a)?;
    let (_, pb) = dptr(&b)?;
    let module = format!("binary_{}_{}", op.name(), source::tag(t));
    let w = walk(op.name(), [&dst, &a, &b])?;
    let tiled = tile::tiled(&w);
    let dn = dense(
        &w,
        [
            (po, dst.dtype.size_in_bytes()),
            (pa, t.size_in_bytes()),
            (pb, t.size_in_bytes()),
        ],
    );
    let name = if tiled.is_some() {
        "tiled"
    } else if dn.is_some() {
        dense_name(op.name())
    } else {
        op.name()
    };
    let f = dev.function(&module, name, || {
        source::binary_module(op, t).unwrap_or_default()
    })?;
    if let Some(tl) = tiled {
        return tile::launch_tiled(&dev, &f, op.name(), &tl, [po, pa, pb]);
    }
    if let Some(d) = dn {
        return run_dense(&dev, &f, op.name(), w.n, &d, &[]);
    }
    let [so, sa, sb] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&w.contig),
        arg(&po),
        arg(&so),
        arg(&pa),
        arg(&sa),
        arg(&pb),
        arg(&sb),
    ];
    unsafe { launch(&dev, &f, op.name(), w.n, &mut args) }
}

/// Queues the check of whether any element of `b` is zero (mode 0) or negative (mode 1);
/// returns its verdict (word 0 non-zero: yes), or `None` for an empty `b`.
fn any_bad(
    dev: &std::sync::Arc<super::device::CudaDevice>,
    t: DType,
    b: &View,
    mode: i32,
) -> Result<Option<super::buffer::CudaBuffer>> {
    let (_, pb) = dptr(b)?;
    let w = walk("any_bad", [b])?;
    if w.n == 0 {
        return Ok(None);
    }
    let module = format!("check_{}", source::tag(t));
    let f = dev.function(&module, "any_bad", || source::any_bad_module(t))?;
    // the kernel sets the low int of word 0
    let verdict = super::buffer::CudaBuffer::new(dev, 16, true)?;
    let [sb] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&pb),
        arg(&sb),
        arg(&mode),
        arg(&verdict.ptr),
    ];
    unsafe { launch(dev, &f, "any_bad", w.n, &mut args)? };
    Ok(Some(verdict))
}

pub(crate) fn ternary(op: TernaryOp, a: View, b: View, c: View, dst: View) -> Result<()> {
    let t = dst.dtype;
    if op.kernel(t).is_none() {
        return Err(no_kernel(op.name(), t));
    }
    let (dev, po) = dptr(&dst)?;
    let (_, pa) = dptr(&a)?;
    let (_, pb) = dptr(&b)?;
    let (_, pc) = dptr(&c)?;
    let w = walk(op.name(), [&dst, &a, &b, &c])?;
    let module = format!("ternary_{}_{}", op.name(), source::tag(t));
    let (vf, vi): (f64, i64) = match op {
        TernaryOp::Addcmul(v) | TernaryOp::Addcdiv(v) => (v.to_f64(), v.to_i64()),
        _ => (0.0, 0),
    };
    let dn = dense(
        &w,
        [
            (po, t.size_in_bytes()),
            (pa, a.dtype.size_in_bytes()),
            (pb, t.size_in_bytes()),
            (pc, t.size_in_bytes()),
        ],
    );
    let name = match dn {
        Some(_) => dense_name(source::ternary_name(op)),
        None => source::ternary_name(op),
    };
    let f = dev.function(&module, name, || {
        source::ternary_module(op, t).unwrap_or_default()
    })?;
    if let Some(d) = dn {
        return run_dense(&dev, &f, op.name(), w.n, &d, &[arg(&vf), arg(&vi)]);
    }
    let [so, sa, sb, sc] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&w.contig),
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
