//! Op frontends: validation, broadcasting, promotion, output allocation; then one backend
//! primitive. (Autograd recording will hook in here.)

pub(crate) mod attention;
pub(crate) mod cached_attention;
pub(crate) mod cross_entropy;
pub(crate) mod cumulative;
pub(crate) mod einsum;
pub(crate) mod elementwise;
pub(crate) mod gated;
pub(crate) mod grouped_matmul;
pub(crate) mod index;
pub(crate) mod join;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod opmath;
pub(crate) mod optim;
pub(crate) mod output;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod rotary;
pub(crate) mod softmax;
pub(crate) mod sort;
