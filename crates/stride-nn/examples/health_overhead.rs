//! What the update-health check costs: an MLP trained with Adam, steps timed with the check
//! off and on. `cargo run --release -p stride-nn --example health_overhead`

use std::time::Instant;
use stride_core::{manual_seed, DType, Device, Result, Tensor};
use stride_nn::optim::{Adam, AdamConfig, Optimizer};
use stride_nn::{loss, mlp, Activation, Factory, Module};

fn main() -> Result<()> {
    manual_seed(0);
    let x = Tensor::randn([256, 64], DType::F32, &Device::Cpu, None)?;
    let y = x.sum_dims(&[1], true)?;
    let model = mlp(&[64, 512, 512, 1], Activation::Relu, &Factory::default())?;
    let mut opt = Adam::new(model.named_parameters(), AdamConfig::default())?;
    let run = |opt: &mut Adam, steps: usize| -> Result<f64> {
        let t = Instant::now();
        for _ in 0..steps {
            opt.zero_grad()?;
            let l = loss::mse_loss(&model.forward(&x)?, &y, loss::Reduction::Mean)?;
            l.backward()?;
            opt.step()?;
        }
        Ok(t.elapsed().as_secs_f64() / steps as f64)
    };
    run(&mut opt, 5)?; // warm up
                       // alternate, keep the best of each (the machine may be shared)
    let (mut off, mut on) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        opt.set_health_check(false);
        off = off.min(run(&mut opt, 15)?);
        opt.set_health_check(true);
        on = on.min(run(&mut opt, 15)?);
    }
    println!(
        "{} parameters; per training step: check off {:.2} ms, on {:.2} ms (+{:.1}%); last report: {}",
        model.num_parameters(),
        off * 1e3,
        on * 1e3,
        (on / off - 1.0) * 100.0,
        opt.health().unwrap()
    );
    Ok(())
}
