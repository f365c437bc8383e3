#!/usr/bin/env python3
"""NumPy peer for `stride bench cpu`: the same rows, timed with NumPy.

Usage:
  python3 scripts/bench_numpy.py [--quick]          time every row, print one JSON object
  python3 scripts/bench_numpy.py --serve [--quick]  answer timing requests on stdin

`stride bench cpu` uses --serve, so that stride and NumPy are timed in alternating blocks of
repetitions of the same row in the same run (on a shared, noisy machine both then see the
same conditions). The protocol is one JSON object per line:

  first line out:  {"available": true, "numpy": "...", "blas": "...", "cpu_count": N}
                   (or {"available": false, "why": "..."}, then exit 0)
  in:  {"row": "<id>", "reps": R}   out: {"times": [seconds, ...]}   (R timed runs)
  in:  {"row": "<id>", "drop": true}   out: {"dropped": true}         (free the row's arrays)
  in:  {"rows": true}                  out: {"rows": [ids...]}
  end of input: exit.

Each row id matches a row of `stride bench cpu`, with the same sizes and the same allocation
behaviour (operations that return a new array allocate it, as stride's do). A row's arrays are
made on its first request and kept until it is dropped.
"""

import json
import os
import sys
import time


def row_makers(np, quick):
    """id -> function that builds the row's arrays and returns the zero-argument op to time."""
    mm_sizes = [64, 128] if quick else [256, 1024, 2048]
    n_add = (1 << 20) if quick else (1 << 24)
    side = 512 if quick else 4096  # square side for the 2-D memory-bound rows
    f32 = np.float32
    makers = {}

    def mm(n, kind):
        def make():
            a = np.full((n, n), 0.5, dtype=f32)
            b = np.full((n, n), 0.25, dtype=f32)
            if kind == "tt":
                # views with transposed strides; BLAS takes them without a copy
                a, b = a.T, b.T
            if kind == "out":
                c = np.zeros((n, n), dtype=f32)
                return lambda: np.matmul(a, b, out=c)
            return lambda: a @ b

        return make

    for n in mm_sizes:
        makers[f"matmul_f32_{n}"] = mm(n, "")
        makers[f"matmul_f32_{n}_tt"] = mm(n, "tt")
        makers[f"matmul_f32_{n}_out"] = mm(n, "out")

    def add_new():
        a = np.full(n_add, 1.5, dtype=f32)
        b = np.full(n_add, 2.5, dtype=f32)
        return lambda: a + b

    def add_out():
        a = np.full(n_add, 1.5, dtype=f32)
        b = np.full(n_add, 2.5, dtype=f32)
        c = np.empty(n_add, dtype=f32)
        c.fill(0.0)
        return lambda: np.add(a, b, out=c)

    makers["add_f32"] = add_new
    makers["add_out_f32"] = add_out

    def sq(v):
        return np.full((side, side), v, dtype=f32)

    def two_d(kind):
        def make():
            x, y = sq(1.0), sq(2.0)
            if kind == "contiguous_t":
                return lambda: np.ascontiguousarray(x.T)
            if kind == "add_2d":
                return lambda: x + y
            if kind == "add_both_t":
                return lambda: x.T + y.T
            if kind == "add_one_t":
                return lambda: x.T + y
            if kind == "add_step":
                wide = np.full((side, 2 * side), 3.0, dtype=f32)
                return lambda: wide[:, ::2] + y
            if kind == "neg_2d":
                return lambda: np.negative(x)
            if kind == "neg_t":
                return lambda: np.negative(x.T)
            w = sq(1.0)
            if kind == "addcmul_2d":
                return lambda: x + 0.5 * y * w
            if kind == "addcmul_t":
                return lambda: x.T + 0.5 * y.T * w.T
            if kind == "addcmul_inplace":
                return lambda: np.add(w, 0.0 * x * y, out=w)
            dst = w if kind == "mul_2d" else w.T
            return lambda: np.multiply(dst, x, out=dst)

        return make

    for kind in [
        "contiguous_t",
        "add_2d",
        "add_both_t",
        "add_one_t",
        "add_step",
        "neg_2d",
        "neg_t",
        "mul_2d",
        "mul_t",
        "addcmul_2d",
        "addcmul_t",
        "addcmul_inplace",
    ]:
        makers[kind] = two_d(kind)
    return makers


def times(f, reps):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return ts


def header(np):
    blas = ""
    try:
        cfg = np.show_config(mode="dicts")
        dep = cfg["Build Dependencies"]["blas"]
        blas = "{} {}".format(dep["name"], dep["version"])
    except Exception:
        pass
    return {"available": True, "numpy": np.__version__, "blas": blas, "cpu_count": os.cpu_count()}


def serve(np, quick):
    makers = row_makers(np, quick)
    live = {}
    print(json.dumps(header(np)), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            if req.get("rows"):
                out = {"rows": list(makers)}
            elif req.get("drop"):
                live.pop(req["row"], None)
                out = {"dropped": True}
            else:
                rid = req["row"]
                if rid not in live:
                    live[rid] = makers[rid]()
                out = {"times": times(live[rid], int(req["reps"]))}
        except Exception as e:  # answer, never hang the caller
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


def main():
    quick = "--quick" in sys.argv
    try:
        import numpy as np
    except ImportError as e:
        print(json.dumps({"available": False, "why": f"numpy is not importable ({e})"}), flush=True)
        return
    if "--serve" in sys.argv:
        serve(np, quick)
        return
    # standalone: best of a few runs per row after a warm-up
    out = {}
    for rid, make in row_makers(np, quick).items():
        f = make()
        times(f, 2)
        out[rid] = min(times(f, 5 if quick else 21))
    print(json.dumps(dict(header(np), seconds=out)))


if __name__ == "__main__":
    main()
