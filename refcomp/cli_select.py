"""Choosing cases by name on the command line: `--case NAME` and pytest's `-k` grammar.

An expression is parsed, never evaluated as code, into postfix steps by one left-to-right pass
(operator precedence by a stack, not by recursion), and matched by a stack machine: an expression a
user types may nest thousands deep, and neither step may then overflow Python's stack.
"""
from __future__ import annotations

import difflib
import re
from typing import Iterable, Optional, Sequence

from .errors import RefcompError


class UsageError(RefcompError):
    """A mistake on the command line: printed as one line, exit status 2."""


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """`; did you mean 'nn_layer_norm'?` for the closest names (difflib), or "" when none is close."""
    close = [repr(n) for n in difflib.get_close_matches(word, list(names), n=3, cutoff=0.6)]
    return (
        f"; did you mean {' or '.join([', '.join(close[:-1]), close[-1]] if len(close) > 1 else close)}?"
        if close
        else ""
    )


BINDING = {"or": 1, "and": 2}  # `not` binds tightest, then `and`, then `or`, as in pytest


def parse_keywords(expression: str) -> list[tuple]:
    """pytest's -k grammar as postfix steps: ("word", w) pushes whether w is in the name, ("not",)
    negates the top, ("and",) and ("or",) combine the top two. Parentheses group."""
    steps: list[tuple] = []
    pending: list[str] = []  # operators and open parentheses not yet emitted
    want_word = True  # a word, `not` or `(` comes next (else `and`, `or`, `)` or the end)

    def fail(why: str):
        raise UsageError(f"-k {expression!r}: {why} (words, not, and, or and parentheses, as pytest's -k)")

    def word_done():  # an operand is complete: the `not`s waiting for it apply now
        while pending and pending[-1] == "not":
            steps.append((pending.pop(),))

    for token in re.findall(r"\(|\)|[^\s()]+", expression):
        if want_word:
            if token in ("not", "("):
                pending.append(token)
            elif token in (")", "and", "or"):
                fail(f"{token!r} where a word belongs")
            else:
                steps.append(("word", token.lower()))
                word_done()
                want_word = False
        elif token in BINDING:
            while pending and BINDING.get(pending[-1], 0) >= BINDING[token]:
                steps.append((pending.pop(),))
            pending.append(token)
            want_word = True
        elif token == ")":
            while pending and pending[-1] != "(":
                steps.append((pending.pop(),))
            if not pending:
                fail("')' after a complete expression")
            pending.pop()
            word_done()
        else:
            fail(f"{token!r} after a complete expression")
    if want_word:
        fail("a word is missing at the end")
    while pending:
        if pending[-1] == "(":
            fail("a '(' is not closed")
        steps.append((pending.pop(),))
    return steps


def keyword_match(steps: Sequence[tuple], name: str) -> bool:
    """Whether `name` satisfies the parsed -k expression (each word a case-insensitive substring)."""
    name, stack = name.lower(), []
    for step in steps:
        if step[0] == "word":
            stack.append(step[1] in name)
        elif step[0] == "not":
            stack.append(not stack.pop())
        else:
            right, left = stack.pop(), stack.pop()
            stack.append((left and right) if step[0] == "and" else (left or right))
    return stack[0]


def choose_names(names: Sequence[str], exact: Optional[Sequence[str]], keywords: Optional[Sequence[str]],
                 what: str = "golden case") -> Optional[list[str]]:
    """The names `--case NAME` (exact, repeatable) and `-k EXPR` (repeatable; a name matching any
    expression) select, in `names`' order; None when neither is given (every case). A name or an
    expression that selects nothing is a UsageError that suggests the closest names."""
    if not exact and not keywords:
        return None
    unknown = [n for n in exact or () if n not in names]
    if unknown:
        raise UsageError(f"no {what} named {', '.join(map(repr, unknown))}{did_you_mean(unknown[0], names)}")
    parsed = [parse_keywords(expression) for expression in keywords or ()]
    for expression, steps in zip(keywords or (), parsed):
        if not any(keyword_match(steps, n) for n in names):
            words = [step[1] for step in steps if step[0] == "word"]
            missing = [w for w in words if not any(w in n.lower() for n in names)]
            hint = did_you_mean(missing[0], names) if missing else ""
            raise UsageError(f"-k {expression!r} matches no {what}{hint}")
    chosen = set(exact or ())
    return [n for n in names if n in chosen or any(keyword_match(s, n) for s in parsed)]
