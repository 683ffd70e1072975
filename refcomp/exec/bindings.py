"""Checking feeds and binding symbolic dims: shared by the reference interpreter and compiled programs.

A graph is built once with symbols; each run binds every symbol to an int, read off the fed arrays
(or given as `dims=`). Any disagreement is reported with the input and the dim at fault.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np
import sympy

from ..errors import BindingError, FeedError
from ..ops.primitives import Node


def check_feed(node: Node, value) -> np.ndarray:
    name = node.attrs["name"]
    array = np.asarray(value)
    if node.dtype == "int32":
        if array.dtype.kind not in "iu":
            raise FeedError(f"input {name!r} takes int32 ids, but the fed array has dtype {array.dtype}")
        if array.size and (array.max() > np.iinfo(np.int32).max or array.min() < np.iinfo(np.int32).min):
            raise FeedError(f"input {name!r}: ids do not fit in int32")
        return np.ascontiguousarray(array, dtype=np.int32)
    if array.dtype.kind != "f":
        raise FeedError(f"input {name!r} takes float32, but the fed array has dtype {array.dtype} (convert it with .astype(np.float32))")
    return array


def bind_dims(inputs: list[Node], feeds: Mapping[str, object], dims: Optional[Mapping[str, int]] = None) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Validated feeds by input name, and the value of every symbol they (and `dims`) determine."""
    if not isinstance(feeds, Mapping):
        raise FeedError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
    known = {n.attrs["name"] for n in inputs}
    unknown = sorted(set(feeds) - known)
    if unknown:
        raise FeedError(f"feed {unknown[0]!r} matches no input of this graph (its inputs are {sorted(known)})")
    bindings: dict[str, int] = {}
    origin: dict[str, str] = {}
    for name, value in (dims or {}).items():
        if not isinstance(value, (int, np.integer)) or value < 0:
            raise BindingError(f"dims[{name!r}] = {value!r} must be a non-negative int")
        bindings[name], origin[name] = int(value), "dims="
    arrays: dict[str, np.ndarray] = {}
    for node in inputs:
        name = node.attrs["name"]
        if name not in feeds:
            raise FeedError(f"input {name!r} was not fed (feeds given: {sorted(feeds)})")
        array = check_feed(node, feeds[name])
        shape = node.attrs["shape"]
        if array.ndim != len(shape):
            raise FeedError(f"input {name!r} expects {len(shape)} axes {tuple(map(str, shape))}, got an array of shape {array.shape}")
        for axis, (want, got) in enumerate(zip(shape, array.shape)):
            if isinstance(want, sympy.Symbol):
                sym = want.name
                if sym in bindings and bindings[sym] != got:
                    raise BindingError(f"dimension {sym} is {bindings[sym]} from {origin[sym]} but {got} from axis {axis} of input {name!r}")
                bindings[sym], origin[sym] = got, f"input {name!r}"
            elif want != got:
                raise FeedError(f"input {name!r} expects size {want} on axis {axis}, got an array of shape {array.shape}")
        arrays[name] = array
    return arrays, bindings
