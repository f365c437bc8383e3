//! The sync guard: prove that a region (a training step, a decoding step) never makes the
//! host wait for a device.

use super::state;
use std::marker::PhantomData;

/// While alive, any host synchronisation caused by an op on this thread is an error
/// ([`crate::Error::HostSync`]) naming what caused it (`to_vec`, `item`, an index range
/// check, a count that sizes an output, …) and the line that called it. Waits are reported
/// the same on every device: a CPU run fails exactly where a GPU run would wait, so the proof
/// can run in CI without a GPU. See [`forbid_sync`].
#[must_use = "the guard is on only while it lives: bind it with `let _g = …`"]
pub struct SyncGuard {
    id: u64,
    _thread: PhantomData<*const ()>,
}

/// Forbids host synchronisations on this thread until the guard is dropped.
///
/// ```
/// use stride_core::{debug, DType, Device, Tensor};
/// let x = Tensor::ones([8], DType::F32, &Device::Cpu)?;
/// let _g = debug::forbid_sync();
/// let y = x.mul(2.0)?.exp()?; // queued work only: fine
/// let err = y.sum()?.item::<f32>().unwrap_err(); // reads a value back: refused
/// assert!(err.to_string().contains("to_vec"), "{err}");
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn forbid_sync() -> SyncGuard {
    let id = state::register();
    state::with(|s| s.sync_guards.push(id));
    SyncGuard {
        id,
        _thread: PhantomData,
    }
}

impl Drop for SyncGuard {
    fn drop(&mut self) {
        state::release(self.id);
    }
}
