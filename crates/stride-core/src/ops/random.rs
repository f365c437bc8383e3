//! Random frontends: creation (`rand`, `randn`, `randint`, `randperm`, `bernoulli_scalar`,
//! `dropout_mask`), `*_like`, in-place fills written through `self`'s layout (`uniform_`,
//! `normal_`, `bernoulli_`), `bernoulli(probs)` and `multinomial`. Each takes an optional
//! [`Generator`] (the default generator when `None`). See [`crate::random`] for exactly
//! which stream words make which element.
//!
//! Every parameter is checked before the generator advances, so a failed call leaves both the
//! operands and the generator unchanged.

use super::output::{check_out, deliver, Dest, Policy};
use crate::autograd::record::in_place;
use crate::backend::{self, RandomDist};
use crate::random::generator::or_default;
use crate::random::{words_consumed, Generator};
use crate::shape::checked_numel;
use crate::{with_dtype, DType, Device, Element, Error, Result, Shape, Tensor};

/// Draws `dist` into `dest` (a new tensor of `shape`, or `self` for in-place fills), taking
/// the words from `gen` only once everything is checked.
#[allow(clippy::too_many_arguments)]
fn draw(
    op: &'static str,
    dist: RandomDist,
    dest: Dest,
    shape: &[usize],
    dtype: DType,
    device: Device,
    like: Option<&Tensor>,
    gen: Option<&Generator>,
) -> Result<Tensor> {
    let n = checked_numel(op, shape)?;
    let words = words_consumed(dist, dtype, n);
    let g = or_default(gen);
    let policy = Policy::new(op, &[], shape, device, like);
    deliver(dest, &policy, dtype, |dst| {
        let at = g.reserve(words);
        backend::random(dist, at.seed, at.offset, dst)
    })
}

fn float_only(op: &'static str, dtype: DType) -> Result<()> {
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype,
            hint: "; it fills float tensors (use randint for integers, or to_dtype after)".into(),
        });
    }
    Ok(())
}

fn check_prob(op: &'static str, what: &str, p: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::invalid(
            op,
            format!("{what} must be in [0, 1], got {p}"),
        ));
    }
    Ok(())
}

/// Whether `v` is finite once rounded to `dtype`.
fn fits(dtype: DType, v: f64) -> bool {
    with_dtype!(dtype, T => T::from_f64(v).to_f64().is_finite())
}

fn check_uniform(op: &'static str, dtype: DType, low: f64, high: f64) -> Result<RandomDist> {
    float_only(op, dtype)?;
    if !(low.is_finite() && high.is_finite() && (high - low).is_finite()) || low > high {
        return Err(Error::invalid(
            op,
            format!("expects finite bounds with low <= high, got [{low}, {high})"),
        ));
    }
    if !fits(dtype, low) || !fits(dtype, high) {
        return Err(Error::invalid(
            op,
            format!("the bounds [{low}, {high}) are outside the range of {dtype}"),
        ));
    }
    Ok(RandomDist::Uniform { low, high })
}

fn check_normal(op: &'static str, dtype: DType, mean: f64, std: f64) -> Result<RandomDist> {
    float_only(op, dtype)?;
    if !mean.is_finite() || !std.is_finite() || std < 0.0 {
        return Err(Error::invalid(
            op,
            format!("expects a finite mean and a finite std >= 0, got mean {mean}, std {std}"),
        ));
    }
    Ok(RandomDist::Normal { mean, std })
}

/// The largest integer `k` such that every integer in `[-k, k]` is exact in `dtype`, for
/// float dtypes.
fn exact_int_limit(dtype: DType) -> i128 {
    match dtype {
        DType::F64 => 1 << 53,
        DType::F32 => 1 << 24,
        DType::F16 => 1 << 11,
        _ => 1 << 8, // bf16
    }
}

/// Whether every integer in `[lo, hi]` is exactly representable in `dtype`.
fn holds_ints(dtype: DType, lo: i128, hi: i128) -> bool {
    match dtype.category() {
        crate::Category::Bool => lo >= 0 && hi <= 1,
        crate::Category::Float => {
            let k = exact_int_limit(dtype);
            lo >= -k && hi <= k
        }
        crate::Category::Integer => {
            let (min, max): (i128, i128) = match dtype {
                DType::U8 => (0, u8::MAX as i128),
                DType::I8 => (i8::MIN as i128, i8::MAX as i128),
                DType::I32 => (i32::MIN as i128, i32::MAX as i128),
                DType::U32 => (0, u32::MAX as i128),
                _ => (i64::MIN as i128, i64::MAX as i128),
            };
            lo >= min && hi <= max
        }
    }
}

impl Tensor {
    /// Uniform samples in `[0, 1)` (float dtypes).
    ///
    /// ```
    /// use stride_core::{manual_seed, DType, Device, Tensor};
    /// manual_seed(0);
    /// let a = Tensor::rand([2, 3], DType::F32, &Device::Cpu, None)?;
    /// manual_seed(0);
    /// let b = Tensor::rand([2, 3], DType::F32, &Device::Cpu, None)?;
    /// assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    /// # Ok::<(), stride_core::Error>(())
    /// ```
    pub fn rand(
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
        gen: Option<&Generator>,
    ) -> Result<Tensor> {
        let dist = check_uniform("rand", dtype, 0.0, 1.0)?;
        draw(
            "rand",
            dist,
            Dest::New,
            shape.into().dims(),
            dtype,
            *device,
            None,
            gen,
        )
    }
    /// Standard normal samples (float dtypes).
    pub fn randn(
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
        gen: Option<&Generator>,
    ) -> Result<Tensor> {
        let dist = check_normal("randn", dtype, 0.0, 1.0)?;
        draw(
            "randn",
            dist,
            Dest::New,
            shape.into().dims(),
            dtype,
            *device,
            None,
            gen,
        )
    }
    /// Integers uniform in `[low, high)`, in any non-bool dtype that holds them all (bool
    /// accepts `[0, 2)`). PyTorch's default dtype here is i64.
    pub fn randint(
        low: i64,
        high: i64,
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
        gen: Option<&Generator>,
    ) -> Result<Tensor> {
        let op = "randint";
        if low >= high {
            return Err(Error::invalid(
                op,
                format!("expects low < high, got [{low}, {high})"),
            ));
        }
        if !holds_ints(dtype, low as i128, high as i128 - 1) {
            return Err(Error::invalid(
                op,
                format!("the range [{low}, {high}) does not fit dtype {dtype}"),
            ));
        }
        let dist = RandomDist::RandInt { low, high };
        draw(
            op,
            dist,
            Dest::New,
            shape.into().dims(),
            dtype,
            *device,
            None,
            gen,
        )
    }
    /// Uniform samples in `[0, 1)` with `self`'s shape, dtype, device and dim order.
    pub fn rand_like(&self, gen: Option<&Generator>) -> Result<Tensor> {
        let dist = check_uniform("rand_like", self.dtype(), 0.0, 1.0)?;
        let (s, d) = (self.shape(), self.dtype());
        draw(
            "rand_like",
            dist,
            Dest::New,
            s,
            d,
            self.device(),
            Some(self),
            gen,
        )
    }
    /// Standard normal samples with `self`'s shape, dtype, device and dim order.
    pub fn randn_like(&self, gen: Option<&Generator>) -> Result<Tensor> {
        let dist = check_normal("randn_like", self.dtype(), 0.0, 1.0)?;
        let (s, d) = (self.shape(), self.dtype());
        draw(
            "randn_like",
            dist,
            Dest::New,
            s,
            d,
            self.device(),
            Some(self),
            gen,
        )
    }
    /// Fills `self` (a float tensor, any non-overlapping layout) with uniforms in `[low, high)`.
    pub fn uniform_(&self, low: f64, high: f64, gen: Option<&Generator>) -> Result<Tensor> {
        let dist = check_uniform("uniform_", self.dtype(), low, high)?;
        self.fill_random_("uniform_", dist, gen)
    }
    /// Fills `self` (a float tensor, any non-overlapping layout) with normals.
    pub fn normal_(&self, mean: f64, std: f64, gen: Option<&Generator>) -> Result<Tensor> {
        let dist = check_normal("normal_", self.dtype(), mean, std)?;
        self.fill_random_("normal_", dist, gen)
    }

    /// Samples 0/1 with the probabilities in `self` (a float tensor with values in `[0, 1]`);
    /// the result has `self`'s shape and dtype.
    pub fn bernoulli(&self, gen: Option<&Generator>) -> Result<Tensor> {
        let op = "bernoulli";
        float_only(op, self.dtype())?;
        if let Some(p) = self
            .to_f64_vec()?
            .into_iter()
            .find(|p| !(0.0..=1.0).contains(p))
        {
            return Err(Error::invalid(
                op,
                format!("probabilities must be in [0, 1], got {p}"),
            ));
        }
        // u24 < p, compared exactly (f32 ⊔ p's dtype holds both)
        let u = Tensor::rand(self.shape(), DType::F32, &self.device(), gen)?;
        u.lt(self)?.to_dtype(self.dtype())
    }
    /// A new tensor of 0/1 (`true`/`false` for bool), 1 with probability `p`.
    pub fn bernoulli_scalar(
        shape: impl Into<Shape>,
        p: f64,
        dtype: DType,
        device: &Device,
        gen: Option<&Generator>,
    ) -> Result<Tensor> {
        let op = "bernoulli";
        check_prob(op, "p", p)?;
        let dist = RandomDist::Bernoulli { p, value: 1.0 };
        draw(
            op,
            dist,
            Dest::New,
            shape.into().dims(),
            dtype,
            *device,
            None,
            gen,
        )
    }
    /// Fills `self` (any dtype, any non-overlapping layout) with 1 with probability `p`, else 0.
    pub fn bernoulli_(&self, p: f64, gen: Option<&Generator>) -> Result<Tensor> {
        let op = "bernoulli_";
        check_prob(op, "p", p)?;
        let dist = RandomDist::Bernoulli { p, value: 1.0 };
        self.fill_random_(op, dist, gen)
    }

    /// An in-place random fill, seen by autograd as PyTorch sees it: the drawn values are a
    /// constant, so while recording `self`'s history (or, for a view, its base's) is rebased
    /// onto them — no gradient flows back through the overwritten elements — and a leaf that
    /// requires grad (or a view of one) is refused. The values are the same either way: an
    /// element's random words depend on its logical index only.
    fn fill_random_(
        &self,
        op: &'static str,
        dist: RandomDist,
        gen: Option<&Generator>,
    ) -> Result<Tensor> {
        let (s, d, dev) = (self.shape(), self.dtype(), self.device());
        in_place(
            op,
            self,
            &[],
            || draw(op, dist, Dest::Into(self), s, d, dev, None, gen),
            |orig| {
                // checked before the generator advances, as on the kernel path
                check_out(op, self, s, d, dev)?;
                draw(op, dist, Dest::New, s, d, dev, Some(orig), gen)
            },
        )
    }

    /// A dropout mask (float dtype): each element is kept with probability `1 − p` and then
    /// holds `1/(1 − p)` (so `x * mask` is inverted dropout), else `0`. `p = 1` gives all
    /// zeros. Same draws as [`Tensor::dropout_mask_bool`].
    pub fn dropout_mask(
        shape: impl Into<Shape>,
        p: f64,
        dtype: DType,
        device: &Device,
        gen: Option<&Generator>,
    ) -> Result<Tensor> {
        let op = "dropout_mask";
        float_only(op, dtype)?;
        check_prob(op, "the drop probability p", p)?;
        let value = if p < 1.0 { 1.0 / (1.0 - p) } else { 0.0 };
        let dist = RandomDist::Bernoulli { p: 1.0 - p, value };
        draw(
            op,
            dist,
            Dest::New,
            shape.into().dims(),
            dtype,
            *device,
            None,
            gen,
        )
    }
    /// The keep mask of [`Tensor::dropout_mask`] as bool (`true` = kept, probability `1 − p`).
    pub fn dropout_mask_bool(
        shape: impl Into<Shape>,
        p: f64,
        device: &Device,
        gen: Option<&Generator>,
    ) -> Result<Tensor> {
        let op = "dropout_mask";
        check_prob(op, "the drop probability p", p)?;
        let dist = RandomDist::Bernoulli {
            p: 1.0 - p,
            value: 1.0,
        };
        let s = shape.into();
        draw(
            op,
            dist,
            Dest::New,
            s.dims(),
            DType::Bool,
            *device,
            None,
            gen,
        )
    }

    /// A random permutation of `0..n` in `dtype` (PyTorch's default: i64).
    pub fn randperm(
        n: usize,
        dtype: DType,
        device: &Device,
        gen: Option<&Generator>,
    ) -> Result<Tensor> {
        let op = "randperm";
        if dtype == DType::Bool || !holds_ints(dtype, 0, n as i128 - 1) {
            return Err(Error::invalid(
                op,
                format!("dtype {dtype} can't hold every index of 0..{n}"),
            ));
        }
        let keys = draw(
            op,
            RandomDist::Bits64,
            Dest::New,
            &[n],
            DType::I64,
            *device,
            None,
            gen,
        )?
        .to_vec::<i64>()?;
        let mut idx: Vec<i64> = crate::alloc::try_with_capacity(n, op, &[n], Some(DType::I64))?;
        idx.extend(0..n as i64);
        idx.sort_unstable_by_key(|&i| (keys[i as usize] as u64, i));
        Tensor::from_vec(idx, [n])?
            .to_dtype(dtype)?
            .to_device(device)
    }

    /// `n` category indices (i64) per row of the probabilities (or weights) in `self`, 1-D
    /// (`[n]`) or 2-D (`[rows, n]`). Without replacement, each row needs at least `n`
    /// non-zero categories. Weights must be finite, non-negative, with a positive sum.
    pub fn multinomial(
        &self,
        n: usize,
        replacement: bool,
        gen: Option<&Generator>,
    ) -> Result<Tensor> {
        let op = "multinomial";
        float_only(op, self.dtype())?;
        if self.dim() == 0 || self.dim() > 2 {
            return Err(Error::invalid(
                op,
                format!(
                    "expects 1-d or 2-d probabilities, got shape {:?}",
                    self.shape()
                ),
            ));
        }
        let (rows, k) = if self.dim() == 1 {
            (1, self.shape()[0])
        } else {
            (self.shape()[0], self.shape()[1])
        };
        if k == 0 {
            return Err(Error::invalid(
                op,
                format!("needs at least one category, got shape {:?}", self.shape()),
            ));
        }
        if n == 0 {
            return Err(Error::invalid(op, "the number of samples must be positive"));
        }
        if !replacement && n > k {
            return Err(Error::invalid(
                op,
                format!("can't draw {n} samples without replacement from {k} categories"),
            ));
        }
        let p = self.to_f64_vec()?;
        for r in 0..rows {
            let row = &p[r * k..(r + 1) * k];
            if let Some(x) = row.iter().find(|x| !(x.is_finite() && **x >= 0.0)) {
                return Err(Error::invalid(
                    op,
                    format!("probabilities must be finite and non-negative, row {r} has {x}"),
                ));
            }
            let nonzero = row.iter().filter(|&&x| x > 0.0).count();
            if nonzero == 0 {
                return Err(Error::invalid(
                    op,
                    format!("row {r} sums to 0; it needs a positive weight"),
                ));
            }
            if !replacement && nonzero < n {
                return Err(Error::invalid(
                    op,
                    format!("can't draw {n} samples without replacement: row {r} has only {nonzero} non-zero categories"),
                ));
            }
        }
        let m = if replacement { n } else { k };
        let dist = RandomDist::Uniform {
            low: 0.0,
            high: 1.0,
        };
        // the draws are read on the host: made on a device without f64 they come from the
        // CPU, which gives the same values (a pure function of the generator's seed and offset)
        let at = if self.device().holds(DType::F64) {
            self.device()
        } else {
            Device::Cpu
        };
        let u =
            draw(op, dist, Dest::New, &[rows, m], DType::F64, at, None, gen)?.to_vec::<f64>()?;
        let mut out: Vec<i64> =
            crate::alloc::try_with_capacity(rows * n, op, &[rows, n], Some(DType::I64))?;
        for r in 0..rows {
            let (row, ur) = (&p[r * k..(r + 1) * k], &u[r * m..(r + 1) * m]);
            if replacement {
                let mut cdf = Vec::with_capacity(k);
                let mut acc = 0.0;
                for &x in row {
                    acc += x;
                    cdf.push(acc);
                }
                let last = row.iter().rposition(|&x| x > 0.0).unwrap_or(0);
                for &uj in ur {
                    let j = cdf.partition_point(|&c| c <= uj * acc);
                    out.push(j.min(last) as i64);
                }
            } else {
                let mut keys: Vec<(f64, usize)> = row
                    .iter()
                    .zip(ur)
                    .enumerate()
                    .filter(|(_, (&x, _))| x > 0.0)
                    .map(|(c, (&x, &uc))| (-libm::log(1.0 - uc) / x, c))
                    .collect();
                keys.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                out.extend(keys[..n].iter().map(|&(_, c)| c as i64));
            }
        }
        let shape = if self.dim() == 1 {
            vec![n]
        } else {
            vec![rows, n]
        };
        Tensor::from_vec(out, shape)?.to_device(&self.device())
    }
}
