//! The Llama with quantized weights against exact references (unit tests: they use the
//! test-only hook of `linear.rs` to see every quantized product the model makes).
//!
//! 1. **Per product, inside the model.** Every quantized product of a prefill, a decode
//!    and a two-row batch is recorded with its exact `f32` inputs, and each output is held
//!    to stride-quant's documented bound against the exact value: `y = Σ_b t_b` with the
//!    block terms `t_b` computed exactly in `f64` from the parsed weight blocks and the
//!    activations' Q8 blocks (`Q8Row`), `|ŷ − y| ≤ γ_n · Σ_b |t_b|`, `n = k + 3`,
//!    `k = ⌈blocks/8⌉` (twice that for Q4_1's extra minimum term), `γ_n = nu/(1−nu)`,
//!    `u = 2⁻²⁴`. The only freedom left is the kernels' `f32` accumulation order. Feeding
//!    the un-quantized activations (an error of up to half an 8-bit step per value, ~10⁻²
//!    relative) or a wrong weight row breaks it by orders of magnitude.
//! 2. **End to end.** The same model is run with each quantized product replaced by that
//!    exact reference rounded to `f32` (everything else is the same code on the same
//!    inputs). The greedy tokens must be equal and the logits within the first-order bound
//!    of `tests/llama_model.rs`'s `logit_bounds` (two computations each carrying `k` `f32`
//!    roundings per path and `n` accumulated terms), which covers a difference in the
//!    linears' accumulation order as long as the two runs quantize their activations to
//!    the same 8-bit codes: 8-bit rounding is a step function, so an `f32`-sized
//!    difference can move a value across a rounding boundary (one step, ~10⁻² relative),
//!    which no rounding-error bound covers. The test counts such flips between the two runs
//!    and requires none for its seeds (deterministic: a different seed could show one, and
//!    the assertion says so).

use super::linear::test_hook::{self, Call};
use super::{LinearWeight, Llama, LlamaConfig};
use crate::lm::{CausalLm, WeightFormat};
use std::sync::Arc;
use stride_core::{DType, Device, Generator, Tensor};
use stride_gguf::{GgmlType, Gguf, GgufWriter};
use stride_quant::{Q8Row, QMatrix};

fn config(tied: bool) -> LlamaConfig {
    LlamaConfig {
        n_layers: 2,
        dim: 64,
        ffn_dim: 128,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        rope_dim: 16,
        rope_base: 10000.0,
        rms_eps: 1e-5f32 as f64,
        context_len: 64,
        vocab_size: 97,
        tied_embeddings: tied,
    }
}

/// A random Llama as a GGUF file in memory: matrices of `ty` (the embedding of `embed_ty`),
/// norms F32; `dense_down`: the `ffn_down` matrices F16 (no kernel: loaded dense).
fn tiny_gguf(
    c: &LlamaConfig,
    ty: GgmlType,
    embed_ty: GgmlType,
    dense_down: bool,
    seed: u64,
) -> Gguf {
    let gen = Generator::new(seed);
    let rnd = |n: usize, std: f64, mean: f64| -> Vec<f32> {
        Tensor::randn([n], DType::F32, &Device::Cpu, Some(&gen))
            .unwrap()
            .mul(std)
            .unwrap()
            .add(mean)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    let (d, f, v, hd) = (c.dim, c.ffn_dim, c.vocab_size, c.head_dim);
    let (q, kv) = (c.n_heads * hd, c.n_kv_heads * hd);
    let mut w = GgufWriter::new();
    w.add_string("general.architecture", "llama")
        .add_u32("llama.block_count", c.n_layers as u32)
        .add_u32("llama.embedding_length", d as u32)
        .add_u32("llama.feed_forward_length", f as u32)
        .add_u32("llama.attention.head_count", c.n_heads as u32)
        .add_u32("llama.attention.head_count_kv", c.n_kv_heads as u32)
        .add_f32("llama.rope.freq_base", c.rope_base as f32)
        .add_f32("llama.attention.layer_norm_rms_epsilon", c.rms_eps as f32)
        .add_u32("llama.context_length", c.context_len as u32)
        .add_u32("llama.rope.dimension_count", c.rope_dim as u32);
    let mut add = |name: String, data: Vec<f32>, rows: usize, cols: usize, ty: GgmlType| {
        let dims: Vec<u64> = if rows == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        };
        w.add_tensor(&name, &dims, ty, &stride_gguf::quantize(ty, &data).unwrap())
            .unwrap();
    };
    let s = |n: usize| 1.0 / (n as f64).sqrt();
    add(
        "token_embd.weight".into(),
        rnd(v * d, 1.0, 0.0),
        v,
        d,
        embed_ty,
    );
    for l in 0..c.n_layers {
        let b = |s: &str| format!("blk.{l}.{s}.weight");
        add(b("attn_norm"), rnd(d, 0.1, 1.0), 1, d, GgmlType::F32);
        add(b("attn_q"), rnd(q * d, s(d), 0.0), q, d, ty);
        add(b("attn_k"), rnd(kv * d, s(d), 0.0), kv, d, ty);
        add(b("attn_v"), rnd(kv * d, s(d), 0.0), kv, d, ty);
        add(b("attn_output"), rnd(d * q, s(q), 0.0), d, q, ty);
        add(b("ffn_norm"), rnd(d, 0.1, 1.0), 1, d, GgmlType::F32);
        add(b("ffn_gate"), rnd(f * d, s(d), 0.0), f, d, ty);
        add(b("ffn_up"), rnd(f * d, s(d), 0.0), f, d, ty);
        let down_ty = if dense_down { GgmlType::F16 } else { ty };
        add(b("ffn_down"), rnd(d * f, s(f), 0.0), d, f, down_ty);
    }
    add(
        "output_norm.weight".into(),
        rnd(d, 0.1, 1.0),
        1,
        d,
        GgmlType::F32,
    );
    if !c.tied_embeddings {
        add("output.weight".into(), rnd(v * d, s(d), 0.0), v, d, ty);
    }
    Gguf::from_bytes(w.to_bytes().unwrap()).unwrap()
}

fn f16(b: &[u8]) -> f64 {
    let h = u16::from_le_bytes([b[0], b[1]]);
    let sign = if h >> 15 == 1 { -1.0 } else { 1.0 };
    let (e, m) = ((h >> 10) & 0x1f, (h & 0x3ff) as f64);
    match e {
        0 => sign * m * 2f64.powi(-24),
        31 => f64::NAN,
        _ => sign * (1.0 + m / 1024.0) * 2f64.powi(e as i32 - 15),
    }
}

/// The blocks of one weight row: `(d, m, q[32])` with `value = d·q + m` exactly.
fn weight_blocks(ty: GgmlType, row: &[u8]) -> Vec<(f64, f64, [i32; 32])> {
    let size = ty.type_size();
    row.chunks_exact(size)
        .map(|b| {
            let mut q = [0i32; 32];
            match ty {
                GgmlType::Q8_0 => {
                    for (j, v) in b[2..34].iter().enumerate() {
                        q[j] = *v as i8 as i32;
                    }
                    (f16(&b[0..2]), 0.0, q)
                }
                GgmlType::Q4_0 | GgmlType::Q4_1 => {
                    let (off, bias) = if ty == GgmlType::Q4_0 { (2, 8) } else { (4, 0) };
                    for j in 0..16 {
                        q[j] = (b[off + j] & 0xf) as i32 - bias;
                        q[j + 16] = (b[off + j] >> 4) as i32 - bias;
                    }
                    let m = if ty == GgmlType::Q4_1 {
                        f16(&b[2..4])
                    } else {
                        0.0
                    };
                    (f16(&b[0..2]), m, q)
                }
                other => panic!("the test parses Q8_0, Q4_0, Q4_1 only, not {other}"),
            }
        })
        .collect()
}

/// The exact product of weight row `r` of `w` with the Q8 form of `x` (one activation row)
/// and `T = Σ|terms|`, in f64 (every term is exact: f16·f16·integer needs < 53 bits).
fn exact_dot(w: &QMatrix, r: usize, a: &Q8Row) -> (f64, f64) {
    let rb = w.row_bytes();
    let blocks = weight_blocks(w.ggml_type(), &w.as_bytes()[r * rb..(r + 1) * rb]);
    let (mut y, mut t) = (0f64, 0f64);
    for (b, (d, m, q)) in blocks.iter().enumerate() {
        let qa = &a.qs()[b * 32..b * 32 + 32];
        let dot: i64 = q.iter().zip(qa).map(|(&x, &y)| x as i64 * y as i64).sum();
        let t1 = d * a.d()[b] as f64 * dot as f64;
        let t2 = if w.ggml_type() == GgmlType::Q4_1 {
            m * a.s()[b] as f64
        } else {
            0.0
        };
        y += t1 + t2;
        t += t1.abs() + t2.abs();
    }
    (y, t)
}

/// stride-quant's bound `γ_n` for `w` (see the module docs), with room for the reference's
/// own f64 rounding.
fn gamma(w: &QMatrix) -> f64 {
    let u = 2f64.powi(-24);
    let lanes = w.cols().div_ceil(32).div_ceil(8);
    let k = if w.ggml_type() == GgmlType::Q4_1 {
        2 * lanes
    } else {
        lanes
    };
    let n = (k + 3) as f64;
    n * u / (1.0 - n * u) + 1e-14
}

/// The reference product: exact, rounded to f32.
fn reference(w: &QMatrix, x: &[f32], m: usize) -> Vec<f32> {
    let (rows, cols) = w.shape();
    let mut y = vec![0f32; m * rows];
    for i in 0..m {
        let a = Q8Row::quantize(w.act_format(), &x[i * cols..(i + 1) * cols]).unwrap();
        for r in 0..rows {
            y[i * rows + r] = exact_dot(w, r, &a).0 as f32;
        }
    }
    y
}

/// Checks every recorded product against its exact value; returns the worst error/bound.
fn check_calls(calls: &[Call], what: &str) -> f64 {
    let mut worst = 0f64;
    for (ci, c) in calls.iter().enumerate() {
        let (rows, cols) = c.w.shape();
        assert_eq!(c.x.len(), c.m * cols);
        let g = gamma(&c.w);
        for i in 0..c.m {
            let a = Q8Row::quantize(c.w.act_format(), &c.x[i * cols..(i + 1) * cols]).unwrap();
            for r in 0..rows {
                let (y, t) = exact_dot(&c.w, r, &a);
                let got = c.y[i * rows + r] as f64;
                let bound = g * t;
                let err = (got - y).abs();
                assert!(
                    err <= bound,
                    "{what}: call {ci} ({:?}), row {i}, output {r}: {got} vs exact {y}: |error| {err:e} > bound {bound:e}",
                    c.w
                );
                if bound > 0.0 {
                    worst = worst.max(err / bound);
                }
            }
        }
    }
    worst
}

fn ids(v: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), [1, v.len()]).unwrap()
}

/// Greedy continuation of `prompt` by `n` tokens, and the logits of every step.
fn greedy(m: &Llama, prompt: &[i64], n: usize) -> (Vec<i64>, Vec<Tensor>) {
    greedy_on(m, prompt, n, &Device::Cpu)
}

/// `logit_bounds` of tests/llama_model.rs for an f32 model (see the module docs).
fn logit_bounds(m: &Llama, max_s: usize) -> Vec<f64> {
    let c = m.config();
    let w = m.weights();
    let u = 2f64.powi(-24);
    let k = (16 * c.n_layers + 2) as f64;
    let n = (c.n_layers * (c.dim + max_s + c.head_dim + c.n_heads * c.head_dim + c.ffn_dim) + c.dim)
        as f64;
    let norm_max = w
        .output_norm
        .to_f64_vec()
        .unwrap()
        .iter()
        .fold(0f64, |a, &b| a.max(b.abs()));
    let h = (c.dim as f64).sqrt() * norm_max;
    let head = w.lm_head.dequantized(DType::F64).unwrap();
    let rows = head
        .square()
        .unwrap()
        .sum_dims(&[1], false)
        .unwrap()
        .sqrt()
        .unwrap()
        .to_f64_vec()
        .unwrap();
    rows.iter().map(|r| 2.0 * (k * u + n * u) * h * r).collect()
}

/// Q8 codes and scales of a call's input rows.
fn codes(c: &Call) -> Vec<(Vec<i8>, Vec<f32>)> {
    let cols = c.w.cols();
    (0..c.m)
        .map(|i| {
            let a = Q8Row::quantize(c.w.act_format(), &c.x[i * cols..(i + 1) * cols]).unwrap();
            (a.qs().to_vec(), a.d().to_vec())
        })
        .collect()
}

const PROMPTS: [&[i64]; 3] = [
    &[1, 7, 3, 42, 96, 0, 5],
    &[13, 13, 13],
    &[88, 2, 61, 30, 9, 77],
];

fn check_model(ty: GgmlType, embed_ty: GgmlType, tied: bool, dense_down: bool, seed: u64) {
    let what = format!("{ty} weights, {embed_ty} embedding, tied {tied}");
    let c = config(tied);
    let g = tiny_gguf(&c, ty, embed_ty, dense_down, seed);
    let m = Llama::from_gguf_quantized(&g).unwrap();
    assert_eq!(m.weight_format(), WeightFormat::Quantized);
    assert_eq!(m.dtype(), DType::F32);
    let w = m.weights();
    assert_eq!(w.layers[0].wq.ggml_type(), Some(ty));
    assert_eq!(w.embed.ggml_type(), Some(embed_ty));
    assert_eq!(w.layers[1].w_down.is_quantized(), !dense_down);
    if tied {
        let (a, b) = (
            w.embed.as_quantized().unwrap(),
            w.lm_head.as_quantized().unwrap(),
        );
        assert!(
            Arc::ptr_eq(a, b),
            "a tied head shares the embedding's blocks"
        );
    }

    // 1. every product of a prefill, decodes and a two-row batch, on its own inputs
    test_hook::start_recording();
    let (tokens, _) = greedy(&m, PROMPTS[0], 4);
    let mut cache = m.new_cache(&[0, 0], 5).unwrap();
    let batch = Tensor::from_vec(vec![3i64, 1, 4, 1, 5, 9, 2, 6, 5, 3], [2, 5]).unwrap();
    m.forward(&batch, &mut cache).unwrap();
    let calls = test_hook::take_calls();
    // per forward: 7 products per block (6 with a dense ffn_down) and the head
    let per = c.n_layers * if dense_down { 6 } else { 7 } + 1;
    assert_eq!(calls.len(), 5 * per, "{what}: products recorded");
    let worst = check_calls(&calls, &what);
    println!(
        "{what}: {} products, worst |error| / bound = {worst:.3}",
        calls.len()
    );

    // the embedding gather is the table's rows, exactly
    let e = w.embed.embedding(&ids(&[5, 0, 96])).unwrap();
    let q = w.embed.as_quantized().unwrap();
    let want: Vec<f32> = [5, 0, 96].iter().flat_map(|&i| q.row(i).unwrap()).collect();
    assert_eq!(e.shape(), &[1, 3, c.dim]);
    assert_eq!(e.to_vec::<f32>().unwrap(), want);

    // 2. end to end against the model with exact products
    let bounds = logit_bounds(&m, 16);
    for p in PROMPTS {
        test_hook::start_recording();
        let (got, lq) = greedy(&m, p, 6);
        let cq = test_hook::take_calls();
        test_hook::set_emulator(Some(Arc::new(reference)));
        test_hook::start_recording();
        let (want, lr) = greedy(&m, p, 6);
        let cr = test_hook::take_calls();
        test_hook::set_emulator(None);
        let flips: usize = cq
            .iter()
            .zip(&cr)
            .map(|(a, b)| {
                codes(a)
                    .iter()
                    .zip(codes(b))
                    .map(|((qa, da), (qb, db))| {
                        qa.iter().zip(&qb).filter(|(x, y)| x != y).count()
                            + da.iter().zip(&db).filter(|(x, y)| x != y).count()
                    })
                    .sum::<usize>()
            })
            .sum();
        assert_eq!(
            flips, 0,
            "{what}, prompt {p:?}: the two runs quantized {flips} activation values (or scales) differently: an f32-sized difference crossed an 8-bit rounding boundary, which the first-order bound does not cover (see the module docs); pick another seed"
        );
        assert_eq!(got, want, "{what}, prompt {p:?}: greedy tokens");
        let mut worst = 0f64;
        for (a, b) in lq.iter().zip(&lr) {
            let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                let bound = bounds[i % c.vocab_size];
                assert!(
                    (x - y).abs() <= bound,
                    "{what}, prompt {p:?}: logit {i}: {x} vs reference {y}, bound {bound:e}"
                );
                worst = worst.max((x - y).abs() / bound);
            }
        }
        println!("{what}, prompt {p:?}: tokens {got:?}, worst |logit error| / bound = {worst:.2e}");
    }
    let _ = tokens;
}

#[test]
fn q8_0_model_matches_exact_products() {
    check_model(GgmlType::Q8_0, GgmlType::Q8_0, true, false, 11);
}

#[test]
fn q4_0_model_matches_exact_products() {
    check_model(GgmlType::Q4_0, GgmlType::Q8_0, false, false, 12);
}

#[test]
fn q4_1_model_matches_exact_products() {
    // SmolLM2's file layout: Q4_1 matrices, a Q8_0 embedding tied to the head; plus F16
    // ffn_down matrices, which load dense (f32) beside the quantized ones
    check_model(GgmlType::Q4_1, GgmlType::Q8_0, true, true, 13);
    check_model(GgmlType::Q4_1, GgmlType::Q4_1, false, false, 14);
}

#[test]
fn quantized_errors_say_what_to_do() {
    let c = config(true);
    let g = tiny_gguf(&c, GgmlType::Q4_0, GgmlType::Q8_0, false, 1);
    assert!(Llama::gguf_has_quantized_matrices(&g));
    if !stride_core::cuda::is_available() {
        // no GPU: the device's own error (with one, the load works: quantized_cuda_* tests)
        assert!(Llama::from_gguf_with(&g, WeightFormat::Quantized, &Device::Cuda(0)).is_err());
    }
    let m = Llama::from_gguf_quantized(&g).unwrap();
    let wq = &m.weights().layers[0].wq;
    let x16 = Tensor::zeros([1, c.dim], DType::F16, &Device::Cpu).unwrap();
    let e = wq.forward(&x16).unwrap_err().to_string();
    assert!(e.contains("f32"), "{e}");
    let bad = Tensor::zeros([1, c.dim + 1], DType::F32, &Device::Cpu).unwrap();
    let e = wq.forward(&bad).unwrap_err().to_string();
    assert!(e.contains("[..., 64]"), "{e}");
    let e = m
        .weights()
        .embed
        .embedding(&ids(&[97]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("97") && e.contains("out of range"), "{e}");
    let e = m
        .weights()
        .embed
        .embedding(&ids(&[-1]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("-1"), "{e}");
    // an F32 file has nothing to keep quantized
    let f = tiny_gguf(&c, GgmlType::F32, GgmlType::F32, false, 1);
    assert!(!Llama::gguf_has_quantized_matrices(&f));
    let d = Llama::from_gguf_quantized(&f).unwrap();
    assert_eq!(d.weight_format(), WeightFormat::Dequantized(DType::F32));
    // mixing a quantized matrix with f16 norms is refused with a message
    let mut w = m.weights().clone();
    w.output_norm = w.output_norm.to_dtype(DType::F16).unwrap();
    let e = Llama::new(
        c.clone(),
        w,
        stride_nn::functional::RotaryStyle::Interleaved,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("f32 on the quantized matrices' device"), "{e}");
    let _ = LinearWeight::Dense(x16);
}

/// Greedy continuation on the model's device (the ids moved there).
fn greedy_on(m: &Llama, prompt: &[i64], n: usize, dev: &Device) -> (Vec<i64>, Vec<Tensor>) {
    let mut cache = m.new_cache(&[0], prompt.len() + n).unwrap();
    let to = |v: &[i64]| ids(v).to_device(dev).unwrap();
    let mut logits = vec![m.forward(&to(prompt), &mut cache).unwrap()];
    let mut out = Vec::new();
    for step in 0..n {
        let last = logits.last().unwrap();
        let t = last.shape()[1];
        let next = last
            .select(1, t as i64 - 1)
            .unwrap()
            .argmax(Some(-1), false)
            .unwrap()
            .to_vec::<i64>()
            .unwrap()[0];
        out.push(next);
        if step + 1 < n {
            logits.push(m.forward(&to(&[next]), &mut cache).unwrap());
        }
    }
    (out, logits)
}

/// A quantized Llama loaded on CUDA (`from_gguf_with(.., Quantized, cuda)`: SmolLM2's layout,
/// Q4_1 matrices with a tied Q8_0 embedding and F16 `ffn_down`; and Q5_0/Q4_0 untied) keeps
/// its matrices as blocks on the GPU and gives the CPU model's greedy tokens. Every
/// quantized product has the CPU's bits for the same input (stride-quant's tests/cuda.rs);
/// the models differ only through the dense ops (norms, rotary, attention) on each device.
#[test]
fn quantized_cuda_model_matches_cpu_greedy_tokens() {
    let Some(gpu) =
        stride_core::cuda::require_or_skip("quantized_cuda_model_matches_cpu_greedy_tokens")
    else {
        return;
    };
    for (ty, embed_ty, tied, dense_down, seed) in [
        (GgmlType::Q4_1, GgmlType::Q8_0, true, true, 41),
        (GgmlType::Q5_0, GgmlType::Q4_0, false, false, 42),
        (GgmlType::Q5_1, GgmlType::Q8_0, true, false, 43),
    ] {
        let c = config(tied);
        let g = tiny_gguf(&c, ty, embed_ty, dense_down, seed);
        let cpu = Llama::from_gguf_with(&g, WeightFormat::Quantized, &Device::Cpu).unwrap();
        let cuda = Llama::from_gguf_with(&g, WeightFormat::Quantized, &gpu).unwrap();
        assert_eq!(cuda.weight_format(), WeightFormat::Quantized);
        let w = cuda.weights();
        assert!(
            w.layers[0].wq.as_quantized_cuda().is_some(),
            "{ty}: wq stays quantized"
        );
        assert!(
            w.lm_head.as_quantized_cuda().is_some(),
            "{ty}: the head stays quantized"
        );
        assert!(w.embed.as_dense().is_some_and(|t| t.device() == gpu));
        assert_eq!(w.layers[0].w_down.is_quantized(), !dense_down);
        for p in PROMPTS {
            let (want, lc) = greedy_on(&cpu, p, 6, &Device::Cpu);
            let (got, lg) = greedy_on(&cuda, p, 6, &gpu);
            let diff = lc
                .iter()
                .zip(&lg)
                .map(|(a, b)| {
                    let b = b.to_device(&Device::Cpu).unwrap();
                    a.sub(&b)
                        .unwrap()
                        .abs()
                        .unwrap()
                        .max()
                        .unwrap()
                        .item::<f32>()
                        .unwrap()
                })
                .fold(0f32, f32::max);
            eprintln!("{ty}/{embed_ty} prompt {p:?}: greedy {got:?}, max |logit diff| {diff:e}");
            assert_eq!(
                got, want,
                "{ty}/{embed_ty}, prompt {p:?}: greedy tokens CUDA vs CPU"
            );
        }
    }
}

/// On CUDA the K-quants (no CUDA kernel) load dense and the others stay quantized; a
/// quantized matrix on CUDA refuses a CPU input and an embedding gather with messages.
#[test]
fn quantized_cuda_errors_and_fallbacks() {
    let Some(gpu) = stride_core::cuda::require_or_skip("quantized_cuda_errors_and_fallbacks")
    else {
        return;
    };
    let c = config(true);
    let g = tiny_gguf(&c, GgmlType::Q8_0, GgmlType::Q4_0, false, 5);
    let m = Llama::from_gguf_with(&g, WeightFormat::Quantized, &gpu).unwrap();
    let wq = &m.weights().layers[0].wq;
    let x = Tensor::zeros([1, c.dim], DType::F32, &Device::Cpu).unwrap();
    let e = wq.forward(&x).unwrap_err().to_string();
    assert!(e.contains("move the input"), "{e}");
    let q = LinearWeight::QuantizedCuda(m.weights().lm_head.as_quantized_cuda().unwrap().clone());
    let e = q
        .embedding(&ids(&[1]).to_device(&gpu).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("dense"), "{e}");
}
