"""PyTorch's other names for Tensor methods refcomp has (`absolute` is `abs`, `greater` is `gt`, ...),
from one table, and a few methods PyTorch defines in terms of others (`square`, `expand_as`, `unbind`,
`addcmul`, `fmax`, `nanmean`, `diff`, ...), each as PyTorch writes it."""
from __future__ import annotations

import math

from ..errors import ShapeError
from .core import FLOAT_DTYPES, is_boolean, lift
from .elementwise import where

# PyTorch's name -> the method of the same meaning
ALIASES = {
    "absolute": "abs", "arccos": "acos", "arccosh": "acosh", "arcsin": "asin", "arcsinh": "asinh",
    "arctan": "atan", "arctanh": "atanh", "divide": "div", "multiply": "mul", "subtract": "sub",
    "negative": "neg", "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
    "not_equal": "ne", "ndimension": "dim", "nelement": "numel", "sgn": "sign",
}


def _alias(target: str):
    def method(self, *args, **kwargs):
        return getattr(self, target)(*args, **kwargs)
    method.__doc__ = f"PyTorch's other name for `{target}`."
    return method


class TorchAliasesMixin:
    __slots__ = ()

    def true_divide(self, other):
        return self.div(other)

    def floor_divide(self, other):
        return self // other

    def clamp_min(self, min):
        return self.clamp(min=min)

    def clamp_max(self, max):
        return self.clamp(max=max)

    def square(self):
        return self * self

    def positive(self):
        if is_boolean(self):
            raise ShapeError(f"positive of {self.label}: PyTorch does not take booleans")
        return self

    def is_floating_point(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def ravel(self):
        return self.reshape(-1)

    def expand_as(self, other):
        return self.expand(*lift(other).shape)

    def view_as(self, other):
        return self.reshape(lift(other).shape)

    reshape_as = view_as

    def fliplr(self):
        if self.ndim < 2:
            raise ShapeError(f"fliplr of {self.label}: needs at least 2 axes")
        return self.flip(1)

    def flipud(self):
        if self.ndim < 1:
            raise ShapeError(f"flipud of {self.label}: needs at least 1 axis")
        return self.flip(0)

    def deg2rad(self):
        return self * (math.pi / 180.0)

    def rad2deg(self):
        return self * (180.0 / math.pi)

    def signbit(self):
        """True where the sign bit is set: negatives, -0.0 and -inf (a NaN counts as positive here)."""
        return ((self < 0.0) + self.eq(0.0) * (1.0 / self < 0.0))._as_bool()

    def isposinf(self):
        return self.eq(math.inf)

    def isneginf(self):
        return self.eq(-math.inf)

    def fmax(self, other):
        """The larger of the two, a NaN on one side giving the other (NaN only where both are)."""
        other = lift(other)
        return where(self.isnan(), other, where(other.isnan(), self, self.maximum(other)))

    def fmin(self, other):
        other = lift(other)
        return where(self.isnan(), other, where(other.isnan(), self, self.minimum(other)))

    def nanmean(self, dim=None, keepdim: bool = False):
        """The mean of the values that are not NaN (NaN where there are none)."""
        kept = self.isnan().logical_not()
        return self.nansum(dim, keepdim) / kept.sum(dim, keepdim)

    def addcmul(self, tensor1, tensor2, *, value=1):
        return self + value * lift(tensor1) * lift(tensor2)

    def addcdiv(self, tensor1, tensor2, *, value=1):
        return self + value * (lift(tensor1) / lift(tensor2))

    def unbind(self, dim: int = 0) -> tuple:
        """The slices along `dim`, each without it (a known length)."""
        axis = self._axis(dim)
        n = self.shape[axis]
        if not isinstance(n, int):
            raise ShapeError(f"unbind of {self.label}: axis {axis} must have a known length, not {n}")
        return tuple(self[(slice(None),) * axis + (i,)] for i in range(n))

    def msort(self):
        return self.sort(0).values

    def diff(self, n: int = 1, dim: int = -1):
        """Differences of neighbours along `dim`, `n` times (prepend/append are not taken here)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ShapeError(f"diff of {self.label}: n must be an int >= 0, got {n!r}")
        axis, out = self._axis(dim), self
        lead = (slice(None),) * axis
        for _ in range(n):
            out = out[lead + (slice(1, None),)] - out[lead + (slice(None, -1),)]
        return out

    def dot(self, other):
        other = lift(other)
        if self.ndim != 1 or other.ndim != 1:
            raise ShapeError(f"dot of {self.label} and {other.label}: both must be 1-D")
        return (self * other).sum()

    def outer(self, vec2):
        vec2 = lift(vec2)
        if self.ndim != 1 or vec2.ndim != 1:
            raise ShapeError(f"outer of {self.label} and {vec2.label}: both must be 1-D")
        return self.unsqueeze(1) * vec2.unsqueeze(0)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        """beta x + alpha mat1 @ mat2; with beta 0 this tensor is not read (its NaNs do not spread),
        as PyTorch's."""
        product = lift(mat1).mm(mat2)
        product = product if alpha == 1 else product * alpha
        if beta == 0:
            return product
        return (self if beta == 1 else self * beta) + product


for _name, _target in ALIASES.items():  # (set after the class: a class body's locals() is no namespace)
    setattr(TorchAliasesMixin, _name, _alias(_target))

