//! stride-core: strided tensors, dtypes, devices, op frontends and the CPU backend.
//!
//! Most users depend on the `stride` facade crate instead; everything here is re-exported
//! there. Start with [`Tensor`].
//!
//! Layout of this crate (one concept per file):
//! - metadata: [`dtype`], [`shape`], [`layout`], [`device`], [`storage`], [`scalar`];
//! - [`Tensor`] itself (`tensor.rs`), creation (`creation.rs`), views (`view.rs`),
//!   printing (`display.rs`), type promotion ([`promote`]);
//! - op frontends in `ops/` (validate → promote → allocate → one backend primitive);
//! - the backend contract in [`backend`], the CPU backend in `cpu/` and the CUDA backend in
//!   [`cuda`].

mod alloc;
pub mod autocast;
pub mod autograd;
pub mod backend;
mod cpu;
mod creation;
pub mod cuda;
pub mod debug;
pub mod device;
mod display;
pub mod distributed;
pub mod dtype;
pub mod error;
pub mod half_round;
pub mod layout;
mod ops;
pub mod promote;
pub mod random;
pub mod scalar;
pub mod shape;
pub mod storage;
mod tensor;
mod transfer;
mod view;
pub mod webgpu;

pub use backend::cross_entropy::CrossEntropyRows;
pub use backend::optim::AdamStep;
pub use backend::pointwise::GateActivation;
pub use creation::MemoryFormat;
pub use device::Device;
pub use dtype::{Category, DType, Element};
pub use error::{Error, Result};
pub use layout::Layout;
pub use ops::attention::attention_supported;
pub use ops::cached_attention::KvCacheStep;
pub use ops::index::ScatterReduce;
pub use ops::join::{Indexing, PadMode};
pub use ops::opmath::in_compute_dtype;
pub use ops::optim::{fused_adam_, fused_adam_skippable_, SkippableStep};
pub use ops::reduce::compute_dtype;
pub use ops::rotary::RotaryStyle;
pub use promote::{result_type, Operand};
pub use random::{default_generator, manual_seed, Generator, GeneratorState};
pub use scalar::Scalar;
pub use shape::Shape;
pub use storage::{memory_stats, BufferElement, MemoryStats, Storage};
pub use tensor::Tensor;

/// Makes checks that need the data (index ranges, integer division by zero) wait for their
/// verdict on a GPU and return the error at the op itself, as on the CPU — for debugging.
/// Off by default: the checks run on the device without the host waiting, and a failure is
/// reported at the next read (see [`cuda::check_errors`]). Anomaly mode
/// ([`debug::detect_anomaly`]) turns it on for its thread while it lasts. Process-wide.
///
/// ```
/// stride_core::set_sync_checks(true);
/// assert!(stride_core::sync_checks());
/// stride_core::set_sync_checks(false);
/// ```
pub fn set_sync_checks(on: bool) {
    cuda::deferred::set_sync_checks(on)
}

/// Sync checks ([`set_sync_checks`]) on for this thread only, while the guard lives: e.g. for
/// a call that is expected to fail, while other threads keep the checks on the device.
///
/// ```
/// {
///     let _g = stride_core::sync_checks_here();
///     assert!(stride_core::sync_checks());
/// }
/// assert!(!stride_core::sync_checks());
/// ```
pub fn sync_checks_here() -> SyncChecksHere {
    cuda::deferred::hold_here(true);
    SyncChecksHere(std::marker::PhantomData)
}

/// The guard of [`sync_checks_here`] (bound to its thread).
#[must_use = "sync checks are on only while the guard lives: bind it with `let _g = …`"]
pub struct SyncChecksHere(std::marker::PhantomData<*const ()>);

impl Drop for SyncChecksHere {
    fn drop(&mut self) {
        cuda::deferred::hold_here(false);
    }
}

/// Whether checks that need the data wait for their verdict on this thread (see
/// [`set_sync_checks`]).
pub fn sync_checks() -> bool {
    cuda::deferred::sync_checks()
}

#[doc(hidden)]
pub use half;
pub use half::{bf16, f16};
