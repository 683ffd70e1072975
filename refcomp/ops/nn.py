"""`rc.nn`: the neural-network layers, with PyTorch's signatures, built from Tensor methods.

Convolution and pooling read their input through one strided *window view* (N, C, Ho, Wo, kh, kw)
of the padded input, so the im2col matrix is never stored; the reduction over the window is an
ordinary SumReduce / MaxReduce.
"""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from ..symbolic.dims import dim, dims_equal, idiv
from .primitives import make_node
from .provenance import user_op
from .elementwise import where
from .tensor import Tensor, constant, iota, lift



def _pair(value, what: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, numbers.Integral) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, numbers.Integral) and v >= 0 for v in pair):
        raise ShapeError(f"{what} must be a non-negative int or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


def _require_ndim(x: Tensor, ndim: int, who: str) -> None:
    if x.ndim != ndim:
        raise ShapeError(f"{who} expects a {ndim}-D tensor, got {x.label}")


@user_op
def linear(x, weight, bias=None):
    """x @ weight.T + bias, with weight of shape (out_features, in_features) as in PyTorch."""
    weight = lift(weight)
    _require_ndim(weight, 2, "linear weight")
    out = lift(x) @ weight.T
    return out if bias is None else out + bias


@user_op
def layer_norm(x, weight=None, bias=None, eps: float = 1e-5):
    x = lift(x)
    centred = x - x.mean(-1, keepdims=True)
    out = centred * ((centred * centred).mean(-1, keepdims=True) + eps).rsqrt()
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


@user_op
def rms_norm(x, weight=None, eps: float = 1e-6):
    x = lift(x)
    out = x * ((x * x).mean(-1, keepdims=True) + eps).rsqrt()
    return out if weight is None else out * weight


def _windows(x: Tensor, kernel, stride, padding, dilation, pad_value: float, who: str) -> Tensor:
    """The (N, C, Ho, Wo, kh, kw) view of every kernel window over the padded input."""
    _require_ndim(x, 4, who)
    (kh, kw), (sh, sw) = kernel, stride
    (ph, pw), (dh, dw) = padding, dilation
    if sh == 0 or sw == 0 or kh == 0 or kw == 0 or dh == 0 or dw == 0:
        raise ShapeError(f"{who}: kernel size, stride and dilation must be positive")
    n, c, h, w = x.shape
    padded = x.pad([(0, 0), (0, 0), (ph, ph), (pw, pw)], value=pad_value) if ph or pw else x
    hp, wp = dim(h + 2 * ph), dim(w + 2 * pw)
    ho = dim(idiv(dim(hp - dh * (kh - 1) - 1), sh) + 1)
    wo = dim(idiv(dim(wp - dw * (kw - 1) - 1), sw) + 1)
    for name, size, extent in (("height", hp, dh * (kh - 1) + 1), ("width", wp, dw * (kw - 1) + 1)):
        if isinstance(size, int) and size < extent:
            raise ShapeError(f"{who}: padded input {name} {size} of {x.label} is smaller than the kernel's extent {extent}")
    strides = (dim(c * hp * wp), dim(hp * wp), dim(sh * wp), sw, dim(dh * wp), dw)
    return padded.as_strided((n, c, ho, wo, kh, kw), strides)


@user_op
def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    x, weight = lift(x), lift(weight)
    _require_ndim(weight, 4, "conv2d weight")
    c_out, c_in_per_group, kh, kw = weight.shape
    if not isinstance(groups, numbers.Integral) or groups < 1:
        raise ShapeError(f"conv2d: groups must be a positive int, got {groups!r}")
    _require_ndim(x, 4, "conv2d")
    if not dims_equal(x.shape[1], dim(c_in_per_group * groups)):
        raise ShapeError(f"conv2d: {x.label} has {x.shape[1]} channels but {weight.label} expects {c_in_per_group} x {groups} groups")
    if isinstance(c_out, int) and c_out % groups:
        raise ShapeError(f"conv2d: {c_out} output channels of {weight.label} do not split into {groups} groups")
    win = _windows(x, (kh, kw), _pair(stride, "conv2d stride"), _pair(padding, "conv2d padding"),
                   _pair(dilation, "conv2d dilation"), 0.0, "conv2d")
    n, _, ho, wo, _, _ = win.shape
    win = win.reshape(n, groups, c_in_per_group, ho, wo, kh, kw).unsqueeze(2)
    kernel = weight.reshape(1, groups, dim(c_out // groups), c_in_per_group, 1, 1, kh, kw)
    out = (win * kernel).sum((3, 6, 7)).reshape(n, c_out, ho, wo)
    return out if bias is None else out + lift(bias).reshape(1, c_out, 1, 1)


@user_op
def max_pool2d(x, kernel_size, stride=None, padding=0):
    kernel = _pair(kernel_size, "max_pool2d kernel_size")
    stride = kernel if stride is None else _pair(stride, "max_pool2d stride")
    pad = _pair(padding, "max_pool2d padding")
    if pad[0] > kernel[0] // 2 or pad[1] > kernel[1] // 2:
        raise ShapeError(f"max_pool2d: padding {pad} must be at most half the kernel {kernel}")
    return _windows(lift(x), kernel, stride, pad, (1, 1), -math.inf, "max_pool2d").max((-2, -1))


@user_op
def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Averages over the whole window, padding included (PyTorch's count_include_pad=True)."""
    kernel = _pair(kernel_size, "avg_pool2d kernel_size")
    stride = kernel if stride is None else _pair(stride, "avg_pool2d stride")
    pad = _pair(padding, "avg_pool2d padding")
    return _windows(lift(x), kernel, stride, pad, (1, 1), 0.0, "avg_pool2d").mean((-2, -1))


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
def scaled_dot_product_attention(q, k, v, causal: bool = False, mask=None):
    """softmax(q k^T / sqrt(d) + mask) v over the last two axes.

    `causal` lets query i see keys j <= i (PyTorch's is_causal, top-left aligned): the other scores
    are selected to -inf, so their weights are exactly 0. `mask` is a float tensor added to the
    scores (0 to attend, -inf or a large negative number to block), as PyTorch's float attn_mask;
    it broadcasts to (..., Tq, Tk).
    """
    q, k, v = lift(q), lift(k), lift(v)
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if isinstance(d, int) else constant(d).rsqrt()
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        tq, tk = scores.shape[-2:]
        blocked = iota((tq, tk), 1) > iota((tq, tk), 0)
        scores = where(blocked, -math.inf, scores)
    if mask is not None:
        scores = scores + mask
    return scores.softmax(-1) @ v
