//! The CPU backend's implementation of the contract: every primitive runs natively here
//! (the CPU is also what the other backends' default bodies fall back to).

use crate::backend::contract::{forward_to_kernels, Backend};
use crate::storage::{CpuBuffer, StorageData};
use crate::{DType, Device, Error, Result, Storage};

/// The CPU backend (host memory, rayon threads).
pub(crate) struct Cpu;

/// The byte range `[start, start + n)` elements of a CPU storage, checked.
fn range(
    op: &'static str,
    s: &Storage,
    start: usize,
    bytes: usize,
) -> Result<std::ops::Range<usize>> {
    let esize = s.dtype().size_in_bytes();
    let lo = start.saturating_mul(esize);
    if lo.saturating_add(bytes) > s.len() * esize {
        return Err(Error::invalid(
            op,
            "internal error: a copy past the end of a storage (please report)",
        ));
    }
    Ok(lo..lo + bytes)
}

impl Backend for Cpu {
    fn alloc(&self, _: Device, dtype: DType, len: usize, _zero: bool) -> Result<Storage> {
        // fresh zeroed pages cost no more than unwritten ones
        Ok(Storage::from_cpu(CpuBuffer::try_zeros(
            dtype,
            len,
            "alloc",
            &[len],
        )?))
    }
    fn read_bytes(&self, src: &Storage, start: usize, into: &mut [u8]) -> Result<()> {
        let r = range("copy", src, start, into.len())?;
        match &*src.read() {
            StorageData::Cpu(b) => into.copy_from_slice(&b.bytes()[r]),
            _ => return Err(Error::invalid("copy", "storage is not on the CPU")),
        }
        Ok(())
    }
    fn write_bytes(&self, from: &[u8], dst: &Storage, start: usize) -> Result<()> {
        let r = range("copy", dst, start, from.len())?;
        match &mut *dst.write() {
            StorageData::Cpu(b) => b.bytes_mut()[r].copy_from_slice(from),
            _ => return Err(Error::invalid("copy", "storage is not on the CPU")),
        }
        Ok(())
    }

    forward_to_kernels! {
        copy_cast => super::copy::copy_cast;
        fill => super::copy::fill;
        unary => super::elementwise::unary;
        binary => super::elementwise::binary;
        ternary => super::elementwise::ternary;
        random => super::random::random;
        matmul => super::matmul::matmul;
        reduce => super::reduce::reduce;
        arg_reduce => super::reduce::arg_reduce;
        gather => super::index::gather;
        scatter => super::index::scatter;
        sort => super::sort::sort;
        topk => super::sort::topk;
        flip => super::flip::flip;
        cumulative => super::cumulative::cumulative;
        kth => super::sort::kth;
        count_nonzero => super::index::count_nonzero;
        nonzero => super::index::nonzero;
        masked_select => super::index::masked_select;
        masked_scatter => super::index::masked_scatter;
        extrema => super::index::extrema;
        count_unique_consecutive => super::sort::count_unique_consecutive;
        unique_consecutive => super::sort::unique_consecutive;
        searchsorted => super::sort::searchsorted;
        bincount => super::sort::bincount;
        histc => super::sort::histc;
        norm => super::norm::norm;
        cross_entropy => super::cross_entropy::cross_entropy;
        cross_entropy_backward => super::cross_entropy::cross_entropy_backward;
        norm_backward => super::norm::norm_backward;
        attention => super::attention::attention;
        cached_attention => super::cached_attention::cached_attention;
        pointwise => super::pointwise::pointwise;
        attention_backward => super::attention::attention_backward;
        grouped_matmul => super::grouped_matmul::grouped_matmul;
    }
}
