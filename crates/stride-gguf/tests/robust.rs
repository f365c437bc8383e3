//! A truncated, malformed or lying file is an `Err` naming the problem: never a panic, an
//! out-of-bounds read or a huge allocation. Hand-made files for each lie, then a fuzzer.

use proptest::prelude::*;
use stride_gguf::{dequantize_to_vec, Array, GgmlType, Gguf, GgufError, GgufWriter, Value};

// ---- a raw assembler, so the tests can write files that lie ----

fn s(x: &str) -> Vec<u8> {
    let mut v = (x.len() as u64).to_le_bytes().to_vec();
    v.extend(x.as_bytes());
    v
}

fn kv(key: &str, type_id: u32, value: &[u8]) -> Vec<u8> {
    let mut v = s(key);
    v.extend(type_id.to_le_bytes());
    v.extend(value);
    v
}

fn tinfo(name: &str, dims: &[u64], type_id: u32, offset: u64) -> Vec<u8> {
    let mut v = s(name);
    v.extend((dims.len() as u32).to_le_bytes());
    for d in dims {
        v.extend(d.to_le_bytes());
    }
    v.extend(type_id.to_le_bytes());
    v.extend(offset.to_le_bytes());
    v
}

/// header + kvs + infos + zero padding to 32 + `data_len` bytes of data.
fn file(
    version: u32,
    n_tensors: u64,
    n_kv: u64,
    kvs: &[Vec<u8>],
    infos: &[Vec<u8>],
    data_len: usize,
) -> Vec<u8> {
    let mut v = b"GGUF".to_vec();
    v.extend(version.to_le_bytes());
    v.extend(n_tensors.to_le_bytes());
    v.extend(n_kv.to_le_bytes());
    kvs.iter().for_each(|k| v.extend(k));
    infos.iter().for_each(|t| v.extend(t));
    v.resize(v.len().div_ceil(32) * 32, 0);
    v.extend((0..data_len).map(|i| (i * 7) as u8));
    v
}

fn arch() -> Vec<u8> {
    kv("general.architecture", 8, &s("llama"))
}

/// Two tensors: "a" F32 [8] at 0 (32 bytes), "b" Q8_0 [32, 2] at 32 (68 bytes → 96 padded).
fn good_infos() -> Vec<Vec<u8>> {
    vec![tinfo("a", &[8], 0, 0), tinfo("b", &[32, 2], 8, 32)]
}

fn err(bytes: Vec<u8>) -> String {
    match Gguf::from_bytes(bytes) {
        Ok(_) => panic!("a malformed file was accepted"),
        Err(e) => e.to_string(),
    }
}

fn assert_err(bytes: Vec<u8>, needles: &[&str]) {
    let e = err(bytes);
    for n in needles {
        assert!(e.contains(n), "error {e:?} does not mention {n:?}");
    }
}

#[test]
fn the_raw_assembler_makes_a_valid_file() {
    let g = Gguf::from_bytes(file(3, 2, 1, &[arch()], &good_infos(), 100)).unwrap();
    assert_eq!(g.tensors().len(), 2);
    assert_eq!(g.tensor_data("b").unwrap().len(), 68);
    let g = Gguf::from_bytes(file(2, 2, 1, &[arch()], &good_infos(), 100)).unwrap();
    assert_eq!(g.version(), 2);
}

#[test]
fn header_errors() {
    assert_err(b"GGML\x03\0\0\0".to_vec(), &["not a GGUF file", "GGML"]);
    assert_err(file(1, 0, 0, &[], &[], 0), &["version 1", "v1"]);
    assert_err(file(4, 0, 0, &[], &[], 0), &["version 4"]);
    let mut be = file(3, 0, 0, &[], &[], 0);
    be[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert_err(be, &["big-endian"]);
    assert_err(b"GGUF\x03\0\0".to_vec(), &["truncated", "version"]);
    assert_err(Vec::new(), &["truncated", "magic"]);
}

#[test]
fn lying_counts_are_errors() {
    // one tensor more than there are: the data is read as a tensor info
    // (here the padding and data parse as a third info whose data lies past the end)
    let e = err(file(3, 3, 1, &[arch()], &good_infos(), 100));
    assert!(e.contains("tensor"), "{e}");
    // one tensor fewer: the second info and tensor are unaccounted bytes
    assert_err(
        file(3, 1, 1, &[arch()], &good_infos(), 100),
        &["after the last tensor", "tensor count (1)"],
    );
    // one metadata entry more: the first tensor info is read as a key/value, and what
    // follows no longer parses
    assert_err(
        file(3, 2, 2, &[arch()], &good_infos(), 100),
        &["tensor info 1 of 2", "cannot be right"],
    );
    // one fewer: the entry is read as a tensor info
    assert_err(
        file(3, 2, 0, &[arch()], &good_infos(), 100),
        &["tensor info 0 of 2"],
    );
    // absurd counts are refused before anything is allocated
    assert_err(
        file(3, 1 << 62, 1, &[arch()], &good_infos(), 100),
        &["tensor count", "4611686018427387904"],
    );
    assert_err(
        file(3, 2, u64::MAX, &[arch()], &good_infos(), 100),
        &["metadata count", "18446744073709551615"],
    );
}

#[test]
fn absurd_lengths_are_refused_before_allocating() {
    // a key length of 2^62
    let mut k = kv("general.architecture", 8, &s("llama"));
    k[0..8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    assert_err(
        file(3, 0, 1, &[k], &[], 0),
        &[
            "metadata key",
            "4611686018427387904",
            "metadata entry 0 of 1",
        ],
    );
    // a string value of 2^62 bytes
    let mut v = 8u32.to_le_bytes().to_vec();
    v.extend((1u64 << 62).to_le_bytes());
    let mut k = s("x");
    k.extend(v);
    assert_err(file(3, 0, 1, &[k], &[], 0), &["string value", "key \"x\""]);
    // an array of 2^62 u64 / strings / arrays
    for elem in [10u32, 8, 9] {
        let mut a = elem.to_le_bytes().to_vec();
        a.extend((1u64 << 62).to_le_bytes());
        assert_err(
            file(3, 0, 1, &[kv("arr", 9, &a)], &[], 0),
            &["array length", "key \"arr\""],
        );
    }
    // a tensor name of 2^62 bytes
    let mut t = tinfo("a", &[8], 0, 0);
    t[0..8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    assert_err(
        file(3, 1, 1, &[arch()], &[t], 32),
        &["tensor name", "tensor info 0 of 1"],
    );
}

#[test]
fn bad_values_are_errors() {
    assert_err(
        file(3, 0, 1, &[kv("k", 13, &[0])], &[], 0),
        &["unknown metadata value type id 13", "key \"k\""],
    );
    assert_err(
        file(3, 0, 1, &[kv("k", 7, &[2])], &[], 0),
        &["bool", "is 2"],
    );
    assert_err(
        file(
            3,
            0,
            1,
            &[kv("k", 8, &[1, 0, 0, 0, 0, 0, 0, 0, 0xff])],
            &[],
            0,
        ),
        &["UTF-8"],
    );
    let mut bad_key = s("k");
    bad_key[8] = 0xc3;
    bad_key.extend(4u32.to_le_bytes());
    bad_key.extend(1u32.to_le_bytes());
    assert_err(
        file(3, 0, 1, &[bad_key], &[], 0),
        &["UTF-8", "metadata key"],
    );
    let dup = kv("k", 4, &1u32.to_le_bytes());
    assert_err(
        file(3, 0, 2, &[dup.clone(), dup], &[], 0),
        &["\"k\" appears twice"],
    );
    // arrays of arrays nested too deep
    let mut a = Vec::new();
    for _ in 0..20 {
        a.extend(9u32.to_le_bytes());
        a.extend(1u64.to_le_bytes());
    }
    a.extend(4u32.to_le_bytes());
    a.extend(0u64.to_le_bytes());
    assert_err(
        file(3, 0, 1, &[kv("deep", 9, &a)], &[], 0),
        &["nested more than 8 deep"],
    );
    // alignment: not a power of two, zero, or not a u32
    for (t, v) in [
        (4u32, 3u32.to_le_bytes().to_vec()),
        (4, 0u32.to_le_bytes().to_vec()),
        (10, 32u64.to_le_bytes().to_vec()),
    ] {
        assert_err(
            file(3, 0, 1, &[kv("general.alignment", t, &v)], &[], 0),
            &["general.alignment"],
        );
    }
}

#[test]
fn lying_tensor_infos_are_errors() {
    let one = |info: Vec<u8>, data: usize| file(3, 1, 1, &[arch()], &[info], data);
    assert_err(
        one(tinfo("t", &[1, 1, 1, 1, 1], 0, 0), 32),
        &["\"t\" has 5 dims", "at most 4"],
    );
    assert_err(
        one(tinfo("t", &[1 << 32, 1 << 32], 0, 0), 32),
        &["\"t\"", "overflows"],
    );
    assert_err(
        one(tinfo("t", &[u64::MAX], 0, 0), 32),
        &["\"t\"", "overflows"],
    );
    assert_err(
        one(tinfo("t", &[8], 4, 0), 32),
        &["tensor \"t\" has unknown ggml type id 4"],
    );
    assert_err(
        one(tinfo("t", &[8], 1000, 0), 32),
        &["unknown ggml type id 1000"],
    );
    assert_err(
        one(tinfo("t", &[33], 8, 0), 64),
        &["row length 33", "Q8_0 block size 32"],
    );
    assert_err(
        one(tinfo("t", &[8], 0, 16), 64),
        &["offset 16", "alignment 32"],
    );
    assert_err(one(tinfo("t", &[8], 0, 64), 32), &["\"t\"", "past its end"]);
    assert_err(
        one(tinfo("t", &[8], 0, u64::MAX - 31), 32),
        &["\"t\"", "past its end"],
    );
    assert_err(
        one(tinfo("t", &[1 << 40], 0, 0), 32),
        &["\"t\"", "past its end"],
    );
    // overlap
    let infos = vec![tinfo("a", &[16], 0, 0), tinfo("b", &[8], 0, 32)];
    assert_err(
        file(3, 2, 1, &[arch()], &infos, 64),
        &["\"a\" [0, 64)", "\"b\" [32, 64)", "overlap"],
    );
    // a gap: a tensor the header does not announce, or a wrong offset
    let infos = vec![tinfo("a", &[8], 0, 0), tinfo("b", &[8], 0, 64)];
    assert_err(
        file(3, 2, 1, &[arch()], &infos, 96),
        &[
            "tensor \"b\" starts at data offset 64",
            "expected offset 32",
        ],
    );
    assert_err(
        one(tinfo("t", &[8], 0, 32), 64),
        &[
            "\"t\" starts at data offset 32",
            "start of the data section",
        ],
    );
    // out of order in the file is fine as long as the data is back to back
    let infos = vec![tinfo("b", &[8], 0, 32), tinfo("a", &[8], 0, 0)];
    assert!(Gguf::from_bytes(file(3, 2, 1, &[arch()], &infos, 64)).is_ok());
    // duplicate names
    let infos = vec![tinfo("a", &[8], 0, 0), tinfo("a", &[8], 0, 32)];
    assert_err(
        file(3, 2, 1, &[arch()], &infos, 64),
        &["\"a\" appears twice"],
    );
    // the data section missing altogether
    let mut f = file(3, 1, 1, &[arch()], &[tinfo("t", &[8], 0, 0)], 0);
    f.truncate(f.len() - 3);
    assert_err(f, &["truncated", "data section"]);
}

#[test]
fn every_truncation_is_an_error() {
    let full = sample_file();
    // the last tensor ("q4k", 144 bytes at data offset 128) ends the file but for padding
    let g = Gguf::from_bytes(full.clone()).unwrap();
    let end = (g.data_offset() + 128 + 144) as usize;
    assert!(end <= full.len() && full.len() - end < 32);
    for n in 0..end {
        let r = Gguf::from_bytes(full[..n].to_vec());
        assert!(
            r.is_err(),
            "a file cut at {n} of {} bytes was accepted",
            full.len()
        );
    }
    // the padding after the last tensor may be cut: the data is whole
    for n in end..=full.len() {
        assert!(Gguf::from_bytes(full[..n].to_vec()).is_ok());
    }
}

/// A small file with every metadata value type and a few tensors of several types.
fn sample_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_string("general.architecture", "llama")
        .add("u8", Value::U8(200))
        .add("i8", Value::I8(-100))
        .add("u16", Value::U16(60000))
        .add("i16", Value::I16(-30000))
        .add("u32", Value::U32(4_000_000_000))
        .add("i32", Value::I32(-2_000_000_000))
        .add("f32", Value::F32(1.5))
        .add("bool", Value::Bool(true))
        .add("u64", Value::U64(u64::MAX))
        .add("i64", Value::I64(i64::MIN))
        .add("f64", Value::F64(-2.25))
        .add_array(
            "strings",
            Array::String(vec!["a".into(), "ü".into(), "".into()]),
        )
        .add_array(
            "nested",
            Array::Array(vec![Array::I32(vec![1, 2]), Array::Bool(vec![false, true])]),
        )
        .add_array("f32s", Array::F32(vec![0.5, -1.0]));
    let x: Vec<f32> = (0..64).map(|i| (i as f32 - 30.0) / 7.0).collect();
    w.add_tensor(
        "f32",
        &[4, 2],
        GgmlType::F32,
        &stride_gguf::quantize(GgmlType::F32, &x[..8]).unwrap(),
    )
    .unwrap();
    w.add_tensor(
        "q8",
        &[32, 2],
        GgmlType::Q8_0,
        &stride_gguf::quantize(GgmlType::Q8_0, &x).unwrap(),
    )
    .unwrap();
    w.add_tensor("q4k", &[256], GgmlType::Q4_K, &[0x11; 144])
        .unwrap();
    w.to_bytes().unwrap()
}

#[test]
fn every_value_type_round_trips_through_the_writer() {
    for version in [2, 3] {
        let mut w = GgufWriter::new();
        w.version(version).unwrap().alignment(64).unwrap();
        w.add_string("s", "x");
        let g = Gguf::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!((g.version(), g.alignment()), (version, 64));
    }
    let g = Gguf::from_bytes(sample_file()).unwrap();
    assert_eq!(g.get_u8("u8").unwrap(), 200);
    assert_eq!(g.get_i8("i8").unwrap(), -100);
    assert_eq!(g.get_u16("u16").unwrap(), 60000);
    assert_eq!(g.get_i16("i16").unwrap(), -30000);
    assert_eq!(g.get_u32("u32").unwrap(), 4_000_000_000);
    assert_eq!(g.get_i32("i32").unwrap(), -2_000_000_000);
    assert_eq!(g.get_f32("f32").unwrap(), 1.5);
    assert!(g.get_bool("bool").unwrap());
    assert_eq!(g.get_u64("u64").unwrap(), u64::MAX);
    assert_eq!(g.get_i64("i64").unwrap(), i64::MIN);
    assert_eq!(g.get_f64("f64").unwrap(), -2.25);
    assert_eq!(g.get_str_array("strings").unwrap(), ["a", "ü", ""]);
    assert_eq!(g.get_f32_array("f32s").unwrap(), [0.5, -1.0]);
    match g.get_array("nested").unwrap() {
        Array::Array(v) => assert_eq!(v, &[Array::I32(vec![1, 2]), Array::Bool(vec![false, true])]),
        a => panic!("{a:?}"),
    }
    assert_eq!(g.get_uint("u8").unwrap(), 200);
    assert_eq!(g.get_int("i64").unwrap(), i64::MIN);
    assert_eq!(g.get_float("f32").unwrap(), 1.5);
    // errors name the key and what it holds
    let msg = |e: GgufError| e.to_string();
    assert_eq!(
        msg(g.get_u32("nope").unwrap_err()),
        "metadata key \"nope\" not found"
    );
    assert_eq!(
        msg(g.get_u32("u64").unwrap_err()),
        "metadata key \"u64\" holds u64, not u32"
    );
    assert_eq!(
        msg(g.get_str_array("nested").unwrap_err()),
        "metadata key \"nested\" holds array of array of i32, not array of string"
    );
    assert_eq!(
        msg(g.get_i32_array("strings").unwrap_err()),
        "metadata key \"strings\" holds array of string, not array of i32"
    );
    assert!(msg(g.get_uint("i8").unwrap_err()).contains("i8 -100"));
    assert!(msg(g.get_int("u64").unwrap_err()).contains("\"u64\""));
    assert_eq!(msg(g.tensor("x").unwrap_err()), "tensor \"x\" not found");
    let mut foreign = g.tensor("q8").unwrap().clone();
    assert_eq!(g.data_of(&foreign).unwrap().len(), 68);
    foreign.offset += 32;
    assert!(msg(g.data_of(&foreign).unwrap_err()).contains("not one of this file's"));
    let e = g.dequantize("q4k").unwrap();
    assert_eq!(e.len(), 256);
    assert_eq!(g.dequantize("q8").unwrap().len(), 64);
    assert_eq!(g.tensor("q8").unwrap().shape(), vec![2, 32]);
    assert_eq!(
        g.tensors().iter().map(|t| t.offset).collect::<Vec<_>>(),
        [0, 32, 128]
    );
}

#[test]
fn the_writer_refuses_bad_tensors() {
    let mut w = GgufWriter::new();
    assert!(w.add_tensor("t", &[33], GgmlType::Q8_0, &[0; 34]).is_err());
    assert!(w.add_tensor("t", &[32], GgmlType::Q8_0, &[0; 33]).is_err());
    assert!(w
        .add_tensor("t", &[1, 1, 1, 1, 1], GgmlType::F32, &[0; 4])
        .is_err());
    assert!(w
        .add_tensor("t", &[u64::MAX, 2], GgmlType::F32, &[])
        .is_err());
    w.add_tensor("t", &[1], GgmlType::F32, &[0; 4]).unwrap();
    assert!(w.add_tensor("t", &[1], GgmlType::F32, &[0; 4]).is_err());
    assert!(w.alignment(48).is_err());
    assert!(w.version(1).is_err());
}

#[test]
fn open_reports_the_path() {
    let e = Gguf::open("/nonexistent/x.gguf").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/x.gguf"), "{e}");
    let dir = std::env::temp_dir().join(format!("stride-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("s.gguf");
    std::fs::write(&p, sample_file()).unwrap();
    let g = Gguf::open(&p).unwrap();
    assert_eq!(g.tensors().len(), 3);
    std::fs::write(&p, b"").unwrap();
    assert!(Gguf::open(&p)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Whatever the parser accepts must be safe to use: every tensor's data in bounds and
/// dequantizable (or refused) without a panic.
fn use_everything(g: &Gguf) {
    for (k, v) in g.metadata() {
        let _ = (k.len(), v.to_string());
    }
    for t in g.tensors() {
        let d = g.tensor_data(&t.name).unwrap();
        assert_eq!(d.len() as u64, t.n_bytes());
        if t.n_bytes() < 1 << 20 {
            let _ = dequantize_to_vec(t.ggml_type, d);
            let _ = g.dequantize_rows(&t.name, 0..t.n_rows().min(2));
        }
    }
}

#[derive(Clone, Debug)]
enum Mutation {
    Byte(usize, u8),
    Word(usize, u64),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let interesting = prop_oneof![
        Just(0u64),
        Just(1),
        Just(31),
        Just(32),
        Just(u32::MAX as u64),
        Just(1 << 62),
        Just(u64::MAX),
        any::<u64>(),
        0u64..300,
    ];
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Byte(i, b)),
        3 => (any::<usize>(), interesting).prop_map(|(i, w)| Mutation::Word(i, w)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..16)).prop_map(|(i, v)| Mutation::Insert(i, v)),
        1 => (any::<usize>(), 1usize..16).prop_map(|(i, n)| Mutation::Remove(i, n)),
    ]
}

fn apply(mut f: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        let n = f.len().max(1);
        match m {
            Mutation::Byte(i, b) => {
                if !f.is_empty() {
                    f[i % n] = *b
                }
            }
            Mutation::Word(i, w) => {
                let i = i % n;
                for (k, b) in w.to_le_bytes().iter().enumerate() {
                    if let Some(x) = f.get_mut(i + k) {
                        *x = *b;
                    }
                }
            }
            Mutation::Truncate(i) => f.truncate(i % n),
            Mutation::Insert(i, v) => {
                let i = i % n;
                f.splice(i..i, v.iter().copied());
            }
            Mutation::Remove(i, k) => {
                let i = i % n;
                let end = (i + k).min(f.len());
                f.drain(i..end);
            }
        }
    }
    f
}

proptest! {
    // ~10 µs per case (opt-level 2): 20,000 cases of each take about a second
    #![proptest_config(ProptestConfig { cases: 20_000, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_never_panic(muts in proptest::collection::vec(mutation(), 1..4)) {
        let f = apply(sample_file(), &muts);
        if let Ok(g) = Gguf::from_bytes(f) {
            use_everything(&g);
        }
    }

    /// Mutations aimed at the header and the tensor infos, where the counts and offsets are.
    #[test]
    fn mutated_headers_never_panic(pos in 0usize..700, w in any::<u64>(), b in any::<u8>(), k in 0usize..3) {
        let mut f = sample_file();
        let pos = pos % f.len();
        match k {
            0 => f[pos] = b,
            1 => { for (i, x) in w.to_le_bytes().iter().enumerate() { if let Some(y) = f.get_mut(pos + i) { *y = *x } } }
            _ => { for (i, x) in (w % 512).to_le_bytes().iter().enumerate() { if let Some(y) = f.get_mut(pos + i) { *y = *x } } }
        }
        if let Ok(g) = Gguf::from_bytes(f) {
            use_everything(&g);
        }
    }
}

fn array_strategy() -> impl Strategy<Value = Array> {
    let leaf = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..5).prop_map(Array::U8),
        proptest::collection::vec(any::<i8>(), 0..5).prop_map(Array::I8),
        proptest::collection::vec(any::<u16>(), 0..5).prop_map(Array::U16),
        proptest::collection::vec(any::<i16>(), 0..5).prop_map(Array::I16),
        proptest::collection::vec(any::<u32>(), 0..5).prop_map(Array::U32),
        proptest::collection::vec(any::<i32>(), 0..5).prop_map(Array::I32),
        proptest::collection::vec(-1e6f32..1e6, 0..5).prop_map(Array::F32),
        proptest::collection::vec(any::<bool>(), 0..5).prop_map(Array::Bool),
        proptest::collection::vec(".{0,6}", 0..5).prop_map(Array::String),
        proptest::collection::vec(any::<u64>(), 0..5).prop_map(Array::U64),
        proptest::collection::vec(any::<i64>(), 0..5).prop_map(Array::I64),
        proptest::collection::vec(-1e300f64..1e300, 0..5).prop_map(Array::F64),
    ];
    // arrays of arrays hold arrays of one element type, as the format requires
    leaf.prop_recursive(3, 24, 4, |inner| {
        proptest::collection::vec(inner, 1..4).prop_filter_map("one element type", |v| {
            let t = v[0].element_type();
            v.iter()
                .all(|a| a.element_type() == t)
                .then_some(Array::Array(v))
        })
    })
}

fn value_strategy() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u8>().prop_map(Value::U8),
        any::<i8>().prop_map(Value::I8),
        any::<u16>().prop_map(Value::U16),
        any::<i16>().prop_map(Value::I16),
        any::<u32>().prop_map(Value::U32),
        any::<i32>().prop_map(Value::I32),
        (-1e30f32..1e30).prop_map(Value::F32),
        any::<bool>().prop_map(Value::Bool),
        ".{0,12}".prop_map(Value::String),
        array_strategy().prop_map(Value::Array),
        any::<u64>().prop_map(Value::U64),
        any::<i64>().prop_map(Value::I64),
        (-1e300f64..1e300).prop_map(Value::F64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Whatever the writer writes (any metadata, tensors of any type and size, v2 or v3, any
    /// alignment), the reader reads back the same.
    #[test]
    fn writer_and_reader_round_trip(
        kvs in proptest::collection::btree_map("[a-z.]{1,10}", value_strategy(), 0..8),
        tensors in proptest::collection::vec((0usize..GgmlType::ALL.len(), 0u64..3, 1u64..3), 0..5),
        version in 2u32..4,
        align_pow in 0u32..8,
    ) {
        let mut w = GgufWriter::new();
        w.version(version).unwrap();
        let kvs: Vec<(String, Value)> = kvs.into_iter().filter(|(k, _)| k != "general.alignment").collect();
        for (k, v) in &kvs {
            w.add(k, v.clone());
        }
        if align_pow > 0 {
            w.alignment(1 << align_pow).unwrap();
        }
        let mut want = Vec::new();
        for (i, (ti, blocks, rows)) in tensors.into_iter().enumerate() {
            let t = GgmlType::ALL[ti];
            let dims = [blocks * t.block_size() as u64, rows];
            let data: Vec<u8> = (0..t.bytes_for(dims[0] * dims[1]).unwrap()).map(|b| (b as u8) ^ (i as u8)).collect();
            w.add_tensor(&format!("t{i}"), &dims, t, &data).unwrap();
            want.push((format!("t{i}"), dims, t, data));
        }
        let g = Gguf::from_bytes(w.to_bytes().unwrap()).unwrap();
        prop_assert_eq!(g.version(), version);
        prop_assert_eq!(g.alignment(), if align_pow > 0 { 1 << align_pow } else { 32 });
        for (k, v) in &kvs {
            prop_assert_eq!(g.get(k), Some(v));
        }
        prop_assert_eq!(g.tensors().len(), want.len());
        for (name, dims, t, data) in &want {
            let info = g.tensor(name).unwrap();
            prop_assert_eq!(&info.dims, &dims.to_vec());
            prop_assert_eq!(info.ggml_type, *t);
            prop_assert_eq!(info.offset % g.alignment(), 0);
            prop_assert_eq!(g.tensor_data(name).unwrap(), &data[..]);
        }
    }
}
