//! `stride`: the command line of the stride framework.
//!
//! - `stride check [--device cpu|cuda[:N]] [--json] [--full] [--op NAME]` — run the op
//!   conformance matrix here (exits non-zero on any failure);
//! - `stride bench cpu` — benchmarks beside their floors and NumPy;
//! - `stride cuda warmup` — compile every CUDA kernel module ahead of time (`cuda.rs`);
//! - `stride train sae [...]` — train the TopK sparse autoencoder (see `train.rs`);
//! - `stride train gpt [...]`, `stride sample` — train a GPT on Shakespeare, sample from a
//!   checkpoint (see `train_gpt.rs`);
//! - `stride generate "prompt"`, `stride chat`, `stride perplexity` — a Llama-family GGUF
//!   model (SmolLM2-135M-Instruct by default, fetched on first use); the commands are generic
//!   over `CausalLm` (`generate.rs`, `chat.rs`, `perplexity.rs`), the loader is below;
//! - `stride quantize INPUT OUTPUT --type q8_0` — a GGUF file or Hugging Face Llama
//!   checkpoint to a quantized GGUF file (`quantize.rs`).

use clap::{Parser, Subcommand};

mod bench;
mod chat;
mod check;
mod cuda;
mod generate;
mod perplexity;
mod plot;
mod quantize;
mod train;
mod train_gpt;

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
    /// CUDA utilities: `stride cuda warmup` compiles every kernel module ahead of time.
    Cuda(cuda::CudaArgs),
    /// Benchmarks, each figure beside its floor and a peer measured in the same run.
    Bench(bench::BenchArgs),
    /// Train a model (`stride train sae`, `stride train gpt`).
    Train(train::TrainArgs),
    /// Continue a prompt with a GPT checkpoint of `stride train gpt`.
    Sample(train_gpt::SampleArgs),
    /// Continue a prompt with a language model (SmolLM2-135M-Instruct by default).
    Generate(generate::GenerateArgs),
    /// Multi-turn chat: interactive on a terminal, one message per line from a pipe.
    Chat(chat::ChatArgs),
    /// Sliding-window perplexity of a text (the Shakespeare text by default).
    Perplexity(perplexity::PerplexityArgs),
    /// Convert a GGUF file or a Hugging Face Llama checkpoint to a quantized GGUF file
    /// (q8_0, q4_0, q4_1, q5_0, q5_1, f16, bf16, f32) that llama.cpp loads.
    Quantize(quantize::QuantizeArgs),
}

/// Loads a Llama-family GGUF file on the requested device, its weights quantized or
/// dequantized as `--weights`/`--dtype` ask (the default decided by the file's tensor types:
/// `generate::WeightsRequest::format`).
fn load_llama(
    path: &std::path::Path,
    request: generate::WeightsRequest,
) -> Result<stride::models::llama::Llama, String> {
    use stride::models::llama::Llama;
    let g = stride_gguf::Gguf::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // --quantize: convert the matrices in memory as `stride quantize` would write them
    let g = match request.quantize {
        None => g,
        Some(t) => {
            let (q, secs) = quantize::requantize_in_memory(&g, t)?;
            eprintln!("quantized the weights to {t} in memory ({secs:.2} s)");
            q
        }
    };
    let format = request.format(|| Llama::gguf_has_quantized_matrices(&g));
    Llama::from_gguf_with(&g, format, &request.device).map_err(|e| e.to_string())
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(a) => check::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Cuda(a) => cuda::run(a),
        Command::Train(a) => train::run(a),
        Command::Sample(a) => train_gpt::sample(a),
        // a checkpoint of `stride train gpt` is a safetensors file; models otherwise are GGUF
        Command::Generate(a)
            if a.model.model.as_ref().is_some_and(|p| {
                p.extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"))
            }) =>
        {
            match a.model.quantize {
                Some(_) => Err("--quantize converts GGUF models; a stride train gpt checkpoint runs as it is saved".to_string()),
                None => train_gpt::generate(a),
            }
        }
        Command::Generate(a) => generate::generate_cmd(a, load_llama),
        Command::Chat(a) => chat::chat_cmd(a, load_llama),
        Command::Perplexity(a) => perplexity::perplexity_cmd(a, load_llama),
        Command::Quantize(a) => quantize::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
