"""The harness that verifies rewrites (tests/test_rules.py, tests/test_simplify.py): a `Case` (graph
outputs, input domains, bindings, a data seed), `verify` (the graph before and after a transform under
the NumPy reference, at stated tolerances), and Hypothesis strategies for shapes, bindings and the
views placed on the edges into, between and out of matched nodes."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
from hypothesis import HealthCheck
from hypothesis import strategies as st

import refcomp as rc
from refcomp import Tensor
from refcomp.ops.graph import symbols_of, toposort
from refcomp.ops.graph import rebuild
from refcomp.search.pattern import Rule
from refcomp.search.search import _context
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
    """None when equal within |got - want| <= atol + rtol |want|, NaN and infinities exactly where want
    has them."""
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
    return tuple(
        draw(st.lists(st.sampled_from([1, 2, 3, 4, "B", "T"]), min_size=min_axes, max_size=max_axes))
    )


@st.composite
def binding_pairs(draw):
    return [
        {"B": draw(st.integers(1, MAX_BINDING["B"])), "T": draw(st.integers(1, MAX_BINDING["T"]))}
        for _ in range(2)
    ]


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
    kinds = ["flip", "getitem", "expand_lead", "unsqueeze", "flatten"] + (
        ["permute", "merge"] if nd >= 2 else []
    )
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
                items.append(
                    slice(start, stop, step)
                    if step > 0
                    else slice(stop - 1, start - 1 if start else None, -1)
                )
            else:
                items.append(
                    draw(st.sampled_from([slice(None), slice(None, None, 2), slice(None, None, -1)]))
                )
        return ("getitem", tuple(items))
    if kind == "pad":
        return ("pad", [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape])
    if kind == "expand_lead":
        return ("expand_lead", draw(st.sampled_from([2, 3, "B"])))
    if kind == "expand_one":
        return (
            "expand_one",
            draw(st.sampled_from([a for a, d in enumerate(shape) if d == 1])),
            draw(st.sampled_from([2, 3, "T"])),
        )
    if kind == "merge":
        return ("merge", draw(st.integers(0, nd - 2)))
    if kind == "split":
        return (
            "split",
            draw(
                st.sampled_from(
                    [a for a, d in enumerate(shape) if isinstance(d, int) and d % 2 == 0 and d > 2]
                )
            ),
            2,
        )
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


def exact():
    return {"float64": dict(rtol=0.0, atol=0.0), "float32": dict(rtol=0.0, atol=0.0)}
