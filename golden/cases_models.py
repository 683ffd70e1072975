"""Model-ish golden cases: small networks with symbolic batch / sequence dims."""
from __future__ import annotations

import numpy as np

import refcomp as rc

from .cases_common import (
    attention,
    case,
    conv2d,
    f64,
    gelu_tanh,
    ids,
    layer_norm,
    log_softmax,
    normal,
    rms_norm,
    sigmoid,
    softmax,
)

T = ("model",)
BT = ({"B": 2, "T": 5}, {"B": 1, "T": 9})


def _weights(rng, shapes):
    """Weights scaled by 1/sqrt(fan_in) so activations stay O(1) through the layers."""
    return {k: normal(rng, s, scale=1.0 / np.sqrt(s[-1]) if len(s) > 1 else 0.1) for k, s in shapes.items()}


# --- MLP 32-64-10 --------------------------------------------------------------------------------
MLP = {"w1": (64, 32), "b1": (64,), "w2": (10, 64), "b2": (10,)}


def _mlp_build():
    x = rc.input("x", ("B", 32))
    h = rc.nn.linear(x, rc.input("w1", MLP["w1"]), rc.input("b1", MLP["b1"])).relu()
    logits = rc.nn.linear(h, rc.input("w2", MLP["w2"]), rc.input("b2", MLP["b2"]))
    return {"logits": logits, "probs": logits.softmax(-1)}


def _mlp_np(f):
    x, w1, b1, w2, b2 = f64(f, "x", "w1", "b1", "w2", "b2")
    h = np.maximum(x @ w1.T + b1, 0.0)
    logits = h @ w2.T + b2
    return {"logits": logits, "probs": softmax(logits)}


# --- conv block: conv2d + relu + max_pool2d, then a linear head -------------------------------------
def _conv_build():
    x = rc.input("x", ("N", 3, 8, 8))
    y = rc.nn.conv2d(x, rc.input("w", (4, 3, 3, 3)), rc.input("b", (4,)), padding=1).relu()
    pooled = rc.nn.max_pool2d(y, 2)
    n = x.shape[0]
    return {"features": pooled, "scores": rc.nn.linear(pooled.reshape(n, 64), rc.input("head", (5, 64)))}


def _conv_np(f):
    x, w, b, head = f64(f, "x", "w", "b", "head")
    y = np.maximum(conv2d(x, w, b, padding=1), 0.0)
    n = x.shape[0]
    pooled = np.zeros((n, 4, 4, 4))
    for i in range(4):
        for j in range(4):
            pooled[:, :, i, j] = y[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2].max(axis=(2, 3))
    return {"features": pooled, "scores": pooled.reshape(n, 64) @ head.T}


# --- pre-norm residual MLP block ------------------------------------------------------------------
PRENORM = {"g": (16,), "beta": (16,), "w1": (32, 16), "b1": (32,), "w2": (16, 32), "b2": (16,)}


def _prenorm_build():
    x = rc.input("x", ("B", "T", 16))
    p = {k: rc.input(k, s) for k, s in PRENORM.items()}
    h = rc.nn.layer_norm(x, p["g"], p["beta"])
    h = rc.nn.linear(rc.nn.linear(h, p["w1"], p["b1"]).gelu(approximate="tanh"), p["w2"], p["b2"])
    return {"y": x + h}


def _prenorm_np(f):
    x, g, beta, w1, b1, w2, b2 = f64(f, "x", *PRENORM)
    h = layer_norm(x, g, beta)
    return {"y": x + (gelu_tanh(h @ w1.T + b1) @ w2.T + b2)}


# --- causal multi-head self-attention block ------------------------------------------------------
ATTN = {"wq": (16, 16), "wk": (16, 16), "wv": (16, 16), "wo": (16, 16), "bq": (16,), "bo": (16,)}
HEADS, HEAD_DIM = 2, 8


def _heads(t):
    b, s, _ = t.shape
    return t.reshape(b, s, HEADS, HEAD_DIM).permute(0, 2, 1, 3)


def _attn_build():
    x = rc.input("x", ("B", "T", 16))
    p = {k: rc.input(k, s) for k, s in ATTN.items()}
    q = _heads(rc.nn.linear(x, p["wq"], p["bq"]))
    k = _heads(rc.nn.linear(x, p["wk"]))
    v = _heads(rc.nn.linear(x, p["wv"]))
    o = rc.nn.scaled_dot_product_attention(q, k, v, causal=True)
    merged = o.permute(0, 2, 1, 3).reshape("B", "T", 16)
    return {"y": rc.nn.linear(merged, p["wo"], p["bo"])}


def _attn_np(f):
    x, wq, wk, wv, wo, bq, bo = f64(f, "x", *ATTN)
    b, t, _ = x.shape

    def heads(a):
        return a.reshape(b, t, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)

    o = attention(heads(x @ wq.T + bq), heads(x @ wk.T), heads(x @ wv.T), causal=True)
    return {"y": o.transpose(0, 2, 1, 3).reshape(b, t, 16) @ wo.T + bo}


# --- a tiny decoder: embedding, rms-norm attention and a SiLU MLP, log-softmax over the vocabulary ---
DEC = {"table": (20, 16), "n1": (16,), "wq": (16, 16), "wk": (16, 16), "wv": (16, 16), "wo": (16, 16),
       "n2": (16,), "up": (32, 16), "down": (16, 32), "lm": (20, 16)}


def _decoder_build():
    tokens = rc.input("ids", ("B", "T"), "int32")
    p = {k: rc.input(k, s) for k, s in DEC.items()}
    x = rc.nn.embedding(tokens, p["table"])
    h = rc.nn.rms_norm(x, p["n1"])
    q, k, v = (_heads(rc.nn.linear(h, p[w])) for w in ("wq", "wk", "wv"))
    o = rc.nn.scaled_dot_product_attention(q, k, v, causal=True).permute(0, 2, 1, 3).reshape("B", "T", 16)
    x = x + rc.nn.linear(o, p["wo"])
    x = x + rc.nn.linear(rc.nn.linear(rc.nn.rms_norm(x, p["n2"]), p["up"]).silu(), p["down"])
    return {"logprobs": rc.nn.linear(x, p["lm"]).log_softmax(-1)}


def _decoder_np(f):
    t = f["ids"]
    table, n1, wq, wk, wv, wo, n2, up, down, lm = f64(f, *DEC)
    b, s = t.shape
    x = table[t]
    h = rms_norm(x, n1)

    def heads(a):
        return a.reshape(b, s, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)

    o = (
        attention(heads(h @ wq.T), heads(h @ wk.T), heads(h @ wv.T), causal=True)
        .transpose(0, 2, 1, 3)
        .reshape(b, s, 16)
    )
    x = x + o @ wo.T
    u = rms_norm(x, n2) @ up.T
    x = x + (u * sigmoid(u)) @ down.T
    return {"logprobs": log_softmax(x @ lm.T, -1)}


def _decoder_inputs(rng, b):
    feeds = _weights(rng, DEC)
    feeds["table"] = normal(rng, DEC["table"])
    for k in ("n1", "n2"):
        feeds[k] = normal(rng, (16,), scale=0.2, shift=1.0)
    feeds["ids"] = ids(rng, 20, ("B", "T"), b)
    return feeds


CASES = [
    case(
        "model_mlp",
        build=_mlp_build,
        make_inputs=lambda rng, b: {"x": normal(rng, ("B", 32), b)} | _weights(rng, MLP),
        oracle=_mlp_np,
        bindings=({"B": 3}, {"B": 8}),
        tags=T,
    ),
    case(
        "model_conv_block",
        build=_conv_build,
        make_inputs=lambda rng, b: {
            "x": normal(rng, ("N", 3, 8, 8), b),
            "w": normal(rng, (4, 3, 3, 3), scale=0.3),
            "b": normal(rng, (4,), scale=0.1),
            "head": normal(rng, (5, 64), scale=0.125),
        },
        oracle=_conv_np,
        bindings=({"N": 1}, {"N": 3}),
        tags=T,
    ),
    case(
        "model_prenorm_residual",
        build=_prenorm_build,
        make_inputs=lambda rng, b: {"x": normal(rng, ("B", "T", 16), b)} | _weights(rng, PRENORM),
        oracle=_prenorm_np,
        bindings=BT,
        tags=T,
    ),
    case(
        "model_causal_attention",
        build=_attn_build,
        make_inputs=lambda rng, b: {"x": normal(rng, ("B", "T", 16), b)} | _weights(rng, ATTN),
        oracle=_attn_np,
        bindings=BT,
        tags=T,
    ),
    case(
        "model_tiny_decoder",
        build=_decoder_build,
        make_inputs=_decoder_inputs,
        oracle=_decoder_np,
        bindings=({"B": 2, "T": 4}, {"B": 1, "T": 7}),
        tags=T,
    ),
]
