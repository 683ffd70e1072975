"""ONNX elementwise math, activations, comparisons, logic and Cast.

Everything here is built from refcomp's Tensor methods, so from its arithmetic primitives; the
special functions (Tanh, Erf, Floor, Ceil, and the expm1 and log1p inside Softplus, Mish, Elu, Selu
and Celu) are the Tensor methods of `refcomp/ops/special.py`, whose docstring gives their measured
accuracy, and the comparisons are the Tensor's NaN-correct `eq`, `<=`, `>=`, `isnan`.
"""
from __future__ import annotations

import numpy as np

from ..ops import activations
from ..ops.core import constant
from ..ops.elementwise import FLOAT32_MAX, fmod, where
from ..ops.tensor import Tensor
from ..symbolic.dims import dims_equal, idiv
from .onnx_ops_core import (
    BOOL,
    DTYPE_OF_ETYPE,
    FLOAT,
    FLOATS,
    INT_TYPES,
    Value,
    as_dim,
    bool_value,
    float_value,
    is_int_array,
    numpy_dtype,
    op,
    static_value,
    type_name,
)
from .onnx_ops_shape import broadcast_shapes

FLT_MAX = FLOAT32_MAX


# --- folding integer arrays -------------------------------------------------------------------
def _static_ints(ctx):
    values = ctx.values()
    if values and all(v.is_static and (is_int_array(v.static) or v.static.dtype == np.bool_) for v in values):
        arrays = [v.static for v in values]
        ctx.check_fold_broadcast(arrays)
        return arrays
    return None


def _int_div(a, b):
    def one(x, y):
        if isinstance(x, (int, np.integer)) and isinstance(y, (int, np.integer)):
            q = abs(int(x)) // abs(int(y))
            return q if (x >= 0) == (y >= 0) else -q
        return idiv(x, y)
    return np.frompyfunc(one, 2, 1)(a, b)


def fold_result(result, like) -> Value:
    result = np.asarray(result)
    if result.dtype == object and all(isinstance(x, (int, np.integer)) for x in result.reshape(-1)):
        result = result.astype(np.int64)
    if result.dtype != object and result.dtype.kind in "iu" and like.dtype.kind in "iu":
        result = result.astype(like.dtype)
    return static_value(result)


FOLD_BINARY = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": _int_div,
}


def _exact_operand(ctx, i: int) -> Tensor:
    """Input i as a float tensor, static integers included (exact below 2^24), for an operation whose
    other operand is an integer tensor held exactly as float32 (positions, a mask read as float)."""
    v = ctx.value(i)
    if v.is_static and is_int_array(v.static):
        if v.static.dtype == object:
            if v.static.size != 1:
                raise ctx.error(f"input {i} holds the symbolic dims {v.static.tolist()}")
            return (
                constant(0.0).reshape((1,) * v.static.ndim) + v.static.reshape(-1)[0]
                if v.static.ndim
                else constant(0.0) + v.static.reshape(-1)[0]
            )
        if v.static.size and np.abs(v.static).max() > 1 << 24:
            raise ctx.error(f"input {i} holds integers beyond 2^24, which float32 does not hold exactly")
        return ctx.importer.materialize(Value(FLOAT, static=v.static.astype(np.float32), name=v.name))
    return ctx.tensor(i, (FLOAT, BOOL))


def _operands(ctx, types=(FLOAT,)) -> list:
    """The inputs as tensors; where one is an integer tensor held exactly as float32, static integers too."""
    if any(v.exact_ints for v in ctx.values()):
        return [_exact_operand(ctx, i) for i in range(len(ctx.node.input))]
    return [ctx.tensor(i, types) for i in range(len(ctx.node.input))]


# --- binary arithmetic ------------------------------------------------------------------------
@op("Add", "Sub", "Mul", "Div")
def binary(ctx):
    folded = _static_ints(ctx)
    if folded is not None:
        if ctx.op_type == "Div" and np.any(folded[1] == 0):
            raise ctx.error("integer division by zero: the static divisor (input 1) holds a 0")
        return fold_result(FOLD_BINARY[ctx.op_type](*folded), folded[0])
    positions = _positions_arithmetic(ctx)
    if positions is not None:
        return positions
    x, y = ctx.value(0), ctx.value(1)
    if (x.integer_tensor or y.integer_tensor) and x.etype in INT_TYPES and y.etype in INT_TYPES:
        a, b = (ctx.importer.integer_tensor(v) for v in (x, y))
        out = {"Add": a.__add__, "Sub": a.__sub__, "Mul": a.__mul__,
               "Div": lambda b: a.div(b, rounding_mode="trunc")}[ctx.op_type](b)  # ONNX's Div truncates
        return Value(x.etype, tensor=out)
    a, b = _operands(ctx)
    out = {"Add": a.__add__, "Sub": a.__sub__, "Mul": a.__mul__, "Div": a.__truediv__}[ctx.op_type](b)
    x, y = ctx.value(0), ctx.value(1)
    if x.exact_ints and (y.exact_ints or y.etype in INT_TYPES) and ctx.op_type != "Div":
        return Value(x.etype, tensor=out)  # integers held exactly as float32 stay integers
    if x.etype in INT_TYPES and y.etype in INT_TYPES:
        raise ctx.error("integer division of tensors computed at run time is not supported")
    return float_value(out)


def _positions_arithmetic(ctx):
    """Positions +/- positions or a static scalar, and positions * a static scalar, stay positions."""
    x, y = ctx.value(0), ctx.value(1)
    if x.positions is None and y.positions is None or ctx.op_type == "Div":
        return None
    def scalar(v):
        return (
            as_dim(v.static.reshape(-1)[0])
            if v.is_static and v.static.size == 1 and is_int_array(v.static)
            else None
        )

    sign = -1 if ctx.op_type == "Sub" else 1
    if ctx.op_type in ("Add", "Sub"):
        if x.positions is not None and y.positions is not None:
            shape = broadcast_shapes(ctx, x.shape, y.shape)
            return Value(x.etype, positions=x.positions.plus(y.positions, shape, sign))
        p, k = (x.positions, scalar(y)) if x.positions is not None else (y.positions, scalar(x))
        if k is None or len(y.shape if x.positions is not None else x.shape) > len(p.shape):
            return None
        moved_positions = (
            p.shifted(sign * k) if x.positions is not None else p.scaled(sign).shifted(k)
        )  # p -/+ k, k -/+ p
        return Value(x.etype, positions=moved_positions)
    p, k = (x.positions, scalar(y)) if x.positions is not None else (y.positions, scalar(x))
    if k is None:
        return None
    return Value(x.etype, positions=p.scaled(k))


@op("Mod", attrs=("fmod",))
def mod(ctx):
    fmod_attr = ctx.int_attr("fmod", 0)
    folded = _static_ints(ctx)
    if folded is not None:
        if np.any(folded[1] == 0):
            raise ctx.error("integer modulo by zero: the static divisor (input 1) holds a 0")
        return fold_result((np.fmod if fmod_attr else np.mod)(*folded), folded[0])
    a, b = ctx.tensor(0), ctx.tensor(1)
    return float_value(fmod(a, b) if fmod_attr else a % b)  # `%` is np.mod: the divisor's sign


@op("Pow")
def power(ctx):
    x = ctx.tensor(0)
    yv = ctx.value(1)
    if yv.is_static and yv.static.dtype != object:
        y = yv.static.astype(np.float64)
        if y.size and np.all(y == y.reshape(-1)[0]) and y.ndim <= x.ndim:  # one exponent: decided at import
            out = x ** float(y.reshape(-1)[0])
            return float_value(
                out.broadcast_to(_broadcast_shape(x.shape, y.shape)) if out.shape != x.shape else out
            )
        if yv.etype in INT_TYPES:
            yv = static_value(y.astype(np.float32), FLOAT)
    return float_value(x ** ctx.as_tensor(yv, "exponent (input 1)"))  # NumPy's pow, at every edge


def _broadcast_shape(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    return tuple(y if dims_equal(x, 1) else x for x, y in zip(a, b))


@op("Max", "Min", "Sum", "Mean")
def variadic(ctx):
    folded = _static_ints(ctx)
    if folded is not None and ctx.op_type in ("Max", "Min", "Sum"):
        fn = {"Max": np.maximum, "Min": np.minimum, "Sum": np.add}[ctx.op_type]
        out = folded[0]
        for a in folded[1:]:
            out = fn(out, a)
        return fold_result(out, folded[0])
    tensors = [ctx.as_tensor(v, f"input {k}") for k, v in enumerate(ctx.values())]
    out = tensors[0]
    for t in tensors[1:]:
        out = {"Max": out.maximum, "Min": out.minimum}.get(ctx.op_type, out.__add__)(t)
    if len(tensors) == 1 and ctx.op_type != "Mean":
        return float_value(out)
    return float_value(out * (1.0 / len(tensors)) if ctx.op_type == "Mean" else out)


# --- unary math and activations (the op library's own, refcomp/ops/activations.py) ----------------
UNARY = {
    "Relu": Tensor.relu,
    "Sigmoid": Tensor.sigmoid,
    "Tanh": Tensor.tanh,
    "Exp": Tensor.exp,
    "Log": Tensor.log,
    "Sqrt": Tensor.sqrt,
    "Sin": Tensor.sin,
    "Cos": Tensor.cos,
    "Abs": Tensor.abs,
    "Neg": Tensor.__neg__,
    "Reciprocal": Tensor.reciprocal,
    "Erf": Tensor.erf,
    "Floor": Tensor.floor,
    "Ceil": Tensor.ceil,
    "Softplus": activations.softplus,
    "Softsign": activations.softsign,
    "Sign": Tensor.sign,
    "Mish": activations.mish,
    "Tan": Tensor.tan,
    "Asin": Tensor.asin,
    "Acos": Tensor.acos,
    "Atan": Tensor.atan,
    "Sinh": Tensor.sinh,
    "Cosh": Tensor.cosh,
    "Asinh": Tensor.asinh,
    "Acosh": Tensor.acosh,
    "Atanh": Tensor.atanh,
    "Round": Tensor.round,
}


@op(*UNARY)
def unary(ctx):
    if ctx.op_type in ("Abs", "Neg", "Sign"):
        folded = _static_ints(ctx)
        if folded is not None:
            return fold_result(
                {"Abs": np.abs, "Neg": np.negative, "Sign": np.sign}[ctx.op_type](folded[0]), folded[0]
            )
    return float_value(UNARY[ctx.op_type](ctx.tensor(0)))


@op("Gelu", attrs=("approximate",))
def gelu(ctx):
    x = ctx.tensor(0)
    mode = ctx.attr("approximate", "none")
    if mode == "tanh":
        return float_value(x.gelu(approximate="tanh"))
    if mode != "none":
        raise ctx.attr_error("approximate", mode, "use 'none' or 'tanh'")
    return float_value(x.gelu(approximate="none"))


@op("LeakyRelu", attrs=("alpha",))
def leaky_relu(ctx):
    return float_value(activations.leaky_relu(ctx.tensor(0), ctx.float_attr("alpha", 0.01)))


@op("Elu", attrs=("alpha",))
def elu(ctx):
    return float_value(activations.elu(ctx.tensor(0), ctx.float_attr("alpha", 1.0)))


@op("Selu", attrs=("alpha", "gamma"))
def selu(ctx):
    alpha = ctx.float_attr("alpha", 1.67326319217681884765625)
    gamma = ctx.float_attr("gamma", 1.05070102214813232421875)
    return float_value(gamma * activations.elu(ctx.tensor(0), alpha))


@op("Celu", attrs=("alpha",))
def celu(ctx):
    alpha = ctx.float_attr("alpha", 1.0)
    if alpha == 0.0:
        raise ctx.attr_error("alpha", alpha, "Celu divides by it")
    return float_value(activations.celu(ctx.tensor(0), alpha))


@op("ThresholdedRelu", attrs=("alpha",))
def thresholded_relu(ctx):
    x = ctx.tensor(0)
    alpha = ctx.float_attr("alpha", 1.0)
    return float_value((x > alpha) * x.maximum(alpha))


@op("PRelu")
def prelu(ctx):
    x, slope = ctx.tensor(0), ctx.tensor(1)
    return float_value(x.relu() + slope * x.minimum(0.0))


@op("Shrink", attrs=("bias", "lambd"))
def shrink(ctx):
    x, bias, lambd = ctx.tensor(0), ctx.float_attr("bias", 0.0), ctx.float_attr("lambd", 0.5)
    return float_value(where(x < -lambd, x + bias, where(x > lambd, x - bias, 0.0)))


@op("HardSigmoid", attrs=("alpha", "beta"))
def hard_sigmoid(ctx):
    x = ctx.tensor(0)
    return float_value((ctx.float_attr("alpha", 0.2) * x + ctx.float_attr("beta", 0.5)).clip(0.0, 1.0))


@op("HardSwish")
def hard_swish(ctx):
    return float_value(activations.hardswish(ctx.tensor(0)))


@op("Clip")
def clip(ctx):
    folded = _static_ints(ctx)
    if folded is not None:
        lo = folded[1] if ctx.has(1) else None
        hi = folded[2] if ctx.has(2) else None
        return fold_result(np.clip(folded[0], lo, hi), folded[0])
    x = ctx.tensor(0)
    bounds = []
    for i in (1, 2):
        if not ctx.has(i):
            bounds.append(None)
            continue
        v = ctx.value(i)
        if v.ndim != 0 and not (v.ndim == 1 and v.shape[0] == 1):
            raise ctx.error(
                f"input {i} (the {'min' if i == 1 else 'max'}) must be a scalar, got shape {v.shape}"
            )
        if v.is_static and v.static.dtype != object:
            bounds.append(float(v.static.reshape(-1)[0]))
        else:
            bounds.append(ctx.as_tensor(v, f"input {i}").reshape(()))
    lo, hi = bounds
    out = x if lo is None else x.maximum(lo)
    return float_value(out if hi is None else out.minimum(hi))


@op("IsNaN")
def is_nan(ctx):
    return bool_value(ctx.tensor(0).isnan())


@op("IsInf", attrs=("detect_negative", "detect_positive"))
def is_inf(ctx):
    x = ctx.tensor(0)
    out = None
    if ctx.int_attr("detect_positive", 1):
        out = x > FLT_MAX
    if ctx.int_attr("detect_negative", 1):
        neg = x < -FLT_MAX
        out = neg if out is None else out + neg
    return bool_value(out if out is not None else x * 0.0)


# --- comparisons and logic ------------------------------------------------------------------------
COMPARE = {"Less": lambda a, b: a < b, "Greater": lambda a, b: a > b, "Equal": lambda a, b: a.eq(b),
           "LessOrEqual": lambda a, b: a <= b, "GreaterOrEqual": lambda a, b: a >= b}
COMPARE_NUMPY = {"Less": np.less, "Greater": np.greater, "Equal": np.equal, "LessOrEqual": np.less_equal,
                 "GreaterOrEqual": np.greater_equal}


@op(*COMPARE)
def compare(ctx):
    folded = _static_ints(ctx)
    if folded is not None:
        return static_value(np.asarray(COMPARE_NUMPY[ctx.op_type](*folded), dtype=bool), BOOL)
    types = (FLOAT, BOOL) if ctx.op_type == "Equal" else (FLOAT,)
    return bool_value(COMPARE[ctx.op_type](*_operands(ctx, types)))


LOGIC = {"And": lambda a, b: a * b, "Or": lambda a, b: a.maximum(b), "Xor": lambda a, b: a + b - 2.0 * a * b}


@op("And", "Or", "Xor", "Not")
def logic(ctx):
    values = ctx.values()
    if all(v.is_static for v in values):
        arrays = [v.static.astype(bool) for v in values]
        ctx.check_fold_broadcast(arrays)
        fn = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Not": np.logical_not}[
            ctx.op_type
        ]
        return static_value(fn(*arrays), BOOL)
    if ctx.op_type == "Not":
        return bool_value(1.0 - ctx.tensor(0, (BOOL,)))
    return bool_value(LOGIC[ctx.op_type](ctx.tensor(0, (BOOL,)), ctx.tensor(1, (BOOL,))))


@op("Where")
def where_op(ctx):
    c, x, y = ctx.value(0), ctx.value(1), ctx.value(2)
    if c.is_static and x.is_static and y.is_static:
        ctx.check_fold_broadcast([c.static, x.static, y.static])
        return static_value(np.where(c.static.astype(bool), x.static, y.static), x.etype)
    if x.etype != y.etype:
        raise ctx.error(f"X is {type_name(x.etype)} but Y is {type_name(y.etype)}")
    cond = ctx.tensor(0, (BOOL,))
    a, b = ctx.as_tensor(x, "input 1 (X)", (FLOAT, BOOL)), ctx.as_tensor(y, "input 2 (Y)", (FLOAT, BOOL))
    return Value(x.etype, tensor=where(cond, a, b))


# --- Cast ----------------------------------------------------------------------------------------
@op("Cast", "CastLike", attrs=("to", "saturate", "round_mode"))
def cast(ctx):
    v = ctx.value(0)
    if ctx.op_type == "Cast":
        to = ctx.int_attr("to")
        if to is None:
            raise ctx.error("attribute 'to' is required")
    else:
        to = ctx.value(1).etype
    if ctx.attr("round_mode", "up") != "up":
        raise ctx.attr_error(
            "round_mode", ctx.attr("round_mode"), "only float8 casts use it; refcomp casts float32/bool/int"
        )
    if v.is_static:
        if to in INT_TYPES and v.static.dtype == object:
            return static_value(v.static, to)
        if v.static.dtype == object:
            raise ctx.error(f"cannot cast the symbolic dims {v.static.tolist()} to {type_name(to)}")
        if to not in INT_TYPES | FLOATS | {BOOL}:
            raise ctx.error(
                f"cast to {type_name(to)} is not supported "
                f"(refcomp computes in float32, stores float16 and bfloat16)"
            )
        return static_value(v.static.astype(numpy_dtype(to)), to)
    if v.positions is not None and to in INT_TYPES:
        return Value(to, positions=v.positions)
    if v.exact_ints:  # integers held exactly as float32 (positions, or an input only cast to float)
        v = Value(FLOAT, tensor=ctx.importer.materialize(v))
    if to in FLOATS:  # rounded to a 16-bit type, or widened
        return float_value(ctx.as_tensor(v, "input 0", (FLOAT, BOOL)).to(DTYPE_OF_ETYPE[to]))
    if to == BOOL:
        x = ctx.as_tensor(v, "input 0", (FLOAT, BOOL))
        return bool_value(x if v.etype == BOOL else x.ne(0.0))
    raise ctx.error(f"cast of a run-time {type_name(v.etype)} tensor to {type_name(to)} is not supported "
                    f"(refcomp computes FLOAT, with BOOL as 0/1 floats)")
