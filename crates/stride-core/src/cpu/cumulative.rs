//! Inclusive scans (cumsum, cumprod) along one dim.
//!
//! Every line is scanned in order with one accumulator, so the result depends on neither the
//! layout nor the number of threads. When the scanned dim has the input's smallest stride a
//! task scans whole lines; otherwise a tile of neighbouring lines advances together, so the
//! inner loop runs along the input's contiguous dim.

use super::access::Access;
use super::parallel::{run_chunks, run_tasks_with};
use super::reduce::{collapse, offsets, Accumulate, Dim};
use super::strided::{SendPtr, PAR_GRAIN};
use crate::backend::{CumulativeOp, View};
use crate::{DType, Element, Error, Result};
use half::{bf16, f16};
use num_traits::{One, Zero};

/// Lines per tile when lines advance together.
const TILE: usize = 512;

/// The lines of a scan: the other dims (strides of input and output), and the scanned dim.
struct Lines {
    kept: Vec<Dim<2>>,
    len: usize,
    step: [isize; 2],
    base: [isize; 2],
    n_lines: usize,
}

pub(crate) fn cumulative(op: CumulativeOp, src: View, dim: usize, dst: View) -> Result<()> {
    let (sl, dl) = (src.layout, dst.layout);
    let nd = sl.ndim();
    let internal = |what: String| {
        Error::invalid(
            op.name(),
            format!("internal error in the CPU scan kernel: {what}"),
        )
    };
    if dl.shape() != sl.shape()
        || dst.dtype != op.result_dtype(src.dtype)
        || (dim >= nd && !(nd == 0 && dim == 0))
    {
        return Err(internal(format!(
            "input {:?} {}, output {:?} {}, dim {dim}",
            sl.shape(),
            src.dtype,
            dl.shape(),
            dst.dtype
        )));
    }
    let mut kept = Vec::new();
    for d in (0..nd).filter(|&d| d != dim) {
        kept.push((
            sl.shape()[d],
            [sl.strides()[d] as isize, dl.strides()[d] as isize],
        ));
    }
    let (len, step) = if nd == 0 {
        (1, [0, 0])
    } else {
        (
            sl.shape()[dim],
            [sl.strides()[dim] as isize, dl.strides()[dim] as isize],
        )
    };
    let lines = Lines {
        n_lines: kept.iter().map(|d| d.0).product(),
        kept: collapse(kept),
        len,
        step,
        base: [sl.offset() as isize, dl.offset() as isize],
    };
    if lines.n_lines == 0 || len == 0 {
        return Ok(());
    }
    let acc = Access::views(Some(&dst), &[&src]);
    let (ps, pd) = (
        acc.ptr::<u8>(src.storage),
        SendPtr(acc.ptr::<u8>(dst.storage)),
    );
    let sum = op == CumulativeOp::Sum;
    unsafe {
        match src.dtype {
            DType::F64 => float_scan::<f64>(sum, &lines, ps as _, pd),
            DType::F32 => float_scan::<f32>(sum, &lines, ps as _, pd),
            DType::F16 => float_scan::<f16>(sum, &lines, ps as _, pd),
            DType::BF16 => float_scan::<bf16>(sum, &lines, ps as _, pd),
            DType::I64 => int_scan::<i64>(sum, &lines, ps as _, pd),
            DType::I32 => int_scan::<i32>(sum, &lines, ps as _, pd),
            DType::U32 => int_scan::<u32>(sum, &lines, ps as _, pd),
            DType::U8 => int_scan::<u8>(sum, &lines, ps as _, pd),
            DType::I8 => int_scan::<i8>(sum, &lines, ps as _, pd),
            DType::Bool => int_scan::<bool>(sum, &lines, ps as _, pd),
        }
    }
    Ok(())
}

unsafe fn float_scan<T: Accumulate>(sum: bool, l: &Lines, ps: *const T, pd: SendPtr<u8>) {
    type W<T> = <T as Accumulate>::W;
    let pd = pd.get() as *mut T;
    if sum {
        scan(
            l,
            ps,
            pd,
            W::<T>::zero(),
            |a, x: T| a + x.widen(),
            T::narrow,
        )
    } else {
        scan(l, ps, pd, W::<T>::one(), |a, x: T| a * x.widen(), T::narrow)
    }
}

unsafe fn int_scan<T: Element>(sum: bool, l: &Lines, ps: *const T, pd: SendPtr<u8>) {
    let pd = pd.get() as *mut i64;
    if sum {
        scan(l, ps, pd, 0i64, |a, x: T| a.wrapping_add(x.to_i64()), |a| a)
    } else {
        scan(l, ps, pd, 1i64, |a, x: T| a.wrapping_mul(x.to_i64()), |a| a)
    }
}

unsafe fn scan<I: Copy, A: Copy + Send + Sync, O: Copy>(
    l: &Lines,
    src: *const I,
    dst: *mut O,
    init: A,
    step: impl Fn(A, I) -> A + Sync,
    out: impl Fn(A) -> O + Sync,
) {
    let (src, dst) = (SendPtr(src as *mut I), SendPtr(dst));
    let [ss, ds] = l.step;
    let threads = rayon::current_num_threads();
    let parallel = threads >= 2 && l.n_lines.saturating_mul(l.len) >= 2 * PAR_GRAIN;
    let by_lines = match l.kept.last() {
        None => true,
        Some(k) => k.1[0] == 0 || ss.abs() < k.1[0],
    };
    if by_lines {
        let line = |i: usize| {
            let off = offsets(&l.kept, i);
            let (s, d) = (
                src.get().offset(l.base[0] + off[0]),
                dst.get().offset(l.base[1] + off[1]),
            );
            let mut a = init;
            for t in 0..l.len as isize {
                a = step(a, *s.offset(t * ss));
                *d.offset(t * ds) = out(a);
            }
        };
        if parallel {
            run_chunks(l.n_lines, threads * 4, &|s, e| (s..e).for_each(line));
        } else {
            (0..l.n_lines).for_each(line);
        }
        return;
    }
    // lines advance together along the innermost other dim
    let (&(width, kst), outer) = l.kept.split_last().expect("a kept dim");
    let n_tiles = width.div_ceil(TILE);
    let tasks = outer.iter().map(|d| d.0).product::<usize>() * n_tiles;
    let tile = |t: usize, acc: &mut Vec<A>| {
        let (o, tile) = (t / n_tiles, t % n_tiles);
        let off = offsets(outer, o);
        let j0 = (tile * TILE) as isize;
        let w = TILE.min(width - tile * TILE);
        let s0 = src.get().offset(l.base[0] + off[0] + j0 * kst[0]);
        let d0 = dst.get().offset(l.base[1] + off[1] + j0 * kst[1]);
        acc.clear();
        acc.resize(w, init);
        for t in 0..l.len as isize {
            let (s, d) = (s0.offset(t * ss), d0.offset(t * ds));
            if kst == [1, 1] {
                for (j, a) in acc.iter_mut().enumerate() {
                    *a = step(*a, *s.add(j));
                    *d.add(j) = out(*a);
                }
            } else {
                for (j, a) in acc.iter_mut().enumerate() {
                    let j = j as isize;
                    *a = step(*a, *s.offset(j * kst[0]));
                    *d.offset(j * kst[1]) = out(*a);
                }
            }
        }
    };
    if parallel {
        run_tasks_with(tasks, Vec::new, |acc, t| tile(t, acc));
    } else {
        let mut acc = Vec::new();
        (0..tasks).for_each(|t| tile(t, &mut acc));
    }
}
