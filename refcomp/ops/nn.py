"""`rc.nn`: the neural-network layers, with PyTorch's signatures, built from Tensor methods.

Convolution (`conv`, any number of spatial axes; `conv1d`/`conv2d`/`conv3d` fix it) and pooling read
their input through one strided *window view* (N, C, *out, *kernel) of the padded input (`windows`,
also what the ONNX importer's pools read), so the im2col matrix is never stored; the reduction over
the window is an ordinary SumReduce / MaxReduce. A convolution sums over (channel, *kernel) merged
into one axis, so it is one contraction that the search can tile as a matmul (an implicit GEMM).
"""
from __future__ import annotations

import numbers

from ..errors import ShapeError, UnsupportedError
from .dtypes import DTYPES
from ..symbolic.dims import dim, dims_equal, prod
from .activations import (
    celu,
    elu,
    gelu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    mish,
    relu,
    relu6,
    selu,
    silu,
    softmax,
    softmin,
    softplus,
    softsign,
    glu,
    sigmoid,
    tanh,
)
from .attention import scaled_dot_product_attention
from .random_tensors import dropout
from .losses import (binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, huber_loss,
                     kl_div, l1_loss, mse_loss, one_hot, smooth_l1_loss)
from .normalization import batch_norm, group_norm, instance_norm, normalised
from .conv_transpose import conv_transpose as _conv_transpose
from .primitives import SHORT_REDUCE, make_node
from .provenance import user_op
from .tensor import Tensor, lift
from .core import computed_in_float32, widened
from .pooling import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, avg_pool1d, avg_pool2d,
                      avg_pool3d, max_pool1d, max_pool2d, max_pool3d, max_unpool1d, max_unpool2d,
                      max_unpool3d)
from .interpolation import interpolate
from .similarity import cosine_similarity, pairwise_distance
from .windows import window_pads, per_axis, require_ndim, windows


@user_op
def linear(x, weight, bias=None):
    """x @ weight.T + bias, with weight of shape (out_features, in_features) as in PyTorch."""
    weight = lift(weight)
    require_ndim(weight, 2, "linear weight")
    out = lift(x) @ weight.T
    return out if bias is None else out + bias


@user_op
@computed_in_float32
def layer_norm(input, normalized_shape=None, weight=None, bias=None, eps: float = 1e-5):
    """torch.nn.functional.layer_norm: normalise the last len(normalized_shape) axes (no normalized_shape:
    the last axis); weight and bias broadcast against them. refcomp's older form layer_norm(x, weight,
    bias, eps), a tensor or None second, still works (told apart by the second argument's type)."""
    x = lift(input)
    if isinstance(normalized_shape, Tensor):  # the older form: (x, weight, bias, eps)
        if bias is not None and not isinstance(bias, numbers.Real):
            raise ShapeError(
                f"layer_norm of {x.label}: normalized_shape must be an int or a tuple of dims, got a tensor"
            )
        normalized_shape, weight, bias, eps = None, normalized_shape, weight, eps if bias is None else bias
    axes = _normalized_axes(x, normalized_shape, "layer_norm")
    out = normalised(x, axes, eps)
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


FINFO_EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}  # torch.finfo(dtype).eps


@user_op
@computed_in_float32
def rms_norm(input, normalized_shape=None, weight=None, eps=None):
    """torch.nn.functional.rms_norm: x / sqrt(mean(x^2) + eps) over the last len(normalized_shape) axes,
    eps by default torch.finfo(dtype).eps. refcomp's older form rms_norm(x, weight, eps) (a tensor or None
    second, or no normalized_shape) keeps its default eps 1e-6 and normalises the last axis."""
    x = lift(input)
    older = normalized_shape is None or isinstance(normalized_shape, Tensor)
    if isinstance(normalized_shape, Tensor):  # the older form: (x, weight, eps)
        if weight is not None and not isinstance(weight, numbers.Real):
            raise ShapeError(
                f"rms_norm of {x.label}: normalized_shape must be an int or a tuple of dims, got a tensor"
            )
        normalized_shape, weight, eps = None, normalized_shape, eps if weight is None else weight
    if eps is None:
        eps = 1e-6 if older else FINFO_EPS[x.dtype]
    axes = _normalized_axes(x, normalized_shape, "rms_norm")
    out = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    return out if weight is None else out * weight


def _normalized_axes(x, normalized_shape, who: str) -> tuple:
    """The trailing axes `normalized_shape` names (an int for one axis, as PyTorch takes it); None: the
    last."""
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (normalized_shape,)
    if normalized_shape is not None and not isinstance(normalized_shape, (tuple, list)):
        raise ShapeError(
            f"{who} of {x.label}: normalized_shape must be an int or a tuple of dims, "
            f"got {normalized_shape!r}"
        )
    count = len(normalized_shape) if normalized_shape is not None else 1
    if not 1 <= count <= x.ndim or (
        normalized_shape is not None
        and not all(dims_equal(a, dim(b)) for a, b in zip(x.shape[-count:], normalized_shape))
    ):
        raise ShapeError(
            f"{who} of {x.label}: normalized_shape {normalized_shape} is not the trailing shape of {x.shape}"
        )
    return tuple(range(x.ndim - count, x.ndim))


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
        raise ShapeError(
            f"{who} weight must be (C_out, C_in / groups, *kernel) with a spatial axis, got {weight.label}"
        )
    d = weight.ndim - 2
    c_out, c_in_per_group = weight.shape[:2]
    kernel = tuple(weight.shape[2:])
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
        raise ShapeError(f"{who}: groups must be a positive int, got {groups!r}")
    require_ndim(x, d + 2, who)
    if not dims_equal(x.shape[1], dim(c_in_per_group * groups)):
        raise ShapeError(
            f"{who}: {x.label} has {x.shape[1]} channels but {weight.label} expects "
            f"{c_in_per_group} x {groups} groups"
        )
    if isinstance(c_out, int) and c_out % groups:
        raise ShapeError(
            f"{who}: {c_out} output channels of {weight.label} do not split into {groups} groups"
        )
    if isinstance(padding, str):
        padding = _named_padding(padding, kernel, stride, dilation, who)
    win = windows(
        x,
        kernel,
        per_axis(stride, d, f"{who} stride", 1),
        window_pads(padding, d, f"{who} padding"),
        per_axis(dilation, d, f"{who} dilation", 1),
        0.0,
        who,
    )
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


def _named_padding(padding: str, kernel: tuple, stride, dilation, who: str):
    """PyTorch's padding="valid" (none) and "same" (an output as long as the input, stride 1): the
    dilated kernel's extent less one, split with the odd element at the end, as PyTorch pads."""
    if padding == "valid":
        return 0
    if padding != "same":
        raise ShapeError(
            f"{who}: padding must be 'valid', 'same', ints or (begin, end) pairs, got {padding!r}"
        )
    d = len(kernel)
    if any(s != 1 for s in per_axis(stride, d, f"{who} stride", 1)):
        raise ShapeError(f"{who}: padding='same' needs stride 1, as in PyTorch")
    if not all(isinstance(k, int) for k in kernel):
        raise ShapeError(f"{who}: padding='same' needs the kernel's size, not {kernel}")
    totals = [step * (k - 1) for step, k in zip(per_axis(dilation, d, f"{who} dilation", 1), kernel)]
    return tuple((total // 2, total - total // 2) for total in totals)


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
def conv_transpose1d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1
):
    return _transposed_of_rank(1, x, weight, bias, stride, padding, output_padding, groups, dilation)


@user_op
def conv_transpose2d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1
):
    return _transposed_of_rank(2, x, weight, bias, stride, padding, output_padding, groups, dilation)


@user_op
def conv_transpose3d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1
):
    return _transposed_of_rank(3, x, weight, bias, stride, padding, output_padding, groups, dilation)


def _transposed_of_rank(d: int, x, weight, bias, stride, padding, output_padding, groups, dilation):
    weight = lift(weight)
    if weight.ndim != d + 2:
        raise ShapeError(
            f"conv_transpose{d}d weight must be (C_in, C_out / groups, *{d} kernel axes), got {weight.label}"
        )
    return _conv_transpose(
        x, weight, bias, stride, padding, output_padding, groups, dilation, f"conv_transpose{d}d"
    )


def _conv_of_rank(d: int, x, weight, bias, stride, padding, dilation, groups) -> Tensor:
    """`conv` with the number of spatial axes fixed, so a weight of the wrong rank is an error."""
    who = f"conv{d}d"
    require_ndim(lift(weight), d + 2, f"{who} weight")
    return conv(x, weight, bias, stride, padding, dilation, groups, who)


@user_op
@computed_in_float32
def normalize(x, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    """torch.nn.functional.normalize: x / max(||x||_p, eps) along `dim`."""
    x = lift(x)
    if not isinstance(p, numbers.Real) or p <= 0:
        raise ShapeError(f"normalize of {x.label}: p must be a positive number, got {p!r}")
    magnitude = x.abs()
    norm = (
        (magnitude * magnitude).sum(dim, keepdims=True).sqrt()
        if p == 2
        else magnitude.sum(dim, keepdims=True)
        if p == 1
        else (magnitude ** float(p)).sum(dim, keepdims=True) ** (1.0 / p)
    )
    return x / norm.maximum(eps)


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
def embedding(
    input,
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
):
    """Rows of `weight` (V, D) picked by int32 ids `input` of any shape; the result is ids.shape + (D,).
    padding_idx, scale_grad_by_freq and sparse concern gradients only; max_norm would rewrite the table."""
    ids, table = lift(input), lift(weight)
    if max_norm is not None:
        raise ShapeError(
            f"embedding of {table.label}: max_norm renormalises the table's rows in place, which "
            f"refcomp does not do; scale the table before the lookup"
        )
    if not DTYPES[ids.dtype].is_int:
        raise ShapeError(f"embedding ids must be an integer tensor, got {ids.label} ({ids.dtype})")
    require_ndim(table, 2, "embedding table")
    return Tensor.from_node(make_node("Gather", (table.edge, ids.edge)))


__all__ = [
    "linear",
    "layer_norm",
    "rms_norm",
    "windows",
    "conv",
    "conv1d",
    "conv2d",
    "conv3d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "max_unpool1d",
    "max_unpool2d",
    "max_unpool3d",
    "normalize",
    "softmin",
    "embedding",
    "one_hot",
    "cross_entropy",
    "binary_cross_entropy",
    "interpolate",
    "pad",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "scaled_dot_product_attention",
    "celu",
    "elu",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "leaky_relu",
    "logsigmoid",
    "mish",
    "relu6",
    "selu",
    "softplus",
    "softsign",
    "gelu",
    "relu",
    "silu",
    "softmax",
    "log_softmax",
    "dropout",
    "batch_norm",
    "group_norm",
    "instance_norm",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "cosine_similarity",
    "pairwise_distance",
    "glu",
    "sigmoid",
    "tanh",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy_with_logits",
    "kl_div",
]


def __getattr__(name: str):
    """A name rc.nn lacks (torch.nn.functional has many more): an UnsupportedError that says so."""
    if name.startswith("_"):
        raise AttributeError(name)
    raise UnsupportedError(f"rc.nn has no {name!r} (docs/api.md lists the torch.nn.functional names it has)")
