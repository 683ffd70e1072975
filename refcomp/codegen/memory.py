"""The memory plan: which buffer slot holds each intermediate, reused once its last reader has run.

Sizes are symbolic, so the plan is made per binding (it is cheap): walk the kernels in launch order,
give each kernel's output the smallest free slot that fits (or a new one), and free a slot after the
last kernel that reads it. A kernel never writes a slot it reads, because its inputs are still live.
Program outputs and inputs get buffers of their own and are not part of the plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence


@dataclass
class MemoryPlan:
    slot_of: dict[int, int]  # intermediate node id -> slot
    slot_bytes: list[int]

    @property
    def peak_bytes(self) -> int:
        return sum(self.slot_bytes)


def plan_memory(steps: Sequence[tuple[int, Sequence[int]]], nbytes: Mapping[int, int], keep: set[int],
                aliases: Optional[Mapping[int, int]] = None) -> MemoryPlan:
    """steps: (written node id, read node ids) per kernel in launch order; keep: ids with own buffers.
    aliases: written id -> the id whose buffer that kernel updates in place (a Scatter's table, which
    its step lists among its reads): the slot passes to the written node instead of being freed."""
    aliases = aliases or {}
    handed_on: set[int] = set()
    last_read: dict[int, int] = {}
    for k, (_, reads) in enumerate(steps):
        for node_id in reads:
            last_read[node_id] = k
    slot_of: dict[int, int] = {}
    slot_bytes: list[int] = []
    free: list[int] = []
    for k, (written, reads) in enumerate(steps):
        if written in aliases:
            if aliases[written] in slot_of:
                slot_of[written] = slot_of[aliases[written]]
                handed_on.add(aliases[written])
        elif written not in keep:
            need = nbytes[written]
            fitting = [s for s in free if slot_bytes[s] >= need]
            if fitting:
                slot = min(fitting, key=lambda s: slot_bytes[s])
            elif free:  # grow the largest free slot rather than adding one
                slot = max(free, key=lambda s: slot_bytes[s])
                slot_bytes[slot] = need
            else:
                slot = len(slot_bytes)
                slot_bytes.append(need)
            if slot in free:
                free.remove(slot)
            slot_of[written] = slot
        for node_id in dict.fromkeys(
            list(reads) + [written]
        ):  # in order, not a set: the same plan in any process
            if (node_id in slot_of and node_id not in handed_on and last_read.get(node_id, k) <= k
                    and slot_of[node_id] not in free):
                free.append(slot_of[node_id])
    return MemoryPlan(slot_of, slot_bytes)
