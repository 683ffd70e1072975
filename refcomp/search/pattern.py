"""Patterns: a rewrite rule's match, written in the algebra it matches.

`Add(Const(0.0), x)` matches an Add node one of whose operands is the constant 0 (Add is
`commutative` in the op table, so in either order) and binds `x` to the other operand. A pattern
nested in another, `Recip(Recip(x))`, matches *through* the edge between the two nodes: `x` is bound
to what the inner node reads, seen through that edge (the views composed), so a replacement may read
it directly. A pad on that edge reads 0 where it masks, which is no recip(x), so a nested pattern
matches a masked edge only if its op is `safe_under_pad` (f(0) = 0). `Const(c)` matches a numeric
constant read with no mask, and `unshared(p)` matches `p` at a node read by this one alone and not
returned by the program. A replacement is a pattern over the bound names, built into fresh nodes
(`Exp2(Add(a, b))`), or a function of the matched node.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ..ops.primitives import ELEMENTWISE, OPS, Edge, Node, make_node
from ..ops.graph import compose, identity_edge

Bindings = dict[str, Edge]


@dataclass
class Context:
    """What a match may ask of the graph around the node."""

    consumers: dict[int, int]  # node id -> number of edges reading it
    outputs: set[int]  # node ids the program returns


def unmasked(edge: Edge) -> bool:
    """Every element of the edge reads an element of its node (no pad: a masked read is 0)."""
    return all(v.mask is None for v in edge.views.views)


def is_constant(edge: Edge, value: Optional[float] = None) -> bool:
    """A numeric Constant read through views that never mask (so every element equals it)."""
    node = edge.node
    if node.op.name != "Constant" or not isinstance(node.attrs["value"], float):
        return False
    return unmasked(edge) and (value is None or node.attrs["value"] == value)


class Pattern:
    def bind(self, edge: Edge, bound: Bindings, ctx: Context) -> Optional[Bindings]:
        """`bound` extended by matching this pattern at `edge`, or None when it does not match."""
        raise NotImplementedError

    def build(self, bound: Bindings) -> Edge:
        """The edge this pattern denotes once its names are bound (for replacements)."""
        raise TypeError(f"{self} cannot be built")

    def nestable(self) -> bool:
        """May appear inside another pattern (a match through an edge must be elementwise)."""
        return True


@dataclass(frozen=True)
class Var(Pattern):
    """Any edge; the same name twice must bind the same edge."""

    name: str

    def bind(self, edge, bound, ctx):
        if self.name not in bound:
            return {**bound, self.name: edge}
        old = bound[self.name]
        return bound if old.node is edge.node and old.views == edge.views else None

    def build(self, bound):
        return bound[self.name]

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class Const(Pattern):
    """A numeric constant (of `value`, if given) read with no mask."""

    value: Optional[float] = None

    def bind(self, edge, bound, ctx):
        return bound if is_constant(edge, self.value) else None

    def __str__(self):
        return "c" if self.value is None else f"{self.value:g}"


@dataclass(frozen=True)
class Apply(Pattern):
    """A node of one of `ops` whose sources match `srcs` (with `rest`, the last one repeats for the rest)."""

    ops: frozenset
    srcs: tuple
    rest: bool = False
    label: str = ""

    def __post_init__(self):
        assert self.ops and all(name in OPS for name in self.ops), self.ops
        assert all(p.nestable() for p in self.srcs), f"{self}: a pattern under another must be elementwise"

    def nestable(self):
        return all(OPS[name].kind in ELEMENTWISE for name in self.ops)

    def bind(self, edge, bound, ctx):
        node = edge.node
        if node.op.name not in self.ops or not (node.op.safe_under_pad or unmasked(edge)):
            return None
        return self.bind_node(node, bound, ctx, through=edge)

    def bind_node(
        self, node: Node, bound: Bindings, ctx: Context, through: Optional[Edge] = None
    ) -> Optional[Bindings]:
        """Match at `node` itself; `through` is the edge it is read by when nested in another pattern.
        Only a float32 node matches: a 16-bit one rounds its value, and a rule's equality holds for real
        numbers, not for another order of roundings; the rules' conditions are stated for float32, not
        for float64's or the integers' arithmetic (ops.dtypes)."""
        if node.op.name not in self.ops or node.dtype != "float32":
            return None
        srcs = (
            node.srcs
            if through is None
            else tuple(Edge(s.node, compose(s.views, through.views)) for s in node.srcs)
        )
        if len(srcs) < len(self.srcs) or (len(srcs) > len(self.srcs) and not self.rest):
            return None
        patterns = self.srcs + self.srcs[-1:] * (len(srcs) - len(self.srcs))
        orders = [srcs, srcs[::-1]] if node.op.commutative and len(srcs) == 2 else [srcs]
        for order in orders:
            matched = bound
            for pattern, src in zip(patterns, order):
                matched = pattern.bind(src, matched, ctx)
                if matched is None:
                    break
            else:
                return matched
        return None

    def build(self, bound):
        (name,) = self.ops
        return identity_edge(make_node(name, tuple(p.build(bound) for p in self.srcs)))

    def __str__(self):
        label = self.label or "|".join(sorted(self.ops)).lower()
        return f"{label}({', '.join([str(p) for p in self.srcs] + ['...'] * self.rest)})"


@dataclass(frozen=True)
class Unshared(Pattern):
    """`pattern` at a node read once, by the matched node, and not returned by the program."""

    pattern: Pattern

    def bind(self, edge, bound, ctx):
        if ctx.consumers.get(edge.node.id, 0) != 1 or edge.node.id in ctx.outputs:
            return None
        return self.pattern.bind(edge, bound, ctx)

    def nestable(self):
        return self.pattern.nestable()

    def __str__(self):
        return f"unshared {self.pattern}"


def unshared(pattern: Pattern) -> Unshared:
    return Unshared(pattern)


def ops(*names: str) -> tuple[Callable[..., Apply], ...]:
    """Pattern constructors for primitive ops: `Add, Mul = ops("Add", "Mul")`, then `Add(x, Const(0.0))`."""
    return tuple(any_of([name], name.lower()) for name in names)


def any_of(names, label: str) -> Callable[..., Apply]:
    """A constructor matching any of the named ops; a trailing `...` repeats the last source pattern."""
    def construct(*srcs) -> Apply:
        rest = bool(srcs) and srcs[-1] is Ellipsis
        return Apply(frozenset(names), tuple(srcs[:-1] if rest else srcs), rest, label)
    return construct


@dataclass(frozen=True)
class Rule:
    """A sentence: `name`: `pattern` -> `replacement`, sound because `soundness`."""

    name: str
    pattern: Apply
    replacement: object  # a Pattern over the pattern's names, or a function of the matched node
    soundness: str

    @property
    def doc(self) -> str:
        to = (
            self.replacement
            if isinstance(self.replacement, Pattern)
            else (self.replacement.__doc__ or "").strip()
        )
        return f"{self.pattern} -> {to}"

    def matches(self, node: Node, ctx: Context) -> bool:
        """Whether the pattern matches `node` (the replacement may still decline), building nothing."""
        return self.pattern.bind_node(node, {}, ctx) is not None

    def rewrite(self, node: Node, ctx: Context) -> Optional[Edge]:
        """The edge that replaces `node`, or None when the rule does not match it."""
        bound = self.pattern.bind_node(node, {}, ctx)
        if bound is None:
            return None
        out = (self.replacement.build(bound) if isinstance(self.replacement, Pattern)
               else self.replacement(node))
        return out if out.node.dtype == node.dtype else None  # x + 0.0 is no int x: a value keeps its type
