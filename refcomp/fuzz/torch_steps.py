"""Generator steps for calls written the PyTorch way (issue 28): split and chunk pieces, clamp with number
or tensor bounds, rc.tril/triu, max/min along a dim (the named pair's values, and its indices on exact
values), var/std with a positional dim (PyTorch's correction 1), and random draws with fixed seeds.
`step_torch_methods` draws the methods added after issue 28 (frac ... tile). Mixed into
`generator.Generator`, whose helpers (`pick`, `choice`, `emit`) they use."""
from __future__ import annotations

import math

from .graph import max_extent


class TorchSteps:
    def step_torch_api(self) -> None:
        v = self.pick(lambda v: len(v.shape) >= 1)
        if v is None:
            return self.step_unary()
        n, nd = v.name, len(v.shape)
        known = [
            a for a, d in enumerate(v.shape) if isinstance(d, int) and d >= 2
        ]  # axes whose length is concrete
        options = []
        lo_c, hi_c = sorted(round(float(x), 2) for x in self.rng.uniform(-1.5, 1.5, 2))
        options.append(
            (
                f"{n}.clamp({lo_c!r}, {hi_c!r})",
                min(max(v.lo, lo_c), hi_c),
                max(min(v.hi, hi_c), lo_c),
                v.exact,
                "clamp",
            )
        )
        options.append((f"rc.clamp({n}, min={lo_c!r})", max(v.lo, lo_c), max(v.hi, lo_c), v.exact, "clamp"))
        bound = self.pick(lambda w: w is not v and w.shape == v.shape)
        if bound is not None:
            options.append(
                (
                    f"{n}.clamp(max={bound.name})",
                    min(v.lo, bound.lo),
                    min(v.hi, bound.hi),
                    v.exact and bound.exact,
                    "clamp_tensor",
                )
            )
        if nd >= 2:
            k = int(self.rng.integers(-2, 3))
            options.append(
                (
                    f"rc.tril({n}, {k})" if self.chance(0.5) else f"{n}.triu(diagonal={k})",
                    min(v.lo, 0.0),
                    max(v.hi, 0.0),
                    v.exact,
                    "tril",
                )
            )
        axis = int(self.rng.integers(-nd, nd))
        which = self.choice(["max", "min"])
        keep = ", keepdim=True" if self.chance(0.4) else ""
        options.append((f"{n}.{which}({axis}{keep}).values", v.lo, v.hi, v.exact, "max_pair"))
        options.append((f"{n}.{which}(dim={axis})[0]", v.lo, v.hi, v.exact, "max_pair"))
        if v.exact:  # an index is discontinuous: only where both precisions see the same values
            extent = float(max_extent(v.shape[axis]))
            options.append((f"{n}.{which}({axis}{keep}).indices", 0.0, extent, True, "max_indices"))
        if known:
            axis = self.choice(known)
            length = v.shape[axis]
            size = int(self.rng.integers(1, length))
            pieces = -(-length // size)
            options.append(
                (f"{n}.split({size}, {axis})[{int(self.rng.integers(pieces))}]", v.lo, v.hi, v.exact, "split")
            )
            chunks = int(self.rng.integers(2, length + 1))
            count = -(-length // -(-length // chunks))
            options.append(
                (
                    f"{n}.chunk({chunks}, dim={axis})[{int(self.rng.integers(count))}]",
                    v.lo,
                    v.hi,
                    v.exact,
                    "chunk",
                )
            )
            spread = (v.hi - v.lo) ** 2
            options.append((f"{n}.var({axis}{keep})", 0.0, spread, False, "var_torch"))
            options.append((f"{n}.std({axis})", 0.0, v.hi - v.lo, False, "var_torch"))
        options.extend(self._random_options(v))
        expr, lo, hi, exact, op = options[int(self.rng.integers(len(options)))]
        out = self.emit(expr, lo, hi, exact, op)
        if out is not None:
            self.tame(out)

    def _random_options(self, v) -> list:
        """Random draws (issue 28) beside v's values: every backend must give the reference's bits."""
        n, seed = v.name, int(self.rng.integers(0, 1 << 30))
        gen = f"generator=rc.Generator({seed})"
        p = self.choice([0.25, 0.5])
        scale = 1.0 / (1.0 - p)
        return [
            (f"{n} * rc.rand_like({n}, {gen})", min(v.lo, 0.0), max(v.hi, 0.0), False, "random_rand"),
            (f"{n} + rc.randn_like({n}, {gen})", v.lo - 6.0, v.hi + 6.0, False, "random_randn"),
            (f"rc.randint_like({n}, -3, 4, {gen})", -3.0, 3.0, True, "random_randint"),
            (
                f"rc.nn.dropout({n}, {p}, {gen})",
                min(v.lo * scale, 0.0),
                max(v.hi * scale, 0.0),
                v.exact and p == 0.5,
                "random_dropout",
            ),
        ]

    def step_torch_methods(self) -> None:
        """frac, fmod, remainder, where on a comparison and count_nonzero (discontinuous: on exact values
        only), nan_to_num, nansum, norm, narrow, tile, logit and where on isfinite; and rc.nn's mse_loss,
        huber_loss, cosine_similarity, group_norm, adaptive_avg_pool1d and glu; x[:, ids] along any
        axis; fmax, nanmean, addcmul and diff."""
        v = self.pick(lambda v: len(v.shape) >= 1)
        if v is None:
            return self.step_unary()
        n, nd = v.name, len(v.shape)
        top = max(abs(v.lo), abs(v.hi))
        axis = int(self.rng.integers(-nd, nd))
        extent = float(max_extent(v.shape[axis]))
        options = [
            (f"{n}.nan_to_num()", v.lo, v.hi, v.exact, "nan_to_num"),
            (f"{n}.tile(({int(self.rng.integers(1, 4))},))", v.lo, v.hi, v.exact, "tile"),
            (f"{n}.nansum({axis})", extent * min(v.lo, 0.0), extent * max(v.hi, 0.0), False, "nansum"),
            (f"{n}.sigmoid().logit(eps=1e-3)", -7.0, 7.0, False, "logit"),
            (f"{n}.where({n}.isfinite(), 0.5)", min(v.lo, 0.5), max(v.hi, 0.5), v.exact, "where_method"),
        ]
        p = self.choice([1, 2, "math.inf"])
        reach = {1: extent, 2: math.sqrt(extent), "math.inf": 1.0}[p]
        options.append((f"{n}.norm({p}, {axis})", 0.0, top * reach, False, "norm"))
        spread = v.hi - v.lo
        options += [  # rc.nn's additions, each with a tolerance-friendly eps where a norm is divided by
            (f"rc.nn.mse_loss({n}, {n} * 0.5, reduction='none')", 0.0, 0.25 * top * top, False, "mse_loss"),
            (f"rc.nn.huber_loss({n}, {n} * 0.25, reduction='none')", 0.0, 0.75 * top, False, "huber_loss"),
            (f"rc.nn.cosine_similarity({n}, {n} + 1.0, -1, eps=1.0)", -1.0, 1.0, False, "cosine_similarity"),
        ]
        options += [  # ops/torch_aliases.py's methods made of others
            (f"{n}.fmax({n}.flip(-1))", v.lo, v.hi, v.exact, "fmax"),
            (f"{n}.nanmean({axis})", v.lo, v.hi, False, "nanmean"),
            (f"{n}.addcmul({n}, {n}, value=0.25)", v.lo - 0.25 * top * top, v.hi + 0.25 * top * top, False,
             "addcmul"),
        ]
        if isinstance(v.shape[axis], int) and v.shape[axis] >= 2:
            options.append((f"{n}.diff(1, {axis})", -spread, spread, False, "diff"))
        if nd >= 2:
            options.append((f"rc.nn.group_norm({n}, 1, eps=1.0)", -spread, spread, False, "group_norm"))
        last = v.shape[-1]
        if isinstance(last, int) and last >= 2 and nd in (2, 3):
            size = int(self.rng.integers(1, last + 2))
            pooled = f"rc.nn.adaptive_avg_pool1d({n}, {size})"
            options.append((pooled, v.lo, v.hi, False, "adaptive_avg_pool"))
        if isinstance(last, int) and last >= 2 and nd >= 2:
            if last % 2 == 0:
                options.append((f"rc.nn.glu({n})", min(v.lo, 0.0), max(v.hi, 0.0), False, "glu"))
        known = [a for a, d in enumerate(v.shape) if isinstance(d, int) and d >= 2]
        if known:
            k = self.choice(known)
            length = v.shape[k]
            start = int(self.rng.integers(-length + 1, length))
            size = int(self.rng.integers(1, length - (start % length) + 1))
            options.append((f"{n}.narrow({k}, {start}, {size})", v.lo, v.hi, v.exact, "narrow"))

            def indexed(k=k, length=length):  # its ids input is made only when this option is drawn
                ids = self.new_input(self.choice([(2,), (1, 3), ()]), "ids", length)
                return f"{n}[{':, ' * k}{ids.name}]"
            options.append((indexed, v.lo, v.hi, v.exact, "index_tensor"))
        if v.exact:
            c = self.choice([2.5, -1.5, 3.0])
            options += [
                (f"{n}.frac()", -1.0 if v.lo < 0 else 0.0, 1.0 if v.hi > 0 else 0.0, True, "frac"),
                (f"{n}.remainder({c})", min(c, 0.0), max(c, 0.0), True, "remainder"),
                (f"{n}.fmod({c})", -abs(c) if v.lo < 0 else 0.0, abs(c) if v.hi > 0 else 0.0, True, "fmod"),
                (f"{n}.where({n} > {c}, {-c})", min(v.lo, -c), max(v.hi, -c), True, "where_compared"),
                (f"{n}.count_nonzero({axis}).float()", 0.0, extent, True, "count_nonzero"),
            ]
        expr, lo, hi, exact, op = options[int(self.rng.integers(len(options)))]
        out = self.emit(expr() if callable(expr) else expr, lo, hi, exact, op)
        if out is not None:
            self.tame(out)

