"""Views: how an edge of the graph reads its source node's buffer without copying.

A `View` maps a multi-index over its own shape to a flat position in the storage below it
(`offset + sum(i_k * stride_k)`) and says which indices are valid (`mask`: half-open ranges per
axis; an invalid index reads 0, which is how `pad` works). A stride of 0 broadcasts, a negative
stride flips, a stride > 1 steps.

A `ViewStack` is a tuple of views. The first reads the node's contiguous output buffer; each later
view reads the logical (row-major) flattening of the view beneath it. Movement ops fold into the top
view when the algebra is simple, and otherwise push a fresh contiguous view and apply themselves to
that, which is always correct. So every movement op is exact; folding only makes the index
expression shorter.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Optional, Sequence

import sympy

from .dims import Dim, dim, dims_equal, idiv

Range = tuple[Dim, Dim]


def contiguous_strides(shape: Sequence[Dim]) -> tuple[Dim, ...]:
    return _contiguous_strides(tuple(shape))


@functools.lru_cache(maxsize=65536)
def _contiguous_strides(shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """Memoised: the search asks for the strides of the same few shapes hundreds of thousands of times."""
    strides: list[Dim] = []
    running: Dim = 1
    for n in reversed(shape):
        strides.append(running)
        running = dim(running * n)
    return tuple(reversed(strides))


def _is_int(*values) -> bool:
    return all(isinstance(v, int) for v in values)


def _hashed_once(cls):
    """A frozen dataclass whose hash (the one the dataclass computes, of its fields) is computed once:
    views and view stacks key the index and binding memos. The cached hash stays out of a pickle,
    since SymPy's hashes (from str hashes) differ between processes."""
    names = tuple(f.name for f in fields(cls))
    cached = functools.cached_property(lambda self: hash(tuple(getattr(self, n) for n in names)))
    cached.__set_name__(cls, "_hash")
    cls._hash = cached
    cls.__hash__ = lambda self: self._hash
    cls.__getstate__ = lambda self: {k: v for k, v in self.__dict__.items() if k != "_hash"}
    return cls


@_hashed_once
@dataclass(frozen=True)
class View:
    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    offset: Dim = 0
    mask: Optional[tuple[Range, ...]] = None  # None: every index is valid

    @staticmethod
    def contiguous(shape: Sequence[Dim]) -> "View":
        shape = tuple(dim(n) for n in shape)
        return View(shape, contiguous_strides(shape))

    @functools.cached_property
    def is_contiguous(self) -> bool:
        return (
            self.mask is None
            and self.offset == 0
            and all(
                dims_equal(a, b) or dims_equal(n, 1)
                for a, b, n in zip(self.strides, contiguous_strides(self.shape), self.shape)
            )
        )

    def ranges(self) -> tuple[Range, ...]:
        return self.mask if self.mask is not None else tuple((0, n) for n in self.shape)

    def with_mask(self, ranges: Sequence[Range]) -> "View":
        full = all(dims_equal(lo, 0) and dims_equal(hi, n) for (lo, hi), n in zip(ranges, self.shape))
        return View(
            self.shape,
            self.strides,
            self.offset,
            None if full else tuple((dim(lo), dim(hi)) for lo, hi in ranges),
        )

    def axis_is_unmasked(self, axis: int) -> bool:
        lo, hi = self.ranges()[axis]
        return dims_equal(lo, 0) and dims_equal(hi, self.shape[axis])


@_hashed_once
@dataclass(frozen=True)
class ViewStack:
    views: tuple[View, ...]

    @staticmethod
    def of_buffer(shape: Sequence[Dim]) -> "ViewStack":
        return _buffer_stack(tuple(shape))

    @property
    def top(self) -> View:
        return self.views[-1]

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.top.shape

    @functools.cached_property
    def is_identity(self) -> bool:
        return len(self.views) == 1 and self.top.is_contiguous

    def _replace_top(self, view: View) -> "ViewStack":
        return ViewStack(self.views[:-1] + (view,))

    def _pushed(self) -> "ViewStack":
        return ViewStack(self.views + (View.contiguous(self.shape),))

    # --- movement ops: each returns a new stack ---------------------------------------------
    def permute(self, order: Sequence[int]) -> "ViewStack":
        v = self.top
        mask = None if v.mask is None else tuple(v.mask[a] for a in order)
        return self._replace_top(
            View(tuple(v.shape[a] for a in order), tuple(v.strides[a] for a in order), v.offset, mask)
        )

    def expand(self, shape: Sequence[Dim]) -> "ViewStack":
        v = self.top
        strides, ranges = list(v.strides), list(v.ranges())
        for axis, (old, new) in enumerate(zip(v.shape, shape)):
            if dims_equal(old, new):
                continue
            assert dims_equal(old, 1), "expand only broadcasts size-1 axes"
            lo, hi = ranges[axis]
            valid = dims_equal(lo, 0) and dims_equal(hi, 1)
            strides[axis], ranges[axis] = 0, (0, new) if valid else (0, 0)
        return self._replace_top(
            View(tuple(dim(n) for n in shape), tuple(strides), v.offset).with_mask(ranges)
        )

    def slice(self, axis: int, start: Dim, stop: Dim, step: int = 1) -> "ViewStack":
        """Keep indices start, start+step, ... < stop of one axis (0 <= start <= stop <= size, step >= 1)."""
        v = self.top
        n = dim(idiv(stop - start + step - 1, step)) if step != 1 else dim(stop - start)
        lo, hi = v.ranges()[axis]
        if v.axis_is_unmasked(axis):
            new_range = (0, n)
        elif _is_int(lo, hi, start, n):
            first = max(-(-(lo - start) // step), 0)
            last = min(max(-(-(hi - start) // step), 0), n)
            new_range = (min(first, last), last)
        elif step == 1:
            new_range = (sympy.Max(dim(lo - start), 0), sympy.Min(dim(hi - start), n))
        else:
            return self._pushed().slice(axis, start, stop, step)
        shape, strides, ranges = list(v.shape), list(v.strides), list(v.ranges())
        shape[axis], strides[axis], ranges[axis] = n, dim(v.strides[axis] * step), new_range
        offset = dim(v.offset + start * v.strides[axis])
        return self._replace_top(View(tuple(shape), tuple(strides), offset).with_mask(ranges))

    def pad(self, axis: int, before: Dim, after: Dim) -> "ViewStack":
        v = self.top
        shape, ranges = list(v.shape), list(v.ranges())
        lo, hi = ranges[axis]
        shape[axis] = dim(v.shape[axis] + before + after)
        ranges[axis] = (dim(lo + before), dim(hi + before))
        offset = dim(v.offset - before * v.strides[axis])
        return self._replace_top(View(tuple(shape), v.strides, offset, tuple(ranges)).with_mask(ranges))

    def flip(self, axis: int) -> "ViewStack":
        v = self.top
        n = v.shape[axis]
        strides, ranges = list(v.strides), list(v.ranges())
        lo, hi = ranges[axis]
        strides[axis], ranges[axis] = dim(-v.strides[axis]), (dim(n - hi), dim(n - lo))
        offset = dim(v.offset + (n - 1) * v.strides[axis])
        return self._replace_top(View(v.shape, tuple(strides), offset).with_mask(ranges))

    def reshape(self, shape: Sequence[Dim]) -> "ViewStack":
        shape = tuple(dim(n) for n in shape)
        v = self.top
        unit_axes = _only_unit_axes_change(v, shape)
        if unit_axes is not None:
            return self._replace_top(unit_axes)
        if v.mask is None:
            strides = _reshape_strides(v.shape, v.strides, shape)
            if strides is not None:
                return self._replace_top(View(shape, strides, v.offset))
        return ViewStack(self.views + (View.contiguous(shape),))

    def as_strided(self, shape: Sequence[Dim], strides: Sequence[Dim], offset: Dim = 0) -> "ViewStack":
        """Read the logical flattening of this stack with arbitrary strides (windows for conv and pooling)."""
        shape, strides = tuple(dim(n) for n in shape), tuple(dim(s) for s in strides)
        v = self.top
        if v.mask is None and View(v.shape, v.strides).is_contiguous:
            return self._replace_top(View(shape, strides, dim(v.offset + offset)))
        return ViewStack(self.views + (View(shape, strides, dim(offset)),))


def _only_unit_axes_change(v: View, shape: tuple[Dim, ...]) -> Optional[View]:
    """The view with size-1 axes dropped or inserted (masks kept), if that is all the reshape does."""
    kept = [a for a, n in enumerate(v.shape) if not dims_equal(n, 1)]
    new_kept = [a for a, n in enumerate(shape) if not dims_equal(n, 1)]
    if len(kept) != len(new_kept) or any(
        not dims_equal(v.shape[a], shape[b]) for a, b in zip(kept, new_kept)
    ):
        return None
    ranges = v.ranges()
    if any(not v.axis_is_unmasked(a) for a, n in enumerate(v.shape) if dims_equal(n, 1)):
        return None
    strides: list[Dim] = [0] * len(shape)
    new_ranges: list[Range] = [(0, n) for n in shape]
    for a, b in zip(kept, new_kept):
        strides[b], new_ranges[b] = v.strides[a], ranges[a]
    return View(tuple(shape), tuple(strides), v.offset).with_mask(new_ranges)


def _reshape_strides(old_shape, old_strides, new_shape) -> Optional[tuple[Dim, ...]]:
    """Strides that read `new_shape` from the same storage as (old_shape, old_strides), or None.

    Size-1 axes are dropped, then old and new axes are matched in groups of equal product; each old
    group must be internally contiguous (stride[i] == stride[i+1] * shape[i+1]). This is NumPy's
    no-copy reshape test, written for symbolic dims.
    """
    old = [(n, s) for n, s in zip(old_shape, old_strides) if not dims_equal(n, 1)]
    new_axes = [i for i, n in enumerate(new_shape) if not dims_equal(n, 1)]
    new_strides: list[Dim] = [0] * len(new_shape)
    i = j = 0
    while i < len(old) and j < len(new_axes):
        group_old, group_new = [i], [j]
        p_old, p_new = old[i][0], new_shape[new_axes[j]]
        while not dims_equal(p_old, p_new):
            bigger = _compare(p_old, p_new)
            if bigger == "new" and i + 1 < len(old):
                i += 1
                group_old.append(i)
                p_old = dim(p_old * old[i][0])
            elif bigger == "old" and j + 1 < len(new_axes):
                j += 1
                group_new.append(j)
                p_new = dim(p_new * new_shape[new_axes[j]])
            else:
                return None
        for a, b in zip(group_old, group_old[1:]):
            if not dims_equal(old[a][1], dim(old[b][1] * old[b][0])):
                return None
        stride = old[group_old[-1]][1]
        for k in reversed(group_new):
            new_strides[new_axes[k]] = stride
            stride = dim(stride * new_shape[new_axes[k]])
        i, j = i + 1, j + 1
    if i != len(old) or j != len(new_axes):
        return None
    return tuple(new_strides)


def _compare(p_old: Dim, p_new: Dim) -> Optional[str]:
    """Which product is a proper multiple of the other ('old' or 'new'), if that can be decided."""
    if _is_int(p_old, p_new):
        return "old" if p_old > p_new else "new"
    ratio = sympy.cancel(sympy.sympify(p_old) / p_new)
    numerator, denominator = sympy.fraction(ratio)
    if denominator == 1:
        return "old"
    if numerator == 1:
        return "new"
    return None


@functools.lru_cache(maxsize=65536)
def _buffer_stack(shape: tuple[Dim, ...]) -> ViewStack:
    return ViewStack((View.contiguous(shape),))
