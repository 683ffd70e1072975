"""ONNX slicing and indexing operators: Slice, Gather, Concat, Split, on static arrays and on tensors.

Like the other movement operators (onnx_ops_shape.py), each folds static arrays with NumPy and
moves tensors as refcomp views; starts, ends, axes, steps and split sizes must be static.
"""
from __future__ import annotations

import numpy as np

from ..ops.core import constant
from ..ops.joining import concat as rc_concat
from ..ops.nn import embedding
from ..symbolic.dims import dim, dims_equal, idiv, prod
from .onnx_ops_core import BOOL, FLOAT, INT_TYPES, Value, op, type_name
from .onnx_ops_shape import BIG, data_tensor, moved
from .onnx_positions import Positions, gather_elements_view, gather_rows, positions_of
from .onnx_positions import gather_elements as gather_elements_positions


# --- slicing and indexing ----------------------------------------------------------------------
def _slice_bounds(ctx, n, start, end, step):
    """An ONNX Slice on one axis of size n as a Python slice (for NumPy or refcomp indexing)."""
    if step == 0:
        raise ctx.error("steps must be non-zero")
    if isinstance(n, int) and isinstance(start, int) and isinstance(end, int):
        start = start + n if start < 0 else start
        end = end + n if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), n), min(max(end, 0), n)
            return slice(start, max(start, end), step)
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
        return slice(start, None if end < 0 else end, step)
    if step < 0:
        if isinstance(start, int) and (start >= BIG or start == -1) and isinstance(end, int) and end <= -BIG:
            return slice(None, None, step)
        raise ctx.error(
            f"a negative step on an axis of symbolic size {n} needs a full reversal (start=-1, end=-INT_MAX)"
        )

    def bound(b, default):
        if isinstance(b, int):
            if b >= BIG:
                return default
            if b < 0:
                return None if b <= -BIG else dim(n + b)
        return b
    return slice(bound(start, None), bound(end, None), step)


@op("Slice")
def slice_op(ctx):
    v = ctx.value(0)
    starts = ctx.static_ints(1, "starts (input 1)", symbolic=True)
    ends = ctx.static_ints(2, "ends (input 2)", symbolic=True)
    axes = ctx.optional_static_ints(3, "axes (input 3)") or list(range(len(starts)))
    steps = ctx.optional_static_ints(4, "steps (input 4)") or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    index = [slice(None)] * v.ndim
    for start, end, axis, step in zip(starts, ends, ctx.axes(axes, v.ndim), steps):
        index[axis] = _slice_bounds(ctx, v.shape[axis], start, end, step)
    symbolic = any(not isinstance(b, (int, type(None))) for s in index for b in (s.start, s.stop))
    if v.is_static and not symbolic:
        return Value(v.etype, static=v.static[tuple(index)])
    if v.is_static and v.etype in INT_TYPES:  # e.g. a buffer of position ids sliced to a symbolic length
        v = Value(v.etype, positions=positions_of(v.static))
        if v.positions is None:
            raise ctx.error(
                f"a static integer array sliced to a symbolic length is supported only where its values "
                f"are affine in their indices (an arange); bounds {index}"
            )
    if v.positions is not None:
        if any(s.step not in (None, 1) for s in index):
            raise ctx.error(f"positions (an integer arange) sliced with a step other than 1: {index}")
        starts = [s.start or 0 for s in index]
        shape = constant(0.0).broadcast_to(v.shape)[tuple(index)].shape
        offset = v.positions.offset + sum(a * step for a, step in zip(starts, v.positions.steps))
        return Value(v.etype, positions=Positions(tuple(shape), v.positions.steps, offset))
    return moved(v, data_tensor(ctx, v)[tuple(index)])


@op("Gather", attrs=("axis",))
def gather(ctx):
    data, ids = ctx.value(0), ctx.value(1)
    if data.ndim == 0:
        raise ctx.error("data (input 0) is a scalar; Gather needs an axis to index")
    axis = ctx.axis(ctx.int_attr("axis", 0), data.ndim)
    rows = data.shape[axis]
    if ids.etype not in INT_TYPES:
        raise ctx.error(f"indices must be integers, got {type_name(ids.etype)}")
    if data.is_static and ids.is_static:
        idx = ids.static.astype(np.int64)
        if not isinstance(rows, int):
            raise ctx.error(f"static data with a symbolic axis {rows}")
        if idx.size and (idx.min() < -rows or idx.max() >= rows):
            raise ctx.error(f"indices {idx.min()}..{idx.max()} are out of range for an axis of size {rows}")
        ctx.check_fold(data.shape[:axis] + idx.shape + data.shape[axis + 1:], data.static.dtype)
        return Value(data.etype, static=np.take(data.static, np.where(idx < 0, idx + rows, idx), axis=axis))
    if data.etype in INT_TYPES and data.tensor is None:
        raise ctx.error(
            f"gathering from static {type_name(data.etype)} data with run-time indices is not supported"
        )
    x = data_tensor(ctx, data)
    if ids.positions is not None:  # an arange's rows: a view
        return moved(data, gather_rows(x, axis, ids.positions))
    if ids.is_static and ids.static.ndim == 0 and ids.static.dtype != object:
        i = int(ids.static)
        if isinstance(rows, int) and not -rows <= i < rows:
            raise ctx.error(f"index {i} is out of range for an axis of size {rows}")
        index = [slice(None)] * x.ndim
        index[axis] = i
        return moved(data, x[tuple(index)])
    ids_t = ctx.importer.ids_tensor(ids, rows, ctx)
    others = [n for i, n in enumerate(x.shape) if i != axis]
    front = x.permute([axis] + [i for i in range(x.ndim) if i != axis]) if axis else x
    table = front.reshape((rows, prod(others)))
    picked = embedding(ids_t, table).reshape(tuple(ids_t.shape) + tuple(others))
    k = ids_t.ndim
    # (ids..., before..., after...) -> (before..., ids..., after...)
    order = list(range(k, k + axis)) + list(range(k)) + list(range(k + axis, k + len(others)))
    return Value(data.etype, tensor=picked.permute(order) if order != list(range(len(order))) else picked)


@op("GatherElements", attrs=("axis",))
def gather_elements(ctx):
    """out[.., j, ..] = data[.., indices[.., j, ..], ..] along `axis`. With static indices and a data
    tensor of concrete shape, each output element's flat position in the data is computed here, and
    the elements are rows of the flattened data picked by those positions (a Gather)."""
    data, ids = ctx.value(0), ctx.value(1)
    axis = ctx.axis(ctx.int_attr("axis", 0), max(data.ndim, 1))
    if ids.etype not in INT_TYPES or ids.ndim != data.ndim:
        raise ctx.error(
            f"indices must be integers of the data's rank {data.ndim}, got {type_name(ids.etype)} "
            f"of rank {ids.ndim}"
        )
    if ids.positions is not None or (
        ids.is_static and positions_of(ids.static) is not None and not data.is_static
    ):
        where = ids.positions or positions_of(
            ids.static
        )  # affine indices: the result is a view, or affine itself
        affine = data.positions or (positions_of(data.static) if data.is_static else None)
        if affine is not None:
            return Value(data.etype, positions=gather_elements_positions(affine, axis, where))
        return Value(data.etype, tensor=gather_elements_view(data_tensor(ctx, data), axis, where))
    idx = ctx.static(1, "indices (input 1)")
    if idx.dtype == object or not all(isinstance(n, int) for n in data.shape):
        raise ctx.error(f"needs concrete shapes (data {data.shape}, indices {idx.shape})")
    rows = data.shape[axis]
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < -rows or idx.max() >= rows):
        raise ctx.error(f"indices {idx.min()}..{idx.max()} are out of range for an axis of size {rows}")
    if any(i > n for i, n in zip(idx.shape, data.shape)):  # ONNX: indices may be smaller, not larger
        raise ctx.error(f"indices of shape {idx.shape} exceed the data's shape {data.shape}")
    idx = np.where(idx < 0, idx + rows, idx)
    if data.is_static:
        return Value(data.etype, static=np.take_along_axis(data.static, idx, axis=axis))
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    flat = np.ravel_multi_index(tuple(np.broadcast_arrays(*grid)), data.shape) if idx.size else idx
    table = data_tensor(ctx, data).reshape((prod(data.shape), 1))
    positions = ctx.importer.ids_tensor(
        Value(ids.etype, static=flat, name=ids.name or "positions"), prod(data.shape), ctx
    )
    return Value(data.etype, tensor=embedding(positions, table).reshape(tuple(idx.shape)))


@op("Concat", attrs=("axis",))
def concat_op(ctx):
    values = ctx.values()
    ndim = values[0].ndim
    if ndim == 0 or any(v.ndim != ndim for v in values):
        raise ctx.error(f"inputs of shapes {[v.shape for v in values]} must have one rank, at least 1")
    axis = ctx.axis(ctx.int_attr("axis"), ndim) if ctx.has_attr("axis") else None
    if axis is None:
        raise ctx.error("attribute 'axis' is required")
    if all(v.is_static for v in values):
        arrays = [v.static for v in values]
        ctx.check_fold(
            [sum(a.shape[axis] for a in arrays) if i == axis else n for i, n in enumerate(arrays[0].shape)],
            arrays[0].dtype,
        )
        try:
            out = np.concatenate(arrays, axis=axis)
        except ValueError:
            raise ctx.error(
                f"static inputs of shapes {[a.shape for a in arrays]} do not concatenate on axis {axis}"
            ) from None
        if out.dtype == object and all(isinstance(x, (int, np.integer)) for x in out.reshape(-1)):
            out = out.astype(np.int64)
        return Value(values[0].etype, static=out)
    etype = values[0].etype
    if any(v.etype != etype for v in values):
        raise ctx.error(f"inputs mix element types {[type_name(v.etype) for v in values]}")
    tensors = [ctx.as_tensor(v, f"input {k}", (FLOAT, BOOL)) for k, v in enumerate(values)]
    parts = [t for t in tensors if not (isinstance(t.shape[axis], int) and t.shape[axis] == 0)] or tensors[:1]
    return Value(etype, tensor=parts[0] if len(parts) == 1 else rc_concat(parts, axis))


@op("Split", attrs=("axis", "num_outputs"))
def split(ctx):
    v = ctx.value(0)
    if v.ndim == 0:
        raise ctx.error("input 0 is a scalar; Split needs an axis to split")
    axis = ctx.axis(ctx.int_attr("axis", 0), v.ndim)
    n = v.shape[axis]
    k = len(ctx.node.output)
    if ctx.has(1):
        sizes = ctx.static_ints(1, "split (input 1)", symbolic=True)
    elif ctx.has_attr("num_outputs"):
        k = ctx.int_attr("num_outputs")
        if k < 1:
            raise ctx.attr_error("num_outputs", k, "it must be at least 1")
        if not isinstance(n, int):
            raise ctx.error(f"num_outputs with an axis of symbolic size {n}")
        chunk = -(-n // k)
        sizes = [chunk] * (k - 1) + [n - chunk * (k - 1)]
    else:
        if isinstance(n, int) and n % k:
            raise ctx.error(f"axis {axis} of size {n} does not split evenly into {k} outputs")
        sizes = [dim(idiv(n, k)) if not isinstance(n, int) else n // k] * k
    if len(sizes) != len(ctx.node.output):
        raise ctx.error(f"{len(sizes)} split sizes for {len(ctx.node.output)} outputs")
    if not dims_equal(dim(sum(sizes)), n):
        raise ctx.error(f"split sizes {sizes} do not add up to axis {axis} of size {n}")
    outs, start = [], 0
    for size in sizes:
        index = [slice(None)] * v.ndim
        index[axis] = slice(start, dim(start + size))
        outs.append(Value(v.etype, static=v.static[tuple(index)]) if v.is_static else
                    moved(v, data_tensor(ctx, v)[tuple(index)]))
        start = dim(start + size)
    return outs
