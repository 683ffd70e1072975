"""A split maximum's last step finished by the kernel of its first: one kernel fewer.

A long reduction of few rows (a decode step's argmax over 50,257 logits) is split in two
(search/split.py): a block per chunk of each row, then a short reduction of the chunks' results,
whose kernel is all launch (3 us of 3). `carry_tails` hands that short reduction, with its
elementwise epilogue, to the kernel of the chunks (the `tails` decision): each block stores its
chunk's result, takes a ticket for its row, and the last of the row's blocks reduces the row's
results in order and stores the epilogue's value (reduce_tail.cu.j2). Only an exact reduction
qualifies (split.py splits only MaxReduce), so the order the blocks finish in cannot change it.

It runs on the tuned schedule and keeps a change only if the modeled time falls. A short reduction F
qualifies when it reduces the last axis of P, read through no view; P is a reduction kernel's root,
a block per output, read by F alone and no graph output; F's kernel (F, or an elementwise epilogue
of F's shape) reads no buffer but P; and code generation accepts the kernel.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Optional

from ..codegen.legality import Group
from ..ops.primitives import REDUCE
from .schedule import Schedule
from .split import EXACT  # the reductions split.py splits: their results combine exactly, in any order

MAX_TAIL = 1024  # values per row the last block's one thread reduces


def with_tails(graph, sched: Schedule, groups: dict) -> Optional[dict]:
    """The kernels with each reduction of `sched.tails`, and its epilogue's kernel, handed to the
    kernel of its source; None where that source is no reduction kernel's root."""
    groups = dict(groups)
    for node in sorted((graph.by_id[i] for i in sched.tails), key=lambda n: graph.position[n.id]):
        own = next((g for g in groups.values() if g.root is node or node in g.members), None)
        source = node.srcs[0].node
        first = groups.get(source.id)
        if own is None or first is None or first.kind != "reduce" or first.tail:
            return None
        del groups[own.root.id]
        after = sorted((n for n in own.members if n is not node), key=lambda n: graph.position[n.id])
        epilogue = (own.root,) if own.root is not node else ()
        groups[source.id] = replace(first, tail=(node, *after) + epilogue)
    return groups


def carry_tails(graph, ev, sched: Schedule, groups: Mapping[int, Group]) -> tuple[Schedule, dict, list]:
    """(the schedule, its kernels, the reductions now finished by their source's kernel)."""
    groups, moved = dict(groups), []
    for group in [g for g in groups.values() if g.kind == "reduce"]:
        final = _short_final(graph, sched, groups, group)
        if final is None:
            continue
        changed = replace(sched, tails=sched.tails | {final.id})
        after = ev.partition(changed)
        if after is not None and ev.total(changed, after) < ev.total(sched, groups):
            sched, groups = changed, after
            moved.append(final)
    return sched, groups, moved


def _short_final(graph, sched: Schedule, groups: Mapping[int, Group], group: Group):
    """The exact reduction `group` computes over a reduction kernel's output, if it qualifies."""
    final = group.root if group.root.op.kind == REDUCE else next(
        (n for n in group.members if n.op.kind == REDUCE), None)
    if final is None or final.op.name not in EXACT or final.id in sched.tails:
        return None
    source = final.srcs[0]
    first = groups.get(source.node.id)
    axis, extent = final.attrs["axis"], source.shape[final.attrs["axis"]]
    if (first is None or first.kind != "reduce" or first.root is not source.node or first.tail
            or not source.views.is_identity or axis != len(source.shape) - 1
            or not isinstance(extent, int) or extent > MAX_TAIL
            or source.node.id in graph.outputs or len(graph.consumers[source.node.id]) != 1
            or [n.id for n in group.reads] != [source.node.id]):
        return None
    return final
