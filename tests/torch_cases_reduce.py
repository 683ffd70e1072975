"""Torch-comparison cases (tests/torch_registry.py) of the reductions, scans and sorts: each in PyTorch's
positional and keyword forms (dim, keepdim, dim=(), the axis=/keepdims= aliases, var's unbiased and
correction), on random values with the special ones spread in."""
from api_helpers import torch
from torch_registry import a, case, refusal

F = torch.nn.functional if torch is not None else None
X = a(3, 4, 5, edges=True)  # every reduction over it meets +-0, +-inf and NaN somewhere
R = a(3, 4, 5)  # random values only, for sums whose order would matter against inf - inf

FORMS = [
    ((), {}),
    ((1,), {}),
    ((-1, True), {}),
    ((), {"dim": 0}),
    ((), {"dim": (0, 2)}),
    ((), {"dim": 2, "keepdim": True}),
    ((), {"axis": 1, "keepdims": True}),
    (((),), {}),
]


def forms(name, inputs, rtol=2e-6, atol=1e-6, exact=False, skip=(), emulate=False):
    for k, (args, kwargs) in enumerate(FORMS):
        if k in skip:
            continue
        case(
            f"Tensor.{name}",
            lambda x, args=args, kwargs=kwargs: getattr(x, name)(*args, **kwargs),
            lambda t, args=args, kwargs=kwargs: getattr(t, name)(*args, **kwargs),
            inputs,
            rtol=rtol,
            atol=atol,
            exact=exact,
            emulate=emulate and k == 2,
        )


forms("sum", R, rtol=1e-6, emulate=True)
forms("mean", R, rtol=1e-6)
forms("amax", X, exact=True, emulate=True)
forms("amin", X, exact=True)
forms("any", X, exact=True, skip=(4,))  # PyTorch's any takes one dim (a tuple only in newer versions)
forms("all", X, exact=True, skip=(4,))
forms("logsumexp", R, rtol=1e-6, skip=(0, 7))  # PyTorch's logsumexp needs a dim
forms("var", R, rtol=2e-6, skip=(6,), emulate=True)  # axis= alone: refused, below
forms("std", R, rtol=2e-6, skip=(6,))
for args, kwargs in [
    ((1, False), {}),
    ((1, True, True), {}),
    ((True,), {}),
    ((False,), {}),
    ((1,), {"correction": 0}),
    ((), {"dim": 2, "correction": 2}),
    ((), {"dim": 1, "unbiased": False, "keepdim": True}),
]:
    for name in ("var", "std"):
        case(f"Tensor.{name}", lambda x, n=name, args=args, kwargs=kwargs: getattr(x, n)(*args, **kwargs),
             lambda t, n=name, args=args, kwargs=kwargs: getattr(t, n)(*args, **kwargs), R, rtol=2e-6)
for name in ("var", "std"):
    case(
        f"Tensor.{name}",
        lambda x, n=name: getattr(x, n)(axis=1, ddof=0),
        lambda t, n=name: getattr(t, n)(1, correction=0),
        R,
    )
    refusal(f"Tensor.{name}", lambda x, n=name: getattr(x, n)(axis=1), "axis=", "correction=", inputs=(R,))
    case(
        f"Tensor.{name}", lambda x, n=name: getattr(x, n)(0), lambda t, n=name: getattr(t, n)(0), a(1, 3)
    )  # n - 1 = 0: NaN
case("Tensor.prod", lambda x: x.prod(), lambda t: t.prod(), a(3, 4, lo=0.5, hi=1.5), rtol=2e-6)
case("Tensor.prod", lambda x: x.prod(1), lambda t: t.prod(1), a(3, 4, 5, lo=-2, hi=2, edges=True), rtol=2e-6)
case(
    "Tensor.prod",
    lambda x: x.prod(dim=0, keepdim=True),
    lambda t: t.prod(dim=0, keepdim=True),
    a(3, 4),
    rtol=2e-6,
)

for name in ("max", "min"):
    case(
        f"Tensor.{name}", lambda x, n=name: getattr(x, n)(), lambda t, n=name: getattr(t, n)(), X, exact=True
    )
    for args, kwargs in [((1,), {}), ((-1, True), {}), ((), {"dim": 0}), ((), {"dim": 2, "keepdim": True}),
                         ((), {"axis": 1})]:
        case(f"Tensor.{name}", lambda x, n=name, args=args, kwargs=kwargs: getattr(x, n)(*args, **kwargs),
             lambda t, n=name, args=args, kwargs=kwargs: getattr(t, n)(*args, **kwargs), X, exact=True,
             emulate=not args and kwargs.get("dim") == 0)
    case(
        f"Tensor.{name}",
        lambda x, n=name: getattr(x, n)(-1),
        lambda t, n=name: getattr(t, n)(-1),
        a(4, 6, values=(1, 3, 3, 1, 0, 2) * 3 + (float("nan"), 1, float("nan"), 2, 5, 5)),
        exact=True,
    )  # ties, NaN
    case(
        f"Tensor.{name}",
        lambda x, y, n=name: getattr(x, n)(y),
        lambda x, y, n=name: getattr(x, n)(y),
        X,
        a(4, 5),
        exact=True,
    )
    refusal(f"Tensor.{name}", lambda x, n=name: getattr(x, n)((0, 1)), f"a{name}", inputs=(X,))
    pair = lambda x, n=name: getattr(x, n)(dim=1)  # noqa: E731 - the named pair's fields, by name
    case(
        f"Tensor.{name}",
        lambda x, p=pair: (p(x).values, p(x).indices),
        lambda t, n=name: tuple(getattr(t, n)(dim=1)),
        X,
        exact=True,
    )
for name in ("argmax", "argmin"):
    for args, kwargs in [((), {}), ((1,), {}), ((-1, True), {}), ((), {"dim": 0, "keepdim": False})]:
        case(f"Tensor.{name}", lambda x, n=name, args=args, kwargs=kwargs: getattr(x, n)(*args, **kwargs),
             lambda t, n=name, args=args, kwargs=kwargs: getattr(t, n)(*args, **kwargs), X, exact=True)

for name, lo in (("softmax", -30), ("log_softmax", -30)):
    case(
        f"Tensor.{name}",
        lambda x, n=name: getattr(x, n)(1),
        lambda t, n=name: getattr(t, n)(1),
        a(3, 4, 5, lo=lo, hi=30),
        rtol=1e-5,
        atol=1e-7,
        emulate=name == "softmax",
    )
    case(
        f"Tensor.{name}",
        lambda x, n=name: getattr(x, n)(dim=-1),
        lambda t, n=name: getattr(t, n)(dim=-1),
        a(
            4,
            3,
            values=(0, float("-inf"), 1, float("-inf"), 5, float("-inf"), float("inf"), 1, 2, 3, 1e30, 3),
        ),
        rtol=1e-6,
        atol=1e-7,
    )
    case(
        f"Tensor.{name}",
        lambda x, n=name: getattr(x, n)(0, dtype="float16"),
        lambda t, n=name: getattr(t, n)(0, dtype=torch.float16),
        a(4, 3),
        rtol=2e-3,
        atol=1e-3,
    )
case("Tensor.softmin", lambda x: x.softmin(dim=0), lambda t: F.softmin(t, dim=0), a(3, 4), rtol=1e-6)
case("Tensor.softmin", lambda x: x.softmin(1), lambda t: F.softmin(t, 1), a(3, 4), rtol=1e-6)

case("Tensor.cumsum", lambda x: x.cumsum(1), lambda t: t.cumsum(1), R, rtol=1e-5, atol=1e-5, emulate=True)
# dtype=: the input converted first, the result of that type (tests/test_reduction_dtypes.py checks the types)
P = a(3, 4, lo=0.5, hi=1.5)  # positive: a 16-bit sum without cancellation
for name, call in (("sum", lambda x, d: x.sum(1, dtype=d)), ("mean", lambda x, d: x.mean(dtype=d)),
                   ("prod", lambda x, d: x.prod(0, dtype=d)), ("cumsum", lambda x, d: x.cumsum(1, dtype=d)),
                   ("cumprod", lambda x, d: x.cumprod(1, dtype=d))):
    case(
        f"Tensor.{name}",
        lambda x, c=call: c(x, "float16"),
        lambda t, c=call: c(t, torch.float16),
        P,
        rtol=4e-3,
        atol=1e-3,
        emulate=name == "mean",
    )
    if name == "mean":  # PyTorch has no integer mean
        refusal(f"Tensor.{name}", lambda x, c=call: c(x, "int64"), "dtype=", "int64", "float types only",
                inputs=(P,))
    else:  # each value truncated to an int64 first
        case(f"Tensor.{name}", lambda x, c=call: c(x * 3, "int64"), lambda t, c=call: c(t * 3, torch.int64),
             P)
    case(f"Tensor.{name}", lambda x, c=call: c(x, "float64"), lambda t, c=call: c(t, torch.float64), P)
refusal("Tensor.softmax", lambda x: x.softmax(1, torch.int64), "dtype=", "int64", "float types only",
        inputs=(P,))
case("Tensor.softmax", lambda x: x.softmax(1, torch.float64), lambda t: t.softmax(1, torch.float64), P,
     rtol=1e-12)
refusal("Tensor.sum", lambda x: x.sum(dtype=torch.bool), "bool", "any()", inputs=(P,))
case("Tensor.cumsum", lambda x: x.cumsum(dim=0), lambda t: t.cumsum(dim=0), X, rtol=1e-5, atol=1e-5)
case("Tensor.cumprod", lambda x: x.cumprod(1), lambda t: t.cumprod(1), a(3, 6, lo=0.5, hi=1.5), rtol=1e-6)
case("Tensor.logcumsumexp", lambda x: x.logcumsumexp(0), lambda t: t.logcumsumexp(0), a(3, 6), rtol=1e-6)
for name in ("cummax", "cummin"):
    values = (1, 1, 3, 3, float("nan"), 2, float("nan"), 0, 0, -1, float("-inf"), float("-inf"))
    case(
        f"Tensor.{name}",
        lambda x, n=name: tuple(getattr(x, n)(-1)),
        lambda t, n=name: tuple(getattr(t, n)(-1)),
        a(2, 6, values=values),
        exact=True,
    )  # ties and NaN: PyTorch's later index
    case(f"Tensor.{name}", lambda x, n=name: (getattr(x, n)(dim=0).values, getattr(x, n)(dim=0).indices),
         lambda t, n=name: tuple(getattr(t, n)(dim=0)), X, exact=True, emulate=name == "cummax")

case(
    "Tensor.sort",
    lambda x: x.sort(1, descending=True),
    lambda t: t.sort(dim=1, descending=True, stable=True),
    a(3, 7),
    exact=True,
)
case("Tensor.sort", lambda x: x.sort(), lambda t: t.sort(stable=True), a(3, 7), exact=True)
case("Tensor.argsort", lambda x: x.argsort(0), lambda t: t.argsort(dim=0, stable=True), a(5, 3), exact=True)
case("Tensor.topk", lambda x: x.topk(3), lambda t: t.topk(3), a(4, 9), exact=True)
case("Tensor.topk", lambda x: x.topk(2, 0, False), lambda t: t.topk(2, 0, False), a(4, 9), exact=True)
case("Tensor.kthvalue", lambda x: x.kthvalue(3), lambda t: t.kthvalue(3), a(4, 9), exact=True)
case(
    "Tensor.kthvalue", lambda x: x.kthvalue(2, 0, True), lambda t: t.kthvalue(2, 0, True), a(5, 3), exact=True
)
case("Tensor.median", lambda x: x.median(), lambda t: t.median(), a(4, 9), exact=True)
case("Tensor.median", lambda x: x.median(1), lambda t: t.median(1), a(4, 8), exact=True)

# the named pairs (torch.return_types): read by field name, as PyTorch users write them
case(
    "Tensor.topk",
    lambda x: (x.topk(3).values, x.topk(3).indices),
    lambda t: (t.topk(3).values, t.topk(3).indices),
    a(3, 7),
    exact=True,
)
case(
    "Tensor.sort",
    lambda x: x.sort(0).indices,
    lambda t: t.sort(dim=0, stable=True).indices,
    a(5, 4),
    exact=True,
)
case(
    "Tensor.kthvalue",
    lambda x: x.kthvalue(2, 0).values,
    lambda t: t.kthvalue(2, 0).values,
    a(5, 4),
    exact=True,
)
case("Tensor.median", lambda x: x.median(1).indices, lambda t: t.median(1).indices, a(4, 5), exact=True)
case("rc.return_types", lambda x: type(x.topk(1)).__name__, lambda t: type(t.topk(1)).__name__, a(4))
