"""The PyTorch peer of `stride bench ddp`, started with torchrun (one process per GPU):

    python3 -m torch.distributed.run --nproc-per-node 2 scripts/ddp_torch.py allreduce
    python3 -m torch.distributed.run --nproc-per-node 2 scripts/ddp_torch.py gpt --batch 16

`allreduce`: torch.distributed.all_reduce over NCCL at each size, bus bandwidth as
nccl-tests defines it (2·(n−1)/n · bytes / time). `gpt`: the GPT of scripts/gpt_torch.py
(the same model, bf16 autocast, fused AdamW, clipping) under DistributedDataParallel with
`--batch` sequences per GPU. Rank 0 prints one JSON line.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import Config, Gpt, adamw, train_step  # noqa: E402


def setup():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    return rank, dist.get_world_size()


def allreduce(a):
    rank, world = setup()
    rows = []
    for mib in a.sizes:
        n = mib * (1 << 20) // 4
        t = torch.ones(n, dtype=torch.float32, device="cuda")
        for _ in range(5):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / a.iters
        nbytes = n * 4
        rows.append({"bytes": nbytes, "seconds": dt, "bus_gb_s": 2 * (world - 1) / world * nbytes / dt / 1e9})
    if rank == 0:
        print(json.dumps({"peer": "torch.distributed", "torch": torch.__version__,
                          "nccl": ".".join(map(str, torch.cuda.nccl.version())), "world": world, "rows": rows}))
    dist.destroy_process_group()


def gpt(a):
    rank, world = setup()
    c = Config(a.style, a.vocab, a.context, a.layers, a.heads, a.dim)
    torch.manual_seed(0)
    model = Gpt(c, "cuda").to("cuda")
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = adamw(model, 1e-4, 0.95, 0.1, fused=True)
    h = {"steps": 10**9, "lr": 1e-4, "min_lr": 1e-5, "warmup": 0, "grad_clip": 1.0}

    class Wrapped:
        """train_step calls .loss and .parameters(): the DDP module's forward must run."""

        def loss(self, x, y):
            logits, _ = ddp(x)
            return torch.nn.functional.cross_entropy(logits.reshape(-1, c.vocab).float(), y.reshape(-1))

        def parameters(self):
            return model.parameters()

    w = Wrapped()
    g = torch.Generator(device="cuda").manual_seed(rank)
    x = torch.randint(0, c.vocab, (a.batch, c.context), device="cuda", generator=g)
    y = torch.randint(0, c.vocab, (a.batch, c.context), device="cuda", generator=g)
    for s in range(5):
        train_step(w, opt, [(x, y)], s, h, torch.bfloat16)
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for s in range(a.steps):
        loss = train_step(w, opt, [(x, y)], s, h, torch.bfloat16)
    float(loss)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"peer": "pytorch DDP" if world > 1 else "pytorch", "torch": torch.__version__, "world": world,
                          "tokens_per_s": a.steps * a.batch * c.context * world / dt,
                          "ms_per_step": dt * 1e3 / a.steps, "peak_bytes": torch.cuda.max_memory_allocated()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("allreduce")
    r.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64, 256, 1024], help="MiB")
    r.add_argument("--iters", type=int, default=20)
    b = sub.add_parser("gpt")
    for k, v in [("layers", 12), ("dim", 768), ("heads", 12), ("context", 1024), ("batch", 16), ("vocab", 49152), ("steps", 20)]:
        b.add_argument(f"--{k}", type=int, default=v)
    b.add_argument("--style", default="modern")
    a = p.parse_args()
    {"allreduce": allreduce, "gpt": gpt}[a.cmd](a)
