//! `stride bench quant-cuda`: the CUDA products with GGUF block-quantized weights
//! (`stride_core::cuda::quant`) on SmolLM2-135M's weight shapes, beside the device's copy
//! bandwidth (the floor of a product that reads each weight byte once) and cuBLAS's bf16
//! product of the same shape.
//!
//! Each row times one whole product — the activations' Q8 rounding and the block product,
//! two launches — as the model runs it. The weights cycle through enough copies to fill
//! 256 MiB, so that no call finds its weight in the 50 MB L2 cache of an H100: the bandwidth
//! figure is of HBM, as in a decode step that reads every matrix once.

use serde_json::json;
use stride::cuda::quant::{quantized_matmul, BlockFormat};
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

/// SmolLM2-135M's matrices, `(name, n, k)` of `y = x · Wᵀ`.
const SHAPES: [(&str, usize, usize); 5] = [
    ("q_proj/o_proj", 576, 576),
    ("k_proj/v_proj", 192, 576),
    ("gate/up_proj", 1536, 576),
    ("down_proj", 576, 1536),
    ("lm_head", 49152, 576),
];

/// Bytes the weight copies fill, past any L2 cache.
const ROTATE_BYTES: usize = 256 << 20;

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
        "{:<14} {:>6} {:>5} {:>5} {:>5} {:>10} {:>9} {:>8} {:>10} {:>9}",
        "matrix", "n", "k", "type", "m", "time", "GB/s", "of copy", "TFLOP/s", "bf16 cuBLAS"
    ));
    for (label, n, k) in SHAPES {
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i.wrapping_mul(2654435761) >> 7) % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let wb = Tensor::from_vec(w.clone(), [n, k])
            .and_then(|t| t.to_dtype(DType::BF16))
            .and_then(|t| t.to_device(&gpu))
            .map_err(e)?;
        for ty in [GgmlType::Q4_1, GgmlType::Q8_0] {
            let q = QMatrix::quantize(ty, n, k, &w).map_err(|e| e.to_string())?;
            let fmt = BlockFormat::from_name(ty.name()).expect("a CUDA format");
            let bytes = q.as_bytes().len();
            let copies = ROTATE_BYTES.div_ceil(bytes).max(2);
            let mut host = Vec::with_capacity(copies * bytes);
            for _ in 0..copies {
                host.extend_from_slice(q.as_bytes());
            }
            let all = Tensor::from_vec(host, [copies * bytes])
                .and_then(|t| t.to_device(&gpu))
                .map_err(e)?;
            let blocks: Vec<Tensor> = (0..copies)
                .map(|c| all.narrow(0, (c * bytes) as i64, bytes))
                .collect::<SResult<_>>()
                .map_err(e)?;
            for m in [1usize, a.big_m] {
                let x = Tensor::randn([m, k], DType::F32, &gpu, None).map_err(e)?;
                let calls = if m == 1 { 200 } else { 20 };
                let t = time_calls(d, a.batches, calls, |i| {
                    quantized_matmul(&x, &blocks[i % copies], fmt, n, k).map(|_| ())
                })
                .map_err(e)?;
                let xb = x.to_dtype(DType::BF16).map_err(e)?;
                let wt = wb.t().map_err(e)?;
                let tb =
                    time_calls(d, a.batches, calls, |_| xb.matmul(&wt).map(|_| ())).map_err(e)?;
                let gbs = bytes as f64 / t / 1e9;
                let tflops = 2.0 * (m * n * k) as f64 / t / 1e12;
                lines.push(format!(
                    "{:<14} {:>6} {:>5} {:>5} {:>5} {:>8.2}µs {:>9.0} {:>7.0}% {:>10.2} {:>7.2}µs",
                    label,
                    n,
                    k,
                    ty.name(),
                    m,
                    t * 1e6,
                    gbs,
                    100.0 * gbs * 1e9 / (copy_bw / 2.0),
                    tflops,
                    tb * 1e6
                ));
                rows.push(json!({
                    "matrix": label, "n": n, "k": k, "type": ty.name(), "m": m,
                    "seconds": t, "weight_bytes": bytes, "gb_per_s": gbs,
                    "tflops": tflops, "bf16_cublas_seconds": tb,
                }));
            }
        }
    }
    lines.push(
        "GB/s: weight bytes ÷ time; \"of copy\": against half the copy figure (a copy reads and writes each byte)"
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
