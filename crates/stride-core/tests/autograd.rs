//! Autograd: the facts of the issue, PyTorch's semantics of modes, in-place safety, hooks and
//! the functional API.

use stride_core::autograd::{self, BackwardOptions, GradOptions};
use stride_core::{DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

fn s(v: f64) -> Tensor {
    Tensor::scalar(v, DType::F64, &CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}
fn val(t: &Tensor) -> f64 {
    t.to_f64_vec().unwrap()[0]
}

#[test]
fn chain_rule_facts() -> Result<(), Error> {
    let (a, b) = (s(2.0), s(3.0));
    let c = a.mul(&b)?;
    let d = a.add(&b)?;
    let e = c.mul(&d)?;
    let l = e.mul(&e)?;
    l.backward()?;
    assert_eq!(
        (val(&a.grad().unwrap()), val(&b.grad().unwrap())),
        (1260.0, 960.0)
    );

    // L = e³: dL/da = 3e²·de/da = 3·900·21, dL/db = 3·900·16
    let (a, b) = (s(2.0), s(3.0));
    let e = a.mul(&b)?.mul(&a.add(&b)?)?;
    let l = e.mul(&e)?.mul(&e)?;
    l.backward()?;
    assert_eq!(
        (val(&a.grad().unwrap()), val(&b.grad().unwrap())),
        (56700.0, 43200.0)
    );

    // x = 2, y = x·x + x ⇒ dy/dx = 5
    let x = s(2.0);
    x.mul(&x)?.add(&x)?.backward()?;
    assert_eq!(val(&x.grad().unwrap()), 5.0);
    Ok(())
}

#[test]
fn accumulation_and_retain_graph() -> Result<(), Error> {
    let x = s(3.0);
    let y = x.mul(&x)?;
    let keep = BackwardOptions {
        retain_graph: true,
        ..Default::default()
    };
    let one = Tensor::scalar(1.0, DType::F64, &CPU)?;
    y.backward_with(&one, keep)?;
    y.backward_with(&one, BackwardOptions::default())?;
    assert_eq!(
        val(&x.grad().unwrap()),
        12.0,
        "two backward calls give twice the gradient"
    );
    let err = y.backward().unwrap_err().to_string();
    assert!(
        err.contains("retain_graph") && err.contains("MulBackward"),
        "{err}"
    );
    x.zero_grad()?;
    assert_eq!(val(&x.grad().unwrap()), 0.0);
    x.set_grad(None)?;
    assert!(x.grad().is_none());
    Ok(())
}

#[test]
fn grad_fn_names_and_graph_walk() -> Result<(), Error> {
    let (a, b) = (s(1.0), s(2.0));
    let y = a.mul(&b)?.add(1.0)?.exp()?;
    let f = y.grad_fn().unwrap();
    assert_eq!(f.name(), "ExpBackward");
    let next = f.next_functions();
    let autograd::NextFn::Node(add, _) = &next[0] else {
        panic!("expected a node")
    };
    assert_eq!(add.name(), "AddBackward");
    let autograd::NextFn::Node(mul, _) = &add.next_functions()[0] else {
        panic!()
    };
    assert_eq!(mul.name(), "MulBackward");
    assert!(
        matches!(&mul.next_functions()[0], autograd::NextFn::Leaf(t) if t.shares_storage_with(&a))
    );
    assert!(a.is_leaf() && !y.is_leaf() && a.grad_fn().is_none());
    Ok(())
}

#[test]
fn modes() -> Result<(), Error> {
    let w = s(2.0);
    {
        let _g = autograd::no_grad();
        let y = w.mul(3.0)?;
        assert!(y.grad_fn().is_none() && !y.requires_grad());
        {
            let _e = autograd::enable_grad();
            assert!(w.mul(3.0)?.requires_grad());
        }
        assert!(!autograd::is_grad_enabled());
    }
    assert!(autograd::is_grad_enabled());
    let t = {
        let _i = autograd::inference_mode();
        Tensor::ones([], DType::F64, &CPU)?.mul(2.0)?
    };
    let err = w.mul(&t).unwrap_err().to_string();
    assert!(err.contains("inference"), "{err}");
    // an inference tensor that is not saved is fine
    assert!(w.add(&t)?.requires_grad());
    Ok(())
}

#[test]
fn in_place_safety() -> Result<(), Error> {
    let x = s(2.0);
    let err = x.add_(1.0).unwrap_err().to_string();
    assert!(err.contains("leaf") && err.contains("no_grad"), "{err}");
    {
        let _g = autograd::no_grad();
        x.add_(1.0)?; // optimizers do this
    }
    assert_eq!(val(&x), 3.0);

    // a saved tensor modified in place: backward names the op and the versions
    let a = s(1.5);
    let h = a.mul(2.0)?; // non-leaf
    let y = h.mul(&h)?; // saves h
    h.add_(1.0)?;
    let err = y.backward().unwrap_err().to_string();
    assert!(
        err.contains("MulBackward") && err.contains("version"),
        "{err}"
    );

    // in-place on a non-leaf is differentiable: y = (2x + 1)·x ⇒ dy/dx = 4x + 1
    let x = s(3.0);
    let h = x.mul(2.0)?;
    h.add_(1.0)?;
    assert_eq!(h.grad_fn().unwrap().name(), "AddBackward");
    h.mul(&x)?.backward()?;
    assert_eq!(val(&x.grad().unwrap()), 13.0);

    // _out forms refuse to record
    let out = Tensor::zeros([], DType::F64, &CPU)?;
    assert!(x.exp_out(&out).unwrap_err().to_string().contains("_out"));
    Ok(())
}

#[test]
fn hooks_retain_grad_detach() -> Result<(), Error> {
    let x = s(2.0);
    x.register_hook(|g| Ok(Some(g.mul(10.0)?)))?;
    let h = x.mul(3.0)?;
    h.retain_grad()?;
    h.register_hook(|g| Ok(Some(g.add(1.0)?)))?; // dL/dh = 2h = 12 → 13
    let l = h.mul(&h)?;
    l.backward()?;
    assert_eq!(val(&h.grad().unwrap()), 13.0);
    assert_eq!(val(&x.grad().unwrap()), 390.0); // 13 · 3 · 10
    let d = h.detach();
    assert!(!d.requires_grad() && d.shares_storage_with(&h));
    Ok(())
}

#[test]
fn functional_and_higher_order() -> Result<(), Error> {
    let x = s(2.0);
    let y = x.mul(&x)?.mul(&x)?.sin()?; // sin(x³)
    let opts = GradOptions {
        create_graph: true,
        ..Default::default()
    };
    let g1 = autograd::grad(&[&y], &[&x], None, opts)?[0]
        .clone()
        .unwrap();
    let xv: f64 = 2.0;
    assert!((val(&g1) - 3.0 * xv * xv * (xv.powi(3)).cos()).abs() < 1e-12);
    let g2 = autograd::grad(&[&g1], &[&x], None, GradOptions::default())?[0]
        .clone()
        .unwrap();
    let expect = 6.0 * xv * xv.powi(3).cos() - 9.0 * xv.powi(4) * xv.powi(3).sin();
    assert!((val(&g2) - expect).abs() < 1e-9, "{} vs {expect}", val(&g2));
    assert!(x.grad().is_none(), "grad() must not touch .grad()");

    // gradients of a broadcast op are summed back to each input's shape
    let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3, 1])?.requires_grad_(true)?;
    let b = Tensor::from_vec(vec![10.0f64, 20.0, 30.0, 40.0], [4])?.requires_grad_(true)?;
    let g = autograd::grad(
        &[&a.mul(&b)?],
        &[&a, &b],
        Some(&[&Tensor::ones([3, 4], DType::F64, &CPU)?]),
        GradOptions::default(),
    )?;
    assert_eq!(g[0].as_ref().unwrap().to_vec::<f64>()?, vec![100.0; 3]);
    assert_eq!(g[1].as_ref().unwrap().to_vec::<f64>()?, vec![6.0; 4]);
    Ok(())
}

#[test]
fn grads_keep_dtype_and_layout() -> Result<(), Error> {
    // a transposed f16 leaf times an f32 tensor: the gradient is f16 with the leaf's strides
    let w = Tensor::from_vec(vec![1.0f32; 6], [2, 3])?
        .to_dtype(DType::F16)?
        .t()?
        .clone_tensor()?
        .requires_grad_(true)?;
    assert_eq!(w.stride(), &[1, 3]);
    let x = Tensor::full([3, 2], 2.0, DType::F32, &CPU)?;
    let y = w.mul(&x)?;
    assert_eq!(y.dtype(), DType::F32);
    y.backward_with(
        &Tensor::ones([3, 2], DType::F32, &CPU)?,
        BackwardOptions::default(),
    )?;
    let g = w.grad().unwrap();
    assert_eq!((g.dtype(), g.stride()), (DType::F16, &[1usize, 3][..]));
    assert_eq!(g.to_f64_vec()?, vec![2.0; 6]);
    Ok(())
}

#[test]
fn views_are_differentiable() -> Result<(), Error> {
    let x = Tensor::arange(0, 12, &CPU)?
        .to_dtype(DType::F64)?
        .reshape(&[3, 4])?
        .requires_grad_(true)?;
    let parts = [
        x.t()?.slice(0, 1, 4, 2)?.mul(2.0)?, // x[:, 1::2]ᵀ · 2
        x.diagonal(0, 0, 1)?.unsqueeze(0)?.expand(&[2, 3])?, // diag, broadcast twice
        x.select(1, 0)?.reshape(&[3, 1])?,   // x[:, 0]
    ];
    for p in &parts {
        let ones = Tensor::ones(p.shape().to_vec(), DType::F64, &CPU)?;
        let g = autograd::grad(
            &[p],
            &[&x],
            Some(&[&ones]),
            GradOptions {
                allow_unused: true,
                ..Default::default()
            },
        )?;
        let g = g[0].as_ref().unwrap().to_vec::<f64>()?;
        let mut expect = vec![0.0; 12];
        match p.grad_fn().unwrap().name() {
            "MulBackward" => {
                (0..3).for_each(|i| [1, 3].iter().for_each(|&j| expect[i * 4 + j] = 2.0))
            }
            "ExpandBackward" => (0..3).for_each(|i| expect[i * 4 + i] = 2.0),
            "ViewBackward" => (0..3).for_each(|i| expect[i * 4] = 1.0),
            n => panic!("unexpected {n}"),
        }
        assert_eq!(g, expect);
    }
    Ok(())
}
