"""ATen's view, concatenation, slicing and indexing ops, as refcomp views (and Gathers for fed ids).

Views never create nodes in refcomp; the `*_affine` rules give the same moves on positions
(aten_values), so a position tensor that is only moved, sliced or indexed stays symbolic. ATen's
index arguments follow PyTorch: negative dims and indices count from the end, slice ends past the
axis are clamped, an end of 2^63 - 1 means the axis' end.
"""
from __future__ import annotations

import numbers

from ..ops import nn
from ..ops.joining import cat as rc_cat
from ..symbolic.dims import dim
from .aten_values import IntValue, address_view, addresses, indexed, selected, sliced, squeezed, unsqueezed
from .onnx_positions import gather_elements

END = 2 ** 63 - 1  # ATen's "to the end" (INT64_MAX) as a slice end


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _sizes(size) -> tuple:
    """A view's size as dims, -1 kept (refcomp's reshape and expand resolve it, symbolic too)."""
    return tuple(n if isinstance(n, numbers.Integral) and n == -1 else dim(n) for n in size)


# --- views -------------------------------------------------------------------------------------------
def view(ctx, x, size):
    return ctx.tensor(x).reshape(_sizes(size))


def view_affine(ctx, x, size):
    return x.affine().reshaped(ctx.out_shape())


def expand(ctx, x, size, implicit=False):
    return ctx.tensor(x).expand(*_sizes(size))


def expand_affine(ctx, x, size, implicit=False):
    p = x.affine()
    lead = len(size) - len(p.shape)
    shape = tuple(p.shape[k - lead] if isinstance(n, int) and n == -1 else dim(n) for k, n in enumerate(size))
    return p.expanded(shape)


def permute(ctx, x, dims):
    return ctx.tensor(x).permute(*dims)


def permute_affine(ctx, x, dims):
    return x.affine().permuted([_axis(d, x.ndim) for d in dims])


def transpose(ctx, x, dim0, dim1):
    return ctx.tensor(x).transpose(dim0, dim1)


def transpose_affine(ctx, x, dim0, dim1):
    order = list(range(x.ndim))
    a, b = _axis(dim0, x.ndim), _axis(dim1, x.ndim)
    order[a], order[b] = order[b], order[a]
    return x.affine().permuted(order)


def t_(ctx, x):
    x = ctx.tensor(x)
    return x if x.ndim < 2 else x.transpose(0, 1)


def unsqueeze(ctx, x, axis):
    return ctx.tensor(x).unsqueeze(axis)


def unsqueeze_affine(ctx, x, axis):
    return unsqueezed(x.affine(), axis)


def squeeze(ctx, x, dims=None):
    """Axes of size 1 among `dims` (all by default) go; ATen keeps an axis of another size."""
    x = ctx.tensor(x)
    dims = range(x.ndim) if dims is None else [dims] if isinstance(dims, int) else dims
    drop = {_axis(d, x.ndim) for d in dims if x.ndim and isinstance(x.shape[_axis(d, x.ndim)], int)
            and x.shape[_axis(d, x.ndim)] == 1}
    return x.reshape(tuple(n for k, n in enumerate(x.shape) if k not in drop))


def squeeze_affine(ctx, x, dims=None):
    dims = range(x.ndim) if dims is None else [dims] if isinstance(dims, int) else dims
    return squeezed(x.affine(), list(dims))


# --- slices ------------------------------------------------------------------------------------------
def _slice_args(n, start, end, step):
    """start and count of ATen's slice (ends clamped to [0, n] where they are ints)."""
    start = 0 if start is None else start
    end = n if end is None or (isinstance(end, int) and end >= END) else end
    if isinstance(start, int) and start < 0:
        start = dim(n + start) if not isinstance(n, int) else max(n + start, 0)
    if isinstance(end, int) and end < 0:
        end = dim(n + end) if not isinstance(n, int) else max(n + end, 0)
    if isinstance(n, int) and isinstance(start, int) and isinstance(end, int):
        start, end = min(start, n), max(min(end, n), min(start, n))
    return start, end


def slice_(ctx, x, axis=0, start=None, end=None, step=1):
    x = ctx.tensor(x)
    axis = _axis(axis, x.ndim)
    start, end = _slice_args(x.shape[axis], start, end, step)
    return x[(slice(None),) * axis + (slice(start, end, step),)]


def slice_affine(ctx, x, axis=0, start=None, end=None, step=1):
    axis = _axis(axis, x.ndim)
    start, end = _slice_args(x.shape[axis], start, end, step)
    count = ctx.out_shape()[axis]
    return sliced(x.affine(), axis, start, count, step)


def select(ctx, x, axis, index):
    """x[..., index, ...]; a symbolic index (a SymInt, as T - 1) is a slice of one, dropped."""
    x = ctx.tensor(x)
    axis = _axis(axis, x.ndim)
    if isinstance(index, numbers.Integral):
        return x[(slice(None),) * axis + (int(index),)]
    one = x[(slice(None),) * axis + (slice(index, dim(index + 1)),)]
    return one.reshape(tuple(n for k, n in enumerate(one.shape) if k != axis))


def select_affine(ctx, x, axis, index):
    axis = _axis(axis, x.ndim)
    n = x.shape[axis]
    return selected(x.affine(), axis, dim(n + index) if isinstance(index, int) and index < 0 else index)


def split_with_sizes(ctx, x, sizes, axis=0):
    x = ctx.tensor(x)
    axis, out, start = _axis(axis, x.ndim), [], 0
    for size in sizes:
        out.append(x[(slice(None),) * axis + (slice(start, dim(start + size)),)])
        start = dim(start + size)
    return tuple(out)


def split(ctx, x, size, axis=0):
    """split.Tensor: pieces of `size` along the axis, the last one shorter (a known length)."""
    x = ctx.tensor(x)
    n = x.shape[_axis(axis, x.ndim)]
    if not isinstance(n, int):
        raise ctx.error(f"split into pieces of {size} needs a known length along the axis, not {n}")
    return split_with_sizes(ctx, x, [min(size, n - k) for k in range(0, n, size)] or [0], axis)


def unbind(ctx, x, axis=0):
    x = ctx.tensor(x)
    n = x.shape[_axis(axis, x.ndim)]
    if not isinstance(n, int):
        raise ctx.error(f"unbind needs a known length along the axis, not {n}")
    return tuple(select(ctx, x, axis, k) for k in range(n))


def cat(ctx, tensors, axis=0):
    tensors = [ctx.tensor(x) for x in tensors]
    kept = [x for x in tensors if not (x.ndim == 1 and x.shape[0] == 0)] or tensors[
        :1
    ]  # ATen skips legacy empty (0,)
    return rc_cat(kept, _axis(axis, kept[0].ndim))


def slice_scatter(ctx, x, src, axis=0, start=None, end=None, step=1):
    """x with x[start:end] along the axis replaced by src (an in-place slice write, functionalized):
    the pieces before and after, concatenated around src."""
    x, src = ctx.tensor(x), ctx.tensor(src)
    axis = _axis(axis, x.ndim)
    start, end = _slice_args(x.shape[axis], start, end, step)
    if step != 1:
        raise ctx.error(f"a slice write with step {step} is not supported (step 1 is)")
    before = x[(slice(None),) * axis + (slice(0, start),)]
    after = x[(slice(None),) * axis + (slice(end, None),)]
    return rc_cat([before, src.to(x.dtype), after], axis)


def select_scatter(ctx, x, src, axis, index):
    """x with x[index] along the axis replaced by src (one more axis than src)."""
    x = ctx.tensor(x)
    axis = _axis(axis, x.ndim)
    index = dim(x.shape[axis] + index) if isinstance(index, int) and index < 0 else index
    return slice_scatter(ctx, x, ctx.tensor(src).unsqueeze(axis), axis, index, dim(index + 1))


def diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    return ctx.tensor(x).diagonal(offset, dim1, dim2)


def flip(ctx, x, dims):
    return ctx.tensor(x).flip(tuple(dims))


def repeat(ctx, x, repeats):
    return ctx.tensor(x).repeat(*repeats)


def constant_pad_nd(ctx, x, pad, value=0.0):
    return nn.pad(ctx.tensor(x), tuple(pad), "constant", float(value))


def pad_mode(mode: str):
    def convert(ctx, x, padding):
        return nn.pad(ctx.tensor(x), tuple(padding), mode)
    convert.__name__ = f"{mode}_pad"
    return convert


# --- indexing ----------------------------------------------------------------------------------------
def index(ctx, x, indices):
    return ctx.index(ctx.tensor(x), list(indices))


def index_affine(ctx, x, indices):
    if any(ix is not None and not isinstance(ix, IntValue) for ix in indices):
        return None
    indices = ctx.wrapped(indices, x.shape)
    if any(ix is not None and ix.affine() is None for ix in indices):
        return None
    return indexed(x.affine(), [None if ix is None else ix.affine() for ix in indices])


def index_select(ctx, x, axis, ids):
    x = ctx.tensor(x)
    axis = _axis(axis, x.ndim)
    return ctx.index(x, [None] * axis + [ids])


def index_put(ctx, x, indices, values, accumulate=False):
    """x with x[indices] = values, for one index tensor (the others None): index_copy along its axis,
    values broadcast to the indexed shape. The ids must be distinct (checked at run time: PyTorch's
    result for a repeated id is undefined); accumulate=True (a scatter-add) is refused."""
    x = ctx.tensor(x)
    if accumulate:
        raise ctx.error("index_put with accumulate=True (a scatter-add) is not supported")
    picked = [(a, ix) for a, ix in enumerate(indices) if ix is not None]
    if len(picked) != 1:
        raise ctx.error(f"index_put by {len(picked)} index tensors is not supported (one is: index_copy)")
    axis, ix = picked[0]
    ids = ctx.importer.ids_tensor(ix, x.shape[axis], ctx)
    if ids is None or ids.ndim > 1:
        raise ctx.error("index_put supports one 1-D index tensor of fed or static ids")
    want = x.shape[:axis] + (ids.shape[0] if ids.ndim else 1,) + x.shape[axis + 1:]
    values = ctx.tensor(values)
    values = values.to(x.dtype) if values.dtype != x.dtype else values
    return x.index_copy(axis, ids, values.broadcast_to(want))


def gather(ctx, x, axis, ids, sparse_grad=False):
    """out[i][j] = x[ids[i][j]][j] along `axis` (axis 0 shown): by positions a strided view, else
    refcomp's gather of int32 ids."""
    x = ctx.tensor(x)
    axis = _axis(axis, x.ndim)
    if isinstance(ids, IntValue) and ids.affine() is not None:
        return address_view(x, gather_elements(addresses(x.shape), axis, ids.affine()))
    picked = ctx.importer.ids_tensor(ids, x.shape[axis], ctx)
    if picked is None:
        raise ctx.error(
            "gather by indices computed at run time is not supported (positions, fed or static ids are)"
        )
    return x.gather(axis, picked)


def gather_affine(ctx, x, axis, ids, sparse_grad=False):
    return gather_elements(x.affine(), _axis(axis, x.ndim), ids.affine())


def embedding(ctx, weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """weight's rows by ids: padding_idx and the rest concern gradients only."""
    return ctx.index(ctx.tensor(weight), [ids])


def sym_size(ctx, x, axis):
    return x.shape[_axis(axis, len(x.shape))]

