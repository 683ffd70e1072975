"""Kernel windows: the strided view every convolution and pool reads, and the spatial arguments
(kernel, stride, padding, dilation) PyTorch and ONNX give them, checked once.

`windows` is one view (N, C, *out, *kernel) of the padded input: output position o and kernel offset
k read the padded input at o * stride + k * dilation per spatial axis, so im2col is never stored.
"""
from __future__ import annotations

import numbers

from ..errors import ShapeError
from ..symbolic.dims import dim, idiv
from ..symbolic.view import contiguous_strides
from .provenance import user_op
from .tensor import Tensor, lift


def per_axis(value, d: int, what: str, least: int = 0) -> tuple[int, ...]:
    """An int (the same for every spatial axis) or one int per axis, each at least `least`."""
    values = (
        (value,) * d
        if isinstance(value, numbers.Integral)
        else tuple(value)
        if isinstance(value, (tuple, list))
        else ()
    )
    if len(values) != d or not all(isinstance(v, numbers.Integral) and v >= least for v in values):
        kind = "positive" if least else "non-negative"
        raise ShapeError(f"{what} must be a {kind} int or {d} of them, got {value!r}")
    return tuple(int(v) for v in values)


def window_pads(value, d: int, what: str) -> tuple[tuple[int, int], ...]:
    """Padding as (begin, end) per spatial axis: an int, one int per axis, or one pair per axis."""
    wrong = ShapeError(
        f"{what} must be a non-negative int, {d} of them or {d} (begin, end) pairs, got {value!r}"
    )
    if isinstance(value, numbers.Integral):
        return tuple((p, p) for p in per_axis(value, d, what))
    if not isinstance(value, (tuple, list)):
        raise wrong
    if all(isinstance(v, numbers.Integral) for v in value):
        return tuple((p, p) for p in per_axis(value, d, what))
    pairs = tuple(tuple(v) if isinstance(v, (tuple, list)) else (v,) for v in value)
    if len(pairs) != d or not all(
        len(p) == 2 and all(isinstance(v, numbers.Integral) and v >= 0 for v in p) for p in pairs
    ):
        raise wrong
    return tuple((int(a), int(b)) for a, b in pairs)


def require_ndim(x: Tensor, ndim: int, who: str) -> None:
    if x.ndim != ndim:
        raise ShapeError(f"{who} expects a {ndim}-D tensor, got {x.label}")


SPATIAL_NAMES = {1: ("length",), 2: ("height", "width"), 3: ("depth", "height", "width")}



@user_op
def windows(x, kernel, stride, padding, dilation, pad_value: float = 0.0, who: str = "windows") -> Tensor:
    """The (N, C, *out, *kernel) view of every kernel window over x (N, C, *spatial) padded by
    `padding` ((begin, end) per spatial axis, filled with `pad_value`).

    One strided view of the padded input: output position o and kernel offset k read the padded
    input at o * stride + k * dilation on each spatial axis, so no window is ever copied; an output
    axis has idiv(padded - extent, stride) + 1 positions, extent = dilation * (kernel - 1) + 1.
    """
    x = lift(x)
    d = len(kernel)
    require_ndim(x, d + 2, who)
    if (
        any(s < 1 for s in stride)
        or any(k < 1 for k in dilation)
        or any(isinstance(k, int) and k < 1 for k in kernel)
    ):
        raise ShapeError(f"{who}: kernel size, stride and dilation must be positive")
    spatial = x.shape[2:]
    padded_sizes = [dim(n + a + b) for n, (a, b) in zip(spatial, padding)]
    extents = [dim(dl * (k - 1) + 1) for k, dl in zip(kernel, dilation)]
    names = SPATIAL_NAMES.get(d, tuple(f"spatial axis {i}" for i in range(d)))
    for name, size, extent in zip(names, padded_sizes, extents):
        if isinstance(size, int) and isinstance(extent, int) and size < extent:
            raise ShapeError(
                f"{who}: padded input {name} {size} of {x.label} is smaller than the kernel's extent {extent}"
            )
    padded = (
        x.pad([(0, 0), (0, 0)] + list(padding), value=pad_value) if any(a or b for a, b in padding) else x
    )
    outs = tuple(
        dim(idiv(dim(size - extent), s) + 1) for size, extent, s in zip(padded_sizes, extents, stride)
    )
    row = contiguous_strides(padded.shape)
    view_strides = row[:2] + tuple(dim(r * s) for r, s in zip(row[2:], stride)) + \
        tuple(dim(r * dl) for r, dl in zip(row[2:], dilation))
    return padded.as_strided(tuple(x.shape[:2]) + outs + tuple(kernel), view_strides)


def ceil_mode_extra(x: Tensor, kernel, stride, dilation, padding, ceil_mode: bool) -> list[int]:
    """ceil_mode (PyTorch's and ONNX's): per spatial axis, how many cells past the padded input the last
    window reaches when the output count rounds up (0 without ceil_mode). A window that would start
    beyond the input and its begin pad is dropped, as both define it."""
    extra = []
    for i, (begin, end) in enumerate(padding):
        size, step = x.shape[2 + i], stride[i]
        extent = dilation[i] * (kernel[i] - 1) + 1
        if not ceil_mode or (
            step == 1 and not isinstance(size, int)
        ):  # stride 1: rounding up is rounding down
            extra.append(0)
            continue
        if not isinstance(size, int):
            raise ShapeError(f"ceil_mode with stride {step} needs concrete spatial sizes, not {size}")
        padded = size + begin + end
        if padded < extent:
            extra.append(0)  # windows() reports the window that does not fit
            continue
        n = -(-(padded - extent) // step) + 1
        if (n - 1) * step >= size + begin:
            n -= 1
        extra.append(max(0, (n - 1) * step + extent - padded))
    return extra
