"""Torch-comparison cases (tests/torch_registry.py) of `rc.*`: creation functions (dtype= included, and
symbolic sizes), the functions of several tensors, the Tensor methods called as functions, and the
dtype names."""
import refcomp as rc
from api_helpers import torch
from torch_registry import a, case, refusal

X = a(3, 4, edges=True)
P = a(3, 4, lo=0.1, hi=5)


def created(key, ours, theirs, dims=None, **kw):
    case(f"rc.{key}", ours, theirs, exact=True, dims=dims or {}, **kw)


created("constant", lambda: rc.constant(2.5), lambda: torch.tensor(2.5))
created("zeros", lambda: rc.zeros(2, 3), lambda: torch.zeros(2, 3))
created("zeros", lambda: rc.zeros((2, 3), dtype=rc.float16), lambda: torch.zeros((2, 3), dtype=torch.float16))
created("zeros", lambda: rc.zeros("B", 2), lambda: torch.zeros(3, 2), dims={"B": 3})
created("ones", lambda: rc.ones((3,)), lambda: torch.ones(3))
created("ones", lambda: rc.ones(2, dtype=rc.bool), lambda: torch.ones(2, dtype=torch.bool))
created("full", lambda: rc.full((2, 2), 7.5), lambda: torch.full((2, 2), 7.5))
created(
    "full", lambda: rc.full((2,), 0.1, dtype=rc.bfloat16), lambda: torch.full((2,), 0.1, dtype=torch.bfloat16)
)
created("full", lambda: rc.full((3,), True), lambda: torch.full((3,), True))
created(
    "full", lambda: rc.full((2,), -2.7, dtype=rc.int64), lambda: torch.full((2,), -2.7, dtype=torch.int64)
)
for name in ("zeros_like", "ones_like"):
    case(
        f"rc.{name}",
        lambda x, n=name: getattr(rc, n)(x),
        lambda t, n=name: getattr(torch, n)(t),
        X,
        exact=True,
    )
    case(
        f"rc.{name}",
        lambda x, n=name: getattr(rc, n)(x.half()),
        lambda t, n=name: getattr(torch, n)(t.half()),
        X,
        exact=True,
    )
    case(
        f"rc.{name}",
        lambda x, n=name: getattr(rc, n)(x > 0),
        lambda t, n=name: getattr(torch, n)(t > 0),
        X,
        exact=True,
    )
case("rc.full_like", lambda x: rc.full_like(x, 0.1), lambda t: torch.full_like(t, 0.1), X, exact=True)
case(
    "rc.full_like",
    lambda x: rc.full_like(x.half(), 0.1),
    lambda t: torch.full_like(t.half(), 0.1),
    X,
    exact=True,
)
case(
    "rc.full_like",
    lambda x: rc.full_like(x, 3, dtype=rc.float16),
    lambda t: torch.full_like(t, 3, dtype=torch.float16),
    X,
    exact=True,
)
created("eye", lambda: rc.eye(3), lambda: torch.eye(3))
created("eye", lambda: rc.eye(3, 4, dtype=rc.float16), lambda: torch.eye(3, 4, dtype=torch.float16))
for start, end, steps in ((0.0, 1.0, 11), (-3.0, 7.0, 6), (2.0, 2.0, 1), (5.0, -5.0, 4), (0.0, 1.0, 0)):
    created(
        "linspace",
        lambda s=start, e=end, n=steps: rc.linspace(s, e, n),
        lambda s=start, e=end, n=steps: torch.linspace(s, e, n),
    )
created(
    "linspace",
    lambda: rc.linspace(0, 1, 5, dtype=rc.float16),
    lambda: torch.linspace(0, 1, 5, dtype=torch.float16),
)
for args in ((5,), (2, 9), (2, 9, 3), (9, 2, -2), (0,), (3, 3)):
    created("arange", lambda args=args: rc.arange(*args), lambda args=args: torch.arange(*args))
created("arange", lambda: rc.arange(5, dtype=rc.int64), lambda: torch.arange(5, dtype=torch.int64))
created("arange", lambda: rc.arange(0, 3, dtype=rc.float16), lambda: torch.arange(0, 3, dtype=torch.float16))
created("arange", lambda: rc.arange(0, "T"), lambda: torch.arange(0, 7), dims={"T": 7})
created("arange", lambda: rc.arange(2, "T", 3), lambda: torch.arange(2, 7, 3), dims={"T": 7})
created("arange", lambda: rc.arange(end=4), lambda: torch.arange(end=4))
case("rc.arange", lambda: rc.arange(0, 1, 0.1), lambda: torch.arange(0, 1, 0.1), rtol=1.2e-7, atol=0)  # 1 ulp
refusal("rc.arange", lambda: rc.arange(0, 1.5, dtype=rc.int32), "integer dtype")
for key in ("cat", "concat"):
    fn = getattr(rc, key)
    case(
        f"rc.{key}",
        lambda x, y, f=fn: f([x, y]),
        lambda x, y, k=key: getattr(torch, k)([x, y]),
        X,
        a(2, 4),
        exact=True,
    )
    case(
        f"rc.{key}",
        lambda x, y, f=fn: f((x, y), 1),
        lambda x, y, k=key: getattr(torch, k)((x, y), 1),
        X,
        a(3, 2),
        exact=True,
        emulate=key == "cat",
    )
    case(
        f"rc.{key}",
        lambda x, y, f=fn: f([x, y], dim=-1),
        lambda x, y, k=key: getattr(torch, k)([x, y], dim=-1),
        X,
        a(3, 1),
        exact=True,
    )
case("rc.stack", lambda x, y: rc.stack([x, y]), lambda x, y: torch.stack([x, y]), X, X, exact=True)
case("rc.stack", lambda x, y: rc.stack((x, y), 2), lambda x, y: torch.stack((x, y), 2), X, X, exact=True)
case(
    "rc.stack",
    lambda x, y: rc.stack([x, y], dim=-1),
    lambda x, y: torch.stack([x, y], dim=-1),
    X,
    X,
    exact=True,
)
case(
    "rc.where",
    lambda c, x, y: rc.where(c > 0, x, y),
    lambda c, x, y: torch.where(c > 0, x, y),
    X,
    X,
    a(4, edges=True),
    exact=True,
    emulate=True,
)
case(
    "rc.where",
    lambda c, x: rc.where(c < 0.5, x, -2.0),
    lambda c, x: torch.where(c < 0.5, x, -2.0),
    X,
    X,
    exact=True,
)
refusal("rc.where", lambda c: rc.where(c > 0), "torch.nonzero", "where(condition, input, other)", inputs=(X,))
refusal("rc.constant", lambda: rc.constant([0.0, 2.0]), "one number", "rc.input")
for name in ("maximum", "minimum", "fmod", "atan2"):
    case(
        f"rc.{name}",
        lambda x, y, n=name: getattr(rc, n)(x, y),
        lambda x, y, n=name: getattr(torch, n)(x, y),
        X,
        a(4, edges=True),
        exact=name != "atan2",
        rtol=5e-7,
        atol=1e-30,
    )
case(
    "rc.einsum",
    lambda x, y: rc.einsum("ij,jk->ik", x, y),
    lambda x, y: torch.einsum("ij,jk->ik", x, y),
    a(3, 4),
    a(4, 2),
    rtol=1e-6,
)
case("rc.einsum", lambda x: rc.einsum("ii", x), lambda t: torch.einsum("ii", t), a(4, 4), rtol=1e-6)
case(
    "rc.einsum",
    lambda x, y: rc.einsum("b...i,i->b...", [x, y]),
    lambda x, y: torch.einsum("b...i,i->b...", [x, y]),
    a(2, 3, 4),
    a(4),
    rtol=1e-6,
)
for name, (lo, hi, rtol, atol) in {
    "erf": (-4, 4, 0, 2e-7),
    "erfc": (-4, 3, 2e-6, 1e-30),
    "expm1": (-5, 5, 6e-7, 1e-30),
    "log1p": (-0.9, 10, 5e-7, 1e-30),
    "tanh": (-10, 10, 5e-7, 1e-30),
    "floor": (-9, 9, 0, 0),
    "ceil": (-9, 9, 0, 0),
}.items():
    case(f"rc.{name}", lambda x, n=name: getattr(rc, n)(x), lambda t, n=name: getattr(torch, n)(t),
         a(200, lo=lo, hi=hi, edges=True), rtol=rtol, atol=atol, exact=rtol == atol == 0)

# The Tensor methods as functions: torch.name(input, *args) against rc.name(input, *args).
IDS = a(3, 2, ids=True, high=4)
FUNCTIONS = {
    "abs": (),
    "exp": (),
    "exp2": (),
    "log": (),
    "log2": (),
    "log10": (),
    "sqrt": (),
    "rsqrt": (),
    "reciprocal": (),
    "neg": (),
    "sigmoid": (),
    "relu": (),
    "sin": (),
    "cos": (),
    "tan": (),
    "sign": (),
    "trunc": (),
    "round": (),
    "isnan": (),
    "isinf": (),
    "isfinite": (),
    "logical_not": (),
    "numel": (),
    "t": (),
    "sum": (),
    "mean": (),
    "prod": (1,),
    "amax": (0,),
    "amin": ((0, 1),),
    "max": (1,),
    "min": (),
    "argmax": (1,),
    "argmin": (),
    "var": (1,),
    "std": (),
    "logsumexp": (1,),
    "softmax": (1,),
    "log_softmax": (0,),
    "cumsum": (1,),
    "tril": (),
    "triu": (1,),
    "reshape": ((2, 6),),
    "flatten": (),
    "squeeze": (),
    "unsqueeze": (1,),
    "permute": ((1, 0),),
    "transpose": (0, 1),
    "swapaxes": (0, 1),
    "flip": ((0,),),
    "split": (2, 1),
    "chunk": (2,),
    "diagonal": (1,),
    "clamp": (-1.0, 2.0),
    "clip": (0.0,),
    "pow": (2.0,),
    "add": (1.5,),
    "sub": (1.5,),
    "mul": (0.5,),
    "div": (4.0,),
}
for name, args in FUNCTIONS.items():
    exact = name not in (
        "exp",
        "exp2",
        "log",
        "log2",
        "log10",
        "sqrt",
        "rsqrt",
        "reciprocal",
        "sigmoid",
        "sin",
        "cos",
        "tan",
        "mean",
        "prod",
        "var",
        "std",
        "logsumexp",
        "softmax",
        "log_softmax",
        "cumsum",
        "pow",
        "div",
    )
    case(
        f"rc.{name}",
        lambda x, n=name, args=args: getattr(rc, n)(x, *args),
        lambda t, n=name, args=args: getattr(torch, n)(t, *args),
        X if name not in ("log", "log2", "log10") else P,
        exact=exact,
        rtol=6e-7,
        atol=2e-7 if name in ("sin", "cos", "tan") else 1e-30,
    )  # cos(x) = sin(x + pi/2)
for name in (
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "max",
    "min",
    "matmul",
    "clamp",
):
    second = a(4, 3) if name == "matmul" else a(4, edges=True)
    case(
        f"rc.{name}",
        lambda x, y, n=name: getattr(rc, n)(x, y),
        lambda x, y, n=name: getattr(torch, n)(x, y),
        P,
        second,
        exact=name not in ("div", "pow", "matmul"),
        rtol=1e-6,
        atol=1e-30,
    )
case("rc.add", lambda x, y: rc.add(x, y, alpha=2), lambda x, y: torch.add(x, y, alpha=2), X, X, rtol=1e-6)
case(
    "rc.div",
    lambda x, y: rc.div(x, y, rounding_mode="floor"),
    lambda x, y: torch.div(x, y, rounding_mode="floor"),
    X,
    X,
    exact=True,
)
case("rc.lerp", lambda x, y: rc.lerp(x, y, 0.25), lambda x, y: torch.lerp(x, y, 0.25), a(5), a(5), rtol=1e-6)
case(
    "rc.masked_fill",
    lambda x, m: rc.masked_fill(x, m > 0, 0.5),
    lambda x, m: torch.masked_fill(x, m > 0, 0.5),
    X,
    a(4),
    exact=True,
)
case("rc.gather", lambda x, i: rc.gather(x, 1, i), lambda t, i: torch.gather(t, 1, i), X, IDS, exact=True)
case("rc.index_select", lambda x, i: rc.index_select(x, 0, i), lambda t, i: torch.index_select(t, 0, i), X,
     a(5, ids=True, high=3), exact=True)
case(
    "rc.index_copy",
    lambda x, i, s: rc.index_copy(x, 0, i, s),
    lambda t, i, s: torch.index_copy(t, 0, i, s),
    X,
    a(2, ids=True, distinct=True, high=3),
    a(2, 4, edges=True),
    exact=True,
)
case("rc.mm", lambda x, y: rc.mm(x, y), lambda x, y: torch.mm(x, y), a(3, 4), a(4, 2), rtol=1e-6)
case(
    "rc.bmm",
    lambda x, y: rc.bmm(x, y),
    lambda x, y: torch.bmm(x, y),
    a(2, 3, 4),
    a(2, 4, 2),
    rtol=1e-6,
    emulate=True,
)
refusal("rc.mm", lambda x, y: rc.mm(x, y), "2-D", inputs=(a(2, 3, 4), a(4, 2)))
refusal("rc.bmm", lambda x, y: rc.bmm(x, y), "3-D", inputs=(a(3, 4), a(4, 2)))

# dtype names: what each makes, or the refusal that says why not
for name in ("float32", "float16", "bfloat16"):
    case(
        f"rc.{name}",
        lambda x, n=name: x.to(getattr(rc, n)),
        lambda t, n=name: t.to(getattr(torch, n)),
        X,
        exact=True,
    )
case("rc.bool", lambda x: x.to(rc.bool), lambda t: t.to(torch.bool), X, exact=True)
case("rc.int64", lambda: rc.arange(4, dtype=rc.int64), lambda: torch.arange(4, dtype=torch.int64), exact=True)
case(
    "rc.int32",
    lambda i: rc.nn.embedding(i, rc.eye(4)),
    lambda i: torch.nn.functional.embedding(i, torch.eye(4)),
    a(3, ids=True),
    exact=True,
)  # an int32 input: ids
case("rc.int64", lambda: rc.full((2,), 2**40 + 1, dtype=rc.int64) * 3,
     lambda: torch.full((2,), 2**40 + 1, dtype=torch.int64) * 3, exact=True)
case("rc.float64", lambda x: x.to(rc.float64) + 1e-12, lambda t: t.to(torch.float64) + 1e-12, X, exact=True)
case("rc.float64", lambda: rc.zeros(2, dtype=rc.float64) + 0.1,
     lambda: torch.zeros(2, dtype=torch.float64) + 0.1, exact=True)
case(
    "rc.return_types",
    lambda x: tuple(rc.return_types.max(*x.max(0))),
    lambda t: tuple(torch.return_types.max(t.max(0))),
    X,
    exact=True,
)
