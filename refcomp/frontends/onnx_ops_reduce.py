"""ONNX reductions (the Reduce* family) and Softmax / LogSoftmax.

refcomp's primitive reductions are SumReduce and MaxReduce over one axis; the ONNX forms are chains of
them with keepdims as a reshape. ReduceProd has no primitive: it is `Tensor.prod`, a tree of Mul
over halves of each axis, whose length must be concrete. Integer reductions of static arrays fold with NumPy.
"""
from __future__ import annotations

import numpy as np

from ..ops.core import computed_in_float32
from ..ops.tensor import Tensor, constant
from .onnx_ops_core import BOOL, FLOAT, INT64, Value, float_value, is_int_array, op, static_value
from .onnx_ops_math import FLT_MAX, fold_result


# --- reductions ----------------------------------------------------------------------------------
def _reduce_axes(ctx, ndim: int):
    """(axes, keepdims) from the attribute (older opsets) or input 1; None means "no-op"."""
    keepdims = ctx.int_attr("keepdims", 1)
    noop = ctx.int_attr("noop_with_empty_axes", 0)
    if ctx.has_attr("axes"):
        axes = ctx.ints_attr("axes")
    elif ctx.has(1):
        axes = ctx.static_ints(1, "axes (input 1)")
    else:
        axes = []
    if not axes:
        return (None if noop else list(range(ndim))), keepdims
    if ndim == 0:
        raise ctx.error(f"axes {axes} given for a scalar input, which has none")
    return ctx.axes(axes, ndim), keepdims


def _keep(out: Tensor, shape, axes, keepdims) -> Tensor:
    if keepdims:
        return out.reshape(tuple(1 if i in axes else n for i, n in enumerate(shape)))
    return out


REDUCE_NUMPY = {"ReduceSum": np.sum, "ReduceProd": np.prod, "ReduceMax": np.max, "ReduceMin": np.min}


@op("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", attrs=("axes", "keepdims", "noop_with_empty_axes"))
def reduce(ctx):
    v = ctx.value(0)
    axes, keepdims = _reduce_axes(ctx, v.ndim)
    if v.is_static and is_int_array(v.static) and ctx.op_type in REDUCE_NUMPY:
        if axes is None:
            return v
        if ctx.op_type in ("ReduceMax", "ReduceMin") and any(v.shape[a] == 0 for a in axes):
            raise ctx.error(
                f"{ctx.op_type} of static integers over an empty axis of shape {v.shape} has no value"
            )
        return fold_result(
            REDUCE_NUMPY[ctx.op_type](v.static, axis=tuple(axes), keepdims=bool(keepdims)), v.static
        )
    x = ctx.tensor(0, (FLOAT, BOOL) if ctx.op_type in ("ReduceMax", "ReduceMin") else (FLOAT,))
    if axes is None:
        return Value(v.etype, tensor=x)
    shape, kind = x.shape, ctx.op_type
    if kind in ("ReduceMax", "ReduceMin"):
        out = x.amax(axes) if kind == "ReduceMax" else x.amin(axes)
        if v.etype == BOOL:  # the max of no booleans is False, the min True
            out = out.clip(0.0, 1.0)
        return Value(v.etype, tensor=_keep(out, shape, axes, keepdims))
    return float_value(_keep(_reduced(x, kind, tuple(axes)), shape, axes, keepdims))


# a composite: a 16-bit x accumulates in float32 and rounds once, as ReduceMean in PyTorch
@computed_in_float32
def _reduced(x: Tensor, kind: str, axes: tuple) -> Tensor:
    """The float reductions over `axes`, without keepdims."""
    if kind == "ReduceProd":
        out = x
        for a in sorted(axes, reverse=True):
            out = out.prod(a)
        return out
    if kind == "ReduceLogSumExp":
        m = x.amax(axes, keepdims=True).clip(-FLT_MAX, FLT_MAX)
        out = (x - m).exp().sum(axes, keepdims=True).log() + m
        return out.reshape(tuple(n for i, n in enumerate(x.shape) if i not in axes))
    terms = {"ReduceSum": x, "ReduceMean": x, "ReduceL1": None, "ReduceL2": x * x, "ReduceLogSum": x,
             "ReduceSumSquare": x * x}[kind]
    if kind == "ReduceL1":
        terms = x.abs()
    out = terms.sum(axes)
    if kind == "ReduceMean":
        count = 1
        for a in axes:
            count = count * x.shape[a]
        if isinstance(count, int):
            out = out * (1.0 / count if count else float("nan"))
        else:
            out = out * (1 / constant(count))
    elif kind == "ReduceL2":
        out = out.sqrt()
    elif kind == "ReduceLogSum":
        out = out.log()
    return out


@op("Softmax", "LogSoftmax", attrs=("axis",))
def softmax(ctx):
    x = ctx.tensor(0)
    axis = ctx.axis(ctx.int_attr("axis", -1), x.ndim)
    if x.ndim == 0:
        raise ctx.error("input must have at least one axis")
    return float_value(x.softmax(axis) if ctx.op_type == "Softmax" else x.log_softmax(axis))


@op("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def arg_extreme(ctx):
    """The index of the first (or, with select_last_index, the last) extreme along the axis: an INT64
    tensor held exactly as float32 (Tensor.argmax's indices), or folded for a static input."""
    v = ctx.value(0)
    axis = ctx.axis(ctx.int_attr("axis", 0), max(v.ndim, 1))
    keepdims, last = bool(ctx.int_attr("keepdims", 1)), bool(ctx.int_attr("select_last_index", 0))
    if v.is_static and v.static.dtype != object:
        data = np.flip(v.static, axis) if last else v.static
        index = (np.argmax if ctx.op_type == "ArgMax" else np.argmin)(data, axis=axis)
        index = data.shape[axis] - 1 - index if last else index
        return static_value(np.expand_dims(index, axis) if keepdims else index, INT64)
    x = ctx.tensor(0)
    data = x.flip(axis) if last else x
    index = (data.argmax if ctx.op_type == "ArgMax" else data.argmin)(axis, keepdims)
    if last:  # the position counted back from the end of the flipped axis
        index = index * -1.0 + (x.shape[axis] - 1)
    return Value(INT64, tensor=index)
