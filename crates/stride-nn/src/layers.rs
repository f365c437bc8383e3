//! Layers: [`Linear`], [`Embedding`], [`LayerNorm`], [`RmsNorm`], [`Dropout`], [`Sequential`],
//! activation modules and the [`mlp`] helper. Parameters are created and initialised as
//! PyTorch's layers create them, so seeded runs and state dicts carry over.

use crate::functional::{layer_norm, rms_norm};
use crate::module::{Mode, Module, Parameter, Visitor};
use crate::{init, invalid};
use stride_core::autograd::{is_grad_enabled, no_grad};
use stride_core::{DType, Device, Generator, Result, Tensor};

/// Where and how a layer creates its parameters (PyTorch's `device=`/`dtype=` factory
/// arguments, plus the generator its initialisers draw from; `None` = the default generator).
#[derive(Clone)]
pub struct Factory<'a> {
    pub dtype: DType,
    pub device: Device,
    pub generator: Option<&'a Generator>,
}
impl Default for Factory<'_> {
    fn default() -> Self {
        Factory {
            dtype: DType::F32,
            device: Device::Cpu,
            generator: None,
        }
    }
}
impl<'a> Factory<'a> {
    /// f32 on the CPU from the default generator, with `dtype` instead.
    pub fn dtype(dtype: DType) -> Factory<'static> {
        Factory {
            dtype,
            ..Factory::default()
        }
    }
    fn empty(&self, shape: &[usize]) -> Result<Tensor> {
        if !self.dtype.is_float() {
            return Err(invalid(
                "layer",
                format!(
                    "parameters must have a floating-point dtype, got {}",
                    self.dtype
                ),
            ));
        }
        Tensor::zeros(shape.to_vec(), self.dtype, &self.device)
    }
}

// ----- Linear -------------------------------------------------------------------------------

/// `y = x Wᵀ + b` with `W` of shape `(out_features, in_features)`, initialised as PyTorch's
/// `nn.Linear`: `W ~ U(−1/√in, 1/√in)` (kaiming_uniform with `a = √5`) and the same bound for
/// `b`.
///
/// ```
/// use stride_nn::{Linear, Module};
/// use stride_core::{DType, Device, Tensor};
/// let lin = Linear::new(3, 2, true)?;
/// assert_eq!(lin.weight.shape(), vec![2, 3]);
/// let y = lin.forward(&Tensor::ones([5, 3], DType::F32, &Device::Cpu)?)?;
/// assert_eq!(y.shape(), &[5, 2]);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub struct Linear {
    pub weight: Parameter,
    pub bias: Option<Parameter>,
    mode: Mode,
}
impl Linear {
    pub fn new(in_features: usize, out_features: usize, bias: bool) -> Result<Linear> {
        Linear::new_with(in_features, out_features, bias, &Factory::default())
    }
    pub fn new_with(
        in_features: usize,
        out_features: usize,
        bias: bool,
        f: &Factory,
    ) -> Result<Linear> {
        let w = f.empty(&[out_features, in_features])?;
        init::kaiming_uniform_(
            &w,
            5f64.sqrt(),
            init::FanMode::FanIn,
            init::Nonlinearity::LeakyRelu,
            f.generator,
        )?;
        let b = if bias {
            let b = f.empty(&[out_features])?;
            let bound = if in_features > 0 {
                1.0 / (in_features as f64).sqrt()
            } else {
                0.0
            };
            init::uniform_(&b, -bound, bound, f.generator)?;
            Some(Parameter::new(b)?)
        } else {
            None
        };
        Ok(Linear {
            weight: Parameter::new(w)?,
            bias: b,
            mode: Mode::default(),
        })
    }
    /// A layer with the given weight `(out, in)` and bias `(out)` (shared, not copied).
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Result<Linear> {
        if weight.dim() != 2 {
            return Err(invalid(
                "Linear::from_tensors",
                format!(
                    "the weight must be 2-d (out_features, in_features), got shape {:?}",
                    weight.shape()
                ),
            ));
        }
        if let Some(b) = &bias {
            if b.shape() != [weight.shape()[0]] {
                return Err(invalid(
                    "Linear::from_tensors",
                    format!(
                        "the bias must have shape [{}] to match the weight {:?}, got {:?}",
                        weight.shape()[0],
                        weight.shape(),
                        b.shape()
                    ),
                ));
            }
        }
        Ok(Linear {
            weight: Parameter::new(weight)?,
            bias: bias.map(Parameter::new).transpose()?,
            mode: Mode::default(),
        })
    }
}
impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let b = self.bias.as_ref().map(|b| b.tensor());
        crate::functional::linear(x, &self.weight.tensor(), b.as_ref())
    }
    fn visit(&self, v: &mut dyn Visitor) {
        v.parameter("weight", &self.weight);
        if let Some(b) = &self.bias {
            v.parameter("bias", b);
        }
    }
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

// ----- Embedding ----------------------------------------------------------------------------

/// A lookup table `(num_embeddings, dim)`, initialised `N(0, 1)` (the `padding_idx` row zero,
/// and its gradient stays zero), as PyTorch's `nn.Embedding`. The input is an integer tensor
/// of any shape; the output appends `dim`.
pub struct Embedding {
    pub weight: Parameter,
    pub padding_idx: Option<usize>,
    mode: Mode,
}
impl Embedding {
    pub fn new(num_embeddings: usize, dim: usize, padding_idx: Option<usize>) -> Result<Embedding> {
        Embedding::new_with(num_embeddings, dim, padding_idx, &Factory::default())
    }
    pub fn new_with(
        num_embeddings: usize,
        dim: usize,
        padding_idx: Option<usize>,
        f: &Factory,
    ) -> Result<Embedding> {
        if let Some(p) = padding_idx {
            if p >= num_embeddings {
                return Err(invalid(
                    "Embedding",
                    format!("padding_idx {p} must be < num_embeddings {num_embeddings}"),
                ));
            }
        }
        let w = f.empty(&[num_embeddings, dim])?;
        init::normal_(&w, 0.0, 1.0, f.generator)?;
        if let Some(p) = padding_idx {
            w.select(0, p as i64)?.fill_(0.0)?;
        }
        Ok(Embedding {
            weight: Parameter::new(w)?,
            padding_idx,
            mode: Mode::default(),
        })
    }
}
impl Module for Embedding {
    fn forward(&self, indices: &Tensor) -> Result<Tensor> {
        let w = self.weight.tensor();
        let out = w.embedding(indices)?;
        if !(is_grad_enabled() && w.requires_grad()) {
            return Ok(out);
        }
        // The lookup's gradient is a scatter-add of the output's gradient into the table's
        // rows (deterministic: duplicates summed in index order); the padding row's
        // positions take the stored row detached, so their gradient never reaches it. Memory
        // O(indices × dim), never a one-hot (indices × num_embeddings) matrix.
        match self.padding_idx {
            None => Ok(out),
            Some(p) => {
                let row = {
                    let _ng = no_grad();
                    w.select(0, p as i64)?.detach()
                };
                let pad = indices.eq(p as i64)?.unsqueeze(-1)?;
                pad.where_cond(&row, &out)
            }
        }
    }
    fn visit(&self, v: &mut dyn Visitor) {
        v.parameter("weight", &self.weight);
    }
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

// ----- normalisation ------------------------------------------------------------------------

/// `(x − mean) / √(var + eps) · weight + bias` over the trailing `normalized_shape` dims
/// (biased variance), as PyTorch's `nn.LayerNorm` (weight ones, bias zeros).
pub struct LayerNorm {
    pub weight: Option<Parameter>,
    pub bias: Option<Parameter>,
    pub normalized_shape: Vec<usize>,
    pub eps: f64,
    mode: Mode,
}
impl LayerNorm {
    /// `elementwise_affine = true`, `bias = true`, `eps = 1e-5` (PyTorch's defaults).
    pub fn new(normalized_shape: &[usize]) -> Result<LayerNorm> {
        LayerNorm::new_with(normalized_shape, 1e-5, true, true, &Factory::default())
    }
    pub fn new_with(
        normalized_shape: &[usize],
        eps: f64,
        elementwise_affine: bool,
        bias: bool,
        f: &Factory,
    ) -> Result<LayerNorm> {
        let (weight, b) = if elementwise_affine {
            let w = f.empty(normalized_shape)?;
            w.fill_(1.0)?;
            let b = if bias {
                Some(Parameter::new(f.empty(normalized_shape)?)?)
            } else {
                None
            };
            (Some(Parameter::new(w)?), b)
        } else {
            (None, None)
        };
        Ok(LayerNorm {
            weight,
            bias: b,
            normalized_shape: normalized_shape.to_vec(),
            eps,
            mode: Mode::default(),
        })
    }
}
impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.weight.as_ref().map(|p| p.tensor());
        let b = self.bias.as_ref().map(|p| p.tensor());
        layer_norm(x, &self.normalized_shape, w.as_ref(), b.as_ref(), self.eps)
    }
    fn visit(&self, v: &mut dyn Visitor) {
        if let Some(w) = &self.weight {
            v.parameter("weight", w);
        }
        if let Some(b) = &self.bias {
            v.parameter("bias", b);
        }
    }
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

/// `x / √(mean(x²) + eps) · weight` over the trailing dims, as PyTorch's `nn.RMSNorm`
/// (`eps = None` means the input dtype's machine epsilon).
pub struct RmsNorm {
    pub weight: Option<Parameter>,
    pub normalized_shape: Vec<usize>,
    pub eps: Option<f64>,
    mode: Mode,
}
impl RmsNorm {
    pub fn new(normalized_shape: &[usize]) -> Result<RmsNorm> {
        RmsNorm::new_with(normalized_shape, None, true, &Factory::default())
    }
    pub fn new_with(
        normalized_shape: &[usize],
        eps: Option<f64>,
        elementwise_affine: bool,
        f: &Factory,
    ) -> Result<RmsNorm> {
        let weight = if elementwise_affine {
            let w = f.empty(normalized_shape)?;
            w.fill_(1.0)?;
            Some(Parameter::new(w)?)
        } else {
            None
        };
        Ok(RmsNorm {
            weight,
            normalized_shape: normalized_shape.to_vec(),
            eps,
            mode: Mode::default(),
        })
    }
}
/// Machine epsilon of a float dtype (`torch.finfo(dtype).eps`).
pub fn finfo_eps(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        DType::F16 => 0.0009765625,
        DType::BF16 => 0.0078125,
        _ => f32::EPSILON as f64,
    }
}
impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.weight.as_ref().map(|p| p.tensor());
        rms_norm(x, &self.normalized_shape, w.as_ref(), self.eps)
    }
    fn visit(&self, v: &mut dyn Visitor) {
        if let Some(w) = &self.weight {
            v.parameter("weight", w);
        }
    }
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

// ----- Dropout ------------------------------------------------------------------------------

/// Inverted dropout: in training, each element is zeroed with probability `p` and the rest
/// scaled by `1/(1 − p)`; in eval mode the identity. Masks come from stride's counter-based
/// generator (its own, or the default one), so a seed reproduces them on every device.
pub struct Dropout {
    pub p: f64,
    generator: Option<Generator>,
    mode: Mode,
}
impl Dropout {
    pub fn new(p: f64) -> Result<Dropout> {
        if !(0.0..=1.0).contains(&p) {
            return Err(invalid(
                "Dropout",
                format!("dropout probability has to be between 0 and 1, but got {p}"),
            ));
        }
        Ok(Dropout {
            p,
            generator: None,
            mode: Mode::default(),
        })
    }
    /// Draws masks from `gen` instead of the default generator.
    pub fn with_generator(mut self, gen: Generator) -> Dropout {
        self.generator = Some(gen);
        self
    }
}
impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.is_training() || self.p == 0.0 {
            return Ok(x.clone());
        }
        let mask = Tensor::dropout_mask(
            x.shape(),
            self.p,
            x.dtype(),
            &x.device(),
            self.generator.as_ref(),
        )?;
        x.mul(&mask)
    }
    fn visit(&self, _v: &mut dyn Visitor) {}
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

// ----- activations --------------------------------------------------------------------------

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, |$x:ident| $body:expr) => {
        $(#[$doc])*
        #[derive(Default)]
        pub struct $name {
            mode: Mode,
        }
        impl Module for $name {
            fn forward(&self, $x: &Tensor) -> Result<Tensor> {
                $body
            }
            fn visit(&self, _v: &mut dyn Visitor) {}
            fn mode(&self) -> &Mode {
                &self.mode
            }
        }
    };
}
activation!(
    /// `max(x, 0)`.
    Relu, |x| x.relu());
activation!(
    /// `x · Φ(x)` (PyTorch's `GELU(approximate='none')`).
    Gelu, |x| x.gelu());
activation!(
    /// The tanh approximation of GELU (PyTorch's `GELU(approximate='tanh')`).
    GeluTanh, |x| x.gelu_tanh());
activation!(
    /// `x · σ(x)`.
    Silu, |x| x.silu());
activation!(
    /// `tanh(x)`.
    Tanh, |x| x.tanh());
activation!(
    /// `σ(x)`.
    Sigmoid, |x| x.sigmoid());
activation!(
    /// `log(1 + eˣ)` (β = 1, threshold 20, as PyTorch's default `Softplus`).
    Softplus, |x| x.softplus());
activation!(
    /// The identity.
    Identity, |x| Ok(x.clone()));

/// `x` where positive, else `negative_slope · x` (default 0.01).
pub struct LeakyRelu {
    pub negative_slope: f64,
    mode: Mode,
}
impl LeakyRelu {
    pub fn new(negative_slope: f64) -> LeakyRelu {
        LeakyRelu {
            negative_slope,
            mode: Mode::default(),
        }
    }
}
impl Default for LeakyRelu {
    fn default() -> Self {
        LeakyRelu::new(0.01)
    }
}
impl Module for LeakyRelu {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.gt(0.0)?.where_cond(x, &x.mul(self.negative_slope)?)
    }
    fn visit(&self, _v: &mut dyn Visitor) {}
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

/// The activation of an [`mlp`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    Relu,
    Gelu,
    GeluTanh,
    Silu,
    Tanh,
    Sigmoid,
    LeakyRelu(f64),
}
impl Activation {
    /// The activation as a module.
    pub fn module(self) -> Box<dyn Module> {
        match self {
            Activation::Relu => Box::new(Relu::default()),
            Activation::Gelu => Box::new(Gelu::default()),
            Activation::GeluTanh => Box::new(GeluTanh::default()),
            Activation::Silu => Box::new(Silu::default()),
            Activation::Tanh => Box::new(Tanh::default()),
            Activation::Sigmoid => Box::new(Sigmoid::default()),
            Activation::LeakyRelu(s) => Box::new(LeakyRelu::new(s)),
        }
    }
}

// ----- Sequential ---------------------------------------------------------------------------

/// Modules applied in order, named `"0"`, `"1"`, … (PyTorch's `nn.Sequential`).
///
/// ```
/// use stride_nn::{Linear, Module, Relu, Sequential};
/// let net = Sequential::new().push(Linear::new(4, 8, true)?).push(Relu::default())
///                            .push(Linear::new(8, 1, true)?);
/// let names: Vec<String> = net.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// # Ok::<(), stride_core::Error>(())
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
    mode: Mode,
}
impl Sequential {
    pub fn new() -> Sequential {
        Sequential::default()
    }
    /// Appends a module (builder style).
    pub fn push(mut self, m: impl Module + 'static) -> Sequential {
        self.layers.push(Box::new(m));
        self
    }
    /// Appends a boxed module.
    pub fn push_boxed(mut self, m: Box<dyn Module>) -> Sequential {
        self.layers.push(m);
        self
    }
    pub fn len(&self) -> usize {
        self.layers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
    /// The `i`-th module.
    pub fn get(&self, i: usize) -> Option<&dyn Module> {
        self.layers.get(i).map(|b| b.as_ref())
    }
}
impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut y = x.clone();
        for l in &self.layers {
            y = l.forward(&y)?;
        }
        Ok(y)
    }
    fn visit(&self, v: &mut dyn Visitor) {
        for (i, l) in self.layers.iter().enumerate() {
            v.module(&i.to_string(), l.as_ref());
        }
    }
    fn mode(&self) -> &Mode {
        &self.mode
    }
}

/// A multilayer perceptron: `Linear(sizes[0], sizes[1])`, activation, …, `Linear(…,
/// sizes[n])` (no activation after the last), as a [`Sequential`] — so its state-dict keys
/// are PyTorch's `nn.Sequential` keys (`0.weight`, `2.weight`, …).
///
/// ```
/// use stride_nn::{mlp, Activation, Factory, Module};
/// let net = mlp(&[2, 16, 16, 1], Activation::Tanh, &Factory::default())?;
/// assert_eq!(net.len(), 5);
/// assert_eq!(net.num_parameters(), (2 * 16 + 16) + (16 * 16 + 16) + (16 + 1));
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn mlp(sizes: &[usize], activation: Activation, f: &Factory) -> Result<Sequential> {
    if sizes.len() < 2 {
        return Err(invalid(
            "mlp",
            format!(
                "needs at least an input and an output size, got {:?}",
                sizes
            ),
        ));
    }
    let mut s = Sequential::new();
    for (i, w) in sizes.windows(2).enumerate() {
        s = s.push(Linear::new_with(w[0], w[1], true, f)?);
        if i + 2 < sizes.len() {
            s = s.push_boxed(activation.module());
        }
    }
    Ok(s)
}
