"""The search's targets: softmax and layer norm in one kernel, an elementwise chain in one, a
784-256-10 MLP in at most three; incremental partitioning; one-pass statistics (Welford) only where
they do not cancel. Each program also runs on the emulator against the float64 reference.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pytest

import refcomp as rc
from refcomp.search.cost import H200
from refcomp.search.evaluate import Evaluator
from refcomp.search.fusion_rules import FUSION
from refcomp.search.schedule import Schedule

from fusion_checks import RUN_BINDINGS, check_on_emulator


# --- the search's targets --------------------------------------------------------------------------
def _target(outputs, most: int, exactly: Optional[int] = None, bindings=RUN_BINDINGS, scales=None):
    prog = rc.compile(outputs)
    if exactly is not None:
        assert len(prog.kernels) == exactly, prog
    assert len(prog.kernels) <= most, prog
    check_on_emulator(prog, outputs, bindings, scales)
    return prog


def test_softmax_last_axis_is_one_kernel():
    x = rc.input("x", ("B", "T", 37))
    _target({"out": x.softmax(-1)}, 1, 1)


def test_layer_norm_is_one_kernel():
    x = rc.input("x", ("B", 48))
    _target({"out": rc.nn.layer_norm(x, rc.input("g", (48,)), rc.input("b", (48,)))}, 1, 1)


def test_elementwise_chain_is_one_kernel():
    x, y = rc.input("x", ("B", 16)), rc.input("y", (16,))
    _target({"out": (((x * 2.0 + y).sin().exp() + 1.0).sqrt() * x - y).sigmoid()}, 1, 1)


def test_mlp_784_256_10_is_at_most_three_kernels():
    x = rc.input("x", ("B", 784))
    w1, b1 = rc.input("w1", (784, 256)), rc.input("b1", (256,))
    w2, b2 = rc.input("w2", (256, 10)), rc.input("b2", (10,))
    out = (x @ w1 + b1).relu() @ w2 + b2
    scales = {
        "w1": 1 / math.sqrt(784),
        "w2": 1 / math.sqrt(256),
        "b1": 0.1,
        "b2": 0.1,
        "x": 1.0,
    }  # as a trained net
    _target({"out": out}, 3, bindings=[{"B": 2}, {"B": 1}], scales=scales)


def test_incremental_partition_matches_a_full_one():
    """The search prices a move by re-partitioning only the kernels that touch the moved node; after
    a whole greedy descent that must equal partitioning the final schedule from scratch."""
    from refcomp.codegen.lower import materialise_outputs
    from refcomp import fuzz
    from refcomp.search.cost import binding_for
    from refcomp.search.fusion import Graph
    from refcomp.search.moves import descend, moves_of
    descended = 0
    for index in range(10):
        outputs = fuzz.generate(7, index).build("")
        graph = Graph(materialise_outputs(list(outputs.values())))
        ev = Evaluator(graph, binding_for(graph.nodes, None), H200)
        sched = Schedule()
        groups = ev.partition(sched)
        cost = ev.total(sched, groups)
        moves = moves_of(graph, ev, sched, groups, cost, set(), FUSION, math.inf)
        result = descend(graph, ev, sched, cost, groups, [], moves, set(), math.inf)
        if result is None:
            continue
        descended += 1
        cost, sched, groups, _ = result
        fresh = ev.partition(sched)
        shape = lambda gs: {k: (g.root.id, g.members, g.reads, g.kind) for k, g in gs.items()}
        assert shape(groups) == shape(fresh)
        assert cost == pytest.approx(ev.total(sched, fresh), rel=1e-9, abs=1e-15)
    assert descended >= 5


def test_one_pass_statistics_do_not_cancel(monkeypatch):
    """Rows of mean 1000 and unit spread: the sum of squares minus the squared sum would lose every
    digit of the variance in float32 (1000^2 against 1), Welford's update loses none. The one-pass
    program's error against float64 is at most twice the two-pass program's (the same search
    without the rule; here it is half of it), while the naive formula is off by percent on the same rows."""
    from refcomp.search import search as search_module
    x, w = rc.input("x", ("B", 512)), rc.input("w", (512, 8))  # long rows: one pass pays (search.tile_flops)
    y = rc.nn.layer_norm(x + 1000.0) @ w
    one = rc.compile(y, dims_hint={"B": 256}, cache=False)
    assert "one_pass_statistics" in {s.rule for s in one.search.trace}
    assert any("in one pass" in k.source for k in one.kernels)
    without = tuple(
        type(o)(
            o.name, tuple([r for r in phase if r.name != "one_pass_statistics"] for phase in o.phases), o.beam
        )
        for o in search_module.OPENINGS
    )
    monkeypatch.setattr(search_module, "OPENINGS", without)
    two = rc.compile(y, dims_hint={"B": 256}, cache=False)
    assert not any("in one pass" in k.source for k in two.kernels)
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((64, 512)).astype(np.float32),
        "w": rng.standard_normal((512, 8)).astype(np.float32),
    }
    want = rc.evaluate(y, feeds, precision="float64")
    err_one = np.abs(one.run(feeds, backend="emulator") - want).max()
    err_two = np.abs(two.run(feeds, backend="emulator") - want).max()
    assert err_one <= 2 * err_two + 1e-6, (err_one, err_two)
    rows = feeds["x"] + np.float32(1000.0)
    naive = (rows * rows).mean(-1, dtype=np.float32) - rows.mean(-1, dtype=np.float32) ** 2
    assert (
        np.abs(naive / rows.astype(np.float64).var(-1) - 1).max() > 0.05
    )  # the naive one-pass variance: 5% off and worse


def test_one_pass_statistics_check_the_reads():
    """Deviations of the row read backwards from its mean: the nodes of the pattern, both sums in the
    prologue, but V's terms read X where S does not. Code generation's index check
    (statistics.reads_match) refuses the pair, so the program keeps two passes, and stays right."""
    import refcomp.codegen.tiled as fused  # the tiled matmul's prologue asks reads_match
    verdicts = []
    check = fused.reads_match
    x, w = rc.input("x", (6, 12)), rc.input("w", (12, 10))
    d = x.flip(1) - x.mean(-1, keepdims=True)
    y = (d * (((d * d).mean(-1, keepdims=True) + 1e-5).rsqrt())) @ w
    try:
        fused.reads_match = lambda *args: verdicts.append(check(*args)) or verdicts[-1]
        prog = rc.compile({"y": y}, cache=False)
    finally:
        fused.reads_match = check
    assert verdicts and not any(verdicts), verdicts  # the rule was tried, and refused
    assert "one_pass_statistics" not in {s.rule for s in prog.search.trace}
    assert not any("in one pass" in k.source for k in prog.kernels)
    check_on_emulator(prog, {"y": y}, bindings=[{}])
