"""What the search may ask code generation: the one interface from `search` into `codegen`.

The search proposes fusions; only code generation knows whether a fused kernel can be written (a
row kernel whose reduction is read at another row cannot). `fusion_problem` answers that by running
the kernel's index analysis, where every refusal is raised, without rendering a template or printing
any source. The limits the search must respect are re-exported here so that the search reads them
from the stage that imposes them, and so is the memory model of a built kernel (codegen.access), which
prices the search's final choices, and which sums code generation compensates (codegen.sums), whose
extra flops the cost model counts.
"""
from __future__ import annotations

from typing import Callable, Optional

from ..ops.primitives import Node
from .access import AccessModelError, MemoryCounts, global_counts
from .row_stats_access import buffer_bytes
from .emit import MAX_FUSED_NODES, MAX_INLINED_VALUES, SHORT_REDUCE, ProgramNames, Unfusable
from .fused import matmul_axes
from .indexed import carried_columns
from .online import online_softmax, streamed_scores
from .row_maximum import row_maximum
from .statistics import row_statistics
from .sums import COMPENSATION_FLOPS, long_chain
from .kernels import BLOCK, N_TILES, REDUCE_STRIDE, TILE, WARP_OUTPUTS, Kernel, default_reduce_strategy
from .lower import TEMPLATE_ONLY, Group, kernel_for_group, materialise_outputs, retarget

__all__ = [
    "fusion_problem",
    "Unfusable",
    "TEMPLATE_ONLY",
    "retarget",
    "AccessModelError",
    "buffer_bytes",
    "global_counts",
    "MemoryCounts",
    "Kernel",
    "kernel_for_group",
    "Group",
    "ProgramNames",
    "matmul_axes",
    "carried_columns",
    "online_softmax",
    "streamed_scores",
    "row_statistics",
    "row_maximum",
    "materialise_outputs",
    "BLOCK",
    "TILE",
    "N_TILES",
    "MAX_FUSED_NODES",
    "MAX_INLINED_VALUES",
    "SHORT_REDUCE",
    "default_reduce_strategy",
    "REDUCE_STRIDE",
    "WARP_OUTPUTS",
    "COMPENSATION_FLOPS",
    "long_chain",
]


def fusion_problem(
    group: Group, names: ProgramNames, fused: Callable[[Node], bool], params: dict
) -> Optional[str]:
    """None when code generation can honour this fused group, else why it cannot."""
    try:
        kernel_for_group("check", group, names, fused, params, render=False)
    except Unfusable as exc:
        return str(exc)
    return None
