//! Layers: forward against hand-computed values, gradients by gradcheck (f64), init bounds,
//! dropout reproducibility.

use stride_core::autograd::{gradcheck, GradcheckOptions};
use stride_core::{manual_seed, DType, Device, Generator, Tensor};
use stride_nn::{
    init, mlp, Activation, Dropout, Embedding, Factory, Gelu, LayerNorm, LeakyRelu, Linear, Module,
    Relu, RmsNorm, Sigmoid, Silu, Tanh,
};

/// Several tests here draw from the process-wide default generator (layer initialisation,
/// `manual_seed` + dropout) and two assert that a seed reproduces a draw, so the tests of this
/// file take turns: a draw by one test between another's `manual_seed` and its draw would
/// make that test fail at random.
fn global_rng_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn t64(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape.to_vec()).unwrap()
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "[{i}] {x} vs {y}");
    }
}

fn opts() -> GradcheckOptions {
    GradcheckOptions::default()
}

#[test]
fn linear_forward_by_hand_and_gradcheck() {
    let _rng = global_rng_turn();
    let w = t64(&[1.0, 2.0, 3.0, -1.0, 0.5, 0.0], &[2, 3]);
    let b = t64(&[0.5, -0.5], &[2]);
    let lin = Linear::from_tensors(w, Some(b)).unwrap();
    let x = t64(&[1.0, 1.0, 1.0, 2.0, 0.0, -1.0], &[2, 3]);
    let y = lin.forward(&x).unwrap().to_f64_vec().unwrap();
    // row 0: [1+2+3+0.5, -1+0.5+0-0.5]; row 1: [2-3+0.5, -2-0.5]
    assert_eq!(y, vec![6.5, -1.0, -0.5, -2.5]);
    // gradients w.r.t. input, weight (transposed layout) and bias
    let w = t64(&[0.3, -0.2, 0.8, 1.1, -0.7, 0.4], &[3, 2])
        .t()
        .unwrap()
        .clone_tensor()
        .unwrap();
    let xin = t64(&[0.1, 0.2, -0.3, 0.5, 0.9, -1.2], &[2, 3])
        .requires_grad_(true)
        .unwrap();
    let wb = w.requires_grad_(true).unwrap();
    let bb = t64(&[0.1, 0.2], &[2]).requires_grad_(true).unwrap();
    gradcheck(
        |xs| {
            let l = Linear::from_tensors(xs[1].clone(), Some(xs[2].clone()))?;
            // a fresh Linear shares the leaves' storage; the gradient flows to xs via it
            let y = xs[0].matmul(&xs[1].t()?)?.add(&xs[2])?;
            let y2 = l.forward(&xs[0].detach())?;
            assert_eq!(y.to_f64_vec()?, y2.to_f64_vec()?);
            y.tanh()
        },
        &[xin, wb, bb],
        opts(),
    )
    .unwrap();
}

#[test]
fn linear_gradients_reach_its_parameters() {
    let _rng = global_rng_turn();
    let lin = Linear::new_with(3, 2, true, &Factory::dtype(DType::F64)).unwrap();
    let x = t64(&[1.0, 2.0, 3.0], &[1, 3]);
    lin.forward(&x).unwrap().sum().unwrap().backward().unwrap();
    assert_eq!(
        lin.weight.grad().unwrap().to_f64_vec().unwrap(),
        vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    );
    assert_eq!(
        lin.bias
            .as_ref()
            .unwrap()
            .grad()
            .unwrap()
            .to_f64_vec()
            .unwrap(),
        vec![1.0, 1.0]
    );
}

#[test]
fn linear_init_follows_pytorch_bounds_and_seed() {
    let _rng = global_rng_turn();
    let g = Generator::new(7);
    let f = Factory {
        generator: Some(&g),
        ..Factory::default()
    };
    let lin = Linear::new_with(50, 40, true, &f).unwrap();
    let bound = 1.0 / 50f64.sqrt();
    let w = lin.weight.tensor().to_f64_vec().unwrap();
    assert!(w.iter().all(|v| v.abs() <= bound));
    assert!(w.iter().any(|v| v.abs() > 0.9 * bound), "spans the range");
    assert!(lin
        .bias
        .as_ref()
        .unwrap()
        .tensor()
        .to_f64_vec()
        .unwrap()
        .iter()
        .all(|v| v.abs() <= bound));
    // reproducible from the seed
    let g2 = Generator::new(7);
    let lin2 = Linear::new_with(
        50,
        40,
        true,
        &Factory {
            generator: Some(&g2),
            ..Factory::default()
        },
    )
    .unwrap();
    assert_eq!(w, lin2.weight.tensor().to_f64_vec().unwrap());
    manual_seed(3);
    let a = Linear::new(4, 4, true)
        .unwrap()
        .weight
        .tensor()
        .to_f64_vec()
        .unwrap();
    manual_seed(3);
    let b = Linear::new(4, 4, true)
        .unwrap()
        .weight
        .tensor()
        .to_f64_vec()
        .unwrap();
    assert_eq!(a, b);
}

#[test]
fn embedding_forward_padding_and_gradients() {
    let _rng = global_rng_turn();
    let emb = Embedding::new_with(4, 2, Some(1), &Factory::dtype(DType::F64)).unwrap();
    let w = emb.weight.tensor().to_f64_vec().unwrap();
    assert_eq!(&w[2..4], &[0.0, 0.0], "padding row zeroed");
    let idx = Tensor::from_vec(vec![3i64, 1, 0, 3], [2, 2]).unwrap();
    let y = emb.forward(&idx).unwrap();
    assert_eq!(y.shape(), &[2, 2, 2]);
    let yv = y.to_f64_vec().unwrap();
    assert_eq!(yv, [&w[6..8], &w[2..4], &w[0..2], &w[6..8]].concat());
    // gradient: rows accumulate, the padding row gets none
    y.mul(&t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 2, 2]))
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    let g = emb.weight.grad().unwrap().to_f64_vec().unwrap();
    assert_eq!(g, vec![5.0, 6.0, 0.0, 0.0, 0.0, 0.0, 1.0 + 7.0, 2.0 + 8.0]);
    // out of range: an error
    assert!(emb
        .forward(&Tensor::from_vec(vec![4i64], [1]).unwrap())
        .is_err());
    assert!(Embedding::new(3, 2, Some(3)).is_err());
}

#[test]
fn layer_norm_by_hand_and_gradcheck() {
    let _rng = global_rng_turn();
    let ln = LayerNorm::new_with(&[3], 0.0, true, true, &Factory::dtype(DType::F64)).unwrap();
    let x = t64(&[1.0, 2.0, 3.0, -1.0, -1.0, 5.0], &[2, 3]);
    let y = ln.forward(&x).unwrap().to_f64_vec().unwrap();
    let s = (2.0f64 / 3.0).sqrt();
    close(&y[..3], &[-1.0 / s, 0.0, 1.0 / s], 1e-12);
    let s2 = 8.0f64.sqrt(); // var of [-1,-1,5] = 8
    close(&y[3..], &[-2.0 / s2, -2.0 / s2, 4.0 / s2], 1e-12);
    assert!(ln.forward(&t64(&[1.0, 2.0], &[1, 2])).is_err());
    // gradcheck through input, weight and bias (weight/bias non-trivial)
    let xin = t64(&[0.3, -1.2, 2.0, 0.7, 0.1, -0.4, 1.5, 0.9], &[2, 4])
        .requires_grad_(true)
        .unwrap();
    let w = t64(&[1.0, 0.5, -2.0, 1.5], &[4])
        .requires_grad_(true)
        .unwrap();
    let b = t64(&[0.1, 0.0, -0.3, 0.2], &[4])
        .requires_grad_(true)
        .unwrap();
    gradcheck(
        |xs| {
            let ln = LayerNorm::new_with(&[4], 1e-5, false, false, &Factory::dtype(DType::F64))?;
            ln.forward(&xs[0])?.mul(&xs[1])?.add(&xs[2])
        },
        &[xin, w, b],
        opts(),
    )
    .unwrap();
}

#[test]
fn rms_norm_by_hand_and_gradcheck() {
    let _rng = global_rng_turn();
    let n = RmsNorm::new_with(&[2], Some(0.0), true, &Factory::dtype(DType::F64)).unwrap();
    let y = n
        .forward(&t64(&[3.0, 4.0], &[1, 2]))
        .unwrap()
        .to_f64_vec()
        .unwrap();
    let rms = (12.5f64).sqrt();
    close(&y, &[3.0 / rms, 4.0 / rms], 1e-14);
    let xin = t64(&[0.3, -1.2, 2.0, 0.7, 0.1, -0.4], &[2, 3])
        .requires_grad_(true)
        .unwrap();
    gradcheck(
        |xs| RmsNorm::new_with(&[3], None, true, &Factory::dtype(DType::F64))?.forward(&xs[0]),
        &[xin],
        opts(),
    )
    .unwrap();
}

#[test]
fn dropout_reproducible_scaled_and_identity_in_eval() {
    let _rng = global_rng_turn();
    let x = Tensor::ones([1000], DType::F32, &Device::Cpu).unwrap();
    let d = Dropout::new(0.25).unwrap();
    manual_seed(11);
    let a = d.forward(&x).unwrap().to_f64_vec().unwrap();
    manual_seed(11);
    let b = d.forward(&x).unwrap().to_f64_vec().unwrap();
    assert_eq!(a, b, "reproducible from the seed");
    let scale = (1.0f32 / 0.75) as f64;
    assert!(a.iter().all(|&v| v == 0.0 || v == scale));
    let dropped = a.iter().filter(|&&v| v == 0.0).count();
    assert!((150..350).contains(&dropped), "{dropped}");
    // own generator
    let d1 = Dropout::new(0.5).unwrap().with_generator(Generator::new(5));
    let d2 = Dropout::new(0.5).unwrap().with_generator(Generator::new(5));
    assert_eq!(
        d1.forward(&x).unwrap().to_f64_vec().unwrap(),
        d2.forward(&x).unwrap().to_f64_vec().unwrap()
    );
    d.eval();
    assert_eq!(
        d.forward(&x).unwrap().to_f64_vec().unwrap(),
        vec![1.0; 1000]
    );
    assert!(Dropout::new(1.5).is_err());
    // gradient is the mask
    let d = Dropout::new(0.5).unwrap().with_generator(Generator::new(1));
    let xg = Tensor::ones([8], DType::F64, &Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = d.forward(&xg).unwrap();
    y.sum().unwrap().backward().unwrap();
    assert_eq!(
        xg.grad().unwrap().to_f64_vec().unwrap(),
        y.to_f64_vec().unwrap()
    );
}

#[test]
fn activations_by_hand_and_gradcheck() {
    let _rng = global_rng_turn();
    let x = t64(&[-2.0, -0.5, 0.0, 0.5, 2.0], &[5]);
    let relu = Relu::default().forward(&x).unwrap().to_f64_vec().unwrap();
    assert_eq!(relu, vec![0.0, 0.0, 0.0, 0.5, 2.0]);
    let lr = LeakyRelu::new(0.1)
        .forward(&x)
        .unwrap()
        .to_f64_vec()
        .unwrap();
    close(&lr, &[-0.2, -0.05, 0.0, 0.5, 2.0], 1e-15);
    let sig = Sigmoid::default()
        .forward(&x)
        .unwrap()
        .to_f64_vec()
        .unwrap();
    let sref: Vec<f64> = [-2.0f64, -0.5, 0.0, 0.5, 2.0]
        .iter()
        .map(|v| 1.0 / (1.0 + (-v).exp()))
        .collect();
    close(&sig, &sref, 1e-14);
    let silu = Silu::default().forward(&x).unwrap().to_f64_vec().unwrap();
    let xs = [-2.0f64, -0.5, 0.0, 0.5, 2.0];
    close(
        &silu,
        &xs.iter().zip(&sref).map(|(x, s)| x * s).collect::<Vec<_>>(),
        1e-14,
    );
    let tanh = Tanh::default().forward(&x).unwrap().to_f64_vec().unwrap();
    close(
        &tanh,
        &xs.iter().map(|v| v.tanh()).collect::<Vec<_>>(),
        1e-14,
    );
    let gelu = Gelu::default().forward(&x).unwrap().to_f64_vec().unwrap();
    let gref: Vec<f64> = xs
        .iter()
        .map(|v| 0.5 * v * (1.0 + libm::erf(v / 2f64.sqrt())))
        .collect();
    close(&gelu, &gref, 1e-12);
    let xin = t64(&[-1.3, -0.4, 0.2, 0.9, 1.7], &[5])
        .requires_grad_(true)
        .unwrap();
    for a in [
        Activation::Relu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::LeakyRelu(0.2),
    ] {
        let m = a.module();
        gradcheck(|xs| m.forward(&xs[0]), &[xin.clone()], opts())
            .unwrap_or_else(|e| panic!("{a:?}: {e}"));
    }
}

#[test]
fn mlp_gradcheck_through_every_parameter() {
    let _rng = global_rng_turn();
    let net = mlp(&[3, 4, 2], Activation::Tanh, &Factory::dtype(DType::F64)).unwrap();
    let params: Vec<Tensor> = net.parameters().iter().map(|p| p.tensor()).collect();
    let x = t64(&[0.1, -0.2, 0.3, 0.7, 0.5, -0.9], &[2, 3]);
    gradcheck(
        |ps| {
            let h = x.matmul(&ps[0].t()?)?.add(&ps[1])?.tanh()?;
            let y = h.matmul(&ps[2].t()?)?.add(&ps[3])?;
            // the module computes the same function
            assert_eq!(y.to_f64_vec()?, net.forward(&x)?.to_f64_vec()?);
            Ok(y)
        },
        &params,
        opts(),
    )
    .unwrap();
    assert!(mlp(&[3], Activation::Relu, &Factory::default()).is_err());
}

#[test]
fn init_functions() {
    let _rng = global_rng_turn();
    let g = Generator::new(1);
    let w = Tensor::zeros([200, 100], DType::F64, &Device::Cpu).unwrap();
    assert_eq!(init::fan_in_and_fan_out(&w).unwrap(), (100, 200));
    assert!(
        init::fan_in_and_fan_out(&Tensor::zeros([3], DType::F64, &Device::Cpu).unwrap()).is_err()
    );
    assert_eq!(
        init::calculate_gain(init::Nonlinearity::Relu, None),
        2f64.sqrt()
    );
    assert_eq!(
        init::calculate_gain(init::Nonlinearity::Tanh, None),
        5.0 / 3.0
    );
    assert_eq!(
        init::calculate_gain(init::Nonlinearity::LeakyRelu, Some(5f64.sqrt())),
        (1.0f64 / 3.0).sqrt()
    );
    assert_eq!(init::calculate_gain(init::Nonlinearity::Selu, None), 0.75);

    let stats = |t: &Tensor| {
        let v = t.to_f64_vec().unwrap();
        let n = v.len() as f64;
        let m = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n;
        (m, var.sqrt(), v.iter().fold(0.0f64, |a, x| a.max(x.abs())))
    };
    init::kaiming_normal_(
        &w,
        0.0,
        init::FanMode::FanIn,
        init::Nonlinearity::Relu,
        Some(&g),
    )
    .unwrap();
    let (m, s, _) = stats(&w);
    assert!(
        m.abs() < 0.01 && (s / (2.0f64 / 100.0).sqrt() - 1.0).abs() < 0.03,
        "{m} {s}"
    );
    init::kaiming_uniform_(
        &w,
        0.0,
        init::FanMode::FanOut,
        init::Nonlinearity::Relu,
        Some(&g),
    )
    .unwrap();
    let (_, _, mx) = stats(&w);
    let b = 2f64.sqrt() * (3.0f64 / 200.0).sqrt();
    assert!(mx <= b && mx > 0.95 * b);
    init::xavier_uniform_(&w, 1.0, Some(&g)).unwrap();
    let (_, _, mx) = stats(&w);
    let b = (6.0f64 / 300.0).sqrt();
    assert!(mx <= b && mx > 0.95 * b);
    init::xavier_normal_(&w, 2.0, Some(&g)).unwrap();
    let (_, s, _) = stats(&w);
    assert!((s / (2.0 * (2.0f64 / 300.0).sqrt()) - 1.0).abs() < 0.03);
    init::trunc_normal_(&w, 0.5, 1.0, -0.5, 1.0, Some(&g)).unwrap();
    let v = w.to_f64_vec().unwrap();
    assert!(v.iter().all(|x| (-0.5..=1.0).contains(x)));
    assert!(v.iter().any(|x| *x < -0.4) && v.iter().any(|x| *x > 0.9));
    assert!(init::trunc_normal_(&w, 0.0, 1.0, 1.0, -1.0, None).is_err());
    for x in [0.5f64, -0.9, 0.999, 1e-8, -0.3] {
        assert!(
            (libm::erf(init::erfinv(x)) - x).abs() < 2e-16,
            "erfinv({x})"
        );
    }
    assert!((init::erfinv(0.5) - 0.476_936_276_204_469_9).abs() < 1e-15);
    init::constant_(&w, 0.25).unwrap();
    assert!(w.to_f64_vec().unwrap().iter().all(|&x| x == 0.25));
    init::ones_(&w).unwrap();
    init::zeros_(&w).unwrap();
    init::normal_(&w, 1.0, 0.1, Some(&g)).unwrap();
    init::uniform_(&w, -1.0, 1.0, Some(&g)).unwrap();

    // orthogonal, tall and wide, on a transposed target
    for (r, c) in [(6usize, 4usize), (3, 5)] {
        let q = Tensor::zeros([c, r], DType::F64, &Device::Cpu)
            .unwrap()
            .t()
            .unwrap()
            .clone_tensor()
            .unwrap();
        init::orthogonal_(&q, 2.0, Some(&g)).unwrap();
        let qtq = if r >= c {
            q.t().unwrap().matmul(&q).unwrap()
        } else {
            q.matmul(&q.t().unwrap()).unwrap()
        };
        let k = r.min(c);
        let eye = Tensor::eye(k, k, DType::F64, &Device::Cpu)
            .unwrap()
            .mul(4.0)
            .unwrap();
        close(
            &qtq.to_f64_vec().unwrap(),
            &eye.to_f64_vec().unwrap(),
            1e-12,
        );
    }
    assert!(init::orthogonal_(
        &Tensor::zeros([3], DType::F64, &Device::Cpu).unwrap(),
        1.0,
        None
    )
    .is_err());
    // a parameter that requires grad can be re-initialised (no_grad inside)
    let lin = Linear::new(3, 3, false).unwrap();
    init::orthogonal_(&lin.weight.tensor(), 1.0, None).unwrap();
    assert!(lin.weight.tensor().requires_grad());
}

// ----- half precision: normalisation computes in f32 and rounds once (issue #22) -------------

const U32: f64 = 1.0 / 16_777_216.0; // u = 2^-24, the unit roundoff of f32

/// The spacing of `dt`'s values at magnitude `x` (f16: 11 significant bits, normal from 2^-14;
/// bf16: 8 bits, normal from 2^-126).
fn half_ulp(dt: DType, x: f64) -> f64 {
    let (bits, emin) = if dt == DType::F16 {
        (11, -14)
    } else {
        (8, -126)
    };
    let e = if x == 0.0 {
        emin
    } else {
        (x.abs().log2().floor() as i32).max(emin)
    };
    2f64.powi(e - (bits - 1))
}

/// Rows of `n` values `offset + j·ulp(offset)`, j in 0..4: exact in the half type, and their
/// sums, mean, centred values and squares exact in f32 (n = 64, offsets ≤ 1000).
fn offset_rows(dt: DType, offset: f64, rows: usize, n: usize) -> (Tensor, Vec<Vec<f64>>) {
    let step = half_ulp(dt, offset);
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ (offset as u64);
    let v: Vec<Vec<f64>> = (0..rows)
        .map(|_| {
            (0..n)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    offset + (s % 4) as f64 * step
                })
                .collect()
        })
        .collect();
    let flat: Vec<f64> = v.iter().flatten().copied().collect();
    (t64(&flat, &[rows, n]).to_dtype(dt).unwrap(), v)
}

/// Every element within `½ ulp_dt(|want| + δ) + δ` of the exact `want`: δ bounds the f32
/// computation's error, and rounding its result once to `dt` adds at most half an ulp.
fn within_half_bound(
    ctx: &str,
    dt: DType,
    got: &Tensor,
    want: &[f64],
    delta: impl Fn(usize) -> f64,
) {
    assert_eq!(got.dtype(), dt, "{ctx}: dtype");
    let g = got.to_f64_vec().unwrap();
    assert_eq!(g.len(), want.len(), "{ctx}: length");
    let bad: Vec<String> = (0..g.len())
        .filter_map(|i| {
            let d = delta(i);
            let bound = 0.5 * half_ulp(dt, want[i].abs() + d) + d;
            ((g[i] - want[i]).abs() > bound)
                .then(|| format!("[{i}] got {}, exact {}, bound {bound}", g[i], want[i]))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{ctx}: {} of {} out of bound, first: {}",
        bad.len(),
        g.len(),
        bad[0]
    );
}

#[test]
fn half_layer_norm_with_a_large_offset_computes_in_f32() {
    // The mean and variance of these rows are exact in f32; the mean is no f16/bf16 (it has
    // bits below the half step at the offset), so a mean rounded to the half type (the old
    // code: -1.99 where the answer is -0.995) shows at once.
    let (rows, n, eps) = (8, 64, 1e-5);
    for dt in [DType::F16, DType::BF16] {
        for offset in [100.0, 1000.0] {
            let (x, v) = offset_rows(dt, offset, rows, n);
            let ln = LayerNorm::new_with(&[n], eps, true, true, &Factory::dtype(dt)).unwrap();
            // weight 2 (an exact product) and bias 1/4 (one more f32 rounding)
            init::constant_(&ln.weight.as_ref().unwrap().tensor(), 2.0).unwrap();
            init::constant_(&ln.bias.as_ref().unwrap().tensor(), 0.25).unwrap();
            let x = x.requires_grad_(true).unwrap();
            let y = ln.forward(&x).unwrap();
            let mut normed = vec![];
            for r in &v {
                let m = r.iter().sum::<f64>() / n as f64;
                let var = r.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
                normed.extend(r.iter().map(|x| (x - m) / (var + eps).sqrt()));
            }
            let want: Vec<f64> = normed.iter().map(|z| 2.0 * z + 0.25).collect();
            // the f32 chain after the exact mean/var: var + eps (u, halved by the root), the
            // reciprocal square root (≤ 2 ulps = 4u), the product with x − mean (u), so
            // ≤ 6u·|2ẑ|; then + 1/4 rounds once more (u·|y|)
            let ctx = format!("LayerNorm {dt} offset {offset}");
            within_half_bound(&ctx, dt, &y, &want, |i| {
                6.0 * U32 * 2.0 * normed[i].abs() + U32 * want[i].abs()
            });
            // backward through the casts: d Σy / d bias = rows (exact); d Σy / d weight = Σ_rows
            // ẑ, each ẑ within 6u|ẑ| and the sum of `rows` terms adding γ_rows: δ = (6 + rows)·u·Σ|ẑ|
            y.sum().unwrap().backward().unwrap();
            let gb = ln.bias.as_ref().unwrap().grad().unwrap();
            assert_eq!(gb.dtype(), dt, "{ctx}: bias grad dtype");
            assert!(
                gb.to_f64_vec().unwrap().iter().all(|&g| g == rows as f64),
                "{ctx}: bias grad"
            );
            let nr = &normed;
            let col = |j: usize| (0..rows).map(move |r| nr[r * n + j]);
            let gw_want: Vec<f64> = (0..n).map(|j| col(j).sum()).collect();
            let gw = ln.weight.as_ref().unwrap().grad().unwrap();
            within_half_bound(&format!("{ctx}: weight grad"), dt, &gw, &gw_want, |j| {
                (6.0 + rows as f64) * U32 * col(j).map(f64::abs).sum::<f64>()
            });
            let gx = x.grad().unwrap();
            assert_eq!(gx.dtype(), dt, "{ctx}: input grad dtype");
            assert!(
                gx.to_f64_vec().unwrap().iter().all(|g| g.is_finite()),
                "{ctx}: input grad"
            );
        }
    }
}

#[test]
fn half_rms_norm_of_large_values_computes_in_f32() {
    // x near 1000: x² ≈ 10^6 overflows f16 (max 65504), so squaring in f16 gave inf and an
    // output of 0. In f32 the squares are exact, the sum of 64 of them is within γ_63 ≤ 64u
    // relative, halved by the root; + eps (u), the reciprocal root (≤ 4u) and the product
    // with x (u): δ = (n/2 + 6)·u·|y|.
    let (rows, n) = (8, 64);
    for dt in [DType::F16, DType::BF16] {
        for offset in [100.0, 1000.0] {
            let (x, v) = offset_rows(dt, offset, rows, n);
            let norm = RmsNorm::new_with(&[n], None, true, &Factory::dtype(dt)).unwrap();
            let eps = stride_nn::finfo_eps(dt);
            let x = x.requires_grad_(true).unwrap();
            let y = norm.forward(&x).unwrap();
            let want: Vec<f64> = v
                .iter()
                .flat_map(|r| {
                    let ms = r.iter().map(|x| x * x).sum::<f64>() / n as f64;
                    r.iter().map(move |x| x / (ms + eps).sqrt())
                })
                .collect();
            let ctx = format!("RmsNorm {dt} offset {offset}");
            within_half_bound(&ctx, dt, &y, &want, |i| {
                (n as f64 / 2.0 + 6.0) * U32 * want[i].abs()
            });
            y.sum().unwrap().backward().unwrap();
            let gw = norm.weight.as_ref().unwrap().grad().unwrap();
            assert_eq!(gw.dtype(), dt, "{ctx}: weight grad dtype");
            assert!(
                gw.to_f64_vec().unwrap().iter().all(|g| g.is_finite()),
                "{ctx}: weight grad"
            );
            assert_eq!(x.grad().unwrap().dtype(), dt, "{ctx}: input grad dtype");
        }
    }
}

#[test]
fn init_fills_any_dtype_with_constants_and_refuses_random_draws_into_integers() {
    // PyTorch: zeros_/ones_/constant_ work on integer tensors; random initialisers error.
    for dt in [DType::I64, DType::I32, DType::U8, DType::I8, DType::U32] {
        let t = Tensor::full([2, 3], 7i64, dt, &Device::Cpu).unwrap();
        init::zeros_(&t).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), vec![0.0; 6], "zeros_ {dt}");
        init::ones_(&t).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), vec![1.0; 6], "ones_ {dt}");
        init::constant_(&t, 5.0).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), vec![5.0; 6], "constant_ {dt}");
        // a value the dtype can't hold exactly is an error, and nothing is written
        for bad in [0.5, -1e30, f64::NAN] {
            let e = init::constant_(&t, bad).expect_err("inexact constant_");
            assert!(e.to_string().contains("constant_"), "{e}");
            assert_eq!(
                t.to_f64_vec().unwrap(),
                vec![5.0; 6],
                "constant_({bad}) wrote into {dt}"
            );
        }
        let before = t.to_f64_vec().unwrap();
        let gen = Generator::new(3);
        let errs = [
            init::trunc_normal_(&t, 0.0, 1.0, -2.0, 2.0, Some(&gen)).expect_err("trunc_normal_"),
            init::orthogonal_(&t, 1.0, Some(&gen)).expect_err("orthogonal_"),
            init::uniform_(&t, 0.0, 1.0, Some(&gen)).expect_err("uniform_"),
            init::normal_(&t, 0.0, 1.0, Some(&gen)).expect_err("normal_"),
            init::xavier_uniform_(&t, 1.0, Some(&gen)).expect_err("xavier_uniform_"),
        ];
        for e in errs {
            let m = e.to_string();
            assert!(m.contains(&dt.to_string()) && m.contains("float"), "{m}");
        }
        assert_eq!(
            t.to_f64_vec().unwrap(),
            before,
            "a refused initialiser wrote into {dt}"
        );
    }
    let u = Tensor::full([4], 9i64, DType::U8, &Device::Cpu).unwrap();
    assert!(init::constant_(&u, 256.0).is_err() && init::constant_(&u, -1.0).is_err());
    init::constant_(&u, 255.0).unwrap();
    assert_eq!(u.to_f64_vec().unwrap(), vec![255.0; 4]);
    let b = Tensor::zeros([3], DType::Bool, &Device::Cpu).unwrap();
    init::ones_(&b).unwrap();
    assert_eq!(b.to_vec::<bool>().unwrap(), vec![true; 3]);
    assert!(init::constant_(&b, 2.0).is_err());
    // floats keep working, through any layout
    let f = Tensor::zeros([3, 2], DType::F16, &Device::Cpu)
        .unwrap()
        .t()
        .unwrap();
    init::constant_(&f, 0.5).unwrap();
    assert_eq!(f.to_f64_vec().unwrap(), vec![0.5; 6]);
    init::trunc_normal_(&f, 0.0, 1.0, -2.0, 2.0, None).unwrap();
}
