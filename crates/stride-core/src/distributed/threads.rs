//! [`run_threads`]: the ranks of a run as threads of this process — for tests, notebooks and
//! single-process multi-GPU programs, where [`super::launch`]'s processes are not wanted.

use super::{ProcessGroup, RankEnv};
use crate::{Device, Result};
use std::sync::Arc;

/// Runs `f` once per device, each on a thread of its own with its rank's [`ProcessGroup`]
/// (rank `i` on `devices[i]`, rendezvous on a free loopback port), and returns their results
/// in rank order. A rank that panics is reported as an error.
///
/// ```
/// use stride_core::distributed::{run_threads, ReduceOp};
/// use stride_core::{DType, Device, Tensor};
/// let sums = run_threads(&[Device::Cpu, Device::Cpu], |g| {
///     let t = Tensor::full([2], (g.rank() + 1) as f64, DType::F32, &g.device())?;
///     g.all_reduce_(&t, ReduceOp::Sum)?.wait()?;
///     t.to_vec::<f32>()
/// });
/// for s in sums {
///     assert_eq!(s?, vec![3.0, 3.0]);
/// }
/// # Ok::<(), stride_core::Error>(())
/// ```
pub fn run_threads<T: Send + 'static>(
    devices: &[Device],
    f: impl Fn(ProcessGroup) -> Result<T> + Send + Sync + 'static,
) -> Vec<Result<T>> {
    let op = "run_threads";
    let port = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(a) => a.port(),
        Err(e) => {
            let msg = format!("no free loopback port for the rendezvous: {e}");
            return devices
                .iter()
                .map(|_| Err(super::dist_err(op, None, msg.clone())))
                .collect();
        }
    };
    if devices.iter().any(|d| !d.is_cpu()) {
        // before the threads exist: the environment is process-wide
        super::nccl::connect_eagerly();
    }
    let f = Arc::new(f);
    let n = devices.len();
    let handles: Vec<_> = devices
        .iter()
        .enumerate()
        .map(|(rank, &device)| {
            let f = f.clone();
            std::thread::Builder::new()
                .name(format!("stride-rank-{rank}"))
                .spawn(move || {
                    let g = ProcessGroup::new(RankEnv {
                        rank,
                        world_size: n,
                        local_rank: rank,
                        master_addr: "127.0.0.1".into(),
                        master_port: port,
                        device,
                    })?;
                    f(g)
                })
        })
        .collect();
    handles
        .into_iter()
        .enumerate()
        .map(|(rank, h)| match h {
            Err(e) => Err(super::dist_err(
                op,
                Some(rank),
                format!("starting its thread: {e}"),
            )),
            Ok(h) => h.join().unwrap_or_else(|_| {
                Err(super::dist_err(
                    op,
                    Some(rank),
                    "the rank's thread panicked",
                ))
            }),
        })
        .collect()
}
