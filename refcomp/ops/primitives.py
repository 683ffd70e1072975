"""The primitive ops: the whole instruction set of refcomp.

Everything a user writes is built from these node kinds. Each is defined once, in `OPS`:
its kind (which fixes its shape rule), its NumPy meaning (the oracle), and its C expression (what
the CUDA templates inline). Nothing else in the project decides what an op means.

A `Node` holds an op, its attributes and its sources. A source is an `Edge`: the producing node
plus the `ViewStack` through which it is read, so movement ops (permute, reshape, slice, pad,
expand, flip) never create nodes.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import sympy

from ..errors import ShapeError
from ..symbolic.dims import Dim, dims_equal
from ..symbolic.view import ViewStack
from .dtypes import DOUBLE, DTYPES, INT, promote
from .provenance import Origin, current

LEAF, UNARY, BINARY, TERNARY, REDUCE, COPY, GATHER, SCATTER = (
    "leaf", "unary", "binary", "ternary", "reduce", "copy", "gather", "scatter")
ARITY = {
    LEAF: 0,
    UNARY: 1,
    COPY: 1,
    BINARY: 2,
    TERNARY: 3,
    REDUCE: 1,
    GATHER: 2,
    SCATTER: 3,
}  # sources per kind of op
INDEXED = frozenset(
    {GATHER, SCATTER}
)  # ops that read or write rows at ids (data): never fused with their neighbours
ELEMENTWISE = frozenset({UNARY, BINARY, TERNARY, COPY})  # one value out per position, read at that position
SHORT_REDUCE = 4  # a reduce over at most this many values may be unrolled into its reader (codegen does)


@dataclass(frozen=True)
class C:
    """An op's C expression ({0}, {1} the operands) for each kind of arithmetic (ops.dtypes): `float`,
    and `double` and `int` where they are spelled otherwise (None: the float spelling, which C's
    conversions and overloads already make right)."""

    float: str
    double: Optional[str] = None
    int: Optional[str] = None

    def of(self, kind: str) -> str:
        spelled = {DOUBLE: self.double, INT: self.int}.get(kind)
        return spelled if spelled is not None else self.float


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    numpy: Optional[Callable[..., np.ndarray]]  # (args, attrs, dtype) -> array, or None when fed from outside
    c: Optional[C] = None  # C expression with {0}, {1} for the operands
    c_identity: Optional[C] = None  # reductions: the accumulator's start value
    doc: str = ""
    floats_only: bool = False  # integer operands are converted to float32 first (PyTorch: sqrt of an int)
    # Properties that rewrite rules test (refcomp/search/rules.py), stated here once:
    commutative: bool = False  # f(a, b) = f(b, a): a pattern may match the operands in either order
    # elementwise with f(0, ..., 0) = 0: a padded read of f(x) (0 where masked) is f of the padded read of x
    safe_under_pad: bool = False
    # a leaf written into the kernel as an expression (a literal, an index), never read from a buffer
    literal: bool = False


def _iota(args, attrs, dtype):
    shape, axis = attrs["shape"], attrs["axis"]
    index_shape = [1] * len(shape)
    index_shape[axis] = shape[axis]
    return np.broadcast_to(np.arange(shape[axis], dtype=dtype).reshape(index_shape), shape).copy()


def _less_than(args, attrs, dtype):
    return (args[0] < args[1]).astype(dtype)


def _max_reduce(args, attrs, dtype):
    lowest = np.iinfo(dtype).min if np.issubdtype(dtype, np.integer) else -np.inf
    return np.max(args[0], axis=attrs["axis"], initial=lowest).astype(dtype)


def _remainder(args, attrs, dtype):
    """fmod; on integers C's `%` (the dividend's sign), with x % 0 = 0 (PyTorch raises; a kernel cannot)."""
    if not np.issubdtype(dtype, np.integer):
        return np.fmod(args[0], args[1])
    a, b = args
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.fmod(a, safe))


def _quotient(args, attrs, dtype):
    """a / b: IEEE division for floats; for integers C's, rounded toward zero, with x / 0 = 0 (PyTorch
    raises; a kernel cannot) and INT64_MIN / -1 wrapping to itself."""
    a, b = args
    if not np.issubdtype(dtype, np.integer):
        return a / b
    safe = np.where((b == 0) | (b == -1), 1, b)
    exact = (a - np.fmod(a, safe)) // safe  # a multiple of b over b: floor division is exact
    return np.where(b == 0, 0, np.where(b == -1, np.negative(a), exact))


def _cast(args, attrs, dtype):
    """A conversion: to an integer type a float truncates toward zero; NaN and values out of the target's
    range give its lowest value (x86's and so PyTorch's CPU answer; C leaves them undefined)."""
    x = args[0]
    if not np.issubdtype(dtype, np.integer) or np.issubdtype(x.dtype, np.integer):
        return x.astype(dtype)
    target = np.iinfo(attrs["to"])
    bad = ~((x > -(2.0 ** (target.bits - 1)) - 1) & (x < 2.0 ** (target.bits - 1)))
    return np.where(bad, target.min, np.trunc(np.where(bad, 0, x)).astype(np.int64))


def _gather(args, attrs, dtype):
    table, ids = args
    return table[ids.astype(np.int64)]


def _scatter(args, attrs, dtype):
    table, ids, rows = args
    out = np.array(table, dtype=dtype)  # a copy: the value of a Scatter is a new table
    out[ids.astype(np.int64)] = rows
    return out


OPS: dict[str, OpDef] = {
    op.name: op
    for op in [
        OpDef("Input", LEAF, None, doc="a named array fed at run time (float32, or int32 ids)"),
        OpDef(
            "Constant",
            LEAF,
            lambda a, attrs, dt: np.asarray(attrs["value"], dtype=dt),
            literal=True,
            doc="a scalar; its value may be a symbolic expression of dims",
        ),
        OpDef("Iota", LEAF, _iota, literal=True, doc="the index along one axis, as a float"),
        OpDef("Log2", UNARY, lambda a, attrs, dt: np.log2(a[0]), C("log2f({0})", "log2({0})"),
                floats_only=True),
        OpDef("Exp2", UNARY, lambda a, attrs, dt: np.exp2(a[0]), C("exp2f({0})", "exp2({0})"),
                floats_only=True),
        OpDef("Sin", UNARY, lambda a, attrs, dt: np.sin(a[0]), C("sinf({0})", "sin({0})"),
                safe_under_pad=True, floats_only=True),
        OpDef("Sqrt", UNARY, lambda a, attrs, dt: np.sqrt(a[0]), C("sqrtf({0})", "sqrt({0})"),
                safe_under_pad=True, floats_only=True),
        OpDef("Recip", UNARY, lambda a, attrs, dt: np.reciprocal(a[0]), C("(1.0f / {0})", "(1.0 / {0})"),
                floats_only=True),
        OpDef(
            "Add",
            BINARY,
            lambda a, attrs, dt: a[0] + a[1],
            C("({0} + {1})", int="rc_iadd({0}, {1})"),  # integers wrap, as PyTorch's do
            commutative=True,
            safe_under_pad=True,
        ),
        # __fmul_rn: a product is rounded before any addition reads it, as NumPy rounds it (nvcc would
        # otherwise fuse `a * b + c` into one FMA, rounding once): exact steps give the same bits everywhere
        OpDef(
            "Mul",
            BINARY,
            lambda a, attrs, dt: a[0] * a[1],
            C("__fmul_rn({0}, {1})", "__dmul_rn({0}, {1})", "rc_imul({0}, {1})"),
            commutative=True,
            safe_under_pad=True,
        ),
        OpDef(
            "Mod",
            BINARY,
            _remainder,
            C("fmodf({0}, {1})", "fmod({0}, {1})", "rc_imod({0}, {1})"),
            doc="remainder with the sign of the dividend, as C's fmodf (integers: x % 0 is 0)",
        ),
        OpDef(
            "Div",
            BINARY,
            _quotient,
            C("({0} / {1})", int="rc_idiv({0}, {1})"),
            doc="a / b: IEEE division (the Tensor API's float `/` is a * recip(b)); integers round toward "
            "zero, x / 0 is 0",
        ),
        OpDef(
            "LessThan",
            BINARY,
            _less_than,
            C("({0} < {1} ? 1.0f : 0.0f)", "({0} < {1} ? 1.0 : 0.0)", "({0} < {1} ? 1LL : 0LL)"),
            safe_under_pad=True,
            doc="1.0 where a < b, else 0.0",
        ),
        OpDef(
            "Where",
            TERNARY,
            lambda a, attrs, dt: np.where(a[0] != 0, a[1], a[2]),
            C("({0} != 0.0f ? {1} : {2})"),
            safe_under_pad=True,
            doc="a where the condition is non-zero (NaN included), else b: a select, "
            "so the branch not taken never leaks",
        ),
        OpDef(
            "SumReduce", REDUCE, lambda a, attrs, dt: np.sum(a[0], axis=attrs["axis"]),
            C("({0} + {1})", int="rc_iadd({0}, {1})"), C("0.0f", "0.0", "0LL")
        ),
        OpDef(
            "MaxReduce",
            REDUCE,
            _max_reduce,
            C("rc_max({0}, {1})"),
            C("-INFINITY", "-HUGE_VAL", "RC_INT64_MIN"),
            doc="starts at -inf; NaN propagates, as in np.max",
        ),
        OpDef(
            "Cast",
            UNARY,
            _cast,
            C("{0}", int="rc_to_int({0})"),  # (to int32 from a float: rc_to_int32, codegen.render_c)
            safe_under_pad=True,
            doc="the same value in the dtype `to`: rounded to a 16-bit float's or an int32's values, widened "
            "exactly, or truncated toward zero to an integer",
        ),
        OpDef(
            "Contiguous",
            COPY,
            lambda a, attrs, dt: np.ascontiguousarray(a[0]),
            C("{0}"),
            safe_under_pad=True,
            doc="materialise a view into a fresh buffer",
        ),
        OpDef(
            "Gather",
            GATHER,
            _gather,
            doc="rows of a (V, D) table picked by ids: int32 inputs (checked at run time), or "
            "float32 positions the graph computes in range (sorting's tournament), or an Iota",
        ),
        OpDef(
            "Scatter",
            SCATTER,
            _scatter,
            doc="a (V, D) table with the rows at ids replaced by a (K, D) source: "
            "`out = table.copy(); out[ids] = rows`. The ids (int32 inputs, or positions the graph computes) "
            "must be distinct and lie in [0, V), checked at run time on every backend; the kernel writes "
            "only the K rows, into the table's own buffer (exec.program: the table is a buffer nothing else "
            "reads)",
        ),
    ]
}

_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Edge:
    """A node read through a view stack: the source of a node, or what a Tensor refers to."""

    node: "Node"
    views: ViewStack

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.views.shape

    @property
    def constant(self) -> Optional[sympy.Expr]:
        """The value this edge reads if its node is a Constant (a number, or an expression of the dims
        such as 1 / T), else None."""
        # strict: a value is a number or an expression, never text to evaluate (files are untrusted)
        return (
            sympy.sympify(self.node.attrs["value"], strict=True) if self.node.op.name == "Constant" else None
        )


@dataclass(eq=False)
class Node:
    op: OpDef
    srcs: tuple[Edge, ...]
    attrs: dict[str, Any]
    shape: tuple[Dim, ...]
    dtype: str = "float32"
    id: int = field(default_factory=lambda: next(_ids))
    origin: Optional[Origin] = None  # the user-level call that built it (ops.provenance)

    def __post_init__(self):
        # weak: built from Constants and Iotas alone, so it never widens another operand's dtype (ops.dtypes)
        self.weak = self.op.literal or (
            bool(self.srcs) and self.op.name != "Cast" and all(s.node.weak for s in self.srcs)
        )

    def __repr__(self) -> str:
        return f"{self.label}{list(self.shape)}"

    @property
    def label(self) -> str:
        if self.op.name == "Input":
            return f"input {self.attrs['name']!r}"
        return f"{self.op.name}#{self.id}"


def infer_shape(op: OpDef, srcs: tuple[Edge, ...], attrs: dict[str, Any]) -> tuple[Dim, ...]:
    """The shape rule of each kind of op. Callers (the Tensor API) have already broadcast operands;
    a graph read from a file has not, so what does not fit is a ShapeError, never an assertion."""
    if len(srcs) != ARITY[op.kind]:
        raise ShapeError(f"{op.name} takes {ARITY[op.kind]} sources, got {len(srcs)}")
    if op.kind == LEAF:
        return tuple(attrs.get("shape", ()))
    if op.kind in (UNARY, COPY):
        return srcs[0].shape
    if op.kind in (BINARY, TERNARY):
        a = srcs[0].shape
        if not all(
            len(a) == len(s.shape) and all(dims_equal(x, y) for x, y in zip(a, s.shape)) for s in srcs
        ):
            raise ShapeError(
                f"{op.name}: its sources' shapes differ ({', '.join(str(s.shape) for s in srcs)})"
            )
        return a
    if op.kind == REDUCE:
        shape = srcs[0].shape
        if not 0 <= attrs["axis"] < len(shape):
            raise ShapeError(f"{op.name}: axis {attrs['axis']} of a {len(shape)}-d source")
        return shape[:attrs["axis"]] + shape[attrs["axis"] + 1:]
    if op.kind == GATHER:
        table, ids = srcs
        return ids.shape + table.shape[1:]
    if op.kind == SCATTER:
        table, ids, rows = srcs
        if len(table.shape) != 2 or len(ids.shape) != 1 or len(rows.shape) != 2 or not (
                dims_equal(rows.shape[0], ids.shape[0]) and dims_equal(rows.shape[1], table.shape[1])):
            raise ShapeError(
                f"Scatter writes (K, D) rows at K ids into a (V, D) table: got a table {table.shape}, "
                f"ids {ids.shape}, rows {rows.shape}"
            )
        return table.shape
    raise AssertionError(op.kind)


def infer_dtype(op: OpDef, srcs: tuple[Edge, ...], attrs: dict[str, Any]) -> str:
    """The dtype rule (ops.dtypes): a Cast's target, a Gather's or Scatter's table, else the promotion
    of the operands that are not weak (a Where's condition does not count: it only selects)."""
    if op.name == "Cast":
        return attrs["to"]
    if op.kind in INDEXED:
        return srcs[0].node.dtype
    values = srcs[1:] if op.name == "Where" else srcs
    strong = [e.node.dtype for e in values if not e.node.weak]
    dtype = promote(strong, [e.node.dtype for e in values if e.node.weak])
    return "float32" if op.floats_only and DTYPES[dtype].is_int else dtype


def make_node(op_name: str, srcs: tuple[Edge, ...] = (), dtype: Optional[str] = None, **attrs) -> Node:
    """A new node; its dtype is `dtype` (Inputs) or what infer_dtype says."""
    op, srcs = OPS[op_name], tuple(srcs)
    dtype = dtype or infer_dtype(op, srcs, attrs)
    return Node(op, srcs, attrs, infer_shape(op, srcs, attrs), dtype, origin=current())
