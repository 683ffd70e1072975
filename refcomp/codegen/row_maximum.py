"""A row's maximum computed by the matmul kernel that stores the row (search.row_stats).

The greedy choice of a decode step is an argmax over the LM head's logits: a maximum over each row
of E (the logits after the repetition penalty, elementwise), then the first index holding it. Its
own kernel reads the 6.4 MB of logits and as many of the penalty's `seen` mask again, for 3 us of
launch and 3 of memory. The LM head stores those rows: its epilogue computes E at each output it
stores, each tile's block takes the maximum over its columns, and the last tile of each row of tiles
takes the maximum of the tiles' (matmul_row_stats.cu.j2). A maximum is exact, so the order the
tiles finish in changes nothing (NaN included: MaxReduce propagates it, in any order).

The graph spells the maximum whole, F = MaxReduce_n(E), or split (search/split.py) as
F = MaxReduce_s(P), P = MaxReduce_c(E viewed with n as (s, c)); P is then never computed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import sympy

from ..ops.primitives import Node
from ..symbolic.dims import dims_equal, expand
from ..symbolic.index import index_of
from .fused import linear_index, same_edge


@dataclass(frozen=True)
class RowMaximum:
    """The nodes of a maximum over the last axis of E (see the module)."""

    final: Node  # F, its value per row
    chunks: Optional[Node]  # P, the chunks' maxima of a split maximum (None: F reduces E itself)
    value: Node  # E: the stored rows, or elementwise of them


def row_maximum(final: Node) -> Optional[RowMaximum]:
    """The maximum `final` computes, if it is a float32 MaxReduce over the last axis of a float32 node,
    whole or split in chunks; None otherwise (views are checked where the kernel reads them,
    `stored_maximum`)."""
    if final.op.name != "MaxReduce" or final.dtype != "float32":
        return None
    source = final.srcs[0]
    if final.attrs["axis"] != len(source.shape) - 1:
        return None
    chunks = source.node if source.node.op.name == "MaxReduce" else None
    if chunks is not None:
        if not source.views.is_identity or chunks.attrs["axis"] != len(chunks.srcs[0].shape) - 1:
            return None
        source = chunks.srcs[0]
    value = source.node
    if value.dtype != "float32" or len(value.shape) != len(final.shape) + 1:
        return None
    return RowMaximum(final, chunks, value)


def stored_maximum(nodes: Sequence[Node], output: Node, out_index: Sequence, columns: object, row: object,
                   ranges) -> Optional[RowMaximum]:
    """The maximum `nodes` (one node, F) of E over the rows of `output` that a matmul kernel stores,
    when that kernel may compute it as it stores: E has `output`'s shape, whose last axis is the
    matmul's N axis alone (`out_index[-1]` the thread's column, `columns` its extent); F reads E's
    row in order, whole or as chunks that tile it; F's element for the thread's row lies at `row` (the
    template's batch x M + bm). None otherwise. E's own reads of `output` at the thread's position
    are checked where the epilogue computes it (KernelBody's scalars)."""
    found = row_maximum(nodes[0]) if len(nodes) == 1 else None
    if found is None or not same_edge(found.value.shape, output.shape) or not dims_equal(
            output.shape[-1], columns):
        return None
    rows, final = list(out_index[:-1]), found.final
    r, s, c = (sympy.Symbol(name, integer=True, nonnegative=True) for name in ("r_max", "s_max", "c_max"))
    if found.chunks is None:  # (edge, index read, the element of E it must be, the index's extents)
        reads = [(final.srcs[0], rows + [r], linear_index(rows + [r], output.shape), {r: columns})]
    else:
        count, length = found.chunks.srcs[0].shape[-2:]
        if not dims_equal(count * length, columns):
            return None
        reads = [(final.srcs[0], rows + [s], linear_index(rows + [s], found.chunks.shape), {s: count}),
                 (found.chunks.srcs[0], rows + [s, c], linear_index(rows + [s * length + c], output.shape),
                  {s: count, c: length})]
    for edge, at, expected, extents in reads:
        flat, valid = index_of(edge.views, tuple(at), {**ranges, **extents})
        if valid is not sympy.true or expand(flat - expected) != 0:
            return None  # the maximum reads the row the thread stores, in order
    position = linear_index(rows, final.shape)
    return found if expand(position - row) == 0 else None
