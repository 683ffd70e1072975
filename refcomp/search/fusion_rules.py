"""Fusion rules: the moves from one schedule (search/schedule.py) to another.

Each rule is sound because recomputing a pure function where it is read gives the value that would
have been stored (or, for the online softmax and the one-pass statistics, by the identity its rule
states); the cost model decides whether a move pays. A rule reads as a sentence: its name, when it
applies (conditions joined by & and ~), what it decides, and why that is sound.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ..codegen.legality import SHORT_REDUCE, matmul_axes, online_softmax, row_statistics, streamed_scores
from ..ops.primitives import ELEMENTWISE, GATHER, INDEXED, REDUCE, Node
from .fusion import Graph, short_reduce
from .schedule import DECISIONS, Schedule


# --- the fusion rules: moves from one schedule to another ------------------------------------
# A rule reads: name, when it applies (a condition on the graph, the schedule and the node, in words
# joined by & and ~), what it decides (the node, or its product, into which decisions), soundness.
@dataclass(frozen=True)
class When:
    """A condition on (graph, schedule, node); `a & b` and `~a` combine conditions, in order."""

    test: Callable[[Graph, Schedule, Node], bool]
    text: str
    own: bool = (
        False  # reads only the node's own op, attributes and shapes: alike at every copy of a layer's node
    )
    lead: Optional["When"] = None  # of a conjunction, its longest leading part that reads only the node (own)

    def __call__(self, graph: Graph, sched: Schedule, node: Node) -> bool:
        return self.test(graph, sched, node)

    def __and__(self, other: "When") -> "When":
        return When(
            lambda g, s, n: self.test(g, s, n) and other.test(g, s, n),
            f"{self.text} and {other.text}",
            self.own and other.own,
            self if self.own and not other.own else self.lead,
        )

    def __invert__(self) -> "When":
        return When(lambda g, s, n: not self.test(g, s, n), f"not {self.text}", self.own)

    def __str__(self) -> str:
        return self.text


def _free(graph: Graph, sched: Schedule, n: Node) -> bool:
    return (n.id not in sched.inline and n.id not in sched.row_stats and n.id not in sched.tails
            and n.id not in graph.outputs
            and bool(graph.consumers[n.id])
            and not any(c.op.kind in INDEXED for c in graph.consumers[n.id]))


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
a_gather = When(lambda g, s, n: n.op.kind == GATHER, "a Gather", own=True)
table_not_overwritten = When(
    lambda g, s, n: not g.overwritten(n.srcs[0].node),
    "whose table no Scatter writes in place (a reader of the old table must run before the write)",
)
reduction = When(lambda g, s, n: n.op.kind == REDUCE, "a reduction", own=True)
short = When(lambda g, s, n: short_reduce(n), f"over at most {SHORT_REDUCE} values", own=True)
free = When(_free, "free (not inline, no output, not another kernel's row statistics, read only by "
                   "kernels that can inline it)")
a_sum = When(lambda g, s, n: n.op.name == "SumReduce", "a SumReduce", own=True)
product_unshared = When(
    lambda g, s, n: _product(n).id not in g.outputs and len(g.consumers[_product(n).id]) == 1,
    "whose product nothing else reads",
)
matmul_shaped = When(
    lambda g, s, n: matmul_axes(n) is not None, "a matmul (a varies along no N axis, b along no M axis)"
)

a_matmul = a_sum & ~scheduled("matmul") & ~scheduled("inline") & product_unshared & ~short & matmul_shaped
ONLINE_SOUND = (
    "exp2(c (s - m')) = exp2(c (s - m)) exp2(c (m - m')), so rescaling by the second factor whenever the "
    "maximum grows gives the reference's sum; for c > 0 a score of -inf weighs 0, so rows that start "
    "masked are exact; the normaliser R(L) multiplies the sum once instead of every term (float32 "
    "rounding may differ by a few ulp)"
)
MATMUL_SOUND = ("the tile loop sums the same products (in another order: float32 rounding may differ by "
                "a few ulp, as any matmul)")


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


read_by_inline_elementwise = When(
    lambda g, s, n: all(c.op.kind in ELEMENTWISE and c.id in s.inline for c in g.consumers[n.id]),
    "read only by elementwise nodes computed inline",
)
reads_online_softmax = When(
    lambda g, s, n: _online_parts(g, s, n) is not None,
    "whose operand a is softmax(S) over its K axis, the softmax's max and sum read by nothing else",
)


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
            c.id in g.outputs or any(r.op.kind in INDEXED for r in g.consumers[c.id]) for c in chain):
        return None
    return scores, chain


streamable_scores = When(
    lambda g, s, n: _streamable(g, s, n) is not None,
    "whose online softmax's scores are an elementwise function of a matmul S that nothing else reads",
)
reader_shaped = When(lambda g, s, n: g.consumers[n.id][0].shape == n.shape, "of its reader's shape")
def _squares_of_a_prologue_sum(g: Graph, s: Schedule, n: Node) -> bool:
    stats = row_statistics(n)
    return stats is not None and stats.total.id in s.prologue


squares_of_a_prologue_mean = When(
    _squares_of_a_prologue_sum,
    "a sum of squared deviations from S / n, S the row's sum, also computed in the prologue",
)


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
            ids.setdefault(name, set()).update(
                n.id for n in (decided if isinstance(decided, tuple) else (decided,))
            )
        return ids

    def apply(self, graph: Graph, sched: Schedule, node: Node) -> Schedule:
        return sched.decide(**self.decided(node))


RECOMPUTE = (
    "recomputing a pure function where it is read yields exactly the value that would have been stored"
)

FUSION: list[FusionRule] = [
    FusionRule(
        "fuse_elementwise",
        "compute an elementwise node inside every kernel that reads it (chains, "
        "prologues of reductions, epilogues, and recompute instead of a round trip through memory)",
        elementwise & free,
        into("inline"),
        RECOMPUTE,
    ),
    FusionRule(
        "fuse_gather",
        "look a Gather's rows up inside every kernel that reads it (the paged KV cache's pages read "
        "where attention reads them, table[ids[i] * row + j], instead of copied out first)",
        a_gather & free & table_not_overwritten,
        into("inline"),
        RECOMPUTE + "; each lookup keeps the gather kernel's guard (an id outside the table reads 0, "
        "and the runner refuses such ids before any launch), and the table is a buffer no kernel writes "
        "while its readers run",
    ),
    FusionRule(
        "unroll_short_reduce",
        f"compute a reduction over at most {SHORT_REDUCE} values (maximum's pair) "
        "inline as a chain of combines",
        reduction & short & ~scheduled("matmul") & free,
        into("inline"),
        RECOMPUTE + "; the combine order is the reference's",
    ),
    FusionRule(
        "row_fuse",
        "compute a reduction in its reader's kernel, one block per row, when every read is "
        "the row's own result (softmax and layer norm become one kernel)",
        reduction & ~short & ~scheduled("matmul") & free,
        into("inline", "row"),
        RECOMPUTE + "; the row kernel checks that each read is of the current row",
    ),
    FusionRule(
        "matmul",
        "SumReduce(Mul(expand a, expand b)) over the contracted axis -> the tiled matmul "
        "template, its product never stored",
        a_matmul,
        into("matmul") + into("inline", of=_product),
        MATMUL_SOUND,
    ),
    FusionRule(
        "online_softmax",
        "compute the softmax a matmul reads in the matmul's own pass over K: a running "
        "maximum, the sum rescaled by exp2(c (m - m')) when the maximum grows, the accumulators likewise "
        "(the attention scores are read once; the max and sum are never stored)",
        scheduled("matmul") & reads_online_softmax,
        into("inline", of=lambda n: online_softmax(n).nodes)
        + into("online", of=lambda n: online_softmax(n).statistics),
        ONLINE_SOUND,
    ),
    FusionRule(
        "stream_scores",
        "compute the scores of an online softmax, the matmul S = Q K^T, a tile of keys at a "
        "time inside the online kernel (FlashAttention: Q's rows stay in shared memory, K's tiles stream "
        "through; the scores are never written)",
        scheduled("matmul") & streamable_scores,
        into("inline", of=lambda n: _streamed_nodes(n))
        + into("streamed", of=lambda n: _streamed_nodes(n)[0]),
        "each score is the same sum of products q . k, in its own order (float32 rounding may differ by "
        "a few ulp); the elementwise steps after it are recomputed where they are read (" + RECOMPUTE + ")",
    ),
    FusionRule(
        "prologue_reduce",
        "compute a per-row reduction that a matmul's operand reads (layer norm's mean and "
        "variance) in the matmul itself: each block reduces its tile's rows before the tile loop",
        reduction & ~short & ~scheduled("matmul") & free & read_by_inline_elementwise,
        into("inline", "prologue"),
        RECOMPUTE
        + "; each block's rows are reduced whole, in their own order (float32 rounding may differ by "
        "a few ulp); code generation checks that each read is of the thread's own row",
    ),
    FusionRule(
        "one_pass_statistics",
        "compute a layer norm's variance sum in the same pass over the row as "
        "its mean's sum, by Welford's running update (the matmul prologue reads each row once, not twice)",
        scheduled("prologue") & ~scheduled("welford") & squares_of_a_prologue_mean,
        into("welford"),
        "with n values, S = n mean and V = M2, the sum of squared deviations, exactly in real arithmetic "
        "(Welford's update per thread, Chan's merge across threads); float32 rounding differs by a few ulp "
        "of the row's values, and does not cancel as the sum of squares minus the squared sum would",
    ),
    FusionRule(
        "matmul_epilogue",
        "compute a matmul inside the kernel of its elementwise reader (bias, "
        "activation, residual applied to the accumulator before the store)",
        scheduled("matmul") & free & read_only_by(elementwise),
        into("inline"),
        RECOMPUTE,
    ),
]

# Clean-up rules run after the main search has settled: applied early, they would claim reductions
# that row fusion puts to better use.
CLEANUP: list[FusionRule] = [
    FusionRule(
        "tiled_online_softmax",
        "make a contraction that reads a softmax along its K axis the tiled matmul and compute that "
        "softmax in its pass, in one move (a decode step's value sum, one query row a head: as a tiled "
        "matmul alone it may cost more than the reduction it replaces, so the two moves one at a time "
        "would not be taken)",
        a_matmul & reads_online_softmax,
        into("matmul") + into("inline", of=_product)
        + into("inline", of=lambda n: online_softmax(n).nodes)
        + into("online", of=lambda n: online_softmax(n).statistics),
        ONLINE_SOUND + "; and " + MATMUL_SOUND,
    ),
    FusionRule(
        "reduce_epilogue",
        "apply a reduction's only reader, an elementwise node of the same shape (a bias, "
        "a scale, rsqrt(var + eps)), to the accumulated value before it is stored",
        reduction & ~short & ~scheduled("matmul") & free & read_only_by(elementwise) & reader_shaped,
        into("inline", "epilogue"),
        RECOMPUTE,
    ),
]


def _streamed_nodes(n: Node) -> tuple:
    """S, its product and the elementwise steps from S to the scores of n's online softmax."""
    scores, chain = streamed_scores(online_softmax(n))
    return (scores, _product(scores)) + chain
