"""Tensors made from a shape alone, with PyTorch's names: zeros, ones, full, eye, linspace, and the
`_like` forms. Each is a broadcast Constant or Iota arithmetic, so a symbolic size costs nothing."""
from __future__ import annotations

import numbers
from typing import Sequence

from ..errors import ShapeError
from ..symbolic.dims import dim
from .core import constant, iota, lift
from .elementwise import where
from .provenance import user_op


def _size(args) -> tuple:
    """zeros(2, 3), zeros((2, 3)) and zeros([2, "B"]) alike."""
    shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    return tuple(dim(n) for n in shape)


@user_op
def full(size: Sequence, fill_value: float):
    shape = _size((size,))
    value = constant(float(fill_value))
    return value.reshape((1,) * len(shape)).broadcast_to(shape) if shape else value


@user_op
def zeros(*size):
    return full(_size(size), 0.0)


@user_op
def ones(*size):
    return full(_size(size), 1.0)


@user_op
def full_like(t, fill_value: float):
    return full(lift(t).shape, fill_value)


@user_op
def zeros_like(t):
    return full(lift(t).shape, 0.0)


@user_op
def ones_like(t):
    return full(lift(t).shape, 1.0)


@user_op
def eye(n, m=None):
    """The identity (n x m, m defaulting to n): 1.0 where row == column."""
    shape = (dim(n), dim(n if m is None else m))
    return iota(shape, 0).eq(iota(shape, 1))


@user_op
def linspace(start: float, end: float, steps: int):
    """`steps` values from start to end, computed as PyTorch does: from the start for the first half,
    back from the end for the second, so both ends are exact."""
    if not isinstance(steps, numbers.Integral) or steps < 0:
        raise ShapeError(f"linspace: steps must be a non-negative int, got {steps!r}")
    if steps <= 1:
        return full((steps,), float(start))
    step = (float(end) - float(start)) / (steps - 1)
    i = iota((steps,), 0)
    return where(i < steps // 2, float(start) + i * step, float(end) - (float(steps - 1) - i) * step)
