"""The NumPy reference interpreter: the oracle every compiled kernel is checked against.

It is deliberately the plainest code in refcomp: nodes run one at a time in topological order and
each op's meaning comes straight from `primitives.OPS`. A view is read as NumPy reads a strided
window (its mask is a box: zeros outside it), never by gathering index arrays. One step is not
node by node, for speed: a chain of SumReduce over a Mul that nothing else reads (a matmul, a
convolution) is one np.einsum of the Mul's operands, so the broadcast product is never stored
(`evaluate(..., contract=False)` turns that off; tests check both agree).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Mapping, Optional

import numpy as np
import sympy

from ..errors import AllocationError, RefcompError
from ..ops.dtypes import DTYPES, numpy_compute, round_to
from ..ops.graph import flatten_outputs, input_nodes, symbols_of, toposort
from ..ops.primitives import INDEXED, Node
from ..symbolic.dims import evaluate_dim, evaluate_size, evaluate_value
from ..symbolic.view import View, ViewStack
from . import limits
from .bindings import bind_dims, check_binding, check_ids, show_binding

PRECISIONS = {"float32": np.float32, "float64": np.float64}


def apply_view(flat: np.ndarray, view: View, bindings: Mapping[str, int]) -> np.ndarray:
    """Read `flat` through one view: out[i] = flat[offset + sum(i_k*stride_k)] where the mask holds, else 0.

    A view's mask is a box (a range per axis), so the values are a strided window of `flat` (NumPy
    reads it in place, broadcasts without copying) written into zeros over that box: the same
    numbers as gathering every index, without the index arrays. `bindings.check_binding` has
    already refused any binding at which a view reads outside `flat`.
    """
    shape, box, strides, start = _view_at(view, tuple(sorted(bindings.items())))
    if not flat.size or box is None:
        return np.zeros(shape, flat.dtype)
    window = np.lib.stride_tricks.as_strided(flat[start:], [hi - lo for lo, hi in box],
                                             [stride * flat.itemsize for stride in strides], writeable=False)
    if all(lo == 0 and hi == n for (lo, hi), n in zip(box, shape)):
        return window
    out = np.zeros(shape, flat.dtype)
    out[tuple(slice(lo, hi) for lo, hi in box)] = window
    return out


@functools.lru_cache(maxsize=65536)
def _view_at(view: View, binding: tuple) -> tuple:
    """A view's numbers at a binding: its shape, the box of unmasked indices (None if empty), its
    strides and the position of the box's first element. Memoised: a graph reads the same views at
    the same binding on every run."""
    bindings = dict(binding)
    shape = tuple(evaluate_dim(n, bindings) for n in view.shape)
    box = tuple((max(evaluate_dim(lo, bindings), 0), min(evaluate_dim(hi, bindings), n))
                for n, (lo, hi) in zip(shape, view.ranges()))
    strides = tuple(evaluate_dim(stride, bindings) for stride in view.strides)
    if not all(shape) or any(lo >= hi for lo, hi in box):
        return shape, None, strides, 0
    start = evaluate_dim(view.offset, bindings) + sum(lo * stride for (lo, _), stride in zip(box, strides))
    return shape, box, strides, start


def _apply_view_by_index(flat: np.ndarray, view: View, bindings: Mapping[str, int]) -> np.ndarray:
    """apply_view by gathering every index (the definition; tests check apply_view against it)."""
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
    if "value" in attrs and DTYPES[node.dtype].is_int:  # an integer, or an index expression of dims
        attrs["value"] = int(attrs["value"]) if not isinstance(attrs["value"], sympy.Basic) or \
            attrs["value"].is_Integer else evaluate_dim(attrs["value"], bindings)
    elif "value" in attrs:
        attrs["value"] = evaluate_value(attrs["value"], bindings)
    return attrs


def run_node(node: Node, args: list[np.ndarray], bindings: Mapping[str, int], precision) -> np.ndarray:
    """One node on its operands' values, in the arithmetic of the node's type (ops.dtypes): operands of
    another kind are converted first, as C's conversions do in a kernel. The float kind computes in
    the run's `precision`."""
    dtype = numpy_compute(node.dtype, precision)
    if node.op.kind in INDEXED:
        check_ids(node, args[1], bindings)
        args = [args[0].astype(dtype, copy=False), args[1]] + [a.astype(dtype, copy=False) for a in args[2:]]
    elif node.op.name == "LessThan":  # compares in the operands' promoted type, which is its own
        args = [a.astype(dtype, copy=False) for a in args]
    elif node.op.name == "Where":  # the condition only selects
        args = [args[0]] + [a.astype(dtype, copy=False) for a in args[1:]]
    elif node.op.name != "Cast":
        args = [a.astype(dtype, copy=False) for a in args]
    out = node.op.numpy(args, _bound_attrs(node, bindings), dtype)
    return round_to(np.asarray(out, dtype=dtype), node.dtype)


def _contraction_parts(nodes, outputs) -> set[int]:
    """The Mul and SumReduce nodes that a SumReduce above them reads alone, through no view: the chain
    SumReduce(...SumReduce(Mul(a, b))) that matmuls and convolutions are, evaluated as one product."""
    readers: dict[int, list] = {}
    for n in nodes:
        for e in n.srcs:
            readers.setdefault(e.node.id, []).append((n, e))
    output_ids = {n.id for n in outputs}

    def read_alone(n) -> bool:
        edges = readers.get(n.id, [])
        return (n.id not in output_ids and len(edges) == 1 and edges[0][0].op.name == "SumReduce"
                and not DTYPES[n.dtype].is_narrow  # a 16-bit product is rounded before it is summed
                and edges[0][1].views.is_identity and tuple(edges[0][1].shape) == tuple(n.shape))

    deferred: set[int] = set()
    for n in nodes:  # producers first: a SumReduce joins only a chain that already ends in a Mul
        if read_alone(n) and (
            n.op.name == "Mul" or (n.op.name == "SumReduce" and n.srcs[0].node.id in deferred)
        ):
            deferred.add(n.id)
    return deferred


def _contract(top: Node, values, bindings, precision) -> np.ndarray:
    """A SumReduce chain over a Mul as one np.einsum of the Mul's two operands, read in place (a
    broadcast axis of an operand is dropped from it, so nothing is materialised at the product's
    size). The same sum in another order: float64 agrees to ~1e-16 relative, float32 within rounding."""
    reduced, node = [], top
    while node.op.name == "SumReduce":
        reduced.append(node.attrs["axis"])
        node = node.srcs[0].node
    remaining = list(range(len(node.shape)))
    dropped = set()
    for axis in reversed(reduced):  # from the Mul up: each SumReduce removes one of the remaining axes
        dropped.add(remaining.pop(axis))
    shape = tuple(evaluate_dim(n, bindings) for n in node.shape)
    dtype = numpy_compute(top.dtype, precision)
    arrays = [
        np.broadcast_to(read_edge(values[e.node.id], e.views, bindings).astype(dtype, copy=False), shape)
        for e in node.srcs
    ]
    real = [{a for a in range(len(shape)) if not (x.strides[a] == 0 and shape[a] > 1)} for x in arrays]
    for a in (
        set(range(len(shape))) - real[0] - real[1]
    ):  # broadcast in both: the first keeps it (n copies count)
        real[0].add(a)
    operands = []
    for x, axes in zip(arrays, real):
        operands += [x[tuple(slice(None) if a in axes else 0 for a in range(len(shape)))], sorted(axes)]
    out = np.einsum(*operands, remaining, optimize=True)
    return round_to(np.asarray(out, dtype=dtype), top.dtype).reshape(
        tuple(evaluate_dim(n, bindings) for n in top.shape)
    )


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
        raise AllocationError(
            f"evaluating {what} at {at} needs about {limits.show_bytes(nbytes)}, which NumPy "
            f"could not allocate ({type(exc).__name__})"
        ) from None


def evaluate(
    outputs,
    feeds: Mapping[str, object],
    dims: Optional[Mapping[str, int]] = None,
    precision: str = "float32",
    contract: bool = True,
):
    """Evaluate tensors exactly as the primitive graph says; returns arrays in the outputs' structure.
    `contract=False` evaluates every node alone (see _contract)."""
    if precision not in PRECISIONS:
        raise RefcompError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    dtype = PRECISIONS[precision]
    tensors, rebuild = flatten_outputs(outputs)
    nodes = toposort([t.node for t in tensors])
    arrays, bindings = bind_dims(
        input_nodes(nodes), feeds, dims, {s.name for s in symbols_of(nodes, [t.edge for t in tensors])}
    )
    check_binding(nodes, [t.edge for t in tensors], bindings)
    values: dict[int, np.ndarray] = {}
    deferred = _contraction_parts(nodes, [t.node for t in tensors]) if contract else set()
    with np.errstate(all="ignore"):
        for node in nodes:
            if node.op.name == "Input":
                array = arrays[node.attrs["name"]]
                values[node.id] = round_to(array.astype(numpy_compute(node.dtype, dtype)), node.dtype)
                continue
            if node.id in deferred:
                continue
            if node.op.name == "SumReduce" and node.srcs[0].node.id in deferred:
                with _room_for(node.label, [node.shape], bindings):
                    values[node.id] = _contract(node, values, bindings, dtype)
                continue
            with _room_for(node.label, [e.shape for e in node.srcs] + [node.shape], bindings):
                args = [read_edge(values[e.node.id], e.views, bindings) for e in node.srcs]
                values[node.id] = run_node(node, args, bindings, dtype)
        results = []
        for k, t in enumerate(tensors):
            with _room_for(f"output {k} ({t.label})", [t.shape], bindings):
                results.append(read_edge(values[t.node.id], t.views, bindings))
    return rebuild([_as_returned(r, t.dtype, dtype) for r, t in zip(results, tensors)])


def _as_returned(values: np.ndarray, name: str, precision) -> np.ndarray:
    """An output as the user gets it: its own type's NumPy array (float kinds in the run's precision)."""
    if not DTYPES[name].is_float:
        return values.astype({"int32": np.int32, "int64": np.int64, "float64": np.float64}[name])
    return values.astype(precision)



def computed_ids(edge, arrays: Mapping[str, np.ndarray], bindings: Mapping[str, int]) -> np.ndarray:
    """The ids a graph computes for a Scatter (positions, an arange), evaluated here from the run's
    checked feeds: the runner checks them before any kernel writes (they are few: one per row)."""
    nodes = toposort([edge.node])
    names = {n.attrs["name"] for n in nodes if n.op.name == "Input"}
    dims = {s.name: bindings[s.name] for s in symbols_of(nodes, [edge])}
    values: dict[int, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for node in nodes:
            if node.op.name == "Input":
                values[node.id] = round_to(
                    arrays[node.attrs["name"]].astype(numpy_compute(node.dtype)), node.dtype)
                continue
            args = [read_edge(values[e.node.id], e.views, dims) for e in node.srcs]
            values[node.id] = run_node(node, args, dims, np.float32)
    assert names <= set(arrays), names
    return read_edge(values[edge.node.id], edge.views, dims)
