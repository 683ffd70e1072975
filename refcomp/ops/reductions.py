"""Reductions, normalisations and matmul, built from SumReduce and MaxReduce.

A primitive reduce removes exactly one axis; multi-axis and keepdims forms are views around a
chain of them. `matmul` is the textbook SumReduce(Mul(expand a, expand b)) over the contracted axis,
which is the pattern the search later recognises and hands to the tiled matmul template. The
composites (mean, var, softmax, ...) of a 16-bit tensor compute in float32 and round once
(`core.computed_in_float32`); a sum rounds once whatever its axes.
"""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from ..symbolic.dims import dim as make_dim, dims_equal, prod
from ..symbolic.view import contiguous_strides
from .dtypes import DTYPES
from .provenance import user_op
from .core import broadcast_shape, computed_in_float32, constant, iota, lift, widened
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
        # a sum over several axes is one accumulation: of a 16-bit tensor, in float32, rounded once
        several = name == "SumReduce" and len(set(axes)) > 1 and DTYPES[self.dtype].is_narrow
        out = self.to("float32") if several else self
        for a in sorted(set(axes), reverse=True):
            out = out._reduce(name, a)
        out = out.to(self.dtype) if several else out
        if keepdims:
            out = out.reshape(tuple(1 if i in axes else n for i, n in enumerate(self.shape)))
        return out

    def sum(self, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        axis, keepdims = _torch_axes(axis, keepdims, dim, keepdim)
        return self._reduce_axes("SumReduce", axis, keepdims)

    def max(self, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        axis, keepdims = _torch_axes(axis, keepdims, dim, keepdim)
        return self._reduce_axes("MaxReduce", axis, keepdims)

    def min(self, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        axis, keepdims = _torch_axes(axis, keepdims, dim, keepdim)
        return -((-self).max(axis, keepdims))

    @computed_in_float32
    def prod(self, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        """The product as a tree of Mul over halves of each axis (whose length must be concrete)."""
        axis, keepdims = _torch_axes(axis, keepdims, dim, keepdim)
        axes = range(self.ndim) if axis is None else [self._axis(a) for a in (axis if isinstance(axis, (tuple, list)) else [axis])]
        out = self
        for a in sorted(set(axes), reverse=True):
            out = _product(out, a)
        return out.reshape(tuple(1 if i in axes else n for i, n in enumerate(self.shape))) if keepdims else out

    def any(self, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        """1.0 where some value along the axes is nonzero (NaN counts), else 0.0."""
        return self.ne(0.0).max(axis, keepdims, dim=dim, keepdim=keepdim)

    def all(self, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        return self.ne(0.0).min(axis, keepdims, dim=dim, keepdim=keepdim)

    @computed_in_float32
    def logsumexp(self, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        """log(sum(exp(x))) shifted by the maximum (an infinite maximum is not subtracted)."""
        axis, keepdims = _torch_axes(axis, keepdims, dim, keepdim)
        top = self.max(axis, keepdims=True)
        shift = where(top.isinf(), 0.0, top)
        out = (self - shift).exp().sum(axis, keepdims=True).log() + shift
        return out if keepdims else out._drop_axes(axis)

    def _count(self, axis) -> object:
        axes = range(self.ndim) if axis is None else axis if isinstance(axis, (tuple, list)) else [axis]
        return prod(self.shape[self._axis(a)] for a in axes)

    def _drop_axes(self, axis):
        """A keepdims result without the reduced size-1 axes."""
        axes = range(self.ndim) if axis is None else [self._axis(a) for a in (axis if isinstance(axis, (tuple, list)) else [axis])]
        return self.reshape(tuple(n for i, n in enumerate(self.shape) if i not in axes))

    @computed_in_float32
    def mean(self, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        axis, keepdims = _torch_axes(axis, keepdims, dim, keepdim)
        count = self._count(axis)
        return self.sum(axis, keepdims) * _inverse(count)

    @computed_in_float32
    def var(self, axis=None, keepdims: bool = False, correction=None, *, dim=None, keepdim=None, unbiased=None):
        """Population variance when called the NumPy way (axis=, ddof 0); called the PyTorch way (dim=,
        keepdim= or unbiased=) the default correction is PyTorch's, 1. `correction` overrides both."""
        torch_way = dim is not None or keepdim is not None or unbiased is not None
        axis, keepdims = _torch_axes(axis, keepdims, dim, keepdim)
        if correction is None:
            correction = (1 if unbiased is None or unbiased else 0) if torch_way else 0
        if not isinstance(correction, numbers.Integral) or isinstance(correction, bool) or correction < 0:
            raise ShapeError(f"var of {self.label}: correction must be a non-negative int, got {correction!r}")
        centred = self - self.mean(axis, keepdims=True)
        count = self._count(axis)
        total = (centred * centred).sum(axis, keepdims) * _inverse(make_dim(count - correction))
        if isinstance(count, int) or not correction:
            return total
        return where(constant(count) > correction, total, math.nan)

    @computed_in_float32
    def std(self, axis=None, keepdims: bool = False, correction=None, *, dim=None, keepdim=None, unbiased=None):
        return self.var(axis, keepdims, correction, dim=dim, keepdim=keepdim, unbiased=unbiased).sqrt()

    def softmin(self, axis: int = -1, *, dim=None):
        return (-self).softmax(axis if dim is None else dim)

    @computed_in_float32
    def softmax(self, axis: int = -1, *, dim=None):
        axis = axis if dim is None else dim
        shifted = self - self.max(axis, keepdims=True)
        e = shifted.exp()
        return e / e.sum(axis, keepdims=True)

    @computed_in_float32
    def log_softmax(self, axis: int = -1, *, dim=None):
        axis = axis if dim is None else dim
        shifted = self - self.max(axis, keepdims=True)
        return shifted - shifted.exp().sum(axis, keepdims=True).log()

    def argmax(self, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        """Index of the first maximum, as a float (every computed value in refcomp is float32); with no
        axis (`x.argmax()`, as NumPy and PyTorch) of the flattened tensor.

        As in NumPy a NaN is the maximum: where the max is NaN no element equals it, and the NaNs
        are the candidates (where it is not NaN there are none).
        """
        if dim is not None or keepdim is not None:
            axis, keepdims = _torch_axes(None, keepdims, dim, keepdim)
        if axis is None:
            flat = self.reshape((prod(self.shape),))
            out = flat.argmax(0)
            return out.reshape((1,) * self.ndim) if keepdims else out
        axis = self._axis(axis)
        n = self.shape[axis]
        is_max = self.eq(self.max(axis, keepdims=True)) + self.isnan()
        index = iota(self.shape, axis)
        return (index + (1.0 - is_max) * n).min(axis, keepdims)

    def argmin(self, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
        """Index of the first minimum (NaN counts as the minimum, as in NumPy and PyTorch)."""
        return (-self).argmax(axis, keepdims, dim=dim, keepdim=keepdim)

    def cumsum(self, axis: int = -1, *, dim=None):
        """Running sums as windows over a zero-padded copy: exact, with no masking arithmetic."""
        axis = self._axis(axis if dim is None else dim)
        x = self.transpose(axis, -1) if axis != self.ndim - 1 else self
        n, lead = x.shape[-1], x.shape[:-1]
        padded = x.pad([(0, 0)] * (x.ndim - 1) + [(make_dim(n - 1), 0)])
        padded_strides = contiguous_strides(lead + (make_dim(2 * n - 1),))
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
        (left, right), dtype = widened(left, right)
        out = (left * right).sum(-2).to(dtype)
        if a.ndim == 1:
            out = out.squeeze(-2)
        if b.ndim == 1:
            out = out.squeeze(-1)
        return out

    __matmul__ = matmul

    def __rmatmul__(self, other):
        return lift(other).matmul(self)


def _torch_axes(axis, keepdims, dim, keepdim):
    """PyTorch's dim= / keepdim= beside NumPy's axis= / keepdims=."""
    if dim is not None:
        if axis is not None:
            raise ShapeError(f"give axis= or dim=, not both (axis={axis!r}, dim={dim!r})")
        axis = dim
    return axis, keepdims if keepdim is None else keepdim


def _product(t, axis: int):
    """The product along one axis as a tree of Mul over halves (the axis length must be concrete)."""
    n = t.shape[axis]
    if not isinstance(n, int):
        raise ShapeError(f"prod of {t.label} over axis {axis} of symbolic length {n}: the length must be known")
    if n == 0:
        return constant(1.0).broadcast_to(t.shape[:axis] + t.shape[axis + 1:])
    index = [slice(None)] * t.ndim
    while n > 1:
        if n % 2:
            widths = [(0, 0)] * t.ndim
            widths[axis] = (0, 1)
            t, n = t.pad(widths, value=1.0), n + 1
        half = n // 2
        index[axis] = slice(0, half)
        left = t[tuple(index)]
        index[axis] = slice(half, n)
        t, n = left * t[tuple(index)], half
    return t.squeeze(axis)


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
    """rc.arange(n) or rc.arange(start, stop, step): start, start + step, ... below stop (ints, or
    floats as torch.arange takes them: ceil((stop - start) / step) values, each start + i * step)."""
    if len(args) == 1 and not isinstance(args[0], float):
        n = make_dim(args[0])
        return iota((max(n, 0) if isinstance(n, int) else n,), 0)  # NumPy: arange(-1) is empty
    start, stop, step = ([0] if len(args) == 1 else []) + (list(args) + [1])[:3 if len(args) > 1 else 2]
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (start, stop, step)) or step == 0:
        raise ShapeError(f"arange({', '.join(map(str, args))}): start, stop and step must be numbers, step non-zero")
    if all(isinstance(v, numbers.Integral) for v in (start, stop, step)):
        count = max(len(range(start, stop, step)), 0)
    else:
        count = max(math.ceil((float(stop) - float(start)) / float(step)), 0)
    return iota((count,), 0) * float(step) + float(start)
