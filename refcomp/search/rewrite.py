"""The search's view of a graph: canonical keys and hashes of what nodes compute, and node counts.

Rebuilding a graph with nodes replaced (`rebuild`, `compose`, `identity_edge`) is shared by the
driver, the search and spmd, so it lives with the other graph walks in `ops/graph.py`.
"""
from __future__ import annotations

from typing import Sequence

from ..ops.graph import toposort
from ..ops.primitives import Edge, Node


def structural_key(node: Node, memo: dict[int, object]) -> object:
    """Equal for nodes that compute the same values: same op, attributes and (recursively) sources.

    Computed sources-first with an explicit stack (graphs may be thousands of nodes deep), stopping
    at nodes already in `memo`."""
    stack = [node]
    while stack:
        n = stack[-1]
        pending = [s.node for s in n.srcs if s.node.id not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        if n.id not in memo:
            attrs = tuple(sorted((k, repr(v)) for k, v in n.attrs.items()))
            srcs = tuple((memo[s.node.id], s.views) for s in n.srcs)
            memo[n.id] = hash((n.op.name, n.dtype, attrs, srcs))
    return memo[node.id]


def graph_hash(outputs: Sequence[Edge]) -> int:
    memo: dict[int, object] = {}
    return hash(tuple((structural_key(e.node, memo), e.views) for e in outputs))


def count_compute_nodes(outputs: Sequence[Edge]) -> int:
    return sum(1 for n in toposort([e.node for e in outputs]) if n.op.kind != "leaf")
