"""torch.nn.functional.interpolate: per spatial axis a contraction with an (out, in) weight matrix
built from Iota under PyTorch's rules (nearest, and the linear modes with or without
align_corners), so the search sees a matmul."""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from .core import iota, lift
from .elementwise import where
from .provenance import user_op


def _interpolation_matrix(n_in: int, n_out: int, mode: str, align_corners: bool, scale):
    """(n_out, n_in) weights from Iota: row i holds the source weights of output i (PyTorch's rules)."""
    i, j = iota((n_out, n_in), 0), iota((n_out, n_in), 1)
    ratio = (
        (n_in - 1) / (n_out - 1) if align_corners and n_out > 1 else (0.0 if align_corners else (1.0 / scale))
    )
    if mode == "nearest":
        return j.eq((i * ratio).floor().minimum(float(n_in - 1)))
    source = i * ratio if align_corners else ((i + 0.5) * ratio - 0.5).maximum(0.0)
    low = source.floor().minimum(float(n_in - 1))
    weight = source - low
    return where(j.eq(low), 1.0 - weight, 0.0) + where(
        j.eq((low + 1.0).minimum(float(n_in - 1))), weight, 0.0
    )


@user_op
def interpolate(x, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """torch.nn.functional.interpolate over the spatial axes (all but the first two) for modes
    nearest, linear, bilinear and trilinear: per axis a contraction with an (out, in) weight matrix
    built from Iota, so the search sees a matmul. Spatial sizes must be known."""
    x = lift(x)
    d = x.ndim - 2
    if d < 1 or mode not in ("nearest", "linear", "bilinear", "trilinear"):
        raise ShapeError(
            f"interpolate of {x.label}: needs (N, C, *spatial) and mode nearest/linear/bilinear/trilinear, "
            f"got {x.ndim} axes and {mode!r}"
        )
    if (size is None) == (scale_factor is None):
        raise ShapeError(f"interpolate of {x.label}: give exactly one of size and scale_factor")
    if mode == "nearest" and align_corners:
        raise ShapeError(f"interpolate of {x.label}: align_corners applies to the linear modes only")
    spatial = x.shape[2:]
    if not all(isinstance(n, int) for n in spatial):
        raise ShapeError(f"interpolate of {x.label}: spatial sizes must be known, got {spatial}")
    scales = (
        (scale_factor,) * d if isinstance(scale_factor, numbers.Real) else tuple(scale_factor or (None,) * d)
    )
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
