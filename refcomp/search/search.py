"""The search: algebraic rewrites to a fixed point, then a beam search over fusion and schedules.

Algebraic rules only ever remove work, so they are applied until nothing matches (each application
is recorded with the cost after it). Fusion moves trade memory traffic against recomputation and
exclude one another, so they are searched: a beam of schedules, each expanded by every applicable
fusion rule at every node; the successors of a schedule are the best single moves and one greedy
descent (all improving moves applied in order of gain, each re-checked on the running schedule).
A memo of visited schedules keeps any state from being explored twice; the search stops when a
round brings no improvement or the budget (states, seconds) is spent. The beam search runs once per
opening (an order of the rules, `OPENINGS`) and the cheapest outcome wins. It is deterministic:
nodes are visited in topological order and ties break on that order. Finally each kernel's schedule
parameters (`schedule.KERNEL_PARAMS`: block size, reduction strategy, matmul tile) are enumerated
under the cost model. Everything is priced on one `DeviceProfile`, which the result carries (`profile`).
"""
from __future__ import annotations

import itertools

import time
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Sequence

from ..codegen.legality import Group, ProgramNames, materialise_outputs
from ..ops.graph import toposort
from ..ops.primitives import Edge, Node
from .cost import H200, DeviceProfile, KernelCost, binding_for, elements
from .evaluate import Evaluator
from .fusion import Graph
from .fusion_rules import CLEANUP, FUSION
from .moves import apply_move, descend, moves_of, where_in
from .schedule import KERNEL_PARAMS, Schedule
from .carry import carry_scatters
from .row_stats import carry_row_stats
from .tail import carry_tails
from ..ops.graph import identity_edge, own_scatter_tables, rebuild, structural_key
from .rules import ALGEBRA, Context
from .split import split_skinny
from ..progress import stage


@dataclass
class Step:
    rule: str
    site: str
    cost_s: float
    kernels: int
    copies: int = 0  # the other copies of a repeated layer the move also fired in (search/repeat.py)


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
    opening: str = ""  # the opening (OPENINGS) whose search found the schedule
    complete: bool = (
        True  # False if the search stopped on its state or time budget (then no move is known cheaper)
    )
    # The search's own evaluator, whose kernels are built and priced: explaining the result right
    # after the search (the program cache stores the explanation) then prices its untaken moves from
    # there instead of building them all again. The compiler drops it once the program is made.
    evaluator: Optional[Evaluator] = field(default=None, compare=False, repr=False)

    @property
    def time_s(self) -> float:
        return sum(c.time_s for c in self.costs)


def _plain_cost(edges: Sequence[Edge], bindings, profile, prices: dict) -> tuple[float, int]:
    graph = Graph(materialise_outputs(edges))
    ev = Evaluator(graph, bindings, profile, prices)
    groups = ev.partition(Schedule())
    return ev.total(Schedule(), groups), len(groups)


def simplify(edges: list[Edge], bindings, profile: DeviceProfile, trace: list[Step],
             prices: Optional[dict] = None) -> list[Edge]:
    """Apply the algebraic rules, common-subexpression merging and dead-code removal to a fixed point.
    `prices`: the evaluator memo (see Evaluator) the search shares between its pricings."""
    prices = {} if prices is None else prices
    for _ in range(20):
        changed = False
        nodes, ctx = None, None
        for rule in ALGEBRA:
            if nodes is None:
                nodes = toposort([e.node for e in edges])
                ctx = _context(edges, nodes)
            if not any(rule.matches(n, ctx) for n in nodes):
                continue  # (exact: with no match in the graph as it is, a rebuild would change nothing)
            edges, count = rebuild(edges, lambda n: rule.rewrite(n, ctx))
            nodes = None
            if count:
                changed = True
                trace.append(
                    Step(rule.name, f"{count} site(s)", *_plain_cost(edges, bindings, profile, prices))
                )
        seen: dict = {}
        memo: dict = {}

        def merge(node):
            key = structural_key(node, memo)
            if key in seen:
                return identity_edge(seen[key])
            seen[key] = node
            return None

        before = len(nodes if nodes is not None else toposort([e.node for e in edges]))  # (sorted above)
        edges, count = rebuild(edges, merge)
        if count:
            changed = True
            trace.append(
                Step("cse", f"{count} duplicate(s) merged", *_plain_cost(edges, bindings, profile, prices))
            )
        removed = before - count - len(toposort([e.node for e in edges]))
        if removed > 0:
            trace.append(
                Step(
                    "dead_code",
                    f"{removed} node(s) no longer read",
                    *_plain_cost(edges, bindings, profile, prices),
                )
            )
        if not changed:
            break
    return edges


def _context(edges: Sequence[Edge], nodes: Optional[Sequence[Node]] = None) -> Context:
    """The consumer counts and outputs the algebraic rules read; `nodes`: the graph of `edges`, sorted
    (simplify has just sorted it: a deep model's graph is not sorted twice)."""
    nodes = toposort([e.node for e in edges]) if nodes is None else nodes
    consumers: dict[int, int] = {}
    for n in nodes:
        for s in n.srcs:
            consumers[s.node.id] = consumers.get(s.node.id, 0) + 1
    for e in edges:
        consumers[e.node.id] = consumers.get(e.node.id, 0) + 1
    return Context(consumers, {e.node.id for e in edges})


def search(
    edges: Sequence[Edge],
    dims_hint: Optional[Mapping[str, int]] = None,
    profile: DeviceProfile = H200,
    beam: int = 2,
    max_states: int = 20000,
    max_seconds: float = 30.0,
    progress: bool = True,
) -> SearchResult:
    """`progress=False` keeps this search off the progress display even when refcomp.progress is on."""
    with stage("search", progress) as shown:
        return _search(edges, dims_hint, profile, beam, max_states, max_seconds, shown)


def _search(edges, dims_hint, profile, beam, max_states, max_seconds, shown) -> SearchResult:
    start = time.perf_counter()
    deadline = start + max_seconds  # honoured inside a round too: a round over a huge graph is long
    before = list(edges)
    bindings = binding_for(toposort([e.node for e in edges]), dims_hint, edges)
    trace: list[Step] = []
    prices: dict = {}
    cost0, kernels0 = _plain_cost(edges, bindings, profile, prices)
    trace.append(Step("start", "one kernel per compute node", cost0, kernels0))
    edges = simplify(list(edges), bindings, profile, trace, prices)
    fuse = lambda edges, note: _fuse(edges, bindings, profile, prices, beam, max_states, deadline, note)  # noqa: E731
    edges, splits = split_skinny(edges, lambda shape: elements(shape, bindings),
                                 lambda edge: fuse([edge], lambda text: None).best[0],
                                 profile.resident_threads)
    if splits:
        names = ProgramNames.of(toposort([e.node for e in edges]))  # the numbers the searched graph shows
        where = ", ".join(f"{names.label(n)} into {chunks} chunks" for n, chunks in splits)
        trace.append(Step("split_k", where, *_plain_cost(edges, bindings, profile, prices)))
    edges = own_scatter_tables(
        edges
    )  # after every rewrite: each Scatter's table a buffer it alone may overwrite
    found = fuse(edges, shown.note)
    graph, ev = found.graph, found.ev
    cost, sched, groups, path = found.best
    trace += [Step(rule.name, where_in(graph, sites), c, k, len(sites) - 1) for rule, sites, c, k in path]
    sched, groups = _tune(graph, ev, sched, groups, trace)
    sched, groups, moved = carry_row_stats(graph, ev, sched, groups,
                                           lambda s, some: _tune(graph, ev, s, some, [])[0])
    if moved:  # shown in explain(): the layer norms whose statistics the matmul before computes
        trace.append(Step("carry_row_stats", ", ".join(graph.names.label(n) for n in moved),
                          ev.total(sched, groups), len(groups)))
    sched, groups, finished = carry_tails(graph, ev, sched, groups)
    if finished:  # shown in explain(): the short reductions the kernel before finishes
        trace.append(Step("carry_tails", ", ".join(graph.names.label(n) for n in finished),
                          ev.total(sched, groups), len(groups)))
    ordered = [groups[n.id] for n in graph.compute if n.id in groups]
    ordered, costs = carry_scatters(ordered, [ev.cost(sched, g) for g in ordered], sched, profile)
    carrying = [g for g in ordered if g.carried]
    if carrying:  # shown in explain(): the kernel count and time after the matmuls took their Scatters
        label = graph.names.label
        where = ", ".join(f"{label(s)} by {label(g.root)}" for g in carrying for s in g.carried)
        # priced like the steps before it (the kernels' own accesses), so the trace's deltas compare
        priced = sum(ev.price(sched, g).time_s for g in ordered)
        trace.append(Step("carry_scatters", where, priced, len(ordered)))
    candidates = [sched] + [
        s for _, s in sorted(found.finalists, key=lambda item: item[0]) if s != found.best[1]
    ]
    complete = found.states < max_states and time.perf_counter() < deadline
    return SearchResult(graph, sched, ordered, costs, trace, before, bindings, profile, found.states,
                        time.perf_counter() - start, candidates[:CANDIDATES], found.opening, complete, ev)


@dataclass
class _Fused:
    """One fusion search's outcome: the best (cost, schedule, groups, path of moves), the cheapest
    schedules seen (for measured mode), and the states explored."""

    graph: Graph
    ev: Evaluator
    best: tuple
    finalists: list
    states: int
    opening: str  # the name of the opening that found the best schedule


@dataclass(frozen=True)
class Opening:
    """An order in which the beam search takes up the rules: a rule set per phase, each phase run to
    its fixed point from the last one's best. `beam`: its width (None: the search's)."""

    name: str
    phases: tuple
    beam: Optional[int] = None


# The search is greedy, so the order in which it decides kinds of fusion matters. Inlining an
# elementwise step into the next matmuls' operands (each step saves a launch) can rule out the epilogue
# that would compute it once: on the GPT-2 block the attention projection's bias and the residual add
# are then recomputed, from two buffers, by both kernels that read the residual stream. Deciding every
# contraction first can instead make a ten-column matmul tiled (the MLP's last layer) where a
# block-per-output reduction with its bias fused is cheaper. So the search runs from the plain
# schedule once per opening and keeps the cheapest outcome (the first on a tie). The second opening is
# a greedy descent (beam 1): it shares the evaluator with the first, so kernels both reach are built
# and priced once, and it costs a GPT-2 block about a fifth more compile time.
CONTRACTIONS = [
    rule for rule in FUSION if rule.name in ("matmul", "online_softmax", "stream_scores", "matmul_epilogue")
]
OPENINGS = (Opening("elementwise first", (FUSION, FUSION + CLEANUP)),  # clean-up once the main fusions settle
            Opening("contractions first", (CONTRACTIONS, FUSION, FUSION + CLEANUP), beam=1))
# A third opening, run only where the best of those leaves a row's statistic (a layer norm's mean or
# variance) in a reduction kernel of its own whose reader is a matmul that recomputes the normalised
# rows in its operand loads: the first descent inlines the normalised rows into the matmul before the
# row fusion that would compute them once becomes possible (GPT-2's decode step at 32 rows, once
# matmuls split K across their threads). Fusing rows first finds that schedule; run everywhere, it
# would cost a GPT-2 block's first compile a fifth more for nothing.
ROWS_FIRST = Opening(
    "rows first",
    ([rule for rule in FUSION if rule.name in ("row_fuse", "fuse_elementwise", "unroll_short_reduce")],
     FUSION, FUSION + CLEANUP),
    beam=1,
)


def _statistic_recomputed_by_a_matmul(groups) -> bool:
    """Whether a reduction kernel's result is read by a matmul kernel that inlines elementwise steps
    between that result and its operands (see ROWS_FIRST)."""
    reductions = {root for root, g in groups.items() if g.kind == "reduce"}
    return any(
        g.kind == "matmul" and any(s.node.id in reductions for m in g.members for s in m.srcs)
        for g in groups.values()
    )


def _fuse(edges, bindings, profile, prices, beam, max_states, deadline, note) -> _Fused:
    """The beam search over fusion moves of the graph of `edges`, once per opening."""
    graph = Graph(materialise_outputs(edges))
    ev = Evaluator(graph, bindings, profile, prices)
    plain = Schedule()
    groups = ev.partition(plain)
    start = (ev.total(plain, groups), plain, groups, [])
    best, finalists, states, winner = start, [(start[0], plain)], 1, OPENINGS[0].name
    for opening in OPENINGS + (ROWS_FIRST,):
        if opening is ROWS_FIRST and not _statistic_recomputed_by_a_matmul(best[2]):
            break
        found, seen_finalists, states = _beam(
            graph, ev, start, opening.phases, opening.beam or beam, max_states, deadline, note, states
        )
        finalists += seen_finalists
        if found[0] < best[0]:
            best, winner = found, opening.name
    return _Fused(graph, ev, best, finalists, states, winner)


def _beam(graph, ev, best, phases, beam, max_states, deadline, note, states):
    """(the best state, the cheapest schedules of each round, the states counted so far)."""
    seen = {best[1]}
    finalists = []
    for rules in phases:
        frontier = [best]
        while frontier and states < max_states and time.perf_counter() < deadline:
            successors = []
            for cost, sched, groups, path in frontier:
                moves = moves_of(graph, ev, sched, groups, cost, seen, rules, deadline)
                states += len(moves)
                for c, rule, sites, s, delta in moves[:beam]:
                    g = apply_move(dict(groups), delta)
                    successors.append((c, s, g, path + [(rule, sites, c, len(g))]))
                descent = descend(graph, ev, sched, cost, groups, path, moves, seen, deadline)
                if descent is not None:
                    successors.append(descent)
                note(f"{states} states, best {best[0] * 1e6:.1f} us")
            successors.sort(key=lambda item: item[0])
            finalists += [(c, s) for c, s, _, _ in successors[:CANDIDATES]]
            frontier = successors[:beam]
            if not frontier or frontier[0][0] >= best[0]:
                break
            best = frontier[0]
    return best, finalists, states


def scheduled(graph: Graph, sched: Schedule, bindings, profile: DeviceProfile,
              checked: bool = True) -> Optional[tuple[list[Group], list[KernelCost]]]:
    """The kernels `sched` makes of `graph`, in program order, and their prices; None if illegal
    (`checked=False`: see Evaluator.partition)."""
    ev = Evaluator(graph, bindings, profile)
    groups = ev.partition(sched, checked)
    if groups is None:
        return None
    ordered = [groups[n.id] for n in graph.compute if n.id in groups]
    return carry_scatters(ordered, [ev.cost(sched, g) for g in ordered], sched, profile)


def with_schedule(result: SearchResult, sched: Schedule) -> SearchResult:
    """The same search result, but with another of its schedules (a measured-mode candidate) chosen."""
    if sched is result.schedule:
        return result
    groups, costs = scheduled(result.graph, sched, result.bindings, result.profile)
    return replace(result, schedule=sched, groups=groups, costs=costs, evaluator=None)


CANDIDATES = 4  # schedules kept for measured mode

def _tune(graph: Graph, ev: Evaluator, sched: Schedule, groups: dict, trace: list[Step]):
    """Enumerate each kernel's schedule parameters and keep the cheapest under the cost model.

    The choices change how threads walk memory (a thread or a block per output, the tile edge), which
    only the kernel's own index expressions show, so each choice is priced on the kernel built for
    it (`access_cost`). The parameters are tried together (at most eight combinations a kernel): one
    at a time, the LM head's wide tile looked dearer until B's loads walked K, and it kept the
    narrow tile at 1.4x the time. A kernel's cost reads only its own parameters, so each is priced on
    a schedule holding just those (a schedule with every kernel's parameters would be rebuilt per
    choice: quadratic)."""
    chosen: dict = {}
    for root_id, group in groups.items():
        tuned = [p for p in KERNEL_PARAMS if group.kind in p.choices]
        price = ev.access_cost if any(p.moves_memory for p in tuned) else ev.cost
        def priced(values):
            alone = replace(sched, params=()).with_params(
                {(root_id, p.name): v for p, v in zip(tuned, values)}
            )
            return price(alone, group).time_s
        combinations = list(itertools.product(*(ev.choices(sched, group, p) for p in tuned)))
        best = min(range(len(combinations)), key=lambda i: (priced(combinations[i]), i))
        chosen.update({(root_id, p.name): v for p, v in zip(tuned, combinations[best])})
    sched = sched.with_params(chosen)
    trace.append(Step("tune_schedules", f"{len(groups)} kernel(s)", ev.total(sched, groups), len(groups)))
    return sched, groups


def unfused_costs(output_nodes: Sequence[Node], dims_hint: Optional[Mapping[str, int]] = None,
                  profile: DeviceProfile = H200) -> tuple[list[KernelCost], dict[str, int]]:
    """The cost of each kernel of the plain lowering (one per compute node, in graph order), and the
    binding they are priced at: what `search=False` programs report."""
    graph = Graph(list(output_nodes))
    bindings = binding_for(graph.nodes, dims_hint, [identity_edge(n) for n in graph.output_nodes])
    ev = Evaluator(graph, bindings, profile)
    groups = ev.partition(Schedule())
    return [ev.cost(Schedule(), groups[n.id]) for n in graph.compute], bindings
