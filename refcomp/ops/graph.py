"""Walking the graph: topological order, and the list/dict/single shapes of user outputs."""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

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
