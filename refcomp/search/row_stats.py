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
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping, Optional

from ..codegen.legality import Group, row_statistics
from ..ops.primitives import Node
from .schedule import Schedule


def with_row_stats(graph, sched: Schedule, groups: dict) -> Optional[dict]:
    """The kernels with each node of `sched.row_stats` handed to the matmul kernel that stores the
    row it reduces; None if that row is no matmul kernel's output."""
    groups = dict(groups)
    for node in sorted((graph.by_id[i] for i in sched.row_stats), key=lambda n: graph.position[n.id]):
        stats = row_statistics(node)
        row = (node if stats is None else stats.total).srcs[0].node
        group = groups.get(row.id)
        if group is None or group.kind != "matmul":
            return None
        groups[row.id] = replace(group, row_stats=group.row_stats + (node,))
    return groups


def carry_row_stats(graph, ev, sched: Schedule, groups: Mapping[int, Group],
                    tune: Callable[[Schedule, dict], Schedule]) -> tuple[Schedule, dict, list]:
    """(the schedule, its kernels, the sums of squared deviations whose statistics moved) after moving
    every layer norm's statistics that pays into the matmul kernel storing its rows. `tune(sched,
    groups)` sets the parameters of the kernels given (search._tune)."""
    groups, moved = dict(groups), []
    for squares in graph.compute:
        stats = row_statistics(squares)
        if stats is None or not all(i in sched.row | sched.prologue or _alone(graph, groups, i)
                                    for i in (squares.id, stats.total.id)):
            continue
        changed = _moved(graph, sched, groups, stats)
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
            moved.append(squares)
    return sched, groups, moved


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
    elif row.id not in groups or groups[row.id].kind != "matmul":
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
    chain, stack, stored = {row.id}, [row], {}
    while stack:
        for edge in stack.pop().srcs:
            n = edge.node
            if n.id in sched.inline and n.id not in chain:
                chain.add(n.id)
                stack.append(n)
            elif n.id in groups:
                stored[n.id] = n
    products = [n for n in stored.values() if n.id in sched.matmul and groups[n.id].kind == "matmul"]
    if len(products) != 1 or not all(c.id in chain for c in graph.consumers[products[0].id]):
        return None
    return products[0]
