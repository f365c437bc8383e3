//! Every error path of the core: the error names what was wrong, and the operands are
//! unchanged afterwards (values, shapes, strides and version counters).

use stride_core::{DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

/// A snapshot of everything an op must not change.
#[derive(Debug, PartialEq)]
struct Snap(Vec<f64>, Vec<usize>, Vec<usize>, usize, u64, DType);
fn snap(t: &Tensor) -> Snap {
    Snap(
        t.to_f64_vec().unwrap(),
        t.shape().to_vec(),
        t.stride().to_vec(),
        t.storage_offset(),
        t.version(),
        t.dtype(),
    )
}

fn f32s(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        (0..n).map(|i| i as f32 * 0.5 - 1.0).collect::<Vec<_>>(),
        shape.to_vec(),
    )
    .unwrap()
}

/// Runs `f`, expects an error whose message contains every needle, and checks the tensors are
/// unchanged.
fn expect_err(tensors: &[&Tensor], needles: &[&str], f: impl FnOnce() -> Result<Tensor, Error>) {
    let before: Vec<Snap> = tensors.iter().map(|t| snap(t)).collect();
    let err = f().expect_err("expected an error");
    let msg = err.to_string();
    for n in needles {
        assert!(msg.contains(n), "error {msg:?} should mention {n:?}");
    }
    let after: Vec<Snap> = tensors.iter().map(|t| snap(t)).collect();
    assert_eq!(before, after, "a failed op changed an operand");
}

#[test]
fn shape_errors_name_both_shapes() {
    let a = f32s(&[3, 4]);
    let b = f32s(&[2, 4]);
    expect_err(&[&a, &b], &["[3, 4]", "[2, 4]", "add"], || a.add(&b));
    expect_err(&[&a, &b], &["[3, 4]", "[2, 4]"], || a.mul_(&b));
    // in place may not broadcast self
    let row = f32s(&[1, 4]);
    expect_err(&[&row, &a], &["in-place", "[1, 4]", "[3, 4]"], || {
        row.add_(&a)
    });
    let t = f32s(&[2, 2, 2]);
    expect_err(&[&a, &t], &["lerp"], || a.lerp(&t, 0.5));
}

#[test]
fn out_errors_leave_out_untouched() {
    let a = f32s(&[3, 4]);
    let wrong_shape = f32s(&[4, 3]);
    expect_err(&[&a, &wrong_shape], &["[4, 3]", "[3, 4]"], || {
        a.exp_out(&wrong_shape)
    });
    let int_out = Tensor::zeros([3, 4], DType::I64, &CPU).unwrap();
    expect_err(&[&a, &int_out], &["float32", "int64", "to_dtype"], || {
        a.add_out(1.0, &int_out)
    });
    let expanded = f32s(&[1, 4]).expand(&[3, 4]).unwrap();
    expect_err(&[&a, &expanded], &["share memory"], || {
        a.sqrt_out(&expanded)
    });
    expect_err(&[&expanded], &["share memory"], || expanded.add_(1.0));
    let bool_out = Tensor::zeros([3, 4], DType::Bool, &CPU).unwrap();
    expect_err(&[&a, &bool_out], &["bool"], || a.neg_out(&bool_out));
}

#[test]
fn unsafe_in_place_casts() {
    let i = Tensor::arange(0, 6, &CPU).unwrap();
    expect_err(&[&i], &["float32", "int64"], || i.mul_(0.5));
    expect_err(&[&i], &["float32", "int64"], || i.sqrt_());
    expect_err(&[&i], &["float32"], || i.div_(2));
    let b = Tensor::ones([3], DType::Bool, &CPU).unwrap();
    expect_err(&[&b], &["int64", "bool"], || b.add_(1));
}

#[test]
fn dtype_errors() {
    let f = f32s(&[4]);
    let i = Tensor::arange(0, 4, &CPU).unwrap();
    let b = Tensor::ones([4], DType::Bool, &CPU).unwrap();
    expect_err(&[&f], &["bitwise_and", "float32"], || f.bitwise_and(&f));
    expect_err(&[&b], &["shift"], || b.bitwise_left_shift(&b));
    expect_err(&[&b], &["sub", "logical_xor"], || b.sub(&b));
    expect_err(&[&b], &["neg", "logical_not"], || b.neg());
    expect_err(&[&i], &["gelu", "int64"], || i.gelu());
    expect_err(&[&i], &["addcdiv"], || i.addcdiv(&i, &i, 1));
    expect_err(&[&i], &["integer"], || i.addcmul(&i, &i, 0.5));
    expect_err(&[&i, &f], &["where", "bool"], || i.where_cond(&f, &f));
    expect_err(&[&f], &["to_vec", "to_dtype"], || {
        f.to_vec::<f64>().map(|_| f.clone())
    });
}

#[test]
fn integer_division_by_zero_is_an_error_and_writes_nothing() {
    let a = Tensor::from_vec(vec![5i32, 7, 9], [3]).unwrap();
    let z = Tensor::from_vec(vec![1i32, 0, 2], [3]).unwrap();
    expect_err(&[&a, &z], &["division by zero"], || a.floor_divide_(&z));
    expect_err(&[&a, &z], &["division by zero"], || a.remainder(&z));
    let neg = Tensor::from_vec(vec![1i32, -1, 2], [3]).unwrap();
    expect_err(&[&a, &neg], &["negative"], || a.pow_(&neg));
    // floats follow IEEE: no error
    let fz = Tensor::from_vec(vec![0.0f32], [1]).unwrap();
    assert!(fz.reciprocal().unwrap().to_vec::<f32>().unwrap()[0].is_infinite());
}

#[test]
fn view_errors() {
    let x = f32s(&[3, 4]);
    let t = x.t().unwrap();
    expect_err(&[&t], &["view", "reshape", "contiguous"], || t.view(&[12]));
    expect_err(&[&x], &["dim 2", "2 dims"], || x.transpose(0, 2));
    expect_err(&[&x], &["dim -3"], || x.select(-3, 0));
    expect_err(&[&x], &["index 3", "size 3"], || x.select(0, 3));
    expect_err(&[&x], &["step"], || x.slice(0, 0, 3, 0));
    expect_err(&[&x], &["narrow", "exceeds"], || x.narrow(1, 2, 3));
    expect_err(&[&x], &["expand", "[3, 4]"], || x.expand(&[3, 5]));
    expect_err(&[&x], &["more than once"], || x.permute(&[0, 0]));
    expect_err(&[&x], &["permute", "2 dims"], || x.permute(&[0]));
    expect_err(&[&x], &["as_strided", "12 elements"], || {
        x.as_strided(&[4, 4], &[4, 1], 0)
    });
    expect_err(&[&x], &["invalid for a tensor of 12"], || {
        x.reshape(&[5, -1])
    });
    expect_err(&[&x], &["only one dim may be -1"], || x.view(&[-1, -1]));
    expect_err(&[&x], &["differ"], || x.diagonal(0, 1, 1));
    expect_err(&[&x], &["unflatten"], || x.unflatten(1, &[3, 2]));
    let cube = f32s(&[2, 2, 2]);
    expect_err(&[&cube], &["at most 2 dims"], || cube.t());
    expect_err(&[&x], &["item", "[3, 4]"], || {
        x.item::<f32>().map(|_| x.clone())
    });
}

#[test]
fn creation_errors() {
    assert!(matches!(
        Tensor::from_vec(vec![1.0f32; 5], [2, 3]),
        Err(Error::DataLength { .. })
    ));
    assert!(Tensor::arange(0, 10, &CPU).unwrap().numel() == 10);
    assert!(Tensor::arange_step(0, 10, 0, &CPU).is_err());
    assert!(Tensor::arange_step(0, 10, -1, &CPU).is_err());
    assert!(Tensor::arange_step(0.0, f64::NAN, 1.0, &CPU).is_err());
    assert!(Tensor::zeros([usize::MAX, 4], DType::F32, &CPU).is_err());
    // an ordinal no machine has, so this holds on a GPU machine too
    let e = Device::cuda(999).unwrap_err();
    assert!(e.to_string().contains("cuda:999"), "{e}");
    let x = f32s(&[2]);
    assert!(x.to_device(&Device::Cuda(999)).is_err());
}

#[test]
fn unsqueeze_and_stack_range_errors_name_the_tensor_they_were_given() {
    // unsqueeze and stack insert a dim: a 1-D tensor has 2 positions, -2..=1. The message
    // named "a tensor of 2 dims" (the count of positions) for this 1-D tensor.
    let v = f32s(&[3]);
    for (dim, needle) in [(2, "dim 2"), (-3, "dim -3")] {
        expect_err(
            &[&v],
            &["unsqueeze", needle, "a tensor of 1 dims", "-2..=1"],
            || v.unsqueeze(dim),
        );
        expect_err(
            &[&v],
            &["stack", needle, "a tensor of 1 dims", "-2..=1"],
            || Tensor::stack(&[&v, &v], dim),
        );
    }
    for dim in [-2, -1, 0, 1] {
        assert_eq!(v.unsqueeze(dim).unwrap().dim(), 2, "unsqueeze({dim})");
    }
    let s = f32s(&[]);
    expect_err(&[&s], &["a tensor of 0 dims", "-1..=0"], || s.unsqueeze(1));
}
