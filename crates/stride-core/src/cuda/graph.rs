//! CUDA graphs: the work of a closure captured once and replayed with one launch.
//!
//! A decode step of a small language model is hundreds of tiny kernels; launched one by one
//! the host's launch overhead, not the GPU, sets the pace. Captured into a graph, the whole
//! step is one `cuGraphLaunch`. What a replay does is exactly what the capture queued —
//! the same kernels with the same arguments on the same addresses — so:
//!
//! - inputs that change between replays live in device tensors made *before* the capture
//!   and are updated in place (`copy_`, `fill_`) before each replay;
//! - the capture's own allocations come from a pool that belongs to the graph
//!   (`alloc.rs`): outputs are rewritten by every replay, like PyTorch's static outputs;
//! - a host wait inside the capture is an error (the capture runs under
//!   [`crate::debug::forbid_sync`]), as is work queued on the device by another thread;
//! - device-side checks (index ranges, …) run at every replay and report as they do
//!   eagerly, at the next read.

use super::device::{self, CudaDevice};
use crate::{Device, Error, Result};
use cudarc::driver::sys;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A captured sequence of work on one CUDA device, replayed with one launch: PyTorch's
/// `torch.cuda.CUDAGraph`.
///
/// ```
/// use stride_core::{cuda, DType, Tensor};
/// if let Some(gpu) = cuda::require_or_skip("doc: CudaGraph") {
///     let x = Tensor::zeros([4], DType::F32, &gpu)?; // the input: made before the capture
///     let (graph, y) = cuda::CudaGraph::capture(&gpu, || x.add(1.0)?.mul(2.0))?;
///     x.fill_(3.0)?; // change the input in place, then replay
///     graph.replay()?;
///     assert_eq!(y.to_vec::<f32>()?, vec![8.0; 4]); // the output is rewritten by each replay
/// }
/// # Ok::<(), stride_core::Error>(())
/// ```
pub struct CudaGraph {
    graph: cudarc::driver::CudaGraph,
    dev: Arc<CudaDevice>,
    pool: u64,
}

impl CudaGraph {
    /// Runs `f`, capturing (not executing) everything it queues on `device`, and returns the
    /// graph with `f`'s result — tensors whose contents each [`CudaGraph::replay`] writes.
    /// Nothing has run when this returns: replay once to compute them.
    ///
    /// Run `f` once eagerly before capturing (kernels compile on first use, and some ops
    /// allocate lasting state then). Errors: `f`'s own error; a host wait inside `f` (reading
    /// a value, a transfer from the host); another thread queuing work on `device` meanwhile;
    /// `device` not a CUDA device. The capture is abandoned in each case.
    pub fn capture<T>(device: &Device, f: impl FnOnce() -> Result<T>) -> Result<(CudaGraph, T)> {
        let op = "CudaGraph::capture";
        let Device::Cuda(ordinal) = *device else {
            return Err(Error::invalid(
                op,
                format!("CUDA graphs need a CUDA device, got {device}"),
            ));
        };
        let dev = device::get(ordinal)?;
        // state made on first use that the capture must not make (it allocates or uploads)
        dev.tickets()?;
        super::matmul::ensure_handle(&dev)?;
        let since = dev.deferred.last_id();
        let pool = super::alloc::begin_capture(&dev)?;
        // frees the pool on every early return below
        let mut owner = PoolOwner {
            dev: &dev,
            pool: Some(pool),
        };
        dev.bind()?;
        dev.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(|e| {
                super::alloc::end_capture(&dev);
                dev.err("CudaGraph::capture: beginning the stream capture", e)
            })?;
        let result = {
            let _no_waits = crate::debug::forbid_sync();
            f()
        };
        let ended = dev.stream.end_capture(sys::CUgraphInstantiate_flags(0));
        super::alloc::end_capture(&dev);
        let value = result?;
        let graph = match ended {
            Ok(Some(g)) => g,
            Ok(None) => {
                return Err(Error::invalid(
                    op,
                    "the closure queued no work on the device: there is nothing to replay",
                ))
            }
            Err(e) => {
                return Err(dev.err(
                    "CudaGraph::capture: ending the capture (the closure did something a capture cannot record, such as a host wait or a copy from pageable host memory)",
                    e,
                ))
            }
        };
        dev.deferred.keep_for_graph(since, pool);
        owner.pool = None;
        Ok((
            CudaGraph {
                graph,
                dev: dev.clone(),
                pool,
            },
            value,
        ))
    }

    /// Queues one run of the captured work on the device's stream (no host wait).
    pub fn replay(&self) -> Result<()> {
        self.dev.bind()?;
        self.graph
            .launch()
            .map_err(|e| self.dev.err("CudaGraph::replay", e))?;
        self.dev.launches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The device the graph runs on.
    pub fn device(&self) -> Device {
        self.dev.device()
    }

    /// How many nodes (kernels, copies, memsets) one replay runs: what a fused kernel saves
    /// shows here.
    pub fn node_count(&self) -> Result<usize> {
        let mut n: usize = 0;
        unsafe { sys::cuGraphGetNodes(self.graph.cu_graph(), std::ptr::null_mut(), &mut n) }
            .result()
            .map_err(|e| self.dev.err("CudaGraph::node_count", e))?;
        Ok(n)
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        self.dev.deferred.forget_graph(self.pool);
        super::alloc::drop_pool(&self.dev, self.pool);
    }
}

impl std::fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaGraph({})", self.dev.device())
    }
}

/// Returns a capture's pool to the common cache unless the graph took it.
struct PoolOwner<'a> {
    dev: &'a CudaDevice,
    pool: Option<u64>,
}

impl Drop for PoolOwner<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.pool {
            self.dev.deferred.forget_graph(p);
            super::alloc::drop_pool(self.dev, p);
        }
    }
}
