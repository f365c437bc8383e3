//! Host ↔ device bytes: what `to_device` and the CPU round trip of the backend contract move
//! data with. Reading back waits for the queue and counts as a host synchronisation.
//!
//! wgpu copies whole 4-byte words, so a range that starts or ends inside a word (bytes,
//! halves) is widened to words: a read drops the extra bytes, a write first reads the edge
//! words it shares with other elements and writes them back unchanged.

use super::buffer::WgpuBuffer;
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

/// Words `[a & !3, ceil4(b))` of the buffer, read back (a counted wait).
fn read_words(b: &WgpuBuffer, a: u64, e: u64, why: &'static str) -> Result<Vec<u8>> {
    let gpu = &b.gpu;
    let (wa, we) = (a & !3, e.div_ceil(4) * 4);
    let size = we - wa;
    let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read back"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(b.raw(), wa, &staging, 0, size);
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
    let out = slice
        .get_mapped_range()
        .map_err(|e| Error::invalid(why, format!("reading back from {}: {e}", gpu.device())))?
        .to_vec();
    staging.unmap();
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
