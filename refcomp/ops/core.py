"""The core of a Tensor: a lazy handle on one edge of the graph (a node read through a view stack).

Nothing is computed here. This module holds what every user method builds on: the edge and its
shape, `lift` (a number becomes a Constant), broadcasting, constants, iota and inputs. The methods
users call (`exp`, `softmax`, `conv2d`, ...) live in mixins above it (`movement`, `elementwise`,
`reductions`), and `tensor.Tensor` joins them. Builders here return that full class through
`tensor_classes()`, which `ops.tensor` sets once `Tensor` is defined: the core imports the methods
built on it only when a builder runs before anything else loaded them.
"""
from __future__ import annotations

import functools
import inspect
import numbers
from typing import Callable, Sequence

import numpy as np
import sympy

from ..errors import ShapeError
from ..symbolic.dims import Dim, dim, dims_equal
from ..symbolic.view import ViewStack
from .dtypes import DTYPES, FLOAT_DTYPES, promote
from .primitives import Edge, Node, make_node

DTYPE_ALIASES = {"float": "float32", "half": "float16", "bf16": "bfloat16", "int": "int32"}


def dtype_name(dtype, what: str) -> str:
    """A dtype as refcomp names it, from a string ("float16", "half"), a NumPy type or a torch dtype."""
    name = str(getattr(dtype, "__name__", dtype)).replace("torch.", "")
    try:
        name = np.dtype(name).name if name not in DTYPES and name not in DTYPE_ALIASES else name
    except TypeError:
        pass
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise ShapeError(
            f"{what}: dtype {dtype!r} is not supported (use one of {', '.join(DTYPES)})"
            f"{DTYPE_HINTS.get(name, '')}"
        )
    return name


DTYPE_HINTS = {
    "bool": ": booleans are 0/1 values flagged by comparisons or .bool() (feed a float32 mask)",
}
COMPUTED_DTYPES = FLOAT_DTYPES + ("float64", "int64", "int32")  # what .to() converts between


def is_bool_dtype(dtype) -> bool:
    """bool, "bool", np.bool_ or torch.bool: refcomp's booleans are flagged 0/1 floats
    (ops.tensor.BoolTensor)."""
    return dtype is bool or str(getattr(dtype, "__name__", dtype)).replace("torch.", "") in ("bool", "bool_")


def is_integer(t) -> bool:
    """An int32 or int64 tensor: ids a lookup takes as they are."""
    return DTYPES[t.dtype].is_int


def widest_integer(t):
    """PyTorch's sums and products of integers accumulate, and return, int64."""
    return t.long() if is_integer(t) and t.dtype != "int64" else t


def is_boolean(value) -> bool:
    """A tensor PyTorch would type torch.bool (a comparison, a logical operation, `.bool()`)."""
    return isinstance(value, tensor_classes()[1])


def keep_bool(out, *sources):
    """`out` flagged boolean when every source is: PyTorch keeps torch.bool through copies and selections."""
    return out._as_bool() if sources and all(is_boolean(s) for s in sources) else out


def format_shape(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def tensor_classes() -> tuple[type, type]:
    """(Tensor, BoolTensor), which `ops.tensor` sets on TensorCore when it is imported. A builder may
    run before anything imported it (`rc.zeros(3)` as a process's first call: `import refcomp` loads
    the ops module of each name on first use), and then imports it here."""
    try:
        return TensorCore.full, TensorCore._boolean
    except AttributeError:
        from . import tensor  # noqa: F401  (defines and sets both)
        return TensorCore.full, TensorCore._boolean


class TensorCore:
    __slots__ = ()
    full: type  # ops.tensor.Tensor, the class every builder returns (ops.tensor sets it)
    _boolean: type  # ops.tensor.BoolTensor: a Tensor whose 0/1 values PyTorch would type torch.bool

    def __init__(self, edge: Edge):
        self.edge = edge

    @staticmethod
    def from_node(node: Node) -> "TensorCore":
        return tensor_classes()[0](Edge(node, ViewStack.of_buffer(node.shape)))

    def with_views(self, views: ViewStack) -> "TensorCore":
        return type(self)(Edge(self.edge.node, views))  # a view of a boolean tensor is boolean

    def _as_bool(self) -> "TensorCore":
        """The same 0/1 values, flagged as PyTorch's bool (see ops.tensor.BoolTensor)."""
        return tensor_classes()[1](self.edge)

    @property
    def node(self) -> Node:
        return self.edge.node

    @property
    def views(self) -> ViewStack:
        return self.edge.views

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.edge.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> str:
        return self.node.dtype

    @property
    def label(self) -> str:
        """How error messages name this tensor: its node and its shape."""
        return f"{self.node.label} of shape {format_shape(self.shape)}"

    def __repr__(self) -> str:
        """`<Tensor softmax (B, 32) float32>`: the user op that built it (or the input it is)."""
        node = self.node
        what = (
            node.label if node.op.name == "Input" else node.origin.op if node.origin else node.op.name.lower()
        )
        return f"<Tensor {what} {format_shape(self.shape)} {self.dtype}>"

    def _repr_html_(self) -> str:
        """Jupyter's view of a tensor: its repr and a picture of the graph that computes it."""
        from .draw import tensor_html  # draw reads graphs through ops.graph, which imports this module
        return tensor_html(self)

    def __bool__(self):
        raise ShapeError(
            f"{self.label} is lazy and has no truth value; use rc.where or a comparison inside the graph"
        )

    def _no_value(self, *_):
        """float(t), int(t), a list index or a format spec: PyTorch reads a one-element tensor's value,
        which a graph has only once run."""
        raise ShapeError(
            f"{self.label} is lazy and has no value to read yet: rc.evaluate(t, feeds) or "
            f"rc.compile(t).run(feeds) returns its array"
        )

    __float__ = __int__ = __index__ = __complex__ = _no_value

    def __format__(self, spec: str) -> str:
        return repr(self) if not spec else self._no_value()

    def __len__(self) -> int:
        """torch's len(t): the first axis's length (known, not a symbol, whose value comes at run time)."""
        if not self.shape or not isinstance(self.shape[0], int):
            raise ShapeError(f"len() of {self.label}: it needs a first axis of known length")
        return self.shape[0]

    # --- building primitive nodes ------------------------------------------------------------
    def _require_float(self, what: str) -> None:
        """For composites whose formula holds for float types only (a float32 one: 16-bit types widen)."""
        if self.dtype not in FLOAT_DTYPES:
            raise ShapeError(
                f"{what} needs float operands, but {self.label} is {self.dtype} (convert it with .float())"
            )

    def to(self, dtype) -> "TensorCore":
        """torch's Tensor.to(dtype): float and integer types, and bool (nonzero, NaN included, is True: 0/1
        values flagged boolean). To a 16-bit type or int32 rounds (wraps), to a wider type widens exactly,
        to an integer truncates toward zero (ops.primitives: Cast)."""
        if is_bool_dtype(dtype):
            return self if is_boolean(self) else self.ne(0)
        name = dtype_name(dtype, f"{self.label}.to")
        if name == self.dtype:
            return tensor_classes()[0](self.edge) if is_boolean(self) else self
        return TensorCore.from_node(make_node("Cast", (self.edge,), to=name))

    def half(self) -> "TensorCore":
        return self.to("float16")

    def bfloat16(self) -> "TensorCore":
        return self.to("bfloat16")

    def float(self) -> "TensorCore":
        return self.to("float32")

    def double(self) -> "TensorCore":
        return self.to("float64")

    def long(self) -> "TensorCore":
        return self.to("int64")

    def int(self) -> "TensorCore":
        return self.to("int32")

    def type(self, dtype) -> "TensorCore":
        return self.to(dtype)

    def bool(self) -> "TensorCore":
        return self.to("bool")

    def _unary(self, name: str) -> "TensorCore":
        return TensorCore.from_node(make_node(name, (self.edge,)))

    def _binary(self, name: str, other) -> "TensorCore":
        a, b = broadcast(self, lift(other, like=self), name)
        return TensorCore.from_node(make_node(name, (a.edge, b.edge)))

    def _reduce(self, name: str, axis: int) -> "TensorCore":
        return TensorCore.from_node(make_node(name, (self.edge,), axis=axis))

    def _axis(self, axis: int, ndim: int | None = None) -> int:
        ndim = self.ndim if ndim is None else ndim
        if not isinstance(axis, numbers.Integral) or not -ndim <= axis < ndim:
            raise ShapeError(f"axis {axis!r} is out of range for {self.label} ({ndim} axes)")
        return int(axis) % ndim if ndim else 0


def widened(*operands: TensorCore) -> tuple[list, str]:
    """The operands of a contraction (matmul, convolution, einsum), and the dtype of its result.

    A GPU multiplies 16-bit operands and accumulates the products in float32, rounding only the
    result, so 16-bit operands are widened to float32 here and the caller rounds the sum back
    (`.to(dtype)`); float32 operands are returned as they are."""
    strong = [t.dtype for t in operands if not t.node.weak]
    dtype = promote(strong) if strong else "float32"
    if all(t.dtype == "float32" for t in operands):
        return list(operands), dtype
    return [t.to("float32") for t in operands], dtype


def computed_in_float32(composite: Callable) -> Callable:
    """Decorate a composite (a norm, softmax, mean, a loss, attention): its 16-bit tensor arguments are
    widened to float32, it computes in float32, and a 16-bit result is rounded once, as PyTorch's
    CUDA kernels accumulate. Rounding each primitive instead overflows float16 between an input and
    a result that both fit (the squares in a layer norm of [300, -300] rows, the sum in a mean of
    70,000 ones) and moves a bfloat16 row's mean by half its last place. The result's dtype is the
    promotion of the float tensor arguments, as before; without a 16-bit argument nothing changes.

    A composite taking PyTorch's `dtype=` (softmax, mean, prod) gets its first argument converted to
    that type here, before the widening, so the requested type is the result's (PyTorch's meaning),
    not the input's: the composite itself then sees dtype=None."""
    signature = inspect.signature(composite)
    takes_dtype = "dtype" in signature.parameters

    @functools.wraps(composite)
    def call(*args, **kwargs):
        if takes_dtype:
            args, kwargs = _convert_first(composite.__name__, signature, args, kwargs)
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, TensorCore)]
        if not any(DTYPES[t.dtype].is_narrow for t in tensors):
            return composite(*args, **kwargs)
        strong = [t.dtype for t in tensors if t.dtype in FLOAT_DTYPES and not t.node.weak]
        dtype = promote(strong) if strong else "float32"
        out = composite(*map(_wide, args), **{k: _wide(v) for k, v in kwargs.items()})
        return tuple(_narrow(t, dtype) for t in out) if isinstance(out, tuple) else _narrow(out, dtype)

    return call


def _convert_first(who: str, signature, args, kwargs):
    """(args, kwargs) with a given dtype= applied to the first argument (the tensor) and then dropped."""
    bound = signature.bind(*args, **kwargs)
    requested = bound.arguments.get("dtype")
    if requested is None:
        return args, kwargs
    first = next(iter(bound.arguments))
    bound.arguments[first] = as_requested(lift(bound.arguments[first]), requested, who)
    bound.arguments["dtype"] = None
    return bound.args, bound.kwargs


def as_requested(t: "TensorCore", dtype, who: str) -> "TensorCore":
    """PyTorch's `dtype=` of a reduction or softmax: the input converted first, so the result has that
    type. A bool request is refused here rather than answered in another type."""
    if dtype is None:
        return t
    what = f"{who} of {t.label} with dtype={dtype!r}"
    if is_bool_dtype(dtype):
        raise ShapeError(f"{what}: PyTorch converts to bool and returns a bool tensor; refcomp's reductions "
                         f"compute float types only (for a bool result use any()/all() on x.bool())")
    name = dtype_name(dtype, what)
    if DTYPES[name].is_int and who in FLOAT_RESULTS:
        raise ShapeError(f"{what}: PyTorch computes {who} in float types only and refuses {name}")
    return t.to(name)


FLOAT_RESULTS = ("softmax", "log_softmax", "softmin", "mean")  # composites PyTorch has no integer kernels for


def _wide(value):
    return value.to("float32") if isinstance(value, TensorCore) and DTYPES[value.dtype].is_narrow else value


def _narrow(value, dtype: str):
    return value.to(dtype) if isinstance(value, TensorCore) and value.dtype == "float32" else value


def lift(value, like: "TensorCore | None" = None) -> TensorCore:
    """A Tensor as is; a Python number or symbolic dim as a scalar Constant. Beside an integer tensor
    `like`, a Python int (or a dim) is an int64 Constant, so the integer arithmetic stays exact (a
    Python float makes it float32, as in PyTorch); beside a float64 tensor a number is a float64 one."""
    if isinstance(value, TensorCore):
        return value
    if like is not None and DTYPES[like.dtype].is_int and (
            isinstance(value, numbers.Integral) or isinstance(value, sympy.Expr) and value.is_integer):
        return TensorCore.from_node(make_node("Constant", dtype="int64", value=int(value) if isinstance(
            value, numbers.Integral) or value.is_Integer else value))
    if like is not None and like.dtype == "float64" and isinstance(value, (numbers.Real, sympy.Expr)) and \
            not isinstance(value, bool):  # a Python float beside a float64 tensor keeps its double value
        return TensorCore.from_node(
            make_node("Constant", dtype="float64", value=constant(value).node.attrs["value"])
        )
    if isinstance(value, (numbers.Real, sympy.Expr)) and not isinstance(value, bool):
        return constant(value)
    raise ShapeError(
        f"cannot use {type(value).__name__} {value!r} as a tensor operand (use a number or an rc tensor)"
    )


def constant(value) -> TensorCore:
    """One number (or a dim) as a scalar tensor."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, sympy.Expr):
        value = int(value) if value.is_Integer else value
    elif not isinstance(value, numbers.Real):
        raise ShapeError(
            f"constant takes one number, got {type(value).__name__} {str(value)[:60]}: an array enters a "
            f"graph as an rc.input, fed at run time"
        )
    return TensorCore.from_node(
        make_node("Constant", value=value if isinstance(value, sympy.Expr) else float(value))
    )


def broadcast(a: TensorCore, b: TensorCore, what: str) -> tuple[TensorCore, TensorCore]:
    """NumPy broadcasting of two tensors, by views only."""
    shape = broadcast_shape([a, b], what)
    return a.broadcast_to(shape), b.broadcast_to(shape)


def broadcast_shape(tensors: Sequence[TensorCore], what: str) -> tuple[Dim, ...]:
    ndim = max(t.ndim for t in tensors)
    shape: list[Dim] = [1] * ndim
    for t in tensors:
        for axis, n in enumerate(t.shape, start=ndim - t.ndim):
            if dims_equal(n, 1) or dims_equal(n, shape[axis]):
                continue
            if dims_equal(shape[axis], 1):
                shape[axis] = n
                continue
            others = " and ".join(x.label for x in tensors)
            raise ShapeError(
                f"{what}: shapes do not broadcast: {others} differ at axis {axis - ndim} "
                f"({shape[axis]} vs {n})"
            )
    return tuple(shape)


def input(name: str, shape: Sequence, dtype: str = "float32", sharding=None, ranges=None) -> TensorCore:
    """A named array fed at run time; dims are ints or symbol names like "B". `sharding` (one mesh
    axis name or None per dim) says how rc.spmd.compile splits it over a device mesh; a
    single-device compile ignores it. `ranges` ({"B": (1, 64)}, a max of None for none) limits the
    values a symbolic dim of this input may be bound to: a binding outside is a BindingError on
    every backend (reference.bindings), as torch.export's Dim(min=, max=) promises of the model."""
    if not isinstance(name, str) or not name:
        raise ShapeError(f"an input's name must be a non-empty string, got {name!r}")
    dtype = dtype_name(dtype, f"input {name!r}")
    if isinstance(shape, (int, str)):
        shape = (shape,)
    if not hasattr(shape, "__iter__") or isinstance(shape, dict):
        raise ShapeError(f"input {name!r}: the shape must be a tuple of dims (ints or names), got {shape!r}")
    dims = tuple(dim(n.item() if isinstance(n, np.integer) else n) for n in shape)
    for n in dims:
        if not isinstance(n, int) and not isinstance(n, sympy.Symbol):
            raise ShapeError(
                f"input {name!r}: dimension {n} must be an int or a symbol name, not an expression"
            )
        if isinstance(n, int) and n < 0:
            raise ShapeError(f"input {name!r}: dimension {n} is negative")
    extra = {} if ranges is None else {"ranges": _ranges(name, dims, ranges)}
    if sharding is None:
        return TensorCore.from_node(make_node("Input", dtype=dtype, name=name, shape=dims, **extra))
    if not isinstance(sharding, (tuple, list)) or len(sharding) != len(dims) or \
            not all(a is None or isinstance(a, str) for a in sharding):
        raise ShapeError(f"input {name!r}: sharding must give one mesh axis name or None per dim "
                         f"({len(dims)} of them), got {sharding!r}")
    return TensorCore.from_node(
        make_node("Input", dtype=dtype, name=name, shape=dims, sharding=tuple(sharding), **extra)
    )


def _ranges(name: str, dims: tuple, ranges) -> tuple:
    """`ranges` as the Input's attribute: ((dim name, min, max or None), ...) sorted by name."""
    symbols = {n.name for n in dims if isinstance(n, sympy.Symbol)}
    if not isinstance(ranges, dict):
        raise ShapeError(f"input {name!r}: ranges must be a dict of dim name -> (min, max), got {ranges!r}")
    out = []
    for key, pair in sorted(ranges.items(), key=lambda kv: str(kv[0])):
        if key not in symbols:
            raise ShapeError(
                f"input {name!r}: ranges names {key!r}, which is not a symbolic dim of its shape"
            )
        lo, hi = pair if isinstance(pair, (tuple, list)) and len(pair) == 2 else (None, -1)
        whole = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
        if not whole(lo) or not (hi is None or whole(hi) and hi >= lo):
            raise ShapeError(f"input {name!r}: the range of {key} must be (min, max) with 0 <= min <= max "
                             f"(max None for none), got {pair!r}")
        out.append((key, lo, hi))
    return tuple(out)


def iota(shape: Sequence, axis: int, dtype: str = "float32") -> TensorCore:
    """The index along `axis`: float32 positions, or exact integers (`dtype="int64"`)."""
    dims = tuple(dim(n) for n in shape)
    return TensorCore.from_node(make_node("Iota", dtype=dtype_name(dtype, "iota"), shape=dims, axis=axis))
