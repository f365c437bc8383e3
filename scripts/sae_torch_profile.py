"""PyTorch's side of the SAE step profile: the step of `scripts/bench_torch.py`
(`sae_step`) (stride-models/src/sae.rs in PyTorch), under torch.profiler, printing the
device time per kernel so that it can be read beside `sae_step_profile` (stride's example).

    python3 scripts/sae_torch_profile.py 384 1536 32 4096
"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import sae_step  # noqa: E402


def main():
    dims, latents, k, batch = (int(a) for a in sys.argv[1:5])
    step = sae_step(torch, "cuda", latents, dims=dims, k=k, batch=batch)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    steps = 10
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    print(f"PyTorch {torch.__version__} SAE step d {dims}, {latents} latents, k {k}, batch {batch}: "
          f"device time per step by kernel (mean of {steps} steps)")
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = e.cuda_time_total
        if t > 0:
            rows.append((t / steps / 1000.0, e.count / steps, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    for ms, n, key in rows[:25]:
        print(f"{ms:9.3f} ms  {n:5.1f} calls  {key[:90]}")
    print(f"{total:9.3f} ms  total device time per step; "
          f"{sum(r[1] for r in rows):.0f} kernel calls per step")


if __name__ == "__main__":
    main()
