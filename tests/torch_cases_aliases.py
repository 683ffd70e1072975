"""Torch-comparison cases (tests/torch_registry.py) of PyTorch's other names for Tensor methods and the
methods it defines from others (refcomp/ops/torch_aliases.py), special values spread in."""
from torch_registry import a, case

X, Y = a(3, 4, edges=True), a(3, 4, edges=True)
P = a(3, 4, lo=0.1, hi=0.9)
V = a(4)


def same(name, *inputs, args=(), kwargs=None, **kw):
    kwargs = kwargs or {}
    case(f"Tensor.{name}", lambda *xs: getattr(xs[0], name)(*xs[1:], *args, **kwargs),
         lambda *ts: getattr(ts[0], name)(*ts[1:], *args, **kwargs), *inputs, **kw)


for name in ("absolute", "arcsinh", "arctan", "negative", "sgn", "square", "positive", "ravel", "fliplr",
             "flipud", "signbit", "isposinf", "isneginf", "msort", "deg2rad", "rad2deg"):
    same(name, X, rtol=1e-6)
for name in ("arccos", "arcsin", "arctanh"):
    same(name, P, rtol=1e-6)
same("arccosh", a(3, 4, lo=1.0, hi=4.0), rtol=1e-6)
for name in ("divide", "multiply", "subtract", "greater", "greater_equal", "less", "less_equal", "not_equal",
             "true_divide", "floor_divide", "fmax", "fmin", "clamp_max", "view_as", "reshape_as"):
    same(name, X, Y, exact=name not in ("divide", "true_divide", "floor_divide"), rtol=1e-6)
same("divide", X, Y, kwargs={"rounding_mode": "trunc"}, rtol=1e-6)
same("subtract", X, Y, kwargs={"alpha": 2}, rtol=1e-6)
same("clamp_min", X, args=(0.5,), exact=True)
same("ndimension", X)
same("nelement", X)
same("is_floating_point", X)
same("expand_as", V, X, exact=True)
same("nanmean", X, rtol=1e-6)
same("nanmean", X, args=(1, True), rtol=1e-6, emulate=True)
same("addcmul", X, Y, P, kwargs={"value": 0.5}, rtol=1e-6)
same("addcdiv", X, Y, P, rtol=1e-6)
case("Tensor.unbind", lambda x: x.unbind(1)[2], lambda t: t.unbind(1)[2], X, exact=True)
case("Tensor.unbind", lambda x: x.unbind()[0], lambda t: t.unbind()[0], X, exact=True)
same("diff", X, rtol=1e-6)
same("diff", a(5, 4), args=(2, 0), rtol=1e-6)
same("dot", V, V, rtol=1e-6)
same("outer", V, V, rtol=1e-6)
same("addmm", a(3, 5), a(3, 4), a(4, 5), kwargs={"beta": 0.5, "alpha": 2}, rtol=1e-6)
same("addmm", a(3, 5, edges=True), a(3, 4), a(4, 5), kwargs={"beta": 0}, rtol=1e-6)  # NaNs of x unread
