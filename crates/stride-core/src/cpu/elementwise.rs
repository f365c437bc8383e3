//! Elementwise kernels: one generic strided driver for any number of inputs ([`map`], and
//! [`map_self`] for ops whose output may be their first input), with the contiguous (and
//! broadcast-scalar) inner loops picked by looking at the plan's inner strides. Ops are
//! closures over the compute type; see [`super::math`].

use super::access::Access;
use super::math::{self, FloatElem, IntElem, Real};
use super::strided::{stage_buf, Plan, SendPtr, TileOperand, Tiling, PREFETCH_RUNS};
use crate::backend::{BinaryOp, TernaryOp, UnaryOp, View};
use crate::{DType, Element, Error, Result, Scalar};
use half::{bf16, f16};
use num_traits::{Float, One, Zero};
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
// unary

pub(crate) fn unary(op: UnaryOp, src: View, dst: View) -> Result<()> {
    let acc = Access::views(Some(&dst), &[&src]);
    macro_rules! go {
        ($A:ty, $O:ty, $f:expr) => {{
            let f = $f;
            unsafe { map(&acc, [&dst, &src], move |(x,): ($A,)| -> $O { f(x) }) };
            Ok(())
        }};
    }
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
        DType::Bool => match op {
            UnaryOp::LogicalNot => go!(bool, bool, |x: bool| !x),
            UnaryOp::IsNan | UnaryOp::IsInf => go!(bool, bool, |_x: bool| false),
            UnaryOp::IsFinite => go!(bool, bool, |_x: bool| true),
            UnaryOp::Relu | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => {
                go!(bool, bool, |x: bool| x)
            }
            _ => {
                return Err(Error::UnsupportedDType {
                    op: op.name(),
                    dtype: DType::Bool,
                    hint: String::new(),
                })
            }
        },
    }
}

fn float_unary<T: FloatElem>(op: UnaryOp, src: &View, dst: &View, acc: &Access) -> Result<()> {
    use UnaryOp::*;
    macro_rules! f {
        ($e:expr) => {{
            let g = $e;
            unsafe { map_self(acc, [dst, src], move |(x,): (T,)| T::store(g(x.load()))) }
        }};
    }
    macro_rules! b {
        ($e:expr) => {{
            let g = $e;
            unsafe { map(acc, [dst, src], move |(x,): (T,)| -> bool { g(x.load()) }) }
        }};
    }
    type C<T> = <T as FloatElem>::C;
    match op {
        Neg => f!(|x: C<T>| -x),
        Abs => f!(|x: C<T>| x.abs()),
        Sign => f!(math::sign::<C<T>>),
        Exp => f!(|x: C<T>| x.exp()),
        Exp2 => f!(|x: C<T>| x.exp2()),
        Log => f!(|x: C<T>| x.ln()),
        Log2 => f!(|x: C<T>| x.log2()),
        Log1p => f!(|x: C<T>| x.ln_1p()),
        Expm1 => f!(|x: C<T>| x.exp_m1()),
        Sqrt => f!(|x: C<T>| x.sqrt()),
        Rsqrt => f!(|x: C<T>| x.sqrt().recip()),
        Reciprocal => f!(|x: C<T>| x.recip()),
        Square => f!(|x: C<T>| x * x),
        Sin => f!(|x: C<T>| x.sin()),
        Cos => f!(|x: C<T>| x.cos()),
        Tan => f!(|x: C<T>| x.tan()),
        Tanh => f!(|x: C<T>| x.tanh()),
        Sigmoid => f!(math::sigmoid::<C<T>>),
        Relu => f!(math::relu::<C<T>>),
        GeluErf => f!(math::gelu_erf::<C<T>>),
        GeluTanh => f!(math::gelu_tanh::<C<T>>),
        Silu => f!(|x: C<T>| x * math::sigmoid(x)),
        Softplus => f!(math::softplus::<C<T>>),
        Floor => f!(|x: C<T>| x.floor()),
        Ceil => f!(|x: C<T>| x.ceil()),
        Round => f!(|x: C<T>| x.round_even()),
        Trunc => f!(|x: C<T>| x.trunc()),
        Erf => f!(|x: C<T>| x.erf()),
        IsNan => b!(|x: C<T>| x.is_nan()),
        IsInf => b!(|x: C<T>| x.is_infinite()),
        IsFinite => b!(|x: C<T>| x.is_finite()),
        LogicalNot => b!(|x: C<T>| x == C::<T>::zero()),
    }
    Ok(())
}

fn int_unary<T: IntElem>(op: UnaryOp, src: &View, dst: &View, acc: &Access) -> Result<()> {
    use UnaryOp::*;
    macro_rules! i {
        ($e:expr) => {{
            let g = $e;
            unsafe { map_self(acc, [dst, src], move |(x,): (T,)| -> T { g(x) }) }
        }};
    }
    macro_rules! b {
        ($e:expr) => {{
            let g = $e;
            unsafe { map(acc, [dst, src], move |(x,): (T,)| -> bool { g(x) }) }
        }};
    }
    match op {
        Neg => i!(|x: T| x.w_neg()),
        Abs => i!(|x: T| x.w_abs()),
        Sign => i!(|x: T| x.signum_()),
        Square => i!(|x: T| x.w_mul(x)),
        Relu => i!(|x: T| if x.is_negative() { T::from_i64(0) } else { x }),
        Floor | Ceil | Round | Trunc => i!(|x: T| x),
        IsNan | IsInf => b!(|_x: T| false),
        IsFinite => b!(|_x: T| true),
        LogicalNot => b!(|x: T| x.is_zero()),
        _ => {
            // the frontend converts integer inputs of float ops to f32 first
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: T::DTYPE,
                hint: " by this kernel".into(),
            });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// binary

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
    use BinaryOp::*;
    type C<T> = <T as FloatElem>::C;
    macro_rules! f {
        ($e:expr) => {{
            let g = $e;
            unsafe {
                map_self(acc, [dst, a, b], move |(x, y): (T, T)| {
                    T::store(g(x.load(), y.load()))
                })
            }
        }};
    }
    macro_rules! cmp {
        ($e:expr) => {{
            let g = $e;
            unsafe {
                map(acc, [dst, a, b], move |(x, y): (T, T)| -> bool {
                    g(x.load(), y.load())
                })
            }
        }};
    }
    let z = C::<T>::zero();
    match op {
        Add => f!(|x: C<T>, y: C<T>| x + y),
        Sub => f!(|x: C<T>, y: C<T>| x - y),
        Mul => f!(|x: C<T>, y: C<T>| x * y),
        Div => f!(|x: C<T>, y: C<T>| x / y),
        FloorDivide => f!(math::floor_div_real::<C<T>>),
        Remainder => f!(math::remainder_real::<C<T>>),
        Pow => f!(|x: C<T>, y: C<T>| x.powf(y)),
        Maximum => f!(math::max_nan::<C<T>>),
        Minimum => f!(math::min_nan::<C<T>>),
        ClampMin => f!(math::max_nan::<C<T>>),
        ClampMax => f!(math::min_nan::<C<T>>),
        Atan2 => f!(|x: C<T>, y: C<T>| x.atan2(y)),
        Eq => cmp!(|x: C<T>, y: C<T>| x == y),
        Ne => cmp!(|x: C<T>, y: C<T>| x != y),
        Lt => cmp!(|x: C<T>, y: C<T>| x < y),
        Le => cmp!(|x: C<T>, y: C<T>| x <= y),
        Gt => cmp!(|x: C<T>, y: C<T>| x > y),
        Ge => cmp!(|x: C<T>, y: C<T>| x >= y),
        LogicalAnd => cmp!(move |x: C<T>, y: C<T>| x != z && y != z),
        LogicalOr => cmp!(move |x: C<T>, y: C<T>| x != z || y != z),
        LogicalXor => cmp!(move |x: C<T>, y: C<T>| (x != z) != (y != z)),
        BitwiseAnd | BitwiseOr | BitwiseXor | ShiftLeft | ShiftRight => {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: T::DTYPE,
                hint: String::new(),
            })
        }
    }
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
    macro_rules! i {
        ($e:expr) => {{
            let g = $e;
            unsafe { map_self(acc, [dst, a, b], move |(x, y): (T, T)| -> T { g(x, y) }) }
        }};
    }
    macro_rules! cmp {
        ($e:expr) => {{
            let g = $e;
            unsafe { map(acc, [dst, a, b], move |(x, y): (T, T)| -> bool { g(x, y) }) }
        }};
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
    match op {
        Add => i!(|x: T, y: T| x.w_add(y)),
        Sub => i!(|x: T, y: T| x.w_sub(y)),
        Mul => i!(|x: T, y: T| x.w_mul(y)),
        FloorDivide => i!(|x: T, y: T| x.floor_div(y)),
        Remainder => i!(|x: T, y: T| x.py_rem(y)),
        Pow => i!(|x: T, y: T| x.w_pow(y)),
        Maximum | ClampMin => i!(|x: T, y: T| if x >= y { x } else { y }),
        Minimum | ClampMax => i!(|x: T, y: T| if x <= y { x } else { y }),
        BitwiseAnd => i!(|x: T, y: T| x.and(y)),
        BitwiseOr => i!(|x: T, y: T| x.or(y)),
        BitwiseXor => i!(|x: T, y: T| x.xor(y)),
        ShiftLeft => i!(|x: T, y: T| x.shl_(y)),
        ShiftRight => i!(|x: T, y: T| x.shr_(y)),
        Eq => cmp!(|x: T, y: T| x == y),
        Ne => cmp!(|x: T, y: T| x != y),
        Lt => cmp!(|x: T, y: T| x < y),
        Le => cmp!(|x: T, y: T| x <= y),
        Gt => cmp!(|x: T, y: T| x > y),
        Ge => cmp!(|x: T, y: T| x >= y),
        LogicalAnd => cmp!(|x: T, y: T| !x.is_zero() && !y.is_zero()),
        LogicalOr => cmp!(|x: T, y: T| !x.is_zero() || !y.is_zero()),
        LogicalXor => cmp!(|x: T, y: T| x.is_zero() != y.is_zero()),
        Div | Atan2 => {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: T::DTYPE,
                hint: " by this kernel".into(),
            })
        }
    }
    Ok(())
}

fn bool_binary(op: BinaryOp, a: &View, b: &View, dst: &View, acc: &Access) -> Result<()> {
    use BinaryOp::*;
    let f: fn(bool, bool) -> bool = match op {
        Add | LogicalOr | BitwiseOr | Maximum | ClampMin => |x, y| x | y,
        Mul | LogicalAnd | BitwiseAnd | Minimum | ClampMax => |x, y| x & y,
        LogicalXor | BitwiseXor | Ne => |x, y| x ^ y,
        Eq => |x, y| x == y,
        Lt => |x, y| !x & y,
        Le => |x, y| x <= y,
        Gt => |x, y| x & !y,
        Ge => |x, y| x >= y,
        _ => {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: DType::Bool,
                hint: String::new(),
            })
        }
    };
    unsafe { map_self(acc, [dst, a, b], move |(x, y): (bool, bool)| f(x, y)) };
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ternary

pub(crate) fn ternary(op: TernaryOp, a: View, b: View, c: View, dst: View) -> Result<()> {
    let acc = Access::views(Some(&dst), &[&a, &b, &c]);
    // `where` selects in the output dtype; the others compute in it.
    let dt = dst.dtype;
    match dt {
        DType::F64 => float_ternary::<f64>(op, &a, &b, &c, &dst, &acc),
        DType::F32 => float_ternary::<f32>(op, &a, &b, &c, &dst, &acc),
        DType::F16 => float_ternary::<f16>(op, &a, &b, &c, &dst, &acc),
        DType::BF16 => float_ternary::<bf16>(op, &a, &b, &c, &dst, &acc),
        DType::I64 => int_ternary::<i64>(op, &a, &b, &c, &dst, &acc),
        DType::I32 => int_ternary::<i32>(op, &a, &b, &c, &dst, &acc),
        DType::U32 => int_ternary::<u32>(op, &a, &b, &c, &dst, &acc),
        DType::U8 => int_ternary::<u8>(op, &a, &b, &c, &dst, &acc),
        DType::I8 => int_ternary::<i8>(op, &a, &b, &c, &dst, &acc),
        DType::Bool => match op {
            TernaryOp::Where => {
                where_kernel::<bool>(&a, &b, &c, &dst, &acc);
                Ok(())
            }
            _ => Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: DType::Bool,
                hint: String::new(),
            }),
        },
    }
}

fn where_kernel<T: Element>(cond: &View, a: &View, b: &View, dst: &View, acc: &Access) {
    unsafe {
        map(
            acc,
            [dst, cond, a, b],
            |(c, x, y): (bool, T, T)| {
                if c {
                    x
                } else {
                    y
                }
            },
        )
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
    macro_rules! f {
        ($e:expr) => {{
            let g = $e;
            unsafe {
                map_self(acc, [dst, a, b, c], move |(x, y, z): (T, T, T)| {
                    T::store(g(x.load(), y.load(), z.load()))
                })
            }
        }};
    }
    match op {
        TernaryOp::Where => where_kernel::<T>(a, b, c, dst, acc),
        TernaryOp::Lerp => f!(|s: C<T>, e: C<T>, w: C<T>| {
            let d = e - s;
            if w.abs() < C::<T>::c(0.5) {
                s + w * d
            } else {
                e - d * (C::<T>::one() - w)
            }
        }),
        TernaryOp::Addcmul(v) => {
            let v = C::<T>::c(v.to_f64());
            f!(move |s: C<T>, x: C<T>, y: C<T>| s + v * x * y)
        }
        TernaryOp::Addcdiv(v) => {
            let v = C::<T>::c(v.to_f64());
            f!(move |s: C<T>, x: C<T>, y: C<T>| s + v * (x / y))
        }
        TernaryOp::Clamp => {
            f!(|x: C<T>, lo: C<T>, hi: C<T>| math::min_nan(math::max_nan(x, lo), hi))
        }
    }
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
    macro_rules! i {
        ($e:expr) => {{
            let g = $e;
            unsafe {
                map_self(acc, [dst, a, b, c], move |(x, y, z): (T, T, T)| -> T {
                    g(x, y, z)
                })
            }
        }};
    }
    match op {
        TernaryOp::Where => where_kernel::<T>(a, b, c, dst, acc),
        TernaryOp::Addcmul(v) => {
            let v: T = Scalar::Int(v.to_i64()).to_elem();
            i!(move |s: T, x: T, y: T| s.w_add(v.w_mul(x.w_mul(y))))
        }
        TernaryOp::Clamp => i!(|x: T, lo: T, hi: T| {
            let m = if x >= lo { x } else { lo };
            if m <= hi {
                m
            } else {
                hi
            }
        }),
        TernaryOp::Lerp | TernaryOp::Addcdiv(_) => {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: T::DTYPE,
                hint: "; it takes float tensors".into(),
            })
        }
    }
    Ok(())
}
