"""Reading a dim back from the text `str(dim)` gave it, without evaluating the text.

Program files are untrusted input, so their dims are parsed by a grammar of exactly what a dim may
be: integers, names, `+ - * **` (a whole positive power), `//` and `%` (idiv, imod), parentheses,
and the calls idiv, imod, Max and Min; where a value may be a ratio of dims (a Constant's `1/B`,
a mean's scale), also `/` and negative powers. Anything else is refused with the reason; nothing is handed
to `sympy.sympify`, which would run Python. The parser is an operator-precedence loop over a stack,
so a deeply nested text cannot exhaust Python's recursion, and its size and nesting are bounded.
A dim reads back as it was printed, not only equal to it: a chain of products is one SymPy product,
so a program file's graph is the graph it was saved for (exec.saved compares their texts).
"""
from __future__ import annotations

import re

import sympy

from .dims import idiv, imod, symbol

MAX_TEXT = 4096  # characters: a real dim is far shorter
MAX_DEPTH = 64  # open parentheses at once
MAX_DIGITS = 30  # an integer literal (a dim's value fits in 64 bits: 19 digits)
CALLS = {"idiv": (idiv, 2), "imod": (imod, 2), "Max": (sympy.Max, None), "Min": (sympy.Min, None)}
BINARY = {"+": (1, lambda a, b: a + b), "-": (1, lambda a, b: a - b), "*": (2, lambda a, b: a * b),
          "//": (2, idiv), "%": (2, imod), "**": (4, None)}  # ** is right-associative and checked below
NEGATE = 3  # unary minus binds tighter than * and looser than **: -T**2 is -(T**2)
RATIO = {"/": (2, lambda a, b: a / b)}
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(\*\*|//|[-+*/%(),]))")


class DimTextError(ValueError):
    """Text that is not a dim; the caller names the file and place."""


class _Factors(list):
    """A chain of products not yet multiplied: `5*(B + 2)*(T + 2)` is read as SymPy's one product of
    three factors, as it was printed, where multiplying left to right would distribute the 5 over
    B + 2 first and give another expression, (5*B + 10)*(T + 2), equal but spelled apart."""


def _whole(value):
    """A value, its chain of products (if any) multiplied out at once."""
    return sympy.Mul(*value) if isinstance(value, _Factors) else value


def _tokens(text: str):
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise DimTextError(f"unexpected {text[pos:pos + 10]!r} at character {pos}")
        number, name, punct = m.groups()
        if number is not None and len(number) > MAX_DIGITS:
            raise DimTextError(f"an integer of {len(number)} digits")
        yield (
            ("int", int(number))
            if number is not None
            else ("name", name)
            if name is not None
            else ("op", punct)
        )
        pos = m.end()


def _power(base, exponent, ratio: bool):
    low = -64 if ratio else 1
    if not (isinstance(exponent, sympy.Integer) and low <= int(exponent) <= 64 and exponent != 0):
        raise DimTextError(f"a power must be a whole number from {low} to 64 (not 0), got {exponent}")
    return base ** exponent


def parse_dim(text: str, ratio: bool = False):
    """The dim (an int or a SymPy expression over refcomp's symbols) that `text` spells; with
    `ratio`, a value that may divide dims (1/B)."""
    binary = {**BINARY, **RATIO} if ratio else BINARY
    if len(text) > MAX_TEXT:
        raise DimTextError(f"a dim of {len(text)} characters (at most {MAX_TEXT})")
    values: list = []
    # frames of pending operators: ("bin", op) / ("neg",), and ("(", call or None, argument count)
    pending: list = []
    expect_operand = True

    def reduce_while(stronger_than: int) -> None:
        while pending and pending[-1][0] in ("bin", "neg"):
            top = pending[-1]
            level = NEGATE if top[0] == "neg" else binary[top[1]][0]
            if level < stronger_than or (
                top[0] == "bin" and top[1] == "**" and stronger_than == binary["**"][0]
            ):
                return
            pending.pop()
            if top[0] == "neg":  # a factor of -1, as SymPy prints -(B + 1)*(T + 2)
                values.append(_Factors([sympy.Integer(-1), _whole(values.pop())]))
            elif top[1] == "*":
                b, a = _whole(values.pop()), values.pop()
                values.append(_Factors(a + [b]) if isinstance(a, _Factors) else _Factors([a, b]))
            else:
                b, a = _whole(values.pop()), _whole(values.pop())
                values.append(_power(a, b, ratio) if top[1] == "**" else binary[top[1]][1](a, b))

    tokens = list(_tokens(text))
    for k, (kind, value) in enumerate(tokens):
        if expect_operand:
            if kind == "int":
                values.append(sympy.Integer(value))
                expect_operand = False
            elif kind == "name" and value in CALLS:
                if k + 1 >= len(tokens) or tokens[k + 1] != ("op", "("):
                    raise DimTextError(f"{value} must be called: {value}(...)")
            elif kind == "name":
                values.append(symbol(value))
                expect_operand = False
            elif value == "(":
                call = (
                    tokens[k - 1][1]
                    if k and tokens[k - 1][0] == "name" and tokens[k - 1][1] in CALLS
                    else None
                )
                pending.append(("(", call, 1))
                if sum(1 for p in pending if p[0] == "(") > MAX_DEPTH:
                    raise DimTextError(f"more than {MAX_DEPTH} nested parentheses")
            elif value == "-":
                pending.append(("neg",))
            elif value == "+":
                pass  # a unary plus changes nothing
            else:
                raise DimTextError(f"expected a number, a name or '(' but found {value!r}")
            continue
        if kind != "op" or value == "(":
            raise DimTextError(f"expected an operator but found {value!r}")
        if value in binary:
            level = binary[value][0]
            reduce_while(level)
            pending.append(("bin", value))
            expect_operand = True
        elif value in (",", ")"):
            reduce_while(0)
            if not pending or pending[-1][0] != "(":
                raise DimTextError(f"an unmatched {value!r}")
            if values:
                values[-1] = _whole(values[-1])  # a parenthesised product or an argument is one value
            _, call, count = pending.pop()
            if value == ",":
                if call is None:
                    raise DimTextError("a ',' outside a call")
                pending.append(("(", call, count + 1))
                expect_operand = True
                continue
            if call is not None:
                function, arity = CALLS[call]
                if arity is not None and count != arity or count > len(values):
                    raise DimTextError(f"{call} takes {arity} arguments, got {count}")
                args = values[len(values) - count:]
                del values[len(values) - count:]
                values.append(function(*args))
    if expect_operand:
        raise DimTextError("the text ends where a value was expected")
    reduce_while(0)
    if pending or len(values) != 1:
        raise DimTextError("unbalanced parentheses")
    value = _whole(values[0])
    return int(value) if value.is_Integer else value
