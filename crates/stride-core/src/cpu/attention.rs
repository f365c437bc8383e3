//! Fused attention on the CPU (`backend/attention.rs` has the math and the operand order).
//!
//! Forward and `dq`: one task per (batch, query head, block of [`BLOCK`] query rows), which
//! converts its key/value head to the compute dtype once and keeps one row of scores (O(S)
//! memory, never O(L·S)). `dk`/`dv`: one task per (batch, key/value head, block of keys),
//! walking every query row of the head's group in order. Every sum is taken in a fixed order:
//! the same bits whatever the number of threads.

use super::access::Access;
use super::math::{FloatElem, Real};
use super::parallel::run_tasks;
use crate::backend::attention::{Attention, AttnMask, Dims};
use crate::backend::View;
use crate::{DType, Error, Result};
use half::{bf16, f16};
use num_traits::{Float, Zero};
use std::ops::Range;

/// Query rows (forward, `dq`) or keys (`dk`/`dv`) per task.
const BLOCK: usize = 64;

fn internal(op: &'static str, what: &str) -> Error {
    Error::invalid(
        op,
        format!("internal error in the CPU attention kernel: {what} (please report)"),
    )
}

/// A 4-d operand `(b, h, i, d)` (a 3-d one has stride 0 for `d`): base pointer, offset and
/// strides in elements.
#[derive(Clone, Copy)]
pub(super) struct Quad<T> {
    p: *mut T,
    off: isize,
    st: [isize; 4],
}
// SAFETY: the pointer addresses a storage locked for the whole call; tasks write disjoint
// elements (see the callers).
unsafe impl<T> Send for Quad<T> {}
unsafe impl<T> Sync for Quad<T> {}

impl<T> Quad<T> {
    pub(super) fn of(acc: &Access, v: &View) -> Quad<T> {
        let mut st = [0isize; 4];
        for (s, &x) in st.iter_mut().zip(v.layout.strides()) {
            *s = x as isize;
        }
        Quad {
            p: acc.ptr::<T>(v.storage),
            off: v.layout.offset() as isize,
            st,
        }
    }
    /// # Safety
    /// The index must be inside the view this was made from.
    #[inline(always)]
    pub(super) unsafe fn at(&self, b: usize, h: usize, i: usize, d: usize) -> *mut T {
        self.p.offset(
            self.off
                + b as isize * self.st[0]
                + h as isize * self.st[1]
                + i as isize * self.st[2]
                + d as isize * self.st[3],
        )
    }
}

/// The mask operand, typed.
#[derive(Clone, Copy)]
enum Mask<C> {
    None,
    Bool(Quad<bool>),
    Add(Quad<C>),
}

/// The operands every pass reads, typed, and the call's sizes.
struct Ops<T: FloatElem> {
    a: Attention,
    d: Dims,
    q: Quad<T>,
    k: Quad<T>,
    v: Quad<T>,
    mask: Mask<T::C>,
}

impl<T: FloatElem> Ops<T> {
    /// Row `i` of head `(b, h)` of `x` in the compute dtype, into `out` (`n` elements).
    ///
    /// # Safety
    /// The row must be inside `x`'s view.
    unsafe fn row(x: &Quad<T>, b: usize, h: usize, i: usize, out: &mut [T::C]) {
        for (d, o) in out.iter_mut().enumerate() {
            *o = (*x.at(b, h, i, d)).load();
        }
    }

    /// Rows `0..n` of head `(b, h)` of `x`, each `w` wide, one after another.
    ///
    /// # Safety
    /// The rows must be inside `x`'s view.
    unsafe fn rows(x: &Quad<T>, b: usize, h: usize, r0: usize, r1: usize, w: usize) -> Vec<T::C> {
        let mut out = vec![T::C::zero(); (r1 - r0) * w];
        for (r, chunk) in (r0..r1).zip(out.chunks_mut(w.max(1))) {
            Self::row(x, b, h, r, &mut chunk[..w]);
        }
        out
    }

    /// The score of query `qi` (row `i` of query head `h`) against key row `kj` (key `j`):
    /// `−∞` where masked.
    ///
    /// # Safety
    /// `(b, h, i, j)` must be inside the mask's view.
    #[inline(always)]
    unsafe fn score(
        &self,
        b: usize,
        h: usize,
        i: usize,
        j: usize,
        qi: &[T::C],
        kj: &[T::C],
    ) -> T::C {
        if !self.a.visible(i, j) {
            return T::C::neg_infinity();
        }
        let s = dot(qi, kj) * T::C::c(self.a.scale);
        match self.mask {
            Mask::None => s,
            Mask::Bool(m) => match *m.at(b, h, i, j) {
                true => s,
                false => T::C::neg_infinity(),
            },
            Mask::Add(m) => s + *m.at(b, h, i, j),
        }
    }
}

/// Runs `f(b, h, hk, rows)` for every (batch, query head, block of [`BLOCK`] query rows) —
/// `hk` the key/value head `h` reads — one task each.
fn per_query_block(d: Dims, groups: usize, f: &(dyn Fn(usize, usize, usize, Range<usize>) + Sync)) {
    let blocks = d.l.div_ceil(BLOCK);
    run_tasks(d.b * d.hq * blocks, &|t| {
        let (bh, blk) = (t / blocks, t % blocks);
        let (b, h) = (bh / d.hq, bh % d.hq);
        f(b, h, h / groups, blk * BLOCK..((blk + 1) * BLOCK).min(d.l));
    });
}

/// `a·b` in eight interleaved partial sums, added pairwise at the end: a fixed order (the
/// same bits on any thread count) that the compiler can vectorise, where one running sum
/// serialises every add.
#[inline(always)]
pub(super) fn dot<C: Real>(a: &[C], b: &[C]) -> C {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [C::zero(); 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] = acc[l] + x[l] * y[l];
        }
    }
    for (l, (&x, &y)) in ar.iter().zip(br).enumerate() {
        acc[l] = acc[l] + x * y;
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

/// Keys `0..end` may be visible to query row `i`; the causal rule hides every later one.
#[inline(always)]
fn keys_end(a: &Attention, i: usize, s: usize) -> usize {
    match a.causal {
        Some(off) => (i as i64 + off + 1).clamp(0, s as i64) as usize,
        None => s,
    }
}

/// Query rows `start..` may see key `j`; the causal rule hides it from every earlier one.
#[inline(always)]
fn rows_start(a: &Attention, j: usize, l: usize) -> usize {
    match a.causal {
        Some(off) => (j as i64 - off).clamp(0, l as i64) as usize,
        None => 0,
    }
}

pub(super) fn lock<'a>(outs: &[View<'a>], ins: &[View<'a>]) -> Access<'a> {
    let o: Vec<_> = outs.iter().map(|v| v.storage).collect();
    let i: Vec<_> = ins.iter().map(|v| v.storage).collect();
    Access::outputs(&o, &i)
}

fn ops<T: FloatElem>(
    a: Attention,
    acc: &Access,
    q: &View,
    k: &View,
    v: &View,
    mask: Option<&View>,
) -> Ops<T> {
    let mask = match (a.mask, mask) {
        (AttnMask::Bool, Some(m)) => Mask::Bool(Quad::of(acc, m)),
        (AttnMask::Additive, Some(m)) => Mask::Add(Quad::of(acc, m)),
        _ => Mask::None,
    };
    Ops {
        a,
        d: Dims::of(q, k, v),
        q: Quad::of(acc, q),
        k: Quad::of(acc, k),
        v: Quad::of(acc, v),
        mask,
    }
}

/// Forward: see `backend/attention.rs`.
pub(crate) fn attention(a: Attention, i: &[View], o: &[View]) -> Result<()> {
    match i[0].dtype {
        DType::F64 => forward::<f64>(a, i, o),
        DType::F32 => forward::<f32>(a, i, o),
        DType::F16 => forward::<f16>(a, i, o),
        DType::BF16 => forward::<bf16>(a, i, o),
        _ => Err(internal("attention", "a non-float operand")),
    }
}

/// Backward: see `backend/attention.rs`.
pub(crate) fn attention_backward(a: Attention, i: &[View], o: &[View]) -> Result<()> {
    match i[0].dtype {
        DType::F64 => backward::<f64>(a, i, o),
        DType::F32 => backward::<f32>(a, i, o),
        DType::F16 => backward::<f16>(a, i, o),
        DType::BF16 => backward::<bf16>(a, i, o),
        _ => Err(internal("attention_backward", "a non-float operand")),
    }
}

fn forward<T: FloatElem>(a: Attention, i: &[View], o: &[View]) -> Result<()> {
    let f = a.fwd(i, o);
    let acc = lock(o, i);
    let x = ops::<T>(a, &acc, &f.q, &f.k, &f.v, f.mask.as_ref());
    let out = Quad::<T>::of(&acc, &f.o);
    let lse = Quad::<T::C>::of(&acc, &f.lse);
    let d = x.d;
    let zero = T::C::zero();
    let ninf = T::C::neg_infinity();
    per_query_block(d, a.groups, &|b, h, hk, rows| {
        // SAFETY: every index below is inside its view (the frontend checked the shapes);
        // this task writes its rows of o and lse of head (b, h) alone.
        unsafe {
            let ks = Ops::<T>::rows(&x.k, b, hk, 0, d.s, d.e);
            let vs = Ops::<T>::rows(&x.v, b, hk, 0, d.s, d.ev);
            let mut qi = vec![zero; d.e];
            let mut sc = vec![zero; d.s];
            let mut oi = vec![zero; d.ev];
            for r in rows {
                Ops::<T>::row(&x.q, b, h, r, &mut qi);
                let mut m = ninf;
                let end = keys_end(&a, r, d.s);
                for j in 0..end {
                    let s = x.score(b, h, r, j, &qi, &ks[j * d.e..(j + 1) * d.e]);
                    sc[j] = s;
                    // NaN-propagating max: a NaN score makes the row NaN
                    if s > m || s.is_nan() && !m.is_nan() {
                        m = s;
                    }
                }
                if m == ninf {
                    // every key masked: zeros, and lse −∞ (the backward skips the row)
                    for c in 0..d.ev {
                        *out.at(b, h, r, c) = T::store(zero);
                    }
                    *lse.at(b, h, r, 0) = ninf;
                    continue;
                }
                oi.iter_mut().for_each(|v| *v = zero);
                let mut l = zero;
                for j in 0..end {
                    if sc[j] == ninf {
                        continue;
                    }
                    let p = (sc[j] - m).exp();
                    l = l + p;
                    for (ov, &vv) in oi.iter_mut().zip(&vs[j * d.ev..(j + 1) * d.ev]) {
                        *ov = *ov + p * vv;
                    }
                }
                for (c, &ov) in oi.iter().enumerate() {
                    *out.at(b, h, r, c) = T::store(ov / l);
                }
                *lse.at(b, h, r, 0) = m + l.ln();
            }
        }
    });
    Ok(())
}

fn backward<T: FloatElem>(a: Attention, i: &[View], o: &[View]) -> Result<()> {
    let g = a.bwd(i, o);
    let acc = lock(o, i);
    let x = ops::<T>(a, &acc, &g.q, &g.k, &g.v, g.mask.as_ref());
    let d_o = Quad::<T>::of(&acc, &g.d_o);
    let out = Quad::<T>::of(&acc, &g.o);
    let lse = Quad::<T::C>::of(&acc, &g.lse);
    let (dq, dk, dv) = (
        Quad::<T>::of(&acc, &g.dq),
        Quad::<T>::of(&acc, &g.dk),
        Quad::<T>::of(&acc, &g.dv),
    );
    let d = x.d;
    let zero = T::C::zero();
    let ninf = T::C::neg_infinity();
    let scale = T::C::c(a.scale);
    // D_i = do_i·o_i for every query row, in order
    let mut dd = vec![zero; d.b * d.hq * d.l];
    for (n, di) in dd.iter_mut().enumerate() {
        let (bh, r) = (n / d.l.max(1), n % d.l.max(1));
        let (b, h) = (bh / d.hq, bh % d.hq);
        // SAFETY: (b, h, r, c) is inside do and o
        *di = (0..d.ev).fold(zero, |s, c| unsafe {
            s + (*d_o.at(b, h, r, c)).load() * (*out.at(b, h, r, c)).load()
        });
    }
    let dd = &dd;
    let row_lse = |b: usize, h: usize, r: usize| unsafe { *lse.at(b, h, r, 0) };

    // dq: per (batch, query head, block of query rows)
    per_query_block(d, a.groups, &|b, h, hk, rows| {
        // SAFETY: indices inside their views; this task writes its rows of dq alone
        unsafe {
            let ks = Ops::<T>::rows(&x.k, b, hk, 0, d.s, d.e);
            let vs = Ops::<T>::rows(&x.v, b, hk, 0, d.s, d.ev);
            let (mut qi, mut gi, mut acc) = (vec![zero; d.e], vec![zero; d.ev], vec![zero; d.e]);
            for r in rows {
                acc.iter_mut().for_each(|v| *v = zero);
                let m = row_lse(b, h, r);
                if m != ninf {
                    Ops::<T>::row(&x.q, b, h, r, &mut qi);
                    Ops::<T>::row(&d_o, b, h, r, &mut gi);
                    let di = dd[(b * d.hq + h) * d.l + r];
                    for j in 0..keys_end(&a, r, d.s) {
                        let kj = &ks[j * d.e..(j + 1) * d.e];
                        let s = x.score(b, h, r, j, &qi, kj);
                        if s == ninf {
                            continue;
                        }
                        let p = (s - m).exp();
                        let ds = p * (dot(&gi, &vs[j * d.ev..(j + 1) * d.ev]) - di);
                        for (av, &kv) in acc.iter_mut().zip(kj) {
                            *av = *av + ds * kv;
                        }
                    }
                }
                for (c, &av) in acc.iter().enumerate() {
                    *dq.at(b, h, r, c) = T::store(av * scale);
                }
            }
        }
    });

    // dk, dv: per (batch, key/value head, block of keys), the group's query rows in order
    let kblocks = d.s.div_ceil(BLOCK);
    run_tasks(d.b * d.hk * kblocks, &|t| {
        let (bh, blk) = (t / kblocks, t % kblocks);
        let (b, hk) = (bh / d.hk, bh % d.hk);
        let (j0, j1) = (blk * BLOCK, ((blk + 1) * BLOCK).min(d.s));
        // SAFETY: indices inside their views; this task writes its keys' rows of dk, dv alone
        unsafe {
            let ks = Ops::<T>::rows(&x.k, b, hk, j0, j1, d.e);
            let vs = Ops::<T>::rows(&x.v, b, hk, j0, j1, d.ev);
            let mut gk = vec![zero; (j1 - j0) * d.e];
            let mut gv = vec![zero; (j1 - j0) * d.ev];
            let (mut qi, mut gi) = (vec![zero; d.e], vec![zero; d.ev]);
            for h in hk * a.groups..(hk + 1) * a.groups {
                for r in rows_start(&a, j0, d.l)..d.l {
                    let m = row_lse(b, h, r);
                    if m == ninf {
                        continue;
                    }
                    Ops::<T>::row(&x.q, b, h, r, &mut qi);
                    Ops::<T>::row(&d_o, b, h, r, &mut gi);
                    let di = dd[(b * d.hq + h) * d.l + r];
                    for j in j0..j1.min(keys_end(&a, r, d.s)) {
                        let n = j - j0;
                        let s = x.score(b, h, r, j, &qi, &ks[n * d.e..(n + 1) * d.e]);
                        if s == ninf {
                            continue;
                        }
                        let p = (s - m).exp();
                        let vj = &vs[n * d.ev..(n + 1) * d.ev];
                        let ds = p * (dot(&gi, vj) - di);
                        for (a, &gv_) in gv[n * d.ev..(n + 1) * d.ev].iter_mut().zip(&gi) {
                            *a = *a + p * gv_;
                        }
                        for (a, &qv) in gk[n * d.e..(n + 1) * d.e].iter_mut().zip(&qi) {
                            *a = *a + ds * qv;
                        }
                    }
                }
            }
            for j in j0..j1 {
                let n = j - j0;
                for c in 0..d.e {
                    *dk.at(b, hk, j, c) = T::store(gk[n * d.e + c] * scale);
                }
                for c in 0..d.ev {
                    *dv.at(b, hk, j, c) = T::store(gv[n * d.ev + c]);
                }
            }
        }
    });
    Ok(())
}
