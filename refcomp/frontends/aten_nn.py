"""ATen's contractions, convolutions, pools and normalisations, as refcomp's rc.nn calls.

The normalisations return ATen's tuples: `native_layer_norm` gives (out, mean, rstd); a model
reads only `out`, and the statistics, built beside it, are dead code the compile drops.
"""
from __future__ import annotations

import math


from ..ops import nn
from ..ops.core import iota
from ..ops.creation import full
from ..ops.elementwise import where
from ..ops.joining import cat
from ..ops.functions import bmm as rc_bmm, mm as rc_mm
from ..ops.pooling import adaptive_avg_pool as nn_adaptive_avg_pool, avg_pool, max_pool
from ..symbolic.dims import prod
from .aten_values import Unavailable


def _pairs(values, d: int, default) -> tuple:
    """An int or a list for d spatial axes (ATen's empty list: `default`)."""
    values = default if values is None or (isinstance(values, (list, tuple)) and not values) else values
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    return tuple(values * d if len(values) == 1 else values)


# --- embedding bags ----------------------------------------------------------------------------------
def embedding_bag(ctx, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Bags of rows, summed (mode 0), averaged (1) or maxed (2): row i of `indices` falls in bag b when
    offsets[b] <= i < offsets[b + 1]. A membership matrix (bags x rows, 0/1, padding_idx rows out)
    contracts the looked-up rows for sum and mean; max selects over it, and an empty bag is 0 in every
    mode, as PyTorch's. Of ATen's four results only the first is computed."""
    table, ids, starts = ctx.tensor(weight), ctx.tensor(indices), ctx.tensor(offsets)
    if ids.ndim != 1 or starts.ndim != 1:
        raise ctx.error("takes 1-D indices and offsets (nn.EmbeddingBag flattens a 2-D input itself)")
    rows = table.index_select(0, ids)  # (N, D)
    position = iota((ids.shape[0],), 0, "int64").unsqueeze(0)
    bags = starts.shape[0] - 1 if include_last_offset else starts.shape[0]
    ends = starts[1:] if include_last_offset else cat([starts[1:], full((1,), ids.shape[0], dtype="int64")])
    member = (position >= starts[:bags].unsqueeze(1)) * (position < ends.unsqueeze(1))  # (bags, N)
    if padding_idx is not None and padding_idx >= 0:
        member = member * ids.ne(padding_idx).unsqueeze(0)
    member = member.float()
    if per_sample_weights is not None:
        if mode != 0:
            raise ctx.error("per_sample_weights are only for mode 'sum' (as PyTorch)")
        rows = rows * ctx.tensor(per_sample_weights).unsqueeze(1)
    if mode == 2:
        picked = where(member.unsqueeze(2) > 0.5, rows.unsqueeze(0), -math.inf).amax(1)
        out = where(member.sum(1, keepdim=True) > 0.5, picked, 0.0)
    else:
        out = member @ rows
        if mode == 1:
            out = out / member.sum(1, keepdim=True).clamp(min=1.0)
    aux = Unavailable("embedding_bag's offset2bag, bag_size or max_indices")
    return out, aux, aux, aux


# --- contractions ------------------------------------------------------------------------------------
def addmm(ctx, bias, a, b, beta=1, alpha=1):
    """beta * bias + alpha * (a @ b)."""
    product = rc_mm(ctx.tensor(a), ctx.tensor(b))
    product = product * alpha if alpha != 1 else product
    bias = ctx.tensor(bias)
    return (bias * beta if beta != 1 else bias) + product if beta != 0 else product


def mm(ctx, a, b):
    return rc_mm(ctx.tensor(a), ctx.tensor(b))


def bmm(ctx, a, b):
    return rc_bmm(ctx.tensor(a), ctx.tensor(b))


def linear(ctx, x, weight, bias=None):
    """aten.linear, as a program exported without decompositions holds it."""
    return nn.linear(ctx.tensor(x), ctx.tensor(weight), _maybe(ctx, bias))


def attention(ctx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """aten.scaled_dot_product_attention, before decompositions: a boolean mask selects, a float one adds."""
    if dropout_p:
        raise ctx.error("dropout inside attention is not supported (export the model in eval mode)")
    return nn.scaled_dot_product_attention(
        ctx.tensor(q),
        ctx.tensor(k),
        ctx.tensor(v),
        _maybe(ctx, attn_mask),
        0.0,
        is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )


def convolution(ctx, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    x, weight = ctx.tensor(x), ctx.tensor(weight)
    bias = None if bias is None else ctx.tensor(bias)
    d = weight.ndim - 2
    stride, padding, dilation = _pairs(stride, d, [1]), _pairs(padding, d, [0]), _pairs(dilation, d, [1])
    if not transposed:
        return nn.conv(x, weight, bias, stride, padding, dilation, groups)
    transposed_of = {1: nn.conv_transpose1d, 2: nn.conv_transpose2d, 3: nn.conv_transpose3d}
    if d not in transposed_of:
        raise ctx.error(f"a transposed convolution over {d} spatial axes is not supported (1 to 3 are)")
    return transposed_of[d](
        x, weight, bias, stride, padding, _pairs(output_padding, d, [0]), groups, dilation
    )


# --- pools -------------------------------------------------------------------------------------------
def max_pool_with_indices(ctx, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """(values, indices): indices are positions in each flattened input plane, as PyTorch's."""
    x = ctx.tensor(x)
    d = x.ndim - 2
    kernel = _pairs(kernel_size, d, None)
    pads = [(p, p) for p in _pairs(padding, d, [0])]
    return max_pool(x, kernel, _pairs(stride, d, kernel), pads, _pairs(dilation, d, [1]), ceil_mode, True)


def max_pool_bound(ctx, x, *args, **kwargs):
    return (None, prod(x.shape[2:]))


def avg_pool_(ctx, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    x = ctx.tensor(x)
    d = x.ndim - 2
    kernel = _pairs(kernel_size, d, None)
    pads = [(p, p) for p in _pairs(padding, d, [0])]
    return avg_pool(
        x, kernel, _pairs(stride, d, kernel), pads, None, ceil_mode, count_include_pad, divisor_override
    )


def adaptive_avg_pool(ctx, x, output_size):
    return nn_adaptive_avg_pool(ctx.tensor(x), tuple(output_size))


def adaptive_max_pool(ctx, x, output_size):
    """(values, indices) where the output divides the input (each window a pool's): PyTorch's windows."""
    x = ctx.tensor(x)
    d = len(output_size)
    sizes = x.shape[-d:]
    if not all(isinstance(n, int) and n % m == 0 for n, m in zip(sizes, output_size)):
        raise ctx.error(
            f"adaptive max pooling of {sizes} to {tuple(output_size)} needs sizes the output divides"
        )
    kernel = tuple(n // m for n, m in zip(sizes, output_size))
    return max_pool(x, kernel, kernel, [(0, 0)] * d, (1,) * d, False, True)


def upsample(mode: str):
    def convert(ctx, x, output_size, *args):
        align_corners = args[0] if mode != "nearest" and args else None
        scales = args[-1] if args else None
        x = ctx.tensor(x)
        if output_size is not None:
            return nn.interpolate(x, size=tuple(output_size), mode=mode, align_corners=align_corners)
        return nn.interpolate(x, scale_factor=tuple(scales), mode=mode, align_corners=align_corners)
    convert.__name__ = f"upsample_{mode}"
    return convert


# --- softmax and normalisation ------------------------------------------------------------------------
def softmax(ctx, x, axis, half_to_float=False):
    x = ctx.tensor(x)
    return (x.float() if half_to_float else x).softmax(axis)


def log_softmax(ctx, x, axis, half_to_float=False):
    x = ctx.tensor(x)
    return (x.float() if half_to_float else x).log_softmax(axis)


def native_layer_norm(ctx, x, normalized_shape, weight, bias, eps):
    x = ctx.tensor(x)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    out = nn.layer_norm(x, tuple(normalized_shape), _maybe(ctx, weight), _maybe(ctx, bias), eps)
    mean = x.mean(axes, keepdim=True)
    rstd = (x.var(axes, correction=0, keepdim=True) + eps).rsqrt()
    return out, mean, rstd


def native_group_norm(ctx, x, weight, bias, n, c, hxw, groups, eps):
    """(out, mean, rstd): statistics per (sample, group) over its channels and positions."""
    x = ctx.tensor(x)
    grouped = x.reshape(x.shape[0], groups, -1)
    mean = grouped.mean(-1)
    rstd = (grouped.var(-1, correction=0) + eps).rsqrt()
    return nn.group_norm(x, groups, _maybe(ctx, weight), _maybe(ctx, bias), eps), mean, rstd


def batch_norm_inference(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
    """(x - mean) / sqrt(var + eps) * weight + bias per channel (axis 1), from the running statistics;
    ATen's two other results (the saved statistics) are empty in inference."""
    out = nn.batch_norm(ctx.tensor(x), ctx.tensor(running_mean), ctx.tensor(running_var), _maybe(ctx, weight),
                        _maybe(ctx, bias), eps=eps)
    return out, full((0,), 0.0), full((0,), 0.0)


def batch_norm_batch_statistics(ctx, x, weight, bias, training=True, momentum=0.1, eps=1e-5):
    """_native_batch_norm_legit.no_stats: each channel normalised by its own mean and (biased) variance over
    the batch and positions, as InstanceNorm needs in inference too; (out, mean, rstd), statistics (C,)."""
    x = ctx.tensor(x)
    axes = (0,) + tuple(range(2, x.ndim))
    out = nn.batch_norm(x, None, None, _maybe(ctx, weight), _maybe(ctx, bias), training=True, eps=eps)
    return out, x.mean(axes), (x.var(axes, correction=0) + eps).rsqrt()


def batch_norm_legit(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """_native_batch_norm_legit: the batch's statistics in training (the running ones' update is a
    mutation refcomp's outputs do not include), else the running ones."""
    if training:
        return batch_norm_batch_statistics(ctx, x, weight, bias, training, momentum, eps)
    return batch_norm_inference(ctx, x, weight, bias, running_mean, running_var, momentum, eps)


def native_batch_norm(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    if training:
        raise ctx.error("batch norm in training mode is not supported (call module.eval() before exporting)")
    return batch_norm_inference(ctx, x, weight, bias, running_mean, running_var, momentum, eps)


def native_dropout(ctx, x, p, train):
    """(x, a mask of ones) outside training or with p = 0."""
    if train and p > 0:
        raise ctx.error("dropout in training mode is not supported (call module.eval() before exporting)")
    x = ctx.tensor(x)
    return x, full(x.shape, 1.0).bool()


def _maybe(ctx, value):
    return None if value is None else ctx.tensor(value)
