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

CSE, dead-code removal and `simplify` as a whole are verified the same way, the latter on the
fuzzer's random graphs. The fusion rules, which change kernels and never values, are verified in
tests/test_fusion_rules.py.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

import refcomp as rc
from refcomp import Tensor
from refcomp.ops.graph import symbols_of, toposort
from refcomp.ops.primitives import ELEMENTWISE, OPS
from refcomp.search.cost import H200
from refcomp.search.rewrite import count_compute_nodes, rebuild
from refcomp.search.pattern import Apply, Const, Rule, Var, ops
from refcomp.search.rules import ALGEBRA, RULES_BY_NAME
from refcomp.search.search import _context, simplify
from refcomp.symbolic.dims import evaluate_dim

EPS64 = float(np.finfo(np.float64).eps)
EPS32 = float(np.finfo(np.float32).eps)
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                      HealthCheck.filter_too_much,
                                                      HealthCheck.large_base_example])
EXAMPLES = int(os.environ.get("REFCOMP_RULE_EXAMPLES", "30"))  # per property; raise it for a deeper run
MAX_ELEMENTS = 400  # per tensor, at the largest binding
MAX_BINDING = {"B": 3, "T": 4}


# --- cases and the harness -------------------------------------------------------------------------
@dataclass
class Case:
    """Graph outputs, the domain of every input, the bindings to check at and a data seed."""

    outputs: list
    domains: dict = field(default_factory=dict)  # input name -> (lo, hi, signed): |value| in [lo, hi]
    bindings: list = field(default_factory=lambda: [{}])
    seed: int = 0
    scale: float = 1.0  # the largest magnitude an intermediate value reaches: atol is relative to it

    def feeds(self, k: int) -> dict:
        rng = np.random.default_rng([self.seed, k])
        out = {}
        for node in toposort([t.node for t in self.outputs]):
            if node.op.name != "Input":
                continue
            name = node.attrs["name"]
            shape = tuple(evaluate_dim(d, self.bindings[k]) for d in node.attrs["shape"])
            lo, hi, signed = self.domains.get(name, (-2.0, 2.0, False))
            values = rng.uniform(lo, hi, size=shape)
            if signed:
                values = values * rng.choice([-1.0, 1.0], size=shape)
            out[name] = values.astype(np.float32)
        return out


def own_dims(tensors, binding: dict) -> dict:
    """The part of a binding that names dims of these tensors' graph (dims= refuses any other)."""
    names = {s.name for s in symbols_of(toposort([t.node for t in tensors]), [t.edge for t in tensors])}
    return {k: v for k, v in binding.items() if k in names}


def evaluate_edges(edges, feeds: dict, binding: dict, precision: str) -> list:
    tensors = [Tensor(e) for e in edges]
    names = {n.attrs["name"] for n in toposort([e.node for e in edges]) if n.op.name == "Input"}
    return rc.evaluate(tensors, {k: v for k, v in feeds.items() if k in names},
                       dims=own_dims(tensors, binding), precision=precision)


def differ(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> Optional[str]:
    """None when equal within |got - want| <= atol + rtol |want|, NaN and infinities exactly where want has them."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    finite = np.isfinite(want)
    special = ~finite & ~((np.isnan(got) & np.isnan(want)) | (got == want))
    with np.errstate(invalid="ignore"):
        close = np.abs(got - want) <= atol + rtol * np.abs(want)
    bad = special | (finite & ~close)
    if not bad.any():
        return None
    i = tuple(np.argwhere(bad)[0])
    return f"{int(bad.sum())}/{bad.size} elements differ, first at {i}: {got[i]!r} vs {want[i]!r}"


def apply_rule(rule: Rule, edges):
    """One pass of a rule over the graph, exactly as search.simplify applies it."""
    ctx = _context(edges)
    return rebuild(edges, lambda n: rule.rewrite(n, ctx))


def verify(case: Case, transform: Callable, tolerances: dict) -> tuple[int, list[str]]:
    """(sites rewritten, problems): the graph before and after `transform` under the reference.

    `tolerances` maps a precision ("float64", "float32") to dict(rtol=, atol=)."""
    edges = [t.edge for t in case.outputs]
    new_edges, count = transform(edges)
    problems = []
    for k, binding in enumerate(case.bindings):
        feeds = case.feeds(k)
        for precision, tol in tolerances.items():
            before = evaluate_edges(edges, feeds, binding, precision)
            after = evaluate_edges(new_edges, feeds, binding, precision)
            for i, (a, b) in enumerate(zip(after, before)):
                message = differ(a, b, rtol=tol["rtol"], atol=tol["atol"] * case.scale)
                if message:
                    problems.append(f"{precision} at {binding}, output {i}: {message}")
    return count, problems


def verify_rule(rule: Rule, case: Case, tolerances: dict) -> tuple[int, list[str]]:
    return verify(case, lambda edges: apply_rule(rule, edges), tolerances)


# --- strategies: shapes, bindings, views -------------------------------------------------------------
def _elements(shape) -> int:
    return int(np.prod([evaluate_dim(d, MAX_BINDING) for d in shape])) if shape else 1


@st.composite
def shapes(draw, min_axes: int = 1, max_axes: int = 3):
    return tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, "B", "T"]), min_size=min_axes, max_size=max_axes)))


@st.composite
def binding_pairs(draw):
    return [{"B": draw(st.integers(1, MAX_BINDING["B"])), "T": draw(st.integers(1, MAX_BINDING["T"]))} for _ in range(2)]


def apply_view(t: Tensor, op) -> Tensor:
    kind = op[0]
    if kind == "permute":
        return t.permute(op[1])
    if kind == "flip":
        return t.flip(op[1])
    if kind == "getitem":
        return t[op[1]]
    if kind == "pad":
        return t.pad(op[1])
    if kind == "expand_lead":
        return t.unsqueeze(0).expand(op[1], *[-1] * t.ndim)
    if kind == "expand_one":
        sizes = [-1] * t.ndim
        sizes[op[1]] = op[2]
        return t.expand(*sizes)
    if kind == "flatten":
        return t.reshape(-1)
    if kind == "merge":
        a = op[1]
        return t.reshape(t.shape[:a] + (-1,) + t.shape[a + 2:])
    if kind == "split":
        a, k = op[1], op[2]
        return t.reshape(t.shape[:a] + (k, t.shape[a] // k) + t.shape[a + 1:])
    if kind == "unsqueeze":
        return t.unsqueeze(op[1])
    raise AssertionError(op)


def apply_views(t: Tensor, ops) -> Tensor:
    for op in ops:
        t = apply_view(t, op)
    return t


@st.composite
def view_op(draw, shape, masks: bool):
    nd = len(shape)
    kinds = ["flip", "getitem", "expand_lead", "unsqueeze", "flatten"] + (["permute", "merge"] if nd >= 2 else [])
    kinds += ["pad"] * masks
    kinds += ["expand_one"] * any(d == 1 for d in shape)
    kinds += ["split"] * any(isinstance(d, int) and d % 2 == 0 and d > 2 for d in shape)
    if nd == 0:
        kinds = ["unsqueeze", "expand_lead"]
    kind = draw(st.sampled_from(kinds))
    if kind == "permute":
        return ("permute", tuple(draw(st.permutations(range(nd)))))
    if kind == "flip":
        return ("flip", draw(st.integers(0, nd - 1)))
    if kind == "getitem":
        items = []
        for d in shape:
            if isinstance(d, int):
                start = draw(st.integers(0, d - 1))
                stop = draw(st.integers(start + 1, d))
                step = draw(st.sampled_from([1, 1, 2, -1]))
                items.append(slice(start, stop, step) if step > 0 else slice(stop - 1, start - 1 if start else None, -1))
            else:
                items.append(draw(st.sampled_from([slice(None), slice(None, None, 2), slice(None, None, -1)])))
        return ("getitem", tuple(items))
    if kind == "pad":
        return ("pad", [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape])
    if kind == "expand_lead":
        return ("expand_lead", draw(st.sampled_from([2, 3, "B"])))
    if kind == "expand_one":
        return ("expand_one", draw(st.sampled_from([a for a, d in enumerate(shape) if d == 1])), draw(st.sampled_from([2, 3, "T"])))
    if kind == "merge":
        return ("merge", draw(st.integers(0, nd - 2)))
    if kind == "split":
        return ("split", draw(st.sampled_from([a for a, d in enumerate(shape) if isinstance(d, int) and d % 2 == 0 and d > 2])), 2)
    if kind == "unsqueeze":
        return ("unsqueeze", draw(st.integers(-nd - 1, nd)))
    return ("flatten",)


@st.composite
def views(draw, t: Tensor, masks: bool = True, max_ops: int = 2):
    """(t read through 0..max_ops random views, the list of views to replay them on a same-shaped tensor)."""
    ops = []
    for _ in range(draw(st.integers(0, max_ops))):
        op = draw(view_op(t.shape, masks))
        viewed = apply_view(t, op)
        if _elements(viewed.shape) > MAX_ELEMENTS or len(viewed.shape) > 4:
            continue
        t = viewed
        ops.append(op)
    return t, ops


@st.composite
def constant_of(draw, value: float, shape):
    """A Constant equal to `value` everywhere, read through views that never mask (as the rules require)."""
    c = rc.constant(value)
    form = draw(st.sampled_from(["scalar", "broadcast", "broadcast_permuted"]))
    if form == "scalar" or not shape:
        return c
    b = c.broadcast_to(shape)
    if form == "broadcast_permuted" and len(shape) >= 2:
        b = b.transpose(0, -1).transpose(0, -1)
    return b


def _input(name: str, shape) -> Tensor:
    return rc.input(name, shape)


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
    padded_zero = a + rc.constant(0.0).broadcast_to(a.shape).pad([(1, 0)] + [(0, 0)] * (a.ndim - 1))[1:] if a.ndim else a
    return Case([out, out * 1.5, decoy, padded_zero], {"x": (0.0, 3.0, True)}, draw(binding_pairs()), draw(st.integers(0, 2**16)))


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
    return Case([out, out * 3.0, viewed_copy, copy], {"x": (-3.0, 3.0, False)}, draw(binding_pairs()), draw(st.integers(0, 2**16)))


def _exact():
    return {"float64": dict(rtol=0.0, atol=0.0), "float32": dict(rtol=0.0, atol=0.0)}


# name -> (strategy, tolerances by precision): each tolerance is what the rule's soundness states
RULE_CASES = {
    "add_zero": (add_zero_cases, _exact()),  # -0.0 + 0.0 = +0.0 compares equal
    "mul_one": (mul_one_cases, _exact()),
    "recip_recip": (recip_recip_cases, {"float64": dict(rtol=2 * EPS64, atol=0.0),  # 1/(1/x): within 1 ulp
                                        "float32": dict(rtol=EPS32, atol=0.0)}),
    "log2_exp2": (log2_exp2_cases, {"float64": dict(rtol=4 * EPS64, atol=4 * EPS64),  # a few ulp of max(1, |x|)
                                    "float32": dict(rtol=4 * EPS32, atol=4 * EPS32)}),
    # a few ulp, plus the rounding of a + b carried through exp2 (ln 2 * ulp(a + b) relative)
    "exp2_product": (exp2_product_cases, {"float64": dict(rtol=(4 + 2 * EXP2_BOUND) * EPS64, atol=0.0),
                                          "float32": dict(rtol=(4 + 2 * EXP2_BOUND) * EPS32, atol=0.0)}),
    # folding computes in float32: exact there but for NumPy's transcendentals (an ulp), and in float64
    # within the float32 roundings of the folded values (|values| stay below ~20 in these trees)
    # (atol relative to the largest intermediate: a rounding there survives a later cancellation)
    "fold_constants": (fold_constants_cases, {"float32": dict(rtol=4 * EPS32, atol=4 * EPS32),
                                              "float64": dict(rtol=4 * EPS32, atol=8 * EPS32)}),
    "drop_copy": (drop_copy_cases, _exact()),
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


Add, Mul, Recip, Log2, Exp2 = ops("Add", "Mul", "Recip", "Log2", "Exp2")
x, a, b = Var("x"), Var("a"), Var("b")
WRONG_RULES = {
    "mul_one": Rule("mul_by_any_constant", Mul(Const(), x), x, "none (WRONG unless c = 1)"),
    "exp2_product": Rule("exp2_product_times", Mul(Exp2(a), Exp2(b)), Exp2(Mul(a, b)), "none (WRONG)"),
    "log2_exp2": Rule("log2_exp2_across_pads", Log2(_AcrossPads(frozenset({"Exp2"}), (x,))), x,
                      "none (WRONG across a pad)"),
    "recip_recip": Rule("recip_is_identity", Recip(x), x, "none (WRONG)"),
}


@pytest.mark.parametrize("name", sorted(WRONG_RULES))
def test_harness_catches_a_wrong_rule(name):
    strategy, tolerances = RULE_CASES[name]
    wrong = WRONG_RULES[name]
    assert wrong not in ALGEBRA

    def caught(case) -> bool:
        count, problems = verify_rule(wrong, case, tolerances)
        return count > 0 and bool(problems)

    case = find(strategy(), caught, settings=settings(max_examples=200, database=None, **SETTINGS))
    assert caught(case)


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
    count, problems = verify(case, lambda edges: _simplified(edges, trace), _exact())
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
