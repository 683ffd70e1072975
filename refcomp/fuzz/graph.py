"""The fuzzer's graphs: random programs over rc kept as text, and the knobs that bound them."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..symbolic.dims import dim, evaluate_dim, prod



SYMBOLS = ("B", "T")
MAX_BINDING = 7  # symbolic dims are bound in [1, MAX_BINDING], and at the edge binding in [0, 2]
SPECIALS_RATE = 0.08  # inputs that hold a few infinities and NaNs
STRAY_IDS_RATE = 0.25  # at the edge binding, embedding ids outside the table (every backend must refuse)
FRAGILE = ("fragile_index",)  # generator moves whose tensors may be empty or invalid at small bindings
NAN_BY_DESIGN = (
    "pow_negative_base",
)  # moves whose NaN is NumPy's answer (a negative base to a fractional power)
MAX_ELEMENTS = 6000  # no tensor of a graph grows beyond this many elements at the largest binding
LIMIT = 8.0  # values are rescaled (by a power of two) when their bound grows beyond this
LONG = (150, 600)  # the extent of an occasional long axis
LONG_SUM = (700, 851)  # the long sum's row (edge_steps.long_sum): B rows of it stay under MAX_ELEMENTS
LONG_SUM_RATE = 0.05  # graphs that end with a long sum
WIDE_ROWS_RATE = (
    0.15  # graphs with one more output: a 16-bit composite of large rows (ModelSteps.wide_rows_output)
)
EDGE_BINDING = 2  # index of each program's third binding, whose dims lie in [0, 2]


# Open bugs outside the search whose trigger the generator steers around by default (so that one
# known bug does not mask the rest); `--known-bugs` generates them again. Each has a test in
# tests/test_fuzz.py. The three this fuzzer found first (a negative power in a constant, a fused
# read through a prefix slice, slow indices over padded symbolic axes) are fixed.
KNOWN_BUGS: dict[str, str] = {}


# --- the graph ------------------------------------------------------------------------------------
@dataclass
class InputSpec:
    name: str
    shape: tuple  # ints and symbol names
    kind: str = "normal"  # "normal": uniform(-2, 2); "positive": uniform(0.5, 2); "ids": ints in [0, high);
    # "slots": distinct ints in [0, high) (a Scatter's ids; the generator keeps their count <= high);
    # "small_ints": integral floats in [-2, high) (exponents)
    high: int = 0
    specials: bool = False  # a few values are +-inf and NaN

    def code(self) -> str:
        shape = "(" + ", ".join(repr(d) for d in self.shape) + ("," if len(self.shape) == 1 else "") + ")"
        dtype = ', "int32"' if self.kind in ("ids", "slots") else ""
        return f'{self.name} = rc.input(P + "{self.name}", {shape}{dtype})'

    def feed(self, rng: np.random.Generator, binding: dict, edge: bool = False) -> np.ndarray:
        """Random values; at the edge binding ids may stray outside the table."""
        shape = tuple(binding[d] if isinstance(d, str) else d for d in self.shape)
        if self.kind == "slots":
            ids = rng.permutation(self.high)[:math.prod(shape)].astype(np.int32).reshape(shape)
            if edge and ids.size and rng.random() < STRAY_IDS_RATE:  # out of range, or a repeated id
                ids.reshape(-1)[rng.integers(ids.size)] = rng.choice([-1, self.high, int(ids.reshape(-1)[0])])
            return ids
        if self.kind == "ids":
            ids = rng.integers(0, self.high, size=shape).astype(np.int32)
            if edge and ids.size and rng.random() < STRAY_IDS_RATE:
                ids.reshape(-1)[rng.integers(ids.size)] = rng.choice([-1, self.high])
            return ids
        if self.kind == "small_ints":
            return rng.integers(-2, self.high, size=shape).astype(np.float32)
        lo = 0.5 if self.kind == "positive" else -2.0
        values = rng.uniform(lo, 2.0, size=shape).astype(np.float32)
        if self.specials and values.size:
            picks = rng.integers(0, values.size, size=3)
            values.reshape(-1)[picks] = rng.choice(np.array([np.inf, -np.inf, np.nan], np.float32), size=3)
        return values


@dataclass
class FuzzGraph:
    """One random graph: its inputs, its lines of code (Python over `rc` and earlier variables) and
    outputs."""

    seed: int
    index: int
    inputs: list[InputSpec] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)  # (variable, expression)
    outputs: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # the generator's move per line, for coverage reports

    def code(self, prefix: str = "") -> str:
        head = ["import functools, math", f"P = {prefix!r}"] + [spec.code() for spec in self.inputs]
        body = [f"{var} = {expr}" for var, expr in self.lines]
        outs = "outputs = {" + ", ".join(f"{o!r}: {o}" for o in self.outputs) + "}"
        return "\n".join(head + body + [outs])

    def build(self, prefix: str = "") -> dict:
        """The graph's outputs as {variable: Tensor}; inputs are named prefix + name."""
        import refcomp as rc
        namespace = {"rc": rc, "np": np, "math": math, "functools": functools}
        exec(compile(self.code(prefix), f"<fuzz graph {self.seed}:{self.index}>", "exec"), namespace)
        return namespace["outputs"]

    def feeds(self, prefix: str, binding: dict, which: int) -> dict:
        """The inputs at binding number `which` (the last of a program's bindings is the edge one)."""
        rng = np.random.default_rng([self.seed, self.index, which])
        return {prefix + spec.name: spec.feed(rng, binding, which == EDGE_BINDING) for spec in self.inputs}

    @property
    def finite(self) -> bool:
        """Whether every reference value is finite by construction (no planted specials, no NaN by design)."""
        return not any(spec.specials for spec in self.inputs) and not set(self.ops) & set(NAN_BY_DESIGN)

    def truncated(self, upto: int) -> "FuzzGraph":
        """The graph whose only output is line `upto`'s variable, dead lines dropped."""
        return self.pruned([self.lines[upto][0]])

    def pruned(self, outputs: Sequence[str]) -> "FuzzGraph":
        """The graph with these outputs and only the lines and inputs they need."""
        keep, ops, needed = [], [], set(outputs)
        for (var, expr), op in reversed(list(zip(self.lines, self.ops))):
            if var in needed:
                keep.append((var, expr))
                ops.append(op)
                needed |= names_in(expr)
        inputs = [s for s in self.inputs if s.name in needed]
        return FuzzGraph(self.seed, self.index, inputs, keep[::-1], list(outputs), ops[::-1])


def simple_dim(d) -> bool:
    """A dim that an input can have: an int or a plain symbol."""
    import sympy
    return isinstance(d, int) or isinstance(d, sympy.Symbol)


def names_in(expr: str) -> set:
    import re
    return set(re.findall(r"\b[xv]\d+\b", expr))


def max_extent(d) -> int:
    """A dim's size at the largest binding the fuzzer draws."""
    return evaluate_dim(d, {s: MAX_BINDING for s in SYMBOLS})


def min_extent(d) -> int:
    """A dim's size at the smallest non-empty binding."""
    return evaluate_dim(d, {s: 1 for s in SYMBOLS})


def elements(shape) -> int:
    """A shape's element count at the largest binding the fuzzer draws (1 for a scalar)."""
    return max_extent(prod(dim(d) for d in shape)) if shape else 1


def broadcasts(small, big) -> bool:
    """Whether shape `small` broadcasts to `big` unchanged (trailing axes equal, or 1 in `small`)."""
    if len(small) > len(big):
        return False
    for a, b in zip(reversed(small), reversed(big)):
        if not (str(a) == str(b) or (isinstance(a, int) and a == 1)):
            return False
    return True
