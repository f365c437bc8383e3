#!/usr/bin/env python3
"""The PyTorch peer of `stride bench cuda`: the same rows, on the same GPU, in the same run.

Prints one JSON object: {"available": bool, "torch": version, "seconds": {key: seconds},
"unavailable": {key: why}, "first_call": {...}}. A key is a row id, or `<row id>@<backend>`
for a row's second figure (the attention rows: the row id is SDPA's FlashAttention backend,
`<id>@cudnn` its cuDNN backend); "unavailable" says why a key has no figure (a backend that
refuses the config, out of memory). GPU rows are device times between CUDA events (median of
batches after a warm-up, as stride measures them); `tiny_add_` is host time per call. TF32
stays off (PyTorch's default for matmul), as in stride.

Usage: bench_torch.py [--quick] [--only PREFIX,...] (`stride bench cuda` passes its own
`--quick` and `--only`: a row runs if its id starts with one of the prefixes; a prefix ending
in `$` must be the whole id).
"""
import json
import os
import subprocess
import sys
import time


def main():
    quick = "--quick" in sys.argv
    only = None
    if "--only" in sys.argv:
        only = [p for p in sys.argv[sys.argv.index("--only") + 1].split(",") if p]

    def want(key):
        return only is None or any(key == p[:-1] if p.endswith("$") else key.startswith(p)
                                   for p in only)
    if "--first-call" in sys.argv:
        return first_call()
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"available": False, "why": f"import torch failed: {e}"}))
        return
    if not torch.cuda.is_available():
        print(json.dumps({"available": False, "why": "torch.cuda.is_available() is False"}))
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda:0")
    reps, batches = (2, 3) if quick else (10, 7)
    secs = {}
    unavailable = {}

    # as stride's bench: a copy of this size before each timed batch, so the batch is queued
    # before its start event (the events time the device, not the host's per-call cost)
    ahead = [torch.zeros((1 << 22) if quick else (1 << 26), device=dev) for _ in range(2)]

    def gpu_time(f, reps=reps):
        f()
        torch.cuda.synchronize()
        ts = []
        for _ in range(batches):
            ahead[0].copy_(ahead[1])
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                f()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1e-3 / reps)
        ts.sort()
        n = len(ts)
        return ts[n // 2] if n % 2 else 0.5 * (ts[n // 2 - 1] + ts[n // 2])

    g = torch.Generator(device=dev).manual_seed(0)
    big = (1 << 22) if quick else (1 << 26)
    side = int(big ** 0.5)
    x = torch.randn(side, side, device=dev, generator=g)
    y = torch.randn(side, side, device=dev, generator=g)
    out = torch.empty(side, side, device=dev)
    if want("copy"):
        secs["copy"] = gpu_time(lambda: out.copy_(x))
    xt = x.t()
    if want("copy_t"):
        secs["copy_t"] = gpu_time(lambda: out.copy_(xt))
    if want("add"):
        secs["add"] = gpu_time(lambda: x + y)
    yt = y.t()
    if want("add_t"):
        secs["add_t"] = gpu_time(lambda: x + yt)
    w = torch.randn(side, side, device=dev, generator=g)
    wt = w.t()
    if want("mul_t_inplace"):
        secs["mul_t_inplace"] = gpu_time(lambda: wt.mul_(1.0))
    if want("sum_all_256m"):
        secs["sum_all_256m"] = gpu_time(lambda: x.sum())
    del x, y, out, xt, yt, w, wt
    rs = 2048 if quick else 16384
    r = torch.randn(rs, rs, device=dev, generator=g)
    if want("sum_last"):
        secs["sum_last"] = gpu_time(lambda: r.sum(dim=-1))
    if want("sum_first"):
        secs["sum_first"] = gpu_time(lambda: r.sum(dim=0))
    del r
    if want("sum_all"):
        s_all = torch.randn(2560, 2560, device=dev, generator=g)
        secs["sum_all"] = gpu_time(lambda: s_all.sum())
        del s_all
    # a Linear layer's bias at the SAE's size: the add of the forward, the gradient's sum
    if want("bias_add") or want("bias_grad"):
        act = torch.randn(512 if quick else 4096, 24576, device=dev, generator=g)
        bias = torch.randn(24576, device=dev, generator=g)
        if want("bias_add"):
            secs["bias_add"] = gpu_time(lambda: act + bias)
        if want("bias_grad"):
            secs["bias_grad"] = gpu_time(lambda: act.sum(dim=0))
        del act, bias
    # a transformer's normalisations at a GPT's size (16,384 tokens of 2,048, bf16)
    for name, layer in (("rms_norm", False), ("layer_norm", True)):
        if not (want(f"{name}_fwd") or want(f"{name}_bwd")):
            continue
        rows, cols = (2048 if quick else 16384), 2048
        def param(*shape):
            return torch.randn(*shape, device=dev, generator=g).to(torch.bfloat16).requires_grad_(True)
        nx, nw, nb = param(rows, cols), param(cols), param(cols)
        def norm():
            if layer:
                return torch.nn.functional.layer_norm(nx, (cols,), nw, nb, 1e-5)
            return torch.nn.functional.rms_norm(nx, (cols,), nw, 1e-6)
        if want(f"{name}_fwd"):
            with torch.no_grad():
                secs[f"{name}_fwd"] = gpu_time(norm)
        if want(f"{name}_bwd"):
            ny = norm()
            ndy = torch.randn(rows, cols, device=dev, generator=g).to(torch.bfloat16)
            wrt = (nx, nw, nb) if layer else (nx, nw)
            secs[f"{name}_bwd"] = gpu_time(lambda: torch.autograd.grad(ny, wrt, ndy, retain_graph=True))
            del ny, ndy
        del nx, nw, nb
    # the AdamW step of a 124M-parameter GPT (GPT-2 small's 148 tensors, f32), fused=True
    if want("adamw_gpt2"):
        v, c = (8192 if quick else 50257), 768
        shapes = [(v, c), (1024, c)]
        for _ in range(12):
            shapes += [(c,), (c,), (c, 3 * c), (3 * c,), (c, c), (c,), (c,), (c,), (c, 4 * c), (4 * c,), (4 * c, c), (c,)]
        shapes += [(c,), (c,)]
        ps = [torch.randn(*s, device=dev, generator=g).requires_grad_(True) for s in shapes]
        for p in ps:
            p.grad = torch.randn(*p.shape, device=dev, generator=g)
        opt = torch.optim.AdamW(ps, lr=1e-4, weight_decay=0.1, fused=True)
        secs["adamw_gpt2"] = gpu_time(opt.step)
        del ps, opt
    # rotary of a GPT's queries as stride's row: q a permuted view of one fused (B, T, 3, H, D)
    # projection, half-split (Hugging Face's rotate_half, eager), f32 tables computed in f32
    if want("rotary_fwd") or want("rotary_bwd"):
        b, t, h, hd = (1 if quick else 4), 4096, 16, 128
        qkv = torch.randn(b, t, 3, h, hd, device=dev, generator=g).to(torch.bfloat16).requires_grad_(True)
        qv = qkv[:, :, 0].permute(0, 2, 1, 3)
        ang = torch.randn(t, hd // 2, device=dev, generator=g)
        rc, rs = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        def rotate_half(x):
            x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
            return torch.cat((-x2, x1), dim=-1)
        def rope():
            x = qv.float()
            return (x * rc + rotate_half(x) * rs).to(torch.bfloat16)
        if want("rotary_fwd"):
            with torch.no_grad():
                secs["rotary_fwd"] = gpu_time(rope)
        if want("rotary_bwd"):
            ry = rope()
            rdy = torch.randn(*ry.shape, device=dev, generator=g).to(torch.bfloat16)
            secs["rotary_bwd"] = gpu_time(lambda: torch.autograd.grad(ry, (qv,), rdy, retain_graph=True))
            del ry, rdy
        del qkv, qv, ang, rc, rs
    # a gated MLP's activation (16,384 x 5,632 bf16): F.silu(gate) * up, eager
    if want("swiglu_fwd") or want("swiglu_bwd"):
        rows, cols = (2048 if quick else 16384), 5632
        sg = torch.randn(rows, cols, device=dev, generator=g).to(torch.bfloat16).requires_grad_(True)
        su = torch.randn(rows, cols, device=dev, generator=g).to(torch.bfloat16).requires_grad_(True)
        def swiglu():
            return torch.nn.functional.silu(sg) * su
        if want("swiglu_fwd"):
            with torch.no_grad():
                secs["swiglu_fwd"] = gpu_time(swiglu)
        if want("swiglu_bwd"):
            sy = swiglu()
            sdy = torch.randn(rows, cols, device=dev, generator=g).to(torch.bfloat16)
            secs["swiglu_bwd"] = gpu_time(lambda: torch.autograd.grad(sy, (sg, su), sdy, retain_graph=True))
            del sy, sdy
        del sg, su
    # the loss over a large vocabulary (16,384 tokens x 49,152, bf16 logits, mean)
    if want("cross_entropy_fwd") or want("cross_entropy_bwd"):
        rows, vocab = (1024 if quick else 16384), 49152
        cz = torch.randn(rows, vocab, device=dev, generator=g).to(torch.bfloat16).requires_grad_(True)
        ct = torch.randint(0, vocab, (rows,), device=dev, generator=g)
        if want("cross_entropy_fwd"):
            with torch.no_grad():
                secs["cross_entropy_fwd"] = gpu_time(lambda: torch.nn.functional.cross_entropy(cz, ct))
        if want("cross_entropy_bwd"):
            cl = torch.nn.functional.cross_entropy(cz, ct)
            secs["cross_entropy_bwd"] = gpu_time(lambda: torch.autograd.grad(cl, (cz,), retain_graph=True))
            del cl
        del cz, ct
    if want("topk_k64"):
        t_in = torch.randn(512 if quick else 4096, 24576, device=dev, generator=g)
        secs["topk_k64"] = gpu_time(lambda: t_in.topk(64, dim=-1))
        del t_in
    sizes = [256, 512] if quick else [1024, 4096, 8192]
    names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    for dt in [torch.float32, torch.float16, torch.bfloat16]:
        for s in sizes:
            if not want(f"matmul_{names[dt]}_{s}"):
                continue
            a = torch.randn(s, s, device=dev, generator=g).to(dt)
            b = torch.randn(s, s, device=dev, generator=g).to(dt)
            secs[f"matmul_{names[dt]}_{s}"] = gpu_time(lambda: a @ b, reps=3 if s >= 8192 else reps)
    # attention at a GPT's size, as stride's rows: bf16, 16,384 tokens (batch x seq; --quick:
    # 4,096) of heads x head_dim = 2,048; q, k, v permuted views of one fused (B, S, 3, H, D)
    # projection; each row under FlashAttention (its id) and cuDNN (`<id>@cudnn`). A backend
    # that fails (refuses the config, runs out of memory) is reported, not fatal; every row
    # frees its tensors and the cache before the next.
    from torch.nn.attention import SDPBackend
    tokens = 4096 if quick else 16384
    for dh in (64, 128):
        for s in (1024, 4096):
            for causal in (False, True):
                tag = f"d{dh}_s{s}" + ("_causal" if causal else "")
                for backward in (False, True):
                    key = f"attention_{'bwd' if backward else 'fwd'}_{tag}"
                    if not want(key):
                        continue
                    for suffix, backend in (("", SDPBackend.FLASH_ATTENTION),
                                            ("@cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            secs[key + suffix] = attention_time(
                                torch, gpu_time, g, dev, max(1, tokens // s), s, 2048 // dh, dh,
                                causal, backward, backend)
                        except Exception as e:  # noqa: BLE001
                            unavailable[key + suffix] = str(e)
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
    # one decode step's attention (as stride's `attention_decode` row): 8 sequences, 32 query
    # heads over 8 key/value heads (GQA), head dim 128, one query over a 4,096-token bf16 cache;
    # SDPA's default backend choice
    if want("attention_decode"):
        b, hq, hk, s, dh = 8, 32, 8, 4096, 128
        q = torch.randn(b, hq, 1, dh, device=dev, generator=g).to(torch.bfloat16)
        kc = torch.randn(b, hk, s, dh, device=dev, generator=g).to(torch.bfloat16)
        vc = torch.randn(b, hk, s, dh, device=dev, generator=g).to(torch.bfloat16)
        with torch.no_grad():
            secs["attention_decode"] = gpu_time(lambda: torch.nn.functional.scaled_dot_product_attention(
                q, kc, vc, enable_gqa=True))
        del q, kc, vc
        torch.cuda.empty_cache()
    calls = 1000 if quick else 10_000
    a = torch.randn(256, device=dev, generator=g)
    b = torch.randn(256, device=dev, generator=g)
    a.add_(b)
    torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            a.add_(b)
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / calls)
    ts.sort()
    if want("tiny_add_"):
        secs["tiny_add_"] = ts[2]
    big_batch = 512 if quick else 4096
    for key, dims, latents, k, batch in [("sae_step", 64, 512, 16, 256),
                                         ("sae_step_16x", 64, 512 * 16, 16, 256),
                                         ("sae_step_d384", 384, 1536, 32, big_batch),
                                         ("sae_step_d1536", 1536, 24576, 64, big_batch)]:
        if want(key):
            secs[key] = sae_step_time(torch, dev, latents, quick, dims=dims, k=k, batch=batch)
    fc = subprocess.run([sys.executable, os.path.abspath(__file__), "--first-call"],
                        capture_output=True, text=True)
    try:
        first = json.loads(fc.stdout)
    except ValueError:
        first = {"error": fc.stderr[-500:]}
    print(json.dumps({"available": True, "torch": torch.__version__, "seconds": secs,
                      "unavailable": unavailable, "first_call": first}))


def attention_time(torch, gpu_time, g, dev, b, s, h, dh, causal, backward, backend):
    """Device seconds per call of one attention row under one SDPA backend (as stride's
    `attention_time`): q, k, v permuted views of one fused (b, s, 3, h, dh) bf16 tensor; the
    forward without a graph, or the backward (the graph built once, the gradient of the fused
    tensor for a random upstream gradient timed, the graph kept). Raises RuntimeError with
    PyTorch's reasons when the backend refuses the config."""
    import warnings
    from torch.nn.attention import sdpa_kernel
    qkv = torch.randn(b, s, 3, h, dh, device=dev, generator=g).to(torch.bfloat16).requires_grad_(True)
    q, k, v = (qkv.select(2, i).permute(0, 2, 1, 3) for i in range(3))  # (b, h, s, dh)

    def attn():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.0,
                                                                is_causal=causal)
    # a backend that can't run warns why, then raises "No available kernel": keep the why
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel(backend):
        warnings.simplefilter("always")
        try:
            if not backward:
                with torch.no_grad():
                    return gpu_time(attn)
            out = attn()
            dout = torch.randn(out.shape, device=dev, generator=g).to(torch.bfloat16)
            return gpu_time(lambda: torch.autograd.grad(out, (qkv,), dout, retain_graph=True))
        except Exception as e:  # noqa: BLE001
            why = [f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"]
            why += [" ".join(str(w.message).split())[:300] for w in caught]
            raise RuntimeError("; ".join(why)) from None


def sae_step(torch, dev, latents, dims=64, k=16, batch=256):
    """One training step of stride's TopK SAE (stride-models/src/sae.rs) in PyTorch: the
    encoder weight a transposed clone of the decoder's (non-contiguous), Adam lr 1e-3, one
    fixed batch. Returns the step as a function (also used by scripts/sae_torch_profile.py)."""
    g = torch.Generator(device=dev).manual_seed(0)
    dec = torch.nn.Linear(latents, dims, device=dev)
    with torch.no_grad():
        dec.weight /= dec.weight.norm(dim=0, keepdim=True)
    w_enc = torch.nn.Parameter(dec.weight.detach().t().clone())
    b_enc = torch.nn.Parameter(torch.zeros(latents, device=dev))
    opt = torch.optim.Adam([w_enc, b_enc, dec.weight, dec.bias], lr=1e-3)
    x = torch.randn(batch, dims, device=dev, generator=g)

    def step():
        opt.zero_grad()
        pre = torch.nn.functional.linear(x - dec.bias, w_enc, b_enc)
        with torch.no_grad():
            idx = pre.topk(k, dim=-1).indices
            mask = torch.zeros_like(pre).scatter_(-1, idx, 1.0)
        acts = pre.relu() * mask
        loss = torch.nn.functional.mse_loss(dec(acts), x)
        loss.backward()
        opt.step()

    return step


def sae_step_time(torch, dev, latents, quick, dims=64, k=16, batch=256):
    """Wall time per step of [`sae_step`]: median of runs after a warm-up."""
    step = sae_step(torch, dev, latents, dims=dims, k=k, batch=batch)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    runs, steps = (2, 5) if quick else (5, 20)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / steps)
    ts.sort()
    return ts[len(ts) // 2]


def first_call():
    """Child: context creation + first add + read back, after `import torch` (not counted)."""
    t_import = time.perf_counter()
    import torch
    t0 = time.perf_counter()
    torch.cuda.init()
    x = torch.ones(1024, device="cuda:0")
    t_ctx = time.perf_counter() - t0
    t1 = time.perf_counter()
    y = (x + x).cpu()
    t_op = time.perf_counter() - t1
    assert float(y[0]) == 2.0
    print(json.dumps({"import_torch_s": t0 - t_import, "context_s": t_ctx, "first_op_s": t_op,
                      "total_s": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
