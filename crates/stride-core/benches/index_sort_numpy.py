"""NumPy on the sizes of benches/index_sort.rs (run right after it, on the same machine).

NumPy runs these on one thread; stride uses every core (2 on the reference VM)."""
import time

import numpy as np


def best(reps, f):
    out = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f()
        out = min(out, time.perf_counter() - t)
    return out * 1e3


rng = np.random.default_rng(42)
n, d = 1_000_000, 64
x = (np.arange(n * d) % 1000).astype(np.float32).reshape(n, d)
idx = rng.integers(0, n, n)
print(f"numpy {np.__version__}")
print(f"{'np.take(x, idx, axis=0)':<44} {best(5, lambda: np.take(x, idx, axis=0)):8.1f} ms")
print(f"{'x[idx]':<44} {best(5, lambda: x[idx]):8.1f} ms")
out = np.ones((n, d), np.float32)  # preallocated: the peer of the _out forms
print(f"{'np.take(x, idx, axis=0, out=out)':<44} {best(5, lambda: np.take(x, idx, axis=0, out=out)):8.1f} ms")
del out
acc = np.ones((n, d), np.float32)
print(f"{'np.add.at(acc, idx, x)':<44} {best(1, lambda: np.add.at(acc, idx, x)):8.1f} ms")
del x, acc

y = rng.standard_normal((32, 50_000)).astype(np.float32)


def topk():
    p = np.argpartition(y, -50, axis=1)[:, -50:]
    v = np.take_along_axis(y, p, 1)
    o = np.argsort(-v, axis=1)
    return np.take_along_axis(v, o, 1), np.take_along_axis(p, o, 1)


print(f"{'np.argpartition k=50 over [32, 50000]':<44} {best(10, lambda: np.argpartition(y, -50, axis=1)):8.2f} ms")
print(f"{'  + sorted values and indices (= topk)':<44} {best(10, topk):8.2f} ms")
s = rng.standard_normal(1_000_000).astype(np.float32)
print(f"{'np.sort 1M f32':<44} {best(10, lambda: np.sort(s)):8.2f} ms")
print(f"{'np.argsort 1M f32':<44} {best(10, lambda: np.argsort(s)):8.2f} ms")
print(f"{'np.argsort(kind=stable) 1M f32':<44} {best(10, lambda: np.argsort(s, kind='stable')):8.2f} ms")
s2 = s.reshape(1000, 1000)
print(f"{'np.argsort [1000,1000] axis=1':<44} {best(10, lambda: np.argsort(s2, axis=1)):8.2f} ms")
print(f"{'np.partition (median) 1M f32':<44} {best(10, lambda: np.partition(s, 500_000)):8.2f} ms")
