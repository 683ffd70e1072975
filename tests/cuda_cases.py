"""Shared helpers for tests that compile golden cases and run them on a backend."""
from __future__ import annotations

import functools

import refcomp as rc
from refcomp import golden

CASES = golden.load_cases()
CASE_IDS = [c.name for c in CASES]


@functools.lru_cache(maxsize=None)
def compiled(name: str, search: bool) -> rc.Program:
    case = next(c for c in CASES if c.name == name)
    return rc.compile(case.build(), search=search)


def check_case(case, backend: str, search: bool) -> list[str]:
    """Run every binding of a golden case; return mismatches (empty when all outputs match)."""
    prog = compiled(case.name, search)
    problems = []
    for i in range(len(case.bindings)):
        feeds, dims = golden.case_feeds(case, i)
        got = prog.run(feeds, backend=backend, dims=dims)
        problems += [f"binding {i}: {p}" for p in golden.compare(got, golden.expected(case, i), golden.FLOAT32_TOLERANCE)]
    return problems
