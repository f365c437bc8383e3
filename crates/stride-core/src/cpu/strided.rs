//! The one strided iteration engine every CPU kernel is built on: the parallel and tiled walks
//! of a [`Plan`] (its geometry is backend-neutral, in `backend::common::plan`). Kernels receive runs:
//! a starting offset per operand and a length along the innermost dim, whose strides are
//! [`Plan::inner_strides`]. Contiguous fast paths are chosen by looking at those strides —
//! an optimisation inside the one generic path, never a different semantics.

use super::parallel::{run_chunks, run_tasks_with};
pub(crate) use crate::backend::common::plan::Plan;

/// Elements per parallel task: below this, threading costs more than it saves.
pub(crate) const PAR_GRAIN: usize = 1 << 15;

impl<const N: usize> Plan<N> {
    /// Splits the iteration into tasks for rayon when it is large enough; `f` gets a range of
    /// logical positions. Each position is visited exactly once.
    pub fn par_ranges(&self, f: impl Fn(usize, usize) + Sync) {
        let n = self.numel();
        let tasks = n / PAR_GRAIN;
        if tasks < 2 || rayon::current_num_threads() < 2 {
            f(0, n);
            return;
        }
        run_chunks(n, tasks.min(rayon::current_num_threads() * 4), &f);
    }

    /// Calls `f(offsets, len)` for runs covering every position exactly once, in the
    /// output's order, in parallel when the plan is large.
    pub fn par_runs(&self, f: impl Fn([isize; N], usize) + Sync) {
        self.par_ranges(|s, e| self.for_each_run(s, e, &f))
    }

    /// Whether the plan is better walked in tiles (see [`Tiling`]): some input strides across
    /// the innermost dim while it is contiguous (or nearly) along another dim — a transposed
    /// operand beside a row-major output. Then a run-by-run walk fetches one cache line of
    /// that input per element (and at power-of-two strides the lines evict each other before
    /// they are reused), whatever the tile size.
    pub fn tiling(&self) -> Option<Tiling<N>> {
        let nd = self.shape().len();
        if nd < 2 || self.shape()[nd - 1] < TILE_MIN_INNER {
            return None;
        }
        let inner = nd - 1;
        let mut best: Option<(isize, usize)> = None; // (inner stride of that input, tile dim)
        for k in 1..N {
            let s0 = self.strides()[k][inner].abs();
            if s0 < TILE_MIN_STRIDE || best.is_some_and(|(b, _)| b >= s0) {
                continue;
            }
            let t = (0..inner)
                .filter(|&d| self.shape()[d] >= 2 && self.strides()[k][d] != 0)
                .min_by_key(|&d| self.strides()[k][d].abs());
            if let Some(t) = t.filter(|&t| self.strides()[k][t].abs() < s0) {
                best = Some((s0, t));
            }
        }
        let (_, t) = best?;
        let rows: [isize; N] = std::array::from_fn(|k| self.strides()[k][t]);
        let cols: [isize; N] = std::array::from_fn(|k| self.strides()[k][inner]);
        let staged = std::array::from_fn(|k| {
            k > 0
                && cols[k].abs() >= TILE_MIN_STRIDE
                && rows[k] != 0
                && rows[k].abs() < cols[k].abs()
        });
        Some(Tiling {
            dim: t,
            rows,
            cols,
            staged,
        })
    }

    /// Calls `f(origin, rows, cols)` for every tile of `tiling` — `rows` ≤ [`TILE_ROWS`] steps
    /// along the tile dim and `cols` ≤ [`TILE_COLS`] along the innermost dim, starting at the
    /// per-operand offsets `origin` — covering every position exactly once, in parallel when
    /// the plan is large.
    ///
    /// `scratch` makes the per-task state (the staging buffers), once per parallel task, not
    /// per tile.
    pub fn par_tiles<S>(
        &self,
        tiling: &Tiling<N>,
        scratch: impl Fn() -> S + Sync,
        f: impl Fn(&mut S, [isize; N], usize, usize) + Sync,
    ) {
        let nd = self.shape().len();
        let (inner, t) = (nd - 1, tiling.dim);
        let outer: Vec<usize> = (0..inner).filter(|&d| d != t).collect();
        let n_outer: usize = outer.iter().map(|&d| self.shape()[d]).product();
        let (nt, ni) = (self.shape()[t], self.shape()[inner]);
        let (bt, bi) = (nt.div_ceil(TILE_ROWS), ni.div_ceil(TILE_COLS));
        let tasks = n_outer * bt * bi;
        let tile = |sc: &mut S, task: usize| {
            // tiles along the innermost dim are neighbours in the task order
            let (ib, tb, mut o) = (task % bi, (task / bi) % bt, task / (bi * bt));
            let mut off = self.offsets();
            for &d in outer.iter().rev() {
                let i = (o % self.shape()[d]) as isize;
                o /= self.shape()[d];
                for k in 0..N {
                    off[k] += i * self.strides()[k][d];
                }
            }
            let (t0, i0) = (tb * TILE_ROWS, ib * TILE_COLS);
            for k in 0..N {
                off[k] +=
                    i0 as isize * self.strides()[k][inner] + t0 as isize * self.strides()[k][t];
            }
            f(sc, off, TILE_ROWS.min(nt - t0), TILE_COLS.min(ni - i0));
        };
        let threads = rayon::current_num_threads();
        if self.numel() < 2 * PAR_GRAIN || threads < 2 || tasks < 2 {
            let mut sc = scratch();
            (0..tasks).for_each(|k| tile(&mut sc, k));
            return;
        }
        run_tasks_with(tasks, scratch, tile);
    }
}

/// How [`Plan::par_tiles`] walks a plan: tiles of the innermost dim and one other
/// (`dim`). Each tile is `rows` runs along the innermost dim; an input marked `staged` is
/// first copied into a small buffer ([`stage`]) reading it along its own contiguous dim, so
/// that every cache line of every operand is used whole, once — the transposition happens in
/// cache, not in memory.
///
/// What it costs: staging a tile and updating the output's runs from it don't overlap, and
/// each costs about as much as the whole op would on contiguous operands — the staged
/// operand is read in short stretches of many rows, which memory serves at about half its
/// streaming rate. So an in-place op into a transposed output takes about twice its
/// contiguous time (4096² f32 `mul_` into `w.t()`: 8.4–9.3 ms against 4.2–4.5 on the 2-core
/// EPYC VM, before the staging prefetch of `transpose::STAGE_AHEAD` took 5–10% off).
/// `examples/transpose_probe.rs` times the two halves apart, and lists the tile shapes and
/// prefetching schemes that did not do better.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tiling<const N: usize> {
    dim: usize,
    /// Stride per operand between consecutive runs of a tile.
    pub rows: [isize; N],
    /// Stride per operand along a run (the innermost dim).
    pub cols: [isize; N],
    pub staged: [bool; N],
}

/// Runs per tile of [`Plan::par_tiles`]: the length of the stretch a staged operand is read
/// along its own contiguous dim (256 bytes of f32: four whole cache lines per row of it).
/// Reading many short pieces of many rows is what makes naive transposes slow.
///
/// 64 × 256 measured better than 256 × 64 on the 2-core EPYC: `mul_` into `w.t()` (4096²
/// f32) 8.3 ms against 9.1 ms, median of six alternating runs' best; the transposed copy,
/// `neg` of `.t()` and mixed-order `add` level. Longer runs along the output keep its
/// streams (and the hardware prefetcher on them) going longer per tile.
pub(crate) const TILE_ROWS: usize = 64;
/// Elements per run of a tile (along the output's contiguous dim).
pub(crate) const TILE_COLS: usize = 256;
/// The innermost length from which a tiled walk pays (shorter runs already fit in a line
/// or two of every operand).
const TILE_MIN_INNER: usize = 32;
/// How many runs ahead [`TileOperand::prefetch`] asks for.
pub(crate) const PREFETCH_RUNS: usize = 4;
/// Elements of a staging buffer: one tile.
pub(crate) const TILE_ELEMS: usize = TILE_ROWS * TILE_COLS;
/// An input's innermost stride (in elements) from which a tiled walk pays.
const TILE_MIN_STRIDE: isize = 8;

/// A staging buffer for one operand of a tile, if it is `staged` (on the heap: a tile of f64
/// is 128 KiB, too much for the stack of a small thread).
pub(crate) fn stage_buf<T>(staged: bool) -> Vec<std::mem::MaybeUninit<T>> {
    if !staged {
        return Vec::new();
    }
    let mut v = Vec::with_capacity(TILE_ELEMS);
    // SAFETY: MaybeUninit elements need no initialisation
    unsafe { v.set_len(TILE_ELEMS) };
    v
}

/// One operand of a tile as a kernel reads it: its first run, the stride between runs and
/// the stride along a run.
pub(crate) struct TileOperand<T> {
    pub base: *mut T,
    pub row: isize,
    pub col: isize,
    /// Read from a staging buffer (already in cache).
    pub staged: bool,
}

impl<T: Copy> TileOperand<T> {
    /// Operand `k` of the tile at `origin`: in place, or copied into `buf` (a row of the buffer
    /// per run) when the tiling stages it.
    ///
    /// # Safety
    /// `base` is operand `k`'s base pointer and the tile lies inside its storage.
    #[inline(always)]
    pub unsafe fn new<const N: usize>(
        tiling: &Tiling<N>,
        k: usize,
        base: *mut T,
        origin: [isize; N],
        rows: usize,
        cols: usize,
        buf: &mut [std::mem::MaybeUninit<T>],
    ) -> TileOperand<T> {
        let p = base.offset(origin[k]);
        if !tiling.staged[k] {
            return TileOperand {
                base: p,
                row: tiling.rows[k],
                col: tiling.cols[k],
                staged: false,
            };
        }
        assert!(buf.len() >= TILE_ELEMS, "a staging buffer holds a tile");
        let b = buf.as_mut_ptr() as *mut T;
        stage(p, tiling.rows[k], tiling.cols[k], rows, cols, b);
        TileOperand {
            base: b,
            row: TILE_COLS as isize,
            col: 1,
            staged: true,
        }
    }
    /// The first element of run `r`.
    #[inline(always)]
    pub unsafe fn run(&self, r: usize) -> *mut T {
        self.base.offset(r as isize * self.row)
    }
    /// Asks for run `r` (of `cols` elements) to be brought into cache, when it is a contiguous
    /// stretch of memory (not staged). Runs of a tile are short pieces of many rows, which the
    /// hardware prefetcher doesn't follow; a few runs ahead hides the memory latency. A hint
    /// only: it never faults and changes no data.
    #[inline(always)]
    pub fn prefetch(&self, r: usize, cols: usize) {
        if self.col == 1 && !self.staged {
            let p = self.base.wrapping_offset(r as isize * self.row);
            super::prefetch::stretch(
                p,
                cols * std::mem::size_of::<T>(),
                super::prefetch::Level::L1,
            );
        }
    }
}

/// `buf[r·TILE_COLS + c] = src[r·row + c·col]` for a `rows × cols` block, reading `src`
/// along rows (where a staged operand is contiguous), so each of its cache lines is used
/// whole. 4-byte elements contiguous along rows go 8×8 through registers.
#[inline(always)]
unsafe fn stage<T: Copy>(
    src: *const T,
    row: isize,
    col: isize,
    rows: usize,
    cols: usize,
    buf: *mut T,
) {
    if std::mem::size_of::<T>() == 4 && row == 1 {
        // a staging move is a bitwise copy, so any 4-byte type can go as u32
        let b = buf as *mut u32;
        return super::transpose::transpose_block_4(
            src as *const u32,
            col,
            b,
            TILE_COLS as isize,
            rows,
            cols,
            super::transpose::STAGE_AHEAD,
        );
    }
    for c in 0..cols {
        let s = src.offset(c as isize * col);
        for r in 0..rows {
            *buf.add(r * TILE_COLS + c) = *s.offset(r as isize * row);
        }
    }
}

/// A raw pointer that may cross threads: kernels guarantee disjoint writes.
pub(crate) struct SendPtr<T>(pub *mut T);
// By hand, not derived: a derive would demand `T: Copy`, and the pointer is copyable whatever
// it points to (`par_map` carries one to results that are not `Copy`).
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    #[inline(always)]
    pub fn get(self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn visit<const N: usize>(p: &Plan<N>, s: usize, e: usize) -> Vec<[isize; N]> {
        let inner = p.inner_strides();
        let mut v = vec![];
        p.for_each_run(s, e, |off, len| {
            for i in 0..len as isize {
                v.push(std::array::from_fn(|k| off[k] + i * inner[k]));
            }
        });
        v
    }
    #[test]
    fn visits_every_element_once_in_any_range() {
        // out contiguous (2,3,4); input transposed view of a (4,3,2) buffer with offset 5
        let p = Plan::new(&[2, 3, 4], [&[12, 4, 1], &[1, 2, 6]], [0, 5]);
        let all = visit(&p, 0, 24);
        let mut outs: Vec<isize> = all.iter().map(|o| o[0]).collect();
        outs.sort();
        assert_eq!(outs, (0..24).collect::<Vec<_>>());
        for o in &all {
            let (i, j, k) = (o[0] / 12, (o[0] / 4) % 3, o[0] % 4);
            assert_eq!(o[1], 5 + i + 2 * j + 6 * k);
        }
        for (s, e) in [(0, 7), (7, 13), (13, 24), (3, 4)] {
            assert_eq!(visit(&p, s, e), all[s..e].to_vec());
        }
    }
    fn visit_tiles<const N: usize>(p: &Plan<N>) -> Vec<[isize; N]> {
        let t = p.tiling().expect("tiled");
        let v = std::sync::Mutex::new(vec![]);
        p.par_tiles(
            &t,
            || (),
            |_, org, rows, cols| {
                let mut v = v.lock().unwrap();
                for r in 0..rows as isize {
                    for c in 0..cols as isize {
                        v.push(std::array::from_fn(|k| {
                            org[k] + r * t.rows[k] + c * t.cols[k]
                        }));
                    }
                }
            },
        );
        let mut v = v.into_inner().unwrap();
        v.sort();
        v
    }
    #[test]
    fn tiles_visit_every_element_once() {
        // out row-major [b, r, c] (offset 1), input transposed in its last two dims (offset 2),
        // ragged tiles on both sides; the large one runs in parallel
        for (b, r, c) in [(3usize, 70usize, 130usize), (2, 300, 200)] {
            let p = Plan::new(&[b, r, c], [&[r * c, c, 1], &[r * c, 1, r]], [1, 2]);
            let t = p.tiling().expect("tiled");
            assert_eq!(t.staged, [false, true]);
            let got = visit_tiles(&p);
            let mut want = vec![];
            for i in 0..b {
                for j in 0..r {
                    for k in 0..c {
                        want.push([
                            (1 + i * r * c + j * c + k) as isize,
                            (2 + i * r * c + j + k * r) as isize,
                        ]);
                    }
                }
            }
            want.sort();
            assert_eq!(got, want);
        }
        // no tiling for a stepped input or a broadcast one
        let p = Plan::new(&[64, 64], [&[64, 1], &[128, 2]], [0, 0]);
        assert!(p.tiling().is_none());
        let p = Plan::new(&[64, 64], [&[64, 1], &[1, 0]], [0, 0]);
        assert!(p.tiling().is_none());
    }
    #[test]
    fn staging_transposes_a_block() {
        // a 3x2 block of a column-major 4x4 matrix, read along its contiguous dim
        let src: Vec<i32> = (0..16).collect();
        let mut buf = stage_buf::<i32>(true);
        let t = Tiling {
            dim: 0,
            rows: [1, 1],
            cols: [4, 4],
            staged: [false, true],
        };
        let op =
            unsafe { TileOperand::new(&t, 1, src.as_ptr() as *mut i32, [0, 5], 3, 2, &mut buf) };
        assert_eq!((op.row, op.col), (TILE_COLS as isize, 1));
        let got: Vec<i32> = (0..3)
            .flat_map(|r| (0..2).map(move |c| (r, c)))
            .map(|(r, c)| unsafe { *op.run(r).add(c) })
            .collect();
        assert_eq!(got, vec![5, 9, 6, 10, 7, 11]);
    }
    #[test]
    fn merges_contiguous_dims() {
        let p = Plan::new(&[4, 5, 6], [&[30, 6, 1], &[30, 6, 1]], [0, 0]);
        assert_eq!(p.inner_len(), 120);
        let p = Plan::new(&[4, 5, 6], [&[30, 6, 1], &[0, 6, 1]], [0, 0]);
        assert_eq!(p.inner_len(), 30);
    }
}
