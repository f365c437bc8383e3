//! Adam and AdamW, PyTorch's `_single_tensor_adam` / `_single_tensor_adamw`.

use super::{get_f64, load_state_tensor, Algorithm, Optim};
use crate::invalid;
use std::collections::BTreeMap;
use stride_core::{
    fused_adam_, fused_adam_skippable_, AdamStep, DType, Device, MemoryFormat, Result,
    SkippableStep, Tensor,
};

/// Hyperparameters of [`Adam`] (PyTorch's names and defaults). `decoupled_weight_decay`
/// makes it AdamW ([`AdamConfig::adamw`] has AdamW's defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct AdamConfig {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
    pub amsgrad: bool,
    pub maximize: bool,
    /// AdamW: `p ← p·(1 − lr·weight_decay)` before the update, instead of adding
    /// `weight_decay·p` to the gradient.
    pub decoupled_weight_decay: bool,
}
impl Default for AdamConfig {
    /// `torch.optim.Adam`'s defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay.
    fn default() -> Self {
        AdamConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
            maximize: false,
            decoupled_weight_decay: false,
        }
    }
}
impl AdamConfig {
    /// `torch.optim.AdamW`'s defaults: as Adam, with decoupled weight decay 0.01.
    pub fn adamw() -> AdamConfig {
        AdamConfig {
            weight_decay: 1e-2,
            decoupled_weight_decay: true,
            ..AdamConfig::default()
        }
    }
}

/// Adam (and AdamW, with [`AdamConfig::adamw`]), with PyTorch's single-tensor update:
///
/// ```text
/// g ← ±grad;  step ← step + 1
/// AdamW: p.mul_(1 − lr·wd)          Adam: g ← g + wd·p
/// m.lerp_(g, 1 − β1)
/// v.mul_(β2).addcmul_(g, g, 1 − β2)
/// step_size ← lr / (1 − β1^step);  bc2_sqrt ← √(1 − β2^step)
/// amsgrad: v_max ← max(v_max, v);  denom ← v_max.sqrt() / bc2_sqrt + eps
/// else:                            denom ← v.sqrt() / bc2_sqrt + eps
/// p.addcdiv_(m, denom, −step_size)
/// ```
///
/// The moments are `zeros_like(p)` with `p`'s strides, and `p` is updated in place through its
/// own layout, by [`stride_core::fused_adam_`]: on CUDA one kernel per 36 dense parameters
/// (PyTorch's `fused=True`), the same bits as the composed ops above on every device.
pub type Adam = Optim<AdamAlgorithm>;
/// AdamW is [`Adam`] with [`AdamConfig::adamw`] (or any config with
/// `decoupled_weight_decay`).
pub type AdamW = Adam;

/// The algorithm behind [`Adam`].
pub struct AdamAlgorithm;

/// Per-parameter state of [`Adam`].
pub struct AdamState {
    /// Steps taken (PyTorch keeps it as a tensor; the value is what matters).
    pub step: u64,
    pub exp_avg: Tensor,
    pub exp_avg_sq: Tensor,
    pub max_exp_avg_sq: Option<Tensor>,
    /// The steps *taken*, counted on the device, once a [`super::GradScaler`] has stepped
    /// this parameter (then `step` counts the steps attempted): a `[2]` f64 tensor whose slot
    /// `step % 2` holds the count (see [`stride_core::fused_adam_skippable_`]).
    pub device_step: Option<Tensor>,
}

impl AdamState {
    /// The steps taken: `step`, or the device count once a gradient scaler has stepped the
    /// parameter (read back: a host wait).
    pub fn steps_taken(&self) -> Result<u64> {
        match &self.device_step {
            None => Ok(self.step),
            Some(c) => Ok(c.select(0, (self.step % 2) as i64)?.item::<f64>()? as u64),
        }
    }
}

impl Algorithm for AdamAlgorithm {
    type Config = AdamConfig;
    type State = AdamState;
    const NAME: &'static str = "Adam";
    fn lr(c: &AdamConfig) -> f64 {
        c.lr
    }
    fn set_lr(c: &mut AdamConfig, lr: f64) {
        c.lr = lr
    }
    fn momentum(c: &AdamConfig) -> f64 {
        c.betas.0
    }
    fn set_momentum(c: &mut AdamConfig, m: f64) {
        c.betas.0 = m
    }
    fn validate(c: &AdamConfig) -> Result<()> {
        let check = |ok: bool, what: String| {
            if ok {
                Ok(())
            } else {
                Err(invalid("Adam", what))
            }
        };
        check(c.lr >= 0.0, format!("invalid learning rate: {}", c.lr))?;
        check(c.eps >= 0.0, format!("invalid epsilon value: {}", c.eps))?;
        check(
            (0.0..1.0).contains(&c.betas.0),
            format!("invalid beta parameter at index 0: {}", c.betas.0),
        )?;
        check(
            (0.0..1.0).contains(&c.betas.1),
            format!("invalid beta parameter at index 1: {}", c.betas.1),
        )?;
        check(
            c.weight_decay >= 0.0,
            format!("invalid weight_decay value: {}", c.weight_decay),
        )
    }
    fn update(
        c: &AdamConfig,
        param: &Tensor,
        grad: &Tensor,
        state: &mut Option<AdamState>,
    ) -> Result<()> {
        // one parameter is a group of one: the same path as a whole group
        let item = [(0, param.clone(), grad.clone())];
        Self::update_all(c, &item, std::slice::from_mut(state))
    }
    fn update_all(
        c: &AdamConfig,
        items: &[(usize, Tensor, Tensor)],
        states: &mut [Option<AdamState>],
    ) -> Result<()> {
        update_group(c, items, states, None)
    }
    fn update_all_unless(
        c: &AdamConfig,
        items: &[(usize, Tensor, Tensor)],
        states: &mut [Option<AdamState>],
        found_inf: &Tensor,
    ) -> Result<()> {
        update_group(c, items, states, Some(found_inf))
    }
    fn moments(s: &AdamState) -> Vec<(&'static str, Tensor)> {
        let mut v = vec![
            ("exp_avg", s.exp_avg.clone()),
            ("exp_avg_sq", s.exp_avg_sq.clone()),
        ];
        if let Some(m) = &s.max_exp_avg_sq {
            v.push(("max_exp_avg_sq", m.clone()));
        }
        v
    }
    fn state_to_dict(s: &AdamState) -> Result<BTreeMap<String, Tensor>> {
        let mut d = BTreeMap::new();
        d.insert(
            "step".into(),
            Tensor::scalar(s.steps_taken()? as f64, DType::F32, &s.exp_avg.device())?,
        );
        d.insert("exp_avg".into(), s.exp_avg.clone_tensor()?);
        d.insert("exp_avg_sq".into(), s.exp_avg_sq.clone_tensor()?);
        if let Some(m) = &s.max_exp_avg_sq {
            d.insert("max_exp_avg_sq".into(), m.clone_tensor()?);
        }
        Ok(d)
    }
    fn state_from_dict(
        d: &BTreeMap<String, Tensor>,
        param: &Tensor,
        c: &AdamConfig,
    ) -> Result<AdamState> {
        let step = d
            .get("step")
            .ok_or_else(|| invalid("Adam::load_state_dict", "the state has no \"step\" entry"))?
            .to_dtype(DType::F64)?
            .item::<f64>()?;
        if !(step >= 0.0 && step.fract() == 0.0) {
            return Err(invalid(
                "Adam::load_state_dict",
                format!("step must be a non-negative whole number, got {step}"),
            ));
        }
        Ok(AdamState {
            step: step as u64,
            exp_avg: load_state_tensor(d, "exp_avg", param)?,
            exp_avg_sq: load_state_tensor(d, "exp_avg_sq", param)?,
            max_exp_avg_sq: if c.amsgrad || d.contains_key("max_exp_avg_sq") {
                Some(load_state_tensor(d, "max_exp_avg_sq", param)?)
            } else {
                None
            },
            device_step: None,
        })
    }
    fn config_to_dict(c: &AdamConfig) -> BTreeMap<String, f64> {
        BTreeMap::from([
            ("lr".into(), c.lr),
            ("beta1".into(), c.betas.0),
            ("beta2".into(), c.betas.1),
            ("eps".into(), c.eps),
            ("weight_decay".into(), c.weight_decay),
            ("amsgrad".into(), c.amsgrad as u8 as f64),
            ("maximize".into(), c.maximize as u8 as f64),
            (
                "decoupled_weight_decay".into(),
                c.decoupled_weight_decay as u8 as f64,
            ),
        ])
    }
    fn config_from_dict(d: &BTreeMap<String, f64>, b: &AdamConfig) -> Result<AdamConfig> {
        let flag = |k: &str, v: bool| get_f64(d, k, v as u8 as f64) != 0.0;
        Ok(AdamConfig {
            lr: get_f64(d, "lr", b.lr),
            betas: (
                get_f64(d, "beta1", b.betas.0),
                get_f64(d, "beta2", b.betas.1),
            ),
            eps: get_f64(d, "eps", b.eps),
            weight_decay: get_f64(d, "weight_decay", b.weight_decay),
            amsgrad: flag("amsgrad", b.amsgrad),
            maximize: flag("maximize", b.maximize),
            decoupled_weight_decay: flag("decoupled_weight_decay", b.decoupled_weight_decay),
        })
    }
}

/// One step of a group's parameters that have gradients: one fused step per (step count,
/// device), normally the whole group at once. With `found_inf` (a gradient scaler's step),
/// or once a parameter's steps are counted on the device, the step is skippable on the
/// device (`fused_adam_skippable_`).
fn update_group(
    c: &AdamConfig,
    items: &[(usize, Tensor, Tensor)],
    states: &mut [Option<AdamState>],
    found_inf: Option<&Tensor>,
) -> Result<()> {
    for (i, param, _) in items {
        advance(c, param, &mut states[*i])?;
    }
    let on_device = found_inf.is_some()
        || items
            .iter()
            .any(|(i, _, _)| states[*i].as_ref().is_some_and(|s| s.device_step.is_some()));
    if on_device {
        for (i, param, _) in items {
            let st = states[*i].as_mut().expect("advanced above");
            if st.device_step.is_none() {
                // every step so far was taken: the count before this one is step − 1, in the
                // slot this step reads
                let counter = Tensor::zeros([2], DType::F64, &param.device())?;
                counter
                    .select(0, ((st.step - 1) % 2) as i64)?
                    .fill_((st.step - 1) as f64)?;
                st.device_step = Some(counter);
            }
        }
    }
    let mut batches: Vec<(u64, Device, Vec<usize>)> = vec![];
    for (k, (i, param, _)) in items.iter().enumerate() {
        let step = states[*i].as_ref().expect("advanced above").step;
        match batches
            .iter_mut()
            .find(|(s, d, _)| *s == step && *d == param.device())
        {
            Some((_, _, ks)) => ks.push(k),
            None => batches.push((step, param.device(), vec![k])),
        }
    }
    for (step, device, ks) in batches {
        let state = |k: &usize| states[items[*k].0].as_ref().expect("advanced above");
        let params: Vec<&Tensor> = ks.iter().map(|k| &items[*k].1).collect();
        let grads: Vec<&Tensor> = ks.iter().map(|k| &items[*k].2).collect();
        let ms: Vec<&Tensor> = ks.iter().map(|k| &state(k).exp_avg).collect();
        let vs: Vec<&Tensor> = ks.iter().map(|k| &state(k).exp_avg_sq).collect();
        let vmax: Option<Vec<&Tensor>> = match c.amsgrad {
            true => ks
                .iter()
                .map(|k| state(k).max_exp_avg_sq.as_ref())
                .collect(),
            false => None,
        };
        let h = adam_step(c, step);
        if !on_device {
            fused_adam_(&params, &grads, &ms, &vs, vmax.as_deref(), &h)?;
            continue;
        }
        let counters: Vec<&Tensor> = ks
            .iter()
            .map(|k| state(k).device_step.as_ref().expect("created above"))
            .collect();
        // the flag on this batch's device; for a plain step() of a parameter counted on the
        // device, a flag that skips nothing
        let flag_here;
        let found_inf = match found_inf {
            Some(f) if f.device() == device => f,
            Some(f) => {
                flag_here = f.to_device(&device)?;
                &flag_here
            }
            None => {
                flag_here = Tensor::scalar(0.0, DType::F32, &device)?;
                &flag_here
            }
        };
        let skip = SkippableStep {
            found_inf,
            counters: &counters,
        };
        fused_adam_skippable_(&params, &grads, &ms, &vs, vmax.as_deref(), &h, skip)?;
    }
    Ok(())
}

/// Creates `param`'s state on its first step and counts the step; the state.
fn advance<'a>(
    c: &AdamConfig,
    param: &Tensor,
    state: &'a mut Option<AdamState>,
) -> Result<&'a AdamState> {
    if state.is_none() {
        *state = Some(AdamState {
            step: 0,
            exp_avg: param.zeros_like(MemoryFormat::Preserve)?,
            exp_avg_sq: param.zeros_like(MemoryFormat::Preserve)?,
            max_exp_avg_sq: if c.amsgrad {
                Some(param.zeros_like(MemoryFormat::Preserve)?)
            } else {
                None
            },
            device_step: None,
        });
    }
    let st = state.as_mut().expect("initialised above");
    st.step += 1;
    if c.amsgrad && st.max_exp_avg_sq.is_none() {
        // amsgrad switched on after some steps (e.g. by load_state_dict)
        st.max_exp_avg_sq = Some(param.zeros_like(MemoryFormat::Preserve)?);
    }
    Ok(st)
}

/// The hyperparameters of step `step` under `c`.
fn adam_step(c: &AdamConfig, step: u64) -> AdamStep {
    AdamStep {
        lr: c.lr,
        beta1: c.betas.0,
        beta2: c.betas.1,
        eps: c.eps,
        weight_decay: c.weight_decay,
        decoupled_weight_decay: c.decoupled_weight_decay,
        maximize: c.maximize,
        step,
    }
}
