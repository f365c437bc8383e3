//! Shapes, dim wrapping and broadcasting.

use crate::{Error, Result};

/// A tensor's shape: the size of each dim. Converts from arrays, slices, `Vec`s and tuples.
///
/// ```
/// use stride_core::Shape;
/// assert_eq!(Shape::from((2, 3)).dims(), &[2, 3]);
/// assert_eq!(Shape::from([4usize; 0]).numel(), 1); // a 0-d tensor holds one element
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<usize>);

impl Shape {
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    pub fn ndim(&self) -> usize {
        self.0.len()
    }
    pub fn numel(&self) -> usize {
        numel_of(&self.0)
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Self {
        Shape(v)
    }
}
impl From<&Vec<usize>> for Shape {
    fn from(v: &Vec<usize>) -> Self {
        Shape(v.clone())
    }
}
impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Self {
        Shape(v.to_vec())
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Self {
        Shape(v.to_vec())
    }
}
impl<const N: usize> From<&[usize; N]> for Shape {
    fn from(v: &[usize; N]) -> Self {
        Shape(v.to_vec())
    }
}
impl From<()> for Shape {
    fn from(_: ()) -> Self {
        Shape(vec![])
    }
}
impl From<usize> for Shape {
    fn from(v: usize) -> Self {
        Shape(vec![v])
    }
}
impl From<&Shape> for Shape {
    fn from(v: &Shape) -> Self {
        v.clone()
    }
}
macro_rules! tuple_shape {
    ($t:ty, ($($n:ident),+)) => {
        impl From<$t> for Shape {
            fn from(($($n,)+): $t) -> Self {
                Shape(vec![$($n),+])
            }
        }
    };
}
tuple_shape!((usize,), (a));
tuple_shape!((usize, usize), (a, b));
tuple_shape!((usize, usize, usize), (a, b, c));
tuple_shape!((usize, usize, usize, usize), (a, b, c, d));
tuple_shape!((usize, usize, usize, usize, usize), (a, b, c, d, e));
tuple_shape!(
    (usize, usize, usize, usize, usize, usize),
    (a, b, c, d, e, f)
);

/// Wraps a possibly negative dim into `0..ndim`. A 0-d tensor accepts `0` and `-1`, as in
/// PyTorch.
pub fn wrap_dim(op: &'static str, dim: i64, ndim: usize) -> Result<usize> {
    let n = ndim.max(1) as i64;
    if dim < -n || dim >= n {
        return Err(Error::DimOutOfRange { op, dim, ndim });
    }
    Ok(if dim < 0 {
        (dim + n) as usize
    } else {
        dim as usize
    })
}

/// Wraps the position of a dim to insert into a tensor of `ndim` dims (`unsqueeze`, `stack`):
/// `ndim + 1` positions, `-(ndim + 1)..=ndim`. Its own error, because [`wrap_dim`]'s would
/// name a tensor of `ndim + 1` dims.
pub fn wrap_new_dim(op: &'static str, dim: i64, ndim: usize) -> Result<usize> {
    let n = ndim as i64 + 1;
    if dim < -n || dim >= n {
        return Err(Error::invalid(
            op,
            format!(
                "dim {dim} is out of range for inserting a dim into a tensor of {ndim} dims (valid: {}..={})",
                -n,
                n - 1
            ),
        ));
    }
    Ok(if dim < 0 {
        (dim + n) as usize
    } else {
        dim as usize
    })
}

/// Wraps a list of dims and checks they are distinct.
pub fn wrap_dims(op: &'static str, dims: &[i64], ndim: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let w = wrap_dim(op, d, ndim)?;
        if out.contains(&w) {
            return Err(Error::invalid(
                op,
                format!("dim {d} appears more than once in {dims:?}"),
            ));
        }
        out.push(w);
    }
    Ok(out)
}

/// The broadcast of two shapes (NumPy/PyTorch rules: align trailing dims; sizes must be equal
/// or one of them 1).
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i < n - a.len() {
            1
        } else {
            a[i - (n - a.len())]
        };
        let db = if i < n - b.len() {
            1
        } else {
            b[i - (n - b.len())]
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::ShapeMismatch {
                op,
                lhs: a.to_vec(),
                rhs: b.to_vec(),
                why: format!(
                    "cannot be broadcast: dim {} (from the right) has sizes {da} and {db}; sizes must be equal or 1",
                    n - i
                ),
            });
        };
    }
    Ok(out)
}

/// The product of sizes, 0 when any is 0 (whatever the others: `[0, 2^40, 2^40]` is empty).
/// Every tensor's shape passed [`checked_numel`], so the product never overflows; it
/// saturates all the same rather than panic.
pub(crate) fn numel_of(shape: &[usize]) -> usize {
    let mut n = 1usize;
    for &d in shape {
        match n.checked_mul(d) {
            Some(m) => n = m,
            None => return if shape.contains(&0) { 0 } else { usize::MAX },
        }
    }
    n
}

/// Checked product of sizes, at most `isize::MAX`: an argument error ([`Error::Invalid`]) instead of overflowing on
/// absurd shapes. (A shape that can be counted but not allocated is `Error::OutOfMemory`,
/// from the allocation.)
pub fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    if shape.contains(&0) {
        return Ok(0); // however large the other dims
    }
    // isize::MAX, not usize::MAX: element offsets and strides are isize, and PyTorch's
    // numel is an i64
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::invalid(
                op,
                format!("shape {shape:?} has more than isize::MAX elements (the product of its sizes overflows); no tensor, not even a view, can have it: check the sizes"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn broadcast_facts() {
        assert_eq!(
            broadcast_shapes("add", &[8, 1, 4], &[3, 4]).unwrap(),
            vec![8, 3, 4]
        );
        assert!(broadcast_shapes("add", &[3, 4], &[2, 4]).is_err());
        assert_eq!(broadcast_shapes("add", &[], &[2, 1]).unwrap(), vec![2, 1]);
        assert_eq!(
            broadcast_shapes("add", &[0, 1], &[1, 5]).unwrap(),
            vec![0, 5]
        );
    }
    #[test]
    fn dims_wrap() {
        assert_eq!(wrap_dim("x", -1, 3).unwrap(), 2);
        assert_eq!(wrap_dim("x", 0, 0).unwrap(), 0);
        assert_eq!(wrap_dim("x", -1, 0).unwrap(), 0);
        assert!(wrap_dim("x", 3, 3).is_err());
        assert!(wrap_dim("x", -4, 3).is_err());
        assert!(wrap_dims("x", &[0, -3], 3).is_err());
    }
}
