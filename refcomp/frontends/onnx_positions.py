"""Integer tensors that are affine functions of their own indices, kept symbolic.

Exporters compute positions at run time: `Range(0, seq)` for position ids, `b * seq + k` to index
a flattened mask, `k <= q` for a causal mask. refcomp computes in float32 and uses integers only as
static values or fed ids, so such a tensor is held here as what it is, offset + sum_k step_k * i_k
over its shape (steps and offset may be symbolic dims), through the moves (Unsqueeze, Squeeze,
Reshape by size-1 axes, Expand, Transpose) and the arithmetic (+, -, * by a static scalar) that keep
it affine. A Gather by positions is then a strided view of the data (`gather_rows`); anything else
reads them as a float tensor built from Iota, exact for magnitudes below 2^24.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..ops.core import constant, iota
from ..symbolic.dims import dims_equal


@dataclass(frozen=True)
class Positions:
    shape: tuple
    steps: tuple  # per axis; 0 where the values do not vary along the axis (a broadcast)
    offset: object = 0

    @staticmethod
    def arange(count, start=0, step=1) -> "Positions":
        return Positions((count,), (step,), start)

    def tensor(self, dtype: str = "float32"):
        """The values as a tensor: Iota times each step, plus the offset; float32 (exact below 2^24),
        or exact int64."""
        exact = dtype == "int64"
        zero = iota((1,), 0, dtype)[0] if exact else constant(0.0)
        out = zero.reshape((1,) * len(self.shape)).broadcast_to(self.shape) if self.shape else zero
        scalar = _integer if exact else _scalar
        for axis, step in enumerate(self.steps):
            if not dims_equal(step, 0):
                out = out + iota(self.shape, axis, dtype) * scalar(step)
        return out + scalar(self.offset) if not dims_equal(self.offset, 0) else out

    def reshaped(self, shape: Sequence) -> Optional["Positions"]:
        """The same values under `shape` when it only inserts or removes size-1 axes, else None."""
        ours = [(n, step) for n, step in zip(self.shape, self.steps) if not dims_equal(n, 1)]
        theirs = [n for n in shape if not dims_equal(n, 1)]
        if len(ours) != len(theirs) or not all(dims_equal(a, n) for a, (n, _) in zip(theirs, ours)):
            return None
        steps = iter(step for _, step in ours)
        return Positions(
            tuple(shape), tuple(0 if dims_equal(n, 1) else next(steps) for n in shape), self.offset
        )

    def expanded(self, shape: Sequence) -> "Positions":
        """Broadcast to `shape` (NumPy rules; the caller has checked they broadcast)."""
        lead = len(shape) - len(self.shape)
        steps = (0,) * lead + tuple(0 if dims_equal(n, 1) and not dims_equal(m, 1) else s
                                    for n, m, s in zip(self.shape, shape[lead:], self.steps))
        return Positions(tuple(shape), steps, self.offset)

    def permuted(self, perm: Sequence[int]) -> "Positions":
        return Positions(tuple(self.shape[p] for p in perm), tuple(self.steps[p] for p in perm), self.offset)

    def plus(self, other: "Positions", shape: Sequence, sign: int = 1) -> "Positions":
        a, b = self.expanded(shape), other.expanded(shape)
        return Positions(
            tuple(shape), tuple(x + sign * y for x, y in zip(a.steps, b.steps)), a.offset + sign * b.offset
        )

    def shifted(self, amount) -> "Positions":
        return Positions(self.shape, self.steps, self.offset + amount)

    def scaled(self, factor) -> "Positions":
        return Positions(self.shape, tuple(s * factor for s in self.steps), self.offset * factor)


def positions_of(array) -> Optional[Positions]:
    """A static integer array as Positions, if it is affine in its indices (an exporter's buffer of
    position ids, arange(512) as (1, 512)), else None."""
    import numpy as np
    if array.dtype == object or array.dtype.kind not in "iu" or array.size == 0:
        return None
    offset = int(array.reshape(-1)[0])
    steps = tuple(int(array[(0,) * k + (1,) + (0,) * (array.ndim - k - 1)]) - offset if n > 1 else 0
                  for k, n in enumerate(array.shape))
    grid = np.indices(array.shape)
    if not np.array_equal(
        array, offset + sum((s * g for s, g in zip(steps, grid)), np.zeros(array.shape, np.int64))
    ):
        return None
    return Positions(tuple(array.shape), steps, offset)


def gather_rows(x, axis: int, ids: Positions):
    """x indexed along `axis` by positions: a strided view of x's row-major flattening (the run time
    checks that it stays inside x at every binding, as for any view)."""
    from ..symbolic.view import contiguous_strides
    strides = contiguous_strides(x.shape)
    shape = tuple(x.shape[:axis]) + tuple(ids.shape) + tuple(x.shape[axis + 1:])
    view = (
        tuple(strides[:axis]) + tuple(step * strides[axis] for step in ids.steps) + tuple(strides[axis + 1 :])
    )
    return x.as_strided(shape, view, ids.offset * strides[axis])


def gather_elements(data: Positions, axis: int, ids: Positions) -> Positions:
    """GatherElements of positions by positions: data's affine form with its `axis` index replaced by
    the affine ids, itself affine."""
    lead = data.steps[axis]
    steps = tuple(
        (data.steps[k] if k != axis and not dims_equal(data.shape[k], 1) else 0) + lead * ids.steps[k]
        for k in range(len(ids.shape))
    )
    return Positions(tuple(ids.shape), steps, data.offset + lead * ids.offset)


def gather_elements_view(x, axis: int, ids: Positions):
    """GatherElements of a float tensor by positions: a strided view of its row-major flattening."""
    from ..symbolic.view import contiguous_strides
    strides = contiguous_strides(x.shape)
    view = tuple((strides[k] if k != axis else 0) + step * strides[axis] for k, step in enumerate(ids.steps))
    return x.as_strided(tuple(ids.shape), view, ids.offset * strides[axis])


def _integer(value) -> object:
    """A step or offset as an operand of int64 arithmetic: an int, or the symbolic dim itself."""
    return int(value) if isinstance(value, int) or getattr(value, "is_Integer", False) else value


def _scalar(value) -> object:
    """A step or offset as an operand of Tensor arithmetic: a float, or the symbolic dim itself."""
    return float(int(value)) if isinstance(value, int) or getattr(value, "is_Integer", False) else value
