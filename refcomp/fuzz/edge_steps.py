"""Generator steps for the edges of the semantics: selects whose other branch is NaN or infinite,
powers of negative bases, views of symbolic axes that only some bindings can take, chains deeper
than one kernel may fuse, and sums long enough for rounding to drift. Mixed into `generator.Generator`,
whose helpers they use."""

from __future__ import annotations

import math

from .graph import LONG_SUM, simple_dim


class EdgeSteps:
    def step_select(self) -> None:
        """rc.where whose branch not taken is NaN or infinite: a select must not let it leak."""
        v = self.pick(lambda v: v.exact)
        if v is None:
            v = self.new_input(self.random_shape(long_ok=False))
        n = v.name
        op = self.choice(["log", "recip", "mask_softmax"])
        if op == "log":  # log of a value <= 0.25 (NaN or -inf for <= 0) is never selected
            hi = math.log(max(v.hi, 0.25))
            self.emit(
                f"rc.where({n} > 0.25, {n}.log(), -1.5)",
                min(math.log(0.25), -1.5),
                max(hi, -1.5),
                False,
                "where_nan_branch",
            )
        elif op == "recip":  # 1/0 = inf lies in the branch not taken
            self.emit(f"rc.where({n}.abs() < 0.5, {n}, 1.0 / {n})", -2.0, 2.0, False, "where_inf_branch")
        elif v.shape:  # -inf scores outside a mask that keeps every row's maximum
            axis = int(self.rng.integers(-len(v.shape), len(v.shape)))
            c = self.choice([0.0, 0.5, -0.5])
            keep = f"({n}.eq({n}.amax({axis}, keepdims=True)) + ({n} > {c!r}))"
            self.emit(f"rc.where({keep}, {n}, -math.inf).softmax({axis})", 0.0, 1.0, False, "masked_softmax")

    def step_integer(self) -> None:
        """int64, int32 and float64 arithmetic between float32 steps: exact values truncated to int64,
        wrapped past 2^63 (by a product) and to 32 bits (a cast), C's remainder, a float64 detour whose
        digits float32 lacks; each comes back to float32 small and exact, so every backend agrees."""
        v = self.pick(lambda v: v.exact) or self.new_input(self.random_shape(long_ok=False), "small_ints", 4)
        n = v.name
        op = self.choice(["wrap", "int32", "float64"])
        if op == "wrap":  # (k * 2^62 + 7 k) wraps; fmod by 1,000 keeps it small
            self.emit(f"rc.fmod({n}.long() * 4611686018427387911 + 2**40, 1000).float()", -999.0, 999.0, True,
                      "int64_wrap")
        elif op == "int32":  # 3e9 + k wraps to a negative int32, then back to a small value
            self.emit(f"(({n}.long() + 3000000000).int() + 1294967296).float()", v.lo - 1, v.hi + 1, True,
                      "int32_wrap")
        else:  # 2^-40 survives in float64 and is subtracted again exactly (3 x + 3 2^-40 fits its 53 bits for
            # |x| < 1,000; 1e-12 did not: 3 x 1e-12 - 3e-12 left 4e-28, which a comparison with 0 told apart)
            self.emit(f"(({n}.double() + 2**-40) * 3 - 3 * 2**-40).float()", 3 * v.lo - 1e-6, 3 * v.hi + 1e-6,
                      True, "float64_detour")

    def step_power(self) -> None:
        """Powers of negative bases: integral exponents keep the sign, others give NaN (as NumPy). The
        base's sign is a branch, so it comes from exact values (both precisions take the same one)."""
        v = self.pick(lambda v: v.exact) or self.new_input(self.random_shape(long_ok=False))
        n = v.name
        base = f"rc.where({n} < 0.0, -({n}.abs() + 0.5), {n}.abs() + 0.5)"  # |base| >= 0.5: no blow-up
        top = v.bound + 0.5
        if self.chance(0.5):
            e = self.new_input(tuple(d if simple_dim(d) else 1 for d in v.shape), "small_ints", 4)
            self.emit(f"({base} ** {e.name})", -top ** 3, top ** 3, False, "pow_tensor")
        else:
            k = self.choice([-2, -1, 2, 3, 0.5, 1.5, 0])
            self.emit(f"({base} ** {k!r})", -top ** 3, top ** 3, False, "pow_negative_base")

    def step_fragile(self) -> None:
        """An index or slice of a symbolic axis that only some bindings can take (x[:, 3] needs T > 3);
        at the others every backend must refuse the binding as the reference does."""
        v = self.pick(lambda v: any(not isinstance(d, int) for d in v.shape))
        if v is None:
            return self.step_view()
        axis = self.choice([a for a, d in enumerate(v.shape) if not isinstance(d, int)])
        item = self.choice(["0", "1", "3", "-1", "-2", "1:", "2:", ":1", ":3", "-2:", "1:-1", "::2"])
        index = ", ".join([":"] * axis + [item])
        self.emit(f"{v.name}[{index}]", v.lo, v.hi, v.exact, "fragile_index")

    def step_deep(self) -> None:
        """A chain deeper than one kernel may fuse (codegen.emit.MAX_FUSED_NODES)."""
        v = self.pick()
        depth = int(self.rng.integers(45, 60))  # three ops a step: 135 to 180 nodes, past MAX_FUSED_NODES
        self.emit(
            f"functools.reduce(lambda t, _: (t * 0.75 + 0.125).sin(), range({depth}), {v.name})",
            -1.0,
            1.0,
            False,
            "deep_chain",
        )

    def long_sum(self):
        """The mean of B x 700-850 values close to an offset, less the offset. A thread that adds them
        one after another (the plain lowering gives the symbolic axis one thread) drifts by tens of
        ulps of the offset, 2 to 20 times the tolerance; a compensated sum (codegen/sums.py) stays
        within a few ulps, under the tolerance's 1e-5 for an offset this size."""
        x = self.new_input(("B", int(self.rng.integers(*LONG_SUM))))
        offset = self.choice([-14.3, 15.1, -12.7])
        return self.emit(
            f"(({x.name} * 0.0001 + {offset!r}).reshape(-1).mean() - {offset!r})",
            -2e-4,
            2e-4,
            False,
            "long_sum",
        )
