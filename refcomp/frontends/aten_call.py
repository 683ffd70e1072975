"""One ATen node's import: the context a converter works in, and the integer rules around it.

`Call.run` gives every node the same treatment before and after its row's converter
(frontends/aten_table.py) runs:

1. an integer or boolean result whose inputs are all static is **folded**: the ATen op itself runs
   on the concrete values (torch is at hand), as any shape computation is;
2. an integer (not boolean) result of a row with an `affine` rule, whose integer inputs are all
   affine, stays **positions** (aten_values);
3. otherwise the converter builds refcomp tensors: integer inputs reach it as exact float32
   tensors, except the arguments its row lists in `raw` (indices), which it takes as they are; a fed
   integer input moved by a view op keeps its int32 ids beside its float32 values;
4. the result is checked against the node's own `meta["val"]`: float results take the node's
   16-bit dtype, boolean results become 0/1 BoolTensors, integer results become IntValues with the
   bound of the row's `ints` rule, which must stay within 2^24 at the dims' largest sizes where the
   op does arithmetic (a selection or a cast of exact integers is exact at any size), and the shape
   must be torch's.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import sympy

from ..errors import RefcompError
from ..ops.dtypes import DTYPES
from ..ops.tensor import BoolTensor, Tensor
from ..ops.elementwise import where
from ..symbolic.dims import dims_equal, prod
from .aten_math import SELECTIONS
from .aten_values import IntValue, Unavailable, address_view, addresses, indexed
from .torch_graph import FLOATS, dtype_name, kind_of, size_expr, source_line

MAX_FOLD_ELEMENTS = 2 ** 24  # the most elements an integer result folded at import time may hold


class Call:
    """The node being imported, for its converter: errors that name it, tensors from its arguments."""

    def __init__(self, importer, node, row):
        self.importer, self.node, self.row = importer, node, row
        self.name = row.name
        self.out = node.meta.get("val")

    # --- errors ----------------------------------------------------------------------------------
    def where(self) -> str:
        line = source_line(self.node)
        return f"{self.name} (node {self.node.name!r}" + (f", {line})" if line else ")")

    def error(self, message: str) -> RefcompError:
        return RefcompError(f"{self.where()}: {message}")

    def located(self, exc: RefcompError) -> RefcompError:
        """A refcomp error raised inside the converter, prefixed with this node (same class)."""
        if str(exc).startswith(self.where()):
            return exc
        located = type(exc)(f"{self.where()}: {exc}")
        located.__cause__ = exc
        return located

    # --- the rules around the converter -----------------------------------------------------------
    def run(self, args: tuple, kwargs: dict):
        unavailable = [v for v in _flat(args) + _flat(tuple(kwargs.values())) if isinstance(v, Unavailable)]
        if unavailable:
            raise self.error(f"reads {unavailable[0].why}, which refcomp does not compute")
        ints = [v for v in _flat(args) + _flat(tuple(kwargs.values())) if isinstance(v, IntValue)]
        if self._integral_out() and self._foldable(args, kwargs):
            return self._fold(args, kwargs)
        if (
            self.row.affine is not None
            and self._integral_out("int")
            and all(v.affine() is not None for v in ints)
            and not any(isinstance(v, Tensor) for v in _flat(args))
        ):
            p = self.row.affine(self, *args, **kwargs)
            if p is not None:
                return self.finish(IntValue(p.shape, dtype_name(self.out.dtype), positions=p))
        fed = [v for v in ints if v.ids is not None]
        if self.row.view and fed and self._integral_out("int"):
            return self._moved_ids(args, kwargs, fed[0].fed)
        bound = self.row.ints(self, *args, **kwargs) if self.row.ints is not None else None
        args, kwargs = self._floats(args, skip=self.row.raw), self._floats_kw(kwargs)
        if self._integral_out("int") and not self.row.view:  # booleans counted or summed: exact integers
            args, kwargs = (_mapped_tensors(args, _counted),
                            {k: _mapped_tensors(v, _counted) for k, v in kwargs.items()})
        return self.finish(self.row.fn(self, *args, **kwargs), bound)

    def _integral_out(self, *kinds: str) -> bool:
        """Every result is an integer (or boolean) tensor."""
        outs = list(self.out) if isinstance(self.out, (list, tuple)) else [self.out]
        return bool(outs) and all(
            _is_tensor(o) and kind_of(o.dtype) in (kinds or ("int", "bool")) for o in outs
        )

    def _foldable(self, args, kwargs) -> bool:
        values = _flat(args) + _flat(tuple(kwargs.values()))
        if any(isinstance(v, Tensor) or isinstance(v, sympy.Basic) for v in values):
            return False
        if any(isinstance(v, IntValue) and v.static is None for v in values):
            return False
        outs = list(self.out) if isinstance(self.out, (list, tuple)) else [self.out]
        return all(
            all(isinstance(n, int) for n in o.shape) and math.prod(o.shape) <= MAX_FOLD_ELEMENTS for o in outs
        )

    def _fold(self, args, kwargs):
        """Run the ATen op on the static values themselves."""
        import torch
        convert = lambda v: torch.from_numpy(np.array(v.static)) if isinstance(v, IntValue) else v  # noqa: E731
        try:
            result = self.node.target(
                *_mapped(args, convert), **{k: _mapped(v, convert) for k, v in kwargs.items()}
            )
        except RuntimeError as exc:  # torch refuses the static values (an index out of range, say)
            raise self.error(f"fails on its static values: {exc}") from exc
        as_value = lambda t: IntValue(tuple(t.shape), dtype_name(t.dtype), static=t.numpy().copy())  # noqa: E731
        return tuple(as_value(t) for t in result) if isinstance(result, (list, tuple)) else as_value(result)

    def _moved_ids(self, args, kwargs, fed: str) -> IntValue:
        """A view op on a fed integer input: still the fed ids, moved (lookups take them as they are)."""
        value = self.finish(self.row.fn(self, *self._floats(args), **self._floats_kw(kwargs)))
        value.ids, value.fed = value.tensor, fed
        return value

    def _floats(self, args: tuple, skip: tuple = ()) -> tuple:
        return tuple(a if k in skip else _mapped(a, self.importer.float_tensor) for k, a in enumerate(args))

    def _floats_kw(self, kwargs: dict) -> dict:
        return {k: _mapped(v, self.importer.float_tensor) for k, v in kwargs.items()}

    # --- the result -------------------------------------------------------------------------------
    def finish(self, result, bound=None):
        if isinstance(self.out, (list, tuple)):
            if not isinstance(result, (list, tuple)) or len(result) != len(self.out):
                raise self.error(f"gives {type(result).__name__} where torch gives {len(self.out)} results")
            bounds = (
                bound if isinstance(bound, tuple) else (bound,) * len(self.out)
            )  # one per result, or shared
            return tuple(self._one(r, o, b) for r, o, b in zip(result, self.out, bounds))
        return self._one(result, self.out, bound)

    def _one(self, result, meta, bound):
        if not _is_tensor(meta) or isinstance(result, Unavailable):
            return result
        kind = kind_of(meta.dtype)
        if kind == "int":
            result = self._integer(result, meta, bound)
        elif kind == "bool" and isinstance(result, Tensor) and not isinstance(result, BoolTensor):
            result = result.ne(0.0)
        elif kind == "float":
            if isinstance(result, IntValue):
                result = self.importer.float_tensor(result)
            want = FLOATS[dtype_name(meta.dtype)]
            if result.dtype != want:
                result = result.to(want)
        self._check_shape(result, meta)
        return result

    def _integer(self, result, meta, bound) -> IntValue:
        if isinstance(result, IntValue):
            return result
        if not isinstance(result, Tensor):
            raise self.error(f"gives {type(result).__name__} where torch gives an integer tensor")
        dtype = "int32" if dtype_name(meta.dtype) == "int32" else "int64"
        if DTYPES[result.dtype].is_int:  # integer arithmetic, exact at any magnitude
            return IntValue(tuple(result.shape), dtype_name(meta.dtype), tensor=result.to(dtype))
        if bound is None:
            raise self.error(
                "computes an integer tensor from float values in a way refcomp cannot keep exact (its "
                "integer results come from integer arithmetic, positions or indices)"
            )
        if self.row.ints not in SELECTIONS:
            self.importer.exact(bound)
        # integers computed in float32 (positions, indices of a maximum), exact by their bound
        return IntValue(tuple(result.shape), dtype_name(meta.dtype), tensor=result.to(dtype), bound=bound)

    def _check_shape(self, result, meta) -> None:
        shape = tuple(result.shape) if isinstance(result, (Tensor, IntValue)) else None
        if shape is None:
            raise self.error(f"gives {type(result).__name__} where torch gives a tensor")
        want = [self.importer.dims.translate(size_expr(n)) for n in meta.shape]
        if len(shape) != len(want) or any(
            w is not None and not dims_equal(w, n) for w, n in zip(want, shape)
        ):
            raise self.error(f"refcomp's result has shape {tuple(map(str, shape))} where torch's has "
                             f"{tuple(str(n) for n in meta.shape)}")

    # --- helpers for converters ---------------------------------------------------------------------
    def tensor(self, value) -> Tensor:
        """A tensor argument (an IntValue as exact float32 values) or a number as a scalar tensor."""
        from ..ops.tensor import constant
        if isinstance(value, IntValue):
            return self.importer.float_tensor(value)
        if isinstance(value, Tensor):
            return value
        if isinstance(value, (bool, np.bool_)):
            return constant(float(value))
        return constant(value)

    def index(self, data: Tensor, indices: list) -> Tensor:
        """aten.index.Tensor's advanced indexing of a float tensor: by positions, a strided view; by one
        fed or static index tensor, index_select; None leaves an axis whole."""
        indices = self.wrapped(indices, data.shape)
        picked = [k for k, ix in enumerate(indices) if ix is not None]
        if not picked:
            return data
        if any(isinstance(indices[k], BoolTensor) for k in picked):
            raise self.error(
                "indexing by a boolean mask is not supported (its result's shape depends on the data)"
            )
        if all(isinstance(indices[k], IntValue) and indices[k].affine() is not None for k in picked):
            p = indexed(addresses(data.shape), [None if ix is None else ix.affine() for ix in indices])
            return address_view(data, p)
        if (
            len(picked) == 1
            and isinstance(indices[picked[0]], IntValue)
            and indices[picked[0]].ids is not None
        ):
            axis, ids = picked[0], indices[picked[0]].ids
            flat = data.index_select(axis, ids.reshape(-1))
            return flat.reshape(tuple(data.shape[:axis]) + tuple(ids.shape) + tuple(data.shape[axis + 1:]))
        if all(isinstance(indices[k], IntValue) and indices[k].static is not None for k in picked):
            return self._static_index(data, picked, [indices[k].static for k in picked])
        if all(isinstance(indices[k], IntValue) for k in picked):
            return self._computed_index(
                data, picked, [self.importer.float_tensor(indices[k]) for k in picked]
            )
        raise self.error("indexes by float tensors (PyTorch takes integer or boolean ones)")

    def _computed_index(self, data: Tensor, picked: list, ids: list) -> Tensor:
        """Integer index tensors computed at run time: negatives counted from the end (PyTorch's), the
        indexed axes moved together and merged as `_static_index` does, and read by index_select at the
        flat positions the kernels compute (the runner checks them before the lookup)."""
        sizes = [data.shape[k] for k in picked]
        ids = [where(i < 0, i + n, i) for i, n in zip(ids, sizes)]
        flat = ids[0]
        for i, n in zip(ids[1:], sizes[1:]):
            flat = flat * n + i  # NumPy's ravel_multi_index, broadcasting
        rest = [k for k in range(data.ndim) if k not in picked]
        at = picked[0] if picked == list(range(picked[0], picked[-1] + 1)) else 0
        moved = data.permute(*(rest[:at] + picked + rest[at:]))
        merged = moved.reshape(
            tuple(moved.shape[:at]) + (prod(sizes),) + tuple(moved.shape[at + len(picked):])
        )
        out = merged.index_select(at, flat.reshape(-1))
        return out.reshape(tuple(merged.shape[:at]) + tuple(flat.shape) + tuple(merged.shape[at + 1:]))

    def _static_index(self, data: Tensor, picked: list, arrays: list) -> Tensor:
        """Static index arrays (not affine): the indexed axes moved together (to the front unless they are
        adjacent, NumPy's layout), merged into one, and read by index_select at the static flat positions."""
        sizes = [data.shape[k] for k in picked]
        if not all(isinstance(n, int) for n in sizes):
            raise self.error(f"static indices into axes of sizes {sizes} need known sizes")
        arrays = np.broadcast_arrays(*arrays)
        if any(a.size and (a.min() < 0 or a.max() >= n) for a, n in zip(arrays, sizes)):
            raise self.error(f"static indices out of range for axes of sizes {sizes}")
        rest = [k for k in range(data.ndim) if k not in picked]
        at = picked[0] if picked == list(range(picked[0], picked[-1] + 1)) else 0
        order = rest[:at] + picked + rest[at:]
        moved = data.permute(*order)
        merged = moved.reshape(
            tuple(moved.shape[:at]) + (math.prod(sizes),) + tuple(moved.shape[at + len(picked) :])
        )
        flat = np.ravel_multi_index(arrays, sizes) if arrays[0].size else np.zeros(arrays[0].shape, np.int64)
        ids = self.importer.ids_tensor(
            IntValue(flat.shape, "int64", static=flat.reshape(-1)), merged.shape[at], self
        )
        out = merged.index_select(at, ids)
        return out.reshape(tuple(merged.shape[:at]) + flat.shape + tuple(merged.shape[at + 1:]))

    def wrapped(self, indices: list, shape: tuple) -> list:
        """aten.index's static indices with negatives counted from the end of their axis (PyTorch's)."""
        out = list(indices)
        for k, ix in enumerate(indices):
            if isinstance(ix, IntValue) and ix.static is not None and ix.static.size and ix.static.min() < 0:
                if not isinstance(shape[k], int):
                    raise self.error(f"negative indices need a known axis length, not {shape[k]}")
                values = np.where(ix.static < 0, ix.static + shape[k], ix.static)
                out[k] = IntValue(ix.shape, ix.dtype, static=values)
        return out

    def out_shape(self, k: Optional[int] = None) -> tuple:
        """torch's shape of the (k-th) result, as refcomp dims."""
        meta = self.out if k is None else self.out[k]
        return self.importer.dims.shape(meta.shape, self.where())


def _is_tensor(meta) -> bool:
    return hasattr(meta, "dtype") and hasattr(meta, "shape")


def _flat(values: tuple) -> list:
    out = []
    for v in values:
        out.extend(_flat(tuple(v)) if isinstance(v, (list, tuple)) else [v])
    return out


def _counted(t: Tensor) -> Tensor:
    """A boolean (0/1) tensor as int64, so integer results computed from it are exact."""
    return t.long() if isinstance(t, BoolTensor) else t


def _mapped_tensors(value, fn):
    """`fn` applied to every Tensor inside lists and tuples (other values kept)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_mapped_tensors(v, fn) for v in value)
    return fn(value) if isinstance(value, Tensor) else value


def _mapped(value, fn):
    """`fn` applied to every IntValue inside lists and tuples (other values kept)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_mapped(v, fn) for v in value)
    return fn(value) if isinstance(value, IntValue) else value

