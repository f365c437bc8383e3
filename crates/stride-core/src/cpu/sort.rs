//! Sorting and selection kernels.
//!
//! Every dtype maps its values to unsigned integer keys whose order is stride's total order
//! (NaN above +∞ and all NaNs equal, `-0.0 == 0.0`); a key packed with the element's position
//! in its row (`key << 32 | position`) is unique, so any sort of packed keys gives the stable
//! order, and selections (`topk`, `kthvalue`, `median`) break ties by position,
//! deterministically. Long rows sort by LSD radix on the key bytes (a byte that is the same
//! everywhere costs no pass); short ones by comparison. `topk` with a small `k` keeps a heap
//! of the `k` best while scanning. Rows run in parallel.

use super::access::Access;
use super::math::{FloatElem, Real};
use super::parallel::{par_map, split_ranges};
use super::strided::{Plan, SendPtr, PAR_GRAIN};
use crate::backend::common::check::internal;
use crate::backend::sort::{
    check_1d, check_bincount_operands, check_histc_operands, check_searchsorted_operands,
    check_unique_operands, dim_len, SortedRows,
};
use crate::backend::View;
use crate::{with_dtype, DType, Element, Error, Layout, Result};
use half::{bf16, f16};
use std::collections::BinaryHeap;

/// An unsigned key and its packing with a row position.
pub(crate) trait Key:
    Copy + Ord + Send + Sync + 'static + std::ops::Not<Output = Self>
{
    /// `key << 32 | position`.
    type P: Packed;
    const BITS: u32;
    fn pack(self, pos: u32) -> Self::P;
}
/// A packed key: ordering compares the key, then the position.
pub(crate) trait Packed: Copy + Ord + Send + Sync + Default + 'static {
    fn pos(self) -> u32;
    /// The byte of the key starting at key bit `shift`.
    fn digit(self, shift: u32) -> usize;
}
impl Packed for u64 {
    #[inline(always)]
    fn pos(self) -> u32 {
        self as u32
    }
    #[inline(always)]
    fn digit(self, shift: u32) -> usize {
        ((self >> (32 + shift)) & 0xff) as usize
    }
}
impl Packed for u128 {
    #[inline(always)]
    fn pos(self) -> u32 {
        self as u32
    }
    #[inline(always)]
    fn digit(self, shift: u32) -> usize {
        ((self >> (32 + shift)) & 0xff) as usize
    }
}
macro_rules! key {
    ($k:ty, $p:ty) => {
        impl Key for $k {
            type P = $p;
            const BITS: u32 = <$k>::BITS;
            #[inline(always)]
            fn pack(self, pos: u32) -> $p {
                ((self as $p) << 32) | pos as $p
            }
        }
    };
}
key!(u8, u64);
key!(u16, u64);
key!(u32, u64);
key!(u64, u128);

/// A dtype's map to [`Key`]s.
pub(crate) trait SortKey: Element {
    type K: Key;
    fn key(self) -> Self::K;
    #[inline(always)]
    fn is_nan_(self) -> bool {
        false
    }
}
macro_rules! float_key {
    ($t:ty, $k:ty, $bits:expr, $nan:expr) => {
        impl SortKey for $t {
            type K = $k;
            #[inline(always)]
            fn key(self) -> $k {
                if $nan(self) {
                    return <$k>::MAX;
                }
                let mut b: $k = $bits(self);
                if b == 1 << (<$k>::BITS - 1) {
                    b = 0; // -0.0 sorts as 0.0
                }
                if b >> (<$k>::BITS - 1) == 1 {
                    !b
                } else {
                    b | (1 << (<$k>::BITS - 1))
                }
            }
            #[inline(always)]
            fn is_nan_(self) -> bool {
                $nan(self)
            }
        }
    };
}
float_key!(f32, u32, f32::to_bits, f32::is_nan);
float_key!(f64, u64, f64::to_bits, f64::is_nan);
float_key!(f16, u16, f16::to_bits, f16::is_nan);
float_key!(bf16, u16, bf16::to_bits, bf16::is_nan);
macro_rules! int_key {
    ($t:ty, $k:ty, $flip:expr) => {
        impl SortKey for $t {
            type K = $k;
            #[inline(always)]
            fn key(self) -> $k {
                (self as $k) ^ $flip
            }
        }
    };
}
int_key!(i64, u64, 1 << 63);
int_key!(i32, u32, 1 << 31);
int_key!(u32, u32, 0);
int_key!(u8, u8, 0);
int_key!(i8, u8, 0x80);
impl SortKey for bool {
    type K = u8;
    #[inline(always)]
    fn key(self) -> u8 {
        self as u8
    }
}

/// Runs `$body` with `$T` bound to the type of a dtype (all dtypes have sort keys).
macro_rules! with_sort_type {
    ($dtype:expr, $T:ident => $body:expr) => {
        with_dtype!($dtype, $T => $body)
    };
}

/// Rows up to this length sort by comparison.
const SMALL_ROW: usize = 1024;

/// Sorts packed keys (stable order, since positions make them unique).
fn sort_packed<P: Packed>(a: &mut Vec<P>, tmp: &mut Vec<P>, key_bits: u32) {
    if a.len() <= SMALL_ROW {
        a.sort_unstable();
    } else {
        radix_sort(a, tmp, key_bits);
    }
}

/// LSD radix sort on the key bytes of packed keys; passes whose byte is the same for every
/// element are skipped.
fn radix_sort<P: Packed>(a: &mut Vec<P>, tmp: &mut Vec<P>, key_bits: u32) {
    tmp.clear();
    tmp.resize(a.len(), P::default());
    if radix_lsd(a, tmp, (key_bits / 8) as usize) {
        std::mem::swap(a, tmp);
    }
}

/// LSD radix sort of `a` on key bytes `0..bytes`, using `tmp` (same length) as scratch.
/// Returns whether the sorted result ended up in `tmp`.
fn radix_lsd<P: Packed>(a: &mut [P], tmp: &mut [P], bytes: usize) -> bool {
    let n = a.len();
    if n <= SMALL_ROW {
        a.sort_unstable();
        return false;
    }
    let mut hist = vec![[0usize; 256]; bytes];
    for &x in a.iter() {
        for (p, h) in hist.iter_mut().enumerate() {
            h[x.digit(8 * p as u32)] += 1;
        }
    }
    let (mut src, mut dst) = (a, tmp);
    let mut in_tmp = false;
    for (p, h) in hist.iter().enumerate() {
        if h.contains(&n) {
            continue;
        }
        let mut offs = [0usize; 256];
        let mut acc = 0;
        for d in 0..256 {
            offs[d] = acc;
            acc += h[d];
        }
        let shift = 8 * p as u32;
        let out = dst.as_mut_ptr();
        for &x in src.iter() {
            let d = x.digit(shift);
            // SAFETY: offs[d] < n: the offsets partition 0..n by the histogram of this pass.
            unsafe { *out.add(*offs.get_unchecked(d)) = x };
            offs[d] += 1;
        }
        std::mem::swap(&mut src, &mut dst);
        in_tmp = !in_tmp;
    }
    in_tmp
}

/// Rows at least this long are sorted by all threads together.
const PAR_ROW: usize = 1 << 16;

/// A radix sort split over threads, for long rows: one pass counts every key byte (per
/// chunk), one pass partitions by the highest byte that varies (stable: output ranges are
/// digit-major, chunk-minor), then each bucket — now small enough for the caches — is sorted
/// by [`radix_lsd`] on the lower bytes, buckets in parallel.
fn radix_sort_par<P: Packed>(a: &mut Vec<P>, tmp: &mut Vec<P>, key_bits: u32) {
    let n = a.len();
    let bytes = (key_bits / 8) as usize;
    let chunks = split_ranges(n, 1 << 14);
    if chunks.len() < 2 {
        return radix_sort(a, tmp, key_bits);
    }
    let src = SendPtr(a.as_mut_ptr());
    let hists: Vec<Vec<[usize; 256]>> = par_map(&chunks, |s, e| {
        let mut h = vec![[0usize; 256]; bytes];
        // SAFETY: s..e lies inside `a`.
        for x in unsafe { std::slice::from_raw_parts(src.get().add(s), e - s) } {
            for (b, hb) in h.iter_mut().enumerate() {
                hb[x.digit(8 * b as u32)] += 1;
            }
        }
        h
    });
    let total = |b: usize, d: usize| hists.iter().map(|h| h[b][d]).sum::<usize>();
    let Some(top) = (0..bytes)
        .rev()
        .find(|&b| (0..256).all(|d| total(b, d) != n))
    else {
        return; // all keys equal: the positions are already in order
    };
    // partition by byte `top` into tmp
    let mut offs = vec![[0usize; 256]; chunks.len()];
    let mut starts = [0usize; 257];
    let mut acc = 0;
    for d in 0..256 {
        starts[d] = acc;
        for c in 0..chunks.len() {
            offs[c][d] = acc;
            acc += hists[c][top][d];
        }
    }
    starts[256] = n;
    tmp.clear();
    tmp.resize(n, P::default());
    let dst = SendPtr(tmp.as_mut_ptr());
    let jobs: Vec<(usize, usize)> = (0..chunks.len()).map(|c| (c, c + 1)).collect();
    let shift = 8 * top as u32;
    par_map(&jobs, |c, _| {
        let (s, e) = chunks[c];
        let mut o = offs[c];
        // SAFETY: chunk c owns the output positions offs[c][d]..+hists[c][top][d] for every
        // digit d, disjoint from every other chunk's and inside `tmp`.
        unsafe {
            for x in std::slice::from_raw_parts(src.get().add(s), e - s) {
                let d = x.digit(shift);
                *dst.get().add(*o.get_unchecked(d)) = *x;
                *o.get_unchecked_mut(d) += 1;
            }
        }
    });
    // sort each bucket on the lower bytes; the result goes back into `a`
    let buckets: Vec<(usize, usize)> = (0..256)
        .map(|d| (starts[d], starts[d + 1]))
        .filter(|(s, e)| e > s)
        .collect();
    par_map(&buckets, |s, e| {
        // SAFETY: buckets are disjoint ranges of both buffers.
        let (t, o) = unsafe {
            (
                std::slice::from_raw_parts_mut(dst.get().add(s), e - s),
                std::slice::from_raw_parts_mut(src.get().add(s), e - s),
            )
        };
        if !radix_lsd(t, o, top) {
            o.copy_from_slice(t);
        }
    });
}

/// Per-task scratch buffers.
#[derive(Default)]
struct Scratch<P> {
    keys: Vec<P>,
    tmp: Vec<P>,
}

/// Calls `f(scratch, offsets)` once per row: for each position of `outer` (the shape with the
/// op's dim set to 1), the offsets of every operand. Rows run in parallel; each task has its
/// own scratch.
fn for_rows<const N: usize, S: Default>(
    outer: &[usize],
    layouts: [&Layout; N],
    row_work: usize,
    f: impl Fn(&mut S, [isize; N]) + Sync + Send,
) {
    let plan = Plan::new(
        outer,
        layouts.map(|l| l.strides()),
        layouts.map(|l| l.offset()),
    );
    let inner = plan.inner_strides();
    let ranges = split_ranges(plan.numel(), (PAR_GRAIN / row_work.max(1)).max(1));
    par_map(&ranges, |s, e| {
        let mut scratch = S::default();
        plan.for_each_run(s, e, |off, len| {
            for i in 0..len as isize {
                f(&mut scratch, std::array::from_fn(|k| off[k] + i * inner[k]));
            }
        })
    });
}

fn outer_shape(shape: &[usize], dim: usize) -> Vec<usize> {
    let mut o = shape.to_vec();
    if !o.is_empty() {
        o[dim] = 1;
    }
    o
}

fn dim_stride(l: &Layout, dim: usize) -> isize {
    l.strides().get(dim).map_or(0, |&s| s as isize)
}

/// The packed keys of a row (`descending`: reversed key order).
#[inline(always)]
unsafe fn load_row<T: SortKey>(
    keys: &mut Vec<<T::K as Key>::P>,
    x: *const T,
    n: usize,
    st: isize,
    descending: bool,
) {
    keys.clear();
    keys.reserve(n);
    if descending {
        keys.extend((0..n).map(|j| (!(*x.offset(j as isize * st)).key()).pack(j as u32)));
    } else {
        keys.extend((0..n).map(|j| (*x.offset(j as isize * st)).key().pack(j as u32)));
    }
}

pub(crate) fn sort(
    src: View,
    dim: usize,
    descending: bool,
    values: View,
    indices: View,
) -> Result<()> {
    let n = dim_len(src.layout, dim);
    if src.layout.numel() == 0 {
        return Ok(());
    }
    let acc = Access::new_outs(&[values.storage, indices.storage], &[src.storage]);
    let (ss, vs, is) = (
        dim_stride(src.layout, dim),
        dim_stride(values.layout, dim),
        dim_stride(indices.layout, dim),
    );
    let pi = SendPtr(acc.ptr::<i64>(indices.storage));
    with_sort_type!(src.dtype, T => unsafe {
        let (ps, pv) = (SendPtr(acc.ptr::<T>(src.storage)), SendPtr(acc.ptr::<T>(values.storage)));
        let outer = outer_shape(src.layout.shape(), dim);
        let row = |sc: &mut Scratch<<<T as SortKey>::K as Key>::P>, off: [isize; 3], par: bool| {
            let x = SendPtr(ps.get().offset(off[0]));
            let (v, ix) = (SendPtr(pv.get().offset(off[1])), SendPtr(pi.get().offset(off[2])));
            if par {
                load_row_par::<T>(&mut sc.keys, x.get(), n, ss, descending);
                radix_sort_par(&mut sc.keys, &mut sc.tmp, <T as SortKey>::K::BITS);
            } else {
                load_row::<T>(&mut sc.keys, x.get(), n, ss, descending);
                sort_packed(&mut sc.keys, &mut sc.tmp, <T as SortKey>::K::BITS);
            }
            let keys = &sc.keys;
            let write = |s: usize, e: usize| {
                for (j, p) in keys[s..e].iter().enumerate() {
                    let (j, pos) = ((s + j) as isize, p.pos() as isize);
                    *v.get().offset(j * vs) = *x.get().offset(pos * ss);
                    *ix.get().offset(j * is) = pos as i64;
                }
            };
            if par {
                par_map(&split_ranges(n, PAR_GRAIN), write);
            } else {
                write(0, n);
            }
        };
        if n >= PAR_ROW {
            // long rows: each sorted by every thread
            for_rows(&outer, [src.layout, values.layout, indices.layout], usize::MAX,
                |sc: &mut Scratch<<<T as SortKey>::K as Key>::P>, off| row(sc, off, true));
        } else {
            for_rows(&outer, [src.layout, values.layout, indices.layout], n * 8,
                |sc: &mut Scratch<<<T as SortKey>::K as Key>::P>, off| row(sc, off, false));
        }
    });
    Ok(())
}

/// [`load_row`] split over threads (for long rows).
unsafe fn load_row_par<T: SortKey>(
    keys: &mut Vec<<T::K as Key>::P>,
    x: *const T,
    n: usize,
    st: isize,
    descending: bool,
) {
    keys.clear();
    keys.resize(n, Default::default());
    let (k, x) = (SendPtr(keys.as_mut_ptr()), SendPtr(x as *mut T));
    par_map(&split_ranges(n, PAR_GRAIN), |s, e| {
        for j in s..e {
            let key = (*x.get().offset(j as isize * st)).key();
            *k.get().add(j) = if descending { !key } else { key }.pack(j as u32);
        }
    });
}

pub(crate) fn topk(
    src: View,
    dim: usize,
    k: usize,
    largest: bool,
    values: View,
    indices: View,
) -> Result<()> {
    let n = dim_len(src.layout, dim);
    if values.layout.numel() == 0 {
        return Ok(());
    }
    let acc = Access::new_outs(&[values.storage, indices.storage], &[src.storage]);
    let (ss, vs, is) = (
        dim_stride(src.layout, dim),
        dim_stride(values.layout, dim),
        dim_stride(indices.layout, dim),
    );
    let pi = SendPtr(acc.ptr::<i64>(indices.storage));
    with_sort_type!(src.dtype, T => unsafe {
        let (ps, pv) = (SendPtr(acc.ptr::<T>(src.storage)), SendPtr(acc.ptr::<T>(values.storage)));
        let outer = outer_shape(src.layout.shape(), dim);
        for_rows(&outer, [src.layout, values.layout, indices.layout], n * 2,
            |sc: &mut Scratch<<<T as SortKey>::K as Key>::P>, off| {
                let x = ps.get().offset(off[0]);
                select_first::<T>(&mut sc.keys, &mut sc.tmp, x, n, ss, k, largest);
                let (v, ix) = (pv.get().offset(off[1]), pi.get().offset(off[2]));
                for (j, p) in sc.keys.iter().take(k).enumerate() {
                    let pos = p.pos() as isize;
                    *v.offset(j as isize * vs) = *x.offset(pos * ss);
                    *ix.offset(j as isize * is) = pos as i64;
                }
            });
    });
    Ok(())
}

/// Leaves the first `k` packed keys of a row, in order, at the front of `keys`.
unsafe fn select_first<T: SortKey>(
    keys: &mut Vec<<T::K as Key>::P>,
    tmp: &mut Vec<<T::K as Key>::P>,
    x: *const T,
    n: usize,
    st: isize,
    k: usize,
    largest: bool,
) {
    if k == 0 {
        keys.clear();
        return;
    }
    if k * 16 < n {
        // A max-heap of the k best so far; a later element with an equal key has a larger
        // position, so it never displaces an earlier one.
        let mut heap: BinaryHeap<<T::K as Key>::P> = BinaryHeap::with_capacity(k + 1);
        for j in 0..k {
            let key = (*x.offset(j as isize * st)).key();
            heap.push(if largest { !key } else { key }.pack(j as u32));
        }
        let mut worst = *heap.peek().unwrap();
        for j in k..n {
            let key = (*x.offset(j as isize * st)).key();
            let p = if largest { !key } else { key }.pack(j as u32);
            if p < worst {
                *heap.peek_mut().unwrap() = p;
                worst = *heap.peek().unwrap();
            }
        }
        *keys = heap.into_sorted_vec();
    } else {
        load_row::<T>(keys, x, n, st, largest);
        if k < n {
            keys.select_nth_unstable(k - 1);
            keys.truncate(k);
            // the selection left the k keys out of position order, and sort_packed's radix
            // sort (rows over SMALL_ROW) orders by key bytes only, keeping the input order of
            // ties: sort the whole packed (key, position) values instead, so ties stay in
            // position order (stable), as the heap path and CUDA give
            keys.sort_unstable();
        } else {
            sort_packed(keys, tmp, T::K::BITS);
        }
    }
}

pub(crate) fn kth(
    src: View,
    dim: usize,
    k: usize,
    nan_propagates: bool,
    values: View,
    indices: View,
) -> Result<()> {
    let n = dim_len(src.layout, dim);
    if values.layout.numel() == 0 {
        return Ok(());
    }
    let acc = Access::new_outs(&[values.storage, indices.storage], &[src.storage]);
    let ss = dim_stride(src.layout, dim);
    let pi = SendPtr(acc.ptr::<i64>(indices.storage));
    with_sort_type!(src.dtype, T => unsafe {
        let (ps, pv) = (SendPtr(acc.ptr::<T>(src.storage)), SendPtr(acc.ptr::<T>(values.storage)));
        let outer = outer_shape(src.layout.shape(), dim);
        for_rows(&outer, [src.layout, values.layout, indices.layout], n * 2,
            |sc: &mut Scratch<<<T as SortKey>::K as Key>::P>, off| {
                let x = ps.get().offset(off[0]);
                let first_nan = if nan_propagates {
                    (0..n).find(|&j| (*x.offset(j as isize * ss)).is_nan_())
                } else {
                    None
                };
                let pos = match first_nan {
                    Some(j) => j as isize,
                    None => {
                        load_row::<T>(&mut sc.keys, x, n, ss, false);
                        sc.keys.select_nth_unstable(k).1.pos() as isize
                    }
                };
                *pv.get().offset(off[1]) = *x.offset(pos * ss);
                *pi.get().offset(off[2]) = pos as i64;
            });
    });
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// unique

pub(crate) fn count_unique_consecutive(sorted: View) -> Result<usize> {
    check_1d("unique", &sorted)?;
    let acc = Access::views(None, &[&sorted]);
    let n = sorted.layout.shape()[0];
    let (o, st) = (
        sorted.layout.offset() as isize,
        sorted.layout.strides()[0] as isize,
    );
    Ok(with_dtype!(sorted.dtype, T => unsafe {
        let x = acc.ptr::<T>(sorted.storage).offset(o);
        (0..n).filter(|&i| i == 0 || *x.offset(i as isize * st) != *x.offset((i as isize - 1) * st)).count()
    }))
}

pub(crate) fn unique_consecutive(
    sorted: View,
    values: View,
    group: View,
    counts: View,
) -> Result<()> {
    let op = "unique";
    check_unique_operands(&sorted, &values, &group, &counts)?;
    let (n, g) = (sorted.layout.shape()[0], values.layout.shape()[0]);
    let acc = Access::new_outs(
        &[values.storage, group.storage, counts.storage],
        &[sorted.storage],
    );
    let at = |v: &View| (v.layout.offset() as isize, v.layout.strides()[0] as isize);
    let ((so, ss), (vo, vs), (go, gs), (co, cs)) =
        (at(&sorted), at(&values), at(&group), at(&counts));
    with_dtype!(sorted.dtype, T => unsafe {
        let x = acc.ptr::<T>(sorted.storage).offset(so);
        let v = acc.ptr::<T>(values.storage).offset(vo);
        let gp = acc.ptr::<i64>(group.storage).offset(go);
        let cp = acc.ptr::<i64>(counts.storage).offset(co);
        let mut run: isize = -1;
        let mut start = 0usize;
        for i in 0..n {
            let xi = *x.offset(i as isize * ss);
            if i == 0 || xi != *x.offset((i as isize - 1) * ss) {
                if run >= 0 {
                    *cp.offset(run * cs) = (i - start) as i64;
                }
                run += 1;
                if run as usize >= g {
                    return Err(internal(op, "more runs than counted"));
                }
                start = i;
                *v.offset(run * vs) = xi;
            }
            *gp.offset(i as isize * gs) = run as i64;
        }
        if run >= 0 {
            *cp.offset(run * cs) = (n - start) as i64;
        }
        if (run + 1) as usize != g {
            return Err(internal(op, "fewer runs than counted"));
        }
    });
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// searchsorted, bincount, histc

pub(crate) fn searchsorted(
    seq: View,
    rows: SortedRows,
    values: View,
    right: bool,
    out: View,
) -> Result<()> {
    let shape = values.layout.shape();
    check_searchsorted_operands(&seq, rows, &values, &out)?;
    let acc = Access::views(Some(&out), &[&seq, &values]);
    let plan = Plan::new(
        shape,
        [
            out.layout.strides(),
            values.layout.strides(),
            seq.layout.strides(),
        ],
        [
            out.layout.offset(),
            values.layout.offset(),
            seq.layout.offset(),
        ],
    );
    let [so, sv, sq] = plan.inner_strides();
    let (m, rs) = (rows.len, rows.stride as isize);
    let po = SendPtr(acc.ptr::<i64>(out.storage));
    with_sort_type!(values.dtype, T => unsafe {
        let (pv, pq) = (SendPtr(acc.ptr::<T>(values.storage)), SendPtr(acc.ptr::<T>(seq.storage)));
        plan.par_ranges(|s, e| plan.for_each_run(s, e, |off, len| {
            for i in 0..len as isize {
                let v = (*pv.get().offset(off[1] + i * sv)).key();
                let q = pq.get().offset(off[2] + i * sq);
                let (mut lo, mut hi) = (0usize, m);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    let k = (*q.offset(mid as isize * rs)).key();
                    if if right { k <= v } else { k < v } {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                *po.get().offset(off[0] + i * so) = lo as i64;
            }
        }));
    });
    Ok(())
}

pub(crate) fn bincount(input: View, weights: Option<View>, out: View) -> Result<()> {
    let op = "bincount";
    check_bincount_operands(&input, weights.as_ref(), &out)?;
    let n = input.layout.shape()[0];
    let bins = out.layout.shape()[0];
    let ins: Vec<&View> = std::iter::once(&input).chain(weights.as_ref()).collect();
    let acc = Access::views(Some(&out), &ins);
    let at = |v: &View| (v.layout.offset() as isize, v.layout.strides()[0] as isize);
    let ((io, is), (oo, os)) = (at(&input), at(&out));
    with_dtype!(input.dtype, I => unsafe {
        let x = acc.ptr::<I>(input.storage).offset(io);
        // validate every value before the first write
        for i in 0..n as isize {
            let v = (*x.offset(i * is)).to_i64();
            if v < 0 || v as usize >= bins {
                return Err(Error::IndexOutOfRange { op, index: v, dim: 0, size: bins });
            }
        }
        macro_rules! accumulate {
            ($W:ty, $w:expr) => {{
                let o = acc.ptr::<$W>(out.storage).offset(oo);
                for i in 0..n as isize {
                    let v = (*x.offset(i * is)).to_i64() as isize;
                    *o.offset(v * os) += $w(i);
                }
            }};
        }
        match (&weights, out.dtype) {
            (None, _) => accumulate!(i64, |_i| 1i64),
            (Some(w), DType::F32) => {
                let (wo, ws) = at(w);
                let wp = acc.ptr::<f32>(w.storage).offset(wo);
                accumulate!(f32, |i: isize| *wp.offset(i * ws))
            }
            (Some(w), DType::F64) => {
                let (wo, ws) = at(w);
                let wp = acc.ptr::<f64>(w.storage).offset(wo);
                accumulate!(f64, |i: isize| *wp.offset(i * ws))
            }
            _ => return Err(internal(op, "weights are f32 or f64")),
        }
    });
    Ok(())
}

pub(crate) fn histc(input: View, lo: f64, hi: f64, out: View) -> Result<()> {
    check_histc_operands(&input, &out)?;
    let bins = out.layout.shape()[0];
    let acc = Access::views(Some(&out), &[&input]);
    let plan = Plan::new(
        input.layout.shape(),
        [input.layout.strides()],
        [input.layout.offset()],
    );
    let ranges = split_ranges(plan.numel(), PAR_GRAIN);
    let [st] = plan.inner_strides();
    macro_rules! go {
        ($T:ty) => {{
            // PyTorch's arithmetic: edges in the input's dtype, pos = (x − lo)·bins / (hi − lo)
            let l = <$T>::from_f64(lo).load();
            let h = <$T>::from_f64(hi).load();
            let nb = <<$T as FloatElem>::C as Real>::c(bins as f64);
            let p = SendPtr(acc.ptr::<$T>(input.storage));
            let parts = par_map(&ranges, |s, e| {
                let mut c = vec![0u64; bins];
                plan.for_each_run(s, e, |off, len| unsafe {
                    let x = p.get().offset(off[0]);
                    for i in 0..len as isize {
                        let v = (*x.offset(i * st)).load();
                        if !(v >= l && v <= h) {
                            continue;
                        }
                        let b = (((v - l) * nb) / (h - l)) as usize;
                        c[b.min(bins - 1)] += 1;
                    }
                });
                c
            });
            let o = acc.ptr::<$T>(out.storage);
            let (oo, os) = (out.layout.offset() as isize, out.layout.strides()[0] as isize);
            for b in 0..bins {
                let total: u64 = parts.iter().map(|c| c[b]).sum();
                unsafe { *o.offset(oo + b as isize * os) = <$T>::from_f64(total as f64) };
            }
        }};
    }
    match input.dtype {
        DType::F64 => go!(f64),
        DType::F32 => go!(f32),
        DType::F16 => go!(f16),
        DType::BF16 => go!(bf16),
        _ => unreachable!("checked above"),
    }
    Ok(())
}
