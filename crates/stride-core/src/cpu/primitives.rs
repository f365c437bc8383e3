//! The CPU backend's implementation of the contract: every primitive runs natively here
//! (the CPU is also what the other backends' default bodies fall back to).

use crate::backend::contract::Backend;
use crate::backend::index::{IndexDim, ScatterOp};
use crate::backend::sort::SortedRows;
use crate::backend::{
    ArgReduceOp, BinaryOp, CumulativeOp, RandomDist, ReduceOp, TernaryOp, UnaryOp, View,
};
use crate::storage::{CpuBuffer, StorageData};
use crate::{DType, Device, Error, Result, Scalar, Storage};

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

    fn copy_cast(&self, src: View, dst: View) -> Result<()> {
        super::copy::copy_cast(src, dst)
    }
    fn fill(&self, dst: View, value: Scalar) -> Result<()> {
        super::copy::fill(dst, value)
    }
    fn unary(&self, op: UnaryOp, src: View, dst: View) -> Result<()> {
        super::elementwise::unary(op, src, dst)
    }
    fn binary(&self, op: BinaryOp, a: View, b: View, dst: View) -> Result<()> {
        super::elementwise::binary(op, a, b, dst)
    }
    fn ternary(&self, op: TernaryOp, a: View, b: View, c: View, dst: View) -> Result<()> {
        super::elementwise::ternary(op, a, b, c, dst)
    }
    fn random(&self, dist: RandomDist, seed: u64, offset: u64, dst: View) -> Result<()> {
        super::random::random(dist, seed, offset, dst)
    }
    fn matmul(&self, a: View, b: View, dst: View) -> Result<()> {
        super::matmul::matmul(a, b, dst)
    }
    fn reduce(&self, op: ReduceOp, src: View, dims: &[usize], dst: View) -> Result<()> {
        super::reduce::reduce(op, src, dims, dst)
    }
    fn arg_reduce(
        &self,
        op: ArgReduceOp,
        src: View,
        dims: &[usize],
        values: Option<View>,
        indices: View,
    ) -> Result<()> {
        super::reduce::arg_reduce(op, src, dims, values, indices)
    }
    fn gather(&self, src: View, index: View, at: IndexDim, dst: View) -> Result<()> {
        super::index::gather(src, index, at, dst)
    }
    fn scatter(
        &self,
        dst: View,
        index: View,
        at: IndexDim,
        src: View,
        op: ScatterOp,
        include_self: bool,
    ) -> Result<()> {
        super::index::scatter(dst, index, at, src, op, include_self)
    }
    fn sort(
        &self,
        src: View,
        dim: usize,
        descending: bool,
        values: View,
        indices: View,
    ) -> Result<()> {
        super::sort::sort(src, dim, descending, values, indices)
    }

    fn topk(
        &self,
        src: View,
        dim: usize,
        k: usize,
        largest: bool,
        values: View,
        indices: View,
    ) -> Result<()> {
        super::sort::topk(src, dim, k, largest, values, indices)
    }
    fn flip(&self, src: View, dims: &[usize], dst: View) -> Result<()> {
        super::flip::flip(src, dims, dst)
    }
    fn cumulative(&self, op: CumulativeOp, src: View, dim: usize, dst: View) -> Result<()> {
        super::cumulative::cumulative(op, src, dim, dst)
    }
    fn kth(
        &self,
        src: View,
        dim: usize,
        k: usize,
        nan_propagates: bool,
        values: View,
        indices: View,
    ) -> Result<()> {
        super::sort::kth(src, dim, k, nan_propagates, values, indices)
    }
    fn count_nonzero(&self, src: View) -> Result<usize> {
        super::index::count_nonzero(src)
    }
    fn nonzero(&self, src: View, dst: View) -> Result<()> {
        super::index::nonzero(src, dst)
    }
    fn masked_select(&self, src: View, mask: View, dst: View) -> Result<()> {
        super::index::masked_select(src, mask, dst)
    }
    fn masked_scatter(&self, dst: View, mask: View, src: View) -> Result<()> {
        super::index::masked_scatter(dst, mask, src)
    }
    fn extrema(&self, src: View) -> Result<Option<(Scalar, Scalar)>> {
        super::index::extrema(src)
    }
    fn count_unique_consecutive(&self, sorted: View) -> Result<usize> {
        super::sort::count_unique_consecutive(sorted)
    }
    fn unique_consecutive(
        &self,
        sorted: View,
        values: View,
        group: View,
        counts: View,
    ) -> Result<()> {
        super::sort::unique_consecutive(sorted, values, group, counts)
    }
    fn searchsorted(
        &self,
        seq: View,
        rows: SortedRows,
        values: View,
        right: bool,
        out: View,
    ) -> Result<()> {
        super::sort::searchsorted(seq, rows, values, right, out)
    }
    fn bincount(&self, input: View, weights: Option<View>, out: View) -> Result<()> {
        super::sort::bincount(input, weights, out)
    }
    fn histc(&self, input: View, lo: f64, hi: f64, out: View) -> Result<()> {
        super::sort::histc(input, lo, hi, out)
    }
}
