"""ONNX shape and movement operators: Constant, Shape, Reshape, Pad, Expand, Tile, ... (slicing,
indexing and concatenation: onnx_ops_index.py)

Each works on static arrays (folded with NumPy, exactly: these ops only move values) and on tensors
(refcomp views). Shape-like inputs (a Reshape's shape, Slice's starts/ends/axes/steps, Pad's pads,
Expand's shape, Tile's repeats, Split's sizes, axes) must be static; a symbolic dim folded from a
Shape op stays a SymPy expression, so exported `Shape -> Gather -> Concat -> Reshape` chains work
on symbolic batch sizes.
"""
from __future__ import annotations

import math

import numpy as np

from ..ops.creation import arange
from ..ops.tensor import Tensor, constant
from ..symbolic.dims import dim, dims_equal, prod
from .onnx_ops_core import (
    BOOL,
    FLOAT,
    INT64,
    INT_TYPES,
    Value,
    as_dim,
    float_value,
    is_int_array,
    op,
    read_tensor,
    static_value,
)
from .onnx_positions import Positions, positions_of

BIG = 2 ** 31 - 1  # Slice bounds at or past this mean "to the end"


def moved(v: Value, t: Tensor) -> Value:
    return Value(v.etype, tensor=t, graph_input=v.graph_input)


def data_tensor(ctx, v: Value, what: str = "input 0 (data)", compute: bool = False) -> Tensor:
    """The data of a movement op as a tensor; int ids may only be moved, not computed on."""
    if v.tensor is not None and not compute:
        return v.tensor
    return ctx.as_tensor(v, what, (FLOAT, BOOL))


def shape_array(shape) -> np.ndarray:
    dims = [as_dim(n) for n in shape]
    if all(isinstance(n, int) for n in dims):
        return np.array(dims, dtype=np.int64)
    return np.array(dims, dtype=object)


def concrete(shape) -> bool:
    return all(isinstance(n, int) for n in shape)


# --- constants -------------------------------------------------------------------------------------
@op("Constant", attrs=("value", "value_float", "value_floats", "value_int", "value_ints", "sparse_value",
                       "value_string", "value_strings"))
def constant_op(ctx):
    (a,) = ctx.node.attribute if len(ctx.node.attribute) == 1 else (None,)
    if a is None:
        raise ctx.error("needs exactly one value attribute")
    if a.name == "value":
        return static_value(read_tensor(a.t, "attribute 'value'"), a.t.data_type)
    if a.name == "value_float":
        return static_value(np.array(a.f, dtype=np.float32), FLOAT)
    if a.name == "value_floats":
        return static_value(np.array(list(a.floats), dtype=np.float32), FLOAT)
    if a.name == "value_int":
        return static_value(np.array(a.i, dtype=np.int64), INT64)
    if a.name == "value_ints":
        return static_value(np.array(list(a.ints), dtype=np.int64), INT64)
    raise ctx.attr_error(a.name, "...", "string and sparse constants are not supported")


@op("ConstantOfShape", attrs=("value",))
def constant_of_shape(ctx):
    shape = ctx.static_ints(0, "shape (input 0)", symbolic=True)
    value = ctx.attr("value")
    fill = (
        read_tensor(value, "attribute 'value'").reshape(-1) if value is not None else np.zeros(1, np.float32)
    )
    etype = value.data_type if value is not None else FLOAT
    if fill.size != 1:
        raise ctx.attr_error("value", fill.tolist(), "it must hold one element")
    if any(isinstance(n, int) and n < 0 for n in shape):
        raise ctx.error(f"shape (input 0) = {shape} has a negative dimension")
    if concrete(shape):
        return static_value(
            np.full(ctx.check_fold(shape, fill.dtype, "the constant"), fill[0], dtype=fill.dtype), etype
        )
    if etype not in (FLOAT, BOOL):  # a constant integer tensor is affine in its indices, with every step 0
        return Value(etype, positions=Positions(tuple(shape), (0,) * len(shape), int(fill[0])))
    return Value(etype, tensor=constant(float(fill[0])).reshape((1,) * len(shape)).broadcast_to(shape))


@op("Range")
def range_op(ctx):
    names = ("start", "limit", "delta")
    arrays = [ctx.static(i, f"{names[i]} (input {i})") for i in range(3)]
    if any(a.size != 1 for a in arrays):
        raise ctx.error(f"start, limit and delta must be scalars, got {[a.tolist() for a in arrays]}")
    if any(a.dtype == object for a in arrays):  # a symbolic bound: positions, kept symbolic
        start, limit, delta = (as_dim(a.reshape(-1)[0]) for a in arrays)
        if delta not in (1, -1):
            raise ctx.error(
                f"a range with the symbolic bounds {start}..{limit} needs a step of 1 or -1, got {delta}"
            )
        return Value(
            ctx.value(0).etype, positions=Positions.arange(dim((limit - start) * delta), start, delta)
        )
    start, limit, delta = (a.reshape(-1)[0] for a in arrays)
    if delta == 0:
        raise ctx.error("delta must be non-zero")
    if all(is_int_array(a) for a in arrays):
        start, limit, delta = int(start), int(limit), int(delta)
        ctx.check_fold(
            [max(-((start - limit) // delta), 0)], arrays[0].dtype, "the range"
        )  # ceil((limit - start) / delta)
        return static_value(np.arange(start, limit, delta, dtype=arrays[0].dtype), ctx.value(0).etype)
    start, limit, delta = float(start), float(limit), float(delta)
    if not all(map(math.isfinite, (start, limit, delta))):
        raise ctx.error(f"start {start}, limit {limit} and delta {delta} must be finite")
    count = max(math.ceil((limit - start) / delta), 0)
    if count > np.iinfo(np.int64).max:
        raise ctx.error(
            f"the range from {start} to {limit} by {delta} has {count} elements, more than a dimension holds"
        )
    return float_value(arange(count) * delta + start)


@op("Shape", attrs=("start", "end"))
def shape_op(ctx):
    shape = ctx.value(0).shape
    n = len(shape)
    start, end = ctx.int_attr("start", 0), ctx.int_attr("end", n)
    start, end = (min(max(s + n if s < 0 else s, 0), n) for s in (start, end))
    return static_value(shape_array(shape[start:end]), INT64)


@op("Size")
def size_op(ctx):
    return static_value(shape_array([prod(ctx.value(0).shape)]).reshape(()), INT64)


@op("Identity")
def identity(ctx):
    return ctx.value(0)


@op("Dropout", attrs=("seed",))
def dropout(ctx):
    v = ctx.value(0)
    if ctx.has(2):
        training = ctx.static(2, "training_mode (input 2)")
        if training.size != 1:
            raise ctx.error(f"training_mode (input 2) must be a scalar, got shape {training.shape}")
        if training.reshape(-1)[0]:
            raise ctx.error("training_mode=True is not supported (refcomp imports inference graphs)")
    mask = None
    if ctx.wants_output(1):
        if v.is_static:
            mask = static_value(np.ones(v.shape, dtype=bool), BOOL)
        else:
            mask = Value(
                BOOL,
                tensor=constant(1.0).reshape((1,) * v.ndim).broadcast_to(v.shape)
                if v.ndim
                else constant(1.0),
            )
    return [v, mask]


# --- reshaping --------------------------------------------------------------------------------------
def _reshape(ctx, v: Value, shape) -> Value:
    if v.positions is not None:
        moved_positions = v.positions.reshaped(shape)
        if moved_positions is None:
            raise ctx.error(
                f"positions (an integer tensor computed from Range) of shape {v.shape} reshaped to "
                f"{tuple(shape)}: only size-1 axes may be added or removed"
            )
        return Value(v.etype, positions=moved_positions)
    if v.is_static:
        if not concrete(shape):
            raise ctx.error(f"cannot reshape a static array to the symbolic shape {shape}")
        try:
            return Value(v.etype, static=v.static.reshape(shape))
        except ValueError:
            raise ctx.error(f"cannot reshape a static array of shape {v.shape} to {shape}") from None
    return moved(v, data_tensor(ctx, v).reshape(tuple(shape)))


@op("Reshape", attrs=("allowzero",))
def reshape(ctx):
    v = ctx.value(0)
    target = ctx.static_ints(1, "shape (input 1)", symbolic=True)
    allowzero = ctx.int_attr("allowzero", 0)
    shape = []
    for i, n in enumerate(target):
        if isinstance(n, int) and n == 0 and not allowzero:
            if i >= v.ndim:
                raise ctx.error(f"shape {target} copies axis {i} (a 0), but the input has rank {v.ndim}")
            shape.append(v.shape[i])
        else:
            shape.append(n)
    return _reshape(ctx, v, shape)


@op("Flatten", attrs=("axis",))
def flatten(ctx):
    v = ctx.value(0)
    axis = ctx.int_attr("axis", 1)
    if not -v.ndim <= axis <= v.ndim:
        raise ctx.error(f"axis {axis} is out of range for rank {v.ndim}")
    if axis < 0:
        axis += v.ndim
    return _reshape(ctx, v, [prod(v.shape[:axis]), prod(v.shape[axis:])])


def _axes_input(ctx, i: int, attr: str = "axes"):
    if ctx.has_attr(attr):
        return ctx.ints_attr(attr)
    return ctx.optional_static_ints(i, f"axes (input {i})")


@op("Squeeze", attrs=("axes",))
def squeeze(ctx):
    v = ctx.value(0)
    axes = _axes_input(ctx, 1)
    if axes is None:
        axes = [i for i, n in enumerate(v.shape) if isinstance(n, int) and n == 1]
    axes = ctx.axes(axes, v.ndim)
    for a in axes:
        if not dims_equal(v.shape[a], 1):
            raise ctx.error(f"axis {a} has size {v.shape[a]}, not 1")
    return _reshape(ctx, v, [n for i, n in enumerate(v.shape) if i not in axes])


@op("Unsqueeze", attrs=("axes",))
def unsqueeze(ctx):
    v = ctx.value(0)
    axes = _axes_input(ctx, 1)
    if axes is None:
        raise ctx.error("axes (input 1) is required")
    rank = v.ndim + len(axes)
    axes = ctx.axes(axes, rank)
    rest = iter(v.shape)
    return _reshape(ctx, v, [1 if i in axes else next(rest) for i in range(rank)])


@op("Transpose", attrs=("perm",))
def transpose(ctx):
    v = ctx.value(0)
    perm = ctx.ints_attr("perm", list(reversed(range(v.ndim))))
    if sorted(ctx.axes(perm, v.ndim, "perm")) != list(range(v.ndim)):
        raise ctx.attr_error("perm", perm, f"not a permutation of {v.ndim} axes")
    perm = [p % v.ndim for p in perm]
    if v.is_static:
        return Value(v.etype, static=np.transpose(v.static, perm))
    if v.positions is not None:
        return Value(v.etype, positions=v.positions.permuted(perm))
    return moved(v, data_tensor(ctx, v).permute(perm))


# --- padding, expanding, tiling ---------------------------------------------------------------------
@op("Pad", attrs=("mode",))
def pad(ctx):
    v = ctx.value(0)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.attr_error("mode", mode, "use constant, reflect, edge or wrap")
    pads = ctx.static_ints(1, "pads (input 1)")
    axes = ctx.axes(ctx.optional_static_ints(3, "axes (input 3)") or list(range(v.ndim)), v.ndim)
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} needs 2 values per padded axis ({len(axes)} axes)")
    widths = [(0, 0)] * v.ndim
    for k, a in enumerate(axes):
        widths[a] = (pads[k], pads[len(axes) + k])
    value_v = ctx.value(2) if ctx.has(2) and mode == "constant" else None
    crop = [slice(max(0, -b) or None, (-max(0, -e)) or None) for b, e in widths]
    grow = [(max(0, b), max(0, e)) for b, e in widths]
    if v.is_static and (value_v is None or value_v.is_static):
        data = v.static[tuple(crop)]
        ctx.check_fold([n + b + e for n, (b, e) in zip(data.shape, grow)], data.dtype)
        if mode == "constant":
            fill = value_v.static.reshape(-1)[0] if value_v is not None and value_v.static.size else 0
            return Value(v.etype, static=np.pad(data, grow, mode="constant", constant_values=fill))
        return Value(v.etype, static=np.pad(data, grow, mode=mode))
    nonzero_fill = value_v is not None and not (
        value_v.is_static and not value_v.static.reshape(-1)[:1].any()
    )
    t = data_tensor(ctx, v, compute=mode != "constant" or nonzero_fill)[tuple(crop)]
    if mode != "constant":  # the op library's border modes (Tensor.pad)
        return moved(v, t.pad(grow, mode=mode))
    out = t.pad(grow)
    if value_v is not None and any(b or e for b, e in grow):
        if value_v.is_static and value_v.static.size:
            fill = float(value_v.static.reshape(-1)[0])
            border = 1.0 - constant(1.0).broadcast_to(t.shape).pad(grow)
            if np.isnan(fill):
                out = out + (1.0 - border).log2() * 0.0  # NaN on the border, 0 inside
            elif np.isinf(fill):
                out = out + (1.0 - border).log2() * (
                    -1.0 if fill > 0 else 1.0
                )  # +-inf on the border, 0 inside
            elif fill != 0.0:
                out = out + border * fill
        elif not value_v.is_static:
            border = 1.0 - constant(1.0).broadcast_to(t.shape).pad(grow)
            out = out + border * ctx.as_tensor(value_v, "constant_value (input 2)").reshape(())
    return moved(v, out)


def broadcast_shapes(ctx, a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if dims_equal(x, y) or dims_equal(y, 1):
            out.append(x)
        elif dims_equal(x, 1):
            out.append(y)
        else:
            raise ctx.error(f"shapes {a} and {b} do not broadcast")
    return tuple(out)


@op("Expand")
def expand(ctx):
    v = ctx.value(0)
    shape = broadcast_shapes(ctx, v.shape, ctx.static_ints(1, "shape (input 1)", symbolic=True))
    if v.is_static and concrete(shape):
        return Value(v.etype, static=np.broadcast_to(v.static, ctx.check_fold(shape, v.static.dtype)).copy())
    if v.is_static and v.etype in INT_TYPES and positions_of(v.static) is not None:  # to a symbolic shape
        v = Value(v.etype, positions=positions_of(v.static))
    if v.positions is not None:
        return Value(v.etype, positions=v.positions.expanded(shape))
    return moved(v, data_tensor(ctx, v).broadcast_to(shape))


@op("Tile")
def tile(ctx):
    v = ctx.value(0)
    repeats = ctx.static_ints(1, "repeats (input 1)")
    if len(repeats) != v.ndim or any(r < 0 for r in repeats):
        raise ctx.error(f"repeats {repeats} must give a non-negative count for each of the {v.ndim} axes")
    if v.is_static:
        ctx.check_fold([r * n for r, n in zip(repeats, v.shape)], v.static.dtype)
        return Value(v.etype, static=np.tile(v.static, repeats))
    t = data_tensor(ctx, v)
    interleaved = tuple(x for n in t.shape for x in (1, n))
    expanded = tuple(x for r, n in zip(repeats, t.shape) for x in (r, n))
    out = (
        t.reshape(interleaved)
        .broadcast_to(expanded)
        .reshape(tuple(dim(r * n) for r, n in zip(repeats, t.shape)))
    )
    return moved(v, out)

