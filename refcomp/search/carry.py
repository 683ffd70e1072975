"""A Scatter carried by the kernel that computes its rows: one kernel where there were two.

A decode step's new keys and values are columns of the q/k/v projection (GPT-2), or the output of
the elementwise kernel that rotates the keys and stacks them with the values (LLaMA), and writing
them into the KV pool is a Scatter of those rows at the slots' ids: a kernel of its own that moves a
few hundred KB and costs mostly its launch, once a layer. The kernel that computes the rows can
store them twice instead, into its output and, at the row's id, into the table (the pool's own
buffer, where the Scatter kernel would have written them). `carry_scatters` folds each such Scatter
into that kernel's group (`Group.carried`), when

- the rows are columns c0 .. c0 + D of the kernel's stored output, in its dtype
  (codegen.indexed.carried_columns);
- the kernel is a plain matmul or an elementwise kernel (CARRIERS: a thread holds each value it
  stores; the online softmax's template stores no second buffer);
- the write may move back to that kernel's launch: no kernel from its launch up to the Scatter's
  reads the table's buffer, and the table and the ids are ready by then (inputs, or made before).

Nothing else changes: the Scatter's node still names the table's buffer after the write (the runner
binds it so, exec.program), and Program.bind checks its ids before any launch.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..codegen.legality import Group, carried_columns
from ..ops.primitives import LEAF, SCATTER, Node
from .cost import DeviceProfile, KernelCost
from .fusion import buffer_key
from .schedule import Schedule

CARRIERS = ("matmul", "elementwise")  # kernels whose threads each hold the values they store


def carry_scatters(
    groups: Sequence[Group], costs: Sequence[KernelCost], sched: Schedule, profile: DeviceProfile
) -> tuple[list[Group], list[KernelCost]]:
    """The kernels in launch order with every Scatter that a kernel before it can write folded into
    that kernel's group (its price: the kernel's plus the rows' bytes, less one launch)."""
    groups, costs = list(groups), list(costs)
    at = {g.root.id: k for k, g in enumerate(groups)}
    for j in range(len(groups) - 1, -1, -1):
        scatter = groups[j].root
        if groups[j].kind != "scatter" or scatter.srcs[2].node.id not in at:
            continue
        i = at[scatter.srcs[2].node.id]
        if not _may_carry(groups, i, j, scatter, sched, at):
            continue
        carrier, ids = groups[i], scatter.srcs[1].node
        reads = carrier.reads + (() if ids in carrier.reads else (ids,))
        groups[i] = replace(carrier, reads=reads, carried=carrier.carried + (scatter,))
        costs[i] = _carrying(costs[i], costs[j], profile)
        del groups[j], costs[j]
        at = {g.root.id: k for k, g in enumerate(groups)}
    return groups, costs


def _may_carry(groups: Sequence[Group], i: int, j: int, scatter: Node, sched: Schedule, at: dict) -> bool:
    carrier = groups[i]
    if i >= j or carrier.kind not in CARRIERS or carried_columns(scatter, carrier.root) is None:
        return False
    if sched.online.intersection(n.id for n in carrier.members):
        return False
    table, ids = scatter.srcs[0].node, scatter.srcs[1].node
    ready = lambda n: n.op.kind == LEAF or at.get(n.id, len(groups)) < i  # noqa: E731
    if not (ready(table) and ready(ids)):
        return False
    written = buffer_key(table)
    for g in groups[i:j]:
        touched = g.reads + g.members + tuple(s.srcs[0].node for s in g.carried)
        if any(buffer_key(n) == written for n in touched):
            return False
        if g.root.op.kind == SCATTER and buffer_key(g.root.srcs[0].node) == written:
            return False
    return True


def _carrying(carrier: KernelCost, scatter: KernelCost, profile: DeviceProfile) -> KernelCost:
    """The graph's estimate of a kernel that writes a Scatter's rows too."""
    return replace(
        carrier,
        bytes=carrier.bytes + scatter.bytes,
        l2_bytes=carrier.l2_bytes + scatter.l2_bytes,
        time_s=carrier.time_s + max(scatter.time_s - profile.launch_s, 0.0),
    )
