//! An MLP training loop that reads like PyTorch's:
//!
//! ```text
//! for step in range(steps):
//!     opt.zero_grad()
//!     loss = F.mse_loss(model(x), y)
//!     loss.backward()
//!     opt.step()
//! ```
//!
//! on synthetic data (y = sin(x₀) + x₁·x₂ + noise), with AdamW, a warmup + cosine schedule,
//! gradient clipping and the update-health check.
//!
//! `cargo run --release -p stride --example mlp`

use stride::nn::{self, loss, Module};
use stride::optim::{self, LrScheduler, Optimizer};
use stride::prelude::*;

fn main() -> stride::Result<()> {
    manual_seed(0);
    let cpu = Device::Cpu;

    // synthetic regression data
    let n = 512;
    let x = Tensor::randn([n, 3], DType::F32, &cpu, None)?;
    let cols = x.unbind(1)?;
    let noise = Tensor::randn([n], DType::F32, &cpu, None)?.mul(0.05)?;
    let y = cols[0]
        .sin()?
        .add(&cols[1].mul(&cols[2])?)?
        .add(&noise)?
        .unsqueeze(1)?;

    // model = nn.Sequential(Linear(3, 64), GELU(), Linear(64, 64), GELU(), Linear(64, 1))
    let model = nn::mlp(
        &[3, 64, 64, 1],
        nn::Activation::Gelu,
        &nn::Factory::default(),
    )?;
    println!("model: {} parameters", model.num_parameters());

    let steps = 300;
    let mut opt = optim::Adam::new(
        model.named_parameters(),
        optim::AdamConfig {
            lr: 1e-2,
            ..optim::AdamConfig::adamw()
        },
    )?;
    opt.set_health_check(true);
    let mut sched = optim::CosineWithWarmup::new(&mut opt, 20, steps)?;

    for step in 0..steps {
        opt.zero_grad()?;
        let pred = model.forward(&x)?;
        let l = loss::mse_loss(&pred, &y, loss::Reduction::Mean)?;
        l.backward()?;
        let grad_norm = optim::clip_grad_norm_(&model.parameters(), 1.0, 2.0, false)?;
        opt.step()?;
        sched.step(&mut opt)?;
        if step % 30 == 0 || step == steps - 1 {
            println!(
                "step {step:4}  loss {:.5}  grad norm {:.3}  lr {:.2e}  health: {}",
                l.item::<f32>()?,
                grad_norm.item::<f32>()?,
                sched.last_lr()[0],
                opt.health().map(|h| h.to_string()).unwrap_or_default()
            );
        }
    }

    model.eval();
    let final_loss = {
        let _g = no_grad();
        loss::mse_loss(&model.forward(&x)?, &y, loss::Reduction::Mean)?.item::<f32>()?
    };
    println!("final training loss {final_loss:.5}");
    Ok(())
}
