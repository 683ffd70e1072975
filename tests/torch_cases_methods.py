"""Torch-comparison cases (tests/torch_registry.py) of frac, fmod, remainder, where, logit, nan_to_num,
nansum, count_nonzero, norm, mm, narrow and tile: positional and keyword forms, the special values
spread in where they mean something."""
import math

from torch_registry import a, case, refusal

X = a(3, 4, lo=-7.0, hi=7.0, edges=True)
R = a(3, 4, lo=-3.0, hi=3.0)  # no specials: sums of powers, whose inf - inf order would differ


def forms(name, inputs, calls, **kw):
    """`calls`: the argument lists, each called as x.name(*args, **kwargs) on both sides."""
    for args, kwargs in calls:
        case(
            f"Tensor.{name}",
            lambda *xs, args=args, kwargs=kwargs: getattr(xs[0], name)(*args, **kwargs),
            lambda *ts, args=args, kwargs=kwargs: getattr(ts[0], name)(*args, **kwargs),
            *inputs,
            **kw,
        )


forms("frac", (X,), [((), {})], exact=True, emulate=True)
forms("fmod", (X,), [((2.5,), {}), ((-1.5,), {})], exact=True)
forms("remainder", (X,), [((2.5,), {}), ((-1.5,), {})], exact=True, emulate=True)
case("Tensor.where", lambda x: x.where(x > 0, -1.0), lambda t: t.where(t > 0, -1.0), X, exact=True)
case("Tensor.where", lambda x, y: x.where(x < y, y), lambda t, u: t.where(t < u, u), X, X, exact=True)
forms("logit", (a(3, 4, lo=0.0, hi=1.0, edges=True),), [((), {}), ((1e-3,), {}), ((), {"eps": 0.25})],
      rtol=2e-6, atol=1e-6)
forms("nan_to_num", (X,), [((), {}), ((1.5, 7.0, -8.0), {}), ((), {"posinf": 2.0})], exact=True,
      emulate=True)
forms("nansum", (X,), [((), {}), ((1,), {}), ((), {"dim": 0, "keepdim": True})], rtol=1e-6)
forms("count_nonzero", (X,), [((), {}), ((0,), {}), ((), {"dim": (0, 1)})], exact=True)
forms(
    "norm",
    (R,),
    [((), {}), ((2, 1), {}), ((), {"p": 1}), ((), {"p": 1, "dim": 0, "keepdim": True}),
     ((), {"p": math.inf, "dim": 1}), ((), {"p": -math.inf}), ((), {"p": 0, "dim": 1}), ((), {"p": 3}),
     ((), {"p": 0.5, "dim": (0, 1)}), ((), {"p": -2, "dim": 1}), ((), {"dim": 1, "keepdim": True}),
     ((), {"p": "fro"})],
    rtol=2e-6,
    emulate=True,
)
refusal("Tensor.norm", lambda x: x.norm(p="nuc"), "p must be a number or 'fro'", inputs=(R,))
case("Tensor.mm", lambda x, y: x.mm(y), lambda t, u: t.mm(u), a(3, 4), a(4, 5), rtol=1e-6)
forms("narrow", (X,), [((1, 1, 2), {}), ((0, -2, 2), {}), ((1, 4, 0), {})], exact=True)
forms("tile", (X,), [(((2,),), {}), (((2, 1, 1),), {}), ((3,), {})], exact=True)
