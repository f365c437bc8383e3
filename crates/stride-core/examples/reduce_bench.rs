//! Timing of reductions on a 4096×4096 f32 (and friends), next to a floor: a plain
//! multi-lane sum over the raw buffer, and a plain copy. Run with
//! `cargo run --release -p stride-core --example reduce_bench` (RAYON_NUM_THREADS to vary).
use rayon::prelude::*;
use std::time::Instant;
use stride_core::{DType, Tensor};

fn time(name: &str, bytes: usize, mut f: impl FnMut()) {
    f();
    let mut best = f64::MAX;
    for _ in 0..10 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!(
        "{name:36} {:9.3} ms {:7.2} GB/s",
        best * 1e3,
        bytes as f64 / best / 1e9
    );
}

fn lanes(v: &[f32]) -> f64 {
    let mut l = [0f64; 8];
    for c in v.chunks_exact(8) {
        for j in 0..8 {
            l[j] += c[j] as f64;
        }
    }
    l.iter().sum()
}

fn lanes_max(v: &[f32]) -> f32 {
    let pick = |a: f32, b: f32| if a.is_nan() | (a >= b) { a } else { b };
    let mut l = [f32::NEG_INFINITY; 8];
    for c in v.chunks_exact(8) {
        for j in 0..8 {
            l[j] = pick(l[j], c[j]);
        }
    }
    l.iter().fold(f32::NEG_INFINITY, |a, &b| pick(a, b))
}

fn lanes_max_plain(v: &[f32]) -> f32 {
    let mut l = [f32::NEG_INFINITY; 8];
    for c in v.chunks_exact(8) {
        for j in 0..8 {
            l[j] = if l[j] >= c[j] { l[j] } else { c[j] };
        }
    }
    l.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b))
}

fn lanes_max_tuple(v: &[f32]) -> f32 {
    let step = |a: (f32, bool), b: f32| (if a.0 > b { a.0 } else { b }, a.1 | b.is_nan());
    let mut l = [(f32::NEG_INFINITY, false); 8];
    for c in v.chunks_exact(8) {
        for j in 0..8 {
            l[j] = step(l[j], c[j]);
        }
    }
    if l.iter().any(|x| x.1) {
        f32::NAN
    } else {
        l.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b.0))
    }
}

fn main() {
    let n = 4096;
    let raw: Vec<f32> = (0..n * n)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3)
        .collect();
    let x = Tensor::from_vec(raw.clone(), [n, n]).unwrap();
    let b = n * n * 4;
    println!("threads: {}", rayon::current_num_threads());
    time("floor: raw lane sum, rayon rows", b, || {
        let s: f64 = raw.par_chunks(n * 64).map(lanes).sum();
        std::hint::black_box(s);
    });
    let mut dst = vec![0f32; n * n];
    time("floor: raw copy into warm buffer", 2 * b, || {
        dst.par_chunks_mut(n * 64)
            .zip(raw.par_chunks(n * 64))
            .for_each(|(d, s)| d.copy_from_slice(s));
    });
    time("floor: fresh 4096² f32 tensor (alloc+fill)", b, || {
        std::hint::black_box(
            Tensor::full([n, n], 1.0, DType::F32, &stride_core::Device::Cpu).unwrap(),
        );
    });
    time("floor: raw lane max (NaN-propagating)", b, || {
        let s: f32 = raw
            .par_chunks(n * 64)
            .map(lanes_max)
            .reduce(|| f32::NEG_INFINITY, f32::max);
        std::hint::black_box(s);
    });
    time("floor: raw lane max (plain)", b, || {
        let s: f32 = raw
            .par_chunks(n * 64)
            .map(lanes_max_plain)
            .reduce(|| f32::NEG_INFINITY, f32::max);
        std::hint::black_box(s);
    });
    time("floor: raw lane max (tuple flag)", b, || {
        let s: f32 = raw
            .par_chunks(n * 64)
            .map(lanes_max_tuple)
            .reduce(|| f32::NEG_INFINITY, f32::max);
        std::hint::black_box(s);
    });
    time("floor: raw column sum, 2 tiles", b, || {
        let w = n / 2;
        let s: Vec<Vec<f64>> = (0..2)
            .into_par_iter()
            .map(|t| {
                let mut acc = vec![0f64; w];
                for r in 0..n {
                    let row = &raw[r * n + t * w..r * n + t * w + w];
                    for (a, &x) in acc.iter_mut().zip(row) {
                        *a += x as f64;
                    }
                }
                acc
            })
            .collect();
        std::hint::black_box(s);
    });
    time("sum dim -1", b, || {
        x.sum_dims(&[-1], false).unwrap();
    });
    time("sum dim 0", b, || {
        x.sum_dims(&[0], false).unwrap();
    });
    time("sum all", b, || {
        x.sum().unwrap();
    });
    time("sum dim 0 of transposed (row mode)", b, || {
        x.t().unwrap().sum_dims(&[0], false).unwrap();
    });
    time("mean dim -1", b, || {
        x.mean_dims(&[-1], false).unwrap();
    });
    time("amax dim -1", b, || {
        x.amax(&[-1], false).unwrap();
    });
    time("amax dim 0", b, || {
        x.amax(&[0], false).unwrap();
    });
    time("argmax dim -1", b, || {
        x.argmax(Some(-1), false).unwrap();
    });
    time("argmax dim 0", b, || {
        x.argmax(Some(0), false).unwrap();
    });
    time("var dim -1", b, || {
        x.var(&[-1], 1.0, false).unwrap();
    });
    time("softmax dim -1", 2 * b, || {
        x.softmax(-1).unwrap();
    });
    time("log_softmax dim -1", 2 * b, || {
        x.log_softmax(-1).unwrap();
    });
    time("cumsum dim -1", 2 * b, || {
        x.cumsum(-1).unwrap();
    });
    time("cumsum dim 0", 2 * b, || {
        x.cumsum(0).unwrap();
    });
    let h = x.to_dtype(DType::BF16).unwrap();
    time("bf16 sum dim -1", b / 2, || {
        h.sum_dims(&[-1], false).unwrap();
    });
    time("bf16 sum dim 0", b / 2, || {
        h.sum_dims(&[0], false).unwrap();
    });
    let d = x.to_dtype(DType::F64).unwrap();
    time("f64 sum dim -1", b * 2, || {
        d.sum_dims(&[-1], false).unwrap();
    });
    time("f64 sum dim 0", b * 2, || {
        d.sum_dims(&[0], false).unwrap();
    });
    let s = x.sum_dims(&[-1], false).unwrap().to_vec::<f32>().unwrap();
    let c = x.sum_dims(&[0], false).unwrap().to_vec::<f32>().unwrap();
    println!(
        "check {} {} {}",
        s[0],
        c[0],
        x.sum().unwrap().item::<f32>().unwrap()
    );
}
