//! The adapters this machine has, and one device (queue, allocator, pipeline cache) per
//! adapter ordinal, made on first use.
//!
//! Adapters are listed once per process: real GPUs first (discrete, integrated, virtual),
//! then software ones (Mesa's lavapipe), from Vulkan, Metal and DirectX 12 (`WGPU_BACKEND`,
//! wgpu's own variable, picks others, e.g. `gl`). `STRIDE_WGPU_ADAPTER` keeps the adapters whose
//! "name (backend)" contains it (case-insensitive), so `wgpu:0` can be pinned to one.

use super::alloc::Allocator;
use crate::{Device, Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// One adapter as `stride check --device wgpu` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSummary {
    /// Its ordinal: `Device::Wgpu(ordinal)`.
    pub ordinal: usize,
    /// The adapter's name, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)".
    pub name: String,
    /// Vulkan, Metal, Dx12 or Gl.
    pub backend: String,
    /// DiscreteGpu, IntegratedGpu, VirtualGpu, Cpu or Other.
    pub kind: String,
    /// The driver and its version, as the adapter reports them.
    pub driver: String,
}

impl std::fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "wgpu:{}  {} ({}, {}; {})",
            self.ordinal, self.name, self.backend, self.kind, self.driver
        )
    }
}

struct Adapters {
    list: Vec<wgpu::Adapter>,
}

fn adapters_once() -> &'static Adapters {
    static ADAPTERS: OnceLock<Adapters> = OnceLock::new();
    ADAPTERS.get_or_init(|| {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        // OpenGL only when asked for (WGPU_BACKEND=gl): its compute support is the weakest,
        // and probing it prints EGL warnings on machines without a display
        let backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
        let mut list = pollster::block_on(instance.enumerate_adapters(backends));
        let rank = |a: &wgpu::Adapter| {
            let i = a.get_info();
            let kind = match i.device_type {
                wgpu::DeviceType::DiscreteGpu => 0,
                wgpu::DeviceType::IntegratedGpu => 1,
                wgpu::DeviceType::VirtualGpu => 2,
                wgpu::DeviceType::Other => 3,
                wgpu::DeviceType::Cpu => 4,
            };
            (i.backend == wgpu::Backend::Gl, kind)
        };
        list.sort_by_key(rank);
        if let Ok(want) = std::env::var("STRIDE_WGPU_ADAPTER") {
            let want = want.to_lowercase();
            list.retain(|a| describe(a).to_lowercase().contains(&want));
        }
        Adapters { list }
    })
}

fn describe(a: &wgpu::Adapter) -> String {
    let i = a.get_info();
    format!("{} ({:?})", i.name, i.backend)
}

/// The adapters stride can use, in ordinal order (empty without a GPU driver or a software
/// one such as Mesa's lavapipe).
///
/// ```
/// use stride_core::webgpu;
/// for a in webgpu::adapters() {
///     println!("{a}");
/// }
/// assert_eq!(webgpu::is_available(), !webgpu::adapters().is_empty());
/// ```
pub fn adapters() -> Vec<AdapterSummary> {
    adapters_once()
        .list
        .iter()
        .enumerate()
        .map(|(ordinal, a)| {
            let i = a.get_info();
            AdapterSummary {
                ordinal,
                name: i.name.clone(),
                backend: format!("{:?}", i.backend),
                kind: format!("{:?}", i.device_type),
                driver: format!("{} {}", i.driver, i.driver_info).trim().to_string(),
            }
        })
        .collect()
}

/// Whether any wgpu adapter is present.
pub fn is_available() -> bool {
    !adapters_once().list.is_empty()
}

/// A wgpu device of stride: its queue, allocator, compiled pipelines and counters.
pub(crate) struct Gpu {
    pub(crate) ordinal: usize,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) limits: wgpu::Limits,
    pub(crate) name: String,
    pub(crate) allocator: Mutex<Allocator>,
    pipelines: Mutex<HashMap<String, Arc<Pipeline>>>,
    /// The first error wgpu reported outside an error scope (a shader or a command it
    /// refused); the op that caused it returns it.
    error: Arc<Mutex<Option<String>>>,
    /// Host waits (reads back) so far.
    pub(crate) syncs: AtomicU64,
    /// Compute passes submitted so far.
    pub(crate) launches: AtomicU64,
    /// Verdicts of device-side checks not yet read (see `deferred.rs`).
    pub(crate) deferred: super::deferred::Deferred,
}

/// A compiled compute pipeline and the layout of its bindings.
pub(crate) struct Pipeline {
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
}

impl Gpu {
    pub(crate) fn device(&self) -> Device {
        Device::Wgpu(self.ordinal)
    }
    /// The error wgpu reported since the last call, as stride's error for `op`.
    pub(crate) fn take_error(&self, op: &'static str) -> Result<()> {
        match self.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            None => Ok(()),
            Some(msg) => Err(Error::invalid(
                op,
                format!(
                    "the wgpu device {} ({}) refused the work: {msg} (please report)",
                    self.device(),
                    self.name
                ),
            )),
        }
    }
    /// The pipeline for a WGSL module (without the prelude, which is prepended here: the
    /// cache key stays the op's own few lines, not the 60 KB prelude copied and hashed per
    /// op) and its binding kinds (`true`: written), compiled once per source.
    pub(crate) fn pipeline(
        &self,
        op: &'static str,
        source: String,
        written: &[bool],
    ) -> Result<Arc<Pipeline>> {
        if let Some(p) = self
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&source)
        {
            return Ok(p.clone());
        }
        let entries: Vec<wgpu::BindGroupLayoutEntry> = written
            .iter()
            .enumerate()
            .map(|(i, &w)| wgpu::BindGroupLayoutEntry {
                binding: i as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: !w },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let layout = self
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(op),
                entries: &entries,
            });
        let pl = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(op),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(op),
                source: wgpu::ShaderSource::Wgsl(
                    format!("{}{source}", super::wgsl::PRELUDE).into(),
                ),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(op),
                layout: Some(&pl),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        if let Err(e) = self.take_error(op) {
            if std::env::var_os("STRIDE_WGPU_DUMP").is_some() {
                eprintln!("--- {op} ---\n{source}");
            }
            return Err(e);
        }
        let p = Arc::new(Pipeline { pipeline, layout });
        self.pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(source, p.clone());
        Ok(p)
    }
    /// Waits until the queue has run everything submitted (a counted host wait).
    pub(crate) fn wait(&self, why: &'static str) -> Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        crate::debug::backend_sync(self.device(), why)?;
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::invalid(why, format!("waiting for {}: {e}", self.device())))?;
        Ok(())
    }
}

fn registry() -> &'static Mutex<HashMap<usize, Arc<Gpu>>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<Gpu>>>> = OnceLock::new();
    DEVICES.get_or_init(Default::default)
}

/// The device of adapter `ordinal`, made on first use; an error naming what is missing when
/// there is no such adapter.
pub(crate) fn get(ordinal: usize) -> Result<Arc<Gpu>> {
    let mut devices = registry().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(g) = devices.get(&ordinal) {
        return Ok(g.clone());
    }
    let list = &adapters_once().list;
    let Some(adapter) = list.get(ordinal) else {
        let reason = if list.is_empty() {
            "no wgpu adapter found (no GPU driver with Vulkan, Metal or DirectX 12; on Linux, \
             Mesa's software driver lavapipe gives one: apt-get install mesa-vulkan-drivers \
             libvulkan1)"
                .to_string()
        } else {
            format!(
                "only {} wgpu adapter(s): {}",
                list.len(),
                list.iter().map(describe).collect::<Vec<_>>().join(", ")
            )
        };
        return Err(Error::DeviceUnavailable {
            device: Device::Wgpu(ordinal),
            why: reason,
        });
    };
    let limits = adapter.limits();
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("stride"),
        required_features: wgpu::Features::empty(),
        required_limits: limits.clone(),
        ..Default::default()
    }))
    .map_err(|e| Error::DeviceUnavailable {
        device: Device::Wgpu(ordinal),
        why: format!("{}: {e}", describe(adapter)),
    })?;
    let error: Arc<Mutex<Option<String>>> = Arc::default();
    let slot = error.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        let mut s = slot.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = Some(e.to_string());
        }
    }));
    let gpu = Arc::new(Gpu {
        ordinal,
        queue,
        limits,
        name: describe(adapter),
        allocator: Mutex::new(Allocator::default()),
        pipelines: Mutex::default(),
        error,
        syncs: AtomicU64::new(0),
        launches: AtomicU64::new(0),
        deferred: super::deferred::Deferred::new(&device),
        device,
    });
    devices.insert(ordinal, gpu.clone());
    Ok(gpu)
}

/// The device if it was already made (statistics of an unused device are zeros).
pub(crate) fn existing(ordinal: usize) -> Option<Arc<Gpu>> {
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&ordinal)
        .cloned()
}
