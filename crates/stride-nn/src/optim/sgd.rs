//! Stochastic gradient descent, PyTorch's `_single_tensor_sgd`.

use super::{get_f64, load_state_tensor, Algorithm, Optim};
use crate::invalid;
use std::collections::BTreeMap;
use stride_core::{MemoryFormat, Result, Tensor};

/// Hyperparameters of [`Sgd`] (PyTorch's names and defaults; `lr` has no default there,
/// 1e-3 here).
#[derive(Debug, Clone, PartialEq)]
pub struct SgdConfig {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    pub maximize: bool,
}
impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
        }
    }
}

/// SGD with momentum, dampening, Nesterov, weight decay and maximize, as PyTorch computes it:
///
/// ```text
/// g ← ±grad (+ weight_decay·p)
/// buf ← g (first step) | momentum·buf + (1 − dampening)·g
/// g ← g + momentum·buf (nesterov) | buf
/// p ← p − lr·g
/// ```
///
/// ```
/// use stride_nn::{optim::{Optimizer, Sgd, SgdConfig}, Parameter};
/// use stride_core::Tensor;
/// let p = Parameter::new(Tensor::from_vec(vec![1.0f64, 2.0], [2])?)?;
/// let mut opt = Sgd::new(vec![("w".into(), p.clone())], SgdConfig { lr: 0.1, ..Default::default() })?;
/// p.tensor().mul(&p.tensor())?.sum()?.backward()?;       // grad = 2p
/// opt.step()?;
/// assert_eq!(p.tensor().to_vec::<f64>()?, vec![1.0 - 0.1 * 2.0, 2.0 - 0.1 * 4.0]);
/// # Ok::<(), stride_core::Error>(())
/// ```
pub type Sgd = Optim<SgdAlgorithm>;

/// The algorithm behind [`Sgd`].
pub struct SgdAlgorithm;

/// Per-parameter state of [`Sgd`]: the momentum buffer (with the parameter's strides).
pub struct SgdState {
    pub momentum_buffer: Option<Tensor>,
}

/// `a + alpha·b` as PyTorch's `add(b, alpha=alpha)` (plain `a + b` when alpha is 1).
pub(crate) fn add_alpha(a: &Tensor, b: &Tensor, alpha: f64) -> Result<Tensor> {
    if alpha == 1.0 {
        a.add(b)
    } else {
        a.add(&b.mul(alpha)?)
    }
}
pub(crate) fn add_alpha_(a: &Tensor, b: &Tensor, alpha: f64) -> Result<Tensor> {
    if alpha == 1.0 {
        a.add_(b)
    } else {
        a.add_(&b.mul(alpha)?)
    }
}

impl Algorithm for SgdAlgorithm {
    type Config = SgdConfig;
    type State = SgdState;
    const NAME: &'static str = "SGD";
    fn lr(c: &SgdConfig) -> f64 {
        c.lr
    }
    fn set_lr(c: &mut SgdConfig, lr: f64) {
        c.lr = lr
    }
    fn momentum(c: &SgdConfig) -> f64 {
        c.momentum
    }
    fn set_momentum(c: &mut SgdConfig, m: f64) {
        c.momentum = m
    }
    fn validate(c: &SgdConfig) -> Result<()> {
        let bad = |what: &str, v: f64| {
            Err(invalid(
                "SGD",
                format!("invalid {what}: {v} (it must be >= 0)"),
            ))
        };
        if !(c.lr >= 0.0) {
            return bad("learning rate", c.lr);
        }
        if !(c.momentum >= 0.0) {
            return bad("momentum value", c.momentum);
        }
        if !(c.weight_decay >= 0.0) {
            return bad("weight_decay value", c.weight_decay);
        }
        if c.nesterov && (c.momentum <= 0.0 || c.dampening != 0.0) {
            return Err(invalid(
                "SGD",
                "Nesterov momentum requires a momentum and zero dampening",
            ));
        }
        Ok(())
    }
    fn update(
        c: &SgdConfig,
        param: &Tensor,
        grad: &Tensor,
        state: &mut Option<SgdState>,
    ) -> Result<()> {
        let st = state.get_or_insert(SgdState {
            momentum_buffer: None,
        });
        let mut g = if c.maximize {
            grad.neg()?
        } else {
            grad.clone()
        };
        if c.weight_decay != 0.0 {
            g = add_alpha(&g, param, c.weight_decay)?;
        }
        if c.momentum != 0.0 {
            let buf = match &st.momentum_buffer {
                None => {
                    // PyTorch clones the gradient; the buffer gets the parameter's strides
                    // (the gradient's layout when it follows the gradient layout contract)
                    let b = param.zeros_like(MemoryFormat::Preserve)?;
                    b.copy_(&g)?;
                    st.momentum_buffer = Some(b.clone());
                    b
                }
                Some(b) => {
                    b.mul_(c.momentum)?;
                    add_alpha_(b, &g, 1.0 - c.dampening)?;
                    b.clone()
                }
            };
            g = if c.nesterov {
                add_alpha(&g, &buf, c.momentum)?
            } else {
                buf
            };
        }
        add_alpha_(param, &g, -c.lr)?;
        Ok(())
    }
    fn moments(s: &SgdState) -> Vec<(&'static str, Tensor)> {
        s.momentum_buffer
            .iter()
            .map(|b| ("momentum_buffer", b.clone()))
            .collect()
    }
    fn state_to_dict(s: &SgdState) -> Result<BTreeMap<String, Tensor>> {
        let mut d = BTreeMap::new();
        if let Some(b) = &s.momentum_buffer {
            d.insert("momentum_buffer".into(), b.clone_tensor()?);
        }
        Ok(d)
    }
    fn state_from_dict(
        d: &BTreeMap<String, Tensor>,
        param: &Tensor,
        _c: &SgdConfig,
    ) -> Result<SgdState> {
        Ok(SgdState {
            momentum_buffer: if d.contains_key("momentum_buffer") {
                Some(load_state_tensor(d, "momentum_buffer", param)?)
            } else {
                None
            },
        })
    }
    fn config_to_dict(c: &SgdConfig) -> BTreeMap<String, f64> {
        BTreeMap::from([
            ("lr".into(), c.lr),
            ("momentum".into(), c.momentum),
            ("dampening".into(), c.dampening),
            ("weight_decay".into(), c.weight_decay),
            ("nesterov".into(), c.nesterov as u8 as f64),
            ("maximize".into(), c.maximize as u8 as f64),
        ])
    }
    fn config_from_dict(d: &BTreeMap<String, f64>, b: &SgdConfig) -> Result<SgdConfig> {
        Ok(SgdConfig {
            lr: get_f64(d, "lr", b.lr),
            momentum: get_f64(d, "momentum", b.momentum),
            dampening: get_f64(d, "dampening", b.dampening),
            weight_decay: get_f64(d, "weight_decay", b.weight_decay),
            nesterov: get_f64(d, "nesterov", b.nesterov as u8 as f64) != 0.0,
            maximize: get_f64(d, "maximize", b.maximize as u8 as f64) != 0.0,
        })
    }
}
