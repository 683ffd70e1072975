"""Split-K: a skinny contraction (a row or a few, a long K) summed in chunks, then the chunks summed.

A matmul whose rows fill less than one tile (B·T = 1: a decoding step, `x @ W` with one row of x),
or whose outputs are few (a batch of 32 decoding rows against 768 columns), has too few outputs to
occupy the device: a few blocks each walk all of K. Viewing K as (S, C) and
summing twice, SumReduce_k(p) = SumReduce_s(SumReduce_c(p viewed as (..., S, C, ...))), gives S
times the independent work for one short extra reduction, and the fusion search schedules both sums
like any others (the chunks as a batched tiled matmul or a reduction, the S partial sums as a short
reduce that takes the matmul's epilogue).

The rule adds work, so it is no algebraic rule (those only remove work): the search prices each
skinny contraction alone, whole and in each chunk count of CHUNKS (a search of that one output),
and splits it where a split is at least GAIN cheaper, before the fusion search of the whole graph.
The choice is local: a split contraction keeps its epilogue (the chunk sum takes it) but could lose
a fusion only the whole one had, so the margin asks for a clear gain. (Searching the whole graph
with and without the splits would settle it exactly, at twice the compile time.)
"""
from __future__ import annotations

from typing import Callable, Optional

from ..codegen.legality import BLOCK, TILE, matmul_axes
from .cost import H200
from ..ops.graph import toposort
from ..ops.primitives import Edge, Node, make_node
from ..ops.graph import identity_edge, rebuild

MIN_K = 256  # a shorter contraction is no long walk for any thread
CHUNKS = (8, 16, 32, 64)  # the chunk lengths C tried: S = K / C chunks, when C divides K
GAIN = 0.8  # a split must price at most this fraction of the whole contraction alone
# ... or whose outputs fill less than this fraction of the device's resident threads: a batch of 32
# decoding rows against 768 columns (GPT-2's projections) is 24,576 outputs, 9 % of an H200
FEW_OUTPUTS = 1 / 8
# Exact reductions are split alike when long and few: their chunks' results combine exactly (a
# minimum is a MaxReduce of the negation: ops.reductions)
EXACT = ("MaxReduce",)
MIN_EXTENT = 4096  # a shorter reduction is no long walk for a block
MAX_CHUNK_COUNT = 512


def skinny(node: Node, count: Callable, threads: int = H200.resident_threads) -> bool:
    """A float32 SumReduce of a matmul over a concrete K of at least MIN_K whose rows (batch and M
    axes, `count`ed at the binding) fill less than one tile, or whose outputs fill less than
    FEW_OUTPUTS of the device's `threads` (one thread per output leaves the device mostly idle)."""
    if node.op.name != "SumReduce" or node.dtype != "float32" or node.srcs[0].node.dtype != "float32":
        return False
    extent = node.srcs[0].shape[node.attrs["axis"]]
    if not isinstance(extent, int) or extent < MIN_K:
        return False
    axes = matmul_axes(node)
    if axes is None:
        return False
    batch, m, _ = axes
    rows = count(tuple(node.srcs[0].shape[a] for a in batch + m))
    return rows < TILE or count(node.shape) < FEW_OUTPUTS * threads


def long_and_few(node: Node, count: Callable, threads: int = H200.resident_threads) -> bool:
    """A MaxReduce over a known extent of at least MIN_EXTENT whose outputs, a block of
    BLOCK threads each, fill less than FEW_OUTPUTS of the device's `threads` (the maximum and the
    first index of it over a 50,257-token vocabulary, for 32 rows: 8,192 threads, 3 % of an H200)."""
    if node.op.name not in EXACT:
        return False
    extent = node.srcs[0].shape[node.attrs["axis"]]
    return (isinstance(extent, int) and extent >= MIN_EXTENT
            and count(node.shape) * BLOCK < FEW_OUTPUTS * threads)


def divisor_counts(extent: int) -> list[int]:
    """The chunk counts S worth trying for an exact reduction (its extent need not be a round number:
    50,257 is 29 x 1,733): the four largest divisors up to MAX_CHUNK_COUNT leaving chunks of 64 or more."""
    return [s for s in range(2, MAX_CHUNK_COUNT + 1) if extent % s == 0 and extent // s >= 64][-4:]


def chunk_counts(node: Node) -> list[int]:
    """The numbers of chunks S worth trying, one per chunk length in CHUNKS that divides K."""
    extent = node.srcs[0].shape[node.attrs["axis"]]
    return [extent // c for c in CHUNKS if extent % c == 0 and extent // c >= 2]


def split_k(node: Node, chunks: int) -> Edge:
    """SumReduce_k(p) as SumReduce_s(SumReduce_c(p viewed with k as (chunks, K / chunks))). Sound: the
    same real-number sum, reassociated (float32 rounding may differ by a few ulp, as with any matmul's
    summation order); `skinny` admits float32 only, so no partial sum is rounded to a 16-bit type.
    A MaxReduce (`long_and_few`) is split alike, exactly: the maximum of the chunks' maxima is the
    maximum, and a NaN anywhere (MaxReduce propagates it) is a NaN in its chunk's and in the total."""
    src, k, op = node.srcs[0], node.attrs["axis"], node.op.name
    shape = src.shape[:k] + (chunks, src.shape[k] // chunks) + src.shape[k + 1:]
    partial = make_node(op, (Edge(src.node, src.views.reshape(shape)),), axis=k + 1)
    partial.origin = node.origin  # the same user op computes both sums
    total = make_node(op, (identity_edge(partial),), axis=k)
    total.origin = node.origin
    return identity_edge(total)


def isolated(node: Node) -> Edge:
    """The contraction alone, its product's operands read from fresh inputs of their nodes' shapes:
    what the search prices to decide a split without the rest of the graph."""
    product = node.srcs[0].node
    operands = tuple(
        Edge(make_node("Input", dtype=e.node.dtype, name=f"operand{k}", shape=tuple(e.node.shape)), e.views)
        for k, e in enumerate(product.srcs)
    )
    alone = Node(product.op, operands, product.attrs, product.shape, product.dtype, origin=product.origin)
    return identity_edge(Node(node.op, (Edge(alone, node.srcs[0].views),), node.attrs, node.shape, node.dtype,
                              origin=node.origin))


def isolated_reduce(node: Node) -> Edge:
    """An exact reduction alone, its source read from a fresh input of the source node's shape."""
    src = node.srcs[0]
    alone = make_node("Input", dtype=src.node.dtype, name="operand0", shape=tuple(src.node.shape))
    return identity_edge(Node(node.op, (Edge(alone, src.views),), node.attrs, node.shape, node.dtype,
                              origin=node.origin))


def split_skinny(
    edges: list[Edge], count: Callable, price: Callable[[Edge], float], threads: int = H200.resident_threads
) -> tuple[list[Edge], list]:
    """The graph with every skinny contraction split where a split prices cheaper alone, and the
    (sum of the chunk sums, chunks) of each split. Contractions alike (the same layer of a repeated
    model) are priced once: the choice depends only on what `isolated` keeps."""
    def splittable(n: Node) -> bool:
        return skinny(n, count, threads) or long_and_few(n, count, threads)

    if not any(map(splittable, toposort([e.node for e in edges]))):
        return edges, []  # (the common case: no rebuild)
    chosen: dict = {}
    done: list = []

    def replace(node: Node) -> Optional[Edge]:
        if not splittable(node):
            return None
        src = node.srcs[0]
        if node.op.name in EXACT:
            key = (node.op.name, node.attrs["axis"], src.views, src.node.shape, src.node.dtype)
        else:
            key = (node.attrs["axis"], src.views, src.node.op.name,
                   tuple((e.node.shape, e.node.dtype, e.views) for e in src.node.srcs))
        if key not in chosen:
            chosen[key] = best_chunks(node, price)
        if chosen[key] is None:
            return None
        edge = split_k(node, chosen[key])
        done.append((edge.node, chosen[key]))
        return edge

    out, _ = rebuild(edges, replace)
    return out, done


def best_chunks(node: Node, price: Callable[[Edge], float]) -> Optional[int]:
    """The chunk count whose split prices cheapest alone, or None unless that split is at least GAIN
    cheaper than the whole contraction (`price(edge)`: the modeled time of that output searched alone)."""
    exact = node.op.name in EXACT
    whole = isolated_reduce(node) if exact else isolated(node)
    counts = divisor_counts(node.srcs[0].shape[node.attrs["axis"]]) if exact else chunk_counts(node)
    options = [(price(split_k(whole.node, s)), s) for s in counts]
    if not options:
        return None
    best, chunks = min(options)
    return chunks if best <= GAIN * price(whole) else None
