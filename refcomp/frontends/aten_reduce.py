"""ATen's reductions, scans and selections along an axis, as refcomp's Tensor methods.

ATen's defaults are PyTorch's: an empty `dim` list reduces every axis (sum, mean, amax, var),
`correction` None is 1, `max.dim` and `topk` give (values, indices) with the first extreme's index
(refcomp's indices are exact float32 integers, which the importer holds as integer values bounded
by the axis length).
"""
from __future__ import annotations

from ..symbolic.dims import prod
from .aten_values import bound_of


def _dims(axis):
    """None or an empty list: every axis (PyTorch's reductions); else a tuple."""
    if axis is None or (isinstance(axis, (list, tuple)) and not axis):
        return None
    return tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)


def _count(x, axis) -> object:
    """How many values each output of a reduction over `axis` reads."""
    axes = range(x.ndim) if _dims(axis) is None else [a % x.ndim for a in _dims(axis)] if x.ndim else []
    return prod(x.shape[a] for a in axes)


def sum_(ctx, x, axis=None, keepdim=False, dtype=None):
    return ctx.tensor(x).sum(_dims(axis), keepdim)


def sum_bound(ctx, x, axis=None, keepdim=False, dtype=None):
    return bound_of(x) * _count(x, axis)


def mean(ctx, x, axis=None, keepdim=False, dtype=None):
    return ctx.tensor(x).mean(_dims(axis), keepdim)


def var(ctx, x, axis=None, correction=None, keepdim=False):
    """correction None is 1 (Bessel's); ATen passes it as a number, refcomp takes an int."""
    correction = 1 if correction is None else correction
    if float(correction) != int(correction) or correction < 0:
        raise ctx.error(f"a correction of {correction} is not supported (non-negative whole numbers are)")
    return ctx.tensor(x).var(_dims(axis), correction=int(correction), keepdim=keepdim)


def var_mean(ctx, x, axis=None, correction=None, keepdim=False):
    """(var, mean): torch.var_mean and std_mean (whose square root ATen takes after it)."""
    return var(ctx, x, axis, correction, keepdim), mean(ctx, x, axis, keepdim)


def var_unbiased(ctx, x, axis=None, unbiased=True, keepdim=False):
    """var.dim: the older form, unbiased meaning correction 1."""
    return ctx.tensor(x).var(_dims(axis), correction=1 if unbiased else 0, keepdim=keepdim)


def amax(ctx, x, axis=(), keepdim=False):
    return ctx.tensor(x).amax(_dims(axis), keepdim)


def amin(ctx, x, axis=(), keepdim=False):
    return ctx.tensor(x).amin(_dims(axis), keepdim)


def extreme_dim(name: str):
    """max.dim / min.dim: the pair (values, indices)."""
    def convert(ctx, x, axis, keepdim=False):
        values, indices = getattr(ctx.tensor(x), name)(axis, keepdim)
        return values, indices
    convert.__name__ = f"{name}_dim"
    return convert


def extreme_all(name: str):
    def convert(ctx, x):
        return getattr(ctx.tensor(x), "amax" if name == "max" else "amin")()
    convert.__name__ = f"{name}_all"
    return convert


def pair_bound(ctx, x, axis=-1, *args, **kwargs):
    """(values: x's bound, indices: below the axis length)."""
    return bound_of(x), x.shape[axis % x.ndim] if x.ndim else 1


def topk_bound(ctx, x, k, axis=-1, *args, **kwargs):
    return pair_bound(ctx, x, axis)


def arg_extreme(name: str):
    def convert(ctx, x, axis=None, keepdim=False):
        return getattr(ctx.tensor(x), name)(axis, keepdim)
    convert.__name__ = name
    return convert


def index_bound(ctx, x, axis=None, *args, **kwargs):
    return prod(x.shape) if axis is None else (x.shape[axis % x.ndim] if x.ndim else 1)


def vector_norm(ctx, x, order=2, axis=None, keepdim=False, dtype=None):
    """linalg_vector_norm: (sum |x|^p)^(1/p); p = inf, -inf: the largest, smallest |x|; p = 0: the count
    of nonzeros; p = 2 and 1 without a power."""
    x, axes = ctx.tensor(x), _dims(axis)
    if order == float("inf") or order == float("-inf"):
        return getattr(x.abs(), "amax" if order > 0 else "amin")(axes, keepdim)
    if order == 0:
        return x.ne(0.0).float().sum(axes, keepdim)
    if order == 1:
        return x.abs().sum(axes, keepdim)
    if order == 2:
        return (x * x).sum(axes, keepdim).sqrt()
    return (x.abs() ** float(order)).sum(axes, keepdim) ** (1.0 / order)


def prod_(ctx, x, axis=None, keepdim=False, dtype=None):
    return ctx.tensor(x).prod(axis, keepdim)


def any_(ctx, x, axis=None, keepdim=False):
    """any.dim / any.dims / any.default: over the axes given, every axis for None, none for an empty list
    (PyTorch's any and all, unlike its sum)."""
    return ctx.tensor(x).any(tuple(axis) if isinstance(axis, (list, tuple)) else axis, keepdim)


def all_(ctx, x, axis=None, keepdim=False):
    return ctx.tensor(x).all(tuple(axis) if isinstance(axis, (list, tuple)) else axis, keepdim)


def cumsum(ctx, x, axis, dtype=None):
    return ctx.tensor(x).cumsum(axis)


def cumsum_bound(ctx, x, axis, dtype=None):
    return bound_of(x) * (x.shape[axis % x.ndim] if x.ndim else 1)


def topk(ctx, x, k, axis=-1, largest=True, sorted=True):
    values, indices = ctx.tensor(x).topk(k, axis, largest, sorted)
    return values, indices


def sort(ctx, x, axis=-1, descending=False):
    values, indices = ctx.tensor(x).sort(axis, descending)
    return values, indices
