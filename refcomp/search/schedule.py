"""Schedules: where each node of a fixed graph is computed, as a value.

A `Schedule` never changes values: it only says where each node is computed. A node in `inline`
is recomputed inside every kernel that reads it instead of being written to memory; a reduction
in `row` is computed by its reader's row kernel; a SumReduce in `matmul` runs on the tiled matmul
template; `online` and `streamed` are the parts of an attention computed in one pass by it. Every
other compute node is the root of its own kernel. The decisions and the per-kernel parameters are
declared once, here, and everything else (comparing, keying, tuning, what code generation is told)
derives from the declarations.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, replace
from typing import Optional

from ..codegen.legality import BLOCK, N_TILES, TILE


def decision(doc: str, codegen: Optional[str] = None):
    """A per-node decision of a Schedule: a set of node ids. `codegen` names the key under which code
    generation is told of it (a reduction that a template, not an unrolled loop, computes)."""
    return field(default=frozenset(), metadata={"doc": doc, "codegen": codegen})


@dataclass(frozen=True)
class Param:
    """A per-kernel parameter: its value when unset, and per kind of kernel the values the tuner tries
    (the first wins a tie)."""

    name: str
    doc: str
    default: object
    choices: dict
    moves_memory: bool = False  # its choices change how threads walk memory: priced on the built kernel
    adds_threads: bool = False  # its other choices only add threads: not priced where the device is full


# Tried in this order, each with the ones before it already chosen.
KERNEL_PARAMS = (
    Param(
        "strategy",
        "a reduction's threads: one per output, a block per output, or a block per 32 neighbouring "
        "outputs with a warp across them (unset: by the extent, default_reduce_strategy)",
        None,
        {"reduce": ("thread", "block", "columns")},
        moves_memory=True,
    ),
    # A reduction's or row's block of 512 or 1,024 threads (priced only where the device is not full and
    # the reduced axis gives every thread a value: a decode step's 32 layer-norm rows of 768)
    Param(
        "block", "threads per block", BLOCK,
        {"elementwise": (BLOCK, 128), **{kind: (BLOCK, 128, 512, 1024) for kind in ("reduce", "row")}},
    ),
    Param("tile", "the edge of the matmul's square tiles", TILE, {"matmul": (TILE, 32)}, moves_memory=True),
    # A plain matmul's K split across its block's threads (threadIdx.z), the slices' sums added in shared
    # memory: more threads for a matmul of few outputs, with no second kernel (priced only where the
    # tiles alone leave the device part idle: Evaluator.choices).
    Param("slices", "K split across a matmul block's threads (threadIdx.z)", 1, {"matmul": (1, 4)},
          moves_memory=True, adds_threads=True),
    # A matmul's K split across blocks, the last of a tile's blocks adding their partial sums in split
    # order (split-K: a decode step's 32 rows against 768 columns fill a tenth of the device), or an
    # online softmax's combining partial maxima, sums and accumulators (flash-decoding: one query a head
    # gives a decode step's attention few rows); priced only where the device is not full.
    Param("splits", "K split across a matmul's blocks (split-K; flash-decoding when online)", 1,
          {"matmul": (1, 4, 16, 64)}, moves_memory=True, adds_threads=True),
    # An online-softmax matmul's block computing several neighbouring N tiles: the scores (and the K tiles
    # streamed for them) once for all of them rather than once per N tile (attention's head dim at 64
    # is four tiles of 16); one N tile a block only adds blocks, priced where the device is not full.
    Param("n_tiles", "N tiles an online-softmax matmul's block computes (at most N's)", N_TILES,
          {"matmul": (N_TILES, 1)},
          moves_memory=True, adds_threads=True),
    Param(
        "b_along_k",
        "load B's tiles with threadIdx.x walking K (coalesced when B is contiguous along K, as W in x @ W.T)",
        False,
        {"matmul": (False, True)},
        moves_memory=True,
    ),
)
PARAMS_BY_NAME = {p.name: p for p in KERNEL_PARAMS}
DEFAULT_PARAMS = {p.name: p.default for p in KERNEL_PARAMS}


@dataclass(frozen=True)
class Schedule:
    """Where each node is computed: the per-node decisions below (every other compute node is the root
    of its own kernel) and each kernel's parameters. A value: equal schedules compare and hash equal."""

    inline: frozenset = decision("computed inside every kernel that reads it, never stored")
    row: frozenset = decision(
        "a reduction computed by its reader's row kernel (also inline)", codegen="row_ids"
    )
    epilogue: frozenset = decision("a reduction whose elementwise reader is applied to the result before the "
                                   "store (also inline)", codegen="epilogue_ids")
    matmul: frozenset = decision("a SumReduce lowered by the tiled matmul template", codegen="matmul_ids")
    online: frozenset = decision(
        "a softmax's MaxReduce and SumReduce computed in one pass (running maximum, "
        "rescaled sum) by the matmul that reads the softmax (also inline)",
        codegen="online_ids",
    )
    prologue: frozenset = decision(
        "a per-row reduction (layer norm's mean and variance) computed for the rows of "
        "each tile by every matmul that reads it, before its tile loop (also inline)",
        codegen="prologue_ids",
    )
    streamed: frozenset = decision(
        "a matmul whose only use is the scores of an online softmax, computed a tile at "
        "a time inside the online kernel (also inline)",
        codegen="streamed_ids",
    )
    welford: frozenset = decision(
        "a prologue's sum of squared deviations from its row's mean, computed in the same "
        "pass as the row's sum by Welford's update (also prologue)",
        codegen="welford_ids",
    )
    row_stats: frozenset = decision(
        "a layer norm's row sum and sum of squared deviations, or a row's maximum (and its chunks'), "
        "computed by the matmul kernel that stores the rows, as it stores them (search.row_stats; never "
        "a kernel's root, never inline)",
        codegen="row_stats_ids",
    )
    tails: frozenset = decision(
        "a short exact reduction of a block reduction's rows (a split maximum's last step), with its "
        "epilogue, finished by the last block of each row of that reduction's kernel (search.tail; never "
        "a kernel's root, never inline)",
        codegen="tail_ids",
    )
    params: tuple = ()  # ((root id, name), value) pairs, sorted: the KERNEL_PARAMS a kernel sets

    @functools.cached_property
    def _params(self) -> dict:
        return dict(self.params)

    @functools.cached_property
    def templated(self) -> frozenset:
        """The reductions a decision hands to a template (never unrolled inline)."""
        return frozenset().union(*(getattr(self, name) for name in TEMPLATED))

    def param(self, root_id: int, name: str):
        return self._params.get((root_id, name), PARAMS_BY_NAME[name].default)

    def kernel_params(self, root_id: int, kind: Optional[str] = None) -> dict:
        """Every parameter of the kernel rooted at `root_id`, defaults filled in. Given the kernel's
        kind, a parameter that kind has no choices for is its default: a node that was a matmul's
        root in another schedule may have kept a tile, which its reduction kernel must not see
        (it would be built and priced once per stale value)."""
        if not self.params:  # the whole fusion search, before tuning sets any: every default
            return dict(DEFAULT_PARAMS)
        return {p.name: self.param(root_id, p.name) if kind is None or kind in p.choices else p.default
                for p in KERNEL_PARAMS}

    def with_params(self, chosen: dict) -> "Schedule":
        """This schedule with {(root id, name): value} set (None: unset)."""
        params = {**self._params, **chosen}
        return replace(self, params=tuple(sorted((k, v) for k, v in params.items() if v is not None)))

    def decide(self, **ids) -> "Schedule":
        """This schedule with the node ids added to the named decisions: decide(inline={3}, row={3})."""
        return replace(self, **{name: getattr(self, name) | frozenset(more) for name, more in ids.items()})

    def indexed(self, index: dict) -> dict:
        """The decisions and parameters with node ids renumbered by `index` (a program file's node
        numbers, exec.saved), nodes outside it dropped: what a program file stores."""
        decided = {d.name: sorted(index[i] for i in getattr(self, d.name) if i in index) for d in DECISIONS}
        return {
            **decided,
            "params": [[index[root], name, value] for (root, name), value in self.params if root in index],
        }


DECISIONS = tuple(f for f in fields(Schedule) if "codegen" in f.metadata)
TEMPLATED = tuple(
    d.name for d in DECISIONS if d.metadata["codegen"]
)  # the decisions that hand a node to a template
