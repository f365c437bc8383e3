//! The CPU backend's collectives, through the rendezvous store: each rank posts its buffer,
//! reads every rank's, and reduces them in rank order, so every rank computes the same bits
//! (PyTorch's Gloo reduces in its own order; this is simpler and deterministic). Meant for
//! CPU runs and for testing distributed code without GPUs, not for speed.

use super::group::ReduceOp;
use super::store::StoreClient;
use crate::storage::{CpuBuffer, StorageData};
use crate::{DType, Layout, Result, Storage, Tensor};

/// The bytes of a CPU tensor's elements in row-major order.
fn bytes_of(t: &Tensor) -> Result<Vec<u8>> {
    let c = t.contiguous()?;
    let size = c.element_size();
    let start = c.storage_offset() * size;
    let guard = c.storage().read();
    match &*guard {
        StorageData::Cpu(b) => Ok(b.bytes()[start..start + c.numel() * size].to_vec()),
        #[allow(unreachable_patterns)]
        _ => Err(crate::Error::invalid(
            "distributed",
            "internal: a non-CPU tensor reached the TCP backend",
        )),
    }
}

/// A contiguous CPU tensor of `shape` from row-major bytes (from another rank of this run).
fn tensor_of(bytes: &[u8], like: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let dtype = like.dtype();
    let n: usize = shape.iter().product();
    let mut buf = CpuBuffer::try_zeros(dtype, n, "distributed", shape)?;
    let dst = buf.bytes_mut();
    if dst.len() != bytes.len() {
        return Err(crate::Error::invalid(
            "distributed",
            format!(
                "another rank sent {} bytes where this rank expects {} ({:?} {:?}): the ranks called the collective with different sizes",
                bytes.len(),
                dst.len(),
                dtype,
                shape
            ),
        ));
    }
    dst.copy_from_slice(bytes);
    Ok(Tensor::from_parts(
        Storage::from_cpu(buf),
        Layout::contiguous(shape),
        dtype,
    ))
}

/// Every rank's `t`, in rank order.
fn exchange(
    store: &StoreClient,
    op: &'static str,
    seq: u64,
    rank: usize,
    world: usize,
    t: &Tensor,
) -> Result<Vec<Tensor>> {
    store.set(op, &format!("c/{seq}/{rank}"), &bytes_of(t)?, world)?;
    (0..world)
        .map(|r| tensor_of(&store.get(op, &format!("c/{seq}/{r}"))?, t, t.shape()))
        .collect()
}

pub(crate) fn all_reduce(
    store: &StoreClient,
    op: &'static str,
    seq: u64,
    rank: usize,
    world: usize,
    t: &Tensor,
    how: ReduceOp,
) -> Result<Tensor> {
    let all = exchange(store, op, seq, rank, world, t)?;
    // half precision is reduced in f32 and rounded once at the end
    let half = matches!(t.dtype(), DType::F16 | DType::BF16);
    let widen = |x: &Tensor| {
        if half {
            x.to_dtype(DType::F32)
        } else {
            Ok(x.clone())
        }
    };
    let mut acc = widen(&all[0])?;
    for x in &all[1..] {
        let x = &widen(x)?;
        acc = match how {
            ReduceOp::Sum | ReduceOp::Avg => acc.add(x)?,
            ReduceOp::Product => acc.mul(x)?,
            ReduceOp::Max => acc.maximum(x)?,
            ReduceOp::Min => acc.minimum(x)?,
        };
    }
    if how == ReduceOp::Avg {
        acc = acc.div(world as f64)?;
    }
    if half {
        acc = acc.to_dtype(t.dtype())?;
    }
    Ok(acc)
}

pub(crate) fn broadcast(
    store: &StoreClient,
    op: &'static str,
    seq: u64,
    rank: usize,
    world: usize,
    t: &Tensor,
    root: usize,
) -> Result<()> {
    let key = format!("b/{seq}");
    if rank == root {
        store.set(op, &key, &bytes_of(t)?, world - 1)
    } else {
        let v = tensor_of(&store.get(op, &key)?, t, t.shape())?;
        t.copy_(&v).map(|_| ())
    }
}

/// Every rank's `t`, concatenated flat in rank order.
pub(crate) fn all_gather(
    store: &StoreClient,
    op: &'static str,
    seq: u64,
    rank: usize,
    world: usize,
    t: &Tensor,
) -> Result<Tensor> {
    let all = exchange(store, op, seq, rank, world, t)?;
    let flat = all
        .iter()
        .map(|x| x.flatten(0, -1))
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&flat.iter().collect::<Vec<_>>(), 0)
}
