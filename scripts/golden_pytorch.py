"""Golden fixtures from PyTorch for stride-nn's tests.

Run on a machine with PyTorch (the GPU machine; PyTorch runs on its CPU here, single-threaded,
so the numbers do not depend on the host):

    python3 scripts/golden_pytorch.py crates/stride-nn/tests/fixtures

Writes two safetensors files (small; committed):

- optim_golden.safetensors: 10-step trajectories (loss and every parameter after each step) of
  SGD (plain, momentum+dampening+weight decay, nesterov), Adam, AdamW, AdamW+amsgrad, in f32
  and f64, on a tiny tanh network whose first weight is a transposed clone (non-contiguous,
  strides (1, 4)) - the layout of the tied sparse autoencoder's encoder.
- mlp_golden.safetensors: a small MLP's state dict (nn.Sequential(Linear, Tanh, Linear)), an
  input batch and PyTorch's output for it.

Keys: "<case>.<dtype>.loss" (10 losses), "<case>.<dtype>.step<k>.<param>" (after step k = 1..10),
"init.<dtype>.<param>", "data.<dtype>.x", "data.<dtype>.y". Hyperparameters are in the
"__metadata__" map (JSON per case) and repeated in the Rust test.
"""
import json
import sys
from pathlib import Path

import torch

try:
    from safetensors.torch import save_file
except ImportError:  # the format is simple enough to write by hand (spec: huggingface.co/docs/safetensors)
    import struct

    _DT = {torch.float64: "F64", torch.float32: "F32", torch.int64: "I64"}

    def save_file(tensors, path, metadata=None):
        header, blobs, off = {}, [], 0
        if metadata:
            header["__metadata__"] = metadata
        for name in sorted(tensors):
            t = tensors[name].contiguous()
            raw = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
            header[name] = {"dtype": _DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
            blobs.append(raw)
            off += len(raw)
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

torch.set_num_threads(1)

CASES = {
    "sgd": ("SGD", dict(lr=0.1)),
    "sgd_momentum": ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    "adam": ("Adam", dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8)),
    "adamw": ("AdamW", dict(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)),
    "adamw_amsgrad": ("AdamW", dict(lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.05, amsgrad=True)),
}
STEPS = 10


def problem(dtype):
    g = torch.Generator().manual_seed(1234)
    init = {
        "w_base": torch.randn(3, 4, generator=g, dtype=torch.float64),  # encoder weight = w_base.t().clone()
        "b": torch.randn(4, generator=g, dtype=torch.float64) * 0.1,
        "v": torch.randn(2, 4, generator=g, dtype=torch.float64) * 0.5,
    }
    x = torch.randn(5, 3, generator=g, dtype=torch.float64)
    y = torch.randn(5, 2, generator=g, dtype=torch.float64)
    return {k: t.to(dtype) for k, t in init.items()}, x.to(dtype), y.to(dtype)


def loss_fn(w, b, v, x, y):
    h = torch.tanh(x @ w.t() + b)
    return ((h @ v.t() - y) ** 2).mean()


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors, meta = {}, {"torch": torch.__version__}
    for dname, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        init, x, y = problem(dtype)
        for k, t in init.items():
            tensors[f"init.{dname}.{k}"] = t
        tensors[f"data.{dname}.x"], tensors[f"data.{dname}.y"] = x, y
        for case, (opt_name, hp) in CASES.items():
            w = init["w_base"].t().clone().requires_grad_(True)  # clone keeps strides (1, 4)
            assert w.stride() == (1, 4), w.stride()
            b = init["b"].clone().requires_grad_(True)
            v = init["v"].clone().requires_grad_(True)
            opt = getattr(torch.optim, opt_name)([w, b, v], foreach=False, **hp)
            losses = []
            for step in range(1, STEPS + 1):
                opt.zero_grad()
                loss = loss_fn(w, b, v, x, y)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
                assert w.stride() == (1, 4), "the update kept the layout"
                for name, p in (("w", w), ("b", b), ("v", v)):
                    tensors[f"{case}.{dname}.step{step}.{name}"] = p.detach().contiguous().clone()
            tensors[f"{case}.{dname}.loss"] = torch.stack(losses)
            meta[case] = json.dumps({"optimizer": opt_name, **hp})
    save_file(tensors, str(out / "optim_golden.safetensors"), metadata=meta)

    # a small MLP: PyTorch's state dict and its output for a batch
    torch.manual_seed(7)
    mlp = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()
    x = torch.randn(4, 3, dtype=torch.float64)
    with torch.no_grad():
        y = mlp(x)
    sd = {k: t.contiguous() for k, t in mlp.state_dict().items()}
    save_file({**sd, "input": x, "output": y}, str(out / "mlp_golden.safetensors"), metadata={"torch": torch.__version__})
    print("wrote", out / "optim_golden.safetensors", out / "mlp_golden.safetensors", len(tensors), "tensors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "crates/stride-nn/tests/fixtures")
