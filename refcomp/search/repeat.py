"""Repeated layers: the N identical blocks of a model are searched once.

A model's layers show up as *segments* of its graph. A compute node is a cut when nothing born
before it (computed, or an input first read before it) is read after it; the compute nodes between
two cuts are a segment. An input read across more than half the graph is left out: a weight read
at both ends (GPT-2's embedding, tied to its LM head) or a mask every layer reads would otherwise
make the whole model one segment. In a transformer every residual add is a cut, so each block is two
segments. Two segments are copies when their nodes, in graph order, have the same ops, attributes,
shapes and dtypes and read one another through the same views; what they read from outside (a
weight, or the cut that ends the previous segment) is keyed by the order of its first read, not by
its name. Nodes that depend on no input (a causal mask from Iota) are shared by every layer and
belong to no segment.

The search tries its moves only at the first copy (the representative) and fires each at the same
node of every copy where the rule applies (a tied move), priced as one move. A twelve-block model
therefore costs about one block's moves, and every block ends with the same schedule instead of
whichever local optimum the budget left it in. Pricing a tied move re-partitions the kernels it
touches in every copy; a copy's kernel is read off the representative's where the schedule treats
both alike (`Copies.mirror`, search/mirror.py), not rebuilt copy by copy. Small
segments (an MLP's relu, a CNN's pooling) are not tied: their copies sit in different contexts and
may deserve different schedules.

A kernel may recompute across one layer boundary (the residual add ending a repeated segment) but
not two (`fusion.group_of`): a tied move that inlined every residual add would make layer k's kernel
recompute the residual stream of all k layers before it, a chain that grows with depth. No such
kernel ever pays, but each depth is a new kernel to build and price, which made a 12-block search
cost far more than 12 times one block's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ops.primitives import LEAF, Node

MIN_TIED_NODES = 8  # a segment smaller than this is searched copy by copy


@dataclass(frozen=True)
class Copies:
    """The repeated segments of a graph: each representative node's twins, and the nodes that are a
    copy of an earlier one (never a move site of their own)."""

    twins: dict[int, tuple[Node, ...]] = field(default_factory=dict)
    copied: frozenset = frozenset()
    boundaries: frozenset = frozenset()  # the last node of every repeated segment (a residual add)
    # twin id -> (its representative's id, {id of a node the representative's segment computes or
    # reads: that node's id in the twin's copy}, the ids the segment computes): how a kernel of the
    # representative reads in a copy (search/mirror.py)
    mirror: dict[int, tuple[int, dict[int, int], frozenset]] = field(default_factory=dict)

    def of(self, node: Node) -> tuple[Node, ...]:
        return self.twins.get(node.id, ())

    @property
    def layers(self) -> int:
        """How many copies the largest repeated segment has (1: nothing repeats)."""
        return 1 + max((len(t) for t in self.twins.values()), default=0)


def _depends_on_input(nodes: list[Node]) -> set[int]:
    fed: set[int] = set()
    for n in nodes:  # topological order
        if n.op.name == "Input" or any(s.node.id in fed for s in n.srcs):
            fed.add(n.id)
    return fed


def segments(
    nodes: list[Node], position: dict[int, int], consumers: dict[int, list[Node]]
) -> list[list[Node]]:
    """The graph's compute nodes that depend on an input, cut into segments (see the module doc)."""
    fed = _depends_on_input(nodes)
    spans = []  # (born, last read) of every fed node that is read
    computed = [position[n.id] for n in nodes if n.id in fed and n.op.kind != LEAF]
    whole = max(computed, default=0) - min(computed, default=0)
    for n in nodes:
        readers = [position[c.id] for c in consumers[n.id]]
        if n.id in fed and readers:
            born = (
                min(readers) - 0.5 if n.op.kind == LEAF else position[n.id]
            )  # an input: just before its first read
            if n.op.kind != LEAF or 2 * (max(readers) - born) <= whole:  # see the module doc
                spans.append((born, max(readers)))
    spans.sort()
    out, current, reach, k = [], [], -1, 0
    for n in nodes:
        if n.op.kind == LEAF or n.id not in fed:
            continue
        p = position[n.id]
        while k < len(spans) and spans[k][0] < p:
            reach = max(reach, spans[k][1])
            k += 1
        current.append(n)
        if reach <= p:
            out.append(current)
            current = []
    return out + ([current] if current else [])


def segment_key(segment: list[Node]) -> tuple:
    """Equal for segments that compute the same function of what they read from outside."""
    local = {n.id: k for k, n in enumerate(segment)}
    outer: dict[int, int] = {}

    def source(edge) -> tuple:
        n = edge.node
        if n.id in local:
            return ("local", local[n.id], edge.views)
        if n.op.kind == LEAF and n.op.name != "Input":
            return (
                "literal",
                n.op.name,
                tuple(sorted((k, repr(v)) for k, v in n.attrs.items())),
                n.shape,
                edge.views,
            )
        return ("outer", outer.setdefault(n.id, len(outer)), n.shape, n.dtype, edge.views)

    return tuple((n.op.name, n.dtype, n.shape, tuple(sorted((k, repr(v)) for k, v in n.attrs.items())),
                  tuple(source(e) for e in n.srcs)) for n in segment)


def find_copies(nodes: list[Node], position: dict[int, int], consumers: dict[int, list[Node]]) -> Copies:
    classes: dict[tuple, list[list[Node]]] = {}
    for seg in segments(nodes, position, consumers):
        if len(seg) >= MIN_TIED_NODES:
            classes.setdefault(segment_key(seg), []).append(seg)
    twins: dict[int, tuple[Node, ...]] = {}
    copied: set[int] = set()
    boundaries: set[int] = set()
    mirror: dict[int, tuple] = {}
    for first, *others in classes.values():
        if not others:
            continue
        for k, n in enumerate(first):
            twins[n.id] = tuple(seg[k] for seg in others)
        copied.update(n.id for seg in others for n in seg)
        boundaries.update(seg[-1].id for seg in [first, *others])
        local = frozenset(n.id for n in first)
        for seg in others:  # equal keys: node k reads through its j-th edge what node k of `first` does
            image = {a.id: b.id for a, b in zip(first, seg)}
            image.update(
                (ea.node.id, eb.node.id) for a, b in zip(first, seg) for ea, eb in zip(a.srcs, b.srcs)
            )
            mirror.update((b.id, (a.id, image, local)) for a, b in zip(first, seg))
    return Copies(twins, frozenset(copied), frozenset(boundaries), mirror)
