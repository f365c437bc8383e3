//! Bit-exactness against the reference: fixtures written by `scripts/gguf_golden.py` with
//! the `gguf` Python package's numpy (de)quantizer.

use stride_gguf::{dequantize, dequantize_to_vec, quantize, GgmlType};

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

macro_rules! fixture {
    ($name:literal) => {
        ($name, include_bytes!(concat!("fixtures/", $name)) as &[u8])
    };
}

const DEQUANT: &[(&str, &[u8])] = &[
    fixture!("dequant_F32.bin"),
    fixture!("dequant_F16.bin"),
    fixture!("dequant_BF16.bin"),
    fixture!("dequant_Q4_0.bin"),
    fixture!("dequant_Q4_1.bin"),
    fixture!("dequant_Q5_0.bin"),
    fixture!("dequant_Q5_1.bin"),
    fixture!("dequant_Q8_0.bin"),
    fixture!("dequant_Q2_K.bin"),
    fixture!("dequant_Q3_K.bin"),
    fixture!("dequant_Q4_K.bin"),
    fixture!("dequant_Q5_K.bin"),
    fixture!("dequant_Q6_K.bin"),
    fixture!("dequant_TQ2_0.bin"),
    fixture!("dequant_MXFP4.bin"),
    fixture!("dequant_IQ4_NL.bin"),
    fixture!("dequant_IQ4_XS.bin"),
];

const QUANT: &[(&str, &[u8])] = &[
    fixture!("quant_Q8_0.bin"),
    fixture!("quant_Q4_0.bin"),
    fixture!("quant_Q4_1.bin"),
    fixture!("quant_Q5_0.bin"),
    fixture!("quant_Q5_1.bin"),
    fixture!("quant_F16.bin"),
    fixture!("quant_BF16.bin"),
];

#[test]
fn dequantization_is_bit_exact_with_the_reference() {
    let mut total = 0;
    for (name, b) in DEQUANT {
        let t = GgmlType::from_id(u32_at(b, 0)).unwrap();
        let n_blocks = u32_at(b, 4) as usize;
        let n_bytes = u32_at(b, 8) as usize;
        let raw = &b[12..12 + n_bytes];
        let want = f32s(&b[12 + n_bytes..]);
        assert_eq!(n_bytes, n_blocks * t.type_size(), "{name}");
        assert_eq!(want.len(), n_blocks * t.block_size(), "{name}");
        let got = dequantize_to_vec(t, raw).unwrap();
        // block by block too (the slice API)
        let mut got2 = vec![0f32; want.len()];
        for (bi, (src, dst)) in raw
            .chunks(t.type_size())
            .zip(got2.chunks_mut(t.block_size()))
            .enumerate()
        {
            dequantize(t, src, dst).unwrap_or_else(|e| panic!("{name} block {bi}: {e}"));
        }
        for (i, ((g, g2), w)) in got.iter().zip(&got2).zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{name}: element {i} (block {}): got {g:e}, reference {w:e}",
                i / t.block_size()
            );
            assert_eq!(g2.to_bits(), w.to_bits(), "{name}: element {i}");
        }
        total += want.len();
    }
    assert!(total > 10_000);
}

#[test]
fn quantization_is_byte_exact_with_the_reference() {
    for (name, b) in QUANT {
        let t = GgmlType::from_id(u32_at(b, 0)).unwrap();
        let n = u32_at(b, 4) as usize;
        let x = f32s(&b[8..8 + 4 * n]);
        let want = &b[8 + 4 * n..];
        let got = quantize(t, &x).unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        for (bi, (g, w)) in got
            .chunks(t.type_size())
            .zip(want.chunks(t.type_size()))
            .enumerate()
        {
            assert_eq!(
                g,
                w,
                "{name}: block {bi} differs (input {:?})",
                &x[bi * t.block_size()..(bi + 1) * t.block_size()]
            );
        }
    }
}

#[test]
fn block_geometry_matches_the_reference_table() {
    let table = include_str!("fixtures/quant_sizes.txt");
    let mut seen = 0;
    for line in table.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (name, id, bs, ts) = (
            f[0],
            f[1].parse().unwrap(),
            f[2].parse::<usize>().unwrap(),
            f[3].parse::<usize>().unwrap(),
        );
        let t = GgmlType::from_id(id).unwrap_or_else(|| panic!("type {name} ({id}) unknown"));
        assert_eq!(
            (t.name(), t.block_size(), t.type_size()),
            (name, bs, ts),
            "{name}"
        );
        seen += 1;
    }
    assert_eq!(
        seen,
        GgmlType::ALL.len(),
        "every known type is in the reference table"
    );
    for t in GgmlType::ALL {
        assert_eq!(GgmlType::from_id(t.id()), Some(t));
    }
}

#[test]
fn dequantize_refuses_wrong_lengths_and_unsupported_types() {
    let e = dequantize_to_vec(GgmlType::Q4_0, &[0u8; 19]).unwrap_err();
    assert!(e.to_string().contains("19 bytes"), "{e}");
    let mut out = [0f32; 31];
    let e = dequantize(GgmlType::Q4_0, &[0u8; 18], &mut out).unwrap_err();
    assert!(e.to_string().contains("31 elements"), "{e}");
    let e = dequantize_to_vec(GgmlType::IQ2_XXS, &[0u8; 66]).unwrap_err();
    assert_eq!(e.to_string(), "dequantization of IQ2_XXS is not supported");
    let e = quantize(GgmlType::Q8_0, &[0.0; 33]).unwrap_err();
    assert!(e.to_string().contains("33 values"), "{e}");
    assert!(quantize(GgmlType::Q4_K, &[0.0; 256]).is_err());
    let mut x = [1.0f32; 64];
    x[40] = f32::NAN;
    let e = quantize(GgmlType::Q4_1, &x).unwrap_err();
    assert!(
        e.to_string().contains("value 40 (in block 1) is NaN"),
        "{e}"
    );
    x[40] = f32::INFINITY;
    assert!(quantize(GgmlType::Q8_0, &x).is_err());
    assert_eq!(quantize(GgmlType::BF16, &x).unwrap().len(), 128);
}
