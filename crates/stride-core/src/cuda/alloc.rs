//! The caching allocator of one CUDA device.
//!
//! `cuMemAlloc`/`cuMemFree` cost tens of microseconds and `cuMemFree` synchronises the device,
//! so freed blocks are kept in size classes and handed out again. All of stride's work on a
//! device is queued on one stream, so a block freed by the host may be reused by the next
//! request at once: any kernel still reading it was queued earlier on the same stream.
//!
//! Size classes: requests up to 1 MiB round up to a multiple of 512 bytes; larger ones to a
//! multiple of 2 MiB. A request takes a cached block of exactly its class. When the driver
//! runs out of memory, the cache is released and the request tried once more; if that fails
//! too the error names the request and the statistics.
//!
//! While a CUDA graph is captured (`graph.rs`), requests are served from the graph's own
//! *pool*: a replay writes to the very addresses the capture used, so no block the graph
//! touches may go to anyone else while the graph lives. Blocks freed during the capture
//! return to the pool (a later kernel of the same capture may reuse them: replays keep
//! the order); blocks still alive after it (the graph's outputs) return to the pool when
//! freed; when the graph is dropped its free blocks join the common cache.

use super::device::CudaDevice;
use crate::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::thread::ThreadId;

const SMALL: usize = 1 << 20;
const SMALL_ROUND: usize = 512;
const LARGE_ROUND: usize = 2 << 20;
/// Requests above this (2^62 bytes) fail at once: no device has them, and their size class
/// would overflow.
const MAX_REQUEST: usize = 1 << 62;

/// Rounds a request up to its size class.
pub(crate) fn size_class(bytes: usize) -> usize {
    let b = bytes.max(1);
    if b <= SMALL {
        b.div_ceil(SMALL_ROUND) * SMALL_ROUND
    } else {
        b.div_ceil(LARGE_ROUND) * LARGE_ROUND
    }
}

#[derive(Default)]
pub(crate) struct Allocator {
    /// Cached free blocks by size class.
    free: BTreeMap<usize, Vec<u64>>,
    /// Bytes (of size classes) held by live buffers.
    pub allocated: u64,
    /// Bytes obtained from the driver (live + cached).
    pub reserved: u64,
    pub peak: u64,
    /// Buffers handed out since the process started.
    pub count: u64,
    /// Calls to `cuMemAlloc` (cache misses).
    pub driver_allocs: u64,
    /// Bytes ever handed out (the profiler's per-op allocation).
    pub total: u64,
    /// The peak since the profiler last looked (`storage::take_window_peak`).
    pub window_peak: u64,
    /// The graph being captured on this device: its pool and the capturing thread.
    pub capturing: Option<(u64, ThreadId)>,
    /// Free blocks of each live graph's pool, by size class.
    pools: HashMap<u64, BTreeMap<usize, Vec<u64>>>,
    /// The pool of every block a graph has used (until it goes back to the common cache).
    owner: HashMap<u64, u64>,
    next_pool: u64,
}

impl Allocator {
    /// Bytes of the largest cached block (0 when the cache is empty).
    pub fn largest_free_block(&self) -> u64 {
        self.free
            .iter()
            .rev()
            .find(|(_, v)| !v.is_empty())
            .map_or(0, |(s, _)| *s as u64)
    }
}

/// A device pointer of `size` bytes (a size class) from `dev`'s cache or the driver.
pub(crate) fn allocate(dev: &CudaDevice, bytes: usize) -> Result<(u64, usize)> {
    if bytes > MAX_REQUEST {
        // no device has this much; its size class would overflow
        let a = dev.allocator();
        return Err(out_of_memory(
            dev,
            &a,
            bytes,
            "more than any device can hold",
        ));
    }
    let size = size_class(bytes);
    let mut a = dev.allocator();
    let pool = match a.capturing {
        Some((_, thread)) if thread != std::thread::current().id() => {
            return Err(Error::invalid(
                "alloc",
                format!(
                    "{} is capturing a CUDA graph on another thread; work queued now would become part of that graph. Queue work on this device from the capturing thread only, or after the capture ends",
                    dev.device()
                ),
            ));
        }
        Some((pool, _)) => Some(pool),
        None => None,
    };
    let cached = match pool {
        Some(p) => a
            .pools
            .get_mut(&p)
            .and_then(|free| free.get_mut(&size))
            .and_then(|v| v.pop()),
        None => a.free.get_mut(&size).and_then(|v| v.pop()),
    };
    let ptr = match cached {
        Some(p) => p,
        None => {
            dev.bind()?;
            let p = match unsafe { cudarc::driver::result::malloc_sync(size) } {
                Ok(p) => p,
                Err(e) if pool.is_some() => {
                    // releasing the cache would wait for the stream, which a capture forbids
                    return Err(out_of_memory(
                        dev,
                        &a,
                        bytes,
                        &format!("{e} (while capturing a CUDA graph)"),
                    ));
                }
                Err(_) => {
                    // release every cached block and try once more
                    release_cache(dev, &mut a)?;
                    unsafe { cudarc::driver::result::malloc_sync(size) }
                        .map_err(|e| out_of_memory(dev, &a, bytes, &e.to_string()))?
                }
            };
            a.reserved += size as u64;
            a.driver_allocs += 1;
            p
        }
    };
    if let Some(p) = pool {
        a.owner.insert(ptr, p);
    }
    a.allocated += size as u64;
    a.peak = a.peak.max(a.allocated);
    a.window_peak = a.window_peak.max(a.allocated);
    a.total += size as u64;
    a.count += 1;
    Ok((ptr, size))
}

/// Returns a block to the cache (never to the driver: see the module docs).
pub(crate) fn release(dev: &CudaDevice, ptr: u64, size: usize) {
    let mut a = dev.allocator();
    a.allocated -= size as u64;
    let a = &mut *a;
    // a block a live graph uses goes back to that graph's pool
    let free = match a.owner.get(&ptr).and_then(|p| a.pools.get_mut(p)) {
        Some(pool) => pool,
        None => {
            a.owner.remove(&ptr);
            &mut a.free
        }
    };
    free.entry(size).or_default().push(ptr);
}

/// Starts serving this thread's requests from a new graph pool; returns its id.
pub(crate) fn begin_capture(dev: &CudaDevice) -> Result<u64> {
    let mut a = dev.allocator();
    if a.capturing.is_some() {
        return Err(Error::invalid(
            "CudaGraph::capture",
            format!(
                "{} is already capturing a graph; captures on one device cannot nest or overlap",
                dev.device()
            ),
        ));
    }
    a.next_pool += 1;
    let id = a.next_pool;
    a.pools.insert(id, BTreeMap::new());
    a.capturing = Some((id, std::thread::current().id()));
    Ok(id)
}

/// Ends the capture: later requests use the common cache again (the pool stays the graph's).
pub(crate) fn end_capture(dev: &CudaDevice) {
    dev.allocator().capturing = None;
}

/// The graph of `pool` is gone: its free blocks join the common cache, and its blocks still
/// alive will when they are freed. Stream order makes this safe while a last replay runs.
pub(crate) fn drop_pool(dev: &CudaDevice, pool: u64) {
    let mut a = dev.allocator();
    let a = &mut *a;
    if let Some(free) = a.pools.remove(&pool) {
        for (size, ptrs) in free {
            for p in ptrs {
                a.owner.remove(&p);
                a.free.entry(size).or_default().push(p);
            }
        }
    }
}

/// Frees every cached block back to the driver (after the stream's queued work is done).
pub(crate) fn release_cache(dev: &CudaDevice, a: &mut Allocator) -> Result<()> {
    if a.free.values().all(|v| v.is_empty()) {
        return Ok(());
    }
    dev.stream
        .synchronize()
        .map_err(|e| dev.err("empty_cache: waiting for the GPU", e))?;
    for (size, ptrs) in std::mem::take(&mut a.free) {
        for p in ptrs {
            unsafe { cudarc::driver::result::free_sync(p) }
                .map_err(|e| dev.err("empty_cache: cuMemFree", e))?;
            a.reserved -= size as u64;
        }
    }
    Ok(())
}

fn out_of_memory(dev: &CudaDevice, a: &Allocator, requested: usize, why: &str) -> Error {
    let (free, total) = dev.ctx.mem_get_info().unwrap_or((0, 0));
    Error::OutOfMemory {
        op: "alloc",
        device: dev.device(),
        shape: vec![],
        dtype: None,
        requested: requested as u128,
        detail: format!(
            "{why}; stride holds {} in live tensors ({} reserved, peak {}); the device has {} free of {}",
            human(a.allocated),
            human(a.reserved),
            human(a.peak),
            human(free as u64),
            human(total as u64)
        ),
    }
}

/// Bytes as a short human-readable string (`1.50 GiB`).
pub(crate) fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn size_classes() {
        assert_eq!(size_class(0), 512);
        assert_eq!(size_class(1), 512);
        assert_eq!(size_class(512), 512);
        assert_eq!(size_class(513), 1024);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), 2 << 20);
        assert_eq!(size_class(5 << 20), 6 << 20);
        assert_eq!(human(1536), "1.50 KiB");
    }
}
