"""Generator steps for the elementwise and reduction primitives: unary math (with views and pads
between the algebraic rules' node pairs), special functions, broadcast binary ops, reductions over
one, two or all axes, and the discontinuous ops kept to values exact in float32. Mixed into
`generator.Generator`, whose helpers they use; `Generator.step`'s table picks among them."""

from __future__ import annotations

import math

import numpy as np

from .graph import broadcasts, elements, max_extent


class BasicSteps:
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
            total = elements(v.shape)
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
            other = self.pick(lambda w: w.exact and w is not v and broadcasts(w.shape, v.shape))
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


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0
