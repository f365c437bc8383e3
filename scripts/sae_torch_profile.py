"""PyTorch's side of the SAE step profile: the same step as `scripts/bench_torch.py`'s
`sae_step_time` (stride-models/src/sae.rs in PyTorch), under torch.profiler, printing the
device time per kernel so that it can be read beside `sae_step_profile` (stride's example).

    python3 scripts/sae_torch_profile.py 384 1536 32 4096
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    dims, latents, k, batch = (int(a) for a in sys.argv[1:5])
    dev = "cuda"
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
