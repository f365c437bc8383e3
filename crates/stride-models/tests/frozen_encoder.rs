//! The README's troubleshooting story, end to end: PyTorch's Apple-GPU bug (addcmul_/addcdiv_
//! dropping their writes into non-contiguous outputs) reproduced with stride's fault
//! injector on the Adam update (the fused `adam_step` primitive, which steps every parameter
//! at once and loses the writes of the strided ones) freezes the SAE's transposed encoder
//! while the contiguous decoder trains, without an error or a NaN; one training step
//! under `debug::cross_check` names the op, its layouts and the line that called it.

use stride_core::debug;
use stride_models::sae::SaeConfig;
use stride_models::train::{SaeTrainer, TrainConfig};

fn tiny() -> TrainConfig {
    TrainConfig {
        sae: SaeConfig {
            dims: 16,
            latents: 64,
            k: 4,
            ..SaeConfig::default()
        },
        features: 32,
        feature_prob: 0.05,
        batch: 64,
        lr: 1e-2,
        seed: 3,
        health_every: 0,
    }
}

#[test]
fn a_dropped_strided_write_freezes_the_encoder_and_cross_check_names_it() {
    let mut tr = SaeTrainer::new(tiny()).unwrap();
    let enc = |t: &SaeTrainer| t.model().encoder.weight.tensor().to_f64_vec().unwrap();
    let dec = |t: &SaeTrainer| t.model().decoder.weight.tensor().to_f64_vec().unwrap();
    let (enc0, dec0) = (enc(&tr), dec(&tr));

    // the broken backend: no error, no NaN, a loss that still moves (the decoder learns)
    let fault = debug::inject_fault("adam_step");
    let mut losses = vec![];
    for _ in 0..20 {
        losses.push(tr.step().unwrap().loss.unwrap());
    }
    assert!(losses.iter().all(|l| l.is_finite()));
    assert_eq!(enc(&tr), enc0, "the transposed encoder is frozen");
    assert_ne!(dec(&tr), dec0, "the contiguous decoder trains");

    // the hunt: one step under the cross-check names the op
    let check = debug::cross_check();
    tr.step().unwrap();
    let first = check.first().expect("the dropped writes must be caught");
    assert_eq!(first.op, "adam_step", "{first}");
    assert_eq!(
        first.api.as_deref(),
        Some("stride_core::fused_adam_"),
        "{first}"
    );
    assert!(first.operands.contains("strides [1, 64]"), "{first}");
    assert!(first.operands.contains("non-contiguous"), "{first}");
    assert!(first.site.contains("adam.rs:"), "{first}");
    assert!(first.site.contains("frozen_encoder.rs:"), "{first}");
    let ops: Vec<String> = check.disagreements().into_iter().map(|d| d.op).collect();
    assert!(
        ops.iter().all(|o| o == "adam_step"),
        "only the faulty ops disagree: {ops:?}"
    );
    assert!(check.skipped().is_empty(), "{:?}", check.skipped());
    drop(check);

    // with a correct backend, a whole cross-checked training step is clean
    drop(fault);
    let check = debug::cross_check();
    tr.step().unwrap();
    assert!(
        check.disagreements().is_empty(),
        "{}",
        check.disagreements()[0]
    );
    // a whole step: forward, backward and one Adam primitive for all four parameters (48)
    assert!(check.checked() > 40, "{} ops checked", check.checked());
    assert_ne!(enc(&tr), enc0, "the encoder trains again");
}
