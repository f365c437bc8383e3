//! Batched matrix products through the `gemm` crate, addressing every operand — the output
//! included — through its strides. Transposed or stepped operands are never copied first:
//! `gemm` takes a row and a column stride per matrix and packs what it reads.
//!
//! - f64 and f32 go to `gemm` natively.
//! - f16 and bf16 accumulate in f32 over the whole of k and round once, as PyTorch does:
//!   both inputs are converted to f32 (each distinct element once: broadcast batch dims are
//!   not materialised), multiplied in f32, and the result is rounded to the half type once,
//!   on the final copy into the output's layout. (`gemm` 0.19 has no bf16 kernel, and its
//!   f16 kernel rounds the running sum back to f16 after every block of ≥ 512 along k:
//!   `64×513×64` with multiples of 1/8 returned 70 where the exact 70.0625 is an f16; with a
//!   zero stride along k it was 15 % off. Issue #22.)
//! - Integer and bool dtypes are refused (the frontend refuses them first, with a hint).
//!
//! The output is written with `read_dst = false`: `gemm` computes `dst = 1·(a·b)` and never
//! reads the output, so whatever it held before (NaN poison included) can't leak in.
//!
//! Parallelism: a product large enough for `gemm`'s own threading threshold runs one matrix
//! at a time on all rayon threads; a batch of small products runs the batch in parallel,
//! each product single-threaded; tiny work stays on the calling thread.

use super::access::Access;
use super::strided::{Plan, SendPtr};
use crate::backend::View;
use crate::storage::CpuBuffer;
use crate::{DType, Error, Layout, Result, Scalar, Storage};
use gemm::Parallelism;

/// One matrix dim or batch dim: size and the stride (in elements) of each operand.
#[derive(Debug, Clone, Copy)]
struct Dims {
    m: usize,
    n: usize,
    k: usize,
    /// (row stride, column stride) of the output, a, b.
    d: (isize, isize),
    a: (isize, isize),
    b: (isize, isize),
}

/// Batch dims: (size, dst stride, a stride, b stride), outermost first.
type Batch = Vec<(usize, usize, usize, usize)>;

const OP: &str = "matmul";

/// `dst[i] = a[i] · b[i]` for every batch index `i`: `a` is `[*batch, M, K]`, `b` is
/// `[*batch, K, N]`, `dst` is `[*batch, M, N]` (inputs already broadcast to the batch shape,
/// stride 0 allowed; `dst` non-overlapping and not sharing storage with an input).
pub(crate) fn matmul(a: View, b: View, dst: View) -> Result<()> {
    let (dims, batch) = geometry(&a, &b, &dst)?;
    let nb: usize = batch.iter().map(|x| x.0).product();
    if nb == 0 || dims.m == 0 || dims.n == 0 {
        return Ok(());
    }
    if dims.k == 0 {
        // an empty sum: every output element is 0
        return super::copy::fill(dst, Scalar::Int(0));
    }
    match dst.dtype {
        DType::F64 => run::<f64>(&a, &b, &dst, dims, batch),
        DType::F32 => run::<f32>(&a, &b, &dst, dims, batch),
        // never gemm's f16 kernel: it rounds its running sum to f16 per block of k (module doc)
        DType::F16 | DType::BF16 => half_via_f32(&a, &b, &dst),
        d => Err(Error::UnsupportedDType {
            op: OP,
            dtype: d,
            hint: "; matrix products take float tensors (f64, f32, f16, bf16)".into(),
        }),
    }
}

/// Reads M, N, K, the matrix strides and the batch dims off the three layouts, checking that
/// they agree (the frontend guarantees it; a backend never panics on a bad call).
fn geometry(a: &View, b: &View, dst: &View) -> Result<(Dims, Batch)> {
    let (la, lb, ld) = (a.layout, b.layout, dst.layout);
    let nd = ld.ndim();
    let bad = |why: &str| {
        Error::invalid(
            OP,
            format!(
                "backend called with shapes {:?}, {:?} -> {:?} ({why}); this is a bug in the caller",
                la.shape(),
                lb.shape(),
                ld.shape()
            ),
        )
    };
    if nd < 2 || la.ndim() != nd || lb.ndim() != nd {
        return Err(bad(
            "expected [*batch, M, K], [*batch, K, N] -> [*batch, M, N]",
        ));
    }
    if a.dtype != dst.dtype || b.dtype != dst.dtype {
        return Err(bad("operand dtypes differ"));
    }
    let (sa, sb, sd) = (la.shape(), lb.shape(), ld.shape());
    let (m, k, n) = (sa[nd - 2], sa[nd - 1], sb[nd - 1]);
    if sb[nd - 2] != k
        || sd[nd - 2] != m
        || sd[nd - 1] != n
        || sa[..nd - 2] != sd[..nd - 2]
        || sb[..nd - 2] != sd[..nd - 2]
    {
        return Err(bad("inconsistent sizes"));
    }
    if a.storage.same(dst.storage) || b.storage.same(dst.storage) {
        return Err(bad("the output shares storage with an input"));
    }
    let st = |l: &Layout, i: usize| l.strides()[i] as isize;
    let dims = Dims {
        m,
        n,
        k,
        d: (st(ld, nd - 2), st(ld, nd - 1)),
        a: (st(la, nd - 2), st(la, nd - 1)),
        b: (st(lb, nd - 2), st(lb, nd - 1)),
    };
    let batch = (0..nd - 2)
        .map(|i| (sd[i], ld.strides()[i], la.strides()[i], lb.strides()[i]))
        .collect();
    Ok((dims, batch))
}

/// Folds batch dims into the rows (or columns) of one larger product where the layouts allow
/// it: `[B, M, K] · [K, N]` (b broadcast over the batch, a and dst continuing row after row)
/// is one `[B·M, K] · [K, N]` product. Pure bookkeeping; the same elements are addressed.
fn fold_batch(mut dims: Dims, mut batch: Batch) -> (Dims, Batch) {
    while let Some(&(size, sd, sa, sb)) = batch.last() {
        let (sd, sa, sb) = (sd as isize, sa as isize, sb as isize);
        if size == 1 {
            batch.pop();
            continue;
        }
        let (m, n) = (dims.m as isize, dims.n as isize);
        if sb == 0 && (dims.m == 1 || (sd == dims.d.0 * m && sa == dims.a.0 * m)) {
            if dims.m == 1 {
                dims.d.0 = sd;
                dims.a.0 = sa;
            }
            dims.m *= size;
        } else if sa == 0 && (dims.n == 1 || (sd == dims.d.1 * n && sb == dims.b.1 * n)) {
            if dims.n == 1 {
                dims.d.1 = sd;
                dims.b.1 = sb;
            }
            dims.n *= size;
        } else {
            break;
        }
        batch.pop();
    }
    (dims, batch)
}

/// Element types `gemm` multiplies natively.
trait GemmElem: crate::Element {
    const ZERO: Self;
    const ONE: Self;
}
impl GemmElem for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}
impl GemmElem for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}

fn run<T: GemmElem>(a: &View, b: &View, dst: &View, dims: Dims, batch: Batch) -> Result<()> {
    let (dims, batch) = fold_batch(dims, batch);
    // the offsets of each batch element's three matrices, found by the one strided engine
    let shape: Vec<usize> = batch.iter().map(|x| x.0).collect();
    let (bd, ba, bb): (Vec<usize>, Vec<usize>, Vec<usize>) = (
        batch.iter().map(|x| x.1).collect(),
        batch.iter().map(|x| x.2).collect(),
        batch.iter().map(|x| x.3).collect(),
    );
    let plan = Plan::new(
        &shape,
        [&bd, &ba, &bb],
        [dst.layout.offset(), a.layout.offset(), b.layout.offset()],
    );
    let [id, ia, ib] = plan.inner_strides();
    let mut offsets: Vec<[isize; 3]> =
        crate::alloc::try_with_capacity(plan.numel(), "matmul", &shape, None)?;
    plan.for_each_run(0, plan.numel(), |off, len| {
        for i in 0..len as isize {
            offsets.push([off[0] + i * id, off[1] + i * ia, off[2] + i * ib]);
        }
    });

    let acc = Access::views(Some(dst), &[a, b]);
    let (pd, pa, pb) = (
        SendPtr(acc.ptr::<T>(dst.storage)),
        SendPtr(acc.ptr::<T>(a.storage)),
        SendPtr(acc.ptr::<T>(b.storage)),
    );
    let one = |o: &[isize; 3], par: Parallelism| unsafe {
        gemm::gemm::<T>(
            dims.m,
            dims.n,
            dims.k,
            pd.get().offset(o[0]),
            dims.d.1,
            dims.d.0,
            false, // never read dst: dst = 1·(a·b)
            pa.get().offset(o[1]),
            dims.a.1,
            dims.a.0,
            pb.get().offset(o[2]),
            dims.b.1,
            dims.b.0,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            par,
        )
    };

    let threads = rayon::current_num_threads();
    let work = dims.m.saturating_mul(dims.n).saturating_mul(dims.k);
    let threshold = gemm::get_threading_threshold();
    if threads > 1 && work >= threshold {
        // big products: one at a time, each on every thread (gemm decides how to split). gemm
        // forks and joins several times per product; from a thread outside the pool each of
        // those is a cross-thread handoff (measured: 256³ took twice as long), so the whole
        // batch moves onto a pool thread once.
        let all = || {
            offsets
                .iter()
                .for_each(|o| one(o, Parallelism::Rayon(threads)))
        };
        if rayon::current_thread_index().is_some() {
            all()
        } else {
            rayon::scope(|s| s.spawn(|_| all()))
        }
    } else if threads > 1 && offsets.len() > 1 && work.saturating_mul(offsets.len()) >= threshold {
        // many small products: the batch in parallel
        let chunk = offsets.len().div_ceil(threads * 4).max(1);
        let tasks = offsets.len().div_ceil(chunk);
        super::parallel::run_tasks(tasks, &|t| {
            let c = &offsets[t * chunk..((t + 1) * chunk).min(offsets.len())];
            c.iter().for_each(|o| one(o, Parallelism::None))
        });
    } else {
        offsets.iter().for_each(|o| one(o, Parallelism::None));
    }
    Ok(())
}

/// f16/bf16: convert, multiply in f32 (every k accumulated in f32), round once into the output.
fn half_via_f32(a: &View, b: &View, dst: &View) -> Result<()> {
    let (sa, la) = to_f32(a)?;
    let (sb, lb) = to_f32(b)?;
    let shape = dst.layout.shape();
    // the f32 product: fallible like every buffer (shapes were checked, so no overflow)
    let so = Storage::from_cpu(CpuBuffer::try_zeros(
        DType::F32,
        shape.iter().product(),
        "matmul",
        shape,
    )?);
    let lo = Layout::contiguous(shape);
    let f32_view = |storage, layout| View {
        storage,
        layout,
        dtype: DType::F32,
    };
    matmul(f32_view(&sa, &la), f32_view(&sb, &lb), f32_view(&so, &lo))?;
    super::copy::copy_cast(f32_view(&so, &lo), *dst)
}

/// An f32 copy of a view: dims broadcast with stride 0 are copied once and stay stride 0.
fn to_f32(v: &View) -> Result<(Storage, Layout)> {
    let l = v.layout;
    let compact: Vec<usize> = l
        .shape()
        .iter()
        .zip(l.strides())
        .map(|(&n, &s)| if s == 0 { n.min(1) } else { n })
        .collect();
    let src = Layout::new(compact.clone(), l.strides().to_vec(), l.offset());
    // the f32 copy of an operand (its broadcast dims stay stride 0, so no bigger than it)
    let storage = Storage::from_cpu(CpuBuffer::try_zeros(
        DType::F32,
        compact.iter().product(),
        "matmul",
        &compact,
    )?);
    let dense = Layout::contiguous(&compact);
    super::copy::copy_cast(
        View {
            storage: v.storage,
            layout: &src,
            dtype: v.dtype,
        },
        View {
            storage: &storage,
            layout: &dense,
            dtype: DType::F32,
        },
    )?;
    let strides = dense
        .strides()
        .iter()
        .zip(l.strides())
        .map(|(&d, &s)| if s == 0 { 0 } else { d })
        .collect();
    Ok((storage, Layout::new(l.shape().to_vec(), strides, 0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    fn dims(m: usize, n: usize) -> Dims {
        Dims {
            m,
            n,
            k: 4,
            d: (n as isize, 1),
            a: (4, 1),
            b: (n as isize, 1),
        }
    }
    #[test]
    fn folds_a_broadcast_rhs_into_rows() {
        // [2, 3, 4] · [4, 5] (b expanded over the batch) -> one [6, 4] · [4, 5]
        let (d, b) = fold_batch(dims(3, 5), vec![(2, 15, 12, 0)]);
        assert!(b.is_empty());
        assert_eq!((d.m, d.n), (6, 5));
    }
    #[test]
    fn keeps_batches_that_do_not_continue() {
        // a's batch stride leaves a gap: rows don't continue across the batch
        let (d, b) = fold_batch(dims(3, 5), vec![(2, 15, 13, 0)]);
        assert_eq!(b.len(), 1);
        assert_eq!(d.m, 3);
        // b not broadcast: a real batch
        let (_, b) = fold_batch(dims(3, 5), vec![(2, 15, 12, 20)]);
        assert_eq!(b.len(), 1);
    }
}
