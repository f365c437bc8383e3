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

#[test]
fn gradcheck_elementwise_over_layouts() -> Result<(), Error> {
    use stride_core::autograd::{gradcheck, gradgradcheck, GradcheckOptions};
    let base = Tensor::from_vec(
        (0..24).map(|i| 0.3 + 0.11 * i as f64).collect::<Vec<_>>(),
        [4, 6],
    )?;
    let layouts = [
        base.clone(),
        base.t()?.clone_tensor()?.t()?, // same values, column-major storage
        base.slice(1, 0, 6, 2)?.clone_tensor()?, // then a stepped view of a bigger buffer below
    ];
    let big = Tensor::from_vec(
        (0..48).map(|i| 0.2 + 0.07 * i as f64).collect::<Vec<_>>(),
        [4, 12],
    )?;
    let stepped = big.slice(1, 1, 12, 2)?; // (4, 6) with stride 2, offset 1
    let o = GradcheckOptions::default();
    let unary: Vec<(&str, fn(&Tensor) -> Result<Tensor, Error>)> = vec![
        ("exp", |x| x.exp()),
        ("log", |x| x.log()),
        ("sqrt", |x| x.sqrt()),
        ("rsqrt", |x| x.rsqrt()),
        ("sin", |x| x.sin()),
        ("tanh", |x| x.tanh()),
        ("sigmoid", |x| x.sigmoid()),
        ("gelu", |x| x.gelu()),
        ("gelu_tanh", |x| x.gelu_tanh()),
        ("silu", |x| x.silu()),
        ("softplus", |x| x.softplus()),
        ("erf", |x| x.erf()),
        ("reciprocal", |x| x.reciprocal()),
        ("square", |x| x.square()),
        ("log1p", |x| x.log1p()),
        ("expm1", |x| x.expm1()),
        ("exp2", |x| x.exp2()),
        ("log2", |x| x.log2()),
        ("tan", |x| x.mul(0.3)?.tan()),
        ("abs", |x| x.sub(1.0)?.abs()),
        ("relu", |x| x.sub(1.0)?.relu()),
    ];
    for x in layouts.iter().chain([&stepped]) {
        let x = x.detach().requires_grad_(true)?;
        for (name, f) in &unary {
            gradcheck(|xs| f(&xs[0]), &[x.clone()], o).map_err(|e| Error::Invalid {
                op: "test",
                msg: format!("{name}: {e}"),
            })?;
        }
    }
    let a = stepped.detach().requires_grad_(true)?;
    let b = base
        .t()?
        .clone_tensor()?
        .t()?
        .add(0.5)?
        .detach()
        .requires_grad_(true)?;
    let binary: Vec<(&str, fn(&Tensor, &Tensor) -> Result<Tensor, Error>)> = vec![
        ("add", |a, b| a.add(b)),
        ("sub", |a, b| a.sub(b)),
        ("mul", |a, b| a.mul(b)),
        ("div", |a, b| a.div(b)),
        ("pow", |a, b| a.pow(b)),
        ("atan2", |a, b| a.atan2(b)),
        ("maximum", |a, b| a.maximum(b)),
        ("minimum", |a, b| a.minimum(b)),
        ("remainder", |a, b| a.remainder(b)),
        ("clamp_min", |a, b| a.clamp_min(b)),
        ("lerp", |a, b| a.lerp(b, 0.3)),
        ("addcmul", |a, b| a.addcmul(b, a, 0.7)),
        ("addcdiv", |a, b| a.addcdiv(a, b, -1.3)),
        ("where", |a, b| a.gt(1.0)?.where_cond(a, b)),
        ("clamp", |a, b| a.clamp(b, 1.5)),
        ("broadcast", |a, b| a.mul(&b.select(0, 1)?)),
    ];
    for (name, f) in &binary {
        gradcheck(|xs| f(&xs[0], &xs[1]), &[a.clone(), b.clone()], o).map_err(|e| {
            Error::Invalid {
                op: "test",
                msg: format!("{name}: {e}"),
            }
        })?;
    }
    for (name, f) in binary.iter().take(6) {
        let (a2, b2) = (a.narrow(0, 0, 2)?, b.narrow(0, 0, 2)?);
        gradgradcheck(
            |xs| f(&xs[0], &xs[1]),
            &[
                a2.detach().requires_grad_(true)?,
                b2.detach().requires_grad_(true)?,
            ],
            o,
        )
        .map_err(|e| Error::Invalid {
            op: "test",
            msg: format!("gradgrad {name}: {e}"),
        })?;
    }
    Ok(())
}

#[test]
fn gradcheck_catches_a_wrong_formula() {
    use stride_core::autograd::{gradcheck, GradcheckOptions};
    // floor has zero gradient; pretending its derivative is 1 via a straight-through trick
    // must be reported (the test that the checker can fail)
    let x = Tensor::from_vec(vec![0.3f64, 1.7, -2.2], [3])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let wrong = |xs: &[Tensor]| {
        // value: floor(x)·x; gradient the engine sees: only through the second factor
        xs[0]
            .detach()
            .floor()?
            .mul(&xs[0])?
            .add(&xs[0].detach().mul(0.0)?)
    };
    assert!(gradcheck(wrong, &[x.clone()], GradcheckOptions::default()).is_ok());
    let really_wrong = |xs: &[Tensor]| xs[0].detach().mul(&xs[0].detach())?.add(&xs[0].mul(0.0)?);
    let e = gradcheck(really_wrong, &[x], GradcheckOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("Jacobian mismatch"), "{e}");
}

/// A matrix applied to a batch (a linear layer, `[B, T, K] · [K, N]`): the matrix's
/// gradient folds the batch into one product (`[K, B·T] · [B·T, N]`, as PyTorch does), not a
/// product per batch element — each rounded, then summed in another pass. Checked against
/// finite differences (f64) with the batch contiguous and permuted (so the fold copies),
/// through a second derivative, and op by op: the backward runs two products and no sum.
#[test]
fn a_matrix_applied_to_a_batch_gets_one_folded_gradient() -> Result<(), Error> {
    use stride_core::autograd::{gradcheck, gradgradcheck, GradcheckOptions};
    let o = GradcheckOptions::default();
    let vals = |n: usize, s: f64| -> Vec<f64> {
        (0..n).map(|i| ((i * 7 % 11) as f64 - 5.0) * s).collect()
    };
    let a = Tensor::from_vec(vals(2 * 3 * 4, 0.1), [2, 3, 4])?;
    let permuted = Tensor::from_vec(vals(24, 0.13), [3, 2, 4])?.permute(&[1, 0, 2])?;
    let w = Tensor::from_vec(vals(4 * 5, 0.07), [4, 5])?;
    for x in [a, permuted] {
        let ins = [x.requires_grad_(true)?, w.detach().requires_grad_(true)?];
        gradcheck(|t| t[0].matmul(&t[1]), &ins, o)?;
        gradgradcheck(|t| t[0].matmul(&t[1]), &ins, o)?;
    }
    // empty contractions and batches: zero gradients of the right shapes
    for (xs, ws) in [
        ([2, 3, 0], [0, 5]),
        ([2, 3, 4], [4, 0]),
        ([0, 3, 4], [4, 5]),
    ] {
        let x = Tensor::zeros(xs, DType::F64, &Device::Cpu)?.requires_grad_(true)?;
        let w = Tensor::zeros(ws, DType::F64, &Device::Cpu)?.requires_grad_(true)?;
        x.matmul(&w)?.sum()?.backward()?;
        assert_eq!(w.grad().unwrap().shape(), &ws[..]);
        assert_eq!(x.grad().unwrap().shape(), &xs[..]);
    }
    let x = Tensor::from_vec(vals(16 * 8 * 32, 0.02), [16, 8, 32])?
        .to_dtype(DType::BF16)?
        .requires_grad_(true)?;
    let w = Tensor::from_vec(vals(32 * 8, 0.03), [32, 8])?
        .to_dtype(DType::BF16)?
        .requires_grad_(true)?;
    let y = x.matmul(&w)?.sum()?;
    let p = stride_core::debug::Profiler::start();
    y.backward()?;
    let r = p.stop()?;
    let count = |n: &str| {
        r.events
            .iter()
            .filter(|e| e.kind == "op" && e.name == n)
            .count()
    };
    assert_eq!((count("matmul"), count("sum")), (2, 0), "{}", r.table());
    Ok(())
}
