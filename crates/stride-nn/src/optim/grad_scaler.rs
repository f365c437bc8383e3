//! The loss scaler of f16 training, PyTorch's `torch.amp.GradScaler`, with its decisions on
//! the device.

use super::{NamedParameter, Optimizer};
use crate::invalid;
use std::collections::BTreeMap;
use stride_core::autograd::no_grad;
use stride_core::{DType, Device, Result, Tensor};

/// Hyperparameters of [`GradScaler`] (PyTorch's names and defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct GradScalerConfig {
    /// The first scale.
    pub init_scale: f64,
    /// The scale is multiplied by this after `growth_interval` steps without inf/NaN.
    pub growth_factor: f64,
    /// The scale is multiplied by this after a step whose gradients had an inf/NaN.
    pub backoff_factor: f64,
    pub growth_interval: u32,
    /// Off: every method is a pass-through (`scale` returns the loss, `step` steps).
    pub enabled: bool,
}
impl Default for GradScalerConfig {
    fn default() -> Self {
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Stage {
    Unscaled,
    Stepped,
}

/// What the scaler knows about one optimizer since the last [`GradScaler::update`].
struct PerOptimizer {
    key: usize,
    stage: Stage,
    found_inf: Tensor,
}

/// Dynamic loss scaling for f16 training, as PyTorch's `GradScaler`: the loss is multiplied
/// by a scale before backward so small f16 gradients do not flush to zero; the gradients are
/// divided by it before the optimizer step; a step whose gradients hold an inf or NaN is
/// skipped and the scale halved; after `growth_interval` clean steps the scale doubles.
///
/// Unlike PyTorch's, the whole cycle runs without the host waiting for the device: the scale,
/// the growth tracker and the inf/NaN flag are device tensors, the flag is computed on the
/// device, and [`Adam`](super::Adam)/AdamW skip a flagged step on the device
/// ([`Optimizer::step_unless`]; their step counts move on the device too, as PyTorch's fused
/// Adam's do). Other optimizers read the flag once per step (a host wait, as PyTorch's
/// non-fused optimizers do). Gradients of one optimizer must be on one device.
///
/// ```
/// use stride_nn::{optim::{Adam, AdamConfig, GradScaler, GradScalerConfig, Optimizer}, Linear, Module, loss};
/// use stride_core::{DType, Device, Tensor};
/// let model = Linear::new(3, 1, true)?;
/// let mut opt = Adam::new(model.named_parameters(), AdamConfig::adamw())?;
/// let mut scaler = GradScaler::new(GradScalerConfig::default())?;
/// let x = Tensor::ones([8, 3], DType::F32, &Device::Cpu)?;
/// let y = Tensor::zeros([8, 1], DType::F32, &Device::Cpu)?;
/// for _ in 0..3 {
///     opt.zero_grad()?;
///     let l = loss::mse_loss(&model.forward(&x)?, &y, loss::Reduction::Mean)?;
///     scaler.scale(&l)?.backward()?;
///     scaler.step(&mut opt)?;      // unscales, then steps unless a gradient overflowed
///     scaler.update(None)?;        // halves the scale after an overflow, grows it after 2000 clean steps
/// }
/// assert_eq!(scaler.get_scale()?, 65536.0);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub struct GradScaler {
    config: GradScalerConfig,
    /// 0-d f32 on the device of the first scaled loss.
    scale: Option<Tensor>,
    /// 0-d i32: clean steps since the scale last changed.
    growth_tracker: Option<Tensor>,
    /// A loaded state waiting for the first `scale()` to learn the device.
    pending: Option<(f64, i64)>,
    per_optimizer: Vec<PerOptimizer>,
}

impl GradScaler {
    pub fn new(config: GradScalerConfig) -> Result<GradScaler> {
        let c = &config;
        let bad = |what: String| Err(invalid("GradScaler", what));
        if !(c.init_scale > 0.0 && c.init_scale.is_finite()) {
            return bad(format!(
                "init_scale must be positive and finite, got {}",
                c.init_scale
            ));
        }
        if !(c.growth_factor > 1.0 && c.growth_factor.is_finite()) {
            return bad(format!(
                "growth_factor must be > 1 and finite, got {}",
                c.growth_factor
            ));
        }
        if !(c.backoff_factor > 0.0 && c.backoff_factor < 1.0) {
            return bad(format!(
                "backoff_factor must be in (0, 1), got {}",
                c.backoff_factor
            ));
        }
        if c.growth_interval == 0 {
            return bad("growth_interval must be positive".into());
        }
        Ok(GradScaler {
            config,
            scale: None,
            growth_tracker: None,
            pending: None,
            per_optimizer: vec![],
        })
    }

    pub fn is_enabled(&self) -> bool {
        self.config.enabled
    }

    /// `loss · scale` (the scale created on the loss's device on first use). Disabled: the
    /// loss itself.
    pub fn scale(&mut self, loss: &Tensor) -> Result<Tensor> {
        if !self.config.enabled {
            return Ok(loss.clone());
        }
        let device = loss.device();
        if self.scale.is_none() {
            let (s, t) = self.pending.take().unwrap_or((self.config.init_scale, 0));
            self.scale = Some(Tensor::scalar(s, DType::F32, &device)?);
            self.growth_tracker = Some(Tensor::scalar(t as f64, DType::I32, &device)?);
        }
        let scale = self.scale.as_ref().expect("created above");
        if scale.device() != device {
            return Err(invalid(
                "GradScaler::scale",
                format!(
                    "the loss is on {device} but the scale lives on {}; one scaler serves one device",
                    scale.device()
                ),
            ));
        }
        loss.mul(scale)
    }

    /// Divides the gradients of `opt`'s parameters by the scale, in place, and records on the
    /// device whether any of them holds an inf or NaN. At most once per optimizer between
    /// [`GradScaler::update`]s, before [`GradScaler::step`] (which calls it if you did not):
    /// call it yourself to clip the true gradients before stepping. f16 gradients are
    /// refused, as in PyTorch (unscaling in f16 underflows): keep the parameters in f32 and
    /// compute in f16 under autocast.
    pub fn unscale_<O: Optimizer + ?Sized>(&mut self, opt: &O) -> Result<()> {
        if !self.config.enabled {
            return Ok(());
        }
        let op = "GradScaler::unscale_";
        let key = optimizer_key(opt);
        match self
            .per_optimizer
            .iter()
            .find(|p| p.key == key)
            .map(|p| p.stage)
        {
            Some(Stage::Unscaled) => {
                return Err(invalid(
                    op,
                    "unscale_() has already been called on this optimizer since the last update()",
                ))
            }
            Some(Stage::Stepped) => {
                return Err(invalid(op, "unscale_() is being called after step()"))
            }
            None => {}
        }
        let scale = self.scale_or_err(op)?;
        let found_inf = unscale_grads(op, &opt.named_params(), scale)?;
        self.per_optimizer.push(PerOptimizer {
            key,
            stage: Stage::Unscaled,
            found_inf,
        });
        Ok(())
    }

    /// Unscales `opt`'s gradients (unless [`GradScaler::unscale_`] did) and steps it unless
    /// they hold an inf or NaN ([`Optimizer::step_unless`]). Disabled: `opt.step()`.
    pub fn step<O: Optimizer + ?Sized>(&mut self, opt: &mut O) -> Result<()> {
        if !self.config.enabled {
            return opt.step();
        }
        let key = optimizer_key(opt);
        let stage = self
            .per_optimizer
            .iter()
            .find(|p| p.key == key)
            .map(|p| p.stage);
        if stage == Some(Stage::Stepped) {
            return Err(invalid(
                "GradScaler::step",
                "step() has already been called since the last update()",
            ));
        }
        if stage.is_none() {
            self.unscale_(&*opt)?;
        }
        let st = self
            .per_optimizer
            .iter_mut()
            .find(|p| p.key == key)
            .expect("unscaled above");
        opt.step_unless(&st.found_inf)?;
        st.stage = Stage::Stepped;
        Ok(())
    }

    /// Sets the scale for the next iteration, on the device: halved (× `backoff_factor`) if
    /// any optimizer stepped since the last update saw an inf/NaN, grown (× `growth_factor`,
    /// if the result is finite) after `growth_interval` clean steps in a row, else unchanged
    /// — PyTorch's `_amp_update_scale_`. `Some(s)` sets the scale to `s` instead.
    pub fn update(&mut self, new_scale: Option<f64>) -> Result<()> {
        if !self.config.enabled {
            return Ok(());
        }
        let op = "GradScaler::update";
        let _ng = no_grad();
        let scale = self.scale_or_err(op)?.clone();
        if let Some(s) = new_scale {
            if !(s > 0.0 && s.is_finite()) {
                return Err(invalid(
                    op,
                    format!("a new scale must be positive and finite, got {s}"),
                ));
            }
            scale.fill_(s)?;
            self.per_optimizer.clear();
            return Ok(());
        }
        let Some(first) = self.per_optimizer.first() else {
            return Err(invalid(
                op,
                "no inf checks were recorded since the last update(): call step() (or unscale_()) first",
            ));
        };
        let mut found = first.found_inf.clone();
        for p in &self.per_optimizer[1..] {
            found = found.add(&p.found_inf)?;
        }
        let tracker = self
            .growth_tracker
            .as_ref()
            .expect("made with the scale")
            .clone();
        let c = &self.config;
        let found = found.ne(0.0)?;
        let successful = tracker.add(1)?;
        let grow = successful.eq(c.growth_interval as i64)?;
        // float × double rounded to float, as PyTorch's kernel computes it
        let times =
            |f: f64| -> Result<Tensor> { scale.to_dtype(DType::F64)?.mul(f)?.to_dtype(DType::F32) };
        let grown = times(c.growth_factor)?;
        let grown_or_kept = grow
            .logical_and(&grown.isfinite()?)?
            .where_cond(&grown, &scale)?;
        let new_scale = found.where_cond(&times(c.backoff_factor)?, &grown_or_kept)?;
        let new_tracker = found.logical_or(&grow)?.where_cond(0, &successful)?;
        scale.copy_(&new_scale)?;
        tracker.copy_(&new_tracker)?;
        self.per_optimizer.clear();
        Ok(())
    }

    /// The current scale (reads it back: a host wait). 1 when disabled.
    pub fn get_scale(&self) -> Result<f64> {
        if !self.config.enabled {
            return Ok(1.0);
        }
        match (&self.scale, self.pending) {
            (Some(s), _) => s.item_f64(),
            (None, Some((s, _))) => Ok(s),
            (None, None) => Ok(self.config.init_scale),
        }
    }

    /// The scale as a device tensor (after the first [`GradScaler::scale`]).
    pub fn scale_tensor(&self) -> Option<&Tensor> {
        self.scale.as_ref()
    }

    /// The inf/NaN flag of `opt`'s current iteration (0-d f32 on the device, nonzero when a
    /// gradient overflowed), once its gradients are unscaled.
    pub fn found_inf<O: Optimizer + ?Sized>(&self, opt: &O) -> Option<&Tensor> {
        let key = optimizer_key(opt);
        self.per_optimizer
            .iter()
            .find(|p| p.key == key)
            .map(|p| &p.found_inf)
    }

    /// PyTorch's `state_dict()`: `scale`, `growth_factor`, `backoff_factor`,
    /// `growth_interval`, `_growth_tracker` (reads the device values: a host wait). Empty
    /// when disabled.
    pub fn state_dict(&self) -> Result<BTreeMap<String, f64>> {
        if !self.config.enabled {
            return Ok(BTreeMap::new());
        }
        let tracker = match (&self.growth_tracker, self.pending) {
            (Some(t), _) => t.item_f64()?,
            (None, Some((_, t))) => t as f64,
            (None, None) => 0.0,
        };
        let c = &self.config;
        Ok(BTreeMap::from([
            ("scale".into(), self.get_scale()?),
            ("growth_factor".into(), c.growth_factor),
            ("backoff_factor".into(), c.backoff_factor),
            ("growth_interval".into(), c.growth_interval as f64),
            ("_growth_tracker".into(), tracker),
        ]))
    }

    /// Restores what [`GradScaler::state_dict`] saved; checked before anything changes.
    pub fn load_state_dict(&mut self, d: &BTreeMap<String, f64>) -> Result<()> {
        let op = "GradScaler::load_state_dict";
        if d.is_empty() {
            return Err(invalid(
                op,
                "the state is empty (saved from a disabled scaler?)",
            ));
        }
        let get = |k: &str| {
            d.get(k)
                .copied()
                .ok_or_else(|| invalid(op, format!("the state has no {k:?} entry")))
        };
        let interval = get("growth_interval")?;
        let tracker = get("_growth_tracker")?;
        if !(interval >= 1.0 && interval.fract() == 0.0 && interval <= u32::MAX as f64) {
            return Err(invalid(
                op,
                format!("growth_interval must be a positive whole number, got {interval}"),
            ));
        }
        if !(tracker >= 0.0 && tracker.fract() == 0.0 && tracker <= i32::MAX as f64) {
            return Err(invalid(
                op,
                format!("_growth_tracker must be a non-negative whole number, got {tracker}"),
            ));
        }
        let config = GradScalerConfig {
            init_scale: get("scale")?,
            growth_factor: get("growth_factor")?,
            backoff_factor: get("backoff_factor")?,
            growth_interval: interval as u32,
            enabled: self.config.enabled,
        };
        GradScaler::new(config.clone())?;
        let scale = config.init_scale;
        self.config.growth_factor = config.growth_factor;
        self.config.backoff_factor = config.backoff_factor;
        self.config.growth_interval = config.growth_interval;
        match (&self.scale, &self.growth_tracker) {
            (Some(s), Some(t)) => {
                s.fill_(scale)?;
                t.fill_(tracker)?;
            }
            _ => self.pending = Some((scale, tracker as i64)),
        }
        Ok(())
    }

    fn scale_or_err(&self, op: &'static str) -> Result<&Tensor> {
        self.scale.as_ref().ok_or_else(|| {
            invalid(
                op,
                "the scale does not exist yet: call scale(loss) (and backward) earlier in the iteration",
            )
        })
    }
}

/// An optimizer's identity for the scaler's per-optimizer records (PyTorch keys them by
/// `id(optimizer)`).
fn optimizer_key<O: ?Sized>(opt: &O) -> usize {
    opt as *const O as *const () as usize
}

/// Multiplies every gradient of `params` by `1/scale` in place and returns the inf/NaN flag
/// (0-d f32 on the scale's device: 1 if any gradient, before unscaling, held an inf or NaN).
/// All on the device.
fn unscale_grads(op: &'static str, params: &[NamedParameter], scale: &Tensor) -> Result<Tensor> {
    let _ng = no_grad();
    let device: Device = scale.device();
    // PyTorch: the reciprocal in double, then float
    let inv_scale = scale
        .to_dtype(DType::F64)?
        .reciprocal()?
        .to_dtype(DType::F32)?;
    let mut finite = vec![];
    for (name, p) in params {
        let Some(g) = p.tensor().grad() else { continue };
        if g.dtype() == DType::F16 {
            return Err(invalid(
                op,
                format!("attempting to unscale f16 gradients (parameter {name}): keep the parameters in f32 and compute in f16 under autocast"),
            ));
        }
        if g.device() != device {
            return Err(invalid(
                op,
                format!("the gradient of {name} is on {} but the scale is on {device}; one scaler serves one device", g.device()),
            ));
        }
        // checked before the in-place unscale (queued first)
        finite.push(g.isfinite()?.all()?);
        g.mul_(&inv_scale)?;
    }
    let refs: Vec<&Tensor> = finite.iter().collect();
    match refs.is_empty() {
        true => Tensor::scalar(0.0, DType::F32, &device),
        false => Tensor::stack(&refs, 0)?
            .all()?
            .logical_not()?
            .to_dtype(DType::F32),
    }
}
