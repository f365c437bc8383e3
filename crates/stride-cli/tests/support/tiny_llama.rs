//! A tiny random Llama written as a Hugging Face checkpoint directory (`config.json`,
//! `model.safetensors`, a byte-level BPE `tokenizer.json` and `tokenizer_config.json`), for
//! the `stride quantize` tests (the unit tests in `src/quantize_tests.rs` and the CLI test
//! `tests/quantize_cli.rs` both include this file). No network needed.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The shape of the tiny model.
#[derive(Clone, Copy, Debug)]
pub struct TinyOpts {
    /// No `lm_head.weight` (the head is the embedding table).
    pub tied: bool,
    /// Store the weights as BF16 instead of F32.
    pub bf16: bool,
    /// `intermediate_size`: 96 is three Q blocks; 80 is not a whole number of them.
    pub ffn: usize,
    pub seed: u64,
}

impl Default for TinyOpts {
    fn default() -> Self {
        TinyOpts {
            tied: false,
            bf16: false,
            ffn: 96,
            seed: 1,
        }
    }
}

pub const DIM: usize = 64;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const LAYERS: usize = 2;
/// 256 byte tokens, 3 merges, 2 added tokens, padded to 264 rows.
pub const VOCAB: usize = 264;

/// The checkpoint: where it is and the values it holds (as f32; BF16-rounded when stored
/// as BF16), by Hugging Face name, with their row-major shapes.
pub struct TinyLlama {
    pub dir: PathBuf,
    pub tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
}

/// GPT-2's byte → character map of the byte-level alphabet.
pub fn byte_chars() -> Vec<char> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut out = vec![' '; 256];
    for (b, c) in bs.iter().zip(&cs) {
        out[*b as usize] = char::from_u32(*c).unwrap();
    }
    out
}

struct Rng(u64);
impl Rng {
    /// Uniform in [-1, 1) (xorshift64*).
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Writes the checkpoint into `dir` (created).
pub fn write_tiny_llama(dir: &Path, o: TinyOpts) -> TinyLlama {
    std::fs::create_dir_all(dir).unwrap();
    let hd = DIM / HEADS;
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": DIM,
        "intermediate_size": o.ffn,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": 128,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": VOCAB,
        "tie_word_embeddings": o.tied,
        "bos_token_id": 259,
        "eos_token_id": 260,
        "torch_dtype": if o.bf16 { "bfloat16" } else { "float32" },
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();

    // tokenizer: the 256 byte tokens, three merges, two special tokens
    let chars = byte_chars();
    let mut vocab = serde_json::Map::new();
    for (i, c) in chars.iter().enumerate() {
        vocab.insert(c.to_string(), serde_json::json!(i));
    }
    let g = chars[b' ' as usize];
    for (i, t) in [format!("{g}t"), "he".to_string(), format!("{g}the")]
        .iter()
        .enumerate()
    {
        vocab.insert(t.clone(), serde_json::json!(256 + i));
    }
    // ids 256..258: the merges' tokens; 259, 260: special; 261..263: padding rows
    let tokenizer = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [
            {"id": 259, "content": "<|im_start|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 260, "content": "<|im_end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
        ],
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
        ]},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab,
            "merges": [format!("{g} t"), "h e", format!("{g}t he")]
        }
    });
    std::fs::write(
        dir.join("tokenizer.json"),
        serde_json::to_string(&tokenizer).unwrap(),
    )
    .unwrap();
    let tc = serde_json::json!({
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "add_bos_token": false,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}",
    });
    std::fs::write(
        dir.join("tokenizer_config.json"),
        serde_json::to_string(&tc).unwrap(),
    )
    .unwrap();

    // weights
    let mut rng = Rng(o.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut tensors = BTreeMap::new();
    let mut add = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        let n: usize = shape.iter().product();
        let mut v: Vec<f32> = (0..n).map(|_| offset + scale * rng.next()).collect();
        if o.bf16 {
            v.iter_mut()
                .for_each(|x| *x = half::bf16::from_f32(*x).to_f32());
        }
        tensors.insert(name, (shape, v));
    };
    let (q, kv) = (HEADS * hd, KV_HEADS * hd);
    let s = |fan_in: usize| 1.7 / (fan_in as f32).sqrt();
    add(
        "model.embed_tokens.weight".into(),
        vec![VOCAB, DIM],
        1.0,
        0.0,
    );
    for l in 0..LAYERS {
        let p = |n: &str| format!("model.layers.{l}.{n}.weight");
        add(p("input_layernorm"), vec![DIM], 0.2, 1.0);
        add(p("self_attn.q_proj"), vec![q, DIM], s(DIM), 0.0);
        add(p("self_attn.k_proj"), vec![kv, DIM], s(DIM), 0.0);
        add(p("self_attn.v_proj"), vec![kv, DIM], s(DIM), 0.0);
        add(p("self_attn.o_proj"), vec![DIM, q], s(q), 0.0);
        add(p("post_attention_layernorm"), vec![DIM], 0.2, 1.0);
        add(p("mlp.gate_proj"), vec![o.ffn, DIM], s(DIM), 0.0);
        add(p("mlp.up_proj"), vec![o.ffn, DIM], s(DIM), 0.0);
        add(p("mlp.down_proj"), vec![DIM, o.ffn], s(o.ffn), 0.0);
    }
    add("model.norm.weight".into(), vec![DIM], 0.2, 1.0);
    if !o.tied {
        add("lm_head.weight".into(), vec![VOCAB, DIM], s(DIM), 0.0);
    }
    write_safetensors(&dir.join("model.safetensors"), &tensors, o.bf16);
    TinyLlama {
        dir: dir.to_path_buf(),
        tensors,
    }
}

/// Writes `tensors` as a safetensors file (F32, or BF16 when `bf16`).
pub fn write_safetensors(
    path: &Path,
    tensors: &BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    bf16: bool,
) {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, (shape, v))| {
            let b: Vec<u8> = if bf16 {
                v.iter()
                    .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
                    .collect()
            } else {
                v.iter().flat_map(|x| x.to_le_bytes()).collect()
            };
            (n.clone(), shape.clone(), b)
        })
        .collect();
    let dtype = if bf16 {
        safetensors::Dtype::BF16
    } else {
        safetensors::Dtype::F32
    };
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(dtype, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let data = safetensors::serialize(views, None).unwrap();
    std::fs::write(path, data).unwrap();
}

/// A fresh scratch directory `stride-quantize-{what}-{pid}`.
pub fn scratch(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stride-quantize-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
