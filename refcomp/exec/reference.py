"""The NumPy reference interpreter: the oracle every compiled kernel is checked against.

It is deliberately the plainest code in refcomp: nodes run one at a time in topological order,
each op's meaning comes straight from `primitives.OPS`, and a view is applied by computing its
index and mask arrays in NumPy and gathering. No fusion, no cleverness.
"""
from __future__ import annotations

import contextlib
from typing import Mapping, Optional

import numpy as np

from ..errors import AllocationError, RefcompError
from ..ops.graph import flatten_outputs, input_nodes, symbols_of, toposort
from ..ops.primitives import Node
from ..symbolic.dims import evaluate_dim, evaluate_size, evaluate_value
from ..symbolic.view import View, ViewStack
from . import limits
from .bindings import bind_dims, check_binding, check_ids, show_binding

PRECISIONS = {"float32": np.float32, "float64": np.float64}


def apply_view(flat: np.ndarray, view: View, bindings: Mapping[str, int]) -> np.ndarray:
    """Read `flat` through one view: out[i] = flat[offset + sum(i_k*stride_k)] where the mask holds, else 0.

    `bindings.check_binding` has already refused any binding at which a view reads outside `flat`.
    """
    shape = tuple(evaluate_dim(n, bindings) for n in view.shape)
    index = np.full(shape, evaluate_dim(view.offset, bindings), dtype=np.int64)
    valid = np.ones(shape, dtype=bool)
    for axis, (n, stride, (lo, hi)) in enumerate(zip(shape, view.strides, view.ranges())):
        position = np.arange(n, dtype=np.int64).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        index = index + position * evaluate_dim(stride, bindings)
        valid &= (position >= evaluate_dim(lo, bindings)) & (position < evaluate_dim(hi, bindings))
    picked = flat[np.where(valid, index, 0)] if flat.size else np.zeros(shape, flat.dtype)
    return np.where(valid, picked, np.zeros((), flat.dtype))


def read_edge(array: np.ndarray, views: ViewStack, bindings: Mapping[str, int]) -> np.ndarray:
    for view in views.views:
        array = apply_view(np.ascontiguousarray(array).reshape(-1), view, bindings)
    return array


def _bound_attrs(node: Node, bindings: Mapping[str, int]) -> dict:
    attrs = dict(node.attrs)
    if "shape" in attrs:
        attrs["shape"] = tuple(evaluate_dim(n, bindings) for n in attrs["shape"])
    if "value" in attrs:
        attrs["value"] = evaluate_value(attrs["value"], bindings)
    return attrs


def run_node(node: Node, args: list[np.ndarray], bindings: Mapping[str, int], dtype) -> np.ndarray:
    if node.op.name == "Gather":
        check_ids(node, args[1], bindings)
    out = node.op.numpy(args, _bound_attrs(node, bindings), dtype)
    return np.asarray(out, dtype=dtype)


# Reading a view materialises int64 indices, a mask and the gathered values: about this many bytes
# per element, the largest transient of the interpreter.
BYTES_PER_READ_ELEMENT = 8 + 8 + 1 + 8


@contextlib.contextmanager
def _room_for(what: str, shapes, bindings: Mapping[str, int]):
    """Refuse a step whose arrays cannot fit in memory, before NumPy tries (and after, if it fails)."""
    elements = sum(evaluate_size(shape, bindings) for shape in shapes)
    nbytes = elements * BYTES_PER_READ_ELEMENT
    at = show_binding(bindings)
    limits.require(nbytes, limits.host_memory_bytes(), f"evaluating {what} at {at}", "this machine's memory")
    try:
        yield
    except (MemoryError, ValueError) as exc:
        if isinstance(exc, ValueError) and "too big" not in str(exc):
            raise
        raise AllocationError(f"evaluating {what} at {at} needs about {limits.show_bytes(nbytes)}, which NumPy "
                              f"could not allocate ({type(exc).__name__})") from None


def evaluate(outputs, feeds: Mapping[str, object], dims: Optional[Mapping[str, int]] = None, precision: str = "float32"):
    """Evaluate tensors exactly as the primitive graph says; returns arrays in the outputs' structure."""
    if precision not in PRECISIONS:
        raise RefcompError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    dtype = PRECISIONS[precision]
    tensors, rebuild = flatten_outputs(outputs)
    nodes = toposort([t.node for t in tensors])
    arrays, bindings = bind_dims(input_nodes(nodes), feeds, dims, {s.name for s in symbols_of(nodes, [t.edge for t in tensors])})
    check_binding(nodes, [t.edge for t in tensors], bindings)
    values: dict[int, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for node in nodes:
            if node.op.name == "Input":
                array = arrays[node.attrs["name"]]
                values[node.id] = array if node.dtype == "int32" else array.astype(dtype)
                continue
            with _room_for(node.label, [e.shape for e in node.srcs] + [node.shape], bindings):
                args = [read_edge(values[e.node.id], e.views, bindings) for e in node.srcs]
                values[node.id] = run_node(node, args, bindings, dtype)
        results = []
        for k, t in enumerate(tensors):
            with _room_for(f"output {k} ({t.label})", [t.shape], bindings):
                results.append(read_edge(values[t.node.id], t.views, bindings))
    return rebuild([r if r.dtype == np.int32 else r.astype(dtype) for r in results])

