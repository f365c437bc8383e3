//! The reference side: plain `Vec<f64>` + shape, plain loops over logical indices. Nothing
//! here calls a stride op, so a bug in stride's strided engine cannot hide in its own test.
//!
//! Besides the elementwise driver this module holds the independent oracles the view and
//! copy entries need: storage positions of a layout, "can this be viewed as that shape",
//! contiguity and density by brute force, and PyTorch's `preserve_format` strides.

use crate::host::{store, wrap_int};
use crate::registry::Params;
use std::cmp::Ordering;
use stride_core::{DType, Scalar};

/// One tensor operand as the reference sees it.
#[derive(Debug, Clone)]
pub struct RefTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Logical values in row-major order (as stored in `dtype`).
    pub values: Vec<f64>,
    /// The operand's layout (for view ops, which are about layouts).
    pub strides: Vec<usize>,
    pub offset: usize,
    /// The whole storage the operand views, in storage order (for `as_strided`).
    pub storage: Vec<f64>,
}

/// An operand: a tensor or a host scalar.
#[derive(Debug, Clone, Copy)]
pub enum RefArg<'a> {
    Tensor(&'a RefTensor),
    Scalar(Scalar),
}

impl<'a> RefArg<'a> {
    /// The tensor (registry entries know which operands are tensors).
    pub fn t(&self) -> &'a RefTensor {
        match self {
            RefArg::Tensor(t) => t,
            RefArg::Scalar(s) => panic!("reference expected a tensor operand, got scalar {s:?}"),
        }
    }
}

/// What the reference says the op must produce.
#[derive(Debug, Clone, PartialEq)]
pub struct RefOut {
    pub shape: Vec<usize>,
    /// Exact (f64) values in row-major order; the runner rounds them to the result dtype.
    pub values: Vec<f64>,
    /// Whether the functional result must share storage with operand `shares_operand` (0
    /// unless [`RefOut::view_of`] says otherwise: views) or must not share with any operand.
    pub shares_input: bool,
    pub shares_operand: usize,
    /// Strides the result must have (dims of size > 1 only), when the op defines them.
    pub strides: Option<Vec<usize>>,
    /// Multiplies the entry's tolerance for this case (reductions and matrix products: a
    /// function of the reduction length, so long sums get proportionally more room).
    pub tol_scale: f64,
    /// Per element (row-major), a bound on the error of the computation in the accumulation
    /// dtype before the final rounding to the result dtype ([`crate::tol::acc_unit`]), from
    /// an error analysis stated where it is computed. When set, it replaces the entry's
    /// [`crate::registry::OpInfo::tol`] for float results: the runner accepts
    /// `|got − exact| ≤ acc + ½ ulp_out` ([`crate::tol::bound`]).
    pub acc_error: Option<Vec<f64>>,
}

impl RefOut {
    pub fn new(shape: Vec<usize>, values: Vec<f64>) -> RefOut {
        RefOut {
            shape,
            values,
            shares_input: false,
            shares_operand: 0,
            strides: None,
            tol_scale: 1.0,
            acc_error: None,
        }
    }
    /// Sets the per-element accumulation-error bound (see [`RefOut::acc_error`]); zeros
    /// mean "exact up to the final rounding".
    pub fn with_acc_error(mut self, acc: Vec<f64>) -> RefOut {
        debug_assert_eq!(acc.len(), self.values.len());
        self.acc_error = Some(acc);
        self
    }
    /// Scales the tolerance of this case by `k` (see [`RefOut::tol_scale`]).
    pub fn tol_scaled(mut self, k: f64) -> RefOut {
        self.tol_scale = k.max(1.0);
        self
    }
    /// Marks the result as a view of operand 0.
    pub fn view(mut self, shares: bool) -> RefOut {
        self.shares_input = shares;
        self
    }
    /// Marks the result as a view of operand `i` (`meshgrid`'s outputs view their inputs).
    pub fn view_of(mut self, i: usize) -> RefOut {
        self.shares_input = true;
        self.shares_operand = i;
        self
    }
    pub fn with_strides(mut self, strides: Vec<usize>) -> RefOut {
        self.strides = Some(strides);
        self
    }
}

/// Dtypes of the case at hand, decided by the registry's dtype rule.
#[derive(Debug, Clone)]
pub struct RefCtx<'a> {
    /// The dtype the op computes in (operands are cast to it before the reference sees
    /// them, exactly as the frontend does).
    pub compute: DType,
    /// The op's result dtype.
    pub result: DType,
    /// Per operand, the dtype it is cast to before computing (a `where` condition stays bool).
    pub arg_compute: Vec<DType>,
    pub params: &'a Params,
}

// ----- index helpers ----------------------------------------------------------------------

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![0; shape.len()];
    let mut acc = 1usize;
    for d in (0..shape.len()).rev() {
        s[d] = acc;
        acc *= shape[d].max(1);
    }
    s
}

/// Multi-index of a row-major linear index.
pub fn unravel(mut lin: usize, shape: &[usize], idx: &mut [usize]) {
    for d in (0..shape.len()).rev() {
        let n = shape[d].max(1);
        idx[d] = lin % n;
        lin /= n;
    }
}

/// Row-major linear index of a multi-index.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

/// The storage position of every logical element, in row-major order.
pub fn positions(shape: &[usize], strides: &[usize], offset: usize) -> Vec<usize> {
    let n = numel(shape);
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0; shape.len()];
    let mut p = offset;
    for _ in 0..n {
        out.push(p);
        // odometer: step the last dim, carrying into the outer ones
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            p += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            p -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
    out
}

/// The broadcast of several shapes, or `None`.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let nd = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; nd];
    for s in shapes {
        for (i, &n) in s.iter().enumerate() {
            let o = &mut out[nd - s.len() + i];
            if *o == 1 {
                *o = n;
            } else if n != 1 && n != *o {
                return None;
            }
        }
    }
    Some(out)
}

/// PyTorch's dim wrapping (a 0-d tensor accepts 0 and -1).
pub fn wrap_dim(dim: i64, ndim: usize) -> Option<usize> {
    let n = ndim.max(1) as i64;
    if dim < -n || dim >= n {
        None
    } else {
        Some(if dim < 0 {
            (dim + n) as usize
        } else {
            dim as usize
        })
    }
}

/// Values of an output of `out_shape` where each output index reads the input at
/// `map(out_index)` (the reference of every view op).
pub fn gather(
    input: &RefTensor,
    out_shape: &[usize],
    map: impl Fn(&[usize]) -> Vec<usize>,
) -> Vec<f64> {
    let mut idx = vec![0; out_shape.len()];
    (0..numel(out_shape))
        .map(|lin| {
            unravel(lin, out_shape, &mut idx);
            input.values[ravel(&map(&idx), &input.shape)]
        })
        .collect()
}

// ----- layout oracles (brute force, independent of stride's Layout) ------------------------

/// Row-major with nothing between elements, ignoring size-1 dims (PyTorch's `is_contiguous`).
pub fn is_contiguous(shape: &[usize], strides: &[usize]) -> bool {
    if numel(shape) == 0 {
        return true;
    }
    let mut expected = 1;
    for d in (0..shape.len()).rev() {
        if shape[d] != 1 {
            if strides[d] != expected {
                return false;
            }
            expected *= shape[d];
        }
    }
    true
}

/// The elements occupy exactly `numel` consecutive storage slots, each once.
pub fn is_non_overlapping_and_dense(shape: &[usize], strides: &[usize]) -> bool {
    let mut p = positions(shape, strides, 0);
    p.sort_unstable();
    p.iter().enumerate().all(|(i, &x)| i == x)
}

/// No two elements share a storage slot.
pub fn is_non_overlapping(shape: &[usize], strides: &[usize]) -> bool {
    let mut p = positions(shape, strides, 0);
    p.sort_unstable();
    p.windows(2).all(|w| w[0] != w[1])
}

/// The strides a *view* of `t` with `new_shape` would need, or `None` when no layout over
/// the same storage can address the elements in that shape (then `view` must fail and
/// `reshape` must copy). Brute force: the row-major storage positions must be affine in the
/// new multi-index with non-negative strides.
pub fn view_strides(t: &RefTensor, new_shape: &[usize]) -> Option<Vec<usize>> {
    let n = numel(&t.shape);
    if n != numel(new_shape) {
        return None;
    }
    if n == 0 {
        return Some(contiguous_strides(new_shape));
    }
    let pos = positions(&t.shape, &t.strides, t.offset);
    let base = pos[0];
    let unit = contiguous_strides(new_shape); // linear index step of each new dim
    let mut strides = vec![0usize; new_shape.len()];
    for d in 0..new_shape.len() {
        if new_shape[d] > 1 {
            let p = pos[unit[d]];
            if p < base {
                return None;
            }
            strides[d] = p - base;
        }
    }
    let mut idx = vec![0; new_shape.len()];
    for (lin, &p) in pos.iter().enumerate() {
        unravel(lin, new_shape, &mut idx);
        if base
            + idx
                .iter()
                .zip(&strides)
                .map(|(&i, &s)| i * s)
                .sum::<usize>()
            != p
        {
            return None;
        }
    }
    Some(strides)
}

/// The strides PyTorch gives a `preserve_format` copy (`empty_like`, `clone`, `.to(dtype)`):
/// the source's strides when it is non-overlapping and dense, else `infer_dense_strides`
/// (dims sorted by stride, stride-0 dims compare as "ambiguous" and keep their place).
pub fn preserve_strides(shape: &[usize], strides: &[usize]) -> Vec<usize> {
    if is_non_overlapping_and_dense(shape, strides) {
        return strides.to_vec();
    }
    let nd = shape.len();
    if nd == 0 {
        return vec![];
    }
    if nd == 1 {
        return vec![1];
    }
    // perm[0] is the innermost dim; start from row-major
    let mut perm: Vec<usize> = (0..nd).rev().collect();
    let should_swap = |d0: usize, d1: usize| -> i32 {
        let (s0, s1) = (strides[d0], strides[d1]);
        if s0 == 0 || s1 == 0 {
            return 0;
        }
        if s0 < s1 {
            return -1;
        }
        if s0 > s1 {
            return 1;
        }
        if shape[d0] > shape[d1] {
            return 1;
        }
        0
    };
    for i in 1..nd {
        let mut dim1 = i;
        for j in 1..=i {
            let dim0 = i - j;
            let c = should_swap(perm[dim0], perm[dim1]);
            if c > 0 {
                perm.swap(dim0, dim1);
                dim1 = dim0;
            } else if c < 0 {
                break;
            }
        }
    }
    let mut out = vec![0; nd];
    let mut cur = 1;
    for &d in &perm {
        out[d] = cur;
        if shape[d] > 1 {
            cur *= shape[d];
        }
    }
    out
}

// ----- index and sort references (plain loops in logical order) ----------------------------

/// A 0-d shape as `[1]` (how the scatter/gather rules see it).
pub fn nz(shape: &[usize]) -> Vec<usize> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    }
}

/// Checks an index against a size: in `0..n`, or `-n..n` when `wrap`.
pub fn check_index(i: i64, n: usize, wrap: bool, what: &str) -> Result<usize, String> {
    let n = n as i64;
    let j = if wrap && i < 0 { i + n } else { i };
    if j < 0 || j >= n {
        return Err(format!(
            "{what} index {i} is out of range for size {n} and must be refused"
        ));
    }
    Ok(j as usize)
}

/// `x[(:,)*d, idx]` with `idx` of any shape (the gathers along one dim).
pub fn gather_along(
    x: &RefTensor,
    d: usize,
    idx: &RefTensor,
    wrap: bool,
) -> Result<RefOut, String> {
    let xs = nz(&x.shape);
    let iv = idx_values(idx);
    let pos: Vec<usize> = iv
        .iter()
        .map(|&i| check_index(i, xs[d], wrap, "the"))
        .collect::<Result<_, _>>()?;
    let mut os = xs[..d].to_vec();
    os.extend_from_slice(&idx.shape);
    os.extend_from_slice(&xs[d + 1..]);
    let k = idx.shape.len();
    let mut c = vec![0; os.len()];
    let vals = (0..numel(&os))
        .map(|lin| {
            unravel(lin, &os, &mut c);
            let mut cx = c[..d].to_vec();
            cx.push(pos[ravel(&c[d..d + k], &idx.shape)]);
            cx.extend_from_slice(&c[d + k..]);
            x.values[ravel(&cx, &xs)]
        })
        .collect();
    Ok(RefOut::new(os, vals))
}

/// How a scatter combines a destination's value with a source value.
#[derive(Clone, Copy, PartialEq)]
pub enum Comb {
    Assign,
    Add,
    Prod,
    Amax,
    Amin,
}

/// One step of a scatter in dtype `d` (floats round after every step, integers wrap).
pub fn step(comb: Comb, acc: f64, v: f64, d: DType) -> f64 {
    let r = match comb {
        Comb::Assign => v,
        Comb::Add if d.is_float() => acc + v,
        Comb::Add => wrap_int(acc as i128 + v as i128, d) as f64,
        Comb::Prod if d.is_float() => acc * v,
        Comb::Prod => wrap_int(acc as i128 * v as i128, d) as f64,
        Comb::Amax | Comb::Amin if acc.is_nan() || v.is_nan() => f64::NAN,
        Comb::Amax => acc.max(v),
        Comb::Amin => acc.min(v),
    };
    store(r, d)
}

/// The scatter reference: for every position `p` of `positions` (row-major), destination
/// `p` with `p[d] = index(p)` combines `value(p)`. Returns the new values and how many
/// sources hit each destination.
#[allow(clippy::too_many_arguments)]
pub fn scatter_ref(
    base: &RefTensor,
    d: usize,
    positions: &[usize],
    index: impl Fn(&[usize]) -> i64,
    value: impl Fn(&[usize]) -> f64,
    comb: Comb,
    include_self: bool,
    wrap: bool,
) -> Result<(Vec<f64>, Vec<usize>), String> {
    let xs = nz(&base.shape);
    let mut out = base.values.clone();
    let mut hits = vec![0usize; out.len()];
    let mut c = vec![0; positions.len()];
    // validate every index first (nothing may be written on failure)
    let mut targets = Vec::with_capacity(numel(positions));
    for lin in 0..numel(positions) {
        unravel(lin, positions, &mut c);
        let j = check_index(index(&c), xs[d], wrap, "the")?;
        let mut q = c.clone();
        q[d] = j;
        targets.push((ravel(&q, &xs), value(&c)));
    }
    // integer accumulators are kept exactly: a wrapped i64 product is not exact in f64
    let dt = base.dtype;
    let int = !dt.is_float() && dt != DType::Bool;
    let mut exact: Vec<i128> = if int {
        out.iter().map(|&v| v as i128).collect()
    } else {
        vec![]
    };
    for (t, v) in targets {
        let first = hits[t] == 0 && !include_self && comb != Comb::Assign;
        if int {
            let (a, v) = (exact[t], v as i128);
            exact[t] = match comb {
                _ if first => v,
                Comb::Assign => v,
                Comb::Add => wrap_int(a + v, dt),
                Comb::Prod => wrap_int(a * v, dt),
                Comb::Amax => a.max(v),
                Comb::Amin => a.min(v),
            };
            out[t] = exact[t] as f64;
        } else if first {
            out[t] = v;
        } else {
            out[t] = step(comb, out[t], v, dt);
        }
        hits[t] += 1;
    }
    Ok((out, hits))
}

/// stride's total order: NaN largest, `-0 == 0`.
pub fn total_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// The stable order of a line: positions sorted by value (descending: larger first, ties
/// still by position).
pub fn stable_order(v: &[f64], descending: bool) -> Vec<usize> {
    let mut p: Vec<usize> = (0..v.len()).collect();
    p.sort_by(|&a, &b| {
        let o = total_cmp(v[a], v[b]);
        if descending {
            o.reverse()
        } else {
            o
        }
    });
    p
}

/// Index values as i64.
pub fn idx_values(t: &RefTensor) -> Vec<i64> {
    t.values.iter().map(|&v| v as i64).collect()
}

// ----- elementwise driver ---------------------------------------------------------------------

/// The value of a host scalar once cast to the compute dtype (stride casts scalars to the
/// compute dtype before the kernel runs).
pub fn scalar_value(s: Scalar, compute: DType) -> f64 {
    let v = match s {
        Scalar::Bool(b) => b as u8 as f64,
        Scalar::Int(i) => {
            if compute.is_float() {
                i as f64
            } else if compute == DType::Bool {
                (i != 0) as u8 as f64
            } else {
                return wrap_int(i as i128, compute) as f64;
            }
        }
        Scalar::Float(f) => f,
    };
    store(v, compute)
}

/// An elementwise reference: broadcasts the operands (each cast to its compute dtype),
/// applies `f` to each output element's operand values. Errors if the shapes don't broadcast.
pub fn elementwise(
    ctx: &RefCtx,
    args: &[RefArg],
    f: impl Fn(&[f64]) -> f64,
) -> Result<RefOut, String> {
    let shapes: Vec<&[usize]> = args
        .iter()
        .filter_map(|a| match a {
            RefArg::Tensor(t) => Some(t.shape.as_slice()),
            _ => None,
        })
        .collect();
    let shape =
        broadcast_shapes(&shapes).ok_or_else(|| format!("shapes {shapes:?} do not broadcast"))?;
    let nd = shape.len();
    // per operand: its strides in the broadcast index space (0 for broadcast dims)
    let bstrides: Vec<Vec<usize>> = args
        .iter()
        .map(|a| match a {
            RefArg::Tensor(t) => {
                let cs = contiguous_strides(&t.shape);
                (0..nd)
                    .map(|d| {
                        let k = d as isize - (nd - t.shape.len()) as isize;
                        if k < 0 || t.shape[k as usize] == 1 {
                            0
                        } else {
                            cs[k as usize]
                        }
                    })
                    .collect()
            }
            RefArg::Scalar(_) => vec![0; nd],
        })
        .collect();
    let computed: Vec<Vec<f64>> = args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let c = ctx.arg_compute.get(i).copied().unwrap_or(ctx.compute);
            match a {
                RefArg::Tensor(t) => t.values.iter().map(|&v| store(v, c)).collect(),
                RefArg::Scalar(s) => vec![scalar_value(*s, c)],
            }
        })
        .collect();
    let n = numel(&shape);
    let mut idx = vec![0; nd];
    let mut pos = vec![0usize; args.len()];
    let mut xs = vec![0.0; args.len()];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        for (k, v) in computed.iter().enumerate() {
            xs[k] = v[pos[k]];
        }
        out.push(f(&xs));
        for d in (0..nd).rev() {
            idx[d] += 1;
            for (p, bs) in pos.iter_mut().zip(&bstrides) {
                *p += bs[d];
            }
            if idx[d] < shape[d] {
                break;
            }
            for (p, bs) in pos.iter_mut().zip(&bstrides) {
                *p -= bs[d] * shape[d];
            }
            idx[d] = 0;
        }
    }
    Ok(RefOut::new(shape, out))
}

/// The reference of a reduction over `dims` (empty: every dim, as PyTorch's `sum()`): `f`
/// gets the values of each output element's group, in row-major order. Out-of-range or
/// repeated dims are errors (the op must refuse them).
pub fn reduce(
    t: &RefTensor,
    dims: &[i64],
    keepdim: bool,
    f: impl Fn(&[f64]) -> f64,
) -> Result<RefOut, String> {
    let nd = t.shape.len();
    let mut reduced = vec![dims.is_empty(); nd];
    let mut seen = vec![false; nd.max(1)];
    for &d in dims {
        let w = wrap_dim(d, nd)
            .ok_or_else(|| format!("dim {d} is out of range for {nd} dims and must be refused"))?;
        // a 0-d tensor accepts dim 0 / -1 once (PyTorch: naming it twice is an error too)
        if seen[w] {
            return Err(format!("dim {d} repeated in {dims:?} must be refused"));
        }
        seen[w] = true;
        if nd > 0 {
            reduced[w] = true;
        }
    }
    let kept: Vec<usize> = (0..nd).filter(|&d| !reduced[d]).collect();
    let out_shape: Vec<usize> = (0..nd)
        .filter_map(|d| {
            if reduced[d] {
                keepdim.then_some(1)
            } else {
                Some(t.shape[d])
            }
        })
        .collect();
    let group_shape: Vec<usize> = kept.iter().map(|&d| t.shape[d]).collect();
    let mut groups: Vec<Vec<f64>> = vec![vec![]; numel(&group_shape)];
    let mut idx = vec![0; nd];
    for (lin, &v) in t.values.iter().enumerate() {
        unravel(lin, &t.shape, &mut idx);
        let g: Vec<usize> = kept.iter().map(|&d| idx[d]).collect();
        groups[ravel(&g, &group_shape)].push(v);
    }
    Ok(RefOut::new(
        out_shape,
        groups.iter().map(|g| f(g)).collect(),
    ))
}

/// The reference of PyTorch's `matmul`: 1-D·1-D is a dot product (0-d), a 1-D operand is a
/// row (left) or column (right) vector that is removed from the result again, and batch dims
/// broadcast. Plain triple loops; the sum runs in f64.
pub fn matmul(a: &RefTensor, b: &RefTensor) -> Result<RefOut, String> {
    let (na, nb) = (a.shape.len(), b.shape.len());
    if na == 0 || nb == 0 {
        return Err("matmul of a 0-d tensor must be refused".into());
    }
    let a_shape: Vec<usize> = if na == 1 {
        vec![1, a.shape[0]]
    } else {
        a.shape.clone()
    };
    let b_shape: Vec<usize> = if nb == 1 {
        vec![b.shape[0], 1]
    } else {
        b.shape.clone()
    };
    let (m, k) = (a_shape[a_shape.len() - 2], a_shape[a_shape.len() - 1]);
    let (k2, p) = (b_shape[b_shape.len() - 2], b_shape[b_shape.len() - 1]);
    if k != k2 {
        return Err(format!(
            "matmul of {:?} and {:?}: inner sizes {k} and {k2} differ and must be refused",
            a.shape, b.shape
        ));
    }
    let (ba, bb) = (&a_shape[..a_shape.len() - 2], &b_shape[..b_shape.len() - 2]);
    let batch = broadcast_shapes(&[ba, bb])
        .ok_or_else(|| format!("batch dims {ba:?} and {bb:?} must broadcast"))?;
    let bidx = |full: &[usize], own: &[usize]| -> usize {
        // row-major index into `own` of a (broadcast) batch index of `batch`
        let off = full.len() - own.len();
        own.iter().enumerate().fold(0, |acc, (i, &n)| {
            acc * n + if n == 1 { 0 } else { full[off + i] }
        })
    };
    let nbatch = numel(&batch);
    let mut out = Vec::with_capacity(nbatch * m * p);
    let mut bi = vec![0; batch.len()];
    for t in 0..nbatch {
        unravel(t, &batch, &mut bi);
        let (oa, ob) = (bidx(&bi, ba) * m * k, bidx(&bi, bb) * k * p);
        for i in 0..m {
            for j in 0..p {
                out.push(
                    (0..k)
                        .map(|x| a.values[oa + i * k + x] * b.values[ob + x * p + j])
                        .sum(),
                );
            }
        }
    }
    let mut shape = batch;
    if na > 1 {
        shape.push(m);
    }
    if nb > 1 {
        shape.push(p);
    }
    Ok(RefOut::new(shape, out))
}

/// erf in f64, by the series `erf x = 2/√π · e^(−x²) · Σ 2ⁿ x^(2n+1) / (1·3·…·(2n+1))`
/// (all terms positive, so no cancellation). Independent of the kernels' libm.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() > 6.0 {
        return x.signum();
    }
    let x2 = x * x;
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    loop {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
        if term.abs() <= 1e-17 * sum.abs() || n > 500.0 {
            break;
        }
    }
    2.0 / std::f64::consts::PI.sqrt() * (-x2).exp() * sum
}

#[cfg(test)]
mod tests {
    use super::*;
    fn t(shape: Vec<usize>, values: Vec<f64>) -> RefTensor {
        let strides = contiguous_strides(&shape);
        RefTensor {
            dtype: DType::F64,
            shape,
            values,
            strides,
            offset: 0,
            storage: vec![],
        }
    }
    #[test]
    fn reduce_and_matmul() {
        let x = t(vec![2, 3], vec![1., 2., 3., 4., 5., 6.]);
        let sum = |v: &[f64]| v.iter().sum::<f64>();
        assert_eq!(
            reduce(&x, &[1], false, sum).unwrap(),
            RefOut::new(vec![2], vec![6., 15.])
        );
        assert_eq!(
            reduce(&x, &[0], true, sum).unwrap(),
            RefOut::new(vec![1, 3], vec![5., 7., 9.])
        );
        assert_eq!(
            reduce(&x, &[], false, sum).unwrap(),
            RefOut::new(vec![], vec![21.])
        );
        assert!(reduce(&x, &[1, -1], false, sum).is_err());
        let y = t(vec![3, 1], vec![1., 1., 2.]);
        assert_eq!(
            matmul(&x, &y).unwrap(),
            RefOut::new(vec![2, 1], vec![9., 21.])
        );
        let v = t(vec![3], vec![1., 0., 1.]);
        assert_eq!(matmul(&x, &v).unwrap(), RefOut::new(vec![2], vec![4., 10.]));
        assert_eq!(matmul(&v, &v).unwrap(), RefOut::new(vec![], vec![2.]));
        let bx = t(vec![2, 1, 3], vec![1., 2., 3., 4., 5., 6.]);
        assert_eq!(
            matmul(&bx, &y).unwrap(),
            RefOut::new(vec![2, 1, 1], vec![9., 21.])
        );
        assert!(matmul(&x, &x).is_err());
    }
    #[test]
    fn erf_matches_known_values() {
        for (x, e) in [
            (0.0, 0.0),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.0, 0.9953222650189527),
            (-3.0, -0.9999779095030014),
        ] {
            assert!((erf(x) - e).abs() < 1e-15, "erf({x}) = {} != {e}", erf(x));
        }
    }
    #[test]
    fn preserve_strides_like_pytorch() {
        assert_eq!(preserve_strides(&[3, 4], &[0, 1]), vec![4, 1]); // expanded: row-major
        assert_eq!(preserve_strides(&[3, 4], &[1, 3]), vec![1, 3]); // transposed: kept
        assert_eq!(preserve_strides(&[3, 4], &[8, 2]), vec![4, 1]); // stepped: compacted
        assert_eq!(preserve_strides(&[3, 4], &[2, 6]), vec![1, 3]); // stepped transposed
    }
    #[test]
    fn view_oracle() {
        let t = |shape: Vec<usize>, strides: Vec<usize>| RefTensor {
            dtype: DType::F32,
            values: vec![0.0; numel(&shape)],
            shape,
            strides,
            offset: 0,
            storage: vec![],
        };
        assert_eq!(view_strides(&t(vec![3, 4], vec![1, 3]), &[12]), None);
        assert_eq!(
            view_strides(&t(vec![3, 4], vec![4, 1]), &[2, 6]),
            Some(vec![6, 1])
        );
        assert_eq!(
            view_strides(&t(vec![4, 6], vec![12, 1]), &[4, 2, 3]),
            Some(vec![12, 3, 1])
        );
        assert_eq!(view_strides(&t(vec![4, 6], vec![12, 1]), &[24]), None);
        assert_eq!(
            view_strides(&t(vec![2, 3], vec![0, 0]), &[6]),
            Some(vec![0])
        );
    }
}
