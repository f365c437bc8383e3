//! The wgpu backend's implementation of the contract.
//!
//! Native WGSL kernels: copy/cast, fill, unary, binary and ternary ops for every dtype but
//! i64 (f64 is refused at allocation; i64 copies without a cast and i64 fills are native), float matrix products, reductions and arg
//! reductions (every dtype), scans (lines up to 60,000), random fills but normal draws, and
//! gathers and scatters (every dtype; index checks on the device, deferred; scatter axes up
//! to 60,000 steps an invocation) and sorts (so `topk`; rows up to 2^17). Everything else —
//! i64 arithmetic, normal draws, masked selections, k-th values and the fused primitives —
//! runs as a CPU round trip
//! ([`via_cpu`]): a counted host wait that `debug::forbid_sync` refuses and the profiler
//! shows, never a silent one.

use super::elementwise as ew;
use crate::backend::contract::{via_cpu, Backend};
use crate::backend::index::{IndexDim, ScatterOp};
use crate::backend::{
    ArgReduceOp, BinaryOp, CumulativeOp, RandomDist, ReduceOp, TernaryOp, UnaryOp, View,
};
use crate::{cpu, DType, Device, Error, Result, Scalar, Storage};

/// The wgpu backend (Metal, Vulkan, DirectX 12 through `wgpu`).
pub(crate) struct Wgpu;

impl Backend for Wgpu {
    fn alloc(&self, device: Device, dtype: DType, len: usize, zero: bool) -> Result<Storage> {
        let Device::Wgpu(i) = device else {
            return Err(Error::invalid(
                "alloc",
                "internal error: not a wgpu device (please report)",
            ));
        };
        super::buffer::alloc_storage(&super::device::get(i)?, dtype, len, zero)
    }
    fn read_bytes(&self, src: &Storage, start: usize, into: &mut [u8]) -> Result<()> {
        super::transfer::read_bytes(src, start, into)
    }
    fn write_bytes(&self, from: &[u8], dst: &Storage, start: usize) -> Result<()> {
        super::transfer::write_bytes(from, dst, start)
    }

    fn copy_cast(&self, src: View, dst: View) -> Result<()> {
        if ew::native_copy(src, dst) {
            return ew::copy_cast(src, dst);
        }
        via_cpu(self, "copy", &[src], &[dst], |i, o| {
            cpu::copy::copy_cast(i[0], o[0])
        })
    }
    fn fill(&self, dst: View, value: Scalar) -> Result<()> {
        if ew::native_fill(dst) {
            return ew::fill(dst, value);
        }
        via_cpu(self, "fill", &[], &[dst], |_, o| {
            cpu::copy::fill(o[0], value)
        })
    }
    fn unary(&self, op: UnaryOp, src: View, dst: View) -> Result<()> {
        if ew::native(&[src, dst]) {
            return ew::unary(op, src, dst);
        }
        via_cpu(self, op.name(), &[src], &[dst], |i, o| {
            cpu::elementwise::unary(op, i[0], o[0])
        })
    }
    fn binary(&self, op: BinaryOp, a: View, b: View, dst: View) -> Result<()> {
        // integer division and powers check their divisor (exponent) on the device first
        if ew::native(&[a, b, dst]) {
            return ew::binary(op, a, b, dst);
        }
        via_cpu(self, op.name(), &[a, b], &[dst], |i, o| {
            cpu::elementwise::binary(op, i[0], i[1], o[0])
        })
    }
    fn ternary(&self, op: TernaryOp, a: View, b: View, c: View, dst: View) -> Result<()> {
        if ew::native(&[a, b, c, dst]) {
            return ew::ternary(op, a, b, c, dst);
        }
        if ew::native_select(op, a, b, c, dst) {
            return ew::select_i64(a, b, c, dst);
        }
        via_cpu(self, op.name(), &[a, b, c], &[dst], |i, o| {
            cpu::elementwise::ternary(op, i[0], i[1], i[2], o[0])
        })
    }
    fn random(&self, dist: RandomDist, seed: u64, offset: u64, dst: View) -> Result<()> {
        if super::random::native(dist, dst.dtype) {
            return super::random::random(dist, seed, offset, dst);
        }
        via_cpu(self, "random", &[], &[dst], |_, o| {
            cpu::random::random(dist, seed, offset, o[0])
        })
    }
    fn matmul(&self, a: View, b: View, dst: View) -> Result<()> {
        if super::matmul::native(a, dst) {
            return super::matmul::matmul(a, b, dst);
        }
        via_cpu(self, "matmul", &[a, b], &[dst], |i, o| {
            cpu::matmul::matmul(i[0], i[1], o[0])
        })
    }
    fn reduce(&self, op: ReduceOp, src: View, dims: &[usize], dst: View) -> Result<()> {
        if super::reduce::native(src) {
            return super::reduce::reduce(op, src, dims, dst);
        }
        via_cpu(self, op.name(), &[src], &[dst], |i, o| {
            cpu::reduce::reduce(op, i[0], dims, o[0])
        })
    }
    fn arg_reduce(
        &self,
        op: ArgReduceOp,
        src: View,
        dims: &[usize],
        values: Option<View>,
        indices: View,
    ) -> Result<()> {
        if super::reduce::native(src) {
            return super::reduce::arg_reduce(op, src, dims, values, indices);
        }
        let outputs: Vec<View> = values.into_iter().chain([indices]).collect();
        via_cpu(self, op.name(), &[src], &outputs, |i, o| {
            let (v, ix) = match o {
                [v, ix] => (Some(*v), *ix),
                _ => (None, o[0]),
            };
            cpu::reduce::arg_reduce(op, i[0], dims, v, ix)
        })
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
        if super::index::scatter_native(&index, &at, include_self, op) {
            return super::index::scatter(dst, index, at, src, op, include_self);
        }
        via_cpu(self, "scatter", &[index, src], &[dst], |i, o| {
            cpu::index::scatter(o[0], i[0], at, i[1], op, include_self)
        })
    }
    fn cumulative(&self, op: CumulativeOp, src: View, dim: usize, dst: View) -> Result<()> {
        if super::scan::native(src, dim) {
            return super::scan::cumulative(op, src, dim, dst);
        }
        via_cpu(self, op.name(), &[src], &[dst], |i, o| {
            cpu::cumulative::cumulative(op, i[0], dim, o[0])
        })
    }
    fn sort(
        &self,
        src: View,
        dim: usize,
        descending: bool,
        values: View,
        indices: View,
    ) -> Result<()> {
        let max_binding = super::launch::gpu_of("sort", &values)?
            .limits
            .max_storage_buffer_binding_size;
        if super::sort::native(src, dim, values, indices, max_binding) {
            return super::sort::sort(src, dim, descending, values, indices);
        }
        via_cpu(self, "sort", &[src], &[values, indices], |i, o| {
            cpu::sort::sort(i[0], dim, descending, o[0], o[1])
        })
    }
}
