"""The random graph generator: tracks value intervals so every op stays in a safe domain."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from ..symbolic.dims import dim, prod
from .edge_steps import EdgeSteps
from .serving_steps import ServingSteps
from .view_steps import ViewSteps
from .model_steps import ModelSteps
from .torch_steps import TorchSteps
from .graph import (
    FRAGILE,
    max_extent,
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


def _elements(shape) -> int:
    return max_extent(prod(dim(d) for d in shape)) if shape else 1


class Generator(EdgeSteps, ModelSteps, ServingSteps, TorchSteps, ViewSteps):
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
        while _elements(shape) > MAX_ELEMENTS:
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
        if _elements(tensor.shape) > MAX_ELEMENTS or (
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
            others = [v for v in self.vars if v is not var and _broadcasts(v.shape, shape)
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

    def step_unary(self) -> None:
        v = self.pick()
        n = v.name
        options = []
        b = v.bound
        options.append((f"{n}.sin()", -1.0, 1.0, "sin"))
        options.append((f"{n}.cos()", -1.0, 1.0, "cos"))
        options.append(
            (
                f"({n} * {n} + 1.0)",
                1.0 if v.lo * v.hi <= 0 else 1.0 + min(v.lo**2, v.hi**2),
                b * b + 1.0,
                "square_plus_one",
            )
        )
        options.append((f"-{n}", -v.hi, -v.lo, "neg"))
        a, c = self.choice([-1.5, 0.5, 2.0, 0.25, 3.0]), self.choice([-1.0, 0.0, 0.5, 1.0])
        options.append(
            (f"({n} * {a!r} + {c!r})", min(v.lo * a, v.hi * a) + c, max(v.lo * a, v.hi * a) + c, "affine")
        )
        options.append((f"{n}.relu()", max(v.lo, 0.0), max(v.hi, 0.0), "relu"))
        options.append((f"{n}.abs()", 0.0 if v.lo * v.hi <= 0 else min(abs(v.lo), abs(v.hi)), b, "abs"))
        options.append((f"{n}.sigmoid()", _sig(v.lo), _sig(v.hi), "sigmoid"))
        options.append((f"{n}.tanh()", math.tanh(v.lo), math.tanh(v.hi), "tanh"))
        options.append((f"{n}.gelu(approximate='tanh')", -0.2, max(v.hi, 0.0), "gelu"))
        options.append((f"{n}.silu()", -0.3, max(v.hi, 0.0), "silu"))
        lo_c, hi_c = sorted(float(np.float32(round(x, 2))) for x in self.rng.uniform(-1.5, 1.5, 2))
        options.append(
            (f"{n}.clip({lo_c!r}, {hi_c!r})", min(max(v.lo, lo_c), hi_c), max(min(v.hi, hi_c), lo_c), "clip")
        )
        options.append((f"({n} ** 3)", v.lo ** 3, v.hi ** 3, "cube"))
        options.append((f"{n}.contiguous()", v.lo, v.hi, "contiguous"))
        if v.hi <= 3.0 and v.lo >= -40:
            options.append((f"{n}.exp()", math.exp(v.lo), math.exp(v.hi), "exp"))
            options.append((f"{n}.exp2()", 2 ** v.lo, 2 ** v.hi, "exp2"))
        if v.lo < 0.5 and self.chance(0.5):  # log2, sqrt, recip of a value positive by construction
            sq = f"({n} * {n} + 1.0)"
            top = b * b + 1.0
            options.append((f"{sq}.log2()", 0.0, math.log2(top), "log2"))
            options.append((f"{sq}.sqrt()", 1.0, math.sqrt(top), "sqrt"))
            options.append((f"{sq}.reciprocal()", 1.0 / top, 1.0, "recip"))
            options.append((f"{sq}.rsqrt()", 1.0 / math.sqrt(top), 1.0, "rsqrt"))
            options.append(
                (
                    f"{n}.exp().reciprocal().reciprocal()"
                    if v.hi <= 3
                    else f"{sq}.reciprocal().reciprocal()",
                    math.exp(v.lo) if v.hi <= 3 else 1.0,
                    math.exp(v.hi) if v.hi <= 3 else top,
                    "recip_recip",
                )
            )
        if v.lo >= 0.5:
            options.append((f"{n}.log2()", math.log2(v.lo), math.log2(v.hi), "log2"))
            options.append((f"{n}.log()", math.log(v.lo), math.log(v.hi), "log"))
            options.append((f"{n}.sqrt()", math.sqrt(v.lo), math.sqrt(v.hi), "sqrt"))
            options.append((f"{n}.rsqrt()", 1 / math.sqrt(v.hi), 1 / math.sqrt(v.lo), "rsqrt"))
            options.append((f"{n}.reciprocal()", 1 / v.hi, 1 / v.lo, "recip"))
            options.append((f"(1.0 / {n})", 1 / v.hi, 1 / v.lo, "div_const"))
            options.append((f"({n} ** 1.5)", v.lo ** 1.5, v.hi ** 1.5, "pow"))
            options.append((f"{n}.reciprocal().reciprocal()", v.lo, v.hi, "recip_recip"))
        if v.bound <= 6:
            options.append((f"{n}.exp2().log2()", v.lo, v.hi, "log2_exp2"))
            options.append(
                (f"({n}.exp2() * {n}.sin().exp2())", 2 ** (v.lo - 1), 2 ** (v.hi + 1), "exp2_product")
            )
        # the algebraic rules' patterns with a view (a pad, too) on the edge between the two nodes
        if v.shape and self.chance(0.5):
            view = self.random_view_suffix(v.shape)
            w = self.pad_widths(v.shape, 1)
            if v.bound <= 6:
                options.append((f"{n}.exp2(){view}.log2()", v.lo, v.hi, "log2_exp2_view"))
                options.append(
                    (
                        f"rc.maximum({n}.exp2().pad({w!r}).log2(), -8.0)",
                        min(v.lo, -8.0),
                        max(v.hi, -8.0),
                        "log2_exp2_pad",
                    )
                )
                options.append(
                    (
                        f"({n}.exp2().pad({w!r}) * {n}.sin().pad({w!r}).exp2())",
                        0.0,
                        2 ** (v.hi + 1),
                        "exp2_product_pad",
                    )
                )
                options.append(
                    (
                        f"({n}.exp2(){view} * ({n} * 0.5).exp2(){view})",
                        2 ** (1.5 * v.lo) if v.lo < 0 else 2**v.lo,
                        2 ** (1.5 * v.hi),
                        "exp2_product_view",
                    )
                )
            pos, plo, phi = (n, v.lo, v.hi) if v.lo >= 0.5 else (f"({n} * {n} + 1.0)", 1.0, b * b + 1.0)
            options.append((f"{pos}.reciprocal(){view}.reciprocal()", plo, phi, "recip_recip_view"))
            options.append(
                (
                    f"rc.minimum({pos}.reciprocal().pad({w!r}).reciprocal(), 8.0)",
                    min(plo, 8.0),
                    8.0,
                    "recip_recip_pad",
                )
            )
            options.append((f"({n}{view} + 0.0)", v.lo, v.hi, "add_zero_view"))
            options.append((f"({n}.contiguous(){view} * 1.0)", v.lo, v.hi, "mul_one_copy_view"))
        expr, lo, hi, op = self.choice(options)
        exact = v.exact and op in ("neg", "relu", "abs", "contiguous")
        out = self.emit(expr, lo, hi, exact, op)
        if out is not None:
            self.tame(out)

    def step_special(self) -> None:
        """The special functions of ops/special.py, each where float32 and float64 agree closely."""
        v = self.pick()
        n, b = v.name, v.bound
        options = [(f"{n}.gelu(approximate='none')", -0.2, max(v.hi, 0.0), "gelu_exact"),
                   (f"{n}.erf()", math.erf(v.lo), math.erf(v.hi), "erf"),
                   (f"rc.erfc({n})", math.erfc(v.hi), math.erfc(v.lo), "erfc"),
                   (f"{n}.abs().log1p()", 0.0, math.log1p(b), "log1p"),
                   (f"(-{n}.abs()).expm1()", math.expm1(-b), 0.0, "expm1")]
        if v.lo > -0.75:  # log1p of its own argument, away from the pole at -1
            options.append((f"rc.log1p({n})", math.log1p(v.lo), math.log1p(v.hi), "log1p"))
        if v.hi <= 3.0:
            options.append((f"{n}.expm1()", math.expm1(v.lo), math.expm1(v.hi), "expm1"))
        expr, lo, hi, op = self.choice(options)
        out = self.emit(expr, lo, hi, False, op)
        if out is not None:
            self.tame(out)

    def step_binary(self) -> None:
        v = self.pick()
        op = self.choice(["add", "sub", "mul", "maximum", "minimum", "div", "add", "mul"])
        code, lo, hi, exact = self.compatible_operand(v, positive=(op == "div"))
        n = v.name
        if self.chance(0.3):  # operand order matters for broadcasting and for the rules
            first, second, (alo, ahi), (blo, bhi) = code, n, (lo, hi), (v.lo, v.hi)
        else:
            first, second, (alo, ahi), (blo, bhi) = n, code, (v.lo, v.hi), (lo, hi)
        if op == "div" and first == code:
            first, second, (alo, ahi), (blo, bhi) = n, code, (v.lo, v.hi), (lo, hi)
        ex = exact and v.exact
        if op == "add":
            out = self.emit(f"({first} + {second})", alo + blo, ahi + bhi, False, op)
        elif op == "sub":
            out = self.emit(f"({first} - {second})", alo - bhi, ahi - blo, False, op)
        elif op == "mul":
            ps = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
            out = self.emit(f"({first} * {second})", min(ps), max(ps), False, op)
        elif op == "maximum":
            out = self.emit(f"rc.maximum({first}, {second})", max(alo, blo), max(ahi, bhi), ex, op)
        elif op == "minimum":
            out = self.emit(f"rc.minimum({first}, {second})", min(alo, blo), min(ahi, bhi), ex, op)
        else:
            ps = [alo / blo, alo / bhi, ahi / blo, ahi / bhi]
            out = self.emit(f"({first} / {second})", min(ps), max(ps), False, op)
        if out is not None:
            self.tame(out)

    def step_reduce(self) -> None:
        v = self.pick(lambda v: len(v.shape) >= 1)
        if v is None:
            return self.step_unary()
        n, nd = v.name, len(v.shape)
        axis = int(self.rng.integers(-nd, nd))
        keep = self.chance(0.4)
        kd = ", keepdims=True" if keep else ""
        op = self.choice(["sum", "max", "min", "mean", "sum", "max", "var", "multi", "all"])
        extent = max_extent(v.shape[axis])
        if op == "sum":
            lo, hi = min(0.0, v.lo, v.lo * extent), max(0.0, v.hi, v.hi * extent)
            out = self.emit(f"{n}.sum({axis}{kd})", lo, hi, False, "sum")
        elif op in ("max", "min"):
            out = self.emit(f"{n}.a{op}({axis}{kd})", v.lo, v.hi, v.exact, op)
        elif op == "mean":
            out = self.emit(f"{n}.mean({axis}{kd})", v.lo, v.hi, False, "mean")
        elif op == "var":
            out = self.emit(f"{n}.var({axis}{kd}, correction=0)", 0.0, (v.hi - v.lo) ** 2, False, "var")
        elif op == "multi" and nd >= 2:
            axes = sorted(int(a) for a in self.rng.choice(nd, size=2, replace=False))
            which = self.choice(["sum", "max"])
            total = max_extent(v.shape[axes[0]]) * max_extent(v.shape[axes[1]])
            lo, hi = (
                (min(0.0, v.lo, v.lo * total), max(0.0, v.hi, v.hi * total))
                if which == "sum"
                else (v.lo, v.hi)
            )
            method = "amax" if which == "max" else which  # over several axes: max itself takes one dim
            out = self.emit(
                f"{n}.{method}(({axes[0]}, {axes[1]}){kd})",
                lo,
                hi,
                v.exact and which == "max",
                which + "_multi",
            )
        else:
            which = self.choice(["sum", "max", "mean"])
            total = _elements(v.shape)
            lo, hi = (
                (min(0.0, v.lo, v.lo * total), max(0.0, v.hi, v.hi * total))
                if which == "sum"
                else (v.lo, v.hi)
            )
            out = self.emit(f"{n}.{which}()", lo, hi, v.exact and which == "max", which + "_all")
        if out is not None:
            self.tame(out)

    def step_exact(self) -> None:
        """Discontinuous ops, only on values exact in float32 (both precisions take the same branch)."""
        v = self.pick(lambda v: v.exact)
        if v is None:
            v = self.new_input(self.random_shape(long_ok=False))
        n = v.name
        op = self.choice(["where", "compare", "fmod", "mod", "argmax", "fmod", "eq", "floor", "ceil"])
        c = float(self.choice([0.0, 0.3, -0.7, 1.1]))
        if op == "where":
            a_code, alo, ahi, _ = self.compatible_operand(v)
            cmp = self.choice(["<", ">", "<=", ">="])
            self.emit(
                f"rc.where({n} {cmp} {c!r}, {a_code}, {n})", min(alo, v.lo), max(ahi, v.hi), False, "where"
            )
        elif op == "compare":
            other = self.pick(lambda w: w.exact and w is not v and _broadcasts(w.shape, v.shape))
            rhs = other.name if other is not None and self.chance(0.5) else repr(c)
            cmp = self.choice(["<", ">", "<=", ">="])
            self.emit(f"({n} {cmp} {rhs})", 0.0, 1.0, True, "compare")
        elif op == "eq":
            self.emit(
                f"{n}.eq({n}.amax(-1, keepdims=True))" if v.shape else f"{n}.eq({c!r})", 0.0, 1.0, True, "eq"
            )
        elif op in (
            "floor",
            "ceil",
        ):  # discontinuous at integers: exact values take the same side in both precisions
            scale = self.choice(
                [1.0, 4.0]
            )  # a power of two keeps the values exact and moves more of them across integers
            arg = n if scale == 1.0 else f"({n} * {scale!r})"
            f = math.floor if op == "floor" else math.ceil
            self.emit(
                f"{arg}.{op}()" if self.chance(0.7) else f"rc.{op}({arg})",
                f(v.lo * scale),
                f(v.hi * scale),
                True,
                op,
            )
        elif op == "fmod":
            d = self.choice([0.75, 1.5, -1.25])
            self.emit(f"rc.fmod({n}, {d!r})", -abs(d), abs(d), True, "fmod")
        elif op == "mod":
            d = self.choice([0.75, 1.5, -1.25])
            self.emit(f"({n} % {d!r})", -abs(d), abs(d), False, "mod")
        else:
            if not v.shape:
                return
            axis = int(self.rng.integers(-len(v.shape), len(v.shape)))
            extent = max_extent(v.shape[axis])
            self.emit(f"{n}.argmax({axis})", 0.0, float(extent), True, "argmax")

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


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def _broadcasts(small, big) -> bool:
    if len(small) > len(big):
        return False
    for a, b in zip(reversed(small), reversed(big)):
        if not (str(a) == str(b) or (isinstance(a, int) and a == 1)):
            return False
    return True


def generate(seed: int, index: int, avoid: Sequence[str] = tuple(KNOWN_BUGS)) -> FuzzGraph:
    """Graph number `index` of the run with `seed` (the same pair always gives the same graph).

    `avoid` names KNOWN_BUGS whose trigger the generator steers around (all of them by default)."""
    return Generator(seed, index, avoid).generate()
