//! Learning-rate schedulers, computed as PyTorch computes them (the same recursive or closed
//! forms, so the learning rates agree to the last bit where PyTorch's are exact).
//!
//! A scheduler is created on an optimizer (which sets the step-0 learning rate, as PyTorch's
//! constructors do) and stepped after each `optimizer.step()`:
//!
//! ```
//! use stride_nn::optim::{LrScheduler, Optimizer, Sgd, SgdConfig, StepLr};
//! use stride_nn::Parameter;
//! use stride_core::Tensor;
//! let p = Parameter::new(Tensor::zeros([2], stride_core::DType::F32, &stride_core::Device::Cpu)?)?;
//! let mut opt = Sgd::new(vec![("p".into(), p)], SgdConfig { lr: 1.0, ..Default::default() })?;
//! let mut sched = StepLr::new(&mut opt, 2, 0.5);
//! let mut lrs = vec![];
//! for _ in 0..5 { lrs.push(opt.lrs()[0]); /* train… opt.step() */ sched.step(&mut opt)?; }
//! assert_eq!(lrs, [1.0, 1.0, 0.5, 0.5, 0.25]);
//! # Ok::<(), stride_core::Error>(())
//! ```

use super::Optimizer;
use crate::invalid;
use std::f64::consts::PI;
use stride_core::Result;

/// A learning-rate schedule over an optimizer's groups.
pub trait LrScheduler {
    /// Advances one step (`last_epoch += 1`) and sets every group's learning rate.
    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()>;
    /// The learning rates set by the last step.
    fn last_lr(&self) -> &[f64];
    /// Steps taken (0 right after construction, as PyTorch's `last_epoch`).
    fn last_epoch(&self) -> usize;
}

fn lrs(opt: &dyn Optimizer) -> Vec<f64> {
    opt.lrs()
}
fn set_all(opt: &mut dyn Optimizer, lrs: &[f64]) -> Result<()> {
    for (g, &lr) in lrs.iter().enumerate() {
        opt.set_lr(g, lr)?;
    }
    Ok(())
}
fn check_groups(opt: &dyn Optimizer, n: usize) -> Result<()> {
    if opt.num_groups() != n {
        return Err(invalid(
            "LrScheduler::step",
            format!(
                "the scheduler was made for {n} parameter groups but the optimizer has {}",
                opt.num_groups()
            ),
        ));
    }
    Ok(())
}

/// Multiplies the learning rate by `gamma` every `step_size` steps (PyTorch's `StepLR`, in
/// its recursive form `lr ← lr·gamma`).
pub struct StepLr {
    step_size: usize,
    gamma: f64,
    last_epoch: usize,
    last: Vec<f64>,
}
impl StepLr {
    pub fn new(opt: &mut dyn Optimizer, step_size: usize, gamma: f64) -> StepLr {
        StepLr {
            step_size: step_size.max(1),
            gamma,
            last_epoch: 0,
            last: lrs(opt),
        }
    }
}
impl LrScheduler for StepLr {
    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        check_groups(opt, self.last.len())?;
        self.last_epoch += 1;
        let mut v = lrs(opt);
        if self.last_epoch.is_multiple_of(self.step_size) {
            v.iter_mut().for_each(|lr| *lr *= self.gamma);
        }
        set_all(opt, &v)?;
        self.last = v;
        Ok(())
    }
    fn last_lr(&self) -> &[f64] {
        &self.last
    }
    fn last_epoch(&self) -> usize {
        self.last_epoch
    }
}

/// `lr ← lr·gamma` every step (PyTorch's `ExponentialLR`).
pub struct ExponentialLr {
    gamma: f64,
    last_epoch: usize,
    last: Vec<f64>,
}
impl ExponentialLr {
    pub fn new(opt: &mut dyn Optimizer, gamma: f64) -> ExponentialLr {
        ExponentialLr {
            gamma,
            last_epoch: 0,
            last: lrs(opt),
        }
    }
}
impl LrScheduler for ExponentialLr {
    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        check_groups(opt, self.last.len())?;
        self.last_epoch += 1;
        let v: Vec<f64> = lrs(opt).iter().map(|lr| lr * self.gamma).collect();
        set_all(opt, &v)?;
        self.last = v;
        Ok(())
    }
    fn last_lr(&self) -> &[f64] {
        &self.last
    }
    fn last_epoch(&self) -> usize {
        self.last_epoch
    }
}

/// Linear warmup (PyTorch's `LinearLR`): the factor goes linearly from `start_factor` to
/// `end_factor` over `total_iters` steps, then stays; computed by PyTorch's recursive form.
/// PyTorch's defaults are `(1/3, 1.0, 5)`.
pub struct LinearLr {
    start_factor: f64,
    end_factor: f64,
    total_iters: usize,
    last_epoch: usize,
    last: Vec<f64>,
}
impl LinearLr {
    pub fn new(
        opt: &mut dyn Optimizer,
        start_factor: f64,
        end_factor: f64,
        total_iters: usize,
    ) -> Result<LinearLr> {
        let ok = start_factor > 0.0 && start_factor <= 1.0 && (0.0..=1.0).contains(&end_factor);
        if !ok {
            return Err(invalid(
                "LinearLR",
                format!("start_factor must be in (0, 1] and end_factor in [0, 1], got {start_factor} and {end_factor}"),
            ));
        }
        let v: Vec<f64> = lrs(opt).iter().map(|lr| lr * start_factor).collect();
        set_all(opt, &v)?;
        Ok(LinearLr {
            start_factor,
            end_factor,
            total_iters,
            last_epoch: 0,
            last: v,
        })
    }
}
impl LrScheduler for LinearLr {
    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        check_groups(opt, self.last.len())?;
        self.last_epoch += 1;
        let mut v = lrs(opt);
        if self.last_epoch <= self.total_iters {
            let (s, e) = (self.start_factor, self.end_factor);
            let f = 1.0
                + (e - s)
                    / (self.total_iters as f64 * s + (self.last_epoch as f64 - 1.0) * (e - s));
            v.iter_mut().for_each(|lr| *lr *= f);
        }
        set_all(opt, &v)?;
        self.last = v;
        Ok(())
    }
    fn last_lr(&self) -> &[f64] {
        &self.last
    }
    fn last_epoch(&self) -> usize {
        self.last_epoch
    }
}

/// Linear warmup from 0 over `warmup_steps`, then a cosine decay to 0 at `total_steps`
/// (`num_cycles = 0.5`) — Hugging Face's `get_cosine_schedule_with_warmup`, a PyTorch
/// `LambdaLR`: `lr = base_lr · λ(step)` with
/// `λ = step / max(1, warmup)` during warmup, else
/// `max(0, 0.5·(1 + cos(π·2·num_cycles·progress)))`,
/// `progress = (step − warmup) / max(1, total − warmup)`.
pub struct CosineWithWarmup {
    base: Vec<f64>,
    warmup_steps: usize,
    total_steps: usize,
    num_cycles: f64,
    last_epoch: usize,
    last: Vec<f64>,
}
impl CosineWithWarmup {
    pub fn new(
        opt: &mut dyn Optimizer,
        warmup_steps: usize,
        total_steps: usize,
    ) -> Result<CosineWithWarmup> {
        let base = lrs(opt);
        let mut s = CosineWithWarmup {
            base,
            warmup_steps,
            total_steps,
            num_cycles: 0.5,
            last_epoch: 0,
            last: vec![],
        };
        s.apply(opt)?;
        Ok(s)
    }
    /// The multiplier λ at `step`.
    pub fn factor(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return step as f64 / self.warmup_steps.max(1) as f64;
        }
        let progress = (step - self.warmup_steps) as f64
            / (self.total_steps.saturating_sub(self.warmup_steps)).max(1) as f64;
        (0.5 * (1.0 + (PI * self.num_cycles * 2.0 * progress).cos())).max(0.0)
    }
    fn apply(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        let f = self.factor(self.last_epoch);
        let v: Vec<f64> = self.base.iter().map(|b| b * f).collect();
        set_all(opt, &v)?;
        self.last = v;
        Ok(())
    }
}
impl LrScheduler for CosineWithWarmup {
    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        check_groups(opt, self.base.len())?;
        self.last_epoch += 1;
        self.apply(opt)
    }
    fn last_lr(&self) -> &[f64] {
        &self.last
    }
    fn last_epoch(&self) -> usize {
        self.last_epoch
    }
}

/// How [`OneCycleLr`] interpolates within a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anneal {
    Cos,
    Linear,
}

/// The one-cycle policy (PyTorch's `OneCycleLR`, same phases and annealing): the learning
/// rate rises from `max_lr/div_factor` to `max_lr` over `pct_start` of the steps, then falls
/// to `initial/final_div_factor`; with `cycle_momentum` the momentum (SGD) or β1 (Adam) moves
/// inversely between `max_momentum` and `base_momentum`.
pub struct OneCycleLr {
    pub max_lr: f64,
    pub total_steps: usize,
    pub pct_start: f64,
    pub anneal: Anneal,
    pub cycle_momentum: bool,
    pub base_momentum: f64,
    pub max_momentum: f64,
    pub div_factor: f64,
    pub final_div_factor: f64,
    pub three_phase: bool,
    last_epoch: usize,
    last: Vec<f64>,
}
impl OneCycleLr {
    /// PyTorch's defaults: pct_start 0.3, cos annealing, momentum cycled between 0.85 and
    /// 0.95, div_factor 25, final_div_factor 1e4, two phases. Call [`OneCycleLr::start`]
    /// after changing fields.
    pub fn config(max_lr: f64, total_steps: usize) -> OneCycleLr {
        OneCycleLr {
            max_lr,
            total_steps,
            pct_start: 0.3,
            anneal: Anneal::Cos,
            cycle_momentum: true,
            base_momentum: 0.85,
            max_momentum: 0.95,
            div_factor: 25.0,
            final_div_factor: 1e4,
            three_phase: false,
            last_epoch: 0,
            last: vec![],
        }
    }
    /// Sets the step-0 learning rate (and momentum) on `opt`.
    pub fn start(mut self, opt: &mut dyn Optimizer) -> Result<OneCycleLr> {
        if self.total_steps == 0 || !(0.0..=1.0).contains(&self.pct_start) {
            return Err(invalid(
                "OneCycleLR",
                format!(
                    "total_steps must be positive and pct_start in [0, 1], got {} and {}",
                    self.total_steps, self.pct_start
                ),
            ));
        }
        self.last_epoch = 0;
        self.apply(opt)?;
        Ok(self)
    }
    fn anneal(&self, start: f64, end: f64, pct: f64) -> f64 {
        match self.anneal {
            Anneal::Cos => end + (start - end) / 2.0 * ((PI * pct).cos() + 1.0),
            Anneal::Linear => (end - start) * pct + start,
        }
    }
    /// (learning rate, momentum) at `step`.
    pub fn at(&self, step: usize) -> Result<(f64, f64)> {
        if step > self.total_steps {
            return Err(invalid(
                "OneCycleLR",
                format!(
                    "tried to step {step} times; the total number of steps is {}",
                    self.total_steps
                ),
            ));
        }
        let initial = self.max_lr / self.div_factor;
        let min_lr = initial / self.final_div_factor;
        let (mx, base) = (self.max_momentum, self.base_momentum);
        let t = self.total_steps as f64;
        // (end_step, start_lr, end_lr, start_momentum, end_momentum)
        let phases: Vec<(f64, f64, f64, f64, f64)> = if self.three_phase {
            vec![
                (self.pct_start * t - 1.0, initial, self.max_lr, mx, base),
                (
                    2.0 * self.pct_start * t - 2.0,
                    self.max_lr,
                    initial,
                    base,
                    mx,
                ),
                (t - 1.0, initial, min_lr, mx, mx),
            ]
        } else {
            vec![
                (self.pct_start * t - 1.0, initial, self.max_lr, mx, base),
                (t - 1.0, self.max_lr, min_lr, base, mx),
            ]
        };
        let s = step as f64;
        let mut start_step = 0.0;
        for (i, &(end, l0, l1, m0, m1)) in phases.iter().enumerate() {
            if s <= end || i == phases.len() - 1 {
                let pct = (s - start_step) / (end - start_step);
                return Ok((self.anneal(l0, l1, pct), self.anneal(m0, m1, pct)));
            }
            start_step = end;
        }
        unreachable!("the last phase always matches")
    }
    fn apply(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        let (lr, m) = self.at(self.last_epoch)?;
        for g in 0..opt.num_groups() {
            opt.set_lr(g, lr)?;
            if self.cycle_momentum {
                opt.set_momentum(g, m)?;
            }
        }
        self.last = vec![lr; opt.num_groups()];
        Ok(())
    }
}
impl LrScheduler for OneCycleLr {
    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        self.last_epoch += 1;
        if let Err(e) = self.apply(opt) {
            self.last_epoch -= 1;
            return Err(e);
        }
        Ok(())
    }
    fn last_lr(&self) -> &[f64] {
        &self.last
    }
    fn last_epoch(&self) -> usize {
        self.last_epoch
    }
}
