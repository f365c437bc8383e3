//! `to_device`: the only way data crosses devices, through each backend's byte copies.
//!
//! A tensor whose layout is dense and non-overlapping moves as one block and keeps its strides
//! (PyTorch's `.to()` keeps them too); any other layout is first compacted on its own device in
//! its memory order ([`crate::Layout::dense_strides_like`]). Between two accelerators the data
//! goes through the host (simple and rare; peer copies can come later).

use crate::backend::contract::backend_for;
use crate::storage::{CpuBuffer, StorageData};
use crate::{backend, Device, Error, Layout, Result, Storage, Tensor};

/// `t` on `to`: a dense copy keeping `t`'s dim order.
pub(crate) fn to_device(t: &Tensor, to: Device) -> Result<Tensor> {
    let from = t.device();
    if from == to {
        return Ok(t.clone());
    }
    let dense = if t.layout().is_non_overlapping_and_dense() {
        t.clone()
    } else {
        let d = Tensor::alloc(t.shape(), t.layout().dense_strides_like(), t.dtype(), &from)
            .map_err(|e| e.in_op("to_device"))?;
        backend::copy_cast(t.view_ref(), d.view_ref())?;
        d
    };
    let (n, dtype) = (dense.numel(), t.dtype());
    let layout = Layout::new(t.shape().to_vec(), dense.stride().to_vec(), 0);
    let first = dense.storage_offset();
    let storage = if from.is_cpu() {
        // straight from the host buffer
        let s = Storage::alloc(t.shape(), dtype, &to, false).map_err(|e| e.in_op("to_device"))?;
        let guard = dense.storage().read();
        let StorageData::Cpu(b) = &*guard else {
            return Err(Error::invalid("to_device", "storage is not on the CPU"));
        };
        let esize = dtype.size_in_bytes();
        backend_for(to).write_bytes(&b.bytes()[first * esize..(first + n) * esize], &s, 0)?;
        drop(guard);
        s
    } else {
        // host-side staging is fallible: a tensor larger than the host's memory is an
        // OutOfMemory error naming the transfer
        let mut host = CpuBuffer::try_zeros(dtype, n, "to_device", t.shape())?;
        backend_for(from).read_bytes(dense.storage(), first, host.bytes_mut())?;
        if to.is_cpu() {
            Storage::from_cpu(host)
        } else {
            let s =
                Storage::alloc(t.shape(), dtype, &to, false).map_err(|e| e.in_op("to_device"))?;
            backend_for(to).write_bytes(host.bytes(), &s, 0)?;
            s
        }
    };
    Ok(Tensor::from_parts(storage, layout, dtype))
}
