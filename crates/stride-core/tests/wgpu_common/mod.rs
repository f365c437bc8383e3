//! Shared helpers of the wgpu tests: the adapter (or a skip) with a per-binary lock, and each
//! element's bits for exact comparisons with the CPU.
#![allow(dead_code)]

use stride_core::{webgpu, DType, Device, Tensor};

/// `wgpu:0` and a lock held for the whole test (the tests of one binary share the device's
/// error record and read its process-wide counters: host waits, allocator statistics), or
/// None after printing why the test is skipped.
pub fn gpu(test: &str) -> Option<(Device, std::sync::MutexGuard<'static, ()>)> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let device = webgpu::require_or_skip(test)?;
    Some((device, TURN.lock().unwrap_or_else(|e| e.into_inner())))
}

/// Each element's bits, read on the host: floats as their bit patterns (NaN payloads
/// included), integers and bools as their values widened to 64 bits.
pub fn bits(t: &Tensor) -> Vec<u64> {
    use stride_core::half::{bf16, f16};
    let c = t.to_device(&Device::Cpu).unwrap();
    match c.dtype() {
        DType::F64 => c
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect(),
        DType::F32 => c
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits() as u64)
            .collect(),
        DType::F16 => c
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits() as u64)
            .collect(),
        DType::BF16 => c
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits() as u64)
            .collect(),
        _ => c
            .to_dtype(DType::I64)
            .unwrap()
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&x| x as u64)
            .collect(),
    }
}
