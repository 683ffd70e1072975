"""Checking feeds and binding symbolic dims: shared by the reference interpreter and compiled programs.

A graph is built once with symbols; each run binds every symbol to an int, read off the fed arrays
(or given as `dims=`). Any disagreement is reported with the input and the dim at fault.
"""
from __future__ import annotations

import functools
import math
from typing import Mapping, Optional, Sequence

import numpy as np
import sympy

from ..errors import BindingError, FeedError
from ..ops.primitives import Edge, Node
from ..symbolic.dims import check_dim_values, evaluate_dim, evaluate_size, idiv, imod
from ..symbolic.view import View

EXACT_FLOAT_INTEGERS = 1 << 24  # float32 holds every integer up to here


def check_feed(node: Node, value) -> np.ndarray:
    name = node.attrs["name"]
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged nested lists, objects NumPy cannot hold
        raise FeedError(f"input {name!r}: the fed value is not a rectangular array ({exc})") from None
    if node.dtype in ("int32", "int64"):
        if array.dtype.kind not in "iub":
            raise FeedError(
                f"input {name!r} takes {node.dtype} values, but the fed array has dtype {array.dtype}"
            )
        if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
            raise FeedError(f"input {name!r}: values do not fit in int64")
        limits = np.iinfo(node.dtype)
        if array.size and (array.max() > limits.max or array.min() < limits.min):
            raise FeedError(f"input {name!r}: values do not fit in {node.dtype}")
        return np.ascontiguousarray(array, dtype=node.dtype).reshape(
            array.shape
        )  # (ascontiguousarray makes 0-D 1-D)
    if array.dtype.kind != "f" and array.dtype.name != "bfloat16":  # ml_dtypes' bfloat16 is welcome too
        raise FeedError(
            f"input {name!r} takes {node.dtype}, but the fed array has dtype {array.dtype} "
            f"(convert it with .astype(np.float32))"
        )
    return array


def bind_dims(inputs: list[Node], feeds: Mapping[str, object], dims: Optional[Mapping[str, int]] = None,
              symbols: Optional[set] = None) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Validated feeds by input name, and the value of every symbol they (and `dims`) determine.

    `symbols` (names) are the graph's symbolic dims: `dims=` may name only those."""
    if not isinstance(feeds, Mapping):
        raise FeedError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
    known = {n.attrs["name"] for n in inputs}
    unknown = sorted(set(feeds) - known, key=str)
    if unknown:
        raise FeedError(
            f"feed {unknown[0]!r} matches no input of this graph (its inputs are {sorted(known)})"
        )
    bindings = check_dim_values(dims, symbols)
    origin = {name: "dims=" for name in bindings}
    arrays: dict[str, np.ndarray] = {}
    later: list = []
    for node in inputs:
        name = node.attrs["name"]
        if name not in feeds:
            raise FeedError(f"input {name!r} was not fed (feeds given: {sorted(feeds, key=str)})")
        array = check_feed(node, feeds[name])
        shape = node.attrs["shape"]
        if array.ndim != len(shape):
            raise FeedError(
                f"input {name!r} expects {len(shape)} axes {tuple(map(str, shape))}, "
                f"got an array of shape {array.shape}"
            )
        for axis, (want, got) in enumerate(zip(shape, array.shape)):
            if isinstance(want, sympy.Symbol):
                sym = want.name
                if sym in bindings and bindings[sym] != got:
                    raise BindingError(
                        f"dimension {sym} is {bindings[sym]} from {origin[sym]} but {got} "
                        f"from axis {axis} of input {name!r}"
                    )
                bindings[sym], origin[sym] = got, f"input {name!r}"
            elif isinstance(want, sympy.Expr) and not want.is_Integer:
                later.append(
                    (name, axis, want, got, array.shape)
                )  # an expression: checked once its symbols are bound
            elif want != got:
                raise FeedError(
                    f"input {name!r} expects size {want} on axis {axis}, got an array of shape {array.shape}"
                )
        arrays[name] = array
    for (
        name,
        axis,
        want,
        got,
        shape,
    ) in later:  # (inputs a program makes itself: an SPMD stage's T + 1 values)
        if {s.name for s in want.free_symbols} - set(bindings) or evaluate_dim(want, bindings) != got:
            raise FeedError(
                f"input {name!r} expects size {want} on axis {axis}, got an array of shape {shape}"
            )
    _check_ranges(inputs, bindings, origin)
    return arrays, bindings


def _check_ranges(inputs: list[Node], bindings: Mapping[str, int], origin: Mapping[str, str]) -> None:
    """Every dim an input limits (its `ranges`: torch.export's Dim(min=, max=)) must be bound inside
    its range: the program was only promised those sizes, and a model's integer tensors may be exact
    only up to its max."""
    for node in inputs:
        for sym, lo, hi in node.attrs.get("ranges", ()):
            value = bindings.get(sym)
            if value is not None and (value < lo or (hi is not None and value > hi)):
                span = f"[{lo}, {hi}]" if hi is not None else f"[{lo}, inf)"
                raise BindingError(
                    f"dimension {sym} = {value} (from {origin[sym]}) is outside the range {span} "
                    f"that input {node.attrs['name']!r} allows"
                )


# --- the binding validator: what every backend checks before any launch -------------------------
def check_binding(nodes: Sequence[Node], outputs: Sequence[Edge], bindings: Mapping[str, int]) -> None:
    """Refuse a binding at which the graph has no meaning, with the error the reference gives.

    Views are built assuming that a slice or index of a symbolic axis lies inside it (x[:, 3] of a
    T axis), that windows fit their input and that shapes are non-negative. At a small binding
    (T = 0, 1, 2) that can fail; a kernel would then read outside its buffer and return garbage.
    So every view of every edge is checked at the binding: its shape is non-negative and the
    positions its unmasked elements reach lie inside the data below it. The reach of a strided view
    over a box of valid indices is attained at the box's corners, so the check is exact and costs
    nothing per element. Every floor division inside a dim must see a non-negative dividend, where
    C's `/` (which truncates) agrees with it.
    """
    key = tuple(sorted(bindings.items()))
    for node in nodes:
        _raise_if(_dims_problem(node.shape, key), node.label)
        if node.op.name == "Iota":
            _raise_if(
                _index_problem(node.attrs["shape"][node.attrs["axis"]], key),
                f"{node.label} (an arange or a random draw's counter)",
            )
        for edge in node.srcs:
            _raise_if(
                _edge_problem(edge.node.shape, edge.views, key), f"{node.label} reading {edge.node.label}"
            )
    for k, edge in enumerate(outputs):
        _raise_if(_edge_problem(edge.node.shape, edge.views, key), f"output {k} ({edge.node.label})")


def _raise_if(problem: Optional[str], what: str) -> None:
    if problem is not None:
        raise BindingError(f"{what}: {problem}")


# The same views over the same shapes recur across a graph, its compiled twin and the reference's
# run, so each (structure, binding) is judged once: the problem's text, or None.
@functools.lru_cache(maxsize=65536)
def _edge_problem(below_shape: tuple, views, key: tuple) -> Optional[str]:
    bindings = dict(key)
    below = evaluate_size(below_shape, bindings)
    for view in views.views:
        problem = _dims_problem(
            view.shape + view.strides + (view.offset,) + tuple(x for r in view.ranges() for x in r), key
        )
        if problem is not None:
            return problem
        shape = tuple(evaluate_dim(n, bindings) for n in view.shape)
        if any(n < 0 for n in shape):
            return (f"shape {_show(view.shape)} is {shape} at {show_binding(bindings)}; a slice of a "
                    f"symbolic axis is longer than the axis for these dims")
        reach = _reach(view, shape, bindings)
        if reach is not None and (reach[0] < 0 or reach[1] >= below):
            return (
                f"the view of shape {_show(view.shape)} reads positions {reach[0]}..{reach[1]} of the "
                f"{below} elements below it at {show_binding(bindings)}; "
                f"a slice or index of a symbolic axis is out of range for these dims"
            )
        below = math.prod(shape)
    return None


def _reach(view: View, shape: tuple[int, ...], bindings) -> Optional[tuple[int, int]]:
    """The lowest and highest position an unmasked element of `view` reads, or None if none is unmasked."""
    low = high = evaluate_dim(view.offset, bindings)
    for n, stride, (lo, hi) in zip(shape, view.strides, view.ranges()):
        first, last = max(evaluate_dim(lo, bindings), 0), min(evaluate_dim(hi, bindings), n) - 1
        if first > last:
            return None
        s = evaluate_dim(stride, bindings)
        low, high = low + min(s * first, s * last), high + max(s * first, s * last)
    return low, high


@functools.lru_cache(maxsize=65536)
def _dims_problem(dims: tuple, key: tuple) -> Optional[str]:
    bindings = dict(key)
    for d in dims:
        for dividend, divisor in _divisions(d):
            if evaluate_dim(dividend, bindings) < 0:
                return (
                    f"the size {d} divides {dividend} = {evaluate_dim(dividend, bindings)} by {divisor} "
                    f"at {show_binding(bindings)}; "
                    f"a window, slice or stride needs a larger input for these dims"
                )
    return None


@functools.lru_cache(maxsize=65536)
def _index_problem(extent, key: tuple) -> Optional[str]:
    """An index counted in float32 is exact below 2**24; past it, neighbouring indices (and random draws
    counted by them) would coincide."""
    n = evaluate_dim(extent, dict(key))
    if n > EXACT_FLOAT_INTEGERS:
        return (f"it counts {n:,} positions at {show_binding(dict(key))}, and float32 holds every index only "
                f"below 2**24 = {EXACT_FLOAT_INTEGERS:,}")
    return None


@functools.lru_cache(maxsize=65536)
def _divisions(d) -> tuple:
    """(dividend, divisor) of every idiv/imod inside a dim (none in an int)."""
    if isinstance(d, int):
        return ()
    return tuple(e.args for e in sympy.preorder_traversal(d) if isinstance(e, (idiv, imod)))


def _show(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def show_binding(bindings: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(bindings.items())) or "no dims"


# --- embedding ids --------------------------------------------------------------------------------
def check_ids(node: Node, ids: np.ndarray, bindings: Mapping[str, int]) -> None:
    """Gather ids must lie in [0, rows) of the table, on every backend (a GPU would read anywhere).
    A Scatter's must too, and be whole numbers and distinct: two writes to one row race on a GPU
    (PyTorch's index_copy leaves that result undefined), so refcomp refuses it everywhere."""
    rows = evaluate_dim(node.srcs[0].shape[0], bindings)
    if node.op.name == "Scatter":
        _check_scatter_ids(node, ids, rows)
        return
    if ids.size and (ids.min() < 0 or ids.max() >= rows):
        bad = ids[(ids < 0) | (ids >= rows)]
        raise FeedError(f"embedding ids from {node.srcs[1].node.label} must lie in [0, {rows}) (the rows of "
                        f"{node.srcs[0].node.label}), got {bad.size} outside, e.g. {bad.flat[0]}")


def _check_scatter_ids(node: Node, ids: np.ndarray, rows: int) -> None:
    where = f"the ids {node.srcs[1].node.label} of {node.label} (writing rows of {node.srcs[0].node.label})"
    ids = np.asarray(ids).reshape(-1)
    if ids.size and not np.all(np.isfinite(ids) & (ids == np.floor(ids))):
        raise FeedError(
            f"{where} must be whole numbers, got {ids[~(np.isfinite(ids) & (ids == np.floor(ids)))][0]}"
        )
    if ids.size and (ids.min() < 0 or ids.max() >= rows):
        bad = ids[(ids < 0) | (ids >= rows)]
        raise FeedError(f"{where} must lie in [0, {rows}), got {bad.size} outside, e.g. {bad.flat[0]:g}")
    values, counts = np.unique(ids, return_counts=True)
    if values.size != ids.size:
        raise FeedError(
            f"{where} must be distinct: id {values[counts > 1][0]:g} appears {counts[counts > 1][0]} times "
            f"(which write wins would depend on the device's schedule; PyTorch's index_copy leaves it "
            f"undefined, refcomp refuses it)"
        )
