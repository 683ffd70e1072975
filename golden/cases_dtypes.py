"""Golden cases with float16 and bfloat16 storage: inputs, weights, intermediates and outputs held in
16 bits, computed in float32 between roundings (refcomp/ops/dtypes.py).

Each oracle rounds at exactly the places the graph's dtypes say, with its own rounding functions:
float16 by NumPy's conversion, bfloat16 by rounding the float64 significand to 8 bits (ties to
even). The cases are compared at golden.STORAGE_TOLERANCE (a rounding may land one unit in the last
place away when float32 and float64 evaluation differ in their last bits).
"""
from __future__ import annotations

import math

import numpy as np

import refcomp as rc
from refcomp.golden import GoldenCase

from .cases_common import attention, conv2d, f64, layer_norm, normal, softmax

T = ("dtype",)


def f16(x):
    """Round to float16's values (NumPy's conversion: to nearest, ties to even; past 65504, inf)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


def bf16(x):
    """Round to bfloat16's values: 8 significant bits, ties to even (normal range only, as here)."""
    mantissa, exponent = np.frexp(np.asarray(x, dtype=np.float64))
    return np.ldexp(np.round(mantissa * 256.0) / 256.0, exponent)


def _case(name, storage, build, shapes, oracle, bindings=({},), scale=None):
    def make_inputs(rng, binding):
        return {
            k: normal(rng, tuple(binding.get(d, d) for d in s), scale=(scale or {}).get(k, 1.0))
            for k, s in shapes.items()
        }

    return GoldenCase(
        name=name,
        build=build,
        make_inputs=make_inputs,
        oracle=oracle,
        bindings=tuple(bindings),
        tags=T + (("symbolic",) if any(bindings) else ()),
        storage=storage,
    )


def _half_mlp():
    x, w1, b1, w2 = (
        rc.input(n, s, "float16")
        for n, s in (("x", ("B", 16)), ("w1", (16, 12)), ("b1", (12,)), ("w2", (12, 5)))
    )
    return {"y": ((x @ w1 + b1).relu() @ w2)}


def _half_mlp_oracle(f):
    x, w1, b1, w2 = (f16(a) for a in f64(f, "x", "w1", "b1", "w2"))
    return {"y": f16(np.maximum(f16(f16(x @ w1) + b1), 0.0) @ w2)}


def _bf16_attention():
    q, k, v = (rc.input(n, (2, 6, 8), "bfloat16") for n in "qkv")
    scores = (q @ k.transpose(-1, -2)).float() * (1.0 / math.sqrt(8))  # bfloat16 scores, softmax in float32
    causal = rc.full((6, 6), float("-inf")).triu(1)
    return {"y": (scores + causal).softmax(-1).bfloat16() @ v}


def _bf16_attention_oracle(f):
    q, k, v = (bf16(a) for a in f64(f, "q", "k", "v"))
    scores = bf16(q @ np.swapaxes(k, -1, -2)) / math.sqrt(8)
    blocked = np.arange(6)[None, :] > np.arange(6)[:, None]
    return {"y": bf16(bf16(softmax(np.where(blocked, -np.inf, scores))) @ v)}


def _mixed():
    """float32 in; a float16 and a bfloat16 branch; their sum promotes to float32."""
    x = rc.input("x", (4, 9))
    half = (x.half().exp() * 0.5).sum(-1, keepdims=True)  # float16 at every step
    brain = x.bfloat16().tanh()
    return {"half": half, "mixed": half + brain, "back": x.half().float() - x}


def _mixed_oracle(f):
    x = f64(f, "x")
    half = f16(np.sum(f16(f16(np.exp(f16(x))) * 0.5), axis=-1, keepdims=True))
    return {"half": half, "mixed": half + bf16(np.tanh(bf16(x))), "back": f16(x) - x}


def _half_conv():
    x, w, b = (
        rc.input("x", (1, 3, 7, 7), "float16"),
        rc.input("w", (4, 3, 3, 3), "float16"),
        rc.input("b", (4,), "float16"),
    )
    return {"y": rc.nn.conv2d(x, w, b, padding=1)}


def _half_conv_oracle(f):
    x, w, b = (f16(a) for a in f64(f, "x", "w", "b"))
    return {"y": f16(f16(conv2d(x, w, padding=1)) + b[None, :, None, None])}


def _half_layer_norm():
    x = rc.input("x", ("T", 32), "float16")
    w, b = rc.input("w", (32,), "float16"), rc.input("b", (32,), "float16")
    return {"y": rc.nn.layer_norm(x.float(), w.float(), b.float()).half()}  # statistics in float32


def _half_layer_norm_oracle(f):
    x, w, b = (f16(a) for a in f64(f, "x", "w", "b"))
    return {"y": f16(layer_norm(x, w, b))}


def _bf16_sdpa():
    q, k, v = (rc.input(n, (1, 2, 5, 8), "bfloat16") for n in "qkv")
    return {
        "y": rc.nn.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).bfloat16()
    }


def _bf16_sdpa_oracle(f):
    q, k, v = (bf16(a) for a in f64(f, "q", "k", "v"))
    return {"y": bf16(attention(q, k, v, causal=True))}


CASES = [
    _case(
        "half_mlp",
        "float16",
        _half_mlp,
        {"x": ("B", 16), "w1": (16, 12), "b1": (12,), "w2": (12, 5)},
        _half_mlp_oracle,
        bindings=({"B": 3}, {"B": 8}),
        scale={"w1": 0.3, "w2": 0.3},
    ),
    _case(
        "bf16_attention", "bfloat16", _bf16_attention, {n: (2, 6, 8) for n in "qkv"}, _bf16_attention_oracle
    ),
    _case("mixed_storage", "bfloat16", _mixed, {"x": (4, 9)}, _mixed_oracle),
    _case(
        "half_conv",
        "float16",
        _half_conv,
        {"x": (1, 3, 7, 7), "w": (4, 3, 3, 3), "b": (4,)},
        _half_conv_oracle,
        scale={"w": 0.3},
    ),
    _case(
        "half_layer_norm",
        "float16",
        _half_layer_norm,
        {"x": ("T", 32), "w": (32,), "b": (32,)},
        _half_layer_norm_oracle,
        bindings=({"T": 3}, {"T": 7}),
    ),
    _case("bf16_sdpa", "bfloat16", _bf16_sdpa, {n: (1, 2, 5, 8) for n in "qkv"}, _bf16_sdpa_oracle),
]
