"""sort, argsort, topk, kthvalue and median along an axis of known length, as PyTorch names them.

The graph grows with log² of the length, or with log of it, never with the length itself. Each
element becomes a (key, index) pair and the pairs are ordered lexicographically, so no two tie:

- `tournament.py` picks the lowest k of each row by counting ranks down a 4-ary tree of minima,
  reading the candidates with gathers: for k up to `MAX_COUNTED` (its 4 k candidates are ranked at
  once), or any k of a row of at most `MAX_CANDIDATES` (one count over the whole row);
- the bitonic network (`bitonic.py`) sorts rows padded to a power of two in log² stages of four
  nodes (`sort` of 4,096 values: 78 stages), or selects the lowest k by sorting blocks of the next
  power of two above k and keeping the lower half of each two neighbours: for the rest, and for a
  batch of rows too large (or symbolic) for the tournament's float32 positions.

Ties keep the input's order (the index decides), as `torch.sort(stable=True)`; where PyTorch leaves
the order of ties unspecified (`sort` without `stable`, `topk`, `kthvalue`), refcomp's answer is
still that one. NaN is ordered as PyTorch orders it: after +inf ascending, before it descending and
in `topk(largest=True)`; `median` returns NaN (and the first NaN's index) for a row holding one.
Indices are float32 values, as `argmax`'s (exact below 2^24).
"""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from ..symbolic.dims import prod
from .bitonic import Network
from .tournament import ARITY, MAX_CANDIDATES, lowest, sizes
from . import return_types
from .core import constant, iota
from .elementwise import where

MAX_COUNTED = MAX_CANDIDATES // ARITY  # the largest k the tournament picks from a longer row


def counted(rows, n: int, count: int) -> bool:
    """Whether the tournament takes the lowest `count` of `rows` rows of n: a small count (or a short
    row), and every flat position rows * padded n an exact float32."""
    return ((count <= MAX_COUNTED or n <= MAX_CANDIDATES) and isinstance(rows, int)
            and rows * sizes(n)[-1] < 2 ** 24)


def _rows(x, axis: int):
    """x with `axis` last and the others merged into one: (rows, n)."""
    t = x.transpose(axis, -1) if axis != x.ndim - 1 else x
    return t.reshape((prod(t.shape[:-1]), t.shape[-1]))


def _unrows(t, x, axis: int):
    """A (rows, m) result back in x's layout, with `axis` of length m."""
    lead = tuple(n for i, n in enumerate(x.shape) if i != axis)
    t = t.reshape(lead + (t.shape[-1],))
    return t.transpose(axis, -1) if axis != x.ndim - 1 else t


def _keys(t, size: int, negate: bool, nan_first: bool):
    """(keys, indices) (rows, n) of rows t (rows, n), which the network orders.

    The key is the value (negated for a descending order); a NaN's key is -inf when NaN comes first,
    else +inf, and its index is moved by -size or +size, so that the NaNs order among themselves by
    position but before (after) every equal key."""
    inf, minus_inf = constant(math.inf), constant(-math.inf)
    ordered = (t < inf) + (minus_inf < t)  # 0 only for NaN
    key = where(ordered, -t if negate else t, minus_inf if nan_first else inf)
    position = iota((t.shape[-1],), 0)
    return key, where(ordered, position, position + float(-size if nan_first else size))


def _fields(key, index, size: int):
    """The network's fields (2, rows, size): keys, then indices. Padding up to `size` has key +inf
    and index position + 2 size: it sorts after everything."""
    n = key.shape[-1]
    first = iota((2, 1, 1), 0) < 0.5  # field 0: the key
    fields = where(first, key, index)
    if size == n:
        return fields
    padded = fields.pad([(0, 0), (0, 0), (0, size - n)])
    padding = where(first, math.inf, iota((size,), 0) + float(2 * size))
    return where(iota((size,), 0) < n - 0.5, padded, padding)


def _decode(key, index, size: int, negate: bool, nan_first: bool, dtype: str):
    """(values, indices) of sorted keys and indices."""
    nan = index < -0.5 if nan_first else index > size - 0.5
    values = where(nan, math.nan, -key if negate else key).to(dtype)
    return values, where(nan, index + float(size if nan_first else -size), index)


def _network(x, axis: int, count: int, negate: bool, nan_first: bool):
    """The lowest `count` elements along `axis` in (key, index) order, as (values, indices) of shape
    (rows, count): by the tournament where `counted`, else by the bitonic network."""
    t = _rows(x, axis).float()
    n = t.shape[-1]
    if count == 0:
        empty = t[:, :0]  # (its indices read x too, so that the graph keeps x as its input)
        return empty.to(x.dtype), empty * 0.0
    if counted(t.shape[0], n, count):
        indices, values = lowest(t, -1.0 if negate else 1.0, count, nan_first)
        return values.to(x.dtype), indices
    size = 1 << (n - 1).bit_length()
    if 3 * size > 2 ** 24:  # padding's indices reach 3 size
        raise ShapeError(
            f"sorting {x.label}: {n} positions along axis {axis}, more than the 2^22 that float32 "
            f"indices count exactly here"
        )
    fields = Network(_fields(*_keys(t, size, negate, nan_first), size)).sorted(count)
    return _decode(fields[0], fields[1], size, negate, nan_first, x.dtype)


def _along(x, dim, what: str):
    """(x with at least one axis, the axis, its length): a 0-d tensor is one value along axis 0."""
    if x.ndim == 0:
        x = x.reshape((1,))
    axis = x._axis(dim)
    n = x.shape[axis]
    if not isinstance(n, int):
        raise ShapeError(
            f"{what} of {x.label}: axis {axis} has the symbolic length {n}; it needs a known length"
        )
    return x, axis, n


def sort_with_indices(x, axis: int = -1, descending: bool = False):
    """(values, original indices as floats) of x sorted along `axis`; stable."""
    t, axis, n = _along(x, axis, "sort")
    values, indices = _network(t, axis, n, descending, descending)
    return _unrows(values, t, axis).reshape(x.shape), _unrows(indices, t, axis).reshape(x.shape)


def _check_k(x, k, axis: int, n: int, what: str, low: int) -> None:
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or not low <= k <= n:
        raise ShapeError(f"{what} of {x.label}: k = {k!r} must be an int in [{low}, {n}] along axis {axis}")


class SortingMixin:
    __slots__ = ()

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        """(values, indices) as torch.sort; always stable."""
        return return_types.sort(*sort_with_indices(self, dim, descending))

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        return sort_with_indices(self, dim, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
        """(values, indices) of the k largest (or smallest) along dim, in order, ties by position.
        `sorted=False` returns them sorted as well (PyTorch's order is then unspecified)."""
        t, axis, n = _along(self, dim, "topk")
        _check_k(t, k, axis, n, "topk", 0)
        values, indices = _network(t, axis, int(k), largest, largest)
        values, indices = _unrows(values, t, axis), _unrows(indices, t, axis)
        if self.ndim == 0 and k == 1:
            return return_types.topk(values.reshape(()), indices.reshape(()))
        return return_types.topk(values, indices)

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False):
        """(value, index) of the k-th smallest along dim (k from 1) in the stable ascending order."""
        t, axis, n = _along(self, dim, "kthvalue")
        _check_k(t, k, axis, n, "kthvalue", 1)
        values, indices = _network(t, axis, int(k), False, False)
        return return_types.kthvalue(
            *_pick(self, t, axis, values[:, int(k) - 1 : int(k)], indices[:, int(k) - 1 : int(k)], keepdim)
        )

    def median(self, dim=None, keepdim: bool = False):
        """The lower median: of the flattened tensor without `dim` (NaN when empty), else (values,
        indices) along `dim`; NaN where the row holds a NaN, with the index of its first NaN."""
        if dim is None:
            if prod(self.shape) == 0:
                return constant(math.nan)
            return self.reshape((prod(self.shape),)).median(0)[0]
        t, axis, n = _along(self, dim, "median")
        if n == 0:
            raise ShapeError(f"median of {self.label}: axis {axis} is empty")
        middle = (n - 1) // 2
        values, indices = _network(t, axis, middle + 1, False, True)  # NaNs first: the first one at 0
        nan = values[:, :1].isnan()
        values = where(nan, values[:, :1], values[:, middle:middle + 1])
        indices = where(nan, indices[:, :1], indices[:, middle:middle + 1])
        return return_types.median(*_pick(self, t, axis, values, indices, keepdim))


def _pick(x, t, axis: int, values, indices, keepdim: bool):
    """(rows, 1) results shaped as a reduction of x (viewed as t, at least 1-d) along `axis`."""
    lead = tuple(n for i, n in enumerate(t.shape) if i != axis)
    out = []
    for r in (values, indices):
        r = r.reshape(lead)
        out.append(r.unsqueeze(axis) if keepdim and x.ndim else r)
    return tuple(out)
