"""The GPT-2-style block (examples/gpt2_block.py): one compile, emulator at T = 1, 7 and 64 (B = 2)
against an independent float64 NumPy implementation written here."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import refcomp as rc

try:
    from examples.gpt2_block import D_MODEL, LN_EPS, N_HEADS, build_block
except ModuleNotFoundError:  # plain `pytest` with refcomp installed: examples/ is not a package on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.gpt2_block import D_MODEL, LN_EPS, N_HEADS, build_block

ATOL, RTOL = 2e-4, 1e-3


def reference_block(x, w):
    """Pre-norm GPT-2 block in float64: x + attn(ln_1(x)); x + mlp(ln_2(x)); causal, tanh GELU."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    x = x.astype(np.float64)
    B, T, D = x.shape
    H, dh = N_HEADS, D // N_HEADS

    def layer_norm(t, g, b):
        mu = t.mean(-1, keepdims=True)
        return (t - mu) / np.sqrt(t.var(-1, keepdims=True) + LN_EPS) * g + b

    def split(t):
        return t.reshape(B, T, H, dh).swapaxes(1, 2)

    h = layer_norm(x, w["ln_1.weight"], w["ln_1.bias"])
    q, k, v = np.split(h @ w["attn.c_attn.weight"] + w["attn.c_attn.bias"], 3, axis=-1)
    q, k, v = split(q), split(k), split(v)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(dh)
    s = s + np.triu(np.full((T, T), -np.inf), k=1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    a = np.einsum("bhqk,bhkd->bhqd", p, v).swapaxes(1, 2).reshape(B, T, D)
    x = x + a @ w["attn.c_proj.weight"] + w["attn.c_proj.bias"]
    f = layer_norm(x, w["ln_2.weight"], w["ln_2.bias"]) @ w["mlp.c_fc.weight"] + w["mlp.c_fc.bias"]
    f = 0.5 * f * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (f + 0.044715 * f ** 3)))
    return x + f @ w["mlp.c_proj.weight"] + w["mlp.c_proj.bias"]


@pytest.fixture(scope="module")
def block():
    out, weights = build_block()
    assert out.shape[-1] == D_MODEL
    return rc.compile(out), weights


@pytest.mark.parametrize("T", [1, 7, 64])
def test_gpt2_block_matches_numpy(block, T):
    prog, weights = block  # the same Program object for every T
    x = np.random.default_rng(T).standard_normal((2, T, D_MODEL)).astype(np.float32)
    got = prog.run({"x": x, **weights}, backend="emulator")
    want = reference_block(x, weights)
    assert got.shape == (2, T, D_MODEL)
    print(f"\nT={T}: max abs error {np.abs(got - want).max():.2e}")
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


def test_gpt2_block_causal(block):
    """Changing the last position must not change any earlier position's output."""
    prog, weights = block
    x = np.random.default_rng(5).standard_normal((1, 7, D_MODEL)).astype(np.float32)
    y = x.copy()
    y[:, -1] += 1.0
    a = prog.run({"x": x, **weights}, backend="emulator")
    b = prog.run({"x": y, **weights}, backend="emulator")
    np.testing.assert_array_equal(a[:, :-1], b[:, :-1])
    assert np.abs(a[:, -1] - b[:, -1]).max() > 1e-3
