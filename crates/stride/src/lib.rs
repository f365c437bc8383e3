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

pub use stride_core::*;

/// The common imports: `use stride::prelude::*;`
pub mod prelude {
    pub use stride_core::autograd::{self, no_grad};
    pub use stride_core::{
        manual_seed, DType, Device, Error, Generator, MemoryFormat, Result, Scalar, Shape, Tensor,
    };
}
