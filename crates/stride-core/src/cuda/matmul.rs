//! Batched matrix products on CUDA through cuBLAS (`cublasGemmStridedBatchedEx`).
//!
//! cuBLAS is column-major; a row-major `C = A·B` is computed as `Cᵀ = Bᵀ·Aᵀ`. Each matrix
//! operand is handed to cuBLAS as it lies when one of its two strides is 1 (a transposed view
//! becomes a transpose flag, never a copy); an operand with no unit stride (`x[:, ::2]`) or a
//! leading dimension cuBLAS can't take is first made contiguous (an input copy). Batch dims
//! collapse to one uniform stride where they can (stride 0 broadcasts too); the rest loop.
//! An output cuBLAS can't address is computed into a temporary that is then copied into it.
//!
//! f32 runs in full f32 by default (TF32 off, as PyTorch's `allow_tf32 = False`);
//! [`set_allow_tf32`] switches. f16 and bf16 accumulate in f32.

use super::buffer::{alloc_dense, dense_copy};
use super::device::CudaDevice;
use super::launch::dptr;
use crate::backend::View;
use crate::storage::Storage;
use crate::{DType, Error, Layout, Result};
use cudarc::cublas::sys as cb;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

static ALLOW_TF32: AtomicBool = AtomicBool::new(false);

/// Lets f32 matrix products use TF32 tensor cores (10-bit mantissa inputs; faster, less
/// exact), like PyTorch's `torch.backends.cuda.matmul.allow_tf32`. Off by default.
pub fn set_allow_tf32(on: bool) {
    ALLOW_TF32.store(on, Ordering::Relaxed);
}

/// Whether f32 matrix products may use TF32 (see [`set_allow_tf32`]).
pub fn allow_tf32() -> bool {
    ALLOW_TF32.load(Ordering::Relaxed)
}

/// Bytes of each handle's workspace (kept for the device's life, outside the allocator).
const BLAS_WORKSPACE: usize = 32 << 20;

/// The device's cuBLAS handle, created now if it is not yet (a CUDA graph capture makes it
/// before capturing: creating one allocates).
pub(crate) fn ensure_handle(dev: &CudaDevice) -> Result<()> {
    handle(dev, &dev.blas).map(|_| ())
}

/// One cuBLAS handle per device, bound to the device's stream.
pub(crate) struct Blas(cb::cublasHandle_t);
unsafe impl Send for Blas {}

fn handle(dev: &CudaDevice, slot: &Mutex<Option<Blas>>) -> Result<cb::cublasHandle_t> {
    let mut g = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = &*g {
        return Ok(h.0);
    }
    dev.bind()?;
    let mut h: cb::cublasHandle_t = std::ptr::null_mut();
    check(dev, "creating the cuBLAS handle", unsafe {
        cb::cublasCreate_v2(&mut h)
    })?;
    check(dev, "binding cuBLAS to the stream", unsafe {
        cb::cublasSetStream_v2(h, dev.stream.cu_stream() as cb::cudaStream_t)
    })?;
    // half inputs accumulate in f32 all the way: without this flag cuBLAS may pick split-k
    // kernels that add their partial sums in f16/bf16 (1-2 ulp off at k = 1023 on an H200;
    // PyTorch's `allow_bf16_reduced_precision_reduction`, which stride never allows)
    check(dev, "setting the cuBLAS math mode", unsafe {
        cb::cublasSetMathMode(
            h,
            cb::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
        )
    })?;
    // a workspace of its own, as PyTorch gives each handle (32 MiB on Hopper): without one
    // cuBLAS allocates on its own, which a CUDA graph capture forbids
    let s = dev.stream.cu_stream();
    let ws = unsafe { cudarc::driver::result::malloc_async(s, BLAS_WORKSPACE) }
        .map_err(|e| dev.err("matmul: allocating the cuBLAS workspace", e))?;
    check(dev, "setting the cuBLAS workspace", unsafe {
        cb::cublasSetWorkspace_v2(h, ws as *mut std::ffi::c_void, BLAS_WORKSPACE)
    })?;
    *g = Some(Blas(h));
    Ok(h)
}

fn check(dev: &CudaDevice, what: &str, s: cb::cublasStatus_t) -> Result<()> {
    if s == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(dev.err(&format!("matmul: {what}"), format!("{s:?}")))
    }
}

/// How cuBLAS sees one row-major matrix operand of `rows × cols` with strides (rs, cs):
/// `Some((transposed, ld))` — `transposed` when its memory is column-major.
fn as_blas(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<(bool, usize)> {
    // a dim of size 1 has a free stride
    let cs1 = cols <= 1 || cs == 1;
    let rs1 = rows <= 1 || rs == 1;
    if cs1 {
        let ld = if rows <= 1 { cols.max(1) } else { rs };
        if ld >= cols.max(1) {
            return Some((false, ld));
        }
    }
    if rs1 {
        let ld = if cols <= 1 { rows.max(1) } else { cs };
        if ld >= rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

fn dtype_codes(dt: DType) -> Option<(cb::cudaDataType, cb::cublasComputeType_t)> {
    use cb::cublasComputeType_t::*;
    use cb::cudaDataType::*;
    Some(match dt {
        DType::F64 => (CUDA_R_64F, CUBLAS_COMPUTE_64F),
        DType::F32 if allow_tf32() => (CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32),
        DType::F32 => (CUDA_R_32F, CUBLAS_COMPUTE_32F),
        DType::F16 => (CUDA_R_16F, CUBLAS_COMPUTE_32F),
        DType::BF16 => (CUDA_R_16BF, CUBLAS_COMPUTE_32F),
        _ => return None,
    })
}

/// A row-major copy of `v` (what `Tensor::contiguous` made here before): `None` when `v`
/// is contiguous already.
fn contiguous_copy(v: &View) -> Result<Option<(Storage, Layout)>> {
    if v.layout.is_contiguous() {
        return Ok(None);
    }
    dense_copy(v).map(Some).map_err(|e| e.in_op("matmul"))
}

pub(crate) fn matmul(a: View, b: View, dst: View) -> Result<()> {
    let (dev, _) = dptr(&dst)?;
    let dt = dst.dtype;
    let Some((ty, compute)) = dtype_codes(dt) else {
        return Err(Error::UnsupportedDType {
            op: "matmul",
            dtype: dt,
            hint: "; matrix products take float tensors".into(),
        });
    };
    let nd = dst.layout.ndim();
    let (m, n) = (dst.layout.shape()[nd - 2], dst.layout.shape()[nd - 1]);
    let k = a.layout.shape()[nd - 1];
    if dst.layout.numel() == 0 {
        return Ok(());
    }
    if k == 0 {
        return super::elementwise::fill(dst, crate::Scalar::Int(0));
    }
    // operands cuBLAS can't read as they lie become contiguous copies
    let fix = |v: &View| -> Result<Option<(Storage, Layout)>> {
        let l = v.layout;
        let s = l.strides();
        let (r, c) = (l.shape()[nd - 2], l.shape()[nd - 1]);
        if as_blas(r, c, s[nd - 2], s[nd - 1]).is_some() {
            Ok(None)
        } else {
            contiguous_copy(v)
        }
    };
    let (ta, tb) = (fix(&a)?, fix(&b)?);
    let (la, lb) = (
        ta.as_ref().map_or(a.layout.clone(), |t| t.1.clone()),
        tb.as_ref().map_or(b.layout.clone(), |t| t.1.clone()),
    );
    // a base pointer: of the copy when there is one (`dptr` reads only the storage)
    let base = |v: &View, t: &Option<(Storage, Layout)>| match t {
        Some((s, l)) => dptr(&View {
            storage: s,
            layout: l,
            dtype: v.dtype,
        }),
        None => dptr(v),
    };
    let (pa, pb) = (base(&a, &ta)?.1, base(&b, &tb)?.1);
    // the output: as it lies, or a contiguous temporary copied back afterwards
    let ds = dst.layout.strides();
    let direct = as_blas(m, n, ds[nd - 2], ds[nd - 1]).is_some();
    let tmp = if direct {
        None
    } else {
        Some(alloc_dense(&dst, true).map_err(|e| e.in_op("matmul"))?)
    };
    let lc = tmp.as_ref().map_or(dst.layout.clone(), |t| t.1.clone());
    let pc = base(&dst, &tmp)?.1;
    gemm_batched(
        &dev,
        ty,
        compute,
        dt,
        m,
        n,
        k,
        (&la, pa),
        (&lb, pb),
        (&lc, pc),
    )?;
    if let Some((s, l)) = &tmp {
        let t = View {
            storage: s,
            layout: l,
            dtype: dt,
        };
        super::elementwise::copy_cast(t, dst)?;
    }
    Ok(())
}

/// Runs the batch of products, collapsing batch dims where every operand allows.
#[allow(clippy::too_many_arguments)]
fn gemm_batched(
    dev: &Arc<CudaDevice>,
    ty: cb::cudaDataType,
    compute: cb::cublasComputeType_t,
    dt: DType,
    m: usize,
    n: usize,
    k: usize,
    a: (&Layout, u64),
    b: (&Layout, u64),
    c: (&Layout, u64),
) -> Result<()> {
    let nd = c.0.ndim();
    let nb = nd - 2;
    // batch dims (size > 1), merged where all three are contiguous across
    let mut dims: Vec<(usize, [usize; 3])> = vec![];
    for d in 0..nb {
        let sz = c.0.shape()[d];
        if sz == 1 {
            continue;
        }
        let st = [a.0.strides()[d], b.0.strides()[d], c.0.strides()[d]];
        if let Some(last) = dims.last_mut() {
            if (0..3).all(|i| last.1[i] == st[i] * sz) {
                last.0 *= sz;
                last.1 = st;
                continue;
            }
        }
        dims.push((sz, st));
    }
    let (inner, outer) = match dims.split_last() {
        Some((l, rest)) => (*l, rest.to_vec()),
        None => ((1, [0, 0, 0]), vec![]),
    };
    let es = dt.size_in_bytes() as u64;
    let h = handle(dev, &dev.blas)?;
    let (sa, sb, sc) = (a.0.strides(), b.0.strides(), c.0.strides());
    let (ta, lda) = as_blas(m, k, sa[nd - 2], sa[nd - 1]).expect("fixed above");
    let (tb, ldb) = as_blas(k, n, sb[nd - 2], sb[nd - 1]).expect("fixed above");
    let (tc, ldc) = as_blas(m, n, sc[nd - 2], sc[nd - 1]).expect("fixed above");
    let op = |t: bool| {
        if t {
            cb::cublasOperation_t::CUBLAS_OP_T
        } else {
            cb::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let (alpha_f, beta_f) = (1.0f32, 0.0f32);
    let (alpha_d, beta_d) = (1.0f64, 0.0f64);
    let (alpha, beta): (*const std::ffi::c_void, *const std::ffi::c_void) = if dt == DType::F64 {
        (&alpha_d as *const f64 as _, &beta_d as *const f64 as _)
    } else {
        (&alpha_f as *const f32 as _, &beta_f as *const f32 as _)
    };
    let total_outer: usize = outer.iter().map(|d| d.0).product();
    dev.bind()?;
    for o in 0..total_outer {
        // element offsets of this outer batch position
        let mut rem = o;
        let mut off = [a.0.offset(), b.0.offset(), c.0.offset()];
        for (sz, st) in outer.iter().rev() {
            let i = rem % sz;
            rem /= sz;
            for j in 0..3 {
                off[j] += i * st[j];
            }
        }
        let (pa, pb, pc) = (
            a.1 + off[0] as u64 * es,
            b.1 + off[1] as u64 * es,
            c.1 + off[2] as u64 * es,
        );
        let (bs, [bsa, bsb, bsc]) = inner;
        let status = if !tc {
            // C row-major (ldc along rows): Cᵀ (n×m) = Bᵀ (n×k) · Aᵀ (k×m)
            unsafe {
                cb::cublasGemmStridedBatchedEx_64(
                    h,
                    op(tb),
                    op(ta),
                    n as i64,
                    m as i64,
                    k as i64,
                    alpha,
                    pb as *const _,
                    ty,
                    ldb as i64,
                    bsb as i64,
                    pa as *const _,
                    ty,
                    lda as i64,
                    bsa as i64,
                    beta,
                    pc as *mut _,
                    ty,
                    ldc as i64,
                    bsc as i64,
                    bs as i64,
                    compute,
                    cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
        } else {
            // C column-major: C (m×n) = A (m×k) · B (k×n), each flag flipped
            unsafe {
                cb::cublasGemmStridedBatchedEx_64(
                    h,
                    op(!ta),
                    op(!tb),
                    m as i64,
                    n as i64,
                    k as i64,
                    alpha,
                    pa as *const _,
                    ty,
                    lda as i64,
                    bsa as i64,
                    pb as *const _,
                    ty,
                    ldb as i64,
                    bsb as i64,
                    beta,
                    pc as *mut _,
                    ty,
                    ldc as i64,
                    bsc as i64,
                    bs as i64,
                    compute,
                    cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
        };
        check(dev, "cublasGemmStridedBatchedEx", status)?;
        dev.launches.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::as_blas;
    #[test]
    fn operand_forms() {
        assert_eq!(as_blas(3, 4, 4, 1), Some((false, 4))); // row-major
        assert_eq!(as_blas(3, 4, 1, 3), Some((true, 3))); // column-major (a transpose)
        assert_eq!(as_blas(3, 4, 8, 1), Some((false, 8))); // rows of a wider matrix
        assert_eq!(as_blas(3, 4, 8, 2), None); // x[:, ::2]
        assert_eq!(as_blas(3, 4, 0, 1), None); // expanded rows: ld 0 < 4
        assert_eq!(as_blas(1, 4, 0, 1), Some((false, 4))); // one row: any row stride
        assert_eq!(as_blas(3, 1, 1, 0), Some((false, 1))); // one column
    }
}
