"""Moves: one fusion rule fired at one node (and at the same node of every copy of its layer), each
priced incrementally by the evaluator; the beam search (search.py) expands a schedule by every legal
move and by one greedy descent through the improving ones."""
from __future__ import annotations

import time
from typing import Mapping, Optional

from ..codegen.legality import Group
from ..ops.primitives import Node
from .evaluate import Evaluator, changed_by, touched_by
from .fusion import Graph
from .schedule import Schedule


def _sites(graph: Graph, sched: Schedule, rule, node: Node) -> tuple[Node, ...]:
    """Where a move at `node` fires: there and at the same node of every copy of its layer
    (search/repeat.py), wherever the rule applies (its condition asked directly: a deep model's
    rounds ask it at every copy)."""
    applies = rule.when.test
    return tuple(n for n in (node,) + graph.copies.of(node) if applies(graph, sched, n))


def _candidates(graph: Graph, sched: Schedule, rules) -> list[tuple[Node, tuple]]:
    """Each node a move may fire at (a layer's representative, never its copies), with the rules whose
    leading conditions on the node alone hold there: the others apply there in no schedule, nor at
    any copy. Found once per search and rule set (graph.screened), not in every round at every state."""
    key = tuple(rule.name for rule in rules)
    if key not in graph.screened:
        live = [(node, tuple(r for r in rules if not r.applies_at_no_copy(graph, sched, node)))
                for node in graph.compute if node.id not in graph.copies.copied]
        graph.screened[key] = [(node, kept) for node, kept in live if kept]
    return graph.screened[key]


def _try(ev: Evaluator, sched: Schedule, groups, cost: float, touching, rule, sites) -> tuple:
    """The schedule after `rule` fires at `sites`, and its (changed kernels, cost), or None if illegal."""
    decided: dict[str, set] = {}
    for site in sites:
        for name, ids in rule.decided(site).items():
            decided.setdefault(name, set()).update(ids)
    new = sched.decide(**decided)
    return new, lambda: ev.moved(sched, groups, cost, touching, new, changed_by(sites, decided))


def moves_of(
    graph: Graph, ev: Evaluator, sched: Schedule, groups, cost: float, seen: set, rules, deadline: float
) -> list:
    """Every unexplored single rule application, best first: (cost, rule, sites, schedule, changed
    kernels). A move at a layer's node fires in every copy of the layer; should the tied move be
    illegal somewhere, each copy is tried alone."""
    out = []
    touching = ev.touching(groups)

    def legal_or_seen(rule, sites) -> bool:
        new, price = _try(ev, sched, groups, cost, touching, rule, sites)
        if new in seen:
            return True
        seen.add(new)
        moved = price()
        if moved is not None:
            out.append((moved[1], rule, sites, new, moved[0]))
        return moved is not None

    for node, candidates in _candidates(graph, sched, rules):
        if time.perf_counter() > deadline:
            break
        for rule in candidates:
            sites = _sites(graph, sched, rule, node)
            if sites and not legal_or_seen(rule, sites) and len(sites) > 1:
                for site in sites:
                    legal_or_seen(rule, (site,))
    out.sort(key=lambda m: (m[0], graph.position[m[2][0].id]))
    return out


def descend(graph, ev, sched, cost, groups, path, moves, seen, deadline: float):
    """Apply every improving move in order of gain, re-checking each on the schedule built so far."""
    path, groups = list(path), dict(groups)
    improved = False
    touching = ev.touching(groups)
    for _, rule, sites, _, _ in moves:
        if time.perf_counter() > deadline:
            break
        sites = tuple(n for n in sites if rule.applies(graph, sched, n))
        if not sites:
            continue
        new, price = _try(ev, sched, groups, cost, touching, rule, sites)
        moved = price()
        if moved is not None and moved[1] < cost:
            delta, cost, sched, improved = moved[0], moved[1], new, True
            _retouch(touching, groups, delta)
            apply_move(groups, delta)
            path.append((rule, sites, cost, len(groups)))
    if not improved or sched in seen:
        return None
    seen.add(sched)
    return cost, sched, groups, path


def apply_move(groups: dict, delta: Mapping[int, Optional[Group]]) -> dict:
    for root_id, g in delta.items():
        if g is None:
            groups.pop(root_id, None)
        else:
            groups[root_id] = g
    return groups


def _retouch(
    touching: dict[int, set[int]], groups: Mapping[int, Group], delta: Mapping[int, Optional[Group]]
) -> None:
    """Update the node -> kernel roots index for the kernels a move changes (a rebuild is O(graph))."""
    for root_id, g in delta.items():
        for n in touched_by(groups.get(root_id)):
            touching[n.id].discard(root_id)
        for n in touched_by(g):
            touching.setdefault(n.id, set()).add(root_id)


def where_in(graph: Graph, sites) -> str:
    more = f" and {len(sites) - 1} cop{'y' if len(sites) == 2 else 'ies'}" if len(sites) > 1 else ""
    return graph.names.label(sites[0]) + more
