//! # stride
//!
//! Strided tensors that give the same answer on every device, in every dtype, for every
//! memory layout — and fail loudly instead of silently.
//!
//! ```
//! use stride::prelude::*;
//! let x = Tensor::arange(0, 6, &Device::Cpu)?.reshape(&[2, 3])?.to_dtype(DType::F32)?;
//! let y = x.t()?.mul(2.0)?;            // a transposed view, then a new tensor
//! assert_eq!(y.shape(), &[3, 2]);
//! assert_eq!(y.to_vec::<f32>()?, vec![0., 6., 2., 8., 4., 10.]);
//! # Ok::<(), stride::Error>(())
//! ```
//!
//! Modules and optimizers live in [`nn`] and [`optim`] (PyTorch's `torch.nn` and
//! `torch.optim`):
//!
//! ```
//! use stride::prelude::*;
//! use stride::nn::{loss, mlp, Activation, Factory};
//!
//! let model = mlp(&[3, 64, 1], Activation::Gelu, &Factory::default())?;
//! let mut opt = optim::Adam::new(model.named_parameters(), optim::AdamConfig::adamw())?;
//! opt.set_health_check(true);                        // stride's own: see the README
//! let x = Tensor::randn([32, 3], DType::F32, &Device::Cpu, None)?;
//! let y = x.sum_dims(&[1], true)?;
//! for _ in 0..10 {
//!     opt.zero_grad()?;                              // grads to None, as PyTorch >= 2.0
//!     let l = loss::mse_loss(&model.forward(&x)?, &y, loss::Reduction::Mean)?;
//!     l.backward()?;
//!     opt.step()?;
//! }
//! assert!(opt.health().unwrap().is_healthy());
//! # Ok::<(), stride::Error>(())
//! ```

pub use stride_core::*;

/// Neural-network modules, layers, losses and initialisers (`torch.nn`): see [`stride_nn`].
pub mod nn {
    pub use stride_nn::{
        data, finfo_eps, functional, init, loss, mlp, Activation, Buffer, DdpConfig,
        DistributedDataParallel, DistributedSampler, Dropout, Embedding, Factory, Gelu, GeluTanh,
        Identity, LayerNorm, LeakyRelu, Linear, LoadReport, Mode, Module, NoSync, Parameter, Relu,
        RmsNorm, Sequential, ShapeMismatch, Sigmoid, Silu, Softplus, StateDict, Tanh, Visitor,
    };
}

/// Optimizers, LR schedulers, gradient clipping and the update-health check (`torch.optim`).
pub mod optim {
    pub use stride_nn::optim::*;
}

/// Complete models (the TopK sparse autoencoder, its synthetic data and training loop): see
/// [`stride_models`].
pub mod models {
    pub use stride_models::*;
}

/// The common imports: `use stride::prelude::*;`
pub mod prelude {
    pub use crate::{nn, optim};
    pub use stride_core::autograd::{self, no_grad};
    pub use stride_core::{
        manual_seed, DType, Device, Error, Generator, MemoryFormat, Result, Scalar, Shape, Tensor,
    };
    pub use stride_nn::optim::{LrScheduler, Optimizer};
    pub use stride_nn::{Module, Parameter};
}
