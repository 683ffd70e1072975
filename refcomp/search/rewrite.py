"""The search's view of a graph: canonical keys and hashes of what nodes compute, and node counts.

Rebuilding a graph with nodes replaced (`rebuild`, `compose`, `identity_edge`) is shared by the
driver, the search and spmd, and `structural_key` by the search and the explorer, so they live with
the other graph walks in `ops/graph.py`.
"""
from __future__ import annotations

from typing import Sequence

from ..ops.graph import structural_key, toposort
from ..ops.primitives import Edge


def graph_hash(outputs: Sequence[Edge]) -> int:
    memo: dict[int, object] = {}
    return hash(tuple((structural_key(e.node, memo), e.views) for e in outputs))


def count_compute_nodes(outputs: Sequence[Edge]) -> int:
    return sum(1 for n in toposort([e.node for e in outputs]) if n.op.kind != "leaf")
