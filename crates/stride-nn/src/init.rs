//! Parameter initialisers with PyTorch's formulas (`torch.nn.init`). Each fills its tensor in
//! place, through its layout, without recording gradients; random ones draw from `gen` (or
//! the default generator when `None`).
//!
//! ```
//! use stride_nn::init;
//! use stride_core::{manual_seed, DType, Device, Tensor};
//! let w = Tensor::zeros([64, 32], DType::F32, &Device::Cpu)?;
//! init::xavier_uniform_(&w, init::calculate_gain(init::Nonlinearity::Tanh, None), None)?;
//! let bound = 5.0 / 3.0 * (6.0f64 / (64.0 + 32.0)).sqrt();
//! assert!(w.to_f64_vec()?.iter().all(|v| v.abs() <= bound));
//! # Ok::<(), stride_core::Error>(())
//! ```

use crate::invalid;
use stride_core::autograd::no_grad;
use stride_core::{Category, DType, Error, Generator, Result, Scalar, Tensor};

/// The nonlinearity a gain is computed for (`torch.nn.init.calculate_gain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nonlinearity {
    Linear,
    Conv,
    Sigmoid,
    Tanh,
    Relu,
    LeakyRelu,
    Selu,
}

/// PyTorch's `calculate_gain(nonlinearity, param)`: 1 for linear/conv/sigmoid, 5/3 for tanh,
/// √2 for relu, √(2/(1 + slope²)) for leaky_relu (slope = `param`, default 0.01), 3/4 for
/// selu.
pub fn calculate_gain(nonlinearity: Nonlinearity, param: Option<f64>) -> f64 {
    match nonlinearity {
        Nonlinearity::Linear | Nonlinearity::Conv | Nonlinearity::Sigmoid => 1.0,
        Nonlinearity::Tanh => 5.0 / 3.0,
        Nonlinearity::Relu => 2f64.sqrt(),
        Nonlinearity::LeakyRelu => {
            let s = param.unwrap_or(0.01);
            (2.0 / (1.0 + s * s)).sqrt()
        }
        Nonlinearity::Selu => 3.0 / 4.0,
    }
}

/// Which fan a kaiming initialiser scales by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanMode {
    FanIn,
    FanOut,
}

/// `(fan_in, fan_out)` of a weight of at least 2 dims: `size(1)·receptive`,
/// `size(0)·receptive` with `receptive = prod(shape[2..])`.
pub fn fan_in_and_fan_out(t: &Tensor) -> Result<(usize, usize)> {
    if t.dim() < 2 {
        return Err(invalid(
            "init",
            format!(
                "fan in and fan out can not be computed for a tensor with fewer than 2 dims (shape {:?})",
                t.shape()
            ),
        ));
    }
    let receptive: usize = t.shape()[2..].iter().product();
    Ok((t.shape()[1] * receptive, t.shape()[0] * receptive))
}

/// Random initialisers fill float tensors only (PyTorch errors too): writing a draw into an
/// integer tensor would silently truncate it.
fn float_only(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        return Ok(());
    }
    Err(Error::UnsupportedDType {
        op,
        dtype: t.dtype(),
        hint: "; random initialisers fill float tensors only (their draws would be truncated in an integer tensor): initialise a float tensor and convert it with to_dtype, or use constant_/zeros_/ones_".into(),
    })
}

/// Fills with `U(low, high)`.
pub fn uniform_(t: &Tensor, low: f64, high: f64, gen: Option<&Generator>) -> Result<()> {
    float_only("init::uniform_", t)?;
    let _ng = no_grad();
    t.detach().uniform_(low, high, gen).map(|_| ())
}
/// Fills with `N(mean, std²)`.
pub fn normal_(t: &Tensor, mean: f64, std: f64, gen: Option<&Generator>) -> Result<()> {
    float_only("init::normal_", t)?;
    let _ng = no_grad();
    t.detach().normal_(mean, std, gen).map(|_| ())
}
/// Fills with `value`; any dtype, as PyTorch. An integer tensor takes integral values in its
/// range and a bool tensor 0 or 1; anything else is an error (PyTorch would truncate or wrap
/// it silently).
pub fn constant_(t: &Tensor, value: f64) -> Result<()> {
    let op = "init::constant_";
    let scalar = match t.dtype().category() {
        Category::Float => Scalar::Float(value),
        Category::Integer => {
            let (lo, hi) = match t.dtype() {
                DType::I64 => (i64::MIN as f64, i64::MAX as f64),
                DType::I32 => (i32::MIN as f64, i32::MAX as f64),
                DType::U32 => (0.0, u32::MAX as f64),
                DType::U8 => (0.0, u8::MAX as f64),
                _ => (i8::MIN as f64, i8::MAX as f64),
            };
            // i64::MAX as f64 is 2^63, itself out of range: the upper bound is exclusive there
            let in_range = value >= lo && (value < hi || (value == hi && t.dtype() != DType::I64));
            if value.fract() != 0.0 || !in_range {
                return Err(invalid(
                    op,
                    format!(
                        "{value} is not an integer in the range of {} ({lo}..={hi}), so it can't fill an {} tensor exactly; pass an integral value or fill a float tensor",
                        t.dtype(),
                        t.dtype()
                    ),
                ));
            }
            Scalar::Int(value as i64)
        }
        Category::Bool => match value {
            0.0 => Scalar::Bool(false),
            1.0 => Scalar::Bool(true),
            _ => {
                return Err(invalid(
                    op,
                    format!("{value} can't fill a bool tensor; pass 0 or 1"),
                ))
            }
        },
    };
    let _ng = no_grad();
    t.detach().fill_(scalar).map(|_| ())
}
/// Fills with 0 (any dtype).
pub fn zeros_(t: &Tensor) -> Result<()> {
    constant_(t, 0.0)
}
/// Fills with 1 (any dtype).
pub fn ones_(t: &Tensor) -> Result<()> {
    constant_(t, 1.0)
}

fn kaiming_std(t: &Tensor, a: f64, mode: FanMode, nl: Nonlinearity) -> Result<f64> {
    let (fi, fo) = fan_in_and_fan_out(t)?;
    let fan = match mode {
        FanMode::FanIn => fi,
        FanMode::FanOut => fo,
    };
    if fan == 0 {
        return Err(invalid(
            "init",
            format!(
                "kaiming initialisation of a tensor with a zero-size fan (shape {:?})",
                t.shape()
            ),
        ));
    }
    Ok(calculate_gain(nl, Some(a)) / (fan as f64).sqrt())
}

/// He-uniform: `U(−b, b)` with `b = gain·√(3/fan)` (`a` is the leaky_relu slope).
/// `nn.Linear` uses `a = √5`, `FanIn`, `LeakyRelu`.
pub fn kaiming_uniform_(
    t: &Tensor,
    a: f64,
    mode: FanMode,
    nonlinearity: Nonlinearity,
    gen: Option<&Generator>,
) -> Result<()> {
    let bound = 3f64.sqrt() * kaiming_std(t, a, mode, nonlinearity)?;
    uniform_(t, -bound, bound, gen)
}
/// He-normal: `N(0, (gain/√fan)²)`.
pub fn kaiming_normal_(
    t: &Tensor,
    a: f64,
    mode: FanMode,
    nonlinearity: Nonlinearity,
    gen: Option<&Generator>,
) -> Result<()> {
    let std = kaiming_std(t, a, mode, nonlinearity)?;
    normal_(t, 0.0, std, gen)
}

/// Glorot-uniform: `U(−a, a)` with `a = gain·√(6/(fan_in + fan_out))`.
pub fn xavier_uniform_(t: &Tensor, gain: f64, gen: Option<&Generator>) -> Result<()> {
    let (fi, fo) = fan_in_and_fan_out(t)?;
    let std = gain * (2.0 / (fi + fo) as f64).sqrt();
    let a = 3f64.sqrt() * std;
    uniform_(t, -a, a, gen)
}
/// Glorot-normal: `N(0, gain²·2/(fan_in + fan_out))`.
pub fn xavier_normal_(t: &Tensor, gain: f64, gen: Option<&Generator>) -> Result<()> {
    let (fi, fo) = fan_in_and_fan_out(t)?;
    let std = gain * (2.0 / (fi + fo) as f64).sqrt();
    normal_(t, 0.0, std, gen)
}

fn norm_cdf(x: f64) -> f64 {
    (1.0 + libm::erf(x / 2f64.sqrt())) / 2.0
}

/// Inverse error function on (−1, 1) (Giles' approximation refined by two Newton steps).
pub fn erfinv(y: f64) -> f64 {
    if y <= -1.0 {
        return if y == -1.0 {
            f64::NEG_INFINITY
        } else {
            f64::NAN
        };
    }
    if y >= 1.0 {
        return if y == 1.0 { f64::INFINITY } else { f64::NAN };
    }
    let w = -((1.0 - y) * (1.0 + y)).ln();
    let mut x = if w < 5.0 {
        let w = w - 2.5;
        let mut p = 2.810_226_36e-08;
        for c in [
            3.432_739_39e-07,
            -3.523_387_7e-06,
            -4.391_506_54e-06,
            0.000_218_580_87,
            -0.001_253_725_03,
            -0.004_177_681_64,
            0.246_640_727,
            1.501_409_41,
        ] {
            p = c + p * w;
        }
        p * y
    } else {
        let w = w.sqrt() - 3.0;
        let mut p = -0.000_200_214_257;
        for c in [
            0.000_100_950_558,
            0.001_349_343_22,
            -0.003_673_428_44,
            0.005_739_507_73,
            -0.007_622_461_3,
            0.009_438_870_47,
            1.001_674_06,
            2.832_976_82,
        ] {
            p = c + p * w;
        }
        p * y
    };
    // Newton: f(x) = erf(x) − y, f'(x) = 2/√π · e^(−x²)
    for _ in 0..2 {
        let err = libm::erf(x) - y;
        x -= err / (std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp());
    }
    x
}

/// Truncated normal `N(mean, std²)` restricted to `[a, b]`, by PyTorch's method: uniform on
/// `[2Φ(α) − 1, 2Φ(β) − 1]`, inverse erf, scale, shift, clamp. (The inverse erf runs on the
/// host in f64.)
pub fn trunc_normal_(
    t: &Tensor,
    mean: f64,
    std: f64,
    a: f64,
    b: f64,
    gen: Option<&Generator>,
) -> Result<()> {
    float_only("init::trunc_normal_", t)?;
    if !(a < b) || !(std > 0.0) {
        return Err(invalid(
            "trunc_normal_",
            format!("needs a < b and std > 0, got a = {a}, b = {b}, std = {std}"),
        ));
    }
    let l = norm_cdf((a - mean) / std);
    let u = norm_cdf((b - mean) / std);
    let _ng = no_grad();
    let draw = Tensor::rand(
        t.shape(),
        stride_core::DType::F64,
        &stride_core::Device::Cpu,
        gen,
    )?;
    let vals: Vec<f64> = draw
        .to_vec::<f64>()?
        .into_iter()
        .map(|r| {
            let v = (2.0 * l - 1.0) + r * (2.0 * u - 2.0 * l);
            (erfinv(v) * std * 2f64.sqrt() + mean).clamp(a, b)
        })
        .collect();
    let src = Tensor::from_vec(vals, t.shape().to_vec())?;
    t.detach().copy_(&src.to_device(&t.device())?).map(|_| ())
}

/// A (semi-)orthogonal matrix (the trailing dims flattened), scaled by `gain`, as PyTorch's
/// `orthogonal_`: the Q of the QR decomposition of a normal matrix, with the signs fixed by
/// R's diagonal. (The QR runs on the host in f64, by modified Gram–Schmidt.)
pub fn orthogonal_(t: &Tensor, gain: f64, gen: Option<&Generator>) -> Result<()> {
    float_only("init::orthogonal_", t)?;
    if t.dim() < 2 {
        return Err(invalid(
            "orthogonal_",
            format!(
                "only tensors with 2 or more dims are supported, got shape {:?}",
                t.shape()
            ),
        ));
    }
    let rows = t.shape()[0];
    let cols = t.numel() / rows.max(1);
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let _ng = no_grad();
    let flat = Tensor::randn(
        [rows, cols],
        stride_core::DType::F64,
        &stride_core::Device::Cpu,
        gen,
    )?;
    let (m, n, a) = if rows < cols {
        (cols, rows, flat.t()?.contiguous()?.to_vec::<f64>()?)
    } else {
        (rows, cols, flat.to_vec::<f64>()?)
    };
    // a is m×n (m ≥ n), row-major; Gram–Schmidt on its columns gives Q (m×n) with R's
    // diagonal positive — the sign fix PyTorch applies to LAPACK's QR.
    let mut q = a.clone();
    for j in 0..n {
        for k in 0..j {
            let dot: f64 = (0..m).map(|i| q[i * n + k] * q[i * n + j]).sum();
            for i in 0..m {
                q[i * n + j] -= dot * q[i * n + k];
            }
        }
        let norm: f64 = (0..m).map(|i| q[i * n + j].powi(2)).sum::<f64>().sqrt();
        if norm == 0.0 {
            return Err(invalid(
                "orthogonal_",
                "the random matrix was rank deficient; try again",
            ));
        }
        for i in 0..m {
            q[i * n + j] /= norm;
        }
    }
    let mut qt = Tensor::from_vec(q, [m, n])?;
    if rows < cols {
        qt = qt.t()?;
    }
    let q = qt
        .mul(gain)?
        .reshape(&t.shape().iter().map(|&s| s as i64).collect::<Vec<_>>())?;
    t.detach().copy_(&q.to_device(&t.device())?).map(|_| ())
}
