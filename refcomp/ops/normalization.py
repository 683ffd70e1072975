"""torch.nn.functional's normalisations over channels: batch_norm, group_norm and instance_norm.

Inputs are (N, C, *spatial). Each is the mean and biased variance over some axes, then
(x - mean) / sqrt(var + eps), then a per-channel weight and bias: the same reductions as layer_norm,
so the search fuses them alike. Running statistics are read, never updated: a graph changes no tensor
in place, so `training=True` with running statistics (which PyTorch updates) is refused.
"""
from __future__ import annotations

import numbers

from ..errors import ShapeError
from .core import computed_in_float32, lift
from .provenance import user_op


def _channels(x, who: str):
    if x.ndim < 2:
        raise ShapeError(f"{who} of {x.label}: the input must be (N, C, ...), got {x.ndim} axes")
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)  # a per-channel tensor's broadcast shape


def normalised(x, axes: tuple, eps: float):
    """(x - mean) / sqrt(biased variance + eps) over `axes`: what layer_norm and these share."""
    centred = x - x.mean(axes, keepdim=True)
    return centred * ((centred * centred).mean(axes, keepdim=True) + eps).rsqrt()


def _affine(out, weight, bias, shape):
    if weight is not None:
        out = out * lift(weight).reshape(shape)
    return out if bias is None else out + lift(bias).reshape(shape)


@user_op
@computed_in_float32
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5):
    """Normalise each channel: by the running statistics (inference, PyTorch's default), or with
    `training=True` and no running statistics, by the batch's own (over N and the spatial axes)."""
    x = lift(input)
    shape = _channels(x, "batch_norm")
    if training:
        if running_mean is not None or running_var is not None:
            raise ShapeError(
                f"batch_norm of {x.label}: training=True updates running_mean and running_var in place, "
                f"which a graph cannot do; pass None for both to normalise by the batch's statistics"
            )
        return _affine(normalised(x, (0,) + tuple(range(2, x.ndim)), eps), weight, bias, shape)
    if running_mean is None or running_var is None:
        raise ShapeError(
            f"batch_norm of {x.label}: inference (training=False) needs running_mean and running_var"
        )
    mean, var = lift(running_mean).reshape(shape), lift(running_var).reshape(shape)
    return _affine((x - mean) * (var + eps).rsqrt(), weight, bias, shape)


@user_op
@computed_in_float32
def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalise each group of C / num_groups channels (with the spatial axes) of each sample."""
    x = lift(input)
    shape = _channels(x, "group_norm")
    channels = x.shape[1]
    if not isinstance(num_groups, numbers.Integral) or num_groups < 1 or (
            isinstance(channels, int) and channels % num_groups):
        raise ShapeError(
            f"group_norm of {x.label}: {channels} channels do not split into {num_groups!r} groups"
        )
    grouped = x.reshape((x.shape[0], num_groups, -1))
    return _affine(normalised(grouped, (2,), eps).reshape(x.shape), weight, bias, shape)


@user_op
@computed_in_float32
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5):
    """Normalise each channel of each sample over its spatial axes (the input's own statistics)."""
    x = lift(input)
    shape = _channels(x, "instance_norm")
    if not use_input_stats or running_mean is not None or running_var is not None:
        raise ShapeError(
            f"instance_norm of {x.label}: only the input's own statistics (use_input_stats=True, no running "
            f"statistics, which PyTorch would update in place)"
        )
    if x.ndim < 3:
        raise ShapeError(f"instance_norm of {x.label}: the input must have a spatial axis, (N, C, L, ...)")
    return _affine(normalised(x, tuple(range(2, x.ndim)), eps), weight, bias, shape)
