//! stride's autocast against PyTorch's: every observation `scripts/autocast_policy.py` made
//! on the GPU machine (`tests/data/autocast_pytorch.tsv`: each op under `torch.autocast` in
//! bf16 and f16 with its floating inputs all f32, all half, and mixed) is replayed here with
//! the same ops, inputs and dtypes, and the result's dtype (or an error) must be PyTorch's.
//! On the CPU always (stride applies one policy on every device), and on CUDA where there is
//! one (skipping, saying so, without a GPU; mandatory under STRIDE_REQUIRE_CUDA=1).
//!
//! A mixed-dtype case where stride's op, without autocast, already differs from PyTorch's
//! (stride promotes where PyTorch refuses) is not an autocast question; those cases are
//! listed in `PLAIN_DEVIATIONS` with the reason, and any other difference fails.

use stride_core::autocast::{autocast, autocast_disabled, policy, policy_table, CastPolicy};
use stride_core::{autograd, DType, Device, Generator, Result, Tensor};
use stride_nn::functional::{layer_norm, linear, rms_norm, scaled_dot_product_attention};
use stride_nn::loss::{self, CrossEntropy, Reduction};
use stride_nn::{Linear, Module};

type OpFn = fn(&[Tensor]) -> Result<Tensor>;
/// An op of the PyTorch script: its name, its inputs' shapes and values, and the call.
type Op = (&'static str, Vec<(Vec<usize>, Values)>, OpFn);

#[derive(Clone, Copy)]
enum Values {
    /// In [0.5, 1.5).
    Pos,
    /// In [0, 1).
    Unit,
}
use Values::{Pos, Unit};

fn idx(shape: &[usize], n: i64, dev: &Device) -> Tensor {
    let g = Generator::new(7);
    Tensor::randint(0, n, shape.to_vec(), DType::I64, dev, Some(&g)).unwrap()
}

/// The ops of the PyTorch script, the same inputs, by its names.
fn ops() -> Vec<Op> {
    let s = |d: &[usize], v: Values| (d.to_vec(), v);
    let p48 = || s(&[4, 8], Pos);
    let u48 = || s(&[4, 8], Unit);
    vec![
        ("matmul", vec![p48(), s(&[8, 4], Pos)], |t| {
            t[0].matmul(&t[1])
        }),
        ("mm", vec![p48(), s(&[8, 4], Pos)], |t| t[0].mm(&t[1])),
        ("bmm", vec![s(&[2, 4, 8], Pos), s(&[2, 8, 4], Pos)], |t| {
            t[0].bmm(&t[1])
        }),
        ("einsum", vec![p48(), s(&[8, 4], Pos)], |t| {
            Tensor::einsum("ij,jk->ik", &[&t[0], &t[1]])
        }),
        ("linear", vec![p48(), s(&[3, 8], Pos), s(&[3], Pos)], |t| {
            linear(&t[0], &t[1], Some(&t[2]))
        }),
        (
            "scaled_dot_product_attention",
            vec![s(&[1, 2, 4, 8], Pos); 3],
            |t| scaled_dot_product_attention(&t[0], &t[1], &t[2], None, 0.0, false, None, false),
        ),
        ("dot", vec![s(&[8], Pos), s(&[8], Pos)], |t| t[0].dot(&t[1])),
        ("outer", vec![s(&[4], Pos), s(&[3], Pos)], |t| {
            t[0].outer(&t[1])
        }),
        ("exp", vec![p48()], |t| t[0].exp()),
        ("exp2", vec![p48()], |t| t[0].exp2()),
        ("expm1", vec![p48()], |t| t[0].expm1()),
        ("log", vec![p48()], |t| t[0].log()),
        ("log2", vec![p48()], |t| t[0].log2()),
        ("log1p", vec![p48()], |t| t[0].log1p()),
        ("reciprocal", vec![p48()], |t| t[0].reciprocal()),
        ("rsqrt", vec![p48()], |t| t[0].rsqrt()),
        ("sqrt", vec![p48()], |t| t[0].sqrt()),
        ("tan", vec![u48()], |t| t[0].tan()),
        ("sin", vec![u48()], |t| t[0].sin()),
        ("cos", vec![u48()], |t| t[0].cos()),
        ("tanh", vec![u48()], |t| t[0].tanh()),
        ("sigmoid", vec![u48()], |t| t[0].sigmoid()),
        ("erf", vec![u48()], |t| t[0].erf()),
        ("softplus", vec![u48()], |t| t[0].softplus()),
        ("relu", vec![u48()], |t| t[0].relu()),
        ("gelu", vec![u48()], |t| t[0].gelu()),
        ("silu", vec![u48()], |t| t[0].silu()),
        ("abs", vec![u48()], |t| t[0].abs()),
        ("square", vec![u48()], |t| t[0].square()),
        ("pow_scalar", vec![p48()], |t| t[0].pow(2.5)),
        ("pow", vec![p48(), p48()], |t| t[0].pow(&t[1])),
        ("add", vec![u48(), u48()], |t| t[0].add(&t[1])),
        ("sub", vec![u48(), u48()], |t| t[0].sub(&t[1])),
        ("mul", vec![u48(), u48()], |t| t[0].mul(&t[1])),
        ("div", vec![u48(), p48()], |t| t[0].div(&t[1])),
        ("maximum", vec![u48(), u48()], |t| t[0].maximum(&t[1])),
        ("atan2", vec![u48(), p48()], |t| t[0].atan2(&t[1])),
        ("lerp", vec![u48(), u48(), u48()], |t| {
            t[0].lerp(&t[1], &t[2])
        }),
        ("addcmul", vec![u48(), u48(), u48()], |t| {
            t[0].addcmul(&t[1], &t[2], 1.0)
        }),
        ("addcdiv", vec![u48(), u48(), p48()], |t| {
            t[0].addcdiv(&t[1], &t[2], 1.0)
        }),
        ("where", vec![u48(), u48()], |t| {
            t[0].gt(0.5)?.where_cond(&t[0], &t[1])
        }),
        ("clamp", vec![u48(), u48(), p48()], |t| {
            t[0].clamp(&t[1], &t[2])
        }),
        (
            "layer_norm",
            vec![u48(), s(&[8], Pos), s(&[8], Unit)],
            |t| layer_norm(&t[0], &[8], Some(&t[1]), Some(&t[2]), 1e-5),
        ),
        ("rms_norm", vec![u48(), s(&[8], Pos)], |t| {
            rms_norm(&t[0], &[8], Some(&t[1]), None)
        }),
        ("softmax", vec![u48()], |t| t[0].softmax(-1)),
        ("log_softmax", vec![u48()], |t| t[0].log_softmax(-1)),
        ("logsumexp", vec![u48()], |t| t[0].logsumexp(&[-1], false)),
        ("sum", vec![u48()], |t| t[0].sum()),
        ("mean", vec![u48()], |t| t[0].mean()),
        ("prod", vec![p48()], |t| t[0].prod()),
        ("amax", vec![u48()], |t| t[0].amax(&[-1], false)),
        ("var", vec![u48()], |t| t[0].var(&[], 1.0, false)),
        ("std", vec![u48()], |t| t[0].std(&[], 1.0, false)),
        ("norm", vec![u48()], |t| t[0].norm_all(2.0)),
        ("cumsum", vec![u48()], |t| t[0].cumsum(-1)),
        ("cumprod", vec![p48()], |t| t[0].cumprod(-1)),
        ("mse_loss", vec![u48(), u48()], |t| {
            loss::mse_loss(&t[0], &t[1], Reduction::Mean)
        }),
        ("l1_loss", vec![u48(), u48()], |t| {
            loss::l1_loss(&t[0], &t[1], Reduction::Mean)
        }),
        ("smooth_l1_loss", vec![u48(), u48()], |t| {
            loss::smooth_l1_loss(&t[0], &t[1], Reduction::Mean, 1.0)
        }),
        ("nll_loss", vec![u48()], |t| {
            loss::nll_loss(
                &t[0],
                &idx(&[4], 8, &t[0].device()),
                &CrossEntropy::default(),
            )
        }),
        ("cross_entropy", vec![u48()], |t| {
            loss::cross_entropy(
                &t[0],
                &idx(&[4], 8, &t[0].device()),
                &CrossEntropy::default(),
            )
        }),
        ("binary_cross_entropy", vec![u48(), u48()], |t| {
            loss::binary_cross_entropy(&t[0], &t[1], None, Reduction::Mean)
        }),
        (
            "binary_cross_entropy_with_logits",
            vec![u48(), u48()],
            |t| loss::binary_cross_entropy_with_logits(&t[0], &t[1], None, None, Reduction::Mean),
        ),
        ("cat", vec![u48(), u48()], |t| {
            Tensor::cat(&[&t[0], &t[1]], 0)
        }),
        ("stack", vec![u48(), u48()], |t| {
            Tensor::stack(&[&t[0], &t[1]], 0)
        }),
        ("embedding", vec![s(&[8, 4], Unit)], |t| {
            t[0].embedding(&idx(&[3], 8, &t[0].device()))
        }),
        ("scatter_add", vec![u48(), u48()], |t| {
            t[0].scatter_add(1, &idx(&[4, 8], 8, &t[0].device()), &t[1])
        }),
        ("index_copy", vec![u48(), s(&[2, 8], Unit)], |t| {
            let i = Tensor::from_vec(vec![0i64, 2], [2])?.to_device(&t[0].device())?;
            t[0].index_copy(0, &i, &t[1])
        }),
    ]
}

/// Mixed-dtype cases where stride's op differs from PyTorch's without autocast, and why.
const PLAIN_DEVIATIONS: &[(&str, &str)] = &[
    (
        "lerp",
        "stride's lerp promotes mixed float dtypes as every elementwise op does; PyTorch's refuses (README, Deviations)",
    ),
    (
        "rms_norm",
        "stride's rms_norm returns the promoted dtype of input and weight, as layer_norm; PyTorch 2.11's returns the input's dtype (README, Deviations)",
    ),
];

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        DType::F64 => "f64",
        _ => "other",
    }
}

fn parse_dtype(s: &str) -> DType {
    match s {
        "f32" => DType::F32,
        "bf16" => DType::BF16,
        "f16" => DType::F16,
        other => panic!("unknown dtype {other} in the observations"),
    }
}

fn outcome(r: Result<Tensor>) -> String {
    match r {
        Ok(t) => dtype_name(t.dtype()).to_string(),
        Err(_) => "error".to_string(),
    }
}

/// (op, autocast dtype, input dtypes label, under autocast, without autocast)
fn observations() -> Vec<[String; 5]> {
    include_str!("data/autocast_pytorch.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 5, "bad observation line {l:?}");
            [0, 1, 2, 3, 4].map(|i| f[i].to_string())
        })
        .collect()
}

fn replay(dev: &Device) {
    let ops = ops();
    let obs = observations();
    let mut failures = vec![];
    let mut checked = 0;
    for [op, half, label, want_ac, want_plain] in &obs {
        let Some((_, specs, f)) = ops.iter().find(|(n, _, _)| n == op) else {
            failures.push(format!("{op}: observed by PyTorch but not replayed here"));
            continue;
        };
        let dts: Vec<DType> = match label.split_once('+') {
            None => vec![parse_dtype(label); specs.len()],
            Some((a, b)) => {
                let mut v = vec![parse_dtype(a)];
                v.resize(specs.len(), parse_dtype(b));
                v
            }
        };
        let inputs: Vec<Tensor> = specs
            .iter()
            .zip(&dts)
            .enumerate()
            .map(|(i, ((shape, vals), dt))| {
                let g = Generator::new(i as u64);
                let u = Tensor::rand(shape.clone(), DType::F32, dev, Some(&g)).unwrap();
                let u = match vals {
                    Pos => u.add(0.5).unwrap(),
                    Unit => u,
                };
                u.to_dtype(*dt).unwrap()
            })
            .collect();
        let plain = {
            let _off = autocast_disabled();
            outcome(f(&inputs))
        };
        let got = {
            let _ac = autocast(parse_dtype(half)).unwrap();
            outcome(f(&inputs))
        };
        checked += 1;
        if &got == want_ac {
            continue;
        }
        let excused = &plain != want_plain && PLAIN_DEVIATIONS.iter().any(|(o, _)| o == op);
        if !excused {
            failures.push(format!(
                "{op} under autocast({half}) with {label} inputs: stride {got}, PyTorch {want_ac} (without autocast: stride {plain}, PyTorch {want_plain})"
            ));
        }
    }
    for (name, _) in policy_table() {
        if !ops.iter().any(|(n, _, _)| *n == name) {
            failures.push(format!("{name}: in the policy table but never replayed"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} autocast observations differ from PyTorch on {dev}:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 300, "only {checked} observations replayed");
}

#[test]
fn autocast_dtypes_match_pytorch_on_the_cpu() {
    replay(&Device::Cpu);
}

#[test]
fn autocast_dtypes_match_pytorch_on_cuda() {
    let Some(gpu) = stride_core::cuda::require_or_skip("autocast_dtypes_match_pytorch_on_cuda")
    else {
        return;
    };
    replay(&gpu);
}

fn cpu_randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(
        shape.to_vec(),
        DType::F32,
        &Device::Cpu,
        Some(&Generator::new(seed)),
    )
    .unwrap()
}

/// The casts are ordinary ops: a model step under autocast gives, bit for bit, what the same
/// step with the casts written out gives, and gradients come back in f32 for f32 parameters.
#[test]
fn autocast_equals_the_casts_written_out_forward_and_backward() {
    let lin = Linear::new(8, 3, true).unwrap();
    let x = cpu_randn(&[5, 8], 1);
    let target = Tensor::from_vec(vec![0i64, 2, 1, 1, 0], [5]).unwrap();
    let run = |auto: bool| {
        for p in lin.parameters() {
            p.tensor().set_grad(None).unwrap();
        }
        let loss = if auto {
            let _ac = autocast(DType::BF16).unwrap();
            let y = lin.forward(&x).unwrap();
            assert_eq!(y.dtype(), DType::BF16);
            let l = loss::cross_entropy(&y, &target, &CrossEntropy::default()).unwrap();
            assert_eq!(l.dtype(), DType::F32);
            l.backward().unwrap(); // inside the region: backward never autocasts
            l
        } else {
            let (w, b) = (lin.weight.tensor(), lin.bias.as_ref().unwrap().tensor());
            let bf = |t: &Tensor| t.to_dtype(DType::BF16).unwrap();
            let y = bf(&x)
                .matmul(&bf(&w).t().unwrap())
                .unwrap()
                .add(&bf(&b))
                .unwrap();
            let l = loss::cross_entropy(
                &y.to_dtype(DType::F32).unwrap(),
                &target,
                &CrossEntropy::default(),
            )
            .unwrap();
            l.backward().unwrap();
            l
        };
        let grads: Vec<Vec<f32>> = lin
            .parameters()
            .iter()
            .map(|p| {
                let g = p.tensor().grad().unwrap();
                assert_eq!(g.dtype(), DType::F32);
                g.to_vec::<f32>().unwrap()
            })
            .collect();
        (loss.item::<f32>().unwrap(), grads)
    };
    let (la, ga) = run(true);
    let (lb, gb) = run(false);
    assert_eq!(la.to_bits(), lb.to_bits());
    assert_eq!(ga, gb);
}

#[test]
fn regions_nest_and_can_be_switched_off() {
    let a = cpu_randn(&[2, 2], 2);
    assert!(autocast(DType::F32).is_err());
    assert!(autocast(DType::F64).is_err());
    let _bf = autocast(DType::BF16).unwrap();
    assert_eq!(a.matmul(&a).unwrap().dtype(), DType::BF16);
    {
        let _f16 = autocast(DType::F16).unwrap();
        assert_eq!(a.matmul(&a).unwrap().dtype(), DType::F16);
        let _off = autocast_disabled();
        assert_eq!(a.matmul(&a).unwrap().dtype(), DType::F32);
    }
    assert_eq!(a.matmul(&a).unwrap().dtype(), DType::BF16);
    // f64 is never cast, in-place and _out forms are not autocast
    let d = a.to_dtype(DType::F64).unwrap();
    assert_eq!(d.matmul(&d).unwrap().dtype(), DType::F64);
    let h = a.to_dtype(DType::BF16).unwrap().abs().unwrap();
    assert_eq!(h.exp_().unwrap().dtype(), DType::BF16);
    assert_eq!(h.exp().unwrap().dtype(), DType::F32);
    let out = Tensor::zeros([2, 2], DType::BF16, &Device::Cpu).unwrap();
    h.exp_out(&out).unwrap();
}

#[test]
fn binary_cross_entropy_is_refused_with_the_way_out() {
    let p = cpu_randn(&[4], 3).sigmoid().unwrap();
    let y = Tensor::ones([4], DType::F32, &Device::Cpu).unwrap();
    let _ac = autocast(DType::F16).unwrap();
    let e = loss::binary_cross_entropy(&p, &y, None, Reduction::Mean).unwrap_err();
    assert!(
        e.to_string().contains("binary_cross_entropy_with_logits"),
        "{e}"
    );
    assert_eq!(policy("binary_cross_entropy"), CastPolicy::Refuse);
    let _off = autocast_disabled();
    loss::binary_cross_entropy(&p, &y, None, Reduction::Mean).unwrap();
}

/// A parameter's cast is cached for the region, but never reused after the parameter changes
/// in place, and a cast made under no_grad (no history) is never handed to a recorded op.
#[test]
fn the_cast_cache_follows_in_place_changes_and_grad_mode() {
    let lin = Linear::new(4, 2, false).unwrap();
    let w = lin.weight.tensor();
    let x = cpu_randn(&[3, 4], 4);
    let _ac = autocast(DType::BF16).unwrap();
    let y0 = {
        let _ng = autograd::no_grad();
        lin.forward(&x).unwrap()
    };
    let y1 = lin.forward(&x).unwrap();
    assert!(
        y1.requires_grad(),
        "a no_grad cast was reused under grad mode"
    );
    assert_eq!(
        y0.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
        y1.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
    );
    {
        let _ng = autograd::no_grad();
        w.mul_(2.0).unwrap();
    }
    let y2 = lin.forward(&x).unwrap();
    let want = x
        .to_dtype(DType::BF16)
        .unwrap()
        .matmul(&w.to_dtype(DType::BF16).unwrap().t().unwrap())
        .unwrap();
    assert_eq!(
        y2.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
        want.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
    );
    y2.sum().unwrap().backward().unwrap();
    assert_eq!(w.grad().unwrap().dtype(), DType::F32);
}

/// Casting is device work: a forward and backward under autocast never waits for the host.
#[test]
fn an_autocast_step_waits_for_nothing() {
    let lin = Linear::new(8, 4, true).unwrap();
    let x = cpu_randn(&[6, 8], 5);
    let t = Tensor::from_vec(vec![0i64, 1, 2, 3, 0, 1], [6]).unwrap();
    let _g = stride_core::debug::forbid_sync();
    let _ac = autocast(DType::BF16).unwrap();
    let h = lin.forward(&x).unwrap().gelu().unwrap();
    let l = loss::cross_entropy(&h, &t, &CrossEntropy::default()).unwrap();
    l.backward().unwrap();
}
