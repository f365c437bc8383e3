//! Elementwise kernels: one generic strided loop per arity ([`map1`], [`map2`], [`map3`]),
//! with the contiguous (and broadcast-scalar) inner loops picked by looking at the plan's
//! inner strides. Ops are closures over the compute type; see [`super::math`].

use super::access::Access;
use super::math::{self, FloatElem, IntElem, Real};
use super::strided::{stage_buf, Plan, SendPtr, TileOperand, Tiling, PREFETCH_RUNS};
use crate::backend::{BinaryOp, TernaryOp, UnaryOp, View};
use crate::{DType, Element, Error, Result, Scalar};
use half::{bf16, f16};
use num_traits::{Float, One, Zero};

/// The output of a tile: written in place, never staged.
fn out_of<O, const N: usize>(t: &Tiling<N>, po: SendPtr<O>, org: [isize; N]) -> TileOperand<O> {
    TileOperand {
        base: po.get().wrapping_offset(org[0]),
        row: t.rows[0],
        col: t.cols[0],
        staged: false,
    }
}

/// `out = f(a)` over the output's layout.
unsafe fn map1<A: Copy, O: Copy>(
    dst: &View,
    a: &View,
    po: *mut O,
    pa: *mut A,
    f: impl Fn(A) -> O + Sync,
) {
    let l = dst.layout;
    let plan = Plan::new(
        l.shape(),
        [l.strides(), a.layout.strides()],
        [l.offset(), a.layout.offset()],
    );
    let (po, pa) = (SendPtr(po), SendPtr(pa));
    let run = |o: *mut O, a: *mut A, [so, sa]: [isize; 2], len: usize| {
        if so == 1 && sa == 1 {
            for i in 0..len {
                *o.add(i) = f(*a.add(i));
            }
        } else {
            for i in 0..len as isize {
                *o.offset(i * so) = f(*a.offset(i * sa));
            }
        }
    };
    if let Some(t) = plan.tiling() {
        plan.par_tiles(
            &t,
            || stage_buf::<A>(t.staged[1]),
            |ba, org, rows, cols| {
                let o = out_of(&t, po, org);
                let a = TileOperand::new(&t, 1, pa.get(), org, rows, cols, ba);
                for r in 0..rows {
                    o.prefetch(r + PREFETCH_RUNS, cols);
                    a.prefetch(r + PREFETCH_RUNS, cols);
                    run(o.run(r), a.run(r), [o.col, a.col], cols);
                }
            },
        );
    } else {
        let st = plan.inner_strides();
        plan.par_runs(|off, len| run(po.get().offset(off[0]), pa.get().offset(off[1]), st, len));
    }
}

/// `out = f(a, b)` over the output's layout.
#[allow(clippy::too_many_arguments)]
unsafe fn map2<A: Copy, B: Copy, O: Copy>(
    dst: &View,
    a: &View,
    b: &View,
    po: *mut O,
    pa: *mut A,
    pb: *mut B,
    f: impl Fn(A, B) -> O + Sync,
) {
    let l = dst.layout;
    let plan = Plan::new(
        l.shape(),
        [l.strides(), a.layout.strides(), b.layout.strides()],
        [l.offset(), a.layout.offset(), b.layout.offset()],
    );
    let (po, pa, pb) = (SendPtr(po), SendPtr(pa), SendPtr(pb));
    let run = |o: *mut O, a: *mut A, b: *mut B, [so, sa, sb]: [isize; 3], len: usize| match (
        so, sa, sb,
    ) {
        (1, 1, 1) => {
            for i in 0..len {
                *o.add(i) = f(*a.add(i), *b.add(i));
            }
        }
        (1, 1, 0) => {
            let y = *b;
            for i in 0..len {
                *o.add(i) = f(*a.add(i), y);
            }
        }
        (1, 0, 1) => {
            let x = *a;
            for i in 0..len {
                *o.add(i) = f(x, *b.add(i));
            }
        }
        _ => {
            for i in 0..len as isize {
                *o.offset(i * so) = f(*a.offset(i * sa), *b.offset(i * sb));
            }
        }
    };
    if let Some(t) = plan.tiling() {
        let bufs = || (stage_buf::<A>(t.staged[1]), stage_buf::<B>(t.staged[2]));
        plan.par_tiles(&t, bufs, |(ba, bb), org, rows, cols| {
            let o = out_of(&t, po, org);
            let a = TileOperand::new(&t, 1, pa.get(), org, rows, cols, ba);
            let b = TileOperand::new(&t, 2, pb.get(), org, rows, cols, bb);
            for r in 0..rows {
                o.prefetch(r + PREFETCH_RUNS, cols);
                a.prefetch(r + PREFETCH_RUNS, cols);
                b.prefetch(r + PREFETCH_RUNS, cols);
                run(o.run(r), a.run(r), b.run(r), [o.col, a.col, b.col], cols);
            }
        });
    } else {
        let st = plan.inner_strides();
        plan.par_runs(|off, len| {
            run(
                po.get().offset(off[0]),
                pa.get().offset(off[1]),
                pb.get().offset(off[2]),
                st,
                len,
            )
        });
    }
}

/// `out = f(a, b)` for an output type equal to `a`'s: when `a` is the output itself (same
/// storage, same layout: `x.mul_(y)` and the like), the walk is planned over two operands,
/// `out = f(out, b)` — `a` is neither staged nor fetched a second time, and the inner loop
/// reads and writes through one pointer, which the compiler can vectorise (through two
/// pointers to the same elements it could not prove the loop safe, and fell back to scalar
/// code). Any other `a` goes through [`map2`]. The same elements are read and written either
/// way.
#[allow(clippy::too_many_arguments)]
unsafe fn map2_self<T: Copy, B: Copy>(
    dst: &View,
    a: &View,
    b: &View,
    po: *mut T,
    pa: *mut T,
    pb: *mut B,
    f: impl Fn(T, B) -> T + Sync,
) {
    if !(po == pa && a.storage.same(dst.storage) && a.layout == dst.layout) {
        return map2(dst, a, b, po, pa, pb, f);
    }
    let l = dst.layout;
    let plan = Plan::new(
        l.shape(),
        [l.strides(), b.layout.strides()],
        [l.offset(), b.layout.offset()],
    );
    let (po, pb) = (SendPtr(po), SendPtr(pb));
    let run = |o: *mut T, b: *mut B, [so, sb]: [isize; 2], len: usize| match (so, sb) {
        (1, 1) => {
            for i in 0..len {
                *o.add(i) = f(*o.add(i), *b.add(i));
            }
        }
        (1, 0) => {
            let y = *b;
            for i in 0..len {
                *o.add(i) = f(*o.add(i), y);
            }
        }
        _ => {
            for i in 0..len as isize {
                let o = o.offset(i * so);
                *o = f(*o, *b.offset(i * sb));
            }
        }
    };
    if let Some(t) = plan.tiling() {
        plan.par_tiles(
            &t,
            || stage_buf::<B>(t.staged[1]),
            |bb, org, rows, cols| {
                let o = out_of(&t, po, org);
                let b = TileOperand::new(&t, 1, pb.get(), org, rows, cols, bb);
                for r in 0..rows {
                    o.prefetch(r + PREFETCH_RUNS, cols);
                    b.prefetch(r + PREFETCH_RUNS, cols);
                    run(o.run(r), b.run(r), [o.col, b.col], cols);
                }
            },
        );
    } else {
        let st = plan.inner_strides();
        plan.par_runs(|off, len| run(po.get().offset(off[0]), pb.get().offset(off[1]), st, len));
    }
}

/// `out = f(a, b, c)` over the output's layout.
#[allow(clippy::too_many_arguments)]
unsafe fn map3<A: Copy, B: Copy, C: Copy, O: Copy>(
    dst: &View,
    a: &View,
    b: &View,
    c: &View,
    po: *mut O,
    pa: *mut A,
    pb: *mut B,
    pc: *mut C,
    f: impl Fn(A, B, C) -> O + Sync,
) {
    let l = dst.layout;
    let plan = Plan::new(
        l.shape(),
        [
            l.strides(),
            a.layout.strides(),
            b.layout.strides(),
            c.layout.strides(),
        ],
        [
            l.offset(),
            a.layout.offset(),
            b.layout.offset(),
            c.layout.offset(),
        ],
    );
    let (po, pa, pb, pc) = (SendPtr(po), SendPtr(pa), SendPtr(pb), SendPtr(pc));
    let run = |o: *mut O, a: *mut A, b: *mut B, c: *mut C, st: [isize; 4], len: usize| {
        let [so, sa, sb, sc] = st;
        if st == [1, 1, 1, 1] {
            for i in 0..len {
                *o.add(i) = f(*a.add(i), *b.add(i), *c.add(i));
            }
        } else {
            for i in 0..len as isize {
                *o.offset(i * so) = f(*a.offset(i * sa), *b.offset(i * sb), *c.offset(i * sc));
            }
        }
    };
    if let Some(t) = plan.tiling() {
        let bufs = || {
            let s = t.staged;
            (
                stage_buf::<A>(s[1]),
                stage_buf::<B>(s[2]),
                stage_buf::<C>(s[3]),
            )
        };
        plan.par_tiles(&t, bufs, |(ba, bb, bc), org, rows, cols| {
            let o = out_of(&t, po, org);
            let a = TileOperand::new(&t, 1, pa.get(), org, rows, cols, ba);
            let b = TileOperand::new(&t, 2, pb.get(), org, rows, cols, bb);
            let c = TileOperand::new(&t, 3, pc.get(), org, rows, cols, bc);
            for r in 0..rows {
                o.prefetch(r + PREFETCH_RUNS, cols);
                a.prefetch(r + PREFETCH_RUNS, cols);
                b.prefetch(r + PREFETCH_RUNS, cols);
                c.prefetch(r + PREFETCH_RUNS, cols);
                run(
                    o.run(r),
                    a.run(r),
                    b.run(r),
                    c.run(r),
                    [o.col, a.col, b.col, c.col],
                    cols,
                );
            }
        });
    } else {
        let st = plan.inner_strides();
        plan.par_runs(|off, len| {
            run(
                po.get().offset(off[0]),
                pa.get().offset(off[1]),
                pb.get().offset(off[2]),
                pc.get().offset(off[3]),
                st,
                len,
            )
        });
    }
}

// ---------------------------------------------------------------------------------------------
// unary

pub(crate) fn unary(op: UnaryOp, src: View, dst: View) -> Result<()> {
    let acc = Access::views(Some(&dst), &[&src]);
    macro_rules! go {
        ($A:ty, $O:ty, $f:expr) => {{
            unsafe { map1::<$A, $O>(&dst, &src, acc.ptr(dst.storage), acc.ptr(src.storage), $f) };
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
    let (po, pa) = (acc.ptr::<T>(dst.storage), acc.ptr::<T>(src.storage));
    macro_rules! f {
        ($e:expr) => {{
            let g = $e;
            unsafe { map1::<T, T>(dst, src, po, pa, move |x: T| T::store(g(x.load()))) }
        }};
    }
    macro_rules! b {
        ($e:expr) => {{
            let g = $e;
            unsafe { map1::<T, bool>(dst, src, acc.ptr(dst.storage), pa, move |x: T| g(x.load())) }
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
    let pa = acc.ptr::<T>(src.storage);
    macro_rules! i {
        ($e:expr) => {
            unsafe { map1::<T, T>(dst, src, acc.ptr(dst.storage), pa, $e) }
        };
    }
    macro_rules! b {
        ($e:expr) => {
            unsafe { map1::<T, bool>(dst, src, acc.ptr(dst.storage), pa, $e) }
        };
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
    let (pa, pb) = (acc.ptr::<T>(a.storage), acc.ptr::<T>(b.storage));
    type C<T> = <T as FloatElem>::C;
    macro_rules! f {
        ($e:expr) => {{
            let g = $e;
            unsafe {
                map2_self::<T, T>(
                    dst,
                    a,
                    b,
                    acc.ptr(dst.storage),
                    pa,
                    pb,
                    move |x: T, y: T| T::store(g(x.load(), y.load())),
                )
            }
        }};
    }
    macro_rules! cmp {
        ($e:expr) => {{
            let g = $e;
            unsafe {
                map2::<T, T, bool>(
                    dst,
                    a,
                    b,
                    acc.ptr(dst.storage),
                    pa,
                    pb,
                    move |x: T, y: T| g(x.load(), y.load()),
                )
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
    let (pa, pb) = (acc.ptr::<T>(a.storage), acc.ptr::<T>(b.storage));
    macro_rules! i {
        ($e:expr) => {
            unsafe { map2_self::<T, T>(dst, a, b, acc.ptr(dst.storage), pa, pb, $e) }
        };
    }
    macro_rules! cmp {
        ($e:expr) => {
            unsafe { map2::<T, T, bool>(dst, a, b, acc.ptr(dst.storage), pa, pb, $e) }
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
    let (po, pa, pb) = (
        acc.ptr::<bool>(dst.storage),
        acc.ptr::<bool>(a.storage),
        acc.ptr::<bool>(b.storage),
    );
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
    unsafe { map2(dst, a, b, po, pa, pb, f) };
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
        map3::<bool, T, T, T>(
            dst,
            cond,
            a,
            b,
            acc.ptr(dst.storage),
            acc.ptr(cond.storage),
            acc.ptr(a.storage),
            acc.ptr(b.storage),
            |c, x, y| if c { x } else { y },
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
    let (po, pa, pb, pc) = (
        acc.ptr::<T>(dst.storage),
        acc.ptr::<T>(a.storage),
        acc.ptr::<T>(b.storage),
        acc.ptr::<T>(c.storage),
    );
    macro_rules! f {
        ($e:expr) => {{
            let g = $e;
            unsafe {
                map3::<T, T, T, T>(dst, a, b, c, po, pa, pb, pc, move |x: T, y: T, z: T| {
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
    let (po, pa, pb, pc) = (
        acc.ptr::<T>(dst.storage),
        acc.ptr::<T>(a.storage),
        acc.ptr::<T>(b.storage),
        acc.ptr::<T>(c.storage),
    );
    macro_rules! i {
        ($e:expr) => {
            unsafe { map3::<T, T, T, T>(dst, a, b, c, po, pa, pb, pc, $e) }
        };
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
