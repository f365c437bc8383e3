//! Attention over a key/value cache on the CPU (`backend/cached_attention.rs` has the math
//! and the operand order): the lengths are checked first (nothing is written on a bad one),
//! the new keys (rotated) and values are written into the caches, then one task per (batch,
//! query head) attends its `L` rows with the two passes of the CPU attention kernel (scores
//! and their maximum, then the weighted sum): sums in a fixed order, the same bits whatever
//! the number of threads.

use super::attention::{dot, lock, Quad};
use super::math::{FloatElem, Real};
use super::parallel::run_tasks;
use crate::backend::cached_attention::{bad_len, CachedAttention, CachedDims, CachedOperands};
use crate::backend::View;
use crate::{DType, Error, Result, RotaryStyle};
use half::{bf16, f16};
use num_traits::{Float, Zero};

pub(crate) fn cached_attention(a: CachedAttention, i: &[View], o: &[View]) -> Result<()> {
    match i[0].dtype {
        DType::F64 => run::<f64>(a, i, o),
        DType::F32 => run::<f32>(a, i, o),
        DType::F16 => run::<f16>(a, i, o),
        DType::BF16 => run::<bf16>(a, i, o),
        d => Err(Error::invalid(
            "attention_with_kv_cache",
            format!("internal error: a {d} query reached the CPU kernel (please report)"),
        )),
    }
}

/// Row `b`'s `(len, start)` (start 0 without the operand, and at least 0).
///
/// # Safety
/// `b` must be a row of the views `len` and `start` were made from.
unsafe fn bounds(len: &Quad<i64>, start: &Option<Quad<i64>>, b: usize) -> (i64, i64) {
    let s = start.as_ref().map_or(0, |s| *s.at(b, 0, 0, 0));
    (*len.at(b, 0, 0, 0), s.max(0))
}

/// The rotary tables of a call with rotary, typed: `(style, cos, sin)`.
type Rotation<C> = Option<(RotaryStyle, Quad<C>, Quad<C>)>;

/// The pair `(a, b)` indices of rotated pair `p` of a head of `half` pairs.
#[inline(always)]
fn pair(style: RotaryStyle, half: usize, p: usize) -> (usize, usize) {
    match style {
        RotaryStyle::HalfSplit => (p, p + half),
        RotaryStyle::Interleaved => (2 * p, 2 * p + 1),
    }
}

/// Row `(b, h, i)` of `x` (`e` features) in the compute dtype, rotated to position `pos` and
/// rounded to `T` when the call has rotary tables — `Tensor::rotary`'s arithmetic.
///
/// # Safety
/// The row and the tables' row `pos` must be inside their views.
#[allow(clippy::too_many_arguments)]
unsafe fn rotated_row<T: FloatElem>(
    x: &Quad<T>,
    (b, h, i): (usize, usize, usize),
    e: usize,
    rot: &Rotation<T::C>,
    half: usize,
    pos: usize,
    out: &mut [T],
) {
    for (d, o) in out.iter_mut().enumerate().take(e) {
        *o = *x.at(b, h, i, d);
    }
    if let Some((style, cos, sin)) = rot {
        for p in 0..half {
            let (ia, ib) = pair(*style, half, p);
            let (xa, xb) = (out[ia].load(), out[ib].load());
            let (c, s) = (*cos.at(pos, p, 0, 0), *sin.at(pos, p, 0, 0));
            out[ia] = T::store(xa * c - xb * s);
            out[ib] = T::store(xa * s + xb * c);
        }
    }
}

fn run<T: FloatElem>(a: CachedAttention, i: &[View], o: &[View]) -> Result<()> {
    let ops: CachedOperands = a.operands(i, o);
    let d: CachedDims = ops.dims();
    let acc = lock(o, i);
    let q = Quad::<T>::of(&acc, &ops.q);
    let (kn, vn) = (Quad::<T>::of(&acc, &ops.k), Quad::<T>::of(&acc, &ops.v));
    let out = Quad::<T>::of(&acc, &ops.o);
    let (kc, vc) = (
        Quad::<T>::of(&acc, &ops.k_cache),
        Quad::<T>::of(&acc, &ops.v_cache),
    );
    let len = Quad::<i64>::of(&acc, &ops.len);
    let start = ops.start.as_ref().map(|s| Quad::<i64>::of(&acc, s));
    let rot = match (a.rotary, &ops.tables) {
        (Some(style), Some((c, s))) => {
            Some((style, Quad::<T::C>::of(&acc, c), Quad::<T::C>::of(&acc, s)))
        }
        _ => None,
    };
    // SAFETY (every block below): the frontend checked every operand's shape, so each index
    // is inside its view; the checks below keep the cache positions and table rows inside.
    let rows: Vec<(i64, i64)> = (0..d.b)
        .map(|b| unsafe { bounds(&len, &start, b) })
        .collect();
    // a valid length keeps every position below the capacity, so inside the tables (the
    // frontend checked that they have a row per cache position)
    for &(n, _) in &rows {
        if n < 0 || n as u64 + d.l as u64 > d.cap as u64 {
            return Err(bad_len(n, d.l, d.cap));
        }
    }
    let position = |b: usize, i: usize| -> usize {
        let (n, s) = rows[b];
        (n + i as i64 - s).max(0) as usize
    };
    // the new keys (rotated) and values, into the caches at len..len + L
    let mut row = vec![T::store(T::C::zero()); d.e.max(d.ev)];
    for (b, &(at, _)) in rows.iter().enumerate() {
        let at = at as usize;
        for h in 0..d.hk {
            for t in 0..d.l {
                unsafe {
                    rotated_row(&kn, (b, h, t), d.e, &rot, d.half, position(b, t), &mut row);
                    for (c, &x) in row.iter().enumerate().take(d.e) {
                        *kc.at(b, h, at + t, c) = x;
                    }
                    for c in 0..d.ev {
                        *vc.at(b, h, at + t, c) = *vn.at(b, h, t, c);
                    }
                }
            }
        }
    }
    let zero = T::C::zero();
    let ninf = T::C::neg_infinity();
    let scale = T::C::c(a.scale);
    run_tasks(d.b * d.hq, &|task| {
        let (b, h) = (task / d.hq, task % d.hq);
        let hk = h / a.groups;
        let (n, s) = rows[b];
        let first = s as usize;
        let mut qt = vec![T::store(zero); d.e];
        let mut qi = vec![zero; d.e];
        let mut kj = vec![zero; d.e];
        let mut oi = vec![zero; d.ev];
        let mut sc: Vec<T::C> = Vec::new();
        for t in 0..d.l {
            let end = n as usize + t + 1; // keys first..end
            unsafe {
                rotated_row(&q, (b, h, t), d.e, &rot, d.half, position(b, t), &mut qt);
            }
            for (x, y) in qi.iter_mut().zip(&qt) {
                *x = y.load();
            }
            sc.clear();
            let mut m = ninf;
            for j in first..end {
                for (c, x) in kj.iter_mut().enumerate() {
                    *x = unsafe { (*kc.at(b, hk, j, c)).load() };
                }
                let sj = dot(&qi, &kj) * scale;
                if sj > m || sj.is_nan() && !m.is_nan() {
                    m = sj;
                }
                sc.push(sj);
            }
            oi.iter_mut().for_each(|v| *v = zero);
            if m == ninf {
                // no visible key (or every score −∞): zeros, as stride's attention gives
                for c in 0..d.ev {
                    unsafe { *out.at(b, h, t, c) = T::store(zero) };
                }
                continue;
            }
            let mut l = zero;
            for (j, &sj) in (first..end).zip(&sc) {
                if sj == ninf {
                    continue;
                }
                let p = (sj - m).exp();
                l = l + p;
                for (c, ov) in oi.iter_mut().enumerate() {
                    *ov = *ov + p * unsafe { (*vc.at(b, hk, j, c)).load() };
                }
            }
            for (c, &ov) in oi.iter().enumerate() {
                unsafe { *out.at(b, h, t, c) = T::store(ov / l) };
            }
        }
    });
    Ok(())
}
