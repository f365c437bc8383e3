//! Elementwise ops and copies whose operands are transposed relative to each other: the CPU
//! engine walks these in tiles, staging the transposed operand (`cpu/strided.rs`). Checked
//! against a plain loop over logical indices, at sizes on both sides of the tile size, with
//! in-place and `_out` forms writing through transposed outputs.

use stride_core::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;

/// A `[b, r, c]` tensor of distinct values `base + i` in logical order, stored with its last
/// two dims swapped (a transposed view) when `transposed`.
fn make(b: usize, r: usize, c: usize, base: i64, transposed: bool, dtype: DType) -> Tensor {
    let n = (b * r * c) as i64;
    let x = Tensor::arange(base, base + n, &CPU)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    if transposed {
        // store [b, c, r] row-major, then view it as [b, r, c]
        let v = x.reshape(&[b as i64, r as i64, c as i64]).unwrap();
        let stored = v.transpose(1, 2).unwrap().contiguous().unwrap();
        let t = stored.transpose(1, 2).unwrap();
        assert_eq!(t.stride(), &[r * c, 1, r]);
        t
    } else {
        x.reshape(&[b as i64, r as i64, c as i64]).unwrap()
    }
}

const SIZES: [(usize, usize, usize); 6] = [
    (1, 31, 33),
    (2, 32, 64),
    (1, 65, 31),
    (3, 64, 65),
    (1, 100, 7),
    (1, 129, 300),
];

#[test]
fn binary_ops_mixed_orders() {
    for (b, r, c) in SIZES {
        for dtype in [DType::F32, DType::F64, DType::I64, DType::F16] {
            for (ta, tb) in [(true, false), (false, true), (true, true)] {
                let x = make(b, r, c, 0, ta, dtype);
                let y = make(b, r, c, 7, tb, dtype);
                let (xv, yv) = (x.to_f64_vec().unwrap(), y.to_f64_vec().unwrap());
                let want: Vec<f64> = xv.iter().zip(&yv).map(|(p, q)| p + q).collect();
                let what = format!("{dtype} [{b},{r},{c}] a.t={ta} b.t={tb}");
                let got = x.add(&y).unwrap();
                if dtype != DType::F16 {
                    assert_eq!(got.to_f64_vec().unwrap(), want, "add {what}");
                } else {
                    let h: Vec<f64> = want
                        .iter()
                        .map(|v| stride_core::half_round::f64_to_f16(*v).to_f64())
                        .collect();
                    assert_eq!(got.to_f64_vec().unwrap(), h, "add {what}");
                }
                // _out into a transposed output, and into a row-major one
                for to in [true, false] {
                    let out = make(b, r, c, 0, to, dtype).mul(0).unwrap();
                    let out = if to {
                        out.transpose(1, 2)
                            .unwrap()
                            .contiguous()
                            .unwrap()
                            .transpose(1, 2)
                            .unwrap()
                    } else {
                        out
                    };
                    x.sub_out(&y, &out).unwrap();
                    let w: Vec<f64> = xv.iter().zip(&yv).map(|(p, q)| p - q).collect();
                    if dtype != DType::F16 {
                        assert_eq!(out.to_f64_vec().unwrap(), w, "sub_out {what} out.t={to}");
                    }
                }
            }
        }
    }
}

#[test]
fn in_place_into_a_transposed_tensor() {
    for (b, r, c) in SIZES {
        let w = make(b, r, c, 3, true, DType::F32);
        let g = make(b, r, c, 1, false, DType::F32);
        let (wv, gv) = (w.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
        let v0 = w.version();
        w.mul_(&g).unwrap();
        assert_eq!(w.version(), v0 + 1);
        let want: Vec<f64> = wv
            .iter()
            .zip(&gv)
            .map(|(p, q)| (*p as f32 * *q as f32) as f64)
            .collect();
        assert_eq!(w.to_f64_vec().unwrap(), want, "[{b},{r},{c}]");
        // ternary, with a bool condition transposed the other way
        let cond = make(b, r, c, 0, false, DType::I64)
            .remainder(3)
            .unwrap()
            .eq(0)
            .unwrap();
        let t = make(b, r, c, 0, true, DType::F64);
        let e = make(b, r, c, 100, false, DType::F64);
        let got = cond.where_cond(&t, &e).unwrap().to_f64_vec().unwrap();
        let cv: Vec<bool> = cond.to_vec::<bool>().unwrap();
        let (tv, ev) = (t.to_f64_vec().unwrap(), e.to_f64_vec().unwrap());
        let want: Vec<f64> = (0..cv.len())
            .map(|i| if cv[i] { tv[i] } else { ev[i] })
            .collect();
        assert_eq!(got, want, "where [{b},{r},{c}]");
    }
}

#[test]
fn copies_and_unary_ops_of_transposed_views() {
    for (b, r, c) in SIZES {
        for dtype in [DType::F32, DType::F64, DType::I32, DType::Bool, DType::BF16] {
            let x = make(b, r, c, 0, true, DType::I64)
                .remainder(97)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let xv = x.to_f64_vec().unwrap();
            let y = x.contiguous().unwrap();
            assert!(y.is_contiguous());
            assert_eq!(
                y.to_f64_vec().unwrap(),
                xv,
                "contiguous {dtype} [{b},{r},{c}]"
            );
            // a cast while transposing
            let z = x.to_dtype(DType::F64).unwrap().contiguous().unwrap();
            assert_eq!(z.to_f64_vec().unwrap(), xv);
            // unary into a transposed output of another dtype order
            if dtype.is_float() {
                let out = y.zeros_like(stride_core::MemoryFormat::Contiguous).unwrap();
                let out_t = out
                    .transpose(1, 2)
                    .unwrap()
                    .contiguous()
                    .unwrap()
                    .transpose(1, 2)
                    .unwrap();
                y.neg_out(&out_t).unwrap();
                let want: Vec<f64> = xv.iter().map(|v| -v).collect();
                assert_eq!(
                    out_t.to_f64_vec().unwrap(),
                    want,
                    "neg_out {dtype} [{b},{r},{c}]"
                );
            }
        }
    }
}

/// In-place binary ops where the output is also the first operand (`x.op_(y)`) take a
/// two-operand walk (`cpu/elementwise.rs`, `map_self`): contiguous, transposed (tiled, with
/// the other operand staged), large enough to run in parallel, the other operand broadcast
/// (stride 0) or the output itself, float and integer.
#[test]
fn in_place_with_the_output_as_first_operand() {
    for (b, r, c) in [(1usize, 300usize, 400usize), (2, 65, 129), (1, 7, 3)] {
        for dtype in [DType::F32, DType::I32] {
            for wt in [false, true] {
                let what = format!("{dtype} [{b},{r},{c}] w.t={wt}");
                for gt in [false, true] {
                    let w = make(b, r, c, 3, wt, dtype);
                    let g = make(b, r, c, -5, gt, dtype);
                    let (wv, gv) = (w.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
                    w.sub_(&g).unwrap();
                    let want: Vec<f64> = wv.iter().zip(&gv).map(|(p, q)| p - q).collect();
                    assert_eq!(w.to_f64_vec().unwrap(), want, "sub_ {what} g.t={gt}");
                }
                // a broadcast row (stride 0 along r), and the output as its own other operand
                let w = make(b, r, c, 3, wt, dtype);
                let wv = w.to_f64_vec().unwrap();
                let row = Tensor::arange(0, c as i64, &CPU)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
                    .expand(&[b as i64, r as i64, c as i64])
                    .unwrap();
                w.add_(&row).unwrap();
                let want: Vec<f64> = wv
                    .iter()
                    .enumerate()
                    .map(|(i, p)| p + (i % c) as f64)
                    .collect();
                assert_eq!(w.to_f64_vec().unwrap(), want, "add_ broadcast {what}");
                let w2 = w.clone();
                w.mul_(&w2).unwrap();
                let sq: Vec<f64> = want
                    .iter()
                    .map(|&p| match dtype {
                        DType::F32 => (p as f32 * p as f32) as f64,
                        _ => (p as i32).wrapping_mul(p as i32) as f64,
                    })
                    .collect();
                assert_eq!(w.to_f64_vec().unwrap(), sq, "mul_ by itself {what}");
            }
        }
    }
}
