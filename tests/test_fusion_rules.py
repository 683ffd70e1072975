"""Verification of the fusion rules and the search's targets (algebraic rules: tests/test_rules.py).

Fusion rules (`FUSION`, and `CLEANUP`'s moves) change kernels, never values: each is exercised on
graphs designed for it, compiled with the search and also with the rule forced into the schedule
(`program_for_schedule`), run on the host emulator and compared with the float64 reference at
golden.FLOAT32_TOLERANCE. The search's targets (softmax in one kernel, ...) are in
tests/test_fusion_targets.py.
"""
from __future__ import annotations


import pytest

import refcomp as rc
from refcomp.codegen.fused import matmul_axes
from refcomp.pipeline.assemble import program_for_schedule
from refcomp.search.cost import H200, DeviceProfile
from refcomp.search.evaluate import Evaluator
from refcomp.search.explain import explain
from refcomp.search.fusion import group_params
from refcomp.search.fusion_rules import CLEANUP, FUSION
from refcomp.search.schedule import DECISIONS, KERNEL_PARAMS, Schedule
from refcomp.search.search import search, with_schedule

from fusion_checks import check_on_emulator


# --- fusion rules: designed graphs, searched and forced, on the emulator -------------------------------
SCHEDULE_RULES = FUSION + CLEANUP  # every move between schedules, clean-up moves included
FUSION_BY_NAME = {r.name: r for r in SCHEDULE_RULES}


def _fusion_graphs(name: str) -> dict:
    x = rc.input("x", ("B", 12))
    y = rc.input("y", ("B", "T", 6))
    w = rc.input("w", (12, 10))
    b = rc.input("b", (10,))
    if name == "fuse_elementwise":
        shared = (x * 2.0 + 1.0).sin()
        return {"chain": ((shared.exp() + 1.0).sqrt() * x).flip(1),
                "through_pad": shared.pad([(0, 0), (1, 2)]).exp2() + 1.0,
                "two_readers": shared.sum(-1) + shared.amax(-1),
                "transposed": (y.sin() * 3.0).permute(2, 1, 0).cos() + 0.5,
                "broadcast": (x[:, ::2] * y[:, :, :1].sum(1)).sigmoid()}
    if name == "fuse_gather":  # ids are int32 inputs (_feeds draws them inside the table)
        table, pool = rc.input("table", (20, 12)), rc.input("pool", (8, 2, 3))
        ids, pairs, pages = (rc.input(n, s, "int32") for n, s in (("ids", ("B",)), ("pairs", ("B", "T")),
                                                                  ("pages", ("B", 2))))
        keys = rc.serving.gather_pages(pool, pages, 2)  # (B, 4, 2, 3): two pages of two slots
        return {"embedding": table.index_select(0, ids) * 2.0 + x,
                "summed": table.index_select(0, pairs).sum(-1),
                "matmul": table.index_select(0, ids) @ w,
                "scores": (keys * y[:, :1, :].reshape("B", 1, 2, 3)).sum(-1).softmax(1)}
    if name == "unroll_short_reduce":
        return {
            "relu": (x * 2.0 - 1.0).relu() + 1.0,
            "short_sum": y.sum(-1, keepdims=True).expand(-1, -1, 6)[:, :, :4].reshape("B", "T", 2, 2).sum(-1)
            * 2.0,
            "pair": rc.maximum(x, x.flip(1)).abs() * 0.5,
            "short_max": y[:, :, :3].amax(-1).exp() - 1.0,
        }
    if name == "row_fuse":
        return {
            "softmax": x.softmax(-1),
            "layer_norm": rc.nn.layer_norm(x, rc.input("g", (12,)), rc.input("h", (12,))),
            "log_softmax": y.log_softmax(-1) * 1.0,
            "rms": rc.nn.rms_norm(y.permute(1, 0, 2)),
            "softmax_axis0": x.softmax(0),
            "other_row": x - x.amax(-1, keepdims=True).flip(0),
        }  # reads another row's max: not row-fusable
    if name == "matmul":
        return {
            "plain": x @ w,
            "transposed": rc.nn.linear(x, w.T),
            "batched": y @ rc.input("v", (6, "T")),
            "prologue": x.sin() @ w,
            "conv2d": rc.nn.conv2d(
                rc.input("i", ("B", 2, 7, 7)), rc.input("k", (3, 2, 3, 3)), stride=2, padding=1
            ),
            "grouped_conv1d": rc.nn.conv1d(
                rc.input("c", ("B", 4, "T")),
                rc.input("g", (6, 2, 2)),
                groups=2,
                padding=((1, 0),),
                dilation=2,
            ),
        }  # an implicit GEMM: k unravelled in the loads
    if name == "matmul_epilogue":
        c = rc.input("c", ("B", 2, "T"))
        return {
            "bias_relu": (x @ w + b).relu() * 1.0,
            "bias": rc.nn.linear(x, w.T, b),
            "relu_stored": (x @ rc.input("w4", (12, 10)) + b).relu(),  # the max over a pair, unrolled
            "conv_bias_relu": rc.nn.conv1d(
                c, rc.input("k", (3, 2, 3)), rc.input("kb", (3,)), padding=1
            ).relu(),
            "residual": (y @ rc.input("u", (6, 6))) + y,
            "reduced": (x @ w + 1.0).sum(-1),
        }  # the Add may join the matmul, the sum may not
    if name == "online_softmax":
        q, k, v = (rc.input(n, ("B", "T", 6)) for n in "qkv")
        return {
            "causal": rc.nn.scaled_dot_product_attention(q, k, v, causal=True),
            "masked": rc.nn.scaled_dot_product_attention(q, k, v, mask=rc.input("m", ("T", "T"))),
            "softmax_matmul": x.softmax(-1) @ w,
            "other_axis": x.softmax(0).T @ rc.input("u", ("B", 4)),  # the softmax is not over K: not online
            "probabilities_kept": (y.softmax(-1) @ rc.input("z", (6, 6))) + y.softmax(-1),
        }  # P is read twice
    if name == "tiled_online_softmax":  # one row: the value sum is no tiled matmul yet
        q = rc.input("q", ("B", 4, 1, 8))
        k, v = (rc.input(n, ("B", 4, "T", 8)) for n in "kv")
        row, mask = rc.input("r", ("B", 1, "T")), rc.input("m", ("B", 1, 1, "T")) > 0
        other = rc.input("r2", ("B", 1, "T"))
        return {
            "decode": rc.nn.scaled_dot_product_attention(q, k, v),
            "decode_masked": rc.nn.scaled_dot_product_attention(q, k, v, mask=mask),
            "one_row": row.softmax(-1) @ rc.input("u", ("T", 6)),
            "probabilities_kept": (other.softmax(-1) @ rc.input("z", ("T", 6)))
            + other.softmax(-1).sum(-1, keepdims=True),
        }  # P read twice: not online (its own rows: the same softmax would be one node, read twice)
    if name == "stream_scores":  # each graph its own q, k, v: the search merges equal scores (CSE)
        q, k, v = ([rc.input(f"{n}{i}", ("B", "T", 6)) for i in range(4)] for n in "qkv")
        scores = q[2] @ k[2].transpose(-1, -2)
        return {
            "causal": rc.nn.scaled_dot_product_attention(q[0], k[0], v[0], causal=True),
            "masked": rc.nn.scaled_dot_product_attention(q[1], k[1], v[1], mask=rc.input("m", ("T", "T"))),
            "scores_kept": scores.softmax(-1) @ v[2]
            + scores.sum(-1, keepdims=True),  # S read twice: not streamed
            "keys_on_the_left": (k[3] @ q[3].transpose(-1, -2)).transpose(-1, -2).softmax(-1) @ v[3],
        }
    if name == "prologue_reduce":
        return {
            "layer_norm_linear": rc.nn.linear(
                rc.nn.layer_norm(x, rc.input("g", (12,)), rc.input("h", (12,))), w.T, b
            ),
            "rms_batched": rc.nn.rms_norm(y) @ rc.input("u", (6, 6)),
            "centered": (x * 2.0 - (x * 2.0).mean(-1, keepdims=True)) @ w,
            "mean_kept": (y - y.mean(-1, keepdims=True)) @ rc.input("z", (6, 6)) + y.mean(-1, keepdims=True),
        }  # stored
    if name == "one_pass_statistics":
        return {
            "layer_norm_linear": rc.nn.linear(
                rc.nn.layer_norm(x, rc.input("g", (12,)), rc.input("h", (12,))), w.T, b
            ),
            "shifted": rc.nn.layer_norm(x + 100.0)
            @ rc.input("w2", (12, 10)),  # a mean 100 spreads: no cancelling
            "batched": rc.nn.layer_norm(y) @ rc.input("u", (6, 6)),
            "centered": (x - x.mean(-1, keepdims=True)) @ rc.input("w3", (12, 10)),
            # rows of 512: the second pass over them would cost more than Welford's update (search.tile_flops)
            "wide": rc.nn.layer_norm(rc.input("xw", ("B", 512))) @ rc.input("w4", (512, 8)),
        }  # no variance: not a pair
    if name == "reduce_epilogue":
        z = rc.input("z", (3, 3, 9))
        return {"scaled_sum": x.sum(-1) * 0.5 + 1.0, "rsqrt_var": (x.var(-1, correction=0) + 1e-5).rsqrt(),
                "bias": y.amax(-1) + rc.input("c", ("T",)), "exp_of_sum": (y * y).sum(1).exp(),
                "transposed": z.sum(-1).T * 2.0}  # reads the result transposed: no epilogue
    raise AssertionError(name)


def _forced(result, rule_names, expect_rule: str) -> Schedule:
    """Apply the rules at every node where they apply (in graph order), keeping moves that give a
    valid partition: a schedule that goes through `expect_rule` whatever the cost model prefers."""
    graph = result.graph
    ev = Evaluator(graph, result.bindings, H200)
    sched = Schedule()
    applied = set()
    for _ in range(3):
        for node in graph.compute:
            for rule_name in rule_names:
                rule = FUSION_BY_NAME[rule_name]
                if rule.applies(graph, sched, node):
                    new = rule.apply(graph, sched, node)
                    if ev.partition(new) is not None:
                        sched = new
                        applied.add(rule_name)
    assert expect_rule in applied, f"{expect_rule} never gave a valid schedule"
    return sched


FORCE = {
    "fuse_elementwise": ["fuse_elementwise"],
    "unroll_short_reduce": ["unroll_short_reduce", "fuse_elementwise"],
    "row_fuse": ["fuse_elementwise", "row_fuse"],
    "matmul": ["matmul"],
    "fuse_gather": ["fuse_gather", "matmul", "fuse_elementwise"],
    "matmul_epilogue": ["matmul", "matmul_epilogue", "fuse_elementwise"],
    "reduce_epilogue": ["reduce_epilogue"],
    "online_softmax": ["matmul", "online_softmax", "fuse_elementwise"],
    "tiled_online_softmax": ["tiled_online_softmax", "stream_scores", "fuse_elementwise"],
    "stream_scores": ["matmul", "online_softmax", "stream_scores", "fuse_elementwise"],
    "prologue_reduce": ["matmul", "fuse_elementwise", "prologue_reduce"],
    "one_pass_statistics": ["matmul", "fuse_elementwise", "prologue_reduce", "one_pass_statistics"],
}


def test_every_fusion_rule_has_graphs():
    assert {r.name for r in SCHEDULE_RULES} <= set(FORCE), (
        "a fusion rule without designed graphs in tests/test_fusion_rules.py"
    )


@pytest.mark.parametrize("name", [r.name for r in SCHEDULE_RULES])
def test_fusion_rule_searched_and_forced_matches_reference(name):
    outputs = _fusion_graphs(name)
    searched = rc.compile(outputs, cache=False)
    assert name in {s.rule for s in searched.search.trace}, [s.rule for s in searched.search.trace]
    check_on_emulator(searched, outputs)
    result = searched.search
    forced = program_for_schedule(outputs, result, _forced(result, FORCE[name], name))
    kinds = {k.kind for k in forced.kernels}
    if name == "row_fuse":
        assert "row" in kinds
    if name in ("matmul", "matmul_epilogue"):
        assert "matmul" in kinds
    if name == "online_softmax":
        assert (
            sum("softmax computed online" in k.source for k in forced.kernels) == 3
        )  # causal, masked, softmax_matmul
    if name == "tiled_online_softmax":
        assert sum("softmax computed online" in k.source for k in forced.kernels) >= 2  # decode and masked
    if name == "stream_scores":
        assert sum("scores streamed" in k.source for k in forced.kernels) >= 2  # causal, masked
    if name == "prologue_reduce":
        assert sum("row reduction(s) before the tiles" in k.source for k in forced.kernels) >= 3
    if name == "one_pass_statistics":
        assert sum("pair(s) in one pass" in k.source for k in forced.kernels) == 4  # not "centered"
    assert len(forced.kernels) < len(rc.compile(outputs, search=False).kernels)
    check_on_emulator(forced, outputs)


def test_schedules_are_values_declared_once():
    """Per-node decisions and per-kernel parameters are declared once (fields of Schedule, KERNEL_PARAMS):
    equal schedules are equal values, and what code generation is told is derived from the declaration."""
    assert [d.name for d in DECISIONS] == [
        "inline",
        "row",
        "epilogue",
        "matmul",
        "online",
        "prologue",
        "streamed",
        "welford",
        "row_stats",
        "tails",
    ]
    one = Schedule().decide(inline={3}, row={3}).with_params({(3, "block"): 128})
    assert one == Schedule(inline=frozenset({3}), row=frozenset({3}), params=(((3, "block"), 128),))
    assert len({one, Schedule().decide(row={3}).decide(inline={3}).with_params({(3, "block"): 128})}) == 1
    assert one.kernel_params(3) == {
        "strategy": None, "block": 128, "tile": 16, "slices": 1, "splits": 1, "n_tiles": 4, "b_along_k": False
    }
    assert one.kernel_params(4) == {p.name: p.default for p in KERNEL_PARAMS}
    assert one.with_params({(3, "block"): None}).params == ()


def test_the_device_profile_is_threaded_through():
    """A search under another device prices every kernel on it, a chosen candidate too, and explain
    names it."""
    x, w = rc.input("x", ("B", 64)), rc.input("w", (64, 32))
    y = (x @ w).relu().softmax(-1)
    slow = DeviceProfile(name="slow", bandwidth=H200.bandwidth / 8, flops=H200.flops / 8)
    result = search([y.edge], {"B": 1024}, profile=slow, progress=False)
    assert result.profile is slow
    for sched in result.candidates:
        chosen = with_schedule(result, sched)
        ev = Evaluator(result.graph, result.bindings, slow)
        assert [c.time_s for c in chosen.costs] == [ev.cost(sched, g).time_s for g in chosen.groups]
        assert group_params(sched, chosen.groups[0])["block"] == sched.param(
            chosen.groups[0].root.id, "block"
        )
    program = program_for_schedule({"y": y}, result, result.candidates[-1])
    assert explain(program).startswith("cost model: slow roofline")


def test_matmul_epilogue_never_feeds_a_reduction():
    """A matmul read by a reduction it would have to loop over (a sum over the matmul's rows) is no
    epilogue: a schedule that inlines it anyway has no valid kernel (it used to crash). relu, a max
    over a pair, is: the template unrolls it after the accumulator (conv + bias + relu, one kernel)."""
    x, w = rc.input("x", (2, 3, 4)), rc.input("w", (4, 5))
    w2, w3 = rc.input("w2", (4, 5)), rc.input("w3", (4, 5))  # three products, or CSE makes them one
    outputs = {"relu": (x @ w).relu(), "sum": ((x @ w2 + 1.0) * 2.0).sum(-1), "direct": (x @ w3).sum(-1)}
    prog = rc.compile(outputs)
    check_on_emulator(prog, outputs)
    result = prog.search
    graph, ev = result.graph, Evaluator(result.graph, result.bindings, H200)
    for red in [n for n in graph.compute if matmul_axes(n) is not None]:
        s = FUSION_BY_NAME["matmul"].apply(graph, Schedule(), red)
        reader = graph.consumers[red.id][0]
        assert FUSION_BY_NAME["matmul_epilogue"].applies(graph, s, red) == (reader.op.kind != "reduce")
        forced = s
        for n in graph.compute:  # inline everything that can be: any reduction root must reject the matmul
            if n.id not in forced.matmul and n.op.kind != "reduce" and n.id not in graph.outputs:
                forced = FUSION_BY_NAME["fuse_elementwise"].apply(graph, forced, n)
        forced = FUSION_BY_NAME["fuse_elementwise"].apply(graph, forced, red)  # even the matmul itself
        groups = ev.partition(forced)
        if any(s.node.attrs.get("name") == "w" for s in red.srcs[0].node.srcs):  # relu(x @ w)
            kernel = next(g for g in groups.values() if red in g.members)
            assert kernel.kind == "matmul" and kernel.root.op.name == "MaxReduce"
            check_on_emulator(program_for_schedule(outputs, result, forced), outputs)
        else:
            assert groups is None
