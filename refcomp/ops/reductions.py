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
from . import return_types
from .dtypes import DTYPES
from .core import (
    TensorCore,
    as_requested,
    broadcast_shape,
    computed_in_float32,
    constant,
    iota,
    lift,
    widened,
    widest_integer,
)
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

    def sum(self, dim=None, keepdim: bool = False, *, dtype=None, axis=None, keepdims=None):
        dim, keepdim = _torch_axes(dim, keepdim, axis, keepdims)
        x = as_requested(self, dtype, "sum") if dtype is not None else widest_integer(self)
        return x._reduce_axes("SumReduce", dim, keepdim)

    def amax(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        """torch.amax: the largest values over one dim, several, or all (None or ()); values only, NaN
        propagates."""
        dim, keepdim = _torch_axes(dim, keepdim, axis, keepdims)
        return self._reduce_axes("MaxReduce", dim, keepdim)

    def amin(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        dim, keepdim = _torch_axes(dim, keepdim, axis, keepdims)
        return -((-self).amax(dim, keepdim))

    def max(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        """torch.max: no dim, the largest value; one dim (by position, dim= or PyTorch's alias axis=), the
        named pair (values, indices) along it, indices the float32 positions of the first maximum (NaN
        counts as the maximum); another tensor, the elementwise maximum."""
        return _extreme(self, "max", dim, keepdim, axis, keepdims)

    def min(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        return _extreme(self, "min", dim, keepdim, axis, keepdims)

    def prod(self, dim=None, keepdim: bool = False, *, dtype=None, axis=None, keepdims=None):
        """The product as a tree of Mul over halves of each axis (whose length must be concrete), in the
        requested type, else (integers) in int64 as PyTorch's."""
        x = as_requested(self, dtype, "prod") if dtype is not None else widest_integer(self)
        return x._product(dim, keepdim, axis=axis, keepdims=keepdims)

    @computed_in_float32
    def _product(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        """prod in this tensor's own type (16-bit types computed in float32, rounded once)."""
        dim, keepdim = _torch_axes(dim, keepdim, axis, keepdims)
        out = self
        axes = (
            range(self.ndim)
            if dim is None
            else [self._axis(a) for a in (dim if isinstance(dim, (tuple, list)) else [dim])]
        )
        for a in sorted(set(axes), reverse=True):
            out = _product_along(out, a)
        return out.reshape(tuple(1 if i in axes else n for i, n in enumerate(self.shape))) if keepdim else out

    def any(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        """1.0 where some value along the axes is nonzero (NaN counts), else 0.0 (PyTorch's bool); over
        dim=() nothing is reduced, as PyTorch's any and all do (unlike its sum)."""
        if _no_dims(dim, axis):
            return self.ne(0.0)
        return self.ne(0.0).amax(dim, keepdim, axis=axis, keepdims=keepdims)._as_bool()

    def all(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        if _no_dims(dim, axis):
            return self.ne(0.0)
        return self.ne(0.0).amin(dim, keepdim, axis=axis, keepdims=keepdims)._as_bool()

    @computed_in_float32
    def logsumexp(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        """log(sum(exp(x))) shifted by the maximum (an infinite maximum is not subtracted)."""
        dim, keepdim = _torch_axes(dim, keepdim, axis, keepdims)
        top = self.amax(dim, keepdim=True)
        shift = where(top.isinf(), 0.0, top)
        out = (self - shift).exp().sum(dim, keepdim=True).log() + shift
        return out if keepdim else out._drop_axes(dim)

    def _count(self, axis) -> object:
        axes = range(self.ndim) if axis is None else axis if isinstance(axis, (tuple, list)) else [axis]
        return prod(self.shape[self._axis(a)] for a in axes)

    def _drop_axes(self, axis):
        """A keepdims result without the reduced size-1 axes."""
        axes = (
            range(self.ndim)
            if axis is None
            else [self._axis(a) for a in (axis if isinstance(axis, (tuple, list)) else [axis])]
        )
        return self.reshape(tuple(n for i, n in enumerate(self.shape) if i not in axes))

    @computed_in_float32
    def mean(self, dim=None, keepdim: bool = False, *, dtype=None, axis=None, keepdims=None):
        dim, keepdim = _torch_axes(dim, keepdim, axis, keepdims)
        if DTYPES[self.dtype].is_int:
            raise ShapeError(f"mean of {self.label}: PyTorch takes the mean of float tensors only "
                             f"(convert it, or pass dtype=, e.g. dtype=torch.float32)")
        return self.sum(dim, keepdim) * _inverse(self._count(dim))

    @computed_in_float32
    def var(
        self,
        dim=None,
        *args,
        correction=None,
        keepdim: bool = False,
        unbiased=None,
        axis=None,
        keepdims=None,
        ddof=None,
    ):
        """PyTorch's var: positionally (dim, unbiased, keepdim), or var(unbiased); divides by n - correction,
        correction 1 unless given (unbiased=False: 0). NumPy's ddof= is the correction too. PyTorch reads
        axis= as dim= (correction 1) where NumPy divides by n, so axis= needs correction= or ddof=."""
        if isinstance(dim, bool):  # var(unbiased)
            dim, args = None, (dim,) + args
        if len(args) > 2 or (args and not isinstance(args[0], bool)):
            raise ShapeError(f"var of {self.label}: after dim PyTorch takes (unbiased: bool, keepdim: bool) "
                             f"positionally, got {args!r}")
        if args:
            if unbiased is not None:
                raise ShapeError(f"var of {self.label}: unbiased given twice")
            unbiased, keepdim = args[0], args[1] if len(args) > 1 else keepdim
        given = [
            k
            for k, v in (("correction", correction), ("unbiased", unbiased), ("ddof", ddof))
            if v is not None
        ]
        if len(given) > 1:
            raise ShapeError(
                f"var of {self.label}: give one of correction=, unbiased= and ddof=, "
                f"not {' and '.join(given)}"
            )
        if axis is not None and not given:
            raise ShapeError(
                f"var of {self.label}: with axis= PyTorch divides by n - 1 and NumPy by n: say which with "
                f"correction= (or dim= for PyTorch's default) or ddof="
            )
        dim, keepdim = _torch_axes(dim, keepdim, axis, keepdims)
        correction = next((v for v in (correction, ddof) if v is not None), 0 if unbiased is False else 1)
        if not isinstance(correction, numbers.Integral) or isinstance(correction, bool) or correction < 0:
            raise ShapeError(
                f"var of {self.label}: correction must be a non-negative int, got {correction!r}"
            )
        centred = self - self.mean(dim, keepdim=True)
        count = self._count(dim)
        total = (centred * centred).sum(dim, keepdim)
        if isinstance(count, int):  # n - correction <= 0 divides by 0, as PyTorch: inf, or NaN for 0 / 0
            return total * (1.0 / (count - correction) if count > correction else math.inf)
        total = total * _inverse(make_dim(count - correction))
        return total if not correction else where(constant(count) > correction, total, math.nan)

    @computed_in_float32
    def std(
        self,
        dim=None,
        *args,
        correction=None,
        keepdim: bool = False,
        unbiased=None,
        axis=None,
        keepdims=None,
        ddof=None,
    ):
        return self.var(dim, *args, correction=correction, keepdim=keepdim, unbiased=unbiased, axis=axis,
                        keepdims=keepdims, ddof=ddof).sqrt()

    def softmin(self, dim: int = -1, dtype=None, *, axis=None):
        return (-as_requested(self, dtype, "softmin")).softmax(_one_axis(dim, axis))

    @computed_in_float32
    def softmax(self, dim: int = -1, dtype=None, *, axis=None):
        """Along `dim` (default -1; PyTorch's method requires it); `dtype` converts the input first, as
        PyTorch (computed_in_float32 does it, so the result has that type)."""
        x, dim = self, _one_axis(dim, axis)
        shifted = x - x.amax(dim, keepdim=True)
        e = shifted.exp()
        return e / e.sum(dim, keepdim=True)

    @computed_in_float32
    def log_softmax(self, dim: int = -1, dtype=None, *, axis=None):
        x, dim = self, _one_axis(dim, axis)
        shifted = x - x.amax(dim, keepdim=True)
        return shifted - shifted.exp().sum(dim, keepdim=True).log()

    def argmax(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        """Index of the first maximum, as a float (every computed value in refcomp is float32); with no
        dim (`x.argmax()`, as NumPy and PyTorch) of the flattened tensor.

        As in NumPy a NaN is the maximum: where the max is NaN no element equals it, and the NaNs
        are the candidates (where it is not NaN there are none).
        """
        dim, keepdim = _torch_axes(dim, keepdim, axis, keepdims)
        if dim is None:
            flat = self.reshape((prod(self.shape),))
            out = flat.argmax(0)
            return out.reshape((1,) * self.ndim) if keepdim else out
        dim = self._axis(dim)
        n = self.shape[dim]
        is_max = self.eq(self.amax(dim, keepdim=True)) + self.isnan()
        index = iota(self.shape, dim)
        return (index + (1.0 - is_max) * n).amin(dim, keepdim)

    def argmin(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        """Index of the first minimum (NaN counts as the minimum, as in NumPy and PyTorch)."""
        return (-self).argmax(dim, keepdim, axis=axis, keepdims=keepdims)

    def cumsum(self, dim: int = -1, *, dtype=None, axis=None):
        """Running sums as windows over a zero-padded copy: exact, with no masking arithmetic."""
        axis = self._axis(_one_axis(dim, axis))
        x = as_requested(self, dtype, "cumsum") if dtype is not None else widest_integer(self)
        x = x.transpose(axis, -1) if axis != self.ndim - 1 else x
        n, lead = x.shape[-1], x.shape[:-1]
        padded = x.pad([(0, 0)] * (x.ndim - 1) + [(make_dim(n - 1), 0)])
        padded_strides = contiguous_strides(lead + (make_dim(2 * n - 1),))
        windows = padded.as_strided(lead + (n, n), padded_strides[:-1] + (1, 1))
        out = windows._reduce_axes("SumReduce", -1, False)
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


def _torch_axes(dim, keepdim, axis, keepdims):
    """dim= / keepdim= with PyTorch's aliases axis= / keepdims= (NumPy's names, the same meaning here)."""
    if axis is not None:
        if dim is not None:
            raise ShapeError(f"give axis= or dim=, not both (axis={axis!r}, dim={dim!r})")
        dim = axis
    if _no_dims(dim, None):  # PyTorch reduces every axis over dim=() (NumPy: none)
        dim = None
    return dim, keepdim if keepdims is None else keepdims


def _no_dims(dim, axis) -> bool:
    """dim=() (or []): every axis for PyTorch's sum, none for its any and all."""
    dims = dim if axis is None else axis
    return isinstance(dims, (tuple, list)) and not dims


def _one_axis(dim, axis):
    if axis is not None and dim not in (None, -1):
        raise ShapeError(f"give axis= or dim=, not both (axis={axis!r}, dim={dim!r})")
    return dim if axis is None else axis


def _extreme(t, name: str, dim, keepdim, axis, keepdims):
    """Tensor.max / Tensor.min in PyTorch's three forms (see max)."""
    if isinstance(dim, TensorCore):
        return t.maximum(dim) if name == "max" else t.minimum(dim)
    dim, keepdim = _torch_axes(dim, keepdim, axis, keepdims)
    if dim is None:
        return t.amax(None, keepdim) if name == "max" else t.amin(None, keepdim)
    if isinstance(dim, (tuple, list)):
        raise ShapeError(
            f"{name} of {t.label}: PyTorch's {name} takes one dim and returns (values, indices); "
            f"for the {name}imum over dims {tuple(dim)} use a{name}"
        )
    values = t.amax(dim, keepdim) if name == "max" else t.amin(dim, keepdim)
    indices = t.argmax(dim, keepdim) if name == "max" else t.argmin(dim, keepdim)
    return getattr(return_types, name)(values, indices)


def _product_along(t, axis: int):
    """The product along one axis as a tree of Mul over halves (the axis length must be concrete)."""
    n = t.shape[axis]
    if not isinstance(n, int):
        raise ShapeError(
            f"prod of {t.label} over axis {axis} of symbolic length {n}: the length must be known"
        )
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
