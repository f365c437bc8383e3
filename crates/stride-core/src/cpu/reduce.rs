//! Reduction kernels: sum/prod/mean, max/min and their arg forms, all/any/count_nonzero.
//!
//! One engine over a [`Geometry`]: the input's dims split into *kept* dims (one output
//! element per position) and *reduced* dims, each list ordered by the input's strides and
//! merged where contiguous. Two traversals, chosen from the layout alone:
//! - **row mode** (a reduced dim holds the input's smallest stride, e.g. a sum over the last
//!   dim): each output element folds its reduced elements in blocks of [`ROW_BLOCK`]
//!   positions, each block with [`LANES`] independent accumulators (so the loop vectorises),
//!   the blocks merged in order;
//! - **column mode** (a kept dim holds the smallest stride, e.g. a sum over the first dim): a
//!   tile of [`MIN_TILE`]..[`MAX_TILE`] neighbouring outputs advances together, one reduced position at a
//!   time, so the inner loop runs along the input's contiguous dim; partials over
//!   [`COL_BLOCK`] reduced positions are merged in order.
//!
//! How elements are grouped and merged depends only on shapes and strides, never on the
//! number of threads: parallel schedules split work only at those fixed boundaries, so every
//! result is reproducible bit for bit. (Two layouts of the same values may group float sums
//! differently, within rounding.)

use super::access::Access;
use super::math::{FloatElem, Real};
use super::parallel::{map_tasks, run_chunks, run_tasks_with};
use super::strided::{SendPtr, PAR_GRAIN};
use crate::backend::{ArgReduceOp, ReduceOp, View};
use crate::{with_dtype, DType, Element, Error, Layout, Result};
use half::{bf16, f16};
use num_traits::{One, Zero};
use std::marker::PhantomData;

/// Independent accumulators per block in row mode.
const LANES: usize = 8;
/// Reduced positions per block in row mode.
const ROW_BLOCK: usize = 4096;
/// Reduced positions per block in column mode.
const COL_BLOCK: usize = 256;
/// Bounds on the outputs per tile in column mode: long enough that each reduced position
/// streams a long contiguous row, short enough that the tile's accumulators stay in cache.
/// (The tile width never changes a result: each output folds alone.)
const MIN_TILE: usize = 256;
const MAX_TILE: usize = 2048;

// ---------------------------------------------------------------------------------------------
// folds

/// How elements combine: an identity, a step folding one element (with its index over the
/// reduced dims, which only arg reductions read), and an associative merge of two partials
/// (`a` covering earlier positions than `b`).
pub(crate) trait Fold: Sync {
    type In: Copy;
    type Acc: Copy + Send + Sync;
    fn init(&self) -> Self::Acc;
    fn step(&self, acc: Self::Acc, x: Self::In, idx: i64) -> Self::Acc;
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
}

struct FoldFn<I, A, S, M> {
    init: A,
    step: S,
    merge: M,
    _in: PhantomData<fn(I)>,
}

impl<I, A, S, M> Fold for FoldFn<I, A, S, M>
where
    I: Copy,
    A: Copy + Send + Sync,
    S: Fn(A, I, i64) -> A + Sync,
    M: Fn(A, A) -> A + Sync,
{
    type In = I;
    type Acc = A;
    #[inline(always)]
    fn init(&self) -> A {
        self.init
    }
    #[inline(always)]
    fn step(&self, acc: A, x: I, idx: i64) -> A {
        (self.step)(acc, x, idx)
    }
    #[inline(always)]
    fn merge(&self, a: A, b: A) -> A {
        (self.merge)(a, b)
    }
}

fn fold<I, A, S, M>(init: A, step: S, merge: M) -> FoldFn<I, A, S, M> {
    FoldFn {
        init,
        step,
        merge,
        _in: PhantomData,
    }
}

/// The type a float dtype accumulates sums and products in: f64 for f64 and f32, f32 for
/// f16 and bf16.
pub(crate) trait Accumulate: FloatElem {
    type W: Real;
    fn widen(self) -> Self::W;
    fn narrow(w: Self::W) -> Self;
}
impl Accumulate for f64 {
    type W = f64;
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
    #[inline(always)]
    fn narrow(w: f64) -> Self {
        w
    }
}
impl Accumulate for f32 {
    type W = f64;
    #[inline(always)]
    fn widen(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn narrow(w: f64) -> Self {
        w as f32
    }
}
impl Accumulate for f16 {
    type W = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn narrow(w: f32) -> Self {
        f16::from_f32(w)
    }
}
impl Accumulate for bf16 {
    type W = f32;
    /// Exact (bf16 is the top half of an f32), and branch-free so loops vectorise.
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }
    #[inline(always)]
    fn narrow(w: f32) -> Self {
        bf16::from_f32(w)
    }
}

/// How max/min compare a dtype: through a key in which NaN is detectable (f16/bf16 compare
/// as f32, exactly). `LOWEST`/`HIGHEST` are the identities of max/min.
pub(crate) trait Extremum: Element {
    type K: Copy + PartialOrd + Send + Sync;
    const LOWEST: Self::K;
    const HIGHEST: Self::K;
    /// A NaN key (integers and bool have none; never used for them).
    const NAN: Self::K;
    fn key(self) -> Self::K;
    fn unkey(k: Self::K) -> Self;
    fn is_nan(k: Self::K) -> bool;
}
macro_rules! extremum_float {
    ($t:ty, $k:ty, $key:expr, $unkey:expr) => {
        impl Extremum for $t {
            type K = $k;
            const LOWEST: $k = <$k>::NEG_INFINITY;
            const HIGHEST: $k = <$k>::INFINITY;
            const NAN: $k = <$k>::NAN;
            #[inline(always)]
            fn key(self) -> $k {
                $key(self)
            }
            #[inline(always)]
            fn unkey(k: $k) -> Self {
                $unkey(k)
            }
            #[inline(always)]
            fn is_nan(k: $k) -> bool {
                k.is_nan()
            }
        }
    };
}
extremum_float!(f64, f64, |x: f64| x, |k: f64| k);
extremum_float!(f32, f32, |x: f32| x, |k: f32| k);
extremum_float!(f16, f32, |x: f16| x.to_f32(), f16::from_f32);
extremum_float!(
    bf16,
    f32,
    |x: bf16| f32::from_bits((x.to_bits() as u32) << 16),
    bf16::from_f32
);
macro_rules! extremum_exact {
    ($t:ty, $lo:expr, $hi:expr) => {
        impl Extremum for $t {
            type K = $t;
            const LOWEST: $t = $lo;
            const HIGHEST: $t = $hi;
            const NAN: $t = $lo;
            #[inline(always)]
            fn key(self) -> $t {
                self
            }
            #[inline(always)]
            fn unkey(k: $t) -> Self {
                k
            }
            #[inline(always)]
            fn is_nan(_: $t) -> bool {
                false
            }
        }
    };
}
extremum_exact!(i64, i64::MIN, i64::MAX);
extremum_exact!(i32, i32::MIN, i32::MAX);
extremum_exact!(u32, u32::MIN, u32::MAX);
extremum_exact!(u8, u8::MIN, u8::MAX);
extremum_exact!(i8, i8::MIN, i8::MAX);
extremum_exact!(bool, false, true);

// ---------------------------------------------------------------------------------------------
// geometry

/// One dim of an iteration space: its size and a stride per operand.
pub(crate) type Dim<const N: usize> = (usize, [isize; N]);

/// Drops size-1 dims, orders the rest outermost first (by the first operand's stride, then
/// the others', ties keeping the given order), and merges neighbours that are contiguous in
/// every operand.
pub(crate) fn collapse<const N: usize>(mut dims: Vec<Dim<N>>) -> Vec<Dim<N>> {
    dims.retain(|d| d.0 != 1);
    dims.sort_by_key(|d| std::cmp::Reverse(d.1));
    let mut out: Vec<Dim<N>> = Vec::with_capacity(dims.len());
    for (n, st) in dims {
        if let Some(last) = out.last_mut() {
            if (0..N).all(|k| last.1[k] == st[k] * n as isize) {
                last.0 *= n;
                last.1 = st;
                continue;
            }
        }
        out.push((n, st));
    }
    out
}

/// The offsets of position `pos`, counted row-major over `dims`.
#[inline]
pub(crate) fn offsets<const N: usize>(dims: &[Dim<N>], mut pos: usize) -> [isize; N] {
    let mut off = [0isize; N];
    for &(n, st) in dims.iter().rev() {
        let i = (pos % n) as isize;
        pos /= n;
        for k in 0..N {
            off[k] += i * st[k];
        }
    }
    off
}

/// The iteration space of a reduction.
struct Geometry {
    /// Kept dims, outermost first: strides of the input and of the two outputs.
    kept: Vec<Dim<3>>,
    /// Reduced dims, outermost first: strides of the input and of the logical index
    /// (row-major over the reduced dims, which arg reductions report).
    red: Vec<Dim<2>>,
    /// Storage offsets of the input and the two outputs.
    base: [isize; 3],
    n_out: usize,
    n_red: usize,
}

impl Geometry {
    /// `outs` are keepdim layouts (size 1 in the reduced dims).
    fn new(src: &Layout, dims: &[usize], outs: [&Layout; 2]) -> Geometry {
        let (shape, st) = (src.shape(), src.strides());
        let (mut kept, mut red) = (Vec::new(), Vec::new());
        let mut idx_stride = 1isize;
        for d in (0..src.ndim()).rev() {
            if dims.contains(&d) {
                red.push((shape[d], [st[d] as isize, idx_stride]));
                idx_stride *= shape[d] as isize;
            } else {
                let (o0, o1) = (outs[0].strides()[d], outs[1].strides()[d]);
                kept.push((shape[d], [st[d] as isize, o0 as isize, o1 as isize]));
            }
        }
        kept.reverse();
        red.reverse();
        let n_out = kept.iter().map(|d| d.0).product();
        let n_red = red.iter().map(|d| d.0).product();
        Geometry {
            kept: collapse(kept),
            red: collapse(red),
            base: [
                src.offset() as isize,
                outs[0].offset() as isize,
                outs[1].offset() as isize,
            ],
            n_out,
            n_red,
        }
    }
}

/// The reduced positions, as runs along the innermost reduced dim.
struct Runs<'a> {
    outer: &'a [Dim<2>],
    len: usize,
    step: [isize; 2],
}

impl<'a> Runs<'a> {
    fn new(red: &'a [Dim<2>]) -> Self {
        match red.split_last() {
            Some((&(len, step), outer)) => Runs { outer, len, step },
            None => Runs {
                outer: &[],
                len: 1,
                step: [0, 0],
            },
        }
    }
    /// Calls `f(offsets, len)` for the runs covering positions `start..end`.
    #[inline(always)]
    fn each(&self, start: usize, end: usize, mut f: impl FnMut([isize; 2], usize)) {
        let mut p = start;
        while p < end {
            let (o, i) = (p / self.len, p % self.len);
            let n = (self.len - i).min(end - p);
            let mut off = offsets(self.outer, o);
            off[0] += i as isize * self.step[0];
            off[1] += i as isize * self.step[1];
            f(off, n);
            p += n;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the engine

/// Folds every output of `g` and hands each result to `emit(acc, [offset of output 0,
/// offset of output 1])`.
unsafe fn run<F: Fold>(
    f: &F,
    g: &Geometry,
    src: *const F::In,
    emit: impl Fn(F::Acc, [isize; 2]) + Sync,
) {
    if g.n_out == 0 {
        return;
    }
    let src = SendPtr(src as *mut F::In);
    let row = match (g.kept.last(), g.red.last()) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(k), Some(r)) => k.1[0] == 0 || r.1[0] < k.1[0],
    };
    if row {
        row_mode(f, g, src, &emit)
    } else {
        col_mode(f, g, src, &emit)
    }
}

/// Folds positions `start..end` of the reduced set of the output whose input offset is
/// `base`: element `i` of each run goes to lane `i % LANES`; the lanes merge as a tree.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // index loops over the lanes vectorise best
unsafe fn fold_block<F: Fold>(
    f: &F,
    runs: &Runs,
    src: *const F::In,
    base: isize,
    start: usize,
    end: usize,
) -> F::Acc {
    let mut lanes = [f.init(); LANES];
    let [s, si] = runs.step;
    let si = si as i64;
    // index and offset arithmetic wraps: it never overflows for a valid layout, and without
    // overflow checks the unused index of a non-arg fold compiles away in every profile
    let at = |i0: i64, i: usize| i0.wrapping_add((i as i64).wrapping_mul(si));
    runs.each(start, end, |off, len| {
        // the lanes live in registers for the run (not behind the closure's reference)
        let mut l = lanes;
        let p = src.offset(base + off[0]);
        let i0 = off[1] as i64;
        let full = len - len % LANES;
        if s == 1 {
            // a contiguous run, read as a slice: plain chunked loops vectorise in every
            // profile (raw-pointer arithmetic carries debug checks that stop it)
            let xs = std::slice::from_raw_parts(p, len);
            let mut chunks = xs.chunks_exact(LANES);
            let mut i = 0usize;
            for c in &mut chunks {
                for j in 0..LANES {
                    l[j] = f.step(l[j], c[j], at(i0, i.wrapping_add(j)));
                }
                i = i.wrapping_add(LANES);
            }
            // the tail: constant lane indices keep the lanes in registers
            let rem = chunks.remainder();
            for j in 0..LANES {
                if let Some(&x) = rem.get(j) {
                    l[j] = f.step(l[j], x, at(i0, full.wrapping_add(j)));
                }
            }
        } else {
            let x = |i: usize| *p.offset((i as isize).wrapping_mul(s));
            let mut i = 0;
            while i < full {
                for j in 0..LANES {
                    let k = i.wrapping_add(j);
                    l[j] = f.step(l[j], x(k), at(i0, k));
                }
                i += LANES;
            }
            for j in 0..LANES {
                if j < len - full {
                    let k = full.wrapping_add(j);
                    l[j] = f.step(l[j], x(k), at(i0, k));
                }
            }
        }
        lanes = l;
    });
    let l = lanes;
    let m = |a, b| f.merge(a, b);
    m(
        m(m(l[0], l[1]), m(l[2], l[3])),
        m(m(l[4], l[5]), m(l[6], l[7])),
    )
}

unsafe fn row_mode<F: Fold>(
    f: &F,
    g: &Geometry,
    src: SendPtr<F::In>,
    emit: &(impl Fn(F::Acc, [isize; 2]) + Sync),
) {
    let runs = Runs::new(&g.red);
    let nb = g.n_red.div_ceil(ROW_BLOCK).max(1);
    let block = |base: isize, b: usize| {
        let end = ((b + 1) * ROW_BLOCK).min(g.n_red);
        fold_block(f, &runs, src.get(), base, b * ROW_BLOCK, end)
    };
    let out_offsets = |o: usize| {
        let off = offsets(&g.kept, o);
        [g.base[0] + off[0], g.base[1] + off[1], g.base[2] + off[2]]
    };
    let one = |o: usize| {
        let off = out_offsets(o);
        let mut acc = f.init();
        for b in 0..nb {
            acc = f.merge(acc, block(off[0], b));
        }
        emit(acc, [off[1], off[2]]);
    };
    let threads = rayon::current_num_threads();
    if threads < 2 || g.n_out.saturating_mul(g.n_red) < 2 * PAR_GRAIN {
        (0..g.n_out).for_each(one);
    } else if g.n_out >= 2 * threads || nb < 2 {
        run_chunks(g.n_out, threads * 4, &|s, e| (s..e).for_each(one));
    } else {
        // few outputs, long reductions: the blocks of one output in parallel, merged in order
        for o in 0..g.n_out {
            let off = out_offsets(o);
            let parts: Vec<F::Acc> = map_tasks(nb, |b| block(off[0], b));
            let acc = parts.into_iter().fold(f.init(), |a, p| f.merge(a, p));
            emit(acc, [off[1], off[2]]);
        }
    }
}

unsafe fn col_mode<F: Fold>(
    f: &F,
    g: &Geometry,
    src: SendPtr<F::In>,
    emit: &(impl Fn(F::Acc, [isize; 2]) + Sync),
) {
    let (&(width, kst), outer) = g.kept.split_last().expect("column mode has a kept dim");
    let n_outer: usize = outer.iter().map(|d| d.0).product();
    let threads = rayon::current_num_threads();
    let tile_w = width
        .div_ceil(threads.div_ceil(n_outer))
        .clamp(MIN_TILE, MAX_TILE)
        .min(width);
    let n_tiles = width.div_ceil(tile_w);
    let tasks = n_outer * n_tiles;
    let runs = Runs::new(&g.red);
    let nb = g.n_red.div_ceil(COL_BLOCK).max(1);
    let [rs, ri] = runs.step;
    // offsets of the first output of task `t`, and how many outputs it has
    let task = |t: usize| {
        let (o, tile) = (t / n_tiles, t % n_tiles);
        let off = offsets(outer, o);
        let j0 = (tile * tile_w) as isize;
        let base: [isize; 3] = std::array::from_fn(|k| g.base[k] + off[k] + j0 * kst[k]);
        (base, tile_w.min(width - tile * tile_w))
    };
    // block `b` of the reduced positions, for the outputs whose first input offset is `base`
    let block = |base: isize, b: usize, part: &mut [F::Acc]| {
        part.fill(f.init());
        let end = ((b + 1) * COL_BLOCK).min(g.n_red);
        runs.each(b * COL_BLOCK, end, |off, len| {
            let row = |i: usize| {
                src.get()
                    .offset(base + off[0] + (i as isize).wrapping_mul(rs))
                    as *const F::In
            };
            let idx = |i: usize| off[1].wrapping_add((i as isize).wrapping_mul(ri)) as i64;
            let mut i = 0;
            if kst[0] == 1 {
                // rows as slices (vectorised loops in every profile); four reduced positions
                // per sweep: more rows streaming at once, and each output still folds them
                // one after another, in order
                let w = part.len();
                let row = |i: usize| std::slice::from_raw_parts(row(i), w);
                while i + 4 <= len {
                    let (r0, r1, r2, r3) = (row(i), row(i + 1), row(i + 2), row(i + 3));
                    let (i0, i1, i2, i3) = (idx(i), idx(i + 1), idx(i + 2), idx(i + 3));
                    let rows = r0.iter().zip(r1).zip(r2).zip(r3);
                    for (a, (((&x0, &x1), &x2), &x3)) in part.iter_mut().zip(rows) {
                        let v = f.step(f.step(*a, x0, i0), x1, i1);
                        *a = f.step(f.step(v, x2, i2), x3, i3);
                    }
                    i += 4;
                }
                for i in i..len {
                    let k = idx(i);
                    for (a, &x) in part.iter_mut().zip(row(i)) {
                        *a = f.step(*a, x, k);
                    }
                }
            } else {
                for i in 0..len {
                    let (p, k) = (row(i), idx(i));
                    for (j, a) in part.iter_mut().enumerate() {
                        *a = f.step(*a, *p.offset((j as isize).wrapping_mul(kst[0])), k);
                    }
                }
            }
        });
    };
    let finish = |base: [isize; 3], acc: &[F::Acc]| {
        for (j, &a) in acc.iter().enumerate() {
            let j = j as isize;
            emit(a, [base[1] + j * kst[1], base[2] + j * kst[2]]);
        }
    };
    let one = |t: usize, acc: &mut Vec<F::Acc>, part: &mut Vec<F::Acc>| {
        let (base, w) = task(t);
        acc.clear();
        acc.resize(w, f.init());
        part.clear();
        part.resize(w, f.init());
        for b in 0..nb {
            block(base[0], b, part);
            for (a, &p) in acc.iter_mut().zip(part.iter()) {
                *a = f.merge(*a, p);
            }
        }
        finish(base, acc);
    };
    if threads < 2 || g.n_out.saturating_mul(g.n_red) < 2 * PAR_GRAIN {
        let (mut a, mut p) = (Vec::new(), Vec::new());
        (0..tasks).for_each(|t| one(t, &mut a, &mut p));
    } else if tasks >= threads || nb < 2 {
        run_tasks_with(tasks, || (Vec::new(), Vec::new()), |(a, p), t| one(t, a, p));
    } else {
        // few tiles, long reductions: the blocks of one tile in parallel, merged in order
        for t in 0..tasks {
            let (base, w) = task(t);
            let parts: Vec<Vec<F::Acc>> = map_tasks(nb, |b| {
                let mut p = vec![f.init(); w];
                block(base[0], b, &mut p);
                p
            });
            let mut acc = vec![f.init(); w];
            for p in parts {
                for (a, x) in acc.iter_mut().zip(p) {
                    *a = f.merge(*a, x);
                }
            }
            finish(base, &acc);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// checks shared by the entry points

fn internal(op: &'static str, what: String) -> Error {
    Error::invalid(
        op,
        format!("internal error in the CPU reduction kernel: {what}"),
    )
}

/// The backend's own check of what the frontend promised: sorted distinct dims in range, an
/// output of the input's rank with size 1 in each reduced dim, and the expected dtype.
fn check_keepdim(
    op: &'static str,
    src: &View,
    dims: &[usize],
    out: &View,
    dtype: DType,
) -> Result<()> {
    let nd = src.layout.ndim();
    if dims.windows(2).any(|w| w[0] >= w[1]) || dims.iter().any(|&d| d >= nd) {
        return Err(internal(
            op,
            format!("dims {dims:?} for a tensor of {nd} dims"),
        ));
    }
    let want: Vec<usize> = (0..nd)
        .map(|d| {
            if dims.contains(&d) {
                1
            } else {
                src.layout.shape()[d]
            }
        })
        .collect();
    if out.layout.shape() != want.as_slice() {
        return Err(internal(
            op,
            format!("output shape {:?}, expected {want:?}", out.layout.shape()),
        ));
    }
    if out.dtype != dtype {
        return Err(internal(
            op,
            format!("output dtype {}, expected {dtype}", out.dtype),
        ));
    }
    Ok(())
}

fn empty_error(op: &'static str, shape: &[usize], dims: &[usize]) -> Error {
    Error::invalid(
        op,
        format!(
            "cannot reduce over zero elements (input shape {shape:?}, reduced dims {dims:?}): the op has no identity; check numel() first"
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// reduce

pub(crate) fn reduce(op: ReduceOp, src: View, dims: &[usize], dst: View) -> Result<()> {
    let dtype = op.result_dtype(src.dtype)?;
    check_keepdim(op.name(), &src, dims, &dst, dtype)?;
    let g = Geometry::new(src.layout, dims, [dst.layout, dst.layout]);
    if g.n_out == 0 {
        return Ok(());
    }
    if g.n_red == 0 && op.needs_nonempty() {
        return Err(empty_error(op.name(), src.layout.shape(), dims));
    }
    let acc = Access::views(Some(&dst), &[&src]);
    let (ps, pd) = (
        acc.ptr::<u8>(src.storage),
        SendPtr(acc.ptr::<u8>(dst.storage)),
    );
    unsafe {
        match src.dtype {
            DType::F64 => float_reduce::<f64>(op, &g, ps as _, pd),
            DType::F32 => float_reduce::<f32>(op, &g, ps as _, pd),
            DType::F16 => float_reduce::<f16>(op, &g, ps as _, pd),
            DType::BF16 => float_reduce::<bf16>(op, &g, ps as _, pd),
            DType::I64 => int_reduce::<i64>(op, &g, ps as _, pd),
            DType::I32 => int_reduce::<i32>(op, &g, ps as _, pd),
            DType::U32 => int_reduce::<u32>(op, &g, ps as _, pd),
            DType::U8 => int_reduce::<u8>(op, &g, ps as _, pd),
            DType::I8 => int_reduce::<i8>(op, &g, ps as _, pd),
            DType::Bool => int_reduce::<bool>(op, &g, ps as _, pd),
        }
    }
}

/// Writes `O` values at output-0 offsets.
#[inline(always)]
fn writer<A, O: Copy>(pd: SendPtr<u8>, f: impl Fn(A) -> O + Sync) -> impl Fn(A, [isize; 2]) + Sync {
    let p = SendPtr(pd.get() as *mut O);
    move |a, o| unsafe { *p.get().offset(o[0]) = f(a) }
}

unsafe fn float_reduce<T: Accumulate + Extremum>(
    op: ReduceOp,
    g: &Geometry,
    ps: *const T,
    pd: SendPtr<u8>,
) -> Result<()> {
    type W<T> = <T as Accumulate>::W;
    let (zero, one) = (W::<T>::zero(), W::<T>::one());
    match op {
        ReduceOp::Sum => run(
            &fold(zero, |a: W<T>, x: T, _| a + x.widen(), |a, b| a + b),
            g,
            ps,
            writer(pd, T::narrow),
        ),
        ReduceOp::Prod => run(
            &fold(one, |a: W<T>, x: T, _| a * x.widen(), |a, b| a * b),
            g,
            ps,
            writer(pd, T::narrow),
        ),
        ReduceOp::Mean => {
            let n = W::<T>::c(g.n_red as f64);
            run(
                &fold(zero, |a: W<T>, x: T, _| a + x.widen(), |a, b| a + b),
                g,
                ps,
                writer(pd, move |a: W<T>| T::narrow(a / n)),
            )
        }
        ReduceOp::Max | ReduceOp::Min => extremum::<T>(op == ReduceOp::Max, g, ps, pd),
        ReduceOp::All | ReduceOp::Any | ReduceOp::CountNonzero => logical::<T>(op, g, ps, pd),
    }
    Ok(())
}

unsafe fn int_reduce<T: Extremum>(
    op: ReduceOp,
    g: &Geometry,
    ps: *const T,
    pd: SendPtr<u8>,
) -> Result<()> {
    match op {
        ReduceOp::Sum => run(
            &fold(
                0i64,
                |a: i64, x: T, _| a.wrapping_add(x.to_i64()),
                i64::wrapping_add,
            ),
            g,
            ps,
            writer(pd, |a: i64| a),
        ),
        ReduceOp::Prod => run(
            &fold(
                1i64,
                |a: i64, x: T, _| a.wrapping_mul(x.to_i64()),
                i64::wrapping_mul,
            ),
            g,
            ps,
            writer(pd, |a: i64| a),
        ),
        ReduceOp::Mean => {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: T::DTYPE,
                hint: "; it takes float tensors".into(),
            })
        }
        ReduceOp::Max | ReduceOp::Min => extremum::<T>(op == ReduceOp::Max, g, ps, pd),
        ReduceOp::All | ReduceOp::Any | ReduceOp::CountNonzero => logical::<T>(op, g, ps, pd),
    }
    Ok(())
}

/// max/min with NaN propagating. The accumulator is (extremum so far, NaN seen): a plain
/// `>`/`<` select vectorises where a NaN-sticky one does not; a NaN seen anywhere makes the
/// result NaN.
unsafe fn extremum<T: Extremum>(max: bool, g: &Geometry, ps: *const T, pd: SendPtr<u8>) {
    type A<T> = (<T as Extremum>::K, bool);
    let out = writer(pd, |(k, nan): A<T>| T::unkey(if nan { T::NAN } else { k }));
    if max {
        let m = |a: A<T>, b: A<T>| (if a.0 > b.0 { a.0 } else { b.0 }, a.1 | b.1);
        let step = move |a: A<T>, x: T, _| {
            let k = x.key();
            m(a, (k, T::is_nan(k)))
        };
        run(&fold((T::LOWEST, false), step, m), g, ps, out)
    } else {
        let m = |a: A<T>, b: A<T>| (if a.0 < b.0 { a.0 } else { b.0 }, a.1 | b.1);
        let step = move |a: A<T>, x: T, _| {
            let k = x.key();
            m(a, (k, T::is_nan(k)))
        };
        run(&fold((T::HIGHEST, false), step, m), g, ps, out)
    }
}

unsafe fn logical<T: Element>(op: ReduceOp, g: &Geometry, ps: *const T, pd: SendPtr<u8>) {
    match op {
        ReduceOp::All => run(
            &fold(true, |a, x: T, _| a & x.is_nonzero(), |a, b| a & b),
            g,
            ps,
            writer(pd, |a: bool| a),
        ),
        ReduceOp::Any => run(
            &fold(false, |a, x: T, _| a | x.is_nonzero(), |a, b| a | b),
            g,
            ps,
            writer(pd, |a: bool| a),
        ),
        _ => run(
            &fold(
                0i64,
                |a: i64, x: T, _| a + x.is_nonzero() as i64,
                |a, b| a + b,
            ),
            g,
            ps,
            writer(pd, |a: i64| a),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// arg reductions

pub(crate) fn arg_reduce(
    op: ArgReduceOp,
    src: View,
    dims: &[usize],
    values: Option<View>,
    indices: View,
) -> Result<()> {
    if let Some(v) = &values {
        check_keepdim(op.name(), &src, dims, v, src.dtype)?;
        if v.storage.same(indices.storage) {
            return Err(internal(
                op.name(),
                "values and indices share a storage".into(),
            ));
        }
    }
    check_keepdim(op.name(), &src, dims, &indices, DType::I64)?;
    let vl = values.map_or(indices.layout, |v| v.layout);
    let g = Geometry::new(src.layout, dims, [vl, indices.layout]);
    if g.n_out == 0 {
        return Ok(());
    }
    if g.n_red == 0 {
        return Err(empty_error(op.name(), src.layout.shape(), dims));
    }
    let outs: Vec<_> = values
        .iter()
        .map(|v| v.storage)
        .chain([indices.storage])
        .collect();
    let acc = Access::outputs(&outs, &[src.storage]);
    let ps = acc.ptr::<u8>(src.storage);
    let pv = values.map(|v| SendPtr(acc.ptr::<u8>(v.storage)));
    let pi = SendPtr(acc.ptr::<i64>(indices.storage));
    with_dtype!(src.dtype, T => unsafe { arg_typed::<T>(op, &g, ps as *const T, pv, pi) });
    Ok(())
}

unsafe fn arg_typed<T: Extremum>(
    op: ArgReduceOp,
    g: &Geometry,
    ps: *const T,
    pv: Option<SendPtr<u8>>,
    pi: SendPtr<i64>,
) {
    let pv = pv.map(|p| SendPtr(p.get() as *mut T));
    let emit = move |(k, i): (T::K, i64), o: [isize; 2]| {
        if let Some(pv) = pv {
            *pv.get().offset(o[0]) = T::unkey(k);
        }
        *pi.get().offset(o[1]) = i;
    };
    // whether candidate `x` beats `y`: NaN beats numbers, then the larger (smaller) value,
    // then the smaller index — so the merge order never matters
    let beats = move |x: (T::K, i64), y: (T::K, i64), max: bool| {
        let (xn, yn) = (T::is_nan(x.0), T::is_nan(y.0));
        if xn || yn {
            return xn && (!yn || x.1 < y.1);
        }
        (if max { x.0 > y.0 } else { x.0 < y.0 }) || (x.0 == y.0 && x.1 < y.1)
    };
    let max = op == ArgReduceOp::Max;
    let init = (if max { T::LOWEST } else { T::HIGHEST }, i64::MAX);
    let pick = move |a: (T::K, i64), b: (T::K, i64)| if beats(b, a, max) { b } else { a };
    run(
        &fold(init, move |a, x: T, i| pick(a, (x.key(), i)), pick),
        g,
        ps,
        emit,
    )
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    /// The same bits with 1, 2 and 3 threads, for every traversal and schedule: row mode
    /// split over outputs and over blocks of one output, column mode split over tiles and
    /// over blocks of one tile, and scans.
    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let data = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.31)
                .collect()
        };
        let x = Tensor::from_vec(data(300 * 530), [300, 530]).unwrap();
        let tall = Tensor::from_vec(data(70_000 * 8), [70_000, 8]).unwrap();
        let cases = |t: &Tensor| -> Vec<Vec<f64>> {
            let mut v = vec![];
            for t in [t, &tall] {
                for dims in [&[0i64][..], &[1], &[]] {
                    v.push(t.sum_dims(dims, false).unwrap().to_f64_vec().unwrap());
                    let d = t.to_dtype(DType::F64).unwrap();
                    v.push(d.sum_dims(dims, false).unwrap().to_f64_vec().unwrap());
                    let h = t.to_dtype(DType::F16).unwrap();
                    v.push(h.mean_dims(dims, false).unwrap().to_f64_vec().unwrap());
                    v.push(
                        t.argmax(dims.first().copied(), false)
                            .unwrap()
                            .to_f64_vec()
                            .unwrap(),
                    );
                    v.push(t.amin(dims, false).unwrap().to_f64_vec().unwrap());
                }
                v.push(
                    t.transpose(0, 1)
                        .unwrap()
                        .sum_dims(&[1], false)
                        .unwrap()
                        .to_f64_vec()
                        .unwrap(),
                );
                v.push(t.cumsum(0).unwrap().to_f64_vec().unwrap());
                v.push(t.cumsum(1).unwrap().to_f64_vec().unwrap());
            }
            v
        };
        let with = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| cases(&x))
        };
        let one = with(1);
        for threads in [2, 3] {
            let other = with(threads);
            for (a, b) in one.iter().zip(&other) {
                let (a, b): (Vec<u64>, Vec<u64>) = (
                    a.iter().map(|v| v.to_bits()).collect(),
                    b.iter().map(|v| v.to_bits()).collect(),
                );
                assert_eq!(a, b, "{threads} threads");
            }
        }
    }
}
