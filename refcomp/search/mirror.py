"""A repeated layer's kernels read off its representative's (search/repeat.py).

A tied move changes every copy of a layer alike, and pricing it re-partitions the kernels it touches
in each copy: in a deep model that was most of the search. Where the schedule treats a copy like
the representative, the copy's kernel is the representative's with each node replaced by its
counterpart (`Copies.mirror`), so it is mapped instead of found again by `fusion.group_of`.

Alike means: the representative's fused nodes lie in its own segment (so their sources correspond
edge by edge, which the segments' equal keys guarantee), their counterparts are fused too and the
counterparts of the buffers it reads are not (the residual stream a copy reads may be fused where
the first layer's input cannot be), no counterpart is an output, every node is in the same decisions
as its counterpart, and the buffers keep their order. Then group_of would find exactly the mapped
kernel, of the same structure (evaluate.group_structure): the same legality answer and price.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional

from ..codegen.legality import Group
from .schedule import DECISIONS, Schedule

# The decisions compared node by node: all but inline (checked on its own). Schedule.templated is their union.
COMPARED = tuple(d.name for d in DECISIONS if d.metadata["codegen"])


class Mirror:
    """One evaluator's mapped kernels. Keyed by the representative's kernel (its node ids, as a small
    int) and the copy's root, the mapping itself is computed once; only the schedule is checked each time."""

    def __init__(self, evaluator):
        self.ev, self.graph = evaluator, evaluator.graph
        self.representatives: dict[
            int, tuple
        ] = {}  # id(rep group) -> (rep, its kernel's number, its node ids)
        self.kernels: dict[tuple, int] = {}  # (root id, fused ids, read ids) -> number
        self.copies: dict[tuple, tuple] = {}  # (kernel number, copy's root id) -> the copy's nodes, or ()
        self.plain: dict[
            tuple, Group
        ] = {}  # the same key -> the copy's group where no decision but inline is taken

    def __call__(
        self, sched: Schedule, root_id: int, found: Mapping[int, Optional[Group]],
        unchanged: Optional[Callable[[int], Optional[Group]]] = None,
    ) -> Optional[Group]:
        """The kernel rooted at `root_id`, a copy of a repeated layer's node, read off its
        representative's kernel in `found`, else `unchanged(id)` (a move's pricing: the kernel the
        move leaves as it was); None when they are not alike (group_of decides)."""
        if not sched.inline and not sched.templated:  # the plain schedule: one-node kernels, group_of is
            return None  # as quick, and pricing it (search._plain_cost) need not find the graph's copies
        entry = self.graph.copies.mirror.get(root_id)
        if entry is None or sched.params:
            return None
        rep = found.get(entry[0]) if unchanged is None or entry[0] in found else unchanged(entry[0])
        if rep is None:
            return None
        ours = self.representatives.get(id(rep))
        if ours is None or ours[0] is not rep:
            members = tuple(n.id for n in rep.members)
            kernel = self.kernels.setdefault(
                (rep.root.id, members, tuple(n.id for n in rep.reads)), len(self.kernels)
            )
            ours = self.representatives[id(rep)] = (rep, kernel, frozenset(members) | {rep.root.id})
        _, kernel, nodes = ours
        copy = self.copies.get((kernel, root_id))
        if copy is None:
            copy = self.copies[kernel, root_id] = self._copy(rep, root_id, entry)
        if not copy:
            return None
        root, members, reads, fused, read = copy
        inline, templated = sched.inline, sched.templated
        if not (fused <= inline and (read & inline) <= self.graph.outputs):
            return None
        if templated.isdisjoint(nodes) and templated.isdisjoint(fused) and root_id not in templated:
            # the usual case, no decision but inline on either kernel: then the copy's kernel is one
            # group object whatever the schedule, priced once
            group = self.plain.get((kernel, root_id))
            if group is None:
                group = self.plain[kernel, root_id] = self._priced(
                    Group(root, members, reads, rep.kind, rep.recomputed), sched, rep
                )
            return group
        if not _decided_alike(sched, nodes, fused | {root_id}, entry[1]):
            return None
        return self._priced(Group(root, members, reads, rep.kind, rep.recomputed), sched, rep)

    def _priced(self, group: Group, sched: Schedule, rep: Group) -> Group:
        self.ev.group_prices[id(group)] = (
            group,
            self.ev.price(sched, rep),
        )  # the same structure: the same price
        return group

    def _copy(self, rep: Group, root_id: int, entry) -> tuple:
        """(root, fused nodes, buffers read, their id sets) of rep's kernel in the copy rooted at
        `root_id`, or () when no schedule makes them alike."""
        _, image, local = entry
        if any(n.id not in local for n in rep.members):
            return ()
        by_id, position = self.graph.by_id, self.graph.position
        members = tuple(by_id[image[n.id]] for n in rep.members)
        reads = tuple(by_id[image[n.id]] for n in rep.reads)
        fused = frozenset(n.id for n in members)
        if not fused.isdisjoint(self.graph.outputs) or any(
            position[a.id] > position[b.id] for a, b in zip(reads, reads[1:])
        ):
            return ()
        return by_id[root_id], members, reads, fused, frozenset(n.id for n in reads)


def _decided_alike(sched: Schedule, ours: frozenset, theirs: frozenset, image: Mapping[int, int]) -> bool:
    """Whether every node of `ours` is in the same decisions (inline aside) as its counterpart in `theirs`."""
    for name in COMPARED:
        chosen = getattr(sched, name)
        mine, copy = chosen & ours, chosen & theirs
        if len(mine) != len(copy) or (mine and {image[i] for i in mine} != copy):
            return False
    return True
