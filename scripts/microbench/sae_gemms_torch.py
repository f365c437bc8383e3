# PyTorch's time for the same six GEMMs (views as autograd makes them), plus linear with bias.
import torch, time
B, d, n = 4096, 384, 1536
dev = "cuda"
x = torch.randn(B, d, device=dev); acts = torch.randn(B, n, device=dev); g = torch.randn(B, d, device=dev)
dp = torch.randn(B, n, device=dev); Wd = torch.randn(d, n, device=dev); We = Wd.t().clone()  # We [n,d] strides (1,n)
Wt = torch.randn(d, n, device=dev); bias = torch.zeros(n, device=dev)
assert We.stride() == (1, n)
cases = {
 "enc": lambda: x @ Wt, "dec": lambda: acts @ Wd.t(), "dact": lambda: g @ Wd,
 "dWdec": lambda: acts.t() @ g, "dWenc": lambda: x.t() @ dp, "dx": lambda: dp @ We,
 "linear_enc_bias": lambda: torch.nn.functional.linear(x, We, bias),
}
tot = 0
for name, f in cases.items():
    for _ in range(5): f()
    ts = []
    for r in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(50): f()
        b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b) * 1000 / 50)
    ts.sort(); print(f"torch {name:16s} {ts[3]:7.1f} us"); tot += ts[3] if "bias" not in name else 0
print(f"torch TOTAL (6) {tot:.1f} us")
