//! Graph nodes: one per recorded op, holding the backward function, where each input's
//! gradient goes (edges), and the versions of the tensors the backward needs.

use super::GradHook;
use crate::tensor::TensorImpl;
use crate::{DType, Device, Error, Result, Storage, Tensor};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Computes input gradients from output gradients (one per output; missing ones are zeros).
pub(crate) type BackwardFn = Box<dyn FnMut(&[Tensor]) -> Result<Vec<Option<Tensor>>> + Send>;

/// Where a gradient flows: into another node's output slot, or into a leaf's `.grad`.
#[derive(Clone)]
pub(crate) enum Edge {
    Node(Arc<Node>, usize),
    Leaf(Weak<TensorImpl>),
}

/// Shape/dtype/device of a tensor, kept instead of the tensor where only metadata is needed.
#[derive(Clone, Debug)]
pub(crate) struct TensorMeta {
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub device: Device,
}
impl TensorMeta {
    pub fn of(t: &Tensor) -> Self {
        TensorMeta {
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
            device: t.device(),
        }
    }
}

/// A tensor saved for backward and the storage version it had then.
pub(crate) struct SavedVersion {
    pub storage: Storage,
    pub version: u64,
    pub what: &'static str,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

pub(crate) struct Node {
    pub name: &'static str,
    pub seq: u64,
    pub edges: Vec<Option<Edge>>,
    pub inputs: Vec<TensorMeta>,
    pub outputs: Vec<TensorMeta>,
    pub saved: Vec<SavedVersion>,
    backward: Mutex<Option<BackwardFn>>,
    /// Hooks on non-leaf outputs, run on the gradient flowing into that output.
    pub hooks: Mutex<Vec<(usize, GradHook)>>,
    /// Non-leaf outputs whose `.grad` is kept (`retain_grad`).
    pub retained: Mutex<Vec<(usize, Weak<TensorImpl>)>>,
    /// Where the forward op was called, recorded in anomaly mode only.
    pub forward_site: Option<crate::debug::CallSite>,
}

impl Node {
    pub fn new(
        name: &'static str,
        edges: Vec<Option<Edge>>,
        inputs: Vec<TensorMeta>,
        outputs: Vec<TensorMeta>,
        saved: Vec<SavedVersion>,
        backward: BackwardFn,
    ) -> Arc<Node> {
        Arc::new(Node {
            name,
            seq: SEQ.fetch_add(1, Ordering::Relaxed),
            edges,
            inputs,
            outputs,
            saved,
            backward: Mutex::new(Some(backward)),
            hooks: Mutex::new(vec![]),
            retained: Mutex::new(vec![]),
            forward_site: crate::debug::forward_site(),
        })
    }

    /// Runs the backward function; frees it (and everything it saved) unless `retain`.
    pub fn apply(&self, grads: &[Tensor], retain: bool) -> Result<Vec<Option<Tensor>>> {
        for s in &self.saved {
            let now = s.storage.version();
            if now != s.version {
                return Err(Error::invalid(
                    "backward",
                    format!(
                        "one of the tensors needed for gradient computation has been modified by an in-place operation: {}'s saved {} is at version {now}; expected version {}. Clone it before modifying it in place, or modify a copy",
                        self.name, s.what, s.version
                    ),
                ));
            }
        }
        let mut slot = self.backward.lock().unwrap_or_else(|e| e.into_inner());
        let f = slot.as_mut().ok_or_else(|| {
            Error::invalid(
                "backward",
                format!(
                    "trying to backward through {} a second time, but its saved tensors were freed by the first backward; pass retain_graph = true to the first backward if you need to call it twice",
                    self.name
                ),
            )
        })?;
        let out = f(grads)?;
        if !retain {
            *slot = None;
        }
        Ok(out)
    }
}

/// A read-only handle to a node of the graph, for inspection (`y.grad_fn()`).
#[derive(Clone)]
pub struct GradFn(pub(crate) Arc<Node>);

impl GradFn {
    /// The op's backward name, e.g. `MulBackward`.
    pub fn name(&self) -> &'static str {
        self.0.name
    }
    /// The nodes gradients flow to next, one per input: `None` for inputs that need no
    /// gradient, `Some(None)`-like leaves are reported as `NextFn::Leaf`.
    pub fn next_functions(&self) -> Vec<NextFn> {
        self.0
            .edges
            .iter()
            .map(|e| match e {
                None => NextFn::None,
                Some(Edge::Node(n, i)) => NextFn::Node(GradFn(n.clone()), *i),
                Some(Edge::Leaf(w)) => match w.upgrade() {
                    Some(t) => NextFn::Leaf(Tensor::from_impl(t)),
                    None => NextFn::None,
                },
            })
            .collect()
    }
}

impl std::fmt::Debug for GradFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

/// One entry of [`GradFn::next_functions`].
pub enum NextFn {
    /// This input needs no gradient.
    None,
    /// The gradient goes to output `usize` of another node.
    Node(GradFn, usize),
    /// The gradient accumulates into this leaf's `.grad` (PyTorch's `AccumulateGrad`).
    Leaf(Tensor),
}
