#!/usr/bin/env python3
"""Records PyTorch's autocast op policy on CUDA, for stride's `autocast` to follow and test.

Runs every op stride has under `torch.autocast("cuda", dtype)` for bf16 and f16 with its
floating inputs all f32, all half, and mixed (f32 first, half after; half first, f32 after),
and without autocast with the mixed inputs, and writes what PyTorch returned:

  crates/stride-core/src/autocast/policy.tsv        op -> policy (what stride's table holds)
  crates/stride-nn/tests/data/autocast_pytorch.tsv   every observation (what the test replays)

Policies, as PyTorch's autocast_mode.cpp names them, derived from the observations:
  lower    f32 inputs come out in the autocast dtype (matrix products, attention)
  fp32     half inputs come out in f32 (exp/log, norms, losses, softmax, sums)
  promote  mixed inputs come out in the widest type where, outside autocast, they would not
  none     autocast leaves the op alone
  refuse   PyTorch raises under autocast (binary_cross_entropy: unsafe in half)

Usage (on the GPU machine): python3 scripts/autocast_policy.py [OUT_DIR]
"""
import os
import sys

import torch
import torch.nn.functional as F

DEV = "cuda"


def pos(shape, dt):
    return (torch.rand(shape, device=DEV) + 0.5).to(dt)


def unit(shape, dt):
    return torch.rand(shape, device=DEV).to(dt)


def idx(shape, n):
    return torch.randint(0, n, shape, device=DEV)


# name -> (list of float-input makers (shape, maker), function of the inputs)
OPS = {
    # matrix products and attention
    "matmul": ([((4, 8), pos), ((8, 4), pos)], lambda a, b: torch.matmul(a, b)),
    "mm": ([((4, 8), pos), ((8, 4), pos)], lambda a, b: torch.mm(a, b)),
    "bmm": ([((2, 4, 8), pos), ((2, 8, 4), pos)], lambda a, b: torch.bmm(a, b)),
    "einsum": ([((4, 8), pos), ((8, 4), pos)], lambda a, b: torch.einsum("ij,jk->ik", a, b)),
    "linear": ([((4, 8), pos), ((3, 8), pos), ((3,), pos)], lambda x, w, b: F.linear(x, w, b)),
    "scaled_dot_product_attention": (
        [((1, 2, 4, 8), pos)] * 3,
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    ),
    "dot": ([((8,), pos), ((8,), pos)], lambda a, b: torch.dot(a, b)),
    "outer": ([((4,), pos), ((3,), pos)], lambda a, b: torch.outer(a, b)),
    # pointwise transcendental
    "exp": ([((4, 8), pos)], torch.exp),
    "exp2": ([((4, 8), pos)], torch.exp2),
    "expm1": ([((4, 8), pos)], torch.expm1),
    "log": ([((4, 8), pos)], torch.log),
    "log2": ([((4, 8), pos)], torch.log2),
    "log1p": ([((4, 8), pos)], torch.log1p),
    "reciprocal": ([((4, 8), pos)], torch.reciprocal),
    "rsqrt": ([((4, 8), pos)], torch.rsqrt),
    "sqrt": ([((4, 8), pos)], torch.sqrt),
    "tan": ([((4, 8), unit)], torch.tan),
    "sin": ([((4, 8), unit)], torch.sin),
    "cos": ([((4, 8), unit)], torch.cos),
    "tanh": ([((4, 8), unit)], torch.tanh),
    "sigmoid": ([((4, 8), unit)], torch.sigmoid),
    "erf": ([((4, 8), unit)], torch.erf),
    "softplus": ([((4, 8), unit)], F.softplus),
    "relu": ([((4, 8), unit)], torch.relu),
    "gelu": ([((4, 8), unit)], F.gelu),
    "silu": ([((4, 8), unit)], F.silu),
    "abs": ([((4, 8), unit)], torch.abs),
    "square": ([((4, 8), unit)], torch.square),
    "pow_scalar": ([((4, 8), pos)], lambda a: torch.pow(a, 2.5)),
    "pow": ([((4, 8), pos), ((4, 8), pos)], lambda a, b: torch.pow(a, b)),
    "add": ([((4, 8), unit), ((4, 8), unit)], torch.add),
    "sub": ([((4, 8), unit), ((4, 8), unit)], torch.sub),
    "mul": ([((4, 8), unit), ((4, 8), unit)], torch.mul),
    "div": ([((4, 8), unit), ((4, 8), pos)], torch.div),
    "maximum": ([((4, 8), unit), ((4, 8), unit)], torch.maximum),
    "atan2": ([((4, 8), unit), ((4, 8), pos)], torch.atan2),
    "lerp": ([((4, 8), unit), ((4, 8), unit), ((4, 8), unit)], torch.lerp),
    "addcmul": ([((4, 8), unit), ((4, 8), unit), ((4, 8), unit)], torch.addcmul),
    "addcdiv": ([((4, 8), unit), ((4, 8), unit), ((4, 8), pos)], torch.addcdiv),
    "where": ([((4, 8), unit), ((4, 8), unit)], lambda a, b: torch.where(a > 0.5, a, b)),
    "clamp": ([((4, 8), unit), ((4, 8), unit), ((4, 8), pos)], torch.clamp),
    # normalisation, softmax, reductions
    "layer_norm": (
        [((4, 8), unit), ((8,), pos), ((8,), unit)],
        lambda x, w, b: F.layer_norm(x, (8,), w, b),
    ),
    "rms_norm": ([((4, 8), unit), ((8,), pos)], lambda x, w: F.rms_norm(x, (8,), w)),
    "softmax": ([((4, 8), unit)], lambda a: torch.softmax(a, -1)),
    "log_softmax": ([((4, 8), unit)], lambda a: torch.log_softmax(a, -1)),
    "logsumexp": ([((4, 8), unit)], lambda a: torch.logsumexp(a, -1)),
    "sum": ([((4, 8), unit)], torch.sum),
    "mean": ([((4, 8), unit)], torch.mean),
    "prod": ([((4, 8), pos)], torch.prod),
    "amax": ([((4, 8), unit)], lambda a: torch.amax(a, -1)),
    "var": ([((4, 8), unit)], torch.var),
    "std": ([((4, 8), unit)], torch.std),
    "norm": ([((4, 8), unit)], lambda a: torch.linalg.vector_norm(a)),
    "cumsum": ([((4, 8), unit)], lambda a: torch.cumsum(a, -1)),
    "cumprod": ([((4, 8), pos)], lambda a: torch.cumprod(a, -1)),
    # losses
    "mse_loss": ([((4, 8), unit), ((4, 8), unit)], F.mse_loss),
    "l1_loss": ([((4, 8), unit), ((4, 8), unit)], F.l1_loss),
    "smooth_l1_loss": ([((4, 8), unit), ((4, 8), unit)], F.smooth_l1_loss),
    "nll_loss": ([((4, 8), unit)], lambda a: F.nll_loss(a, idx((4,), 8))),
    "cross_entropy": ([((4, 8), unit)], lambda a: F.cross_entropy(a, idx((4,), 8))),
    "binary_cross_entropy": ([((4, 8), unit), ((4, 8), unit)], F.binary_cross_entropy),
    "binary_cross_entropy_with_logits": (
        [((4, 8), unit), ((4, 8), unit)],
        F.binary_cross_entropy_with_logits,
    ),
    # joins and indexing
    "cat": ([((4, 8), unit), ((4, 8), unit)], lambda a, b: torch.cat([a, b])),
    "stack": ([((4, 8), unit), ((4, 8), unit)], lambda a, b: torch.stack([a, b])),
    "embedding": ([((8, 4), unit)], lambda w: F.embedding(idx((3,), 8), w)),
    "scatter_add": (
        [((4, 8), unit), ((4, 8), unit)],
        lambda a, s: a.scatter_add(1, idx((4, 8), 8), s),
    ),
    "index_copy": (
        [((4, 8), unit), ((2, 8), unit)],
        lambda a, s: a.index_copy(0, torch.tensor([0, 2], device=DEV), s),
    ),
}

NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def run(fn, specs, dts, autocast):
    torch.manual_seed(0)
    args = [mk(shape, dt) for (shape, mk), dt in zip(specs, dts)]
    try:
        if autocast is None:
            out = fn(*args)
        else:
            with torch.autocast(DEV, dtype=autocast):
                out = fn(*args)
        return NAMES.get(out.dtype, str(out.dtype))
    except Exception:
        return "error"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    rows, policy = [], {}
    for name, (specs, fn) in OPS.items():
        n = len(specs)
        seen = {}
        for half in (torch.bfloat16, torch.float16):
            h = NAMES[half]
            cases = {"f32": [torch.float32] * n, h: [half] * n}
            if n > 1:
                cases["f32+" + h] = [torch.float32] + [half] * (n - 1)
                cases[h + "+f32"] = [half] + [torch.float32] * (n - 1)
            for label, dts in cases.items():
                out = run(fn, specs, dts, half)
                plain = run(fn, specs, dts, None)
                rows.append((name, h, label, out, plain))
                seen[(h, label)] = (out, plain)
        # the policy, from the bf16 observations (f16's must agree; checked below)
        h = "bf16"
        all_f32, all_half = seen[(h, "f32")][0], seen[(h, h)][0]
        if all_f32 == "error" and seen[(h, "f32")][1] != "error":
            p = "refuse"
        elif all_f32 == h:
            p = "lower"
        elif all_half == "f32":
            p = "fp32"
        elif n > 1 and any(
            seen[(h, lab)][0] != seen[(h, lab)][1] for lab in ("f32+" + h, h + "+f32")
        ):
            p = "promote"
        else:
            p = "none"
        policy[name] = p
    pdir = os.path.join(root, "crates/stride-core/src/autocast")
    ddir = os.path.join(root, "crates/stride-nn/tests/data")
    os.makedirs(pdir, exist_ok=True)
    os.makedirs(ddir, exist_ok=True)
    head = f"# generated by scripts/autocast_policy.py from PyTorch {torch.__version__} on {torch.cuda.get_device_name()}\n"
    with open(os.path.join(pdir, "policy.tsv"), "w") as f:
        f.write(head + "# op\tpolicy\n")
        for name, p in policy.items():
            f.write(f"{name}\t{p}\n")
    with open(os.path.join(ddir, "autocast_pytorch.tsv"), "w") as f:
        f.write(head + "# op\tautocast\tinputs\tunder autocast\twithout autocast\n")
        for r in rows:
            f.write("\t".join(r) + "\n")
    print(f"{len(policy)} ops, {len(rows)} observations")
    for name, p in policy.items():
        print(f"{name:34} {p}")


if __name__ == "__main__":
    main()
