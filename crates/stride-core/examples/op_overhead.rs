//! Host overhead of tiny ops, where it dominates: µs per call of a few ops on tiny tensors,
//! on the CPU and (where present) on CUDA device 0, with no debug tool alive — the number
//! the debug tools must not move when they are off — and, for comparison, with a profiler
//! recording.
//!
//! ```text
//! cargo run --release --example op_overhead -p stride-core [-- CALLS]
//! ```
//!
//! Each figure is the median of 9 batches of CALLS calls (default 10,000) after a warm-up.
//! On CUDA each batch ends with a synchronisation, so the figure is the host's cost per call
//! when the GPU keeps up. Nothing here asserts on time.

use std::time::Instant;
use stride_core::{cuda, debug, DType, Device, Result, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn per_call(calls: usize, dev: &Device, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
    let sync = |d: &Device| -> Result<()> {
        match d {
            Device::Cuda(i) => cuda::synchronize(*i),
            Device::Wgpu(i) => stride_core::webgpu::synchronize(*i),
            Device::Cpu => Ok(()),
        }
    };
    for _ in 0..calls.min(1000) {
        f()?;
    }
    sync(dev)?;
    let mut v = vec![];
    for _ in 0..9 {
        let t = Instant::now();
        for _ in 0..calls {
            f()?;
        }
        sync(dev)?;
        v.push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
    }
    Ok(median(v))
}

fn main() -> Result<()> {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let mut devices = vec![Device::Cpu];
    if cuda::is_available() {
        devices.push(Device::cuda(0)?);
    }
    println!("µs per call, median of 9 batches of {calls} calls");
    println!(
        "{:<8} {:<28} {:>10} {:>12}",
        "device", "op", "tools off", "profiler on"
    );
    for dev in &devices {
        let a = Tensor::randn([256], DType::F32, dev, None)?;
        let b = Tensor::randn([256], DType::F32, dev, None)?;
        let m = Tensor::randn([4, 4], DType::F32, dev, None)?;
        let mut ops: Vec<(&str, Box<dyn FnMut() -> Result<()>>)> = vec![
            ("add_ of 256 f32", Box::new(|| a.add_(&b).map(drop))),
            (
                "mul of 256 f32 (new tensor)",
                Box::new(|| a.mul(&b).map(drop)),
            ),
            (
                "exp of 256 f32 (new tensor)",
                Box::new(|| a.exp().map(drop)),
            ),
            ("matmul 4x4", Box::new(|| m.matmul(&m).map(drop))),
            ("sum of 256 f32", Box::new(|| a.sum().map(drop))),
        ];
        for (name, f) in ops.iter_mut() {
            let off = per_call(calls, dev, f.as_mut())?;
            // keep the profile small: a tenth of the calls
            let prof = debug::Profiler::start();
            let profiled = per_call(calls / 10, dev, f.as_mut())?;
            drop(prof.stop()?);
            println!(
                "{:<8} {:<28} {:>10.2} {:>12.2}",
                dev.to_string(),
                name,
                off,
                profiled
            );
        }
    }
    Ok(())
}
