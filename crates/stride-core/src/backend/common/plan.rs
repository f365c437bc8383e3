//! The geometry every backend walks a strided op with.
//!
//! A [`Plan`] takes the common shape of N operands (operand 0 is the output) and each
//! operand's strides, drops size-1 dims, orders dims so the output's smallest stride is
//! innermost, and merges dims that are contiguous in every operand. The CPU walks it as runs
//! along the innermost dim ([`Plan::for_each_run`]; its parallel and tiled walks live in
//! `cpu::strided`); the CUDA backend hands the merged shape and strides ([`Plan::parts`]) to its
//! kernels, so both backends address operands through one geometry.

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
        if shape.contains(&0) {
            // nothing to visit; an empty shape's other dims (and strides) may be absurd
            return Plan {
                shape: vec![0],
                strides: std::array::from_fn(|_| vec![0]),
                offsets: offsets.map(|o| o as isize),
                numel: 0,
            };
        }
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

    /// The merged shape, outermost dim first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Each operand's strides over [`Plan::shape`].
    pub fn strides(&self) -> &[Vec<isize>; N] {
        &self.strides
    }
    pub fn numel(&self) -> usize {
        self.numel
    }
    /// The merged shape (outermost first), each operand's strides over it, and offsets: what
    /// the CUDA backend hands its kernels, so both backends walk the same geometry.
    pub fn parts(&self) -> (&[usize], &[Vec<isize>; N], [isize; N]) {
        (&self.shape, &self.strides, self.offsets)
    }
    /// Strides of the innermost dim, per operand.
    pub fn inner_strides(&self) -> [isize; N] {
        std::array::from_fn(|k| *self.strides[k].last().unwrap())
    }
    #[cfg(test)]
    pub fn inner_len(&self) -> usize {
        *self.shape.last().unwrap()
    }

    /// The plan as `rows` runs of `len` positions when it has at most two dims: `(rows, len,
    /// the per-operand strides between runs)`, the runs starting at the plan's offsets. Kernels
    /// whose runs are independent (row copies) loop over them directly.
    pub fn as_rows(&self) -> Option<(usize, usize, [isize; N])> {
        match self.shape.len() {
            1 => Some((1, self.shape[0], [0; N])),
            2 => Some((
                self.shape[0],
                self.shape[1],
                std::array::from_fn(|k| self.strides[k][0]),
            )),
            _ => None,
        }
    }
    /// The per-operand offsets of the first position.
    pub fn offsets(&self) -> [isize; N] {
        self.offsets
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
}
