"""What the search finds: it stops where no single move is cheaper, and each opening earns its place.

A finished search claims that no rule application from its schedule is cheaper under the model;
search/alternatives.py prices every move still legal there, and on every golden case none may be.
The search runs once per opening (search.OPENINGS) and keeps the cheapest: on the GPT-2 block the
contractions-first order wins (the residual add in the attention projection's epilogue), on the
784-256-10 MLP at batch 1024 the elementwise-first order does (the ten-column layer as a
block-per-output reduction); each result is compared with the search run in one order alone.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import refcomp as rc
from refcomp.search import search as search_module
from refcomp.search.alternatives import untaken_moves
from refcomp.search.search import OPENINGS, search
from cuda_cases import CASES, compiled

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import gpt2_block  # noqa: E402


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_search_stops_where_no_single_move_is_cheaper(case):
    result = compiled(case.name, True, cache=False).search  # a loaded program keeps no search result
    assert result.complete, "the search ran out of its budget on a golden case"
    chosen, moves = untaken_moves(result)
    assert chosen.time_s == pytest.approx(sum(c.time_s for c in _fusion_prices(result)), rel=1e-9)
    cheaper = [(m.rule, m.where, m.time_s) for m in moves if m.time_s < chosen.time_s * (1 - 1e-9)]
    assert cheaper == [], f"chosen {chosen.time_s:.3e} s"


def _fusion_prices(result):
    """The chosen kernels priced as the fusion search priced them (before tuning fixed parameters)."""
    from dataclasses import replace
    from refcomp.search.evaluate import Evaluator
    ev = Evaluator(result.graph, result.bindings, result.profile)
    sched = replace(result.schedule, params=())
    return [ev.price(sched, g) for g in ev.partition(sched).values()]


def direct_conv_layer():
    """A conv + relu + pool layer (8 images of 3x64x64) with the convolution written as a sum over
    three axes (channel, kh, kw) of the window view, as a user might write it (rc.nn.conv2d merges
    them into one contraction): the short sums over kh and kw are the search's to unroll or not.
    (At 32x32 the search now computes the whole layer in one kernel, and declines nothing.)"""
    x, w, b = rc.input("x", (8, 3, 64, 64)), rc.input("w", (16, 3, 3, 3)), rc.input("b", (16,))
    windows = rc.nn.windows(x, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))  # (8, 3, 32, 32, 3, 3)
    conv = (windows.unsqueeze(1) * w.reshape(1, 16, 3, 1, 1, 3, 3)).sum((2, 5, 6)) + b.reshape(1, 16, 1, 1)
    return rc.nn.max_pool2d(conv.relu(), 2)


def test_the_untaken_moves_are_real_alternatives():
    """On the direct conv + relu + pool layer the search computes the convolution (its three short
    sums unrolled) in one kernel and the pooling in another: computing the convolution inside the
    pooling kernel is legal and would store nothing (fewer bytes), but the pooling kernel's threads
    would recompute it from 27 reads each (more time). explain lists the move."""
    y = direct_conv_layer()
    prog = rc.compile(y, cache=False)
    chosen, moves = untaken_moves(prog.search)
    assert moves, "a small CNN leaves moves the search priced and declined"
    assert all(m.time_s > chosen.time_s for m in moves)
    assert any(m.bytes < chosen.bytes for m in moves), "some declined fusion would have saved bytes"
    text = prog.explain()
    assert "moves the search did not take" in text
    assert moves[0].rule in text.split("moves the search did not take")[1]


@pytest.mark.parametrize("build", ["conv", "gpt2_block"])
def test_the_search_evaluator_prices_untaken_moves_as_a_fresh_one_does(build):
    """rc.compile explains a program (for the program cache) with the search's own evaluator, whose
    kernels are already built; the list must be the one a fresh evaluator gives."""
    from dataclasses import replace
    outputs = direct_conv_layer() if build == "conv" else gpt2_block.build_block()[0]
    result = search([outputs.edge], progress=False)
    assert result.evaluator is not None
    shared = untaken_moves(result)
    fresh = untaken_moves(replace(result, evaluator=None))
    assert shared == fresh, "the same moves, priced alike"
    assert shared[1] or build == "gpt2_block", "the conv layer leaves moves to compare (the block none)"
    program = rc.compile(outputs, cache=False)
    assert program.search.evaluator is None, "a compiled program does not keep the search's kernels"


def _alone(edges, hint, opening):
    saved = search_module.OPENINGS
    search_module.OPENINGS = (opening,)
    try:
        return search(edges, dims_hint=hint, progress=False)
    finally:
        search_module.OPENINGS = saved


def _mlp(batch: int):
    t = {
        n: rc.input(n, s)
        for n, s in {"x": (batch, 784), "w1": (256, 784), "b1": (256,), "w2": (10, 256), "b2": (10,)}.items()
    }
    return rc.nn.linear(rc.nn.linear(t["x"], t["w1"], t["b1"]).relu(), t["w2"], t["b2"])


@pytest.mark.parametrize(
    "workload, winner", [("gpt2 block B=8 T=128", "contractions first"), ("mlp B=512", "elementwise first")]
)
def test_each_opening_wins_where_the_other_order_is_worse(workload, winner):
    if workload.startswith("gpt2"):
        out, hint = gpt2_block.build_block()[0], {"B": 8, "T": 128}
    else:
        out, hint = _mlp(512), None
    edges = [out.edge]
    both = search(edges, dims_hint=hint, progress=False)
    alone = {o.name: _alone(edges, hint, o).time_s for o in OPENINGS}
    assert both.opening == winner
    assert both.time_s == pytest.approx(min(alone.values()), rel=1e-12)
    loser = next(name for name in alone if name != winner)
    assert alone[winner] < alone[loser] * 0.95, alone  # a clear win, not a tie broken by order


def test_a_search_cut_short_claims_no_minimum():
    """A search stopped by its state budget says so (`complete`), and the checks above skip it: its
    schedule is where the budget ran out, not where no move pays."""
    y = direct_conv_layer()
    cut = search([y.edge], max_states=1, progress=False)
    whole = search([y.edge], progress=False)
    assert not cut.complete and whole.complete
    assert cut.time_s > whole.time_s
