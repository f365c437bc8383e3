#!/usr/bin/env python3
"""The PyTorch peer of `stride bench decode`: a Llama-family decoder (SmolLM2-135M's shape by
default) in PyTorch, prefilled with a prompt and decoded greedily one token at a time, the
token read back to the host after every step as a generation loop does.

Modes (`--modes`, comma-separated):
- eager:   the step as plain PyTorch ops;
- graph:   the same step captured once with torch.cuda.graph and replayed per token;
- compile: torch.compile(mode="reduce-overhead") of the step (Inductor's fused kernels, replayed
           through its own CUDA graphs).

The decode step is written the way a static-cache implementation is (Hugging Face's
StaticCache, gpt-fast): the KV cache is preallocated, the position lives in a device tensor,
the new keys/values are written with index_copy_, and attention reads the whole cache under a
mask. Weights are random (decode speed does not depend on their values; no end-of-sequence
token stops the run). Prints one JSON line.

    python3 scripts/llama_torch_decode.py --prompt 128 --tokens 256 --modes eager,graph,compile
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--dim", type=int, default=576)
    p.add_argument("--ffn", type=int, default=1536)
    p.add_argument("--heads", type=int, default=9)
    p.add_argument("--kv-heads", type=int, default=3)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--rope-base", type=float, default=100000.0)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--modes", default="eager,graph,compile")
    p.add_argument("--reps", type=int, default=3)
    return p.parse_args()


class Llama(torch.nn.Module):
    def __init__(self, a, dtype, dev):
        super().__init__()
        g = torch.Generator(device="cpu").manual_seed(0)
        hd = a.dim // a.heads
        self.a, self.hd = a, hd

        def w(*shape):
            return (torch.randn(*shape, generator=g) / math.sqrt(shape[-1])).to(dev, dtype)

        self.embed = w(a.vocab, a.dim)
        self.layers = []
        for _ in range(a.layers):
            self.layers.append(
                dict(
                    attn_norm=torch.ones(a.dim, device=dev, dtype=dtype),
                    wqkv=w((a.heads + 2 * a.kv_heads) * hd, a.dim),
                    wo=w(a.dim, a.heads * hd),
                    ffn_norm=torch.ones(a.dim, device=dev, dtype=dtype),
                    w_gate_up=w(2 * a.ffn, a.dim),
                    w_down=w(a.dim, a.ffn),
                )
            )
        self.out_norm = torch.ones(a.dim, device=dev, dtype=dtype)
        cap = a.prompt + a.tokens + 1
        inv = 1.0 / (a.rope_base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.arange(cap, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = ang.cos().to(dev, torch.float32)
        self.sin = ang.sin().to(dev, torch.float32)
        self.k = [torch.zeros(a.batch, a.kv_heads, cap, hd, device=dev, dtype=dtype) for _ in range(a.layers)]
        self.v = [torch.zeros_like(k) for k in self.k]
        self.cap = cap

    def rope(self, x, pos):
        # x (B, H, T, hd), pos (T,): half-split rotation in f32
        c = self.cos[pos][None, None]
        s = self.sin[pos][None, None]
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)

    def forward(self, tokens, pos):
        """tokens (B, T); pos (T,) int64 device positions. Writes the cache at pos."""
        a, hd = self.a, self.hd
        B, T = tokens.shape
        x = self.embed[tokens]
        j = torch.arange(self.cap, device=tokens.device)
        mask = (j[None, :] <= pos[:, None])[None, None]  # (1, 1, T, cap)
        for l, L in enumerate(self.layers):
            h = F.rms_norm(x, (a.dim,), L["attn_norm"], 1e-5)
            qkv = h @ L["wqkv"].t()
            q, k, v = qkv.split([a.heads * hd, a.kv_heads * hd, a.kv_heads * hd], dim=-1)
            q = self.rope(q.view(B, T, a.heads, hd).transpose(1, 2), pos)
            k = self.rope(k.view(B, T, a.kv_heads, hd).transpose(1, 2), pos)
            v = v.view(B, T, a.kv_heads, hd).transpose(1, 2)
            self.k[l].index_copy_(2, pos, k)
            self.v[l].index_copy_(2, pos, v)
            o = F.scaled_dot_product_attention(q, self.k[l], self.v[l], attn_mask=mask, enable_gqa=True)
            x = x + o.transpose(1, 2).reshape(B, T, a.heads * hd) @ L["wo"].t()
            m = F.rms_norm(x, (a.dim,), L["ffn_norm"], 1e-5)
            gu = m @ L["w_gate_up"].t()
            gt, up = gu.chunk(2, dim=-1)
            x = x + (F.silu(gt) * up) @ L["w_down"].t()
        x = F.rms_norm(x, (a.dim,), self.out_norm, 1e-5)
        return (x @ self.embed.t()).float()


def run_mode(model, a, mode, dev):
    B = a.batch
    prompt = torch.randint(0, a.vocab, (B, a.prompt), device=dev)
    pos_buf = torch.zeros(1, dtype=torch.long, device=dev)
    tok_buf = torch.zeros(B, 1, dtype=torch.long, device=dev)

    def step():
        return model(tok_buf, pos_buf).argmax(-1)  # (B, 1)

    if mode == "compile":
        step_fn = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    else:
        step_fn = step
    graph = None
    out = None
    t_setup = time.perf_counter()
    # warm-up (and capture)
    with torch.no_grad():
        model(prompt, torch.arange(a.prompt, device=dev))
        for _ in range(3):
            pos_buf.fill_(a.prompt)
            step_fn()
        torch.cuda.synchronize()
        if mode == "graph":
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    step()
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = step()
        torch.cuda.synchronize()
    setup = time.perf_counter() - t_setup

    prefill, decode = [], []
    with torch.no_grad():
        for _ in range(a.reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            logits = model(prompt, torch.arange(a.prompt, device=dev))
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            nxt.tolist()
            t1 = time.perf_counter()
            for i in range(a.tokens):
                tok_buf.copy_(nxt)
                pos_buf.fill_(a.prompt + i)
                if graph is not None:
                    graph.replay()
                    nxt = out
                else:
                    nxt = step_fn()
                nxt.tolist()  # the host reads each token, as a generation loop does
            t2 = time.perf_counter()
            prefill.append(B * a.prompt / (t1 - t0))
            decode.append(B * a.tokens / (t2 - t1))
    med = lambda v: sorted(v)[len(v) // 2]
    return {"prefill_tok_s": med(prefill), "decode_tok_s": med(decode), "decode_best_tok_s": max(decode), "setup_s": setup}


def main():
    a = parse()
    dev = torch.device("cuda")
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    torch.backends.cuda.matmul.allow_tf32 = False
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "dtype": a.dtype}
    for mode in a.modes.split(","):
        model = Llama(a, dtype, dev)
        try:
            res[mode] = run_mode(model, a, mode, dev)
        except Exception as e:  # report, keep the other modes
            res[mode] = {"error": f"{type(e).__name__}: {e}"[:300]}
        del model
        torch.cuda.empty_cache()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
