"""The random graph generator: tracks value intervals so every op stays in a safe domain."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from .basic_steps import BasicSteps
from .edge_steps import EdgeSteps
from .serving_steps import ServingSteps
from .view_steps import ViewSteps
from .model_steps import ModelSteps
from .torch_steps import TorchSteps
from .window_steps import WindowSteps
from .graph import (
    FRAGILE,
    min_extent,
    FuzzGraph,
    InputSpec,
    KNOWN_BUGS,
    LIMIT,
    LONG,
    LONG_SUM_RATE,
    MAX_BINDING,
    MAX_ELEMENTS,
    SPECIALS_RATE,
    SYMBOLS,
    broadcasts,
    elements,
    names_in,
    simple_dim,
)


# --- the generator --------------------------------------------------------------------------------
@dataclass
class Var:
    name: str
    tensor: object
    lo: float
    hi: float
    exact: bool  # every element is exactly a float32 input value (or a value computed exactly from them)

    @property
    def bound(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    @property
    def shape(self):
        return self.tensor.shape


class Generator(BasicSteps, EdgeSteps, ModelSteps, ServingSteps, TorchSteps, ViewSteps, WindowSteps):
    """Builds one FuzzGraph step by step, executing each line to learn its shape."""

    def __init__(self, seed: int, index: int, avoid: Sequence[str] = tuple(KNOWN_BUGS)):
        import refcomp as rc
        self.avoid = set(avoid)
        self.rng = np.random.default_rng([seed, index])
        self.graph = FuzzGraph(seed, index)
        self.namespace = {"rc": rc, "np": np, "math": math, "functools": functools, "P": ""}
        self.vars: list[Var] = []
        self.counter = 0

    # --- helpers ------------------------------------------------------------------------------
    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def new_input(self, shape, kind: str = "normal", high: int = 0) -> Var:
        name = f"x{len(self.graph.inputs)}"
        specials = kind in ("normal", "positive") and self.chance(SPECIALS_RATE)
        spec = InputSpec(
            name, tuple(d if isinstance(d, int) else str(d) for d in shape), kind, high, specials
        )
        self.graph.inputs.append(spec)
        exec(spec.code(), self.namespace)
        lo, hi = {
            "normal": (-2.0, 2.0),
            "positive": (0.5, 2.0),
            "ids": (0.0, float(high)),
            "slots": (0.0, float(high)),
            "small_ints": (-2.0, float(high)),
        }[kind]
        var = Var(name, self.namespace[name], lo, hi, True)
        if kind in ("normal", "positive"):
            self.vars.append(var)
        return var

    def random_shape(self, ndim: Optional[int] = None, long_ok: bool = True) -> tuple:
        ndim = ndim if ndim is not None else int(self.rng.integers(1, 5))
        shape = []
        for _ in range(ndim):
            r = self.rng.random()
            shape.append(self.choice(SYMBOLS) if r < 0.25 else int(self.rng.integers(1, 8)))
        if long_ok and self.chance(0.12):
            shape[int(self.rng.integers(ndim))] = int(self.rng.integers(*LONG))
        while elements(shape) > MAX_ELEMENTS:
            axis = max(range(ndim), key=lambda a: shape[a] if isinstance(shape[a], int) else MAX_BINDING)
            shape[axis] = max(1, shape[axis] // 3) if isinstance(shape[axis], int) else 1
        return tuple(shape)

    def emit(self, expr: str, lo: float, hi: float, exact: bool, op: str) -> Optional[Var]:
        """Execute `var = expr`; keep it if its shape is sane. Returns the new variable or None."""
        from ..errors import ShapeError
        name = f"v{self.counter}"
        try:
            exec(f"{name} = {expr}", self.namespace)
        except ShapeError:
            return None
        tensor = self.namespace[name]
        if elements(tensor.shape) > MAX_ELEMENTS or (
            op not in FRAGILE and any(min_extent(d) < 1 for d in tensor.shape)
        ):
            del self.namespace[name]
            return None
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise AssertionError(f"fuzz generator: unbounded interval for {expr}")
        self.counter += 1
        self.graph.lines.append((name, expr))
        self.graph.ops.append(op)
        var = Var(name, tensor, min(lo, hi), max(lo, hi), exact)
        self.vars.append(var)
        return var

    def pick(self, pred: Callable[[Var], bool] = lambda v: True) -> Optional[Var]:
        candidates = [v for v in self.vars if pred(v)]
        if not candidates:
            return None
        weights = np.arange(1.0, len(candidates) + 1.0)  # recent ones are likelier
        weights[-1] *= 2
        weights = weights / weights.sum()
        return candidates[int(self.rng.choice(len(candidates), p=weights))]

    def tame(self, var: Var) -> Var:
        """Rescale by an exact power of two when the values' bound exceeds LIMIT."""
        if var.bound <= LIMIT:
            return var
        k = math.ceil(math.log2(var.bound / LIMIT))
        scale = 2.0 ** -k
        out = self.emit(f"{var.name} * {scale!r}", var.lo * scale, var.hi * scale, var.exact, "tame")
        return out if out is not None else var

    def compatible_operand(self, var: Var, positive: bool = False) -> tuple[str, float, float, bool]:
        """Code for a second operand that broadcasts against `var`: a variable, a new input or a constant."""
        shape = var.shape
        r = self.rng.random()
        if r < 0.2 or not shape:
            value = float(self.rng.uniform(0.5, 2.0) if positive else self.rng.uniform(-2.0, 2.0))
            value = float(np.float32(round(value, 3)))
            return repr(value), value, value, True
        if r < 0.55:
            others = [v for v in self.vars if v is not var and broadcasts(v.shape, shape)
                      and (not positive or v.lo >= 0.5)]
            if others:
                o = self.choice(others)
                return o.name, o.lo, o.hi, o.exact
        new_shape = [d if (simple_dim(d) and self.chance(0.7)) else 1 for d in shape]
        drop = int(self.rng.integers(0, len(new_shape) + 1)) if self.chance(0.3) else 0
        new_shape = new_shape[drop:]
        spec = self.new_input(tuple(new_shape), "positive" if positive else "normal")
        return spec.name, spec.lo, spec.hi, True

    # --- the steps ------------------------------------------------------------------------------
    def step(self) -> None:
        kinds = [
            ("unary", 5),
            ("binary", 5),
            ("view", 6),
            ("reduce", 3),
            ("row", 1.5),
            ("matmul", 1.5),
            ("attention", 0.6),
            ("layers", 0.3),
            ("einsum", 0.3),
            ("torch_math", 0.5),
            ("torch_api", 2.0),
            ("torch_methods", 1.0),
            ("storage", 0.4),
            ("exact", 1.5),
            ("combine", 1),
            ("window", 1.0),
            ("gather", 0.4),
            ("select", 0.6),
            ("power", 0.35),
            ("integer", 0.4),
            ("special", 1.0),
            ("fragile", 0.2),
            ("deep", 0.04),
        ]
        names, weights = zip(*kinds)
        p = np.array(weights) / sum(weights)
        kind = names[int(self.rng.choice(len(names), p=p))]
        getattr(self, f"step_{kind}")()

    def generate(self) -> FuzzGraph:
        for _ in range(int(self.rng.integers(1, 3))):
            self.new_input(self.random_shape(), "positive" if self.chance(0.2) else "normal")
        steps = int(self.rng.integers(2, 10))
        for _ in range(steps):
            self.step()
        computed = [name for name, _ in self.graph.lines]
        if not computed:
            v = self.vars[-1]
            self.emit(f"({v.name} + 1.0)", v.lo + 1, v.hi + 1, False, "add")
            computed = [name for name, _ in self.graph.lines]
        outputs = [computed[-1]]
        read = set().union(*(names_in(e) for _, e in self.graph.lines))
        outputs += [v for v in computed[:-1] if v not in read and self.chance(0.6)]  # other branches' ends
        if len(computed) > 2 and self.chance(0.3):  # an intermediate that is also read later
            outputs.append(self.choice(computed[:-1]))
        last = self.vars[-1]
        if self.chance(0.1) and len(last.shape) >= 2:
            view = self.emit(f"{last.name}.transpose(0, -1)", last.lo, last.hi, last.exact, "output_view")
            if view is not None:
                outputs[0] = view.name
        if self.chance(0.03):  # an output that is just an input
            outputs.append(
                self.graph.inputs[0].name if self.graph.inputs[0].kind not in ("ids", "slots") else outputs[0]
            )
        if self.chance(LONG_SUM_RATE):  # drawn last: the graph before it is what it was without long sums
            long = self.long_sum()
            outputs += [long.name] if long is not None else []
        wide = self.wide_rows_output()
        if wide is not None:
            outputs.append(wide)
        stored = self.storage_output()
        if stored is not None:
            outputs.append(stored)
        return self.graph.pruned(list(dict.fromkeys(outputs)))


def generate(seed: int, index: int, avoid: Sequence[str] = tuple(KNOWN_BUGS)) -> FuzzGraph:
    """Graph number `index` of the run with `seed` (the same pair always gives the same graph).

    `avoid` names KNOWN_BUGS whose trigger the generator steers around (all of them by default)."""
    return Generator(seed, index, avoid).generate()
