"""The GPT-2 block of examples/gpt2_block.py written in tinygrad, timed under TinyJit on its CPU device.

emulator_bench.py times it in the same process as refcomp's emulator, so both sides share the
machine's load: the ratio is the comparison, not either figure alone. Each timed call goes from
NumPy in to NumPy out, as `prog.run` does (the input copied in, the output copied back), with the
weights resident as device tensors (the emulator uploads them on every run, which only counts
against it). tinygrad is an optional bench dependency (`pip install -e .[bench]`); its CPU device
compiles with clang.
"""
from __future__ import annotations

import gc
import math
import statistics
import time

import numpy as np


def available() -> str | None:
    """None if tinygrad can run here, else the reason it cannot (to print and skip)."""
    try:
        from tinygrad import Tensor
    except ImportError:
        return "tinygrad is not installed (pip install -e .[bench])"
    try:
        (Tensor.ones(2, 2, device="CPU").contiguous() @ Tensor.ones(2, 2, device="CPU")).numpy()
    except Exception as exc:  # noqa: BLE001 - any failure to start its device means "skip, and say why"
        return f"tinygrad's CPU device does not run here ({type(exc).__name__}: {exc}; it needs clang)"
    return None


def gpt2_block_fn(weights: dict[str, np.ndarray], n_heads: int, eps: float):
    """The block as a TinyJit function of x (B, T, D), closing over the weights as device tensors."""
    from tinygrad import Tensor, TinyJit
    w = {k: Tensor(v, device="CPU").realize() for k, v in weights.items()}

    def layer_norm(t, gain, bias):
        return t.layernorm(axis=-1, eps=eps) * gain + bias

    @TinyJit
    def run(x):
        B, T, D = x.shape
        dh = D // n_heads

        def heads(t):  # (B, T, D) -> (B, H, T, dh)
            return t.reshape(B, T, n_heads, dh).permute(0, 2, 1, 3)

        h = layer_norm(x, w["ln_1.weight"], w["ln_1.bias"])
        qkv = h @ w["attn.c_attn.weight"] + w["attn.c_attn.bias"]
        q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
        att = heads(q).scaled_dot_product_attention(heads(k), heads(v), is_causal=True)
        att = att.permute(0, 2, 1, 3).reshape(B, T, D)
        x = x + (att @ w["attn.c_proj.weight"] + w["attn.c_proj.bias"])
        h = layer_norm(x, w["ln_2.weight"], w["ln_2.bias"])
        h = (h @ w["mlp.c_fc.weight"] + w["mlp.c_fc.bias"]).gelu(approximate="tanh")
        return (x + (h @ w["mlp.c_proj.weight"] + w["mlp.c_proj.bias"])).realize()

    return run


def side_by_side(emulator_run, x: np.ndarray, weights: dict[str, np.ndarray], n_heads: int, eps: float,
                 repeats: int) -> dict:
    """Medians of the emulator's warm run and tinygrad's, taken in turns so that both see the same
    load (each call after a garbage collection, with the collector off while it runs, as timeit
    does), with tinygrad timed two ways: NumPy in and out as `prog.run` is (`tinygrad_s`), and the
    JIT call alone on an input already on its device (`tinygrad_jit_s`), the smaller figure.
    `emulator_run()` returns the emulator's output, which tinygrad's must match within float32
    rounding."""
    from tinygrad import Device, Tensor
    run = gpt2_block_fn(weights, n_heads, eps)
    start = time.perf_counter()
    for _ in range(3):  # TinyJit captures on the second call and replays from the third
        out = run(Tensor(x, device="CPU")).numpy()
    warmup = time.perf_counter() - start
    resident = Tensor(x, device="CPU").realize()
    times: dict[str, list[float]] = {"emulator_s": [], "tinygrad_s": [], "tinygrad_jit_s": []}

    def timed(what: str, fn):
        gc.collect()  # as timeit does, so that neither side pays for the other's garbage
        gc.disable()
        try:
            start = time.perf_counter()
            result = fn()
            times[what].append(time.perf_counter() - start)
        finally:
            gc.enable()
        return result

    for _ in range(repeats):
        got = timed("emulator_s", emulator_run)
        out = timed("tinygrad_s", lambda: run(Tensor(x, device="CPU")).numpy())
        timed("tinygrad_jit_s", lambda: (run(resident), Device["CPU"].synchronize()))
    got = np.asarray(got, np.float32)
    diff = float(np.abs(out.astype(np.float64) - got).max())
    entry = {k: statistics.median(v) for k, v in times.items()}
    entry.update(repeats=repeats, tinygrad_warmup_s=warmup, max_abs_diff_vs_tinygrad=diff,
                 matches_tinygrad=bool(np.allclose(out, got, rtol=1e-4, atol=1e-4)) and math.isfinite(diff),
                 vs_tinygrad=entry["emulator_s"] / entry["tinygrad_s"],
                 vs_tinygrad_jit=entry["emulator_s"] / entry["tinygrad_jit_s"])
    return entry
