"""Algebraic rewrite rules: each one a sentence — a name, a pattern, a replacement, a soundness condition.

A rule's pattern (`pattern.py`) matches a node, with its sources already rewritten, and binds names
to the edges it reads; the replacement is built from them. "Sound" means: the replacement computes
the same real-number function on the stated domain; where float32 rounding can differ, the
condition says by how much. Rules that hold only on part of the domain are not rules here:
exp2(log2 x) = x needs x > 0, so it is absent.

Fusion and schedule rules (which change kernels, not values) are in `fusion_rules.py`.
"""
from __future__ import annotations

import numpy as np

from ..ops.primitives import BINARY, OPS, TERNARY, UNARY, Edge, Node, make_node
from ..symbolic.view import ViewStack
from .pattern import Const, Context, Rule, Var, any_of, ops, unshared

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

RULES_BY_NAME = {r.name: r for r in ALGEBRA}
