"""Reductions, normalisations and matmul, built from SumReduce and MaxReduce.

A primitive reduce removes exactly one axis; multi-axis and keepdims forms are views around a
chain of them. `matmul` is the textbook SumReduce(Mul(expand a, expand b)) over the contracted axis,
which is the pattern the search later recognises and hands to the tiled matmul template.
"""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from ..symbolic.dims import dim, dims_equal, prod
from ..symbolic.view import contiguous_strides
from .provenance import user_op
from .core import broadcast_shape, constant, iota, lift
from .elementwise import where


class ReductionMixin:
    __slots__ = ()

    def _reduce_axes(self, name: str, axis, keepdims: bool):
        if axis is None:
            axes = list(range(self.ndim))
        elif not isinstance(axis, (tuple, list)):
            axes = [self._axis(axis)]  # an int, or an error naming the bad axis
        else:
            axes = [self._axis(a) for a in axis]
            if len(set(axes)) != len(axes):
                raise ShapeError(f"{name} of {self.label}: repeated axis in {tuple(axis)}")
        out = self
        for a in sorted(set(axes), reverse=True):
            out = out._reduce(name, a)
        if keepdims:
            out = out.reshape(tuple(1 if i in axes else n for i, n in enumerate(self.shape)))
        return out

    def sum(self, axis=None, keepdims: bool = False):
        return self._reduce_axes("SumReduce", axis, keepdims)

    def max(self, axis=None, keepdims: bool = False):
        return self._reduce_axes("MaxReduce", axis, keepdims)

    def min(self, axis=None, keepdims: bool = False):
        return -((-self).max(axis, keepdims))

    def _count(self, axis) -> object:
        axes = range(self.ndim) if axis is None else axis if isinstance(axis, (tuple, list)) else [axis]
        return prod(self.shape[self._axis(a)] for a in axes)

    def mean(self, axis=None, keepdims: bool = False):
        count = self._count(axis)
        return self.sum(axis, keepdims) * _inverse(count)

    def var(self, axis=None, keepdims: bool = False, correction: int = 0):
        """Population variance by default (NumPy's ddof=0); correction=1 gives PyTorch's default."""
        if not isinstance(correction, numbers.Integral) or isinstance(correction, bool) or correction < 0:
            raise ShapeError(f"var of {self.label}: correction must be a non-negative int, got {correction!r}")
        centred = self - self.mean(axis, keepdims=True)
        count = self._count(axis)
        total = (centred * centred).sum(axis, keepdims) * _inverse(dim(count - correction))
        if isinstance(count, int) or not correction:
            return total
        return where(constant(count) > correction, total, math.nan)

    def softmax(self, axis: int = -1):
        shifted = self - self.max(axis, keepdims=True)
        e = shifted.exp()
        return e / e.sum(axis, keepdims=True)

    def log_softmax(self, axis: int = -1):
        shifted = self - self.max(axis, keepdims=True)
        return shifted - shifted.exp().sum(axis, keepdims=True).log()

    def argmax(self, axis: int = -1, keepdims: bool = False):
        """Index of the first maximum, as a float (every computed value in refcomp is float32).

        As in NumPy a NaN is the maximum: where the max is NaN no element equals it, and the NaNs
        are the candidates (where it is not NaN there are none).
        """
        axis = self._axis(axis)
        n = self.shape[axis]
        is_max = self.eq(self.max(axis, keepdims=True)) + self.isnan()
        index = iota(self.shape, axis)
        return (index + (1.0 - is_max) * n).min(axis, keepdims)

    def cumsum(self, axis: int = -1):
        """Running sums as windows over a zero-padded copy: exact, with no masking arithmetic."""
        axis = self._axis(axis)
        x = self.transpose(axis, -1) if axis != self.ndim - 1 else self
        n, lead = x.shape[-1], x.shape[:-1]
        padded = x.pad([(0, 0)] * (x.ndim - 1) + [(dim(n - 1), 0)])
        padded_strides = contiguous_strides(lead + (dim(2 * n - 1),))
        windows = padded.as_strided(lead + (n, n), padded_strides[:-1] + (1, 1))
        out = windows.sum(-1)
        return out.transpose(axis, -1) if axis != self.ndim - 1 else out

    def matmul(self, other):
        a, b = self, lift(other)
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError(f"matmul needs at least 1-D operands, got {a.label} and {b.label}")
        a2 = a.unsqueeze(0) if a.ndim == 1 else a
        b2 = b.unsqueeze(-1) if b.ndim == 1 else b
        (m, k), (k2, n) = a2.shape[-2:], b2.shape[-2:]
        if not dims_equal(k, k2):
            raise ShapeError(f"matmul: inner dimensions differ: {a.label} has {k}, {b.label} has {k2}")
        batch = broadcast_shape([_batch_of(a2), _batch_of(b2)], "matmul (batch axes)")
        left = a2.broadcast_to(batch + (m, k)).unsqueeze(-1)
        right = b2.broadcast_to(batch + (k, n)).unsqueeze(-3)
        out = (left * right).sum(-2)
        if a.ndim == 1:
            out = out.squeeze(-2)
        if b.ndim == 1:
            out = out.squeeze(-1)
        return out

    __matmul__ = matmul

    def __rmatmul__(self, other):
        return lift(other).matmul(self)


def _inverse(count):
    """1/count for averaging; NaN for an empty reduction (or a count <= 0 after a correction), as NumPy."""
    if isinstance(count, int):
        return 1.0 / count if count > 0 else float("nan")
    return 1 / count


def _batch_of(t):
    """A stand-in tensor whose shape is `t`'s batch axes, used only to broadcast shapes."""
    return constant(0.0).broadcast_to(t.shape[:-2]) if t.ndim > 2 else constant(0.0)


@user_op
def arange(*args):
    """rc.arange(n) or rc.arange(start, stop, step) with ints: floats start, start+step, ..."""
    if len(args) == 1:
        n = dim(args[0])
        return iota((max(n, 0) if isinstance(n, int) else n,), 0)  # NumPy: arange(-1) is empty
    start, stop, step = (list(args) + [1])[:3]
    if not all(isinstance(v, numbers.Integral) for v in (start, stop, step)) or step == 0:
        raise ShapeError(f"arange({', '.join(map(str, args))}): start, stop and step must be ints, step non-zero")
    count = max(len(range(start, stop, step)), 0)
    return iota((count,), 0) * float(step) + float(start)
