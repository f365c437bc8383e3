//! Unit tests of `stride quantize` (`quantize.rs`) on a tiny random Llama checkpoint.

use super::*;
use stride::models::llama::Llama;
use stride::models::{CausalLm, WeightFormat};
use stride::{DType, Device, Tensor};

#[path = "../tests/support/tiny_llama.rs"]
mod tiny;
use tiny::{scratch, write_tiny_llama, TinyLlama, TinyOpts, DIM, HEADS, KV_HEADS, LAYERS};

fn args(input: &Path, output: &Path, ty: &str) -> QuantizeArgs {
    QuantizeArgs {
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        ty: ty.into(),
        force: false,
        pure: false,
        pre_tokenizer: None,
        json: true,
    }
}

/// The GGUF rows of an HF tensor: Q and K rows permuted to the interleaved rotary layout
/// (`w.reshape(heads, 2, hd/2, cols).swapaxes(1, 2)`, written out independently of
/// `hf_row_of_gguf_row`), everything else as it is.
fn gguf_values(hf: &str, shape: &[usize], v: &[f32]) -> Vec<f32> {
    let heads = if hf.ends_with("q_proj.weight") {
        HEADS
    } else if hf.ends_with("k_proj.weight") {
        KV_HEADS
    } else {
        return v.to_vec();
    };
    let (rows, cols) = (shape[0], shape[1]);
    let hd = rows / heads;
    let mut out = vec![0f32; v.len()];
    for h in 0..heads {
        for two in 0..2 {
            for i in 0..hd / 2 {
                let src = h * hd + two * (hd / 2) + i;
                let dst = h * hd + i * 2 + two;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&v[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

fn gguf_name(hf: &str) -> String {
    if hf == "model.embed_tokens.weight" {
        return "token_embd.weight".into();
    }
    if hf == "model.norm.weight" {
        return "output_norm.weight".into();
    }
    if hf == "lm_head.weight" {
        return "output.weight".into();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap();
    let (l, t) = rest.split_once('.').unwrap();
    let t = t.strip_suffix(".weight").unwrap();
    let g = HF_BLOCK.iter().find(|(h, _, _)| *h == t).unwrap().1;
    format!("blk.{l}.{g}.weight")
}

/// The worst error dequantize(quantize(x)) may have, element by element, for one block of
/// a block type: half a quantization step `d` (the reference rounds x/d to the nearest
/// level), plus what storing `d` (and the min `m`) in f16 adds — each level q·d moves by at
/// most |q|·|d − f16(d)| ≤ |q|·2⁻¹¹|d|, the min by 2⁻¹¹|m| — plus, for Q4_0/Q5_0 whose levels
/// run from −8d to 7d (−16d to 15d), the clamp of the value at +8d (+16d) to the top level:
/// one more half step. A relative 1e-6 covers f32 arithmetic.
fn block_bound(t: GgmlType, x: &[f32]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let h = 2f32.powi(-11);
    let (d, qmax, dm, clamp) = match t {
        GgmlType::Q8_0 => (amax / 127.0, 127.0, 0.0, 0.0),
        GgmlType::Q4_0 => (amax / 8.0, 8.0, 0.0, 0.5),
        GgmlType::Q5_0 => (amax / 16.0, 16.0, 0.0, 0.5),
        GgmlType::Q4_1 => ((max - min) / 15.0, 15.0, h * min.abs(), 0.0),
        GgmlType::Q5_1 => ((max - min) / 31.0, 31.0, h * min.abs(), 0.0),
        _ => unreachable!(),
    };
    d * (0.5 + clamp) + qmax * h * d + dm + 1e-6 * amax.max(max.abs()).max(min.abs())
}

#[test]
fn safetensors_to_every_block_type_reads_back_within_the_bound_and_matches_the_encoder() {
    let dir = scratch("types");
    let m = write_tiny_llama(&dir.join("ckpt"), TinyOpts::default());
    for ty in ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"] {
        let target = parse_type(ty).unwrap();
        let out = dir.join(format!("{ty}.gguf"));
        run(args(&m.dir, &out, ty)).unwrap();
        let g = Gguf::open(&out).unwrap();
        assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
        assert_eq!(g.get_u32("general.file_type").unwrap(), file_type(target));
        assert_eq!(g.tensors().len(), m.tensors.len());
        for (hf, (shape, v)) in &m.tensors {
            let name = gguf_name(hf);
            let info = g.tensor(&name).unwrap();
            assert_eq!(info.shape(), *shape, "{name}");
            let x = gguf_values(hf, shape, v);
            let want_type = if shape.len() == 1 {
                GgmlType::F32
            } else if name == "output.weight" {
                GgmlType::Q8_0
            } else {
                target
            };
            assert_eq!(info.ggml_type, want_type, "{ty}: {name}");
            // the bytes are the reference encoder's of the (permuted) input rows, exactly
            assert_eq!(
                g.tensor_data(&name).unwrap(),
                stride_gguf::quantize(want_type, &x).unwrap(),
                "{ty}: {name}"
            );
            let y = g.dequantize(&name).unwrap();
            if want_type == GgmlType::F32 {
                assert_eq!(x, y);
                continue;
            }
            for (bx, by) in x.chunks(32).zip(y.chunks(32)) {
                let b = block_bound(want_type, bx);
                for (a, c) in bx.iter().zip(by) {
                    assert!((a - c).abs() <= b, "{ty} {name}: {a} -> {c}, bound {b}");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Logits of `m` on a fixed token sequence, `[t, vocab]` flattened.
fn logits(m: &Llama) -> Vec<f32> {
    let ids: Vec<i64> = vec![259, 5, 17, 200, 3, 99, 256, 258, 42, 7, 1, 0];
    let t = Tensor::from_vec(ids.clone(), [1, ids.len()]).unwrap();
    let mut cache = m.new_cache(&[0], 32).unwrap();
    m.forward(&t, &mut cache).unwrap().to_vec::<f32>().unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn hf_model(m: &TinyLlama) -> Llama {
    Llama::from_safetensors(
        m.dir.join("config.json"),
        &[m.dir.join("model.safetensors")],
        DType::F32,
        &Device::Cpu,
    )
    .unwrap()
}

#[test]
fn f32_gguf_gives_the_logits_of_the_safetensors_checkpoint_and_q8_0_stays_close() {
    let dir = scratch("logits");
    for tied in [false, true] {
        let m = write_tiny_llama(
            &dir.join(format!("ckpt{tied}")),
            TinyOpts {
                tied,
                ..Default::default()
            },
        );
        let reference = logits(&hf_model(&m));
        let scale = reference.iter().fold(0f32, |a, v| a.max(v.abs()));
        assert!(scale > 0.5, "logits of a useful size: {scale}");

        let f32_path = dir.join(format!("f32{tied}.gguf"));
        run(args(&m.dir, &f32_path, "f32")).unwrap();
        let g = Gguf::open(&f32_path).unwrap();
        let dense =
            Llama::from_gguf_with(&g, WeightFormat::Dequantized(DType::F32), &Device::Cpu).unwrap();
        assert_eq!(dense.config().tied_embeddings, tied);
        // the same weights, the rotation applied to permuted rows: only the order of f32
        // sums differs
        let d = max_abs_diff(&reference, &logits(&dense));
        eprintln!("tied {tied}: f32 max |Δlogit| {d:.3e} of scale {scale:.3}");
        assert!(d <= 1e-4 * scale, "f32: max |Δlogit| {d} (scale {scale})");

        // Q8_0 moves each weight by at most ~0.56 of a step of amax/127 (block_bound): an
        // RMS error of ~0.4% of the weights' RMS for these uniform weights. Fifteen matrices
        // in a row (two layers, the head), with attention and SwiGLU amplifying, move the
        // logits by a few times that: observed 1.5% (untied) and 1.1% (tied) of the largest
        // logit; bound 4%. Q4_0's step is 16 times Q8_0's, so its logits must move several
        // times more: that shows the bound is about the quantization, not slack.
        let q8_path = dir.join(format!("q8{tied}.gguf"));
        run(args(&m.dir, &q8_path, "q8_0")).unwrap();
        let g = Gguf::open(&q8_path).unwrap();
        let dq =
            Llama::from_gguf_with(&g, WeightFormat::Dequantized(DType::F32), &Device::Cpu).unwrap();
        let d8 = max_abs_diff(&reference, &logits(&dq));
        eprintln!("tied {tied}: q8_0 dequantized {d8:.3e}");
        assert!(d8 <= 4e-2 * scale, "q8_0 dequantized: {d8} (scale {scale})");
        let q4_path = dir.join(format!("q4{tied}.gguf"));
        run(args(&m.dir, &q4_path, "q4_0")).unwrap();
        let g4 = Gguf::open(&q4_path).unwrap();
        let d4 = max_abs_diff(
            &reference,
            &logits(
                &Llama::from_gguf_with(&g4, WeightFormat::Dequantized(DType::F32), &Device::Cpu)
                    .unwrap(),
            ),
        );
        eprintln!("tied {tied}: q4_0 dequantized {d4:.3e}");
        assert!(d4 > 4.0 * d8, "q4_0 {d4} vs q8_0 {d8}");
        // and with the quantized kernels (activations rounded to 8 bits as well)
        let q = Llama::from_gguf_with(&g, WeightFormat::Quantized, &Device::Cpu).unwrap();
        assert_eq!(q.weight_format(), WeightFormat::Quantized);
        let d = max_abs_diff(&reference, &logits(&q));
        eprintln!("tied {tied}: q8_0 quantized kernels {d:.3e}");
        assert!(d <= 5e-2 * scale, "q8_0 quantized: {d} (scale {scale})");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tied_head_rows_that_are_not_whole_blocks_and_bf16_input() {
    let dir = scratch("policy");
    // ffn 80: ffn_down's rows (80) are not whole 32-blocks → F16; tied: the embedding table
    // is the head → Q8_0
    let m = write_tiny_llama(
        &dir.join("ckpt"),
        TinyOpts {
            tied: true,
            bf16: true,
            ffn: 80,
            seed: 7,
        },
    );
    let out = dir.join("q4_1.gguf");
    run(args(&m.dir, &out, "q4_1")).unwrap();
    let g = Gguf::open(&out).unwrap();
    assert!(g.tensor("output.weight").is_err());
    assert_eq!(
        g.tensor("token_embd.weight").unwrap().ggml_type,
        GgmlType::Q8_0
    );
    for l in 0..LAYERS {
        let t = |n: &str| g.tensor(&format!("blk.{l}.{n}.weight")).unwrap().ggml_type;
        assert_eq!(t("ffn_down"), GgmlType::F16);
        assert_eq!(t("ffn_up"), GgmlType::Q4_1);
        assert_eq!(t("attn_q"), GgmlType::Q4_1);
        assert_eq!(t("attn_norm"), GgmlType::F32);
    }
    // BF16 input: the values are the BF16 ones, exactly, in F32 output
    let f = dir.join("f32.gguf");
    run(args(&m.dir, &f, "f32")).unwrap();
    let g = Gguf::open(&f).unwrap();
    let (_, v) = &m.tensors["model.layers.1.mlp.down_proj.weight"];
    assert_eq!(&g.dequantize("blk.1.ffn_down.weight").unwrap(), v);
    // the tokenizer of the GGUF file is the checkpoint's
    let from_gguf = stride_tokenizer::Tokenizer::from_gguf(&g).unwrap();
    let from_json =
        stride_tokenizer::Tokenizer::from_tokenizer_json_file(m.dir.join("tokenizer.json"))
            .unwrap();
    for text in [
        "the theatre 2024 <|im_start|>hello<|im_end|>",
        " the\nthe  t h e 1x",
    ] {
        assert_eq!(
            from_gguf.encode(text, true).unwrap(),
            from_json.encode(text, true).unwrap(),
            "{text:?}"
        );
    }
    assert_eq!(from_gguf.vocab_size(), tiny::VOCAB);
    assert_eq!((from_gguf.bos(), from_gguf.eos()), (Some(259), Some(260)));
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    assert_eq!(
        g.get_str_array("tokenizer.ggml.tokens").unwrap()[262],
        "[PAD262]"
    );
    assert_eq!(
        g.get_i32_array("tokenizer.ggml.token_type").unwrap()[262],
        UNUSED
    );
    assert_eq!(
        g.get_i32_array("tokenizer.ggml.token_type").unwrap()[259],
        CONTROL
    );
    assert!(g.get_str("tokenizer.chat_template").is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gguf_input_quantizes_copies_and_requantizes() {
    let dir = scratch("gguf");
    let m = write_tiny_llama(&dir.join("ckpt"), TinyOpts::default());
    let f32_path = dir.join("f32.gguf");
    run(args(&m.dir, &f32_path, "f32")).unwrap();
    let src = Gguf::open(&f32_path).unwrap();

    // f32 GGUF → q4_0: every byte is the encoder's of the f32 rows; metadata kept
    let q4 = dir.join("q4_0.gguf");
    run(args(&f32_path, &q4, "q4_0")).unwrap();
    let g = Gguf::open(&q4).unwrap();
    for info in src.tensors() {
        let out = g.tensor(&info.name).unwrap();
        let x = src.dequantize(&info.name).unwrap();
        assert_eq!(
            g.tensor_data(&info.name).unwrap(),
            stride_gguf::quantize(out.ggml_type, &x).unwrap()
        );
    }
    assert_eq!(g.tensor("output.weight").unwrap().ggml_type, GgmlType::Q8_0);
    assert_eq!(
        g.tensor("token_embd.weight").unwrap().ggml_type,
        GgmlType::Q4_0
    );
    for (k, v) in src.metadata() {
        if !DERIVED_KEYS.contains(&k) {
            assert_eq!(g.get(k), Some(v), "{k}");
        }
    }
    assert_eq!(g.get_u32("general.quantization_version").unwrap(), 2);

    // q4_0 → q8_0: output.weight (already Q8_0) copied, the rest requantized from the
    // dequantized Q4_0 values
    let q8 = dir.join("q8_0.gguf");
    run(args(&q4, &q8, "q8_0")).unwrap();
    let g8 = Gguf::open(&q8).unwrap();
    assert_eq!(
        g8.tensor_data("output.weight").unwrap(),
        g.tensor_data("output.weight").unwrap()
    );
    let x = g.dequantize("blk.0.attn_q.weight").unwrap();
    assert_eq!(
        g8.tensor_data("blk.0.attn_q.weight").unwrap(),
        stride_gguf::quantize(GgmlType::Q8_0, &x).unwrap()
    );

    // in memory (--quantize) gives the same file as the command
    let (mem, _) = requantize_in_memory(&src, GgmlType::Q4_0).unwrap();
    assert_eq!(mem.bytes(), Gguf::open(&q4).unwrap().bytes());
    let model = Llama::from_gguf_with(&mem, WeightFormat::Quantized, &Device::Cpu).unwrap();
    assert_eq!(
        model.weights().layers[0].wq.ggml_type(),
        Some(GgmlType::Q4_0)
    );

    // --pure: the head is the requested type too
    let pure = dir.join("pure.gguf");
    let mut a = args(&f32_path, &pure, "q4_1");
    a.pure = true;
    run(a).unwrap();
    let g = Gguf::open(&pure).unwrap();
    assert_eq!(g.tensor("output.weight").unwrap().ggml_type, GgmlType::Q4_1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_say_what_is_wrong_and_what_to_do() {
    let dir = scratch("errors");
    let m = write_tiny_llama(&dir.join("ckpt"), TinyOpts::default());
    let out = dir.join("out.gguf");
    let err = |a: QuantizeArgs| run(a).unwrap_err();

    let e = err(args(&m.dir, &out, "q4_k"));
    assert!(
        e.contains("unknown --type \"q4_k\"") && e.contains("q8_0, q4_0"),
        "{e}"
    );
    assert!(parse_load_type("f16")
        .unwrap_err()
        .contains("--weights dequantized"));

    run(args(&m.dir, &out, "q8_0")).unwrap();
    let e = err(args(&m.dir, &out, "q8_0"));
    assert!(e.contains("exists") && e.contains("--force"), "{e}");
    let mut a = args(&m.dir, &out, "q4_0");
    a.force = true;
    run(a).unwrap();
    assert_eq!(
        Gguf::open(&out)
            .unwrap()
            .tensor("blk.0.attn_q.weight")
            .unwrap()
            .ggml_type,
        GgmlType::Q4_0
    );
    let mut a = args(&out, &out, "q8_0");
    a.force = true;
    assert!(err(a).contains("is the input"));

    let e = err(args(
        &m.dir.join("model.safetensors"),
        &dir.join("x.gguf"),
        "q8_0",
    ));
    assert!(
        e.contains("not a GGUF file") && e.contains("directory"),
        "{e}"
    );
    let e = err(args(&dir.join("missing"), &dir.join("x.gguf"), "q8_0"));
    assert!(e.contains("no such file"), "{e}");

    // a non-llama checkpoint
    let other = dir.join("mistral");
    write_tiny_llama(&other, TinyOpts::default());
    let cfg = std::fs::read_to_string(other.join("config.json")).unwrap();
    let cfg = cfg
        .replace("LlamaForCausalLM", "Qwen2ForCausalLM")
        .replace("\"llama\"", "\"qwen2\"");
    std::fs::write(other.join("config.json"), cfg).unwrap();
    let e = err(args(&other, &dir.join("x.gguf"), "q8_0"));
    assert!(
        e.contains("Qwen2ForCausalLM") && e.contains("Llama-architecture"),
        "{e}"
    );

    // an unsupported tensor dtype: an I32 tensor where a weight should be
    let bad = dir.join("bad");
    let mut t = write_tiny_llama(&bad, TinyOpts::default()).tensors;
    t.remove("model.norm.weight");
    tiny::write_safetensors(&bad.join("model.safetensors"), &t, false);
    let e = err(args(&bad, &dir.join("x.gguf"), "q8_0"));
    assert!(e.contains("model.norm.weight is missing"), "{e}");
    let st = {
        let data = vec![0u8; DIM * 4];
        let v = safetensors::tensor::TensorView::new(safetensors::Dtype::I32, vec![DIM], &data)
            .unwrap();
        safetensors::serialize(vec![("model.norm.weight".to_string(), v)], None).unwrap()
    };
    std::fs::write(bad.join("model-2.safetensors"), st).unwrap();
    let e = err(args(&bad, &dir.join("x.gguf"), "q8_0"));
    assert!(
        e.contains("dtype I32") && e.contains("F32, F16 and BF16"),
        "{e}"
    );

    // no tokenizer
    std::fs::remove_file(m.dir.join("tokenizer.json")).unwrap();
    let e = err(args(&m.dir, &dir.join("y.gguf"), "q8_0"));
    assert!(e.contains("no tokenizer.json"), "{e}");
    assert!(!dir.join("y.gguf").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_policy_of_llama_quantize() {
    use GgmlType::*;
    let c = |name: &str, dims: &[u64], t, has_output| choose_type(name, dims, t, has_output, false);
    assert_eq!(c("blk.0.attn_norm.weight", &[576], Q4_0, true).0, F32);
    assert_eq!(c("blk.0.attn_q.weight", &[576, 576], Q4_0, true).0, Q4_0);
    assert_eq!(c("token_embd.weight", &[576, 49152], Q4_0, true).0, Q4_0);
    // tied: the table is the head
    let (t, note) = c("token_embd.weight", &[576, 49152], Q4_1, false);
    assert_eq!((t, note), (Q8_0, None)); // 576 % 256 ≠ 0: llama-quantize also writes Q8_0
    let (t, note) = c("output.weight", &[4096, 32000], Q4_0, true);
    assert_eq!(t, Q8_0);
    assert!(note.unwrap().contains("Q6_K"));
    assert_eq!(c("output.weight", &[4096, 32000], F16, true).0, F16);
    let (t, note) = c("blk.0.ffn_down.weight", &[80, 64], Q5_1, true);
    assert_eq!(t, F16);
    assert!(note.unwrap().contains("not whole Q5_1 blocks"));
}
