//! Bad input is an error naming the problem, never a panic, and leaves outputs unchanged.

mod common;

use common::*;
use stride_gguf::GgmlType;
use stride_quant::{ActFormat, Isa, Q8Row, QMatrix, QuantError};

fn msg(e: &QuantError) -> String {
    e.to_string()
}

#[test]
fn from_bytes_checks_type_and_sizes() {
    // unsupported types
    for ty in [
        GgmlType::F32,
        GgmlType::IQ4_XS,
        GgmlType::Q2_K,
        GgmlType::Q8_K,
    ] {
        let e = QMatrix::from_bytes(ty, 1, 256, &vec![0; ty.type_size() * 256 / ty.block_size()])
            .unwrap_err();
        assert!(matches!(e, QuantError::Unsupported { .. }), "{ty}: {e}");
        assert!(msg(&e).contains("supported"));
    }
    // cols not a whole number of blocks
    let e = QMatrix::from_bytes(GgmlType::Q4_K, 2, 128, &[0; 144]).unwrap_err();
    assert!(msg(&e).contains("cols = 128"));
    let e = QMatrix::from_bytes(GgmlType::Q4_0, 1, 33, &[0; 18]).unwrap_err();
    assert!(msg(&e).contains("multiple of 32"));
    // wrong byte counts
    for (rows, len) in [(2, 35), (2, 37), (3, 36), (0, 1)] {
        let e = QMatrix::from_bytes(GgmlType::Q4_0, rows, 32, &vec![0; len]).unwrap_err();
        assert!(
            msg(&e).contains("bytes were given"),
            "{rows} rows, {len} bytes"
        );
    }
    // absurd sizes: overflow or more than isize::MAX, never a panic or an allocation
    for (rows, cols) in [
        (usize::MAX, 32),
        (usize::MAX / 2, 64),
        (1 << 40, 1 << 30),
        (2, usize::MAX / 32 * 32),
        (1, (isize::MAX as usize / 32 + 1) * 32),
    ] {
        let e = QMatrix::from_bytes(GgmlType::Q8_0, rows, cols, &[0; 34]).unwrap_err();
        assert!(msg(&e).contains("too large"), "{rows} × {cols}");
        let e = QMatrix::quantize(GgmlType::Q8_0, rows, cols, &[0.0; 32]).unwrap_err();
        assert!(msg(&e).contains("too large"), "{rows} × {cols}");
    }
}

#[test]
fn quantize_checks_values_and_types() {
    let e = QMatrix::quantize(GgmlType::Q4_0, 2, 32, &[0.0; 63]).unwrap_err();
    assert!(msg(&e).contains("64 values"));
    let mut w = vec![0.25f32; 64];
    w[40] = f32::NAN;
    let e = QMatrix::quantize(GgmlType::Q4_1, 2, 32, &w).unwrap_err();
    assert!(matches!(e, QuantError::Gguf(_)));
    assert!(msg(&e).contains("value 40"));
    let e = QMatrix::quantize(GgmlType::Q6_K, 1, 256, &[0.0; 256]).unwrap_err();
    assert!(msg(&e).contains("from_bytes"), "{e}");
}

#[test]
fn row_access_is_checked() {
    let q = QMatrix::quantize(GgmlType::Q8_0, 2, 32, &[1.0; 64]).unwrap();
    assert!(msg(&q.row(2).unwrap_err()).contains("row 2 is out of range"));
    let mut out = vec![7.0f32; 31];
    assert!(q.row_into(0, &mut out).is_err());
    assert!(out.iter().all(|&v| v == 7.0));
}

#[test]
fn products_check_sizes_and_leave_outputs_alone() {
    let mut rng = Rng::new(31);
    let (rows, cols) = (5, 64);
    let q = QMatrix::from_vec(
        GgmlType::Q4_0,
        rows,
        cols,
        random_weights(GgmlType::Q4_0, rows, cols, &mut rng),
    )
    .unwrap();
    let x = vec![0.5f32; 4 * cols];
    let untouched = |y: &[f32]| y.iter().all(|&v| v == 3.0);

    let mut y = vec![3.0f32; rows];
    assert!(msg(&q.matvec(&x[..cols - 1], &mut y).unwrap_err()).contains("x of 64"));
    let mut y4 = vec![3.0f32; rows + 1];
    assert!(q.matvec(&x[..cols], &mut y4).is_err());
    assert!(untouched(&y) && untouched(&y4));

    let mut y = vec![3.0f32; 2 * rows];
    assert!(q.matmul(&x[..2 * cols - 1], 2, &mut y).is_err());
    assert!(q.matmul(&x[..2 * cols], 2, &mut y[..2 * rows - 1]).is_err());
    assert!(q.matmul(&x[..2 * cols], usize::MAX, &mut y).is_err());
    assert!(untouched(&y));

    // strided: overlapping outputs, short buffers, overflowing strides
    let mut y = vec![3.0f32; 4 * rows];
    let e = q.matmul_strided(&x, 2, cols, &mut y, rows - 1).unwrap_err();
    assert!(msg(&e).contains("overlap"));
    let e = q.matmul_strided(&x, 4, cols + 1, &mut y, rows).unwrap_err();
    assert!(msg(&e).contains("need 259"), "{e}");
    let e = q
        .matmul_strided(&x, 2, cols, &mut y, 3 * rows + 1)
        .unwrap_err();
    assert!(msg(&e).contains("y has 20 values"), "{e}");
    let e = q
        .matmul_strided(&x, 3, usize::MAX / 2, &mut y, rows)
        .unwrap_err();
    assert!(msg(&e).contains("more than usize::MAX"), "{e}");
    let e = q
        .matmul_strided(&x, 3, cols, &mut y, usize::MAX / 2)
        .unwrap_err();
    assert!(msg(&e).contains("more than usize::MAX"), "{e}");
    assert!(untouched(&y));
    // m = 0 touches nothing, whatever the buffers
    q.matmul_strided(&[], 0, 0, &mut y, 0).unwrap();
    assert!(untouched(&y));
}

#[test]
fn unavailable_isa_is_an_error() {
    let q = QMatrix::quantize(GgmlType::Q8_0, 1, 32, &[1.0; 32]).unwrap();
    let mut y = [0f32];
    for isa in Isa::ALL {
        let r = q.matmul_with(isa, &[1.0; 32], 1, 32, &mut y, 1);
        assert_eq!(r.is_ok(), isa.is_available(), "{isa}");
    }
    assert!(Isa::Scalar.is_available());
    assert!(Isa::detect().is_available());
}

#[test]
fn activation_rows_check_their_length() {
    for format in [ActFormat::Q8_0, ActFormat::Q8_1, ActFormat::Q8_K] {
        let e = Q8Row::quantize(format, &[0.0; 48]).unwrap_err();
        assert!(msg(&e).contains("whole number"));
        let a = Q8Row::quantize(format, &[]).unwrap();
        assert!(a.is_empty());
    }
}

#[test]
fn from_gguf_reads_2d_tensors_only() {
    use stride_gguf::{quantize, Gguf, GgufWriter};
    let w: Vec<f32> = (0..4 * 64).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
    let bytes = quantize(GgmlType::Q5_1, &w).unwrap();
    let mut file = GgufWriter::new();
    file.add_tensor("m", &[64, 4], GgmlType::Q5_1, &bytes)
        .unwrap();
    file.add_tensor("v", &[64, 2, 2], GgmlType::Q5_1, &bytes)
        .unwrap();
    file.add_tensor(
        "f",
        &[64, 4],
        GgmlType::F32,
        &quantize(GgmlType::F32, &w).unwrap(),
    )
    .unwrap();
    let g = Gguf::from_bytes(file.to_bytes().unwrap()).unwrap();
    let q = QMatrix::from_gguf(&g, "m").unwrap();
    assert_eq!((q.rows(), q.cols(), q.as_bytes()), (4, 64, &bytes[..]));
    assert!(msg(&QMatrix::from_gguf(&g, "v").unwrap_err()).contains("2-D"));
    assert!(matches!(
        QMatrix::from_gguf(&g, "f").unwrap_err(),
        QuantError::Unsupported { .. }
    ));
    assert!(matches!(
        QMatrix::from_gguf(&g, "missing").unwrap_err(),
        QuantError::Gguf(_)
    ));
}
