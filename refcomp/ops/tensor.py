"""The Tensor users hold: the core (`core.TensorCore`) joined with the method mixins.

Arithmetic creates primitive nodes; movement creates new views of the same node. Each mixin builds
its methods only from the primitives in `primitives.OPS` and the core's builders.
"""
from __future__ import annotations

from .core import DTYPES, TensorCore, broadcast, broadcast_shape, constant, format_shape, input, iota, lift
from .elementwise import ElementwiseMixin
from .movement import MovementMixin
from .reductions import ReductionMixin
from .special import SpecialMixin

__all__ = ["Tensor", "DTYPES", "broadcast", "broadcast_shape", "constant", "format_shape", "input", "iota", "lift"]


class Tensor(MovementMixin, ElementwiseMixin, SpecialMixin, ReductionMixin, TensorCore):
    __slots__ = ("edge",)
    __array_priority__ = 1000  # so `ndarray + Tensor` defers to Tensor.__radd__


TensorCore.full = Tensor
