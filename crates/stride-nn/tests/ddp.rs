//! DistributedDataParallel with its ranks as threads: on the CPU (TCP) everywhere, and on two
//! GPUs over NCCL where a machine has them (skipped, saying so, with fewer).
//!
//! The reference for every gradient is one process computing the loss of the whole batch:
//! averaging the ranks' gradients of their halves must give it, up to f32 rounding of a
//! different summation order — each gradient element is a sum of B per-example terms, and
//! splitting it into two halves changes the rounding by at most B·u relative to the sum of
//! magnitudes (u = 2⁻²⁴); with B = 8 and the magnitudes here, 1e-5 relative to the gradient's
//! norm bounds it. A wrong average (a sum, one rank's gradient) is off by a factor of 2 or
//! more.

use stride_core::distributed::{run_threads, ProcessGroup};
use stride_core::{cuda, manual_seed, DType, Device, Generator, Result, Tensor};
use stride_nn::{DdpConfig, DistributedDataParallel, Factory, Linear, Module};

/// The two-GPU tests take turns: groups over the same GPUs running side by side must issue
/// their collectives in the same order on every rank (see `ProcessGroup`), which tests
/// running at once do not.
fn gpu_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn model(dev: Device, seed: u64) -> Result<(Linear, Linear)> {
    let g = Generator::new(seed);
    let f = Factory {
        device: dev,
        generator: Some(&g),
        ..Factory::default()
    };
    Ok((
        Linear::new_with(6, 5, true, &f)?,
        Linear::new_with(5, 3, true, &f)?,
    ))
}

/// DDP over the model's parameters with buckets of `cap` bytes (64: a bucket a parameter).
fn ddp_with_cap(
    m: &(Linear, Linear),
    g: &ProcessGroup,
    cap: usize,
) -> Result<DistributedDataParallel> {
    DistributedDataParallel::new(
        params(m),
        g,
        DdpConfig {
            bucket_cap_bytes: cap,
        },
    )
}

fn batch(dev: Device) -> Result<(Tensor, Tensor)> {
    let g = Generator::new(7);
    let x = Tensor::randn([8, 6], DType::F32, &Device::Cpu, Some(&g))?.to_device(&dev)?;
    let y = Tensor::randn([8, 3], DType::F32, &Device::Cpu, Some(&g))?.to_device(&dev)?;
    Ok((x, y))
}

fn loss(m: &(Linear, Linear), x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let h = m.0.forward(x)?.tanh()?;
    m.1.forward(&h)?.sub(y)?.square()?.mean()
}

fn params(m: &(Linear, Linear)) -> Vec<Tensor> {
    m.0.parameters()
        .into_iter()
        .chain(m.1.parameters())
        .map(|p| p.tensor())
        .collect()
}

fn grads(m: &(Linear, Linear)) -> Result<Vec<Vec<f32>>> {
    params(m)
        .iter()
        .map(|p| {
            p.grad()
                .expect("a gradient")
                .to_device(&Device::Cpu)?
                .to_vec::<f32>()
        })
        .collect()
}

/// One process, the whole batch: the gradients DDP must reproduce.
fn reference() -> Vec<Vec<f32>> {
    let m = model(Device::Cpu, 1).unwrap();
    let (x, y) = batch(Device::Cpu).unwrap();
    loss(&m, &x, &y).unwrap().backward().unwrap();
    grads(&m).unwrap()
}

fn close(got: &[Vec<f32>], want: &[Vec<f32>], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let norm = w.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-30);
        let diff = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>()
            .sqrt();
        assert!(
            diff <= 1e-5 * norm,
            "{what}: parameter {i} off by {:.2e} relative",
            diff / norm
        );
    }
}

/// Each rank: a model initialised differently per rank (DDP must broadcast rank 0's), its
/// half of the batch; `accum` micro-batches (all but the last under `no_sync`).
fn ranks_grads(devices: &[Device], accum: usize, cap: usize) -> Vec<Vec<Vec<f32>>> {
    run_threads(devices, move |g: ProcessGroup| {
        let dev = g.device();
        let m = model(dev, 1 + g.rank() as u64 * 100)?;
        let ddp = ddp_with_cap(&m, &g, cap)?;
        let (x, y) = batch(dev)?;
        let per = 8 / g.world_size();
        let (x, y) = (
            x.narrow(0, (g.rank() * per) as i64, per)?,
            y.narrow(0, (g.rank() * per) as i64, per)?,
        );
        let rows = per / accum;
        for a in 0..accum {
            let _ns = (a + 1 < accum).then(|| ddp.no_sync());
            let (xa, ya) = (
                x.narrow(0, (a * rows) as i64, rows)?,
                y.narrow(0, (a * rows) as i64, rows)?,
            );
            loss(&m, &xa, &ya)?.div(accum as f64)?.backward()?;
        }
        // the buckets, as the ranks see them
        let _ = ddp.num_buckets();
        grads(&m)
    })
    .into_iter()
    .map(|r| r.expect("rank failed"))
    .collect()
}

#[test]
fn cpu_ddp_gradients_are_the_whole_batch_gradients() {
    let want = reference();
    // one bucket; a bucket per parameter or two (a cap of 64 bytes: the 5×6 weight alone
    // exceeds it and gets its own)
    for cap in [25 << 20, 64] {
        let got = ranks_grads(&[Device::Cpu, Device::Cpu], 1, cap);
        for (r, g) in got.iter().enumerate() {
            close(g, &want, &format!("rank {r}, bucket cap {cap}"));
        }
        assert_eq!(got[0], got[1], "the ranks must hold the same bits");
    }
}

#[test]
fn cpu_ddp_no_sync_accumulates_then_averages() {
    let want = reference();
    let got = ranks_grads(&[Device::Cpu, Device::Cpu], 2, 64);
    // the micro-batches' mean of means is the batch mean (equal halves)
    for (r, g) in got.iter().enumerate() {
        close(g, &want, &format!("rank {r}, two micro-batches"));
    }
}

#[test]
fn cpu_ddp_four_ranks() {
    let want = reference();
    for (r, g) in ranks_grads(&[Device::Cpu; 4], 1, 64).iter().enumerate() {
        close(g, &want, &format!("rank {r} of 4"));
    }
}

#[test]
fn cuda_ddp_gradients_are_the_whole_batch_gradients() {
    let Some(d) = cuda::require_gpus_or_skip("cuda_ddp_gradients_are_the_whole_batch_gradients", 2)
    else {
        return;
    };
    let _turn = gpu_turn();
    let want = reference();
    for accum in [1, 2] {
        for (r, g) in ranks_grads(&d, accum, 64).iter().enumerate() {
            close(g, &want, &format!("cuda rank {r}, accum {accum}"));
        }
    }
}

#[test]
fn cuda_ddp_backward_waits_for_nothing() {
    let Some(d) = cuda::require_gpus_or_skip("cuda_ddp_backward_waits_for_nothing", 2) else {
        return;
    };
    let _turn = gpu_turn();
    let out = run_threads(&d, |g| {
        let dev = g.device();
        let m = model(dev, 1)?;
        let ddp = ddp_with_cap(&m, &g, 64)?;
        let (x, y) = batch(dev)?;
        {
            let _guard = stride_core::debug::forbid_sync();
            for _ in 0..3 {
                loss(&m, &x, &y)?.backward()?;
            }
        }
        let _ = ddp.num_buckets();
        grads(&m)
    });
    for r in out {
        r.expect("a DDP backward on CUDA must not wait for the host");
    }
}

/// The profiler times each bucket's all-reduce on the communication stream, so a trace shows
/// the overlap with backward's kernels.
#[test]
fn cuda_ddp_profile_shows_each_bucket_on_the_communication_stream() {
    let Some(d) = cuda::require_gpus_or_skip(
        "cuda_ddp_profile_shows_each_bucket_on_the_communication_stream",
        2,
    ) else {
        return;
    };
    let _turn = gpu_turn();
    let out = run_threads(&d, |g| {
        let dev = g.device();
        let m = model(dev, 1)?;
        let ddp = ddp_with_cap(&m, &g, 64)?;
        let (x, y) = batch(dev)?;
        let prof = stride_core::debug::Profiler::start();
        loss(&m, &x, &y)?.backward()?;
        let report = prof.stop()?;
        Ok((report, ddp.num_buckets(), dev))
    });
    for r in out {
        let (report, buckets, dev) = r.expect("a profiled DDP backward");
        let comm: Vec<_> = report.events.iter().filter(|e| e.kind == "comm").collect();
        assert!(buckets > 1);
        assert_eq!(comm.len(), buckets, "one all-reduce per bucket");
        for e in &comm {
            assert_eq!(e.name, "nccl:all_reduce_");
            assert_eq!(e.device, dev);
            assert!(e.device_s.unwrap() > 0.0 && e.device_start_s.is_some());
        }
        assert_eq!(report.op("nccl:all_reduce_").unwrap().calls, buckets);
        let o = report.comm_overlap();
        assert_eq!(o.len(), 1);
        assert!(o[0].comm_s > 0.0 && o[0].overlapped_s <= o[0].comm_s + 1e-12);
        assert!(report
            .chrome_trace()
            .contains(&format!("{dev} communication")));
    }
}

#[test]
fn unused_parameters_count_as_zero() {
    // rank 0 never uses the second layer's bias; rank 1 does: both end with half of rank 1's
    let out = run_threads(&[Device::Cpu, Device::Cpu], |g| {
        let m = model(Device::Cpu, 1)?;
        let ddp = DistributedDataParallel::new(params(&m), &g, DdpConfig::default())?;
        let (x, y) = batch(Device::Cpu)?;
        let l = if g.rank() == 0 {
            let h = m.0.forward(&x)?.tanh()?;
            h.matmul(&m.1.weight.tensor().t()?)?
                .sub(&y)?
                .square()?
                .mean()?
        } else {
            loss(&m, &x, &y)?
        };
        l.backward()?;
        let _ = ddp.num_buckets();
        grads(&m)
    });
    let full = reference_on_whole_batch_bias();
    for r in out {
        let g = r.expect("rank failed");
        let bias = &g[3];
        for (a, b) in bias.iter().zip(&full) {
            assert!(
                (a - b / 2.0).abs() <= 1e-6 * b.abs().max(1.0),
                "{a} vs {}",
                b / 2.0
            );
        }
    }
}

/// The second bias's gradient of one process on the whole batch (what rank 1 computes).
fn reference_on_whole_batch_bias() -> Vec<f32> {
    let m = model(Device::Cpu, 1).unwrap();
    let (x, y) = batch(Device::Cpu).unwrap();
    loss(&m, &x, &y).unwrap().backward().unwrap();
    m.1.bias
        .as_ref()
        .unwrap()
        .tensor()
        .grad()
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

#[test]
fn different_models_are_an_error() {
    manual_seed(0);
    let out = run_threads(&[Device::Cpu, Device::Cpu], |g| {
        let f = Factory::default();
        let m = Linear::new_with(4, 2 + g.rank(), true, &f)?;
        DistributedDataParallel::for_module(&m, &g, DdpConfig::default()).map(|_| ())
    });
    for r in out {
        let e = r.expect_err("different shapes on the ranks must be refused");
        assert!(e.to_string().contains("same model"), "{e}");
    }
}
