"""Walking the graph: topological order, rebuilding it with nodes replaced, and the list/dict/single
shapes of user outputs.

A rewrite replaces a node by an *edge* (some node read through a view stack) of the same shape.
Consumers read the replaced node through their own view stacks; reading the replacement instead
means stacking the consumer's views on top of the replacement's, which `compose` does without
changing what any index reads. `rebuild` goes bottom-up, so everything downstream of a change is a
fresh node and everything unreachable from the outputs disappears (dead-code removal).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

import sympy

from ..errors import RefcompError
from ..symbolic.dims import free_symbols
from ..symbolic.view import ViewStack
from .core import TensorCore
from .primitives import Edge, Node


def toposort(roots: list[Node]) -> list[Node]:
    """Every node the roots depend on, producers before consumers (iterative: graphs can be deep)."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(n, False) for n in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node.id in seen:
            continue
        seen.add(node.id)
        stack.append((node, True))
        stack.extend((e.node, False) for e in reversed(node.srcs) if e.node.id not in seen)
    return order


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


def flatten_outputs(outputs) -> tuple[list, Callable[[list], Any]]:
    """Tensors in a fixed order, and a function that puts results back in the user's structure."""
    if isinstance(outputs, TensorCore):
        return [outputs], lambda values: values[0]
    if isinstance(outputs, dict):
        keys = list(outputs)
        tensors = [outputs[k] for k in keys]
        rebuild = lambda values: dict(zip(keys, values))
    elif isinstance(outputs, (list, tuple)):
        tensors = list(outputs)
        rebuild = lambda values: list(values)
    else:
        raise RefcompError(f"outputs must be a Tensor, a list of them or a dict of them, got {type(outputs).__name__}")
    for i, t in enumerate(tensors):
        if not isinstance(t, TensorCore):
            raise RefcompError(f"output {keys[i] if isinstance(outputs, dict) else i!r} is a {type(t).__name__}, not a Tensor")
    return tensors, rebuild


def input_nodes(nodes: list[Node]) -> list[Node]:
    """One Input node per name; two inputs may share a name only if they agree on shape and dtype."""
    inputs: dict[str, Node] = {}
    for node in nodes:
        if node.op.name != "Input":
            continue
        name = node.attrs["name"]
        other = inputs.setdefault(name, node)
        if other is not node and (other.attrs["shape"] != node.attrs["shape"] or other.dtype != node.dtype):
            raise RefcompError(f"two different inputs are both named {name!r}: one of shape {_shape(other)} {other.dtype}, "
                               f"the other of shape {_shape(node)} {node.dtype}; give them different names")
    return list(inputs.values())


def _shape(node: Node) -> str:
    return "(" + ", ".join(map(str, node.shape)) + ("," if len(node.shape) == 1 else "") + ")"


def symbols_of(nodes: list[Node], edges: Sequence[Edge] = ()) -> set[sympy.Symbol]:
    """Every symbolic dim a graph mentions: in shapes, in views (strides, offsets, masks) and in
    Constant values such as 1/T; `edges` are extra views read from outside (the outputs). These
    are what a binding must give values to."""
    symbols: set[sympy.Symbol] = set()
    for stack in {e.views for node in nodes for e in node.srcs} | {e.views for e in edges}:
        symbols |= _stack_symbols(stack)
    for shape in {node.shape for node in nodes}:
        symbols |= _dims_symbols(shape)
    for node in nodes:
        value = node.attrs.get("value")
        if isinstance(value, sympy.Basic):
            symbols |= value.free_symbols
    return symbols


@functools.lru_cache(maxsize=16384)
def _stack_symbols(stack: ViewStack) -> frozenset:
    """The symbols of a view stack, memoised: a graph's edges share a few stacks, and the search asks
    of every graph it builds."""
    return frozenset().union(*(_dims_symbols(view.shape + view.strides + (view.offset,) + tuple(x for r in (view.mask or ()) for x in r))
                               for view in stack.views))


@functools.lru_cache(maxsize=16384)
def _dims_symbols(dims: tuple) -> frozenset:
    return frozenset().union(*(free_symbols(d) for d in dims if not isinstance(d, int)))
