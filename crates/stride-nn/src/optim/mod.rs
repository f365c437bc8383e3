//! Optimizers ([`Sgd`], [`Adam`]/AdamW, and [`ZeroRedundancyOptimizer`], which shards any of
//! them over the ranks of a data-parallel run), LR schedulers, gradient clipping, the gradient
//! scaler of f16 training ([`GradScaler`]) and the update-health check.
//!
//! The update math is PyTorch's single-tensor (`foreach=False`) implementation, operation for
//! operation, so f64 trajectories match PyTorch's. Optimizer state (momentum buffers, Adam
//! moments) is created with `zeros_like(Preserve)` — the parameter's strides — and every
//! update is written in place through the parameter's own layout, whatever its strides: a
//! transposed weight trains exactly as a contiguous one.
//!
//! ```
//! use stride_nn::{optim::{Adam, AdamConfig, Optimizer}, Linear, Module, loss};
//! use stride_core::{DType, Device, Tensor};
//! let model = Linear::new(3, 1, true)?;
//! let mut opt = Adam::new(model.named_parameters(), AdamConfig { lr: 1e-2, ..Default::default() })?;
//! let x = Tensor::ones([8, 3], DType::F32, &Device::Cpu)?;
//! let y = Tensor::zeros([8, 1], DType::F32, &Device::Cpu)?;
//! for _ in 0..3 {
//!     opt.zero_grad()?;
//!     let l = loss::mse_loss(&model.forward(&x)?, &y, loss::Reduction::Mean)?;
//!     l.backward()?;
//!     opt.step()?;
//! }
//! # Ok::<(), stride_core::Error>(())
//! ```

//!
//! ## Comparing against recorded trajectories
//!
//! A golden test (PyTorch's trajectories saved per step) needs only the public API: build the
//! model from the recorded initial parameters (`load_state_dict`), then for each step
//! `zero_grad`, forward, `backward`, `step`, and compare [`snapshot`]`(&opt)` — the
//! parameters by their dotted names — with the recorded arrays of that step. Optimizer state
//! can be compared too, through [`Optimizer::state_dict`] (`exp_avg`, `exp_avg_sq`,
//! `max_exp_avg_sq`, `momentum_buffer`, `step`, keyed by parameter position as PyTorch's).

mod adam;
mod clip;
mod grad_scaler;
mod health;
mod scheduler;
mod sgd;
mod zero;

pub use adam::{Adam, AdamAlgorithm, AdamConfig, AdamState, AdamW};
pub use clip::{clip_grad_norm_, clip_grad_value_};
pub use grad_scaler::{GradScaler, GradScalerConfig};
pub use health::{HealthIssue, HealthReport, IssueKind};
pub use scheduler::{
    Anneal, CosineWithWarmup, ExponentialLr, LinearLr, LrScheduler, OneCycleLr, StepLr,
};
pub use sgd::{Sgd, SgdAlgorithm, SgdConfig, SgdState};
pub use zero::ZeroRedundancyOptimizer;

use crate::invalid;
use crate::module::{Parameter, StateDict};
use health::HealthState;
use std::collections::{BTreeMap, HashSet};
use stride_core::autograd::no_grad;
use stride_core::{DType, Result, Tensor};

/// A named parameter as optimizers take them (`module.named_parameters()`).
pub type NamedParameter = (String, Parameter);

/// Parameters that share hyperparameters (PyTorch's `param_groups` entries).
#[derive(Clone)]
pub struct ParamGroup<C> {
    pub params: Vec<NamedParameter>,
    pub config: C,
}
impl<C> ParamGroup<C> {
    pub fn new(params: Vec<NamedParameter>, config: C) -> ParamGroup<C> {
        ParamGroup { params, config }
    }
}

/// Unnamed parameters get the names `"param0"`, `"param1"`, … (used by health reports).
pub fn name_params(params: Vec<Parameter>) -> Vec<NamedParameter> {
    params
        .into_iter()
        .enumerate()
        .map(|(i, p)| (format!("param{i}"), p))
        .collect()
}

/// An optimizer's state as plain data (PyTorch's `optimizer.state_dict()`): per-parameter
/// state by the parameter's position across groups, and each group's hyperparameters.
#[derive(Clone, Debug, Default)]
pub struct OptimizerStateDict {
    /// Position → state name (`"step"`, `"exp_avg"`, `"momentum_buffer"`, …) → tensor.
    pub state: BTreeMap<usize, BTreeMap<String, Tensor>>,
    /// Per group: hyperparameters by PyTorch's names (booleans as 0/1, `betas` as
    /// `beta1`/`beta2`) and the positions of its parameters.
    pub param_groups: Vec<(BTreeMap<String, f64>, Vec<usize>)>,
}

/// What every optimizer offers (PyTorch's `torch.optim.Optimizer`).
pub trait Optimizer {
    /// One update of every parameter that has a gradient.
    fn step(&mut self) -> Result<()>;
    /// [`Optimizer::step`] unless `found_inf` (a 0-d f32 tensor on the parameters' device) is
    /// nonzero: what a [`GradScaler`] steps with. Adam and AdamW decide on the device (no host
    /// wait; their step counts move on the device too); other algorithms read `found_inf` once
    /// (a host wait, as PyTorch's non-fused optimizers do under a `GradScaler`) — as this
    /// default does for an optimizer of your own.
    fn step_unless(&mut self, found_inf: &Tensor) -> Result<()> {
        match flag_set(found_inf)? {
            false => self.step(),
            true => Ok(()),
        }
    }
    /// Sets every gradient to `None` (PyTorch ≥ 2.0's default).
    fn zero_grad(&mut self) -> Result<()> {
        self.zero_grad_with(true)
    }
    /// `set_to_none = false` fills existing gradients with zeros instead.
    fn zero_grad_with(&mut self, set_to_none: bool) -> Result<()>;
    fn num_groups(&self) -> usize;
    /// Each group's learning rate.
    fn lrs(&self) -> Vec<f64>;
    /// Sets a group's learning rate (an error for a group that doesn't exist).
    fn set_lr(&mut self, group: usize, lr: f64) -> Result<()>;
    /// Each group's momentum as a one-cycle schedule cycles it: SGD's `momentum`, Adam's
    /// `beta1`.
    fn momenta(&self) -> Vec<f64>;
    fn set_momentum(&mut self, group: usize, m: f64) -> Result<()>;
    /// Every parameter with its name, in group order.
    fn named_params(&self) -> Vec<NamedParameter>;
    /// The optimizer's state and hyperparameters (copies, not live views).
    fn state_dict(&self) -> Result<OptimizerStateDict>;
    /// Restores what [`Optimizer::state_dict`] saved, for an optimizer over the same
    /// parameters in the same groups; state tensors are copied into tensors with each
    /// parameter's strides. Everything is checked before anything changes: on error the
    /// optimizer is unchanged.
    fn load_state_dict(&mut self, sd: &OptimizerStateDict) -> Result<()>;
    /// Turns the update-health check on or off (off by default).
    fn set_health_check(&mut self, on: bool);
    /// The report of the last checked `step()`, when the check is on.
    fn health(&self) -> Option<&HealthReport>;
}

/// Whether a gradient scaler's `found_inf` flag is set, read back (a host wait).
fn flag_set(found_inf: &Tensor) -> Result<bool> {
    Ok(found_inf.item_f64()? != 0.0)
}

/// One optimizer algorithm: its hyperparameters, per-parameter state and update.
pub trait Algorithm {
    type Config: Clone;
    type State;
    const NAME: &'static str;
    fn lr(c: &Self::Config) -> f64;
    fn set_lr(c: &mut Self::Config, lr: f64);
    fn momentum(c: &Self::Config) -> f64;
    fn set_momentum(c: &mut Self::Config, m: f64);
    fn validate(c: &Self::Config) -> Result<()>;
    /// Updates `param` (written in place through its layout) from `grad`. Runs under no_grad.
    fn update(
        c: &Self::Config,
        param: &Tensor,
        grad: &Tensor,
        state: &mut Option<Self::State>,
    ) -> Result<()>;
    /// Updates every parameter of one group that has a gradient: `items` holds each one's
    /// index in the group, the tensor to write and its gradient; `states` is the group's
    /// state, by index. The default calls [`Algorithm::update`] per parameter; an algorithm
    /// with a multi-tensor kernel steps them together. Runs under no_grad.
    fn update_all(
        c: &Self::Config,
        items: &[(usize, Tensor, Tensor)],
        states: &mut [Option<Self::State>],
    ) -> Result<()> {
        for (i, param, grad) in items {
            Self::update(c, param, grad, &mut states[*i])?;
        }
        Ok(())
    }
    /// [`Algorithm::update_all`] unless `found_inf` (0-d f32) is nonzero. The default reads
    /// the flag (a host wait); an algorithm that can skip on the device overrides it.
    fn update_all_unless(
        c: &Self::Config,
        items: &[(usize, Tensor, Tensor)],
        states: &mut [Option<Self::State>],
        found_inf: &Tensor,
    ) -> Result<()> {
        if !flag_set(found_inf)? {
            Self::update_all(c, items, states)?;
        }
        Ok(())
    }
    /// Tensors to check for finiteness after a step.
    fn moments(s: &Self::State) -> Vec<(&'static str, Tensor)>;
    /// Bytes of device memory one parameter's state holds. The default counts the
    /// [`Algorithm::moments`] (for Adam the moments, not its 16-byte device step counter).
    fn state_bytes(s: &Self::State) -> usize {
        Self::moments(s)
            .iter()
            .map(|(_, t)| t.numel() * t.element_size())
            .sum()
    }
    fn state_to_dict(s: &Self::State) -> Result<BTreeMap<String, Tensor>>;
    fn state_from_dict(
        d: &BTreeMap<String, Tensor>,
        param: &Tensor,
        c: &Self::Config,
    ) -> Result<Self::State>;
    fn config_to_dict(c: &Self::Config) -> BTreeMap<String, f64>;
    fn config_from_dict(d: &BTreeMap<String, f64>, base: &Self::Config) -> Result<Self::Config>;
}

/// An optimizer: parameter groups, per-parameter state, and the algorithm `A`.
pub struct Optim<A: Algorithm> {
    groups: Vec<ParamGroup<A::Config>>,
    state: Vec<Vec<Option<A::State>>>,
    health: HealthState,
    dropped: HashSet<String>,
    /// With master weights on, the f32 copy of each f16/bf16 parameter (after its first step)
    /// and the parameter's version when the copy was last written into it.
    masters: Option<Vec<Vec<Option<Master>>>>,
}

/// A parameter's f32 master copy, and the parameter's version when the copy was last written
/// into it.
type Master = (Tensor, u64);

/// Whether a parameter of this dtype gets an f32 master copy.
fn wants_master(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

impl<A: Algorithm> Optim<A> {
    /// One group of `params` (from `module.named_parameters()`, or [`name_params`]).
    pub fn new(params: Vec<NamedParameter>, config: A::Config) -> Result<Optim<A>> {
        Optim::with_groups(vec![ParamGroup::new(params, config)])
    }
    /// Several groups, each with its own hyperparameters.
    pub fn with_groups(groups: Vec<ParamGroup<A::Config>>) -> Result<Optim<A>> {
        let mut seen = HashSet::new();
        for g in &groups {
            A::validate(&g.config)?;
            for (n, p) in &g.params {
                if !seen.insert(p.key()) {
                    return Err(invalid(
                        "optimizer",
                        format!("parameter {n} appears in more than one place; some parameters appear in more than one parameter group"),
                    ));
                }
                if !p.tensor().dtype().is_float() {
                    return Err(invalid(
                        "optimizer",
                        format!(
                            "parameter {n} is {}; optimizers update float tensors only",
                            p.tensor().dtype()
                        ),
                    ));
                }
            }
        }
        let state = groups
            .iter()
            .map(|g| g.params.iter().map(|_| None).collect())
            .collect();
        Ok(Optim {
            groups,
            state,
            health: HealthState::default(),
            dropped: HashSet::new(),
            masters: None,
        })
    }
    /// f32 master weights for f16/bf16 parameters (mixed-precision training with half
    /// parameters): the optimizer keeps an f32 copy of each, steps the copy with the gradient
    /// in f32 (its state — momenta, moments — is f32 too) and writes the copy, rounded, into
    /// the parameter after each step, so updates smaller than the parameter's precision
    /// accumulate instead of being lost. f32/f64 parameters are stepped as they are. The
    /// copies are saved in the state dict (`"master_param"`). A parameter written outside the
    /// optimizer (a loaded checkpoint) is read into its copy again at the next step, so
    /// restore a model before its optimizer's state dict. Set before the first step.
    ///
    /// ```
    /// use stride_nn::{optim::{Optimizer, Sgd, SgdConfig}, Parameter};
    /// use stride_core::{DType, Device, Tensor};
    /// let p = Parameter::new(Tensor::ones([1], DType::BF16, &Device::Cpu)?)?;
    /// let mut opt = Sgd::new(vec![("w".into(), p.clone())], SgdConfig { lr: 1e-3, ..Default::default() })?;
    /// opt.set_master_weights(true)?;
    /// for _ in 0..4 {
    ///     p.tensor().set_grad(Some(Tensor::ones([1], DType::BF16, &Device::Cpu)?))?;
    ///     opt.step()?;          // 1 − 0.001 rounds back to 1 in bf16; the master keeps it
    /// }
    /// let w = p.tensor().to_dtype(DType::F32)?.item::<f32>()?;
    /// assert_eq!(w, 0.99609375);  // 1 − 0.004, rounded to bf16 once
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn set_master_weights(&mut self, on: bool) -> Result<()> {
        if self.state.iter().flatten().any(|s| s.is_some()) {
            return Err(invalid(
                "set_master_weights",
                "the optimizer has already stepped; choose master weights before the first step (or load a state dict after choosing)",
            ));
        }
        self.masters = on.then(|| {
            self.groups
                .iter()
                .map(|g| g.params.iter().map(|_| None).collect())
                .collect()
        });
        Ok(())
    }
    /// The f32 master copy of the parameter named `name`, when master weights are on and it
    /// has stepped.
    pub fn master_of(&self, name: &str) -> Option<&Tensor> {
        let masters = self.masters.as_ref()?;
        for (g, group) in self.groups.iter().enumerate() {
            for (i, (n, _)) in group.params.iter().enumerate() {
                if n == name {
                    return masters[g][i].as_ref().map(|(m, _)| m);
                }
            }
        }
        None
    }
    /// The tensor the algorithm steps for parameter `(g, i)` holding `t`: its master copy
    /// (made now on its first step) or `t` itself.
    fn stepped_tensor(&mut self, g: usize, i: usize, t: &Tensor) -> Result<Option<Tensor>> {
        let Some(masters) = self.masters.as_mut() else {
            return Ok(None);
        };
        if !wants_master(t.dtype()) {
            return Ok(None);
        }
        // a parameter written outside the optimizer since (a loaded checkpoint, an edit) is
        // read into its copy again: the copy must never overwrite it with stale values
        let fresh = matches!(&masters[g][i], Some((_, v)) if *v == t.version());
        if !fresh {
            masters[g][i] = Some((t.detach().to_dtype(DType::F32)?, t.version()));
        }
        Ok(masters[g][i].as_ref().map(|(m, _)| m.clone()))
    }
    /// Adds a group (PyTorch's `add_param_group`).
    pub fn add_param_group(&mut self, group: ParamGroup<A::Config>) -> Result<()> {
        A::validate(&group.config)?;
        for (n, p) in &group.params {
            if self
                .groups
                .iter()
                .any(|g| g.params.iter().any(|(_, q)| q.same(p)))
            {
                return Err(invalid(
                    "add_param_group",
                    format!("parameter {n} is already in another parameter group"),
                ));
            }
        }
        self.state.push(group.params.iter().map(|_| None).collect());
        if let Some(m) = self.masters.as_mut() {
            m.push(group.params.iter().map(|_| None).collect());
        }
        self.groups.push(group);
        Ok(())
    }
    pub fn param_groups(&self) -> &[ParamGroup<A::Config>] {
        &self.groups
    }
    /// Mutable hyperparameters of a group (the parameter lists stay fixed).
    pub fn config_mut(&mut self, group: usize) -> Result<&mut A::Config> {
        let n = self.groups.len();
        Ok(&mut self
            .groups
            .get_mut(group)
            .ok_or_else(|| no_group(group, n))?
            .config)
    }
    /// Bytes of optimizer state this optimizer holds: every parameter's
    /// [`Algorithm::state_bytes`] (Adam's two moments, SGD's momentum buffer) and the f32
    /// master copies (see [`Optim::set_master_weights`]). State is made at a parameter's first
    /// step, so this is 0 before the first step. [`ZeroRedundancyOptimizer::state_bytes`]
    /// is this rank's share of it.
    pub fn state_bytes(&self) -> usize {
        let states: usize = self
            .state
            .iter()
            .flatten()
            .flatten()
            .map(|s| A::state_bytes(s))
            .sum();
        let masters: usize = self
            .masters
            .iter()
            .flatten()
            .flatten()
            .flatten()
            .map(|(m, _)| m.numel() * m.element_size())
            .sum();
        states + masters
    }
    /// The state of the parameter named `name` (after its first step).
    pub fn state_of(&self, name: &str) -> Option<&A::State> {
        for (g, group) in self.groups.iter().enumerate() {
            for (i, (n, _)) in group.params.iter().enumerate() {
                if n == name {
                    return self.state[g][i].as_ref();
                }
            }
        }
        None
    }

    /// FAULT INJECTION FOR TESTS: the next steps compute `name`'s update into a copy of the
    /// parameter that is then dropped — exactly the bug the update-health check exists to
    /// catch (an in-place kernel that writes into a temporary for a non-contiguous tensor).
    #[doc(hidden)]
    pub fn inject_dropped_update(&mut self, name: &str) {
        self.dropped.insert(name.to_string());
    }
}

impl<A: Algorithm> Optim<A> {
    /// `step()` (`found_inf` None) or `step_unless(found_inf)`.
    fn step_with(&mut self, found_inf: Option<&Tensor>) -> Result<()> {
        let _ng = no_grad();
        let checking = self.health.enabled;
        // the health check reads values anyway; it needs to know whether a step is due
        let skipped = match (checking, found_inf) {
            (true, Some(f)) => flag_set(f)?,
            _ => false,
        };
        let mut snapshots = vec![];
        for g in 0..self.groups.len() {
            let mut items = vec![];
            let mut mastered = vec![];
            for i in 0..self.groups[g].params.len() {
                let (name, p) = &self.groups[g].params[i];
                let (name, t) = (name.clone(), p.tensor());
                let Some(mut grad) = t.grad() else { continue };
                // with master weights the algorithm steps the f32 copy with an f32 gradient
                let stepped = match self.stepped_tensor(g, i, &t)? {
                    Some(m) => {
                        grad = grad.to_dtype(DType::F32)?;
                        mastered.push((i, t.detach(), m.clone()));
                        m
                    }
                    None => t.detach(),
                };
                let group = &self.groups[g];
                if checking {
                    // with lr = 0 (or a skipped step) no update is due, so an unchanged
                    // parameter is no finding
                    let expect_change = A::lr(&group.config) != 0.0 && !skipped;
                    snapshots.push(health::Snapshot::take(
                        &name,
                        &stepped,
                        &grad,
                        g,
                        i,
                        expect_change,
                    )?);
                }
                let target = if self.dropped.contains(&name) {
                    stepped.clone_tensor()?
                } else {
                    stepped
                };
                items.push((i, target, grad));
            }
            let config = &self.groups[g].config;
            match found_inf {
                None => A::update_all(config, &items, &mut self.state[g])?,
                Some(f) => A::update_all_unless(config, &items, &mut self.state[g], f)?,
            }
            for (i, param, master) in mastered {
                param.copy_(&master)?;
                if let Some(Some(entry)) = self.masters.as_mut().map(|m| &mut m[g][i]) {
                    entry.1 = param.version();
                }
            }
        }
        if checking {
            let mut report = HealthReport::default();
            for s in snapshots {
                let t = match self
                    .masters
                    .as_ref()
                    .and_then(|m| m[s.group][s.index].as_ref().map(|(m, _)| m.clone()))
                {
                    Some(m) => m,
                    None => self.groups[s.group].params[s.index].1.tensor(),
                };
                let moments = self.state[s.group][s.index]
                    .as_ref()
                    .map(A::moments)
                    .unwrap_or_default();
                s.check(&t, &moments, &mut report)?;
            }
            self.health.last = Some(report);
        }
        Ok(())
    }
}

impl<A: Algorithm> Optimizer for Optim<A> {
    fn step(&mut self) -> Result<()> {
        self.step_with(None)
    }
    fn step_unless(&mut self, found_inf: &Tensor) -> Result<()> {
        self.step_with(Some(found_inf))
    }
    fn zero_grad_with(&mut self, set_to_none: bool) -> Result<()> {
        for group in &self.groups {
            for (_, p) in &group.params {
                let t = p.tensor();
                if set_to_none {
                    t.set_grad(None)?;
                } else {
                    t.zero_grad()?;
                }
            }
        }
        Ok(())
    }
    fn num_groups(&self) -> usize {
        self.groups.len()
    }
    fn lrs(&self) -> Vec<f64> {
        self.groups.iter().map(|g| A::lr(&g.config)).collect()
    }
    fn set_lr(&mut self, group: usize, lr: f64) -> Result<()> {
        let n = self.groups.len();
        let g = self
            .groups
            .get_mut(group)
            .ok_or_else(|| no_group(group, n))?;
        A::set_lr(&mut g.config, lr);
        Ok(())
    }
    fn momenta(&self) -> Vec<f64> {
        self.groups.iter().map(|g| A::momentum(&g.config)).collect()
    }
    fn set_momentum(&mut self, group: usize, m: f64) -> Result<()> {
        let n = self.groups.len();
        let g = self
            .groups
            .get_mut(group)
            .ok_or_else(|| no_group(group, n))?;
        A::set_momentum(&mut g.config, m);
        Ok(())
    }
    fn named_params(&self) -> Vec<NamedParameter> {
        self.groups
            .iter()
            .flat_map(|g| g.params.iter().cloned())
            .collect()
    }
    fn state_dict(&self) -> Result<OptimizerStateDict> {
        let mut sd = OptimizerStateDict::default();
        let mut pos = 0;
        for (g, group) in self.groups.iter().enumerate() {
            let mut ids = vec![];
            for i in 0..group.params.len() {
                if let Some(s) = &self.state[g][i] {
                    let mut d = A::state_to_dict(s)?;
                    if let Some((m, _)) = self.masters.as_ref().and_then(|m| m[g][i].as_ref()) {
                        d.insert("master_param".into(), m.clone_tensor()?);
                    }
                    sd.state.insert(pos, d);
                }
                ids.push(pos);
                pos += 1;
            }
            sd.param_groups
                .push((A::config_to_dict(&group.config), ids));
        }
        Ok(sd)
    }
    fn load_state_dict(&mut self, sd: &OptimizerStateDict) -> Result<()> {
        let op = "Optimizer::load_state_dict";
        if sd.param_groups.len() != self.groups.len() {
            return Err(invalid(
                op,
                format!(
                    "the state dict has {} parameter groups, this {} optimizer has {}",
                    sd.param_groups.len(),
                    A::NAME,
                    self.groups.len()
                ),
            ));
        }
        let mut configs = vec![];
        let mut states: Vec<Vec<Option<A::State>>> = vec![];
        let mut masters: Vec<Vec<Option<Master>>> = vec![];
        for (g, (group, (hp, ids))) in self.groups.iter().zip(&sd.param_groups).enumerate() {
            if ids.len() != group.params.len() {
                return Err(invalid(
                    op,
                    format!("parameter group {g} has {} parameters in the state dict but {} in the optimizer", ids.len(), group.params.len()),
                ));
            }
            let config = A::config_from_dict(hp, &group.config)?;
            A::validate(&config)?;
            configs.push(config);
            let mut row = vec![];
            let mut master_row = vec![];
            for (i, (name, p)) in group.params.iter().enumerate() {
                let id = ids[i];
                let at = |e: stride_core::Error| {
                    invalid(
                        op,
                        format!("state of parameter {name} (position {id}): {e}"),
                    )
                };
                let t = p.tensor();
                // with master weights a half parameter's state (and copy) is f32
                let master = match sd.state.get(&id) {
                    Some(d) if self.masters.is_some() && wants_master(t.dtype()) => {
                        let template = t.detach().to_dtype(DType::F32)?;
                        Some(match d.contains_key("master_param") {
                            true => load_state_tensor(d, "master_param", &template).map_err(at)?,
                            false => template,
                        })
                    }
                    _ => None,
                };
                row.push(match sd.state.get(&id) {
                    None => None,
                    Some(d) => Some(
                        A::state_from_dict(d, master.as_ref().unwrap_or(&t), &configs[g])
                            .map_err(at)?,
                    ),
                });
                master_row.push(master.map(|m| (m, t.version())));
            }
            states.push(row);
            masters.push(master_row);
        }
        for (group, c) in self.groups.iter_mut().zip(configs) {
            group.config = c;
        }
        self.state = states;
        if self.masters.is_some() {
            self.masters = Some(masters);
        }
        Ok(())
    }
    fn set_health_check(&mut self, on: bool) {
        self.health.enabled = on;
        if !on {
            self.health.last = None;
        }
    }
    fn health(&self) -> Option<&HealthReport> {
        self.health.last.as_ref()
    }
}

/// A state tensor loaded into the parameter's layout (zeros_like(Preserve) + copy), after
/// checking its shape.
pub(crate) fn load_state_tensor(
    d: &BTreeMap<String, Tensor>,
    key: &str,
    param: &Tensor,
) -> Result<Tensor> {
    let src = d.get(key).ok_or_else(|| {
        invalid(
            "Optimizer::load_state_dict",
            format!("the state has no {key:?} entry"),
        )
    })?;
    if src.shape() != param.shape() {
        return Err(invalid(
            "Optimizer::load_state_dict",
            format!(
                "{key} has shape {:?} but the parameter has shape {:?}",
                src.shape(),
                param.shape()
            ),
        ));
    }
    let t = param.zeros_like(stride_core::MemoryFormat::Preserve)?;
    t.copy_(src)?;
    Ok(t)
}

/// Deep copies of an optimizer's parameters by name — what a trajectory test compares after
/// each step (e.g. against PyTorch's values saved as `"{name}"` arrays per step).
pub fn snapshot(opt: &dyn Optimizer) -> Result<StateDict> {
    let _ng = no_grad();
    opt.named_params()
        .into_iter()
        .map(|(n, p)| Ok((n, p.tensor().detach().clone_tensor()?)))
        .collect()
}

fn no_group(group: usize, n: usize) -> stride_core::Error {
    invalid(
        "optimizer",
        format!("there is no parameter group {group}; the optimizer has {n}"),
    )
}

pub(crate) fn get_f64(d: &BTreeMap<String, f64>, key: &str, base: f64) -> f64 {
    d.get(key).copied().unwrap_or(base)
}
