"""A layer norm's statistics computed by the matmul kernel that stores its rows: one kernel fewer.

At a decode step's 32 rows each layer norm is a row kernel of its own, 4 to 5 us of which 3 are the
launch: every row's sum S and sum of squared deviations V (codegen.statistics) over 768 values, then
the normalised rows. In the next matmul's prologue instead, every block of that matmul would reduce
its rows again (the search prices that dearer). But the kernel before the layer norm stores those
rows: the attention projection (its bias and the residual in the epilogue) and the MLP's second
matmul. `carry_row_stats` hands S and V to that kernel (the `row_stats` decision): each tile's last
block reduces the tile's columns of the rows it stored, and the last tile of each row of tiles
merges the tiles' partial statistics in tile order (matmul_row_stats.cu.j2, exact in real
arithmetic: Chan's merge). The normalised rows are then recomputed where the next matmul loads them,
from the stored rows, S and V.

It runs on the tuned schedule, one layer norm at a time in graph order, and keeps a change only if
the modeled time falls. A layer norm qualifies when

- its S and V (codegen.statistics.row_statistics) are computed by a row kernel computing nothing
  else, or in the prologue of the matmuls that read them (each block reducing its rows again);
- X is stored by a matmul kernel, or is computed (elementwise, inline) from the output P of a plain
  matmul kernel that nothing but X's computation reads: that kernel then computes X in its epilogue
  and stores it in P's place (the residual stream, stored once instead of recomputed by its readers);
- a row kernel's output is no graph output (its readers recompute it), and code generation accepts
  every kernel of the new partition (stored_statistics: X's rows along the matmul's N axis).

A row's maximum moves alike (codegen/row_maximum.py: a decode step's greedy choice over the LM
head's logits, after the repetition penalty): F, the maximum over the last axis of E, whole or split
in chunks P, is the matmul kernel's to compute when E is the rows that kernel stores, or is computed
from them elementwise, inline (the kernel then computes E at each output as it stores it, with E's
other loads); F and P are reduce kernels of their own, P no graph output and read by F alone.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping, Optional

from ..codegen.legality import Group, row_maximum, row_statistics
from ..ops.primitives import Node
from .schedule import Schedule


def with_row_stats(graph, sched: Schedule, groups: dict) -> Optional[dict]:
    """The kernels with each node of `sched.row_stats` handed to the matmul kernel that stores the
    row it reduces (a maximum's E computed by that kernel too); None if that row is no matmul
    kernel's output."""
    groups = dict(groups)
    for node in sorted((graph.by_id[i] for i in sched.row_stats), key=lambda n: graph.position[n.id]):
        if _chunks_of_moved(graph, sched, node):
            continue  # a split maximum's chunks: its kernel computes the whole maximum
        maximum = row_maximum(node)
        if maximum is not None:  # the matmul computes E too: its nodes and its other reads
            found = _computed_from(graph, sched, groups, maximum.value)
            if found is None:
                return None
            row, members, reads = found
        else:
            stats = row_statistics(node)
            row, members, reads = (node if stats is None else stats.total).srcs[0].node, set(), set()
            if not _stored_by_matmul(groups, row):
                return None
        group = groups[row.id]
        ordered = lambda nodes: tuple(sorted(nodes, key=lambda n: graph.position[n.id]))  # noqa: E731
        groups[row.id] = replace(
            group, members=ordered(set(group.members) | members) if members else group.members,
            reads=group.reads + ordered(r for r in reads if r not in group.reads),
            row_stats=group.row_stats + (node,))
    return groups


def _chunks_of_moved(graph, sched: Schedule, node) -> bool:
    """Whether `node` is the chunks' maxima P of a split maximum whose F is in sched.row_stats."""
    readers = graph.consumers[node.id]
    if len(readers) != 1 or readers[0].id not in sched.row_stats:
        return False
    maximum = row_maximum(readers[0])
    return maximum is not None and maximum.chunks is node


def _computed_from(graph, sched: Schedule, groups: Mapping[int, Group], value: Node):
    """(the matmul kernel's root whose rows `value` is or is computed from inline, the inline nodes
    computing `value` from it, the other buffers they read), or None where there is no one such
    kernel."""
    if value.id in groups:
        return (value, set(), set()) if _stored_by_matmul(groups, value) else None
    if value.id not in sched.inline or value.id in graph.outputs:
        return None
    members, stored = _inline_under(graph, sched, value)
    matmuls = [n for n in stored if _stored_by_matmul(groups, n)]
    if len(matmuls) != 1:
        return None
    return matmuls[0], members, stored - {matmuls[0]}


def carry_row_stats(graph, ev, sched: Schedule, groups: Mapping[int, Group],
                    tune: Callable[[Schedule, dict], Schedule]) -> tuple[Schedule, dict, list]:
    """(the schedule, its kernels, the sums of squared deviations and maxima whose statistics moved)
    after moving every layer norm's statistics and every row maximum that pays into the matmul kernel
    storing its rows. `tune(sched, groups)` sets the parameters of the kernels given (search._tune)."""
    groups, moved = dict(groups), []
    for node in graph.compute:
        stats, maximum = row_statistics(node), row_maximum(node)
        if stats is not None and all(i in sched.row | sched.prologue or _alone(graph, groups, i)
                                     for i in (node.id, stats.total.id)):
            changed = _moved(graph, sched, groups, stats)
        elif maximum is not None:
            changed = _moved_maximum(graph, sched, groups, maximum)
        else:
            continue
        if changed is None:
            continue
        after = ev.partition(changed)
        if after is None:
            continue
        fresh = {r: g for r, g in after.items() if groups.get(r) != g}
        bare = replace(changed, params=tuple((k, v) for k, v in changed.params if k[0] not in fresh))
        tuned = tune(bare, fresh)
        if ev.total(tuned, after) < ev.total(sched, groups):
            sched, groups = tuned, after
            moved.append(node)
    return sched, groups, moved


def _moved_maximum(graph, sched: Schedule, groups: Mapping[int, Group], maximum) -> Optional[Schedule]:
    """The schedule with the row maximum computed by the kernel storing its rows (see the module), or
    None where its F or P is not a reduce kernel of its own, or P is an output or has another reader."""
    final, chunks = maximum.final, maximum.chunks
    ids = {final.id} | ({chunks.id} if chunks is not None else set())
    own = groups.get(final.id)
    if own is None or own.kind != "reduce" or (chunks is not None and (
            not _alone(graph, groups, chunks.id) or len(graph.consumers[chunks.id]) != 1)):
        return None
    params = tuple((k, v) for k, v in sched.params if k[0] not in ids)
    return replace(sched, row_stats=sched.row_stats | ids, params=params)


def _moved(graph, sched: Schedule, groups: Mapping[int, Group], stats) -> Optional[Schedule]:
    """The schedule with the statistics `stats` computed by the kernel storing their row (see the
    module), or None where that is not possible. Computed by a row kernel, whose readers then
    recompute its output, or in the prologue of each matmul that reads them."""
    total, squares, row = stats.total, stats.squares, stats.total.srcs[0].node
    ids = {total.id, squares.id}
    inline = sched.inline - ids - {row.id}
    if ids <= sched.row:
        row_kernel = next((g for g in groups.values() if squares in g.members and g.kind == "row"), None)
        if row_kernel is None or row_kernel.root.id in graph.outputs or len(
                [n for n in row_kernel.members if n.id in sched.row]) != 2:
            return None  # (a row kernel computing more, softmax's too, keeps them)
        inline |= {row_kernel.root.id}
    params = dict(sched.params)
    if row.id in sched.inline:  # computed inline: the matmul whose output it is computed from stores it
        product = _only_matmul_under(graph, sched, groups, row)
        if product is None:
            return None
        inline |= {product.id}
        params = {(row.id if r == product.id else r, name): v for (r, name), v in params.items()}
    elif not _stored_by_matmul(groups, row):
        return None
    return replace(sched, inline=inline, row=sched.row - ids, prologue=sched.prologue - ids,
                   welford=sched.welford - ids, row_stats=sched.row_stats | ids,
                   params=tuple(sorted(params.items())))


def _alone(graph, groups: Mapping[int, Group], node_id: int) -> bool:
    """Whether the node is a reduce kernel's root, no graph output (its readers read the buffer)."""
    group = groups.get(node_id)
    return group is not None and group.kind == "reduce" and node_id not in graph.outputs


def _only_matmul_under(graph, sched: Schedule, groups: Mapping[int, Group], row: Node) -> Optional[Node]:
    """The one plain matmul kernel's output that `row`'s inline computation reads, when nothing else
    reads it; else None."""
    chain, stored = _inline_under(graph, sched, row)
    ids = {n.id for n in chain}
    products = [n for n in stored if n.id in sched.matmul and _stored_by_matmul(groups, n)]
    if len(products) != 1 or not all(c.id in ids for c in graph.consumers[products[0].id]):
        return None
    return products[0]


def _stored_by_matmul(groups: Mapping[int, Group], node: Node) -> bool:
    """Whether `node` is the root of a matmul kernel."""
    return node.id in groups and groups[node.id].kind == "matmul"


def _inline_under(graph, sched: Schedule, node: Node) -> tuple[set, set]:
    """(the nodes a kernel computes inline to give `node`, itself included; the nodes they read from
    buffers), by fusion.group_of's rule: inline and no graph output, literals aside."""
    chain, stored, stack = {node}, set(), [node]
    while stack:
        for edge in stack.pop().srcs:
            n = edge.node
            if n.op.literal:
                continue
            if n.id in sched.inline and n.id not in graph.outputs:
                if n not in chain:
                    chain.add(n)
                    stack.append(n)
            else:
                stored.add(n)
    return chain, stored
