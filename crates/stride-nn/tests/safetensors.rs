use proptest::prelude::*;
use std::collections::BTreeMap;
use stride_core::{DType, Device, Tensor};
use stride_nn::safetensors as st;

const ALL: [DType; 10] = [
    DType::F64,
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U32,
    DType::U8,
    DType::I8,
    DType::Bool,
];

fn sample(dtype: DType) -> Tensor {
    let x = Tensor::arange(0.0, 24.0, &Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .reshape(&[2, 3, 4])
        .unwrap();
    let x = if dtype == DType::Bool {
        x.remainder(3.0).unwrap().eq(0.0).unwrap()
    } else {
        x
    };
    x.to_dtype(dtype).unwrap()
}

fn same(a: &Tensor, b: &Tensor) {
    assert_eq!(a.dtype(), b.dtype());
    assert_eq!(a.shape(), b.shape());
    let (x, y) = (
        a.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
        b.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
    );
    assert_eq!(x, y);
}

#[test]
fn every_dtype_and_layout_round_trips() {
    let mut m = BTreeMap::new();
    for d in ALL {
        let t = sample(d);
        m.insert(format!("{d}.contiguous"), t.clone());
        m.insert(format!("{d}.transposed"), t.transpose(0, 2).unwrap());
        m.insert(format!("{d}.sliced"), t.slice(2, 0, 4, 2).unwrap());
        m.insert(
            format!("{d}.expanded"),
            t.select(0, 1)
                .unwrap()
                .unsqueeze(0)
                .unwrap()
                .expand(&[3, 3, 4])
                .unwrap(),
        );
        m.insert(
            format!("{d}.scalar"),
            t.flatten(0, -1).unwrap().select(0, 5).unwrap(),
        );
        m.insert(format!("{d}.empty"), t.narrow(1, 0, 0).unwrap());
    }
    let mut meta = BTreeMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    let bytes = st::serialize(m.iter().map(|(k, v)| (k.as_str(), v)), Some(&meta)).unwrap();
    let back = st::deserialize(&bytes).unwrap();
    assert_eq!(back.metadata, meta);
    assert_eq!(back.tensors.len(), m.len());
    for (k, v) in &m {
        let b = &back.tensors[k];
        same(v, b);
        assert!(b.is_contiguous(), "{k} loads contiguous");
    }
}

#[test]
fn f16_bf16_and_nan_bits_survive() {
    let v: Vec<f32> = vec![
        f32::NAN,
        -0.0,
        f32::INFINITY,
        1e-8,
        65504.0,
        std::f32::consts::PI,
    ];
    let t = Tensor::from_vec(v.clone(), [6]).unwrap();
    let mut m = BTreeMap::new();
    m.insert("f32".to_string(), t.clone());
    m.insert("f16".to_string(), t.to_dtype(DType::F16).unwrap());
    m.insert("bf16".to_string(), t.to_dtype(DType::BF16).unwrap());
    let back =
        st::deserialize(&st::serialize(m.iter().map(|(k, v)| (k.as_str(), v)), None).unwrap())
            .unwrap()
            .tensors;
    let bits = |t: &Tensor| {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&back["f32"]), bits(&t));
    for k in ["f16", "bf16"] {
        assert_eq!(
            bits(&back[k].to_dtype(DType::F32).unwrap()),
            bits(&m[k].to_dtype(DType::F32).unwrap())
        );
    }
}

#[test]
fn save_and_load_a_file() {
    let dir = std::env::temp_dir().join(format!("stride-st-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("m.safetensors");
    let mut m = BTreeMap::new();
    m.insert("w".to_string(), sample(DType::F32).transpose(0, 1).unwrap());
    st::save(m.iter().map(|(k, v)| (k.as_str(), v)), None, &p).unwrap();
    same(&st::load(&p).unwrap()["w"], &m["w"]);
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary file left behind");
    let e = st::load(dir.join("missing.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.safetensors"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A hand-built file (the format's spec, not our writer) loads with the right values.
#[test]
fn reads_a_file_written_by_hand() {
    let header = r#"{"__metadata__":{"k":"v"},"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[],"data_offsets":[8,10]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&7i32.to_le_bytes());
    bytes.extend_from_slice(&(-3i32).to_le_bytes());
    bytes.extend_from_slice(&0x3fc0u16.to_le_bytes()); // bf16 1.5
    let f = st::deserialize(&bytes).unwrap();
    assert_eq!(f.tensors["a"].to_vec::<i32>().unwrap(), vec![7, -3]);
    assert_eq!(
        f.tensors["b"]
            .to_dtype(DType::F32)
            .unwrap()
            .item::<f32>()
            .unwrap(),
        1.5
    );
    assert_eq!(f.metadata["k"], "v");
}

fn valid_file() -> Vec<u8> {
    let mut m = BTreeMap::new();
    m.insert("x".to_string(), sample(DType::F32));
    m.insert("flags".to_string(), sample(DType::Bool));
    st::serialize(m.iter().map(|(k, v)| (k.as_str(), v)), None).unwrap()
}

#[test]
fn malformed_files_are_errors() {
    let good = valid_file();
    // truncated anywhere: header length, header, data
    for cut in [0, 4, 8, 20, good.len() - 1] {
        let e = st::deserialize(&good[..cut]).unwrap_err().to_string();
        assert!(e.contains("safetensors"), "{e}");
    }
    // a bool byte that is not 0/1
    let mut bad = good.clone();
    // the writer puts data in order of decreasing alignment: f32 "x" first, bool "flags" last
    let last = bad.len() - 1;
    bad[last] = 7;
    let e = st::deserialize(&bad).unwrap_err().to_string();
    assert!(e.contains("not a bool") && e.contains("'flags'"), "{e}");
    // an unsupported dtype is named
    let header = r#"{"a":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}}"#;
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header.as_bytes());
    f.extend_from_slice(&[0, 0]);
    let e = st::deserialize(&f).unwrap_err().to_string();
    assert!(e.contains("'a'") && e.contains("U16"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    /// Garbage never panics: it loads or it is an error.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = st::deserialize(&bytes);
    }
    /// Mutating any byte of a valid file (header or data) never panics.
    #[test]
    fn mutated_files_never_panic(pos in 0usize..4096, val in any::<u8>(), cut in 0usize..4096) {
        let mut f = valid_file();
        let p = pos % f.len();
        f[p] = val;
        let c = cut % (f.len() + 1);
        let _ = st::deserialize(&f[..c]);
        let _ = st::deserialize(&f);
    }
    /// Random headers with plausible keys never panic.
    #[test]
    fn random_headers_never_panic(dtype in "(F32|F64|BOOL|I8|U8|BF16|F16|I64|U32|I32|XX)", dims in proptest::collection::vec(0usize..1<<40, 0..4), a in 0usize..64, b in 0usize..64) {
        let header = format!(r#"{{"t":{{"dtype":"{dtype}","shape":{dims:?},"data_offsets":[{a},{b}]}}}}"#);
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.extend(std::iter::repeat_n(1u8, 64));
        let _ = st::deserialize(&f);
    }
}

/// A module's state dict goes through a file and loads into a fresh module.
#[test]
fn state_dict_round_trips_through_a_file() {
    use stride_nn::{Linear, Module, StateDict};
    let a = Linear::new(3, 2, true).unwrap();
    let b = Linear::new(3, 2, true).unwrap();
    let p = std::env::temp_dir().join(format!("stride-sd-{}.safetensors", std::process::id()));
    a.state_dict().save_safetensors(&p).unwrap();
    let sd = StateDict::load_safetensors(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    assert_eq!(sd.keys().collect::<Vec<_>>(), vec!["bias", "weight"]);
    b.load_state_dict(&sd, true).unwrap();
    for (k, t) in a.state_dict().iter() {
        same(t, sd.get(k).unwrap());
        same(t, b.state_dict().get(k).unwrap());
    }
}

#[test]
fn empty_and_truncated_files_on_disk_are_errors() {
    let dir = std::env::temp_dir().join(format!("stride-st-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = valid_file();
    for (name, bytes) in [("empty", &good[..0]), ("cut", &good[..good.len() / 2])] {
        let p = dir.join(format!("{name}.safetensors"));
        std::fs::write(&p, bytes).unwrap();
        let e = st::load_file(&p).unwrap_err().to_string();
        assert!(e.contains(&format!("{name}.safetensors")), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
