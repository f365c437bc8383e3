//! `Layout`: how a tensor's logical elements map onto its storage (shape + strides + offset).
//!
//! Every view op is a pure function from one layout to another; nothing here touches data.
//! Strides are in elements and never negative (as in PyTorch).

use crate::shape::{broadcast_shapes, checked_numel, wrap_dim, wrap_new_dim};
use crate::{Error, Result};

/// Shape, strides (in elements) and storage offset of a tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

/// Row-major ("C") strides of a shape.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    let mut acc = 1usize;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc = acc.saturating_mul(shape[i].max(1));
    }
    strides
}

impl Layout {
    /// A row-major layout starting at offset 0.
    pub fn contiguous(shape: &[usize]) -> Self {
        Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }
    /// A layout from raw parts; callers check bounds (see [`Layout::as_strided`]).
    pub fn new(shape: Vec<usize>, strides: Vec<usize>, offset: usize) -> Self {
        debug_assert_eq!(shape.len(), strides.len());
        Layout {
            shape,
            strides,
            offset,
        }
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    pub fn offset(&self) -> usize {
        self.offset
    }
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
    pub fn numel(&self) -> usize {
        crate::shape::numel_of(&self.shape)
    }

    /// PyTorch's `is_contiguous()`: row-major, ignoring the strides of size-1 dims.
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut expected = 1;
        for i in (0..self.ndim()).rev() {
            if self.shape[i] != 1 {
                if self.strides[i] != expected {
                    return false;
                }
                expected *= self.shape[i];
            }
        }
        true
    }

    /// One past the largest storage index this layout touches (0 for an empty tensor).
    pub fn storage_extent(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        self.offset
            + self
                .shape
                .iter()
                .zip(&self.strides)
                .map(|(&n, &s)| (n - 1) * s)
                .sum::<usize>()
            + 1
    }

    /// Whether no two logical elements share a storage location (a valid output layout).
    pub fn is_non_overlapping(&self) -> bool {
        if self.numel() <= 1 {
            return true;
        }
        let mut dims: Vec<(usize, usize)> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&n, _)| n > 1)
            .map(|(&n, &s)| (s, n))
            .collect();
        dims.sort_unstable();
        if dims[0].0 == 0 {
            return false; // broadcast
        }
        // the usual proof: each stride jumps past everything the smaller-stride dims reach
        let mut span = 0usize;
        let proven = dims.iter().all(|&(s, n)| {
            let ok = s > span;
            span += s * (n - 1);
            ok
        });
        if proven {
            return true;
        }
        // Interleaved strides (e.g. [2, 3] over a 12 × 2 view: positions 2i + 3j are all
        // distinct) escape that proof; decide exactly by listing the positions.
        let mut pos = Vec::with_capacity(self.numel());
        let mut idx = vec![0usize; dims.len()];
        'outer: loop {
            pos.push(
                idx.iter()
                    .zip(&dims)
                    .map(|(&i, &(s, _))| i * s)
                    .sum::<usize>(),
            );
            for d in 0..dims.len() {
                idx[d] += 1;
                if idx[d] < dims[d].1 {
                    continue 'outer;
                }
                idx[d] = 0;
            }
            break;
        }
        pos.sort_unstable();
        pos.windows(2).all(|w| w[0] != w[1])
    }

    /// Non-overlapping and covering a contiguous block of memory, in some dim order
    /// (PyTorch's `is_non_overlapping_and_dense`).
    pub fn is_non_overlapping_and_dense(&self) -> bool {
        if self.numel() <= 1 {
            return true;
        }
        let mut dims: Vec<(usize, usize)> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&n, _)| n != 1)
            .map(|(&n, &s)| (s, n))
            .collect();
        dims.sort_unstable();
        let mut expected = 1;
        for (s, n) in dims {
            if s != expected {
                return false;
            }
            expected *= n;
        }
        true
    }

    /// Dims from outermost to innermost in memory, as PyTorch orders them for
    /// `preserve_format` (`infer_dense_strides`): an insertion sort by stride in which a
    /// stride-0 (broadcast) dim compares as "ambiguous" and so keeps its row-major place, and
    /// of two dims with equal strides the smaller one goes inside. For a dense layout this is
    /// simply the order of its strides.
    pub fn dim_order_by_stride(&self) -> Vec<usize> {
        let nd = self.ndim();
        // perm[0] is the innermost dim; start from row-major
        let mut perm: Vec<usize> = (0..nd).rev().collect();
        let should_swap = |d0: usize, d1: usize| -> std::cmp::Ordering {
            use std::cmp::Ordering::*;
            let (s0, s1) = (self.strides[d0], self.strides[d1]);
            if s0 == 0 || s1 == 0 {
                return Equal;
            }
            match s0.cmp(&s1) {
                Equal if self.shape[d0] > self.shape[d1] => Greater,
                o => o,
            }
        };
        for i in 1..nd {
            let mut d1 = i;
            for j in 1..=i {
                let d0 = i - j;
                match should_swap(perm[d0], perm[d1]) {
                    std::cmp::Ordering::Greater => {
                        perm.swap(d0, d1);
                        d1 = d0;
                    }
                    std::cmp::Ordering::Less => break,
                    std::cmp::Ordering::Equal => {}
                }
            }
        }
        perm.reverse();
        perm
    }

    /// Strides for a fresh dense tensor that keeps the dim order of this layout
    /// (`preserve_format`: a dense non-overlapping source's own strides; a broadcast or
    /// strided source compacted in its memory order, broadcast dims staying row-major).
    pub fn dense_strides_like(&self) -> Vec<usize> {
        let order = self.dim_order_by_stride();
        let mut strides = vec![0; self.ndim()];
        let mut acc = 1usize;
        for &d in order.iter().rev() {
            strides[d] = acc;
            // saturating: an empty tensor's other dims may multiply past usize
            acc = acc.saturating_mul(self.shape[d].max(1));
        }
        strides
    }

    pub fn transpose(&self, op: &'static str, d0: i64, d1: i64) -> Result<Layout> {
        let (a, b) = (
            wrap_dim(op, d0, self.ndim())?,
            wrap_dim(op, d1, self.ndim())?,
        );
        let mut l = self.clone();
        if self.ndim() > 0 {
            l.shape.swap(a, b);
            l.strides.swap(a, b);
        }
        Ok(l)
    }

    pub fn permute(&self, dims: &[i64]) -> Result<Layout> {
        let op = "permute";
        if dims.len() != self.ndim() {
            return Err(Error::invalid(
                op,
                format!(
                    "got {} dims {dims:?} for a tensor of {} dims; name every dim once",
                    dims.len(),
                    self.ndim()
                ),
            ));
        }
        let dims = crate::shape::wrap_dims(op, dims, self.ndim())?;
        Ok(Layout {
            shape: dims.iter().map(|&d| self.shape[d]).collect(),
            strides: dims.iter().map(|&d| self.strides[d]).collect(),
            offset: self.offset,
        })
    }

    /// PyTorch's `x[start:end:step]` along `dim` (bounds clamped as Python slices are;
    /// `step` must be positive).
    pub fn slice(&self, dim: i64, start: i64, end: i64, step: usize) -> Result<Layout> {
        let op = "slice";
        let d = wrap_dim(op, dim, self.ndim())?;
        if self.ndim() == 0 {
            return Err(Error::invalid(op, "cannot slice a 0-d tensor"));
        }
        if step == 0 {
            return Err(Error::invalid(
                op,
                "step must be positive (negative steps: use flip)",
            ));
        }
        let n = self.shape[d] as i64;
        let clamp = |i: i64| if i < 0 { (i + n).max(0) } else { i.min(n) };
        let (s, e) = (clamp(start), clamp(end));
        let len = if e > s {
            ((e - s) as usize).div_ceil(step)
        } else {
            0
        };
        let mut l = self.clone();
        if len > 0 {
            l.offset += s as usize * self.strides[d];
        }
        l.shape[d] = len;
        // stride × step only overflows for a huge step, which leaves at most one element, whose
        // stride is never used: keep the old one then instead of overflowing
        l.strides[d] = self.strides[d].checked_mul(step).unwrap_or(self.strides[d]);
        Ok(l)
    }

    /// `narrow(dim, start, length)`: strict bounds (an error, not clamping).
    pub fn narrow(&self, dim: i64, start: i64, length: usize) -> Result<Layout> {
        let op = "narrow";
        let d = wrap_dim(op, dim, self.ndim())?;
        if self.ndim() == 0 {
            return Err(Error::invalid(op, "cannot narrow a 0-d tensor"));
        }
        let n = self.shape[d];
        let s = if start < 0 { start + n as i64 } else { start };
        if s < 0 || s as usize > n || length > n - s as usize {
            return Err(Error::invalid(
                op,
                format!("start {start} + length {length} exceeds dim {d} of size {n}"),
            ));
        }
        let mut l = self.clone();
        if length > 0 {
            l.offset += s as usize * self.strides[d];
        }
        l.shape[d] = length;
        Ok(l)
    }

    /// `select(dim, index)`: integer indexing that drops the dim.
    pub fn select(&self, dim: i64, index: i64) -> Result<Layout> {
        let op = "select";
        if self.ndim() == 0 {
            return Err(Error::invalid(op, "cannot select from a 0-d tensor"));
        }
        let d = wrap_dim(op, dim, self.ndim())?;
        let n = self.shape[d];
        let i = if index < 0 { index + n as i64 } else { index };
        if i < 0 || i as usize >= n {
            return Err(Error::IndexOutOfRange {
                op,
                index,
                dim: d,
                size: n,
            });
        }
        let mut l = self.clone();
        l.offset += i as usize * self.strides[d];
        l.shape.remove(d);
        l.strides.remove(d);
        Ok(l)
    }

    /// `expand`/`broadcast_to`: new leading dims and size-1 dims become stride 0. In `sizes`,
    /// `-1` keeps a dim's size (PyTorch's `expand`).
    pub fn expand(&self, sizes: &[i64]) -> Result<Layout> {
        let op = "expand";
        if sizes.len() < self.ndim() {
            return Err(Error::invalid(
                op,
                format!(
                    "target {sizes:?} has fewer dims than the tensor's shape {:?}",
                    self.shape
                ),
            ));
        }
        let lead = sizes.len() - self.ndim();
        let mut shape = vec![0; sizes.len()];
        let mut strides = vec![0; sizes.len()];
        for i in 0..sizes.len() {
            let want = sizes[i];
            if i < lead {
                if want < 0 {
                    return Err(Error::invalid(
                        op,
                        format!("size -1 is not allowed for a new leading dim ({sizes:?})"),
                    ));
                }
                shape[i] = want as usize;
                strides[i] = 0;
                continue;
            }
            let (have, st) = (self.shape[i - lead], self.strides[i - lead]);
            if want == -1 || want as usize == have {
                shape[i] = have;
                strides[i] = st;
            } else if have == 1 && want >= 0 {
                shape[i] = want as usize;
                strides[i] = 0;
            } else {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: self.shape.clone(),
                    rhs: sizes.iter().map(|&s| s.max(0) as usize).collect(),
                    why: format!("cannot be expanded: dim {i} has size {have}, which is not 1"),
                });
            }
        }
        checked_numel(op, &shape)?;
        Ok(Layout {
            shape,
            strides,
            offset: self.offset,
        })
    }

    /// Broadcast this layout to `shape` (which must be a broadcast of it).
    pub fn broadcast_to(&self, op: &'static str, shape: &[usize]) -> Result<Layout> {
        let b = broadcast_shapes(op, &self.shape, shape)?;
        if b != shape {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape.clone(),
                rhs: shape.to_vec(),
                why: "cannot be broadcast to the second shape".into(),
            });
        }
        self.expand(&shape.iter().map(|&s| s as i64).collect::<Vec<_>>())
    }

    pub fn squeeze(&self, dim: Option<i64>) -> Result<Layout> {
        let mut l = self.clone();
        match dim {
            None => {
                let keep: Vec<usize> = (0..self.ndim()).filter(|&i| self.shape[i] != 1).collect();
                l.shape = keep.iter().map(|&i| self.shape[i]).collect();
                l.strides = keep.iter().map(|&i| self.strides[i]).collect();
            }
            Some(d) => {
                let d = wrap_dim("squeeze", d, self.ndim())?;
                if self.ndim() > 0 && self.shape[d] == 1 {
                    l.shape.remove(d);
                    l.strides.remove(d);
                }
            }
        }
        Ok(l)
    }

    pub fn unsqueeze(&self, dim: i64) -> Result<Layout> {
        let d = wrap_new_dim("unsqueeze", dim, self.ndim())?;
        let mut l = self.clone();
        let st = if d < self.ndim() {
            self.strides[d] * self.shape[d].max(1)
        } else {
            1
        };
        l.shape.insert(d, 1);
        l.strides.insert(d, st);
        Ok(l)
    }

    /// `diagonal(offset, dim1, dim2)`: the diagonal becomes the last dim.
    pub fn diagonal(&self, offset: i64, d1: i64, d2: i64) -> Result<Layout> {
        let op = "diagonal";
        if self.ndim() < 2 {
            return Err(Error::invalid(
                op,
                format!("needs at least 2 dims, got shape {:?}", self.shape),
            ));
        }
        let (a, b) = (
            wrap_dim(op, d1, self.ndim())?,
            wrap_dim(op, d2, self.ndim())?,
        );
        if a == b {
            return Err(Error::invalid(
                op,
                format!("dim1 and dim2 must differ, both are {a}"),
            ));
        }
        let (na, nb) = (self.shape[a] as i64, self.shape[b] as i64);
        let len = if offset >= 0 {
            (na).min(nb - offset).max(0)
        } else {
            (na + offset).min(nb).max(0)
        } as usize;
        let mut l = self.clone();
        if len > 0 {
            l.offset += if offset >= 0 {
                offset as usize * self.strides[b]
            } else {
                (-offset) as usize * self.strides[a]
            };
        }
        // only a diagonal of 2+ elements uses its stride, and then both strides are bounded by
        // the storage; for 0 or 1 elements the sum of two (unused) huge strides must not overflow
        let diag_stride = self.strides[a].saturating_add(self.strides[b]);
        let (hi, lo) = if a > b { (a, b) } else { (b, a) };
        l.shape.remove(hi);
        l.strides.remove(hi);
        l.shape.remove(lo);
        l.strides.remove(lo);
        l.shape.push(len);
        l.strides.push(diag_stride);
        Ok(l)
    }

    /// `as_strided`: any layout, checked against the storage's length so no view can reach
    /// outside its storage.
    pub fn as_strided(
        shape: &[usize],
        strides: &[usize],
        offset: usize,
        storage_len: usize,
    ) -> Result<Layout> {
        let op = "as_strided";
        if shape.len() != strides.len() {
            return Err(Error::invalid(
                op,
                format!("shape {shape:?} and strides {strides:?} differ in length"),
            ));
        }
        checked_numel(op, shape)?;
        let mut extent = offset as u128;
        if shape.iter().all(|&n| n > 0) {
            for (&n, &s) in shape.iter().zip(strides) {
                // saturating: many huge dims could pass u128 (and then exceed any storage)
                extent = extent.saturating_add((n as u128 - 1).saturating_mul(s as u128));
            }
            extent = extent.saturating_add(1);
        } else {
            extent = 0;
        }
        if extent > storage_len as u128 {
            return Err(Error::invalid(
                op,
                format!(
                    "shape {shape:?}, strides {strides:?} and offset {offset} reach storage index {} but the storage has {storage_len} elements",
                    extent - 1
                ),
            ));
        }
        Ok(Layout {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
        })
    }

    /// The strides a `view` to `new_shape` would have, or `None` if the layout can't express
    /// it without a copy (PyTorch's `computeStride`).
    pub fn view_strides(&self, new_shape: &[usize]) -> Option<Vec<usize>> {
        if self.is_contiguous() {
            return Some(contiguous_strides(new_shape));
        }
        let (old_shape, old_strides) = (&self.shape, &self.strides);
        if self.numel() == 0 {
            return Some(contiguous_strides(new_shape));
        }
        let mut new_strides = vec![0usize; new_shape.len()];
        let mut view_d = new_shape.len() as isize - 1;
        let mut chunk_base_stride = *old_strides.last()?;
        let mut tensor_numel = 1usize;
        let mut view_numel = 1usize;
        for tensor_d in (0..old_shape.len()).rev() {
            tensor_numel *= old_shape[tensor_d];
            if tensor_d == 0
                || (old_shape[tensor_d - 1] != 1
                    && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)
            {
                while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1)
                {
                    new_strides[view_d as usize] = view_numel * chunk_base_stride;
                    view_numel *= new_shape[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base_stride = old_strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        Some(new_strides)
    }

    pub(crate) fn with_shape_strides(&self, shape: Vec<usize>, strides: Vec<usize>) -> Layout {
        Layout {
            shape,
            strides,
            offset: self.offset,
        }
    }
}

/// Resolves a shape with at most one `-1` against a number of elements.
pub fn infer_shape(op: &'static str, shape: &[i64], numel: usize) -> Result<Vec<usize>> {
    let mut infer = None;
    let mut known = 1usize;
    for (i, &s) in shape.iter().enumerate() {
        if s == -1 {
            if infer.is_some() {
                return Err(Error::invalid(
                    op,
                    format!("only one dim may be -1, got {shape:?}"),
                ));
            }
            infer = Some(i);
        } else if s < 0 {
            return Err(Error::invalid(op, format!("invalid size {s} in {shape:?}")));
        } else {
            known = known
                .checked_mul(s as usize)
                .ok_or_else(|| Error::invalid(op, format!("shape {shape:?} overflows")))?;
        }
    }
    let mut out: Vec<usize> = shape.iter().map(|&s| s.max(0) as usize).collect();
    match infer {
        Some(i) => {
            if known == 0 || numel % known != 0 {
                return Err(Error::invalid(
                    op,
                    format!("shape {shape:?} is invalid for a tensor of {numel} elements"),
                ));
            }
            out[i] = numel / known;
        }
        None => {
            if known != numel {
                return Err(Error::invalid(
                    op,
                    format!("shape {shape:?} is invalid for a tensor of {numel} elements"),
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn contiguity_and_views() {
        let l = Layout::contiguous(&[3, 4]);
        assert_eq!(l.strides(), &[4, 1]);
        let t = l.transpose("t", 0, 1).unwrap();
        assert_eq!(t.strides(), &[1, 4]);
        assert!(!t.is_contiguous());
        assert!(t.view_strides(&[12]).is_none());
        assert!(t.is_non_overlapping_and_dense());
        assert_eq!(t.dense_strides_like(), vec![1, 4]);
        // a broadcast dim keeps its row-major place (PyTorch's infer_dense_strides), it is not
        // moved inside because its stride is 0
        let e = Layout::contiguous(&[1, 4]).expand(&[3, 4]).unwrap();
        assert_eq!(e.dense_strides_like(), vec![4, 1]);
        let e = Layout::new(vec![2, 3, 4], vec![0, 1, 3], 0); // broadcast dim 0 of a transposed (3, 4)
        assert_eq!(e.dense_strides_like(), vec![12, 1, 3]);
        let e = Layout::contiguous(&[1, 4]).expand(&[3, 4]).unwrap();
        assert!(!e.is_non_overlapping());
        let s = l.slice(1, 0, 4, 2).unwrap();
        assert_eq!(
            (s.shape(), s.strides()),
            (&[3usize, 2][..], &[4usize, 2][..])
        );
        assert!(s.is_non_overlapping() && !s.is_non_overlapping_and_dense());
    }
    #[test]
    fn view_of_split_dims() {
        // a (4, 6) slice of an (4, 12) tensor can be viewed as (4, 2, 3) but not as (24,)
        let l = Layout::contiguous(&[4, 12]).narrow(1, 0, 6).unwrap();
        assert_eq!(l.view_strides(&[4, 2, 3]), Some(vec![12, 3, 1]));
        assert_eq!(l.view_strides(&[24]), None);
    }
    #[test]
    fn diagonal_and_as_strided() {
        let l = Layout::contiguous(&[3, 4]);
        let d = l.diagonal(1, 0, 1).unwrap();
        assert_eq!(
            (d.shape(), d.strides(), d.offset()),
            (&[3usize][..], &[5usize][..], 1)
        );
        assert!(Layout::as_strided(&[2, 2], &[1, 2], 0, 4).is_ok());
        assert!(Layout::as_strided(&[2, 2], &[1, 2], 1, 4).is_err());
    }
}
