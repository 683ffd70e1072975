"""`rc.nn`: the neural-network layers, with PyTorch's signatures, built from Tensor methods.

Convolution (`conv`, any number of spatial axes; `conv1d`/`conv2d`/`conv3d` fix it) and pooling read
their input through one strided *window view* (N, C, *out, *kernel) of the padded input (`windows`,
also what the ONNX importer's pools read), so the im2col matrix is never stored; the reduction over
the window is an ordinary SumReduce / MaxReduce. A convolution sums over (channel, *kernel) merged
into one axis, so it is one contraction that the search can tile as a matmul (an implicit GEMM).
"""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from ..symbolic.dims import dim, dims_equal, prod
from .activations import (celu, elu, hardsigmoid, hardswish, hardtanh, leaky_relu, logsigmoid, mish, relu6, selu,
                          softplus, softsign)
from .conv_transpose import conv_transpose as _conv_transpose
from .primitives import SHORT_REDUCE, make_node
from .provenance import user_op
from .elementwise import where
from .tensor import Tensor, constant, iota, lift
from .core import computed_in_float32, widened
from .pooling import (avg_pool1d, avg_pool2d, avg_pool3d, max_pool1d, max_pool2d, max_pool3d, max_unpool1d,
                      max_unpool2d, max_unpool3d)
from .windows import _pads, _per_axis, _require_ndim, windows


@user_op
def linear(x, weight, bias=None):
    """x @ weight.T + bias, with weight of shape (out_features, in_features) as in PyTorch."""
    weight = lift(weight)
    _require_ndim(weight, 2, "linear weight")
    out = lift(x) @ weight.T
    return out if bias is None else out + bias


@user_op
@computed_in_float32
def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, *, normalized_shape=None):
    """Normalise the last axis, or (normalized_shape=, by keyword) the last len(normalized_shape) axes;
    weight and bias broadcast against those axes."""
    x = lift(x)
    if isinstance(normalized_shape, numbers.Integral):  # PyTorch takes an int for one axis
        normalized_shape = (normalized_shape,)
    count = len(normalized_shape) if normalized_shape is not None else 1
    if not 1 <= count <= x.ndim or (normalized_shape is not None and
                                    not all(dims_equal(a, b) for a, b in zip(x.shape[-count:], normalized_shape))):
        raise ShapeError(f"layer_norm of {x.label}: normalized_shape {normalized_shape} is not the trailing shape "
                         f"of {x.shape}")
    axes = tuple(range(x.ndim - count, x.ndim))
    centred = x - x.mean(axes, keepdims=True)
    out = centred * ((centred * centred).mean(axes, keepdims=True) + eps).rsqrt()
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


@user_op
@computed_in_float32
def rms_norm(x, weight=None, eps: float = 1e-6):
    x = lift(x)
    out = x * ((x * x).mean(-1, keepdims=True) + eps).rsqrt()
    return out if weight is None else out * weight


@user_op
def conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1, who: str = "conv"):
    """N-D convolution (PyTorch's conv1d/2d/3d, cross-correlation): x (N, C, *spatial), weight
    (C_out, C / groups, *kernel), any number of spatial axes, the number taken from the weight.

    `padding` is an int, one int per spatial axis, or one (begin, end) pair per axis (ONNX's
    asymmetric pads). The windows of each group are multiplied by that group's kernels and summed
    over (channel, *kernel) in one product: SumReduce over a broadcast Mul of two views.
    """
    x, weight = lift(x), lift(weight)
    if weight.ndim < 3:
        raise ShapeError(f"{who} weight must be (C_out, C_in / groups, *kernel) with a spatial axis, got {weight.label}")
    d = weight.ndim - 2
    c_out, c_in_per_group = weight.shape[:2]
    kernel = tuple(weight.shape[2:])
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
        raise ShapeError(f"{who}: groups must be a positive int, got {groups!r}")
    _require_ndim(x, d + 2, who)
    if not dims_equal(x.shape[1], dim(c_in_per_group * groups)):
        raise ShapeError(f"{who}: {x.label} has {x.shape[1]} channels but {weight.label} expects {c_in_per_group} x {groups} groups")
    if isinstance(c_out, int) and c_out % groups:
        raise ShapeError(f"{who}: {c_out} output channels of {weight.label} do not split into {groups} groups")
    win = windows(x, kernel, _per_axis(stride, d, f"{who} stride", 1), _pads(padding, d, f"{who} padding"),
                  _per_axis(dilation, d, f"{who} dilation", 1), 0.0, who)
    n, outs = x.shape[0], win.shape[2:2 + d]
    win = win.reshape((n, groups, c_in_per_group) + outs + kernel)
    if groups > 1 and isinstance(c_in_per_group, int) and c_in_per_group <= SHORT_REDUCE:
        # A grouped conv with a few channels per group (a depthwise conv): no matmul worth tiling
        # (its N is c_out / groups), but a sum over (channel, *kernel) whose short axes the search
        # may unroll into the kernel that reads the result (the bias, one elementwise kernel).
        kern = weight.reshape((1, groups, dim(c_out // groups), c_in_per_group) + (1,) * d + kernel)
        (win, kern), dtype = widened(win.unsqueeze(2), kern)
        out = (win * kern).sum((3,) + tuple(range(4 + d, 4 + 2 * d)))
    else:
        # One contraction over k = (channel, *kernel) merged into one last axis: (n, groups, 1, *out,
        # k) times (1, groups, c_out / groups, 1.., k), which the search can tile as a matmul (an
        # implicit GEMM: the window view unravels k where a tile of it is loaded). With one group the
        # groups axis is left out, so the sum has the output's shape and a bias or an activation can
        # be applied to it in the matmul's epilogue.
        depth = prod((c_in_per_group,) + kernel)
        win = win.permute((0, 1) + tuple(range(3, 3 + d)) + (2,) + tuple(range(3 + d, 3 + 2 * d)))
        win = win.reshape((n, groups) + outs + (depth,)).unsqueeze(2)
        kern = weight.reshape((1, groups, dim(c_out // groups)) + (1,) * d + (depth,))
        if groups == 1:
            win, kern = win.reshape((n, 1) + outs + (depth,)), kern.reshape((1, c_out) + (1,) * d + (depth,))
        (win, kern), dtype = widened(win, kern)
        out = (win * kern).sum(-1)
    out = out.to(dtype).reshape((n, c_out) + outs)
    return out if bias is None else out + lift(bias).reshape((1, c_out) + (1,) * d)


@user_op
def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    return _conv_of_rank(1, x, weight, bias, stride, padding, dilation, groups)


@user_op
def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    return _conv_of_rank(2, x, weight, bias, stride, padding, dilation, groups)


@user_op
def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    return _conv_of_rank(3, x, weight, bias, stride, padding, dilation, groups)


@user_op
def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1):
    return _transposed_of_rank(1, x, weight, bias, stride, padding, output_padding, groups, dilation)


@user_op
def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1):
    return _transposed_of_rank(2, x, weight, bias, stride, padding, output_padding, groups, dilation)


@user_op
def conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1):
    return _transposed_of_rank(3, x, weight, bias, stride, padding, output_padding, groups, dilation)


def _transposed_of_rank(d: int, x, weight, bias, stride, padding, output_padding, groups, dilation):
    weight = lift(weight)
    if weight.ndim != d + 2:
        raise ShapeError(f"conv_transpose{d}d weight must be (C_in, C_out / groups, *{d} kernel axes), got {weight.label}")
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, f"conv_transpose{d}d")


def _conv_of_rank(d: int, x, weight, bias, stride, padding, dilation, groups) -> Tensor:
    """`conv` with the number of spatial axes fixed, so a weight of the wrong rank is an error."""
    who = f"conv{d}d"
    _require_ndim(lift(weight), d + 2, f"{who} weight")
    return conv(x, weight, bias, stride, padding, dilation, groups, who)


@user_op
@computed_in_float32
def normalize(x, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    """torch.nn.functional.normalize: x / max(||x||_p, eps) along `dim`."""
    x = lift(x)
    if not isinstance(p, numbers.Real) or p <= 0:
        raise ShapeError(f"normalize of {x.label}: p must be a positive number, got {p!r}")
    magnitude = x.abs()
    norm = (magnitude * magnitude).sum(dim, keepdims=True).sqrt() if p == 2 else \
        magnitude.sum(dim, keepdims=True) if p == 1 else (magnitude ** float(p)).sum(dim, keepdims=True) ** (1.0 / p)
    return x / norm.maximum(eps)


@user_op
def softmin(x, dim: int = -1):
    return lift(x).softmin(dim)


def _interpolation_matrix(n_in: int, n_out: int, mode: str, align_corners: bool, scale):
    """(n_out, n_in) weights from Iota: row i holds the source weights of output i (PyTorch's rules)."""
    i, j = iota((n_out, n_in), 0), iota((n_out, n_in), 1)
    ratio = (n_in - 1) / (n_out - 1) if align_corners and n_out > 1 else (0.0 if align_corners else (1.0 / scale))
    if mode == "nearest":
        return j.eq((i * ratio).floor().minimum(float(n_in - 1)))
    source = i * ratio if align_corners else ((i + 0.5) * ratio - 0.5).maximum(0.0)
    low = source.floor().minimum(float(n_in - 1))
    weight = source - low
    return where(j.eq(low), 1.0 - weight, 0.0) + where(j.eq((low + 1.0).minimum(float(n_in - 1))), weight, 0.0)


@user_op
def interpolate(x, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """torch.nn.functional.interpolate over the spatial axes (all but the first two) for modes
    nearest, linear, bilinear and trilinear: per axis a contraction with an (out, in) weight matrix
    built from Iota, so the search sees a matmul. Spatial sizes must be known."""
    x = lift(x)
    d = x.ndim - 2
    if d < 1 or mode not in ("nearest", "linear", "bilinear", "trilinear"):
        raise ShapeError(f"interpolate of {x.label}: needs (N, C, *spatial) and mode nearest/linear/bilinear/trilinear, "
                         f"got {x.ndim} axes and {mode!r}")
    if (size is None) == (scale_factor is None):
        raise ShapeError(f"interpolate of {x.label}: give exactly one of size and scale_factor")
    if mode == "nearest" and align_corners:
        raise ShapeError(f"interpolate of {x.label}: align_corners applies to the linear modes only")
    spatial = x.shape[2:]
    if not all(isinstance(n, int) for n in spatial):
        raise ShapeError(f"interpolate of {x.label}: spatial sizes must be known, got {spatial}")
    scales = (scale_factor,) * d if isinstance(scale_factor, numbers.Real) else tuple(scale_factor or (None,) * d)
    sizes = (size,) * d if isinstance(size, numbers.Integral) else tuple(size or (None,) * d)
    if len(scales) != d or len(sizes) != d:
        raise ShapeError(f"interpolate of {x.label}: give one size or scale per spatial axis ({d}), got "
                         f"size={size!r}, scale_factor={scale_factor!r}")
    out = x
    for k, n_in in enumerate(spatial):
        n_out = int(sizes[k]) if sizes[k] is not None else int(math.floor(n_in * scales[k]))
        scale = float(scales[k]) if scales[k] is not None else n_out / n_in
        weights = _interpolation_matrix(n_in, n_out, mode, bool(align_corners), scale)
        axis = 2 + k
        moved = out.transpose(axis, -1) if axis != out.ndim - 1 else out
        moved = moved @ weights.T
        out = moved.transpose(axis, -1) if axis != out.ndim - 1 else moved
    return out


@user_op
def pad(x, pad, mode: str = "constant", value: float = 0.0):
    """torch.nn.functional.pad: `pad` pairs from the last axis backwards, (left, right, top, bottom,
    ...); a negative width crops; mode constant, reflect, replicate or circular (Tensor.pad)."""
    x = lift(x)
    pad = tuple(pad) if isinstance(pad, (tuple, list)) else (pad,)
    if len(pad) % 2 or len(pad) // 2 > x.ndim or not all(isinstance(w, numbers.Integral) for w in pad):
        raise ShapeError(f"pad of {x.label}: give ints in pairs, at most one pair per axis, got {pad}")
    widths = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        widths[x.ndim - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
    if any(b < 0 or a < 0 for b, a in widths):
        x = x[tuple(slice(max(0, -b) or None, -max(0, -a) or None) for b, a in widths)]
    return x.pad([(max(0, b), max(0, a)) for b, a in widths], value=value, mode=mode)


@user_op
def one_hot(ids, num_classes: int):
    """ids (int32) -> (..., num_classes) of 0.0/1.0: rows of the identity picked by the ids, so an id
    outside [0, num_classes) is refused at run time like any embedding id."""
    from .creation import eye
    return embedding(ids, eye(num_classes))


def _reduced(loss, reduction: str, who: str):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ShapeError(f"{who}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


@user_op
@computed_in_float32
def cross_entropy(logits, target, reduction: str = "mean"):
    """torch.nn.functional.cross_entropy over axis 1: target int32 class ids (N, ...) or class
    probabilities of the logits' shape."""
    logits, target = lift(logits), lift(target)
    log_p = logits.log_softmax(1)
    if target.dtype == "int32":
        picked = one_hot(target, logits.shape[1])  # (N, ..., C)
        picked = picked.permute(*([0, picked.ndim - 1] + list(range(1, picked.ndim - 1)))) if picked.ndim > 2 else picked
    else:
        picked = target
    return _reduced(-(picked * log_p).sum(1), reduction, "cross_entropy")


@user_op
@computed_in_float32
def binary_cross_entropy(probabilities, target, reduction: str = "mean"):
    """-(t log p + (1 - t) log(1 - p)), each log clamped at -100 as PyTorch does (p = 0 or 1 stays finite)."""
    p, t = lift(probabilities), lift(target)
    loss = -(t * p.log().maximum(-100.0) + (1.0 - t) * (1.0 - p).log().maximum(-100.0))
    return _reduced(loss, reduction, "binary_cross_entropy")


@user_op
def embedding(ids, table):
    """Rows of `table` (V, D) picked by int32 `ids` of any shape; the result is ids.shape + (D,)."""
    ids, table = lift(ids), lift(table)
    if ids.dtype != "int32":
        raise ShapeError(f"embedding ids must be an int32 input, got {ids.label} ({ids.dtype})")
    _require_ndim(table, 2, "embedding table")
    table._require_float("embedding")
    return Tensor.from_node(make_node("Gather", (table.edge, ids.edge)))


@user_op
@computed_in_float32
def scaled_dot_product_attention(q, k, v, causal: bool = False, mask=None, *, attn_mask=None, is_causal=None,
                                 scale=None, enable_gqa: bool = False):
    """softmax(q k^T * scale + mask) v over the last two axes (scale defaults to 1/sqrt(d)).

    `causal` (PyTorch's is_causal) lets query i see keys j <= i, top-left aligned: the other scores
    are selected to -inf, so their weights are exactly 0. `mask` (PyTorch's attn_mask) is a float
    tensor added to the scores (0 to attend, -inf or a large negative number to block); it
    broadcasts to (..., Tq, Tk). `enable_gqa`: k and v may have fewer heads (axis -3) than q, each
    shared by q's heads in groups (grouped-query attention), as in PyTorch.
    """
    q, k, v = lift(q), lift(k), lift(v)
    causal = causal if is_causal is None else is_causal
    mask = mask if attn_mask is None else attn_mask
    if enable_gqa and q.ndim >= 3 and not dims_equal(q.shape[-3], k.shape[-3]):
        heads, groups = q.shape[-3], k.shape[-3]
        if not (isinstance(heads, int) and isinstance(groups, int) and heads % groups == 0):
            raise ShapeError(f"scaled_dot_product_attention: {heads} query heads cannot share {groups} key/value heads")
        k, v = k.repeat_interleave(heads // groups, -3), v.repeat_interleave(heads // groups, -3)
    d = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d) if isinstance(d, int) else constant(d).rsqrt()
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        tq, tk = scores.shape[-2:]
        blocked = iota((tq, tk), 1) > iota((tq, tk), 0)
        scores = where(blocked, -math.inf, scores)
    if mask is not None:
        scores = scores + mask
    return scores.softmax(-1) @ v


__all__ = ["linear", "layer_norm", "rms_norm", "windows", "conv", "conv1d", "conv2d", "conv3d",
           "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_unpool1d", "max_unpool2d",
           "max_unpool3d",
           "normalize", "softmin", "embedding", "one_hot", "cross_entropy", "binary_cross_entropy", "interpolate", "pad", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "scaled_dot_product_attention", "celu", "elu", "hardsigmoid", "hardswish",
           "hardtanh", "leaky_relu", "logsigmoid", "mish", "relu6", "selu", "softplus", "softsign"]
