//! `stride cuda warmup`: compile every CUDA kernel module ahead of time.
//!
//! ```text
//! stride cuda warmup [--device N]
//! ```
//!
//! A fresh machine otherwise compiles each kernel module with NVRTC on its first use (about
//! 0.15 s each, so a first training step can spend seconds compiling). Warmup compiles every
//! module the disk cache lacks, on all CPU cores at once; later processes load them from the
//! cache (`STRIDE_KERNEL_CACHE`, else `~/.cache/stride/kernels`).

#[derive(clap::Args)]
pub struct CudaArgs {
    #[command(subcommand)]
    command: CudaCommand,
}

#[derive(clap::Subcommand)]
enum CudaCommand {
    /// Compile every kernel module missing from the disk cache, in parallel.
    Warmup {
        /// The CUDA device whose architecture to compile for.
        #[arg(long, default_value_t = 0)]
        device: usize,
    },
}

pub fn run(a: CudaArgs) -> Result<(), String> {
    match a.command {
        CudaCommand::Warmup { device } => {
            let w = stride::cuda::warmup(device).map_err(|e| e.to_string())?;
            let dir = stride::cuda::kernel_cache_dir()
                .map_or_else(|| "(none)".to_string(), |d| d.display().to_string());
            println!(
                "{} kernel modules for cuda:{device}: {} compiled now, {} already cached, in {:.1} s ({dir})",
                w.modules,
                w.compiled,
                w.modules - w.compiled,
                w.seconds
            );
            Ok(())
        }
    }
}
