//! After backward (without retain_graph) the graph and its saved tensors are freed: 10,000
//! forward/backward/update steps of a small MLP keep stride's allocated bytes flat. (Its own
//! test binary, so no other test allocates concurrently.)

use stride_core::{autograd, memory_stats, DType, Device, Error, Tensor};

fn param(rows: usize, cols: usize, seed: u64) -> Result<Tensor, Error> {
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| (((i as u64 * 2654435761 + seed) % 1000) as f32 / 1000.0 - 0.5) * 0.3)
        .collect();
    Tensor::from_vec(v, [rows, cols])?.requires_grad_(true)
}

#[test]
fn training_loop_keeps_memory_flat() -> Result<(), Error> {
    let (w1, b1, w2) = (param(8, 16, 1)?, param(1, 16, 2)?, param(16, 1, 3)?);
    let x = Tensor::from_vec(
        (0..32).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(),
        [4, 8],
    )?;
    let target = Tensor::from_vec(vec![0.5f32, -0.25, 1.0, 0.0], [4, 1])?;
    let step = || -> Result<f32, Error> {
        let h = x.matmul(&w1)?.add(&b1)?.relu()?;
        let y = h.matmul(&w2)?;
        let loss = y.sub(&target)?.square()?.mean()?;
        loss.backward()?;
        let _g = autograd::no_grad();
        for w in [&w1, &b1, &w2] {
            w.sub_(&w.grad().unwrap().mul(0.05)?)?;
            w.set_grad(None)?;
        }
        loss.item::<f32>()
    };
    let first = step()?;
    for _ in 0..10 {
        step()?;
    }
    let before = memory_stats(Device::Cpu).allocated_bytes;
    let mut last = 0.0;
    for _ in 0..10_000 {
        last = step()?;
    }
    let after = memory_stats(Device::Cpu).allocated_bytes;
    assert_eq!(
        after, before,
        "allocated bytes grew from {before} to {after} over 10,000 steps"
    );
    assert!(
        last < first,
        "the loop should learn: loss {first} -> {last}"
    );
    let _ = DType::F32;
    Ok(())
}
