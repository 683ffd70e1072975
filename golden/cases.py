"""Every golden case, collected from the themed modules beside this file.

The case format (`GoldenCase`) is defined in `refcomp.golden`; the data lives in `golden/data/`
and is regenerated with `refcomp golden update`.
"""
from __future__ import annotations

from refcomp.golden import GoldenCase

from . import (
    cases_dtypes,
    cases_highlevel,
    cases_models,
    cases_nn,
    cases_primitives,
    cases_symbolic,
    cases_views,
)

__all__ = ["CASES", "GoldenCase"]

CASES: list[GoldenCase] = [
    *cases_primitives.CASES,
    *cases_views.CASES,
    *cases_highlevel.CASES,
    *cases_nn.CASES,
    *cases_symbolic.CASES,
    *cases_models.CASES,
    *cases_dtypes.CASES,
]
