"""A Scatter carried by the matmul that computes its rows (search/carry.py): a decode step's keys and
values are columns of the q/k/v projection, and the projection's kernel writes them into the KV
pool as it stores them, instead of a Scatter kernel after it.

Checked against NumPy (float64) on the emulator: the written rows, every other row of the table
untouched, the matmul's own output; plain and split across blocks; the memory model's counts
against the profiler's; ids refused before any launch; the cases that must keep the Scatter's own
kernel (rows that are not columns of the output, a matmul that reads the table it would write); a
saved program; nvcc.
"""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.errors import FeedError
from refcomp.exec.profile import model_disagreements
from refcomp.pipeline.assemble import program_for_schedule
from fusion_checks import sanitized_run

ROWS, D_IN, Q, KV, TABLE = "B", 40, 24, 32, 50


def _kv_step():
    """q/k/v = x @ w + b; columns Q .. Q + KV are this step's rows of the table, written at `slots`."""
    x, w, b = rc.input("x", (ROWS, D_IN)), rc.input("w", (D_IN, Q + KV)), rc.input("b", (Q + KV,))
    pool, slots = rc.input("pool", (TABLE, KV)), rc.input("slots", (ROWS,), "int32")
    qkv = x @ w + b
    return {"q": qkv[:, :Q] * 2.0, "pool": pool.index_copy(0, slots, qkv[:, Q:])}


def _feeds(rows, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((rows, D_IN)).astype(np.float32),
        "w": (rng.standard_normal((D_IN, Q + KV)) / np.sqrt(D_IN)).astype(np.float32),
        "b": rng.standard_normal(Q + KV).astype(np.float32),
        "pool": np.arange(TABLE * KV, dtype=np.float32).reshape(TABLE, KV) + 0.5,  # every row its own
        "slots": rng.permutation(TABLE)[:rows].astype(np.int32),
    }


def _want(feeds):
    f = {k: v.astype(np.float64) for k, v in feeds.items() if k != "slots"}
    qkv = f["x"] @ f["w"] + f["b"]
    pool = f["pool"].copy()
    pool[feeds["slots"]] = qkv[:, Q:]
    return qkv[:, :Q] * 2.0, pool


def _check(prog, feeds):
    got = prog.run(feeds, backend="emulator")
    q, pool = _want(feeds)
    np.testing.assert_allclose(got["q"], q, **golden.FLOAT32_TOLERANCE)
    written = feeds["slots"]
    np.testing.assert_allclose(got["pool"][written], pool[written], **golden.FLOAT32_TOLERANCE)
    others = np.setdiff1d(np.arange(TABLE), written)
    np.testing.assert_array_equal(got["pool"][others], feeds["pool"][others])  # bit for bit


def _carrying(prog):
    return [k for k in prog.kernels if k.carried]


def test_the_qkv_matmul_writes_the_rows_into_the_table_and_no_scatter_kernel_runs():
    prog = rc.compile(_kv_step(), dims_hint={"B": 4}, cache=False)
    (kernel,) = _carrying(prog)
    assert kernel.kind == "matmul" and "scatter" not in [k.kind for k in prog.kernels]
    assert kernel.carried[0].op.name == "Scatter" and "-> out1" in kernel.source
    step = prog.search.trace[-1]  # explain() shows the fold, its kernel count and time
    assert step.rule == "carry_scatters" and step.kernels == len(prog.kernels) and "Scatter" in step.site
    for rows in (1, 4, 7):
        _check(prog, _feeds(rows, seed=rows))
    feeds = _feeds(4)
    assert model_disagreements(prog, prog.profile(feeds)) == []


def test_it_saves_a_launch_under_the_model():
    """The same program with the Scatter in a kernel of its own (the search's groups before carrying)
    costs one launch more, and the carrying kernel's extra bytes are the rows and their ids."""
    prog = rc.compile(_kv_step(), dims_hint={"B": 4}, cache=False)
    (kernel,) = _carrying(prog)
    alone = rc.compile(_kv_step(), dims_hint={"B": 4}, cache=False, search=False)
    assert len(prog.kernels) < len(alone.kernels)
    assert kernel.cost.bytes >= 4 * (4 * KV + 4)  # at least the rows it writes and the ids it reads


@pytest.mark.parametrize("splits,slices", [(4, 1), (3, 2), (1, 4)])
def test_split_and_sliced_matmuls_carry_the_rows_too(splits, slices):
    """K split across blocks (the last block stores C and the rows) or across a block's threads."""
    outs = _kv_step()
    base = rc.compile(outs, dims_hint={"B": 4}, cache=False)
    (kernel,) = _carrying(base)
    root = kernel.output.id
    params = {(root, "splits"): splits, (root, "slices"): slices, (root, "tile"): 16}
    prog = program_for_schedule(outs, base.search, base.search.schedule.with_params(params))
    (kernel,) = _carrying(prog)
    assert (kernel.launch.splits, kernel.launch.slices) == (splits, slices)
    for rows in (3, 5):
        _check(prog, _feeds(rows, seed=10 + rows))
    assert model_disagreements(prog, prog.profile(_feeds(5))) == []


@pytest.mark.parametrize("slots,words", [([0, 50, 2], "50"), ([3, 3, 1], "distinct"), ([-1, 2, 4], "-1")])
def test_ids_outside_the_table_or_repeated_are_refused_before_any_launch(slots, words):
    prog = rc.compile(_kv_step(), dims_hint={"B": 4}, cache=False)
    assert _carrying(prog)
    feeds = _feeds(3)
    feeds["slots"] = np.array(slots, np.int32)
    before = feeds["pool"].copy()
    with pytest.raises(FeedError, match=words):
        prog.run(feeds, backend="emulator")
    np.testing.assert_array_equal(feeds["pool"], before)


def test_rows_that_are_not_columns_of_the_output_keep_the_scatter_kernel():
    """Rows read through a transpose of the product (row k is a column of it) are no column range."""
    x, w = rc.input("x", (KV, D_IN)), rc.input("w", (D_IN, 6))
    pool, slots = rc.input("pool", (TABLE, KV)), rc.input("slots", (6,), "int32")
    y = pool.index_copy(0, slots, (x @ w).transpose(0, 1))
    prog = rc.compile(y, cache=False)
    assert not _carrying(prog) and "scatter" in [k.kind for k in prog.kernels]
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((KV, D_IN)).astype(np.float32),
             "w": rng.standard_normal((D_IN, 6)).astype(np.float32),
             "pool": rng.standard_normal((TABLE, KV)).astype(np.float32),
             "slots": np.array([7, 0, 49, 3, 12, 30], np.int32)}
    want = feeds["pool"].astype(np.float64).copy()
    want[feeds["slots"]] = (feeds["x"].astype(np.float64) @ feeds["w"]).T
    np.testing.assert_allclose(prog.run(feeds, backend="emulator"), want, **golden.FLOAT32_TOLERANCE)


def test_a_kernel_that_reads_the_table_before_the_scatter_keeps_the_scatter_its_own_kernel():
    """Carrying moves the table's write back to the matmul's launch: a kernel from there up to the
    Scatter that read the table (the matmul looking up rows of the old pool, say) would see new rows.
    The search's groups for the decode-like step, carried as they are, and with the matmul's group
    made to read the pool: then the Scatter keeps its kernel."""
    from dataclasses import replace

    from refcomp.search.carry import carry_scatters
    from refcomp.search.evaluate import Evaluator

    prog = rc.compile(_kv_step(), dims_hint={"B": 4}, cache=False)
    result = prog.search
    ev = Evaluator(result.graph, result.bindings, result.profile)
    found = ev.partition(result.schedule)
    groups = [found[n.id] for n in result.graph.compute if n.id in found]
    costs = [ev.cost(result.schedule, g) for g in groups]
    carried, _ = carry_scatters(groups, costs, result.schedule, result.profile)
    assert len(carried) == len(groups) - 1 and sum(len(g.carried) for g in carried) == 1
    (scatter,) = [g.root for g in groups if g.kind == "scatter"]
    pool = scatter.srcs[0].node
    at = next(k for k, g in enumerate(groups) if g.kind == "matmul")
    reading = groups[:at] + [replace(groups[at], reads=groups[at].reads + (pool,))] + groups[at + 1:]
    kept, kept_costs = carry_scatters(reading, costs, result.schedule, result.profile)
    assert kept == reading and kept_costs == costs


def test_a_saved_program_loads_with_the_carried_scatter(tmp_path):
    prog = rc.compile(_kv_step(), dims_hint={"B": 4}, cache=False)
    prog.save(tmp_path / "p.json")
    loaded = rc.load_program(tmp_path / "p.json")
    assert [len(k.carried) for k in loaded.kernels] == [len(k.carried) for k in prog.kernels]
    feeds = _feeds(4, seed=8)
    for name, got in loaded.run(feeds, backend="emulator").items():
        np.testing.assert_array_equal(got, prog.run(feeds, backend="emulator")[name])


def test_carrying_kernels_build_with_nvcc():
    from refcomp.exec.nvcc import nvcc_available, nvcc_check
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    outs = _kv_step()
    base = rc.compile(outs, dims_hint={"B": 4}, cache=False)
    root = _carrying(base)[0].output.id
    split = program_for_schedule(outs, base.search, base.search.schedule.with_params({(root, "splits"): 4}))
    for prog in (base, split):
        assert _carrying(prog)
        assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}


@pytest.mark.parametrize("table_first", [True, False])
def test_a_computed_table_is_updated_in_its_slot_and_the_explorer_shows_the_write(table_first):
    """A table the graph computes (the pool scaled) lives in the memory plan. Made before the matmul
    (the outputs listed so), the carrying matmul writes the rows into its slot, which the Scatter's
    node then names (Program.memory_plan), and the explorer draws it as the matmul kernel's; made
    after, it is not ready at the matmul's launch and the Scatter keeps its kernel."""
    x, w, b = rc.input("x", (ROWS, D_IN)), rc.input("w", (D_IN, Q + KV)), rc.input("b", (Q + KV,))
    pool, slots = rc.input("pool", (TABLE, KV)), rc.input("slots", (ROWS,), "int32")
    qkv = x @ w + b
    written = (pool * 2.0).index_copy(0, slots, qkv[:, Q:])
    outs = {"rows": written.sum(-1), "q": qkv[:, :Q] * 2.0}
    prog = rc.compile(outs if table_first else dict(reversed(outs.items())), dims_hint={"B": 4}, cache=False)
    feeds = _feeds(4, seed=21)
    f = {k: v.astype(np.float64) for k, v in feeds.items() if k != "slots"}
    table = f["pool"] * 2.0
    table[feeds["slots"]] = (f["x"] @ f["w"] + f["b"])[:, Q:]
    np.testing.assert_allclose(prog.run(feeds, backend="emulator")["rows"], table.sum(-1),
                               **golden.FLOAT32_TOLERANCE)
    if not table_first:
        assert not _carrying(prog) and "scatter" in [k.kind for k in prog.kernels]
        return
    (kernel,) = _carrying(prog)
    (scatter,) = kernel.carried
    plan = prog.memory_plan({"B": 4})
    assert plan.slot_of[scatter.id] == plan.slot_of[scatter.srcs[0].node.id]
    page = prog.explorer()
    bar = page[page.index(f'class="rc-buffer" data-node="{prog.names.numbers[scatter.id]}"'):]
    assert f"written by {kernel.name}" in bar[:bar.index("</g>")]


@pytest.mark.parametrize("splits", [1, 4])
def test_every_access_of_a_carrying_kernel_stays_in_its_buffers(splits):
    """Under the emulator's sanitizer (every load and store bounds-checked against its buffer), with
    the ids at the table's first and last rows."""
    outs = _kv_step()
    base = rc.compile(outs, dims_hint={"B": 4}, cache=False)
    root = _carrying(base)[0].output.id
    sched = base.search.schedule.with_params({(root, "splits"): splits})
    prog = program_for_schedule(outs, base.search, sched)
    feeds = _feeds(3, seed=30 + splits)
    feeds["slots"] = np.array([TABLE - 1, 0, 17], np.int32)
    got = sanitized_run(prog, feeds)
    q, pool = _want(feeds)
    np.testing.assert_allclose(got["pool"], pool, **golden.FLOAT32_TOLERANCE)
    np.testing.assert_allclose(got["q"], q, **golden.FLOAT32_TOLERANCE)


def _rotated_step():
    """LLaMA's write: the keys rotated (x cos + rotate_half(x) sin) and stacked with the values by an
    elementwise kernel, whose output is the rows of the table: the Scatter is carried by that kernel."""
    k, v = rc.input("k", (ROWS, 2, 8)), rc.input("v", (ROWS, 2, 8))
    cos, sin = rc.input("cos", (ROWS, 1, 8)), rc.input("sin", (ROWS, 1, 8))
    pool, slots = rc.input("pool", (TABLE, 2, 2, 8)), rc.input("slots", (ROWS,), "int32")
    rotated = k * cos + rc.cat([-k[..., 4:], k[..., :4]], -1) * sin
    rows = rc.stack([rotated, v], 1)  # (B, 2, heads, hd)
    return {"pool": rc.serving.write_slots(pool, slots, rows), "v2": v * 2.0}


def _rotated_feeds(rows, seed):
    rng = np.random.default_rng(seed)
    f = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
         (("k", (rows, 2, 8)), ("v", (rows, 2, 8)), ("cos", (rows, 1, 8)), ("sin", (rows, 1, 8)),
          ("pool", (TABLE, 2, 2, 8)))}
    f["slots"] = rng.permutation(TABLE)[:rows].astype(np.int32)
    return f


def test_an_elementwise_kernel_carries_the_scatter_of_its_output():
    prog = rc.compile(_rotated_step(), dims_hint={"B": 4}, cache=False)
    (kernel,) = _carrying(prog)
    assert kernel.kind == "elementwise" and "scatter" not in [k.kind for k in prog.kernels]
    for rows in (1, 4):
        feeds = _rotated_feeds(rows, seed=40 + rows)
        f = {name: value.astype(np.float64) for name, value in feeds.items() if name != "slots"}
        rotated = f["k"] * f["cos"] + np.concatenate([-f["k"][..., 4:], f["k"][..., :4]], -1) * f["sin"]
        want = f["pool"].copy()
        want[feeds["slots"]] = np.stack([rotated, f["v"]], 1)
        got = prog.run(feeds, backend="emulator")
        np.testing.assert_allclose(got["pool"], want, **golden.FLOAT32_TOLERANCE)
        others = np.setdiff1d(np.arange(TABLE), feeds["slots"])
        np.testing.assert_array_equal(got["pool"][others], feeds["pool"][others])
        np.testing.assert_array_equal(got["v2"], feeds["v"] * 2)
    assert model_disagreements(prog, prog.profile(_rotated_feeds(4, seed=50))) == []


def test_an_elementwise_carrier_stays_in_its_buffers_and_builds_with_nvcc():
    from refcomp.exec.nvcc import nvcc_available, nvcc_check

    prog = rc.compile(_rotated_step(), dims_hint={"B": 4}, cache=False)
    feeds = _rotated_feeds(3, seed=51)
    feeds["slots"] = np.array([TABLE - 1, 0, 9], np.int32)
    got, want = sanitized_run(prog, feeds), rc.evaluate(_rotated_step(), feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], **golden.FLOAT32_TOLERANCE)
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}
