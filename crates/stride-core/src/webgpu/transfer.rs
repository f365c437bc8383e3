//! Host ↔ device bytes: what `to_device` and the CPU round trip of the backend contract move
//! data with. Reading back waits for the queue and counts as a host synchronisation.
//!
//! wgpu copies whole 4-byte words, so a range that starts or ends inside a word (bytes,
//! halves) is widened to words: a read drops the extra bytes, a write first reads the edge
//! words it shares with other elements and writes them back unchanged.

use super::buffer::WgpuBuffer;
use super::deferred::RECORD_WORDS;
use super::device::Gpu;
use crate::storage::{Storage, StorageData};
use crate::{Error, Result};

fn buffer_of<'a>(guard: &'a std::sync::RwLockReadGuard<'_, StorageData>) -> Result<&'a WgpuBuffer> {
    match &**guard {
        StorageData::Wgpu(b) => Ok(b),
        _ => Err(Error::invalid("copy", "storage is not on a wgpu device")),
    }
}

/// The byte range of `n` bytes from element `start`, after checking it lies in the storage.
fn range(s: &Storage, start: usize, n: usize) -> Result<(u64, u64)> {
    let es = s.dtype().size_in_bytes();
    if start.saturating_add(n / es) > s.len() || !n.is_multiple_of(es) {
        return Err(Error::invalid(
            "copy",
            "internal error: a transfer past the end of a storage (please report)",
        ));
    }
    let a = (start * es) as u64;
    Ok((a, a + n as u64))
}

/// Words `[a & !3, ceil4(b))` of the buffer, read back (a counted wait). Fails with the
/// error of a failed device-side check instead (see `deferred.rs`).
fn read_words(b: &WgpuBuffer, a: u64, e: u64, why: &'static str) -> Result<Vec<u8>> {
    let (wa, we) = (a & !3, e.div_ceil(4) * 4);
    read_raw(&b.gpu, Some((b.raw(), wa, we - wa)), why)
}

/// `size` bytes of `buffer` from byte `at` (none: only the wait), read back (a counted wait)
/// together with the device's check record when checks are unread; their verdicts are
/// settled first, and a failed one is this read's error.
pub(crate) fn read_raw(
    gpu: &Gpu,
    src: Option<(&wgpu::Buffer, u64, u64)>,
    why: &'static str,
) -> Result<Vec<u8>> {
    let size = src.map_or(0, |s| s.2);
    let with_record = gpu.deferred.pending() > 0;
    let record_bytes = if with_record {
        RECORD_WORDS as u64 * 4
    } else {
        0
    };
    if size + record_bytes == 0 {
        gpu.wait(why)?;
        gpu.take_error(why)?;
        gpu.deferred.sticky()?;
        return Ok(vec![]);
    }
    let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read back"),
        size: size + record_bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    if let Some((buffer, at, size)) = src {
        enc.copy_buffer_to_buffer(buffer, at, &staging, 0, size);
    }
    if with_record {
        enc.copy_buffer_to_buffer(gpu.deferred.record(), 0, &staging, size, record_bytes);
    }
    gpu.queue.submit([enc.finish()]);
    let slice = staging.slice(..);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    gpu.wait(why)?;
    gpu.take_error(why)?;
    match rx.recv() {
        Ok(Ok(())) => {}
        other => {
            return Err(Error::invalid(
                why,
                format!("reading back from {}: {other:?}", gpu.device()),
            ))
        }
    }
    let mut out = slice
        .get_mapped_range()
        .map_err(|e| Error::invalid(why, format!("reading back from {}: {e}", gpu.device())))?
        .to_vec();
    staging.unmap();
    if with_record {
        let rec: Vec<u32> = out[size as usize..]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        gpu.deferred.settle(gpu, std::array::from_fn(|k| rec[k]));
        out.truncate(size as usize);
    }
    gpu.deferred.sticky()?;
    Ok(out)
}

/// `into.len()` bytes of a wgpu storage from element `start`, copied to the host (a counted
/// wait).
pub(crate) fn read_bytes(src: &Storage, start: usize, into: &mut [u8]) -> Result<()> {
    if into.is_empty() {
        return Ok(());
    }
    let (a, e) = range(src, start, into.len())?;
    let guard = src.read();
    let b = buffer_of(&guard)?;
    let words = read_words(b, a, e, "copy to the host")?;
    let skip = (a - (a & !3)) as usize;
    into.copy_from_slice(&words[skip..skip + into.len()]);
    Ok(())
}

/// Writes `from` into a wgpu storage from element `start` (queued; `from` may be dropped at
/// once). A range that shares its edge words with other elements reads them first (a wait).
pub(crate) fn write_bytes(from: &[u8], dst: &Storage, start: usize) -> Result<()> {
    if from.is_empty() {
        return Ok(());
    }
    let (a, e) = range(dst, start, from.len())?;
    let guard = dst.read();
    let b = buffer_of(&guard)?;
    let end_of_data = (dst.len() * dst.dtype().size_in_bytes()) as u64;
    // bytes past the storage's last element are padding: free to overwrite
    let partial_tail = e % 4 != 0 && e < end_of_data;
    let (wa, we) = (a & !3, e.div_ceil(4) * 4);
    let mut words = if a % 4 != 0 || partial_tail {
        read_words(b, a, e, "copy to a wgpu device (partial words)")?
    } else {
        vec![0u8; (we - wa) as usize]
    };
    let skip = (a - wa) as usize;
    words[skip..skip + from.len()].copy_from_slice(from);
    b.gpu.queue.write_buffer(b.raw(), wa, &words);
    b.gpu.take_error("copy to a wgpu device")
}
