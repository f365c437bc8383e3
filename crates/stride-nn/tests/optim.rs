//! Optimizers against PyTorch's documented single-tensor algorithms, re-implemented here in
//! plain f64 loops; transposed parameters; groups; state dicts; schedulers; clipping;
//! gradient accumulation; the update-health check.

use stride_core::{DType, Device, Tensor};
use stride_nn::optim::{
    clip_grad_norm_, clip_grad_value_, snapshot, Adam, AdamConfig, Anneal, CosineWithWarmup,
    ExponentialLr, IssueKind, LinearLr, LrScheduler, OneCycleLr, Optimizer, ParamGroup, Sgd,
    SgdConfig, StepLr,
};
use stride_nn::{loss, Linear, Module, Parameter};

const STEPS: usize = 3;

fn close(a: &[f64], b: &[f64], rtol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= rtol * y.abs().max(1e-300) || x == y,
            "{what}[{i}]: got {x:e}, expected {y:e}"
        );
    }
}

/// Deterministic gradients (varied signs and magnitudes) for step `k` of a parameter.
fn grad_values(k: usize, n: usize, salt: f64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.37 + k as f64 * 1.3 + salt).sin() * (1.0 + i as f64 * 0.5))
        .collect()
}

fn init_values(n: usize) -> Vec<f64> {
    (0..n).map(|i| (i as f64 * 0.71 - 1.1).cos()).collect()
}

/// A (3, 4) parameter either contiguous or as a transposed clone (strides (1, 3)).
fn param(transposed: bool) -> Parameter {
    let v = init_values(12);
    let t = if transposed {
        // the same logical values, laid out column-major: build (4, 3) = values^T, then .t()
        let c = Tensor::from_vec(v, [3, 4])
            .unwrap()
            .t()
            .unwrap()
            .contiguous()
            .unwrap();
        c.t().unwrap().clone_tensor().unwrap()
    } else {
        Tensor::from_vec(v, [3, 4]).unwrap()
    };
    if transposed {
        assert_eq!(t.stride(), &[1, 3]);
    }
    Parameter::new(t).unwrap()
}

fn set_grad(p: &Parameter, k: usize) {
    let g = Tensor::from_vec(grad_values(k, p.numel(), 0.25), p.shape()).unwrap();
    p.tensor().set_grad(Some(g)).unwrap();
}

// ----- reference algorithms (PyTorch's `_single_tensor_*`, in plain f64) -------------------

fn sgd_ref(c: &SgdConfig, steps: usize, n: usize) -> Vec<Vec<f64>> {
    let mut p = init_values(n);
    let mut buf: Option<Vec<f64>> = None;
    let mut out = vec![];
    for k in 0..steps {
        let grad = grad_values(k, n, 0.25);
        let mut g: Vec<f64> = grad
            .iter()
            .map(|&x| if c.maximize { -x } else { x })
            .collect();
        if c.weight_decay != 0.0 {
            g = g
                .iter()
                .zip(&p)
                .map(|(g, p)| g + c.weight_decay * p)
                .collect();
        }
        if c.momentum != 0.0 {
            let b = match buf.take() {
                None => g.clone(),
                Some(b) => b
                    .iter()
                    .zip(&g)
                    .map(|(b, g)| {
                        let bm = b * c.momentum;
                        let a = 1.0 - c.dampening;
                        if a == 1.0 {
                            bm + g
                        } else {
                            bm + a * g
                        }
                    })
                    .collect(),
            };
            g = if c.nesterov {
                g.iter().zip(&b).map(|(g, b)| g + c.momentum * b).collect()
            } else {
                b.clone()
            };
            buf = Some(b);
        }
        p = p.iter().zip(&g).map(|(p, g)| p + -c.lr * g).collect();
        out.push(p.clone());
    }
    out
}

fn adam_ref(c: &AdamConfig, steps: usize, n: usize) -> Vec<Vec<f64>> {
    let mut p = init_values(n);
    let (mut m, mut v, mut vmax) = (vec![0.0f64; n], vec![0.0f64; n], vec![0.0f64; n]);
    let (b1, b2) = c.betas;
    let mut out = vec![];
    for k in 0..steps {
        let step = (k + 1) as f64;
        let grad = grad_values(k, n, 0.25);
        let mut g: Vec<f64> = grad
            .iter()
            .map(|&x| if c.maximize { -x } else { x })
            .collect();
        if c.weight_decay != 0.0 {
            if c.decoupled_weight_decay {
                p = p
                    .iter()
                    .map(|p| p * (1.0 - c.lr * c.weight_decay))
                    .collect();
            } else {
                g = g
                    .iter()
                    .zip(&p)
                    .map(|(g, p)| g + c.weight_decay * p)
                    .collect();
            }
        }
        let w = 1.0 - b1;
        for i in 0..n {
            let d = g[i] - m[i];
            m[i] = if w.abs() < 0.5 {
                m[i] + w * d
            } else {
                g[i] - d * (1.0 - w)
            };
            v[i] = v[i] * b2 + (1.0 - b2) * g[i] * g[i];
        }
        let bc1 = 1.0 - b1.powf(step);
        let bc2 = 1.0 - b2.powf(step);
        let step_size = c.lr / bc1;
        let bc2s = bc2.sqrt();
        for i in 0..n {
            let denom = if c.amsgrad {
                vmax[i] = vmax[i].max(v[i]);
                vmax[i].sqrt() / bc2s + c.eps
            } else {
                v[i].sqrt() / bc2s + c.eps
            };
            p[i] += -step_size * m[i] / denom;
        }
        out.push(p.clone());
    }
    out
}

fn run(opt: &mut dyn Optimizer, p: &Parameter, steps: usize) -> Vec<Vec<f64>> {
    let mut out = vec![];
    for k in 0..steps {
        opt.zero_grad().unwrap();
        set_grad(p, k);
        opt.step().unwrap();
        out.push(p.tensor().to_f64_vec().unwrap());
    }
    out
}

fn sgd_configs() -> Vec<SgdConfig> {
    let base = SgdConfig {
        lr: 0.1,
        ..Default::default()
    };
    vec![
        base.clone(),
        SgdConfig {
            momentum: 0.9,
            ..base.clone()
        },
        SgdConfig {
            momentum: 0.9,
            dampening: 0.3,
            ..base.clone()
        },
        SgdConfig {
            momentum: 0.9,
            nesterov: true,
            ..base.clone()
        },
        SgdConfig {
            momentum: 0.5,
            weight_decay: 0.1,
            ..base.clone()
        },
        SgdConfig {
            momentum: 0.9,
            maximize: true,
            weight_decay: 0.01,
            ..base.clone()
        },
    ]
}

fn adam_configs() -> Vec<AdamConfig> {
    let base = AdamConfig {
        lr: 0.05,
        ..Default::default()
    };
    vec![
        base.clone(),
        AdamConfig {
            weight_decay: 0.1,
            ..base.clone()
        },
        AdamConfig {
            amsgrad: true,
            ..base.clone()
        },
        AdamConfig {
            maximize: true,
            ..base.clone()
        },
        AdamConfig {
            betas: (0.3, 0.99),
            eps: 1e-3,
            ..base.clone()
        },
        AdamConfig {
            lr: 0.05,
            ..AdamConfig::adamw()
        },
        AdamConfig {
            lr: 0.05,
            amsgrad: true,
            weight_decay: 0.2,
            ..AdamConfig::adamw()
        },
    ]
}

#[test]
fn sgd_matches_pytorch_algorithm_contiguous_and_transposed() {
    for c in sgd_configs() {
        let expected = sgd_ref(&c, STEPS, 12);
        let mut results = vec![];
        for transposed in [false, true] {
            let p = param(transposed);
            let mut opt = Sgd::new(vec![("w".into(), p.clone())], c.clone()).unwrap();
            let got = run(&mut opt, &p, STEPS);
            for k in 0..STEPS {
                close(&got[k], &expected[k], 1e-12, &format!("{c:?} step {k}"));
            }
            if let Some(s) = opt.state_of("w") {
                if let Some(b) = &s.momentum_buffer {
                    assert_eq!(
                        b.stride(),
                        p.tensor().stride(),
                        "momentum buffer keeps strides"
                    );
                }
            }
            assert_eq!(
                p.tensor().stride(),
                if transposed { &[1, 3] } else { &[4, 1] }
            );
            results.push(got);
        }
        assert_eq!(
            results[0], results[1],
            "{c:?}: transposed differs from contiguous"
        );
    }
}

#[test]
fn adam_and_adamw_match_pytorch_algorithm_contiguous_and_transposed() {
    for c in adam_configs() {
        let expected = adam_ref(&c, STEPS, 12);
        let mut results = vec![];
        for transposed in [false, true] {
            let p = param(transposed);
            let mut opt = Adam::new(vec![("w".into(), p.clone())], c.clone()).unwrap();
            let got = run(&mut opt, &p, STEPS);
            for k in 0..STEPS {
                close(&got[k], &expected[k], 1e-12, &format!("{c:?} step {k}"));
            }
            let s = opt.state_of("w").unwrap();
            assert_eq!(s.step, STEPS as u64);
            assert_eq!(s.exp_avg.stride(), p.tensor().stride());
            assert_eq!(s.exp_avg_sq.stride(), p.tensor().stride());
            results.push(got);
        }
        // bit for bit, whatever the layout
        assert_eq!(
            results[0], results[1],
            "{c:?}: transposed differs from contiguous"
        );
    }
}

#[test]
fn ten_step_trajectories_for_golden_fixtures() {
    // The shape of the future golden test: run 10 steps, snapshot the named parameters after
    // each, compare with arrays (here: the reference; later: PyTorch's, from safetensors).
    let c = AdamConfig {
        lr: 0.01,
        amsgrad: true,
        ..AdamConfig::adamw()
    };
    let expected = adam_ref(&c, 10, 12);
    let p = param(true);
    let mut opt = Adam::new(vec![("encoder.weight".into(), p.clone())], c).unwrap();
    for k in 0..10 {
        opt.zero_grad().unwrap();
        set_grad(&p, k);
        opt.step().unwrap();
        let snap = snapshot(&opt).unwrap();
        let got = snap.get("encoder.weight").unwrap().to_f64_vec().unwrap();
        close(&got, &expected[k], 1e-12, &format!("step {k}"));
    }
}

/// A tiny tied autoencoder: encoder = decoder.t().clone() (non-contiguous) or contiguous.
fn autoencoder_run(contiguous_encoder: bool, adam: bool) -> Vec<Vec<f64>> {
    let dec = Tensor::from_vec(init_values(4 * 3), [4, 3]).unwrap(); // (d, latents)
    let enc = dec.t().unwrap().clone_tensor().unwrap(); // (latents, d), strides (1, 3)
    assert_eq!(enc.stride(), &[1, 3]);
    let enc = if contiguous_encoder {
        enc.contiguous().unwrap()
    } else {
        enc
    };
    let encoder = Linear::from_tensors(
        enc,
        Some(Tensor::zeros([3], DType::F64, &Device::Cpu).unwrap()),
    )
    .unwrap();
    let decoder = Linear::from_tensors(dec.clone_tensor().unwrap(), None).unwrap();
    let x = Tensor::from_vec(grad_values(7, 8 * 4, 0.1), [8, 4])
        .unwrap()
        .mul(0.1)
        .unwrap();
    let mut params = vec![("encoder.weight".to_string(), encoder.weight.clone())];
    params.push(("encoder.bias".into(), encoder.bias.clone().unwrap()));
    params.push(("decoder.weight".into(), decoder.weight.clone()));
    let mut opt: Box<dyn Optimizer> = if adam {
        Box::new(
            Adam::new(
                params,
                AdamConfig {
                    lr: 0.05,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    } else {
        Box::new(
            Sgd::new(
                params,
                SgdConfig {
                    lr: 0.05,
                    momentum: 0.9,
                    nesterov: true,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    };
    opt.set_health_check(true);
    let mut traj = vec![];
    for _ in 0..5 {
        opt.zero_grad().unwrap();
        let h = encoder.forward(&x).unwrap().relu().unwrap();
        let y = decoder.forward(&h).unwrap();
        let l = loss::mse_loss(&y, &x, loss::Reduction::Mean).unwrap();
        l.backward().unwrap();
        opt.step().unwrap();
        assert!(
            opt.health().unwrap().is_healthy(),
            "{}",
            opt.health().unwrap()
        );
        let mut row = encoder.weight.tensor().to_f64_vec().unwrap();
        row.push(l.item::<f64>().unwrap());
        traj.push(row);
    }
    assert_eq!(
        encoder.weight.tensor().is_contiguous(),
        contiguous_encoder,
        "the update kept the encoder's layout"
    );
    traj
}

#[test]
fn transposed_encoder_trains_like_contiguous() {
    // The optimizer itself is layout-exact (the tests above compare bit for bit given the
    // same gradients). End to end, the gradients come from matmuls whose last bits depend on
    // the operands' layouts (the `gemm` crate picks another kernel when both operands are
    // contiguous along k), so the trajectories agree to rounding, not bit for bit.
    for adam in [true, false] {
        let a = autoencoder_run(false, adam);
        let b = autoencoder_run(true, adam);
        for (k, (ra, rb)) in a.iter().zip(&b).enumerate() {
            close(ra, rb, 1e-12, &format!("adam={adam} step {k}"));
        }
        assert!(a[4].last() < a[0].last(), "the loss falls");
    }
}

#[test]
fn parameter_groups_have_their_own_hyperparameters() {
    let p1 = param(false);
    let p2 = param(true);
    let c1 = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    let c2 = SgdConfig {
        lr: 0.01,
        ..Default::default()
    };
    let mut opt = Sgd::with_groups(vec![
        ParamGroup::new(vec![("a".into(), p1.clone())], c1.clone()),
        ParamGroup::new(vec![("b".into(), p2.clone())], c2.clone()),
    ])
    .unwrap();
    for k in 0..STEPS {
        opt.zero_grad().unwrap();
        set_grad(&p1, k);
        set_grad(&p2, k);
        opt.step().unwrap();
    }
    close(
        &p1.tensor().to_f64_vec().unwrap(),
        &sgd_ref(&c1, STEPS, 12)[STEPS - 1],
        1e-12,
        "group 0",
    );
    close(
        &p2.tensor().to_f64_vec().unwrap(),
        &sgd_ref(&c2, STEPS, 12)[STEPS - 1],
        1e-12,
        "group 1",
    );
    assert_eq!(opt.lrs(), [0.1, 0.01]);
    assert!(opt.set_lr(2, 0.1).is_err());
    assert!(opt.config_mut(2).is_err());
    opt.config_mut(1).unwrap().momentum = 0.5;
    assert_eq!(opt.momenta(), [0.9, 0.5]);
    // a parameter in two groups is an error
    let e = Sgd::with_groups(vec![
        ParamGroup::new(vec![("a".into(), p1.clone())], c1.clone()),
        ParamGroup::new(vec![("a2".into(), p1.clone())], c2),
    ]);
    assert!(e.is_err());
}

#[test]
fn zero_grad_sets_none_and_params_without_grad_are_skipped() {
    let p = param(false);
    let q = param(false);
    let before_q = q.tensor().to_f64_vec().unwrap();
    let mut opt = Adam::new(
        vec![("p".into(), p.clone()), ("q".into(), q.clone())],
        AdamConfig::default(),
    )
    .unwrap();
    set_grad(&p, 0);
    opt.step().unwrap();
    assert_eq!(q.tensor().to_f64_vec().unwrap(), before_q);
    assert!(opt.state_of("q").is_none());
    opt.zero_grad().unwrap();
    assert!(p.grad().is_none());
    set_grad(&p, 1);
    opt.zero_grad_with(false).unwrap();
    assert_eq!(p.grad().unwrap().to_f64_vec().unwrap(), vec![0.0; 12]);
}

#[test]
fn gradients_accumulate_across_backward_calls_until_zero_grad() {
    let w = Parameter::new(Tensor::from_vec(vec![1.0f64, -2.0, 0.5], [3]).unwrap()).unwrap();
    let x1 = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3]).unwrap();
    let x2 = Tensor::from_vec(vec![-1.0f64, 0.5, 2.0], [3]).unwrap();
    let mut opt = Sgd::new(
        vec![("w".into(), w.clone())],
        SgdConfig {
            lr: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    // two micro-batches: grads add up
    w.tensor()
        .mul(&x1)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    w.tensor()
        .mul(&x2)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(w.grad().unwrap().to_f64_vec().unwrap(), vec![0.0, 2.5, 5.0]);
    opt.step().unwrap();
    assert_eq!(w.tensor().to_f64_vec().unwrap(), vec![1.0, -3.25, -2.0]);
    // after zero_grad the next backward starts afresh
    opt.zero_grad().unwrap();
    w.tensor()
        .mul(&x1)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(w.grad().unwrap().to_f64_vec().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn state_dict_round_trip_continues_the_same_trajectory() {
    for c in adam_configs() {
        let expected = adam_ref(&c, 4, 12);
        let p = param(true);
        let mut opt = Adam::new(vec![("w".into(), p.clone())], c.clone()).unwrap();
        run(&mut opt, &p, 2);
        let sd = opt.state_dict().unwrap();
        assert_eq!(
            sd.state[&0]["step"]
                .to_dtype(DType::F64)
                .unwrap()
                .item::<f64>()
                .unwrap(),
            2.0
        );
        assert_eq!(sd.param_groups[0].0["lr"], c.lr);
        // a fresh optimizer over a fresh parameter with the same values
        let p2 = Parameter::new(p.tensor().detach().clone_tensor().unwrap()).unwrap();
        let mut opt2 = Adam::new(vec![("w".into(), p2.clone())], AdamConfig::default()).unwrap();
        opt2.load_state_dict(&sd).unwrap();
        assert_eq!(opt2.param_groups()[0].config, c);
        assert_eq!(opt2.state_of("w").unwrap().exp_avg.stride(), &[1, 3]);
        for k in 2..4 {
            opt2.zero_grad().unwrap();
            set_grad(&p2, k);
            opt2.step().unwrap();
        }
        close(
            &p2.tensor().to_f64_vec().unwrap(),
            &expected[3],
            1e-12,
            &format!("{c:?}"),
        );
    }
    // SGD momentum buffers too
    let c = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    let p = param(false);
    let mut opt = Sgd::new(vec![("w".into(), p.clone())], c.clone()).unwrap();
    run(&mut opt, &p, 2);
    let sd = opt.state_dict().unwrap();
    let mut opt2 = Sgd::new(vec![("w".into(), p.clone())], SgdConfig::default()).unwrap();
    opt2.load_state_dict(&sd).unwrap();
    opt2.zero_grad().unwrap();
    set_grad(&p, 2);
    opt2.step().unwrap();
    close(
        &p.tensor().to_f64_vec().unwrap(),
        &sgd_ref(&c, 3, 12)[2],
        1e-12,
        "sgd resume",
    );
}

#[test]
fn optimizer_state_dict_errors_leave_the_optimizer_unchanged() {
    let p = param(false);
    let mut opt = Adam::new(vec![("w".into(), p.clone())], AdamConfig::default()).unwrap();
    run(&mut opt, &p, 1);
    let mut sd = opt.state_dict().unwrap();
    // a mis-shaped moment
    sd.state.get_mut(&0).unwrap().insert(
        "exp_avg".into(),
        Tensor::zeros([2, 2], DType::F64, &Device::Cpu).unwrap(),
    );
    let e = opt.load_state_dict(&sd).unwrap_err().to_string();
    assert!(e.contains("exp_avg") && e.contains("[2, 2]"), "{e}");
    assert_eq!(opt.state_of("w").unwrap().step, 1);
    // wrong number of groups
    let mut sd2 = opt.state_dict().unwrap();
    sd2.param_groups.push(sd2.param_groups[0].clone());
    assert!(opt
        .load_state_dict(&sd2)
        .unwrap_err()
        .to_string()
        .contains("parameter groups"));
    // invalid hyperparameters are refused at construction
    assert!(Adam::new(
        vec![("w".into(), p.clone())],
        AdamConfig {
            betas: (1.0, 0.9),
            ..Default::default()
        }
    )
    .is_err());
    assert!(Sgd::new(
        vec![("w".into(), p.clone())],
        SgdConfig {
            nesterov: true,
            ..Default::default()
        }
    )
    .is_err());
    assert!(Sgd::new(
        vec![("w".into(), p)],
        SgdConfig {
            lr: -1.0,
            ..Default::default()
        }
    )
    .is_err());
}

// ----- update-health check -------------------------------------------------------------------

#[test]
fn health_check_reports_a_dropped_update_by_name() {
    let enc = param(true);
    let dec = param(false);
    let mut opt = Adam::new(
        vec![
            ("encoder.weight".into(), enc.clone()),
            ("decoder.weight".into(), dec.clone()),
        ],
        AdamConfig {
            lr: 1e-2,
            ..Default::default()
        },
    )
    .unwrap();
    opt.set_health_check(true);
    set_grad(&enc, 0);
    set_grad(&dec, 0);
    opt.step().unwrap();
    let r = opt.health().unwrap();
    assert!(r.is_healthy(), "{r}");
    assert_eq!(r.checked, 2);

    // the fault: the encoder's update goes into a copy that is dropped
    opt.inject_dropped_update("encoder.weight");
    let before = enc.tensor().to_f64_vec().unwrap();
    opt.zero_grad().unwrap();
    set_grad(&enc, 1);
    set_grad(&dec, 1);
    enc.grad().unwrap().mul_(1.2e7).unwrap();
    opt.step().unwrap();
    assert_eq!(
        enc.tensor().to_f64_vec().unwrap(),
        before,
        "the fault really dropped the update"
    );
    let r = opt.health().unwrap();
    assert_eq!(r.issues.len(), 1, "{r}");
    assert_eq!(r.issues[0].name, "encoder.weight");
    assert!(matches!(r.issues[0].kind, IssueKind::Unchanged { .. }));
    let msg = r.to_string();
    let gmax = grad_values(1, 12, 0.25)
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()))
        * 1.2e7;
    assert_eq!(
        msg,
        format!("encoder.weight: |grad| max {gmax:.1e} but unchanged after step")
    );
    assert!(msg.ends_with("e7 but unchanged after step"), "{msg}");
    assert!(r.into_result().is_err());
}

#[test]
fn health_check_reports_non_finite_moments_and_is_off_by_default() {
    let p = param(false);
    let mut opt = Adam::new(vec![("w".into(), p.clone())], AdamConfig::default()).unwrap();
    let mut g = grad_values(0, 12, 0.25);
    g[3] = f64::INFINITY;
    p.tensor()
        .set_grad(Some(Tensor::from_vec(g, [3, 4]).unwrap()))
        .unwrap();
    opt.step().unwrap();
    assert!(opt.health().is_none(), "off by default");
    opt.set_health_check(true);
    opt.step().unwrap();
    let r = opt.health().unwrap();
    assert!(
        r.issues.iter().any(|i| i.name == "w"
            && i.kind
                == IssueKind::NonFiniteMoment {
                    moment: "exp_avg_sq"
                }),
        "{r}"
    );
    // a zero gradient that leaves a parameter unchanged is not an issue
    let q = param(false);
    let mut opt = Sgd::new(vec![("q".into(), q.clone())], SgdConfig::default()).unwrap();
    opt.set_health_check(true);
    q.tensor()
        .set_grad(Some(
            Tensor::zeros([3, 4], DType::F64, &Device::Cpu).unwrap(),
        ))
        .unwrap();
    opt.step().unwrap();
    assert!(opt.health().unwrap().is_healthy());
    // nor is an unchanged parameter when the learning rate is 0 (e.g. warmup's first step)
    q.tensor()
        .set_grad(Some(
            Tensor::ones([3, 4], DType::F64, &Device::Cpu).unwrap(),
        ))
        .unwrap();
    opt.set_lr(0, 0.0).unwrap();
    opt.step().unwrap();
    assert!(opt.health().unwrap().is_healthy());
    opt.set_lr(0, 0.1).unwrap();
    opt.step().unwrap();
    assert!(opt.health().unwrap().is_healthy());
}

// ----- clipping -------------------------------------------------------------------------------

#[test]
fn clip_grad_norm_and_value() {
    let a = Parameter::new(Tensor::zeros([2], DType::F64, &Device::Cpu).unwrap()).unwrap();
    let b = param(true);
    a.tensor()
        .set_grad(Some(Tensor::from_vec(vec![3.0f64, -4.0], [2]).unwrap()))
        .unwrap();
    set_grad(&b, 0);
    let gb = grad_values(0, 12, 0.25);
    let total_ref = (25.0 + gb.iter().map(|x| x * x).sum::<f64>()).sqrt();
    let total = clip_grad_norm_(&[a.clone(), b.clone()], 1.0, 2.0, false).unwrap();
    assert_eq!((total.dim(), total.dtype()), (0, DType::F64));
    let total = total.item::<f64>().unwrap();
    assert!((total - total_ref).abs() < 1e-12 * total_ref);
    let coef = 1.0 / (total + 1e-6);
    close(
        &a.grad().unwrap().to_f64_vec().unwrap(),
        &[3.0 * coef, -4.0 * coef],
        1e-12,
        "a",
    );
    close(
        &b.grad().unwrap().to_f64_vec().unwrap(),
        &gb.iter().map(|x| x * coef).collect::<Vec<_>>(),
        1e-12,
        "b",
    );
    // the max-norm; a big max_norm leaves grads unchanged
    a.tensor()
        .set_grad(Some(Tensor::from_vec(vec![3.0f64, -4.0], [2]).unwrap()))
        .unwrap();
    let t = clip_grad_norm_(&[a.clone()], 100.0, f64::INFINITY, false).unwrap();
    assert_eq!(t.item::<f64>().unwrap(), 4.0);
    assert_eq!(a.grad().unwrap().to_f64_vec().unwrap(), vec![3.0, -4.0]);
    // non-finite: error, gradients untouched
    a.tensor()
        .set_grad(Some(Tensor::from_vec(vec![f64::NAN, 1.0], [2]).unwrap()))
        .unwrap();
    assert!(clip_grad_norm_(&[a.clone()], 1.0, 2.0, true).is_err());
    assert_eq!(a.grad().unwrap().to_f64_vec().unwrap()[1], 1.0);
    // value clipping
    a.tensor()
        .set_grad(Some(Tensor::from_vec(vec![3.0f64, -4.0], [2]).unwrap()))
        .unwrap();
    clip_grad_value_(&[a.clone()], 3.5).unwrap();
    assert_eq!(a.grad().unwrap().to_f64_vec().unwrap(), vec![3.0, -3.5]);
    assert!(clip_grad_value_(&[a], -1.0).is_err());
    // no grads: 0
    assert_eq!(
        clip_grad_norm_(&[param(false)], 1.0, 2.0, true)
            .unwrap()
            .item::<f32>()
            .unwrap(),
        0.0
    );
}

/// Clipping by the norm makes no host wait (the norm stays on the device, as in PyTorch)
/// unless `error_if_nonfinite` asks for the check, which reads it. Waits are reported on the
/// CPU exactly where a GPU would wait.
#[test]
fn clip_grad_norm_waits_only_for_the_nonfinite_check() {
    let a = param(true);
    set_grad(&a, 0);
    let before = a.grad().unwrap().to_f64_vec().unwrap();
    let total = {
        let _g = stride_core::debug::forbid_sync();
        clip_grad_norm_(std::slice::from_ref(&a), 0.5, 2.0, false).unwrap()
    };
    let t = total.item::<f64>().unwrap();
    let want = before.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((t - want).abs() <= 1e-12 * want, "{t} {want}");
    let coef = 0.5 / (t + 1e-6);
    close(
        &a.grad().unwrap().to_f64_vec().unwrap(),
        &before.iter().map(|x| x * coef).collect::<Vec<_>>(),
        1e-12,
        "clipped",
    );
    let _g = stride_core::debug::forbid_sync();
    let e = clip_grad_norm_(&[a], 0.5, 2.0, true).unwrap_err();
    assert!(
        e.to_string().contains("item") || e.to_string().contains("to_vec"),
        "{e}"
    );
}

// ----- schedulers -----------------------------------------------------------------------------

fn sgd_with_lr(lr: f64) -> Sgd {
    Sgd::new(
        vec![("w".into(), param(false))],
        SgdConfig {
            lr,
            ..Default::default()
        },
    )
    .unwrap()
}

fn lrs_of(opt: &mut Sgd, s: &mut dyn LrScheduler, n: usize) -> Vec<f64> {
    let mut v = vec![];
    for _ in 0..n {
        v.push(opt.lrs()[0]);
        s.step(opt).unwrap();
    }
    v
}

#[test]
fn step_exponential_and_linear_schedules_as_pytorch() {
    let mut opt = sgd_with_lr(0.1);
    let mut s = StepLr::new(&mut opt, 3, 0.1);
    let got = lrs_of(&mut opt, &mut s, 7);
    // PyTorch's recursive form: lr * gamma, applied at each multiple of step_size
    let expected = [
        0.1,
        0.1,
        0.1,
        0.1 * 0.1,
        0.1 * 0.1,
        0.1 * 0.1,
        0.1 * 0.1 * 0.1,
    ];
    assert_eq!(got, expected);

    let mut opt = sgd_with_lr(0.5);
    let mut s = ExponentialLr::new(&mut opt, 0.9);
    let got = lrs_of(&mut opt, &mut s, 4);
    assert_eq!(
        got,
        [0.5, 0.5 * 0.9, 0.5 * 0.9 * 0.9, 0.5 * 0.9 * 0.9 * 0.9]
    );

    // LinearLR(start 1/3, end 1, total 5) — PyTorch's printed values for base lr 0.05
    let mut opt = sgd_with_lr(0.05);
    let mut s = LinearLr::new(&mut opt, 1.0 / 3.0, 1.0, 5).unwrap();
    let got = lrs_of(&mut opt, &mut s, 8);
    let expected = [
        0.016666666666666666,
        0.02333333333333333,
        0.03,
        0.03666666666666667,
        0.043333333333333335,
        0.05,
        0.05,
        0.05,
    ];
    close(&got, &expected, 1e-15, "LinearLR");
}

#[test]
fn cosine_with_warmup_and_one_cycle() {
    let mut opt = sgd_with_lr(1.0);
    let mut s = CosineWithWarmup::new(&mut opt, 2, 6).unwrap();
    let got = lrs_of(&mut opt, &mut s, 7);
    let cosf = |p: f64| 0.5 * (1.0 + (std::f64::consts::PI * p).cos());
    let expected = [
        0.0,
        0.5,
        cosf(0.0),
        cosf(0.25),
        cosf(0.5),
        cosf(0.75),
        cosf(1.0),
    ];
    close(&got, &expected, 1e-15, "cosine");

    // OneCycleLR(max_lr=1, total_steps=10): PyTorch's values (pct_start 0.3, cos, two phases)
    let mut opt = Sgd::new(
        vec![("w".into(), param(false))],
        SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            ..Default::default()
        },
    )
    .unwrap();
    let mut s = OneCycleLr::config(1.0, 10).start(&mut opt).unwrap();
    let mut lrs = vec![];
    let mut moms = vec![];
    for _ in 0..10 {
        lrs.push(opt.lrs()[0]);
        moms.push(opt.momenta()[0]);
        s.step(&mut opt).unwrap();
    }
    let anneal =
        |a: f64, b: f64, pct: f64| b + (a - b) / 2.0 * ((std::f64::consts::PI * pct).cos() + 1.0);
    let (init, min) = (1.0 / 25.0, 1.0 / 25.0 / 1e4);
    let mut expected = vec![];
    let mut expected_m = vec![];
    for step in 0..10 {
        let s = step as f64;
        let (lr, m) = if s <= 2.0 {
            (anneal(init, 1.0, s / 2.0), anneal(0.95, 0.85, s / 2.0))
        } else {
            let pct = (s - 2.0) / (9.0 - 2.0);
            (anneal(1.0, min, pct), anneal(0.85, 0.95, pct))
        };
        expected.push(lr);
        expected_m.push(m);
    }
    assert_eq!(lrs, expected);
    assert_eq!(moms, expected_m);
    assert!((lrs[0] - 0.04).abs() < 1e-15 && lrs[2] == 1.0);
    // stepping past total_steps is an error
    let mut cfg = OneCycleLr::config(1.0, 2);
    cfg.anneal = Anneal::Linear;
    let mut s2 = cfg.start(&mut opt).unwrap();
    s2.step(&mut opt).unwrap();
    s2.step(&mut opt).unwrap();
    assert!(s2.step(&mut opt).is_err());
}

#[test]
fn adam_with_scheduler_uses_the_new_lr() {
    let p = param(false);
    let c = AdamConfig {
        lr: 0.1,
        ..Default::default()
    };
    let mut opt = Adam::new(vec![("w".into(), p.clone())], c.clone()).unwrap();
    let mut s = StepLr::new(&mut opt, 1, 0.5);
    opt.zero_grad().unwrap();
    set_grad(&p, 0);
    opt.step().unwrap();
    s.step(&mut opt).unwrap();
    assert_eq!(opt.lrs()[0], 0.05);
    assert_eq!(s.last_lr(), &[0.05]);
    assert_eq!(s.last_epoch(), 1);
}

#[test]
fn f32_parameters_follow_the_f64_reference_to_f32_rounding() {
    for c in adam_configs() {
        let expected = adam_ref(&c, STEPS, 12);
        for transposed in [false, true] {
            let p64 = param(transposed);
            let p = Parameter::new(p64.tensor().to_dtype(DType::F32).unwrap()).unwrap();
            assert_eq!(p.tensor().stride(), p64.tensor().stride());
            let mut opt = Adam::new(vec![("w".into(), p.clone())], c.clone()).unwrap();
            for k in 0..STEPS {
                opt.zero_grad().unwrap();
                let g = Tensor::from_vec(grad_values(k, 12, 0.25), [3, 4]).unwrap();
                p.tensor()
                    .set_grad(Some(g.to_dtype(DType::F32).unwrap()))
                    .unwrap();
                opt.step().unwrap();
                let got = p.tensor().to_f64_vec().unwrap();
                for (x, y) in got.iter().zip(&expected[k]) {
                    assert!(
                        (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                        "{c:?} step {k}: {x} vs {y}"
                    );
                }
            }
            assert_eq!(opt.state_of("w").unwrap().exp_avg.dtype(), DType::F32);
        }
    }
}

#[test]
fn add_param_group_refuses_duplicates() {
    let (a, b) = (param(false), param(false));
    let mut opt = Sgd::new(vec![("a".into(), a.clone())], SgdConfig::default()).unwrap();
    assert!(opt
        .add_param_group(ParamGroup::new(vec![("a".into(), a)], SgdConfig::default()))
        .is_err());
    opt.add_param_group(ParamGroup::new(
        vec![("b".into(), b.clone())],
        SgdConfig {
            lr: 0.5,
            ..Default::default()
        },
    ))
    .unwrap();
    set_grad(&b, 0);
    opt.step().unwrap();
    assert_eq!(opt.lrs(), [1e-3, 0.5]);
    assert_eq!(opt.named_params().len(), 2);
    // integer "parameters" are refused
    let i = Parameter::frozen(Tensor::zeros([2], DType::I64, &Device::Cpu).unwrap());
    assert!(Sgd::new(vec![("i".into(), i)], SgdConfig::default()).is_err());
}

/// f32 master weights: a bf16 parameter's f32 copy follows exactly the trajectory of an f32
/// parameter given the same (bf16-valued) gradients, and the parameter is that copy rounded.
#[test]
fn master_weights_step_an_f32_copy_of_half_parameters() {
    let dev = Device::Cpu;
    let g = stride_core::Generator::new(5);
    let init = Tensor::randn([4, 6], DType::F32, &dev, Some(&g))
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let transposed = |t: Tensor| t.t().unwrap().contiguous().unwrap().t().unwrap();
    let half = Parameter::new(transposed(init.clone_tensor().unwrap())).unwrap();
    let full = Parameter::new(init.to_dtype(DType::F32).unwrap()).unwrap();
    let steps = |lr: f64| -> Vec<Box<dyn Optimizer>> {
        let adam = |p: &Parameter, master: bool| {
            let mut o = Adam::new(
                vec![("w".into(), p.clone())],
                AdamConfig {
                    lr,
                    ..AdamConfig::adamw()
                },
            )
            .unwrap();
            o.set_master_weights(master).unwrap();
            Box::new(o) as Box<dyn Optimizer>
        };
        vec![adam(&half, true), adam(&full, false)]
    };
    let mut opts = steps(1e-4); // updates far below bf16's precision near these weights
    opts[0].set_health_check(true);
    for k in 0..5 {
        let grad = Tensor::randn(
            [4, 6],
            DType::F32,
            &dev,
            Some(&stride_core::Generator::new(50 + k)),
        )
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
        half.tensor().set_grad(Some(grad.clone())).unwrap();
        full.tensor()
            .set_grad(Some(grad.to_dtype(DType::F32).unwrap()))
            .unwrap();
        for o in opts.iter_mut() {
            o.step().unwrap();
        }
        // the copy moved though the bf16 parameter may not have: no false "unchanged"
        assert!(
            opts[0].health().unwrap().is_healthy(),
            "{:?}",
            opts[0].health()
        );
    }
    let f = full.tensor().to_vec::<f32>().unwrap();
    let sd = opts[0].state_dict().unwrap();
    let master = &sd.state[&0]["master_param"];
    assert_eq!(master.dtype(), DType::F32);
    assert_eq!(sd.state[&0]["exp_avg"].dtype(), DType::F32);
    assert_eq!(
        master.to_vec::<f32>().unwrap(),
        f,
        "the master's trajectory"
    );
    let rounded = full
        .tensor()
        .to_dtype(DType::BF16)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let h = half.tensor().to_dtype(DType::F32).unwrap();
    assert_eq!(h.to_vec::<f32>().unwrap(), rounded.to_vec::<f32>().unwrap());
    // the state dict carries the copies: a fresh optimizer loads them and continues alike
    let resumed_param = Parameter::new(half.tensor().clone_tensor().unwrap()).unwrap();
    let mut resumed = Adam::new(
        vec![("w".into(), resumed_param.clone())],
        AdamConfig {
            lr: 1e-4,
            ..AdamConfig::adamw()
        },
    )
    .unwrap();
    resumed.set_master_weights(true).unwrap();
    resumed.load_state_dict(&sd).unwrap();
    let grad = Tensor::ones([4, 6], DType::BF16, &dev).unwrap();
    half.tensor().set_grad(Some(grad.clone())).unwrap();
    resumed_param.tensor().set_grad(Some(grad)).unwrap();
    opts[0].step().unwrap();
    resumed.step().unwrap();
    assert_eq!(
        resumed.master_of("w").unwrap().to_vec::<f32>().unwrap(),
        opts[0].state_dict().unwrap().state[&0]["master_param"]
            .to_vec::<f32>()
            .unwrap()
    );
    assert!(
        resumed.set_master_weights(false).is_err(),
        "switched after stepping"
    );

    // a parameter written outside the optimizer is read into its copy, never overwritten
    {
        let _ng = stride_core::autograd::no_grad();
        resumed_param.tensor().fill_(3.0).unwrap();
    }
    resumed_param
        .tensor()
        .set_grad(Some(Tensor::zeros([4, 6], DType::BF16, &dev).unwrap()))
        .unwrap();
    resumed.config_mut(0).unwrap().weight_decay = 0.0;
    resumed.step().unwrap();
    let after = resumed_param.tensor().to_dtype(DType::F32).unwrap();
    assert!(
        after
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|x| (x - 3.0).abs() < 0.02),
        "{after}"
    );
}
