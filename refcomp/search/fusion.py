"""The partition of a graph into kernels that a schedule (search/schedule.py) implies, and its prices.

A kernel (a `Group`) is a root node and the fused nodes it recomputes; `group_of` finds it,
`kernel_of` decides which template computes it (or that none can), and `group_cost` prices it from
the graph alone. The moves between schedules are the fusion rules (search/fusion_rules.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..codegen.legality import (
    COMPENSATION_FLOPS,
    MAX_FUSED_NODES,
    MAX_INLINED_VALUES,
    SHORT_REDUCE,
    Group,
    REDUCE_STRIDE,
    WARP_OUTPUTS,
    ProgramNames,
    default_reduce_strategy,
    matmul_axes,
    long_chain,
)
from ..ops.dtypes import DTYPES
from ..ops.graph import toposort
from ..ops.primitives import ELEMENTWISE, GATHER, INDEXED, LEAF, REDUCE, SCATTER, Node
from .cost import DeviceProfile, KernelCost, roofline
from .repeat import Copies, find_copies
from .schedule import DECISIONS, Schedule
from .tile_flops import fused_flops

# A buffer read through a broadcast (the same element by many threads) costs at most this many
# passes over it: caches absorb the rest. The tiled matmul reads each operand once.
REREAD_LIMIT = 4


@dataclass
class Graph:
    """The fixed graph the fusion search schedules."""

    output_nodes: list[Node]
    nodes: list[Node] = field(init=False)
    consumers: dict[int, list[Node]] = field(init=False)
    # rule names -> the nodes moves may fire at, each with the rules that may apply there (search._candidates)
    screened: dict[tuple, list] = field(init=False, default_factory=dict, repr=False, compare=False)

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
        self.sources = {
            n.id: tuple(s.node.id for s in n.srcs) for n in self.nodes
        }  # read per edge: a source read twice, twice

    @functools.cached_property
    def _overwritten(self) -> frozenset:
        return frozenset(buffer_key(n.srcs[0].node) for n in self.nodes if n.op.kind == SCATTER)

    def overwritten(self, node: Node) -> bool:
        """Whether a Scatter writes `node`'s buffer in place (an Input: any Input of its name)."""
        return buffer_key(node) in self._overwritten

    @functools.cached_property
    def copies(self) -> Copies:
        """The graph's repeated layers (search/repeat.py): searched once, scheduled alike."""
        return find_copies(self.nodes, self.position, self.consumers)


def buffer_key(node: Node) -> tuple:
    """Which buffer holds `node`'s values: an Input's is its name's (every Input of one name reads
    the one fed array), any other node's its own."""
    return ("input", node.attrs["name"]) if node.op.name == "Input" else ("node", node.id)


def short_reduce(node: Node) -> bool:
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
            if s.op.literal or (node is root and root.op.kind == SCATTER and src is root.srcs[0]):
                continue  # a Scatter writes into its table's buffer, never reads it (exec.program)
            if s.id in sched.inline and s.id not in graph.outputs:
                if s.id not in members:
                    members[s.id] = s
                    stack.append(s)
                    if (
                        len(members) > MAX_FUSED_NODES
                    ):  # too big a kernel (and too deep a recursion in codegen)
                        return None
            else:
                reads[s.id] = s
    return kernel_of(graph, sched, root, members, reads)


def kernel_of(
    graph: Graph, sched: Schedule, root: Node, members: dict[int, Node], reads: dict[int, Node]
) -> Optional[Group]:
    """The kernel rooted at `root` that recomputes `members` and reads `reads` (by id), or None when the
    schedule asks for an impossible one. Set tests first: a long chain's kernel has many members."""
    if len(members) > MAX_FUSED_NODES or (members and len(graph.copies.boundaries.intersection(members)) > 1):
        return None  # too big a kernel, or recomputing through two layer boundaries (search/repeat.py)
    # (a kernel of one node asks nothing of the graph's copies: pricing the plain schedule, as
    # search._plain_cost does after each rewrite, need not find them)
    position = graph.position
    ordered = tuple(members[i] for i in sorted(members, key=position.__getitem__))
    everything = ordered + (root,)
    templated = sched.templated
    decided = bool(templated) and (not templated.isdisjoint(members) or root.id in templated)
    mm = [n for n in everything if n.id in sched.matmul and n.id not in sched.streamed] if decided else []
    rows = [n for n in ordered if n.id in sched.row] if decided else []
    epilogues = [n for n in ordered if n.id in sched.epilogue] if decided else []
    if root.op.kind in INDEXED:  # "gather" or "scatter": ids are data, nothing fuses into them
        kind = root.op.kind if not members else None
    elif mm:
        # the matmul template stores the accumulator or one elementwise epilogue of it (relu's short
        # maximum of a pair among them, unrolled), never a reduction it would have to loop over
        epilogue_ok = (root.id in sched.matmul or root.op.kind in ELEMENTWISE
                       or (root.op.kind == REDUCE and short_reduce(root) and root.id not in templated))
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
    if kind is None or any(not short_reduce(members[i]) for i in unrolled):
        return None
    recomputed = _recomputations(graph, root, ordered, members, unrolled)
    if recomputed > MAX_PATH_COPIES:
        return None
    return Group(
        root, ordered, tuple(reads[i] for i in sorted(reads, key=position.__getitem__)), kind, recomputed
    )


def group_params(sched: Schedule, group: Group) -> dict:
    """What code generation reads for one kernel: the decisions it must be told of, and the kernel's
    parameters."""
    told = {d.metadata["codegen"]: getattr(sched, d.name) for d in DECISIONS if d.metadata["codegen"]}
    return {**told, **sched.kernel_params(group.root.id, group.kind)}


def _launched_threads(group: Group, sched: Schedule, count: Callable, tile: int) -> int:
    """The threads a matmul kernel launches: every thread of its blocks loads B's tiles (an online
    softmax's, K's and V's too), whatever its row, so a decode step's one row (padded to a tile of
    rows) still has the whole block's threads loading weights; times K's slices, and the blocks K is
    split across that have K at the binding (a split past K's last tile only stores zeros)."""
    root = group.root
    reduce = _contraction(group, sched)
    shape = reduce.srcs[0].shape
    batch, rows, columns = (count(tuple(shape[a] for a in axes)) for axes in matmul_axes(reduce))
    online = any(n.id in sched.online for n in group.members)
    n_tiles = min(sched.param(root.id, "n_tiles"), -(-columns // tile)) if online else 1
    slices = 1 if online else sched.param(root.id, "slices")
    working = min(sched.param(root.id, "splits"), key_tiles(group, sched, count, tile))  # splits with K
    blocks = -(-columns // (tile * n_tiles)) * -(-rows // tile) * batch * max(working, 1)
    return blocks * tile * tile * slices


def _contraction(group: Group, sched: Schedule) -> Node:
    """A matmul kernel's contraction (an online-softmax kernel's over the keys, not the scores it
    streams)."""
    kernel = (group.root,) + group.members
    return next(n for n in kernel if n.id in sched.matmul and n.id not in sched.streamed)


def _reduction(group: Group, sched: Schedule) -> Node:
    """A reduction or row kernel's templated reduction."""
    root = group.root
    return root if root.op.kind == REDUCE else next(n for n in group.members if n.id in sched.templated)


def reduced_extent(group: Group, sched: Schedule, count: Callable) -> int:
    """The length of the axis a reduction or row kernel reduces, at the binding."""
    reduce = _reduction(group, sched)
    return count((reduce.srcs[0].shape[reduce.attrs["axis"]],))


def key_tiles(group: Group, sched: Schedule, count: Callable, tile: int) -> int:
    """The K tiles of a matmul kernel at the binding: more splits than this only add blocks with no
    keys."""
    reduce = _contraction(group, sched)
    return -(-count((reduce.srcs[0].shape[reduce.attrs["axis"]],)) // tile)


def few_rows(group: Group, sched: Schedule, count: Callable, rows: int) -> bool:
    """Whether a matmul kernel has at most `rows` rows (decode's rows, or its query rows a head): only
    then is splitting K across blocks worth pricing (many rows give the device its blocks already)."""
    reduce = _contraction(group, sched)
    return count(tuple(reduce.srcs[0].shape[a] for a in matmul_axes(reduce)[1])) <= rows


def group_cost(
    group: Group, sched: Schedule, count: Callable, profile: DeviceProfile, name: str = ""
) -> KernelCost:
    """The roofline cost of one kernel; `count(shape)` is the number of elements at the binding."""
    root = group.root
    ops = len(group.members) + 1
    points = _iteration_points(group, sched, count)
    itemsize = lambda n: DTYPES[n.dtype].itemsize  # noqa: E731
    if group.kind == "scatter":  # writes only the K source rows (in place), reading them and their ids once
        written = count(root.srcs[2].shape)
        nbytes = itemsize(root) * written + sum(itemsize(n) * count(n.shape) for n in group.reads)
        return roofline(name or root.op.name, group.kind, nbytes, 0, written, profile, nbytes)
    nbytes = itemsize(root) * count(root.shape) + sum(
        itemsize(n) * count(n.shape) for n in group.row_stats + group.tail[-1:])
    looked_up: dict[int, int] = {}  # a fused Gather's table -> the elements its lookups read of it
    for g in group.members:
        if g.op.kind == GATHER:
            looked_up[g.srcs[0].node.id] = looked_up.get(g.srcs[0].node.id, 0) + count(g.shape)
    for n in group.reads:  # tiles read each operand once; other kernels re-read broadcasts through caches
        size = min(count(n.shape), looked_up.get(n.id, count(n.shape)))
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
        online = any(n.id in sched.online for n in group.members)
        if online:  # the online template's softmax and streamed scores, once per output
            flops = 2 * m_n * k + ops * m_n
            flops += sum(
                2 * count(n.srcs[0].shape) for n in group.members if n.id in sched.streamed
            )  # q . k per score
        else:  # where the plain template computes each fused node (search.tile_flops)
            splits = min(sched.param(root.id, "splits"), key_tiles(group, sched, count, tile))
            flops = 2 * m_n * k + fused_flops(group, sched, reduce, count, tile, max(splits, 1))
        flops += _compensation_flops(group, sched, count, tile)
        threads = _launched_threads(group, sched, count, tile)
    elif group.kind in ("reduce", "row"):
        reduce = _reduction(group, sched)
        points = count(reduce.srcs[0].shape)
        rows = count(reduce.shape)
        phases = 1 + sum(1 for n in group.members if n.id in sched.row)
        flops = points * ops * phases
        extent = reduce.srcs[0].shape[reduce.attrs["axis"]]
        strategy = sched.param(root.id, "strategy") or default_reduce_strategy(extent)
        if group.kind == "row":
            strategy = "block"
        if long_chain(extent, REDUCE_STRIDE[strategy](block)):  # each thread's long sums are compensated
            sums = (reduce.op.name == "SumReduce") + sum(
                1 for n in group.members if n.id in sched.row and n.op.name == "SumReduce"
            )
            flops += COMPENSATION_FLOPS * points * sums
        threads = {"thread": rows, "block": rows * block,
                   "columns": -(-rows // WARP_OUTPUTS) * block}[strategy]
    else:
        points = count(root.shape)
        flops, threads = points * ops, points
    return roofline(name or root.op.name, group.kind, nbytes, flops, threads, profile, l2_bytes)


def _compensation_flops(group: Group, sched: Schedule, count: Callable, tile: int) -> int:
    """A tiled kernel's extra flops for its compensated sums (codegen.sums): once per K tile for the
    contraction (and the online softmax's sum beside it), once per value for a long prologue reduction."""
    flops = 0
    reduce = next(
        n for n in (group.root,) + group.members if n.id in sched.matmul and n.id not in sched.streamed
    )
    if long_chain(reduce.srcs[0].shape[reduce.attrs["axis"]]):
        m_n = count(reduce.shape)
        k = count(reduce.srcs[0].shape) // max(m_n, 1)
        chains = 2 if any(n.id in sched.online for n in group.members) else 1
        flops += COMPENSATION_FLOPS * chains * m_n * -(-k // tile)
    online = any(n.id in sched.online for n in group.members)
    for n in group.members:  # (the plain template's: search.tile_flops, once per block)
        if (
            online
            and n.id in sched.prologue
            and n.op.name == "SumReduce"
            and long_chain(n.srcs[0].shape[n.attrs["axis"]], tile)
        ):
            flops += COMPENSATION_FLOPS * count(n.srcs[0].shape)
    return flops


def _iteration_points(group: Group, sched: Schedule, count) -> int:
    """How many (output or reduction) points the kernel visits: each reads every buffer once."""
    root = group.root
    if group.kind in ("reduce", "row", "matmul"):
        reduce = root if root.op.kind == REDUCE else next(
            (n for n in group.members if n.id in sched.templated), root)
        if reduce.op.kind == REDUCE:
            return count(reduce.srcs[0].shape)
    return count(root.shape)


def check_group(sched: Schedule, group: Group, builds: Callable[[Group], bool]) -> bool:
    """Row and matmul fusions, and kernels that may recompute too much, are honoured only if code
    generation accepts them: `builds(group)` asks it (the search caches the built kernel, which it
    also prices)."""
    templated = group.kind in ("row", "matmul") or (group.kind == "reduce" and group.root.op.kind != REDUCE)
    if not templated and group.recomputed <= MAX_INLINED_VALUES:
        return True
    return builds(group)
