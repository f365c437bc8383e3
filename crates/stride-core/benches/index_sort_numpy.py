"""NumPy peer of benches/index_sort.rs: the same sizes, timed with NumPy.

Usage:
  python3 crates/stride-core/benches/index_sort_numpy.py            every row, best of a few runs
  python3 crates/stride-core/benches/index_sort_numpy.py --serve    answer timing requests

`cargo bench -p stride-core --bench index_sort` starts this script with --serve and times
stride and NumPy in alternating runs of the same row, in the same run (on a shared, noisy
machine both then meet the same conditions). The protocol is one JSON object per line:

  first line out: {"available": true, "numpy": "..."}   (or {"available": false, "why": ...})
  in:  {"row": "<id>", "reps": R}   out: {"times": [seconds, ...]}   (R timed runs)
  in:  {"row": "<id>", "drop": true}   out: {"dropped": true}         (free the row's arrays)
  end of input: exit.

NumPy runs these ops on one thread; stride uses every core (2 on the reference VM). A row's
arrays are made on its first request and kept until it is dropped.
"""
import json
import sys
import time

N, D = 1_000_000, 64


def row_makers(np):
    """id -> function that builds the row's arrays and returns the zero-argument op to time."""
    rng = np.random.default_rng(42)
    shared = {}

    def rows_and_index():
        if "x" not in shared:
            shared["x"] = (np.arange(N * D) % 1000).astype(np.float32).reshape(N, D)
            shared["idx"] = rng.integers(0, N, N)
        return shared["x"], shared["idx"]

    def take():
        x, idx = rows_and_index()
        return lambda: np.take(x, idx, axis=0)

    def take_out():
        x, idx = rows_and_index()
        out = np.ones((N, D), np.float32)  # preallocated and touched: the peer of _out forms
        return lambda: np.take(x, idx, axis=0, out=out)

    def add_at():
        x, idx = rows_and_index()
        acc = np.ones((N, D), np.float32)
        return lambda: np.add.at(acc, idx, x)

    def normal(shape):
        return np.random.default_rng(7).standard_normal(shape).astype(np.float32)

    def topk():
        y = normal((32, 50_000))

        def f():
            p = np.argpartition(y, -50, axis=1)[:, -50:]
            v = np.take_along_axis(y, p, 1)
            o = np.argsort(-v, axis=1)
            return np.take_along_axis(v, o, 1), np.take_along_axis(p, o, 1)

        return f

    def argpartition():
        y = normal((32, 50_000))
        return lambda: np.argpartition(y, -50, axis=1)

    def sort_values():
        s = normal(1_000_000)
        return lambda: np.sort(s)

    def argsort_take():
        # values and indices, what stride's sort returns
        s = normal(1_000_000)

        def f():
            i = np.argsort(s)
            return np.take(s, i), i

        return f

    def argsort_2d():
        s = normal((1000, 1000))
        return lambda: np.argsort(s, axis=1)

    def partition():
        s = normal(1_000_000)
        return lambda: np.partition(s, 500_000)

    return {
        "take": take,
        "take_out": take_out,
        "add_at": add_at,
        "topk": topk,
        "argpartition": argpartition,
        "sort": sort_values,
        "argsort_take": argsort_take,
        "argsort_2d": argsort_2d,
        "partition": partition,
    }, shared


def times(f, reps):
    """Wall times of `reps` runs, each after 20 ms idle (as the Rust side does)."""
    ts = []
    for _ in range(reps):
        time.sleep(0.02)
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return ts


def serve(np):
    makers, shared = row_makers(np)
    live = {}
    print(json.dumps({"available": True, "numpy": np.__version__}), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            if req.get("drop"):
                live.pop(req["row"], None)
                if req.get("all"):
                    live.clear()
                    shared.clear()
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
    try:
        import numpy as np
    except ImportError as e:
        print(json.dumps({"available": False, "why": f"numpy is not importable ({e})"}), flush=True)
        return
    if "--serve" in sys.argv:
        serve(np)
        return
    print(f"numpy {np.__version__} (standalone: best of 5 runs per row after one warm-up)")
    makers, _ = row_makers(np)
    for rid, make in makers.items():
        f = make()
        reps = 1 if rid == "add_at" else 5
        f()
        print(f"{rid:<16} {min(times(f, reps)) * 1e3:9.2f} ms")


if __name__ == "__main__":
    main()
