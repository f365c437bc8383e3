//! Shared by the fused-kernel tests (`norm.rs`, `cross_entropy.rs`): the rounding units a
//! bound is written in, host copies, and the element-wise bound check.

use stride_core::{DType, Device, Tensor};

/// The unit roundoff of `d` (half the distance from 1 to the next value).
pub fn unit(d: DType) -> f64 {
    match d {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::F32 => 2f64.powi(-24),
        _ => 2f64.powi(-53),
    }
}

/// Half the spacing of `d`'s subnormals: the absolute part of rounding into `d`.
pub fn tiny(d: DType) -> f64 {
    match d {
        DType::F16 => 2f64.powi(-25),
        DType::BF16 => 2f64.powi(-134),
        DType::F32 => 2f64.powi(-150),
        _ => 0.0,
    }
}

/// The unit roundoff of the dtype `d` computes in (f32 for f32/f16/bf16, f64 for f64).
pub fn compute_unit(d: DType) -> f64 {
    if d == DType::F64 {
        2f64.powi(-53)
    } else {
        2f64.powi(-24)
    }
}

/// `t`'s values on the host, as f64, in logical order.
pub fn host(t: &Tensor) -> Vec<f64> {
    t.to_device(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .contiguous()
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
}

/// Every `|got − want|` within its `bound`, else a panic naming the element.
pub fn within(what: &str, got: &[f64], want: &[f64], bound: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for i in 0..got.len() {
        let err = (got[i] - want[i]).abs();
        assert!(
            err <= bound[i],
            "{what}: element {i}: got {:e}, want {:e} (error {err:e} > bound {:e})",
            got[i],
            want[i],
            bound[i]
        );
    }
}
