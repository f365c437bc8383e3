//! [`ProcessGroup`]: the ranks of a run and their collectives. Between CUDA devices the
//! collectives run on NCCL on a communication stream of their own, ordered against stride's
//! stream with events (the host never waits); between CPU processes they go through the
//! rendezvous store over TCP, reduced in rank order so every rank gets the same bits.

use super::env::RankEnv;
use super::nccl::{self, Comm, Nccl};
use super::store::{PeerWatch, StoreClient, StoreServer};
use super::{dist_err, tcp};
use crate::cuda::device::CudaDevice;
use crate::{DType, Device, Error, Result, Tensor};
use cudarc::driver::{CudaEvent, CudaStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a collective combines the ranks' values (PyTorch's `ReduceOp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    /// The mean over ranks; float dtypes only.
    Avg,
    Product,
    Max,
    Min,
}

impl ReduceOp {
    fn nccl(self) -> std::ffi::c_int {
        match self {
            ReduceOp::Sum => nccl::SUM,
            ReduceOp::Avg => nccl::AVG,
            ReduceOp::Product => nccl::PROD,
            ReduceOp::Max => nccl::MAX,
            ReduceOp::Min => nccl::MIN,
        }
    }
}

/// The ranks of a distributed run, one process and one device each.
///
/// Made from the environment [`super::launch`] (or `torchrun`) sets, by
/// [`ProcessGroup::from_env`]; cheap to clone (clones share the communicator).
///
/// Collectives take tensors of any layout on the group's device. On CUDA they return at once
/// with a [`Work`]: stride's later work waits for the collective only once [`Work::wait`]
/// (or dropping the `Work`) orders it so — on the device, never the host. Between CPU
/// processes they complete before returning.
///
/// Several groups over the same GPUs in one process (tests running side by side, say) must
/// issue their collectives in the same order on every rank, as NCCL requires of any two
/// communicators sharing devices: each collective is ordered after stride's one stream of its
/// device, so a rank that queues group A's collective before group B's while its peer queues
/// B's before A's waits for ever (ended by the watchdog's timeout).
#[derive(Clone)]
pub struct ProcessGroup {
    inner: Arc<Inner>,
}

struct Inner {
    env: RankEnv,
    store: StoreClient,
    // dropped after `store`'s goodbye: rank 0 serves the rendezvous for the run's life
    _server: Option<StoreServer>,
    seq: AtomicU64,
    nccl: Option<NcclGroup>,
}

/// A communicator on one device, its stream, and the watchdog over its collectives.
struct NcclGroup {
    lib: &'static Nccl,
    comm: Comm,
    dev: Arc<CudaDevice>,
    stream: Arc<CudaStream>,
    watch: Arc<Watchdog>,
    watcher: Option<std::thread::JoinHandle<()>>,
}

// SAFETY: the communicator is used by one collective at a time (behind `&self` calls that NCCL
// allows from any thread of the process) and destroyed once, on drop.
unsafe impl Send for NcclGroup {}
unsafe impl Sync for NcclGroup {}

/// Aborts a communicator whose collective has not finished within the timeout, that NCCL
/// reports failed, or that waits while a rank of the run is gone, so a dead or diverged rank
/// ends in an error instead of a hang.
struct Watchdog {
    pending: Mutex<Vec<Pending>>,
    stop: AtomicBool,
    /// Hears from the rendezvous when a rank disconnects without a goodbye.
    peers: PeerWatch,
}

/// A collective the watchdog keeps an eye on: its number, name, the event recorded after it
/// (`None` while the host is still inside NCCL's call, which can block too) and when it
/// was queued.
type Pending = (u64, &'static str, Option<Arc<CudaEvent>>, Instant);

/// The first failure of any process group in this process: every later collective and every
/// read of a CUDA device returns it (after an abort the data is not to be trusted).
static FAILED: Mutex<Option<String>> = Mutex::new(None);

/// NCCL communicators alive in this process: while there are any, host waits on a CUDA
/// device poll (see [`wait_for_stream`]) so that an aborted collective ends them.
static LIVE_COMMS: AtomicUsize = AtomicUsize::new(0);

/// Waits for everything queued on `stream`: the outer error is an aborted communicator's,
/// the inner the driver's. With no communicator alive, a plain synchronisation; otherwise an
/// event is polled, and the wait ends with the watchdog's error as soon as it has aborted a
/// communicator — a collective stuck on a dead rank would keep the stream (and a plain
/// synchronisation) from ever finishing.
pub(crate) fn wait_for_stream(
    stream: &CudaStream,
) -> Result<std::result::Result<(), cudarc::driver::DriverError>> {
    if LIVE_COMMS.load(Ordering::SeqCst) == 0 {
        let r = stream.synchronize();
        check_failed()?;
        return Ok(r);
    }
    let ev = match stream.context().new_event(None) {
        Ok(ev) => ev,
        Err(e) => return Ok(Err(e)),
    };
    if let Err(e) = ev.record(stream) {
        return Ok(Err(e));
    }
    let mut spins = 0u32;
    loop {
        check_failed()?;
        match unsafe { cudarc::driver::result::event::query(ev.cu_event()) } {
            Ok(()) => return check_failed().map(Ok),
            Err(e) if e.0 == cudarc::driver::sys::cudaError_enum::CUDA_ERROR_NOT_READY => {}
            Err(e) => return Ok(Err(e)),
        }
        // spin briefly (most waits are short), then yield the core
        spins += 1;
        if spins > 200 {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            std::hint::spin_loop();
        }
    }
}

fn failed() -> Option<String> {
    FAILED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The error of an aborted communicator, for reads of CUDA devices (`CudaDevice::synchronize`).
pub(crate) fn check_failed() -> Result<()> {
    match failed() {
        None => Ok(()),
        Some(msg) => Err(dist_err("distributed", None, msg)),
    }
}

fn timeout_from_env() -> Result<Duration> {
    match std::env::var("STRIDE_DIST_TIMEOUT") {
        Err(_) => Ok(Duration::from_secs(600)),
        Ok(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| {
                dist_err(
                    "ProcessGroup",
                    None,
                    format!("STRIDE_DIST_TIMEOUT={v:?} is not a positive number of seconds"),
                )
            }),
    }
}

impl ProcessGroup {
    /// The group of this process, from `STRIDE_RANK` and the other variables [`super::launch`]
    /// sets (or torchrun's). An error, saying how to start the ranks, when they are not set.
    pub fn from_env() -> Result<ProcessGroup> {
        match RankEnv::from_env()? {
            Some(env) => ProcessGroup::new(env),
            None => Err(dist_err(
                "ProcessGroup::from_env",
                None,
                "STRIDE_RANK is not set: this process was not started as a rank; start the ranks with stride::distributed::launch, `stride train gpt --devices …`, or torchrun",
            )),
        }
    }

    /// Joins the run `env` describes: rendezvous at `master_addr:master_port` (rank 0 serves
    /// it), then NCCL's communicator where the device is CUDA. Every rank must call this;
    /// it returns when all have (or fails after `STRIDE_DIST_TIMEOUT` seconds, 600 by default).
    pub fn new(env: RankEnv) -> Result<ProcessGroup> {
        let op = "ProcessGroup::new";
        let rank = env.rank;
        let timeout = timeout_from_env()?;
        let server = if rank == 0 {
            Some(StoreServer::start(&env.master_addr, env.master_port)?)
        } else {
            None
        };
        let store = StoreClient::connect(&env.master_addr, env.master_port, rank, timeout)?;
        // every rank must drive the same kind of device
        let kind = if env.device.is_cpu() { "tcp" } else { "nccl" };
        if rank == 0 {
            store.set(op, "backend", kind.as_bytes(), env.world_size.max(2) - 1)?;
        } else {
            let theirs = store.get(op, "backend")?;
            if theirs != kind.as_bytes() {
                return Err(dist_err(
                    op,
                    Some(rank),
                    format!(
                        "rank 0 uses {} but this rank is on {}: every rank must be on a CUDA device, or every rank on the CPU",
                        String::from_utf8_lossy(&theirs),
                        env.device
                    ),
                ));
            }
        }
        let nccl = match env.device {
            Device::Cpu => None,
            Device::Cuda(i) => Some(NcclGroup::new(&store, &env, i, timeout)?),
            Device::Wgpu(_) => {
                return Err(Error::invalid(
                    op,
                    format!(
                        "process groups run on the CPU or CUDA, not on {}; train on wgpu \
                         devices one process at a time",
                        env.device
                    ),
                ))
            }
        };
        store.barrier(op, "ready", env.world_size)?;
        store.mark_joined();
        Ok(ProcessGroup {
            inner: Arc::new(Inner {
                env,
                store,
                _server: server,
                seq: AtomicU64::new(0),
                nccl,
            }),
        })
    }

    pub fn rank(&self) -> usize {
        self.inner.env.rank
    }
    pub fn world_size(&self) -> usize {
        self.inner.env.world_size
    }
    /// This rank's index on its machine.
    pub fn local_rank(&self) -> usize {
        self.inner.env.local_rank
    }
    /// The device this rank computes on: collectives take tensors there.
    pub fn device(&self) -> Device {
        self.inner.env.device
    }
    /// `"nccl"` (CUDA) or `"tcp"` (CPU).
    pub fn backend(&self) -> &'static str {
        if self.inner.nccl.is_some() {
            "nccl"
        } else {
            "tcp"
        }
    }

    fn next_seq(&self) -> u64 {
        self.inner.seq.fetch_add(1, Ordering::Relaxed)
    }

    fn err(&self, op: &'static str, msg: impl Into<String>) -> Error {
        dist_err(op, Some(self.rank()), msg)
    }

    /// The checks every collective makes on an operand.
    fn check(&self, op: &'static str, t: &Tensor, reduces: Option<ReduceOp>) -> Result<()> {
        if let Some(msg) = failed() {
            return Err(self.err(op, msg));
        }
        if t.device() != self.device() {
            return Err(self.err(
                op,
                format!(
                    "the tensor is on {} but this rank's group is on {}: move it with to_device first",
                    t.device(),
                    self.device()
                ),
            ));
        }
        if t.requires_grad() && crate::autograd::is_grad_enabled() {
            return Err(self.err(
                op,
                "collectives are not differentiable: pass a tensor that doesn't require grad (t.detach(), or under no_grad)",
            ));
        }
        if let Some(r) = reduces {
            if t.dtype() == DType::Bool {
                return Err(self.err(
                    op,
                    "bool tensors cannot be reduced (NCCL has no bool type): convert to u8 first",
                ));
            }
            if r == ReduceOp::Avg && !t.dtype().is_float() {
                return Err(self.err(
                    op,
                    format!(
                        "ReduceOp::Avg needs a float dtype, not {:?}: use Sum and divide",
                        t.dtype()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `big` must hold world size × `small`'s elements, in `small`'s dtype (the two operands
    /// of all-gather and reduce-scatter).
    fn check_world_multiple(
        &self,
        op: &'static str,
        (big_name, big): (&str, &Tensor),
        (small_name, small): (&str, &Tensor),
    ) -> Result<()> {
        let w = self.world_size();
        if big.dtype() != small.dtype() || Some(big.numel()) != small.numel().checked_mul(w) {
            return Err(self.err(
                op,
                format!(
                    "the {big_name} ({:?} {:?}) must hold world size {w} × the {small_name} ({:?} {:?}) in the same dtype",
                    big.dtype(), big.shape(), small.dtype(), small.shape()
                ),
            ));
        }
        Ok(())
    }

    /// Reduces `t` over all ranks, in place on every rank.
    ///
    /// ```no_run
    /// # use stride_core::{distributed::{ProcessGroup, ReduceOp}, DType, Tensor};
    /// let g = ProcessGroup::from_env()?;
    /// let t = Tensor::full([3], g.rank() as f64, DType::F32, &g.device())?;
    /// g.all_reduce_(&t, ReduceOp::Sum)?.wait()?; // 0 + 1 + … on every rank
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn all_reduce_(&self, t: &Tensor, op: ReduceOp) -> Result<Work> {
        let name = "all_reduce_";
        self.check(name, t, Some(op))?;
        if t.numel() == 0 || self.world_size() == 1 {
            return Ok(Work::done());
        }
        let seq = self.next_seq();
        match &self.inner.nccl {
            None => {
                let r = tcp::all_reduce(
                    &self.inner.store,
                    name,
                    seq,
                    self.rank(),
                    self.world_size(),
                    t,
                    op,
                )?;
                t.copy_(&r)?;
                Ok(Work::done())
            }
            Some(g) => g.run_in_place(name, seq, t, |p, n, dt, s| unsafe {
                g.lib.all_reduce(p, p, n, dt, op.nccl(), g.comm, s)
            }),
        }
    }

    /// Copies rank `root`'s `t` into every rank's `t`.
    pub fn broadcast_(&self, t: &Tensor, root: usize) -> Result<Work> {
        let name = "broadcast_";
        self.check(name, t, None)?;
        if root >= self.world_size() {
            return Err(self.err(
                name,
                format!(
                    "root {root} is not a rank of a world of {}",
                    self.world_size()
                ),
            ));
        }
        if t.numel() == 0 || self.world_size() == 1 {
            return Ok(Work::done());
        }
        let seq = self.next_seq();
        match &self.inner.nccl {
            None => {
                tcp::broadcast(
                    &self.inner.store,
                    name,
                    seq,
                    self.rank(),
                    self.world_size(),
                    t,
                    root,
                )?;
                Ok(Work::done())
            }
            Some(g) => g.run_in_place(name, seq, t, |p, n, dt, s| unsafe {
                g.lib.broadcast(p, p, n, dt, root, g.comm, s)
            }),
        }
    }

    /// Every rank's `input` into `output`, rank by rank: `output` holds `world × input.numel()`
    /// elements (as PyTorch's `all_gather_into_tensor`: shape `(world·d0, …)` or `(world, …)`).
    pub fn all_gather_into(&self, output: &Tensor, input: &Tensor) -> Result<Work> {
        let name = "all_gather_into";
        self.check(name, input, None)?;
        self.check(name, output, None)?;
        let w = self.world_size();
        self.check_world_multiple(name, ("output", output), ("input", input))?;
        if input.numel() == 0 {
            return Ok(Work::done());
        }
        let seq = self.next_seq();
        match &self.inner.nccl {
            None => {
                let all = tcp::all_gather(&self.inner.store, name, seq, self.rank(), w, input)?;
                output.copy_(&all.reshape(&dims(output))?)?;
                Ok(Work::done())
            }
            Some(g) => {
                let (dt, n) = (nccl::data_type(input.dtype()), input.numel());
                g.run_out_of_place(name, seq, input, output, |ps, pd, s| unsafe {
                    g.lib.all_gather(ps, pd, n, dt, g.comm, s)
                })
            }
        }
    }

    /// Reduces `input` (`world × output.numel()` elements) over the ranks and leaves rank
    /// `r`'s `r`-th part in its `output` (PyTorch's `reduce_scatter_tensor`).
    pub fn reduce_scatter_into(
        &self,
        output: &Tensor,
        input: &Tensor,
        op: ReduceOp,
    ) -> Result<Work> {
        let name = "reduce_scatter_into";
        self.check(name, input, Some(op))?;
        self.check(name, output, Some(op))?;
        let w = self.world_size();
        self.check_world_multiple(name, ("input", input), ("output", output))?;
        if output.numel() == 0 {
            return Ok(Work::done());
        }
        let seq = self.next_seq();
        match &self.inner.nccl {
            None => {
                let r = tcp::all_reduce(&self.inner.store, name, seq, self.rank(), w, input, op)?;
                let mine = r.flatten(0, -1)?.narrow(
                    0,
                    (self.rank() * output.numel()) as i64,
                    output.numel(),
                )?;
                output.copy_(&mine.reshape(&dims(output))?)?;
                Ok(Work::done())
            }
            Some(g) => {
                let (dt, n) = (nccl::data_type(input.dtype()), output.numel());
                g.run_out_of_place(name, seq, input, output, |ps, pd, s| unsafe {
                    g.lib.reduce_scatter(ps, pd, n, dt, op.nccl(), g.comm, s)
                })
            }
        }
    }

    /// A new tensor of shape `(world·d0, …)` with every rank's `input`, in rank order.
    pub fn all_gather(&self, input: &Tensor) -> Result<Tensor> {
        let mut shape = input.shape().to_vec();
        if shape.is_empty() {
            shape.push(1);
        }
        shape[0] = shape[0]
            .checked_mul(self.world_size())
            .ok_or_else(|| self.err("all_gather", "the gathered size overflows"))?;
        let out = Tensor::empty(shape, input.dtype(), &input.device())?;
        self.all_gather_into(&out, input)?.wait()?;
        Ok(out)
    }

    /// `input` (first dim divisible by the world size) reduced over the ranks; this rank's
    /// part of the first dim.
    pub fn reduce_scatter(&self, input: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let w = self.world_size();
        let d0 = input.shape().first().copied().unwrap_or(1);
        if input.dim() == 0 || d0 % w != 0 {
            return Err(self.err(
                "reduce_scatter",
                format!(
                    "the input's first dim ({:?}) must be divisible by the world size {w}",
                    input.shape()
                ),
            ));
        }
        let mut shape = input.shape().to_vec();
        shape[0] = d0 / w;
        let out = Tensor::empty(shape, input.dtype(), &input.device())?;
        self.reduce_scatter_into(&out, input, op)?.wait()?;
        Ok(out)
    }

    /// Every rank arrives before any leaves; on CUDA after its queued work has finished (a
    /// host wait, as PyTorch's).
    pub fn barrier(&self) -> Result<()> {
        let name = "barrier";
        if let Some(msg) = failed() {
            return Err(self.err(name, msg));
        }
        if let Some(g) = &self.inner.nccl {
            g.dev.synchronize("barrier")?;
            g.stream
                .synchronize()
                .map_err(|e| g.dev.err("barrier", e))?;
        }
        let seq = self.next_seq();
        self.inner
            .store
            .barrier(name, &format!("barrier/{seq}"), self.world_size())
    }
}

/// `t`'s shape as `reshape` takes it.
fn dims(t: &Tensor) -> Vec<i64> {
    t.shape().iter().map(|&d| d as i64).collect()
}

/// A collective's operand as NCCL sees it: dense memory. A non-contiguous tensor is copied
/// into a contiguous one on stride's stream first and, for outputs, copied back after.
struct Staged {
    tensor: Tensor,
    copied: bool,
}

impl Staged {
    fn dense(t: &Tensor) -> bool {
        t.is_contiguous()
    }
    fn input(t: &Tensor) -> Result<Staged> {
        Ok(if Self::dense(t) {
            Staged {
                tensor: t.clone(),
                copied: false,
            }
        } else {
            Staged {
                tensor: t.contiguous()?,
                copied: true,
            }
        })
    }
    fn output(t: &Tensor) -> Result<Staged> {
        Ok(if Self::dense(t) {
            Staged {
                tensor: t.clone(),
                copied: false,
            }
        } else {
            Staged {
                tensor: t.empty_like(crate::MemoryFormat::Contiguous)?,
                copied: true,
            }
        })
    }
    fn ptr(&self) -> Result<u64> {
        let v = self.tensor.view_ref();
        Ok(crate::cuda::launch::element_ptr(&v)?.0)
    }
    /// What to run on stride's stream once the collective is done: the copy back into a
    /// non-contiguous destination, or the version bump of one written in place.
    fn finish(&self, dest: &Tensor) -> Finish {
        let (dest, tmp, copied) = (dest.clone(), self.tensor.clone(), self.copied);
        Box::new(move || {
            if copied {
                dest.copy_(&tmp)?;
            } else {
                dest.storage().bump_version();
            }
            Ok(())
        })
    }
}

type Finish = Box<dyn FnOnce() -> Result<()> + Send>;

impl NcclGroup {
    fn new(
        store: &StoreClient,
        env: &RankEnv,
        ordinal: usize,
        timeout: Duration,
    ) -> Result<NcclGroup> {
        let op = "ProcessGroup::new";
        let rank = env.rank;
        let lib = nccl::nccl().map_err(|e| dist_err(op, Some(rank), e.to_string()))?;
        nccl::connect_eagerly();
        let dev = crate::cuda::device::get(ordinal)?;
        dev.bind()?;
        let id = if rank == 0 {
            let id = lib.unique_id()?;
            let bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
            store.set(op, "nccl/id", &bytes, env.world_size.max(2) - 1)?;
            id
        } else {
            let bytes = store.get(op, "nccl/id")?;
            let mut id = nccl::UniqueId { internal: [0; 128] };
            if bytes.len() != 128 {
                return Err(dist_err(op, Some(rank), "rank 0 sent a malformed NCCL id"));
            }
            for (d, s) in id.internal.iter_mut().zip(bytes) {
                *d = s as std::ffi::c_char;
            }
            id
        };
        // every rank has the id: a rank that dies from here on would leave the others in
        // ncclCommInitRank, which the launcher (or the user's timeout) ends
        let comm = unsafe { lib.init_rank(env.world_size, id, rank) }
            .map_err(|e| dist_err(op, Some(rank), format!("{e} (on {})", env.device)))?;
        let stream = dev
            .ctx
            .new_stream()
            .map_err(|e| dev.err("creating the communication stream", e))?;
        let peers = PeerWatch::start(&env.master_addr, env.master_port, rank)?;
        let watch = Arc::new(Watchdog {
            pending: Mutex::new(vec![]),
            stop: AtomicBool::new(false),
            peers,
        });
        let w = watch.clone();
        let d = dev.clone();
        let comm_addr = comm as usize;
        let watcher = std::thread::Builder::new()
            .name("stride-nccl-watchdog".into())
            .spawn(move || w.run(lib, comm_addr as Comm, &d, rank, timeout))
            .map_err(|e| dist_err(op, Some(rank), format!("starting the NCCL watchdog: {e}")))?;
        LIVE_COMMS.fetch_add(1, Ordering::SeqCst);
        Ok(NcclGroup {
            lib,
            comm,
            dev,
            stream,
            watch,
            watcher: Some(watcher),
        })
    }

    /// A collective on `t` in place: staged as dense memory, `call` given its pointer, element
    /// count and NCCL dtype.
    fn run_in_place(
        &self,
        name: &'static str,
        seq: u64,
        t: &Tensor,
        call: impl FnOnce(u64, usize, std::ffi::c_int, nccl::Stream) -> Result<()>,
    ) -> Result<Work> {
        let buf = Staged::input(t)?;
        let dt = nccl::data_type(t.dtype());
        let (p, n) = (buf.ptr()?, t.numel());
        let keep = vec![t.clone(), buf.tensor.clone()];
        self.run(name, seq, keep, |s| call(p, n, dt, s), buf.finish(t))
    }

    /// A collective from `input` into another tensor `output`: both staged as dense memory,
    /// `call` given their pointers.
    fn run_out_of_place(
        &self,
        name: &'static str,
        seq: u64,
        input: &Tensor,
        output: &Tensor,
        call: impl FnOnce(u64, u64, nccl::Stream) -> Result<()>,
    ) -> Result<Work> {
        let src = Staged::input(input)?;
        let dst = Staged::output(output)?;
        let (ps, pd) = (src.ptr()?, dst.ptr()?);
        let keep = vec![
            input.clone(),
            output.clone(),
            src.tensor.clone(),
            dst.tensor.clone(),
        ];
        self.run(name, seq, keep, |s| call(ps, pd, s), dst.finish(output))
    }

    /// Queues `call` on the communication stream after stride's queued work; the [`Work`]
    /// orders stride's later work after it.
    fn run(
        &self,
        name: &'static str,
        seq: u64,
        keep: Vec<Tensor>,
        call: impl FnOnce(nccl::Stream) -> Result<()>,
        finish: Finish,
    ) -> Result<Work> {
        let e = |what: &str, err: cudarc::driver::DriverError| {
            self.dev.err(&format!("{name}: {what}"), err)
        };
        self.dev.bind()?;
        let ready = self
            .dev
            .ctx
            .new_event(None)
            .map_err(|x| e("creating an event", x))?;
        ready
            .record(&self.dev.stream)
            .map_err(|x| e("recording an event", x))?;
        self.stream
            .wait(&ready)
            .map_err(|x| e("ordering the streams", x))?;
        let device = Device::Cuda(self.dev.ordinal);
        let timed = crate::debug::profiler::comm_start(device, &self.stream);
        // watched from before the call: NCCL's host side can block too (a peer that never
        // joins a connection being set up)
        self.watch
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((seq, name, None, Instant::now()));
        let forget = || {
            let mut p = self.watch.pending.lock().unwrap_or_else(|p| p.into_inner());
            p.retain(|w| w.0 != seq);
        };
        if let Err(err) = call(self.stream.cu_stream() as nccl::Stream) {
            forget();
            return Err(err);
        }
        if timed.is_some() {
            let what = keep.first().map_or(String::new(), |t| {
                format!(
                    "{}{:?} ({} bytes)",
                    t.dtype(),
                    t.shape(),
                    t.numel() * t.dtype().size_in_bytes()
                )
            });
            crate::debug::profiler::comm_finish(timed, format!("nccl:{name}"), what, &self.stream);
        }
        let done = match self.dev.ctx.new_event(None) {
            Ok(ev) => Arc::new(ev),
            Err(x) => {
                forget();
                return Err(e("creating an event", x));
            }
        };
        if let Err(x) = done.record(&self.stream) {
            forget();
            return Err(e("recording an event", x));
        }
        if let Some(w) = self
            .watch
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter_mut()
            .find(|w| w.0 == seq)
        {
            w.2 = Some(done.clone());
        }
        Ok(Work {
            state: Some(WorkState::Cuda {
                event: done,
                compute: self.dev.stream.clone(),
                keep,
                finish: Some(finish),
            }),
        })
    }
}

impl Watchdog {
    fn run(
        &self,
        lib: &'static Nccl,
        comm: Comm,
        dev: &CudaDevice,
        rank: usize,
        timeout: Duration,
    ) {
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            if dev.bind().is_err() {
                continue;
            }
            let mut why = unsafe { lib.async_error(comm) };
            {
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                p.retain(|(_, _, ev, _)| match ev {
                    None => true,
                    Some(ev) => {
                        unsafe { cudarc::driver::result::event::query(ev.cu_event()) }.is_err()
                    }
                });
                // a collective in flight while a rank is gone can only end in the timeout
                if let (None, Some((seq, name, _, _)), Some(gone)) =
                    (&why, p.first(), self.peers.gone())
                {
                    why = Some(format!(
                        "{gone} while the collective {name} (#{seq}) was in flight"
                    ));
                }
                if why.is_none() {
                    if let Some((seq, name, _, t0)) = p.iter().find(|w| w.3.elapsed() > timeout) {
                        why = Some(format!(
                            "the collective {name} (#{seq}) did not finish within {:?} (since {:?} ago): another rank died, is stuck, or called a different collective (STRIDE_DIST_TIMEOUT sets the limit, in seconds)",
                            timeout,
                            t0.elapsed()
                        ));
                    }
                }
            }
            if let Some(why) = why {
                let msg = format!("rank {rank}: {why}; the NCCL communicator was aborted");
                eprintln!("stride: {msg}");
                FAILED
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(msg);
                unsafe { lib.abort(comm) };
                return;
            }
        }
    }
}

impl Drop for NcclGroup {
    fn drop(&mut self) {
        self.watch.stop.store(true, Ordering::Relaxed);
        // the watchdog must be gone before the communicator it polls is (it sleeps 100 ms
        // between polls; one stuck in an abort is left behind)
        if let Some(h) = self.watcher.take() {
            let t0 = Instant::now();
            while !h.is_finished() && t0.elapsed() < Duration::from_secs(1) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
        let _ = self.dev.bind();
        if failed().is_none() {
            let _ = self.stream.synchronize();
            unsafe { self.lib.destroy(self.comm) };
        }
        LIVE_COMMS.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // rank 0 keeps the rendezvous up until every rank has left it (or one has died)
        let _ = self.store.add("ProcessGroup::drop", "bye", 1);
        if self.env.rank == 0 {
            let _ =
                self.store
                    .wait_at_least("ProcessGroup::drop", "bye", self.env.world_size as i64);
        }
    }
}

/// A collective in flight (PyTorch's `Work`). [`Work::wait`] makes stride's later work on the
/// device wait for it — without a host wait; dropping it does the same.
#[must_use = "wait() orders later work after the collective (dropping the Work does too)"]
pub struct Work {
    state: Option<WorkState>,
}

enum WorkState {
    Cuda {
        event: Arc<CudaEvent>,
        compute: Arc<CudaStream>,
        keep: Vec<Tensor>,
        finish: Option<Finish>,
    },
}

impl Work {
    fn done() -> Work {
        Work { state: None }
    }
    /// Orders stride's later work on the device after this collective (the host does not
    /// wait); the collective's results can be used as soon as this returns.
    pub fn wait(mut self) -> Result<()> {
        self.complete()
    }
    /// Whether the collective has finished on the device (a query; never waits).
    pub fn is_completed(&self) -> bool {
        match &self.state {
            None => true,
            Some(WorkState::Cuda { event, .. }) => {
                let _ = event.context().bind_to_thread();
                unsafe { cudarc::driver::result::event::query(event.cu_event()) }.is_ok()
            }
        }
    }
    fn complete(&mut self) -> Result<()> {
        let Some(WorkState::Cuda {
            event,
            compute,
            keep,
            finish,
        }) = self.state.take()
        else {
            return Ok(());
        };
        compute.wait(&event).map_err(|e| {
            dist_err(
                "Work::wait",
                None,
                format!("ordering stride's stream after the collective: {e}"),
            )
        })?;
        if let Some(f) = finish {
            f()?;
        }
        drop(keep);
        Ok(())
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = self.complete();
    }
}
