"""ONNX Einsum, Trilu and CumSum, each the Tensor API's own operation (refcomp.ops.linalg, cumsum)."""
from __future__ import annotations

from ..ops.linalg import einsum
from .onnx_ops_core import FLOAT, Value, float_value, op


@op("Einsum", attrs=("equation",))
def einsum_op(ctx):
    equation = ctx.attr("equation")
    if equation is None:
        raise ctx.error("attribute 'equation' is required")
    equation = equation.decode() if isinstance(equation, bytes) else str(equation)
    return float_value(einsum(equation, *[ctx.tensor(i) for i in range(len(ctx.node.input))]))


@op("Trilu", attrs=("upper",))
def trilu(ctx):
    x = ctx.tensor(0)
    k = ctx.static_ints(1, "k (input 1)")[0] if ctx.has(1) else 0
    return float_value(x.triu(k) if ctx.int_attr("upper", 1) else x.tril(k))


@op("CumSum", attrs=("exclusive", "reverse"))
def cumsum(ctx):
    """Running sums along the axis (input 1); `exclusive` shifts in a zero, `reverse` runs from the end."""
    x = ctx.tensor(0)
    axis = ctx.axis(ctx.static_ints(1, "axis (input 1)")[0], x.ndim)
    if ctx.int_attr("reverse", 0):
        x = x.flip(axis)
    if ctx.int_attr("exclusive", 0):  # [0, x0, x1, ...]: a shift, so x_i's own value (inf, NaN) never enters
        widths = [(0, 0)] * x.ndim
        widths[axis] = (1, 0)
        index = [slice(None)] * x.ndim
        index[axis] = slice(0, x.shape[axis])
        x = x.pad(widths)[tuple(index)]
    out = x.cumsum(axis)
    return Value(FLOAT, tensor=out.flip(axis) if ctx.int_attr("reverse", 0) else out)
