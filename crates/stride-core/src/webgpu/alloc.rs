//! The caching allocator of a wgpu device: freed buffers wait in size classes for the next
//! request of their class, so a training step reuses its buffers instead of asking the driver
//! each time. Its statistics are the CUDA allocator's ([`crate::MemoryStats`]).
//!
//! Reusing a buffer is safe without waiting: every op is submitted as it is encoded, and the
//! queue runs submissions in order, so a later op's writes land after earlier ops' reads.

use std::collections::BTreeMap;

/// Size classes: multiples of 256 bytes up to 1 MiB, then of 1 MiB (at most 1/1024 waste
/// above 1 MiB, a few percent below).
pub(crate) fn size_class(bytes: u64) -> u64 {
    let b = bytes.max(4);
    if b <= 1 << 20 {
        b.div_ceil(256) * 256
    } else {
        b.div_ceil(1 << 20) << 20
    }
}

#[derive(Default)]
pub(crate) struct Allocator {
    free: BTreeMap<u64, Vec<wgpu::Buffer>>,
    /// Bytes (size classes) of live buffers.
    pub(crate) allocated: u64,
    pub(crate) peak: u64,
    pub(crate) count: u64,
    /// Bytes held in the cache.
    pub(crate) cached: u64,
    /// Bytes ever allocated (the profiler's per-op allocation).
    pub(crate) total: u64,
    /// The most allocated since the profiler last looked.
    pub(crate) window_peak: u64,
}

impl Allocator {
    /// A cached buffer of exactly `class` bytes, counted as allocated.
    pub(crate) fn take(&mut self, class: u64) -> Option<wgpu::Buffer> {
        let list = self.free.get_mut(&class)?;
        let b = list.pop()?;
        if list.is_empty() {
            self.free.remove(&class);
        }
        self.cached -= class;
        self.note_alloc(class);
        Some(b)
    }
    pub(crate) fn note_alloc(&mut self, class: u64) {
        self.allocated += class;
        self.total += class;
        self.count += 1;
        self.peak = self.peak.max(self.allocated);
        self.window_peak = self.window_peak.max(self.allocated);
    }
    /// A buffer back from a dropped storage.
    pub(crate) fn give_back(&mut self, class: u64, b: wgpu::Buffer) {
        self.allocated -= class;
        self.cached += class;
        self.free.entry(class).or_default().push(b);
    }
    /// Drops every cached buffer (before retrying an allocation the driver refused).
    pub(crate) fn release_cache(&mut self) {
        self.free.clear();
        self.cached = 0;
    }
    pub(crate) fn largest_free(&self) -> u64 {
        self.free.keys().next_back().copied().unwrap_or(0)
    }
}
