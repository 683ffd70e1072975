"""The search: algebraic rewrites to a fixed point, then a beam search over fusion and schedules.

Algebraic rules only ever remove work, so they are applied until nothing matches (each application
is recorded with the cost after it). Fusion moves trade memory traffic against recomputation and
exclude one another, so they are searched: a beam of schedules, each expanded by every applicable
fusion rule at every node; the successors of a schedule are the best single moves and one greedy
descent (all improving moves applied in order of gain, each re-checked on the running schedule).
A memo of visited schedules keeps any state from being explored twice; the search stops when a
round brings no improvement or the budget (states, seconds) is spent. It is deterministic: nodes
are visited in topological order and ties break on that order. Finally each kernel's schedule
parameters (`fusion.KERNEL_PARAMS`: block size, reduction strategy, matmul tile) are enumerated under
the cost model. Everything is priced on one `DeviceProfile`, which the result carries (`profile`).
"""
from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Sequence

from ..codegen.legality import TEMPLATE_ONLY, Group, Unfusable, kernel_for_group, materialise_outputs, retarget
from ..ops.graph import toposort
from ..ops.primitives import Edge, Node
from .cost import H200, DeviceProfile, KernelCost, binding_for, elements, kernel_cost
from .fusion import (CLEANUP, DECISIONS, FUSION, KERNEL_PARAMS, PARAMS_BY_NAME, Graph, Schedule, check_group, group_cost,
                     group_of, group_params)
from .rewrite import identity_edge, rebuild, structural_key
from .rules import ALGEBRA, Context


@dataclass
class Step:
    rule: str
    site: str
    cost_s: float
    kernels: int


@dataclass
class SearchResult:
    graph: Graph
    schedule: Schedule
    groups: list[Group]
    costs: list[KernelCost]
    trace: list[Step]
    before: list[Edge]
    bindings: dict[str, int]
    profile: DeviceProfile  # the device the costs are modeled on
    states: int = 0
    seconds: float = 0.0
    candidates: list = field(default_factory=list)  # the best distinct schedules seen, cheapest first

    @property
    def time_s(self) -> float:
        return sum(c.time_s for c in self.costs)


def group_structure(group: Group, sched: Schedule) -> tuple:
    """What a kernel's code depends on, with node ids abstracted away: each node's op, attributes,
    shape and dtype, each source as a fused node of the group, the k-th buffer it reads, or an inlined
    literal, through its views, and the decisions taken on each node."""
    nodes = group.members + (group.root,)
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
        return ("literal", n.op.name, attrs(n), n.shape, e.views)

    return (group.kind,) + tuple((n.op.name, n.dtype, n.shape, attrs(n), tuple(source(e) for e in n.srcs),
                                  tuple(n.id in getattr(sched, d.name) for d in DECISIONS)) for n in nodes)


ACCESS_PRICED = ("reduce", "row", "matmul")
SEARCH_SAMPLE = 64  # warp requests per access when the search prices a candidate (programs use cost.SAMPLE)


class _Evaluator:
    """Partitions schedules into kernels and prices them, incrementally where a move allows."""

    def __init__(self, graph: Graph, bindings, profile: DeviceProfile):
        self.graph, self.bindings, self.profile = graph, bindings, profile
        self.built: dict = {}
        self.structures: dict = {}
        self.prices: dict = {}
        self.costs: dict = {}
        self.access_costs: dict = {}
        self.counts: dict = {}
        self.by_id = {n.id: n for n in graph.nodes}

    def count(self, shape) -> int:
        if shape not in self.counts:
            self.counts[shape] = elements(shape, self.bindings)
        return self.counts[shape]

    def _group(self, sched: Schedule, root: Node) -> Optional[Group]:
        g = group_of(self.graph, sched, root)
        return g if g is not None and check_group(sched, g, lambda group: self.build(sched, group) is not None) else None

    def partition(self, sched: Schedule) -> Optional[dict[int, Group]]:
        groups = {}
        for root in self.graph.compute:
            if root.id not in sched.inline:
                g = self._group(sched, root)
                if g is None:
                    return None
                groups[root.id] = g
        return groups

    def touching(self, groups: Mapping[int, Group]) -> dict[int, set[int]]:
        """node id -> roots of the kernels that compute, fuse or read it."""
        index: dict[int, set[int]] = {}
        for root_id, g in groups.items():
            for n in _touched_by(g):
                index.setdefault(n.id, set()).add(root_id)
        return index

    def moved(self, old: Schedule, groups, cost: float, touching, sched: Schedule, node: Node) -> Optional[tuple[dict, float]]:
        """The changed kernels ({root id: new group, or None when the root is now fused}) and the total
        cost after the move at `node` from `old` to `sched`. A fusion move reschedules `node` or one
        of its sources (matmul inlines its product), so only the kernels touching those can change:
        they alone are re-partitioned, and the cost of a move does not grow with the graph."""
        changed = [node.id] + [s.node.id for s in node.srcs]
        roots = sorted(set().union(*(touching.get(c, set()) for c in changed)), key=lambda r: self.graph.position[r])
        delta: dict[int, Optional[Group]] = {}
        for root_id in roots:  # in graph order: the float sum is the same whatever the node ids
            cost -= self.price(old, groups[root_id]).time_s
            if root_id in sched.inline:
                delta[root_id] = None
                continue
            g = self._group(sched, self.by_id[root_id])
            if g is None:
                return None
            delta[root_id] = g
            cost += self.price(sched, g).time_s
        return delta, cost

    def cost(self, sched: Schedule, group: Group) -> KernelCost:
        key = (group.root.id, tuple(n.id for n in group.members), group.kind,
               tuple(sched.kernel_params(group.root.id).values()))
        if key not in self.costs:
            self.costs[key] = group_cost(group, sched, self.count, self.profile)
        return self.costs[key]

    def price(self, sched: Schedule, group: Group) -> KernelCost:
        """What the search compares: kernels whose threads walk a reduced axis (reductions, rows,
        matmuls) are priced from their accesses, since coalescing decides their cost, at the best of
        the parameter choices that change those accesses and that the schedule leaves open (so a
        matmul is judged at its better tile, not at the default); elementwise kernels read like their
        output, so the graph's estimate serves."""
        if group.kind not in ACCESS_PRICED:
            return self.cost(sched, group)
        key = self._key(sched, group)
        if key not in self.prices:
            open_params = [p for p in KERNEL_PARAMS if p.moves_memory and group.kind in p.choices
                           and (group.root.id, p.name) not in sched._params]
            options = [sched.with_params({(group.root.id, p.name): v for p, v in zip(open_params, values)})
                       for values in itertools.product(*(p.choices[group.kind] for p in open_params))]
            self.prices[key] = min((self.access_cost(s, group) for s in options), key=lambda c: c.time_s)
        return self.prices[key]

    def _key(self, sched: Schedule, group: Group) -> tuple:
        """The group's structure (see group_structure) and parameters: identical layers of a model
        share one built kernel, one legality answer and one price."""
        ids = (group.root.id, tuple(n.id for n in group.members), group.kind,
               tuple(tuple(n.id in getattr(sched, d.name) for d in DECISIONS) for n in group.members + (group.root,)))
        if ids not in self.structures:
            self.structures[ids] = group_structure(group, sched)
        return self.structures[ids], tuple(sched.kernel_params(group.root.id).values())

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
                self.built[key] = kernel_for_group("priced", group, self.graph.names, lambda n: n.id in sched.inline,
                                                   analysed, render=False)
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


def _plain_cost(edges: Sequence[Edge], bindings, profile) -> tuple[float, int]:
    graph = Graph(materialise_outputs(edges))
    ev = _Evaluator(graph, bindings, profile)
    groups = ev.partition(Schedule())
    return ev.total(Schedule(), groups), len(groups)


def simplify(edges: list[Edge], bindings, profile: DeviceProfile, trace: list[Step]) -> list[Edge]:
    """Apply the algebraic rules, common-subexpression merging and dead-code removal to a fixed point."""
    for _ in range(20):
        changed = False
        for rule in ALGEBRA:
            ctx = _context(edges)
            edges, count = rebuild(edges, lambda n: rule.rewrite(n, ctx))
            if count:
                changed = True
                trace.append(Step(rule.name, f"{count} site(s)", *_plain_cost(edges, bindings, profile)))
        seen: dict = {}
        memo: dict = {}

        def merge(node):
            key = structural_key(node, memo)
            if key in seen:
                return identity_edge(seen[key])
            seen[key] = node
            return None

        before = len(toposort([e.node for e in edges]))
        edges, count = rebuild(edges, merge)
        if count:
            changed = True
            trace.append(Step("cse", f"{count} duplicate(s) merged", *_plain_cost(edges, bindings, profile)))
        removed = before - count - len(toposort([e.node for e in edges]))
        if removed > 0:
            trace.append(Step("dead_code", f"{removed} node(s) no longer read", *_plain_cost(edges, bindings, profile)))
        if not changed:
            break
    return edges


def _context(edges: Sequence[Edge]) -> Context:
    nodes = toposort([e.node for e in edges])
    consumers: dict[int, int] = {}
    for n in nodes:
        for s in n.srcs:
            consumers[s.node.id] = consumers.get(s.node.id, 0) + 1
    for e in edges:
        consumers[e.node.id] = consumers.get(e.node.id, 0) + 1
    return Context(consumers, {e.node.id for e in edges})


def search(edges: Sequence[Edge], dims_hint: Optional[Mapping[str, int]] = None, profile: DeviceProfile = H200,
           beam: int = 2, max_states: int = 20000, max_seconds: float = 30.0, progress: bool = True) -> SearchResult:
    start = time.perf_counter()
    deadline = start + max_seconds  # honoured inside a round too: a round over a huge graph is long
    before = list(edges)
    bindings = binding_for(toposort([e.node for e in edges]), dims_hint, edges)
    trace: list[Step] = []
    cost0, kernels0 = _plain_cost(edges, bindings, profile)
    trace.append(Step("start", "one kernel per compute node", cost0, kernels0))
    edges = simplify(list(edges), bindings, profile, trace)
    graph = Graph(materialise_outputs(edges))
    ev = _Evaluator(graph, bindings, profile)
    plain = Schedule()
    groups = ev.partition(plain)
    best = (ev.total(plain, groups), plain, groups, [])
    seen = {plain}
    finalists = [(best[0], plain)]
    states, shown = 1, False
    for rules in (FUSION, FUSION + CLEANUP):  # clean-up rules only once the main fusions are settled
        frontier = [best]
        while frontier and states < max_states and time.perf_counter() < deadline:
            successors = []
            for cost, sched, groups, path in frontier:
                moves = _moves(graph, ev, sched, groups, cost, seen, rules, deadline)
                states += len(moves)
                for c, rule, node, s, delta in moves[:beam]:
                    g = _apply(dict(groups), delta)
                    successors.append((c, s, g, path + [(rule, node, c, len(g))]))
                descent = _descend(graph, ev, sched, cost, groups, path, moves, seen, deadline)
                if descent is not None:
                    successors.append(descent)
                shown = _show_progress(progress, start, states, best[0]) or shown
            successors.sort(key=lambda item: item[0])
            finalists += [(c, s) for c, s, _, _ in successors[:CANDIDATES]]
            frontier = successors[:beam]
            if not frontier or frontier[0][0] >= best[0]:
                break
            best = frontier[0]
    cost, sched, groups, path = best
    trace += [Step(rule.name, graph.names.label(node), c, k) for rule, node, c, k in path]
    sched, groups = _tune(graph, ev, sched, groups, trace)
    ordered = [groups[n.id] for n in graph.compute if n.id in groups]
    costs = [ev.cost(sched, g) for g in ordered]
    candidates = [sched] + [s for _, s in sorted(finalists, key=lambda item: item[0]) if s != best[1]]
    if shown:
        print(file=sys.stderr)
    return SearchResult(graph, sched, ordered, costs, trace, before, bindings, profile, states,
                        time.perf_counter() - start, candidates[:CANDIDATES])


def with_schedule(result: SearchResult, sched: Schedule) -> SearchResult:
    """The same search result, but with another of its schedules (a measured-mode candidate) chosen."""
    if sched is result.schedule:
        return result
    ev = _Evaluator(result.graph, result.bindings, result.profile)
    groups = ev.partition(sched)
    ordered = [groups[n.id] for n in result.graph.compute if n.id in groups]
    return replace(result, schedule=sched, groups=ordered, costs=[ev.cost(sched, g) for g in ordered])


def _moves(graph: Graph, ev: _Evaluator, sched: Schedule, groups, cost: float, seen: set, rules, deadline: float) -> list:
    """Every unexplored single rule application, best first: (cost, rule, node, schedule, changed kernels)."""
    out = []
    touching = ev.touching(groups)
    for node in graph.compute:
        if time.perf_counter() > deadline:
            break
        for rule in rules:
            if not rule.applies(graph, sched, node):
                continue
            new = rule.apply(graph, sched, node)
            if new in seen:
                continue
            seen.add(new)
            moved = ev.moved(sched, groups, cost, touching, new, node)
            if moved is not None:
                out.append((moved[1], rule, node, new, moved[0]))
    out.sort(key=lambda m: (m[0], graph.position[m[2].id]))
    return out


def _descend(graph, ev, sched, cost, groups, path, moves, seen, deadline: float):
    """Apply every improving move in order of gain, re-checking each on the schedule built so far."""
    path, groups = list(path), dict(groups)
    improved = False
    touching = ev.touching(groups)
    for _, rule, node, _, _ in moves:
        if time.perf_counter() > deadline:
            break
        if not rule.applies(graph, sched, node):
            continue
        new = rule.apply(graph, sched, node)
        moved = ev.moved(sched, groups, cost, touching, new, node)
        if moved is not None and moved[1] < cost:
            delta, cost, sched, improved = moved[0], moved[1], new, True
            _retouch(touching, groups, delta)
            _apply(groups, delta)
            path.append((rule, node, cost, len(groups)))
    if not improved or sched in seen:
        return None
    seen.add(sched)
    return cost, sched, groups, path


def _apply(groups: dict, delta: Mapping[int, Optional[Group]]) -> dict:
    for root_id, g in delta.items():
        if g is None:
            groups.pop(root_id, None)
        else:
            groups[root_id] = g
    return groups


def _retouch(touching: dict[int, set[int]], groups: Mapping[int, Group], delta: Mapping[int, Optional[Group]]) -> None:
    """Update the node -> kernel roots index for the kernels a move changes (a rebuild is O(graph))."""
    for root_id, g in delta.items():
        for n in _touched_by(groups.get(root_id)):
            touching[n.id].discard(root_id)
        for n in _touched_by(g):
            touching.setdefault(n.id, set()).add(root_id)


def _touched_by(group: Optional[Group]) -> tuple:
    return () if group is None else (group.root,) + group.members + group.reads


CANDIDATES = 4  # schedules kept for measured mode

def _tune(graph: Graph, ev: _Evaluator, sched: Schedule, groups: dict, trace: list[Step]):
    """Enumerate each kernel's schedule parameters and keep the cheapest under the cost model.

    The choices change how threads walk memory (a thread or a block per output, the tile edge), which
    only the kernel's own index expressions show, so each choice is priced on the kernel built for
    it (`access_cost`). A kernel's cost reads only its own parameters, so each is priced on a
    schedule holding just those (a schedule with every kernel's parameters would be rebuilt per
    choice: quadratic)."""
    chosen: dict = {}
    for root_id, group in groups.items():
        tuned = [p for p in KERNEL_PARAMS if group.kind in p.choices]
        mine = {p.name: sched.param(root_id, p.name) for p in tuned}
        for p in tuned:
            choices = p.choices[group.kind]
            def priced(value):
                alone = replace(sched, params=()).with_params({(root_id, n): v for n, v in {**mine, p.name: value}.items()})
                return (ev.access_cost if p.moves_memory else ev.cost)(alone, group).time_s
            mine[p.name] = min(choices, key=lambda v: (priced(v), choices.index(v)))
        chosen.update({(root_id, name): value for name, value in mine.items()})
    sched = sched.with_params(chosen)
    trace.append(Step("tune_schedules", f"{len(groups)} kernel(s)", ev.total(sched, groups), len(groups)))
    return sched, groups


def _show_progress(enabled: bool, start: float, states: int, best: float) -> bool:
    """A status line on stderr once the search has run for a second; True if one was shown."""
    elapsed = time.perf_counter() - start
    if enabled and elapsed > 1.0:
        print(f"\rrefcomp search: {states} states, best {best * 1e6:.1f} us, {elapsed:.1f} s", end="", file=sys.stderr, flush=True)
        return True
    return False


def unfused_costs(output_nodes: Sequence[Node], dims_hint: Optional[Mapping[str, int]] = None,
                  profile: DeviceProfile = H200) -> tuple[list[KernelCost], dict[str, int]]:
    """The cost of each kernel of the plain lowering (one per compute node, in graph order), and the
    binding they are priced at: what `search=False` programs report."""
    graph = Graph(list(output_nodes))
    bindings = binding_for(graph.nodes, dims_hint, [identity_edge(n) for n in graph.output_nodes])
    ev = _Evaluator(graph, bindings, profile)
    groups = ev.partition(Schedule())
    return [ev.cost(Schedule(), groups[n.id]) for n in graph.compute], bindings
