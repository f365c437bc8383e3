//! Shared helpers of the index and sort tests: tensors with given logical values in many
//! layouts (with guard values around them), snapshots for error paths, and the stride-check
//! registry's reference of an op ([`registry_ref`]) — the one reference implementation.
#![allow(dead_code)]

use stride_check::reference::{contiguous_strides, unravel, RefArg, RefCtx, RefTensor};
use stride_check::registry::{Params, Sample};
use stride_core::{DType, Error, Tensor};

/// What the stride-check registry entry `name` says the op returns for contiguous tensor
/// operands `(values, shape, dtype)` and `params` (the entry documents which fields it
/// reads): the result's logical values in row-major order. Panics if the reference refuses.
pub fn registry_ref(name: &str, args: &[(&[f64], &[usize], DType)], params: Params) -> Vec<f64> {
    let op =
        stride_check::registry::find(name).unwrap_or_else(|| panic!("no registry entry {name}"));
    let sample = Sample::new(
        args.iter()
            .map(|(v, s, d)| Sample::tensor(*d, s.to_vec(), v.to_vec()))
            .collect(),
        params,
    );
    let e = op.expected(&sample);
    let tensors: Vec<RefTensor> = args
        .iter()
        .map(|(v, s, d)| RefTensor {
            dtype: *d,
            shape: s.to_vec(),
            values: v.to_vec(),
            strides: contiguous_strides(s),
            offset: 0,
            storage: v.to_vec(),
        })
        .collect();
    let rargs: Vec<RefArg> = tensors.iter().map(RefArg::Tensor).collect();
    let ctx = RefCtx {
        compute: e.compute,
        result: e.result,
        arg_compute: e.arg_compute.clone(),
        params: &sample.params,
    };
    match (op.reference)(&ctx, &rargs) {
        Ok(r) => r.values,
        Err(err) => panic!("the {name} reference refused {:?}: {err}", sample.params),
    }
}

/// [`registry_ref`] of an op with an index result.
pub fn registry_ref_i64(
    name: &str,
    args: &[(&[f64], &[usize], DType)],
    params: Params,
) -> Vec<i64> {
    registry_ref(name, args, params)
        .into_iter()
        .map(|v| v as i64)
        .collect()
}

/// Guard value written around every view (fits every dtype; `true` for bool).
pub const GUARD: f64 = 77.0;

/// Row-major strides.
pub fn contig(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1].max(1);
    }
    s
}
/// Column-major strides (a transposed/permuted layout for ndim ≥ 2).
pub fn fortran(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in 1..shape.len() {
        s[d] = s[d - 1] * shape[d - 1].max(1);
    }
    s
}

/// A tensor with logical values `vals` (row-major) laid out with `strides` and `offset` in a
/// larger buffer whose other elements hold [`GUARD`].
pub struct Laid {
    pub name: &'static str,
    pub t: Tensor,
    pub base: Tensor,
    /// storage positions covered by the view
    pub covered: Vec<usize>,
}

impl Laid {
    /// Checks that no element outside the view changed.
    pub fn guards_intact(&self) {
        let b = self.base.to_f64_vec().unwrap();
        let guard = if self.base.dtype() == DType::Bool {
            1.0
        } else {
            GUARD
        };
        for (i, &v) in b.iter().enumerate() {
            if !self.covered.contains(&i) {
                assert_eq!(
                    v, guard,
                    "{}: storage element {i} outside the view changed",
                    self.name
                );
            }
        }
    }
}

pub fn lay(
    name: &'static str,
    vals: &[f64],
    shape: &[usize],
    strides: &[usize],
    offset: usize,
    dtype: DType,
) -> Laid {
    let n: usize = shape.iter().product();
    assert_eq!(vals.len(), n);
    let extent = if n == 0 {
        0
    } else {
        shape
            .iter()
            .zip(strides)
            .map(|(&a, &s)| (a - 1) * s)
            .sum::<usize>()
            + 1
    };
    let len = offset + extent + 2;
    let mut buf = vec![GUARD; len];
    let mut covered = vec![];
    let mut c = vec![0; shape.len()];
    for (i, &v) in vals.iter().enumerate() {
        unravel(i, shape, &mut c);
        let p = offset + c.iter().zip(strides).map(|(&a, &s)| a * s).sum::<usize>();
        buf[p] = v;
        covered.push(p);
    }
    let base = Tensor::from_vec(buf, [len])
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    let t = base.as_strided(shape, strides, offset).unwrap();
    Laid {
        name,
        t,
        base,
        covered,
    }
}

/// The same logical values in every layout the tests cover: contiguous, offset, stepped
/// (every dim strided by 2), transposed (column-major), transposed + stepped + offset.
pub fn layouts(vals: &[f64], shape: &[usize], dtype: DType) -> Vec<Laid> {
    let c = contig(shape);
    let f = fortran(shape);
    let mut v = vec![
        lay("contiguous", vals, shape, &c, 0, dtype),
        lay("offset", vals, shape, &c, 5, dtype),
        lay(
            "stepped",
            vals,
            shape,
            &c.iter().map(|s| s * 2).collect::<Vec<_>>(),
            0,
            dtype,
        ),
    ];
    if shape.len() >= 2 {
        v.push(lay("transposed", vals, shape, &f, 0, dtype));
        v.push(lay(
            "transposed_stepped_offset",
            vals,
            shape,
            &f.iter().map(|s| s * 3).collect::<Vec<_>>(),
            2,
            dtype,
        ));
    }
    v
}

pub fn tensor(vals: &[f64], shape: &[usize], dtype: DType) -> Tensor {
    Tensor::from_vec(vals.to_vec(), shape.to_vec())
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

pub fn ints(vals: &[i64], shape: &[usize], dtype: DType) -> Tensor {
    Tensor::from_vec(vals.to_vec(), shape.to_vec())
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

pub fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}
pub fn i64s(t: &Tensor) -> Vec<i64> {
    assert_eq!(t.dtype(), DType::I64, "indices are i64");
    t.to_vec::<i64>().unwrap()
}

/// Bitwise-ish equality of f64 vectors (NaN == NaN, -0 != 0 is not checked).
pub fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
}

#[macro_export]
macro_rules! assert_same {
    ($a:expr, $b:expr, $($ctx:tt)*) => {{
        let (a, b) = (&$a, &$b);
        assert!($crate::idx_common::same(a, b), "{}: got {:?}, expected {:?}", format!($($ctx)*), a, b);
    }};
}

/// Deterministic pseudo-random numbers (SplitMix64).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Small integers in `lo..hi` as f64 (exact in every dtype).
    pub fn small(&mut self, n: usize, lo: i64, hi: i64) -> Vec<f64> {
        (0..n)
            .map(|_| (lo + self.below((hi - lo) as usize) as i64) as f64)
            .collect()
    }
}

/// A snapshot of everything a failed op must leave unchanged.
#[derive(Debug, PartialEq)]
pub struct Snap(Vec<f64>, Vec<usize>, Vec<usize>, usize, u64, DType);
pub fn snap(t: &Tensor) -> Snap {
    Snap(
        t.to_f64_vec().unwrap(),
        t.shape().to_vec(),
        t.stride().to_vec(),
        t.storage_offset(),
        t.version(),
        t.dtype(),
    )
}
fn snaps_equal(a: &[Snap], b: &[Snap]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            same(&x.0, &y.0) && x.1 == y.1 && x.2 == y.2 && x.3 == y.3 && x.4 == y.4 && x.5 == y.5
        })
}

/// Runs `f`, expects an error mentioning every needle, and checks every tensor is unchanged.
pub fn expect_err<T: std::fmt::Debug>(
    tensors: &[&Tensor],
    needles: &[&str],
    f: impl FnOnce() -> Result<T, Error>,
) -> Error {
    let before: Vec<Snap> = tensors.iter().map(|t| snap(t)).collect();
    let err = f().expect_err("expected an error");
    let msg = err.to_string();
    for n in needles {
        assert!(msg.contains(n), "error {msg:?} should mention {n:?}");
    }
    let after: Vec<Snap> = tensors.iter().map(|t| snap(t)).collect();
    assert!(
        snaps_equal(&before, &after),
        "a failed op changed an operand ({msg}):\n{before:?}\n{after:?}"
    );
    err
}

pub const INDEX_DTYPES: [DType; 3] = [DType::I64, DType::I32, DType::U32];
/// Value dtypes the tests sweep (bool separately where an op allows it).
pub const VALUE_DTYPES: [DType; 8] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
    DType::I8,
];
