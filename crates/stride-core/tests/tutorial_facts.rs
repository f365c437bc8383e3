//! The facts a user tries first (issue: tensor core, item 10), plus the layout story that
//! motivates stride: writing through a transposed output.

use stride_core::{DType, Device, Error, MemoryFormat, Tensor};

const CPU: Device = Device::Cpu;

#[test]
fn arange_reshape_strides() -> Result<(), Error> {
    let x = Tensor::arange(0, 12, &CPU)?.reshape(&[3, 4])?;
    assert_eq!(x.dtype(), DType::I64);
    assert_eq!(x.stride(), &[4, 1]);
    let t = x.transpose(0, 1)?;
    assert_eq!(t.stride(), &[1, 4]);
    assert!(!t.is_contiguous());
    let err = t.view(&[12]).unwrap_err();
    assert!(err.to_string().contains("reshape"), "{err}");
    let r = t.reshape(&[12])?;
    assert_eq!(
        r.to_vec::<i64>()?,
        vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]
    );
    Ok(())
}

#[test]
fn broadcasting_facts() -> Result<(), Error> {
    let a = Tensor::zeros([8, 1, 4], DType::F32, &CPU)?;
    let b = Tensor::ones([3, 4], DType::F32, &CPU)?;
    assert_eq!(a.add(&b)?.shape(), &[8, 3, 4]);
    let c = Tensor::ones([2, 4], DType::F32, &CPU)?;
    let err = b.add(&c).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("[3, 4]") && msg.contains("[2, 4]"), "{msg}");
    Ok(())
}

#[test]
fn bf16_nbytes() -> Result<(), Error> {
    let x = Tensor::zeros([1024, 4096], DType::BF16, &CPU)?;
    assert_eq!(x.nbytes(), 8_388_608);
    assert_eq!(x.element_size(), 2);
    Ok(())
}

#[test]
fn in_place_through_transposed_output() -> Result<(), Error> {
    // The bug that froze an autoencoder: an in-place update of a non-contiguous tensor must
    // land in the tensor itself.
    let w = Tensor::arange(0, 6, &CPU)?
        .to_dtype(DType::F32)?
        .reshape(&[2, 3])?;
    let wt = w.t()?.clone_tensor()?; // clone keeps the transposed strides
    assert_eq!(wt.stride(), &[1, 3]);
    let g = Tensor::ones([3, 2], DType::F32, &CPU)?;
    let v0 = wt.version();
    wt.addcmul_(&g, &g, 0.5)?;
    assert_eq!(wt.version(), v0 + 1);
    assert_eq!(wt.to_vec::<f32>()?, vec![0.5, 3.5, 1.5, 4.5, 2.5, 5.5]);
    let m = wt.zeros_like(MemoryFormat::Preserve)?;
    assert_eq!(m.stride(), wt.stride());
    Ok(())
}

#[test]
fn scalars_do_not_widen() -> Result<(), Error> {
    let h = Tensor::ones([2], DType::F16, &CPU)?;
    assert_eq!(h.mul(2.0)?.dtype(), DType::F16);
    let i = Tensor::ones([2], DType::I32, &CPU)?;
    assert_eq!(i.add(1)?.dtype(), DType::I32);
    assert_eq!(i.add(1.5)?.dtype(), DType::F32);
    assert_eq!(i.div(2)?.dtype(), DType::F32);
    assert_eq!(i.exp()?.dtype(), DType::F32);
    assert!(i.add_(1.5).is_err());
    assert_eq!(i.to_vec::<i32>()?, vec![1, 1]);
    Ok(())
}

#[test]
fn display_like_pytorch() -> Result<(), Error> {
    let x = Tensor::arange(0, 4, &CPU)?
        .to_dtype(DType::F32)?
        .reshape(&[2, 2])?;
    assert_eq!(x.to_string(), "tensor([[0., 1.],\n        [2., 3.]])");
    let h = Tensor::from_vec(vec![0.5f64, 1.25], [2])?;
    assert_eq!(h.to_string(), "tensor([0.5000, 1.2500], dtype=float64)");
    let big = Tensor::zeros([2000], DType::I64, &CPU)?;
    assert_eq!(big.to_string(), "tensor([0, 0, 0, ..., 0, 0, 0])");
    Ok(())
}
