"""ATen's elementwise ops, comparisons, logic, casts and creation, as refcomp's PyTorch-named calls.

Each converter takes the node's arguments in ATen's order (aten_call.Call has made integer
inputs exact float32 tensors) and returns refcomp tensors; the Tensor methods it calls already
follow PyTorch (broadcasting, NaN, promotion of Python numbers), so most are one line. The
integer rules (`*_bound`) say how large an integer result may be, from its arguments' bounds.
"""
from __future__ import annotations

import math
import numbers

import sympy

from ..ops import nn
from ..ops.creation import arange as rc_arange
from ..ops.elementwise import fmod, maximum, minimum, where
from ..ops.tensor import BoolTensor, Tensor, lift
from ..symbolic.dims import dim, idiv
from .aten_values import UNKNOWN, bound_max, bound_of, full_positions
from .onnx_positions import Positions
from .torch_graph import size_expr


def number(v):
    """A Python scalar as refcomp's operand (bools as 0/1); tensors and dims as they are."""
    return float(v) if isinstance(v, bool) else v


def t(ctx, v) -> Tensor:
    return ctx.tensor(v)


# --- arithmetic --------------------------------------------------------------------------------------
def add(ctx, a, b, alpha=1):
    return t(ctx, a).add(number(b), alpha=alpha) if alpha != 1 else t(ctx, a) + number(b)


def sub(ctx, a, b, alpha=1):
    return t(ctx, a).sub(number(b), alpha=alpha) if alpha != 1 else t(ctx, a) - number(b)


def rsub(ctx, a, b, alpha=1):
    """b - alpha * a."""
    return t(ctx, b) - (t(ctx, a) * alpha if alpha != 1 else t(ctx, a))


def mul(ctx, a, b):
    return t(ctx, a) * number(b)


def div(ctx, a, b, rounding_mode=None):
    return t(ctx, a).div(number(b), rounding_mode=rounding_mode)


def pow_(ctx, a, b):
    return t(ctx, a) ** number(b)


def pow_scalar(ctx, a, b):
    """pow.Scalar: a number to a tensor's powers."""
    return lift(number(a)) ** t(ctx, b)


def sum_bound(ctx, a, b, alpha=1):
    return bound_of(a) + abs(alpha) * bound_of(b)


def rsub_bound(ctx, a, b, alpha=1):
    return bound_of(b) + abs(alpha) * bound_of(a)


def product_bound(ctx, a, b):
    return bound_of(a) * bound_of(b)


def same_bound(ctx, *args, **kwargs):
    """The result's values are some of the inputs' (views, selections, max and min)."""
    return bound_max([bound_of(v) for v in args if not isinstance(v, (str, type(None)))])


def first_bound(ctx, x, *args, **kwargs):
    """The values of the first argument (moved, picked or reordered)."""
    return bound_of(x)


def neg_bound(ctx, x):
    return bound_of(x)


# Rules of ops whose integers are some of their inputs' (moved, picked, negated, cast): exact whatever
# their magnitude, so no bound need hold for them; arithmetic must stay within 2^24 (Importer.exact).
SELECTIONS = frozenset({same_bound, first_bound, neg_bound})


# --- unary, activations ------------------------------------------------------------------------------
def method(name: str):
    """A converter calling the Tensor method `name` on the first argument."""
    def convert(ctx, x, *args, **kwargs):
        return getattr(t(ctx, x), name)(*args, **kwargs)
    convert.__name__ = name
    return convert


def gelu(ctx, x, approximate="none"):
    return t(ctx, x).gelu(approximate=approximate)


def hardtanh(ctx, x, min_val=-1.0, max_val=1.0):
    return nn.hardtanh(t(ctx, x), min_val, max_val)


def leaky_relu(ctx, x, negative_slope=0.01):
    return nn.leaky_relu(t(ctx, x), negative_slope)


def elu(ctx, x, alpha=1.0, scale=1.0, input_scale=1.0):
    """scale * x above 0, else scale * alpha * (exp(x * input_scale) - 1) (SELU and CELU come here)."""
    x = t(ctx, x)
    if scale == 1 and input_scale == 1:
        return nn.elu(x, alpha)
    negative = (x * input_scale).clamp(max=0.0).expm1() * (scale * alpha)
    return where(x > 0.0, x * scale, negative)


def clamp(ctx, x, min=None, max=None):
    return t(ctx, x).clamp(min=_operand(ctx, min), max=_operand(ctx, max))


def _operand(ctx, v):
    return None if v is None else ctx.tensor(v) if not isinstance(v, numbers.Real) else number(v)


def round_(ctx, x, decimals=0):
    return t(ctx, x).round(decimals=decimals) if decimals else t(ctx, x).round()


def maximum_(ctx, a, b):
    return maximum(t(ctx, a), t(ctx, b))


def minimum_(ctx, a, b):
    return minimum(t(ctx, a), t(ctx, b))


def fmod_(ctx, a, b):
    return fmod(t(ctx, a), number(b))


def remainder(ctx, a, b):
    """Python's %: the divisor's sign, as refcomp's `%`."""
    return t(ctx, a) % number(b)


def atan2(ctx, a, b):
    return t(ctx, a).arctan2(t(ctx, b))


# --- selection, comparison, logic --------------------------------------------------------------------
def where_(ctx, cond, a, b):
    return where(t(ctx, cond), _operand(ctx, a), _operand(ctx, b))


def masked_fill(ctx, x, mask, value):
    return where(t(ctx, mask), _operand(ctx, value), t(ctx, x))


def compare(name: str):
    def convert(ctx, a, b):
        return getattr(t(ctx, a), name)(number(b) if not isinstance(b, Tensor) else b)
    convert.__name__ = name
    return convert


def logical(name: str):
    """logical_* and, on booleans, bitwise_*: any nonzero is true."""
    def convert(ctx, a, b=None):
        return getattr(t(ctx, a), name)() if b is None else getattr(t(ctx, a), name)(t(ctx, b))
    convert.__name__ = name
    return convert


# --- casts and copies ---------------------------------------------------------------------------------
def identity(ctx, x, *args, **kwargs):
    """clone, alias, detach, contiguous: the same values (refcomp's graph is never changed in place)."""
    return t(ctx, x)


def to_copy(ctx, x, dtype=None, **kwargs):
    """A cast; Call.finish gives the node's dtype (16-bit rounding, 0/1 booleans). A float cast to an
    integer type truncates toward zero, as C's and PyTorch's casts do."""
    x = t(ctx, x)
    kind = str(ctx.out.dtype)
    if "int" in kind and not isinstance(x, BoolTensor) and x.dtype != "int32":
        return x.trunc()
    return x


def to_copy_bound(ctx, x, dtype=None, **kwargs):
    """Integers cast to integers keep their bound; a float truncated to an integer is exact (float32 holds
    every integer it truncates to) but of no magnitude refcomp knows, so no arithmetic may follow."""
    return bound_of(x)


SELECTIONS = SELECTIONS | {to_copy_bound}


def copy(ctx, dst, src, non_blocking=False):
    """dst's shape and dtype, src's values (broadcast)."""
    return t(ctx, src).broadcast_to(t(ctx, dst).shape)


# --- creation ------------------------------------------------------------------------------------------
def filled(shape, value) -> Tensor:
    """`value` (a number, or a dim such as T) everywhere in `shape`."""
    value = lift(float(value) if isinstance(value, (bool, int, float)) else value)
    return value.reshape((1,) * len(shape)).broadcast_to(tuple(shape)) if shape else value


def scalar_tensor(ctx, value, **kwargs):
    return filled((), value)


def full_(ctx, size, value, **kwargs):
    return filled([dim(n) for n in size], value)


def full_like(ctx, x, value, **kwargs):
    return filled(t(ctx, x).shape, value)


def fill(ctx, x, value):
    """fill.Scalar and fill.Tensor: x's shape, the value everywhere."""
    shape = t(ctx, x).shape
    return value.reshape(()).broadcast_to(shape) if isinstance(value, Tensor) else filled(shape, value)


def full_affine(ctx, size, value, **kwargs):
    if isinstance(value, float) and not value.is_integer():
        return None
    return full_positions(
        tuple(dim(n) for n in size), int(value) if isinstance(value, (bool, int, float)) else value
    )


def full_like_affine(ctx, x, value, **kwargs):
    return full_affine(ctx, x.shape, value)


def value_bound(ctx, *args, **kwargs):
    """The fill value's magnitude (full's second argument, scalar_tensor's first)."""
    value = args[1] if len(args) > 1 else kwargs.get("fill_value", args[0])
    return UNKNOWN if isinstance(value, float) and not math.isfinite(value) else bound_of(value)


def arange_(ctx, start, end=None, step=1, **kwargs):
    return rc_arange(start, end, step)


def arange_affine(ctx, start, end=None, step=1, **kwargs):
    """Integer ramps with symbolic ends: start + i * step below end."""
    if end is None:
        start, end = 0, start
    if (
        not all(isinstance(v, (int, sympy.Basic)) for v in (start, end, step))
        or not isinstance(step, int)
        or step == 0
    ):
        return None
    span = dim(end - start) if step > 0 else dim(start - end)
    count = ctx.importer.dims.translate(
        size_expr(ctx.out.shape[0])
    )  # torch's count simplifies ceil(span / step)
    count = (
        count if count is not None else span if abs(step) == 1 else dim(idiv(span + abs(step) - 1, abs(step)))
    )
    return Positions.arange(count, dim(start), step)


def arange_bound(ctx, start, end=None, step=1, **kwargs):
    return bound_of(start) + (bound_of(end) if end is not None else 0)

