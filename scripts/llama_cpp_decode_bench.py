#!/usr/bin/env python3
"""llama.cpp's greedy decode of a prompt on this CPU, timed as `stride generate --json` times
its own: prefill (the prompt in one eval), then `--max-tokens` greedy steps (argmax of the
last logits, one eval each, end-of-generation tokens ignored), and optionally stride's own
figures for the same prompt in the same run.

    pip install llama-cpp-python numpy
    cargo build --release -p stride-cli
    python3 scripts/llama_cpp_decode_bench.py [--prompt "Once upon a time"] [--max-tokens 128]
        [--threads 2] [--repeats 3] [--stride-bin target/release/stride]

Prints one JSON document: llama.cpp's load time, prefill and decode tokens/s (median of
`--repeats`), its peak resident memory (this process, `ru_maxrss`), the generated text, and,
with `--stride-bin`, `stride generate --json` with `--weights quantized` and `--weights
dequantized` on the same prompt (each run's own figures, plus the peak resident memory of
its process), so the three are measured in one session on one machine.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def cache_dir():
    return os.environ.get("STRIDE_MODELS") or os.path.expanduser("~/.cache/stride/models")


def llama_cpp_run(a):
    import llama_cpp

    t0 = time.time()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=1024, n_batch=512, n_threads=a.threads,
                          logits_all=True, verbose=False)  # scores[] holds the last logits only with logits_all
    load = time.time() - t0
    toks = llm.tokenize(a.prompt.encode(), add_bos=False, special=True)
    pre, dec, out = [], [], None
    for _ in range(a.repeats):
        llm.reset()
        t0 = time.time()
        llm.eval(toks)
        pre.append(time.time() - t0)
        gen = []
        t0 = time.time()
        for i in range(a.max_tokens):
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            gen.append(nxt)
            if i + 1 < a.max_tokens:
                llm.eval([nxt])
        dec.append(time.time() - t0)
        out = gen
    med = lambda xs: sorted(xs)[len(xs) // 2]
    # stride's decode figure counts the steps after the first token (the first comes from the
    # prefill's logits); here likewise: max_tokens − 1 evals in the decode time
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "threads": a.threads,
        "load_s": load,
        "prompt_tokens": len(toks),
        "prefill_tokens_per_s": len(toks) / med(pre),
        "decode_tokens_per_s": (a.max_tokens - 1) / med(dec),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "tokens": out,
        "text": llm.detokenize(out).decode(errors="replace"),
    }


def stride_run(a, weights):
    cmd = [a.stride_bin, "generate", a.prompt, "--model", a.model, "--max-tokens", str(a.max_tokens),
           "--seed", "1", "--temperature", "0", "--ignore-eos", "--json", "--weights", weights]
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    doc = json.loads(r.stdout)
    doc["peak_rss_bytes"] = int(r.stderr.strip().splitlines()[-1]) * 1024
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(cache_dir(), "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stride-bin", default=None, help="also run `stride generate` (quantized and dequantized)")
    a = ap.parse_args()
    report = {"model": a.model, "prompt": a.prompt, "max_tokens": a.max_tokens}
    if a.stride_bin:
        for w in ("quantized", "dequantized"):
            d = stride_run(a, w)
            report[f"stride_{w}"] = {"weights": d.get("weights"), "stats": d["stats"],
                                     "peak_rss_bytes": d["peak_rss_bytes"], "tokens": d["tokens"]}
    report["llama_cpp"] = llama_cpp_run(a)
    if a.stride_bin:
        ref = report["llama_cpp"]["tokens"]
        for w in ("quantized", "dequantized"):
            ours = report[f"stride_{w}"]["tokens"]
            same = next((i for i, (x, y) in enumerate(zip(ref, ours)) if x != y), min(len(ref), len(ours)))
            report[f"stride_{w}"]["identical_prefix_with_llama_cpp"] = same
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
