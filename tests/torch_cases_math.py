"""Torch-comparison cases (tests/torch_registry.py) of the elementwise Tensor methods and operators:
unary math over a domain plus the special values, two-operand functions over every pair of special
values, comparisons, logical and boolean operators, clamp."""
import numpy as np

from api_helpers import torch
from torch_registry import SPECIAL, a, case, refusal

F = torch.nn.functional if torch is not None else None
N = 300
PAIRS = len(SPECIAL) ** 2  # every ordered pair of special values, then random ones


def unary(
    name,
    lo,
    hi,
    rtol=2e-6,
    atol=1e-6,
    edges=True,
    ours=None,
    theirs=None,
    exact=False,
    emulate=False,
    key=None,
):
    case(
        key or f"Tensor.{name}",
        ours or (lambda x: getattr(x, name)()),
        theirs or (lambda t: getattr(t, name)()),
        a(N, lo=lo, hi=hi, edges=edges),
        rtol=rtol,
        atol=atol,
        exact=exact,
        emulate=emulate,
    )


# name: domain, rtol, atol, special values too
for name, (lo, hi, rtol, atol, edges) in {
    "abs": (-5, 5, 0, 0, True),
    "sqrt": (0, 100, 2e-7, 0, True),
    "rsqrt": (1e-3, 100, 3e-7, 0, True),
    "reciprocal": (-10, 10, 2e-7, 0, True),
    "exp": (-80, 80, 6e-6, 0, True),
    "exp2": (-100, 100, 2e-7, 0, True),
    "log": (1e-3, 1e6, 3e-7, 1e-7, True),
    "log2": (1e-3, 1e6, 2e-7, 1e-7, True),
    "log10": (1e-3, 1e6, 3e-7, 0, True),
    "expm1": (-5, 5, 6e-7, 1e-30, True),
    "log1p": (-0.9, 10, 5e-7, 1e-30, True),
    "sin": (-10, 10, 0, 2e-7, True),
    "cos": (-10, 10, 0, 2e-6, True),
    "tan": (-1.5, 1.5, 2e-5, 1e-6, False),
    "asin": (-1, 1, 5e-7, 1e-7, True),
    "acos": (-1, 1, 5e-7, 1e-7, True),
    "atan": (-50, 50, 3e-7, 1e-7, True),
    # exp's own error grows with |x| (its argument's rounding, about 6e-8 |x|): 5e-6 at 88
    "sinh": (-88, 88, 6e-6, 1e-30, True),
    "cosh": (-88, 88, 6e-6, 0, True),
    "tanh": (-10, 10, 5e-7, 1e-30, True),
    "asinh": (-1e3, 1e3, 5e-7, 1e-30, True),
    "acosh": (1, 1e3, 5e-7, 1e-7, True),
    "atanh": (-0.999, 0.999, 5e-7, 1e-30, True),
    "erf": (-4, 4, 0, 2e-7, True),
    "erfc": (-4, 3, 2e-6, 1e-30, True),
    "sigmoid": (-30, 30, 2e-6, 1e-30, True),
    "relu": (-5, 5, 0, 0, True),
    "neg": (-5, 5, 0, 0, True),
}.items():
    unary(
        name, lo, hi, rtol, atol, edges, exact=rtol == 0 and atol == 0, emulate=name in ("exp", "atan", "erf")
    )
unary(
    "silu", -30, 30, 2e-6, 1e-7, theirs=lambda t: F.silu(t), emulate=True
)  # torch.Tensor has no silu method
for name in ("floor", "ceil", "trunc", "round", "sign"):
    unary(name, -100, 100, exact=True, emulate=name == "round")
for name in ("isnan", "isinf", "isfinite", "logical_not"):
    unary(name, -3, 3, exact=True)
unary("gelu", -8, 8, rtol=2e-6, atol=1e-7, theirs=lambda t: F.gelu(t))  # the default is the exact form
unary(
    "gelu",
    -8,
    8,
    rtol=5e-6,
    atol=5e-7,
    ours=lambda x: x.gelu(approximate="tanh"),  # 1 + tanh cancels: absolute
    theirs=lambda t: F.gelu(t, approximate="tanh"),
    emulate=True,
)
unary(
    "round",
    -100,
    100,
    rtol=1.2e-7,
    atol=0,
    ours=lambda x: x.round(decimals=1),  # / 10 by its reciprocal: 1 ulp
    theirs=lambda t: t.round(decimals=1),
    edges=False,
)
unary("abs", -5, 5, exact=True, ours=abs, theirs=abs)
refusal("Tensor.gelu", lambda x: x.gelu("erf"), "approximate", inputs=(a(3),))


SPECIAL_PAIRS = (tuple(np.repeat(SPECIAL, len(SPECIAL))), tuple(np.tile(SPECIAL, len(SPECIAL))))


def binary(key, ours, theirs, lo=-20, hi=20, rtol=2e-6, atol=1e-6, exact=False, emulate=False, edges=True):
    case(
        key,
        ours,
        theirs,
        a(N, lo=lo, hi=hi, edges=edges),
        a(N, lo=lo, hi=hi, edges=edges),
        rtol=rtol,
        atol=atol,
        exact=exact,
        emulate=emulate,
    )
    if edges:  # every ordered pair of special values
        case(
            key,
            ours,
            theirs,
            a(PAIRS, values=SPECIAL_PAIRS[0]),
            a(PAIRS, values=SPECIAL_PAIRS[1]),
            rtol=rtol,
            atol=atol,
            exact=exact,
        )


binary("Tensor.add", lambda x, y: x.add(y), lambda x, y: x.add(y), rtol=1e-7)
binary("Tensor.add", lambda x, y: x.add(y, alpha=2), lambda x, y: x.add(y, alpha=2), rtol=2e-6)
binary("Tensor.sub", lambda x, y: x.sub(y, alpha=3), lambda x, y: x.sub(y, alpha=3), rtol=2e-6, atol=2e-6)
binary("Tensor.mul", lambda x, y: x.mul(y), lambda x, y: x.mul(y), rtol=1e-7)
binary("Tensor.div", lambda x, y: x.div(y), lambda x, y: x.div(y), rtol=3e-7, atol=1e-30)
binary(
    "Tensor.div",
    lambda x, y: x.div(y, rounding_mode="trunc"),
    lambda x, y: x.div(y, rounding_mode="trunc"),
    exact=True,
)
binary(
    "Tensor.div",
    lambda x, y: x.div(y, rounding_mode="floor"),
    lambda x, y: x.div(y, rounding_mode="floor"),
    exact=True,
)
binary("Tensor.pow", lambda x, y: x.pow(y), lambda x, y: x.pow(y), lo=0.1, hi=4, rtol=3e-6, atol=1e-30)
unary("pow", -4, 4, rtol=1e-6, ours=lambda x: x.pow(3), theirs=lambda t: t.pow(3))
binary("Tensor.copysign", lambda x, y: x.copysign(y), torch.copysign if torch else None, exact=True)
binary(
    "Tensor.logaddexp", lambda x, y: x.logaddexp(y), torch.logaddexp if torch else None, rtol=3e-7, atol=1e-30
)
binary("Tensor.arctan2", lambda x, y: x.arctan2(y), torch.arctan2 if torch else None, rtol=5e-7, atol=1e-30)
binary(
    "Tensor.maximum", lambda x, y: x.maximum(y), torch.maximum if torch else None, exact=True, emulate=True
)
binary("Tensor.minimum", lambda x, y: x.minimum(y), torch.minimum if torch else None, exact=True)
binary(
    "Tensor.lerp", lambda x, y: x.lerp(y, 0.3), lambda x, y: x.lerp(y, 0.3), rtol=1e-6, atol=1e-6, edges=False
)
case(
    "Tensor.lerp",
    lambda x, y, w: x.lerp(y, w),
    lambda x, y, w: x.lerp(y, w),
    a(50),
    a(50),
    a(50, lo=-0.5, hi=1.5),
    rtol=1e-6,
    atol=1e-6,
)
for name in ("logical_and", "logical_or", "logical_xor"):
    binary(
        f"Tensor.{name}",
        lambda x, y, n=name: getattr(x, n)(y),
        lambda x, y, n=name: getattr(x, n)(y),
        exact=True,
    )
for name in ("eq", "ne", "lt", "le", "gt", "ge"):
    binary(
        f"Tensor.{name}",
        lambda x, y, n=name: getattr(x, n)(y),
        lambda x, y, n=name: getattr(x, n)(y),
        exact=True,
    )
    unary(
        name,
        -3,
        3,
        ours=lambda x, n=name: getattr(x, n)(0.5),
        theirs=lambda t, n=name: getattr(t, n)(0.5),
        exact=True,
    )

OPERATORS = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "/": lambda x, y: x / y,
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
    "==": lambda x, y: x == y,
    "!=": lambda x, y: x != y,
}
for op, fn in OPERATORS.items():
    binary(f"Tensor.{op}", fn, fn, rtol=3e-7, atol=1e-30, exact=op not in "+-*/", emulate=op in ("/", "<="))
    case(
        f"Tensor.{op}",
        lambda x, fn=fn: fn(2.0, x),
        lambda t, fn=fn: fn(2.0, t),
        a(N, edges=True),
        rtol=3e-7,
        atol=1e-30,
        exact=op not in "+-*/",
    )
binary("Tensor.**", lambda x, y: x ** y, lambda x, y: x ** y, lo=0.1, hi=4, rtol=3e-6, atol=1e-30)
unary("**", -4, 4, rtol=1e-6, ours=lambda x: x ** 2, theirs=lambda t: t ** 2, key="Tensor.**")
binary("Tensor.%", lambda x, y: x % y, lambda x, y: x % y, rtol=2e-6, atol=2e-6)
binary("Tensor.//", lambda x, y: x // y, lambda x, y: x // y, exact=True)
case("Tensor.@", lambda x, y: x @ y, lambda x, y: x @ y, a(3, 4), a(4, 5), rtol=1e-6, emulate=True)
case("Tensor.@", lambda x, y: x @ y, lambda x, y: x @ y, a(2, 3, 4), a(4), rtol=1e-6)

for op, fn in {"&": lambda x, y: (x > 0) & (y < 1), "|": lambda x, y: (x > 0) | (y < 1),
               "^": lambda x, y: (x > 0) ^ (y < 1), "~": lambda x, y: ~(x > y)}.items():
    case(f"Tensor.{op}", fn, fn, a(N, edges=True), a(N, edges=True), exact=True)
    refusal(
        f"Tensor.{op}", lambda x, op=op: eval("~x" if op == "~" else f"x {op} x"), "booleans", inputs=(a(3),)
    )

case("Tensor.masked_fill", lambda x, m: x.masked_fill(m > 0, -1e4), lambda x, m: x.masked_fill(m > 0, -1e4),
     a(3, 4, edges=True), a(1, 4), exact=True)
for key in ("Tensor.clamp", "Tensor.clip"):
    method = key.split(".")[1]
    case(
        key,
        lambda x, m=method: getattr(x, m)(-1.0, 2.0),
        lambda t, m=method: getattr(t, m)(-1.0, 2.0),
        a(N, edges=True),
        exact=True,
    )
    case(
        key,
        lambda x, m=method: getattr(x, m)(min=0.0),
        lambda t, m=method: getattr(t, m)(min=0.0),
        a(N, edges=True),
        exact=True,
    )
    case(
        key,
        lambda x, m=method: getattr(x, m)(max=0.5),
        lambda t, m=method: getattr(t, m)(max=0.5),
        a(N, edges=True),
        exact=True,
    )
    case(
        key,
        lambda x, lo, hi, m=method: getattr(x, m)(lo, hi),
        lambda x, lo, hi, m=method: getattr(x, m)(lo, hi),
        a(4, 6, edges=True),
        a(6, edges=True),
        a(4, 1),
        exact=True,
        emulate=method == "clamp",
    )
    case(
        key,
        lambda x, m=method: getattr(x, m)(2.0, 1.0),
        lambda t, m=method: getattr(t, m)(2.0, 1.0),
        a(20),
        exact=True,
    )
    refusal(key, lambda x, m=method: getattr(x, m)(), "give min or max", inputs=(a(3),))
