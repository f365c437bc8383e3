//! Elementwise kernels: one generic strided driver for any number of inputs ([`map`], and
//! [`map_self`] for ops whose output may be their first input), with the contiguous (and
//! broadcast-scalar) inner loops picked by looking at the plan's inner strides. The ops are
//! not written here: each is a closure over the compute type in its entry of
//! `backend/op_table.rs`, typed and walked by the per-category functions at the end of this
//! file; see [`super::math`] for the scalar math.

use super::access::Access;
use super::math::{self, FloatElem, IntElem, Real};
use super::strided::{stage_buf, Plan, SendPtr, TileOperand, Tiling, PREFETCH_RUNS};
use crate::backend::op_table::{binary_table, match_arms, ternary_table, unary_table};
use crate::backend::{BinaryOp, TernaryOp, UnaryOp, View};
use crate::{DType, Element, Error, Result, Scalar};
use half::{bf16, f16};
use num_traits::{Float, Zero};
use std::mem::MaybeUninit;

/// The output of a tile: written in place, never staged.
fn out_of<O, const N: usize>(t: &Tiling<N>, po: SendPtr<O>, org: [isize; N]) -> TileOperand<O> {
    TileOperand {
        base: po.get().wrapping_offset(org[0]),
        row: t.rows[0],
        col: t.cols[0],
        staged: false,
    }
}

/// The inputs of an elementwise kernel as a tuple of element types, `()` to `(A, B, C)`:
/// what the kernel's closure receives at each position. `K` counts the walk's operands,
/// the output (operand 0 of its [`Plan`]) included; input `k` is operand `k + 1`.
///
/// The methods are per-input steps of the driver ([`walk`]), written once per tuple size by
/// `impl_inputs!` so that the driver itself is written once.
trait Inputs<const K: usize>: Copy {
    /// Each input's base pointer.
    type Ptrs: Copy + Send + Sync;
    /// Each input's part of a tile.
    type Tiles;
    /// Each input's staging buffer (empty unless the tiling stages it).
    type Bufs;
    /// Each input's base pointer in `acc`; `views` are the operands, output first.
    fn ptrs(acc: &Access, views: &[&View; K]) -> Self::Ptrs;
    fn bufs(t: &Tiling<K>) -> Self::Bufs;
    /// Each input's pointer moved to its offset in `off`.
    ///
    /// # Safety
    /// The offsets lie inside each input's storage.
    unsafe fn at(p: Self::Ptrs, off: [isize; K]) -> Self::Ptrs;
    /// Each input's part of the tile at `org` (see [`TileOperand::new`]).
    ///
    /// # Safety
    /// The tile lies inside each input's storage.
    unsafe fn tiles(
        t: &Tiling<K>,
        p: Self::Ptrs,
        org: [isize; K],
        rows: usize,
        cols: usize,
        bufs: &mut Self::Bufs,
    ) -> Self::Tiles;
    /// The first element of each input's run `r` of a tile.
    ///
    /// # Safety
    /// `r` is a run of the tile.
    unsafe fn run(t: &Self::Tiles, r: usize) -> Self::Ptrs;
    /// The strides along a run of a tile (operand 0, the output's, left 0).
    fn cols(t: &Self::Tiles) -> [isize; K];
    fn prefetch(t: &Self::Tiles, r: usize, cols: usize);
    /// The elements `i` steps along `st` (per-operand strides; `st[0]` is the output's).
    ///
    /// # Safety
    /// The elements lie inside each input's storage.
    unsafe fn read(p: Self::Ptrs, i: isize, st: [isize; K]) -> Self;
    /// The elements at `i` of contiguous runs, except that an input whose bit is set in `M`
    /// (bit `k` for input `k`) is broadcast along the run: its element is taken from `b`.
    ///
    /// # Safety
    /// The elements lie inside each input's storage.
    unsafe fn read_run<const M: u32>(p: Self::Ptrs, i: usize, b: &Self) -> Self;
}

macro_rules! impl_inputs {
    ($K:literal; $($X:ident $k:tt),*) => {
        #[allow(unused_variables, unused_mut, clippy::unused_unit)]
        impl<$($X: Copy + Send + Sync),*> Inputs<$K> for ($($X,)*) {
            type Ptrs = ($(SendPtr<$X>,)*);
            type Tiles = ($(TileOperand<$X>,)*);
            type Bufs = ($(Vec<MaybeUninit<$X>>,)*);
            fn ptrs(acc: &Access, views: &[&View; $K]) -> Self::Ptrs {
                ($(SendPtr(acc.ptr::<$X>(views[$k + 1].storage)),)*)
            }
            fn bufs(t: &Tiling<$K>) -> Self::Bufs {
                ($(stage_buf::<$X>(t.staged[$k + 1]),)*)
            }
            #[inline(always)]
            unsafe fn at(p: Self::Ptrs, off: [isize; $K]) -> Self::Ptrs {
                ($(SendPtr(p.$k.get().offset(off[$k + 1])),)*)
            }
            #[inline(always)]
            unsafe fn tiles(
                t: &Tiling<$K>,
                p: Self::Ptrs,
                org: [isize; $K],
                rows: usize,
                cols: usize,
                bufs: &mut Self::Bufs,
            ) -> Self::Tiles {
                ($(TileOperand::new(t, $k + 1, p.$k.get(), org, rows, cols, &mut bufs.$k),)*)
            }
            #[inline(always)]
            unsafe fn run(t: &Self::Tiles, r: usize) -> Self::Ptrs {
                ($(SendPtr(t.$k.run(r)),)*)
            }
            #[inline(always)]
            fn cols(t: &Self::Tiles) -> [isize; $K] {
                let mut c = [0; $K];
                $(c[$k + 1] = t.$k.col;)*
                c
            }
            #[inline(always)]
            fn prefetch(t: &Self::Tiles, r: usize, cols: usize) {
                $(t.$k.prefetch(r, cols);)*
            }
            #[inline(always)]
            unsafe fn read(p: Self::Ptrs, i: isize, st: [isize; $K]) -> Self {
                ($(*p.$k.get().offset(i * st[$k + 1]),)*)
            }
            #[inline(always)]
            unsafe fn read_run<const M: u32>(p: Self::Ptrs, i: usize, b: &Self) -> Self {
                ($(if M >> $k & 1 == 1 { b.$k } else { *p.$k.get().add(i) },)*)
            }
        }
    };
}
impl_inputs!(1;);
impl_inputs!(2; A 0);
impl_inputs!(3; A 0, B 1);
impl_inputs!(4; A 0, B 1, C 2);

/// Inputs whose first element type may be the output's: [`map_self`] then walks the `J`
/// others ([`Split::Rest`]) and reads the first through the output.
trait Split<const K: usize, const J: usize>: Inputs<K> {
    type Head: Copy;
    type Rest: Inputs<J>;
    fn head(p: Self::Ptrs) -> *mut Self::Head;
    fn join(h: Self::Head, r: Self::Rest) -> Self;
}
impl<A: Copy + Send + Sync> Split<2, 1> for (A,) {
    type Head = A;
    type Rest = ();
    fn head(p: Self::Ptrs) -> *mut A {
        p.0.get()
    }
    #[inline(always)]
    fn join(h: A, _: ()) -> Self {
        (h,)
    }
}
impl<A: Copy + Send + Sync, B: Copy + Send + Sync> Split<3, 2> for (A, B) {
    type Head = A;
    type Rest = (B,);
    fn head(p: Self::Ptrs) -> *mut A {
        p.0.get()
    }
    #[inline(always)]
    fn join(h: A, (b,): (B,)) -> Self {
        (h, b)
    }
}
impl<A: Copy + Send + Sync, B: Copy + Send + Sync, C: Copy + Send + Sync> Split<4, 3>
    for (A, B, C)
{
    type Head = A;
    type Rest = (B, C);
    fn head(p: Self::Ptrs) -> *mut A {
        p.0.get()
    }
    #[inline(always)]
    fn join(h: A, (b, c): (B, C)) -> Self {
        (h, b, c)
    }
}

/// The driver: walks `views` (the output, then the inputs) over the output's layout and calls
/// `f(o, x)` at every position, `o` the output element's address and `x` the inputs'
/// elements there. Each position is visited once; runs go in the output's order (in parallel
/// when large), or in tiles when an input is transposed against the output (see
/// [`Plan::tiling`]).
///
/// # Safety
/// `acc` locks every view's storage, each view lies inside its storage, and `f` writes only
/// through `o`.
unsafe fn walk<const K: usize, I: Inputs<K>, O: Copy>(
    acc: &Access,
    views: [&View; K],
    f: impl Fn(*mut O, I) + Sync,
) {
    let l = views[0].layout;
    let plan = Plan::new(
        l.shape(),
        views.map(|v| v.layout.strides()),
        views.map(|v| v.layout.offset()),
    );
    let po = SendPtr(acc.ptr::<O>(views[0].storage));
    let pi = I::ptrs(acc, &views);
    if let Some(t) = plan.tiling() {
        plan.par_tiles(
            &t,
            || I::bufs(&t),
            |bufs, org, rows, cols| {
                let o = out_of(&t, po, org);
                let x = I::tiles(&t, pi, org, rows, cols, bufs);
                let mut st = I::cols(&x);
                st[0] = o.col;
                for r in 0..rows {
                    o.prefetch(r + PREFETCH_RUNS, cols);
                    I::prefetch(&x, r + PREFETCH_RUNS, cols);
                    run(o.run(r), I::run(&x, r), st, cols, &f);
                }
            },
        );
    } else {
        let st = plan.inner_strides();
        plan.par_runs(|off, len| run(po.get().offset(off[0]), I::at(pi, off), st, len, &f));
    }
}

/// One run of [`walk`]: `len` positions `st` apart. A run contiguous in the output and every
/// input — or with one input broadcast along it (stride 0: a scalar operand), when there
/// are several — goes through [`contiguous`], which the compiler vectorises.
#[inline(always)]
unsafe fn run<const K: usize, I: Inputs<K>, O: Copy>(
    o: *mut O,
    p: I::Ptrs,
    st: [isize; K],
    len: usize,
    f: &impl Fn(*mut O, I),
) {
    if st[0] == 1 && st[1..].iter().all(|&s| s == 0 || s == 1) {
        let mask = (1..K).fold(0u32, |m, k| m | ((st[k] == 0) as u32) << (k - 1));
        match mask {
            0 => return contiguous::<0, K, I, O>(o, p, len, f),
            1 if K > 2 => return contiguous::<1, K, I, O>(o, p, len, f),
            2 => return contiguous::<2, K, I, O>(o, p, len, f),
            4 if K > 3 => return contiguous::<4, K, I, O>(o, p, len, f),
            _ => {}
        }
    }
    for i in 0..len as isize {
        f(o.offset(i * st[0]), I::read(p, i, st));
    }
}

/// A contiguous run; the inputs in mask `M` are broadcast along it and read once, before the
/// loop (in it, the compiler could not tell them apart from the output it writes).
#[inline(always)]
unsafe fn contiguous<const M: u32, const K: usize, I: Inputs<K>, O: Copy>(
    o: *mut O,
    p: I::Ptrs,
    len: usize,
    f: &impl Fn(*mut O, I),
) {
    let b = I::read(p, 0, [0; K]);
    for i in 0..len {
        f(o.add(i), I::read_run::<M>(p, i, &b));
    }
}

/// `out = f(inputs)` over the output's layout; `views` are the output, then the inputs.
///
/// # Safety
/// `acc` locks every view's storage and each view lies inside its storage, with the element
/// types `O` and `I`'s.
unsafe fn map<const K: usize, I: Inputs<K>, O: Copy>(
    acc: &Access,
    views: [&View; K],
    f: impl Fn(I) -> O + Sync,
) {
    // SAFETY: `walk` hands out addresses of output elements only
    walk(acc, views, move |o: *mut O, x: I| unsafe { *o = f(x) })
}

/// [`map`] for an op whose first input has the output's type: when that input is the output
/// itself (same storage, same layout: `x.mul_(y)`, `x.neg_()` and the like), the walk is
/// planned over the other operands, `out = f(out, rest)` — the first input is neither staged
/// nor fetched a second time, and the inner loop reads and writes through one pointer, which
/// the compiler can vectorise (through two pointers to the same elements it could not prove
/// the loop safe, and fell back to scalar code). Any other first input goes through [`map`].
/// The same elements are read and written either way, and each element is read before it is
/// written, as a position reads only its own element of an input equal to the output.
///
/// # Safety
/// As [`map`].
unsafe fn map_self<const K: usize, const J: usize, I: Split<K, J, Head = O>, O: Copy>(
    acc: &Access,
    views: [&View; K],
    f: impl Fn(I) -> O + Sync,
) {
    let (dst, a) = (views[0], views[1]);
    let po = acc.ptr::<O>(dst.storage);
    if !(po == I::head(I::ptrs(acc, &views))
        && a.storage.same(dst.storage)
        && a.layout == dst.layout)
    {
        return map(acc, views, f);
    }
    let rest: [&View; J] = std::array::from_fn(|k| views[if k == 0 { 0 } else { k + 1 }]);
    // SAFETY: `walk` hands out addresses of output elements only
    walk(acc, rest, move |o: *mut O, r: I::Rest| unsafe {
        *o = f(I::join(*o, r))
    })
}

// ---------------------------------------------------------------------------------------------
// the ops: one function per (op family, dtype category), each a match on the op that
// `match_arms!` generates from the family's table (backend/op_table.rs), and an `arm!` that
// turns the entry's section for the category into a walk — or an error when it has none (the
// frontend refuses those pairs first).

fn no_kernel(op: &'static str, dtype: DType, hint: &str) -> Error {
    Error::UnsupportedDType {
        op,
        dtype,
        hint: hint.into(),
    }
}

pub(crate) fn unary(op: UnaryOp, src: View, dst: View) -> Result<()> {
    let acc = Access::views(Some(&dst), &[&src]);
    match src.dtype {
        DType::F64 => float_unary::<f64>(op, &src, &dst, &acc),
        DType::F32 => float_unary::<f32>(op, &src, &dst, &acc),
        DType::F16 => float_unary::<f16>(op, &src, &dst, &acc),
        DType::BF16 => float_unary::<bf16>(op, &src, &dst, &acc),
        DType::I64 => int_unary::<i64>(op, &src, &dst, &acc),
        DType::I32 => int_unary::<i32>(op, &src, &dst, &acc),
        DType::U32 => int_unary::<u32>(op, &src, &dst, &acc),
        DType::U8 => int_unary::<u8>(op, &src, &dst, &acc),
        DType::I8 => int_unary::<i8>(op, &src, &dst, &acc),
        DType::Bool => bool_unary(op, &src, &dst, &acc),
    }
}

fn float_unary<T: FloatElem>(op: UnaryOp, src: &View, dst: &View, acc: &Access) -> Result<()> {
    type C<T> = <T as FloatElem>::C;
    macro_rules! arm {
        (keep [$x:ident] $f:expr, $e:literal) => {{
            let g = move |$x: C<T>| -> C<T> { $f };
            unsafe { map_self(acc, [dst, src], move |(x,): (T,)| T::store(g(x.load()))) }
        }};
        (to_bool [$x:ident] $f:expr, $e:literal) => {{
            let g = move |$x: C<T>| -> bool { $f };
            unsafe { map(acc, [dst, src], move |(x,): (T,)| -> bool { g(x.load()) }) }
        }};
        (none) => {
            return Err(no_kernel(op.name(), T::DTYPE, ""))
        };
    }
    unary_table!(match_arms float arm op UnaryOp);
    Ok(())
}

fn int_unary<T: IntElem>(op: UnaryOp, src: &View, dst: &View, acc: &Access) -> Result<()> {
    macro_rules! arm {
        (keep [$x:ident] $f:expr, $e:literal) => {{
            let g = move |$x: T| -> T { $f };
            unsafe { map_self(acc, [dst, src], move |(x,): (T,)| -> T { g(x) }) }
        }};
        (to_bool [$x:ident] $f:expr, $e:literal) => {{
            let g = move |$x: T| -> bool { $f };
            unsafe { map(acc, [dst, src], move |(x,): (T,)| -> bool { g(x) }) }
        }};
        // the frontend converts integer inputs of float ops to f32 first
        (none) => {
            return Err(no_kernel(op.name(), T::DTYPE, " by this kernel"))
        };
    }
    unary_table!(match_arms int arm op UnaryOp);
    Ok(())
}

fn bool_unary(op: UnaryOp, src: &View, dst: &View, acc: &Access) -> Result<()> {
    macro_rules! arm {
        (keep [$x:ident] $f:expr, $e:literal) => {
            (|$x: bool| -> bool { $f }) as fn(bool) -> bool
        };
        (none) => {
            return Err(no_kernel(op.name(), DType::Bool, ""))
        };
    }
    let f = unary_table!(match_arms bool arm op UnaryOp);
    unsafe { map(acc, [dst, src], move |(x,): (bool,)| f(x)) };
    Ok(())
}

pub(crate) fn binary(op: BinaryOp, a: View, b: View, dst: View) -> Result<()> {
    let acc = Access::views(Some(&dst), &[&a, &b]);
    match a.dtype {
        DType::F64 => float_binary::<f64>(op, &a, &b, &dst, &acc),
        DType::F32 => float_binary::<f32>(op, &a, &b, &dst, &acc),
        DType::F16 => float_binary::<f16>(op, &a, &b, &dst, &acc),
        DType::BF16 => float_binary::<bf16>(op, &a, &b, &dst, &acc),
        DType::I64 => int_binary::<i64>(op, &a, &b, &dst, &acc),
        DType::I32 => int_binary::<i32>(op, &a, &b, &dst, &acc),
        DType::U32 => int_binary::<u32>(op, &a, &b, &dst, &acc),
        DType::U8 => int_binary::<u8>(op, &a, &b, &dst, &acc),
        DType::I8 => int_binary::<i8>(op, &a, &b, &dst, &acc),
        DType::Bool => bool_binary(op, &a, &b, &dst, &acc),
    }
}

fn float_binary<T: FloatElem>(
    op: BinaryOp,
    a: &View,
    b: &View,
    dst: &View,
    acc: &Access,
) -> Result<()> {
    type C<T> = <T as FloatElem>::C;
    macro_rules! arm {
        (keep [$x:ident, $y:ident] $f:expr, $e:literal) => {{
            let g = move |$x: C<T>, $y: C<T>| -> C<T> { $f };
            unsafe {
                map_self(acc, [dst, a, b], move |(x, y): (T, T)| {
                    T::store(g(x.load(), y.load()))
                })
            }
        }};
        (to_bool [$x:ident, $y:ident] $f:expr, $e:literal) => {{
            let g = move |$x: C<T>, $y: C<T>| -> bool { $f };
            unsafe {
                map(acc, [dst, a, b], move |(x, y): (T, T)| -> bool {
                    g(x.load(), y.load())
                })
            }
        }};
        (none) => {
            return Err(no_kernel(op.name(), T::DTYPE, ""))
        };
    }
    binary_table!(match_arms float arm op BinaryOp);
    Ok(())
}

/// Scans a view for a value (used to refuse integer division by zero before writing anything).
fn any_elem<T: Element>(v: &View, p: *mut T, pred: impl Fn(T) -> bool) -> bool {
    let l = v.layout;
    let plan = Plan::new(l.shape(), [l.strides()], [l.offset()]);
    let [st] = plan.inner_strides();
    let mut found = false;
    plan.for_each_run(0, plan.numel(), |off, len| {
        for i in 0..len as isize {
            found |= pred(unsafe { *p.offset(off[0] + i * st) });
        }
    });
    found
}

fn int_binary<T: IntElem>(
    op: BinaryOp,
    a: &View,
    b: &View,
    dst: &View,
    acc: &Access,
) -> Result<()> {
    use BinaryOp::*;
    let pb = acc.ptr::<T>(b.storage);
    macro_rules! arm {
        (keep [$x:ident, $y:ident] $f:expr, $e:literal) => {{
            let g = move |$x: T, $y: T| -> T { $f };
            unsafe { map_self(acc, [dst, a, b], move |(x, y): (T, T)| -> T { g(x, y) }) }
        }};
        (to_bool [$x:ident, $y:ident] $f:expr, $e:literal) => {{
            let g = move |$x: T, $y: T| -> bool { $f };
            unsafe { map(acc, [dst, a, b], move |(x, y): (T, T)| -> bool { g(x, y) }) }
        }};
        (none) => {
            return Err(no_kernel(op.name(), T::DTYPE, " by this kernel"))
        };
    }
    if matches!(op, FloorDivide | Remainder) && any_elem(b, pb, |y: T| y.is_zero()) {
        return Err(Error::ZeroDivision { op: op.name() });
    }
    if op == Pow && any_elem(b, pb, |y: T| y.is_negative()) {
        return Err(Error::invalid(
            "pow",
            "integers to negative integer powers are not allowed",
        ));
    }
    binary_table!(match_arms int arm op BinaryOp);
    Ok(())
}

fn bool_binary(op: BinaryOp, a: &View, b: &View, dst: &View, acc: &Access) -> Result<()> {
    macro_rules! arm {
        (keep [$x:ident, $y:ident] $f:expr, $e:literal) => {
            (|$x: bool, $y: bool| -> bool { $f }) as fn(bool, bool) -> bool
        };
        (none) => {
            return Err(no_kernel(op.name(), DType::Bool, ""))
        };
    }
    let f = binary_table!(match_arms bool arm op BinaryOp);
    unsafe { map_self(acc, [dst, a, b], move |(x, y): (bool, bool)| f(x, y)) };
    Ok(())
}

pub(crate) fn ternary(op: TernaryOp, a: View, b: View, c: View, dst: View) -> Result<()> {
    let acc = Access::views(Some(&dst), &[&a, &b, &c]);
    // `where` selects in the output dtype; the others compute in it.
    match dst.dtype {
        DType::F64 => float_ternary::<f64>(op, &a, &b, &c, &dst, &acc),
        DType::F32 => float_ternary::<f32>(op, &a, &b, &c, &dst, &acc),
        DType::F16 => float_ternary::<f16>(op, &a, &b, &c, &dst, &acc),
        DType::BF16 => float_ternary::<bf16>(op, &a, &b, &c, &dst, &acc),
        DType::I64 => int_ternary::<i64>(op, &a, &b, &c, &dst, &acc),
        DType::I32 => int_ternary::<i32>(op, &a, &b, &c, &dst, &acc),
        DType::U32 => int_ternary::<u32>(op, &a, &b, &c, &dst, &acc),
        DType::U8 => int_ternary::<u8>(op, &a, &b, &c, &dst, &acc),
        DType::I8 => int_ternary::<i8>(op, &a, &b, &c, &dst, &acc),
        DType::Bool => bool_ternary(op, &a, &b, &c, &dst, &acc),
    }
}

/// `where`: `dst = f(cond, a, b)` with a bool `cond`.
fn select<T: Element>(
    cond: &View,
    a: &View,
    b: &View,
    dst: &View,
    acc: &Access,
    f: impl Fn(bool, T, T) -> T + Sync,
) {
    unsafe {
        map(acc, [dst, cond, a, b], move |(c, x, y): (bool, T, T)| {
            f(c, x, y)
        })
    }
}

fn float_ternary<T: FloatElem>(
    op: TernaryOp,
    a: &View,
    b: &View,
    c: &View,
    dst: &View,
    acc: &Access,
) -> Result<()> {
    type C<T> = <T as FloatElem>::C;
    macro_rules! arm {
        (scalar $v:ident) => {
            C::<T>::c($v.to_f64())
        };
        (keep [$x:ident, $y:ident, $z:ident] $f:expr, $e:literal) => {{
            let g = move |$x: C<T>, $y: C<T>, $z: C<T>| -> C<T> { $f };
            unsafe {
                map_self(acc, [dst, a, b, c], move |(x, y, z): (T, T, T)| {
                    T::store(g(x.load(), y.load(), z.load()))
                })
            }
        }};
        (select [$x:ident, $y:ident, $z:ident] $f:expr, $e:literal) => {
            select::<T>(a, b, c, dst, acc, |$x, $y, $z| $f)
        };
        (none) => {
            return Err(no_kernel(op.name(), T::DTYPE, ""))
        };
    }
    ternary_table!(match_arms float arm op TernaryOp);
    Ok(())
}

fn int_ternary<T: IntElem>(
    op: TernaryOp,
    a: &View,
    b: &View,
    c: &View,
    dst: &View,
    acc: &Access,
) -> Result<()> {
    macro_rules! arm {
        (scalar $v:ident) => {{
            let v: T = Scalar::Int($v.to_i64()).to_elem();
            v
        }};
        (keep [$x:ident, $y:ident, $z:ident] $f:expr, $e:literal) => {{
            let g = move |$x: T, $y: T, $z: T| -> T { $f };
            unsafe {
                map_self(acc, [dst, a, b, c], move |(x, y, z): (T, T, T)| -> T {
                    g(x, y, z)
                })
            }
        }};
        (select [$x:ident, $y:ident, $z:ident] $f:expr, $e:literal) => {
            select::<T>(a, b, c, dst, acc, |$x, $y, $z| $f)
        };
        (none) => {
            return Err(no_kernel(op.name(), T::DTYPE, "; it takes float tensors"))
        };
    }
    ternary_table!(match_arms int arm op TernaryOp);
    Ok(())
}

fn bool_ternary(
    op: TernaryOp,
    a: &View,
    b: &View,
    c: &View,
    dst: &View,
    acc: &Access,
) -> Result<()> {
    macro_rules! arm {
        (scalar $v:ident) => {{
            let _ = $v;
        }};
        (select [$x:ident, $y:ident, $z:ident] $f:expr, $e:literal) => {
            select::<bool>(a, b, c, dst, acc, |$x, $y, $z| $f)
        };
        (none) => {
            return Err(no_kernel(op.name(), DType::Bool, ""))
        };
    }
    ternary_table!(match_arms bool arm op TernaryOp);
    Ok(())
}
