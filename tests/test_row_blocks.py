"""Reductions and rows of 512 or 1,024 threads a block (`block`, schedule.KERNEL_PARAMS).

A decode step's layer norm has 32 rows of 768: one block of 256 threads a row is 8,192 threads, 3 % of
an H200, each thread walking three values of its row. Blocks of 512 halve the walk and double the
threads. The search offers the larger blocks only where the device is not full and the reduced axis
gives each thread a value. Checked here: the values against NumPy on the emulator, the memory model's
counts against the profiler's, nvcc, and where the search takes them.
"""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.exec.profile import model_disagreements
from refcomp.pipeline.assemble import program_for_schedule


def _layer_norm(width: int):
    x, g, b = rc.input("x", ("B", width)), rc.input("g", (width,)), rc.input("b", (width,))
    return rc.nn.layer_norm(x, (width,), g, b)


def _feeds(rows: int, width: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return {"x": (3 * rng.standard_normal((rows, width)) + 1).astype(np.float32),
            "g": rng.standard_normal(width).astype(np.float32),
            "b": rng.standard_normal(width).astype(np.float32)}


def _want(feeds):
    f = {k: v.astype(np.float64) for k, v in feeds.items()}
    x = f["x"]
    return (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * f["g"] + f["b"]


def _with_block(y, dims, block):
    result = rc.compile(y, dims_hint=dims, cache=False).search
    params = {(g.root.id, "block"): block for g in result.groups if g.kind in ("row", "reduce")}
    return program_for_schedule(y, result, result.schedule.with_params(params))


@pytest.mark.parametrize("block,width", [(512, 768), (1024, 1000), (512, 1000)])
def test_a_row_kernel_of_a_large_block_matches_numpy_and_the_profiler(block, width):
    y = _layer_norm(width)
    prog = _with_block(y, {"B": 32}, block)
    (row,) = [k for k in prog.kernels if k.kind == "row"]
    assert row.launch.block == block
    feeds = _feeds(5, width, seed=width)
    np.testing.assert_allclose(prog.run(feeds, backend="emulator"), _want(feeds), **golden.FLOAT32_TOLERANCE)
    assert model_disagreements(prog, prog.profile(feeds)) == []


@pytest.mark.parametrize("strategy", ["block", "columns"])
def test_a_reduction_of_a_large_block_matches_numpy_and_the_profiler(strategy):
    x = rc.input("x", (6, 5000))
    y = x.sum(-1) if strategy == "block" else x.sum(0)
    result = rc.compile(y, cache=False).search
    (group,) = [g for g in result.groups if g.kind == "reduce"]
    params = {(group.root.id, "block"): 1024, (group.root.id, "strategy"): strategy}
    prog = program_for_schedule(y, result, result.schedule.with_params(params))
    (kernel,) = prog.kernels
    assert kernel.launch.block == 1024
    feeds = {"x": np.random.default_rng(3).standard_normal((6, 5000)).astype(np.float32)}
    want = feeds["x"].astype(np.float64).sum(-1 if strategy == "block" else 0)
    np.testing.assert_allclose(prog.run(feeds, backend="emulator"), want, **golden.FLOAT32_TOLERANCE)
    assert model_disagreements(prog, prog.profile(feeds)) == []


def test_large_blocks_build_with_nvcc():
    from refcomp.exec.nvcc import nvcc_available, nvcc_check

    prog = _with_block(_layer_norm(768), {"B": 32}, 512)
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}


def test_the_search_takes_a_larger_block_only_for_few_long_rows():
    """32 rows of 768: blocks of 512 (1,024 would leave 256 threads of each row idle), cheaper under
    the model than 256; 4,096 rows fill the device at 256; rows of 300 give 512 threads no value each."""
    few = rc.compile(_layer_norm(768), dims_hint={"B": 32}, cache=False)
    (row,) = [k for k in few.kernels if k.kind == "row"]
    assert row.launch.block == 512
    assert few.cost.time_s < _with_block(_layer_norm(768), {"B": 32}, 256).cost.time_s
    many = rc.compile(_layer_norm(768), dims_hint={"B": 4096}, cache=False)
    assert all(k.launch.block <= 256 for k in many.kernels)
    short = rc.compile(_layer_norm(300), dims_hint={"B": 32}, cache=False)
    assert all(k.launch.block <= 256 for k in short.kernels)
