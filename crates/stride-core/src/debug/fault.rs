//! Fault injection: a deliberately broken backend, to test that the debug tools catch what
//! real backends have got wrong.
//!
//! The one fault modelled is the bug that froze a sparse autoencoder on PyTorch's Apple-GPU
//! backend: when the output of `addcmul_`/`addcdiv_` was not contiguous, the kernel computed
//! into a contiguous temporary and never copied it back. No error, no NaN; the output simply
//! kept its old values.

use super::state;
use super::tensor_of;
use crate::backend::View;
use crate::{MemoryFormat, Result, Tensor};
use std::marker::PhantomData;

#[derive(Clone, Debug)]
pub(crate) struct Fault {
    /// The primitive's name (`addcmul`, `addcdiv`, `mul`, `copy`, `sum`, `matmul`, …).
    op: String,
}

impl Fault {
    /// Whether the fault hits this call: the op matches and an output is not contiguous.
    pub fn applies(&self, name: &str, outputs: &[View]) -> bool {
        name == self.op && outputs.iter().any(|o| !o.layout.is_contiguous())
    }
}

/// While alive, the backend primitive named `op` silently drops its writes into
/// non-contiguous outputs on this thread: it computes into a contiguous temporary and throws
/// it away, exactly as the PyTorch bug did. Every device is affected; the debug tools' own
/// replays are not. For testing debugging tools and for reproducing the story in the README;
/// never for real work.
///
/// `op` is a primitive's name: an elementwise op's name without a trailing underscore
/// (`addcmul` for `addcmul`, `addcmul_` and `addcmul_out`), `copy`, `fill`, a reduction
/// (`sum`, `amax`, …), `matmul`, `gather`, `scatter_add`, …
///
/// ```
/// use stride_core::{debug, DType, Device, Tensor};
/// let w = Tensor::zeros([3, 2], DType::F32, &Device::Cpu)?.t()?; // strides [1, 2]
/// let _f = debug::inject_fault("add");
/// w.add_(1.0)?; // no error, no effect
/// assert_eq!(w.to_vec::<f32>()?, vec![0.0; 6]);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn inject_fault(op: &str) -> FaultGuard {
    let id = state::register();
    state::with(|s| s.faults.push((id, Fault { op: op.to_string() })));
    FaultGuard {
        id,
        _thread: PhantomData,
    }
}

/// The fault is injected while this guard lives (see [`inject_fault`]).
#[must_use = "the fault is injected only while the guard lives: bind it with `let _f = …`"]
pub struct FaultGuard {
    id: u64,
    _thread: PhantomData<*const ()>,
}

impl Drop for FaultGuard {
    fn drop(&mut self) {
        state::release(self.id);
    }
}

/// Runs the op with each non-contiguous output replaced by a contiguous copy that is then
/// dropped; contiguous outputs are written as usual (a multi-tensor primitive, such as the
/// fused Adam over many parameters, loses only the strided tensors' writes, as the emulated
/// per-tensor kernel would).
pub(crate) fn run_faulty(
    _fault: &Fault,
    inputs: &[View],
    outputs: &[View],
    run: &dyn Fn(&[View], &[View]) -> Result<()>,
) -> Result<()> {
    let temps: Vec<Option<Tensor>> = {
        let _q = state::quiet();
        outputs
            .iter()
            .map(|o| match o.layout.is_contiguous() {
                true => Ok(None),
                false => tensor_of(o).clone_with(MemoryFormat::Contiguous).map(Some),
            })
            .collect::<Result<_>>()?
    };
    let views: Vec<View> = temps
        .iter()
        .zip(outputs)
        .map(|(t, o)| t.as_ref().map_or(*o, |t| t.view_ref()))
        .collect();
    run(inputs, &views)
}
