//! The one accumulation order every kernel follows, scalar and SIMD alike.
//!
//! A row's dot product is a sum of per-block terms, each an exactly computed integer sum
//! times an `f32` scale. Block `b`'s terms go into lane `b % 8` of eight `f32` accumulators,
//! each by one fused multiply-add (`lane = fma(scale, sum as f32, lane)`, a single
//! rounding); at the end the lanes are added as
//! `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`. The AVX2 kernels keep the eight
//! lanes in one register and finish with this same code, so both paths round identically
//! and agree bit for bit.

/// Eight `f32` accumulation lanes; see the module documentation.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Acc8 {
    pub(crate) lanes: [f32; 8],
}

impl Acc8 {
    pub(crate) fn new() -> Acc8 {
        Acc8 { lanes: [0.0; 8] }
    }

    /// `lane[b % 8] = fma(scale, sum, lane[b % 8])`.
    #[inline(always)]
    pub(crate) fn add(&mut self, block: usize, scale: f32, sum: f32) {
        let l = &mut self.lanes[block & 7];
        *l = scale.mul_add(sum, *l);
    }

    /// The fixed reduction tree over the lanes.
    #[inline]
    pub(crate) fn sum(&self) -> f32 {
        let l = &self.lanes;
        ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
    }
}
