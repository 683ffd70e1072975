"""Index expressions: what a view stack means as integer arithmetic, for code generation.

`index_of(stack, idx)` turns per-axis index expressions of the visible shape into the flat position
in the producer's contiguous buffer, plus the validity condition under which that position is read
(outside it the value is 0). Each view contributes `offset + sum(i_k * stride_k)`; between stacked
views the flat position is unravelled back into per-axis indices with `idiv`/`imod`.
"""
from __future__ import annotations

import functools
from typing import Mapping, Optional, Sequence

import sympy

from .dims import Dim, dims_equal, expanded, idiv, imod
from .simplify import ranges_of, simplify_index
from .view import View, ViewStack, contiguous_strides


@functools.lru_cache(maxsize=65536)
def conjunction(*conditions) -> sympy.Basic:
    """sympy.And(*conditions), memoised: SymPy caches no And, and kernels build the same masks and
    tile bounds (`bm < M && ka < K`) over and over. And of one condition (the others true) is that
    condition, without SymPy's canonical forms of relations."""
    others = [c for c in conditions if c is not sympy.true]
    if not others:
        return sympy.true
    if len(others) == 1 and isinstance(others[0], sympy.Basic):
        return others[0]
    return sympy.And(*conditions)


@functools.lru_cache(maxsize=65536)
def less(a, b) -> sympy.Basic:
    """sympy.Lt(a, b), memoised as `conjunction` is. An index variable below a positive bound (a
    tile's `bm < M`, `ka < K`) is built unevaluated: SymPy, asked to evaluate, would only find out
    (at a millisecond a new pair) that both answers are possible, and build the same thing."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    if _unbounded_index(a) and (b.is_Integer and b > 0 or b.is_positive):
        return sympy.Lt(a, b, evaluate=False)  # a = 0 holds, a = b does not: it cannot be decided
    return sympy.Lt(a, b)


def _unbounded_index(a) -> bool:
    """A symbol whose assumptions allow every value 0, 1, 2, ... (as index variables' do)."""
    return a.is_Symbol and a.is_integer and a.is_nonnegative and a.is_zero is None and a.is_positive is None


@functools.lru_cache(maxsize=65536)
def less_equal(a, b) -> sympy.Basic:
    """sympy.Le(a, b), memoised as `conjunction` is."""
    return sympy.Le(a, b)


def unravel(flat: sympy.Expr, shape: Sequence[Dim]) -> list[sympy.Expr]:
    """Per-axis indices of a row-major flat position (the first axis needs no modulo)."""
    return list(_unravel(flat, tuple(shape)))


def unravel_within(flat: sympy.Expr, shape: Sequence[Dim], ranges: Mapping) -> tuple[sympy.Expr, ...]:
    """unravel's components, each simplified under `ranges` (symbol -> exclusive bound). Memoised:
    a kernel's fused producers and the search's candidate kernels unravel the same few positions
    over and over (a GPT-2 block: some 1,400 calls, under a hundred distinct)."""
    return _unravel_within(flat, tuple(shape), ranges_of(ranges, (flat,)))


@functools.lru_cache(maxsize=8192)
def _unravel_within(flat, shape: tuple, ranges: frozenset) -> tuple[sympy.Expr, ...]:
    bounds = dict(ranges)
    return tuple(simplify_index(e, bounds) for e in _unravel(flat, shape))


@functools.lru_cache(maxsize=8192)
def _unravel(flat, shape: tuple) -> tuple[sympy.Expr, ...]:
    strides = contiguous_strides(shape)
    out = []
    for axis, (n, stride) in enumerate(zip(shape, strides)):
        if dims_equal(n, 1):
            out.append(sympy.Integer(0))
            continue
        q = idiv(flat, stride)
        out.append(q if axis == 0 else imod(q, n))
    return tuple(out)


def _view_flat(view: View, idx: Sequence[sympy.Expr]) -> tuple[sympy.Expr, sympy.Basic]:
    # expand distributes over a sum, and the sum of expanded terms is expanded: each term (an index
    # times a stride) is expanded once, however many flat positions it appears in
    terms = [expanded(i * s) for i, s in zip(idx, view.strides) if s != 0]
    flat = sympy.Add(expanded(sympy.sympify(view.offset)), *terms)
    valid: sympy.Basic = sympy.true
    if view.mask is not None:
        for axis, (i, (lo, hi)) in enumerate(zip(idx, view.mask)):
            if view.axis_is_unmasked(axis):
                continue
            n = view.shape[axis]  # i always lies in [0, n): only the bounds inside that range test anything
            valid = conjunction(valid, less_equal(lo, i) if not dims_equal(lo, 0) else sympy.true,
                                less(i, hi) if not dims_equal(hi, n) else sympy.true)
    return flat, valid


@functools.lru_cache(maxsize=8192)
def _index_of_cached(
    stack: ViewStack, idx: tuple[sympy.Expr, ...], ranges: tuple
) -> tuple[sympy.Expr, sympy.Basic]:
    bounds = dict(ranges)
    valid: sympy.Basic = sympy.true
    current = list(idx)
    flat = sympy.Integer(0)
    for level in range(len(stack.views) - 1, -1, -1):
        flat, level_valid = _view_flat(stack.views[level], current)
        flat = simplify_index(flat, bounds)
        valid = conjunction(valid, level_valid)
        if level:
            current = list(unravel_within(flat, stack.views[level - 1].shape, bounds))
    return flat, valid


def index_of(
    stack: ViewStack, idx: Sequence[sympy.Expr], ranges: Optional[Mapping] = None
) -> tuple[sympy.Expr, sympy.Basic]:
    """Flat position and validity of reading `stack` at `idx`; `ranges` (symbol -> exclusive bound)
    simplifies."""
    idx = tuple(i if isinstance(i, sympy.Basic) else sympy.sympify(i) for i in idx)
    return _index_of_cached(stack, idx, ranges_of(ranges, idx))
