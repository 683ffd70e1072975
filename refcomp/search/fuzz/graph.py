"""The fuzzer's graphs: random programs over rc kept as text, and the knobs that bound them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np



SYMBOLS = ("B", "T")
MAX_BINDING = 7  # symbolic dims are bound in [1, MAX_BINDING]
MAX_ELEMENTS = 6000  # no tensor of a graph grows beyond this many elements at the largest binding
LIMIT = 8.0  # values are rescaled (by a power of two) when their bound grows beyond this
LONG = (150, 600)  # the extent of an occasional long axis


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
    kind: str = "normal"  # "normal": uniform(-2, 2); "positive": uniform(0.5, 2); "ids": ints in [0, high)
    high: int = 0

    def code(self) -> str:
        shape = "(" + ", ".join(repr(d) for d in self.shape) + ("," if len(self.shape) == 1 else "") + ")"
        dtype = ', "int32"' if self.kind == "ids" else ""
        return f'{self.name} = rc.input(P + "{self.name}", {shape}{dtype})'

    def feed(self, rng: np.random.Generator, binding: dict) -> np.ndarray:
        shape = tuple(binding[d] if isinstance(d, str) else d for d in self.shape)
        if self.kind == "ids":
            return rng.integers(0, self.high, size=shape).astype(np.int32)
        if self.kind == "positive":
            return rng.uniform(0.5, 2.0, size=shape).astype(np.float32)
        return rng.uniform(-2.0, 2.0, size=shape).astype(np.float32)


@dataclass
class FuzzGraph:
    """One random graph: its inputs, its lines of code (Python over `rc` and earlier variables) and outputs."""

    seed: int
    index: int
    inputs: list[InputSpec] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)  # (variable, expression)
    outputs: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # the generator's move per line, for coverage reports

    def code(self, prefix: str = "") -> str:
        head = [f"P = {prefix!r}"] + [spec.code() for spec in self.inputs]
        body = [f"{var} = {expr}" for var, expr in self.lines]
        outs = "outputs = {" + ", ".join(f"{o!r}: {o}" for o in self.outputs) + "}"
        return "\n".join(head + body + [outs])

    def build(self, prefix: str = "") -> dict:
        """The graph's outputs as {variable: Tensor}; inputs are named prefix + name."""
        import refcomp as rc
        namespace = {"rc": rc, "np": np, "math": math}
        exec(compile(self.code(prefix), f"<fuzz graph {self.seed}:{self.index}>", "exec"), namespace)
        return namespace["outputs"]

    def feeds(self, prefix: str, binding: dict, which: int) -> dict:
        rng = np.random.default_rng([self.seed, self.index, which])
        return {prefix + spec.name: spec.feed(rng, binding) for spec in self.inputs}

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
                needed |= _names_in(expr)
        inputs = [s for s in self.inputs if s.name in needed]
        return FuzzGraph(self.seed, self.index, inputs, keep[::-1], list(outputs), ops[::-1])


def _names_in(expr: str) -> set:
    import re
    return set(re.findall(r"\b[xv]\d+\b", expr))
