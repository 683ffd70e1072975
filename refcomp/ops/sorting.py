"""sort, argsort and topk along an axis of known length: a bitonic sorting network of Where selects.

Each element carries a key (group, value, original index), compared lexicographically: group 1 holds
the NaNs (after every number ascending, before every number descending, as PyTorch sorts them),
group 2 the padding up to a power of two, and a descending sort compares the negated values. The
index makes every key distinct, so the network's result is the stable sort. log2(n)(log2(n) + 1)/2
compare-exchange stages run, each pairing positions i and i + j inside blocks of 2j through a
reshape of the axis, the smaller key first where i's block of size k sorts ascending. Every stage
is a select, never arithmetic on the values, so the results are the input's own values.
"""
from __future__ import annotations

import math

from ..errors import ShapeError
from .core import iota
from .elementwise import where
from .movement import concat


def _greater(a: list, b: list):
    """1.0 where key a > key b lexicographically (each key a list of same-shaped fields)."""
    out = a[-1] > b[-1]
    for x, y in zip(reversed(a[:-1]), reversed(b[:-1])):
        out = (x > y) + x.eq(y) * out
    return out


def _stage(fields: list, keys: int, j: int, k: int):
    """One compare-exchange stage of the network over the last axis (its length a power of two); the
    first `keys` fields are the key, the rest travel along."""
    shape = fields[0].shape
    n = shape[-1]
    lead = shape[:-1]
    grid = lead + (n // (2 * j), j)
    position = iota(grid, len(lead)) * float(2 * j) + iota(grid, len(lead) + 1)
    ascending = (position - (position * (1.0 / (2 * k))).floor() * float(2 * k)) < float(k)  # (i mod 2k) < k
    halves = [f.reshape(lead + (n // (2 * j), 2, j)) for f in fields]
    first, second = [h[..., 0, :] for h in halves], [h[..., 1, :] for h in halves]
    swap = where(ascending, _greater(first[:keys], second[:keys]), _greater(second[:keys], first[:keys]))
    out = []
    for a, b in zip(first, second):
        low, high = where(swap, b, a), where(swap, a, b)
        out.append(concat([low.unsqueeze(-2), high.unsqueeze(-2)], -2).reshape(shape))
    return out


def sort_with_indices(x, axis: int = -1, descending: bool = False):
    """(values, original indices as floats) of x sorted along `axis`; stable."""
    axis = x._axis(axis)
    n = x.shape[axis]
    if not isinstance(n, int):
        raise ShapeError(f"sort of {x.label}: axis {axis} has the symbolic length {n}; sorting needs a known length")
    t = x.transpose(axis, -1) if axis != x.ndim - 1 else x
    nan = t.isnan()
    group = nan
    value = where(nan, 0.0, -t if descending else t)
    if descending:  # NaN first: the numbers are group 1
        group = 1.0 - nan
    index = iota(t.shape, t.ndim - 1)
    size = 1 << math.ceil(math.log2(n)) if n > 1 else max(n, 1)
    if size > n:
        widths = [(0, 0)] * (t.ndim - 1) + [(0, size - n)]
        group, value, index, t = group.pad(widths, value=2.0), value.pad(widths), index.pad(widths, value=float(size)), t.pad(widths)
    fields = [group, value, index, t]
    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            fields = _stage(fields, 3, j, k)
            j //= 2
        k *= 2
    values, indices = fields[3][..., :n], fields[2][..., :n]
    if axis != x.ndim - 1:
        values, indices = values.transpose(axis, -1), indices.transpose(axis, -1)
    return values, indices


class SortingMixin:
    __slots__ = ()

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        """(values, indices) as torch.sort; always stable (indices are floats, as every refcomp value)."""
        return sort_with_indices(self, dim, descending)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        return sort_with_indices(self, dim, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
        """(values, indices) of the k largest (or smallest) along dim, in order; ties by position."""
        axis = self._axis(dim)
        n = self.shape[axis]
        if not isinstance(k, int) or isinstance(k, bool) or not (isinstance(n, int) and 0 <= k <= n):
            raise ShapeError(f"topk of {self.label}: k = {k!r} must be an int in [0, {n}] along axis {axis}")
        values, indices = sort_with_indices(self, axis, descending=largest)
        index = [slice(None)] * self.ndim
        index[axis] = slice(0, k)
        return values[tuple(index)], indices[tuple(index)]
