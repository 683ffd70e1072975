"""Tensors made from a shape alone, with PyTorch's names: zeros, ones, full, eye, linspace, arange, and
the `_like` forms. Each is a broadcast Constant or Iota arithmetic, so a symbolic size costs nothing.

`dtype=` as PyTorch takes it: a float type rounds the values to it (a Cast), bool flags them as
booleans (0/1), and an integer type makes exact integers (int64 Constants and Iotas, an int32 Cast).
Without `dtype=`, refcomp's creations are float32 (PyTorch's arange of ints is int64: pass dtype).
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np
import sympy

from ..errors import ShapeError
from ..symbolic.dims import dim, idiv
from .core import constant, iota, is_bool_dtype, is_boolean, lift
from .elementwise import where
from .provenance import user_op


def size_of(args) -> tuple:
    """zeros(2, 3), zeros((2, 3)) and zeros([2, "B"]) alike."""
    shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    return tuple(dim(n) for n in shape)


def is_integer_dtype(dtype) -> bool:
    """int32, int64 (torch.long), NumPy's integer types."""
    name = str(getattr(dtype, "__name__", dtype)).replace("torch.", "")
    if name in ("long", "int", "short"):
        return True
    try:
        return np.dtype(name).kind in "iu"
    except TypeError:
        return False


def _typed(t, dtype):
    """`t` as PyTorch's dtype= asks (see the module docstring)."""
    if dtype is None:
        return t
    return t.bool() if is_bool_dtype(dtype) else t.to(dtype)


@user_op
def full(size: Sequence, fill_value, *, dtype=None):
    """A broadcast constant; a bool fill_value makes a boolean tensor (PyTorch's dtype for it), an integer
    dtype truncates the value toward zero, as PyTorch does."""
    if not isinstance(fill_value, numbers.Real):
        raise ShapeError(f"full: fill_value must be a number, got {fill_value!r}")
    if is_integer_dtype(dtype):
        if not math.isfinite(float(fill_value)):
            raise ShapeError(f"full: {fill_value} is not a value of the integer dtype {dtype}")
        fill_value = math.trunc(fill_value)
    shape = size_of((size,))
    value = integer(fill_value) if is_integer_dtype(dtype) else constant(float(fill_value))
    out = value.reshape((1,) * len(shape)).broadcast_to(shape) if shape else value
    return _typed(out, "bool" if dtype is None and isinstance(fill_value, bool) else dtype)


@user_op
def zeros(*size, dtype=None):
    return full(size_of(size), 0.0, dtype=dtype)


@user_op
def ones(*size, dtype=None):
    return full(size_of(size), 1.0, dtype=dtype)


def _like_dtype(t, dtype):
    """PyTorch's `_like` functions keep the tensor's dtype unless told otherwise."""
    return dtype if dtype is not None else "bool" if is_boolean(t) else t.dtype


@user_op
def full_like(input, fill_value, *, dtype=None):
    t = lift(input)
    return full(t.shape, fill_value, dtype=_like_dtype(t, dtype))


@user_op
def zeros_like(input, *, dtype=None):
    t = lift(input)
    return full(t.shape, 0.0, dtype=_like_dtype(t, dtype))


@user_op
def ones_like(input, *, dtype=None):
    t = lift(input)
    return full(t.shape, 1.0, dtype=_like_dtype(t, dtype))


@user_op
def eye(n, m=None, *, dtype=None):
    """The identity (n x m, m defaulting to n): 1.0 where row == column."""
    shape = (dim(n), dim(n if m is None else m))
    return _typed(iota(shape, 0).eq(iota(shape, 1)).float(), dtype)


@user_op
def linspace(start: float, end: float, steps: int, *, dtype=None):
    """`steps` values from start to end, computed as PyTorch does: from the start for the first half,
    back from the end for the second, so both ends are exact."""
    if not isinstance(steps, numbers.Integral) or steps < 0:
        raise ShapeError(f"linspace: steps must be a non-negative int, got {steps!r}")
    if steps <= 1:
        return full((steps,), float(start), dtype=dtype)
    step = (float(end) - float(start)) / (steps - 1)
    i = iota((steps,), 0)
    return _typed(
        where(i < steps // 2, float(start) + i * step, float(end) - (float(steps - 1) - i) * step), dtype
    )


def _symbolic(v) -> bool:
    return isinstance(v, (str, sympy.Expr))


@user_op
def arange(start=0, end=None, step=1, *, dtype=None):
    """rc.arange(end) or rc.arange(start, end, step): start, start + step, ... below end (ints, or floats
    as torch.arange takes them: ceil((end - start) / step) values, each start + i * step). Ends may be
    symbolic dims (`rc.arange(0, T)`) with an integer step."""
    if end is None:
        start, end = 0, start
    args = (start, end, step)
    if any(_symbolic(v) for v in args):
        if (
            not all(_symbolic(v) or isinstance(v, numbers.Integral) for v in args)
            or _symbolic(step)
            or step == 0
        ):
            raise ShapeError(
                f"arange{args}: with symbolic ends, start and end must be ints or dims "
                f"and step a non-zero int"
            )
        start, end = dim(start), dim(end)
        span = dim(end - start) if step > 0 else dim(start - end)
        count = span if abs(step) == 1 else idiv(span + abs(step) - 1, abs(step))  # ceil(span / |step|)
        return _typed(_ramp(count, start, step, is_integer_dtype(dtype)), dtype)
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in args) or step == 0:
        raise ShapeError(f"arange{args}: start, end and step must be numbers, step non-zero")
    if not (math.isfinite(start) and math.isfinite(end)) or math.isnan(step):  # as PyTorch
        raise ShapeError(f"arange{args}: start and end must be finite, and step a number (not NaN)")
    if is_integer_dtype(dtype) and not all(isinstance(v, numbers.Integral) for v in args):
        raise ShapeError(f"arange{args}: an integer dtype needs integer start, end and step here")
    if all(isinstance(v, numbers.Integral) for v in args):
        count = max(len(range(start, end, step)), 0)  # NumPy's arange(-1) is empty (PyTorch refuses it)
        return _typed(_ramp(count, start, step, is_integer_dtype(dtype)), dtype)
    count = max(math.ceil((float(end) - float(start)) / float(step)), 0)
    return _typed(iota((count,), 0) * float(step) + float(start), dtype)


def _ramp(count, start, step: int, exact: bool = False):
    """start + i * step for i < count, from an Iota (start and count may be dims); `exact`: int64."""
    out = iota((count,), 0, "int64" if exact else "float32")
    out = out if step == 1 else out * (step if exact else float(step))
    return out if isinstance(start, int) and start == 0 else out + lift(start, like=out)


def integer(value):
    """An int64 scalar Constant holding `value` exactly."""
    return lift(int(value), like=iota((1,), 0, "int64"))
