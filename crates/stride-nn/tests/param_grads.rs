//! The parameter gradients of the composed layers and the weight operands of the losses,
//! gradchecked (f64 central differences, the tightened default tolerance) through the
//! module's own `Parameter`s — the tensors an optimizer updates — in non-contiguous layouts,
//! with double backward by random projections for the normalisation layers.
//!
//! Each gradcheck's inputs *are* the module's parameter tensors (a `Parameter` is a handle to
//! its leaf), so the analytic gradient is the one `backward()` leaves in `.grad()` and the
//! finite differences perturb the parameter in place.

use stride_core::autograd::{gradcheck, gradgradcheck, GradcheckOptions};
use stride_core::{DType, Tensor};
use stride_nn::loss::{self, CrossEntropy, Reduction};
use stride_nn::{Embedding, Factory, LayerNorm, Linear, Module, Parameter, RmsNorm};

fn opts() -> GradcheckOptions {
    GradcheckOptions::default()
}

/// `n` distinct values in ±[0.25, 2] from a seed.
fn vals(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let m = 0.25 + 1.75 * ((s >> 11) as f64 / (1u64 << 53) as f64);
            let m = m + 1e-3 * i as f64;
            if (s >> 3) & 1 == 0 {
                m
            } else {
                -m
            }
        })
        .collect()
}

/// A leaf of `shape` whose layout is a stepped view (stride 2, offset 1) of a larger buffer.
fn stepped(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let big = Tensor::from_vec(vals(2 * n + 1, seed), [2 * n + 1]).unwrap();
    let t = big.as_strided(shape, &strides_of(shape, 2), 1).unwrap();
    assert!(!t.is_contiguous() || n <= 1);
    t
}

fn strides_of(shape: &[usize], step: usize) -> Vec<usize> {
    let mut st = vec![0; shape.len()];
    let mut acc = step;
    for d in (0..shape.len()).rev() {
        st[d] = acc;
        acc *= shape[d].max(1);
    }
    st
}

/// A leaf of `shape` stored transposed (column-major).
fn transposed(shape: [usize; 2], seed: u64) -> Tensor {
    Tensor::from_vec(vals(shape[0] * shape[1], seed), [shape[1], shape[0]])
        .unwrap()
        .t()
        .unwrap()
}

fn param(t: Tensor) -> Parameter {
    Parameter::new(t).unwrap()
}

#[test]
fn layer_norm_weight_and_bias() {
    let f64s = Factory::dtype(DType::F64);
    for normalized in [vec![4usize], vec![3, 4]] {
        let mut ln = LayerNorm::new_with(&normalized, 1e-5, true, true, &f64s).unwrap();
        ln.weight = Some(param(stepped(&normalized, 1)));
        ln.bias = Some(param(stepped(&normalized, 2)));
        // a common offset: the statistics must not lose the small deviations
        let x = Tensor::from_vec(vals(24, 3), [2, 3, 4])
            .unwrap()
            .add(10.0)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let w = ln.weight.as_ref().unwrap().tensor();
        let b = ln.bias.as_ref().unwrap().tensor();
        assert!(w.requires_grad() && b.requires_grad());
        gradcheck(
            |xs| ln.forward(&xs[0]),
            &[x.clone(), w.clone(), b.clone()],
            opts(),
        )
        .unwrap_or_else(|e| panic!("LayerNorm {normalized:?}: {e}"));
        gradgradcheck(|xs| ln.forward(&xs[0]), &[x, w, b], opts())
            .unwrap_or_else(|e| panic!("LayerNorm {normalized:?} (double backward): {e}"));
    }
}

#[test]
fn rms_norm_weight() {
    let mut n = RmsNorm::new_with(&[4], None, true, &Factory::dtype(DType::F64)).unwrap();
    n.weight = Some(param(stepped(&[4], 4)));
    let x = Tensor::from_vec(vals(12, 5), [3, 4])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let w = n.weight.as_ref().unwrap().tensor();
    gradcheck(|xs| n.forward(&xs[0]), &[x.clone(), w.clone()], opts()).unwrap();
    gradgradcheck(|xs| n.forward(&xs[0]), &[x, w], opts()).unwrap();
}

#[test]
fn linear_weight_and_bias_of_a_transposed_weight() {
    let lin = Linear::from_tensors(transposed([3, 4], 6), Some(stepped(&[3], 7))).unwrap();
    let x = Tensor::from_vec(vals(8, 8), [2, 4])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let w = lin.weight.tensor();
    let b = lin.bias.as_ref().unwrap().tensor();
    assert!(!w.is_contiguous());
    gradcheck(|xs| lin.forward(&xs[0]), &[x, w, b], opts()).unwrap();
}

#[test]
fn embedding_weight_and_padding_row() {
    let idx = Tensor::from_vec(vec![2i64, 0, 2, 4, 1, 0], [2, 3]).unwrap();
    let mut e = Embedding::new_with(5, 3, None, &Factory::dtype(DType::F64)).unwrap();
    e.weight = param(transposed([5, 3], 9));
    let w = e.weight.tensor();
    gradcheck(|_| e.forward(&idx), &[w.clone()], opts()).unwrap();
    // padding_idx = 0: its row gets no gradient (PyTorch), the other rows theirs
    let mut p = Embedding::new_with(5, 3, Some(0), &Factory::dtype(DType::F64)).unwrap();
    p.weight = param(transposed([5, 3], 9));
    let pw = p.weight.tensor();
    let g = |m: &Embedding, w: &Tensor| {
        let y = m.forward(&idx).unwrap();
        let v = Tensor::from_vec(vals(18, 10), [2, 3, 3]).unwrap();
        let r = stride_core::autograd::grad(&[&y], &[w], Some(&[&v]), Default::default()).unwrap();
        r[0].clone().unwrap().to_f64_vec().unwrap()
    };
    let (with_pad, without) = (g(&p, &pw), g(&e, &w));
    assert_eq!(&with_pad[..3], &[0.0; 3], "the padding row's gradient");
    assert!(without[..3].iter().any(|&v| v != 0.0), "row 0 is used");
    assert_eq!(&with_pad[3..], &without[3..], "the other rows");
}

#[test]
fn loss_weights() {
    let x = Tensor::from_vec(vals(12, 11), [4, 3])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let target = Tensor::from_vec(vec![2i64, 0, -100, 1], [4]).unwrap();
    let cw = stepped(&[3], 12)
        .abs()
        .unwrap()
        .detach()
        .requires_grad_(true)
        .unwrap();
    for (r, ls) in [
        (Reduction::Mean, 0.0),
        (Reduction::Sum, 0.1),
        (Reduction::None, 0.1),
        (Reduction::Mean, 0.2),
    ] {
        let ce = |xs: &[Tensor]| {
            let o = CrossEntropy {
                weight: Some(xs[1].clone()),
                reduction: r,
                label_smoothing: ls,
                ..CrossEntropy::default()
            };
            loss::cross_entropy(&xs[0], &target, &o)
        };
        gradcheck(ce, &[x.clone(), cw.clone()], opts())
            .unwrap_or_else(|e| panic!("cross_entropy {r:?} ls {ls}: {e}"));
        let nll = |xs: &[Tensor]| {
            let o = CrossEntropy {
                weight: Some(xs[1].clone()),
                reduction: r,
                ..CrossEntropy::default()
            };
            loss::nll_loss(&xs[0], &target, &o)
        };
        gradcheck(nll, &[x.clone(), cw.clone()], opts())
            .unwrap_or_else(|e| panic!("nll_loss {r:?}: {e}"));
    }
    // probability targets with a class weight
    let p = Tensor::from_vec(vals(12, 13), [4, 3])
        .unwrap()
        .abs()
        .unwrap()
        .softmax(1)
        .unwrap();
    let ce_p = |xs: &[Tensor]| {
        let o = CrossEntropy {
            weight: Some(xs[1].clone()),
            label_smoothing: 0.1,
            ..CrossEntropy::default()
        };
        loss::cross_entropy(&xs[0], &p, &o)
    };
    gradcheck(ce_p, &[x.clone(), cw.clone()], opts()).unwrap();
    // binary cross entropies: weight and pos_weight (transposed / stepped layouts)
    let prob = x.detach().sigmoid().unwrap().requires_grad_(true).unwrap();
    let y = Tensor::from_vec(vals(12, 14), [4, 3])
        .unwrap()
        .abs()
        .unwrap()
        .div(2.0)
        .unwrap()
        .clamp(0.0, 1.0)
        .unwrap();
    let bw = transposed([4, 3], 15)
        .abs()
        .unwrap()
        .detach()
        .requires_grad_(true)
        .unwrap();
    let pw = stepped(&[3], 16)
        .abs()
        .unwrap()
        .detach()
        .requires_grad_(true)
        .unwrap();
    for r in [Reduction::Mean, Reduction::Sum, Reduction::None] {
        gradcheck(
            |xs| loss::binary_cross_entropy(&xs[0], &y, Some(&xs[1]), r),
            &[prob.clone(), bw.clone()],
            opts(),
        )
        .unwrap_or_else(|e| panic!("binary_cross_entropy {r:?}: {e}"));
        gradcheck(
            |xs| loss::binary_cross_entropy_with_logits(&xs[0], &y, Some(&xs[1]), Some(&xs[2]), r),
            &[x.clone(), bw.clone(), pw.clone()],
            opts(),
        )
        .unwrap_or_else(|e| panic!("binary_cross_entropy_with_logits {r:?}: {e}"));
    }
}
