"""Walking the graph: topological order, and the list/dict/single shapes of user outputs."""
from __future__ import annotations

from typing import Any, Callable

from ..errors import RefcompError
from .primitives import Node


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
    from .tensor import Tensor
    if isinstance(outputs, Tensor):
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
        if not isinstance(t, Tensor):
            raise RefcompError(f"output {keys[i] if isinstance(outputs, dict) else i!r} is a {type(t).__name__}, not a Tensor")
    return tensors, rebuild


def input_nodes(nodes: list[Node]) -> list[Node]:
    inputs: dict[str, Node] = {}
    for node in nodes:
        if node.op.name != "Input":
            continue
        name = node.attrs["name"]
        other = inputs.setdefault(name, node)
        if other is not node and (other.attrs["shape"] != node.attrs["shape"] or other.dtype != node.dtype):
            raise RefcompError(f"two different inputs are both named {name!r}: {other} and {node}")
    return list(inputs.values())
