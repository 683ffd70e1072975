"""Range-aware simplification of index expressions.

Unravelling a flat index and re-linearising it produces `idiv`/`imod` towers that SymPy cannot
simplify without knowing that an index variable lies in [0, n). Given those ranges, two identities
do almost all the work (for integers, and only where the remainder term is provably in range):

    idiv(q*c + b, c) = q + idiv(b, c)    and    idiv(b, c) = 0   when 0 <= b < c
    imod(q*c + b, c) = imod(b, c)        and    imod(b, c) = b   when 0 <= b < c

Bounds are inclusive (lo, hi) pairs of SymPy expressions; dims are positive symbols.
"""
from __future__ import annotations

import functools
from typing import Mapping, Optional

import sympy

from .dims import expand, expanded, idiv, imod, split_multiple

Bounds = tuple[sympy.Expr, sympy.Expr]


def _nonneg(e) -> bool:
    if e.is_Integer:  # the common case with concrete dims, without SymPy's assumptions
        return int(e) >= 0
    return _nonneg_expr(e)


@functools.lru_cache(maxsize=65536)
def _nonneg_expr(e) -> bool:
    """Memoised: SymPy's assumptions are asked afresh of every new expression object."""
    e = expand(e)
    return bool(e.is_nonnegative) or (e.is_Integer and int(e) >= 0)


def _integers(*values) -> bool:
    return all(v.is_Integer for v in values)


def bounds(e, ranges: Mapping[sympy.Symbol, sympy.Expr]) -> Optional[Bounds]:
    """Inclusive bounds of `e`, where each index symbol s lies in [0, ranges[s]) (or in [lo, hi) when
    ranges[s] is a pair, as inside a mask); None if unknown."""
    e = sympy.sympify(e)
    return _bounds(e, ranges_of(ranges, (e,)))


def ranges_of(ranges: Mapping, exprs) -> frozenset:
    """The part of `ranges` that the symbols of `exprs` look up, as a memo key. Bounds and
    simplification consult the range of a symbol they meet in the expression and of no other, so
    the answer is the same; a kernel's ranges grow with every bound index variable, and keyed by all
    of them the memos never hit and each key cost time in proportion."""
    if not ranges:
        return frozenset()
    found = ranges.get  # (a range is never None) one lookup per symbol: kernels ask this thousands of times
    return frozenset(
        (s, r)
        for e in exprs if isinstance(e, sympy.Basic)
        for s in _symbols(e) if (r := found(s)) is not None
    )


@functools.lru_cache(maxsize=65536)
def _symbols(e) -> frozenset:
    return frozenset(e.free_symbols)


@functools.lru_cache(maxsize=65536)
def _bounds(e, ranges_items: frozenset) -> Optional[Bounds]:
    """`bounds`, memoised: simplifying one index asks for the bounds of the same terms many times.
    Where every part is an integer (concrete dims) the arithmetic is done on Python ints."""
    if e.is_Integer:
        return e, e
    if e.is_Symbol:
        ranges = dict(ranges_items)
        if e in ranges:
            lo, hi = ranges[e] if isinstance(ranges[e], tuple) else (0, ranges[e])
            return sympy.sympify(lo), expand(hi - 1)
        return (e, e) if e.is_positive else None  # a dim: itself
    if isinstance(e, sympy.Add):
        parts = []
        for term in e.args:
            b = _bounds(term, ranges_items)
            if b is None:
                return None
            parts.append(b)
        if all(_integers(*b) for b in parts):
            return sympy.Integer(sum(int(b[0]) for b in parts)), sympy.Integer(sum(int(b[1]) for b in parts))
        lo, hi = sympy.Integer(0), sympy.Integer(0)
        for b in parts:
            lo, hi = lo + b[0], hi + b[1]
        return expand(lo), expand(hi)
    if isinstance(e, sympy.Mul):
        coeff, rest = (
            e.as_independent(*(s for s, _ in ranges_items)) if ranges_items else (e, sympy.Integer(1))
        )
        b = _bounds(rest, ranges_items) if rest != 1 else (sympy.Integer(1), sympy.Integer(1))
        if b is None:
            return None
        if _integers(coeff, *b):
            lo, hi = int(coeff) * int(b[0]), int(coeff) * int(b[1])
            return (
                (sympy.Integer(lo), sympy.Integer(hi))
                if int(coeff) >= 0
                else (sympy.Integer(hi), sympy.Integer(lo))
            )
        if _nonneg(coeff):
            return expand(coeff * b[0]), expand(coeff * b[1])
        if _nonneg(-coeff):
            return expand(coeff * b[1]), expand(coeff * b[0])
        return None
    if isinstance(e, idiv):
        b = _bounds(e.args[0], ranges_items)
        return None if b is None or not _nonneg(b[0]) else (idiv(b[0], e.args[1]), idiv(b[1], e.args[1]))
    if isinstance(e, imod):
        return sympy.Integer(0), expand(e.args[1] - 1)
    return None


@functools.lru_cache(maxsize=65536)
def _split(a, c):
    """a = q*c + b: the terms of `a` that are multiples of c, divided by c, and the rest.

    A divisor that is a sum (a padded extent such as T + 2) divides no single term of the expanded
    `a`, so polynomial division does the work there, dividing by c's symbols first. Memoised: the
    same towers recur in every kernel that reads through the same views, under other ranges.
    """
    a = expanded(a)
    if isinstance(c, sympy.Add):
        try:
            gens = sorted(c.free_symbols, key=str)
            gens += [g for g in sympy.Poly(a).gens if g not in gens]
            q, b = sympy.div(a, c, *gens, domain="ZZ")
            return q.as_expr() if hasattr(q, "as_expr") else q, b.as_expr() if hasattr(b, "as_expr") else b
        except (sympy.PolynomialError, sympy.CoercionFailed, sympy.GeneratorsError):
            pass
    q, b = split_multiple(a, c)
    constant, rest = b.as_coeff_Add()
    if c.is_Integer and c > 0 and constant.is_Integer and abs(constant) >= c:
        # a constant offset past c (a read at a fixed index of an outer axis, say 1026 = 1024 + 2)
        # carries its whole multiples of c into q: floor((k c + r + x) / c) = k + floor((r + x) / c)
        carry = int(constant) // int(c)
        q, b = expand(q + carry), expand(rest + (int(constant) - carry * int(c)))
    return q, b


def _in_range(b, c, ranges_items: frozenset) -> bool:
    bb = _bounds(b, ranges_items)
    if bb is None or not _nonneg(bb[0]):
        return False
    return int(c) - 1 - int(bb[1]) >= 0 if _integers(c, bb[1]) else _nonneg(c - 1 - bb[1])


def simplify_index(e, ranges: Mapping[sympy.Symbol, sympy.Expr]):
    if not ranges:
        return e
    e = sympy.sympify(e)
    return _simplify(e, ranges_of(ranges, (e,)))


@functools.lru_cache(maxsize=65536)
def _simplify(e, ranges_items):
    if e.is_Atom:
        return e
    args = [_simplify(a, ranges_items) for a in e.args]
    if isinstance(e, (idiv, imod)):
        a, c = args
        if isinstance(a, idiv) and isinstance(e, idiv):  # idiv(idiv(x, b), c) = idiv(x, b*c)
            return _simplify(idiv(a.args[0], expand(a.args[1] * c)), ranges_items)
        q, b = _split(a, c)
        b_bounds = _bounds(b, ranges_items)
        if b_bounds is None or not _nonneg(b_bounds[0]):
            return e.func(a, c)
        if isinstance(e, idiv):
            return expand(q + (sympy.Integer(0) if _in_range(b, c, ranges_items) else idiv(b, c)))
        return b if _in_range(b, c, ranges_items) else imod(b, c)
    return e.func(*args)


def tighten(ranges: Mapping[sympy.Symbol, object], valid) -> dict:
    """The ranges that hold where `valid` (an And of bounds such as 1 <= o2, o2 < T + 1) is true."""
    out = dict(ranges)
    for cond in (valid.args if isinstance(valid, sympy.And) else (valid,)):
        if isinstance(cond, (sympy.Le, sympy.Lt, sympy.Ge, sympy.Gt)):
            small, big = (
                (cond.lhs, cond.rhs) if isinstance(cond, (sympy.Le, sympy.Lt)) else (cond.rhs, cond.lhs)
            )
            strict = isinstance(cond, (sympy.Lt, sympy.Gt))
            if big in out and big.is_Symbol:  # small <= sym (or small < sym)
                lo, hi = out[big] if isinstance(out[big], tuple) else (0, out[big])
                out[big] = (expand(small + 1) if strict else small, hi)
            elif small in out and small.is_Symbol:  # sym < big (or sym <= big)
                lo, hi = out[small] if isinstance(out[small], tuple) else (0, out[small])
                out[small] = (lo, big if strict else expand(big + 1))
    return out
