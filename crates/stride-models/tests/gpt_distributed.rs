//! Data-parallel GPT training equals one process on the whole batch: two ranks (threads of
//! this test) each take half of every global batch, DistributedDataParallel averages their
//! gradients, and the losses and final parameters must match a one-process run of the same
//! configuration step by step — dense and mixture of experts (whose balance loss sums the
//! routing counts over the ranks), with gradient accumulation. On the CPU (TCP) everywhere;
//! on two GPUs (NCCL) where a machine has them, the steps under `forbid_sync`.
//!
//! The tolerance is the golden test's (tests/gpt_golden.rs says why 1e-4 relative holds for
//! two f32 computations that sum in different orders): a rank's gradient sums half the
//! batch's terms and the average adds the halves. A wrong split (the same rows on both ranks)
//! or a local balance loss moves the losses by far more within a few steps.
//!
//! With the optimizer state sharded (ZeRO), the run is the plain data-parallel run exactly:
//! the same gradients, and AdamW's elementwise update made by each parameter's owner and
//! broadcast.

use stride_core::distributed::run_threads;
use stride_core::{cuda, Device, Result};
use stride_models::gpt::{Corpus, GptConfig, GptTrainConfig, GptTrainer, MoeConfig};
use stride_nn::Module;

/// The two-GPU tests take turns: NCCL communicators of tests running at once on the same
/// GPUs can wait on each other for ever.
fn gpu_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn config(moe: bool, device: Device) -> GptTrainConfig {
    let mut model = GptConfig::modern(259, 16, 2, 2, 32);
    if moe {
        model = model.with_moe(MoeConfig::new(4, 2, 32));
    }
    GptTrainConfig {
        model,
        batch: 4,
        accum: 2,
        steps: 8,
        warmup: 2,
        lr: 3e-3,
        eval_batches: 2,
        device,
        ..GptTrainConfig::default()
    }
}

fn corpus() -> Corpus {
    let text: Vec<i64> =
        b"KING. What say you, my lord? Speak, and be brief. LORD. Nothing, my liege. "
            .repeat(20)
            .iter()
            .map(|&b| 3 + b as i64)
            .collect();
    Corpus {
        train: text.clone(),
        val: text,
    }
}

/// (losses, every parameter flattened) after `steps` steps.
type Run = (Vec<f64>, Vec<(String, Vec<f64>)>);

fn finish(mut t: GptTrainer) -> Result<Run> {
    let losses = t.read_losses()?.to_vec();
    let params = t
        .model()
        .named_parameters()
        .into_iter()
        .map(|(n, p)| Ok((n, p.tensor().to_f64_vec()?)))
        .collect::<Result<_>>()?;
    Ok((losses, params))
}

fn single(moe: bool, device: Device) -> Run {
    let mut t = GptTrainer::new(config(moe, device), corpus()).unwrap();
    for _ in 0..8 {
        t.step().unwrap();
    }
    finish(t).unwrap()
}

fn parallel(moe: bool, devices: &[Device], forbid_sync: bool) -> Vec<Run> {
    parallel_with(moe, devices, forbid_sync, false)
}

fn parallel_with(moe: bool, devices: &[Device], forbid_sync: bool, zero: bool) -> Vec<Run> {
    run_threads(devices, move |g| {
        let mut t = GptTrainer::new(config(moe, g.device()), corpus())?;
        t.set_loss_every(0);
        t.distribute_with(g, zero)?;
        {
            let _guard = forbid_sync.then(stride_core::debug::forbid_sync);
            for _ in 0..8 {
                t.step()?;
            }
        }
        finish(t)
    })
    .into_iter()
    .map(|r| r.expect("rank failed"))
    .collect()
}

fn rel(a: &[f64], b: &[f64]) -> f64 {
    let d: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt();
    let n: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    d / n.max(1e-30)
}

fn compare(what: &str, got: &Run, want: &Run) {
    for (s, (a, b)) in got.0.iter().zip(&want.0).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * b.abs(),
            "{what}: step {s} loss {a} vs one process's {b}"
        );
    }
    assert_eq!(got.0.len(), want.0.len());
    for ((name, a), (_, b)) in got.1.iter().zip(&want.1) {
        let r = rel(a, b);
        assert!(
            r <= 1e-4,
            "{what}: {name} differs from one process's by {r:.2e} (relative, 2-norm)"
        );
    }
}

fn check(moe: bool, devices: &[Device], forbid_sync: bool) {
    let want = single(moe, devices[0]);
    let ranks = parallel(moe, devices, forbid_sync);
    let what = format!("{} on {devices:?}", if moe { "MoE" } else { "dense" });
    for (r, got) in ranks.iter().enumerate() {
        compare(&format!("{what}, rank {r}"), got, &want);
    }
    // the ranks step on the same averaged gradients: the same bits everywhere
    assert_eq!(
        ranks[0].1, ranks[1].1,
        "{what}: the ranks' parameters differ"
    );
}

#[test]
fn cpu_dense_two_ranks_equal_one_process() {
    check(false, &[Device::Cpu, Device::Cpu], false);
}

#[test]
fn cpu_moe_two_ranks_equal_one_process() {
    check(true, &[Device::Cpu, Device::Cpu], false);
}

#[test]
fn cuda_dense_two_gpus_equal_one_gpu() {
    if let Some(d) = cuda::require_gpus_or_skip("cuda_dense_two_gpus_equal_one_gpu", 2) {
        let _turn = gpu_turn();
        check(false, &d, true);
    }
}

#[test]
fn cuda_moe_two_gpus_equal_one_gpu() {
    if let Some(d) = cuda::require_gpus_or_skip("cuda_moe_two_gpus_equal_one_gpu", 2) {
        let _turn = gpu_turn();
        check(true, &d, true);
    }
}

/// ZeRO against the plain data-parallel run: the same bits, losses and parameters.
fn check_zero(moe: bool, devices: &[Device], forbid_sync: bool) {
    let plain = parallel_with(moe, devices, forbid_sync, false);
    let zero = parallel_with(moe, devices, forbid_sync, true);
    for (r, (z, p)) in zero.iter().zip(&plain).enumerate() {
        assert_eq!(z.0, p.0, "rank {r}: ZeRO's losses differ from plain DDP's");
        assert!(
            z.1 == p.1,
            "rank {r}: ZeRO's parameters differ from plain DDP's"
        );
    }
}

#[test]
fn cpu_zero_trainer_equals_the_plain_ddp_trainer() {
    check_zero(true, &[Device::Cpu, Device::Cpu], false);
}

#[test]
fn cuda_zero_trainer_equals_the_plain_ddp_trainer() {
    if let Some(d) = cuda::require_gpus_or_skip("cuda_zero_trainer_equals_the_plain_ddp_trainer", 2)
    {
        let _turn = gpu_turn();
        check_zero(false, &d, true);
    }
}

/// A ZeRO run's checkpoint (every rank saves, rank 0 writes) resumes in one process on the
/// one-process curve.
#[test]
fn cpu_zero_checkpoint_resumes_in_one_process() {
    let path = std::env::temp_dir().join(format!(
        "stride-gpt-zero-{}.safetensors",
        std::process::id()
    ));
    let p = path.clone();
    let out = run_threads(&[Device::Cpu, Device::Cpu], move |g| {
        let mut t = GptTrainer::new(config(false, Device::Cpu), corpus())?;
        t.distribute_with(g, true)?;
        for _ in 0..4 {
            t.step()?;
        }
        t.save(&p)
    });
    for r in out {
        r.expect("rank failed");
    }
    let mut t = GptTrainer::resume(&path, Device::Cpu, corpus()).unwrap();
    for _ in 0..4 {
        t.step().unwrap();
    }
    let want = single(false, Device::Cpu);
    compare("resumed from ZeRO's checkpoint", &finish(t).unwrap(), &want);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_batch_that_does_not_split_is_an_error() {
    let out = run_threads(&[Device::Cpu; 3], |g| {
        let mut t = GptTrainer::new(config(false, Device::Cpu), corpus())?;
        t.distribute(g).map(|_| ())
    });
    for r in out {
        let e = r.expect_err("4 sequences over 3 ranks");
        assert!(e.to_string().contains("multiple of 3"), "{e}");
    }
}
