"""Rewriting the primitive graph: replace nodes by edges, rebuild consumers, canonical hashes.

A rewrite replaces a node by an *edge* (some node read through a view stack) of the same shape.
Consumers read the replaced node through their own view stacks; reading the replacement instead
means stacking the consumer's views on top of the replacement's, which `compose` does without
changing what any index reads. Nodes are rebuilt bottom-up, so everything downstream of a change
is a fresh node and everything unreachable from the outputs disappears (dead-code removal).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..ops.graph import toposort
from ..ops.primitives import Edge, Node
from ..symbolic.view import ViewStack


def compose(inner: ViewStack, outer: ViewStack) -> ViewStack:
    """`outer` reads a buffer whose contents are `inner`'s logical view: read through both."""
    if inner.is_identity:  # the replacement's buffer is laid out exactly as the replaced node's
        return outer
    base, rest = outer.views[0], outer.views[1:]
    if base.is_contiguous:  # the base view is a plain reshape of the buffer: apply it to `inner`
        same = len(base.shape) == len(inner.shape) and all(a == b for a, b in zip(base.shape, inner.shape))
        stack = inner if same else inner.reshape(base.shape)
        return ViewStack(stack.views + rest)
    return ViewStack(inner.views + outer.views)


def identity_edge(node: Node) -> Edge:
    return Edge(node, ViewStack.of_buffer(node.shape))


def rebuild(outputs: Sequence[Edge], replace: Callable[[Node], Optional[Edge]]) -> tuple[list[Edge], int]:
    """New output edges after offering every node (bottom-up, with rebuilt sources) to `replace`.

    Returns the outputs and how many nodes `replace` rewrote.
    """
    mapping: dict[int, Edge] = {}
    rewritten = 0
    for node in toposort([e.node for e in outputs]):
        srcs = tuple(Edge(mapping[s.node.id].node, compose(mapping[s.node.id].views, s.views)) for s in node.srcs)
        changed = any(a.node is not b.node or a.views != b.views for a, b in zip(srcs, node.srcs))
        current = Node(node.op, srcs, node.attrs, node.shape, node.dtype, origin=node.origin) if changed else node
        replacement = replace(current)
        if replacement is not None:
            rewritten += 1
            if replacement.node.origin is None:  # a node a rule built computes what the replaced one did
                replacement.node.origin = node.origin
            mapping[node.id] = replacement
        else:
            mapping[node.id] = identity_edge(current)
    out = [Edge(mapping[e.node.id].node, compose(mapping[e.node.id].views, e.views)) for e in outputs]
    return out, rewritten


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
