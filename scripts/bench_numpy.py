#!/usr/bin/env python3
"""NumPy peer for `stride bench cpu`: times the same rows, prints one JSON object.

Usage: python3 scripts/bench_numpy.py [--quick]

Each row id matches a row of `stride bench cpu`; the value is the median wall time in seconds
over several runs after a warm-up, with the same sizes and the same allocation behaviour
(operations that return a new array allocate it, as stride's do). If NumPy is missing, prints
{"available": false, "why": ...} and exits 0, so the caller can say so.
"""

import json
import os
import sys
import time


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def timeit(f, reps, warmup):
    for _ in range(warmup):
        f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return median(ts)


def main():
    quick = "--quick" in sys.argv
    try:
        import numpy as np
    except ImportError as e:
        print(json.dumps({"available": False, "why": f"numpy is not importable ({e})"}))
        return
    reps, warmup = (3, 1) if quick else (7, 2)
    mm_sizes = [64, 128] if quick else [256, 1024, 2048]
    n_add = (1 << 20) if quick else (1 << 24)
    side = 512 if quick else 4096  # square side for the 2-D memory-bound rows

    out = {}
    f32 = np.float32

    for n in mm_sizes:
        a = np.full((n, n), 0.5, dtype=f32)
        b = np.full((n, n), 0.25, dtype=f32)
        # more repetitions for small products, so the median is stable
        r = reps * (8 if n <= 256 else 1)
        out[f"matmul_f32_{n}"] = timeit(lambda: a @ b, r, warmup)
        at, bt = a.T, b.T  # views with transposed strides; BLAS takes them without a copy
        out[f"matmul_f32_{n}_tt"] = timeit(lambda: at @ bt, r, warmup)

    a = np.full(n_add, 1.5, dtype=f32)
    b = np.full(n_add, 2.5, dtype=f32)
    c = np.empty(n_add, dtype=f32)
    out["add_f32"] = timeit(lambda: a + b, reps, warmup)
    out["add_out_f32"] = timeit(lambda: np.add(a, b, out=c), reps, warmup)

    x = np.full((side, side), 1.0, dtype=f32)
    out["contiguous_t"] = timeit(lambda: np.ascontiguousarray(x.T), reps, warmup)

    # memory-bound ops on non-contiguous operands (and their contiguous baselines)
    y = np.full((side, side), 2.0, dtype=f32)
    wide = np.full((side, 2 * side), 3.0, dtype=f32)
    out["add_2d"] = timeit(lambda: x + y, reps, warmup)
    out["add_both_t"] = timeit(lambda: x.T + y.T, reps, warmup)
    out["add_one_t"] = timeit(lambda: x.T + y, reps, warmup)
    out["add_step"] = timeit(lambda: wide[:, ::2] + y, reps, warmup)
    out["neg_2d"] = timeit(lambda: np.negative(x), reps, warmup)
    out["neg_t"] = timeit(lambda: np.negative(x.T), reps, warmup)
    w = np.full((side, side), 1.0, dtype=f32)
    wt = w.T
    g = np.full((side, side), 1.0, dtype=f32)

    def mul_(dst, src):
        np.multiply(dst, src, out=dst)

    out["mul_2d"] = timeit(lambda: mul_(w, g), reps, warmup)
    out["mul_t"] = timeit(lambda: mul_(wt, g), reps, warmup)

    blas = ""
    try:
        cfg = np.show_config(mode="dicts")
        blas = "{} {}".format(cfg["Build Dependencies"]["blas"]["name"], cfg["Build Dependencies"]["blas"]["version"])
    except Exception:
        pass
    print(
        json.dumps(
            {
                "available": True,
                "numpy": np.__version__,
                "blas": blas,
                "cpu_count": os.cpu_count(),
                "seconds": out,
            }
        )
    )


if __name__ == "__main__":
    main()
