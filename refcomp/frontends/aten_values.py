"""Integer tensors while a torch.export program is imported, and the bounds that keep them exact.

refcomp computes in float32 and has no integer tensors computed at run time (int32 tensors are fed
ids). An exported program still computes integers: position ids (`arange(T)`), causal masks built
from them, the indices of `max_pool2d_with_indices`, a `cumsum` of a mask. During import each such
value is an `IntValue` holding what is known of it, best first:

* **static**: a NumPy array known at import time (an int64 buffer, a folded `full`), folded with
  torch itself by the importer;
* **positions**: affine in its own indices, offset + sum_k step_k * i_k, with symbolic shape,
  steps and offset (onnx_positions.Positions): `arange(T)` and what views and +, -, * by a number
  make of it; indexing by positions is then a strided view of the data (`address_view`);
* **tensor**: a float32 refcomp tensor holding the integers, with `bound`, an upper bound on their
  magnitude as an expression of the dims. It is exact while every value it passes through stays
  at most 2^24 (`MAX_EXACT`), which the importer checks at the dims' largest sizes: a tensor whose
  bound may pass it is refused with a RefcompError, never approximated;
* **ids**: an int64 input fed at run time, as int32 ids (embedding, index_select) and, for
  comparisons and casts, as float32 (`tensor`, exact: the feed is checked to stay within 2^24).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np
import sympy

from ..ops.tensor import Tensor
from ..symbolic.dims import dim, dims_equal, idiv, imod
from ..symbolic.view import contiguous_strides
from .onnx_positions import Positions

MAX_EXACT = 2 ** 24  # every integer of magnitude up to this is a float32
UNKNOWN = sympy.oo  # the bound of integers nothing is known about (a float truncated to int64)


@dataclass(eq=False)
class IntValue:
    """An integer (or static boolean) tensor of the exported program; see the module docstring."""

    shape: tuple
    dtype: str  # torch's dtype name: "int64", "int32", "bool", ...
    static: Optional[np.ndarray] = None
    positions: Optional[Positions] = None
    tensor: Optional[Tensor] = None
    bound: object = None  # of `tensor`: max |value| (an int or a dim expression; UNKNOWN if none is known)
    ids: Optional[Tensor] = None  # int32 ids read from the fed input `fed`
    fed: str = ""

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def affine(self) -> Optional[Positions]:
        """The values as Positions, if they are affine in their indices."""
        if self.positions is None and self.static is not None:
            from .onnx_positions import positions_of
            self.positions = positions_of(self.static.astype(np.int64)) if self.static.size else None
        return self.positions


@dataclass(frozen=True)
class Unavailable:
    """A result of an ATen op that refcomp does not compute (embedding_bag's bookkeeping tensors, which
    only its backward reads): any node that reads it is refused, naming why."""

    why: str


# --- bounds --------------------------------------------------------------------------------------
def magnitude(value) -> object:
    """An upper bound on |value| for an int or a dim expression, increasing in every dim (dims are
    positive): each term's coefficient by its magnitude; idiv(a, b) <= a and imod(a, b) < b."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return abs(int(value))
    if isinstance(value, float):
        return abs(value) if math.isfinite(value) else UNKNOWN
    e = sympy.expand(sympy.sympify(value))
    if e.is_Number:
        return abs(e) if e.is_finite else UNKNOWN
    total = sympy.Integer(0)
    for term in sympy.Add.make_args(e):
        coeff, rest = term.as_coeff_Mul()
        factors = [
            magnitude(f.args[0])
            if isinstance(f, idiv)
            else magnitude(f.args[1])
            if isinstance(f, imod)
            else f
            for f in sympy.Mul.make_args(rest)
        ]
        total += abs(coeff) * sympy.Mul(*factors)
    return total


def largest(bound, ranges: Mapping[str, tuple]) -> float:
    """`bound` at the dims' largest values (`ranges`: name -> (min, max or None)); inf if a dim it
    grows with has no max."""
    if bound is None or bound is UNKNOWN:
        return math.inf
    if isinstance(bound, (int, float)):
        return float(bound)
    e = sympy.sympify(bound)
    values = {}
    for s in e.free_symbols:
        hi = ranges.get(s.name, (0, None))[1]
        if hi is None:
            return math.inf
        values[s] = sympy.Integer(hi)
    result = sympy.sympify(e.xreplace(values))
    return float(result) if result.is_finite else math.inf


def bound_of(v) -> object:
    """max |value| of an argument: an IntValue, a boolean tensor (1), a number or a dim; UNKNOWN for
    a float tensor."""
    from ..ops.tensor import BoolTensor
    if isinstance(v, IntValue):
        if v.tensor is not None:  # (an exact integer tensor has no bound to keep)
            return v.bound if v.bound is not None else UNKNOWN
        if v.static is not None:
            return int(np.abs(v.static.astype(np.int64)).max()) if v.static.size else 0
        if v.positions is not None:
            return positions_bound(v.positions)
        return MAX_EXACT  # a fed input: its feed is checked to stay within 2^24
    if isinstance(v, BoolTensor):
        return 1
    if isinstance(v, Tensor):
        return UNKNOWN
    if isinstance(v, (list, tuple)):
        return bound_max([bound_of(x) for x in v])
    return magnitude(v)


def bound_max(bounds: Sequence) -> object:
    if any(b is UNKNOWN or b is None for b in bounds):
        return UNKNOWN
    return sympy.Max(*bounds) if len(bounds) > 1 else (bounds[0] if bounds else 0)


def positions_bound(p: Positions) -> object:
    """max |value| of Positions: |offset| + sum |step| * (n - 1), bounded as `magnitude` does."""
    return magnitude(p.offset) + sum(
        (magnitude(s) * magnitude(n) for s, n in zip(p.steps, p.shape)), sympy.Integer(0)
    )


# --- positions: the affine forms of views and indexing ----------------------------------------------
def full_positions(shape: Sequence, value) -> Positions:
    return Positions(tuple(shape), (0,) * len(shape), value)


def addresses(shape: Sequence) -> Positions:
    """Where each element of a row-major tensor of `shape` lies: indexing these by positions says
    how the indexed elements are read, as a strided view (`address_view`)."""
    return Positions(tuple(shape), contiguous_strides(tuple(shape)), 0)


def address_view(x: Tensor, p: Positions) -> Tensor:
    """x read at the addresses `p` (an indexed `addresses(x.shape)`): a strided view of its row-major
    flattening, which the binding validator keeps inside x at every binding."""
    return x.as_strided(p.shape, p.steps, p.offset)


def unsqueezed(p: Positions, axis: int) -> Positions:
    axis = axis % (len(p.shape) + 1)
    return Positions(p.shape[:axis] + (1,) + p.shape[axis:], p.steps[:axis] + (0,) + p.steps[axis:], p.offset)


def squeezed(p: Positions, axes: Sequence[int]) -> Positions:
    drop = {a % len(p.shape) for a in axes if p.shape and dims_equal(p.shape[a % len(p.shape)], 1)}
    keep = [k for k in range(len(p.shape)) if k not in drop]
    return Positions(tuple(p.shape[k] for k in keep), tuple(p.steps[k] for k in keep), p.offset)


def sliced(p: Positions, axis: int, start, count, step) -> Positions:
    """Elements start, start + step, ... (count of them) along `axis`."""
    shape = p.shape[:axis] + (count,) + p.shape[axis + 1:]
    steps = p.steps[:axis] + (dim(p.steps[axis] * step),) + p.steps[axis + 1:]
    return Positions(shape, steps, dim(p.offset + p.steps[axis] * start))


def selected(p: Positions, axis: int, index) -> Positions:
    return Positions(p.shape[:axis] + p.shape[axis + 1:], p.steps[:axis] + p.steps[axis + 1:],
                     dim(p.offset + p.steps[axis] * index))


def broadcast_dims(shapes: Sequence[tuple]) -> tuple:
    """NumPy's broadcast of shapes of dims."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list = [1] * ndim
    for s in shapes:
        for k, n in enumerate(s, start=ndim - len(s)):
            if not dims_equal(n, 1):
                out[k] = n
    return tuple(out)


def indexed(p: Positions, indices: Sequence[Optional[Positions]]) -> Positions:
    """aten.index.Tensor of positions by positions (None leaves an axis whole), NumPy's layout: the
    indexed axes' broadcast shape replaces them where they are adjacent, else leads."""
    picked = [k for k, ix in enumerate(indices) if ix is not None]
    shape = broadcast_dims([indices[k].shape for k in picked])
    lifted = {k: indices[k].expanded(shape) for k in picked}
    offset = p.offset + sum((p.steps[k] * lifted[k].offset for k in picked), 0)
    index_steps = tuple(sum((p.steps[k] * lifted[k].steps[a] for k in picked), 0) for a in range(len(shape)))
    rest = [k for k in range(len(p.shape)) if k not in picked]
    adjacent = picked == list(range(picked[0], picked[-1] + 1))
    before = [k for k in rest if k < picked[0]] if adjacent else []
    after = [k for k in rest if k not in before]
    out_shape = tuple(p.shape[k] for k in before) + shape + tuple(p.shape[k] for k in after)
    out_steps = tuple(p.steps[k] for k in before) + index_steps + tuple(p.steps[k] for k in after)
    return Positions(out_shape, tuple(dim(s) for s in out_steps), dim(offset))
