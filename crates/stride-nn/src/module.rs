//! The [`Module`] trait, [`Parameter`]s, [`Buffer`]s and state dicts.
//!
//! A module registers its own parameters, buffers and submodules through [`Module::visit`];
//! everything else (dotted names, parameter counts, train/eval, dtype moves, state dicts) is
//! derived from that one method, as PyTorch derives it from `__init__` registrations.

use crate::invalid;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use stride_core::autograd::no_grad;
use stride_core::{DType, Device, Error, Result, Tensor};

fn read<T: Clone>(l: &RwLock<T>) -> T {
    l.read().unwrap_or_else(|e| e.into_inner()).clone()
}
fn write<T>(l: &RwLock<T>, v: T) {
    *l.write().unwrap_or_else(|e| e.into_inner()) = v;
}

/// A trainable tensor: a leaf that requires grad, shared by handle.
///
/// Cloning a `Parameter` gives another handle to the *same* parameter (as holding the same
/// `nn.Parameter` object in Python): the module, the optimizer and the user all see in-place
/// updates and the same `.grad()`. [`Module::to_dtype`] swaps the tensor inside every handle,
/// like PyTorch's `param.data = ...`.
///
/// ```
/// use stride_nn::Parameter;
/// use stride_core::Tensor;
/// let p = Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0], [2])?)?;
/// assert!(p.tensor().requires_grad() && p.tensor().is_leaf());
/// let q = p.clone();
/// q.tensor().detach().mul_(3.0)?;          // an update through one handle…
/// assert_eq!(p.tensor().to_vec::<f32>()?, vec![3.0, 6.0]); // …is seen through the other
/// # Ok::<(), stride_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Parameter(Arc<RwLock<Tensor>>);

impl Parameter {
    /// Wraps `t` (detached from any graph, sharing its storage and layout) as a leaf that
    /// requires grad. `t` must be a float tensor.
    pub fn new(t: Tensor) -> Result<Parameter> {
        let leaf = t.detach().requires_grad_(true)?;
        Ok(Parameter(Arc::new(RwLock::new(leaf))))
    }
    /// A frozen parameter (`requires_grad = false`): counted and saved, never trained.
    pub fn frozen(t: Tensor) -> Parameter {
        Parameter(Arc::new(RwLock::new(t.detach())))
    }
    /// The parameter's tensor (a cheap handle sharing data, autograd state and `.grad()`).
    pub fn tensor(&self) -> Tensor {
        read(&self.0)
    }
    /// The accumulated gradient, if any.
    pub fn grad(&self) -> Option<Tensor> {
        self.tensor().grad()
    }
    pub fn shape(&self) -> Vec<usize> {
        self.tensor().shape().to_vec()
    }
    pub fn numel(&self) -> usize {
        self.tensor().numel()
    }
    pub fn requires_grad(&self) -> bool {
        self.tensor().requires_grad()
    }
    /// Turns training of this parameter on or off (PyTorch's `p.requires_grad_(on)`).
    pub fn set_requires_grad(&self, on: bool) -> Result<()> {
        self.tensor().requires_grad_(on).map(|_| ())
    }
    /// Replaces the tensor behind every handle (PyTorch's `param.data = t`); the new tensor
    /// becomes a leaf with this parameter's `requires_grad`.
    pub fn set_data(&self, t: Tensor) -> Result<()> {
        let rg = self.requires_grad();
        let leaf = t.detach().requires_grad_(rg)?;
        write(&self.0, leaf);
        Ok(())
    }
    /// Whether two handles are the same parameter.
    pub fn same(&self, other: &Parameter) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
    pub(crate) fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as *const () as usize
    }
}

impl std::fmt::Debug for Parameter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Parameter({:?})", self.tensor())
    }
}

/// A tensor that belongs to a module's state but is not trained (running statistics, masks),
/// shared by handle like [`Parameter`]. Persistent buffers are part of the state dict.
#[derive(Clone)]
pub struct Buffer {
    inner: Arc<RwLock<Tensor>>,
    persistent: bool,
}
impl Buffer {
    pub fn new(t: Tensor) -> Buffer {
        Buffer {
            inner: Arc::new(RwLock::new(t.detach())),
            persistent: true,
        }
    }
    /// A buffer left out of the state dict (PyTorch's `persistent=False`).
    pub fn non_persistent(t: Tensor) -> Buffer {
        Buffer {
            persistent: false,
            ..Buffer::new(t)
        }
    }
    pub fn tensor(&self) -> Tensor {
        read(&self.inner)
    }
    pub fn set_data(&self, t: Tensor) {
        write(&self.inner, t.detach());
    }
    pub fn is_persistent(&self) -> bool {
        self.persistent
    }
}

/// Whether a module is in training mode; every built-in module holds one.
#[derive(Debug)]
pub struct Mode(AtomicBool);
impl Default for Mode {
    fn default() -> Self {
        Mode(AtomicBool::new(true))
    }
}
impl Mode {
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
    pub fn set(&self, training: bool) {
        self.0.store(training, Ordering::Relaxed)
    }
}

/// What [`Module::visit`] reports: a module's own parameters, buffers and submodules.
pub trait Visitor {
    fn parameter(&mut self, name: &str, p: &Parameter);
    fn buffer(&mut self, _name: &str, _b: &Buffer) {}
    fn module(&mut self, name: &str, m: &dyn Module);
}

/// A neural-network module, PyTorch's `nn.Module`.
///
/// Implement [`forward`](Module::forward), [`visit`](Module::visit) (register the module's
/// own parameters, buffers and children, in PyTorch's registration order) and
/// [`mode`](Module::mode); every other method is provided.
///
/// ```
/// use stride_nn::{Linear, Module, Mode, Parameter, Visitor, Relu};
/// use stride_core::{Result, Tensor};
///
/// struct TwoLayer { encoder: Linear, act: Relu, decoder: Linear, mode: Mode }
/// impl Module for TwoLayer {
///     fn forward(&self, x: &Tensor) -> Result<Tensor> {
///         self.decoder.forward(&self.act.forward(&self.encoder.forward(x)?)?)
///     }
///     fn visit(&self, v: &mut dyn Visitor) {
///         v.module("encoder", &self.encoder);
///         v.module("act", &self.act);
///         v.module("decoder", &self.decoder);
///     }
///     fn mode(&self) -> &Mode { &self.mode }
/// }
///
/// let m = TwoLayer { encoder: Linear::new(4, 3, true)?, act: Relu::default(),
///                    decoder: Linear::new(3, 4, false)?, mode: Mode::default() };
/// let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["encoder.weight", "encoder.bias", "decoder.weight"]);
/// assert_eq!(m.num_parameters(), 4 * 3 + 3 + 3 * 4);
/// m.eval();
/// assert!(!m.is_training() && !m.encoder.is_training());
/// # Ok::<(), stride_core::Error>(())
/// ```
pub trait Module: Send + Sync {
    /// The forward computation.
    fn forward(&self, input: &Tensor) -> Result<Tensor>;
    /// Reports this module's own parameters, buffers and direct submodules (not recursively).
    fn visit(&self, v: &mut dyn Visitor);
    /// This module's train/eval flag.
    fn mode(&self) -> &Mode;

    /// Every parameter with its dotted name (`encoder.weight`), children first-registered
    /// first; a parameter reachable twice (tied weights) is listed once, under its first name.
    fn named_parameters(&self) -> Vec<(String, Parameter)> {
        let mut w = Walk::default();
        self.visit_prefixed("", &mut w);
        w.params
    }
    fn parameters(&self) -> Vec<Parameter> {
        self.named_parameters()
            .into_iter()
            .map(|(_, p)| p)
            .collect()
    }
    /// Every buffer with its dotted name.
    fn named_buffers(&self) -> Vec<(String, Buffer)> {
        let mut w = Walk::default();
        self.visit_prefixed("", &mut w);
        w.buffers
    }
    /// Calls `f` on every descendant module (not `self`) with its dotted name, parents before
    /// their children.
    fn for_each_descendant(&self, f: &mut dyn FnMut(&str, &dyn Module)) {
        struct A<'f>(&'f mut dyn FnMut(&str, &dyn Module), String);
        impl Visitor for A<'_> {
            fn parameter(&mut self, _: &str, _: &Parameter) {}
            fn module(&mut self, name: &str, m: &dyn Module) {
                let full = join(&self.1, name);
                (self.0)(&full, m);
                let saved = std::mem::replace(&mut self.1, full);
                m.visit(self);
                self.1 = saved;
            }
        }
        self.visit(&mut A(f, String::new()));
    }

    /// Number of parameter elements (each shared parameter counted once).
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(|p| p.numel()).sum()
    }
    /// Number of elements of the parameters that require grad.
    fn num_trainable_parameters(&self) -> usize {
        self.parameters()
            .iter()
            .filter(|p| p.requires_grad())
            .map(|p| p.numel())
            .sum()
    }

    /// Sets training mode on this module and every descendant (`train(false)` = `eval()`).
    fn train(&self, on: bool) {
        self.mode().set(on);
        self.for_each_descendant(&mut |_, m| m.mode().set(on));
    }
    fn eval(&self) {
        self.train(false)
    }
    fn is_training(&self) -> bool {
        self.mode().get()
    }

    /// Sets every parameter's gradient to `None` (PyTorch ≥ 2.0's `zero_grad()`).
    fn zero_grad(&self) -> Result<()> {
        for p in self.parameters() {
            p.tensor().set_grad(None)?;
        }
        Ok(())
    }

    /// Converts every floating-point parameter and buffer to `dtype` (keeping layouts and
    /// converting existing gradients), in place behind their handles.
    fn to_dtype(&self, dtype: DType) -> Result<()> {
        if !dtype.is_float() {
            return Err(invalid(
                "Module::to_dtype",
                format!(
                    "{dtype} is not a floating-point dtype; modules only convert to float dtypes"
                ),
            ));
        }
        self.convert(&|t| {
            if t.dtype().is_float() {
                t.to_dtype(dtype)
            } else {
                Ok(t.clone())
            }
        })
    }
    /// Moves every parameter and buffer to `device`.
    fn to_device(&self, device: &Device) -> Result<()> {
        self.convert(&|t| t.to_device(device))
    }
    #[doc(hidden)]
    fn convert(&self, f: &dyn Fn(&Tensor) -> Result<Tensor>) -> Result<()> {
        let _ng = no_grad();
        // compute everything first so a failure leaves the module unchanged
        let params = self.named_parameters();
        let mut new_p = Vec::with_capacity(params.len());
        for (_, p) in &params {
            let t = p.tensor();
            let grad = match t.grad() {
                Some(g) => Some(f(&g)?),
                None => None,
            };
            new_p.push((f(&t)?, grad));
        }
        let bufs = self.named_buffers();
        let new_b: Vec<Tensor> = bufs
            .iter()
            .map(|(_, b)| f(&b.tensor()))
            .collect::<Result<_>>()?;
        for ((_, p), (t, g)) in params.iter().zip(new_p) {
            p.set_data(t)?;
            p.tensor().set_grad(g)?;
        }
        for ((_, b), t) in bufs.iter().zip(new_b) {
            b.set_data(t);
        }
        Ok(())
    }

    /// Parameters and persistent buffers by dotted name, as detached tensors sharing storage
    /// (PyTorch's `state_dict()`), in registration order.
    fn state_dict(&self) -> StateDict {
        let mut w = Walk::default();
        self.visit_prefixed("", &mut w);
        let mut sd = StateDict::default();
        for (n, p) in w.params_all {
            sd.insert(n, p.tensor().detach());
        }
        for (n, b) in w.buffers {
            if b.is_persistent() {
                sd.insert(n, b.tensor());
            }
        }
        sd
    }

    /// Copies `sd` into the parameters and buffers (converting dtypes as `copy_` does).
    ///
    /// `strict = true`: any missing, unexpected or mis-shaped key is an error naming them all,
    /// and nothing is loaded. `strict = false`: every key that matches by name and shape is
    /// loaded and the rest is reported in the returned [`LoadReport`]. (PyTorch raises on a
    /// shape mismatch even with `strict=False`; stride reports and skips it.)
    fn load_state_dict(&self, sd: &StateDict, strict: bool) -> Result<LoadReport> {
        let own = self.state_dict_targets();
        let mut report = LoadReport::default();
        let mut todo = vec![];
        for (name, target) in &own {
            match sd.get(name) {
                None => report.missing.push(name.clone()),
                Some(src) if src.shape() != target.tensor().shape() => {
                    report.mismatched.push(ShapeMismatch {
                        key: name.clone(),
                        expected: target.tensor().shape().to_vec(),
                        found: src.shape().to_vec(),
                    })
                }
                Some(src) => {
                    if src.device() != target.tensor().device() {
                        return Err(Error::DeviceMismatch {
                            op: "load_state_dict",
                            a: target.tensor().device(),
                            b: src.device(),
                        });
                    }
                    todo.push((target.clone(), src.clone()));
                }
            }
        }
        let known: HashSet<&str> = own.iter().map(|(n, _)| n.as_str()).collect();
        report.unexpected = sd
            .keys()
            .filter(|k| !known.contains(k))
            .map(|k| k.to_string())
            .collect();
        if strict && !report.is_clean() {
            return Err(invalid(
                "load_state_dict",
                format!("{report}; nothing was loaded (pass strict = false to load the keys that match and get this report instead)"),
            ));
        }
        let _ng = no_grad();
        for (target, src) in todo {
            target.tensor().copy_(&src)?;
        }
        Ok(report)
    }
    #[doc(hidden)]
    fn state_dict_targets(&self) -> Vec<(String, Target)> {
        let mut w = Walk::default();
        self.visit_prefixed("", &mut w);
        let mut v: Vec<(String, Target)> = w
            .params_all
            .into_iter()
            .map(|(n, p)| (n, Target::P(p)))
            .collect();
        v.extend(
            w.buffers
                .into_iter()
                .filter(|(_, b)| b.is_persistent())
                .map(|(n, b)| (n, Target::B(b))),
        );
        v
    }
    #[doc(hidden)]
    fn visit_prefixed(&self, prefix: &str, w: &mut Walk) {
        let saved = std::mem::replace(&mut w.prefix, prefix.to_string());
        self.visit(w);
        w.prefix = saved;
    }
}

#[doc(hidden)]
#[derive(Clone)]
pub enum Target {
    P(Parameter),
    B(Buffer),
}
impl Target {
    fn tensor(&self) -> Tensor {
        match self {
            Target::P(p) => p.tensor(),
            Target::B(b) => b.tensor(),
        }
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The recursive walk behind the provided methods of [`Module`].
#[doc(hidden)]
#[derive(Default)]
pub struct Walk {
    prefix: String,
    seen: HashSet<usize>,
    params: Vec<(String, Parameter)>,
    /// Every (name, parameter) pair, shared ones under each name (the state dict keeps both,
    /// as PyTorch's does).
    params_all: Vec<(String, Parameter)>,
    buffers: Vec<(String, Buffer)>,
}
impl Visitor for Walk {
    fn parameter(&mut self, name: &str, p: &Parameter) {
        let full = join(&self.prefix, name);
        if self.seen.insert(p.key()) {
            self.params.push((full.clone(), p.clone()));
        }
        self.params_all.push((full, p.clone()));
    }
    fn buffer(&mut self, name: &str, b: &Buffer) {
        self.buffers.push((join(&self.prefix, name), b.clone()));
    }
    fn module(&mut self, name: &str, m: &dyn Module) {
        let full = join(&self.prefix, name);
        m.visit_prefixed(&full, self);
    }
}

/// Named tensors in insertion order (PyTorch's `OrderedDict` state dict).
#[derive(Clone, Default)]
pub struct StateDict {
    entries: Vec<(String, Tensor)>,
}
impl StateDict {
    pub fn new() -> StateDict {
        StateDict::default()
    }
    /// Inserts or replaces `key` (a replaced key keeps its position).
    pub fn insert(&mut self, key: impl Into<String>, t: Tensor) {
        let key = key.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = t,
            None => self.entries.push((key, t)),
        }
    }
    pub fn get(&self, key: &str) -> Option<&Tensor> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, t)| t)
    }
    pub fn remove(&mut self, key: &str) -> Option<Tensor> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.entries.iter().map(|(k, t)| (k.as_str(), t))
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// A deep copy (each tensor cloned, keeping its strides): a snapshot that later training
    /// does not change.
    pub fn deep_clone(&self) -> Result<StateDict> {
        let _ng = no_grad();
        Ok(StateDict {
            entries: self
                .entries
                .iter()
                .map(|(k, t)| Ok((k.clone(), t.clone_tensor()?)))
                .collect::<Result<_>>()?,
        })
    }
    /// Writes the state dict to a safetensors file (loadable by PyTorch's
    /// `safetensors.torch.load_file`), tensors in any layout saved as their values.
    pub fn save_safetensors(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        crate::safetensors::save(self.iter(), None, path)
    }
    /// Reads a state dict from a safetensors file (e.g. one written by PyTorch's
    /// `safetensors.torch.save_file(model.state_dict(), path)`); keys in the file's order
    /// (sorted by name, as the format stores them). Load it into a module with
    /// [`Module::load_state_dict`].
    pub fn load_safetensors(path: impl AsRef<std::path::Path>) -> Result<StateDict> {
        Ok(crate::safetensors::load(path)?.into_iter().collect())
    }
}
impl std::fmt::Debug for StateDict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(k, t)| (k, t.shape())))
            .finish()
    }
}
impl FromIterator<(String, Tensor)> for StateDict {
    fn from_iter<I: IntoIterator<Item = (String, Tensor)>>(iter: I) -> Self {
        let mut sd = StateDict::default();
        for (k, t) in iter {
            sd.insert(k, t);
        }
        sd
    }
}

/// A key whose tensor has another shape than the module's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeMismatch {
    pub key: String,
    pub expected: Vec<usize>,
    pub found: Vec<usize>,
}

/// What [`Module::load_state_dict`] could not load.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Keys of the module absent from the state dict (left unchanged).
    pub missing: Vec<String>,
    /// Keys of the state dict the module does not have (ignored).
    pub unexpected: Vec<String>,
    /// Keys present in both with different shapes (left unchanged).
    pub mismatched: Vec<ShapeMismatch>,
}
impl LoadReport {
    /// Whether every key matched.
    pub fn is_clean(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.mismatched.is_empty()
    }
}
impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_clean() {
            return write!(f, "all keys matched");
        }
        let mut parts = vec![];
        if !self.missing.is_empty() {
            parts.push(format!("missing keys: {}", self.missing.join(", ")));
        }
        if !self.unexpected.is_empty() {
            parts.push(format!("unexpected keys: {}", self.unexpected.join(", ")));
        }
        for m in &self.mismatched {
            parts.push(format!(
                "size mismatch for {}: the state dict has shape {:?}, the module has {:?}",
                m.key, m.found, m.expected
            ));
        }
        write!(f, "{}", parts.join("; "))
    }
}
