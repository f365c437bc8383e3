//! Fused optimizer updates on CUDA (kernels/adam.cu), bit-identical to the composed update
//! (`backend/optim.rs`): one launch per parameter through its layouts, or one launch for up
//! to 36 parameters whose operands are dense.

use super::launch::{arg, dptr, launch, launch_cfg, walk, BLOCK};
use super::source::{float_modules, float_preamble, tag};
use crate::backend::optim::{AdamStep, AdamViews, DeviceStep};
use crate::backend::View;
use crate::DType;
use crate::Result;

const COMMON: &str = include_str!("kernels/common.cuh");
const ELEMENTWISE: &str = include_str!("kernels/elementwise.cu");
const ADAM: &str = include_str!("kernels/adam.cu");

/// The Adam module of float dtype `t` (`adam_<t>`).
pub(crate) fn adam_module(t: DType) -> String {
    format!("{COMMON}{ELEMENTWISE}{}{ADAM}", float_preamble(t))
}

/// Every optimizer module (for warmup).
pub(crate) fn all_modules() -> Vec<(String, String)> {
    float_modules("adam", adam_module)
}

/// See [`crate::backend::optim::adam`].
pub(crate) fn adam(
    h: &AdamStep,
    param: View,
    grad: View,
    exp_avg: View,
    exp_avg_sq: View,
    max_exp_avg_sq: Option<View>,
) -> Result<()> {
    adam_one(
        h,
        &AdamViews {
            param,
            grad,
            exp_avg,
            exp_avg_sq,
            max_exp_avg_sq,
            device_step: None,
        },
    )
}

/// One parameter through its layouts (`k_adam`), its step counted on the device or not.
fn adam_one(h: &AdamStep, it: &AdamViews) -> Result<()> {
    let AdamViews {
        param,
        grad,
        exp_avg,
        exp_avg_sq,
        max_exp_avg_sq,
        device_step,
    } = *it;
    let t = param.dtype;
    let (dev, pp) = dptr(&param)?;
    let (_, pg) = dptr(&grad)?;
    let (_, pm) = dptr(&exp_avg)?;
    let (_, pv) = dptr(&exp_avg_sq)?;
    // without amsgrad the fifth operand is exp_avg_sq again, never touched
    let vmax = max_exp_avg_sq.unwrap_or(exp_avg_sq);
    let (_, pvmax) = dptr(&vmax)?;
    let w = walk("adam_step", [&param, &grad, &exp_avg, &exp_avg_sq, &vmax])?;
    let f = dev.function(&format!("adam_{}", tag(t)), "adam", || adam_module(t))?;
    let s = AdamArgs::new(h, t, max_exp_avg_sq.is_some(), device_step.as_ref())?;
    let counter = match &device_step {
        Some(d) => first(&d.counter)?,
        None => 0u64,
    };
    let [sp, sg, sm, sv, svmax] = w.strs;
    let mut args = [
        arg(&w.geo),
        arg(&w.n),
        arg(&w.contig),
        arg(&pp),
        arg(&sp),
        arg(&pg),
        arg(&sg),
        arg(&pm),
        arg(&sm),
        arg(&pv),
        arg(&sv),
        arg(&pvmax),
        arg(&svmax),
        arg(&s),
        arg(&counter),
    ];
    unsafe { launch(&dev, &f, "adam_step", w.n, &mut args) }
}

/// The flags and scalars of one step (`AdamArgs` in adam.cu).
#[repr(C)]
#[derive(Clone, Copy)]
struct AdamArgs {
    flags: i32,
    decay: f64,
    wd: f64,
    w1: f64,
    b2: f64,
    omb2: f64,
    bc2s: f64,
    eps: f64,
    neg_step: f64,
    lr: f64,
    beta1: f64,
    beta2: f64,
    found: u64,
    rslot: i32,
}

impl AdamArgs {
    fn new(h: &AdamStep, t: DType, amsgrad: bool, d: Option<&DeviceStep>) -> Result<AdamArgs> {
        let s = h.scalars(t);
        Ok(AdamArgs {
            flags: (h.maximize as i32)
                | (h.decoupled() as i32) << 1
                | (h.l2() as i32) << 2
                | ((h.weight_decay == 1.0) as i32) << 3
                | (amsgrad as i32) << 4
                | (d.is_some() as i32) << 5,
            decay: s.decay,
            wd: s.weight_decay,
            w1: s.one_minus_beta1,
            b2: s.beta2,
            omb2: s.one_minus_beta2,
            bc2s: s.bias_correction2_sqrt,
            eps: s.eps,
            neg_step: s.neg_step_size,
            lr: h.lr,
            beta1: h.beta1,
            beta2: h.beta2,
            found: match d {
                Some(d) => first(&d.found_inf)?,
                None => 0,
            },
            rslot: DeviceStep::read_slot(h) as i32,
        })
    }
}

/// Parameters one `k_adam_multi` launch takes, and the elements each block takes (`MT`,
/// `CHUNK` in adam.cu).
const MT: usize = 36;
const CHUNK: u64 = 65536;

/// `AdamMulti` in adam.cu: up to [`MT`] dense parameters' operand addresses and lengths, and
/// each one's first block.
#[repr(C)]
#[derive(Clone, Copy)]
struct AdamMulti {
    p: [u64; MT],
    g: [u64; MT],
    m: [u64; MT],
    v: [u64; MT],
    vmax: [u64; MT],
    counter: [u64; MT],
    n: [i64; MT],
    chunk0: [i32; MT + 1],
}

/// The address of a dense view's first element.
fn first(v: &View) -> Result<u64> {
    Ok(dptr(v)?.1 + (v.layout.offset() * v.dtype.size_in_bytes()) as u64)
}

/// Whether the five operands of one parameter can be stepped as one run each: every view dense
/// (no gaps, no overlap) with the parameter's strides, so position `i` of the run is the same
/// element in all of them.
fn one_run(it: &AdamViews) -> bool {
    let l = it.param.layout;
    let views = [
        Some(it.grad),
        Some(it.exp_avg),
        Some(it.exp_avg_sq),
        it.max_exp_avg_sq,
    ];
    l.is_non_overlapping_and_dense()
        && views
            .iter()
            .flatten()
            .all(|v| v.layout.strides() == l.strides() && v.layout.shape() == l.shape())
}

/// See [`crate::backend::optim::adam_multi`]: the parameters whose operands are dense runs go
/// [`MT`] to a launch (grouped by dtype); any other takes [`adam`].
pub(crate) fn adam_multi(h: &AdamStep, items: &[AdamViews]) -> Result<()> {
    let mut batches: Vec<(DType, Vec<&AdamViews>)> = vec![];
    for it in items {
        if it.param.layout.numel() == 0 {
            continue;
        }
        let chunks = (it.param.layout.numel() as u64).div_ceil(CHUNK);
        if !one_run(it) || chunks > i32::MAX as u64 / 2 {
            adam_one(h, it)?;
            continue;
        }
        let t = it.param.dtype;
        match batches.iter_mut().find(|(d, b)| *d == t && b.len() < MT) {
            Some((_, b)) => b.push(it),
            None => batches.push((t, vec![it])),
        }
    }
    for (t, batch) in batches {
        launch_multi(h, t, &batch)?;
    }
    Ok(())
}

/// One `k_adam_multi` launch over `batch` (≤ [`MT`] dense parameters of dtype `t`).
fn launch_multi(h: &AdamStep, t: DType, batch: &[&AdamViews]) -> Result<()> {
    let mut a = AdamMulti {
        p: [0; MT],
        g: [0; MT],
        m: [0; MT],
        v: [0; MT],
        vmax: [0; MT],
        counter: [0; MT],
        n: [0; MT],
        chunk0: [0; MT + 1],
    };
    let mut blocks: i64 = 0;
    for (k, it) in batch.iter().enumerate() {
        a.p[k] = first(&it.param)?;
        a.g[k] = first(&it.grad)?;
        a.m[k] = first(&it.exp_avg)?;
        a.v[k] = first(&it.exp_avg_sq)?;
        a.vmax[k] = first(&it.max_exp_avg_sq.unwrap_or(it.exp_avg_sq))?;
        if let Some(d) = &it.device_step {
            a.counter[k] = first(&d.counter)?;
        }
        a.n[k] = it.param.layout.numel() as i64;
        a.chunk0[k] = blocks as i32;
        blocks += (a.n[k] as u64).div_ceil(CHUNK) as i64;
        if blocks > i32::MAX as i64 {
            return Err(crate::Error::invalid(
                "adam_step",
                "these parameters need more blocks than one launch has; step fewer at a time",
            ));
        }
    }
    a.chunk0[batch.len()] = blocks as i32;
    let amsgrad = batch[0].max_exp_avg_sq.is_some();
    let s = AdamArgs::new(h, t, amsgrad, batch[0].device_step.as_ref())?;
    let count = batch.len() as i32;
    // one vector access per PER (4) positions when every run starts aligned to it
    let align = 4 * t.size_in_bytes() as u64;
    let vec = batch.iter().enumerate().all(|(k, _)| {
        [a.p[k], a.g[k], a.m[k], a.v[k], a.vmax[k]]
            .iter()
            .all(|x| x % align == 0)
    }) as i32;
    let (dev, _) = dptr(&batch[0].param)?;
    let f = dev.function(&format!("adam_{}", tag(t)), "adam_multi", || adam_module(t))?;
    let mut args = [arg(&a), arg(&count), arg(&vec), arg(&s)];
    // SAFETY: the arguments match k_adam_multi's (AdamMulti, int, int, AdamArgs); every run lies
    // inside its storage (the frontend checked each view's extent)
    unsafe {
        launch_cfg(
            &dev,
            &f,
            "adam_step",
            (blocks as u32, 1, 1),
            (BLOCK, 1, 1),
            0,
            &mut args,
        )
    }
}
