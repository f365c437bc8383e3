//! `stride bench quant-cuda`: the CUDA products with GGUF block-quantized weights
//! (`stride_core::cuda::quant`) on SmolLM2-135M's weight shapes, beside the device's copy
//! bandwidth (the floor of a product that reads each weight byte once) and cuBLAS's bf16
//! product of the same shape.
//!
//! Each row times whole products as the model runs them, by one path: `two-launch` (the
//! activations rounded to Q8 blocks by one launch, the product by another, per weight) or
//! `fused` (one launch that rounds the rows itself: decode, `m ≤ 8`). The groups `qkv` and
//! `gate/up` are a layer's products sharing one input: separate two-launch products, or one
//! `quantized_matmul_many` launch. Decode rows (`m = 1`) are timed as the decode step runs
//! them, replayed from a CUDA graph of 100 products; the large-m rows eagerly. The weights
//! cycle through enough copies to fill 256 MiB, so that no call finds its weight in the 50 MB
//! L2 cache of an H100: the bandwidth figure is of HBM, as in a decode step that reads every
//! matrix once.

use serde_json::json;
use stride::cuda::quant::{quantized_matmul_many_with, BlockFormat, QuantPath};
use stride::{cuda, DType, Device, Tensor};
use stride_gguf::GgmlType;
use stride_quant::QMatrix;

type SResult<T> = stride::Result<T>;

#[derive(clap::Args)]
pub struct QuantCudaArgs {
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Activation rows of the large-m row (the tiled path).
    #[arg(long, default_value_t = 512)]
    big_m: usize,
    /// Timed batches per row (the median is reported).
    #[arg(long, default_value_t = 15)]
    batches: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// SmolLM2-135M's matrices, `(name, [n of each matrix sharing the input], k)` of
/// `y = x · Wᵀ`.
const SHAPES: [(&str, &[usize], usize); 7] = [
    ("q_proj/o_proj", &[576], 576),
    ("k_proj/v_proj", &[192], 576),
    ("gate/up_proj", &[1536], 576),
    ("down_proj", &[576], 1536),
    ("lm_head", &[49152], 576),
    ("qkv", &[576, 192, 192], 576),
    ("gate+up", &[1536, 1536], 576),
];

/// Bytes the weight copies fill, past any L2 cache.
const ROTATE_BYTES: usize = 256 << 20;

/// Products per captured graph of the decode rows.
const GRAPH_CALLS: usize = 100;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Device seconds per call: `calls` calls between events after a warm-up, median of
/// `batches` batches.
fn time_calls(
    dev: usize,
    batches: usize,
    calls: usize,
    mut f: impl FnMut(usize) -> SResult<()>,
) -> SResult<f64> {
    for i in 0..calls.min(4) {
        f(i)?;
    }
    cuda::synchronize(dev)?;
    let mut ts = Vec::with_capacity(batches);
    let mut i = 0;
    for _ in 0..batches {
        let ((), s) = cuda::time_on_device(dev, || {
            for _ in 0..calls {
                f(i)?;
                i += 1;
            }
            Ok(())
        })?;
        ts.push(s / calls as f64);
    }
    Ok(median(ts))
}

/// Device seconds per call of `f` replayed from a CUDA graph of [`GRAPH_CALLS`] calls (after
/// an eager warm-up that compiles the kernels), median of `batches` replays.
fn time_graph(
    dev: usize,
    gpu: &Device,
    batches: usize,
    mut f: impl FnMut(usize) -> SResult<()>,
) -> SResult<f64> {
    for i in 0..4 {
        f(i)?;
    }
    cuda::synchronize(dev)?;
    let (graph, ()) = cuda::CudaGraph::capture(gpu, || {
        for i in 0..GRAPH_CALLS {
            f(i)?;
        }
        Ok(())
    })?;
    graph.replay()?;
    cuda::synchronize(dev)?;
    let mut ts = Vec::with_capacity(batches);
    for _ in 0..batches {
        let ((), s) = cuda::time_on_device(dev, || graph.replay())?;
        ts.push(s / GRAPH_CALLS as f64);
    }
    Ok(median(ts))
}

/// One weight's blocks in enough copies on the device to fill [`ROTATE_BYTES`].
fn rotating_copies(q: &QMatrix, gpu: &Device) -> SResult<Vec<Tensor>> {
    let bytes = q.as_bytes().len();
    let copies = ROTATE_BYTES.div_ceil(bytes).max(2);
    let mut host = Vec::with_capacity(copies * bytes);
    for _ in 0..copies {
        host.extend_from_slice(q.as_bytes());
    }
    let all = Tensor::from_vec(host, [copies * bytes])?.to_device(gpu)?;
    (0..copies)
        .map(|c| all.narrow(0, (c * bytes) as i64, bytes))
        .collect()
}

pub fn run(a: QuantCudaArgs) -> Result<(), String> {
    let e = |e: stride::Error| e.to_string();
    let d = a.device;
    let gpu = Device::cuda(d).map_err(e)?;
    let (name, (maj, min)) = cuda::device_info(d).map_err(e)?;
    let copy_bw = cuda::memcpy_bandwidth(d, 256 << 20, 10).map_err(e)?;
    let mut rows = Vec::new();
    let mut lines = vec![format!(
        "stride bench quant-cuda on {name} (sm_{maj}{min}); copy bandwidth {:.0} GB/s (read + write)",
        copy_bw / 1e9
    )];
    lines.push(format!(
        "{:<14} {:>12} {:>5} {:>5} {:>5} {:<10} {:>10} {:>7} {:>8} {:>8} {:>11}",
        "matrix",
        "n",
        "k",
        "type",
        "m",
        "path",
        "time",
        "GB/s",
        "of copy",
        "TFLOP/s",
        "bf16 cuBLAS"
    ));
    for (label, ns, k) in SHAPES {
        let ws: Vec<Vec<f32>> = ns
            .iter()
            .enumerate()
            .map(|(j, &n)| {
                (0..n * k)
                    .map(|i| {
                        ((i.wrapping_add(j * 7919).wrapping_mul(2654435761) >> 7) % 2001) as f32
                            / 1000.0
                            - 1.0
                    })
                    .collect()
            })
            .collect();
        let n_all: usize = ns.iter().sum();
        let n_label = ns
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join("+");
        // cuBLAS's bf16 product of the single matrices (a group: of its rows stacked)
        let wb = Tensor::from_vec(ws.concat(), [n_all, k])
            .and_then(|t| t.to_dtype(DType::BF16))
            .and_then(|t| t.to_device(&gpu))
            .map_err(e)?;
        for ty in [GgmlType::Q4_1, GgmlType::Q8_0] {
            let fmt = BlockFormat::from_name(ty.name()).expect("a CUDA format");
            let mut copies = Vec::new();
            let mut bytes = 0;
            for (w, &n) in ws.iter().zip(ns) {
                let q = QMatrix::quantize(ty, n, k, w).map_err(|e| e.to_string())?;
                bytes += q.as_bytes().len();
                copies.push(rotating_copies(&q, &gpu).map_err(e)?);
            }
            let ms: &[usize] = if ns.len() > 1 { &[1] } else { &[1, a.big_m] };
            for &m in ms {
                let x = Tensor::randn([m, k], DType::F32, &gpu, None).map_err(e)?;
                let xb = x.to_dtype(DType::BF16).map_err(e)?;
                let wt = wb.t().map_err(e)?;
                let tb = if m == 1 {
                    time_graph(d, &gpu, a.batches, |_| xb.matmul(&wt).map(|_| ()))
                } else {
                    time_calls(d, a.batches, 20, |_| xb.matmul(&wt).map(|_| ()))
                }
                .map_err(e)?;
                let paths: &[(&str, QuantPath)] = if m <= 8 {
                    &[
                        ("two-launch", QuantPath::TwoLaunch),
                        ("fused", QuantPath::Fused),
                    ]
                } else {
                    &[("two-launch", QuantPath::TwoLaunch)]
                };
                for &(pname, path) in paths {
                    let product = |i: usize| -> SResult<()> {
                        let group: Vec<(&Tensor, BlockFormat, usize)> = copies
                            .iter()
                            .zip(ns)
                            .map(|(c, &n)| (&c[i % c.len()], fmt, n))
                            .collect();
                        if path == QuantPath::TwoLaunch {
                            // before matmul_many: one product per matrix
                            for w in &group {
                                quantized_matmul_many_with(&x, &[*w], k, path)?;
                            }
                        } else {
                            quantized_matmul_many_with(&x, &group, k, path)?;
                        }
                        Ok(())
                    };
                    let t = if m == 1 {
                        time_graph(d, &gpu, a.batches, product)
                    } else {
                        time_calls(d, a.batches, 20, product)
                    }
                    .map_err(e)?;
                    let gbs = bytes as f64 / t / 1e9;
                    let tflops = 2.0 * (m * n_all * k) as f64 / t / 1e12;
                    lines.push(format!(
                        "{:<14} {:>12} {:>5} {:>5} {:>5} {:<10} {:>8.2}µs {:>7.0} {:>7.0}% {:>8.2} {:>9.2}µs",
                        label,
                        n_label,
                        k,
                        ty.name(),
                        m,
                        pname,
                        t * 1e6,
                        gbs,
                        100.0 * gbs * 1e9 / (copy_bw / 2.0),
                        tflops,
                        tb * 1e6
                    ));
                    rows.push(json!({
                        "matrix": label, "n": ns, "k": k, "type": ty.name(), "m": m,
                        "path": pname, "seconds": t, "weight_bytes": bytes, "gb_per_s": gbs,
                        "tflops": tflops, "bf16_cublas_seconds": tb,
                    }));
                }
            }
        }
    }
    lines.push(
        "GB/s: weight bytes ÷ time; \"of copy\": against half the copy figure (a copy reads and writes each byte); m = 1 rows replayed from a CUDA graph"
            .into(),
    );
    if a.json {
        let v = json!({
            "device": name, "copy_bandwidth_bytes_per_s": copy_bw, "rows": rows,
        });
        println!("{v}");
    } else {
        println!("{}", lines.join("\n"));
    }
    Ok(())
}
