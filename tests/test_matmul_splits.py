"""Split-K in one kernel: a plain matmul with K split across blocks (`splits`, matmul.cu.j2 and
matmul_split.cu.j2). Each of a tile's blocks sums its share of K's tiles and stores its partial sums
(ws0); the last to draw a ticket (ws1) adds them in split order, applies the epilogue and stores C.

A decode step's matmuls have 1 to 32 rows: unsplit, GPT-2's MLP output at 32 rows has 96 blocks for
an H200's 132 SMs. Checked here against NumPy in float64 on the emulator, for schedules that set the
split (with K in slices, a ragged last tile, splits left with no K, a batch, an epilogue, a layer
norm's statistics in the prologue); the tickets back at zero for the next launch, under the
sanitizer; the memory model's counts against the profiler's; nvcc; and the search splitting a
decode step's matmuls where the model says it pays, in one kernel where a graph split took two.
"""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.exec.profile import model_disagreements
from refcomp.pipeline.assemble import program_for_schedule
from refcomp.search import evaluate

from fusion_checks import forced_schedule, launch_split_twice


def _program(y, dims, rules=None, **params):
    """The searched program for `y` with `params` set on its matmul kernel (after `rules` forced, if
    given), and that kernel."""
    if rules:
        result, sched, _ = forced_schedule(y, rules)
    else:
        result = rc.compile(y, dims_hint=dims, cache=False).search
        sched = result.schedule
    groups = evaluate.Evaluator(result.graph, result.bindings, result.profile).partition(sched)
    (root,) = [r for r, g in groups.items() if g.kind == "matmul"]
    prog = program_for_schedule(y, result, sched.with_params({(root, k): v for k, v in params.items()}))
    (kernel,) = [k for k in prog.kernels if k.kind == "matmul"]
    return prog, kernel


def _dense(rows, k, n, batch=()):
    """relu(x @ w + b): an epilogue after the splits' sum."""
    x, w, b = rc.input("x", batch + (rows, k)), rc.input("w", (k, n)), rc.input("b", (n,))
    return (x @ w + b).relu()


def _dense_feeds(rng, rows, k, n, batch=()):
    return {"x": rng.standard_normal(batch + (rows, k)).astype(np.float32),
            "w": (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32),
            "b": rng.standard_normal(n).astype(np.float32)}


def _dense_want(feeds):
    f = {k: v.astype(np.float64) for k, v in feeds.items()}
    return np.maximum(f["x"] @ f["w"] + f["b"], 0)


@pytest.mark.parametrize("rows,k,n,splits,slices,tile,batch", [
    ("B", 768, 160, 4, 1, 16, ()),  # whole tiles in every split
    ("B", 100, 40, 4, 4, 16, ()),  # a ragged last tile; slices within each split's share
    ("B", 40, 24, 16, 1, 16, ()),  # 3 tiles of K in 16 splits: 13 splits store zeros
    (3, 3000, 70, 16, 4, 16, (2,)),  # a long K (compensated sums), a batch of 2 (blockIdx.z)
    ("B", 300, 40, 3, 1, 32, ()),  # tiles of 32, a split count that is no power of two
])
def test_split_matmuls_match_numpy_and_the_profiler(rows, k, n, splits, slices, tile, batch):
    y = _dense(rows, k, n, batch)
    prog, kernel = _program(y, {"B": 32} if rows == "B" else None, splits=splits, slices=slices, tile=tile)
    assert (kernel.launch.splits, kernel.launch.slices) == (splits, slices)
    assert "K split across" in kernel.source
    rng = np.random.default_rng(k + splits)
    feeds = _dense_feeds(rng, 5 if rows == "B" else rows, k, n, batch)
    np.testing.assert_allclose(prog.run(feeds, backend="emulator"), _dense_want(feeds),
                               **golden.FLOAT32_TOLERANCE)
    assert model_disagreements(prog, prog.profile(feeds)) == []


@pytest.mark.parametrize("pair", [False, True])
def test_every_split_block_computes_the_prologues_row_statistics(pair):
    """A layer norm's mean and variance in the matmul's prologue (two reductions, or one Welford pass):
    each of a tile's split blocks computes them over the whole row, then sums its share of K."""
    x, w = rc.input("x", (3, 768)), rc.input("w", (768, 100))
    y = rc.nn.layer_norm(x, (768,)) @ w
    rules = ["matmul", "fuse_elementwise", "prologue_reduce"] + (["one_pass_statistics"] if pair else [])
    prog, kernel = _program(y, None, rules=rules, splits=4)
    assert kernel.plan.prologue_phases and kernel.launch.splits == 4
    rng = np.random.default_rng(8)
    feeds = {"x": rng.standard_normal((3, 768)).astype(np.float32),
             "w": (rng.standard_normal((768, 100)) / 28).astype(np.float32)}
    f = {key: v.astype(np.float64) for key, v in feeds.items()}
    h = (f["x"] - f["x"].mean(1, keepdims=True)) / np.sqrt(f["x"].var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(prog.run(feeds, backend="emulator"), h @ f["w"], **golden.FLOAT32_TOLERANCE)
    assert model_disagreements(prog, prog.profile(feeds)) == []


def test_a_prologue_reads_its_rows_through_a_reshape_that_drops_a_unit_axis():
    """A decode step's last layer norm: over (B, 1, D), read by the LM head through a reshape to (B, D).
    The prologue indexes the statistics at (row, 0); before, code generation refused it ("does not
    reduce the rows") and GPT-2's decode step at batch 1 kept two reduction kernels before the head."""
    x, w = rc.input("x", ("B", 1, 300)), rc.input("w", (300, 40))
    y = rc.nn.layer_norm(x, (300,)).reshape(("B", 300)) @ w
    prog, kernel = _program(y, None, rules=["matmul", "fuse_elementwise", "prologue_reduce"], splits=4)
    assert kernel.plan.prologue_phases == 2 and len(prog.kernels) == 1
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal((3, 1, 300)).astype(np.float32),
             "w": (rng.standard_normal((300, 40)) / 17).astype(np.float32)}
    f = {key: v.astype(np.float64) for key, v in feeds.items()}
    h = (f["x"] - f["x"].mean(-1, keepdims=True)) / np.sqrt(f["x"].var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(prog.run(feeds, backend="emulator"), h.reshape(3, 300) @ f["w"],
                               **golden.FLOAT32_TOLERANCE)
    assert model_disagreements(prog, prog.profile(feeds)) == []


def launch_twice(be, splits: int, seed: int) -> None:
    """A split matmul's program launched twice on backend `be` into the same buffers: after each run
    every ticket is back at 0 (the second run adds the partials again) and the values are NumPy's."""
    prog, kernel = _program(_dense("B", 1000, 70), {"B": 32}, splits=splits, slices=4)
    feeds = _dense_feeds(np.random.default_rng(seed), 7, 1000, 70)
    launch_split_twice(be, prog, kernel, feeds, _dense_want(feeds))


def test_the_tickets_return_to_zero_and_the_partials_stay_in_their_buffers():
    from refcomp.exec.emulator import EmulatorBackend

    launch_twice(EmulatorBackend(sanitize=True), splits=16, seed=1)  # every access bounds-checked


def test_a_plain_split_kernel_needs_no_room_for_an_online_softmaxs_m_and_l():
    prog, kernel = _program(_dense("B", 768, 160), {"B": 32}, splits=4)
    assert kernel.launch.scratch({"B": 5}) == (4 * 5 * 160, 10)  # partials; one ticket per N tile


def test_split_matmuls_build_with_nvcc():
    from refcomp.exec.nvcc import nvcc_available, nvcc_check

    prog, _ = _program(_dense("B", 768, 160), {"B": 32}, splits=16, slices=4)
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}


def _mlp_output():
    """GPT-2's MLP output in a decode step: (h @ W + b) + r, h of 3,072 columns a row."""
    h, w = rc.input("h", ("B", 3072)), rc.input("w", (3072, 768))
    b, r = rc.input("b", (768,)), rc.input("r", ("B", 768))
    return h @ w + b + r


def test_the_search_splits_a_decode_steps_matmul_in_one_kernel(monkeypatch):
    """At 32 rows the MLP output's 96 tiles leave the H200 mostly idle: the search splits K across
    blocks, one kernel with its bias and residual, cheaper under the model than K in slices alone
    (13.4 us before) and than the graph's split (a kernel of chunks, then their sum: what the search
    takes when blocks may not split, monkeypatched here). At 1,024 rows the tiles fill the device."""
    y = _mlp_output()
    prog = rc.compile(y, dims_hint={"B": 32}, cache=False)
    (kernel,) = prog.kernels
    assert kernel.launch.splits > 1 and not any(s.rule == "split_k" for s in prog.search.trace)
    rng = np.random.default_rng(6)
    feeds = {"h": rng.standard_normal((9, 3072)).astype(np.float32),
             "w": (rng.standard_normal((3072, 768)) / 55).astype(np.float32),
             "b": rng.standard_normal(768).astype(np.float32),
             "r": rng.standard_normal((9, 768)).astype(np.float32)}
    f = {key: v.astype(np.float64) for key, v in feeds.items()}
    np.testing.assert_allclose(prog.run(feeds, backend="emulator"), f["h"] @ f["w"] + f["b"] + f["r"],
                               **golden.FLOAT32_TOLERANCE)
    monkeypatch.setitem(evaluate.TAKEN_BY_ONLINE, "splits", (True,))  # only an online softmax splits
    unsplit = rc.compile(y, dims_hint={"B": 32}, cache=False)
    assert all(k.launch.splits == 1 for k in unsplit.kernels)
    assert prog.cost.time_s < 0.75 * unsplit.cost.time_s, (prog.cost_summary(), unsplit.cost_summary())
    monkeypatch.undo()
    wide = rc.compile(y, dims_hint={"B": 1024}, cache=False)
    assert all(k.launch.splits == 1 for k in wide.kernels)
