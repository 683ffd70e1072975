"""Generator steps shaped like models: matmuls, row reductions and norms, attention, stacked layers
and embedding gathers (windows: window_steps.py). Mixed into `generator.Generator`, whose helpers
(`pick`, `chance`, value intervals) they use."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .graph import max_extent, min_extent, simple_dim, WIDE_ROWS_RATE

TALL_NORM_RATE = (
    0.35  # a layer norm of 64 fresh rows, then a matmul (Welford's one pass pays only with many rows)
)
PROJECTED_NORM_RATE = 0.6  # a layer norm of a residual stream r + x @ w, then a matmul (search/row_stats.py)
PROJECTED_MAX_RATE = 0.2  # of the matmul steps: a maximum or argmax of a product's rows (search/row_stats.py)


class ModelSteps:
    def step_row(self) -> None:
        v = self.pick(lambda v: len(v.shape) >= 1)
        if v is None:
            return self.step_unary()
        n, nd = v.name, len(v.shape)
        axis = -1 if self.chance(0.6) else int(self.rng.integers(-nd, nd))
        extent = max_extent(v.shape[axis])
        op = self.choice(["softmax", "log_softmax", "layer_norm", "rms_norm", "softmax"])
        tall = False
        if op == "softmax":
            out = self.emit(f"{n}.softmax({axis})", 0.0, 1.0, False, op)
        elif op == "log_softmax":
            out = self.emit(f"{n}.log_softmax({axis})", -(v.hi - v.lo) - math.log(extent) - 1, 0.0, False, op)
        elif op == "layer_norm":
            projected = self.residual_stream()
            if projected is not None:  # then a matmul reads the normalised rows, as the block's next one
                v, n, axis, tall = projected, projected.name, -1, True
            elif self.chance(TALL_NORM_RATE):  # many rows: the search computes the statistics in one pass
                v = self.new_input((64, self.choice([16, 32])))
                n, axis, tall = v.name, -1, True
            # a row of equal values (a clipped or broadcast one) has variance 0, and 1/sqrt(var + eps)
            # would magnify the rounding of its mean 300-fold: a ramp keeps every row's spread. Its step
            # exceeds the values' range (up to 64), so no row's own slope can cancel it: with a step of
            # 0.25, a row of relu(x @ w) falling by 0.25 became near-constant (seed 13, graph 148)
            step = 0.25 + min(v.hi - v.lo, 64.0) if math.isfinite(v.hi - v.lo) else 0.25
            ramped = f"({n} + rc.arange({n}.shape[-1]) * {step!r})"
            last = v.shape[-1]
            affine = tall or (
                simple_dim(last) and self.chance(0.5)
            )  # tall: the search's choice needs the affine step
            bound = math.sqrt(max_extent(last)) + 1
            if affine:
                w = self.new_input((last,), "normal")
                b = self.new_input((last,), "normal")
                out = self.emit(
                    f"rc.nn.layer_norm({ramped}, {w.name}, {b.name})",
                    -2 * bound - 2,
                    2 * bound + 2,
                    False,
                    op,
                )
            else:
                out = self.emit(f"rc.nn.layer_norm({ramped})", -bound, bound, False, op)
        elif min_extent(v.shape[-1]) >= 2:  # over one value, x / sqrt(x^2 + eps) is ill-conditioned near 0
            bound = math.sqrt(max_extent(v.shape[-1])) + 1
            out = self.emit(f"rc.nn.rms_norm({n})", -bound, bound, False, op)
        else:
            out = self.emit(f"{n}.softmax({axis})", 0.0, 1.0, False, "softmax")
        if (
            out is not None
            and op in ("layer_norm", "rms_norm")
            and simple_dim(out.shape[-1])
            and (tall or self.chance(0.5))
        ):
            # a norm feeding a matmul, as in every transformer: the search may compute its statistics
            # in the matmul's prologue
            w = self.new_input((out.shape[-1], self.choice([8, 16, "B"])))
            kk = max_extent(out.shape[-1])
            out = (
                self.emit(
                    f"({out.name} @ {w.name})", -2 * kk * out.bound, 2 * kk * out.bound, False, "norm_matmul"
                )
                or out
            )
        if out is not None:
            self.tame(out)

    def residual_stream(self):
        """Now and then the rows a transformer block normalises: its residual stream r + x @ w at a
        decode step's few rows, whose statistics the matmul kernel storing them may reduce as it stores
        them (search/row_stats.py). Drawn from a stream of its own, so the draws after it are those of
        earlier runs."""
        main, self.rng = self.rng, np.random.default_rng([self.graph.seed, self.graph.index, 47])
        try:
            if not self.chance(PROJECTED_NORM_RATE):
                return None
            rows, depth, width = self.choice([32, 32, 5, "B"]), self.choice([32, 48]), self.choice([64, 100])
            x, w = self.new_input((rows, depth)), self.new_input((depth, width))
            r = self.new_input((rows, width))
            bound = depth * max(abs(x.lo), abs(x.hi)) * max(abs(w.lo), abs(w.hi)) + max(abs(r.lo), abs(r.hi))
            return self.emit(f"({r.name} + {x.name} @ {w.name})", -bound, bound, False, "projected_norm")
        finally:
            self.rng = main

    def projected_max(self) -> bool:
        """Now and then a maximum (or its index) over the rows of a product x @ w, as a decode step's
        greedy choice over the LM head's logits, after an elementwise step of the repetition
        penalty's kind, or none: the matmul kernel storing the rows may take their maximum as it
        stores them (search/row_stats.py). Drawn from a stream of its own, so the draws after it are
        those of earlier runs."""
        main, self.rng = self.rng, np.random.default_rng([self.graph.seed, self.graph.index, 48])
        try:
            if not self.chance(PROJECTED_MAX_RATE):
                return False
            rows, depth, width = self.choice([32, 5, "B"]), self.choice([16, 48]), self.choice([64, 100])
            x, w = self.new_input((rows, depth)), self.new_input((depth, width))
            bound = depth * max(abs(x.lo), abs(x.hi)) * max(abs(w.lo), abs(w.hi))
            expr = f"({x.name} @ {w.name})"
            if self.chance(0.5):  # halved where a mask is set
                seen = self.new_input((rows, width))
                expr = f"rc.where({seen.name} > 0, {expr} * 0.5, {expr})"
            if self.chance(0.6):
                return self.emit(f"{expr}.amax(-1)", -bound, bound, False, "projected_max") is not None
            return self.emit(f"{expr}.argmax(-1)", 0.0, float(width - 1), True, "projected_max") is not None
        finally:
            self.rng = main

    def step_matmul(self) -> None:
        if self.projected_max():
            return
        v = self.pick(lambda v: len(v.shape) >= 1)
        if v is None:
            return self.step_unary()
        n, shape = v.name, v.shape
        k = shape[-1]
        r = self.rng.random()
        if r < 0.15 and len(shape) >= 2:  # a batched product of the tensor with itself
            kk = max_extent(k)
            out = self.emit(
                f"({n} @ {n}.transpose(-1, -2))", -kk * v.bound**2, kk * v.bound**2, False, "matmul_self"
            )
        elif r < 0.3 and len(shape) >= 2 and simple_dim(shape[-2]):  # W @ v
            m = self.choice([1, 2, 3, 5, "T"])
            w = self.new_input((m, shape[-2]))
            kk = max_extent(shape[-2])
            out = self.emit(f"({w.name} @ {n})", -2 * kk * v.bound, 2 * kk * v.bound, False, "matmul_left")
        elif r < 0.34:  # one row by a long concrete K and a wide W (a decoding step): the search may split K
            kk = 768  # across blocks (matmul_split.cu.j2) or in the graph (search/split.py; smaller K are
            # launch-bound)
            x, w = self.new_input((1, kk)), self.new_input((kk, self.choice([2304, 3072])))
            out = self.emit(
                f"({x.name} @ {w.name})", -2 * kk * x.bound - 2, 2 * kk * x.bound + 2, False, "skinny_matmul"
            )
        elif simple_dim(k):
            width = self.choice([1, 2, 3, 4, 7, "B", 16])
            kk = max_extent(k)
            bias = self.new_input((width,)).name if self.chance(0.4) else None
            if self.chance(0.6):  # x @ W (+ b)
                w = self.new_input((k, width))
                expr = f"({n} @ {w.name})" if bias is None else f"({n} @ {w.name} + {bias})"
            else:  # linear: x @ W.T (+ b)
                w = self.new_input((width, k))
                expr = (
                    f"rc.nn.linear({n}, {w.name})" if bias is None else f"rc.nn.linear({n}, {w.name}, {bias})"
                )
            out = self.emit(expr, -2 * kk * v.bound - 2, 2 * kk * v.bound + 2, False, "matmul")
        else:
            return self.step_unary()
        if out is not None:
            relu = self.chance(0.4)
            out = self.tame(
                out
            )  # then relu: the last step, a maximum of a pair, may be the matmul's stored epilogue
            if relu:
                self.emit(f"{out.name}.relu()", 0.0, max(out.hi, 0.0), False, "relu")

    def step_attention(self) -> None:
        """softmax(q k^T / sqrt(d)) v over a tensor's own rows (causal or not): the search may compute
        the softmax online, inside the product with v (codegen.online). The output is a convex
        combination of v's rows, so it stays within v's interval."""
        q = self.pick(lambda v: len(v.shape) >= 2)
        if q is None:
            return self.step_matmul()
        known = isinstance(q.shape[-1], int) and q.shape[-1] <= 128
        if simple_dim(q.shape[-1]) and (
            not known or self.chance(0.3)
        ):  # a known head dimension: the scores can stream
            w = self.new_input((q.shape[-1], self.choice([4, 8, 16, 40])))
            kk = max_extent(q.shape[-1])
            q = self.emit(f"({q.name} @ {w.name})", -2 * kk * q.bound, 2 * kk * q.bound, False, "matmul") or q
        own_values = self.chance(0.5) and all(
            simple_dim(d) for d in q.shape
        )  # an input's dims are names or ints
        v = self.new_input(q.shape) if own_values else q
        causal = self.chance(0.5)
        out = self.emit(f"rc.nn.scaled_dot_product_attention({q.name}, {q.name}, {v.name}, causal={causal})",
                        v.lo, v.hi, False, "attention")
        if out is not None:
            self.tame(out)

    def step_einsum(self) -> None:
        """rc.einsum contracting the last axis with a new matrix or summing an axis out, and the
        triangles of the last two axes (tril / triu, any diagonal offset)."""
        v = self.pick(lambda v: len(v.shape) >= 2 and simple_dim(v.shape[-1]))
        if v is None:
            return self.step_matmul()
        n, r = v.name, self.rng.random()
        if r < 0.4:
            w = self.new_input((v.shape[-1], self.choice([2, 3, "B"])))
            kk = max_extent(v.shape[-1])
            out = self.emit(
                f"rc.einsum('...ij,jk->...ik', {n}, {w.name})",
                -2 * kk * v.bound,
                2 * kk * v.bound,
                False,
                "einsum",
            )
        elif r < 0.6:
            kk = max_extent(v.shape[-2])
            out = self.emit(f"rc.einsum('...ij->...j', {n})", -kk * v.bound, kk * v.bound, False, "einsum")
        else:
            which, k = self.choice(["tril", "triu"]), int(self.rng.integers(-2, 3))
            out = self.emit(f"{n}.{which}({k})", min(v.lo, 0.0), max(v.hi, 0.0), v.exact, "triangle")
        if out is not None:
            self.tame(out)

    def step_storage(self) -> None:
        """A 16-bit storage type: round a value to float16 or bfloat16 and widen it back (one rounding),
        or keep it 16-bit so that what follows computes, rounds and stores in 16 bits."""
        v = self.pick(lambda v: v.bound <= 30000)
        if v is None:
            return self.step_unary()
        dtype = "half" if self.chance(0.5) else "bfloat16"
        expr = f"{v.name}.{dtype}()" + (".float()" if self.chance(0.5) else "")
        pad = 0.01 * max(abs(v.lo), abs(v.hi))  # rounding moves a value by at most 2^-8 of itself
        self.emit(expr, v.lo - pad, v.hi + pad, False, "storage")

    def wide_rows_output(self) -> Optional[str]:
        """In some graphs, one more output: a composite (layer norm, RMS norm, softmax, log-softmax,
        mean, std) of a fresh input made large (times up to 2^14, rows up to 30,000) and rounded to
        float16 or bfloat16, whose squares and sums leave float16's range unless the composite
        accumulates in float32 and rounds once (ops.core.computed_in_float32). It is drawn from a
        stream of its own after the rest, so every other line, output and feed is as before."""
        side = np.random.default_rng([self.graph.seed, self.graph.index, 16])
        if side.random() >= WIDE_ROWS_RATE:
            return None
        main, self.rng = self.rng, side
        try:
            v = self.new_input(self.random_shape(int(side.integers(1, 4))))
            n, extent = v.name, max_extent(v.shape[-1])
            op = self.choice(["layer_norm", "rms_norm", "softmax", "log_softmax", "mean", "std"])
            if op == "layer_norm":  # a ramp keeps each row's spread (see step_row)
                n, bound = f"({n} + rc.arange({n}.shape[-1]) * 4.25)", 2.0 + 4.25 * extent
            else:
                bound = 2.0
            scale = 2.0 ** min(14, math.floor(math.log2(30000.0 / bound)))
            x = f"({n} * {scale!r}).{self.choice(['half', 'half', 'bfloat16'])}()"
            lo, hi, norm = v.lo * scale, v.hi * scale, math.sqrt(extent) + 1
            if op == "rms_norm" and min_extent(v.shape[-1]) < 2:  # x / sqrt(x^2 + eps) is ill-conditioned
                op = "softmax"
            expr, lo, hi = {"layer_norm": (f"rc.nn.layer_norm({x})", -norm, norm),
                            "rms_norm": (f"rc.nn.rms_norm({x})", -norm, norm),
                            "softmax": (f"{x}.softmax(-1)", 0.0, 1.0),
                            "log_softmax": (f"{x}.log_softmax(-1)", lo - hi - math.log(extent) - 1, 0.0),
                            "mean": (f"{x}.mean(-1)", lo - 0.01 * abs(lo), hi + 0.01 * abs(hi)),
                            "std": (f"{x}.std(-1, correction=0)", 0.0, hi - lo)}[op]
            out = self.emit(expr + (".float()" if self.chance(0.5) else ""), lo, hi, False, f"wide_{op}")
            return self.tame(out).name if out is not None else None
        finally:
            self.rng = main

    def step_torch_math(self) -> None:
        """The PyTorch-named functions: inverse trigonometric and hyperbolic functions, rounding,
        activations, two-operand functions and the dim=/keepdim= reductions, each with its range."""
        v = self.pick(lambda v: v.bound <= 20)
        if v is None:
            return self.step_unary()
        n, lo, hi = v.name, v.lo, v.hi
        options = [
            (f"{n}.atan()", math.atan(lo), math.atan(hi), False, "atan"),
            (f"{n}.asinh()", math.asinh(lo), math.asinh(hi), False, "asinh"),
            (
                f"({n} * 0.05).atanh()",
                math.atanh(max(lo * 0.05, -0.99)),
                math.atanh(min(hi * 0.05, 0.99)),
                False,
                "atanh",
            ),
            (f"{n}.sign()", -1.0, 1.0, True, "sign"),
            (f"{n}.round()", round(lo) - 1, round(hi) + 1, v.exact, "round"),
            (f"{n}.trunc()", math.trunc(lo), math.trunc(hi), v.exact, "trunc"),
            (f"rc.nn.elu({n})", -1.0, max(hi, 0.0), False, "elu"),
            (f"rc.nn.softplus({n})", 0.0, max(hi, 0.0) + 1.0, False, "softplus"),
            (f"rc.nn.hardswish({n})", -0.5, max(hi, 0.0), False, "hardswish"),
        ]
        if v.bound <= 8:
            options.append((f"{n}.cosh()", 1.0, math.cosh(v.bound), False, "cosh"))
        if len(v.shape) >= 1 and isinstance(v.shape[-1], int):
            options.append((f"{n}.cummax(-1).values", lo, hi, v.exact, "cummax"))
            options.append((f"{n}.roll(1, -1)", lo, hi, v.exact, "roll"))
            options.append(
                (f"{n}.logcumsumexp(-1)", lo, hi + math.log(v.shape[-1] + 1), False, "logcumsumexp")
            )
            if v.shape[-1] >= 2:
                options.append((f"{n}.unfold(-1, 2, 1)", lo, hi, v.exact, "unfold"))
            row = v.shape[-1]
            if row <= 16:  # one count of ranks over the row (a sorting network where the batch is symbolic)
                options.append((f"{n}.sort(-1, descending=True)[0]", lo, hi, v.exact, "sort"))
                options.append((f"{n}.gather(-1, {n}.argsort(-1))", lo, hi, v.exact, "gather_sorted"))
                options.append((f"{n}.median(-1, keepdim=True)[0]", lo, hi, v.exact, "median"))
            if (
                row <= 64
            ):  # counts of ranks down a tree of minima (the network's selection where the batch is symbolic)
                k, largest = 1 + self.counter % min(row, 3), self.counter % 2 == 0  # (drawing nothing more)
                options.append((f"{n}.topk({k}, -1, largest={largest})[0]", lo, hi, v.exact, "topk"))
        if len(v.shape) >= 1 and simple_dim(v.shape[-1]):
            extent = max_extent(v.shape[-1])
            options.append(
                (f"{n}.logsumexp(dim=-1, keepdim=True)", lo, hi + math.log(extent), False, "logsumexp")
            )
            # Bessel's correction over one value is NaN by definition: only where the axis has two
            correction = "" if min_extent(v.shape[-1]) >= 2 else ", correction=0"
            options.append((f"{n}.std(dim=-1, keepdim=True{correction})", 0.0, hi - lo + 1.0, False, "std"))
        other = self.pick(lambda w: w is not v and w.shape == v.shape and w.bound <= 20)
        if other is not None:
            options.append((f"rc.atan2({n}, {other.name})", -math.pi, math.pi, False, "atan2"))
            options.append(
                (
                    f"{n}.logaddexp({other.name})",
                    max(lo, other.lo),
                    max(hi, other.hi) + 1.0,
                    False,
                    "logaddexp",
                )
            )
        expr, out_lo, out_hi, exact, op = options[int(self.rng.integers(len(options)))]
        out = self.emit(expr, out_lo, out_hi, exact, op)
        if out is not None:
            self.tame(out)

    def step_layers(self) -> None:
        """Two or three identical residual layers, h + tanh(rms_norm(h) @ W1) @ W2 / 8, each with its own
        weights, as a model stacks its blocks: the search finds them as copies (search/repeat.py) and
        schedules them alike. Each layer moves h by at most hidden / 4 (tanh is within 1, W2's
        entries within 2)."""
        h = self.pick(lambda v: len(v.shape) >= 1 and isinstance(v.shape[-1], int) and 2 <= v.shape[-1] <= 16)
        if h is None:
            return self.step_row()
        width, hidden = h.shape[-1], self.choice([4, 8, 16])
        for _ in range(self.choice([2, 3])):
            w1, w2 = self.new_input((width, hidden)), self.new_input((hidden, width))
            step = hidden / 4
            h = self.emit(f"({h.name} + (rc.nn.rms_norm({h.name}) @ {w1.name}).tanh() @ {w2.name} * 0.125)",
                          h.lo - step, h.hi + step, False, "layers")
            if h is None:
                return

    def step_gather(self) -> None:
        v = self.pick(lambda v: len(v.shape) == 2 and isinstance(v.shape[0], int))
        table = (
            v
            if v is not None and self.chance(0.6)
            else self.new_input((int(self.rng.integers(2, 9)), self.choice([1, 3, 4, "T"])))
        )
        rows = table.shape[0]
        ids = self.new_input(self.choice([(3,), ("B",), (2, "T"), (1,)]), "ids", rows)
        view = self.choice(
            ["", "", ".flip(0)", "[::-1]" if len(ids.shape) == 1 else "[:, ::2]", ".unsqueeze(0)"]
        )
        self.emit(
            f"rc.nn.embedding({ids.name}{view}, {table.name})", table.lo, table.hi, table.exact, "gather"
        )

    # --- one whole graph ------------------------------------------------------------------------
