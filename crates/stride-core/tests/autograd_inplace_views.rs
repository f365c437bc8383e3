//! In-place ops through views of tensors that require grad (issue #4): PyTorch's
//! `CopySlices`. Facts computed by hand (and checked against PyTorch's semantics), every
//! view op × several in-place ops gradchecked against finite differences, stale views
//! regenerated, and the errors PyTorch raises — each leaving its operands unchanged.

use stride_core::autograd::{self, gradcheck, gradgradcheck, BackwardOptions, GradcheckOptions};
use stride_core::{DType, Device, Error, Generator, Result, Tensor};

const CPU: Device = Device::Cpu;
const END: i64 = i64::MAX;

/// Distinct values in ±[0.3, 1.8] (steps of 0.15, alternating sign): away from 0, from the
/// clamp bounds used below and from each other.
fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let k = (i * 7 + seed * 3) % 11;
            let v = 0.3 + k as f64 * 0.15;
            if (i + seed).is_multiple_of(2) {
                v
            } else {
                -v
            }
        })
        .collect()
}
/// A leaf that requires grad.
fn leaf(shape: &[usize], seed: usize) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(values(n, seed), shape.to_vec())
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}
fn leaf_from(v: Vec<f64>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(v, shape.to_vec())
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}
fn constant(v: Vec<f64>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(v, shape.to_vec()).unwrap()
}
fn grad(t: &Tensor) -> Vec<f64> {
    t.grad().expect("a gradient").to_f64_vec().unwrap()
}
fn idx(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape.to_vec()).unwrap()
}
fn name(t: &Tensor) -> &'static str {
    t.grad_fn().map_or("none", |g| g.name())
}

// ----- facts ------------------------------------------------------------------------------

#[test]
fn select_mul_gives_pytorchs_gradient() -> Result<()> {
    // PyTorch: x = leaf; y = x.clone() * 1; y[1].mul_(3); y.sum().backward() → [1, 3, 1, 1]
    let x = leaf_from(vec![1.0, 2.0, 3.0, 4.0], &[4]);
    let y = x.clone_tensor()?.mul(1.0)?;
    let v = y.select(0, 1)?;
    v.mul_(3.0)?;
    assert_eq!(y.to_f64_vec()?, vec![1.0, 6.0, 3.0, 4.0]);
    assert_eq!(name(&y), "CopySlices");
    assert_eq!(name(&v), "AsStridedBackward");
    y.sum()?.backward()?;
    assert_eq!(grad(&x), vec![1.0, 3.0, 1.0, 1.0]);
    Ok(())
}

#[test]
fn transposed_add_reaches_both_operands() -> Result<()> {
    // a = x.clone(); a.t().add_(b); L = Σ c ⊙ a  ⇒  dL/dx = c, dL/db = cᵀ
    let x = leaf(&[2, 3], 1);
    let b = leaf(&[3, 2], 2);
    let a = x.clone_tensor()?;
    a.t()?.add_(&b)?;
    let c = constant(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let xv = x.to_f64_vec()?;
    let bt = b.t()?.to_f64_vec()?;
    let expect: Vec<f64> = xv.iter().zip(&bt).map(|(p, q)| p + q).collect();
    assert_eq!(a.to_f64_vec()?, expect);
    a.mul(&c)?.sum()?.backward()?;
    assert_eq!(grad(&x), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(grad(&b), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    Ok(())
}

#[test]
fn overwritten_region_gets_no_gradient_from_the_old_history() -> Result<()> {
    // a = 2x; a[1:3].copy_(w); L = Σ a²  ⇒  dL/dx = [8x0, 0, 0, 8x3], dL/dw = 2w
    let x = leaf_from(vec![1.0, 2.0, 3.0, 4.0], &[4]);
    let w = leaf_from(vec![-1.0, 0.5], &[2]);
    let a = x.mul(2.0)?;
    a.narrow(0, 1, 2)?.copy_(&w)?;
    assert_eq!(a.to_f64_vec()?, vec![2.0, -1.0, 0.5, 8.0]);
    a.mul(&a)?.sum()?.backward()?;
    assert_eq!(grad(&x), vec![8.0, 0.0, 0.0, 32.0]);
    assert_eq!(grad(&w), vec![-2.0, 1.0]);
    Ok(())
}

#[test]
fn a_base_that_needs_no_grad_gets_one_from_the_write() -> Result<()> {
    // PyTorch: a = zeros(3); u = a[:2]; a[1].copy_(w) ⇒ a and u require grad, a.grad_fn is
    // CopySlices; (a · c).sum() gives w.grad = c[1]; u.sum() gives w.grad += 1
    let w = leaf_from(vec![5.0], &[]);
    let a = Tensor::zeros([3], DType::F64, &CPU)?;
    let u = a.narrow(0, 0, 2)?; // made before the write
    assert!(!a.requires_grad() && !u.requires_grad());
    a.select(0, 1)?.copy_(&w)?;
    assert!(a.requires_grad() && u.requires_grad());
    assert_eq!(name(&a), "CopySlices");
    assert_eq!(u.to_f64_vec()?, vec![0.0, 5.0]);
    let c = constant(vec![2.0, 3.0, 4.0], &[3]);
    let one = Tensor::scalar(1.0, DType::F64, &CPU)?;
    let keep = BackwardOptions {
        retain_graph: true,
        ..Default::default()
    };
    a.mul(&c)?.sum()?.backward_with(&one, keep)?;
    assert_eq!(grad(&w), vec![3.0]);
    u.sum()?.backward()?;
    assert_eq!(grad(&w), vec![4.0]);
    assert_eq!(name(&u), "AsStridedBackward");
    Ok(())
}

#[test]
fn stale_views_regenerate_their_history() -> Result<()> {
    // v made before `a` is modified in place (directly, then through another view): its
    // gradient must follow a's current history, not the one it was made from
    let x = leaf_from(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let a = x.clone_tensor()?;
    let v = a.t()?;
    assert_eq!(name(&v), "TransposeBackward");
    a.mul_(&x)?; // a = x²
    a.select(0, 0)?.mul_(10.0)?; // a[0] = 10 x[0]²
    assert_eq!(name(&v), "AsStridedBackward");
    // Σ vᵀ ⊙ c with c = [[1,2],[3,4]]ᵀ  ⇒  dL/dx = c ⊙ 2x, times 10 on row 0
    let c = constant(vec![1.0, 3.0, 2.0, 4.0], &[2, 2]);
    v.mul(&c)?.sum()?.backward()?;
    assert_eq!(grad(&x), vec![20.0, 80.0, 18.0, 32.0]);

    // the optimizer pattern: a stored view of a parameter, the parameter updated under
    // no_grad: the view's next use follows the parameter
    let p = leaf_from(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let pt = p.t()?;
    pt.sum()?.backward()?;
    {
        let _g = autograd::no_grad();
        p.sub_(&p.grad().unwrap().mul(0.5)?)?;
        p.set_grad(None)?;
    }
    let c = constant(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    pt.mul(&c)?.sum()?.backward()?;
    assert_eq!(grad(&p), vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
    assert_eq!(pt.to_f64_vec()?, vec![0.5, 3.5, 1.5, 4.5, 2.5, 5.5]);
    Ok(())
}

#[test]
fn a_stale_view_can_be_the_root_of_backward() -> Result<()> {
    // backward seeds its roots under no_grad; the stale view must still regenerate
    let x = leaf_from(vec![1.0, 2.0, 3.0], &[3]);
    let a = x.clone_tensor()?;
    let v = a.select(0, 1)?;
    a.mul_(3.0)?;
    v.backward()?;
    assert_eq!(grad(&x), vec![0.0, 3.0, 0.0]);

    let a = x.clone_tensor()?;
    let v = a.narrow(0, 0, 2)?;
    a.select(0, 0)?.mul_(5.0)?;
    {
        let _g = autograd::no_grad();
        assert_eq!(name(&v), "AsStridedBackward");
        assert!(!v.is_leaf() && v.requires_grad());
    }
    v.sum()?.backward()?;
    assert_eq!(grad(&x), vec![5.0, 4.0, 0.0]);
    Ok(())
}

#[test]
fn retained_grad_follows_the_new_value() -> Result<()> {
    // PyTorch: h.retain_grad() then h[0].mul_(3): h.grad is dL/d(new h)
    let x = leaf_from(vec![1.0, 2.0], &[2]);
    let h = x.mul(2.0)?;
    h.retain_grad()?;
    h.select(0, 0)?.mul_(3.0)?; // h = [6, 4]
    h.mul(&h)?.sum()?.backward()?;
    assert_eq!(grad(&h), vec![12.0, 8.0]);
    assert_eq!(grad(&x), vec![72.0, 16.0]); // L = 36 x0² + 4 x1²
    Ok(())
}

#[test]
fn saved_tensors_are_still_checked() -> Result<()> {
    // exp saved its input: writing into that input through a view breaks backward through exp
    let x = leaf(&[3], 1);
    let y = x.mul(2.0)?;
    let z = y.exp()?;
    y.select(0, 0)?.mul_(2.0)?;
    let err = z.sum()?.backward().unwrap_err().to_string();
    assert!(
        err.contains("modified by an in-place operation") && err.contains("ExpBackward"),
        "{err}"
    );

    // writing into exp's *output* is fine in stride: its backward recomputes exp(x) from the
    // saved input (PyTorch saves the output and refuses). y = eˣ, y[0] *= 2 ⇒ Σy has gradient
    // [2e^x0, e^x1, e^x2]
    let x = leaf_from(vec![0.5, -1.0, 2.0], &[3]);
    let y = x.exp()?;
    y.select(0, 0)?.mul_(2.0)?;
    y.sum()?.backward()?;
    let e: Vec<f64> = [0.5f64, -1.0, 2.0].iter().map(|v| v.exp()).collect();
    assert_eq!(grad(&x), vec![2.0 * e[0], e[1], e[2]]);

    // an operand that aliases the written view: div_ saved it, the write changed it
    let x = leaf(&[3, 2], 4);
    let a = x.mul(1.0)?;
    a.select(0, 0)?.div_(&a.select(0, 2)?)?;
    assert!(a.sum()?.backward().is_err());

    // a view saved by an op, then written in place
    let x = leaf(&[2, 2], 2);
    let a = x.mul(1.0)?;
    let v = a.select(0, 1)?;
    let z = v.mul(&v)?; // saves v
    v.add_(1.0)?;
    let err = z.sum()?.backward().unwrap_err().to_string();
    assert!(
        err.contains("modified by an in-place operation") && err.contains("MulBackward"),
        "{err}"
    );

    // sin saved all of `a`; a write through a view of `a` bumps the version of the storage
    // they share, so backward through sin fails too (as in PyTorch)
    let x = leaf(&[2, 2], 3);
    let a = x.mul(1.0)?;
    let s = a.sin()?; // saves a
    a.select(0, 0)?.mul_(2.0)?;
    assert!(s.sum()?.backward().is_err());
    Ok(())
}

// ----- gradcheck --------------------------------------------------------------------------

type F = Box<dyn Fn(&[Tensor]) -> Result<Tensor>>;

fn case(
    name: &'static str,
    ins: Vec<Tensor>,
    f: impl Fn(&[Tensor]) -> Result<Tensor> + 'static,
) -> (&'static str, Vec<Tensor>, F) {
    (name, ins, Box::new(f))
}

/// Functions of leaves that clone an input and then write into views of the clone.
fn table() -> Vec<(&'static str, Vec<Tensor>, F)> {
    let m34 = || leaf(&[3, 4], 1);
    vec![
        case("select.mul_", vec![m34(), leaf(&[4], 2)], |x| {
            let a = x[0].clone_tensor()?;
            a.select(0, 1)?.mul_(&x[1])?;
            a.sin()
        }),
        case("narrow.add_", vec![m34(), leaf(&[3, 2], 2)], |x| {
            let a = x[0].clone_tensor()?;
            a.narrow(1, 1, 2)?.add_(&x[1])?;
            Ok(a)
        }),
        case("slice_step.copy_", vec![m34(), leaf(&[3, 2], 3)], |x| {
            let a = x[0].clone_tensor()?;
            a.slice(1, 0, END, 2)?.copy_(&x[1])?;
            a.mul(&x[0])
        }),
        case("copy_.broadcast", vec![m34(), leaf(&[4], 3)], |x| {
            let a = x[0].clone_tensor()?;
            a.narrow(0, 0, 2)?.copy_(&x[1])?;
            a.mul(&a)
        }),
        case(
            "transpose.addcmul_",
            vec![m34(), leaf(&[4, 3], 4), leaf(&[4, 3], 5)],
            |x| {
                let a = x[0].clone_tensor()?;
                a.t()?.addcmul_(&x[1], &x[2], 0.5)?;
                Ok(a)
            },
        ),
        case("diagonal.mul_", vec![m34(), leaf(&[3], 6)], |x| {
            let a = x[0].clone_tensor()?;
            a.diagonal(0, 0, 1)?.mul_(&x[1])?;
            a.sin()
        }),
        case("diagonal_offset.clamp_", vec![m34()], |x| {
            let a = x[0].mul(1.0)?;
            a.diagonal(1, 0, 1)?.clamp_(-0.97, 1.12)?;
            a.mul(&x[0])
        }),
        case("slice.clamp_min_", vec![m34()], |x| {
            let a = x[0].clone_tensor()?;
            a.slice(0, 0, END, 2)?.clamp_min_(0.52)?;
            Ok(a)
        }),
        case("view_of_view.mul_", vec![m34(), leaf(&[2], 7)], |x| {
            let a = x[0].clone_tensor()?;
            a.narrow(0, 1, 2)?.select(1, 2)?.mul_(&x[1])?;
            Ok(a)
        }),
        case(
            "view_of_transposed_view.sub_",
            vec![m34(), leaf(&[2, 2], 8)],
            |x| {
                let a = x[0].clone_tensor()?;
                a.t()?.narrow(0, 1, 2)?.slice(1, 0, END, 2)?.sub_(&x[1])?;
                a.exp()
            },
        ),
        case(
            "overlapping_writes_through_two_views",
            vec![m34(), leaf(&[2, 4], 9), leaf(&[2, 4], 10)],
            |x| {
                let a = x[0].clone_tensor()?;
                let (v1, v2) = (a.narrow(0, 0, 2)?, a.narrow(0, 1, 2)?); // both before the writes
                v1.mul_(&x[1])?;
                v2.mul_(&x[2])?; // reads row 1 as v1 left it
                a.sin()
            },
        ),
        case(
            "transposed_view_of_non_contiguous_base",
            vec![m34(), leaf(&[4], 11)],
            |x| {
                let b = x[0].t()?.clone_tensor()?; // [4, 3], strides [1, 4]: a non-contiguous root
                if b.is_contiguous() {
                    return Err(Error::Invalid {
                        op: "test",
                        msg: "the base should be non-contiguous".into(),
                    });
                }
                b.t()?.select(0, 1)?.mul_(&x[1])?;
                b.select(0, 2)?.add_(1.5)?;
                b.mul(&b)
            },
        ),
        case(
            "masked_fill_.tensor_value",
            vec![m34(), leaf(&[], 12)],
            |x| {
                let a = x[0].clone_tensor()?;
                let mask = Tensor::from_vec(
                    vec![
                        true, false, false, true, false, true, true, false, false, false, true,
                        false,
                    ],
                    [4, 3],
                )?;
                a.t()?.masked_fill_(&mask, &x[1])?;
                a.mul(&x[0])
            },
        ),
        case("index_fill_", vec![m34()], |x| {
            let a = x[0].mul(2.0)?;
            a.narrow(1, 1, 3)?
                .index_fill_(1, &idx(&[0, 2], &[2]), 0.5)?;
            a.mul(&x[0])
        }),
        case("index_add_", vec![m34(), leaf(&[3], 13)], |x| {
            let a = x[0].clone_tensor()?;
            a.select(0, 2)?
                .index_add_(0, &idx(&[3, 0, 3], &[3]), &x[1], 2.0)?;
            a.sin()
        }),
        case("index_copy_", vec![m34(), leaf(&[2, 3], 14)], |x| {
            let a = x[0].clone_tensor()?;
            a.t()?.index_copy_(0, &idx(&[3, 1], &[2]), &x[1])?;
            a.mul(&a)
        }),
        case("scatter_", vec![m34(), leaf(&[2, 3], 15)], |x| {
            let a = x[0].clone_tensor()?;
            a.t()?
                .scatter_(0, &idx(&[1, 0, 3, 2, 3, 0], &[2, 3]), &x[1])?;
            Ok(a)
        }),
        case("fill_", vec![m34()], |x| {
            let a = x[0].clone_tensor()?;
            a.select(1, 0)?.fill_(0.5)?;
            a.mul(&x[0])
        }),
        case("cumsum_", vec![m34()], |x| {
            let a = x[0].clone_tensor()?;
            a.select(0, 1)?.cumsum_(0)?;
            a.sin()
        }),
        case("add_.aliased_operand", vec![m34()], |x| {
            let a = x[0].clone_tensor()?;
            a.select(0, 0)?.add_(&a.select(0, 2)?)?; // reads another view of the same base
            a.mul(&a)
        }),
        case(
            "stale_view_after_write_through_another",
            vec![m34(), leaf(&[3, 2], 16)],
            |x| {
                let a = x[0].clone_tensor()?;
                let u = a.select(1, 1)?; // made before the write
                a.narrow(1, 0, 2)?.mul_(&x[1])?;
                u.mul(&u)
            },
        ),
        case(
            "stale_view_after_write_to_base",
            vec![m34(), leaf(&[3, 4], 17)],
            |x| {
                let a = x[0].clone_tensor()?;
                let v = a.t()?;
                a.mul_(&x[1])?;
                v.sin()
            },
        ),
        case("stale_expanded_view", vec![m34(), leaf(&[4], 19)], |x| {
            let a = x[0].clone_tensor()?;
            let e = a.narrow(0, 0, 1)?.expand(&[3, -1])?; // overlapping, made before the write
            a.select(0, 0)?.mul_(&x[1])?;
            e.mul(&e)
        }),
        case(
            "write_into_base_of_a_non_grad_tensor",
            vec![leaf(&[2, 4], 18)],
            |x| {
                let a = Tensor::ones([3, 4], DType::F64, &CPU)?;
                a.narrow(0, 1, 2)?.copy_(&x[0])?;
                a.slice(1, 1, END, 2)?.sub_(&a.slice(1, 0, END, 2)?)?;
                Ok(a)
            },
        ),
    ]
}

#[test]
fn gradcheck_in_place_through_views() {
    let mut failed = vec![];
    let cases = table();
    let n = cases.len();
    for (name, ins, f) in cases {
        if let Err(e) = gradcheck(&f, &ins, GradcheckOptions::default()) {
            failed.push(format!("{name}: {e}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {n} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn gradgradcheck_through_copy_slices() {
    let keep = [
        "select.mul_",
        "transpose.addcmul_",
        "overlapping_writes_through_two_views",
        "transposed_view_of_non_contiguous_base",
        "stale_view_after_write_through_another",
    ];
    let mut failed = vec![];
    for (name, ins, f) in table().into_iter().filter(|c| keep.contains(&c.0)) {
        if let Err(e) = gradgradcheck(&f, &ins, GradcheckOptions::default()) {
            failed.push(format!("{name}: {e}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn create_graph_through_copy_slices() -> Result<()> {
    // a = x²; a[0] *= x[1] ⇒ a0 = x0² x1; L = Σa ⇒ dL/dx0 = 2 x0 x1, dL/dx1 = x0² + 2 x1
    let x = leaf_from(vec![2.0, 3.0], &[2]);
    let a = x.mul(&x)?;
    a.select(0, 0)?.mul_(&x.select(0, 1)?)?;
    let l = a.sum()?;
    let g = autograd::grad(
        &[&l],
        &[&x],
        None,
        autograd::GradOptions {
            create_graph: true,
            ..Default::default()
        },
    )?[0]
        .clone()
        .unwrap();
    assert_eq!(g.to_f64_vec()?, vec![12.0, 10.0]);
    // Σ g = 2 x0 x1 + x0² + 2 x1 ⇒ d/dx = [2 x1 + 2 x0, 2 x0 + 2]
    g.sum()?.backward()?;
    assert_eq!(grad(&x), vec![10.0, 6.0]);
    Ok(())
}

// ----- errors -----------------------------------------------------------------------------

/// Runs `f`, which must fail with a message containing every one of `needles`, and checks
/// that `t`'s values, version and history are what they were.
fn refused(t: &Tensor, needles: &[&str], f: impl FnOnce() -> Result<Tensor>) {
    let (vals, version, hist) = (t.to_f64_vec().unwrap(), t.version(), name(t));
    let err = f()
        .expect_err("the in-place op should be refused")
        .to_string();
    for n in needles {
        assert!(err.contains(n), "`{n}` missing from: {err}");
    }
    assert_eq!(t.to_f64_vec().unwrap(), vals, "values changed: {err}");
    assert_eq!(t.version(), version, "version bumped: {err}");
    assert_eq!(name(t), hist, "history changed: {err}");
}

#[test]
fn a_view_of_a_leaf_that_requires_grad_is_refused() {
    let x = leaf(&[3, 4], 1);
    refused(&x, &["view of a leaf", "no_grad", "clone"], || {
        x.select(0, 1)?.mul_(2.0)
    });
    refused(&x, &["view of a leaf"], || {
        x.t()?.narrow(0, 1, 2)?.fill_(0.0)
    });
    let w = leaf(&[4], 2);
    refused(&x, &["view of a leaf"], || x.select(0, 0)?.copy_(&w));
    // a view made a leaf of its own is a leaf
    let c = Tensor::zeros([3], DType::F64, &CPU).unwrap();
    let v = c.select(0, 1).unwrap().requires_grad_(true).unwrap();
    refused(&c, &["leaf"], || v.mul_(2.0));
    // under no_grad it runs, as optimizers need
    {
        let _g = autograd::no_grad();
        x.select(0, 1).unwrap().fill_(7.0).unwrap();
    }
    assert_eq!(x.select(0, 1).unwrap().to_f64_vec().unwrap(), vec![7.0; 4]);
    assert!(x.is_leaf() && x.requires_grad());
}

#[test]
fn views_returned_by_split_chunk_unbind_are_refused() {
    let x = leaf(&[4, 3], 1);
    let a = x.clone_tensor().unwrap();
    refused(&a, &["chunk", "clone()"], || a.chunk(2, 0)?[0].mul_(2.0));
    refused(&a, &["split", "clone()"], || a.split(3, 0)?[1].add_(1.0));
    refused(&a, &["split_with_sizes"], || {
        a.split_with_sizes(&[1, 3], 0)?[1].add_(1.0)
    });
    refused(&a, &["unbind"], || a.unbind(1)?[2].fill_(0.0));
    // a view of such a view is one too
    refused(&a, &["chunk"], || a.chunk(2, 1)?[0].select(0, 0)?.mul_(2.0));
    // a clone of the piece is fine, and so is everything under no_grad
    let p = a.chunk(2, 0).unwrap()[1].clone_tensor().unwrap();
    p.mul_(2.0).unwrap();
    {
        let _g = autograd::no_grad();
        a.unbind(0).unwrap()[0].fill_(0.0).unwrap();
    }
    assert_eq!(a.select(0, 0).unwrap().to_f64_vec().unwrap(), vec![0.0; 3]);
}

#[test]
fn a_view_returned_by_chunk_used_after_its_base_changed_is_refused() -> Result<()> {
    let x = leaf(&[4, 3], 1);
    let a = x.clone_tensor()?;
    let parts = a.chunk(2, 0)?;
    a.mul_(2.0)?;
    let err = parts[0].sum().unwrap_err().to_string();
    assert!(err.contains("chunk") && err.contains("after"), "{err}");
    // made after the write, they're fine
    let parts = a.chunk(2, 0)?;
    parts[0].sum()?.backward()?;
    assert_eq!(grad(&x), [vec![2.0; 6], vec![0.0; 6]].concat());
    Ok(())
}

#[test]
fn a_view_made_under_no_grad_is_refused() {
    let x = leaf(&[3, 4], 1);
    let a = x.mul(1.0).unwrap();
    let v = {
        let _g = autograd::no_grad();
        a.select(0, 1).unwrap()
    };
    assert!(
        !v.requires_grad(),
        "a view made under no_grad is a constant"
    );
    let w = leaf(&[4], 2);
    refused(&a, &["no_grad", "both inside"], || v.mul_(&w));
    // a view made under no_grad of a tensor that needs no grad is an ordinary view
    let c = Tensor::zeros([3], DType::F64, &CPU).unwrap();
    let u = {
        let _g = autograd::no_grad();
        c.select(0, 1).unwrap()
    };
    u.copy_(&w.select(0, 0).unwrap()).unwrap();
    assert_eq!(name(&c), "CopySlices");
}

#[test]
fn a_view_detached_in_place_is_refused() {
    let x = leaf(&[3, 4], 1);
    let a = x.mul(1.0).unwrap();
    let v = a.select(0, 1).unwrap();
    v.detach_();
    assert!(!v.requires_grad());
    let w = leaf(&[4], 2);
    refused(&a, &["detach_()", "clone()"], || v.mul_(&w));
}

#[test]
fn an_expanded_view_is_not_writable() {
    let x = leaf(&[3, 4], 1);
    let a = x.clone_tensor().unwrap();
    refused(&a, &["share memory"], || {
        a.select(0, 0)?.unsqueeze(0)?.expand(&[3, -1])?.mul_(2.0)
    });
}

#[test]
fn everything_runs_under_no_grad() -> Result<()> {
    let x = leaf(&[3, 4], 1);
    let _g = autograd::no_grad();
    let a = x.clone_tensor()?;
    a.t()?.select(0, 1)?.mul_(0.0)?;
    x.diagonal(0, 0, 1)?.fill_(1.0)?;
    a.chunk(3, 1)?[0].add_(1.0)?;
    assert!(a.grad_fn().is_none() && x.is_leaf());
    assert_eq!(x.diagonal(0, 0, 1)?.to_f64_vec()?, vec![1.0; 3]);
    Ok(())
}

#[test]
fn random_fills_are_constants_to_autograd() -> Result<()> {
    // PyTorch: uniform_ through a view rebases the base onto a constant: no gradient flows
    // back through the drawn elements; the values are those drawn without recording
    let x = leaf(&[3, 4], 1);
    let a = x.mul(1.0)?;
    a.t()?
        .select(0, 1)?
        .uniform_(-1.0, 1.0, Some(&Generator::new(7)))?;
    assert_eq!(name(&a), "CopySlices");
    let b = Tensor::zeros([3, 4], DType::F64, &CPU)?;
    b.t()?
        .select(0, 1)?
        .uniform_(-1.0, 1.0, Some(&Generator::new(7)))?;
    assert_eq!(a.select(1, 1)?.to_f64_vec()?, b.select(1, 1)?.to_f64_vec()?);
    a.sum()?.backward()?;
    let expect: Vec<f64> = (0..12)
        .map(|i| if i % 4 == 1 { 0.0 } else { 1.0 })
        .collect();
    assert_eq!(grad(&x), expect);

    // leaves (and views of leaves) that require grad are refused before the generator moves
    let g = Generator::new(3);
    let before = g.get_state();
    refused(&x, &["leaf"], || x.normal_(0.0, 1.0, Some(&g)));
    refused(&x, &["view of a leaf"], || {
        x.select(0, 0)?.bernoulli_(0.5, Some(&g))
    });
    assert_eq!(g.get_state(), before);
    Ok(())
}
