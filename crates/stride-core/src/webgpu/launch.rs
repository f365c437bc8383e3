//! Operands → bindings, and one compute pass per op.
//!
//! Every storage an op touches is bound once, whatever number of operands view it (an
//! in-place op's output and input share a binding), read-only unless the op writes it. A
//! storage written in elements narrower than a word (bool, u8, i8, f16, bf16) is bound as
//! atomic words: neighbouring elements of one word may belong to different invocations, and
//! each writes its bytes with `atomicAnd`/`atomicOr`, so no write is lost.
//!
//! The geometry and the op's scalars travel in one read-only `array<u32>` after the buffers
//! (`geo`): the element count, the merged rank and shape, then each operand's offset and
//! strides ([`crate::backend::common::plan::Plan`], the geometry every backend walks).

use super::buffer::WgpuBuffer;
use super::device::Gpu;
use crate::backend::View;
use crate::storage::StorageData;
use crate::{Error, Result};
use std::sync::Arc;

/// Invocations per workgroup of the elementwise shaders.
pub(crate) const WORKGROUP: u32 = 256;

/// How one distinct storage is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Binding {
    pub(crate) written: bool,
    /// Written in sub-word elements: `array<atomic<u32>>`.
    pub(crate) atomic: bool,
}

/// The bindings of an op's operands: `slot[k]` is operand `k`'s binding.
pub(crate) struct Bindings<'a> {
    pub(crate) views: Vec<View<'a>>,
    pub(crate) slot: Vec<usize>,
    pub(crate) kinds: Vec<Binding>,
}

/// Binds `views`, of which the first `outputs` are written.
pub(crate) fn bindings<'a>(views: &[View<'a>], outputs: usize) -> Bindings<'a> {
    let mut firsts: Vec<View<'a>> = vec![];
    let mut kinds: Vec<Binding> = vec![];
    let mut slot = vec![];
    for (k, v) in views.iter().enumerate() {
        let written = k < outputs;
        let atomic = written && v.dtype.size_in_bytes() < 4;
        let s = match firsts.iter().position(|f| f.storage.same(v.storage)) {
            Some(s) => s,
            None => {
                firsts.push(*v);
                kinds.push(Binding::default_read());
                firsts.len() - 1
            }
        };
        kinds[s].written |= written;
        kinds[s].atomic |= atomic;
        slot.push(s);
    }
    Bindings {
        views: firsts,
        slot,
        kinds,
    }
}

impl Binding {
    fn default_read() -> Binding {
        Binding {
            written: false,
            atomic: false,
        }
    }
}

/// The WGSL declarations of the bindings and of `geo` after them.
pub(crate) fn declare(kinds: &[Binding]) -> String {
    let mut s = String::new();
    for (i, k) in kinds.iter().enumerate() {
        let (access, ty) = match (k.written, k.atomic) {
            (true, true) => ("read_write", "array<atomic<u32>>"),
            (true, false) => ("read_write", "array<u32>"),
            _ => ("read", "array<u32>"),
        };
        s += &format!("@group(0) @binding({i}) var<storage, {access}> b{i}: {ty};\n");
    }
    s += &format!(
        "@group(0) @binding({}) var<storage, read> geo: array<u32>;\n",
        kinds.len()
    );
    s
}

/// The device of the operands (all on one wgpu device: the dispatcher checked).
pub(crate) fn gpu_of(op: &'static str, v: &View) -> Result<Arc<Gpu>> {
    match &*v.storage.read() {
        StorageData::Wgpu(b) => Ok(b.gpu.clone()),
        _ => Err(Error::invalid(
            op,
            "internal error: a non-wgpu storage reached the wgpu backend (please report)",
        )),
    }
}

/// Runs `source` (a module with entry point `main`) over the bindings with `geo`,
/// dispatching `workgroups` workgroups (x, y, z).
pub(crate) fn launch(
    gpu: &Gpu,
    op: &'static str,
    source: String,
    b: &Bindings,
    geo: &[u32],
    workgroups: (u32, u32, u32),
) -> Result<()> {
    launch_with(gpu, op, source, b, geo, &[], workgroups)
}

/// A buffer of the backend's own (a check's verdict, the device's error record) bound after
/// `geo`, as `array<u32>` (read-only unless `written`); see [`declare_extra`].
pub(crate) struct Extra<'a> {
    pub(crate) buffer: &'a wgpu::Buffer,
    pub(crate) written: bool,
}

/// The WGSL declaration of extra buffer `j` (after `kinds.len()` bindings and `geo`) as
/// `name`, of type `ty` (`array<u32>` or `array<atomic<u32>>`).
pub(crate) fn declare_extra(
    kinds: &[Binding],
    j: usize,
    name: &str,
    written: bool,
    ty: &str,
) -> String {
    let access = if written { "read_write" } else { "read" };
    format!(
        "@group(0) @binding({}) var<storage, {access}> {name}: {ty};\n",
        kinds.len() + 1 + j
    )
}

/// [`launch`] with `extras` bound after `geo`.
pub(crate) fn launch_with(
    gpu: &Gpu,
    op: &'static str,
    source: String,
    b: &Bindings,
    geo: &[u32],
    extras: &[Extra],
    workgroups: (u32, u32, u32),
) -> Result<()> {
    if workgroups.0 == 0 || workgroups.1 == 0 || workgroups.2 == 0 {
        return Ok(());
    }
    let mut written: Vec<bool> = b.kinds.iter().map(|k| k.written).collect();
    written.push(false);
    written.extend(extras.iter().map(|e| e.written));
    let pipeline = gpu.pipeline(op, source, &written)?;
    let guards: Vec<_> = b.views.iter().map(|v| v.storage.read()).collect();
    let mut buffers: Vec<&WgpuBuffer> = vec![];
    for g in &guards {
        match &**g {
            StorageData::Wgpu(w) => buffers.push(w),
            _ => return Err(Error::invalid(op, "a non-wgpu storage (please report)")),
        }
    }
    for w in &buffers {
        if w.class > gpu.limits.max_storage_buffer_binding_size {
            return Err(Error::invalid(
                op,
                format!(
                    "a storage of {} bytes is larger than {} ({}) can bind in a shader ({} \
                     bytes); split the tensor, or run this op on the CPU",
                    w.class,
                    gpu.device(),
                    gpu.name,
                    gpu.limits.max_storage_buffer_binding_size
                ),
            ));
        }
    }
    let geo_words: Vec<u32> = if geo.is_empty() {
        vec![0]
    } else {
        geo.to_vec()
    };
    let bytes: Vec<u8> = geo_words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let geo_buf = wgpu::util::DeviceExt::create_buffer_init(
        &gpu.device,
        &wgpu::util::BufferInitDescriptor {
            label: Some("geo"),
            contents: &bytes,
            usage: wgpu::BufferUsages::STORAGE,
        },
    );
    let mut entries: Vec<wgpu::BindGroupEntry> = buffers
        .iter()
        .enumerate()
        .map(|(i, w)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: w.raw().as_entire_binding(),
        })
        .collect();
    entries.push(wgpu::BindGroupEntry {
        binding: buffers.len() as u32,
        resource: geo_buf.as_entire_binding(),
    });
    for (j, e) in extras.iter().enumerate() {
        entries.push(wgpu::BindGroupEntry {
            binding: (buffers.len() + 1 + j) as u32,
            resource: e.buffer.as_entire_binding(),
        });
    }
    let group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(op),
        layout: &pipeline.layout,
        entries: &entries,
    });
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(op),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipeline.pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(workgroups.0, workgroups.1, workgroups.2);
    }
    gpu.queue.submit([enc.finish()]);
    gpu.launches
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    gpu.take_error(op)
}

/// Workgroups for `n` invocations of a grid-stride loop (at most 65,535: every adapter's
/// limit per dimension).
pub(crate) fn groups_for(n: usize) -> (u32, u32, u32) {
    let g = n.div_ceil(WORKGROUP as usize).min(65_535) as u32;
    (g, 1, 1)
}

/// Refuses element counts the shaders' 32-bit indices cannot walk.
pub(crate) fn check_count(op: &'static str, n: usize) -> Result<u32> {
    if n >= 1 << 31 {
        return Err(Error::invalid(
            op,
            format!(
                "{n} elements: the wgpu backend indexes with 32-bit integers (at most 2^31 - 1 \
                 elements an op); split the tensor or run it on the CPU or CUDA"
            ),
        ));
    }
    Ok(n as u32)
}

/// `x` (a size, offset or stride in elements) as a shader word, or an error naming the limit
/// (the shaders index with 32-bit integers). A negative `isize` cast to `usize` fails too.
pub(crate) fn word(op: &'static str, x: usize) -> Result<u32> {
    u32::try_from(x).map_err(|_| {
        Error::invalid(
            op,
            format!(
                "a size, offset or stride of {x} elements is past the wgpu backend's 32-bit indices"
            ),
        )
    })
}

/// The lines of `N` operands of one shape along `dim` (one line per position of the other
/// dims), as scans and sorts walk them.
pub(crate) struct Lines<const N: usize> {
    /// How many lines, and the length of each.
    pub(crate) count: usize,
    pub(crate) len: usize,
    /// Each operand's step along `dim`, in elements.
    pub(crate) steps: [usize; N],
    /// What `wgsl::line_fn` reads after its rank word's position: the kept dims' merged rank
    /// and shape, then each operand's offset and strides.
    pub(crate) words: Vec<u32>,
}

/// [`Lines`] of `layouts` (the first one's shape) along `dim` (any, for a 0-d shape).
pub(crate) fn lines<const N: usize>(
    op: &'static str,
    layouts: [&crate::Layout; N],
    dim: usize,
) -> Result<Lines<N>> {
    let shape = layouts[0].shape();
    let kept: Vec<usize> = (0..shape.len()).filter(|&d| d != dim).collect();
    let sizes: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let strides: [Vec<usize>; N] =
        std::array::from_fn(|k| kept.iter().map(|&d| layouts[k].strides()[d]).collect());
    let plan = crate::backend::common::plan::Plan::<N>::new(
        &sizes,
        std::array::from_fn(|k| strides[k].as_slice()),
        std::array::from_fn(|k| layouts[k].offset()),
    );
    let (len, steps) = match shape.get(dim) {
        Some(&n) => (n, std::array::from_fn(|k| layouts[k].strides()[dim])),
        None => (1, [0; N]),
    };
    let (pshape, pstrides, poffsets) = plan.parts();
    let mut words = vec![pshape.len() as u32];
    for &s in pshape {
        words.push(word(op, s)?);
    }
    for k in 0..N {
        words.push(word(op, poffsets[k] as usize)?);
        for &s in &pstrides[k] {
            words.push(word(op, s as usize)?);
        }
    }
    Ok(Lines {
        count: plan.numel(),
        len,
        steps,
        words,
    })
}
