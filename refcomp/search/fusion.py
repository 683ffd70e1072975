"""Fusion rules, and the partition of a graph into kernels that a schedule (search/schedule.py) implies.

Each rule below is a move from one schedule to another, sound because recomputing a pure function
where it is read gives the value that would have been stored (or, for the online softmax, by the
identity its rule states); the cost model decides whether a move pays.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..codegen.legality import (MAX_FUSED_NODES, MAX_INLINED_VALUES, SHORT_REDUCE, Group, ProgramNames,
                               default_reduce_strategy, matmul_axes, online_softmax,
                               row_statistics, streamed_scores)
from ..ops.dtypes import DTYPES
from ..ops.graph import toposort
from ..ops.primitives import ELEMENTWISE, GATHER, LEAF, REDUCE, Node
from .cost import DeviceProfile, KernelCost, roofline
from .repeat import Copies, find_copies
from .schedule import DECISIONS, Schedule

# A buffer read through a broadcast (the same element by many threads) costs at most this many
# passes over it: caches absorb the rest. The tiled matmul reads each operand once.
REREAD_LIMIT = 4


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
        self.by_id = {n.id: n for n in self.nodes}
        self.reduces = frozenset(n.id for n in self.compute if n.op.kind == REDUCE)
        self.sources = {n.id: tuple(s.node.id for s in n.srcs) for n in self.nodes}  # read per edge: a source read twice, twice

    @functools.cached_property
    def copies(self) -> Copies:
        """The graph's repeated layers (search/repeat.py): searched once, scheduled alike."""
        return find_copies(self.nodes, self.position, self.consumers)


def _short_reduce(node: Node) -> bool:
    extent = node.srcs[0].shape[node.attrs["axis"]]
    return isinstance(extent, int) and extent <= SHORT_REDUCE


# The search's cheap bound on a kernel's recomputed values (`_recomputations`) counts every path, so
# it overestimates wildly where codegen reuses a value read twice at one index (tanh's: 655 paths,
# 55 values). Above this many paths a fusion is refused outright; between codegen's
# MAX_INLINED_VALUES and this, codegen counts the real values (check_group).
MAX_PATH_COPIES = 1 << 16


def _recomputations(graph: Graph, root: Node, ordered: tuple, members: dict, unrolled: set[int]) -> int:
    """An upper bound on the values the kernel recomputes per output element: a fused producer is
    recomputed once per read, and an unrolled reduce (`unrolled`: their ids) reads its source
    `extent` times, so copies multiply along a path (codegen reuses a value read twice at the same
    index: the real count is often far lower)."""
    copies, sources = {root.id: 1}, graph.sources
    for node in (root,) + tuple(reversed(ordered)):
        reads = copies.get(node.id, 0)
        if node.id in unrolled:
            reads *= node.srcs[0].shape[node.attrs["axis"]]
        for src in sources[node.id]:
            if src in members:
                copies[src] = copies.get(src, 0) + reads
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
            if s.op.literal:
                continue
            if s.id in sched.inline and s.id not in graph.outputs:
                if s.id not in members:
                    members[s.id] = s
                    stack.append(s)
                    if len(members) > MAX_FUSED_NODES:  # too big a kernel (and too deep a recursion in codegen)
                        return None
            else:
                reads[s.id] = s
    return kernel_of(graph, sched, root, members, reads)


def kernel_of(graph: Graph, sched: Schedule, root: Node, members: dict[int, Node], reads: dict[int, Node]) -> Optional[Group]:
    """The kernel rooted at `root` that recomputes `members` and reads `reads` (by id), or None when the
    schedule asks for an impossible one. Set tests first: a long chain's kernel has many members."""
    if len(members) > MAX_FUSED_NODES or len(graph.copies.boundaries.intersection(members)) > 1:
        return None  # too big a kernel, or recomputing through two layer boundaries (search/repeat.py)
    position = graph.position
    ordered = tuple(members[i] for i in sorted(members, key=position.__getitem__))
    everything = ordered + (root,)
    templated = sched.templated
    decided = bool(templated) and (not templated.isdisjoint(members) or root.id in templated)
    mm = [n for n in everything if n.id in sched.matmul and n.id not in sched.streamed] if decided else []
    rows = [n for n in ordered if n.id in sched.row] if decided else []
    epilogues = [n for n in ordered if n.id in sched.epilogue] if decided else []
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
    if kind != "matmul" and decided and any(n.id in sched.prologue for n in ordered):
        kind = None  # only the matmul template computes prologue reductions
    unrolled = {i for i in graph.reduces.intersection(members) if i not in templated}
    if kind is None or any(not _short_reduce(members[i]) for i in unrolled):
        return None
    recomputed = _recomputations(graph, root, ordered, members, unrolled)
    if recomputed > MAX_PATH_COPIES:
        return None
    return Group(root, ordered, tuple(reads[i] for i in sorted(reads, key=position.__getitem__)), kind, recomputed)


def group_params(sched: Schedule, group: Group) -> dict:
    """What code generation reads for one kernel: the decisions it must be told of, and the kernel's parameters."""
    told = {d.metadata["codegen"]: getattr(sched, d.name) for d in DECISIONS if d.metadata["codegen"]}
    return {**told, **sched.kernel_params(group.root.id, group.kind)}


def group_cost(group: Group, sched: Schedule, count: Callable, profile: DeviceProfile, name: str = "") -> KernelCost:
    """The roofline cost of one kernel; `count(shape)` is the number of elements at the binding."""
    root = group.root
    ops = len(group.members) + 1
    points = _iteration_points(group, sched, count)
    itemsize = lambda n: DTYPES[n.dtype].itemsize  # noqa: E731
    nbytes = itemsize(root) * count(root.shape)
    for n in group.reads:  # tiles read each operand once; other kernels re-read broadcasts through caches
        size = count(n.shape)
        nbytes += itemsize(n) * (size if group.kind == "matmul" else min(points, REREAD_LIMIT * size))
    # Through L2 every iteration point reads each buffer once (a tiled matmul: once per tile edge)
    tile = sched.param(root.id, "tile") if group.kind == "matmul" else 1
    l2_bytes = itemsize(root) * count(root.shape) + sum(itemsize(n) for n in group.reads) * points // tile
    block = sched.param(root.id, "block")
    if group.kind == "matmul":
        reduce = next(n for n in (root,) + group.members if n.id in sched.matmul)
        m_n = count(reduce.shape)
        k = count(reduce.srcs[0].shape) // max(m_n, 1)
        tile = sched.param(root.id, "tile")
        flops = 2 * m_n * k + ops * m_n
        flops += sum(2 * count(n.srcs[0].shape) for n in group.members if n.id in sched.streamed)  # q . k per score
        flops += sum(count(n.srcs[0].shape) for n in group.members if n.id in sched.prologue)  # once per row (a bound below)
        threads = -(-m_n // (tile * tile)) * tile * tile
    elif group.kind in ("reduce", "row"):
        reduce = root if root.op.kind == REDUCE else next(n for n in group.members if n.id in sched.templated)
        points = count(reduce.srcs[0].shape)
        rows = count(reduce.shape)
        phases = 1 + sum(1 for n in group.members if n.id in sched.row)
        flops = points * ops * phases
        strategy = sched.param(root.id, "strategy") or default_reduce_strategy(reduce.srcs[0].shape[reduce.attrs["axis"]])
        block_per_row = group.kind == "row" or strategy == "block"
        threads = rows * block if block_per_row else rows
    else:
        points = count(root.shape)
        flops, threads = points * ops, points
    return roofline(name or root.op.name, group.kind, nbytes, flops, threads, profile, l2_bytes)


def _iteration_points(group: Group, sched: Schedule, count) -> int:
    """How many (output or reduction) points the kernel visits: each reads every buffer once."""
    root = group.root
    if group.kind in ("reduce", "row", "matmul"):
        reduce = root if root.op.kind == REDUCE else next(
            (n for n in group.members if n.id in sched.templated), root)
        if reduce.op.kind == REDUCE:
            return count(reduce.srcs[0].shape)
    return count(root.shape)


# --- the fusion rules: moves from one schedule to another ------------------------------------
# A rule reads: name, when it applies (a condition on the graph, the schedule and the node, in words
# joined by & and ~), what it decides (the node, or its product, into which decisions), soundness.
@dataclass(frozen=True)
class When:
    """A condition on (graph, schedule, node); `a & b` and `~a` combine conditions, in order."""

    test: Callable[[Graph, Schedule, Node], bool]
    text: str
    own: bool = False  # reads only the node's own op, attributes and shapes: alike at every copy of a layer's node
    lead: Optional["When"] = None  # of a conjunction, its longest leading part that reads only the node (own)

    def __call__(self, graph: Graph, sched: Schedule, node: Node) -> bool:
        return self.test(graph, sched, node)

    def __and__(self, other: "When") -> "When":
        return When(lambda g, s, n: self.test(g, s, n) and other.test(g, s, n), f"{self.text} and {other.text}",
                    self.own and other.own, self if self.own and not other.own else self.lead)

    def __invert__(self) -> "When":
        return When(lambda g, s, n: not self.test(g, s, n), f"not {self.text}", self.own)

    def __str__(self) -> str:
        return self.text


def _free(graph: Graph, sched: Schedule, n: Node) -> bool:
    return (n.id not in sched.inline and n.id not in graph.outputs and bool(graph.consumers[n.id])
            and not any(c.op.kind == GATHER for c in graph.consumers[n.id]))


def _product(n: Node) -> Node:
    """What a SumReduce sums: the Mul of a matmul."""
    return n.srcs[0].node


def _itself(n: Node) -> Node:
    return n


def scheduled(decision_name: str) -> When:
    assert decision_name in {d.name for d in DECISIONS}, decision_name
    return When(lambda g, s, n: n.id in getattr(s, decision_name), f"in {decision_name}")


def read_only_by(reader: When) -> When:
    return When(lambda g, s, n: len(g.consumers[n.id]) == 1 and reader.test(g, s, g.consumers[n.id][0]),
                f"read only by a node that is ({reader})")


elementwise = When(lambda g, s, n: n.op.kind in ELEMENTWISE, "elementwise", own=True)
reduction = When(lambda g, s, n: n.op.kind == REDUCE, "a reduction", own=True)
short = When(lambda g, s, n: _short_reduce(n), f"over at most {SHORT_REDUCE} values", own=True)
free = When(_free, "free (not inline, no output, read only by kernels that can inline it)")
a_sum = When(lambda g, s, n: n.op.name == "SumReduce", "a SumReduce", own=True)
product_unshared = When(lambda g, s, n: _product(n).id not in g.outputs and len(g.consumers[_product(n).id]) == 1,
                        "whose product nothing else reads")
matmul_shaped = When(lambda g, s, n: matmul_axes(n) is not None, "a matmul (a varies along no N axis, b along no M axis)")
def _online_parts(g: Graph, s: Schedule, n: Node):
    """The online-softmax parts of the contraction n (codegen.online), when nothing outside the
    pattern reads them and they are not yet online."""
    parts = online_softmax(n)
    if parts is None or parts.maximum.id in s.online:
        return None
    inside = {p.id for p in parts.nodes} | {_product(n).id}
    if any(p.id in g.outputs or any(c.id not in inside for c in g.consumers[p.id]) for p in parts.nodes):
        return None
    return parts


read_by_inline_elementwise = When(lambda g, s, n: all(c.op.kind in ELEMENTWISE and c.id in s.inline for c in g.consumers[n.id]),
                                  "read only by elementwise nodes computed inline")
reads_online_softmax = When(lambda g, s, n: _online_parts(g, s, n) is not None,
                            "whose operand a is softmax(S) over its K axis, the softmax's max and sum read by nothing else")
def _streamable(g: Graph, s: Schedule, n: Node):
    """(S, the elementwise nodes from S to the scores) when n's softmax is online and its scores are
    an elementwise function of one matmul S read by nothing else, not yet streamed."""
    parts = online_softmax(n)
    if parts is None or parts.maximum.id not in s.online:
        return None
    scores, chain = streamed_scores(parts)
    if scores is None or scores.id in s.streamed or scores.id in g.outputs:
        return None
    inside = {c.id for c in chain} | {p.id for p in parts.nodes}
    if any(c.id not in inside for c in g.consumers[scores.id]) or any(
            c.id in g.outputs or any(r.op.kind == GATHER for r in g.consumers[c.id]) for c in chain):
        return None
    return scores, chain


streamable_scores = When(lambda g, s, n: _streamable(g, s, n) is not None,
                         "whose online softmax's scores are an elementwise function of a matmul S that nothing else reads")
reader_shaped = When(lambda g, s, n: g.consumers[n.id][0].shape == n.shape, "of its reader's shape")
squares_of_a_prologue_mean = When(
    lambda g, s, n: (lambda stats: stats is not None and stats.total.id in s.prologue)(row_statistics(n)),
    "a sum of squared deviations from S / n, S the row's sum, also computed in the prologue")


def into(*decision_names: str, of: Callable[[Node], object] = _itself) -> tuple:
    """The decisions a rule adds nodes to (the matched node, or `of` it: a node or a tuple of nodes)."""
    assert set(decision_names) <= {d.name for d in DECISIONS}, decision_names
    return tuple((name, of) for name in decision_names)


@dataclass(frozen=True)
class FusionRule:
    name: str
    doc: str
    when: When
    then: tuple  # (decision name, node -> the node it decides) pairs, from `into`
    soundness: str

    def applies(self, graph: Graph, sched: Schedule, node: Node) -> bool:
        return self.when(graph, sched, node)

    def applies_at_no_copy(self, graph: Graph, sched: Schedule, node: Node) -> bool:
        """True when the rule's leading conditions on the node alone fail: then it applies at no
        copy of the node's layer either (search/repeat.py: copies have the same ops and shapes)."""
        lead = self.when if self.when.own else self.when.lead
        return lead is not None and not lead(graph, sched, node)

    def decided(self, node: Node) -> dict[str, set]:
        """{decision name: the ids of the nodes the rule adds to it} when it fires at `node`."""
        ids: dict[str, set] = {}
        for name, whose in self.then:
            decided = whose(node)
            ids.setdefault(name, set()).update(n.id for n in (decided if isinstance(decided, tuple) else (decided,)))
        return ids

    def apply(self, graph: Graph, sched: Schedule, node: Node) -> Schedule:
        return sched.decide(**self.decided(node))


RECOMPUTE = "recomputing a pure function where it is read yields exactly the value that would have been stored"

FUSION: list[FusionRule] = [
    FusionRule("fuse_elementwise", "compute an elementwise node inside every kernel that reads it (chains, "
               "prologues of reductions, epilogues, and recompute instead of a round trip through memory)",
               elementwise & free,
               into("inline"), RECOMPUTE),
    FusionRule("unroll_short_reduce", f"compute a reduction over at most {SHORT_REDUCE} values (maximum's pair) "
               "inline as a chain of combines",
               reduction & short & ~scheduled("matmul") & free,
               into("inline"), RECOMPUTE + "; the combine order is the reference's"),
    FusionRule("row_fuse", "compute a reduction in its reader's kernel, one block per row, when every read is "
               "the row's own result (softmax and layer norm become one kernel)",
               reduction & ~short & ~scheduled("matmul") & free,
               into("inline", "row"), RECOMPUTE + "; the row kernel checks that each read is of the current row"),
    FusionRule("matmul", "SumReduce(Mul(expand a, expand b)) over the contracted axis -> the tiled matmul "
               "template, its product never stored",
               a_sum & ~scheduled("matmul") & ~scheduled("inline") & product_unshared & ~short & matmul_shaped,
               into("matmul") + into("inline", of=_product),
               "the tile loop sums the same products (in another order: float32 rounding may differ by a few ulp, "
               "as any matmul)"),
    FusionRule("online_softmax", "compute the softmax a matmul reads in the matmul's own pass over K: a running "
               "maximum, the sum rescaled by exp2(c (m - m')) when the maximum grows, the accumulators likewise "
               "(the attention scores are read once; the max and sum are never stored)",
               scheduled("matmul") & reads_online_softmax,
               into("inline", of=lambda n: online_softmax(n).nodes)
               + into("online", of=lambda n: online_softmax(n).statistics),
               "exp2(c (s - m')) = exp2(c (s - m)) exp2(c (m - m')), so rescaling by the second factor whenever the "
               "maximum grows gives the reference's sum; for c > 0 a score of -inf weighs 0, so rows that start "
               "masked are exact; the normaliser R(L) multiplies the sum once instead of every term (float32 "
               "rounding may differ by a few ulp)"),
    FusionRule("stream_scores", "compute the scores of an online softmax, the matmul S = Q K^T, a tile of keys at a "
               "time inside the online kernel (FlashAttention: Q's rows stay in shared memory, K's tiles stream "
               "through; the scores are never written)",
               scheduled("matmul") & streamable_scores,
               into("inline", of=lambda n: _streamed_nodes(n)) + into("streamed", of=lambda n: _streamed_nodes(n)[0]),
               "each score is the same sum of products q . k, in its own order (float32 rounding may differ by a few "
               "ulp); the elementwise steps after it are recomputed where they are read (" + RECOMPUTE + ")"),
    FusionRule("prologue_reduce", "compute a per-row reduction that a matmul's operand reads (layer norm's mean and "
               "variance) in the matmul itself: each block reduces its tile's rows before the tile loop",
               reduction & ~short & ~scheduled("matmul") & free & read_by_inline_elementwise,
               into("inline", "prologue"),
               RECOMPUTE + "; each block's rows are reduced whole, in their own order (float32 rounding may differ by "
               "a few ulp); code generation checks that each read is of the thread's own row"),
    FusionRule("one_pass_statistics", "compute a layer norm's variance sum in the same pass over the row as "
               "its mean's sum, by Welford's running update (the matmul prologue reads each row once, not twice)",
               scheduled("prologue") & ~scheduled("welford") & squares_of_a_prologue_mean,
               into("welford"),
               "with n values, S = n mean and V = M2, the sum of squared deviations, exactly in real arithmetic "
               "(Welford's update per thread, Chan's merge across threads); float32 rounding differs by a few ulp "
               "of the row's values, and does not cancel as the sum of squares minus the squared sum would"),
    FusionRule("matmul_epilogue", "compute a matmul inside the kernel of its elementwise reader (bias, "
               "activation, residual applied to the accumulator before the store)",
               scheduled("matmul") & free & read_only_by(elementwise),
               into("inline"), RECOMPUTE),
]

# Clean-up rules run after the main search has settled: applied early, they would claim reductions
# that row fusion puts to better use.
CLEANUP: list[FusionRule] = [
    FusionRule("reduce_epilogue", "apply a reduction's only reader, an elementwise node of the same shape (a bias, "
               "a scale, rsqrt(var + eps)), to the accumulated value before it is stored",
               reduction & ~short & ~scheduled("matmul") & free & read_only_by(elementwise)
               & reader_shaped,
               into("inline", "epilogue"), RECOMPUTE),
]


def _streamed_nodes(n: Node) -> tuple:
    """S, its product and the elementwise steps from S to the scores of n's online softmax."""
    scores, chain = streamed_scores(online_softmax(n))
    return (scores, _product(scores)) + chain


def check_group(sched: Schedule, group: Group, builds: Callable[[Group], bool]) -> bool:
    """Row and matmul fusions, and kernels that may recompute too much, are honoured only if code
    generation accepts them: `builds(group)` asks it (the search caches the built kernel, which it
    also prices)."""
    templated = group.kind in ("row", "matmul") or (group.kind == "reduce" and group.root.op.kind != REDUCE)
    if not templated and group.recomputed <= MAX_INLINED_VALUES:
        return True
    return builds(group)
