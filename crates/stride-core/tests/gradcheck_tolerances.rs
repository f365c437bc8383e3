//! The gradcheck functions themselves (`stride_core::autograd::{gradcheck, gradgradcheck}`):
//! their tolerances catch small gradient errors, real casts inside the checked function, and
//! the layout of the incoming gradient. Every op is gradchecked from its stride-check registry
//! entry (`crates/stride-check/tests/gradcheck.rs`), not here.

use stride_core::autograd::{gradcheck, gradgradcheck, GradcheckOptions};
use stride_core::{DType, Device, Result, Tensor};

#[derive(Clone, Copy, Debug)]
enum Dom {
    /// ±[0.25, 2]: distinct, away from 0 and from (half-)integers
    Any,
    /// [0.25, 2]
    Pos,
}

/// Gradcheck options for `f64 → f32 → f64` inside the function: each evaluation of
/// `y = 2·f64(f32(x))` is off from `2x` by at most `2·u32·|x|` (`u32 = 2⁻²⁴`), so the central
/// difference is off by at most `2·u32·(|x| + ε)·2 / 2ε` = `2.4·10⁻⁴` for `|x| ≤ 2`,
/// `ε = 10⁻³` (a larger step than the default's: the f32 staircase must not dominate;
/// `y` is linear, so there is no truncation error). `atol = 2.5·10⁻⁴` is that bound.
fn cast_opts() -> GradcheckOptions {
    let eps = 1e-3;
    let u32_ = f32::EPSILON as f64 / 2.0;
    GradcheckOptions {
        eps,
        atol: 2.0 * u32_ * (2.0 + eps) * 2.0 / (2.0 * eps) * 1.05,
        rtol: 0.0,
        ..GradcheckOptions::default()
    }
}
fn values(n: usize, dom: Dom, salt: usize) -> Vec<f64> {
    // distinct magnitudes, shuffled by a fixed generator
    let mut v: Vec<f64> = (0..n)
        .map(|k| {
            let m =
                0.25 + 1.75 * (k as f64 + 0.5) / n.max(1) as f64 + 0.0371 + 0.0013 * salt as f64;
            match dom {
                Dom::Pos => m,
                Dom::Any => {
                    if k % 2 == 0 {
                        m
                    } else {
                        -m
                    }
                }
            }
        })
        .collect();
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ (salt as u64 * 0x1234_5678);
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    v
}

#[test]
fn incoming_gradient_layout_does_not_matter() -> Result<()> {
    // the same backward with a contiguous and a transposed incoming gradient
    let x = Tensor::from_vec(values(12, Dom::Any, 3), [3, 4])?.requires_grad_(true)?;
    let idx = Tensor::from_vec(vec![2i64, 0, 2, 1], [4])?;
    let gc = Tensor::from_vec(values(12, Dom::Any, 9), [4, 3])?;
    let gt = gc.t()?.contiguous()?.t()?;
    assert!(!gt.is_contiguous());
    let mut got = vec![];
    for g in [&gc, &gt] {
        let y = x.index_select(0, &idx)?.matmul(&x.t()?)?.roll(&[1], &[0])?;
        let r = stride_core::autograd::grad(&[&y], &[&x], Some(&[g]), Default::default())?;
        got.push(r[0].as_ref().unwrap().to_vec::<f64>()?);
    }
    for (a, b) in got[0].iter().zip(&got[1]) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
    let _ = Device::Cpu;
    Ok(())
}

/// Backward through real casts: the gradient of `to_dtype` is the incoming gradient cast back
/// to the input's dtype (PyTorch), exactly — through f32, f16 and bf16 from an f64 leaf, and
/// from an f32 leaf through f64 — and it has the leaf's dtype.
#[test]
fn backward_through_real_casts() -> Result<()> {
    let vals = values(12, Dom::Any, 5);
    for mid in [DType::F32, DType::F16, DType::BF16] {
        let x = Tensor::from_vec(vals.clone(), [3, 4])?.requires_grad_(true)?;
        let y = x.to_dtype(mid)?.mul(3.0)?.to_dtype(DType::F64)?.sum()?;
        let g = stride_core::autograd::grad(&[&y], &[&x], None, Default::default())?;
        let g = g[0].clone().expect("x gets a gradient");
        assert_eq!(g.dtype(), DType::F64, "through {mid}");
        assert_eq!(g.to_vec::<f64>()?, vec![3.0; 12], "through {mid}");
    }
    // an f32 leaf through f64: d/dx Σ x² = 2x, computed in f64 and cast back to f32
    let v32: Vec<f32> = vals.iter().map(|&v| v as f32).collect();
    let x = Tensor::from_vec(v32.clone(), [3, 4])?.requires_grad_(true)?;
    let y = x.to_dtype(DType::F64)?.square()?.sum()?;
    let g = stride_core::autograd::grad(&[&y], &[&x], None, Default::default())?;
    let g = g[0].clone().expect("x gets a gradient");
    assert_eq!(g.dtype(), DType::F32);
    let want: Vec<f32> = v32.iter().map(|&v| (2.0 * v as f64) as f32).collect();
    assert_eq!(g.to_vec::<f32>()?, want);

    // the gradcheck of the real cast fails for a gradient 1 % off (a check that can fail):
    // forward value 2·f64(f32(x)), gradient 2.02
    let x = Tensor::from_vec(vals, [3, 4])?.requires_grad_(true)?;
    let wrong = |xs: &[Tensor]| {
        xs[0]
            .to_dtype(DType::F32)?
            .to_dtype(DType::F64)?
            .mul(2.0)?
            .add(&xs[0].sub(&xs[0].detach())?.mul(0.02)?)
    };
    let err = gradcheck(wrong, &[x.clone()], cast_opts())
        .unwrap_err()
        .to_string();
    assert!(err.contains("Jacobian mismatch"), "{err}");
    let right = |xs: &[Tensor]| xs[0].to_dtype(DType::F32)?.to_dtype(DType::F64)?.mul(2.0);
    gradcheck(right, &[x], cast_opts())
}

/// The tightened default tolerance catches what the old one (`atol 10⁻⁵, rtol 10⁻³`) let
/// through — a gradient off by 10⁻⁵ relative — and gradgradcheck's random projections catch
/// a first derivative that is right in value but wrong in its own derivative.
#[test]
fn default_tolerances_catch_small_gradient_errors() -> Result<()> {
    let x = Tensor::from_vec(values(6, Dom::Pos, 2), [2, 3])?.requires_grad_(true)?;
    // value x·eˣ; recorded gradient (1 + x)·eˣ·(1 + 10⁻⁵), through a zero-valued term
    let off = |xs: &[Tensor]| {
        let (x, d) = (&xs[0], xs[0].detach());
        let slope = d.exp()?.mul(&d.add(1.0)?)?.mul(1e-5)?;
        x.mul(&x.exp()?)?.add(&x.sub(&d)?.mul(&slope)?)
    };
    let err = gradcheck(off, &[x.clone()], GradcheckOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("Jacobian mismatch"), "{err}");
    let old = GradcheckOptions {
        eps: 1e-6,
        atol: 1e-5,
        rtol: 1e-3,
        rounding: 0.0,
    };
    assert!(
        gradcheck(off, &[x.clone()], old).is_ok(),
        "the old tolerance passed it"
    );
    gradcheck(
        |xs: &[Tensor]| xs[0].mul(&xs[0].exp()?),
        &[x.clone()],
        GradcheckOptions::default(),
    )?;

    // x³ with the right first derivative 3x² recorded as a constant (its own derivative,
    // 6x, is lost): gradcheck passes, gradgradcheck must not
    let detached = |xs: &[Tensor]| {
        let (x, d) = (&xs[0], xs[0].detach());
        d.mul(&d)?
            .mul(&d)?
            .add(&x.sub(&d)?.mul(&d.mul(&d)?.mul(3.0)?)?)
    };
    gradcheck(detached, &[x.clone()], GradcheckOptions::default())?;
    let err = gradgradcheck(detached, &[x.clone()], GradcheckOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("projection 0"), "{err}");
    gradgradcheck(
        |xs: &[Tensor]| xs[0].mul(&xs[0])?.mul(&xs[0]),
        &[x],
        GradcheckOptions::default(),
    )
}
