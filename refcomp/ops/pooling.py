"""Pooling with PyTorch's arguments: `max_pool{1,2,3}d` (dilation, ceil_mode, return_indices),
`avg_pool{1,2,3}d` (ceil_mode, count_include_pad, divisor_override) and `max_unpool{1,2,3}d`.

Each pool is a MaxReduce or SumReduce over the window view (ops.windows). The ONNX importer's
MaxPool and AveragePool call `max_pool` and `avg_pool` with ONNX's asymmetric pads. Indices, as
everywhere in refcomp, are float32 values holding integers (exact below 2^24).
"""
from __future__ import annotations

import math
from typing import Optional

from ..errors import ShapeError
from ..symbolic.dims import dim, prod
from .core import computed_in_float32, constant, iota, is_integer, lift
from .elementwise import where
from .provenance import user_op
from .windows import window_pads, per_axis, require_ndim, ceil_mode_extra, windows

# where a window's padding sits in the positions a max pool's indices are read from: past any real
# position, so the first maximum is always a real element
_PAD_POSITION = float(2 ** 24)


def pool_windows(x, kernel, stride, padding, dilation, pad_value: float, ceil_mode: bool, who: str):
    """The window view of x with ceil_mode's extra end cells (reading `pad_value`), and those counts."""
    extra = ceil_mode_extra(x, kernel, stride, dilation, padding, ceil_mode)
    padded = tuple((begin, end + e) for (begin, end), e in zip(padding, extra))
    return windows(x, kernel, stride, padded, dilation, pad_value, who), extra


@user_op
def max_pool(x, kernel, stride, padding, dilation, ceil_mode: bool = False, return_indices: bool = False,
             pad_value: float = -math.inf, who: str = "max_pool"):
    """The maximum of each window; with `return_indices`, also where it lies in its input plane
    (flattened spatial axes: PyTorch's indices). The first maximum in window order wins, a NaN counts
    as the maximum, as in PyTorch."""
    x = lift(x)
    d = len(kernel)
    win, _ = pool_windows(x, kernel, stride, padding, dilation, pad_value, ceil_mode, who)
    axes = tuple(range(2 + d, 2 + 2 * d))
    out = win.amax(axes)
    if not return_indices:
        return out
    spatial = tuple(x.shape[2:])
    plane = iota((prod(spatial),), 0).reshape((1, 1) + spatial)  # each input cell's flat position
    positions, _ = pool_windows(plane, kernel, stride, padding, dilation, _PAD_POSITION, ceil_mode, who)
    at_max = where(win.isnan(), 1.0, win.eq(out.reshape(tuple(out.shape) + (1,) * d)))
    return out, where(at_max, positions, _PAD_POSITION).amin(axes)  # window order is increasing position


@user_op
@computed_in_float32
def avg_pool(
    x,
    kernel,
    stride,
    padding,
    dilation=None,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Optional[int] = None,
    who: str = "avg_pool",
):
    """The mean of each window: over its cells inside the padded input (count_include_pad) or inside
    the input; cells that only ceil_mode adds never count. `divisor_override` replaces the count."""
    x = lift(x)
    d = len(kernel)
    dilation = dilation or (1,) * d
    win, extra = pool_windows(x, kernel, stride, padding, dilation, 0.0, ceil_mode, who)
    axes = tuple(range(2 + d, 2 + 2 * d))
    total = win.sum(axes)
    if divisor_override is not None:
        return total * (1.0 / divisor_override)
    if not any(extra) and (count_include_pad or not any(a or b for a, b in padding)):
        return total * (1.0 / prod(kernel))
    # count each window's cells with the same windows over a mask: ones where a cell counts, zeros around
    spatial = tuple(x.shape[2:])
    if count_include_pad:
        inside = tuple(dim(n + a + b) for n, (a, b) in zip(spatial, padding))
        around = [(0, e) for e in extra]
    else:
        inside, around = spatial, [(a, b + e) for (a, b), e in zip(padding, extra)]
    mask = constant(1.0).reshape((1,) * (d + 2)).broadcast_to((1, 1) + inside).pad([(0, 0), (0, 0)] + around)
    counts = windows(mask, kernel, stride, [(0, 0)] * d, dilation, 0.0, who).sum(axes)
    return total / counts


@user_op
def max_unpool(x, indices, kernel, stride, padding, output_size=None, who: str = "max_unpool"):
    """The inverse of a max pool: zeros of the pooled input's shape, each pooled value put back at its
    index (PyTorch's max_unpool). Indices are float32 positions (max_pool's) or int32 ids, which are
    refused at run time when they fall outside the output plane; a float index outside it makes its
    whole (n, c) plane NaN, where PyTorch raises."""
    x, indices = lift(x), lift(indices)
    if tuple(indices.shape) != tuple(x.shape):
        raise ShapeError(f"{who}: indices {indices.label} must have the shape of {x.label}")
    spatial = _unpooled_size(x, kernel, stride, padding, output_size, who)
    plane = prod(spatial)
    if not isinstance(plane, int):
        raise ShapeError(
            f"{who}: the output plane {spatial} must have a known size (a comparison per output cell)"
        )
    if is_integer(indices):  # read each id's position from a ramp: a lookup the runner range-checks
        from .nn import embedding
        indices = embedding(indices, iota((plane, 1), 0)).reshape(tuple(x.shape))
    n, c = x.shape[:2]
    count = prod(x.shape[2:])
    values, slots = x.reshape((n, c, 1, count)), indices.reshape((n, c, 1, count))
    hit = slots.eq(iota((1, 1, plane, 1), 2))  # (N, C, plane, count): which pooled values land where
    landed = where(hit, values, -math.inf).amax(
        -1
    )  # a cell two windows both picked gets the same value twice
    out = where(hit.amax(-1), landed, 0.0)
    outside = ((slots < 0.0).maximum(slots >= float(plane))).amax(
        -1
    )  # a lost value poisons its plane: never silent
    return where(outside, math.nan, out).reshape((n, c) + spatial)


def _unpooled_size(x, kernel, stride, padding, output_size, who: str) -> tuple:
    d = len(kernel)
    default = tuple(
        dim((n - 1) * s - a - b + k) for n, s, (a, b), k in zip(x.shape[2:], stride, padding, kernel)
    )
    if output_size is None:
        return default
    size = tuple(output_size)[-d:]
    if len(size) != d or not all(isinstance(v, int) and v > 0 for v in size):
        raise ShapeError(f"{who}: output_size must end in {d} positive ints, got {output_size!r}")
    for want, got, s in zip(default, size, stride):
        if isinstance(want, int) and not want - s < got < want + s:
            raise ShapeError(f"{who}: output_size {size} must lie within a stride of the default {default}")
    return size


# --- PyTorch's names ------------------------------------------------------------------------------
def _torch_pool_args(x, d: int, kernel_size, stride, padding, who: str):
    x = lift(x)
    require_ndim(x, d + 2, who)
    kernel = per_axis(kernel_size, d, f"{who} kernel_size", 1)
    stride = kernel if stride is None else per_axis(stride, d, f"{who} stride", 1)
    pads = window_pads(padding, d, f"{who} padding")
    if any(a != b or 2 * a > k for (a, b), k in zip(pads, kernel)):
        raise ShapeError(
            f"{who}: padding {tuple(a for a, _ in pads)} must be symmetric and at most half the kernel "
            f"{kernel}"
        )
    return x, kernel, stride, pads


def _max_pool_nd(d: int):
    def pool(
        x,
        kernel_size,
        stride=None,
        padding=0,
        dilation=1,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ):
        who = f"max_pool{d}d"
        x, kernel, stride, pads = _torch_pool_args(x, d, kernel_size, stride, padding, who)
        return max_pool(
            x,
            kernel,
            stride,
            pads,
            per_axis(dilation, d, f"{who} dilation", 1),
            ceil_mode,
            return_indices,
            who=who,
        )
    pool.__name__ = pool.__qualname__ = f"max_pool{d}d"
    pool.__doc__ = (
        f"torch.nn.functional.max_pool{d}d; indices are float32 positions in the flattened input plane."
    )
    return user_op(pool)


def _avg_pool_nd(d: int):
    def pool(x, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
             divisor_override: Optional[int] = None):
        who = f"avg_pool{d}d"
        x, kernel, stride, pads = _torch_pool_args(x, d, kernel_size, stride, padding, who)
        if divisor_override is not None and (not isinstance(divisor_override, int) or divisor_override <= 0):
            raise ShapeError(f"{who}: divisor_override must be a positive int, got {divisor_override!r}")
        return avg_pool(
            x, kernel, stride, pads, None, ceil_mode, count_include_pad, divisor_override, who=who
        )

    pool.__name__ = pool.__qualname__ = f"avg_pool{d}d"
    pool.__doc__ = f"torch.nn.functional.avg_pool{d}d."
    return user_op(pool)


def _max_unpool_nd(d: int):
    def unpool(x, indices, kernel_size, stride=None, padding=0, output_size=None):
        who = f"max_unpool{d}d"
        x, kernel, stride, pads = _torch_pool_args(x, d, kernel_size, stride, padding, who)
        return max_unpool(x, indices, kernel, stride, pads, output_size, who=who)
    unpool.__name__ = unpool.__qualname__ = f"max_unpool{d}d"
    unpool.__doc__ = (
        f"torch.nn.functional.max_unpool{d}d: indices from max_pool{d}d(return_indices=True), or int32 ids."
    )
    return user_op(unpool)


def adaptive_avg_pool(x, output_size: tuple, who: str = "adaptive_avg_pool"):
    """Each output position averages input positions [floor(o L / O), ceil((o + 1) L / O)) of each of
    the last len(output_size) axes (PyTorch's windows; None keeps an axis): a pool where each output
    size divides its input's, else per axis a sum under the windows' mask (so an inf stays in its own
    window) divided by each window's count. Sizes must be known."""
    x, d = lift(x), len(output_size)
    if x.ndim not in (d + 1, d + 2):
        raise ShapeError(f"{who} of {x.label}: the input must be (N, C, *{d} spatial) or (C, ...)")
    spatial, sizes = tuple(x.shape[-d:]), []
    for n, wanted in zip(spatial, output_size):
        wanted = n if wanted is None else wanted
        if not (isinstance(n, int) and isinstance(wanted, int)) or isinstance(wanted, bool) or wanted < 1:
            raise ShapeError(f"{who} of {x.label}: sizes must be known and positive, got {n} -> {wanted!r}")
        sizes.append(wanted)
    if all(n % m == 0 for n, m in zip(spatial, sizes)):
        kernel = tuple(n // m for n, m in zip(spatial, sizes))
        batched = x.reshape((1, -1) + spatial) if x.ndim != d + 2 else x  # (C, *spatial) as one sample
        pooled = avg_pool(batched, kernel, kernel, [(0, 0)] * d, who=who)
        return pooled.reshape(tuple(x.shape[:-d]) + tuple(sizes))
    out = x
    for k, (n, wanted) in enumerate(zip(spatial, sizes)):
        axis = x.ndim - d + k
        o, j = iota((wanted, n), 0), iota((wanted, n), 1)
        # floor(o n / O) <= j < ceil((o + 1) n / O), in products of integers (exact; no division)
        window = ((j + 1.0) * wanted > o * n) * (j * wanted < (o + 1.0) * n)
        rows = out.transpose(axis, -1).unsqueeze(-2)  # (..., 1, L) against the (O, L) windows
        out = (where(window, rows, 0.0).sum(-1) / window.sum(1)).transpose(axis, -1)
    return out


def _adaptive_avg_pool_nd(d: int):
    def pool(input, output_size):
        who = f"adaptive_avg_pool{d}d"
        single = isinstance(output_size, int) or output_size is None
        sizes = (output_size,) * d if single else tuple(output_size)
        if len(sizes) != d:
            raise ShapeError(f"{who}: give {d} output sizes, got {output_size!r}")
        return adaptive_avg_pool(input, sizes, who)

    pool.__name__ = pool.__qualname__ = f"adaptive_avg_pool{d}d"
    pool.__doc__ = f"torch.nn.functional.adaptive_avg_pool{d}d (see adaptive_avg_pool)."
    return user_op(computed_in_float32(pool))


max_pool1d, max_pool2d, max_pool3d = (_max_pool_nd(d) for d in (1, 2, 3))
avg_pool1d, avg_pool2d, avg_pool3d = (_avg_pool_nd(d) for d in (1, 2, 3))
max_unpool1d, max_unpool2d, max_unpool3d = (_max_unpool_nd(d) for d in (1, 2, 3))
adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d = (_adaptive_avg_pool_nd(d) for d in (1, 2, 3))
__all__ = [
    "max_pool",
    "avg_pool",
    "max_unpool",
    "pool_windows",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "max_unpool1d",
    "max_unpool2d",
    "max_unpool3d",
    "adaptive_avg_pool",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
]
