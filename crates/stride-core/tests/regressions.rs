//! Regression tests for bugs the op registry (stride-check) found.

use stride_core::{DType, Device, MemoryFormat, Tensor};

const CPU: Device = Device::Cpu;

/// `clone`, `*_like(Preserve)` and `to_dtype` of a broadcast tensor gave a column-major
/// result (the stride-0 dim sorted innermost); PyTorch keeps broadcast dims in row-major
/// place (`infer_dense_strides`), so the copy can be `view`ed like the original.
#[test]
fn preserve_format_of_a_broadcast_tensor_is_row_major() -> stride_core::Result<()> {
    let x = Tensor::arange(0, 4, &CPU)?
        .reshape(&[1, 4])?
        .expand(&[3, 4])?;
    assert_eq!(x.stride(), &[0, 1]);
    let c = x.clone_tensor()?;
    assert_eq!(c.stride(), &[4, 1]);
    assert!(c.view(&[12]).is_ok());
    assert_eq!(x.zeros_like(MemoryFormat::Preserve)?.stride(), &[4, 1]);
    assert_eq!(x.to_dtype(DType::F32)?.stride(), &[4, 1]);
    // a broadcast dim in front of a transposed matrix: the matrix keeps its order
    let t = Tensor::zeros([4, 3], DType::F32, &CPU)?
        .t()?
        .unsqueeze(0)?
        .expand(&[2, 3, 4])?;
    assert_eq!(t.clone_tensor()?.stride(), &[12, 1, 3]);
    Ok(())
}

/// `linspace(start, end, 1)` returned `[end]`; PyTorch returns `[start]`.
#[test]
fn linspace_of_one_step_is_start() -> stride_core::Result<()> {
    let x = Tensor::linspace(-2.5, 7.25, 1, DType::F32, &CPU)?;
    assert_eq!(x.to_vec::<f32>()?, vec![-2.5]);
    assert_eq!(
        Tensor::linspace(0.0, 1.0, 2, DType::F64, &CPU)?.to_vec::<f64>()?,
        vec![0.0, 1.0]
    );
    Ok(())
}

/// `flatten` of a 0-d tensor accepted any dims; like PyTorch it must check them (0 and -1 are
/// the only valid dims of a 0-d tensor).
#[test]
fn flatten_of_a_scalar_checks_dims() -> stride_core::Result<()> {
    let x = Tensor::scalar(1.5, DType::F32, &CPU)?;
    assert_eq!(x.flatten(0, -1)?.shape(), &[1]);
    assert!(x.flatten(3, 3).is_err());
    assert!(x.flatten(0, 1).is_err());
    Ok(())
}

/// Garbage arguments overflowed layout arithmetic (a panic in debug builds, a bogus layout
/// that reaches outside the storage in release): a huge slice step, a huge narrow length,
/// and the diagonal of two size-1 dims with huge (legal, unused) strides.
#[test]
fn huge_view_arguments_do_not_overflow() -> stride_core::Result<()> {
    let x = Tensor::arange(0, 12, &CPU)?.reshape(&[3, 4])?;
    let s = x.slice(1, 1, i64::MAX, usize::MAX)?;
    assert_eq!(s.shape(), &[3, 1]);
    assert_eq!(s.to_vec::<i64>()?, vec![1, 5, 9]);
    assert!(x.narrow(1, 1, usize::MAX).is_err());
    let y = x.as_strided(&[1, 1], &[usize::MAX, usize::MAX], 3)?;
    let d = y.diagonal(0, 0, 1)?;
    assert_eq!(d.shape(), &[1]);
    assert_eq!(d.to_vec::<i64>()?, vec![3]);
    Ok(())
}

/// An output whose strides interleave (positions 2i + 3j of a 12 × 2 view are all distinct)
/// was refused as "elements that share memory"; only really overlapping outputs are refused.
#[test]
fn interleaved_but_non_overlapping_outputs_are_accepted() -> stride_core::Result<()> {
    let buf = Tensor::zeros([29], DType::F64, &CPU)?;
    let out = buf.as_strided(&[12, 2], &[2, 3], 0)?;
    let x = Tensor::ones([12, 2], DType::F64, &CPU)?;
    x.neg_out(&out)?;
    let v = buf.to_vec::<f64>()?;
    for i in 0..12 {
        for j in 0..2 {
            assert_eq!(v[2 * i + 3 * j], -1.0);
        }
    }
    // [2, 2] at strides [1, 1] really overlaps (positions 0, 1, 1, 2): still refused
    let overlapping = buf.as_strided(&[2, 2], &[1, 1], 0)?;
    assert!(Tensor::ones([2, 2], DType::F64, &CPU)?
        .neg_out(&overlapping)
        .is_err());
    assert_eq!(buf.to_vec::<f64>()?, v);
    Ok(())
}

/// An out-of-range index passed silently when another dim of the indexed tensor was empty
/// (`zeros([3, 0, 2]).index_select(2, [5])`): the primitives validate indices through the
/// positions they visit, and there were none. Every index op must refuse a bad index
/// whatever the other dims (PyTorch does for `index_select`/`embedding`/`index_add`), and
/// leave `self` unchanged.
#[test]
fn out_of_range_index_is_refused_when_other_dims_are_empty() -> stride_core::Result<()> {
    let x = Tensor::zeros([3, 0, 2], DType::F32, &CPU)?;
    for idx in [
        Tensor::from_vec(vec![0i64, 5], [2])?,
        Tensor::from_vec(vec![2i32], [1])?,
        Tensor::from_vec(vec![7u32], [1])?,
    ] {
        assert!(x.index_select(2, &idx).is_err());
        assert!(x.index(2, &idx).is_err());
        let src = Tensor::zeros([3, 0, idx.numel()], DType::F32, &CPU)?;
        assert!(x.index_add_(2, &idx, &src, 1.0).is_err());
        assert!(x.index_copy_(2, &idx, &src).is_err());
        assert!(x.index_fill_(2, &idx, 1.0).is_err());
    }
    // in range is fine (and wrapping ops accept negatives)
    let ok = Tensor::from_vec(vec![1i64, 0], [2])?;
    assert_eq!(x.index_select(2, &ok)?.shape(), &[3, 0, 2]);
    assert!(x
        .index_fill_(2, &Tensor::from_vec(vec![-2i64], [1])?, 1.0)
        .is_ok());
    let w = Tensor::zeros([0, 0], DType::F32, &CPU)?;
    assert!(w.embedding(&Tensor::from_vec(vec![0i64], [1])?).is_err());
    Ok(())
}

/// `searchsorted` with empty sorted rows (`[.., 0]`) in a non-contiguous layout failed with an
/// "internal error (please report)": the sequence's strides were laid over the values' shape
/// and reached past its storage. No element is below any value: the result is all zeros.
#[test]
fn searchsorted_in_empty_rows_is_zero() -> stride_core::Result<()> {
    let seq = Tensor::zeros([3, 0], DType::F32, &CPU)?;
    // the layout the registry's "stepped" kind gives an empty [3, 0]: strides [2, 2] over 3
    let stepped = Tensor::zeros([3], DType::F32, &CPU)?.as_strided(&[3, 0], &[2, 2], 0)?;
    let v = Tensor::from_vec(vec![1.0f32; 9], [3, 3])?;
    for s in [&seq, &stepped] {
        for right in [false, true] {
            let r = s.searchsorted(&v, right)?;
            assert_eq!(r.shape(), &[3, 3]);
            assert_eq!(r.to_vec::<i64>()?, vec![0; 9]);
        }
    }
    let flat = Tensor::zeros([0], DType::F32, &CPU)?;
    assert_eq!(flat.searchsorted(&v, false)?.to_vec::<i64>()?, vec![0; 9]);
    Ok(())
}

/// `scatter_reduce(.., Mean, ..)` counted the contributions in self's dtype: with more than
/// 127 sources per destination the i8 count wrapped (to 0, then clamped to 1) and the bf16
/// count stopped at 256, so the "mean" was off by up to 512×.
#[test]
fn scatter_reduce_mean_counts_many_contributions() -> stride_core::Result<()> {
    use stride_core::ScatterReduce;
    // self = x, n zero sources on one destination, include_self: the mean is x / (n + 1)
    for (dtype, x, n, want) in [
        (DType::I8, 100.0, 200, 0.0),          // count 201 wrapped to -55: -2
        (DType::U8, 200.0, 299, 0.0),          // count 300 wrapped to 44: 4
        (DType::BF16, 4.0, 511, 4.0 / 512.0),  // count stuck at 256: 2×
        (DType::F16, 8.0, 4095, 8.0 / 4096.0), // count stuck at 2048: 2×
        (DType::F32, 3.0, 5, 0.5),
    ] {
        let idx = Tensor::zeros([n], DType::I64, &CPU)?;
        let s = Tensor::full([1], x, dtype, &CPU)?;
        let src = Tensor::zeros([n], dtype, &CPU)?;
        let r = s.scatter_reduce(0, &idx, &src, ScatterReduce::Mean, true)?;
        assert_eq!(r.dtype(), dtype);
        assert_eq!(r.to_f64_vec()?, vec![want], "{dtype}");
    }
    Ok(())
}

/// f16 matrix products with an operand of stride 0 along k (an expanded vector) lost gemm's
/// f32 accumulation: the dot product of two expanded f16 vectors of 2112 elements came out
/// 15 % high (30.53 for 26.64). They now go through f32, as bf16 does.
#[test]
fn f16_product_of_broadcast_vectors_accumulates_in_f32() -> stride_core::Result<()> {
    let n = 2112;
    let a = Tensor::full([n], 0.1123, DType::F16, &CPU)?;
    let e = Tensor::full([1], 0.1123, DType::F16, &CPU)?.expand(&[n as i64])?;
    let x = f64::from(stride_core::half_round::f64_to_f16(0.1123));
    let want = x * x * n as f64;
    for (p, q) in [(&a, &a), (&e, &e), (&a, &e), (&e, &a)] {
        for got in [
            p.dot(q)?.to_f64_vec()?[0],
            p.matmul(&q.unsqueeze(1)?)?.to_f64_vec()?[0],
        ] {
            assert!((got - want).abs() <= 0.05, "got {got}, want {want}");
        }
    }
    Ok(())
}
