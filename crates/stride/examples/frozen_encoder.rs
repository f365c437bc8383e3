//! The frozen-encoder hunt of the README's troubleshooting section, in a few lines.
//!
//! ```text
//! cargo run --release -p stride --example frozen_encoder [-- cuda]
//! ```
//!
//! A TopK sparse autoencoder whose encoder weight is a transposed clone of its decoder's
//! (non-contiguous) trains under Adam on a deliberately broken backend: the Adam update
//! (`adam_step`, one fused primitive) drops its writes into non-contiguous outputs, as
//! PyTorch's Apple-GPU `addcmul_`/`addcdiv_` once did.
//! Nothing fails; the encoder just never moves. Then the debug tools find out why.

use stride::debug;
use stride::models::sae::SaeConfig;
use stride::models::train::{SaeTrainer, TrainConfig};
use stride::prelude::*;

fn main() -> Result<()> {
    // `cuda` as the argument: the same hunt on GPU 0 (the fault applies on every device)
    let device = match std::env::args().nth(1).as_deref() {
        Some("cuda") => Device::cuda(0)?,
        _ => Device::Cpu,
    };
    let config = TrainConfig {
        sae: SaeConfig {
            dims: 16,
            latents: 64,
            k: 4,
            device,
            ..SaeConfig::default()
        },
        features: 32,
        feature_prob: 0.05,
        batch: 64,
        lr: 1e-2,
        health_every: 0, // stride's update-health check would name the frozen weight at once
        ..TrainConfig::default()
    };
    let mut trainer = SaeTrainer::new(config)?;
    let encoder = |t: &SaeTrainer| t.model().encoder.weight.tensor().to_f64_vec();
    let start = encoder(&trainer)?;

    // 1. The symptom: the broken backend trains without an error or a NaN…
    let _bug = debug::inject_fault("adam_step");
    for _ in 0..50 {
        trainer.step()?;
    }
    println!(
        "after 50 steps: loss {:.4e}, encoder weight unchanged: {}",
        trainer.losses().last().unwrap(),
        encoder(&trainer)? == start
    );

    // 2. Is it NaN? Anomaly mode says no: one step runs clean.
    {
        let _anomaly = debug::detect_anomaly();
        trainer.step()?;
        println!("anomaly mode: no NaN or infinity anywhere in a training step");
    }

    // 3. Which op is wrong? Replay every op of one step on the CPU in f64.
    let check = debug::cross_check();
    trainer.step()?;
    match check.first() {
        Some(d) => println!("cross-check: {d}"),
        None => println!("cross-check: every op agrees"),
    }

    drop(check);

    // 4. Where does the time go, what does each op allocate, and when does the host wait?
    let prof = debug::Profiler::start();
    trainer.step()?;
    let report = prof.stop()?;
    println!("{report}");
    report.write_chrome_trace("frozen_encoder_trace.json")?;
    println!("trace: frozen_encoder_trace.json (open it in https://ui.perfetto.dev)");

    // 5. A sync guard turns each host wait into an error naming it (the trainer reads the
    //    loss back every step: on a GPU that stalls the pipeline).
    {
        let _no_sync = debug::forbid_sync();
        if let Err(e) = trainer.step() {
            println!("sync guard: {e}");
        }
    }

    // 6. Memory: flat across steps once Adam's moments exist.
    debug::check_leaks(device, 2, 5, || trainer.step())?;
    println!("{}", debug::memory_report());
    Ok(())
}
