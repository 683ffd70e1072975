"""A GPT-2-style pre-norm decoder block built from refcomp ops, with symbolic batch B and length T.

    x = x + attn(ln_1(x))          causal multi-head self-attention, 4 heads of 32
    x = x + mlp(ln_2(x))           Linear(D, 4D) -> GELU (tanh form) -> Linear(4D, D)

Weights use GPT-2's Conv1D layout (in_features, out_features), so each projection is `x @ W + b`.
`build_block()` returns the output tensor and the weight arrays (fixed seed); the block's only
other input is `x` of shape (B, T, D). One `rc.compile` serves every (B, T).

Run as a script it compiles once, prints the kernels, and checks the program against the
independent float64 NumPy implementation `numpy_block` at T = 1, 7 and 64:

    python examples/gpt2_block.py [--backend emulator|pycuda|numpy] [--batch 2]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import refcomp as rc  # noqa: E402

D_MODEL = 128
N_HEADS = 4
D_HEAD = D_MODEL // N_HEADS
D_MLP = 4 * D_MODEL
LN_EPS = 1e-5
SEED = 0


def make_weights(d_model: int = D_MODEL, seed: int = SEED) -> dict[str, np.ndarray]:
    """GPT-2-like initialisation (std 0.02, LayerNorm gains near 1) from a fixed seed, float32."""
    rng = np.random.default_rng(seed)
    d_mlp = 4 * d_model

    def normal(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    return {
        "ln_1.weight": (1.0 + normal(d_model, std=0.1)),
        "ln_1.bias": normal(d_model, std=0.1),
        "attn.c_attn.weight": normal(d_model, 3 * d_model, std=0.2),
        "attn.c_attn.bias": normal(3 * d_model),
        "attn.c_proj.weight": normal(d_model, d_model, std=0.1),
        "attn.c_proj.bias": normal(d_model),
        "ln_2.weight": (1.0 + normal(d_model, std=0.1)),
        "ln_2.bias": normal(d_model, std=0.1),
        "mlp.c_fc.weight": normal(d_model, d_mlp, std=0.1),
        "mlp.c_fc.bias": normal(d_mlp),
        "mlp.c_proj.weight": normal(d_mlp, d_model, std=0.05),
        "mlp.c_proj.bias": normal(d_model),
    }


def block(x, w, n_heads: int = N_HEADS):
    """The block on tensor `x` (B, T, D) with weight tensors `w` (a dict of rc inputs)."""
    B, T, D = x.shape
    dh = D // n_heads

    def heads(t):  # (B, T, D) -> (B, H, T, dh)
        return t.reshape(B, T, n_heads, dh).permute(0, 2, 1, 3)

    h = rc.nn.layer_norm(x, w["ln_1.weight"], w["ln_1.bias"], eps=LN_EPS)
    qkv = h @ w["attn.c_attn.weight"] + w["attn.c_attn.bias"]  # (B, T, 3D)
    q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
    att = rc.nn.scaled_dot_product_attention(heads(q), heads(k), heads(v), causal=True)
    att = att.permute(0, 2, 1, 3).reshape(B, T, D)
    x = x + (att @ w["attn.c_proj.weight"] + w["attn.c_proj.bias"])

    h = rc.nn.layer_norm(x, w["ln_2.weight"], w["ln_2.bias"], eps=LN_EPS)
    h = (h @ w["mlp.c_fc.weight"] + w["mlp.c_fc.bias"]).gelu(approximate="tanh")
    return x + (h @ w["mlp.c_proj.weight"] + w["mlp.c_proj.bias"])


def build_block(d_model: int = D_MODEL, n_heads: int = N_HEADS, seed: int = SEED):
    """(output tensor of shape (B, T, D), weight arrays by input name). Feed `x` plus the weights."""
    weights = make_weights(d_model, seed)
    x = rc.input("x", ("B", "T", d_model))
    w = {name: rc.input(name, a.shape) for name, a in weights.items()}
    return block(x, w, n_heads), weights


def numpy_block(x: np.ndarray, weights: dict[str, np.ndarray], n_heads: int = N_HEADS) -> np.ndarray:
    """The same block written directly in NumPy, in float64 (the independent check)."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    x = x.astype(np.float64)
    B, T, D = x.shape
    dh = D // n_heads

    def ln(t, g, b):
        mu = t.mean(-1, keepdims=True)
        var = ((t - mu) ** 2).mean(-1, keepdims=True)
        return (t - mu) / np.sqrt(var + LN_EPS) * g + b

    h = ln(x, w["ln_1.weight"], w["ln_1.bias"])
    qkv = h @ w["attn.c_attn.weight"] + w["attn.c_attn.bias"]
    q, k, v = (qkv[..., i * D:(i + 1) * D].reshape(B, T, n_heads, dh).transpose(0, 2, 1, 3) for i in range(3))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    att = (p @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    x = x + att @ w["attn.c_proj.weight"] + w["attn.c_proj.bias"]
    h = ln(x, w["ln_2.weight"], w["ln_2.bias"]) @ w["mlp.c_fc.weight"] + w["mlp.c_fc.bias"]
    h = 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
    return x + h @ w["mlp.c_proj.weight"] + w["mlp.c_proj.bias"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend", default=None, help="emulator, pycuda or numpy (default: rc's default backend)"
    )
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args(argv)
    if args.backend is None:
        from refcomp.exec.backends import default_backend
        args.backend = default_backend()

    out, weights = build_block()
    start = time.perf_counter()
    prog = rc.compile(out)
    print(f"compiled in {time.perf_counter() - start:.2f} s: {len(prog.kernels)} kernels")
    for k in prog.kernels:
        print(f"  {k.name:<28} {k.kind:<12} {k.launch.mode}")

    # --- hook for the lead: modeled bytes and predicted H200 time from the search cost model ---
    if hasattr(prog, "cost_summary"):
        print(prog.cost_summary())

    rng = np.random.default_rng(1)
    worst = 0.0
    for T in (1, 7, 64):
        x = rng.standard_normal((args.batch, T, D_MODEL)).astype(np.float32)
        feeds = {"x": x, **weights}
        start = time.perf_counter()
        got = prog.run(feeds, backend=args.backend)
        elapsed = time.perf_counter() - start
        err = float(np.abs(got - numpy_block(x, weights)).max())
        worst = max(worst, err)
        print(
            f"B={args.batch} T={T:<3d} backend={args.backend}: max abs error vs NumPy float64 {err:.2e}  "
            f"({elapsed * 1e3:.1f} ms)"
        )
    return 0 if worst < 2e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
