"""Golden fixtures for stride-gguf: the reference (de)quantizer's outputs on random blocks.

The reference is the `gguf` PyPI package (llama.cpp's gguf-py), whose numpy
`gguf.quants.dequantize` / `gguf.quants.quantize` match ggml's C reference. Setup:

    pip install gguf numpy          # fixtures were made with gguf 0.19.0, numpy 2.x
    python3 scripts/gguf_golden.py  # rewrites crates/stride-gguf/tests/fixtures/*.bin

Files written (all little-endian; read by crates/stride-gguf/tests/golden.rs):

- `dequant_<TYPE>.bin`: u32 ggml type id, u32 number of blocks, u32 number of bytes, the raw
  blocks, then the expected f32 values. Blocks are random bytes with the scale fields
  replaced by sane values (finite f16 scales spanning normal, tiny/subnormal and zero
  magnitudes, both signs), so the test exercises every bit of the quant fields.
- `quant_<TYPE>.bin`: u32 ggml type id, u32 number of elements, the f32 input, then the
  reference encoder's bytes.
- `quant_sizes.txt`: `name id block_size type_size` for every type the package knows.

With `--real FILE` it instead writes `tests/fixtures/smollm2_samples.txt`: for a few tensors of
that GGUF file (SmolLM2-135M-Instruct.Q4_1.gguf), a checksum of the bits of the whole
dequantized tensor and a strided sample of values (see `real_file.rs`).
"""

import struct
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

OUT = Path(__file__).resolve().parent.parent / "crates/stride-gguf/tests/fixtures"
rng = np.random.default_rng(20251125)


def f16_scales(n):
    """n finite f16 scales: mostly normal magnitudes, some tiny/subnormal, some zero."""
    mag = 10.0 ** rng.uniform(-4, 1, size=n)
    v = (mag * rng.choice([-1.0, 1.0], size=n)).astype(np.float16)
    kind = rng.integers(0, 10, size=n)
    v[kind == 0] = np.float16(0.0)
    v[kind == 1] = np.float16(6e-8) * rng.integers(1, 1000, size=(kind == 1).sum())
    assert np.isfinite(v).all()
    return v.view(np.uint8).reshape(n, 2)


# offsets (in bytes) of the f16 scale fields of each block type
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
    T.TQ2_0: [64],
    T.MXFP4: [],  # e8m0 exponent: every byte value is a finite scale
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],
}


def random_blocks(qtype, n_blocks):
    _, ts = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    for off in F16_FIELDS.get(qtype, []):
        blocks[:, off:off + 2] = f16_scales(n_blocks)
    return blocks


def write_dequant(qtype, n_blocks):
    if qtype == T.F32:
        x = rng.standard_normal(n_blocks).astype(np.float32) * 10.0 ** rng.uniform(-30, 30, n_blocks).astype(np.float32)
        x[:4] = [np.inf, -np.inf, 0.0, -0.0]
        blocks = x.view(np.uint8).reshape(n_blocks, 4)
    else:
        blocks = random_blocks(qtype, n_blocks)
    y = gguf.quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32).reshape(-1)
    raw = blocks.tobytes()
    path = OUT / f"dequant_{qtype.name}.bin"
    path.write_bytes(struct.pack("<III", int(qtype), n_blocks, len(raw)) + raw + y.astype("<f4").tobytes())
    print(f"{path.name}: {n_blocks} blocks, {y.size} values, {path.stat().st_size} bytes")


def write_quant(qtype, n_blocks):
    bs, _ = GGML_QUANT_SIZES[qtype]
    n = n_blocks * bs
    x = rng.standard_normal(n).astype(np.float32)
    # per-block magnitudes from tiny to large; some constant, zero, one-signed and tied blocks
    x *= np.repeat(10.0 ** rng.uniform(-6, 4, size=n // 32), 32).astype(np.float32)
    x[0:32] = 0.0
    x[32:64] = np.float32(1.5)
    x[64:96] = np.abs(x[64:96])
    x[96:128] = -np.abs(x[96:128])
    x[128:160] = np.where(np.arange(32) % 2 == 0, 3.0, -3.0).astype(np.float32)  # max ties
    x[160:192] = np.round(x[160:192] * 4) / 4  # values on half-steps: rounding ties
    q = gguf.quants.quantize(x.reshape(-1, bs), qtype).reshape(-1)
    raw = np.ascontiguousarray(q).view(np.uint8).tobytes()
    path = OUT / f"quant_{qtype.name}.bin"
    path.write_bytes(struct.pack("<II", int(qtype), n) + x.astype("<f4").tobytes() + raw)
    print(f"{path.name}: {n} values, {len(raw)} bytes out")


def write_sizes():
    lines = [f"{t.name} {int(t)} {bs} {ts}" for t, (bs, ts) in sorted(GGML_QUANT_SIZES.items())]
    (OUT / "quant_sizes.txt").write_text("\n".join(lines) + "\n")


def checksum(values):
    """sum over i of bits(v[i]) * (2i + 1), wrapping mod 2^64 (Rust: wrapping ops)."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    w = np.arange(bits.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(bits * w, dtype=np.uint64))


def write_real(path):
    r = gguf.GGUFReader(path)
    names = ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight",
             "blk.29.attn_v.weight", "blk.0.attn_norm.weight", "output_norm.weight"]
    from importlib.metadata import version
    out = [f"# dequantized by gguf {version('gguf')} with numpy {np.__version__} "
           f"(scripts/gguf_golden.py --real); checksum = sum bits(v[i])*(2i+1) mod 2^64; "
           f"samples: index value-bits-hex"]
    for t in r.tensors:
        if t.name not in names:
            continue
        v = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        step = max(1, v.size // 50) | 1
        idx = np.arange(0, v.size, step)
        out.append(f"tensor {t.name} {t.tensor_type.name} {v.size} {checksum(v)}")
        out.append(" ".join(f"{i}:{v[i:i+1].view(np.uint32)[0]:08x}" for i in idx))
    (OUT / "smollm2_samples.txt").write_text("\n".join(out) + "\n")
    print("\n".join(o[:120] for o in out))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) == 3 and sys.argv[1] == "--real":
        write_real(sys.argv[2])
        return
    write_sizes()
    for qtype, n in [(T.F32, 256), (T.F16, 256), (T.BF16, 256)]:
        # every f16/bf16 bit pattern class occurs in random bytes, NaNs and infinities included
        if qtype == T.F32:
            write_dequant(qtype, n)
        else:
            blocks = rng.integers(0, 256, size=(n, 2), dtype=np.uint8)
            y = gguf.quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32).reshape(-1)
            raw = blocks.tobytes()
            p = OUT / f"dequant_{qtype.name}.bin"
            p.write_bytes(struct.pack("<III", int(qtype), n, len(raw)) + raw + y.astype("<f4").tobytes())
            print(f"{p.name}: {n} values")
    for qtype in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.MXFP4]:
        write_dequant(qtype, 24)
    for qtype in [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.TQ2_0]:
        write_dequant(qtype, 4)
    for qtype in [T.Q8_0, T.Q4_0, T.Q4_1, T.BF16, T.F16]:
        write_quant(qtype, 16 if qtype in (T.Q8_0, T.Q4_0, T.Q4_1) else 512)
    # added later: appended so that the random streams of the fixtures above stay the same
    write_dequant(T.IQ4_NL, 24)
    write_dequant(T.IQ4_XS, 4)
    for qtype in [T.Q5_0, T.Q5_1]:
        write_quant(qtype, 16)


if __name__ == "__main__":
    main()
