"""A layer norm's statistics computed by the matmul kernel that stores its rows (search/row_stats.py,
templates/matmul_row_stats.cu.j2): the residual stream r + x @ w1 + b1, then layer_norm, then a second
matmul, as a transformer block at decode's few rows. Checked against NumPy written directly (float64)
on the emulator, at bindings with partial tiles, for every template variant (K split across blocks
or threads, both tiles); the memory model's counts against the profiler's; bounds under the
sanitizer; nvcc for sm_90; and the ticket left at zero for the next launch."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.exec.emulator import EmulatorBackend
from refcomp.codegen.statistics import row_statistics
from refcomp.exec.profile import model_disagreements
from refcomp.ops.nn import layer_norm
from refcomp.search.evaluate import Evaluator
from norm_block import EPS, block as _block, feeds as _feeds, want as _want
from fusion_checks import (ROW_END_VARIANTS, launch_split_twice, reparametrised, sanitized_run,
                           saved_and_loaded, variants_build_with_nvcc)


def _check(prog, rows, d, f, seed=0):
    feeds = _feeds(rows, d, f, seed)
    got = prog.run(feeds, backend="emulator")["y"]
    np.testing.assert_allclose(got, _want(feeds), **golden.FLOAT32_TOLERANCE)


def _carrying(prog):
    return [k for k in prog.kernels if k.row_stats]


@pytest.fixture(scope="module")
def small():
    """d = 200 (N tiles of 16 and 32 end part-full), f = 300, priced at 32 rows."""
    outputs = _block(200, 300)
    return outputs, rc.compile(outputs, dims_hint={"B": 32}, cache=False)


def test_the_matmul_storing_the_rows_computes_their_statistics(small):
    """Before: the second matmul's every block reduced its rows again in its prologue. After: the
    first matmul stores r + x @ w1 + b1 and its rows' sum and sum of squared deviations, which the
    second reads."""
    outputs, prog = small
    (kernel,) = _carrying(prog)
    total, squares = kernel.row_stats
    assert [n.op.name for n in kernel.row_stats] == ["SumReduce", "SumReduce"] and kernel.kind == "matmul"
    assert "its rows' statistics" in str(kernel.launch) and "Chan" in kernel.source
    reader = prog.kernels[-1]
    assert {total.id, squares.id} <= {n.id for n in reader.reads}
    assert "row reduction(s) before the tiles" not in reader.source
    assert len(prog.kernels) == 2 and any(s.rule == "carry_row_stats" for s in prog.search.trace)
    before = rc.compile(outputs, dims_hint={"B": 32}, cache=False, search=True)  # the same: deterministic
    assert before.source == prog.source
    for rows in (32, 1, 17, 40):  # one and several row tiles, the last part-full
        _check(prog, rows, 200, 300, seed=rows)


@pytest.mark.parametrize("rows", [32, 33])
def test_the_memory_model_counts_what_the_profiler_counts(small, rows):
    _, prog = small
    assert model_disagreements(prog, prog.profile(_feeds(rows, 200, 300))) == []


def test_a_layer_norm_row_kernel_goes_too():
    """GPT-2's sizes at 32 rows: the layer norm was a row kernel of its own between the two matmuls."""
    outputs = _block(768, 3072)
    prog = rc.compile(outputs, dims_hint={"B": 32}, cache=False)
    assert [k.kind for k in prog.kernels] == ["matmul", "matmul"] and len(_carrying(prog)) == 1
    _check(prog, 32, 768, 3072, seed=3)
    _check(prog, 5, 768, 3072, seed=4)
    assert model_disagreements(prog, prog.profile(_feeds(32, 768, 3072))) == []


@pytest.mark.parametrize("tile,splits,slices", ROW_END_VARIANTS)
def test_every_template_variant_computes_the_statistics(small, tile, splits, slices):
    prog, kernel = reparametrised(*small, _carrying, tile=tile, splits=splits, slices=slices)
    assert (kernel.launch.block, kernel.launch.splits, kernel.launch.slices) == (tile, splits, slices)
    for rows in (33, 2):
        _check(prog, rows, 200, 300, seed=tile + splits + rows)
    assert model_disagreements(prog, prog.profile(_feeds(33, 200, 300))) == []


def test_the_tickets_are_zero_again_for_the_next_launch(small):
    """Launched twice on the same buffers (as exec.timing and a CUDA graph launch), the second launch
    merges its own partials: the row ticket was reset by the tile that drew the last one."""
    prog, kernel = reparametrised(*small, _carrying, splits=4)
    feeds = _feeds(40, 200, 300, seed=9)
    assert kernel.launch.row_scratch(prog.bind(feeds)[1])[1] == 3  # three rows of tiles' tickets
    launch_split_twice(EmulatorBackend(), prog, kernel, feeds, {"y": _want(feeds)})


@pytest.mark.parametrize("splits", [1, 4])
def test_every_access_stays_in_its_buffers(small, splits):
    prog, _ = reparametrised(*small, _carrying, splits=splits)
    feeds = _feeds(17, 200, 300, seed=11)
    np.testing.assert_allclose(sanitized_run(prog, feeds)["y"], _want(feeds), **golden.FLOAT32_TOLERANCE)


def test_the_kernels_build_with_nvcc(small):
    variants_build_with_nvcc(*small, _carrying)


def test_a_saved_program_loads_with_the_statistics(small, tmp_path):
    _, prog = small
    loaded = saved_and_loaded(prog, tmp_path / "p.json")
    assert [len(k.row_stats) for k in loaded.kernels] == [2, 0]
    feeds = _feeds(9, 200, 300, seed=5)
    np.testing.assert_array_equal(loaded.run(feeds, backend="emulator")["y"],
                                  prog.run(feeds, backend="emulator")["y"])


def test_statistics_along_the_matmuls_rows_stay_where_they_were():
    """Normalised along the product's M axis (its transpose's last), the rows a tile stores are not
    the rows reduced: no kernel takes the statistics, and the values are the reference's."""
    x, w = rc.input("x", (32, 64)), rc.input("w", (64, 48))
    y = layer_norm((x @ w).T, (32,), None, None, EPS) @ rc.input("v", (32, 40))
    prog = rc.compile(y, cache=False)
    assert not _carrying(prog)
    rng = np.random.default_rng(1)
    feeds = {name: rng.standard_normal(shape).astype(np.float32)
             for name, shape in (("x", (32, 64)), ("w", (64, 48)), ("v", (32, 40)))}
    h = (feeds["x"].astype(np.float64) @ feeds["w"]).T
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + EPS)
    got = prog.run(feeds, backend="emulator")
    np.testing.assert_allclose(got, h @ feeds["v"], **golden.FLOAT32_TOLERANCE)


def test_a_schedule_naming_statistics_of_an_input_row_is_no_partition():
    """The decision is honoured only where the row is a matmul kernel's output: a layer norm of an
    input has no kernel to take its statistics (search.row_stats.with_row_stats)."""
    x = rc.input("x", ("B", 64))
    prog = rc.compile(layer_norm(x, (64,)) @ rc.input("w", (64, 8)), dims_hint={"B": 4}, cache=False)
    result = prog.search
    (stats,) = [row_statistics(n) for n in result.graph.compute if row_statistics(n) is not None]
    forced = result.schedule.decide(row_stats={stats.total.id, stats.squares.id})
    assert Evaluator(result.graph, result.bindings, result.profile).partition(forced) is None
