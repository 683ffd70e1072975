"""The online softmax (codegen/online.py; the fusion rules `online_softmax` and `stream_scores`):
softmax(S) @ B in one pass, and S = Q K^T computed inside that pass (FlashAttention).

The rules' randomized equivalence tests are with the other fusion rules (tests/test_fusion_rules.py);
the fuzzer generates attention (refcomp/fuzz/model_steps.py) and checks that its searches apply every
fusion rule. Here: the edges of the recurrence (rows that start masked, rows masked whole, +inf and
NaN scores, a maximum that grows in every tile) against the float64 reference at both tile sizes,
with the scores streamed and read from memory; the patterns the matcher must refuse; and the GPT-2
block, whose attention must come out as one kernel that writes neither scores nor statistics.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.codegen.online import MAX_STREAMED_DEPTH, online_softmax
from refcomp.pipeline.assemble import program_for_schedule
from refcomp.ops.graph import toposort

ONLINE = "softmax_matmul.cu.j2"
D = 32


def _attention(**kw):
    q, k, v = (rc.input(n, ("B", 2, "T", D)) for n in "qkv")
    return rc.nn.scaled_dot_product_attention(q, k, v, **kw)


def _online_program(out, tile: int, streamed: bool, others: int = 0):
    """The searched program (its scores streamed) with its online kernel's tile set to `tile`; with
    `streamed` False, the scores computed by their own matmul kernel and read from memory. `others`:
    the kernels beside attention (a mask's test for rows it blocks whole)."""
    prog = rc.compile(out, dims_hint={"B": 2, "T": 96}, cache=False)
    online = [k for k in prog.kernels if k.plan.template == ONLINE]
    assert len(online) == 1 and online[0].plan.streamed_depth == D, [k.name for k in prog.kernels]
    result = prog.search
    sched = result.schedule.with_params({(online[0].output.id, "tile"): tile})
    if not streamed:
        sched = replace(sched, streamed=frozenset(), inline=sched.inline - sched.streamed)
    forced = program_for_schedule(out, result, sched)
    assert f"__shared__ float Ss[{tile}][{tile + 1}]" in forced.source
    assert ("scores streamed" in forced.source) == streamed and len(forced.kernels) == others + (
        1 if streamed else 2
    )
    return forced


def _compare(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN where the reference has none, or the reverse"
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], **golden.FLOAT32_TOLERANCE)


@pytest.mark.parametrize("streamed", [True, False])
@pytest.mark.parametrize("tile", [16, 32])
def test_masked_rows_infinities_and_nan_match_the_reference(tile, streamed):
    mask = rc.input("mask", ("T", "T"))
    out = _attention(attn_mask=mask)
    prog = _online_program(out, tile, streamed, others=1)
    rng = np.random.default_rng(tile)
    for b, t in ((2, 70), (1, 33), (1, 5)):
        feeds = {n: (2 * rng.standard_normal((b, 2, t, D))).astype(np.float32) for n in "qkv"}
        m = np.zeros((t, t), np.float32)
        m[:, :min(40, t - 1)] = -np.inf  # every row starts masked for more than one tile
        m[
            min(3, t - 1), :
        ] = -np.inf  # a row masked whole: zeros, as PyTorch (the mask's row test selects them)
        m[1, t - 1] = np.inf  # +inf: NaN too
        m[2, t // 2] = np.nan
        feeds["mask"] = m
        _compare(prog.run(feeds, backend="emulator"), rc.evaluate(out, feeds, precision="float64"))


@pytest.mark.parametrize("streamed", [True, False])
@pytest.mark.parametrize("tile", [16, 32])
def test_a_maximum_that_grows_in_every_tile_is_rescaled(tile, streamed):
    out = _attention(causal=True)
    prog = _online_program(out, tile, streamed)
    t = 100
    ramp = np.linspace(0.0, 6.0, t, dtype=np.float32)  # the score grows with k: every tile raises the maximum
    feeds = {"q": np.ones((1, 2, t, D), np.float32) * 0.5,
             "k": np.broadcast_to(ramp[None, None, :, None], (1, 2, t, D)).copy(),
             "v": np.random.default_rng(0).standard_normal((1, 2, t, D)).astype(np.float32)}
    _compare(prog.run(feeds, backend="emulator"), rc.evaluate(out, feeds, precision="float64"))


def _contraction(out):
    return next(n for n in reversed(toposort([out.node])) if n.op.name == "SumReduce")


def test_the_matcher_names_the_parts_and_refuses_what_is_not_an_online_softmax():
    x, w = rc.input("x", (8, 12)), rc.input("w", (12, 5))
    parts = online_softmax(_contraction(x.softmax(-1) @ w))
    assert [n.op.name for n in parts.nodes] == [
        "MaxReduce",
        "Mul",
        "Add",
        "Mul",
        "Exp2",
        "SumReduce",
        "Recip",
        "Mul",
    ]
    m = x.amax(-1, keepdims=True)
    not_online = {
        "c < 0: exp2(-(x - max)), the rescale would overflow": ((x - m) * -1.0).exp2(),
        "the max of another tensor": (x - (x * 2.0).amax(-1, keepdims=True)).exp(),
        "no max at all": (x - x.sum(-1, keepdims=True)).exp(),
    }
    for why, e in not_online.items():
        assert online_softmax(_contraction((e / e.sum(-1, keepdims=True)) @ w)) is None, why
    e = (x - m).exp()
    assert (
        online_softmax(_contraction((e / (e.sum(-1, keepdims=True) + x.sum(-1, keepdims=True))) @ w)) is None
    ), "a normaliser that reads more than the sum"
    assert online_softmax(_contraction(e @ w)) is None, "no normaliser: not a softmax"


def test_a_depth_past_the_shared_memory_budget_is_not_streamed():
    q, k, v = (rc.input(n, ("B", "T", MAX_STREAMED_DEPTH + 8)) for n in "qkv")
    out = rc.nn.scaled_dot_product_attention(q, k, v)
    prog = rc.compile(out, dims_hint={"B": 2, "T": 96}, cache=False)
    online = [k for k in prog.kernels if k.plan.template == ONLINE]
    assert len(online) == 1 and online[0].plan.streamed_depth == 0  # online, the scores read from memory
    feeds = {
        n: np.random.default_rng(2).standard_normal((1, 20, MAX_STREAMED_DEPTH + 8)).astype(np.float32)
        for n in "qkv"
    }
    _compare(prog.run(feeds, backend="emulator"), rc.evaluate(out, feeds, precision="float64"))


def test_the_gpt2_block_computes_its_attention_in_one_kernel():
    from examples.gpt2_block import build_block, numpy_block
    out, weights = build_block()
    prog = rc.compile(out, dims_hint={"B": 8, "T": 128}, cache=False)
    assert "online_softmax" in {s.rule for s in prog.search.trace}
    online = [k for k in prog.kernels if k.plan.template == ONLINE]
    assert len(online) == 1
    assert {"MaxReduce", "SumReduce", "Exp2"} <= {n.op.name for n in online[0].nodes}
    # FlashAttention: the (B, H, T, T) scores, the max and the sum are never written
    assert online[0].plan.streamed_depth == 32 and {"online_softmax", "stream_scores"} <= {
        s.rule for s in prog.search.trace
    }
    assert not any(k.output.op.name == "MaxReduce" or len(k.output.shape) == 4 and k.output.shape[-1] != 32
                   for k in prog.kernels), [(k.name, k.output.shape) for k in prog.kernels]
    x = np.random.default_rng(1).standard_normal((2, 40, 128)).astype(np.float32)
    got = prog.run({"x": x, **weights}, backend="emulator")
    np.testing.assert_allclose(got, numpy_block(x, weights), rtol=1e-4, atol=1e-4)
    assert math.isfinite(prog.cost.time_s)
