"""Verification of every rewrite the search may apply: nothing unverified ships.

Algebraic rules (`refcomp.search.rules.ALGEBRA`): for each rule, a Hypothesis strategy builds small
graphs where the rule applies (shapes of 1-3 axes, symbolic dims bound at two bindings, random
data inside the rule's stated domain), with views (permute, slice, pad, expand, flip, reshape) on
the edges into, between and out of the matched nodes, plus decoy sites the rule must leave alone
(a padded constant, an exp2 with a second reader, a pad between the two nodes of a pattern).
The harness applies the rule once with `rebuild`, as `search.simplify` does, asserts that it
fired, and compares the graphs before and after under the NumPy reference: in float64 always, and
in float32 where the rule's soundness statement makes a float32 claim, each at the tolerance that
statement gives. A rule added to ALGEBRA without a strategy here fails `test_every_rule_has_a_generator`.

The harness is itself tested: deliberately wrong rules (x * c -> x, exp2(a) * exp2(b) ->
exp2(a * b), log2_exp2 without its pad check) must be caught.

The harness and the view strategies are in tests/rule_harness.py; CSE, dead-code removal and
`simplify` as a whole are verified with it in tests/test_simplify.py. The fusion rules, which change
kernels and never values, are verified in tests/test_fusion_rules.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

import refcomp as rc
from refcomp.ops.primitives import ELEMENTWISE, OPS, Edge
from refcomp.search.rewrite import count_compute_nodes
from refcomp.search.pattern import Apply, Const, Rule, Var, ops
from refcomp.search.rules import ALGEBRA, RULES_BY_NAME
from refcomp.symbolic.view import View, ViewStack

from rule_harness import (
    Case,
    EPS32,
    EPS64,
    EXAMPLES,
    SETTINGS,
    _input,
    apply_rule,
    apply_views,
    binding_pairs,
    constant_of,
    exact,
    shapes,
    verify_rule,
    views,
)


# --- one strategy per algebraic rule -----------------------------------------------------------------
@st.composite
def add_zero_cases(draw):
    shape = draw(shapes())
    x = _input("x", shape)
    a, _ = draw(views(x))
    zero = draw(constant_of(0.0, a.shape))
    y = a + zero if draw(st.booleans()) else zero + a
    out, _ = draw(views(y))
    decoy = a + draw(constant_of(float(draw(st.sampled_from([0.5, -1.25]))), a.shape))
    padded_zero = (
        a + rc.constant(0.0).broadcast_to(a.shape).pad([(1, 0)] + [(0, 0)] * (a.ndim - 1))[1:]
        if a.ndim
        else a
    )
    return Case(
        [out, out * 1.5, decoy, padded_zero],
        {"x": (0.0, 3.0, True)},
        draw(binding_pairs()),
        draw(st.integers(0, 2**16)),
    )


@st.composite
def mul_one_cases(draw):
    shape = draw(shapes())
    x = _input("x", shape)
    a, _ = draw(views(x))
    one = draw(constant_of(1.0, a.shape))
    y = a * one if draw(st.booleans()) else one * a
    out, _ = draw(views(y))
    decoy = a * draw(constant_of(float(draw(st.sampled_from([2.0, -0.5, 3.0]))), a.shape))
    outputs = [out, out + 1.0, decoy]
    if a.ndim:  # ones read through a pad are 0 in the border: x * that is not x
        outputs.append(a * rc.constant(1.0).broadcast_to(a.shape).pad([(0, 1)] + [(0, 0)] * (a.ndim - 1))[1:])
    return Case(outputs, {"x": (0.0, 3.0, True)}, draw(binding_pairs()), draw(st.integers(0, 2**16)))


@st.composite
def recip_recip_cases(draw):
    shape = draw(shapes())
    x = _input("x", shape)
    a, _ = draw(views(x))  # a pad here reads 0: recip(recip(0)) = 0, as the rewrite reads
    middle, ops = draw(views(a.reciprocal(), masks=False))
    out, _ = draw(views(middle.reciprocal()))
    outputs = [out, out * 2.0]
    if draw(st.booleans()) and a.ndim:  # decoy: a pad between the two recips reads 0, and recip(0) = inf
        outputs.append(a.reciprocal().pad([(1, 1)] + [(0, 0)] * (a.ndim - 1)).reciprocal())
    return Case(outputs, {"x": (0.25, 4.0, True)}, draw(binding_pairs()), draw(st.integers(0, 2**16)))


@st.composite
def log2_exp2_cases(draw):
    shape = draw(shapes())
    x = _input("x", shape)
    a, _ = draw(views(x))
    middle, _ = draw(views(a.exp2(), masks=False))
    out, _ = draw(views(middle.log2()))
    outputs = [out, out + 1.0]
    if draw(st.booleans()) and a.ndim:  # decoy: log2 of a padded 0 is -inf, not the padded x (0)
        outputs.append(a.exp2().pad([(0, 2)] + [(0, 0)] * (a.ndim - 1)).log2())
    return Case(outputs, {"x": (0.0, 8.0, True)}, draw(binding_pairs()), draw(st.integers(0, 2**16)))


EXP2_BOUND = 6.0  # |a|, |b| <= this: exp2 of each, and of the sum, stays normal in float32


@st.composite
def exp2_product_cases(draw):
    shape = draw(shapes())
    xa, xb = _input("a", shape), _input("b", shape)
    a, ops = draw(views(xa))
    b = apply_views(xb, ops)
    ea, mid = draw(views(a.exp2(), masks=False))
    eb = apply_views(b.exp2(), mid)
    y = ea * eb
    out, _ = draw(views(y))
    outputs = [out, out * 0.5]
    if draw(st.booleans()):  # decoy: an exp2 with a second reader is left alone
        shared = xa.exp2()
        outputs += [shared * xb.exp2(), shared]
    if draw(st.booleans()) and a.ndim:  # decoy: a padded exp2 reads 0 in the border, exp2(a + b) does not
        pad = [(1, 0)] + [(0, 0)] * (a.ndim - 1)
        outputs.append(a.exp2().pad(pad) * b.exp2().pad(pad))
    domain = (0.0, EXP2_BOUND, True)
    return Case(outputs, {"a": domain, "b": domain}, draw(binding_pairs()), draw(st.integers(0, 2**16)))


F32 = st.floats(-4.0, 4.0, width=32, allow_subnormal=False)


def _leaf(draw):
    value = float(draw(st.one_of(F32, st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0]))))
    return rc.constant(value), value


@st.composite
def constant_tree(draw, depth: int, top: bool = False):
    """(Tensor of constants only, its float64 value, the largest |intermediate|): primitives on constants.

    Discontinuous ops (<, fmod) read leaves only, so float32 and float64 take the same branch."""
    if not top and (depth == 0 or draw(st.integers(0, 3)) == 0):
        t, v = _leaf(draw)
        return t, v, abs(v)
    op = draw(st.sampled_from(["add", "mul", "lt", "fmod", "where", "sin", "exp2", "log2", "sqrt", "recip"]))
    if op == "where":  # a select on a leaf condition: the branch not taken may be anything, inf included
        (c, vc), (b, vb) = _leaf(draw), _leaf(draw)
        a, va, sa = draw(constant_tree(depth - 1)) if vc != 0.0 else (rc.constant(math.inf), math.inf, 0.0)
        return rc.where(c, a, b), (va if vc != 0.0 else vb), max(sa, abs(vb))
    if op in ("lt", "fmod"):
        (a, va), (b, vb) = _leaf(draw), _leaf(draw)
        if op == "lt":
            return a < b, float(va < vb), max(abs(va), abs(vb))
        if vb != 0.0:
            return rc.fmod(a, b), math.fmod(va, vb), max(abs(va), abs(vb))
        return a.sin(), math.sin(va), max(abs(va), 1.0)  # out of fmod's domain: any op will do
    a, va, sa = draw(constant_tree(depth - 1))
    if op in ("add", "mul"):
        b, vb, sb = draw(constant_tree(depth - 1))
        v = va + vb if op == "add" else va * vb
        return (a + b if op == "add" else a * b), v, max(sa, sb, abs(v))
    if op == "exp2" and abs(va) <= 6:
        return a.exp2(), 2.0 ** va, max(sa, 2.0 ** va)
    if op == "log2" and va >= 2.0 ** -10:
        return a.log2(), math.log2(va), max(sa, abs(math.log2(va)))
    if op == "sqrt" and va >= 0:
        return a.sqrt(), math.sqrt(va), sa
    if op == "recip" and abs(va) >= 2.0 ** -10:
        return a.reciprocal(), 1.0 / va, max(sa, abs(1.0 / va))
    return a.sin(), math.sin(va), max(sa, 1.0)  # sin, or an op whose domain `a` is outside of


@st.composite
def fold_constants_cases(draw):
    shape = draw(shapes())
    x = _input("x", shape)
    outputs, scale = [], 1.0
    for _ in range(draw(st.integers(1, 3))):
        tree, value, size = draw(constant_tree(3, top=True))
        scale = max(scale, 2 * size)
        a, _ = draw(views(x))
        c = tree.broadcast_to(a.shape) if draw(st.booleans()) else tree
        outputs.append(a * c + 1.0)
    # a masked constant is not a constant: pad(1) + 1 is 1 in the border, not 2
    outputs.append(rc.constant(1.0).broadcast_to(shape).pad([(1, 1)] + [(0, 0)] * (len(shape) - 1)) + 1.0)
    return Case(outputs, {"x": (-2.0, 2.0, False)}, draw(binding_pairs()), draw(st.integers(0, 2**16)), scale)


@st.composite
def drop_copy_cases(draw):
    shape = draw(shapes())
    x = _input("x", shape)
    a, _ = draw(views(x))
    copy = a.contiguous()
    if draw(st.booleans()):
        copy = copy.contiguous()
    out, _ = draw(views(copy))
    viewed_copy, _ = draw(views((a * 2.0).contiguous()))
    return Case(
        [out, out * 3.0, viewed_copy, copy],
        {"x": (-3.0, 3.0, False)},
        draw(binding_pairs()),
        draw(st.integers(0, 2**16)),
    )


def _part(t, axis: int, lo: int, hi=None):
    """t[..., lo:hi, ...] on `axis` (hi None: the single index lo, the axis dropped)."""
    where = slice(lo, hi) if hi is not None else lo
    return t[(slice(None),) * axis + (where,)]


@st.composite
def join_views_cases(draw):
    """Joins of neighbouring slices of one viewed tensor (cat at a split, three parts, a stack of two
    rows at any distance) where the rule fires, and decoys it must leave or join correctly (parts in
    the wrong order, a slice joined with a padded read of another tensor)."""
    shape = list(draw(shapes(max_axes=2)))
    shape.insert(draw(st.integers(0, len(shape))), draw(st.integers(3, 6)))
    x = _input("x", tuple(shape))
    a, _ = draw(views(x, masks=False))
    axes = [k for k, d in enumerate(a.shape) if isinstance(d, int) and d >= 3]
    if not axes:
        a, axes = x, [k for k, d in enumerate(x.shape) if isinstance(d, int) and d >= 3]
    t = draw(st.sampled_from(axes))
    n = a.shape[t]
    m = draw(st.integers(1, n - 1))
    i, j = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
    outputs = [
        rc.cat([_part(a, t, 0, m), _part(a, t, m, n)], t) * 2.0,
        rc.stack([_part(a, t, i), _part(a, t, j)], draw(st.integers(0, a.ndim - 1))),
        rc.cat([_part(a, t, m, n), _part(a, t, 0, m)], t),  # out of order: joined only where affine
        rc.cat([_part(a, t, 0, m), (_part(a, t, m, n) * 0.5)], t),  # one part computed: no join
    ]
    if n >= 4:
        outputs.append(rc.cat([_part(a, t, 0, 1), _part(a, t, 1, 3), _part(a, t, 3, n)], t) + 1.0)
    return Case(outputs, {"x": (-3.0, 3.0, False)}, draw(binding_pairs()), draw(st.integers(0, 2**16)))


# name -> (strategy, tolerances by precision): each tolerance is what the rule's soundness states
RULE_CASES = {
    "add_zero": (add_zero_cases, exact()),  # -0.0 + 0.0 = +0.0 compares equal
    "mul_one": (mul_one_cases, exact()),
    "recip_recip": (
        recip_recip_cases,
        {
            "float64": dict(rtol=2 * EPS64, atol=0.0),  # 1/(1/x): within 1 ulp
            "float32": dict(rtol=EPS32, atol=0.0),
        },
    ),
    "log2_exp2": (
        log2_exp2_cases,
        {
            "float64": dict(rtol=4 * EPS64, atol=4 * EPS64),  # a few ulp of max(1, |x|)
            "float32": dict(rtol=4 * EPS32, atol=4 * EPS32),
        },
    ),
    # a few ulp, plus the rounding of a + b carried through exp2 (ln 2 * ulp(a + b) relative)
    "exp2_product": (
        exp2_product_cases,
        {
            "float64": dict(rtol=(4 + 2 * EXP2_BOUND) * EPS64, atol=0.0),
            "float32": dict(rtol=(4 + 2 * EXP2_BOUND) * EPS32, atol=0.0),
        },
    ),
    # folding computes in float32: exact there but for NumPy's transcendentals (an ulp), and in float64
    # within the float32 roundings of the folded values (|values| stay below ~20 in these trees)
    # (atol relative to the largest intermediate: a rounding there survives a later cancellation)
    "fold_constants": (
        fold_constants_cases,
        {"float32": dict(rtol=4 * EPS32, atol=4 * EPS32), "float64": dict(rtol=4 * EPS32, atol=8 * EPS32)},
    ),
    "drop_copy": (drop_copy_cases, exact()),
    "join_views": (join_views_cases, exact()),  # the same elements, read through one view
}


def test_every_rule_has_a_generator():
    missing = [r.name for r in ALGEBRA if r.name not in RULE_CASES]
    assert not missing, f"rules without a verification strategy in tests/test_rules.py: {missing}"
    for r in ALGEBRA:
        assert r.doc and r.soundness, f"rule {r.name} must state its pattern and soundness"


@pytest.mark.parametrize("name", [r.name for r in ALGEBRA])
def test_rule_is_sound_where_it_fires(name):
    strategy, tolerances = RULE_CASES[name]
    rule = RULES_BY_NAME[name]

    @settings(max_examples=EXAMPLES, **SETTINGS)
    @given(strategy())
    def check(case):
        count, problems = verify_rule(rule, case, tolerances)
        assert count > 0, f"{name} did not fire on a graph built for it"
        assert problems == [], "\n".join(problems)

    check()


def test_op_properties_agree_with_the_numpy_meanings():
    """The fields rules test (`commutative`, `safe_under_pad`) are claims about each op's NumPy meaning:
    check them there, both ways, so a wrong field (or a changed op) fails here, not in a rule."""
    rng = np.random.default_rng(0)
    for op in OPS.values():
        if op.kind not in ELEMENTWISE:
            assert not (op.commutative or op.safe_under_pad), op.name
            continue
        arity = {"unary": 1, "copy": 1, "binary": 2, "ternary": 3}[op.kind]
        zeros = [np.zeros(4, np.float32) for _ in range(arity)]
        with np.errstate(all="ignore"):
            at_zero = op.numpy(zeros, {}, np.float32)
        assert op.safe_under_pad == bool(np.all(at_zero == 0)), f"{op.name}: f(0) = {at_zero[0]}"
        if arity == 2:
            p, q = (rng.uniform(-3, 3, 64).astype(np.float32) for _ in range(2))
            with np.errstate(all="ignore"):
                swapped = np.array_equal(op.numpy([p, q], {}, np.float32), op.numpy([q, p], {}, np.float32))
            assert op.commutative == swapped, op.name
        else:
            assert not op.commutative, op.name


def test_rule_patterns_read_as_their_algebra():
    docs = {r.name: r.doc for r in ALGEBRA}
    assert docs["recip_recip"] == "recip(recip(x)) -> x"
    assert docs["exp2_product"] == "mul(unshared exp2(a), unshared exp2(b)) -> exp2(add(a, b))"
    with pytest.raises(AssertionError):  # a match through an edge is only defined for elementwise ops
        Recip(ops("SumReduce")[0](x))


def test_rules_keep_shapes_and_fire_through_views():
    """A concrete case per rule, with views on every edge, and the rewritten node count."""
    x = rc.input("x", ("B", 3))
    y = x.pad([(0, 0), (1, 0)]).reciprocal().permute(1, 0).reciprocal().flip(0)
    new, count = apply_rule(RULES_BY_NAME["recip_recip"], [y.edge])
    assert count == 1 and count_compute_nodes(new) == 0  # the output reads x through the composed views
    assert [str(d) for d in new[0].shape] == [str(d) for d in y.shape]


# --- the harness catches wrong rules -------------------------------------------------------------------
class _AcrossPads(Apply):
    """A nested pattern that (WRONGLY) matches through a pad whatever its op."""

    def bind(self, edge, bound, ctx):
        return self.bind_node(edge.node, bound, ctx, through=edge) if edge.node.op.name in self.ops else None


class _UnmaskedFirst(Apply):
    """(WRONGLY) a stack of two rows of one node as the first row read twice: its mask dropped, whatever
    the second row reads (a row stacked is read with stride 0 along the new axis, so this stays inside
    the buffer; it is right only where both rows are one)."""

    def bind_node(self, node, bound, ctx, through=None):
        if node.op.name != "Add":
            return None
        first, second = node.srcs
        if first.node is not second.node or first.node.op.literal or first.views.top.mask is None:
            return None
        top = first.views.top
        if not all(lo == 0 and hi == n or (hi == lo + 1 and s == 0)
                   for (lo, hi), n, s in zip(top.mask, top.shape, top.strides)):
            return None
        unmasked = ViewStack(first.views.views[:-1] + (View(top.shape, top.strides, top.offset),))
        return {"joined": Edge(first.node, unmasked)}


Add, Mul, Recip, Log2, Exp2 = ops("Add", "Mul", "Recip", "Log2", "Exp2")
x, a, b = Var("x"), Var("a"), Var("b")
WRONG_RULES = {
    "mul_one": Rule("mul_by_any_constant", Mul(Const(), x), x, "none (WRONG unless c = 1)"),
    "exp2_product": Rule("exp2_product_times", Mul(Exp2(a), Exp2(b)), Exp2(Mul(a, b)), "none (WRONG)"),
    "log2_exp2": Rule("log2_exp2_across_pads", Log2(_AcrossPads(frozenset({"Exp2"}), (x,))), x,
                      "none (WRONG across a pad)"),
    "recip_recip": Rule("recip_is_identity", Recip(x), x, "none (WRONG)"),
    "join_views": Rule("join_any_two_reads", _UnmaskedFirst(frozenset({"Add"}), (a, b)), Var("joined"),
                       "none (WRONG unless the parts are neighbours in one view)"),
}


@pytest.mark.parametrize("name", sorted(WRONG_RULES))
def test_harness_catches_a_wrong_rule(name):
    strategy, tolerances = RULE_CASES[name]
    wrong = WRONG_RULES[name]
    assert wrong not in ALGEBRA

    def caught(case) -> bool:
        count, problems = verify_rule(wrong, case, tolerances)
        return count > 0 and bool(problems)

    # the first graph it catches is enough: not shrunk to the smallest (shrinking took most of the time)
    case = find(
        strategy(),
        caught,
        settings=settings(max_examples=200, database=None, phases=[Phase.generate], **SETTINGS),
    )
    assert caught(case)
