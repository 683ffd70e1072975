"""Pricing schedules: partition a schedule into kernels (groups) and price each, incrementally.

The `Evaluator` is the search's view of the cost model. Elementwise groups are priced from the
graph (`fusion.group_cost`); reductions, rows and matmuls are built by code generation (without
printing) and priced from their own accesses (`cost.kernel_cost`), at the best of their open
parameter choices that change those accesses. Built kernels, legality answers and prices are keyed
by a group's structure, so the identical layers of a model are analysed once.
"""
from __future__ import annotations

import itertools
from typing import Mapping, Optional

from ..codegen.legality import (BLOCK, MAX_FUSED_NODES, TEMPLATE_ONLY, TILE, Group, Unfusable,
                                kernel_for_group, retarget)
from ..ops.primitives import Edge, Node
from .cost import DeviceProfile, KernelCost, elements, kernel_cost
from .fusion import (Graph, check_group, few_rows, group_cost, group_of, group_params, kernel_of, key_tiles,
                     reduced_extent)
from .mirror import Mirror
from .row_stats import with_row_stats
from .tail import with_tails
from .schedule import DECISIONS, KERNEL_PARAMS, PARAMS_BY_NAME, Schedule


def group_structure(group: Group, sched: Schedule) -> tuple:
    """What a kernel's code depends on, with node ids abstracted away: each node's op, attributes,
    shape and dtype, each source as a fused node of the group, the k-th buffer it reads, or an inlined
    literal, through its views, and the decisions taken on each node."""
    nodes = group.members + (group.root,) + group.carried + group.row_stats + group.tail
    local = {n.id: k for k, n in enumerate(nodes)}
    buffers = {n.id: k for k, n in enumerate(group.reads)}

    def attrs(n: Node) -> tuple:
        return tuple(sorted((k, repr(v)) for k, v in n.attrs.items()))

    def source(e: Edge) -> tuple:
        n = e.node
        if n.id in local:
            return ("fused", local[n.id], e.views)
        if n.id in buffers:
            return ("buffer", buffers[n.id], n.shape, n.dtype, e.views)
        if not n.op.literal:  # a Scatter's table: the buffer it writes in place, whatever its name
            return ("updated", n.shape, n.dtype, e.views)
        return ("literal", n.op.name, attrs(n), n.shape, e.views)

    return (group.kind,) + tuple((n.op.name, n.dtype, n.shape, attrs(n), tuple(source(e) for e in n.srcs),
                                  tuple(n.id in getattr(sched, d.name) for d in DECISIONS)) for n in nodes)


def lowering_plan(groups, sched: Schedule) -> list[tuple[Group, dict, tuple]]:
    """What code generation needs to lower each group (codegen.lower.lower_groups): its kernel
    parameters, and a key equal for groups of the same structure, parameters and user calls, whose
    kernels differ only in labels (the same layer of a repeated model)."""
    return [
        (
            g,
            group_params(sched, g),
            (
                group_structure(g, sched),
                tuple(sched.kernel_params(g.root.id, g.kind).items()),
                tuple(n.origin for n in g.members + (g.root,)),
            ),
        )
        for g in groups
    ]


ACCESS_PRICED = ("reduce", "row", "matmul")
SEARCH_SAMPLE = 64  # warp requests per access when the search prices a candidate (programs use cost.SAMPLE)


# The matmul parameters one of the two templates takes: for each, whether an online softmax's does
TAKEN_BY_ONLINE = {"slices": (False,), "splits": (False, True), "n_tiles": (True,)}
SPLIT_ROWS = max(PARAMS_BY_NAME["tile"].choices["matmul"])  # K split across blocks: rows fit this tile


class Evaluator:
    """Partitions schedules into kernels and prices them, incrementally where a move allows."""

    def __init__(self, graph: Graph, bindings, profile: DeviceProfile, memo: Optional[dict] = None):
        """`memo` shares the built kernels and prices with other evaluators at the same binding and
        device: they are keyed by structure or node ids, valid across the graphs one search makes."""
        self.graph, self.bindings, self.profile = graph, bindings, profile
        # A group is made for one schedule and kept by the next only while no move touches its nodes
        # (see moved), so while no parameter is set (the fusion search) its price stays its own.
        self.group_prices: dict[int, tuple] = {}
        # (sched, root id, groups found so far) -> the kernel at a copy of a repeated layer read off its
        # representative's where the schedule treats both alike (search/mirror.py), else None
        self.mirrored = Mirror(self)
        self.memo = {} if memo is None else memo
        (
            self.built,
            self.structures,
            self.interned,
            self.prices,
            self.costs,
            self.access_costs,
            self.counts,
        ) = (
            self.memo.setdefault(name, {})
            for name in ("built", "structures", "interned", "prices", "costs", "access", "counts")
        )

    def count(self, shape) -> int:
        if shape not in self.counts:
            self.counts[shape] = elements(shape, self.bindings)
        return self.counts[shape]

    def _group(self, sched: Schedule, root: Node, before: Optional[Mapping[int, Group]] = None,
               checked: bool = True) -> Optional[Group]:
        """`before`: the kernels of a schedule that `sched` only adds decisions to (see grown)."""
        g = group_of(self.graph, sched, root) if before is None else grown(self.graph, sched, root, before)
        if g is None or not checked:
            return g
        return g if check_group(sched, g, lambda group: self.build(sched, group) is not None) else None

    def partition(self, sched: Schedule, checked: bool = True) -> Optional[dict[int, Group]]:
        """The kernels of `sched`, or None if one is illegal. `checked=False` skips asking code
        generation about templated kernels, for a caller that generates them next (it refuses then)."""
        groups = {}
        for root in self.graph.compute:
            if root.id not in sched.inline and root.id not in sched.row_stats:
                g = self.mirrored(sched, root.id, groups) or self._group(sched, root, checked=checked)
                if g is None:
                    return None
                groups[root.id] = g
        if sched.row_stats:  # each computed by the kernel storing its rows (search.row_stats)
            groups = with_row_stats(self.graph, sched, groups)
            if groups is not None and checked and any(
                    g.row_stats and self.build(sched, g) is None for g in groups.values()):
                return None
        if sched.tails and groups is not None:  # each finished by its source's kernel (search.tail)
            groups = with_tails(self.graph, sched, groups)
            if groups is not None and checked and any(
                    g.tail and self.build(sched, g) is None for g in groups.values()):
                return None
        return groups

    def touching(self, groups: Mapping[int, Group]) -> dict[int, set[int]]:
        """node id -> roots of the kernels that compute, fuse or read it."""
        index: dict[int, set[int]] = {}
        for root_id, g in groups.items():
            for n in touched_by(g):
                index.setdefault(n.id, set()).add(root_id)
        return index

    def moved(self, old: Schedule, groups, cost: float, touching, sched: Schedule,
              changed: set[int]) -> Optional[tuple[dict, float]]:
        """The changed kernels ({root id: new group, or None when the root is now fused}) and the total
        cost after a move from `old` to `sched`. A fusion move reschedules the nodes it fires at or
        their sources (matmul inlines its product), or the nodes the rule decides (online_softmax
        decides a whole pattern): `changed` holds their ids (`changed_by`). Only the kernels touching
        those can change: they alone are re-partitioned, and the cost of a move does not grow with
        the graph."""
        if sched.tails:  # a kernel finishing another's reduction (search.tail): partitioned whole
            whole = self.partition(sched)
            if whole is None:
                return None
            delta = {r: None for r in groups if r not in whole}
            delta.update({r: g for r, g in whole.items() if groups.get(r) != g})
            return delta, self.total(sched, whole)
        pending = set().union(*(touching.get(c, set()) for c in changed))
        roots = sorted(pending, key=lambda r: self.graph.position[r])
        kept = lambda r: None if r in pending else groups.get(r)  # noqa: E731 (a kernel the move leaves)
        delta: dict[int, Optional[Group]] = {}
        for root_id in roots:  # in graph order: the float sum is the same whatever the node ids
            cost -= self.price(old, groups[root_id]).time_s
            if root_id in sched.inline:
                delta[root_id] = None
                continue
            g = self.mirrored(sched, root_id, delta, kept) or self._group(
                sched, self.graph.by_id[root_id], groups
            )
            if g is None:
                return None
            delta[root_id] = g
            cost += self.price(sched, g).time_s
        return delta, cost

    def cost(self, sched: Schedule, group: Group) -> KernelCost:
        members = tuple(n.id for n in group.members + group.row_stats + group.tail)
        nodes = frozenset(members).union((group.root.id,))  # the decisions on its nodes price it too
        params = tuple(sched.kernel_params(group.root.id, group.kind).values())
        decided = tuple(getattr(sched, d.name) & nodes for d in DECISIONS)
        key = (group.root.id, members, group.kind, params, decided)
        if key not in self.costs:
            self.costs[key] = group_cost(group, sched, self.count, self.profile)
        return self.costs[key]

    def price(self, sched: Schedule, group: Group) -> KernelCost:
        """What the search compares: kernels whose threads walk a reduced axis (reductions, rows,
        matmuls) are priced from their accesses, since coalescing decides their cost, at the best of
        the parameter choices that change those accesses and that the schedule leaves open (so a
        matmul is judged at its better tile, not at the default); elementwise kernels read like their
        output, so the graph's estimate serves."""
        if not sched.params:  # the fusion search: a kernel keeps its price while no move touches it
            hit = self.group_prices.get(id(group))
            if hit is not None and hit[0] is group:
                return hit[1]
            price = self._price(sched, group)
            self.group_prices[id(group)] = (group, price)  # (the group kept alive: its id stays its own)
            return price
        return self._price(sched, group)

    def _price(self, sched: Schedule, group: Group) -> KernelCost:
        if group.kind not in ACCESS_PRICED:
            return self.cost(sched, group)
        key = self._key(sched, group)
        if key not in self.prices:
            open_params = [p for p in KERNEL_PARAMS if p.moves_memory and group.kind in p.choices
                           and (group.root.id, p.name) not in sched._params]
            options = [sched.with_params({(group.root.id, p.name): v for p, v in zip(open_params, values)})
                       for values in itertools.product(*(self.choices(sched, group, p) for p in open_params))]
            self.prices[key] = min((self.access_cost(s, group) for s in options), key=lambda c: c.time_s)
        return self.prices[key]

    def choices(self, sched: Schedule, group: Group, param) -> tuple:
        """The values of `param` worth pricing for this kernel. A parameter keeps its default where the
        kernel's template cannot take it (slices: a plain matmul's; n_tiles: an online softmax's) and,
        if its other values only add threads (K in slices or in splits, one N tile a block), where the
        kernel already fills the device at its own parameters. K is split across blocks only for rows
        that fit the largest tile (decode's), into at most K's tiles at the binding."""
        values = param.choices[group.kind]
        if param.name in TAKEN_BY_ONLINE:
            online = any(n.id in sched.online for n in group.members)
            if online not in TAKEN_BY_ONLINE[param.name]:
                return values[:1]
        if param.adds_threads and self.cost(sched, group).threads >= self.profile.resident_threads:
            return values[:1]
        if param.name == "block" and group.kind in ("reduce", "row"):  # more threads a row: only where
            # the device is not full and every thread of the block has a value of the row
            full = self.cost(sched, group).threads >= self.profile.resident_threads
            extent = reduced_extent(group, sched, self.count)
            return tuple(v for v in values if v <= BLOCK or (not full and v <= extent))
        if param.name == "splits":  # more splits than K's tiles (of 16) would only add empty blocks
            if not few_rows(group, sched, self.count, SPLIT_ROWS):
                return values[:1]
            return tuple(v for v in values if v <= max(1, key_tiles(group, sched, self.count, TILE)))
        return values

    def _key(self, sched: Schedule, group: Group) -> tuple:
        """The group's structure (see group_structure) and parameters: identical layers of a model
        share one built kernel, one legality answer and one price."""
        members = tuple(n.id for n in group.members + group.row_stats + group.tail)
        nodes = frozenset(members).union((group.root.id,))  # each decision's part of the kernel says what
        ids = (group.root.id, members, group.kind, tuple(getattr(sched, d.name) & nodes for d in DECISIONS))
        if ids not in self.structures:  # interned: a small int hashes far faster than the structure
            self.structures[ids] = self.interned.setdefault(group_structure(group, sched), len(self.interned))
        return self.structures[ids], tuple(sched.kernel_params(group.root.id, group.kind).values())

    def build(self, sched: Schedule, group: Group):
        """The group's kernel, built without printing it (its access plan), or None if code generation
        cannot honour the fusion; cached, since legality checks and pricing ask for the same kernels.
        Parameters that only change the template (codegen's TEMPLATE_ONLY) share one analysis."""
        params = group_params(sched, group)
        template_only = TEMPLATE_ONLY.get(group.kind, ())
        analysed = {k: (PARAMS_BY_NAME[k].default if k in template_only else v) for k, v in params.items()}
        structure, _ = self._key(sched, group)
        key = structure, tuple(analysed[p.name] for p in KERNEL_PARAMS)
        if key not in self.built:
            try:
                self.built[key] = kernel_for_group(
                    "priced", group, self.graph.names, lambda n: n.id in sched.inline, analysed, render=False
                )
            except Unfusable:
                self.built[key] = None
        kernel = self.built[key]
        return None if kernel is None else retarget(kernel, params)

    def access_cost(self, sched: Schedule, group: Group) -> KernelCost:
        """The kernel priced from its own accesses: finer and dearer than `cost`."""
        key = self._key(sched, group)
        if key not in self.access_costs:
            kernel = self.build(sched, group)
            if kernel is None:
                return KernelCost("priced", group.kind, 0, 0, 0, float("inf"))
            self.access_costs[key] = kernel_cost(kernel, self.cost(sched, group), self.bindings, self.profile,
                                                 sample=SEARCH_SAMPLE)
        return self.access_costs[key]

    def total(self, sched: Schedule, groups: Mapping[int, Group]) -> float:
        return sum(self.price(sched, g).time_s for g in groups.values())


def grown(graph: Graph, sched: Schedule, root: Node, before: Mapping[int, Group]) -> Optional[Group]:
    """group_of(graph, sched, root), assembled from the kernels of a schedule `before` that `sched`
    only adds decisions to, `root` among them: what a node's kernel recomputes stays inline, so the
    kernel grows only by the kernels of the buffers it read that are now inline, each whole, and
    theirs in turn. A move on a long chain thus walks a few kernels, not every fused node."""
    inline, outputs = sched.inline, graph.outputs
    first = before[root.id]
    members = {n.id: n for n in first.members}
    reads: dict[int, Node] = {}
    stack = [first]
    while stack:
        for n in stack.pop().reads:
            if n.id not in inline or n.id in outputs:
                reads[n.id] = n
            elif n.id not in members:
                members[n.id] = n
                kernel = before[n.id]  # not inline before (it was read), so a kernel's root
                members.update((m.id, m) for m in kernel.members)
                if len(members) > MAX_FUSED_NODES:
                    return None
                stack.append(kernel)
    return kernel_of(graph, sched, root, members, reads)


def changed_by(sites, decided: dict[str, set]) -> set[int]:
    """The ids a move can reschedule: the nodes it fires at, their sources, and what it decides."""
    return {
        *(n.id for n in sites),
        *(s.node.id for n in sites for s in n.srcs),
        *set().union(*decided.values()),
    }


def touched_by(group: Optional[Group]) -> tuple:
    return () if group is None else (group.root,) + group.members + group.reads
