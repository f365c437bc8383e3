"""The PyTorch version of stride's GPT (stride-models/src/gpt): the peer of `stride bench gpt`
and the source of the golden fixture of `crates/stride-models/tests/gpt_golden.rs`.

The model has stride's parameter names and math: pre-norm blocks, one fused QKV projection
(rows: query heads, key heads, value heads), half-split rotary (tables computed in float64,
then rounded) or learned positions, SwiGLU or GELU(tanh), tied embeddings; AdamW with weight
decay on matrices and embeddings only, nanoGPT's warmup + cosine schedule, clipping at 1.

    python3 scripts/gpt_torch.py golden crates/stride-models/tests/fixtures
        20 steps of two small models (modern, with one micro-batch per step; GPT-2 style, with
        two) in float32 on CUDA with TF32 off: init, batches, losses, final parameters.
    python3 scripts/gpt_torch.py bench --layers 12 --dim 768 --heads 12 --context 1024 \\
        --batch 16 --vocab 49152 [--compile] [--steps 20] \\
        [--experts 8 --top-k 2 [--expert-ffn F] --impl grouped|loop]
        tokens/s of training steps under bf16 autocast (fused AdamW); one JSON line. With
        --experts, the mixture of experts: its experts through torch._grouped_mm (inputs cast
        to bf16: _grouped_mm has no autocast rule) or the usual per-expert Python loop.
    python3 scripts/gpt_torch.py grouped --rows R --experts E --dim D --ffn F
        TFLOP/s of torch._grouped_mm alone at a mixture of experts' shapes (bf16); one JSON line.

The mixture of experts is stride's (stride-models/src/gpt/moe.rs): softmax router in f32,
top-k renormalised, (token, choice) pairs sorted by expert (stable), experts as grouped
products over the cumulative counts, outputs weighted and added back per token in f32; Switch's
balance loss E·Σ f·P and ST-MoE's z-loss, each averaged over the blocks.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, style, vocab, context, layers, heads, dim, dropout=0.0, experts=0, top_k=2,
                 expert_ffn=None, capacity=None, impl="loop"):
        self.experts, self.top_k, self.capacity, self.impl = experts, top_k, capacity, impl
        self.aux_coef, self.z_coef = 0.01, 0.001
        self.style, self.vocab, self.context = style, vocab, context
        self.layers, self.heads, self.dim = layers, heads, dim
        modern = style == "modern"
        self.ffn = (8 * dim // 3 + 63) // 64 * 64 if modern else 4 * dim
        self.bias = not modern
        self.eps = 1e-5
        self.base = 10000.0
        self.dropout = dropout
        self.expert_ffn = expert_ffn or self.ffn

    def meta(self):
        keys = ("style", "vocab", "context", "layers", "heads", "dim")
        if self.experts:
            keys += ("experts", "top_k", "expert_ffn", "capacity")
        return {k: getattr(self, k) for k in keys}


def grouped_mm(a, b, offs, impl):
    """(rows, k)·(E, k, n) over the groups of cumulative ends `offs`."""
    if impl == "grouped":
        lower = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else a.dtype
        return torch._grouped_mm(a.to(lower), b.to(lower), offs=offs.to(torch.int32))
    # the per-expert loop users write first: the offsets come back to the host
    parts, start = [], 0
    for e, end in enumerate(offs.tolist()):
        parts.append(a[start:end] @ b[e])
        start = end
    return torch.cat(parts)


class Moe(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.router = nn.Linear(c.dim, c.experts, bias=False)
        self.w_in = nn.Parameter(torch.empty(c.experts, c.dim, 2 * c.expert_ffn))
        self.w_out = nn.Parameter(torch.empty(c.experts, c.expert_ffn, c.dim))

    def forward(self, x):
        c = self.c
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        n, ne, k = x2.shape[0], c.experts, c.top_k
        logits = self.router(x2).float()
        probs = logits.softmax(-1)
        top_p, top_e = probs.topk(k, dim=-1)
        w = top_p / top_p.sum(-1, keepdim=True)
        with torch.no_grad():
            experts = top_e.reshape(-1)
            order = experts.argsort(stable=True)
            token = order // k
            counts = (experts[:, None] == torch.arange(ne, device=x.device)).sum(0)
            offs = counts.cumsum(0)
            keep = None
            if c.capacity is not None:
                cap = math.ceil(c.capacity * n * k / ne)
                rank = torch.arange(n * k, device=x.device) - (offs - counts)[experts[order]]
                keep = rank < cap
        gu = grouped_mm(x2[token], self.w_in, offs, c.impl)
        h = c.expert_ffn
        ys = grouped_mm(F.silu(gu[:, :h]) * gu[:, h:], self.w_out, offs, c.impl)
        ws = w.reshape(-1)[order]
        if keep is not None:
            ws = ws * keep.float()
        # each token's outputs weighted and summed in f32, as stride does
        ys = ys.float() * ws[:, None]
        out = torch.zeros(n, shape[-1], dtype=ys.dtype, device=x.device).index_add(0, token, ys)
        aux = (counts.float() / (n * k) * probs.mean(0)).sum() * ne
        z = logits.logsumexp(-1).square().mean()
        return out.reshape(shape), aux, z


def norm(c):
    return nn.RMSNorm(c.dim, eps=c.eps) if c.style == "modern" else nn.LayerNorm(c.dim, eps=c.eps)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.attn_norm = norm(c)
        self.attn = nn.ModuleDict(
            {"qkv": nn.Linear(c.dim, 3 * c.dim, bias=c.bias), "proj": nn.Linear(c.dim, c.dim, bias=c.bias)}
        )
        self.mlp_norm = norm(c)
        if c.experts:
            self.moe = Moe(c)
        elif c.style == "modern":
            self.mlp = nn.ModuleDict(
                {
                    "gate": nn.Linear(c.dim, c.ffn, bias=False),
                    "up": nn.Linear(c.dim, c.ffn, bias=False),
                    "down": nn.Linear(c.ffn, c.dim, bias=False),
                }
            )
        else:
            self.mlp = nn.ModuleDict({"fc": nn.Linear(c.dim, c.ffn), "proj": nn.Linear(c.ffn, c.dim)})

    def forward(self, x, rope):
        c = self.c
        b, t, d = x.shape
        hd = d // c.heads
        qkv = self.attn["qkv"](self.attn_norm(x)).view(b, t, 3, c.heads, hd)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        if rope is not None:
            q, k = rotate(q, rope), rotate(k, rope)
        p = c.dropout if self.training else 0.0
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        x = x + F.dropout(self.attn["proj"](a.transpose(1, 2).reshape(b, t, d)), p, self.training)
        h = self.mlp_norm(x)
        router = None
        if c.experts:
            m, aux, z = self.moe(h)
            router = (aux, z)
        elif c.style == "modern":
            m = self.mlp["down"](F.silu(self.mlp["gate"](h)) * self.mlp["up"](h))
        else:
            m = self.mlp["proj"](F.gelu(self.mlp["fc"](h), approximate="tanh"))
        return x + F.dropout(m, p, self.training), router


def rope_tables(c, device):
    hd = c.dim // c.heads
    half = hd // 2
    p = torch.arange(c.context, dtype=torch.float64)[:, None]
    i = torch.arange(half, dtype=torch.float64)[None, :]
    theta = p * c.base ** (-2.0 * i / hd)
    return theta.cos().float().to(device), theta.sin().float().to(device)


def rotate(x, rope):
    cos, sin = rope
    t, half = x.shape[-2], x.shape[-1] // 2
    cos, sin = cos[:t].to(x.dtype), sin[:t].to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Gpt(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.c = c
        self.tok_emb = nn.Embedding(c.vocab, c.dim)
        if c.style != "modern":
            self.pos_emb = nn.Embedding(c.context, c.dim)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.layers)])
        self.norm = norm(c)
        self.rope = rope_tables(c, device) if c.style == "modern" else None
        std, resid = 0.02, 0.02 / math.sqrt(2 * c.layers)
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, resid if n.endswith(("attn.proj.weight", "mlp.down.weight", "mlp.proj.weight", "moe.w_out")) else std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens):
        """The logits, and the router losses summed over the blocks (a mixture of experts)."""
        t = tokens.shape[1]
        x = self.tok_emb(tokens)
        if self.c.style != "modern":
            x = x + self.pos_emb.weight[:t]
        x = F.dropout(x, self.c.dropout, self.training)
        aux = z = 0.0
        for b in self.blocks:
            x, r = b(x, self.rope)
            if r is not None:
                aux, z = aux + r[0], z + r[1]
        return self.norm(x) @ self.tok_emb.weight.t(), (aux, z)

    def loss(self, x, y):
        logits, (aux, z) = self(x)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        if not self.c.experts:
            return ce
        l = self.c.layers
        return ce + aux * (self.c.aux_coef / l) + z * (self.c.z_coef / l)


def lr_at(step, lr, min_lr, warmup, steps):
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step >= steps:
        return min_lr
    progress = (step - warmup) / max(steps - warmup, 1)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def adamw(model, lr, beta2, wd, fused):
    named = list(model.named_parameters())
    decay = [p for _, p in named if p.dim() >= 2]
    rest = [p for _, p in named if p.dim() < 2]
    kw = {"fused": True} if fused else {"foreach": False}
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, beta2), eps=1e-8, **kw,
    )


def train_step(model, opt, batches, step, h, autocast=None):
    lr = lr_at(step, h["lr"], h["min_lr"], h["warmup"], h["steps"])
    for g in opt.param_groups:
        g["lr"] = lr
    total = 0.0
    for x, y in batches:
        with torch.autocast("cuda", dtype=autocast, enabled=autocast is not None):
            loss = model.loss(x, y)
        loss = loss / len(batches)
        loss.backward()
        total = total + loss.detach()
    torch.nn.utils.clip_grad_norm_(model.parameters(), h["grad_clip"])
    opt.step()
    opt.zero_grad(set_to_none=True)
    return total


def golden(out_dir):
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from golden_pytorch import save_file

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    text = (
        b"KING. What say you, my lord? Speak, and be brief.\n"
        b"LORD. Nothing, my liege; the night is cold and long.\n"
        b"KING. Nothing will come of nothing: speak again.\n\n"
    ) * 40
    ids = torch.tensor([3 + b for b in text], dtype=torch.int64)
    cases = {
        "modern": (Config("modern", 259, 32, 2, 4, 64), 8, 1),
        "gpt2": (Config("gpt2", 259, 32, 2, 4, 64), 4, 2),
        # the mixture of experts: dropless with one micro-batch; with a capacity and two
        "moe": (Config("modern", 259, 32, 2, 4, 64, experts=4, top_k=2, expert_ffn=64), 8, 1),
        "moe_capacity": (Config("modern", 259, 32, 2, 4, 64, experts=4, top_k=2, expert_ffn=64, capacity=1.0), 4, 2),
    }
    h = {"steps": 20, "lr": 3e-3, "min_lr": 3e-4, "warmup": 5, "beta2": 0.99, "weight_decay": 0.1, "grad_clip": 1.0}
    tensors, meta = {}, {"hyper": json.dumps(h), "torch": torch.__version__, "device": str(torch.cuda.get_device_name() if dev == "cuda" else "cpu")}
    for name, (c, batch, accum) in cases.items():
        torch.manual_seed(0)
        model = Gpt(c, dev).to(dev)
        for n, p in model.state_dict().items():
            tensors[f"{name}.init.{n}"] = p.detach().cpu().clone()
        opt = adamw(model, h["lr"], h["beta2"], h["weight_decay"], fused=False)
        g = torch.Generator().manual_seed(1)
        xs, ys, losses = [], [], []
        for step in range(h["steps"]):
            starts = torch.randint(0, len(ids) - c.context, (accum, batch, 1), generator=g)
            w = ids[starts + torch.arange(c.context + 1)]
            x, y = w[..., :-1], w[..., 1:]
            xs.append(x), ys.append(y)
            loss = train_step(model, opt, [(x[a].to(dev), y[a].to(dev)) for a in range(accum)], step, h)
            losses.append(float(loss))
        tensors[f"{name}.x"] = torch.stack(xs)
        tensors[f"{name}.y"] = torch.stack(ys)
        tensors[f"{name}.loss"] = torch.tensor(losses, dtype=torch.float64)
        for n, p in model.state_dict().items():
            tensors[f"{name}.final.{n}"] = p.detach().cpu().clone()
        meta[name] = json.dumps({**c.meta(), "batch": batch, "accum": accum})
        print(name, "losses", " ".join(f"{v:.5f}" for v in losses))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(Path(out_dir) / "gpt_golden.safetensors"), metadata=meta)


def bench(a):
    dev = "cuda"
    c = Config(a.style, a.vocab, a.context, a.layers, a.heads, a.dim, experts=a.experts, top_k=a.top_k,
               expert_ffn=a.expert_ffn, impl=a.impl)
    torch.manual_seed(0)
    model = Gpt(c, dev).to(dev)
    opt = adamw(model, 1e-4, 0.95, 0.1, fused=True)
    h = {"steps": 10**9, "lr": 1e-4, "min_lr": 1e-5, "warmup": 0, "grad_clip": 1.0}
    fwd = torch.compile(model) if a.compile else model
    # the compiled forward is what the loss runs through
    def model_loss(x, y):
        # the compiled forward is what the loss runs through
        logits, (aux, z) = fwd(x)
        ce = F.cross_entropy(logits.reshape(-1, c.vocab).float(), y.reshape(-1))
        return ce + (aux * (c.aux_coef / c.layers) + z * (c.z_coef / c.layers) if c.experts else 0.0)

    model.loss = model_loss
    x = torch.randint(0, c.vocab, (a.batch, c.context), device=dev)
    y = torch.randint(0, c.vocab, (a.batch, c.context), device=dev)
    for s in range(a.warmup):
        train_step(model, opt, [(x, y)], s, h, torch.bfloat16)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for s in range(a.steps):
        loss = train_step(model, opt, [(x, y)], s, h, torch.bfloat16)
    float(loss)
    dt = time.perf_counter() - t0
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({
        "peer": "pytorch " + ("compile" if a.compile else "eager"), "torch": torch.__version__,
        "experts": a.impl if a.experts else None,
        "params": n, "tokens_per_s": a.steps * a.batch * c.context / dt, "ms_per_step": dt * 1e3 / a.steps,
        "peak_bytes": torch.cuda.max_memory_allocated(), "loss": float(loss),
    }))


def grouped(a):
    """torch._grouped_mm alone at the MoE layer's shapes: forward in and out, weight gradient."""
    dev = "cuda"
    torch.manual_seed(1)
    per = a.rows // a.experts
    rows = per * a.experts
    offs = torch.arange(1, a.experts + 1, device=dev, dtype=torch.int32) * per
    bf = dict(device=dev, dtype=torch.bfloat16)
    cases = [
        (torch.randn(rows, a.dim, **bf), torch.randn(a.experts, a.dim, 2 * a.ffn, **bf), 2 * rows * a.dim * 2 * a.ffn),
        (torch.randn(rows, a.ffn, **bf), torch.randn(a.experts, a.ffn, a.dim, **bf), 2 * rows * a.ffn * a.dim),
        (torch.randn(rows, a.dim, **bf).t(), torch.randn(rows, 2 * a.ffn, **bf), 2 * rows * a.dim * 2 * a.ffn),
    ]
    out = []
    for x, w, flops in cases:
        run = lambda: torch._grouped_mm(x, w, offs=offs)
        try:
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                run()
            torch.cuda.synchronize()
            out.append(flops / ((time.perf_counter() - t0) / 20) / 1e12)
        except Exception as e:  # a shape torch refuses is reported, not fatal
            print(f"torch._grouped_mm: {e}", file=sys.stderr)
            out.append(None)
    print(json.dumps({"torch": torch.__version__, "tflops": out}))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("golden")
    g.add_argument("out_dir")
    b = sub.add_parser("bench")
    for k, v in [("layers", 12), ("dim", 768), ("heads", 12), ("context", 1024), ("batch", 16), ("vocab", 49152), ("steps", 20), ("warmup", 5)]:
        b.add_argument(f"--{k}", type=int, default=v)
    b.add_argument("--style", default="modern")
    b.add_argument("--compile", action="store_true")
    b.add_argument("--experts", type=int, default=0)
    b.add_argument("--top-k", type=int, default=2)
    b.add_argument("--expert-ffn", type=int, default=None)
    b.add_argument("--impl", default="grouped", choices=["grouped", "loop"])
    gm = sub.add_parser("grouped")
    for k in ("rows", "experts", "dim", "ffn"):
        gm.add_argument(f"--{k}", type=int, required=True)
    a = p.parse_args()
    {"golden": lambda: golden(a.out_dir), "bench": lambda: bench(a), "grouped": lambda: grouped(a)}[a.cmd]()
