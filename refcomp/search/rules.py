"""Algebraic rewrite rules: each one a sentence — a name, a pattern, a replacement, a soundness condition.

A rule's pattern (`pattern.py`) matches a node, with its sources already rewritten, and binds names
to the edges it reads; the replacement is built from them. "Sound" means: the replacement computes
the same real-number function on the stated domain; where float32 rounding can differ, the
condition says by how much. Rules that hold only on part of the domain are not rules here:
exp2(log2 x) = x needs x > 0, so it is absent.

Fusion and schedule rules (which change kernels, not values) are in `fusion_rules.py`.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ops.primitives import BINARY, OPS, TERNARY, UNARY, Edge, Node, make_node
from ..symbolic.dims import dims_equal
from ..symbolic.view import View, ViewStack
from .pattern import Apply, Const, Context, Rule, Var, any_of, ops, unshared

__all__ = ["ALGEBRA", "RULES_BY_NAME", "Context", "Rule"]

Add, Mul, Recip, Log2, Exp2, Contiguous = ops("Add", "Mul", "Recip", "Log2", "Exp2", "Contiguous")
# any op with a NumPy meaning on scalars (a copy is no arithmetic: drop_copy removes it)
Arithmetic = any_of([name for name, op in OPS.items() if op.kind in (UNARY, BINARY, TERNARY)], "f")
x, a, b = Var("x"), Var("a"), Var("b")


def _broadcast_constant(value: float, shape) -> Edge:
    node = make_node("Constant", value=value)
    views = (
        ViewStack.of_buffer(()).reshape((1,) * len(shape)).expand(shape) if shape else ViewStack.of_buffer(())
    )
    return Edge(node, views)


def folded(node: Node) -> Edge:
    """its value, computed in float32"""
    args = [np.float32(s.node.attrs["value"]) for s in node.srcs]
    with np.errstate(all="ignore"):
        value = node.op.numpy(args, node.attrs, np.float32)
    return _broadcast_constant(float(np.float32(value)), node.shape)


ALGEBRA: list[Rule] = [
    Rule("add_zero", Add(Const(0.0), x), x,
         "exact, except that -0.0 + 0.0 is +0.0 (an equal value)"),
    Rule("mul_one", Mul(Const(1.0), x), x,
         "exact for every float, NaN and infinities included"),
    Rule("recip_recip", Recip(Recip(x)), x,
         "exact in real arithmetic for x != 0 (and for 0 and +-inf through the infinities); in float32 "
         "within 1 ulp wherever 1/x is a normal number. Not across a pad between the two: a padded 0 is no "
         "recip(x), and recip(0) = inf"),
    Rule("log2_exp2", Log2(Exp2(x)), x,
         "exact in real arithmetic for every x; in float32 whenever exp2(x) neither overflows nor "
         "underflows (|x| < 126), and the rewrite is the better answer outside that range. Not across a pad "
         "between the two: log2 of a padded 0 is -inf"),
    Rule("exp2_product", Mul(unshared(Exp2(a)), unshared(Exp2(b))), Exp2(Add(a, b)),
         "exact in real arithmetic; in float32 within a few ulp while exp2(a), exp2(b) and exp2(a+b) are "
         "finite and normal. Applied only when both exp2 nodes have no other reader, so it saves an op, and "
         "never to a padded read of an exp2 (a padded 0 is no exp2(a))"),
    Rule("fold_constants", Arithmetic(Const(), ...), folded,
         "exact: the value is computed with the same float32 operation (transcendentals with NumPy's, "
         "which may differ from CUDA's by an ulp)"),
    Rule("drop_copy", Contiguous(x), x,
         "exact: a copy reads the same values through the same view (program outputs are made dense "
         "again after the search)"),
]



def joined_view(first: Edge, second: Edge) -> Optional[Edge]:
    """One read of a node equal to `first + second` when the two are padded reads of that node side by
    side along one axis (a join, `cat` or `stack`, of neighbouring views: k and v sliced from one q/k/v
    matmul), or None. Each reads the node where its mask holds and 0 elsewhere; the masks are
    neighbouring ranges [lo, m) and [m, hi) of one axis (full on the others), and the two reads are
    one affine view there: the same strides on every other axis, and an offset and stride of the join
    axis that fit both parts (checked at each part's two ends, which settles an affine function).
    The joined read keeps the mask [lo, hi): three parts join two at a time."""
    if first.node is not second.node or first.node.op.literal:
        return None
    below, (a, b) = first.views.views[:-1], (first.views.top, second.views.top)
    if below != second.views.views[:-1] or not all(dims_equal(x, y) for x, y in zip(a.shape, b.shape)):
        return None
    full = lambda r, n: dims_equal(r[0], 0) and dims_equal(r[1], n)  # noqa: E731
    split = [k for k, (ra, rb, n) in enumerate(zip(a.ranges(), b.ranges(), a.shape))
             if not (full(ra, n) and full(rb, n))]
    if len(split) != 1:
        return None
    (t,) = split
    if dims_equal(a.ranges()[t][0], b.ranges()[t][1]):
        a, b = b, a  # a is the part before b
    (lo, m), (m_b, hi) = a.ranges()[t], b.ranges()[t]
    others = [(x, y) for k, (x, y) in enumerate(zip(a.strides, b.strides)) if k != t]
    if not dims_equal(m, m_b) or not all(dims_equal(x, y) for x, y in others):
        return None
    at = lambda view, i: view.offset + view.strides[t] * i  # noqa: E731 (the join axis's part of the index)
    stride = a.strides[t] if not dims_equal(m - lo, 1) else at(b, m) - at(a, lo)
    offset = at(a, lo) - stride * lo
    ends = [(a, lo), (a, m - 1), (b, m), (b, hi - 1)]
    if not all(dims_equal(at(view, i), offset + stride * i) for view, i in ends):
        return None
    strides = tuple(stride if k == t else x for k, x in enumerate(a.strides))
    ranges = tuple((lo, hi) if k == t else r for k, r in enumerate(a.ranges()))
    return Edge(first.node, ViewStack(below + (View(a.shape, strides, offset).with_mask(ranges),)))


class _Join(Apply):
    """add(a, b) where a and b are padded reads of one node side by side (`joined_view`): binds `joined`."""

    def bind_node(self, node, bound, ctx, through=None):
        matched = super().bind_node(node, bound, ctx, through)
        if matched is None or through is not None:
            return None
        joined = joined_view(*node.srcs)
        return None if joined is None else {**matched, "joined": joined}

    def __str__(self):
        return "add(a, b) of neighbouring padded reads of one node"


ALGEBRA.append(
    Rule("join_views", _Join(frozenset({"Add"}), (a, b)), Var("joined"),
         "exact: each element of the join is the element its part reads (the other part reads a padded "
         "0 there, and x + 0.0 is x, -0.0 included up to its sign), now read through one view"),
)

RULES_BY_NAME = {r.name: r for r in ALGEBRA}
