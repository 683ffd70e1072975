"""Symbolic dimensions.

A dimension is a Python int or a SymPy expression over named positive-integer symbols ("B", "T").
Ints stay ints wherever possible, because SymPy arithmetic is slow and most dims are concrete.
`idiv` and `imod` are floor division and remainder on non-negative integers; they appear in derived
dims (a strided convolution's output size) and in index expressions, and render to C's `/` and `%`.
"""
from __future__ import annotations

import functools
from typing import Iterable, Mapping, Optional, Union

import numpy as np
import sympy

from ..errors import BindingError, ShapeError

Dim = Union[int, sympy.Expr]


def expand(e) -> sympy.Expr:
    """sympy.expand(e), answered at once where `e` is its own expansion: a sum of monomials, whose
    factors may be idiv or imod of such sums (most index expressions: `32*T*bm`, `q + idiv(b, c)`),
    which SymPy takes a tenth of a millisecond a new expression to find out."""
    e = sympy.sympify(e)
    return e if _is_expanded(e) else sympy.expand(e)


@functools.lru_cache(maxsize=65536)
def expanded(e) -> sympy.Expr:
    """`expand`, memoised beyond SymPy's own small cache: index analysis expands the same terms over
    and over."""
    return expand(e)


def _is_expanded(e) -> bool:
    return all(_is_factor(f) for term in sympy.Add.make_args(e) for f in sympy.Mul.make_args(term))


def _is_factor(f) -> bool:
    """A number, a symbol, a symbol's positive integer power, or idiv or imod of expanded sums."""
    return (f.is_Number or f.is_Symbol or f.is_Pow and f.base.is_Symbol and f.exp.is_Integer and f.exp > 0
            or isinstance(f, (idiv, imod)) and all(_is_expanded(a) for a in f.args))


def divide_term(term, c):
    """term / c if c divides the monomial `term` exactly (integer coefficient, symbol powers), else None."""
    if c == 0:
        return None
    c_coeff, c_rest = c.as_coeff_Mul()
    t_coeff, t_rest = term.as_coeff_Mul()
    if not (c_coeff.is_Integer and t_coeff.is_Integer) or int(t_coeff) % int(c_coeff):
        return None
    powers = dict(t_rest.as_powers_dict()) if t_rest != 1 else {}
    for base, exp in (c_rest.as_powers_dict().items() if c_rest != 1 else ()):
        if powers.get(base, 0) < exp:
            return None
        powers[base] = powers[base] - exp
    return sympy.Integer(int(t_coeff) // int(c_coeff)) * sympy.Mul(
        *[b**e for b, e in powers.items() if e != 0]
    )


@functools.lru_cache(maxsize=65536)
def split_multiple(a, c):
    """a = q*c + rest, where q*c collects the terms of `a` that c divides exactly. Memoised: every
    idiv and imod built, and every index simplified, asks it, mostly of the same few sums."""
    q, rest = [], []
    for term in sympy.Add.make_args(a):
        quotient = divide_term(term, c)
        if quotient is None:
            rest.append(term)
        else:
            q.append(quotient)
    return sympy.Add(*q), sympy.Add(*rest)


def exact_quotient(a, b):
    """a / b when b divides every term of a, else None (a cheap test: no polynomial division)."""
    q, rest = split_multiple(a, b)
    return q if rest == 0 else None


class idiv(sympy.Function):
    """floor(a / b) for a >= 0, b > 0 (so C's truncating `/` agrees)."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if b == 0:  # only in the index arithmetic of an empty tensor, which no thread evaluates
            return sympy.Integer(0)
        if b == 1:
            return a
        if a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        return exact_quotient(a, b)


class imod(sympy.Function):
    """a mod b for a >= 0, b > 0."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if b == 0 or b == 1 or a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) % int(b))
        if exact_quotient(a, b) is not None:
            return sympy.Integer(0)
        return None


def symbol(name: str) -> sympy.Symbol:
    if not isinstance(name, str) or not name.isidentifier():
        raise ShapeError(f"dimension name {name!r} is not an identifier (use names like 'B' or 'T')")
    return _symbol(name)


@functools.lru_cache(maxsize=4096)
def _symbol(name: str) -> sympy.Symbol:
    """SymPy returns the same Symbol for a name anyway, but only after sanitising its assumptions."""
    return sympy.Symbol(name, integer=True, positive=True)


def dim(value) -> Dim:
    """Normalise an int, a symbol name or a SymPy expression into a Dim."""
    if isinstance(value, bool):
        raise ShapeError(f"dimension {value!r} is a bool, not an int or a symbol name")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return symbol(value)
    if hasattr(value, "__index__") and not isinstance(value, sympy.Basic):
        return int(value)
    if isinstance(value, sympy.Basic):
        return _dim_of_expr(value)
    raise ShapeError(f"dimension {value!r} is neither an int, a symbol name nor a symbolic expression")


@functools.lru_cache(maxsize=65536, typed=True)
def _dim_of_expr(value: sympy.Basic) -> Dim:
    """`dim` of a SymPy expression, memoised: views rebuild the same strides and sizes many times."""
    if value.is_Integer:
        return int(value)
    if value.is_integer is False or not _whole_coefficients(value):  # 2.5, T / 2.0, (B*T + 2)/2
        raise ShapeError(
            f"dimension {value} is not integer arithmetic on dims (sums and products with integer "
            f"coefficients, idiv, imod, Max, Min): a reshape or slice that divides a symbolic size unevenly?"
        )
    # a user's sympy.Symbol("T") lacks our assumptions, so it would never equal symbol("T")
    return value.xreplace({s: symbol(s.name) for s in value.free_symbols})


@functools.lru_cache(maxsize=65536)
def _whole_coefficients(e: sympy.Basic) -> bool:
    """Integer arithmetic only: sums, products and positive powers of symbols with integer coefficients,
    idiv, imod, Max and Min (what codegen prints as C), every term with an integer coefficient."""
    for part in sympy.preorder_traversal(e):
        if isinstance(part, sympy.Pow) and not (part.exp.is_Integer and part.exp > 0):
            return False
        if not isinstance(
            part,
            (sympy.Add, sympy.Mul, sympy.Pow, sympy.Symbol, sympy.Integer, idiv, imod, sympy.Max, sympy.Min),
        ):
            return False
    return all(term.as_coeff_Mul()[0].is_Integer for term in sympy.Add.make_args(sympy.expand(e)))


def dims_equal(a: Dim, b: Dim) -> bool:
    if a is b:
        return True
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return _symbolic_equal(a, b)


@functools.lru_cache(maxsize=65536, typed=True)
def _symbolic_equal(a: Dim, b: Dim) -> bool:
    """Memoised on the dims as given: sympifying an int on every call cost more than the comparison."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    return a == b or expand(a - b) == 0


def prod(dims: Iterable[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = dim(out * d)
    return out


def free_symbols(d: Dim) -> set[sympy.Symbol]:
    return set() if isinstance(d, int) else set(d.free_symbols)


def evaluate_dim(d: Dim, bindings: Mapping[str, int]) -> int:
    """The value of a dim at a binding of symbol names to ints; an unbound symbol is an error."""
    if isinstance(d, int):
        return d
    return _evaluate(d, tuple((name, bindings.get(name)) for name in _names(d)))


@functools.lru_cache(maxsize=65536)
def _names(d: sympy.Expr) -> tuple[str, ...]:
    return tuple(sorted(s.name for s in d.free_symbols))


@functools.lru_cache(maxsize=65536)
def _evaluate(d: sympy.Expr, binding: tuple[tuple[str, int | None], ...]) -> int:
    missing = [name for name, value in binding if value is None]
    if missing:
        raise BindingError(
            f"dimension {', '.join(missing)} is unbound: feed an input that has it "
            f"or pass dims={{'{missing[0]}': ...}}"
        )
    value = d.xreplace({symbol(name): sympy.Integer(v) for name, v in binding})
    if not value.is_Integer:
        raise BindingError(f"dimension {d} does not evaluate to an integer at {dict(binding)} (got {value})")
    return int(value)


def check_dim_values(values, symbols: Optional[Iterable[str]], what: str = "dims") -> dict[str, int]:
    """`dims=` or `dims_hint=` as a dict of name -> int, refusing what no binding can mean: a value
    that is not a non-negative int (a bool included), or a name that is not one of `symbols`."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise BindingError(f"{what} must be a dict of dimension name -> int, got {type(values).__name__}")
    known = None if symbols is None else set(symbols)
    out = {}
    for name, value in values.items():
        if known is not None and name not in known:
            raise BindingError(f"{what} names {name!r}, which is not a dimension of this graph "
                               f"(its dimensions are {', '.join(sorted(known)) or 'none'})")
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
            raise BindingError(f"{what}[{name!r}] = {value!r} must be a non-negative int")
        out[name] = int(value)
    return out


def evaluate_size(shape: Iterable[Dim], bindings: Mapping[str, int]) -> int:
    """The number of elements of `shape` at a binding (no symbolic product is formed)."""
    size = 1
    for d in shape:
        size *= evaluate_dim(d, bindings)
    return size


def show(d: Dim) -> str:
    return str(d)


def evaluate_value(value, bindings: Mapping[str, int]) -> float:
    """A Constant's value (a float, or a SymPy expression such as 1/T) at a binding."""
    if not isinstance(value, sympy.Basic):
        return float(value)
    names = {s.name for s in value.free_symbols}
    missing = sorted(n for n in names if n not in bindings)
    if missing:
        raise BindingError(
            f"dimension {', '.join(missing)} is unbound: feed an input that has it "
            f"or pass dims={{'{missing[0]}': ...}}"
        )
    return float(_as_double(value, {symbol(n): bindings[n] for n in names}))


def _as_double(e, values: Mapping[sympy.Symbol, int]) -> np.float64:
    """`e` in IEEE double arithmetic, operation by operation as codegen's C printer writes it, so the
    reference and the kernels agree at every binding: 1/T at T = 0 is inf on both (not SymPy's zoo)."""
    if e.is_Number:
        return np.float64(float(e))
    if e.is_Symbol:
        return np.float64(values[e])
    if isinstance(e, (idiv, imod, sympy.Max, sympy.Min)):
        return np.float64(evaluate_dim(e, {s.name: v for s, v in values.items()}))
    with np.errstate(all="ignore"):
        if isinstance(e, (sympy.Add, sympy.Mul)):
            terms = [_as_double(a, values) for a in e.args]
            return functools.reduce(
                (lambda x, y: x + y) if isinstance(e, sympy.Add) else (lambda x, y: x * y), terms
            )
        if isinstance(e, sympy.Pow) and e.exp.is_Rational:
            base = _as_double(e.base, values)
            if e.exp == sympy.Rational(1, 2) or e.exp == sympy.Rational(-1, 2):
                root = np.sqrt(base)
                return root if e.exp > 0 else np.float64(1.0) / root
            if e.exp.is_Integer:
                product = functools.reduce(lambda x, y: x * y, [base] * abs(int(e.exp)))
                return product if e.exp > 0 else np.float64(1.0) / product
    raise BindingError(
        f"cannot evaluate the constant {e} (only sums, products, integer powers and square roots of dims)"
    )
