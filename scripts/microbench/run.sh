#!/usr/bin/env bash
# Standalone CUDA microbenchmarks behind figures in docs/PERFORMANCE.md, for a machine with
# nvcc and PyTorch (the GPU machine): schedules of a full f32 sum (two passes, one pass with a
# last-block fold, wider unrolls, 16-byte loads, CUB; back to back and in the bench's pattern)
# and the six f32 GEMMs of the d 384 SAE step through cuBLAS and cuBLASLt beside PyTorch's.
# Usage: scripts/microbench/run.sh [output file]   (prints to stdout without one)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/dev/stdout}
tmp=$(mktemp -d)
nvidia-smi --query-gpu=name --format=csv,noheader > "$out"
nvcc -O3 -arch=sm_90 -o "$tmp/reduce_schedules" "$here/reduce_schedules.cu"
"$tmp/reduce_schedules" >> "$out"
nvcc -O3 -arch=sm_90 -o "$tmp/sae_gemms" "$here/sae_gemms.cu" -lcublas -lcublasLt
"$tmp/sae_gemms" >> "$out"
python3 "$here/sae_gemms_torch.py" >> "$out"
