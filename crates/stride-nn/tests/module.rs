//! Module tree: dotted names, counts, train/eval, dtype moves, state dicts and their errors.

use stride_core::{DType, Device, Result, Tensor};
use stride_nn::{
    mlp, Activation, Buffer, Dropout, Factory, LayerNorm, Linear, Mode, Module, Parameter, Relu,
    Sequential, StateDict, Visitor,
};

struct Autoencoder {
    encoder: Linear,
    act: Relu,
    decoder: Linear,
    norm: LayerNorm,
    drop: Dropout,
    steps: Buffer,
    mode: Mode,
}
impl Autoencoder {
    fn new() -> Result<Autoencoder> {
        let f = Factory::dtype(DType::F64);
        Ok(Autoencoder {
            encoder: Linear::new_with(4, 3, true, &f)?,
            act: Relu::default(),
            decoder: Linear::new_with(3, 4, false, &f)?,
            norm: LayerNorm::new_with(&[4], 1e-5, true, true, &f)?,
            drop: Dropout::new(0.5)?,
            steps: Buffer::new(Tensor::zeros([1], DType::I64, &Device::Cpu)?),
            mode: Mode::default(),
        })
    }
}
impl Module for Autoencoder {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.act.forward(&self.encoder.forward(x)?)?;
        self.norm
            .forward(&self.decoder.forward(&self.drop.forward(&h)?)?)
    }
    fn visit(&self, v: &mut dyn Visitor) {
        v.module("encoder", &self.encoder);
        v.module("act", &self.act);
        v.module("decoder", &self.decoder);
        v.module("norm", &self.norm);
        v.module("drop", &self.drop);
        v.buffer("steps", &self.steps);
    }
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

fn names(m: &dyn Module) -> Vec<String> {
    m.named_parameters().into_iter().map(|(n, _)| n).collect()
}

#[test]
fn dotted_names_counts_and_buffers() {
    let m = Autoencoder::new().unwrap();
    assert_eq!(
        names(&m),
        [
            "encoder.weight",
            "encoder.bias",
            "decoder.weight",
            "norm.weight",
            "norm.bias"
        ]
    );
    assert_eq!(m.num_parameters(), 12 + 3 + 12 + 4 + 4);
    m.norm
        .bias
        .as_ref()
        .unwrap()
        .set_requires_grad(false)
        .unwrap();
    assert_eq!(m.num_trainable_parameters(), 12 + 3 + 12 + 4);
    let b: Vec<String> = m.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(b, ["steps"]);
    let keys: Vec<String> = m.state_dict().keys().map(String::from).collect();
    assert_eq!(
        keys,
        [
            "encoder.weight",
            "encoder.bias",
            "decoder.weight",
            "norm.weight",
            "norm.bias",
            "steps"
        ]
    );
    let mut seen = vec![];
    m.for_each_descendant(&mut |n, _| seen.push(n.to_string()));
    assert_eq!(seen, ["encoder", "act", "decoder", "norm", "drop"]);
    // nested Sequential names
    let net = Sequential::new()
        .push(mlp(&[2, 3, 1], Activation::Gelu, &Factory::default()).unwrap())
        .push(Linear::new(1, 1, false).unwrap());
    assert_eq!(
        names(&net),
        [
            "0.0.weight",
            "0.0.bias",
            "0.2.weight",
            "0.2.bias",
            "1.weight"
        ]
    );
}

#[test]
fn tied_parameters_are_listed_once_but_saved_under_each_name() {
    let lin = Linear::new(2, 2, false).unwrap();
    struct Tied {
        a: Parameter,
        b: Parameter,
        mode: Mode,
    }
    impl Module for Tied {
        fn forward(&self, x: &Tensor) -> Result<Tensor> {
            Ok(x.clone())
        }
        fn visit(&self, v: &mut dyn Visitor) {
            v.parameter("a", &self.a);
            v.parameter("b", &self.b);
        }
        fn mode(&self) -> &Mode {
            &self.mode
        }
    }
    let t = Tied {
        a: lin.weight.clone(),
        b: lin.weight.clone(),
        mode: Mode::default(),
    };
    assert_eq!(names(&t), ["a"]);
    assert_eq!(t.num_parameters(), 4);
    assert_eq!(t.state_dict().len(), 2);
}

#[test]
fn train_eval_propagates() {
    let m = Autoencoder::new().unwrap();
    assert!(m.is_training() && m.drop.is_training());
    m.eval();
    assert!(!m.is_training() && !m.drop.is_training() && !m.encoder.is_training());
    // eval: dropout is the identity, so the forward is deterministic
    let x = Tensor::randn([5, 4], DType::F64, &Device::Cpu, None).unwrap();
    let a = m.forward(&x).unwrap().to_f64_vec().unwrap();
    let b = m.forward(&x).unwrap().to_f64_vec().unwrap();
    assert_eq!(a, b);
    m.train(true);
    assert!(m.drop.is_training());
}

#[test]
fn to_dtype_converts_params_grads_and_keeps_handles_and_layouts() {
    let w = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]).unwrap();
    let lin = Linear::from_tensors(w.t().unwrap().clone_tensor().unwrap(), None).unwrap();
    let handle = lin.weight.clone();
    lin.forward(&Tensor::ones([1, 2], DType::F32, &Device::Cpu).unwrap())
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    lin.to_dtype(DType::F64).unwrap();
    let t = handle.tensor();
    assert_eq!(t.dtype(), DType::F64);
    assert_eq!(t.stride(), &[1, 3], "layout kept");
    assert!(t.requires_grad() && t.is_leaf());
    assert_eq!(t.grad().unwrap().dtype(), DType::F64);
    assert_eq!(t.to_f64_vec().unwrap(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert!(lin.to_dtype(DType::I64).is_err());
    // the converted module still trains
    let y = lin
        .forward(&Tensor::ones([1, 2], DType::F64, &Device::Cpu).unwrap())
        .unwrap();
    assert_eq!(y.dtype(), DType::F64);
    lin.zero_grad().unwrap();
    assert!(handle.grad().is_none());
}

#[test]
fn state_dict_round_trip() {
    let a = Autoencoder::new().unwrap();
    let b = Autoencoder::new().unwrap();
    let x = Tensor::randn([3, 4], DType::F64, &Device::Cpu, None).unwrap();
    a.eval();
    b.eval();
    assert_ne!(
        a.forward(&x).unwrap().to_f64_vec().unwrap(),
        b.forward(&x).unwrap().to_f64_vec().unwrap()
    );
    let sd = a.state_dict().deep_clone().unwrap();
    let report = b.load_state_dict(&sd, true).unwrap();
    assert!(report.is_clean());
    assert_eq!(
        a.forward(&x).unwrap().to_f64_vec().unwrap(),
        b.forward(&x).unwrap().to_f64_vec().unwrap()
    );
    // loading copies: b's parameters keep their own storage
    assert!(!b
        .encoder
        .weight
        .tensor()
        .shares_storage_with(&a.encoder.weight.tensor()));
    // state_dict tensors share storage with the parameters (as PyTorch's)
    let live = a.state_dict();
    assert!(live
        .get("encoder.weight")
        .unwrap()
        .shares_storage_with(&a.encoder.weight.tensor()));
    assert!(!live.get("encoder.weight").unwrap().requires_grad());
    // loading into a transposed parameter writes through its layout
    let w = Tensor::from_vec(vec![0.0f64; 12], [4, 3])
        .unwrap()
        .t()
        .unwrap()
        .clone_tensor()
        .unwrap();
    let lin = Linear::from_tensors(
        w,
        Some(Tensor::zeros([3], DType::F64, &Device::Cpu).unwrap()),
    )
    .unwrap();
    let sub: StateDict = [
        (
            "weight".to_string(),
            sd.get("encoder.weight").unwrap().clone(),
        ),
        ("bias".to_string(), sd.get("encoder.bias").unwrap().clone()),
    ]
    .into_iter()
    .collect();
    lin.load_state_dict(&sub, true).unwrap();
    assert_eq!(lin.weight.tensor().stride(), &[1, 3]);
    assert_eq!(
        lin.weight.tensor().to_f64_vec().unwrap(),
        a.encoder.weight.tensor().to_f64_vec().unwrap()
    );
}

#[test]
fn strict_load_errors_name_every_bad_key_and_load_nothing() {
    let m = Autoencoder::new().unwrap();
    let before = m.state_dict().deep_clone().unwrap();
    let mut sd = Autoencoder::new()
        .unwrap()
        .state_dict()
        .deep_clone()
        .unwrap();
    sd.remove("decoder.weight");
    sd.insert(
        "encoder.bias",
        Tensor::zeros([5], DType::F64, &Device::Cpu).unwrap(),
    );
    sd.insert(
        "extra.weight",
        Tensor::zeros([1], DType::F64, &Device::Cpu).unwrap(),
    );
    let e = m.load_state_dict(&sd, true).unwrap_err().to_string();
    assert!(e.contains("missing keys: decoder.weight"), "{e}");
    assert!(e.contains("unexpected keys: extra.weight"), "{e}");
    assert!(
        e.contains(
            "size mismatch for encoder.bias: the state dict has shape [5], the module has [3]"
        ),
        "{e}"
    );
    assert!(e.contains("nothing was loaded"), "{e}");
    for (k, t) in before.iter() {
        assert_eq!(
            m.state_dict().get(k).unwrap().to_f64_vec().unwrap(),
            t.to_f64_vec().unwrap(),
            "{k} changed by a failed load"
        );
    }
    // non-strict: loads what matches, reports the rest
    let r = m.load_state_dict(&sd, false).unwrap();
    assert_eq!(r.missing, ["decoder.weight"]);
    assert_eq!(r.unexpected, ["extra.weight"]);
    assert_eq!(r.mismatched.len(), 1);
    assert_eq!(r.mismatched[0].key, "encoder.bias");
    assert_eq!(
        (
            r.mismatched[0].expected.clone(),
            r.mismatched[0].found.clone()
        ),
        (vec![3], vec![5])
    );
    assert_eq!(
        m.encoder.weight.tensor().to_f64_vec().unwrap(),
        sd.get("encoder.weight").unwrap().to_f64_vec().unwrap()
    );
    assert_eq!(
        m.decoder.weight.tensor().to_f64_vec().unwrap(),
        before.get("decoder.weight").unwrap().to_f64_vec().unwrap()
    );
}

#[test]
fn load_converts_dtype_like_copy() {
    let lin = Linear::new_with(2, 2, false, &Factory::dtype(DType::F64)).unwrap();
    let sd: StateDict = [(
        "weight".to_string(),
        Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap(),
    )]
    .into_iter()
    .collect();
    lin.load_state_dict(&sd, true).unwrap();
    assert_eq!(lin.weight.tensor().dtype(), DType::F64);
    assert_eq!(
        lin.weight.tensor().to_f64_vec().unwrap(),
        vec![1.0, 2.0, 3.0, 4.0]
    );
}

#[test]
fn parameters_reject_integer_tensors() {
    assert!(Parameter::new(Tensor::zeros([2], DType::I64, &Device::Cpu).unwrap()).is_err());
    assert!(Linear::new_with(2, 2, true, &Factory::dtype(DType::I32)).is_err());
    assert!(
        Linear::from_tensors(Tensor::zeros([2], DType::F32, &Device::Cpu).unwrap(), None).is_err()
    );
    assert!(Linear::from_tensors(
        Tensor::zeros([2, 3], DType::F32, &Device::Cpu).unwrap(),
        Some(Tensor::zeros([3], DType::F32, &Device::Cpu).unwrap())
    )
    .is_err());
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let lin = Linear::new(3, 2, true).unwrap();
    let e = lin
        .forward(&Tensor::ones([4, 5], DType::F32, &Device::Cpu).unwrap())
        .unwrap_err();
    assert!(
        e.to_string().contains("matmul") || e.to_string().contains("mm"),
        "{e}"
    );
    // a dtype mismatch between input and parameters is an error too (no silent cast)
    let m = Autoencoder::new().unwrap();
    let r = m.forward(&Tensor::ones([2, 4], DType::F32, &Device::Cpu).unwrap());
    if let Ok(y) = r {
        // promotion is PyTorch's: f32 input with f64 weights computes in f64
        assert_eq!(y.dtype(), DType::F64);
    }
    let emb = stride_nn::Embedding::new(4, 2, None).unwrap();
    assert!(emb
        .forward(&Tensor::ones([2], DType::F32, &Device::Cpu).unwrap())
        .is_err());
    assert!(emb
        .forward(&Tensor::from_vec(vec![-1i64], [1]).unwrap())
        .is_err());
    // the Autoencoder keeps its integer buffer when converted
    m.to_dtype(DType::F32).unwrap();
    assert_eq!(m.steps.tensor().dtype(), DType::I64);
    assert_eq!(m.encoder.weight.tensor().dtype(), DType::F32);
}

#[test]
fn non_persistent_buffers_and_frozen_parameters_in_state_dicts() {
    struct M {
        w: Parameter,
        frozen: Parameter,
        running: Buffer,
        scratch: Buffer,
        mode: Mode,
    }
    impl Module for M {
        fn forward(&self, x: &Tensor) -> Result<Tensor> {
            x.mul(&self.w.tensor())
        }
        fn visit(&self, v: &mut dyn Visitor) {
            v.parameter("w", &self.w);
            v.parameter("frozen", &self.frozen);
            v.buffer("running", &self.running);
            v.buffer("scratch", &self.scratch);
        }
        fn mode(&self) -> &Mode {
            &self.mode
        }
    }
    let z = || Tensor::zeros([2], DType::F32, &Device::Cpu).unwrap();
    let m = M {
        w: Parameter::new(z()).unwrap(),
        frozen: Parameter::frozen(z()),
        running: Buffer::new(z()),
        scratch: Buffer::non_persistent(z()),
        mode: Mode::default(),
    };
    let keys: Vec<String> = m.state_dict().keys().map(String::from).collect();
    assert_eq!(keys, ["w", "frozen", "running"]);
    assert_eq!((m.num_parameters(), m.num_trainable_parameters()), (4, 2));
    assert_eq!(m.named_buffers().len(), 2);
}
