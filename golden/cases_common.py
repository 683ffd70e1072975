"""Shared helpers for the golden cases: input samplers and independent NumPy float64 oracles.

Nothing here imports refcomp's ops: the oracles are written directly in NumPy so the golden data
is checked against a second, unrelated implementation.
"""
from __future__ import annotations

import math

import numpy as np

from refcomp.golden import GoldenCase

__all__ = ["GoldenCase", "case", "normal", "uniform", "signed_away", "ids", "f64", "dim_of",
           "softmax", "log_softmax", "sigmoid", "gelu_tanh", "layer_norm", "rms_norm", "conv2d",
           "max_pool2d", "avg_pool2d", "attention"]


def case(name, build, make_inputs, oracle, bindings=({},), tags=()) -> GoldenCase:
    bindings = tuple(dict(b) for b in bindings)
    if any(bindings) and "symbolic" not in tags:
        tags = tuple(tags) + ("symbolic",)
    return GoldenCase(
        name=name, build=build, make_inputs=make_inputs, oracle=oracle, bindings=bindings, tags=tuple(tags)
    )


# --- samplers (float32 feeds; the binding dict gives symbolic sizes) -----------------------------
def dim_of(value, binding):
    """A concrete size: an int as is, a symbol name looked up in the binding."""
    return binding[value] if isinstance(value, str) else value


def _shape(shape, binding):
    return tuple(dim_of(n, binding) for n in shape)


def normal(rng, shape, binding=None, scale=1.0, shift=0.0):
    return (rng.standard_normal(_shape(shape, binding or {})) * scale + shift).astype(np.float32)


def uniform(rng, lo, hi, shape, binding=None):
    return rng.uniform(lo, hi, _shape(shape, binding or {})).astype(np.float32)


def signed_away(rng, lo, hi, shape, binding=None):
    """Magnitudes in [lo, hi] with random signs: values kept away from zero."""
    shape = _shape(shape, binding or {})
    return (rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


def ids(rng, vocab, shape, binding=None):
    return rng.integers(0, vocab, _shape(shape, binding or {})).astype(np.int32)


def f64(feeds, *names):
    out = [np.asarray(feeds[n], dtype=np.float64) if feeds[n].dtype.kind == "f" else feeds[n] for n in names]
    return out[0] if len(out) == 1 else out


# --- oracles (float64) -----------------------------------------------------------------------------
def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps=1e-6):
    return x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps) * w


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """Direct loops over output positions, as the textbook defines a grouped, dilated convolution."""
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n, c, h, wd = x.shape
    co, cig, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, co, ho, wo))
    per_group = co // groups
    for o in range(co):
        g = o // per_group
        for i in range(ho):
            for j in range(wo):
                acc = np.zeros(n)
                for ci in range(cig):
                    for a in range(kh):
                        for bb in range(kw):
                            acc += xp[:, g * cig + ci, i * sh + a * dh, j * sw + bb * dw] * w[o, ci, a, bb]
                out[:, o, i, j] = acc
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def _pool(x, kernel, stride, padding, reduce, fill):
    (kh, kw) = _pair(kernel)
    (sh, sw) = _pair(kernel if stride is None else stride)
    (ph, pw) = _pair(padding)
    n, c, h, w = x.shape
    ho = (h + 2 * ph - kh) // sh + 1
    wo = (w + 2 * pw - kw) // sw + 1
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            cells = []
            for a in range(kh):
                for b in range(kw):
                    r, s = i * sh + a - ph, j * sw + b - pw
                    inside = 0 <= r < h and 0 <= s < w
                    cells.append(x[:, :, r, s] if inside else np.full((n, c), fill))
            out[:, :, i, j] = reduce(np.stack(cells, axis=-1))
    return out


def max_pool2d(x, kernel_size, stride=None, padding=0):
    return _pool(x, kernel_size, stride, padding, lambda cells: cells.max(axis=-1), -np.inf)


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """count_include_pad=True: padded cells count as zeros in the window's mean."""
    return _pool(x, kernel_size, stride, padding, lambda cells: cells.mean(axis=-1), 0.0)


def attention(q, k, v, causal=False, mask=None):
    d = q.shape[-1]
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(d)
    if causal:
        tq, tk = scores.shape[-2:]
        blocked = np.arange(tk)[None, :] > np.arange(tq)[:, None]
        scores = np.where(blocked, -np.inf, scores)
    if mask is not None:
        scores = scores + mask
    return np.matmul(softmax(scores, -1), v)
