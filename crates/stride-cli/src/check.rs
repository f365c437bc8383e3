//! `stride check`: run the op registry's conformance matrix on a device of this machine and
//! print what passed.
//!
//! ```text
//! stride check [--device cpu|cuda[:N]|wgpu[:N]] [--json] [--full] [--op NAME]... [--allow-unimplemented]
//! ```
//!
//! Exits non-zero when any check fails, when the device has no backend in this build, and
//! when any case did not run because the device has no kernel for it (unless
//! `--allow-unimplemented`).

use stride::Device;
use stride_check::{registry, Config};

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The device to check: `cpu`, `cuda`, `cuda:N`, `wgpu` or `wgpu:N` (wgpu lists its
    /// adapters first).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Print the report as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Every size of the sweep for every op, form, dtype and layout (slow), instead of a
    /// rotating sample of it.
    #[arg(long)]
    full: bool,
    /// Only this op (`add`, or `add.scalar` for one variant); repeatable.
    #[arg(long = "op", value_name = "NAME")]
    ops: Vec<String>,
    /// Seed of the sample values.
    #[arg(long, default_value_t = Config::default().seed)]
    seed: u64,
    /// Print one line per op as it finishes (to stderr).
    #[arg(long, short)]
    verbose: bool,
    /// Exit 0 even when some cases did not run because the device has no kernel for them
    /// (they are still counted and listed). Without it, any such case is a failure.
    #[arg(long)]
    allow_unimplemented: bool,
}

pub fn run(a: CheckArgs) -> Result<(), String> {
    let device = Device::parse(&a.device).ok_or_else(|| {
        format!(
            "unknown device {:?}; use cpu, cuda, cuda:N, wgpu or wgpu:N",
            a.device
        )
    })?;
    if let Device::Wgpu(_) = device {
        let adapters = stride::webgpu::adapters();
        eprintln!("wgpu adapters ({}):", adapters.len());
        for a in &adapters {
            eprintln!("  {a}");
        }
    }
    stride_check::device_available(&device).map_err(|e| format!("can't check {device}: {e}"))?;
    for name in &a.ops {
        if registry::select(name).is_empty() {
            let mut known: Vec<&str> = registry::all().iter().map(|o| o.name).collect();
            known.sort_unstable();
            return Err(format!(
                "no op named {name:?} in the registry; known ops: {}",
                known.join(", ")
            ));
        }
    }
    let config = Config {
        device,
        full: a.full,
        ops: a.ops,
        seed: a.seed,
        progress: a.verbose,
    };
    let report = stride_check::run(&config);
    if a.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.table());
    }
    // failures always fail; cases without a kernel fail unless --allow-unimplemented
    report.verdict(a.allow_unimplemented)
}
