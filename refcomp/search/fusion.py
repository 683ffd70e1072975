"""Fusion and schedule rules, and the partition of a graph into kernels that a schedule implies.

A `Schedule` never changes values: it only says where each node is computed. A node in `inline`
is recomputed inside every kernel that reads it instead of being written to memory; a reduction
in `row` is computed by its reader's row kernel; a SumReduce in `matmul` runs on the tiled matmul
template. Every other compute node is the root of its own kernel. Each rule below is a move from
one schedule to another, sound because recomputing a pure function where it is read gives the
value that would have been stored; the cost model decides whether a move pays.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from ..codegen.legality import (MAX_FUSED_NODES, MAX_INLINED_VALUES, SHORT_REDUCE, Group, ProgramNames, default_reduce_strategy,
                               fusion_problem, matmul_axes)
from ..ops.graph import toposort
from ..ops.primitives import ELEMENTWISE, GATHER, LEAF, REDUCE, Node
from .cost import DeviceProfile, KernelCost, roofline

# A buffer read through a broadcast (the same element by many threads) costs at most this many
# passes over it: caches absorb the rest. The tiled matmul reads each operand once.
REREAD_LIMIT = 4


@dataclass(frozen=True)
class Schedule:
    inline: frozenset = frozenset()
    row: frozenset = frozenset()  # reductions computed by their reader's row kernel (also in inline)
    epilogue: frozenset = frozenset()  # reductions whose elementwise reader is applied to the result (also in inline)
    matmul: frozenset = frozenset()  # SumReduces lowered by the tiled matmul template
    params: tuple = ()  # ((root id, name), value) pairs, sorted

    @functools.cached_property
    def _params(self) -> dict:
        return dict(self.params)

    def param(self, root_id: int, name: str, default):
        return self._params.get((root_id, name), default)

    def with_param(self, root_id: int, name: str, value) -> "Schedule":
        params = dict(self.params)
        params[(root_id, name)] = value
        return replace(self, params=tuple(sorted(params.items())))


@dataclass
class Graph:
    """The fixed graph the fusion search schedules."""

    output_nodes: list[Node]
    nodes: list[Node] = field(init=False)
    consumers: dict[int, list[Node]] = field(init=False)

    def __post_init__(self):
        self.nodes = toposort(self.output_nodes)
        self.position = {n.id: k for k, n in enumerate(self.nodes)}
        self.outputs = {n.id for n in self.output_nodes}
        self.consumers = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for s in n.srcs:
                if n not in self.consumers[s.node.id]:
                    self.consumers[s.node.id].append(n)
        self.compute = [n for n in self.nodes if n.op.kind != LEAF]
        self.names = ProgramNames.of(self.nodes)


def _short_reduce(node: Node) -> bool:
    extent = node.srcs[0].shape[node.attrs["axis"]]
    return isinstance(extent, int) and extent <= SHORT_REDUCE


def _recomputations(root: Node, ordered: tuple, members: dict, unrolled: Callable[[Node], bool]) -> int:
    """How many values the kernel recomputes per output element, at most: a fused producer is
    recomputed once per read, and an unrolled reduce reads its source `extent` times, so copies
    multiply along a path (a bound: codegen reuses a value read twice at the same index)."""
    copies = {root.id: 1}
    for node in (root,) + tuple(reversed(ordered)):
        reads = copies.get(node.id, 0) * (node.srcs[0].shape[node.attrs["axis"]] if node is not root and unrolled(node) else 1)
        for src in node.srcs:
            if src.node.id in members:
                copies[src.node.id] = copies.get(src.node.id, 0) + reads
    return sum(copies.values())


def group_of(graph: Graph, sched: Schedule, root: Node) -> Optional[Group]:
    """The kernel rooted at `root`, or None when the schedule asks for an impossible one."""
    members: dict[int, Node] = {}
    reads: dict[int, Node] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        for src in node.srcs:
            s = src.node
            if s.op.name in ("Constant", "Iota"):
                continue
            if s.id in sched.inline and s.id not in graph.outputs:
                if s.id not in members:
                    members[s.id] = s
                    stack.append(s)
                    if len(members) > MAX_FUSED_NODES:  # too big a kernel (and too deep a recursion in codegen)
                        return None
            else:
                reads[s.id] = s
    ordered = tuple(sorted(members.values(), key=lambda n: graph.position[n.id]))
    everything = ordered + (root,)
    mm = [n for n in everything if n.id in sched.matmul]
    rows = [n for n in ordered if n.id in sched.row]
    epilogues = [n for n in ordered if n.id in sched.epilogue]
    if root.op.kind == GATHER:
        kind = "gather" if not members else None
    elif mm:
        # the matmul template stores the accumulator or one elementwise epilogue of it, never a reduction
        epilogue_ok = root.id in sched.matmul or root.op.kind in ELEMENTWISE
        kind = "matmul" if len(mm) == 1 and not rows and not epilogues and epilogue_ok else None
    elif rows:
        kind = "row" if not epilogues else None
    elif epilogues:  # a reduction stores one elementwise function of its result
        kind = "reduce" if len(epilogues) == 1 and root.op.kind in ELEMENTWISE else None
    else:
        kind = "reduce" if root.op.kind == REDUCE else "elementwise"
    fused_elsewhere = sched.row | sched.matmul | sched.epilogue
    unrolled = lambda n: n.op.kind == REDUCE and n.id not in fused_elsewhere
    bad_reduce = any(unrolled(n) and not _short_reduce(n) for n in ordered)
    if kind is None or bad_reduce or _recomputations(root, ordered, members, unrolled) > MAX_INLINED_VALUES:
        return None
    return Group(root, ordered, tuple(sorted(reads.values(), key=lambda n: graph.position[n.id])), kind)


def group_params(sched: Schedule, group: Group) -> dict:
    return {"row_ids": sched.row, "matmul_ids": sched.matmul, "epilogue_ids": sched.epilogue,
            "block": sched.param(group.root.id, "block", 256), "tile": sched.param(group.root.id, "tile", 16),
            "strategy": sched.param(group.root.id, "strategy", None)}


def group_cost(group: Group, sched: Schedule, count: Callable, profile: DeviceProfile, name: str = "") -> KernelCost:
    """The roofline cost of one kernel; `count(shape)` is the number of elements at the binding."""
    root = group.root
    ops = len(group.members) + 1
    points = _iteration_points(group, sched, count)
    nbytes = 4 * count(root.shape)
    for n in group.reads:  # tiles read each operand once; other kernels re-read broadcasts through caches
        size = count(n.shape)
        nbytes += 4 * (size if group.kind == "matmul" else min(points, REREAD_LIMIT * size))
    block = sched.param(root.id, "block", 256)
    if group.kind == "matmul":
        reduce = next(n for n in (root,) + group.members if n.id in sched.matmul)
        m_n = count(reduce.shape)
        k = count(reduce.srcs[0].shape) // max(m_n, 1)
        tile = sched.param(root.id, "tile", 16)
        flops = 2 * m_n * k + ops * m_n
        threads = -(-m_n // (tile * tile)) * tile * tile
    elif group.kind in ("reduce", "row"):
        reduce = root if root.op.kind == REDUCE else next(n for n in group.members if n.id in sched.row | sched.epilogue)
        points = count(reduce.srcs[0].shape)
        rows = count(reduce.shape)
        phases = 1 + sum(1 for n in group.members if n.id in sched.row)
        flops = points * ops * phases
        strategy = sched.param(root.id, "strategy", None) or default_reduce_strategy(reduce.srcs[0].shape[reduce.attrs["axis"]])
        block_per_row = group.kind == "row" or strategy == "block"
        threads = rows * block if block_per_row else rows
    else:
        points = count(root.shape)
        flops, threads = points * ops, points
    return roofline(name or root.op.name, group.kind, nbytes, flops, threads, profile)


def _iteration_points(group: Group, sched: Schedule, count) -> int:
    """How many (output or reduction) points the kernel visits: each reads every buffer once."""
    root = group.root
    if group.kind in ("reduce", "row", "matmul"):
        reduce = root if root.op.kind == REDUCE else next(
            (n for n in group.members if n.id in sched.row | sched.matmul | sched.epilogue), root)
        if reduce.op.kind == REDUCE:
            return count(reduce.srcs[0].shape)
    return count(root.shape)


# --- the fusion rules: moves from one schedule to another ------------------------------------
@dataclass(frozen=True)
class FusionRule:
    name: str
    doc: str
    soundness: str
    applies: Callable[[Graph, Schedule, Node], bool]
    apply: Callable[[Graph, Schedule, Node], Schedule]


def _free(graph: Graph, sched: Schedule, n: Node) -> bool:
    """A root that may be folded into its readers: not an output, read only by kernels that can inline."""
    return (n.id not in sched.inline and n.id not in graph.outputs and bool(graph.consumers[n.id])
            and not any(c.op.kind == GATHER for c in graph.consumers[n.id]))


def _add(sched: Schedule, field_name: str, *ids) -> Schedule:
    return replace(sched, **{field_name: getattr(sched, field_name) | frozenset(ids)})


def _mm_product(n: Node) -> Node:
    return n.srcs[0].node


RECOMPUTE = "recomputing a pure function where it is read yields exactly the value that would have been stored"

FUSION: list[FusionRule] = [
    FusionRule("fuse_elementwise", "compute an elementwise node inside every kernel that reads it (chains, "
               "prologues of reductions, epilogues, and recompute instead of a round trip through memory)",
               RECOMPUTE, lambda g, s, n: n.op.kind in ELEMENTWISE and _free(g, s, n),
               lambda g, s, n: _add(s, "inline", n.id)),
    FusionRule("unroll_short_reduce", f"compute a reduction over at most {SHORT_REDUCE} values (maximum's pair) "
               "inline as a chain of combines", RECOMPUTE + "; the combine order is the reference's",
               lambda g, s, n: n.op.kind == REDUCE and _short_reduce(n) and n.id not in s.matmul and _free(g, s, n),
               lambda g, s, n: _add(s, "inline", n.id)),
    FusionRule("row_fuse", "compute a reduction in its reader's kernel, one block per row, when every read is "
               "the row's own result (softmax and layer norm become one kernel)",
               RECOMPUTE + "; the row kernel checks that each read is of the current row",
               lambda g, s, n: n.op.kind == REDUCE and not _short_reduce(n) and n.id not in s.matmul and _free(g, s, n),
               lambda g, s, n: _add(_add(s, "inline", n.id), "row", n.id)),
    FusionRule("matmul", "SumReduce(Mul(expand a, expand b)) over the contracted axis -> the tiled matmul "
               "template, its product never stored", "the tile loop sums the same products (in another order: "
               "float32 rounding may differ by a few ulp, as any matmul)",
               lambda g, s, n: n.op.name == "SumReduce" and n.id not in s.matmul and n.id not in s.inline
               and _mm_product(n).id not in g.outputs and len(g.consumers[_mm_product(n).id]) == 1
               and not _short_reduce(n) and matmul_axes(n) is not None,
               lambda g, s, n: _add(_add(s, "matmul", n.id), "inline", _mm_product(n).id)),
    FusionRule("matmul_epilogue", "compute a matmul inside the kernel of its elementwise reader (bias, "
               "activation, residual applied to the accumulator before the store)", RECOMPUTE,
               lambda g, s, n: n.id in s.matmul and _free(g, s, n) and len(g.consumers[n.id]) == 1
               and g.consumers[n.id][0].op.kind in ELEMENTWISE,
               lambda g, s, n: _add(s, "inline", n.id)),
]

# Clean-up rules run after the main search has settled: applied early, they would claim reductions
# that row fusion puts to better use.
CLEANUP: list[FusionRule] = [
    FusionRule("reduce_epilogue", "apply a reduction's only reader, an elementwise node of the same shape (a bias, "
               "a scale, rsqrt(var + eps)), to the accumulated value before it is stored", RECOMPUTE,
               lambda g, s, n: (n.op.kind == REDUCE and not _short_reduce(n) and n.id not in s.matmul and _free(g, s, n)
                                and len(g.consumers[n.id]) == 1 and g.consumers[n.id][0].op.kind in ELEMENTWISE
                                and g.consumers[n.id][0].shape == n.shape and g.consumers[n.id][0].id not in s.inline),
               lambda g, s, n: _add(_add(s, "inline", n.id), "epilogue", n.id)),
]


def check_group(graph: Graph, sched: Schedule, group: Group, cache: dict) -> bool:
    """Row and matmul fusions are honoured only if code generation accepts them (cached)."""
    if group.kind not in ("row", "matmul") and not (group.kind == "reduce" and group.root.op.kind != REDUCE):
        return True
    key = (group.root.id, tuple(n.id for n in group.members), group.kind)
    if key not in cache:
        fused = lambda n: n.id in sched.inline
        cache[key] = fusion_problem(group, graph.names, fused, group_params(sched, group)) is None
    return cache[key]
