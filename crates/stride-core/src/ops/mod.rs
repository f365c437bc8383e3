//! Op frontends: validation, broadcasting, promotion, output allocation; then one backend
//! primitive. (Autograd recording will hook in here.)

pub(crate) mod cumulative;
pub(crate) mod elementwise;
pub(crate) mod output;
pub(crate) mod reduce;
pub(crate) mod softmax;
