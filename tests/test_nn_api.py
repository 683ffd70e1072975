"""`rc.nn` (linear, norms, convolution, pooling, embedding, attention) under the reference interpreter,
against NumPy written directly (explicit loops for convolution and pooling) and, where PyTorch is
importable, against PyTorch on the CPU.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import refcomp as rc
from golden.cases_common import conv2d as conv2d_oracle  # direct loops, shared with the golden suite

from api_helpers import close, exact, f32, needs_torch, run, torch


# --- rc.nn ---------------------------------------------------------------------------------------

def test_linear(rng):
    x, w, b = f32(rng, 2, 5, 4), f32(rng, 3, 4), f32(rng, 3)
    x64 = x.astype(np.float64)
    close(run(lambda x_, w_, b_: rc.nn.linear(x_, w_, b_), x, w, b), x64 @ w.T + b, atol=1e-5)
    close(run(lambda x_, w_: rc.nn.linear(x_, w_), x, w), x64 @ w.T, atol=1e-5)


def test_layer_norm_and_rms_norm(rng):
    x, w, b = f32(rng, 3, 8, lo=-3, hi=5), f32(rng, 8), f32(rng, 8)
    x64 = x.astype(np.float64)
    normed = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    close(run(lambda t, w_, b_: rc.nn.layer_norm(t, w_, b_), x, w, b), normed * w + b, rtol=1e-4, atol=1e-5)
    close(
        run(lambda t: rc.nn.layer_norm(t, eps=1e-3), x),
        (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-3),
        rtol=1e-4,
        atol=1e-5,
    )
    rms = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6)
    close(run(lambda t, w_: rc.nn.rms_norm(t, w_), x, w), rms * w, rtol=1e-4, atol=1e-5)
    close(run(lambda t: rc.nn.rms_norm(t), x), rms, rtol=1e-4, atol=1e-5)


CONV_CONFIGS = [
    dict(), dict(stride=2), dict(padding=1), dict(stride=(2, 1), padding=(1, 2)), dict(dilation=2),
    dict(groups=2), dict(stride=2, padding=2, dilation=(1, 2), groups=2), dict(groups=4, padding=1),
]


@pytest.mark.parametrize("config", CONV_CONFIGS, ids=str)
def test_conv2d(rng, config):
    groups = config.get("groups", 1)
    x, w, b = f32(rng, 2, 4, 7, 8), f32(rng, 4, 4 // groups, 3, 2), f32(rng, 4)
    pair = lambda v: (v, v) if isinstance(v, int) else v
    expected = conv2d_oracle(
        x.astype(np.float64),
        w.astype(np.float64),
        b,
        pair(config.get("stride", 1)),
        pair(config.get("padding", 0)),
        pair(config.get("dilation", 1)),
        groups,
    )
    close(run(lambda x_, w_, b_: rc.nn.conv2d(x_, w_, b_, **config), x, w, b), expected, rtol=1e-4, atol=1e-5)
    expected_no_bias = expected - b[None, :, None, None]
    close(run(lambda x_, w_: rc.nn.conv2d(x_, w_, **config), x, w), expected_no_bias, rtol=1e-4, atol=1e-5)


def pool_oracle(x, kernel, stride, padding, reduce, pad_value):
    xp = np.pad(
        x.astype(np.float64),
        [(0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2],
        constant_values=pad_value,
    )
    ho = (xp.shape[2] - kernel[0]) // stride[0] + 1
    wo = (xp.shape[3] - kernel[1]) // stride[1] + 1
    out = np.zeros(x.shape[:2] + (ho, wo))
    for i in range(ho):
        for j in range(wo):
            out[:, :, i, j] = reduce(
                xp[
                    :, :, i * stride[0] : i * stride[0] + kernel[0], j * stride[1] : j * stride[1] + kernel[1]
                ],
                axis=(2, 3),
            )
    return out


@pytest.mark.parametrize(
    "kernel, stride, padding", [(2, None, 0), (3, 1, 1), ((3, 2), (2, 1), (1, 0)), (3, 2, 1), (2, 1, 1)]
)
def test_pooling(rng, kernel, stride, padding):
    x = f32(rng, 2, 3, 7, 6, lo=-5.0, hi=-1.0)  # all negative: a zero-padded max would be wrong
    pair = lambda v: (v, v) if isinstance(v, int) else v
    k, s, p = pair(kernel), pair(kernel if stride is None else stride), pair(padding)
    close(
        run(lambda t: rc.nn.max_pool2d(t, kernel, stride, padding), x),
        pool_oracle(x, k, s, p, np.max, -np.inf),
    )
    close(
        run(lambda t: rc.nn.avg_pool2d(t, kernel, stride, padding), x),
        pool_oracle(x, k, s, p, np.mean, 0.0),
        rtol=1e-5,
    )


def test_embedding(rng):
    table = f32(rng, 10, 4)
    ids = rng.integers(0, 10, (3, 5)).astype(np.int32)
    exact(run(lambda i, t: rc.nn.embedding(i, t), ids, table), table[ids])
    exact(run(lambda i, t: rc.nn.embedding(i.T[::-1], t), ids, table), table[ids.T[::-1]])
    exact(run(lambda i, t: rc.nn.embedding(i, t), ids.astype(np.int64), table), table[ids])
    exact(run(lambda i: i.T, ids), ids.T)
    assert run(lambda i: i.T, ids).dtype == np.int32


def attention_oracle(q, k, v, causal=False, mask=None):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        tq, tk = scores.shape[-2:]
        scores = np.where(np.arange(tk)[None, :] > np.arange(tq)[:, None], -np.inf, scores)
    if mask is not None:
        scores = scores + mask
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("tq, tk", [(5, 5), (3, 6), (6, 4)])
def test_scaled_dot_product_attention(rng, tq, tk):
    q, k, v = f32(rng, 2, tq, 8), f32(rng, 2, tk, 8), f32(rng, 2, tk, 3)
    sdpa = rc.nn.scaled_dot_product_attention
    close(run(lambda a, b, c: sdpa(a, b, c), q, k, v), attention_oracle(q, k, v), rtol=1e-4, atol=1e-5)
    close(
        run(lambda a, b, c: sdpa(a, b, c, causal=True), q, k, v),
        attention_oracle(q, k, v, causal=True),
        rtol=1e-4,
        atol=1e-5,
    )
    mask = np.where(rng.random((tq, tk)) < 0.3, -1e9, 0.0).astype(np.float32)
    mask[:, 0] = 0.0  # every query sees at least one key
    close(
        run(lambda a, b, c, m: sdpa(a, b, c, mask=m), q, k, v, mask),
        attention_oracle(q, k, v, mask=mask),
        rtol=1e-4,
        atol=1e-5,
    )


def test_attention_with_symbolic_lengths(rng):
    q, k, v = rc.input("q", (2, "T", 4)), rc.input("k", (2, "S", 4)), rc.input("v", (2, "S", 4))
    out = rc.nn.scaled_dot_product_attention(q, k, v, causal=True)
    for t, s in [(3, 3), (4, 6)]:
        a, b, c = f32(rng, 2, t, 4), f32(rng, 2, s, 4), f32(rng, 2, s, 4)
        close(
            rc.evaluate(out, {"q": a, "k": b, "v": c}),
            attention_oracle(a, b, c, causal=True),
            rtol=1e-4,
            atol=1e-5,
        )


# --- against PyTorch on the CPU, where installed --------------------------------------------------

@needs_torch
def test_against_torch_layers(rng):
    F = torch.nn.functional
    x, w, b = f32(rng, 2, 4, 9, 8), f32(rng, 6, 2, 3, 3), f32(rng, 6)
    T = torch.from_numpy
    close(
        run(
            lambda x_, w_, b_: rc.nn.conv2d(x_, w_, b_, stride=2, padding=1, dilation=(2, 1), groups=2),
            x,
            w,
            b,
        ),
        F.conv2d(T(x), T(w), T(b), stride=2, padding=1, dilation=(2, 1), groups=2).numpy(),
        rtol=1e-4,
        atol=1e-5,
    )
    close(run(lambda t: rc.nn.max_pool2d(t, 3, 2, 1), x), F.max_pool2d(T(x), 3, 2, 1).numpy())
    close(
        run(lambda t: rc.nn.avg_pool2d(t, (2, 3), 1, (1, 1)), x),
        F.avg_pool2d(T(x), (2, 3), 1, (1, 1)).numpy(),
        rtol=1e-5,
    )
    h, g, bb = f32(rng, 3, 16), f32(rng, 16), f32(rng, 16)
    close(
        run(lambda t, g_, b_: rc.nn.layer_norm(t, g_, b_), h, g, bb),
        F.layer_norm(T(h), (16,), T(g), T(bb)).numpy(),
        rtol=1e-4,
        atol=1e-5,
    )
    close(
        run(lambda t: t.gelu(approximate="tanh"), h),
        F.gelu(T(h), approximate="tanh").numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
    close(run(lambda t: t.silu(), h), F.silu(T(h)).numpy(), rtol=1e-5, atol=1e-6)
    close(run(lambda t: t.var(-1, correction=1), h), T(h).var(-1).numpy(), rtol=1e-5)
    close(run(lambda t: t.log_softmax(0), h), F.log_softmax(T(h), 0).numpy(), rtol=1e-5, atol=1e-6)
    lw, lb = f32(rng, 5, 16), f32(rng, 5)
    close(
        run(lambda t, w_, b_: rc.nn.linear(t, w_, b_), h, lw, lb),
        F.linear(T(h), T(lw), T(lb)).numpy(),
        rtol=1e-5,
        atol=1e-5,
    )


@needs_torch
def test_attention_against_torch(rng):
    F = torch.nn.functional
    q, k, v = f32(rng, 2, 2, 5, 8), f32(rng, 2, 2, 7, 8), f32(rng, 2, 2, 7, 4)
    T = torch.from_numpy
    sdpa = rc.nn.scaled_dot_product_attention
    close(run(lambda a, b, c: sdpa(a, b, c, causal=True), q, k, v),
          F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=True).numpy(), rtol=1e-4, atol=1e-5)
    mask = np.where(rng.random((5, 7)) < 0.4, -np.inf, 0.0).astype(np.float32)
    mask[:, 0] = 0.0
    close(run(lambda a, b, c, m: sdpa(a, b, c, mask=m), q, k, v, mask),
          F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=T(mask)).numpy(), rtol=1e-4, atol=1e-5)
