"""Repeated layers are searched once (search/repeat.py): the copies are found, a move fires in every
copy, and a stack of GPT-2 blocks gets one block's schedule in each block and still matches an
independent NumPy stack."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import refcomp as rc
from refcomp.codegen.lower import materialise_outputs
from refcomp.search.fusion import Graph
from refcomp.search.repeat import MIN_TIED_NODES, segments

try:
    from examples.gpt2_block import block, make_weights, numpy_block
except ModuleNotFoundError:  # plain `pytest` with refcomp installed: examples/ is not a package on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.gpt2_block import block, make_weights, numpy_block


def residual_stack(widths):
    """h + tanh(rms_norm(h) @ W1) @ W2 / 8 per width in `widths` (the hidden width of each layer)."""
    h = rc.input("x", ("B", 8))
    for i, hidden in enumerate(widths):
        w1, w2 = rc.input(f"w1_{i}", (8, hidden)), rc.input(f"w2_{i}", (hidden, 8))
        h = h + (rc.nn.rms_norm(h) @ w1).tanh() @ w2 * 0.125
    return h


def graph_of(t) -> Graph:
    return Graph(materialise_outputs([t.edge]))


def test_identical_layers_are_copies_of_the_first():
    graph = graph_of(residual_stack([16, 16, 16]))
    segs = segments(graph.nodes, graph.position, graph.consumers)
    assert (
        len(segs) == 3 and len({len(s) for s in segs}) == 1
    )  # one segment per layer, each cut at its residual add
    assert all(s[-1].op.name == "Add" and s[-1].shape == segs[0][-1].shape for s in segs)
    copies = graph.copies
    assert copies.layers == 3
    assert set(copies.twins) == {n.id for n in segs[0]}
    assert copies.copied == {n.id for s in segs[1:] for n in s}
    for rep in segs[0]:  # the k-th node of every copy is the k-th node of the first
        twins = copies.of(rep)
        assert [t.id for t in twins] == [s[segs[0].index(rep)].id for s in segs[1:]]
        assert all(t.op is rep.op and t.shape == rep.shape for t in twins)


def test_an_input_read_at_both_ends_or_by_every_layer_does_not_join_the_layers():
    """GPT-2's embedding is tied to its LM head, and a mask may be read by every layer: such an input
    spans the whole graph, and counted as live state it left the model one segment (no copies)."""
    tied, mask = rc.input("emb", (8, 8)), rc.input("mask", ("B", 8))
    h = rc.input("x", ("B", 8)) @ tied
    for i in range(4):
        w1, w2 = rc.input(f"w1_{i}", (8, 16)), rc.input(f"w2_{i}", (16, 8))
        h = h + (rc.nn.rms_norm(h * mask) @ w1).tanh() @ w2 * 0.125
    assert graph_of(h @ tied).copies.layers == 4


def test_different_or_small_layers_are_not_tied():
    assert graph_of(residual_stack([16, 8, 16])).copies.layers == 2  # the first and third layers only
    h = rc.input("x", ("B", 8))
    for i in range(4):  # a chain of relu(h @ W): every node is a cut, each segment smaller than a layer
        h = (h @ rc.input(f"w{i}", (8, 8))).relu()
    graph = graph_of(h)
    assert max(len(s) for s in segments(graph.nodes, graph.position, graph.consumers)) < MIN_TIED_NODES
    assert graph.copies.layers == 1 and not graph.copies.copied


def test_a_tied_move_is_one_step_of_the_trace_naming_its_copies():
    prog = rc.compile(residual_stack([16, 16, 16]), dims_hint={"B": 32}, cache=False)
    tied = [s for s in prog.search.trace if s.copies]
    assert any(
        s.copies == 2 for s in tied
    )  # a move fires wherever its rule applies: in two copies or all three
    assert all(s.site.endswith(f"and {s.copies} cop{'y' if s.copies == 1 else 'ies'}") for s in tied)
    untied = [s for s in prog.search.trace if not s.copies and s.rule not in ("start", "tune_schedules")]
    assert all("copies" not in s.site for s in untied)


def _gpt2_stack(depth: int):
    shapes = {name: a.shape for name, a in make_weights().items()}
    y = rc.input("x", ("B", "T", 128))
    for i in range(depth):
        y = block(y, {name: rc.input(f"h{i}.{name}", shape) for name, shape in shapes.items()})
    return y


def test_stacked_gpt2_blocks_get_one_blocks_schedule_and_match_numpy():
    hint = {"B": 1, "T": 64}
    one = rc.compile(_gpt2_stack(1), dims_hint=hint, cache=False)
    three = rc.compile(_gpt2_stack(3), dims_hint=hint, cache=False)
    per_block = len(one.kernels)
    assert len(three.kernels) == 3 * per_block
    kinds = [k.kind for k in three.kernels]
    assert kinds == [k.kind for k in one.kernels] * 3
    assert three.cost.bytes == 3 * one.cost.bytes  # every block moves exactly one block's bytes
    # the tied search visits about one block's states, not three blocks'
    assert three.search.states < 2 * one.search.states

    rng = np.random.default_rng(5)
    weights = [make_weights(seed=10 + i) for i in range(3)]
    x = rng.standard_normal((2, 7, 128)).astype(np.float32)
    feeds = {"x": x, **{f"h{i}.{k}": v for i, w in enumerate(weights) for k, v in w.items()}}
    want = x
    for w in weights:
        want = numpy_block(want, w)
    got = three.run(feeds, dims={"B": 2, "T": 7}, backend="emulator")
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=5e-4)


def test_each_layers_kernels_are_the_first_layers_relabelled_exactly(monkeypatch):
    """Lowering generates a repeated layer's kernel once and relabels it for the other copies: every
    kernel must equal what code generation gives for its own group, byte for byte."""
    import refcomp.codegen.lower as lower
    from refcomp.codegen.lower import kernel_for_group, kernel_name
    from refcomp.search.fusion import group_params
    generated = []
    monkeypatch.setattr(
        lower, "kernel_for_group", lambda *a, **k: generated.append(a[0]) or kernel_for_group(*a, **k)
    )
    prog = rc.compile(_gpt2_stack(3), dims_hint={"B": 1, "T": 64}, cache=False)
    assert len(generated) < len(prog.kernels) / 2, generated  # the other two blocks were relabelled
    result, sched = prog.search, prog.search.schedule
    for k, (kernel, group) in enumerate(zip(prog.kernels, result.groups)):
        fresh = kernel_for_group(kernel_name(k, group.members + (group.root,)), group, result.graph.names,
                                 lambda n: n.id in sched.inline, group_params(sched, group))
        assert kernel.source == fresh.source, kernel.name
        assert (kernel.output, kernel.nodes, kernel.reads, kernel.signature) == (
            fresh.output,
            fresh.nodes,
            fresh.reads,
            fresh.signature,
        ), kernel.name


def test_no_kernel_recomputes_through_two_layer_boundaries():
    """Inlining every residual add (one tied move) would make layer k recompute the residual stream of
    all k layers before it: group_of refuses a kernel holding two layer boundaries."""
    from refcomp.search.fusion import group_of
    from refcomp.search.schedule import Schedule
    graph = graph_of(residual_stack([16, 16, 16, 16]))
    ends = [n for n in graph.nodes if n.id in graph.copies.boundaries]
    assert len(ends) == 4 and all(n.op.name == "Add" for n in ends)
    one = Schedule().decide(inline={ends[0].id})
    two = Schedule().decide(inline={ends[0].id, ends[1].id})
    assert group_of(graph, one, ends[1]) is not None  # across one boundary: fine
    assert group_of(graph, two, ends[2]) is None


def test_a_copys_kernel_read_off_its_representatives_is_the_one_group_of_finds(monkeypatch):
    """search/mirror.py maps the representative's kernel onto a copy instead of re-partitioning it:
    at every state the search prices, the mapped kernel must be group_of's, and just as legal."""
    from refcomp.search.evaluate import Evaluator
    from refcomp.search.mirror import Mirror
    mirrored, checked = Mirror.__call__, []

    def checking(self, sched, root_id, found, unchanged=None):  # (unchanged: a move's kernels it leaves)
        group = mirrored(self, sched, root_id, found, unchanged)
        if group is not None:
            assert group == self.ev._group(sched, self.graph.by_id[root_id])
            checked.append(group)
        return group

    monkeypatch.setattr(Mirror, "__call__", checking)
    rc.compile(_gpt2_stack(3), dims_hint={"B": 1, "T": 64}, cache=False)
    rc.compile(residual_stack([16, 16, 16]), dims_hint={"B": 32}, cache=False)
    assert len(checked) > 100

    # schedules that treat the copies differently (a move tried in one copy alone): mapped only where alike
    from refcomp.search.cost import H200
    from refcomp.search.fusion_rules import FUSION
    from refcomp.search.schedule import Schedule
    graph = graph_of(residual_stack([16, 16, 16]))
    ev = Evaluator(graph, {"B": 32}, H200)
    matmul = next(rule for rule in FUSION if rule.name == "matmul")
    sums = [n for n in graph.compute if matmul.applies(graph, Schedule(), n)]
    first, twin = sums[0], graph.copies.of(sums[0])[0]
    for sched in (
        Schedule().decide(matmul={first.id}, inline={first.srcs[0].node.id}),
        Schedule().decide(matmul={twin.id}, inline={twin.srcs[0].node.id}),
        Schedule().decide(matmul={first.id, twin.id}, inline={first.srcs[0].node.id, twin.srcs[0].node.id}),
        Schedule().decide(inline={graph.consumers[first.id][0].id}),
        Schedule().decide(matmul={first.id}),
        Schedule().decide(matmul={twin.id}),
    ):
        checked.clear()
        assert ev.partition(sched) == {
            r.id: ev._group(sched, r) for r in graph.compute if r.id not in sched.inline
        }
        assert checked  # the copies the schedule leaves alike were still mapped


def test_a_rule_screened_out_at_a_layers_node_applies_at_none_of_its_copies():
    """_sites tests a rule's leading node-only conditions once per layer (FusionRule.applies_at_no_copy)."""
    from refcomp.search.fusion_rules import CLEANUP, FUSION
    from refcomp.search.schedule import Schedule
    prog = rc.compile(_gpt2_stack(3), dims_hint={"B": 1, "T": 64}, cache=False)
    graph = prog.search.graph
    screened = 0
    for sched in (Schedule(), prog.search.schedule):
        for node in graph.compute:
            for rule in FUSION + CLEANUP:
                if graph.copies.of(node) and rule.applies_at_no_copy(graph, sched, node):
                    screened += 1
                    assert not any(rule.applies(graph, sched, n) for n in (node,) + graph.copies.of(node))
    assert screened > 100
