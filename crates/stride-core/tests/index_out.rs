//! The `_out` forms of the index ops (and of `sort`/`topk`): each equals its functional form when written into an
//! output of any layout (guards around the view untouched), into `self` itself, into a view
//! that partially aliases an input, and every error — wrong output shape or dtype, an output
//! whose elements share memory, an out-of-range index, bad arguments — leaves the output and
//! every input unchanged. `_out` forms refuse to run while an input requires grad.

mod idx_common;

use idx_common::*;
use stride_core::{DType, Device, Error, Operand, ScatterReduce, Tensor};

const CPU: Device = Device::Cpu;
/// What an output holds before the op (so unwritten elements show).
const POISON: f64 = -99.0;

/// Runs `call` (an `_out` form: writes into its argument and returns it) into a poisoned output in every layout and checks it against `want`.
fn check_out_layouts(
    name: &str,
    want: &Tensor,
    call: impl Fn(&Tensor) -> stride_core::Result<Tensor>,
) {
    let shape = want.shape().to_vec();
    let n: usize = shape.iter().product();
    let expected = f64s(want);
    for laid in layouts(&vec![POISON; n], &shape, want.dtype()) {
        let got = call(&laid.t).unwrap_or_else(|e| panic!("{name} into {}: {e}", laid.name));
        assert!(
            got.shares_storage_with(&laid.t) && got.layout() == laid.t.layout(),
            "{name} into {}: must return the output itself",
            laid.name
        );
        assert_same!(f64s(&laid.t), expected, "{name} into {}", laid.name);
        laid.guards_intact();
    }
    // the output is checked exactly: another dtype is an error that writes nothing
    let other = if want.dtype() == DType::F64 {
        DType::F32
    } else {
        DType::F64
    };
    let wrong = Tensor::full(shape.clone(), 1.0, other, &CPU).unwrap();
    expect_err(&[&wrong], &["dtype"], || call(&wrong));
    // so is another shape
    let mut bigger = shape.clone();
    match bigger.first_mut() {
        Some(s) => *s += 1,
        None => bigger.push(2),
    }
    let wrong = Tensor::full(bigger, 1.0, want.dtype(), &CPU).unwrap();
    expect_err(&[&wrong], &["shape"], || call(&wrong));
    // and an output whose elements share memory
    if n > 1 {
        let one = vec![1usize; shape.len()];
        let small = Tensor::full(one, 1.0, want.dtype(), &CPU).unwrap();
        let sizes: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
        let expanded = small.expand(&sizes).unwrap();
        expect_err(&[&small], &["share memory"], || call(&expanded));
    }
}

fn seq(n: usize, dtype: DType) -> Vec<f64> {
    (0..n)
        .map(|i| match dtype {
            DType::Bool => (i % 3 == 0) as u8 as f64,
            DType::U8 | DType::U32 => (i % 50) as f64,
            _ => i as f64 - 7.0,
        })
        .collect()
}

#[test]
fn gathers_out_equal_the_functional_forms_in_every_output_layout() {
    for dtype in [DType::F32, DType::I64, DType::F16, DType::U8, DType::Bool] {
        for idt in INDEX_DTYPES {
            let x = tensor(&seq(12, dtype), &[3, 4], dtype);
            let xt = tensor(&seq(12, dtype), &[4, 3], dtype).t().unwrap();
            for x in [&x, &xt] {
                let i = ints(&[3, 0, 3, 1, 2], &[5], idt);
                let want = x.index_select(1, &i).unwrap();
                check_out_layouts("index_select", &want, |o| x.index_select_out(1, &i, o));
                let gi = ints(&[2, 0, 1, 1, 0, 2], &[2, 3], idt);
                let want = x.gather(0, &gi).unwrap();
                check_out_layouts("gather", &want, |o| x.gather_out(0, &gi, o));
                let ti = if idt == DType::U32 {
                    ints(&[11, 0, 5, 5], &[2, 2], idt)
                } else {
                    ints(&[-1, 0, 5, -12], &[2, 2], idt)
                };
                let want = x.take(&ti).unwrap();
                check_out_layouts("take", &want, |o| x.take_out(&ti, o));
                let ii = if idt == DType::U32 {
                    ints(&[3, 0, 1, 1], &[2, 2], idt)
                } else {
                    ints(&[-1, 0, 3, -4], &[2, 2], idt)
                };
                let want = x.index(1, &ii).unwrap();
                check_out_layouts("index", &want, |o| x.index_out(1, &ii, o));
                let ei = ints(&[2, 2, 0, 1, 0, 0], &[3, 2], idt);
                let want = x.embedding(&ei).unwrap();
                check_out_layouts("embedding", &want, |o| x.embedding_out(&ei, o));
            }
            let x = tensor(&seq(12, dtype), &[3, 4], dtype);
            let m = tensor(&[1.0, 0.0, 0.0, 1.0], &[4], DType::Bool);
            let want = x.masked_select(&m).unwrap();
            check_out_layouts("masked_select", &want, |o| x.masked_select_out(&m, o));
        }
    }
    // 0-d operands
    let s = tensor(&[5.0], &[], DType::F32);
    let i0 = ints(&[0], &[], DType::I64);
    let out = tensor(&[0.0], &[], DType::F32);
    s.index_select_out(0, &i0, &out).unwrap();
    assert_eq!(f64s(&out), vec![5.0]);
    s.gather_out(0, &i0, &out).unwrap();
    assert_eq!(f64s(&out), vec![5.0]);
}

#[test]
fn scatters_out_equal_the_functional_forms_in_every_output_layout() {
    for dtype in [DType::F32, DType::F64, DType::I32, DType::BF16, DType::U8] {
        for idt in INDEX_DTYPES {
            let x = tensor(&seq(12, dtype), &[3, 4], dtype);
            let xt = tensor(&seq(12, dtype), &[4, 3], dtype).t().unwrap();
            let gi = ints(&[2, 0, 1, 1, 0, 2, 2, 2], &[2, 4], idt);
            let src = tensor(&seq(8, dtype), &[2, 4], dtype);
            let vi = ints(&[2, 0, 2], &[3], idt);
            let source = tensor(&seq(9, dtype), &[3, 3], dtype);
            let one = if dtype.is_float() {
                Operand::Scalar(2.5.into())
            } else {
                Operand::Scalar(3i64.into())
            };
            for x in [&x, &xt] {
                let before = f64s(x);
                let want = x.scatter(0, &gi, &src).unwrap();
                check_out_layouts("scatter", &want, |o| x.scatter_out(0, &gi, &src, o));
                let want = x.scatter_value(0, &gi, one).unwrap();
                check_out_layouts("scatter_value", &want, |o| {
                    x.scatter_value_out(0, &gi, one, o)
                });
                let want = x.scatter_add(0, &gi, &src).unwrap();
                check_out_layouts("scatter_add", &want, |o| x.scatter_add_out(0, &gi, &src, o));
                for red in [
                    ScatterReduce::Sum,
                    ScatterReduce::Prod,
                    ScatterReduce::Mean,
                    ScatterReduce::Amax,
                    ScatterReduce::Amin,
                ] {
                    for inc in [true, false] {
                        let want = x.scatter_reduce(0, &gi, &src, red, inc).unwrap();
                        check_out_layouts("scatter_reduce", &want, |o| {
                            x.scatter_reduce_out(0, &gi, &src, red, inc, o)
                        });
                    }
                }
                let alpha: stride_core::Scalar = if dtype.is_float() {
                    0.5.into()
                } else {
                    2i64.into()
                };
                let want = x.index_add(1, &vi, &source, alpha).unwrap();
                check_out_layouts("index_add", &want, |o| {
                    x.index_add_out(1, &vi, &source, alpha, o)
                });
                let want = x.index_copy(1, &vi, &source).unwrap();
                check_out_layouts("index_copy", &want, |o| {
                    x.index_copy_out(1, &vi, &source, o)
                });
                let want = x.index_fill(1, &vi, one).unwrap();
                check_out_layouts("index_fill", &want, |o| x.index_fill_out(1, &vi, one, o));
                assert_same!(f64s(x), before, "an _out form changed self");
            }
        }
        // masked writes: the output has the broadcast shape of self and mask
        let x = tensor(&seq(4, dtype), &[4], dtype);
        let m = tensor(
            &[1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0],
            &[2, 4],
            DType::Bool,
        );
        let v = if dtype.is_float() {
            Operand::Scalar((-1.5).into())
        } else {
            Operand::Scalar(9i64.into())
        };
        let want = x.masked_fill(&m, v).unwrap();
        check_out_layouts("masked_fill", &want, |o| x.masked_fill_out(&m, v, o));
        let source = tensor(&seq(6, dtype), &[2, 3], dtype);
        let want = x.masked_scatter(&m, &source).unwrap();
        check_out_layouts("masked_scatter", &want, |o| {
            x.masked_scatter_out(&m, &source, o)
        });
    }
}

#[test]
fn out_may_be_self_or_alias_an_input() {
    let vals: Vec<f64> = (0..9).map(|v| v as f64).collect();
    let i = ints(&[2, 0, 2], &[3], DType::I64);
    // a gather into its own input (or its transpose) reads every input element first
    for transposed in [false, true] {
        let x = tensor(&vals, &[3, 3], DType::F32);
        let want = f64s(&x.index_select(0, &i).unwrap());
        let out = if transposed {
            x.t().unwrap()
        } else {
            x.clone()
        };
        x.index_select_out(0, &i, &out).unwrap();
        assert_eq!(
            f64s(&out),
            want,
            "index_select into x (transposed: {transposed})"
        );
    }
    // an index that is the output: read as it was
    let idx = ints(&[1, 0, 1], &[3], DType::I64);
    let src = ints(&[10, 20], &[2], DType::I64);
    let want = f64s(&src.take(&idx).unwrap());
    src.take_out(&idx, &idx).unwrap();
    assert_eq!(f64s(&idx), want);

    // scatters into self itself: the in-place op
    let gi = ints(&[2, 0, 1], &[1, 3], DType::I32);
    let s = tensor(&[7.0, 8.0, 9.0], &[1, 3], DType::F32);
    let x = tensor(&vals, &[3, 3], DType::F32);
    let want = f64s(&x.scatter_add(0, &gi, &s).unwrap());
    x.scatter_add_out(0, &gi, &s, &x).unwrap();
    assert_eq!(f64s(&x), want);
    // into self's transpose: self is read as it was before the op
    let x = tensor(&vals, &[3, 3], DType::F32);
    let want = f64s(&x.scatter_add(0, &gi, &s).unwrap());
    let xt = x.t().unwrap();
    x.scatter_add_out(0, &gi, &s, &xt).unwrap();
    assert_eq!(f64s(&xt), want);
    // a source that is (a view of) the output: read as it was
    let x = tensor(&vals, &[3, 3], DType::F32);
    let out = tensor(&[0.0; 9], &[3, 3], DType::F32);
    let src = out.narrow(0, 0, 1).unwrap();
    let want = f64s(&x.scatter(0, &gi, &src.contiguous().unwrap()).unwrap());
    x.scatter_out(0, &gi, &src, &out).unwrap();
    assert_eq!(f64s(&out), want);
    // a mask that is the output (bool): read as it was
    let b = tensor(&[1.0, 0.0, 1.0, 0.0], &[4], DType::Bool);
    let m = tensor(&[0.0, 1.0, 1.0, 0.0], &[4], DType::Bool);
    let want = f64s(&b.masked_fill(&m, true).unwrap());
    b.masked_fill_out(&m, true, &m).unwrap();
    assert_eq!(f64s(&m), want);
    let src = tensor(&[1.0, 1.0], &[2], DType::Bool);
    let m = tensor(&[0.0, 1.0, 1.0, 0.0], &[4], DType::Bool);
    let want = f64s(&b.masked_scatter(&m, &src).unwrap());
    b.masked_scatter_out(&m, &src, &m).unwrap();
    assert_eq!(f64s(&m), want);
    // a 0-d value tensor that is a view of the output: read as it was
    let x = tensor(&vals, &[3, 3], DType::F32);
    let out = tensor(&[5.0; 9], &[3, 3], DType::F32);
    let v = out.select(0, 0).unwrap().select(0, 0).unwrap();
    let want = f64s(&x.index_fill(0, &i, 5.0).unwrap());
    x.index_fill_out(0, &i, &v, &out).unwrap();
    assert_eq!(f64s(&out), want);
    // and the same through the in-place form (used to be an internal error)
    let x = tensor(&vals, &[3, 3], DType::F32);
    let v = x.select(0, 1).unwrap().select(0, 1).unwrap();
    x.index_fill_(0, &ints(&[0], &[1], DType::I64), &v).unwrap();
    assert_eq!(&f64s(&x)[..3], &[4.0, 4.0, 4.0]);
}

#[test]
fn errors_leave_the_output_unchanged() {
    let vals: Vec<f64> = (0..12).map(|v| v as f64).collect();
    let x = tensor(&vals, &[3, 4], DType::F32);
    for idt in INDEX_DTYPES {
        let out = tensor(&[POISON; 12], &[3, 4], DType::F32);
        let out_t = tensor(&[POISON; 12], &[4, 3], DType::F32).t().unwrap();
        for o in [&out, &out_t] {
            // out-of-range indices: the error names the index, the dim and its size
            let bad = ints(&[0, 3], &[2, 1], idt);
            let src = tensor(&[1.0, 2.0], &[2, 1], DType::F32);
            for (name, r) in [
                ("scatter", x.scatter_out(0, &bad, &src, o)),
                ("scatter_add", x.scatter_add_out(0, &bad, &src, o)),
                ("scatter", x.scatter_value_out(0, &bad, 1.0, o)),
                (
                    "scatter_reduce",
                    x.scatter_reduce_out(0, &bad, &src, ScatterReduce::Mean, false, o),
                ),
            ] {
                let e = r.expect_err(name);
                assert!(
                    matches!(
                        e,
                        Error::IndexOutOfRange {
                            index: 3,
                            dim: 0,
                            size: 3,
                            ..
                        }
                    ),
                    "{name}: {e}"
                );
            }
            let bad = ints(&[1, 5], &[2], idt);
            let source = tensor(&[1.0; 6], &[3, 2], DType::F32);
            expect_err(&[o, &x], &["index_add", "5", "size 4"], || {
                x.index_add_out(1, &bad, &source, 1.0, o)
            });
            expect_err(&[o, &x], &["index_copy", "5"], || {
                x.index_copy_out(1, &bad, &source, o)
            });
            expect_err(&[o, &x], &["index_fill", "5"], || {
                x.index_fill_out(1, &bad, 0.0, o)
            });
            // out-of-range gathers into a right-shaped output
            let g = tensor(&[POISON; 6], &[3, 2], DType::F32);
            expect_err(&[&g, &x], &["index_select", "5"], || {
                x.index_select_out(1, &bad, &g)
            });
            expect_err(&[&g, &x], &["gather", "3"], || {
                x.gather_out(0, &ints(&[0, 1, 2, 3, 0, 0], &[3, 2], idt), &g)
            });
            let e2 = tensor(&[POISON; 8], &[2, 4], DType::F32);
            expect_err(&[&e2, &x], &["embedding", "3"], || {
                x.embedding_out(&ints(&[0, 3], &[2], idt), &e2)
            });
            let t2 = tensor(&[POISON; 2], &[2], DType::F32);
            expect_err(&[&t2, &x], &["take", "12"], || {
                x.take_out(&ints(&[0, 12], &[2], idt), &t2)
            });
            expect_err(&[&e2, &x], &["index", "4"], || {
                x.index_out(0, &ints(&[0, 4], &[2], idt), &e2)
            });
        }
    }
    // bad arguments: checked before the copy of self into out
    let out = tensor(&[POISON; 12], &[3, 4], DType::F32);
    let i = ints(&[0, 1], &[2, 1], DType::I64);
    let src_f64 = tensor(&[1.0, 2.0], &[2, 1], DType::F64);
    expect_err(&[&out, &x], &["scatter_add", "dtype"], || {
        x.scatter_add_out(0, &i, &src_f64, &out)
    });
    let src = tensor(&[1.0, 2.0], &[2, 1], DType::F32);
    expect_err(&[&out, &x], &["scatter", "dim"], || {
        x.scatter_out(2, &i, &src, &out)
    });
    let xi = tensor(&vals, &[3, 4], DType::I32);
    let outi = tensor(&[POISON; 12], &[3, 4], DType::I32);
    let srci = tensor(&[1.0; 8], &[2, 4], DType::I32);
    expect_err(&[&outi, &xi], &["index_add", "alpha"], || {
        xi.index_add_out(0, &ints(&[0, 1], &[2], DType::I64), &srci, 0.5, &outi)
    });
    let m = tensor(&[1.0, 1.0, 0.0, 1.0], &[4], DType::Bool);
    let short = tensor(&[1.0, 2.0], &[2], DType::F32);
    let e = expect_err(&[&out, &x, &m], &["masked_scatter", "9", "2"], || {
        x.masked_scatter_out(&m, &short, &out)
    });
    assert!(e.to_string().contains("source"), "{e}");
    // masked_select's output needs exactly the count of true values
    let wrong = tensor(&[POISON; 8], &[8], DType::F32);
    expect_err(&[&wrong, &x], &["masked_select", "shape"], || {
        x.masked_select_out(&m, &wrong)
    });
    // a result the output can't take without a cast: PyTorch's rule for index ops
    let out_f64 = tensor(&[POISON; 12], &[3, 4], DType::F64);
    expect_err(&[&out_f64, &x], &["dtype"], || {
        x.masked_fill_out(&m, 0.0, &out_f64)
    });
    expect_err(&[&out_f64, &x], &["dtype"], || {
        x.index_fill_out(0, &ints(&[0], &[1], DType::I64), 0.0, &out_f64)
    });
}

#[test]
fn out_forms_refuse_recording() {
    let x = Tensor::ones([3, 2], DType::F32, &CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let i = ints(&[0, 2], &[2], DType::I64);
    let out = tensor(&[POISON; 4], &[2, 2], DType::F32);
    expect_err(&[&out], &["index_select", "_out"], || {
        x.index_select_out(0, &i, &out)
    });
    let out3 = tensor(&[POISON; 6], &[3, 2], DType::F32);
    let src = Tensor::ones([2, 2], DType::F32, &CPU).unwrap();
    expect_err(&[&out3], &["index_add", "_out"], || {
        x.index_add_out(0, &i, &src, 1.0, &out3)
    });
    let m = tensor(&[1.0, 0.0], &[2], DType::Bool);
    expect_err(&[&out3], &["masked_fill", "_out"], || {
        x.masked_fill_out(&m, 0.0, &out3)
    });
    // fine under no_grad
    let _g = stride_core::autograd::no_grad();
    x.index_select_out(0, &i, &out).unwrap();
    assert_eq!(f64s(&out), vec![1.0; 4]);
}

#[test]
fn large_row_gathers_prefetch_and_split_correctly() {
    // large outputs (split into many row tasks, source rows prefetched ahead), rows of odd
    // byte lengths so that they start at every alignment, outputs at an odd offset; a
    // per-element gather over a source large enough to be prefetched
    let mut rng = Rng(23);
    for (dtype, n, m, k) in [
        (DType::F32, 3000usize, 257usize, 17000usize),
        (DType::U8, 2000, 1001, 17000),
    ] {
        let x: Vec<f64> = (0..n * m).map(|i| (i % 97) as f64).collect();
        let idx: Vec<i64> = (0..k).map(|_| rng.below(n) as i64).collect();
        let want: Vec<f64> = idx
            .iter()
            .flat_map(|&r| x[r as usize * m..(r as usize + 1) * m].iter().copied())
            .collect();
        let xt = tensor(&x, &[n, m], dtype);
        let it = ints(&idx, &[k], DType::I64);
        assert_same!(f64s(&xt.index_select(0, &it).unwrap()), want, "{dtype}");
        // into an output that starts 3 elements into its buffer
        let buf = Tensor::zeros([k * m + 3], dtype, &CPU).unwrap();
        let out = buf
            .narrow(0, 3, k * m)
            .unwrap()
            .view(&[k as i64, m as i64])
            .unwrap();
        xt.index_select_out(0, &it, &out).unwrap();
        assert_same!(f64s(&out), want, "{dtype} out at offset 3");
        assert_eq!(&f64s(&buf)[..3], &[0.0; 3], "{dtype}: before the output");
        // an expanded gather index (rows) and a transposed output (not rows: element path)
        let e = it
            .unsqueeze(1)
            .unwrap()
            .expand(&[k as i64, m as i64])
            .unwrap();
        assert_same!(f64s(&xt.gather(0, &e).unwrap()), want, "{dtype} gather");
        let outt = Tensor::zeros([m, k], dtype, &CPU).unwrap().t().unwrap();
        xt.gather_out(0, &e, &outt).unwrap();
        assert_same!(f64s(&outt), want, "{dtype} gather into a transposed output");
    }
    // take: one random element per position from a 4 MiB source
    let n = 1 << 20;
    let x: Vec<f64> = (0..n).map(|i| (i % 1000) as f64).collect();
    let idx: Vec<i64> = (0..300_000)
        .map(|_| rng.below(n) as i64 - (n as i64 / 2))
        .collect();
    let want: Vec<f64> = idx
        .iter()
        .map(|&i| {
            x[if i < 0 {
                (i + n as i64) as usize
            } else {
                i as usize
            }]
        })
        .collect();
    let got = tensor(&x, &[n], DType::F32)
        .take(&ints(&idx, &[300_000], DType::I32))
        .unwrap();
    assert_same!(f64s(&got), want, "take");
}

#[test]
fn sort_and_topk_out_write_both_outputs_through_their_layouts() {
    let vals = [
        3.0, -1.0, 2.0, 2.0, 0.5, 7.0, -4.0, 1.0, 0.0, 5.0, 6.0, -2.0,
    ];
    for dtype in [DType::F32, DType::I64, DType::BF16] {
        let x = tensor(&vals, &[3, 4], dtype);
        for (dim, desc) in [(1i64, false), (0, true)] {
            let (wv, wi) = x.sort(dim, desc, true).unwrap();
            for (lv, li) in layouts(&[POISON; 12], &[3, 4], dtype)
                .into_iter()
                .zip(layouts(&[POISON; 12], &[3, 4], DType::I64))
            {
                let (v, i) = x.sort_out(dim, desc, true, &lv.t, &li.t).unwrap();
                assert!(v.shares_storage_with(&lv.t) && i.shares_storage_with(&li.t));
                assert_eq!(f64s(&lv.t), f64s(&wv), "sort values into {}", lv.name);
                assert_eq!(i64s(&li.t), i64s(&wi), "sort indices into {}", li.name);
                lv.guards_intact();
                li.guards_intact();
            }
        }
        let (wv, wi) = x.topk(2, 1, true, true).unwrap();
        let v = tensor(&[POISON; 6], &[2, 3], dtype).t().unwrap();
        let i = tensor(&[POISON; 6], &[3, 2], DType::I64);
        x.topk_out(2, 1, true, true, &v, &i).unwrap();
        assert_eq!((f64s(&v), i64s(&i)), (f64s(&wv), i64s(&wi)));
    }
    // an i64 input sorted into itself (values) and a view of it (indices is separate)
    let x = tensor(&vals, &[12], DType::I64);
    let (wv, wi) = x.sort(0, false, true).unwrap();
    let i = tensor(&[0.0; 12], &[12], DType::I64);
    x.sort_out(0, false, true, &x, &i).unwrap();
    assert_eq!((f64s(&x), i64s(&i)), (f64s(&wv), i64s(&wi)));

    // errors: nothing written
    let x = tensor(&vals, &[3, 4], DType::F32);
    let v = tensor(&[POISON; 12], &[3, 4], DType::F32);
    let i = tensor(&[POISON; 12], &[3, 4], DType::I64);
    let i32_out = tensor(&[POISON; 12], &[3, 4], DType::I32);
    expect_err(&[&v, &i32_out], &["sort", "dtype"], || {
        x.sort_out(1, false, true, &v, &i32_out)
    });
    let f64_out = tensor(&[POISON; 12], &[3, 4], DType::F64);
    expect_err(&[&f64_out, &i], &["sort", "dtype"], || {
        x.sort_out(1, false, true, &f64_out, &i)
    });
    let small = tensor(&[POISON; 6], &[3, 2], DType::F32);
    expect_err(&[&small, &i], &["sort", "shape"], || {
        x.sort_out(1, false, true, &small, &i)
    });
    let iv = tensor(&[POISON; 6], &[3, 2], DType::I64);
    expect_err(&[&small, &iv], &["topk", "k (5)"], || {
        x.topk_out(5, 1, true, true, &small, &iv)
    });
    let both = tensor(&[POISON; 24], &[24], DType::I64);
    let xi = tensor(&vals, &[3, 4], DType::I64);
    let (a, b) = (
        both.narrow(0, 0, 12).unwrap().view(&[3, 4]).unwrap(),
        both.narrow(0, 12, 12).unwrap().view(&[3, 4]).unwrap(),
    );
    expect_err(&[&both], &["sort", "share storage"], || {
        xi.sort_out(1, false, true, &a, &b)
    });
}

#[test]
fn row_gathers_from_strided_sources_step_the_source_per_row() {
    // rows whose source row moves with the output row (a transposed self indexed along its
    // last dim by one index: a 2-D plan of whole rows whose source stride is not 0)
    let vals: Vec<f64> = (0..24).map(|v| v as f64).collect();
    for dtype in [DType::F32, DType::BF16, DType::U8] {
        let c = tensor(&vals, &[2, 4, 3], dtype);
        let x = c.transpose(1, 2).unwrap(); // [2, 3, 4], strides [12, 1, 3]
        let xc = x.contiguous().unwrap();
        for idx in [ints(&[2], &[], DType::I64), ints(&[3], &[1], DType::I32)] {
            let want = f64s(&xc.index_select(-1, &idx).unwrap());
            assert_eq!(f64s(&x.index_select(-1, &idx).unwrap()), want, "{dtype}");
            let out = tensor(&[POISON; 6], &[2, 3, 1], dtype);
            x.index_select_out(-1, &idx, &out).unwrap();
            assert_eq!(f64s(&out), want, "{dtype} _out");
            let gi = idx.reshape(&[1, 1, 1]).unwrap().expand(&[2, 3, 1]).unwrap();
            assert_eq!(f64s(&x.gather(-1, &gi).unwrap()), want, "{dtype} gather");
        }
    }
}

#[test]
fn gathers_into_outputs_past_the_streaming_threshold() {
    // outputs of 64 MiB and more are written with streaming stores where a row starts on a
    // 16-byte boundary and is a whole number of 16-byte units; everywhere else with ordinary
    // stores. Both kinds, and a materialised gather index whose runs are (almost all) one
    // row, must write exactly the rows the index picks.
    let (n, m, k) = (1000usize, 64usize, 270_000usize); // 270k rows x 256 B = 69 MB
    let mut rng = Rng(29);
    let x: Vec<f32> = (0..n * m).map(|i| i as f32).collect();
    let xt = Tensor::from_vec(x.clone(), [n, m]).unwrap();
    let idx: Vec<i64> = (0..k).map(|_| rng.below(n) as i64).collect();
    let want = |r: usize, c: usize| x[idx[r] as usize * m + c];
    let check = |got: &Tensor, what: &str| {
        let g = got.to_vec::<f32>().unwrap();
        assert_eq!(g.len(), k * m, "{what}");
        for (p, &v) in g.iter().enumerate() {
            let (r, c) = (p / m, p % m);
            assert_eq!(v, want(r, c), "{what}: row {r}, column {c}");
        }
    };
    let it = Tensor::from_vec(idx.clone(), [k]).unwrap();
    check(&xt.index_select(0, &it).unwrap(), "index_select, fresh");
    // outputs 1 element (unaligned rows) and 4 elements (16 bytes) into their buffers
    for skip in [1usize, 4] {
        let buf = Tensor::full([k * m + skip], -1.0, DType::F32, &CPU).unwrap();
        let out = buf
            .narrow(0, skip as i64, k * m)
            .unwrap()
            .view(&[k as i64, m as i64])
            .unwrap();
        xt.index_select_out(0, &it, &out).unwrap();
        check(&out, &format!("index_select_out at offset {skip}"));
        let head = buf.narrow(0, 0, skip).unwrap().to_vec::<f32>().unwrap();
        assert!(head.iter().all(|&v| v == -1.0), "before the output");
    }
    // a materialised index: one row of it disagrees along the run, so goes element by element
    let mut mat: Vec<i64> = idx
        .iter()
        .flat_map(|&r| std::iter::repeat_n(r, m))
        .collect();
    mat[5 * m + 7] = 0;
    let got = xt
        .gather(0, &Tensor::from_vec(mat, [k, m]).unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for (p, &v) in got.iter().enumerate() {
        let (r, c) = (p / m, p % m);
        let w = if (r, c) == (5, 7) { x[c] } else { want(r, c) };
        assert_eq!(v, w, "materialised gather: row {r}, column {c}");
    }
}

#[test]
fn materialised_gather_indices_constant_along_rows_are_read_once() {
    // an index of at least 64 Ki elements is validated in one pass that also notices when it
    // is constant along its last dim; the gather then reads one value per row. Every index
    // dtype and layout, a row that varies late, negative (wrapping) values for take, and the
    // error for the first bad value in logical order must all come out as from the plain walk.
    let (n, m, k) = (500usize, 16usize, 6000usize); // 96k index elements
    let mut rng = Rng(31);
    let x: Vec<f32> = (0..n * m).map(|i| i as f32).collect();
    let xt = Tensor::from_vec(x.clone(), [n, m]).unwrap();
    let rows: Vec<i64> = (0..k).map(|_| rng.below(n) as i64).collect();
    let mat: Vec<i64> = rows
        .iter()
        .flat_map(|&r| std::iter::repeat_n(r, m))
        .collect();
    let check = |got: &Tensor, idx: &[i64], what: &str| {
        let g = got.to_vec::<f32>().unwrap();
        assert_eq!(g.len(), k * m, "{what}");
        for (p, &v) in g.iter().enumerate() {
            let (r, c) = (p / m, p % m);
            assert_eq!(v, x[idx[p] as usize * m + c], "{what}: row {r}, column {c}");
        }
    };
    let as_dtype = |v: &[i64], dt: DType| {
        Tensor::from_vec(v.to_vec(), [k, m])
            .unwrap()
            .to_dtype(dt)
            .unwrap()
    };
    for dt in [DType::I64, DType::I32, DType::U32] {
        let idx = as_dtype(&mat, dt);
        check(
            &xt.gather(0, &idx).unwrap(),
            &mat,
            &format!("{dt} contiguous"),
        );
        // the same index stored transposed: rows are strided along the last dim
        let idx_t = as_dtype(&mat, dt)
            .t()
            .unwrap()
            .contiguous()
            .unwrap()
            .t()
            .unwrap();
        check(
            &xt.gather(0, &idx_t).unwrap(),
            &mat,
            &format!("{dt} transposed"),
        );
        // into a transposed output, which takes the general walk
        let out = Tensor::full([m, k], -1.0, DType::F32, &CPU)
            .unwrap()
            .t()
            .unwrap();
        xt.gather_out(0, &idx, &out).unwrap();
        check(&out, &mat, &format!("{dt} into a transposed output"));
        // one row near the end varies: the gather falls back to the element walk
        let mut varies = mat.clone();
        varies[(k - 3) * m + 5] = 7;
        check(
            &xt.gather(0, &as_dtype(&varies, dt)).unwrap(),
            &varies,
            &format!("{dt} with a varying row"),
        );
    }
    // an index whose rows are constant but whose outer dims are permuted (gather along dim 1
    // of a [2, k/2, m] source through a [k/2, 2, m] index permuted to [2, k/2, m])
    let x3 = xt.narrow(0, 0, 2 * (n / 2)).unwrap();
    let x3 = x3.reshape(&[2, (n / 2) as i64, m as i64]).unwrap();
    let half: Vec<i64> = (0..k).map(|_| rng.below(n / 2) as i64).collect();
    let stored: Vec<i64> = half
        .iter()
        .flat_map(|&r| std::iter::repeat_n(r, m))
        .collect();
    let idx3 = Tensor::from_vec(stored.clone(), [k / 2, 2, m])
        .unwrap()
        .permute(&[1, 0, 2])
        .unwrap();
    let got = x3.gather(1, &idx3).unwrap().to_vec::<f32>().unwrap();
    for (p, &v) in got.iter().enumerate() {
        let (b, r, c) = (p / (k / 2 * m), p / m % (k / 2), p % m);
        let i = half[r * 2 + b] as usize;
        assert_eq!(
            v,
            x[(b * (n / 2) + i) * m + c],
            "permuted index at {b},{r},{c}"
        );
    }
    // take wraps negative indices: rows of -1 read the last element
    let neg: Vec<i64> = mat
        .iter()
        .enumerate()
        .map(|(p, &v)| if p / m % 2 == 0 { v } else { -1 - v })
        .collect();
    let flat = xt.reshape(&[-1]).unwrap().to_vec::<f32>().unwrap();
    let got = xt
        .take(&Tensor::from_vec(neg.clone(), [k, m]).unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for (p, (&v, &i)) in got.iter().zip(&neg).enumerate() {
        let j = if i < 0 { flat.len() as i64 + i } else { i } as usize;
        assert_eq!(v, flat[j], "take at {p}");
    }
    // bad values in both halves (which two threads scan): the error names the first in
    // logical order, and nothing is written
    let mut bad = mat.clone();
    bad[(k / 3) * m + 9] = n as i64 + 5;
    bad[(k - 2) * m] = n as i64 + 9;
    bad[(k - 1) * m + 3] = -2;
    let out = Tensor::full([k, m], -1.0, DType::F32, &CPU).unwrap();
    for dt in [DType::I64, DType::I32] {
        let e = xt
            .gather_out(0, &as_dtype(&bad, dt), &out)
            .expect_err("bad index");
        assert!(
            matches!(e, Error::IndexOutOfRange { index, dim: 0, size, .. }
                if index == n as i64 + 5 && size == n),
            "{dt}: {e}"
        );
        let o = out.to_vec::<f32>().unwrap();
        assert!(o.iter().all(|&v| v == -1.0), "{dt}: the output was written");
    }
}

#[test]
fn materialised_scatter_indices_constant_along_rows_match_expanded_ones() {
    // a large materialised index that is constant along its last dim is read as one value per
    // row, which lets scatter use its row mode (destination rows split by index value). Sums
    // are checked against a hand-written reference, the other reductions against the same
    // index passed expanded (stride 0), which always took the row mode.
    let (n, m, k) = (700usize, 16usize, 6000usize); // 96k index elements
    let mut rng = Rng(37);
    let rows: Vec<i64> = (0..k).map(|_| rng.below(n) as i64).collect();
    let mat: Vec<i64> = rows
        .iter()
        .flat_map(|&r| std::iter::repeat_n(r, m))
        .collect();
    // halves and small integers: every sum is exact in f32, whatever the order
    let src: Vec<f32> = (0..k * m).map(|i| (i % 97) as f32 * 0.5).collect();
    let base: Vec<f32> = (0..n * m).map(|i| (i % 1000) as f32).collect();
    let srct = Tensor::from_vec(src.clone(), [k, m]).unwrap();
    let base_t = Tensor::from_vec(base.clone(), [n, m]).unwrap();
    let mut want = base.clone();
    for r in 0..k {
        for c in 0..m {
            want[rows[r] as usize * m + c] += src[r * m + c];
        }
    }
    for dt in [DType::I64, DType::I32, DType::U32] {
        let idx = Tensor::from_vec(mat.clone(), [k, m])
            .unwrap()
            .to_dtype(dt)
            .unwrap();
        let acc = base_t.clone_tensor().unwrap();
        acc.scatter_add_(0, &idx, &srct).unwrap();
        assert_eq!(acc.to_vec::<f32>().unwrap(), want, "{dt}: scatter_add_");
        // into a transposed destination
        let acc_t = base_t.t().unwrap().contiguous().unwrap().t().unwrap();
        acc_t.scatter_add_(0, &idx, &srct).unwrap();
        assert_eq!(acc_t.to_vec::<f32>().unwrap(), want, "{dt}: transposed");
        let exp = Tensor::from_vec(rows.clone(), [k, 1])
            .unwrap()
            .to_dtype(dt)
            .unwrap()
            .expand(&[k as i64, m as i64])
            .unwrap();
        for reduce in [
            ScatterReduce::Sum,
            ScatterReduce::Prod,
            ScatterReduce::Mean,
            ScatterReduce::Amax,
            ScatterReduce::Amin,
        ] {
            for include_self in [true, false] {
                let got = base_t
                    .scatter_reduce(0, &idx, &srct, reduce, include_self)
                    .unwrap();
                let exp_got = base_t
                    .scatter_reduce(0, &exp, &srct, reduce, include_self)
                    .unwrap();
                assert_eq!(
                    got.to_vec::<f32>().unwrap(),
                    exp_got.to_vec::<f32>().unwrap(),
                    "{dt}: {reduce:?}, include_self {include_self}"
                );
            }
        }
        let got = base_t.scatter(0, &idx, &srct).unwrap();
        let exp_got = base_t.scatter(0, &exp, &srct).unwrap();
        assert_eq!(
            got.to_vec::<f32>().unwrap(),
            exp_got.to_vec::<f32>().unwrap(),
            "{dt}: scatter"
        );
    }
    // one row near the end varies: the general walk, still exact
    let mut varies = mat.clone();
    varies[(k - 3) * m + 5] = 0;
    let mut want_v = base.clone();
    for (p, &v) in varies.iter().enumerate() {
        want_v[v as usize * m + p % m] += src[p];
    }
    let acc = base_t.clone_tensor().unwrap();
    acc.scatter_add_(0, &Tensor::from_vec(varies, [k, m]).unwrap(), &srct)
        .unwrap();
    assert_eq!(acc.to_vec::<f32>().unwrap(), want_v, "a varying row");
    // a bad value: the error names it and the destination is unchanged
    let mut bad = mat.clone();
    bad[(k / 3) * m + 2] = -1;
    let acc = base_t.clone_tensor().unwrap();
    let e = acc
        .scatter_add_(0, &Tensor::from_vec(bad, [k, m]).unwrap(), &srct)
        .expect_err("bad index");
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                index: -1,
                dim: 0,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        acc.to_vec::<f32>().unwrap(),
        base,
        "written before the error"
    );
}
