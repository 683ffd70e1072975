"""The "columns" reduction strategy and the L2 model by reuse distance (issue 30's decode step).

A sum over an outer axis (split-K's partial sums, paged attention's sum over pages) read by a block
per output walks memory 32 sectors a request; a thread per output reads it coalesced but fills a tenth
of the device. A block per 32 neighbouring outputs, a warp's lanes across them, does both. Checked
here against NumPy written directly, against the profiler's counts, and with nvcc; the search takes
it for the column sums of the decode step.
"""
import numpy as np
import pytest

import refcomp as rc
from refcomp.exec.profile import model_disagreements
from refcomp.pipeline.assemble import program_for_schedule
from refcomp.search.cost import H200, dram_bytes

REDUCTIONS = {
    "sum": (lambda z: z.sum(0), lambda a: a.astype(np.float64).sum(0)),
    "amax_exp": (lambda z: (z.amax(0) + 1.0).exp(), lambda a: np.exp(a.astype(np.float64).max(0) + 1.0)),
    "inner_axis": (lambda z: z.sum(2), lambda a: a.astype(np.float64).sum(2)),
    "int64": (lambda z: (z * 10).long().sum(0),
              lambda a: np.trunc(a * np.float32(10)).astype(np.int64).sum(0)),
    "float64": (lambda z: z.double().sum(0) * 2, lambda a: a.astype(np.float64).sum(0) * 2),
}


def _with_strategy(out, strategy, block, dims):
    result = rc.compile(out, dims_hint=dims, cache=False).search
    reduces = [g.root.id for g in result.groups if g.kind == "reduce"]
    assert reduces
    params = {(r, "strategy"): strategy for r in reduces} | {(r, "block"): block for r in reduces}
    return program_for_schedule(out, result, result.schedule.with_params(params))


@pytest.mark.parametrize("block", [256, 128])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_columns_reductions_match_numpy_and_the_profiler(name, block):
    build, want = REDUCTIONS[name]
    z = rc.input("z", (37, "B", 45))
    prog = _with_strategy(build(z), "columns", block, {"B": 3})
    assert "columns" in [k.launch.mode for k in prog.kernels]
    a = (np.random.default_rng(1).standard_normal((37, 3, 45)) * 3).astype(np.float32)
    got = prog.run({"z": a}, backend="emulator")
    np.testing.assert_allclose(np.asarray(got, np.float64), want(a), rtol=1e-5, atol=1e-5)
    assert model_disagreements(prog, prog.profile({"z": a})) == []


def test_columns_kernels_build_with_nvcc():
    from refcomp.exec.nvcc import nvcc_available, nvcc_check
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    z = rc.input("z", (37, "B", 45))
    for name in ("sum", "int64"):
        prog = _with_strategy(REDUCTIONS[name][0](z), "columns", 256, {"B": 3})
        assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}


def test_the_search_takes_columns_for_a_sum_over_an_outer_axis():
    """48 partial sums of (B, 768) rows, as split-K leaves them: a block per output reads 32 sectors a
    request (8x the bytes through L2), a thread per output fills 9% of the device."""
    x = rc.input("x", (48, "B", 768))
    prog = rc.compile(x.sum(0), dims_hint={"B": 32}, cache=False)
    (kernel,) = prog.kernels
    assert kernel.launch.mode == "columns"
    result = prog.search
    times = {s: _with_strategy(x.sum(0), s, 256, {"B": 32}).kernels[0].cost.time_s
             for s in ("thread", "block", "columns")}
    assert times["columns"] == min(times.values()) < times["block"] < times["thread"]
    assert kernel.cost.l2_bytes == 4 * (48 + 1) * 32 * 768  # each value read once, each sum stored once
    assert result is not None


def test_tune_tries_a_matmuls_parameters_together():
    """GPT-2's LM head at batch 32: the 32-wide tile is dearer than the 16-wide one until B's loads walk
    K; tuned one parameter at a time the search kept the narrow tile."""
    x, w = rc.input("x", ("B", 768)), rc.input("w", (50257, 768))
    prog = rc.compile(x @ w.T, dims_hint={"B": 32}, cache=False)
    result = prog.search
    (group,) = result.groups
    times = {}
    for tile in (16, 32):
        for along_k in (False, True):
            params = {(group.root.id, "tile"): tile, (group.root.id, "b_along_k"): along_k}
            sched = result.schedule.with_params(params)
            times[tile, along_k] = program_for_schedule(x @ w.T, result, sched).kernels[0].cost.time_s
    assert prog.kernels[0].cost.time_s == pytest.approx(min(times.values()), rel=1e-6)
    assert min(times.values()) < min(times[16, False], times[32, False])


def test_l2_model_keeps_a_small_table_every_warp_reads():
    """A 100 MB stream and an 8 KB table each warp consults (25 MB of requests): the table's re-reads
    hit. One buffer alone keeps the whole-kernel rule F + (R - F)(1 - S / F)."""
    S = H200.l2_bytes
    moved = {"in0": 100e6, "in1": 25e6, "out0": 1e6}
    sizes = {"in0": 100e6, "in1": 8e3, "out0": 1e6}
    assert dram_bytes(moved, sizes, H200) == pytest.approx(100e6 + 8e3 + 1e6)
    F, R = 200e6, 600e6
    assert dram_bytes({"in0": R}, {"in0": F}, H200) == pytest.approx(F + (R - F) * (1 - S / F))
    assert dram_bytes({"in0": 30e6}, {"in0": 10e6}, H200) == pytest.approx(10e6)  # fits: re-reads hit
    assert dram_bytes({"in0": 5e6}, {"in0": 10e6}, H200) == pytest.approx(5e6)  # half read: what it reads
