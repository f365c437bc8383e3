//! Autograd of the index/sort/join family: PyTorch's exact values where gradchecks can't
//! reach (ties, bounds, zeros), non-differentiable outputs, and errors as values.

use stride_core::autograd::{self, GradOptions};
use stride_core::{DType, Error, PadMode, ScatterReduce, Tensor};

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape.to_vec()).unwrap()
}
fn leaf(v: &[f64], shape: &[usize]) -> Tensor {
    t(v, shape).requires_grad_(true).unwrap()
}
fn grad_of(x: &Tensor) -> Vec<f64> {
    x.grad().expect("a gradient").to_vec::<f64>().unwrap()
}

#[test]
fn scatter_reduce_amax_splits_ties_evenly() -> Result<(), Error> {
    // destination 0 gets {self 3, src 3, src 1}: self and one source tie at the max
    let x = leaf(&[3.0, 5.0], &[2]);
    let src = leaf(&[3.0, 1.0, 2.0, 2.0], &[4]);
    let idx = Tensor::from_vec(vec![0i64, 0, 1, 1], [4])?;
    let y = x.scatter_reduce(0, &idx, &src, ScatterReduce::Amax, true)?;
    assert_eq!(y.to_vec::<f64>()?, vec![3.0, 5.0]);
    y.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![0.5, 1.0]);
    assert_eq!(grad_of(&src), vec![0.5, 0.0, 0.0, 0.0]);
    // without self: the two sources tied at 2.0 share destination 1's gradient
    let x = leaf(&[3.0, 5.0], &[2]);
    let src = leaf(&[3.0, 1.0, 2.0, 2.0], &[4]);
    let y = x.scatter_reduce(0, &idx, &src, ScatterReduce::Amin, false)?;
    assert_eq!(y.to_vec::<f64>()?, vec![1.0, 2.0]);
    y.mul(&t(&[1.0, 10.0], &[2]))?.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![0.0, 0.0]);
    assert_eq!(grad_of(&src), vec![0.0, 1.0, 5.0, 5.0]);
    Ok(())
}

#[test]
fn amax_and_max_dim_ties_follow_pytorch() -> Result<(), Error> {
    let x = leaf(&[1.0, 4.0, 4.0, 2.0], &[4]);
    x.amax(&[0], false)?.backward()?;
    assert_eq!(grad_of(&x), vec![0.0, 0.5, 0.5, 0.0]);
    let x = leaf(&[1.0, 4.0, 4.0, 2.0], &[1, 4]);
    x.max_dim(1, false)?.0.sum()?.backward()?;
    let g = grad_of(&x);
    assert_eq!(g.iter().sum::<f64>(), 1.0);
    assert_eq!(g[0] + g[3], 0.0);
    Ok(())
}

#[test]
fn clamp_passes_the_gradient_at_its_bounds() -> Result<(), Error> {
    // PyTorch: clamp's gradient is 1 where min ≤ x ≤ max (bounds included)
    let x = leaf(&[-1.0, -0.5, 0.0, 0.5, 1.0], &[5]);
    x.clamp(-0.5, 0.5)?.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![0.0, 1.0, 1.0, 1.0, 0.0]);
    let x = leaf(&[-1.0, -0.5, 0.5], &[3]);
    x.clamp_min(-0.5)?.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![0.0, 1.0, 1.0]);
    Ok(())
}

#[test]
fn cumprod_and_scatter_prod_with_zeros_are_exact() -> Result<(), Error> {
    let x = leaf(&[2.0, 0.0, 3.0], &[3]);
    x.cumprod(0)?.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![1.0, 8.0, 0.0]);
    // scatter_reduce prod: one zero among the sources → the product of the others
    let x = leaf(&[2.0], &[1]);
    let src = leaf(&[0.0, 3.0, 5.0], &[3]);
    let idx = Tensor::from_vec(vec![0i64, 0, 0], [3])?;
    x.scatter_reduce(0, &idx, &src, ScatterReduce::Prod, true)?
        .sum()?
        .backward()?;
    assert_eq!(grad_of(&x), vec![0.0]);
    assert_eq!(grad_of(&src), vec![30.0, 0.0, 0.0]);
    Ok(())
}

#[test]
fn gathers_accumulate_duplicates_and_wrap_negatives() -> Result<(), Error> {
    let x = leaf(&[1.0, 2.0, 3.0, 4.0], &[4]);
    let i = Tensor::from_vec(vec![-1i64, 3, 0, -1], [2, 2])?;
    x.take(&i)?.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![1.0, 0.0, 0.0, 3.0]);
    let w = leaf(&[0.0; 6], &[3, 2]);
    let ids = Tensor::from_vec(vec![2u32, 2, 0], [3])?;
    w.embedding(&ids)?.sum()?.backward()?;
    assert_eq!(grad_of(&w), vec![1.0, 1.0, 0.0, 0.0, 2.0, 2.0]);
    let m = Tensor::from_vec(vec![true, false, true], [3])?;
    let x = leaf(&[1.0; 6], &[3, 2]);
    x.index_mask(&m)?.mul(2.0)?.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![2.0, 2.0, 0.0, 0.0, 2.0, 2.0]);
    Ok(())
}

#[test]
fn pads_accumulate_into_the_source() -> Result<(), Error> {
    let x = leaf(&[1.0, 2.0, 3.0], &[3]);
    x.pad(&[2, 2], PadMode::Reflect)?.sum()?.backward()?;
    // [3 2 | 1 2 3 | 2 1]
    assert_eq!(grad_of(&x), vec![2.0, 3.0, 2.0]);
    let x = leaf(&[1.0, 2.0, 3.0], &[3]);
    x.pad(&[2, 1], PadMode::Replicate)?.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![3.0, 1.0, 2.0]);
    Ok(())
}

#[test]
fn as_strided_overlapping_windows_accumulate() -> Result<(), Error> {
    let x = leaf(&[1.0, 2.0, 3.0, 4.0], &[4]);
    let w = x.as_strided(&[3, 2], &[1, 1], 0)?;
    assert_eq!(w.grad_fn().unwrap().name(), "AsStridedBackward");
    w.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![1.0, 2.0, 2.0, 1.0]);
    Ok(())
}

#[test]
fn non_differentiable_outputs_have_no_grad_fn() -> Result<(), Error> {
    let x = leaf(&[3.0, 1.0, 2.0, 1.0], &[4]);
    let (v, i) = x.sort(0, false, true)?;
    assert_eq!(v.grad_fn().unwrap().name(), "SortBackward");
    assert!(i.grad_fn().is_none() && !i.requires_grad());
    let (_, ti) = x.topk(2, 0, true, true)?;
    assert!(!ti.requires_grad());
    for out in [
        x.argsort(0, false, true)?,
        x.unique(true, false, false)?.0,
        x.gt(1.5)?.nonzero()?,
        x.histc(3, 0.0, 3.0)?,
        x.searchsorted(&t(&[1.5], &[1]), false)?,
        Tensor::from_vec(vec![0i64, 2, 2], [3])?.bincount(Some(&x.narrow(0, 0, 3)?), 0)?,
        x.argmax(Some(0), false)?,
    ] {
        assert!(out.grad_fn().is_none(), "{:?}", out.shape());
        assert!(!out.requires_grad());
    }
    // backward through an integer output is an error, not a panic
    let err = i.sum()?.backward().unwrap_err();
    assert!(err.to_string().contains("does not require grad"), "{err}");
    Ok(())
}

#[test]
fn in_place_index_ops_follow_autograd_rules() -> Result<(), Error> {
    let idx = Tensor::from_vec(vec![1i64, 0], [2])?;
    // on a leaf that requires grad: an error, and the leaf is unchanged
    let x = leaf(&[1.0, 2.0, 3.0], &[3]);
    let src = t(&[7.0, 8.0], &[2]);
    for err in [
        x.scatter_(0, &idx, &src).unwrap_err(),
        x.index_add_(0, &idx, &src, 1).unwrap_err(),
        x.index_fill_(0, &idx, 0.0).unwrap_err(),
        x.masked_fill_(&Tensor::from_vec(vec![true, false, true], [3])?, 0.0)
            .unwrap_err(),
    ] {
        assert!(err.to_string().contains("leaf"), "{err}");
    }
    assert_eq!(x.to_vec::<f64>()?, vec![1.0, 2.0, 3.0]);
    // on a non-leaf: recorded, with PyTorch's gradients
    let x = leaf(&[1.0, 2.0, 3.0], &[3]);
    let s = leaf(&[7.0, 8.0], &[2]);
    let y = x.mul(2.0)?;
    y.scatter_(0, &idx, &s)?;
    assert_eq!(y.to_vec::<f64>()?, vec![8.0, 7.0, 6.0]);
    y.mul(&t(&[1.0, 10.0, 100.0], &[3]))?.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![0.0, 0.0, 200.0]);
    assert_eq!(grad_of(&s), vec![10.0, 1.0]);
    // masked_fill_ and tril_ on non-leaves rebase self's history
    let x = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let y = x.mul(3.0)?;
    y.masked_fill_(&Tensor::from_vec(vec![false, true], [2])?, 0.0)?;
    y.tril_(0)?;
    y.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![3.0, 0.0, 3.0, 0.0]);
    Ok(())
}

#[test]
fn modifying_a_saved_index_is_a_loud_error() -> Result<(), Error> {
    let x = leaf(&[1.0, 2.0, 3.0], &[3]);
    let idx = Tensor::from_vec(vec![0i64, 2], [2])?;
    let y = x.index_select(0, &idx)?.sum()?;
    idx.fill_(1)?;
    let err = y.backward().unwrap_err();
    assert!(
        err.to_string()
            .contains("modified by an in-place operation"),
        "{err}"
    );
    Ok(())
}

#[test]
fn out_forms_refuse_to_record() -> Result<(), Error> {
    let a = leaf(&[1.0, 2.0], &[2]);
    let out = Tensor::zeros([4], DType::F64, &stride_core::Device::Cpu)?;
    let err = Tensor::cat_out(&[&a, &a], 0, &out).unwrap_err();
    assert!(err.to_string().contains("_out"), "{err}");
    assert_eq!(out.to_vec::<f64>()?, vec![0.0; 4]);
    let out = Tensor::zeros([2, 2], DType::F64, &stride_core::Device::Cpu)?;
    assert!(Tensor::stack_out(&[&a, &a], 0, &out).is_err());
    Ok(())
}

#[test]
fn double_backward_through_index_and_join_ops() -> Result<(), Error> {
    // y = Σ (x[idx])³ ; dy/dx = 3 Σ x[idx]² (accumulated), d²y/dx² = 6 Σ x[idx]
    let x = leaf(&[1.0, 2.0, 3.0], &[3]);
    let idx = Tensor::from_vec(vec![2i64, 2, 0], [3])?;
    let y = Tensor::cat(&[&x.index_select(0, &idx)?, &x.narrow(0, 1, 1)?], 0)?
        .pow(3.0)?
        .sum()?;
    let opts = GradOptions {
        create_graph: true,
        ..Default::default()
    };
    let g = autograd::grad(&[&y], &[&x], None, opts)?[0]
        .clone()
        .unwrap();
    assert_eq!(g.to_vec::<f64>()?, vec![3.0, 12.0, 54.0]);
    g.sum()?.backward()?;
    assert_eq!(grad_of(&x), vec![6.0, 12.0, 36.0]);
    Ok(())
}
