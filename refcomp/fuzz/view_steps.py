"""Generator steps for views: permute, flip, slice, pad, reshape, (un)squeeze, expand and transpose,
each emitted as an edge between compute nodes, and the random slices, pads and reshapes other steps
reuse; and the views' sums: concat, stack and cumsum. Mixed into `generator.Generator`, whose helpers
(`pick`, `chance`, `emit`) they use."""

from __future__ import annotations

from .graph import max_extent


class ViewSteps:
    def step_view(self) -> None:
        v = self.pick()
        n, shape, nd = v.name, v.shape, len(v.shape)
        ops = ["permute", "flip", "slice", "pad", "reshape", "unsqueeze", "expand", "squeeze", "transpose"]
        op = self.choice(ops)
        if nd == 0:
            op = self.choice(["unsqueeze", "expand"])
        if op == "permute" and nd >= 2:
            order = [int(a) for a in self.rng.permutation(nd)]
            expr = f"{n}.permute({', '.join(map(str, order))})"
        elif op == "transpose" and nd >= 2:
            expr = f"{n}.transpose(-1, -2)" if self.chance(0.5) else f"{n}.T"
        elif op == "flip":
            expr = f"{n}.flip({int(self.rng.integers(nd))})" if self.chance(0.7) else f"{n}.flip()"
        elif op == "slice":
            items = []
            for axis, d in enumerate(shape):
                if (
                    isinstance(d, int) and d > 1 and op == "slice" and self.chance(0.1)
                ):  # one list of ints picks entries
                    picks = [int(i) for i in self.rng.integers(-d, d, int(self.rng.integers(1, 5)))]
                    items.append(repr(picks))
                    op = "index_list"
                elif isinstance(d, int) and self.chance(0.6):
                    items.append(self.random_slice(d))
                elif not isinstance(d, int) and self.chance(0.3):
                    items.append(
                        self.choice(["::2", "::-1", "::3", "::-2"]) if self.choice([0, 1]) == 0 else "::-1"
                    )
                else:
                    items.append(":")
            expr = f"{n}[{', '.join(items)}]"
        elif op == "pad":
            widths = self.pad_widths(shape, 2, 0.6)
            value = self.choice([0.0, 0.0, 0.5, -1.0])
            expr = f"{n}.pad({widths!r}" + (f", value={value!r})" if value else ")")
            return self._emit_view(expr, v, min(v.lo, value), max(v.hi, value), v.exact, "pad")
        elif op == "reshape":
            expr = self.random_reshape(v)
        elif op == "unsqueeze":
            expr = f"{n}.unsqueeze({int(self.rng.integers(-nd - 1, nd + 1))})"
        elif op == "squeeze" and any(isinstance(d, int) and d == 1 for d in shape):
            axis = self.choice([a for a, d in enumerate(shape) if isinstance(d, int) and d == 1])
            expr = f"{n}.squeeze({axis})"
        elif op == "expand":
            ones = [a for a, d in enumerate(shape) if isinstance(d, int) and d == 1]
            if ones and self.chance(0.6):
                sizes = ["-1"] * nd
                sizes[self.choice(ones)] = self.choice(["3", "5", "'B'", "'T'"])
                expr = f"{n}.expand({', '.join(sizes)})"
            else:
                lead = self.choice(["2", "4", "'B'"])
                expr = f"{n}.expand({', '.join([lead] + ['-1'] * nd)})" if nd else f"{n}.expand({lead})"
        else:
            expr = f"{n}.flip({int(self.rng.integers(nd))})" if nd else f"{n}.unsqueeze(0)"
        self._emit_view(expr, v, v.lo, v.hi, v.exact, op)

    def step_combine(self) -> None:
        v = self.pick(lambda v: len(v.shape) >= 1)
        if v is None:
            return self.step_unary()
        n, nd = v.name, len(v.shape)
        axis = int(self.rng.integers(nd))
        r = self.rng.random()
        if r < 0.4:
            others = [w for w in self.vars if w is not v and len(w.shape) == nd and
                      all(str(a) == str(b) for i, (a, b) in enumerate(zip(w.shape, v.shape)) if i != axis)]
            other = self.choice(others) if others else None
            extent = v.shape[axis]
            if other is None and isinstance(extent, int) and extent >= 2:
                # v's two halves joined again: neighbouring reads of one node, which the rule
                # join_views reads through one view (no extra random draw: the extent decides)
                half = extent // 2
                parts = f"{n}.narrow({axis}, 0, {half}), {n}.narrow({axis}, {half}, {extent - half})"
                self.emit(f"rc.concat([{parts}], {axis})", v.lo, v.hi, v.exact, "concat")
                return
            o = other.name if other is not None else f"{n}.flip({axis})"
            lo = min(v.lo, other.lo) if other is not None else v.lo
            hi = max(v.hi, other.hi) if other is not None else v.hi
            ex = v.exact and (other.exact if other is not None else True)
            self.emit(f"rc.concat([{n}, {o}], {axis})", lo, hi, ex, "concat")
        elif r < 0.7:
            self.emit(
                f"rc.stack([{n}, {n} * 0.5], {int(self.rng.integers(-nd - 1, nd + 1))})",
                min(v.lo, v.lo * 0.5),
                max(v.hi, v.hi * 0.5),
                v.exact,
                "stack",
            )
        else:
            extent = max_extent(v.shape[axis])
            out = self.emit(
                f"{n}.cumsum({axis})",
                min(0.0, v.lo, v.lo * extent),
                max(0.0, v.hi, v.hi * extent),
                False,
                "cumsum",
            )
            if out is not None:
                self.tame(out)

    def _emit_view(self, expr, v, lo, hi, exact, op):
        out = self.emit(expr, lo, hi, exact, op)
        # a view followed by an elementwise op, so the view lands on an edge between compute nodes
        if out is not None and self.chance(0.3):
            self.emit(
                f"({out.name} * {self.choice([0.5, 2.0, -1.0, 1.0])!r})",
                -out.bound * 2,
                out.bound * 2,
                out.exact,
                "scale_after_view",
            )

    def random_view_suffix(self, shape) -> str:
        """A view that keeps every element (no pad): flip, permute, transpose, expand or reshape."""
        nd = len(shape)
        r = self.rng.random()
        if r < 0.3:
            return f".flip({int(self.rng.integers(nd))})"
        if r < 0.5 and nd >= 2:
            return f".permute({', '.join(str(int(a)) for a in self.rng.permutation(nd))})"
        if r < 0.7:
            return f".unsqueeze(0).expand({', '.join([self.choice(['2', '3'])] + ['-1'] * nd)})"
        if r < 0.85:
            return ".reshape(-1)"
        return ".transpose(0, -1)"

    def random_slice(self, n: int) -> str:
        step = self.choice([1, 1, 2, 3, -1, -2])
        a, b = sorted(int(x) for x in self.rng.integers(0, n + 1, 2))
        if a == b:
            a, b = 0, n
        if step > 0:
            return f"{a}:{b}" + (f":{step}" if step != 1 else "")
        return f"{b - 1}:{a - 1 if a > 0 else ''}:{step}" if b - 1 >= 0 else f"::{step}"

    def pad_widths(self, shape, most: int, p: float = 1.0) -> list:
        """Random pad widths, on any axis."""
        return [(int(self.rng.integers(0, most + 1)), int(self.rng.integers(0, most + 1)))
                if self.chance(p) else (0, 0) for d in shape]

    def random_reshape(self, v) -> str:
        n, shape, nd = v.name, v.shape, len(v.shape)
        r = self.rng.random()
        dims = [f"{n}.shape[{a}]" for a in range(nd)]
        if r < 0.3 or nd == 1:
            if (
                nd == 1
                and isinstance(shape[0], int)
                and shape[0] > 3
                and any(shape[0] % k == 0 for k in (2, 3))
            ):
                k = 2 if shape[0] % 2 == 0 else 3
                return f"{n}.reshape({k}, -1)"
            return f"{n}.reshape(-1)"
        if r < 0.7 and nd >= 2:
            a = int(self.rng.integers(nd - 1))
            new = dims[:a] + ["-1"] + dims[a + 2:]
            return f"{n}.reshape({', '.join(new)})"
        splittable = [
            a for a, d in enumerate(shape) if isinstance(d, int) and d > 3 and (d % 2 == 0 or d % 3 == 0)
        ]
        if splittable:
            a = self.choice(splittable)
            k = 2 if shape[a] % 2 == 0 else 3
            new = dims[:a] + [str(k), "-1"] + dims[a + 1:]
            return f"{n}.reshape({', '.join(new)})"
        return f"{n}.reshape({', '.join(dims + ['1'])})"
