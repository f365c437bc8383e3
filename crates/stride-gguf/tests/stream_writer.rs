//! The streaming side of `GgufWriter`: tensors declared with `add_tensor_info` and written
//! one by one through `write_header`'s `TensorDataWriter` give the file `to_bytes` gives,
//! and every misuse is an error that names the tensor.

use stride_gguf::{quantize, GgmlType, Gguf, GgufError, GgufWriter};

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761u32).wrapping_add(seed) >> 20) as f32 / 512.0 - 4.0
        })
        .collect()
}

fn three() -> Vec<(&'static str, Vec<u64>, GgmlType, Vec<u8>)> {
    vec![
        (
            "a",
            vec![64, 3],
            GgmlType::Q4_1,
            quantize(GgmlType::Q4_1, &values(192, 1)).unwrap(),
        ),
        (
            "norm",
            vec![5],
            GgmlType::F32,
            quantize(GgmlType::F32, &values(5, 2)).unwrap(),
        ),
        (
            "b",
            vec![32, 2],
            GgmlType::Q8_0,
            quantize(GgmlType::Q8_0, &values(64, 3)).unwrap(),
        ),
    ]
}

#[test]
fn streamed_file_equals_the_in_memory_one() {
    for alignment in [32u32, 64, 1] {
        let mut whole = GgufWriter::new();
        let mut streamed = GgufWriter::new();
        for w in [&mut whole, &mut streamed] {
            w.add_string("general.architecture", "llama");
            w.alignment(alignment).unwrap();
        }
        for (i, (name, dims, t, data)) in three().into_iter().enumerate() {
            whole.add_tensor(name, &dims, t, &data).unwrap();
            // the middle one comes with its data: the stream writes it in its turn
            if i == 1 {
                streamed.add_tensor(name, &dims, t, &data).unwrap();
            } else {
                streamed.add_tensor_info(name, &dims, t).unwrap();
            }
        }
        let want = whole.to_bytes().unwrap();
        assert_eq!(streamed.file_len(), want.len() as u64);
        assert_eq!(whole.file_len(), want.len() as u64);
        let mut out = streamed.write_header(Vec::new()).unwrap();
        let ts = three();
        assert_eq!(out.next_tensor(), Some("a"));
        out.write_tensor("a", &ts[0].3).unwrap();
        assert_eq!(out.next_tensor(), Some("b"));
        out.write_tensor("b", &ts[2].3).unwrap();
        assert_eq!(out.next_tensor(), None);
        let got = out.finish().unwrap();
        assert_eq!(got, want, "alignment {alignment}");
        let g = Gguf::from_bytes(got).unwrap();
        assert_eq!(g.tensor_data("b").unwrap(), &ts[2].3[..]);
    }
}

#[test]
fn misuse_is_an_error_naming_the_tensor() {
    let mut w = GgufWriter::new();
    w.add_tensor_info("x", &[32, 2], GgmlType::Q8_0).unwrap();
    w.add_tensor_info("y", &[4], GgmlType::F32).unwrap();
    let e = w.to_bytes().unwrap_err().to_string();
    assert!(e.contains("\"x\"") && e.contains("write_header"), "{e}");

    // rows that are not whole blocks, a name given twice
    let e = w
        .add_tensor_info("z", &[48, 2], GgmlType::Q4_0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"z\"") && e.contains("whole Q4_0 blocks"),
        "{e}"
    );
    assert!(w.add_tensor_info("x", &[4], GgmlType::F32).is_err());

    let mut out = w.write_header(Vec::new()).unwrap();
    let e = out.write_tensor("y", &[0; 16]).unwrap_err().to_string();
    assert!(e.contains("\"y\"") && e.contains("\"x\" next"), "{e}");
    let e = out.write_tensor("x", &[0; 33]).unwrap_err();
    assert!(matches!(e, GgufError::BadLength { .. }), "{e}");
    out.write_tensor("x", &[0; 68]).unwrap();
    let e = out.finish().unwrap_err().to_string();
    assert!(e.contains("\"y\"") && e.contains("never written"), "{e}");

    let mut w = GgufWriter::new();
    w.add_tensor_info("only", &[4], GgmlType::F32).unwrap();
    let mut out = w.write_header(Vec::new()).unwrap();
    out.write_tensor("only", &[0; 16]).unwrap();
    let e = out.write_tensor("extra", &[0; 16]).unwrap_err().to_string();
    assert!(e.contains("after every declared tensor"), "{e}");
    assert!(out.finish().is_ok());
}
