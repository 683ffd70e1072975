"""CSE, dead-code removal and `search.simplify` as a whole, verified with the rewrite harness
(tests/rule_harness.py): duplicated subgraphs merge with equal outputs, dead nodes disappear, and on
the fuzzer's random graphs simplify changes no output beyond float32 rounding."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import refcomp as rc
from refcomp import Tensor
from refcomp.ops.graph import toposort
from refcomp.search.cost import H200
from refcomp.search.rewrite import count_compute_nodes
from refcomp.search.search import simplify

from rule_harness import (
    Case,
    SETTINGS,
    EXAMPLES,
    binding_pairs,
    differ,
    evaluate_edges,
    exact,
    shapes,
    verify,
)


# --- CSE, dead code, simplify as a whole -------------------------------------------------------------
PLAIN_OPS = ["sin", "scale", "shift", "square_plus_one", "sqrt_pos", "max_pair", "sum", "permute", "pad"]


def _apply_plain(t: Tensor, op: str) -> Tensor:
    if op == "sin":
        return t.sin()
    if op == "scale":
        return t * 1.5
    if op == "shift":
        return t + 0.25
    if op == "square_plus_one":
        return t * t + 1.0
    if op == "sqrt_pos":
        return (t * t + 1.0).sqrt()
    if op == "max_pair":
        return t.maximum(t.flip(0)) if t.ndim else t.maximum(0.5)
    if op == "sum":
        return t.sum(-1) if t.ndim else t
    if op == "permute":
        return t.permute(list(reversed(range(t.ndim)))) if t.ndim else t
    return t.pad([(1, 0)] * t.ndim) if t.ndim else t


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(shape=shapes(), recipe=st.lists(st.sampled_from(PLAIN_OPS), min_size=1, max_size=5),
       bindings=binding_pairs(), seed=st.integers(0, 2**16), both=st.booleans())
def test_cse_merges_duplicated_subgraphs_with_equal_outputs(shape, recipe, bindings, seed, both):
    x = rc.input("x", shape)
    first, second = x, rc.input("x", shape)  # a second Input node of the same name: one input after CSE
    for op in ["sin"] + recipe:
        first, second = _apply_plain(first, op), _apply_plain(second, op)
    outputs = [first + second] if both else [first, second * 2.0]
    case = Case(outputs, {}, bindings, seed)
    before = count_compute_nodes([t.edge for t in outputs])
    trace = []
    count, problems = verify(case, lambda edges: _simplified(edges, trace), exact())
    assert problems == [], "\n".join(problems)
    after = count_compute_nodes(_simplified([t.edge for t in outputs], [])[0])
    assert after < before and any(s.rule == "cse" for s in trace)


def _simplified(edges, trace):
    out = simplify(list(edges), {"B": 64, "T": 64}, H200, trace)
    return out, 1


def test_dead_code_disappears_and_values_stay():
    x = rc.input("x", ("B", 4))
    inner = x.reciprocal()
    y = inner.reciprocal().sin() + x.exp2().log2()  # both inner nodes are dead after the rules
    trace = []
    out = simplify([y.edge], {"B": 64}, H200, trace)
    names = [n.op.name for n in toposort([e.node for e in out])]
    assert "Recip" not in names and "Exp2" not in names and "Log2" not in names
    X = np.random.default_rng(0).uniform(0.5, 2, (3, 4)).astype(np.float32)
    np.testing.assert_allclose(evaluate_edges(out, {"x": X}, {}, "float64")[0],
                               rc.evaluate(y, {"x": X}, precision="float64"), rtol=1e-14)
    assert {"recip_recip", "log2_exp2"} <= {s.rule for s in trace}


def test_cse_of_a_duplicated_chain_leaves_one_copy():
    x = rc.input("x", (5,))
    a = (x.sin() * 2.0).exp2()
    b = (x.sin() * 2.0).exp2()
    trace = []
    out = simplify([(a + b).edge], {}, H200, trace)
    assert count_compute_nodes(out) == 4  # sin, mul, exp2, add
    X = np.linspace(-1, 1, 5).astype(np.float32)
    np.testing.assert_array_equal(evaluate_edges(out, {"x": X}, {}, "float64")[0],
                                  rc.evaluate(a + b, {"x": X}, precision="float64"))


@settings(max_examples=40, **SETTINGS)
@given(index=st.integers(0, 10**6))
def test_simplify_keeps_the_outputs_of_random_graphs(index):
    """The fuzzer's random graphs: simplify (every rule, CSE, dead code) changes no output beyond the
    float32 rounding of folded constants and the few-ulp rules (tolerance: 1e-6 relative)."""
    from refcomp import fuzz
    graph = fuzz.generate(12345, index)
    outputs = graph.build("")
    bindings = fuzz.bindings_for(12345, index)
    edges = [t.edge for t in outputs.values()]
    trace = []
    new = simplify(list(edges), {"B": 64, "T": 64}, H200, trace)
    for k, binding in enumerate(bindings):
        feeds = graph.feeds("", binding, k)
        try:
            before = evaluate_edges(edges, feeds, binding, "float64")
        except (rc.BindingError, rc.FeedError) as refused:  # a view that does not fit, or stray ids:
            with pytest.raises(type(refused)):  # the simplified graph refuses too
                evaluate_edges(new, feeds, binding, "float64")
            continue
        after = evaluate_edges(new, feeds, binding, "float64")
        for a, b in zip(after, before):
            scale = max(1.0, float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0)))
            message = differ(a, b, rtol=1e-6, atol=1e-6 * scale)
            assert message is None, f"{message}\n{graph.code()}\n{[s.rule for s in trace]}"
