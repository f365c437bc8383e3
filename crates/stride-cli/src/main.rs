//! `stride`: the command line of the stride framework.
//!
//! - `stride check [--device cpu|cuda[:N]] [--json] [--full] [--op NAME]` — run the op
//!   conformance matrix here (exits non-zero on any failure);
//! - `stride bench cpu` — benchmarks beside their floors and NumPy;
//! - `stride train sae [...]` — train the TopK sparse autoencoder (see `train.rs`);
//! - `stride generate`, `stride chat`, `stride perplexity` — written generic over
//!   `CausalLm` in `generate.rs`, `chat.rs`, `perplexity.rs` (`run_generate`, `run_chat`,
//!   `run_perplexity`); registered below once a model loader (`Llama::from_gguf_file`) exists.

use clap::{Parser, Subcommand};

mod bench;
// not registered as commands yet: they need the Llama loader (see the module docs)
#[allow(dead_code)]
mod chat;
mod check;
#[allow(dead_code)]
mod generate;
#[allow(dead_code)]
mod perplexity;
mod plot;
mod train;

#[derive(Parser)]
#[command(
    name = "stride",
    version,
    about = "stride: tensors that give the same answer on every device, dtype and layout"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every registered op over every layout, size and dtype on a device; print a table.
    Check(check::CheckArgs),
    /// Benchmarks, each figure beside its floor and a peer measured in the same run.
    Bench(bench::BenchArgs),
    /// Train a model (`stride train sae`).
    Train(train::TrainArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(a) => check::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Train(a) => train::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
