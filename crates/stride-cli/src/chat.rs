//! `stride chat`: a multi-turn conversation with the model's chat template (ChatML for
//! SmolLM2). On a terminal it prompts with `> ` and streams each reply; from a pipe every
//! input line is one user message and each reply is printed on its own line(s). The KV cache
//! is kept between turns (only the new tokens of each turn are forwarded). `/reset` starts
//! over, `/exit` (or end of input) quits. The figures of each turn go to stderr (or, with
//! `--json`, each turn is one JSON line on stdout).
//!
//! ```text
//! stride chat [--system "You are …"] [--max-tokens 512] [sampling flags as `generate`]
//!     [--stop STRING]... [--device …] [--weights …] [--dtype …] [--quantize TYPE] [--model FILE.gguf]
//!     [--json]
//! ```

use crate::generate::{sampling_json, stats_json, write_stats, ModelArgs, SamplingArgs};
use std::io::{BufRead, Write};
use std::time::Duration;
use stride::models::generate::{Chat, GenerateConfig};
use stride::models::CausalLm;
use stride_tokenizer::Tokenizer;

#[derive(clap::Args, Clone, Debug)]
pub struct ChatArgs {
    /// A system message starting the conversation.
    #[arg(long)]
    pub system: Option<String>,
    /// The most tokens per reply.
    #[arg(long, default_value_t = 512, value_name = "N")]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop a reply when its text contains this; repeatable.
    #[arg(long, value_name = "STRING")]
    pub stop: Vec<String>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// One JSON line per turn on stdout (reply, finish reason, timings) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Don't print the figures after each reply (they are always in the JSON).
    #[arg(long)]
    pub quiet: bool,
    /// Decode without capturing the step as a CUDA graph (see `stride generate --help`).
    #[arg(long)]
    pub no_cuda_graph: bool,
}

/// `stride chat` with the model `loader` builds (see [`crate::generate::with_model`]):
/// interactive when stdin is a terminal.
pub fn chat_cmd<M: CausalLm>(
    a: ChatArgs,
    loader: impl FnOnce(&std::path::Path, crate::generate::WeightsRequest) -> Result<M, String>,
) -> Result<(), String> {
    use std::io::IsTerminal;
    crate::generate::with_model(&a.model, loader, |m, tok, load| {
        let stdin = std::io::stdin();
        let interactive = stdin.is_terminal();
        run_chat(
            m,
            tok,
            &a,
            load,
            &mut stdin.lock(),
            interactive,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        )
        .map(|_| ())
    })
}

/// Runs the conversation over the lines of `input`; `interactive` prints prompts (a
/// terminal). Returns the number of turns.
#[allow(clippy::too_many_arguments)]
pub fn run_chat<M: CausalLm>(
    model: &M,
    tok: &Tokenizer,
    args: &ChatArgs,
    load_time: Duration,
    input: &mut dyn BufRead,
    interactive: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<usize, String> {
    let e = |e: std::io::Error| e.to_string();
    let cfg = GenerateConfig {
        max_tokens: args.max_tokens,
        sampling: args.sampling.config(),
        stop: args.stop.clone(),
        eos_tokens: None,
        cuda_graph: !args.no_cuda_graph,
    };
    let mut chat = Chat::new(model, tok, args.system.as_deref()).map_err(|e| e.to_string())?;
    if interactive && !args.quiet {
        writeln!(
            err,
            "loaded in {:.3} s; /reset starts over, /exit quits",
            load_time.as_secs_f64()
        )
        .map_err(e)?;
    }
    let mut turns = 0;
    let mut line = String::new();
    loop {
        if interactive {
            write!(out, "> ").map_err(e)?;
            out.flush().map_err(e)?;
        }
        line.clear();
        if input.read_line(&mut line).map_err(e)? == 0 {
            break;
        }
        let msg = line.trim_end_matches(['\n', '\r']);
        match msg.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                chat = Chat::new(model, tok, args.system.as_deref()).map_err(|e| e.to_string())?;
                continue;
            }
            _ => {}
        }
        let mut io_err = None;
        let reply = chat
            .send(msg, &cfg, |text| {
                if !args.json && io_err.is_none() {
                    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                        io_err = Some(e);
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        if let Some(x) = io_err {
            return Err(format!("writing the output: {x}"));
        }
        turns += 1;
        let stats = &reply.stats;
        if args.json {
            let doc = serde_json::json!({
                "turn": turns,
                "user": msg,
                "reply": reply.completion.text,
                "tokens": reply.completion.tokens,
                "finish": reply.completion.finish.to_string(),
                "weights": crate::generate::weights_json(model),
                "sampling": sampling_json(&cfg.sampling, stats.seed),
                "stats": stats_json(stats, if turns == 1 { load_time } else { Duration::ZERO }),
            });
            writeln!(out, "{doc}").map_err(e)?;
        } else {
            writeln!(out).map_err(e)?;
            if !args.quiet {
                write_stats(
                    err,
                    stats,
                    if turns == 1 {
                        load_time
                    } else {
                        Duration::ZERO
                    },
                    model.device(),
                    Some(&reply.completion.finish.to_string()),
                )
                .map_err(e)?;
            }
        }
    }
    Ok(turns)
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
        c: ChatArgs,
    }

    #[test]
    fn run_chat_from_a_pipe() {
        let tok = byte_tokenizer();
        let m = NgramLm::random(tok.vocab_size(), 4096, 2, Device::Cpu).unwrap();
        let args = Cli::parse_from([
            "x",
            "--system",
            "Hi",
            "--max-tokens",
            "8",
            "--seed",
            "1",
            "--json",
        ])
        .c;
        let mut input =
            std::io::Cursor::new("hello\n\nsecond line\n/reset\nthird\n/exit\nignored\n");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let turns = run_chat(
            &m,
            &tok,
            &args,
            Duration::ZERO,
            &mut input,
            false,
            &mut out,
            &mut err,
        )
        .unwrap();
        assert_eq!(turns, 3);
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1]["user"], "second line");
        assert!(lines[1]["stats"]["reused_tokens"].as_u64().unwrap() > 0);
        assert_eq!(lines[2]["stats"]["reused_tokens"], 0); // after /reset
                                                           // text mode: replies streamed, figures on stderr
        let args = Cli::parse_from(["x", "--max-tokens", "4", "--temperature", "0"]).c;
        let mut input = std::io::Cursor::new("a\nb\n");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        run_chat(
            &m,
            &tok,
            &args,
            Duration::ZERO,
            &mut input,
            true,
            &mut out,
            &mut err,
        )
        .unwrap();
        assert!(String::from_utf8(out).unwrap().starts_with("> "));
        assert!(String::from_utf8(err).unwrap().contains("decode"));
    }
}
