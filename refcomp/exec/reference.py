"""The NumPy reference interpreter: the oracle every compiled kernel is checked against.

It is deliberately the plainest code in refcomp: nodes run one at a time in topological order,
each op's meaning comes straight from `primitives.OPS`, and a view is applied by computing its
index and mask arrays in NumPy and gathering. No fusion, no cleverness.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ..errors import BindingError, FeedError, RefcompError
from ..ops.graph import flatten_outputs, input_nodes, toposort
from ..ops.primitives import Node
from ..symbolic.dims import evaluate_dim, evaluate_value
from ..symbolic.view import View, ViewStack

PRECISIONS = {"float32": np.float32, "float64": np.float64}


def apply_view(flat: np.ndarray, view: View, bindings: Mapping[str, int], what: str = "a tensor") -> np.ndarray:
    """Read `flat` through one view: out[i] = flat[offset + sum(i_k*stride_k)] where the mask holds, else 0.

    Views are built assuming a slice of a symbolic axis lies inside it (x[:10] of a T axis is 10
    long); a binding that breaks that is reported here, naming the dims, instead of reading garbage.
    """
    shape = tuple(evaluate_dim(n, bindings) for n in view.shape)
    if any(n < 0 for n in shape):
        raise BindingError(f"reading {what}: shape {tuple(map(str, view.shape))} is {shape} at {dict(bindings)}; "
                           f"a slice of a symbolic axis is longer than the axis for these dims")
    index = np.full(shape, evaluate_dim(view.offset, bindings), dtype=np.int64)
    valid = np.ones(shape, dtype=bool)
    for axis, (n, stride, (lo, hi)) in enumerate(zip(shape, view.strides, view.ranges())):
        position = np.arange(n, dtype=np.int64).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        index = index + position * evaluate_dim(stride, bindings)
        valid &= (position >= evaluate_dim(lo, bindings)) & (position < evaluate_dim(hi, bindings))
    if valid.any():
        reached = index[valid]
        if reached.min() < 0 or reached.max() >= flat.size:
            raise BindingError(f"reading {what} of shape {tuple(map(str, view.shape))} at {dict(bindings)}: the view reads "
                               f"outside the {flat.size} elements below it; a slice or index of a symbolic axis is out of range for these dims")
    picked = flat[np.where(valid, index, 0)] if flat.size else np.zeros(shape, flat.dtype)
    return np.where(valid, picked, np.zeros((), flat.dtype))


def read_edge(array: np.ndarray, views: ViewStack, bindings: Mapping[str, int], what: str = "a tensor") -> np.ndarray:
    for view in views.views:
        array = apply_view(np.ascontiguousarray(array).reshape(-1), view, bindings, what)
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
        table, ids = args
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            bad = ids[(ids < 0) | (ids >= table.shape[0])]
            raise FeedError(f"embedding ids from {node.srcs[1].node.label} must lie in [0, {table.shape[0]}) (the rows of "
                            f"{node.srcs[0].node.label}), got {bad.size} outside, e.g. {bad.flat[0]}")
    out = node.op.numpy(args, _bound_attrs(node, bindings), dtype)
    return np.asarray(out, dtype=dtype)


def evaluate(outputs, feeds: Mapping[str, object], dims: Optional[Mapping[str, int]] = None, precision: str = "float32"):
    """Evaluate tensors exactly as the primitive graph says; returns arrays in the outputs' structure."""
    if precision not in PRECISIONS:
        raise RefcompError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    dtype = PRECISIONS[precision]
    tensors, rebuild = flatten_outputs(outputs)
    nodes = toposort([t.node for t in tensors])
    arrays, bindings = bind_dims(input_nodes(nodes), feeds, dims)
    values: dict[int, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for node in nodes:
            if node.op.name == "Input":
                array = arrays[node.attrs["name"]]
                values[node.id] = array if node.dtype == "int32" else array.astype(dtype)
                continue
            args = [read_edge(values[e.node.id], e.views, bindings, e.node.label) for e in node.srcs]
            values[node.id] = run_node(node, args, bindings, dtype)
        results = [read_edge(values[t.node.id], t.views, bindings, t.node.label) for t in tensors]
    return rebuild([r if r.dtype == np.int32 else r.astype(dtype) for r in results])


from .bindings import bind_dims  # noqa: E402  (kept at the bottom: bindings imports primitives too)
