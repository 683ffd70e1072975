"""Printing SymPy index and dimension expressions as C.

Index arithmetic is printed for `long long` operands (every loop index and dim parameter is 64-bit),
`idiv`/`imod` become `/` and `%` (exact for the non-negative values they are used on), and masks
become `&&` chains. Identifiers come only from the `names` table built by refcomp, never from a
user's input or dim names.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import sympy

from ..symbolic.dims import idiv, imod

INT32_MAX = 2**31 - 1


def comment_text(text: str) -> str:
    """`text` made safe inside a `//` comment of generated source. Comments show user text (the
    file names in provenance), which must never end the comment or begin a line of C: unprintable
    characters (newlines, carriage returns, other line separators) become escapes, `/*` and `*/`
    are split, and a backslash ending the line (which would continue the comment onto the next
    line) is escaped."""
    text = "".join(
        c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}" for c in text
    )
    text = text.replace("*/", "* /").replace("/*", "/ *")
    return text[:-1] + "\\x5c" if text.endswith("\\") else text


def float_literal(value: float) -> str:
    """The float32 nearest `value` as a C literal that reads back exactly."""
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = repr(float(np.float32(value)))
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}f" if not text.startswith("-") else f"({text}f)"


@functools.lru_cache(maxsize=65536)
def _printed_order(e: sympy.Add) -> tuple:
    """The terms of a sum in printing order (numbers last), memoised: SymPy's sort keys are dear and
    the same sums are printed in kernel after kernel."""
    return tuple(sorted(e.args, key=lambda t: (t.is_Number, sympy.default_sort_key(t))))


class CPrinter:
    def __init__(self, names: dict[sympy.Symbol, str]):
        self.names = names
        self.used: set[sympy.Symbol] = set()

    def _symbol(self, e) -> str:
        if e not in self.names:
            raise KeyError(f"no C name for symbol {e}")
        self.used.add(e)
        return self.names[e]

    def int(self, e) -> str:
        e = sympy.sympify(e)
        if e.is_Integer:
            v = int(e)
            return f"{v}LL" if abs(v) > INT32_MAX else str(v)
        if e.is_Symbol:
            return self._symbol(e)
        if isinstance(e, sympy.Add):
            terms = _printed_order(e)
            out = self.int(terms[0])
            for t in terms[1:]:
                coeff, rest = t.as_coeff_Mul()
                if coeff.is_negative:
                    out += f" - {self.int(-t)}"
                else:
                    out += f" + {self.int(t)}"
            return out
        if isinstance(e, sympy.Mul):
            coeff, rest = e.as_coeff_Mul()
            factors = [self._factor(f) for f in sympy.Mul.make_args(rest)]
            if coeff == -1:
                return "-" + " * ".join(factors)
            return " * ".join(([self.int(coeff)] if coeff != 1 else []) + factors)
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
            return " * ".join([self._factor(e.base)] * int(e.exp))
        if isinstance(e, idiv):
            return f"({self.int(e.args[0])}) / {self._factor(e.args[1])}"
        if isinstance(e, imod):
            return f"({self.int(e.args[0])}) % {self._factor(e.args[1])}"
        if isinstance(e, (sympy.Max, sympy.Min)):
            fn = "rc_imax" if isinstance(e, sympy.Max) else "rc_imin"
            out = self.int(e.args[0])
            for a in e.args[1:]:
                out = f"{fn}({out}, {self.int(a)})"
            return out
        raise NotImplementedError(f"cannot print index expression {e} ({type(e).__name__}) as C")

    def _factor(self, e) -> str:
        text = self.int(e)
        e = sympy.sympify(e)
        return text if (e.is_Atom and not (e.is_Integer and int(e) < 0)) else f"({text})"

    def cond(self, b) -> str:
        if b is sympy.true or b is True:
            return "true"
        if isinstance(b, sympy.And):
            return " && ".join(self.cond(a) for a in b.args)
        ops = {sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}
        for cls, op in ops.items():
            if isinstance(b, cls):
                return f"({self.int(b.lhs)} {op} {self.int(b.rhs)})"
        raise NotImplementedError(f"cannot print condition {b} as C")

    def real(self, e) -> str:
        """A float-valued expression of dims (a Constant such as 1/T), computed in double, then rounded."""
        if not isinstance(e, sympy.Basic):
            return float_literal(float(e))
        if not e.free_symbols:
            return float_literal(float(e))
        return f"(float)({self._double(e)})"

    def double(self, e) -> str:
        """A float64 Constant's value (a number or an expression of dims), computed in double."""
        return self._double(sympy.sympify(e))

    def _double(self, e) -> str:
        if e.is_Number:
            return repr(float(e))
        if e.is_Symbol:
            return f"(double){self._symbol(e)}"
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(self._double(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + " * ".join(self._double(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow):
            if e.exp == -1:
                return f"(1.0 / {self._double(e.base)})"
            if e.exp == sympy.Rational(1, 2):
                return f"sqrt({self._double(e.base)})"
            if e.exp == sympy.Rational(-1, 2):
                return f"(1.0 / sqrt({self._double(e.base)}))"
            if e.exp.is_Integer and e.exp > 0:
                return "(" + " * ".join([self._double(e.base)] * int(e.exp)) + ")"
            if e.exp.is_Integer and e.exp < 0:
                return "(1.0 / (" + " * ".join([self._double(e.base)] * -int(e.exp)) + "))"
        if isinstance(e, (idiv, imod, sympy.Max, sympy.Min)):
            return f"(double)({self.int(e)})"
        raise NotImplementedError(f"cannot print constant expression {e} as C")
