//! ZeroRedundancyOptimizer (ZeRO stage 1) with its ranks as threads: on the CPU (TCP)
//! everywhere, and on two GPUs over NCCL where a machine has them (skipped, saying so, with
//! fewer).
//!
//! The reference is the plain optimizer on the same ranks under the same DDP: the gradients
//! are the same bits on every rank, and Adam's update is elementwise, so the owner's update of
//! a parameter is the update every rank makes with the plain optimizer — bit for bit, with no
//! tolerance. Every parameter moves in every run, and each rank owns some of them, so a
//! broadcast left out (a rank keeps its stale copy of another's parameter) or sent from the
//! wrong rank (the stale copy overwrites the update) shows as a difference.

use std::collections::BTreeMap;
use std::sync::Arc;
use stride_core::distributed::{run_threads, ProcessGroup};
use stride_core::{cuda, DType, Device, Generator, Result, Tensor};
use stride_nn::optim::{
    Adam, AdamAlgorithm, AdamConfig, NamedParameter, Optimizer, OptimizerStateDict, ParamGroup,
    ZeroRedundancyOptimizer,
};
use stride_nn::{DdpConfig, DistributedDataParallel, Factory, Linear, Module, Parameter};

type Zero = ZeroRedundancyOptimizer<AdamAlgorithm>;

const CPU2: [Device; 2] = [Device::Cpu, Device::Cpu];

/// The two-GPU tests take turns: NCCL communicators of tests running at once on the same
/// GPUs can wait on each other for ever (seen on an H200 pair: a rank's broadcast queued
/// behind another test's collective, whose peer waited behind this one's).
fn gpu_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Three layers, 6 → 5 → 4 → 3, with biases.
fn net(dev: Device) -> Result<Vec<Linear>> {
    let g = Generator::new(1);
    let f = Factory {
        device: dev,
        generator: Some(&g),
        ..Factory::default()
    };
    Ok(vec![
        Linear::new_with(6, 5, true, &f)?,
        Linear::new_with(5, 4, true, &f)?,
        Linear::new_with(4, 3, true, &f)?,
    ])
}

fn named(m: &[Linear]) -> Vec<NamedParameter> {
    m.iter()
        .enumerate()
        .flat_map(|(i, l)| {
            l.named_parameters()
                .into_iter()
                .map(move |(n, p)| (format!("l{i}.{n}"), p))
        })
        .collect()
}

/// AdamW: the weights with weight decay, the biases without (two groups).
fn groups(m: &[Linear]) -> Vec<ParamGroup<AdamConfig>> {
    let (w, b): (Vec<_>, Vec<_>) = named(m)
        .into_iter()
        .partition(|(n, _)| n.ends_with("weight"));
    let c = |wd: f64| AdamConfig {
        lr: 2e-2,
        weight_decay: wd,
        ..AdamConfig::adamw()
    };
    vec![ParamGroup::new(w, c(0.1)), ParamGroup::new(b, c(0.0))]
}

fn forward(m: &[Linear], x: &Tensor) -> Result<Tensor> {
    let h = m[0].forward(x)?.tanh()?;
    let h = m[1].forward(&h)?.tanh()?;
    m[2].forward(&h)
}

/// Step `s`'s global batch (the same on every device), and this rank's half of it.
fn batch(s: usize, g: &ProcessGroup) -> Result<(Tensor, Tensor)> {
    let gen = Generator::new(100 + s as u64);
    let dev = g.device();
    let x = Tensor::randn([8, 6], DType::F32, &Device::Cpu, Some(&gen))?.to_device(&dev)?;
    let y = Tensor::randn([8, 3], DType::F32, &Device::Cpu, Some(&gen))?.to_device(&dev)?;
    let per = 8 / g.world_size();
    let r = (g.rank() * per) as i64;
    Ok((x.narrow(0, r, per)?, y.narrow(0, r, per)?))
}

/// Forward and backward of step `s` on this rank's rows (DDP averages the gradients).
fn grads(m: &[Linear], s: usize, g: &ProcessGroup) -> Result<()> {
    let (x, y) = batch(s, g)?;
    forward(m, &x)?.sub(&y)?.square()?.mean()?.backward()
}

/// A state tensor as plain data: dtype, shape, the bits of its values as f64 (exact for f32).
type Entry = (DType, Vec<usize>, Vec<u64>);

/// A state dict as plain data (so it can cross threads): per position, per name, its
/// [`Entry`]; per group, the bits of its hyperparameters and its positions.
#[derive(Clone, Debug, PartialEq)]
struct Sd {
    state: BTreeMap<usize, BTreeMap<String, Entry>>,
    groups: Vec<(BTreeMap<String, u64>, Vec<usize>)>,
}

/// Every parameter's bits.
type Bits = Vec<Vec<u64>>;

/// Bits of every element (f32 → f64 keeps them apart, signed zeros included).
fn bits(t: &Tensor) -> Result<Vec<u64>> {
    Ok(t.to_f64_vec()?.into_iter().map(f64::to_bits).collect())
}

fn to_data(sd: &OptimizerStateDict) -> Result<Sd> {
    let mut state = BTreeMap::new();
    for (&pos, d) in &sd.state {
        let mut e = BTreeMap::new();
        for (k, t) in d {
            e.insert(k.clone(), (t.dtype(), t.shape().to_vec(), bits(t)?));
        }
        state.insert(pos, e);
    }
    let groups = sd
        .param_groups
        .iter()
        .map(|(hp, ids)| {
            (
                hp.iter().map(|(k, v)| (k.clone(), v.to_bits())).collect(),
                ids.clone(),
            )
        })
        .collect();
    Ok(Sd { state, groups })
}

fn from_data(sd: &Sd, dev: Device) -> Result<OptimizerStateDict> {
    let mut state = BTreeMap::new();
    for (&pos, d) in &sd.state {
        let mut e = BTreeMap::new();
        for (k, (dtype, shape, v)) in d {
            let vals: Vec<f64> = v.iter().map(|&b| f64::from_bits(b)).collect();
            let t = Tensor::from_vec(vals, shape.clone())?
                .to_dtype(*dtype)?
                .to_device(&dev)?;
            e.insert(k.clone(), t);
        }
        state.insert(pos, e);
    }
    let param_groups = sd
        .groups
        .iter()
        .map(|(hp, ids)| {
            (
                hp.iter()
                    .map(|(k, &v)| (k.clone(), f64::from_bits(v)))
                    .collect(),
                ids.clone(),
            )
        })
        .collect();
    Ok(OptimizerStateDict {
        state,
        param_groups,
    })
}

/// Parameters and optimizer state at some step, to start a run from.
#[derive(Clone)]
struct Snapshot {
    step: usize,
    params: Vec<Vec<u64>>,
    sd: Sd,
}

/// What a rank ends a run with.
#[derive(Debug)]
struct RankOut {
    params: Vec<Vec<u64>>,
    initial: Vec<Vec<u64>>,
    sd: Sd,
    state_bytes: usize,
    owners: Vec<Option<usize>>,
}

fn make_opt(zero: bool, m: &[Linear], g: &ProcessGroup) -> Result<Box<dyn OptimizerBytes>> {
    Ok(match zero {
        true => Box::new(Zero::with_groups(groups(m), g)?),
        false => Box::new(Adam::with_groups(groups(m))?),
    })
}

/// The two optimizers behind one face, for the runs below.
trait OptimizerBytes: Optimizer {
    fn bytes(&self) -> usize;
    fn owner(&self, _name: &str) -> Option<usize> {
        None
    }
}
impl OptimizerBytes for Adam {
    fn bytes(&self) -> usize {
        self.state_bytes()
    }
}
impl OptimizerBytes for Zero {
    fn bytes(&self) -> usize {
        self.state_bytes()
    }
    fn owner(&self, name: &str) -> Option<usize> {
        self.owner_of(name)
    }
}

/// `steps` steps of AdamW under DDP on `devices` (the plain optimizer or ZeRO), from the
/// initial parameters or from `from` (parameters loaded into the model, the state dict into
/// the optimizer).
fn run(devices: &[Device], zero: bool, steps: usize, from: Option<Snapshot>) -> Vec<RankOut> {
    let from = Arc::new(from);
    run_threads(devices, move |g| {
        let m = net(g.device())?;
        let params: Vec<Tensor> = named(&m).iter().map(|(_, p)| p.tensor()).collect();
        let mut first = 0;
        if let Some(s) = from.as_ref() {
            let _ng = stride_core::autograd::no_grad();
            for (p, v) in params.iter().zip(&s.params) {
                let vals: Vec<f64> = v.iter().map(|&b| f64::from_bits(b)).collect();
                p.copy_(&Tensor::from_vec(vals, p.shape().to_vec())?.to_device(&g.device())?)?;
            }
            first = s.step;
        }
        let initial = params.iter().map(bits).collect::<Result<_>>()?;
        let ddp = DistributedDataParallel::new(params.clone(), &g, DdpConfig::default())?;
        let mut opt = make_opt(zero, &m, &g)?;
        if let Some(s) = from.as_ref() {
            opt.load_state_dict(&from_data(&s.sd, g.device())?)?;
        }
        for s in first..first + steps {
            opt.zero_grad()?;
            grads(&m, s, &g)?;
            opt.step()?;
        }
        let _ = ddp.num_buckets();
        Ok(RankOut {
            params: params.iter().map(bits).collect::<Result<_>>()?,
            initial,
            sd: to_data(&opt.state_dict()?)?,
            state_bytes: opt.bytes(),
            // in group order: the state dict's positions
            owners: opt
                .named_params()
                .iter()
                .map(|(n, _)| opt.owner(n))
                .collect(),
        })
    })
    .into_iter()
    .map(|r| r.expect("rank failed"))
    .collect()
}

fn snapshot(out: &RankOut, step: usize) -> Snapshot {
    Snapshot {
        step,
        params: out.params.clone(),
        sd: out.sd.clone(),
    }
}

fn assert_same_params(got: &[Vec<u64>], want: &[Vec<u64>], what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            a == b,
            "{what}: parameter {i} differs from the plain optimizer's"
        );
    }
}

// ----- (a) the plain optimizer's parameters, bit for bit; (c) its state dict -------------

fn check_matches_plain(devices: &[Device]) {
    let plain = run(devices, false, 5, None);
    let zero = run(devices, true, 5, None);
    let owners = &zero[0].owners;
    for r in 0..devices.len() {
        assert!(
            owners.contains(&Some(r)),
            "rank {r} owns no parameter: {owners:?}"
        );
    }
    assert!(owners.iter().all(|o| o.is_some()));
    for (r, (z, p)) in zero.iter().zip(&plain).enumerate() {
        assert_eq!(&z.owners, owners, "rank {r} partitions differently");
        // every parameter moved, so a missing or misdirected broadcast shows
        for (i, (a, b)) in p.params.iter().zip(&p.initial).enumerate() {
            assert_ne!(a, b, "parameter {i} did not move: the test would be blind");
        }
        assert_same_params(&z.params, &p.params, &format!("ZeRO rank {r}"));
        // the consolidated state dict, on every rank, is the plain optimizer's
        assert_eq!(z.sd, p.sd, "ZeRO rank {r}: state dict");
    }
    assert_eq!(plain[0].sd.state.len(), 6);
}

#[test]
fn cpu_zero_adamw_equals_plain_adamw_under_ddp() {
    check_matches_plain(&CPU2);
}

#[test]
fn cpu_zero_four_ranks_equal_plain() {
    // 6 parameters over 4 ranks; every rank owns one or two
    let plain = run(&[Device::Cpu; 4], false, 3, None);
    let zero = run(&[Device::Cpu; 4], true, 3, None);
    for (r, (z, p)) in zero.iter().zip(&plain).enumerate() {
        assert_same_params(&z.params, &p.params, &format!("ZeRO rank {r} of 4"));
        assert_eq!(z.sd, p.sd);
    }
    let total: usize = zero.iter().map(|z| z.state_bytes).sum();
    assert_eq!(total, plain[0].state_bytes);
}

#[test]
fn cuda_zero_adamw_equals_plain_adamw_under_ddp() {
    if let Some(d) = cuda::require_gpus_or_skip("cuda_zero_adamw_equals_plain_adamw_under_ddp", 2) {
        let _turn = gpu_turn();
        check_matches_plain(&d);
    }
}

// ----- (c) state dicts round trip between ZeRO and the plain optimizer ------------------

fn check_round_trip(devices: &[Device]) {
    let whole = run(devices, false, 5, None);
    // the plain optimizer's checkpoint at step 3, continued by ZeRO
    let plain3 = run(devices, false, 3, None);
    let z = run(devices, true, 2, Some(snapshot(&plain3[0], 3)));
    // ZeRO's consolidated checkpoint at step 3, continued by the plain optimizer
    let zero3 = run(devices, true, 3, None);
    let p = run(devices, false, 2, Some(snapshot(&zero3[1], 3)));
    for r in 0..devices.len() {
        assert_same_params(
            &z[r].params,
            &whole[r].params,
            "ZeRO from a plain checkpoint",
        );
        assert_eq!(z[r].sd, whole[r].sd);
        assert_same_params(
            &p[r].params,
            &whole[r].params,
            "plain from a ZeRO checkpoint",
        );
        assert_eq!(p[r].sd, whole[r].sd);
    }
}

#[test]
fn cpu_state_dicts_round_trip_between_zero_and_plain() {
    check_round_trip(&CPU2);
}

#[test]
fn cuda_state_dicts_round_trip_between_zero_and_plain() {
    if let Some(d) =
        cuda::require_gpus_or_skip("cuda_state_dicts_round_trip_between_zero_and_plain", 2)
    {
        let _turn = gpu_turn();
        check_round_trip(&d);
    }
}

// ----- (b) the state is sharded -----------------------------------------------------------

/// 8 parameters of 16 elements: ZeRO holds half of Adam's state on each of two ranks.
fn check_state_bytes(devices: &[Device]) {
    let out = run_threads(devices, |g| {
        let dev = g.device();
        let params: Vec<NamedParameter> = (0..8)
            .map(|i| {
                let t = Tensor::full([16], i as f64, DType::F32, &dev)?;
                Ok((format!("p{i}"), Parameter::new(t)?))
            })
            .collect::<Result<_>>()?;
        let mut plain = Adam::new(params.clone(), AdamConfig::default())?;
        let mut zero = Zero::new(params.clone(), AdamConfig::default(), &g)?;
        assert_eq!((plain.state_bytes(), zero.state_bytes()), (0, 0));
        for (_, p) in &params {
            p.tensor()
                .set_grad(Some(Tensor::ones([16], DType::F32, &dev)?))?;
        }
        plain.step()?;
        zero.step()?;
        let owned = zero.owned().len();
        Ok((plain.state_bytes(), zero.state_bytes(), owned))
    });
    let out: Vec<_> = out.into_iter().map(|r| r.expect("rank failed")).collect();
    let plain = out[0].0;
    assert_eq!(plain, 8 * 16 * 4 * 2, "Adam: two f32 moments per element");
    for (r, &(p, z, owned)) in out.iter().enumerate() {
        assert_eq!(p, plain);
        assert_eq!(owned, 4, "rank {r} owns half of 8 equal parameters");
        assert_eq!(z, plain / 2, "rank {r} holds half of the state");
    }
}

#[test]
fn cpu_each_rank_holds_half_the_state() {
    check_state_bytes(&CPU2);
    // the uneven model: the ranks' shares still sum to the plain optimizer's
    let plain = run(&CPU2, false, 1, None);
    let zero = run(&CPU2, true, 1, None);
    let total: usize = zero.iter().map(|z| z.state_bytes).sum();
    assert_eq!(total, plain[0].state_bytes);
    assert!(zero.iter().all(|z| z.state_bytes < plain[0].state_bytes));
}

#[test]
fn cuda_each_rank_holds_half_the_state() {
    if let Some(d) = cuda::require_gpus_or_skip("cuda_each_rank_holds_half_the_state", 2) {
        let _turn = gpu_turn();
        check_state_bytes(&d);
    }
}

// ----- (d) a step skipped by a gradient scaler's flag --------------------------------------

/// Two steps, then a step with `found_inf` set (nothing may change), then one with it clear
/// (the plain optimizer's step): parameters and state dicts against the plain optimizer's
/// doing the same.
fn check_step_unless(devices: &[Device]) {
    let go = |zero: bool| -> Vec<(Bits, Bits, Sd, Sd)> {
        run_threads(devices, move |g| {
            let m = net(g.device())?;
            let params: Vec<Tensor> = named(&m).iter().map(|(_, p)| p.tensor()).collect();
            let ddp = DistributedDataParallel::new(params.clone(), &g, DdpConfig::default())?;
            let mut opt = make_opt(zero, &m, &g)?;
            for s in 0..2 {
                opt.zero_grad()?;
                grads(&m, s, &g)?;
                opt.step()?;
            }
            let before = params.iter().map(bits).collect::<Result<Vec<_>>>()?;
            let sd_before = to_data(&opt.state_dict()?)?;
            let inf = Tensor::scalar(1.0, DType::F32, &g.device())?;
            opt.zero_grad()?;
            grads(&m, 2, &g)?;
            opt.step_unless(&inf)?;
            let skipped = params.iter().map(bits).collect::<Result<Vec<_>>>()?;
            let sd_skipped = to_data(&opt.state_dict()?)?;
            assert_eq!(before, skipped, "a skipped step changed a parameter");
            assert_eq!(sd_before, sd_skipped, "a skipped step changed the state");
            let ok = Tensor::scalar(0.0, DType::F32, &g.device())?;
            opt.step_unless(&ok)?;
            let _ = ddp.num_buckets();
            let after = params.iter().map(bits).collect::<Result<Vec<_>>>()?;
            Ok((skipped, after, sd_skipped, to_data(&opt.state_dict()?)?))
        })
        .into_iter()
        .map(|r| r.expect("rank failed"))
        .collect()
    };
    let plain = go(false);
    let zero = go(true);
    for (r, (z, p)) in zero.iter().zip(&plain).enumerate() {
        assert_same_params(&z.0, &p.0, &format!("rank {r}, after the skipped step"));
        assert_same_params(&z.1, &p.1, &format!("rank {r}, after the step taken"));
        assert_ne!(
            z.0, z.1,
            "the step with the flag clear must move the parameters"
        );
        assert_eq!(z.2, p.2);
        assert_eq!(z.3, p.3);
    }
}

#[test]
fn cpu_step_unless_with_found_inf_changes_nothing() {
    check_step_unless(&CPU2);
}

#[test]
fn cuda_step_unless_with_found_inf_changes_nothing() {
    if let Some(d) =
        cuda::require_gpus_or_skip("cuda_step_unless_with_found_inf_changes_nothing", 2)
    {
        let _turn = gpu_turn();
        check_step_unless(&d);
    }
}

#[test]
fn cuda_zero_step_waits_for_nothing() {
    let Some(d) = cuda::require_gpus_or_skip("cuda_zero_step_waits_for_nothing", 2) else {
        return;
    };
    let _turn = gpu_turn();
    let out = run_threads(&d, |g| {
        let m = net(g.device())?;
        let params: Vec<Tensor> = named(&m).iter().map(|(_, p)| p.tensor()).collect();
        let ddp = DistributedDataParallel::new(params, &g, DdpConfig::default())?;
        let mut opt = Zero::with_groups(groups(&m), &g)?;
        // small buckets: several broadcasts per owner, some packed, some alone
        opt.set_bucket_cap_bytes(64);
        let batches = (0..3).map(|s| batch(s, &g)).collect::<Result<Vec<_>>>()?;
        let inf = Tensor::scalar(0.0, DType::F32, &g.device())?;
        {
            let _guard = stride_core::debug::forbid_sync();
            for (x, y) in &batches {
                opt.zero_grad()?;
                forward(&m, x)?.sub(y)?.square()?.mean()?.backward()?;
                opt.step()?;
                opt.step_unless(&inf)?;
            }
        }
        let _ = ddp.num_buckets();
        Ok(())
    });
    for r in out {
        r.expect("a ZeRO step on CUDA must not wait for the host");
    }
}

// ----- buckets: any cap gives the same bits ------------------------------------------------

#[test]
fn cpu_small_buckets_give_the_same_bits() {
    let want = run(&CPU2, false, 3, None);
    let got: Vec<_> = run_threads(&CPU2, |g| {
        let m = net(Device::Cpu)?;
        let params: Vec<Tensor> = named(&m).iter().map(|(_, p)| p.tensor()).collect();
        let ddp = DistributedDataParallel::new(params.clone(), &g, DdpConfig::default())?;
        let mut opt = Zero::with_groups(groups(&m), &g)?;
        // 24 bytes: the weights each alone, some biases packed together
        opt.set_bucket_cap_bytes(24);
        for s in 0..3 {
            opt.zero_grad()?;
            grads(&m, s, &g)?;
            opt.step()?;
        }
        let _ = ddp.num_buckets();
        Ok((
            params.iter().map(bits).collect::<Result<Vec<_>>>()?,
            to_data(&opt.state_dict()?)?,
        ))
    })
    .into_iter()
    .map(|r| r.expect("rank failed"))
    .collect();
    for (r, (p, sd)) in got.iter().enumerate() {
        assert_same_params(p, &want[r].params, "bucket cap 24");
        assert_eq!(sd, &want[r].sd);
    }
}

/// Parameters of any layout: a transposed one travels packed, through its strides.
#[test]
fn cpu_transposed_parameters_train_as_with_the_plain_optimizer() {
    let go = |zero: bool| -> Vec<Vec<Vec<u64>>> {
        run_threads(&CPU2, move |g| {
            let gen = Generator::new(3);
            let a = Tensor::randn([5, 3], DType::F32, &Device::Cpu, Some(&gen))?;
            let b = Tensor::randn([4], DType::F32, &Device::Cpu, Some(&gen))?;
            let params = vec![
                ("a".to_string(), Parameter::new(a.t()?)?),
                ("b".to_string(), Parameter::new(b)?),
            ];
            assert!(!params[0].1.tensor().is_contiguous());
            let mut opt: Box<dyn OptimizerBytes> = match zero {
                true => Box::new(Zero::new(params.clone(), AdamConfig::adamw(), &g)?),
                false => Box::new(Adam::new(params.clone(), AdamConfig::adamw())?),
            };
            for s in 0..3 {
                opt.zero_grad()?;
                let mut l: Option<Tensor> = None;
                for (_, p) in &params {
                    let t = p.tensor().sub(s as f64)?.square()?.sum()?;
                    l = Some(match l {
                        None => t,
                        Some(x) => x.add(&t)?,
                    });
                }
                l.unwrap().backward()?;
                opt.step()?;
            }
            params.iter().map(|(_, p)| bits(&p.tensor())).collect()
        })
        .into_iter()
        .map(|r| r.expect("rank failed"))
        .collect()
    };
    let (plain, zero) = (go(false), go(true));
    for r in 0..2 {
        assert_same_params(&zero[r], &plain[r], &format!("rank {r}"));
    }
}

/// bf16 parameters with f32 master weights: each owner steps its masters and the rounded
/// values are broadcast (the masters themselves stay with the owner, in the state dict).
/// Every parameter travels alone (a 1-byte cap), packed all the same: broadcast in place, an
/// owner's parameter would get a new version on CUDA and its master be read again from it.
fn check_master_weights(devices: &[Device]) {
    let go = |zero: bool| -> Vec<(Vec<Vec<u64>>, Sd)> {
        run_threads(devices, move |g| {
            let dev = g.device();
            let gen = Generator::new(5);
            let params: Vec<NamedParameter> = (0..4)
                .map(|i| {
                    let t = Tensor::randn([3 + i], DType::F32, &Device::Cpu, Some(&gen))?
                        .to_dtype(DType::BF16)?
                        .to_device(&dev)?;
                    Ok((format!("p{i}"), Parameter::new(t)?))
                })
                .collect::<Result<_>>()?;
            let c = AdamConfig {
                lr: 1e-3,
                ..AdamConfig::adamw()
            };
            let mut opt: Box<dyn OptimizerBytes> = match zero {
                true => {
                    let mut z = Zero::new(params.clone(), c, &g)?;
                    z.set_master_weights(true)?;
                    z.set_bucket_cap_bytes(1);
                    Box::new(z)
                }
                false => {
                    let mut o = Adam::new(params.clone(), c)?;
                    o.set_master_weights(true)?;
                    Box::new(o)
                }
            };
            for s in 0..4 {
                opt.zero_grad()?;
                for (_, p) in &params {
                    let t = p.tensor();
                    let grad = Tensor::full(t.shape().to_vec(), 0.5 + s as f64, DType::BF16, &dev)?;
                    t.set_grad(Some(grad))?;
                }
                opt.step()?;
            }
            let p = params
                .iter()
                .map(|(_, p)| bits(&p.tensor()))
                .collect::<Result<_>>()?;
            Ok((p, to_data(&opt.state_dict()?)?))
        })
        .into_iter()
        .map(|r| r.expect("rank failed"))
        .collect()
    };
    let (plain, zero) = (go(false), go(true));
    for r in 0..2 {
        assert_same_params(&zero[r].0, &plain[r].0, &format!("rank {r}"));
        assert_eq!(zero[r].1, plain[r].1, "rank {r}: state dict");
        assert!(zero[r]
            .1
            .state
            .values()
            .all(|e| e.contains_key("master_param")));
    }
}

#[test]
fn cpu_master_weights_train_as_with_the_plain_optimizer() {
    check_master_weights(&CPU2);
}

#[test]
fn cuda_master_weights_train_as_with_the_plain_optimizer() {
    if let Some(d) =
        cuda::require_gpus_or_skip("cuda_master_weights_train_as_with_the_plain_optimizer", 2)
    {
        let _turn = gpu_turn();
        check_master_weights(&d);
    }
}

// ----- (e) errors ----------------------------------------------------------------------------

#[test]
fn different_parameters_on_the_ranks_are_an_error() {
    let out = run_threads(&CPU2, |g| {
        let f = Factory::default();
        let m = Linear::new_with(4, 2 + g.rank(), true, &f)?;
        Zero::new(m.named_parameters(), AdamConfig::default(), &g).map(|_| ())
    });
    for r in out {
        let e = r.expect_err("different shapes on the ranks must be refused");
        assert!(e.to_string().contains("same parameters"), "{e}");
    }
}

#[test]
fn what_the_plain_optimizer_refuses_zero_refuses() {
    let out = run_threads(&CPU2, |g| {
        let m = net(Device::Cpu)?;
        let mut p = named(&m);
        p.push(p[0].clone());
        let dup = Zero::new(p, AdamConfig::default(), &g).map(|_| ());
        let bad = AdamConfig {
            lr: -1.0,
            ..AdamConfig::default()
        };
        let lr = Zero::new(named(&m), bad, &g).map(|_| ());
        let mut ok = Zero::with_groups(groups(&m), &g)?;
        let group = ok.set_lr(2, 1e-3);
        Ok((dup, lr, group))
    });
    for r in out {
        let (dup, lr, group) = r.expect("rank failed");
        let e = dup.expect_err("a parameter in two places");
        assert!(e.to_string().contains("more than one"), "{e}");
        let e = lr.expect_err("a negative learning rate");
        assert!(e.to_string().contains("learning rate"), "{e}");
        let e = group.expect_err("group 2 of 2");
        assert!(e.to_string().contains("no parameter group 2"), "{e}");
    }
}

/// A rank that refuses its parameters (here rank 1's learning rate) says so to the others,
/// which return an error too instead of waiting for it.
#[test]
fn a_rank_that_refuses_its_parameters_stops_the_others() {
    let out = run_threads(&CPU2, |g| {
        let m = net(Device::Cpu)?;
        let c = AdamConfig {
            lr: if g.rank() == 1 { -1.0 } else { 1e-3 },
            ..AdamConfig::default()
        };
        Zero::new(named(&m), c, &g).map(|_| ())
    });
    let e0 = out[0].as_ref().expect_err("rank 0 must not go on alone");
    assert!(e0.to_string().contains("rank 1 refused"), "{e0}");
    let e1 = out[1].as_ref().expect_err("a negative learning rate");
    assert!(e1.to_string().contains("learning rate"), "{e1}");
}

#[test]
fn parameters_off_the_groups_device_are_an_error() {
    if cuda::device_count() == 0 {
        eprintln!("parameters_off_the_groups_device_are_an_error: skipped (needs a CUDA device for parameters off the CPU group's device)");
        return;
    }
    let out = run_threads(&CPU2, |g| {
        let m = net(Device::Cuda(0))?;
        Zero::with_groups(groups(&m), &g).map(|_| ())
    });
    for r in out {
        let e = r.expect_err("parameters on cuda:0, the group on the CPU");
        let s = e.to_string();
        assert!(s.contains("cuda:0") && s.contains("move the model"), "{s}");
    }
}

/// A state dict that doesn't fit is refused on every rank — also one whose bad entry only
/// one rank owns — and leaves every rank's optimizer as it was.
#[test]
fn bad_state_dicts_are_refused_everywhere_and_change_nothing() {
    let plain = run(&CPU2, false, 2, None);
    let good = plain[0].sd.clone();
    let owners = run(&CPU2, true, 0, None)[0].owners.clone();
    let out = run_threads(&CPU2, move |g| {
        let m = net(Device::Cpu)?;
        let params: Vec<Tensor> = named(&m).iter().map(|(_, p)| p.tensor()).collect();
        let ddp = DistributedDataParallel::new(params, &g, DdpConfig::default())?;
        let mut opt = Zero::with_groups(groups(&m), &g)?;
        opt.zero_grad()?;
        grads(&m, 0, &g)?;
        opt.step()?;
        let before = to_data(&opt.state_dict()?)?;
        let mut errors = vec![];
        // one group too few
        let mut sd = from_data(&good, Device::Cpu)?;
        sd.param_groups.pop();
        errors.push(opt.load_state_dict(&sd).map(|_| ()));
        // a sharded state dict (a group missing a parameter)
        let mut sd = from_data(&good, Device::Cpu)?;
        sd.param_groups[0].1.pop();
        errors.push(opt.load_state_dict(&sd).map(|_| ()));
        // a wrong shape in the entries of a parameter rank 1 owns, and of one rank 0 owns
        for owner in [1, 0] {
            let pos = owners.iter().position(|&o| o == Some(owner)).unwrap();
            let mut sd = from_data(&good, Device::Cpu)?;
            let e = sd.state.get_mut(&pos).unwrap();
            e.insert(
                "exp_avg".into(),
                Tensor::zeros([7], DType::F32, &Device::Cpu)?,
            );
            errors.push(opt.load_state_dict(&sd).map(|_| ()));
        }
        let after = to_data(&opt.state_dict()?)?;
        let _ = ddp.num_buckets();
        Ok((errors, before == after))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (errors, unchanged) = o.expect("rank failed");
        assert!(
            unchanged,
            "rank {r}: a refused state dict changed the optimizer"
        );
        let msgs: Vec<String> = errors
            .into_iter()
            .map(|e| e.expect_err("must be refused").to_string())
            .collect();
        assert!(msgs[0].contains("parameter groups"), "{}", msgs[0]);
        assert!(msgs[1].contains("consolidated"), "{}", msgs[1]);
        assert!(msgs[2].contains("shape"), "rank {r}: {}", msgs[2]);
        assert!(msgs[3].contains("shape"), "rank {r}: {}", msgs[3]);
    }
}
