//! Random fills: element `i` (in logical, row-major order) is computed from the Philox words
//! the mapping in [`crate::random`] assigns to it, so the values never depend on the output's
//! strides or on how the work is split across threads. The output is written through its
//! layout: a plan pairs it with a row-major "logical" layout whose offset is the element's
//! logical index.

use super::access::Access;
use super::strided::{Plan, SendPtr};
use crate::backend::common::random::uniform_cap;
use crate::backend::{RandomDist, View};
use crate::layout::contiguous_strides;
use crate::random::philox::Words;
use crate::random::{box_muller, u24, u53};
use crate::{with_dtype, DType, Element, Result};

pub(crate) fn random(dist: RandomDist, seed: u64, offset: u64, dst: View) -> Result<()> {
    let acc = Access::views(Some(&dst), &[]);
    with_dtype!(dst.dtype, T => unsafe {
        fill::<T>(dist, seed, offset, &dst, acc.ptr::<T>(dst.storage))
    });
    Ok(())
}

/// Computes elements of one draw by logical index.
struct Sampler<T> {
    dist: RandomDist,
    offset: u64,
    wide: bool,
    words: Words,
    /// The last Box–Muller pair: (pair index, cos part, sin part).
    pair: Option<(u64, f64, f64)>,
    /// Uniform: what replaces a value that rounded up to `high`.
    cap: T,
}

impl<T: Element> Sampler<T> {
    fn new(dist: RandomDist, seed: u64, offset: u64) -> Self {
        let cap = match dist {
            RandomDist::Uniform { low, high } => uniform_cap(low, high),
            _ => T::default(),
        };
        Sampler {
            dist,
            offset,
            wide: T::DTYPE == DType::F64,
            words: Words::new(seed),
            pair: None,
            cap,
        }
    }
    #[inline(always)]
    fn w(&mut self, k: u64) -> u32 {
        self.words.get(self.offset.wrapping_add(k))
    }
    #[inline(always)]
    fn bits64(&mut self, i: u64) -> u64 {
        let (a, b) = (self.w(2 * i), self.w(2 * i + 1));
        ((a as u64) << 32) | b as u64
    }
    #[inline(always)]
    fn get(&mut self, i: u64) -> T {
        match self.dist {
            RandomDist::Uniform { low, high } => {
                let u = if self.wide {
                    let (a, b) = (self.w(2 * i), self.w(2 * i + 1));
                    u53(a, b)
                } else {
                    u24(self.w(i))
                };
                let v = T::from_f64(low + (high - low) * u);
                if v.to_f64() >= high {
                    self.cap
                } else {
                    v
                }
            }
            RandomDist::Normal { mean, std } => {
                let p = i / 2;
                let (c, s) = match self.pair {
                    Some((q, c, s)) if q == p => (c, s),
                    _ => {
                        let (u1, u2) = if self.wide {
                            let w: [u32; 4] = std::array::from_fn(|k| self.w(4 * p + k as u64));
                            (u53(w[0], w[1]), u53(w[2], w[3]))
                        } else {
                            (u24(self.w(2 * p)), u24(self.w(2 * p + 1)))
                        };
                        let (c, s) = box_muller(u1, u2);
                        self.pair = Some((p, c, s));
                        (c, s)
                    }
                };
                T::from_f64(mean + std * if i.is_multiple_of(2) { c } else { s })
            }
            RandomDist::RandInt { low, high } => {
                let range = (high as i128 - low as i128) as u128;
                let x = self.bits64(i) as u128;
                T::from_i64((low as i128 + ((x * range) >> 64) as i128) as i64)
            }
            RandomDist::Bernoulli { p, value } => {
                T::from_f64(if u24(self.w(i)) < p { value } else { 0.0 })
            }
            RandomDist::Bits64 => T::from_i64(self.bits64(i) as i64),
        }
    }
}

unsafe fn fill<T: Element>(dist: RandomDist, seed: u64, offset: u64, dst: &View, p: *mut T) {
    let l = dst.layout;
    let logical = contiguous_strides(l.shape());
    let plan = Plan::new(l.shape(), [l.strides(), &logical], [l.offset(), 0]);
    let [so, sl] = plan.inner_strides();
    let p = SendPtr(p);
    plan.par_ranges(|s, e| {
        let mut sampler = Sampler::<T>::new(dist, seed, offset);
        plan.for_each_run(s, e, |off, len| {
            let o = p.get().offset(off[0]);
            let li = off[1] as u64;
            for k in 0..len {
                *o.offset(k as isize * so) = sampler.get(li + k as u64 * sl as u64);
            }
        })
    });
}
