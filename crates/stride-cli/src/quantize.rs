//! `stride quantize INPUT OUTPUT --type q8_0`: writes a GGUF file that llama.cpp loads, from
//! a GGUF file (F32/F16/BF16 or already quantized tensors) or a Hugging Face Llama checkpoint
//! directory (`config.json`, `*.safetensors`, `tokenizer.json`). Also the in-memory
//! conversion behind the `--quantize` load option of `generate`, `chat` and `perplexity`
//! ([`requantize_in_memory`]).
//!
//! **Tensor types** (llama-quantize's policy for these types, without an importance matrix):
//! - 1-D tensors (the norms) are F32;
//! - with `--type f32|f16|bf16` every other tensor is that type;
//! - with a block type, every matrix is that type except the output head (`output.weight`, or
//!   `token_embd.weight` when the head is tied to it): llama-quantize keeps it at Q8_0 for
//!   `q8_0` and otherwise gives it Q6_K when its rows are whole 256-element super-blocks and
//!   Q8_0 when they are not. stride does not encode Q6_K, so the head is Q8_0 in both cases —
//!   the same file as llama-quantize's for models whose width is not a multiple of 256
//!   (SmolLM2: 576), 8.5 instead of 6.56 bits for that one tensor otherwise (logged);
//! - a tensor whose rows are not whole blocks of the chosen type falls back to F16 (logged;
//!   llama-quantize refuses such a tensor for the 32-element block types);
//! - a GGUF tensor already of the chosen type is copied byte for byte (as llama-quantize
//!   does); any other quantized input is dequantized and requantized, which adds a second
//!   rounding (a warning says so).
//!
//! The input is memory-mapped and converted one tensor at a time (rows in parallel with
//! rayon), so memory holds at most one output tensor; the output is written to a temporary
//! file beside OUTPUT and renamed when complete.

use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use stride_gguf::{Array, GgmlType, Gguf, GgufWriter, Value};

const AFTER_HELP: &str = "\
Examples:
  stride quantize model.f16.gguf model.q8_0.gguf --type q8_0
  stride quantize SmolLM2-135M-Instruct/ smollm2.q4_0.gguf --type q4_0   # a Hugging Face checkpoint directory
  stride generate \"Once upon a time\" --model smollm2.q4_0.gguf

Norms stay F32. With a block type the output head (or the embedding table when it is tied) is
Q8_0: llama-quantize's choice for q8_0 and for widths that are not a multiple of 256; where it
would pick Q6_K, stride (which does not encode Q6_K) keeps Q8_0: more bits, never fewer.
A matrix whose rows are not whole blocks is written as F16 (logged).
Requantizing an already-quantized file adds a second rounding: convert from F32/F16/BF16
weights when you have them.";

/// `stride quantize`: convert a GGUF file or a Hugging Face Llama checkpoint to a GGUF file of
/// another type.
#[derive(clap::Args, Clone, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct QuantizeArgs {
    /// A GGUF file, or a Hugging Face Llama checkpoint directory (config.json, *.safetensors,
    /// tokenizer.json, optionally tokenizer_config.json).
    pub input: PathBuf,
    /// The GGUF file to write (refused if it exists, unless --force).
    pub output: PathBuf,
    /// The weight type: q8_0, q4_0, q4_1, q5_0, q5_1 (block-quantized, byte for byte as
    /// llama.cpp's reference encoder), f16, bf16 or f32.
    #[arg(long = "type", value_name = "TYPE")]
    pub ty: String,
    /// Overwrite OUTPUT if it exists.
    #[arg(long)]
    pub force: bool,
    /// Every matrix the requested type, the output head and embedding table included
    /// (llama-quantize's --pure).
    #[arg(long)]
    pub pure: bool,
    /// The pre-tokenizer name to write as tokenizer.ggml.pre for a checkpoint whose
    /// tokenizer.json is not recognised (e.g. smollm, gpt-2, llama-bpe).
    #[arg(long, value_name = "NAME")]
    pub pre_tokenizer: Option<String>,
    /// Print the summary as one JSON document on stdout (no progress bar).
    #[arg(long)]
    pub json: bool,
}

/// The types `--type` accepts, in the order of the help.
const TYPES: &str = "q8_0, q4_0, q4_1, q5_0, q5_1, f16, bf16, f32";

/// Parses a `--type` name (case-insensitive).
pub fn parse_type(s: &str) -> Result<GgmlType, String> {
    use GgmlType::*;
    Ok(match s.to_ascii_lowercase().as_str() {
        "q8_0" => Q8_0,
        "q4_0" => Q4_0,
        "q4_1" => Q4_1,
        "q5_0" => Q5_0,
        "q5_1" => Q5_1,
        "f16" => F16,
        "bf16" => BF16,
        "f32" => F32,
        other => {
            let hint = if other.contains("_k") || other.starts_with("iq") {
                " (k-quants and i-quants are read by stride but not encoded yet)"
            } else {
                ""
            };
            return Err(format!("unknown --type {s:?}; use one of {TYPES}{hint}"));
        }
    })
}

/// Parses a `--quantize` load type: a block type with a CPU kernel (q8_0, q4_0, q4_1, q5_0,
/// q5_1).
pub fn parse_load_type(s: &str) -> Result<GgmlType, String> {
    match parse_type(s) {
        Ok(t) if t.is_quantized() => Ok(t),
        _ => Err(format!(
            "unknown --quantize {s:?}; use q8_0, q4_0, q4_1, q5_0 or q5_1 (for f16/bf16/f32 weights use --weights dequantized --dtype)"
        )),
    }
}

/// llama.cpp's `general.file_type` (`LLAMA_FTYPE_*`) of a file whose matrices are `t`.
fn file_type(t: GgmlType) -> u32 {
    use GgmlType::*;
    match t {
        F32 => 0,
        F16 => 1,
        Q4_0 => 2,
        Q4_1 => 3,
        Q8_0 => 7,
        Q5_0 => 8,
        Q5_1 => 9,
        BF16 => 32,
        _ => 0,
    }
}

/// The type a tensor is written as (llama-quantize's policy, see the module docs) and, when
/// it differs from the plain choice, why.
pub fn choose_type(
    name: &str,
    dims: &[u64],
    target: GgmlType,
    has_output: bool,
    pure: bool,
) -> (GgmlType, Option<String>) {
    if dims.len() < 2 {
        return (GgmlType::F32, None);
    }
    let row = dims[0];
    let mut t = target;
    let mut note = None;
    let is_head = name == "output.weight" || (!has_output && name == "token_embd.weight");
    if target.is_quantized() && !pure && is_head && target != GgmlType::Q8_0 {
        t = GgmlType::Q8_0;
        if row.is_multiple_of(stride_gguf::QK_K as u64) {
            note = Some(format!(
                "{name}: Q8_0 (llama-quantize would write Q6_K, which stride does not encode)"
            ));
        }
    }
    if !row.is_multiple_of(t.block_size() as u64) {
        note = Some(format!(
            "{name}: rows of {row} are not whole {t} blocks of {}; written as F16",
            t.block_size()
        ));
        t = GgmlType::F16;
    }
    (t, note)
}

/// Where a tensor's values come from.
enum Src {
    /// Tensor `index` of the input GGUF file.
    Gguf(usize),
    /// A safetensors tensor: file index, name, and the head count when its rows are permuted
    /// to GGUF's interleaved rotary layout.
    St {
        file: usize,
        name: String,
        permute: Option<usize>,
    },
}

/// One output tensor.
struct Item {
    name: String,
    /// ggml order (`dims[0]` is the row length).
    dims: Vec<u64>,
    out: GgmlType,
    /// The input's type, for the summary (`"F32"`, `"BF16"`, `"Q4_1"`).
    in_type: String,
    /// Copy the input bytes unchanged (a GGUF tensor already of the chosen type).
    copy: bool,
    src: Src,
}

impl Item {
    fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
    fn out_bytes(&self) -> u64 {
        self.out.bytes_for(self.n_elements()).unwrap_or(0)
    }
}

/// A conversion planned before anything is written: the metadata, every tensor's type.
struct Plan {
    writer: GgufWriter,
    items: Vec<Item>,
    notes: Vec<String>,
    /// Tensors dequantized from a block type and quantized again.
    requantized: Vec<String>,
    input_bytes: u64,
}

/// The summary of a conversion (printed, or as JSON with `--json`).
#[derive(Clone, Debug)]
pub struct Summary {
    pub input: String,
    pub output: String,
    pub target: GgmlType,
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub n_tensors: usize,
    pub n_elements: u64,
    /// Bits per weight of the output's tensor data (all tensors).
    pub bits_per_weight: f64,
    pub seconds: f64,
    /// Tensors per output type.
    pub types: BTreeMap<String, usize>,
    pub notes: Vec<String>,
    pub requantized: usize,
    pub copied: usize,
}

impl Summary {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "input": self.input,
            "output": self.output,
            "type": self.target.name(),
            "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes,
            "tensors": self.n_tensors,
            "weights": self.n_elements,
            "bits_per_weight": self.bits_per_weight,
            "seconds": self.seconds,
            "tensor_types": self.types,
            "notes": self.notes,
            "requantized_tensors": self.requantized,
            "copied_tensors": self.copied,
        })
    }
}

/// The input being converted: a GGUF file, or a checkpoint's memory-mapped safetensors files.
enum Input<'a> {
    Gguf(&'a Gguf),
    Hf(&'a [memmap2::Mmap]),
}

/// An opened input (what [`Input`] borrows) and, for a checkpoint, its plan.
enum Opened {
    Gguf(Gguf),
    Hf(Vec<memmap2::Mmap>, Plan),
}

fn is_gguf_file(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && magic == stride_gguf::GGUF_MAGIC
}

/// `stride quantize`.
pub fn run(a: QuantizeArgs) -> Result<(), String> {
    let target = parse_type(&a.ty)?;
    if !a.input.exists() {
        return Err(format!("{}: no such file or directory", a.input.display()));
    }
    if a.output.exists() {
        if !a.force {
            return Err(format!(
                "{} exists; pass --force to overwrite it, or choose another output path",
                a.output.display()
            ));
        }
        if let (Ok(i), Ok(o)) = (a.input.canonicalize(), a.output.canonicalize()) {
            if i == o {
                return Err(format!(
                    "the output {} is the input; write to another path",
                    a.output.display()
                ));
            }
        }
    }
    let t0 = Instant::now();
    let opened = open(&a.input, a.pre_tokenizer.as_deref(), target, a.pure)?;
    let gguf_plan;
    let (input, plan) = match &opened {
        Opened::Gguf(g) => {
            let mut p = plan_gguf(g, target, a.pure)?;
            p.input_bytes = g.bytes().len() as u64;
            gguf_plan = p;
            (Input::Gguf(g), &gguf_plan)
        }
        Opened::Hf(maps, p) => (Input::Hf(maps), p),
    };
    let say = |s: &str| {
        if !a.json {
            eprintln!("{s}");
        }
    };
    if !plan.requantized.is_empty() {
        eprintln!(
            "warning: {} tensors are already quantized ({}…) and are dequantized and quantized again to {target}: \
             a second rounding, worse than quantizing the original F32/F16/BF16 weights once",
            plan.requantized.len(),
            plan.requantized[0]
        );
    }
    for n in &plan.notes {
        say(&format!("note: {n}"));
    }
    let total: u64 = plan.items.iter().map(|i| i.n_elements()).sum();
    let pb = if a.json {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template(
                "{bar:40} {percent:>3}% {msg} [{elapsed_precise} < {eta_precise}]",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    };
    // write beside the output and rename when complete: never a half-written OUTPUT
    let mut tmp = a.output.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = (|| -> Result<(), String> {
        let file = std::fs::File::create(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        let out = std::io::BufWriter::with_capacity(1 << 20, file);
        convert(&input, plan, out, &pb)?;
        std::fs::rename(&tmp, &a.output).map_err(|e| {
            format!(
                "cannot move the finished file to {}: {e}",
                a.output.display()
            )
        })
    })();
    pb.finish_and_clear();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let summary = summarize(
        &a.input,
        &a.output,
        target,
        plan,
        t0.elapsed().as_secs_f64(),
    );
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary.json()).map_err(|e| e.to_string())?
        );
    } else {
        let mb = |b: u64| b as f64 / 1e6;
        let types: Vec<String> = summary
            .types
            .iter()
            .map(|(t, n)| format!("{n} {t}"))
            .collect();
        println!(
            "stride quantize: {} -> {} ({})",
            summary.input,
            summary.output,
            summary.target.name()
        );
        println!(
            "tensors        {} ({}; {} copied, {} requantized)",
            summary.n_tensors,
            types.join(", "),
            summary.copied,
            summary.requantized
        );
        println!(
            "size           {:.2} MB -> {:.2} MB ({:.3}x)",
            mb(summary.input_bytes),
            mb(summary.output_bytes),
            summary.output_bytes as f64 / summary.input_bytes.max(1) as f64
        );
        println!(
            "bits/weight    {:.3} over {} weights",
            summary.bits_per_weight, summary.n_elements
        );
        println!("time           {:.2} s", summary.seconds);
    }
    Ok(())
}

fn summarize(input: &Path, output: &Path, target: GgmlType, plan: &Plan, secs: f64) -> Summary {
    let mut types = BTreeMap::new();
    for i in &plan.items {
        *types.entry(i.out.name().to_string()).or_insert(0) += 1;
    }
    let n_elements: u64 = plan.items.iter().map(|i| i.n_elements()).sum();
    let data: u64 = plan.items.iter().map(|i| i.out_bytes()).sum();
    Summary {
        input: input.display().to_string(),
        output: output.display().to_string(),
        target,
        input_bytes: plan.input_bytes,
        output_bytes: plan.writer.file_len(),
        n_tensors: plan.items.len(),
        n_elements,
        bits_per_weight: data as f64 * 8.0 / n_elements.max(1) as f64,
        seconds: secs,
        types,
        notes: plan.notes.clone(),
        requantized: plan.requantized.len(),
        copied: plan.items.iter().filter(|i| i.copy).count(),
    }
}

fn open(path: &Path, pre: Option<&str>, target: GgmlType, pure: bool) -> Result<Opened, String> {
    if path.is_dir() {
        let (maps, plan) = plan_hf(path, target, pure, pre)?;
        return Ok(Opened::Hf(maps, plan));
    }
    if !is_gguf_file(path) {
        let hint = if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"))
        {
            "; for a Hugging Face checkpoint give its directory (with config.json and tokenizer.json), not one .safetensors file"
        } else {
            ""
        };
        return Err(format!(
            "{} is not a GGUF file (it does not start with \"GGUF\"){hint}",
            path.display()
        ));
    }
    Gguf::open(path)
        .map(Opened::Gguf)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Metadata keys the converter sets itself.
const DERIVED_KEYS: [&str; 3] = [
    "general.file_type",
    "general.quantization_version",
    "general.alignment",
];

fn plan_gguf(g: &Gguf, target: GgmlType, pure: bool) -> Result<Plan, String> {
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        if !DERIVED_KEYS.contains(&k) {
            w.add(k, v.clone());
        }
    }
    set_type_keys(&mut w, target);
    if g.get("general.alignment").is_some() {
        let a = u32::try_from(g.alignment()).map_err(|_| "alignment too large".to_string())?;
        w.alignment(a).map_err(|e| e.to_string())?;
    }
    let has_output = g.tensor("output.weight").is_ok();
    let mut items = Vec::new();
    let (mut notes, mut requantized) = (Vec::new(), Vec::new());
    for (index, info) in g.tensors().iter().enumerate() {
        let (out, note) = choose_type(&info.name, &info.dims, target, has_output, pure);
        notes.extend(note);
        let copy = info.ggml_type == out;
        if !copy && !stride_gguf::can_dequantize(info.ggml_type) {
            return Err(format!(
                "tensor {} is {}, which stride cannot read to convert; convert a file with F32, F16, BF16 or Q4_0…Q8_0/K-quant tensors",
                info.name, info.ggml_type
            ));
        }
        if !copy && info.ggml_type.is_quantized() {
            requantized.push(info.name.clone());
        }
        w.add_tensor_info(&info.name, &info.dims, out)
            .map_err(|e| e.to_string())?;
        items.push(Item {
            name: info.name.clone(),
            dims: info.dims.clone(),
            out,
            in_type: info.ggml_type.name().to_string(),
            copy,
            src: Src::Gguf(index),
        });
    }
    Ok(Plan {
        writer: w,
        items,
        notes,
        requantized,
        input_bytes: 0,
    })
}

fn set_type_keys(w: &mut GgufWriter, target: GgmlType) {
    w.add_u32("general.file_type", file_type(target));
    if target.is_quantized() {
        w.add_u32("general.quantization_version", 2);
    }
}

/// Rows per parallel task: about 64k values, at least one row.
fn rows_per_task(row_len: u64) -> u64 {
    (65536 / row_len.max(1)).max(1)
}

/// Writes the planned file to `out`: header, then each tensor converted row-chunk-parallel.
fn convert<W: Write>(
    input: &Input<'_>,
    plan: &Plan,
    out: W,
    pb: &ProgressBar,
) -> Result<W, String> {
    let sts = match input {
        Input::Hf(maps) => maps
            .iter()
            .map(|m| safetensors::SafeTensors::deserialize(m).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?,
        Input::Gguf(_) => Vec::new(),
    };
    let mut dw = plan
        .writer
        .write_header(out)
        .map_err(|e| format!("writing the header: {e}"))?;
    for item in &plan.items {
        pb.set_message(item.name.clone());
        let bytes = tensor_bytes(input, &sts, item, pb)?;
        dw.write_tensor(&item.name, &bytes)
            .map_err(|e| format!("writing tensor {}: {e}", item.name))?;
    }
    dw.finish().map_err(|e| format!("finishing the file: {e}"))
}

/// One output tensor's bytes.
fn tensor_bytes(
    input: &Input<'_>,
    sts: &[safetensors::SafeTensors<'_>],
    item: &Item,
    pb: &ProgressBar,
) -> Result<Vec<u8>, String> {
    let row_len = item.dims.first().copied().unwrap_or(1);
    let n_rows: u64 = item.dims.iter().skip(1).product();
    let ctx = |e: String| {
        format!(
            "tensor {} ({} -> {}): {e}",
            item.name, item.in_type, item.out
        )
    };
    let rows: Box<dyn Fn(u64, u64) -> Result<Vec<f32>, String> + Sync> = match (&item.src, input) {
        (Src::Gguf(i), Input::Gguf(g)) => {
            let info = &g.tensors()[*i];
            let data = g.data_of(info).map_err(|e| e.to_string())?;
            if item.copy {
                pb.inc(item.n_elements());
                return Ok(data.to_vec());
            }
            let rb = info.row_bytes() as usize;
            let t = info.ggml_type;
            Box::new(move |a: u64, b: u64| {
                let s = data
                    .get(a as usize * rb..b as usize * rb)
                    .ok_or("rows out of range")?;
                stride_gguf::dequantize_to_vec(t, s).map_err(|e| e.to_string())
            })
        }
        (
            Src::St {
                file,
                name,
                permute,
            },
            Input::Hf(_),
        ) => {
            let view = sts[*file].tensor(name).map_err(|e| ctx(e.to_string()))?;
            let data = view.data();
            let dtype = view.dtype();
            let rl = row_len as usize;
            let es = dtype.bitsize() / 8;
            let head_rows = permute.map(|h| (n_rows / h as u64) as usize);
            Box::new(move |a: u64, b: u64| {
                let mut x = Vec::with_capacity((b - a) as usize * rl);
                for r in a as usize..b as usize {
                    let src = match head_rows {
                        Some(hd) => hf_row_of_gguf_row(r, hd),
                        None => r,
                    };
                    let bytes = data
                        .get(src * rl * es..(src + 1) * rl * es)
                        .ok_or("rows out of range")?;
                    push_f32(&mut x, bytes, dtype)?;
                }
                Ok(x)
            })
        }
        _ => return Err(ctx("internal: source and input disagree".into())),
    };
    let step = rows_per_task(row_len);
    let chunks: Vec<(u64, u64)> = (0..n_rows.div_ceil(step))
        .map(|c| (c * step, ((c + 1) * step).min(n_rows)))
        .collect();
    let parts = chunks
        .par_iter()
        .map(|&(a, b)| {
            let x = rows(a, b)?;
            let q = stride_gguf::quantize(item.out, &x).map_err(|e| e.to_string())?;
            pb.inc((b - a) * row_len);
            Ok(q)
        })
        .collect::<Result<Vec<Vec<u8>>, String>>()
        .map_err(ctx)?;
    Ok(parts.concat())
}

/// The Hugging Face row that GGUF row `r` of a permuted Q/K matrix holds: within each head of
/// `hd` rows, HF's half-split order `(2, hd/2)` becomes adjacent pairs `(hd/2, 2)` (llama.cpp's
/// converter does this so that its rotation of pairs `(2i, 2i+1)` computes HF's
/// `rotate_half`; `stride_models::llama::weights` loads both layouts).
fn hf_row_of_gguf_row(r: usize, hd: usize) -> usize {
    let (head, k) = (r / hd, r % hd);
    let (i, j) = (k / 2, k % 2);
    head * hd + j * (hd / 2) + i
}

fn push_f32(x: &mut Vec<f32>, bytes: &[u8], dtype: safetensors::Dtype) -> Result<(), String> {
    use safetensors::Dtype as D;
    match dtype {
        D::F32 => x.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        D::F16 => x.extend(
            bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        D::BF16 => x.extend(
            bytes
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        other => return Err(format!("dtype {other:?} is not F32, F16 or BF16")),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Hugging Face checkpoints

/// HF block tensor suffix → GGUF name, and whether its rows are permuted (q: query heads,
/// k: key/value heads).
const HF_BLOCK: [(&str, &str, u8); 9] = [
    ("input_layernorm", "attn_norm", 0),
    ("self_attn.q_proj", "attn_q", 1),
    ("self_attn.k_proj", "attn_k", 2),
    ("self_attn.v_proj", "attn_v", 0),
    ("self_attn.o_proj", "attn_output", 0),
    ("post_attention_layernorm", "ffn_norm", 0),
    ("mlp.gate_proj", "ffn_gate", 0),
    ("mlp.up_proj", "ffn_up", 0),
    ("mlp.down_proj", "ffn_down", 0),
];

fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("{} is not valid JSON: {e}", path.display()))
}

fn plan_hf(
    dir: &Path,
    target: GgmlType,
    pure: bool,
    pre: Option<&str>,
) -> Result<(Vec<memmap2::Mmap>, Plan), String> {
    let cfg_path = dir.join("config.json");
    if !cfg_path.exists() {
        return Err(format!(
            "{} is a directory without config.json; give a GGUF file or a Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json)",
            dir.display()
        ));
    }
    let cfg = read_json(&cfg_path)?;
    let archs: Vec<&str> = cfg
        .get("architectures")
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
        .unwrap_or_default();
    let model_type = cfg.get("model_type").and_then(|m| m.as_str());
    let is_llama = archs.contains(&"LlamaForCausalLM")
        || (archs.is_empty() && model_type.is_none_or(|m| m == "llama"));
    if !is_llama || model_type.is_some_and(|m| m != "llama") {
        return Err(format!(
            "{}: the checkpoint is {} (model_type {:?}); stride quantize converts Llama-architecture checkpoints only (LlamaForCausalLM: Llama 2/3, SmolLM, TinyLlama, …); for another architecture convert it to GGUF first and give stride quantize the GGUF file",
            cfg_path.display(),
            if archs.is_empty() { "of no listed architecture".to_string() } else { archs.join(", ") },
            model_type.unwrap_or("absent"),
        ));
    }
    if cfg.get("rope_scaling").is_some_and(|r| !r.is_null()) {
        return Err(format!(
            "{}: rope_scaling {} is not supported by stride quantize yet (nor by stride's Llama); only checkpoints without rope scaling convert",
            cfg_path.display(),
            cfg["rope_scaling"]
        ));
    }
    let text = serde_json::to_string(&cfg).map_err(|e| e.to_string())?;
    let c = stride::models::llama::LlamaConfig::from_hf_json(&text)
        .map_err(|e| format!("{}: {e}", cfg_path.display()))?;

    // the safetensors files, memory-mapped
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!(
            "{} has no .safetensors files (PyTorch .bin checkpoints are not read; save the model with safetensors)",
            dir.display()
        ));
    }
    let mut maps = Vec::new();
    let mut input_bytes = 0u64;
    for f in &files {
        let file =
            std::fs::File::open(f).map_err(|e| format!("cannot open {}: {e}", f.display()))?;
        // SAFETY: a read-only map of a file we do not modify while converting (as every
        // memory-mapped reader, it assumes nobody truncates the file meanwhile).
        let m = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| format!("cannot map {}: {e}", f.display()))?;
        input_bytes += m.len() as u64;
        maps.push(m);
    }
    // name → (file, dtype, shape)
    let mut found: BTreeMap<String, (usize, safetensors::Dtype, Vec<usize>)> = BTreeMap::new();
    for (i, m) in maps.iter().enumerate() {
        let st = safetensors::SafeTensors::deserialize(m).map_err(|e| {
            format!(
                "{} is not a valid safetensors file: {e}",
                files[i].display()
            )
        })?;
        for (name, v) in st.iter() {
            found.insert(name.to_string(), (i, v.dtype(), v.shape().to_vec()));
        }
    }
    let (d, qd, kvd, f) = (
        c.dim,
        c.n_heads * c.head_dim,
        c.n_kv_heads * c.head_dim,
        c.ffn_dim,
    );
    let tied = !found.contains_key("lm_head.weight") || c.tied_embeddings;
    // (HF name, GGUF name, expected shape, permute heads)
    let mut wanted: Vec<(String, String, Vec<usize>, Option<usize>)> = vec![(
        "model.embed_tokens.weight".into(),
        "token_embd.weight".into(),
        vec![c.vocab_size, d],
        None,
    )];
    for l in 0..c.n_layers {
        for (hf, gg, p) in HF_BLOCK {
            let shape = match gg {
                "attn_norm" | "ffn_norm" => vec![d],
                "attn_q" => vec![qd, d],
                "attn_k" | "attn_v" => vec![kvd, d],
                "attn_output" => vec![d, qd],
                "ffn_gate" | "ffn_up" => vec![f, d],
                _ => vec![d, f],
            };
            let permute = match p {
                1 => Some(c.n_heads),
                2 => Some(c.n_kv_heads),
                _ => None,
            };
            wanted.push((
                format!("model.layers.{l}.{hf}.weight"),
                format!("blk.{l}.{gg}.weight"),
                shape,
                permute,
            ));
        }
    }
    wanted.push((
        "model.norm.weight".into(),
        "output_norm.weight".into(),
        vec![d],
        None,
    ));
    if !tied {
        wanted.push((
            "lm_head.weight".into(),
            "output.weight".into(),
            vec![c.vocab_size, d],
            None,
        ));
    }
    let known: std::collections::BTreeSet<&str> = wanted.iter().map(|w| w.0.as_str()).collect();
    let unknown: Vec<&String> = found
        .keys()
        .filter(|k| {
            !known.contains(k.as_str())
                && !k.ends_with("rotary_emb.inv_freq")
                && *k != "lm_head.weight"
        })
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "the checkpoint has tensors a Llama model does not: {}{}; is it really a plain LlamaForCausalLM?",
            unknown.iter().take(5).map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
            if unknown.len() > 5 { format!(" and {} more", unknown.len() - 5) } else { String::new() }
        ));
    }

    let mut w = GgufWriter::new();
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into());
    w.add_string("general.architecture", "llama");
    w.add_string("general.type", "model");
    w.add_string("general.name", &name);
    let u = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
    w.add_u32("llama.block_count", u(c.n_layers));
    w.add_u32("llama.context_length", u(c.context_len));
    w.add_u32("llama.embedding_length", u(d));
    w.add_u32("llama.feed_forward_length", u(f));
    w.add_u32("llama.attention.head_count", u(c.n_heads));
    w.add_u32("llama.attention.head_count_kv", u(c.n_kv_heads));
    w.add_f32("llama.rope.freq_base", c.rope_base as f32);
    w.add_f32("llama.attention.layer_norm_rms_epsilon", c.rms_eps as f32);
    if c.head_dim * c.n_heads != d {
        w.add_u32("llama.attention.key_length", u(c.head_dim));
        w.add_u32("llama.attention.value_length", u(c.head_dim));
    }
    w.add_u32("llama.vocab_size", u(c.vocab_size));
    w.add_u32("llama.rope.dimension_count", u(c.rope_dim));
    set_type_keys(&mut w, target);
    add_tokenizer(&mut w, dir, &cfg, c.vocab_size, pre)?;

    let has_output = !tied;
    let mut items = Vec::new();
    let mut notes = Vec::new();
    for (hf, gg, shape, permute) in wanted {
        let Some((file, dtype, got)) = found.get(&hf) else {
            return Err(format!(
                "tensor {hf} is missing from the safetensors files of {}",
                dir.display()
            ));
        };
        if *got != shape {
            return Err(format!(
                "tensor {hf} has shape {got:?}; config.json needs {shape:?}"
            ));
        }
        if !matches!(
            dtype,
            safetensors::Dtype::F32 | safetensors::Dtype::F16 | safetensors::Dtype::BF16
        ) {
            return Err(format!(
                "tensor {hf} has dtype {dtype:?}; stride quantize reads F32, F16 and BF16 checkpoints"
            ));
        }
        if let Some(h) = permute {
            if shape[0] % h != 0 || (shape[0] / h) % 2 != 0 {
                return Err(format!(
                    "tensor {hf}: {} rows are not {h} heads of an even head dim",
                    shape[0]
                ));
            }
        }
        let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
        let (out, note) = choose_type(&gg, &dims, target, has_output, pure);
        notes.extend(note);
        w.add_tensor_info(&gg, &dims, out)
            .map_err(|e| e.to_string())?;
        items.push(Item {
            name: gg,
            dims,
            out,
            in_type: format!("{dtype:?}"),
            copy: false,
            src: Src::St {
                file: *file,
                name: hf,
                permute,
            },
        });
    }
    Ok((
        maps,
        Plan {
            writer: w,
            items,
            notes,
            requantized: Vec::new(),
            input_bytes,
        },
    ))
}

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// The `tokenizer.ggml.pre` name of a tokenizer.json pre-tokenizer this converter recognises.
fn detect_pre(pt: &serde_json::Value) -> Option<&'static str> {
    const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let ty = |v: &serde_json::Value| v.get("type").and_then(|t| t.as_str()).map(str::to_string);
    match ty(pt)?.as_str() {
        "ByteLevel" => Some("gpt-2"),
        "Sequence" => {
            let parts = pt.get("pretokenizers")?.as_array()?;
            let kinds: Vec<String> = parts.iter().filter_map(ty).collect();
            let k: Vec<&str> = kinds.iter().map(|s| s.as_str()).collect();
            match k.as_slice() {
                ["Digits", "ByteLevel"]
                    if parts[0].get("individual_digits") == Some(&serde_json::json!(true)) =>
                {
                    Some("smollm")
                }
                ["Split", "ByteLevel"]
                    if parts[0].pointer("/pattern/Regex").and_then(|r| r.as_str())
                        == Some(LLAMA3) =>
                {
                    Some("llama-bpe")
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Writes the `tokenizer.ggml.*` keys of a byte-level BPE `tokenizer.json` (with
/// `tokenizer_config.json` beside it for the special tokens and the chat template), as
/// llama.cpp's converter does for `gpt2`-style vocabularies.
fn add_tokenizer(
    w: &mut GgufWriter,
    dir: &Path,
    cfg: &serde_json::Value,
    vocab_size: usize,
    pre: Option<&str>,
) -> Result<(), String> {
    let tj_path = dir.join("tokenizer.json");
    if !tj_path.exists() {
        return Err(format!(
            "{} has no tokenizer.json; the GGUF file needs the tokenizer (a byte-level BPE tokenizer.json)",
            dir.display()
        ));
    }
    let tj = read_json(&tj_path)?;
    let model = tj.get("model").ok_or("tokenizer.json has no \"model\"")?;
    let bpe = model.get("type").and_then(|t| t.as_str()) == Some("BPE");
    let byte_level = tj.pointer("/decoder/type").and_then(|t| t.as_str()) == Some("ByteLevel");
    if !bpe || !byte_level {
        return Err(format!(
            "{}: only byte-level BPE tokenizers (GPT-2 style: SmolLM, Llama 3, …) are converted; this one is {} with a {} decoder",
            tj_path.display(),
            model.get("type").and_then(|t| t.as_str()).unwrap_or("of unknown type"),
            tj.pointer("/decoder/type").and_then(|t| t.as_str()).unwrap_or("missing"),
        ));
    }
    let vocab = model
        .get("vocab")
        .and_then(|v| v.as_object())
        .ok_or("tokenizer.json: model.vocab is not a map")?;
    let mut tokens: Vec<Option<String>> = vec![None; vocab_size];
    let mut types = vec![NORMAL; vocab_size];
    let mut put = |tok: &str, id: u64, ty: Option<i32>| -> Result<(), String> {
        let i = usize::try_from(id).ok().filter(|&i| i < vocab_size).ok_or_else(|| {
            format!("tokenizer.json: token {tok:?} has id {id}, outside the model's vocab_size {vocab_size}")
        })?;
        tokens[i] = Some(tok.to_string());
        if let Some(t) = ty {
            types[i] = t;
        }
        Ok(())
    };
    for (tok, id) in vocab {
        let id = id
            .as_u64()
            .ok_or_else(|| format!("tokenizer.json: token {tok:?} has a non-integer id"))?;
        put(tok, id, None)?;
    }
    for a in tj
        .get("added_tokens")
        .and_then(|a| a.as_array())
        .into_iter()
        .flatten()
    {
        let (Some(id), Some(content)) = (
            a.get("id").and_then(|i| i.as_u64()),
            a.get("content").and_then(|c| c.as_str()),
        ) else {
            return Err("tokenizer.json: an added token without id or content".into());
        };
        let special = a.get("special").and_then(|s| s.as_bool()).unwrap_or(false);
        let looks_special = (content.starts_with("<|") && content.ends_with("|>"))
            || ["<pad>", "<mask>"].contains(&content);
        put(
            content,
            id,
            Some(if special || looks_special {
                CONTROL
            } else {
                USER_DEFINED
            }),
        )?;
    }
    // ids the tokenizer does not use (a vocabulary padded to a round size)
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.unwrap_or_else(|| {
                types[i] = UNUSED;
                format!("[PAD{i}]")
            })
        })
        .collect();
    let merges: Vec<String> = model
        .get("merges")
        .and_then(|m| m.as_array())
        .ok_or("tokenizer.json: model.merges is missing")?
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => Ok(s.clone()),
            serde_json::Value::Array(p) if p.len() == 2 => match (p[0].as_str(), p[1].as_str()) {
                (Some(a), Some(b)) => Ok(format!("{a} {b}")),
                _ => Err("tokenizer.json: a merge pair is not two strings".to_string()),
            },
            _ => Err("tokenizer.json: a merge is neither \"a b\" nor [a, b]".to_string()),
        })
        .collect::<Result<_, _>>()?;
    let pre = match pre {
        Some(p) => p.to_string(),
        None => match tj.get("pre_tokenizer").and_then(detect_pre) {
            Some(p) => p.to_string(),
            None => {
                return Err(format!(
                    "{}: the pre-tokenizer {} is not one stride recognises (GPT-2's ByteLevel, SmolLM's Digits+ByteLevel, Llama 3's Split+ByteLevel); pass --pre-tokenizer NAME with the llama.cpp name of this model's pre-tokenizer",
                    tj_path.display(),
                    tj.get("pre_tokenizer").map(|p| p.to_string()).unwrap_or_else(|| "(none)".into())
                ))
            }
        },
    };
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", &pre);
    w.add_array("tokenizer.ggml.tokens", Array::String(tokens.clone()));
    w.add_array("tokenizer.ggml.token_type", Array::I32(types));
    w.add_array("tokenizer.ggml.merges", Array::String(merges));

    // special tokens: tokenizer_config.json first, config.json's *_token_id second
    let tc_path = dir.join("tokenizer_config.json");
    let tc = if tc_path.exists() {
        Some(read_json(&tc_path)?)
    } else {
        None
    };
    let id_of = |text: &str| tokens.iter().position(|t| t == text);
    for (kind, key) in [
        ("bos", "tokenizer.ggml.bos_token_id"),
        ("eos", "tokenizer.ggml.eos_token_id"),
        ("unk", "tokenizer.ggml.unknown_token_id"),
        ("pad", "tokenizer.ggml.padding_token_id"),
    ] {
        let from_tc = tc
            .as_ref()
            .and_then(|t| t.get(format!("{kind}_token")))
            .and_then(|v| {
                v.as_str()
                    .or_else(|| v.get("content").and_then(|c| c.as_str()))
            })
            .and_then(id_of);
        let from_cfg = cfg
            .get(format!("{kind}_token_id"))
            .and_then(|v| v.as_u64())
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i < vocab_size);
        if let Some(id) = from_tc.or(from_cfg) {
            w.add_u32(key, id as u32);
        }
    }
    if let Some(tc) = &tc {
        for (k, key) in [
            ("add_bos_token", "tokenizer.ggml.add_bos_token"),
            ("add_eos_token", "tokenizer.ggml.add_eos_token"),
        ] {
            if let Some(b) = tc.get(k).and_then(|b| b.as_bool()) {
                w.add(key, Value::Bool(b));
            }
        }
        if let Some(t) = tc.get("chat_template").and_then(|t| t.as_str()) {
            w.add_string("tokenizer.chat_template", t);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// --quantize: in memory

/// The GGUF file `g` with its matrices converted to `target` as `stride quantize` would
/// write it, built in memory (for the `--quantize` load option: the model then loads it with
/// its matrices quantized). Returns the parsed file and the seconds it took.
pub fn requantize_in_memory(g: &Gguf, target: GgmlType) -> Result<(Gguf, f64), String> {
    let t0 = Instant::now();
    let plan = plan_gguf(g, target, false)?;
    let out = Vec::with_capacity(plan.writer.file_len() as usize);
    let bytes = convert(&Input::Gguf(g), &plan, out, &ProgressBar::hidden())?;
    let q = Gguf::from_bytes(bytes).map_err(|e| format!("the requantized file: {e}"))?;
    Ok((q, t0.elapsed().as_secs_f64()))
}

#[cfg(test)]
#[path = "quantize_tests.rs"]
mod tests;
