"""ONNX neural-network operators: MatMul, Gemm, Conv, ConvTranspose, pooling, normalisations.

Convolution and pooling are the op library's N-D `conv`, `max_pool` and `avg_pool` (the padded input
read through one strided window view (N, C, *out, *kernel), then reduced); what is ONNX's own stays
here: auto_pad, asymmetric pads, MaxPool's whole-tensor Indices, the attribute checks. ConvTranspose is a
stride-1 convolution of the
zero-stuffed input with the flipped, transposed kernel, cropped by the pads.
"""
from __future__ import annotations

from ..errors import ShapeError
from ..ops import nn, pooling
from ..ops.conv_transpose import transposed
from ..ops.core import computed_in_float32
from ..ops.tensor import Tensor, iota
from ..symbolic.dims import prod
from .onnx_ops_core import INT64, Value, float_value, op

# MaxPool pads with the most negative finite float32: a ceil_mode window may lie wholly in the padding.
MOST_NEGATIVE = -3.4028234663852886e38

CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@op("MatMul")
def matmul(ctx):
    a, b = ctx.tensor(0), ctx.tensor(1)
    if a.ndim == 0 or b.ndim == 0:
        raise ctx.error("MatMul needs operands of rank >= 1")
    return float_value(a @ b)


@op("Gemm", attrs=("alpha", "beta", "transA", "transB"))
def gemm(ctx):
    a, b = ctx.tensor(0), ctx.tensor(1)
    if a.ndim != 2 or b.ndim != 2:
        raise ctx.error(f"A and B must be 2-D, got shapes {a.shape} and {b.shape}")
    if ctx.int_attr("transA", 0):
        a = a.T
    if ctx.int_attr("transB", 0):
        b = b.T
    alpha, beta = ctx.float_attr("alpha", 1.0), ctx.float_attr("beta", 1.0)
    out = a @ b
    if alpha != 1.0:
        out = out * alpha
    if ctx.has(2) and beta != 0.0:
        c = ctx.tensor(2)
        out = out + (c if beta == 1.0 else c * beta)
    return float_value(out)


# --- windows -------------------------------------------------------------------------------------
def _spatial_params(ctx, x: Tensor, kernel: list, *, has_dilations: bool = True, transpose: bool = False):
    d = x.ndim - 2
    if d not in (1, 2, 3):
        raise ctx.error(f"input must have 1, 2 or 3 spatial axes, got shape {x.shape}")
    if len(kernel) != d:
        raise ctx.error(f"kernel_shape {kernel} does not match the {d} spatial axes of input shape {x.shape}")
    if any(isinstance(k, int) and k < 1 for k in kernel):
        raise ctx.attr_error("kernel_shape", kernel, "window sizes must be positive")
    strides = ctx.ints_attr("strides", [1] * d)
    dilations = ctx.ints_attr("dilations", [1] * d) if has_dilations else [1] * d
    pads = ctx.ints_attr("pads", [0] * (2 * d))
    for name, values, n in (("strides", strides, d), ("dilations", dilations, d), ("pads", pads, 2 * d)):
        if len(values) != n:
            raise ctx.attr_error(name, values, f"needs {n} values for {d} spatial axes")
    if any(s < 1 for s in strides) or any(k < 1 for k in dilations):
        raise ctx.error(f"strides {strides} and dilations {dilations} must be positive")
    if any(p < 0 for p in pads):
        raise ctx.attr_error("pads", pads, "pads must be non-negative")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise ctx.attr_error("auto_pad", auto_pad, "use NOTSET, VALID, SAME_UPPER or SAME_LOWER")
    if auto_pad == "VALID":
        pads = [0] * (2 * d)
    elif auto_pad != "NOTSET" and not transpose:
        begin, end = [], []
        for i in range(d):
            n, s, extent = x.shape[2 + i], strides[i], dilations[i] * (kernel[i] - 1) + 1
            if not isinstance(n, int):
                if s != 1:
                    raise ctx.attr_error(
                        "auto_pad", auto_pad, f"with stride {s} it needs concrete spatial sizes, not {n}"
                    )
                total = extent - 1
            else:
                out = -(-n // s)
                total = max(0, (out - 1) * s + extent - n)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
        pads = begin + end
    return strides, dilations, pads, auto_pad


def _pairs(pads) -> list[tuple[int, int]]:
    """ONNX's pads (begin..., end...) as (begin, end) per axis."""
    d = len(pads) // 2
    return [(pads[i], pads[d + i]) for i in range(d)]


def convolution(ctx, x: Tensor, w: Tensor, strides, dilations, pads, groups: int) -> Tensor:
    """rc.nn.conv with ONNX's pads (begin..., end...); an impossible shape names the node."""
    d = w.ndim - 2
    try:
        return nn.conv(
            x, w, None, strides, [(pads[i], pads[d + i]) for i in range(d)], dilations, groups, ctx.op_type
        )
    except ShapeError as exc:
        raise ctx.error(str(exc)) from None


def _check_channels(ctx, x, w, groups, c_axis_of_w: int):
    if groups < 1:
        raise ctx.attr_error("group", groups, "must be positive")
    c = x.shape[1]
    per_group = w.shape[c_axis_of_w]
    if isinstance(c, int) and isinstance(per_group, int) and (c_axis_of_w == 1 and c != per_group * groups):
        raise ctx.error(
            f"input has {c} channels but the kernel {tuple(w.shape)} with group={groups} "
            f"expects {per_group * groups}"
        )


def _conv_operands(ctx):
    """Input, weight, kernel_shape and group of a Conv or ConvTranspose node, checked against each other."""
    x, w = ctx.tensor(0), ctx.tensor(1)
    if x.ndim < 3:
        raise ctx.error(f"input must be (N, C, spatial...), got shape {x.shape}")
    if w.ndim != x.ndim:
        raise ctx.error(f"kernel shape {w.shape} does not match input shape {x.shape}")
    kernel = ctx.ints_attr("kernel_shape", list(w.shape[2:]))
    if kernel != list(w.shape[2:]):
        raise ctx.attr_error(
            "kernel_shape", kernel, f"it must match the weight's spatial shape {tuple(w.shape[2:])}"
        )
    return x, w, kernel, ctx.int_attr("group", 1)


@op("Conv", attrs=CONV_ATTRS)
def conv(ctx):
    x, w, kernel, groups = _conv_operands(ctx)
    _check_channels(ctx, x, w, groups, 1)
    if isinstance(w.shape[0], int) and w.shape[0] % groups:
        raise ctx.error(f"{w.shape[0]} output channels do not split into group={groups}")
    strides, dilations, pads, _ = _spatial_params(ctx, x, kernel)
    out = convolution(ctx, x, w, strides, dilations, pads, groups)
    if ctx.has(2):
        out = out + ctx.tensor(2).reshape((w.shape[0],) + (1,) * (x.ndim - 2))
    return float_value(out)


@op("ConvTranspose", attrs=CONV_ATTRS + ("output_padding", "output_shape"))
def conv_transpose(ctx):
    x, w, kernel, groups = _conv_operands(ctx)
    c_in, m_per_group = w.shape[:2]
    if isinstance(x.shape[1], int) and isinstance(c_in, int) and x.shape[1] != c_in:
        raise ctx.error(f"input has {x.shape[1]} channels but the kernel {tuple(w.shape)} expects {c_in}")
    if groups < 1 or (isinstance(c_in, int) and c_in % groups):
        raise ctx.attr_error("group", groups, f"{c_in} input channels do not split into it")
    strides, dilations, pads, auto_pad = _spatial_params(ctx, x, kernel, transpose=True)
    d = x.ndim - 2
    output_padding = ctx.ints_attr("output_padding", [0] * d)
    if len(output_padding) != d:
        raise ctx.attr_error("output_padding", output_padding, f"needs {d} values")
    spatial = x.shape[2:]
    full = []
    for i in range(d):
        if not isinstance(spatial[i], int):
            raise ctx.error(
                f"spatial axis {i} has symbolic size {spatial[i]}; ConvTranspose needs concrete sizes"
            )
        full.append(strides[i] * (spatial[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1)
    output_shape = ctx.ints_attr("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is None:
            output_shape = [spatial[i] * strides[i] for i in range(d)]
        output_shape = output_shape[-d:]
        if len(output_shape) != d:
            raise ctx.attr_error("output_shape", output_shape, f"needs {d} values")
        begin, end = [], []
        for i in range(d):
            total = full[i] - output_shape[i]
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
        pads = begin + end
    out = transposed(
        x,
        w,
        strides,
        dilations,
        [(pads[i], pads[d + i]) for i in range(d)],
        output_padding,
        groups,
        "ConvTranspose",
    )
    if ctx.has(2):
        out = out + ctx.tensor(2).reshape((out.shape[1],) + (1,) * d)
    return float_value(out)


# --- pooling ------------------------------------------------------------------------------------
def _pool_params(ctx, x):
    kernel = ctx.ints_attr("kernel_shape")
    if kernel is None:
        raise ctx.error("attribute 'kernel_shape' is required")
    strides, dilations, pads, auto_pad = _spatial_params(ctx, x, kernel, has_dilations=True)
    ceil_mode = ctx.int_attr("ceil_mode", 0)
    if ceil_mode and auto_pad != "NOTSET":
        raise ctx.attr_error("ceil_mode", ceil_mode, f"not with auto_pad={auto_pad}")
    return kernel, strides, dilations, pads, bool(ceil_mode)


@op(
    "MaxPool",
    attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"),
)
def max_pool(ctx):
    x = ctx.tensor(0)
    kernel, strides, dilations, pads, ceil_mode = _pool_params(ctx, x)
    with_indices = ctx.wants_output(1)
    if with_indices and ctx.int_attr("storage_order", 0) != 0:
        raise ctx.attr_error(
            "storage_order", ctx.int_attr("storage_order"), "only row-major Indices (0) are supported"
        )
    try:
        out = pooling.max_pool(
            x, kernel, strides, _pairs(pads), dilations, ceil_mode, with_indices, MOST_NEGATIVE, ctx.op_type
        )
    except ShapeError as exc:
        raise ctx.error(str(exc)) from None
    if not with_indices:
        return float_value(out)
    out, within_plane = out  # ONNX's Indices count over the whole (N, C, *spatial) tensor
    n, c = x.shape[:2]
    plane = prod(x.shape[2:])
    first = (iota((n, c), 0) * c + iota((n, c), 1)) * plane
    indices = within_plane + first.reshape((n, c) + (1,) * len(kernel))
    return [float_value(out), Value(INT64, tensor=indices)]


@op(
    "AveragePool",
    attrs=("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"),
)
def average_pool(ctx):
    x = ctx.tensor(0)
    kernel, strides, dilations, pads, ceil_mode = _pool_params(ctx, x)
    try:
        return float_value(pooling.avg_pool(x, kernel, strides, _pairs(pads), dilations, ceil_mode,
                                            bool(ctx.int_attr("count_include_pad", 0)), who=ctx.op_type))
    except ShapeError as exc:
        raise ctx.error(str(exc)) from None


@op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx):
    x = ctx.tensor(0)
    if x.ndim < 3:
        raise ctx.error(f"input must be (N, C, spatial...), got shape {x.shape}")
    axes = tuple(range(2, x.ndim))
    return float_value(
        x.mean(axes, keepdims=True) if ctx.op_type == "GlobalAveragePool" else x.amax(axes, keepdims=True)
    )


# --- normalisation --------------------------------------------------------------------------------
def _per_channel(ctx, i: int, ndim: int) -> Tensor:
    t = ctx.tensor(i)
    if t.ndim != 1:
        raise ctx.error(
            f"input {i} ({ctx.node.input[i]!r}) holds one value per channel and must be 1-D, "
            f"got shape {t.shape}"
        )
    return t.reshape((t.shape[0],) + (1,) * (ndim - 2)) if ndim > 2 else t


@op("BatchNormalization", attrs=("epsilon", "momentum", "training_mode"))
def batch_norm(ctx):
    if ctx.int_attr("training_mode", 0):
        raise ctx.attr_error("training_mode", 1, "refcomp imports inference graphs only")
    for k in (1, 2):
        if ctx.wants_output(k):
            raise ctx.error(
                f"output {k} (running statistics) is only produced in training mode, which is not supported"
            )
    x = ctx.tensor(0)
    if x.ndim < 2:
        raise ctx.error(f"input must be (N, C, ...), got shape {x.shape}")
    scale, bias, mean, var = (_per_channel(ctx, i, x.ndim) for i in (1, 2, 3, 4))
    return float_value(_batch_normalized(x, scale, bias, mean, var, ctx.float_attr("epsilon", 1e-5)))


# The normalisations are composites: of a 16-bit tensor they compute in float32 and round once
# (ops.core.computed_in_float32), as ONNX's stash_type=1 and PyTorch's kernels do.
@computed_in_float32
def _batch_normalized(x, scale, bias, mean, var, eps: float):
    return (x - mean) * ((var + eps).rsqrt() * scale) + bias


@computed_in_float32
def _normalized(x: Tensor, axes, eps: float, scale: Tensor, bias=None):
    """(x - mean) / sqrt(var + eps) over `axes`, times scale plus bias; and the mean and
    1 / sqrt(var + eps)."""
    mean = x.mean(axes, keepdims=True)
    centred = x - mean
    inv = ((centred * centred).mean(axes, keepdims=True) + eps).rsqrt()
    y = centred * inv * scale
    return (y if bias is None else y + bias), mean, inv


def _statistics_axes(ctx, x: Tensor) -> tuple[int, ...]:
    """The axes from `axis` to the last, for LayerNormalization and RMSNormalization (float32 stats only)."""
    if ctx.int_attr("stash_type", 1) != 1:
        raise ctx.attr_error(
            "stash_type",
            ctx.int_attr("stash_type"),
            "refcomp computes the statistics in float32 (stash_type=1)",
        )
    axis = ctx.axis(ctx.int_attr("axis", -1), x.ndim)
    return tuple(range(axis, x.ndim))


@op("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def layer_norm(ctx):
    x = ctx.tensor(0)
    y, mean, inv = _normalized(x, _statistics_axes(ctx, x), ctx.float_attr("epsilon", 1e-5), ctx.tensor(1),
                               ctx.tensor(2) if ctx.has(2) else None)
    return [float_value(y), float_value(mean), float_value(inv)]


@op("InstanceNormalization", attrs=("epsilon",))
def instance_norm(ctx):
    x = ctx.tensor(0)
    if x.ndim < 3:
        raise ctx.error(f"input must be (N, C, spatial...), got shape {x.shape}")
    y, _, _ = _normalized(
        x,
        tuple(range(2, x.ndim)),
        ctx.float_attr("epsilon", 1e-5),
        _per_channel(ctx, 1, x.ndim),
        _per_channel(ctx, 2, x.ndim),
    )
    return float_value(y)


@op("MeanVarianceNormalization", attrs=("axes",))
def mvn(ctx):
    x = ctx.tensor(0)
    return float_value(
        _mean_variance_normalized(x, tuple(ctx.axes(ctx.ints_attr("axes", [0, 2, 3]), x.ndim)))
    )


@computed_in_float32
def _mean_variance_normalized(x: Tensor, axes):
    centred = x - x.mean(axes, keepdims=True)
    return centred / (centred * centred).mean(axes, keepdims=True).sqrt()


@op("RMSNormalization", attrs=("axis", "epsilon", "stash_type"))
def rms_norm(ctx):
    x = ctx.tensor(0)
    return float_value(
        _rms_normalized(x, _statistics_axes(ctx, x), ctx.float_attr("epsilon", 1e-5), ctx.tensor(1))
    )


@computed_in_float32
def _rms_normalized(x: Tensor, axes, eps: float, scale: Tensor):
    return x * ((x * x).mean(axes, keepdims=True) + eps).rsqrt() * scale


@op("LpNormalization", attrs=("axis", "p"))
def lp_norm(ctx):
    x = ctx.tensor(0)
    p = ctx.int_attr("p", 2)
    if p not in (1, 2):
        raise ctx.attr_error("p", p, "use 1 or 2")
    return float_value(_lp_normalized(x, ctx.axis(ctx.int_attr("axis", -1), x.ndim), p))


@computed_in_float32
def _lp_normalized(x: Tensor, axis: int, p: int):
    norm = x.abs().sum(axis, keepdims=True) if p == 1 else (x * x).sum(axis, keepdims=True).sqrt()
    return x / (norm + (norm <= 0.0))  # a zero vector stays zero


__all__ = ["convolution"]
