"""The residual stream r + x @ w1 + b1, layer-normed, then a second matmul: a transformer block at
decode's few rows, with its feeds and NumPy's float64 result (tests/test_row_stats.py,
tests/test_staged_loads.py)."""
from __future__ import annotations

import numpy as np

import refcomp as rc
from refcomp.ops.nn import layer_norm

EPS = 1e-5


def block(d: int, f: int):
    x, r = rc.input("x", ("B", d)), rc.input("r", ("B", d))
    w1, b1 = rc.input("w1", (d, d)), rc.input("b1", (d,))
    g, be = rc.input("g", (d,)), rc.input("be", (d,))
    w2, b2 = rc.input("w2", (d, f)), rc.input("b2", (f,))
    return {"y": layer_norm(r + x @ w1 + b1, (d,), g, be, EPS) @ w2 + b2}


def feeds(rows: int, d: int, f: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((rows, d)), "r": rng.standard_normal((rows, d)) * 3 + 5,
             "w1": rng.standard_normal((d, d)) / np.sqrt(d), "b1": rng.standard_normal(d),
             "g": rng.standard_normal(d), "be": rng.standard_normal(d),
             "w2": rng.standard_normal((d, f)) / np.sqrt(d), "b2": rng.standard_normal(f)}
    return {k: v.astype(np.float32) for k, v in feeds.items()}


def want(feeds) -> np.ndarray:
    f = {k: v.astype(np.float64) for k, v in feeds.items()}
    h = f["r"] + f["x"] @ f["w1"] + f["b1"]
    mean = h.mean(-1, keepdims=True)
    var = ((h - mean) ** 2).mean(-1, keepdims=True)
    return ((h - mean) / np.sqrt(var + EPS) * f["g"] + f["be"]) @ f["w2"] + f["b2"]
