"""The flops of a plain tiled matmul's fused nodes, counted where the template computes them.

A node fused into A's loads runs once per A element per block column of the grid: every block of an
N tile loads all of its rows' A (a layer norm normalising the rows as the LM head loads them runs
3,142 times over at 50,257 columns). One fused into B's loads runs once per B element per block row;
a prologue's reduction (and the nodes it sums) once per value per block, each block of a split tile
too; the epilogue once per output. Each node counts one flop per evaluation, as every kernel's
estimate does; the profiler's count (exec/profile.py) is the check.
"""
from __future__ import annotations

from typing import Callable

from ..codegen.legality import Group, matmul_axes, row_statistics
from ..codegen.sums import COMPENSATION_FLOPS, long_chain
from ..ops.primitives import Node
from .schedule import Schedule

WELFORD_FLOPS = 7  # a value's one-pass update of count, mean and m2 (matmul.cu.j2's prologue)
MERGE_FLOPS = 11  # Chan's merge of two partial (count, mean, m2), which every thread of the row makes


def fused_flops(group: Group, sched: Schedule, reduce: Node, count: Callable, tile: int, splits: int) -> int:
    """Flops of `group`'s nodes other than the contraction `reduce` and its product, which the caller
    counts (2 M N K)."""
    members = {n.id: n for n in group.members}
    product = reduce.srcs[0].node
    shape = reduce.srcs[0].shape
    batch, rows, columns = (count(tuple(shape[a] for a in axes)) for axes in matmul_axes(reduce))
    k = count((shape[reduce.attrs["axis"]],))
    prologue = [n for n in group.members if n.id in sched.prologue]
    seen = {reduce.id, product.id} | {n.id for n in prologue}

    def under(node: Node) -> int:
        """Fused nodes computed to give `node` (itself included), not counted yet."""
        found, stack = 0, [node]
        while stack:
            n = stack.pop()
            if n.id in seen or n.id not in members:
                continue
            seen.add(n.id)
            found += 1
            stack.extend(e.node for e in n.srcs)
        return found

    a_side, b_side = (under(e.node) for e in product.srcs)
    column_blocks, row_blocks = -(-columns // tile), -(-rows // tile)
    flops = a_side * batch * rows * k * column_blocks + b_side * batch * columns * k * row_blocks
    blocks = column_blocks * row_blocks * batch * splits
    paired = {row_statistics(n).total.id for n in prologue if n.id in sched.welford and row_statistics(n)}
    for statistic in prologue:  # its rows' values, reduced by every block of their row of tiles
        values = count(statistic.srcs[0].shape) * column_blocks * splits
        extent = statistic.srcs[0].shape[statistic.attrs["axis"]]
        long = statistic.op.name == "SumReduce" and long_chain(extent, tile)
        if statistic.id in sched.welford:  # one pass with its row's sum: Welford's update, not its terms
            for e in statistic.srcs:
                under(e.node)
            flops += (WELFORD_FLOPS + 2 * COMPENSATION_FLOPS * long) * values
            continue
        summed = sum(under(e.node) for e in statistic.srcs)
        if statistic.id in paired:  # the update above sums it; each thread merges its row's partials
            flops += summed * values + MERGE_FLOPS * tile ** 3 * blocks
        else:  # each value added, then each thread combines its row's tile partial results
            flops += (1 + COMPENSATION_FLOPS * long + summed) * values + tile ** 3 * blocks
    epilogue = sum(1 for n in group.members if n.id not in seen) + (group.root is not reduce)
    return flops + epilogue * count(reduce.shape)
