"""The search: algebraic rewrites to a fixed point, then a beam search over fusion and schedules.

Algebraic rules only ever remove work, so they are applied until nothing matches (each application
is recorded with the cost after it). Fusion moves trade memory traffic against recomputation and
exclude one another, so they are searched: a beam of schedules, each expanded by every applicable
fusion rule at every node; the successors of a schedule are the best single moves and one greedy
descent (all improving moves applied in order of gain, each re-checked on the running schedule).
A memo of visited schedules keeps any state from being explored twice; the search stops when a
round brings no improvement or the budget (states, seconds) is spent. It is deterministic: nodes
are visited in topological order and ties break on that order. Finally each kernel's schedule
parameters (block size, reduction strategy, matmul tile) are enumerated under the cost model.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Sequence

from ..codegen.lower import Group, materialise_outputs
from ..ops.graph import toposort
from ..ops.primitives import Edge, Node
from .cost import H200, DeviceProfile, KernelCost, binding_for, elements
from .fusion import CLEANUP, FUSION, Graph, Schedule, check_group, group_cost, group_of
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
    states: int = 0
    seconds: float = 0.0
    candidates: list = field(default_factory=list)  # the best distinct schedules seen, cheapest first

    @property
    def time_s(self) -> float:
        return sum(c.time_s for c in self.costs)


class _Evaluator:
    """Partitions schedules into kernels and prices them, incrementally where a move allows."""

    def __init__(self, graph: Graph, bindings, profile: DeviceProfile):
        self.graph, self.bindings, self.profile = graph, bindings, profile
        self.checked: dict = {}
        self.costs: dict = {}
        self.counts: dict = {}
        self.by_id = {n.id: n for n in graph.nodes}

    def count(self, shape) -> int:
        if shape not in self.counts:
            self.counts[shape] = elements(shape, self.bindings)
        return self.counts[shape]

    def _group(self, sched: Schedule, root: Node) -> Optional[Group]:
        g = group_of(self.graph, sched, root)
        return g if g is not None and check_group(self.graph, sched, g, self.checked) else None

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
            for n in (g.root,) + g.members + g.reads:
                index.setdefault(n.id, set()).add(root_id)
        return index

    def moved(self, old: Schedule, groups, cost: float, touching, sched: Schedule) -> Optional[tuple[dict, float]]:
        """The partition and total cost after a move from `old` to `sched` (only touched kernels change)."""
        changed = (sched.inline - old.inline) | (sched.row - old.row) | (sched.matmul - old.matmul) | (sched.epilogue - old.epilogue)
        new = dict(groups)
        for root_id in set().union(*(touching.get(c, set()) for c in changed)):
            cost -= self.cost(old, groups[root_id]).time_s
            if root_id in sched.inline:
                del new[root_id]
                continue
            g = self._group(sched, self.by_id[root_id])
            if g is None:
                return None
            new[root_id] = g
            cost += self.cost(sched, g).time_s
        return new, cost

    def cost(self, sched: Schedule, group: Group) -> KernelCost:
        key = (group.root.id, tuple(n.id for n in group.members), group.kind,
               tuple(sched.param(group.root.id, p, None) for p in ("block", "tile", "strategy")))
        if key not in self.costs:
            self.costs[key] = group_cost(group, sched, self.count, self.profile)
        return self.costs[key]

    def total(self, sched: Schedule, groups: Mapping[int, Group]) -> float:
        return sum(self.cost(sched, g).time_s for g in groups.values())


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
            edges, count = rebuild(edges, lambda n: rule.replace(n) if rule.matches(n, ctx) else None)
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


def _key(sched: Schedule):
    return (sched.inline, sched.row, sched.matmul, sched.epilogue, sched.params)


def search(edges: Sequence[Edge], dims_hint: Optional[Mapping[str, int]] = None, profile: DeviceProfile = H200,
           beam: int = 2, max_states: int = 20000, max_seconds: float = 30.0, progress: bool = True) -> SearchResult:
    start = time.perf_counter()
    before = list(edges)
    bindings = binding_for(toposort([e.node for e in edges]), dims_hint)
    trace: list[Step] = []
    cost0, kernels0 = _plain_cost(edges, bindings, profile)
    trace.append(Step("start", "one kernel per compute node", cost0, kernels0))
    edges = simplify(list(edges), bindings, profile, trace)
    graph = Graph(materialise_outputs(edges))
    ev = _Evaluator(graph, bindings, profile)
    plain = Schedule()
    groups = ev.partition(plain)
    best = (ev.total(plain, groups), plain, groups, [])
    seen = {_key(plain)}
    finalists = [(best[0], plain)]
    states, shown = 1, False
    for rules in (FUSION, FUSION + CLEANUP):  # clean-up rules only once the main fusions are settled
        frontier = [best]
        while frontier and states < max_states and time.perf_counter() - start < max_seconds:
            successors = []
            for cost, sched, groups, path in frontier:
                moves = _moves(graph, ev, sched, groups, cost, seen, rules)
                states += len(moves)
                successors += [(c, s, g, path + [(rule, node, c, len(g))]) for c, rule, node, s, g in moves[:beam]]
                descent = _descend(graph, ev, sched, cost, groups, path, moves, seen)
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
    trace += [Step(rule.name, f"{node.op.name}#{node.id}", c, k) for rule, node, c, k in path]
    sched, groups = _tune(graph, ev, sched, groups, trace)
    ordered = [groups[n.id] for n in graph.compute if n.id in groups]
    costs = [ev.cost(sched, g) for g in ordered]
    candidates = [sched] + [s for _, s in sorted(finalists, key=lambda item: item[0]) if _key(s) != _key(best[1])]
    if shown:
        print(file=sys.stderr)
    return SearchResult(graph, sched, ordered, costs, trace, before, bindings, states, time.perf_counter() - start,
                        candidates[:CANDIDATES])


def with_schedule(result: SearchResult, sched: Schedule) -> SearchResult:
    """The same search result, but with another of its schedules (a measured-mode candidate) chosen."""
    if sched is result.schedule:
        return result
    ev = _Evaluator(result.graph, result.bindings, H200)
    groups = ev.partition(sched)
    ordered = [groups[n.id] for n in result.graph.compute if n.id in groups]
    return replace(result, schedule=sched, groups=ordered, costs=[ev.cost(sched, g) for g in ordered])


def _moves(graph: Graph, ev: _Evaluator, sched: Schedule, groups, cost: float, seen: set, rules) -> list:
    """Every unexplored single rule application, best first: (cost, rule, node, schedule, groups)."""
    out = []
    touching = ev.touching(groups)
    for node in graph.compute:
        for rule in rules:
            if not rule.applies(graph, sched, node):
                continue
            new = rule.apply(graph, sched, node)
            if _key(new) in seen:
                continue
            seen.add(_key(new))
            moved = ev.moved(sched, groups, cost, touching, new)
            if moved is not None:
                out.append((moved[1], rule, node, new, moved[0]))
    out.sort(key=lambda m: (m[0], graph.position[m[2].id]))
    return out


def _descend(graph, ev, sched, cost, groups, path, moves, seen):
    """Apply every improving move in order of gain, re-checking each on the schedule built so far."""
    path = list(path)
    improved = False
    for _, rule, node, _, _ in moves:
        if not rule.applies(graph, sched, node):
            continue
        new = rule.apply(graph, sched, node)
        moved = ev.moved(sched, groups, cost, ev.touching(groups), new)
        if moved is not None and moved[1] < cost:
            groups, cost, sched, improved = moved[0], moved[1], new, True
            path.append((rule, node, cost, len(groups)))
    if not improved or _key(sched) in seen:
        return None
    seen.add(_key(sched))
    return cost, sched, groups, path


CANDIDATES = 4  # schedules kept for measured mode

PARAM_CHOICES = {
    "elementwise": [("block", (256, 128))],
    "reduce": [("strategy", ("thread", "block")), ("block", (256, 128))],
    "row": [("block", (256, 128))],
    "matmul": [("tile", (16, 32))],
    "gather": [],
}


def _tune(graph: Graph, ev: _Evaluator, sched: Schedule, groups: dict, trace: list[Step]):
    """Enumerate each kernel's schedule parameters and keep the cheapest under the cost model."""
    for root_id, group in groups.items():
        for name, choices in PARAM_CHOICES[group.kind]:
            scored = [(ev.cost(sched.with_param(root_id, name, v), group).time_s, k, v) for k, v in enumerate(choices)]
            _, _, value = min(scored)
            if value != choices[0] or sched.param(root_id, name, None) is None:
                sched = sched.with_param(root_id, name, value)
    trace.append(Step("tune_schedules", f"{len(groups)} kernel(s)", ev.total(sched, groups), len(groups)))
    return sched, groups


def _show_progress(enabled: bool, start: float, states: int, best: float) -> bool:
    """A status line on stderr once the search has run for a second; True if one was shown."""
    elapsed = time.perf_counter() - start
    if enabled and elapsed > 1.0:
        print(f"\rrefcomp search: {states} states, best {best * 1e6:.1f} us, {elapsed:.1f} s", end="", file=sys.stderr, flush=True)
        return True
    return False
