"""Transposed convolution (PyTorch's conv_transpose1d/2d/3d, ONNX's ConvTranspose) as a convolution.

The input is stuffed with stride - 1 zeros between neighbours, padded by dilation * (kernel - 1)
on each side, and convolved with the kernel transposed (input and output channels swapped per
group) and flipped in space; the result is then cropped by the padding (or given output_padding
zeros at the end). Every step is a view or `nn.conv`, so nothing new reaches the backends.
"""
from __future__ import annotations

import numbers

from ..errors import ShapeError
from ..symbolic.dims import dim, dims_equal
from .core import lift
from .windows import window_pads, per_axis


def _stuff(x, axis: int, stride: int):
    """Insert stride - 1 zeros between neighbours along `axis`: length n becomes (n - 1) stride + 1."""
    if stride == 1:
        return x
    n = x.shape[axis]
    t = x.unsqueeze(axis + 1)
    widths = [(0, 0)] * t.ndim
    widths[axis + 1] = (0, stride - 1)
    t = t.pad(widths).reshape(x.shape[:axis] + (dim(n * stride),) + x.shape[axis + 1:])
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, dim(n * stride - (stride - 1)))
    return t[tuple(index)]


def _crop(x, axis: int, begin: int, end: int):
    """Remove `begin` / `end` elements from the ends of `axis` (negative amounts add zeros)."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (max(0, -begin), max(0, -end))
    if any(widths[axis]):
        x = x.pad(widths)
    index = [slice(None)] * x.ndim
    index[axis] = slice(max(0, begin), dim(x.shape[axis] - max(0, end)))
    return x[tuple(index)]


def conv_transpose(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1,
                   who: str = "conv_transpose"):
    """x (N, C_in, *spatial), weight (C_in, C_out / groups, *kernel). `padding` is an int, one per
    axis, or one (begin, end) pair per axis (ONNX's asymmetric pads); spatial sizes must be known."""
    x, weight = lift(x), lift(weight)
    d = weight.ndim - 2
    if d < 1 or x.ndim != d + 2:
        raise ShapeError(
            f"{who}: weight {weight.label} and input {x.label} must have the same number of spatial axes"
        )
    c_in, out_per_group = weight.shape[:2]
    kernel = tuple(weight.shape[2:])
    if not isinstance(groups, numbers.Integral) or groups < 1 or (isinstance(c_in, int) and c_in % groups):
        raise ShapeError(f"{who}: {c_in} input channels do not split into groups={groups!r}")
    if not dims_equal(x.shape[1], c_in):
        raise ShapeError(f"{who}: {x.label} has {x.shape[1]} channels but {weight.label} expects {c_in}")
    if not all(isinstance(n, int) for n in x.shape[2:] + kernel):
        raise ShapeError(f"{who}: spatial sizes must be known, got {x.shape[2:]} and kernel {kernel}")
    strides = per_axis(stride, d, f"{who} stride", 1)
    dilations = per_axis(dilation, d, f"{who} dilation", 1)
    extra = per_axis(output_padding, d, f"{who} output_padding")
    out = transposed(
        x, weight, strides, dilations, window_pads(padding, d, f"{who} padding"), extra, groups, who
    )
    return out if bias is None else out + lift(bias).reshape((1, out.shape[1]) + (1,) * d)


def transposed(x, weight, strides, dilations, pads, extra, groups: int, who: str):
    """The transposed convolution with `pads` (begin, end) per axis taken as they are (a negative
    one adds zeros, as ONNX's computed output_shape may ask) and `extra` zeros at each axis' end."""
    from .nn import conv  # nn imports this module to re-export it
    d = weight.ndim - 2
    kernel = tuple(weight.shape[2:])
    c_in, out_per_group = weight.shape[:2]
    per_group = dim(c_in // groups)
    flipped = weight.reshape((groups, per_group, out_per_group) + kernel).permute(
        [0, 2, 1] + list(range(3, 3 + d))).reshape((dim(groups * out_per_group), per_group) + kernel)
    flipped = flipped.flip(tuple(range(2, 2 + d)))
    z = x
    for i in range(d):
        z = _stuff(z, 2 + i, strides[i])
    edge = tuple((dilations[i] * (kernel[i] - 1),) * 2 for i in range(d))
    out = conv(z, flipped, None, 1, edge, dilations, groups, who)
    for i in range(d):  # crop the padding; output_padding adds zeros at the end
        out = _crop(out, 2 + i, pads[i][0], pads[i][1] - extra[i])
    return out
