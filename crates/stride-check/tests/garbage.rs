//! (d) Garbage in: random dims, sizes, strides and shapes thrown at the view ops, reshape,
//! expand, as_strided, slice, narrow, select and at elementwise ops with mismatched shapes.
//! Nothing may panic; bad input is an `Err`; whatever happens, no operand changes, and no
//! view that is returned reaches outside its storage.

use proptest::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use stride_check::host::{read_storage, same};
use stride_check::layouts::{build, plan, LayoutKind};
use stride_check::reference::broadcast_shapes;
use stride_core::{DType, Device, Tensor};

fn garbage_i64() -> impl Strategy<Value = i64> {
    prop_oneof![6 => -6i64..7, 1 => any::<i64>(), 1 => Just(i64::MIN), 1 => Just(i64::MAX), 1 => Just(-1i64 << 40)]
}
fn garbage_usize() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 0usize..7, 1 => any::<usize>(), 1 => Just(usize::MAX), 1 => Just(1usize << 40)]
}
fn small_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..=4)
}

/// A view op with garbage arguments.
#[derive(Debug, Clone)]
enum Call {
    Transpose(i64, i64),
    T,
    Permute(Vec<i64>),
    Slice(i64, i64, i64, usize),
    Narrow(i64, i64, usize),
    Select(i64, i64),
    Expand(Vec<i64>),
    BroadcastTo(Vec<usize>),
    Squeeze(i64),
    Unsqueeze(i64),
    Flatten(i64, i64),
    Unflatten(i64, Vec<i64>),
    Diagonal(i64, i64, i64),
    AsStrided(Vec<usize>, Vec<usize>, usize),
    View(Vec<i64>),
    Reshape(Vec<i64>),
}

fn call() -> impl Strategy<Value = Call> {
    let dims = || prop::collection::vec(garbage_i64(), 0..6);
    prop_oneof![
        (garbage_i64(), garbage_i64()).prop_map(|(a, b)| Call::Transpose(a, b)),
        Just(Call::T),
        dims().prop_map(Call::Permute),
        (garbage_i64(), garbage_i64(), garbage_i64(), garbage_usize())
            .prop_map(|(d, s, e, st)| Call::Slice(d, s, e, st)),
        (garbage_i64(), garbage_i64(), garbage_usize()).prop_map(|(d, s, l)| Call::Narrow(d, s, l)),
        (garbage_i64(), garbage_i64()).prop_map(|(d, i)| Call::Select(d, i)),
        dims().prop_map(Call::Expand),
        prop::collection::vec(garbage_usize(), 0..6).prop_map(Call::BroadcastTo),
        garbage_i64().prop_map(Call::Squeeze),
        garbage_i64().prop_map(Call::Unsqueeze),
        (garbage_i64(), garbage_i64()).prop_map(|(a, b)| Call::Flatten(a, b)),
        (garbage_i64(), dims()).prop_map(|(d, s)| Call::Unflatten(d, s)),
        (garbage_i64(), garbage_i64(), garbage_i64()).prop_map(|(o, a, b)| Call::Diagonal(o, a, b)),
        (
            prop::collection::vec(garbage_usize(), 0..5),
            prop::collection::vec(garbage_usize(), 0..5),
            garbage_usize()
        )
            .prop_map(|(s, st, o)| Call::AsStrided(s, st, o)),
        dims().prop_map(Call::View),
        dims().prop_map(Call::Reshape),
    ]
}

fn apply(x: &Tensor, c: &Call) -> stride_core::Result<Tensor> {
    match c {
        Call::Transpose(a, b) => x.transpose(*a, *b),
        Call::T => x.t(),
        Call::Permute(d) => x.permute(d),
        Call::Slice(d, s, e, st) => x.slice(*d, *s, *e, *st),
        Call::Narrow(d, s, l) => x.narrow(*d, *s, *l),
        Call::Select(d, i) => x.select(*d, *i),
        Call::Expand(s) => x.expand(s),
        Call::BroadcastTo(s) => x.broadcast_to(s.clone()),
        Call::Squeeze(d) => x.squeeze(*d),
        Call::Unsqueeze(d) => x.unsqueeze(*d),
        Call::Flatten(a, b) => x.flatten(*a, *b),
        Call::Unflatten(d, s) => x.unflatten(*d, s),
        Call::Diagonal(o, a, b) => x.diagonal(*o, *a, *b),
        Call::AsStrided(s, st, o) => x.as_strided(s, st, *o),
        Call::View(s) => x.view(s),
        Call::Reshape(s) => x.reshape(s),
    }
}

/// The largest storage index a layout reaches, computed without overflow.
fn reaches(t: &Tensor) -> Option<u128> {
    if t.shape().contains(&0) {
        return None;
    }
    Some(
        t.storage_offset() as u128
            + t.shape()
                .iter()
                .zip(t.stride())
                .map(|(&n, &s)| (n as u128 - 1) * s as u128)
                .sum::<u128>(),
    )
}

fn operand(
    shape: &[usize],
    kind_i: usize,
    dtype: DType,
    seed: usize,
) -> stride_check::layouts::Built {
    let kind = LayoutKind::ALL[kind_i % LayoutKind::ALL.len()];
    let spec = plan(kind, shape).unwrap_or_else(|| plan(LayoutKind::Contiguous, shape).unwrap());
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n).map(|i| ((i + seed) % 7) as f64).collect();
    build(&spec, &values, dtype, &Device::Cpu).unwrap()
}

fn unchanged(b: &stride_check::layouts::Built) -> bool {
    let after = read_storage(&b.tensor).unwrap();
    after.len() == b.storage.len() && after.iter().zip(&b.storage).all(|(a, c)| same(*a, *c))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn view_ops_never_panic_and_never_escape_their_storage(shape in small_shape(), kind in 0usize..7, c in call()) {
        let x = operand(&shape, kind, DType::F32, 0);
        let r = catch_unwind(AssertUnwindSafe(|| apply(&x.tensor, &c)));
        prop_assert!(r.is_ok(), "{c:?} on {:?} panicked", x.tensor);
        match r.unwrap() {
            Ok(v) => {
                prop_assert!(v.shares_storage_with(&x.tensor) || matches!(c, Call::Reshape(_) | Call::Flatten(..)));
                if let Some(last) = reaches(&v) {
                    prop_assert!(last < v.storage().len() as u128, "{c:?} on {:?} gave {v:?}, reaching {last}", x.tensor);
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        prop_assert!(unchanged(&x), "{c:?} modified its operand");
    }

    #[test]
    fn elementwise_with_mismatched_shapes_is_an_error(
        a in small_shape(), b in small_shape(), o in small_shape(), ka in 0usize..7, kb in 0usize..7, ko in 0usize..7, which in 0usize..4,
    ) {
        let (x, y) = (operand(&a, ka, DType::F32, 1), operand(&b, kb, DType::F32, 2));
        let out = operand(&o, ko, DType::F32, 3);
        let bshape = broadcast_shapes(&[&a, &b]);
        let (result, ok) = match which {
            0 => (catch_unwind(AssertUnwindSafe(|| x.tensor.add(&y.tensor))), bshape.is_some()),
            1 => (catch_unwind(AssertUnwindSafe(|| x.tensor.mul_(&y.tensor))), bshape.as_deref() == Some(&a[..]) && !out_overlaps(&x)),
            2 => (
                catch_unwind(AssertUnwindSafe(|| x.tensor.maximum_out(&y.tensor, &out.tensor))),
                bshape.as_deref() == Some(&o[..]) && !out_overlaps(&out),
            ),
            _ => (
                catch_unwind(AssertUnwindSafe(|| x.tensor.lerp_(&y.tensor, 0.5))),
                bshape.as_deref() == Some(&a[..]) && !out_overlaps(&x),
            ),
        };
        prop_assert!(result.is_ok(), "panicked: shapes {a:?} {b:?} out {o:?}");
        let result = result.unwrap();
        prop_assert_eq!(result.is_ok(), ok, "shapes {:?} {:?} out {:?}: {:?}", a, b, o, result.as_ref().err());
        if result.is_err() {
            prop_assert!(unchanged(&x) && unchanged(&y) && unchanged(&out), "a failed op changed an operand");
        }
    }
}

fn out_overlaps(b: &stride_check::layouts::Built) -> bool {
    b.spec.overlapping()
}
