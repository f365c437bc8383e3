//! What the training checkpoints of [`crate::train`] and [`crate::gpt`] share: one
//! safetensors file whose tensors are the model (`model.*`) and the optimizer state
//! (`optim.state.{position}.{name}`), and whose string metadata holds the scalars
//! (`optim.group.{g}.{hyperparameter}`, generator states as `SEED:OFFSET`).

use crate::invalid;
use std::collections::BTreeMap;
use stride_core::{Device, GeneratorState, Result, Tensor};
use stride_nn::optim::OptimizerStateDict;

/// Metadata key → value, as safetensors stores it.
pub(crate) type Meta = BTreeMap<String, String>;

/// A generator state as metadata (`SEED:OFFSET`).
pub(crate) fn state_string(s: GeneratorState) -> String {
    format!("{}:{}", s.seed, s.offset)
}

/// The value of `key`, parsed; `what` names the kind of checkpoint in the error.
pub(crate) fn parse_meta<T: std::str::FromStr>(
    op: &'static str,
    what: &str,
    meta: &Meta,
    key: &str,
) -> Result<T> {
    let v = meta.get(key).ok_or_else(|| {
        invalid(
            op,
            format!("the checkpoint's metadata has no {key:?}; is it {what}?"),
        )
    })?;
    v.parse()
        .map_err(|_| invalid(op, format!("malformed checkpoint metadata {key} = {v:?}")))
}

/// The generator state saved under `key`.
pub(crate) fn parse_state(op: &'static str, meta: &Meta, key: &str) -> Result<GeneratorState> {
    let v = meta
        .get(key)
        .ok_or_else(|| invalid(op, format!("the checkpoint has no {key:?}")))?;
    let bad = || {
        invalid(
            op,
            format!("malformed generator state {key} = {v:?} (expected SEED:OFFSET)"),
        )
    };
    let (s, o) = v.split_once(':').ok_or_else(bad)?;
    Ok(GeneratorState {
        seed: s.parse().map_err(|_| bad())?,
        offset: o.parse().map_err(|_| bad())?,
    })
}

/// An optimizer state dict as checkpoint tensors and metadata.
pub(crate) fn put_optimizer(
    osd: &OptimizerStateDict,
    tensors: &mut Vec<(String, Tensor)>,
    meta: &mut Meta,
) {
    for (pos, state) in &osd.state {
        for (k, t) in state {
            tensors.push((format!("optim.state.{pos}.{k}"), t.clone()));
        }
    }
    for (g, (hp, ids)) in osd.param_groups.iter().enumerate() {
        for (k, v) in hp {
            meta.insert(format!("optim.group.{g}.{k}"), v.to_string());
        }
        meta.insert(
            format!("optim.group.{g}.params"),
            ids.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
    }
}

/// The optimizer state dict [`put_optimizer`] saved, its tensors moved to `device`.
pub(crate) fn get_optimizer(
    op: &'static str,
    tensors: &BTreeMap<String, Tensor>,
    meta: &Meta,
    device: &Device,
) -> Result<OptimizerStateDict> {
    let mut state: BTreeMap<usize, BTreeMap<String, Tensor>> = BTreeMap::new();
    for (k, x) in tensors {
        if let Some(rest) = k.strip_prefix("optim.state.") {
            let malformed = || invalid(op, format!("malformed tensor name {k:?}"));
            let (pos, key) = rest.split_once('.').ok_or_else(malformed)?;
            let pos: usize = pos.parse().map_err(|_| malformed())?;
            state
                .entry(pos)
                .or_default()
                .insert(key.to_string(), x.to_device(device)?);
        }
    }
    let mut param_groups = vec![];
    for g in 0.. {
        let Some(ids) = meta.get(&format!("optim.group.{g}.params")) else {
            break;
        };
        let ids = if ids.is_empty() {
            vec![]
        } else {
            ids.split(',')
                .map(|s| s.parse::<usize>())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|_| invalid(op, format!("malformed optim.group.{g}.params {ids:?}")))?
        };
        let prefix = format!("optim.group.{g}.");
        let mut hp = BTreeMap::new();
        for (k, v) in meta.range(prefix.clone()..) {
            let Some(name) = k.strip_prefix(&prefix) else {
                break;
            };
            if name != "params" {
                let x: f64 = v.parse().map_err(|_| {
                    invalid(op, format!("malformed checkpoint metadata {k} = {v:?}"))
                })?;
                hp.insert(name.to_string(), x);
            }
        }
        param_groups.push((hp, ids));
    }
    Ok(OptimizerStateDict {
        state,
        param_groups,
    })
}

/// The model's state dict saved under `model.`, moved to `device`.
pub(crate) fn get_model(
    tensors: &BTreeMap<String, Tensor>,
    device: &Device,
) -> Result<stride_nn::StateDict> {
    let mut sd = stride_nn::StateDict::new();
    for (k, x) in tensors {
        if let Some(name) = k.strip_prefix("model.") {
            sd.insert(name, x.to_device(device)?);
        }
    }
    Ok(sd)
}
