//! The backend contract as a trait: what a backend implements to run stride's ops.
//!
//! A backend implements [`Backend`] once; the dispatch functions in `backend.rs`,
//! `backend/index.rs` and `backend/sort.rs` check the operands, run the debug tools' hook
//! (`debug::primitive`, the one interception point) and call the backend of the output's
//! device through [`backend_for`], the one place that maps a [`Device`] to its backend.
//!
//! The *required* methods are the core every backend must run natively: copies, fills,
//! elementwise maps, random fills, matrix products, reductions, gathers and scatters, sorting.
//! The rare primitives have default bodies, so a new backend starts working with the core
//! alone and the compiler lists what it lacks:
//! - composed from required methods on the device (`topk` = a sort and a copy of the first
//!   `k` of each row), or
//! - a *CPU round trip* ([`via_cpu`]): the operands' storages are copied to the host,
//!   the CPU backend runs the primitive, the outputs' storages are copied back. Each round
//!   trip is a host wait, announced to the debug tools (`debug::forbid_sync` refuses it,
//!   `debug::profile` counts it), so a slow fallback is never silent.
//!
//! Semantics of every primitive are documented on its dispatch function (e.g.
//! [`crate::backend::scatter`]); the operands arrive checked, broadcast and cast as described
//! in the module docs of [`crate::backend`].

use super::attention::Attention;
use super::cached_attention::CachedAttention;
use super::cross_entropy::CrossEntropyRows;
use super::grouped_matmul::GroupedMatmul;
use super::index::{IndexDim, ScatterOp};
use super::norm::Norm;
use super::optim::{composed_adam, composed_adam_device_step, AdamStep, AdamViews};
use super::pointwise::Pointwise;
use super::sort::SortedRows;
use super::{ArgReduceOp, BinaryOp, CumulativeOp, RandomDist, ReduceOp, TernaryOp, UnaryOp, View};
use crate::storage::CpuBuffer;
use crate::{debug, DType, Device, Layout, Result, Scalar, Storage};

/// A backend: storage on its devices and the primitives over [`View`]s of it. Every operand
/// of one call lives on one device of this backend (the dispatcher checked it).
pub(crate) trait Backend: Sync {
    // -----------------------------------------------------------------------------------------
    // storage

    /// A storage of `len` elements of `dtype` on `device`; zero-filled when `zero` (a backend
    /// may leave it unwritten otherwise: the caller overwrites every element).
    fn alloc(&self, device: Device, dtype: DType, len: usize, zero: bool) -> Result<Storage>;
    /// Copies `into.len()` bytes of `src`, from its element `start`, to host memory (waits for
    /// the device).
    fn read_bytes(&self, src: &Storage, start: usize, into: &mut [u8]) -> Result<()>;
    /// Writes `from` into `dst` from its element `start`.
    fn write_bytes(&self, from: &[u8], dst: &Storage, start: usize) -> Result<()>;

    // -----------------------------------------------------------------------------------------
    // the required core

    fn copy_cast(&self, src: View, dst: View) -> Result<()>;
    fn fill(&self, dst: View, value: Scalar) -> Result<()>;
    fn unary(&self, op: UnaryOp, src: View, dst: View) -> Result<()>;
    fn binary(&self, op: BinaryOp, a: View, b: View, dst: View) -> Result<()>;
    fn ternary(&self, op: TernaryOp, a: View, b: View, c: View, dst: View) -> Result<()>;
    fn random(&self, dist: RandomDist, seed: u64, offset: u64, dst: View) -> Result<()>;
    fn matmul(&self, a: View, b: View, dst: View) -> Result<()>;
    fn reduce(&self, op: ReduceOp, src: View, dims: &[usize], dst: View) -> Result<()>;
    fn arg_reduce(
        &self,
        op: ArgReduceOp,
        src: View,
        dims: &[usize],
        values: Option<View>,
        indices: View,
    ) -> Result<()>;
    fn gather(&self, src: View, index: View, at: IndexDim, dst: View) -> Result<()>;
    fn scatter(
        &self,
        dst: View,
        index: View,
        at: IndexDim,
        src: View,
        op: ScatterOp,
        include_self: bool,
    ) -> Result<()>;
    fn sort(
        &self,
        src: View,
        dim: usize,
        descending: bool,
        values: View,
        indices: View,
    ) -> Result<()>;

    // -----------------------------------------------------------------------------------------
    // rare primitives: default bodies

    /// The `k` first of each row in sort order: a full sort into scratch, then a copy.
    fn topk(
        &self,
        src: View,
        dim: usize,
        k: usize,
        largest: bool,
        values: View,
        indices: View,
    ) -> Result<()> {
        let device = src.storage.device();
        let shape = src.layout.shape();
        let n: usize = shape.iter().product();
        let full = Layout::contiguous(shape);
        let v = self.alloc(device, src.dtype, n, false)?;
        let ix = self.alloc(device, DType::I64, n, false)?;
        let (vv, iv) = (
            View {
                storage: &v,
                layout: &full,
                dtype: src.dtype,
            },
            View {
                storage: &ix,
                layout: &full,
                dtype: DType::I64,
            },
        );
        self.sort(src, dim, largest, vv, iv)?;
        // the first k along `dim` of the sorted rows
        let head = if shape.is_empty() {
            full.clone()
        } else {
            let mut s = shape.to_vec();
            s[dim] = k;
            Layout::new(s, full.strides().to_vec(), 0)
        };
        self.copy_cast(
            View {
                layout: &head,
                ..vv
            },
            values,
        )?;
        self.copy_cast(
            View {
                layout: &head,
                ..iv
            },
            indices,
        )
    }
    fn flip(&self, src: View, dims: &[usize], dst: View) -> Result<()> {
        via_cpu(self, "flip", &[src], &[dst], |i, o| {
            crate::cpu::flip::flip(i[0], dims, o[0])
        })
    }
    fn cumulative(&self, op: CumulativeOp, src: View, dim: usize, dst: View) -> Result<()> {
        via_cpu(self, op.name(), &[src], &[dst], |i, o| {
            crate::cpu::cumulative::cumulative(op, i[0], dim, o[0])
        })
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
        via_cpu(self, "kthvalue", &[src], &[values, indices], |i, o| {
            crate::cpu::sort::kth(i[0], dim, k, nan_propagates, o[0], o[1])
        })
    }
    fn count_nonzero(&self, src: View) -> Result<usize> {
        via_cpu_value(self, "count_nonzero", &[src], |i| {
            crate::cpu::index::count_nonzero(i[0])
        })
    }
    fn nonzero(&self, src: View, dst: View) -> Result<()> {
        via_cpu(self, "nonzero", &[src], &[dst], |i, o| {
            crate::cpu::index::nonzero(i[0], o[0])
        })
    }
    fn masked_select(&self, src: View, mask: View, dst: View) -> Result<()> {
        via_cpu(self, "masked_select", &[src, mask], &[dst], |i, o| {
            crate::cpu::index::masked_select(i[0], i[1], o[0])
        })
    }
    fn masked_scatter(&self, dst: View, mask: View, src: View) -> Result<()> {
        via_cpu(self, "masked_scatter", &[mask, src], &[dst], |i, o| {
            crate::cpu::index::masked_scatter(o[0], i[0], i[1])
        })
    }
    fn extrema(&self, src: View) -> Result<Option<(Scalar, Scalar)>> {
        via_cpu_value(self, "extrema", &[src], |i| {
            crate::cpu::index::extrema(i[0])
        })
    }
    fn count_unique_consecutive(&self, sorted: View) -> Result<usize> {
        via_cpu_value(self, "unique_count", &[sorted], |i| {
            crate::cpu::sort::count_unique_consecutive(i[0])
        })
    }
    fn unique_consecutive(
        &self,
        sorted: View,
        values: View,
        group: View,
        counts: View,
    ) -> Result<()> {
        via_cpu(
            self,
            "unique",
            &[sorted],
            &[values, group, counts],
            |i, o| crate::cpu::sort::unique_consecutive(i[0], o[0], o[1], o[2]),
        )
    }
    fn searchsorted(
        &self,
        seq: View,
        rows: SortedRows,
        values: View,
        right: bool,
        out: View,
    ) -> Result<()> {
        via_cpu(self, "searchsorted", &[seq, values], &[out], |i, o| {
            crate::cpu::sort::searchsorted(i[0], rows, i[1], right, o[0])
        })
    }
    fn bincount(&self, input: View, weights: Option<View>, out: View) -> Result<()> {
        let inputs: Vec<View> = [input].into_iter().chain(weights).collect();
        via_cpu(self, "bincount", &inputs, &[out], |i, o| {
            crate::cpu::sort::bincount(i[0], i.get(1).copied(), o[0])
        })
    }
    fn histc(&self, input: View, lo: f64, hi: f64, out: View) -> Result<()> {
        via_cpu(self, "histc", &[input], &[out], |i, o| {
            crate::cpu::sort::histc(i[0], lo, hi, o[0])
        })
    }

    /// Row normalisation, forward (see [`super::norm`]): a CPU round trip unless the backend
    /// has a kernel.
    fn norm(&self, n: Norm, inputs: &[View], outputs: &[View]) -> Result<()> {
        via_cpu(self, super::norm::name(n.kind), inputs, outputs, |i, o| {
            crate::cpu::norm::norm(n, i, o)
        })
    }

    /// Cross-entropy over rows, forward (see [`super::cross_entropy`]): a CPU round trip
    /// unless the backend has a kernel.
    fn cross_entropy(&self, h: CrossEntropyRows, inputs: &[View], outputs: &[View]) -> Result<()> {
        via_cpu(self, "cross_entropy", inputs, outputs, |i, o| {
            crate::cpu::cross_entropy::cross_entropy(h, i, o)
        })
    }

    /// Cross-entropy over rows, backward (see [`super::cross_entropy`]).
    fn cross_entropy_backward(
        &self,
        h: CrossEntropyRows,
        inputs: &[View],
        outputs: &[View],
    ) -> Result<()> {
        via_cpu(self, "cross_entropy_backward", inputs, outputs, |i, o| {
            crate::cpu::cross_entropy::cross_entropy_backward(h, i, o)
        })
    }

    /// Row normalisation, backward (see [`super::norm`]).
    fn norm_backward(&self, n: Norm, inputs: &[View], outputs: &[View]) -> Result<()> {
        via_cpu(self, "norm_backward", inputs, outputs, |i, o| {
            crate::cpu::norm::norm_backward(n, i, o)
        })
    }

    /// A fused pointwise op (see [`super::pointwise`]): a CPU round trip unless the backend
    /// has a kernel.
    fn pointwise(&self, p: Pointwise, inputs: &[View], outputs: &[View]) -> Result<()> {
        via_cpu(self, p.name(), inputs, outputs, |i, o| {
            crate::cpu::pointwise::pointwise(p, i, o)
        })
    }

    /// Fused attention, forward (see [`super::attention`]): a CPU round trip unless the
    /// backend has a kernel.
    fn attention(&self, a: Attention, inputs: &[View], outputs: &[View]) -> Result<()> {
        via_cpu(self, "attention", inputs, outputs, |i, o| {
            crate::cpu::attention::attention(a, i, o)
        })
    }

    /// Attention of new tokens over a key/value cache, writing the cache (see
    /// [`super::cached_attention`]): a CPU round trip unless the backend has a kernel.
    fn cached_attention(
        &self,
        a: CachedAttention,
        inputs: &[View],
        outputs: &[View],
    ) -> Result<()> {
        via_cpu(self, "attention_with_kv_cache", inputs, outputs, |i, o| {
            crate::cpu::cached_attention::cached_attention(a, i, o)
        })
    }

    /// Fused attention, backward (see [`super::attention`]).
    fn attention_backward(&self, a: Attention, inputs: &[View], outputs: &[View]) -> Result<()> {
        via_cpu(self, "attention_backward", inputs, outputs, |i, o| {
            crate::cpu::attention::attention_backward(a, i, o)
        })
    }

    /// A grouped matrix product (see [`super::grouped_matmul`]): a CPU round trip unless the
    /// backend has a kernel.
    fn grouped_matmul(
        &self,
        g: GroupedMatmul,
        a: View,
        b: View,
        offs: View,
        dst: View,
    ) -> Result<()> {
        via_cpu(self, g.name(), &[a, b, offs], &[dst], |i, o| {
            crate::cpu::grouped_matmul::grouped_matmul(g, i[0], i[1], i[2], o[0])
        })
    }

    // -----------------------------------------------------------------------------------------
    // fused updates: default bodies composed from the core (the reference of a fused kernel)

    /// One Adam step of one parameter (see [`super::optim::adam`]); composed from elementwise
    /// primitives unless the backend has a fused kernel.
    fn adam(
        &self,
        h: &AdamStep,
        param: View,
        grad: View,
        exp_avg: View,
        exp_avg_sq: View,
        max_exp_avg_sq: Option<View>,
    ) -> Result<()> {
        composed_adam(self, h, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq)
    }

    /// One Adam step of many parameters (see [`super::optim::adam_multi`]): each through
    /// [`Backend::adam`] unless the backend steps several in one launch.
    fn adam_multi(&self, h: &AdamStep, items: &[AdamViews]) -> Result<()> {
        for it in items {
            if let Some(d) = &it.device_step {
                composed_adam_device_step(self, h, it, d)?;
                continue;
            }
            self.adam(
                h,
                it.param,
                it.grad,
                it.exp_avg,
                it.exp_avg_sq,
                it.max_exp_avg_sq,
            )?;
        }
        Ok(())
    }
}

/// Runs `cpu` (a CPU kernel) on host copies of the operands' storages, then writes the
/// outputs' storages back: the default body of a primitive a backend does not run natively.
/// A host wait, announced to the debug tools under the primitive's name.
pub(crate) fn via_cpu<B: Backend + ?Sized>(
    backend: &B,
    op: &'static str,
    inputs: &[View],
    outputs: &[View],
    cpu: impl FnOnce(&[View], &[View]) -> Result<()>,
) -> Result<()> {
    let _sync = debug::host_sync(outputs[0].storage.device(), op)?;
    let host = HostCopies::of(backend, inputs.iter().chain(outputs))?;
    cpu(&host.views(inputs), &host.views(outputs))?;
    host.write_back(backend, outputs)
}

/// [`via_cpu`] for a primitive that returns a value and writes nothing.
pub(crate) fn via_cpu_value<B: Backend + ?Sized, R>(
    backend: &B,
    op: &'static str,
    inputs: &[View],
    cpu: impl FnOnce(&[View]) -> Result<R>,
) -> Result<R> {
    let _sync = debug::host_sync(inputs[0].storage.device(), op)?;
    let host = HostCopies::of(backend, inputs.iter())?;
    cpu(&host.views(inputs))
}

/// Host copies of the distinct storages of some views (a storage two views share is copied
/// once, so an output that aliases an input stays aliased on the host).
struct HostCopies {
    /// (the device storage, its host copy)
    pairs: Vec<(Storage, Storage)>,
}

impl HostCopies {
    fn of<'a, B: Backend + ?Sized>(
        backend: &B,
        views: impl Iterator<Item = &'a View<'a>>,
    ) -> Result<HostCopies> {
        let mut pairs: Vec<(Storage, Storage)> = vec![];
        for v in views {
            if !pairs.iter().any(|(d, _)| d.same(v.storage)) {
                let (dtype, len) = (v.storage.dtype(), v.storage.len());
                let mut buf = CpuBuffer::try_zeros(dtype, len, "copy to the CPU", &[len])?;
                backend.read_bytes(v.storage, 0, buf.bytes_mut())?;
                pairs.push((v.storage.clone(), Storage::from_cpu(buf)));
            }
        }
        Ok(HostCopies { pairs })
    }
    fn host_of(&self, s: &Storage) -> &Storage {
        &self
            .pairs
            .iter()
            .find(|(d, _)| d.same(s))
            .expect("copied")
            .1
    }
    fn views<'a>(&'a self, views: &[View<'a>]) -> Vec<View<'a>> {
        views
            .iter()
            .map(|v| View {
                storage: self.host_of(v.storage),
                ..*v
            })
            .collect()
    }
    fn write_back<B: Backend + ?Sized>(&self, backend: &B, outputs: &[View]) -> Result<()> {
        let mut done: Vec<&Storage> = vec![];
        for v in outputs {
            if done.iter().any(|s| s.same(v.storage)) {
                continue;
            }
            let host = self.host_of(v.storage);
            let guard = host.read();
            let crate::storage::StorageData::Cpu(buf) = &*guard else {
                unreachable!("host copies live on the CPU")
            };
            backend.write_bytes(buf.bytes(), v.storage, 0)?;
            done.push(v.storage);
        }
        Ok(())
    }
}

/// The backend of `device`: the one place a device is mapped to the code that runs it.
pub(crate) fn backend_for(device: Device) -> &'static dyn Backend {
    match device {
        Device::Cpu => &crate::cpu::primitives::Cpu,
        Device::Cuda(_) => &crate::cuda::primitives::Cuda,
        Device::Wgpu(_) => &crate::webgpu::primitives::Wgpu,
    }
}

/// Implements primitives of [`Backend`] by calling, for each listed method, a kernel function
/// with the method's own arguments: `forward_to_kernels! { unary => super::elementwise::unary; }`.
/// The signatures live here once, so a backend's implementation is a list of its kernels.
macro_rules! forward_to_kernels {
    ($($m:ident => $f:path;)*) => { $(forward_to_kernels!(@ $m $f);)* };
    (@ copy_cast $f:path) => {
        fn copy_cast(&self, src: $crate::backend::View<'_>, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(src, dst)
        }
    };
    (@ fill $f:path) => {
        fn fill(&self, dst: $crate::backend::View<'_>, value: $crate::Scalar) -> $crate::Result<()> {
            $f(dst, value)
        }
    };
    (@ unary $f:path) => {
        fn unary(&self, op: $crate::backend::UnaryOp, src: $crate::backend::View<'_>, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(op, src, dst)
        }
    };
    (@ binary $f:path) => {
        fn binary(&self, op: $crate::backend::BinaryOp, a: $crate::backend::View<'_>, b: $crate::backend::View<'_>, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(op, a, b, dst)
        }
    };
    (@ ternary $f:path) => {
        fn ternary(&self, op: $crate::backend::TernaryOp, a: $crate::backend::View<'_>, b: $crate::backend::View<'_>, c: $crate::backend::View<'_>, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(op, a, b, c, dst)
        }
    };
    (@ random $f:path) => {
        fn random(&self, dist: $crate::backend::RandomDist, seed: u64, offset: u64, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(dist, seed, offset, dst)
        }
    };
    (@ matmul $f:path) => {
        fn matmul(&self, a: $crate::backend::View<'_>, b: $crate::backend::View<'_>, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(a, b, dst)
        }
    };
    (@ reduce $f:path) => {
        fn reduce(&self, op: $crate::backend::ReduceOp, src: $crate::backend::View<'_>, dims: &[usize], dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(op, src, dims, dst)
        }
    };
    (@ arg_reduce $f:path) => {
        fn arg_reduce(&self, op: $crate::backend::ArgReduceOp, src: $crate::backend::View<'_>, dims: &[usize], values: Option<$crate::backend::View<'_>>, indices: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(op, src, dims, values, indices)
        }
    };
    (@ gather $f:path) => {
        fn gather(&self, src: $crate::backend::View<'_>, index: $crate::backend::View<'_>, at: $crate::backend::index::IndexDim, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(src, index, at, dst)
        }
    };
    (@ scatter $f:path) => {
        fn scatter(&self, dst: $crate::backend::View<'_>, index: $crate::backend::View<'_>, at: $crate::backend::index::IndexDim, src: $crate::backend::View<'_>, op: $crate::backend::index::ScatterOp, include_self: bool) -> $crate::Result<()> {
            $f(dst, index, at, src, op, include_self)
        }
    };
    (@ sort $f:path) => {
        fn sort(&self, src: $crate::backend::View<'_>, dim: usize, descending: bool, values: $crate::backend::View<'_>, indices: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(src, dim, descending, values, indices)
        }
    };
    (@ topk $f:path) => {
        fn topk(&self, src: $crate::backend::View<'_>, dim: usize, k: usize, largest: bool, values: $crate::backend::View<'_>, indices: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(src, dim, k, largest, values, indices)
        }
    };
    (@ flip $f:path) => {
        fn flip(&self, src: $crate::backend::View<'_>, dims: &[usize], dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(src, dims, dst)
        }
    };
    (@ cumulative $f:path) => {
        fn cumulative(&self, op: $crate::backend::CumulativeOp, src: $crate::backend::View<'_>, dim: usize, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(op, src, dim, dst)
        }
    };
    (@ kth $f:path) => {
        fn kth(&self, src: $crate::backend::View<'_>, dim: usize, k: usize, nan_propagates: bool, values: $crate::backend::View<'_>, indices: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(src, dim, k, nan_propagates, values, indices)
        }
    };
    (@ count_nonzero $f:path) => {
        fn count_nonzero(&self, src: $crate::backend::View<'_>) -> $crate::Result<usize> {
            $f(src)
        }
    };
    (@ nonzero $f:path) => {
        fn nonzero(&self, src: $crate::backend::View<'_>, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(src, dst)
        }
    };
    (@ adam $f:path) => {
        fn adam(&self, h: &$crate::backend::optim::AdamStep, param: $crate::backend::View<'_>, grad: $crate::backend::View<'_>, exp_avg: $crate::backend::View<'_>, exp_avg_sq: $crate::backend::View<'_>, max_exp_avg_sq: Option<$crate::backend::View<'_>>) -> $crate::Result<()> {
            $f(h, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq)
        }
    };
    (@ masked_select $f:path) => {
        fn masked_select(&self, src: $crate::backend::View<'_>, mask: $crate::backend::View<'_>, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(src, mask, dst)
        }
    };
    (@ masked_scatter $f:path) => {
        fn masked_scatter(&self, dst: $crate::backend::View<'_>, mask: $crate::backend::View<'_>, src: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(dst, mask, src)
        }
    };
    (@ extrema $f:path) => {
        fn extrema(&self, src: $crate::backend::View<'_>) -> $crate::Result<Option<($crate::Scalar, $crate::Scalar)>> {
            $f(src)
        }
    };
    (@ count_unique_consecutive $f:path) => {
        fn count_unique_consecutive(&self, sorted: $crate::backend::View<'_>) -> $crate::Result<usize> {
            $f(sorted)
        }
    };
    (@ unique_consecutive $f:path) => {
        fn unique_consecutive(&self, sorted: $crate::backend::View<'_>, values: $crate::backend::View<'_>, group: $crate::backend::View<'_>, counts: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(sorted, values, group, counts)
        }
    };
    (@ searchsorted $f:path) => {
        fn searchsorted(&self, seq: $crate::backend::View<'_>, rows: $crate::backend::sort::SortedRows, values: $crate::backend::View<'_>, right: bool, out: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(seq, rows, values, right, out)
        }
    };
    (@ bincount $f:path) => {
        fn bincount(&self, input: $crate::backend::View<'_>, weights: Option<$crate::backend::View<'_>>, out: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(input, weights, out)
        }
    };
    (@ norm $f:path) => {
        fn norm(&self, n: $crate::backend::norm::Norm, inputs: &[$crate::backend::View<'_>], outputs: &[$crate::backend::View<'_>]) -> $crate::Result<()> {
            $f(n, inputs, outputs)
        }
    };
    (@ norm_backward $f:path) => {
        fn norm_backward(&self, n: $crate::backend::norm::Norm, inputs: &[$crate::backend::View<'_>], outputs: &[$crate::backend::View<'_>]) -> $crate::Result<()> {
            $f(n, inputs, outputs)
        }
    };
    (@ adam_multi $f:path) => {
        fn adam_multi(&self, h: &$crate::backend::optim::AdamStep, items: &[$crate::backend::optim::AdamViews<'_>]) -> $crate::Result<()> {
            $f(h, items)
        }
    };
    (@ pointwise $f:path) => {
        fn pointwise(&self, p: $crate::backend::pointwise::Pointwise, inputs: &[$crate::backend::View<'_>], outputs: &[$crate::backend::View<'_>]) -> $crate::Result<()> {
            $f(p, inputs, outputs)
        }
    };
    (@ attention $f:path) => {
        fn attention(&self, a: $crate::backend::attention::Attention, inputs: &[$crate::backend::View<'_>], outputs: &[$crate::backend::View<'_>]) -> $crate::Result<()> {
            $f(a, inputs, outputs)
        }
    };
    (@ grouped_matmul $f:path) => {
        fn grouped_matmul(&self, g: $crate::backend::grouped_matmul::GroupedMatmul, a: $crate::backend::View<'_>, b: $crate::backend::View<'_>, offs: $crate::backend::View<'_>, dst: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(g, a, b, offs, dst)
        }
    };
    (@ cached_attention $f:path) => {
        fn cached_attention(&self, a: $crate::backend::cached_attention::CachedAttention, inputs: &[$crate::backend::View<'_>], outputs: &[$crate::backend::View<'_>]) -> $crate::Result<()> {
            $f(a, inputs, outputs)
        }
    };
    (@ attention_backward $f:path) => {
        fn attention_backward(&self, a: $crate::backend::attention::Attention, inputs: &[$crate::backend::View<'_>], outputs: &[$crate::backend::View<'_>]) -> $crate::Result<()> {
            $f(a, inputs, outputs)
        }
    };
    (@ cross_entropy $f:path) => {
        fn cross_entropy(&self, h: $crate::backend::cross_entropy::CrossEntropyRows, inputs: &[$crate::backend::View<'_>], outputs: &[$crate::backend::View<'_>]) -> $crate::Result<()> {
            $f(h, inputs, outputs)
        }
    };
    (@ cross_entropy_backward $f:path) => {
        fn cross_entropy_backward(&self, h: $crate::backend::cross_entropy::CrossEntropyRows, inputs: &[$crate::backend::View<'_>], outputs: &[$crate::backend::View<'_>]) -> $crate::Result<()> {
            $f(h, inputs, outputs)
        }
    };
    (@ histc $f:path) => {
        fn histc(&self, input: $crate::backend::View<'_>, lo: f64, hi: f64, out: $crate::backend::View<'_>) -> $crate::Result<()> {
            $f(input, lo, hi, out)
        }
    };
}
pub(crate) use forward_to_kernels;

/// A third backend that implements only the required methods (forwarding to the CPU): it
/// compiles, and every default body gives exactly the CPU's native result.
#[cfg(test)]
mod skeleton {
    use super::*;
    use crate::cpu::primitives::Cpu;
    use crate::Tensor;

    struct Skeleton;

    impl Backend for Skeleton {
        fn alloc(&self, device: Device, dtype: DType, len: usize, zero: bool) -> Result<Storage> {
            Cpu.alloc(device, dtype, len, zero)
        }
        fn read_bytes(&self, src: &Storage, start: usize, into: &mut [u8]) -> Result<()> {
            Cpu.read_bytes(src, start, into)
        }
        fn write_bytes(&self, from: &[u8], dst: &Storage, start: usize) -> Result<()> {
            Cpu.write_bytes(from, dst, start)
        }
        forward_to_kernels! {
            copy_cast => crate::cpu::copy::copy_cast;
            fill => crate::cpu::copy::fill;
            unary => crate::cpu::elementwise::unary;
            binary => crate::cpu::elementwise::binary;
            ternary => crate::cpu::elementwise::ternary;
            random => crate::cpu::random::random;
            matmul => crate::cpu::matmul::matmul;
            reduce => crate::cpu::reduce::reduce;
            arg_reduce => crate::cpu::reduce::arg_reduce;
            gather => crate::cpu::index::gather;
            scatter => crate::cpu::index::scatter;
            sort => crate::cpu::sort::sort;
        }
    }

    /// Rows with ties, NaN, ±0 and ±∞, seen transposed (a non-contiguous source).
    fn awkward() -> Tensor {
        let v: Vec<f32> = vec![
            3.0,
            f32::NAN,
            1.0,
            1.0,
            -0.0,
            0.0,
            f32::INFINITY,
            2.0,
            f32::NEG_INFINITY,
            1.0,
            5.0,
            5.0,
            f32::NAN,
            -2.0,
            7.0,
            0.5,
            0.5,
            3.0,
            1.0,
            -1.0,
            4.0,
            4.0,
            4.0,
            9.0,
        ];
        Tensor::from_vec(v, [6, 4])
            .unwrap()
            .transpose(0, 1)
            .unwrap()
    }

    /// Runs `f` with both backends into fresh outputs and compares the outputs bit for bit.
    fn same(outs: &[(&[usize], DType)], f: impl Fn(&dyn Backend, &[View]) -> Result<()>) {
        let run = |b: &dyn Backend| -> Vec<Vec<u8>> {
            let ts: Vec<Tensor> = outs
                .iter()
                .map(|(s, d)| Tensor::alloc_contiguous(s, *d, &Device::Cpu).unwrap())
                .collect();
            let views: Vec<View> = ts.iter().map(|t| t.view_ref()).collect();
            f(b, &views).unwrap();
            ts.iter()
                .map(|t| match &*t.storage().read() {
                    crate::storage::StorageData::Cpu(b) => b.bytes().to_vec(),
                    _ => unreachable!(),
                })
                .collect()
        };
        assert_eq!(run(&Skeleton), run(&Cpu));
    }

    #[test]
    fn composed_topk_matches_the_native_one() {
        let x = awkward(); // [4, 6]
        for (dim, k, largest) in [(1, 3, true), (1, 6, false), (0, 2, true), (0, 1, false)] {
            let mut s = x.shape().to_vec();
            s[dim] = k;
            same(&[(&s, DType::F32), (&s, DType::I64)], |b, o| {
                b.topk(x.view_ref(), dim, k, largest, o[0], o[1])
            });
        }
    }

    #[test]
    fn round_trips_match_the_native_primitives() {
        let x = awkward();
        let n = x.numel();
        same(&[(&[4, 6], DType::F32)], |b, o| {
            b.flip(x.view_ref(), &[0, 1], o[0])
        });
        same(&[(&[4, 6], DType::F32)], |b, o| {
            b.cumulative(CumulativeOp::Sum, x.view_ref(), 1, o[0])
        });
        same(&[(&[4, 1], DType::F32), (&[4, 1], DType::I64)], |b, o| {
            b.kth(x.view_ref(), 1, 2, true, o[0], o[1])
        });
        same(&[(&[5], DType::F32)], |b, o| {
            b.histc(x.view_ref(), -2.0, 8.0, o[0])
        });
        let ints = Tensor::from_vec(vec![3i64, 0, 3, 1, 4, 3], [6]).unwrap();
        let w = Tensor::from_vec(vec![0.5f64, 1.0, 2.0, 4.0, 8.0, 16.0], [6]).unwrap();
        same(&[(&[5], DType::F64)], |b, o| {
            b.bincount(ints.view_ref(), Some(w.view_ref()), o[0])
        });
        let sorted = Tensor::from_vec(vec![0i64, 0, 1, 3, 3, 3], [6]).unwrap();
        same(
            &[(&[3], DType::I64), (&[6], DType::I64), (&[3], DType::I64)],
            |b, o| b.unique_consecutive(sorted.view_ref(), o[0], o[1], o[2]),
        );
        for b in [&Skeleton as &dyn Backend, &Cpu] {
            assert_eq!(b.count_nonzero(x.view_ref()).unwrap(), n - 2); // -0.0 and 0.0
            assert_eq!(b.count_unique_consecutive(sorted.view_ref()).unwrap(), 3);
            let (lo, hi) = b.extrema(ints.view_ref()).unwrap().unwrap();
            assert_eq!((lo, hi), (Scalar::Int(0), Scalar::Int(4)));
        }
    }

    #[test]
    fn a_round_trip_keeps_what_it_does_not_write() {
        // masked_scatter writes the masked positions only; the others come back unchanged
        let run = |b: &dyn Backend| {
            let dst = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4]).unwrap();
            let mask = Tensor::from_vec(vec![true, false, true, false], [4]).unwrap();
            let src = Tensor::from_vec(vec![10.0f32, 20.0], [2]).unwrap();
            b.masked_scatter(dst.view_ref(), mask.view_ref(), src.view_ref())
                .unwrap();
            dst.to_vec::<f32>().unwrap()
        };
        assert_eq!(run(&Skeleton), vec![10.0, 2.0, 20.0, 4.0]);
        assert_eq!(run(&Skeleton), run(&Cpu));
    }
}
