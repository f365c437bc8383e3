//! The layout generator: the same logical values, laid out in every way a tensor can be.
//!
//! Every layout is built the same way: a 1-D storage is filled with guard values
//! ([`crate::host::guard`]), the logical values are written at the positions the layout
//! addresses, and the tensor is `as_strided` over it. So every layout has storage around and
//! between its elements that no op may touch, and every layout — even "contiguous" — has a
//! few guard elements after its last element.

use crate::host::{guard, tensor_from_f64};
use crate::reference::{contiguous_strides, numel, positions, unravel, RefTensor};
use stride_core::{DType, Device, Result, Tensor};

/// Guard elements after the last element of every layout.
pub const TAIL: usize = 3;
/// The offset of [`LayoutKind::Offset`] views.
pub const OFFSET: usize = 5;
/// The stride given to size-0/size-1 dims by [`LayoutKind::UnitStrides`].
pub const UNIT_STRIDE: usize = 7777;

/// The kinds of layout every operand is tried in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayoutKind {
    /// Row-major from offset 0.
    Contiguous,
    /// The last two dims swapped in memory (`x.t()` of a contiguous tensor); needs 2+ dims.
    Transposed,
    /// A dim permutation: 3-D fully reversed, 4-D channels-last (0, 2, 3, 1); needs 3+ dims.
    Permuted,
    /// `[::2]` of a larger buffer in the last dim (and in the first when there are 2+ dims).
    Stepped,
    /// Row-major, starting at storage offset 5.
    Offset,
    /// Broadcast: stride 0 along the first dim of size > 1 (inputs only; as an output it
    /// must be refused as overlapping).
    Expanded,
    /// Row-major, but size-0 and size-1 dims get a huge stride (legal: it is never used).
    UnitStrides,
}

impl LayoutKind {
    pub const ALL: [LayoutKind; 7] = [
        LayoutKind::Contiguous,
        LayoutKind::Transposed,
        LayoutKind::Permuted,
        LayoutKind::Stepped,
        LayoutKind::Offset,
        LayoutKind::Expanded,
        LayoutKind::UnitStrides,
    ];
    pub fn name(self) -> &'static str {
        match self {
            LayoutKind::Contiguous => "contiguous",
            LayoutKind::Transposed => "transposed",
            LayoutKind::Permuted => "permuted",
            LayoutKind::Stepped => "stepped",
            LayoutKind::Offset => "offset",
            LayoutKind::Expanded => "expanded",
            LayoutKind::UnitStrides => "unit-strides",
        }
    }
    pub fn parse(s: &str) -> Option<LayoutKind> {
        LayoutKind::ALL.into_iter().find(|k| k.name() == s)
    }
    /// Whether this kind means something for `shape` (else it would equal contiguous).
    pub fn applies(self, shape: &[usize]) -> bool {
        match self {
            LayoutKind::Contiguous | LayoutKind::Offset => true,
            LayoutKind::Transposed => shape.len() >= 2,
            LayoutKind::Permuted => shape.len() >= 3,
            LayoutKind::Stepped => !shape.is_empty(),
            LayoutKind::Expanded => shape.iter().any(|&n| n > 1),
            LayoutKind::UnitStrides => shape.iter().any(|&n| n <= 1),
        }
    }
}

/// A concrete layout: shape, strides, offset and the length of the storage it lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutSpec {
    /// The kind it was made as (`None` for an explicit, e.g. random, layout).
    pub kind: Option<LayoutKind>,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
    pub storage_len: usize,
}

impl LayoutSpec {
    /// One past the last storage position the view touches (0 when empty).
    pub fn extent(&self) -> usize {
        extent(&self.shape, &self.strides, self.offset)
    }
    /// An explicit layout (random shapes/strides in property tests). The storage gets `TAIL`
    /// guard elements after the view unless `storage_len` asks for more.
    pub fn explicit(
        shape: Vec<usize>,
        strides: Vec<usize>,
        offset: usize,
        storage_len: usize,
    ) -> LayoutSpec {
        let e = extent(&shape, &strides, offset);
        LayoutSpec {
            kind: None,
            storage_len: storage_len.max(e + TAIL),
            shape,
            strides,
            offset,
        }
    }
    pub fn name(&self) -> &'static str {
        self.kind.map_or("explicit", |k| k.name())
    }
    /// Whether two elements share a storage slot (stride 0 on a dim of size > 1, …).
    pub fn overlapping(&self) -> bool {
        !crate::reference::is_non_overlapping(&self.shape, &self.strides)
    }
}

fn extent(shape: &[usize], strides: &[usize], offset: usize) -> usize {
    if numel(shape) == 0 {
        return offset;
    }
    offset
        + shape
            .iter()
            .zip(strides)
            .map(|(&n, &s)| (n - 1) * s)
            .sum::<usize>()
        + 1
}

/// Strides of a dense layout whose dims are ordered `order` (outermost first) in memory, each
/// dim `d` stepping `step[d]` slots of a buffer `step[d]` times larger.
fn ordered_strides(shape: &[usize], order: &[usize], step: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1;
    for &d in order.iter().rev() {
        strides[d] = acc * step[d];
        acc *= (shape[d] * step[d]).max(1);
    }
    strides
}

/// The layout of `kind` for `shape` (`None` when the kind does not apply to it).
pub fn plan(kind: LayoutKind, shape: &[usize]) -> Option<LayoutSpec> {
    if !kind.applies(shape) {
        return None;
    }
    let nd = shape.len();
    let row_major: Vec<usize> = (0..nd).collect();
    let ones = vec![1; nd];
    let (strides, offset) = match kind {
        LayoutKind::Contiguous => (contiguous_strides(shape), 0),
        LayoutKind::Offset => (contiguous_strides(shape), OFFSET),
        LayoutKind::Transposed => {
            let mut order = row_major.clone();
            order.swap(nd - 2, nd - 1);
            (ordered_strides(shape, &order, &ones), 0)
        }
        LayoutKind::Permuted => {
            let order: Vec<usize> = if nd == 4 {
                vec![0, 2, 3, 1]
            } else {
                (0..nd).rev().collect()
            };
            (ordered_strides(shape, &order, &ones), 0)
        }
        LayoutKind::Stepped => {
            let mut step = ones.clone();
            step[nd - 1] = 2;
            step[0] = 2;
            (ordered_strides(shape, &row_major, &step), 0)
        }
        LayoutKind::Expanded => {
            let d = shape.iter().position(|&n| n > 1)?;
            let mut sub = shape.to_vec();
            sub[d] = 1;
            let mut strides = contiguous_strides(&sub);
            strides[d] = 0;
            (strides, 0)
        }
        LayoutKind::UnitStrides => {
            let mut strides = contiguous_strides(shape);
            for d in 0..nd {
                if shape[d] <= 1 {
                    strides[d] = UNIT_STRIDE + d;
                }
            }
            (strides, 0)
        }
    };
    let e = extent(shape, &strides, offset);
    Some(LayoutSpec {
        kind: Some(kind),
        shape: shape.to_vec(),
        strides,
        offset,
        storage_len: e + TAIL,
    })
}

/// Values as an operand of this layout can hold them: an expanded operand repeats the
/// values at index 0 of its broadcast dims (other layouts keep the values as they are).
pub fn project(spec: &LayoutSpec, values: &[f64]) -> Vec<f64> {
    let shape = &spec.shape;
    let zero_dims: Vec<usize> = (0..shape.len())
        .filter(|&d| shape[d] > 1 && spec.strides[d] == 0)
        .collect();
    if zero_dims.is_empty() {
        return values.to_vec();
    }
    let cs = contiguous_strides(shape);
    let mut idx = vec![0; shape.len()];
    (0..values.len())
        .map(|lin| {
            unravel(lin, shape, &mut idx);
            for &d in &zero_dims {
                idx[d] = 0;
            }
            values[idx.iter().zip(&cs).map(|(&i, &s)| i * s).sum::<usize>()]
        })
        .collect()
}

/// A tensor built in a layout, with what the harness needs to check it afterwards.
#[derive(Debug, Clone)]
pub struct Built {
    pub tensor: Tensor,
    pub spec: LayoutSpec,
    /// Logical values (after [`project`]).
    pub values: Vec<f64>,
    /// The whole storage as built (guards included), in storage order.
    pub storage: Vec<f64>,
}

impl Built {
    /// The operand as the reference sees it.
    pub fn to_ref(&self) -> RefTensor {
        RefTensor {
            dtype: self.tensor.dtype(),
            shape: self.spec.shape.clone(),
            values: self.values.clone(),
            strides: self.spec.strides.clone(),
            offset: self.spec.offset,
            storage: self.storage.clone(),
        }
    }
}

/// Builds `values` (logical, row-major, representable in `dtype`) in layout `spec` on
/// `device`, every other storage element holding its guard value.
pub fn build(spec: &LayoutSpec, values: &[f64], dtype: DType, device: &Device) -> Result<Built> {
    assert_eq!(
        values.len(),
        numel(&spec.shape),
        "values do not fill the layout's shape"
    );
    let values = project(spec, values);
    let mut storage: Vec<f64> = (0..spec.storage_len).map(|i| guard(dtype, i)).collect();
    let pos = positions(&spec.shape, &spec.strides, spec.offset);
    for (p, &v) in pos.iter().zip(&values) {
        storage[*p] = v;
    }
    // elements that share a slot (any overlapping layout) hold what was written last
    let values: Vec<f64> = pos.iter().map(|&p| storage[p]).collect();
    let base = tensor_from_f64(&storage, dtype, device)?;
    let tensor = base.as_strided(&spec.shape, &spec.strides, spec.offset)?;
    Ok(Built {
        tensor,
        spec: spec.clone(),
        values,
        storage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn kinds() {
        let t = plan(LayoutKind::Transposed, &[3, 4]).unwrap();
        assert_eq!(t.strides, vec![1, 3]);
        let p = plan(LayoutKind::Permuted, &[2, 3, 4, 5]).unwrap();
        assert_eq!(p.strides, vec![60, 1, 15, 3]);
        let s = plan(LayoutKind::Stepped, &[3, 4]).unwrap();
        assert_eq!(s.strides, vec![16, 2]);
        let e = plan(LayoutKind::Expanded, &[1, 3, 4]).unwrap();
        assert_eq!(e.strides, vec![4, 0, 1]);
        assert!(e.overlapping());
        assert!(plan(LayoutKind::Transposed, &[5]).is_none());
        let u = plan(LayoutKind::UnitStrides, &[3, 1]).unwrap();
        assert_eq!(u.storage_len, 3 + TAIL);
    }
}
