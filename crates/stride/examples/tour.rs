//! The README's tour, compiled and run by `cargo test` (examples are built) and
//! `cargo run -p stride --example tour`.
use stride::prelude::*;

fn main() -> stride::Result<()> {
    let cpu = Device::Cpu;

    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
    let z = Tensor::zeros([2, 3], DType::BF16, &cpu)?;
    let r = Tensor::arange(0, 12, &cpu)?;
    let l = Tensor::linspace(0.0, 1.0, 5, DType::F64, &cpu)?;
    println!("{x}\n{z}\n{l}");

    let m = r.reshape(&[3, 4])?;
    assert_eq!(
        (m.shape(), m.stride()),
        (&[3usize, 4][..], &[4usize, 1][..])
    );
    assert_eq!(z.nbytes(), 2 * 3 * 2);

    let t = m.t()?;
    assert!(t.view(&[12]).is_err());
    let flat = t.reshape(&[12])?;
    let col = m.select(1, 2)?;
    let every_other = m.slice(1, 0, i64::MAX, 2)?;

    let h = Tensor::ones([8, 1, 4], DType::F16, &cpu)?;
    let y = h.add(&Tensor::ones([3, 4], DType::F16, &cpu)?)?.mul(2.0)?;
    assert_eq!((y.shape(), y.dtype()), (&[8usize, 3, 4][..], DType::F16));

    let w = Tensor::from_vec(vec![0.0f32; 6], [2, 3])?
        .t()?
        .clone_tensor()?;
    let g = Tensor::ones([3, 2], DType::F32, &cpu)?;
    w.addcmul_(&g, &g, 0.5)?;
    assert_eq!(w.to_vec::<f32>()?, vec![0.5; 6]);

    let i = flat.to_dtype(DType::I32)?;
    assert!(i.to_vec::<f32>().is_err());
    println!("{col} {every_other} {i}");
    Ok(())
}
