//! stride-nn against PyTorch itself: fixtures written by `scripts/golden_pytorch.py` (PyTorch
//! 2.11, CPU, one thread) and committed under `tests/fixtures/`.
//!
//! - Optimizers: 10-step trajectories of SGD (plain; momentum + dampening + weight decay;
//!   nesterov), Adam, AdamW and AdamW + amsgrad on a tiny tanh network whose first weight is a
//!   transposed clone (strides (1, 4)), in f32 and f64. Every loss and every parameter after
//!   every step must match: f64 to 1e-12, f32 to 1e-6 (relative to the tensor's largest value:
//!   f32 rounding of the forward/backward pass accumulates over the steps).
//! - A small MLP's state dict saved by PyTorch loads into stride's `Linear`s and gives
//!   PyTorch's output.

use std::collections::BTreeMap;
use stride_core::{DType, Tensor};
use stride_nn::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use stride_nn::safetensors::deserialize;
use stride_nn::{Activation, Linear, Module, Parameter, Sequential, StateDict};

fn fixtures(bytes: &[u8]) -> BTreeMap<String, Tensor> {
    deserialize(bytes).expect("fixture parses").tensors
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// `|a - b| <= tol * max|b|` elementwise; the message names the worst element.
fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (values(got), values(want));
    let scale = w.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-30);
    let (i, err) = g
        .iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs())
        .enumerate()
        .fold(
            (0, 0f64),
            |(bi, be), (i, e)| if e > be { (i, e) } else { (bi, be) },
        );
    assert!(
        err <= tol * scale,
        "{what}: element {i} is {} but PyTorch has {} (error {err:.3e} > {tol:.0e} x {scale:.3e})",
        g[i],
        w[i]
    );
}

enum Config {
    Sgd(SgdConfig),
    Adam(AdamConfig),
}

/// The cases of `scripts/golden_pytorch.py`, with the same hyperparameters.
fn cases() -> Vec<(&'static str, Config)> {
    let sgd = |lr, momentum, dampening, weight_decay, nesterov| {
        Config::Sgd(SgdConfig {
            lr,
            momentum,
            dampening,
            weight_decay,
            nesterov,
            maximize: false,
        })
    };
    let adam = |lr, betas, eps, weight_decay, amsgrad, decoupled_weight_decay| {
        Config::Adam(AdamConfig {
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            maximize: false,
            decoupled_weight_decay,
        })
    };
    vec![
        ("sgd", sgd(0.1, 0.0, 0.0, 0.0, false)),
        ("sgd_momentum", sgd(0.05, 0.9, 0.1, 0.01, false)),
        ("sgd_nesterov", sgd(0.05, 0.9, 0.0, 0.0, true)),
        ("adam", adam(0.01, (0.9, 0.999), 1e-8, 0.0, false, false)),
        ("adamw", adam(0.01, (0.9, 0.99), 1e-8, 0.1, false, true)),
        (
            "adamw_amsgrad",
            adam(0.01, (0.8, 0.9), 1e-6, 0.05, true, true),
        ),
    ]
}

#[test]
fn optimizer_trajectories_match_pytorch() {
    let f = fixtures(include_bytes!("fixtures/optim_golden.safetensors"));
    let mut checked = 0;
    for (dtype, tol) in [("f32", 1e-6), ("f64", 1e-12)] {
        let get = |k: &str| f[k].clone();
        let (x, y) = (
            get(&format!("data.{dtype}.x")),
            get(&format!("data.{dtype}.y")),
        );
        for (case, config) in cases() {
            // the encoder-like weight is a transposed clone: strides (1, 4), as in PyTorch
            let w0 = get(&format!("init.{dtype}.w_base")).t().unwrap();
            let w = Parameter::new(w0.clone_tensor().unwrap()).unwrap();
            assert_eq!(w.tensor().stride(), &[1, 4]);
            let b =
                Parameter::new(get(&format!("init.{dtype}.b")).clone_tensor().unwrap()).unwrap();
            let v =
                Parameter::new(get(&format!("init.{dtype}.v")).clone_tensor().unwrap()).unwrap();
            let params = vec![
                ("w".to_string(), w.clone()),
                ("b".to_string(), b.clone()),
                ("v".to_string(), v.clone()),
            ];
            let mut opt: Box<dyn Optimizer> = match config {
                Config::Sgd(c) => Box::new(Sgd::new(params, c).unwrap()),
                Config::Adam(c) => Box::new(Adam::new(params, c).unwrap()),
            };
            let mut losses = vec![];
            for step in 1..=10 {
                opt.zero_grad().unwrap();
                let h = x
                    .matmul(&w.tensor().t().unwrap())
                    .unwrap()
                    .add(&b.tensor())
                    .unwrap()
                    .tanh()
                    .unwrap();
                let out = h.matmul(&v.tensor().t().unwrap()).unwrap();
                let loss = out.sub(&y).unwrap().square().unwrap().mean().unwrap();
                loss.backward().unwrap();
                opt.step().unwrap();
                losses.push(loss.detach());
                assert_eq!(w.tensor().stride(), &[1, 4], "the update kept the layout");
                for (name, p) in [("w", &w), ("b", &b), ("v", &v)] {
                    let key = format!("{case}.{dtype}.step{step}.{name}");
                    assert_close(&key, &p.tensor(), &f[&key], tol);
                    checked += 1;
                }
            }
            let losses = Tensor::stack(&losses.iter().collect::<Vec<_>>(), 0).unwrap();
            assert_close(
                &format!("{case}.{dtype}.loss"),
                &losses,
                &f[&format!("{case}.{dtype}.loss")],
                tol,
            );
        }
    }
    assert_eq!(checked, 2 * 6 * 10 * 3);
}

#[test]
fn pytorch_mlp_state_dict_gives_pytorch_outputs() {
    let f = fixtures(include_bytes!("fixtures/mlp_golden.safetensors"));
    // nn.Sequential(Linear(3, 8), Tanh(), Linear(8, 2)): PyTorch's keys "0.weight", "0.bias",
    // "2.weight", "2.bias" are stride's names too
    let net = Sequential::new()
        .push(Linear::new(3, 8, true).unwrap())
        .push_boxed(Activation::Tanh.module())
        .push(Linear::new(8, 2, true).unwrap());
    net.to_dtype(DType::F64).unwrap();
    let sd: StateDict = f
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "input" | "output"))
        .map(|(k, t)| (k.clone(), t.clone()))
        .collect();
    let report = net.load_state_dict(&sd, true).unwrap();
    // every PyTorch key matched one of stride's, with its shape: nothing missing, nothing
    // ignored, nothing left unchanged for a shape mismatch
    assert!(report.is_clean(), "{report}");
    assert!(
        report.missing.is_empty() && report.unexpected.is_empty() && report.mismatched.is_empty()
    );
    let mut keys: Vec<&str> = sd.keys().collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["0.bias", "0.weight", "2.bias", "2.weight"],
        "fixture keys"
    );
    // and the module now holds exactly PyTorch's values
    let mine = net.state_dict();
    for k in keys {
        let got = mine
            .get(k)
            .unwrap_or_else(|| panic!("{k} missing from the module"));
        assert_close(&format!("loaded {k}"), got, sd.get(k).unwrap(), 0.0);
    }
    let out = net.forward(&f["input"]).unwrap();
    assert_close("mlp output", &out, &f["output"], 1e-12);
}
