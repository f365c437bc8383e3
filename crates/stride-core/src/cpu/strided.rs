//! The one strided iteration engine every CPU kernel is built on.
//!
//! A [`Plan`] takes the common shape of N operands (operand 0 is the output) and each
//! operand's strides, drops size-1 dims, orders dims so the output's smallest stride is
//! innermost, and merges dims that are contiguous in every operand. Kernels then receive runs:
//! a starting offset per operand and a length along the innermost dim, whose strides are
//! [`Plan::inner_strides`]. Contiguous fast paths are chosen by looking at those strides —
//! an optimisation inside the one generic path, never a different semantics.

/// Elements per parallel task: below this, threading costs more than it saves.
pub(crate) const PAR_GRAIN: usize = 1 << 15;

#[derive(Debug, Clone)]
pub(crate) struct Plan<const N: usize> {
    shape: Vec<usize>,
    strides: [Vec<isize>; N],
    offsets: [isize; N],
    numel: usize,
}

impl<const N: usize> Plan<N> {
    /// `strides[k]` and `offsets[k]` describe operand `k` over the common `shape`.
    pub fn new(shape: &[usize], strides: [&[usize]; N], offsets: [usize; N]) -> Self {
        let numel = shape.iter().product();
        let mut dims: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] != 1).collect();
        // outermost first: sort by strides (output first) descending, stable in logical order
        dims.sort_by(|&a, &b| {
            for s in strides.iter() {
                match s[b].cmp(&s[a]) {
                    std::cmp::Ordering::Equal => continue,
                    o => return o,
                }
            }
            a.cmp(&b)
        });
        let mut out_shape: Vec<usize> = Vec::with_capacity(dims.len());
        let mut out_strides: [Vec<isize>; N] =
            std::array::from_fn(|_| Vec::with_capacity(dims.len()));
        for &d in &dims {
            if let Some(&last) = out_shape.last() {
                // merge d into the previous (outer) dim if every operand is contiguous across
                let mergeable = (0..N).all(|k| {
                    *out_strides[k].last().unwrap() == strides[k][d] as isize * shape[d] as isize
                });
                if mergeable {
                    let n = out_shape.len() - 1;
                    out_shape[n] = last * shape[d];
                    for k in 0..N {
                        out_strides[k][n] = strides[k][d] as isize;
                    }
                    continue;
                }
            }
            out_shape.push(shape[d]);
            for k in 0..N {
                out_strides[k].push(strides[k][d] as isize);
            }
        }
        if out_shape.is_empty() {
            out_shape.push(1);
            for s in out_strides.iter_mut() {
                s.push(0);
            }
        }
        Plan {
            shape: out_shape,
            strides: out_strides,
            offsets: offsets.map(|o| o as isize),
            numel,
        }
    }

    pub fn numel(&self) -> usize {
        self.numel
    }
    /// Strides of the innermost dim, per operand.
    pub fn inner_strides(&self) -> [isize; N] {
        std::array::from_fn(|k| *self.strides[k].last().unwrap())
    }
    pub fn inner_len(&self) -> usize {
        *self.shape.last().unwrap()
    }

    /// Calls `f(offsets, len)` for each run covering the logical positions `start..end`.
    pub fn for_each_run(&self, start: usize, end: usize, mut f: impl FnMut([isize; N], usize)) {
        if start >= end {
            return;
        }
        let nd = self.shape.len();
        let inner = self.shape[nd - 1];
        let mut idx = vec![0usize; nd];
        let mut rem = start;
        for d in (0..nd).rev() {
            idx[d] = rem % self.shape[d];
            rem /= self.shape[d];
        }
        let mut off = self.offsets;
        for d in 0..nd {
            for k in 0..N {
                off[k] += idx[d] as isize * self.strides[k][d];
            }
        }
        let mut pos = start;
        while pos < end {
            let len = (inner - idx[nd - 1]).min(end - pos);
            f(off, len);
            pos += len;
            if pos >= end {
                break;
            }
            // the run ended its row: step back to the row start, then carry into outer dims
            for k in 0..N {
                off[k] -= idx[nd - 1] as isize * self.strides[k][nd - 1];
            }
            idx[nd - 1] = 0;
            let mut d = nd - 1;
            loop {
                if d == 0 {
                    break;
                }
                d -= 1;
                idx[d] += 1;
                for k in 0..N {
                    off[k] += self.strides[k][d];
                }
                if idx[d] < self.shape[d] {
                    break;
                }
                for k in 0..N {
                    off[k] -= self.shape[d] as isize * self.strides[k][d];
                }
                idx[d] = 0;
            }
        }
    }

    /// Splits the iteration into tasks for rayon when it is large enough; `f` gets a range of
    /// logical positions. Each position is visited exactly once.
    pub fn par_ranges(&self, f: impl Fn(usize, usize) + Sync) {
        let n = self.numel;
        let tasks = n / PAR_GRAIN;
        if tasks < 2 || rayon::current_num_threads() < 2 {
            f(0, n);
            return;
        }
        let tasks = tasks.min(rayon::current_num_threads() * 4);
        let chunk = n.div_ceil(tasks);
        use rayon::prelude::*;
        (0..tasks).into_par_iter().for_each(|t| {
            let s = t * chunk;
            let e = ((t + 1) * chunk).min(n);
            if s < e {
                f(s, e);
            }
        });
    }
}

/// A raw pointer that may cross threads: kernels guarantee disjoint writes.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub *mut T);
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
    #[test]
    fn merges_contiguous_dims() {
        let p = Plan::new(&[4, 5, 6], [&[30, 6, 1], &[30, 6, 1]], [0, 0]);
        assert_eq!(p.inner_len(), 120);
        let p = Plan::new(&[4, 5, 6], [&[30, 6, 1], &[0, 6, 1]], [0, 0]);
        assert_eq!(p.inner_len(), 30);
    }
}
