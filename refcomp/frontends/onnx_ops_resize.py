"""ONNX Resize (and Upsample's successor semantics) with modes nearest and linear, axis by axis.

With static scales or sizes and a known input shape, every output coordinate's source position is
computed at import by the coordinate transformation ONNX names (half_pixel, pytorch_half_pixel,
align_corners, asymmetric); nearest picks one source index per output index (a Gather along the
axis with static ids), linear blends the two neighbours with static weights. Linear resizing is
separable, so the axes are done one after another.
"""
from __future__ import annotations

import numpy as np

from ..ops.nn import embedding
from .onnx_ops_core import FLOAT, Value, op, static_value

TRANSFORMS = {
    "half_pixel": lambda x, scale, n_in, n_out: (x + 0.5) / scale - 0.5,
    "pytorch_half_pixel": lambda x, scale, n_in, n_out: (
        (x + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(x)
    ),
    "align_corners": lambda x, scale, n_in, n_out: (
        x * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(x)
    ),
    "asymmetric": lambda x, scale, n_in, n_out: x / scale,
    "half_pixel_symmetric": lambda x, scale, n_in, n_out: (
        (n_in / 2) * (1 - np.floor(n_out) / (scale * n_in)) + (x + 0.5) / scale - 0.5
    ),
}
NEAREST = {
    "round_prefer_floor": lambda x: np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x)),
    "round_prefer_ceil": lambda x: np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x)),
    "floor": np.floor,
    "ceil": np.ceil,
}
ATTRS = ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
         "extrapolation_value", "antialias", "axes", "keep_aspect_ratio_policy")


def _pick(ctx, x, axis: int, ids: np.ndarray):
    """x's entries at the static indices `ids` along `axis`."""
    n = x.shape[axis]
    rest = tuple(s for i, s in enumerate(x.shape) if i != axis)
    table = x.permute([axis] + [i for i in range(x.ndim) if i != axis]) if axis else x
    rows = table.reshape((n, int(np.prod(rest, dtype=np.int64))))
    ids_t = ctx.importer.ids_tensor(static_value(ids.astype(np.int64)), n, ctx)
    picked = embedding(ids_t, rows).reshape((len(ids),) + rest)
    order = list(range(1, axis + 1)) + [0] + list(range(axis + 1, x.ndim))
    return picked.permute(order) if axis else picked


@op("Resize", attrs=ATTRS)
def resize(ctx):
    x = ctx.tensor(0)
    mode = _text(ctx.attr("mode", "nearest"))
    transform = _text(ctx.attr("coordinate_transformation_mode", "half_pixel"))
    nearest = _text(ctx.attr("nearest_mode", "round_prefer_floor"))
    if mode not in ("nearest", "linear"):
        raise ctx.attr_error("mode", mode, "refcomp resizes with 'nearest' or 'linear'")
    if transform not in TRANSFORMS:
        raise ctx.attr_error("coordinate_transformation_mode", transform, f"use one of {sorted(TRANSFORMS)}")
    if nearest not in NEAREST:
        raise ctx.attr_error("nearest_mode", nearest, f"use one of {sorted(NEAREST)}")
    if ctx.int_attr("antialias", 0) or _text(ctx.attr("keep_aspect_ratio_policy", "stretch")) != "stretch":
        raise ctx.error("antialias and keep_aspect_ratio_policy other than 'stretch' are not supported")
    if not all(isinstance(n, int) for n in x.shape):
        raise ctx.error(f"needs an input of known shape, got {x.shape}")
    axes = ctx.ints_attr("axes") or list(range(x.ndim))
    axes = [ctx.axis(a, x.ndim) for a in axes]
    scales = (
        np.asarray(ctx.static(2, "scales (input 2)"), np.float64)
        if ctx.has(2) and ctx.static(2).size
        else None
    )
    sizes = ctx.static(3, "sizes (input 3)").astype(np.int64) if ctx.has(3) else None
    if (scales is None) == (sizes is None):
        raise ctx.error("exactly one of scales (input 2) and sizes (input 3) must be given")
    for k, axis in enumerate(axes):
        n_in = x.shape[axis]
        n_out = int(sizes[k]) if sizes is not None else int(np.floor(n_in * scales[k]))
        scale = float(n_out / n_in) if sizes is not None else float(scales[k])
        if n_out == n_in and scale == 1.0:
            continue
        resized = n_in * scale if sizes is None else n_out  # ONNX's length_resized: not rounded when scaled
        source = TRANSFORMS[transform](np.arange(n_out, dtype=np.float64), scale, n_in, resized)
        if mode == "nearest":
            x = _pick(ctx, x, axis, np.clip(NEAREST[nearest](source), 0, n_in - 1))
            continue
        source = np.clip(source, 0, n_in - 1)
        low = np.floor(source).astype(np.int64)
        high = np.minimum(low + 1, n_in - 1)
        weight = (source - low).astype(np.float32)
        shape = [1] * x.ndim
        shape[axis] = n_out
        w = _column(ctx, weight, shape)
        x = _pick(ctx, x, axis, low) * (1.0 - w) + _pick(ctx, x, axis, high) * w
    return Value(FLOAT, tensor=x)


def _column(ctx, values: np.ndarray, shape):
    return ctx.importer.materialize(static_value(values.reshape(shape)))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value
