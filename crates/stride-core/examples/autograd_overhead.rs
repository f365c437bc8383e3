//! Autograd bookkeeping overhead on tiny tensors, where it dominates: per op, the time of the
//! forward without grad (inputs that don't require grad), the forward while recording
//! (inputs that require grad: one graph node, saved tensors, edges), and the backward pass
//! through that one op (plus the final accumulation into the leaves' `.grad`).
//!
//! ```text
//! cargo run --release --example autograd_overhead -p stride-core [-- ITERS]
//! ```
//!
//! Times are medians over batches, in µs per op. Nothing here asserts on time.

use std::time::Instant;
use stride_core::{PadMode, Result, Tensor};

type Op = fn(&[Tensor]) -> Result<Tensor>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// µs per call of `f`, median of `batches` batches of `iters` calls.
fn time(iters: usize, batches: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..iters.min(100) {
        f()?;
    }
    let mut v = vec![];
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        v.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
    }
    Ok(median(v))
}

fn main() -> Result<()> {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let batches = 9;
    let x = |seed: f64| -> Result<Tensor> {
        let v: Vec<f32> = (0..16)
            .map(|i| ((i as f32) * 0.37 + seed as f32).sin())
            .collect();
        Tensor::from_vec(v, [4, 4])
    };

    let ops: Vec<(&str, usize, Op)> = vec![
        ("add", 2, |t| t[0].add(&t[1])),
        ("mul", 2, |t| t[0].mul(&t[1])),
        ("exp", 1, |t| t[0].exp()),
        ("matmul", 2, |t| t[0].matmul(&t[1])),
        ("sum", 1, |t| t[0].sum()),
        ("sum_dims", 1, |t| t[0].sum_dims(&[1], false)),
        ("softmax", 1, |t| t[0].softmax(1)),
        ("transpose", 1, |t| t[0].transpose(0, 1)),
        ("reshape", 1, |t| t[0].reshape(&[16])),
        ("index_select", 1, |t| {
            let i = Tensor::from_vec(vec![2i64, 0, 3, 1], [4])?;
            t[0].index_select(0, &i)
        }),
        ("gather", 1, |t| {
            let i = Tensor::from_vec(vec![1i64, 0, 3, 2], [4, 1])?;
            t[0].gather(1, &i)
        }),
        ("cat", 2, |t| Tensor::cat(&[&t[0], &t[1]], 0)),
        ("pad", 1, |t| t[0].pad(&[1, 1], PadMode::constant(0.0))),
        ("sort", 1, |t| Ok(t[0].sort(1, false, true)?.0)),
    ];

    println!("autograd bookkeeping on 4×4 f32 tensors, µs per op (median of {batches}×{iters})");
    println!(
        "{:<14} {:>10} {:>12} {:>10} {:>10}",
        "op", "no grad", "recording", "overhead", "backward"
    );
    for (name, arity, f) in ops {
        let plain: Vec<Tensor> = (0..arity).map(|i| x(i as f64)).collect::<Result<_>>()?;
        let leaves: Vec<Tensor> = (0..arity)
            .map(|i| x(i as f64)?.requires_grad_(true))
            .collect::<Result<_>>()?;
        let t_plain = time(iters, batches, || f(&plain).map(|_| ()))?;
        let t_rec = time(iters, batches, || f(&leaves).map(|_| ()))?;
        // backward: record once per iteration outside the timer is not possible per call, so
        // time forward+backward and subtract the recording forward
        let t_both = time(iters, batches, || {
            let y = f(&leaves)?;
            let y = if y.dim() == 0 { y } else { y.sum()? };
            y.backward()?;
            Ok(())
        })?;
        let t_sum = if f(&leaves)?.dim() == 0 {
            0.0
        } else {
            time(iters, batches, || f(&leaves)?.sum().map(|_| ()))? - t_rec
        };
        let t_back = (t_both - t_rec - t_sum).max(0.0);
        println!(
            "{name:<14} {t_plain:>10.2} {t_rec:>12.2} {:>10.2} {t_back:>10.2}",
            t_rec - t_plain
        );
    }
    println!(
        "(backward = forward+backward − recording forward − the final sum's forward; it \
         includes the sum's backward and the accumulation into each leaf's .grad)"
    );
    Ok(())
}
