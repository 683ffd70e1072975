"""Movement ops: they change how a node is read, never what is stored, so they create no nodes.

Every method here returns a Tensor on the same node with a new `ViewStack` (except `contiguous`,
which deliberately materialises; joining tensors is `joining.py`).
"""
from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np
import sympy

from ..errors import ShapeError
from ..symbolic.dims import Dim, dim, dims_equal, prod
from .core import TensorCore, is_boolean, is_integer, keep_bool, lift
from .joining import concat
from .primitives import make_node


def _shape_args(args) -> tuple:
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)


class MovementMixin:
    __slots__ = ()

    def broadcast_to(self, shape: Sequence[Dim]):
        shape = tuple(n if type(n) is int else dim(n) for n in shape)
        if shape == self.shape:  # structurally equal dims are equal: the common case, at no SymPy cost
            return self
        if len(shape) < self.ndim:
            raise ShapeError(f"cannot broadcast {self.label} to fewer axes {shape}")
        if any(type(n) is int and n < 0 for n in shape):  # as PyTorch: zeros(2, -1), expand(-2, 3)
            raise ShapeError(f"cannot broadcast {self.label} to {shape}: a negative dimension")
        t = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if len(shape) > self.ndim else self
        for axis, (old, new) in enumerate(zip(t.shape, shape)):
            if not (dims_equal(old, new) or dims_equal(old, 1)):
                raise ShapeError(
                    f"cannot broadcast {self.label} to {shape}: axis {axis} is {old}, not 1 or {new}"
                )
        if all(dims_equal(a, b) for a, b in zip(t.shape, shape)):
            return t
        return t.with_views(t.views.expand(shape))

    def expand(self, *shape):
        """PyTorch's expand: -1 keeps an axis, new leading axes may be added."""
        shape = _shape_args(shape)
        lead = len(shape) - self.ndim
        if lead < 0:
            raise ShapeError(f"expand of {self.label} to {shape}: fewer axes than the tensor has")
        if any(isinstance(n, int) and n == -1 for n in shape[:lead]):
            raise ShapeError(
                f"expand of {self.label} to {shape}: -1 keeps an existing axis, "
                f"but a new leading axis needs a size"
            )
        full = tuple(
            self.shape[i - lead] if isinstance(n, int) and n == -1 else n for i, n in enumerate(shape)
        )
        return self.broadcast_to(full)

    def reshape(self, *shape):
        shape = list(_shape_args(shape))
        unknown = [i for i, n in enumerate(shape) if isinstance(n, int) and n == -1]
        if len(unknown) > 1:
            raise ShapeError(f"reshape of {self.label}: at most one -1 is allowed, got {tuple(shape)}")
        total = prod(self.shape)
        if unknown:
            known = prod(dim(n) for i, n in enumerate(shape) if i != unknown[0])
            if isinstance(total, int) and isinstance(known, int):
                inferred = total // known if known and total % known == 0 else None
            else:
                inferred = sympy.cancel(sympy.sympify(total) / known)
                inferred = inferred if sympy.fraction(inferred)[1] == 1 else None
            if inferred is None:
                raise ShapeError(
                    f"reshape of {self.label} to {tuple(shape)}: {total} elements do not divide "
                    f"into axes of {known}"
                )
            shape[unknown[0]] = inferred
        try:
            new_shape = tuple(dim(n) for n in shape)
        except ShapeError as exc:
            raise ShapeError(f"reshape of {self.label} to {tuple(map(str, shape))}: {exc}") from None
        if any(isinstance(n, int) and n < 0 for n in new_shape):
            raise ShapeError(f"reshape of {self.label} to {new_shape}: negative dimension")
        if not dims_equal(prod(new_shape), total):
            raise ShapeError(
                f"reshape of {self.label} to {new_shape}: {total} elements cannot become {prod(new_shape)}"
            )
        if len(new_shape) == self.ndim and all(dims_equal(a, b) for a, b in zip(new_shape, self.shape)):
            return self
        return self.with_views(self.views.reshape(new_shape))

    def permute(self, *order):
        order = _shape_args(order)
        axes = [self._axis(a) for a in order]
        if sorted(axes) != list(range(self.ndim)):
            raise ShapeError(
                f"permute of {self.label}: {tuple(order)} is not a permutation of its {self.ndim} axes"
            )
        return self.with_views(self.views.permute(axes))

    def transpose(self, dim0: int = -2, dim1: int = -1):
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self):
        return self.permute(list(reversed(range(self.ndim))))

    def unsqueeze(self, axis: int):
        axis = self._axis(axis, self.ndim + 1)
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    def squeeze(self, dim=None):
        """torch.squeeze: drop the axes of size 1, all of them or those among `dim` (an int or a tuple);
        a named axis of another known size stays, as PyTorch. A symbolic length is refused: PyTorch
        would drop the axis exactly when it is bound to 1."""
        axes = (
            range(self.ndim)
            if dim is None
            else [self._axis(a) for a in (dim if isinstance(dim, (tuple, list)) else [dim])]
        )
        for a in axes:
            if not isinstance(self.shape[a], int) and not dims_equal(self.shape[a], 1):
                raise ShapeError(
                    f"squeeze of {self.label}: axis {a} has the symbolic length {self.shape[a]}, which "
                    f"PyTorch drops when it is 1: reshape instead"
                )
        drop = {a for a in axes if dims_equal(self.shape[a], 1)}
        return self.reshape(tuple(n for i, n in enumerate(self.shape) if i not in drop))

    def flip(self, axis=None):
        axes = range(self.ndim) if axis is None else (axis,) if isinstance(axis, numbers.Integral) else axis
        views = self.views
        for a in {self._axis(a) for a in axes}:
            views = views.flip(a)
        return self.with_views(views)

    def pad(self, widths, value: float = 0.0, mode: str = "constant"):
        """NumPy-style: `widths` is one (before, after) pair per axis; the border holds `value`, or
        with `mode` "reflect", "replicate" (ONNX's "edge") or "circular" ("wrap") the tensor's own
        values, mirrored without the edge, repeated from the edge, or wrapped around.

        A zero border is a masked view. Any other value is concatenated as constant blocks, one axis
        at a time: the border is then exactly `value`, infinities and NaN included (a blend such as
        `padded + border * value` would turn 0 * inf into NaN inside the tensor). The other modes
        concatenate slices of the tensor itself.
        """
        if mode != "constant":
            return self._pad_from_self(widths, BORDER_MODES.get(mode, mode))
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise ShapeError(
                f"pad of {self.label}: the border value must be a number, got {type(value).__name__}"
            )
        try:
            widths = [tuple(w) for w in widths]
        except TypeError:
            raise ShapeError(
                f"pad of {self.label}: give one (before, after) pair per axis, got {widths!r}"
            ) from None
        if len(widths) != self.ndim or any(len(w) != 2 for w in widths):
            raise ShapeError(f"pad of {self.label}: give one (before, after) pair per axis, got {widths}")
        views = self.views
        for axis, (before, after) in enumerate(widths):
            if any(isinstance(w, int) and w < 0 for w in (before, after)):
                raise ShapeError(
                    f"pad of {self.label}: negative width {widths[axis]} on axis {axis} (slice instead)"
                )
            if not (dims_equal(before, 0) and dims_equal(after, 0)):
                views = views.pad(axis, dim(before), dim(after))
        if value == 0.0:
            return self.with_views(views)
        out = self
        for axis, (before, after) in enumerate(widths):
            parts = [out]
            for width, at in ((before, 0), (after, 1)):
                if not dims_equal(width, 0):
                    shape = out.shape[:axis] + (dim(width),) + out.shape[axis + 1:]
                    border = lift(int(value) if is_integer(self) and float(value).is_integer() else value,
                                  like=self)
                    parts.insert(at * len(parts), border.broadcast_to(shape))
            out = concat(parts, axis) if len(parts) > 1 else out
        return out

    def _pad_from_self(self, widths, mode: str):
        if mode not in ("reflect", "edge", "wrap"):
            raise ShapeError(
                f"pad of {self.label}: mode must be constant, reflect, replicate or circular, got {mode!r}"
            )
        if len(widths) != self.ndim:
            raise ShapeError(f"pad of {self.label}: give one (before, after) pair per axis, got {widths}")
        out = self
        for axis, (before, after) in enumerate(widths):
            if before or after:
                out = _pad_axis(out, axis, int(before), int(after), mode)
        return out

    def __getitem__(self, index):
        if isinstance(index, TensorCore) and is_integer(index):  # x[ids]: rows picked by integer ids
            return self.index_select(0, index)
        if any(is_boolean(i) for i in (index if isinstance(index, tuple) else (index,))):
            raise ShapeError(
                f"indexing {self.label} with a boolean mask: the result's length depends on the data, "
                f"which a graph cannot have; use rc.where or masked_fill"
            )
        index = index if isinstance(index, tuple) else (index,)
        lists = [k for k, i in enumerate(index) if _is_int_list(i) or isinstance(i, TensorCore)]
        if len(lists) > 1:
            raise ShapeError(
                f"indexing {self.label}: one list or tensor of ints at a time (several index lists "
                f"broadcast together, which refcomp does not do)"
            )
        if lists and isinstance(index[lists[0]], TensorCore):
            return self._index_with_ids(index, lists[0])
        if lists:
            return self._index_with_list(index, lists)
        ellipses = [
            k for k, i in enumerate(index) if i is Ellipsis
        ]  # by identity: a Tensor's == builds a node
        if len(ellipses) > 1:
            raise ShapeError(f"indexing {self.label}: at most one ellipsis")
        used = sum(1 for i in index if i is not None and i is not Ellipsis)
        if used > self.ndim:
            raise ShapeError(f"indexing {self.label}: {used} indices for {self.ndim} axes")
        fill = (slice(None),) * (self.ndim - used)
        if ellipses:
            at = ellipses[0]
            index = index[:at] + fill + index[at + 1:]
        else:
            index = index + fill
        axis, shape_out, views = 0, [], self.views
        for item in index:
            if item is None:
                shape_out.append(1)
                continue
            n = views.shape[axis]
            if isinstance(item, slice):
                views, length = _slice_axis(views, axis, n, item, self.label)
                shape_out.append(length)
                axis += 1
            elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
                i = int(item)
                if isinstance(n, int) and not -n <= i < n:
                    raise ShapeError(f"index {i} is out of range for axis {axis} of {self.label}")
                start = dim(n + i) if i < 0 else i
                views = views.slice(axis, start, dim(start + 1))
                views = views.reshape(views.shape[:axis] + views.shape[axis + 1:])
            else:
                raise ShapeError(
                    f"indexing {self.label} with {item!r}: only ints, slices, None and ... are supported "
                    f"(or one int32 tensor of ids, alone)"
                )
        return self.with_views(views).reshape(tuple(shape_out))

    def _picked_axis(self, index: tuple, k: int):
        """(this tensor indexed with everything but index[k], which is kept whole, and the axis of
        that result index[k] picks along). Ints index first, as basic indexing: PyTorch's order, so
        x[1, :, ids] is (3, 2) for a (2, 3, 4) x, where NumPy would put the picked axis first."""
        rest = self[index[:k] + (slice(None),) + index[k + 1:]]
        before = index[:k]
        if any(i is Ellipsis for i in before):  # positions after an ellipsis count from the end
            axis = (
                rest.ndim
                - sum(1 for i in index[k + 1 :] if i is None or not isinstance(i, numbers.Integral))
                - 1
            )
        else:
            axis = sum(1 for i in before if not (isinstance(i, numbers.Integral) and not isinstance(i, bool)))
        return rest, axis

    def _index_with_ids(self, index: tuple, k: int):
        """x[..., ids, ...]: an integer tensor picks entries along its axis, which its shape replaces
        (ids outside the axis are refused at run time, as index_select's are)."""
        ids = index[k]
        if not is_integer(ids):
            raise ShapeError(
                f"indexing {self.label} with {ids.label}: index tensors must be integers (.long() makes "
                f"float positions ids)"
            )
        rest, axis = self._picked_axis(index, k)
        if ids.ndim == 1:
            return rest.index_select(axis, ids)
        picked = rest.index_select(axis, ids.reshape((prod(ids.shape),)))
        return picked.reshape(tuple(rest.shape[:axis]) + tuple(ids.shape) + tuple(rest.shape[axis + 1:]))

    def _index_with_list(self, index: tuple, lists: list):
        """x[..., [2, 0, 2], ...]: one list of ints picks entries along its axis (NumPy's and PyTorch's
        advanced indexing with one list): the other indices first, then a strided slice when the
        picks step evenly, else the picked entries concatenated."""
        k = lists[0]
        picks = [int(i) for i in index[k]]
        rest, axis = self._picked_axis(index, k)
        n = rest.shape[axis]
        if isinstance(n, int):
            bad = [i for i in picks if not -n <= i < n]
            if bad:
                raise ShapeError(
                    f"index {bad[0]} is out of range for axis {axis} of {self.label} (length {n})"
                )
        elif any(i < 0 for i in picks):
            raise ShapeError(
                f"indexing {self.label}: negative list indices need a known length, axis {axis} has {n}"
            )
        picks = [i % n if isinstance(n, int) else i for i in picks]
        lead = (slice(None),) * axis
        steps = {b - a for a, b in zip(picks, picks[1:])}
        if len(picks) == 1 or (len(steps) == 1 and steps.pop() > 0):
            step = picks[1] - picks[0] if len(picks) > 1 else 1
            return rest[lead + (slice(picks[0], picks[-1] + 1, step),)]
        return concat([rest[lead + (slice(i, i + 1),)] for i in picks], axis)

    def __iter__(self):
        """Rows along axis 0, as NumPy, so `a, b = t` unpacks. Without this Python would iterate
        through __getitem__ until an IndexError, and fail with a ShapeError past the last row."""
        if self.ndim == 0 or not isinstance(self.shape[0], int):
            raise ShapeError(f"cannot iterate over {self.label}: iteration needs a first axis of known size")
        return (self[i] for i in range(self.shape[0]))

    def contiguous(self):
        return keep_bool(type(self).from_node(make_node("Contiguous", (self.edge,))), self)

    def as_strided(self, shape, strides, offset=0):
        """Read this tensor's row-major flattening with explicit strides (windows for conv and pooling)."""
        return self.with_views(self.views.as_strided(shape, strides, offset))


BORDER_MODES = {"replicate": "edge", "circular": "wrap"}  # PyTorch's names for ONNX's


def _take(t, axis: int, start, stop):
    index = [slice(None)] * t.ndim
    index[axis] = slice(start, stop)
    return t[tuple(index)]


def _pad_axis(t, axis: int, before: int, after: int, mode: str):
    """One axis padded from the tensor's own values (reflect, edge or wrap)."""
    n = t.shape[axis]
    if mode == "edge":
        if isinstance(n, int) and n == 0:
            raise ShapeError(f"pad of {t.label}: edge padding of the empty axis {axis}")

        def edge(start, stop, count):
            piece = _take(t, axis, start, stop)
            return piece.broadcast_to(piece.shape[:axis] + (count,) + piece.shape[axis + 1:])

        parts = (
            ([edge(0, 1, before)] if before else []) + [t] + ([edge(dim(n - 1), n, after)] if after else [])
        )
    elif mode == "reflect":
        if isinstance(n, int) and (before >= n or after >= n):
            raise ShapeError(
                f"pad of {t.label}: reflect padding by {(before, after)} needs axis {axis} longer than "
                f"that, got {n}"
            )
        left = _take(t, axis, 1, before + 1).flip(axis) if before else None
        right = _take(t, axis, dim(n - 1 - after), dim(n - 1)).flip(axis) if after else None
        parts = [p for p in (left, t, right) if p is not None]
    else:
        if isinstance(n, int) and (before > n or after > n):
            raise ShapeError(
                f"pad of {t.label}: circular padding by {(before, after)} is longer than axis {axis} ({n})"
            )
        left = _take(t, axis, dim(n - before), n) if before else None
        right = _take(t, axis, 0, after) if after else None
        parts = [p for p in (left, t, right) if p is not None]
    return parts[0] if len(parts) == 1 else concat(parts, axis)


def _slice_axis(views, axis: int, n: Dim, item: slice, label: str):
    step = 1 if item.step is None else item.step
    if not isinstance(step, numbers.Integral) or step == 0:
        raise ShapeError(f"slicing {label}: step {item.step!r} must be a non-zero int")
    if isinstance(n, int) and all(
        v is None or isinstance(v, numbers.Integral) for v in (item.start, item.stop)
    ):
        start, stop, step = item.indices(n)
        if step < 0:  # walk a flipped axis forwards: element k of the result is start - k*|step|
            count = len(range(start, stop, step))
            views = views.flip(axis)
            first = n - 1 - start
            return views.slice(
                axis, first, first + max(count - 1, 0) * -step + (1 if count else 0), -step
            ), count
        stop = max(stop, start)
        return views.slice(axis, start, stop, step), len(range(start, stop, step))
    if step < 0:
        if item.start is not None or item.stop is not None:
            raise ShapeError(
                f"slicing symbolic axis {axis} ({n}) of {label}: negative steps need a full slice like [::-1]"
            )
        views = views.flip(axis)
        step = -step
        start, stop = 0, n
    else:
        start = _symbolic_bound(item.start, 0, n)
        stop = _symbolic_bound(item.stop, n, n)
    out = views.slice(axis, start, stop, step)
    return out, out.shape[axis]


def _symbolic_bound(value, default: Dim, n: Dim) -> Dim:
    if value is None:
        return default
    value = dim(value)
    return dim(n + value) if isinstance(value, int) and value < 0 else value


def _is_int_list(item) -> bool:
    """A list (or 1-D NumPy array) of ints used as an index."""
    if isinstance(item, np.ndarray):
        return item.ndim == 1 and item.dtype.kind in "iu"
    return (
        isinstance(item, list)
        and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in item)
        and bool(item)
    )
