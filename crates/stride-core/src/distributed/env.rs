//! A process's place in a distributed run, read from the environment (see the module docs).

use super::dist_err;
use crate::{Device, Result};

/// Where this process stands in a run: rank, world size, its device and the rendezvous
/// address. Made by [`RankEnv::from_env`] (what [`super::launch`] and `torchrun` set).
#[derive(Debug, Clone, PartialEq)]
pub struct RankEnv {
    pub rank: usize,
    pub world_size: usize,
    pub local_rank: usize,
    pub master_addr: String,
    pub master_port: u16,
    pub device: Device,
}

/// The environment variables the launcher sets for each rank.
pub(crate) const RANK: &str = "STRIDE_RANK";
pub(crate) const WORLD_SIZE: &str = "STRIDE_WORLD_SIZE";
pub(crate) const LOCAL_RANK: &str = "STRIDE_LOCAL_RANK";
pub(crate) const MASTER_ADDR: &str = "STRIDE_MASTER_ADDR";
pub(crate) const MASTER_PORT: &str = "STRIDE_MASTER_PORT";
pub(crate) const DEVICE: &str = "STRIDE_DEVICE";

fn var(names: &[&str]) -> Option<(String, String)> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().map(|v| (n.to_string(), v)))
}

fn number<T: std::str::FromStr>(names: &[&str]) -> Result<Option<T>> {
    match var(names) {
        None => Ok(None),
        Some((n, v)) => v.trim().parse().map(Some).map_err(|_| {
            dist_err(
                "RankEnv::from_env",
                None,
                format!("{n}={v:?} is not a non-negative integer"),
            )
        }),
    }
}

impl RankEnv {
    /// This process's place from `STRIDE_*` (or torchrun's) variables; `None` when no rank
    /// is set (a single-process run). An error when they are set but incomplete or wrong.
    pub fn from_env() -> Result<Option<RankEnv>> {
        let op = "RankEnv::from_env";
        let Some(rank) = number::<usize>(&[RANK, "RANK"])? else {
            return Ok(None);
        };
        let missing = |what: &str| {
            dist_err(
                op,
                Some(rank),
                format!("the rank is set but {what} is not: start the processes with stride::distributed::launch (or torchrun)"),
            )
        };
        let world_size =
            number::<usize>(&[WORLD_SIZE, "WORLD_SIZE"])?.ok_or_else(|| missing(WORLD_SIZE))?;
        if world_size == 0 || rank >= world_size {
            return Err(dist_err(
                op,
                Some(rank),
                format!("rank {rank} is outside a world of {world_size} processes"),
            ));
        }
        let local_rank = number::<usize>(&[LOCAL_RANK, "LOCAL_RANK"])?.unwrap_or(rank);
        let master_addr = var(&[MASTER_ADDR, "MASTER_ADDR"])
            .map(|(_, v)| v)
            .unwrap_or_else(|| "127.0.0.1".into());
        let master_port =
            number::<u16>(&[MASTER_PORT, "MASTER_PORT"])?.ok_or_else(|| missing(MASTER_PORT))?;
        let device = match std::env::var(DEVICE) {
            Ok(d) => Device::parse(&d).ok_or_else(|| {
                dist_err(
                    op,
                    Some(rank),
                    format!("{DEVICE}={d:?} is not a device (cpu, cuda, cuda:N)"),
                )
            })?,
            Err(_) if crate::cuda::device_count() > 0 => Device::Cuda(local_rank),
            Err(_) => Device::Cpu,
        };
        Ok(Some(RankEnv {
            rank,
            world_size,
            local_rank,
            master_addr,
            master_port,
            device,
        }))
    }
}
