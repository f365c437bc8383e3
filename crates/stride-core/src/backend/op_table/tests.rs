//! The tables against the backends and the frontend policies.

use super::{Kernel, Out};
use crate::backend::{BinaryOp, ReduceOp, TernaryOp, UnaryOp};
use crate::cuda::source;
use crate::{DType, Device, Error, Result, Tensor};
use std::collections::HashSet;

fn tensor(dtype: DType) -> Tensor {
    Tensor::ones([3], dtype, &Device::Cpu).unwrap()
}

/// Whether a CPU kernel ran (`Ok`) or refused the dtype (`UnsupportedDType`); anything else
/// fails the test.
fn ran(r: Result<()>) -> bool {
    match r {
        Ok(()) => true,
        Err(Error::UnsupportedDType { .. }) => false,
        Err(e) => panic!("unexpected error {e}"),
    }
}

fn out_dtype(k: Option<Kernel>, t: DType) -> DType {
    match k.map(|k| k.out) {
        Some(Out::Bool) => DType::Bool,
        _ => t,
    }
}

/// (a) For every op and dtype, the CPU runs a kernel exactly when the table has one, and so
/// does the CUDA source generator: a hand-written CPU arm or C line outside the table fails.
#[test]
fn cpu_and_cuda_kernels_are_the_table() {
    for t in DType::ALL {
        for op in UnaryOp::ALL {
            let k = op.kernel(t);
            let (x, o) = (tensor(t), tensor(out_dtype(k, t)));
            let cpu = ran(crate::cpu::elementwise::unary(
                op,
                x.view_ref(),
                o.view_ref(),
            ));
            assert_eq!(cpu, k.is_some(), "cpu {} {t:?}", op.name());
            let cuda = source::unary_module(op, t).is_some();
            assert_eq!(cuda, k.is_some(), "cuda {} {t:?}", op.name());
        }
        for op in BinaryOp::ALL {
            let k = op.kernel(t);
            let (x, o) = (tensor(t), tensor(out_dtype(k, t)));
            let r = crate::cpu::elementwise::binary(op, x.view_ref(), x.view_ref(), o.view_ref());
            assert_eq!(ran(r), k.is_some(), "cpu {} {t:?}", op.name());
            let cuda = source::binary_module(op, t).is_some();
            assert_eq!(cuda, k.is_some(), "cuda {} {t:?}", op.name());
        }
        for op in TernaryOp::ALL {
            let k = op.kernel(t);
            let a = match k.map(|k| k.out) {
                Some(Out::Select) => tensor(DType::Bool),
                _ => tensor(t),
            };
            let (x, o) = (tensor(t), tensor(t));
            let r = crate::cpu::elementwise::ternary(
                op,
                a.view_ref(),
                x.view_ref(),
                x.view_ref(),
                o.view_ref(),
            );
            assert_eq!(ran(r), k.is_some(), "cpu {} {t:?}", op.name());
            let cuda = source::ternary_module(op, t).is_some();
            assert_eq!(cuda, k.is_some(), "cuda {} {t:?}", op.name());
        }
    }
}

/// (b) Where the frontend accepts a dtype, the table has a kernel for the compute dtype whose
/// output is the result dtype; where it refuses one, the error names the op.
#[test]
fn frontend_policies_match_the_kernels() {
    for t in DType::ALL {
        for op in UnaryOp::ALL {
            match op.dtypes(t) {
                Ok((c, r)) => {
                    let k = op
                        .kernel(c)
                        .unwrap_or_else(|| panic!("{} {t:?}", op.name()));
                    assert_eq!(out_dtype(Some(k), c), r, "{} {t:?}", op.name());
                }
                Err(e) => assert!(e.to_string().contains(op.name()), "{e}"),
            }
        }
        for op in BinaryOp::ALL {
            match op.dtypes(t) {
                Ok((c, r)) => {
                    let k = op
                        .kernel(c)
                        .unwrap_or_else(|| panic!("{} {t:?}", op.name()));
                    assert_eq!(out_dtype(Some(k), c), r, "{} {t:?}", op.name());
                    if t != DType::Bool {
                        assert_eq!(op.is_comparison(), r == DType::Bool, "{}", op.name());
                    }
                }
                Err(e) => assert!(e.to_string().contains(op.name()), "{e}"),
            }
        }
    }
}

/// The policies and hints the frontend had before the tables, pinned for every dtype.
#[test]
fn frontend_errors_unchanged() {
    let hint = |r: Result<(DType, DType)>| match r {
        Err(Error::UnsupportedDType { hint, .. }) => hint,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        hint(UnaryOp::Neg.dtypes(DType::Bool)),
        "; use logical_not for bool tensors, or to_dtype first"
    );
    assert_eq!(
        hint(UnaryOp::Silu.dtypes(DType::I32)),
        "; it takes float tensors (convert with to_dtype)"
    );
    assert_eq!(
        hint(UnaryOp::GeluErf.dtypes(DType::Bool)),
        "; it takes float tensors (convert with to_dtype)"
    );
    assert_eq!(
        UnaryOp::Exp.dtypes(DType::Bool).unwrap(),
        (DType::F32, DType::F32)
    );
    assert_eq!(
        UnaryOp::Relu.dtypes(DType::Bool).unwrap(),
        (DType::Bool, DType::Bool)
    );
    assert_eq!(
        UnaryOp::IsNan.dtypes(DType::U8).unwrap(),
        (DType::U8, DType::Bool)
    );
    assert_eq!(
        hint(BinaryOp::BitwiseAnd.dtypes(DType::F16)),
        "; bitwise ops take integer or bool tensors"
    );
    assert_eq!(
        hint(BinaryOp::ShiftLeft.dtypes(DType::Bool)),
        "; shifts take integer tensors"
    );
    assert_eq!(
        hint(BinaryOp::ShiftRight.dtypes(DType::F32)),
        "; shifts take integer tensors"
    );
    assert_eq!(
        hint(BinaryOp::Sub.dtypes(DType::Bool)),
        "; subtracting bool tensors is not supported, use logical_xor"
    );
    for op in [BinaryOp::FloorDivide, BinaryOp::Remainder, BinaryOp::Pow] {
        assert_eq!(
            hint(op.dtypes(DType::Bool)),
            "; convert bool tensors with to_dtype first"
        );
    }
    assert_eq!(
        BinaryOp::Div.dtypes(DType::Bool).unwrap(),
        (DType::F32, DType::F32)
    );
    assert_eq!(
        BinaryOp::Atan2.dtypes(DType::I8).unwrap(),
        (DType::F32, DType::F32)
    );
    assert_eq!(
        BinaryOp::Lt.dtypes(DType::Bool).unwrap(),
        (DType::Bool, DType::Bool)
    );
    assert_eq!(
        BinaryOp::Add.dtypes(DType::Bool).unwrap(),
        (DType::Bool, DType::Bool)
    );
    assert_eq!(ReduceOp::Sum.result_dtype(DType::Bool).unwrap(), DType::I64);
    assert_eq!(
        ReduceOp::Prod.result_dtype(DType::BF16).unwrap(),
        DType::BF16
    );
    assert_eq!(ReduceOp::All.result_dtype(DType::U8).unwrap(), DType::Bool);
    assert_eq!(
        ReduceOp::CountNonzero.result_dtype(DType::F16).unwrap(),
        DType::I64
    );
    assert_eq!(
        ReduceOp::Max.result_dtype(DType::Bool).unwrap(),
        DType::Bool
    );
    assert!(ReduceOp::Mean.result_dtype(DType::I64).is_err());
    let nonempty: Vec<_> = ReduceOp::ALL
        .into_iter()
        .filter(|o| o.needs_nonempty())
        .collect();
    assert_eq!(nonempty, [ReduceOp::Max, ReduceOp::Min]);
}

/// Every variant once and every name once (the generated matches are exhaustive, so a
/// variant missing from a table does not compile).
#[test]
fn tables_list_each_op_once() {
    fn distinct<T: std::fmt::Debug>(names: impl IntoIterator<Item = &'static str>, all: &[T]) {
        let names: HashSet<_> = names.into_iter().collect();
        assert_eq!(names.len(), all.len(), "{all:?}");
        let debug: HashSet<_> = all.iter().map(|o| format!("{o:?}")).collect();
        assert_eq!(debug.len(), all.len(), "{all:?}");
    }
    distinct(UnaryOp::ALL.map(UnaryOp::name), &UnaryOp::ALL);
    distinct(BinaryOp::ALL.map(BinaryOp::name), &BinaryOp::ALL);
    distinct(TernaryOp::ALL.map(TernaryOp::name), &TernaryOp::ALL);
    distinct(ReduceOp::ALL.map(ReduceOp::name), &ReduceOp::ALL);
    assert_eq!(UnaryOp::ALL.len(), 32);
    assert_eq!(BinaryOp::ALL.len(), 26);
    assert_eq!(TernaryOp::ALL.len(), 5);
    assert_eq!(ReduceOp::ALL.len(), 8);
}

/// (c) A few generated CUDA lines, exactly.
#[test]
fn generated_cuda_lines() {
    let last = |s: Option<String>| s.unwrap().lines().last().unwrap().to_string();
    let cases = [
        (
            last(source::unary_module(UnaryOp::Exp, DType::F16)),
            "UNARY(exp, T, S(m_exp(L(x))))",
        ),
        (
            last(source::unary_module(UnaryOp::Rsqrt, DType::F32)),
            "UNARY(rsqrt, T, S((C)1 / m_sqrt(L(x))))",
        ),
        (
            last(source::unary_module(UnaryOp::IsFinite, DType::BF16)),
            "UNARY(isfinite, bool, !m_isnan(L(x)) && !m_isinf(L(x)))",
        ),
        (
            last(source::unary_module(UnaryOp::Relu, DType::I8)),
            "UNARY(relu, T, is_neg(x) ? (T)0 : x)",
        ),
        (
            last(source::unary_module(UnaryOp::LogicalNot, DType::Bool)),
            "UNARY(logical_not, bool, !x)",
        ),
        (
            last(source::unary_module(UnaryOp::Floor, DType::Bool)),
            "UNARY(floor, bool, x)",
        ),
        (
            last(source::binary_module(BinaryOp::LogicalXor, DType::F64)),
            "BINARY(logical_xor, bool, (L(x) != (C)0) != (L(y) != (C)0))",
        ),
        (
            last(source::binary_module(BinaryOp::Lt, DType::I32)),
            "BINARY(lt, bool, x < y)",
        ),
        (
            last(source::binary_module(BinaryOp::Add, DType::Bool)),
            "BINARY(add, bool, x | y)",
        ),
        (
            last(source::binary_module(BinaryOp::Pow, DType::U32)),
            "BINARY(pow, T, w_pow(x, y))",
        ),
        (
            last(source::binary_module(BinaryOp::ClampMin, DType::F32)),
            "BINARY(clamp_min, T, S(max_nan(L(x), L(y))))",
        ),
        (
            last(source::ternary_module(TernaryOp::Where, DType::F16)),
            "TERNARY(where, bool, x ? y : z)",
        ),
        (
            last(source::ternary_module(TernaryOp::ALL[2], DType::F32)),
            "TERNARY(addcmul, T, S(L(x) + (C)vf * L(y) * L(z)))",
        ),
        (
            last(source::ternary_module(TernaryOp::ALL[2], DType::I64)),
            "TERNARY(addcmul, T, w_add(x, w_mul(E<T>::from_i64(vi), w_mul(y, z))))",
        ),
        (
            last(source::ternary_module(TernaryOp::ALL[3], DType::BF16)),
            "TERNARY(addcdiv, T, S(L(x) + (C)vf * (L(y) / L(z))))",
        ),
        (
            last(source::ternary_module(TernaryOp::Clamp, DType::U8)),
            "TERNARY(clamp, T, (x >= y ? x : y) <= z ? (x >= y ? x : y) : z)",
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }
    assert!(source::ternary_module(TernaryOp::Lerp, DType::I32).is_none());
    assert!(source::binary_module(BinaryOp::ShiftLeft, DType::Bool).is_none());
}
