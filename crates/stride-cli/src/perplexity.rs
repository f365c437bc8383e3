//! `stride perplexity`: sliding-window perplexity of a model over a text file (by default
//! the Shakespeare text, fetched into the cache on first use; see `stride::models::hub`).
//!
//! ```text
//! stride perplexity [--file F] [--ctx 512] [--stride 256] [--max-tokens N]
//!     [--device …] [--weights …] [--dtype …] [--quantize TYPE] [--model FILE.gguf] [--json]
//! ```
//!
//! The text is encoded whole with the model's tokenizer (special-token strings in it are
//! plain text; BOS first when the model asks for one), then scored with the windows of
//! `stride::models::perplexity` (each position once, with up to `ctx − 1` tokens of context,
//! at least `ctx − stride` after the first window).

use crate::generate::ModelArgs;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use stride::models::perplexity::{perplexity, PerplexityConfig, PerplexityResult};
use stride::models::{hub, CausalLm};
use stride_tokenizer::Tokenizer;

#[derive(clap::Args, Clone, Debug)]
pub struct PerplexityArgs {
    /// The text to score [default: the Shakespeare text, fetched on first use].
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Tokens per window.
    #[arg(long, default_value_t = 512, value_name = "N")]
    pub ctx: usize,
    /// Tokens between window starts (1..=ctx).
    #[arg(long, default_value_t = 256, value_name = "S")]
    pub stride: usize,
    /// Score only the first N tokens of the text.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<usize>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print one JSON document (with the per-position arg-max ids) instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// `stride perplexity` with the model `loader` builds (see [`crate::generate::with_model`]).
pub fn perplexity_cmd<M: CausalLm>(
    a: PerplexityArgs,
    loader: impl FnOnce(&std::path::Path, crate::generate::WeightsRequest) -> Result<M, String>,
) -> Result<(), String> {
    // scoring is all prefill, where the f32 product is faster than the quantized one (it has
    // no multi-row kernel yet: docs/PERFORMANCE.md): dequantized unless asked otherwise
    // (--quantize asks for the quantized kernels)
    let mut model = a.model.clone();
    if model.weights.is_none() && model.quantize.is_none() {
        model.weights = Some("dequantized".into());
    }
    crate::generate::with_model(&model, loader, |m, tok, load| {
        run_perplexity(
            m,
            tok,
            &a,
            load,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        )
        .map(|_| ())
    })
}

/// Scores the file; the summary (or the JSON) goes to `out`, progress to `err`.
pub fn run_perplexity<M: CausalLm>(
    model: &M,
    tok: &Tokenizer,
    args: &PerplexityArgs,
    load_time: Duration,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<PerplexityResult, String> {
    let e = |e: std::io::Error| e.to_string();
    let path = match &args.file {
        Some(p) => p.clone(),
        None => hub::shakespeare_text().map_err(|e| e.to_string())?,
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|x| format!("can't read {} as UTF-8 text: {x}", path.display()))?;
    let t0 = Instant::now();
    let tokens = tok.encode_plain(&text, true).map_err(|e| e.to_string())?;
    let encode_time = t0.elapsed();
    let cfg = PerplexityConfig {
        ctx: args.ctx,
        stride: args.stride,
        max_tokens: args.max_tokens,
    };
    let r = perplexity(model, &tokens, &cfg, |done, total| {
        if !args.json && (done == total || done % 16 == 0) {
            let _ = write!(err, "\rwindow {done}/{total}");
            let _ = err.flush();
        }
    })
    .map_err(|e| e.to_string())?;
    if !args.json {
        writeln!(err).map_err(e)?;
    }
    let peak = stride::memory_stats(model.device()).peak_bytes;
    let scored_per_s = r.count as f64 / r.time.as_secs_f64().max(1e-12);
    if args.json {
        let doc = serde_json::json!({
            "file": path.display().to_string(),
            "text_bytes": text.len(),
            "text_tokens": tokens.len(),
            "tokens": r.tokens,
            "token_ids": &tokens[..r.tokens.min(tokens.len())],
            "ctx": cfg.ctx,
            "stride": cfg.stride,
            "windows": r.windows.len(),
            "count": r.count,
            "nll": r.nll,
            "perplexity": r.perplexity,
            "top1_accuracy": r.top1_hits as f64 / r.count.max(1) as f64,
            "first_position": r.positions.first(),
            "argmax": r.argmax,
            "load_s": load_time.as_secs_f64(),
            "encode_s": encode_time.as_secs_f64(),
            "score_s": r.time.as_secs_f64(),
            "scored_tokens_per_s": scored_per_s,
            "peak_memory_bytes": peak,
            "device": model.device().to_string(),
            "weights": crate::generate::weights_json(model),
        });
        writeln!(out, "{doc}").map_err(e)?;
    } else {
        writeln!(
            out,
            "file          {} ({} bytes, {} tokens; {} used)",
            path.display(),
            text.len(),
            tokens.len(),
            r.tokens
        )
        .map_err(e)?;
        writeln!(
            out,
            "windows       {} of {} tokens, stride {}",
            r.windows.len(),
            cfg.ctx,
            cfg.stride
        )
        .map_err(e)?;
        writeln!(
            out,
            "scored        {} positions, NLL {:.4} nats",
            r.count, r.nll
        )
        .map_err(e)?;
        writeln!(out, "perplexity    {:.4}", r.perplexity).map_err(e)?;
        writeln!(
            out,
            "top-1         {:.2}% of positions",
            100.0 * r.top1_hits as f64 / r.count.max(1) as f64
        )
        .map_err(e)?;
        writeln!(err, "load          {:.3} s", load_time.as_secs_f64()).map_err(e)?;
        writeln!(err, "encode        {:.3} s", encode_time.as_secs_f64()).map_err(e)?;
        writeln!(
            err,
            "score         {:.3} s ({:.1} tokens/s)",
            r.time.as_secs_f64(),
            scored_per_s
        )
        .map_err(e)?;
        writeln!(
            err,
            "peak memory   {:.1} MiB on {}",
            peak as f64 / (1024.0 * 1024.0),
            model.device()
        )
        .map_err(e)?;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use stride::models::toy::{byte_tokenizer, NgramLm};
    use stride::Device;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        p: PerplexityArgs,
    }

    #[test]
    fn run_perplexity_on_a_file() {
        let tok = byte_tokenizer();
        let m = NgramLm::uniform(tok.vocab_size(), 128, Device::Cpu).unwrap();
        let f = std::env::temp_dir().join(format!("stride-ppl-{}.txt", std::process::id()));
        std::fs::write(&f, "To be, or not to be, that is the question. ".repeat(10)).unwrap();
        let args = Cli::parse_from([
            "x",
            "--file",
            f.to_str().unwrap(),
            "--ctx",
            "64",
            "--stride",
            "32",
            "--json",
        ])
        .p;
        let mut out = Vec::new();
        let r = run_perplexity(&m, &tok, &args, Duration::ZERO, &mut out, &mut Vec::new()).unwrap();
        assert!((r.perplexity - 259.0).abs() < 1e-9);
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["count"], 429); // 430 bytes, all but the first scored
        assert_eq!(doc["argmax"].as_array().unwrap().len(), 429);
        let args = Cli::parse_from([
            "x",
            "--file",
            f.to_str().unwrap(),
            "--max-tokens",
            "100",
            "--ctx",
            "50",
            "--stride",
            "50",
        ])
        .p;
        let mut out = Vec::new();
        run_perplexity(&m, &tok, &args, Duration::ZERO, &mut out, &mut Vec::new()).unwrap();
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("perplexity    259.0000"));
        std::fs::remove_file(&f).unwrap();
    }
}
