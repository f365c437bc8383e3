//! The tiled walk of elementwise kernels (`k_tiled*` in kernels/elementwise.cu and copy.cu):
//! when an input's fastest dim is not the output's (a transposed operand), a plain walk reads
//! that input with a large stride between neighbouring threads, and memory bandwidth drops
//! several-fold. The tiled walk stages 32 × 32 tiles through shared memory so that every
//! operand is read and written along its own fastest dim.
//!
//! Only the order of the walk changes, never what is computed at a position (DESIGN.md
//! invariant 1); the host picks it after looking at the layouts.

use super::device::CudaDevice;
use super::launch::{arg, launch_cfg, Geo, Str, Walk};
use crate::Result;
use cudarc::driver::CudaFunction;
use std::ffi::c_void;

/// A walk re-ordered for tiles: the last two dims of `geo` are a tile's rows and columns.
pub(crate) struct Tiled<const N: usize> {
    pub geo: Geo,
    pub strs: [Str; N],
    /// Positions of the dims before the tile dims (the batch).
    pub nb: i64,
    /// Bit k set: operand k (0 = the output) is faster along the rows than along the columns.
    pub tmask: i32,
    pub tiles: i64,
}

/// Below this many elements the plain walk's one launch is as good.
const MIN_ELEMENTS: i64 = 1 << 14;

/// The tiled form of `w`, if some input's fastest dim differs from the innermost (the
/// output's fastest, since walks order dims by the output's strides) and both dims are long
/// enough to fill tiles.
pub(crate) fn tiled<const N: usize>(w: &Walk<N>) -> Option<Tiled<N>> {
    let nd = w.geo.ndim as usize;
    if nd < 2 || w.n < MIN_ELEMENTS {
        return None;
    }
    let last = nd - 1;
    let fastest = |s: &Str| {
        (0..nd)
            .filter(|&d| s.st[d] != 0 && w.geo.size[d] > 1)
            .min_by_key(|&d| s.st[d].unsigned_abs())
    };
    let t = (1..N).find_map(|k| {
        let s = &w.strs[k];
        match fastest(s) {
            Some(f) if f != last && s.st[last].unsigned_abs() > 1 => Some(f),
            _ => None,
        }
    })?;
    if w.geo.size[t] < 16 || w.geo.size[last] < 16 {
        return None;
    }
    let mut order: Vec<usize> = (0..nd).filter(|&d| d != t && d != last).collect();
    order.extend([t, last]);
    let mut geo = w.geo;
    for (j, &d) in order.iter().enumerate() {
        geo.size[j] = w.geo.size[d];
    }
    let strs: [Str; N] = std::array::from_fn(|k| {
        let mut s = w.strs[k];
        for (j, &d) in order.iter().enumerate() {
            s.st[j] = w.strs[k].st[d];
        }
        s
    });
    let mut tmask = 0;
    for (k, s) in strs.iter().enumerate() {
        if s.st[nd - 2].unsigned_abs() < s.st[nd - 1].unsigned_abs() {
            tmask |= 1 << k;
        }
    }
    let nb: i64 = geo.size[..nd - 2].iter().product();
    let (r, c) = (geo.size[nd - 2], geo.size[nd - 1]);
    let tiles = nb * ((r + 31) / 32) * ((c + 31) / 32);
    Some(Tiled {
        geo,
        strs,
        nb,
        tmask,
        tiles,
    })
}

/// Launches a `k_tiled*` kernel: `ptrs[k]` is operand k's base address (0 = the output).
pub(crate) fn launch_tiled<const N: usize>(
    dev: &CudaDevice,
    f: &CudaFunction,
    op: &'static str,
    t: &Tiled<N>,
    ptrs: [u64; N],
) -> Result<()> {
    let mut args: Vec<*mut c_void> = vec![arg(&t.geo), arg(&t.nb), arg(&t.tmask)];
    for k in 0..N {
        args.push(arg(&ptrs[k]));
        args.push(arg(&t.strs[k]));
    }
    let blocks = (t.tiles as u64).min(dev.sm_count as u64 * 16).max(1) as u32;
    unsafe { launch_cfg(dev, f, op, (blocks, 1, 1), (32, 4, 1), 0, &mut args) }
}
