"""Long sums on the emulator stay within a few float32 ulps of the exact sum (codegen/sums.py).

A thread that adds tens of thousands of values in sequence drifts: the mean of 10**7 copies of 0.1
came out 0.1000374 (a block of 256 threads, 39,063 values each). Each test feeds values whose plain
sequential sum drifts like that, runs every template and strategy that can take the sum, and
compares with the exact sum of the float32 inputs (math.fsum, or the float64 reference).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import refcomp as rc
from refcomp.codegen.sums import SERIAL_SUM_LIMIT, long_chain
from refcomp.pipeline.assemble import program_for_schedule
from refcomp.ops.graph import toposort

from fusion_checks import forced

ULP = float(np.finfo(np.float32).eps)  # 2**-23: a float32 ulp at 1, relative
N = 10 ** 7
TENTHS = np.full(N, 0.1, np.float32)


def _relative_error(got, want) -> float:
    return abs(float(np.asarray(got)) - want) / abs(want)


def _with_params(outputs, params: dict):
    """The searched program of `outputs` with kernel parameters `params` (name -> value) on every kernel."""
    result = rc.compile(outputs, cache=False).search
    sched = result.schedule.with_params(
        {(n.id, name): value for n in result.graph.compute for name, value in params.items()}
    )
    return program_for_schedule(outputs, result, sched)


def test_the_limit():
    assert not long_chain(SERIAL_SUM_LIMIT) and long_chain(SERIAL_SUM_LIMIT + 1)
    assert not long_chain(256 * SERIAL_SUM_LIMIT, 256) and long_chain(256 * SERIAL_SUM_LIMIT + 1, 256)
    assert long_chain(rc.input("x", ("T",)).shape[0])  # a symbolic extent may be long


@pytest.mark.parametrize("how", ["search", "plain", "thread", "block", "block 128"])
@pytest.mark.parametrize("what", ["mean", "sum"])
def test_ten_million_tenths(what, how):
    """Every strategy the search can pick for one long sum, and the plain lowering's."""
    x = rc.input("x", (N,))
    outputs = {"y": getattr(x, what)()}
    if how in ("search", "plain"):
        program = rc.compile(outputs, search=how == "search", cache=False)
    else:
        strategy, _, block = how.partition(" ")
        program = _with_params(outputs, {"strategy": strategy, "block": int(block or 256)})
        assert program.kernels[0].launch.mode == (
            "grid_stride" if strategy == "thread" else "block_per_output"
        )
    assert "rc_sum_add(" in program.source
    exact = math.fsum(TENTHS.astype(np.float64)) / (N if what == "mean" else 1)
    got = program.run({"x": TENTHS}, backend="emulator")["y"]
    assert _relative_error(got, exact) <= 4 * ULP, (how, float(got), exact)


def test_long_rows(monkeypatch):
    """A row kernel (x - mean(x), one block per row) over rows of 2**21 values, each row a constant
    plus a small ramp: the centred values are exact to a few ulps of the row's mean, and the same
    bits on any number of emulator threads."""
    rows, extent = 3, 2 ** 21
    x = rc.input("x", (rows, extent))
    outputs = {"centred": x - x.mean(-1, keepdims=True)}
    values = (0.1 * np.arange(1, rows + 1)[:, None] + 1e-3 * np.linspace(0, 1, extent)[None, :]).astype(
        np.float32
    )
    program = forced(outputs, ["fuse_elementwise", "row_fuse"])[0]
    assert "row" in {k.kind for k in program.kernels} and "rc_sum_add(" in program.source
    want = rc.evaluate(outputs, {"x": values}, precision="float64")
    runs = []
    for workers in ("1", "2"):
        monkeypatch.setenv("REFCOMP_EMU_THREADS", workers)
        runs.append(program.run({"x": values}, backend="emulator"))
    np.testing.assert_array_equal(runs[0]["centred"], runs[1]["centred"])
    means = values.astype(np.float64).mean(-1, keepdims=True)
    assert np.all(np.abs(runs[0]["centred"] - want["centred"]) <= 4 * ULP * means)


def test_tiled_templates(monkeypatch):
    """The tiled matmul's K loop, its prologue's row statistics (two passes and Welford's one) and
    the online softmax's running sums, each over 2**14 values: a tile's sum is plain, the tiles'
    sums are compensated. These contractions are skinny (256 outputs), so the search would split
    their K into chunks (tests/test_split_k.py); here K stays whole, to reach the templates' loops."""
    from refcomp.search import search as search_module
    monkeypatch.setattr(search_module, "split_skinny", lambda edges, *args: (edges, []))
    rng = np.random.default_rng(0)
    m, k, n, depth = 16, 2 ** 14, 16, 8
    a, b, h, sel = (
        rc.input(name, shape)
        for name, shape in (("a", (m, k)), ("b", (k, n)), ("h", (m, k)), ("sel", (k, n)))
    )
    q, keys, values = rc.input("q", (m, depth)), rc.input("keys", (k, depth)), rc.input("values", (k, n))
    cycle = np.array([0.05, 0.0, -0.05], np.float32)[np.arange(k) % 3]  # a period prime to the tile's stride
    feeds = {"a": np.full((m, k), 0.1, np.float32), "b": np.ones((k, n), np.float32),
             "h": (0.1 + cycle[None, :] + rng.uniform(0, 1e-3, (m, k))).astype(np.float32),
             "sel": np.repeat((np.arange(k) % 3 == 0).astype(np.float32)[:, None], n, axis=1),
             "q": np.zeros((m, depth), np.float32), "keys": rng.uniform(-1, 1, (k, depth)).astype(np.float32),
             "values": np.full((k, n), 0.1, np.float32)}  # equal scores: every weight is 1, the output 0.1
    cases = [
        ("matmul", {"y": a @ b}, ["matmul"], "matmul tile"),
        (
            "rms_norm",
            {"y": rc.nn.rms_norm(h) @ b},
            ["matmul", "fuse_elementwise", "prologue_reduce"],
            "before the tiles",
        ),
        (
            "layer_norm",
            {"y": rc.nn.layer_norm(h) @ sel},
            ["matmul", "fuse_elementwise", "prologue_reduce", "one_pass_statistics"],
            "pair(s) in one pass",
        ),
        (
            "attention",
            {"y": (q @ keys.T).softmax(-1) @ values},
            ["matmul", "online_softmax", "fuse_elementwise"],
            "softmax computed online",
        ),
    ]
    for name, outputs, rules, mark in cases:
        program, _ = forced(outputs, rules)
        assert mark in program.source and "rc_sum_add(" in program.source, name
        own = {
            n.attrs["name"]: feeds[n.attrs["name"]]
            for n in toposort([outputs["y"].node])
            if n.op.name == "Input"
        }
        got = program.run(own, backend="emulator")["y"]
        want = rc.evaluate(outputs, own, precision="float64")["y"]
        error = np.max(np.abs(got - want) / np.abs(want))
        assert error <= 8 * ULP, (name, error)
