"""PyTorch's shape methods and scans on top of the views: view, flatten, unflatten, t, mT, swapaxes,
split, chunk, diagonal, roll,
repeat, repeat_interleave, and the running product / maximum / minimum (with their positions) / log-sum-exp.

Every method here is a view (or a concatenation of views) of the same node, so none copies data
except where PyTorch's result is not a view either (roll, repeat concatenate). The scans read the
same window view as `cumsum` (row i of the windows is the prefix up to i, padded in front with the
operation's identity), reduced with the operation itself: exact for max and min, the product a
tree of multiplies.
"""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from ..symbolic.dims import dim as make_dim, dims_equal, prod
from ..symbolic.view import contiguous_strides
from . import return_types
from .core import as_requested, iota, is_integer, keep_bool, lift, widest_integer
from .elementwise import where
from .joining import concat
from .primitives import make_node


def _int(value, what: str, label: str) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ShapeError(f"{what} of {label} must be an int, got {value!r}")
    return int(value)


class TorchShapesMixin:
    __slots__ = ()

    def view(self, *shape):
        return self.reshape(*shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        if self.ndim == 0:
            return self.reshape((1,))
        start, end = self._axis(start_dim), self._axis(end_dim)
        if start > end:
            raise ShapeError(f"flatten of {self.label}: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(self.shape[:start] + (prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

    def unflatten(self, dim: int, sizes):
        axis = self._axis(dim)
        sizes = tuple(sizes)
        if sum(1 for s in sizes if s == -1) == 1:
            known = prod(s for s in sizes if s != -1)
            n = self.shape[axis]
            sizes = tuple(
                make_dim(n // known if isinstance(n, int) else n / known) if s == -1 else s for s in sizes
            )
        return self.reshape(self.shape[:axis] + sizes + self.shape[axis + 1:])

    def t(self):
        """torch.Tensor.t: a 2-D tensor transposed; 0-D and 1-D as they are; more axes refused, as PyTorch."""
        if self.ndim > 2:
            raise ShapeError(
                f"t() of {self.label}: PyTorch's t() takes at most 2 axes (mT swaps the last two)"
            )
        return self.transpose(0, 1) if self.ndim == 2 else self

    @property
    def mT(self):
        if self.ndim < 2:
            raise ShapeError(f"mT of {self.label}: needs at least 2 axes")
        return self.transpose(-2, -1)

    def swapaxes(self, axis0: int, axis1: int):
        return self.transpose(axis0, axis1)

    def swapdims(self, dim0: int, dim1: int):
        return self.transpose(dim0, dim1)

    def split(self, split_size_or_sections, dim: int = 0):
        """torch.split: views of `split_size` along dim (the last one shorter), or of the listed sizes
        (which must add up to the axis). An int size needs a known length: the count of pieces is."""
        axis = self._axis(dim)
        n = self.shape[axis]
        if isinstance(split_size_or_sections, numbers.Integral) and not isinstance(
            split_size_or_sections, bool
        ):
            size = int(split_size_or_sections)
            if not isinstance(n, int):
                raise ShapeError(
                    f"split of {self.label}: axis {axis} has the symbolic length {n}, so the number of "
                    f"pieces of {size} is unknown; give the sizes as a list"
                )
            if size < 0 or (size == 0 and n):
                raise ShapeError(
                    f"split of {self.label}: split_size {size} must be positive (0 only for an empty axis)"
                )
            sizes = [size] * (n // size) + ([n % size] if n % size else []) if n else [0]
        else:
            sizes = [make_dim(s) for s in split_size_or_sections]
            if not dims_equal(make_dim(sum(sizes)), n):
                raise ShapeError(
                    f"split of {self.label}: sizes {sizes} add up to {sum(sizes)}, not the {n} of axis {axis}"
                )
        pieces, start = [], 0
        for size in sizes:
            index = [slice(None)] * self.ndim
            index[axis] = slice(start, make_dim(start + size))
            pieces.append(self[tuple(index)])
            start = make_dim(start + size)
        return tuple(pieces)

    def chunk(self, chunks: int, dim: int = 0):
        """torch.chunk: pieces of ceil(n / chunks) along dim, the last smaller, so there may be fewer
        than `chunks` (an empty axis gives `chunks` empty pieces, as PyTorch)."""
        chunks = _int(chunks, "chunk's chunks", self.label)
        axis = self._axis(dim)
        n = self.shape[axis]
        if chunks < 1 or not isinstance(n, int):
            raise ShapeError(
                f"chunk of {self.label}: chunks must be positive ({chunks}) and axis {axis} "
                f"of known length ({n})"
            )
        return self.split([0] * chunks, axis) if n == 0 else self.split(-(-n // chunks), axis)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        """The diagonal of axes dim1 and dim2 (offset above it, negative below) as the last axis: a
        strided view of a contiguous copy."""
        offset = _int(offset, "diagonal's offset", self.label)
        a, b = self._axis(dim1), self._axis(dim2)
        if a == b:
            raise ShapeError(f"diagonal of {self.label}: dim1 and dim2 are both axis {a}")
        rows, cols = self.shape[a], self.shape[b]
        if not (isinstance(rows, int) and isinstance(cols, int)):
            raise ShapeError(
                f"diagonal of {self.label}: axes {a} and {b} must have known lengths, not {rows} and {cols}"
            )
        length = max(min(rows + min(offset, 0), cols - max(offset, 0)), 0)
        strides = contiguous_strides(self.shape)
        rest = [i for i in range(self.ndim) if i not in (a, b)]
        start = (-min(offset, 0)) * strides[a] + max(offset, 0) * strides[b]
        shape = tuple(self.shape[i] for i in rest) + (length,)
        return self.contiguous().as_strided(
            shape, tuple(strides[i] for i in rest) + (strides[a] + strides[b],), start
        )

    def roll(self, shifts, dims=None):
        """Elements shifted along each axis, wrapping around (no dims: over the flattened tensor)."""
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shifts = (shifts,) if isinstance(shifts, numbers.Integral) else tuple(shifts)
        dims = (dims,) if isinstance(dims, numbers.Integral) else tuple(dims)
        if len(shifts) != len(dims):
            raise ShapeError(f"roll of {self.label}: {len(shifts)} shifts for {len(dims)} dims")
        out = self
        for shift, axis in zip(shifts, dims):
            axis, n = out._axis(axis), out.shape[out._axis(axis)]
            if not isinstance(n, int):
                raise ShapeError(f"roll of {self.label}: axis {axis} has the symbolic length {n}")
            k = _int(shift, "roll's shift", self.label) % n if n else 0
            if k:
                head, tail = [slice(None)] * out.ndim, [slice(None)] * out.ndim
                head[axis], tail[axis] = slice(n - k, n), slice(0, n - k)
                out = concat([out[tuple(head)], out[tuple(tail)]], axis)
        return out

    def repeat(self, *sizes):
        """Tile the tensor `sizes` times per axis (PyTorch's repeat, NumPy's tile): a broadcast view."""
        sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat of {self.label}: {len(sizes)} sizes for {self.ndim} axes")
        x = self.reshape((1,) * (len(sizes) - self.ndim) + self.shape)
        interleaved = tuple(v for n in x.shape for v in (1, n))
        expanded = tuple(v for r, n in zip(sizes, x.shape) for v in (r, n))
        return (
            x.reshape(interleaved)
            .broadcast_to(expanded)
            .reshape(tuple(make_dim(r * n) for r, n in zip(sizes, x.shape)))
        )

    def repeat_interleave(self, repeats: int, dim=None):
        """Each element `repeats` times in a row along the axis (none: of the flattened tensor)."""
        repeats = _int(repeats, "repeat_interleave's repeats", self.label)
        if dim is None:
            return self.flatten().repeat_interleave(repeats, 0)
        axis = self._axis(dim)
        x = self.unsqueeze(axis + 1)
        x = x.broadcast_to(x.shape[:axis + 1] + (repeats,) + x.shape[axis + 2:])
        return x.reshape(self.shape[:axis] + (make_dim(self.shape[axis] * repeats),) + self.shape[axis + 1:])

    def unfold(self, dimension: int, size: int, step: int):
        """Windows of `size` every `step` along an axis of known length, as a new last axis: a view."""
        axis = self._axis(dimension)
        n = self.shape[axis]
        size, step = _int(size, "unfold's size", self.label), _int(step, "unfold's step", self.label)
        if not isinstance(n, int) or size < 0 or step < 1 or size > n:
            raise ShapeError(
                f"unfold of {self.label}: windows of {size} every {step} along axis {axis} of length {n}"
            )
        strides = contiguous_strides(self.shape)
        shape = self.shape[:axis] + ((n - size) // step + 1,) + self.shape[axis + 1:] + (size,)
        view = strides[:axis] + (strides[axis] * step,) + strides[axis + 1:] + (strides[axis],)
        return self.contiguous().as_strided(shape, view)

    def index_select(self, dim: int, index):
        """Entries at the integer ids `index` along `dim` (any shape of ids: its axes replace `dim`),
        the rows of a table picked by a Gather; an id out of range is refused at run time."""
        axis = self._axis(dim)
        ids = lift(index)
        if not is_integer(ids):
            raise ShapeError(
                f"index_select of {self.label}: the index must be integer ids, got {ids.label} ({ids.dtype})"
            )
        rest = tuple(n for i, n in enumerate(self.shape) if i != axis)
        front = self.permute([axis] + [i for i in range(self.ndim) if i != axis]) if axis else self
        table = front.reshape((self.shape[axis], prod(rest)))
        picked = (
            type(self).from_node(make_node("Gather", (table.edge, ids.edge))).reshape(tuple(ids.shape) + rest)
        )
        k = ids.ndim
        order = list(range(k, k + axis)) + list(range(k)) + list(range(k + axis, k + len(rest)))
        return keep_bool(picked.permute(order) if order != list(range(len(order))) else picked, self)

    def index_copy(self, dim: int, index, source):
        """torch.index_copy: a copy of self whose entries at positions `index` along `dim` are source's,
        `out[..., index[j], ...] = source[..., j, ...]`. `index` is 1-D int32 ids or float positions the
        graph computes; at run time every backend refuses ids outside the axis, non-integers and
        repeated ids (PyTorch leaves a repeated id's result undefined). One Scatter node: the kernel
        writes only len(index) rows, into the table's own buffer (exec.program)."""
        axis = self._axis(dim) if self.ndim else 0
        ids, source = lift(index), lift(source)
        x = self.reshape((1,)) if self.ndim == 0 else self
        if ids.ndim > 1:
            raise ShapeError(
                f"index_copy of {self.label}: the index {ids.label} must be 1-D, got {ids.ndim} axes"
            )
        ids = ids.reshape((1,)) if ids.ndim == 0 else ids
        want = x.shape[:axis] + (ids.shape[0],) + x.shape[axis + 1:]
        src = source.reshape(want) if source.ndim == 0 and len(want) == 1 else source
        if src.ndim != len(want) or not all(dims_equal(a, b) for a, b in zip(src.shape, want)):
            raise ShapeError(
                f"index_copy of {self.label} along axis {axis}: the source {source.label} must have shape "
                f"{tuple(want)} (self's, with len(index) along {axis}), got {tuple(source.shape)}"
            )
        if src.dtype != self.dtype:
            raise ShapeError(
                f"index_copy of {self.label} ({self.dtype}): the source {source.label} is {src.dtype}; "
                f"PyTorch requires the same dtype (convert it with .to)"
            )
        rest = x.shape[:axis] + x.shape[axis + 1:]
        order = [axis] + [i for i in range(x.ndim) if i != axis]
        table = (x.permute(order) if axis else x).reshape((x.shape[axis], prod(rest)))
        rows = (src.permute(order) if axis else src).reshape((ids.shape[0], prod(rest)))
        out = (
            type(self)
            .from_node(make_node("Scatter", (table.edge, ids.edge, rows.edge)))
            .reshape((x.shape[axis],) + rest)
        )
        if axis:
            out = out.permute([order.index(i) for i in range(x.ndim)])
        return keep_bool(out.reshape(()) if self.ndim == 0 else out, self, source)

    def gather(self, dim: int, index):
        """torch.gather: out[i][j][k] = self[i][index[i][j][k]][k] for dim=1; the output has the index's
        shape, which may be smaller than self's on the other axes. `index` is int32 ids (refused at run
        time outside the axis) or float positions (argmax's, sort's): each is compared with every
        position along `dim`, so a float index that matches none gives NaN, where PyTorch raises."""
        axis, index = self._axis(dim), lift(index)
        if index.ndim != self.ndim or any(
            isinstance(a, int) and isinstance(b, int) and a > b
            for i, (a, b) in enumerate(zip(index.shape, self.shape))
            if i != axis
        ):
            raise ShapeError(
                f"gather of {self.label} along axis {axis}: the index {index.label} must have as many axes, "
                f"none longer than self's except along {axis}"
            )
        n = self.shape[axis]
        if (
            is_integer(index)
        ):  # each id's position, read from a ramp by a Gather (ids checked at run time)
            shape = tuple(index.shape)
            index = (
                type(self).from_node(make_node("Gather", (iota((n, 1), 0).edge, index.edge))).reshape(shape)
            )
        rows = self[tuple(slice(0, m) if i != axis else slice(None) for i, m in enumerate(index.shape))]
        order = [i for i in range(self.ndim) if i != axis] + [
            axis
        ]  # the gathered axis last, then one for the index's
        candidates = rows.permute(order).unsqueeze(axis)  # (..., 1 at axis, ..., n)
        match = index.unsqueeze(-1).eq(iota((1,) * self.ndim + (n,), self.ndim))
        picked = where(match, candidates, -math.inf).amax(
            -1
        )  # one candidate matches: its value, -0.0 and NaN kept
        return keep_bool(where(match.amax(-1), picked, math.nan), self)

    # --- scans ----------------------------------------------------------------------------------
    def _prefixes(self, axis: int, identity: float):
        """(windows, axis moved last) where windows[..., i, :] is the prefix up to i padded with identity."""
        x = self.transpose(axis, -1) if axis != self.ndim - 1 else self
        n, lead = x.shape[-1], x.shape[:-1]
        padded = x.pad([(0, 0)] * (x.ndim - 1) + [(make_dim(n - 1), 0)], value=identity)
        strides = contiguous_strides(lead + (make_dim(2 * n - 1),))
        return padded.contiguous().as_strided(lead + (n, n), strides[:-1] + (1, 1))

    def _scan(self, dim, identity: float, reduce):
        axis = self._axis(dim)
        out = reduce(self._prefixes(axis, identity))
        return out.transpose(axis, -1) if axis != self.ndim - 1 else out

    def cumprod(self, dim: int = -1, *, dtype=None):
        x = as_requested(self, dtype, "cumprod") if dtype is not None else widest_integer(self)
        return x._scan(dim, 1.0, lambda w: w._product(-1))

    def cummax(self, dim: int = -1):
        """The running maximum and where it was reached: PyTorch's named pair (values, indices)."""
        return self._running_extreme(dim, lowest=False)

    def cummin(self, dim: int = -1):
        return self._running_extreme(dim, lowest=True)

    def _running_extreme(self, dim, lowest: bool):
        """Each prefix's maximum (of -x for the minimum) and, as PyTorch, the last position holding it (a NaN
        is the maximum: the last NaN). Window k of row i holds x[i - (n - 1) + k], -inf in the padding."""
        axis = self._axis(dim)
        windows = (-self if lowest else self)._prefixes(axis, -math.inf)
        top = windows.amax(-1)
        lead, n = windows.ndim - 2, windows.shape[-1]
        position = iota(windows.shape, lead) + iota(windows.shape, lead + 1) - (n - 1)
        hit = windows.eq(top.unsqueeze(-1)) + windows.isnan()
        indices = where(hit, position, -1.0).amax(-1)
        if axis != self.ndim - 1:
            top, indices = top.transpose(axis, -1), indices.transpose(axis, -1)
        return (return_types.cummin(-top, indices) if lowest else return_types.cummax(top, indices))

    def logcumsumexp(self, dim: int = -1):
        return self._scan(dim, -math.inf, lambda w: w.logsumexp(-1))
