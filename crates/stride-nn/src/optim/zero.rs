//! [`ZeroRedundancyOptimizer`]: ZeRO stage 1 (PyTorch's
//! `torch.distributed.optim.ZeroRedundancyOptimizer`) — the optimizer state of a
//! data-parallel run sharded over its ranks.

use super::{
    wants_master, Algorithm, HealthReport, NamedParameter, Optim, Optimizer, OptimizerStateDict,
    ParamGroup,
};
use crate::invalid;
use crate::module::Parameter;
use std::collections::{BTreeMap, VecDeque};
use stride_core::autograd::no_grad;
use stride_core::distributed::{ProcessGroup, Work};
use stride_core::{DType, Result, Tensor};

const OP: &str = "ZeroRedundancyOptimizer";

/// PyTorch's default bucket size (DDP's too): the most bytes of parameters (or state) packed
/// into one broadcast.
const DEFAULT_BUCKET_CAP: usize = 25 << 20;

/// An optimizer whose state is sharded over the ranks of a [`ProcessGroup`] (ZeRO stage 1,
/// PyTorch's `ZeroRedundancyOptimizer`).
///
/// Every rank holds the whole model, as under [`crate::DistributedDataParallel`], but each
/// parameter has one *owner* rank, and only the owner keeps its optimizer state (Adam's two
/// moments: twice the parameters' memory, now spread over the ranks) and computes its
/// update. A [`step`](Optimizer::step) steps this rank's parameters with an [`Optim<A>`] that
/// holds only them, then broadcasts every parameter from its owner, so all ranks end the step
/// with the same values — the values a plain [`Optim<A>`] on every rank gives, bit for bit, for
/// an elementwise update such as Adam's (the gradients must be the same on every rank:
/// averaged by DDP). The broadcasts pack each owner's parameters into flat buffers of one
/// dtype (at most 25 MiB each; [`Self::set_bucket_cap_bytes`]); on CUDA they are ordered
/// with [`Work::wait`], on the device: a step contains no host wait.
///
/// **Partition.** PyTorch's greedy rule, the same on every rank: group by group, the
/// parameters largest first (ties in their order), each to the rank with the fewest elements
/// so far (the lowest such rank). The parameter groups stay as they are on every rank — a
/// rank may own none of a group's parameters — so group indices ([`Optimizer::lrs`],
/// [`Optimizer::set_lr`]) and state-dict positions are the unsharded optimizer's. Set
/// hyperparameters alike on every rank.
///
/// **Checkpoints.** [`Optimizer::state_dict`] is a *collective*: every rank must call it, at
/// the same point; each gets the consolidated state, in the plain optimizer's positions,
/// equal to what a plain [`Optim<A>`] would return — so a checkpoint of a sharded run loads
/// into a plain optimizer and the other way round. [`Optimizer::load_state_dict`] takes such
/// a full state dict; each rank keeps its own parameters' entries (no collective), and every
/// rank checks every entry first, so all accept or all refuse it.
///
/// The update-health check ([`Optimizer::set_health_check`]) covers this rank's parameters.
///
/// ```
/// use stride_core::distributed::run_threads;
/// use stride_core::{DType, Device, Generator, Result, Tensor};
/// use stride_nn::optim::{AdamAlgorithm, AdamConfig, Optimizer, ZeroRedundancyOptimizer};
/// use stride_nn::{loss, DdpConfig, DistributedDataParallel, Factory, Linear, Module};
/// let out = run_threads(&[Device::Cpu, Device::Cpu], |g| {
///     let gen = Generator::new(0);
///     let f = Factory { device: g.device(), generator: Some(&gen), ..Factory::default() };
///     let net = Linear::new_with(4, 2, true, &f)?;
///     let ddp = DistributedDataParallel::for_module(&net, &g, DdpConfig::default())?;
///     let mut opt =
///         ZeroRedundancyOptimizer::<AdamAlgorithm>::new(net.named_parameters(), AdamConfig::adamw(), &g)?;
///     // each rank: its own rows of the batch
///     let x = Tensor::full([2, 4], g.rank() as f64, DType::F32, &g.device())?;
///     let y = Tensor::zeros([2, 2], DType::F32, &g.device())?;
///     opt.zero_grad()?;
///     loss::mse_loss(&net.forward(&x)?, &y, loss::Reduction::Mean)?.backward()?;
///     opt.step()?; // this rank's parameters, then each broadcast from its owner
///     let full = opt.state_dict()?; // a collective: every rank calls it
///     let _ = ddp.num_buckets();
///     Ok((opt.owner_of("weight"), opt.state_bytes(), full.state.len(), net.weight.tensor().to_vec::<f32>()?))
/// });
/// let out = out.into_iter().collect::<Result<Vec<_>>>()?;
/// assert_eq!(out[0].0, Some(0)); // the 2×4 weight goes to rank 0, the bias to rank 1
/// assert_eq!((out[0].1, out[1].1), (64, 16)); // Adam's moments: 2 × 8 and 2 × 2 f32s
/// assert_eq!((out[0].2, out[1].2), (2, 2)); // both ranks get the whole state
/// assert_eq!(out[0].3, out[1].3); // and the same parameters
/// # Ok::<(), stride_core::Error>(())
/// ```
pub struct ZeroRedundancyOptimizer<A: Algorithm> {
    group: ProcessGroup,
    /// This rank's parameters, in every group (a group may be empty here).
    inner: Optim<A>,
    /// Every parameter, in group order.
    params: Vec<Entry>,
    /// How many parameters each group has.
    group_sizes: Vec<usize>,
    /// The global positions of this rank's parameters, in `inner`'s order.
    owned: Vec<usize>,
    bucket_cap_bytes: usize,
}

struct Entry {
    name: String,
    param: Parameter,
    owner: usize,
}

impl<A: Algorithm> ZeroRedundancyOptimizer<A> {
    /// One group of `params` (`module.named_parameters()`; every rank passes the same
    /// parameters in the same order), sharded over `group`.
    pub fn new(
        params: Vec<NamedParameter>,
        config: A::Config,
        group: &ProcessGroup,
    ) -> Result<Self> {
        Self::with_groups(vec![ParamGroup::new(params, config)], group)
    }

    /// Several groups, each with its own hyperparameters, sharded over `group`. Checks what
    /// the plain optimizer checks, that every parameter is on the group's device, and that
    /// every rank passes the same parameters (one all-gather and a host wait, here only). A
    /// rank that refuses its parameters tells the others, so every rank returns an error
    /// (none waits for it).
    pub fn with_groups(groups: Vec<ParamGroup<A::Config>>, group: &ProcessGroup) -> Result<Self> {
        let here = check_here::<A>(&groups, group);
        check_same_params(&groups, group, here.is_ok())?;
        here?;
        let group_sizes: Vec<usize> = groups.iter().map(|g| g.params.len()).collect();
        let numels: Vec<Vec<usize>> = groups
            .iter()
            .map(|g| g.params.iter().map(|(_, p)| p.numel()).collect())
            .collect();
        let owners = partition(&numels, group.world_size());
        let me = group.rank();
        let mut params = vec![];
        let mut owned = vec![];
        let mut local_groups = vec![];
        for (g, owners) in groups.into_iter().zip(owners) {
            let mut mine = vec![];
            for ((name, param), owner) in g.params.into_iter().zip(owners) {
                if owner == me {
                    owned.push(params.len());
                    mine.push((name.clone(), param.clone()));
                }
                params.push(Entry { name, param, owner });
            }
            local_groups.push(ParamGroup::new(mine, g.config));
        }
        Ok(ZeroRedundancyOptimizer {
            group: group.clone(),
            inner: Optim::with_groups(local_groups)?,
            params,
            group_sizes,
            owned,
            bucket_cap_bytes: DEFAULT_BUCKET_CAP,
        })
    }

    /// The group the state is sharded over.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// The rank that owns (keeps the state of, and updates) the parameter named `name`.
    pub fn owner_of(&self, name: &str) -> Option<usize> {
        self.params.iter().find(|e| e.name == name).map(|e| e.owner)
    }

    /// This rank's parameters, in group order.
    pub fn owned(&self) -> Vec<NamedParameter> {
        self.owned
            .iter()
            .map(|&i| (self.params[i].name.clone(), self.params[i].param.clone()))
            .collect()
    }

    /// The plain optimizer over this rank's parameters (its groups are all the groups, some
    /// perhaps empty here), e.g. for [`Optim::state_of`] an owned parameter.
    pub fn shard(&self) -> &Optim<A> {
        &self.inner
    }

    /// Bytes of optimizer state held on this rank ([`Optim::state_bytes`] of its shard): about
    /// `1 / world size` of the plain optimizer's.
    pub fn state_bytes(&self) -> usize {
        self.inner.state_bytes()
    }

    /// Mutable hyperparameters of a group (change them alike on every rank).
    pub fn config_mut(&mut self, group: usize) -> Result<&mut A::Config> {
        self.inner.config_mut(group)
    }

    /// f32 master weights for this rank's f16/bf16 parameters ([`Optim::set_master_weights`]);
    /// the rounded values are what is broadcast. Set alike on every rank, before the first
    /// step.
    pub fn set_master_weights(&mut self, on: bool) -> Result<()> {
        self.inner.set_master_weights(on)
    }

    /// The most bytes packed into one broadcast (25 MiB by default); a larger tensor travels
    /// alone. Set alike on every rank: the ranks must issue the same broadcasts.
    pub fn set_bucket_cap_bytes(&mut self, bytes: usize) {
        self.bucket_cap_bytes = bytes.max(1);
    }

    fn check_devices(&self) -> Result<()> {
        let dev = self.group.device();
        for e in &self.params {
            let d = e.param.tensor().device();
            if d != dev {
                return Err(invalid(
                    OP,
                    format!(
                        "parameter {} is on {d} but the group's device is {dev}: keep the model on {dev} (a model moved after the optimizer was made needs a new optimizer)",
                        e.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `step()` (`found_inf` None) or `step_unless(found_inf)`: this rank's parameters, then
    /// every parameter from its owner.
    fn step_with(&mut self, found_inf: Option<&Tensor>) -> Result<()> {
        self.check_devices()?;
        match found_inf {
            None => self.inner.step()?,
            Some(f) => self.inner.step_unless(f)?,
        }
        self.broadcast_params()
    }

    /// Every parameter broadcast from its owner, owner by owner, packed by dtype.
    fn broadcast_params(&self) -> Result<()> {
        let _ng = no_grad();
        let masters = self.inner.masters.is_some();
        let mut buckets = vec![];
        for owner in 0..self.group.world_size() {
            let tensors = self
                .params
                .iter()
                .filter(|e| e.owner == owner)
                .map(|e| e.param.tensor().detach())
                .collect();
            buckets.extend(plan_buckets(owner, tensors, self.bucket_cap_bytes));
        }
        // the owner of a half parameter with a master copy must not see its version move (its
        // copy would be read again from the rounded value): packed, the owner's parameter is
        // only read
        broadcast_buckets(&self.group, buckets, &|t: &Tensor| {
            !(masters && wants_master(t.dtype()))
        })
    }

    /// Every rank's bytes (`mine` on this rank), in rank order: two all-gathers (lengths,
    /// then the padded bytes) and a host wait.
    fn all_gather_bytes(&self, mine: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let dev = self.group.device();
        let w = self.group.world_size();
        let n = Tensor::from_vec(vec![mine.len() as i64], [1])?.to_device(&dev)?;
        let lens = self.group.all_gather(&n)?.to_vec::<i64>()?;
        let max = lens.iter().copied().max().unwrap_or(0).max(0) as usize;
        if max == 0 {
            return Ok(vec![vec![]; w]);
        }
        let mut padded = mine;
        padded.resize(max, 0);
        let t = Tensor::from_vec(padded, [max])?.to_device(&dev)?;
        let all = self.group.all_gather(&t)?.to_vec::<u8>()?;
        Ok(all
            .chunks(max)
            .zip(&lens)
            .map(|(c, &l)| c[..(l.max(0) as usize).min(max)].to_vec())
            .collect())
    }

    /// A full state dict's entries for this rank's parameters, in `inner`'s positions; with
    /// every other parameter's entry checked too (each loaded into a throwaway optimizer of
    /// that parameter alone), so that every rank accepts or refuses the same state dict.
    fn local_state_dict(&self, sd: &OptimizerStateDict) -> Result<OptimizerStateDict> {
        let op = "ZeroRedundancyOptimizer::load_state_dict";
        if sd.param_groups.len() != self.group_sizes.len() {
            return Err(invalid(
                op,
                format!(
                    "the state dict has {} parameter groups, this {} optimizer has {}",
                    sd.param_groups.len(),
                    A::NAME,
                    self.group_sizes.len()
                ),
            ));
        }
        for (g, ((_, ids), &n)) in sd.param_groups.iter().zip(&self.group_sizes).enumerate() {
            if ids.len() != n {
                return Err(invalid(
                    op,
                    format!(
                        "parameter group {g} has {} parameters in the state dict but {n} in the optimizer (a ZeRO optimizer loads the full, consolidated state dict)",
                        ids.len()
                    ),
                ));
            }
        }
        let ids: Vec<usize> = sd
            .param_groups
            .iter()
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect();
        let mut local = OptimizerStateDict::default();
        let mut k = 0; // position in `inner`
        let mut pos = 0; // global position
        for (g, (hp, _)) in sd.param_groups.iter().enumerate() {
            let mut local_ids = vec![];
            for _ in 0..self.group_sizes[g] {
                let e = &self.params[pos];
                let entry = sd.state.get(&ids[pos]);
                if e.owner == self.group.rank() {
                    if let Some(d) = entry {
                        local.state.insert(k, d.clone());
                    }
                    local_ids.push(k);
                    k += 1;
                } else if let Some(d) = entry {
                    self.check_entry(sd, g, e, ids[pos], d)?;
                }
                pos += 1;
            }
            local.param_groups.push((hp.clone(), local_ids));
        }
        Ok(local)
    }

    /// Loads `d`, the entry of another rank's parameter `e` (group `g`), into a throwaway
    /// optimizer of that parameter alone: the plain optimizer's checks.
    fn check_entry(
        &self,
        sd: &OptimizerStateDict,
        g: usize,
        e: &Entry,
        id: usize,
        d: &BTreeMap<String, Tensor>,
    ) -> Result<()> {
        let groups = self
            .inner
            .groups
            .iter()
            .enumerate()
            .map(|(h, grp)| {
                let params = match h == g {
                    true => vec![(e.name.clone(), e.param.clone())],
                    false => vec![],
                };
                ParamGroup::new(params, grp.config.clone())
            })
            .collect();
        let mut probe = Optim::<A>::with_groups(groups)?;
        probe.set_master_weights(self.inner.masters.is_some())?;
        let one = OptimizerStateDict {
            state: BTreeMap::from([(id, d.clone())]),
            param_groups: sd
                .param_groups
                .iter()
                .enumerate()
                .map(|(h, (hp, _))| (hp.clone(), if h == g { vec![id] } else { vec![] }))
                .collect(),
        };
        probe.load_state_dict(&one)
    }
}

impl<A: Algorithm> Optimizer for ZeroRedundancyOptimizer<A> {
    /// Steps this rank's parameters, then broadcasts every parameter from its owner (a
    /// collective: every rank steps together).
    fn step(&mut self) -> Result<()> {
        self.step_with(None)
    }
    /// [`Optimizer::step`] unless `found_inf` is set, decided on the device for Adam; the
    /// broadcasts happen either way (of unchanged values when skipped), so no rank waits.
    fn step_unless(&mut self, found_inf: &Tensor) -> Result<()> {
        self.step_with(Some(found_inf))
    }
    /// Every parameter's gradient, not only this rank's.
    fn zero_grad_with(&mut self, set_to_none: bool) -> Result<()> {
        for e in &self.params {
            let t = e.param.tensor();
            if set_to_none {
                t.set_grad(None)?;
            } else {
                t.zero_grad()?;
            }
        }
        Ok(())
    }
    fn num_groups(&self) -> usize {
        self.inner.num_groups()
    }
    fn lrs(&self) -> Vec<f64> {
        self.inner.lrs()
    }
    /// Set it alike on every rank (each steps its own parameters with its own copy).
    fn set_lr(&mut self, group: usize, lr: f64) -> Result<()> {
        self.inner.set_lr(group, lr)
    }
    fn momenta(&self) -> Vec<f64> {
        self.inner.momenta()
    }
    fn set_momentum(&mut self, group: usize, m: f64) -> Result<()> {
        self.inner.set_momentum(group, m)
    }
    /// Every parameter (not only this rank's), in group order.
    fn named_params(&self) -> Vec<NamedParameter> {
        self.params
            .iter()
            .map(|e| (e.name.clone(), e.param.clone()))
            .collect()
    }
    /// The consolidated state of every parameter, as the plain optimizer's `state_dict`
    /// returns it. **A collective: every rank must call it, at the same point** (each
    /// owner sends a descriptor of its entries — names, dtypes, shapes — then the tensors,
    /// packed by dtype); every rank gets the whole state dict. Host waits: it reads the
    /// descriptors back.
    fn state_dict(&self) -> Result<OptimizerStateDict> {
        let _ng = no_grad();
        let me = self.group.rank();
        let local = self.inner.state_dict()?;
        // this rank's entries by global position
        let mut mine: BTreeMap<usize, BTreeMap<String, Tensor>> = BTreeMap::new();
        for (k, d) in local.state {
            mine.insert(self.owned[k], d);
        }
        let descs: Vec<Desc> = mine
            .iter()
            .map(|(&pos, d)| Desc {
                pos,
                keys: d
                    .iter()
                    .map(|(k, t)| (k.clone(), t.dtype(), t.shape().to_vec()))
                    .collect(),
            })
            .collect();
        let all = self.all_gather_bytes(encode(&descs))?;
        let dev = self.group.device();
        let mut state: BTreeMap<usize, BTreeMap<String, Tensor>> = BTreeMap::new();
        let mut buckets = vec![];
        for (r, bytes) in all.iter().enumerate() {
            let descs = decode(bytes).map_err(|m| {
                invalid(
                    "ZeroRedundancyOptimizer::state_dict",
                    format!("rank {r} sent a malformed descriptor of its state ({m})"),
                )
            })?;
            let mut tensors = vec![];
            for Desc { pos, keys } in descs {
                if pos >= self.params.len() || self.params[pos].owner != r {
                    return Err(invalid(
                        "ZeroRedundancyOptimizer::state_dict",
                        format!("rank {r} sent state for parameter {pos}, which it does not own: every rank must make the optimizer over the same parameters"),
                    ));
                }
                let entry = state.entry(pos).or_default();
                for (key, dtype, shape) in keys {
                    let t = match r == me {
                        true => mine
                            .get(&pos)
                            .and_then(|d| d.get(&key))
                            .cloned()
                            .expect("described from `mine`"),
                        false => Tensor::empty(shape, dtype, &dev)?,
                    };
                    tensors.push(t.clone());
                    entry.insert(key, t);
                }
            }
            buckets.extend(plan_buckets(r, tensors, self.bucket_cap_bytes));
        }
        broadcast_buckets(&self.group, buckets, &|_| true)?;
        let mut param_groups = vec![];
        let mut pos = 0;
        for (g, (hp, _)) in local.param_groups.into_iter().enumerate() {
            let n = self.group_sizes[g];
            param_groups.push((hp, (pos..pos + n).collect()));
            pos += n;
        }
        Ok(OptimizerStateDict {
            state,
            param_groups,
        })
    }
    /// Restores a full state dict (the plain optimizer's, or a consolidated one): this rank
    /// keeps its parameters' entries. Not a collective, but call it on every rank with the
    /// same state dict. Every entry is checked first, on every rank: on error nothing has
    /// changed, on any rank.
    fn load_state_dict(&mut self, sd: &OptimizerStateDict) -> Result<()> {
        let local = self.local_state_dict(sd)?;
        self.inner.load_state_dict(&local)
    }
    fn set_health_check(&mut self, on: bool) {
        self.inner.set_health_check(on)
    }
    /// The report of this rank's parameters in the last checked step.
    fn health(&self) -> Option<&HealthReport> {
        self.inner.health()
    }
}

/// PyTorch's partition: group by group, the parameters largest first (a stable sort), each
/// to the rank with the fewest elements so far (the lowest on a tie). Each parameter's owner.
fn partition(numels: &[Vec<usize>], world: usize) -> Vec<Vec<usize>> {
    let mut sizes = vec![0usize; world.max(1)];
    numels
        .iter()
        .map(|group| {
            let mut order: Vec<usize> = (0..group.len()).collect();
            order.sort_by(|&a, &b| group[b].cmp(&group[a]));
            let mut owners = vec![0; group.len()];
            for i in order {
                let r = (0..sizes.len())
                    .min_by_key(|&r| (sizes[r], r))
                    .expect("at least one rank");
                owners[i] = r;
                sizes[r] += group[i];
            }
            owners
        })
        .collect()
}

/// What one rank can check of its parameters: the plain optimizer's checks
/// (hyperparameters, duplicates, float dtypes), and the group's device.
fn check_here<A: Algorithm>(groups: &[ParamGroup<A::Config>], group: &ProcessGroup) -> Result<()> {
    Optim::<A>::with_groups(groups.to_vec())?;
    let dev = group.device();
    for (n, p) in groups.iter().flat_map(|g| &g.params) {
        let d = p.tensor().device();
        if d != dev {
            return Err(invalid(
                OP,
                format!(
                    "parameter {n} is on {d} but the group's device is {dev}: move the model to {dev} before making the optimizer"
                ),
            ));
        }
    }
    Ok(())
}

/// Every rank must pass the same parameters (count, shapes, dtypes, groups) in the same
/// order: one all-gather of a fingerprint, and of whether each rank accepted its parameters
/// (`ok`). An error for a rank that did not (this rank's own error is the caller's to give).
fn check_same_params<C>(groups: &[ParamGroup<C>], group: &ProcessGroup, ok: bool) -> Result<()> {
    let mix = |h: i64, v: i64| h.wrapping_mul(31).wrapping_add(v);
    let (mut h, mut count, mut total) = (17i64, 0i64, 0i64);
    for g in groups {
        h = mix(h, -1 - g.params.len() as i64);
        for (_, p) in &g.params {
            let t = p.tensor();
            for &d in t.shape() {
                h = mix(h, d as i64);
            }
            h = mix(h, -100 - dtype_code(t.dtype()) as i64);
            count += 1;
            total = total.wrapping_add(t.numel() as i64);
        }
    }
    let mine = [groups.len() as i64, count, total, h, ok as i64];
    let t = Tensor::from_vec(mine.to_vec(), [5])?.to_device(&group.device())?;
    let all = group.all_gather(&t)?.to_vec::<i64>()?;
    if !ok {
        return Ok(());
    }
    for (r, theirs) in all.chunks(5).enumerate() {
        if theirs[4] == 0 {
            return Err(invalid(
                OP,
                format!("rank {r} refused its parameters (its error says why); every rank must pass parameters the optimizer accepts"),
            ));
        }
    }
    for (r, theirs) in all.chunks(5).enumerate() {
        if theirs[..4] != mine[..4] {
            return Err(invalid(
                OP,
                format!(
                    "rank {r} has {} parameters ({} elements) in {} groups and this rank (rank {}) {} ({} elements) in {}, or their shapes or dtypes differ: every rank must pass the same parameters, in the same groups and order",
                    theirs[1], theirs[2], theirs[0], group.rank(), mine[1], mine[2], mine[0]
                ),
            ));
        }
    }
    Ok(())
}

/// Tensors one rank sends, packed into one flat buffer.
struct Bucket {
    owner: usize,
    dtype: DType,
    tensors: Vec<Tensor>,
    numel: usize,
}

/// `owner`'s `tensors` in buckets of one dtype and at most `cap` bytes (a larger tensor alone),
/// in order of their first tensors. Every rank makes the same buckets from tensors of the
/// same shapes and dtypes. Empty tensors are left out.
fn plan_buckets(owner: usize, tensors: Vec<Tensor>, cap: usize) -> Vec<Bucket> {
    let mut open: Vec<Bucket> = vec![];
    let mut done: Vec<Bucket> = vec![];
    for t in tensors {
        let n = t.numel();
        if n == 0 {
            continue;
        }
        let size = t.element_size();
        let slot = match open.iter().position(|b| b.dtype == t.dtype()) {
            Some(s) => s,
            None => {
                open.push(Bucket {
                    owner,
                    dtype: t.dtype(),
                    tensors: vec![],
                    numel: 0,
                });
                open.len() - 1
            }
        };
        let b = &mut open[slot];
        if !b.tensors.is_empty() && (b.numel + n).saturating_mul(size) > cap {
            let fresh = Bucket {
                owner,
                dtype: b.dtype,
                tensors: vec![],
                numel: 0,
            };
            done.push(std::mem::replace(b, fresh));
        }
        let b = &mut open[slot];
        b.tensors.push(t);
        b.numel += n;
    }
    done.extend(open.into_iter().filter(|b| !b.tensors.is_empty()));
    // a fixed order on every rank: by first appearance (done buckets were opened first)
    done
}

/// A bucket's broadcast under way: its flat buffer (`None` when its one tensor travels as it
/// is).
struct InFlight {
    bucket: Bucket,
    flat: Option<Tensor>,
    work: Work,
}

/// Broadcasts every bucket from its owner, into the same tensors on the other ranks: the
/// owner packs a bucket into a flat buffer, every rank broadcasts it, the others unpack it. A
/// bucket of one dense tensor that `direct` allows travels as it is. Two buckets are in
/// flight at a time (on CUDA the next one is packed while the last one travels); every
/// [`Work::wait`] orders the device, never the host.
fn broadcast_buckets(
    group: &ProcessGroup,
    buckets: Vec<Bucket>,
    direct: &dyn Fn(&Tensor) -> bool,
) -> Result<()> {
    let me = group.rank();
    let dev = group.device();
    let mut flying: VecDeque<InFlight> = VecDeque::new();
    for bucket in buckets {
        let lone = bucket.tensors.len() == 1
            && bucket.tensors[0].is_contiguous()
            && direct(&bucket.tensors[0]);
        let flight = if lone {
            let work = group.broadcast_(&bucket.tensors[0], bucket.owner)?;
            InFlight {
                bucket,
                flat: None,
                work,
            }
        } else {
            let flat = Tensor::empty([bucket.numel], bucket.dtype, &dev)?;
            if me == bucket.owner {
                for (t, slot) in bucket.tensors.iter().zip(slots(&flat, &bucket.tensors)?) {
                    slot.copy_(t)?;
                }
            }
            let work = group.broadcast_(&flat, bucket.owner)?;
            InFlight {
                bucket,
                flat: Some(flat),
                work,
            }
        };
        flying.push_back(flight);
        if flying.len() > 1 {
            land(flying.pop_front().expect("two in flight"), me)?;
        }
    }
    while let Some(f) = flying.pop_front() {
        land(f, me)?;
    }
    Ok(())
}

/// Orders the device after a bucket's broadcast and unpacks it (on the ranks that received
/// it).
fn land(f: InFlight, me: usize) -> Result<()> {
    f.work.wait()?;
    if let (Some(flat), true) = (&f.flat, me != f.bucket.owner) {
        for (t, slot) in f.bucket.tensors.iter().zip(slots(flat, &f.bucket.tensors)?) {
            t.copy_(&slot)?;
        }
    }
    Ok(())
}

/// Each tensor's slice of `flat`, in its shape.
fn slots(flat: &Tensor, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
    let mut off = 0;
    tensors
        .iter()
        .map(|t| {
            let shape: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
            let s = flat.narrow(0, off as i64, t.numel())?.view(&shape)?;
            off += t.numel();
            Ok(s)
        })
        .collect()
}

// ----- descriptors of the state entries -------------------------------------------------

/// One parameter's state entries as an owner announces them: its global position and, per
/// entry, its name, dtype and shape.
struct Desc {
    pos: usize,
    keys: Vec<(String, DType, Vec<usize>)>,
}

const DTYPES: [DType; 10] = [
    DType::Bool,
    DType::U8,
    DType::I8,
    DType::I32,
    DType::U32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

fn dtype_code(d: DType) -> u8 {
    DTYPES.iter().position(|&x| x == d).expect("every dtype") as u8
}

/// `[n]` then per entry `[pos, keys]`, per key `[name length, name…, dtype, ndim, dims…]`;
/// numbers as u64 little-endian, names UTF-8.
fn encode(descs: &[Desc]) -> Vec<u8> {
    let mut out = vec![];
    let num = |out: &mut Vec<u8>, v: usize| out.extend_from_slice(&(v as u64).to_le_bytes());
    num(&mut out, descs.len());
    for d in descs {
        num(&mut out, d.pos);
        num(&mut out, d.keys.len());
        for (name, dtype, shape) in &d.keys {
            num(&mut out, name.len());
            out.extend_from_slice(name.as_bytes());
            out.push(dtype_code(*dtype));
            num(&mut out, shape.len());
            for &s in shape {
                num(&mut out, s);
            }
        }
    }
    out
}

fn decode(bytes: &[u8]) -> std::result::Result<Vec<Desc>, String> {
    if bytes.is_empty() {
        return Ok(vec![]);
    }
    let mut at = 0usize;
    let mut take = |n: usize| -> std::result::Result<&[u8], String> {
        let s = bytes
            .get(at..at.saturating_add(n))
            .ok_or_else(|| format!("{} bytes end early", bytes.len()))?;
        at += n;
        Ok(s)
    };
    fn num(s: &[u8]) -> usize {
        u64::from_le_bytes(s.try_into().expect("8 bytes")) as usize
    }
    let mut descs = vec![];
    for _ in 0..num(take(8)?) {
        let pos = num(take(8)?);
        let nkeys = num(take(8)?);
        let mut keys = vec![];
        for _ in 0..nkeys {
            let len = num(take(8)?);
            let name = String::from_utf8(take(len)?.to_vec()).map_err(|e| e.to_string())?;
            let code = take(1)?[0] as usize;
            let dtype = *DTYPES
                .get(code)
                .ok_or_else(|| format!("unknown dtype code {code}"))?;
            let ndim = num(take(8)?);
            let shape = (0..ndim)
                .map(|_| take(8).map(num))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            keys.push((name, dtype, shape));
        }
        descs.push(Desc { pos, keys });
    }
    Ok(descs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_is_greedy_largest_first_and_keeps_counting_across_groups() {
        // group 0: 10, 30, 20 → 30→r0, 20→r1, 10→r1 (r1 has 20 < 30); group 1: 5, 5 → r1 has
        // 30 = r0's 30 → r0 (lowest), then r1
        let o = partition(&[vec![10, 30, 20], vec![5, 5]], 2);
        assert_eq!(o, vec![vec![1, 0, 1], vec![0, 1]]);
        // equal sizes alternate
        assert_eq!(partition(&[vec![4; 6]], 3), vec![vec![0, 1, 2, 0, 1, 2]]);
        // one rank owns everything
        assert_eq!(
            partition(&[vec![1, 2], vec![]], 1),
            vec![vec![0, 0], vec![]]
        );
    }

    #[test]
    fn descriptors_round_trip() {
        let d = vec![
            Desc {
                pos: 3,
                keys: vec![
                    ("exp_avg".into(), DType::F32, vec![4, 5]),
                    ("step".into(), DType::F32, vec![]),
                ],
            },
            Desc {
                pos: 7,
                keys: vec![("momentum_buffer".into(), DType::BF16, vec![2])],
            },
        ];
        let back = decode(&encode(&d)).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].pos, 3);
        assert_eq!(back[0].keys, d[0].keys);
        assert_eq!(back[1].keys, d[1].keys);
        assert!(decode(&encode(&d)[..20]).is_err());
        assert!(decode(&[]).unwrap().is_empty());
    }
}
