//! `stride bench cuda`: GPU benchmarks beside their floor (bytes ÷ the device's own
//! device-to-device copy bandwidth, measured in the same run; for the attention rows flops ÷
//! the H100's dense bf16 peak) and beside PyTorch eager (`scripts/bench_torch.py`, run in the
//! same invocation on the same GPU; the attention rows beside two of its SDPA backends,
//! FlashAttention and cuDNN). GPU times are device times between CUDA events (median of
//! batches after a warm-up); the tiny-op row is host time per call, which is what it
//! measures. Nothing here asserts on time.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;
use stride::{cuda, DType, Device, Generator, Result as SResult, Tensor};

#[derive(clap::Args)]
pub struct CudaArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Small sizes and few repetitions: a smoke run, not a measurement.
    #[arg(long)]
    quick: bool,
    /// Don't run the PyTorch peer.
    #[arg(long)]
    no_peer: bool,
    /// The Python interpreter that runs the PyTorch peer.
    #[arg(long, default_value = "python3")]
    python: String,
    /// The CUDA device.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Only the rows whose id starts with one of these comma-separated prefixes (e.g.
    /// `copy,sum,sae_step_16x,attention`; `first_call` for the fresh-process row), here and in
    /// the peer. A prefix ending in `$` is a whole id: `attention_fwd_d64_s1024$` is that row
    /// without its `_causal` sibling.
    #[arg(long)]
    only: Option<String>,
    /// Internal: measure the first op of a fresh process and print JSON (used by the bench
    /// itself, once with a cold and once with a warm kernel cache).
    #[arg(long, hide = true)]
    first_call: bool,
}

/// What a row must reach.
#[derive(Clone, Copy)]
enum Target {
    /// At least this fraction of the measured copy bandwidth.
    Bandwidth(f64),
    /// At most this factor of PyTorch's time.
    WithinOfTorch(f64),
    /// Faster than PyTorch.
    FasterThanTorch,
    /// None: the row reports its figure beside the floor and PyTorch.
    Report,
}

/// Dense bf16 tensor-core peak of an H100 SXM5 in flop/s: NVIDIA's H100 datasheet gives
/// 1,979 TFLOPS "with sparsity", half of it dense (989 TFLOPS). The attention rows' floor is
/// flops ÷ this; on another GPU it is nominal.
const H100_SXM_BF16_DENSE_PEAK: f64 = 989e12;

/// Whether row `id` is selected by `--only` (`None`: every row): a comma-separated list of id
/// prefixes; one ending in `$` must be the whole id. `scripts/bench_torch.py` selects alike.
fn selected(only: Option<&str>, id: &str) -> bool {
    only.is_none_or(|o| {
        o.split(',').any(|p| match p.strip_suffix('$') {
            Some(whole) => id == whole,
            None => !p.is_empty() && id.starts_with(p),
        })
    })
}

struct Row {
    id: String,
    name: String,
    seconds: f64,
    bytes: f64,
    flops: f64,
    target: Target,
    /// Host time per call (the tiny-op row) rather than device time.
    host: bool,
    /// The floor is `flops / peak` (flop/s) rather than `bytes /` copy bandwidth.
    peak: Option<f64>,
    /// More PyTorch figures for this row: (label, the peer's key), shown on a line under it.
    /// The row's own PyTorch figure is the peer's key `id`.
    alt_peers: Vec<(&'static str, String)>,
    /// Why stride's side of the row failed (`seconds` is then NaN); the bench goes on.
    error: Option<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Device seconds per call of `f`: one warm-up call, then `batches` batches of `reps` calls
/// between events; the median batch.
/// Two buffers of the bandwidth copy's size: [`gpu_time`] copies one into the other before
/// each timed batch (~0.2 ms on an H100), time in which the host queues the whole batch.
/// `scripts/bench_torch.py` does the same for the peer.
static QUEUE_AHEAD: std::sync::OnceLock<(Tensor, Tensor)> = std::sync::OnceLock::new();

fn gpu_time(
    dev: usize,
    reps: usize,
    batches: usize,
    mut f: impl FnMut() -> SResult<()>,
) -> SResult<f64> {
    f()?;
    cuda::synchronize(dev)?;
    let mut ts = Vec::with_capacity(batches);
    for _ in 0..batches {
        // the device copies QUEUE_AHEAD first, so the batch's launches are all queued before
        // the start event: the events time the device, not the host's per-call cost
        if let Some((dst, src)) = QUEUE_AHEAD.get() {
            dst.copy_(src)?;
        }
        let ((), s) = cuda::time_on_device(dev, || {
            for _ in 0..reps {
                f()?;
            }
            Ok(())
        })?;
        ts.push(s / reps as f64);
    }
    Ok(median(ts))
}

pub fn run(args: CudaArgs) -> Result<(), String> {
    if args.first_call {
        return first_call(args.device).map_err(|e| e.to_string());
    }
    let e = |e: stride::Error| e.to_string();
    let dev = Device::cuda(args.device).map_err(e)?;
    let d = args.device;
    let (name, arch) = cuda::device_info(d).map_err(e)?;
    let say = |s: &str| {
        if !args.json {
            eprintln!("{s}");
        }
    };
    let q = args.quick;
    let (reps, batches) = if q { (2, 3) } else { (10, 7) };
    say("measuring the device-to-device copy bandwidth ...");
    let big = if q { 1 << 22 } else { 1 << 26 }; // elements (64M f32 = 256 MiB)
    let bw = cuda::memcpy_bandwidth(d, big * 4, if q { 3 } else { 20 }).map_err(e)?;
    let gen = Generator::new(0);
    let ahead = || Tensor::zeros([big], DType::F32, &dev);
    let _ = QUEUE_AHEAD.set((ahead().map_err(e)?, ahead().map_err(e)?));
    let only = args.only.clone();
    let want = move |id: &str| selected(only.as_deref(), id);
    let mut rows: Vec<Row> = vec![];
    let mut add = |id: &str, name: String, seconds: f64, bytes: f64, flops: f64, t: Target| {
        say(&format!("  {name}"));
        rows.push(Row {
            id: id.into(),
            name,
            seconds,
            bytes,
            flops,
            target: t,
            host: false,
            peak: None,
            alt_peers: vec![],
            error: None,
        });
    };
    // -- copies and elementwise over 64M f32, contiguous and transposed ------------------
    let side = (big as f64).sqrt() as usize; // 8192
    let n = side * side;
    let nb = (n * 4) as f64;
    let x = Tensor::randn([side, side], DType::F32, &dev, Some(&gen)).map_err(e)?;
    let y = Tensor::randn([side, side], DType::F32, &dev, Some(&gen)).map_err(e)?;
    let out = Tensor::empty([side, side], DType::F32, &dev).map_err(e)?;
    let m = format!("{}M", n >> 20);
    if want("copy") {
        let t = gpu_time(d, reps, batches, || out.copy_(&x).map(|_| ())).map_err(e)?;
        add(
            "copy",
            format!("copy {m} f32"),
            t,
            2.0 * nb,
            0.0,
            Target::Bandwidth(0.85),
        );
    }
    let xt = x.t().map_err(e)?;
    if want("copy_t") {
        let t = gpu_time(d, reps, batches, || out.copy_(&xt).map(|_| ())).map_err(e)?;
        add(
            "copy_t",
            format!("copy {m} f32 from a transposed view"),
            t,
            2.0 * nb,
            0.0,
            Target::Bandwidth(0.85),
        );
    }
    if want("add") {
        let t = gpu_time(d, reps, batches, || x.add(&y).map(|_| ())).map_err(e)?;
        add(
            "add",
            format!("add {m} f32"),
            t,
            3.0 * nb,
            0.0,
            Target::Bandwidth(0.85),
        );
    }
    let yt = y.t().map_err(e)?;
    if want("add_t") {
        let t = gpu_time(d, reps, batches, || x.add(&yt).map(|_| ())).map_err(e)?;
        add(
            "add_t",
            format!("add {m} f32, one operand transposed"),
            t,
            3.0 * nb,
            0.0,
            Target::Bandwidth(0.85),
        );
    }
    let w = Tensor::randn([side, side], DType::F32, &dev, Some(&gen)).map_err(e)?;
    let wt = w.t().map_err(e)?;
    if want("mul_t_inplace") {
        let t = gpu_time(d, reps, batches, || wt.mul_(1.0).map(|_| ())).map_err(e)?;
        add(
            "mul_t_inplace",
            format!("mul_ into w.t(), {m} f32"),
            t,
            2.0 * nb,
            0.0,
            Target::Bandwidth(0.85),
        );
    }
    // a full sum of 256 MiB (larger than the L2 cache, unlike the 25 MiB row below)
    if want("sum_all_256m") {
        let t = gpu_time(d, reps, batches, || x.sum().map(|_| ())).map_err(e)?;
        add(
            "sum_all_256m",
            format!("sum of all of {m} f32"),
            t,
            nb,
            0.0,
            Target::Bandwidth(0.80),
        );
    }
    drop((x, y, out, xt, yt, w, wt));
    // -- reductions of a 16k x 16k f32 -----------------------------------------------------
    let rs = if q { 2048 } else { 16384 };
    let r = Tensor::randn([rs, rs], DType::F32, &dev, Some(&gen)).map_err(e)?;
    let rb = (rs * rs * 4) as f64;
    if want("sum_last") {
        let t = gpu_time(d, reps, batches, || r.sum_dims(&[-1], false).map(|_| ())).map_err(e)?;
        add(
            "sum_last",
            format!("sum over the last dim of {rs}x{rs} f32"),
            t,
            rb,
            0.0,
            Target::Bandwidth(0.80),
        );
    }
    if want("sum_first") {
        let t = gpu_time(d, reps, batches, || r.sum_dims(&[0], false).map(|_| ())).map_err(e)?;
        add(
            "sum_first",
            format!("sum over the first dim of {rs}x{rs} f32"),
            t,
            rb,
            0.0,
            Target::Bandwidth(0.80),
        );
    }
    drop(r);
    // -- the SAE's own reductions at realistic sizes ---------------------------------------
    // a full sum of 25 MiB f32 (the loss's mean over a [4096, 1536] batch): one output, so
    // the split schedule; floor = 25 MiB read once ÷ copy bandwidth (~8.4 us on an H100)
    if want("sum_all") {
        let s = Tensor::randn([2560, 2560], DType::F32, &dev, Some(&gen)).map_err(e)?;
        let t = gpu_time(d, reps, batches, || s.sum().map(|_| ())).map_err(e)?;
        add(
            "sum_all",
            "sum of all of 2560x2560 f32 (25 MiB)".into(),
            t,
            (2560 * 2560 * 4) as f64,
            0.0,
            Target::Bandwidth(0.80),
        );
    }
    // a Linear layer's bias at the SAE's size ([4096, 24576] activations): the forward's add
    // of a [24576] row to every row (floor: read the activations, write the sum) and the
    // gradient's sum over the batch dim (floor: read the activations once)
    if want("bias_add") || want("bias_grad") {
        let (rows, cols) = (if q { 512 } else { 4096 }, 24576usize);
        let act = Tensor::randn([rows, cols], DType::F32, &dev, Some(&gen)).map_err(e)?;
        let bias = Tensor::randn([cols], DType::F32, &dev, Some(&gen)).map_err(e)?;
        let ab = (rows * cols * 4) as f64;
        if want("bias_add") {
            let t = gpu_time(d, reps, batches, || act.add(&bias).map(|_| ())).map_err(e)?;
            add(
                "bias_add",
                format!("bias add [{rows}, {cols}] + [{cols}] f32"),
                t,
                2.0 * ab,
                0.0,
                Target::Bandwidth(0.80),
            );
        }
        if want("bias_grad") {
            let t =
                gpu_time(d, reps, batches, || act.sum_dims(&[0], false).map(|_| ())).map_err(e)?;
            add(
                "bias_grad",
                format!("bias gradient: sum over the first dim of [{rows}, {cols}] f32"),
                t,
                ab,
                0.0,
                Target::Bandwidth(0.80),
            );
        }
    }
    // a transformer's normalisations at a GPT's size (16,384 tokens of 2,048, bf16): forward
    // floor = read x, write y; backward floor = read x and dy, write dx (the weight, bias and
    // per-row statistics are a few KB)
    for (id, layer) in [("rms_norm", false), ("layer_norm", true)] {
        let (fwd, bwd) = (format!("{id}_fwd"), format!("{id}_bwd"));
        if !want(&fwd) && !want(&bwd) {
            continue;
        }
        let (rows, cols) = (if q { 2048 } else { 16384 }, 2048usize);
        let param = |shape: &[usize]| -> SResult<Tensor> {
            Tensor::randn(shape, DType::BF16, &dev, Some(&gen))?.requires_grad_(true)
        };
        let (x, w, b) = (
            param(&[rows, cols]).map_err(e)?,
            param(&[cols]).map_err(e)?,
            param(&[cols]).map_err(e)?,
        );
        let norm = || match layer {
            true => x.layer_norm(&[cols], Some(&w), Some(&b), 1e-5),
            false => x.rms_norm(&[cols], Some(&w), 1e-6),
        };
        let nb = (rows * cols * 2) as f64;
        let what = format!("{id} [{rows}, {cols}] bf16");
        if want(&fwd) {
            let _g = stride::autograd::no_grad();
            let t = gpu_time(d, reps, batches, || norm().map(|_| ())).map_err(e)?;
            add(
                &fwd,
                format!("{what}, forward"),
                t,
                2.0 * nb,
                0.0,
                Target::Bandwidth(0.85),
            );
        }
        if want(&bwd) {
            let y = norm().map_err(e)?;
            let dy = Tensor::randn([rows, cols], DType::BF16, &dev, Some(&gen)).map_err(e)?;
            let mut wrt = vec![&x, &w];
            if layer {
                wrt.push(&b);
            }
            let opts = stride::autograd::GradOptions {
                retain_graph: true,
                ..Default::default()
            };
            let t = gpu_time(d, reps, batches, || {
                stride::autograd::grad(&[&y], &wrt, Some(&[&dy]), opts).map(|_| ())
            })
            .map_err(e)?;
            add(
                &bwd,
                format!("{what}, backward (dx, dw, db)"),
                t,
                3.0 * nb,
                0.0,
                Target::Bandwidth(0.85),
            );
        }
    }
    // the AdamW step of a 124M-parameter GPT (GPT-2 small's 148 tensors, f32, tied
    // embedding): floor = read p, g, m, v and write p, m, v once (28 bytes a parameter)
    if want("adamw_gpt2") {
        let (v, c, layers) = (if q { 8192 } else { 50257 }, 768usize, 12usize);
        let mut shapes: Vec<Vec<usize>> = vec![vec![v, c], vec![1024, c]];
        for _ in 0..layers {
            shapes.extend([
                vec![c],
                vec![c],
                vec![c, 3 * c],
                vec![3 * c],
                vec![c, c],
                vec![c],
                vec![c],
                vec![c],
                vec![c, 4 * c],
                vec![4 * c],
                vec![4 * c, c],
                vec![c],
            ]);
        }
        shapes.extend([vec![c], vec![c]]);
        let make = |s: &Vec<usize>| Tensor::randn(s.clone(), DType::F32, &dev, Some(&gen));
        let zeros = |s: &Vec<usize>| Tensor::zeros(s.clone(), DType::F32, &dev);
        let params: Vec<Tensor> = shapes.iter().map(make).collect::<SResult<_>>().map_err(e)?;
        let grads: Vec<Tensor> = shapes.iter().map(make).collect::<SResult<_>>().map_err(e)?;
        let ms: Vec<Tensor> = shapes
            .iter()
            .map(zeros)
            .collect::<SResult<_>>()
            .map_err(e)?;
        let vs: Vec<Tensor> = shapes
            .iter()
            .map(zeros)
            .collect::<SResult<_>>()
            .map_err(e)?;
        let n: usize = params.iter().map(|p| p.numel()).sum();
        fn refs(ts: &[Tensor]) -> Vec<&Tensor> {
            ts.iter().collect()
        }
        let (pr, gr, mr, vr) = (refs(&params), refs(&grads), refs(&ms), refs(&vs));
        let h = stride::AdamStep {
            lr: 1e-4,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            decoupled_weight_decay: true,
            maximize: false,
            step: 1,
        };
        let _g = stride::autograd::no_grad();
        let secs = gpu_time(d, reps, batches, || {
            stride::fused_adam_(&pr, &gr, &mr, &vr, None, &h)
        })
        .map_err(e)?;
        add(
            "adamw_gpt2",
            format!(
                "AdamW step of a GPT's {} tensors ({:.1}M f32 parameters), fused",
                shapes.len(),
                n as f64 / 1e6
            ),
            secs,
            28.0 * n as f64,
            0.0,
            Target::Bandwidth(0.85),
        );
    }
    // rotary embeddings of a GPT's queries (16,384 tokens, 16 heads of 128, bf16): q a permuted
    // view of one fused (B, T, 3, H, D) projection, half-split pairs, f32 tables (T, 64) —
    // floor = read q, write the rotated copy (the tables are 1 MB, read from cache); backward
    // = read dy, write dx
    if want("rotary_fwd") || want("rotary_bwd") {
        let (b, t, h, hd) = (if q { 1 } else { 4 }, 4096usize, 16usize, 128usize);
        let qkv = Tensor::randn([b, t, 3, h, hd], DType::BF16, &dev, Some(&gen))
            .and_then(|t| t.requires_grad_(true))
            .map_err(e)?;
        let qv = qkv
            .select(2, 0)
            .and_then(|x| x.permute(&[0, 2, 1, 3]))
            .map_err(e)?;
        let angles = Tensor::randn([t, hd / 2], DType::F32, &dev, Some(&gen)).map_err(e)?;
        let (cos, sin) = (angles.cos().map_err(e)?, angles.sin().map_err(e)?);
        let style = stride::RotaryStyle::HalfSplit;
        let nb = (b * t * h * hd * 2) as f64;
        let what = format!("rotary of q [{b}, {h}, {t}, {hd}] bf16 (a view of fused QKV)");
        if want("rotary_fwd") {
            let _g = stride::autograd::no_grad();
            let secs = gpu_time(d, reps, batches, || {
                qv.rotary(&cos, &sin, style).map(|_| ())
            })
            .map_err(e)?;
            add(
                "rotary_fwd",
                format!("{what}, forward"),
                secs,
                2.0 * nb,
                0.0,
                Target::Bandwidth(0.85),
            );
        }
        if want("rotary_bwd") {
            let y = qv.rotary(&cos, &sin, style).map_err(e)?;
            let dy = Tensor::randn(y.shape(), DType::BF16, &dev, Some(&gen)).map_err(e)?;
            let opts = stride::autograd::GradOptions {
                retain_graph: true,
                ..Default::default()
            };
            let secs = gpu_time(d, reps, batches, || {
                stride::autograd::grad(&[&y], &[&qv], Some(&[&dy]), opts).map(|_| ())
            })
            .map_err(e)?;
            add(
                "rotary_bwd",
                format!("{what}, backward (dq)"),
                secs,
                2.0 * nb,
                0.0,
                Target::Bandwidth(0.85),
            );
        }
    }
    // a gated MLP's activation at a Llama-style size (16,384 tokens, 5,632 hidden, bf16):
    // forward floor = read gate and up, write the product; backward = read dy, gate and up,
    // write both gradients
    if want("swiglu_fwd") || want("swiglu_bwd") {
        let (rows, cols) = (if q { 2048 } else { 16384 }, 5632usize);
        let param = || -> SResult<Tensor> {
            Tensor::randn([rows, cols], DType::BF16, &dev, Some(&gen))?.requires_grad_(true)
        };
        let (gate, up) = (param().map_err(e)?, param().map_err(e)?);
        let nb = (rows * cols * 2) as f64;
        let what = format!("swiglu [{rows}, {cols}] bf16");
        if want("swiglu_fwd") {
            let _g = stride::autograd::no_grad();
            let secs = gpu_time(d, reps, batches, || gate.swiglu(&up).map(|_| ())).map_err(e)?;
            add(
                "swiglu_fwd",
                format!("{what}, forward"),
                secs,
                3.0 * nb,
                0.0,
                Target::Bandwidth(0.85),
            );
        }
        if want("swiglu_bwd") {
            let y = gate.swiglu(&up).map_err(e)?;
            let dy = Tensor::randn([rows, cols], DType::BF16, &dev, Some(&gen)).map_err(e)?;
            let opts = stride::autograd::GradOptions {
                retain_graph: true,
                ..Default::default()
            };
            let secs = gpu_time(d, reps, batches, || {
                stride::autograd::grad(&[&y], &[&gate, &up], Some(&[&dy]), opts).map(|_| ())
            })
            .map_err(e)?;
            add(
                "swiglu_bwd",
                format!("{what}, backward (dgate, dup)"),
                secs,
                5.0 * nb,
                0.0,
                Target::Bandwidth(0.85),
            );
        }
    }
    // the loss over a large vocabulary (16,384 tokens × SmolLM2's 49,152, bf16 logits, mean):
    // forward floor = read the logits once; backward floor = read them and write their
    // gradient (the targets and per-row values are a few hundred KB)
    if want("cross_entropy_fwd") || want("cross_entropy_bwd") {
        let (rows, vocab) = (if q { 1024 } else { 16384 }, 49152usize);
        let z = Tensor::randn([rows, vocab], DType::BF16, &dev, Some(&gen))
            .and_then(|t| t.requires_grad_(true))
            .map_err(e)?;
        let t =
            Tensor::randint(0, vocab as i64, [rows], DType::I64, &dev, Some(&gen)).map_err(e)?;
        let opts = stride::nn::loss::CrossEntropy::default();
        let loss = || stride::nn::loss::cross_entropy(&z, &t, &opts);
        let zb = (rows * vocab * 2) as f64;
        let what = format!("cross_entropy [{rows}, {vocab}] bf16, mean");
        if want("cross_entropy_fwd") {
            let _g = stride::autograd::no_grad();
            let secs = gpu_time(d, reps, batches, || loss().map(|_| ())).map_err(e)?;
            add(
                "cross_entropy_fwd",
                format!("{what}, forward"),
                secs,
                zb,
                0.0,
                Target::Bandwidth(0.85),
            );
        }
        if want("cross_entropy_bwd") {
            let l = loss().map_err(e)?;
            let opts = stride::autograd::GradOptions {
                retain_graph: true,
                ..Default::default()
            };
            let secs = gpu_time(d, reps, batches, || {
                stride::autograd::grad(&[&l], &[&z], None, opts).map(|_| ())
            })
            .map_err(e)?;
            add(
                "cross_entropy_bwd",
                format!("{what}, backward"),
                secs,
                2.0 * zb,
                0.0,
                Target::Bandwidth(0.85),
            );
        }
    }
    // topk k 64 over 24,576 latents per row (the SAE's activation); floor = the input read
    // once (a selection reads it at least once; the k outputs are negligible)
    if want("topk_k64") {
        let rows = if q { 512 } else { 4096 };
        let x = Tensor::randn([rows, 24576], DType::F32, &dev, Some(&gen)).map_err(e)?;
        let t = gpu_time(d, reps, batches, || x.topk(64, -1, true, true).map(|_| ())).map_err(e)?;
        add(
            "topk_k64",
            format!("topk k 64 of {rows}x24576 f32 rows"),
            t,
            (rows * 24576 * 4) as f64,
            0.0,
            Target::FasterThanTorch,
        );
    }
    // -- matrix products (TF32 off, as PyTorch's default) ----------------------------------
    let sizes: &[usize] = if q { &[256, 512] } else { &[1024, 4096, 8192] };
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for &s in sizes {
            let id = format!("matmul_{}_{s}", dt.name());
            if !want(&id) {
                continue;
            }
            let a = Tensor::randn([s, s], dt, &dev, Some(&gen)).map_err(e)?;
            let b = Tensor::randn([s, s], dt, &dev, Some(&gen)).map_err(e)?;
            let reps = if s >= 8192 { 3 } else { reps };
            let t = gpu_time(d, reps, batches, || a.matmul(&b).map(|_| ())).map_err(e)?;
            add(
                &id,
                format!("matmul {} {s}", dt.name()),
                t,
                0.0,
                2.0 * (s as f64).powi(3),
                Target::WithinOfTorch(1.05),
            );
        }
    }
    // -- attention at a GPT's size ----------------------------------------------------------
    // bf16, 16,384 tokens (batch × seq; --quick: 4,096) of heads × head_dim = 2,048; q, k, v
    // permuted views of one fused (B, S, 3, H, D) projection, as a model has them. flops =
    // 4·B·H·S²·D forward (q·kᵀ and p·v), half of it causal; the backward 2.5× the forward
    // (FlashAttention's convention: 5 matmuls to 2). floor = flops ÷ the dense bf16 peak.
    // Each row makes its own tensors and frees them (and the allocator's cache) when done, so
    // a composed path's S² scores don't crowd out the next row; a failing row (out of memory)
    // is reported and the bench goes on; a slow path gets fewer calls (`gpu_time_bounded`).
    let tokens = if q { 4096 } else { 16384 };
    for dh in [64usize, 128] {
        for s in [1024usize, 4096] {
            for causal in [false, true] {
                let tag = format!("d{dh}_s{s}{}", if causal { "_causal" } else { "" });
                let (b, h) = ((tokens / s).max(1), 2048 / dh);
                let fwd_flops = 4.0 * (b * h) as f64 * (s as f64).powi(2) * dh as f64
                    / (1 + causal as usize) as f64;
                for (backward, pass, what) in
                    [(false, "fwd", "forward"), (true, "bwd", "backward (dqkv)")]
                {
                    let id = format!("attention_{pass}_{tag}");
                    if !want(&id) {
                        continue;
                    }
                    let mask = if causal { ", causal" } else { "" };
                    let name = format!("attention B {b}, S {s}, H {h}, D {dh} bf16{mask}, {what}");
                    say(&format!("  {name}"));
                    let timed =
                        attention_time(&dev, &gen, [b, s, h, dh], causal, backward, reps, batches);
                    let _ = cuda::synchronize(d).and_then(|_| cuda::empty_cache(d));
                    if let Err(why) = &timed {
                        say(&format!("    failed: {why}"));
                    }
                    rows.push(Row {
                        alt_peers: vec![("cuDNN", format!("{id}@cudnn"))],
                        id,
                        name,
                        seconds: *timed.as_ref().unwrap_or(&f64::NAN),
                        bytes: 0.0,
                        flops: if backward { 2.5 * fwd_flops } else { fwd_flops },
                        target: Target::Report,
                        host: false,
                        peak: Some(H100_SXM_BF16_DENSE_PEAK),
                        error: timed.err().map(|e| e.to_string()),
                    });
                }
            }
        }
    }
    // -- one decode step's attention -----------------------------------------------------
    // 8 sequences, 32 query heads over 8 key/value heads (GQA), head dim 128, one new query
    // over a 4,096-token bf16 cache: memory-bound (the cache read once: 134 MB), so the floor
    // is bytes ÷ copy bandwidth; the forward splits the keys over the SMs (FlashDecoding).
    if want("attention_decode") {
        let (b, hq, hk, s, dh) = (8usize, 32usize, 8usize, 4096usize, 128usize);
        let name =
            format!("attention decode B {b}, Hq {hq}, Hk {hk}, 1 query over {s} keys, D {dh} bf16");
        say(&format!("  {name}"));
        let timed = (|| -> SResult<f64> {
            use stride::nn::functional::scaled_dot_product_attention;
            let _g = stride::autograd::no_grad();
            let q = Tensor::randn([b, hq, 1, dh], DType::BF16, &dev, Some(&gen))?;
            let kc = Tensor::randn([b, hk, s, dh], DType::BF16, &dev, Some(&gen))?;
            let vc = Tensor::randn([b, hk, s, dh], DType::BF16, &dev, Some(&gen))?;
            gpu_time_bounded(d, reps, batches, || {
                scaled_dot_product_attention(&q, &kc, &vc, None, 0.0, false, None, true).map(|_| ())
            })
        })();
        let _ = cuda::synchronize(d).and_then(|_| cuda::empty_cache(d));
        rows.push(Row {
            alt_peers: vec![],
            id: "attention_decode".into(),
            name,
            seconds: *timed.as_ref().unwrap_or(&f64::NAN),
            bytes: (2 * b * hk * s * dh * 2) as f64,
            flops: 0.0,
            target: Target::Report,
            host: false,
            peak: None,
            error: timed.err().map(|e| e.to_string()),
        });
    }
    // -- host overhead of a tiny op ------------------------------------------------------
    if want("tiny_add_") {
        let calls = if q { 1000 } else { 10_000 };
        let a = Tensor::randn([256], DType::F32, &dev, Some(&gen)).map_err(e)?;
        let b = Tensor::randn([256], DType::F32, &dev, Some(&gen)).map_err(e)?;
        a.add_(&b).map_err(e)?;
        cuda::synchronize(d).map_err(e)?;
        let mut ts = vec![];
        for _ in 0..5 {
            let t0 = Instant::now();
            for _ in 0..calls {
                a.add_(&b).map_err(e)?;
            }
            cuda::synchronize(d).map_err(e)?;
            ts.push(t0.elapsed().as_secs_f64() / calls as f64);
        }
        say("  tiny add_");
        rows.push(Row {
            id: "tiny_add_".into(),
            name: format!("add_ of 256 f32, host time per call over {calls} calls"),
            seconds: median(ts),
            bytes: 0.0,
            flops: 0.0,
            target: Target::FasterThanTorch,
            host: true,
            peak: None,
            alt_peers: vec![],
            error: None,
        });
    }
    // -- one SAE training step (forward, backward, Adam), default size and 16x its width ----
    // and two at realistic sizes (batch 4096; --quick: 512, as the peer)
    let big_batch = if q { 512 } else { 4096 };
    for (id, dims, latents, k, batch) in [
        ("sae_step", 64, 512usize, 16, 256),
        ("sae_step_16x", 64, 512 * 16, 16, 256),
        ("sae_step_d384", 384, 1536, 32, big_batch),
        ("sae_step_d1536", 1536, 24576, 64, big_batch),
    ] {
        if !want(id) {
            continue;
        }
        let t = sae_step_time(&dev, dims, latents, k, batch, q).map_err(e)?;
        say(&format!("  {id}"));
        rows.push(Row {
            id: id.into(),
            name: format!(
                "SAE training step, {dims} -> {latents} latents, k {k}, batch {batch} (wall time)"
            ),
            seconds: t,
            bytes: 0.0,
            flops: 0.0,
            target: Target::FasterThanTorch,
            host: true,
            peak: None,
            alt_peers: vec![],
            error: None,
        });
    }
    // -- first call in a fresh process, cold and warm kernel cache --------------------------
    let first = if want("first_call") {
        say("  first call (fresh processes) ...");
        first_calls(d)
    } else {
        json!("skipped (--only)")
    };
    // -- the peer --------------------------------------------------------------------------
    // (stride's cached blocks go back to the driver first, so the peer has the whole GPU)
    let _ = cuda::empty_cache(d);
    let peer = if args.no_peer {
        Err("skipped (--no-peer)".to_string())
    } else {
        say("running the PyTorch peer ...");
        torch_peer(&args.python, q, args.only.as_deref())
    };
    let torch = peer.as_ref().ok();
    // the peer's figure under `key` (a row id, or a row id with a backend, `<id>@cudnn`), and
    // why it has none
    let pt_of = |key: &str| torch.and_then(|p| p.seconds.get(key)).copied();
    let why_not = |key: &str| torch.and_then(|p| p.unavailable.get(key));
    let met = |r: &Row| -> Option<bool> {
        if r.error.is_some() {
            return None;
        }
        let pt = pt_of(&r.id);
        match r.target {
            Target::Bandwidth(f) => Some(r.bytes / r.seconds >= f * bw),
            Target::WithinOfTorch(f) => pt.map(|p| r.seconds <= f * p),
            Target::FasterThanTorch => pt.map(|p| r.seconds < p),
            Target::Report => None,
        }
    };
    let describe = |t: Target| match t {
        Target::Bandwidth(f) => format!(">= {:.0}% of copy bandwidth", f * 100.0),
        Target::WithinOfTorch(f) => format!("<= {f:.2}x PyTorch"),
        Target::FasterThanTorch => "faster than PyTorch".into(),
        Target::Report => "-".into(),
    };
    let floor_of = |r: &Row| match r.peak {
        Some(peak) => (r.flops > 0.0).then(|| r.flops / peak),
        None => (r.bytes > 0.0).then(|| r.bytes / bw),
    };
    if args.json {
        let v = json!({
            "quick": q,
            "device": {"name": name, "arch": format!("sm_{}{}", arch.0, arch.1)},
            "copy_bandwidth_bytes_per_s": bw,
            "peer": match &peer { Ok(p) => json!({"available": true, "name": p.name}), Err(w) => json!({"available": false, "why": w}) },
            "rows": rows.iter().map(|r| json!({
                "id": r.id, "name": r.name,
                "seconds": r.error.is_none().then_some(r.seconds), "error": r.error,
                "bytes": r.bytes, "flops": r.flops, "peak_flops_per_s": r.peak,
                "floor_seconds": floor_of(r), "host_time": r.host,
                "torch_seconds": pt_of(&r.id), "torch_unavailable": why_not(&r.id),
                "torch_other_backends": r.alt_peers.iter().map(|(label, key)| json!({
                    "backend": label, "key": key, "seconds": pt_of(key), "unavailable": why_not(key),
                })).collect::<Vec<_>>(),
                "target": describe(r.target), "met": met(r),
            })).collect::<Vec<_>>(),
            "first_call": first,
            "torch_first_call": torch.map(|p| p.first_call.clone()),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    let mut o = format!(
        "stride bench cuda{} on {name} (sm_{}{})\n",
        if q {
            " --quick (smoke run, not a measurement)"
        } else {
            ""
        },
        arch.0,
        arch.1
    );
    o += &format!(
        "  copy bandwidth {:.0} GB/s  [cuMemcpyDtoDAsync of {} MiB, read + write bytes, best of 20]\n",
        bw / 1e9,
        (big * 4) >> 20
    );
    match &peer {
        Ok(p) => o += &format!("  peer           {} (same GPU, same run)\n", p.name),
        Err(w) => o += &format!("  peer           PyTorch unavailable: {w}\n"),
    }
    o += "  GPU rows: device time between CUDA events around a batch queued behind a copy (the host's per-call cost excluded), median of batches; floor = bytes / copy bandwidth; vs PyTorch = PyTorch time / stride time (> 1: stride faster)\n";
    if rows.iter().any(|r| r.id.starts_with("attention")) {
        o += &format!(
            "  attention rows: rate = flops / time (4·B·H·S²·D forward, half of it causal; backward 2.5x the forward); floor = flops / {:.0} TFLOP/s (H100 SXM dense bf16 peak, NVIDIA's datasheet; nominal on another GPU); PyTorch = sdpa_kernel(FLASH_ATTENTION), its time and TF/s; the line under each row = sdpa_kernel(CUDNN_ATTENTION), both on the same fused-QKV views\n",
            H100_SXM_BF16_DENSE_PEAK / 1e12
        );
    }
    o += "\n";
    let head = [
        "benchmark",
        "stride",
        "rate",
        "floor",
        "x floor",
        "PyTorch",
        "vs PyTorch",
        "target",
        "met",
    ];
    let mut cells: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    // the peer's cells for `key` beside stride's row `r`: its time (and rate, where the floor
    // is flops: the attention rows), and stride's speed-up
    let peer_cells = |r: &Row, key: &str| match (pt_of(key), why_not(key)) {
        (Some(p), _) => {
            let t = match r.peak {
                Some(_) => format!("{} ({:.0} TF/s)", fmt_time(p), r.flops / p / 1e12),
                None => fmt_time(p),
            };
            let vs = match r.error {
                None => format!("{:.2}x", p / r.seconds),
                Some(_) => "-".into(),
            };
            [t, vs]
        }
        (None, Some(_)) => ["unavailable".into(), "-".into()],
        (None, None) => ["-".into(), "-".into()],
    };
    // rows or peer figures that failed, and why: listed under the table
    let mut failed: Vec<String> = vec![];
    for r in &rows {
        let floor = floor_of(r);
        let ok = r.error.is_none();
        let rate = if !ok {
            "-".into()
        } else if r.flops > 0.0 {
            format!("{:.1} TF/s", r.flops / r.seconds / 1e12)
        } else if r.bytes > 0.0 {
            format!("{:.0} GB/s", r.bytes / r.seconds / 1e9)
        } else {
            "-".into()
        };
        let [pt, vs] = peer_cells(r, &r.id);
        cells.push(vec![
            r.name.clone(),
            if ok {
                fmt_time(r.seconds)
            } else {
                "failed".into()
            },
            rate,
            floor.map_or("-".into(), fmt_time),
            floor
                .filter(|_| ok)
                .map_or("-".into(), |f| format!("{:.2}", r.seconds / f)),
            pt,
            vs,
            describe(r.target),
            match met(r) {
                Some(true) => "yes".into(),
                Some(false) => "NO".into(),
                None => "-".into(),
            },
        ]);
        for (label, key) in &r.alt_peers {
            let [pt, vs] = peer_cells(r, key);
            let mut line = vec![String::new(); head.len()];
            line[0] = format!("  same row, PyTorch {label}");
            (line[5], line[6]) = (pt, vs);
            cells.push(line);
        }
        if let Some(err) = &r.error {
            failed.push(format!("{} (stride): {err}", r.id));
        }
        for key in std::iter::once(&r.id).chain(r.alt_peers.iter().map(|(_, k)| k)) {
            if let Some(why) = why_not(key) {
                failed.push(format!("{key} (PyTorch): {why}"));
            }
        }
    }
    o += &render(&cells);
    if !failed.is_empty() {
        o += "\nnot measured:\n";
        for f in &failed {
            o += &format!("  {f}\n");
        }
    }
    o += &format!("\nfirst op of a fresh process (context creation + one add + read back):\n  stride: {first}\n");
    if let Some(p) = torch {
        o += &format!("  PyTorch: {}\n", p.first_call);
    }
    print!("{o}");
    Ok(())
}

/// Left-aligned columns, two spaces apart, a rule under the header.
fn render(cells: &[Vec<String>]) -> String {
    let cols = cells[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut o = String::new();
    for (i, row) in cells.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        o += line.join("  ").trim_end();
        o.push('\n');
        if i == 0 {
            o += &"-".repeat(widths.iter().sum::<usize>() + 2 * (cols - 1));
            o.push('\n');
        }
    }
    o
}

fn fmt_time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

/// Device seconds per call of one attention row (see the rows in [`run`]): `[b, s, h, dh]`
/// sizes; q, k, v permuted views of one fused `(b, s, 3, h, dh)` bf16 tensor. The forward is
/// timed without a graph; the backward (as the norm and loss rows) builds the graph once and
/// times the gradient of the fused tensor for a random upstream gradient, keeping the graph.
/// Everything it allocates is dropped when it returns, also on an error. A slow path (composed,
/// or through the host) gets fewer calls: see [`gpu_time_bounded`].
fn attention_time(
    dev: &Device,
    gen: &Generator,
    [b, s, h, dh]: [usize; 4],
    causal: bool,
    backward: bool,
    reps: usize,
    batches: usize,
) -> SResult<f64> {
    use stride::autograd::{grad, no_grad, GradOptions};
    use stride::nn::functional::scaled_dot_product_attention;
    let d = match dev {
        Device::Cuda(i) => *i,
        Device::Cpu | Device::Wgpu(_) => 0,
    };
    let qkv = Tensor::randn([b, s, 3, h, dh], DType::BF16, dev, Some(gen))?.requires_grad_(true)?;
    let part = |i: i64| qkv.select(2, i)?.permute(&[0, 2, 1, 3]); // (b, h, s, dh)
    let (q, k, v) = (part(0)?, part(1)?, part(2)?);
    let attn = || scaled_dot_product_attention(&q, &k, &v, None, 0.0, causal, None, false);
    if !backward {
        let _g = no_grad();
        return gpu_time_bounded(d, reps, batches, || attn().map(|_| ()));
    }
    let y = attn()?;
    let dy = Tensor::randn(y.shape(), DType::BF16, dev, Some(gen))?;
    let opts = GradOptions {
        retain_graph: true,
        ..Default::default()
    };
    gpu_time_bounded(d, reps, batches, || {
        grad(&[&y], &[&qkv], Some(&[&dy]), opts).map(|_| ())
    })
}

/// [`gpu_time`] with at most `reps` calls a batch and `batches` batches, fewer where one call
/// is slow: a call (after one to warm up, which may compile kernels) is timed on the host,
/// then a batch gets about 0.2 s of calls (at least one), and a call over a second gets 3
/// batches. A fast kernel keeps the bench's counts; a path that takes seconds (a fallback
/// through the host) takes a row half a minute rather than many minutes.
fn gpu_time_bounded(
    dev: usize,
    reps: usize,
    batches: usize,
    mut f: impl FnMut() -> SResult<()>,
) -> SResult<f64> {
    f()?;
    cuda::synchronize(dev)?;
    let t0 = Instant::now();
    f()?;
    cuda::synchronize(dev)?;
    let once = t0.elapsed().as_secs_f64();
    let reps = ((0.2 / once) as usize).clamp(1, reps);
    let batches = if once > 1.0 { batches.min(3) } else { batches };
    gpu_time(dev, reps, batches, f)
}

/// Wall seconds per SAE training step (zero_grad, forward, backward, Adam) on one fixed batch,
/// without host reads, as `scripts/bench_torch.py` times PyTorch's: the median of 5 runs of
/// 20 steps, each ended by a synchronisation, after 5 warm-up steps.
fn sae_step_time(
    dev: &Device,
    dims: usize,
    latents: usize,
    k: usize,
    batch: usize,
    quick: bool,
) -> SResult<f64> {
    use stride::models::{SaeConfig, SaeTrainer, TrainConfig};
    use stride::optim::Optimizer;
    let base = TrainConfig::default();
    let config = TrainConfig {
        sae: SaeConfig {
            dims,
            latents,
            k,
            device: *dev,
            ..SaeConfig::default()
        },
        // the synthetic data needs more features than dims (the default 256 for dims 64)
        features: base.features.max(4 * dims),
        batch,
        health_every: 0,
        ..base
    };
    let batch = config.batch;
    let mut t = SaeTrainer::new(config)?;
    let x = t.data().batch(batch)?;
    let d = match dev {
        Device::Cuda(i) => *i,
        Device::Cpu | Device::Wgpu(_) => 0,
    };
    let mut step = || -> SResult<()> {
        t.optimizer_mut().zero_grad()?;
        let (loss, _) = t.model().loss(&x)?;
        loss.backward()?;
        t.optimizer_mut().step()
    };
    for _ in 0..5 {
        step()?;
    }
    cuda::synchronize(d)?;
    let (runs, steps) = if quick { (2, 5) } else { (5, 20) };
    let mut ts = vec![];
    for _ in 0..runs {
        let t0 = Instant::now();
        for _ in 0..steps {
            step()?;
        }
        cuda::synchronize(d)?;
        ts.push(t0.elapsed().as_secs_f64() / steps as f64);
    }
    Ok(median(ts))
}

/// Child mode: times the first op of this process (`Device::cuda` creates the context).
fn first_call(d: usize) -> SResult<()> {
    let t0 = Instant::now();
    let dev = Device::cuda(d)?;
    let t_ctx = t0.elapsed().as_secs_f64();
    let x = Tensor::from_vec(vec![1.0f32; 1024], [1024])?.to_device(&dev)?;
    let t1 = Instant::now();
    let y = x.add(&x)?.to_vec::<f32>()?;
    let t_op = t1.elapsed().as_secs_f64();
    assert_eq!(y[0], 2.0);
    let (compiled, loaded) = cuda::kernel_cache_stats();
    println!(
        "{}",
        json!({"context_s": t_ctx, "first_op_s": t_op, "total_s": t0.elapsed().as_secs_f64(),
               "modules_compiled": compiled, "modules_from_disk": loaded})
    );
    Ok(())
}

/// Runs this binary twice in first-call mode: with an empty kernel cache, then with the cache
/// the first run filled.
fn first_calls(d: usize) -> Value {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return json!({"error": e.to_string()}),
    };
    let dir = std::env::temp_dir().join(format!("stride-first-call-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut out = serde_json::Map::new();
    for which in ["cold_cache", "warm_cache"] {
        let r = Command::new(&exe)
            .args(["bench", "cuda", "--first-call", "--device", &d.to_string()])
            .env("STRIDE_KERNEL_CACHE", &dir)
            .output();
        let v = match r {
            Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| json!({"error": format!("bad JSON: {e}")})),
            Ok(o) => json!({"error": String::from_utf8_lossy(&o.stderr).to_string()}),
            Err(e) => json!({"error": e.to_string()}),
        };
        out.insert(which.into(), v);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Value::Object(out)
}

/// What `scripts/bench_torch.py` measured.
struct TorchPeer {
    /// e.g. "PyTorch 2.11.0+cu128"
    name: String,
    /// Seconds by key: a row id, or `<row id>@<backend>` for a row's second PyTorch figure
    /// (the attention rows' `@cudnn`).
    seconds: BTreeMap<String, f64>,
    /// Why the peer has no figure for a key (e.g. a backend that refuses the config).
    unavailable: BTreeMap<String, String>,
    first_call: Value,
}

fn torch_peer(python: &str, quick: bool, only: Option<&str>) -> Result<TorchPeer, String> {
    let script = super::peer_script("bench_torch.py")?;
    let mut cmd = Command::new(python);
    cmd.arg(&script);
    if quick {
        cmd.arg("--quick");
    }
    if let Some(o) = only {
        cmd.args(["--only", o]);
    }
    let stdout = super::run_peer(&mut cmd, &script)?;
    let v: Value =
        serde_json::from_slice(&stdout).map_err(|e| format!("bad JSON from the peer: {e}"))?;
    if v["available"] != Value::Bool(true) {
        return Err(v["why"]
            .as_str()
            .unwrap_or("PyTorch with CUDA is not available")
            .to_string());
    }
    let seconds = v["seconds"]
        .as_object()
        .ok_or("the peer's JSON has no \"seconds\"")?
        .iter()
        .filter_map(|(k, t)| t.as_f64().map(|t| (k.clone(), t)))
        .collect();
    // optional: older peers print no "unavailable"
    let unavailable = v["unavailable"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, w)| w.as_str().map(|w| (k.clone(), w.to_string())))
        .collect();
    Ok(TorchPeer {
        name: format!("PyTorch {}", v["torch"].as_str().unwrap_or("?")),
        seconds,
        unavailable,
        first_call: v["first_call"].clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::selected;

    #[test]
    fn only_selects_by_prefix_or_whole_id() {
        let (plain, causal) = ("attention_fwd_d64_s1024", "attention_fwd_d64_s1024_causal");
        assert!(selected(None, plain));
        for only in ["attention", "attention_fwd", "copy,attention_fwd_d64"] {
            assert!(
                selected(Some(only), plain) && selected(Some(only), causal),
                "{only}"
            );
        }
        // a prefix selects the causal sibling too; `$` asks for the whole id
        let whole = "attention_fwd_d64_s1024$";
        assert!(selected(Some(whole), plain) && !selected(Some(whole), causal));
        assert!(selected(Some("attention_fwd_d64_s1024_causal$"), causal));
        assert!(!selected(Some("attention_bwd"), plain));
        assert!(!selected(Some(""), plain) && !selected(Some(",$"), plain));
    }
}
