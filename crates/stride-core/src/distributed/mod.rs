//! Training over several processes, one device each: a [`ProcessGroup`] with collectives
//! (all-reduce, reduce-scatter, all-gather, broadcast, barrier) over NCCL between CUDA devices
//! or over TCP between CPU processes, the rendezvous that starts it, and [`launch`], which
//! starts one process per device the way `torchrun` does.
//!
//! A process learns its place from the environment (what [`launch`] sets; `torchrun`'s names
//! are read too, so `torchrun` can start a stride program):
//!
//! | variable | meaning | torchrun's name |
//! |---|---|---|
//! | `STRIDE_RANK` | this process's rank, `0..world` | `RANK` |
//! | `STRIDE_WORLD_SIZE` | how many processes | `WORLD_SIZE` |
//! | `STRIDE_LOCAL_RANK` | its index on this machine | `LOCAL_RANK` |
//! | `STRIDE_MASTER_ADDR`, `STRIDE_MASTER_PORT` | where rank 0 serves the rendezvous | `MASTER_ADDR`, `MASTER_PORT` |
//! | `STRIDE_DEVICE` | its device (`cuda:1`, `cpu`); default `cuda:LOCAL_RANK` where CUDA is present | — |
//!
//! ```no_run
//! use stride_core::distributed::{self, Launched, ReduceOp};
//! use stride_core::{Device, Tensor};
//! // run with two GPUs: this program starts itself twice, once per device
//! match distributed::launch(&[Device::Cuda(0), Device::Cuda(1)])? {
//!     Launched::Parent => {} // every rank has finished without error
//!     Launched::Rank(group) => {
//!         let t = Tensor::ones([4], stride_core::DType::F32, &group.device())?;
//!         group.all_reduce_(&t, ReduceOp::Sum)?.wait()?;
//!         assert_eq!(t.to_vec::<f32>()?, vec![2.0; 4]);
//!     }
//! }
//! # Ok::<(), stride_core::Error>(())
//! ```

mod env;
mod group;
pub mod launch;
mod nccl;
mod store;
mod tcp;
mod threads;

pub use env::RankEnv;
pub(crate) use group::wait_for_stream;
pub use group::{ProcessGroup, ReduceOp, Work};
pub use launch::{launch, launch_with, LaunchOptions, Launched};
pub use nccl::nccl_version;
pub use threads::run_threads;

use crate::Error;

pub(crate) fn dist_err(op: &'static str, rank: Option<usize>, msg: impl Into<String>) -> Error {
    Error::Distributed {
        op,
        rank,
        msg: msg.into(),
    }
}
