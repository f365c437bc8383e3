//! [`DistributedDataParallel`]: PyTorch's DDP. Every rank holds the whole model and computes
//! gradients on its share of the batch; DDP averages the gradients over the ranks while
//! backward is still running, bucket by bucket, so every rank steps to the same parameters.

use crate::Module;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use stride_core::autograd::{queue_callback, HookHandle};
use stride_core::distributed::{ProcessGroup, ReduceOp, Work};
use stride_core::{DType, Device, Error, Result, Tensor};

/// Options of [`DistributedDataParallel`].
#[derive(Debug, Clone, Copy)]
pub struct DdpConfig {
    /// Most bytes of gradients reduced together: a bucket is reduced as soon as its last
    /// gradient is ready, while backward goes on. PyTorch's default, 25 MiB.
    pub bucket_cap_bytes: usize,
}

impl Default for DdpConfig {
    fn default() -> Self {
        DdpConfig {
            bucket_cap_bytes: 25 << 20,
        }
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid {
        op: "DistributedDataParallel",
        msg: msg.into(),
    }
}

/// Averages gradients over the ranks of a [`ProcessGroup`] during backward.
///
/// Made over a model's parameters (in registration order); it broadcasts rank 0's values to
/// every rank, so all start equal. Then each `backward()` leaves in `.grad` the mean of every
/// rank's gradient: the same step as one process with the whole batch. Gradients are copied
/// into buckets (by dtype, about `bucket_cap_bytes` each, in reverse order of the parameters
/// — roughly the order backward produces them) and each bucket is all-reduced on the
/// communication stream as soon as it is complete, overlapping the rest of backward. Nothing
/// waits for the host. A parameter that gets no gradient in a backward counts as a zero
/// gradient (PyTorch's `find_unused_parameters=True`).
///
/// [`DistributedDataParallel::no_sync`] skips the averaging (gradient accumulation: average
/// once, on the last micro-batch).
///
/// ```no_run
/// use stride_core::distributed::ProcessGroup;
/// use stride_nn::{DistributedDataParallel, DdpConfig, Linear, Module, Factory};
/// let group = ProcessGroup::from_env()?;
/// let f = Factory { device: group.device(), ..Factory::default() };
/// let net = Linear::new_with(4, 2, true, &f)?;
/// let ddp = DistributedDataParallel::for_module(&net, &group, DdpConfig::default())?;
/// // each rank: loss on its own batch, backward; .grad is then the mean over the ranks
/// # Ok::<(), stride_core::Error>(())
/// ```
pub struct DistributedDataParallel {
    inner: Arc<Inner>,
    hooks: Vec<(Tensor, HookHandle)>,
}

struct Inner {
    group: ProcessGroup,
    params: Vec<Tensor>,
    buckets: Vec<Bucket>,
    /// (bucket, offset in it) of each parameter.
    place: Vec<(usize, usize)>,
    sync: AtomicBool,
    state: Mutex<State>,
}

struct Bucket {
    flat: Tensor,
    members: Vec<usize>,
}

#[derive(Default)]
struct State {
    /// A backward is under way (its end-of-backward callback is queued).
    active: bool,
    ready: Vec<bool>,
    ready_in_bucket: Vec<usize>,
    next_launch: usize,
    works: Vec<Option<Work>>,
}

impl DistributedDataParallel {
    /// Wraps `params` (every rank passes its model's parameters in the same order) for
    /// data-parallel training over `group`. Broadcasts rank 0's parameters and checks that
    /// every rank has the same shapes (one host wait, here only).
    pub fn new(
        params: Vec<Tensor>,
        group: &ProcessGroup,
        config: DdpConfig,
    ) -> Result<DistributedDataParallel> {
        if params.is_empty() {
            return Err(invalid("no parameters"));
        }
        let dev = group.device();
        for (i, p) in params.iter().enumerate() {
            if p.device() != dev {
                return Err(invalid(format!(
                    "parameter {i} is on {} but the group's device is {dev}: move the model first",
                    p.device()
                )));
            }
            if !p.requires_grad() {
                return Err(invalid(format!(
                    "parameter {i} does not require grad: pass only trained parameters"
                )));
            }
        }
        check_same_shapes(&params, group)?;
        {
            let _ng = stride_core::autograd::no_grad();
            let works = params
                .iter()
                .map(|p| group.broadcast_(&p.detach(), 0))
                .collect::<Result<Vec<_>>>()?;
            for w in works {
                w.wait()?;
            }
        }
        let (buckets, place) = plan_buckets(&params, config.bucket_cap_bytes, dev)?;
        let n = params.len();
        let nb = buckets.len();
        let inner = Arc::new(Inner {
            group: group.clone(),
            params: params.clone(),
            buckets,
            place,
            sync: AtomicBool::new(true),
            state: Mutex::new(State {
                ready: vec![false; n],
                ready_in_bucket: vec![0; nb],
                works: (0..nb).map(|_| None).collect(),
                ..State::default()
            }),
        });
        let mut hooks = vec![];
        for (i, p) in params.iter().enumerate() {
            let weak: Weak<Inner> = Arc::downgrade(&inner);
            let h =
                p.register_post_accumulate_grad_hook(move |p: &Tensor| match weak.upgrade() {
                    Some(inner) => inner.grad_ready(i, p),
                    None => Ok(()),
                })?;
            hooks.push((p.clone(), h));
        }
        Ok(DistributedDataParallel { inner, hooks })
    }

    /// [`DistributedDataParallel::new`] over every parameter of `module`.
    pub fn for_module(
        module: &dyn Module,
        group: &ProcessGroup,
        config: DdpConfig,
    ) -> Result<DistributedDataParallel> {
        let params = module.parameters().iter().map(|p| p.tensor()).collect();
        DistributedDataParallel::new(params, group, config)
    }

    /// The group the gradients are averaged over.
    pub fn group(&self) -> &ProcessGroup {
        &self.inner.group
    }

    /// How many buckets the gradients travel in.
    pub fn num_buckets(&self) -> usize {
        self.inner.buckets.len()
    }

    /// Until the guard drops, backward passes accumulate gradients locally without
    /// averaging them (PyTorch's `no_sync()`); the first backward after it averages the
    /// accumulated sum.
    pub fn no_sync(&self) -> NoSync<'_> {
        let was = self.inner.sync.swap(false, Ordering::SeqCst);
        NoSync { ddp: self, was }
    }
}

impl Drop for DistributedDataParallel {
    fn drop(&mut self) {
        for (p, h) in self.hooks.drain(..) {
            p.remove_hook(h);
        }
    }
}

/// Returned by [`DistributedDataParallel::no_sync`].
pub struct NoSync<'a> {
    ddp: &'a DistributedDataParallel,
    was: bool,
}

impl Drop for NoSync<'_> {
    fn drop(&mut self) {
        self.ddp.inner.sync.store(self.was, Ordering::SeqCst);
    }
}

/// Every rank must pass the same parameter shapes in the same order.
fn check_same_shapes(params: &[Tensor], group: &ProcessGroup) -> Result<()> {
    // a fingerprint of the shapes and dtypes: count, elements, and a position-weighted hash
    let mut h: i64 = 17;
    let mut total: i64 = 0;
    for p in params {
        for &d in p.shape() {
            h = h.wrapping_mul(31).wrapping_add(d as i64);
        }
        h = h.wrapping_mul(31).wrapping_add(p.dtype() as i64);
        total += p.numel() as i64;
    }
    let mine = [params.len() as i64, total, h];
    let t = Tensor::from_vec(mine.to_vec(), [3])?.to_device(&group.device())?;
    let all = group.all_gather(&t)?.to_vec::<i64>()?;
    for (r, theirs) in all.chunks(3).enumerate() {
        if theirs != mine {
            return Err(invalid(format!(
                "rank {r} has {} parameters ({} elements) and this rank (rank {}) {} ({} elements), or their shapes differ: every rank must build the same model",
                theirs[0],
                theirs[1],
                group.rank(),
                mine[0],
                mine[1]
            )));
        }
    }
    Ok(())
}

type Plan = (Vec<Bucket>, Vec<(usize, usize)>);

/// Buckets of at most `cap` bytes (a larger parameter gets one of its own), one dtype each,
/// filled in reverse parameter order.
fn plan_buckets(params: &[Tensor], cap: usize, dev: Device) -> Result<Plan> {
    let mut place = vec![(0, 0); params.len()];
    let mut open: Vec<(DType, Vec<usize>, usize)> = vec![];
    let mut done: Vec<(DType, Vec<usize>, usize)> = vec![];
    for i in (0..params.len()).rev() {
        let p = &params[i];
        let bytes = p.numel() * p.element_size();
        let slot = match open.iter().position(|(d, _, _)| *d == p.dtype()) {
            Some(s) => s,
            None => {
                open.push((p.dtype(), vec![], 0));
                open.len() - 1
            }
        };
        if !open[slot].1.is_empty() && (open[slot].2 + p.numel()) * p.element_size() > cap {
            let full = std::mem::replace(&mut open[slot], (p.dtype(), vec![], 0));
            done.push(full);
        }
        let b = &mut open[slot];
        b.1.push(i);
        b.2 += p.numel();
        let _ = bytes;
    }
    done.extend(open.into_iter().filter(|b| !b.1.is_empty()));
    let mut buckets = vec![];
    for (bi, (dtype, members, n)) in done.into_iter().enumerate() {
        let mut off = 0;
        for &i in &members {
            place[i] = (bi, off);
            off += params[i].numel();
        }
        buckets.push(Bucket {
            flat: Tensor::zeros([n], dtype, &dev)?,
            members,
        });
    }
    Ok((buckets, place))
}

impl Inner {
    /// The slice of parameter `i`'s bucket that holds its gradient, in the parameter's shape.
    fn slot(&self, i: usize) -> Result<Tensor> {
        let (b, off) = self.place[i];
        let p = &self.params[i];
        let shape: Vec<i64> = p.shape().iter().map(|&d| d as i64).collect();
        self.buckets[b]
            .flat
            .narrow(0, off as i64, p.numel())?
            .view(&shape)
    }

    /// Parameter `i`'s gradient is final for this backward: into its bucket; launch every
    /// complete bucket in order (all ranks must queue the same collectives in the same
    /// order).
    fn grad_ready(self: &Arc<Self>, i: usize, p: &Tensor) -> Result<()> {
        if !self.sync.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !st.active {
            st.active = true;
            let weak = Arc::downgrade(self);
            queue_callback(move || match weak.upgrade() {
                Some(inner) => inner.finish_backward(),
                None => Ok(()),
            })?;
        }
        if st.ready[i] {
            return Ok(()); // a second delivery in one backward (retain_graph re-runs): keep the first
        }
        let Some(g) = p.grad() else {
            return Ok(());
        };
        self.slot(i)?.copy_(&g)?;
        st.ready[i] = true;
        let b = self.place[i].0;
        st.ready_in_bucket[b] += 1;
        self.launch_ready(&mut st)
    }

    fn launch_ready(&self, st: &mut State) -> Result<()> {
        while st.next_launch < self.buckets.len() {
            let b = st.next_launch;
            if st.ready_in_bucket[b] < self.buckets[b].members.len() {
                break;
            }
            st.works[b] = Some(
                self.group
                    .all_reduce_(&self.buckets[b].flat, ReduceOp::Avg)?,
            );
            st.next_launch += 1;
        }
        Ok(())
    }

    /// The end of backward: gradients no parameter received count as zeros; every bucket is
    /// reduced, stride's stream waits for the reductions, and the averages go back to
    /// `.grad`.
    fn finish_backward(&self) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let r = (|| {
            for i in 0..self.params.len() {
                if !st.ready[i] {
                    self.slot(i)?.fill_(0.0)?;
                    st.ready[i] = true;
                    st.ready_in_bucket[self.place[i].0] += 1;
                }
            }
            self.launch_ready(&mut st)?;
            for w in st.works.iter_mut() {
                if let Some(w) = w.take() {
                    w.wait()?;
                }
            }
            for (i, p) in self.params.iter().enumerate() {
                let avg = self.slot(i)?;
                match p.grad() {
                    Some(g) => {
                        g.copy_(&avg)?;
                    }
                    None => p.set_grad(Some(avg.clone_tensor()?))?,
                }
            }
            Ok(())
        })();
        let n = self.params.len();
        let nb = self.buckets.len();
        st.active = false;
        st.ready = vec![false; n];
        st.ready_in_bucket = vec![0; nb];
        st.next_launch = 0;
        r
    }
}
