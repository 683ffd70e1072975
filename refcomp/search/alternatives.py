"""The moves a finished search did not take, and what each would have cost.

A search that stops makes a claim: no single rule application from its schedule is cheaper under
the model. `untaken_moves` prices every move still legal there, so the claim can be checked (a test
and the fuzzer assert it) and read (`refcomp explain` lists them): each fusion the search declined,
with the bytes it would save and the time it would cost: the trade behind a program that moves more
than the minimum bytes. An empty list says no rule applies anywhere any more: a program with fewer
bytes needs a fusion no rule or template expresses.

Moves are priced as the fusion search priced them: by its Evaluator (or, once a program has let it go,
a fresh one at the search's binding), on the schedule without its tuned parameters (each kernel at
its best open parameters).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from .evaluate import Evaluator
from .fusion_rules import CLEANUP, FUSION
from .moves import apply_move, moves_of, where_in
from .search import SearchResult
from .schedule import Schedule


@dataclass(frozen=True)
class Outcome:
    """A schedule as the search prices it; `rule` and `where` name the move that led to it."""

    rule: str
    where: str
    kernels: int
    bytes: int
    time_s: float


# Seconds that explain and the explorer spend pricing untaken moves: a report must not outlast the
# search it reports on (a long chain has thousands of moves, each priced afresh).
REPORT_SECONDS = 5.0


def untaken_moves(result: SearchResult, deadline: float = math.inf) -> tuple[Outcome, list[Outcome]]:
    """(the chosen schedule, every single move still legal from it, cheapest first; a tied move at a
    repeated layer counts as one). Past `deadline` (time.perf_counter) no more nodes are tried."""
    graph = result.graph
    ev = result.evaluator or Evaluator(graph, result.bindings, result.profile)
    sched = replace(result.schedule, params=())
    groups = ev.partition(sched)

    def outcome(s: Schedule, kernels: dict, rule: str, where: str, time_s: float) -> Outcome:
        return Outcome(rule, where, len(kernels), sum(ev.price(s, g).bytes for g in kernels.values()), time_s)

    chosen = outcome(sched, groups, "chosen", "", ev.total(sched, groups))
    moves = moves_of(graph, ev, sched, groups, chosen.time_s, {sched}, FUSION + CLEANUP, deadline)
    return chosen, [outcome(new, apply_move(dict(groups), delta), rule.name, where_in(graph, sites), cost)
                    for cost, rule, sites, new, delta in moves]


UNTAKEN_HEADER = ["rule", "where", "kernels", "bytes change", "time change us"]


def untaken_rows(result: SearchResult) -> tuple[str, list[list[str]]]:
    """What `explain` and the explorer show: (what the list claims, one row of text per move, in
    UNTAKEN_HEADER's columns, each against the chosen schedule), priced for at most REPORT_SECONDS."""
    deadline = time.perf_counter() + REPORT_SECONDS
    chosen, moves = untaken_moves(result, deadline)
    claim = ("none is cheaper, or the search would have taken it" if result.complete
             else "the search stopped on its budget, so some may be cheaper")
    if time.perf_counter() > deadline:
        claim += f"; listing stopped after {REPORT_SECONDS:g} s, so more moves may exist"
    return claim, [[m.rule, m.where, str(m.kernels), f"{m.bytes - chosen.bytes:+,}",
                    f"{(m.time_s - chosen.time_s) * 1e6:+.2f}"] for m in moves]
