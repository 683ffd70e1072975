"""The view algebra of sharding propagation: how an edge's views read a source node, dim by dim.

Sharding propagation (spmd.propagate) asks of every edge which source dim each of its dims reads
(`axis_map`), where a view's slice starts (`starts`), how a blocked dim ("tp:k") splits (`unblocked`)
and how to read a view with symbols renamed (`subs`). These are pure functions of the global graph;
the ones the sharding search asks again for every candidate are memoised.
"""
from __future__ import annotations

import functools
from typing import Optional

import sympy

from ..symbolic.dims import Dim, dim, dims_equal
from ..symbolic.index import index_of
from ..symbolic.view import View, ViewStack, contiguous_strides
from .mesh import split_entry


@functools.lru_cache(maxsize=8192)
def axis_map(views: ViewStack, src_shape: tuple) -> Optional[tuple]:
    """Propagation.axis_map, memoised: it depends on the global edge only, which the sharding search
    propagates again for every candidate."""
    shape = views.shape
    if (
        views.is_identity
        and len(shape) == len(src_shape)
        and all(dims_equal(a, b) for a, b in zip(shape, src_shape))
    ):
        return tuple(
            range(len(src_shape))
        )  # (an identity may also reshape (1, 4) to (4, 1): not this shortcut)
    idx = [sympy.Symbol(f"i{e}", integer=True, nonnegative=True) for e in range(len(shape))]
    flat, valid = index_of(views, idx, {i: n for i, n in zip(idx, shape)})
    if valid is not sympy.true:
        return None
    flat = sympy.expand(flat)
    strides = contiguous_strides(src_shape)
    used, mapping = set(), []
    for i, n in zip(idx, shape):
        c = flat.coeff(i)
        if c.free_symbols & set(idx):
            return None
        if c == 0 or dims_equal(n, 1):
            mapping.append(None)
            continue
        j = next((j for j in range(len(src_shape)) if j not in used and dims_equal(strides[j], c)
                  and dims_equal(src_shape[j], n)), None)
        if j is None:
            return None
        used.add(j)
        mapping.append(j)
    if sympy.expand(flat - sum((flat.coeff(i) * i for i in idx), sympy.Integer(0))) != 0:
        return None  # an offset: a slice of the source
    if any(not dims_equal(src_shape[j], 1) for j in range(len(src_shape)) if j not in used):
        return None
    return tuple(mapping)


@functools.lru_cache(maxsize=4096)
def ratio(a, b) -> Optional[Dim]:
    """a / b when it is a positive whole number (or a product of dims), else None."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 and a >= b else None
    q = sympy.cancel(sympy.sympify(a) / sympy.sympify(b))
    if q.is_Integer:
        return int(q) if q >= 1 else None
    num, den = sympy.fraction(q)
    return dim(q) if den == 1 and q.is_positive else None


def fits(extent, size) -> bool:
    """`extent` units lie within a dim of `size` (equal or a divisor of it)."""
    if dims_equal(extent, size):
        return True
    return isinstance(extent, int) and isinstance(size, int) and extent <= size and size % extent == 0


def unblocked(shape, spec) -> tuple[tuple, tuple]:
    """A dim split in k blocks ("tp:k") as the two dims it is: (k, n / k), the second split over tp."""
    out_shape, out_spec = [], []
    for n, entry in zip(shape, spec):
        axis, blocks = split_entry(entry)
        if blocks > 1:
            out_shape += [blocks, n // blocks]
            out_spec += [None, axis]
        else:
            out_shape.append(n)
            out_spec.append(entry)
    return tuple(out_shape), tuple(out_spec)


def starts(offset, shape, strides) -> Optional[list]:
    """A view's offset as the start index along each source dim (outermost first), or None."""
    if offset == 0:
        return [0] * len(shape)
    if not isinstance(offset, int):
        return None
    starts = []
    for n, s in zip(shape, strides):
        if not isinstance(s, int):  # a symbolic stride (T * 1536): the offset must lie below its least value
            least = sympy.sympify(s).subs({x: 1 for x in sympy.sympify(s).free_symbols})
            if not (least.is_Integer and offset < int(least)):
                return None
            starts.append(0)
            continue
        k, offset = divmod(offset, s) if s else (0, offset)
        starts.append(k)
    return (
        starts
        if offset == 0 and all(0 <= k < max(n, 1) for k, n in zip(starts, shape) if isinstance(n, int))
        else None
    )


def mentions(shape, symbol) -> bool:
    return any(symbol in sympy.sympify(n).free_symbols for n in shape)


def subs(views: ViewStack, names: dict) -> ViewStack:
    """The same views with symbols replaced (a global dim by its local one)."""
    def sub(x):
        return dim(sympy.sympify(x).xreplace(names)) if isinstance(x, sympy.Basic) else x

    return ViewStack(
        tuple(
            View(
                tuple(sub(n) for n in v.shape),
                tuple(sub(s) for s in v.strides),
                sub(v.offset),
                None if v.mask is None else tuple((sub(a), sub(b)) for a, b in v.mask),
            )
            for v in views.views
        )
    )
