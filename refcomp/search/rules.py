"""Algebraic rewrite rules: each one a sentence — a name, a pattern, a replacement, a soundness condition.

A rule matches a node (with its sources already rewritten) and returns the edge that replaces it.
"Sound" means: the replacement computes the same real-number function on the stated domain; where
float32 rounding can differ, the condition says by how much. Rules that hold only on part of the
domain are not rules here: exp2(log2 x) = x needs x > 0, so it is absent.

Fusion and schedule rules (which change kernels, not values) are in `fusion.py`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..ops.primitives import ELEMENTWISE, Edge, Node, make_node
from ..symbolic.view import ViewStack
from .rewrite import compose, identity_edge


@dataclass(frozen=True)
class Rule:
    name: str
    doc: str
    soundness: str
    matches: Callable[[Node, "Context"], bool]
    replace: Callable[[Node], Edge]


@dataclass
class Context:
    consumers: dict[int, int]  # node id -> number of edges reading it
    outputs: set[int]  # node ids the program returns


def _constant(edge: Edge, value: Optional[float] = None) -> bool:
    """A numeric Constant read through views that never mask (so every element equals it)."""
    node = edge.node
    if node.op.name != "Constant" or not isinstance(node.attrs["value"], float):
        return False
    if any(v.mask is not None for v in edge.views.views):
        return False
    return value is None or node.attrs["value"] == value


def _other(node: Node, value: float) -> Optional[Edge]:
    a, b = node.srcs
    return b if _constant(a, value) else a if _constant(b, value) else None


def _through(edge: Edge) -> Edge:
    """What a unary node's source reads, seen through the edge that reads the unary node."""
    inner = edge.node.srcs[0]
    return Edge(inner.node, compose(inner.views, edge.views))


def _is(edge: Edge, op: str) -> bool:
    return edge.node.op.name == op


def _unmasked(edge: Edge) -> bool:
    """Every element of the edge reads an element of its node (no pad: a masked read is 0, not f(x))."""
    return all(v.mask is None for v in edge.views.views)


def _reads(edge: Edge, op: str) -> bool:
    """The edge reads an `op` node with no masked positions, so each element it reads is op(something)."""
    return _is(edge, op) and _unmasked(edge)


def _broadcast_constant(value: float, shape) -> Edge:
    node = make_node("Constant", value=value)
    views = ViewStack.of_buffer(()).reshape((1,) * len(shape)).expand(shape) if shape else ViewStack.of_buffer(())
    return Edge(node, views)


def _fold(node: Node) -> Edge:
    args = [np.float32(s.node.attrs["value"]) for s in node.srcs]
    with np.errstate(all="ignore"):
        value = node.op.numpy(args, node.attrs, np.float32)
    return _broadcast_constant(float(np.float32(value)), node.shape)


def _exp2_sum(node: Node) -> Edge:
    a, b = (_through(s) for s in node.srcs)
    return identity_edge(make_node("Exp2", (identity_edge(make_node("Add", (a, b))),)))


ALGEBRA: list[Rule] = [
    Rule("add_zero", "x + 0 -> x", "exact, except that -0.0 + 0.0 is +0.0 (an equal value)",
         lambda n, ctx: n.op.name == "Add" and _other(n, 0.0) is not None, lambda n: _other(n, 0.0)),
    Rule("mul_one", "x * 1 -> x", "exact for every float, NaN and infinities included",
         lambda n, ctx: n.op.name == "Mul" and _other(n, 1.0) is not None, lambda n: _other(n, 1.0)),
    Rule("recip_recip", "recip(recip(x)) -> x",
         "exact in real arithmetic for x != 0 (and for 0 and +-inf through the infinities); in float32 "
         "within 1 ulp wherever 1/x is a normal number. Not across a pad between the two: a padded 0 is no "
         "recip(x), and recip(0) = inf",
         lambda n, ctx: n.op.name == "Recip" and _reads(n.srcs[0], "Recip"), lambda n: _through(n.srcs[0])),
    Rule("log2_exp2", "log2(exp2(x)) -> x",
         "exact in real arithmetic for every x; in float32 whenever exp2(x) neither overflows nor "
         "underflows (|x| < 126), and the rewrite is the better answer outside that range. Not across a pad "
         "between the two: log2 of a padded 0 is -inf",
         lambda n, ctx: n.op.name == "Log2" and _reads(n.srcs[0], "Exp2"), lambda n: _through(n.srcs[0])),
    Rule("exp2_product", "exp2(a) * exp2(b) -> exp2(a + b)",
         "exact in real arithmetic; in float32 within a few ulp while exp2(a), exp2(b) and exp2(a+b) are "
         "finite and normal. Applied only when both exp2 nodes have no other reader, so it saves an op, and "
         "never to a padded read of an exp2 (a padded 0 is no exp2(a))",
         lambda n, ctx: (n.op.name == "Mul" and all(_reads(s, "Exp2") for s in n.srcs)
                         and all(ctx.consumers.get(s.node.id, 0) == 1 and s.node.id not in ctx.outputs for s in n.srcs)),
         _exp2_sum),
    Rule("fold_constants", "an elementwise op on constants -> its value",
         "exact: the value is computed with the same float32 operation (transcendentals with NumPy's, "
         "which may differ from CUDA's by an ulp)",
         lambda n, ctx: n.op.kind in ELEMENTWISE and n.op.name != "Contiguous" and all(_constant(s) for s in n.srcs), _fold),
    Rule("drop_copy", "contiguous(x) -> x",
         "exact: a copy reads the same values through the same view (program outputs are made dense "
         "again after the search)",
         lambda n, ctx: n.op.name == "Contiguous", lambda n: n.srcs[0]),
]

RULES_BY_NAME = {r.name: r for r in ALGEBRA}
