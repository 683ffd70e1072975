"""Joining tensors: concat (torch.cat), cat and stack. Like the movement ops they store nothing new:
each part is padded to the joined length and the parts are added, so a join is views and adds."""
from __future__ import annotations

from ..errors import ShapeError
from ..symbolic.dims import dim as make_dim  # where a parameter is PyTorch's dim=
from ..symbolic.dims import dims_equal
from .core import keep_bool, lift
from .provenance import user_op


def _sequence(tensors, what: str) -> list:
    if isinstance(tensors, (str, bytes)) or not hasattr(tensors, "__iter__"):
        raise ShapeError(f"{what} takes a list of tensors, got {type(tensors).__name__}")
    return list(tensors)


@user_op
def concat(tensors, dim: int = 0, *, axis=None):
    """torch.cat (also rc.cat; NumPy's axis= too): join along an existing axis, each part padded to the
    full length and the parts added."""
    tensors = [lift(t) for t in _sequence(tensors, "concat")]
    if not tensors:
        raise ShapeError("concat needs at least one tensor")
    axis = tensors[0]._axis(_dim_or_axis(dim, axis, "concat"))
    for t in tensors[1:]:
        if t.ndim != tensors[0].ndim or any(
            not dims_equal(a, b) for i, (a, b) in enumerate(zip(t.shape, tensors[0].shape)) if i != axis
        ):
            raise ShapeError(
                f"concat along axis {axis}: {t.label} does not match {tensors[0].label} off that axis"
            )
    total = make_dim(sum(t.shape[axis] for t in tensors))
    out, before = None, 0
    for t in tensors:
        widths = [(0, 0)] * t.ndim
        widths[axis] = (before, make_dim(total - before - t.shape[axis]))
        part = t.pad(widths)
        out = part if out is None else out + part
        before = make_dim(before + t.shape[axis])
    return keep_bool(out, *tensors)


@user_op
def cat(tensors, dim: int = 0, *, axis=None):
    return concat(tensors, dim, axis=axis)


@user_op
def stack(tensors, dim: int = 0, *, axis=None):
    tensors = [lift(t) for t in _sequence(tensors, "stack")]
    if not tensors:
        raise ShapeError("stack needs at least one tensor")
    axis = tensors[0]._axis(_dim_or_axis(dim, axis, "stack"), tensors[0].ndim + 1)
    return concat([t.unsqueeze(axis) for t in tensors], axis)


def _dim_or_axis(dim, axis, who: str):
    if axis is not None and dim != 0:
        raise ShapeError(f"{who}: give dim= or axis=, not both")
    return dim if axis is None else axis
